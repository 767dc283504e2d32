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

// One output row's place: its input plane (image * blocks + block, all depths), and the
// first depth and height its windows read.
struct Row {
  int64_t plane, oz, oy;
};
Row row_of(const BlockedPool::Geometry& g, int64_t r) {
  const int64_t oy = r % g.oh, rest = r / g.oh;
  return {rest / g.od, rest % g.od, oy};
}
}  // namespace

void BlockedPool::run(const float* x, float* y) const {
  // The vector path needs AVX only (8-float loads, max, add, div).
  static const bool avx = __builtin_cpu_supports("avx");
  const int64_t cb = (g_.c + kBlock - 1) / kBlock;
  // A row of output pixels is the unit: a few microseconds at the smallest maps.
  const int64_t grain =
      std::max<int64_t>(1, 2048 / std::max<int64_t>(1, g_.ow * g_.kd * g_.kh * g_.kw));
  ThreadPool::get().parallel_for(g_.n * cb * g_.od * g_.oh, grain, [&](int64_t lo, int64_t hi) {
    if (avx)
      rows_avx(x, y, lo, hi);
    else
      rows(x, y, lo, hi);
  });
}

// The divisor of the average window starting at (z0, y0, x0): its taps inside the input, or
// inside the padded input.
int64_t BlockedPool::divisor(int64_t z0, int64_t y0, int64_t x0) const {
  const Geometry& g = g_;
  const Taps tz = taps(z0, g.kd, g.dd, g.d, g.pf, g.pk);
  const Taps ty = taps(y0, g.kh, g.dh, g.h, g.pt, g.pb);
  const Taps tx = taps(x0, g.kw, g.dw, g.w, g.pl, g.pr);
  return kind_ == Kind::kAverageExcludePad ? tz.inside * ty.inside * tx.inside
                                           : tz.counted * ty.counted * tx.counted;
}

// Output rows [lo, hi) of n * blocks * od * oh, one float at a time.
void BlockedPool::rows(const float* x, float* y, int64_t lo, int64_t hi) const {
  const Geometry& g = g_;
  for (int64_t r = lo; r < hi; ++r) {
    const Row at = row_of(g, r);
    const float* in = x + at.plane * g.d * g.h * g.w * kBlock;
    float* out = y + r * g.ow * kBlock;
    const int64_t z0 = at.oz * g.sd - g.pf, y0 = at.oy * g.sh - g.pt;
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t x0 = ox * g.sw - g.pl;
      float acc[kBlock];
      std::fill(acc, acc + kBlock, kind_ == Kind::kMax ? -FLT_MAX : 0.0f);
      for (int64_t kz = 0; kz < g.kd; ++kz) {
        const int64_t iz = z0 + kz * g.dd;
        if (iz < 0 || iz >= g.d) continue;
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          const int64_t iy = y0 + ky * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            const int64_t ix = x0 + kx * g.dw;
            if (ix < 0 || ix >= g.w) continue;
            const float* v = in + ((iz * g.h + iy) * g.w + ix) * kBlock;
            for (int64_t j = 0; j < kBlock; ++j)
              acc[j] = kind_ == Kind::kMax ? std::max(acc[j], v[j]) : acc[j] + v[j];
          }
        }
      }
      if (kind_ != Kind::kMax) {
        const int64_t d = divisor(z0, y0, x0);
        for (int64_t j = 0; j < kBlock; ++j) acc[j] = d > 0 ? acc[j] / static_cast<float>(d) : 0.0f;
      }
      std::copy(acc, acc + kBlock, out + ox * kBlock);
    }
  }
}

__attribute__((target("avx"))) void BlockedPool::rows_avx(const float* x, float* y, int64_t lo,
                                                           int64_t hi) const {
  const Geometry& g = g_;
  const bool max = kind_ == Kind::kMax;
  for (int64_t r = lo; r < hi; ++r) {
    const Row at = row_of(g, r);
    const float* in = x + at.plane * g.d * g.h * g.w * kBlock;
    float* out = y + r * g.ow * kBlock;
    const int64_t z0 = at.oz * g.sd - g.pf, y0 = at.oy * g.sh - g.pt;
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t x0 = ox * g.sw - g.pl;
      __m256 acc = max ? _mm256_set1_ps(-FLT_MAX) : _mm256_setzero_ps();
      for (int64_t kz = 0; kz < g.kd; ++kz) {
        const int64_t iz = z0 + kz * g.dd;
        if (iz < 0 || iz >= g.d) continue;
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          const int64_t iy = y0 + ky * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          const float* row = in + (iz * g.h + iy) * g.w * kBlock;
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            const int64_t ix = x0 + kx * g.dw;
            if (ix < 0 || ix >= g.w) continue;
            const __m256 v = _mm256_loadu_ps(row + ix * kBlock);
            acc = max ? _mm256_max_ps(acc, v) : _mm256_add_ps(acc, v);
          }
        }
      }
      if (!max) {
        const int64_t d = divisor(z0, y0, x0);
        acc = d > 0 ? _mm256_div_ps(acc, _mm256_set1_ps(static_cast<float>(d)))
                    : _mm256_setzero_ps();
      }
      _mm256_storeu_ps(out + ox * kBlock, acc);
    }
  }
}

}  // namespace tensord::cpu
