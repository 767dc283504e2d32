// The OpenCL backend's internals, shared by its files (not included outside
// src/backends/opencl): the device (opencl_device.cpp: the runtime of codegen/gpu_runtime.h,
// memory, discovery), its library kernels (opencl_kernels.cpp: CLBlast GEMMs, recurrent ops),
// the fused convolutions (conv_region.cpp) and `tensord tune` (opencl_tune.cpp).
#pragma once

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backends/codegen/gpu_kernels.h"
#include "backends/opencl/opencl_backend.h"

namespace tensord::opencl {

// clFinish, counted (a run should wait once, at its end).
cl_int finish_queue(cl_command_queue q);
// An OpenCL error as a Status naming the device and what failed (out of memory or
// resources: RESOURCE_EXHAUSTED; else INTERNAL).
Status cl_status(cl_int e, const std::string& device, const std::string& what);
template <typename T>
T device_value(cl_device_id d, cl_device_info what, T fallback) {
  T v{};
  return clGetDeviceInfo(d, what, sizeof(T), &v, nullptr) == CL_SUCCESS ? v : fallback;
}
// The tuning file of a device ("platform|device|driver"); empty when tuning files are off.
std::filesystem::path tune_path(const std::string& device_key);

// One platform: its context over all its devices. Shared by its devices.
struct Platform {
  cl_platform_id id = nullptr;
  cl_context context = nullptr;
  std::string name;
  ~Platform() {
    if (context) clReleaseContext(context);
  }
};
class OpenClDevice;

// A compiled program and its one kernel, per device and source.
struct Program final : codegen::GpuProgram {
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
  size_t local_size = 1;
  std::mutex mu;  // clSetKernelArg + enqueue of one cl_kernel: one thread at a time
  ~Program() override {
    if (kernel) clReleaseKernel(kernel);
    if (program) clReleaseProgram(program);
  }
};

// A device buffer argument: the cl_mem (as an integer) and the byte offset of the tensor in it.
using Arg = codegen::GpuArg;
inline cl_mem mem(const Arg& a) { return reinterpret_cast<cl_mem>(static_cast<uintptr_t>(a.handle)); }

// The device's kernel list, ahead of the shared entries, and its fused convolutions (defined
// with its kernels below).
std::vector<codegen::GpuKernelEntry> opencl_kernels(OpenClDevice* d);
std::vector<Region> conv_regions(OpenClDevice& device, const FusionGraph& g, std::vector<bool>& taken,
                                 std::vector<std::string>* notes);

class OpenClDevice final : public codegen::GpuDevice {
 public:
  OpenClDevice(std::shared_ptr<Platform> platform, cl_device_id id, int index, cl_command_queue q);

  // "platform|device|driver": what a tuning file and a cached program are keyed by.
  std::string device_key() const { return platform_->name + "|" + info_.model + "|" + info_.driver_version; }

  // Reads this device's tuning file (tensord tune), if any: the generated kernels' work-group
  // size and CLBlast kernel parameters. A file of another device or driver, or a line that
  // does not parse or apply, is ignored (the defaults stay).
  void load_tuning();
  ~OpenClDevice() override;

  const DeviceInfo& info() const override { return info_; }
  codegen::Dialect dialect() const override { return codegen::Dialect::kOpenCL; }
  std::string no_fp64() const override { return fp64_ ? "" : "has no float64 (cl_khr_fp64)"; }
  std::string describe_prefix() const override { return "OpenCl"; }
  // A CPU device (PoCL's): work items of a group run one after another on one core.
  bool is_cpu() const { return cpu_; }
  cl_context context() const { return platform_->context; }
  const Platform* platform() const { return platform_.get(); }
  cl_device_id id() const { return id_; }
  cl_command_queue queue() const { return queue_; }
  // CLBlast for MatMul/Gemm/Conv (built with it and not turned off by TENSORD_OPENCL_BLAS=0).
  bool blas() const { return blas_; }
  // The convolutions' GEMM: 0 = CLBlast, else the generated kernel with this many output
  // channels per work item (tuning file "conv_gemm", TENSORD_OPENCL_CONV_TILE overrides).
  int64_t conv_tile() const { return conv_tile_; }
  void set_conv_tile(int64_t t) { conv_tile_ = t; }
  Status synchronize() override {
    const cl_int e = finish_queue(queue_);
    return e == CL_SUCCESS ? OkStatus() : cl_status(e, info_.name, "finishing a run");
  }
  // TENSORD_OPENCL_SYNC: every kernel finishes before the next starts (timing, debugging).
  Status finish_if_sync() {
    if (!sync_) return OkStatus();
    const cl_int e = finish_queue(queue_);
    return e == CL_SUCCESS ? OkStatus() : cl_status(e, info_.name, "running a kernel");
  }
  Result<void*> allocate(size_t bytes) override;
  void free(void* ptr, size_t bytes) override;
  Status write(const Buffer& dst, size_t offset, const void* src, size_t bytes) override;
  Status read(const Buffer& src, size_t offset, void* dst, size_t bytes) override;
  const KernelTable& kernels() const override { return kernels_; }
  RegionCompiler* region_compiler() override { return &regions_; }

  // Devices of one platform share a context: a direct copy. The source's queue is drained
  // first (its producer may still run) and the copy finishes before returning (the source
  // may be freed and reused right after).
  bool copy_from(const Buffer& dst, const Buffer& src) override;

  // Enqueues `p` over n work items with these buffer arguments (inputs then outputs).
  Status launch(codegen::GpuProgram& gp, const std::vector<Arg>& args, int64_t n) override;


 protected:
  // The program for `source`: from the disk cache (a binary for this device, driver and
  // source) or built from source (and stored there).
  Result<std::shared_ptr<codegen::GpuProgram>> build(const std::string& source,
                                                     const std::string& kernel_name) override;

 private:
  std::shared_ptr<Platform> platform_;
  cl_device_id id_;
  cl_command_queue queue_;
  DeviceInfo info_;
  cl_ulong max_alloc_ = 0;
  size_t max_work_group_ = 1;
  size_t tuned_local_ = 0;  // from the tuning file (0: the device's limits)
  int64_t conv_tile_ = 8;
  bool fp64_ = false;
  bool cpu_ = (device_value<cl_device_type>(id_, CL_DEVICE_TYPE, 0) & CL_DEVICE_TYPE_CPU) != 0;
  bool sync_ = std::getenv("TENSORD_OPENCL_SYNC") != nullptr;  // finish after every kernel
#ifdef TENSORD_HAVE_CLBLAST
  bool blas_ = !(std::getenv("TENSORD_OPENCL_BLAS") && std::string(std::getenv("TENSORD_OPENCL_BLAS")) == "0");
#else
  bool blas_ = false;
#endif
  codegen::GpuKernelTable kernels_;
  codegen::GpuRegionCompiler regions_;
};

// ---- CLBlast (opencl_kernels.cpp) ----

// One (batched) SGEMM in row-major storage; offsets in elements, one per batch entry.
struct GemmCall {
  bool ta = false, tb = false;
  size_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  cl_mem a = nullptr, b = nullptr, c = nullptr;
  size_t lda = 0, ldb = 0, ldc = 0;
  std::vector<size_t> a_off, b_off, c_off;
};

// The element offset of a tensor's bytes in its allocation (float32: a multiple of 4).
Result<size_t> float_offset(const Arg& a);
// `g` on CLBlast on the device's queue (UNIMPLEMENTED in a build without CLBlast).
Status run_gemm(OpenClDevice& d, const GemmCall& g);

}  // namespace tensord::opencl
