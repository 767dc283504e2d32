#include "backends/cpu/cpu_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <unordered_set>
#include <fstream>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <queue>
#include <thread>
#include <unordered_map>

#include "backends/cpu/kernel.h"
#include "core/env.h"
#include "backends/cpu/elementwise_fusion.h"
#include "backends/cpu/fusion.h"
#include "backends/cpu/onednn_common.h"
#include "backends/cpu/linear_layers.h"
#include "backends/cpu/onednn_region.h"
#include "backends/cpu/thread_pool.h"
#include "core/graph_utils.h"
#include "tensord/version.h"

namespace tensord::cpu {
namespace {

constexpr size_t kAlignment = 64;

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) return line.substr(pos + 2);
    }
  }
  return "unknown CPU";
}

std::string cpu_vendor() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("vendor_id", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) return line.substr(pos + 2);
    }
  }
  return "unknown";
}

int64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

bool is_low_precision(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }

// Widens float16/bfloat16 to float32 (for kernels without native low-precision code).
HostTensor widen(const TensorView& v) {
  HostTensor out(DType::kFloat32, v.shape);
  float* dst = out.mutable_data<float>();
  const uint16_t* src = v.as<uint16_t>();
  const int64_t n = v.numel();
  if (v.dtype == DType::kFloat16)
    for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
  else
    for (int64_t i = 0; i < n; ++i) dst[i] = bfloat16_to_float(src[i]);
  return out;
}

void narrow(const float* src, DType dtype, int64_t n, void* dst_ptr) {
  uint16_t* dst = static_cast<uint16_t*>(dst_ptr);
  if (dtype == DType::kFloat16)
    for (int64_t i = 0; i < n; ++i) dst[i] = float_to_half(src[i]);
  else
    for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bfloat16(src[i]);
}

// Test-only options (TENSORD_TEST_CPU_UNSUPPORTED_OPS, TENSORD_TEST_CPU_NO_HOST_ACCESS): make
// cpu:1 and up look like another kind of device on a machine without one — ops missing from
// their kernel table (so placement falls back to cpu:0), and memory without host mapping, peer
// copies or host adoption (so the engine stages copies through host memory).
struct TestOptions {
  std::unordered_set<std::string> unsupported_ops;
  bool no_host_access = false;
};

TestOptions test_options(int index) {
  TestOptions o;
  if (index < 1) return o;
  if (const char* ops = std::getenv("TENSORD_TEST_CPU_UNSUPPORTED_OPS")) {
    std::string list = ops;
    size_t start = 0;
    while (start <= list.size()) {
      size_t comma = list.find(',', start);
      if (comma == std::string::npos) comma = list.size();
      if (comma > start) o.unsupported_ops.insert(list.substr(start, comma - start));
      start = comma + 1;
    }
  }
  if (const char* v = std::getenv("TENSORD_TEST_CPU_NO_HOST_ACCESS")) o.no_host_access = *v && *v != '0';
  return o;
}

// A cpu kernel (KernelDef) as the engine's Kernel: device buffers become host views, float16
// and bfloat16 are widened around kernels without native code for them, and subgraphs run
// through the engine's runner.
class CpuKernel final : public Kernel {
 public:
  CpuKernel(Device* device, const KernelDef* def) : device_(device), def_(def) {}
  std::string name() const override { return def_->name; }

  Status run(KernelCall& call) override {
    const Node& node = *call.node;
    std::vector<TensorView> in_views(call.inputs.size());
    for (size_t k = 0; k < call.inputs.size(); ++k) {
      const DeviceTensor& v = call.inputs[k];
      if (!v.defined()) continue;
      in_views[k] = TensorView{v.dtype, v.shape, host_address(*v.buffer)};
    }
    // The call's own copy: nothing reads it after the kernel (a copy would allocate every
    // output's shape again; small kernels in a Loop body spent more on such copies than on
    // their work).
    std::vector<TensorType> out_types = std::move(call.output_types);
    // Widen float16/bfloat16 around kernels that lack native code for them.
    const bool widen_io = !def_->native_low_precision &&
                          (std::any_of(in_views.begin(), in_views.end(),
                                       [](const TensorView& v) { return is_low_precision(v.dtype); }) ||
                           std::any_of(out_types.begin(), out_types.end(),
                                       [](const TensorType& t) { return is_low_precision(t.dtype); }));
    std::vector<HostTensor> widened;
    std::vector<DType> final_dtypes;
    if (widen_io) {
      final_dtypes.resize(out_types.size());
      widened.reserve(in_views.size());
      for (auto& v : in_views) {
        if (is_low_precision(v.dtype)) {
          widened.push_back(widen(v));
          v = widened.back().view();
        }
      }
      for (size_t k = 0; k < out_types.size(); ++k) {
        final_dtypes[k] = out_types[k].dtype;
        if (is_low_precision(out_types[k].dtype)) out_types[k].dtype = DType::kFloat32;
      }
    }
    Allocator& allocator = *call.allocator;
    std::vector<DeviceTensor>& produced = call.outputs;
    produced.assign(out_types.size(), DeviceTensor{});
    std::vector<HostTensor> wide_outputs(widen_io ? out_types.size() : 0);
    // What the allocation callback reads, behind one pointer: a lambda capturing a pointer
    // fits std::function's own storage (capturing each by reference allocated per call).
    struct AllocState {
      bool widen_io;
      std::vector<DType>* final_dtypes;
      std::vector<HostTensor>* wide_outputs;
      std::vector<DeviceTensor>* produced;
      Allocator* allocator;
    } st{widen_io, &final_dtypes, &wide_outputs, &produced, &allocator};
    auto allocate = [p = &st](int i, DType dtype, const Shape& shape) -> Result<MutableTensorView> {
      TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(dtype, shape));
      const size_t k = static_cast<size_t>(i);
      if (p->widen_io && is_low_precision((*p->final_dtypes)[k]) && dtype == DType::kFloat32) {
        (*p->wide_outputs)[k] = HostTensor(dtype, shape);
        return MutableTensorView{dtype, shape, (*p->wide_outputs)[k].mutable_data()};
      }
      TD_ASSIGN_OR_RETURN(auto buf, p->allocator->allocate(static_cast<size_t>(bytes)));
      (*p->produced)[k] = DeviceTensor{dtype, shape, buf};
      return MutableTensorView{dtype, shape, host_address(*buf)};
    };
    const size_t num_outputs = out_types.size();
    KernelContext ctx(node, std::move(in_views), std::move(out_types), allocate);
    if (call.subgraphs) {
      Device* device = device_;
      SubgraphRunner* runner = call.subgraphs;
      ctx.set_subgraph_runner([device, runner](const Graph& sub, const std::vector<TensorView>& inputs)
                                  -> Result<std::vector<HostTensor>> {
        std::vector<DeviceTensor> bound;
        for (const auto& v : inputs) {
          auto* buf = new Buffer{device, const_cast<void*>(v.data), static_cast<size_t>(v.nbytes()), 0};
          bound.push_back(DeviceTensor{v.dtype, v.shape, std::shared_ptr<Buffer>(buf)});
        }
        TD_ASSIGN_OR_RETURN(auto outs, runner->run(sub, bound));
        std::vector<HostTensor> result;
        result.reserve(outs.size());
        for (const auto& o : outs) {
          TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(o.dtype, o.shape));
          void* p = o.buffer->device ? o.buffer->device->host_pointer(*o.buffer) : nullptr;
          if (!p && bytes > 0)
            return errors::Internal("subgraph output is not in host memory");
          // The output's own buffer, kept alive by the result (its readers only read: Loop,
          // Scan and If copy what they emit), unless it lies in an input's memory: the
          // inputs are borrowed views (a body passing a carried value through, or a view of
          // one), gone when the caller moves on.
          const auto* at = static_cast<const unsigned char*>(p);
          bool borrowed = false;
          for (const auto& v : inputs) {
            const auto* b = static_cast<const unsigned char*>(v.data);
            if (b && at && at + bytes > b && at < b + v.nbytes()) borrowed = true;
          }
          if (borrowed || bytes == 0) {
            TD_ASSIGN_OR_RETURN(HostTensor h, HostTensor::from_bytes(o.dtype, o.shape, p,
                                                                     static_cast<size_t>(bytes)));
            result.push_back(std::move(h));
          } else {
            TD_ASSIGN_OR_RETURN(HostTensor h, HostTensor::adopt(o.dtype, o.shape, p, o.buffer));
            result.push_back(std::move(h));
          }
        }
        return result;
      });
    }
    Status s;
    try {
      s = def_->run(ctx);
    } catch (const std::exception& e) {  // a kernel bug must not take the process down
      s = ctx.make_error(StatusCode::kInternal,
                         fmt::format("kernel '{}' threw: {}", def_->name, e.what()));
    }
    if (!s.ok()) return s.message().rfind(node.op + ":", 0) != 0 ? ctx.wrap(s) : s;
    for (size_t k = 0; k < num_outputs; ++k) {
      if (!ctx.wants_output(static_cast<int>(k))) continue;
      if (!ctx.output_allocated(static_cast<int>(k)))
        return ctx.make_error(StatusCode::kInternal,
                              fmt::format("kernel '{}' did not produce output {}", def_->name, k));
      if (widen_io && !wide_outputs[k].empty()) {  // narrow back to float16/bfloat16
        const HostTensor& w = wide_outputs[k];
        const DType dt = final_dtypes[k];
        TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(dt, w.shape()));
        auto buf = allocator.allocate(static_cast<size_t>(bytes));
        if (!buf.ok()) return ctx.wrap(buf.status());
        narrow(w.data<float>(), dt, w.numel(), host_address(**buf));
        produced[k] = DeviceTensor{dt, w.shape(), *buf};
      }
    }
    return OkStatus();
  }

 private:
  Device* device_;
  const KernelDef* def_;
};

// The cpu kernel table: every op's kernels in preference order (KernelRegistry); the first
// whose accepts() says OK wins, the reference kernel (always last) is the oracle.
class CpuKernelTable final : public KernelTable {
 public:
  CpuKernelTable(Device* device, std::unordered_set<std::string> removed)
      : device_(device), removed_(std::move(removed)) {}

  Status supports(const Node& node, const std::vector<TensorType>& inputs,
                  const CompileOptions& options) const override {
    Status why;
    return pick(node, inputs, options, &why) ? OkStatus() : why;
  }
  Result<std::unique_ptr<Kernel>> create(const Node& node, const std::vector<TensorType>& inputs,
                                         const std::vector<TensorType>& outputs,
                                         const CompileOptions& options) const override {
    (void)outputs;
    Status why;
    const KernelDef* k = pick(node, inputs, options, &why);
    if (!k) return why;
    return std::unique_ptr<Kernel>(new CpuKernel(device_, k));
  }

 private:
  const KernelDef* pick(const Node& node, const std::vector<TensorType>& in_types,
                        const CompileOptions& options, Status* error) const {
    const auto& list = KernelRegistry::global().find(node.op);
    if (list.empty() || removed_.count(node.op)) {
      *error = Status(StatusCode::kUnimplemented,
                      fmt::format("{}: {} has no kernel for this op{}", node.op,
                                  device_->info().name,
                                  node.name.empty() ? "" : " (node '" + node.name + "')"));
      return nullptr;
    }
    Status last;
    for (const KernelDef& k : list) {
      if (!options.fuse && k.name != "reference") continue;
      if (!k.accepts) return &k;
      last = k.accepts(node, in_types);
      if (last.ok()) return &k;
    }
    *error = last.ok() ? Status(StatusCode::kUnimplemented, node.op + ": no kernel accepts " +
                                                                node.label())
                       : last;
    return nullptr;
  }

  Device* device_;
  std::unordered_set<std::string> removed_;
};

// The cpu region compiler: oneDNN regions (convolutional parts), then Linear layers, then
// element-wise programs over what they left.
class CpuRegionCompiler final : public RegionCompiler {
 public:
  std::vector<Region> compile(const FusionGraph& g, std::vector<std::string>* notes) override {
    std::vector<Region> regions;
    if (!std::getenv("TENSORD_NO_ONEDNN_REGIONS")) regions = build_onednn_regions(g, notes);
    if (!std::getenv("TENSORD_NO_LINEAR_FUSION")) {
      std::vector<bool> taken(g.nodes.size(), false);
      for (const auto& r : regions)
        for (size_t m : r.members) taken[m] = true;
      for (auto& l : build_linear_layers(g, taken, notes)) regions.push_back(std::move(l));
    }
    if (!std::getenv("TENSORD_NO_ELEMENTWISE_FUSION")) {
      std::vector<bool> taken(g.nodes.size(), false);
      for (const auto& r : regions)
        for (size_t m : r.members) taken[m] = true;
      for (size_t i = 0; i < taken.size(); ++i)
        if (!g.placed_here.empty() && !g.placed_here[i]) taken[i] = true;
      for (auto& p : build_elementwise_programs(g, taken)) regions.push_back(std::move(p));
    }
    return regions;
  }
};

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(int index) : test_(test_options(index)), kernels_(this, test_.unsupported_ops) {
    info_.name = "cpu:" + std::to_string(index);
    info_.kind = "cpu";
    info_.index = index;
    info_.vendor = cpu_vendor();
    info_.model = cpu_model_name();
    info_.memory_bytes = physical_memory();
    info_.backend = "cpu";
    info_.backend_version =
        std::string("tensord ") + kVersion + " (" + onednn_version() + ", reference kernels)";
    info_.threads = compute_threads();
  }

  const DeviceInfo& info() const override { return info_; }
  void expect_work() override { ThreadPool::get().prewake(); }

  // Raw host memory, 64-byte aligned (the engine's pool caches and sub-allocates it). Blocks
  // of 4 MiB or more are whole 2 MiB pieces the kernel may back with huge pages (as host
  // blocks, core/host_blocks.h): kernels streaming over large tensors, and the broker's
  // sendmsg() copying a value out to a socket, then take one TLB entry per 2 MiB instead of
  // 512 (under a VM's nested paging the difference is most of a read's time).
  //
  // Blocks of 1 MiB or more are mapped from the kernel directly (and unmapped when freed), not
  // taken from malloc's arenas: a block freed by another thread than the one that allocated it
  // (several device runners) would otherwise stay in that thread's arena, resident, after
  // malloc_trim (which does not shrink a thread arena's top).
  static constexpr size_t kMapped = size_t{1} << 20;
  static constexpr size_t kHuge = size_t{2} << 20;
  static size_t block_bytes(size_t bytes, size_t* align) {
    const bool huge = bytes >= 2 * kHuge && bytes <= SIZE_MAX - 2 * kHuge;
    *align = huge ? kHuge : kAlignment;
    const size_t a = bytes >= kMapped ? std::max<size_t>(*align, 4096) : *align;
    const size_t rounded = (std::max<size_t>(bytes, 1) + a - 1) / a * a;
    return rounded < bytes ? 0 : rounded;
  }
  Result<void*> allocate(size_t bytes) override {
    size_t align = 0;
    const size_t rounded = block_bytes(bytes, &align);
    if (rounded == 0)
      return errors::ResourceExhausted("{}: {} bytes cannot be allocated", info_.name, bytes);
    void* p = nullptr;
    if (bytes >= kMapped) {
      const size_t span = rounded + (align > 4096 ? align : 0);
      void* m = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m != MAP_FAILED) {
        char* base = static_cast<char*>(m);
        char* aligned = reinterpret_cast<char*>(
            (reinterpret_cast<uintptr_t>(base) + align - 1) / align * align);
        if (aligned > base) munmap(base, static_cast<size_t>(aligned - base));
        const size_t tail = span - static_cast<size_t>(aligned - base) - rounded;
        if (tail > 0) munmap(aligned + rounded, tail);
        p = aligned;
      }
    } else {
      p = std::aligned_alloc(align, rounded);
    }
    if (!p)
      return errors::ResourceExhausted("{}: out of host memory allocating {} bytes", info_.name,
                                       bytes);
#ifdef MADV_HUGEPAGE
    if (align == kHuge) (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return p;
  }
  void free(void* ptr, size_t bytes) override {
    if (ptr != nullptr && bytes >= kMapped) {
      size_t align = 0;
      munmap(ptr, block_bytes(bytes, &align));
      return;
    }
    std::free(ptr);
  }
  Status write(const Buffer& dst, size_t offset, const void* src, size_t bytes) override {
    if (offset > dst.size || bytes > dst.size - offset)
      return errors::OutOfRange("{}: write past the end of a buffer", info_.name);
    if (bytes) std::memcpy(static_cast<char*>(host_address(dst)) + offset, src, bytes);
    return OkStatus();
  }
  Status read(const Buffer& src, size_t offset, void* dst, size_t bytes) override {
    if (offset > src.size || bytes > src.size - offset)
      return errors::OutOfRange("{}: read past the end of a buffer", info_.name);
    if (bytes) std::memcpy(dst, static_cast<const char*>(host_address(src)) + offset, bytes);
    return OkStatus();
  }
  const KernelTable& kernels() const override { return kernels_; }
  RegionCompiler* region_compiler() override { return &regions_; }
  bool copy_from(const Buffer& dst, const Buffer& src) override {
    // Host memory on both sides: any cpu device can copy from any other directly.
    auto* other = dynamic_cast<CpuDevice*>(src.device);
    if (!other || test_.no_host_access || other->test_.no_host_access || dst.size < src.size)
      return false;
    if (src.size) std::memcpy(host_address(dst), host_address(src), src.size);
    return true;
  }
  void* host_pointer(const Buffer& buffer) override {
    return test_.no_host_access ? nullptr : host_address(buffer);
  }
  bool adopts_host_memory() const override { return !test_.no_host_access; }

 private:
  DeviceInfo info_;
  TestOptions test_;
  CpuKernelTable kernels_;
  CpuRegionCompiler regions_;
};

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  std::string version() const override { return kVersion; }
  Status check_settings() const override {
    TD_RETURN_IF_ERROR(parse_count_env("TENSORD_CPU_DEVICES", 1, 64).status());
    TD_RETURN_IF_ERROR(parse_count_env("TENSORD_SERIAL_WORK_K", 1, 1000000).status());
    TD_RETURN_IF_ERROR(parse_count_env("TENSORD_SPIN_US", 0, 100000).status());
    return parse_count_env("TENSORD_NUM_THREADS", 1, 1024).status();
  }
  std::vector<std::unique_ptr<Device>> enumerate() override {
    int n = 1;
    if (auto v = parse_count_env("TENSORD_CPU_DEVICES", 1, 64); v.ok() && *v > 0) n = *v;
    std::vector<std::unique_ptr<Device>> devices;
    for (int i = 0; i < n; ++i) devices.push_back(std::make_unique<CpuDevice>(i));
    return devices;
  }
};

}  // namespace

std::unique_ptr<Backend> create_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace tensord::cpu
