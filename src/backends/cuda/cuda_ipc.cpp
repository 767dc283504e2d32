// CUDA IPC, the exporting side: a client of a broker on its host hands the broker a device
// buffer by its IPC memory handle (Client::upload_cuda / read_into_cuda over RemoteClient). The
// importing side is CudaDevice::copy_foreign (cuda_backend.cpp).
#include <fmt/format.h>

#include <cstring>

#include "backends/cuda/cuda_api.h"
#include "backends/cuda/cuda_backend.h"
#include "core/errors.h"

namespace tensord::cuda {

std::string format_uuid(const unsigned char b[16]) {
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += fmt::format("{:02x}", b[i]);
  }
  return out;
}

Result<ForeignMemory> export_device_memory(const void* ptr, size_t bytes, bool ipc) {
  const char* pre = ipc ? "CUDA IPC" : "CUDA memory";
  std::string why;
  const DriverApi* api = driver_api(&why);
  if (!api) return errors::FailedPrecondition("{}: no CUDA driver in this process: {}", pre, why);
  CUresult r = api->cuInit(0);
  auto fail = [&](const char* what, CUresult res) {
    const char* name = nullptr;
    api->cuGetErrorName(res, &name);
    return errors::FailedPrecondition("{}: {} failed: {} ({})", pre, what, name ? name : "CUDA error",
                                      static_cast<int>(res));
  };
  if (r != CUDA_SUCCESS) return fail("cuInit (no CUDA device or driver here?)", r);
  if (!ptr) return errors::InvalidArgument("{}: a null device pointer", pre);
  const auto dptr = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr));
  unsigned int type = 0;
  r = api->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dptr);
  if (r != CUDA_SUCCESS || type != CU_MEMORYTYPE_DEVICE)
    return errors::FailedPrecondition(
        "{}: {} is not CUDA device memory of this process (host or managed memory has no IPC "
        "handle; upload() copies host memory)",
        pre, ptr);
  int ordinal = -1;
  r = api->cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dptr);
  if (r != CUDA_SUCCESS) return fail("cuPointerGetAttribute(DEVICE_ORDINAL)", r);
  CUdevice dev = 0;
  if ((r = api->cuDeviceGet(&dev, ordinal)) != CUDA_SUCCESS) return fail("cuDeviceGet", r);
  // cuIpcGetMemHandle needs a current context: the primary one where the caller set none.
  CUcontext current = nullptr;
  api->cuCtxGetCurrent(&current);
  CUcontext primary = nullptr;
  if (!current) {
    if ((r = api->cuDevicePrimaryCtxRetain(&primary, dev)) != CUDA_SUCCESS) return fail("cuDevicePrimaryCtxRetain", r);
    api->cuCtxSetCurrent(primary);
  }
  struct Restore {
    const DriverApi* api;
    CUcontext primary;
    CUdevice dev;
    ~Restore() {
      if (primary) {
        api->cuCtxSetCurrent(nullptr);
        api->cuDevicePrimaryCtxRelease(dev);
      }
    }
  } restore{api, primary, dev};
  CUdeviceptr base = 0;
  size_t size = 0;
  if ((r = api->cuMemGetAddressRange(&base, &size, dptr)) != CUDA_SUCCESS) return fail("cuMemGetAddressRange", r);
  const uint64_t offset = dptr - base;
  if (bytes > size - offset)
    return errors::OutOfRange("{}: {} bytes at {} overrun its allocation ({} bytes from there)", pre, bytes, ptr,
                              size - offset);
  CUipcMemHandle handle{};
  r = ipc ? api->cuIpcGetMemHandle(&handle, base) : CUDA_SUCCESS;
  if (r != CUDA_SUCCESS)
    return errors::FailedPrecondition(
        "CUDA IPC: cuIpcGetMemHandle refused the allocation of {} ({}; memory from cudaMallocAsync pools, "
        "cuMemCreate or a device or platform without CUDA IPC cannot be exported)",
        ptr, [&] {
          const char* name = nullptr;
          api->cuGetErrorName(r, &name);
          return std::string(name ? name : "CUDA error");
        }());
  CUuuid uuid{};
  if ((r = api->cuDeviceGetUuid(&uuid, dev)) != CUDA_SUCCESS) return fail("cuDeviceGetUuid", r);
  ForeignMemory m;
  m.kind = "cuda";
  if (ipc) m.ipc_handle.assign(handle.reserved, CU_IPC_HANDLE_SIZE);
  else m.pointer = base;
  m.offset = offset;
  m.size = size - offset;
  m.device_uuid = format_uuid(reinterpret_cast<const unsigned char*>(uuid.bytes));
  return m;
}

}  // namespace tensord::cuda
