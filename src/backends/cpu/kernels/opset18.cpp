// Reference kernels of the ops new in opsets 18 to 20 (schemas in src/core/ops/opset18.cpp):
// Gelu, GroupNormalization, Col2Im, CenterCropPad, AffineGrid and DeformConv. They follow the
// ONNX reference implementations (onnx/reference/ops) and compute in double.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/dispatch.h"
#include "backends/cpu/kernel.h"
#include "core/ops/op_helpers.h"

namespace tensord::cpu {
namespace {

std::vector<double> doubles_of(const TensorView& v) {
  std::vector<double> out(static_cast<size_t>(v.numel()));
  (void)dispatch_numeric(v.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(v.as<T>()[i]);
    return OkStatus();
  });
  return out;
}

Status store(const MutableTensorView& dst, const std::vector<double>& values) {
  return dispatch_numeric(dst.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < values.size(); ++i) {
      if constexpr (std::is_floating_point_v<T>)
        dst.as<T>()[i] = static_cast<T>(values[i]);
      else
        dst.as<T>()[i] =
            std::isfinite(values[i]) ? static_cast<T>(static_cast<int64_t>(values[i])) : T(0);
    }
    return OkStatus();
  });
}

std::vector<int64_t> ints_of(const TensorView& v) {
  std::vector<int64_t> out(static_cast<size_t>(v.numel()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = v.dtype == DType::kInt32 ? v.as<int32_t>()[i] : v.as<int64_t>()[i];
  return out;
}

// ---- Gelu ----

Status gelu_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(std::string approx, ctx.attr_string("approximate", "none"));
  if (approx != "none" && approx != "tanh")
    return ctx.error("approximate must be 'none' or 'tanh', got '{}'", approx);
  std::vector<double> v = doubles_of(ctx.input(0));
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  for (double& x : v) {
    x = approx == "tanh" ? 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)))
                         : 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  }
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  return store(y, v);
}

// ---- GroupNormalization ----

Status group_norm_kernel(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  TD_ASSIGN_OR_RETURN(int64_t groups, ctx.attr_int("num_groups", 0));
  TD_ASSIGN_OR_RETURN(int64_t per_group, ctx.attr_int("per_group_affine", 0));
  TD_ASSIGN_OR_RETURN(float eps, ctx.attr_float("epsilon", 1e-5f));
  if (x.shape.size() < 2) return ctx.error("X must be [N, C, ...], got {}", shape_to_string(x.shape));
  const int64_t n = x.shape[0], c = x.shape[1];
  if (groups < 1 || c % groups != 0)
    return ctx.error("num_groups {} must divide the {} channels", groups, c);
  const int64_t spatial = c == 0 || n == 0 ? 0 : x.numel() / (n * c);
  const std::vector<double> in = doubles_of(x), scale = doubles_of(ctx.input(1)),
                            bias = doubles_of(ctx.input(2));
  const int64_t want = per_group ? groups : c;
  if (static_cast<int64_t>(scale.size()) != want || static_cast<int64_t>(bias.size()) != want)
    return ctx.error("scale and bias must have {} values, got {} and {}", want, scale.size(),
                     bias.size());
  const int64_t cg = c / groups, size = cg * spatial;
  std::vector<double> out(in.size());
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t g = 0; g < groups; ++g) {
      const size_t base = static_cast<size_t>((b * c + g * cg) * spatial);
      double mean = 0, var = 0;
      for (int64_t i = 0; i < size; ++i) mean += in[base + static_cast<size_t>(i)];
      mean /= static_cast<double>(std::max<int64_t>(size, 1));
      for (int64_t i = 0; i < size; ++i) {
        const double d = in[base + static_cast<size_t>(i)] - mean;
        var += d * d;
      }
      var /= static_cast<double>(std::max<int64_t>(size, 1));
      const double inv = 1.0 / std::sqrt(var + static_cast<double>(eps));
      for (int64_t ch = 0; ch < cg; ++ch) {
        const size_t p = static_cast<size_t>(per_group ? g : g * cg + ch);
        for (int64_t i = 0; i < spatial; ++i) {
          const size_t at = base + static_cast<size_t>(ch * spatial + i);
          out[at] = (in[at] - mean) * inv * scale[p] + bias[p];
        }
      }
    }
  }
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  return store(y, out);
}

// ---- Col2Im ----

Status col2im_kernel(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  const std::vector<int64_t> image = ints_of(ctx.input(1)), block = ints_of(ctx.input(2));
  std::vector<int64_t> strides, dilations, pads;
  TD_ASSIGN_OR_RETURN(auto blocks, nn::col2im_blocks(ctx, image, block, &strides, &dilations, &pads));
  const size_t nd = image.size();
  int64_t block_size = 1, l = 1, image_size = 1;
  for (size_t i = 0; i < nd; ++i) {
    block_size *= block[i];
    l *= blocks[i];
    image_size *= image[i];
  }
  if (x.shape.size() != 3 || x.shape[1] % block_size != 0 || x.shape[2] != l)
    return ctx.error("input {} does not match block_shape {} and image_shape {} ({} blocks)",
                     shape_to_string(x.shape), block, image, l);
  const int64_t n = x.shape[0], c = x.shape[1] / block_size;
  const std::vector<double> in = doubles_of(x);
  std::vector<double> out(static_cast<size_t>(n * c * image_size), 0.0);
  std::vector<int64_t> k(nd), pos(nd);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t ch = 0; ch < c; ++ch) {
      std::fill(k.begin(), k.end(), 0);
      for (int64_t kb = 0; kb < block_size; ++kb) {
        const size_t row = static_cast<size_t>(((b * c + ch) * block_size + kb) * l);
        std::fill(pos.begin(), pos.end(), 0);
        for (int64_t p = 0; p < l; ++p) {
          int64_t at = 0;
          bool inside = true;
          for (size_t d = 0; d < nd && inside; ++d) {
            const int64_t coord = pos[d] * strides[d] - pads[d] + k[d] * dilations[d];
            inside = coord >= 0 && coord < image[d];
            at = at * image[d] + coord;
          }
          if (inside)
            out[static_cast<size_t>((b * c + ch) * image_size + at)] += in[row + static_cast<size_t>(p)];
          for (size_t d = nd; d-- > 0;) {
            if (++pos[d] < blocks[d]) break;
            pos[d] = 0;
          }
        }
        for (size_t d = nd; d-- > 0;) {
          if (++k[d] < block[d]) break;
          k[d] = 0;
        }
      }
    }
  }
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  return store(y, out);
}

// ---- CenterCropPad ----

Status center_crop_pad_kernel(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  const size_t rank = x.shape.size();
  if (y.shape.size() != rank) return ctx.error("output rank differs from the input's");
  // Per axis: output coordinate o reads input o + shift (crop: shift > 0; pad: shift < 0).
  std::vector<int64_t> shift(rank, 0);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t i = x.shape[d], o = y.shape[d];
    shift[d] = o <= i ? (i - o) / 2 : -((o - i) / 2);
  }
  std::vector<int64_t> in_strides(rank, 1);
  for (size_t d = rank; d-- > 1;) in_strides[d - 1] = in_strides[d] * x.shape[d];
  return dispatch_by_size(x.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* src = x.as<T>();
    T* dst = y.as<T>();
    std::vector<int64_t> coord(rank, 0);
    for (int64_t f = 0; f < y.numel(); ++f) {
      int64_t s = 0;
      bool inside = true;
      for (size_t d = 0; d < rank && inside; ++d) {
        const int64_t k = coord[d] + shift[d];
        inside = k >= 0 && k < x.shape[d];
        s += k * in_strides[d];
      }
      dst[f] = inside ? src[s] : T{};
      for (size_t d = rank; d-- > 0;) {
        if (++coord[d] < y.shape[d]) break;
        coord[d] = 0;
      }
    }
    return OkStatus();
  });
}

// ---- AffineGrid ----

Status affine_grid_kernel(KernelContext& ctx) {
  const TensorView& theta = ctx.input(0);
  const std::vector<int64_t> size = ints_of(ctx.input(1));
  TD_ASSIGN_OR_RETURN(int64_t align, ctx.attr_int("align_corners", 0));
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  const bool three = size.size() == 5;
  const int64_t dims = three ? 3 : 2;
  if (size.size() != 4 && size.size() != 5)
    return ctx.error("size must have 4 or 5 values, got {}", size);
  if (theta.shape.size() != 3 || theta.shape[0] != size[0] || theta.shape[1] != dims ||
      theta.shape[2] != dims + 1)
    return ctx.error("theta {} does not match size {}", shape_to_string(theta.shape), size);
  const std::vector<double> t = doubles_of(theta);
  // Spatial sizes, outermost first (D,) H, W; the grid's last dim lists x (W), y (H) (, z (D)).
  const std::vector<int64_t> sp(size.begin() + 2, size.end());
  auto base = [&](int64_t i, int64_t n) -> double {
    if (align) return n <= 1 ? -1.0 : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(n - 1);
    return -1.0 + (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(n);
  };
  const int64_t points = y.numel() / std::max<int64_t>(dims, 1) / std::max<int64_t>(size[0], 1);
  std::vector<double> out(static_cast<size_t>(y.numel()));
  std::vector<int64_t> coord(sp.size(), 0);
  for (int64_t b = 0; b < size[0]; ++b) {
    const double* m = t.data() + b * dims * (dims + 1);
    std::fill(coord.begin(), coord.end(), 0);
    for (int64_t p = 0; p < points; ++p) {
      double h[4];  // x, y, (z,) 1
      for (int64_t j = 0; j < dims; ++j) {
        const size_t axis = sp.size() - 1 - static_cast<size_t>(j);
        h[j] = base(coord[axis], sp[axis]);
      }
      h[dims] = 1.0;
      for (int64_t r = 0; r < dims; ++r) {
        double acc = 0;
        for (int64_t k = 0; k <= dims; ++k) acc += m[r * (dims + 1) + k] * h[k];
        out[static_cast<size_t>((b * points + p) * dims + r)] = acc;
      }
      for (size_t d = sp.size(); d-- > 0;) {
        if (++coord[d] < sp[d]) break;
        coord[d] = 0;
      }
    }
  }
  return store(y, out);
}

// ---- DeformConv (2-D) ----

// X[c] at (h, w) bilinearly, zero outside (GridSample's zeros padding with align_corners, as
// the ONNX reference samples it).
double bilinear(const double* plane, int64_t ih, int64_t iw, double h, double w) {
  // NaN offsets sample nothing (and never reach the integer casts below).
  if (!(h > -1 && h < static_cast<double>(ih) && w > -1 && w < static_cast<double>(iw))) return 0;
  const double h0 = std::floor(h), w0 = std::floor(w);
  const double lh = h - h0, lw = w - w0;
  const int64_t y0 = static_cast<int64_t>(h0), x0 = static_cast<int64_t>(w0);
  auto at = [&](int64_t y, int64_t x) -> double {
    return y >= 0 && y < ih && x >= 0 && x < iw ? plane[y * iw + x] : 0.0;
  };
  return (1 - lh) * (1 - lw) * at(y0, x0) + (1 - lh) * lw * at(y0, x0 + 1) +
         lh * (1 - lw) * at(y0 + 1, x0) + lh * lw * at(y0 + 1, x0 + 1);
}

Status deform_conv_kernel(KernelContext& ctx) {
  const TensorView& xv = ctx.input(0);
  const TensorView& wv = ctx.input(1);
  const TensorView& ov = ctx.input(2);
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  TD_ASSIGN_OR_RETURN(int64_t group, ctx.attr_int("group", 1));
  TD_ASSIGN_OR_RETURN(int64_t offset_group, ctx.attr_int("offset_group", 1));
  TD_ASSIGN_OR_RETURN(auto strides, ctx.attr_ints("strides", {1, 1}));
  TD_ASSIGN_OR_RETURN(auto dil, ctx.attr_ints("dilations", {1, 1}));
  TD_ASSIGN_OR_RETURN(auto pads, ctx.attr_ints("pads", {0, 0, 0, 0}));
  if (strides.size() != 2 || dil.size() != 2 || pads.size() != 4)
    return ctx.error("strides {}, dilations {} and pads {} must have 2, 2 and 4 values", strides,
                     dil, pads);
  const int64_t n = xv.shape[0], ic = xv.shape[1], ih = xv.shape[2], iw = xv.shape[3];
  const int64_t oc = wv.shape[0], icg = wv.shape[1], kh = wv.shape[2], kw = wv.shape[3];
  const int64_t oh = y.shape[2], ow = y.shape[3];
  if (group < 1 || offset_group < 1 || icg * group != ic || oc % group != 0 ||
      ic % offset_group != 0 || ov.shape.size() != 4 || ov.shape[0] != n ||
      ov.shape[1] != offset_group * 2 * kh * kw || ov.shape[2] != oh || ov.shape[3] != ow ||
      y.shape[0] != n || y.shape[1] != oc)
    return ctx.error("X {}, W {} and offset {} do not agree with group {} and offset_group {}",
                     shape_to_string(xv.shape), shape_to_string(wv.shape),
                     shape_to_string(ov.shape), group, offset_group);
  const std::vector<double> x = doubles_of(xv), w = doubles_of(wv), off = doubles_of(ov);
  std::vector<double> bias, mask;
  if (ctx.has_input(3)) bias = doubles_of(ctx.input(3));
  if (ctx.has_input(4)) mask = doubles_of(ctx.input(4));
  if (!bias.empty() && static_cast<int64_t>(bias.size()) != oc)
    return ctx.error("B has {} values for {} output channels", bias.size(), oc);
  if (ctx.has_input(4) && (ctx.input(4).shape.size() != 4 ||
                           ctx.input(4).numel() != n * offset_group * kh * kw * oh * ow))
    return ctx.error("mask {} must be [{}, {}, {}, {}]", shape_to_string(ctx.input(4).shape), n,
                     offset_group * kh * kw, oh, ow);
  const int64_t ocg = oc / group, icog = ic / offset_group, kk = kh * kw, plane = oh * ow;
  std::vector<double> out(static_cast<size_t>(n * oc * plane), 0.0);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t o = 0; o < oc; ++o) {
      const int64_t g = o / ocg;
      double* dst = out.data() + (b * oc + o) * plane;
      for (int64_t cl = 0; cl < icg; ++cl) {
        const int64_t c = g * icg + cl;
        const int64_t og = c / icog;
        const double* src = x.data() + (b * ic + c) * ih * iw;
        for (int64_t i = 0; i < kh; ++i) {
          for (int64_t j = 0; j < kw; ++j) {
            const double wt = w[static_cast<size_t>(((o * icg + cl) * kh + i) * kw + j)];
            const int64_t tap = i * kw + j;
            const double* dy = off.data() + ((b * offset_group + og) * 2 * kk + 2 * tap) * plane;
            const double* dx = dy + plane;
            const double* mk =
                mask.empty() ? nullptr : mask.data() + ((b * offset_group + og) * kk + tap) * plane;
            for (int64_t p = 0; p < oh; ++p) {
              for (int64_t q = 0; q < ow; ++q) {
                const int64_t at = p * ow + q;
                const double h = static_cast<double>(p * strides[0] - pads[0] + i * dil[0]) + dy[at];
                const double ww = static_cast<double>(q * strides[1] - pads[1] + j * dil[1]) + dx[at];
                double v = bilinear(src, ih, iw, h, ww);
                if (mk) v *= mk[at];
                dst[at] += wt * v;
              }
            }
          }
        }
      }
      if (!bias.empty())
        for (int64_t at = 0; at < plane; ++at) dst[at] += bias[static_cast<size_t>(o)];
    }
  }
  return store(y, out);
}

}  // namespace

void register_reference_opset18_kernels(KernelRegistry& r) {
  auto add = [&r](const char* op, KernelFn fn) {
    r.add(KernelDef{op, "reference", nullptr, std::move(fn)});
  };
  add("Gelu", gelu_kernel);
  add("GroupNormalization", group_norm_kernel);
  add("Col2Im", col2im_kernel);
  add("CenterCropPad", center_crop_pad_kernel);
  add("AffineGrid", affine_grid_kernel);
  add("DeformConv", deform_conv_kernel);
}

}  // namespace tensord::cpu
