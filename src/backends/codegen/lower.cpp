#include "backends/codegen/lower.h"

#include <map>
#include <unordered_map>

#include "core/errors.h"
#include "core/node_attrs.h"
#include "core/op_registry.h"

namespace tensord::codegen {
namespace {

enum class Cls { kUnaryFloat, kUnaryNumeric, kNot, kArith, kDiv, kPow, kMod, kPRelu, kCompare,
                 kEqual, kLogic, kMinMax, kSumMean, kWhere, kCast, kClip };

struct OpInfo {
  Cls cls;
  const char* ir;
};

const std::map<std::string, OpInfo>& ops() {
  static const std::map<std::string, OpInfo> t = {
      {"Sqrt", {Cls::kUnaryFloat, "sqrt"}},       {"Exp", {Cls::kUnaryFloat, "exp"}},
      {"Log", {Cls::kUnaryFloat, "log"}},         {"Tanh", {Cls::kUnaryFloat, "tanh"}},
      {"Floor", {Cls::kUnaryFloat, "floor"}},     {"Ceil", {Cls::kUnaryFloat, "ceil"}},
      {"Sin", {Cls::kUnaryFloat, "sin"}},         {"Cos", {Cls::kUnaryFloat, "cos"}},
      {"Tan", {Cls::kUnaryFloat, "tan"}},         {"Asin", {Cls::kUnaryFloat, "asin"}},
      {"Acos", {Cls::kUnaryFloat, "acos"}},       {"Atan", {Cls::kUnaryFloat, "atan"}},
      {"Sinh", {Cls::kUnaryFloat, "sinh"}},       {"Cosh", {Cls::kUnaryFloat, "cosh"}},
      {"Asinh", {Cls::kUnaryFloat, "asinh"}},     {"Acosh", {Cls::kUnaryFloat, "acosh"}},
      {"Atanh", {Cls::kUnaryFloat, "atanh"}},     {"Erf", {Cls::kUnaryFloat, "erf"}},
      {"Round", {Cls::kUnaryFloat, "round"}},     {"Reciprocal", {Cls::kUnaryFloat, "reciprocal"}},
      {"Sigmoid", {Cls::kUnaryFloat, "sigmoid"}}, {"Softplus", {Cls::kUnaryFloat, "softplus"}},
      {"Softsign", {Cls::kUnaryFloat, "softsign"}}, {"HardSwish", {Cls::kUnaryFloat, "hard_swish"}},
      {"LeakyRelu", {Cls::kUnaryFloat, "leaky_relu"}}, {"Elu", {Cls::kUnaryFloat, "elu"}},
      {"Selu", {Cls::kUnaryFloat, "selu"}},       {"Celu", {Cls::kUnaryFloat, "celu"}},
      {"HardSigmoid", {Cls::kUnaryFloat, "hard_sigmoid"}},
      {"ThresholdedRelu", {Cls::kUnaryFloat, "thresholded_relu"}},
      {"Gelu", {Cls::kUnaryFloat, "gelu"}},
      {"IsNaN", {Cls::kUnaryFloat, "isnan"}},     {"IsInf", {Cls::kUnaryFloat, "isinf"}},
      {"Neg", {Cls::kUnaryNumeric, "neg"}},       {"Abs", {Cls::kUnaryNumeric, "abs"}},
      {"Sign", {Cls::kUnaryNumeric, "sign"}},     {"Relu", {Cls::kUnaryNumeric, "relu"}},
      {"Not", {Cls::kNot, "not"}},
      {"Add", {Cls::kArith, "add"}},              {"Sub", {Cls::kArith, "sub"}},
      {"Mul", {Cls::kArith, "mul"}},              {"Div", {Cls::kDiv, "div"}},
      {"Pow", {Cls::kPow, "pow"}},                {"Mod", {Cls::kMod, "fmod"}},
      {"PRelu", {Cls::kPRelu, "prelu"}},
      {"Equal", {Cls::kEqual, "eq"}},             {"Less", {Cls::kCompare, "lt"}},
      {"Greater", {Cls::kCompare, "gt"}},         {"LessOrEqual", {Cls::kCompare, "le"}},
      {"GreaterOrEqual", {Cls::kCompare, "ge"}},
      {"And", {Cls::kLogic, "and"}},              {"Or", {Cls::kLogic, "or"}},
      {"Xor", {Cls::kLogic, "xor"}},
      {"Max", {Cls::kMinMax, "max"}},             {"Min", {Cls::kMinMax, "min"}},
      {"Sum", {Cls::kSumMean, "add"}},            {"Mean", {Cls::kSumMean, "add"}},
      {"Where", {Cls::kWhere, ""}},               {"Cast", {Cls::kCast, ""}},
      {"CastLike", {Cls::kCast, ""}},             {"Clip", {Cls::kClip, ""}}};
  return t;
}

}  // namespace

std::vector<std::string> elementwise_ops() {
  std::vector<std::string> names;
  for (const auto& [name, info] : ops()) names.push_back(name);
  return names;
}

namespace {

bool numeric(Scalar s) { return s != Scalar::kBool; }

Status refuse(const Node& node, const std::string& why) {
  return errors::Unimplemented("{}: generated kernels {} ({})", node.op, why, node.label());
}

// The target of a Cast / CastLike.
Result<Scalar> cast_target(const Node& node, const std::vector<TensorType>& inputs, bool halves) {
  if (node.op == "CastLike") {
    if (inputs.size() < 2) return refuse(node, "need the target input");
    return compute_scalar_of(inputs[1].dtype, halves);
  }
  NodeAttrs attrs(node);
  TD_ASSIGN_OR_RETURN(int64_t to, attrs.attr_int("to", 0));
  return compute_scalar_of(static_cast<DType>(to), halves);
}

}  // namespace

Status elementwise_supported(const Node& node, const std::vector<TensorType>& inputs,
                             const std::function<const HostTensor*(const std::string&)>& constant,
                             bool halves) {
  if (!node.domain.empty() && node.domain != "ai.onnx") return refuse(node, "cover ai.onnx only");
  auto it = ops().find(node.op);
  if (it == ops().end() || !is_elementwise_kind(op_kind(node.op))) return refuse(node, "have no such op");
  if (node.outputs.size() != 1) return refuse(node, "produce one output only");
  const Cls cls = it->second.cls;
  std::vector<Scalar> t;  // what each input is computed in
  std::vector<DType> dt;  // and its dtype (float16 and float32 both compute in kF32)
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      t.push_back(Scalar::kF32);
      dt.push_back(DType::kFloat32);
      continue;
    }
    auto s = compute_scalar_of(inputs[i].dtype, halves);
    if (!s.ok()) return refuse(node, std::string("have no code for ") + dtype_name(inputs[i].dtype));
    t.push_back(*s);
    dt.push_back(inputs[i].dtype);
  }
  auto arity = [&](size_t lo, size_t hi) -> Status {
    if (inputs.size() < lo || inputs.size() > hi) return refuse(node, "expect another arity");
    for (size_t i = 0; i < lo; ++i)
      if (!inputs[i].defined()) return refuse(node, "need every input");
    return OkStatus();
  };
  auto same = [&]() -> Status {
    for (size_t i = 1; i < dt.size(); ++i)
      if (dt[i] != dt[0]) return refuse(node, "need inputs of one dtype");
    return OkStatus();
  };
  switch (cls) {
    case Cls::kUnaryFloat:
      TD_RETURN_IF_ERROR(arity(1, 1));
      if (node.op == "Gelu") {
        NodeAttrs attrs(node);
        auto approx = attrs.attr_string("approximate", "none");
        if (!approx.ok() || (*approx != "none" && *approx != "tanh"))
          return refuse(node, "cover Gelu's approximate 'none' and 'tanh' only");
      }
      return t[0] == Scalar::kF32 ? OkStatus() : refuse(node, "compute it in float32 only");
    case Cls::kUnaryNumeric:
      TD_RETURN_IF_ERROR(arity(1, 1));
      return numeric(t[0]) ? OkStatus() : refuse(node, "need a numeric input");
    case Cls::kNot:
      TD_RETURN_IF_ERROR(arity(1, 1));
      return t[0] == Scalar::kBool ? OkStatus() : refuse(node, "need a bool input");
    case Cls::kArith:
    case Cls::kPRelu:
    case Cls::kCompare:
      TD_RETURN_IF_ERROR(arity(2, 2));
      TD_RETURN_IF_ERROR(same());
      return numeric(t[0]) ? OkStatus() : refuse(node, "need numeric inputs");
    case Cls::kEqual:
      TD_RETURN_IF_ERROR(arity(2, 2));
      return same();
    case Cls::kDiv:
    case Cls::kPow:
      // Integer division checks for zero divisors (an error), which a kernel cannot report.
      TD_RETURN_IF_ERROR(arity(2, 2));
      TD_RETURN_IF_ERROR(same());
      return t[0] == Scalar::kF32 ? OkStatus() : refuse(node, "compute it in float32 only");
    case Cls::kMod: {
      TD_RETURN_IF_ERROR(arity(2, 2));
      TD_RETURN_IF_ERROR(same());
      NodeAttrs attrs(node);
      TD_ASSIGN_OR_RETURN(int64_t fmod, attrs.attr_int("fmod", 0));
      return t[0] == Scalar::kF32 && fmod ? OkStatus() : refuse(node, "compute float fmod only");
    }
    case Cls::kLogic:
      TD_RETURN_IF_ERROR(arity(2, 2));
      return t[0] == Scalar::kBool && t[1] == Scalar::kBool ? OkStatus()
                                                            : refuse(node, "need bool inputs");
    case Cls::kMinMax:
    case Cls::kSumMean:
      TD_RETURN_IF_ERROR(arity(1, 64));
      TD_RETURN_IF_ERROR(same());
      if (cls == Cls::kSumMean && t[0] != Scalar::kF32)
        return refuse(node, "compute it in float32 only");
      return numeric(t[0]) ? OkStatus() : refuse(node, "need numeric inputs");
    case Cls::kWhere:
      TD_RETURN_IF_ERROR(arity(3, 3));
      if (t[0] != Scalar::kBool || dt[1] != dt[2]) return refuse(node, "need a bool condition");
      return OkStatus();
    case Cls::kCast: {
      TD_RETURN_IF_ERROR(arity(1, 2));
      auto to = cast_target(node, inputs, halves);
      if (!to.ok()) return refuse(node, "cover float32, int32, int64 and bool casts only");
      return OkStatus();
    }
    case Cls::kClip: {
      TD_RETURN_IF_ERROR(arity(1, 3));
      if (!numeric(t[0])) return refuse(node, "need a numeric input");
      for (size_t i = 1; i < inputs.size(); ++i) {
        if (!inputs[i].defined()) continue;
        if (dt[i] != dt[0]) return refuse(node, "need bounds of the input's dtype");
        if (!shape_is_static(inputs[i].shape) || shape_numel(inputs[i].shape) != 1)
          return refuse(node, "need one-element bounds");
      }
      return OkStatus();
    }
  }
  return refuse(node, "have no such op");
}

Result<LoweredGroup> lower_elementwise(
    const std::vector<const Node*>& nodes, const std::vector<std::string>& outputs,
    const Shape& out_shape, const std::function<const TensorType*(const std::string&)>& type_of,
    const std::function<const HostTensor*(const std::string&)>& constant, bool halves) {
  LoweredGroup g;
  ElementwiseKernel& k = g.kernel;
  k.dims.assign(out_shape.begin(), out_shape.end());
  Builder b(k);
  std::unordered_map<std::string, int> val;
  std::map<std::string, int> counts;
  auto get = [&](const std::string& name) -> Result<int> {
    if (auto it = val.find(name); it != val.end()) return it->second;
    const TensorType* t = type_of(name);
    if (!t) return errors::Internal("generated kernel: no type for '{}'", name);
    TD_ASSIGN_OR_RETURN(Scalar s, compute_scalar_of(t->dtype, halves));
    const Storage storage = storage_of(t->dtype);
    const HostTensor* c = constant ? constant(name) : nullptr;
    int v = -1;
    if (c && c->numel() == 1 && c->dtype() == t->dtype) {
      double x = 0;
      bool exact = true;
      switch (s) {
        case Scalar::kF32:
          if (storage == Storage::kF16) x = half_to_float(c->data<uint16_t>()[0]);
          else if (storage == Storage::kBF16) x = bfloat16_to_float(c->data<uint16_t>()[0]);
          else x = c->data<float>()[0];
          break;
        case Scalar::kI32: x = c->data<int32_t>()[0]; break;
        case Scalar::kI64: {
          const int64_t i = c->data<int64_t>()[0];
          x = static_cast<double>(i);
          exact = i > -(int64_t{1} << 53) && i < (int64_t{1} << 53);
          break;
        }
        case Scalar::kBool: x = c->data<bool>()[0] ? 1 : 0; break;
      }
      if (exact) v = b.constant(s, x);
    }
    if (v < 0) {
      if (!shape_is_static(t->shape))
        return errors::Unimplemented("generated kernel: '{}' has a dynamic shape", name);
      Param p;
      p.type = s;
      p.storage = storage;
      TD_ASSIGN_OR_RETURN(p.strides, broadcast_strides(t->shape, out_shape));
      k.inputs.push_back(p);
      g.params.push_back(name);
      g.constants.push_back(c);
      v = b.load(static_cast<int>(k.inputs.size()) - 1);
    }
    val[name] = v;
    return v;
  };
  for (const Node* n : nodes) {
    const Node& node = *n;
    std::vector<TensorType> in_types;
    for (const auto& name : node.inputs) {
      const TensorType* t = name.empty() ? nullptr : type_of(name);
      in_types.push_back(t ? *t : TensorType{});
    }
    TD_RETURN_IF_ERROR(elementwise_supported(node, in_types, constant, halves));
    const TensorType* out_t = type_of(node.outputs[0]);
    if (!out_t || out_t->shape != out_shape)
      return errors::Unimplemented("generated kernel: {} is not over the group's shape", node.label());
    std::vector<int> in;
    for (const auto& name : node.inputs) {
      if (name.empty()) {
        in.push_back(-1);
        continue;
      }
      TD_ASSIGN_OR_RETURN(int x, get(name));
      in.push_back(x);
    }
    const OpInfo& info = ops().at(node.op);
    NodeAttrs attrs(node);
    int r = -1;
    switch (info.cls) {
      case Cls::kUnaryFloat: {
        double alpha = 0, beta = 0;
        if (node.op == "LeakyRelu") {
          TD_ASSIGN_OR_RETURN(alpha, attrs.attr_float("alpha", 0.01f));
        } else if (node.op == "Elu" || node.op == "Celu" || node.op == "ThresholdedRelu") {
          TD_ASSIGN_OR_RETURN(alpha, attrs.attr_float("alpha", 1.0f));
        } else if (node.op == "Selu") {
          TD_ASSIGN_OR_RETURN(alpha, attrs.attr_float("alpha", 1.67326319217681884765625f));
          TD_ASSIGN_OR_RETURN(beta, attrs.attr_float("gamma", 1.05070102214813232421875f));
        } else if (node.op == "HardSigmoid") {
          TD_ASSIGN_OR_RETURN(alpha, attrs.attr_float("alpha", 0.2f));
          TD_ASSIGN_OR_RETURN(beta, attrs.attr_float("beta", 0.5f));
        } else if (node.op == "Gelu") {  // alpha 1: the tanh approximation
          TD_ASSIGN_OR_RETURN(std::string approx, attrs.attr_string("approximate", "none"));
          alpha = approx == "tanh" ? 1 : 0;
        } else if (node.op == "IsInf") {
          TD_ASSIGN_OR_RETURN(int64_t pos, attrs.attr_int("detect_positive", 1));
          TD_ASSIGN_OR_RETURN(int64_t neg, attrs.attr_int("detect_negative", 1));
          alpha = pos != 0;
          beta = neg != 0;
        }
        r = b.unary(info.ir, in[0], alpha, beta);
        break;
      }
      case Cls::kUnaryNumeric:
      case Cls::kNot:
        r = b.unary(info.ir, in[0]);
        break;
      case Cls::kArith: case Cls::kDiv: case Cls::kPow: case Cls::kMod: case Cls::kPRelu:
      case Cls::kCompare: case Cls::kEqual: case Cls::kLogic:
        r = b.binary(info.ir, in[0], in[1]);
        break;
      case Cls::kMinMax:
      case Cls::kSumMean:
        r = in[0];
        for (size_t i = 1; i < in.size(); ++i) r = b.binary(info.ir, r, in[i]);
        if (node.op == "Mean")
          r = b.binary("div", r, b.constant(Scalar::kF32, static_cast<double>(in.size())));
        break;
      case Cls::kWhere:
        r = b.select(in[0], in[1], in[2]);
        break;
      case Cls::kCast: {
        TD_ASSIGN_OR_RETURN(Scalar to, cast_target(node, in_types, halves));
        r = b.type(in[0]) == to ? in[0] : b.cast(to, in[0]);
        break;
      }
      case Cls::kClip: {
        r = in[0];
        const Scalar t = b.type(r);
        int lo = in.size() > 1 ? in[1] : -1, hi = in.size() > 2 ? in[2] : -1;
        if (attrs.has_attr("min") && lo < 0) {  // opset < 11: bounds as attributes
          TD_ASSIGN_OR_RETURN(float m, attrs.attr_float("min", 0));
          lo = b.constant(t, m);
        }
        if (attrs.has_attr("max") && hi < 0) {
          TD_ASSIGN_OR_RETURN(float m, attrs.attr_float("max", 0));
          hi = b.constant(t, m);
        }
        // max then min, as the reference: when min > max every value becomes max.
        if (lo >= 0) r = b.select(b.binary("lt", r, lo), lo, r);
        if (hi >= 0) r = b.select(b.binary("gt", r, hi), hi, r);
        break;
      }
    }
    auto want = compute_scalar_of(out_t->dtype, halves);
    if (!want.ok() || *want != b.type(r))
      return errors::Internal("generated kernel: {} would produce {}, inference says {}",
                              node.label(), scalar_name(b.type(r)), dtype_name(out_t->dtype));
    // A float16/bfloat16 result is rounded to its dtype here, as the reference rounds each
    // node's result; a load of that dtype already is.
    if (const Storage st = storage_of(out_t->dtype); st != Storage::kPlain) {
      const Instr& def = k.body[static_cast<size_t>(r)];
      const bool exact = def.kind == Instr::kLoad && k.inputs[static_cast<size_t>(def.param)].storage == st;
      if (!exact) r = b.unary(st == Storage::kF16 ? "round_f16" : "round_bf16", r);
    }
    val[node.outputs[0]] = r;
    counts[node.op]++;
  }
  for (const auto& name : outputs) {
    auto it = val.find(name);
    if (it == val.end()) return errors::Internal("generated kernel: '{}' is not computed", name);
    int v = it->second;
    if (k.body[static_cast<size_t>(v)].kind == Instr::kLoad) {
      // Stored as is: still a value of the body (a load), fine.
    }
    const TensorType* t = type_of(name);
    k.outputs.push_back(Output{v, k.body[static_cast<size_t>(v)].type,
                               t ? storage_of(t->dtype) : Storage::kPlain});
  }
  simplify(k);
  size_t total = 0;
  std::string list;
  for (const auto& [op, n] : counts) {
    total += static_cast<size_t>(n);
    list += fmt::format("{}{} {}", list.empty() ? "" : ", ", n, op);
  }
  g.summary = fmt::format("{} op{} ({})", total, total == 1 ? "" : "s", list);
  return g;
}

namespace {

Result<Scalar> bits_of(DType dtype) {
  switch (dtype_size(dtype)) {
    case 1: return Scalar::kBool;
    case 4: return Scalar::kI32;
    case 8: return Scalar::kI64;
    default:
      return errors::Unimplemented("generated kernels move {}-byte elements ({}) not yet",
                                   dtype_size(dtype), dtype_name(dtype));
  }
}

ElementwiseKernel copy_kernel(Scalar t, std::vector<int64_t> dims, std::vector<int64_t> strides,
                              int64_t offset = 0) {
  ElementwiseKernel k;
  k.name = "tensord_move";
  k.dims = std::move(dims);
  k.inputs.push_back(Param{t, std::move(strides), offset});
  Builder b(k);
  const int v = b.load(0);
  k.outputs.push_back(Output{v, t});
  simplify(k);
  return k;
}

}  // namespace

Result<ElementwiseKernel> lower_transpose(const Shape& in, const std::vector<int64_t>& perm,
                                          DType dtype) {
  TD_ASSIGN_OR_RETURN(Scalar t, bits_of(dtype));
  if (perm.size() != in.size()) return errors::InvalidArgument("Transpose: perm does not match the rank");
  std::vector<int64_t> in_strides(in.size(), 1);
  for (size_t d = in.size(); d-- > 1;) in_strides[d - 1] = in_strides[d] * in[d];
  std::vector<int64_t> dims, strides;
  for (int64_t p : perm) {
    if (p < 0 || static_cast<size_t>(p) >= in.size())
      return errors::InvalidArgument("Transpose: perm entry {} out of range", p);
    dims.push_back(in[static_cast<size_t>(p)]);
    strides.push_back(in_strides[static_cast<size_t>(p)]);
  }
  return copy_kernel(t, dims, strides);
}

Result<ElementwiseKernel> lower_expand(const Shape& in, const Shape& out, DType dtype) {
  TD_ASSIGN_OR_RETURN(Scalar t, bits_of(dtype));
  TD_ASSIGN_OR_RETURN(auto strides, broadcast_strides(in, out));
  return copy_kernel(t, std::vector<int64_t>(out.begin(), out.end()), strides);
}

Result<ElementwiseKernel> lower_slice(const Shape& in, const Shape& out,
                                      const std::vector<int64_t>& starts,
                                      const std::vector<int64_t>& steps, DType dtype) {
  TD_ASSIGN_OR_RETURN(Scalar t, bits_of(dtype));
  if (out.size() != in.size() || starts.size() != in.size() || steps.size() != in.size())
    return errors::InvalidArgument("Slice: ranks do not match");
  std::vector<int64_t> in_strides(in.size(), 1);
  for (size_t d = in.size(); d-- > 1;) in_strides[d - 1] = in_strides[d] * in[d];
  std::vector<int64_t> strides(in.size());
  int64_t offset = 0;
  for (size_t d = 0; d < in.size(); ++d) {
    if (out[d] > 0) {
      const int64_t last = starts[d] + (out[d] - 1) * steps[d];
      if (starts[d] < 0 || starts[d] >= in[d] || last < 0 || last >= in[d])
        return errors::InvalidArgument("Slice: dim {} reads outside the input", d);
    }
    strides[d] = in_strides[d] * steps[d];
    offset += starts[d] * in_strides[d];
  }
  return copy_kernel(t, std::vector<int64_t>(out.begin(), out.end()), strides, offset);
}

}  // namespace tensord::codegen
