#include "backends/cpu/blocked_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <cfloat>

#include "backends/cpu/thread_pool.h"

namespace tensord::cpu {
namespace {
constexpr int64_t kBlock = 8;

// The spans of one dimension's outputs: window i starts at i * stride - pad_before.
std::vector<BlockedPool::Span> spans(int64_t outputs, int64_t k, int64_t stride, int64_t dil,
                                     int64_t size, int64_t pad_before, int64_t pad_after,
                                     bool count_pad) {
  std::vector<BlockedPool::Span> out;
  for (int64_t i = 0; i < outputs; ++i) {
    const int64_t start = i * stride - pad_before;
    BlockedPool::Span s{k, 0, 0};
    int64_t counted = 0;
    for (int64_t t = 0; t < k; ++t) {
      const int64_t at = start + t * dil;
      if (at >= 0 && at < size) s.lo = std::min(s.lo, t), s.hi = t + 1, ++s.count;
      counted += at >= -pad_before && at < size + pad_after;
    }
    if (s.hi <= s.lo) s.lo = s.hi = 0;  // no tap reads the input
    if (count_pad) s.count = counted;
    out.push_back(s);
  }
  return out;
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

BlockedPool::BlockedPool(const Geometry& g, Kind kind) : g_(g), kind_(kind) {
  const bool count_pad = kind == Kind::kAverageIncludePad;
  z_ = spans(g.od, g.kd, g.sd, g.dd, g.d, g.pf, g.pk, count_pad);
  y_ = spans(g.oh, g.kh, g.sh, g.dh, g.h, g.pt, g.pb, count_pad);
  x_ = spans(g.ow, g.kw, g.sw, g.dw, g.w, g.pl, g.pr, count_pad);
}

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

// Output rows [lo, hi) of n * blocks * od * oh, one float at a time.
void BlockedPool::rows(const float* x, float* y, int64_t lo, int64_t hi) const {
  const Geometry& g = g_;
  const bool max = kind_ == Kind::kMax;
  for (int64_t r = lo; r < hi; ++r) {
    const Row at = row_of(g, r);
    const float* in = x + at.plane * g.d * g.h * g.w * kBlock;
    float* out = y + r * g.ow * kBlock;
    const Span sz = z_[at.oz], sy = y_[at.oy];
    const int64_t z0 = at.oz * g.sd - g.pf, y0 = at.oy * g.sh - g.pt;
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const Span sx = x_[ox];
      const int64_t x0 = ox * g.sw - g.pl;
      float acc[kBlock];
      std::fill(acc, acc + kBlock, max ? -FLT_MAX : 0.0f);
      for (int64_t kz = sz.lo; kz < sz.hi; ++kz)
        for (int64_t ky = sy.lo; ky < sy.hi; ++ky) {
          const int64_t row = ((z0 + kz * g.dd) * g.h + y0 + ky * g.dh) * g.w + x0;
          for (int64_t kx = sx.lo; kx < sx.hi; ++kx) {
            const float* v = in + (row + kx * g.dw) * kBlock;
            for (int64_t j = 0; j < kBlock; ++j)
              acc[j] = max ? std::max(acc[j], v[j]) : acc[j] + v[j];
          }
        }
      if (!max) {
        const int64_t d = sz.count * sy.count * sx.count;
        for (int64_t j = 0; j < kBlock; ++j) acc[j] = d > 0 ? acc[j] / static_cast<float>(d) : 0.0f;
      }
      std::copy(acc, acc + kBlock, out + ox * kBlock);
    }
  }
}

// The same with one 8-float vector per pixel. The window's valid taps come from the spans
// computed at construction: no bounds test per tap and no divisor recounted per pixel (both
// took most of the average pools' time: Inception v3's 3x3 pools at 35x35 and 17x17).
__attribute__((target("avx"))) void BlockedPool::rows_avx(const float* x, float* y, int64_t lo,
                                                           int64_t hi) const {
  const Geometry& g = g_;
  const bool max = kind_ == Kind::kMax;
  for (int64_t r = lo; r < hi; ++r) {
    const Row at = row_of(g, r);
    const float* in = x + at.plane * g.d * g.h * g.w * kBlock;
    float* out = y + r * g.ow * kBlock;
    const Span sz = z_[at.oz], sy = y_[at.oy];
    const int64_t z0 = at.oz * g.sd - g.pf, y0 = at.oy * g.sh - g.pt;
    const int64_t zy = sz.count * sy.count;
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const Span sx = x_[ox];
      const int64_t x0 = ox * g.sw - g.pl;
      __m256 acc = max ? _mm256_set1_ps(-FLT_MAX) : _mm256_setzero_ps();
      for (int64_t kz = sz.lo; kz < sz.hi; ++kz)
        for (int64_t ky = sy.lo; ky < sy.hi; ++ky) {
          const int64_t row = ((z0 + kz * g.dd) * g.h + y0 + ky * g.dh) * g.w + x0;
          for (int64_t kx = sx.lo; kx < sx.hi; ++kx) {
            const __m256 v = _mm256_loadu_ps(in + (row + kx * g.dw) * kBlock);
            acc = max ? _mm256_max_ps(acc, v) : _mm256_add_ps(acc, v);
          }
        }
      if (!max) {
        const int64_t d = zy * sx.count;
        acc = d > 0 ? _mm256_div_ps(acc, _mm256_set1_ps(static_cast<float>(d)))
                    : _mm256_setzero_ps();
      }
      _mm256_storeu_ps(out + ox * kBlock, acc);
    }
  }
}

}  // namespace tensord::cpu
