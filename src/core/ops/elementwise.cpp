// Schemas of the element-wise ops (opset 17 forms): arithmetic and bitwise ops with
// multidirectional broadcasting, comparison and logic, variadic Min/Max/Sum/Mean, unary math,
// activations, Clip, Where, Cast and CastLike.
#include <cstdint>
#include <string>
#include <vector>

#include "core/op_registry.h"
#include "core/ops/all_ops.h"

namespace tensord {
namespace {

// ---- type sets: one bit per DType value ----

using TypeSet = uint32_t;

constexpr TypeSet bit(DType t) { return TypeSet{1} << static_cast<int>(t); }

constexpr TypeSet kFloatTypes =
    bit(DType::kFloat16) | bit(DType::kBFloat16) | bit(DType::kFloat32) | bit(DType::kFloat64);
constexpr TypeSet kUnsignedTypes =
    bit(DType::kUInt8) | bit(DType::kUInt16) | bit(DType::kUInt32) | bit(DType::kUInt64);
constexpr TypeSet kSignedIntTypes =
    bit(DType::kInt8) | bit(DType::kInt16) | bit(DType::kInt32) | bit(DType::kInt64);
constexpr TypeSet kIntTypes = kUnsignedTypes | kSignedIntTypes;
constexpr TypeSet kNumericTypes = kFloatTypes | kIntTypes;
constexpr TypeSet kSignedNumericTypes = kFloatTypes | kSignedIntTypes;
constexpr TypeSet kBoolType = bit(DType::kBool);
constexpr TypeSet kAllTypes = kNumericTypes | kBoolType;
// Pow's base (T); its exponent (T1) may be any numeric type.
constexpr TypeSet kPowBaseTypes = kFloatTypes | bit(DType::kInt32) | bit(DType::kInt64);
constexpr TypeSet kPReluTypes = kFloatTypes | bit(DType::kInt32) | bit(DType::kInt64) |
                                bit(DType::kUInt32) | bit(DType::kUInt64);

// "float16, bfloat16, float32, float64".
std::string type_set_names(TypeSet set) {
  static const DType kOrder[] = {
      DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64, DType::kInt8,
      DType::kInt16,   DType::kInt32,    DType::kInt64,   DType::kUInt8,   DType::kUInt16,
      DType::kUInt32,  DType::kUInt64,   DType::kBool};
  std::string out;
  for (DType t : kOrder) {
    if (!(set & bit(t))) continue;
    if (!out.empty()) out += ", ";
    out += dtype_name(t);
  }
  return out;
}

Status check_type(const InferenceContext& ctx, int i, TypeSet allowed) {
  const DType t = ctx.input_dtype(i);
  if (static_cast<int>(t) >= 0 && static_cast<int>(t) < 32 && (allowed & bit(t))) return OkStatus();
  return ctx.error("input {} has dtype {}, expected one of {}", i, dtype_name(t),
                   type_set_names(allowed));
}

Status check_same_type(const InferenceContext& ctx, int i, int j) {
  if (ctx.input_dtype(i) == ctx.input_dtype(j)) return OkStatus();
  return ctx.error("input {} has dtype {} but input {} has dtype {}; they must match", j,
                   dtype_name(ctx.input_dtype(j)), i, dtype_name(ctx.input_dtype(i)));
}

// Multidirectional broadcast of the given (present) inputs.
Result<Shape> broadcast_inputs(const InferenceContext& ctx, const std::vector<int>& inputs) {
  Shape out;
  bool first = true;
  for (int i : inputs) {
    if (first) {
      out = ctx.input_shape(i);
      first = false;
      continue;
    }
    auto r = broadcast_shapes(out, ctx.input_shape(i));
    if (!r.ok()) return ctx.wrap(r.status());
    out = std::move(r).value();
  }
  return out;
}

// Reads every float attribute of the node so that a wrong kind (a string alpha) is an error
// at inference, not at run time.
Status check_float_attrs(const InferenceContext& ctx, const std::vector<std::string>& names) {
  for (const auto& name : names) {
    auto r = ctx.attr_float(name, 0.0f);
    if (!r.ok()) return r.status();
  }
  return OkStatus();
}

// ---- schema builders ----

enum class OutType { kSame, kBool };

// Two inputs of one dtype from `allowed`, broadcast together.
OpSchema binary_schema(const std::string& name, TypeSet allowed, OutType out,
                       std::set<std::string> attrs = {}) {
  OpSchema s;
  s.name = name;
  s.min_inputs = s.max_inputs = 2;
  s.attributes = std::move(attrs);
  s.infer = [allowed, out](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_type(ctx, 0, allowed));
    TD_RETURN_IF_ERROR(check_same_type(ctx, 0, 1));
    TD_ASSIGN_OR_RETURN(Shape shape, broadcast_inputs(ctx, {0, 1}));
    ctx.set_output(0, out == OutType::kBool ? DType::kBool : ctx.input_dtype(0), std::move(shape));
    return OkStatus();
  };
  s.doc = "element-wise " + name + " with multidirectional broadcasting";
  return s;
}

// One input of a dtype from `allowed`; float attributes `float_attrs`.
OpSchema unary_schema(const std::string& name, TypeSet allowed, OutType out = OutType::kSame,
                      std::vector<std::string> float_attrs = {}) {
  OpSchema s;
  s.name = name;
  s.min_inputs = s.max_inputs = 1;
  s.attributes = std::set<std::string>(float_attrs.begin(), float_attrs.end());
  s.infer = [allowed, out, float_attrs](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_type(ctx, 0, allowed));
    TD_RETURN_IF_ERROR(check_float_attrs(ctx, float_attrs));
    ctx.set_output(0, out == OutType::kBool ? DType::kBool : ctx.input_dtype(0),
                   ctx.input_shape(0));
    return OkStatus();
  };
  s.doc = "element-wise " + name;
  return s;
}

// One or more inputs of one dtype from `allowed`, broadcast together.
OpSchema variadic_schema(const std::string& name, TypeSet allowed) {
  OpSchema s;
  s.name = name;
  s.min_inputs = 1;
  s.max_inputs = -1;
  s.infer = [allowed](InferenceContext& ctx) -> Status {
    std::vector<int> inputs;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      if (!ctx.has_input(i)) return ctx.error("input {} is missing (all inputs are required)", i);
      TD_RETURN_IF_ERROR(check_type(ctx, i, allowed));
      TD_RETURN_IF_ERROR(check_same_type(ctx, 0, i));
      inputs.push_back(i);
    }
    TD_ASSIGN_OR_RETURN(Shape shape, broadcast_inputs(ctx, inputs));
    ctx.set_output(0, ctx.input_dtype(0), std::move(shape));
    return OkStatus();
  };
  s.doc = "element-wise " + name + " of any number of broadcast inputs";
  return s;
}

// ---- ops with their own rules ----

OpSchema pow_schema() {
  OpSchema s;
  s.name = "Pow";
  s.min_inputs = s.max_inputs = 2;
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_type(ctx, 0, kPowBaseTypes));
    TD_RETURN_IF_ERROR(check_type(ctx, 1, kNumericTypes));
    TD_ASSIGN_OR_RETURN(Shape shape, broadcast_inputs(ctx, {0, 1}));
    ctx.set_output(0, ctx.input_dtype(0), std::move(shape));
    return OkStatus();
  };
  s.doc = "base ** exponent, broadcast; the result has the base's dtype";
  return s;
}

OpSchema mod_schema() {
  OpSchema s = binary_schema("Mod", kNumericTypes, OutType::kSame, {"fmod"});
  InferenceFn base = s.infer;
  s.infer = [base](InferenceContext& ctx) -> Status {
    TD_ASSIGN_OR_RETURN(int64_t fmod, ctx.attr_int("fmod", 0));
    if (fmod != 0 && fmod != 1) return ctx.error("attribute fmod must be 0 or 1, got {}", fmod);
    if (fmod == 0 && dtype_is_float(ctx.input_dtype(0)))
      return ctx.error("attribute fmod must be 1 for floating-point inputs, got fmod=0 with {}",
                       dtype_name(ctx.input_dtype(0)));
    return base(ctx);
  };
  s.doc = "remainder: sign of the divisor (fmod=0, integers) or of the dividend (fmod=1)";
  return s;
}

OpSchema bitshift_schema() {
  OpSchema s = binary_schema("BitShift", kUnsignedTypes, OutType::kSame, {"direction"});
  InferenceFn base = s.infer;
  s.infer = [base](InferenceContext& ctx) -> Status {
    if (!ctx.has_attr("direction")) return ctx.error("attribute 'direction' is required");
    TD_ASSIGN_OR_RETURN(std::string dir, ctx.attr_string("direction", ""));
    if (dir != "LEFT" && dir != "RIGHT")
      return ctx.error("attribute direction must be \"LEFT\" or \"RIGHT\", got \"{}\"", dir);
    return base(ctx);
  };
  s.doc = "shifts unsigned integers left or right by the second input";
  return s;
}

OpSchema isinf_schema() {
  OpSchema s = unary_schema("IsInf", kFloatTypes, OutType::kBool);
  s.attributes = {"detect_negative", "detect_positive"};
  InferenceFn base = s.infer;
  s.infer = [base](InferenceContext& ctx) -> Status {
    for (const char* name : {"detect_negative", "detect_positive"}) {
      TD_ASSIGN_OR_RETURN(int64_t v, ctx.attr_int(name, 1));
      if (v != 0 && v != 1) return ctx.error("attribute {} must be 0 or 1, got {}", name, v);
    }
    return base(ctx);
  };
  return s;
}

OpSchema prelu_schema() {
  OpSchema s;
  s.name = "PRelu";
  s.min_inputs = s.max_inputs = 2;
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_type(ctx, 0, kPReluTypes));
    TD_RETURN_IF_ERROR(check_same_type(ctx, 0, 1));
    // The slope broadcasts to X (unidirectionally): the output has X's shape.
    const Shape& x = ctx.input_shape(0);
    const Shape& slope = ctx.input_shape(1);
    bool ok = slope.size() <= x.size();
    for (size_t k = 0; ok && k < slope.size(); ++k) {
      const int64_t ds = slope[slope.size() - 1 - k];
      const int64_t dx = x[x.size() - 1 - k];
      ok = ds == 1 || ds == dx || ds < 0 || dx < 0;
    }
    if (!ok)
      return ctx.error("slope of shape {} does not broadcast to X of shape {}",
                       shape_to_string(slope), shape_to_string(x));
    ctx.set_output(0, ctx.input_dtype(0), x);
    return OkStatus();
  };
  s.doc = "x < 0 ? slope * x : x, slope broadcast to x";
  return s;
}

OpSchema clip_schema() {
  OpSchema s;
  s.name = "Clip";
  s.min_inputs = 1;
  s.max_inputs = 3;
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_type(ctx, 0, kNumericTypes));
    for (int i = 1; i <= 2; ++i) {
      if (!ctx.has_input(i)) continue;
      TD_RETURN_IF_ERROR(check_same_type(ctx, 0, i));
      // A scalar; like onnxruntime we also accept a one-element 1-D tensor.
      const Shape& shape = ctx.input_shape(i);
      const bool scalar = shape.empty() || (shape.size() == 1 && (shape[0] == 1 || shape[0] < 0));
      if (!scalar)
        return ctx.error("{} (input {}) must be a scalar, got shape {}", i == 1 ? "min" : "max", i,
                         shape_to_string(shape));
    }
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
    return OkStatus();
  };
  s.doc = "limits values to [min, max]; min and max are optional scalar inputs";
  return s;
}

OpSchema where_schema() {
  OpSchema s;
  s.name = "Where";
  s.min_inputs = s.max_inputs = 3;
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_type(ctx, 0, kBoolType));
    TD_RETURN_IF_ERROR(check_type(ctx, 1, kAllTypes));
    TD_RETURN_IF_ERROR(check_same_type(ctx, 1, 2));
    TD_ASSIGN_OR_RETURN(Shape shape, broadcast_inputs(ctx, {0, 1, 2}));
    ctx.set_output(0, ctx.input_dtype(1), std::move(shape));
    return OkStatus();
  };
  s.doc = "condition ? X : Y, all three broadcast";
  return s;
}

// The target dtype of Cast's `to`: a dtype we support, or an error naming the value.
Result<DType> cast_target(const InferenceContext& ctx) {
  if (!ctx.has_attr("to")) return ctx.error("attribute 'to' is required");
  TD_ASSIGN_OR_RETURN(int64_t to, ctx.attr_int("to", 0));
  if (to == 8) return ctx.unimplemented("to=8 (string) is not supported");
  if (to == 14 || to == 15) return ctx.unimplemented("to={} (complex) is not supported", to);
  if (to < INT32_MIN || to > INT32_MAX || !dtype_is_valid(static_cast<int32_t>(to)))
    return ctx.error("attribute to={} is not a valid dtype", to);
  return static_cast<DType>(to);
}

OpSchema cast_schema() {
  OpSchema s;
  s.name = "Cast";
  s.min_inputs = s.max_inputs = 1;
  s.attributes = {"to"};
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_type(ctx, 0, kAllTypes));
    TD_ASSIGN_OR_RETURN(DType to, cast_target(ctx));
    ctx.set_output(0, to, ctx.input_shape(0));
    return OkStatus();
  };
  s.doc = "converts to the dtype `to`; floats to integers truncate toward zero";
  return s;
}

OpSchema castlike_schema() {
  OpSchema s;
  s.name = "CastLike";
  s.min_inputs = s.max_inputs = 2;
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_type(ctx, 0, kAllTypes));
    TD_RETURN_IF_ERROR(check_type(ctx, 1, kAllTypes));
    ctx.set_output(0, ctx.input_dtype(1), ctx.input_shape(0));
    return OkStatus();
  };
  s.doc = "converts input 0 to the dtype of input 1";
  return s;
}

}  // namespace

void register_elementwise_ops(OpRegistry& r) {
  // Arithmetic.
  for (const char* op : {"Add", "Sub", "Mul", "Div"})
    r.add(binary_schema(op, kNumericTypes, OutType::kSame));
  r.add(pow_schema());
  r.add(mod_schema());
  r.add(bitshift_schema());
  for (const char* op : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"})
    r.add(binary_schema(op, kIntTypes, OutType::kSame));
  r.add(unary_schema("BitwiseNot", kIntTypes));

  // Comparison and logic.
  r.add(binary_schema("Equal", kAllTypes, OutType::kBool));
  for (const char* op : {"Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
    r.add(binary_schema(op, kNumericTypes, OutType::kBool));
  for (const char* op : {"And", "Or", "Xor"}) r.add(binary_schema(op, kBoolType, OutType::kBool));
  r.add(unary_schema("Not", kBoolType));

  // Variadic.
  r.add(variadic_schema("Min", kNumericTypes));
  r.add(variadic_schema("Max", kNumericTypes));
  r.add(variadic_schema("Sum", kFloatTypes));
  r.add(variadic_schema("Mean", kFloatTypes));

  // Unary math.
  r.add(unary_schema("Neg", kSignedNumericTypes));
  r.add(unary_schema("Abs", kNumericTypes));
  r.add(unary_schema("Sign", kNumericTypes));
  r.add(unary_schema("Erf", kNumericTypes));
  for (const char* op : {"Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sin", "Cos",
                         "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh"})
    r.add(unary_schema(op, kFloatTypes));
  r.add(unary_schema("IsNaN", kFloatTypes, OutType::kBool));
  r.add(isinf_schema());

  // Activations.
  r.add(unary_schema("Relu", kSignedNumericTypes));
  for (const char* op : {"Sigmoid", "Tanh", "HardSwish", "Softplus", "Softsign"})
    r.add(unary_schema(op, kFloatTypes));
  r.add(unary_schema("LeakyRelu", kFloatTypes, OutType::kSame, {"alpha"}));
  r.add(unary_schema("Elu", kFloatTypes, OutType::kSame, {"alpha"}));
  r.add(unary_schema("Selu", kFloatTypes, OutType::kSame, {"alpha", "gamma"}));
  r.add(unary_schema("Celu", bit(DType::kFloat32), OutType::kSame, {"alpha"}));
  r.add(unary_schema("HardSigmoid", kFloatTypes, OutType::kSame, {"alpha", "beta"}));
  r.add(unary_schema("ThresholdedRelu", kFloatTypes, OutType::kSame, {"alpha"}));
  r.add(prelu_schema());

  // Selection and conversion.
  r.add(clip_schema());
  r.add(where_schema());
  r.add(cast_schema());
  r.add(castlike_schema());
}

}  // namespace tensord
