#include "backends/cpu/cpu_backend.h"

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
#include "backends/cpu/elementwise_fusion.h"
#include "backends/cpu/onednn_common.h"
#include "backends/cpu/onednn_region.h"
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

// One node of a compiled graph.
struct Step {
  const Node* node = nullptr;
  std::vector<int> inputs;   // value ids, -1 for omitted optional inputs
  std::vector<int> outputs;  // value ids, -1 for omitted optional outputs
  std::vector<int> implicit;  // values its subgraphs read from this scope
  const KernelDef* kernel = nullptr;
  Status error;                           // compile-time failure: poisons the outputs
  std::vector<TensorType> output_types;   // from compile-time inference
  bool static_outputs = true;             // all output shapes known at compile time
  std::shared_ptr<FusedKernel> region;    // a fused step standing for several nodes
};

// Plain heap memory for compile-time constant folding (not accounted to any device).
class MallocAllocator final : public Allocator {
 public:
  Result<std::shared_ptr<Buffer>> allocate(size_t bytes) override {
    void* p = std::malloc(std::max<size_t>(bytes, 1));
    if (!p) return errors::ResourceExhausted("out of host memory allocating {} bytes", bytes);
    return std::shared_ptr<Buffer>(new Buffer{nullptr, p, bytes}, [](Buffer* b) {
      std::free(b->ptr);
      delete b;
    });
  }
};

class CpuExecutable final : public Executable {
 public:
  static Result<std::unique_ptr<Executable>> create(const Graph& graph,
                                                    const std::vector<TensorType>& input_types,
                                                    const CompileOptions& options,
                                                    bool fold_constants = true) {
    auto exe = std::unique_ptr<CpuExecutable>(new CpuExecutable());
    exe->graph_ = graph;  // own a copy: nodes are referenced by the steps
    exe->options_ = options;
    if (fold_constants && std::getenv("TENSORD_PROFILE")) exe->profile_ = std::make_unique<Profile>();
    const Graph& g = exe->graph_;
    ConstantEvaluator evaluator;
    if (fold_constants) evaluator = [](const Node& node, const std::vector<TensorView>& inputs) {
      return evaluate_node(node, inputs);
    };
    TD_ASSIGN_OR_RETURN(GraphTypes types,
                        infer_graph(OpRegistry::global(), g, input_types, evaluator));
    auto id_of = [&](const std::string& name) {
      auto [it, inserted] = exe->ids_.emplace(name, static_cast<int>(exe->ids_.size()));
      return it->second;
    };
    for (const auto& in : g.inputs) exe->input_ids_.push_back(id_of(in.name));
    for (const auto& [name, t] : g.initializers) exe->constants_.emplace_back(id_of(name), t);
    for (size_t idx : types.order) {
      const Node& node = g.nodes[idx];
      // Folded at compile time: its outputs are constants of the executable.
      bool folded = !node.outputs.empty();
      for (const auto& out : node.outputs)
        if (!out.empty() && !types.constants.count(out)) folded = false;
      if (folded) {
        for (const auto& out : node.outputs)
          if (!out.empty()) exe->constants_.emplace_back(id_of(out), types.constants.at(out));
        continue;
      }
      Step step;
      step.node = &node;
      std::vector<TensorType> in_types;
      for (const auto& in : node.inputs) {
        step.inputs.push_back(in.empty() ? -1 : id_of(in));
        if (in.empty()) {
          in_types.emplace_back();
        } else {
          const auto& t = types.values.at(in);
          in_types.push_back(t.ok() ? *t : TensorType{});
        }
      }
      for (const auto& name : implicit_inputs(node)) step.implicit.push_back(id_of(name));
      for (const auto& out : node.outputs) {
        step.outputs.push_back(out.empty() ? -1 : id_of(out));
        if (out.empty()) {
          step.output_types.emplace_back();
          continue;
        }
        const auto& t = types.values.at(out);
        if (!t.ok()) {
          step.error = t.status();
          continue;
        }
        step.output_types.push_back(*t);
        if (!shape_is_static(t->shape)) step.static_outputs = false;
      }
      if (step.error.ok()) {
        step.kernel = exe->pick_kernel(node, in_types, options, &step.error);
      }
      exe->steps_.push_back(std::move(step));
    }
    if (options.fuse && fold_constants) exe->form_regions(types);
    exe->values_count_ = exe->ids_.size();
    for (const auto& out : g.outputs) {
      const int id = exe->ids_.at(out.name);
      exe->output_ids_.push_back(id);
      exe->output_types_.push_back(types.values.at(out.name));
    }
    // Last use of every value, so intermediates are freed as soon as possible.
    exe->last_use_.assign(exe->values_count_, -1);
    for (size_t s = 0; s < exe->steps_.size(); ++s) {
      for (int id : exe->steps_[s].inputs)
        if (id >= 0) exe->last_use_[static_cast<size_t>(id)] = static_cast<int>(s);
      for (int id : exe->steps_[s].implicit) exe->last_use_[static_cast<size_t>(id)] = static_cast<int>(s);
    }
    for (int id : exe->output_ids_) exe->last_use_[static_cast<size_t>(id)] = INT32_MAX;
    return std::unique_ptr<Executable>(std::move(exe));
  }

  const std::vector<Result<TensorType>>& output_types() const override { return output_types_; }

  std::string describe() const override {
    std::string out;
    for (const Step& st : steps_) {
      if (st.region) {
        out += st.node->name + "\n";
      } else {
        out += fmt::format("{} '{}' [{}]\n", st.node->op, st.node->name,
                           st.kernel ? st.kernel->name : st.error.message());
      }
    }
    for (const auto& n : notes_) out += "note: " + n + "\n";
    return out;
  }

  ~CpuExecutable() override {
    if (!profile_ || profile_->by_kernel.empty()) return;
    std::vector<std::pair<std::string, std::pair<double, int64_t>>> rows(
        profile_->by_kernel.begin(), profile_->by_kernel.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    double total = 0;
    for (const auto& r : rows) total += r.second.first;
    std::string out = fmt::format("tensord profile: {} steps, {:.3f} ms in kernels\n", steps_.size(),
                                  total * 1e3);
    for (const auto& [name, v] : rows)
      out += fmt::format("  {:>10.3f} ms {:>5.1f}% {:>8} calls  {}\n", v.first * 1e3,
                         total > 0 ? 100 * v.first / total : 0.0, v.second, name);
    std::fputs(out.c_str(), stderr);
  }

  // Runs one node on constant inputs (compile-time folding).
  static Result<std::vector<HostTensor>> evaluate_node(const Node& node,
                                                       const std::vector<TensorView>& inputs) {
    Graph g;
    Node n = node;
    std::vector<Result<DeviceTensor>> bound;
    std::vector<TensorType> types;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) continue;
      n.inputs[i] = "in" + std::to_string(i);
      g.inputs.push_back({n.inputs[i], {}});
      const TensorView& v = inputs[i];
      auto* buf = new Buffer{nullptr, const_cast<void*>(v.data), static_cast<size_t>(v.nbytes())};
      bound.push_back(DeviceTensor{v.dtype, v.shape, std::shared_ptr<Buffer>(buf)});
      types.push_back(v.type());
    }
    for (const auto& out : n.outputs)
      if (!out.empty()) g.outputs.push_back({out, {}});
    g.nodes.push_back(std::move(n));
    TD_ASSIGN_OR_RETURN(auto exe, create(g, types, CompileOptions{false}, /*fold_constants=*/false));
    MallocAllocator alloc;
    std::vector<HostTensor> result;
    for (auto& o : exe->run(bound, alloc)) {
      if (!o.ok()) return o.status();
      TD_ASSIGN_OR_RETURN(HostTensor h, HostTensor::from_bytes(o->dtype, o->shape, o->buffer->ptr,
                                                               static_cast<size_t>(shape_numel(o->shape)) *
                                                                   dtype_size(o->dtype)));
      result.push_back(std::move(h));
    }
    // Omitted optional outputs are not graph outputs: re-align with node.outputs.
    std::vector<HostTensor> aligned;
    size_t k = 0;
    for (const auto& out : node.outputs) aligned.push_back(out.empty() ? HostTensor() : result.at(k++));
    return aligned;
  }

  std::vector<Result<DeviceTensor>> run(const std::vector<Result<DeviceTensor>>& inputs,
                                        Allocator& allocator) override {
    std::vector<Result<DeviceTensor>> values(values_count_,
                                             Result<DeviceTensor>(errors::Internal("unset")));
    for (size_t i = 0; i < input_ids_.size() && i < inputs.size(); ++i)
      values[static_cast<size_t>(input_ids_[i])] = inputs[i];
    for (const auto& [id, t] : constants_) values[static_cast<size_t>(id)] = wrap_constant(t);
    for (size_t s = 0; s < steps_.size(); ++s) {
      // Cancelled, past its deadline or preempted: stop here, every output gets the reason.
      if (Status c = run_checkpoint(); !c.ok())
        return std::vector<Result<DeviceTensor>>(output_ids_.size(), Result<DeviceTensor>(c));
      if (profile_) {
        const auto t0 = std::chrono::steady_clock::now();
        run_step(steps_[s], values, allocator);
        const auto t1 = std::chrono::steady_clock::now();
        const Step& st = steps_[s];
        auto& p = profile_->by_kernel[st.region ? st.node->name
                                                : st.node->op + " [" +
                                                      (st.kernel ? st.kernel->name : "-") + "]"];
        p.first += std::chrono::duration<double>(t1 - t0).count();
        p.second++;
      } else {
        run_step(steps_[s], values, allocator);
      }
      auto free_if_last = [&](int id) {
        if (id >= 0 && last_use_[static_cast<size_t>(id)] == static_cast<int>(s))
          values[static_cast<size_t>(id)] = errors::Internal("value freed");
      };
      for (int id : steps_[s].inputs) free_if_last(id);
      for (int id : steps_[s].implicit) free_if_last(id);
    }
    std::vector<Result<DeviceTensor>> outs;
    outs.reserve(output_ids_.size());
    for (int id : output_ids_) outs.push_back(values[static_cast<size_t>(id)]);
    return outs;
  }

 private:
  CpuExecutable() = default;

  // The graph compiler's oneDNN regions (convolutional parts): each replaces its nodes' steps
  // by one step; the steps are then put back in dependency order.
  void form_regions(const GraphTypes& types) {
    FusionGraph rg;
    for (const Step& st : steps_) rg.nodes.push_back(st.node);
    rg.type_of = [&types](const std::string& name) -> const TensorType* {
      auto it = types.values.find(name);
      return it != types.values.end() && it->second.ok() ? &*it->second : nullptr;
    };
    rg.constant = [&types](const std::string& name) -> const HostTensor* {
      auto it = types.constants.find(name);
      return it != types.constants.end() ? &it->second : nullptr;
    };
    std::unordered_set<std::string> graph_outputs;
    for (const auto& o : graph_.outputs) graph_outputs.insert(o.name);
    rg.is_graph_output = [&graph_outputs](const std::string& name) {
      return graph_outputs.count(name) > 0;
    };
    std::vector<FusedGroup> regions;
    if (!std::getenv("TENSORD_NO_ONEDNN_REGIONS")) regions = build_onednn_regions(rg, &notes_);
    if (!std::getenv("TENSORD_NO_ELEMENTWISE_FUSION")) {
      // Element-wise programs over what the regions left.
      std::vector<bool> taken(steps_.size(), false);
      for (const auto& r : regions)
        for (size_t m : r.members) taken[m] = true;
      for (auto& p : build_elementwise_programs(rg, taken)) regions.push_back(std::move(p));
    }
    if (regions.empty()) return;
    std::vector<bool> replaced(steps_.size(), false);
    std::vector<Step> steps;
    for (auto& r : regions) {
      for (size_t m : r.members) replaced[m] = true;
      Node& node = region_nodes_.emplace_back();
      node.op = "Fused";
      node.name = fmt::format("fused{} [{}]", region_nodes_.size() - 1, r.kernel->describe());
      node.inputs = r.inputs;
      node.outputs = r.outputs;
      Step st;
      st.node = &node;
      for (const auto& in : r.inputs) st.inputs.push_back(ids_.at(in));
      for (const auto& out : r.outputs) {
        st.outputs.push_back(ids_.at(out));
        st.output_types.push_back(*types.values.at(out));
      }
      st.region = std::move(r.kernel);
      steps.push_back(std::move(st));
    }
    for (size_t i = 0; i < steps_.size(); ++i)
      if (!replaced[i]) steps.push_back(std::move(steps_[i]));
    // Dependency order (Kahn): a step runs once every value it reads is produced.
    std::unordered_map<int, size_t> producer;
    for (size_t i = 0; i < steps.size(); ++i)
      for (int id : steps[i].outputs)
        if (id >= 0) producer[id] = i;
    std::vector<std::vector<size_t>> users(steps.size());
    std::vector<int> pending(steps.size(), 0);
    for (size_t i = 0; i < steps.size(); ++i) {
      std::unordered_set<size_t> deps;
      for (const auto* ids : {&steps[i].inputs, &steps[i].implicit})
        for (int id : *ids) {
          auto p = producer.find(id);
          if (id >= 0 && p != producer.end() && p->second != i) deps.insert(p->second);
        }
      pending[i] = static_cast<int>(deps.size());
      for (size_t d : deps) users[d].push_back(i);
    }
    // Lowest index first among the ready steps: regions lead, the rest keep their order.
    std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
    std::vector<size_t> order;
    for (size_t i = 0; i < steps.size(); ++i)
      if (pending[i] == 0) ready.push(i);
    while (!ready.empty()) {
      const size_t i = ready.top();
      ready.pop();
      order.push_back(i);
      for (size_t u : users[i])
        if (--pending[u] == 0) ready.push(u);
    }
    if (order.size() != steps.size()) {  // cannot happen with an acyclic partition
      notes_.push_back("oneDNN regions dropped: they would form a cycle");
      return;
    }
    steps_.clear();
    for (size_t i : order) steps_.push_back(std::move(steps[i]));
  }

  const KernelDef* pick_kernel(const Node& node, const std::vector<TensorType>& in_types,
                               const CompileOptions& options, Status* error) const {
    const auto& list = KernelRegistry::global().find(node.op);
    if (list.empty()) {
      *error = Status(StatusCode::kUnimplemented,
                      fmt::format("{}: the cpu backend has no kernel for this op{}", node.op,
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

  static DeviceTensor wrap_constant(const HostTensor& t) {
    auto holder = std::make_shared<HostTensor>(t);
    auto* buf = new Buffer{nullptr, const_cast<void*>(holder->data()), holder->nbytes()};
    return DeviceTensor{t.dtype(), t.shape(),
                        std::shared_ptr<Buffer>(buf, [holder](Buffer* b) { delete b; })};
  }

  void poison(const Step& step, const Status& s, std::vector<Result<DeviceTensor>>& values) {
    for (int id : step.outputs)
      if (id >= 0) values[static_cast<size_t>(id)] = s;
  }

  void run_region(const Step& step, std::vector<Result<DeviceTensor>>& values,
                  Allocator& allocator) {
    std::vector<TensorView> in(step.inputs.size());
    for (size_t k = 0; k < step.inputs.size(); ++k) {
      const auto& v = values[static_cast<size_t>(step.inputs[k])];
      if (!v.ok()) return poison(step, v.status(), values);
      in[k] = TensorView{v->dtype, v->shape, v->buffer->ptr};
    }
    std::vector<DeviceTensor> produced(step.outputs.size());
    std::vector<MutableTensorView> out(step.outputs.size());
    for (size_t k = 0; k < step.outputs.size(); ++k) {
      const TensorType& t = step.output_types[k];
      auto bytes = checked_byte_size(t.dtype, t.shape);
      auto buf = bytes.ok() ? allocator.allocate(static_cast<size_t>(*bytes))
                            : Result<std::shared_ptr<Buffer>>(bytes.status());
      if (!buf.ok()) return poison(step, Status(buf.status().code(), step.node->name + ": " + buf.status().message()), values);
      produced[k] = DeviceTensor{t.dtype, t.shape, *buf};
      out[k] = MutableTensorView{t.dtype, t.shape, (*buf)->ptr};
    }
    Status s = step.region->run(in, out, allocator);
    if (!s.ok()) return poison(step, Status(s.code(), step.node->name + ": " + s.message()), values);
    for (size_t k = 0; k < step.outputs.size(); ++k)
      values[static_cast<size_t>(step.outputs[k])] = produced[k];
  }

  void run_step(const Step& step, std::vector<Result<DeviceTensor>>& values,
                Allocator& allocator) {
    if (step.region) return run_region(step, values, allocator);
    const Node& node = *step.node;
    if (!step.error.ok()) return poison(step, step.error, values);
    std::vector<TensorView> in_views(step.inputs.size());
    std::vector<TensorType> in_types(step.inputs.size());
    for (size_t k = 0; k < step.inputs.size(); ++k) {
      const int id = step.inputs[k];
      if (id < 0) continue;
      const auto& v = values[static_cast<size_t>(id)];
      if (!v.ok()) return poison(step, v.status(), values);
      in_views[k] = TensorView{v->dtype, v->shape, v->buffer->ptr};
      in_types[k] = v->type();
    }
    for (int id : step.implicit) {
      const auto& v = values[static_cast<size_t>(id)];
      if (!v.ok()) return poison(step, v.status(), values);
    }
    std::vector<TensorType> out_types = step.output_types;
    if (!step.static_outputs) {  // data-dependent shapes: infer again with the values
      std::vector<const TensorView*> value_ptrs;
      for (const auto& v : in_views) value_ptrs.push_back(v.dtype == DType::kUndefined ? nullptr : &v);
      InferenceContext ictx(node, in_types, value_ptrs);
      Status s = infer_node(OpRegistry::global(), ictx);
      if (!s.ok()) return poison(step, s, values);
      out_types = ictx.output_types();
      out_types.resize(node.outputs.size());
      for (size_t k = 0; k < node.outputs.size(); ++k)
        if (node.outputs[k].empty()) out_types[k] = TensorType{};  // omitted optional output
    }
    // Widen float16/bfloat16 around kernels that lack native code for them.
    const bool widen_io = !step.kernel->native_low_precision &&
                          (std::any_of(in_views.begin(), in_views.end(),
                                       [](const TensorView& v) { return is_low_precision(v.dtype); }) ||
                           std::any_of(out_types.begin(), out_types.end(),
                                       [](const TensorType& t) { return is_low_precision(t.dtype); }));
    std::vector<HostTensor> widened;
    std::vector<DType> final_dtypes(out_types.size());
    if (widen_io) {
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
    std::vector<DeviceTensor> produced(step.outputs.size());
    std::vector<HostTensor> wide_outputs(step.outputs.size());
    auto allocate = [&](int i, DType dtype, const Shape& shape) -> Result<MutableTensorView> {
      TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(dtype, shape));
      if (widen_io && is_low_precision(final_dtypes[static_cast<size_t>(i)]) &&
          dtype == DType::kFloat32) {
        wide_outputs[static_cast<size_t>(i)] = HostTensor(dtype, shape);
        return MutableTensorView{dtype, shape, wide_outputs[static_cast<size_t>(i)].mutable_data()};
      }
      TD_ASSIGN_OR_RETURN(auto buf, allocator.allocate(static_cast<size_t>(bytes)));
      produced[static_cast<size_t>(i)] = DeviceTensor{dtype, shape, buf};
      return MutableTensorView{dtype, shape, buf->ptr};
    };
    KernelContext ctx(node, in_views, out_types, allocate);
    if (!step.implicit.empty() || node.op == "If" || node.op == "Loop" || node.op == "Scan") {
      ctx.set_subgraph_runner([this, &values, &allocator](const Graph& sub,
                                                          const std::vector<TensorView>& inputs) {
        return run_subgraph(sub, inputs, values, allocator);
      });
    }
    Status s;
    try {
      s = step.kernel->run(ctx);
    } catch (const std::exception& e) {  // a kernel bug must not take the process down
      s = ctx.make_error(StatusCode::kInternal,
                         fmt::format("kernel '{}' threw: {}", step.kernel->name, e.what()));
    }
    if (!s.ok()) {
      if (s.message().rfind(node.op + ":", 0) != 0) s = ctx.wrap(s);
      return poison(step, s, values);
    }
    for (size_t k = 0; k < step.outputs.size(); ++k) {
      if (step.outputs[k] < 0) continue;
      if (!ctx.output_allocated(static_cast<int>(k))) {
        return poison(step,
                      ctx.make_error(StatusCode::kInternal,
                                     fmt::format("kernel '{}' did not produce output {}",
                                                 step.kernel->name, k)),
                      values);
      }
      if (!wide_outputs[k].empty()) {  // narrow back to float16/bfloat16
        const HostTensor& w = wide_outputs[k];
        const DType dt = final_dtypes[k];
        auto bytes = checked_byte_size(dt, w.shape());
        auto buf = allocator.allocate(static_cast<size_t>(*bytes));
        if (!buf.ok()) return poison(step, ctx.wrap(buf.status()), values);
        narrow(w.data<float>(), dt, w.numel(), (*buf)->ptr);
        produced[k] = DeviceTensor{dt, w.shape(), *buf};
      }
      values[static_cast<size_t>(step.outputs[k])] = produced[k];
    }
  }

  // Runs a subgraph attribute: compiled (once per input types) as a closed graph whose extra
  // inputs are the values it reads from this scope.
  Result<std::vector<HostTensor>> run_subgraph(const Graph& sub,
                                               const std::vector<TensorView>& inputs,
                                               std::vector<Result<DeviceTensor>>& values,
                                               Allocator& allocator) {
    if (inputs.size() != sub.inputs.size())
      return errors::InvalidArgument("subgraph '{}' takes {} inputs, got {}", sub.name,
                                     sub.inputs.size(), inputs.size());
    const std::vector<std::string> refs = outer_references(sub);
    std::vector<Result<DeviceTensor>> bound;
    std::vector<TensorType> types;
    auto wrap = [](const TensorView& v) {
      auto* buf = new Buffer{nullptr, const_cast<void*>(v.data),
                             static_cast<size_t>(v.nbytes())};
      return DeviceTensor{v.dtype, v.shape, std::shared_ptr<Buffer>(buf)};
    };
    for (const auto& v : inputs) {
      bound.push_back(wrap(v));
      types.push_back(v.type());
    }
    for (const auto& name : refs) {
      auto it = ids_.find(name);
      if (it == ids_.end())
        return errors::InvalidArgument("subgraph '{}' reads '{}', which is not defined", sub.name, name);
      const auto& v = values[static_cast<size_t>(it->second)];
      if (!v.ok()) return v.status();
      bound.push_back(*v);
      types.push_back(v->type());
    }
    std::string key = fmt::format("{}", static_cast<const void*>(&sub));
    for (const auto& t : types) key += "|" + t.to_string();
    auto it = subgraph_cache_.find(key);
    if (it == subgraph_cache_.end()) {
      Graph closed = sub;
      for (const auto& name : refs) closed.inputs.push_back({name, {}});
      for (auto& in : closed.inputs) in.type = TensorType{};  // bound by the actual values
      TD_ASSIGN_OR_RETURN(auto exe, create(closed, types, options_));
      it = subgraph_cache_.emplace(key, std::shared_ptr<Executable>(std::move(exe))).first;
    }
    auto outs = it->second->run(bound, allocator);
    std::vector<HostTensor> result;
    for (auto& o : outs) {
      if (!o.ok()) return o.status();
      TD_ASSIGN_OR_RETURN(HostTensor h, HostTensor::from_bytes(o->dtype, o->shape, o->buffer->ptr,
                                                               static_cast<size_t>(shape_numel(o->shape)) *
                                                                   dtype_size(o->dtype)));
      result.push_back(std::move(h));
    }
    return result;
  }

  // TENSORD_PROFILE=1: time per op and kernel, printed to stderr when the executable goes.
  struct Profile {
    std::map<std::string, std::pair<double, int64_t>> by_kernel;  // seconds, calls
  };
  std::unique_ptr<Profile> profile_;
  std::deque<Node> region_nodes_;    // the nodes region steps point to
  std::vector<std::string> notes_;   // why the graph compiler left something alone
  Graph graph_;
  CompileOptions options_;
  std::map<std::string, std::shared_ptr<Executable>> subgraph_cache_;
  std::unordered_map<std::string, int> ids_;
  size_t values_count_ = 0;
  std::vector<int> input_ids_;
  std::vector<std::pair<int, HostTensor>> constants_;
  std::vector<Step> steps_;
  std::vector<int> output_ids_;
  std::vector<Result<TensorType>> output_types_;
  std::vector<int> last_use_;
};

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(int index) {
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

  ~CpuDevice() override {
    for (auto& [size, blocks] : cache_)
      for (void* p : blocks) std::free(p);
  }

  // Large blocks are kept when freed and handed out again for the same rounded size (a model
  // run allocates the same sizes every time; fresh pages would cost a page fault per 4 KiB on
  // every run). The cache holds at most kMaxCachedBytes.
  Result<void*> allocate(size_t bytes) override {
    const size_t rounded = rounded_size(bytes);
    if (rounded >= kMinCachedBlock) {
      std::lock_guard<std::mutex> lock(cache_mu_);
      auto it = cache_.find(rounded);
      if (it != cache_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= rounded;
        return p;
      }
    }
    void* p = std::aligned_alloc(kAlignment, rounded);
    if (!p)
      return errors::ResourceExhausted("{}: out of host memory allocating {} bytes", info_.name,
                                       bytes);
    return p;
  }
  void free(void* ptr, size_t bytes) override {
    const size_t rounded = rounded_size(bytes);
    if (rounded >= kMinCachedBlock) {
      std::lock_guard<std::mutex> lock(cache_mu_);
      if (cached_bytes_ + rounded <= kMaxCachedBytes) {
        cache_[rounded].push_back(ptr);
        cached_bytes_ += rounded;
        return;
      }
    }
    std::free(ptr);
  }
  Status write(const Buffer& dst, size_t offset, const void* src, size_t bytes) override {
    if (offset + bytes > dst.size) return errors::OutOfRange("{}: write past the end of a buffer", info_.name);
    if (bytes) std::memcpy(static_cast<char*>(dst.ptr) + offset, src, bytes);
    return OkStatus();
  }
  Status read(const Buffer& src, size_t offset, void* dst, size_t bytes) override {
    if (offset + bytes > src.size) return errors::OutOfRange("{}: read past the end of a buffer", info_.name);
    if (bytes) std::memcpy(dst, static_cast<const char*>(src.ptr) + offset, bytes);
    return OkStatus();
  }
  Result<std::unique_ptr<Executable>> compile(const Graph& graph,
                                              const std::vector<TensorType>& input_types,
                                              const CompileOptions& options) override {
    return CpuExecutable::create(graph, input_types, options);
  }
  bool copy_from(const Buffer& dst, const Buffer& src) override {
    // Host memory on both sides: any cpu device can copy from any other directly.
    if (!src.device || src.device->info().kind != "cpu" || dst.size < src.size) return false;
    if (src.size) std::memcpy(dst.ptr, src.ptr, src.size);
    return true;
  }
  void* host_pointer(const Buffer& buffer) override { return buffer.ptr; }

 private:
  static constexpr size_t kMinCachedBlock = 64 << 10;   // smaller blocks: malloc's own bins
  static constexpr size_t kMaxCachedBytes = 512 << 20;
  static size_t rounded_size(size_t bytes) {
    const size_t b = std::max<size_t>(bytes, 1);
    const size_t unit = b >= kMinCachedBlock ? 4096 : kAlignment;
    return (b + unit - 1) / unit * unit;
  }

  DeviceInfo info_;
  std::mutex cache_mu_;
  std::unordered_map<size_t, std::vector<void*>> cache_;  // free blocks by rounded size
  size_t cached_bytes_ = 0;
};

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  std::string version() const override { return kVersion; }
  std::vector<std::unique_ptr<Device>> enumerate() override {
    int n = 1;
    if (const char* env = std::getenv("TENSORD_CPU_DEVICES")) {
      n = std::atoi(env);
      if (n < 1 || n > 64) n = 1;
    }
    std::vector<std::unique_ptr<Device>> devices;
    for (int i = 0; i < n; ++i) devices.push_back(std::make_unique<CpuDevice>(i));
    return devices;
  }
};

// Heap allocator for run_graph_on_host (no engine, no accounting).
class HostAllocator final : public Allocator {
 public:
  explicit HostAllocator(Device* device) : device_(device) {}
  Result<std::shared_ptr<Buffer>> allocate(size_t bytes) override {
    TD_ASSIGN_OR_RETURN(void* p, device_->allocate(bytes));
    Device* d = device_;
    return std::shared_ptr<Buffer>(new Buffer{d, p, bytes}, [d](Buffer* b) {
      d->free(b->ptr, b->size);
      delete b;
    });
  }

 private:
  Device* device_;
};

}  // namespace

std::unique_ptr<Backend> create_cpu_backend() { return std::make_unique<CpuBackend>(); }

Result<std::string> describe_compiled(const Graph& graph, const std::vector<TensorType>& types,
                                      const CompileOptions& options) {
  CpuDevice device(0);
  TD_ASSIGN_OR_RETURN(auto exe, device.compile(graph, types, options));
  return exe->describe();
}

Result<std::vector<Result<HostTensor>>> run_graph_on_host(const Graph& graph,
                                                          const std::vector<HostTensor>& inputs,
                                                          const CompileOptions& options) {
  CpuDevice device(0);
  std::vector<TensorType> types;
  std::vector<Result<DeviceTensor>> dev_inputs;
  for (const auto& t : inputs) {
    types.push_back(t.type());
    auto holder = std::make_shared<HostTensor>(t);
    dev_inputs.push_back(DeviceTensor{
        t.dtype(), t.shape(),
        std::shared_ptr<Buffer>(new Buffer{&device, const_cast<void*>(holder->data()), t.nbytes()},
                                [holder](Buffer* b) { delete b; })});
  }
  TD_ASSIGN_OR_RETURN(auto exe, device.compile(graph, types, options));
  HostAllocator allocator(&device);
  auto outs = exe->run(dev_inputs, allocator);
  std::vector<Result<HostTensor>> result;
  for (auto& o : outs) {
    if (!o.ok()) {
      result.emplace_back(o.status());
      continue;
    }
    auto t = HostTensor::from_bytes(o->dtype, o->shape, o->buffer->ptr,
                                    static_cast<size_t>(shape_numel(o->shape)) * dtype_size(o->dtype));
    result.push_back(std::move(t));
  }
  return result;
}

}  // namespace tensord::cpu
