#include "backends/cpu/blocked_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <cfloat>

#include "backends/cpu/thread_pool.h"

namespace tensord::cpu {
namespace {
constexpr int64_t kBlock = 8;

// Taps of one window dimension: those reading the input ([0, size)) and, for the divisor
// with padding counted, those inside [-pad_before, size + pad_after).
struct Taps {
  int64_t inside = 0, counted = 0;
};
Taps taps(int64_t start, int64_t k, int64_t dil, int64_t size, int64_t pad_before,
          int64_t pad_after) {
  Taps t;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t at = start + i * dil;
    t.inside += at >= 0 && at < size;
    t.counted += at >= -pad_before && at < size + pad_after;
  }
  return t;
}
}  // namespace

void BlockedPool::run(const float* x, float* y) const {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  const int64_t cb = (g_.c + kBlock - 1) / kBlock;
  // A row of output pixels is the unit: a few microseconds at the smallest maps.
  const int64_t grain = std::max<int64_t>(1, 2048 / std::max<int64_t>(1, g_.ow * g_.kh * g_.kw));
  ThreadPool::get().parallel_for(g_.n * cb * g_.oh, grain, [&](int64_t lo, int64_t hi) {
    if (avx2)
      rows_avx2(x, y, lo, hi);
    else
      rows(x, y, lo, hi);
  });
}

// Output rows [lo, hi) of n * blocks * oh, one float at a time.
void BlockedPool::rows(const float* x, float* y, int64_t lo, int64_t hi) const {
  const Geometry& g = g_;
  for (int64_t r = lo; r < hi; ++r) {
    const int64_t oy = r % g.oh, plane = r / g.oh;  // plane: image * blocks + block
    const float* in = x + plane * g.h * g.w * kBlock;
    float* out = y + r * g.ow * kBlock;
    const int64_t y0 = oy * g.sh - g.pt;
    const Taps ty = taps(y0, g.kh, g.dh, g.h, g.pt, g.pb);
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t x0 = ox * g.sw - g.pl;
      float acc[kBlock];
      std::fill(acc, acc + kBlock, kind_ == Kind::kMax ? -FLT_MAX : 0.0f);
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t iy = y0 + ky * g.dh;
        if (iy < 0 || iy >= g.h) continue;
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const int64_t ix = x0 + kx * g.dw;
          if (ix < 0 || ix >= g.w) continue;
          const float* v = in + (iy * g.w + ix) * kBlock;
          for (int64_t j = 0; j < kBlock; ++j)
            acc[j] = kind_ == Kind::kMax ? std::max(acc[j], v[j]) : acc[j] + v[j];
        }
      }
      if (kind_ != Kind::kMax) {
        const Taps tx = taps(x0, g.kw, g.dw, g.w, g.pl, g.pr);
        const int64_t d = kind_ == Kind::kAverageExcludePad ? ty.inside * tx.inside
                                                           : ty.counted * tx.counted;
        for (int64_t j = 0; j < kBlock; ++j) acc[j] = d > 0 ? acc[j] / static_cast<float>(d) : 0.0f;
      }
      std::copy(acc, acc + kBlock, out + ox * kBlock);
    }
  }
}

__attribute__((target("avx2"))) void BlockedPool::rows_avx2(const float* x, float* y,
                                                             int64_t lo, int64_t hi) const {
  const Geometry& g = g_;
  const bool max = kind_ == Kind::kMax;
  for (int64_t r = lo; r < hi; ++r) {
    const int64_t oy = r % g.oh, plane = r / g.oh;
    const float* in = x + plane * g.h * g.w * kBlock;
    float* out = y + r * g.ow * kBlock;
    const int64_t y0 = oy * g.sh - g.pt;
    const Taps ty = taps(y0, g.kh, g.dh, g.h, g.pt, g.pb);
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t x0 = ox * g.sw - g.pl;
      __m256 acc = max ? _mm256_set1_ps(-FLT_MAX) : _mm256_setzero_ps();
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t iy = y0 + ky * g.dh;
        if (iy < 0 || iy >= g.h) continue;
        const float* row = in + iy * g.w * kBlock;
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const int64_t ix = x0 + kx * g.dw;
          if (ix < 0 || ix >= g.w) continue;
          const __m256 v = _mm256_loadu_ps(row + ix * kBlock);
          acc = max ? _mm256_max_ps(acc, v) : _mm256_add_ps(acc, v);
        }
      }
      if (!max) {
        const Taps tx = taps(x0, g.kw, g.dw, g.w, g.pl, g.pr);
        const int64_t d = kind_ == Kind::kAverageExcludePad ? ty.inside * tx.inside
                                                           : ty.counted * tx.counted;
        acc = d > 0 ? _mm256_div_ps(acc, _mm256_set1_ps(static_cast<float>(d)))
                    : _mm256_setzero_ps();
      }
      _mm256_storeu_ps(out + ox * kBlock, acc);
    }
  }
}

}  // namespace tensord::cpu
