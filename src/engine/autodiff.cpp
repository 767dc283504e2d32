// Reverse-mode differentiation over the graph IR (issue 34): the backward pass is written as
// ordinary ONNX ops appended to the forward graph, so every backend runs it, and constant
// shapes (broadcast reductions, pads, scatter indices) are resolved here from the static
// input types. See include/tensord/autodiff.h.
#include "tensord/autodiff.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "core/errors.h"
#include "core/graph_utils.h"
#include "core/op_registry.h"

namespace tensord {

std::string gradient_name(const std::string& wrt) { return "grad(" + wrt + ")"; }

namespace {

HostTensor scalar_tensor(DType dtype, double v) {
  HostTensor t(dtype, {});
  switch (dtype) {
    case DType::kFloat32:
      *t.mutable_data<float>() = static_cast<float>(v);
      break;
    case DType::kFloat64:
      *t.mutable_data<double>() = v;
      break;
    case DType::kFloat16:
      *t.mutable_data<uint16_t>() = float_to_half(static_cast<float>(v));
      break;
    case DType::kBFloat16:
      *t.mutable_data<uint16_t>() = float_to_bfloat16(static_cast<float>(v));
      break;
    case DType::kInt64:
      *t.mutable_data<int64_t>() = static_cast<int64_t>(v);
      break;
    case DType::kInt32:
      *t.mutable_data<int32_t>() = static_cast<int32_t>(v);
      break;
    default:
      break;
  }
  return t;
}

int64_t attr_int(const Node& n, const std::string& name, int64_t dflt) {
  auto it = n.attrs.find(name);
  if (it == n.attrs.end()) return dflt;
  if (auto v = it->second.get_if<int64_t>()) return *v;
  return dflt;
}
float attr_float(const Node& n, const std::string& name, float dflt) {
  auto it = n.attrs.find(name);
  if (it == n.attrs.end()) return dflt;
  if (auto v = it->second.get_if<float>()) return *v;
  if (auto v = it->second.get_if<int64_t>()) return static_cast<float>(*v);
  return dflt;
}
std::string attr_string(const Node& n, const std::string& name, const std::string& dflt) {
  auto it = n.attrs.find(name);
  if (it == n.attrs.end()) return dflt;
  if (auto v = it->second.get_if<std::string>()) return *v;
  return dflt;
}
std::vector<int64_t> attr_ints(const Node& n, const std::string& name, std::vector<int64_t> dflt) {
  auto it = n.attrs.find(name);
  if (it == n.attrs.end()) return dflt;
  if (auto v = it->second.get_if<std::vector<int64_t>>()) return *v;
  if (auto v = it->second.get_if<int64_t>()) return {*v};
  return dflt;
}

// Appends backward nodes and constants to `g`, with fresh value names.
class Builder {
 public:
  Builder(Graph& g, const GraphTypes& types, std::string prefix = "__grad")
      : g_(g), types_(types), prefix_(std::move(prefix)) {}

  std::string fresh() { return prefix_ + std::to_string(counter_++); }

  std::vector<std::string> op_n(const std::string& op, std::vector<std::string> inputs,
                                AttributeMap attrs, int num_outputs) {
    Node n;
    n.name = prefix_ + "node" + std::to_string(counter_++) + "_" + op;
    n.op = op;
    n.inputs = std::move(inputs);
    n.attrs = std::move(attrs);
    for (int i = 0; i < num_outputs; ++i) n.outputs.push_back(fresh());
    std::vector<std::string> outs = n.outputs;
    g_.nodes.push_back(std::move(n));
    return outs;
  }
  std::string op(const std::string& op, std::vector<std::string> inputs, AttributeMap attrs = {}) {
    return op_n(op, std::move(inputs), std::move(attrs), 1)[0];
  }
  std::string constant(HostTensor t) {
    std::string name = fresh();
    g_.initializers.emplace(name, std::move(t));
    return name;
  }
  std::string ints(const std::vector<int64_t>& v) {
    return constant(HostTensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())}));
  }
  std::string scalar(DType dtype, double v) { return constant(scalar_tensor(dtype, v)); }

  // ---- composite helpers
  std::string reshape(const std::string& x, const Shape& shape) {
    return op("Reshape", {x, ints(shape)});
  }
  std::string transpose(const std::string& x, const std::vector<int64_t>& perm) {
    return op("Transpose", {x}, {{"perm", perm}});
  }
  std::string reduce_sum(const std::string& x, const std::vector<int64_t>& axes, bool keepdims) {
    return op("ReduceSum", {x, ints(axes)}, {{"keepdims", int64_t{keepdims ? 1 : 0}}});
  }
  std::string expand(const std::string& x, const Shape& shape) {
    return op("Expand", {x, ints(shape)});
  }
  std::string zeros(DType dtype, const Shape& shape) { return expand(scalar(dtype, 0.0), shape); }
  // Sums a gradient of shape `gshape` down to `xshape` (NumPy broadcasting undone).
  std::string unbroadcast(const std::string& g, const Shape& gshape, const Shape& xshape) {
    if (gshape == xshape) return g;
    const int64_t diff = static_cast<int64_t>(gshape.size()) - static_cast<int64_t>(xshape.size());
    std::vector<int64_t> axes;
    for (int64_t i = 0; i < static_cast<int64_t>(gshape.size()); ++i) {
      if (i < diff || (xshape[i - diff] == 1 && gshape[i] != 1)) axes.push_back(i);
    }
    std::string r = g;
    Shape rshape = gshape;
    if (!axes.empty()) {
      r = reduce_sum(g, axes, true);
      for (int64_t a : axes) rshape[a] = 1;
    }
    if (rshape != xshape) r = reshape(r, xshape);
    return r;
  }

  const GraphTypes& types() const { return types_; }

 private:
  Graph& g_;
  const GraphTypes& types_;
  std::string prefix_;
  int64_t counter_ = 0;
};

struct RuleCtx {
  const Node& node;
  Builder& b;
  std::vector<std::string> gy;      // per output; "" when it gets no gradient
  std::vector<TensorType> in, out;  // types (static shapes)
  std::vector<bool> needs;          // per input: a gradient is wanted
  std::vector<std::string> gx;      // per input: set by the rule ("" = none)
  const std::map<std::string, HostTensor>& constants;

  bool has_input(size_t i) const { return i < node.inputs.size() && !node.inputs[i].empty(); }
  const std::string& x(size_t i) const { return node.inputs[i]; }
  const std::string& y(size_t i) const { return node.outputs[i]; }
  DType dtype() const { return in[0].dtype; }
  Status error(const std::string& what) const {
    return errors::Unimplemented("gradient of {}: {}", node.label(), what);
  }
  // The value of constant input i as int64s; nullopt when absent.
  Result<std::optional<std::vector<int64_t>>> const_ints(size_t i) const {
    if (!has_input(i)) return std::optional<std::vector<int64_t>>();
    auto it = constants.find(node.inputs[i]);
    if (it == constants.end())
      return errors::Unimplemented("gradient of {}: input {} ('{}') must be a constant",
                                   node.label(), i, node.inputs[i]);
    TD_ASSIGN_OR_RETURN(std::vector<int64_t> v, it->second.to_int64_vector());
    return std::optional<std::vector<int64_t>>(std::move(v));
  }
};

using Rule = std::function<Status(RuleCtx&)>;

std::vector<int64_t> iota(int64_t begin, int64_t end) {
  std::vector<int64_t> v;
  for (int64_t i = begin; i < end; ++i) v.push_back(i);
  return v;
}

// ---- element-wise
Status binary_rule(RuleCtx& c) {
  Builder& b = c.b;
  const std::string& gy = c.gy[0];
  const Shape& ys = c.out[0].shape;
  const std::string& op = c.node.op;
  std::string ga, gb;
  if (op == "Add") {
    ga = gy, gb = gy;
  } else if (op == "Sub") {
    ga = gy;
    if (c.needs[1]) gb = b.op("Neg", {gy});
  } else if (op == "Mul") {
    if (c.needs[0]) ga = b.op("Mul", {gy, c.x(1)});
    if (c.needs[1]) gb = b.op("Mul", {gy, c.x(0)});
  } else if (op == "Div") {
    if (c.needs[0]) ga = b.op("Div", {gy, c.x(1)});
    if (c.needs[1]) gb = b.op("Neg", {b.op("Div", {b.op("Mul", {gy, c.y(0)}), c.x(1)})});
  } else if (op == "Pow") {
    const DType dt = c.in[0].dtype;
    std::string e = c.x(1);
    if (c.in[1].dtype != dt) e = b.op("Cast", {e}, {{"to", int64_t(dt)}});
    if (c.needs[0]) {
      std::string em1 = b.op("Sub", {e, b.scalar(dt, 1.0)});
      ga = b.op("Mul", {b.op("Mul", {gy, e}), b.op("Pow", {c.x(0), em1})});
    }
    if (c.needs[1]) {
      gb = b.op("Mul", {b.op("Mul", {gy, c.y(0)}), b.op("Log", {c.x(0)})});
      if (c.in[1].dtype != dt) gb = b.op("Cast", {gb}, {{"to", int64_t(c.in[1].dtype)}});
    }
  }
  if (c.needs[0] && !ga.empty()) c.gx[0] = b.unbroadcast(ga, ys, c.in[0].shape);
  if (c.needs[1] && !gb.empty()) c.gx[1] = b.unbroadcast(gb, ys, c.in[1].shape);
  return OkStatus();
}

Status unary_rule(RuleCtx& c) {
  Builder& b = c.b;
  const std::string& gy = c.gy[0];
  const std::string& op = c.node.op;
  const DType dt = c.dtype();
  std::string g;
  if (op == "Neg")
    g = b.op("Neg", {gy});
  else if (op == "Exp")
    g = b.op("Mul", {gy, c.y(0)});
  else if (op == "Log")
    g = b.op("Div", {gy, c.x(0)});
  else if (op == "Sqrt")
    g = b.op("Div", {b.op("Mul", {gy, b.scalar(dt, 0.5)}), c.y(0)});
  else if (op == "Abs")
    g = b.op("Mul", {gy, b.op("Sign", {c.x(0)})});
  else if (op == "Relu")
    g = b.op("Where", {b.op("Greater", {c.x(0), b.scalar(dt, 0.0)}), gy, b.scalar(dt, 0.0)});
  else if (op == "Sigmoid")
    g = b.op("Mul", {gy, b.op("Mul", {c.y(0), b.op("Sub", {b.scalar(dt, 1.0), c.y(0)})})});
  else if (op == "Tanh")
    g = b.op("Mul", {gy, b.op("Sub", {b.scalar(dt, 1.0), b.op("Mul", {c.y(0), c.y(0)})})});
  else if (op == "Identity")
    g = gy;
  else if (op == "Reciprocal")
    g = b.op("Neg", {b.op("Mul", {gy, b.op("Mul", {c.y(0), c.y(0)})})});
  else if (op == "LeakyRelu")
    g = b.op("Where", {b.op("Greater", {c.x(0), b.scalar(dt, 0.0)}), gy,
                       b.op("Mul", {gy, b.scalar(dt, attr_float(c.node, "alpha", 0.01f))})});
  else if (op == "Sin")
    g = b.op("Mul", {gy, b.op("Cos", {c.x(0)})});
  else if (op == "Cos")
    g = b.op("Neg", {b.op("Mul", {gy, b.op("Sin", {c.x(0)})})});
  else if (op == "Softplus")
    g = b.op("Mul", {gy, b.op("Sigmoid", {c.x(0)})});
  else if (op == "Elu") {
    // x > 0: 1; else alpha * exp(x) = y + alpha
    const std::string a = b.scalar(dt, attr_float(c.node, "alpha", 1.0f));
    g = b.op("Where", {b.op("Greater", {c.x(0), b.scalar(dt, 0.0)}), gy,
                       b.op("Mul", {gy, b.op("Add", {c.y(0), a})})});
  } else if (op == "Gelu") {
    if (attr_string(c.node, "approximate", "none") != "none")
      return c.error("approximate '" + attr_string(c.node, "approximate", "none") + "'");
    // d/dx x * Phi(x) = Phi(x) + x * phi(x)
    const std::string cdf = b.op(
        "Mul",
        {b.scalar(dt, 0.5),
         b.op("Add", {b.scalar(dt, 1.0),
                      b.op("Erf", {b.op("Mul", {c.x(0), b.scalar(dt, 0.7071067811865476)})})})});
    const std::string pdf = b.op(
        "Mul", {b.scalar(dt, 0.3989422804014327),
                b.op("Exp", {b.op("Mul", {b.op("Mul", {c.x(0), c.x(0)}), b.scalar(dt, -0.5)})})});
    g = b.op("Mul", {gy, b.op("Add", {cdf, b.op("Mul", {c.x(0), pdf})})});
  } else if (op == "Erf")
    g = b.op("Mul", {b.op("Mul", {gy, b.scalar(dt, 1.1283791670955126)}),
                     b.op("Exp", {b.op("Neg", {b.op("Mul", {c.x(0), c.x(0)})})})});
  else if (op == "Cast")
    g = b.op("Cast", {gy}, {{"to", int64_t(c.in[0].dtype)}});
  c.gx[0] = g;
  return OkStatus();
}

Status variadic_rule(RuleCtx& c) {  // Sum, Mean
  std::string g = c.gy[0];
  const size_t n = c.node.inputs.size();
  if (c.node.op == "Mean") g = c.b.op("Mul", {g, c.b.scalar(c.out[0].dtype, 1.0 / n)});
  for (size_t i = 0; i < n; ++i)
    if (c.needs[i]) c.gx[i] = c.b.unbroadcast(g, c.out[0].shape, c.in[i].shape);
  return OkStatus();
}

// ---- contractions
std::vector<int64_t> swap_last2(size_t rank) {
  std::vector<int64_t> p = iota(0, static_cast<int64_t>(rank));
  std::swap(p[rank - 1], p[rank - 2]);
  return p;
}

Status matmul_rule(RuleCtx& c) {
  Builder& b = c.b;
  const Shape a = c.in[0].shape, bs = c.in[1].shape, y = c.out[0].shape;
  Shape a2 = a.size() == 1 ? Shape{1, a[0]} : a;
  Shape b2 = bs.size() == 1 ? Shape{bs[0], 1} : bs;
  Shape ba(a2.begin(), a2.end() - 2), bb(b2.begin(), b2.end() - 2);
  TD_ASSIGN_OR_RETURN(Shape y2, broadcast_shapes(ba, bb));
  y2.push_back(a2[a2.size() - 2]);
  y2.push_back(b2.back());
  std::string gy = y2 == y ? c.gy[0] : b.reshape(c.gy[0], y2);
  std::string A = a2 == a ? c.x(0) : b.reshape(c.x(0), a2);
  std::string B = b2 == bs ? c.x(1) : b.reshape(c.x(1), b2);
  if (c.needs[0]) {
    Shape gs(y2.begin(), y2.end() - 2);
    gs.push_back(a2[a2.size() - 2]);
    gs.push_back(a2.back());
    std::string g = b.op("MatMul", {gy, b.transpose(B, swap_last2(b2.size()))});
    g = b.unbroadcast(g, gs, a2);
    c.gx[0] = a2 == a ? g : b.reshape(g, a);
  }
  if (c.needs[1]) {
    Shape gs(y2.begin(), y2.end() - 2);
    gs.push_back(b2[b2.size() - 2]);
    gs.push_back(b2.back());
    std::string g = b.op("MatMul", {b.transpose(A, swap_last2(a2.size())), gy});
    g = b.unbroadcast(g, gs, b2);
    c.gx[1] = b2 == bs ? g : b.reshape(g, bs);
  }
  return OkStatus();
}

Status gemm_rule(RuleCtx& c) {
  Builder& b = c.b;
  const float alpha = attr_float(c.node, "alpha", 1.0f), beta = attr_float(c.node, "beta", 1.0f);
  const int64_t ta = attr_int(c.node, "transA", 0), tb = attr_int(c.node, "transB", 0);
  const std::string& gy = c.gy[0];
  if (c.needs[0]) {
    std::string g = b.op("Gemm", {gy, c.x(1)}, {{"alpha", alpha}, {"transB", int64_t{!tb}}});
    c.gx[0] = ta ? b.transpose(g, {1, 0}) : g;
  }
  if (c.needs[1]) {
    std::string g = b.op("Gemm", {c.x(0), gy}, {{"alpha", alpha}, {"transA", int64_t{!ta}}});
    c.gx[1] = tb ? b.transpose(g, {1, 0}) : g;
  }
  if (c.has_input(2) && c.needs[2]) {
    std::string g = beta == 1.0f ? gy : b.op("Mul", {gy, b.scalar(c.out[0].dtype, beta)});
    c.gx[2] = b.unbroadcast(g, c.out[0].shape, c.in[2].shape);
  }
  return OkStatus();
}

// ---- reductions
Status reduce_rule(RuleCtx& c) {
  Builder& b = c.b;
  const Shape& xs = c.in[0].shape;
  const int64_t r = static_cast<int64_t>(xs.size());
  std::vector<int64_t> axes;
  bool given = false;
  if (c.node.inputs.size() > 1 && c.has_input(1)) {
    TD_ASSIGN_OR_RETURN(auto v, c.const_ints(1));
    axes = *v;
    given = true;
  } else if (c.node.attrs.count("axes")) {
    axes = attr_ints(c.node, "axes", {});
    given = true;
  }
  if (axes.empty()) {
    if (given && attr_int(c.node, "noop_with_empty_axes", 0)) {
      c.gx[0] = c.gy[0];
      return OkStatus();
    }
    axes = iota(0, r);
  }
  Shape kept = xs;
  int64_t count = 1;
  for (int64_t& a : axes) {
    TD_ASSIGN_OR_RETURN(a, normalize_axis(a, r));
    kept[a] = 1;
  }
  std::set<int64_t> uniq(axes.begin(), axes.end());
  for (int64_t a : uniq) count *= xs[a];
  std::string g = c.gy[0];
  if (c.node.op == "ReduceMean") g = b.op("Mul", {g, b.scalar(c.dtype(), 1.0 / count)});
  if (c.out[0].shape != kept) g = b.reshape(g, kept);
  c.gx[0] = b.expand(g, xs);
  return OkStatus();
}

Status softmax_rule(RuleCtx& c) {
  Builder& b = c.b;
  const int64_t r = static_cast<int64_t>(c.in[0].shape.size());
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(attr_int(c.node, "axis", -1), r));
  const std::string& gy = c.gy[0];
  if (c.node.op == "Softmax") {
    std::string s = b.reduce_sum(b.op("Mul", {gy, c.y(0)}), {axis}, true);
    c.gx[0] = b.op("Mul", {c.y(0), b.op("Sub", {gy, s})});
  } else {
    std::string s = b.reduce_sum(gy, {axis}, true);
    c.gx[0] = b.op("Sub", {gy, b.op("Mul", {b.op("Exp", {c.y(0)}), s})});
  }
  return OkStatus();
}

// ---- data movement
Status reshape_rule(RuleCtx& c) {  // Reshape, Flatten, Squeeze, Unsqueeze
  c.gx[0] = c.b.reshape(c.gy[0], c.in[0].shape);
  return OkStatus();
}

Status expand_rule(RuleCtx& c) {
  c.gx[0] = c.b.unbroadcast(c.gy[0], c.out[0].shape, c.in[0].shape);
  return OkStatus();
}

Status transpose_rule(RuleCtx& c) {
  const int64_t r = static_cast<int64_t>(c.in[0].shape.size());
  std::vector<int64_t> perm = attr_ints(c.node, "perm", {});
  if (perm.empty()) {
    perm = iota(0, r);
    std::reverse(perm.begin(), perm.end());
  }
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  c.gx[0] = c.b.transpose(c.gy[0], inv);
  return OkStatus();
}

Status concat_rule(RuleCtx& c) {
  const int64_t r = static_cast<int64_t>(c.out[0].shape.size());
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(attr_int(c.node, "axis", 0), r));
  int64_t off = 0;
  for (size_t i = 0; i < c.node.inputs.size(); ++i) {
    const int64_t len = c.in[i].shape[axis];
    if (c.needs[i])
      c.gx[i] =
          c.b.op("Slice", {c.gy[0], c.b.ints({off}), c.b.ints({off + len}), c.b.ints({axis})});
    off += len;
  }
  return OkStatus();
}

Status slice_rule(RuleCtx& c) {
  Builder& b = c.b;
  const Shape& xs = c.in[0].shape;
  const int64_t r = static_cast<int64_t>(xs.size());
  TD_ASSIGN_OR_RETURN(auto starts, c.const_ints(1));
  TD_ASSIGN_OR_RETURN(auto ends, c.const_ints(2));
  TD_ASSIGN_OR_RETURN(auto axes_in, c.const_ints(3));
  TD_ASSIGN_OR_RETURN(auto steps_in, c.const_ints(4));
  if (!starts || !ends) return c.error("no starts or ends input");
  std::vector<int64_t> axes = axes_in ? *axes_in : iota(0, static_cast<int64_t>(starts->size()));
  std::vector<int64_t> begin(r, 0), step(r, 1), count(xs.begin(), xs.end());
  bool unit = true;
  for (size_t k = 0; k < axes.size(); ++k) {
    TD_ASSIGN_OR_RETURN(int64_t a, normalize_axis(axes[k], r));
    const int64_t d = xs[a];
    int64_t s = (*starts)[k], e = (*ends)[k];
    const int64_t st = steps_in ? (*steps_in)[k] : 1;
    if (s < 0) s += d;
    if (e < 0) e += d;
    int64_t n;
    if (st > 0) {
      s = std::clamp<int64_t>(s, 0, d);
      e = std::clamp<int64_t>(e, 0, d);
      n = e > s ? (e - s + st - 1) / st : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, d - 1);
      e = std::clamp<int64_t>(e, -1, d - 1);
      n = s > e ? (s - e + (-st) - 1) / (-st) : 0;
    }
    begin[a] = s, step[a] = st, count[a] = n;
    unit &= st == 1;
  }
  if (unit) {
    std::vector<int64_t> pads(2 * r);
    for (int64_t a = 0; a < r; ++a) {
      pads[a] = begin[a];
      pads[r + a] = xs[a] - begin[a] - count[a];
    }
    c.gx[0] = b.op("Pad", {c.gy[0], b.ints(pads)});
    return OkStatus();
  }
  // Any steps: scatter into the flat input at precomputed positions.
  const int64_t ny = shape_numel(count);
  std::vector<int64_t> idx(ny);
  std::vector<int64_t> strides(r, 1);
  for (int64_t a = r - 2; a >= 0; --a) strides[a] = strides[a + 1] * xs[a + 1];
  for (int64_t i = 0; i < ny; ++i) {
    int64_t rem = i, flat = 0;
    for (int64_t a = r - 1; a >= 0; --a) {
      const int64_t k = rem % count[a];
      rem /= count[a];
      flat += (begin[a] + k * step[a]) * strides[a];
    }
    idx[i] = flat;
  }
  std::string z = b.zeros(c.dtype(), {shape_numel(xs)});
  std::string s = b.op("ScatterElements", {z, b.ints(idx), b.reshape(c.gy[0], {ny})},
                       {{"axis", int64_t{0}}, {"reduction", "add"}});
  c.gx[0] = b.reshape(s, xs);
  return OkStatus();
}

Status gather_rule(RuleCtx& c) {
  Builder& b = c.b;
  const Shape& xs = c.in[0].shape;
  const Shape& is = c.in[1].shape;
  const int64_t r = static_cast<int64_t>(xs.size()), ri = static_cast<int64_t>(is.size());
  TD_ASSIGN_OR_RETURN(int64_t a, normalize_axis(attr_int(c.node, "axis", 0), r));
  const int64_t n = shape_numel(is), d = xs[a];
  // Gradient arranged as [I..., X[:a], X[a+1:]] -> [n, rest...]
  std::string gy = c.gy[0];
  Shape rest;
  for (int64_t i = 0; i < r; ++i)
    if (i != a) rest.push_back(xs[i]);
  if (a != 0) {
    std::vector<int64_t> perm = iota(a, a + ri);
    for (int64_t i = 0; i < a; ++i) perm.push_back(i);
    for (int64_t i = a + ri; i < r - 1 + ri; ++i) perm.push_back(i);
    gy = b.transpose(gy, perm);
  }
  Shape upd_shape{n};
  upd_shape.insert(upd_shape.end(), rest.begin(), rest.end());
  gy = b.reshape(gy, upd_shape);
  std::string idx = b.op("Cast", {c.x(1)}, {{"to", int64_t(DType::kInt64)}});
  idx = b.op("Where", {b.op("Less", {idx, b.scalar(DType::kInt64, 0)}),
                       b.op("Add", {idx, b.scalar(DType::kInt64, static_cast<double>(d))}), idx});
  idx = b.reshape(idx, {n, 1});
  Shape zs{d};
  zs.insert(zs.end(), rest.begin(), rest.end());
  std::string g = b.op("ScatterND", {b.zeros(c.dtype(), zs), idx, gy}, {{"reduction", "add"}});
  if (a != 0) {
    // zs = [d, X[:a], X[a+1:]] -> X
    std::vector<int64_t> perm;
    for (int64_t i = 1; i <= a; ++i) perm.push_back(i);
    perm.push_back(0);
    for (int64_t i = a + 1; i < r; ++i) perm.push_back(i);
    g = b.transpose(g, perm);
  }
  c.gx[0] = g;
  return OkStatus();
}

// ---- convolution and pooling
Status explicit_pads(const RuleCtx& c) {
  const std::string ap = attr_string(c.node, "auto_pad", "NOTSET");
  if (ap != "NOTSET" && !ap.empty())
    return c.error("auto_pad '" + ap + "' (only explicit pads have a rule)");
  return OkStatus();
}

// ConvTranspose of gy with `w` back to the input's spatial shape.
std::string conv_input_grad(RuleCtx& c, const std::string& gy, const std::string& w,
                            const Shape& xs, const Shape& ys, const std::vector<int64_t>& k,
                            const std::vector<int64_t>& strides, const std::vector<int64_t>& pads,
                            const std::vector<int64_t>& dil, int64_t group) {
  Builder& b = c.b;
  const size_t sp = k.size();
  std::vector<int64_t> outpad(sp, 0);
  bool crop = false;
  for (size_t i = 0; i < sp; ++i) {
    const int64_t full =
        (ys[2 + i] - 1) * strides[i] - pads[i] - pads[sp + i] + dil[i] * (k[i] - 1) + 1;
    outpad[i] = xs[2 + i] - full;
    if (outpad[i] < 0) crop = true;
  }
  AttributeMap at{{"strides", strides}, {"pads", pads}, {"dilations", dil}, {"group", group}};
  if (!crop) {
    if (std::any_of(outpad.begin(), outpad.end(), [](int64_t v) { return v != 0; }))
      at["output_padding"] = outpad;
    return b.op("ConvTranspose", {gy, w}, at);
  }
  std::vector<int64_t> op2(sp);
  for (size_t i = 0; i < sp; ++i) op2[i] = std::max<int64_t>(outpad[i], 0);
  at["output_padding"] = op2;
  std::string g = b.op("ConvTranspose", {gy, w}, at);
  std::vector<int64_t> st(sp, 0), en, ax;
  for (size_t i = 0; i < sp; ++i) en.push_back(xs[2 + i]), ax.push_back(2 + i);
  return b.op("Slice", {g, b.ints(st), b.ints(en), b.ints(ax)});
}

Status conv_rule(RuleCtx& c) {
  Builder& b = c.b;
  TD_RETURN_IF_ERROR(explicit_pads(c));
  const Shape xs = c.in[0].shape, ws = c.in[1].shape, ys = c.out[0].shape;
  const size_t sp = xs.size() - 2;
  std::vector<int64_t> k(ws.begin() + 2, ws.end());
  auto strides = attr_ints(c.node, "strides", std::vector<int64_t>(sp, 1));
  auto dil = attr_ints(c.node, "dilations", std::vector<int64_t>(sp, 1));
  auto pads = attr_ints(c.node, "pads", std::vector<int64_t>(2 * sp, 0));
  const int64_t group = attr_int(c.node, "group", 1);
  const std::string& gy = c.gy[0];
  if (c.needs[0]) c.gx[0] = conv_input_grad(c, gy, c.x(1), xs, ys, k, strides, pads, dil, group);
  if (c.needs[1]) {
    std::vector<int64_t> nc = iota(0, static_cast<int64_t>(xs.size()));
    std::swap(nc[0], nc[1]);
    const int64_t cg = xs[1] / group, mg = ws[0] / group;
    std::vector<std::string> parts;
    for (int64_t gi = 0; gi < group; ++gi) {
      std::string xg = c.x(0), gyg = gy;
      if (group > 1) {
        xg = b.op("Slice", {xg, b.ints({gi * cg}), b.ints({(gi + 1) * cg}), b.ints({1})});
        gyg = b.op("Slice", {gyg, b.ints({gi * mg}), b.ints({(gi + 1) * mg}), b.ints({1})});
      }
      std::string rr = b.op("Conv", {b.transpose(xg, nc), b.transpose(gyg, nc)},
                            {{"strides", dil}, {"dilations", strides}, {"pads", pads}});
      // Spatial size of rr: xs + pads - strides*(ys-1), stepped by dil; keep the first k.
      bool cut = false;
      std::vector<int64_t> st, en, ax;
      for (size_t i = 0; i < sp; ++i) {
        const int64_t ext = xs[2 + i] + pads[i] + pads[sp + i] - strides[i] * (ys[2 + i] - 1);
        const int64_t kk = (ext - 1) / dil[i] + 1;
        if (kk != k[i]) cut = true;
        st.push_back(0), en.push_back(k[i]), ax.push_back(static_cast<int64_t>(2 + i));
      }
      if (cut) rr = b.op("Slice", {rr, b.ints(st), b.ints(en), b.ints(ax)});
      parts.push_back(b.transpose(rr, nc));
    }
    c.gx[1] = parts.size() == 1 ? parts[0] : b.op("Concat", parts, {{"axis", int64_t{0}}});
  }
  if (c.has_input(2) && c.needs[2]) {
    std::vector<int64_t> axes{0};
    for (size_t i = 0; i < sp; ++i) axes.push_back(static_cast<int64_t>(2 + i));
    c.gx[2] = b.reduce_sum(gy, axes, false);
  }
  return OkStatus();
}

// ConvTranspose is the adjoint of Conv with the same weights: y = A^T x with A = Conv(., W).
// So dx = Conv(dy, W) (same strides, pads, dilations, group), and since
// <dy, A^T x> = <Conv(dy, W), x>, dW is Conv's weight gradient with dy as its input and x as
// its output's gradient: conv_rule on that Conv. Explicit pads only (no auto_pad or
// output_shape: refused by name); output_padding is fine (smaller than the stride).
Status conv_transpose_rule(RuleCtx& c) {
  Builder& b = c.b;
  if (attr_string(c.node, "auto_pad", "NOTSET") != "NOTSET") return c.error("auto_pad");
  if (c.node.attrs.count("output_shape")) return c.error("output_shape");
  const Shape ys = c.out[0].shape;
  AttributeMap conv_attrs;
  for (const char* a : {"strides", "pads", "dilations", "group", "kernel_shape"})
    if (auto it = c.node.attrs.find(a); it != c.node.attrs.end()) conv_attrs[a] = it->second;
  if (c.needs[0]) c.gx[0] = b.op("Conv", {c.gy[0], c.x(1)}, conv_attrs);
  if (c.needs[1]) {
    Node conv;
    conv.op = "Conv";
    conv.name = c.node.name;
    conv.attrs = conv_attrs;
    conv.inputs = {c.gy[0], c.x(1)};
    conv.outputs = {c.x(0)};
    RuleCtx fc{conv, b, {c.x(0)}, {c.out[0], c.in[1]}, {c.in[0]}, {false, true}, {"", ""},
               c.constants};
    TD_RETURN_IF_ERROR(conv_rule(fc));
    c.gx[1] = fc.gx[1];
  }
  if (c.has_input(2) && c.needs[2]) {
    std::vector<int64_t> axes{0};
    for (size_t i = 0; i < ys.size() - 2; ++i) axes.push_back(static_cast<int64_t>(2 + i));
    c.gx[2] = b.reduce_sum(c.gy[0], axes, false);
  }
  return OkStatus();
}

Status maxpool_rule(RuleCtx& c) {
  Builder& b = c.b;
  const Shape& xs = c.in[0].shape;
  if (attr_int(c.node, "storage_order", 0) != 0) return c.error("storage_order 1");
  std::string idx;
  if (c.node.outputs.size() > 1 && !c.node.outputs[1].empty()) {
    idx = c.node.outputs[1];
  } else {
    idx = b.op_n("MaxPool", {c.x(0)}, c.node.attrs, 2)[1];
  }
  // Scattered plane by plane ([N*C, H*W], the indices made plane-local): a device whose
  // ScatterElements has each output scan the updates along the axis (the generated OpenCL
  // kernel) then scans one plane's, not the whole tensor's (6 s instead of milliseconds for
  // a [256, 16, 8, 8] pool on PoCL).
  const int64_t nx = shape_numel(xs), ny = shape_numel(c.out[0].shape);
  const int64_t planes = xs.size() >= 2 ? xs[0] * xs[1] : 1;
  if (planes <= 0 || nx == 0) {
    c.gx[0] = b.zeros(c.dtype(), xs);
    return OkStatus();
  }
  const int64_t in_plane = nx / planes, out_plane = ny / planes;
  HostTensor base(DType::kInt64, {planes, 1});
  for (int64_t p = 0; p < planes; ++p) base.mutable_data<int64_t>()[p] = p * in_plane;
  const std::string local =
      b.op("Sub", {b.reshape(idx, {planes, out_plane}), b.constant(std::move(base))});
  std::string s = b.op("ScatterElements",
                       {b.zeros(c.dtype(), {planes, in_plane}), local,
                        b.reshape(c.gy[0], {planes, out_plane})},
                       {{"axis", int64_t{1}}, {"reduction", "add"}});
  c.gx[0] = b.reshape(s, xs);
  return OkStatus();
}

Status avgpool_rule(RuleCtx& c) {
  Builder& b = c.b;
  TD_RETURN_IF_ERROR(explicit_pads(c));
  const Shape xs = c.in[0].shape, ys = c.out[0].shape;
  const size_t sp = xs.size() - 2;
  auto k = attr_ints(c.node, "kernel_shape", {});
  auto strides = attr_ints(c.node, "strides", std::vector<int64_t>(sp, 1));
  auto pads = attr_ints(c.node, "pads", std::vector<int64_t>(2 * sp, 0));
  auto dil = attr_ints(c.node, "dilations", std::vector<int64_t>(sp, 1));
  if (std::any_of(dil.begin(), dil.end(), [](int64_t v) { return v != 1; }))
    return c.error("dilations other than 1");
  const bool incl = attr_int(c.node, "count_include_pad", 0) != 0;
  // 1 / (elements in each window), per output position.
  Shape cs{1, 1};
  cs.insert(cs.end(), ys.begin() + 2, ys.end());
  const int64_t no = shape_numel(cs);
  HostTensor inv(c.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32, cs);
  for (int64_t i = 0; i < no; ++i) {
    int64_t rem = i, cnt = 1;
    for (int64_t a = static_cast<int64_t>(sp) - 1; a >= 0; --a) {
      const int64_t o = rem % ys[2 + a];
      rem /= ys[2 + a];
      const int64_t start = o * strides[a] - pads[a];
      int64_t lo = start, hi = start + k[a];
      if (incl) {
        hi = std::min(hi, xs[2 + a] + pads[sp + a]);
      } else {
        lo = std::max<int64_t>(lo, 0);
        hi = std::min(hi, xs[2 + a]);
      }
      cnt *= std::max<int64_t>(hi - lo, 1);
    }
    if (inv.dtype() == DType::kFloat64)
      inv.mutable_data<double>()[i] = 1.0 / cnt;
    else
      inv.mutable_data<float>()[i] = 1.0f / cnt;
  }
  std::string invc = b.constant(std::move(inv));
  if (c.dtype() != DType::kFloat64 && c.dtype() != DType::kFloat32)
    invc = b.op("Cast", {invc}, {{"to", int64_t(c.dtype())}});
  std::string g = b.op("Mul", {c.gy[0], invc});
  const int64_t ch = xs[1];
  Shape wshape{ch, 1};
  wshape.insert(wshape.end(), k.begin(), k.end());
  std::string w = b.expand(b.scalar(c.dtype(), 1.0), wshape);
  c.gx[0] = conv_input_grad(c, g, w, xs, ys, k, strides, pads, dil, ch);
  return OkStatus();
}

Status global_avgpool_rule(RuleCtx& c) {
  const Shape& xs = c.in[0].shape;
  int64_t cnt = 1;
  for (size_t i = 2; i < xs.size(); ++i) cnt *= xs[i];
  std::string g = c.b.op("Mul", {c.gy[0], c.b.scalar(c.dtype(), 1.0 / cnt)});
  c.gx[0] = c.b.expand(g, xs);
  return OkStatus();
}

// ---- losses
// Gradient of NegativeLogLikelihoodLoss with respect to its log-probabilities input.
Result<std::string> nll_grad(RuleCtx& c, const std::string& gy, const Shape& xs, DType dt) {
  Builder& b = c.b;
  const std::string reduction = attr_string(c.node, "reduction", "mean");
  const int64_t r = static_cast<int64_t>(xs.size()), classes = xs[1];
  std::string t = b.op("Cast", {c.x(1)}, {{"to", int64_t(DType::kInt64)}});
  std::string ws;  // per-sample weight, "" = 1
  if (c.node.attrs.count("ignore_index")) {
    const int64_t ii = attr_int(c.node, "ignore_index", 0);
    std::string keep =
        b.op("Not", {b.op("Equal", {t, b.scalar(DType::kInt64, static_cast<double>(ii))})});
    t = b.op("Where", {keep, t, b.scalar(DType::kInt64, 0)});
    ws = b.op("Cast", {keep}, {{"to", int64_t(dt)}});
  }
  if (c.has_input(2)) {
    std::string w = b.op("Gather", {c.x(2), t}, {{"axis", int64_t{0}}});
    ws = ws.empty() ? w : b.op("Mul", {w, ws});
  }
  Shape ar_shape(r, 1);
  ar_shape[1] = classes;
  HostTensor ar = HostTensor::from_vector<int64_t>(iota(0, classes), ar_shape);
  std::string onehot = b.op(
      "Cast", {b.op("Equal", {b.op("Unsqueeze", {t, b.ints({1})}), b.constant(std::move(ar))})},
      {{"to", int64_t(dt)}});
  std::string coef;
  if (reduction == "none" || reduction == "sum") {
    coef = ws.empty() ? gy : b.op("Mul", {gy, ws});
  } else if (reduction == "mean") {
    if (ws.empty()) {
      int64_t cnt = xs[0];
      for (int64_t i = 2; i < r; ++i) cnt *= xs[i];
      coef = b.op("Mul", {gy, b.scalar(dt, 1.0 / cnt)});
    } else {
      coef =
          b.op("Div", {b.op("Mul", {gy, ws}), b.op("ReduceSum", {ws}, {{"keepdims", int64_t{0}}})});
    }
  } else {
    return c.error("reduction '" + reduction + "'");
  }
  // coef: a scalar (sum/mean without weights) or of the target's shape.
  const bool scalar_coef = ws.empty() && reduction != "none";
  if (!scalar_coef) coef = b.op("Unsqueeze", {coef, b.ints({1})});
  return b.op("Neg", {b.op("Mul", {onehot, coef})});
}

Status nll_rule(RuleCtx& c) {
  TD_ASSIGN_OR_RETURN(c.gx[0], nll_grad(c, c.gy[0], c.in[0].shape, c.dtype()));
  return OkStatus();
}

Status sce_rule(RuleCtx& c) {
  Builder& b = c.b;
  std::string glp;
  if (!c.gy[0].empty()) {
    TD_ASSIGN_OR_RETURN(glp, nll_grad(c, c.gy[0], c.in[0].shape, c.dtype()));
  }
  if (c.gy.size() > 1 && !c.gy[1].empty())
    glp = glp.empty() ? c.gy[1] : b.op("Add", {glp, c.gy[1]});
  std::string lp = c.node.outputs.size() > 1 && !c.node.outputs[1].empty()
                       ? c.node.outputs[1]
                       : b.op("LogSoftmax", {c.x(0)}, {{"axis", int64_t{1}}});
  std::string s = b.reduce_sum(glp, {1}, true);
  c.gx[0] = b.op("Sub", {glp, b.op("Mul", {b.op("Exp", {lp}), s})});
  return OkStatus();
}

Status where_rule(RuleCtx& c) {
  Builder& b = c.b;
  const DType dt = c.out[0].dtype;
  const std::string zero = b.scalar(dt, 0.0);
  if (c.needs[1])
    c.gx[1] = b.unbroadcast(b.op("Where", {c.x(0), c.gy[0], zero}), c.out[0].shape, c.in[1].shape);
  if (c.needs[2])
    c.gx[2] = b.unbroadcast(b.op("Where", {c.x(0), zero, c.gy[0]}), c.out[0].shape, c.in[2].shape);
  return OkStatus();
}

Status clip_rule(RuleCtx& c) {
  Builder& b = c.b;
  std::string keep;
  if (c.has_input(1)) keep = b.op("GreaterOrEqual", {c.x(0), c.x(1)});
  if (c.has_input(2)) {
    std::string le = b.op("LessOrEqual", {c.x(0), c.x(2)});
    keep = keep.empty() ? le : b.op("And", {keep, le});
  }
  c.gx[0] = keep.empty() ? c.gy[0] : b.op("Where", {keep, c.gy[0], b.scalar(c.dtype(), 0.0)});
  return OkStatus();
}

Status split_rule(RuleCtx& c) {
  Builder& b = c.b;
  const int64_t r = static_cast<int64_t>(c.in[0].shape.size());
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(attr_int(c.node, "axis", 0), r));
  std::vector<std::string> parts;
  for (size_t k = 0; k < c.node.outputs.size(); ++k)
    parts.push_back(c.gy[k].empty() ? b.zeros(c.out[k].dtype, c.out[k].shape) : c.gy[k]);
  c.gx[0] = parts.size() == 1 ? parts[0] : b.op("Concat", parts, {{"axis", axis}});
  return OkStatus();
}

Status pad_rule(RuleCtx& c) {
  Builder& b = c.b;
  if (attr_string(c.node, "mode", "constant") != "constant")
    return c.error("mode '" + attr_string(c.node, "mode", "constant") + "' (constant only)");
  const Shape& xs = c.in[0].shape;
  const int64_t r = static_cast<int64_t>(xs.size());
  TD_ASSIGN_OR_RETURN(auto pads, c.const_ints(1));
  TD_ASSIGN_OR_RETURN(auto axes_in, c.const_ints(3));
  if (!pads) return c.error("no pads input");
  std::vector<int64_t> axes = axes_in ? *axes_in : iota(0, r);
  std::vector<int64_t> st, en, ax;
  const size_t na = axes.size();
  for (size_t k = 0; k < na; ++k) {
    TD_ASSIGN_OR_RETURN(int64_t a, normalize_axis(axes[k], r));
    const int64_t begin = (*pads)[k], end = (*pads)[na + k];
    if (begin < 0 || end < 0) return c.error("negative pads (cropping)");
    st.push_back(begin), en.push_back(begin + xs[a]), ax.push_back(a);
  }
  c.gx[0] = b.op("Slice", {c.gy[0], b.ints(st), b.ints(en), b.ints(ax)});
  return OkStatus();
}

Status layernorm_rule(RuleCtx& c) {
  Builder& b = c.b;
  const Shape& xs = c.in[0].shape;
  const int64_t r = static_cast<int64_t>(xs.size());
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(attr_int(c.node, "axis", -1), r));
  const DType dt = c.dtype();
  const std::vector<int64_t> axes = iota(axis, r);
  auto mean = [&](const std::string& v) {
    return b.op("ReduceMean", {v}, {{"axes", axes}, {"keepdims", int64_t{1}}});
  };
  const std::string d = b.op("Sub", {c.x(0), mean(c.x(0))});
  const std::string var = mean(b.op("Mul", {d, d}));
  const std::string inv = b.op(
      "Reciprocal",
      {b.op("Sqrt", {b.op("Add", {var, b.scalar(dt, attr_float(c.node, "epsilon", 1e-5f))})})});
  const std::string xhat = b.op("Mul", {d, inv});
  const std::string& gy = c.gy[0];
  if (c.needs[0]) {
    const std::string gh = b.op("Mul", {gy, c.x(1)});
    const std::string t = b.op(
        "Sub", {b.op("Sub", {gh, mean(gh)}), b.op("Mul", {xhat, mean(b.op("Mul", {gh, xhat}))})});
    c.gx[0] = b.op("Mul", {inv, t});
  }
  if (c.needs[1]) c.gx[1] = b.unbroadcast(b.op("Mul", {gy, xhat}), xs, c.in[1].shape);
  if (c.has_input(2) && c.needs[2]) c.gx[2] = b.unbroadcast(gy, xs, c.in[2].shape);
  return OkStatus();
}

Status batchnorm_rule(RuleCtx& c) {
  Builder& b = c.b;
  const Shape& xs = c.in[0].shape;
  const int64_t r = static_cast<int64_t>(xs.size());
  const DType dt = c.dtype();
  const bool training = attr_int(c.node, "training_mode", 0) != 0;
  const float eps = attr_float(c.node, "epsilon", 1e-5f);
  std::vector<int64_t> axes{0};
  for (int64_t i = 2; i < r; ++i) axes.push_back(i);
  Shape cshape(r, 1);
  if (r > 1) cshape[1] = xs[1];
  auto per_channel = [&](const std::string& v) { return b.reshape(v, cshape); };
  auto mean = [&](const std::string& v) {
    return b.op("ReduceMean", {v}, {{"axes", axes}, {"keepdims", int64_t{1}}});
  };
  std::string d, var;
  if (training) {
    d = b.op("Sub", {c.x(0), mean(c.x(0))});
    var = mean(b.op("Mul", {d, d}));
  } else {
    d = b.op("Sub", {c.x(0), per_channel(c.x(3))});
    var = per_channel(c.x(4));
  }
  const std::string inv =
      b.op("Reciprocal", {b.op("Sqrt", {b.op("Add", {var, b.scalar(dt, eps)})})});
  const std::string xhat = b.op("Mul", {d, inv});
  const std::string& gy = c.gy[0];
  if (c.needs[0]) {
    const std::string gh = b.op("Mul", {gy, per_channel(c.x(1))});
    if (training) {
      const std::string t = b.op(
          "Sub", {b.op("Sub", {gh, mean(gh)}), b.op("Mul", {xhat, mean(b.op("Mul", {gh, xhat}))})});
      c.gx[0] = b.op("Mul", {inv, t});
    } else {
      c.gx[0] = b.op("Mul", {gh, inv});
    }
  }
  if (c.needs[1]) c.gx[1] = b.reduce_sum(b.op("Mul", {gy, xhat}), axes, false);
  if (c.needs[2]) c.gx[2] = b.reduce_sum(gy, axes, false);
  if ((c.needs.size() > 3 && c.needs[3]) || (c.needs.size() > 4 && c.needs[4]))
    return c.error("gradient with respect to the running mean or variance");
  return OkStatus();
}

Status dropout_rule(RuleCtx& c) {
  Builder& b = c.b;
  bool training = false;
  if (c.has_input(2)) {
    TD_ASSIGN_OR_RETURN(auto t, c.const_ints(2));
    training = t && !t->empty() && (*t)[0] != 0;
  }
  if (!training) {
    c.gx[0] = c.gy[0];
    return OkStatus();
  }
  double ratio = 0.5;
  if (c.has_input(1)) {
    auto it = c.constants.find(c.x(1));
    if (it == c.constants.end()) return c.error("ratio must be a constant");
    ratio = it->second.to_double_vector().at(0);
  }
  std::string mask;
  if (c.node.outputs.size() > 1 && !c.node.outputs[1].empty()) {
    mask = c.node.outputs[1];
  } else if (c.node.attrs.count("seed")) {
    mask = b.op_n("Dropout", c.node.inputs, c.node.attrs, 2)[1];  // the same seed: the same mask
  } else {
    return c.error("training mode without its mask output or a seed (the mask is not known)");
  }
  const double scale = ratio < 1 ? 1.0 / (1.0 - ratio) : 0.0;
  c.gx[0] = b.op("Mul", {b.op("Mul", {c.gy[0], b.op("Cast", {mask}, {{"to", int64_t(c.dtype())}})}),
                         b.scalar(c.dtype(), scale)});
  return OkStatus();
}

Status minmax_rule(RuleCtx& c) {  // Max, Min: the gradient goes to the input that was chosen
  Builder& b = c.b;
  const DType dt = c.out[0].dtype;
  for (size_t i = 0; i < c.node.inputs.size(); ++i) {
    if (!c.needs[i]) continue;
    std::string g = b.op("Where", {b.op("Equal", {c.x(i), c.y(0)}), c.gy[0], b.scalar(dt, 0.0)});
    c.gx[i] = b.unbroadcast(g, c.out[0].shape, c.in[i].shape);
  }
  return OkStatus();
}

const std::map<std::string, Rule>& rules() {
  static const std::map<std::string, Rule> r = [] {
    std::map<std::string, Rule> m;
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow"}) m[op] = binary_rule;
    for (const char* op :
         {"Neg", "Exp", "Log", "Sqrt", "Abs", "Relu", "Sigmoid", "Tanh", "Identity", "Cast",
          "Reciprocal", "LeakyRelu", "Erf", "Sin", "Cos", "Softplus", "Elu", "Gelu"})
      m[op] = unary_rule;
    m["Sum"] = m["Mean"] = variadic_rule;
    m["MatMul"] = matmul_rule;
    m["Gemm"] = gemm_rule;
    m["ReduceSum"] = m["ReduceMean"] = reduce_rule;
    m["Softmax"] = m["LogSoftmax"] = softmax_rule;
    for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}) m[op] = reshape_rule;
    m["Expand"] = expand_rule;
    m["Transpose"] = transpose_rule;
    m["Concat"] = concat_rule;
    m["Slice"] = slice_rule;
    m["Gather"] = gather_rule;
    m["Conv"] = conv_rule;
    m["ConvTranspose"] = conv_transpose_rule;
    m["MaxPool"] = maxpool_rule;
    m["AveragePool"] = avgpool_rule;
    m["GlobalAveragePool"] = global_avgpool_rule;
    m["Where"] = where_rule;
    m["Max"] = m["Min"] = minmax_rule;
    m["Clip"] = clip_rule;
    m["Split"] = split_rule;
    m["Pad"] = pad_rule;
    m["LayerNormalization"] = layernorm_rule;
    m["BatchNormalization"] = batchnorm_rule;
    m["Dropout"] = dropout_rule;
    m["NegativeLogLikelihoodLoss"] = nll_rule;
    m["SoftmaxCrossEntropyLoss"] = sce_rule;
    return m;
  }();
  return r;
}

}  // namespace

std::vector<std::string> gradient_ops() {
  std::vector<std::string> v;
  for (const auto& [k, _] : rules()) v.push_back(k);
  return v;
}

namespace {

// ---- LSTM and GRU: differentiated as their unrolled steps
// An LSTM or GRU node on the path from a parameter to the loss is replaced by the same
// computation written step by step in ops that have rules (MatMul, Slice, Sigmoid, Tanh, Mul,
// Add, Concat ...), with the node's own output names, and the graph is differentiated as usual.
// The forward pass of such a graph runs unrolled too. Taken: the default activations, no
// peepholes, no clip, no sequence_lens, input_forget 0, layout 0 or 1, any direction; GRU with
// linear_before_reset 0 or 1. Anything else is refused naming the node and the attribute.
Status unroll_rnn(const Node& n, const GraphTypes& types, Graph& out, int index) {
  const bool lstm = n.op == "LSTM";
  const int gates = lstm ? 4 : 3;
  auto where = [&](const std::string& what) {
    return errors::Unimplemented("gradients: {} '{}': {} (the gradient unrolls LSTM/GRU and takes "
                                 "their default form)",
                                 n.op, n.name, what);
  };
  auto input = [&](size_t i) { return i < n.inputs.size() ? n.inputs[i] : std::string(); };
  if (!input(4).empty()) return where("sequence_lens is not supported");
  if (lstm && !input(7).empty()) return where("peepholes (P) are not supported");
  if (n.attrs.count("clip")) return where("clip is not supported");
  if (n.attrs.count("activations")) return where("activations other than the defaults");
  if (lstm && attr_int(n, "input_forget", 0) != 0) return where("input_forget is not supported");
  const int64_t layout = attr_int(n, "layout", 0);
  const int64_t lbr = lstm ? 0 : attr_int(n, "linear_before_reset", 0);
  const std::string direction = attr_string(n, "direction", "forward");
  auto type = [&](const std::string& v) -> Result<TensorType> {
    auto it = types.values.find(v);
    if (it == types.values.end() || !it->second.ok() || !shape_is_static(it->second->shape))
      return where("input '" + v + "' has no static shape");
    return *it->second;
  };
  TD_ASSIGN_OR_RETURN(TensorType xt, type(input(0)));
  TD_ASSIGN_OR_RETURN(TensorType rt, type(input(2)));
  if (xt.shape.size() != 3 || rt.shape.size() != 3) return where("X and R must be rank 3");
  const DType dt = xt.dtype;
  const int64_t D = rt.shape[0], H = rt.shape[2];
  Builder b(out, types, "__rnn" + std::to_string(index) + "_");
  auto idx = [&](int64_t v) { return b.constant(scalar_tensor(DType::kInt64, static_cast<double>(v))); };
  auto slice = [&](const std::string& v, int64_t axis, int64_t from, int64_t to) {
    return b.op("Slice", {v, b.ints({from}), b.ints({to}), b.ints({axis})});
  };
  // X as [S, N, I].
  std::string X = input(0);
  if (layout == 1) X = b.transpose(X, {1, 0, 2});
  const int64_t S = layout == 1 ? xt.shape[1] : xt.shape[0];
  const int64_t N = layout == 1 ? xt.shape[0] : xt.shape[1];
  auto initial = [&](const std::string& v) {  // [D, N, H] (layout 1: [N, D, H])
    if (v.empty()) return std::string();
    return layout == 1 ? b.transpose(v, {1, 0, 2}) : v;
  };
  const std::string h0 = initial(input(5)), c0 = lstm ? initial(input(6)) : std::string();
  std::vector<std::string> ys, hs, cs;
  for (int64_t d = 0; d < D; ++d) {
    const bool reverse = direction == "reverse" || (direction == "bidirectional" && d == 1);
    const std::string Wd = b.transpose(b.op("Gather", {input(1), idx(d)}, {{"axis", int64_t{0}}}), {1, 0});
    const std::string Rd = b.transpose(b.op("Gather", {input(2), idx(d)}, {{"axis", int64_t{0}}}), {1, 0});
    std::string xw = b.op("MatMul", {X, Wd});  // [S, N, gates H]
    std::string rb;  // the recurrent bias (GRU keeps its h part apart)
    if (!input(3).empty()) {
      const std::string Bd = b.op("Gather", {input(3), idx(d)}, {{"axis", int64_t{0}}});
      const std::string wb = slice(Bd, 0, 0, gates * H), rbias = slice(Bd, 0, gates * H, 2 * gates * H);
      if (lstm) {
        xw = b.op("Add", {xw, b.op("Add", {wb, rbias})});
      } else {
        xw = b.op("Add", {xw, wb});
        rb = rbias;
      }
    }
    std::string h = h0.empty() ? b.zeros(dt, {N, H})
                               : b.op("Gather", {h0, idx(d)}, {{"axis", int64_t{0}}});
    std::string c;
    if (lstm)
      c = c0.empty() ? b.zeros(dt, {N, H}) : b.op("Gather", {c0, idx(d)}, {{"axis", int64_t{0}}});
    std::vector<std::string> steps(static_cast<size_t>(S));
    for (int64_t k = 0; k < S; ++k) {
      const int64_t t = reverse ? S - 1 - k : k;
      const std::string x = b.op("Gather", {xw, idx(t)}, {{"axis", int64_t{0}}});  // [N, gates H]
      if (lstm) {
        const std::string g = b.op("Add", {x, b.op("MatMul", {h, Rd})});
        const std::string i = b.op("Sigmoid", {slice(g, 1, 0, H)});
        const std::string o = b.op("Sigmoid", {slice(g, 1, H, 2 * H)});
        const std::string f = b.op("Sigmoid", {slice(g, 1, 2 * H, 3 * H)});
        const std::string cc = b.op("Tanh", {slice(g, 1, 3 * H, 4 * H)});
        c = b.op("Add", {b.op("Mul", {f, c}), b.op("Mul", {i, cc})});
        h = b.op("Mul", {o, b.op("Tanh", {c})});
      } else {
        std::string hr = b.op("MatMul", {h, slice(Rd, 1, 0, 2 * H)});  // [N, 2H]
        if (!rb.empty()) hr = b.op("Add", {hr, slice(rb, 0, 0, 2 * H)});
        const std::string z = b.op("Sigmoid", {b.op("Add", {slice(x, 1, 0, H), slice(hr, 1, 0, H)})});
        const std::string r = b.op("Sigmoid", {b.op("Add", {slice(x, 1, H, 2 * H), slice(hr, 1, H, 2 * H)})});
        const std::string Rh = slice(Rd, 1, 2 * H, 3 * H);
        std::string rec;
        if (lbr) {
          rec = b.op("MatMul", {h, Rh});
          if (!rb.empty()) rec = b.op("Add", {rec, slice(rb, 0, 2 * H, 3 * H)});
          rec = b.op("Mul", {r, rec});
        } else {
          rec = b.op("MatMul", {b.op("Mul", {r, h}), Rh});
          if (!rb.empty()) rec = b.op("Add", {rec, slice(rb, 0, 2 * H, 3 * H)});
        }
        const std::string hh = b.op("Tanh", {b.op("Add", {slice(x, 1, 2 * H, 3 * H), rec})});
        // (1 - z) hh + z h = hh + z (h - hh)
        h = b.op("Add", {hh, b.op("Mul", {z, b.op("Sub", {h, hh})})});
      }
      steps[static_cast<size_t>(t)] = b.op("Unsqueeze", {h, b.ints({0})});  // [1, N, H]
    }
    ys.push_back(b.op("Unsqueeze", {b.op("Concat", steps, {{"axis", int64_t{0}}}), b.ints({1})}));
    hs.push_back(b.op("Unsqueeze", {h, b.ints({0})}));
    if (lstm) cs.push_back(b.op("Unsqueeze", {c, b.ints({0})}));
  }
  auto name = [&](const std::string& v, std::vector<std::string> parts, int64_t axis,
                  const std::vector<int64_t>& perm) {
    if (v.empty()) return;
    std::string all = parts.size() == 1 ? parts[0] : b.op("Concat", parts, {{"axis", axis}});
    if (layout == 1) all = b.transpose(all, perm);
    Node id;
    id.op = "Identity";
    id.name = n.name.empty() ? v + "_unrolled" : n.name + "_unrolled_" + v;
    id.inputs = {all};
    id.outputs = {v};
    out.nodes.push_back(std::move(id));
  };
  auto output = [&](size_t i) { return i < n.outputs.size() ? n.outputs[i] : std::string(); };
  name(output(0), ys, 1, {2, 0, 1, 3});  // Y: [S, D, N, H] (layout 1: [N, S, D, H])
  name(output(1), hs, 0, {1, 0, 2});     // Y_h: [D, N, H] (layout 1: [N, D, H])
  if (lstm) name(output(2), cs, 0, {1, 0, 2});
  return OkStatus();
}

}  // namespace

Result<Graph> gradients(const Graph& graph, const std::string& loss,
                        const std::vector<std::string>& wrt,
                        const std::vector<TensorType>& input_types_in) {
  std::vector<TensorType> input_types = input_types_in;
  if (input_types.empty())
    for (const ValueInfo& v : graph.inputs) input_types.push_back(v.type);
  if (input_types.size() != graph.inputs.size())
    return errors::InvalidArgument("gradients: {} input types for a graph of {} inputs",
                                   input_types.size(), graph.inputs.size());
  for (size_t i = 0; i < input_types.size(); ++i)
    if (!shape_is_static(input_types[i].shape))
      return errors::InvalidArgument(
          "gradients: input '{}' has shape {}; the backward graph needs static shapes",
          graph.inputs[i].name, shape_to_string(input_types[i].shape));
  TD_ASSIGN_OR_RETURN(GraphTypes types, infer_graph(OpRegistry::global(), graph, input_types));
  auto type_of = [&](const std::string& name) -> Result<TensorType> {
    auto it = types.values.find(name);
    if (it == types.values.end())
      return errors::NotFound("gradients: no value '{}' in the graph", name);
    return it->second;
  };
  TD_ASSIGN_OR_RETURN(TensorType loss_type, type_of(loss));
  if (!dtype_is_float(loss_type.dtype))
    return errors::InvalidArgument("gradients: the loss '{}' is {}, not floating point", loss,
                                   dtype_name(loss_type.dtype));
  std::set<std::string> from_wrt;
  for (const std::string& w : wrt) {
    TD_ASSIGN_OR_RETURN(TensorType t, type_of(w));
    if (!dtype_is_float(t.dtype))
      return errors::InvalidArgument("gradients: '{}' is {}; gradients are for floating point", w,
                                     dtype_name(t.dtype));
    from_wrt.insert(w);
  }
  for (size_t i : types.order) {
    const Node& n = graph.nodes[i];
    bool hit = false;
    for (const std::string& in : n.inputs) hit |= !in.empty() && from_wrt.count(in) > 0;
    if (hit)
      for (const std::string& o : n.outputs)
        if (!o.empty()) from_wrt.insert(o);
  }
  std::set<std::string> to_loss{loss};
  for (auto it = types.order.rbegin(); it != types.order.rend(); ++it) {
    const Node& n = graph.nodes[*it];
    bool hit = false;
    for (const std::string& o : n.outputs) hit |= !o.empty() && to_loss.count(o) > 0;
    if (hit)
      for (const std::string& in : n.inputs)
        if (!in.empty()) to_loss.insert(in);
  }
  auto active = [&](const std::string& v) {
    return !v.empty() && from_wrt.count(v) && to_loss.count(v);
  };
  // LSTM/GRU nodes on the path: unrolled, then the graph differentiated again.
  {
    bool any_rnn = false;
    for (const Node& n : graph.nodes)
      if (n.op == "LSTM" || n.op == "GRU")
        for (const std::string& o : n.outputs) any_rnn |= active(o);
    if (any_rnn) {
      Graph unrolled = graph;
      unrolled.nodes.clear();
      std::vector<bool> generated;  // by node of `unrolled`: made by unroll_rnn
      std::vector<bool> renaming;   // ... and the Identity naming an RNN output
      int index = 0;
      for (const Node& n : graph.nodes) {
        bool on_path = false;
        if (n.op == "LSTM" || n.op == "GRU")
          for (const std::string& o : n.outputs) on_path |= active(o);
        if (!on_path) {
          unrolled.nodes.push_back(n);
          generated.push_back(false);
          renaming.push_back(false);
          continue;
        }
        TD_RETURN_IF_ERROR(unroll_rnn(n, types, unrolled, index++));
        while (generated.size() < unrolled.nodes.size()) {
          const Node& u = unrolled.nodes[generated.size()];
          generated.push_back(true);
          renaming.push_back(u.op == "Identity" && u.outputs.size() == 1 &&
                             std::find(n.outputs.begin(), n.outputs.end(), u.outputs[0]) !=
                                 n.outputs.end());
        }
      }
      TD_ASSIGN_OR_RETURN(Graph g2, gradients(unrolled, loss, wrt, input_types_in));
      // What callers rely on: the forward graph's own nodes first, unchanged (the RNN node
      // still computes its outputs), then the unrolled steps the backward reads, then the
      // backward. The Identity nodes that named the RNN's outputs go: the node makes them.
      Graph result = g2;
      result.nodes = graph.nodes;
      for (size_t i = 0; i < unrolled.nodes.size(); ++i)
        if (generated[i] && !renaming[i]) result.nodes.push_back(g2.nodes[i]);
      for (size_t i = unrolled.nodes.size(); i < g2.nodes.size(); ++i)
        result.nodes.push_back(g2.nodes[i]);
      return result;
    }
  }

  Graph out = graph;
  out.outputs.clear();
  Builder b(out, types);
  std::map<std::string, std::vector<std::string>> contribs;
  auto grad_of = [&](const std::string& v) -> std::string {
    auto it = contribs.find(v);
    if (it == contribs.end() || it->second.empty()) return "";
    if (it->second.size() > 1) it->second = {b.op("Sum", it->second)};
    return it->second[0];
  };
  {
    std::string seed = b.scalar(loss_type.dtype, 1.0);
    if (!loss_type.shape.empty()) seed = b.expand(seed, loss_type.shape);
    contribs[loss].push_back(seed);
  }
  for (auto it = types.order.rbegin(); it != types.order.rend(); ++it) {
    const Node& n = graph.nodes[*it];
    bool any = false;
    for (const std::string& o : n.outputs) any |= active(o);
    if (!any) continue;
    std::vector<bool> needs(n.inputs.size());
    bool need_any = false;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (!active(n.inputs[i])) continue;
      auto t = type_of(n.inputs[i]);
      needs[i] = t.ok() && dtype_is_float(t->dtype);
      need_any |= needs[i];
    }
    if (!need_any) continue;
    std::vector<std::string> gy;
    bool have = false;
    for (const std::string& o : n.outputs) {
      gy.push_back(active(o) ? grad_of(o) : "");
      have |= !gy.back().empty();
    }
    if (!have) continue;
    if (!n.domain.empty() && n.domain != "ai.onnx")
      return errors::Unimplemented("gradients: no gradient rule for op '{}.{}' ({})", n.domain,
                                   n.op, n.label());
    auto rule = rules().find(n.op);
    if (rule == rules().end())
      return errors::Unimplemented("gradients: no gradient rule for op '{}' ({})", n.op, n.label());
    RuleCtx c{n, b, gy, {}, {}, needs, std::vector<std::string>(n.inputs.size()), types.constants};
    for (const std::string& in : n.inputs) {
      if (in.empty()) {
        c.in.push_back({});
        continue;
      }
      TD_ASSIGN_OR_RETURN(TensorType t, type_of(in));
      c.in.push_back(t);
    }
    for (const std::string& o : n.outputs) {
      if (o.empty()) {
        c.out.push_back({});
        continue;
      }
      TD_ASSIGN_OR_RETURN(TensorType t, type_of(o));
      c.out.push_back(t);
    }
    // Rules other than the losses' use the first output's gradient only.
    if (gy[0].empty() && n.op != "SoftmaxCrossEntropyLoss" && n.op != "Split")
      return errors::Unimplemented("gradients: {}: only its first output has a gradient rule",
                                   n.label());
    TD_RETURN_IF_ERROR(rule->second(c));
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (needs[i] && !c.gx[i].empty()) contribs[n.inputs[i]].push_back(c.gx[i]);
  }
  std::set<std::string> done;
  for (const std::string& w : wrt) {
    TD_ASSIGN_OR_RETURN(TensorType t, type_of(w));
    const std::string name = gradient_name(w);
    if (done.insert(w).second) {
      std::string g = to_loss.count(w) ? grad_of(w) : "";
      if (g.empty()) g = b.zeros(t.dtype, t.shape);
      Node id;
      id.name = "__grad_out_" + w;
      id.op = "Identity";
      id.inputs = {g};
      id.outputs = {name};
      out.nodes.push_back(std::move(id));
    }
    out.outputs.push_back({name, t});
  }
  return out;
}

}  // namespace tensord
