#include "backends/cuda/cuda_backend.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>

#include "backends/codegen/gpu_kernels.h"
#include "backends/codegen/lower.h"
#include "backends/codegen/printer.h"
#include "backends/codegen/templates.h"
#include "backends/cuda/cuda_api.h"
#include "core/errors.h"
#include "core/node_attrs.h"
#include "tensord/version.h"

namespace tensord::cuda {
namespace {

std::atomic<int64_t> g_programs_built{0};
std::atomic<int64_t> g_kernels_launched{0};
std::atomic<int64_t> g_disk_hits{0};
std::atomic<int64_t> g_compile_failures{0};
std::atomic<int64_t> g_graph_captures{0};
std::atomic<int64_t> g_graph_replays{0};
std::atomic<int64_t> g_cudnn_rnn_calls{0};
std::atomic<int64_t> g_lt_fused_calls{0};
std::atomic<int64_t> g_conv_fused{0};
std::atomic<int64_t> g_lt_fallbacks{0};
// The device this thread is recording a run on (CudaRunRecorder), and the stream it records
// on: that thread's launches for that device go to the recording stream; other threads'
// launches stay on the device's stream, out of the recording.
thread_local const void* t_recording_device = nullptr;
thread_local CUstream t_recording_stream = nullptr;
codegen::SourceLog g_sources;
std::mutex g_collector_mu;
std::function<void(const std::string&, const std::string&)> g_collector;

bool env_is(const char* var, const char* value) {
  const char* v = std::getenv(var);
  return v && std::string(v) == value;
}

std::string cu_error(const DriverApi* api, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api) {
    api->cuGetErrorName(r, &name);
    api->cuGetErrorString(r, &text);
  }
  return fmt::format("{} ({}{})", name ? name : "CUDA error", static_cast<int>(r),
                     text ? std::string(": ") + text : std::string());
}

Status cu_status(const DriverApi* api, CUresult r, const std::string& device, const std::string& what) {
  const StatusCode code = r == CUDA_ERROR_OUT_OF_MEMORY ? StatusCode::kResourceExhausted : StatusCode::kInternal;
  return Status(code, fmt::format("{}: {} failed: {}", device, what, cu_error(api, r)));
}

// ---- NVRTC, and the disk cache of what it compiled ----

// The disk cache (codegen::ProgramDiskCache, TENSORD_KERNEL_CACHE: the OpenCL backend's
// folder); CUDA entries end in .cubin/.ptx.
constexpr char kCacheMagic[] = "tensord-cuda-code-v1\n";

std::string nvrtc_version_string(const NvrtcApi* api) {
  int major = 0, minor = 0;
  if (api && api->nvrtcVersion(&major, &minor) == NVRTC_SUCCESS) return fmt::format("{}.{}", major, minor);
  return "?";
}

// Compiles through the disk cache: the entry is keyed by arch, NVRTC version and source.
Result<CompiledCode> compile_cached(const std::string& source, const std::string& arch, bool* from_disk) {
  *from_disk = false;
  std::string why;
  const NvrtcApi* api = nvrtc_api(&why);
  if (!api) return errors::Unavailable("NVRTC is not available: {}", why);
  const bool cubin = arch.rfind("sm_", 0) == 0;
  const codegen::ProgramDiskCache cache(kCacheMagic, arch + "|nvrtc " + nvrtc_version_string(api), source,
                                        cubin ? "cubin" : "ptx");
  if (std::string image = cache.load(); !image.empty()) {
    *from_disk = true;
    g_disk_hits++;
    return CompiledCode{arch, cubin, std::move(image)};
  }
  TD_ASSIGN_OR_RETURN(CompiledCode code, nvrtc_compile(source, arch));
  cache.store(code.image);
  return code;
}

// ---- devices ----

class CudaDevice;

// A module with its one kernel, per device and source.
struct Program final : codegen::GpuProgram {
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  const DriverApi* api = nullptr;
  int block = 256;
  ~Program() override {
    if (module && api) api->cuModuleUnload(module);
  }
};

// A device buffer argument: the allocation's base address and the tensor's byte offset.
using Arg = codegen::GpuArg;

// The device's kernel list, ahead of the shared entries, and its cuBLASLt groups (defined
// with its kernels below).
std::vector<codegen::GpuKernelEntry> cuda_kernels(CudaDevice* d);
std::vector<Region> lt_regions(CudaDevice* device, const FusionGraph& g, std::vector<bool>* taken,
                               std::vector<std::string>* notes);
std::vector<Region> conv_fusion_regions(CudaDevice* device, const FusionGraph& g, std::vector<bool>* taken,
                                        std::vector<std::string>* notes);
// cuBLASLt groups, then cuDNN's fused convolutions.
codegen::BackendRegions lt_regions_of(CudaDevice* d) {
  return [d](const FusionGraph& g, std::vector<bool>* taken, std::vector<std::string>* notes) {
    std::vector<Region> regions = lt_regions(d, g, taken, notes);
    for (Region& r : conv_fusion_regions(d, g, taken, notes)) regions.push_back(std::move(r));
    return regions;
  };
}

constexpr size_t kStagingChunk = size_t{8} << 20;  // two of these per device, pinned

class CudaDevice final : public codegen::GpuDevice {
 public:
  // A real device. `api` is loaded and cuInit succeeded.
  CudaDevice(const DriverApi* api, CUdevice dev, CUcontext ctx, CUstream stream, int index)
      : GpuDevice(&g_sources), api_(api), dev_(dev), ctx_(ctx), stream_(stream), kernels_(this, cuda_kernels(this)),
        regions_(this, lt_regions_of(this)) {
    char name[256] = {0};
    api->cuDeviceGetName(name, sizeof(name), dev);
    size_t total = 0;
    api->cuDeviceTotalMem(&total, dev);
    int major = 0, minor = 0, sms = 0;
    api->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    api->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    api->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    int driver = 0;
    api->cuDriverGetVersion(&driver);
    cc_ = major * 10 + minor;
    CUuuid uuid{};
    if (api->cuDeviceGetUuid(&uuid, dev) == CUDA_SUCCESS)
      uuid_ = format_uuid(reinterpret_cast<const unsigned char*>(uuid.bytes));
    info_.name = "cuda:" + std::to_string(index);
    info_.kind = "cuda";
    info_.index = index;
    info_.vendor = "NVIDIA";
    info_.model = fmt::format("{} (sm_{})", name, cc_);
    info_.memory_bytes = static_cast<int64_t>(total);
    info_.backend = "cuda";
    info_.driver_version = fmt::format("{}.{}", driver / 1000, (driver % 1000) / 10);
    info_.compute_units = sms;
    info_.fp16 = cc_ >= 53;
    std::string why;
    const int64_t dnn = cudnn_version(&why);
    set_backend_version(dnn ? fmt::format("generated kernels, cuBLAS, cuDNN {}.{}.{}", dnn / 10000, (dnn % 10000) / 100,
                                          dnn % 100)
                            : "generated kernels, cuBLAS, no cuDNN");
  }
  // The pretend device of TENSORD_CUDA_COMPILE_ONLY: host memory, kernels compiled, not run.
  explicit CudaDevice(std::string arch)
      : GpuDevice(&g_sources), compile_arch_(std::move(arch)), kernels_(this, cuda_kernels(this)),
        regions_(this, lt_regions_of(this)) {
    info_.name = "cuda:0";
    info_.kind = "cuda";
    info_.index = 0;
    info_.vendor = "NVIDIA";
    info_.model = "compile-only (" + compile_arch_ + ", TENSORD_CUDA_COMPILE_ONLY)";
    info_.memory_bytes = int64_t{1} << 30;
    info_.backend = "cuda";
    set_backend_version("compile only: kernels are not run");
  }
  ~CudaDevice() override {
    if (compile_only()) return;
    api_->cuCtxSetCurrent(ctx_);
    api_->cuStreamSynchronize(stream_);
    release_programs();
    if (blas_ && blas_api_) blas_api_->cublasDestroy(blas_);
    if (lt_ && lt_api_) lt_api_->cublasLtDestroy(lt_);
#if TENSORD_HAVE_CUDNN_H
    if (dnn_ && dnn_api_) dnn_api_->cudnnDestroy(dnn_);
#endif
    for (void* s : staging_)
      if (s) api_->cuMemFreeHost(s);
    for (CUevent e : staging_done_)
      if (e) api_->cuEventDestroy(e);
    if (ready_) api_->cuEventDestroy(ready_);
    api_->cuStreamDestroy(stream_);
    api_->cuDevicePrimaryCtxRelease(dev_);
  }

  bool compile_only() const { return !compile_arch_.empty(); }
  const DeviceInfo& info() const override { return info_; }
  codegen::Dialect dialect() const override { return codegen::Dialect::kCuda; }
  // The CUDA C printer has float16/bfloat16 storage: element-wise chains and reductions over
  // them are generated kernels computing in float32 (codegen/kernel_ir.h Storage).
  bool halves() const override { return true; }
  std::string describe_prefix() const override { return "Cuda"; }
  CUdevice cu_device() const { return dev_; }
  CUcontext context() const { return ctx_; }
  int compute_capability() const { return cc_; }
  void add_peer(const CudaDevice* d) { peers_.push_back(d); }

  // Makes the device's context current on the calling thread (the engine calls from several).
  Status enter() const {
    if (compile_only()) return OkStatus();
    CUresult r = api_->cuCtxSetCurrent(ctx_);
    return r == CUDA_SUCCESS ? OkStatus() : cu_status(api_, r, info_.name, "cuCtxSetCurrent");
  }

  Result<void*> allocate(size_t bytes) override {
    if (compile_only()) {
      void* p = std::calloc(std::max<size_t>(bytes, 1), 1);  // zeros: values read back are defined
      if (!p) return errors::ResourceExhausted("{}: out of host memory ({} bytes)", info_.name, bytes);
      return p;
    }
    TD_RETURN_IF_ERROR(enter());
    CUdeviceptr p = 0;
    CUresult r = api_->cuMemAlloc(&p, std::max<size_t>(bytes, 1));
    if (r != CUDA_SUCCESS) return cu_status(api_, r, info_.name, fmt::format("allocating {} bytes", bytes));
    return reinterpret_cast<void*>(static_cast<uintptr_t>(p));
  }
  void free(void* ptr, size_t bytes) override {
    (void)bytes;
    if (!ptr) return;
    if (compile_only()) {
      std::free(ptr);
      return;
    }
    if (!enter().ok()) return;
    // Stream order: kernels queued on this stream may still read it.
    api_->cuStreamSynchronize(stream_);
    api_->cuMemFree(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr)));
  }

  Status write(const Buffer& dst, size_t offset, const void* src, size_t bytes) override {
    if (offset > dst.size || bytes > dst.size - offset)
      return errors::OutOfRange("{}: write past the end of a buffer", info_.name);
    if (!bytes) return OkStatus();
    if (recording()) return errors::Unimplemented("{}: a host write while recording a run", info_.name);
    if (compile_only()) {
      std::memcpy(static_cast<char*>(dst.ptr) + dst.offset + offset, src, bytes);
      return OkStatus();
    }
    TD_RETURN_IF_ERROR(enter());
    std::lock_guard<std::mutex> lock(staging_mu_);
    TD_RETURN_IF_ERROR(ensure_staging());
    const CUdeviceptr base = address(dst) + offset;
    int k = 0;
    for (auto [off, n] : plan_chunks(bytes, kStagingChunk)) {
      // The half we fill was last handed to a copy two chunks ago: wait for that copy.
      CUresult r = sync_event(k);
      if (r == CUDA_SUCCESS) {
        std::memcpy(staging_[k], static_cast<const char*>(src) + off, n);
        r = api_->cuMemcpyHtoDAsync(base + off, staging_[k], n, stream_);
      }
      if (r == CUDA_SUCCESS) r = api_->cuEventRecord(staging_done_[k], stream_);
      if (r != CUDA_SUCCESS) return cu_status(api_, r, info_.name, "writing to the device");
      k ^= 1;
    }
    CUresult r = api_->cuStreamSynchronize(stream_);
    return r == CUDA_SUCCESS ? OkStatus() : cu_status(api_, r, info_.name, "writing to the device");
  }

  Status read(const Buffer& src, size_t offset, void* dst, size_t bytes) override {
    if (offset > src.size || bytes > src.size - offset)
      return errors::OutOfRange("{}: read past the end of a buffer", info_.name);
    if (!bytes) return OkStatus();
    if (recording()) return errors::Unimplemented("{}: a host read while recording a run", info_.name);
    if (compile_only()) {
      std::memcpy(dst, static_cast<const char*>(src.ptr) + src.offset + offset, bytes);
      return OkStatus();
    }
    TD_RETURN_IF_ERROR(enter());
    std::lock_guard<std::mutex> lock(staging_mu_);
    TD_RETURN_IF_ERROR(ensure_staging());
    const CUdeviceptr base = address(src) + offset;
    const auto chunks = plan_chunks(bytes, kStagingChunk);
    // Copy chunk i+1 while chunk i is copied out of its staging half.
    auto issue = [&](size_t i) -> CUresult {
      const int k = static_cast<int>(i % 2);
      CUresult r = api_->cuMemcpyDtoHAsync(staging_[k], base + chunks[i].first, chunks[i].second, stream_);
      return r == CUDA_SUCCESS ? api_->cuEventRecord(staging_done_[k], stream_) : r;
    };
    CUresult r = issue(0);
    for (size_t i = 0; i < chunks.size() && r == CUDA_SUCCESS; ++i) {
      if (i + 1 < chunks.size()) r = issue(i + 1);
      if (r == CUDA_SUCCESS) r = sync_event(static_cast<int>(i % 2));
      if (r == CUDA_SUCCESS)
        std::memcpy(static_cast<char*>(dst) + chunks[i].first, staging_[i % 2], chunks[i].second);
    }
    return r == CUDA_SUCCESS ? OkStatus() : cu_status(api_, r, info_.name, "reading from the device");
  }

  const KernelTable& kernels() const override { return kernels_; }
  RegionCompiler* region_compiler() override { return &regions_; }

  // Same device: a device copy. Another CUDA device: cuMemcpyPeerAsync when peer access was
  // enabled between the two, after the source's stream has finished what it queued (its
  // producer may still run); finished before returning (the source may be freed right after).
  bool copy_from(const Buffer& dst, const Buffer& src) override {
    auto* other = dynamic_cast<CudaDevice*>(src.device);
    if (!other || dst.size < src.size || recording()) return false;
    if (!src.size) return true;
    if (compile_only() || other->compile_only()) {
      if (other != this) return false;
      std::memmove(static_cast<char*>(dst.ptr) + dst.offset, static_cast<const char*>(src.ptr) + src.offset, src.size);
      return true;
    }
    if (other != this && std::find(peers_.begin(), peers_.end(), other) == peers_.end()) return false;
    if (!enter().ok()) return false;
    CUresult r = CUDA_SUCCESS;
    if (other != this) {
      // The source's producer may still run on its stream: this stream waits for it on the
      // GPU (an event), not the host.
      CUevent ready = nullptr;
      r = other->enter().ok() ? other->ready_event(&ready) : CUDA_ERROR_INVALID_CONTEXT;
      if (r == CUDA_SUCCESS) r = api_->cuCtxSetCurrent(ctx_);
      if (r == CUDA_SUCCESS) r = api_->cuStreamWaitEvent(stream_, ready, 0);
      if (r == CUDA_SUCCESS)
        r = api_->cuMemcpyPeerAsync(address(dst), ctx_, other->address(src), other->ctx_, src.size, stream_);
      // Finished before returning: the source may be freed (on its device) right after.
      if (r == CUDA_SUCCESS) r = api_->cuStreamSynchronize(stream_);
    } else {
      // Same device, same stream: ordered after the producer and before every later reader
      // or reuse of either buffer (the pool's blocks are reused in stream order; read()
      // synchronises), so nothing waits here.
      r = api_->cuMemcpyDtoDAsync(address(dst), address(src), src.size, stream_);
    }
    return r == CUDA_SUCCESS;
  }

  // Foreign memory (CUDA IPC from another process on this host, or a pointer of this
  // process): a device-to-device copy on the device's stream, finished before returning.
  Status copy_foreign(const Buffer& buffer, size_t offset, const ForeignMemory& foreign, size_t bytes,
                      bool to_buffer) override {
    if (foreign.kind != "cuda")
      return errors::FailedPrecondition("{} cannot reach {} device memory", info_.name,
                                        foreign.kind.empty() ? "unnamed" : foreign.kind);
    if (compile_only())
      return errors::FailedPrecondition(
          "{} is a compile-only device (TENSORD_CUDA_COMPILE_ONLY): it has no GPU memory to copy "
          "CUDA memory into or out of",
          info_.name);
    if (!foreign.device_uuid.empty() && foreign.device_uuid != uuid_)
      return errors::FailedPrecondition("the CUDA memory is on GPU {}, not on {} ({})", foreign.device_uuid,
                                        info_.name, uuid_.empty() ? "UUID unknown" : uuid_);
    if (bytes == 0) return OkStatus();
    if (offset > buffer.size || bytes > buffer.size - offset)
      return errors::OutOfRange("{}: {} bytes at {} are past the end of a buffer of {}", info_.name, bytes,
                                offset, buffer.size);
    if (bytes > foreign.size)
      return errors::OutOfRange("{}: {} bytes do not fit in the {} bytes of CUDA memory given", info_.name,
                                bytes, foreign.size);
    TD_RETURN_IF_ERROR(enter());
    CUdeviceptr base = 0;
    bool opened = false;
    CUresult r = CUDA_SUCCESS;
    if (!foreign.ipc_handle.empty()) {
      if (foreign.ipc_handle.size() != CU_IPC_HANDLE_SIZE)
        return errors::InvalidArgument("CUDA IPC: a memory handle has {} bytes, not {}", foreign.ipc_handle.size(),
                                       CU_IPC_HANDLE_SIZE);
      CUipcMemHandle h{};
      std::memcpy(h.reserved, foreign.ipc_handle.data(), CU_IPC_HANDLE_SIZE);
      // Reference-counted by the driver per context: concurrent calls naming one handle each
      // open and close it once.
      r = api_->cuIpcOpenMemHandle(&base, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      if (r != CUDA_SUCCESS)
        return errors::FailedPrecondition(
            "{}: cannot open the CUDA IPC memory handle: {} (a handle from another GPU or host, of memory "
            "already freed, or a device or platform without CUDA IPC)",
            info_.name, cu_error(api_, r));
      opened = true;
      // The mapping is the exporter's whole allocation: the bytes asked for must lie in it
      // (a copy past its end would fault in the broker's context).
      CUdeviceptr alloc_base = 0;
      size_t alloc_size = 0;
      r = api_->cuMemGetAddressRange(&alloc_base, &alloc_size, base);
      if (r == CUDA_SUCCESS && (foreign.offset > alloc_size || bytes > alloc_size - foreign.offset)) {
        api_->cuIpcCloseMemHandle(base);
        return errors::OutOfRange("CUDA IPC: {} bytes at offset {} are outside the exported allocation of {} bytes",
                                  bytes, foreign.offset, alloc_size);
      }
    } else {
      if (!foreign.pointer) return errors::InvalidArgument("CUDA memory: neither an IPC handle nor a pointer");
      base = static_cast<CUdeviceptr>(foreign.pointer);
      // This process's memory (DLPack, Client::upload_cuda embedded): its producer's work may
      // still be queued on another stream of the context (a DLPack producer asked for no
      // stream, PyTorch's current stream): everything queued in the context finishes first.
      if (to_buffer) r = api_->cuCtxSynchronize();
    }
    const CUdeviceptr theirs = base + foreign.offset;
    const CUdeviceptr ours = address(buffer) + offset;
    if (r == CUDA_SUCCESS)
      r = to_buffer ? api_->cuMemcpyDtoDAsync(ours, theirs, bytes, stream_)
                    : api_->cuMemcpyDtoDAsync(theirs, ours, bytes, stream_);
    if (r == CUDA_SUCCESS) r = api_->cuStreamSynchronize(stream_);
    if (opened) api_->cuIpcCloseMemHandle(base);
    return r == CUDA_SUCCESS ? OkStatus()
                             : cu_status(api_, r, info_.name, to_buffer ? "copying from CUDA memory given"
                                                                         : "copying into CUDA memory given");
  }

  // An event recorded now on the device's stream (one per device, re-recorded each call).
  CUresult ready_event(CUevent* ev) {
    std::lock_guard<std::mutex> lock(event_mu_);
    CUresult r = CUDA_SUCCESS;
    if (!ready_) r = api_->cuEventCreate(&ready_, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS) r = api_->cuEventRecord(ready_, stream_);
    *ev = ready_;
    return r;
  }
  // Where this thread's launches for the device go: the recording stream while it records a
  // run (CudaRunRecorder), else the device's stream.
  bool recording() const { return t_recording_device == this; }
  CUstream stream() const { return recording() ? t_recording_stream : stream_; }
  CUstream main_stream() const { return stream_; }
  const DriverApi* api() const { return api_; }
  bool sync_each() const { return sync_; }
  std::unique_ptr<RunRecorder> run_recorder() override;
  Status synchronize() override {
    if (compile_only()) return OkStatus();
    TD_RETURN_IF_ERROR(enter());
    CUresult r = api_->cuStreamSynchronize(stream_);
    return r == CUDA_SUCCESS ? OkStatus() : cu_status(api_, r, info_.name, "finishing a run");
  }

  // Launches `p` over n threads with these buffer arguments (inputs then outputs).
  Status launch(codegen::GpuProgram& gp, const std::vector<Arg>& args, int64_t n) override {
    if (n <= 0) return OkStatus();
    g_kernels_launched++;
    if (compile_only()) return OkStatus();
    TD_RETURN_IF_ERROR(enter());
    auto& p = static_cast<Program&>(gp);
    std::vector<void*> params;
    params.reserve(args.size() * 2);
    for (const Arg& a : args) {  // (CUdeviceptr, unsigned long long): two 64-bit words
      params.push_back(const_cast<uint64_t*>(&a.handle));
      params.push_back(const_cast<uint64_t*>(&a.offset));
    }
    const int64_t blocks = (n + p.block - 1) / p.block;
    if (blocks > 0x7fffffff) return errors::Unimplemented("{}: {} elements in one kernel", info_.name, n);
    CUresult r = api_->cuLaunchKernel(p.function, static_cast<unsigned>(blocks), 1, 1,
                                      static_cast<unsigned>(p.block), 1, 1, 0, stream(), params.data(), nullptr);
    if (r != CUDA_SUCCESS) return cu_status(api_, r, info_.name, "launching a generated kernel");
    if (sync_) {
      r = api_->cuStreamSynchronize(stream_);
      if (r != CUDA_SUCCESS) return cu_status(api_, r, info_.name, "running a generated kernel");
    }
    return OkStatus();
  }


 protected:
  // The module for `source`: NVRTC through the disk cache, loaded into the device's context
  // (compile-only devices: compiled, or handed to the test collector, and not loaded).
  Result<std::shared_ptr<codegen::GpuProgram>> build(const std::string& source,
                                                     const std::string& kernel_name) override {
    if (compile_only()) {
      std::lock_guard<std::mutex> lock(g_collector_mu);
      if (g_collector) {
        g_collector(source, kernel_name);
        return std::shared_ptr<codegen::GpuProgram>(std::make_shared<Program>());
      }
    }
    std::string arch = compile_arch_;
    if (arch.empty()) {
      arch = choose_arch(cc_, nvrtc_architectures());
      if (arch.empty())
        return errors::Unimplemented("{}: NVRTC cannot compile for sm_{} (it knows {})", info_.name, cc_,
                                     fmt::join(nvrtc_architectures(), ", "));
    }
    bool from_disk = false;
    auto code = compile_cached(source, arch, &from_disk);
    if (!code.ok()) {
      return Status(code.status().code(), info_.name + ": " + code.status().message());
    }
    auto p = std::make_shared<Program>();
    if (!compile_only()) {
      TD_RETURN_IF_ERROR(enter());
      p->api = api_;
      CUresult r = api_->cuModuleLoadData(&p->module, code->image.data());
      if (r != CUDA_SUCCESS && from_disk) {  // a stale entry: compile afresh
        TD_ASSIGN_OR_RETURN(CompiledCode fresh, nvrtc_compile(source, arch));
        r = api_->cuModuleLoadData(&p->module, fresh.image.data());
      }
      if (r != CUDA_SUCCESS) return cu_status(api_, r, info_.name, "loading a generated kernel");
      r = api_->cuModuleGetFunction(&p->function, p->module, kernel_name.c_str());
      if (r != CUDA_SUCCESS) return cu_status(api_, r, info_.name, "finding kernel " + kernel_name);
      int max_threads = 256;
      api_->cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, p->function);
      p->block = std::clamp(max_threads, 32, 256);
    }
    return std::shared_ptr<codegen::GpuProgram>(std::move(p));
  }

 public:
  static CUdeviceptr address(const Buffer& b) {
    return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(b.ptr)) + b.offset;
  }

  // cuBLAS sgemm / strided-batched sgemm on the device's stream (column-major, as cuBLAS);
  // float16 and bfloat16 (`dtype`) through cublasGemmEx with float32 accumulation.
  // Compile-only devices count the call and do nothing.
  Status sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, CUdeviceptr a,
               int64_t lda, int64_t stride_a, CUdeviceptr b, int64_t ldb, int64_t stride_b, float beta,
               CUdeviceptr c, int64_t ldc, int64_t stride_c, int64_t batch, DType dtype = DType::kFloat32) {
    g_kernels_launched++;
    if (compile_only()) return OkStatus();
    for (int64_t v : {m, n, k, lda, ldb, ldc, batch})
      if (v > 0x7fffffff) return errors::Unimplemented("{}: a matrix dimension of {} exceeds cuBLAS's int", info_.name, v);
    TD_RETURN_IF_ERROR(enter());
    std::lock_guard<std::mutex> lock(blas_mu_);
    if (!blas_) {
      std::string why;
      blas_api_ = cublas_api(&why);
      if (!blas_api_) return errors::Unavailable("{}: cuBLAS is not available: {}", info_.name, why);
      if (blas_api_->cublasCreate(&blas_) != CUBLAS_STATUS_SUCCESS) {
        blas_ = nullptr;
        return errors::Internal("{}: cublasCreate failed", info_.name);
      }
      if (env_is("TENSORD_CUDA_TF32", "1")) blas_api_->cublasSetMathMode(blas_, CUBLAS_TF32_TENSOR_OP_MATH);
    }
    blas_api_->cublasSetStream(blas_, stream());  // the recording stream while recording
    const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    auto* A = reinterpret_cast<const float*>(static_cast<uintptr_t>(a));
    auto* B = reinterpret_cast<const float*>(static_cast<uintptr_t>(b));
    auto* C = reinterpret_cast<float*>(static_cast<uintptr_t>(c));
    cublasStatus_t s;
    if (dtype != DType::kFloat32) {
      const cudaDataType t = dtype == DType::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
      const void* Ah = reinterpret_cast<const void*>(static_cast<uintptr_t>(a));
      const void* Bh = reinterpret_cast<const void*>(static_cast<uintptr_t>(b));
      void* Ch = reinterpret_cast<void*>(static_cast<uintptr_t>(c));
      s = batch == 1
              ? blas_api_->cublasGemmEx(blas_, ta, tb, int(m), int(n), int(k), &alpha, Ah, t, int(lda), Bh, t,
                                        int(ldb), &beta, Ch, t, int(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
              : blas_api_->cublasGemmStridedBatchedEx(blas_, ta, tb, int(m), int(n), int(k), &alpha, Ah, t,
                                                      int(lda), stride_a, Bh, t, int(ldb), stride_b, &beta, Ch, t,
                                                      int(ldc), stride_c, int(batch), CUBLAS_COMPUTE_32F,
                                                      CUBLAS_GEMM_DEFAULT);
    } else if (batch == 1) {
      s = blas_api_->cublasSgemm(blas_, ta, tb, int(m), int(n), int(k), &alpha, A, int(lda), B, int(ldb), &beta, C,
                                 int(ldc));
    } else {
      s = blas_api_->cublasSgemmStridedBatched(blas_, ta, tb, int(m), int(n), int(k), &alpha, A, int(lda),
                                               stride_a, B, int(ldb), stride_b, &beta, C, int(ldc), stride_c,
                                               int(batch));
    }
    if (s != CUBLAS_STATUS_SUCCESS) return errors::Internal("{}: cuBLAS sgemm failed (status {})", info_.name, int(s));
    if (sync_) {
      CUresult r = api_->cuStreamSynchronize(stream_);
      if (r != CUDA_SUCCESS) return cu_status(api_, r, info_.name, "running cuBLAS sgemm");
    }
    return OkStatus();
  }

  // Whether MatMul/Gemm + bias (+activation) groups go to cuBLASLt: TENSORD_CUDA_LT not 0 and
  // libcublasLt loads (compile-only devices too: they count the call and run nothing).
  static bool lt_usable() {
    if (env_is("TENSORD_CUDA_LT", "0")) return false;
    std::string why;
    return cublaslt_api(&why) != nullptr;
  }
  // Y[m,n] = epilogue(A[m,k]·op(B) + bias[n]), row-major float32, in one cublasLtMatmul on the
  // device's stream. Row-major Y is column-major Yᵀ = op(B)ᵀ·Aᵀ: cuBLASLt's "A" is our B, and
  // the bias runs along its rows (n). An error (no heuristic result, NOT_SUPPORTED) means
  // nothing was queued: the caller runs the unfused path.
  Status lt_matmul(const LtFusion& f, CUdeviceptr a, CUdeviceptr b, CUdeviceptr bias, CUdeviceptr y) {
    if (env_is("TENSORD_CUDA_LT", "refuse"))
      return errors::Unimplemented("{}: cuBLASLt refused the group (TENSORD_CUDA_LT=refuse)", info_.name);
    if (compile_only()) {
      g_kernels_launched++;
      g_lt_fused_calls++;
      return OkStatus();
    }
    TD_RETURN_IF_ERROR(enter());
    std::lock_guard<std::mutex> lock(lt_mu_);
    if (!lt_) {
      std::string why;
      lt_api_ = cublaslt_api(&why);
      if (!lt_api_) return errors::Unavailable("{}: cuBLASLt is not available: {}", info_.name, why);
      if (lt_api_->cublasLtCreate(&lt_) != CUBLAS_STATUS_SUCCESS) {
        lt_ = nullptr;
        return errors::Unavailable("{}: cublasLtCreate failed", info_.name);
      }
    }
    const CublasLtApi* L = lt_api_;
    struct Descs {
      const CublasLtApi* L;
      cublasLtMatmulDesc_t op = nullptr;
      cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ly = nullptr;
      cublasLtMatmulPreference_t pref = nullptr;
      ~Descs() {
        if (pref) L->cublasLtMatmulPreferenceDestroy(pref);
        for (auto* l : {la, lb, ly})
          if (l) L->cublasLtMatrixLayoutDestroy(l);
        if (op) L->cublasLtMatmulDescDestroy(op);
      }
    } d{L};
    auto ok = [&](cublasStatus_t s, const char* what) -> Status {
      if (s == CUBLAS_STATUS_SUCCESS) return OkStatus();
      return errors::Unimplemented("{}: {} failed (cuBLAS status {})", info_.name, what, int(s));
    };
    const cublasComputeType_t compute =
        env_is("TENSORD_CUDA_TF32", "1") ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    TD_RETURN_IF_ERROR(ok(L->cublasLtMatmulDescCreate(&d.op, compute, CUDA_R_32F), "cublasLtMatmulDescCreate"));
    const cublasOperation_t opa = f.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, opb = CUBLAS_OP_N;
    const cublasLtEpilogue_t epi = f.epilogue == LtFusion::kReluBias   ? CUBLASLT_EPILOGUE_RELU_BIAS
                                   : f.epilogue == LtFusion::kGeluBias ? CUBLASLT_EPILOGUE_GELU_BIAS
                                                                       : CUBLASLT_EPILOGUE_BIAS;
    const void* bias_ptr = reinterpret_cast<const void*>(static_cast<uintptr_t>(bias));
    TD_RETURN_IF_ERROR(ok(L->cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)),
                          "setting TRANSA"));
    TD_RETURN_IF_ERROR(ok(L->cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)),
                          "setting TRANSB"));
    TD_RETURN_IF_ERROR(ok(L->cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
                          "setting the epilogue"));
    TD_RETURN_IF_ERROR(ok(L->cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                                            sizeof(bias_ptr)),
                          "setting the bias"));
    // Column-major: "A" = Bᵀ as stored ([k][n] row-major is n×k column-major, ld n; transB: k×n, ld k),
    // "B" = Aᵀ (k×m, ld k), D = Yᵀ (n×m, ld n).
    const uint64_t n = static_cast<uint64_t>(f.n), m = static_cast<uint64_t>(f.m), k = static_cast<uint64_t>(f.k);
    TD_RETURN_IF_ERROR(ok(f.trans_b ? L->cublasLtMatrixLayoutCreate(&d.la, CUDA_R_32F, k, n, static_cast<int64_t>(k))
                                    : L->cublasLtMatrixLayoutCreate(&d.la, CUDA_R_32F, n, k, static_cast<int64_t>(n)),
                          "cublasLtMatrixLayoutCreate"));
    TD_RETURN_IF_ERROR(ok(L->cublasLtMatrixLayoutCreate(&d.lb, CUDA_R_32F, k, m, static_cast<int64_t>(k)),
                          "cublasLtMatrixLayoutCreate"));
    TD_RETURN_IF_ERROR(ok(L->cublasLtMatrixLayoutCreate(&d.ly, CUDA_R_32F, n, m, static_cast<int64_t>(n)),
                          "cublasLtMatrixLayoutCreate"));
    TD_RETURN_IF_ERROR(ok(L->cublasLtMatmulPreferenceCreate(&d.pref), "cublasLtMatmulPreferenceCreate"));
    const size_t workspace = 0;  // no workspace: nothing to allocate or capture
    TD_RETURN_IF_ERROR(ok(L->cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                  &workspace, sizeof(workspace)),
                          "setting the workspace"));
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    TD_RETURN_IF_ERROR(ok(L->cublasLtMatmulAlgoGetHeuristic(lt_, d.op, d.la, d.lb, d.ly, d.ly, d.pref, 1, &heur,
                                                            &found),
                          "cublasLtMatmulAlgoGetHeuristic"));
    if (found < 1) return errors::Unimplemented("{}: cuBLASLt has no algorithm for this epilogue", info_.name);
    const float alpha = 1.0f, beta = 0.0f;
    auto ptr = [](CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); };
    TD_RETURN_IF_ERROR(ok(L->cublasLtMatmul(lt_, d.op, &alpha, ptr(b), d.la, ptr(a), d.lb, &beta, ptr(y), d.ly,
                                            ptr(y), d.ly, &heur.algo, nullptr, 0, stream()),
                          "cublasLtMatmul"));
    g_kernels_launched++;
    g_lt_fused_calls++;
    if (sync_) {
      CUresult r = api_->cuStreamSynchronize(stream_);
      if (r != CUDA_SUCCESS) return cu_status(api_, r, info_.name, "running cublasLtMatmul");
    }
    return OkStatus();
  }

#if TENSORD_HAVE_CUDNN_H
  // Whether cuDNN kernels may run here: a real device, TENSORD_CUDNN not 0, libcudnn loads.
  bool cudnn_usable() const {
    if (compile_only() || env_is("TENSORD_CUDNN", "0")) return false;
    std::string why;
    return cudnn_api(&why) != nullptr;
  }
  // The device's cuDNN handle (made on first use), on the stream this thread launches on;
  // `lock` holds it for the caller's cuDNN calls (one user of the handle at a time).
  Result<cudnnHandle_t> dnn(const CudnnApi** api, std::unique_lock<std::mutex>* held) {
    std::unique_lock<std::mutex> lock(dnn_mu_);
    if (!dnn_) {
      std::string why;
      dnn_api_ = cudnn_api(&why);
      if (!dnn_api_) return errors::Unavailable("{}: cuDNN is not available: {}", info_.name, why);
      TD_RETURN_IF_ERROR(enter());
      const cudnnStatus_t st = dnn_api_->cudnnCreate(&dnn_);
      if (st != CUDNN_STATUS_SUCCESS) {
        dnn_ = nullptr;
        return errors::Internal("{}: cudnnCreate failed: {}", info_.name, dnn_api_->cudnnGetErrorString(st));
      }
    }
    dnn_api_->cudnnSetStream(dnn_, reinterpret_cast<cudaStream_t>(stream()));  // recording or not
    *api = dnn_api_;
    *held = std::move(lock);
    return dnn_;
  }
#endif
  // After a library call: TENSORD_CUDA_SYNC=1 waits for it (errors at the op).
  Status after_call(const char* what) {
    g_kernels_launched++;
    if (!sync_ || compile_only()) return OkStatus();
    CUresult r = api_->cuStreamSynchronize(stream());
    return r == CUDA_SUCCESS ? OkStatus() : cu_status(api_, r, info_.name, what);
  }

 private:
  void set_backend_version(const std::string& what) {
    std::string why;
    const NvrtcApi* nv = nvrtc_api(&why);
    info_.backend_version = fmt::format("tensord {} (CUDA driver {}, NVRTC {}, {})", kVersion,
                                        info_.driver_version.empty() ? "none" : info_.driver_version,
                                        nv ? nvrtc_version_string(nv) : "missing", what);
  }
  Status ensure_staging() {
    if (staging_[0]) return OkStatus();
    for (int k = 0; k < 2; ++k) {
      CUresult r = api_->cuMemHostAlloc(&staging_[k], kStagingChunk, 0);
      if (r == CUDA_SUCCESS) r = api_->cuEventCreate(&staging_done_[k], CU_EVENT_DISABLE_TIMING);
      if (r != CUDA_SUCCESS) return cu_status(api_, r, info_.name, "allocating pinned staging memory");
      api_->cuEventRecord(staging_done_[k], stream_);
    }
    return OkStatus();
  }
  // Waits until the last copy through staging half k has finished.
  CUresult sync_event(int k) { return api_->cuEventSynchronize(staging_done_[k]); }

  const DriverApi* api_ = nullptr;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  std::string compile_arch_;
  int cc_ = 0;
  std::string uuid_;  // "GPU-…" (format_uuid), "" where the driver did not say
  DeviceInfo info_;
  std::vector<const CudaDevice*> peers_;
  bool sync_ = env_is("TENSORD_CUDA_SYNC", "1");
  codegen::GpuKernelTable kernels_;
  codegen::GpuRegionCompiler regions_;
  std::mutex event_mu_;
  CUevent ready_ = nullptr;
  std::mutex staging_mu_;
  void* staging_[2] = {nullptr, nullptr};
  CUevent staging_done_[2] = {nullptr, nullptr};
  std::mutex blas_mu_;
  const CublasApi* blas_api_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::mutex lt_mu_;
  const CublasLtApi* lt_api_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
#if TENSORD_HAVE_CUDNN_H
  std::mutex dnn_mu_;
  const CudnnApi* dnn_api_ = nullptr;
  cudnnHandle_t dnn_ = nullptr;
#endif
};
// CUDA graphs: a run recorded on a private stream (cuStreamBeginCapture, relaxed mode: the
// pool may still cuMemAlloc), instantiated once (cuGraphInstantiate) and replayed on the
// device's stream (cuGraphLaunch), so a run is one launch. On a compile-only device nothing is
// recorded or replayed (the counters move: tests of the executor's replay without a GPU).
class CudaRunRecorder final : public RunRecorder {
 public:
  explicit CudaRunRecorder(CudaDevice* d) : d_(d) {}
  ~CudaRunRecorder() override {
    if (t_recording_device == d_) t_recording_device = nullptr;
    if (d_->compile_only() || !d_->enter().ok()) return;
    const DriverApi* api = d_->api();
    if (exec_) api->cuGraphExecDestroy(exec_);
    if (stream_) {
      if (capturing_) {
        CUgraph g = nullptr;
        if (api->cuStreamEndCapture(stream_, &g) == CUDA_SUCCESS && g) api->cuGraphDestroy(g);
      }
      api->cuStreamDestroy(stream_);
    }
  }
  Status begin() override {
    if (!d_->compile_only()) {
      TD_RETURN_IF_ERROR(d_->enter());
      const DriverApi* api = d_->api();
      CUresult r = stream_ ? CUDA_SUCCESS : api->cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING);
      if (r == CUDA_SUCCESS) r = api->cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED);
      if (r != CUDA_SUCCESS) return cu_status(api, r, d_->name(), "cuStreamBeginCapture");
      capturing_ = true;
    }
    t_recording_device = d_;
    t_recording_stream = stream_;
    g_graph_captures++;
    return OkStatus();
  }
  Status end() override {
    t_recording_device = nullptr;
    t_recording_stream = nullptr;
    if (d_->compile_only()) return OkStatus();
    TD_RETURN_IF_ERROR(d_->enter());
    const DriverApi* api = d_->api();
    CUgraph g = nullptr;
    capturing_ = false;
    CUresult r = api->cuStreamEndCapture(stream_, &g);
    if (r != CUDA_SUCCESS) return cu_status(api, r, d_->name(), "recording a run (cuStreamEndCapture)");
    r = api->cuGraphInstantiate(&exec_, g, 0);
    api->cuGraphDestroy(g);
    if (r != CUDA_SUCCESS) {
      exec_ = nullptr;
      return cu_status(api, r, d_->name(), "cuGraphInstantiate");
    }
    return OkStatus();
  }
  Status replay() override {
    g_graph_replays++;
    if (d_->compile_only()) return OkStatus();
    TD_RETURN_IF_ERROR(d_->enter());
    const DriverApi* api = d_->api();
    if (!exec_) return errors::Internal("{}: no recorded run to replay", d_->name());
    CUresult r = api->cuGraphLaunch(exec_, d_->main_stream());
    if (r != CUDA_SUCCESS) return cu_status(api, r, d_->name(), "cuGraphLaunch");
    return OkStatus();
  }

 private:
  CudaDevice* d_;
  CUstream stream_ = nullptr;
  CUgraphExec exec_ = nullptr;
  bool capturing_ = false;
};

// TENSORD_CUDA_GRAPHS=0 turns replay off; so does TENSORD_CUDA_SYNC=1 (it waits per kernel).
std::unique_ptr<RunRecorder> CudaDevice::run_recorder() {
  if (env_is("TENSORD_CUDA_GRAPHS", "0") || sync_each()) return nullptr;
  return std::make_unique<CudaRunRecorder>(this);
}

// ONNX Gelu over `n` float32 values (the generator has no Gelu): approximate="none" with erf,
// "tanh" with the tanh approximation, as the cpu reference computes them. Its kernel's name.
std::string gelu_source(int64_t n, bool tanh_approx, std::string* name) {
  *name = fmt::format("tensord_gelu_{}_{}", tanh_approx ? "tanh" : "erf", n);
  const char* body = tanh_approx
                         ? "0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)))"
                         : "0.5f * v * (1.0f + erff(v * 0.7071067811865476f))";
  return fmt::format(
      "extern \"C\" __global__ void {}(const unsigned char* in0_base, unsigned long long in0_off,\n"
      "    unsigned char* out0_base, unsigned long long out0_off) {{\n"
      "  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i >= {}LL) return;\n"
      "  const float v = ((const float*)(in0_base + in0_off))[i];\n"
      "  ((float*)(out0_base + out0_off))[i] = {};\n"
      "}}\n",
      *name, n, body);
}

bool gelu_on_device(const Node& node, const std::vector<TensorType>& inputs) {
  if (node.op != "Gelu" || inputs.size() != 1 || !inputs[0].defined() || inputs[0].dtype != DType::kFloat32 ||
      !shape_is_static(inputs[0].shape))
    return false;
  auto approx = NodeAttrs(node).attr_string("approximate", "none");
  return approx.ok() && (*approx == "none" || *approx == "tanh");
}

// Gelu (float32, static) as a hand-written kernel (gelu_source), specialised to each call's size.
class GeluKernel final : public Kernel {
 public:
  GeluKernel(CudaDevice* d, const Node& node) : device_(d), node_(node) {}
  std::string name() const override { return "gelu"; }
  Status run(KernelCall& call) override {
    if (call.inputs.empty() || !call.inputs[0].defined() || call.output_types.empty())
      return errors::Internal("{}: missing inputs", node_.label());
    const TensorType& out = call.output_types[0];
    const int64_t n = shape_numel(out.shape);
    if (!program_ || n != n_) {
      TD_ASSIGN_OR_RETURN(std::string approx, NodeAttrs(node_).attr_string("approximate", "none"));
      std::string name;
      const std::string source = gelu_source(n, approx == "tanh", &name);
      TD_ASSIGN_OR_RETURN(program_, device_->program(source, name));
      n_ = n;
    }
    TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(out.dtype, out.shape));
    TD_ASSIGN_OR_RETURN(auto buffer, call.allocator->allocate(static_cast<size_t>(bytes)));
    TD_ASSIGN_OR_RETURN(Arg x, device_->arg(*call.inputs[0].buffer));
    TD_ASSIGN_OR_RETURN(Arg y, device_->arg(*buffer));
    TD_RETURN_IF_ERROR(device_->launch(*program_, {x, y}, n));
    call.outputs.assign(1, DeviceTensor{out.dtype, out.shape, buffer});
    return OkStatus();
  }

 private:
  CudaDevice* device_;
  Node node_;
  int64_t n_ = -1;
  std::shared_ptr<codegen::GpuProgram> program_;
};

// MatMul (float32, batch dims broadcast as plan_matmul allows) and Gemm (float32, C broadcast
// to the output) on cuBLAS. Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: cuBLAS is called with
// the operands swapped, so no transposition is ever materialised.
class BlasKernel final : public Kernel {
 public:
  BlasKernel(CudaDevice* d, const Node& node) : device_(d), node_(node) {}
  std::string name() const override { return "cublas"; }
  Status run(KernelCall& call) override {
    if (call.inputs.size() < 2 || !call.inputs[0].defined() || !call.inputs[1].defined() ||
        call.output_types.empty())
      return errors::Internal("{}: missing inputs", node_.label());
    const DeviceTensor& a = call.inputs[0];
    const DeviceTensor& b = call.inputs[1];
    const TensorType& out = call.output_types[0];
    TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(out.dtype, out.shape));
    TD_ASSIGN_OR_RETURN(auto buffer, call.allocator->allocate(static_cast<size_t>(bytes)));
    const CUdeviceptr A = CudaDevice::address(*a.buffer), B = CudaDevice::address(*b.buffer);
    const CUdeviceptr Y = CudaDevice::address(*buffer);
    if (node_.op == "MatMul") {
      TD_ASSIGN_OR_RETURN(GemmPlan p, plan_matmul(a.shape, b.shape));
      if (p.m * p.n * p.batch > 0) {
        if (p.k == 0) return errors::Unimplemented("{}: an empty inner dimension", node_.label());
        TD_RETURN_IF_ERROR(device_->sgemm(false, false, p.n, p.m, p.k, 1.0f, B, p.n, p.stride_b, A, p.k,
                                          p.stride_a, 0.0f, Y, p.n, p.stride_c, p.batch, a.dtype));
      }
    } else {  // Gemm
      NodeAttrs attrs(node_);
      TD_ASSIGN_OR_RETURN(int64_t trans_a, attrs.attr_int("transA", 0));
      TD_ASSIGN_OR_RETURN(int64_t trans_b, attrs.attr_int("transB", 0));
      TD_ASSIGN_OR_RETURN(double alpha, attrs.attr_float("alpha", 1.0));
      TD_ASSIGN_OR_RETURN(double beta, attrs.attr_float("beta", 1.0));
      if (a.shape.size() != 2 || b.shape.size() != 2)
        return errors::InvalidArgument("{}: Gemm takes 2-D A and B", node_.label());
      const int64_t m = trans_a ? a.shape[1] : a.shape[0], k = trans_a ? a.shape[0] : a.shape[1];
      const int64_t n = trans_b ? b.shape[0] : b.shape[1];
      if ((trans_b ? b.shape[1] : b.shape[0]) != k)
        return errors::InvalidArgument("{}: inner dimensions {} and {} differ", node_.label(), k,
                                       trans_b ? b.shape[1] : b.shape[0]);
      const bool has_c = call.inputs.size() > 2 && call.inputs[2].defined() && beta != 0.0;
      if (has_c) {  // Y = broadcast C, then Y = alpha·op(A)·op(B) + beta·Y
        const DeviceTensor& c = call.inputs[2];
        if (!bias_ || bias_shape_ != c.shape) {
          TD_ASSIGN_OR_RETURN(codegen::ElementwiseKernel ek, codegen::lower_expand(c.shape, {m, n}, DType::kFloat32));
          static const codegen::CudaPrinter printer;
          TD_ASSIGN_OR_RETURN(std::string source, printer.print(ek));
          TD_ASSIGN_OR_RETURN(bias_, device_->program(source, ek.name));
          bias_shape_ = c.shape;
        }
        TD_ASSIGN_OR_RETURN(Arg ca, device_->arg(*c.buffer));
        TD_ASSIGN_OR_RETURN(Arg ya, device_->arg(*buffer));
        TD_RETURN_IF_ERROR(device_->launch(*bias_, {ca, ya}, m * n));
      }
      if (m * n > 0 && k > 0)
        TD_RETURN_IF_ERROR(device_->sgemm(trans_b != 0, trans_a != 0, n, m, k, static_cast<float>(alpha), B,
                                          b.shape[1], 0, A, a.shape[1], 0, has_c ? static_cast<float>(beta) : 0.0f,
                                          Y, n, 0, 1));
    }
    call.outputs.assign(1, DeviceTensor{out.dtype, out.shape, buffer});
    return OkStatus();
  }

 private:
  CudaDevice* device_;
  Node node_;
  Shape bias_shape_;
  std::shared_ptr<codegen::GpuProgram> bias_;
};

#if TENSORD_HAVE_CUDNN_H
// ---- cuDNN (legacy API): convolution with bias, pooling ----

std::vector<int> to_int(const std::vector<int64_t>& v) { return std::vector<int>(v.begin(), v.end()); }
std::vector<int> packed_strides(const std::vector<int64_t>& dims) {
  std::vector<int> st(dims.size(), 1);
  for (size_t d = dims.size(); d-- > 1;) st[d - 1] = st[d] * static_cast<int>(dims[d]);
  return st;
}

Status dnn_status(const CudnnApi* api, cudnnStatus_t st, const std::string& where, const char* what) {
  if (st == CUDNN_STATUS_SUCCESS) return OkStatus();
  return errors::Internal("{}: {} failed: {}", where, what, api->cudnnGetErrorString(st));
}

// The descriptors of one shape, destroyed with it.
struct DnnDescs {
  const CudnnApi* api = nullptr;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, b = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnActivationDescriptor_t act = nullptr;
  cudnnPoolingDescriptor_t pool = nullptr;
  ~DnnDescs() {
    if (!api) return;
    for (auto* t : {x, y, b})
      if (t) api->cudnnDestroyTensorDescriptor(t);
    if (w) api->cudnnDestroyFilterDescriptor(w);
    if (conv) api->cudnnDestroyConvolutionDescriptor(conv);
    if (act) api->cudnnDestroyActivationDescriptor(act);
    if (pool) api->cudnnDestroyPoolingDescriptor(pool);
  }
  Status tensor(cudnnTensorDescriptor_t* d, const std::vector<int64_t>& dims, const std::string& where) {
    TD_RETURN_IF_ERROR(dnn_status(api, api->cudnnCreateTensorDescriptor(d), where, "cudnnCreateTensorDescriptor"));
    const std::vector<int> n = to_int(dims), st = packed_strides(dims);
    return dnn_status(api, api->cudnnSetTensorNdDescriptor(*d, CUDNN_DATA_FLOAT, static_cast<int>(n.size()), n.data(),
                                                           st.data()),
                      where, "cudnnSetTensorNdDescriptor");
  }
};

size_t cudnn_workspace_limit() {
  const char* v = std::getenv("TENSORD_CUDNN_WORKSPACE_MIB");
  const long mib = v && *v ? std::strtol(v, nullptr, 10) : 1024;
  return static_cast<size_t>(std::max<long>(mib, 0)) << 20;
}

// Conv (float32, NCHW) on cuDNN: cudnnConvolutionForward then the bias with cudnnAddTensor, or,
// with a ReLU fused (a CudnnConvRegion), one cudnnConvolutionBiasActivationForward computing
// relu(conv(x) + z + bias), z a residual of the output's shape (or none). The algorithm is cuDNN's
// heuristic pick (cudnnGetConvolutionForwardAlgorithm_v7), or measured with
// cudnnFindConvolutionForwardAlgorithmEx under TENSORD_CUDNN_FIND=1, within
// TENSORD_CUDNN_WORKSPACE_MIB (default 1024) of workspace, taken from the engine's pool.
class CudnnConvKernel final : public Kernel {
 public:
  CudnnConvKernel(CudaDevice* d, const Node& node, bool relu = false) : device_(d), node_(node), relu_(relu) {}
  std::string name() const override { return relu_ ? "cudnn conv+relu" : "cudnn"; }
  Status run(KernelCall& call) override {
    if (call.inputs.size() < 2 || !call.inputs[0].defined() || !call.inputs[1].defined() || call.output_types.empty())
      return errors::Internal("{}: missing inputs", node_.label());
    const DeviceTensor& x = call.inputs[0];
    const DeviceTensor& w = call.inputs[1];
    const bool has_b = call.inputs.size() > 2 && call.inputs[2].defined();
    const TensorType& out = call.output_types[0];
    TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(out.dtype, out.shape));
    TD_ASSIGN_OR_RETURN(auto y, call.allocator->allocate(static_cast<size_t>(bytes)));
    TD_RETURN_IF_ERROR(forward(x.shape, ptr(*x.buffer), w.shape, ptr(*w.buffer),
                               has_b ? ptr(*call.inputs[2].buffer) : nullptr, nullptr, ptr(*y), out,
                               *call.allocator));
    call.outputs.assign(1, DeviceTensor{out.dtype, out.shape, y});
    return OkStatus();
  }
  // y = conv(x, w) [+ bias] [+ z] [relu]: the shapes of x and w, device addresses (B and Z
  // null when absent; Z only with relu_, the fused call's residual). Whether the fused call
  // ran: fused_calls().
  Status forward(const Shape& xs, void* X, const Shape& wshape, void* W, void* B, void* Z, void* Y,
                 const TensorType& out, Allocator& allocator) {
    const bool has_b = B != nullptr;
    if (Z && !relu_) return errors::Internal("{}: a residual comes with a fused ReLU", node_.label());
    const std::string key = shape_to_string(xs) + shape_to_string(wshape) + (has_b ? "b" : "");
    const CudnnApi* api = nullptr;
    std::unique_lock<std::mutex> dnn_lock;
    TD_ASSIGN_OR_RETURN(cudnnHandle_t h, device_->dnn(&api, &dnn_lock));
    const std::string& where = device_->name();
    std::shared_ptr<Buffer> ws;
    if (!descs_ || key != key_) {
      TD_ASSIGN_OR_RETURN(plan_, plan_cudnn_conv(node_, xs, wshape, has_b));
      if (shape_numel(out.shape) != shape_numel(plan_.y))
        return errors::Internal("{}: cuDNN's output {} differs from the inferred {}", node_.label(),
                                fmt::join(plan_.y, "x"), shape_to_string(out.shape));
      auto d = std::make_unique<DnnDescs>();
      d->api = api;
      TD_RETURN_IF_ERROR(d->tensor(&d->x, plan_.x, where));
      TD_RETURN_IF_ERROR(d->tensor(&d->y, plan_.y, where));
      std::vector<int64_t> bdims(plan_.y.size(), 1);
      bdims[1] = plan_.y[1];
      TD_RETURN_IF_ERROR(d->tensor(&d->b, bdims, where));
      const std::vector<int> wd = to_int(plan_.w);
      TD_RETURN_IF_ERROR(dnn_status(api, api->cudnnCreateFilterDescriptor(&d->w), where, "cudnnCreateFilterDescriptor"));
      TD_RETURN_IF_ERROR(dnn_status(api, api->cudnnSetFilterNdDescriptor(d->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                                         static_cast<int>(wd.size()), wd.data()),
                                    where, "cudnnSetFilterNdDescriptor"));
      TD_RETURN_IF_ERROR(dnn_status(api, api->cudnnCreateConvolutionDescriptor(&d->conv), where,
                                    "cudnnCreateConvolutionDescriptor"));
      TD_RETURN_IF_ERROR(dnn_status(
          api, api->cudnnSetConvolutionNdDescriptor(d->conv, static_cast<int>(plan_.pads.size()), plan_.pads.data(),
                                                    plan_.strides.data(), plan_.dilations.data(),
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
          where, "cudnnSetConvolutionNdDescriptor"));
      TD_RETURN_IF_ERROR(dnn_status(api, api->cudnnSetConvolutionGroupCount(d->conv, plan_.group), where,
                                    "cudnnSetConvolutionGroupCount"));
      // float32 stays float32 (FMA math) unless TF32 was asked for: cuDNN's default math lets
      // Ampere and later use TF32 tensor cores.
      TD_RETURN_IF_ERROR(dnn_status(api,
                                    api->cudnnSetConvolutionMathType(
                                        d->conv, env_is("TENSORD_CUDA_TF32", "1") ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH),
                                    where, "cudnnSetConvolutionMathType"));
      if (relu_) {
        TD_RETURN_IF_ERROR(dnn_status(api, api->cudnnCreateActivationDescriptor(&d->act), where,
                                      "cudnnCreateActivationDescriptor"));
        TD_RETURN_IF_ERROR(dnn_status(
            api, api->cudnnSetActivationDescriptor(d->act, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0), where,
            "cudnnSetActivationDescriptor"));
      }
      // The algorithm: the first cuDNN ranks (heuristics, or measured) that fits the limit.
      const size_t limit = cudnn_workspace_limit();
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      int got = 0;
      if (env_is("TENSORD_CUDNN_FIND", "1")) {
        TD_ASSIGN_OR_RETURN(ws, allocator.allocate(std::max<size_t>(limit, 1)));
        TD_RETURN_IF_ERROR(dnn_status(api,
                                      api->cudnnFindConvolutionForwardAlgorithmEx(
                                          h, d->x, X, d->w, W, d->conv, d->y, Y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                          &got, perf, ptr(*ws), limit),
                                      where, "cudnnFindConvolutionForwardAlgorithmEx"));
      } else {
        TD_RETURN_IF_ERROR(dnn_status(api,
                                      api->cudnnGetConvolutionForwardAlgorithm_v7(
                                          h, d->x, d->w, d->conv, d->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf),
                                      where, "cudnnGetConvolutionForwardAlgorithm_v7"));
      }
      int pick = -1;
      for (int i = 0; i < got && pick < 0; ++i)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= limit) pick = i;
      if (pick < 0)
        return errors::Unimplemented("{}: cuDNN has no convolution algorithm within {} MiB of workspace",
                                     node_.label(), limit >> 20);
      algo_ = perf[pick].algo;
      size_t need = 0;
      TD_RETURN_IF_ERROR(dnn_status(api,
                                    api->cudnnGetConvolutionForwardWorkspaceSize(h, d->x, d->w, d->conv, d->y, algo_,
                                                                                 &need),
                                    where, "cudnnGetConvolutionForwardWorkspaceSize"));
      workspace_ = need;
      descs_ = std::move(d);
      key_ = key;
    }
    if (workspace_ && (!ws || ws->size < workspace_)) {
      TD_ASSIGN_OR_RETURN(ws, allocator.allocate(workspace_));
    }
    void* WS = ws ? ptr(*ws) : nullptr;
    const float one = 1.0f, zero = 0.0f;
    bool fused = false;
    if (relu_ && has_b && !fused_refused_) {
      // y = relu(1 * conv + alpha2 * z + bias); without a residual alpha2 is 0 and z is y. A
      // refusal for this algorithm or shape (NOT_SUPPORTED, BAD_PARAM) falls back to the
      // separate calls below, from then on.
      const cudnnStatus_t st = api->cudnnConvolutionBiasActivationForward(
          h, &one, descs_->x, X, descs_->w, W, descs_->conv, algo_, WS, workspace_, Z ? &one : &zero, descs_->y,
          Z ? Z : Y, descs_->b, B, descs_->act, descs_->y, Y);
      if (st != CUDNN_STATUS_NOT_SUPPORTED && st != CUDNN_STATUS_BAD_PARAM) {
        TD_RETURN_IF_ERROR(dnn_status(api, st, where, "cudnnConvolutionBiasActivationForward"));
        fused = true;
        g_conv_fused++;
      } else {
        fused_refused_ = true;
      }
    }
    if (!fused) {
      TD_RETURN_IF_ERROR(dnn_status(api,
                                    api->cudnnConvolutionForward(h, &one, descs_->x, X, descs_->w, W, descs_->conv,
                                                                 algo_, WS, workspace_, &zero, descs_->y, Y),
                                    where, "cudnnConvolutionForward"));
      if (has_b)
        TD_RETURN_IF_ERROR(dnn_status(api, api->cudnnAddTensor(h, &one, descs_->b, B, &one, descs_->y, Y), where,
                                      "cudnnAddTensor"));
      if (Z)
        TD_RETURN_IF_ERROR(dnn_status(api, api->cudnnAddTensor(h, &one, descs_->y, Z, &one, descs_->y, Y), where,
                                      "cudnnAddTensor"));
      if (relu_)
        TD_RETURN_IF_ERROR(dnn_status(api,
                                      api->cudnnActivationForward(h, descs_->act, &one, descs_->y, Y, &zero,
                                                                  descs_->y, Y),
                                      where, "cudnnActivationForward"));
    }
    return device_->after_call("running a cuDNN convolution");
  }

  static void* ptr(const Buffer& b) { return reinterpret_cast<void*>(CudaDevice::address(b)); }

 private:
  CudaDevice* device_;
  Node node_;
  bool relu_;
  std::string key_;
  ConvPlan plan_;
  std::unique_ptr<DnnDescs> descs_;
  cudnnConvolutionFwdAlgo_t algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  size_t workspace_ = 0;
  bool fused_refused_ = false;  // cuDNN refused the fused call: separate calls
};

// MaxPool / AveragePool / GlobalAveragePool / GlobalMaxPool (float32) on cudnnPoolingForward.
class CudnnPoolKernel final : public Kernel {
 public:
  CudnnPoolKernel(CudaDevice* d, const Node& node) : device_(d), node_(node) {}
  std::string name() const override { return "cudnn"; }
  Status run(KernelCall& call) override {
    if (call.inputs.empty() || !call.inputs[0].defined() || call.output_types.empty())
      return errors::Internal("{}: no input", node_.label());
    const DeviceTensor& x = call.inputs[0];
    const TensorType& out = call.output_types[0];
    const CudnnApi* api = nullptr;
    std::unique_lock<std::mutex> dnn_lock;
    TD_ASSIGN_OR_RETURN(cudnnHandle_t h, device_->dnn(&api, &dnn_lock));
    const std::string& where = device_->name();
    const std::string key = shape_to_string(x.shape);
    if (!descs_ || key != key_) {
      TD_ASSIGN_OR_RETURN(PoolPlan p, plan_cudnn_pool(node_, x.shape));
      if (shape_numel(out.shape) != shape_numel(p.y))
        return errors::Internal("{}: cuDNN's output {} differs from the inferred {}", node_.label(),
                                fmt::join(p.y, "x"), shape_to_string(out.shape));
      auto d = std::make_unique<DnnDescs>();
      d->api = api;
      TD_RETURN_IF_ERROR(d->tensor(&d->x, p.x, where));
      TD_RETURN_IF_ERROR(d->tensor(&d->y, p.y, where));
      TD_RETURN_IF_ERROR(dnn_status(api, api->cudnnCreatePoolingDescriptor(&d->pool), where,
                                    "cudnnCreatePoolingDescriptor"));
      const cudnnPoolingMode_t mode = p.mode == PoolPlan::kMax                 ? CUDNN_POOLING_MAX
                                      : p.mode == PoolPlan::kAverageIncludePad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                                               : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
      TD_RETURN_IF_ERROR(dnn_status(api,
                                    api->cudnnSetPoolingNdDescriptor(d->pool, mode, CUDNN_PROPAGATE_NAN,
                                                                     static_cast<int>(p.window.size()),
                                                                     p.window.data(), p.pads.data(), p.strides.data()),
                                    where, "cudnnSetPoolingNdDescriptor"));
      descs_ = std::move(d);
      key_ = key;
    }
    TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(out.dtype, out.shape));
    TD_ASSIGN_OR_RETURN(auto y, call.allocator->allocate(static_cast<size_t>(bytes)));
    const float one = 1.0f, zero = 0.0f;
    TD_RETURN_IF_ERROR(dnn_status(api,
                                  api->cudnnPoolingForward(h, descs_->pool, &one, descs_->x,
                                                           reinterpret_cast<void*>(CudaDevice::address(*x.buffer)),
                                                           &zero, descs_->y,
                                                           reinterpret_cast<void*>(CudaDevice::address(*y))),
                                  where, "cudnnPoolingForward"));
    TD_RETURN_IF_ERROR(device_->after_call("running cuDNN pooling"));
    call.outputs.assign(1, DeviceTensor{out.dtype, out.shape, y});
    return OkStatus();
  }

 private:
  CudaDevice* device_;
  Node node_;
  std::string key_;
  std::unique_ptr<DnnDescs> descs_;
};

// RNN / LSTM / GRU (float32, plan_cudnn_rnn) on cudnnRNNForward (v8+ API, inference). The
// weight space is the kernel's (made, zeroed and laid out once per shape); each run copies
// ONNX's W/R/B blocks into it device to device (rnn_weight_copies: cuDNN's gate order), so
// weights that are not constants work too. ONNX's X [seq][batch][input] is cuDNN's
// sequence-major layout; its Y [seq][dirs][batch][hidden] is cuDNN's [seq][batch][dirs*hidden]
// for one direction, and a generated transpose after it for two. sequence_lens is left to the
// templates/cpu for now (refused in uses_cudnn).
class CudnnRnnKernel final : public Kernel {
 public:
  CudnnRnnKernel(CudaDevice* d, const Node& node) : device_(d), node_(node) {}
  ~CudnnRnnKernel() override { release(); }
  std::string name() const override { return "cudnn rnn"; }
  Status run(KernelCall& call) override {
    std::vector<TensorType> types;
    std::string key;
    for (const auto& t : call.inputs) {
      types.push_back(t.defined() ? t.type() : TensorType{});
      key += (t.defined() ? shape_to_string(t.shape) : std::string("-")) + ";";
    }
    const CudnnApi* api = nullptr;
    std::unique_lock<std::mutex> dnn_lock;
    TD_ASSIGN_OR_RETURN(cudnnHandle_t h, device_->dnn(&api, &dnn_lock));
    const std::string& where = device_->name();
    if (!rnn_ || key != key_) TD_RETURN_IF_ERROR(prepare(h, api, types, where));
    key_ = key;
    const RnnPlan& p = plan_;
    // ONNX's weight blocks into cuDNN's space, on the device's stream.
    const DriverApi* drv = device_->api();
    for (const RnnCopy& c : copies_) {
      const DeviceTensor& src = call.inputs.at(static_cast<size_t>(c.src));
      if (!src.defined()) return errors::Internal("{}: input {} missing", node_.label(), c.src);
      const CUresult r = drv->cuMemcpyDtoDAsync(space_ + static_cast<CUdeviceptr>(c.dst_offset * 4),
                                                CudaDevice::address(*src.buffer) + static_cast<CUdeviceptr>(c.src_offset * 4),
                                                static_cast<size_t>(c.count) * 4, device_->stream());
      if (r != CUDA_SUCCESS) return cu_status(drv, r, where, "copying RNN weights into cuDNN's layout");
    }
    const TensorType y_type{DType::kFloat32, {p.seq, p.dirs, p.batch, p.hidden}};
    auto wanted = [&](size_t o) { return o < node_.outputs.size() && !node_.outputs[o].empty(); };
    const size_t state_bytes = static_cast<size_t>(p.dirs * p.batch * p.hidden) * 4;
    TD_ASSIGN_OR_RETURN(auto y, call.allocator->allocate(static_cast<size_t>(shape_numel(y_type.shape)) * 4));
    std::shared_ptr<Buffer> y_cudnn = y, hy, cy, ws;
    if (p.dirs > 1) {
      TD_ASSIGN_OR_RETURN(y_cudnn, call.allocator->allocate(y->size));
    }
    if (wanted(1)) {
      TD_ASSIGN_OR_RETURN(hy, call.allocator->allocate(state_bytes));
    }
    if (wanted(2) && p.cell == RnnPlan::kLstm) {
      TD_ASSIGN_OR_RETURN(cy, call.allocator->allocate(state_bytes));
    }
    if (work_bytes_) {
      TD_ASSIGN_OR_RETURN(ws, call.allocator->allocate(work_bytes_));
    }
    auto at = [](const std::shared_ptr<Buffer>& b) { return b ? reinterpret_cast<void*>(CudaDevice::address(*b)) : nullptr; };
    auto in = [&](size_t i) {
      return i < call.inputs.size() && call.inputs[i].defined() ? reinterpret_cast<void*>(CudaDevice::address(*call.inputs[i].buffer))
                                                                : nullptr;
    };
    TD_RETURN_IF_ERROR(dnn_status(
        api,
        api->cudnnRNNForward(h, rnn_, CUDNN_FWD_MODE_INFERENCE, reinterpret_cast<const int32_t*>(seq_lens_), x_desc_, in(0),
                             y_desc_, at(y_cudnn), h_desc_, in(5), at(hy), h_desc_,
                             p.cell == RnnPlan::kLstm ? in(6) : nullptr, at(cy), space_bytes_,
                             reinterpret_cast<void*>(space_), work_bytes_, at(ws), 0, nullptr),
        where, "cudnnRNNForward"));
    TD_RETURN_IF_ERROR(device_->after_call("running a cuDNN RNN"));
    if (p.dirs > 1) {  // [seq][batch][dirs][hidden] -> [seq][dirs][batch][hidden]
      TD_ASSIGN_OR_RETURN(Arg a, device_->arg(*y_cudnn));
      TD_ASSIGN_OR_RETURN(Arg o, device_->arg(*y));
      TD_RETURN_IF_ERROR(device_->launch(*transpose_, {a, o}, shape_numel(y_type.shape)));
    }
    call.outputs.assign(node_.outputs.size(), DeviceTensor{});
    if (wanted(0)) call.outputs[0] = DeviceTensor{DType::kFloat32, y_type.shape, y};
    const Shape state{p.dirs, p.batch, p.hidden};
    if (hy) call.outputs[1] = DeviceTensor{DType::kFloat32, state, hy};
    if (cy) call.outputs[2] = DeviceTensor{DType::kFloat32, state, cy};
    g_cudnn_rnn_calls++;
    return OkStatus();
  }

 private:
  Status prepare(cudnnHandle_t h, const CudnnApi* api, const std::vector<TensorType>& types, const std::string& where) {
    release();
    api_ = api;
    TD_ASSIGN_OR_RETURN(plan_, plan_cudnn_rnn(node_, types));
    const RnnPlan& p = plan_;
    if (p.has_seq_lens) return errors::Unimplemented("{}: sequence_lens on cuDNN", node_.label());
    const cudnnRNNMode_t mode = p.cell == RnnPlan::kLstm  ? CUDNN_LSTM
                                : p.cell == RnnPlan::kGru ? CUDNN_GRU
                                : p.cell == RnnPlan::kRnnRelu ? CUDNN_RNN_RELU
                                                              : CUDNN_RNN_TANH;
    const int I = static_cast<int>(p.input), H = static_cast<int>(p.hidden);
    TD_RETURN_IF_ERROR(dnn_status(api, api->cudnnCreateRNNDescriptor(&rnn_), where, "cudnnCreateRNNDescriptor"));
    TD_RETURN_IF_ERROR(dnn_status(
        api,
        api->cudnnSetRNNDescriptor_v8(rnn_, CUDNN_RNN_ALGO_STANDARD, mode, CUDNN_RNN_DOUBLE_BIAS,
                                      p.dirs == 2 ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT,
                                      CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT,
                                      env_is("TENSORD_CUDA_TF32", "1") ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH, I, H, H, 1,
                                      nullptr, CUDNN_RNN_PADDED_IO_ENABLED),
        where, "cudnnSetRNNDescriptor_v8"));
    const std::vector<int> lens(static_cast<size_t>(p.batch), static_cast<int>(p.seq));
    for (auto [d, width] : {std::pair<cudnnRNNDataDescriptor_t*, int>{&x_desc_, I}, {&y_desc_, H * p.dirs}}) {
      TD_RETURN_IF_ERROR(dnn_status(api, api->cudnnCreateRNNDataDescriptor(d), where, "cudnnCreateRNNDataDescriptor"));
      TD_RETURN_IF_ERROR(dnn_status(api,
                                    api->cudnnSetRNNDataDescriptor(*d, CUDNN_DATA_FLOAT,
                                                                   CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
                                                                   static_cast<int>(p.seq), static_cast<int>(p.batch),
                                                                   width, lens.data(), nullptr),
                                    where, "cudnnSetRNNDataDescriptor"));
    }
    descs_ = std::make_unique<DnnDescs>();
    descs_->api = api;
    TD_RETURN_IF_ERROR(descs_->tensor(&descs_->x, {p.dirs, p.batch, p.hidden}, where));
    h_desc_ = descs_->x;
    TD_RETURN_IF_ERROR(descs_->tensor(&descs_->y, {1, 1, 1}, where));  // cudnnGetRNNWeightParams' outputs
    TD_RETURN_IF_ERROR(descs_->tensor(&descs_->b, {1, 1, 1}, where));
    TD_RETURN_IF_ERROR(dnn_status(api, api->cudnnGetRNNWeightSpaceSize(h, rnn_, &space_bytes_), where,
                                  "cudnnGetRNNWeightSpaceSize"));
    size_t reserve = 0;
    TD_RETURN_IF_ERROR(dnn_status(api,
                                  api->cudnnGetRNNTempSpaceSizes(h, rnn_, CUDNN_FWD_MODE_INFERENCE, x_desc_, &work_bytes_,
                                                                 &reserve),
                                  where, "cudnnGetRNNTempSpaceSizes"));
    // The weight space (zeroed: biases stay 0 without B) and the sequence lengths, held here.
    TD_ASSIGN_OR_RETURN(void* space, device_->allocate(space_bytes_));
    space_ = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(space));
    const std::vector<unsigned char> zeros(space_bytes_, 0);
    TD_RETURN_IF_ERROR(device_->write(Buffer{device_, space, space_bytes_, 0}, 0, zeros.data(), space_bytes_));
    TD_ASSIGN_OR_RETURN(void* lens_mem, device_->allocate(lens.size() * 4));
    seq_lens_ = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(lens_mem));
    TD_RETURN_IF_ERROR(device_->write(Buffer{device_, lens_mem, lens.size() * 4, 0}, 0, lens.data(), lens.size() * 4));
    copies_.clear();
    for (int d = 0; d < p.dirs; ++d) {
      std::vector<std::pair<int64_t, int64_t>> off;
      for (int l = 0; l < 2 * p.gates; ++l) {
        void* m = nullptr;
        void* b = nullptr;
        TD_RETURN_IF_ERROR(dnn_status(api,
                                      api->cudnnGetRNNWeightParams(h, rnn_, d, space_bytes_, space, l, descs_->y, &m,
                                                                   descs_->b, &b),
                                      where, "cudnnGetRNNWeightParams"));
        auto elems = [&](void* a) { return a ? static_cast<int64_t>(reinterpret_cast<uintptr_t>(a) - space_) / 4 : -1; };
        off.emplace_back(elems(m), elems(b));
      }
      TD_ASSIGN_OR_RETURN(auto c, rnn_weight_copies(p, d, [&](int l) { return off[static_cast<size_t>(l)]; },
                                                    space_bytes_ / 4));
      copies_.insert(copies_.end(), c.begin(), c.end());
    }
    if (p.dirs > 1) {
      TD_ASSIGN_OR_RETURN(codegen::ElementwiseKernel k,
                          codegen::lower_transpose({p.seq, p.batch, p.dirs, p.hidden}, {0, 2, 1, 3}, DType::kFloat32));
      static const codegen::CudaPrinter printer;
      TD_ASSIGN_OR_RETURN(std::string source, printer.print(k));
      TD_ASSIGN_OR_RETURN(transpose_, device_->program(source, k.name));
    }
    return OkStatus();
  }
  void release() {
    if (api_) {
      if (rnn_) api_->cudnnDestroyRNNDescriptor(rnn_);
      for (auto* d : {x_desc_, y_desc_})
        if (d) api_->cudnnDestroyRNNDataDescriptor(d);
    }
    rnn_ = nullptr, x_desc_ = nullptr, y_desc_ = nullptr, h_desc_ = nullptr;
    descs_.reset();
    if (space_) device_->free(reinterpret_cast<void*>(space_), space_bytes_);
    if (seq_lens_) device_->free(reinterpret_cast<void*>(seq_lens_), static_cast<size_t>(plan_.batch) * 4);
    space_ = 0, seq_lens_ = 0;
  }

  CudaDevice* device_;
  Node node_;
  std::string key_;
  RnnPlan plan_;
  const CudnnApi* api_ = nullptr;
  cudnnRNNDescriptor_t rnn_ = nullptr;
  cudnnRNNDataDescriptor_t x_desc_ = nullptr, y_desc_ = nullptr;
  cudnnTensorDescriptor_t h_desc_ = nullptr;  // owned by descs_
  std::unique_ptr<DnnDescs> descs_;
  CUdeviceptr space_ = 0, seq_lens_ = 0;
  size_t space_bytes_ = 0, work_bytes_ = 0;
  std::vector<RnnCopy> copies_;
  std::shared_ptr<codegen::GpuProgram> transpose_;
};
#endif

#if TENSORD_HAVE_CUDNN_H
// Whether cuDNN runs this node on `device` (else the templates do): float32, static shapes,
// nothing empty, a plan cuDNN can express, and cuDNN usable there. (Without cudnn.h: never,
// and the kernel list has no cuDNN entry.)
bool uses_cudnn(const CudaDevice& device, const Node& node, const std::vector<TensorType>& inputs) {
  if (node.op == "RNN" || node.op == "LSTM" || node.op == "GRU") {
    auto plan = plan_cudnn_rnn(node, inputs);
    return plan.ok() && !plan->has_seq_lens && device.cudnn_usable();
  }
  const bool conv = node.op == "Conv", pool = node.op == "MaxPool" || node.op == "AveragePool" ||
                                              node.op == "GlobalAveragePool" || node.op == "GlobalMaxPool";
  if (!conv && !pool) return false;
  if (inputs.empty() || (conv && inputs.size() < 2)) return false;
  for (size_t i = 0; i < inputs.size() && i < 3; ++i) {
    const TensorType& t = inputs[i];
    if (!t.defined()) continue;
    if (t.dtype != DType::kFloat32 || !shape_is_static(t.shape) || shape_numel(t.shape) == 0) return false;
  }
  if (!inputs[0].defined() || (conv && !inputs[1].defined())) return false;
  if (conv && inputs.size() > 2 && inputs[2].defined() &&
      (inputs[2].shape.size() != 1 || inputs[2].shape[0] != inputs[1].shape[0]))
    return false;
  const bool planned = conv ? plan_cudnn_conv(node, inputs[0].shape, inputs[1].shape,
                                              inputs.size() > 2 && inputs[2].defined())
                                  .ok()
                            : plan_cudnn_pool(node, inputs[0].shape).ok();
  return planned && device.cudnn_usable();
}
#endif

// MatMul/Gemm that cuBLAS runs: static float32, MatMul batches one strided call expresses,
// 2-D Gemm; MatMul of float16 or bfloat16 too (cublasGemmEx, float32 accumulation). The rest
// goes to the templates (codegen::template_supported decides).
bool uses_cublas(const Node& node, const std::vector<TensorType>& inputs) {
  if (inputs.size() < 2 || !inputs[0].defined() || !inputs[1].defined()) return false;
  if (node.op == "MatMul" && inputs.size() == 2 && inputs[0].dtype == inputs[1].dtype &&
      (inputs[0].dtype == DType::kFloat16 || inputs[0].dtype == DType::kBFloat16))
    return shape_is_static(inputs[0].shape) && shape_is_static(inputs[1].shape) &&
           plan_matmul(inputs[0].shape, inputs[1].shape).ok();
  for (size_t i = 0; i < inputs.size() && i < 3; ++i)
    if (inputs[i].defined() && (inputs[i].dtype != DType::kFloat32 || !shape_is_static(inputs[i].shape)))
      return false;
  if (node.op == "MatMul") return plan_matmul(inputs[0].shape, inputs[1].shape).ok();
  return inputs[0].shape.size() == 2 && inputs[1].shape.size() == 2;
}

// The CUDA device's own kernels (cuBLAS, cuDNN, Gelu), ahead of the shared ones
// (codegen/gpu_kernels.h).
std::vector<codegen::GpuKernelEntry> cuda_kernels(CudaDevice* d) {
  using Claim = std::optional<Status>;
  auto domain_ok = [](const Node& n) { return n.domain.empty() || n.domain == "ai.onnx"; };
  std::vector<codegen::GpuKernelEntry> list;
  list.push_back({"cublas",
                  [domain_ok](const Node& node, const std::vector<TensorType>& inputs) -> Claim {
                    if (domain_ok(node) && (node.op == "MatMul" || node.op == "Gemm") && uses_cublas(node, inputs))
                      return OkStatus();
                    return std::nullopt;
                  },
                  [d](const Node& node, const std::vector<TensorType>&) -> std::unique_ptr<Kernel> {
                    return std::make_unique<BlasKernel>(d, node);
                  }});
#if TENSORD_HAVE_CUDNN_H
  list.push_back({"cudnn",
                  [d, domain_ok](const Node& node, const std::vector<TensorType>& inputs) -> Claim {
                    if (domain_ok(node) && uses_cudnn(*d, node, inputs)) return OkStatus();
                    return std::nullopt;
                  },
                  [d](const Node& node, const std::vector<TensorType>&) -> std::unique_ptr<Kernel> {
                    if (node.op == "Conv") return std::make_unique<CudnnConvKernel>(d, node);
                    if (node.op == "RNN" || node.op == "LSTM" || node.op == "GRU")
                      return std::make_unique<CudnnRnnKernel>(d, node);
                    return std::make_unique<CudnnPoolKernel>(d, node);
                  }});
#endif
  list.push_back({"gelu",
                  [domain_ok](const Node& node, const std::vector<TensorType>& inputs) -> Claim {
                    if (domain_ok(node) && gelu_on_device(node, inputs)) return OkStatus();
                    return std::nullopt;
                  },
                  [d](const Node& node, const std::vector<TensorType>&) -> std::unique_ptr<Kernel> {
                    return std::make_unique<GeluKernel>(d, node);
                  }});
  return list;
}

// MatMul/Gemm + bias (+ Relu / tanh-Gelu) as one cublasLtMatmul with a bias epilogue
// (plan_lt_fusions decides which groups). Constant operands were uploaded at compile time. When
// cuBLASLt refuses the group at run time (no heuristic result, NOT_SUPPORTED), the group runs
// unfused from then on -- the bias broadcast by a generated kernel, cuBLAS sgemm with beta=1,
// the activation as its own generated kernel -- and each such run is counted (lt_fallbacks).
class LtRegion final : public RegionKernel {
 public:
  LtRegion(CudaDevice* d, LtFusion f, std::vector<std::string> inputs, const Node* act)
      : device_(d), f_(std::move(f)), inputs_(std::move(inputs)), uploads_(d) {
    if (act) act_ = std::make_unique<Node>(*act);
  }
  Status hold(const std::string& name, const HostTensor& value) {
    TD_ASSIGN_OR_RETURN(Arg a, uploads_.upload(value.data(), static_cast<size_t>(value.nbytes())));
    held_[name] = a.handle;
    return OkStatus();
  }
  Status run(const std::vector<DeviceTensor>& inputs, const std::vector<DeviceTensor>& outputs,
             Allocator& allocator) override {
    TD_ASSIGN_OR_RETURN(CUdeviceptr A, operand(f_.a, inputs));
    TD_ASSIGN_OR_RETURN(CUdeviceptr B, operand(f_.b, inputs));
    TD_ASSIGN_OR_RETURN(CUdeviceptr bias, operand(f_.bias, inputs));
    if (outputs.size() != 1 || !outputs[0].buffer)
      return errors::Internal("{}: cuBLASLt group output not allocated", device_->name());
    TD_ASSIGN_OR_RETURN(Arg y, device_->arg(*outputs[0].buffer));
    const CUdeviceptr Y = CudaDevice::address(*outputs[0].buffer);
    if (!fallback_) {
      Status fused = device_->lt_matmul(f_, A, B, bias, Y);
      if (fused.ok()) return fused;
      // Refusals (NOT_SUPPORTED, no algorithm) and a handle cuBLASLt cannot make: unfused.
      if (fused.code() != StatusCode::kUnimplemented && fused.code() != StatusCode::kUnavailable) return fused;
      fallback_ = true;
      fallback_why_ = fused.message();
    }
    g_lt_fallbacks++;
    // Unfused: Y (or a scratch buffer before the activation) = broadcast bias, += A·op(B).
    if (!expand_) {
      TD_ASSIGN_OR_RETURN(codegen::ElementwiseKernel ek, codegen::lower_expand({f_.n}, {f_.m, f_.n}, DType::kFloat32));
      TD_ASSIGN_OR_RETURN(std::string source, codegen::print_for(*device_, ek));
      TD_ASSIGN_OR_RETURN(expand_, device_->program(source, ek.name));
    }
    std::shared_ptr<Buffer> scratch;
    Arg target = y;
    CUdeviceptr T = Y;
    if (act_) {
      TD_ASSIGN_OR_RETURN(scratch, allocator.allocate(static_cast<size_t>(f_.m * f_.n) * sizeof(float)));
      TD_ASSIGN_OR_RETURN(target, device_->arg(*scratch));
      T = CudaDevice::address(*scratch);
    }
    TD_RETURN_IF_ERROR(device_->launch(*expand_, {Arg{bias, 0}, target}, f_.m * f_.n));
    TD_RETURN_IF_ERROR(device_->sgemm(f_.trans_b, false, f_.n, f_.m, f_.k, 1.0f, B, f_.trans_b ? f_.k : f_.n, 0, A,
                                      f_.k, 0, 1.0f, T, f_.n, 0, 1));
    if (!act_) return OkStatus();
    if (!act_program_ && act_->op == "Gelu") {
      std::string name;
      const std::string source = gelu_source(f_.m * f_.n, f_.epilogue == LtFusion::kGeluBias, &name);
      TD_ASSIGN_OR_RETURN(act_program_, device_->program(source, name));
    }
    if (!act_program_) {
      const TensorType pre{DType::kFloat32, Shape{f_.m, f_.n}};
      const std::string in = act_->inputs[0], out = act_->outputs[0];
      auto type_of = [&](const std::string& v) -> const TensorType* {
        return v == in || v == out ? &pre : nullptr;
      };
      TD_ASSIGN_OR_RETURN(codegen::CompiledGroup c, codegen::compile_group(*device_, {act_.get()}, {act_->outputs[0]},
                                                                         pre.shape, type_of, nullptr));
      act_program_ = std::move(c.program);
    }
    return device_->launch(*act_program_, {target, y}, f_.m * f_.n);
  }
  int64_t arena_bytes() const override { return 0; }
  int64_t weight_bytes() const override { return uploads_.bytes(); }
  std::string describe() const override {
    static const char* kEpi[] = {"BIAS", "RELU_BIAS", "GELU_BIAS"};
    return fmt::format("CudaLtEpilogue: {} nodes as one cublasLtMatmul ({}), {}x{}x{}{}", f_.members.size(),
                       kEpi[f_.epilogue], f_.m, f_.n, f_.k,
                       fallback_ ? " -- unfused at run time: " + fallback_why_ : std::string());
  }

 private:
  Result<CUdeviceptr> operand(const std::string& name, const std::vector<DeviceTensor>& inputs) const {
    if (auto h = held_.find(name); h != held_.end()) return h->second;
    for (size_t i = 0; i < inputs_.size() && i < inputs.size(); ++i)
      if (inputs_[i] == name && inputs[i].buffer) {
        TD_ASSIGN_OR_RETURN(Arg a, device_->arg(*inputs[i].buffer));
        (void)a;  // checks the buffer is this device's
        return CudaDevice::address(*inputs[i].buffer);
      }
    return errors::Internal("{}: cuBLASLt group input '{}' missing", device_->name(), name);
  }

  CudaDevice* device_;
  LtFusion f_;
  std::vector<std::string> inputs_;
  std::unique_ptr<Node> act_;
  std::map<std::string, CUdeviceptr> held_;
  codegen::HeldBuffers uploads_;
  bool fallback_ = false;
  std::string fallback_why_;
  std::shared_ptr<codegen::GpuProgram> expand_, act_program_;
};

// Conv [+ bias] [+ residual] + Relu as one cudnnConvolutionBiasActivationForward
// (plan_conv_fusions decides which groups); the weights and bias (zeros when the graph has
// none) uploaded at compile time; the region's inputs are x and the residual.
class CudnnConvRegion final : public RegionKernel {
 public:
  CudnnConvRegion(CudaDevice* d, const Node& conv, ConvFusion f)
      : device_(d), conv_(d, conv, /*relu=*/true), f_(std::move(f)), uploads_(d) {}
  Status hold(const HostTensor& w, const std::vector<float>& bias) {
    TD_ASSIGN_OR_RETURN(Arg wa, uploads_.upload(w.data(), static_cast<size_t>(w.nbytes())));
    TD_ASSIGN_OR_RETURN(Arg ba, uploads_.upload(bias.data(), bias.size() * sizeof(float)));
    w_ = wa.handle;
    b_ = ba.handle;
    w_shape_ = w.shape();
    return OkStatus();
  }
  Status run(const std::vector<DeviceTensor>& inputs, const std::vector<DeviceTensor>& outputs,
             Allocator& allocator) override {
    const size_t want = f_.residual.empty() ? 1 : 2;
    if (inputs.size() != want || outputs.size() != 1 || !outputs[0].buffer)
      return errors::Internal("{}: a fused convolution's buffers are missing", device_->name());
    for (const DeviceTensor& t : inputs)
      if (!t.buffer) return errors::Internal("{}: a fused convolution's input is missing", device_->name());
    for (const DeviceTensor* t : {&inputs[0], &outputs[0]}) {
      TD_ASSIGN_OR_RETURN(Arg a, device_->arg(*t->buffer));
      (void)a;  // checks the buffer is this device's
    }
    void* Z = want == 2 ? CudnnConvKernel::ptr(*inputs[1].buffer) : nullptr;
    return conv_.forward(inputs[0].shape, CudnnConvKernel::ptr(*inputs[0].buffer), w_shape_,
                         reinterpret_cast<void*>(w_), reinterpret_cast<void*>(b_), Z,
                         CudnnConvKernel::ptr(*outputs[0].buffer), TensorType{outputs[0].dtype, outputs[0].shape},
                         allocator);
  }
  int64_t arena_bytes() const override { return 0; }
  int64_t weight_bytes() const override { return uploads_.bytes(); }
  std::string describe() const override {
    return fmt::format("CudnnConvBiasActivation: Conv{}{}+Relu as one cudnnConvolutionBiasActivationForward, {} channels",
                       f_.bias.empty() ? "" : "+bias", f_.residual.empty() ? "" : "+residual", f_.channels);
  }

 private:
  CudaDevice* device_;
  CudnnConvKernel conv_;
  ConvFusion f_;
  codegen::HeldBuffers uploads_;
  CUdeviceptr w_ = 0, b_ = 0;
  Shape w_shape_;
};

// The groups plan_conv_fusions finds, as CudnnConvRegions (none without cuDNN or with
// TENSORD_CUDA_CONV_FUSION=0); `taken` marks their nodes.
std::vector<Region> conv_fusion_regions(CudaDevice* device, const FusionGraph& g, std::vector<bool>* taken,
                                        std::vector<std::string>* notes) {
  std::vector<Region> regions;
  if (!device->cudnn_usable() || env_is("TENSORD_CUDA_CONV_FUSION", "0")) return regions;
  for (ConvFusion& f : plan_conv_fusions(g, notes)) {
    bool free = true;
    for (size_t m : f.members) free &= !(*taken)[m];
    if (!free) continue;
    const Node& conv = *g.nodes[f.members[0]];
    const HostTensor* w = g.constant(f.w);
    std::vector<float> bias(static_cast<size_t>(f.channels), 0.0f);
    if (!f.bias.empty()) {
      const HostTensor* b = g.constant(f.bias);
      if (!b || b->numel() != f.channels) continue;
      bias.assign(b->data<float>(), b->data<float>() + f.channels);
    }
    Region r;
    r.members = f.members;
    r.inputs = {f.x};
    if (!f.residual.empty()) r.inputs.push_back(f.residual);
    r.outputs = {f.output};
    auto kernel = std::make_unique<CudnnConvRegion>(device, conv, f);
    if (Status up = kernel->hold(*w, bias); !up.ok()) {
      if (notes) notes->push_back(fmt::format("{}: a fused convolution's weights: {}", device->name(), up.message()));
      continue;
    }
    for (size_t m : f.members) (*taken)[m] = true;
    r.kernel = std::move(kernel);
    regions.push_back(std::move(r));
  }
  return regions;
}

// The groups plan_lt_fusions finds, as LtRegions (none where cuBLASLt does not load or
// TENSORD_CUDA_LT=0); `taken` marks their nodes.
std::vector<Region> lt_regions(CudaDevice* device, const FusionGraph& g, std::vector<bool>* taken,
                               std::vector<std::string>* notes) {
  std::vector<Region> regions;
  if (!CudaDevice::lt_usable()) return regions;
  for (LtFusion& f : plan_lt_fusions(g, notes)) {
    Region r;
    r.members = f.members;
    for (const std::string& v : {f.a, f.b, f.bias})
      if (!g.constant(v) && std::find(r.inputs.begin(), r.inputs.end(), v) == r.inputs.end()) r.inputs.push_back(v);
    r.outputs = {f.output};
    const Node* act = f.epilogue == LtFusion::kBias ? nullptr : g.nodes[f.members.back()];
    const std::vector<std::string> constants = {f.a, f.b, f.bias};
    auto kernel = std::make_unique<LtRegion>(device, f, r.inputs, act);
    Status up;
    for (const std::string& v : constants)
      if (const HostTensor* c = g.constant(v); c && up.ok()) up = kernel->hold(v, *c);
    if (!up.ok()) {
      if (notes) notes->push_back(fmt::format("{}: a cuBLASLt group's constants: {}", device->name(), up.message()));
      continue;
    }
    for (size_t m : f.members) (*taken)[m] = true;
    r.kernel = std::move(kernel);
    regions.push_back(std::move(r));
  }
  return regions;
}

// ---- discovery ----

class CudaBackend final : public Backend {
 public:
  std::string name() const override { return "cuda"; }
  std::string version() const override { return kVersion; }
  std::string unavailable_reason() const override { return why_; }
  Status check_settings() const override {
    if (const char* a = std::getenv("TENSORD_CUDA_COMPILE_ONLY"); a && *a) {
      const std::string arch = a;
      if ((arch.rfind("sm_", 0) != 0 && arch.rfind("compute_", 0) != 0) ||
          arch.find_first_not_of("0123456789abf", arch.find('_') + 1) != std::string::npos ||
          arch.size() <= arch.find('_') + 1)
        return errors::InvalidArgument("TENSORD_CUDA_COMPILE_ONLY='{}' is not an architecture (sm_90, compute_90)",
                                       arch);
    }
    return OkStatus();
  }
  std::vector<std::unique_ptr<Device>> enumerate() override {
    std::vector<std::unique_ptr<Device>> devices;
    why_.clear();
    if (env_is("TENSORD_CUDA", "0")) {
      why_ = "TENSORD_CUDA=0";
      return devices;
    }
    if (const char* a = std::getenv("TENSORD_CUDA_COMPILE_ONLY"); a && *a) {
      std::string nv;
      if (!nvrtc_api(&nv)) {
        why_ = "TENSORD_CUDA_COMPILE_ONLY needs NVRTC: " + nv;
        return devices;
      }
      devices.push_back(std::make_unique<CudaDevice>(std::string(a)));
      return devices;
    }
    why_ = discover(&devices);
    if (!devices.empty()) why_.clear();
    return devices;
  }

 private:
  static std::string discover(std::vector<std::unique_ptr<Device>>* devices) {
    std::string why;
    const DriverApi* api = driver_api(&why);
    if (!api) return "no NVIDIA driver: " + why;
    CUresult r = api->cuInit(0);
    if (r != CUDA_SUCCESS) return "cuInit failed: " + cu_error(api, r) + " (driver " + api->path + ")";
    int n = 0;
    r = api->cuDeviceGetCount(&n);
    if (r != CUDA_SUCCESS) return "cuDeviceGetCount failed: " + cu_error(api, r);
    if (n == 0) return "the NVIDIA driver sees no GPU";
    std::string problems;
    std::vector<CudaDevice*> made;
    for (int i = 0; i < n; ++i) {
      CUdevice dev = 0;
      CUcontext ctx = nullptr;
      CUstream stream = nullptr;
      r = api->cuDeviceGet(&dev, i);
      if (r == CUDA_SUCCESS) r = api->cuDevicePrimaryCtxRetain(&ctx, dev);
      if (r == CUDA_SUCCESS) r = api->cuCtxSetCurrent(ctx);
      if (r == CUDA_SUCCESS) r = api->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
      if (r != CUDA_SUCCESS) {
        problems += fmt::format("{}GPU {}: {}", problems.empty() ? "" : "; ", i, cu_error(api, r));
        if (ctx) api->cuDevicePrimaryCtxRelease(dev);
        continue;
      }
      auto d = std::make_unique<CudaDevice>(api, dev, ctx, stream, static_cast<int>(devices->size()));
      made.push_back(d.get());
      devices->push_back(std::move(d));
    }
    // Peer access where the hardware allows it (NVLink or PCIe P2P): copies then go direct.
    for (CudaDevice* a : made)
      for (CudaDevice* b : made) {
        if (a == b) continue;
        int can = 0;
        if (api->cuDeviceCanAccessPeer(&can, a->cu_device(), b->cu_device()) != CUDA_SUCCESS || !can) continue;
        api->cuCtxSetCurrent(a->context());
        r = api->cuCtxEnablePeerAccess(b->context(), 0);
        if (r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) a->add_peer(b);
      }
    return problems.empty() ? std::string("no usable GPU") : problems;
  }

  std::string why_;
};

}  // namespace

// ---- public helpers ----

bool nvrtc_available(std::string* why) { return nvrtc_api(why) != nullptr; }

std::vector<int> nvrtc_architectures() {
  std::string why;
  const NvrtcApi* api = nvrtc_api(&why);
  if (!api) return {};
  int n = 0;
  if (api->nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return {};
  std::vector<int> archs(static_cast<size_t>(n));
  if (api->nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) return {};
  std::sort(archs.begin(), archs.end());
  return archs;
}

std::string choose_arch(int cc, const std::vector<int>& known) {
  if (std::find(known.begin(), known.end(), cc) != known.end()) return "sm_" + std::to_string(cc);
  int best = 0;
  for (int a : known)
    if (a <= cc) best = std::max(best, a);
  return best ? "compute_" + std::to_string(best) : std::string();
}

Result<CompiledCode> nvrtc_compile(const std::string& source, const std::string& arch) {
  std::string why;
  const NvrtcApi* api = nvrtc_api(&why);
  if (!api) return errors::Unavailable("NVRTC is not available: {}", why);
  nvrtcProgram prog = nullptr;
  nvrtcResult r = api->nvrtcCreateProgram(&prog, source.c_str(), "tensord_generated.cu", 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS)
    return errors::Internal("nvrtcCreateProgram failed: {}", api->nvrtcGetErrorString(r));
  const std::string arch_opt = "--gpu-architecture=" + arch;
  const char* opts[] = {arch_opt.c_str(), "--std=c++17", "--fmad=false", "-default-device"};
  r = api->nvrtcCompileProgram(prog, 4, opts);
  std::string log;
  size_t log_size = 0;
  if (api->nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    log.resize(log_size);
    api->nvrtcGetProgramLog(prog, log.data());
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  }
  if (r != NVRTC_SUCCESS) {
    api->nvrtcDestroyProgram(&prog);
    g_compile_failures++;
    if (log.size() > 4000) log.resize(4000);
    return errors::Internal("a generated kernel did not compile for {} ({}): {}\n--- source ---\n{}", arch,
                            api->nvrtcGetErrorString(r), log, source);
  }
  CompiledCode code;
  code.arch = arch;
  code.cubin = arch.rfind("sm_", 0) == 0;
  size_t size = 0;
  r = code.cubin ? api->nvrtcGetCUBINSize(prog, &size) : api->nvrtcGetPTXSize(prog, &size);
  if (r == NVRTC_SUCCESS && size > 0) {
    code.image.resize(size);
    r = code.cubin ? api->nvrtcGetCUBIN(prog, code.image.data()) : api->nvrtcGetPTX(prog, code.image.data());
  }
  api->nvrtcDestroyProgram(&prog);
  if (r != NVRTC_SUCCESS || code.image.empty())
    return errors::Internal("NVRTC produced no {} for {}", code.cubin ? "cubin" : "PTX", arch);
  g_programs_built++;
  return code;
}

Result<GemmPlan> plan_matmul(const std::vector<int64_t>& a_in, const std::vector<int64_t>& b_in) {
  if (a_in.empty() || b_in.empty()) return errors::InvalidArgument("MatMul of a scalar");
  std::vector<int64_t> a = a_in, b = b_in;
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);  // [K] -> [1, K]
  if (b_vec) b.push_back(1);          // [K] -> [K, 1]
  GemmPlan p;
  p.m = a[a.size() - 2];
  p.k = a[a.size() - 1];
  p.n = b[b.size() - 1];
  if (b[b.size() - 2] != p.k)
    return errors::InvalidArgument("MatMul: inner dimensions {} and {} differ", p.k, b[b.size() - 2]);
  const std::vector<int64_t> ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  const size_t rank = std::max(ab.size(), bb.size());
  std::vector<int64_t> batch(rank, 1);
  int64_t na = 1, nb = 1;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t x = d + ab.size() >= rank ? ab[d + ab.size() - rank] : 1;
    const int64_t y = d + bb.size() >= rank ? bb[d + bb.size() - rank] : 1;
    if (x != y && x != 1 && y != 1)
      return errors::InvalidArgument("MatMul: batch dimensions {} and {} do not broadcast", x, y);
    batch[d] = std::max(x, y);
    if (x == 0 || y == 0) batch[d] = 0;
    na *= x;
    nb *= y;
  }
  int64_t total = 1;
  for (int64_t v : batch) total *= v;
  // One strided call: each side is either the full batch or a single matrix (stride 0).
  if ((na != total && na != 1) || (nb != total && nb != 1))
    return errors::Unimplemented("MatMul: batch dims {} and {} broadcast partially (one strided cuBLAS call cannot)",
                                 fmt::join(ab, "x"), fmt::join(bb, "x"));
  p.batch = total;
  p.stride_a = na == 1 ? 0 : p.m * p.k;
  p.stride_b = nb == 1 ? 0 : p.k * p.n;
  p.stride_c = p.m * p.n;
  // A batched A times one B: one tall matrix (batch*M) x K — a single, faster GEMM.
  if (p.batch > 1 && p.stride_b == 0 && p.stride_a != 0) {
    p.m *= p.batch;
    p.batch = 1;
    p.stride_a = p.stride_c = 0;
  }
  p.out_shape = batch;
  if (!a_vec) p.out_shape.push_back(a[a.size() - 2]);
  if (!b_vec) p.out_shape.push_back(p.n);
  return p;
}

namespace {

// Symmetric pads per spatial dim from pads/auto_pad (ONNX), or UNIMPLEMENTED naming why.
Status resolve_pads(const Node& node, const std::vector<int64_t>& in, const std::vector<int64_t>& k,
                    const std::vector<int64_t>& strides, const std::vector<int64_t>& dil, std::vector<int>* pads) {
  NodeAttrs attrs(node);
  const size_t n = in.size();
  TD_ASSIGN_OR_RETURN(std::string auto_pad, attrs.attr_string("auto_pad", "NOTSET"));
  pads->assign(n, 0);
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t d = 0; d < n; ++d) {
      const int64_t out = (in[d] + strides[d] - 1) / strides[d];
      const int64_t total = std::max<int64_t>(0, (out - 1) * strides[d] + (k[d] - 1) * dil[d] + 1 - in[d]);
      if (total % 2)
        return errors::Unimplemented("{}: {} needs asymmetric padding (cuDNN pads both sides alike)", node.label(),
                                     auto_pad);
      (*pads)[d] = static_cast<int>(total / 2);
    }
    return OkStatus();
  }
  if (auto_pad == "VALID") return OkStatus();
  if (auto_pad != "NOTSET") return errors::InvalidArgument("{}: unknown auto_pad '{}'", node.label(), auto_pad);
  TD_ASSIGN_OR_RETURN(std::vector<int64_t> p, attrs.attr_ints("pads", std::vector<int64_t>(2 * n, 0)));
  if (p.size() != 2 * n)
    return errors::InvalidArgument("{}: {} pads for {} spatial dims", node.label(), p.size(), n);
  for (size_t d = 0; d < n; ++d) {
    if (p[d] != p[d + n])
      return errors::Unimplemented("{}: asymmetric pads {} and {} (cuDNN pads both sides alike)", node.label(),
                                   p[d], p[d + n]);
    if (p[d] < 0) return errors::InvalidArgument("{}: a negative pad", node.label());
    (*pads)[d] = static_cast<int>(p[d]);
  }
  return OkStatus();
}

Result<std::vector<int64_t>> spatial_attr(const Node& node, const char* name, size_t n) {
  NodeAttrs attrs(node);
  TD_ASSIGN_OR_RETURN(std::vector<int64_t> v, attrs.attr_ints(name, std::vector<int64_t>(n, 1)));
  if (v.size() != n) return errors::InvalidArgument("{}: {} has {} values for {} spatial dims", node.label(), name,
                                                    v.size(), n);
  for (int64_t a : v)
    if (a < 1 || a > 0x7fffffff) return errors::InvalidArgument("{}: {} value {}", node.label(), name, a);
  return v;
}

bool fits_int(const std::vector<int64_t>& v) {
  for (int64_t a : v)
    if (a < 0 || a > 0x7fffffff) return false;
  return true;
}

}  // namespace

Result<ConvPlan> plan_cudnn_conv(const Node& node, const std::vector<int64_t>& x, const std::vector<int64_t>& w,
                                 bool has_bias) {
  if (x.size() < 3 || x.size() > 5 || w.size() != x.size())
    return errors::Unimplemented("{}: cuDNN convolves 1 to 3 spatial dims (input rank {}, weight rank {})",
                                 node.label(), x.size(), w.size());
  const size_t n = x.size() - 2;
  NodeAttrs attrs(node);
  TD_ASSIGN_OR_RETURN(int64_t group, attrs.attr_int("group", 1));
  if (group < 1 || x[1] % group != 0 || w[0] % group != 0 || w[1] * group != x[1])
    return errors::InvalidArgument("{}: {} channels, weight {} and group {} do not agree", node.label(), x[1],
                                   fmt::join(w, "x"), group);
  std::vector<int64_t> in(x.begin() + 2, x.end()), k(w.begin() + 2, w.end());
  if (attrs.has_attr("kernel_shape")) {
    TD_ASSIGN_OR_RETURN(std::vector<int64_t> ks, attrs.attr_ints("kernel_shape", {}));
    if (ks != k) return errors::InvalidArgument("{}: kernel_shape {} differs from the weight's {}", node.label(),
                                                fmt::join(ks, "x"), fmt::join(k, "x"));
  }
  TD_ASSIGN_OR_RETURN(std::vector<int64_t> strides, spatial_attr(node, "strides", n));
  TD_ASSIGN_OR_RETURN(std::vector<int64_t> dil, spatial_attr(node, "dilations", n));
  ConvPlan p;
  TD_RETURN_IF_ERROR(resolve_pads(node, in, k, strides, dil, &p.pads));
  p.x = x;
  p.w = w;
  p.y = {x[0], w[0]};
  for (size_t d = 0; d < n; ++d) {
    const int64_t span = (k[d] - 1) * dil[d] + 1;
    const int64_t padded = in[d] + 2 * p.pads[d];
    if (padded < span)
      return errors::InvalidArgument("{}: the window {} is larger than the padded input {}", node.label(), span,
                                     padded);
    p.y.push_back((padded - span) / strides[d] + 1);
    p.strides.push_back(static_cast<int>(strides[d]));
    p.dilations.push_back(static_cast<int>(dil[d]));
  }
  if (n == 1) {  // [N, C, W] -> [N, C, 1, W]
    p.x.insert(p.x.begin() + 2, 1);
    p.w.insert(p.w.begin() + 2, 1);
    p.y.insert(p.y.begin() + 2, 1);
    p.pads.insert(p.pads.begin(), 0);
    p.strides.insert(p.strides.begin(), 1);
    p.dilations.insert(p.dilations.begin(), 1);
  }
  if (!fits_int(p.x) || !fits_int(p.w) || !fits_int(p.y))
    return errors::Unimplemented("{}: a dimension exceeds cuDNN's int", node.label());
  p.group = static_cast<int>(group);
  p.bias = has_bias;
  return p;
}

Result<PoolPlan> plan_cudnn_pool(const Node& node, const std::vector<int64_t>& x) {
  if (x.size() < 3 || x.size() > 5)
    return errors::Unimplemented("{}: cuDNN pools 1 to 3 spatial dims (input rank {})", node.label(), x.size());
  const size_t n = x.size() - 2;
  const std::vector<int64_t> in(x.begin() + 2, x.end());
  PoolPlan p;
  p.x = x;
  p.y = {x[0], x[1]};
  if (node.op == "GlobalAveragePool" || node.op == "GlobalMaxPool") {
    p.mode = node.op == "GlobalMaxPool" ? PoolPlan::kMax : PoolPlan::kAverageIncludePad;
    for (size_t d = 0; d < n; ++d) {
      p.window.push_back(static_cast<int>(in[d]));
      p.pads.push_back(0);
      p.strides.push_back(1);
      p.y.push_back(1);
    }
  } else if (node.op == "MaxPool" || node.op == "AveragePool") {
    NodeAttrs attrs(node);
    if (node.op == "MaxPool" && node.outputs.size() > 1 && !node.outputs[1].empty())
      return errors::Unimplemented("{}: cuDNN gives no Indices output", node.label());
    TD_ASSIGN_OR_RETURN(std::vector<int64_t> k, attrs.attr_ints("kernel_shape", {}));
    if (k.size() != n)
      return errors::InvalidArgument("{}: kernel_shape has {} values for {} spatial dims", node.label(), k.size(), n);
    TD_ASSIGN_OR_RETURN(std::vector<int64_t> strides, spatial_attr(node, "strides", n));
    TD_ASSIGN_OR_RETURN(std::vector<int64_t> dil, spatial_attr(node, "dilations", n));
    for (int64_t v : dil)
      if (v != 1) return errors::Unimplemented("{}: dilated pooling (cuDNN has none)", node.label());
    TD_RETURN_IF_ERROR(resolve_pads(node, in, k, strides, dil, &p.pads));
    TD_ASSIGN_OR_RETURN(int64_t ceil_mode, attrs.attr_int("ceil_mode", 0));
    TD_ASSIGN_OR_RETURN(int64_t include_pad, attrs.attr_int("count_include_pad", 0));
    p.mode = node.op == "MaxPool" ? PoolPlan::kMax
             : include_pad        ? PoolPlan::kAverageIncludePad
                                  : PoolPlan::kAverageExcludePad;
    for (size_t d = 0; d < n; ++d) {
      if (k[d] < 1 || k[d] > 0x7fffffff) return errors::InvalidArgument("{}: kernel_shape {}", node.label(), k[d]);
      if (p.pads[d] >= k[d])
        return errors::Unimplemented("{}: a pad of {} is not below the window {} (cuDNN)", node.label(), p.pads[d],
                                     k[d]);
      const int64_t padded = in[d] + 2 * p.pads[d];
      if (padded < k[d])
        return errors::InvalidArgument("{}: the window {} is larger than the padded input {}", node.label(), k[d],
                                       padded);
      const int64_t floor_out = (padded - k[d]) / strides[d] + 1;
      if (ceil_mode && (padded - k[d]) % strides[d] != 0)
        return errors::Unimplemented("{}: ceil_mode adds a partial window (cuDNN rounds down)", node.label());
      p.y.push_back(floor_out);
      p.window.push_back(static_cast<int>(k[d]));
      p.strides.push_back(static_cast<int>(strides[d]));
    }
  } else {
    return errors::Unimplemented("{}: {} is not a cuDNN pooling", node.label(), node.op);
  }
  if (n == 1) {
    p.x.insert(p.x.begin() + 2, 1);
    p.y.insert(p.y.begin() + 2, 1);
    p.window.insert(p.window.begin(), 1);
    p.pads.insert(p.pads.begin(), 0);
    p.strides.insert(p.strides.begin(), 1);
  }
  if (!fits_int(p.x) || !fits_int(p.y)) return errors::Unimplemented("{}: a dimension exceeds cuDNN's int", node.label());
  return p;
}

int64_t cudnn_version(std::string* why) {
#if TENSORD_HAVE_CUDNN_H
  const CudnnApi* api = cudnn_api(why);
  return api ? static_cast<int64_t>(api->cudnnGetVersion()) : 0;
#else
  if (why) *why = "this build has no cuDNN (cudnn.h was not found at configure time)";
  return 0;
#endif
}

std::vector<std::pair<size_t, size_t>> plan_chunks(size_t bytes, size_t chunk) {
  std::vector<std::pair<size_t, size_t>> out;
  if (chunk == 0) chunk = 1;
  for (size_t off = 0; off < bytes; off += chunk) out.emplace_back(off, std::min(chunk, bytes - off));
  return out;
}

void set_compile_only_collector(std::function<void(const std::string&, const std::string&)> collect) {
  std::lock_guard<std::mutex> lock(g_collector_mu);
  g_collector = std::move(collect);
}

std::unique_ptr<Backend> create_cuda_backend() { return std::make_unique<CudaBackend>(); }
int64_t programs_built() { return g_programs_built.load(); }
int64_t disk_cache_hits() { return g_disk_hits.load(); }
int64_t kernels_launched() { return g_kernels_launched.load(); }
int64_t compile_failures() { return g_compile_failures.load(); }
int64_t graph_captures() { return g_graph_captures.load(); }
int64_t graph_replays() { return g_graph_replays.load(); }
int64_t cudnn_rnn_calls() { return g_cudnn_rnn_calls.load(); }
int64_t lt_fused_calls() { return g_lt_fused_calls.load(); }
int64_t lt_fallbacks() { return g_lt_fallbacks.load(); }
int64_t conv_fused_calls() { return g_conv_fused.load(); }
std::string last_source() {
  return g_sources.last();
}

}  // namespace tensord::cuda
