#include "backends/opencl/opencl_backend.h"

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <unordered_map>

#include "backends/codegen/lower.h"
#include "backends/codegen/printer.h"
#include "backends/codegen/templates.h"
#include "core/errors.h"
#include "core/node_attrs.h"
#include "tensord/version.h"

namespace tensord::opencl {
namespace {

std::atomic<int64_t> g_programs_built{0};
std::atomic<int64_t> g_kernels_launched{0};
std::mutex g_last_mu;
std::string g_last_source;

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

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// The on-disk cache of compiled programs: TENSORD_KERNEL_CACHE (a folder; "off" disables),
// else $XDG_CACHE_HOME/tensord/kernels or ~/.cache/tensord/kernels. An entry is keyed by
// device, driver version and source; it holds the source's hash and the binary's size and hash,
// and anything that does not check out (or does not load) is rebuilt from source and rewritten.
std::filesystem::path cache_dir() {
  const char* env = std::getenv("TENSORD_KERNEL_CACHE");
  if (env && std::string(env) == "off") return {};
  if (env && *env) return env;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::filesystem::path(x) / "tensord" / "kernels";
  if (const char* h = std::getenv("HOME"); h && *h)
    return std::filesystem::path(h) / ".cache" / "tensord" / "kernels";
  return {};
}

constexpr char kCacheMagic[] = "tensord-opencl-program-v1\n";

std::vector<unsigned char> cache_load(const std::filesystem::path& file, uint64_t source_hash) {
  std::ifstream f(file, std::ios::binary);
  if (!f) return {};
  std::string magic(sizeof(kCacheMagic) - 1, '\0');
  uint64_t hdr[3] = {0, 0, 0};  // source hash, binary size, binary hash
  if (!f.read(magic.data(), static_cast<std::streamsize>(magic.size())) || magic != kCacheMagic ||
      !f.read(reinterpret_cast<char*>(hdr), sizeof(hdr)) || hdr[0] != source_hash ||
      hdr[1] == 0 || hdr[1] > (uint64_t{1} << 30))
    return {};
  std::vector<unsigned char> bin(hdr[1]);
  if (!f.read(reinterpret_cast<char*>(bin.data()), static_cast<std::streamsize>(bin.size())) ||
      fnv1a(bin.data(), bin.size()) != hdr[2])
    return {};
  return bin;
}

void cache_store(const std::filesystem::path& file, uint64_t source_hash,
                 const std::vector<unsigned char>& bin) {
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  if (ec) return;
  const std::filesystem::path tmp = file.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return;
    const uint64_t hdr[3] = {source_hash, bin.size(), fnv1a(bin.data(), bin.size())};
    f.write(kCacheMagic, sizeof(kCacheMagic) - 1);
    f.write(reinterpret_cast<const char*>(hdr), sizeof(hdr));
    f.write(reinterpret_cast<const char*>(bin.data()), static_cast<std::streamsize>(bin.size()));
    if (!f) {
      f.close();
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, file, ec);  // atomic: readers see the old entry or the new one
  if (ec) std::filesystem::remove(tmp, ec);
}

std::atomic<int64_t> g_disk_hits{0};

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
struct Program {
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
  size_t local_size = 1;
  std::mutex mu;  // clSetKernelArg + enqueue of one cl_kernel: one thread at a time
  ~Program() {
    if (kernel) clReleaseKernel(kernel);
    if (program) clReleaseProgram(program);
  }
};

// A device buffer argument: the allocation and the byte offset of the tensor in it.
struct Arg {
  cl_mem mem = nullptr;
  cl_ulong offset = 0;
};

class OpenClKernelTable final : public KernelTable {
 public:
  explicit OpenClKernelTable(OpenClDevice* d) : device_(d) {}
  Status supports(const Node& node, const std::vector<TensorType>& inputs,
                  const CompileOptions& options) const override;
  Result<std::unique_ptr<Kernel>> create(const Node& node, const std::vector<TensorType>& inputs,
                                         const std::vector<TensorType>& outputs,
                                         const CompileOptions& options) const override;

 private:
  OpenClDevice* device_;
};

class OpenClRegionCompiler final : public RegionCompiler {
 public:
  explicit OpenClRegionCompiler(OpenClDevice* d) : device_(d) {}
  std::vector<Region> compile(const FusionGraph& g, std::vector<std::string>* notes) override;

 private:
  OpenClDevice* device_;
};

class OpenClDevice final : public Device {
 public:
  OpenClDevice(std::shared_ptr<Platform> platform, cl_device_id id, int index, cl_command_queue q)
      : platform_(std::move(platform)), id_(id), queue_(q), kernels_(this), regions_(this) {
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
  }
  ~OpenClDevice() override {
    if (queue_) {
      clFinish(queue_);
      clReleaseCommandQueue(queue_);
    }
  }

  const DeviceInfo& info() const override { return info_; }
  const std::string& name() const { return info_.name; }
  bool fp64() const { return fp64_; }
  cl_context context() const { return platform_->context; }
  const Platform* platform() const { return platform_.get(); }

  Result<void*> allocate(size_t bytes) override {
    if (max_alloc_ && bytes > max_alloc_)
      return errors::ResourceExhausted("{}: {} bytes exceed the device's largest allocation ({})",
                                       info_.name, bytes, max_alloc_);
    cl_int e = CL_SUCCESS;
    cl_mem m = clCreateBuffer(context(), CL_MEM_READ_WRITE, std::max<size_t>(bytes, 1), nullptr, &e);
    if (e != CL_SUCCESS || !m)
      return cl_status(e, info_.name, fmt::format("allocating {} bytes", bytes));
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
    if (other != this && clFinish(other->queue_) != CL_SUCCESS) return false;
    cl_int e = clEnqueueCopyBuffer(queue_, static_cast<cl_mem>(src.ptr), static_cast<cl_mem>(dst.ptr),
                                   src.offset, dst.offset, src.size, 0, nullptr, nullptr);
    if (e != CL_SUCCESS) return false;
    return clFinish(queue_) == CL_SUCCESS;
  }

  // The program for `source`, built once per device (kept for the device's lifetime).
  Result<std::shared_ptr<Program>> program(const std::string& source, const std::string& kernel_name) {
    {
      std::lock_guard<std::mutex> lock(programs_mu_);
      if (auto it = programs_.find(source); it != programs_.end()) return it->second;
    }
    {
      std::lock_guard<std::mutex> lock(g_last_mu);
      g_last_source = source;
    }
    auto p = std::make_shared<Program>();
    cl_int e = CL_SUCCESS;
    // The disk cache first: a binary for this device, driver and source.
    const uint64_t source_hash = fnv1a(source.data(), source.size());
    std::filesystem::path file;
    if (const auto dir = cache_dir(); !dir.empty()) {
      const std::string device_key = platform_->name + "|" + info_.model + "|" + info_.driver_version;
      file = dir / fmt::format("{:016x}-{:016x}.clbin", fnv1a(device_key.data(), device_key.size()),
                               source_hash);
      const std::vector<unsigned char> bin = cache_load(file, source_hash);
      if (!bin.empty()) {
        const unsigned char* data = bin.data();
        const size_t size = bin.size();
        cl_int status = CL_SUCCESS;
        cl_program prog = clCreateProgramWithBinary(context(), 1, &id_, &size, &data, &status, &e);
        if (e == CL_SUCCESS && status == CL_SUCCESS &&
            clBuildProgram(prog, 1, &id_, "", nullptr, nullptr) == CL_SUCCESS) {
          p->program = prog;
          g_disk_hits++;
        } else if (prog) {
          clReleaseProgram(prog);  // stale or corrupt: rebuilt from source below
        }
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
      if (!file.empty()) {
        size_t size = 0;
        if (clGetProgramInfo(p->program, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, nullptr) ==
                CL_SUCCESS && size > 0) {
          std::vector<unsigned char> bin(size);
          unsigned char* ptr = bin.data();
          if (clGetProgramInfo(p->program, CL_PROGRAM_BINARIES, sizeof(ptr), &ptr, nullptr) == CL_SUCCESS)
            cache_store(file, source_hash, bin);
        }
      }
    }
    p->kernel = clCreateKernel(p->program, kernel_name.c_str(), &e);
    if (e != CL_SUCCESS) return cl_status(e, info_.name, "creating kernel " + kernel_name);
    // Work-group size from the device's and the kernel's limits (a multiple of the preferred
    // multiple where that fits), at most 256.
    size_t kernel_max = max_work_group_;
    clGetKernelWorkGroupInfo(p->kernel, id_, CL_KERNEL_WORK_GROUP_SIZE, sizeof(kernel_max), &kernel_max,
                             nullptr);
    size_t multiple = 1;
    clGetKernelWorkGroupInfo(p->kernel, id_, CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE,
                             sizeof(multiple), &multiple, nullptr);
    size_t local = std::min<size_t>({256, kernel_max, max_work_group_});
    if (multiple > 1 && local >= multiple) local = local / multiple * multiple;
    p->local_size = std::max<size_t>(local, 1);
    std::lock_guard<std::mutex> lock(programs_mu_);
    auto [it, inserted] = programs_.emplace(source, p);
    return it->second;
  }

  // Enqueues `p` over n work items with these buffer arguments (inputs then outputs).
  Status launch(Program& p, const std::vector<Arg>& args, int64_t n) {
    if (n <= 0) return OkStatus();
    std::lock_guard<std::mutex> lock(p.mu);
    cl_uint k = 0;
    for (const Arg& a : args) {
      cl_int e = clSetKernelArg(p.kernel, k++, sizeof(cl_mem), &a.mem);
      if (e == CL_SUCCESS) e = clSetKernelArg(p.kernel, k++, sizeof(cl_ulong), &a.offset);
      if (e != CL_SUCCESS) return cl_status(e, info_.name, "setting kernel arguments");
    }
    const size_t local = p.local_size;
    const size_t global = (static_cast<size_t>(n) + local - 1) / local * local;
    cl_int e = clEnqueueNDRangeKernel(queue_, p.kernel, 1, nullptr, &global, &local, 0, nullptr, nullptr);
    if (e != CL_SUCCESS) return cl_status(e, info_.name, "launching a generated kernel");
    g_kernels_launched++;
    if (sync_) {
      e = clFinish(queue_);
      if (e != CL_SUCCESS) return cl_status(e, info_.name, "running a generated kernel");
    }
    return OkStatus();
  }

  // The cl_mem argument of a buffer of this device (else an error naming it).
  Result<Arg> arg(const Buffer& b) const {
    if (b.device != this)
      return errors::Internal("{}: a kernel got a buffer of {}", info_.name,
                              b.device ? b.device->info().name : std::string("no device"));
    return Arg{static_cast<cl_mem>(b.ptr), static_cast<cl_ulong>(b.offset)};
  }

 private:
  std::shared_ptr<Platform> platform_;
  cl_device_id id_;
  cl_command_queue queue_;
  DeviceInfo info_;
  cl_ulong max_alloc_ = 0;
  size_t max_work_group_ = 1;
  bool fp64_ = false;
  bool sync_ = std::getenv("TENSORD_OPENCL_SYNC") != nullptr;  // finish after every kernel
  OpenClKernelTable kernels_;
  OpenClRegionCompiler regions_;
  std::mutex programs_mu_;
  std::unordered_map<std::string, std::shared_ptr<Program>> programs_;
};

// A lowered, compiled element-wise kernel and how its parameters bind.
struct Compiled {
  codegen::LoweredGroup lowered;
  std::shared_ptr<Program> program;
};

Result<Compiled> compile_group(OpenClDevice& device, const std::vector<const Node*>& nodes,
                               const std::vector<std::string>& outputs, const Shape& shape,
                               const std::function<const TensorType*(const std::string&)>& type_of,
                               const std::function<const HostTensor*(const std::string&)>& constant) {
  Compiled c;
  TD_ASSIGN_OR_RETURN(c.lowered, codegen::lower_elementwise(nodes, outputs, shape, type_of, constant));
  static const codegen::OpenClPrinter printer;
  TD_ASSIGN_OR_RETURN(std::string source, printer.print(c.lowered.kernel));
  TD_ASSIGN_OR_RETURN(c.program, device.program(source, c.lowered.kernel.name));
  return c;
}

// A single node as a generated kernel, specialised to the shapes of each call (the last
// shapes' kernel is kept; the device keeps every program it built).
class GeneratedKernel final : public Kernel {
 public:
  GeneratedKernel(OpenClDevice* d, const Node& node) : device_(d), node_(node) {}
  std::string name() const override { return "generated"; }
  Status run(KernelCall& call) override {
    std::vector<TensorType> types;
    std::string key;
    for (const auto& in : call.inputs) {
      types.push_back(in.defined() ? in.type() : TensorType{});
      key += shape_to_string(in.shape) + dtype_name(in.dtype) + ";";
    }
    if (call.output_types.empty()) return errors::Internal("{}: no output type", node_.label());
    TensorType out = call.output_types[0];
    if (!shape_is_static(out.shape))
      return errors::Internal("{}: the output shape is not known at run time", node_.label());
    if (!compiled_ || key != key_) {
      std::map<std::string, TensorType> t;
      for (size_t i = 0; i < node_.inputs.size() && i < types.size(); ++i)
        if (!node_.inputs[i].empty()) t[node_.inputs[i]] = types[i];
      t[node_.outputs[0]] = out;
      auto type_of = [&t](const std::string& n) -> const TensorType* {
        auto it = t.find(n);
        return it != t.end() ? &it->second : nullptr;
      };
      TD_ASSIGN_OR_RETURN(Compiled c, compile_group(*device_, {&node_}, {node_.outputs[0]}, out.shape,
                                                    type_of, nullptr));
      compiled_ = std::make_unique<Compiled>(std::move(c));
      key_ = key;
    }
    TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(out.dtype, out.shape));
    TD_ASSIGN_OR_RETURN(auto buffer, call.allocator->allocate(static_cast<size_t>(bytes)));
    std::vector<Arg> args;
    for (const auto& name : compiled_->lowered.params) {
      size_t i = 0;
      while (i < node_.inputs.size() && node_.inputs[i] != name) ++i;
      if (i >= call.inputs.size() || !call.inputs[i].defined())
        return errors::Internal("{}: no input '{}'", node_.label(), name);
      TD_ASSIGN_OR_RETURN(Arg a, device_->arg(*call.inputs[i].buffer));
      args.push_back(a);
    }
    TD_ASSIGN_OR_RETURN(Arg o, device_->arg(*buffer));
    args.push_back(o);
    TD_RETURN_IF_ERROR(device_->launch(*compiled_->program, args, shape_numel(out.shape)));
    call.outputs.assign(1, DeviceTensor{out.dtype, out.shape, buffer});
    return OkStatus();
  }

 private:
  OpenClDevice* device_;
  Node node_;
  std::string key_;
  std::unique_ptr<Compiled> compiled_;
};

// Reshape, Flatten, Squeeze, Unsqueeze, Identity: the output is the input's buffer under the
// inferred shape (values are immutable, so sharing is safe): no copy, no launch.
bool is_view_op(const std::string& op) {
  return op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze" ||
         op == "Identity";
}

class ViewKernel final : public Kernel {
 public:
  explicit ViewKernel(const Node& node) : node_(node) {}
  std::string name() const override { return "view"; }
  std::vector<int> host_inputs() const override {
    if (node_.op == "Reshape" || ((node_.op == "Squeeze" || node_.op == "Unsqueeze") &&
                                  node_.inputs.size() > 1 && !node_.inputs[1].empty()))
      return {1};
    return {};
  }
  Status run(KernelCall& call) override {
    if (call.inputs.empty() || !call.inputs[0].defined() || call.output_types.empty())
      return errors::Internal("{}: no input", node_.label());
    const DeviceTensor& x = call.inputs[0];
    const TensorType& out = call.output_types[0];
    if (!shape_is_static(out.shape) || shape_numel(out.shape) != shape_numel(x.shape) ||
        out.dtype != x.dtype)
      return errors::Internal("{}: output {} is not a view of input {}", node_.label(),
                              shape_to_string(out.shape), shape_to_string(x.shape));
    call.outputs.assign(1, DeviceTensor{x.dtype, out.shape, x.buffer});
    return OkStatus();
  }

 private:
  Node node_;
};

// Transpose and Expand: a strided load per element, generated (codegen::lower_transpose /
// lower_expand) per shape.
class MoveKernel final : public Kernel {
 public:
  MoveKernel(OpenClDevice* d, const Node& node) : device_(d), node_(node) {}
  std::string name() const override { return "generated"; }
  std::vector<int> host_inputs() const override {
    if (node_.op == "Expand") return {1};
    if (node_.op == "Slice") {
      std::vector<int> h;
      for (size_t i = 1; i < node_.inputs.size() && i <= 4; ++i)
        if (!node_.inputs[i].empty()) h.push_back(static_cast<int>(i));
      return h;
    }
    return {};
  }
  Status run(KernelCall& call) override {
    if (call.inputs.empty() || !call.inputs[0].defined() || call.output_types.empty())
      return errors::Internal("{}: no input", node_.label());
    const DeviceTensor& x = call.inputs[0];
    const TensorType& out = call.output_types[0];
    if (!shape_is_static(out.shape))
      return errors::Internal("{}: the output shape is not known at run time", node_.label());
    std::string key = shape_to_string(x.shape) + dtype_name(x.dtype) + shape_to_string(out.shape);
    std::vector<int64_t> starts(x.shape.size(), 0), steps(x.shape.size(), 1);
    if (node_.op == "Slice") {
      TD_RETURN_IF_ERROR(slice_params(call, x.shape, &starts, &steps));
      key += fmt::format("{}/{}", fmt::join(starts, ","), fmt::join(steps, ","));
    }
    if (!program_ || key != key_) {
      codegen::ElementwiseKernel k;
      if (node_.op == "Slice") {
        TD_ASSIGN_OR_RETURN(k, codegen::lower_slice(x.shape, out.shape, starts, steps, x.dtype));
      } else if (node_.op == "Transpose") {
        std::vector<int64_t> perm;
        if (auto it = node_.attrs.find("perm"); it != node_.attrs.end()) {
          NodeAttrs attrs(node_);
          TD_ASSIGN_OR_RETURN(perm, attrs.attr_ints("perm", {}));
        } else {
          for (size_t d = x.shape.size(); d-- > 0;) perm.push_back(static_cast<int64_t>(d));
        }
        TD_ASSIGN_OR_RETURN(k, codegen::lower_transpose(x.shape, perm, x.dtype));
      } else {
        TD_ASSIGN_OR_RETURN(k, codegen::lower_expand(x.shape, out.shape, x.dtype));
      }
      static const codegen::OpenClPrinter printer;
      TD_ASSIGN_OR_RETURN(std::string source, printer.print(k));
      TD_ASSIGN_OR_RETURN(program_, device_->program(source, k.name));
      key_ = key;
    }
    TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(out.dtype, out.shape));
    TD_ASSIGN_OR_RETURN(auto buffer, call.allocator->allocate(static_cast<size_t>(bytes)));
    TD_ASSIGN_OR_RETURN(Arg a, device_->arg(*x.buffer));
    TD_ASSIGN_OR_RETURN(Arg o, device_->arg(*buffer));
    TD_RETURN_IF_ERROR(device_->launch(*program_, {a, o}, shape_numel(out.shape)));
    call.outputs.assign(1, DeviceTensor{out.dtype, out.shape, buffer});
    return OkStatus();
  }

 private:
  static std::vector<int64_t> ints(const HostTensor& t) {
    std::vector<int64_t> v;
    for (double d : t.to_double_vector()) v.push_back(static_cast<int64_t>(d));
    return v;
  }
  // Per input dim: the first element read and the step, normalised as ONNX's Slice says (the
  // inferred output shape says how many).
  Status slice_params(const KernelCall& call, const Shape& in, std::vector<int64_t>* starts,
                      std::vector<int64_t>* steps) const {
    auto host = [&](size_t i) -> const HostTensor* {
      return i < call.host_values.size() && !call.host_values[i].empty() ? &call.host_values[i] : nullptr;
    };
    if (!host(1)) return errors::Internal("{}: no host copy of starts", node_.label());
    const std::vector<int64_t> st = ints(*host(1));
    std::vector<int64_t> axes, sp;
    if (host(3)) axes = ints(*host(3));
    else for (size_t a = 0; a < st.size(); ++a) axes.push_back(static_cast<int64_t>(a));
    if (host(4)) sp = ints(*host(4));
    else sp.assign(st.size(), 1);
    if (axes.size() != st.size() || sp.size() != st.size())
      return errors::InvalidArgument("{}: starts, axes and steps differ in length", node_.label());
    const int64_t rank = static_cast<int64_t>(in.size());
    for (size_t k = 0; k < st.size(); ++k) {
      int64_t a = axes[k] < 0 ? axes[k] + rank : axes[k];
      if (a < 0 || a >= rank) return errors::InvalidArgument("{}: axis {} out of range", node_.label(), axes[k]);
      const int64_t dim = in[static_cast<size_t>(a)];
      if (sp[k] == 0) return errors::InvalidArgument("{}: a step is 0", node_.label());
      int64_t s0 = st[k] < 0 ? st[k] + dim : st[k];
      s0 = sp[k] > 0 ? std::clamp<int64_t>(s0, 0, dim) : std::clamp<int64_t>(s0, 0, dim - 1);
      (*starts)[static_cast<size_t>(a)] = s0;
      (*steps)[static_cast<size_t>(a)] = sp[k];
    }
    return OkStatus();
  }

  OpenClDevice* device_;
  Node node_;
  std::string key_;
  std::shared_ptr<Program> program_;
};

// Matmul, convolution, pooling, Softmax, normalisations, Concat/Split/Gather/Pad/Tile,
// ArgMax/ArgMin, CumSum: a kernel generated per call's shapes (codegen/templates.h); the
// device keeps every program it built, keyed by source.
class TemplateOpKernel final : public Kernel {
 public:
  TemplateOpKernel(OpenClDevice* d, const Node& node) : device_(d), node_(node) {}
  std::string name() const override { return "generated"; }
  std::vector<int> host_inputs() const override { return codegen::template_host_inputs(node_); }
  Status run(KernelCall& call) override {
    codegen::OpCall c;
    c.node = &node_;
    for (const auto& in : call.inputs) c.inputs.push_back(in.defined() ? in.type() : TensorType{});
    c.host.assign(call.inputs.size(), nullptr);
    for (size_t i = 0; i < call.host_values.size() && i < c.host.size(); ++i)
      if (!call.host_values[i].empty()) c.host[i] = &call.host_values[i];
    c.outputs = call.output_types;
    TD_ASSIGN_OR_RETURN(codegen::OpPlan plan, codegen::plan_template(c));
    const std::string source = codegen::print_template(plan.kernel, codegen::Dialect::kOpenCL);
    std::shared_ptr<Program> program;
    if (program_ && source == source_) {
      program = program_;
    } else {
      TD_ASSIGN_OR_RETURN(program, device_->program(source, plan.kernel.name));
      program_ = program;
      source_ = source;
    }
    std::vector<Arg> args;
    for (int i : plan.inputs) {
      const auto& t = call.inputs.at(static_cast<size_t>(i));
      if (!t.defined() || !t.buffer) return errors::Internal("{}: input {} missing", node_.label(), i);
      TD_ASSIGN_OR_RETURN(Arg a, device_->arg(*t.buffer));
      args.push_back(a);
    }
    call.outputs.assign(call.output_types.size(), DeviceTensor{});
    for (size_t o = 0; o < call.output_types.size(); ++o) {
      TensorType t = call.output_types[o];
      if (o < plan.output_shapes.size()) t.shape = plan.output_shapes[o];
      if (!t.defined()) continue;
      TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(t.dtype, t.shape));
      TD_ASSIGN_OR_RETURN(auto buffer, call.allocator->allocate(static_cast<size_t>(bytes)));
      call.outputs[o] = DeviceTensor{t.dtype, t.shape, buffer};
    }
    for (int o : plan.outputs) {
      const auto& t = call.outputs.at(static_cast<size_t>(o));
      if (!t.buffer) return errors::Internal("{}: output {} not allocated", node_.label(), o);
      TD_ASSIGN_OR_RETURN(Arg a, device_->arg(*t.buffer));
      args.push_back(a);
    }
    return device_->launch(*program, args, plan.kernel.n);
  }

 private:
  OpenClDevice* device_;
  Node node_;
  std::string source_;
  std::shared_ptr<Program> program_;
};

const std::map<std::string, std::string>& reduce_ops() {
  static const std::map<std::string, std::string> t = {
      {"ReduceSum", "sum"},         {"ReduceMean", "mean"}, {"ReduceMax", "max"},
      {"ReduceMin", "min"},         {"ReduceProd", "prod"}, {"ReduceSumSquare", "sum_square"},
      {"ReduceL1", "l1"},           {"ReduceL2", "l2"},     {"ReduceLogSum", "log_sum"}, {"ReduceLogSumExp", "log_sum_exp"}};
  return t;
}

// ReduceSum, ReduceMean, ... over float32: a generated kernel per input shape and axes.
class ReduceOp final : public Kernel {
 public:
  ReduceOp(OpenClDevice* d, const Node& node) : device_(d), node_(node) {}
  std::string name() const override { return "generated"; }
  bool axes_from_input() const { return node_.inputs.size() > 1; }
  std::vector<int> host_inputs() const override {
    return axes_from_input() && !node_.inputs[1].empty() ? std::vector<int>{1} : std::vector<int>{};
  }
  Status run(KernelCall& call) override {
    if (call.inputs.empty() || !call.inputs[0].defined() || call.output_types.empty())
      return errors::Internal("{}: no input", node_.label());
    const DeviceTensor& x = call.inputs[0];
    const TensorType& out = call.output_types[0];
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    NodeAttrs attrs(node_);
    std::vector<int64_t> axes;
    bool noop = false;
    if (attrs.has_attr("axes")) {  // before opset 13 (ReduceSum) / 18 (the others)
      TD_ASSIGN_OR_RETURN(axes, attrs.attr_ints("axes", {}));
    } else {  // axes as an input, possibly omitted or empty
      TD_ASSIGN_OR_RETURN(int64_t noop_attr, attrs.attr_int("noop_with_empty_axes", 0));
      if (axes_from_input() && call.host_values.size() > 1 && !call.host_values[1].empty())
        for (double a : call.host_values[1].to_double_vector()) axes.push_back(static_cast<int64_t>(a));
      noop = axes.empty() && noop_attr != 0;
    }
    if (noop) {  // the input as is
      call.outputs.assign(1, DeviceTensor{x.dtype, out.shape, x.buffer});
      return OkStatus();
    }
    std::vector<bool> mask(static_cast<size_t>(rank), axes.empty());
    for (int64_t a : axes) {
      if (a < -rank || a >= rank)
        return errors::InvalidArgument("{}: axis {} is out of range for rank {}", node_.label(), a, rank);
      const size_t k = static_cast<size_t>(a < 0 ? a + rank : a);
      if (mask[k] && !axes.empty() && std::count(axes.begin(), axes.end(), a) > 1)
        return errors::InvalidArgument("{}: axis {} is repeated", node_.label(), a);
      mask[k] = true;
    }
    codegen::ReduceKernel k;
    k.op = reduce_ops().at(node_.op);
    k.in_shape.assign(x.shape.begin(), x.shape.end());
    k.reduced = mask;
    if (k.reduced_numel() == 0 || !shape_is_static(out.shape) || shape_numel(out.shape) != k.out_numel())
      return errors::Internal("{}: cannot reduce {} to {}", node_.label(), shape_to_string(x.shape),
                              shape_to_string(out.shape));
    std::string key = shape_to_string(x.shape);
    for (bool b : mask) key += b ? "1" : "0";
    if (!program_ || key != key_) {
      static const codegen::OpenClPrinter printer;
      TD_ASSIGN_OR_RETURN(std::string source, printer.print(k));
      TD_ASSIGN_OR_RETURN(program_, device_->program(source, k.name));
      key_ = key;
    }
    TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(out.dtype, out.shape));
    TD_ASSIGN_OR_RETURN(auto buffer, call.allocator->allocate(static_cast<size_t>(bytes)));
    TD_ASSIGN_OR_RETURN(Arg a, device_->arg(*x.buffer));
    TD_ASSIGN_OR_RETURN(Arg o, device_->arg(*buffer));
    TD_RETURN_IF_ERROR(device_->launch(*program_, {a, o}, k.out_numel()));
    call.outputs.assign(1, DeviceTensor{out.dtype, out.shape, buffer});
    return OkStatus();
  }

 private:
  OpenClDevice* device_;
  Node node_;
  std::string key_;
  std::shared_ptr<Program> program_;
};

// Multidirectional broadcast of static shapes (false when they do not fit).
bool broadcast_shape(const std::vector<TensorType>& inputs, Shape* out) {
  size_t rank = 0;
  for (const auto& t : inputs)
    if (t.defined()) rank = std::max(rank, t.shape.size());
  Shape s(rank, 1);
  for (const auto& t : inputs) {
    if (!t.defined()) continue;
    for (size_t k = 0; k < t.shape.size(); ++k) {
      int64_t& d = s[rank - t.shape.size() + k];
      const int64_t v = t.shape[k];
      if (v == d || v == 1) continue;
      if (d != 1) return false;
      d = v;
    }
  }
  *out = s;
  return true;
}

Status OpenClKernelTable::supports(const Node& node, const std::vector<TensorType>& inputs,
                                   const CompileOptions& options) const {
  (void)options;
  const bool domain_ok = node.domain.empty() || node.domain == "ai.onnx";
  if (domain_ok && codegen::is_template_op(node.op)) {
    for (const auto& t : inputs)
      if (t.defined() && t.dtype == DType::kFloat64 && !device_->fp64())
        return errors::Unimplemented("{}: {} has no float64 (cl_khr_fp64) ({})", node.op, device_->name(),
                                     node.label());
    return codegen::template_supported(node, inputs);
  }
  if (domain_ok && node.outputs.size() == 1 && !inputs.empty() && inputs[0].defined()) {
    if (is_view_op(node.op)) return OkStatus();
    if (reduce_ops().count(node.op) && inputs[0].dtype == DType::kFloat64 && device_->fp64() &&
        shape_is_static(inputs[0].shape) && shape_numel(inputs[0].shape) > 0)
      return OkStatus();  // a float64 template (codegen::plan_template)
    if (reduce_ops().count(node.op)) {
      // float32 with a static shape and no empty reduction (those fall back: the reference's
      // identities for empty inputs are not generated yet).
      if (inputs[0].dtype != DType::kFloat32 || !shape_is_static(inputs[0].shape) ||
          shape_numel(inputs[0].shape) == 0)
        return errors::Unimplemented("{}: {} reduces static float32 tensors only ({})", node.op,
                                     device_->name(), node.label());
      return OkStatus();
    }
    if (node.op == "Transpose" || node.op == "Expand" || (node.op == "Slice" && node.inputs.size() >= 3)) {
      const size_t size = dtype_size(inputs[0].dtype);
      if (size == 1 || size == 4 || size == 8) return OkStatus();
      return errors::Unimplemented("{}: {} moves 1-, 4- and 8-byte elements only ({})", node.op,
                                   device_->name(), node.label());
    }
  }
  if (Status ir = codegen::elementwise_supported(node, inputs, nullptr); !ir.ok()) {
    if (!codegen::is_template_elementwise(node.op)) return ir;
    for (const auto& t : inputs)
      if (t.defined() && t.dtype == DType::kFloat64 && !device_->fp64())
        return ir;
    if (!codegen::template_elementwise_supported(node, inputs).ok()) return ir;
    return OkStatus();
  }
  bool all_static = true;
  for (const auto& t : inputs) all_static &= !t.defined() || shape_is_static(t.shape);
  if (all_static && node.op != "Clip" && node.op != "CastLike") {
    Shape s;
    if (!broadcast_shape(inputs, &s))
      return errors::Unimplemented("{}: {} inputs do not broadcast ({})", node.op, device_->name(),
                                   node.label());
  }
  return OkStatus();
}

Result<std::unique_ptr<Kernel>> OpenClKernelTable::create(const Node& node,
                                                          const std::vector<TensorType>& inputs,
                                                          const std::vector<TensorType>& outputs,
                                                          const CompileOptions& options) const {
  (void)outputs;
  (void)options;
  if (is_view_op(node.op)) return std::unique_ptr<Kernel>(new ViewKernel(node));
  if (reduce_ops().count(node.op) && !inputs.empty() && inputs[0].dtype == DType::kFloat64)
    return std::unique_ptr<Kernel>(new TemplateOpKernel(device_, node));
  if (reduce_ops().count(node.op)) return std::unique_ptr<Kernel>(new ReduceOp(device_, node));
  if (codegen::is_template_op(node.op)) return std::unique_ptr<Kernel>(new TemplateOpKernel(device_, node));
  if (codegen::is_template_elementwise(node.op) && !codegen::elementwise_supported(node, inputs, nullptr).ok())
    return std::unique_ptr<Kernel>(new TemplateOpKernel(device_, node));
  if (node.op == "Transpose" || node.op == "Expand" || node.op == "Slice")
    return std::unique_ptr<Kernel>(new MoveKernel(device_, node));
  return std::unique_ptr<Kernel>(new GeneratedKernel(device_, node));
}

// A fused chain: one generated kernel. Constants that are not scalars were uploaded at
// compile time and are held here.
class ElementwiseRegion final : public RegionKernel {
 public:
  ElementwiseRegion(OpenClDevice* d, Compiled c, std::vector<std::string> inputs, Shape shape)
      : device_(d), c_(std::move(c)), inputs_(std::move(inputs)), shape_(std::move(shape)) {}
  ~ElementwiseRegion() override {
    for (auto& [mem, bytes] : uploads_) device_->free(mem, bytes);
  }
  Status upload(size_t param, const HostTensor& value) {
    const size_t bytes = static_cast<size_t>(value.nbytes());
    TD_ASSIGN_OR_RETURN(void* mem, device_->allocate(bytes));
    uploads_.emplace_back(mem, bytes);
    Buffer b{device_, mem, bytes, 0};
    TD_RETURN_IF_ERROR(device_->write(b, 0, value.data(), bytes));
    held_[param] = Arg{static_cast<cl_mem>(mem), 0};
    weight_bytes_ += static_cast<int64_t>(bytes);
    return OkStatus();
  }
  Status run(const std::vector<DeviceTensor>& inputs, const std::vector<DeviceTensor>& outputs,
             Allocator& allocator) override {
    (void)allocator;
    std::vector<Arg> args;
    const auto& params = c_.lowered.params;
    for (size_t p = 0; p < params.size(); ++p) {
      if (auto h = held_.find(p); h != held_.end()) {
        args.push_back(h->second);
        continue;
      }
      size_t i = 0;
      while (i < inputs_.size() && inputs_[i] != params[p]) ++i;
      if (i >= inputs.size() || !inputs[i].buffer)
        return errors::Internal("{}: fused kernel input '{}' missing", device_->name(), params[p]);
      TD_ASSIGN_OR_RETURN(Arg a, device_->arg(*inputs[i].buffer));
      args.push_back(a);
    }
    for (const auto& o : outputs) {
      if (!o.buffer) return errors::Internal("{}: fused kernel output not allocated", device_->name());
      TD_ASSIGN_OR_RETURN(Arg a, device_->arg(*o.buffer));
      args.push_back(a);
    }
    return device_->launch(*c_.program, args, shape_numel(shape_));
  }
  int64_t arena_bytes() const override { return 0; }
  int64_t weight_bytes() const override { return weight_bytes_; }
  std::string describe() const override {
    return fmt::format("OpenClElementwise: {} over {} in 1 generated kernel, {} outputs",
                       c_.lowered.summary, shape_to_string(shape_), c_.lowered.kernel.outputs.size());
  }

 private:
  OpenClDevice* device_;
  Compiled c_;
  std::vector<std::string> inputs_;
  Shape shape_;
  std::map<size_t, Arg> held_;
  std::vector<std::pair<void*, size_t>> uploads_;
  int64_t weight_bytes_ = 0;
};

std::vector<Region> OpenClRegionCompiler::compile(const FusionGraph& g,
                                                  std::vector<std::string>* notes) {
  if (std::getenv("TENSORD_NO_ELEMENTWISE_FUSION")) return {};
  auto key = [&](size_t i, const std::vector<int>&) -> std::string {
    if (!g.placed_here.empty() && !g.placed_here[i]) return "";
    const Node& node = *g.nodes[i];
    if (node.outputs.size() != 1 || node.outputs[0].empty()) return "";
    const TensorType* out = g.type_of(node.outputs[0]);
    if (!out || !shape_is_static(out->shape) || shape_numel(out->shape) == 0) return "";
    std::vector<TensorType> in;
    for (const auto& name : node.inputs) {
      const TensorType* t = name.empty() ? nullptr : g.type_of(name);
      if (!name.empty() && (!t || !shape_is_static(t->shape))) return "";
      in.push_back(t ? *t : TensorType{});
    }
    if (!codegen::elementwise_supported(node, in, g.constant).ok()) return "";
    return "ew:" + shape_to_string(out->shape);
  };
  std::vector<Region> regions;
  for (auto& r : partition_graph(g, key)) {
    if (r.members.size() < 2 || r.outputs.empty()) continue;  // single nodes: their own kernels
    std::vector<const Node*> nodes;
    for (size_t m : r.members) nodes.push_back(g.nodes[m]);
    const Shape shape = g.type_of(nodes.back()->outputs[0])->shape;
    auto c = compile_group(*device_, nodes, r.outputs, shape, g.type_of, g.constant);
    if (!c.ok()) {
      if (notes)
        notes->push_back(fmt::format("{}: {} element-wise nodes left unfused: {}", device_->name(),
                                     nodes.size(), c.status().message()));
      continue;
    }
    // Constants that are not literals: uploaded once, held by the kernel.
    const std::vector<const HostTensor*> constants = c->lowered.constants;
    auto kernel = std::make_unique<ElementwiseRegion>(device_, std::move(*c), r.inputs, shape);
    Status up;
    for (size_t p = 0; p < constants.size() && up.ok(); ++p)
      if (constants[p]) up = kernel->upload(p, *constants[p]);
    if (!up.ok()) {
      if (notes) notes->push_back(fmt::format("{}: a fused kernel's constants: {}", device_->name(), up.message()));
      continue;
    }
    r.kernel = std::move(kernel);
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

std::unique_ptr<Backend> create_opencl_backend() { return std::make_unique<OpenClBackend>(); }
int64_t programs_built() { return g_programs_built.load(); }
int64_t kernels_launched() { return g_kernels_launched.load(); }
int64_t disk_cache_hits() { return g_disk_hits.load(); }
std::string last_source() {
  std::lock_guard<std::mutex> lock(g_last_mu);
  return g_last_source;
}

}  // namespace tensord::opencl
