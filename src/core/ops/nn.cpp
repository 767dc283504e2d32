// Schemas of the neural-network ops (opset 17 forms): MatMul, Gemm, Conv, ConvTranspose, the
// pools, the normalizations (BatchNormalization in inference mode, InstanceNormalization,
// LRN, LayerNormalization), Softmax/LogSoftmax/Hardmax and Dropout.
//
// The sliding-window geometry (pads from auto_pad, output sizes with ceil_mode) is computed in
// one place, nn::window_geometry / nn::conv_transpose_geometry below, which the cpu kernels
// call too, so inference and kernels cannot disagree.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/op_registry.h"
#include "core/ops/all_ops.h"
#include "core/ops/op_helpers.h"

namespace tensord {

// ---- window geometry, shared with src/backends/cpu/kernels/nn.cpp ----
//
// These two functions have external linkage; the kernel file declares them with the same
// signatures (a mismatch is a link error, not silent misbehaviour).
namespace nn {
namespace {

// Geometry arithmetic is done in 128 bits and every result checked against kMaxSize, so that
// absurd attribute values are errors, never int64 overflow.
using Wide = __int128;
constexpr int64_t kMaxSize = int64_t{1} << 62;
// Largest stride, dilation, pad, output_padding or pooling kernel size (int32's range, as in
// every framework that exports these models).
constexpr int64_t kMaxWindowAttr = (int64_t{1} << 31) - 1;

Wide ceil_div(Wide a, Wide b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// Reads an ints attribute that must have exactly `n` values (when present), each in
// [min, kMaxWindowAttr].
Status read_spatial_ints(const NodeAttrs& a, const std::string& name, size_t n, int64_t dflt,
                         int64_t min, std::vector<int64_t>* out) {
  TD_ASSIGN_OR_RETURN(*out, a.attr_ints(name, std::vector<int64_t>(n, dflt)));
  if (out->size() != n)
    return a.error("'{}' has {} values {}, expected {} (one per spatial axis)", name, out->size(),
                   *out, n);
  for (int64_t v : *out)
    if (v < min || v > kMaxWindowAttr)
      return a.error("'{}' values must be in [{}, {}], got {}", name, min, kMaxWindowAttr, *out);
  return OkStatus();
}

// Reads 'pads' (2n values in [0, kMaxWindowAttr]).
Status read_pads(const NodeAttrs& a, size_t n, std::vector<int64_t>* pads) {
  TD_ASSIGN_OR_RETURN(*pads, a.attr_ints("pads", std::vector<int64_t>(2 * n, 0)));
  if (pads->size() != 2 * n)
    return a.error("'pads' has {} values {}, expected {} (begin and end per spatial axis)",
                   pads->size(), *pads, 2 * n);
  for (int64_t p : *pads)
    if (p < 0 || p > kMaxWindowAttr)
      return a.error("'pads' values must be in [0, {}], got {}", kMaxWindowAttr, *pads);
  return OkStatus();
}

Status check_kernel(const NodeAttrs& a, const Shape& in_spatial, const Shape& kernel) {
  if (kernel.size() != in_spatial.size())
    return a.error("kernel has {} spatial dims {}, input has {} {}", kernel.size(),
                   shape_to_string(kernel), in_spatial.size(), shape_to_string(in_spatial));
  for (int64_t k : kernel)
    if (k == 0 || k < -1 || k > kMaxSize)
      return a.error("kernel sizes must be >= 1, got {}", shape_to_string(kernel));
  return OkStatus();
}

Result<std::string> read_auto_pad(const NodeAttrs& a) {
  TD_ASSIGN_OR_RETURN(std::string auto_pad, a.attr_string("auto_pad", "NOTSET"));
  if (auto_pad != "NOTSET" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER" &&
      auto_pad != "VALID")
    return a.error("auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got '{}'", auto_pad);
  return auto_pad;
}

bool too_large(Wide v) { return v > kMaxSize || v < -kMaxSize; }

}  // namespace

// Sliding-window geometry of Conv (pool=false) and MaxPool/AveragePool/LpPool (pool=true,
// which also reads ceil_mode). `in_spatial` and `kernel` are the spatial input sizes and the
// kernel sizes (either may hold -1 = unknown, giving -1 output sizes). Outputs: strides and
// dilations (n values), pads (2n values: all begins, then all ends, as ONNX orders them;
// computed from auto_pad when it is SAME_*), and the spatial output sizes.
Status window_geometry(const NodeAttrs& a, const Shape& in_spatial, const Shape& kernel, bool pool,
                       std::vector<int64_t>* strides, std::vector<int64_t>* dilations,
                       std::vector<int64_t>* pads, Shape* out_spatial) {
  const size_t n = in_spatial.size();
  TD_RETURN_IF_ERROR(check_kernel(a, in_spatial, kernel));
  TD_ASSIGN_OR_RETURN(std::string auto_pad, read_auto_pad(a));
  TD_RETURN_IF_ERROR(read_spatial_ints(a, "strides", n, 1, 1, strides));
  TD_RETURN_IF_ERROR(read_spatial_ints(a, "dilations", n, 1, 1, dilations));
  int64_t ceil_mode = 0;
  if (pool) {
    TD_ASSIGN_OR_RETURN(ceil_mode, a.attr_int("ceil_mode", 0));
    if (ceil_mode != 0 && ceil_mode != 1)
      return a.error("ceil_mode must be 0 or 1, got {}", ceil_mode);
  }
  if (auto_pad == "NOTSET")
    TD_RETURN_IF_ERROR(read_pads(a, n, pads));
  else
    pads->assign(2 * n, 0);  // explicit pads are not used with auto_pad
  if (pool && auto_pad == "NOTSET") {
    // As onnxruntime: a pad as large as the kernel makes windows that see only padding
    // (a max of nothing, an average over zero elements), so it is refused.
    for (size_t i = 0; i < n; ++i)
      if (kernel[i] >= 0 && ((*pads)[i] >= kernel[i] || (*pads)[i + n] >= kernel[i]))
        return a.error("pads {} must be smaller than kernel_shape {} (spatial axis {}: pads {}+{}, "
                       "kernel {}): a window would lie entirely in the padding",
                       *pads, shape_to_string(kernel), i, (*pads)[i], (*pads)[i + n], kernel[i]);
  }
  out_spatial->assign(n, -1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t in = in_spatial[i];
    const Wide s = (*strides)[i];
    if (in < 0 || kernel[i] < 0) continue;  // unknown until run time
    const Wide eff = Wide{kernel[i] - 1} * (*dilations)[i] + 1;
    Wide pb = (*pads)[i], pe = (*pads)[i + n], out;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out = ceil_div(in, s);
      Wide total = (out - 1) * s + eff - in;
      if (total < 0) total = 0;
      // SAME_UPPER puts the odd unit of padding at the end, SAME_LOWER at the beginning.
      pb = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe = total - pb;
    } else {
      const Wide span = Wide{in} + pb + pe - eff;
      if (span < 0) {
        if (too_large(eff))
          return a.error("spatial axis {}: the dilated kernel size is too large", i);
        return a.error(
            "spatial axis {}: input size {} with pads {}+{} is smaller than the dilated kernel "
            "size {}",
            i, in, (*pads)[i], (*pads)[i + n], static_cast<int64_t>(eff));
      }
      out = ceil_mode ? ceil_div(span, s) + 1 : span / s + 1;
      // With ceil_mode, a last window that would start inside the end padding is dropped.
      if (ceil_mode && (out - 1) * s >= in + pb) --out;
    }
    if (too_large(out) || too_large(pb) || too_large(pe) || too_large(eff))
      return a.error("spatial axis {}: the output size or padding is too large", i);
    (*pads)[i] = static_cast<int64_t>(pb);
    (*pads)[i + n] = static_cast<int64_t>(pe);
    (*out_spatial)[i] = static_cast<int64_t>(out);
  }
  return OkStatus();
}

// Geometry of ConvTranspose: strides, dilations, pads (2n, begins then ends; these crop the
// full transposed output, and a negative end pad extends it with zeros) and the spatial output
// sizes. Honors output_padding, output_shape (n values, or n + 2 with batch and channels) and
// auto_pad.
Status conv_transpose_geometry(const NodeAttrs& a, const Shape& in_spatial, const Shape& kernel,
                               std::vector<int64_t>* strides, std::vector<int64_t>* dilations,
                               std::vector<int64_t>* pads, Shape* out_spatial) {
  const size_t n = in_spatial.size();
  TD_RETURN_IF_ERROR(check_kernel(a, in_spatial, kernel));
  TD_ASSIGN_OR_RETURN(std::string auto_pad, read_auto_pad(a));
  TD_RETURN_IF_ERROR(read_spatial_ints(a, "strides", n, 1, 1, strides));
  TD_RETURN_IF_ERROR(read_spatial_ints(a, "dilations", n, 1, 1, dilations));
  std::vector<int64_t> output_padding;
  TD_RETURN_IF_ERROR(read_spatial_ints(a, "output_padding", n, 0, 0, &output_padding));
  // As PyTorch (whose exporter writes it): output_padding only adds the rows a stride (or a
  // dilation) can skip; more would append rows no input element reaches.
  for (size_t i = 0; i < n; ++i)
    if (output_padding[i] >= std::max((*strides)[i], (*dilations)[i]))
      return a.error("output_padding {} must be smaller than the stride or the dilation on each "
                     "spatial axis (axis {}: output_padding {}, stride {}, dilation {})",
                     output_padding, i, output_padding[i], (*strides)[i], (*dilations)[i]);
  TD_ASSIGN_OR_RETURN(std::vector<int64_t> output_shape, a.attr_ints("output_shape", {}));
  const bool has_output_shape = a.has_attr("output_shape");
  if (has_output_shape) {
    if (output_shape.size() == n + 2)
      output_shape.erase(output_shape.begin(), output_shape.begin() + 2);
    if (output_shape.size() != n)
      return a.error("'output_shape' has {} values {}, expected {} (one per spatial axis)",
                     output_shape.size(), output_shape, n);
    for (int64_t v : output_shape)
      if (v < 0 || v > kMaxSize)
        return a.error("'output_shape' values must be >= 0, got {}", output_shape);
  }
  const bool explicit_pads = a.has_attr("pads") && auto_pad == "NOTSET";
  if (auto_pad == "NOTSET")
    TD_RETURN_IF_ERROR(read_pads(a, n, pads));
  else
    pads->assign(2 * n, 0);

  out_spatial->assign(n, -1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t in = in_spatial[i];
    if (has_output_shape) (*out_spatial)[i] = output_shape[i];
    if (in < 0 || kernel[i] < 0) continue;  // unknown until run time
    const Wide eff = Wide{kernel[i] - 1} * (*dilations)[i] + 1;
    // The full result, before any cropping (in >= 1 for a non-empty input).
    const Wide full = Wide{(*strides)[i]} * (in > 0 ? in - 1 : 0) + output_padding[i] + eff;
    Wide pb = (*pads)[i], pe = (*pads)[i + n], out;
    Wide target = -1;
    if (has_output_shape) {
      target = output_shape[i];
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      target = Wide{in} * (*strides)[i];
    }
    if (target >= 0) {
      if (has_output_shape && explicit_pads) {
        pe = full - target - pb;  // the given begin pads, the rest cropped (or added) at the end
      } else {
        const Wide total = full - target;
        if (total < 0) {  // output larger than the full result: zeros are added at the end
          pb = 0;
          pe = total;
        } else if (auto_pad == "SAME_UPPER") {
          pb = total / 2;
          pe = total - pb;
        } else {  // SAME_LOWER, or NOTSET with output_shape (the spec's formula)
          pe = total / 2;
          pb = total - pe;
        }
      }
      out = target;
    } else {
      out = full - pb - pe;
      if (out < 0 && !too_large(full))
        return a.error("spatial axis {}: pads {}+{} exceed the transposed output size {}", i,
                       (*pads)[i], (*pads)[i + n], static_cast<int64_t>(full));
    }
    if (too_large(out) || too_large(pb) || too_large(pe) || too_large(full))
      return a.error("spatial axis {}: the output size or padding is too large", i);
    (*pads)[i] = static_cast<int64_t>(pb);
    (*pads)[i + n] = static_cast<int64_t>(pe);
    (*out_spatial)[i] = static_cast<int64_t>(out);
  }
  return OkStatus();
}

}  // namespace nn

namespace {

// ---- type sets: one bit per DType value ----

using TypeSet = uint32_t;

constexpr TypeSet bit(DType t) { return TypeSet{1} << static_cast<int>(t); }

// Conv, pools, normalizations, Softmax, Dropout. Opset 17 lists bfloat16 for only some of
// these; accepting it everywhere is harmless, as the executor widens it like float16.
constexpr TypeSet kFloatTypes =
    bit(DType::kFloat16) | bit(DType::kBFloat16) | bit(DType::kFloat32) | bit(DType::kFloat64);
// MatMul and Gemm (T of opset 13).
constexpr TypeSet kMatMulTypes = kFloatTypes | bit(DType::kInt32) | bit(DType::kInt64) |
                                 bit(DType::kUInt32) | bit(DType::kUInt64);
constexpr TypeSet kMaxPoolTypes = kFloatTypes | bit(DType::kInt8) | bit(DType::kUInt8);

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

Status check_type(const InferenceContext& ctx, int i, const char* what, TypeSet allowed) {
  const DType t = ctx.input_dtype(i);
  const int v = static_cast<int>(t);
  if (v >= 0 && v < 32 && (allowed & bit(t))) return OkStatus();
  return ctx.error("input {} ({}) has dtype {}, expected one of {}", i, what, dtype_name(t),
                   type_set_names(allowed));
}

Status check_same_type(const InferenceContext& ctx, int i, const char* what_i, int j,
                       const char* what_j) {
  if (ctx.input_dtype(i) == ctx.input_dtype(j)) return OkStatus();
  return ctx.error("input {} ({}) has dtype {} but input {} ({}) has dtype {}; they must match", j,
                   what_j, dtype_name(ctx.input_dtype(j)), i, what_i,
                   dtype_name(ctx.input_dtype(i)));
}

Status check_min_rank(const InferenceContext& ctx, int i, const char* what, size_t min_rank) {
  const Shape& s = ctx.input_shape(i);
  if (s.size() >= min_rank) return OkStatus();
  return ctx.error("input {} ({}) must have rank >= {}, got shape {}", i, what, min_rank,
                   shape_to_string(s));
}

// Two dims that must agree when both are known.

// Spatial kernel dims of weight `w` (dims 2..), checked against a kernel_shape attribute.
Result<Shape> kernel_dims(const NodeAttrs& ctx, const Shape& w) {
  Shape kernel(w.begin() + 2, w.end());
  if (!ctx.has_attr("kernel_shape")) return kernel;
  TD_ASSIGN_OR_RETURN(std::vector<int64_t> ks, ctx.attr_ints("kernel_shape"));
  if (ks.size() != kernel.size())
    return ctx.error("kernel_shape {} does not match the weight's spatial dims {}", ks,
                     shape_to_string(kernel));
  for (size_t i = 0; i < ks.size(); ++i) {
    if (dims_conflict(ks[i], kernel[i]))
      return ctx.error("kernel_shape {} does not match the weight's spatial dims {}", ks,
                       shape_to_string(kernel));
    kernel[i] = ks[i];
  }
  return kernel;
}

// A per-channel parameter (BatchNormalization/InstanceNormalization scale, bias, mean, var):
// a 1-D tensor of `channels` values.
Status check_channel_param(const InferenceContext& ctx, int i, const char* what, int64_t channels) {
  const Shape& s = ctx.input_shape(i);
  if (s.size() != 1 || dims_conflict(s[0], channels))
    return ctx.error("input {} ({}) must have shape [{}] (one value per channel), got {}", i, what,
                     channels < 0 ? std::string("C") : std::to_string(channels),
                     shape_to_string(s));
  return OkStatus();
}

// Unidirectional broadcast of `from` onto `to` (Gemm C, LayerNormalization Scale/B).
bool unidirectional_broadcastable(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t off = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) {
    const int64_t f = from[i], t = to[off + i];
    if (f == 1 || f < 0 || t < 0 || f == t) continue;
    return false;
  }
  return true;
}

// ---- MatMul, Gemm ----

OpSchema matmul_schema() {
  OpSchema s;
  s.name = "MatMul";
  s.min_inputs = s.max_inputs = 2;
  s.doc = "matrix product with NumPy matmul semantics (1-D promotion, batch broadcasting)";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_type(ctx, 0, "A", kMatMulTypes));
    TD_RETURN_IF_ERROR(check_same_type(ctx, 0, "A", 1, "B"));
    Shape a = ctx.input_shape(0), b = ctx.input_shape(1);
    if (a.empty() || b.empty())
      return ctx.error("inputs must have rank >= 1, got {} x {}", shape_to_string(a),
                       shape_to_string(b));
    const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
    if (a_vec) a.insert(a.begin(), 1);
    if (b_vec) b.push_back(1);
    const int64_t k_a = a[a.size() - 1], k_b = b[b.size() - 2];
    if (dims_conflict(k_a, k_b))
      return ctx.error("inner dimensions differ: {} x {}", shape_to_string(ctx.input_shape(0)),
                       shape_to_string(ctx.input_shape(1)));
    auto batch = broadcast_shapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
    if (!batch.ok())
      return ctx.error("batch dimensions do not broadcast: {} x {}",
                       shape_to_string(ctx.input_shape(0)), shape_to_string(ctx.input_shape(1)));
    Shape out = *batch;
    if (!a_vec) out.push_back(a[a.size() - 2]);
    if (!b_vec) out.push_back(b[b.size() - 1]);
    ctx.set_output(0, ctx.input_dtype(0), std::move(out));
    return OkStatus();
  };
  return s;
}

OpSchema gemm_schema() {
  OpSchema s;
  s.name = "Gemm";
  s.min_inputs = 2;
  s.max_inputs = 3;
  s.attributes = {"alpha", "beta", "transA", "transB"};
  s.doc = "alpha * op(A) @ op(B) + beta * C, C broadcast to (M, N)";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_type(ctx, 0, "A", kMatMulTypes));
    TD_RETURN_IF_ERROR(check_same_type(ctx, 0, "A", 1, "B"));
    TD_ASSIGN_OR_RETURN(float alpha, ctx.attr_float("alpha", 1.0f));
    TD_ASSIGN_OR_RETURN(float beta, ctx.attr_float("beta", 1.0f));
    (void)alpha;
    (void)beta;
    TD_ASSIGN_OR_RETURN(int64_t trans_a, ctx.attr_int("transA", 0));
    TD_ASSIGN_OR_RETURN(int64_t trans_b, ctx.attr_int("transB", 0));
    const Shape& a = ctx.input_shape(0);
    const Shape& b = ctx.input_shape(1);
    if (a.size() != 2 || b.size() != 2)
      return ctx.error("A and B must be 2-D, got {} and {}", shape_to_string(a),
                       shape_to_string(b));
    const int64_t m = trans_a ? a[1] : a[0], k_a = trans_a ? a[0] : a[1];
    const int64_t k_b = trans_b ? b[1] : b[0], n = trans_b ? b[0] : b[1];
    if (dims_conflict(k_a, k_b))
      return ctx.error("inner dimensions differ: A {} (transA={}) x B {} (transB={})",
                       shape_to_string(a), trans_a, shape_to_string(b), trans_b);
    if (ctx.has_input(2)) {
      TD_RETURN_IF_ERROR(check_same_type(ctx, 0, "A", 2, "C"));
      if (!unidirectional_broadcastable(ctx.input_shape(2), {m, n}))
        return ctx.error("C of shape {} does not broadcast to (M, N) = {}",
                         shape_to_string(ctx.input_shape(2)), shape_to_string({m, n}));
    }
    ctx.set_output(0, ctx.input_dtype(0), {m, n});
    return OkStatus();
  };
  return s;
}

// ---- Conv, ConvTranspose ----

OpSchema conv_schema() {
  OpSchema s;
  s.name = "Conv";
  s.min_inputs = 2;
  s.max_inputs = 3;
  s.attributes = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"};
  s.doc = "N-d convolution (cross-correlation) with groups, strides, pads, dilations";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_type(ctx, 0, "X", kFloatTypes));
    TD_RETURN_IF_ERROR(check_same_type(ctx, 0, "X", 1, "W"));
    TD_RETURN_IF_ERROR(check_min_rank(ctx, 0, "X", 3));
    const Shape& w = ctx.input_shape(1);
    TD_ASSIGN_OR_RETURN(Shape out, nn::conv_output_shape(ctx, ctx.input_shape(0), w));
    if (ctx.has_input(2)) {
      TD_RETURN_IF_ERROR(check_same_type(ctx, 0, "X", 2, "B"));
      const Shape& b = ctx.input_shape(2);
      if (b.size() != 1 || dims_conflict(b[0], w[0]))
        return ctx.error("bias has shape {}, expected [{}] (one per output channel)",
                         shape_to_string(b), w[0]);
    }
    ctx.set_output(0, ctx.input_dtype(0), std::move(out));
    return OkStatus();
  };
  return s;
}

OpSchema conv_transpose_schema() {
  OpSchema s;
  s.name = "ConvTranspose";
  s.min_inputs = 2;
  s.max_inputs = 3;
  s.attributes = {"auto_pad",       "dilations",    "group", "kernel_shape",
                  "output_padding", "output_shape", "pads",  "strides"};
  s.doc = "N-d transposed convolution with groups, output_padding and output_shape";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_type(ctx, 0, "X", kFloatTypes));
    TD_RETURN_IF_ERROR(check_same_type(ctx, 0, "X", 1, "W"));
    TD_RETURN_IF_ERROR(check_min_rank(ctx, 0, "X", 3));
    const Shape& x = ctx.input_shape(0);
    const Shape& w = ctx.input_shape(1);
    if (w.size() != x.size())
      return ctx.error("weight has shape {}, expected rank {} like the input {}",
                       shape_to_string(w), x.size(), shape_to_string(x));
    TD_ASSIGN_OR_RETURN(int64_t group, ctx.attr_int("group", 1));
    if (group < 1) return ctx.error("group must be >= 1, got {}", group);
    const int64_t c = x[1];
    if (dims_conflict(c, w[0]))
      return ctx.error("input has {} channels, weight expects {}", c, w[0]);
    if (c >= 0 && c % group != 0)
      return ctx.error("input has {} channels, not divisible by group {}", c, group);
    const int64_t m = w[1] < 0 ? -1 : w[1] * group;
    TD_ASSIGN_OR_RETURN(Shape kernel, kernel_dims(ctx, w));
    if (ctx.has_input(2)) {
      TD_RETURN_IF_ERROR(check_same_type(ctx, 0, "X", 2, "B"));
      const Shape& b = ctx.input_shape(2);
      if (b.size() != 1 || dims_conflict(b[0], m))
        return ctx.error("bias has shape {}, expected [{}] (one per output channel)",
                         shape_to_string(b), m);
    }
    std::vector<int64_t> strides, dilations, pads;
    Shape out_spatial;
    TD_RETURN_IF_ERROR(nn::conv_transpose_geometry(ctx, Shape(x.begin() + 2, x.end()), kernel,
                                                   &strides, &dilations, &pads, &out_spatial));
    Shape out = {x[0], m};
    out.insert(out.end(), out_spatial.begin(), out_spatial.end());
    ctx.set_output(0, ctx.input_dtype(0), std::move(out));
    return OkStatus();
  };
  return s;
}

// ---- pools ----

enum class PoolKind { kMax, kAverage, kLp };

OpSchema pool_schema(const std::string& name, PoolKind kind) {
  OpSchema s;
  s.name = name;
  s.min_inputs = s.max_inputs = 1;
  // dilations (AveragePool, opset 19) and ceil_mode/dilations (LpPool, opset 18) are accepted
  // as well: the shared geometry handles them and newer models use them.
  s.attributes = {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides"};
  switch (kind) {
    case PoolKind::kMax:
      s.max_outputs = 2;
      s.attributes.insert("storage_order");
      s.doc = "N-d max pooling; optional int64 Indices output into the flattened input";
      break;
    case PoolKind::kAverage:
      s.attributes.insert("count_include_pad");
      s.doc = "N-d average pooling";
      break;
    case PoolKind::kLp:
      s.attributes.insert("p");
      s.doc = "N-d Lp pooling: (sum |x|^p)^(1/p) over each window";
      break;
  }
  s.infer = [kind](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(
        check_type(ctx, 0, "X", kind == PoolKind::kMax ? kMaxPoolTypes : kFloatTypes));
    TD_RETURN_IF_ERROR(check_min_rank(ctx, 0, "X", 3));
    const Shape& x = ctx.input_shape(0);
    if (!ctx.has_attr("kernel_shape")) return ctx.error("attribute 'kernel_shape' is required");
    TD_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, ctx.attr_ints("kernel_shape"));
    if (kernel.size() != x.size() - 2)
      return ctx.error("kernel_shape {} has {} values, input {} has {} spatial dims", kernel,
                       kernel.size(), shape_to_string(x), x.size() - 2);
    for (int64_t k : kernel)
      if (k < 1) return ctx.error("kernel_shape values must be >= 1, got {}", kernel);
    if (kind == PoolKind::kMax) {
      TD_ASSIGN_OR_RETURN(int64_t order, ctx.attr_int("storage_order", 0));
      if (order != 0 && order != 1)
        return ctx.error("storage_order must be 0 (row major) or 1 (column major), got {}", order);
    } else if (kind == PoolKind::kAverage) {
      TD_ASSIGN_OR_RETURN(int64_t cip, ctx.attr_int("count_include_pad", 0));
      if (cip != 0 && cip != 1) return ctx.error("count_include_pad must be 0 or 1, got {}", cip);
    } else {
      TD_ASSIGN_OR_RETURN(int64_t p, ctx.attr_int("p", 2));
      if (p < 1) return ctx.error("p must be >= 1, got {}", p);
    }
    std::vector<int64_t> strides, dilations, pads;
    Shape out_spatial;
    TD_RETURN_IF_ERROR(nn::window_geometry(ctx, Shape(x.begin() + 2, x.end()), kernel, true,
                                           &strides, &dilations, &pads, &out_spatial));
    Shape out = {x[0], x[1]};
    out.insert(out.end(), out_spatial.begin(), out_spatial.end());
    ctx.set_output(0, ctx.input_dtype(0), out);
    if (kind == PoolKind::kMax) ctx.set_output(1, DType::kInt64, out);
    return OkStatus();
  };
  return s;
}

OpSchema global_pool_schema(const std::string& name, bool lp) {
  OpSchema s;
  s.name = name;
  s.min_inputs = s.max_inputs = 1;
  if (lp) s.attributes = {"p"};
  s.doc = "pools over all spatial axes: (N, C, D1..Dn) -> (N, C, 1..1)";
  s.infer = [lp](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_type(ctx, 0, "X", kFloatTypes));
    TD_RETURN_IF_ERROR(check_min_rank(ctx, 0, "X", 3));
    if (lp) {
      TD_ASSIGN_OR_RETURN(int64_t p, ctx.attr_int("p", 2));
      if (p < 1) return ctx.error("p must be >= 1, got {}", p);
    }
    Shape out = ctx.input_shape(0);
    for (size_t i = 2; i < out.size(); ++i) out[i] = 1;
    ctx.set_output(0, ctx.input_dtype(0), std::move(out));
    return OkStatus();
  };
  return s;
}

// ---- normalizations ----

OpSchema batch_norm_schema() {
  OpSchema s;
  s.name = "BatchNormalization";
  s.min_inputs = s.max_inputs = 5;
  s.max_outputs = 3;
  s.attributes = {"epsilon", "momentum", "training_mode"};
  s.doc = "batch normalization: running statistics (inference) or batch statistics (training_mode=1)";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_type(ctx, 0, "X", kFloatTypes));
    TD_RETURN_IF_ERROR(check_type(ctx, 1, "scale", kFloatTypes));
    TD_RETURN_IF_ERROR(check_same_type(ctx, 1, "scale", 2, "B"));
    TD_RETURN_IF_ERROR(check_type(ctx, 3, "input_mean", kFloatTypes));
    TD_RETURN_IF_ERROR(check_same_type(ctx, 3, "input_mean", 4, "input_var"));
    TD_RETURN_IF_ERROR(check_min_rank(ctx, 0, "X", 2));
    TD_ASSIGN_OR_RETURN(float epsilon, ctx.attr_float("epsilon", 1e-5f));
    TD_ASSIGN_OR_RETURN(float momentum, ctx.attr_float("momentum", 0.9f));
    (void)momentum;  // only used in training mode
    if (epsilon < 0) return ctx.error("epsilon must be >= 0, got {}", epsilon);
    TD_ASSIGN_OR_RETURN(int64_t training, ctx.attr_int("training_mode", 0));
    if (training != 0 && training != 1)
      return ctx.error("training_mode must be 0 or 1, got {}", training);
    if (!training && ctx.num_outputs() > 1)
      return ctx.error(
          "has {} outputs, but running_mean and running_var exist only with "
          "training_mode=1; inference mode has the one output Y",
          ctx.num_outputs());
    const int64_t c = ctx.input_shape(0)[1];
    const char* names[] = {"scale", "B", "input_mean", "input_var"};
    for (int i = 1; i <= 4; ++i) TD_RETURN_IF_ERROR(check_channel_param(ctx, i, names[i - 1], c));
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
    // Training mode: batch statistics normalise Y; running_mean/var are updated with momentum.
    for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, ctx.input_dtype(3), {c});
    return OkStatus();
  };
  return s;
}

OpSchema instance_norm_schema() {
  OpSchema s;
  s.name = "InstanceNormalization";
  s.min_inputs = s.max_inputs = 3;
  s.attributes = {"epsilon"};
  s.doc = "normalizes each (n, c) plane over its spatial axes, then scale and bias per channel";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_type(ctx, 0, "input", kFloatTypes));
    TD_RETURN_IF_ERROR(check_same_type(ctx, 0, "input", 1, "scale"));
    TD_RETURN_IF_ERROR(check_same_type(ctx, 0, "input", 2, "B"));
    TD_RETURN_IF_ERROR(check_min_rank(ctx, 0, "input", 3));
    TD_ASSIGN_OR_RETURN(float epsilon, ctx.attr_float("epsilon", 1e-5f));
    if (epsilon < 0) return ctx.error("epsilon must be >= 0, got {}", epsilon);
    const int64_t c = ctx.input_shape(0)[1];
    TD_RETURN_IF_ERROR(check_channel_param(ctx, 1, "scale", c));
    TD_RETURN_IF_ERROR(check_channel_param(ctx, 2, "B", c));
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
    return OkStatus();
  };
  return s;
}

OpSchema lrn_schema() {
  OpSchema s;
  s.name = "LRN";
  s.min_inputs = s.max_inputs = 1;
  s.attributes = {"alpha", "beta", "bias", "size"};
  s.doc = "local response normalization across channels";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_type(ctx, 0, "X", kFloatTypes));
    TD_RETURN_IF_ERROR(check_min_rank(ctx, 0, "X", 2));
    if (!ctx.has_attr("size")) return ctx.error("attribute 'size' is required");
    TD_ASSIGN_OR_RETURN(int64_t size, ctx.attr_int("size", 1));
    if (size < 1) return ctx.error("size must be >= 1, got {}", size);
    for (const char* name : {"alpha", "beta", "bias"}) {
      auto r = ctx.attr_float(name, 0.0f);
      if (!r.ok()) return r.status();
    }
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
    return OkStatus();
  };
  return s;
}

OpSchema layer_norm_schema() {
  OpSchema s;
  s.name = "LayerNormalization";
  s.min_inputs = 2;
  s.max_inputs = 3;
  s.max_outputs = 3;
  s.attributes = {"axis", "epsilon", "stash_type"};
  s.doc = "normalizes over the axes from `axis` on, then Scale and B; optional Mean, InvStdDev";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_type(ctx, 0, "X", kFloatTypes));
    TD_RETURN_IF_ERROR(check_same_type(ctx, 0, "X", 1, "Scale"));
    if (ctx.has_input(2)) TD_RETURN_IF_ERROR(check_same_type(ctx, 0, "X", 2, "B"));
    const Shape& x = ctx.input_shape(0);
    TD_ASSIGN_OR_RETURN(int64_t axis_attr, ctx.attr_int("axis", -1));
    auto axis = normalize_axis(axis_attr, static_cast<int64_t>(x.size()));
    if (!axis.ok()) return ctx.wrap(axis.status());
    TD_ASSIGN_OR_RETURN(float epsilon, ctx.attr_float("epsilon", 1e-5f));
    if (epsilon < 0) return ctx.error("epsilon must be >= 0, got {}", epsilon);
    TD_ASSIGN_OR_RETURN(int64_t stash, ctx.attr_int("stash_type", 1));
    if (!dtype_is_valid(static_cast<int32_t>(stash)) || !dtype_is_float(static_cast<DType>(stash)))
      return ctx.error(
          "stash_type must be a float dtype (1 float32, 10 float16, 11 float64, "
          "16 bfloat16), got {}",
          stash);
    for (int i = 1; i <= 2; ++i) {
      if (!ctx.has_input(i)) continue;
      const Shape& p = ctx.input_shape(i);
      if (!unidirectional_broadcastable(p, x))
        return ctx.error("{} of shape {} does not broadcast to X {}", i == 1 ? "Scale" : "B",
                         shape_to_string(p), shape_to_string(x));
    }
    ctx.set_output(0, ctx.input_dtype(0), x);
    Shape stat = x;
    for (size_t i = static_cast<size_t>(*axis); i < stat.size(); ++i) stat[i] = 1;
    ctx.set_output(1, static_cast<DType>(stash), stat);
    ctx.set_output(2, static_cast<DType>(stash), stat);
    return OkStatus();
  };
  return s;
}

// ---- Softmax family, Dropout ----

OpSchema softmax_schema(const std::string& name, const std::string& doc) {
  OpSchema s;
  s.name = name;
  s.min_inputs = s.max_inputs = 1;
  s.attributes = {"axis"};
  s.doc = doc;
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_type(ctx, 0, "input", kFloatTypes));
    TD_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis", -1));
    auto r = normalize_axis(axis, static_cast<int64_t>(ctx.input_shape(0).size()));
    if (!r.ok()) return ctx.wrap(r.status());
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
    return OkStatus();
  };
  return s;
}

OpSchema dropout_schema() {
  OpSchema s;
  s.name = "Dropout";
  s.min_inputs = 1;
  s.max_inputs = 3;
  s.max_outputs = 2;
  s.attributes = {"seed"};
  s.doc = "identity in inference mode (mask all true); random dropout when training_mode";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_type(ctx, 0, "data", kFloatTypes));
    TD_ASSIGN_OR_RETURN(int64_t seed, ctx.attr_int("seed", 0));
    (void)seed;
    if (ctx.has_input(1)) {
      TD_RETURN_IF_ERROR(check_type(ctx, 1, "ratio", kFloatTypes));
      const Shape& r = ctx.input_shape(1);
      if (!r.empty() && !(r.size() == 1 && r[0] == 1))
        return ctx.error("ratio must be a scalar, got shape {}", shape_to_string(r));
    }
    if (ctx.has_input(2)) {
      TD_RETURN_IF_ERROR(check_type(ctx, 2, "training_mode", bit(DType::kBool)));
      const Shape& t = ctx.input_shape(2);
      if (!t.empty() && !(t.size() == 1 && t[0] == 1))
        return ctx.error("training_mode must be a scalar, got shape {}", shape_to_string(t));
    }
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
    ctx.set_output(1, DType::kBool, ctx.input_shape(0));
    return OkStatus();
  };
  return s;
}

}  // namespace

namespace nn {

// Declared in op_helpers.h.
Result<Shape> conv_output_shape(const NodeAttrs& ctx, const Shape& x, const Shape& w) {
  if (x.size() < 3)
    return ctx.error("X must have rank >= 3 (N, C, spatial...), got shape {}",
                     shape_to_string(x));
  if (w.size() != x.size())
    return ctx.error("weight has shape {}, expected rank {} like the input {}", shape_to_string(w),
                     x.size(), shape_to_string(x));
  TD_ASSIGN_OR_RETURN(int64_t group, ctx.attr_int("group", 1));
  if (group < 1) return ctx.error("group must be >= 1, got {}", group);
  const int64_t c = x[1], m = w[0];
  if (c >= 0 && c % group != 0)
    return ctx.error("input has {} channels, not divisible by group {}", c, group);
  if (w[1] >= 0 && dims_conflict(c, w[1] * group))
    return ctx.error("input has {} channels, weight expects {}", c, w[1] * group);
  if (m >= 0 && m % group != 0)
    return ctx.error("weight has {} output channels, not divisible by group {}", m, group);
  TD_ASSIGN_OR_RETURN(Shape kernel, kernel_dims(ctx, w));
  std::vector<int64_t> strides, dilations, pads;
  Shape out_spatial;
  TD_RETURN_IF_ERROR(nn::window_geometry(ctx, Shape(x.begin() + 2, x.end()), kernel, false,
                                         &strides, &dilations, &pads, &out_spatial));
  Shape out = {x[0], m};
  out.insert(out.end(), out_spatial.begin(), out_spatial.end());
  return out;
}

}  // namespace nn

void register_nn_ops(OpRegistry& r) {
  r.add(matmul_schema());
  r.add(gemm_schema());
  r.add(conv_schema());
  r.add(conv_transpose_schema());
  r.add(pool_schema("MaxPool", PoolKind::kMax));
  r.add(pool_schema("AveragePool", PoolKind::kAverage));
  r.add(pool_schema("LpPool", PoolKind::kLp));
  r.add(global_pool_schema("GlobalAveragePool", false));
  r.add(global_pool_schema("GlobalMaxPool", false));
  r.add(global_pool_schema("GlobalLpPool", true));
  r.add(batch_norm_schema());
  r.add(instance_norm_schema());
  r.add(lrn_schema());
  r.add(layer_norm_schema());
  r.add(softmax_schema("Softmax", "exp(x) / sum(exp(x)) along one axis (default -1)"));
  r.add(softmax_schema("LogSoftmax", "log of Softmax along one axis (default -1)"));
  r.add(softmax_schema("Hardmax", "1 at the first maximum along one axis (default -1), else 0"));
  r.add(dropout_schema());
}

}  // namespace tensord
