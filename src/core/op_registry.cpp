#include "core/op_registry.h"

#include <cassert>
#include <exception>

#include "core/ops/all_ops.h"

namespace tensord {

Result<std::optional<std::vector<int64_t>>> InferenceContext::input_ints(int i) const {
  const TensorView* v = input_value(i);
  if (!v) return std::optional<std::vector<int64_t>>();
  std::vector<int64_t> out;
  const int64_t n = v->numel();
  out.reserve(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    switch (v->dtype) {
      case DType::kInt64: out.push_back(v->as<int64_t>()[k]); break;
      case DType::kInt32: out.push_back(v->as<int32_t>()[k]); break;
      case DType::kInt16: out.push_back(v->as<int16_t>()[k]); break;
      case DType::kInt8: out.push_back(v->as<int8_t>()[k]); break;
      case DType::kUInt8: out.push_back(v->as<uint8_t>()[k]); break;
      case DType::kUInt16: out.push_back(v->as<uint16_t>()[k]); break;
      case DType::kUInt32: out.push_back(v->as<uint32_t>()[k]); break;
      case DType::kUInt64: out.push_back(static_cast<int64_t>(v->as<uint64_t>()[k])); break;
      case DType::kBool: out.push_back(v->as<bool>()[k] ? 1 : 0); break;
      default:
        return error("input {} must be an integer tensor, got {}", i, dtype_name(v->dtype));
    }
  }
  return std::optional<std::vector<int64_t>>(std::move(out));
}

void InferenceContext::set_output(int i, DType dtype, Shape shape) {
  if (output_types_.size() < static_cast<size_t>(num_outputs()))
    output_types_.resize(static_cast<size_t>(num_outputs()));
  if (i < num_outputs()) output_types_[static_cast<size_t>(i)] = TensorType{dtype, std::move(shape)};
}

void register_training_ops(OpRegistry& r);  // ops/training.cpp: ai.onnx.preview.training

const OpRegistry& OpRegistry::global() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    register_elementwise_ops(*r);
    register_nn_ops(*r);
    register_shape_ops(*r);
    register_reduction_ops(*r);
    register_rnn_ops(*r);
    register_image_ops(*r);
    register_quant_ops(*r);
    register_math_ops(*r);
    register_control_ops(*r);
    register_loss_ops(*r);
    register_opset18_ops(*r);
    register_linalg_ops(*r);
    register_training_ops(*r);
    return r;
  }();
  return *registry;
}

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kElementwise: return "element-wise";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kReduction: return "reduction";
    case OpKind::kContraction: return "contraction";
    case OpKind::kDataMovement: return "data movement";
    case OpKind::kOpaque: break;
  }
  return "opaque";
}

OpKind op_kind(const std::string& op) {
  static const std::map<std::string, OpKind> kinds = [] {
    std::map<std::string, OpKind> k;
    for (const char* o :
         {"Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "BitwiseNot", "Cast", "CastLike",
          "Ceil", "Celu", "Clip", "Cos", "Cosh", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid",
          "HardSwish", "IsInf", "IsNaN", "LeakyRelu", "Log", "Mish", "Neg", "Not", "Reciprocal",
          "Relu", "Round", "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign",
          "Sqrt", "Tan", "Tanh", "ThresholdedRelu"})
      k[o] = OpKind::kElementwise;
    for (const char* o :
         {"Add", "And", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Div", "Equal",
          "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Max", "Mean", "Min", "Mod", "Mul",
          "Or", "Pow", "PRelu", "Sub", "Sum", "Where", "Xor"})
      k[o] = OpKind::kBroadcast;
    for (const char* o :
         {"ArgMax", "ArgMin", "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool", "Hardmax",
          "LogSoftmax", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
          "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare", "Softmax"})
      k[o] = OpKind::kReduction;
    for (const char* o : {"Conv", "ConvInteger", "ConvTranspose", "Einsum", "Gemm", "MatMul",
                          "MatMulInteger", "QLinearConv", "QLinearMatMul"})
      k[o] = OpKind::kContraction;
    for (const char* o :
         {"Compress", "Concat", "DepthToSpace", "Expand", "Flatten", "Gather", "GatherElements",
          "GatherND", "Identity", "Pad", "Reshape", "ReverseSequence", "Scatter", "ScatterElements",
          "ScatterND", "Shape", "Size", "Slice", "SpaceToDepth", "Split", "Squeeze", "Tile",
          "Transpose", "Unsqueeze"})
      k[o] = OpKind::kDataMovement;
    return k;
  }();
  auto it = kinds.find(op);
  return it == kinds.end() ? OpKind::kOpaque : it->second;
}

void OpRegistry::add(OpSchema schema) {
  if (schema.kind == OpKind::kOpaque) schema.kind = op_kind(schema.name);
  std::string name = schema.name;
  const bool inserted = schemas_.emplace(name, std::move(schema)).second;
  assert(inserted && "two op families registered the same op");
  (void)inserted;
}

const OpSchema* OpRegistry::find(const std::string& op) const {
  auto it = schemas_.find(op);
  return it == schemas_.end() ? nullptr : &it->second;
}

std::vector<std::string> OpRegistry::op_names() const {
  std::vector<std::string> names;
  for (const auto& [k, v] : schemas_) names.push_back(k);
  return names;
}

Status infer_node(const OpRegistry& registry, InferenceContext& ctx) {
  const Node& node = ctx.node();
  // ONNX's ops are registered by name; tensord's own ("tensord" domain: the linalg ops of
  // src/core/ops/linalg.cpp) as "tensord.<op>".
  const std::string domain = node.domain == "ai.onnx" ? "" : node.domain;
  if (!domain.empty() && domain != "tensord" && domain != "ai.onnx.preview.training")
    return ctx.unimplemented("op domain '{}' is not supported", node.domain);
  const OpSchema* schema = registry.find(domain.empty() ? node.op : domain + "." + node.op);
  if (!schema) {
    if (registry.find(domain.empty() ? "tensord." + node.op : node.op))
      return ctx.unimplemented("op '{}' is in domain '{}', not '{}'", node.op,
                               domain.empty() ? "tensord" : "ai.onnx",
                               domain.empty() ? "ai.onnx" : domain);
    return ctx.unimplemented("unknown op '{}'", node.op);
  }
  const int n_in = static_cast<int>(node.inputs.size());
  if (n_in < schema->min_inputs || (schema->max_inputs >= 0 && n_in > schema->max_inputs)) {
    if (schema->max_inputs < 0)
      return ctx.error("expects at least {} inputs, got {}", schema->min_inputs, n_in);
    if (schema->min_inputs == schema->max_inputs)
      return ctx.error("expects {} inputs, got {}", schema->min_inputs, n_in);
    return ctx.error("expects {} to {} inputs, got {}", schema->min_inputs, schema->max_inputs,
                     n_in);
  }
  for (int i = 0; i < schema->min_inputs && i < n_in; ++i) {
    if (!ctx.has_input(i)) return ctx.error("required input {} is missing", i);
  }
  const int n_out = static_cast<int>(node.outputs.size());
  if (n_out < schema->min_outputs || n_out > schema->max_outputs) {
    return ctx.error("expects {} to {} outputs, got {}", schema->min_outputs, schema->max_outputs,
                     n_out);
  }
  for (const auto& [name, value] : node.attrs) {
    if (!schema->attributes.count(name)) return ctx.error("unknown attribute '{}'", name);
  }
  try {
    TD_RETURN_IF_ERROR(schema->infer(ctx));
  } catch (const std::exception& e) {  // an inference bug must not take the process down
    return ctx.make_error(StatusCode::kInternal, fmt::format("shape inference threw: {}", e.what()));
  }
  for (int i = 0; i < n_out; ++i) {
    if (node.outputs[static_cast<size_t>(i)].empty()) continue;
    if (static_cast<size_t>(i) >= ctx.output_types().size() ||
        !ctx.output_types()[static_cast<size_t>(i)].defined())
      return ctx.make_error(StatusCode::kInternal,
                            fmt::format("inference did not set output {}", i));
  }
  return OkStatus();
}

Result<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == db) out[i] = da;
    else if (da == 1) out[i] = db;
    else if (db == 1) out[i] = da;
    else if (da < 0) out[i] = db;  // unknown is 1 or db: either way the result is db
    else if (db < 0) out[i] = da;
    else
      return errors::InvalidArgument("cannot broadcast shapes {} and {}", shape_to_string(a),
                                     shape_to_string(b));
  }
  return out;
}

Result<int64_t> normalize_axis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return errors::InvalidArgument("axis {} is out of range for rank {}", axis, rank);
  return axis < 0 ? axis + rank : axis;
}

}  // namespace tensord
