// Reference kernels of the image ops: Resize, GridSample, RoiAlign, MaxRoiPool, MaxUnpool and
// NonMaxSuppression.
//
// The coordinate math follows ONNX's reference implementations (onnx/reference/ops), which
// produced the conformance tests: Resize computes, per axis and output coordinate, the source
// coordinate and the taps (indices and weights) exactly as op_resize.py does, and applies them
// one axis at a time from the last to the first, which is how its nested 1-D interpolation
// works; GridSample, RoiAlign and NonMaxSuppression mirror op_grid_sample.py,
// op_roi_align.py and op_non_max_suppression.py. MaxRoiPool follows onnxruntime (Caffe's
// ROIPooling). Arithmetic is in double. One fast kernel sits beside them, ahead in Resize's
// list: float32 linear/cubic of the last two axes on the same taps (resize_fast_run).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/dispatch.h"
#include "backends/cpu/kernel.h"
#include "backends/cpu/onednn_common.h"
#include "core/node_attrs.h"
#include "backends/cpu/thread_pool.h"

namespace tensord::cpu {
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

// double -> T: floats as is; integers rounded to nearest and saturated.
template <typename T>
T from_double(double v) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else {
    if (std::isnan(v)) return T{0};
    const double r = std::nearbyint(v);
    if (r <= static_cast<double>(std::numeric_limits<T>::lowest()))
      return std::numeric_limits<T>::lowest();
    if (r >= static_cast<double>(std::numeric_limits<T>::max()))
      return std::numeric_limits<T>::max();
    return static_cast<T>(r);
  }
}

Status store_doubles(const MutableTensorView& dst, const std::vector<double>& values) {
  return dispatch_numeric(dst.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < values.size(); ++i) dst.as<T>()[i] = from_double<T>(values[i]);
    return OkStatus();
  });
}

// Values of a float tensor (any float dtype the executor hands a kernel) as doubles.
std::vector<double> float_values(const TensorView& v) { return to_doubles(v); }

// The first value of a scalar (or 1-element) input.
double scalar_double(const TensorView& v) { return to_doubles(v).at(0); }

// ---- Resize ----

enum class ResizeMode { kNearest, kLinear, kCubic };

// How one output coordinate along one axis reads the input: n taps (indices, possibly outside
// [0, in) and then clamped to the edge, with weights), or the extrapolation value.
struct AxisTaps {
  int n = 0;                   // taps per output coordinate
  std::vector<int64_t> index;  // out * n
  std::vector<double> weight;  // out * n
  std::vector<char> outside;   // out: tf_crop_and_resize point outside the input
};

struct ResizeParams {
  ResizeMode mode = ResizeMode::kNearest;
  std::string ctm;
  std::string nearest_mode;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  bool antialias = false;  // opset 18: linear/cubic widen their filter by 1/scale downsampling
  double extrapolation_value = 0;
};

// Source coordinate of output coordinate x (op_resize.py's _interpolate_1d_with_x), or NaN
// for a tf_crop_and_resize point outside the input.
double source_coordinate(const ResizeParams& p, double x, int64_t in, int64_t out_int,
                         double scale, double roi_start, double roi_end) {
  const double input_width = static_cast<double>(in);
  const double output_width = scale * input_width;
  const std::string& m = p.ctm;
  if (m == "half_pixel_symmetric") {  // opset 19: the roi's centre maps to the output's centre
    const double adjustment = static_cast<double>(out_int) / output_width;
    const double offset = input_width / 2 * (1 - adjustment);
    return offset + (x + 0.5) / scale - 0.5;
  }
  if (m == "align_corners") {
    return output_width == 1 ? 0.0 : x * (input_width - 1) / (output_width - 1);
  }
  if (m == "asymmetric") return x / scale;
  if (m == "tf_crop_and_resize") {
    double x_ori = output_width == 1
                       ? (roi_end - roi_start) * (input_width - 1) / 2
                       : x * (roi_end - roi_start) * (input_width - 1) / (output_width - 1);
    x_ori += roi_start * (input_width - 1);
    if (x_ori < 0 || x_ori > input_width - 1) return std::numeric_limits<double>::quiet_NaN();
    return x_ori;
  }
  if (m == "pytorch_half_pixel") return output_width == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
  if (m == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  return (x + 0.5) / scale - 0.5;  // half_pixel
}

Result<AxisTaps> axis_taps(const KernelContext& ctx, const ResizeParams& p, int64_t in,
                           int64_t out, double scale, double roi_start, double roi_end) {
  AxisTaps t;
  t.n = p.mode == ResizeMode::kCubic ? 4 : 2;
  // Antialiased linear/cubic (op_resize.py's _linear/_cubic_coeffs_antialias): the filter's
  // support grows by 1/scale when downsampling, so the taps are 2 - 2 * first_offset.
  const bool aa = p.antialias && p.mode != ResizeMode::kNearest;
  const double aa_scale = std::min(scale, 1.0);
  int64_t first = 0;  // offset of the first tap from the pixel left of x_ori, plus 1
  if (aa) {
    const double support = p.mode == ResizeMode::kCubic ? 2.0 : 1.0;
    const double f = std::floor(-support / aa_scale) + 1;
    if (!(f > -1e6))
      return ctx.error("antialias at scale {} needs more than 2e6 taps per output", scale);
    first = static_cast<int64_t>(f);
    const int64_t taps = 2 - 2 * first;
    if (taps * std::max<int64_t>(out, 1) > (int64_t{1} << 27))
      return ctx.error("antialias at scale {} needs {} taps for each of {} outputs: too many",
                       scale, taps, out);
    t.n = static_cast<int>(taps);
  }
  const int n = t.n;
  const int64_t pad = (n + 1) / 2;
  t.index.resize(static_cast<size_t>(out * n));
  t.weight.resize(static_cast<size_t>(out * n));
  t.outside.assign(static_cast<size_t>(out), 0);
  std::vector<double> w(static_cast<size_t>(std::max(n, 4)));
  for (int64_t o = 0; o < out; ++o) {
    const double x_ori =
        source_coordinate(p, static_cast<double>(o), in, out, scale, roi_start, roi_end);
    if (std::isnan(x_ori)) {
      t.outside[static_cast<size_t>(o)] = 1;
      continue;
    }
    // The pixel left of x_ori, with ratio in (0, 1]: an integer x_ori has ratio 1.
    const double fl = std::floor(x_ori);
    const bool integral = fl == x_ori;
    const int64_t left = static_cast<int64_t>(integral ? fl - 1 : fl);
    const double ratio = integral ? 1.0 : x_ori - fl;
    if (aa) {
      const double a = p.cubic_a;
      double sum = 0;
      for (int k = 0; k < n; ++k) {
        const double arg = std::abs(aa_scale * (static_cast<double>(first + k) - ratio));
        double c;
        if (p.mode == ResizeMode::kLinear) {
          c = std::clamp(1 - arg, 0.0, 1.0);
        } else if (arg <= 1) {
          c = ((a + 2) * arg - (a + 3)) * arg * arg + 1;
        } else if (arg < 2) {
          c = ((a * arg - 5 * a) * arg + 8 * a) * arg - 4 * a;
        } else {
          c = 0;
        }
        w[static_cast<size_t>(k)] = c;
        sum += c;
      }
      if (sum != 0)
        for (int k = 0; k < n; ++k) w[static_cast<size_t>(k)] /= sum;
    } else if (p.mode == ResizeMode::kNearest) {
      bool take_right;
      if (integral) {
        take_right = true;
      } else if (p.nearest_mode == "round_prefer_ceil") {
        take_right = ratio >= 0.5;
      } else if (p.nearest_mode == "floor") {
        take_right = false;
      } else if (p.nearest_mode == "ceil") {
        take_right = true;
      } else {  // round_prefer_floor
        take_right = ratio > 0.5;
      }
      w[0] = take_right ? 0 : 1;
      w[1] = take_right ? 1 : 0;
    } else if (p.mode == ResizeMode::kLinear) {
      w[0] = 1 - ratio;
      w[1] = ratio;
    } else {
      const double a = p.cubic_a, r = ratio, s = 1 - ratio;
      w[0] = ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a;
      w[1] = ((a + 2) * r - (a + 3)) * r * r + 1;
      w[2] = ((a + 2) * s - (a + 3)) * s * s + 1;
      w[3] = ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a;
    }
    // The n nearest pixels of the edge-padded axis (indices -pad .. in+pad-1), preferring the
    // left ones: a window starting n/2-1 left of `left`, shifted back inside the padded axis.
    int64_t start = left - (n / 2 - 1);
    start = std::min(std::max(start, -pad), in + pad - n);
    if (p.exclude_outside && (p.mode == ResizeMode::kCubic || aa)) {
      double sum = 0;
      for (int k = 0; k < n; ++k) {
        const int64_t idx = start + k;
        if (idx < 0 || idx >= in) w[k] = 0;
        sum += w[k];
      }
      if (sum != 0)
        for (int k = 0; k < n; ++k) w[k] /= sum;
    }
    for (int k = 0; k < n; ++k) {
      const size_t at = static_cast<size_t>(o * n + k);
      t.index[at] = std::min(std::max<int64_t>(start + k, 0), in - 1);  // edge padding
      t.weight[at] = w[static_cast<size_t>(k)];
    }
  }
  return t;
}

// What a Resize does: its parameters, and the taps of every axis.
struct ResizePlan {
  ResizeParams p;
  std::vector<double> scales, roi;
  std::vector<AxisTaps> taps;
};

Result<ResizePlan> plan_resize(KernelContext& ctx, const Shape& in_shape, const Shape& out_shape) {
  ResizePlan plan;
  ResizeParams& p = plan.p;
  TD_ASSIGN_OR_RETURN(std::string mode, ctx.attr_string("mode", "nearest"));
  p.mode = mode == "linear"  ? ResizeMode::kLinear
           : mode == "cubic" ? ResizeMode::kCubic
                             : ResizeMode::kNearest;
  TD_ASSIGN_OR_RETURN(p.ctm, ctx.attr_string("coordinate_transformation_mode", "half_pixel"));
  TD_ASSIGN_OR_RETURN(p.nearest_mode, ctx.attr_string("nearest_mode", "round_prefer_floor"));
  TD_ASSIGN_OR_RETURN(float a, ctx.attr_float("cubic_coeff_a", -0.75f));
  p.cubic_a = a;
  TD_ASSIGN_OR_RETURN(int64_t exclude, ctx.attr_int("exclude_outside", 0));
  p.exclude_outside = exclude != 0;
  TD_ASSIGN_OR_RETURN(float extrapolation, ctx.attr_float("extrapolation_value", 0.f));
  p.extrapolation_value = extrapolation;
  TD_ASSIGN_OR_RETURN(int64_t antialias, ctx.attr_int("antialias", 0));
  p.antialias = antialias != 0;
  TD_ASSIGN_OR_RETURN(std::string policy, ctx.attr_string("keep_aspect_ratio_policy", "stretch"));

  const size_t rank = in_shape.size();
  // The resized axes (opset 18 `axes`; inference checked them): roi, scales and sizes list
  // these axes only, the others keep scale 1 and roi [0, 1].
  std::vector<size_t> axes;
  if (ctx.has_attr("axes")) {
    TD_ASSIGN_OR_RETURN(std::vector<int64_t> given, ctx.attr_ints("axes"));
    for (int64_t a : given) axes.push_back(static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(rank) : a));
  } else {
    for (size_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  for (size_t a : axes)
    if (a >= rank) return ctx.error("axes name an axis outside rank {}", rank);

  // Per-axis scales: given, or output/input sizes (one scale for the resized axes with a
  // keep_aspect_ratio_policy).
  std::vector<double> scales(rank, 1.0);
  const bool has_scales = ctx.has_input(2) && ctx.input(2).numel() > 0;
  if (has_scales) {
    const std::vector<double> given = float_values(ctx.input(2));
    if (given.size() != axes.size())
      return ctx.error("scales has {} values for {} resized axes", given.size(), axes.size());
    for (size_t j = 0; j < axes.size(); ++j) scales[axes[j]] = given[j];
  } else if (policy != "stretch" && ctx.has_input(3)) {
    const std::vector<double> sizes = float_values(ctx.input(3));
    if (sizes.size() != axes.size())
      return ctx.error("sizes has {} values for {} resized axes", sizes.size(), axes.size());
    double scale = policy == "not_larger" ? 1e300 : 0;
    for (size_t j = 0; j < axes.size(); ++j) {
      const double r = sizes[j] / static_cast<double>(in_shape[axes[j]]);
      scale = policy == "not_larger" ? std::min(scale, r) : std::max(scale, r);
    }
    for (size_t a : axes) scales[a] = scale;
  } else {
    for (size_t d = 0; d < rank; ++d)
      scales[d] = static_cast<double>(out_shape[d]) / static_cast<double>(in_shape[d]);
  }
  std::vector<double> roi(2 * rank, 0.0);
  std::fill(roi.begin() + static_cast<int64_t>(rank), roi.end(), 1.0);
  if (ctx.has_input(1) && ctx.input(1).numel() > 0) {
    const std::vector<double> given = float_values(ctx.input(1));
    if (given.size() == 2 * axes.size())
      for (size_t j = 0; j < axes.size(); ++j) {
        roi[axes[j]] = given[j];
        roi[axes[j] + rank] = given[j + axes.size()];
      }
  }
  std::vector<AxisTaps> taps(rank);
  for (size_t d = 0; d < rank; ++d) {
    TD_ASSIGN_OR_RETURN(taps[d], axis_taps(ctx, p, in_shape[d], out_shape[d], scales[d], roi[d],
                                           roi[d + rank]));
  }
  plan.scales = std::move(scales);
  plan.roi = std::move(roi);
  plan.taps = std::move(taps);
  return plan;
}

Status resize_kernel(KernelContext& ctx) {
  const TensorView& xv = ctx.input(0);
  const Shape& in_shape = xv.shape;
  const size_t rank = in_shape.size();
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const Shape& out_shape = out.shape;
  if (out.numel() == 0) return OkStatus();
  TD_ASSIGN_OR_RETURN(ResizePlan plan, plan_resize(ctx, in_shape, out_shape));
  const ResizeParams& p = plan.p;
  const std::vector<AxisTaps>& taps = plan.taps;

  if (p.mode == ResizeMode::kNearest) {
    // A gather: each axis picks the tap with weight 1 (exact for every dtype).
    std::vector<std::vector<int64_t>> pick(rank);
    for (size_t d = 0; d < rank; ++d) {
      pick[d].resize(static_cast<size_t>(out_shape[d]));
      for (int64_t o = 0; o < out_shape[d]; ++o) {
        const size_t at = static_cast<size_t>(o * 2);
        pick[d][static_cast<size_t>(o)] = taps[d].outside[static_cast<size_t>(o)] ? -1
                                          : taps[d].weight[at] != 0 ? taps[d].index[at]
                                                                    : taps[d].index[at + 1];
      }
    }
    return dispatch_all(xv.dtype, [&](auto tag) -> Status {
      using T = typename decltype(tag)::type;
      const T* src = xv.as<T>();
      T* dst = out.as<T>();
      const T extra = static_cast<T>(p.extrapolation_value);
      std::vector<int64_t> coord(rank, 0);
      const int64_t total = out.numel();
      for (int64_t f = 0; f < total; ++f) {
        int64_t src_index = 0;
        bool outside = false;
        for (size_t d = 0; d < rank; ++d) {
          const int64_t s = pick[d][static_cast<size_t>(coord[d])];
          if (s < 0) outside = true;
          src_index = src_index * in_shape[d] + s;
        }
        dst[f] = outside ? extra : src[src_index];
        for (size_t d = rank; d-- > 0;) {  // next output coordinate
          if (++coord[d] < out_shape[d]) break;
          coord[d] = 0;
        }
      }
      return OkStatus();
    });
  }

  // Linear / cubic: 1-D interpolation along the last axis, then the one before, ...
  std::vector<double> cur = to_doubles(xv);
  Shape cur_shape = in_shape;
  for (size_t d = rank; d-- > 0;) {
    const int64_t outer = shape_numel(Shape(cur_shape.begin(), cur_shape.begin() + d));
    const int64_t inner = shape_numel(Shape(cur_shape.begin() + d + 1, cur_shape.end()));
    const int64_t in_d = cur_shape[d], out_d = out_shape[d];
    const AxisTaps& t = taps[d];
    std::vector<double> next(static_cast<size_t>(outer * out_d * inner));
    for (int64_t a = 0; a < outer; ++a) {
      for (int64_t o = 0; o < out_d; ++o) {
        double* dst = next.data() + (a * out_d + o) * inner;
        if (t.outside[static_cast<size_t>(o)]) {
          std::fill(dst, dst + inner, p.extrapolation_value);
          continue;
        }
        for (int64_t i = 0; i < inner; ++i) {
          double acc = 0;
          for (int k = 0; k < t.n; ++k) {
            const size_t at = static_cast<size_t>(o * t.n + k);
            acc += t.weight[at] * cur[static_cast<size_t>((a * in_d + t.index[at]) * inner + i)];
          }
          dst[i] = acc;
        }
      }
    }
    cur = std::move(next);
    cur_shape[d] = out_d;
  }
  return store_doubles(out, cur);
}

// The fast float32 Resize (linear or cubic, any antialias) of the last two axes, the leading
// ones untouched (scale 1, the same size, not tf_crop_and_resize): the segmentation heads'
// upsampling. The reference's taps; per plane a pass along W into a [H_in, W_out] buffer, then
// each output row as the weighted sum of its taps' rows (vectorised along W), in float.
// Planes run across the compute threads. Anything else runs the reference.
Status resize_fast_accepts(const Node& node, const std::vector<TensorType>& in) {
  if (in.empty() || in[0].dtype != DType::kFloat32 || in[0].shape.size() < 2)
    return Status(StatusCode::kUnimplemented, "Resize: the fast kernel is float32 of rank >= 2");
  NodeAttrs a(node);
  auto mode = a.attr_string("mode", "nearest");
  auto ctm = a.attr_string("coordinate_transformation_mode", "half_pixel");
  if (!mode.ok() || *mode == "nearest" || !ctm.ok() || *ctm == "tf_crop_and_resize")
    return Status(StatusCode::kUnimplemented, "Resize: the fast kernel is linear/cubic only");
  return OkStatus();
}

Status resize_fast_run(KernelContext& ctx) {
  const TensorView& xv = ctx.input(0);
  const Shape& in_shape = xv.shape;
  const size_t rank = in_shape.size();
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const Shape& out_shape = out.shape;
  if (out.numel() == 0 || xv.dtype != DType::kFloat32) return resize_kernel(ctx);
  TD_ASSIGN_OR_RETURN(ResizePlan plan, plan_resize(ctx, in_shape, out_shape));
  if (plan.p.mode == ResizeMode::kNearest || plan.p.ctm == "tf_crop_and_resize")
    return resize_kernel(ctx);
  for (size_t d = 0; d + 2 < rank; ++d)
    if (plan.scales[d] != 1.0 || in_shape[d] != out_shape[d] || plan.roi[d] != 0.0 ||
        plan.roi[d + rank] != 1.0)
      return resize_kernel(ctx);
  const AxisTaps& th = plan.taps[rank - 2];
  const AxisTaps& tw = plan.taps[rank - 1];
  const int64_t hi = in_shape[rank - 2], wi = in_shape[rank - 1];
  const int64_t ho = out_shape[rank - 2], wo = out_shape[rank - 1];
  const int64_t planes = out.numel() / (ho * wo);
  std::vector<float> wh(th.weight.begin(), th.weight.end()), ww(tw.weight.begin(), tw.weight.end());
  const float* x = xv.as<float>();
  float* y = out.as<float>();
  auto plane = [&](int64_t pl, std::vector<float>& tmp) {
    const float* src = x + pl * hi * wi;
    float* dst = y + pl * ho * wo;
    tmp.resize(static_cast<size_t>(hi * wo));
    for (int64_t r = 0; r < hi; ++r) {
      const float* row = src + r * wi;
      float* t = tmp.data() + r * wo;
      for (int64_t o = 0; o < wo; ++o) {
        float acc = 0;
        for (int k = 0; k < tw.n; ++k) {
          const size_t at = static_cast<size_t>(o * tw.n + k);
          acc += ww[at] * row[tw.index[at]];
        }
        t[o] = acc;
      }
    }
    for (int64_t o = 0; o < ho; ++o) {
      float* d = dst + o * wo;
      const size_t at0 = static_cast<size_t>(o * th.n);
      const float* r0 = tmp.data() + th.index[at0] * wo;
      const float w0 = wh[at0];
      for (int64_t i = 0; i < wo; ++i) d[i] = w0 * r0[i];
      for (int k = 1; k < th.n; ++k) {
        const float* rk = tmp.data() + th.index[at0 + static_cast<size_t>(k)] * wo;
        const float wk = wh[at0 + static_cast<size_t>(k)];
        for (int64_t i = 0; i < wo; ++i) d[i] += wk * rk[i];
      }
    }
  };
  if (planes > 1 && threads_available() > 1 && out.numel() >= (1 << 15)) {
    ThreadPool::get().parallel_for(planes, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> tmp;
      for (int64_t pl = begin; pl < end; ++pl) plane(pl, tmp);
    });
  } else {
    std::vector<float> tmp;
    for (int64_t pl = 0; pl < planes; ++pl) plane(pl, tmp);
  }
  return OkStatus();
}

// ---- GridSample ----

enum class GridMode { kLinear, kNearest, kCubic };
enum class GridPadding { kZeros, kBorder, kReflection };

// Reflects x into [lo, hi] by the nearer border, repeatedly (op_grid_sample.py _gs_reflect).
double reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (range <= 0) return lo;  // a single pixel (PyTorch returns 0 here)
  if (x >= lo && x <= hi) return x;
  const double dx = x < lo ? lo - x : x - hi;
  // In floating point (not int64) so that absurd coordinates cannot overflow.
  const bool even = std::fmod(std::floor(dx / range), 2.0) == 0;
  const double r = std::fmod(dx, range);
  if (x < lo) return even ? lo + r : hi - r;
  return even ? hi - r : lo + r;
}

void cubic_coeffs(double x, double c[4]) {
  const double a = -0.75;
  x = std::abs(x);
  c[0] = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a;
  c[1] = ((a + 2) * x - (a + 3)) * x * x + 1;
  c[2] = ((a + 2) * (1 - x) - (a + 3)) * (1 - x) * (1 - x) + 1;
  c[3] = ((a * (2 - x) - 5 * a) * (2 - x) + 8 * a) * (2 - x) - 4 * a;
}

Status grid_sample_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(int64_t align_corners, ctx.attr_int("align_corners", 0));
  TD_ASSIGN_OR_RETURN(std::string mode_s, ctx.attr_string("mode", "bilinear"));
  TD_ASSIGN_OR_RETURN(std::string pad_s, ctx.attr_string("padding_mode", "zeros"));
  const GridMode mode = mode_s == "nearest"                          ? GridMode::kNearest
                        : (mode_s == "bicubic" || mode_s == "cubic") ? GridMode::kCubic
                                                                     : GridMode::kLinear;
  const GridPadding padding = pad_s == "border"       ? GridPadding::kBorder
                              : pad_s == "reflection" ? GridPadding::kReflection
                                                      : GridPadding::kZeros;
  const TensorView& xv = ctx.input(0);
  const TensorView& gv = ctx.input(1);
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const size_t ns = xv.shape.size() - 2;  // spatial axes
  const int64_t batch = xv.shape[0], channels = xv.shape[1];
  const Shape dims(xv.shape.begin() + 2, xv.shape.end());
  const int64_t in_spatial = shape_numel(dims);
  const int64_t out_spatial = shape_numel(Shape(gv.shape.begin() + 1, gv.shape.end() - 1));
  const std::vector<double> x = to_doubles(xv);
  const std::vector<double> grid = float_values(gv);
  std::vector<double> y(static_cast<size_t>(out.numel()), 0.0);
  if (y.empty() || in_spatial == 0) return store_doubles(out, y);  // nothing to sample

  std::vector<double> lo(ns), hi(ns);
  for (size_t i = 0; i < ns; ++i) {
    lo[i] = align_corners ? 0.0 : -0.5;
    hi[i] = align_corners ? static_cast<double>(dims[i] - 1) : static_cast<double>(dims[i]) - 0.5;
  }
  const int taps = mode == GridMode::kNearest ? 1 : mode == GridMode::kLinear ? 2 : 4;
  // Per spatial axis of one sample point: tap indices (-1 = zero padding) and weights.
  std::vector<int64_t> idx(ns * 4);
  std::vector<double> w(ns * 4);
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t p = 0; p < out_spatial; ++p) {
      const double* g = grid.data() + (n * out_spatial + p) * static_cast<int64_t>(ns);
      for (size_t i = 0; i < ns; ++i) {
        // The grid lists coordinates innermost axis first (x, y, ...).
        const double nc = g[ns - 1 - i];
        const double len = static_cast<double>(dims[i]);
        double c = align_corners ? (nc + 1) / 2.0 * (len - 1) : ((nc + 1) * len - 1) / 2.0;
        if (!std::isfinite(c)) {  // NaN or infinite grid values sample nothing
          for (int k = 0; k < 4; ++k) {
            idx[i * 4 + static_cast<size_t>(k)] = -1;
            w[i * 4 + static_cast<size_t>(k)] = 0;
          }
          continue;
        }
        // Far outside, every tap is in the zero padding; bound c so indices stay small.
        if (padding == GridPadding::kZeros) c = std::min(std::max(c, -8.0), len + 8);
        if (mode == GridMode::kNearest)
          c = ns == 3 ? std::round(c) : std::nearbyint(c);  // PyTorch: 3-D round, else rint
        if (c < lo[i] || c > hi[i]) {
          if (padding == GridPadding::kBorder)
            c = std::min(std::max(c, 0.0), len - 1);
          else if (padding == GridPadding::kReflection)
            c = reflect(c, lo[i], hi[i]);
        }
        // Reads at integer position k along axis i, after padding.
        auto place = [&](int64_t k) -> int64_t {
          if (padding == GridPadding::kZeros) return k >= 0 && k < dims[i] ? k : -1;
          if (padding == GridPadding::kBorder)
            return std::min(std::max<int64_t>(k, 0), dims[i] - 1);
          if (k >= 0 && k < dims[i]) return k;
          return static_cast<int64_t>(reflect(static_cast<double>(k), lo[i], hi[i]));
        };
        if (mode == GridMode::kNearest) {
          idx[i * 4] = place(static_cast<int64_t>(c));
          w[i * 4] = 1;
        } else {
          const double fl = std::floor(c);
          const int64_t k0 = static_cast<int64_t>(fl);
          const double t = c - fl;
          if (mode == GridMode::kLinear) {
            idx[i * 4] = place(k0);
            idx[i * 4 + 1] = place(k0 + 1);
            w[i * 4] = 1 - t;
            w[i * 4 + 1] = t;
          } else {
            double cc[4];
            cubic_coeffs(t, cc);
            for (int k = 0; k < 4; ++k) {
              idx[i * 4 + k] = place(k0 - 1 + k);
              w[i * 4 + k] = cc[k];
            }
          }
        }
      }
      // Sum over the taps^ns combinations.
      int64_t combos = 1;
      for (size_t i = 0; i < ns; ++i) combos *= taps;
      for (int64_t c = 0; c < channels; ++c) {
        const double* plane = x.data() + (n * channels + c) * in_spatial;
        double acc = 0;
        for (int64_t combo = 0; combo < combos; ++combo) {
          int64_t rem = combo, flat = 0;
          double weight = 1;
          bool zero = false;
          for (size_t i = 0; i < ns; ++i) {
            // The last axis varies fastest.
            int64_t div = 1;
            for (size_t j = i + 1; j < ns; ++j) div *= taps;
            const int k = static_cast<int>(rem / div);
            rem %= div;
            const int64_t at = idx[i * 4 + static_cast<size_t>(k)];
            weight *= w[i * 4 + static_cast<size_t>(k)];
            if (at < 0) zero = true;
            flat = flat * dims[i] + (at < 0 ? 0 : at);
          }
          if (!zero) acc += weight * plane[flat];
        }
        y[static_cast<size_t>((n * channels + c) * out_spatial + p)] = acc;
      }
    }
  }
  return store_doubles(out, y);
}

// ---- RoiAlign ----

Status roi_align_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(std::string ctm,
                      ctx.attr_string("coordinate_transformation_mode", "half_pixel"));
  TD_ASSIGN_OR_RETURN(std::string mode, ctx.attr_string("mode", "avg"));
  TD_ASSIGN_OR_RETURN(int64_t pooled_h, ctx.attr_int("output_height", 1));
  TD_ASSIGN_OR_RETURN(int64_t pooled_w, ctx.attr_int("output_width", 1));
  TD_ASSIGN_OR_RETURN(int64_t sampling_ratio, ctx.attr_int("sampling_ratio", 0));
  TD_ASSIGN_OR_RETURN(float spatial_scale_f, ctx.attr_float("spatial_scale", 1.f));
  const double spatial_scale = spatial_scale_f;
  const bool half_pixel = ctm == "half_pixel";
  const bool max_mode = mode == "max";

  const TensorView& xv = ctx.input(0);
  const int64_t batch = xv.shape[0], channels = xv.shape[1], height = xv.shape[2],
                width = xv.shape[3];
  const std::vector<double> x = to_doubles(xv);
  const std::vector<double> rois = float_values(ctx.input(1));
  const TensorView& biv = ctx.input(2);
  const int64_t num_rois = biv.shape[0];
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  std::vector<double> y(static_cast<size_t>(out.numel()), 0.0);

  struct Sample {
    int64_t pos[4];
    double w[4];
  };
  for (int64_t r = 0; r < num_rois; ++r) {
    const int64_t b = biv.as<int64_t>()[r];
    if (b < 0 || b >= batch)
      return ctx.error("batch_indices[{}] = {} is outside [0, {}) (the batch size)", r, b, batch);
    const double offset = half_pixel ? 0.5 : 0.0;
    const double* roi = rois.data() + r * 4;
    for (int k = 0; k < 4; ++k)
      if (!std::isfinite(roi[k]))
        return ctx.error("rois[{}] has a non-finite coordinate: [{}, {}, {}, {}]", r, roi[0],
                         roi[1], roi[2], roi[3]);
    const double start_w = roi[0] * spatial_scale - offset;
    const double start_h = roi[1] * spatial_scale - offset;
    const double end_w = roi[2] * spatial_scale - offset;
    const double end_h = roi[3] * spatial_scale - offset;
    double roi_w = end_w - start_w, roi_h = end_h - start_h;
    if (!half_pixel) {  // legacy: malformed ROIs are forced to 1x1
      roi_w = std::max(roi_w, 1.0);
      roi_h = std::max(roi_h, 1.0);
    }
    const double bin_h = roi_h / static_cast<double>(pooled_h);
    const double bin_w = roi_w / static_cast<double>(pooled_w);
    // Samples per bin: sampling_ratio, or adaptive (ceil of the bin size).
    const double adaptive_h = std::ceil(roi_h / static_cast<double>(pooled_h));
    const double adaptive_w = std::ceil(roi_w / static_cast<double>(pooled_w));
    const double samples_per_bin =
        (sampling_ratio > 0 ? static_cast<double>(sampling_ratio) : std::max(adaptive_h, 0.0)) *
        (sampling_ratio > 0 ? static_cast<double>(sampling_ratio) : std::max(adaptive_w, 0.0));
    if (samples_per_bin > static_cast<double>(int64_t{1} << 24))
      return ctx.error(
          "rois[{}] = [{}, {}, {}, {}] would take {} samples per output bin (limit 2^24)", r,
          roi[0], roi[1], roi[2], roi[3], samples_per_bin);
    const int64_t grid_h =
        sampling_ratio > 0 ? sampling_ratio : static_cast<int64_t>(std::max(adaptive_h, -1.0));
    const int64_t grid_w =
        sampling_ratio > 0 ? sampling_ratio : static_cast<int64_t>(std::max(adaptive_w, -1.0));
    const double count = static_cast<double>(std::max<int64_t>(grid_h * grid_w, 1));
    for (int64_t ph = 0; ph < pooled_h; ++ph) {
      for (int64_t pw = 0; pw < pooled_w; ++pw) {
        // The bilinear samples of this bin (shared by every channel).
        std::vector<Sample> samples;
        for (int64_t iy = 0; iy < grid_h; ++iy) {
          const double yy = start_h + static_cast<double>(ph) * bin_h +
                            (static_cast<double>(iy) + 0.5) * bin_h / static_cast<double>(grid_h);
          for (int64_t ix = 0; ix < grid_w; ++ix) {
            double xx = start_w + static_cast<double>(pw) * bin_w +
                        (static_cast<double>(ix) + 0.5) * bin_w / static_cast<double>(grid_w);
            double yv = yy;
            Sample s{{0, 0, 0, 0}, {0, 0, 0, 0}};
            if (!(yv >= -1.0 && yv <= static_cast<double>(height) && xx >= -1.0 &&
                  xx <= static_cast<double>(width)) ||
                height == 0 || width == 0) {
              samples.push_back(s);  // outside the feature map: contributes 0
              continue;
            }
            yv = std::max(yv, 0.0);
            xx = std::max(xx, 0.0);
            int64_t y_low = static_cast<int64_t>(yv), x_low = static_cast<int64_t>(xx);
            int64_t y_high, x_high;
            if (y_low >= height - 1) {
              y_high = y_low = height - 1;
              yv = static_cast<double>(y_low);
            } else {
              y_high = y_low + 1;
            }
            if (x_low >= width - 1) {
              x_high = x_low = width - 1;
              xx = static_cast<double>(x_low);
            } else {
              x_high = x_low + 1;
            }
            const double ly = yv - static_cast<double>(y_low), lx = xx - static_cast<double>(x_low);
            const double hy = 1 - ly, hx = 1 - lx;
            s = {{y_low * width + x_low, y_low * width + x_high, y_high * width + x_low,
                  y_high * width + x_high},
                 {hy * hx, hy * lx, ly * hx, ly * lx}};
            samples.push_back(s);
          }
        }
        for (int64_t c = 0; c < channels; ++c) {
          const double* plane = x.data() + (b * channels + c) * height * width;
          double v = 0;
          bool first = true;
          for (const Sample& s : samples) {
            if (max_mode) {
              // onnxruntime's (and ONNX's reference) max mode: the largest weighted corner.
              double m = s.w[0] * plane[s.pos[0]];
              for (int k = 1; k < 4; ++k) m = std::max(m, s.w[k] * plane[s.pos[k]]);
              v = first ? m : std::max(v, m);
              first = false;
            } else {
              v += s.w[0] * plane[s.pos[0]] + s.w[1] * plane[s.pos[1]] + s.w[2] * plane[s.pos[2]] +
                   s.w[3] * plane[s.pos[3]];
            }
          }
          if (!max_mode) v /= count;
          y[static_cast<size_t>(((r * channels + c) * pooled_h + ph) * pooled_w + pw)] = v;
        }
      }
    }
  }
  return store_doubles(out, y);
}

// ---- MaxRoiPool ----

Status max_roi_pool_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(std::vector<int64_t> pooled, ctx.attr_ints("pooled_shape", {}));
  TD_ASSIGN_OR_RETURN(float spatial_scale_f, ctx.attr_float("spatial_scale", 1.f));
  const double spatial_scale = spatial_scale_f;
  const TensorView& xv = ctx.input(0);
  const int64_t batch = xv.shape[0], channels = xv.shape[1], height = xv.shape[2],
                width = xv.shape[3];
  const int64_t ph_n = pooled[0], pw_n = pooled[1];
  const std::vector<double> x = to_doubles(xv);
  const std::vector<double> rois = float_values(ctx.input(1));
  const int64_t num_rois = ctx.input(1).shape[0];
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  std::vector<double> y(static_cast<size_t>(out.numel()), 0.0);
  for (int64_t r = 0; r < num_rois; ++r) {
    const double* roi = rois.data() + r * 5;
    if (!(roi[0] >= 0 && roi[0] < static_cast<double>(batch)))
      return ctx.error("rois[{}] has batch index {}, outside [0, {}) (the batch size)", r, roi[0],
                       batch);
    const int64_t b = static_cast<int64_t>(roi[0]);
    for (int k = 1; k < 5; ++k)
      if (!(std::abs(roi[k] * spatial_scale) < 1e15))
        return ctx.error("rois[{}] has a non-finite or absurd coordinate: [{}, {}, {}, {}, {}]", r,
                         roi[0], roi[1], roi[2], roi[3], roi[4]);
    const int64_t start_w = static_cast<int64_t>(std::round(roi[1] * spatial_scale));
    const int64_t start_h = static_cast<int64_t>(std::round(roi[2] * spatial_scale));
    const int64_t end_w = static_cast<int64_t>(std::round(roi[3] * spatial_scale));
    const int64_t end_h = static_cast<int64_t>(std::round(roi[4] * spatial_scale));
    const int64_t roi_h = std::max<int64_t>(end_h - start_h + 1, 1);
    const int64_t roi_w = std::max<int64_t>(end_w - start_w + 1, 1);
    const double bin_h = static_cast<double>(roi_h) / static_cast<double>(ph_n);
    const double bin_w = static_cast<double>(roi_w) / static_cast<double>(pw_n);
    for (int64_t c = 0; c < channels; ++c) {
      const double* plane = x.data() + (b * channels + c) * height * width;
      for (int64_t ph = 0; ph < ph_n; ++ph) {
        for (int64_t pw = 0; pw < pw_n; ++pw) {
          // Bin edges (in double: huge rois must not overflow), clamped to the map.
          auto edge = [](double v, double offset, int64_t hi) {
            return static_cast<int64_t>(
                std::min(std::max(v + offset, 0.0), static_cast<double>(hi)));
          };
          const double dph = static_cast<double>(ph), dpw = static_cast<double>(pw);
          const int64_t hs = edge(std::floor(dph * bin_h), static_cast<double>(start_h), height);
          const int64_t he =
              edge(std::ceil((dph + 1) * bin_h), static_cast<double>(start_h), height);
          const int64_t ws = edge(std::floor(dpw * bin_w), static_cast<double>(start_w), width);
          const int64_t we =
              edge(std::ceil((dpw + 1) * bin_w), static_cast<double>(start_w), width);
          double m = 0;  // an empty bin gives 0
          if (he > hs && we > ws) {
            m = -std::numeric_limits<double>::infinity();
            for (int64_t h = hs; h < he; ++h)
              for (int64_t w = ws; w < we; ++w) m = std::max(m, plane[h * width + w]);
          }
          y[static_cast<size_t>(((r * channels + c) * ph_n + ph) * pw_n + pw)] = m;
        }
      }
    }
  }
  return store_doubles(out, y);
}

// ---- MaxUnpool ----

// As ONNX's reference does: X is scattered at the flat indices I into a tensor of the shape
// MaxPool's geometry gives ((in - 1) * stride + kernel - pads per spatial axis), which then
// becomes the top-left corner of a zero tensor of output_shape when that is given.
Status max_unpool_kernel(KernelContext& ctx) {
  const TensorView& xv = ctx.input(0);
  const TensorView& iv = ctx.input(1);
  const size_t rank = xv.shape.size(), n = rank - 2;
  TD_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, ctx.attr_ints("kernel_shape", {}));
  TD_ASSIGN_OR_RETURN(std::vector<int64_t> strides,
                      ctx.attr_ints("strides", std::vector<int64_t>(n, 1)));
  TD_ASSIGN_OR_RETURN(std::vector<int64_t> pads,
                      ctx.attr_ints("pads", std::vector<int64_t>(2 * n, 0)));
  Shape inferred = xv.shape;
  for (size_t i = 0; i < n; ++i)
    inferred[i + 2] = (xv.shape[i + 2] - 1) * strides[i] + kernel[i] - pads[i] - pads[i + n];
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  for (size_t d = 0; d < rank; ++d)
    if (out.shape[d] < inferred[d])
      return ctx.error("output_shape {} is smaller than the unpooled shape {}",
                       shape_to_string(out.shape), shape_to_string(inferred));
  const int64_t inferred_total = shape_numel(inferred);
  return dispatch_float(xv.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    std::vector<T> full(static_cast<size_t>(inferred_total), T{0});
    const int64_t* ind = iv.as<int64_t>();
    for (int64_t i = 0; i < xv.numel(); ++i) {
      if (ind[i] < 0 || ind[i] >= inferred_total)
        return ctx.error("index I[{}] = {} is outside the unpooled tensor of {} elements {}", i,
                         ind[i], inferred_total, shape_to_string(inferred));
      full[static_cast<size_t>(ind[i])] = xv.as<T>()[i];
    }
    T* dst = out.as<T>();
    std::fill(dst, dst + out.numel(), T{0});
    std::vector<int64_t> coord(rank, 0);
    for (int64_t f = 0; f < inferred_total; ++f) {
      int64_t at = 0;
      for (size_t d = 0; d < rank; ++d) at = at * out.shape[d] + coord[d];
      dst[at] = full[static_cast<size_t>(f)];
      for (size_t d = rank; d-- > 0;) {
        if (++coord[d] < inferred[d]) break;
        coord[d] = 0;
      }
    }
    return OkStatus();
  });
}

// ---- NonMaxSuppression ----

// Whether box i suppresses box j (op_non_max_suppression.py's suppress_by_iou).
bool suppress_by_iou(const double* b1, const double* b2, bool center_point_box, double threshold) {
  double x1_min, x1_max, x2_min, x2_max, y1_min, y1_max, y2_min, y2_max;
  if (!center_point_box) {  // [y1, x1, y2, x2], corners in any order
    x1_min = std::min(b1[1], b1[3]);
    x1_max = std::max(b1[1], b1[3]);
    x2_min = std::min(b2[1], b2[3]);
    x2_max = std::max(b2[1], b2[3]);
    y1_min = std::min(b1[0], b1[2]);
    y1_max = std::max(b1[0], b1[2]);
    y2_min = std::min(b2[0], b2[2]);
    y2_max = std::max(b2[0], b2[2]);
  } else {  // [x_center, y_center, width, height]
    x1_min = b1[0] - b1[2] / 2;
    x1_max = b1[0] + b1[2] / 2;
    x2_min = b2[0] - b2[2] / 2;
    x2_max = b2[0] + b2[2] / 2;
    y1_min = b1[1] - b1[3] / 2;
    y1_max = b1[1] + b1[3] / 2;
    y2_min = b2[1] - b2[3] / 2;
    y2_max = b2[1] + b2[3] / 2;
  }
  const double ix_min = std::max(x1_min, x2_min), ix_max = std::min(x1_max, x2_max);
  if (ix_max <= ix_min) return false;
  const double iy_min = std::max(y1_min, y2_min), iy_max = std::min(y1_max, y2_max);
  if (iy_max <= iy_min) return false;
  const double inter = (ix_max - ix_min) * (iy_max - iy_min);
  if (inter <= 0) return false;
  const double area1 = (x1_max - x1_min) * (y1_max - y1_min);
  const double area2 = (x2_max - x2_min) * (y2_max - y2_min);
  const double uni = area1 + area2 - inter;
  if (area1 <= 0 || area2 <= 0 || uni <= 0) return false;
  return inter / uni > threshold;
}

Status nms_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(int64_t center_point_box, ctx.attr_int("center_point_box", 0));
  const TensorView& bv = ctx.input(0);
  const TensorView& sv = ctx.input(1);
  const int64_t num_batches = bv.shape[0], num_boxes = bv.shape[1], num_classes = sv.shape[1];
  int64_t max_out = 0;
  if (ctx.has_input(2) && ctx.input(2).numel() > 0) {
    const TensorView& m = ctx.input(2);
    max_out =
        m.dtype == DType::kInt64 ? m.as<int64_t>()[0] : static_cast<int64_t>(to_doubles(m).at(0));
    max_out = std::max<int64_t>(max_out, 0);
  }
  double iou_threshold = 0;
  if (ctx.has_input(3) && ctx.input(3).numel() > 0) {
    iou_threshold = scalar_double(ctx.input(3));
    if (!(iou_threshold >= 0 && iou_threshold <= 1))
      return ctx.error("iou_threshold must be in [0, 1], got {}", iou_threshold);
  }
  const bool has_score_threshold = ctx.has_input(4) && ctx.input(4).numel() > 0;
  const double score_threshold = has_score_threshold ? scalar_double(ctx.input(4)) : 0;
  const std::vector<double> boxes = float_values(bv);
  const std::vector<double> scores = float_values(sv);

  std::vector<int64_t> selected;  // triples
  for (int64_t b = 0; b < num_batches; ++b) {
    const double* bb = boxes.data() + b * num_boxes * 4;
    for (int64_t c = 0; c < num_classes; ++c) {
      const double* sc = scores.data() + (b * num_classes + c) * num_boxes;
      std::vector<int64_t> candidates;
      for (int64_t i = 0; i < num_boxes; ++i)
        if (!std::isnan(sc[i]) && (!has_score_threshold || sc[i] > score_threshold))
          candidates.push_back(i);  // NaN scores cannot be ranked: never selected
      // Highest score first; equal scores by lower index.
      std::stable_sort(candidates.begin(), candidates.end(),
                       [&](int64_t i, int64_t j) { return sc[i] > sc[j]; });
      std::vector<int64_t> kept;
      for (int64_t i : candidates) {
        if (static_cast<int64_t>(kept.size()) >= max_out) break;
        bool keep = true;
        for (int64_t k : kept) {
          if (suppress_by_iou(bb + i * 4, bb + k * 4, center_point_box != 0, iou_threshold)) {
            keep = false;
            break;
          }
        }
        if (!keep) continue;
        kept.push_back(i);
        selected.insert(selected.end(), {b, c, i});
      }
    }
  }
  const int64_t n = static_cast<int64_t>(selected.size() / 3);
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.allocate_output(0, DType::kInt64, {n, 3}));
  if (!selected.empty()) std::memcpy(out.data, selected.data(), selected.size() * sizeof(int64_t));
  return OkStatus();
}

}  // namespace

void register_reference_image_kernels(KernelRegistry& r) {
  r.add(KernelDef{"Resize", "fast", resize_fast_accepts, resize_fast_run});
  auto add = [&r](const char* op, KernelFn fn) {
    r.add(KernelDef{op, "reference", nullptr, std::move(fn)});
  };
  add("Resize", resize_kernel);
  add("GridSample", grid_sample_kernel);
  add("RoiAlign", roi_align_kernel);
  add("MaxRoiPool", max_roi_pool_kernel);
  add("MaxUnpool", max_unpool_kernel);
  add("NonMaxSuppression", nms_kernel);
}

}  // namespace tensord::cpu
