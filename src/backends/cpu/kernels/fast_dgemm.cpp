// float64 MatMul and Gemm through the system BLAS's cblas_dgemm (Debian's libblas: OpenBLAS
// where installed), split into row blocks over the engine's thread pool; BLAS's own threads
// are held to one (the engine owns the CPU's parallelism, docs/engine.md). float64 is NumPy's
// default type, so every array-API `matmul` of NumPy-made data took this path, and it ran on
// the reference kernel: 512 x 512 x 512 in 284 ms against NumPy's 5.3.
#include <algorithm>
#include <cstdint>
#include <vector>

extern "C" {
#include <cblas.h>
}

#include "backends/cpu/kernel.h"
#include "backends/cpu/thread_pool.h"
#include "core/op_registry.h"

namespace tensord::cpu {
namespace {

constexpr int64_t kRowBlock = 64;  // the fewest rows a block takes
constexpr double kParallelFlops = 1 << 21;  // below: one call on this thread

Status refuse(const char* why) { return Status(StatusCode::kUnimplemented, why); }

Status accepts_matmul(const Node&, const std::vector<TensorType>& in) {
  if (in.size() != 2 || in[0].dtype != DType::kFloat64 || in[1].dtype != DType::kFloat64)
    return refuse("float64 only (float32 runs on oneDNN)");
  if (!shape_is_static(in[0].shape) || !shape_is_static(in[1].shape) || in[0].shape.empty() ||
      in[1].shape.empty())
    return refuse("static shapes of rank 1 or more");
  return OkStatus();
}

Status accepts_gemm(const Node&, const std::vector<TensorType>& in) {
  if (in.size() < 2 || in[0].dtype != DType::kFloat64 || in[1].dtype != DType::kFloat64 ||
      (in.size() > 2 && in[2].defined() && in[2].dtype != DType::kFloat64))
    return refuse("float64 only (float32 runs on oneDNN)");
  for (const auto& t : in)
    if (t.defined() && !shape_is_static(t.shape)) return refuse("static shapes");
  if (in[0].shape.size() != 2 || in[1].shape.size() != 2) return refuse("2-D A and B");
  return OkStatus();
}

// block(b, r0, r1) for rows [r0, r1) of each of `batches` products with m rows: on this
// thread for a small total, else in row blocks over the pool. OpenBLAS's OpenMP build sizes
// its team by omp_get_max_threads() on the calling thread, which is tensord's
// (thread_pool.cpp): held to one there (TeamLimit), so BLAS starts no team of its own.
template <typename F>
void over_blocks(int64_t batches, int64_t m, double flops, F&& block) {
  // As few blocks as keep the threads busy: each call packs all of B again.
  const int64_t threads = std::max(1, threads_available());
  const int64_t rows = std::max(kRowBlock, (m + threads - 1) / threads);
  const int64_t per = (m + rows - 1) / rows;
  if (flops < kParallelFlops || batches * per < 2 || threads < 2) {
    TeamLimit one(1);
    for (int64_t b = 0; b < batches; ++b) block(b, 0, m);
    return;
  }
  ThreadPool::get().parallel_for(batches * per, 1, [&](int64_t i0, int64_t i1) {
    TeamLimit one(1);
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / per, r0 = (i % per) * rows;
      block(b, r0, std::min(m, r0 + rows));
    }
  });
}

Status run_matmul(KernelContext& ctx) {
  const TensorView& a = ctx.input(0);
  const TensorView& bt = ctx.input(1);
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const Shape& sa = a.shape;
  const Shape& sb = bt.shape;
  const int64_t m = sa.size() == 1 ? 1 : sa[sa.size() - 2];
  const int64_t k = sa.back();
  const int64_t n = sb.size() == 1 ? 1 : sb.back();
  const Shape ba(sa.begin(), sa.end() - std::min<size_t>(2, sa.size()));
  const Shape bb(sb.begin(), sb.end() - std::min<size_t>(2, sb.size()));
  const size_t rank = std::max(ba.size(), bb.size());
  // Batch strides (in matrices) of A and B over the output's batch dims, 0 where broadcast.
  Shape dims(rank, 1);
  std::vector<int64_t> stride_a(rank, 0), stride_b(rank, 0);
  int64_t sa_acc = 1, sb_acc = 1;
  for (size_t i = 0; i < rank; ++i) {
    const size_t d = rank - 1 - i;
    const int64_t da = i < ba.size() ? ba[ba.size() - 1 - i] : 1;
    const int64_t db = i < bb.size() ? bb[bb.size() - 1 - i] : 1;
    dims[d] = std::max(da, db);
    stride_a[d] = da == 1 ? 0 : sa_acc;
    stride_b[d] = db == 1 ? 0 : sb_acc;
    sa_acc *= da;
    sb_acc *= db;
  }
  int64_t batches = 1;
  for (int64_t d : dims) batches *= d;
  const double* pa = a.as<double>();
  const double* pb = bt.as<double>();
  double* pc = static_cast<double*>(out.data);
  if (k == 0) {
    std::fill(pc, pc + batches * m * n, 0.0);
    return OkStatus();
  }
  over_blocks(batches, m, 2.0 * batches * m * n * k, [&](int64_t b, int64_t r0, int64_t r1) {
    int64_t oa = 0, ob = 0, rem = b;
    for (size_t d = rank; d-- > 0;) {
      const int64_t i = rem % dims[d];
      rem /= dims[d];
      oa += i * stride_a[d];
      ob += i * stride_b[d];
    }
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(r1 - r0),
                static_cast<int>(n), static_cast<int>(k), 1.0, pa + oa * m * k + r0 * k,
                static_cast<int>(k), pb + ob * k * n, static_cast<int>(n), 0.0,
                pc + b * m * n + r0 * n, static_cast<int>(n));
  });
  return OkStatus();
}

Status run_gemm(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(int64_t ta, ctx.attr_int("transA", 0));
  TD_ASSIGN_OR_RETURN(int64_t tb, ctx.attr_int("transB", 0));
  TD_ASSIGN_OR_RETURN(float alpha, ctx.attr_float("alpha", 1.0f));
  TD_ASSIGN_OR_RETURN(float beta, ctx.attr_float("beta", 1.0f));
  const TensorView& a = ctx.input(0);
  const TensorView& b = ctx.input(1);
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const int64_t m = ta ? a.shape[1] : a.shape[0], k = ta ? a.shape[0] : a.shape[1];
  const int64_t n = tb ? b.shape[0] : b.shape[1];
  double* pc = static_cast<double*>(out.data);
  const bool with_c = ctx.has_input(2) && beta != 0.0f;
  if (with_c) {  // Y = beta * C broadcast to [M, N] (unidirectionally), then += A B
    const TensorView& c = ctx.input(2);
    const Shape& cs = c.shape;
    const int64_t cm = cs.size() == 2 ? cs[0] : 1;
    const int64_t cn = cs.empty() ? 1 : cs.back();
    const double* cv = c.as<double>();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        pc[i * n + j] = static_cast<double>(beta) * cv[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)];
  }
  const double* pa = a.as<double>();
  const double* pb = b.as<double>();
  over_blocks(1, m, 2.0 * m * n * k, [&](int64_t, int64_t r0, int64_t r1) {
    // Rows r0..r1 of op(A): of A, or columns of A (transA) starting at column r0.
    const double* ar = ta ? pa + r0 : pa + r0 * a.shape[1];
    if (k == 0) {
      if (!with_c) std::fill(pc + r0 * n, pc + r1 * n, 0.0);
      return;
    }
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                static_cast<int>(r1 - r0), static_cast<int>(n), static_cast<int>(k),
                static_cast<double>(alpha), ar, static_cast<int>(a.shape[1]), pb,
                static_cast<int>(b.shape[1]), with_c ? 1.0 : 0.0, pc + r0 * n,
                static_cast<int>(n));
  });
  return OkStatus();
}

}  // namespace

void register_fast_dgemm_kernels(KernelRegistry& r) {
  r.add(KernelDef{"MatMul", "blas", accepts_matmul, run_matmul});
  r.add(KernelDef{"Gemm", "blas", accepts_gemm, run_gemm});
}

}  // namespace tensord::cpu
