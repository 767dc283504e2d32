// Reference kernels of the reductions (Reduce*, ArgMax, ArgMin).
//
// Floats accumulate in double; integer sums and products wrap around in 64-bit unsigned
// arithmetic (the result is then narrowed, as a wrapping accumulator of the input type would
// give). Reductions over an empty set give the identity of the operation: 0 for sums, 1 for
// products, -inf/+inf (the type's lowest/highest for integers) for max/min, -inf for the log
// sums, NaN (0 for integers) for the mean.
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <type_traits>

#include "backends/cpu/dispatch.h"
#include "backends/cpu/kernel.h"

namespace tensord::cpu {
namespace {

enum class Reduce { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

// The offsets sum_d idx_d * strides[d] of every row-major index of `shape`, in order.
std::vector<int64_t> strided_offsets(const Shape& shape, const std::vector<int64_t>& strides) {
  const int64_t n = shape_numel(shape);
  std::vector<int64_t> out(static_cast<size_t>(n));
  std::vector<int64_t> idx(shape.size(), 0);
  int64_t s = 0;
  for (int64_t i = 0; i < n; ++i) {
    out[static_cast<size_t>(i)] = s;
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) {
        s += strides[d];
        break;
      }
      s -= strides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
  return out;
}

// Narrows a double result to T; integers saturate and NaN becomes 0 (no undefined casts).
template <typename T>
T from_double(double v) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else {
    if (std::isnan(v)) return T(0);
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest()))
      return std::numeric_limits<T>::lowest();
    if (v >= static_cast<double>(std::numeric_limits<T>::max()))
      return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  }
}

template <typename T>
uint64_t wrap(T v) {
  return static_cast<uint64_t>(v);  // two's complement for negative integers
}

template <typename T>
bool is_negative(T v) {
  if constexpr (std::is_signed_v<T>)
    return v < 0;
  else
    return false;
}

template <typename T>
T reduce_values(Reduce op, const std::vector<T>& v) {
  constexpr bool kFloat = std::is_floating_point_v<T>;
  const size_t n = v.size();
  switch (op) {
    case Reduce::kMax:
    case Reduce::kMin: {
      const bool is_max = op == Reduce::kMax;
      T best;
      if constexpr (kFloat)
        best = is_max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
      else
        best = is_max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
      for (T x : v) {
        if constexpr (kFloat)
          if (std::isnan(x)) return x;  // NaN propagates, as numpy's maximum.reduce
        if (is_max ? x > best : x < best) best = x;
      }
      return best;
    }
    case Reduce::kSum:
    case Reduce::kSumSquare:
    case Reduce::kL1:
    case Reduce::kProd:
    case Reduce::kMean: {
      if constexpr (kFloat) {
        double acc = op == Reduce::kProd ? 1.0 : 0.0;
        for (T x : v) {
          const double d = x;
          if (op == Reduce::kProd)
            acc *= d;
          else if (op == Reduce::kSumSquare)
            acc += d * d;
          else if (op == Reduce::kL1)
            acc += std::abs(d);
          else
            acc += d;
        }
        if (op == Reduce::kMean) acc = n ? acc / static_cast<double>(n) : std::nan("");
        return static_cast<T>(acc);
      } else {
        uint64_t acc = op == Reduce::kProd ? 1 : 0;
        for (T x : v) {
          const uint64_t u = wrap(x);
          if (op == Reduce::kProd)
            acc *= u;
          else if (op == Reduce::kSumSquare)
            acc += u * u;
          else if (op == Reduce::kL1)
            acc += is_negative(x) ? 0 - u : u;
          else
            acc += u;
        }
        if (op == Reduce::kMean) {
          if (n == 0) return T(0);
          if constexpr (std::is_signed_v<T>)
            return static_cast<T>(static_cast<int64_t>(acc) / static_cast<int64_t>(n));
          else
            return static_cast<T>(acc / n);
        }
        return static_cast<T>(acc);
      }
    }
    case Reduce::kL2:
    case Reduce::kLogSum: {
      double acc = 0;
      for (T x : v) {
        const double d = static_cast<double>(x);
        acc += op == Reduce::kL2 ? d * d : d;
      }
      return from_double<T>(op == Reduce::kL2 ? std::sqrt(acc) : std::log(acc));
    }
    case Reduce::kLogSumExp: {
      double m = -std::numeric_limits<double>::infinity();
      for (T x : v) {
        const double d = static_cast<double>(x);
        if (std::isnan(d)) return from_double<T>(d);
        m = std::max(m, d);
      }
      if (std::isinf(m)) return from_double<T>(m);  // empty, all -inf, or some +inf
      double acc = 0;
      for (T x : v) acc += std::exp(static_cast<double>(x) - m);
      return from_double<T>(m + std::log(acc));
    }
  }
  return T(0);
}

// Which axes to reduce (the axes input, else the attribute); `noop` when the axes are empty
// with noop_with_empty_axes set.
Status reduce_mask(const KernelContext& ctx, bool axes_from_input, std::vector<bool>* mask,
                   bool* noop) {
  const int64_t rank = static_cast<int64_t>(ctx.input(0).shape.size());
  std::vector<int64_t> axes;
  *noop = false;
  TD_ASSIGN_OR_RETURN(int64_t noop_attr, ctx.attr_int("noop_with_empty_axes", 0));
  if (axes_from_input || ctx.has_input(1)) {
    if (ctx.has_input(1)) {
      const TensorView& a = ctx.input(1);
      if (a.dtype != DType::kInt64)
        return ctx.error("axes must be int64, got {}", dtype_name(a.dtype));
      axes.assign(a.as<int64_t>(), a.as<int64_t>() + a.numel());
    }
  } else {
    TD_ASSIGN_OR_RETURN(axes, ctx.attr_ints("axes"));
  }
  *noop = axes.empty() && noop_attr != 0;
  mask->assign(static_cast<size_t>(rank), axes.empty() && !*noop);
  std::set<int64_t> seen;
  for (int64_t a : axes) {
    if (a < -rank || a >= rank)
      return ctx.error("axis {} is out of range for rank {} (axes {})", a, rank, axes);
    const int64_t k = a < 0 ? a + rank : a;
    if (!seen.insert(k).second) return ctx.error("axis {} is repeated in axes {}", a, axes);
    (*mask)[static_cast<size_t>(k)] = true;
  }
  return OkStatus();
}

// The axes as a mask; true when there is nothing to reduce (noop_with_empty_axes): then the
// input has been copied to the output.
Result<bool> reduce_prologue(KernelContext& ctx, bool axes_from_input, const TensorView& in,
                             const MutableTensorView& out, std::vector<bool>* mask) {
  bool noop = false;
  TD_RETURN_IF_ERROR(reduce_mask(ctx, axes_from_input, mask, &noop));
  if (noop && in.nbytes()) std::memcpy(out.data, in.data, static_cast<size_t>(in.nbytes()));
  return noop;
}

Status reduce_kernel(KernelContext& ctx, Reduce op, bool axes_from_input) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& in = ctx.input(0);
  std::vector<bool> mask;
  TD_ASSIGN_OR_RETURN(bool copied, reduce_prologue(ctx, axes_from_input, in, out, &mask));
  if (copied) return OkStatus();
  const auto st = strides_of(in.shape);
  Shape kept_shape, red_shape;
  std::vector<int64_t> kept_st, red_st;
  for (size_t d = 0; d < in.shape.size(); ++d) {
    (mask[d] ? red_shape : kept_shape).push_back(in.shape[d]);
    (mask[d] ? red_st : kept_st).push_back(st[d]);
  }
  const auto outer = strided_offsets(kept_shape, kept_st);
  const auto inner = strided_offsets(red_shape, red_st);
  if (static_cast<int64_t>(outer.size()) != out.numel())
    return ctx.make_error(StatusCode::kInternal,
                          fmt::format("output {} does not match the reduction of {}",
                                      shape_to_string(out.shape), shape_to_string(in.shape)));
  if (in.dtype == DType::kBool) {  // ReduceMax / ReduceMin (opset 20): any / all
    if (op != Reduce::kMax && op != Reduce::kMin)
      return ctx.error("bool data can only be reduced by ReduceMax and ReduceMin");
    const bool* src = in.as<bool>();
    bool* dst = out.as<bool>();
    for (size_t o = 0; o < outer.size(); ++o) {
      bool acc = op == Reduce::kMin;
      for (size_t j = 0; j < inner.size(); ++j)
        acc = op == Reduce::kMax ? (acc || src[outer[o] + inner[j]]) : (acc && src[outer[o] + inner[j]]);
      dst[o] = acc;
    }
    return OkStatus();
  }
  return dispatch_numeric(in.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* src = in.as<T>();
    T* dst = out.as<T>();
    std::vector<T> buf(inner.size());
    for (size_t o = 0; o < outer.size(); ++o) {
      for (size_t j = 0; j < inner.size(); ++j) buf[j] = src[outer[o] + inner[j]];
      dst[o] = reduce_values<T>(op, buf);
    }
    return OkStatus();
  });
}

Status arg_kernel(KernelContext& ctx, bool is_max) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& in = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  TD_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis", 0));
  TD_ASSIGN_OR_RETURN(int64_t last, ctx.attr_int("select_last_index", 0));
  if (axis < 0) axis += rank;
  const size_t a = static_cast<size_t>(axis);
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < a; ++d) outer *= in.shape[d];
  for (size_t d = a + 1; d < in.shape.size(); ++d) inner *= in.shape[d];
  const int64_t n = in.shape[a];
  if (n == 0 && out.numel() > 0)
    return ctx.error("cannot take the arg of an empty axis {} (input {})", axis,
                     shape_to_string(in.shape));
  return dispatch_numeric(in.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* src = in.as<T>();
    int64_t* dst = out.as<int64_t>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < inner; ++j) {
        int64_t best = 0;
        T bv = src[o * n * inner + j];
        for (int64_t t = 1; t < n; ++t) {
          const T v = src[(o * n + t) * inner + j];
          bool take;
          if constexpr (std::is_floating_point_v<T>) {
            // The first (or last) NaN wins, as numpy's argmax/argmin.
            if (std::isnan(bv))
              take = last && std::isnan(v);
            else if (std::isnan(v))
              take = true;
            else
              take = is_max ? (last ? v >= bv : v > bv) : (last ? v <= bv : v < bv);
          } else {
            take = is_max ? (last ? v >= bv : v > bv) : (last ? v <= bv : v < bv);
          }
          if (take) {
            best = t;
            bv = v;
          }
        }
        dst[o * inner + j] = best;
      }
    return OkStatus();
  });
}

// reduce_sum_fast's inner loops, compiled for AVX-512, AVX2 and baseline x86-64 (the loader
// picks one): the baseline build's SSE2 converted and added two doubles at a time (ReduceMean
// over a gathered [64, 128] was 12% of an EmbeddingBag export's time).
// The sum of row[0:n] in double, in eight interleaved partial sums.
__attribute__((target_clones("avx512f", "avx2", "default"))) double sum_in_double(
    const float* __restrict row, int64_t n) {
  double s[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += row[i + j];
  for (; i < n; ++i) s[0] += row[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// a[0:n] += row[0:n], in double.
__attribute__((target_clones("avx512f", "avx2", "default"))) void add_in_double(
    double* __restrict a, const float* __restrict row, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] += row[i];
}

// ReduceSum / ReduceMean over float32, fast: the axes collapsed into alternating runs of kept
// and reduced dimensions, the innermost run walked contiguously (kept: rows accumulated
// element-wise; reduced: each row summed), in double, in one pass over the input. The
// reductions gradients are made of (bias gradients over [N, T, D] or NCHW, broadcast
// gradients summed back), which the reference (a gather of each output's values) took 1.6 ms
// for; any axes are taken.
Status reduce_sum_fast(KernelContext& ctx, bool mean, bool axes_from_input) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& in = ctx.input(0);
  std::vector<bool> mask;
  TD_ASSIGN_OR_RETURN(bool copied, reduce_prologue(ctx, axes_from_input, in, out, &mask));
  if (copied) return OkStatus();
  // Collapse into runs: sizes[k], reduced[k] (dims of size 1 join any run).
  std::vector<int64_t> sizes;
  std::vector<bool> reduced;
  int64_t count = 1;
  for (size_t d = 0; d < in.shape.size(); ++d) {
    const int64_t n = in.shape[d];
    if (mask[d]) count *= n;
    if (n == 1) continue;
    if (!sizes.empty() && reduced.back() == mask[d]) {
      sizes.back() *= n;
    } else {
      sizes.push_back(n);
      reduced.push_back(mask[d]);
    }
  }
  const int64_t total = in.numel();
  const int64_t outs = out.numel();
  std::vector<double> acc(static_cast<size_t>(outs), 0.0);
  const float* x = in.as<float>();
  if (total > 0 && !sizes.empty()) {
    const size_t k = sizes.size() - 1;
    const int64_t inner = sizes[k];
    // Input strides of the runs; output strides of the kept runs (0 for reduced ones).
    std::vector<int64_t> ist(sizes.size()), ost(sizes.size());
    int64_t is = 1, os = 1;
    for (size_t g = sizes.size(); g-- > 0;) {
      ist[g] = is;
      is *= sizes[g];
      ost[g] = reduced[g] ? 0 : os;
      if (!reduced[g]) os *= sizes[g];
    }
    std::vector<int64_t> pos(k, 0);
    const int64_t rows = total / inner;
    int64_t in_off = 0, out_off = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = x + in_off;
      if (reduced[k])
        acc[static_cast<size_t>(out_off)] += sum_in_double(row, inner);
      else
        add_in_double(acc.data() + out_off, row, inner);
      // The next row: an odometer over the outer runs.
      for (size_t g = k; g-- > 0;) {
        in_off += ist[g];
        out_off += ost[g];
        if (++pos[g] < sizes[g]) break;
        in_off -= ist[g] * sizes[g];
        out_off -= ost[g] * sizes[g];
        pos[g] = 0;
      }
    }
  } else if (total > 0) {  // every dim is 1
    acc[0] = x[0];
  }
  float* y = out.as<float>();
  const double scale = mean ? (count > 0 ? 1.0 / static_cast<double>(count)
                                         : std::numeric_limits<double>::quiet_NaN())
                            : 1.0;
  for (int64_t o = 0; o < outs; ++o) y[o] = static_cast<float>(acc[static_cast<size_t>(o)] * scale);
  return OkStatus();
}

Status reduce_fast_accepts(const Node& node, const std::vector<TensorType>& in) {
  if (in.empty() || in[0].dtype != DType::kFloat32)
    return Status(StatusCode::kUnimplemented, node.op + ": fast kernel is float32 only");
  return OkStatus();
}

}  // namespace

void register_reference_reduction_kernels(KernelRegistry& r) {
  const std::pair<const char*, Reduce> ops[] = {{"ReduceSum", Reduce::kSum},
                                                {"ReduceMean", Reduce::kMean},
                                                {"ReduceMax", Reduce::kMax},
                                                {"ReduceMin", Reduce::kMin},
                                                {"ReduceProd", Reduce::kProd},
                                                {"ReduceL1", Reduce::kL1},
                                                {"ReduceL2", Reduce::kL2},
                                                {"ReduceLogSum", Reduce::kLogSum},
                                                {"ReduceLogSumExp", Reduce::kLogSumExp},
                                                {"ReduceSumSquare", Reduce::kSumSquare}};
  // Fast ReduceSum/ReduceMean first (float32).
  r.add(KernelDef{"ReduceSum", "fast", reduce_fast_accepts,
                  [](KernelContext& ctx) { return reduce_sum_fast(ctx, false, true); }});
  r.add(KernelDef{"ReduceMean", "fast", reduce_fast_accepts,
                  [](KernelContext& ctx) { return reduce_sum_fast(ctx, true, false); }});
  for (const auto& [name, op] : ops) {
    const bool from_input = op == Reduce::kSum;
    r.add(KernelDef{name, "reference", nullptr, [op = op, from_input](KernelContext& ctx) {
                      return reduce_kernel(ctx, op, from_input);
                    }});
  }
  r.add(KernelDef{"ArgMax", "reference", nullptr,
                  [](KernelContext& ctx) { return arg_kernel(ctx, /*is_max=*/true); }});
  r.add(KernelDef{"ArgMin", "reference", nullptr,
                  [](KernelContext& ctx) { return arg_kernel(ctx, /*is_max=*/false); }});
}

}  // namespace tensord::cpu
