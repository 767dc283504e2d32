// Schemas of the quantization ops (opset 17 forms): QuantizeLinear, DequantizeLinear (per
// tensor and per axis), DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul and
// QLinearConv. Quantized types are int8 and uint8 (DequantizeLinear also takes int32).
//
// Conv geometry comes from nn::window_geometry (src/core/ops/nn.cpp), as for Conv, so the
// integer convolutions agree with the float one on pads, auto_pad and output sizes.
#include <cstdint>
#include <string>
#include <vector>

#include "core/op_registry.h"
#include "core/ops/all_ops.h"
#include "core/ops/op_helpers.h"

namespace tensord {

namespace {

bool is_quant(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }


Status expect_float(const InferenceContext& ctx, int i, const char* what) {
  if (dtype_is_float(ctx.input_dtype(i))) return OkStatus();
  return ctx.error("input {} ({}) has dtype {}, expected a float type", i, what,
                   dtype_name(ctx.input_dtype(i)));
}

Status expect_quant(const InferenceContext& ctx, int i, const char* what) {
  if (is_quant(ctx.input_dtype(i))) return OkStatus();
  return ctx.error("input {} ({}) has dtype {}, expected int8 or uint8", i, what,
                   dtype_name(ctx.input_dtype(i)));
}

Status expect_same_dtype(const InferenceContext& ctx, int i, const char* what_i, int j,
                         const char* what_j) {
  if (ctx.input_dtype(i) == ctx.input_dtype(j)) return OkStatus();
  return ctx.error("input {} ({}) has dtype {} but input {} ({}) has dtype {}; they must match", j,
                   what_j, dtype_name(ctx.input_dtype(j)), i, what_i,
                   dtype_name(ctx.input_dtype(i)));
}

// A scalar parameter: rank 0, or a 1-D tensor of one element.
Status expect_scalar(const InferenceContext& ctx, int i, const char* what) {
  const Shape& s = ctx.input_shape(i);
  if (s.empty() || (s.size() == 1 && (s[0] == 1 || s[0] < 0))) return OkStatus();
  return ctx.error("input {} ({}) must be a scalar, got shape {}", i, what, shape_to_string(s));
}

// A scalar or a 1-D tensor of `n` elements (per output channel).
Status expect_scalar_or_vector(const InferenceContext& ctx, int i, const char* what, int64_t n) {
  const Shape& s = ctx.input_shape(i);
  if (s.empty() || (s.size() == 1 && (s[0] == 1 || !dims_conflict(s[0], n)))) return OkStatus();
  return ctx.error("input {} ({}) must be a scalar or have shape [{}], got {}", i, what,
                   n < 0 ? std::string("M") : std::to_string(n), shape_to_string(s));
}

// QuantizeLinear/DequantizeLinear: scale (input 1) and zero point (input 2) are a scalar (per
// tensor) or a 1-D tensor of x.shape[axis] values (per axis), both of the same shape.
Status check_linear_params(InferenceContext& ctx, const char* scale_name, const char* zp_name) {
  const Shape& x = ctx.input_shape(0);
  const Shape& scale = ctx.input_shape(1);
  if (scale.size() > 1)
    return ctx.error("{} must be a scalar or 1-D, got shape {}", scale_name,
                     shape_to_string(scale));
  if (ctx.has_input(2)) {
    const Shape& zp = ctx.input_shape(2);
    if (zp.size() != scale.size() || (zp.size() == 1 && dims_conflict(zp[0], scale[0])))
      return ctx.error("{} has shape {} but {} has shape {}; they must match", zp_name,
                       shape_to_string(zp), scale_name, shape_to_string(scale));
  }
  TD_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis", 1));
  // The axis only matters for per-axis parameters (a 1-D scale of more than one value).
  if (scale.size() == 1 && scale[0] > 1) {
    auto a = normalize_axis(axis, static_cast<int64_t>(x.size()));
    if (!a.ok())
      return ctx.error("axis {} is out of range for input of shape {}", axis, shape_to_string(x));
    if (dims_conflict(x[static_cast<size_t>(*a)], scale[0]))
      return ctx.error("{} has {} values but input axis {} has size {} (input shape {})",
                       scale_name, scale[0], axis, x[static_cast<size_t>(*a)], shape_to_string(x));
  }
  return OkStatus();
}

OpSchema quantize_linear_schema() {
  OpSchema s;
  s.name = "QuantizeLinear";
  s.min_inputs = 2;
  s.max_inputs = 3;
  s.attributes = {"axis"};
  s.doc = "y = saturate(round_half_even(x / y_scale) + y_zero_point), per tensor or per axis";
  s.infer = [](InferenceContext& ctx) -> Status {
    const DType xt = ctx.input_dtype(0);
    if (!dtype_is_float(xt) && xt != DType::kInt32)
      return ctx.error(
          "input 0 (x) has dtype {}, expected float32, float16, bfloat16, float64 "
          "or int32",
          dtype_name(xt));
    TD_RETURN_IF_ERROR(expect_float(ctx, 1, "y_scale"));
    DType out = DType::kUInt8;
    if (ctx.has_input(2)) {
      TD_RETURN_IF_ERROR(expect_quant(ctx, 2, "y_zero_point"));
      out = ctx.input_dtype(2);
    }
    TD_RETURN_IF_ERROR(check_linear_params(ctx, "y_scale", "y_zero_point"));
    ctx.set_output(0, out, ctx.input_shape(0));
    return OkStatus();
  };
  return s;
}

OpSchema dequantize_linear_schema() {
  OpSchema s;
  s.name = "DequantizeLinear";
  s.min_inputs = 2;
  s.max_inputs = 3;
  s.attributes = {"axis"};
  s.doc = "y = (x - x_zero_point) * x_scale, per tensor or per axis";
  s.infer = [](InferenceContext& ctx) -> Status {
    const DType xt = ctx.input_dtype(0);
    if (!is_quant(xt) && xt != DType::kInt32)
      return ctx.error("input 0 (x) has dtype {}, expected int8, uint8 or int32", dtype_name(xt));
    TD_RETURN_IF_ERROR(expect_float(ctx, 1, "x_scale"));
    if (ctx.has_input(2)) TD_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, "x", 2, "x_zero_point"));
    TD_RETURN_IF_ERROR(check_linear_params(ctx, "x_scale", "x_zero_point"));
    // Opset 17 has float32 scales only; newer opsets give y the scale's type, which this is.
    ctx.set_output(0, ctx.input_dtype(1), ctx.input_shape(0));
    return OkStatus();
  };
  return s;
}

OpSchema dynamic_quantize_linear_schema() {
  OpSchema s;
  s.name = "DynamicQuantizeLinear";
  s.min_inputs = s.max_inputs = 1;
  s.min_outputs = s.max_outputs = 3;
  s.doc = "uint8 quantization of x with scale and zero point computed from its range";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(expect_float(ctx, 0, "x"));
    ctx.set_output(0, DType::kUInt8, ctx.input_shape(0));
    ctx.set_output(1, DType::kFloat32, {});
    ctx.set_output(2, DType::kUInt8, {});
    return OkStatus();
  };
  return s;
}

// ---- MatMulInteger, QLinearMatMul ----

// numpy.matmul output shape of a x b (1-D operands promoted, batch dims broadcast).
Result<Shape> matmul_shape(const InferenceContext& ctx, int ia, int ib) {
  Shape a = ctx.input_shape(ia), b = ctx.input_shape(ib);
  if (a.empty() || b.empty())
    return ctx.error("inputs must have rank >= 1, got {} x {}", shape_to_string(a),
                     shape_to_string(b));
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);
  if (dims_conflict(a[a.size() - 1], b[b.size() - 2]))
    return ctx.error("inner dimensions differ: {} x {}", shape_to_string(ctx.input_shape(ia)),
                     shape_to_string(ctx.input_shape(ib)));
  auto batch = broadcast_shapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  if (!batch.ok())
    return ctx.error("batch dimensions do not broadcast: {} x {}",
                     shape_to_string(ctx.input_shape(ia)), shape_to_string(ctx.input_shape(ib)));
  Shape out = *batch;
  if (!a_vec) out.push_back(a[a.size() - 2]);
  if (!b_vec) out.push_back(b[b.size() - 1]);
  return out;
}

// Zero point / scale of a matmul operand: a scalar; a 1-D tensor of M values (per row of a,
// row_wise) or N values (per column of b); or an N-D tensor shaped like the operand with the
// reduced dimension (K) set to 1.
Status check_matmul_param(const InferenceContext& ctx, int i, const char* what, int operand,
                          bool row_wise) {
  const Shape& p = ctx.input_shape(i);
  Shape x = ctx.input_shape(operand);
  if (p.empty() || (p.size() == 1 && p[0] == 1)) return OkStatus();
  if (x.size() < 2)  // a 1-D operand has a single row (a) or column (b)
    return ctx.error("input {} ({}) must be a scalar for a 1-D operand of shape {}, got {}", i,
                     what, shape_to_string(x), shape_to_string(p));
  const int64_t m_or_n = row_wise ? x[x.size() - 2] : x[x.size() - 1];
  if (p.size() == 1) {
    if (dims_conflict(p[0], m_or_n))
      return ctx.error("input {} ({}) has {} values, expected 1 or {} (one per {} of shape {})", i,
                       what, p[0], m_or_n, row_wise ? "row" : "column", shape_to_string(x));
    return OkStatus();
  }
  Shape want = x;
  want[row_wise ? x.size() - 1 : x.size() - 2] = 1;
  bool ok = p.size() <= want.size();
  for (size_t d = 0; ok && d < p.size(); ++d) {
    const int64_t pd = p[p.size() - 1 - d], wd = want[want.size() - 1 - d];
    if (pd != 1 && dims_conflict(pd, wd)) ok = false;
  }
  if (!ok)
    return ctx.error("input {} ({}) has shape {}, which does not broadcast to {} (operand {})", i,
                     what, shape_to_string(p), shape_to_string(want), shape_to_string(x));
  return OkStatus();
}

OpSchema matmul_integer_schema() {
  OpSchema s;
  s.name = "MatMulInteger";
  s.min_inputs = 2;
  s.max_inputs = 4;
  s.doc = "int32 matmul of (A - a_zero_point) and (B - b_zero_point)";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(expect_quant(ctx, 0, "A"));
    TD_RETURN_IF_ERROR(expect_quant(ctx, 1, "B"));
    TD_ASSIGN_OR_RETURN(Shape out, matmul_shape(ctx, 0, 1));
    if (ctx.has_input(2)) {
      TD_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, "A", 2, "a_zero_point"));
      TD_RETURN_IF_ERROR(check_matmul_param(ctx, 2, "a_zero_point", 0, true));
    }
    if (ctx.has_input(3)) {
      TD_RETURN_IF_ERROR(expect_same_dtype(ctx, 1, "B", 3, "b_zero_point"));
      TD_RETURN_IF_ERROR(check_matmul_param(ctx, 3, "b_zero_point", 1, false));
    }
    ctx.set_output(0, DType::kInt32, std::move(out));
    return OkStatus();
  };
  return s;
}

OpSchema qlinear_matmul_schema() {
  OpSchema s;
  s.name = "QLinearMatMul";
  s.min_inputs = s.max_inputs = 8;
  s.doc = "quantized matmul: dequantize a and b, multiply, quantize with y_scale/y_zero_point";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(expect_quant(ctx, 0, "a"));
    TD_RETURN_IF_ERROR(expect_float(ctx, 1, "a_scale"));
    TD_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, "a", 2, "a_zero_point"));
    TD_RETURN_IF_ERROR(expect_quant(ctx, 3, "b"));
    TD_RETURN_IF_ERROR(expect_float(ctx, 4, "b_scale"));
    TD_RETURN_IF_ERROR(expect_same_dtype(ctx, 3, "b", 5, "b_zero_point"));
    TD_RETURN_IF_ERROR(expect_float(ctx, 6, "y_scale"));
    TD_RETURN_IF_ERROR(expect_quant(ctx, 7, "y_zero_point"));
    TD_ASSIGN_OR_RETURN(Shape out, matmul_shape(ctx, 0, 3));
    TD_RETURN_IF_ERROR(check_matmul_param(ctx, 1, "a_scale", 0, true));
    TD_RETURN_IF_ERROR(check_matmul_param(ctx, 2, "a_zero_point", 0, true));
    TD_RETURN_IF_ERROR(check_matmul_param(ctx, 4, "b_scale", 3, false));
    TD_RETURN_IF_ERROR(check_matmul_param(ctx, 5, "b_zero_point", 3, false));
    for (int i : {6, 7}) {
      auto b = broadcast_shapes(ctx.input_shape(i), out);
      if (!b.ok() || b->size() != out.size())
        return ctx.error("input {} ({}) has shape {}, which does not broadcast to the output {}", i,
                         i == 6 ? "y_scale" : "y_zero_point", shape_to_string(ctx.input_shape(i)),
                         shape_to_string(out));
    }
    ctx.set_output(0, ctx.input_dtype(7), std::move(out));
    return OkStatus();
  };
  return s;
}

// ---- ConvInteger, QLinearConv ----

// Output shape of a convolution of input ix by input iw (channels, groups, geometry checked).
Result<Shape> conv_shape(const InferenceContext& ctx, int ix, int iw) {
  return nn::conv_output_shape(ctx, ctx.input_shape(ix), ctx.input_shape(iw));
}

const std::set<std::string> kConvAttrs = {"auto_pad",     "dilations", "group",
                                          "kernel_shape", "pads",      "strides"};

OpSchema conv_integer_schema() {
  OpSchema s;
  s.name = "ConvInteger";
  s.min_inputs = 2;
  s.max_inputs = 4;
  s.attributes = kConvAttrs;
  s.doc = "int32 convolution of (x - x_zero_point) by (w - w_zero_point)";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(expect_quant(ctx, 0, "x"));
    TD_RETURN_IF_ERROR(expect_quant(ctx, 1, "w"));
    TD_ASSIGN_OR_RETURN(Shape out, conv_shape(ctx, 0, 1));
    if (ctx.has_input(2)) {
      TD_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, "x", 2, "x_zero_point"));
      TD_RETURN_IF_ERROR(expect_scalar(ctx, 2, "x_zero_point"));
    }
    if (ctx.has_input(3)) {
      TD_RETURN_IF_ERROR(expect_same_dtype(ctx, 1, "w", 3, "w_zero_point"));
      TD_RETURN_IF_ERROR(expect_scalar_or_vector(ctx, 3, "w_zero_point", ctx.input_shape(1)[0]));
    }
    ctx.set_output(0, DType::kInt32, std::move(out));
    return OkStatus();
  };
  return s;
}

OpSchema qlinear_conv_schema() {
  OpSchema s;
  s.name = "QLinearConv";
  s.min_inputs = 8;
  s.max_inputs = 9;
  s.attributes = kConvAttrs;
  s.doc = "quantized convolution with int32 bias, requantized with y_scale/y_zero_point";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(expect_quant(ctx, 0, "x"));
    TD_RETURN_IF_ERROR(expect_float(ctx, 1, "x_scale"));
    TD_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, "x", 2, "x_zero_point"));
    TD_RETURN_IF_ERROR(expect_quant(ctx, 3, "w"));
    TD_RETURN_IF_ERROR(expect_float(ctx, 4, "w_scale"));
    TD_RETURN_IF_ERROR(expect_same_dtype(ctx, 3, "w", 5, "w_zero_point"));
    TD_RETURN_IF_ERROR(expect_float(ctx, 6, "y_scale"));
    TD_RETURN_IF_ERROR(expect_quant(ctx, 7, "y_zero_point"));
    TD_ASSIGN_OR_RETURN(Shape out, conv_shape(ctx, 0, 3));
    const int64_t m = ctx.input_shape(3)[0];
    TD_RETURN_IF_ERROR(expect_scalar(ctx, 1, "x_scale"));
    TD_RETURN_IF_ERROR(expect_scalar(ctx, 2, "x_zero_point"));
    TD_RETURN_IF_ERROR(expect_scalar_or_vector(ctx, 4, "w_scale", m));
    TD_RETURN_IF_ERROR(expect_scalar_or_vector(ctx, 5, "w_zero_point", m));
    TD_RETURN_IF_ERROR(expect_scalar(ctx, 6, "y_scale"));
    TD_RETURN_IF_ERROR(expect_scalar(ctx, 7, "y_zero_point"));
    if (ctx.has_input(8)) {
      if (ctx.input_dtype(8) != DType::kInt32)
        return ctx.error("input 8 (B) has dtype {}, expected int32",
                         dtype_name(ctx.input_dtype(8)));
      const Shape& b = ctx.input_shape(8);
      if (b.size() != 1 || dims_conflict(b[0], m))
        return ctx.error("bias has shape {}, expected [{}] (one per output channel)",
                         shape_to_string(b), m);
    }
    ctx.set_output(0, ctx.input_dtype(7), std::move(out));
    return OkStatus();
  };
  return s;
}

}  // namespace

void register_quant_ops(OpRegistry& r) {
  r.add(quantize_linear_schema());
  r.add(dequantize_linear_schema());
  r.add(dynamic_quantize_linear_schema());
  r.add(matmul_integer_schema());
  r.add(qlinear_matmul_schema());
  r.add(conv_integer_schema());
  r.add(qlinear_conv_schema());
}

}  // namespace tensord
