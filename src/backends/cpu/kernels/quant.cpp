// Reference kernels of the quantization ops: QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv.
//
// Arithmetic follows ONNX's reference implementation (numpy): x / scale is computed in float32
// when both are float32, rounding is to nearest with ties to even (std::rint in the default
// rounding mode), and results saturate to the quantized type's range. Integer products
// accumulate in int64 and wrap to int32 as the int32 accumulator of the spec would.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backends/cpu/dispatch.h"
#include "backends/cpu/kernel.h"
#include "core/op_registry.h"
#include "core/ops/op_helpers.h"

namespace tensord {

namespace cpu {
namespace {

// ---- helpers ----

std::vector<double> to_doubles(const TensorView& v) {
  std::vector<double> out(static_cast<size_t>(v.numel()));
  (void)dispatch_numeric(v.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(v.as<T>()[i]);
    return OkStatus();
  });
  return out;
}

// Values of an integer tensor (int8, uint8, int32) as int32.
std::vector<int32_t> to_int32s(const TensorView& v) {
  std::vector<int32_t> out(static_cast<size_t>(v.numel()));
  (void)dispatch_numeric(v.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int32_t>(v.as<T>()[i]);
    return OkStatus();
  });
  return out;
}

void quant_range(DType t, double* lo, double* hi) {
  if (t == DType::kInt8) {
    *lo = -128;
    *hi = 127;
  } else {
    *lo = 0;
    *hi = 255;
  }
}

// Rounds half to even and saturates to [lo, hi]. NaN goes to lo, as numpy's conversion of NaN
// to int32 (INT32_MIN) followed by the reference's clip does.
double saturate_round(double v, double lo, double hi) {
  if (std::isnan(v)) return lo;
  return std::clamp(std::rint(v), lo, hi);
}

Status store_quantized(const MutableTensorView& y, int64_t i, double v) {
  if (y.dtype == DType::kInt8)
    y.as<int8_t>()[i] = static_cast<int8_t>(v);
  else
    y.as<uint8_t>()[i] = static_cast<uint8_t>(v);
  return OkStatus();
}

// For each flat index of `out`, the flat index of `in` under numpy broadcasting (in aligned to
// the right of out; size-1 dims repeat). `in` must broadcast to `out`.
std::vector<int64_t> broadcast_map(const Shape& in, const Shape& out) {
  const size_t rank = out.size();
  const size_t off = rank - in.size();
  std::vector<int64_t> in_strides(rank, 0);
  int64_t s = 1;
  for (size_t d = in.size(); d-- > 0;) {
    in_strides[d + off] = in[d] == 1 ? 0 : s;
    s *= in[d];
  }
  const int64_t n = shape_numel(out);
  std::vector<int64_t> map(static_cast<size_t>(n));
  std::vector<int64_t> idx(rank, 0);
  for (int64_t f = 0; f < n; ++f) {
    int64_t o = 0;
    for (size_t d = 0; d < rank; ++d) o += idx[d] * in_strides[d];
    map[static_cast<size_t>(f)] = o;
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
  return map;
}

bool broadcasts_to(const Shape& in, const Shape& out) {
  if (in.size() > out.size()) return false;
  const size_t off = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d)
    if (in[d] != 1 && in[d] != out[d + off]) return false;
  return true;
}

// ---- QuantizeLinear, DequantizeLinear ----

// Index into a per-tensor (size 1) or per-axis parameter for each element of x.
struct ParamIndex {
  int64_t inner = 1;  // elements per step along the axis
  int64_t dim = 1;    // 1: per tensor
  int64_t operator()(int64_t i) const { return dim == 1 ? 0 : (i / inner) % dim; }
};

Result<ParamIndex> param_index(KernelContext& ctx, const char* scale_name) {
  const TensorView& x = ctx.input(0);
  const TensorView& scale = ctx.input(1);
  ParamIndex p;
  const int64_t n = scale.numel();
  if (ctx.has_input(2) && ctx.input(2).numel() != n)
    return ctx.error("zero point has {} values but {} has {}", ctx.input(2).numel(), scale_name, n);
  if (n == 1) return p;
  TD_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis", 1));
  auto a = normalize_axis(axis, static_cast<int64_t>(x.shape.size()));
  if (!a.ok())
    return ctx.error("axis {} is out of range for input of shape {}", axis,
                     shape_to_string(x.shape));
  const size_t ax = static_cast<size_t>(*a);
  if (x.shape[ax] != n)
    return ctx.error("{} has {} values but input axis {} has size {}", scale_name, n, axis,
                     x.shape[ax]);
  p.dim = n;
  for (size_t d = ax + 1; d < x.shape.size(); ++d) p.inner *= x.shape[d];
  return p;
}

Status quantize_linear_kernel(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  const TensorView& scale = ctx.input(1);
  TD_ASSIGN_OR_RETURN(ParamIndex pi, param_index(ctx, "y_scale"));
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  const std::vector<double> xs = to_doubles(x);
  const std::vector<double> ss = to_doubles(scale);
  std::vector<double> zps(ss.size(), 0.0);
  if (ctx.has_input(2)) zps = to_doubles(ctx.input(2));
  for (double s : ss)
    if (s == 0) return ctx.error("y_scale must not be zero, got {}", ss);
  double lo, hi;
  quant_range(y.dtype, &lo, &hi);
  // numpy divides float32 by float32 in float32; int32 or float64 operands give float64.
  const bool in_float = x.dtype == DType::kFloat32 && scale.dtype == DType::kFloat32;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const size_t k = static_cast<size_t>(pi(i));
    const double q =
        in_float ? static_cast<double>(static_cast<float>(xs[i]) / static_cast<float>(ss[k]))
                 : xs[i] / ss[k];
    double v = std::rint(q);
    if (!std::isnan(v)) v += zps[k];
    TD_RETURN_IF_ERROR(store_quantized(y, i, saturate_round(v, lo, hi)));
  }
  return OkStatus();
}

Status dequantize_linear_kernel(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  TD_ASSIGN_OR_RETURN(ParamIndex pi, param_index(ctx, "x_scale"));
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  const std::vector<int32_t> xs = to_int32s(x);
  const std::vector<double> ss = to_doubles(ctx.input(1));
  std::vector<int32_t> zps(ss.size(), 0);
  if (ctx.has_input(2)) zps = to_int32s(ctx.input(2));
  return dispatch_float(y.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    T* dst = y.as<T>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const size_t k = static_cast<size_t>(pi(i));
      const int64_t diff = static_cast<int64_t>(xs[i]) - zps[k];
      dst[i] = static_cast<T>(diff) * static_cast<T>(ss[k]);
    }
    return OkStatus();
  });
}

Status dynamic_quantize_linear_kernel(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  const std::vector<double> xs = to_doubles(x);
  // float32 arithmetic throughout, as the reference implementation does.
  float maxx = 0, minx = 0;
  for (double v : xs) {
    if (std::isnan(v)) continue;
    maxx = std::max(maxx, static_cast<float>(v));
    minx = std::min(minx, static_cast<float>(v));
  }
  // The range always contains 0, so it is empty only when x is all zeros; the scale is then
  // 1 (zero point 0, y 0) rather than a division by zero.
  const float scale = maxx == minx ? 1.0f : (maxx - minx) / 255.0f;
  const float zp_f = std::clamp(0.0f - minx / scale, 0.0f, 255.0f);
  const float zp = std::rint(zp_f);
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  TD_ASSIGN_OR_RETURN(MutableTensorView y_scale, ctx.output(1));
  TD_ASSIGN_OR_RETURN(MutableTensorView y_zp, ctx.output(2));
  for (size_t i = 0; i < xs.size(); ++i) {
    const float q = std::rint(static_cast<float>(xs[i]) / scale);
    y.as<uint8_t>()[i] = static_cast<uint8_t>(saturate_round(static_cast<double>(q) + zp, 0, 255));
  }
  y_scale.as<float>()[0] = scale;
  y_zp.as<uint8_t>()[0] = static_cast<uint8_t>(zp);
  return OkStatus();
}

// ---- MatMulInteger, QLinearMatMul ----

// Operands of a numpy.matmul with 1-D operands promoted to matrices and batch dims mapped.
struct MatMulSetup {
  Shape a, b;                             // promoted shapes: [..., M, K] and [..., K, N]
  Shape batch;                            // broadcast batch shape of the output
  std::vector<int64_t> a_batch, b_batch;  // for each output batch, the operands' batch index
  int64_t m = 0, k = 0, n = 0;
};

Result<MatMulSetup> matmul_setup(KernelContext& ctx, int ia, int ib) {
  MatMulSetup s;
  s.a = ctx.input(ia).shape;
  s.b = ctx.input(ib).shape;
  if (s.a.size() == 1) s.a.insert(s.a.begin(), 1);
  if (s.b.size() == 1) s.b.push_back(1);
  s.m = s.a[s.a.size() - 2];
  s.k = s.a[s.a.size() - 1];
  s.n = s.b[s.b.size() - 1];
  if (s.b[s.b.size() - 2] != s.k)
    return ctx.error("inner dimensions differ: {} x {}", shape_to_string(ctx.input(ia).shape),
                     shape_to_string(ctx.input(ib).shape));
  const Shape ab(s.a.begin(), s.a.end() - 2), bb(s.b.begin(), s.b.end() - 2);
  auto batch = broadcast_shapes(ab, bb);
  if (!batch.ok()) return ctx.wrap(batch.status());
  s.batch = *batch;
  s.a_batch = broadcast_map(ab, s.batch);
  s.b_batch = broadcast_map(bb, s.batch);
  return s;
}

// Shape of a per-row parameter of a ([..., M, 1]) or per-column parameter of b ([..., 1, N]).
Shape param_shape(Shape operand, bool row_wise) {
  operand[row_wise ? operand.size() - 1 : operand.size() - 2] = 1;
  return operand;
}

// A matmul parameter (zero point or scale) of operand a (row_wise: one value per row, shape
// [..., M, 1]) or b (one value per column, [..., 1, N]), expanded to that shape.
Result<std::vector<double>> matmul_param(KernelContext& ctx, int i, const char* what,
                                         const Shape& operand, bool row_wise) {
  const TensorView& p = ctx.input(i);
  const std::vector<double> v = to_doubles(p);
  const Shape target = param_shape(operand, row_wise);
  const int64_t count = shape_numel(target);
  if (v.size() == 1) return std::vector<double>(static_cast<size_t>(count), v[0]);
  Shape ps = p.shape;
  if (ps.size() == 1 && row_wise) ps.push_back(1);  // [M] means one value per row
  if (!broadcasts_to(ps, target))
    return ctx.error("input {} ({}) has shape {}, which does not broadcast to {}", i, what,
                     shape_to_string(p.shape), shape_to_string(target));
  const std::vector<int64_t> map = broadcast_map(ps, target);
  std::vector<double> out(static_cast<size_t>(count));
  for (size_t f = 0; f < out.size(); ++f) out[f] = v[static_cast<size_t>(map[f])];
  return out;
}

// The int32 matmul of (a - a_zp) and (b - b_zp) with zero points per row / per column.
// a_zp has one value per row of a ([batch_a..., M]), b_zp one per column ([batch_b..., N]).
std::vector<int32_t> integer_matmul(const MatMulSetup& s, const std::vector<int32_t>& a,
                                    const std::vector<int32_t>& b, const std::vector<double>& a_zp,
                                    const std::vector<double>& b_zp) {
  const int64_t nb = shape_numel(s.batch);
  std::vector<int32_t> out(static_cast<size_t>(nb * s.m * s.n));
  for (int64_t bi = 0; bi < nb; ++bi) {
    const int64_t ab = s.a_batch[static_cast<size_t>(bi)], bb = s.b_batch[static_cast<size_t>(bi)];
    for (int64_t i = 0; i < s.m; ++i) {
      const int64_t za = static_cast<int64_t>(a_zp[static_cast<size_t>(ab * s.m + i)]);
      for (int64_t j = 0; j < s.n; ++j) {
        const int64_t zb = static_cast<int64_t>(b_zp[static_cast<size_t>(bb * s.n + j)]);
        int64_t acc = 0;
        for (int64_t p = 0; p < s.k; ++p) {
          const int64_t av = a[static_cast<size_t>((ab * s.m + i) * s.k + p)] - za;
          const int64_t bv = b[static_cast<size_t>((bb * s.k + p) * s.n + j)] - zb;
          acc += av * bv;
        }
        out[static_cast<size_t>((bi * s.m + i) * s.n + j)] = static_cast<int32_t>(acc);
      }
    }
  }
  return out;
}

Status matmul_integer_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MatMulSetup s, matmul_setup(ctx, 0, 1));
  std::vector<double> a_zp(static_cast<size_t>(shape_numel(param_shape(s.a, true))), 0.0);
  std::vector<double> b_zp(static_cast<size_t>(shape_numel(param_shape(s.b, false))), 0.0);
  if (ctx.has_input(2)) {
    TD_ASSIGN_OR_RETURN(a_zp, matmul_param(ctx, 2, "a_zero_point", s.a, true));
  }
  if (ctx.has_input(3)) {
    TD_ASSIGN_OR_RETURN(b_zp, matmul_param(ctx, 3, "b_zero_point", s.b, false));
  }
  const std::vector<int32_t> r =
      integer_matmul(s, to_int32s(ctx.input(0)), to_int32s(ctx.input(1)), a_zp, b_zp);
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  std::copy(r.begin(), r.end(), y.as<int32_t>());
  return OkStatus();
}

Status qlinear_matmul_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MatMulSetup s, matmul_setup(ctx, 0, 3));
  TD_ASSIGN_OR_RETURN(std::vector<double> a_scale, matmul_param(ctx, 1, "a_scale", s.a, true));
  TD_ASSIGN_OR_RETURN(std::vector<double> a_zp, matmul_param(ctx, 2, "a_zero_point", s.a, true));
  TD_ASSIGN_OR_RETURN(std::vector<double> b_scale, matmul_param(ctx, 4, "b_scale", s.b, false));
  TD_ASSIGN_OR_RETURN(std::vector<double> b_zp, matmul_param(ctx, 5, "b_zero_point", s.b, false));
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  const Shape out = y.shape;
  std::vector<double> y_scale, y_zp;
  for (int i : {6, 7}) {
    const TensorView& p = ctx.input(i);
    if (!broadcasts_to(p.shape, out))
      return ctx.error("input {} ({}) has shape {}, which does not broadcast to the output {}", i,
                       i == 6 ? "y_scale" : "y_zero_point", shape_to_string(p.shape),
                       shape_to_string(out));
    const std::vector<double> v = to_doubles(p);
    const std::vector<int64_t> map = broadcast_map(p.shape, out);
    std::vector<double>& dst = i == 6 ? y_scale : y_zp;
    dst.resize(map.size());
    for (size_t f = 0; f < map.size(); ++f) dst[f] = v[static_cast<size_t>(map[f])];
  }
  const std::vector<int32_t> acc =
      integer_matmul(s, to_int32s(ctx.input(0)), to_int32s(ctx.input(3)), a_zp, b_zp);
  double lo, hi;
  quant_range(y.dtype, &lo, &hi);
  const int64_t nb = shape_numel(s.batch);
  for (int64_t bi = 0; bi < nb; ++bi) {
    const int64_t ab = s.a_batch[static_cast<size_t>(bi)], bb = s.b_batch[static_cast<size_t>(bi)];
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        const size_t o = static_cast<size_t>((bi * s.m + i) * s.n + j);
        // a_scale * b_scale / y_scale in float32, the int32 product times it in float64.
        const float mult = static_cast<float>(a_scale[static_cast<size_t>(ab * s.m + i)]) *
                           static_cast<float>(b_scale[static_cast<size_t>(bb * s.n + j)]) /
                           static_cast<float>(y_scale[o]);
        const double v = static_cast<double>(acc[o]) * static_cast<double>(mult) + y_zp[o];
        TD_RETURN_IF_ERROR(store_quantized(y, static_cast<int64_t>(o), saturate_round(v, lo, hi)));
      }
    }
  }
  return OkStatus();
}

// ---- ConvInteger, QLinearConv ----

struct ConvSetup {
  Shape x, w, out;
  int64_t group = 1;
  std::vector<int64_t> strides, dilations, pads;
};

Result<ConvSetup> conv_setup(KernelContext& ctx, int ix, int iw) {
  ConvSetup s;
  s.x = ctx.input(ix).shape;
  s.w = ctx.input(iw).shape;
  TD_ASSIGN_OR_RETURN(s.group, ctx.attr_int("group", 1));
  const Shape kernel(s.w.begin() + 2, s.w.end());
  Shape out_spatial;
  TD_RETURN_IF_ERROR(nn::window_geometry(ctx, Shape(s.x.begin() + 2, s.x.end()), kernel, false,
                                         &s.strides, &s.dilations, &s.pads, &out_spatial));
  s.out = {s.x[0], s.w[0]};
  s.out.insert(s.out.end(), out_spatial.begin(), out_spatial.end());
  return s;
}

// Row-major multi-index of flat position f in `shape`.
void unflatten(int64_t f, const Shape& shape, std::vector<int64_t>* idx) {
  idx->resize(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    (*idx)[d] = f % shape[d];
    f /= shape[d];
  }
}

// int64 sums of the convolution of x (zero point already subtracted) by w (likewise).
std::vector<int64_t> integer_conv(const ConvSetup& s, const std::vector<int32_t>& x,
                                  const std::vector<int32_t>& w) {
  const size_t nsp = s.x.size() - 2;
  const Shape in_sp(s.x.begin() + 2, s.x.end());
  const Shape k_sp(s.w.begin() + 2, s.w.end());
  const Shape out_sp(s.out.begin() + 2, s.out.end());
  const int64_t batch = s.x[0], c_in = s.x[1], m = s.w[0];
  const int64_t c_per_group = s.w[1], m_per_group = m / s.group;
  const int64_t in_size = shape_numel(in_sp), k_size = shape_numel(k_sp);
  const int64_t out_size = shape_numel(out_sp);
  std::vector<int64_t> out(static_cast<size_t>(batch * m * out_size), 0);
  std::vector<int64_t> oi, ki;
  for (int64_t o = 0; o < out_size; ++o) {
    unflatten(o, out_sp, &oi);
    for (int64_t kf = 0; kf < k_size; ++kf) {
      unflatten(kf, k_sp, &ki);
      // Flat spatial offset of the input position this kernel tap reads, or -1 in padding.
      int64_t in_off = 0;
      for (size_t d = 0; d < nsp && in_off >= 0; ++d) {
        const int64_t pos = oi[d] * s.strides[d] - s.pads[d] + ki[d] * s.dilations[d];
        if (pos < 0 || pos >= in_sp[d])
          in_off = -1;
        else
          in_off = in_off * in_sp[d] + pos;
      }
      if (in_off < 0) continue;
      for (int64_t nb = 0; nb < batch; ++nb) {
        for (int64_t oc = 0; oc < m; ++oc) {
          const int64_t g = oc / m_per_group;
          int64_t acc = 0;
          for (int64_t c = 0; c < c_per_group; ++c) {
            const int64_t ic = g * c_per_group + c;
            acc +=
                static_cast<int64_t>(x[static_cast<size_t>((nb * c_in + ic) * in_size + in_off)]) *
                w[static_cast<size_t>((oc * c_per_group + c) * k_size + kf)];
          }
          out[static_cast<size_t>((nb * m + oc) * out_size + o)] += acc;
        }
      }
    }
  }
  return out;
}

// x minus its (scalar) zero point, w minus its per-tensor or per-output-channel zero point.
Status subtract_conv_zero_points(KernelContext& ctx, int ix, int ixzp, int iw, int iwzp,
                                 std::vector<int32_t>* x, std::vector<int32_t>* w) {
  *x = to_int32s(ctx.input(ix));
  *w = to_int32s(ctx.input(iw));
  if (ixzp >= 0 && ctx.has_input(ixzp)) {
    const TensorView& zp = ctx.input(ixzp);
    if (zp.numel() != 1)
      return ctx.error("input {} (x_zero_point) must be a scalar, got shape {}", ixzp,
                       shape_to_string(zp.shape));
    const int32_t z = to_int32s(zp)[0];
    for (int32_t& v : *x) v -= z;
  }
  if (iwzp >= 0 && ctx.has_input(iwzp)) {
    const TensorView& zp = ctx.input(iwzp);
    const int64_t m = ctx.input(iw).shape[0];
    if (zp.numel() != 1 && zp.numel() != m)
      return ctx.error("input {} (w_zero_point) has {} values, expected 1 or {}", iwzp, zp.numel(),
                       m);
    const std::vector<int32_t> z = to_int32s(zp);
    const int64_t per = m > 0 ? static_cast<int64_t>(w->size()) / m : 0;
    for (size_t i = 0; i < w->size(); ++i)
      (*w)[i] -= z.size() == 1 ? z[0] : z[static_cast<size_t>(static_cast<int64_t>(i) / per)];
  }
  return OkStatus();
}

Status conv_integer_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(ConvSetup s, conv_setup(ctx, 0, 1));
  std::vector<int32_t> x, w;
  TD_RETURN_IF_ERROR(subtract_conv_zero_points(ctx, 0, 2, 1, 3, &x, &w));
  const std::vector<int64_t> acc = integer_conv(s, x, w);
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  for (size_t i = 0; i < acc.size(); ++i) y.as<int32_t>()[i] = static_cast<int32_t>(acc[i]);
  return OkStatus();
}

Status qlinear_conv_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(ConvSetup s, conv_setup(ctx, 0, 3));
  std::vector<int32_t> x, w;
  TD_RETURN_IF_ERROR(subtract_conv_zero_points(ctx, 0, 2, 3, 5, &x, &w));
  std::vector<int64_t> acc = integer_conv(s, x, w);
  const int64_t m = s.w[0];
  const int64_t per_channel = shape_numel(Shape(s.out.begin() + 2, s.out.end()));
  const std::vector<double> w_scale = to_doubles(ctx.input(4));
  if (w_scale.size() != 1 && static_cast<int64_t>(w_scale.size()) != m)
    return ctx.error("input 4 (w_scale) has {} values, expected 1 or {}", w_scale.size(), m);
  const float x_scale = static_cast<float>(to_doubles(ctx.input(1))[0]);
  const float y_scale = static_cast<float>(to_doubles(ctx.input(6))[0]);
  const double y_zp = to_doubles(ctx.input(7))[0];
  std::vector<int32_t> bias;
  if (ctx.has_input(8)) bias = to_int32s(ctx.input(8));
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  double lo, hi;
  quant_range(y.dtype, &lo, &hi);
  for (size_t i = 0; i < acc.size(); ++i) {
    const int64_t oc = (static_cast<int64_t>(i) / per_channel) % m;
    int64_t a = acc[i];
    if (!bias.empty()) a += bias[static_cast<size_t>(oc)];
    const float ws = static_cast<float>(w_scale.size() == 1 ? w_scale[0] : w_scale[oc]);
    const float mult = x_scale * ws / y_scale;  // float32, as numpy computes it
    const double v = static_cast<double>(static_cast<int32_t>(a)) * mult + y_zp;
    TD_RETURN_IF_ERROR(store_quantized(y, static_cast<int64_t>(i), saturate_round(v, lo, hi)));
  }
  return OkStatus();
}

}  // namespace

void register_reference_quant_kernels(KernelRegistry& r) {
  auto add = [&r](const char* op, KernelFn fn) {
    r.add(KernelDef{op, "reference", nullptr, std::move(fn)});
  };
  add("QuantizeLinear", quantize_linear_kernel);
  add("DequantizeLinear", dequantize_linear_kernel);
  add("DynamicQuantizeLinear", dynamic_quantize_linear_kernel);
  add("MatMulInteger", matmul_integer_kernel);
  add("QLinearMatMul", qlinear_matmul_kernel);
  add("ConvInteger", conv_integer_kernel);
  add("QLinearConv", qlinear_conv_kernel);
}

}  // namespace cpu
}  // namespace tensord
