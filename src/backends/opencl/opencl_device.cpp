// The OpenCL device: the runtime of the shared GPU layer (codegen/gpu_runtime.h: build a
// program through the disk cache, launch it), memory and copies, the tuning file, discovery.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <unordered_map>

#ifdef TENSORD_HAVE_CLBLAST
#include <clblast.h>
#endif

#include "backends/opencl/opencl_device.h"
#include "core/errors.h"
#include "tensord/version.h"

namespace tensord::opencl {
namespace {

std::atomic<int64_t> g_programs_built{0}, g_kernels_launched{0}, g_buffers_created{0}, g_finishes{0},
    g_disk_hits{0};
codegen::SourceLog g_sources;
constexpr char kCacheMagic[] = "tensord-opencl-program-v1\n";  // the disk cache entries' format

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

}  // namespace

cl_int finish_queue(cl_command_queue q) {
  g_finishes++;
  return clFinish(q);
}

// Test hooks (opencl_backend.h), each beside what it counts.
int64_t queue_finishes() { return g_finishes.load(); }

Status cl_status(cl_int e, const std::string& device, const std::string& what) {
  const StatusCode code = (e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_RESOURCES ||
                           e == CL_OUT_OF_HOST_MEMORY)
                              ? StatusCode::kResourceExhausted
                              : StatusCode::kInternal;
  return Status(code, fmt::format("{}: {} failed: {} ({})", device, what, cl_error_name(e), e));
}

// The folder of `tensord tune`'s files: TENSORD_TUNE_CACHE ("off": none), else
// $XDG_CACHE_HOME/tensord/tune or ~/.cache/tensord/tune.
std::filesystem::path tune_path(const std::string& device_key) {
  const auto dir = codegen::cache_folder("TENSORD_TUNE_CACHE", "tune");
  if (dir.empty()) return {};
  return dir / fmt::format("{:016x}.txt", codegen::fnv1a(device_key.data(), device_key.size()));
}

OpenClDevice::OpenClDevice(std::shared_ptr<Platform> platform, cl_device_id id, int index, cl_command_queue q)
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
void OpenClDevice::load_tuning() {
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
OpenClDevice::~OpenClDevice() {
  if (queue_) {
    clFinish(queue_);
    clReleaseCommandQueue(queue_);
  }
  release_programs();  // before platform_ (the context) goes
}
Result<void*> OpenClDevice::allocate(size_t bytes) {
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

int64_t buffers_created() { return g_buffers_created.load(); }
void OpenClDevice::free(void* ptr, size_t bytes) {
  (void)bytes;
  if (ptr) clReleaseMemObject(static_cast<cl_mem>(ptr));  // deferred past pending commands
}
Status OpenClDevice::write(const Buffer& dst, size_t offset, const void* src, size_t bytes) {
  if (offset > dst.size || bytes > dst.size - offset)
    return errors::OutOfRange("{}: write past the end of a buffer", info_.name);
  if (!bytes) return OkStatus();
  cl_int e = clEnqueueWriteBuffer(queue_, static_cast<cl_mem>(dst.ptr), CL_TRUE,
                                  dst.offset + offset, bytes, src, 0, nullptr, nullptr);
  return e == CL_SUCCESS ? OkStatus() : cl_status(e, info_.name, "writing to the device");
}
Status OpenClDevice::read(const Buffer& src, size_t offset, void* dst, size_t bytes) {
  if (offset > src.size || bytes > src.size - offset)
    return errors::OutOfRange("{}: read past the end of a buffer", info_.name);
  if (!bytes) return OkStatus();
  cl_int e = clEnqueueReadBuffer(queue_, static_cast<cl_mem>(src.ptr), CL_TRUE,
                                 src.offset + offset, bytes, dst, 0, nullptr, nullptr);
  return e == CL_SUCCESS ? OkStatus() : cl_status(e, info_.name, "reading from the device");
}
bool OpenClDevice::copy_from(const Buffer& dst, const Buffer& src) {
  auto* other = dynamic_cast<OpenClDevice*>(src.device);
  if (!other || other->context() != context() || dst.size < src.size) return false;
  if (!src.size) return true;
  if (other != this && finish_queue(other->queue_) != CL_SUCCESS) return false;
  cl_int e = clEnqueueCopyBuffer(queue_, static_cast<cl_mem>(src.ptr), static_cast<cl_mem>(dst.ptr),
                                 src.offset, dst.offset, src.size, 0, nullptr, nullptr);
  if (e != CL_SUCCESS) return false;
  return finish_queue(queue_) == CL_SUCCESS;
}
Status OpenClDevice::launch(codegen::GpuProgram& gp, const std::vector<Arg>& args, int64_t n) {
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

int64_t kernels_launched() { return g_kernels_launched.load(); }
Result<std::shared_ptr<codegen::GpuProgram>> OpenClDevice::build(const std::string& source,
                                                                const std::string& kernel_name) {
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

int64_t programs_built() { return g_programs_built.load(); }
int64_t disk_cache_hits() { return g_disk_hits.load(); }
std::string last_source() { return g_sources.last(); }

// ---- discovery ----

namespace {

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

std::unique_ptr<Backend> create_opencl_backend() { return std::make_unique<OpenClBackend>(); }

}  // namespace tensord::opencl
