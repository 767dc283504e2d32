// Fast float32 LayerNormalization and Softmax/LogSoftmax over a contiguous last axis: the
// normalisations of every transformer, MLP-Mixer and ConvNeXt block. Row sums are taken in
// double over eight interleaved partial sums (vectorised, and no less accurate than the
// reference's sequential double sum), exp is vec_math.h's; rows run across the compute
// threads when there are enough of them. What they do not cover (other dtypes, a Softmax axis
// with trailing dims, LayerNormalization's Mean/InvStdDev outputs, scales that do not cover
// the normalised shape) goes to the reference kernels (`accepts` says why).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"
#include "backends/cpu/onednn_common.h"
#include "backends/cpu/vec_math.h"
#include "core/node_attrs.h"
#include "backends/cpu/thread_pool.h"

namespace tensord::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 15;  // values below which threads cost more than they save

Status refuse(const std::string& why) { return Status(StatusCode::kUnimplemented, why); }

// The axis in [0, rank) or an error.
Result<int64_t> resolve_axis(const NodeAttrs& a, int64_t rank) {
  TD_ASSIGN_OR_RETURN(int64_t axis, a.attr_int("axis", -1));
  if (axis < -rank || axis >= rank) return refuse("axis out of range");
  return axis < 0 ? axis + rank : axis;
}

bool all_static(const Shape& s) {
  for (int64_t d : s)
    if (d < 0) return false;
  return true;
}

int64_t numel_of(const Shape& s, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t n = 1;
  for (size_t i = from; i < s.size() && i < to; ++i) n *= s[i];
  return n;
}

// Whether `p` (leading 1s dropped) is exactly `tail`: a per-element parameter of the
// normalised shape.
bool covers_tail(const Shape& p, const Shape& x, size_t axis) {
  size_t first = 0;
  while (first < p.size() && p[first] == 1 && p.size() - first > x.size() - axis) ++first;
  if (p.size() - first != x.size() - axis) return false;
  for (size_t i = 0; i < x.size() - axis; ++i)
    if (p[first + i] != x[axis + i]) return false;
  return true;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void sum_and_sq(
    const float* __restrict x, int64_t n, double* sum_out, double* sq_out) {
  double s[8] = {}, q[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      const double v = x[i + k];
      s[k] += v;
      q[k] += v * v;
    }
  double sum = 0, sq = 0;
  for (int k = 0; k < 8; ++k) {
    sum += s[k];
    sq += q[k];
  }
  for (; i < n; ++i) {
    sum += x[i];
    sq += static_cast<double>(x[i]) * x[i];
  }
  *sum_out = sum;
  *sq_out = sq;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) double centred_sq(
    const float* __restrict x, int64_t n, double mean) {
  double q[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      const double d = x[i + k] - mean;
      q[k] += d * d;
    }
  double sq = 0;
  for (int k = 0; k < 8; ++k) sq += q[k];
  for (; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
  return sq;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void scale_shift(
    const float* __restrict x, int64_t n, float mean_hi, float mean_lo, float inv,
    const float* __restrict scale, const float* __restrict bias, float* __restrict y) {
  // x - mean as (x - mean_hi) - mean_lo: the first difference is exact where x is near the
  // mean, so a large mean (|mean| >> std) keeps the digits the double mean has.
  if (bias) {
    for (int64_t i = 0; i < n; ++i) y[i] = ((x[i] - mean_hi) - mean_lo) * inv * scale[i] + bias[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = ((x[i] - mean_hi) - mean_lo) * inv * scale[i];
  }
}

Status layer_norm_accepts(const Node& node, const std::vector<TensorType>& in) {
  if (in.size() < 2) return refuse("LayerNormalization: needs X and Scale");
  for (const TensorType& t : in)
    if (t.defined() && t.dtype != DType::kFloat32)
      return refuse("LayerNormalization: the fast kernel is float32 only");
  for (size_t i = 1; i < node.outputs.size(); ++i)
    if (!node.outputs[i].empty())
      return refuse("LayerNormalization: the fast kernel has no Mean/InvStdDev outputs");
  const Shape& x = in[0].shape;
  if (!all_static(x) || !all_static(in[1].shape) || (in.size() > 2 && in[2].defined() && !all_static(in[2].shape)))
    return refuse("LayerNormalization: the fast kernel needs static shapes");
  NodeAttrs a(node);
  TD_ASSIGN_OR_RETURN(int64_t axis, resolve_axis(a, static_cast<int64_t>(x.size())));
  if (!covers_tail(in[1].shape, x, static_cast<size_t>(axis)) ||
      (in.size() > 2 && in[2].defined() && !covers_tail(in[2].shape, x, static_cast<size_t>(axis))))
    return refuse("LayerNormalization: the fast kernel needs Scale and B of the normalised shape");
  return OkStatus();
}

Status layer_norm_run(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(float epsilon, ctx.attr_float("epsilon", 1e-5f));
  const TensorView& xv = ctx.input(0);
  TD_ASSIGN_OR_RETURN(int64_t axis, resolve_axis(ctx, static_cast<int64_t>(xv.shape.size())));
  const int64_t outer = numel_of(xv.shape, 0, static_cast<size_t>(axis));
  const int64_t inner = numel_of(xv.shape, static_cast<size_t>(axis));
  const float* x = xv.as<float>();
  const float* scale = ctx.input(1).as<float>();
  const float* bias = ctx.has_input(2) ? ctx.input(2).as<float>() : nullptr;
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  float* y = out.as<float>();
  if (inner == 0) return OkStatus();
  auto row = [&](int64_t r) {
    const float* xr = x + r * inner;
    double sum, sq;
    sum_and_sq(xr, inner, &sum, &sq);
    const double mean = sum / static_cast<double>(inner);
    // The centred second pass: E[x^2] - mean^2 loses digits when |mean| >> std.
    const double var = centred_sq(xr, inner, mean) / static_cast<double>(inner);
    const double inv = 1.0 / std::sqrt(var + static_cast<double>(epsilon));
    const float mean_hi = static_cast<float>(mean);
    scale_shift(xr, inner, mean_hi, static_cast<float>(mean - mean_hi), static_cast<float>(inv),
                scale, bias, y + r * inner);
  };
  if (outer > 1 && outer * inner >= kParallelMin && threads_available() > 1) {
    ThreadPool::get().parallel_for(outer, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) row(r);
    });
  } else {
    for (int64_t r = 0; r < outer; ++r) row(r);
  }
  return OkStatus();
}

// ---- Softmax, LogSoftmax over an axis with nothing (or only 1s) after it ----

Status softmax_accepts(const Node& node, const std::vector<TensorType>& in) {
  if (in.empty() || in[0].dtype != DType::kFloat32)
    return refuse(node.op + ": the fast kernel is float32 only");
  const Shape& x = in[0].shape;
  if (x.empty() || !all_static(x)) return refuse(node.op + ": the fast kernel needs a static shape");
  NodeAttrs a(node);
  TD_ASSIGN_OR_RETURN(int64_t axis, resolve_axis(a, static_cast<int64_t>(x.size())));
  if (numel_of(x, static_cast<size_t>(axis) + 1) != 1)
    return refuse(node.op + ": the fast kernel takes the last axis only");
  return OkStatus();
}

// Written as simple loops over independent lanes so the compiler vectorises each pass (the
// exp pass in one loop with a double accumulator ran scalar: 1.6 ms for a ViT attention's
// 3 x 197 x 197 Softmax). The row max over 16 lanes; exp into y; the sum of y over 16 double
// lanes (the double reference's accuracy); then the scale. NaN
// anywhere makes the sum NaN (vec::exp is NaN in, NaN out), and so every output NaN, as the
// reference's.
__attribute__((target_clones("avx512f", "avx2", "default"))) void softmax_row(
    const float* __restrict x, int64_t n, bool log, float* __restrict y) {
  constexpr int64_t L = 16;
  float m[L];
  for (int64_t k = 0; k < L; ++k) m[k] = x[0];
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int64_t k = 0; k < L; ++k) m[k] = x[i + k] > m[k] ? x[i + k] : m[k];
  float mx = x[0];
  for (int64_t k = 0; k < L; ++k) mx = m[k] > mx ? m[k] : mx;
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  if (mx != mx) {  // x[0] is NaN: every exp below would be NaN anyway
    for (int64_t j = 0; j < n; ++j) y[j] = mx;
    return;
  }
  for (int64_t j = 0; j < n; ++j) y[j] = vec::exp(x[j] - mx);
  double s[L] = {};
  i = 0;
  for (; i + L <= n; i += L)
    for (int64_t k = 0; k < L; ++k) s[k] += y[i + k];
  double sum = 0;
  for (int64_t k = 0; k < L; ++k) sum += s[k];
  for (; i < n; ++i) sum += y[i];
  if (log) {
    const float ls = static_cast<float>(std::log(sum));
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - mx) - ls;
    return;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < n; ++j) y[j] *= inv;
}

Status softmax_run(KernelContext& ctx, bool log) {
  const TensorView& xv = ctx.input(0);
  TD_ASSIGN_OR_RETURN(int64_t axis, resolve_axis(ctx, static_cast<int64_t>(xv.shape.size())));
  const int64_t n = xv.shape[static_cast<size_t>(axis)];  // the dims after it are all 1
  const int64_t rows = n == 0 ? 0 : xv.numel() / n;
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const float* x = xv.as<float>();
  float* y = out.as<float>();
  if (rows > 1 && xv.numel() >= kParallelMin && threads_available() > 1) {
    ThreadPool::get().parallel_for(rows, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) softmax_row(x + r * n, n, log, y + r * n);
    });
  } else {
    for (int64_t r = 0; r < rows; ++r) softmax_row(x + r * n, n, log, y + r * n);
  }
  return OkStatus();
}

}  // namespace

void register_fast_norm_kernels(KernelRegistry& r) {
  r.add(KernelDef{"LayerNormalization", "fast", layer_norm_accepts, layer_norm_run, false});
  r.add(KernelDef{"Softmax", "fast", softmax_accepts,
                  [](KernelContext& c) { return softmax_run(c, false); }, false});
  r.add(KernelDef{"LogSoftmax", "fast", softmax_accepts,
                  [](KernelContext& c) { return softmax_run(c, true); }, false});
}

}  // namespace tensord::cpu
