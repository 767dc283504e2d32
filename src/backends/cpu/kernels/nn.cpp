// Reference kernels of the neural-network ops: MatMul, Gemm, Conv, ConvTranspose, the pools,
// BatchNormalization (inference), InstanceNormalization, LRN, LayerNormalization,
// Softmax/LogSoftmax/Hardmax and Dropout.
//
// Simple N-d loops over flat indices, accumulating floats in double (ConvTranspose scatters
// straight into the output). Window geometry (pads, output sizes) comes from the same functions
// the schemas use. Scratch memory is sized by the data (inputs, weights, outputs), never by
// attribute values alone.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include "backends/cpu/dispatch.h"
#include "backends/cpu/kernel.h"
#include "core/op_registry.h"
#include "core/ops/op_helpers.h"

namespace tensord {

namespace cpu {
namespace {

// ---- helpers ----

// Accumulator: double for floats; uint64 for integers (wraps like the integer type would,
// without signed-overflow UB).
template <typename T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;

template <typename T>
Acc<T> to_acc(T v) {
  return static_cast<Acc<T>>(v);
}

// Whether the node asked for output i (optional outputs may be omitted).
bool wants_output(const KernelContext& ctx, int i) {
  return i < ctx.num_outputs() && ctx.output_type(i).defined();
}

// Values of a numeric tensor as doubles (per-channel parameters of any float dtype).
std::vector<double> to_doubles(const TensorView& v) {
  std::vector<double> out(static_cast<size_t>(v.numel()));
  (void)dispatch_numeric(v.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(v.as<T>()[i]);
    return OkStatus();
  });
  return out;
}

Status store_doubles(const MutableTensorView& dst, const std::vector<double>& values) {
  return dispatch_float(dst.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < values.size(); ++i) dst.as<T>()[i] = static_cast<T>(values[i]);
    return OkStatus();
  });
}

int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

// Multi-indices (row-major order) of every position in `shape`: table[flat * rank + d].
std::vector<int64_t> index_table(const Shape& shape) {
  const int64_t n = shape_numel(shape);
  const size_t rank = shape.size();
  std::vector<int64_t> table(static_cast<size_t>(n) * rank);
  for (int64_t f = 0; f < n; ++f) {
    int64_t rem = f;
    for (size_t d = rank; d-- > 0;) {
      table[static_cast<size_t>(f) * rank + d] = rem % shape[d];
      rem /= shape[d];
    }
  }
  return table;
}

// Advances a row-major multi-index within `shape` (wrapping to all zeros after the last).
void next_index(std::vector<int64_t>& idx, const Shape& shape) {
  for (size_t d = shape.size(); d-- > 0;) {
    if (++idx[d] < shape[d]) return;
    idx[d] = 0;
  }
}

// Floor and ceiling of a / b for b > 0.
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// For each flat index of `out`, the flat index of `in` that broadcasts to it (in is right-
// aligned with out; its dims are 1 or equal).
std::vector<int64_t> broadcast_map(const Shape& in, const Shape& out) {
  const int64_t n = shape_numel(out);
  const size_t off = out.size() - in.size();
  std::vector<int64_t> map(static_cast<size_t>(n));
  for (int64_t f = 0; f < n; ++f) {
    int64_t rem = f, idx = 0, stride = 1;
    for (size_t d = out.size(); d-- > 0;) {
      const int64_t pos = rem % out[d];
      rem /= out[d];
      if (d >= off) {
        const int64_t dim = in[d - off];
        if (dim != 1) idx += pos * stride;
        stride *= dim;
      }
    }
    map[static_cast<size_t>(f)] = idx;
  }
  return map;
}

// ---- MatMul, Gemm ----

template <typename T>
Status matmul_typed(KernelContext& ctx) {
  const TensorView& av = ctx.input(0);
  const TensorView& bv = ctx.input(1);
  Shape a = av.shape, b = bv.shape;
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  const int64_t m = a[a.size() - 2], k = a[a.size() - 1], n = b[b.size() - 1];
  const Shape batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2);
  TD_ASSIGN_OR_RETURN(Shape batch, broadcast_shapes(batch_a, batch_b));
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  if (out.numel() == 0) return OkStatus();
  const std::vector<int64_t> map_a = broadcast_map(batch_a, batch);
  const std::vector<int64_t> map_b = broadcast_map(batch_b, batch);
  const T* pa = av.as<T>();
  const T* pb = bv.as<T>();
  T* py = out.as<T>();
  const int64_t nb = shape_numel(batch);
  for (int64_t bi = 0; bi < nb; ++bi) {
    const T* ma = pa + map_a[static_cast<size_t>(bi)] * m * k;
    const T* mb = pb + map_b[static_cast<size_t>(bi)] * k * n;
    T* my = py + bi * m * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        Acc<T> acc = 0;
        for (int64_t q = 0; q < k; ++q) acc += to_acc(ma[i * k + q]) * to_acc(mb[q * n + j]);
        my[i * n + j] = static_cast<T>(acc);
      }
    }
  }
  return OkStatus();
}

Status matmul_kernel(KernelContext& ctx) {
  return dispatch_numeric(ctx.input(0).dtype, [&](auto tag) -> Status {
    return matmul_typed<typename decltype(tag)::type>(ctx);
  });
}

template <typename T>
Status gemm_typed(KernelContext& ctx) {
  const TensorView& av = ctx.input(0);
  const TensorView& bv = ctx.input(1);
  TD_ASSIGN_OR_RETURN(const nn::GemmParams g, nn::gemm_params(ctx, av.shape, bv.shape));
  const float alpha = g.alpha, beta = g.beta;
  const bool trans_a = g.trans_a, trans_b = g.trans_b;
  const int64_t m = g.m, k = g.k, n = g.n;
  const T* pa = av.as<T>();
  const T* pb = bv.as<T>();
  const T* pc = nullptr;
  int64_t c_rows = 1, c_cols = 1;
  if (ctx.has_input(2)) {
    const TensorView& cv = ctx.input(2);
    pc = cv.as<T>();
    if (cv.shape.size() == 2) c_rows = cv.shape[0];
    if (!cv.shape.empty()) c_cols = cv.shape.back();
  }
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  T* py = out.as<T>();
  // Integers keep exact (wrapping) arithmetic when alpha and beta are 1.
  const bool exact = !std::is_floating_point_v<T> && alpha == 1.0f && (beta == 1.0f || !pc);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      Acc<T> acc = 0;
      for (int64_t q = 0; q < k; ++q) {
        const T a = trans_a ? pa[q * m + i] : pa[i * k + q];
        const T b = trans_b ? pb[j * k + q] : pb[q * n + j];
        acc += to_acc(a) * to_acc(b);
      }
      const T c = pc ? pc[(c_rows == 1 ? 0 : i) * c_cols + (c_cols == 1 ? 0 : j)] : T(0);
      if (exact) {
        py[i * n + j] = static_cast<T>(acc + to_acc(c));
      } else {
        // Integers scaled by alpha/beta go through double (the signed value of acc).
        const double sum = std::is_floating_point_v<T> ? static_cast<double>(acc)
                                                       : static_cast<double>(static_cast<T>(acc));
        double y = static_cast<double>(alpha) * sum;
        if (pc) y += static_cast<double>(beta) * static_cast<double>(c);
        py[i * n + j] = static_cast<T>(y);
      }
    }
  }
  return OkStatus();
}

Status gemm_kernel(KernelContext& ctx) {
  return dispatch_numeric(ctx.input(0).dtype, [&](auto tag) -> Status {
    return gemm_typed<typename decltype(tag)::type>(ctx);
  });
}

// ---- Conv, ConvTranspose ----

struct ConvGeometry {
  int64_t batch = 0, in_channels = 0, out_channels = 0, group = 1;
  Shape in_spatial, kernel, out_spatial;
  std::vector<int64_t> strides, dilations, pads;
};

template <typename T>
Status conv_typed(KernelContext& ctx, const ConvGeometry& g) {
  const size_t nd = g.in_spatial.size();
  const int64_t in_size = shape_numel(g.in_spatial);
  const int64_t out_size = shape_numel(g.out_spatial);
  const int64_t k_size = shape_numel(g.kernel);
  const int64_t cg = g.in_channels / g.group;   // input channels per group
  const int64_t mg = g.out_channels / g.group;  // output channels per group
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  if (out.numel() == 0) return OkStatus();
  const std::vector<int64_t> k_idx = index_table(g.kernel);  // as large as the weight
  const T* x = ctx.input(0).as<T>();
  const T* w = ctx.input(1).as<T>();
  const T* bias = ctx.has_input(2) ? ctx.input(2).as<T>() : nullptr;
  T* y = out.as<T>();
  std::vector<int64_t> oi(nd, 0);  // multi-index of output position o
  for (int64_t nb = 0; nb < g.batch; ++nb) {
    for (int64_t m = 0; m < g.out_channels; ++m) {
      const int64_t grp = m / mg;
      for (int64_t o = 0; o < out_size; ++o, next_index(oi, g.out_spatial)) {
        double acc = bias ? static_cast<double>(bias[m]) : 0.0;
        for (int64_t kf = 0; kf < k_size; ++kf) {
          int64_t in_flat = 0;
          bool inside = true;
          for (size_t d = 0; d < nd; ++d) {
            const int64_t pos = oi[d] * g.strides[d] - g.pads[d] +
                                k_idx[static_cast<size_t>(kf) * nd + d] * g.dilations[d];
            if (pos < 0 || pos >= g.in_spatial[d]) {
              inside = false;
              break;
            }
            in_flat = in_flat * g.in_spatial[d] + pos;
          }
          if (!inside) continue;
          for (int64_t c = 0; c < cg; ++c) {
            const int64_t xc = grp * cg + c;
            acc += static_cast<double>(x[(nb * g.in_channels + xc) * in_size + in_flat]) *
                   static_cast<double>(w[(m * cg + c) * k_size + kf]);
          }
        }
        y[(nb * g.out_channels + m) * out_size + o] = static_cast<T>(acc);
      }
    }
  }
  return OkStatus();
}

Status conv_kernel(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  const TensorView& w = ctx.input(1);
  ConvGeometry g;
  TD_ASSIGN_OR_RETURN(g.group, ctx.attr_int("group", 1));
  g.batch = x.shape[0];
  g.in_channels = x.shape[1];
  g.out_channels = w.shape[0];
  g.in_spatial.assign(x.shape.begin() + 2, x.shape.end());
  g.kernel.assign(w.shape.begin() + 2, w.shape.end());
  TD_RETURN_IF_ERROR(nn::window_geometry(ctx, g.in_spatial, g.kernel, false, &g.strides,
                                         &g.dilations, &g.pads, &g.out_spatial));
  return dispatch_float(x.dtype, [&](auto tag) -> Status {
    return conv_typed<typename decltype(tag)::type>(ctx, g);
  });
}

template <typename T>
Status conv_transpose_typed(KernelContext& ctx, const ConvGeometry& g) {
  const size_t nd = g.in_spatial.size();
  const int64_t in_size = shape_numel(g.in_spatial);
  const int64_t out_size = shape_numel(g.out_spatial);
  const int64_t k_size = shape_numel(g.kernel);
  const int64_t cg = g.in_channels / g.group;   // input channels per group
  const int64_t mg = g.out_channels / g.group;  // output channels per group
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  if (out.numel() == 0) return OkStatus();
  const std::vector<int64_t> in_idx = index_table(g.in_spatial);  // as large as the input
  const std::vector<int64_t> k_idx = index_table(g.kernel);       // as large as the weight
  const T* x = ctx.input(0).as<T>();
  const T* w = ctx.input(1).as<T>();
  const T* bias = ctx.has_input(2) ? ctx.input(2).as<T>() : nullptr;
  T* y = out.as<T>();
  for (int64_t nb = 0; nb < g.batch; ++nb)
    for (int64_t m = 0; m < g.out_channels; ++m)
      std::fill(y + (nb * g.out_channels + m) * out_size,
                y + (nb * g.out_channels + m + 1) * out_size, bias ? bias[m] : T(0));
  // Scatter: every input element adds x * w into the outputs its kernel window covers.
  for (int64_t nb = 0; nb < g.batch; ++nb) {
    for (int64_t c = 0; c < g.in_channels; ++c) {
      const int64_t grp = c / cg;
      for (int64_t i = 0; i < in_size; ++i) {
        const T xv = x[(nb * g.in_channels + c) * in_size + i];
        for (int64_t kf = 0; kf < k_size; ++kf) {
          int64_t out_flat = 0;
          bool inside = true;
          for (size_t d = 0; d < nd; ++d) {
            const int64_t pos = in_idx[static_cast<size_t>(i) * nd + d] * g.strides[d] +
                                k_idx[static_cast<size_t>(kf) * nd + d] * g.dilations[d] -
                                g.pads[d];
            if (pos < 0 || pos >= g.out_spatial[d]) {
              inside = false;
              break;
            }
            out_flat = out_flat * g.out_spatial[d] + pos;
          }
          if (!inside) continue;
          for (int64_t j = 0; j < mg; ++j) {
            const int64_t m = grp * mg + j;
            y[(nb * g.out_channels + m) * out_size + out_flat] +=
                xv * w[(c * mg + j) * k_size + kf];
          }
        }
      }
    }
  }
  return OkStatus();
}

Status conv_transpose_kernel(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  const TensorView& w = ctx.input(1);
  ConvGeometry g;
  TD_ASSIGN_OR_RETURN(g.group, ctx.attr_int("group", 1));
  g.batch = x.shape[0];
  g.in_channels = x.shape[1];
  g.out_channels = w.shape[1] * g.group;
  g.in_spatial.assign(x.shape.begin() + 2, x.shape.end());
  g.kernel.assign(w.shape.begin() + 2, w.shape.end());
  TD_RETURN_IF_ERROR(nn::conv_transpose_geometry(ctx, g.in_spatial, g.kernel, &g.strides,
                                                 &g.dilations, &g.pads, &g.out_spatial));
  return dispatch_float(x.dtype, [&](auto tag) -> Status {
    return conv_transpose_typed<typename decltype(tag)::type>(ctx, g);
  });
}

// ---- pools ----

enum class PoolKind { kMax, kAverage, kLp };

template <typename T>
Status pool_typed(KernelContext& ctx, PoolKind kind, const ConvGeometry& g) {
  const size_t nd = g.in_spatial.size();
  const int64_t in_size = shape_numel(g.in_spatial);
  const int64_t out_size = shape_numel(g.out_spatial);
  int64_t count_include_pad = 0, p = 2, storage_order = 0;
  if (kind == PoolKind::kAverage) {
    TD_ASSIGN_OR_RETURN(count_include_pad, ctx.attr_int("count_include_pad", 0));
  }
  if (kind == PoolKind::kLp) {
    TD_ASSIGN_OR_RETURN(p, ctx.attr_int("p", 2));
  }
  if (kind == PoolKind::kMax) {
    TD_ASSIGN_OR_RETURN(storage_order, ctx.attr_int("storage_order", 0));
  }
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  T* y = out.as<T>();
  int64_t* indices = nullptr;
  if (kind == PoolKind::kMax && wants_output(ctx, 1)) {
    TD_ASSIGN_OR_RETURN(MutableTensorView iv, ctx.output(1));
    indices = iv.as<int64_t>();
  }
  if (out.numel() == 0) return OkStatus();
  // Column-major strides of the spatial axes (storage_order=1 indices).
  std::vector<int64_t> col_strides(nd, 1);
  for (size_t d = 1; d < nd; ++d) col_strides[d] = col_strides[d - 1] * g.in_spatial[d - 1];
  const T* x = ctx.input(0).as<T>();
  const int64_t planes = g.batch * g.in_channels;
  std::vector<int64_t> oi(nd, 0), start(nd), lo(nd), hi(nd), j(nd);
  for (int64_t o = 0; o < out_size; ++o, next_index(oi, g.out_spatial)) {
    // Per axis, the kernel taps [lo, hi) that land inside the input, and (for
    // count_include_pad) how many land inside the padded extent [-pad_begin, size + pad_end),
    // which ceil_mode windows may overhang.
    double count_padded = 1;
    bool empty = false;
    for (size_t d = 0; d < nd; ++d) {
      const int64_t dil = g.dilations[d], k = g.kernel[d], in = g.in_spatial[d];
      start[d] = oi[d] * g.strides[d] - g.pads[d];
      lo[d] = std::max<int64_t>(0, ceil_div(-start[d], dil));
      hi[d] = std::min<int64_t>(k, floor_div(in - 1 - start[d], dil) + 1);
      const int64_t plo = std::max<int64_t>(0, ceil_div(-g.pads[d] - start[d], dil));
      const int64_t phi =
          std::min<int64_t>(k, floor_div(in + g.pads[d + nd] - 1 - start[d], dil) + 1);
      count_padded *= static_cast<double>(std::max<int64_t>(0, phi - plo));
      if (lo[d] >= hi[d]) empty = true;
    }
    for (int64_t plane = 0; plane < planes; ++plane) {
      const T* xp = x + plane * in_size;
      bool found = false;
      T best = T(0);
      int64_t best_index = -1;
      double sum = 0.0, count_inside = 0;
      // Row-major walk over the in-bounds taps (the order decides ties: the first max wins).
      j = lo;
      while (!empty) {
        int64_t row = 0, col = 0;
        for (size_t d = 0; d < nd; ++d) {
          const int64_t pos = start[d] + j[d] * g.dilations[d];
          row = row * g.in_spatial[d] + pos;
          col += pos * col_strides[d];
        }
        const T v = xp[row];
        count_inside += 1;
        if (kind == PoolKind::kMax) {
          if (!found || v > best) {
            best = v;
            best_index = storage_order ? col : row;
            found = true;
          }
        } else if (kind == PoolKind::kAverage) {
          sum += static_cast<double>(v);
        } else {
          sum += std::pow(std::abs(static_cast<double>(v)), static_cast<double>(p));
        }
        size_t d = nd;
        while (d-- > 0) {
          if (++j[d] < hi[d]) break;
          j[d] = lo[d];
        }
        if (d == static_cast<size_t>(-1)) break;  // every axis wrapped: done
      }
      const int64_t f = plane * out_size + o;
      if (kind == PoolKind::kMax) {
        y[f] = best;
        if (indices) indices[f] = best_index < 0 ? -1 : plane * in_size + best_index;
      } else if (kind == PoolKind::kAverage) {
        y[f] = static_cast<T>(sum / (count_include_pad ? count_padded : count_inside));
      } else {
        y[f] = static_cast<T>(std::pow(sum, 1.0 / static_cast<double>(p)));
      }
    }
  }
  return OkStatus();
}

Status pool_kernel(KernelContext& ctx, PoolKind kind) {
  const TensorView& x = ctx.input(0);
  ConvGeometry g;
  g.batch = x.shape[0];
  g.in_channels = x.shape[1];
  g.in_spatial.assign(x.shape.begin() + 2, x.shape.end());
  TD_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, ctx.attr_ints("kernel_shape"));
  g.kernel = kernel;
  TD_RETURN_IF_ERROR(nn::window_geometry(ctx, g.in_spatial, g.kernel, true, &g.strides,
                                         &g.dilations, &g.pads, &g.out_spatial));
  if (kind == PoolKind::kMax) {
    return dispatch_numeric(x.dtype, [&](auto tag) -> Status {
      return pool_typed<typename decltype(tag)::type>(ctx, kind, g);
    });
  }
  return dispatch_float(x.dtype, [&](auto tag) -> Status {
    return pool_typed<typename decltype(tag)::type>(ctx, kind, g);
  });
}

template <typename T>
Status global_pool_typed(KernelContext& ctx, PoolKind kind) {
  const TensorView& xv = ctx.input(0);
  const int64_t planes = xv.shape[0] * xv.shape[1];
  const int64_t size = product(xv.shape, 2, xv.shape.size());
  int64_t p = 2;
  if (kind == PoolKind::kLp) {
    TD_ASSIGN_OR_RETURN(p, ctx.attr_int("p", 2));
  }
  const T* x = xv.as<T>();
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  T* y = out.as<T>();
  for (int64_t plane = 0; plane < planes; ++plane) {
    const T* xp = x + plane * size;
    if (kind == PoolKind::kMax) {
      T best = size > 0 ? xp[0] : T(0);
      for (int64_t i = 1; i < size; ++i)
        if (xp[i] > best || std::isnan(static_cast<double>(xp[i]))) best = xp[i];
      y[plane] = best;
      continue;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < size; ++i) {
      const double v = static_cast<double>(xp[i]);
      sum += kind == PoolKind::kAverage ? v : std::pow(std::abs(v), static_cast<double>(p));
    }
    y[plane] =
        static_cast<T>(kind == PoolKind::kAverage ? sum / static_cast<double>(size)
                                                  : std::pow(sum, 1.0 / static_cast<double>(p)));
  }
  return OkStatus();
}

Status global_pool_kernel(KernelContext& ctx, PoolKind kind) {
  return dispatch_float(ctx.input(0).dtype, [&](auto tag) -> Status {
    return global_pool_typed<typename decltype(tag)::type>(ctx, kind);
  });
}

// ---- normalizations ----

template <typename T>
Status batch_norm_typed(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(float epsilon, ctx.attr_float("epsilon", 1e-5f));
  const TensorView& xv = ctx.input(0);
  const std::vector<double> scale = to_doubles(ctx.input(1));
  const std::vector<double> bias = to_doubles(ctx.input(2));
  std::vector<double> mean = to_doubles(ctx.input(3));
  std::vector<double> var = to_doubles(ctx.input(4));
  const int64_t n = xv.shape[0], c = xv.shape[1];
  const int64_t size = product(xv.shape, 2, xv.shape.size());
  const T* x = xv.as<T>();
  TD_ASSIGN_OR_RETURN(int64_t training, ctx.attr_int("training_mode", 0));
  if (training) {
    // Batch statistics (population variance), as ONNX's reference; running stats updated.
    TD_ASSIGN_OR_RETURN(float momentum, ctx.attr_float("momentum", 0.9f));
    const double count = static_cast<double>(n * size);
    std::vector<double> bmean(static_cast<size_t>(c), 0.0), bvar(static_cast<size_t>(c), 0.0);
    for (int64_t ch = 0; ch < c; ++ch) {
      double s = 0.0;
      for (int64_t nb = 0; nb < n; ++nb)
        for (int64_t i = 0; i < size; ++i) s += static_cast<double>(x[(nb * c + ch) * size + i]);
      const double m = s / count;
      double v = 0.0;
      for (int64_t nb = 0; nb < n; ++nb)
        for (int64_t i = 0; i < size; ++i) {
          const double d = static_cast<double>(x[(nb * c + ch) * size + i]) - m;
          v += d * d;
        }
      bmean[static_cast<size_t>(ch)] = m;
      bvar[static_cast<size_t>(ch)] = v / count;
    }
    for (int o = 1; o < ctx.num_outputs(); ++o) {
      if (!ctx.output_type(o).defined()) continue;
      TD_ASSIGN_OR_RETURN(MutableTensorView r, ctx.output(o));
      const std::vector<double>& running = o == 1 ? mean : var;
      const std::vector<double>& batch = o == 1 ? bmean : bvar;
      TD_RETURN_IF_ERROR(dispatch_float(r.dtype, [&](auto tag) -> Status {
        using R = typename decltype(tag)::type;
        for (int64_t ch = 0; ch < c; ++ch) {
          const size_t k = static_cast<size_t>(ch);
          r.as<R>()[ch] = static_cast<R>(running[k] * momentum + batch[k] * (1.0 - momentum));
        }
        return OkStatus();
      }));
    }
    mean = std::move(bmean);
    var = std::move(bvar);
  }
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  T* y = out.as<T>();
  for (int64_t nb = 0; nb < n; ++nb) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const size_t k = static_cast<size_t>(ch);
      const double inv = 1.0 / std::sqrt(var[k] + static_cast<double>(epsilon));
      const int64_t base = (nb * c + ch) * size;
      for (int64_t i = 0; i < size; ++i)
        y[base + i] =
            static_cast<T>((static_cast<double>(x[base + i]) - mean[k]) * inv * scale[k] + bias[k]);
    }
  }
  return OkStatus();
}

Status batch_norm_kernel(KernelContext& ctx) {
  return dispatch_float(ctx.input(0).dtype, [&](auto tag) -> Status {
    return batch_norm_typed<typename decltype(tag)::type>(ctx);
  });
}

template <typename T>
Status instance_norm_typed(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(float epsilon, ctx.attr_float("epsilon", 1e-5f));
  const TensorView& xv = ctx.input(0);
  const std::vector<double> scale = to_doubles(ctx.input(1));
  const std::vector<double> bias = to_doubles(ctx.input(2));
  const int64_t n = xv.shape[0], c = xv.shape[1];
  const int64_t size = product(xv.shape, 2, xv.shape.size());
  const T* x = xv.as<T>();
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  T* y = out.as<T>();
  for (int64_t nb = 0; nb < n; ++nb) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const int64_t base = (nb * c + ch) * size;
      double mean = 0.0;
      for (int64_t i = 0; i < size; ++i) mean += static_cast<double>(x[base + i]);
      mean /= static_cast<double>(size);
      double var = 0.0;
      for (int64_t i = 0; i < size; ++i) {
        const double d = static_cast<double>(x[base + i]) - mean;
        var += d * d;
      }
      var /= static_cast<double>(size);
      const double inv = 1.0 / std::sqrt(var + static_cast<double>(epsilon));
      const size_t k = static_cast<size_t>(ch);
      for (int64_t i = 0; i < size; ++i)
        y[base + i] =
            static_cast<T>((static_cast<double>(x[base + i]) - mean) * inv * scale[k] + bias[k]);
    }
  }
  return OkStatus();
}

Status instance_norm_kernel(KernelContext& ctx) {
  return dispatch_float(ctx.input(0).dtype, [&](auto tag) -> Status {
    return instance_norm_typed<typename decltype(tag)::type>(ctx);
  });
}

template <typename T>
Status lrn_typed(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(float alpha, ctx.attr_float("alpha", 1e-4f));
  TD_ASSIGN_OR_RETURN(float beta, ctx.attr_float("beta", 0.75f));
  TD_ASSIGN_OR_RETURN(float bias, ctx.attr_float("bias", 1.0f));
  TD_ASSIGN_OR_RETURN(int64_t size, ctx.attr_int("size", 1));
  const TensorView& xv = ctx.input(0);
  const int64_t n = xv.shape[0], c = xv.shape[1];
  const int64_t spatial = product(xv.shape, 2, xv.shape.size());
  // Channels [c - floor((size-1)/2), c + ceil((size-1)/2)], clipped to the valid range.
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  const T* x = xv.as<T>();
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  T* y = out.as<T>();
  for (int64_t nb = 0; nb < n; ++nb) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const int64_t lo = std::max<int64_t>(0, ch - before);
      const int64_t hi = std::min<int64_t>(c - 1, ch + after);
      for (int64_t i = 0; i < spatial; ++i) {
        double sq = 0.0;
        for (int64_t j = lo; j <= hi; ++j) {
          const double v = static_cast<double>(x[(nb * c + j) * spatial + i]);
          sq += v * v;
        }
        const int64_t f = (nb * c + ch) * spatial + i;
        const double denom = std::pow(
            static_cast<double>(bias) + static_cast<double>(alpha) / static_cast<double>(size) * sq,
            static_cast<double>(beta));
        y[f] = static_cast<T>(static_cast<double>(x[f]) / denom);
      }
    }
  }
  return OkStatus();
}

Status lrn_kernel(KernelContext& ctx) {
  return dispatch_float(ctx.input(0).dtype, [&](auto tag) -> Status {
    return lrn_typed<typename decltype(tag)::type>(ctx);
  });
}

template <typename T>
Status layer_norm_typed(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(float epsilon, ctx.attr_float("epsilon", 1e-5f));
  TD_ASSIGN_OR_RETURN(int64_t axis_attr, ctx.attr_int("axis", -1));
  const TensorView& xv = ctx.input(0);
  TD_ASSIGN_OR_RETURN(int64_t axis,
                      normalize_axis(axis_attr, static_cast<int64_t>(xv.shape.size())));
  const int64_t outer = product(xv.shape, 0, static_cast<size_t>(axis));
  const int64_t inner = product(xv.shape, static_cast<size_t>(axis), xv.shape.size());
  const std::vector<double> scale = to_doubles(ctx.input(1));
  const std::vector<int64_t> scale_map = broadcast_map(ctx.input(1).shape, xv.shape);
  std::vector<double> bias;
  std::vector<int64_t> bias_map;
  if (ctx.has_input(2)) {
    bias = to_doubles(ctx.input(2));
    bias_map = broadcast_map(ctx.input(2).shape, xv.shape);
  }
  const T* x = xv.as<T>();
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  T* y = out.as<T>();
  std::vector<double> means(static_cast<size_t>(outer)), inv_stds(static_cast<size_t>(outer));
  for (int64_t r = 0; r < outer; ++r) {
    const int64_t base = r * inner;
    double mean = 0.0;
    for (int64_t i = 0; i < inner; ++i) mean += static_cast<double>(x[base + i]);
    mean /= static_cast<double>(inner);
    double var = 0.0;
    for (int64_t i = 0; i < inner; ++i) {
      const double d = static_cast<double>(x[base + i]) - mean;
      var += d * d;
    }
    var /= static_cast<double>(inner);
    const double inv = 1.0 / std::sqrt(var + static_cast<double>(epsilon));
    means[static_cast<size_t>(r)] = mean;
    inv_stds[static_cast<size_t>(r)] = inv;
    for (int64_t i = 0; i < inner; ++i) {
      const size_t f = static_cast<size_t>(base + i);
      double v =
          (static_cast<double>(x[f]) - mean) * inv * scale[static_cast<size_t>(scale_map[f])];
      if (!bias.empty()) v += bias[static_cast<size_t>(bias_map[f])];
      y[f] = static_cast<T>(v);
    }
  }
  if (wants_output(ctx, 1)) {
    TD_ASSIGN_OR_RETURN(MutableTensorView mv, ctx.output(1));
    TD_RETURN_IF_ERROR(store_doubles(mv, means));
  }
  if (wants_output(ctx, 2)) {
    TD_ASSIGN_OR_RETURN(MutableTensorView iv, ctx.output(2));
    TD_RETURN_IF_ERROR(store_doubles(iv, inv_stds));
  }
  return OkStatus();
}

Status layer_norm_kernel(KernelContext& ctx) {
  return dispatch_float(ctx.input(0).dtype, [&](auto tag) -> Status {
    return layer_norm_typed<typename decltype(tag)::type>(ctx);
  });
}

// ---- Softmax family ----

enum class SoftmaxKind { kSoftmax, kLogSoftmax, kHardmax };

template <typename T>
Status softmax_typed(KernelContext& ctx, SoftmaxKind kind) {
  TD_ASSIGN_OR_RETURN(int64_t axis_attr, ctx.attr_int("axis", -1));
  const TensorView& xv = ctx.input(0);
  TD_ASSIGN_OR_RETURN(int64_t axis,
                      normalize_axis(axis_attr, static_cast<int64_t>(xv.shape.size())));
  const int64_t outer = product(xv.shape, 0, static_cast<size_t>(axis));
  const int64_t n = xv.shape[static_cast<size_t>(axis)];
  const int64_t inner = product(xv.shape, static_cast<size_t>(axis) + 1, xv.shape.size());
  const T* x = xv.as<T>();
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  T* y = out.as<T>();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      const int64_t base = o * n * inner + in;
      auto at = [&](int64_t j) { return base + j * inner; };
      if (n == 0) continue;
      int64_t arg = 0;
      double mx = static_cast<double>(x[at(0)]);
      for (int64_t j = 1; j < n; ++j) {
        const double v = static_cast<double>(x[at(j)]);
        if (v > mx) {
          mx = v;
          arg = j;
        }
      }
      if (kind == SoftmaxKind::kHardmax) {
        for (int64_t j = 0; j < n; ++j) y[at(j)] = static_cast<T>(j == arg ? 1 : 0);
        continue;
      }
      double sum = 0.0;
      for (int64_t j = 0; j < n; ++j) sum += std::exp(static_cast<double>(x[at(j)]) - mx);
      const double log_sum = std::log(sum);
      for (int64_t j = 0; j < n; ++j) {
        const double shifted = static_cast<double>(x[at(j)]) - mx;
        y[at(j)] = static_cast<T>(kind == SoftmaxKind::kSoftmax ? std::exp(shifted) / sum
                                                                : shifted - log_sum);
      }
    }
  }
  return OkStatus();
}

Status softmax_kernel(KernelContext& ctx, SoftmaxKind kind) {
  return dispatch_float(ctx.input(0).dtype, [&](auto tag) -> Status {
    return softmax_typed<typename decltype(tag)::type>(ctx, kind);
  });
}

// ---- Dropout ----

template <typename T>
Status dropout_typed(KernelContext& ctx) {
  double ratio = 0.5;
  if (ctx.has_input(1)) ratio = to_doubles(ctx.input(1)).at(0);
  bool training = false;
  if (ctx.has_input(2)) training = ctx.input(2).as<bool>()[0];
  if (training && (ratio < 0.0 || ratio >= 1.0))
    return ctx.error("ratio must be in [0, 1) in training mode, got {}", ratio);
  const TensorView& xv = ctx.input(0);
  const int64_t n = xv.numel();
  const T* x = xv.as<T>();
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  T* y = out.as<T>();
  bool* mask = nullptr;
  if (wants_output(ctx, 1)) {
    TD_ASSIGN_OR_RETURN(MutableTensorView mv, ctx.output(1));
    mask = mv.as<bool>();
  }
  if (!training || ratio == 0.0) {
    std::copy(x, x + n, y);
    if (mask) std::fill(mask, mask + n, true);
    return OkStatus();
  }
  // Training: keep each element with probability 1 - ratio and scale it by 1 / (1 - ratio).
  // The draws are NumPy's legacy RandomState(seed).random_sample() (MT19937 seeded like
  // std::mt19937, 53-bit doubles from two 32-bit outputs), so a seeded node reproduces the
  // ONNX reference's masks exactly.
  std::mt19937 rng;
  if (ctx.has_attr("seed")) {
    TD_ASSIGN_OR_RETURN(int64_t seed, ctx.attr_int("seed", 0));
    rng.seed(static_cast<uint32_t>(seed));
  } else {
    rng.seed(std::random_device{}());
  }
  auto random_sample = [&rng] {
    const uint32_t a = rng() >> 5, b = rng() >> 6;
    return (static_cast<double>(a) * 67108864.0 + static_cast<double>(b)) / 9007199254740992.0;
  };
  const double scale = 1.0 / (1.0 - ratio);
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = random_sample() >= ratio;
    y[i] = keep ? static_cast<T>(static_cast<double>(x[i]) * scale) : T(0);
    if (mask) mask[i] = keep;
  }
  return OkStatus();
}

Status dropout_kernel(KernelContext& ctx) {
  return dispatch_float(ctx.input(0).dtype, [&](auto tag) -> Status {
    return dropout_typed<typename decltype(tag)::type>(ctx);
  });
}

}  // namespace

void register_reference_nn_kernels(KernelRegistry& r) {
  auto add = [&r](const char* op, KernelFn fn) {
    r.add(KernelDef{op, "reference", nullptr, std::move(fn)});
  };
  add("MatMul", matmul_kernel);
  add("Gemm", gemm_kernel);
  add("Conv", conv_kernel);
  add("ConvTranspose", conv_transpose_kernel);
  add("MaxPool", [](KernelContext& c) { return pool_kernel(c, PoolKind::kMax); });
  add("AveragePool", [](KernelContext& c) { return pool_kernel(c, PoolKind::kAverage); });
  add("LpPool", [](KernelContext& c) { return pool_kernel(c, PoolKind::kLp); });
  add("GlobalAveragePool",
      [](KernelContext& c) { return global_pool_kernel(c, PoolKind::kAverage); });
  add("GlobalMaxPool", [](KernelContext& c) { return global_pool_kernel(c, PoolKind::kMax); });
  add("GlobalLpPool", [](KernelContext& c) { return global_pool_kernel(c, PoolKind::kLp); });
  add("BatchNormalization", batch_norm_kernel);
  add("InstanceNormalization", instance_norm_kernel);
  add("LRN", lrn_kernel);
  add("LayerNormalization", layer_norm_kernel);
  add("Softmax", [](KernelContext& c) { return softmax_kernel(c, SoftmaxKind::kSoftmax); });
  add("LogSoftmax", [](KernelContext& c) { return softmax_kernel(c, SoftmaxKind::kLogSoftmax); });
  add("Hardmax", [](KernelContext& c) { return softmax_kernel(c, SoftmaxKind::kHardmax); });
  add("Dropout", dropout_kernel);
}

}  // namespace cpu
}  // namespace tensord
