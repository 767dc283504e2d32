// The cpu backend's Linear layers (linear_layers.h): a MatMul or Gemm by constant weights, or
// a batched product of two activations, with what only its result feeds as oneDNN post-ops.
#include "backends/cpu/linear_layers.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "backends/cpu/onednn_common.h"
#include "backends/cpu/onednn_ops.h"
#include "backends/cpu/thread_pool.h"
#include "core/env.h"
#include "core/errors.h"
#include "core/graph_utils.h"
#include "core/node_attrs.h"
#include "core/op_registry.h"
#include "core/ops/op_helpers.h"

namespace tensord::cpu {
namespace {

using namespace dnnl_names;

// ---- Linear layers: MatMul by constant weights on activations of any rank ----

// One step after a Linear layer's MatMul, applied to its [M, N] result as a oneDNN post-op.
struct LinearStep {
  enum Kind { kEltwise, kConstColumns, kResidual } kind = kEltwise;
  Eltwise eltwise;              // kEltwise
  Alg binary = Alg::binary_add;  // kConstColumns: add or mul by N values (or one, broadcast)
  std::vector<float> columns;   // kConstColumns: N values, or the values of `shape`
  // kConstColumns of a constant of another shape broadcasting onto the result (an attention
  // mask [T, T] over [B, H, T, T]): its shape with leading 1s to the result's rank.
  Shape shape;
  std::string residual;         // kResidual: a value of the result's shape, added

  static LinearStep activation(Eltwise e) {
    LinearStep s;
    s.eltwise = e;
    return s;
  }
};

// A Linear layer: the MatMul, then the ops only its result (and each later step's) feeds, as
// post-ops; `members` are node indices in topological order, `result` the last value.
struct LinearPlan {
  std::vector<size_t> members;
  std::vector<float> bias;  // oneDNN's bias: the first Add of N constant values, or empty
  std::vector<LinearStep> steps;
  int64_t m = 0, k = 0, n = 0;
  // A Gemm's constant B: stored [N, K] (transB), and alpha, folded into the weights once.
  bool w_transposed = false;
  float alpha = 1.0f;
  std::string src, result;
  // A batched product of two activations (attention's Q K^T and P V): B is the value
  // `weights` (read through its last two axes swapped when `b_transposed`: an absorbed
  // Transpose), and the shapes are kept whole, not folded to [M, K].
  std::string weights;
  bool b_transposed = false;
  Shape a_shape, b_shape, out_shape;
};

// The constant float32 values of input `i` of `node` when they are one value, or N values
// along the last axis only (shape [..., 1, N]); empty otherwise.
std::vector<float> column_constant(const FusionGraph& g, const Node& node, size_t i, int64_t n,
                                   size_t out_rank) {
  const HostTensor* c = i < node.inputs.size() ? g.constant(node.inputs[i]) : nullptr;
  if (!c || c->dtype() != DType::kFloat32 || c->shape().size() > out_rank) return {};
  const Shape& s = c->shape();
  for (size_t d = 0; d + 1 < s.size(); ++d)
    if (s[d] != 1) return {};
  if (c->numel() == 1) return std::vector<float>(static_cast<size_t>(n), scalar_of(*c));
  if (c->numel() != n) return {};
  return std::vector<float>(c->data<float>(), c->data<float>() + n);
}

class LinearMatcher {
 public:
  explicit LinearMatcher(const FusionGraph& g) : g_(g) {}

  // The Linear layer headed by node `i` (a MatMul of a static float32 activation of rank >= 2
  // by constant [K, N] float32 weights), or nullopt; `taken[j]`: node j is in another group.
  std::optional<LinearPlan> match(size_t i, const std::vector<bool>& taken) {
    const Node& mm = *g_.nodes[i];
    if (mm.op == "Gemm") return match_gemm(i, taken);
    if (mm.op != "MatMul" || taken[i] || mm.inputs.size() != 2 || mm.outputs.size() != 1 ||
        (!mm.domain.empty() && mm.domain != "ai.onnx"))
      return std::nullopt;
    const TensorType* a = g_.type_of(mm.inputs[0]);
    const TensorType* y = g_.type_of(mm.outputs[0]);
    const HostTensor* w = g_.constant(mm.inputs[1]);
    if (!a || a->dtype != DType::kFloat32 || a->shape.size() < 2 || !shape_is_static(a->shape) ||
        !y || !shape_is_static(y->shape) || y->shape.size() != a->shape.size() ||
        g_.constant(mm.inputs[0]))
      return std::nullopt;
    LinearPlan p;
    p.members = {i};
    if (w) {
      if (w->dtype() != DType::kFloat32 || w->shape().size() != 2 ||
          w->shape()[0] != a->shape.back())
        return std::nullopt;
      p.k = w->shape()[0];
      p.n = w->shape()[1];
    } else if (!batched_operand(mm, *a, taken, &p)) {
      return std::nullopt;
    }
    p.m = 1;
    for (size_t d = 0; d + 1 < a->shape.size(); ++d) p.m *= a->shape[d];
    if (p.m == 0 || p.k == 0 || p.n == 0) return std::nullopt;
    // The result must be A's leading axes and N (what the matmul writes), whatever inference said.
    Shape want = a->shape;
    want.back() = p.n;
    if (y->shape != want || y->dtype != DType::kFloat32) return std::nullopt;
    p.src = same_bytes_source(mm.inputs[0], taken, &p.members);
    p.a_shape = a->shape;
    p.out_shape = y->shape;
    return follow(std::move(p), i, taken);
  }

 private:
  // A Gemm of a static float32 [M, K] activation (transA 0) by constant float32 weights, with
  // C absent or constant [N] / [1, N] / one value: the same Linear layer, C * beta its bias.
  std::optional<LinearPlan> match_gemm(size_t i, const std::vector<bool>& taken) {
    const Node& gm = *g_.nodes[i];
    if (taken[i] || gm.inputs.size() < 2 || gm.inputs.size() > 3 || gm.outputs.size() != 1 ||
        (!gm.domain.empty() && gm.domain != "ai.onnx"))
      return std::nullopt;
    NodeAttrs attrs(gm);
    auto trans_a = attrs.attr_int("transA", 0);
    auto trans_b = attrs.attr_int("transB", 0);
    auto alpha = attrs.attr_float("alpha", 1.0f);
    auto beta = attrs.attr_float("beta", 1.0f);
    if (!trans_a.ok() || !trans_b.ok() || !alpha.ok() || !beta.ok() || *trans_a != 0 ||
        !std::isfinite(*alpha))
      return std::nullopt;
    const TensorType* a = g_.type_of(gm.inputs[0]);
    const TensorType* y = g_.type_of(gm.outputs[0]);
    const HostTensor* w = g_.constant(gm.inputs[1]);
    if (!a || a->dtype != DType::kFloat32 || a->shape.size() != 2 || !shape_is_static(a->shape) ||
        g_.constant(gm.inputs[0]) || !w || w->dtype() != DType::kFloat32 ||
        w->shape().size() != 2 || !y || y->dtype != DType::kFloat32)
      return std::nullopt;
    LinearPlan p;
    p.members = {i};
    p.w_transposed = *trans_b != 0;
    p.alpha = *alpha;
    p.k = w->shape()[p.w_transposed ? 1 : 0];
    p.n = w->shape()[p.w_transposed ? 0 : 1];
    p.m = a->shape[0];
    if (p.k != a->shape[1] || p.m == 0 || p.k == 0 || p.n == 0 ||
        y->shape != Shape{p.m, p.n})
      return std::nullopt;
    if (gm.inputs.size() == 3 && !gm.inputs[2].empty() && *beta != 0.0f) {
      p.bias = column_constant(g_, gm, 2, p.n, 2);
      if (p.bias.empty()) return std::nullopt;  // C of another shape, or computed
      for (float& c : p.bias) c *= *beta;
    }
    p.src = gm.inputs[0];
    p.a_shape = a->shape;
    p.out_shape = y->shape;
    return follow(std::move(p), i, taken);
  }

  // The steps after product node `i`, from the epilogue the engine tagged
  // (FusionGraph::epilogue_of): activations, constant columns, a residual (see match).
  std::optional<LinearPlan> follow(LinearPlan p, size_t i, const std::vector<bool>& taken) {
    const Shape out_shape = p.out_shape;
    std::string v = g_.nodes[i]->outputs[0];
    for (const EpilogueStep& step : g_.epilogue_of(i)) {
      // One node a step, not in another group, on the product's result (its type and shape).
      if (step.kind == EpilogueStep::Kind::kSwish || step.input != v || taken[step.nodes[0]])
        break;
      const size_t before = p.members.size();
      p.members.push_back(step.nodes[0]);
      const Node* r = step.node;
      const std::string& op = r->op;
      const int vi = step.kind == EpilogueStep::Kind::kBinary && step.operand_first ? 1 : 0;
      const std::string& other = step.operand;
      bool ok = false;
      if (step.kind == EpilogueStep::Kind::kActivation && is_unary_eltwise(op)) {
        auto steps = eltwise_steps(*r, g_);
        if (steps.ok()) {
          for (const auto& e : *steps) p.steps.push_back(LinearStep::activation(e));
          ok = true;
        }
      } else if (step.kind == EpilogueStep::Kind::kBinary &&
                 (op == "Add" || op == "Mul" || ((op == "Sub" || op == "Div") && vi == 0))) {
        std::vector<float> cols = column_constant(g_, *r, static_cast<size_t>(1 - vi), p.n,
                                                  out_shape.size());
        if (!cols.empty()) {
          if (op == "Sub")
            for (float& c : cols) c = -c;
          if (op == "Div")
            for (float& c : cols) c = 1.0f / c;
          const Alg alg = op == "Add" || op == "Sub" ? Alg::binary_add : Alg::binary_mul;
          if (alg == Alg::binary_add && p.steps.empty() && p.bias.empty()) {
            p.bias = std::move(cols);
          } else {
            LinearStep s;
            s.kind = LinearStep::kConstColumns;
            s.binary = alg;
            s.columns = std::move(cols);
            p.steps.push_back(std::move(s));
          }
          ok = true;
        } else if (allow_broadcast_constants_ && (op == "Add" || op == "Mul") &&
                   !p.weights.empty()) {
          // A batched product's constant operand of another broadcast shape (a mask).
          const HostTensor* c = g_.constant(other);
          if (c && c->dtype() == DType::kFloat32 && c->shape().size() <= out_shape.size()) {
            Shape cs(out_shape.size() - c->shape().size(), 1);
            cs.insert(cs.end(), c->shape().begin(), c->shape().end());
            bool fits = true;
            for (size_t d = 0; d < cs.size(); ++d) fits &= cs[d] == 1 || cs[d] == out_shape[d];
            if (fits) {
              LinearStep s;
              s.kind = LinearStep::kConstColumns;
              s.binary = op == "Add" ? Alg::binary_add : Alg::binary_mul;
              s.columns.assign(c->data<float>(), c->data<float>() + c->numel());
              s.shape = cs;
              p.steps.push_back(std::move(s));
              ok = true;
            }
          }
        } else if (op == "Add" && !g_.constant(other)) {
          // A residual of the result's shape: it must not be computed from this layer.
          const TensorType* t = g_.type_of(other);
          const int64_t pr = g_.producer_of(other);
          const bool inside = pr >= 0 && std::find(p.members.begin(), p.members.end(),
                                                   static_cast<size_t>(pr)) != p.members.end();
          if (t && t->dtype == DType::kFloat32 && t->shape == out_shape && !inside) {
            LinearStep s;
            s.kind = LinearStep::kResidual;
            s.residual = other;
            p.steps.push_back(std::move(s));
            ok = true;
          }
        }
      }
      if (!ok) {
        p.members.resize(before);
        break;
      }
      v = r->outputs[0];
    }
    p.result = v;
    std::sort(p.members.begin(), p.members.end());
    return p;
  }

  // B of a MatMul of two activations: static float32, the same rank as A (>= 3) and the same
  // leading (batch) axes, no broadcasting. A Transpose swapping B's last two axes that only
  // this MatMul reads is absorbed (B read through strides). Fills p's batched fields.
  bool batched_operand(const Node& mm, const TensorType& a, const std::vector<bool>& taken,
                       LinearPlan* p) {
    const TensorType* b = g_.type_of(mm.inputs[1]);
    const size_t rank = a.shape.size();
    if (!b || b->dtype != DType::kFloat32 || !shape_is_static(b->shape) || rank < 3 ||
        b->shape.size() != rank || b->shape[rank - 2] != a.shape[rank - 1])
      return false;
    for (size_t d = 0; d + 2 < rank; ++d)
      if (a.shape[d] != b->shape[d]) return false;
    p->weights = mm.inputs[1];
    p->b_shape = b->shape;
    p->k = b->shape[rank - 2];
    p->n = b->shape[rank - 1];
    const int64_t pr = g_.producer_of(mm.inputs[1]);
    if (pr >= 0 && !taken[static_cast<size_t>(pr)] && g_.sole_reader(mm.inputs[1])) {
      const Node& t = *g_.nodes[static_cast<size_t>(pr)];
      auto perm = NodeAttrs(t).attr_ints("perm");
      std::vector<int64_t> swap(rank);
      for (size_t d = 0; d < rank; ++d) swap[d] = static_cast<int64_t>(d);
      std::swap(swap[rank - 1], swap[rank - 2]);
      if (t.op == "Transpose" && (t.domain.empty() || t.domain == "ai.onnx") && perm.ok() &&
          *perm == swap && t.inputs.size() == 1 && !g_.constant(t.inputs[0])) {
        p->weights = t.inputs[0];
        p->b_transposed = true;
        p->members.insert(p->members.begin(), static_cast<size_t>(pr));
      }
    }
    p->weights = same_bytes_source(p->weights, taken, &p->members);
    return true;
  }

  // The value whose bytes `v` is: through Reshape, Flatten, Squeeze, Unsqueeze and Identity
  // (row-major, the same bytes under another shape) that only the product reads, each added
  // to `members`. The product reads that value's buffer with its own view of the shape.
  std::string same_bytes_source(std::string v, const std::vector<bool>& taken,
                                std::vector<size_t>* members) {
    for (int guard = 0; guard < 8; ++guard) {
      const int64_t pr = g_.producer_of(v);
      if (pr < 0 || taken[static_cast<size_t>(pr)] || !g_.sole_reader(v)) break;
      const Node& n = *g_.nodes[static_cast<size_t>(pr)];
      const bool shape_op = n.op == "Reshape" || n.op == "Flatten" || n.op == "Squeeze" ||
                            n.op == "Unsqueeze" || n.op == "Identity";
      if (!shape_op || (!n.domain.empty() && n.domain != "ai.onnx") || n.inputs.empty() ||
          n.outputs.size() != 1 || g_.constant(n.inputs[0]))
        break;
      // Its other inputs (a shape, axes) must be constants: the group reads only the data.
      bool constant_rest = true;
      for (size_t i = 1; i < n.inputs.size(); ++i)
        constant_rest &= n.inputs[i].empty() || g_.constant(n.inputs[i]) != nullptr;
      const TensorType* in = g_.type_of(n.inputs[0]);
      const TensorType* out = g_.type_of(v);
      if (!constant_rest || !in || !out || in->dtype != DType::kFloat32 ||
          !shape_is_static(in->shape) || !shape_is_static(out->shape) ||
          shape_numel(in->shape) != shape_numel(out->shape))
        break;
      members->push_back(static_cast<size_t>(pr));
      v = n.inputs[0];
    }
    return v;
  }

  const FusionGraph& g_;

 public:
  // Whether a batched product may take a constant of any broadcast shape as a post-op (off
  // for a second try where oneDNN refused that broadcast).
  bool allow_broadcast_constants_ = true;
};

// A compiled Linear layer: one oneDNN matmul [M, K] x [K, N] with weights reordered once into
// the layout it wants, the bias and the steps as post-ops. Inputs: the activation and any
// residual, by name (Region::inputs order).
class LinearKernel final : public FusedKernel {
 public:
  Status run_host(const std::vector<TensorView>& inputs,
                  const std::vector<MutableTensorView>& outputs, Allocator&) override {
    if (outputs.size() != 1) return errors::Internal("Linear: {} outputs", outputs.size());
    std::unordered_map<int, memory> args = args_;
    args[DNNL_ARG_SRC] = memory(src_md_, cpu_engine(), const_cast<void*>(inputs.at(src_).data));
    args[DNNL_ARG_DST] = memory(dst_md_, cpu_engine(), outputs[0].data);
    if (weights_)
      args[DNNL_ARG_WEIGHTS] =
          memory(wei_md_, cpu_engine(), const_cast<void*>(inputs.at(*weights_).data));
    for (const auto& [arg, input] : residual_args_)
      args[arg] = memory(dst_md_, cpu_engine(), const_cast<void*>(inputs.at(input).data));
    try {
      execute(args);
    } catch (const dnnl::error& e) {
      return errors::Internal("Linear layer failed in oneDNN: {}", e.what());
    }
    return OkStatus();
  }
  void execute(const std::unordered_map<int, memory>& args) {
    if (choice_.load(std::memory_order_acquire) >= 0) return run(serial_, args);
    std::unique_lock<std::mutex> lock(trial_mu_, std::try_to_lock);
    if (!lock.owns_lock() || choice_.load() >= 0) return run(serial_, args);
    // A trial: alternate the two, best of kTrials / 2 each after one warm-up run apiece.
    constexpr int kTrials = 10;
    const bool serial = trials_ % 2 == 1;
    const auto t0 = std::chrono::steady_clock::now();
    run(serial, args);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (trials_ >= 2) best_[serial] = std::min(best_[serial], t);
    if (++trials_ >= kTrials) {
      serial_ = best_[1] < best_[0];
      choice_.store(serial_ ? 1 : 0, std::memory_order_release);
    }
  }
  // The serial primitive runs inline on this thread (as a region's serial ops). Scratchpads
  // are the caller's (scratchpad_mode::user), from a buffer of the calling thread: sessions
  // share a compiled executable, and one primitive executed by two threads at once with
  // oneDNN's own per-primitive scratchpad read back wrong values (1 run in 160, four sessions).
  void run(bool serial, const std::unordered_map<int, memory>& args) {
    TeamLimit limit(serial ? 1 : 0);
    const memory::desc& scratch = serial ? serial_scratch_md_ : scratch_md_;
    const size_t bytes = scratch.get_size();
    if (bytes == 0) {
      (serial ? serial_prim_ : prim_).execute(cpu_stream(), args);
    } else {
      std::unordered_map<int, memory> with = args;
      with[DNNL_ARG_SCRATCHPAD] = memory(scratch, cpu_engine(), thread_scratch(bytes));
      (serial ? serial_prim_ : prim_).execute(cpu_stream(), with);
    }
    cpu_stream().wait();
  }
  // A 64-byte aligned buffer of at least `bytes`, this thread's (kept for its next run).
  static void* thread_scratch(size_t bytes) {
    thread_local std::unique_ptr<uint8_t[]> buffer;
    thread_local size_t size = 0;
    if (size < bytes + 64) {
      size = bytes + 64;
      buffer.reset(new uint8_t[size]);
    }
    const uintptr_t at = reinterpret_cast<uintptr_t>(buffer.get());
    return reinterpret_cast<void*>((at + 63) & ~uintptr_t{63});
  }
  std::string describe() const override {
    const int c = choice_.load(std::memory_order_acquire);
    return describe_ + (c == 1 ? ", one thread" : c < 0 ? ", threads measured at run time" : "");
  }
  int64_t arena_bytes() const override { return 0; }
  int64_t weight_bytes() const override { return weight_bytes_; }
  std::vector<std::string> reference_impls() const override {
    std::vector<std::string> out;
    for (const dnnl::primitive* p : {&prim_, &serial_prim_})
      if (const std::string impl = impl_of(*p); is_reference(impl))
        out.push_back("matmul (" + impl + ")");
    return out;
  }

  dnnl::primitive prim_;         // for the team
  dnnl::primitive serial_prim_;  // for one thread (small products; see choose_threads)
  memory::desc scratch_md_, serial_scratch_md_;  // their scratchpads (empty: none)
  bool serial_ = false;          // runs serial_prim_ (once choice_ is set)
  std::atomic<int> choice_{0};   // 0 the team, 1 one thread, -1 still measuring
  std::mutex trial_mu_;
  int trials_ = 0;
  double best_[2] = {1e30, 1e30};
  memory::desc src_md_, dst_md_, wei_md_;
  size_t src_ = 0;
  std::optional<size_t> weights_;  // B as an input (a batched product)
  std::vector<std::pair<int, size_t>> residual_args_;  // post-op argument -> input index
  std::unordered_map<int, memory> args_;              // weights, bias, constant columns
  int64_t weight_bytes_ = 0;
  bool padded_rows_ = false;     // weights stored with rows 16 floats longer (compile_linear)
  std::string describe_;
};

// One thread or the team for a compiled Linear layer `k` (`macs` multiply-adds a run): below
// serial_work_limit() one thread, as in regions; up to kMeasuredWork both primitives are kept
// and the first runs measure which is faster here (an OpenMP fork and join can cost more than
// splitting a small product saves, the more so on busy cores); above, the team. Measured on
// the running thread, where the runs happen.
constexpr double kMeasuredWork = 4e6;

void choose_threads(LinearKernel& k, const dnnl::matmul::desc& desc,
                    const dnnl::primitive_attr& attr, const dnnl::matmul::primitive_desc& pd,
                    double macs) {
  if (threads_available() <= 1 || macs >= kMeasuredWork) return;
  try {
    TeamLimit one(1);
    dnnl::matmul::primitive_desc pd1(desc, attr, cpu_engine());
    if (pd1.weights_desc() == pd.weights_desc() && pd1.src_desc() == pd.src_desc() &&
        pd1.dst_desc() == pd.dst_desc()) {
      k.serial_prim_ = dnnl::matmul(pd1);
      k.serial_scratch_md_ = pd1.scratchpad_desc();
    }
  } catch (const dnnl::error&) {
  }
  if (!k.serial_prim_) return;
  if (macs < serial_work_limit()) {
    k.prim_ = k.serial_prim_;
    k.scratch_md_ = k.serial_scratch_md_;
    k.serial_ = true;
    k.choice_ = 1;
  } else {
    k.choice_ = -1;  // measured by the first runs
  }
}

Result<std::unique_ptr<FusedKernel>> compile_linear(const FusionGraph& g, const LinearPlan& p,
                                                    const FusedGroup& r) {
  if (r.outputs.size() != 1 || r.outputs[0] != p.result)
    return errors::Unimplemented("Linear layer '{}': its result is not its only output",
                                 g.nodes[p.members[0]]->name);
  auto input_index = [&](const std::string& v) -> std::optional<size_t> {
    for (size_t i = 0; i < r.inputs.size(); ++i)
      if (r.inputs[i] == v) return i;
    return std::nullopt;
  };
  auto k = std::make_unique<LinearKernel>();
  auto src = input_index(p.src);
  if (!src) return errors::Internal("Linear layer: '{}' is not an input", p.src);
  k->src_ = *src;
  // Row-major, or (swap_last) the bytes of the shape with its last two axes swapped.
  auto plain = [](const Shape& s, bool swap_last = false) {
    Shape t = s;
    if (swap_last) std::swap(t[t.size() - 1], t[t.size() - 2]);
    memory::dims st(t.size(), 1);
    for (size_t i = t.size(); i-- > 1;) st[i - 1] = st[i] * std::max<int64_t>(t[i], 1);
    if (swap_last) std::swap(st[st.size() - 1], st[st.size() - 2]);
    return memory::desc(memory::dims(s.begin(), s.end()), DT::f32, st);
  };
  auto text = [](const Shape& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out;
  };
  const bool batched = !p.weights.empty();
  k->src_md_ = batched ? plain(p.a_shape) : memory::desc({p.m, p.k}, DT::f32, Tag::ab);
  k->dst_md_ = batched ? plain(p.out_shape) : memory::desc({p.m, p.n}, DT::f32, Tag::ab);
  Shape row(batched ? p.out_shape.size() : 2, 1);
  row.back() = p.n;
  const memory::desc row_md = plain(row);
  dnnl::post_ops post;
  std::vector<std::pair<int, const LinearStep*>> columns;
  std::string what;
  for (const LinearStep& s : p.steps) {
    const int at = post.len();
    if (s.kind == LinearStep::kEltwise) {
      post.append_eltwise(1.0f, s.eltwise.alg, s.eltwise.alpha, s.eltwise.beta);
      what += s.eltwise.alg == Alg::eltwise_gelu_erf ? " + gelu" : " + eltwise";
    } else if (s.kind == LinearStep::kConstColumns) {
      post.append_binary(s.binary, s.shape.empty() ? row_md : plain(s.shape));
      columns.emplace_back(DNNL_ARG_ATTR_MULTIPLE_POST_OP(at) | DNNL_ARG_SRC_1, &s);
      what += s.binary == Alg::binary_add ? " + add" : " + mul";
    } else {
      post.append_binary(Alg::binary_add, k->dst_md_);
      auto in = input_index(s.residual);
      if (!in) return errors::Internal("Linear layer: '{}' is not an input", s.residual);
      k->residual_args_.emplace_back(DNNL_ARG_ATTR_MULTIPLE_POST_OP(at) | DNNL_ARG_SRC_1, *in);
      what += " + residual";
    }
  }
  dnnl::primitive_attr attr;
  attr.set_post_ops(post);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // the caller's (LinearKernel::run)
  memory::desc wei_any({p.k, p.n}, DT::f32, Tag::any);
  if (batched) {
    wei_any = plain(p.b_shape, p.b_transposed);  // transposed: B^T's bytes read as B
    auto in = input_index(p.weights);
    if (!in) return errors::Internal("Linear layer: '{}' is not an input", p.weights);
    k->weights_ = *in;
    k->wei_md_ = wei_any;
  }
  const bool has_bias = !p.bias.empty();
  auto make_desc = [&](const memory::desc& wei) {
    return has_bias ? dnnl::matmul::desc(k->src_md_, wei, row_md, k->dst_md_)
                    : dnnl::matmul::desc(k->src_md_, wei, k->dst_md_);
  };
  auto desc = make_desc(wei_any);
  dnnl::matmul::primitive_desc pd(desc, attr, cpu_engine());
  // Constant weights the primitive reads row-major (oneDNN's AVX2 gemm; AVX-512 takes a blocked
  // layout) with a row of a multiple of 1 KB (N a multiple of 256: BERT's 768 x 3072, a
  // mixer's 256 x 1024) are stored with their rows 64 bytes apart more: the gemm's reads down
  // B's columns otherwise fall into the same cache sets (a critical stride): [196, 256] x
  // [256, 1024] took 1.44 ms on two Zen 3 cores, 0.78 ms padded. TENSORD_NO_WEIGHT_PAD: never.
  static const bool pad_rows = !std::getenv("TENSORD_NO_WEIGHT_PAD");
  if (!batched && pad_rows && p.n % 256 == 0 &&
      pd.weights_desc() == memory::desc({p.k, p.n}, DT::f32, Tag::ab)) {
    try {
      auto padded_desc = make_desc(memory::desc({p.k, p.n}, DT::f32, memory::dims{p.n + 16, 1}));
      dnnl::matmul::primitive_desc padded(padded_desc, attr, cpu_engine());
      if (std::string(padded.impl_info_str()) == pd.impl_info_str()) {
        desc = padded_desc;
        pd = padded;
        k->padded_rows_ = true;
      }
    } catch (const dnnl::error&) {
    }
  }
  // A broadcast post-op oneDNN has no fast kernel for (its reference matmul then) is refused:
  // the layer is matched again without it.
  const bool broadcast = std::any_of(p.steps.begin(), p.steps.end(),
                                     [](const LinearStep& s) { return !s.shape.empty(); });
  if (broadcast && std::string(pd.impl_info_str()).find("ref") != std::string::npos)
    return errors::Unimplemented("Linear layer '{}': oneDNN has only its reference matmul for {}",
                                 g.nodes[p.members[0]]->name, what);
  if (!batched) {  // weights reordered once, now, into the layout the primitive chose
    const Node* mm = nullptr;  // the MatMul or Gemm (a batched product's Transpose may lead)
    for (size_t m : p.members)
      if (g.nodes[m]->op == "MatMul" || g.nodes[m]->op == "Gemm") {
        mm = g.nodes[m];
        break;
      }
    const HostTensor* w = mm ? g.constant(mm->inputs[1]) : nullptr;
    if (!w) return errors::Internal("Linear layer: no constant weights");
    std::vector<float> scaled;  // alpha * B, when alpha is not 1
    const void* wdata = w->data();
    if (p.alpha != 1.0f) {
      scaled.assign(w->data<float>(), w->data<float>() + w->numel());
      for (float& x : scaled) x *= p.alpha;
      wdata = scaled.data();
    }
    memory wsrc(memory::desc({p.k, p.n}, DT::f32, p.w_transposed ? Tag::ba : Tag::ab),
                cpu_engine(), const_cast<void*>(wdata));
    memory wdst(pd.weights_desc(), cpu_engine());
    dnnl::reorder(wsrc, wdst).execute(cpu_stream(), wsrc, wdst);
    cpu_stream().wait();
    k->args_[DNNL_ARG_WEIGHTS] = wdst;
    k->weight_bytes_ = static_cast<int64_t>(pd.weights_desc().get_size());
  }
  auto owned = [&](const std::vector<float>& values, const memory::desc& md) {
    memory mem(md, cpu_engine());
    std::memcpy(mem.get_data_handle(), values.data(), values.size() * sizeof(float));
    k->weight_bytes_ += static_cast<int64_t>(values.size() * sizeof(float));
    return mem;
  };
  if (has_bias) k->args_[DNNL_ARG_BIAS] = owned(p.bias, row_md);
  for (const auto& [arg, step] : columns)
    k->args_[arg] = owned(step->columns, step->shape.empty() ? row_md : plain(step->shape));
  k->prim_ = dnnl::matmul(pd);
  k->scratch_md_ = pd.scratchpad_desc();
  choose_threads(*k, desc, attr, pd, static_cast<double>(p.m) * p.k * p.n);
  k->describe_ =
      batched ? fmt::format("MatMul: [{}] x [{}]{}{}{} as one oneDNN matmul ({}), {} nodes",
                            text(p.a_shape), text(p.b_shape),
                            p.b_transposed ? " (B transposed)" : "", has_bias ? " + bias" : "",
                            what, pd.impl_info_str(), p.members.size())
              : fmt::format("Linear: [{}, {}] x [{}, {}]{}{}{} as one oneDNN matmul ({}), {} nodes",
                            p.m, p.k, p.k, p.n, p.w_transposed ? " (B transposed)" : "",
                            has_bias ? " + bias" : "", what,
                            pd.impl_info_str(), p.members.size()) +
                    (k->padded_rows_ ? ", weight rows padded" : "");
  return std::unique_ptr<FusedKernel>(std::move(k));
}

}  // namespace

std::vector<FusedGroup> build_linear_layers(const FusionGraph& g, const std::vector<bool>& taken_in,
                                            std::vector<std::string>* notes) {
  std::vector<bool> taken = taken_in;
  taken.resize(g.nodes.size(), false);
  for (size_t i = 0; i < taken.size(); ++i)
    if (!g.placed_here.empty() && !g.placed_here[i]) taken[i] = true;
  LinearMatcher matcher(g);
  std::vector<FusedGroup> out;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    // oneDNN takes only some broadcasts of a constant as post-ops: where it refuses one, the
    // layer is matched again without them.
    FusedGroup r;
    Result<std::unique_ptr<FusedKernel>> k = errors::Internal("not compiled");
    for (bool broadcasts : {true, false}) {
      matcher.allow_broadcast_constants_ = broadcasts;
      std::optional<LinearPlan> p = matcher.match(i, taken);
      if (!p) break;
      // Every intermediate is read only by the next member, so the group's only output is the
      // result and nothing outside depends on a member: contracting it makes no cycle.
      r = FusedGroup{};
      r.members = p->members;
      std::unordered_set<std::string> produced, seen;
      for (size_t m : r.members)
        for (const auto& o : g.nodes[m]->outputs) produced.insert(o);
      for (size_t m : r.members)
        for (const auto& v : g.nodes[m]->inputs)
          if (!v.empty() && !produced.count(v) && !g.constant(v) && seen.insert(v).second)
            r.inputs.push_back(v);
      r.outputs = {p->result};
      try {
        k = compile_linear(g, *p, r);
      } catch (const dnnl::error& e) {
        k = errors::Unimplemented("oneDNN refused the Linear layer '{}': {}", g.nodes[i]->name,
                                  e.what());
      }
      const bool had_broadcast = std::any_of(p->steps.begin(), p->steps.end(),
                                             [](const LinearStep& s) { return !s.shape.empty(); });
      if (k.ok() || !had_broadcast) break;
    }
    if (r.members.empty()) continue;
    if (!k.ok()) {
      if (notes) notes->push_back(k.status().message());
      continue;
    }
    for (size_t m : r.members) taken[m] = true;
    r.kernel = std::move(*k);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace tensord::cpu
