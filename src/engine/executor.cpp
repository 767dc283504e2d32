#include "engine/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "core/errors.h"
#include "core/graph_utils.h"
#include "core/log.h"
#include "core/op_registry.h"
#include "engine/canonicalize.h"

namespace tensord {

// What a value holds that no step wrote: a compiler bug, said as one.
constexpr const char* kNeverProduced =
    "no step of the compiled graph produced this value (a tensord bug: please report it with "
    "the model)";

// What every value holds before its step runs, and after its last reader: short messages
// (no heap allocation to copy into each of a run's values, no formatting per run: a Loop body
// of eight small kernels spent a tenth of its time making these). A "never produced" that
// reaches a reader or an output is said in full (explained()).
const Status& never_produced() {
  static const Status s(StatusCode::kInternal, "never produced");
  return s;
}
const Status& value_freed() {
  static const Status s(StatusCode::kInternal, "value freed");
  return s;
}
Status explained(const Status& s) {
  if (s.code() == StatusCode::kInternal && s.message() == never_produced().message())
    return Status(StatusCode::kInternal, kNeverProduced);
  return s;
}
namespace {

// Inputs at most this many elements are read to the host for run-time shape inference on a
// device without host mapping (shape-valued inputs are tiny; data tensors are not needed).
constexpr int64_t kMaxInferenceHostElements = 4096;

struct Step {
  enum Kind { kKernel, kRegion, kCopy };
  Kind kind = kKernel;
  const Node* node = nullptr;
  size_t device = 0;          // index into Impl::devices
  std::vector<int> inputs;    // value ids, -1 for omitted optional inputs
  std::vector<int> outputs;   // value ids, -1 for omitted optional outputs
  std::vector<int> implicit;  // values its subgraphs read from this scope
  std::shared_ptr<Kernel> kernel;
  std::shared_ptr<RegionKernel> region;
  Status error;                          // compile-time failure: poisons the outputs
  std::vector<TensorType> output_types;  // from compile-time inference
  bool static_outputs = true;            // all output shapes known at compile time
  bool fallback = false;                 // placed on the fallback device
  // A Reshape-like node (the bytes unchanged, only the shape) whose output is an intermediate
  // on a cpu device: its output shares the input's buffer instead of a copy (mark_views).
  bool view = false;
  std::string label;                     // copies and regions: what describe() prints
};

// Plain heap memory (compile-time folding, run_graph_on_host): not accounted anywhere.
class HeapAllocator final : public Allocator {
 public:
  explicit HeapAllocator(Device* device) : device_(device) {}
  Result<std::shared_ptr<Buffer>> allocate(size_t bytes) override {
    TD_ASSIGN_OR_RETURN(void* p, device_->allocate(std::max<size_t>(bytes, 1)));
    Device* d = device_;
    return std::shared_ptr<Buffer>(new Buffer{d, p, bytes, 0}, [d](Buffer* b) {
      d->free(b->ptr, std::max<size_t>(b->size, 1));
      delete b;
    });
  }

 private:
  Device* device_;
};

// Copies between devices outside an engine: through host memory.
Result<DeviceTensor> transfer_through_host(const DeviceTensor& v, Device& dst, Allocator& alloc) {
  if (v.buffer && v.buffer->device == &dst) return v;
  TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(v.dtype, v.shape));
  TD_ASSIGN_OR_RETURN(auto buf, alloc.allocate(static_cast<size_t>(bytes)));
  if (bytes > 0) {
    std::vector<char> host(static_cast<size_t>(bytes));
    Device* src = v.buffer->device;
    if (!src) return errors::Internal("transfer: a value without a device");
    TD_RETURN_IF_ERROR(src->read(*v.buffer, 0, host.data(), host.size()));
    TD_RETURN_IF_ERROR(dst.write(*buf, 0, host.data(), host.size()));
  }
  return DeviceTensor{v.dtype, v.shape, buf};
}

class HostServices final : public RunServices {
 public:
  Allocator& allocator(Device& device) override {
    auto& a = allocators_[&device];
    if (!a) a = std::make_unique<HeapAllocator>(&device);
    return *a;
  }
  Result<DeviceTensor> transfer(const DeviceTensor& value, Device& dst) override {
    return transfer_through_host(value, dst, allocator(dst));
  }

 private:
  std::map<Device*, std::unique_ptr<HeapAllocator>> allocators_;
};

// A host tensor as a buffer of a device that computes on host memory (no copy).
DeviceTensor wrap_host(Device* device, std::shared_ptr<const HostTensor> t) {
  auto* buf = new Buffer{device, const_cast<void*>(t->data()), t->nbytes(), 0};
  return DeviceTensor{t->dtype(), t->shape(),
                      std::shared_ptr<Buffer>(buf, [t](Buffer* b) { delete b; })};
}

// A value's bytes on the host: the device's own mapping, else a copy.
Result<HostTensor> to_host(const DeviceTensor& v) {
  TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(v.dtype, v.shape));
  if (bytes == 0) return HostTensor(v.dtype, v.shape);
  Device* d = v.buffer ? v.buffer->device : nullptr;
  if (!d) return errors::Internal("a value without a device");
  if (void* p = d->host_pointer(*v.buffer))
    return HostTensor::from_bytes(v.dtype, v.shape, p, static_cast<size_t>(bytes));
  HostTensor h(v.dtype, v.shape);
  TD_RETURN_IF_ERROR(d->read(*v.buffer, 0, h.mutable_data(), static_cast<size_t>(bytes)));
  return h;
}

std::string device_name(const Device* d) { return d ? d->info().name : std::string("?"); }

}  // namespace

struct Executable::Impl {
  Graph graph;  // own copy: steps point at its nodes
  CompileTarget target;
  CompileOptions options;
  std::vector<Device*> devices;  // [0] the target, [1] the fallback when one is used
  std::unordered_map<std::string, int> ids;
  size_t values_count = 0;
  std::vector<int> input_ids;
  std::vector<std::pair<int, std::shared_ptr<const HostTensor>>> constants;
  // Constants as values on the device that reads them, materialised at compile time (a
  // constant read on two devices has one value id per device).
  std::vector<std::pair<int, DeviceTensor>> device_constants;
  std::string fallback_name;
  std::vector<Step> steps;
  std::vector<int> output_ids;
  std::vector<Result<TensorType>> output_types;
  std::vector<int> last_use;
  std::deque<Node> synthetic_nodes;  // the nodes region and copy steps point to
  std::vector<std::string> notes;    // why a compiler left something alone
  std::vector<Fallback> fallbacks;
  int64_t held = 0;         // bytes charged to target.budget for this executable (build)
  int64_t held_folded = 0;  // of which folded constants

  // Each subgraph attribute's outer references and compiled forms, by the subgraph (stable
  // while this executable lives) and device: a Loop's body runs once per iteration, so the
  // lookup is no string formatting, only a compare of the input types.
  struct SubgraphForms {
    std::vector<std::string> refs;
    std::vector<int> ref_ids;  // refs' value ids in this executable (-1: not defined here)
    std::vector<std::pair<std::vector<TensorType>, std::shared_ptr<Executable>>> compiled;
  };
  std::mutex subgraph_mu;
  std::map<std::pair<const Graph*, size_t>, SubgraphForms> subgraph_cache;

  // TENSORD_PROFILE=1 (or set_profiling): time per op and kernel, printed to stderr when the
  // executable goes, and added to the process's profile_totals().
  struct Profile {
    std::mutex mu;
    std::map<std::string, std::pair<double, int64_t>> by_kernel;  // seconds, calls
    // Step name -> its kind ("reference", "onednn-ref" or ""), found on its first run.
    std::map<std::string, std::string> kind;
  };
  std::unique_ptr<Profile> profile;

  // Whole-run replay (Device::run_recorder, CUDA graphs) for an executable whose steps all
  // run on the target with static shapes and read no value on the host: the first run is
  // plain (kernels compiled, algorithms picked), the second is recorded over buffers held
  // here from then on, later runs copy their inputs into the held ones, replay, and copy the
  // outputs out. A recording that fails leaves plain runs. One run replays at a time; a
  // concurrent one runs plainly.
  struct Replay {
    std::mutex mu;
    int plain_runs = 0;
    bool off = false;
    std::unique_ptr<RunRecorder> recorder;
    std::vector<std::shared_ptr<Buffer>> held;  // every buffer the recorded run allocated
    std::vector<DeviceTensor> inputs, outputs;
  };
  std::unique_ptr<Replay> replay;  // null: not eligible
  void plan_replay(const std::vector<TensorType>& input_types);
  bool run_replayed(const std::vector<Result<DeviceTensor>>& inputs, RunServices& services,
                    std::vector<Result<DeviceTensor>>* outs);
  std::vector<Result<DeviceTensor>> run_steps(const std::vector<Result<DeviceTensor>>& inputs,
                                              RunServices& services);

  int id_of(const std::string& name) {
    auto [it, inserted] = ids.emplace(name, static_cast<int>(ids.size()));
    return it->second;
  }

  Status build(const std::vector<TensorType>& input_types, bool fold_constants);
  void place(Step& step, const std::vector<TensorType>& in_types);
  void mark_views();
  void form_regions(const GraphTypes& types);
  Status insert_copies();
  Status materialise_constants();
  void poison(const Step& step, const Status& s, std::vector<Result<DeviceTensor>>& values) {
    const Status e = explained(s);
    for (int id : step.outputs)
      if (id >= 0) values[static_cast<size_t>(id)] = e;
  }
  void run_step(const Step& step, std::vector<Result<DeviceTensor>>& values, RunServices& services);
  void run_region(const Step& step, std::vector<Result<DeviceTensor>>& values, RunServices& services);
  void run_kernel(const Step& step, std::vector<Result<DeviceTensor>>& values, RunServices& services);
  Result<std::vector<DeviceTensor>> run_subgraph(const Step& step, const Graph& sub,
                                                 const std::vector<DeviceTensor>& inputs,
                                                 std::vector<Result<DeviceTensor>>& values,
                                                 RunServices& services);
};

namespace {

// Runs one node on constant inputs on the host device (compile-time folding).
Result<std::vector<HostTensor>> evaluate_on_host(Device* host, const Node& node,
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
    auto* buf = new Buffer{host, const_cast<void*>(v.data), static_cast<size_t>(v.nbytes()), 0};
    bound.push_back(DeviceTensor{v.dtype, v.shape, std::shared_ptr<Buffer>(buf)});
    types.push_back(v.type());
  }
  for (const auto& out : n.outputs)
    if (!out.empty()) g.outputs.push_back({out, {}});
  g.nodes.push_back(std::move(n));
  CompileTarget t;
  t.device = host;
  t.host = host;
  CompileOptions o;
  o.fuse = false;
  auto impl = std::make_unique<Executable::Impl>();
  impl->graph = std::move(g);
  impl->target = t;
  impl->options = o;
  impl->devices = {host};
  TD_RETURN_IF_ERROR(impl->build(types, /*fold_constants=*/false));
  HostServices services;
  std::vector<Result<DeviceTensor>> values(impl->values_count,
                                           Result<DeviceTensor>(never_produced()));
  std::vector<HostTensor> result;
  // Run the steps directly (no Executable object needed for one node).
  for (size_t i = 0; i < impl->input_ids.size(); ++i)
    values[static_cast<size_t>(impl->input_ids[i])] = bound[i];
  for (const auto& [id, t] : impl->device_constants) values[static_cast<size_t>(id)] = t;
  for (const Step& st : impl->steps) impl->run_step(st, values, services);
  for (int id : impl->output_ids) {
    const auto& o = values[static_cast<size_t>(id)];
    if (!o.ok()) return explained(o.status());
    TD_ASSIGN_OR_RETURN(HostTensor h, to_host(*o));
    result.push_back(std::move(h));
  }
  // Omitted optional outputs are not graph outputs: re-align with node.outputs.
  std::vector<HostTensor> aligned;
  size_t k = 0;
  for (const auto& out : node.outputs) aligned.push_back(out.empty() ? HostTensor() : result.at(k++));
  return aligned;
}

}  // namespace

Status Executable::Impl::build(const std::vector<TensorType>& input_types, bool fold_constants) {
  const Graph& g = graph;
  ConstantEvaluator evaluator;
  CompileBudget* budget = target.budget.get();
  Status refused;              // a quota refused a folded value: the compile fails with it
  int64_t charged_folded = 0;  // folded bytes this build charged (intermediates included)
  std::unordered_set<std::string> folded_names;
  if (fold_constants && target.host) {
    Device* host = target.host;
    evaluator = [&, host](const Node& node,
                          const std::vector<TensorView>& inputs) -> Result<std::vector<HostTensor>> {
      if (!budget) return evaluate_on_host(host, node, inputs);
      if (!refused.ok()) return refused;
      // The outputs' size before they exist: the cap and the quota are checked first.
      std::vector<TensorType> in_types;
      std::vector<const TensorView*> in_values;
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        const bool has = !node.inputs[i].empty() && i < inputs.size();
        in_types.push_back(has ? inputs[i].type() : TensorType{});
        in_values.push_back(has ? &inputs[i] : nullptr);
      }
      InferenceContext ctx(node, std::move(in_types), std::move(in_values));
      TD_RETURN_IF_ERROR(infer_node(OpRegistry::global(), ctx));
      int64_t bytes = 0;
      for (const auto& t : ctx.output_types()) {
        if (!t.defined()) continue;
        TD_ASSIGN_OR_RETURN(int64_t b, checked_byte_size(t.dtype, t.shape));
        bytes += b;
      }
      if (!budget->reserve_folded(bytes))  // past the cap: computed at run time instead
        return errors::ResourceExhausted("folding cap of {} reached", format_bytes(budget->max_folded()));
      Status s = budget->charge(
          bytes, fmt::format("folding {} node '{}' of graph '{}' to {} of constants at compile "
                             "time ({} folded so far)",
                             node.op, node.name, g.name, format_bytes(bytes),
                             format_bytes(budget->folded() - bytes)));
      if (!s.ok()) {
        budget->release_folded(bytes);
        refused = s;
        return s;
      }
      auto r = evaluate_on_host(host, node, inputs);
      int64_t real = 0;
      if (r.ok())
        for (const auto& t : *r) real += static_cast<int64_t>(t.nbytes());
      if (!r.ok() || real != bytes) {  // exact: what was created, or nothing
        budget->release_folded(bytes);
        (void)budget->charge(-bytes, "");
        if (!r.ok()) return r;
        (void)budget->reserve_folded(real);  // real < bytes in practice; never refused
        Status again = budget->charge(real, "folding a constant at compile time");
        if (!again.ok()) {
          budget->release_folded(real);
          refused = again;
          return again;
        }
        bytes = real;
      }
      charged_folded += bytes;
      for (const auto& out : node.outputs)
        if (!out.empty()) folded_names.insert(out);
      return r;
    };
  }
  TD_ASSIGN_OR_RETURN(GraphTypes types, infer_graph(OpRegistry::global(), g, input_types, evaluator));
  // A build that fails gives its charge back (the budget dies with this Impl otherwise).
  struct GiveBack {
    CompileBudget* budget;
    int64_t* charged;
    int64_t* folded;
    bool done = false;
    ~GiveBack() {
      if (done || !budget) return;
      budget->release_folded(*folded);
      (void)budget->charge(-*charged, "");
    }
  };
  int64_t charged_total = charged_folded;
  GiveBack give_back{budget, &charged_total, &charged_folded};
  if (!refused.ok()) return refused;
  // BatchNormalization and constant Mul/Add folded into the contraction before them
  // (engine/canonicalize.h's bnfold and affine), then Conv kernels cut to their live taps
  // (taps): the weights made are charged as folded.
  std::vector<bool> dropped(graph.nodes.size(), false);
  std::vector<std::string> made;
  if (options.fuse && fold_constants) {
    // (One charge for both: a folded BatchNormalization's weights, then a cut kernel's.)
    auto charge = [&](const std::string& name, int64_t bytes) {
      if (budget) {
        if (!budget->reserve_folded(bytes)) return false;
        Status s = budget->charge(
            bytes, fmt::format("folding BatchNormalization or a constant Mul/Add, or cutting a Conv kernel, of graph '{}' into {} of weights",
                               g.name, format_bytes(bytes)));
        if (!s.ok()) {
          budget->release_folded(bytes);
          return false;
        }
      }
      charged_folded += bytes;
      charged_total += bytes;
      folded_names.insert(name);
      made.push_back(name);
      return true;
    };
    const CanonicalizeOptions canonical = CanonicalizeOptions::from_env();
    fold_affine(graph, types, &dropped, canonical, charge);
    trim_conv_taps(graph, types, canonical, charge);
  }
  for (const auto& in : g.inputs) input_ids.push_back(id_of(in.name));
  for (const auto& [name, t] : g.initializers)
    constants.emplace_back(id_of(name), std::make_shared<const HostTensor>(t));
  for (const auto& name : made)
    constants.emplace_back(id_of(name), std::make_shared<const HostTensor>(types.constants.at(name)));
  for (size_t idx : types.order) {
    if (dropped[idx]) continue;
    const Node& node = g.nodes[idx];
    // Folded at compile time: its outputs are constants of the executable.
    bool folded = !node.outputs.empty();
    for (const auto& out : node.outputs)
      if (!out.empty() && !types.constants.count(out)) folded = false;
    if (folded) {
      for (const auto& out : node.outputs)
        if (!out.empty())
          constants.emplace_back(id_of(out), std::make_shared<const HostTensor>(types.constants.at(out)));
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
    if (step.error.ok()) place(step, in_types);
    steps.push_back(std::move(step));
  }
  if (options.strict_device && !fallbacks.empty()) {
    std::vector<std::string> what;
    for (const auto& f : fallbacks) what.push_back(fmt::format("{} ('{}')", f.op, f.node));
    return errors::Unimplemented(
        "strict device: {} does not support {} node(s): {} ({})", device_name(devices[0]),
        fallbacks.size(), fmt::join(what, ", "), fallbacks.front().why);
  }
  if (options.fuse && fold_constants) form_regions(types);
  for (const auto& out : g.outputs) {
    output_ids.push_back(ids.at(out.name));
    output_types.push_back(types.values.at(out.name));
  }
  TD_RETURN_IF_ERROR(insert_copies());
  values_count = ids.size();
  TD_RETURN_IF_ERROR(materialise_constants());
  // What the executable keeps: the constants read at run time (the device's copies, or the
  // host tensors themselves where the device adopts host memory) that are not the graph's own
  // initializers, and the weights the region compilers prepared. Folded values that only fed
  // other folded nodes go now.
  {
    std::unordered_set<const void*> seen;
    int64_t kept_folded = 0, copies = 0, weights = 0;
    std::unordered_map<int, std::string> name_of;
    for (const auto& [n, i] : ids) name_of.emplace(i, n);
    for (const auto& [id, t] : device_constants) {
      if (!t.buffer) continue;
      const Device* d = t.buffer->device;
      const bool adopted = d && d->adopts_host_memory();
      if (!adopted) {
        copies += static_cast<int64_t>(t.buffer->size);
        continue;
      }
      std::string name = name_of[id];
      if (auto at = name.find('@'); at != std::string::npos && !folded_names.count(name))
        name = name.substr(0, at);  // an alias of a constant on another device
      if (folded_names.count(name) && seen.insert(t.buffer->ptr).second)
        kept_folded += static_cast<int64_t>(t.buffer->size);
    }
    for (const Step& st : steps)
      if (st.region) weights += std::max<int64_t>(0, st.region->weight_bytes());
    constants.clear();  // device_constants hold what runs read
    held_folded = kept_folded;
    held = kept_folded + copies + weights;
    if (budget) {
      budget->release_folded(charged_folded - kept_folded);
      charged_folded = kept_folded;
      TD_RETURN_IF_ERROR(budget->charge(
          held - charged_total,
          fmt::format("keeping graph '{}' compiled ({} of folded constants, {} of prepared "
                      "weights, {} of device copies of constants)",
                      g.name, format_bytes(kept_folded), format_bytes(weights),
                      format_bytes(copies))));
      charged_total = held;
    }
  }
  // Last use of every value, so intermediates are freed as soon as possible.
  last_use.assign(values_count, -1);
  for (size_t s = 0; s < steps.size(); ++s) {
    for (int id : steps[s].inputs)
      if (id >= 0) last_use[static_cast<size_t>(id)] = static_cast<int>(s);
    for (int id : steps[s].implicit) last_use[static_cast<size_t>(id)] = static_cast<int>(s);
  }
  for (int id : output_ids) last_use[static_cast<size_t>(id)] = INT32_MAX;
  mark_views();
  if (!fallbacks.empty() && fold_constants) {
    std::map<std::string, int> by_op;
    for (const auto& f : fallbacks) by_op[f.op]++;
    std::vector<std::string> ops;
    for (const auto& [op, n] : by_op) ops.push_back(n > 1 ? fmt::format("{} x{}", op, n) : op);
    log::warn(fmt::format("graph '{}': {} node(s) run on {}, not {} ({}): {}", g.name,
                          fallbacks.size(), device_name(devices[1]), device_name(devices[0]),
                          fmt::join(ops, ", "), fallbacks.front().why));
  }
  give_back.done = true;
  return OkStatus();
}

// Views: Reshape, Flatten, Squeeze, Unsqueeze and Identity keep every byte where it is, so on
// a cpu device their output can be the input's buffer under the new shape (as NumPy's and
// PyTorch's reshape are views). Only for intermediates with shapes known at compile time: a
// graph output stays a buffer of its own (a client may hold it while writing the input).
// No kernel writes into its inputs, so a buffer shared by a value and its view is only read.
void Executable::Impl::mark_views() {
  static const std::set<std::string> kViewOps = {"Reshape", "Flatten", "Squeeze", "Unsqueeze",
                                                 "Identity"};
  if (std::getenv("TENSORD_VIEWS") && std::string(std::getenv("TENSORD_VIEWS")) == "0") return;
  const std::set<int> outputs(output_ids.begin(), output_ids.end());
  for (Step& st : steps) {
    if (st.kind != Step::kKernel || !st.error.ok() || !st.node || !st.node->domain.empty() ||
        !kViewOps.count(st.node->op) || !st.static_outputs || st.outputs.size() != 1 ||
        st.outputs[0] < 0 || outputs.count(st.outputs[0]) || st.inputs.empty() ||
        st.inputs[0] < 0 || st.output_types.size() != 1 ||
        st.output_types[0].dtype == DType::kUndefined ||
        devices[st.device]->info().kind != "cpu")
      continue;
    st.view = true;
  }
}

// Placement: the target device if it supports the node, else the fallback device.
void Executable::Impl::place(Step& step, const std::vector<TensorType>& in_types) {
  const Node& node = *step.node;
  const Device* target_device = devices[0];
  Status here = target_device->kernels().supports(node, in_types, options);
  size_t d = 0;
  if (!here.ok() && target.fallback && target.fallback != target_device &&
      here.code() == StatusCode::kUnimplemented) {
    Status there = target.fallback->kernels().supports(node, in_types, options);
    if (there.ok()) {
      if (devices.size() < 2) devices.push_back(target.fallback);
      d = 1;
      step.fallback = true;
      fallbacks.push_back({node.op, node.name, here.message()});
      here = OkStatus();
    }
  }
  step.device = d;
  if (!here.ok()) {
    step.error = here;
    return;
  }
  auto k = devices[d]->kernels().create(node, in_types, step.output_types, options);
  if (!k.ok()) {
    step.error = k.status();
    return;
  }
  step.kernel = std::shared_ptr<Kernel>(std::move(k).value());
}

// The devices' region compilers: each region replaces its nodes' steps by one step; the
// steps are then put back in dependency order.
void Executable::Impl::form_regions(const GraphTypes& types) {
  FusionGraph rg;
  for (const Step& st : steps) rg.nodes.push_back(st.node);
  rg.index_uses();  // who reads and makes each value, for every region compiler below
  rg.type_of = [&types](const std::string& name) -> const TensorType* {
    auto it = types.values.find(name);
    return it != types.values.end() && it->second.ok() ? &*it->second : nullptr;
  };
  rg.constant = [&types](const std::string& name) -> const HostTensor* {
    auto it = types.constants.find(name);
    return it != types.constants.end() ? &it->second : nullptr;
  };
  std::unordered_set<std::string> graph_outputs;
  for (const auto& o : graph.outputs) graph_outputs.insert(o.name);
  rg.is_graph_output = [&graph_outputs](const std::string& name) {
    return graph_outputs.count(name) > 0;
  };
  std::vector<std::pair<size_t, Region>> regions;  // (device, region)
  std::vector<bool> taken(steps.size(), false);
  for (size_t d = 0; d < devices.size(); ++d) {
    RegionCompiler* rc = devices[d]->region_compiler();
    if (!rc) continue;
    rg.placed_here.assign(steps.size(), false);
    bool any = false;
    for (size_t i = 0; i < steps.size(); ++i) {
      rg.placed_here[i] = !taken[i] && steps[i].device == d && steps[i].error.ok();
      any |= rg.placed_here[i];
    }
    if (!any) continue;
    for (auto& r : rc->compile(rg, &notes)) {
      bool ok = r.kernel != nullptr;
      for (size_t m : r.members) ok &= m < steps.size() && rg.placed_here[m] && !taken[m];
      if (!ok) {
        notes.push_back(fmt::format("{}: a region over nodes not placed there was dropped",
                                    device_name(devices[d])));
        continue;
      }
      for (size_t m : r.members) taken[m] = true;
      regions.emplace_back(d, std::move(r));
    }
  }
  if (regions.empty()) return;
  // Together the regions of several compilers (or devices) may close a cycle that none of
  // them closes alone: those regions go back to their nodes.
  std::vector<std::vector<size_t>> groups;
  for (const auto& [d, r] : regions) groups.push_back(r.members);
  const std::vector<size_t> cyclic = groups_closing_cycles(rg, groups);
  for (size_t k = cyclic.size(); k-- > 0;) {
    const size_t r = cyclic[k];
    notes.push_back(fmt::format("{}: a region ({}) was given back to its nodes: with other "
                                "regions it would close a cycle",
                                device_name(devices[regions[r].first]),
                                regions[r].second.kernel->describe()));
    for (size_t m : regions[r].second.members) taken[m] = false;
    regions.erase(regions.begin() + static_cast<std::ptrdiff_t>(r));
  }
  if (regions.empty()) return;
  std::vector<Step> all;
  for (auto& [d, r] : regions) {
    Node& node = synthetic_nodes.emplace_back();
    node.op = "Fused";
    node.name = fmt::format("fused{} [{}]", synthetic_nodes.size() - 1, r.kernel->describe());
    node.inputs = r.inputs;
    node.outputs = r.outputs;
    Step st;
    st.kind = Step::kRegion;
    st.node = &node;
    st.device = d;
    for (const auto& in : r.inputs) st.inputs.push_back(ids.at(in));
    for (const auto& out : r.outputs) {
      st.outputs.push_back(ids.at(out));
      st.output_types.push_back(*types.values.at(out));
    }
    st.region = std::shared_ptr<RegionKernel>(std::move(r.kernel));
    all.push_back(std::move(st));
  }
  for (size_t i = 0; i < steps.size(); ++i)
    if (!taken[i]) all.push_back(std::move(steps[i]));
  // Dependency order (Kahn): a step runs once every value it reads is produced.
  std::unordered_map<int, size_t> producer;
  for (size_t i = 0; i < all.size(); ++i)
    for (int id : all[i].outputs)
      if (id >= 0) producer[id] = i;
  std::vector<std::vector<size_t>> users(all.size());
  std::vector<int> pending(all.size(), 0);
  for (size_t i = 0; i < all.size(); ++i) {
    std::unordered_set<size_t> deps;
    for (const auto* list : {&all[i].inputs, &all[i].implicit})
      for (int id : *list) {
        auto p = producer.find(id);
        if (id >= 0 && p != producer.end() && p->second != i) deps.insert(p->second);
      }
    pending[i] = static_cast<int>(deps.size());
    for (size_t d : deps) users[d].push_back(i);
  }
  // Lowest index first among the ready steps: regions lead, the rest keep their order.
  std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
  std::vector<size_t> order;
  for (size_t i = 0; i < all.size(); ++i)
    if (pending[i] == 0) ready.push(i);
  while (!ready.empty()) {
    const size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (size_t u : users[i])
      if (--pending[u] == 0) ready.push(u);
  }
  if (order.size() != all.size()) {  // cannot happen with an acyclic partition
    notes.push_back("regions dropped: they would form a cycle");
    // The original steps were moved from: rebuild is not possible here, so keep `all` in
    // its current order minus nothing (regions first is still dependency-safe only when
    // acyclic); signal the problem on every region instead.
    for (auto& st : all)
      if (st.kind == Step::kRegion) st.error = errors::Internal("{}: cyclic region", st.node->name);
    steps = std::move(all);
    return;
  }
  steps.clear();
  for (size_t i : order) steps.push_back(std::move(all[i]));
}

// Copies at the cuts: a value read on another device than the one that holds it gets a copy
// step before its first reader there (one copy per value and device); graph outputs come back
// to the target device.
Status Executable::Impl::insert_copies() {
  if (devices.size() < 2) return OkStatus();
  std::unordered_map<int, size_t> where;  // value id -> device (absent: input/constant)
  for (int id : input_ids) where[id] = 0;
  std::unordered_set<int> constant_ids;
  for (const auto& [id, t] : constants) constant_ids.insert(id);
  std::map<std::pair<int, size_t>, int> copied;  // (value, device) -> copy's value id
  std::vector<Step> out;
  std::map<std::pair<int, size_t>, int> aliases;  // (constant, device) -> its id there
  std::vector<std::pair<int, std::shared_ptr<const HostTensor>>> alias_constants;
  auto name_of = [&](int id) {
    for (const auto& [n, i] : ids)
      if (i == id) return n;
    return std::string();
  };
  auto copy_of = [&](int id, size_t d) -> int {
    if (id < 0) return id;
    if (constant_ids.count(id)) {
      if (d == 0) return id;
      auto a = aliases.find({id, d});
      if (a != aliases.end()) return a->second;
      const int aid = id_of(fmt::format("{}@{}", name_of(id), device_name(devices[d])));
      for (const auto& [cid, t] : constants)
        if (cid == id) alias_constants.emplace_back(aid, t);
      aliases.emplace(std::make_pair(id, d), aid);
      return aid;
    }
    auto w = where.find(id);
    if (w == where.end() || w->second == d) return id;
    auto key = std::make_pair(id, d);
    auto c = copied.find(key);
    if (c != copied.end()) return c->second;
    const std::string name = name_of(id);
    const std::string copy_name = fmt::format("{}@{}", name, device_name(devices[d]));
    const int cid = id_of(copy_name);
    Node& node = synthetic_nodes.emplace_back();
    node.op = "Copy";
    node.name = copy_name;
    node.inputs = {name};
    node.outputs = {copy_name};
    Step st;
    st.kind = Step::kCopy;
    st.node = &node;
    st.device = d;
    st.inputs = {id};
    st.outputs = {cid};
    st.label = fmt::format("copy '{}' {} -> {}", name, device_name(devices[w->second]),
                           device_name(devices[d]));
    out.push_back(std::move(st));
    copied.emplace(key, cid);
    where[cid] = d;
    return cid;
  };
  for (Step& st : steps) {
    for (int& id : st.inputs) id = copy_of(id, st.device);
    // Subgraphs read outer values by name, bound when they run: those values are moved then.
    for (int id : st.outputs)
      if (id >= 0) where[id] = st.device;
    out.push_back(std::move(st));
  }
  for (int& id : output_ids) id = copy_of(id, 0);
  steps = std::move(out);
  for (auto& c : alias_constants) constants.push_back(std::move(c));
  fallback_name = device_name(devices[1]);
  return OkStatus();
}

Status Executable::Impl::materialise_constants() {
  // Where each constant is read (after insert_copies, on one device each; graph outputs: the
  // target). A constant nobody reads (an unused initializer) is not materialised.
  std::vector<int> reader(values_count, -1);
  for (const Step& st : steps) {
    for (int id : st.inputs)
      if (id >= 0) reader[static_cast<size_t>(id)] = static_cast<int>(st.device);
    for (int id : st.implicit) reader[static_cast<size_t>(id)] = static_cast<int>(st.device);
  }
  for (int id : output_ids) reader[static_cast<size_t>(id)] = 0;
  for (const auto& [id, t] : constants) {
    const int d = reader[static_cast<size_t>(id)];
    if (d < 0) continue;
    Device* dev = devices[static_cast<size_t>(d)];
    if (dev->adopts_host_memory()) {
      device_constants.emplace_back(id, wrap_host(dev, t));
      continue;
    }
    std::shared_ptr<Buffer> buf;
    if (target.allocate_constant) {
      TD_ASSIGN_OR_RETURN(buf, target.allocate_constant(*dev, t->nbytes()));
    } else {
      HeapAllocator raw(dev);
      TD_ASSIGN_OR_RETURN(buf, raw.allocate(t->nbytes()));
    }
    if (t->nbytes()) TD_RETURN_IF_ERROR(dev->write(*buf, 0, t->data(), t->nbytes()));
    device_constants.emplace_back(id, DeviceTensor{t->dtype(), t->shape(), buf});
  }
  return OkStatus();
}

void Executable::Impl::run_step(const Step& step, std::vector<Result<DeviceTensor>>& values,
                                RunServices& services) {
  if (!step.error.ok()) return poison(step, step.error, values);
  switch (step.kind) {
    case Step::kRegion:
      return run_region(step, values, services);
    case Step::kCopy: {
      const auto& v = values[static_cast<size_t>(step.inputs[0])];
      if (!v.ok()) return poison(step, v.status(), values);
      auto moved = services.transfer(*v, *devices[step.device]);
      values[static_cast<size_t>(step.outputs[0])] = std::move(moved);
      return;
    }
    case Step::kKernel:
      if (step.view) {
        const auto& v = values[static_cast<size_t>(step.inputs[0])];
        if (!v.ok()) return poison(step, v.status(), values);
        const TensorType& t = step.output_types[0];
        if (v->dtype == t.dtype && shape_numel(v->shape) == shape_numel(t.shape) && v->buffer) {
          values[static_cast<size_t>(step.outputs[0])] = DeviceTensor{t.dtype, t.shape, v->buffer};
          return;
        }
      }
      return run_kernel(step, values, services);
  }
}

void Executable::Impl::run_region(const Step& step, std::vector<Result<DeviceTensor>>& values,
                                  RunServices& services) {
  Device* device = devices[step.device];
  Allocator& allocator = services.allocator(*device);
  std::vector<DeviceTensor> in(step.inputs.size());
  for (size_t k = 0; k < step.inputs.size(); ++k) {
    const auto& v = values[static_cast<size_t>(step.inputs[k])];
    if (!v.ok()) return poison(step, v.status(), values);
    in[k] = *v;
  }
  std::vector<DeviceTensor> out(step.outputs.size());
  for (size_t k = 0; k < step.outputs.size(); ++k) {
    const TensorType& t = step.output_types[k];
    auto bytes = checked_byte_size(t.dtype, t.shape);
    auto buf = bytes.ok() ? allocator.allocate(static_cast<size_t>(*bytes))
                          : Result<std::shared_ptr<Buffer>>(bytes.status());
    if (!buf.ok())
      return poison(step, Status(buf.status().code(), step.node->name + ": " + buf.status().message()),
                    values);
    out[k] = DeviceTensor{t.dtype, t.shape, *buf};
  }
  Status s;
  try {
    s = step.region->run(in, out, allocator);
  } catch (const std::exception& e) {
    s = errors::Internal("threw: {}", e.what());
  }
  if (!s.ok()) return poison(step, Status(s.code(), step.node->name + ": " + s.message()), values);
  for (size_t k = 0; k < step.outputs.size(); ++k)
    values[static_cast<size_t>(step.outputs[k])] = out[k];
}

namespace {

// Gives a kernel its subgraphs: compiled for the kernel's device, outer values bound by name.
struct StepSubgraphs final : SubgraphRunner {
  Executable::Impl* exe = nullptr;
  const Step* step = nullptr;
  std::vector<Result<DeviceTensor>>* values = nullptr;
  RunServices* services = nullptr;
  Result<std::vector<DeviceTensor>> run(const Graph& graph,
                                        const std::vector<DeviceTensor>& inputs) override {
    return exe->run_subgraph(*step, graph, inputs, *values, *services);
  }
};

}  // namespace

void Executable::Impl::run_kernel(const Step& step, std::vector<Result<DeviceTensor>>& values,
                                  RunServices& services) {
  const Node& node = *step.node;
  Device* device = devices[step.device];
  KernelCall call;
  call.node = &node;
  call.inputs.resize(step.inputs.size());
  for (size_t k = 0; k < step.inputs.size(); ++k) {
    const int id = step.inputs[k];
    if (id < 0) continue;
    const auto& v = values[static_cast<size_t>(id)];
    if (!v.ok()) return poison(step, v.status(), values);
    call.inputs[k] = *v;
  }
  for (int id : step.implicit) {
    const auto& v = values[static_cast<size_t>(id)];
    if (!v.ok()) return poison(step, v.status(), values);
  }
  call.output_types = step.output_types;
  if (!step.static_outputs) {  // data-dependent shapes: infer again with the values
    std::vector<TensorType> in_types(call.inputs.size());
    for (size_t k = 0; k < call.inputs.size(); ++k)
      if (call.inputs[k].defined()) in_types[k] = call.inputs[k].type();
    std::vector<HostTensor> host(call.inputs.size());
    std::vector<TensorView> views(call.inputs.size());
    std::vector<const TensorView*> value_ptrs(call.inputs.size(), nullptr);
    for (size_t k = 0; k < call.inputs.size(); ++k) {
      const DeviceTensor& v = call.inputs[k];
      if (!v.defined()) continue;
      if (void* p = device->host_pointer(*v.buffer)) {
        views[k] = TensorView{v.dtype, v.shape, p};
      } else if (shape_numel(v.shape) <= kMaxInferenceHostElements) {
        auto h = to_host(v);
        if (!h.ok()) return poison(step, h.status(), values);
        host[k] = std::move(h).value();
        views[k] = host[k].view();
      } else {
        continue;
      }
      value_ptrs[k] = &views[k];
    }
    InferenceContext ictx(node, std::move(in_types), value_ptrs);
    Status s = infer_node(OpRegistry::global(), ictx);
    if (!s.ok()) return poison(step, s, values);
    call.output_types = ictx.output_types();
    call.output_types.resize(node.outputs.size());
    for (size_t k = 0; k < node.outputs.size(); ++k)
      if (node.outputs[k].empty()) call.output_types[k] = TensorType{};  // omitted optional output
  }
  for (int k : step.kernel->host_inputs()) {
    if (call.host_values.size() < call.inputs.size()) call.host_values.resize(call.inputs.size());
    if (k < 0 || static_cast<size_t>(k) >= call.inputs.size() || !call.inputs[k].defined()) continue;
    auto h = to_host(call.inputs[static_cast<size_t>(k)]);
    if (!h.ok()) return poison(step, h.status(), values);
    call.host_values[static_cast<size_t>(k)] = std::move(h).value();
  }
  call.allocator = &services.allocator(*device);
  StepSubgraphs subgraphs;
  subgraphs.exe = this;
  subgraphs.step = &step;
  subgraphs.values = &values;
  subgraphs.services = &services;
  call.subgraphs = &subgraphs;
  call.outputs.resize(node.outputs.size());
  Status s;
  try {
    s = step.kernel->run(call);
  } catch (const std::exception& e) {  // a kernel bug must not take the process down
    s = errors::Internal("kernel '{}' threw: {}", step.kernel->name(), e.what());
  }
  if (s.ok()) {
    for (size_t k = 0; k < step.outputs.size(); ++k) {
      if (step.outputs[k] < 0) continue;
      const DeviceTensor& o = k < call.outputs.size() ? call.outputs[k] : DeviceTensor{};
      if (!o.defined() || !o.buffer) {
        s = errors::Internal("kernel '{}' did not produce output {}", step.kernel->name(), k);
        break;
      }
    }
  }
  if (!s.ok()) {
    if (s.message().rfind(node.op + ":", 0) != 0 && s.message().rfind(node.op + " ", 0) != 0)
      s = Status(s.code(), fmt::format("{}: {}", node.label(), s.message()));
    return poison(step, s, values);
  }
  for (size_t k = 0; k < step.outputs.size(); ++k)
    if (step.outputs[k] >= 0) values[static_cast<size_t>(step.outputs[k])] = std::move(call.outputs[k]);
}

// A subgraph attribute: compiled (once per input types and device) as a closed graph whose
// extra inputs are the values it reads from this scope.
Result<std::vector<DeviceTensor>> Executable::Impl::run_subgraph(
    const Step& step, const Graph& sub, const std::vector<DeviceTensor>& inputs,
    std::vector<Result<DeviceTensor>>& values, RunServices& services) {
  if (inputs.size() != sub.inputs.size())
    return errors::InvalidArgument("subgraph '{}' takes {} inputs, got {}", sub.name,
                                   sub.inputs.size(), inputs.size());
  const std::pair<const Graph*, size_t> where{&sub, step.device};
  // The cache entry (a std::map node: stable while the executable lives) and the outer
  // values it reads, resolved to this executable's value ids once. Per iteration of a Loop
  // nothing here allocates but `bound`.
  SubgraphForms* forms = nullptr;
  {
    std::lock_guard<std::mutex> lock(subgraph_mu);
    auto it = subgraph_cache.find(where);
    if (it == subgraph_cache.end()) {
      SubgraphForms f;
      f.refs = outer_references(sub);
      for (const auto& name : f.refs) {
        auto id = ids.find(name);
        f.ref_ids.push_back(id == ids.end() ? -1 : id->second);
      }
      it = subgraph_cache.emplace(where, std::move(f)).first;
    }
    forms = &it->second;
  }
  const std::vector<std::string>& refs = forms->refs;
  std::vector<Result<DeviceTensor>> bound;
  bound.reserve(inputs.size() + refs.size());
  for (const auto& v : inputs) bound.push_back(v);
  for (size_t r = 0; r < refs.size(); ++r) {
    const int id = forms->ref_ids[r];
    if (id < 0)
      return errors::InvalidArgument("subgraph '{}' reads '{}', which is not defined", sub.name,
                                     refs[r]);
    const auto& v = values[static_cast<size_t>(id)];
    if (!v.ok()) return explained(v.status());
    bound.push_back(*v);
  }
  Device* device = devices[step.device];
  std::shared_ptr<Executable> exe;
  {
    std::lock_guard<std::mutex> lock(subgraph_mu);
    for (const auto& [t, e] : forms->compiled) {
      bool same = t.size() == bound.size();
      for (size_t k = 0; same && k < t.size(); ++k)
        same = t[k].dtype == bound[k]->dtype && t[k].shape == bound[k]->shape;
      if (same) {
        exe = e;
        break;
      }
    }
  }
  if (!exe) {
    std::vector<TensorType> types;
    for (const auto& v : bound) types.push_back(v->type());
    Graph closed = sub;
    for (const auto& name : refs) closed.inputs.push_back({name, {}});
    for (auto& in : closed.inputs) in.type = TensorType{};  // bound by the actual values
    CompileTarget t = target;
    t.device = device;
    CompileOptions o = options;
    o.strict_device = false;  // the enclosing node was placed already
    TD_ASSIGN_OR_RETURN(auto compiled, Executable::compile(closed, types, t, o));
    exe = std::shared_ptr<Executable>(std::move(compiled));
    std::lock_guard<std::mutex> lock(subgraph_mu);
    forms->compiled.emplace_back(types, exe);
  }
  auto outs = exe->run(bound, services);
  std::vector<DeviceTensor> result;
  for (auto& o : outs) {
    if (!o.ok()) return o.status();
    result.push_back(std::move(o).value());
  }
  return result;
}

namespace {

struct GlobalProfile {
  std::mutex mu;
  std::map<std::string, ProfileRow> rows;
  std::set<std::string> reference_impls;
};

GlobalProfile& global_profile() {
  static GlobalProfile* g = new GlobalProfile;  // never destroyed: executables outlive main
  return *g;
}

std::atomic<bool> g_profiling{false};

}  // namespace

void set_profiling(bool on) { g_profiling.store(on); }

bool profiling() { return g_profiling.load() || std::getenv("TENSORD_PROFILE") != nullptr; }

void add_profile_time(const std::string& step, const std::string& kind, double seconds) {
  auto& g = global_profile();
  std::lock_guard<std::mutex> lock(g.mu);
  ProfileRow& r = g.rows[step];
  r.step = step;
  r.kind = kind;
  r.seconds += seconds;
  r.calls++;
}

void add_profile_reference_impl(const std::string& what) {
  auto& g = global_profile();
  std::lock_guard<std::mutex> lock(g.mu);
  g.reference_impls.insert(what);
}

ProfileTotals profile_totals() {
  auto& g = global_profile();
  std::lock_guard<std::mutex> lock(g.mu);
  ProfileTotals t;
  for (const auto& [name, r] : g.rows) {
    t.total_s += r.seconds;
    if (r.kind == "reference") t.reference_s += r.seconds;
    if (r.kind == "onednn-ref") t.onednn_ref_s += r.seconds;
    t.rows.push_back(r);
  }
  std::sort(t.rows.begin(), t.rows.end(),
            [](const ProfileRow& a, const ProfileRow& b) { return a.seconds > b.seconds; });
  t.onednn_ref_primitives.assign(g.reference_impls.begin(), g.reference_impls.end());
  return t;
}

void reset_profile_totals() {
  auto& g = global_profile();
  std::lock_guard<std::mutex> lock(g.mu);
  g.rows.clear();  // the ref primitives stay: they are found once per executable
}

Executable::Executable(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

int64_t Executable::held_bytes() const { return impl_->held; }
int64_t Executable::folded_bytes() const { return impl_->held_folded; }

Executable::~Executable() {
  if (!impl_->profile || impl_->profile->by_kernel.empty()) return;
  std::vector<std::pair<std::string, std::pair<double, int64_t>>> rows(
      impl_->profile->by_kernel.begin(), impl_->profile->by_kernel.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  double total = 0;
  for (const auto& r : rows) total += r.second.first;
  std::string out = fmt::format("tensord profile: {} steps, {:.3f} ms in kernels\n",
                                impl_->steps.size(), total * 1e3);
  double reference = 0, onednn_ref = 0;
  for (const auto& [name, v] : rows) {
    const std::string& kind = impl_->profile->kind[name];
    if (kind == "reference") reference += v.first;
    if (kind == "onednn-ref") onednn_ref += v.first;
    out += fmt::format("  {:>10.3f} ms {:>5.1f}% {:>8} calls  {}{}\n", v.first * 1e3,
                       total > 0 ? 100 * v.first / total : 0.0, v.second, name,
                       kind == "onednn-ref" ? " [oneDNN ref primitives]" : "");
  }
  out += fmt::format("  reference kernels {:.1f}%, regions with oneDNN ref primitives {:.1f}%\n",
                     total > 0 ? 100 * reference / total : 0.0,
                     total > 0 ? 100 * onednn_ref / total : 0.0);
  std::fputs(out.c_str(), stderr);
}

Result<std::unique_ptr<Executable>> Executable::compile(const Graph& graph,
                                                        const std::vector<TensorType>& input_types,
                                                        const CompileTarget& target,
                                                        const CompileOptions& options) {
  if (!target.device) return errors::Internal("compile: no target device");
  auto impl = std::make_unique<Impl>();
  impl->graph = graph;
  // Canonical forms of export variants (engine/canonicalize.h) for the fast path; the
  // reference kernels (fuse off, the oracle) see the graph as given.
  if (options.fuse) {
    const CanonicalizeOptions canonical = CanonicalizeOptions::from_env();
    // float16 on a cpu device runs in float32 (its float16 kernels are the reference ones).
    if (canonical.f16 && target.device->info().kind == "cpu")
      widen_float16(impl->graph, input_types);
    std::map<std::string, HostTensor> known;
    if (target.host && canonicalize_wants_constants(impl->graph, canonical)) {
      // Small shape computations folded first (inputs of at most 1024 elements each).
      Device* host = target.host;
      auto fold = [&] {
        auto types = infer_graph(
            OpRegistry::global(), impl->graph, input_types,
            [host](const Node& n,
                   const std::vector<TensorView>& in) -> Result<std::vector<HostTensor>> {
              for (const auto& v : in)
                if (shape_numel(v.shape) > 1024) return errors::Unimplemented("not small");
              return evaluate_on_host(host, n, in);
            });
        known = types.ok() ? std::move(types->constants) : std::map<std::string, HostTensor>{};
      };
      fold();
      // An If inlined gives the values after it shapes, and so may fold the condition of an
      // If further on (MViT-v1-B: three in a row): inline and fold again until none is left.
      CanonicalizeOptions ifs_only = CanonicalizeOptions::none();
      ifs_only.if_const = canonical.if_const;
      for (int round = 0; round < 16 && ifs_only.if_const; ++round) {
        if (canonicalize(impl->graph, ifs_only, &known).if_const == 0) break;
        fold();
      }
    }
    canonicalize(impl->graph, canonical, &known);
  }
  impl->target = target;
  impl->options = options;
  impl->devices = {target.device};
  if (profiling()) impl->profile = std::make_unique<Impl::Profile>();
  TD_RETURN_IF_ERROR(impl->build(input_types, /*fold_constants=*/true));
  impl->plan_replay(input_types);
  return std::unique_ptr<Executable>(new Executable(std::move(impl)));
}

namespace {

// Keeps every buffer a recorded run allocates on the target (a replay writes them again).
class HoldingAllocator final : public Allocator {
 public:
  HoldingAllocator(Allocator& base, std::vector<std::shared_ptr<Buffer>>* held) : base_(base), held_(held) {}
  Result<std::shared_ptr<Buffer>> allocate(size_t bytes) override {
    auto b = base_.allocate(bytes);
    if (b.ok()) held_->push_back(*b);
    return b;
  }

 private:
  Allocator& base_;
  std::vector<std::shared_ptr<Buffer>>* held_;
};

class HoldingServices final : public RunServices {
 public:
  HoldingServices(RunServices& base, Device* target, std::vector<std::shared_ptr<Buffer>>* held)
      : base_(base), target_(target), alloc_(base.allocator(*target), held) {}
  Allocator& allocator(Device& device) override { return &device == target_ ? alloc_ : base_.allocator(device); }
  Result<DeviceTensor> transfer(const DeviceTensor& value, Device& dst) override {
    return base_.transfer(value, dst);
  }

 private:
  RunServices& base_;
  Device* target_;
  HoldingAllocator alloc_;
};

// A copy of `t` in a new buffer of `alloc` on the same device (nullopt-like error when the
// device cannot copy within itself).
Result<DeviceTensor> device_copy(const DeviceTensor& t, Allocator& alloc) {
  TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(t.dtype, t.shape));
  TD_ASSIGN_OR_RETURN(auto buf, alloc.allocate(static_cast<size_t>(bytes)));
  if (bytes > 0) {
    Buffer src = *t.buffer;
    src.size = static_cast<size_t>(bytes);
    if (!buf->device->copy_from(*buf, src)) return errors::Internal("a device copy within {} failed", device_name(buf->device));
  }
  return DeviceTensor{t.dtype, t.shape, buf};
}

}  // namespace

void Executable::Impl::plan_replay(const std::vector<TensorType>& input_types) {
  if (profile || devices.size() != 1 || steps.empty()) return;
  for (const auto& t : input_types)
    if (!shape_is_static(t.shape)) return;
  for (const Step& st : steps) {
    if (st.kind == Step::kCopy || st.device != 0 || st.fallback || !st.error.ok() || !st.static_outputs ||
        !st.implicit.empty())
      return;
    if (st.kind == Step::kKernel && (!st.kernel || !st.kernel->host_inputs().empty())) return;
    if (st.node && (st.node->op == "If" || st.node->op == "Loop" || st.node->op == "Scan")) return;
  }
  for (const auto& t : output_types)
    if (!t.ok() || !shape_is_static(t->shape)) return;
  replay = std::make_unique<Replay>();
}

bool Executable::Impl::run_replayed(const std::vector<Result<DeviceTensor>>& inputs, RunServices& services,
                                    std::vector<Result<DeviceTensor>>* outs) {
  Replay& r = *replay;
  std::unique_lock<std::mutex> lock(r.mu, std::try_to_lock);
  if (!lock.owns_lock() || r.off) return false;
  Device* target = devices[0];
  if (inputs.size() != input_ids.size()) return false;
  for (const auto& in : inputs)
    if (!in.ok() || !in->buffer || in->buffer->device != target) return false;
  if (Status c = run_checkpoint(); !c.ok()) return false;  // the plain run reports it
  auto give_up = [&] {
    r.off = true;
    r.recorder.reset();
    r.held.clear();
    r.inputs.clear();
    r.outputs.clear();
    return false;
  };
  if (!r.recorder) {
    if (r.plain_runs++ == 0) return false;  // first run: plain
    r.recorder = target->run_recorder();
    if (!r.recorder) return give_up();
    // The held inputs: this run's values, copied before the recording (they are not part of it).
    HoldingAllocator hold(services.allocator(*target), &r.held);
    for (const auto& in : inputs) {
      auto c = device_copy(*in, hold);
      if (!c.ok()) return give_up();
      r.inputs.push_back(*c);
    }
    std::vector<Result<DeviceTensor>> bound(r.inputs.begin(), r.inputs.end());
    HoldingServices hs(services, target, &r.held);
    if (!r.recorder->begin().ok()) return give_up();
    auto recorded = run_steps(bound, hs);
    const Status ended = r.recorder->end();
    if (!ended.ok()) {
      log::warn(fmt::format("{}: whole-run replay off, running step by step: {}", device_name(target), ended.message()));
      return give_up();
    }
    for (auto& o : recorded) {
      if (!o.ok() || !o->buffer || o->buffer->device != target) return give_up();
      r.held.push_back(o->buffer);
      r.outputs.push_back(*o);
    }
  } else {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const DeviceTensor& held = r.inputs[i];
      if (inputs[i]->dtype != held.dtype || inputs[i]->shape != held.shape) return false;
      Buffer src = *inputs[i]->buffer;
      src.size = held.buffer->size;
      if (held.buffer->size && !target->copy_from(*held.buffer, src)) return false;
    }
  }
  if (!r.recorder->replay().ok()) return give_up();
  outs->clear();
  for (const auto& o : r.outputs) outs->push_back(device_copy(o, services.allocator(*target)));
  return true;
}

const std::vector<Result<TensorType>>& Executable::output_types() const {
  return impl_->output_types;
}

const std::vector<Fallback>& Executable::fallbacks() const { return impl_->fallbacks; }

const std::string& Executable::fallback_device() const { return impl_->fallback_name; }

std::string Executable::describe() const {
  const Impl& x = *impl_;
  std::string out;
  const bool many = x.devices.size() > 1;
  for (const Step& st : x.steps) {
    const std::string where = many ? device_name(x.devices[st.device]) + " " : std::string();
    switch (st.kind) {
      case Step::kRegion:
        out += (many ? "[" + device_name(x.devices[st.device]) + "] " : std::string()) +
               st.node->name + "\n";
        if (st.region)
          for (const auto& r : st.region->reference_impls())
            out += "  oneDNN reference primitive: " + r + "\n";
        break;
      case Step::kCopy:
        out += st.label + "\n";
        break;
      case Step::kKernel:
        out += fmt::format("{} '{}' [{}{}]{}\n", st.node->op, st.node->name, where,
                           st.kernel ? st.kernel->name() : st.error.message(),
                           st.fallback ? " (fallback)" : "");
        break;
    }
  }
  for (const auto& f : x.fallbacks)
    out += fmt::format("fallback: {} '{}' on {}: {}\n", f.op, f.node,
                       device_name(x.devices.size() > 1 ? x.devices[1] : nullptr), f.why);
  for (const auto& n : x.notes) out += "note: " + n + "\n";
  return out;
}

std::vector<Result<DeviceTensor>> Executable::run(const std::vector<Result<DeviceTensor>>& inputs,
                                                  RunServices& services) {
  Impl& x = *impl_;
  std::vector<Result<DeviceTensor>> outs;
  if (!x.replay || !x.run_replayed(inputs, services, &outs)) outs = x.run_steps(inputs, services);
  // An asynchronous device (OpenCL, CUDA) has only queued the work: the outputs are ready when
  // it has finished, and an error found then is every output's.
  if (Status s = x.devices[0]->synchronize(); !s.ok())
    for (auto& o : outs)
      if (o.ok()) o = s;
  return outs;
}

std::vector<Result<DeviceTensor>> Executable::Impl::run_steps(const std::vector<Result<DeviceTensor>>& inputs,
                                                              RunServices& services) {
  Impl& x = *this;
  std::vector<Result<DeviceTensor>> values(x.values_count,
                                           Result<DeviceTensor>(never_produced()));
  Device* target = x.devices[0];
  for (size_t i = 0; i < x.input_ids.size() && i < inputs.size(); ++i) {
    const auto& in = inputs[i];
    // A value bound from elsewhere (a subgraph reading an outer value placed on another
    // device) is moved here first.
    if (in.ok() && in->buffer && in->buffer->device && in->buffer->device != target)
      values[static_cast<size_t>(x.input_ids[i])] = services.transfer(*in, *target);
    else
      values[static_cast<size_t>(x.input_ids[i])] = in;
  }
  for (const auto& [id, t] : x.device_constants) values[static_cast<size_t>(id)] = t;
  for (size_t s = 0; s < x.steps.size(); ++s) {
    const Step& st = x.steps[s];
    // Cancelled, past its deadline or preempted: stop here, every output gets the reason.
    if (Status c = run_checkpoint(); !c.ok())
      return std::vector<Result<DeviceTensor>>(x.output_ids.size(), Result<DeviceTensor>(c));
    if (x.profile) {
      const auto t0 = std::chrono::steady_clock::now();
      x.run_step(st, values, services);
      const auto t1 = std::chrono::steady_clock::now();
      const std::string name =
          st.kind == Step::kRegion ? st.node->name
          : st.kind == Step::kCopy ? st.label
          : st.view                ? st.node->op + " [view]"
                                   : st.node->op + " [" + (st.kernel ? st.kernel->name() : "-") + "]";
      const double dt = std::chrono::duration<double>(t1 - t0).count();
      std::lock_guard<std::mutex> lock(x.profile->mu);
      auto& p = x.profile->by_kernel[name];
      auto kind = x.profile->kind.find(name);
      if (kind == x.profile->kind.end()) {
        std::vector<std::string> refs;
        if (st.kind == Step::kRegion && st.region) refs = st.region->reference_impls();
        const std::string k = st.kind == Step::kKernel && st.kernel && !st.view &&
                                      st.kernel->name() == "reference"
                                  ? "reference"
                              : refs.empty() ? ""
                                             : "onednn-ref";
        kind = x.profile->kind.emplace(name, k).first;
        for (const auto& r : refs) add_profile_reference_impl(name + ": " + r);
      }
      p.first += dt;
      p.second++;
      add_profile_time(name, kind->second, dt);
    } else {
      x.run_step(st, values, services);
    }
    auto free_if_last = [&](int id) {
      if (id >= 0 && x.last_use[static_cast<size_t>(id)] == static_cast<int>(s))
        values[static_cast<size_t>(id)] = value_freed();
    };
    for (int id : st.inputs) free_if_last(id);
    for (int id : st.implicit) free_if_last(id);
  }
  std::vector<Result<DeviceTensor>> outs;
  outs.reserve(x.output_ids.size());
  for (int id : x.output_ids) {
    const auto& v = values[static_cast<size_t>(id)];
    outs.push_back(v.ok() ? v : Result<DeviceTensor>(explained(v.status())));
  }
  return outs;
}

namespace {

// The first cpu device of this build, private to the caller (tests, tools).
Result<std::unique_ptr<Device>> private_host_device() {
  for (auto& backend : create_backends()) {
    if (backend->name() != "cpu") continue;
    auto devices = backend->enumerate();
    if (!devices.empty()) return std::move(devices.front());
  }
  return errors::Internal("this build has no cpu device");
}

}  // namespace

Result<std::string> describe_compiled(const Graph& graph, const std::vector<TensorType>& types,
                                      const CompileOptions& options) {
  TD_ASSIGN_OR_RETURN(auto device, private_host_device());
  CompileTarget t;
  t.device = device.get();
  t.host = device.get();
  TD_ASSIGN_OR_RETURN(auto exe, Executable::compile(graph, types, t, options));
  return exe->describe();
}

Result<std::vector<Result<HostTensor>>> run_graph_on_host(const Graph& graph,
                                                          const std::vector<HostTensor>& inputs,
                                                          const CompileOptions& options) {
  TD_ASSIGN_OR_RETURN(auto device, private_host_device());
  std::vector<TensorType> types;
  std::vector<Result<DeviceTensor>> dev_inputs;
  for (const auto& t : inputs) {
    types.push_back(t.type());
    dev_inputs.push_back(wrap_host(device.get(), std::make_shared<const HostTensor>(t)));
  }
  CompileTarget target;
  target.device = device.get();
  target.host = device.get();
  TD_ASSIGN_OR_RETURN(auto exe, Executable::compile(graph, types, target, options));
  HostServices services;
  auto outs = exe->run(dev_inputs, services);
  std::vector<Result<HostTensor>> result;
  for (auto& o : outs) {
    if (!o.ok()) {
      result.emplace_back(o.status());
      continue;
    }
    result.push_back(to_host(*o));
  }
  return result;
}

}  // namespace tensord
