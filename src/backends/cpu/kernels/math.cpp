// Reference kernels of the miscellaneous math ops: Einsum, Det, Compress, Unique,
// ReverseSequence, Shrink, Mish, the window functions, DFT, STFT, MelWeightMatrix and the
// random generators.
//
// Floats are computed in double and stored in the output type; DFTs are direct O(n^2) sums,
// which is what a reference should be. Random ops reproduce NumPy's legacy generator when the
// node has a `seed` (see LegacyRandom) and draw a random seed otherwise.
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <numeric>
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

constexpr double kPi = 3.14159265358979323846;

std::vector<double> to_doubles(const TensorView& v) {
  std::vector<double> out(static_cast<size_t>(v.numel()));
  (void)dispatch_numeric(v.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(v.as<T>()[i]);
    return OkStatus();
  });
  return out;
}

// Stores doubles into a numeric tensor (integers truncate toward zero, as numpy's astype).
Status store_doubles(const MutableTensorView& dst, const std::vector<double>& values) {
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

// The value of an integer scalar input.
int64_t scalar_int(const TensorView& v) {
  return v.dtype == DType::kInt32 ? v.as<int32_t>()[0] : v.as<int64_t>()[0];
}

int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

bool wants_output(const KernelContext& ctx, int i) {
  return i < ctx.num_outputs() && ctx.output_type(i).defined();
}

// ---- Einsum ----

template <typename T>
Status einsum_typed(KernelContext& ctx, const std::vector<std::vector<int>>& in_labels,
                    const std::vector<int>& out_labels, const std::vector<int64_t>& sizes) {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;
  const int n_in = ctx.num_inputs();
  // Loop labels: the output's, then the summed ones.
  std::vector<int> loop = out_labels;
  for (size_t l = 0; l < sizes.size(); ++l)
    if (sizes[l] != -2 &&
        std::find(out_labels.begin(), out_labels.end(), static_cast<int>(l)) == out_labels.end())
      loop.push_back(static_cast<int>(l));
  std::vector<int64_t> loop_sizes;
  for (int l : loop) loop_sizes.push_back(sizes[static_cast<size_t>(l)]);
  // strides[i][j]: step of input i's offset per unit of loop label j. Axes sharing a label
  // (diagonals) add up; size-1 axes broadcast (stride 0).
  std::vector<std::vector<int64_t>> strides(static_cast<size_t>(n_in),
                                            std::vector<int64_t>(loop.size(), 0));
  for (int i = 0; i < n_in; ++i) {
    const Shape& shape = ctx.input(i).shape;
    int64_t s = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      const int l = in_labels[static_cast<size_t>(i)][d];
      const size_t j = static_cast<size_t>(std::find(loop.begin(), loop.end(), l) - loop.begin());
      if (shape[d] != 1) strides[static_cast<size_t>(i)][j] += s;
      s *= shape[d];
    }
  }
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  const int64_t n_out = shape_numel(y.shape);
  const int64_t n_sum = product(loop_sizes, out_labels.size(), loop_sizes.size());
  std::vector<int64_t> idx(loop.size(), 0);
  std::vector<const T*> data;
  for (int i = 0; i < n_in; ++i) data.push_back(ctx.input(i).as<T>());
  for (int64_t o = 0; o < n_out; ++o) {
    Acc acc = 0;
    for (int64_t r = 0; r < n_sum; ++r) {
      Acc prod = 1;
      for (int i = 0; i < n_in; ++i) {
        int64_t off = 0;
        for (size_t j = 0; j < loop.size(); ++j) off += idx[j] * strides[static_cast<size_t>(i)][j];
        const T v = data[static_cast<size_t>(i)][off];
        if constexpr (std::is_floating_point_v<T>)
          prod *= static_cast<double>(v);
        else
          prod *= static_cast<uint64_t>(static_cast<int64_t>(v));
      }
      acc += prod;
      // Next summation index (the trailing loop labels).
      for (size_t j = loop.size(); j-- > out_labels.size();) {
        if (++idx[j] < loop_sizes[j]) break;
        idx[j] = 0;
      }
    }
    y.as<T>()[o] = static_cast<T>(acc);
    for (size_t j = out_labels.size(); j-- > 0;) {
      if (++idx[j] < loop_sizes[j]) break;
      idx[j] = 0;
    }
  }
  return OkStatus();
}

Status einsum_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(std::string equation, ctx.attr_string("equation", ""));
  std::vector<Shape> shapes;
  for (int i = 0; i < ctx.num_inputs(); ++i) shapes.push_back(ctx.input(i).shape);
  std::vector<std::vector<int>> in_labels;
  std::vector<int> out_labels;
  std::vector<int64_t> sizes;
  TD_RETURN_IF_ERROR(math::parse_einsum(equation, shapes, &in_labels, &out_labels, &sizes));
  return dispatch_numeric(ctx.input(0).dtype, [&](auto tag) -> Status {
    return einsum_typed<typename decltype(tag)::type>(ctx, in_labels, out_labels, sizes);
  });
}

// ---- Det ----

// Determinant by Gaussian elimination with partial pivoting.
double determinant(std::vector<double> a, int64_t n) {
  double det = 1;
  for (int64_t c = 0; c < n; ++c) {
    int64_t p = c;
    for (int64_t r = c + 1; r < n; ++r)
      if (std::abs(a[static_cast<size_t>(r * n + c)]) > std::abs(a[static_cast<size_t>(p * n + c)]))
        p = r;
    if (a[static_cast<size_t>(p * n + c)] == 0) return 0;
    if (p != c) {
      for (int64_t k = 0; k < n; ++k)
        std::swap(a[static_cast<size_t>(p * n + k)], a[static_cast<size_t>(c * n + k)]);
      det = -det;
    }
    const double pivot = a[static_cast<size_t>(c * n + c)];
    det *= pivot;
    for (int64_t r = c + 1; r < n; ++r) {
      const double f = a[static_cast<size_t>(r * n + c)] / pivot;
      for (int64_t k = c; k < n; ++k)
        a[static_cast<size_t>(r * n + k)] -= f * a[static_cast<size_t>(c * n + k)];
    }
  }
  return det;
}

Status det_kernel(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  const int64_t n = x.shape.back();
  const std::vector<double> v = to_doubles(x);
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  std::vector<double> out(static_cast<size_t>(y.numel()));
  for (size_t m = 0; m < out.size(); ++m) {
    const auto begin = v.begin() + static_cast<int64_t>(m) * n * n;
    out[m] = determinant(std::vector<double>(begin, begin + n * n), n);
  }
  return store_doubles(y, out);
}

// ---- Compress ----

Status compress_kernel(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  const TensorView& cond = ctx.input(1);
  const bool has_axis = ctx.has_attr("axis");
  int64_t axis = 0;
  if (has_axis) {
    TD_ASSIGN_OR_RETURN(int64_t a, ctx.attr_int("axis", 0));
    TD_ASSIGN_OR_RETURN(axis, normalize_axis(a, static_cast<int64_t>(x.shape.size())));
  }
  const size_t ax = static_cast<size_t>(axis);
  const int64_t dim = has_axis ? x.shape[ax] : x.numel();
  const int64_t outer = has_axis ? product(x.shape, 0, ax) : 1;
  const int64_t inner = has_axis ? product(x.shape, ax + 1, x.shape.size()) : 1;
  if (cond.numel() > dim)
    return ctx.error("condition has {} values but the {} has {}", cond.numel(),
                     has_axis ? "axis" : "flattened input", dim);
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < cond.numel(); ++i)
    if (cond.as<bool>()[i]) keep.push_back(i);
  const int64_t k = static_cast<int64_t>(keep.size());
  Shape out_shape = {k};
  if (has_axis) {
    out_shape = x.shape;
    out_shape[ax] = k;
  }
  TD_ASSIGN_OR_RETURN(MutableTensorView y,
                      ctx.allocate_output(0, ctx.output_type(0).dtype, out_shape));
  const size_t es = dtype_size(x.dtype);
  const auto* src = static_cast<const unsigned char*>(x.data);
  auto* dst = static_cast<unsigned char*>(y.data);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < k; ++j)
      std::memcpy(dst + static_cast<size_t>((o * k + j) * inner) * es,
                  src + static_cast<size_t>((o * dim + keep[static_cast<size_t>(j)]) * inner) * es,
                  static_cast<size_t>(inner) * es);
  return OkStatus();
}

// ---- Unique ----

// Total order for sorting: NaN after every number, NaNs equal.
template <typename T>
int compare_values(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    const bool na = std::isnan(a), nb = std::isnan(b);
    if (na || nb) return na == nb ? 0 : (na ? 1 : -1);
  }
  return a < b ? -1 : (b < a ? 1 : 0);
}

template <typename T>
Status unique_typed(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  const bool has_axis = ctx.has_attr("axis");
  TD_ASSIGN_OR_RETURN(int64_t sorted, ctx.attr_int("sorted", 1));
  int64_t axis = 0;
  if (has_axis) {
    TD_ASSIGN_OR_RETURN(int64_t a, ctx.attr_int("axis", 0));
    TD_ASSIGN_OR_RETURN(axis, normalize_axis(a, static_cast<int64_t>(x.shape.size())));
  }
  const size_t ax = static_cast<size_t>(axis);
  // Slices j = 0..n-1, each with elements data[(o * n + j) * inner + i] for o < outer, i < inner.
  const int64_t n = has_axis ? x.shape[ax] : x.numel();
  const int64_t outer = has_axis ? product(x.shape, 0, ax) : 1;
  const int64_t inner = has_axis ? product(x.shape, ax + 1, x.shape.size()) : 1;
  const T* data = x.as<T>();
  auto compare_slices = [&](int64_t a, int64_t b) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const int c = compare_values(data[(o * n + a) * inner + i], data[(o * n + b) * inner + i]);
        if (c != 0) return c;
      }
    return 0;
  };
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return compare_slices(a, b) < 0; });
  // Groups of equal slices in sorted order; stable sorting puts each group's first occurrence
  // first.
  std::vector<int64_t> first, counts;
  std::vector<int64_t> group_of(static_cast<size_t>(n));
  for (size_t p = 0; p < order.size(); ++p) {
    if (p == 0 || compare_slices(order[p - 1], order[p]) != 0) {
      first.push_back(order[p]);
      counts.push_back(0);
    }
    ++counts.back();
    group_of[static_cast<size_t>(order[p])] = static_cast<int64_t>(first.size()) - 1;
  }
  const size_t u = first.size();
  std::vector<int64_t> rank(u);  // output position of each sorted group
  std::iota(rank.begin(), rank.end(), 0);
  if (!sorted) {  // order of first occurrence
    std::vector<size_t> by_first(u);
    std::iota(by_first.begin(), by_first.end(), 0);
    std::sort(by_first.begin(), by_first.end(),
              [&](size_t a, size_t b) { return first[a] < first[b]; });
    for (size_t p = 0; p < u; ++p) rank[by_first[p]] = static_cast<int64_t>(p);
  }
  std::vector<int64_t> out_first(u), out_counts(u), inverse(static_cast<size_t>(n));
  for (size_t g = 0; g < u; ++g) {
    out_first[static_cast<size_t>(rank[g])] = first[g];
    out_counts[static_cast<size_t>(rank[g])] = counts[g];
  }
  for (size_t j = 0; j < inverse.size(); ++j) inverse[j] = rank[static_cast<size_t>(group_of[j])];

  const int64_t nu = static_cast<int64_t>(u);
  Shape y_shape = {nu};
  if (has_axis) {
    y_shape = x.shape;
    y_shape[ax] = nu;
  }
  TD_ASSIGN_OR_RETURN(MutableTensorView y,
                      ctx.allocate_output(0, ctx.output_type(0).dtype, y_shape));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t g = 0; g < nu; ++g)
      for (int64_t i = 0; i < inner; ++i)
        y.as<T>()[(o * nu + g) * inner + i] =
            data[(o * n + out_first[static_cast<size_t>(g)]) * inner + i];
  auto write = [&](int i, const std::vector<int64_t>& v) -> Status {
    if (!wants_output(ctx, i)) return OkStatus();
    TD_ASSIGN_OR_RETURN(MutableTensorView t,
                        ctx.allocate_output(i, DType::kInt64, {static_cast<int64_t>(v.size())}));
    std::copy(v.begin(), v.end(), t.as<int64_t>());
    return OkStatus();
  };
  TD_RETURN_IF_ERROR(write(1, out_first));
  TD_RETURN_IF_ERROR(write(2, inverse));
  return write(3, out_counts);
}

Status unique_kernel(KernelContext& ctx) {
  return dispatch_all(ctx.input(0).dtype, [&](auto tag) -> Status {
    return unique_typed<typename decltype(tag)::type>(ctx);
  });
}

// ---- ReverseSequence ----

Status reverse_sequence_kernel(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  const TensorView& lens = ctx.input(1);
  TD_ASSIGN_OR_RETURN(int64_t batch_axis, ctx.attr_int("batch_axis", 1));
  const int64_t time_axis = 1 - batch_axis;
  const int64_t batch = x.shape[static_cast<size_t>(batch_axis)];
  const int64_t steps = x.shape[static_cast<size_t>(time_axis)];
  const int64_t d1 = x.shape[1];
  const int64_t inner = product(x.shape, 2, x.shape.size());
  if (lens.numel() != batch)
    return ctx.error("sequence_lens has {} values, expected {} (the batch size)", lens.numel(),
                     batch);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t l = lens.as<int64_t>()[b];
    if (l < 0 || l > steps)
      return ctx.error("sequence_lens[{}] is {}, expected a value in [0, {}]", b, l, steps);
  }
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  const size_t es = dtype_size(x.dtype);
  const auto* src = static_cast<const unsigned char*>(x.data);
  auto* dst = static_cast<unsigned char*>(y.data);
  auto flat = [&](int64_t b, int64_t t) {
    return batch_axis == 0 ? (b * d1 + t) * inner : (t * d1 + b) * inner;
  };
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t l = lens.as<int64_t>()[b];
    for (int64_t t = 0; t < steps; ++t) {
      const int64_t from = t < l ? l - 1 - t : t;
      std::memcpy(dst + static_cast<size_t>(flat(b, t)) * es,
                  src + static_cast<size_t>(flat(b, from)) * es, static_cast<size_t>(inner) * es);
    }
  }
  return OkStatus();
}

// ---- Shrink, Mish ----

Status shrink_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(float bias, ctx.attr_float("bias", 0.0f));
  TD_ASSIGN_OR_RETURN(float lambd, ctx.attr_float("lambd", 0.5f));
  std::vector<double> v = to_doubles(ctx.input(0));
  for (double& e : v) {
    if (e < -lambd)
      e += bias;
    else if (e > lambd)
      e -= bias;
    else
      e = 0;
  }
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  return store_doubles(y, v);
}

Status mish_kernel(KernelContext& ctx) {
  std::vector<double> v = to_doubles(ctx.input(0));
  for (double& e : v) e = e * std::tanh(std::log1p(std::exp(e)));
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  return store_doubles(y, v);
}

// ---- window functions ----

enum class WindowKind { kHann, kHamming, kBlackman };

Status window_kernel(KernelContext& ctx, WindowKind kind) {
  const int64_t size = scalar_int(ctx.input(0));
  if (size < 0) return ctx.error("size must be >= 0, got {}", size);
  TD_ASSIGN_OR_RETURN(int64_t periodic, ctx.attr_int("periodic", 1));
  // A symmetric window of one sample would divide by zero; it is [1] (as in PyTorch).
  const double denom = static_cast<double>(periodic ? size : size - 1);
  std::vector<double> w(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    const double a = denom > 0 ? 2 * kPi * static_cast<double>(i) / denom : 0;
    switch (kind) {
      case WindowKind::kHann:
        w[static_cast<size_t>(i)] = 0.5 - 0.5 * std::cos(a);
        break;
      case WindowKind::kHamming:
        w[static_cast<size_t>(i)] = 25.0 / 46.0 - 21.0 / 46.0 * std::cos(a);
        break;
      case WindowKind::kBlackman:
        w[static_cast<size_t>(i)] = 0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2 * a);
        break;
    }
    if (denom <= 0) w[static_cast<size_t>(i)] = 1;
  }
  TD_ASSIGN_OR_RETURN(MutableTensorView y,
                      ctx.allocate_output(0, ctx.output_type(0).dtype, {size}));
  return store_doubles(y, w);
}

// ---- DFT, STFT ----

// e^(sign * 2 pi i k t / n), with k t reduced mod n for accuracy.
std::complex<double> twiddle(int64_t k, int64_t t, int64_t n, double sign) {
  const double a = sign * 2 * kPi * static_cast<double>((k * t) % n) / static_cast<double>(n);
  return {std::cos(a), std::sin(a)};
}

// Direct DFT of `in` (zero-padded or truncated to n) returning the first `out_len` bins;
// inverse uses e^(+i...) and divides by n.
std::vector<std::complex<double>> direct_dft(const std::vector<std::complex<double>>& in, int64_t n,
                                             int64_t out_len, bool inverse) {
  std::vector<std::complex<double>> out(static_cast<size_t>(out_len));
  const int64_t used = std::min<int64_t>(n, static_cast<int64_t>(in.size()));
  for (int64_t k = 0; k < out_len; ++k) {
    std::complex<double> acc = 0;
    for (int64_t t = 0; t < used; ++t)
      acc += in[static_cast<size_t>(t)] * twiddle(k, t, n, inverse ? 1.0 : -1.0);
    out[static_cast<size_t>(k)] = inverse ? acc / static_cast<double>(n) : acc;
  }
  return out;
}

Status dft_kernel(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  TD_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis", 1));
  if (ctx.has_input(2)) axis = scalar_int(ctx.input(2));  // opset 20: the axis as an input
  if (axis < -rank || axis > rank - 2 || axis == -1)
    return ctx.error("axis {} is out of range for input of shape {}", axis,
                     shape_to_string(x.shape));
  if (axis < 0) axis += rank;
  TD_ASSIGN_OR_RETURN(int64_t inverse, ctx.attr_int("inverse", 0));
  TD_ASSIGN_OR_RETURN(int64_t onesided, ctx.attr_int("onesided", 0));
  const size_t ax = static_cast<size_t>(axis);
  const int64_t in_n = x.shape[ax];
  const int64_t n = ctx.has_input(1) ? scalar_int(ctx.input(1)) : in_n;
  if (n < 1) return ctx.error("dft_length must be >= 1, got {}", n);
  const int64_t out_n = onesided ? n / 2 + 1 : n;
  const int64_t comps = x.shape.back();  // 1: real, 2: complex
  const int64_t outer = product(x.shape, 0, ax);
  const int64_t inner = product(x.shape, ax + 1, x.shape.size() - 1);
  const std::vector<double> v = to_doubles(x);
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  std::vector<double> out(static_cast<size_t>(y.numel()));
  std::vector<std::complex<double>> signal(static_cast<size_t>(in_n));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      for (int64_t t = 0; t < in_n; ++t) {
        const size_t base = static_cast<size_t>(((o * in_n + t) * inner + i) * comps);
        signal[static_cast<size_t>(t)] = {v[base], comps == 2 ? v[base + 1] : 0.0};
      }
      const auto spec = direct_dft(signal, n, out_n, inverse != 0);
      for (int64_t k = 0; k < out_n; ++k) {
        const size_t base = static_cast<size_t>(((o * out_n + k) * inner + i) * 2);
        out[base] = spec[static_cast<size_t>(k)].real();
        out[base + 1] = spec[static_cast<size_t>(k)].imag();
      }
    }
  }
  return store_doubles(y, out);
}

Status stft_kernel(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  TD_ASSIGN_OR_RETURN(int64_t onesided, ctx.attr_int("onesided", 1));
  const int64_t step = scalar_int(ctx.input(1));
  const int64_t batch = x.shape[0], length = x.shape[1], comps = x.shape[2];
  std::vector<double> window;
  if (ctx.has_input(2)) window = to_doubles(ctx.input(2));
  const int64_t frame_length =
      ctx.has_input(3) ? scalar_int(ctx.input(3)) : static_cast<int64_t>(window.size());
  if (window.empty()) window.assign(static_cast<size_t>(frame_length), 1.0);
  if (static_cast<int64_t>(window.size()) != frame_length)
    return ctx.error("frame_length is {} but the window has {} values", frame_length,
                     window.size());
  if (step < 1) return ctx.error("frame_step must be >= 1, got {}", step);
  if (frame_length < 1 || frame_length > length)
    return ctx.error("frame length {} must be in [1, {}] (the signal length)", frame_length,
                     length);
  const int64_t frames = (length - frame_length) / step + 1;
  const int64_t bins = onesided ? frame_length / 2 + 1 : frame_length;
  const std::vector<double> v = to_doubles(x);
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  std::vector<double> out(static_cast<size_t>(y.numel()));
  std::vector<std::complex<double>> frame(static_cast<size_t>(frame_length));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t f = 0; f < frames; ++f) {
      for (int64_t t = 0; t < frame_length; ++t) {
        const size_t base = static_cast<size_t>((b * length + f * step + t) * comps);
        const double w = window[static_cast<size_t>(t)];
        frame[static_cast<size_t>(t)] = {v[base] * w, comps == 2 ? v[base + 1] * w : 0.0};
      }
      const auto spec = direct_dft(frame, frame_length, bins, false);
      for (int64_t k = 0; k < bins; ++k) {
        const size_t base = static_cast<size_t>(((b * frames + f) * bins + k) * 2);
        out[base] = spec[static_cast<size_t>(k)].real();
        out[base + 1] = spec[static_cast<size_t>(k)].imag();
      }
    }
  }
  return store_doubles(y, out);
}

// ---- MelWeightMatrix ----

Status mel_weight_matrix_kernel(KernelContext& ctx) {
  const int64_t num_mel_bins = scalar_int(ctx.input(0));
  const int64_t dft_length = scalar_int(ctx.input(1));
  const int64_t sample_rate = scalar_int(ctx.input(2));
  const double lower = to_doubles(ctx.input(3))[0];
  const double upper = to_doubles(ctx.input(4))[0];
  if (num_mel_bins < 1 || dft_length < 1 || sample_rate < 1)
    return ctx.error("num_mel_bins ({}), dft_length ({}) and sample_rate ({}) must be >= 1",
                     num_mel_bins, dft_length, sample_rate);
  if (!(lower >= 0 && lower <= upper))
    return ctx.error("need 0 <= lower_edge_hertz <= upper_edge_hertz, got {} and {}", lower, upper);
  const int64_t spec_bins = dft_length / 2 + 1;
  // Mel edges in float32 and bin frequencies in float64, as ONNX's reference computes them.
  const float low_mel = 2595.0f * std::log10(1.0f + static_cast<float>(lower) / 700.0f);
  const float high_mel = 2595.0f * std::log10(1.0f + static_cast<float>(upper) / 700.0f);
  const float mel_step = (high_mel - low_mel) / static_cast<float>(num_mel_bins + 2);
  std::vector<int64_t> edges(static_cast<size_t>(num_mel_bins + 2));
  for (size_t k = 0; k < edges.size(); ++k) {
    const double mel = static_cast<double>(k) * mel_step + low_mel;
    const double hz = 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0);
    edges[k] = static_cast<int64_t>(
        std::floor(static_cast<double>(dft_length + 1) * hz / static_cast<double>(sample_rate)));
  }
  if (edges.back() >= spec_bins)
    return ctx.error(
        "upper_edge_hertz {} maps to frequency bin {}, beyond the {} bins of a "
        "{}-point DFT at sample rate {}",
        upper, edges.back(), spec_bins, dft_length, sample_rate);
  std::vector<double> out(static_cast<size_t>(spec_bins * num_mel_bins), 0.0);
  auto at = [&](int64_t j, int64_t i) -> double& {
    return out[static_cast<size_t>(j * num_mel_bins + i)];
  };
  for (int64_t i = 0; i < num_mel_bins; ++i) {
    const int64_t lo = edges[static_cast<size_t>(i)];
    const int64_t center = edges[static_cast<size_t>(i + 1)];
    const int64_t hi = edges[static_cast<size_t>(i + 2)];
    if (center == lo) {
      at(center, i) = 1;
    } else {
      for (int64_t j = lo; j <= center; ++j)
        at(j, i) = static_cast<double>(j - lo) / static_cast<double>(center - lo);
    }
    for (int64_t j = center; j < hi; ++j)
      at(j, i) = static_cast<double>(hi - j) / static_cast<double>(hi - center);
  }
  TD_ASSIGN_OR_RETURN(MutableTensorView y,
                      ctx.allocate_output(0, ctx.output_type(0).dtype, {spec_bins, num_mel_bins}));
  return store_doubles(y, out);
}

// ---- random generators ----
//
// With a seed, the streams are NumPy's legacy RandomState(seed) ones, which ONNX's reference
// implementation uses: MT19937 seeded by init_genrand (std::mt19937 is the same generator),
// 53-bit doubles from two draws, the polar Gaussian method with a cached second value, and
// the inversion algorithm of binomial(1, p). Seeded results therefore equal onnx.reference's.

class LegacyRandom {
 public:
  explicit LegacyRandom(uint32_t seed) : mt_(seed) {}

  double uniform() {  // [0, 1)
    const uint32_t a = static_cast<uint32_t>(mt_()) >> 5, b = static_cast<uint32_t>(mt_()) >> 6;
    return (a * 67108864.0 + b) / 9007199254740992.0;
  }

  double gauss() {
    if (has_gauss_) {
      has_gauss_ = false;
      return gauss_;
    }
    double x1, x2, r2;
    do {
      x1 = 2.0 * uniform() - 1.0;
      x2 = 2.0 * uniform() - 1.0;
      r2 = x1 * x1 + x2 * x2;
    } while (r2 >= 1.0 || r2 == 0.0);
    const double f = std::sqrt(-2.0 * std::log(r2) / r2);
    gauss_ = f * x1;
    has_gauss_ = true;
    return f * x2;
  }

  // binomial(1, p): 0 or 1.
  int64_t bernoulli(double p) {
    if (p == 0.0) return 0;
    return p <= 0.5 ? inversion(p) : 1 - inversion(1.0 - p);
  }

 private:
  // NumPy's random_binomial_inversion for n = 1.
  int64_t inversion(double p) {
    const double q = 1.0 - p;
    const double qn = std::exp(std::log(q));
    const int64_t bound = static_cast<int64_t>(std::min(1.0, p + 10.0 * std::sqrt(p * q + 1)));
    int64_t x = 0;
    double px = qn;
    double u = uniform();
    while (u > px) {
      ++x;
      if (x > bound) {
        x = 0;
        px = qn;
        u = uniform();
      } else {
        u -= px;
        px = ((1 - x + 1) * p * px) / (static_cast<double>(x) * q);
      }
    }
    return x;
  }

  std::mt19937 mt_;
  bool has_gauss_ = false;
  double gauss_ = 0;
};

Result<LegacyRandom> make_rng(const KernelContext& ctx) {
  if (ctx.has_attr("seed")) {
    TD_ASSIGN_OR_RETURN(float seed, ctx.attr_float("seed", 0.0f));
    if (!std::isfinite(seed)) return ctx.error("seed must be finite, got {}", seed);
    return LegacyRandom(static_cast<uint32_t>(static_cast<int64_t>(seed)));
  }
  std::random_device rd;
  return LegacyRandom(rd());
}

// Samples, then `* scale + shift` in the output's precision, as the reference's in-place
// numpy operations on the converted array do.
template <typename F>
void fill_random(LegacyRandom& rng, bool normal, double scale, double shift, F* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    F v = static_cast<F>(normal ? rng.gauss() : rng.uniform());
    v *= static_cast<F>(scale);
    v += static_cast<F>(shift);
    dst[i] = v;
  }
}

Status random_kernel(KernelContext& ctx, bool normal) {
  TD_ASSIGN_OR_RETURN(LegacyRandom rng, make_rng(ctx));
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  double scale, shift;
  if (normal) {
    TD_ASSIGN_OR_RETURN(float mean, ctx.attr_float("mean", 0.0f));
    TD_ASSIGN_OR_RETURN(float sd, ctx.attr_float("scale", 1.0f));
    scale = sd;
    shift = mean;
  } else {
    TD_ASSIGN_OR_RETURN(float low, ctx.attr_float("low", 0.0f));
    TD_ASSIGN_OR_RETURN(float high, ctx.attr_float("high", 1.0f));
    scale = static_cast<double>(high) - low;
    shift = low;
  }
  return dispatch_float(y.dtype, [&](auto tag) -> Status {
    using F = typename decltype(tag)::type;
    fill_random<F>(rng, normal, scale, shift, y.as<F>(), y.numel());
    return OkStatus();
  });
}

Status bernoulli_kernel(KernelContext& ctx) {
  const std::vector<double> p = to_doubles(ctx.input(0));
  for (size_t i = 0; i < p.size(); ++i)
    if (!(p[i] >= 0 && p[i] <= 1))
      return ctx.error("input values are probabilities and must be in [0, 1], got {} at {}", p[i],
                       i);
  TD_ASSIGN_OR_RETURN(LegacyRandom rng, make_rng(ctx));
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  std::vector<double> v(p.size());
  for (size_t i = 0; i < p.size(); ++i) v[i] = static_cast<double>(rng.bernoulli(p[i]));
  if (y.dtype == DType::kBool) {
    for (size_t i = 0; i < v.size(); ++i) y.as<bool>()[i] = v[i] != 0;
    return OkStatus();
  }
  return store_doubles(y, v);
}

}  // namespace

void register_reference_math_kernels(KernelRegistry& r) {
  auto add = [&r](const char* op, KernelFn fn) {
    r.add(KernelDef{op, "reference", nullptr, std::move(fn)});
  };
  add("Einsum", einsum_kernel);
  add("Det", det_kernel);
  add("Compress", compress_kernel);
  add("Unique", unique_kernel);
  add("ReverseSequence", reverse_sequence_kernel);
  add("Shrink", shrink_kernel);
  add("Mish", mish_kernel);
  add("HannWindow", [](KernelContext& c) { return window_kernel(c, WindowKind::kHann); });
  add("HammingWindow", [](KernelContext& c) { return window_kernel(c, WindowKind::kHamming); });
  add("BlackmanWindow", [](KernelContext& c) { return window_kernel(c, WindowKind::kBlackman); });
  add("DFT", dft_kernel);
  add("STFT", stft_kernel);
  add("MelWeightMatrix", mel_weight_matrix_kernel);
  add("RandomNormal", [](KernelContext& c) { return random_kernel(c, true); });
  add("RandomNormalLike", [](KernelContext& c) { return random_kernel(c, true); });
  add("RandomUniform", [](KernelContext& c) { return random_kernel(c, false); });
  add("RandomUniformLike", [](KernelContext& c) { return random_kernel(c, false); });
  add("Bernoulli", bernoulli_kernel);
}

}  // namespace cpu
}  // namespace tensord
