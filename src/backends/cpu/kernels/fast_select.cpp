// Fast kernels for what gradients are made of (tensord::gradients, td.grad): comparisons and
// Where (Relu's and Max's rules: Where(Greater(x, 0), dy, 0)) when each operand is the whole
// output shape or one value, Sum of same-shape float32 tensors (gradients of a value read
// twice), Gelu (float32; vec_math.h's erf and tanh), and 2-D MaxPool with its Indices output
// (MaxPool's rule scatters dy to them), which oneDNN's pooling does not give. Rows run across the compute threads when
// there are enough values. Everything else (other dtypes, general broadcasting, dilations,
// storage_order 1, 1-D and 3-D pooling) goes to the reference kernels (`accepts` says why).
// The reference kernels took 0.3 ms for a Where over 262,144 values: a quarter of a small CNN's
// training step (bench/train.py).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"
#include "backends/cpu/thread_pool.h"
#include "backends/cpu/vec_math.h"
#include "core/node_attrs.h"
#include "core/ops/op_helpers.h"

namespace tensord::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 15;  // values below which threads cost more than they save

Status refuse(const std::string& why) { return Status(StatusCode::kUnimplemented, why); }

bool whole_or_one(const TensorType& t, const Shape& out) {
  if (!shape_is_static(t.shape)) return false;
  return shape_numel(t.shape) == 1 || t.shape == out;
}

// The output shape of an element-wise op when every operand is the whole shape or one value
// (then the largest operand's shape), else nothing.
bool common_shape(const std::vector<TensorType>& in, Shape* out) {
  const TensorType* big = nullptr;
  for (const TensorType& t : in) {
    if (!shape_is_static(t.shape)) return false;
    if (!big || shape_numel(t.shape) > shape_numel(big->shape) ||
        (shape_numel(t.shape) == shape_numel(big->shape) && t.shape.size() > big->shape.size()))
      big = &t;
  }
  if (!big) return false;
  *out = big->shape;
  for (const TensorType& t : in)
    if (!whole_or_one(t, *out)) return false;
  return true;
}

template <typename F>
void for_range(int64_t n, F body) {
  if (n >= kParallelMin && threads_available() > 1) {
    ThreadPool::get().parallel_for(n, 4096, [&](int64_t b, int64_t e) { body(b, e); });
  } else {
    body(0, n);
  }
}

// ---- comparisons over float32
enum class Cmp { kGreater, kLess, kGreaterOrEqual, kLessOrEqual, kEqual };

Status compare_accepts(const Node& node, const std::vector<TensorType>& in) {
  Shape out;
  if (in.size() != 2 || in[0].dtype != DType::kFloat32 || in[1].dtype != DType::kFloat32)
    return refuse(node.op + ": fast kernel is float32 only");
  if (!common_shape(in, &out))
    return refuse(node.op + ": fast kernel takes operands of the output's shape or one value");
  return OkStatus();
}

template <Cmp C>
bool cmp(float a, float b) {
  if constexpr (C == Cmp::kGreater) return a > b;
  if constexpr (C == Cmp::kLess) return a < b;
  if constexpr (C == Cmp::kGreaterOrEqual) return a >= b;
  if constexpr (C == Cmp::kLessOrEqual) return a <= b;
  return a == b;
}

template <Cmp C>
Status compare_run(KernelContext& ctx) {
  const TensorView& a = ctx.input(0);
  const TensorView& b = ctx.input(1);
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const int64_t n = out.numel();
  const float* x = a.as<float>();
  const float* y = b.as<float>();
  bool* z = static_cast<bool*>(out.data);
  const bool xs = a.numel() == 1 && n != 1, ys = b.numel() == 1 && n != 1;
  for_range(n, [&](int64_t lo, int64_t hi) {
    if (!xs && !ys) {
      for (int64_t i = lo; i < hi; ++i) z[i] = cmp<C>(x[i], y[i]);
    } else if (ys) {
      const float v = y[0];
      for (int64_t i = lo; i < hi; ++i) z[i] = cmp<C>(xs ? x[0] : x[i], v);
    } else {
      const float v = x[0];
      for (int64_t i = lo; i < hi; ++i) z[i] = cmp<C>(v, y[i]);
    }
  });
  return OkStatus();
}

// ---- Where over 4- and 8-byte values
Status where_accepts(const Node& node, const std::vector<TensorType>& in) {
  Shape out;
  if (in.size() != 3 || in[0].dtype != DType::kBool || in[1].dtype != in[2].dtype)
    return refuse(node.op + ": fast kernel takes a bool condition and two values of one dtype");
  const size_t size = dtype_size(in[1].dtype);
  if (size != 4 && size != 8) return refuse(node.op + ": fast kernel takes 4- and 8-byte values");
  if (!common_shape(in, &out))
    return refuse(node.op + ": fast kernel takes operands of the output's shape or one value");
  return OkStatus();
}

template <typename T>
void where_typed(const bool* c, bool cs, const T* x, bool xs, const T* y, bool ys, T* z,
                 int64_t lo, int64_t hi) {
  if (!cs && !xs && !ys) {
    for (int64_t i = lo; i < hi; ++i) z[i] = c[i] ? x[i] : y[i];
    return;
  }
  if (!cs && !xs && ys) {
    const T v = y[0];
    for (int64_t i = lo; i < hi; ++i) z[i] = c[i] ? x[i] : v;
    return;
  }
  for (int64_t i = lo; i < hi; ++i) z[i] = c[cs ? 0 : i] ? x[xs ? 0 : i] : y[ys ? 0 : i];
}

Status where_run(KernelContext& ctx) {
  const TensorView& c = ctx.input(0);
  const TensorView& x = ctx.input(1);
  const TensorView& y = ctx.input(2);
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const int64_t n = out.numel();
  const bool cs = c.numel() == 1 && n != 1, xs = x.numel() == 1 && n != 1,
             ys = y.numel() == 1 && n != 1;
  const bool* cp = static_cast<const bool*>(c.data);
  for_range(n, [&](int64_t lo, int64_t hi) {
    if (dtype_size(x.dtype) == 4)
      where_typed(cp, cs, static_cast<const uint32_t*>(x.data), xs,
                  static_cast<const uint32_t*>(y.data), ys, static_cast<uint32_t*>(out.data), lo,
                  hi);
    else
      where_typed(cp, cs, static_cast<const uint64_t*>(x.data), xs,
                  static_cast<const uint64_t*>(y.data), ys, static_cast<uint64_t*>(out.data), lo,
                  hi);
  });
  return OkStatus();
}

// ---- Sum of same-shape float32 tensors
Status sum_accepts(const Node& node, const std::vector<TensorType>& in) {
  if (in.empty()) return refuse(node.op + ": no inputs");
  for (const TensorType& t : in)
    if (t.dtype != DType::kFloat32 || !shape_is_static(t.shape) || t.shape != in[0].shape)
      return refuse(node.op + ": fast kernel takes float32 inputs of one shape");
  return OkStatus();
}

Status sum_run(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const int64_t n = out.numel();
  std::vector<const float*> xs;
  for (int i = 0; i < ctx.num_inputs(); ++i) xs.push_back(ctx.input(i).as<float>());
  float* y = out.as<float>();
  for_range(n, [&](int64_t lo, int64_t hi) {
    const float* a = xs[0];
    if (xs.size() == 1) {
      std::memcpy(y + lo, a + lo, static_cast<size_t>(hi - lo) * sizeof(float));
      return;
    }
    const float* b = xs[1];
    for (int64_t i = lo; i < hi; ++i) y[i] = a[i] + b[i];
    for (size_t k = 2; k < xs.size(); ++k) {
      const float* c = xs[k];
      for (int64_t i = lo; i < hi; ++i) y[i] += c[i];
    }
  });
  return OkStatus();
}

// ---- Gelu over float32
Status gelu_accepts(const Node& node, const std::vector<TensorType>& in) {
  if (in.empty() || in[0].dtype != DType::kFloat32)
    return refuse(node.op + ": fast kernel is float32 only");
  NodeAttrs a(node);
  TD_ASSIGN_OR_RETURN(std::string approx, a.attr_string("approximate", "none"));
  if (approx != "none" && approx != "tanh")
    return refuse(node.op + ": approximate must be 'none' or 'tanh'");
  return OkStatus();
}

Status gelu_run(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(std::string approx, ctx.attr_string("approximate", "none"));
  const float* x = ctx.input(0).as<float>();
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  float* y = out.as<float>();
  const bool tanh_form = approx == "tanh";
  for_range(out.numel(), [&](int64_t lo, int64_t hi) {
    if (tanh_form) {
      const float k = 0.7978845608028654f;  // sqrt(2 / pi)
      for (int64_t i = lo; i < hi; ++i) {
        const float v = x[i];
        y[i] = 0.5f * v * (1.0f + vec::tanh(k * (v + 0.044715f * v * v * v)));
      }
    } else {
      for (int64_t i = lo; i < hi; ++i) {
        const float v = x[i];
        y[i] = 0.5f * v * (1.0f + vec::erf(v * 0.7071067811865476f));
      }
    }
  });
  return OkStatus();
}

// ---- 2-D MaxPool with Indices
Status maxpool_indices_accepts(const Node& node, const std::vector<TensorType>& in) {
  if (node.outputs.size() < 2 || node.outputs[1].empty())
    return refuse("MaxPool: the fast kernel is for the Indices output (oneDNN's is faster)");
  if (in.empty() || in[0].dtype != DType::kFloat32 || in[0].shape.size() != 4 ||
      !shape_is_static(in[0].shape))
    return refuse("MaxPool: fast Indices kernel is 2-D float32 (NCHW)");
  NodeAttrs a(node);
  TD_ASSIGN_OR_RETURN(int64_t storage_order, a.attr_int("storage_order", 0));
  if (storage_order != 0) return refuse("MaxPool: fast Indices kernel is storage_order 0");
  auto dil = a.attr_ints("dilations");
  if (dil.ok())
    for (int64_t d : *dil)
      if (d != 1) return refuse("MaxPool: fast Indices kernel has no dilations");
  return OkStatus();
}

Status maxpool_indices_run(KernelContext& ctx) {
  const TensorView& xv = ctx.input(0);
  TD_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, ctx.attr_ints("kernel_shape"));
  const Shape in_spatial(xv.shape.begin() + 2, xv.shape.end());
  std::vector<int64_t> strides, dilations, pads;
  Shape out_spatial;
  TD_RETURN_IF_ERROR(nn::window_geometry(ctx, in_spatial, kernel, true, &strides, &dilations,
                                         &pads, &out_spatial));
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  int64_t* idx = nullptr;
  if (ctx.wants_output(1)) {
    TD_ASSIGN_OR_RETURN(MutableTensorView iv, ctx.output(1));
    idx = iv.as<int64_t>();
  }
  const int64_t planes = xv.shape[0] * xv.shape[1];
  const int64_t ih = in_spatial[0], iw = in_spatial[1];
  const int64_t oh = out_spatial[0], ow = out_spatial[1];
  const int64_t kh = kernel[0], kw = kernel[1], sh = strides[0], sw = strides[1];
  const int64_t ph = pads[0], pw = pads[1];
  const float* x = xv.as<float>();
  float* y = out.as<float>();
  // Every window inside the plane (no padding reached): no clamping, the taps in a fixed
  // loop (2x2 unrolled: the pool of most CNNs).
  const bool inside = ph == 0 && pw == 0 && (oh - 1) * sh + kh <= ih && (ow - 1) * sw + kw <= iw;
  auto inside_run = [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const float* xp = x + p * ih * iw;
      float* yp = y + p * oh * ow;
      int64_t* ip = idx ? idx + p * oh * ow : nullptr;
      const int64_t plane = p * ih * iw;
      for (int64_t r = 0; r < oh; ++r)
        for (int64_t c = 0; c < ow; ++c) {
          int64_t at = r * sh * iw + c * sw;
          float best = xp[at];
          if (kh == 2 && kw == 2) {
            const int64_t t1 = at + 1, t2 = at + iw, t3 = at + iw + 1;
            // Row-major order, the first maximum wins; a NaN never does (as `v > best`).
            const float v1 = xp[t1], v2 = xp[t2], v3 = xp[t3];
            const bool m1 = v1 > best;
            best = m1 ? v1 : best;
            at = m1 ? t1 : at;
            const bool m2 = v2 > best;
            best = m2 ? v2 : best;
            at = m2 ? t2 : at;
            const bool m3 = v3 > best;
            best = m3 ? v3 : best;
            at = m3 ? t3 : at;
          } else {
            const int64_t first = at;
            for (int64_t h = 0; h < kh; ++h)
              for (int64_t w = (h == 0 ? 1 : 0); w < kw; ++w) {
                const int64_t t = first + h * iw + w;
                const float v = xp[t];
                const bool more = v > best;
                best = more ? v : best;
                at = more ? t : at;
              }
          }
          yp[r * ow + c] = best;
          if (ip) ip[r * ow + c] = plane + at;
        }
    }
  };
  auto planes_run = [&](int64_t lo, int64_t hi) {
    if (inside) return inside_run(lo, hi);
    for (int64_t p = lo; p < hi; ++p) {
      const float* xp = x + p * ih * iw;
      for (int64_t r = 0; r < oh; ++r) {
        const int64_t h0 = r * sh - ph;
        const int64_t hlo = std::max<int64_t>(h0, 0), hhi = std::min<int64_t>(h0 + kh, ih);
        for (int64_t c = 0; c < ow; ++c) {
          const int64_t w0 = c * sw - pw;
          const int64_t wlo = std::max<int64_t>(w0, 0), whi = std::min<int64_t>(w0 + kw, iw);
          // Row-major over the in-bounds taps: the first maximum wins, as the reference's.
          // Branch-free after the first tap (which maximum wins is data-dependent: a branch
          // mispredicts about every other tap); a NaN tap never wins, as `v > best` there.
          const int64_t f = (p * oh + r) * ow + c;
          if (hlo >= hhi || wlo >= whi) {
            y[f] = 0;
            if (idx) idx[f] = -1;
            continue;
          }
          int64_t at = hlo * iw + wlo;
          float best = xp[at];
          for (int64_t h = hlo; h < hhi; ++h)
            for (int64_t w = (h == hlo ? wlo + 1 : wlo); w < whi; ++w) {
              const float v = xp[h * iw + w];
              const bool more = v > best;
              best = more ? v : best;
              at = more ? h * iw + w : at;
            }
          y[f] = best;
          if (idx) idx[f] = p * ih * iw + at;
        }
      }
    }
  };
  // Chunks of at least ~4k taps: a plane of a small pool (8x8 -> 4x4, 64 taps) is far less
  // than a chunk's claiming costs.
  if (planes > 1 && out.numel() * kh * kw >= kParallelMin && threads_available() > 1)
    ThreadPool::get().parallel_for(planes, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, oh * ow * kh * kw)),
                                   planes_run);
  else
    planes_run(0, planes);
  return OkStatus();
}

}  // namespace

void register_fast_select_kernels(KernelRegistry& r) {
  r.add(KernelDef{"Greater", "fast", compare_accepts, compare_run<Cmp::kGreater>});
  r.add(KernelDef{"Less", "fast", compare_accepts, compare_run<Cmp::kLess>});
  r.add(KernelDef{"GreaterOrEqual", "fast", compare_accepts, compare_run<Cmp::kGreaterOrEqual>});
  r.add(KernelDef{"LessOrEqual", "fast", compare_accepts, compare_run<Cmp::kLessOrEqual>});
  r.add(KernelDef{"Equal", "fast", compare_accepts, compare_run<Cmp::kEqual>});
  r.add(KernelDef{"Where", "fast", where_accepts, where_run, /*native_low_precision=*/true});
  r.add(KernelDef{"MaxPool", "fast", maxpool_indices_accepts, maxpool_indices_run});
  r.add(KernelDef{"Sum", "fast", sum_accepts, sum_run});
  r.add(KernelDef{"Gelu", "fast", gelu_accepts, gelu_run});
}

}  // namespace tensord::cpu
