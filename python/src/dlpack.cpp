// DLPack (the unversioned "dltensor" capsule NumPy 1.24 and PyTorch 1.13 speak).
//
// Export: an embedded engine's cpu tensor is lent in place (Client::map_host, zero copy; the
// capsule keeps the engine's buffer alive); elsewhere (a remote broker) the value is read once
// and the capsule owns that copy.
// Import: a contiguous cpu tensor becomes an engine tensor over the same bytes
// (Client::upload_external, zero copy when the engine's device is host memory and the data is
// 64-byte aligned); elsewhere it is uploaded (one copy). The producer's deleter runs once the
// engine drops the bytes.
// CUDA (kDLCUDA): an embedded engine's cuda tensor is lent in place too (Client::map_cuda; the
// capsule names its GPU); a kDLCUDA tensor is imported with one device-to-device copy
// (Client::upload_cuda: on the GPU holding it, or by CUDA IPC to a broker on this host), and
// refused, naming why, where no CUDA device can take it.
#include <Python.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#include "common.h"

namespace tensord::python {
namespace {

// ---- the DLPack ABI (dlpack.h v0.8, without the header: Debian ships none)
enum DLDeviceType : int32_t { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLOpenCL = 4 };
struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
enum DLDataTypeCode : uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6 };
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

Result<DLDataType> to_dl(DType t) {
  const uint8_t bits = static_cast<uint8_t>(dtype_size(t) * 8);
  switch (t) {
    case DType::kFloat16: case DType::kFloat32: case DType::kFloat64:
      return DLDataType{kDLFloat, bits, 1};
    case DType::kBFloat16: return DLDataType{kDLBfloat, 16, 1};
    case DType::kInt8: case DType::kInt16: case DType::kInt32: case DType::kInt64:
      return DLDataType{kDLInt, bits, 1};
    case DType::kUInt8: case DType::kUInt16: case DType::kUInt32: case DType::kUInt64:
      return DLDataType{kDLUInt, bits, 1};
    case DType::kBool: return DLDataType{kDLBool, 8, 1};
    default: break;
  }
  return Status(StatusCode::kInvalidArgument,
                std::string("DLPack: no DLPack type for ") + dtype_name(t));
}

Result<DType> from_dl(DLDataType t) {
  if (t.lanes != 1)
    return Status(StatusCode::kInvalidArgument,
                  "from_dlpack: vector types (lanes=" + std::to_string(t.lanes) +
                      ") are not supported");
  switch (t.code) {
    case kDLFloat:
      if (t.bits == 16) return DType::kFloat16;
      if (t.bits == 32) return DType::kFloat32;
      if (t.bits == 64) return DType::kFloat64;
      break;
    case kDLBfloat:
      if (t.bits == 16) return DType::kBFloat16;
      break;
    case kDLInt:
      if (t.bits == 8) return DType::kInt8;
      if (t.bits == 16) return DType::kInt16;
      if (t.bits == 32) return DType::kInt32;
      if (t.bits == 64) return DType::kInt64;
      break;
    case kDLUInt:
      if (t.bits == 8) return DType::kUInt8;
      if (t.bits == 16) return DType::kUInt16;
      if (t.bits == 32) return DType::kUInt32;
      if (t.bits == 64) return DType::kUInt64;
      break;
    case kDLBool:
      if (t.bits == 8) return DType::kBool;
      break;
  }
  return Status(StatusCode::kInvalidArgument,
                "from_dlpack: unsupported DLPack type (code " + std::to_string(t.code) + ", " +
                    std::to_string(t.bits) + " bits)");
}

// ---- deferred release of Python-owned memory (see call_with_gil)
std::mutex pending_mu;
std::deque<std::pair<void (*)(void*), void*>> pending;

int drain_pending(void*) {
  for (;;) {
    std::pair<void (*)(void*), void*> item;
    {
      std::lock_guard<std::mutex> lock(pending_mu);
      if (pending.empty()) return 0;
      item = pending.front();
      pending.pop_front();
    }
    item.first(item.second);
  }
}

// ---- export
struct ExportContext {
  std::shared_ptr<const void> keepalive;  // engine buffer (map_host) or HostTensor bytes
  std::vector<int64_t> shape;
  DLManagedTensor managed{};
};

void export_deleter(DLManagedTensor* self) {
  delete static_cast<ExportContext*>(self->manager_ctx);
}

void capsule_destructor(PyObject* capsule) {
  // Consumers rename a capsule they took ("used_dltensor"); only an unconsumed one is ours.
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (managed && managed->deleter) managed->deleter(managed);
}

alignas(64) unsigned char empty_bytes[64];

py::capsule make_capsule(const TensorView& view, std::shared_ptr<const void> keepalive,
                         DLDevice device = {kDLCPU, 0}) {
  DLDataType dt = value_or_throw(to_dl(view.dtype));
  auto* ctx = new ExportContext;
  ctx->keepalive = std::move(keepalive);
  ctx->shape = view.shape;
  DLTensor& t = ctx->managed.dl_tensor;
  t.data = view.data ? const_cast<void*>(view.data) : empty_bytes;
  t.device = device;
  t.ndim = static_cast<int32_t>(ctx->shape.size());
  t.dtype = dt;
  t.shape = ctx->shape.empty() ? nullptr : ctx->shape.data();
  t.strides = nullptr;  // compact row-major
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = export_deleter;
  PyObject* cap = PyCapsule_New(&ctx->managed, "dltensor", capsule_destructor);
  if (!cap) {
    delete ctx;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(cap);
}

// The ordinal of an OpenCL device name ("opencl:1", "n2/opencl:0"), or -1 for other kinds.
int opencl_ordinal(const std::string& device) {
  const size_t slash = device.rfind('/');
  const std::string local = slash == std::string::npos ? device : device.substr(slash + 1);
  if (local.rfind("opencl:", 0) != 0) return -1;
  try {
    return std::stoi(local.substr(7));
  } catch (...) {
    return 0;
  }
}

// A host copy of the array's value as a kDLCPU capsule (one read).
py::capsule host_copy_capsule(const Array& a, TensorHandle h, Client* client) {
  (void)a;
  Result<HostTensor> host = Status(StatusCode::kUnknown, "");
  {
    py::gil_scoped_release release;
    host = client->read(h);
  }
  HostTensor t = value_or_throw(std::move(host));
  auto owner = std::make_shared<HostTensor>(t);
  return make_capsule(owner->view(), std::shared_ptr<const void>(owner, owner->data()));
}

// Array.__dlpack__: zero copy where the bytes are in this process, else one read. An OpenCL
// array is refused unless `to_host` (the caller asked for dl_device kDLCPU): its bytes are in
// OpenCL memory, which no DLPack consumer here can take, and its __dlpack_device__ says so.
py::capsule array_dlpack(const Array& a, bool to_host) {
  TensorHandle h;
  Client* client;
  {
    py::gil_scoped_release release;
    Result<TensorHandle> r = a.handle();
    if (!r.ok()) {
      py::gil_scoped_acquire acquire;
      throw_status(r.status());
    }
    h = *r;
    client = &a.context()->client();
  }
  if (const int cl = opencl_ordinal(a.device()); cl >= 0) {
    if (!to_host) {
      PyErr_SetString(PyExc_BufferError,
                      ("__dlpack__: the array lives on " + a.device() +
                       " (DLPack device (kDLOpenCL=4, " + std::to_string(cl) +
                       ")), which this consumer cannot take: ask for a host copy with "
                       "__dlpack__(dl_device=(1, 0)) (from_dlpack(x, device=\"cpu\")), or "
                       "use x.to(\"cpu:0\") or x.numpy()")
                          .c_str());
      throw py::error_already_set();
    }
    return host_copy_capsule(a, h, client);
  }
  if (to_host) {
    // Where the bytes are host memory of this process they are lent, else read.
    Result<HostMapping> mapped = Status(StatusCode::kUnknown, "");
    {
      py::gil_scoped_release release;
      mapped = client->map_host(h);
    }
    if (mapped.ok()) return make_capsule(mapped->view, mapped->keepalive);
    return host_copy_capsule(a, h, client);
  }
  // On a GPU of the embedded engine: lent in place, as kDLCUDA.
  Result<CudaMapping> on_gpu = Status(StatusCode::kUnknown, "");
  {
    py::gil_scoped_release release;
    on_gpu = client->map_cuda(h);
  }
  if (on_gpu.ok())
    return make_capsule(on_gpu->view, on_gpu->keepalive, DLDevice{kDLCUDA, on_gpu->device_index});
  if (on_gpu.status().code() != StatusCode::kUnimplemented &&
      on_gpu.status().code() != StatusCode::kFailedPrecondition)
    throw_status(on_gpu.status());
  Result<HostMapping> mapped = Status(StatusCode::kUnknown, "");
  {
    py::gil_scoped_release release;
    mapped = client->map_host(h);
  }
  if (mapped.ok()) return make_capsule(mapped->view, mapped->keepalive);
  const StatusCode code = mapped.status().code();
  if (code != StatusCode::kUnimplemented && code != StatusCode::kFailedPrecondition)
    throw_status(mapped.status());
  return host_copy_capsule(a, h, client);
}

// Array.__dlpack_device__: (kDLCUDA, ordinal) where __dlpack__ will lend GPU memory,
// (kDLOpenCL, ordinal) for an OpenCL array (embedded or on a broker), else (kDLCPU, 0).
py::tuple array_dlpack_device(const Array& a) {
  if (const int cl = opencl_ordinal(a.device()); cl >= 0)
    return py::make_tuple(static_cast<int>(kDLOpenCL), cl);
  Result<CudaMapping> on_gpu = Status(StatusCode::kUnknown, "");
  {
    py::gil_scoped_release release;
    auto h = a.handle();
    on_gpu = h.ok() ? a.context()->client().map_cuda(*h) : Result<CudaMapping>(h.status());
  }
  if (on_gpu.ok()) return py::make_tuple(static_cast<int>(kDLCUDA), on_gpu->device_index);
  return py::make_tuple(static_cast<int>(kDLCPU), 0);
}

// The data pointer of an Array's bytes in this process (0 where they are elsewhere): how the
// tests check that an exchange shared memory.
uintptr_t array_host_pointer(const Array& a) {
  py::gil_scoped_release release;
  auto h = a.handle();
  if (!h.ok()) return 0;
  auto mapped = a.context()->client().map_host(*h);
  return mapped.ok() ? reinterpret_cast<uintptr_t>(mapped->view.data) : 0;
}

void call_managed_deleter(void* p) {
  auto* managed = static_cast<DLManagedTensor*>(p);
  if (managed->deleter) managed->deleter(managed);
}

// tensord.from_dlpack's core: a capsule -> an Array, or None when the tensor is not compact
// row-major (the Python layer then copies it once through NumPy).
py::object array_from_capsule(const PyClient& c, py::capsule capsule, const std::string& device) {
  PyObject* cap = capsule.ptr();
  if (!PyCapsule_IsValid(cap, "dltensor"))
    throw StatusError(Status(StatusCode::kInvalidArgument,
                             "from_dlpack: not a DLPack capsule, or one already consumed"));
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
  const DLTensor& t = managed->dl_tensor;
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost &&
      t.device.device_type != kDLCUDA)
    throw StatusError(Status(StatusCode::kUnimplemented,
                             "from_dlpack: tensors of DLPack device type " +
                                 std::to_string(t.device.device_type) +
                                 " are not supported (cpu memory and CUDA device memory only)"));
  DType dtype = value_or_throw(from_dl(t.dtype));
  Shape shape(t.shape, t.shape + t.ndim);
  for (int64_t d : shape)
    if (d < 0) throw StatusError(Status(StatusCode::kInvalidArgument, "from_dlpack: negative dim"));
  if (t.strides) {
    int64_t expected = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (shape[i] != 1 && t.strides[i] != expected) return py::none();
      expected *= shape[i];
    }
  }
  TensorView view{dtype, shape, static_cast<const char*>(t.data) + t.byte_offset};
  if (t.device.device_type == kDLCUDA) {
    // GPU memory: one device-to-device copy (upload_cuda), finished before the capsule is
    // consumed; "" = the cuda device holding it. Refused, naming why, where there is none.
    Result<TensorHandle> h = Status(StatusCode::kUnknown, "");
    Result<TensorInfo> info = Status(StatusCode::kUnknown, "");
    {
      py::gil_scoped_release release;
      h = c.client().upload_cuda(view, device);
      if (h.ok()) info = c.client().info(*h);
    }
    if (!h.ok())
      throw_status(h.status().with_context("from_dlpack: a CUDA tensor (kDLCUDA, device " +
                                           std::to_string(t.device.device_id) + ")"));
    check(info.status());
    if (PyCapsule_SetName(cap, "used_dltensor") != 0) throw py::error_already_set();
    if (managed->deleter) managed->deleter(managed);  // copied: the producer's memory is free
    return py::cast(Array::from_handle(c.ctx, *h, TensorType{dtype, shape}, info->device));
  }
  // Ours now: the producer's deleter runs when the engine drops the bytes (any thread).
  if (PyCapsule_SetName(cap, "used_dltensor") != 0) throw py::error_already_set();
  std::shared_ptr<void> keepalive(managed, [](void* p) { call_with_gil(call_managed_deleter, p); });
  Result<TensorHandle> h = Status(StatusCode::kUnknown, "");
  std::string dev = device.empty() ? c.client().default_device() : device;
  {
    py::gil_scoped_release release;
    h = c.client().upload_external(view, dev, std::move(keepalive));
  }
  check(h.status());
  return py::cast(Array::from_handle(c.ctx, *h, TensorType{dtype, shape}, dev));
}

}  // namespace

void call_with_gil(void (*fn)(void*), void* arg) {
  if (!Py_IsInitialized()) return;  // interpreter gone: leak rather than crash
  if (PyGILState_Check()) {
    fn(arg);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(pending_mu);
    pending.emplace_back(fn, arg);
  }
  // Thread-safe without the GIL. If its queue is full the item waits for the next drain.
  Py_AddPendingCall(drain_pending, nullptr);
}

void register_dlpack(py::module_& m) {
  m.def("_array_dlpack", &array_dlpack, py::arg("a"), py::arg("to_host") = false);
  m.def("_array_host_pointer", &array_host_pointer);
  m.def("_array_dlpack_device", &array_dlpack_device);
  m.def("_array_from_capsule", &array_from_capsule, py::arg("client"), py::arg("capsule"),
        py::arg("device") = "");
  m.def("_drain_releases", [] { drain_pending(nullptr); });
}

}  // namespace tensord::python
