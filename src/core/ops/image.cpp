// Schemas of the image ops (opset 17 forms): Resize (13), GridSample (16, also accepting the
// opset-20 mode names and N-d inputs), RoiAlign (16), MaxRoiPool (1), MaxUnpool (11) and
// NonMaxSuppression (11).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/op_registry.h"
#include "core/ops/all_ops.h"
#include "core/ops/op_helpers.h"

namespace tensord {
namespace {




Status check_float(const InferenceContext& ctx, int i, const char* what) {
  if (dtype_is_float(ctx.input_dtype(i))) return OkStatus();
  return ctx.error("input {} ({}) has dtype {}, expected float16, bfloat16, float32 or float64", i,
                   what, dtype_name(ctx.input_dtype(i)));
}

Status check_same_type(const InferenceContext& ctx, int i, const char* what_i, int j,
                       const char* what_j) {
  if (ctx.input_dtype(i) == ctx.input_dtype(j)) return OkStatus();
  return ctx.error("input {} ({}) has dtype {} but input {} ({}) has dtype {}; they must match", j,
                   what_j, dtype_name(ctx.input_dtype(j)), i, what_i,
                   dtype_name(ctx.input_dtype(i)));
}

Status check_rank(const InferenceContext& ctx, int i, const char* what, size_t rank,
                  const char* doc) {
  const Shape& s = ctx.input_shape(i);
  if (s.size() == rank) return OkStatus();
  return ctx.error("input {} ({}) must have rank {} ({}), got shape {}", i, what, rank, doc,
                   shape_to_string(s));
}

Result<std::string> one_of(const NodeAttrs& a, const std::string& name, const std::string& dflt,
                           const std::vector<std::string>& allowed) {
  TD_ASSIGN_OR_RETURN(std::string v, a.attr_string(name, dflt));
  if (std::find(allowed.begin(), allowed.end(), v) == allowed.end())
    return a.error("{} must be one of {}, got '{}'", name, fmt::join(allowed, ", "), v);
  return v;
}

Status check_flag(const NodeAttrs& a, const std::string& name) {
  TD_ASSIGN_OR_RETURN(int64_t v, a.attr_int(name, 0));
  if (v != 0 && v != 1) return a.error("{} must be 0 or 1, got {}", name, v);
  return OkStatus();
}

// A scalar (or one-element 1-D) optional input.
Status check_scalar(const InferenceContext& ctx, int i, const char* what) {
  const Shape& s = ctx.input_shape(i);
  if (s.empty() || (s.size() == 1 && (s[0] == 1 || s[0] == 0 || s[0] < 0))) return OkStatus();
  return ctx.error("input {} ({}) must be a scalar, got shape {}", i, what, shape_to_string(s));
}

// ---- Resize ----

// An optional 1-D input that may also be given as an empty tensor meaning "absent" (opset 11
// requires the scales input, so exporters pass an empty one alongside sizes).
bool given_non_empty(const InferenceContext& ctx, int i) {
  if (!ctx.has_input(i)) return false;
  const Shape& s = ctx.input_shape(i);
  return !(s.size() == 1 && s[0] == 0);
}

OpSchema resize_schema() {
  OpSchema s;
  s.name = "Resize";
  s.min_inputs = 1;
  s.max_inputs = 4;
  s.attributes = {"antialias",
                  "axes",
                  "coordinate_transformation_mode",
                  "cubic_coeff_a",
                  "exclude_outside",
                  "extrapolation_value",
                  "keep_aspect_ratio_policy",
                  "mode",
                  "nearest_mode"};
  s.doc = "resizes every axis (or the axes given) by scales or to sizes (nearest, linear or "
          "cubic interpolation, optionally antialiased)";
  s.infer = [](InferenceContext& ctx) -> Status {
    const DType dt = ctx.input_dtype(0);
    TD_ASSIGN_OR_RETURN(std::string mode,
                        one_of(ctx, "mode", "nearest", {"nearest", "linear", "cubic"}));
    TD_ASSIGN_OR_RETURN(std::string ctm,
                        one_of(ctx, "coordinate_transformation_mode", "half_pixel",
                               {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                "tf_crop_and_resize", "tf_half_pixel_for_nn",
                                "half_pixel_symmetric"}));
    TD_RETURN_IF_ERROR(one_of(ctx, "nearest_mode", "round_prefer_floor",
                              {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"})
                           .status());
    TD_RETURN_IF_ERROR(check_flag(ctx, "exclude_outside"));
    TD_RETURN_IF_ERROR(ctx.attr_float("cubic_coeff_a", -0.75f).status());
    TD_RETURN_IF_ERROR(ctx.attr_float("extrapolation_value", 0.f).status());
    if (mode != "nearest" && !dtype_is_numeric(dt))
      return ctx.error("mode '{}' needs a numeric input, got {}", mode, dtype_name(dt));
    TD_RETURN_IF_ERROR(check_flag(ctx, "antialias"));
    TD_ASSIGN_OR_RETURN(int64_t antialias, ctx.attr_int("antialias", 0));
    if (antialias && mode == "nearest")
      return ctx.error("antialias is defined for the linear and cubic modes, not 'nearest'");
    TD_ASSIGN_OR_RETURN(std::string policy,
                        one_of(ctx, "keep_aspect_ratio_policy", "stretch",
                               {"stretch", "not_larger", "not_smaller"}));
    const Shape& x = ctx.input_shape(0);
    const int64_t rank = static_cast<int64_t>(x.size());
    // Opset 18 `axes`: roi, scales and sizes cover these axes only (the others keep their size).
    std::vector<int64_t> axes;
    if (ctx.has_attr("axes")) {
      TD_ASSIGN_OR_RETURN(std::vector<int64_t> given, ctx.attr_ints("axes"));
      std::vector<bool> seen(static_cast<size_t>(rank), false);
      for (int64_t a : given) {
        if (a < -rank || a >= rank)
          return ctx.error("axes {}: axis {} is out of range for input rank {}", given, a, rank);
        const int64_t k = a < 0 ? a + rank : a;
        if (seen[static_cast<size_t>(k)]) return ctx.error("axes {} repeat axis {}", given, a);
        seen[static_cast<size_t>(k)] = true;
        axes.push_back(k);
      }
    } else {
      for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
    }
    const int64_t naxes = static_cast<int64_t>(axes.size());

    auto check_1d = [&](int i, const char* what, int64_t len) -> Status {
      const Shape& sh = ctx.input_shape(i);
      if (sh.size() != 1 || dims_conflict(sh[0], len))
        return ctx.error(
            "input {} ({}) must be 1-D with {} values (for input rank {}, {} resized axes), got "
            "shape {}", i, what, len, rank, naxes, shape_to_string(sh));
      return OkStatus();
    };
    const bool has_roi = given_non_empty(ctx, 1);
    if (has_roi) {
      TD_RETURN_IF_ERROR(check_float(ctx, 1, "roi"));
      TD_RETURN_IF_ERROR(check_1d(1, "roi", 2 * naxes));
    } else if (ctm == "tf_crop_and_resize") {
      return ctx.error("coordinate_transformation_mode tf_crop_and_resize needs the roi input");
    }
    const bool has_scales = given_non_empty(ctx, 2);
    const bool has_sizes = given_non_empty(ctx, 3);
    if (has_scales && has_sizes)
      return ctx.error("only one of scales (input 2) and sizes (input 3) may be given, got both");
    if (!has_scales && !has_sizes)
      return ctx.error("one of scales (input 2) and sizes (input 3) must be given");
    Shape out(x.size(), -1);
    for (int64_t i = 0; i < rank; ++i)
      if (std::find(axes.begin(), axes.end(), i) == axes.end()) out[static_cast<size_t>(i)] = x[static_cast<size_t>(i)];
    if (has_scales && policy != "stretch")
      return ctx.error("keep_aspect_ratio_policy '{}' applies to sizes, not scales", policy);
    if (has_scales) {
      TD_RETURN_IF_ERROR(check_float(ctx, 2, "scales"));
      TD_RETURN_IF_ERROR(check_1d(2, "scales", naxes));
      if (const TensorView* v = ctx.input_value(2)) {
        std::vector<double> scales(static_cast<size_t>(v->numel()));
        for (size_t i = 0; i < scales.size(); ++i)
          scales[i] = v->dtype == DType::kFloat64 ? v->as<double>()[i]
                      : v->dtype == DType::kFloat32
                          ? v->as<float>()[i]
                          : (v->dtype == DType::kFloat16 ? half_to_float(v->as<uint16_t>()[i])
                                                         : bfloat16_to_float(v->as<uint16_t>()[i]));
        for (size_t j = 0; j < scales.size(); ++j) {
          const size_t i = static_cast<size_t>(axes[j]);
          if (!(scales[j] > 0) || !std::isfinite(scales[j]))
            return ctx.error("scales must be > 0, got {}", scales);
          if (x[i] >= 0) {
            const double o = std::floor(static_cast<double>(x[i]) * scales[j]);
            if (o > 4e18) return ctx.error("scales {} make axis {} too large", scales, i);
            out[i] = static_cast<int64_t>(o);
          }
        }
      }
    } else {
      if (ctx.input_dtype(3) != DType::kInt64)
        return ctx.error("input 3 (sizes) has dtype {}, expected int64",
                         dtype_name(ctx.input_dtype(3)));
      TD_RETURN_IF_ERROR(check_1d(3, "sizes", naxes));
      TD_ASSIGN_OR_RETURN(auto sizes, ctx.input_ints(3));
      if (sizes) {
        for (int64_t v : *sizes)
          if (v < 0) return ctx.error("sizes must be >= 0, got {}", *sizes);
        bool known = true;
        for (int64_t a : axes) {
          if (x[static_cast<size_t>(a)] == 0 && policy != "stretch")
            return ctx.error("keep_aspect_ratio_policy '{}' cannot scale axis {} of size 0 (input "
                             "{})", policy, a, shape_to_string(x));
          known = known && x[static_cast<size_t>(a)] > 0;
        }
        if (policy == "stretch") {
          for (size_t j = 0; j < axes.size(); ++j) out[static_cast<size_t>(axes[j])] = (*sizes)[j];
        } else if (known) {
          // not_larger / not_smaller: one scale for every resized axis, the smallest / largest
          // of sizes / input; each size is then round_half_up(scale * input).
          double scale = policy == "not_larger" ? 1e300 : 0;
          for (size_t j = 0; j < axes.size(); ++j) {
            const double r = static_cast<double>((*sizes)[j]) /
                             static_cast<double>(x[static_cast<size_t>(axes[j])]);
            scale = policy == "not_larger" ? std::min(scale, r) : std::max(scale, r);
          }
          for (int64_t a : axes) {
            const double o = scale * static_cast<double>(x[static_cast<size_t>(a)]) + 0.5;
            if (o > 4e18) return ctx.error("sizes {} make axis {} too large", *sizes, a);
            out[static_cast<size_t>(a)] = static_cast<int64_t>(o);
          }
        }
      }
    }
    for (size_t i = 0; i < out.size(); ++i)
      if (x[i] == 0 && out[i] > 0)
        return ctx.error("cannot resize axis {} of size 0 to size {} (input shape {})", i, out[i],
                         shape_to_string(x));
    ctx.set_output(0, dt, std::move(out));
    return OkStatus();
  };
  return s;
}

// ---- GridSample ----

OpSchema grid_sample_schema() {
  OpSchema s;
  s.name = "GridSample";
  s.min_inputs = s.max_inputs = 2;
  s.attributes = {"align_corners", "mode", "padding_mode"};
  s.doc = "samples X at the normalized grid positions (bilinear, nearest or bicubic)";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_flag(ctx, "align_corners"));
    TD_RETURN_IF_ERROR(
        one_of(ctx, "mode", "bilinear", {"bilinear", "nearest", "bicubic", "linear", "cubic"})
            .status());
    TD_RETURN_IF_ERROR(
        one_of(ctx, "padding_mode", "zeros", {"zeros", "border", "reflection"}).status());
    const DType dt = ctx.input_dtype(0);
    if (!dtype_is_numeric(dt))
      return ctx.error("input 0 (X) has dtype {}, expected a numeric type", dtype_name(dt));
    TD_RETURN_IF_ERROR(check_float(ctx, 1, "grid"));
    const Shape& x = ctx.input_shape(0);
    const Shape& g = ctx.input_shape(1);
    if (x.size() < 3)
      return ctx.error("input 0 (X) must have rank >= 3 ([N, C, spatial...]), got shape {}",
                       shape_to_string(x));
    const int64_t n_spatial = static_cast<int64_t>(x.size()) - 2;
    if (g.size() != x.size() || dims_conflict(g[0], x[0]) || dims_conflict(g.back(), n_spatial))
      return ctx.error(
          "input 1 (grid) must have shape [N, out spatial..., {}] (rank {}, N = {}), got {}",
          n_spatial, x.size(), x[0] < 0 ? std::string("?") : std::to_string(x[0]),
          shape_to_string(g));
    Shape out = {x[0] >= 0 ? x[0] : g[0], x[1]};
    out.insert(out.end(), g.begin() + 1, g.end() - 1);
    ctx.set_output(0, dt, std::move(out));
    return OkStatus();
  };
  return s;
}

// ---- RoiAlign, MaxRoiPool ----

OpSchema roi_align_schema() {
  OpSchema s;
  s.name = "RoiAlign";
  s.min_inputs = s.max_inputs = 3;
  s.attributes = {"coordinate_transformation_mode",
                  "mode",
                  "output_height",
                  "output_width",
                  "sampling_ratio",
                  "spatial_scale"};
  s.doc = "bilinear region-of-interest pooling (avg or max) to output_height x output_width";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(one_of(ctx, "coordinate_transformation_mode", "half_pixel",
                              {"half_pixel", "output_half_pixel"})
                           .status());
    TD_RETURN_IF_ERROR(one_of(ctx, "mode", "avg", {"avg", "max"}).status());
    TD_ASSIGN_OR_RETURN(int64_t oh, ctx.attr_int("output_height", 1));
    TD_ASSIGN_OR_RETURN(int64_t ow, ctx.attr_int("output_width", 1));
    TD_ASSIGN_OR_RETURN(int64_t sampling_ratio, ctx.attr_int("sampling_ratio", 0));
    TD_RETURN_IF_ERROR(ctx.attr_float("spatial_scale", 1.f).status());
    if (oh <= 0 || ow <= 0)
      return ctx.error("output_height and output_width must be > 0, got {} and {}", oh, ow);
    if (sampling_ratio < 0) return ctx.error("sampling_ratio must be >= 0, got {}", sampling_ratio);
    TD_RETURN_IF_ERROR(check_float(ctx, 0, "X"));
    TD_RETURN_IF_ERROR(check_same_type(ctx, 0, "X", 1, "rois"));
    if (ctx.input_dtype(2) != DType::kInt64)
      return ctx.error("input 2 (batch_indices) has dtype {}, expected int64",
                       dtype_name(ctx.input_dtype(2)));
    TD_RETURN_IF_ERROR(check_rank(ctx, 0, "X", 4, "[N, C, H, W]"));
    const Shape& x = ctx.input_shape(0);
    const Shape& rois = ctx.input_shape(1);
    const Shape& bi = ctx.input_shape(2);
    if (rois.size() != 2 || dims_conflict(rois[1], 4))
      return ctx.error("input 1 (rois) must have shape [num_rois, 4], got {}",
                       shape_to_string(rois));
    if (bi.size() != 1 || dims_conflict(bi[0], rois[0]))
      return ctx.error("input 2 (batch_indices) must have shape [num_rois] = [{}], got {}",
                       rois[0] < 0 ? std::string("?") : std::to_string(rois[0]),
                       shape_to_string(bi));
    TD_ASSIGN_OR_RETURN(auto idx, ctx.input_ints(2));
    if (idx && x[0] >= 0)
      for (int64_t v : *idx)
        if (v < 0 || v >= x[0])
          return ctx.error("batch_indices must be in [0, {}) (the batch size), got {}", x[0], *idx);
    ctx.set_output(0, ctx.input_dtype(0), {rois[0] >= 0 ? rois[0] : bi[0], x[1], oh, ow});
    return OkStatus();
  };
  return s;
}

OpSchema max_roi_pool_schema() {
  OpSchema s;
  s.name = "MaxRoiPool";
  s.min_inputs = s.max_inputs = 2;
  s.attributes = {"pooled_shape", "spatial_scale"};
  s.doc = "max pooling of each region of interest (batch, x1, y1, x2, y2) to pooled_shape";
  s.infer = [](InferenceContext& ctx) -> Status {
    if (!ctx.has_attr("pooled_shape")) return ctx.error("attribute 'pooled_shape' is required");
    TD_ASSIGN_OR_RETURN(std::vector<int64_t> pooled, ctx.attr_ints("pooled_shape", {}));
    if (pooled.size() != 2 || pooled[0] <= 0 || pooled[1] <= 0)
      return ctx.error("pooled_shape must be 2 values > 0 (height, width), got {}", pooled);
    TD_RETURN_IF_ERROR(ctx.attr_float("spatial_scale", 1.f).status());
    TD_RETURN_IF_ERROR(check_float(ctx, 0, "X"));
    TD_RETURN_IF_ERROR(check_same_type(ctx, 0, "X", 1, "rois"));
    TD_RETURN_IF_ERROR(check_rank(ctx, 0, "X", 4, "[N, C, H, W]"));
    const Shape& rois = ctx.input_shape(1);
    if (rois.size() != 2 || dims_conflict(rois[1], 5))
      return ctx.error("input 1 (rois) must have shape [num_rois, 5], got {}",
                       shape_to_string(rois));
    ctx.set_output(0, ctx.input_dtype(0), {rois[0], ctx.input_shape(0)[1], pooled[0], pooled[1]});
    return OkStatus();
  };
  return s;
}

// ---- MaxUnpool ----

OpSchema max_unpool_schema() {
  OpSchema s;
  s.name = "MaxUnpool";
  s.min_inputs = 2;
  s.max_inputs = 3;
  s.attributes = {"kernel_shape", "pads", "strides"};
  s.doc = "scatters X into a zero tensor at MaxPool's flat Indices (partial inverse of MaxPool)";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_float(ctx, 0, "X"));
    if (ctx.input_dtype(1) != DType::kInt64)
      return ctx.error("input 1 (I) has dtype {}, expected int64", dtype_name(ctx.input_dtype(1)));
    const Shape& x = ctx.input_shape(0);
    if (x.size() < 3)
      return ctx.error("input 0 (X) must have rank >= 3 ([N, C, spatial...]), got shape {}",
                       shape_to_string(x));
    const Shape& ind = ctx.input_shape(1);
    bool same = ind.size() == x.size();
    for (size_t i = 0; same && i < x.size(); ++i) same = !dims_conflict(x[i], ind[i]);
    if (!same)
      return ctx.error("input 1 (I) must have the shape of X {}, got {}", shape_to_string(x),
                       shape_to_string(ind));
    const size_t n = x.size() - 2;
    if (!ctx.has_attr("kernel_shape")) return ctx.error("attribute 'kernel_shape' is required");
    TD_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, ctx.attr_ints("kernel_shape", {}));
    TD_ASSIGN_OR_RETURN(std::vector<int64_t> strides,
                        ctx.attr_ints("strides", std::vector<int64_t>(n, 1)));
    TD_ASSIGN_OR_RETURN(std::vector<int64_t> pads,
                        ctx.attr_ints("pads", std::vector<int64_t>(2 * n, 0)));
    if (kernel.size() != n || strides.size() != n || pads.size() != 2 * n)
      return ctx.error(
          "kernel_shape {}, strides {} and pads {} must have {}, {} and {} values (X has {} "
          "spatial axes)",
          kernel, strides, pads, n, n, 2 * n, n);
    for (size_t i = 0; i < n; ++i) {
      if (kernel[i] <= 0 || strides[i] <= 0 || pads[i] < 0 || pads[i + n] < 0)
        return ctx.error("kernel_shape {} and strides {} must be > 0 and pads {} >= 0", kernel,
                         strides, pads);
    }
    Shape out = x;
    for (size_t i = 0; i < n; ++i) {
      const int64_t in = x[i + 2];
      if (in < 0) continue;
      out[i + 2] = (in - 1) * strides[i] + kernel[i] - pads[i] - pads[i + n];
      if (out[i + 2] < 0)
        return ctx.error("spatial axis {}: pads {} exceed the unpooled size", i, pads);
    }
    if (ctx.has_input(2)) {
      if (ctx.input_dtype(2) != DType::kInt64)
        return ctx.error("input 2 (output_shape) has dtype {}, expected int64",
                         dtype_name(ctx.input_dtype(2)));
      const Shape& os = ctx.input_shape(2);
      if (os.size() != 1 || dims_conflict(os[0], static_cast<int64_t>(x.size())))
        return ctx.error("input 2 (output_shape) must be 1-D with {} values, got shape {}",
                         x.size(), shape_to_string(os));
      TD_ASSIGN_OR_RETURN(auto shape, ctx.input_ints(2));
      if (shape) {
        for (size_t i = 0; i < shape->size(); ++i) {
          if ((*shape)[i] < 0 || (i < 2 && dims_conflict((*shape)[i], x[i])))
            return ctx.error("output_shape {} must be >= 0 and keep N and C of X {}", *shape,
                             shape_to_string(x));
          if (out[i] >= 0 && (*shape)[i] < out[i])
            return ctx.error("output_shape {} is smaller than the unpooled shape {}", *shape,
                             shape_to_string(out));
        }
        out = *shape;
      } else {
        out.assign(x.size(), -1);
        out[0] = x[0];
        out[1] = x[1];
      }
    }
    ctx.set_output(0, ctx.input_dtype(0), std::move(out));
    return OkStatus();
  };
  return s;
}

// ---- NonMaxSuppression ----

OpSchema nms_schema() {
  OpSchema s;
  s.name = "NonMaxSuppression";
  s.min_inputs = 2;
  s.max_inputs = 5;
  s.attributes = {"center_point_box"};
  s.doc = "greedy per-class box selection by score with IOU suppression; [num_selected, 3]";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_flag(ctx, "center_point_box"));
    TD_RETURN_IF_ERROR(check_float(ctx, 0, "boxes"));
    TD_RETURN_IF_ERROR(check_same_type(ctx, 0, "boxes", 1, "scores"));
    const Shape& boxes = ctx.input_shape(0);
    const Shape& scores = ctx.input_shape(1);
    if (boxes.size() != 3 || dims_conflict(boxes[2], 4))
      return ctx.error("input 0 (boxes) must have shape [num_batches, num_boxes, 4], got {}",
                       shape_to_string(boxes));
    if (scores.size() != 3 || dims_conflict(scores[0], boxes[0]) ||
        dims_conflict(scores[2], boxes[1]))
      return ctx.error(
          "input 1 (scores) must have shape [num_batches, num_classes, num_boxes] matching boxes "
          "{}, got {}",
          shape_to_string(boxes), shape_to_string(scores));
    if (ctx.has_input(2)) {
      if (!dtype_is_integer(ctx.input_dtype(2)))
        return ctx.error("input 2 (max_output_boxes_per_class) has dtype {}, expected int64",
                         dtype_name(ctx.input_dtype(2)));
      TD_RETURN_IF_ERROR(check_scalar(ctx, 2, "max_output_boxes_per_class"));
    }
    for (int i : {3, 4}) {
      if (!ctx.has_input(i)) continue;
      const char* what = i == 3 ? "iou_threshold" : "score_threshold";
      TD_RETURN_IF_ERROR(check_float(ctx, i, what));
      TD_RETURN_IF_ERROR(check_scalar(ctx, i, what));
    }
    ctx.set_output(0, DType::kInt64, {-1, 3});
    return OkStatus();
  };
  return s;
}

}  // namespace

void register_image_ops(OpRegistry& r) {
  r.add(resize_schema());
  r.add(grid_sample_schema());
  r.add(roi_align_schema());
  r.add(max_roi_pool_schema());
  r.add(max_unpool_schema());
  r.add(nms_schema());
}

}  // namespace tensord
