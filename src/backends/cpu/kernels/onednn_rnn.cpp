// Fast float32 LSTM and GRU: the input projection of every time step is one SGEMM (oneDNN's
// dnnl_sgemm), the recurrent projection one SGEMM per step over the whole batch, and the gate
// math a vectorisable loop. Covers ONNX LSTM and GRU with default activations, no clip, no
// input_forget, both layouts, all directions, sequence_lens, initial states, LSTM's peepholes
// and both forms of GRU's linear_before_reset;
// anything else goes to the reference kernel (`accepts` says why).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <dnnl.h>
#include <immintrin.h>
#include "backends/cpu/thread_pool.h"

#include "backends/cpu/kernel.h"
#include "backends/cpu/onednn_common.h"
#include "backends/cpu/vec_math.h"
#include "core/ops/op_helpers.h"

namespace tensord {
namespace cpu {
namespace {

constexpr int64_t kSmallBatch = 4;

Status refuse(const std::string& why) { return Status(StatusCode::kUnimplemented, why); }

// dnnl_sgemm on this thread's OpenMP team, or alone for a small product: the recurrence that
// follows is serial, so the team would go to sleep and have to be woken for every call, which
// costs more than the product itself when the machine is busy (2-thread figures of a
// bidirectional GRU 10x worse than 1-thread ones).
constexpr double kSerialGemmFlops = 1 << 24;

dnnl_status_t projection_sgemm(int64_t m, int64_t n, int64_t k, const float* a, const float* b,
                               float* c) {
  if (k == 0) {  // an empty input: C = 0 (not left to the library; C is not zeroed beforehand)
    std::fill_n(c, m * n, 0.0f);
    return dnnl_success;
  }
  const bool serial = 2.0 * static_cast<double>(m) * static_cast<double>(n) *
                          static_cast<double>(k) < kSerialGemmFlops;
  TeamLimit limit(serial ? 1 : 0);
  return dnnl_sgemm('N', 'T', m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
}

// The recurrences of a bidirectional op's two directions at once, one per OpenMP thread (the
// input projections come before, on the whole team): they share nothing but the outputs, where
// each writes its own slices. One fork and join per call, where splitting each step's small
// product over the threads would cost one per step; a per-step SGEMM inside (large batches)
// runs on its own thread (no nested team). With less work (recurrent multiply-adds of one
// direction) than serial_work_limit(), or one thread, the directions run in turn.
template <typename F>
Status run_directions(int64_t num_dir, int64_t work, F&& run) {
  if (num_dir < 2 || threads_available() < 2 ||
      static_cast<double>(work) < serial_work_limit()) {
    for (int64_t d = 0; d < num_dir; ++d) TD_RETURN_IF_ERROR(run(d));
    return OkStatus();
  }
  Status st[2];
  ThreadPool::get().parallel_for(2, 1, [&](int64_t begin, int64_t end) {
    for (int64_t d = begin; d < end; ++d) st[d] = run(d);
  });
  TD_RETURN_IF_ERROR(st[0]);
  return st[1];
}

// The fast kernels' cover: float32, no clip, the default activations (`defaults` per
// direction); LSTM also without input_forget.
Status rnn_accepts(const Node& node, const std::vector<TensorType>& in,
                   const std::vector<std::string>& defaults) {
  const std::string& op = node.op;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].defined() || i == 4) continue;  // sequence_lens is an integer tensor
    if (in[i].dtype != DType::kFloat32) return refuse(op + ": the fast kernel is float32 only");
  }
  if (in.size() < 3) return refuse(op + ": needs X, W and R");
  NodeAttrs a(node);
  if (a.has_attr("clip")) return refuse(op + ": the fast kernel has no clip");
  TD_ASSIGN_OR_RETURN(int64_t input_forget, a.attr_int("input_forget", 0));
  if (input_forget) return refuse(op + ": the fast kernel has no input_forget");
  if (a.has_attr("activations")) {
    TD_ASSIGN_OR_RETURN(std::string direction, a.attr_string("direction", "forward"));
    std::vector<std::string> acts;
    std::vector<float> alphas, betas;
    TD_RETURN_IF_ERROR(rnn::resolve_activations(a, defaults,
                                                direction == "bidirectional" ? 2 : 1, &acts,
                                                &alphas, &betas));
    for (size_t i = 0; i < acts.size(); ++i) {
      std::string s = acts[i];
      std::transform(s.begin(), s.end(), s.begin(), ::tolower);
      if (s != defaults[i % defaults.size()])
        return refuse(op + ": the fast kernel takes the default activations only");
    }
  }
  return OkStatus();
}

Status lstm_accepts(const Node& node, const std::vector<TensorType>& in) {
  return rnn_accepts(node, in, {"sigmoid", "tanh", "tanh"});
}

Status gru_accepts(const Node& node, const std::vector<TensorType>& in) {
  return rnn_accepts(node, in, {"sigmoid", "tanh"});
}

// out[0:n] = v[0:k] . m[k][n] (row-major m). Columns go in blocks of 64 whose sums stay in
// registers over all of k (a store per block, not per row); each sum still adds the rows in
// order 0..k-1, as the plain loop does. Compiled for AVX-512, AVX2 and baseline x86-64; the
// loader picks one (GCC target_clones).
// One block of kBlock output columns: kBlock / 16 independent FMA chains (AVX-512). 128
// columns keep 8 chains in flight, enough to hide the FMA latency that 64 (4 chains) exposes.
template <int64_t kBlock>
inline __attribute__((always_inline)) void vec_times_block(const float* __restrict v,
                                                           const float* __restrict m, int64_t k,
                                                           int64_t n, float* __restrict out) {
  float acc[kBlock] = {};
  for (int64_t i = 0; i < k; ++i) {
    const float vi = v[i];
    const float* __restrict row = m + i * n;
    for (int64_t j = 0; j < kBlock; ++j) acc[j] += vi * row[j];
  }
  for (int64_t j = 0; j < kBlock; ++j) out[j] = acc[j];
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void vec_times_matrix(
    const float* __restrict v, const float* __restrict m, int64_t k, int64_t n,
    float* __restrict out) {
  int64_t j0 = 0;
  for (; j0 + 128 <= n; j0 += 128) vec_times_block<128>(v, m + j0, k, n, out + j0);
  for (; j0 + 64 <= n; j0 += 64) vec_times_block<64>(v, m + j0, k, n, out + j0);
  if (j0 == n) return;
  for (int64_t j = j0; j < n; ++j) out[j] = 0.0f;
  for (int64_t i = 0; i < k; ++i) {
    const float vi = v[i];
    const float* __restrict row = m + i * n;
    for (int64_t j = j0; j < n; ++j) out[j] += vi * row[j];
  }
}

// AVX2: an 8x8 block of a row-major matrix (row stride ss) to dst (row stride ds), in
// registers (a strided store per element made R^T 15% of an LSTM's time on AVX2).
__attribute__((target("avx2"))) inline void transpose8x8_avx2(const float* __restrict src,
                                                              int64_t ss, float* __restrict dst,
                                                              int64_t ds) {
  __m256 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ss);
  for (int i = 0; i < 8; i += 2) {  // [a0 b0 a1 b1 | a4 b4 a5 b5], [a2 b2 a3 b3 | a6 b6 a7 b7]
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {  // [a0 b0 c0 d0 | a4 b4 c4 d4] ... [a3 b3 c3 d3 | a7 ...]
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {  // column i from rows 0-3's and rows 4-7's low halves; i + 4 high
    _mm256_storeu_ps(dst + i * ds, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * ds, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
  }
}

// R [rows, hidden] (row-major) into R^T's panels of width `panel` (the last one narrower),
// rows a multiple of 8; by 8x8 blocks in registers when hidden is a multiple of 8.
__attribute__((target("avx2"))) void pack_panels_avx2(const float* __restrict r, int64_t rows,
                                                      int64_t hidden, int64_t panel,
                                                      float* __restrict dst) {
  for (int64_t p0 = 0; p0 < rows; p0 += panel) {
    const int64_t w = std::min(panel, rows - p0);
    float* pd = dst + p0 * hidden;  // panel p: hidden rows of w values
    if (hidden % 8 == 0) {
      for (int64_t c0 = 0; c0 < w; c0 += 8)
        for (int64_t i0 = 0; i0 < hidden; i0 += 8)
          transpose8x8_avx2(r + (p0 + c0) * hidden + i0, hidden, pd + i0 * w + c0, w);
    } else {
      for (int64_t c = 0; c < w; ++c)
        for (int64_t i = 0; i < hidden; ++i) pd[i * w + c] = r[(p0 + c) * hidden + i];
    }
  }
}

// dst[c * rows + r] = src[r * cols + c] for a [rows, cols] matrix, in 16x16 tiles (an
// element-wise transpose of R strides a whole row per element and misses the cache); with
// AVX2 as one panel of pack_panels_avx2.
void transpose_tiled(const float* __restrict src, int64_t rows, int64_t cols,
                     float* __restrict dst) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2 && rows % 8 == 0 && cols % 8 == 0) return pack_panels_avx2(src, rows, cols, rows, dst);
  constexpr int64_t kTile = 16;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    const int64_t r1 = std::min(rows, r0 + kTile);
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) dst[c * rows + r] = src[r * cols + c];
    }
  }
}

// AVX-512: out[0:n] = R[0:n, :] . v for row-major R [n, k] (ONNX's layout of a gate block),
// n and k multiples of 16. Sixteen rows at a time, each an FMA chain over k in 16-lane pieces,
// then one vector of their sixteen sums: no transposed copy of R per call (a 512x128 R took
// ~20 us to transpose, as long as ten steps' products). The accumulators are filled in the
// order the reduction's shuffles leave transposed in 4x4, so sum m lands in lane m.
// (The maskz form of the 128-bit lane shuffle, with a full mask: GCC 12 warns that the plain
// form's undefined source may be used uninitialized.)
__attribute__((target("avx512f"))) inline __m512 sixteen_sums(const __m512* a) {
  constexpr __mmask16 kAll = 0xFFFF;
  __m512 b[8], c[4], d[2];
  for (int i = 0; i < 8; ++i)  // [a0 halves summed | a1 halves summed]
    b[i] = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAll, a[2 * i], a[2 * i + 1], 0x44),
                         _mm512_maskz_shuffle_f32x4(kAll, a[2 * i], a[2 * i + 1], 0xEE));
  for (int i = 0; i < 4; ++i)  // four partial sums each of a[4i .. 4i+3]
    c[i] = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAll, b[2 * i], b[2 * i + 1], 0x88),
                         _mm512_maskz_shuffle_f32x4(kAll, b[2 * i], b[2 * i + 1], 0xDD));
  for (int i = 0; i < 2; ++i)
    d[i] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0x44),
                         _mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xDD));
}

__attribute__((target("avx512f"))) void rows_times_vec_avx512(const float* __restrict r,
                                                              const float* __restrict v,
                                                              int64_t n, int64_t k,
                                                              float* __restrict out) {
  for (int64_t g0 = 0; g0 < n; g0 += 16) {
    __m512 acc[16];
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t j = 0; j < k; j += 16) {
      const __m512 vj = _mm512_loadu_ps(v + j);
      for (int i = 0; i < 16; ++i) {
        const int64_t row = g0 + 4 * (i % 4) + i / 4;  // see sixteen_sums
        acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(r + row * k + j), vj, acc[i]);
      }
    }
    _mm512_storeu_ps(out + g0, sixteen_sums(acc));
  }
}

// AVX-512: out[b][0:n] = v[b][0:k] . M for kNb vectors (v[b] at v + b * v_stride) and a
// row-major M [k, n] (R^T), n a multiple of 16: kCols 16-column vectors of all kNb outputs
// stay in registers over k (each M row loaded once for the kNb vectors, each v element
// broadcast), so no horizontal sums are needed (sixteen_sums' shuffles cost about as much as
// the multiply-adds at k = 96).
template <int kNb, int kCols>
__attribute__((target("avx512f"))) inline void vecs_times_block_avx512(
    const float* __restrict v, int64_t v_stride, const float* __restrict m, int64_t k,
    int64_t n, float* __restrict out, int64_t out_stride) {
  __m512 acc[kNb][kCols];
  for (int b = 0; b < kNb; ++b)
    for (int c = 0; c < kCols; ++c) acc[b][c] = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; ++i) {
    __m512 mc[kCols];
    for (int c = 0; c < kCols; ++c) mc[c] = _mm512_loadu_ps(m + i * n + 16 * c);
    for (int b = 0; b < kNb; ++b) {
      const __m512 vb = _mm512_set1_ps(v[b * v_stride + i]);
      for (int c = 0; c < kCols; ++c) acc[b][c] = _mm512_fmadd_ps(mc[c], vb, acc[b][c]);
    }
  }
  for (int b = 0; b < kNb; ++b)
    for (int c = 0; c < kCols; ++c) _mm512_storeu_ps(out + b * out_stride + 16 * c, acc[b][c]);
}

template <int kNb>
__attribute__((target("avx512f"))) void vecs_times_matrix_avx512(const float* v, int64_t v_stride,
                                                                 const float* m, int64_t k,
                                                                 int64_t n, float* out,
                                                                 int64_t out_stride) {
  int64_t j0 = 0;
  for (; j0 + 64 <= n; j0 += 64)
    vecs_times_block_avx512<kNb, 4>(v, v_stride, m + j0, k, n, out + j0, out_stride);
  for (; j0 < n; j0 += 16)
    vecs_times_block_avx512<kNb, 1>(v, v_stride, m + j0, k, n, out + j0, out_stride);
}

// AVX2 + FMA products for the small-batch recurrence, from R^T packed in column panels
// (pack_panels_avx2): panel p holds columns [p W, p W + w) of R^T, its k rows of w values
// contiguous, so a block of columns streams one run of memory (R^T row-major strided each row
// by 4H floats: 20-25% slower at H 128, where R^T is half of L2).
//
// kNb vectors (v[b] at v + b * v_stride) times kCols 8-column vectors of a panel whose rows
// are ms floats apart: kNb * kCols accumulators. For kNb <= 2 only: GCC 12 kept the arrays of
// three or four vectors' accumulators on the stack (a store each per row).
template <int kNb, int kCols>
__attribute__((target("avx2,fma"))) inline void vecs_times_block_avx2(
    const float* __restrict v, int64_t v_stride, const float* __restrict m, int64_t k,
    int64_t ms, float* __restrict out, int64_t out_stride) {
  static_assert(kNb <= 2);
  __m256 acc[kNb * kCols];
  for (int a = 0; a < kNb * kCols; ++a) acc[a] = _mm256_setzero_ps();
  for (int64_t i = 0; i < k; ++i) {
    __m256 mc[kCols];
    for (int c = 0; c < kCols; ++c) mc[c] = _mm256_loadu_ps(m + i * ms + 8 * c);
    for (int b = 0; b < kNb; ++b) {
      const __m256 vb = _mm256_broadcast_ss(v + b * v_stride + i);
      for (int c = 0; c < kCols; ++c)
        acc[b * kCols + c] = _mm256_fmadd_ps(mc[c], vb, acc[b * kCols + c]);
    }
  }
  for (int b = 0; b < kNb; ++b)
    for (int c = 0; c < kCols; ++c)
      _mm256_storeu_ps(out + b * out_stride + 8 * c, acc[b * kCols + c]);
}

// Three or four vectors times a 24-column panel, the accumulators named (see above): 12 FMAs
// per 3 loads and 4 broadcasts, 64 GFLOP/s of the core's 83 at H 96 (two vectors x 32
// columns: 41).
template <int kNb>
__attribute__((target("avx2,fma"))) void four_vecs_times_panel_avx2(
    const float* __restrict v, int64_t v_stride, const float* __restrict m, int64_t k,
    float* __restrict out, int64_t out_stride) {
  static_assert(kNb == 3 || kNb == 4);
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a10 = a00, a11 = a00, a12 = a00,
         a20 = a00, a21 = a00, a22 = a00, a30 = a00, a31 = a00, a32 = a00;
  const float* v0 = v;
  const float* v1 = v + v_stride;
  const float* v2 = v + 2 * v_stride;
  const float* v3 = v + (kNb - 1) * v_stride;
  for (int64_t i = 0; i < k; ++i) {
    const float* row = m + i * 24;
    const __m256 m0 = _mm256_loadu_ps(row), m1 = _mm256_loadu_ps(row + 8),
                 m2 = _mm256_loadu_ps(row + 16);
    __m256 b = _mm256_broadcast_ss(v0 + i);
    a00 = _mm256_fmadd_ps(m0, b, a00), a01 = _mm256_fmadd_ps(m1, b, a01), a02 = _mm256_fmadd_ps(m2, b, a02);
    b = _mm256_broadcast_ss(v1 + i);
    a10 = _mm256_fmadd_ps(m0, b, a10), a11 = _mm256_fmadd_ps(m1, b, a11), a12 = _mm256_fmadd_ps(m2, b, a12);
    b = _mm256_broadcast_ss(v2 + i);
    a20 = _mm256_fmadd_ps(m0, b, a20), a21 = _mm256_fmadd_ps(m1, b, a21), a22 = _mm256_fmadd_ps(m2, b, a22);
    if constexpr (kNb == 4) {
      b = _mm256_broadcast_ss(v3 + i);
      a30 = _mm256_fmadd_ps(m0, b, a30), a31 = _mm256_fmadd_ps(m1, b, a31), a32 = _mm256_fmadd_ps(m2, b, a32);
    }
  }
  const __m256 rows[4][3] = {{a00, a01, a02}, {a10, a11, a12}, {a20, a21, a22}, {a30, a31, a32}};
  for (int bi = 0; bi < kNb; ++bi)
    for (int c = 0; c < 3; ++c) _mm256_storeu_ps(out + bi * out_stride + 8 * c, rows[bi][c]);
}

// The narrow last panel: kNb vectors times `cols` (1..7) 8-column vectors.
template <int kNb>
__attribute__((target("avx2,fma"))) void vecs_times_narrow_avx2(const float* v, int64_t v_stride,
                                                               const float* m, int64_t k,
                                                               int64_t cols, float* out,
                                                               int64_t out_stride) {
  const int64_t ms = 8 * cols;
  switch (cols) {
    case 1: return vecs_times_block_avx2<kNb, 1>(v, v_stride, m, k, ms, out, out_stride);
    case 2: return vecs_times_block_avx2<kNb, 2>(v, v_stride, m, k, ms, out, out_stride);
    case 3: return vecs_times_block_avx2<kNb, 3>(v, v_stride, m, k, ms, out, out_stride);
    case 4: return vecs_times_block_avx2<kNb, 4>(v, v_stride, m, k, ms, out, out_stride);
    case 5: return vecs_times_block_avx2<kNb, 5>(v, v_stride, m, k, ms, out, out_stride);
    case 6: return vecs_times_block_avx2<kNb, 6>(v, v_stride, m, k, ms, out, out_stride);
    default: return vecs_times_block_avx2<kNb, 7>(v, v_stride, m, k, ms, out, out_stride);
  }
}

// Which hand-written kernels this CPU takes: AVX-512's, else AVX2's, else the compiler's
// target clones. TENSORD_TEST_RNN_ISA=avx2 or =generic narrows the choice, so that tests on an
// AVX-512 machine also run the other forms.
struct RnnIsa {
  bool avx512 = false, avx2 = false;
};
RnnIsa rnn_isa() {
  static const bool has512 = __builtin_cpu_supports("avx512f");
  static const bool has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  RnnIsa isa{has512, !has512 && has2};
  if (const char* want = std::getenv("TENSORD_TEST_RNN_ISA")) {
    const std::string w = want;
    if (w == "avx2") isa = RnnIsa{false, has2};
    if (w == "generic") isa = RnnIsa{false, false};
  }
  return isa;
}

// v R^T for the `rows` rows of R ([rows, hidden], row-major) from each batch entry's v. On
// AVX-512 with hidden and rows multiples of 16: one vector straight from R (batch 1: the
// transposed copy would cost about ten steps' products), two to four vectors at once from
// R^T (transposed here once per direction: at batch 4, hidden 96 the row form's horizontal
// sums made the step 1.6x slower). On AVX2 (rows a multiple of 8) from R^T's panels, up to
// four vectors at once (lstm_seqlens' LSTM on Zen 3: 1.29 -> 0.6 ms a call with the AVX2
// cell). Else from R^T by vec_times_matrix, one entry at a time. Borrows R; valid while R is.
class RecurrentProduct {
 public:
  RecurrentProduct(const float* r, int64_t rows, int64_t hidden, int64_t batch, RnnIsa isa)
      : r_(r), rows_(rows), hidden_(hidden) {
    direct_ = isa.avx512 && hidden % 16 == 0 && rows % 16 == 0 && batch == 1;
    multi_ = isa.avx512 && rows % 16 == 0 && batch > 1;
    avx2_ = isa.avx2 && rows % 8 == 0;
    if (direct_) return;
    rt_.resize(static_cast<size_t>(rows * hidden));
    if (avx2_) {  // R^T in panels (one vector: 64 columns, eight FMA chains; more: 24)
      panel_ = batch == 1 ? 64 : 24;
      pack_panels_avx2(r, rows, hidden, panel_, rt_.data());
    } else {
      transpose_tiled(r, rows, hidden, rt_.data());
    }
  }
  // out[0:rows] = v[0:hidden] R^T
  void apply(const float* v, float* out) const {
    if (direct_)
      rows_times_vec_avx512(r_, v, rows_, hidden_, out);
    else if (avx2_)
      apply_avx2(v, 1, out, rows_);
    else
      vec_times_matrix(v, rt_.data(), hidden_, rows_, out);
  }
  // The same for `batch` vectors v + b * hidden, into out + b * out_stride.
  void apply_batch(const float* v, int64_t batch, float* out, int64_t out_stride) const {
    if (avx2_) return apply_avx2(v, batch, out, out_stride);
    if (!multi_) {
      for (int64_t b = 0; b < batch; ++b) apply(v + b * hidden_, out + b * out_stride);
      return;
    }
    for (int64_t b0 = 0; b0 < batch; b0 += 4) {
      const float* vb = v + b0 * hidden_;
      float* ob = out + b0 * out_stride;
      const float* m = rt_.data();
      switch (std::min<int64_t>(4, batch - b0)) {
        case 1: vecs_times_matrix_avx512<1>(vb, hidden_, m, hidden_, rows_, ob, out_stride); break;
        case 2: vecs_times_matrix_avx512<2>(vb, hidden_, m, hidden_, rows_, ob, out_stride); break;
        case 3: vecs_times_matrix_avx512<3>(vb, hidden_, m, hidden_, rows_, ob, out_stride); break;
        default: vecs_times_matrix_avx512<4>(vb, hidden_, m, hidden_, rows_, ob, out_stride);
      }
    }
  }

 private:
  const float* r_;
  int64_t rows_, hidden_;
  // Panel by panel; in each, up to four vectors at once (a panel row loaded once for them).
  void apply_avx2(const float* v, int64_t batch, float* out, int64_t out_stride) const {
    const int64_t k = hidden_;
    for (int64_t p0 = 0; p0 < rows_; p0 += panel_) {
      const int64_t w = std::min(panel_, rows_ - p0);
      const float* m = rt_.data() + p0 * k;
      for (int64_t b0 = 0; b0 < batch;) {
        const float* vb = v + b0 * k;
        float* ob = out + b0 * out_stride + p0;
        const int64_t left = batch - b0;
        if (w < panel_) {  // the narrow last panel
          const int64_t nb = std::min<int64_t>(2, left);
          if (nb == 2)
            vecs_times_narrow_avx2<2>(vb, k, m, k, w / 8, ob, out_stride);
          else
            vecs_times_narrow_avx2<1>(vb, k, m, k, w / 8, ob, out_stride);
          b0 += nb;
        } else if (panel_ == 64) {
          vecs_times_block_avx2<1, 8>(vb, k, m, k, 64, ob, out_stride);
          b0 += 1;
        } else if (left >= 4) {
          four_vecs_times_panel_avx2<4>(vb, k, m, k, ob, out_stride);
          b0 += 4;
        } else if (left == 3) {
          four_vecs_times_panel_avx2<3>(vb, k, m, k, ob, out_stride);
          b0 += 3;
        } else if (left == 2) {
          vecs_times_block_avx2<2, 3>(vb, k, m, k, 24, ob, out_stride);
          b0 += 2;
        } else {
          vecs_times_block_avx2<1, 3>(vb, k, m, k, 24, ob, out_stride);
          b0 += 1;
        }
      }
    }
  }

  bool direct_ = false, multi_ = false, avx2_ = false;
  int64_t panel_ = 0;
  std::vector<float> rt_;
};

// One LSTM step of one batch entry: gates i, o, f, c at offsets 0, H, 2H, 3H of gx + gr;
// peepholes i, o, f. Updates c and h in place. Vectorised (vec_math.h). The peepholes are a
// template choice, not `peep ? peep[j] : 0` in the loop: the compiler turns that into masked
// loads from the null pointer, and suppressing their faults costs ~10x the whole cell
// (measured on AVX-512: 2.5 us against 0.3 us a step at hidden 128).
template <bool kPeepholes>
inline __attribute__((always_inline)) void lstm_cell_body(const float* __restrict gx,
                                                          const float* __restrict gr,
                                                          const float* __restrict peep,
                                                          float* __restrict c,
                                                          float* __restrict h, int64_t hidden) {
  for (int64_t j = 0; j < hidden; ++j) {
    const float c_prev = c[j];
    float si = gx[j] + gr[j];
    float sf = gx[2 * hidden + j] + gr[2 * hidden + j];
    if (kPeepholes) {
      si += peep[j] * c_prev;
      sf += peep[2 * hidden + j] * c_prev;
    }
    const float ig = vec::sigmoid(si);
    const float fg = vec::sigmoid(sf);
    const float cg = vec::tanh(gx[3 * hidden + j] + gr[3 * hidden + j]);
    const float c_new = fg * c_prev + ig * cg;
    float so = gx[hidden + j] + gr[hidden + j];
    if (kPeepholes) so += peep[hidden + j] * c_new;
    const float og = vec::sigmoid(so);
    c[j] = c_new;
    h[j] = og * vec::tanh(c_new);
  }
}

// The generic forms (TENSORD_TEST_RNN_ISA=generic, CPUs without AVX2). No AVX2 clone: GCC 12
// compiles these loops scalar for AVX2 (tests/kernels/test_simd_clones.py checks every
// clone), and an AVX2 CPU runs lstm_cell_avx2 below.
__attribute__((target_clones("avx512f", "default"))) void lstm_cell(
    const float* __restrict gx, const float* __restrict gr, float* __restrict c,
    float* __restrict h, int64_t hidden) {
  lstm_cell_body<false>(gx, gr, nullptr, c, h, hidden);
}

__attribute__((target_clones("avx512f", "default"))) void lstm_cell_peepholes(
    const float* __restrict gx, const float* __restrict gr, const float* __restrict peep,
    float* __restrict c, float* __restrict h, int64_t hidden) {
  lstm_cell_body<true>(gx, gr, peep, c, h, hidden);
}

// The LSTM cell in AVX-512 (vec::sigmoid_avx512 etc.): the cell went from 16% to 12.5% of
// lstm_seqlens' samples at hidden 96, batch 4.
using vec::sigmoid_avx512;
using vec::tanh_avx512;

// gx + gr at offset `at`, the lanes of `m`.
__attribute__((target("avx512f"))) inline __m512 lstm_gate(const float* gx, const float* gr,
                                                           int64_t at, __mmask16 m) {
  return _mm512_add_ps(_mm512_maskz_loadu_ps(m, gx + at), _mm512_maskz_loadu_ps(m, gr + at));
}

// lstm_cell sixteen values at a time, the last piece masked; with peepholes P = [i, o, f]
// (peep), as lstm_cell_body.
template <bool kPeepholes>
__attribute__((target("avx512f"))) void lstm_cell_avx512(const float* __restrict gx,
                                                         const float* __restrict gr,
                                                         const float* __restrict peep,
                                                         float* __restrict c,
                                                         float* __restrict h, int64_t hidden) {
  for (int64_t j = 0; j < hidden; j += 16) {
    const __mmask16 m = hidden - j >= 16 ? __mmask16(0xFFFF)
                                         : static_cast<__mmask16>((1u << (hidden - j)) - 1);
    const __m512 c_prev = _mm512_maskz_loadu_ps(m, c + j);
    __m512 si = lstm_gate(gx, gr, 0 * hidden + j, m);
    __m512 sf = lstm_gate(gx, gr, 2 * hidden + j, m);
    if constexpr (kPeepholes) {
      si = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, peep + j), c_prev, si);
      sf = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, peep + 2 * hidden + j), c_prev, sf);
    }
    const __m512 ig = sigmoid_avx512(si);
    const __m512 fg = sigmoid_avx512(sf);
    const __m512 cg = tanh_avx512(lstm_gate(gx, gr, 3 * hidden + j, m));
    const __m512 c_new = _mm512_fmadd_ps(fg, c_prev, _mm512_mul_ps(ig, cg));
    __m512 so = lstm_gate(gx, gr, 1 * hidden + j, m);
    if constexpr (kPeepholes)
      so = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, peep + hidden + j), c_new, so);
    const __m512 og = sigmoid_avx512(so);
    _mm512_mask_storeu_ps(c + j, m, c_new);
    _mm512_mask_storeu_ps(h + j, m, _mm512_mul_ps(og, tanh_avx512(c_new)));
  }
}

// The same in AVX2 + FMA, eight values at a time, the last piece masked.
using vec::lanes_below_avx2;
using vec::sigmoid_avx2;
using vec::tanh_avx2;

__attribute__((target("avx2,fma"))) inline __m256 gate_avx2(const float* gx, const float* gr,
                                                           int64_t at, __m256i m) {
  return _mm256_add_ps(_mm256_maskload_ps(gx + at, m), _mm256_maskload_ps(gr + at, m));
}

template <bool kPeepholes>
__attribute__((target("avx2,fma"))) void lstm_cell_avx2(const float* __restrict gx,
                                                       const float* __restrict gr,
                                                       const float* __restrict peep,
                                                       float* __restrict c, float* __restrict h,
                                                       int64_t hidden) {
  for (int64_t j = 0; j < hidden; j += 8) {
    const __m256i m = lanes_below_avx2(hidden - j);
    const __m256 c_prev = _mm256_maskload_ps(c + j, m);
    __m256 si = gate_avx2(gx, gr, 0 * hidden + j, m);
    __m256 sf = gate_avx2(gx, gr, 2 * hidden + j, m);
    if constexpr (kPeepholes) {
      si = _mm256_fmadd_ps(_mm256_maskload_ps(peep + j, m), c_prev, si);
      sf = _mm256_fmadd_ps(_mm256_maskload_ps(peep + 2 * hidden + j, m), c_prev, sf);
    }
    const __m256 ig = sigmoid_avx2(si);
    const __m256 fg = sigmoid_avx2(sf);
    const __m256 cg = tanh_avx2(gate_avx2(gx, gr, 3 * hidden + j, m));
    const __m256 c_new = _mm256_fmadd_ps(fg, c_prev, _mm256_mul_ps(ig, cg));
    __m256 so = gate_avx2(gx, gr, 1 * hidden + j, m);
    if constexpr (kPeepholes)
      so = _mm256_fmadd_ps(_mm256_maskload_ps(peep + hidden + j, m), c_new, so);
    const __m256 og = sigmoid_avx2(so);
    _mm256_maskstore_ps(c + j, m, c_new);
    _mm256_maskstore_ps(h + j, m, _mm256_mul_ps(og, tanh_avx2(c_new)));
  }
}

// The recurrence's state slots: the batch entries by sequence length, longest first (ties in
// batch order), so the entries still running at a step are the first slots and the recurrent
// product covers only them (a padded batch of lengths 10-50 spent a third of its products on
// ended entries). Each entry's sums are the same whichever slot it has.
std::vector<int64_t> slots_by_length(const std::vector<int64_t>& lens) {
  std::vector<int64_t> order(lens.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return lens[static_cast<size_t>(a)] > lens[static_cast<size_t>(b)];
  });
  return order;
}

Status lstm_run(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(std::string direction, ctx.attr_string("direction", "forward"));
  TD_ASSIGN_OR_RETURN(int64_t layout, ctx.attr_int("layout", 0));
  const int64_t num_dir = direction == "bidirectional" ? 2 : 1;
  const TensorView& xv = ctx.input(0);
  const int64_t seq = layout == 0 ? xv.shape[0] : xv.shape[1];
  const int64_t batch = layout == 0 ? xv.shape[1] : xv.shape[0];
  const int64_t in_size = xv.shape[2];
  const int64_t hidden = ctx.input(2).shape[2];
  const int64_t gh = 4 * hidden;
  const float* x = xv.as<float>();
  const float* w = ctx.input(1).as<float>();
  const float* r = ctx.input(2).as<float>();
  const float* b = ctx.has_input(3) ? ctx.input(3).as<float>() : nullptr;
  TD_ASSIGN_OR_RETURN(const std::vector<int64_t> lens, rnn_sequence_lengths(ctx, batch, seq));
  const float* h0 = ctx.has_input(5) ? ctx.input(5).as<float>() : nullptr;
  const float* c0 = ctx.has_input(6) ? ctx.input(6).as<float>() : nullptr;
  const float* peep = ctx.has_input(7) ? ctx.input(7).as<float>() : nullptr;
  auto x_row = [&](int64_t t, int64_t bi) { return layout == 0 ? t * batch + bi : bi * seq + t; };
  auto y_at = [&](int64_t t, int64_t d, int64_t bi) {
    return (layout == 0 ? (t * num_dir + d) * batch + bi : (bi * seq + t) * num_dir + d) * hidden;
  };
  auto state_at = [&](int64_t d, int64_t bi) {
    return (layout == 0 ? d * batch + bi : bi * num_dir + d) * hidden;
  };
  const size_t state_n = static_cast<size_t>(num_dir * batch * hidden);
  std::vector<float> y(static_cast<size_t>(seq) * state_n, 0.0f), yh(state_n, 0.0f), yc(state_n, 0.0f);
  const int64_t rows = seq * batch;
  // gx[d] = X W_d^T (+ Wb + Rb) for every row of X at once, before the directions split (the
  // SGEMM may use the whole team). Written whole, so not zeroed first (200 KB at seq 100, H 128).
  std::vector<std::unique_ptr<float[]>> gxs(static_cast<size_t>(num_dir));
  for (int64_t d = 0; d < num_dir; ++d) {
    float* gx = new float[static_cast<size_t>(rows * gh)];
    gxs[static_cast<size_t>(d)].reset(gx);
    if (projection_sgemm(rows, gh, in_size, x, w + d * gh * in_size, gx) != dnnl_success)
      return ctx.error("dnnl_sgemm failed on the input projection");
    if (b) {
      const float* wb = b + d * 2 * gh;
      const float* rb = wb + gh;
      for (int64_t i = 0; i < rows; ++i) {
        float* row = gx + i * gh;
        for (int64_t g = 0; g < gh; ++g) row[g] += wb[g] + rb[g];
      }
    }
  }
  // One direction's recurrence, with its own scratch; it writes only its own slices of y, yh
  // and yc.
  const RnnIsa isa = rnn_isa();
  auto run_direction = [&](int64_t d) -> Status {
    const float* gx = gxs[static_cast<size_t>(d)].get();
    std::vector<float> gr(static_cast<size_t>(batch * gh));
    std::vector<float> h(static_cast<size_t>(batch * hidden)), c(h.size());
    const bool reverse = direction == "reverse" || d == 1;
    const float* rd = r + d * gh * hidden;
    const float* pd = peep ? peep + d * 3 * hidden : nullptr;
    const std::vector<int64_t> order = slots_by_length(lens);
    auto len_of_slot = [&](int64_t sl) {
      return lens[static_cast<size_t>(order[static_cast<size_t>(sl)])];
    };
    for (int64_t sl = 0; sl < batch; ++sl) {
      const int64_t s0 = state_at(d, order[static_cast<size_t>(sl)]);
      for (int64_t j = 0; j < hidden; ++j) {
        h[static_cast<size_t>(sl * hidden + j)] = h0 ? h0[s0 + j] : 0.0f;
        c[static_cast<size_t>(sl * hidden + j)] = c0 ? c0[s0 + j] : 0.0f;
      }
    }
    // Small batches: a library call per step costs more than the math, so the recurrent
    // projection is a vectorised product per batch entry (RecurrentProduct).
    const bool small = batch <= kSmallBatch;
    std::optional<RecurrentProduct> rec;
    if (small) rec.emplace(rd, gh, hidden, batch, isa);
    int64_t active = batch;  // the slots whose sequences have not ended
    for (int64_t step = 0;; ++step) {
      while (active > 0 && len_of_slot(active - 1) <= step)
        --active;  // an ended sequence's state is final
      if (active == 0) break;
      // gr = H_{t-1} R^T for the running entries.
      if (small) {
        rec->apply_batch(h.data(), active, gr.data(), gh);
      } else if (dnnl_sgemm('N', 'T', active, gh, hidden, 1.0f, h.data(), hidden, rd, hidden,
                            0.0f, gr.data(), gh) != dnnl_success) {
        return ctx.error("dnnl_sgemm failed on the recurrent projection");
      }
      for (int64_t sl = 0; sl < active; ++sl) {
        const int64_t bi = order[static_cast<size_t>(sl)];
        const int64_t len = lens[static_cast<size_t>(bi)];
        const int64_t t = reverse ? len - 1 - step : step;
        const float* gxr = gx + x_row(t, bi) * gh;
        const float* grr = gr.data() + sl * gh;
        float* hb = h.data() + sl * hidden;
        float* cb = c.data() + sl * hidden;
        if (isa.avx512)
          (pd ? lstm_cell_avx512<true> : lstm_cell_avx512<false>)(gxr, grr, pd, cb, hb, hidden);
        else if (isa.avx2)
          (pd ? lstm_cell_avx2<true> : lstm_cell_avx2<false>)(gxr, grr, pd, cb, hb, hidden);
        else if (pd)
          lstm_cell_peepholes(gxr, grr, pd, cb, hb, hidden);
        else
          lstm_cell(gxr, grr, cb, hb, hidden);
        std::copy(hb, hb + hidden, y.begin() + y_at(t, d, bi));
      }
    }
    for (int64_t sl = 0; sl < batch; ++sl) {
      const int64_t bi = order[static_cast<size_t>(sl)];
      if (lens[static_cast<size_t>(bi)] == 0) continue;  // Y_h, Y_c stay 0
      const int64_t s0 = state_at(d, bi);
      std::copy_n(h.begin() + sl * hidden, hidden, yh.begin() + s0);
      std::copy_n(c.begin() + sl * hidden, hidden, yc.begin() + s0);
    }
    return OkStatus();
  };
  TD_RETURN_IF_ERROR(run_directions(num_dir, seq * batch * gh * hidden, run_direction));
  const std::vector<float>* results[3] = {&y, &yh, &yc};
  for (int i = 0; i < 3; ++i) {
    if (!ctx.wants_output(i)) continue;
    TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(i));
    if (static_cast<size_t>(out.numel()) != results[i]->size())
      return ctx.error("output {} has {} values, computed {}", i, out.numel(), results[i]->size());
    std::copy(results[i]->begin(), results[i]->end(), out.as<float>());
  }
  return OkStatus();
}

// GRU gates of one batch entry, z, r, h at offsets 0, H, 2H of gx (X W^T + biases) and gr
// (the recurrent products). gru_zr: the update and reset gates. gru_h: the new state, from the
// h gate's recurrent term gr_h, which is H Rh^T (then r . (gr_h + Rbh) is formed here) with
// linear_before_reset, else (r . H) Rh^T with Rbh already in gx. Vectorised (vec_math.h).
__attribute__((target_clones("avx512f", "default"))) void gru_zr(
    const float* __restrict gx, const float* __restrict gr, float* __restrict z,
    float* __restrict rg, int64_t hidden) {
  for (int64_t j = 0; j < hidden; ++j) {
    z[j] = vec::sigmoid(gx[j] + gr[j]);
    rg[j] = vec::sigmoid(gx[hidden + j] + gr[hidden + j]);
  }
}

// Two functions, not a flag and a nullable Rbh in one loop: see lstm_cell_body on masked loads.
__attribute__((target_clones("avx512f", "default"))) void gru_h(
    const float* __restrict gx_h, const float* __restrict gr_h, const float* __restrict z,
    float* __restrict h, int64_t hidden) {
  for (int64_t j = 0; j < hidden; ++j) {
    const float hh = vec::tanh(gx_h[j] + gr_h[j]);
    h[j] = (1.0f - z[j]) * hh + z[j] * h[j];
  }
}

__attribute__((target_clones("avx512f", "default"))) void gru_h_linear_before_reset(
    const float* __restrict gx_h, const float* __restrict gr_h, const float* __restrict rbh,
    const float* __restrict z, const float* __restrict rg, float* __restrict h, int64_t hidden) {
  for (int64_t j = 0; j < hidden; ++j) {
    const float hh = vec::tanh(gx_h[j] + rg[j] * (gr_h[j] + rbh[j]));
    h[j] = (1.0f - z[j]) * hh + z[j] * h[j];
  }
}

// gru_zr, gru_h and gru_h_linear_before_reset in AVX2 + FMA (GCC 12 compiles their loops
// scalar for AVX2, so they have no AVX2 clone).
__attribute__((target("avx2,fma"))) void gru_zr_avx2(const float* __restrict gx,
                                                    const float* __restrict gr,
                                                    float* __restrict z, float* __restrict rg,
                                                    int64_t hidden) {
  for (int64_t j = 0; j < hidden; j += 8) {
    const __m256i m = lanes_below_avx2(hidden - j);
    _mm256_maskstore_ps(z + j, m, sigmoid_avx2(gate_avx2(gx, gr, j, m)));
    _mm256_maskstore_ps(rg + j, m, sigmoid_avx2(gate_avx2(gx, gr, hidden + j, m)));
  }
}

// h = (1 - z) hh + z h (as the scalar form; hh + z (h - hh) missed an ONNX test whose
// outputs near 0 cancel).
__attribute__((target("avx2,fma"))) inline void gru_blend_avx2(__m256 hh, const float* z,
                                                              float* h, int64_t j, __m256i m) {
  const __m256 zj = _mm256_maskload_ps(z + j, m);
  const __m256 hj = _mm256_maskload_ps(h + j, m);
  const __m256 keep = _mm256_mul_ps(_mm256_sub_ps(_mm256_set1_ps(1.0f), zj), hh);
  _mm256_maskstore_ps(h + j, m, _mm256_fmadd_ps(zj, hj, keep));
}

__attribute__((target("avx2,fma"))) void gru_h_avx2(const float* __restrict gx_h,
                                                   const float* __restrict gr_h,
                                                   const float* __restrict z,
                                                   float* __restrict h, int64_t hidden) {
  for (int64_t j = 0; j < hidden; j += 8) {
    const __m256i m = lanes_below_avx2(hidden - j);
    gru_blend_avx2(tanh_avx2(gate_avx2(gx_h, gr_h, j, m)), z, h, j, m);
  }
}

__attribute__((target("avx2,fma"))) void gru_h_linear_before_reset_avx2(
    const float* __restrict gx_h, const float* __restrict gr_h, const float* __restrict rbh,
    const float* __restrict z, const float* __restrict rg, float* __restrict h, int64_t hidden) {
  for (int64_t j = 0; j < hidden; j += 8) {
    const __m256i m = lanes_below_avx2(hidden - j);
    const __m256 rec = _mm256_add_ps(_mm256_maskload_ps(gr_h + j, m), _mm256_maskload_ps(rbh + j, m));
    const __m256 pre = _mm256_fmadd_ps(_mm256_maskload_ps(rg + j, m), rec,
                                       _mm256_maskload_ps(gx_h + j, m));
    gru_blend_avx2(tanh_avx2(pre), z, h, j, m);
  }
}

Status gru_run(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(std::string direction, ctx.attr_string("direction", "forward"));
  TD_ASSIGN_OR_RETURN(int64_t layout, ctx.attr_int("layout", 0));
  TD_ASSIGN_OR_RETURN(int64_t lbr, ctx.attr_int("linear_before_reset", 0));
  const int64_t num_dir = direction == "bidirectional" ? 2 : 1;
  const TensorView& xv = ctx.input(0);
  const int64_t seq = layout == 0 ? xv.shape[0] : xv.shape[1];
  const int64_t batch = layout == 0 ? xv.shape[1] : xv.shape[0];
  const int64_t in_size = xv.shape[2];
  const int64_t hidden = ctx.input(2).shape[2];
  const int64_t gh = 3 * hidden;
  const float* x = xv.as<float>();
  const float* w = ctx.input(1).as<float>();
  const float* r = ctx.input(2).as<float>();
  const float* b = ctx.has_input(3) ? ctx.input(3).as<float>() : nullptr;
  TD_ASSIGN_OR_RETURN(const std::vector<int64_t> lens, rnn_sequence_lengths(ctx, batch, seq));
  const float* h0 = ctx.has_input(5) ? ctx.input(5).as<float>() : nullptr;
  auto x_row = [&](int64_t t, int64_t bi) { return layout == 0 ? t * batch + bi : bi * seq + t; };
  auto y_at = [&](int64_t t, int64_t d, int64_t bi) {
    return (layout == 0 ? (t * num_dir + d) * batch + bi : (bi * seq + t) * num_dir + d) * hidden;
  };
  auto state_at = [&](int64_t d, int64_t bi) {
    return (layout == 0 ? d * batch + bi : bi * num_dir + d) * hidden;
  };
  const size_t state_n = static_cast<size_t>(num_dir * batch * hidden);
  std::vector<float> y(static_cast<size_t>(seq) * state_n, 0.0f), yh(state_n, 0.0f);
  const int64_t rows = seq * batch;
  // gx[d] = X W_d^T + Wb, plus Rb for z and r, and Rbh too when it is outside the reset
  // product; before the directions split, written whole (as in lstm_run).
  std::vector<std::unique_ptr<float[]>> gxs(static_cast<size_t>(num_dir));
  for (int64_t d = 0; d < num_dir; ++d) {
    float* gx = new float[static_cast<size_t>(rows * gh)];
    gxs[static_cast<size_t>(d)].reset(gx);
    if (projection_sgemm(rows, gh, in_size, x, w + d * gh * in_size, gx) != dnnl_success)
      return ctx.error("dnnl_sgemm failed on the input projection");
    if (b) {
      const float* wb = b + d * 2 * gh;
      const float* rb = wb + gh;
      const int64_t rb_end = lbr ? 2 * hidden : gh;
      for (int64_t i = 0; i < rows; ++i) {
        float* row = gx + i * gh;
        for (int64_t g = 0; g < gh; ++g) row[g] += wb[g] + (g < rb_end ? rb[g] : 0.0f);
      }
    }
  }
  const std::vector<float> no_rbh(b ? 0 : static_cast<size_t>(hidden), 0.0f);
  const RnnIsa isa = rnn_isa();
  // One direction's recurrence, with its own scratch; it writes only its own slices of y and yh.
  auto run_direction = [&](int64_t d) -> Status {
    const float* gx = gxs[static_cast<size_t>(d)].get();
    std::vector<float> gr(static_cast<size_t>(batch * gh));
    std::vector<float> h(static_cast<size_t>(batch * hidden)), z(h.size()), rg(h.size()),
        rh(h.size());
    const bool reverse = direction == "reverse" || d == 1;
    const float* rd = r + d * gh * hidden;
    const float* rbh = b ? b + d * 2 * gh + gh + 2 * hidden : no_rbh.data();  // Rb's h block
    const std::vector<int64_t> order = slots_by_length(lens);
    auto len_of_slot = [&](int64_t sl) {
      return lens[static_cast<size_t>(order[static_cast<size_t>(sl)])];
    };
    for (int64_t sl = 0; sl < batch; ++sl) {
      const int64_t s0 = state_at(d, order[static_cast<size_t>(sl)]);
      for (int64_t j = 0; j < hidden; ++j)
        h[static_cast<size_t>(sl * hidden + j)] = h0 ? h0[s0 + j] : 0.0f;
    }
    // Small batches: products per batch entry with R's [z r] rows and its [h] rows.
    const bool small = batch <= kSmallBatch;
    const float* rd_h = rd + 2 * hidden * hidden;
    std::optional<RecurrentProduct> rec_zr, rec_h;
    if (small) {
      rec_zr.emplace(rd, 2 * hidden, hidden, batch, isa);
      rec_h.emplace(rd_h, hidden, hidden, batch, isa);
    }
    int64_t active = batch;  // the slots whose sequences have not ended (as the LSTM's)
    for (int64_t step = 0;; ++step) {
      while (active > 0 && len_of_slot(active - 1) <= step)
        --active;
      if (active == 0) break;
      // z and r (and, with linear_before_reset, H Rh^T) for the running entries.
      const int64_t first_n = lbr ? gh : 2 * hidden;
      if (small) {
        rec_zr->apply_batch(h.data(), active, gr.data(), gh);
        if (lbr) rec_h->apply_batch(h.data(), active, gr.data() + 2 * hidden, gh);
      } else if (dnnl_sgemm('N', 'T', active, first_n, hidden, 1.0f, h.data(), hidden, rd, hidden,
                            0.0f, gr.data(), gh) != dnnl_success) {
        return ctx.error("dnnl_sgemm failed on the recurrent projection");
      }
      for (int64_t sl = 0; sl < active; ++sl) {
        const int64_t bi = order[static_cast<size_t>(sl)];
        const int64_t len = lens[static_cast<size_t>(bi)];
        const int64_t t = reverse ? len - 1 - step : step;
        (isa.avx2 ? gru_zr_avx2 : gru_zr)(gx + x_row(t, bi) * gh, gr.data() + sl * gh,
                                          z.data() + sl * hidden, rg.data() + sl * hidden,
                                          hidden);
      }
      if (!lbr) {  // gr_h = (r . H_{t-1}) Rh^T
        for (size_t i = 0; i < static_cast<size_t>(active * hidden); ++i) rh[i] = rg[i] * h[i];
        if (small) {
          rec_h->apply_batch(rh.data(), active, gr.data() + 2 * hidden, gh);
        } else if (dnnl_sgemm('N', 'T', active, hidden, hidden, 1.0f, rh.data(), hidden, rd_h,
                              hidden, 0.0f, gr.data() + 2 * hidden, gh) != dnnl_success) {
          return ctx.error("dnnl_sgemm failed on the recurrent projection");
        }
      }
      for (int64_t sl = 0; sl < active; ++sl) {
        const int64_t bi = order[static_cast<size_t>(sl)];
        const int64_t len = lens[static_cast<size_t>(bi)];
        const int64_t t = reverse ? len - 1 - step : step;
        float* hb = h.data() + sl * hidden;
        const float* gx_h = gx + x_row(t, bi) * gh + 2 * hidden;
        const float* gr_h = gr.data() + sl * gh + 2 * hidden;
        if (lbr)
          (isa.avx2 ? gru_h_linear_before_reset_avx2 : gru_h_linear_before_reset)(
              gx_h, gr_h, rbh, z.data() + sl * hidden, rg.data() + sl * hidden, hb, hidden);
        else
          (isa.avx2 ? gru_h_avx2 : gru_h)(gx_h, gr_h, z.data() + sl * hidden, hb, hidden);
        std::copy(hb, hb + hidden, y.begin() + y_at(t, d, bi));
      }
    }
    for (int64_t sl = 0; sl < batch; ++sl) {
      const int64_t bi = order[static_cast<size_t>(sl)];
      if (lens[static_cast<size_t>(bi)] == 0) continue;  // Y_h stays 0
      std::copy_n(h.begin() + sl * hidden, hidden, yh.begin() + state_at(d, bi));
    }
    return OkStatus();
  };
  TD_RETURN_IF_ERROR(run_directions(num_dir, seq * batch * gh * hidden, run_direction));
  const std::vector<float>* results[2] = {&y, &yh};
  for (int i = 0; i < 2; ++i) {
    if (!ctx.wants_output(i)) continue;
    TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(i));
    if (static_cast<size_t>(out.numel()) != results[i]->size())
      return ctx.error("output {} has {} values, computed {}", i, out.numel(), results[i]->size());
    std::copy(results[i]->begin(), results[i]->end(), out.as<float>());
  }
  return OkStatus();
}

}  // namespace

void register_onednn_rnn_kernels(KernelRegistry& r) {
  r.add(KernelDef{"LSTM", "onednn", lstm_accepts, lstm_run, false});
  r.add(KernelDef{"GRU", "onednn", gru_accepts, gru_run, false});
}

}  // namespace cpu
}  // namespace tensord
