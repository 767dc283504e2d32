// The runtime a GPU backend implements for the shared GPU layer (gpu_kernels.h): compile
// generated source into a program (kept in memory per device, and on disk), bind buffer
// arguments, launch over n work items. As tinygrad's device runtimes and TVM's DeviceAPI, it is
// the only part of a GPU backend that speaks the device API for generated kernels; everything
// above it (the kernel classes, the ordered kernel list, the region compiler) lives once in
// gpu_kernels.h. The OpenCL and CUDA backends implement it; a HIP or Level Zero backend would
// implement `build`, `launch` and the Device's memory calls, and list its library kernels.
//
// Events and stream order stay the backends' own: every launch goes to the device's one
// in-order queue (OpenCL command queue, CUDA stream), so the shared kernels need none.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backends/codegen/templates.h"

namespace tensord::codegen {

// FNV-1a over bytes (the disk caches' and tuning files' keys and checksums).
uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull);

// A cache folder: `env` names it ("off": none), else $XDG_CACHE_HOME/tensord/<sub> or
// ~/.cache/tensord/<sub>; empty when disabled or no home is known.
std::filesystem::path cache_folder(const char* env, const char* sub);

// One entry of the on-disk cache of compiled programs (TENSORD_KERNEL_CACHE, else
// .../tensord/kernels), shared by every GPU backend: the file is named by a hash of the
// device key (device, driver or compiler version, and build options where there are any) and a
// hash of the source; it holds `magic`, the source's hash, the binary's size and hash, and the
// binary. Anything that does not check out is ignored (the caller builds from source and
// stores afresh); writes are atomic (a temporary file renamed).
class ProgramDiskCache {
 public:
  // `magic`: the format and backend ("tensord-opencl-program-v1\n"); `ext`: the file ending
  // ("clbin", "cubin", "ptx"). `file()` is empty when the cache is off.
  ProgramDiskCache(std::string magic, const std::string& device_key, const std::string& source,
                   const std::string& ext);
  const std::filesystem::path& file() const { return file_; }
  // The stored binary, or "" (absent, stale, corrupt, cache off).
  std::string load() const;
  void store(const std::string& binary) const;

 private:
  std::string magic_;
  uint64_t source_hash_ = 0;
  std::filesystem::path file_;
};

// A kernel argument: a device allocation (a cl_mem, a CUdeviceptr, ... as an integer) and the
// byte offset of the tensor in it (generated kernels take (base, offset) pairs, so a pooled
// sub-allocation needs no sub-buffer).
struct GpuArg {
  uint64_t handle = 0;
  uint64_t offset = 0;
};
// The argument for byte `offset` of allocation `allocation` (what Device::allocate returned).
inline GpuArg allocation_arg(const void* allocation, uint64_t offset = 0) {
  return GpuArg{static_cast<uint64_t>(reinterpret_cast<uintptr_t>(allocation)), offset};
}

// A compiled program with its one kernel; each backend derives its own (cl_program +
// cl_kernel, CUmodule + CUfunction). Owned by the device's program cache and shared with the
// kernels that launch it; released with the last of them.
struct GpuProgram {
  virtual ~GpuProgram() = default;
};

// Device allocations a fused kernel holds (uploaded constants and weights), freed with it.
class HeldBuffers {
 public:
  explicit HeldBuffers(Device* d) : device_(d) {}
  ~HeldBuffers();
  HeldBuffers(const HeldBuffers&) = delete;
  HeldBuffers& operator=(const HeldBuffers&) = delete;
  // Copies `bytes` bytes to a new allocation of the device, held until destruction.
  Result<GpuArg> upload(const void* data, size_t bytes);
  int64_t bytes() const { return bytes_; }

 private:
  Device* device_;
  std::vector<std::pair<void*, size_t>> held_;
  int64_t bytes_ = 0;
};

// The source a backend's devices built last (its test hook last_source()). Thread-safe.
class SourceLog {
 public:
  void set(const std::string& source);
  std::string last() const;

 private:
  mutable std::mutex mu_;
  std::string last_;
};

// A device whose generated kernels go through this runtime. Thread-safe: the engine compiles
// and runs from several threads.
class GpuDevice : public Device {
 public:
  // `log` (optional, may be null; outlives the device) records each source built.
  explicit GpuDevice(SourceLog* log) : log_(log) {}
  const std::string& name() const { return info().name; }

  // What the generated kernels are printed in and may use.
  virtual Dialect dialect() const = 0;
  // Element-wise chains and reductions over float16/bfloat16 (stored as 16-bit words, computed
  // in float32: kernel_ir.h Storage). Default: none.
  virtual bool halves() const { return false; }
  // Why the device cannot run float64 kernels, phrased after its name ("has no float64
  // (cl_khr_fp64)"); "" where it can (the default).
  virtual std::string no_fp64() const { return ""; }
  // Names the fused kernels in describe(): "OpenCl" -> "OpenClElementwise: ...".
  virtual std::string describe_prefix() const = 0;

  // The program for `source` whose kernel is `kernel_name`: built once per device (build())
  // and kept for the device's lifetime, keyed by source.
  Result<std::shared_ptr<GpuProgram>> program(const std::string& source,
                                              const std::string& kernel_name);
  // The program of a device-neutral template kernel (templates.h), printed in dialect().
  Result<std::shared_ptr<GpuProgram>> template_program(const TemplateKernel& k);
  // Enqueues `p` over `n` work items on the device's queue with these buffer arguments
  // (inputs, then outputs; asynchronous: ordered before later launches and copies). n <= 0
  // launches nothing.
  virtual Status launch(GpuProgram& p, const std::vector<GpuArg>& args, int64_t n) = 0;
  // The argument of a buffer of this device (INTERNAL naming the other device otherwise).
  Result<GpuArg> arg(const Buffer& b) const;

 protected:
  // Compiles `source` (through the disk cache where the backend keeps one) and finds
  // `kernel_name` in it. Errors name the device and carry the compiler's log.
  virtual Result<std::shared_ptr<GpuProgram>> build(const std::string& source,
                                                    const std::string& kernel_name) = 0;
  // Drops the device's programs (before a backend tears its context down).
  void release_programs();

 private:
  SourceLog* log_;
  std::mutex programs_mu_;
  std::unordered_map<std::string, std::shared_ptr<GpuProgram>> programs_;
};

}  // namespace tensord::codegen
