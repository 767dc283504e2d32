// Fast broadcasting binary kernels for the dtypes the element-wise programs and oneDNN leave
// to the per-node kernels: Add, Sub, Mul, Max, Min and Equal on int32, int64 and float64 (index
// arithmetic: MaxPool's gradient makes its indices plane-local with an int64 Sub of a [P, 1]
// column, which ran on the reference loop at 9% of a small CNN's training step). The output is
// walked as rows: adjacent axes along which each operand is either read whole or broadcast are
// merged into one inner run, which each operand reads contiguously or as one repeated value;
// the broadcast offsets are computed once per row, not per element. Integer Add/Sub/Mul wrap
// around as the reference kernels do (two's complement, computed unsigned).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernel.h"
#include "backends/cpu/thread_pool.h"
#include "core/op_registry.h"
#include "core/ops/op_helpers.h"

namespace tensord::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 16;  // values below which threads cost more than they save

enum class Bin { kAdd, kSub, kMul, kMax, kMin, kEqual };

Status refuse(const std::string& why) { return Status(StatusCode::kUnimplemented, why); }

bool fast_dtype(DType t) { return t == DType::kInt32 || t == DType::kInt64 || t == DType::kFloat64; }

// The output as rows of `inner` values: `outer` are the remaining axes (outermost first) with
// each operand's element stride along them; `step[k]` is 1 when operand k is read whole along
// the inner run, 0 when one value of it repeats.
struct Rows {
  int64_t inner = 1;
  std::vector<int64_t> outer;
  std::vector<int64_t> stride[2];
  int step[2] = {1, 1};
};

Rows plan_rows(const Shape& a, const Shape& b, const Shape& out) {
  const size_t r = out.size();
  // Per operand and output axis: the operand's element stride, 0 where it broadcasts.
  std::vector<int64_t> s[2] = {std::vector<int64_t>(r, 0), std::vector<int64_t>(r, 0)};
  const Shape* in[2] = {&a, &b};
  for (int k = 0; k < 2; ++k) {
    const Shape& sh = *in[k];
    int64_t st = 1;
    for (size_t i = 0; i < sh.size(); ++i) {
      const size_t d = sh.size() - 1 - i, o = r - 1 - i;
      s[k][o] = sh[d] == 1 && out[o] != 1 ? 0 : st;
      st *= sh[d];
    }
  }
  Rows rows;
  // Axes of extent 1 say nothing; the innermost others merge while each operand keeps its kind.
  std::vector<size_t> axes;
  for (size_t o = 0; o < r; ++o)
    if (out[o] != 1) axes.push_back(o);
  if (axes.empty()) return rows;
  size_t first_outer = axes.size();
  const size_t last = axes.back();
  rows.step[0] = s[0][last] != 0;
  rows.step[1] = s[1][last] != 0;
  while (first_outer > 0) {
    const size_t o = axes[first_outer - 1];
    if ((s[0][o] != 0) != (rows.step[0] != 0) || (s[1][o] != 0) != (rows.step[1] != 0)) break;
    rows.inner *= out[o];
    --first_outer;
  }
  for (size_t i = 0; i < first_outer; ++i) {
    rows.outer.push_back(out[axes[i]]);
    rows.stride[0].push_back(s[0][axes[i]]);
    rows.stride[1].push_back(s[1][axes[i]]);
  }
  return rows;
}

template <Bin op, typename T, typename R>
inline R apply(T x, T y) {
  if constexpr (op == Bin::kEqual) {
    return x == y;
  } else if constexpr (op == Bin::kMax || op == Bin::kMin) {
    if constexpr (std::is_floating_point_v<T>)
      if (x != x || y != y) return std::numeric_limits<T>::quiet_NaN();  // as the reference
    return op == Bin::kMax ? std::max(x, y) : std::min(x, y);
  } else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    const U ux = static_cast<U>(x), uy = static_cast<U>(y);
    return static_cast<T>(op == Bin::kAdd ? U(ux + uy) : op == Bin::kSub ? U(ux - uy) : U(ux * uy));
  } else {
    return op == Bin::kAdd ? x + y : op == Bin::kSub ? x - y : x * y;
  }
}

// One row: `n` results from a (stepping sa) and b (stepping sb).
template <Bin op, typename T, typename R>
void row(const T* a, int sa, const T* b, int sb, R* out, int64_t n) {
  if (sa && sb) {
    for (int64_t i = 0; i < n; ++i) out[i] = apply<op, T, R>(a[i], b[i]);
  } else if (sa) {
    const T y = b[0];
    for (int64_t i = 0; i < n; ++i) out[i] = apply<op, T, R>(a[i], y);
  } else if (sb) {
    const T x = a[0];
    for (int64_t i = 0; i < n; ++i) out[i] = apply<op, T, R>(x, b[i]);
  } else {
    std::fill(out, out + n, apply<op, T, R>(a[0], b[0]));
  }
}

template <Bin op, typename T, typename R>
Status run_typed(KernelContext& ctx, const Rows& p) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const T* a = ctx.input(0).as<T>();
  const T* b = ctx.input(1).as<T>();
  R* y = out.as<R>();
  int64_t rows = 1;
  for (int64_t d : p.outer) rows *= d;
  const int64_t total = rows * p.inner;
  if (total == 0) return OkStatus();
  // Rows [r0, r1): the odometer over the outer axes starts at r0's position.
  auto run_rows = [&](int64_t r0, int64_t r1) {
    const size_t k = p.outer.size();
    std::vector<int64_t> idx(k, 0);
    int64_t oa = 0, ob = 0;
    for (size_t i = k, rem = static_cast<size_t>(r0); i-- > 0;) {
      idx[i] = static_cast<int64_t>(rem % static_cast<size_t>(p.outer[i]));
      rem /= static_cast<size_t>(p.outer[i]);
      oa += idx[i] * p.stride[0][i];
      ob += idx[i] * p.stride[1][i];
    }
    for (int64_t r = r0; r < r1; ++r) {
      row<op, T, R>(a + oa, p.step[0], b + ob, p.step[1], y + r * p.inner, p.inner);
      for (size_t i = k; i-- > 0;) {
        oa += p.stride[0][i];
        ob += p.stride[1][i];
        if (++idx[i] < p.outer[i]) break;
        oa -= idx[i] * p.stride[0][i];
        ob -= idx[i] * p.stride[1][i];
        idx[i] = 0;
      }
    }
  };
  if (total < kParallelMin || rows < 2) {
    run_rows(0, rows);
  } else {
    ThreadPool::get().parallel_for(rows, std::max<int64_t>(1, kParallelMin / std::max<int64_t>(1, p.inner)),
                                   [&](int64_t r0, int64_t r1) { run_rows(r0, r1); });
  }
  return OkStatus();
}

Status accepts(const Node& node, const std::vector<TensorType>& in) {
  if (in.size() != 2 || !in[0].defined() || !in[1].defined()) return refuse("two inputs");
  if (in[0].dtype != in[1].dtype || !fast_dtype(in[0].dtype))
    return refuse("int32, int64 and float64 only (float32 runs as oneDNN or a program)");
  if (!shape_is_static(in[0].shape) || !shape_is_static(in[1].shape)) return refuse("static shapes");
  (void)node;
  return OkStatus();
}

template <Bin op>
Status run(KernelContext& ctx) {
  const Shape& sa = ctx.input(0).shape;
  const Shape& sb = ctx.input(1).shape;
  TD_ASSIGN_OR_RETURN(Shape out, broadcast_shapes(sa, sb));
  const Rows p = plan_rows(sa, sb, out);
  const DType t = ctx.input(0).dtype;
  if constexpr (op == Bin::kEqual) {
    if (t == DType::kInt32) return run_typed<op, int32_t, bool>(ctx, p);
    if (t == DType::kInt64) return run_typed<op, int64_t, bool>(ctx, p);
    return run_typed<op, double, bool>(ctx, p);
  } else {
    if (t == DType::kInt32) return run_typed<op, int32_t, int32_t>(ctx, p);
    if (t == DType::kInt64) return run_typed<op, int64_t, int64_t>(ctx, p);
    return run_typed<op, double, double>(ctx, p);
  }
}

}  // namespace

void register_fast_binary_kernels(KernelRegistry& r) {
  r.add(KernelDef{"Add", "fast", accepts, run<Bin::kAdd>});
  r.add(KernelDef{"Sub", "fast", accepts, run<Bin::kSub>});
  r.add(KernelDef{"Mul", "fast", accepts, run<Bin::kMul>});
  r.add(KernelDef{"Max", "fast", accepts, run<Bin::kMax>});
  r.add(KernelDef{"Min", "fast", accepts, run<Bin::kMin>});
  r.add(KernelDef{"Equal", "fast", accepts, run<Bin::kEqual>});
}

}  // namespace tensord::cpu
