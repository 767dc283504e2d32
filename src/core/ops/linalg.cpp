// Schemas of the linear-algebra ops in the `tensord` domain (ONNX has none of these): Cholesky,
// Eigh, QR, SVD, Solve, Inv and SLogDet. Every op works on the last two dims and is batched over
// the leading ones; float32 and float64 only (what LAPACK offers). The cpu kernels
// (src/backends/cpu/kernels/linalg.cpp) call LAPACKE; other devices fall back to cpu:0.
// Registered as "tensord.<op>" (infer_node looks a node up by domain and op); the cpu kernels
// by the op alone.
//
// Outputs (all in the input's dtype):
//   Cholesky(X; upper=0)            -> L (or U) [*, n, n]
//   Eigh(X; compute_v=1)            -> W [*, n] ascending, V [*, n, n] (columns) when compute_v
//   QR(X; mode="reduced")           -> Q [*, m, k], R [*, k, n] (k = min(m, n); "complete": k = m)
//   SVD(X; full_matrices=0, compute_uv=1) -> U [*, m, k], S [*, min(m, n)], Vh [*, k, n]
//                                      (k = min(m, n), or m / n with full_matrices); S alone
//                                      when compute_uv=0
//   Solve(A, B)                     -> X [*, n, k] with A [*, n, n], B [*, n, k] (same batch)
//   Inv(X)                          -> X^-1 [*, n, n]
//   SLogDet(X)                      -> sign [*], log|det| [*]
#include <algorithm>
#include <cstdint>
#include <string>

#include "core/op_registry.h"
#include "core/ops/all_ops.h"
#include "core/ops/op_helpers.h"

namespace tensord {
namespace {

Status expect_lapack_float(const InferenceContext& ctx, int i) {
  const DType t = ctx.input_dtype(i);
  if (t == DType::kFloat32 || t == DType::kFloat64) return OkStatus();
  return ctx.error("input {} has dtype {}, expected float32 or float64", i, dtype_name(t));
}

// Checks input i is a batch of matrices (rank >= 2), square when asked.
Status expect_matrices(const InferenceContext& ctx, int i, bool square) {
  TD_RETURN_IF_ERROR(expect_lapack_float(ctx, i));
  const Shape& x = ctx.input_shape(i);
  if (x.size() < 2)
    return ctx.error("input {} must have rank >= 2 ([*, M, N]), got shape {}", i,
                     shape_to_string(x));
  if (square && dims_conflict(x[x.size() - 1], x[x.size() - 2]))
    return ctx.error("input {} must hold square matrices, got shape {}", i, shape_to_string(x));
  return OkStatus();
}

Shape with_last(const Shape& x, size_t drop, std::initializer_list<int64_t> dims) {
  Shape s(x.begin(), x.end() - static_cast<int64_t>(drop));
  s.insert(s.end(), dims);
  return s;
}

int64_t min_dim(int64_t a, int64_t b) { return a < 0 || b < 0 ? -1 : std::min(a, b); }

OpSchema square_schema(const char* name, const char* doc, std::set<std::string> attrs) {
  OpSchema s;
  s.name = std::string("tensord.") + name;
  s.min_inputs = s.max_inputs = 1;
  s.attributes = std::move(attrs);
  s.doc = doc;
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(expect_matrices(ctx, 0, true));
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
    return OkStatus();
  };
  return s;
}

OpSchema eigh_schema() {
  OpSchema s;
  s.name = "tensord.Eigh";
  s.min_inputs = s.max_inputs = 1;
  s.min_outputs = 1;
  s.max_outputs = 2;
  s.attributes = {"compute_v"};
  s.doc = "eigenvalues (ascending) and eigenvectors of symmetric matrices (lower triangle read)";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(expect_matrices(ctx, 0, true));
    TD_ASSIGN_OR_RETURN(int64_t v, ctx.attr_int("compute_v", 1));
    if (ctx.num_outputs() != (v ? 2 : 1))
      return ctx.error("compute_v={} gives {} outputs, the node has {}", v, v ? 2 : 1,
                       ctx.num_outputs());
    const Shape& x = ctx.input_shape(0);
    ctx.set_output(0, ctx.input_dtype(0), with_last(x, 1, {}));
    if (v) ctx.set_output(1, ctx.input_dtype(0), x);
    return OkStatus();
  };
  return s;
}

OpSchema qr_schema() {
  OpSchema s;
  s.name = "tensord.QR";
  s.min_inputs = s.max_inputs = 1;
  s.min_outputs = s.max_outputs = 2;
  s.attributes = {"mode"};
  s.doc =
      "QR decomposition, mode 'reduced' (Q [*, m, k], R [*, k, n], k = min(m, n)) or 'complete'";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(expect_matrices(ctx, 0, false));
    TD_ASSIGN_OR_RETURN(std::string mode, ctx.attr_string("mode", "reduced"));
    if (mode != "reduced" && mode != "complete")
      return ctx.error("mode must be 'reduced' or 'complete', got '{}'", mode);
    const Shape& x = ctx.input_shape(0);
    const int64_t m = x[x.size() - 2], n = x[x.size() - 1];
    const int64_t k = mode == "complete" ? m : min_dim(m, n);
    ctx.set_output(0, ctx.input_dtype(0), with_last(x, 2, {m, k}));
    ctx.set_output(1, ctx.input_dtype(0), with_last(x, 2, {k, n}));
    return OkStatus();
  };
  return s;
}

OpSchema svd_schema() {
  OpSchema s;
  s.name = "tensord.SVD";
  s.min_inputs = s.max_inputs = 1;
  s.min_outputs = 1;
  s.max_outputs = 3;
  s.attributes = {"full_matrices", "compute_uv"};
  s.doc = "singular value decomposition: U, S (descending), Vh; S alone when compute_uv=0";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(expect_matrices(ctx, 0, false));
    TD_ASSIGN_OR_RETURN(int64_t full, ctx.attr_int("full_matrices", 0));
    TD_ASSIGN_OR_RETURN(int64_t uv, ctx.attr_int("compute_uv", 1));
    if (ctx.num_outputs() != (uv ? 3 : 1))
      return ctx.error("compute_uv={} gives {} outputs, the node has {}", uv, uv ? 3 : 1,
                       ctx.num_outputs());
    const Shape& x = ctx.input_shape(0);
    const int64_t m = x[x.size() - 2], n = x[x.size() - 1], k = min_dim(m, n);
    const DType t = ctx.input_dtype(0);
    if (!uv) {
      ctx.set_output(0, t, with_last(x, 2, {k}));
      return OkStatus();
    }
    ctx.set_output(0, t, with_last(x, 2, {m, full ? m : k}));
    ctx.set_output(1, t, with_last(x, 2, {k}));
    ctx.set_output(2, t, with_last(x, 2, {full ? n : k, n}));
    return OkStatus();
  };
  return s;
}

OpSchema solve_schema() {
  OpSchema s;
  s.name = "tensord.Solve";
  s.min_inputs = s.max_inputs = 2;
  s.doc = "X with A X = B for A [*, n, n], B [*, n, k] (same batch dims)";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(expect_matrices(ctx, 0, true));
    TD_RETURN_IF_ERROR(expect_matrices(ctx, 1, false));
    if (ctx.input_dtype(0) != ctx.input_dtype(1))
      return ctx.error("A is {} but B is {}", dtype_name(ctx.input_dtype(0)),
                       dtype_name(ctx.input_dtype(1)));
    const Shape& a = ctx.input_shape(0);
    const Shape& b = ctx.input_shape(1);
    bool ok = a.size() == b.size() && !dims_conflict(a[a.size() - 1], b[b.size() - 2]);
    for (size_t i = 0; ok && i + 2 < a.size(); ++i) ok = !dims_conflict(a[i], b[i]);
    if (!ok)
      return ctx.error("A {} and B {} must be [*, n, n] and [*, n, k] with the same batch dims",
                       shape_to_string(a), shape_to_string(b));
    ctx.set_output(0, ctx.input_dtype(0), b);
    return OkStatus();
  };
  return s;
}

OpSchema slogdet_schema() {
  OpSchema s;
  s.name = "tensord.SLogDet";
  s.min_inputs = s.max_inputs = 1;
  s.min_outputs = s.max_outputs = 2;
  s.doc = "sign and natural log of the absolute determinant (0 and -inf when singular)";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(expect_matrices(ctx, 0, true));
    const Shape batch = with_last(ctx.input_shape(0), 2, {});
    ctx.set_output(0, ctx.input_dtype(0), batch);
    ctx.set_output(1, ctx.input_dtype(0), batch);
    return OkStatus();
  };
  return s;
}

}  // namespace

void register_linalg_ops(OpRegistry& r) {
  r.add(square_schema("Cholesky", "Cholesky factor L (L L^T = X) or U with upper=1 (U^T U = X)",
                      {"upper"}));
  r.add(eigh_schema());
  r.add(qr_schema());
  r.add(svd_schema());
  r.add(solve_schema());
  r.add(square_schema("Inv", "inverses of square matrices (an error when one is singular)", {}));
  r.add(slogdet_schema());
}

}  // namespace tensord
