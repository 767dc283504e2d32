#include "backends/opencl/opencl_backend.h"

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <sstream>
#include <filesystem>
#include <fstream>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <cmath>
#include <mutex>
#include <unordered_map>

#ifdef TENSORD_HAVE_CLBLAST
#include <clblast.h>
#endif

#include "backends/codegen/gpu_kernels.h"
#include "backends/codegen/lower.h"
#include "backends/codegen/printer.h"
#include "backends/codegen/recurrent.h"
#include "backends/codegen/templates.h"
#include "core/errors.h"
#include "core/node_attrs.h"
#include "tensord/version.h"

namespace tensord::opencl {
namespace {

std::atomic<int64_t> g_programs_built{0};
std::atomic<int64_t> g_kernels_launched{0};
std::atomic<int64_t> g_buffers_created{0};
std::atomic<int64_t> g_finishes{0};
// clFinish, counted (a run should wait once, at its end).
cl_int finish_queue(cl_command_queue q) {
  g_finishes++;
  return clFinish(q);
}
std::atomic<int64_t> g_conv_regions{0};
codegen::SourceLog g_sources;

const char* cl_error_name(cl_int e) {
  switch (e) {
    case CL_SUCCESS: return "CL_SUCCESS";
    case CL_DEVICE_NOT_FOUND: return "CL_DEVICE_NOT_FOUND";
    case CL_MEM_OBJECT_ALLOCATION_FAILURE: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case CL_OUT_OF_RESOURCES: return "CL_OUT_OF_RESOURCES";
    case CL_OUT_OF_HOST_MEMORY: return "CL_OUT_OF_HOST_MEMORY";
    case CL_BUILD_PROGRAM_FAILURE: return "CL_BUILD_PROGRAM_FAILURE";
    case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
    case CL_INVALID_BUFFER_SIZE: return "CL_INVALID_BUFFER_SIZE";
    case CL_INVALID_MEM_OBJECT: return "CL_INVALID_MEM_OBJECT";
    case CL_INVALID_KERNEL_ARGS: return "CL_INVALID_KERNEL_ARGS";
    case CL_INVALID_WORK_GROUP_SIZE: return "CL_INVALID_WORK_GROUP_SIZE";
    default: return "an OpenCL error";
  }
}

Status cl_status(cl_int e, const std::string& device, const std::string& what) {
  const StatusCode code = (e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_RESOURCES ||
                           e == CL_OUT_OF_HOST_MEMORY)
                              ? StatusCode::kResourceExhausted
                              : StatusCode::kInternal;
  return Status(code, fmt::format("{}: {} failed: {} ({})", device, what, cl_error_name(e), e));
}

std::string device_string(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  if (clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  if (clGetDeviceInfo(d, what, n, s.data(), nullptr) != CL_SUCCESS) return "";
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string platform_string(cl_platform_id p, cl_platform_info what) {
  size_t n = 0;
  if (clGetPlatformInfo(p, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  if (clGetPlatformInfo(p, what, n, s.data(), nullptr) != CL_SUCCESS) return "";
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}

template <typename T>
T device_value(cl_device_id d, cl_device_info what, T fallback) {
  T v{};
  return clGetDeviceInfo(d, what, sizeof(T), &v, nullptr) == CL_SUCCESS ? v : fallback;
}

constexpr char kCacheMagic[] = "tensord-opencl-program-v1\n";  // the disk cache entries' format
std::atomic<int64_t> g_disk_hits{0};

// The folder of `tensord tune`'s files: TENSORD_TUNE_CACHE ("off": none), else
// $XDG_CACHE_HOME/tensord/tune or ~/.cache/tensord/tune.
std::filesystem::path tune_dir() { return codegen::cache_folder("TENSORD_TUNE_CACHE", "tune"); }

std::filesystem::path tune_path(const std::string& device_key) {
  const auto dir = tune_dir();
  if (dir.empty()) return {};
  return dir / fmt::format("{:016x}.txt", codegen::fnv1a(device_key.data(), device_key.size()));
}

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
cl_mem mem(const Arg& a) { return reinterpret_cast<cl_mem>(static_cast<uintptr_t>(a.handle)); }

// The device's kernel list, ahead of the shared entries, and its fused convolutions (defined
// with its kernels below).
std::vector<codegen::GpuKernelEntry> opencl_kernels(OpenClDevice* d);
std::vector<Region> conv_regions(OpenClDevice& device, const FusionGraph& g, std::vector<bool>& taken,
                                 std::vector<std::string>* notes);

class OpenClDevice final : public codegen::GpuDevice {
 public:
  OpenClDevice(std::shared_ptr<Platform> platform, cl_device_id id, int index, cl_command_queue q)
      : GpuDevice(&g_sources), platform_(std::move(platform)), id_(id), queue_(q),
        kernels_(this, opencl_kernels(this)),
        regions_(this, [this](const FusionGraph& g, std::vector<bool>* taken, std::vector<std::string>* notes) {
          return conv_regions(*this, g, *taken, notes);
        }) {
    info_.name = "opencl:" + std::to_string(index);
    info_.kind = "opencl";
    info_.index = index;
    info_.vendor = device_string(id, CL_DEVICE_VENDOR);
    info_.model = device_string(id, CL_DEVICE_NAME);
    info_.memory_bytes = static_cast<int64_t>(device_value<cl_ulong>(id, CL_DEVICE_GLOBAL_MEM_SIZE, 0));
    info_.backend = "opencl";
    info_.driver_version = device_string(id, CL_DRIVER_VERSION);
    info_.compute_units = static_cast<int>(device_value<cl_uint>(id, CL_DEVICE_MAX_COMPUTE_UNITS, 0));
    info_.fp16 = device_string(id, CL_DEVICE_EXTENSIONS).find("cl_khr_fp16") != std::string::npos;
    info_.backend_version = fmt::format("tensord {} ({}, {}, driver {}, generated kernels)", kVersion,
                                        platform_->name, device_string(id, CL_DEVICE_VERSION),
                                        info_.driver_version);
    max_alloc_ = device_value<cl_ulong>(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, 0);
    fp64_ = device_string(id, CL_DEVICE_EXTENSIONS).find("cl_khr_fp64") != std::string::npos;
    max_work_group_ = device_value<size_t>(id, CL_DEVICE_MAX_WORK_GROUP_SIZE, 1);
#ifdef TENSORD_HAVE_CLBLAST
    if (blas_) info_.backend_version.insert(info_.backend_version.size() - 1, ", CLBlast");
#endif
    load_tuning();
    // TENSORD_OPENCL_LOCAL: the generated kernels' work-group size (overrides the tuning file).
    if (const char* l = std::getenv("TENSORD_OPENCL_LOCAL"); l && *l)
      tuned_local_ = std::clamp<size_t>(static_cast<size_t>(std::atoll(l)), 1, max_work_group_);
    if (const char* t = std::getenv("TENSORD_OPENCL_CONV_TILE"); t && *t)
      conv_tile_ = std::clamp<int64_t>(std::atoll(t), 0, 16);
    if (!blas_ && conv_tile_ == 0) conv_tile_ = 8;
  }

  // "platform|device|driver": what a tuning file and a cached program are keyed by.
  std::string device_key() const { return platform_->name + "|" + info_.model + "|" + info_.driver_version; }

  // Reads this device's tuning file (tensord tune), if any: the generated kernels' work-group
  // size and CLBlast kernel parameters. A file of another device or driver, or a line that
  // does not parse or apply, is ignored (the defaults stay).
  void load_tuning() {
    const auto file = tune_path(device_key());
    if (file.empty()) return;
    std::ifstream f(file);
    if (!f) return;
    std::string line;
    bool mine = false;
    std::vector<std::string> applied;
    while (std::getline(f, line)) {
      std::istringstream ls(line);
      std::string word;
      if (!(ls >> word) || word[0] == '#') continue;
      if (word == "device") {
        std::string rest;
        std::getline(ls, rest);
        mine = rest.size() > 1 && rest.substr(1) == device_key();
      } else if (!mine) {
        return;  // the first line names the device
      } else if (word == "local_size") {
        size_t v = 0;
        if (ls >> v && v >= 1 && v <= max_work_group_) {
          tuned_local_ = v;
          applied.push_back(fmt::format("work groups of {}", v));
        }
      } else if (word == "conv_gemm") {
        int64_t t = -1;
        if (ls >> t && t >= 0 && t <= 16) {
          conv_tile_ = t;
          applied.push_back(t ? fmt::format("convolutions by generated GEMM tiles of {}", t)
                              : std::string("convolutions by CLBlast"));
        }
      } else if (word == "clblast") {
        std::string kernel, kv;
        ls >> kernel;
        std::unordered_map<std::string, size_t> params;
        while (ls >> kv) {
          const size_t eq = kv.find('=');
          if (eq == std::string::npos || eq == 0) break;
          char* end = nullptr;
          const unsigned long long v = std::strtoull(kv.c_str() + eq + 1, &end, 10);
          if (!end || *end) break;
          params[kv.substr(0, eq)] = static_cast<size_t>(v);
        }
#ifdef TENSORD_HAVE_CLBLAST
        if (blas_ && !params.empty() &&
            clblast::OverrideParameters(id_, kernel, clblast::Precision::kSingle, params) ==
                clblast::StatusCode::kSuccess)
          applied.push_back("CLBlast " + kernel);
#endif
      }
    }
    if (!applied.empty())
      info_.backend_version.insert(info_.backend_version.size() - 1,
                                   fmt::format(", tuned: {}", fmt::join(applied, ", ")));
  }
  ~OpenClDevice() override {
    if (queue_) {
      clFinish(queue_);
      clReleaseCommandQueue(queue_);
    }
    release_programs();  // before platform_ (the context) goes
  }

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
  Result<void*> allocate(size_t bytes) override {
    if (max_alloc_ && bytes > max_alloc_)
      return errors::ResourceExhausted("{}: {} bytes exceed the device's largest allocation ({})",
                                       info_.name, bytes, max_alloc_);
    cl_int e = CL_SUCCESS;
    cl_mem m = clCreateBuffer(context(), CL_MEM_READ_WRITE, std::max<size_t>(bytes, 1), nullptr, &e);
    if (e != CL_SUCCESS || !m)
      return cl_status(e, info_.name, fmt::format("allocating {} bytes", bytes));
    g_buffers_created++;
    return static_cast<void*>(m);
  }
  void free(void* ptr, size_t bytes) override {
    (void)bytes;
    if (ptr) clReleaseMemObject(static_cast<cl_mem>(ptr));  // deferred past pending commands
  }
  Status write(const Buffer& dst, size_t offset, const void* src, size_t bytes) override {
    if (offset > dst.size || bytes > dst.size - offset)
      return errors::OutOfRange("{}: write past the end of a buffer", info_.name);
    if (!bytes) return OkStatus();
    cl_int e = clEnqueueWriteBuffer(queue_, static_cast<cl_mem>(dst.ptr), CL_TRUE,
                                    dst.offset + offset, bytes, src, 0, nullptr, nullptr);
    return e == CL_SUCCESS ? OkStatus() : cl_status(e, info_.name, "writing to the device");
  }
  Status read(const Buffer& src, size_t offset, void* dst, size_t bytes) override {
    if (offset > src.size || bytes > src.size - offset)
      return errors::OutOfRange("{}: read past the end of a buffer", info_.name);
    if (!bytes) return OkStatus();
    cl_int e = clEnqueueReadBuffer(queue_, static_cast<cl_mem>(src.ptr), CL_TRUE,
                                   src.offset + offset, bytes, dst, 0, nullptr, nullptr);
    return e == CL_SUCCESS ? OkStatus() : cl_status(e, info_.name, "reading from the device");
  }
  const KernelTable& kernels() const override { return kernels_; }
  RegionCompiler* region_compiler() override { return &regions_; }

  // Devices of one platform share a context: a direct copy. The source's queue is drained
  // first (its producer may still run) and the copy finishes before returning (the source
  // may be freed and reused right after).
  bool copy_from(const Buffer& dst, const Buffer& src) override {
    auto* other = dynamic_cast<OpenClDevice*>(src.device);
    if (!other || other->context() != context() || dst.size < src.size) return false;
    if (!src.size) return true;
    if (other != this && finish_queue(other->queue_) != CL_SUCCESS) return false;
    cl_int e = clEnqueueCopyBuffer(queue_, static_cast<cl_mem>(src.ptr), static_cast<cl_mem>(dst.ptr),
                                   src.offset, dst.offset, src.size, 0, nullptr, nullptr);
    if (e != CL_SUCCESS) return false;
    return finish_queue(queue_) == CL_SUCCESS;
  }

  // Enqueues `p` over n work items with these buffer arguments (inputs then outputs).
  Status launch(codegen::GpuProgram& gp, const std::vector<Arg>& args, int64_t n) override {
    if (n <= 0) return OkStatus();
    auto& p = static_cast<Program&>(gp);
    std::lock_guard<std::mutex> lock(p.mu);
    cl_uint k = 0;
    for (const Arg& a : args) {
      const cl_mem m = mem(a);
      const cl_ulong offset = a.offset;
      cl_int e = clSetKernelArg(p.kernel, k++, sizeof(cl_mem), &m);
      if (e == CL_SUCCESS) e = clSetKernelArg(p.kernel, k++, sizeof(cl_ulong), &offset);
      if (e != CL_SUCCESS) return cl_status(e, info_.name, "setting kernel arguments");
    }
    const size_t local = p.local_size;
    const size_t global = (static_cast<size_t>(n) + local - 1) / local * local;
    cl_int e = clEnqueueNDRangeKernel(queue_, p.kernel, 1, nullptr, &global, &local, 0, nullptr, nullptr);
    if (e != CL_SUCCESS) return cl_status(e, info_.name, "launching a generated kernel");
    g_kernels_launched++;
    if (sync_) {
      e = finish_queue(queue_);
      if (e != CL_SUCCESS) return cl_status(e, info_.name, "running a generated kernel");
    }
    return OkStatus();
  }


 protected:
  // The program for `source`: from the disk cache (a binary for this device, driver and
  // source) or built from source (and stored there).
  Result<std::shared_ptr<codegen::GpuProgram>> build(const std::string& source,
                                                     const std::string& kernel_name) override {
    auto p = std::make_shared<Program>();
    cl_int e = CL_SUCCESS;
    const codegen::ProgramDiskCache cache(kCacheMagic, device_key(), source, "clbin");
    if (const std::string bin = cache.load(); !bin.empty()) {
      const auto* data = reinterpret_cast<const unsigned char*>(bin.data());
      const size_t size = bin.size();
      cl_int status = CL_SUCCESS;
      cl_program prog = clCreateProgramWithBinary(context(), 1, &id_, &size, &data, &status, &e);
      if (e == CL_SUCCESS && status == CL_SUCCESS && clBuildProgram(prog, 1, &id_, "", nullptr, nullptr) == CL_SUCCESS) {
        p->program = prog;
        g_disk_hits++;
      } else if (prog) {
        clReleaseProgram(prog);  // stale or corrupt: rebuilt from source below
      }
    }
    if (!p->program) {
      const char* text = source.c_str();
      const size_t length = source.size();
      p->program = clCreateProgramWithSource(context(), 1, &text, &length, &e);
      if (e != CL_SUCCESS) return cl_status(e, info_.name, "creating a program");
      e = clBuildProgram(p->program, 1, &id_, "", nullptr, nullptr);
      if (e != CL_SUCCESS) {
        std::string log;
        size_t n = 0;
        clGetProgramBuildInfo(p->program, id_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
        log.resize(n);
        if (n) clGetProgramBuildInfo(p->program, id_, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
        if (log.size() > 2000) log.resize(2000);
        return errors::Internal("{}: a generated kernel did not compile ({}): {}\n--- source ---\n{}",
                                info_.name, cl_error_name(e), log, source);
      }
      g_programs_built++;
      size_t size = 0;
      if (!cache.file().empty() &&
          clGetProgramInfo(p->program, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, nullptr) == CL_SUCCESS &&
          size > 0) {
        std::string bin(size, '\0');
        auto* ptr = reinterpret_cast<unsigned char*>(bin.data());
        if (clGetProgramInfo(p->program, CL_PROGRAM_BINARIES, sizeof(ptr), &ptr, nullptr) == CL_SUCCESS)
          cache.store(bin);
      }
    }
    p->kernel = clCreateKernel(p->program, kernel_name.c_str(), &e);
    if (e != CL_SUCCESS) return cl_status(e, info_.name, "creating kernel " + kernel_name);
    // Work-group size from the device's and the kernel's limits (a multiple of the preferred
    // multiple where that fits), at most 256.
    size_t kernel_max = max_work_group_;
    clGetKernelWorkGroupInfo(p->kernel, id_, CL_KERNEL_WORK_GROUP_SIZE, sizeof(kernel_max), &kernel_max, nullptr);
    size_t multiple = 1;
    clGetKernelWorkGroupInfo(p->kernel, id_, CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE, sizeof(multiple),
                             &multiple, nullptr);
    size_t local = std::min<size_t>({tuned_local_ ? tuned_local_ : 256, kernel_max, max_work_group_});
    if (multiple > 1 && local >= multiple) local = local / multiple * multiple;
    p->local_size = std::max<size_t>(local, 1);
    return std::shared_ptr<codegen::GpuProgram>(std::move(p));
  }

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

// ---- MatMul, Gemm and Conv through CLBlast ----

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
Result<size_t> float_offset(const Arg& a) {
  if (a.offset % sizeof(float) != 0)
    return errors::Unimplemented("a float32 tensor at byte offset {} (not a multiple of 4)", a.offset);
  return static_cast<size_t>(a.offset / sizeof(float));
}

std::atomic<int64_t> g_blas_calls{0};

Status run_gemm(OpenClDevice& d, const GemmCall& g) {
#ifdef TENSORD_HAVE_CLBLAST
  using clblast::Layout;
  using clblast::Transpose;
  cl_command_queue q = d.queue();
  const Transpose ta = g.ta ? Transpose::kYes : Transpose::kNo;
  const Transpose tb = g.tb ? Transpose::kYes : Transpose::kNo;
  clblast::StatusCode st;
  const size_t count = g.a_off.size();
  if (count == 1) {
    st = clblast::Gemm<float>(Layout::kRowMajor, ta, tb, g.m, g.n, g.k, g.alpha, g.a, g.a_off[0], g.lda, g.b,
                              g.b_off[0], g.ldb, g.beta, g.c, g.c_off[0], g.ldc, &q, nullptr);
  } else {
    std::vector<float> alphas(count, g.alpha), betas(count, g.beta);
    st = clblast::GemmBatched<float>(Layout::kRowMajor, ta, tb, g.m, g.n, g.k, alphas.data(), g.a, g.a_off.data(),
                                     g.lda, g.b, g.b_off.data(), g.ldb, betas.data(), g.c, g.c_off.data(), g.ldc,
                                     count, &q, nullptr);
  }
  if (st != clblast::StatusCode::kSuccess)
    return errors::Internal("{}: CLBlast SGEMM {}x{}x{} (batch {}) failed with status {}", d.info().name, g.m,
                            g.n, g.k, count, static_cast<int>(st));
  g_blas_calls++;
  return OkStatus();
#else
  (void)g;
  return errors::Unimplemented("{}: built without CLBlast", d.info().name);
#endif
}

// MatMul, Gemm and Conv: CLBlast's SGEMM (im2col for Conv, a 1x1 convolution needs none),
// falling back to the generated template kernel for what it does not cover (depthwise and
// 3-D convolutions, empty tensors, other dtypes) or when CLBlast fails on the device (said
// once on stderr).
class BlasKernel final : public Kernel {
 public:
  BlasKernel(OpenClDevice* d, const Node& node)
      : device_(d), node_(node), fallback_(codegen::make_template_kernel(d, node)) {}
  std::string name() const override {
    return node_.op == "Conv" && device_->conv_tile() > 0 ? "im2col+generated gemm" : "clblast";
  }
  std::vector<int> host_inputs() const override { return fallback_->host_inputs(); }
  Status run(KernelCall& call) override {
    if (!broken_) {
      Status s = run_blas(call);
      if (s.ok()) return device_->finish_if_sync();
      if (s.code() != StatusCode::kUnimplemented) {
        broken_ = true;
        std::cerr << "tensord: " << s.message() << "; " << node_.label() << " uses the generated kernel\n";
      }
    }
    return fallback_->run(call);
  }

 private:
  Status run_blas(KernelCall& call) {
    if (call.inputs.size() < 2 || !call.inputs[0].defined() || !call.inputs[1].defined() ||
        call.output_types.empty())
      return errors::Unimplemented("inputs");
    for (size_t i = 0; i < call.inputs.size() && i < 3; ++i)
      if (call.inputs[i].defined() && call.inputs[i].dtype != DType::kFloat32)
        return errors::Unimplemented("float32 only");
    const TensorType& out = call.output_types[0];
    if (!shape_is_static(out.shape) || shape_numel(out.shape) == 0) return errors::Unimplemented("empty");
    if (node_.op == "MatMul") return matmul(call);
    if (node_.op == "Gemm") return gemm(call);
    return conv(call);
  }

  Result<std::shared_ptr<Buffer>> output(KernelCall& call, const Shape& shape) {
    TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(DType::kFloat32, shape));
    return call.allocator->allocate(static_cast<size_t>(bytes));
  }

  Status matmul(KernelCall& call) {
    Shape a = call.inputs[0].shape, b = call.inputs[1].shape;
    if (a.empty() || b.empty()) return errors::Unimplemented("scalar");
    if (a.size() == 1) a.insert(a.begin(), 1);
    if (b.size() == 1) b.push_back(1);
    const int64_t M = a[a.size() - 2], K = a.back(), N = b.back();
    if (b[b.size() - 2] != K || K == 0) return errors::Unimplemented("shapes");
    const Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
    const size_t rank = std::max(ab.size(), bb.size());
    Shape batch(rank, 1), pa(rank, 1), pb(rank, 1);
    for (size_t k = 0; k < rank; ++k) {
      pa[k] = k + ab.size() >= rank ? ab[k + ab.size() - rank] : 1;
      pb[k] = k + bb.size() >= rank ? bb[k + bb.size() - rank] : 1;
      if (pa[k] != pb[k] && pa[k] != 1 && pb[k] != 1) return errors::Unimplemented("broadcast");
      batch[k] = std::max(pa[k], pb[k]);
    }
    const int64_t count = shape_numel(batch);
    if (count * M * N != shape_numel(call.output_types[0].shape)) return errors::Unimplemented("output");
    TD_ASSIGN_OR_RETURN(Arg xa, device_->arg(*call.inputs[0].buffer));
    TD_ASSIGN_OR_RETURN(Arg xb, device_->arg(*call.inputs[1].buffer));
    TD_ASSIGN_OR_RETURN(size_t oa, float_offset(xa));
    TD_ASSIGN_OR_RETURN(size_t ob, float_offset(xb));
    TD_ASSIGN_OR_RETURN(auto buffer, output(call, call.output_types[0].shape));
    TD_ASSIGN_OR_RETURN(Arg xc, device_->arg(*buffer));
    TD_ASSIGN_OR_RETURN(size_t oc, float_offset(xc));
    GemmCall g;
    g.a = mem(xa), g.b = mem(xb), g.c = mem(xc);
    g.n = static_cast<size_t>(N), g.k = static_cast<size_t>(K);
    g.lda = static_cast<size_t>(K), g.ldb = g.ldc = static_cast<size_t>(N);
    if (shape_numel(pb) == 1) {  // B shared by every batch entry: one GEMM over the stacked rows of A
      g.m = static_cast<size_t>(count * M);
      g.a_off = {oa}, g.b_off = {ob}, g.c_off = {oc};
    } else {
      g.m = static_cast<size_t>(M);
      std::vector<int64_t> idx(rank, 0);
      for (int64_t t = 0; t < count; ++t) {
        int64_t ia = 0, ib = 0;
        for (size_t d = 0; d < rank; ++d) {
          ia = ia * pa[d] + (pa[d] == 1 ? 0 : idx[d]);
          ib = ib * pb[d] + (pb[d] == 1 ? 0 : idx[d]);
        }
        g.a_off.push_back(oa + static_cast<size_t>(ia * M * K));
        g.b_off.push_back(ob + static_cast<size_t>(ib * K * N));
        g.c_off.push_back(oc + static_cast<size_t>(t * M * N));
        for (size_t d = rank; d-- > 0;) {
          if (++idx[d] < batch[d]) break;
          idx[d] = 0;
        }
      }
    }
    TD_RETURN_IF_ERROR(run_gemm(*device_, g));
    call.outputs.assign(1, DeviceTensor{DType::kFloat32, call.output_types[0].shape, buffer});
    return OkStatus();
  }

  Status gemm(KernelCall& call) {
    NodeAttrs at(node_);
    TD_ASSIGN_OR_RETURN(int64_t ta, at.attr_int("transA", 0));
    TD_ASSIGN_OR_RETURN(int64_t tb, at.attr_int("transB", 0));
    TD_ASSIGN_OR_RETURN(float alpha, at.attr_float("alpha", 1.0f));
    TD_ASSIGN_OR_RETURN(float beta, at.attr_float("beta", 1.0f));
    const Shape& a = call.inputs[0].shape;
    const Shape& b = call.inputs[1].shape;
    if (a.size() != 2 || b.size() != 2) return errors::Unimplemented("rank");
    const int64_t M = ta ? a[1] : a[0], K = ta ? a[0] : a[1];
    const int64_t N = tb ? b[0] : b[1], K2 = tb ? b[1] : b[0];
    const Shape& o = call.output_types[0].shape;
    if (K != K2 || K == 0 || shape_numel(o) != M * N) return errors::Unimplemented("shapes");
    // A row or two (a classifier at batch 1): the generated kernel, one output per work item
    // (CLBlast's tiled GEMM wastes its tiles on one row: ~16 ms for 1 x 1280 x 1000 on PoCL).
    if (M <= 2) return errors::Unimplemented("a matrix-vector product: the generated kernel");
    const bool has_c = call.inputs.size() > 2 && call.inputs[2].defined() && beta != 0.0f;
    TD_ASSIGN_OR_RETURN(auto buffer, output(call, o));
    TD_ASSIGN_OR_RETURN(Arg xc, device_->arg(*buffer));
    if (has_c) {  // C broadcast into the output, then out = alpha A B + beta out
      const DeviceTensor& c = call.inputs[2];
      if (c.shape.size() > 2) return errors::Unimplemented("C rank");
      const std::string key = shape_to_string(c.shape) + shape_to_string(o);
      if (!fill_ || key != fill_key_) {
        TD_ASSIGN_OR_RETURN(auto k, codegen::lower_expand(c.shape, Shape{M, N}, DType::kFloat32));
        static const codegen::OpenClPrinter printer;
        TD_ASSIGN_OR_RETURN(std::string source, printer.print(k));
        TD_ASSIGN_OR_RETURN(fill_, device_->program(source, k.name));
        fill_key_ = key;
      }
      TD_ASSIGN_OR_RETURN(Arg xin, device_->arg(*c.buffer));
      TD_RETURN_IF_ERROR(device_->launch(*fill_, {xin, xc}, M * N));
    }
    TD_ASSIGN_OR_RETURN(Arg xa, device_->arg(*call.inputs[0].buffer));
    TD_ASSIGN_OR_RETURN(Arg xb, device_->arg(*call.inputs[1].buffer));
    GemmCall g;
    g.ta = ta != 0, g.tb = tb != 0;
    g.m = static_cast<size_t>(M), g.n = static_cast<size_t>(N), g.k = static_cast<size_t>(K);
    g.alpha = alpha, g.beta = has_c ? beta : 0.0f;
    g.a = mem(xa), g.b = mem(xb), g.c = mem(xc);
    g.lda = static_cast<size_t>(a[1]), g.ldb = static_cast<size_t>(b[1]), g.ldc = static_cast<size_t>(N);
    TD_ASSIGN_OR_RETURN(size_t oa, float_offset(xa));
    TD_ASSIGN_OR_RETURN(size_t ob, float_offset(xb));
    TD_ASSIGN_OR_RETURN(size_t oc, float_offset(xc));
    g.a_off = {oa}, g.b_off = {ob}, g.c_off = {oc};
    TD_RETURN_IF_ERROR(run_gemm(*device_, g));
    call.outputs.assign(1, DeviceTensor{DType::kFloat32, o, buffer});
    return OkStatus();
  }

  Status conv(KernelCall& call) {
    codegen::OpCall c;
    c.node = &node_;
    for (const auto& in : call.inputs) c.inputs.push_back(in.defined() ? in.type() : TensorType{});
    c.outputs = call.output_types;
    TD_ASSIGN_OR_RETURN(codegen::ConvGeometry geo, codegen::conv_geometry(c));
    const int64_t CG = geo.C / geo.G, Mg = geo.M / geo.G, KK = geo.KH * geo.KW, OHW = geo.OH * geo.OW;
    if (geo.G > 1 && CG == 1) return errors::Unimplemented("depthwise: the generated kernel");
    if (geo.N == 0 || geo.C == 0 || OHW == 0 || KK == 0) return errors::Unimplemented("empty");
    const Shape& o = call.output_types[0].shape;
    TD_ASSIGN_OR_RETURN(auto buffer, output(call, o));
    TD_ASSIGN_OR_RETURN(Arg xo, device_->arg(*buffer));
    TD_ASSIGN_OR_RETURN(Arg xx, device_->arg(*call.inputs[0].buffer));
    TD_ASSIGN_OR_RETURN(Arg xw, device_->arg(*call.inputs[1].buffer));
    TD_RETURN_IF_ERROR(float_offset(xx).status());
    TD_ASSIGN_OR_RETURN(size_t ow, float_offset(xw));
    TD_ASSIGN_OR_RETURN(size_t oo, float_offset(xo));
    const int64_t tile = device_->conv_tile();
    Arg xbias;
    if (geo.bias) {
      TD_ASSIGN_OR_RETURN(xbias, device_->arg(*call.inputs[2].buffer));
    }
    if (geo.bias && tile == 0) {  // the output starts as the bias; the GEMM adds to it (beta = 1)
      const int64_t total = geo.N * geo.M * OHW;
      if (!bias_ || bias_n_ != total || bias_inner_ != OHW) {
        TD_ASSIGN_OR_RETURN(bias_, device_->template_program(codegen::channel_fill_kernel(total, OHW, geo.M)));
        bias_n_ = total, bias_inner_ = OHW;
      }
      TD_RETURN_IF_ERROR(device_->launch(*bias_, {xbias, xo}, total));
    }
    // out[n0 .. n0 + part.N) = W * columns: the generated GEMM or CLBlast's.
    auto multiply = [&](const codegen::ConvGeometry& part, int64_t n0, Arg cols) -> Status {
      if (tile > 0) {
        const codegen::TemplateKernel k = codegen::conv_gemm_kernel(part, tile);
        TD_ASSIGN_OR_RETURN(auto prog, device_->template_program(k));
        Arg out = xo;
        out.offset += static_cast<cl_ulong>(n0 * geo.M * OHW * 4);
        std::vector<Arg> args = {cols, xw};
        if (geo.bias) args.push_back(xbias);
        args.push_back(out);
        return device_->launch(*prog, args, k.n);
      }
      TD_ASSIGN_OR_RETURN(size_t ocol, float_offset(cols));
      GemmCall g;
      g.m = static_cast<size_t>(Mg), g.n = static_cast<size_t>(OHW), g.k = static_cast<size_t>(CG * KK);
      g.beta = geo.bias ? 1.0f : 0.0f;
      g.a = mem(xw), g.b = mem(cols), g.c = mem(xo);
      g.lda = g.k, g.ldb = g.ldc = g.n;
      for (int64_t n = 0; n < part.N; ++n)
        for (int64_t gi = 0; gi < geo.G; ++gi) {
          g.a_off.push_back(ow + static_cast<size_t>(gi * Mg * CG * KK));
          g.b_off.push_back(ocol + static_cast<size_t>((n * geo.C + gi * CG) * KK * OHW));
          g.c_off.push_back(oo + static_cast<size_t>(((n0 + n) * geo.M + gi * Mg) * OHW));
        }
      return run_gemm(*device_, g);
    };
    if (geo.pointwise()) {  // the input is the column matrix
      TD_RETURN_IF_ERROR(multiply(geo, 0, xx));
    } else {
      // Images in chunks whose columns fit in 256 MiB.
      const int64_t per_image = geo.C * KK * OHW;
      const int64_t chunk = std::clamp<int64_t>((int64_t{256} << 20) / 4 / std::max<int64_t>(per_image, 1), 1, geo.N);
      for (int64_t n0 = 0; n0 < geo.N; n0 += chunk) {
        codegen::ConvGeometry part = geo;
        part.N = std::min(chunk, geo.N - n0);
        TD_ASSIGN_OR_RETURN(auto cols, output(call, Shape{part.N * per_image}));
        TD_ASSIGN_OR_RETURN(Arg xcol, device_->arg(*cols));
        const codegen::TemplateKernel k = codegen::im2col_kernel(part);
        TD_ASSIGN_OR_RETURN(auto prog, device_->template_program(k));
        Arg in = xx;
        in.offset += static_cast<cl_ulong>(n0 * geo.C * geo.H * geo.W * 4);
        TD_RETURN_IF_ERROR(device_->launch(*prog, {in, xcol}, k.n));
        TD_RETURN_IF_ERROR(multiply(part, n0, xcol));
      }
    }
    call.outputs.assign(1, DeviceTensor{DType::kFloat32, o, buffer});
    return OkStatus();
  }

  OpenClDevice* device_;
  Node node_;
  std::unique_ptr<Kernel> fallback_;
  bool broken_ = false;
  std::string fill_key_;
  std::shared_ptr<codegen::GpuProgram> fill_, bias_;
  int64_t bias_n_ = 0, bias_inner_ = 0;
};

// RNN, GRU and LSTM as a static loop (codegen/recurrent.h): CLBlast GEMMs and generated
// kernels enqueued on the device's in-order queue, no host round trip per step.
class RecurrentKernel final : public Kernel {
 public:
  RecurrentKernel(OpenClDevice* d, const Node& node) : device_(d), node_(node) {}
  std::string name() const override { return "clblast+generated loop"; }
  std::vector<int> host_inputs() const override {
    // sequence_lens, checked on the host (a bad length is an error naming it, as on cpu:0).
    return node_.inputs.size() > 4 && !node_.inputs[4].empty() ? std::vector<int>{4} : std::vector<int>{};
  }
  Status run(KernelCall& call) override {
    std::vector<TensorType> types;
    for (const auto& in : call.inputs) types.push_back(in.defined() ? in.type() : TensorType{});
    TD_ASSIGN_OR_RETURN(codegen::RecurrentPlan p, codegen::plan_recurrent(node_, types));
    if (p.lens) {
      if (call.host_values.size() <= 4 || call.host_values[4].empty())
        return errors::Internal("{}: no host copy of sequence_lens", node_.label());
      const std::vector<double> lens = call.host_values[4].to_double_vector();
      for (size_t i = 0; i < lens.size(); ++i)
        if (lens[i] < 0 || lens[i] > static_cast<double>(p.seq))
          return errors::InvalidArgument("{}: sequence_lens[{}] = {} is outside [0, {}] (seq_length)",
                                         node_.op, i, lens[i], p.seq);
    }
    const int64_t D = p.dirs, B = p.batch, H = p.hidden, S = p.seq, GH = p.gh(), I = p.input;
    // The per-step products: CLBlast's GEMM and a gate kernel, or at a batch of one or two on
    // a CPU device inside the step kernels (p.fused: a tiled GEMM spends its tiles on one row,
    // and each launch costs; measured on PoCL, see the README). TENSORD_OPENCL_RNN_GEMM=clblast
    // or =generated forces one.
    p.fused = device_->is_cpu() && B <= 2;
    if (const char* e = std::getenv("TENSORD_OPENCL_RNN_GEMM"); e && *e) p.fused = std::string(e) == "generated";
    auto scratch = [&](int64_t floats) -> Result<std::shared_ptr<Buffer>> {
      return call.allocator->allocate(static_cast<size_t>(floats) * 4);
    };
    auto arg_of = [&](const std::shared_ptr<Buffer>& b) { return device_->arg(*b); };
    auto input = [&](size_t i) { return device_->arg(*call.inputs[i].buffer); };
    auto launch = [&](const codegen::TemplateKernel& k, const std::vector<Arg>& args) -> Status {
      TD_ASSIGN_OR_RETURN(auto prog, device_->template_program(k));
      return device_->launch(*prog, args, k.n);
    };
    // Outputs (Y, Y_h, Y_c as the node asks) and scratch.
    call.outputs.assign(call.output_types.size(), DeviceTensor{});
    std::vector<Arg> outs(3);
    for (size_t o = 0; o < call.output_types.size() && o < 3; ++o) {
      const TensorType& t = call.output_types[o];
      if (!t.defined() || !(o == 0 ? p.y : o == 1 ? p.y_h : p.y_c)) continue;
      TD_ASSIGN_OR_RETURN(auto buf, scratch(shape_numel(t.shape)));
      TD_ASSIGN_OR_RETURN(outs[o], arg_of(buf));
      call.outputs[o] = DeviceTensor{DType::kFloat32, t.shape, buf};
    }
    const bool lstm = p.kind == codegen::RecurrentPlan::kLstm;
    const bool gru_reset = p.kind == codegen::RecurrentPlan::kGru && !p.linear_before_reset;
    TD_ASSIGN_OR_RETURN(auto xp_buf, scratch(D * S * B * GH));
    TD_ASSIGN_OR_RETURN(auto hr_buf, scratch(D * B * GH));
    TD_ASSIGN_OR_RETURN(auto h_buf, scratch(D * B * H));
    std::shared_ptr<Buffer> c_buf, rh_buf, h2_buf;  // h2: the other state buffer (fused)
    if (p.fused) {
      TD_ASSIGN_OR_RETURN(h2_buf, scratch(D * B * H));
    }
    if (lstm) {
      TD_ASSIGN_OR_RETURN(c_buf, scratch(D * B * H));
    }
    if (gru_reset) {
      TD_ASSIGN_OR_RETURN(rh_buf, scratch(D * B * H));
    }
    TD_ASSIGN_OR_RETURN(auto steps_buf, scratch(S));
    TD_ASSIGN_OR_RETURN(Arg xp, arg_of(xp_buf));
    TD_ASSIGN_OR_RETURN(Arg hr, arg_of(hr_buf));
    TD_ASSIGN_OR_RETURN(Arg h, arg_of(h_buf));
    TD_ASSIGN_OR_RETURN(Arg steps, arg_of(steps_buf));
    // Optional operands: an Arg where the plan has them (never passed otherwise).
    Arg c, rh, bias, peep, lens, h0, c0, h2;
    if (p.fused) {
      TD_ASSIGN_OR_RETURN(h2, arg_of(h2_buf));
    }
    auto maybe = [&](bool present, size_t i, Arg* out) -> Status {
      if (!present) return OkStatus();
      TD_ASSIGN_OR_RETURN(*out, input(i));
      return OkStatus();
    };
    TD_RETURN_IF_ERROR(maybe(p.bias, 3, &bias));
    TD_RETURN_IF_ERROR(maybe(p.lens, 4, &lens));
    TD_RETURN_IF_ERROR(maybe(p.initial_h, 5, &h0));
    TD_RETURN_IF_ERROR(maybe(p.initial_c, 6, &c0));
    TD_RETURN_IF_ERROR(maybe(p.peepholes, 7, &peep));
    if (lstm) {
      TD_ASSIGN_OR_RETURN(c, arg_of(c_buf));
    }
    if (gru_reset) {
      TD_ASSIGN_OR_RETURN(rh, arg_of(rh_buf));
    }
    TD_ASSIGN_OR_RETURN(Arg x, input(0));
    TD_ASSIGN_OR_RETURN(Arg w, input(1));
    TD_ASSIGN_OR_RETURN(Arg r, input(2));

    // The states (initial_h / initial_c or 0), Y_h / Y_c zeroed, Y zeroed when entries may
    // stop early, the step numbers.
    std::vector<Arg> init_args;
    if (p.initial_h) init_args.push_back(h0);
    if (p.initial_c) init_args.push_back(c0);
    init_args.push_back(h);
    if (lstm) init_args.push_back(c);
    if (p.y_h) init_args.push_back(outs[1]);
    if (p.y_c) init_args.push_back(outs[2]);
    TD_RETURN_IF_ERROR(launch(codegen::recurrent_init_kernel(p), init_args));
    if (p.y && p.lens) TD_RETURN_IF_ERROR(launch(codegen::zero_kernel(shape_numel(call.output_types[0].shape)), {outs[0]}));
    TD_RETURN_IF_ERROR(launch(codegen::iota_kernel(S), {steps}));

    TD_ASSIGN_OR_RETURN(size_t ox, float_offset(x));
    TD_ASSIGN_OR_RETURN(size_t ow, float_offset(w));
    TD_ASSIGN_OR_RETURN(size_t orr, float_offset(r));
    TD_ASSIGN_OR_RETURN(size_t oxp, float_offset(xp));
    TD_ASSIGN_OR_RETURN(size_t ohr, float_offset(hr));
    TD_ASSIGN_OR_RETURN(size_t oh, float_offset(h));
    // XP[d] = X W[d]^T over every time step at once.
    GemmCall in_proj;
    in_proj.tb = true;
    in_proj.m = static_cast<size_t>(S * B), in_proj.n = static_cast<size_t>(GH), in_proj.k = static_cast<size_t>(I);
    in_proj.a = mem(x), in_proj.b = mem(w), in_proj.c = mem(xp);
    in_proj.lda = in_proj.ldb = static_cast<size_t>(I), in_proj.ldc = static_cast<size_t>(GH);
    // HR[d] = H[d] R[d]^T, per step.
    GemmCall rec;
    rec.tb = true;
    rec.m = static_cast<size_t>(B), rec.n = static_cast<size_t>(GH), rec.k = static_cast<size_t>(H);
    rec.a = mem(h), rec.b = mem(r), rec.c = mem(hr);
    rec.lda = rec.ldb = static_cast<size_t>(H), rec.ldc = static_cast<size_t>(GH);
    // GRU, linear_before_reset = 0: HR[d][:, 2H:3H] = RH[d] Rh[d]^T.
    GemmCall reset = rec;
    reset.n = static_cast<size_t>(H);
    reset.a = mem(rh);
    for (int64_t d = 0; d < D; ++d) {
      const auto u = [](int64_t v) { return static_cast<size_t>(v); };
      in_proj.a_off.push_back(ox), in_proj.b_off.push_back(ow + u(d * GH * I));
      in_proj.c_off.push_back(oxp + u(d * S * B * GH));
      rec.a_off.push_back(oh + u(d * B * H)), rec.b_off.push_back(orr + u(d * GH * H));
      rec.c_off.push_back(ohr + u(d * B * GH));
      if (gru_reset) {
        TD_ASSIGN_OR_RETURN(size_t orh, float_offset(rh));
        reset.a_off.push_back(orh + u(d * B * H)), reset.b_off.push_back(orr + u(d * GH * H + 2 * H * H));
        reset.c_off.push_back(ohr + u(d * B * GH + 2 * H));
      }
    }
    TD_RETURN_IF_ERROR(run_gemm(*device_, in_proj));

    const codegen::TemplateKernel gate = codegen::recurrent_gate_kernel(p);
    TD_ASSIGN_OR_RETURN(auto gate_prog, device_->template_program(gate));
    std::shared_ptr<codegen::GpuProgram> reset_prog;
    codegen::TemplateKernel reset_k;
    if (gru_reset) {
      reset_k = codegen::recurrent_reset_kernel(p);
      TD_ASSIGN_OR_RETURN(reset_prog, device_->template_program(reset_k));
    }
    // Argument lists (codegen/recurrent.h); fused, slot 2 (and the gate kernel's output 0)
    // alternate between the two state buffers.
    std::vector<Arg> gate_args = {steps, xp, p.fused ? h : hr};
    if (p.fused) gate_args.push_back(r);
    if (p.fused && gru_reset) gate_args.push_back(rh);
    if (p.bias) gate_args.push_back(bias);
    if (p.peepholes) gate_args.push_back(peep);
    if (p.lens) gate_args.push_back(lens);
    const size_t gate_out = gate_args.size();
    gate_args.push_back(p.fused ? h2 : h);
    if (lstm) gate_args.push_back(c);
    for (int o = 0; o < 3; ++o)
      if (o == 0 ? p.y : o == 1 ? p.y_h : p.y_c) gate_args.push_back(outs[static_cast<size_t>(o)]);
    std::vector<Arg> reset_args = {steps, xp, p.fused ? h : hr, p.fused ? r : h};
    if (p.bias) reset_args.push_back(bias);
    if (p.lens) reset_args.push_back(lens);
    reset_args.push_back(rh);
    for (int64_t s = 0; s < S; ++s) {
      gate_args[0].offset = reset_args[0].offset = steps.offset + static_cast<cl_ulong>(s * 4);
      if (p.fused) {
        const Arg& prev = s % 2 == 0 ? h : h2;
        const Arg& next = s % 2 == 0 ? h2 : h;
        gate_args[2] = reset_args[2] = prev;
        gate_args[gate_out] = next;
      } else {
        TD_RETURN_IF_ERROR(run_gemm(*device_, rec));
      }
      if (gru_reset) {
        TD_RETURN_IF_ERROR(device_->launch(*reset_prog, reset_args, reset_k.n));
        if (!p.fused) TD_RETURN_IF_ERROR(run_gemm(*device_, reset));
      }
      TD_RETURN_IF_ERROR(device_->launch(*gate_prog, gate_args, gate.n));
    }
    return device_->finish_if_sync();
  }

 private:
  OpenClDevice* device_;
  Node node_;
};

// The OpenCL device's own kernels, ahead of the shared ones (codegen/gpu_kernels.h).
std::vector<codegen::GpuKernelEntry> opencl_kernels(OpenClDevice* d) {
  using Claim = std::optional<Status>;
  auto domain_ok = [](const Node& n) { return n.domain.empty() || n.domain == "ai.onnx"; };
  std::vector<codegen::GpuKernelEntry> list;
  // MatMul and Gemm (with CLBlast) and Conv but depthwise ones (one input channel per group:
  // the template's): CLBlast or the generated GEMM, the template where they do not apply.
  list.push_back({"clblast",
                  [d, domain_ok](const Node& node, const std::vector<TensorType>& inputs) -> Claim {
                    if (!domain_ok(node) || !((d->blas() && (node.op == "MatMul" || node.op == "Gemm")) ||
                                              node.op == "Conv"))
                      return std::nullopt;
                    if (node.op == "Conv" && inputs.size() > 1 && inputs[0].defined() && inputs[1].defined() &&
                        inputs[0].shape.size() > 1 && inputs[1].shape.size() > 1) {
                      auto g = NodeAttrs(node).attr_int("group", 1);
                      if (g.ok() && *g > 1 && inputs[1].shape[1] == 1) return std::nullopt;  // depthwise
                    }
                    for (const auto& t : inputs)
                      if (t.defined() && t.dtype == DType::kFloat64 && !d->no_fp64().empty())
                        return errors::Unimplemented("{}: {} {} ({})", node.op, d->name(), d->no_fp64(),
                                                     node.label());
                    return codegen::template_supported(node, inputs);
                  },
                  [d](const Node& node, const std::vector<TensorType>&) -> std::unique_ptr<Kernel> {
                    return std::make_unique<BlasKernel>(d, node);
                  }});
  list.push_back({"recurrent",
                  [d, domain_ok](const Node& node, const std::vector<TensorType>& inputs) -> Claim {
                    if (!domain_ok(node) || !(node.op == "RNN" || node.op == "GRU" || node.op == "LSTM"))
                      return std::nullopt;
                    if (!d->blas())
                      return errors::Unimplemented("{}: {} runs recurrent ops through CLBlast, which it lacks ({})",
                                                   node.op, d->name(), node.label());
                    return codegen::plan_recurrent(node, inputs).status();
                  },
                  [d](const Node& node, const std::vector<TensorType>&) -> std::unique_ptr<Kernel> {
                    return std::make_unique<RecurrentKernel>(d, node);
                  }});
  return list;
}

// ---- Conv (+ BatchNormalization) (+ Add) (+ activation) as one kernel ----


// A convolution with constant weights and what follows it: an inference BatchNormalization
// with constant parameters is folded into the weights and bias at compile time; a residual
// Add and an activation become the kernel's epilogue. 1x1 windows of stride 1 multiply the
// input directly (no im2col), depthwise convolutions have their own vectorised kernel, others
// run im2col + the vectorised GEMM (codegen::conv_gemm_vec_kernel).
class ConvRegion final : public RegionKernel {
 public:
  ConvRegion(OpenClDevice* d, codegen::ConvGeometry geo, bool depthwise, std::string summary)
      : device_(d), geo_(geo), depthwise_(depthwise), summary_(std::move(summary)), uploads_(d) {}
  Result<Arg> upload(const std::vector<float>& v) { return uploads_.upload(v.data(), v.size() * sizeof(float)); }
  Status prepare(const std::vector<float>& weights, const std::vector<float>& bias,
                 const codegen::ConvEpilogue& e, int64_t tile) {
    epilogue_ = e;
    TD_ASSIGN_OR_RETURN(weights_, upload(weights));
    if (e.bias) {
      TD_ASSIGN_OR_RETURN(bias_, upload(bias));
    }
    int64_t vec = 8;
    if (const char* v = std::getenv("TENSORD_OPENCL_CONV_VEC"); v && *v) vec = std::atoll(v);
    const codegen::TemplateKernel k =
        depthwise_ ? codegen::depthwise_vec_kernel(geo_, 8, e)
                   : codegen::conv_gemm_vec_kernel(geo_, tile, vec, e, rows_fastest());
    TD_ASSIGN_OR_RETURN(main_, device_->template_program(k));
    main_n_ = k.n;
    if (!depthwise_ && !geo_.pointwise()) {
      const codegen::TemplateKernel c = codegen::im2col_kernel(geo_);
      TD_ASSIGN_OR_RETURN(im2col_, device_->template_program(c));
      im2col_n_ = c.n;
      arena_ = geo_.N * geo_.C * geo_.KH * geo_.KW * geo_.OH * geo_.OW * 4;
    }
    return OkStatus();
  }
  Status run(const std::vector<DeviceTensor>& inputs, const std::vector<DeviceTensor>& outputs,
             Allocator& allocator) override {
    if (inputs.empty() || !inputs[0].buffer || outputs.empty() || !outputs[0].buffer ||
        (epilogue_.residual && (inputs.size() < 2 || !inputs[1].buffer)))
      return errors::Internal("{}: fused convolution input or output missing", device_->name());
    TD_ASSIGN_OR_RETURN(Arg x, device_->arg(*inputs[0].buffer));
    TD_ASSIGN_OR_RETURN(Arg out, device_->arg(*outputs[0].buffer));
    std::shared_ptr<Buffer> cols;
    if (im2col_) {
      TD_ASSIGN_OR_RETURN(cols, allocator.allocate(static_cast<size_t>(arena_)));
      TD_ASSIGN_OR_RETURN(Arg c, device_->arg(*cols));
      TD_RETURN_IF_ERROR(device_->launch(*im2col_, {x, c}, im2col_n_));
      x = c;
    }
    std::vector<Arg> args = {x, weights_};
    if (epilogue_.bias) args.push_back(bias_);
    if (epilogue_.residual) {
      TD_ASSIGN_OR_RETURN(Arg r, device_->arg(*inputs[1].buffer));
      args.push_back(r);
    }
    args.push_back(out);
    return device_->launch(*main_, args, main_n_);
  }
  int64_t arena_bytes() const override { return arena_; }
  int64_t weight_bytes() const override { return uploads_.bytes(); }
  std::string describe() const override { return summary_; }
  bool rows_fastest() const {
    if (const char* v = std::getenv("TENSORD_OPENCL_CONV_ROWS"); v && *v) return std::atoi(v) != 0;
    return device_->is_cpu();
  }

 private:
  OpenClDevice* device_;
  codegen::ConvGeometry geo_;
  bool depthwise_;
  std::string summary_;
  codegen::ConvEpilogue epilogue_;
  Arg weights_{}, bias_{};
  std::shared_ptr<codegen::GpuProgram> main_, im2col_;
  int64_t main_n_ = 0, im2col_n_ = 0, arena_ = 0;
  codegen::HeldBuffers uploads_;
};

// The float32 values of a constant (empty when it is not a float32 constant).
std::vector<float> constant_floats(const FusionGraph& g, const std::string& name) {
  const HostTensor* t = name.empty() ? nullptr : g.constant(name);
  if (!t || t->dtype() != DType::kFloat32) return {};
  return std::vector<float>(t->data<float>(), t->data<float>() + t->numel());
}

// Conv chains of `g` as regions (their members are marked in `taken`).
std::vector<Region> conv_regions(OpenClDevice& device, const FusionGraph& g, std::vector<bool>& taken,
                                 std::vector<std::string>* notes) {
  std::vector<Region> regions;
  if (std::getenv("TENSORD_OPENCL_NO_CONV_FUSION")) return regions;
  auto here = [&](size_t i) { return g.placed_here.empty() || g.placed_here[i]; };
  auto domain_ok = [](const Node& n) { return n.domain.empty() || n.domain == "ai.onnx"; };
  // The one node reading `value`, to follow single-consumer chains (none when it is a graph
  // output or read more than once, a read inside a subgraph included).
  auto sole_reader = [&](const std::string& value) -> std::optional<size_t> {
    const std::optional<size_t> j = g.sole_reader(value);
    if (!j || taken[*j] || !here(*j) || !domain_ok(*g.nodes[*j])) return std::nullopt;
    return j;
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& conv = *g.nodes[i];
    if (taken[i] || !here(i) || conv.op != "Conv" || !domain_ok(conv) || conv.outputs.size() != 1 ||
        conv.inputs.size() < 2 || conv.inputs[0].empty())
      continue;
    const TensorType* xt = g.type_of(conv.inputs[0]);
    const TensorType* ot = g.type_of(conv.outputs[0]);
    const HostTensor* w = g.constant(conv.inputs[1]);
    if (!xt || !ot || !w || xt->dtype != DType::kFloat32 || w->dtype() != DType::kFloat32 ||
        !shape_is_static(xt->shape) || !shape_is_static(ot->shape) || shape_numel(ot->shape) == 0 ||
        g.constant(conv.inputs[0]))
      continue;
    const bool has_bias = conv.inputs.size() > 2 && !conv.inputs[2].empty();
    if (has_bias && !g.constant(conv.inputs[2])) continue;
    codegen::OpCall call;
    call.node = &conv;
    call.inputs = {*xt, w->type()};
    if (has_bias) call.inputs.push_back(g.constant(conv.inputs[2])->type());
    call.outputs = {*ot};
    auto geo_or = codegen::conv_geometry(call);
    if (!geo_or.ok()) continue;
    codegen::ConvGeometry geo = *geo_or;
    if (geo.N == 0 || geo.C == 0 || geo.KW == 0) continue;
    const int64_t CG = geo.C / geo.G, Mg = geo.M / geo.G, KK = geo.KH * geo.KW;
    const bool depthwise = geo.G > 1 && CG == 1 && geo.M == geo.C;
    if (geo.G > 1 && CG == 1 && !depthwise) continue;  // a channel multiplier: the node's kernel
    std::vector<float> weights(w->data<float>(), w->data<float>() + w->numel());
    std::vector<float> bias(static_cast<size_t>(geo.M), 0.0f);
    if (has_bias) {
      bias = constant_floats(g, conv.inputs[2]);
      if (bias.size() != static_cast<size_t>(geo.M)) continue;
    }
    Region r;
    r.members = {i};
    r.inputs = {conv.inputs[0]};
    std::vector<std::string> ops = {"Conv"};
    std::string value = conv.outputs[0];
    codegen::ConvEpilogue e;
    e.bias = has_bias;
    // BatchNormalization (inference, constant parameters): folded.
    if (auto j = sole_reader(value); j && g.nodes[*j]->op == "BatchNormalization") {
      const Node& bn = *g.nodes[*j];
      NodeAttrs at(bn);
      auto eps = at.attr_float("epsilon", 1e-5f);
      auto training = at.attr_int("training_mode", 0);
      auto spatial = at.attr_int("spatial", 1);
      bool ok = bn.inputs.size() == 5 && bn.inputs[0] == value && eps.ok() && training.ok() && *training == 0 &&
                spatial.ok() && *spatial == 1 && !bn.outputs.empty();
      for (size_t o = 1; ok && o < bn.outputs.size(); ++o) ok = bn.outputs[o].empty();
      std::vector<float> sc, sh, mean, var;
      if (ok) {
        sc = constant_floats(g, bn.inputs[1]), sh = constant_floats(g, bn.inputs[2]);
        mean = constant_floats(g, bn.inputs[3]), var = constant_floats(g, bn.inputs[4]);
        const size_t M = static_cast<size_t>(geo.M);
        ok = sc.size() == M && sh.size() == M && mean.size() == M && var.size() == M;
      }
      if (ok) {
        const int64_t per = CG * KK;  // weights per output channel
        for (int64_t m = 0; m < geo.M; ++m) {
          const size_t k = static_cast<size_t>(m);
          const float a = sc[k] / std::sqrt(var[k] + *eps);
          for (int64_t q = 0; q < per; ++q) weights[static_cast<size_t>(m * per + q)] *= a;
          bias[k] = (bias[k] - mean[k]) * a + sh[k];
        }
        e.bias = true;
        r.members.push_back(*j);
        ops.push_back("BatchNormalization");
        value = bn.outputs[0];
      }
    }
    // A residual Add of a value of the output's shape.
    if (auto j = sole_reader(value); j && g.nodes[*j]->op == "Add" && g.nodes[*j]->inputs.size() == 2 &&
                                     g.nodes[*j]->outputs.size() == 1) {
      const Node& add = *g.nodes[*j];
      const std::string& other = add.inputs[0] == value ? add.inputs[1] : add.inputs[0];
      const TensorType* t = g.type_of(other);
      if (add.inputs[0] != add.inputs[1] && !other.empty() && t && t->dtype == DType::kFloat32 &&
          t->shape == ot->shape && !g.constant(other)) {
        e.residual = true;
        r.members.push_back(*j);
        r.inputs.push_back(other);
        ops.push_back("Add");
        value = add.outputs[0];
      }
    }
    // An activation.
    if (auto j = sole_reader(value); j && g.nodes[*j]->outputs.size() == 1) {
      const Node& act = *g.nodes[*j];
      NodeAttrs at(act);
      bool ok = !act.inputs.empty() && act.inputs[0] == value;
      if (ok && act.op == "Relu") {
        e.activation = "Relu";
      } else if (ok && act.op == "Clip") {
        float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
        if (at.has_attr("min") || at.has_attr("max")) {  // before opset 11
          auto a = at.attr_float("min", lo), b = at.attr_float("max", hi);
          ok = a.ok() && b.ok();
          if (ok) lo = *a, hi = *b;
        }
        for (size_t k = 1; ok && k < act.inputs.size() && k < 3; ++k) {
          if (act.inputs[k].empty()) continue;
          const std::vector<float> v = constant_floats(g, act.inputs[k]);
          ok = v.size() == 1;
          if (ok) (k == 1 ? lo : hi) = v[0];
        }
        if (ok) e.activation = "Clip", e.alpha = lo, e.beta = hi;
      } else if (ok && act.op == "LeakyRelu") {
        auto a = at.attr_float("alpha", 0.01f);
        if (a.ok()) e.activation = "LeakyRelu", e.alpha = *a;
      } else if (ok && act.op == "HardSigmoid") {
        auto a = at.attr_float("alpha", 0.2f), b = at.attr_float("beta", 0.5f);
        if (a.ok() && b.ok()) e.activation = "HardSigmoid", e.alpha = *a, e.beta = *b;
      } else if (ok && (act.op == "HardSwish" || act.op == "Sigmoid")) {
        e.activation = act.op;
      }
      if (!e.activation.empty()) {
        r.members.push_back(*j);
        ops.push_back(act.op);
        value = act.outputs[0];
      }
    }
    r.outputs = {value};
    const std::string summary =
        fmt::format("OpenClConv: {} as 1 {} kernel{} over {}", fmt::join(ops, "+"),
                    depthwise ? "depthwise" : geo.pointwise() ? "1x1 GEMM" : "im2col + GEMM",
                    depthwise || geo.pointwise() ? "" : "s", shape_to_string(ot->shape));
    auto kernel = std::make_unique<ConvRegion>(&device, geo, depthwise, summary);
    const int64_t tile = device.conv_tile() > 0 ? device.conv_tile() : 8;
    if (Status st = kernel->prepare(weights, bias, e, tile); !st.ok()) {
      if (notes) notes->push_back(fmt::format("{}: {} left unfused: {}", device.name(), conv.label(), st.message()));
      continue;
    }
    (void)Mg;
    r.kernel = std::move(kernel);
    for (size_t m : r.members) taken[m] = true;
    g_conv_regions++;
    regions.push_back(std::move(r));
  }
  return regions;
}

// ---- discovery ----

bool asked_for_opencl() {
  for (const char* var : {"TENSORD_DEVICES", "TENSORD_DEVICE"}) {
    const char* v = std::getenv(var);
    if (v && std::string(v).find("opencl") != std::string::npos) return true;
  }
  return false;
}

class OpenClBackend final : public Backend {
 public:
  std::string name() const override { return "opencl"; }
  std::string version() const override { return kVersion; }
  std::vector<std::unique_ptr<Device>> enumerate() override {
    std::vector<std::unique_ptr<Device>> devices;
    std::string why;
    if (const char* off = std::getenv("TENSORD_OPENCL"); off && std::string(off) == "0") {
      why = "TENSORD_OPENCL=0";
    } else {
      why = discover(&devices);
    }
    if (devices.empty() && asked_for_opencl())
      std::cerr << "tensord: no OpenCL devices: " << why << "\n";
    return devices;
  }

 private:
  static std::string discover(std::vector<std::unique_ptr<Device>>* devices) {
    cl_uint n = 0;
    cl_int e = clGetPlatformIDs(0, nullptr, &n);
    if (e != CL_SUCCESS || n == 0)
      return "the OpenCL ICD loader found no platform (install a driver, e.g. pocl-opencl-icd)";
    std::vector<cl_platform_id> ids(n);
    clGetPlatformIDs(n, ids.data(), nullptr);
    std::string problems;
    int index = 0;
    for (cl_platform_id pid : ids) {
      cl_uint nd = 0;
      if (clGetDeviceIDs(pid, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
      std::vector<cl_device_id> dids(nd);
      clGetDeviceIDs(pid, CL_DEVICE_TYPE_ALL, nd, dids.data(), nullptr);
      auto platform = std::make_shared<Platform>();
      platform->id = pid;
      platform->name = platform_string(pid, CL_PLATFORM_NAME);
      cl_context_properties props[] = {CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(pid), 0};
      platform->context = clCreateContext(props, nd, dids.data(), nullptr, nullptr, &e);
      if (e != CL_SUCCESS || !platform->context) {
        problems += fmt::format("{}platform '{}': clCreateContext failed ({})", problems.empty() ? "" : "; ",
                                platform->name, e);
        platform->context = nullptr;
        continue;
      }
      for (cl_device_id did : dids) {
        cl_command_queue q = clCreateCommandQueue(platform->context, did, 0, &e);
        if (e != CL_SUCCESS || !q) {
          problems += fmt::format("{}a device of '{}': no command queue ({})", problems.empty() ? "" : "; ",
                                  platform->name, e);
          continue;
        }
        devices->push_back(std::make_unique<OpenClDevice>(platform, did, index++, q));
      }
    }
    return problems.empty() ? std::string("the OpenCL platforms have no devices") : problems;
  }
};

}  // namespace

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// n x n x n SGEMM buffers filled with values in [-1, 1] (and their host copies, to check).
struct GemmBench {
  OpenClDevice* d = nullptr;
  size_t n = 0;
  std::vector<float> ha, hb;
  cl_mem a = nullptr, b = nullptr, c = nullptr;
  ~GemmBench() {
    for (cl_mem m : {a, b, c})
      if (m) clReleaseMemObject(m);
  }
  Status init(OpenClDevice* dev, size_t size) {
    d = dev, n = size;
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    ha.resize(n * n), hb.resize(n * n);
    for (auto& v : ha) v = u(rng);
    for (auto& v : hb) v = u(rng);
    cl_int e = CL_SUCCESS;
    const size_t bytes = n * n * sizeof(float);
    a = clCreateBuffer(d->context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, ha.data(), &e);
    if (e == CL_SUCCESS) b = clCreateBuffer(d->context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, hb.data(), &e);
    if (e == CL_SUCCESS) c = clCreateBuffer(d->context(), CL_MEM_READ_WRITE, bytes, nullptr, &e);
    return e == CL_SUCCESS ? OkStatus() : cl_status(e, d->info().name, "allocating SGEMM buffers");
  }
  Status run() {
    GemmCall g;
    g.m = g.n = g.k = g.lda = g.ldb = g.ldc = n;
    g.a = a, g.b = b, g.c = c;
    g.a_off = g.b_off = g.c_off = {0};
    TD_RETURN_IF_ERROR(run_gemm(*d, g));
    const cl_int e = clFinish(d->queue());
    return e == CL_SUCCESS ? OkStatus() : cl_status(e, d->info().name, "running SGEMM");
  }
  // GFLOP/s: the best of `repeats` timed runs after one untimed (compiling) run.
  Result<double> gflops(int repeats) {
    TD_RETURN_IF_ERROR(run());
    double best = 1e30;
    for (int r = 0; r < std::max(repeats, 1); ++r) {
      const auto t = std::chrono::steady_clock::now();
      TD_RETURN_IF_ERROR(run());
      best = std::min(best, seconds_since(t));
    }
    return 2.0 * static_cast<double>(n) * n * n / best / 1e9;
  }
  // 64 entries of C against double-precision dot products on the host.
  Status check() {
    std::vector<float> hc(n * n);
    cl_int e = clEnqueueReadBuffer(d->queue(), c, CL_TRUE, 0, hc.size() * sizeof(float), hc.data(), 0, nullptr, nullptr);
    if (e != CL_SUCCESS) return cl_status(e, d->info().name, "reading SGEMM's result");
    std::mt19937 rng(7);
    for (int s = 0; s < 64; ++s) {
      const size_t i = rng() % n, j = rng() % n;
      double ref = 0, mag = 0;
      for (size_t k = 0; k < n; ++k) {
        ref += static_cast<double>(ha[i * n + k]) * hb[k * n + j];
        mag += std::abs(static_cast<double>(ha[i * n + k]) * hb[k * n + j]);
      }
      if (!(std::abs(hc[i * n + j] - ref) <= 1e-4 * mag + 1e-5))
        return errors::Internal("C[{}][{}] = {} where the host computes {}", i, j, hc[i * n + j], ref);
    }
    return OkStatus();
  }
};

}  // namespace

std::string tune_file(const std::string& platform, const std::string& model, const std::string& driver) {
  return tune_path(platform + "|" + model + "|" + driver).string();
}

Status tune(const TuneOptions& o, std::ostream& out) {
  const auto start = std::chrono::steady_clock::now();
  OpenClBackend backend;
  auto devices = backend.enumerate();
  OpenClDevice* d = nullptr;
  std::vector<std::string> names;
  for (auto& dev : devices) {
    names.push_back(dev->info().name);
    if (dev->info().name == o.device) d = dynamic_cast<OpenClDevice*>(dev.get());
  }
  if (!d)
    return errors::NotFound("tune: no device '{}' (OpenCL devices here: {})", o.device,
                            names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", ")));
  const auto file = tune_path(d->device_key());
  out << fmt::format("Tuning {} ({}, driver {}); budget {:.0f} s\n", d->info().name, d->info().model,
                     d->info().driver_version, o.budget_seconds);
  std::vector<std::string> lines = {"device " + d->device_key()};
  auto over = [&] { return seconds_since(start) > o.budget_seconds; };

#ifdef TENSORD_HAVE_CLBLAST
  if (!d->blas()) return errors::FailedPrecondition("tune: TENSORD_OPENCL_BLAS=0 turns CLBlast off");
  if (o.sizes.empty()) return errors::InvalidArgument("tune: no SGEMM sizes");
  using Params = std::unordered_map<std::string, size_t>;
  Params defaults;
  // The database's choice (not an earlier tuning: it is the baseline).
  clblast::ClearCache();
  if (clblast::RetrieveParameters(d->id(), "Xgemm", clblast::Precision::kSingle, defaults) !=
      clblast::StatusCode::kSuccess)
    return errors::Internal("tune: CLBlast has no Xgemm parameters for {}", d->info().name);
  std::map<int64_t, double> before, after;
  for (int64_t n : o.sizes) {
    GemmBench b;
    TD_RETURN_IF_ERROR(b.init(d, static_cast<size_t>(n)));
    TD_ASSIGN_OR_RETURN(before[n], b.gflops(o.repeats));
    out << fmt::format("  SGEMM {}: {:.1f} GFLOP/s with CLBlast's database parameters\n", n, before[n]);
  }
  // Candidates: tile sizes (MWG x NWG per work group, KWG deep), work-group shape (MDIMC x
  // NDIMC), vector widths, local memory (SA/SB) — constraints as CLBlast's tuner states them.
  const std::vector<Params> candidates = {
      {{"MWG", 64}, {"NWG", 64}, {"KWG", 32}, {"MDIMC", 8}, {"NDIMC", 8}, {"MDIMA", 8}, {"NDIMB", 8}, {"KWI", 2}, {"VWM", 4}, {"VWN", 4}, {"SA", 0}, {"SB", 0}},
      {{"MWG", 64}, {"NWG", 64}, {"KWG", 32}, {"MDIMC", 8}, {"NDIMC", 8}, {"MDIMA", 8}, {"NDIMB", 8}, {"KWI", 2}, {"VWM", 8}, {"VWN", 8}, {"SA", 0}, {"SB", 0}},
      {{"MWG", 128}, {"NWG", 128}, {"KWG", 32}, {"MDIMC", 16}, {"NDIMC", 16}, {"MDIMA", 16}, {"NDIMB", 16}, {"KWI", 2}, {"VWM", 8}, {"VWN", 8}, {"SA", 0}, {"SB", 0}},
      {{"MWG", 32}, {"NWG", 32}, {"KWG", 32}, {"MDIMC", 8}, {"NDIMC", 8}, {"MDIMA", 8}, {"NDIMB", 8}, {"KWI", 2}, {"VWM", 4}, {"VWN", 4}, {"SA", 0}, {"SB", 0}},
      {{"MWG", 64}, {"NWG", 64}, {"KWG", 16}, {"MDIMC", 16}, {"NDIMC", 16}, {"MDIMA", 16}, {"NDIMB", 16}, {"KWI", 2}, {"VWM", 4}, {"VWN", 4}, {"SA", 1}, {"SB", 1}},
      {{"MWG", 32}, {"NWG", 64}, {"KWG", 32}, {"MDIMC", 4}, {"NDIMC", 8}, {"MDIMA", 4}, {"NDIMB", 8}, {"KWI", 1}, {"VWM", 8}, {"VWN", 8}, {"SA", 0}, {"SB", 0}},
      {{"MWG", 16}, {"NWG", 64}, {"KWG", 64}, {"MDIMC", 2}, {"NDIMC", 8}, {"MDIMA", 2}, {"NDIMB", 8}, {"KWI", 1}, {"VWM", 8}, {"VWN", 8}, {"SA", 0}, {"SB", 0}},
  };
  const int64_t n0 = o.sizes.front();
  GemmBench bench;
  TD_RETURN_IF_ERROR(bench.init(d, static_cast<size_t>(n0)));
  Params best = defaults;
  double best_gflops = before[n0];
  int tried = 0;
  for (const Params& change : candidates) {
    if (tried > 0 && over()) {
      out << "  (budget spent: the remaining candidates were not tried)\n";
      break;
    }
    Params p = defaults;
    for (const auto& [k, v] : change) p[k] = v;
    if (p.count("GEMMK")) p["GEMMK"] = 0;
    if (p.count("KREG")) p["KREG"] = 1;
    if (p.count("STRM")) p["STRM"] = 0;
    if (p.count("STRN")) p["STRN"] = 0;
    std::string desc;
    for (const char* k : {"MWG", "NWG", "KWG", "MDIMC", "NDIMC", "VWM", "VWN", "SA", "SB"})
      desc += fmt::format("{}={} ", k, p[k]);
    ++tried;
    if (clblast::OverrideParameters(d->id(), "Xgemm", clblast::Precision::kSingle, p) !=
        clblast::StatusCode::kSuccess) {
      out << "  candidate " << desc << ": not accepted by CLBlast\n";
      continue;
    }
    auto g = bench.gflops(1);
    Status ok = g.ok() ? bench.check() : g.status();
    if (!ok.ok()) {
      out << "  candidate " << desc << ": rejected (" << ok.message() << ")\n";
      continue;
    }
    out << fmt::format("  candidate {}: {:.1f} GFLOP/s\n", desc, *g);
    if (*g > best_gflops) best_gflops = *g, best = p;
  }
  clblast::OverrideParameters(d->id(), "Xgemm", clblast::Precision::kSingle, best);
  const bool changed = best != defaults;
  if (changed) {
    std::string kv;
    std::vector<std::string> keys;
    for (const auto& [k, v] : best) keys.push_back(k);
    std::sort(keys.begin(), keys.end());
    for (const auto& k : keys) kv += fmt::format(" {}={}", k, best[k]);
    lines.push_back("clblast Xgemm" + kv);
  }
  for (int64_t n : o.sizes) {
    GemmBench b;
    TD_RETURN_IF_ERROR(b.init(d, static_cast<size_t>(n)));
    TD_ASSIGN_OR_RETURN(after[n], b.gflops(o.repeats));
    TD_RETURN_IF_ERROR(b.check());
  }
  out << fmt::format("  Xgemm: {} of {} candidates tried; {}\n", tried, candidates.size(),
                     changed ? "a candidate beats CLBlast's database" : "CLBlast's database stays");
  for (int64_t n : o.sizes)
    out << fmt::format("  SGEMM {}: {:.1f} -> {:.1f} GFLOP/s\n", n, before[n], after[n]);
#endif

  // The convolutions' GEMM: the generated kernel with 4, 8 or 12 output channels per work
  // item, or CLBlast's SGEMM, timed on the GEMMs of a 3x3 (64 -> 64 channels) and a 1x1
  // (64 -> 256) convolution over 56 x 56 (ResNet-50's first stage).
  {
    std::vector<codegen::ConvGeometry> convs(2);
    for (auto& g : convs) g.N = 1, g.C = 64, g.H = g.W = g.OH = g.OW = 56, g.bias = false;
    convs[0].M = 64, convs[0].KH = convs[0].KW = 3;  // its columns: K = 576
    convs[1].M = 256, convs[1].KH = convs[1].KW = 1;
    std::vector<cl_mem> mems;
    auto buffer = [&](size_t floats) -> Result<cl_mem> {
      cl_int e = CL_SUCCESS;
      cl_mem m = clCreateBuffer(d->context(), CL_MEM_READ_WRITE, floats * 4, nullptr, &e);
      if (e != CL_SUCCESS) return cl_status(e, d->info().name, "allocating tuning buffers");
      const float zero = 0.5f;
      clEnqueueFillBuffer(d->queue(), m, &zero, sizeof(zero), 0, floats * 4, 0, nullptr, nullptr);
      mems.push_back(m);
      return m;
    };
    auto time_tile = [&](int64_t tile) -> Result<double> {
      double total = 0;
      for (const auto& g : convs) {
        const size_t K = static_cast<size_t>(g.C * g.KH * g.KW), N = static_cast<size_t>(g.OH * g.OW);
        TD_ASSIGN_OR_RETURN(cl_mem cols, buffer(K * N));
        TD_ASSIGN_OR_RETURN(cl_mem w, buffer(static_cast<size_t>(g.M) * K));
        TD_ASSIGN_OR_RETURN(cl_mem outm, buffer(static_cast<size_t>(g.M) * N));
        std::function<Status()> once;
        std::shared_ptr<codegen::GpuProgram> prog;
        codegen::TemplateKernel k;
        if (tile > 0) {
          // The fused convolutions' vectorised GEMM (what models run; ConvRegion).
          k = codegen::conv_gemm_vec_kernel(g, tile, 8, codegen::ConvEpilogue{}, d->is_cpu());
          TD_ASSIGN_OR_RETURN(prog, d->template_program(k));
          once = [&] {
            return d->launch(*prog, {codegen::allocation_arg(cols), codegen::allocation_arg(w),
                                     codegen::allocation_arg(outm)}, k.n);
          };
        } else {
          once = [&] {
            GemmCall c;
            c.m = static_cast<size_t>(g.M), c.n = N, c.k = K, c.lda = K, c.ldb = c.ldc = N;
            c.a = w, c.b = cols, c.c = outm, c.a_off = c.b_off = c.c_off = {0};
            return run_gemm(*d, c);
          };
        }
        TD_RETURN_IF_ERROR(once());  // compiles
        if (clFinish(d->queue()) != CL_SUCCESS) return errors::Internal("clFinish failed");
        double best = 1e30;
        for (int r = 0; r < std::max(o.repeats, 1); ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          TD_RETURN_IF_ERROR(once());
          if (clFinish(d->queue()) != CL_SUCCESS) return errors::Internal("clFinish failed");
          best = std::min(best, seconds_since(t0));
        }
        total += best;
      }
      return total;
    };
    std::vector<int64_t> tiles = {8, 4, 12};
    if (d->blas()) tiles.push_back(0);
    int64_t best_tile = -1;
    double best_t = 1e30;
    std::string report;
    for (int64_t tile : tiles) {
      if (best_tile >= 0 && over()) break;
      auto t = time_tile(tile);
      for (cl_mem m : mems) clReleaseMemObject(m);
      mems.clear();
      if (!t.ok()) {
        report += fmt::format(" {}: failed ({})", tile ? std::to_string(tile) : "CLBlast", t.status().message());
        continue;
      }
      report += fmt::format(" {}: {:.2f} ms", tile ? fmt::format("tiles of {}", tile) : "CLBlast", *t * 1e3);
      if (*t < best_t) best_t = *t, best_tile = tile;
    }
    out << "  convolution GEMMs (3x3 64->64 and 1x1 64->256 over 56x56):" << report << "\n";
    if (best_tile >= 0) {
      lines.push_back(fmt::format("conv_gemm {}", best_tile));
      out << "  convolutions: " << (best_tile ? fmt::format("generated GEMM, tiles of {}", best_tile) : "CLBlast")
          << "\n";
    }
  }

  // The generated kernels' work-group size: im2col of a 3x3 convolution over 64 x 56 x 56 and
  // the bias fill of its output, each timed over 5 launches per candidate size.
  {
    codegen::ConvGeometry geo;
    geo.N = 1, geo.C = 64, geo.H = geo.W = 56, geo.M = 64, geo.KH = geo.KW = 3, geo.PT = geo.PL = 1;
    geo.OH = geo.OW = 56;
    const auto k1 = codegen::im2col_kernel(geo);
    const auto k2 = codegen::channel_fill_kernel(64 * 56 * 56, 56 * 56, 64);
    TD_ASSIGN_OR_RETURN(auto p1, d->template_program(k1));
    TD_ASSIGN_OR_RETURN(auto p2, d->template_program(k2));
    const size_t col_bytes = static_cast<size_t>(geo.N * geo.C * geo.KH * geo.KW * geo.OH * geo.OW) * 4,
                 x_bytes = 64 * 56 * 56 * 4;
    cl_int e = CL_SUCCESS;
    cl_mem x = clCreateBuffer(d->context(), CL_MEM_READ_WRITE, x_bytes, nullptr, &e);
    cl_mem col = e == CL_SUCCESS ? clCreateBuffer(d->context(), CL_MEM_READ_WRITE, col_bytes, nullptr, &e) : nullptr;
    if (e != CL_SUCCESS) {
      if (x) clReleaseMemObject(x);
      return cl_status(e, d->info().name, "allocating tuning buffers");
    }
    const float zero = 0.0f;
    clEnqueueFillBuffer(d->queue(), x, &zero, sizeof(zero), 0, x_bytes, 0, nullptr, nullptr);
    const size_t max_wg = static_cast<size_t>(device_value<size_t>(d->id(), CL_DEVICE_MAX_WORK_GROUP_SIZE, 1));
    size_t best_local = 0;
    double best_time = 1e30;
    std::string report;
    Status failed;
    for (size_t local : {8, 16, 32, 64, 128, 256, 512}) {
      if (local > max_wg || (best_local && over())) break;
      static_cast<Program&>(*p1).local_size = static_cast<Program&>(*p2).local_size = local;
      double t = 1e30;
      for (int r = 0; r < 3 && failed.ok(); ++r) {  // best of 3 rounds of 5 launches each
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 5 && failed.ok(); ++i) {
          failed = d->launch(*p1, {codegen::allocation_arg(x), codegen::allocation_arg(col)}, k1.n);
          if (failed.ok()) failed = d->launch(*p2, {codegen::allocation_arg(x), codegen::allocation_arg(col)}, k2.n);
        }
        if (failed.ok() && clFinish(d->queue()) != CL_SUCCESS) failed = errors::Internal("clFinish failed");
        t = std::min(t, seconds_since(t0));
      }
      if (!failed.ok()) break;
      report += fmt::format(" {}: {:.2f} ms", local, t * 1e3 / 5);
      if (t < best_time * 0.97) best_time = t, best_local = local;  // ties go to the smaller
    }
    clReleaseMemObject(x);
    clReleaseMemObject(col);
    TD_RETURN_IF_ERROR(failed);
    out << "  generated kernels, work-group size:" << report << "\n";
    if (best_local) {
      lines.push_back(fmt::format("local_size {}", best_local));
      out << fmt::format("  generated kernels: work groups of {}\n", best_local);
    }
  }

  if (file.empty()) {
    out << "  TENSORD_TUNE_CACHE=off: nothing stored\n";
    return OkStatus();
  }
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  const auto tmp = std::filesystem::path(file.string() + ".tmp" + std::to_string(::getpid()));
  {
    std::ofstream f(tmp, std::ios::trunc);
    for (const auto& l : lines) f << l << "\n";
    if (!f) return errors::Internal("tune: cannot write {}", tmp.string());
  }
  std::filesystem::rename(tmp, file, ec);
  if (ec) return errors::Internal("tune: cannot write {}: {}", file.string(), ec.message());
  out << fmt::format("Stored in {} ({:.0f} s); later runs on {} read it\n", file.string(), seconds_since(start),
                     d->info().name);
  return OkStatus();
}

std::unique_ptr<Backend> create_opencl_backend() { return std::make_unique<OpenClBackend>(); }
int64_t programs_built() { return g_programs_built.load(); }
int64_t kernels_launched() { return g_kernels_launched.load(); }
int64_t disk_cache_hits() { return g_disk_hits.load(); }
int64_t blas_calls() { return g_blas_calls.load(); }
int64_t conv_regions_built() { return g_conv_regions.load(); }
int64_t buffers_created() { return g_buffers_created.load(); }
int64_t queue_finishes() { return g_finishes.load(); }
Status set_conv_gemm(Device& device, int64_t tile) {
  auto* d = dynamic_cast<OpenClDevice*>(&device);
  if (!d) return errors::InvalidArgument("set_conv_gemm: {} is not an OpenCL device", device.info().name);
  if (tile < 0 || tile > 16 || (tile == 0 && !d->blas()))
    return errors::InvalidArgument("set_conv_gemm: {} is not 0 (CLBlast{}) or 1..16", tile,
                                   d->blas() ? "" : ", not built or turned off");
  d->set_conv_tile(tile);
  return OkStatus();
}
std::string last_source() {
  return g_sources.last();
}

}  // namespace tensord::opencl
