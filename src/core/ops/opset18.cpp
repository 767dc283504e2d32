// Schemas of the ops new in opsets 18 to 20 that PyTorch's exporters emit: Gelu (20),
// GroupNormalization (18, per-channel scale and bias as in 21; the importer marks an opset-18
// node `per_group_affine`), Col2Im (18), CenterCropPad (18), AffineGrid (20) and DeformConv (19).
// Their kernels are in src/backends/cpu/kernels/opset18.cpp; the geometry shared with them is in
// op_helpers.h (col2im_blocks).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/op_registry.h"
#include "core/ops/all_ops.h"
#include "core/ops/op_helpers.h"

namespace tensord {

namespace nn {

Result<std::vector<int64_t>> col2im_blocks(const NodeAttrs& a, const std::vector<int64_t>& image,
                                           const std::vector<int64_t>& block,
                                           std::vector<int64_t>* strides,
                                           std::vector<int64_t>* dilations,
                                           std::vector<int64_t>* pads) {
  const size_t n = image.size();
  if (n == 0) return a.error("image_shape is empty; Col2Im needs at least one spatial axis");
  if (block.size() != n)
    return a.error("block_shape has {} values but image_shape has {}", block.size(), n);
  TD_ASSIGN_OR_RETURN(*strides, a.attr_ints("strides", std::vector<int64_t>(n, 1)));
  TD_ASSIGN_OR_RETURN(*dilations, a.attr_ints("dilations", std::vector<int64_t>(n, 1)));
  TD_ASSIGN_OR_RETURN(*pads, a.attr_ints("pads", std::vector<int64_t>(2 * n, 0)));
  if (strides->size() != n || dilations->size() != n || pads->size() != 2 * n)
    return a.error("strides {}, dilations {} and pads {} must have {}, {} and {} values",
                   *strides, *dilations, *pads, n, n, 2 * n);
  std::vector<int64_t> blocks(n);
  constexpr int64_t kLimit = int64_t{1} << 40;
  for (size_t i = 0; i < n; ++i) {
    const int64_t s = (*strides)[i], d = (*dilations)[i], pb = (*pads)[i], pe = (*pads)[i + n];
    if (image[i] < 0 || image[i] > kLimit)
      return a.error("image_shape {} has a negative or absurd size", image);
    if (block[i] < 1 || block[i] > kLimit)
      return a.error("block_shape {} must be >= 1 on every axis", block);
    if (s < 1 || d < 1 || s > kLimit || d > kLimit)
      return a.error("strides {} and dilations {} must be >= 1", *strides, *dilations);
    if (pb < 0 || pe < 0 || pb > kLimit || pe > kLimit)
      return a.error("pads {} must be >= 0", *pads);
    const int64_t span = d * (block[i] - 1) + 1;
    const int64_t padded = image[i] + pb + pe;
    if (padded < span)
      return a.error("axis {}: the block (span {}) does not fit the padded image ({})", i, span,
                     padded);
    blocks[i] = (padded - span) / s + 1;
  }
  return blocks;
}

}  // namespace nn

namespace {

Status float_input(const InferenceContext& ctx, int i, const char* what) {
  if (dtype_is_float(ctx.input_dtype(i))) return OkStatus();
  return ctx.error("input {} ({}) has dtype {}, expected a float type", i, what,
                   dtype_name(ctx.input_dtype(i)));
}

Status int64_vector(const InferenceContext& ctx, int i, const char* what) {
  if (ctx.input_dtype(i) != DType::kInt64 || ctx.input_shape(i).size() != 1)
    return ctx.error("input {} ({}) must be a 1-D int64 tensor, got {} of shape {}", i, what,
                     dtype_name(ctx.input_dtype(i)), shape_to_string(ctx.input_shape(i)));
  return OkStatus();
}

OpSchema gelu_schema() {
  OpSchema s;
  s.name = "Gelu";
  s.min_inputs = s.max_inputs = 1;
  s.attributes = {"approximate"};
  s.doc = "y = x * Phi(x) (approximate 'none': erf; 'tanh': the tanh approximation)";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(float_input(ctx, 0, "X"));
    TD_ASSIGN_OR_RETURN(std::string approx, ctx.attr_string("approximate", "none"));
    if (approx != "none" && approx != "tanh")
      return ctx.error("approximate must be 'none' or 'tanh', got '{}'", approx);
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
    return OkStatus();
  };
  return s;
}

OpSchema group_norm_schema() {
  OpSchema s;
  s.name = "GroupNormalization";
  s.min_inputs = s.max_inputs = 3;
  s.attributes = {"epsilon", "num_groups", "stash_type", "per_group_affine"};
  s.doc = "normalises X [N, C, ...] over groups of C/num_groups channels, then a per-channel "
          "scale and bias (per group with per_group_affine, the opset-18 form)";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(float_input(ctx, 0, "X"));
    for (int i = 1; i < 3; ++i)
      if (ctx.input_dtype(i) != ctx.input_dtype(0))
        return ctx.error("input {} has dtype {} but X is {}", i, dtype_name(ctx.input_dtype(i)),
                         dtype_name(ctx.input_dtype(0)));
    if (!ctx.has_attr("num_groups")) return ctx.error("the num_groups attribute is required");
    TD_ASSIGN_OR_RETURN(int64_t groups, ctx.attr_int("num_groups", 0));
    TD_ASSIGN_OR_RETURN(int64_t per_group, ctx.attr_int("per_group_affine", 0));
    TD_RETURN_IF_ERROR(ctx.attr_float("epsilon", 1e-5f).status());
    TD_ASSIGN_OR_RETURN(int64_t stash, ctx.attr_int("stash_type", 1));
    if (stash != 1 && stash != 11 && stash != 10 && stash != 16)
      return ctx.error("stash_type must be a float type (1, 10, 11 or 16), got {}", stash);
    const Shape& x = ctx.input_shape(0);
    if (x.size() < 2) return ctx.error("X must be [N, C, ...], got {}", shape_to_string(x));
    if (groups < 1) return ctx.error("num_groups must be >= 1, got {}", groups);
    const int64_t c = x[1];
    if (c >= 0 && c % groups != 0)
      return ctx.error("num_groups {} does not divide the {} channels of X {}", groups, c,
                       shape_to_string(x));
    const int64_t want = per_group ? groups : c;
    for (int i = 1; i < 3; ++i) {
      const Shape& sh = ctx.input_shape(i);
      if (sh.size() != 1 || dims_conflict(sh[0], want))
        return ctx.error("input {} ({}) must have shape [{}] ({}), got {}", i,
                         i == 1 ? "scale" : "bias", want,
                         per_group ? "one per group, opset 18" : "one per channel", shape_to_string(sh));
    }
    ctx.set_output(0, ctx.input_dtype(0), x);
    return OkStatus();
  };
  return s;
}

OpSchema col2im_schema() {
  OpSchema s;
  s.name = "Col2Im";
  s.min_inputs = s.max_inputs = 3;
  s.attributes = {"dilations", "pads", "strides"};
  s.doc = "rearranges column blocks [N, C*prod(block_shape), L] into an image [N, C, image_shape] "
          "(summing overlaps)";
  s.infer = [](InferenceContext& ctx) -> Status {
    const Shape& x = ctx.input_shape(0);
    if (!dtype_is_numeric(ctx.input_dtype(0)))
      return ctx.error("input has dtype {}, expected a numeric type", dtype_name(ctx.input_dtype(0)));
    if (x.size() != 3)
      return ctx.error("input must be [N, C * prod(block_shape), L], got {}", shape_to_string(x));
    TD_RETURN_IF_ERROR(int64_vector(ctx, 1, "image_shape"));
    TD_RETURN_IF_ERROR(int64_vector(ctx, 2, "block_shape"));
    TD_ASSIGN_OR_RETURN(auto image, ctx.input_ints(1));
    TD_ASSIGN_OR_RETURN(auto block, ctx.input_ints(2));
    if (!image || !block) {
      const int64_t n = ctx.input_shape(1)[0];
      ctx.set_output(0, ctx.input_dtype(0), Shape(static_cast<size_t>(std::max<int64_t>(n, 0) + 2), -1));
      return OkStatus();
    }
    std::vector<int64_t> strides, dilations, pads;
    TD_ASSIGN_OR_RETURN(auto blocks, nn::col2im_blocks(ctx, *image, *block, &strides, &dilations, &pads));
    int64_t block_size = 1, l = 1;
    for (size_t i = 0; i < block->size(); ++i) {
      block_size *= (*block)[i];
      l *= blocks[i];
      if (block_size > (int64_t{1} << 40) || l > (int64_t{1} << 40))
        return ctx.error("block_shape {} or image_shape {} is absurdly large", *block, *image);
    }
    if (x[1] >= 0 && x[1] % block_size != 0)
      return ctx.error("input dim 1 ({}) is not a multiple of prod(block_shape {}) = {}", x[1],
                       *block, block_size);
    if (x[2] >= 0 && x[2] != l)
      return ctx.error("input has {} blocks (dim 2) but image_shape {}, block_shape {}, strides {}, "
                       "dilations {} and pads {} give {}", x[2], *image, *block, strides, dilations,
                       pads, l);
    Shape out = {x[0], x[1] >= 0 ? x[1] / block_size : -1};
    out.insert(out.end(), image->begin(), image->end());
    ctx.set_output(0, ctx.input_dtype(0), out);
    return OkStatus();
  };
  return s;
}

OpSchema center_crop_pad_schema() {
  OpSchema s;
  s.name = "CenterCropPad";
  s.min_inputs = s.max_inputs = 2;
  s.attributes = {"axes"};
  s.doc = "crops or zero-pads the given axes (all by default) around their centre to shape";
  s.infer = [](InferenceContext& ctx) -> Status {
    const Shape& x = ctx.input_shape(0);
    const int64_t rank = static_cast<int64_t>(x.size());
    if (ctx.input_dtype(1) != DType::kInt64 && ctx.input_dtype(1) != DType::kInt32)
      return ctx.error("shape must be int32 or int64, got {}", dtype_name(ctx.input_dtype(1)));
    if (ctx.input_shape(1).size() != 1)
      return ctx.error("shape must be 1-D, got {}", shape_to_string(ctx.input_shape(1)));
    std::vector<int64_t> axes;
    if (ctx.has_attr("axes")) {
      TD_ASSIGN_OR_RETURN(std::vector<int64_t> given, ctx.attr_ints("axes"));
      std::vector<bool> seen(static_cast<size_t>(rank), false);
      for (int64_t a : given) {
        if (a < -rank || a >= rank)
          return ctx.error("axes {}: axis {} is out of range for rank {}", given, a, rank);
        const int64_t k = a < 0 ? a + rank : a;
        if (seen[static_cast<size_t>(k)]) return ctx.error("axes {} repeat axis {}", given, a);
        seen[static_cast<size_t>(k)] = true;
        axes.push_back(k);
      }
    } else {
      for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
    }
    const int64_t len = ctx.input_shape(1)[0];
    if (len >= 0 && len != static_cast<int64_t>(axes.size()))
      return ctx.error("shape has {} values for {} axes", len, axes.size());
    TD_ASSIGN_OR_RETURN(auto shape, ctx.input_ints(1));
    Shape out = x;
    for (size_t j = 0; j < axes.size(); ++j) {
      int64_t v = -1;
      if (shape) {
        v = (*shape)[j];
        if (v < 0) return ctx.error("shape {} has a negative size", *shape);
      }
      out[static_cast<size_t>(axes[j])] = v;
    }
    ctx.set_output(0, ctx.input_dtype(0), out);
    return OkStatus();
  };
  return s;
}

OpSchema affine_grid_schema() {
  OpSchema s;
  s.name = "AffineGrid";
  s.min_inputs = s.max_inputs = 2;
  s.attributes = {"align_corners"};
  s.doc = "the sampling grid [N, (D,) H, W, 2|3] of affine matrices theta [N, 2, 3] or [N, 3, 4]";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(float_input(ctx, 0, "theta"));
    TD_ASSIGN_OR_RETURN(int64_t align, ctx.attr_int("align_corners", 0));
    if (align != 0 && align != 1) return ctx.error("align_corners must be 0 or 1, got {}", align);
    const Shape& t = ctx.input_shape(0);
    TD_RETURN_IF_ERROR(int64_vector(ctx, 1, "size"));
    const int64_t len = ctx.input_shape(1)[0];
    if (t.size() != 3 || !((dims_conflict(t[1], 2) == false && dims_conflict(t[2], 3) == false) ||
                           (dims_conflict(t[1], 3) == false && dims_conflict(t[2], 4) == false)))
      return ctx.error("theta must be [N, 2, 3] (2-D) or [N, 3, 4] (3-D), got {}", shape_to_string(t));
    if (len >= 0 && len != 4 && len != 5)
      return ctx.error("size must have 4 ([N, C, H, W]) or 5 ([N, C, D, H, W]) values, got {}", len);
    TD_ASSIGN_OR_RETURN(auto size, ctx.input_ints(1));
    if (!size) {
      ctx.set_output(0, ctx.input_dtype(0), Shape(static_cast<size_t>(len >= 0 ? len : 4), -1));
      return OkStatus();
    }
    const bool three = size->size() == 5;
    if ((three && t[1] == 2) || (!three && t[1] == 3))
      return ctx.error("theta {} does not match size {}", shape_to_string(t), *size);
    for (int64_t v : *size)
      if (v < 0 || v > (int64_t{1} << 32)) return ctx.error("size {} has a negative or absurd value", *size);
    if (t[0] >= 0 && (*size)[0] != t[0])
      return ctx.error("size {} has N = {} but theta has {}", *size, (*size)[0], t[0]);
    Shape out = {(*size)[0]};
    out.insert(out.end(), size->begin() + 2, size->end());
    out.push_back(three ? 3 : 2);
    int64_t total = 1;
    for (int64_t d : out) {
      total *= std::max<int64_t>(d, 1);
      if (total > (int64_t{1} << 36)) return ctx.error("size {} is absurdly large", *size);
    }
    ctx.set_output(0, ctx.input_dtype(0), out);
    return OkStatus();
  };
  return s;
}

OpSchema deform_conv_schema() {
  OpSchema s;
  s.name = "DeformConv";
  s.min_inputs = 3;
  s.max_inputs = 5;
  s.attributes = {"dilations", "group", "kernel_shape", "offset_group", "pads", "strides"};
  s.doc = "2-D convolution sampling X at offset positions (bilinear), optionally masked";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(float_input(ctx, 0, "X"));
    for (int i = 1; i < ctx.num_inputs(); ++i)
      if (ctx.has_input(i) && ctx.input_dtype(i) != ctx.input_dtype(0))
        return ctx.error("input {} has dtype {} but X is {}", i, dtype_name(ctx.input_dtype(i)),
                         dtype_name(ctx.input_dtype(0)));
    const Shape& x = ctx.input_shape(0);
    const Shape& w = ctx.input_shape(1);
    const Shape& off = ctx.input_shape(2);
    if (x.size() != 4 || w.size() != 4)
      return ctx.error("X and W must be 4-D (2-D DeformConv), got {} and {}", shape_to_string(x),
                       shape_to_string(w));
    TD_ASSIGN_OR_RETURN(int64_t group, ctx.attr_int("group", 1));
    TD_ASSIGN_OR_RETURN(int64_t offset_group, ctx.attr_int("offset_group", 1));
    if (group < 1 || offset_group < 1)
      return ctx.error("group ({}) and offset_group ({}) must be >= 1", group, offset_group);
    if (x[1] >= 0 && (x[1] % group != 0 || x[1] % offset_group != 0))
      return ctx.error("X's {} channels are not divisible by group {} and offset_group {}", x[1],
                       group, offset_group);
    if (w[0] >= 0 && w[0] % group != 0)
      return ctx.error("W's {} output channels are not divisible by group {}", w[0], group);
    if (x[1] >= 0 && w[1] >= 0 && w[1] * group != x[1])
      return ctx.error("W {} has {} input channels per group; X {} with group {} needs {}",
                       shape_to_string(w), w[1], shape_to_string(x), group, x[1] / group);
    TD_ASSIGN_OR_RETURN(Shape out, nn::conv_output_shape(ctx, x, w));
    if (off.size() != 4)
      return ctx.error("offset must be [N, offset_group * 2 * kH * kW, oH, oW], got {}",
                       shape_to_string(off));
    const int64_t kk = w[2] >= 0 && w[3] >= 0 ? w[2] * w[3] : -1;
    if (kk >= 0 && dims_conflict(off[1], offset_group * 2 * kk))
      return ctx.error("offset {} needs {} channels (offset_group {} x 2 x {} kernel taps)",
                       shape_to_string(off), offset_group * 2 * kk, offset_group, kk);
    for (size_t d = 0; d < 4; ++d)
      if (d != 1 && dims_conflict(off[d], out[d]))
        return ctx.error("offset {} does not match the output {}", shape_to_string(off),
                         shape_to_string(out));
    if (ctx.has_input(3)) {
      const Shape& b = ctx.input_shape(3);
      if (b.size() != 1 || dims_conflict(b[0], w[0]))
        return ctx.error("B must be [{}], got {}", w[0], shape_to_string(b));
    }
    if (ctx.has_input(4)) {
      const Shape& m = ctx.input_shape(4);
      bool bad = m.size() != 4 || (kk >= 0 && dims_conflict(m[1], offset_group * kk));
      for (size_t d = 0; !bad && d < 4; ++d) bad = d != 1 && dims_conflict(m[d], out[d]);
      if (bad)
        return ctx.error("mask must be [N, offset_group * kH * kW, oH, oW] = [{}, {}, {}, {}], got {}",
                         out[0], kk >= 0 ? offset_group * kk : -1, out[2], out[3],
                         shape_to_string(m));
    }
    ctx.set_output(0, ctx.input_dtype(0), out);
    return OkStatus();
  };
  return s;
}

}  // namespace

void register_opset18_ops(OpRegistry& r) {
  r.add(gelu_schema());
  r.add(group_norm_schema());
  r.add(col2im_schema());
  r.add(center_crop_pad_schema());
  r.add(affine_grid_schema());
  r.add(deform_conv_schema());
}

}  // namespace tensord
