#include "backends/cpu/grouped_conv.h"

#include <immintrin.h>

#include <algorithm>

#include "backends/cpu/thread_pool.h"

namespace tensord::cpu {

bool SmallGroupConv::applies(int64_t c_in, int64_t c_out, int64_t group) {
  if (group <= 1 || c_in != c_out || c_in % group != 0) return false;
  const int64_t cg = c_in / group;
  return cg == 2 || cg == 4;
}

SmallGroupConv::SmallGroupConv(const Geometry& g, const float* weights, const float* bias,
                               bool relu, bool blocked8)
    : g_(g), cg_(g.c / g.group), cp_((g.c + 7) / 8 * 8), relu_(relu), blocked8_(blocked8) {
  const int64_t taps = g.kh * g.kw, c = g.c;
  w_.assign(static_cast<size_t>(taps * cg_ * cp_), 0.0f);
  for (int64_t o = 0; o < c; ++o)
    for (int64_t j = 0; j < cg_; ++j)
      for (int64_t t = 0; t < taps; ++t)
        w_[static_cast<size_t>((t * cg_ + j) * cp_ + o)] = weights[(o * cg_ + j) * taps + t];
  bias_.assign(static_cast<size_t>(cp_), 0.0f);
  if (bias) std::copy(bias, bias + c, bias_.begin());
}

void SmallGroupConv::run(const float* x, float* y) const {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  ThreadPool::get().parallel_for(g_.n * g_.oh, 1, [&](int64_t lo, int64_t hi) {
    if (avx2)
      rows_avx2(x, y, lo, hi);
    else
      rows(x, y, 0, lo, hi);
  });
}

// Output channel o at (b, oy, ox), channels-last, one multiply-add at a time.
float SmallGroupConv::channel(const float* x, int64_t b, int64_t oy, int64_t ox,
                              int64_t o) const {
  const Geometry& g = g_;
  const int64_t base = o / cg_ * cg_;
  float s = bias_[static_cast<size_t>(o)];
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
    if (iy < 0 || iy >= g.h) continue;
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      const int64_t ix = ox * g.sw - g.pw + kx * g.dw;
      if (ix < 0 || ix >= g.w) continue;
      const float* in = x + ((b * g.h + iy) * g.w + ix) * g.c;
      const float* wt = w_.data() + (ky * g.kw + kx) * cg_ * cp_;
      for (int64_t j = 0; j < cg_; ++j) s += in[base + j] * wt[j * cp_ + o];
    }
  }
  return relu_ ? std::max(s, 0.0f) : s;
}

// Output rows [lo, hi) of n * oh, channels [from, c), channels-last, one at a time (CPUs
// without AVX2, and the channels past the last whole vector).
void SmallGroupConv::rows(const float* x, float* y, int64_t from, int64_t lo, int64_t hi) const {
  const Geometry& g = g_;
  for (int64_t r = lo; r < hi; ++r) {
    const int64_t b = r / g.oh, oy = r % g.oh;
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      float* out = y + ((b * g.oh + oy) * g.ow + ox) * g.c;
      for (int64_t o = from; o < g.c; ++o) out[o] = channel(x, b, oy, ox, o);
    }
  }
}

namespace {

// Where a value's elements are: element (b, y, x, channel block k, lane l) at
// b * batch + k * block + y * row + x * pixel + l.
struct Strides {
  int64_t batch, block, row, pixel;
};

Strides strides_of(bool blocked8, int64_t c, int64_t cp, int64_t h, int64_t w) {
  if (blocked8) return {cp * h * w, 8 * h * w, 8 * w, 8};
  return {c * h * w, 8, c * w, c};
}

struct Job {
  const float *x, *w, *bias;
  float* y;
  int64_t c, cp, h, w_in, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
  Strides in, out;
  bool relu;
};

// acc[v] += sum_j (input vector v, element j of each group broadcast) * weights of input j.
template <int CG, int NV>
__attribute__((target("avx2,fma"), always_inline)) inline void taps_block(
    __m256* acc, const float* in, int64_t block, const float* wt, int64_t cp) {
  for (int v = 0; v < NV; ++v) {
    const __m256 xv = _mm256_loadu_ps(in + v * block);
    const float* w = wt + 8 * v;
    if constexpr (CG == 4) {
      acc[v] = _mm256_fmadd_ps(_mm256_permute_ps(xv, 0x00), _mm256_loadu_ps(w), acc[v]);
      acc[v] = _mm256_fmadd_ps(_mm256_permute_ps(xv, 0x55), _mm256_loadu_ps(w + cp), acc[v]);
      acc[v] = _mm256_fmadd_ps(_mm256_permute_ps(xv, 0xAA), _mm256_loadu_ps(w + 2 * cp), acc[v]);
      acc[v] = _mm256_fmadd_ps(_mm256_permute_ps(xv, 0xFF), _mm256_loadu_ps(w + 3 * cp), acc[v]);
    } else {  // CG == 2: lanes (0, 0, 2, 2) then (1, 1, 3, 3) of each half
      acc[v] = _mm256_fmadd_ps(_mm256_permute_ps(xv, 0xA0), _mm256_loadu_ps(w), acc[v]);
      acc[v] = _mm256_fmadd_ps(_mm256_permute_ps(xv, 0xF5), _mm256_loadu_ps(w + cp), acc[v]);
    }
  }
}

// Channels [c0, c0 + 8 * NV) of output rows [lo, hi); lanes at or past c are written as 0
// (a blocked layout's padding; `lanes` masks them).
template <int CG, int NV>
__attribute__((target("avx2,fma"))) void block_rows(const Job& j, int64_t c0, int64_t lo,
                                                    int64_t hi) {
  const __m256 zero = _mm256_setzero_ps();
  __m256 keep[NV];
  for (int v = 0; v < NV; ++v) {
    alignas(32) int32_t m[8];
    for (int l = 0; l < 8; ++l) m[l] = c0 + 8 * v + l < j.c ? -1 : 0;
    keep[v] = _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(m)));
  }
  const int64_t k0 = c0 / 8;
  for (int64_t r = lo; r < hi; ++r) {
    const int64_t b = r / j.oh, oy = r % j.oh;
    for (int64_t ox = 0; ox < j.ow; ++ox) {
      __m256 acc[NV];
      for (int v = 0; v < NV; ++v) acc[v] = _mm256_loadu_ps(j.bias + c0 + 8 * v);
      for (int64_t ky = 0; ky < j.kh; ++ky) {
        const int64_t iy = oy * j.sh - j.ph + ky * j.dh;
        if (iy < 0 || iy >= j.h) continue;
        const float* row = j.x + b * j.in.batch + k0 * j.in.block + iy * j.in.row;
        for (int64_t kx = 0; kx < j.kw; ++kx) {
          const int64_t ix = ox * j.sw - j.pw + kx * j.dw;
          if (ix < 0 || ix >= j.w_in) continue;
          taps_block<CG, NV>(acc, row + ix * j.in.pixel, j.in.block,
                             j.w + (ky * j.kw + kx) * CG * j.cp + c0, j.cp);
        }
      }
      float* out = j.y + b * j.out.batch + k0 * j.out.block + oy * j.out.row + ox * j.out.pixel;
      for (int v = 0; v < NV; ++v) {
        __m256 r = _mm256_and_ps(acc[v], keep[v]);
        if (j.relu) r = _mm256_max_ps(r, zero);
        _mm256_storeu_ps(out + v * j.out.block, r);
      }
    }
  }
}

// Every whole vector of channels: [0, vec) in blocks of 32, 24, 16 or 8.
template <int CG>
__attribute__((target("avx2,fma"))) void all_blocks(const Job& j, int64_t vec, int64_t lo,
                                                    int64_t hi) {
  int64_t c0 = 0;
  for (; c0 + 32 <= vec; c0 += 32) block_rows<CG, 4>(j, c0, lo, hi);
  switch ((vec - c0) / 8) {
    case 3: block_rows<CG, 3>(j, c0, lo, hi); break;
    case 2: block_rows<CG, 2>(j, c0, lo, hi); break;
    case 1: block_rows<CG, 1>(j, c0, lo, hi); break;
    default: break;
  }
}

}  // namespace

void SmallGroupConv::rows_avx2(const float* x, float* y, int64_t lo, int64_t hi) const {
  const Geometry& g = g_;
  const Job j{x, w_.data(), bias_.data(), y, g.c, cp_, g.h, g.w, g.oh, g.ow, g.kh, g.kw,
              g.sh, g.sw, g.ph, g.pw, g.dh, g.dw,
              strides_of(blocked8_, g.c, cp_, g.h, g.w),
              strides_of(blocked8_, g.c, cp_, g.oh, g.ow), relu_};
  // nChw8c: every block, the last one's padding included; channels-last: the whole vectors,
  // then the channels past them one at a time.
  const int64_t vec = blocked8_ ? cp_ : g.c / 8 * 8;
  if (cg_ == 4)
    all_blocks<4>(j, vec, lo, hi);
  else
    all_blocks<2>(j, vec, lo, hi);
  if (vec < g.c && !blocked8_) rows(x, y, vec, lo, hi);
}

}  // namespace tensord::cpu
