// Kernels of the `tensord`-domain linear-algebra ops (schemas in src/core/ops/linalg.cpp):
// Cholesky, Eigh, QR, SVD, Solve, Inv, SLogDet, through LAPACKE (Debian's liblapacke; the LAPACK
// under it is whichever libblas/liblapack alternative the system selects, reference or OpenBLAS).
//
// Every kernel loops over the batch (the leading dims) and hands LAPACK one row-major matrix at
// a time, copied into scratch (LAPACK overwrites its input). float32 and float64 only; matrices
// with a zero dimension give empty (or identity-like) results without calling LAPACK.
// Numerical failures are errors naming the op's problem and the batch index: a singular matrix
// (Inv, Solve), a matrix that is not positive definite (Cholesky), no convergence (Eigh, SVD).
#include <lapacke.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"
#include "core/op_registry.h"

namespace tensord {
namespace cpu {
namespace {

// ---- typed LAPACKE entry points (row-major) ----
lapack_int potrf(char uplo, lapack_int n, float* a) {
  return LAPACKE_spotrf(LAPACK_ROW_MAJOR, uplo, n, a, n);
}
lapack_int potrf(char uplo, lapack_int n, double* a) {
  return LAPACKE_dpotrf(LAPACK_ROW_MAJOR, uplo, n, a, n);
}
lapack_int syevd(char jobz, lapack_int n, float* a, float* w) {
  return LAPACKE_ssyevd(LAPACK_ROW_MAJOR, jobz, 'L', n, a, n, w);
}
lapack_int syevd(char jobz, lapack_int n, double* a, double* w) {
  return LAPACKE_dsyevd(LAPACK_ROW_MAJOR, jobz, 'L', n, a, n, w);
}
lapack_int geqrf(lapack_int m, lapack_int n, float* a, lapack_int lda, float* tau) {
  return LAPACKE_sgeqrf(LAPACK_ROW_MAJOR, m, n, a, lda, tau);
}
lapack_int geqrf(lapack_int m, lapack_int n, double* a, lapack_int lda, double* tau) {
  return LAPACKE_dgeqrf(LAPACK_ROW_MAJOR, m, n, a, lda, tau);
}
lapack_int orgqr(lapack_int m, lapack_int n, lapack_int k, float* a, lapack_int lda,
                 const float* tau) {
  return LAPACKE_sorgqr(LAPACK_ROW_MAJOR, m, n, k, a, lda, tau);
}
lapack_int orgqr(lapack_int m, lapack_int n, lapack_int k, double* a, lapack_int lda,
                 const double* tau) {
  return LAPACKE_dorgqr(LAPACK_ROW_MAJOR, m, n, k, a, lda, tau);
}
lapack_int gesdd(char jobz, lapack_int m, lapack_int n, float* a, float* s, float* u,
                 lapack_int ldu, float* vt, lapack_int ldvt) {
  return LAPACKE_sgesdd(LAPACK_ROW_MAJOR, jobz, m, n, a, n, s, u, ldu, vt, ldvt);
}
lapack_int gesdd(char jobz, lapack_int m, lapack_int n, double* a, double* s, double* u,
                 lapack_int ldu, double* vt, lapack_int ldvt) {
  return LAPACKE_dgesdd(LAPACK_ROW_MAJOR, jobz, m, n, a, n, s, u, ldu, vt, ldvt);
}
lapack_int getrf(lapack_int n, float* a, lapack_int* ipiv) {
  return LAPACKE_sgetrf(LAPACK_ROW_MAJOR, n, n, a, n, ipiv);
}
lapack_int getrf(lapack_int n, double* a, lapack_int* ipiv) {
  return LAPACKE_dgetrf(LAPACK_ROW_MAJOR, n, n, a, n, ipiv);
}
lapack_int getri(lapack_int n, float* a, const lapack_int* ipiv) {
  return LAPACKE_sgetri(LAPACK_ROW_MAJOR, n, a, n, ipiv);
}
lapack_int getri(lapack_int n, double* a, const lapack_int* ipiv) {
  return LAPACKE_dgetri(LAPACK_ROW_MAJOR, n, a, n, ipiv);
}
lapack_int gesv(lapack_int n, lapack_int nrhs, float* a, lapack_int* ipiv, float* b) {
  return LAPACKE_sgesv(LAPACK_ROW_MAJOR, n, nrhs, a, n, ipiv, b, nrhs);
}
lapack_int gesv(lapack_int n, lapack_int nrhs, double* a, lapack_int* ipiv, double* b) {
  return LAPACKE_dgesv(LAPACK_ROW_MAJOR, n, nrhs, a, n, ipiv, b, nrhs);
}

// Runs fn.template operator()<T>() for float32/float64 inputs.
template <typename Fn>
Status dispatch_lapack(KernelContext& ctx, DType t, Fn&& fn) {
  if (t == DType::kFloat32) return fn(float{});
  if (t == DType::kFloat64) return fn(double{});
  return ctx.error("dtype {} is not supported (float32 or float64)", dtype_name(t));
}

int64_t batch_of(const Shape& s) {
  int64_t b = 1;
  for (size_t i = 0; i + 2 < s.size(); ++i) b *= s[i];
  return b;
}

// A LAPACK dimension; LAPACKE's row-major leading dimensions must be >= 1.
lapack_int ld(int64_t v) { return static_cast<lapack_int>(std::max<int64_t>(v, 1)); }

// ---- Cholesky ----
Status cholesky_kernel(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  TD_ASSIGN_OR_RETURN(int64_t upper, ctx.attr_int("upper", 0));
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  const int64_t n = x.shape.back(), batch = batch_of(x.shape);
  return dispatch_lapack(ctx, x.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    const T* in = x.as<T>();
    T* out = y.as<T>();
    for (int64_t b = 0; b < batch && n > 0; ++b) {
      T* a = out + b * n * n;
      std::memcpy(a, in + b * n * n, sizeof(T) * static_cast<size_t>(n * n));
      const lapack_int info = potrf(upper ? 'U' : 'L', static_cast<lapack_int>(n), a);
      if (info > 0)
        return ctx.error(
            "matrix {} of the batch is not positive definite (its leading minor of order {} is "
            "not positive)",
            b, info);
      if (info < 0) return ctx.error("LAPACK ?potrf: argument {} was invalid", -info);
      for (int64_t i = 0; i < n; ++i)  // zero the triangle LAPACK left untouched
        for (int64_t j = 0; j < n; ++j)
          if (upper ? j < i : j > i) a[i * n + j] = T(0);
    }
    return OkStatus();
  });
}

// ---- Eigh ----
Status eigh_kernel(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  TD_ASSIGN_OR_RETURN(int64_t compute_v, ctx.attr_int("compute_v", 1));
  TD_ASSIGN_OR_RETURN(MutableTensorView w, ctx.output(0));
  MutableTensorView v;
  if (compute_v) {
    TD_ASSIGN_OR_RETURN(v, ctx.output(1));
  }
  const int64_t n = x.shape.back(), batch = batch_of(x.shape);
  return dispatch_lapack(ctx, x.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    std::vector<T> scratch(static_cast<size_t>(n * n));
    for (int64_t b = 0; b < batch && n > 0; ++b) {
      T* a = compute_v ? v.as<T>() + b * n * n : scratch.data();
      std::memcpy(a, x.as<T>() + b * n * n, sizeof(T) * static_cast<size_t>(n * n));
      const lapack_int info =
          syevd(compute_v ? 'V' : 'N', static_cast<lapack_int>(n), a, w.as<T>() + b * n);
      if (info > 0)
        return ctx.error("the eigenvalue algorithm did not converge for matrix {} of the batch", b);
      if (info < 0) return ctx.error("LAPACK ?syevd: argument {} was invalid", -info);
    }
    return OkStatus();
  });
}

// ---- QR ----
Status qr_kernel(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  TD_ASSIGN_OR_RETURN(std::string mode, ctx.attr_string("mode", "reduced"));
  TD_ASSIGN_OR_RETURN(MutableTensorView q, ctx.output(0));
  TD_ASSIGN_OR_RETURN(MutableTensorView r, ctx.output(1));
  const int64_t m = x.shape[x.shape.size() - 2], n = x.shape.back(), batch = batch_of(x.shape);
  const int64_t k = std::min(m, n);
  const int64_t qc = mode == "complete" ? m : k;  // columns of Q = rows of R
  return dispatch_lapack(ctx, x.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    const int64_t w = std::max(n, qc);  // scratch width: A, then Q's columns in place
    std::vector<T> a(static_cast<size_t>(m * w));
    std::vector<T> tau(static_cast<size_t>(std::max<int64_t>(k, 1)));
    T* qo = q.as<T>();
    T* ro = r.as<T>();
    std::fill(qo, qo + batch * m * qc, T(0));
    std::fill(ro, ro + batch * qc * n, T(0));
    for (int64_t b = 0; b < batch && m > 0; ++b) {
      const T* in = x.as<T>() + b * m * n;
      std::fill(a.begin(), a.end(), T(0));
      for (int64_t i = 0; i < m; ++i) std::copy(in + i * n, in + (i + 1) * n, a.data() + i * w);
      if (k > 0) {
        lapack_int info = geqrf(static_cast<lapack_int>(m), static_cast<lapack_int>(n), a.data(),
                                ld(w), tau.data());
        if (info < 0) return ctx.error("LAPACK ?geqrf: argument {} was invalid", -info);
      }
      T* rb = ro + b * qc * n;
      for (int64_t i = 0; i < std::min(qc, m); ++i)
        for (int64_t j = i; j < n; ++j) rb[i * n + j] = a[static_cast<size_t>(i * w + j)];
      T* qb = qo + b * m * qc;
      if (k > 0) {
        lapack_int info = orgqr(static_cast<lapack_int>(m), static_cast<lapack_int>(qc),
                                static_cast<lapack_int>(k), a.data(), ld(w), tau.data());
        if (info < 0) return ctx.error("LAPACK ?orgqr: argument {} was invalid", -info);
        for (int64_t i = 0; i < m; ++i)
          std::copy(a.data() + i * w, a.data() + i * w + qc, qb + i * qc);
      } else {  // n == 0: Q is the identity (complete mode), or empty
        for (int64_t i = 0; i < std::min(m, qc); ++i) qb[i * qc + i] = T(1);
      }
    }
    return OkStatus();
  });
}

// ---- SVD ----
Status svd_kernel(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  TD_ASSIGN_OR_RETURN(int64_t full, ctx.attr_int("full_matrices", 0));
  TD_ASSIGN_OR_RETURN(int64_t compute_uv, ctx.attr_int("compute_uv", 1));
  const int64_t m = x.shape[x.shape.size() - 2], n = x.shape.back(), batch = batch_of(x.shape);
  const int64_t k = std::min(m, n);
  const int64_t uc = full ? m : k, vr = full ? n : k;
  MutableTensorView u, s, vt;
  if (compute_uv) {
    TD_ASSIGN_OR_RETURN(u, ctx.output(0));
    TD_ASSIGN_OR_RETURN(s, ctx.output(1));
    TD_ASSIGN_OR_RETURN(vt, ctx.output(2));
  } else {
    TD_ASSIGN_OR_RETURN(s, ctx.output(0));
  }
  return dispatch_lapack(ctx, x.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    std::vector<T> a(static_cast<size_t>(m * n));
    T dummy[1] = {T(0)};
    if (compute_uv && k == 0) {  // empty: U and Vh are identities (full) or empty
      std::fill(u.as<T>(), u.as<T>() + batch * m * uc, T(0));
      std::fill(vt.as<T>(), vt.as<T>() + batch * vr * n, T(0));
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t i = 0; i < std::min(m, uc); ++i) u.as<T>()[b * m * uc + i * uc + i] = T(1);
        for (int64_t i = 0; i < std::min(vr, n); ++i) vt.as<T>()[b * vr * n + i * n + i] = T(1);
      }
    }
    for (int64_t b = 0; b < batch && k > 0; ++b) {
      std::memcpy(a.data(), x.as<T>() + b * m * n, sizeof(T) * a.size());
      const char jobz = !compute_uv ? 'N' : full ? 'A' : 'S';
      T* ub = compute_uv ? u.as<T>() + b * m * uc : dummy;
      T* vb = compute_uv ? vt.as<T>() + b * vr * n : dummy;
      const lapack_int info = gesdd(jobz, static_cast<lapack_int>(m), static_cast<lapack_int>(n),
                                    a.data(), s.as<T>() + b * k, ub, compute_uv ? ld(uc) : 1, vb,
                                    ld(n));  // LAPACKE: ldvt >= n always
      if (info > 0) return ctx.error("the SVD did not converge for matrix {} of the batch", b);
      if (info < 0) return ctx.error("LAPACK ?gesdd: argument {} was invalid", -info);
    }
    return OkStatus();
  });
}

// ---- Solve ----
Status solve_kernel(KernelContext& ctx) {
  const TensorView& a_in = ctx.input(0);
  const TensorView& b_in = ctx.input(1);
  TD_ASSIGN_OR_RETURN(MutableTensorView xo, ctx.output(0));
  const int64_t n = a_in.shape.back(), nrhs = b_in.shape.back(), batch = batch_of(a_in.shape);
  if (batch_of(b_in.shape) != batch)
    return ctx.error("A {} and B {} have different batch dims", shape_to_string(a_in.shape),
                     shape_to_string(b_in.shape));
  return dispatch_lapack(ctx, a_in.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    std::vector<T> a(static_cast<size_t>(n * n));
    std::vector<lapack_int> ipiv(static_cast<size_t>(std::max<int64_t>(n, 1)));
    std::memcpy(xo.as<T>(), b_in.as<T>(), sizeof(T) * static_cast<size_t>(batch * n * nrhs));
    for (int64_t b = 0; b < batch && n > 0 && nrhs > 0; ++b) {
      std::memcpy(a.data(), a_in.as<T>() + b * n * n, sizeof(T) * a.size());
      const lapack_int info = gesv(static_cast<lapack_int>(n), static_cast<lapack_int>(nrhs),
                                   a.data(), ipiv.data(), xo.as<T>() + b * n * nrhs);
      if (info > 0)
        return ctx.error("matrix A {} of the batch is singular (U[{}, {}] is exactly zero)", b,
                         info - 1, info - 1);
      if (info < 0) return ctx.error("LAPACK ?gesv: argument {} was invalid", -info);
    }
    return OkStatus();
  });
}

// ---- Inv ----
Status inv_kernel(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  const int64_t n = x.shape.back(), batch = batch_of(x.shape);
  return dispatch_lapack(ctx, x.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    std::vector<lapack_int> ipiv(static_cast<size_t>(std::max<int64_t>(n, 1)));
    for (int64_t b = 0; b < batch && n > 0; ++b) {
      T* a = y.as<T>() + b * n * n;
      std::memcpy(a, x.as<T>() + b * n * n, sizeof(T) * static_cast<size_t>(n * n));
      lapack_int info = getrf(static_cast<lapack_int>(n), a, ipiv.data());
      if (info > 0)
        return ctx.error("matrix {} of the batch is singular (U[{}, {}] is exactly zero)", b,
                         info - 1, info - 1);
      if (info == 0) info = getri(static_cast<lapack_int>(n), a, ipiv.data());
      if (info > 0) return ctx.error("matrix {} of the batch is singular", b);
      if (info < 0) return ctx.error("LAPACK ?getrf/?getri: argument {} was invalid", -info);
    }
    return OkStatus();
  });
}

// ---- SLogDet ----
Status slogdet_kernel(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  TD_ASSIGN_OR_RETURN(MutableTensorView sign, ctx.output(0));
  TD_ASSIGN_OR_RETURN(MutableTensorView logdet, ctx.output(1));
  const int64_t n = x.shape.back(), batch = batch_of(x.shape);
  return dispatch_lapack(ctx, x.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    std::vector<T> a(static_cast<size_t>(n * n));
    std::vector<lapack_int> ipiv(static_cast<size_t>(std::max<int64_t>(n, 1)));
    for (int64_t b = 0; b < batch; ++b) {
      T sg = T(1), la = T(0);
      if (n > 0) {
        std::memcpy(a.data(), x.as<T>() + b * n * n, sizeof(T) * a.size());
        const lapack_int info = getrf(static_cast<lapack_int>(n), a.data(), ipiv.data());
        if (info < 0) return ctx.error("LAPACK ?getrf: argument {} was invalid", -info);
        if (info > 0) {  // singular: NumPy's (0, -inf)
          sg = T(0);
          la = -std::numeric_limits<T>::infinity();
        } else {
          double lsum = 0;
          for (int64_t i = 0; i < n; ++i) {
            const T d = a[static_cast<size_t>(i * n + i)];
            if (d < 0) sg = -sg;
            if (ipiv[static_cast<size_t>(i)] != i + 1) sg = -sg;
            lsum += std::log(std::abs(static_cast<double>(d)));
          }
          la = static_cast<T>(lsum);
        }
      }
      sign.as<T>()[b] = sg;
      logdet.as<T>()[b] = la;
    }
    return OkStatus();
  });
}

}  // namespace

void register_linalg_kernels(KernelRegistry& r) {
  // LAPACKE otherwise scans every input for NaN and refuses it (an "invalid argument"); LAPACK
  // itself propagates NaN (QR, Inv, ...) or reports it (?gesdd), as NumPy's wrappers let it.
  LAPACKE_set_nancheck(0);
  auto add = [&r](const char* op, KernelFn fn) {
    r.add(KernelDef{op, "reference", nullptr, std::move(fn)});
  };
  add("Cholesky", cholesky_kernel);
  add("Eigh", eigh_kernel);
  add("QR", qr_kernel);
  add("SVD", svd_kernel);
  add("Solve", solve_kernel);
  add("Inv", inv_kernel);
  add("SLogDet", slogdet_kernel);
}

}  // namespace cpu
}  // namespace tensord
