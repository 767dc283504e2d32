// Reference kernels of the element-wise ops: plain loops over the output, with one
// broadcasting helper (BroadcastIter) shared by every binary, variadic and Where kernel.
//
// Integer arithmetic wraps around (two's complement) instead of invoking undefined
// behaviour; integer division or remainder by zero is an INVALID_ARGUMENT error.
// Float16/bfloat16 reach these kernels widened to float32 (see KernelDef), except in Where,
// which only moves bytes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/dispatch.h"
#include "backends/cpu/kernel.h"

namespace tensord::cpu {
namespace {

// ---- broadcasting ----

// Walks the elements of an output shape in row-major order and keeps, for each input, the
// offset of the element that broadcasts to the current output element (numpy rules: input
// shapes are right-aligned; a dimension of 1 repeats).
class BroadcastIter {
 public:
  // Error when an input shape does not broadcast to `out`.
  static Result<BroadcastIter> create(const Shape& out, const std::vector<const Shape*>& inputs) {
    BroadcastIter it;
    const size_t rank = out.size();
    it.out_ = out;
    it.index_.assign(rank, 0);
    it.offsets_.assign(inputs.size(), 0);
    for (const Shape* in : inputs) {
      if (in->size() > rank)
        return errors::InvalidArgument("input of shape {} does not broadcast to output shape {}",
                                       shape_to_string(*in), shape_to_string(out));
      std::vector<int64_t> strides(rank, 0);
      int64_t stride = 1;
      for (size_t k = 0; k < in->size(); ++k) {
        const size_t d_in = in->size() - 1 - k;
        const size_t d_out = rank - 1 - k;
        const int64_t dim = (*in)[d_in];
        if (dim != out[d_out] && dim != 1)
          return errors::InvalidArgument("input of shape {} does not broadcast to output shape {}",
                                         shape_to_string(*in), shape_to_string(out));
        strides[d_out] = dim == 1 ? 0 : stride;
        stride *= dim;
      }
      it.strides_.push_back(std::move(strides));
    }
    return it;
  }

  // Offset into input `k` of the current output element.
  int64_t offset(size_t k) const { return offsets_[k]; }

  // Moves to the next output element.
  void next() {
    for (size_t d = out_.size(); d-- > 0;) {
      ++index_[d];
      for (size_t k = 0; k < offsets_.size(); ++k) offsets_[k] += strides_[k][d];
      if (index_[d] < out_[d]) return;
      for (size_t k = 0; k < offsets_.size(); ++k) offsets_[k] -= strides_[k][d] * out_[d];
      index_[d] = 0;
    }
  }

 private:
  Shape out_;
  std::vector<int64_t> index_;
  std::vector<std::vector<int64_t>> strides_;  // per input, per output dim (0: broadcast)
  std::vector<int64_t> offsets_;
};

// Output 0 and an iterator over it for inputs `inputs` (omitted ones skipped by the caller).
struct BroadcastOut {
  MutableTensorView out;
  BroadcastIter it;
};

Result<BroadcastOut> broadcast_output(KernelContext& ctx, const std::vector<int>& inputs) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  std::vector<const Shape*> shapes;
  for (int i : inputs) shapes.push_back(&ctx.input(i).shape);
  TD_ASSIGN_OR_RETURN(BroadcastIter it, BroadcastIter::create(out.shape, shapes));
  return BroadcastOut{out, std::move(it)};
}

// ---- scalar helpers ----

template <typename T>
constexpr bool kIsInt = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// Two's-complement wrapping add/sub/mul for integers (no signed-overflow UB); plain for floats.
template <typename T>
T wrap_add(T a, T b) {
  if constexpr (kIsInt<T>)
    return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  else
    return a + b;
}
template <typename T>
T wrap_sub(T a, T b) {
  if constexpr (kIsInt<T>)
    return static_cast<T>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
  else
    return a - b;
}
template <typename T>
T wrap_mul(T a, T b) {
  if constexpr (kIsInt<T>)
    return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  else
    return a * b;
}
template <typename T>
T wrap_neg(T a) {
  if constexpr (kIsInt<T>)
    return static_cast<T>(uint64_t{0} - static_cast<uint64_t>(a));
  else
    return -a;
}

// Integer division truncating toward zero (C, and ONNX's reference); b != 0. The one
// overflowing case, min / -1, wraps to min.
template <typename T>
T int_div(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return wrap_neg(a);
  }
  return static_cast<T>(a / b);
}

// Remainder with the sign of the dividend (C %, fmod=1); b != 0.
template <typename T>
T int_rem(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return 0;
  }
  return static_cast<T>(a % b);
}

// Remainder with the sign of the divisor (Python %, fmod=0); b != 0.
template <typename T>
T int_mod(T a, T b) {
  T r = int_rem(a, b);
  if constexpr (std::is_signed_v<T>) {
    if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
  }
  return r;
}

// A float value converted to an integer type, truncating toward zero. Values in int64's range
// wrap to the target width (as numpy and x86 do for -1.0 -> uint8 255); NaN gives 0 and
// values beyond int64 (uint64 for uint64) saturate, where C++ would be undefined.
template <typename T>
T float_to_int(double v) {
  if (std::isnan(v)) return 0;
  v = std::trunc(v);
  constexpr double kTwo63 = 9223372036854775808.0;
  if constexpr (std::is_same_v<T, uint64_t>) {
    if (v >= 2 * kTwo63) return std::numeric_limits<T>::max();
    if (v >= 0) return static_cast<uint64_t>(v);
  }
  if (v >= kTwo63) return std::numeric_limits<T>::max();
  if (v < -kTwo63) return std::numeric_limits<T>::min();
  return static_cast<T>(static_cast<int64_t>(v));
}

// Element conversion for Cast and for results computed in double.
template <typename D, typename S>
D convert(S v) {
  if constexpr (std::is_same_v<D, bool>) {
    return v != S(0);  // NaN is true, as in C and numpy
  } else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
    return float_to_int<D>(static_cast<double>(v));
  } else {
    return static_cast<D>(v);  // integers wrap (C++20), floats round to nearest
  }
}

// Round half to even, independent of the floating-point environment.
double round_half_even(double x) {
  const double r = std::round(x);  // half away from zero
  if (std::fabs(x - std::trunc(x)) == 0.5) return 2.0 * std::round(x / 2.0);
  return r;
}

// ---- generic loops ----

// out[i] = f(a[i'], b[i'']) with broadcasting; TIn is the inputs' type, TOut the output's.
template <typename TIn, typename TOut, typename F>
Status binary_loop(KernelContext& ctx, F f) {
  TD_ASSIGN_OR_RETURN(BroadcastOut bo, broadcast_output(ctx, {0, 1}));
  const TIn* a = ctx.input(0).as<TIn>();
  const TIn* b = ctx.input(1).as<TIn>();
  TOut* out = bo.out.as<TOut>();
  const int64_t n = bo.out.numel();
  for (int64_t i = 0; i < n; ++i, bo.it.next()) out[i] = f(a[bo.it.offset(0)], b[bo.it.offset(1)]);
  return OkStatus();
}

// out[i] = f(x[i]).
template <typename TIn, typename TOut, typename F>
Status unary_loop(KernelContext& ctx, F f) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TIn* x = ctx.input(0).as<TIn>();
  TOut* y = out.as<TOut>();
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
  return OkStatus();
}

// A float op computed in double and rounded to the input's type (float32 or float64).
Status unary_float(KernelContext& ctx, const std::function<double(double)>& f) {
  return dispatch_float(ctx.input(0).dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    return unary_loop<T, T>(ctx, [&](T x) { return static_cast<T>(f(static_cast<double>(x))); });
  });
}

// Error when an integer divisor (input 1) holds a zero.
template <typename T>
Status check_no_zero_divisor(const KernelContext& ctx) {
  if constexpr (kIsInt<T>) {
    const TensorView& b = ctx.input(1);
    const T* p = b.as<T>();
    for (int64_t i = 0, n = b.numel(); i < n; ++i)
      if (p[i] == 0)
        return ctx.error("integer division by zero (element {} of divisor of shape {} is 0)", i,
                         shape_to_string(b.shape));
  }
  return OkStatus();
}

// ---- arithmetic ----

enum class Arith { kAdd, kSub, kMul, kDiv };

KernelFn arith_kernel(Arith op) {
  return [op](KernelContext& ctx) -> Status {
    return dispatch_numeric(ctx.input(0).dtype, [&](auto tag) -> Status {
      using T = typename decltype(tag)::type;
      switch (op) {
        case Arith::kAdd:
          return binary_loop<T, T>(ctx, wrap_add<T>);
        case Arith::kSub:
          return binary_loop<T, T>(ctx, wrap_sub<T>);
        case Arith::kMul:
          return binary_loop<T, T>(ctx, wrap_mul<T>);
        case Arith::kDiv:
          if constexpr (kIsInt<T>) {
            TD_RETURN_IF_ERROR(check_no_zero_divisor<T>(ctx));
            return binary_loop<T, T>(ctx, int_div<T>);
          } else {
            return binary_loop<T, T>(ctx, [](T a, T b) { return a / b; });
          }
      }
      return OkStatus();
    });
  };
}

Status mod_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(int64_t fmod, ctx.attr_int("fmod", 0));
  return dispatch_numeric(ctx.input(0).dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    if constexpr (kIsInt<T>) {
      TD_RETURN_IF_ERROR(check_no_zero_divisor<T>(ctx));
      if (fmod) return binary_loop<T, T>(ctx, int_rem<T>);
      return binary_loop<T, T>(ctx, int_mod<T>);
    } else {
      return binary_loop<T, T>(ctx, [](T a, T b) { return static_cast<T>(std::fmod(a, b)); });
    }
  });
}

// Integer power; a negative exponent gives 1/base^|e| truncated toward zero.
template <typename T>
T int_pow(T base, int64_t e) {
  if (e < 0) {
    if (base == 1) return 1;
    if constexpr (std::is_signed_v<T>) {
      if (base == -1) return (e % 2 == 0) ? T(1) : T(-1);
    }
    return 0;  // |1/base^|e|| < 1; base 0 (a division by zero) also gives 0
  }
  T result = 1;
  while (e > 0) {
    if (e & 1) result = wrap_mul(result, base);
    base = wrap_mul(base, base);
    e >>= 1;
  }
  return result;
}

Status pow_kernel(KernelContext& ctx) {
  const DType base_type = ctx.input(0).dtype;
  if (base_type != DType::kFloat32 && base_type != DType::kFloat64 && base_type != DType::kInt32 &&
      base_type != DType::kInt64)
    return ctx.unimplemented("base dtype {} is not supported", dtype_name(base_type));
  return dispatch_numeric(base_type, [&](auto base_tag) -> Status {
    using T = typename decltype(base_tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                  std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>) {
      return dispatch_numeric(ctx.input(1).dtype, [&](auto exp_tag) -> Status {
        using E = typename decltype(exp_tag)::type;
        TD_ASSIGN_OR_RETURN(BroadcastOut bo, broadcast_output(ctx, {0, 1}));
        const T* a = ctx.input(0).as<T>();
        const E* b = ctx.input(1).as<E>();
        T* out = bo.out.as<T>();
        for (int64_t i = 0, n = bo.out.numel(); i < n; ++i, bo.it.next()) {
          const T x = a[bo.it.offset(0)];
          const E e = b[bo.it.offset(1)];
          if constexpr (kIsInt<T> && kIsInt<E>) {
            // uint64 exponents beyond int64 only matter for bases 0, 1, -1: clamp keeps parity.
            const int64_t ei = std::is_same_v<E, uint64_t> &&
                                       static_cast<uint64_t>(e) > static_cast<uint64_t>(INT64_MAX)
                                   ? INT64_MAX - 1 + static_cast<int64_t>(e & 1)
                                   : static_cast<int64_t>(e);
            out[i] = int_pow(x, ei);
          } else {
            out[i] = convert<T>(std::pow(static_cast<double>(x), static_cast<double>(e)));
          }
        }
        return OkStatus();
      });
    } else {
      return OkStatus();  // unreachable: rejected above
    }
  });
}

// ---- bitwise ----

enum class Bitwise { kAnd, kOr, kXor, kShiftLeft, kShiftRight };

KernelFn bitwise_kernel(Bitwise op) {
  return [op](KernelContext& ctx) -> Status {
    return dispatch_numeric(ctx.input(0).dtype, [&](auto tag) -> Status {
      using T = typename decltype(tag)::type;
      if constexpr (kIsInt<T>) {
        constexpr uint64_t kBits = sizeof(T) * 8;
        switch (op) {
          case Bitwise::kAnd:
            return binary_loop<T, T>(ctx, [](T a, T b) { return T(a & b); });
          case Bitwise::kOr:
            return binary_loop<T, T>(ctx, [](T a, T b) { return T(a | b); });
          case Bitwise::kXor:
            return binary_loop<T, T>(ctx, [](T a, T b) { return T(a ^ b); });
          // Shifts by the width or more give 0 (C++ would be undefined).
          case Bitwise::kShiftLeft:
            return binary_loop<T, T>(ctx, [](T a, T b) {
              const uint64_t s = static_cast<uint64_t>(b);
              return s >= kBits ? T(0) : static_cast<T>(static_cast<uint64_t>(a) << s);
            });
          case Bitwise::kShiftRight:
            return binary_loop<T, T>(ctx, [](T a, T b) {
              const uint64_t s = static_cast<uint64_t>(b);
              return s >= kBits ? T(0) : static_cast<T>(static_cast<uint64_t>(a) >> s);
            });
        }
        return OkStatus();
      } else {
        return ctx.unimplemented("dtype {} is not an integer type", dtype_name(ctx.input(0).dtype));
      }
    });
  };
}

Status bitshift_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(std::string dir, ctx.attr_string("direction", ""));
  if (dir == "LEFT") return bitwise_kernel(Bitwise::kShiftLeft)(ctx);
  if (dir == "RIGHT") return bitwise_kernel(Bitwise::kShiftRight)(ctx);
  return ctx.error("attribute direction must be \"LEFT\" or \"RIGHT\", got \"{}\"", dir);
}

Status bitwise_not_kernel(KernelContext& ctx) {
  return dispatch_numeric(ctx.input(0).dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    if constexpr (kIsInt<T>) {
      return unary_loop<T, T>(ctx, [](T x) { return static_cast<T>(~x); });
    } else {
      return ctx.unimplemented("dtype {} is not an integer type", dtype_name(ctx.input(0).dtype));
    }
  });
}

// ---- comparison and logic ----

enum class Compare { kEqual, kLess, kGreater, kLessOrEqual, kGreaterOrEqual };

KernelFn compare_kernel(Compare op) {
  return [op](KernelContext& ctx) -> Status {
    return dispatch_all(ctx.input(0).dtype, [&](auto tag) -> Status {
      using T = typename decltype(tag)::type;
      switch (op) {
        case Compare::kEqual:
          return binary_loop<T, bool>(ctx, [](T a, T b) { return a == b; });
        case Compare::kLess:
          return binary_loop<T, bool>(ctx, [](T a, T b) { return a < b; });
        case Compare::kGreater:
          return binary_loop<T, bool>(ctx, [](T a, T b) { return a > b; });
        case Compare::kLessOrEqual:
          return binary_loop<T, bool>(ctx, [](T a, T b) { return a <= b; });
        case Compare::kGreaterOrEqual:
          return binary_loop<T, bool>(ctx, [](T a, T b) { return a >= b; });
      }
      return OkStatus();
    });
  };
}

enum class Logic { kAnd, kOr, kXor };

KernelFn logic_kernel(Logic op) {
  return [op](KernelContext& ctx) -> Status {
    if (ctx.input(0).dtype != DType::kBool)
      return ctx.unimplemented("dtype {} is not bool", dtype_name(ctx.input(0).dtype));
    switch (op) {
      case Logic::kAnd:
        return binary_loop<bool, bool>(ctx, [](bool a, bool b) { return a && b; });
      case Logic::kOr:
        return binary_loop<bool, bool>(ctx, [](bool a, bool b) { return a || b; });
      case Logic::kXor:
        return binary_loop<bool, bool>(ctx, [](bool a, bool b) { return a != b; });
    }
    return OkStatus();
  };
}

Status not_kernel(KernelContext& ctx) {
  if (ctx.input(0).dtype != DType::kBool)
    return ctx.unimplemented("dtype {} is not bool", dtype_name(ctx.input(0).dtype));
  return unary_loop<bool, bool>(ctx, [](bool x) { return !x; });
}

// ---- variadic ----

enum class Variadic { kMin, kMax, kSum, kMean };

// NaN-propagating min/max (numpy's minimum/maximum, as ONNX's reference uses).
template <typename T>
T nan_min(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  }
  return b < a ? b : a;
}
template <typename T>
T nan_max(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  }
  return b > a ? b : a;
}

KernelFn variadic_kernel(Variadic op) {
  return [op](KernelContext& ctx) -> Status {
    std::vector<int> inputs;
    for (int i = 0; i < ctx.num_inputs(); ++i) inputs.push_back(i);
    auto body = [&](auto tag) -> Status {
      using T = typename decltype(tag)::type;
      TD_ASSIGN_OR_RETURN(BroadcastOut bo, broadcast_output(ctx, inputs));
      T* out = bo.out.as<T>();
      const size_t k_inputs = inputs.size();
      for (int64_t i = 0, n = bo.out.numel(); i < n; ++i, bo.it.next()) {
        T acc = ctx.input(0).as<T>()[bo.it.offset(0)];
        for (size_t k = 1; k < k_inputs; ++k) {
          const T v = ctx.input(static_cast<int>(k)).as<T>()[bo.it.offset(k)];
          if (op == Variadic::kMin)
            acc = nan_min(acc, v);
          else if (op == Variadic::kMax)
            acc = nan_max(acc, v);
          else
            acc = wrap_add(acc, v);
        }
        if constexpr (std::is_floating_point_v<T>) {
          if (op == Variadic::kMean) acc = acc / static_cast<T>(k_inputs);
        }
        out[i] = acc;
      }
      return OkStatus();
    };
    if (op == Variadic::kSum || op == Variadic::kMean)
      return dispatch_float(ctx.input(0).dtype, body);
    return dispatch_numeric(ctx.input(0).dtype, body);
  };
}

// ---- unary math over every numeric type ----

Status neg_kernel(KernelContext& ctx) {
  return dispatch_numeric(ctx.input(0).dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    return unary_loop<T, T>(ctx, wrap_neg<T>);
  });
}

Status abs_kernel(KernelContext& ctx) {
  return dispatch_numeric(ctx.input(0).dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    return unary_loop<T, T>(ctx, [](T x) -> T {
      if constexpr (std::is_floating_point_v<T>)
        return std::fabs(x);
      else if constexpr (std::is_signed_v<T>)
        return x < 0 ? wrap_neg(x) : x;  // |min| wraps
      else
        return x;
    });
  });
}

Status sign_kernel(KernelContext& ctx) {
  return dispatch_numeric(ctx.input(0).dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    return unary_loop<T, T>(ctx, [](T x) -> T {
      if (x > T(0)) return T(1);
      if constexpr (std::is_signed_v<T>) {
        if (x < T(0)) return T(-1);
      }
      if (x == T(0)) return T(0);
      return x;  // NaN
    });
  });
}

Status relu_kernel(KernelContext& ctx) {
  return dispatch_numeric(ctx.input(0).dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    return unary_loop<T, T>(ctx, [](T x) { return x < T(0) ? T(0) : x; });  // keeps NaN
  });
}

Status erf_kernel(KernelContext& ctx) {
  return dispatch_numeric(ctx.input(0).dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    return unary_loop<T, T>(ctx, [](T x) { return convert<T>(std::erf(static_cast<double>(x))); });
  });
}

Status isnan_kernel(KernelContext& ctx) {
  return dispatch_float(ctx.input(0).dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    return unary_loop<T, bool>(ctx, [](T x) { return std::isnan(x); });
  });
}

Status isinf_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(int64_t neg, ctx.attr_int("detect_negative", 1));
  TD_ASSIGN_OR_RETURN(int64_t pos, ctx.attr_int("detect_positive", 1));
  return dispatch_float(ctx.input(0).dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    return unary_loop<T, bool>(
        ctx, [&](T x) { return std::isinf(x) && ((x > 0 && pos != 0) || (x < 0 && neg != 0)); });
  });
}

// ---- float math and activations ----

// A float op whose function may read float attributes.
using FloatFnMaker = std::function<Result<std::function<double(double)>>(const KernelContext&)>;

KernelFn float_attr_kernel(FloatFnMaker make) {
  return [make](KernelContext& ctx) -> Status {
    TD_ASSIGN_OR_RETURN(std::function<double(double)> f, make(ctx));
    return unary_float(ctx, f);
  };
}

KernelFn float_kernel(double (*f)(double)) {
  return [f](KernelContext& ctx) -> Status { return unary_float(ctx, f); };
}

double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

// log(1 + exp(x)) without overflow for large x.
double softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

Status prelu_kernel(KernelContext& ctx) {
  return dispatch_numeric(ctx.input(0).dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    return binary_loop<T, T>(ctx, [](T x, T slope) { return x < T(0) ? wrap_mul(x, slope) : x; });
  });
}

// ---- selection and conversion ----

Status clip_kernel(KernelContext& ctx) {
  return dispatch_numeric(ctx.input(0).dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    T lo = std::numeric_limits<T>::lowest();
    T hi = std::numeric_limits<T>::max();
    if constexpr (std::is_floating_point_v<T>) {
      lo = -std::numeric_limits<T>::infinity();
      hi = std::numeric_limits<T>::infinity();
    }
    for (int i = 1; i <= 2; ++i) {
      if (!ctx.has_input(i)) continue;
      const TensorView& v = ctx.input(i);
      if (v.numel() != 1)
        return ctx.error("{} (input {}) must be a scalar, got shape {}", i == 1 ? "min" : "max", i,
                         shape_to_string(v.shape));
      (i == 1 ? lo : hi) = v.as<T>()[0];
    }
    // max then min: when min > max every value becomes max, as ONNX specifies; NaN stays NaN.
    return unary_loop<T, T>(ctx, [&](T x) {
      const T y = x < lo ? lo : x;
      return y > hi ? hi : y;
    });
  });
}

Status where_kernel(KernelContext& ctx) {
  if (ctx.input(0).dtype != DType::kBool)
    return ctx.error("condition must be bool, got {}", dtype_name(ctx.input(0).dtype));
  return dispatch_by_size(ctx.input(1).dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    TD_ASSIGN_OR_RETURN(BroadcastOut bo, broadcast_output(ctx, {0, 1, 2}));
    const bool* c = ctx.input(0).as<bool>();
    const T* x = ctx.input(1).as<T>();
    const T* y = ctx.input(2).as<T>();
    T* out = bo.out.as<T>();
    for (int64_t i = 0, n = bo.out.numel(); i < n; ++i, bo.it.next())
      out[i] = c[bo.it.offset(0)] ? x[bo.it.offset(1)] : y[bo.it.offset(2)];
    return OkStatus();
  });
}

// Converts input 0 to output 0's dtype (the executor has already widened float16/bfloat16 to
// float32 on both sides and narrows the output back, rounding to nearest even).
Status cast_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& in = ctx.input(0);
  return dispatch_all(in.dtype, [&](auto src_tag) -> Status {
    using S = typename decltype(src_tag)::type;
    return dispatch_all(out.dtype, [&](auto dst_tag) -> Status {
      using D = typename decltype(dst_tag)::type;
      const S* src = in.as<S>();
      D* dst = out.as<D>();
      for (int64_t i = 0, n = out.numel(); i < n; ++i) dst[i] = convert<D>(src[i]);
      return OkStatus();
    });
  });
}

}  // namespace

void register_reference_elementwise_kernels(KernelRegistry& r) {
  auto add = [&r](const std::string& op, KernelFn fn, bool native_low_precision = false) {
    r.add(KernelDef{op, "reference", nullptr, std::move(fn), native_low_precision});
  };

  // Arithmetic and bitwise.
  add("Add", arith_kernel(Arith::kAdd));
  add("Sub", arith_kernel(Arith::kSub));
  add("Mul", arith_kernel(Arith::kMul));
  add("Div", arith_kernel(Arith::kDiv));
  add("Pow", pow_kernel);
  add("Mod", mod_kernel);
  add("BitShift", bitshift_kernel);
  add("BitwiseAnd", bitwise_kernel(Bitwise::kAnd));
  add("BitwiseOr", bitwise_kernel(Bitwise::kOr));
  add("BitwiseXor", bitwise_kernel(Bitwise::kXor));
  add("BitwiseNot", bitwise_not_kernel);

  // Comparison and logic.
  add("Equal", compare_kernel(Compare::kEqual));
  add("Less", compare_kernel(Compare::kLess));
  add("Greater", compare_kernel(Compare::kGreater));
  add("LessOrEqual", compare_kernel(Compare::kLessOrEqual));
  add("GreaterOrEqual", compare_kernel(Compare::kGreaterOrEqual));
  add("And", logic_kernel(Logic::kAnd));
  add("Or", logic_kernel(Logic::kOr));
  add("Xor", logic_kernel(Logic::kXor));
  add("Not", not_kernel);

  // Variadic.
  add("Min", variadic_kernel(Variadic::kMin));
  add("Max", variadic_kernel(Variadic::kMax));
  add("Sum", variadic_kernel(Variadic::kSum));
  add("Mean", variadic_kernel(Variadic::kMean));

  // Unary math.
  add("Neg", neg_kernel);
  add("Abs", abs_kernel);
  add("Sign", sign_kernel);
  add("Erf", erf_kernel);
  add("IsNaN", isnan_kernel);
  add("IsInf", isinf_kernel);
  add("Exp", float_kernel([](double x) { return std::exp(x); }));
  add("Log", float_kernel([](double x) { return std::log(x); }));
  add("Sqrt", float_kernel([](double x) { return std::sqrt(x); }));
  add("Reciprocal", float_kernel([](double x) { return 1.0 / x; }));
  add("Floor", float_kernel([](double x) { return std::floor(x); }));
  add("Ceil", float_kernel([](double x) { return std::ceil(x); }));
  add("Round", float_kernel(round_half_even));
  add("Sin", float_kernel([](double x) { return std::sin(x); }));
  add("Cos", float_kernel([](double x) { return std::cos(x); }));
  add("Tan", float_kernel([](double x) { return std::tan(x); }));
  add("Asin", float_kernel([](double x) { return std::asin(x); }));
  add("Acos", float_kernel([](double x) { return std::acos(x); }));
  add("Atan", float_kernel([](double x) { return std::atan(x); }));
  add("Sinh", float_kernel([](double x) { return std::sinh(x); }));
  add("Cosh", float_kernel([](double x) { return std::cosh(x); }));
  add("Asinh", float_kernel([](double x) { return std::asinh(x); }));
  add("Acosh", float_kernel([](double x) { return std::acosh(x); }));
  add("Atanh", float_kernel([](double x) { return std::atanh(x); }));

  // Activations.
  add("Relu", relu_kernel);
  add("Sigmoid", float_kernel(sigmoid));
  add("Tanh", float_kernel([](double x) { return std::tanh(x); }));
  add("Softplus", float_kernel(softplus));
  add("Softsign", float_kernel([](double x) { return x / (1.0 + std::fabs(x)); }));
  add("HardSwish",
      float_kernel([](double x) { return x * std::max(0.0, std::min(1.0, x / 6.0 + 0.5)); }));
  using Fn = std::function<double(double)>;
  add("LeakyRelu", float_attr_kernel([](const KernelContext& ctx) -> Result<Fn> {
        TD_ASSIGN_OR_RETURN(const double alpha, ctx.attr_float("alpha", 0.01f));
        return Fn([alpha](double x) { return x < 0 ? alpha * x : x; });
      }));
  add("Elu", float_attr_kernel([](const KernelContext& ctx) -> Result<Fn> {
        TD_ASSIGN_OR_RETURN(const double alpha, ctx.attr_float("alpha", 1.0f));
        return Fn([alpha](double x) { return x < 0 ? alpha * (std::exp(x) - 1.0) : x; });
      }));
  add("Selu", float_attr_kernel([](const KernelContext& ctx) -> Result<Fn> {
        TD_ASSIGN_OR_RETURN(const double alpha,
                            ctx.attr_float("alpha", 1.67326319217681884765625f));
        TD_ASSIGN_OR_RETURN(const double gamma,
                            ctx.attr_float("gamma", 1.05070102214813232421875f));
        return Fn([alpha, gamma](double x) {
          return x > 0 ? gamma * x : gamma * (alpha * std::exp(x) - alpha);
        });
      }));
  add("Celu", float_attr_kernel([](const KernelContext& ctx) -> Result<Fn> {
        TD_ASSIGN_OR_RETURN(const double alpha, ctx.attr_float("alpha", 1.0f));
        return Fn([alpha](double x) {
          return std::max(0.0, x) + std::min(0.0, alpha * (std::exp(x / alpha) - 1.0));
        });
      }));
  add("HardSigmoid", float_attr_kernel([](const KernelContext& ctx) -> Result<Fn> {
        TD_ASSIGN_OR_RETURN(const double alpha, ctx.attr_float("alpha", 0.2f));
        TD_ASSIGN_OR_RETURN(const double beta, ctx.attr_float("beta", 0.5f));
        return Fn(
            [alpha, beta](double x) { return std::max(0.0, std::min(1.0, alpha * x + beta)); });
      }));
  add("ThresholdedRelu", float_attr_kernel([](const KernelContext& ctx) -> Result<Fn> {
        TD_ASSIGN_OR_RETURN(const double alpha, ctx.attr_float("alpha", 1.0f));
        return Fn([alpha](double x) { return x > alpha ? x : 0.0; });
      }));
  add("PRelu", prelu_kernel);

  // Selection and conversion. Where only moves bytes, so float16/bfloat16 pass through as is.
  add("Clip", clip_kernel);
  add("Where", where_kernel, /*native_low_precision=*/true);
  add("Cast", cast_kernel);
  add("CastLike", cast_kernel);
}

}  // namespace tensord::cpu
