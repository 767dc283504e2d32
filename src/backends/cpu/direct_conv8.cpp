#include "backends/cpu/direct_conv8.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <dnnl.hpp>

#include "backends/cpu/thread_pool.h"

namespace tensord::cpu {
namespace {

constexpr int64_t kBlock = 8;      // channels per nChw8c block
constexpr int64_t kGroup = 4;      // output blocks per tile (32 channels)
constexpr int64_t kTile = 3;       // output pixels per tile
constexpr int64_t kChunk = 2;      // input blocks per pass over a tile (18 KB of 3x3 weights)
constexpr int64_t kMaxItemPixels = 96;
constexpr size_t kKeptPadFloats = size_t{1} << 20;  // 4 MB
constexpr size_t kSerialPadFloats = size_t{1} << 16;  // 256 KB

// One tap of a tile: the eight input channels of a block at three pixels (i0, i1, i2) times
// the 8 x 32 weights at w, into 12 accumulators. The broadcasts of one channel are shared by
// the four weight vectors, each loaded once: 3 + 4 loads per 12 FMAs. Written as assembly
// because GCC turns the same intrinsics into memory-operand FMAs that reload every weight
// three times and spill accumulators (measured 1.6x slower than oneDNN's kernel).
#define TD_DC8_STEP(c)                                  \
  "vbroadcastss " #c "*4(%[i0]), %%ymm12\n\t"           \
  "vbroadcastss " #c "*4(%[i1]), %%ymm13\n\t"           \
  "vbroadcastss " #c "*4(%[i2]), %%ymm14\n\t"           \
  "vmovups (" #c "*128)(%[w]), %%ymm15\n\t"             \
  "vfmadd231ps %%ymm15, %%ymm12, %[a00]\n\t"            \
  "vfmadd231ps %%ymm15, %%ymm13, %[a01]\n\t"            \
  "vfmadd231ps %%ymm15, %%ymm14, %[a02]\n\t"            \
  "vmovups (" #c "*128+32)(%[w]), %%ymm15\n\t"          \
  "vfmadd231ps %%ymm15, %%ymm12, %[a10]\n\t"            \
  "vfmadd231ps %%ymm15, %%ymm13, %[a11]\n\t"            \
  "vfmadd231ps %%ymm15, %%ymm14, %[a12]\n\t"            \
  "vmovups (" #c "*128+64)(%[w]), %%ymm15\n\t"          \
  "vfmadd231ps %%ymm15, %%ymm12, %[a20]\n\t"            \
  "vfmadd231ps %%ymm15, %%ymm13, %[a21]\n\t"            \
  "vfmadd231ps %%ymm15, %%ymm14, %[a22]\n\t"            \
  "vmovups (" #c "*128+96)(%[w]), %%ymm15\n\t"          \
  "vfmadd231ps %%ymm15, %%ymm12, %[a30]\n\t"            \
  "vfmadd231ps %%ymm15, %%ymm13, %[a31]\n\t"            \
  "vfmadd231ps %%ymm15, %%ymm14, %[a32]\n\t"

struct TileArgs {
  int64_t ntaps;          // taps (kh * kw); tap_offsets: each one's floats from a pixel's base
  int64_t blocks;         // input blocks in this pass
  int64_t block_stride;   // floats between input blocks of the padded input
  int64_t out_stride;     // floats between the tile's output blocks
  bool first;             // start from the bias (else from the partial sums in out)
  const float* bias;      // 32 values
  // The last pass's post-ops, applied before the store (null: none): kRelu, or kSum adding
  // `residual` (laid out as out, out_stride apart).
  const DirectConv8::Post* post = nullptr;
  int64_t npost = 0;
  const float* residual = nullptr;
};

// A tile: out[j * out_stride + t * 8 + k] (+)= sum over the pass's blocks and taps.
__attribute__((target("avx2,fma"))) void tile(const float* p0, const float* p1, const float* p2,
                                              const int64_t* tap_offsets, const float* w,
                                              float* out, const TileArgs& a) {
  __m256 a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32;
  const int64_t os = a.out_stride;
  if (a.first) {
    a00 = a01 = a02 = _mm256_loadu_ps(a.bias);
    a10 = a11 = a12 = _mm256_loadu_ps(a.bias + 8);
    a20 = a21 = a22 = _mm256_loadu_ps(a.bias + 16);
    a30 = a31 = a32 = _mm256_loadu_ps(a.bias + 24);
  } else {
    a00 = _mm256_loadu_ps(out), a01 = _mm256_loadu_ps(out + 8), a02 = _mm256_loadu_ps(out + 16);
    a10 = _mm256_loadu_ps(out + os), a11 = _mm256_loadu_ps(out + os + 8);
    a12 = _mm256_loadu_ps(out + os + 16);
    a20 = _mm256_loadu_ps(out + 2 * os), a21 = _mm256_loadu_ps(out + 2 * os + 8);
    a22 = _mm256_loadu_ps(out + 2 * os + 16);
    a30 = _mm256_loadu_ps(out + 3 * os), a31 = _mm256_loadu_ps(out + 3 * os + 8);
    a32 = _mm256_loadu_ps(out + 3 * os + 16);
  }
  for (int64_t b = 0; b < a.blocks; ++b) {
    const int64_t boff = b * a.block_stride;
    for (int64_t t = 0; t < a.ntaps; ++t) {
      const int64_t off = boff + tap_offsets[t];
      const float* i0 = p0 + off;
      const float* i1 = p1 + off;
      const float* i2 = p2 + off;
      asm(TD_DC8_STEP(0) TD_DC8_STEP(1) TD_DC8_STEP(2) TD_DC8_STEP(3) TD_DC8_STEP(4)
              TD_DC8_STEP(5) TD_DC8_STEP(6) TD_DC8_STEP(7)
          : [a00] "+x"(a00), [a01] "+x"(a01), [a02] "+x"(a02), [a10] "+x"(a10),
            [a11] "+x"(a11), [a12] "+x"(a12), [a20] "+x"(a20), [a21] "+x"(a21),
            [a22] "+x"(a22), [a30] "+x"(a30), [a31] "+x"(a31), [a32] "+x"(a32)
          : [i0] "r"(i0), [i1] "r"(i1), [i2] "r"(i2), [w] "r"(w)
          : "ymm12", "ymm13", "ymm14", "ymm15", "memory");
      w += kBlock * kGroup * kBlock;
    }
  }
  for (int64_t k = 0; k < a.npost; ++k) {
    if (a.post[k] == DirectConv8::Post::kRelu) {
      const __m256 z = _mm256_setzero_ps();
      a00 = _mm256_max_ps(a00, z), a01 = _mm256_max_ps(a01, z), a02 = _mm256_max_ps(a02, z);
      a10 = _mm256_max_ps(a10, z), a11 = _mm256_max_ps(a11, z), a12 = _mm256_max_ps(a12, z);
      a20 = _mm256_max_ps(a20, z), a21 = _mm256_max_ps(a21, z), a22 = _mm256_max_ps(a22, z);
      a30 = _mm256_max_ps(a30, z), a31 = _mm256_max_ps(a31, z), a32 = _mm256_max_ps(a32, z);
    } else {
      const float* r = a.residual;
      a00 = _mm256_add_ps(a00, _mm256_loadu_ps(r));
      a01 = _mm256_add_ps(a01, _mm256_loadu_ps(r + 8));
      a02 = _mm256_add_ps(a02, _mm256_loadu_ps(r + 16));
      a10 = _mm256_add_ps(a10, _mm256_loadu_ps(r + os));
      a11 = _mm256_add_ps(a11, _mm256_loadu_ps(r + os + 8));
      a12 = _mm256_add_ps(a12, _mm256_loadu_ps(r + os + 16));
      a20 = _mm256_add_ps(a20, _mm256_loadu_ps(r + 2 * os));
      a21 = _mm256_add_ps(a21, _mm256_loadu_ps(r + 2 * os + 8));
      a22 = _mm256_add_ps(a22, _mm256_loadu_ps(r + 2 * os + 16));
      a30 = _mm256_add_ps(a30, _mm256_loadu_ps(r + 3 * os));
      a31 = _mm256_add_ps(a31, _mm256_loadu_ps(r + 3 * os + 8));
      a32 = _mm256_add_ps(a32, _mm256_loadu_ps(r + 3 * os + 16));
    }
  }
  _mm256_storeu_ps(out, a00), _mm256_storeu_ps(out + 8, a01), _mm256_storeu_ps(out + 16, a02);
  _mm256_storeu_ps(out + os, a10), _mm256_storeu_ps(out + os + 8, a11);
  _mm256_storeu_ps(out + os + 16, a12);
  _mm256_storeu_ps(out + 2 * os, a20), _mm256_storeu_ps(out + 2 * os + 8, a21);
  _mm256_storeu_ps(out + 2 * os + 16, a22);
  _mm256_storeu_ps(out + 3 * os, a30), _mm256_storeu_ps(out + 3 * os + 8, a31);
  _mm256_storeu_ps(out + 3 * os + 16, a32);
}

bool cpu_has_avx2() {
  static const bool ok = [] {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return false;
    try {
      return static_cast<int>(dnnl::get_effective_cpu_isa()) >=
             static_cast<int>(dnnl::cpu_isa::avx2);
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

}  // namespace

bool DirectConv8::applies(const Geometry& g) {
  // An AMD core, or TENSORD_OWN_CONV=1 (read at each call: tests turn it on for a while).
  static const bool amd = __builtin_cpu_is("amd");
  const char* force = std::getenv("TENSORD_OWN_CONV");
  const bool wanted = force != nullptr ? std::string(force) == "1" : amd;
  return wanted && cpu_has_avx2() && g.n >= 1 && g.ic >= kMinInputChannels && g.ic % kBlock == 0 &&
         g.oc >= kMinOutputChannels && g.oc % (kBlock * kGroup) == 0 && g.oh >= 1 && g.ow >= 1 &&
         g.oh * g.ow <= kMaxPixels && g.kh >= 1 && g.kw >= 1 && g.sh >= 1 && g.sw >= 1 &&
         g.dh >= 1 && g.dw >= 1 && g.pt >= 0 && g.pl >= 0;
}

DirectConv8::DirectConv8(const Geometry& g, const float* weights, const float* bias,
                         std::vector<Post> post)
    : g_(g), post_(std::move(post)) {
  hp_ = std::max(g.pt + g.h, (g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1);
  wp_ = std::max(g.pl + g.w, (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1);
  const int64_t groups = g.oc / (kBlock * kGroup), icb = g.ic / kBlock;
  // Work items: a run of output pixels (a multiple of the tile) for one group; smaller runs
  // when the items would not give every thread of the pool a few.
  const int64_t pixels = g.oh * g.ow;
  const int64_t team = ThreadPool::team_size();
  int64_t per = kMaxItemPixels;
  for (;;) {
    blocks_ = (pixels + per - 1) / per;
    pixels_per_item_ = ((pixels + blocks_ - 1) / blocks_ + kTile - 1) / kTile * kTile;
    blocks_ = (pixels + pixels_per_item_ - 1) / pixels_per_item_;
    if (per <= 4 * kTile || g.n * groups * blocks_ >= 4 * team) break;
    per /= 2;
  }
  packed_.resize(static_cast<size_t>(g.oc * g.ic * g.kh * g.kw));
  float* p = packed_.data();
  for (int64_t gr = 0; gr < groups; ++gr)
    for (int64_t b = 0; b < icb; ++b)
      for (int64_t y = 0; y < g.kh; ++y)
        for (int64_t x = 0; x < g.kw; ++x)
          for (int64_t c = 0; c < kBlock; ++c)
            for (int64_t j = 0; j < kGroup * kBlock; ++j) {
              const int64_t o = gr * kGroup * kBlock + j, i = b * kBlock + c;
              *p++ = weights[((o * g.ic + i) * g.kh + y) * g.kw + x];
            }
  bias_.assign(static_cast<size_t>(g.oc), 0.0f);
  if (bias) std::copy(bias, bias + g.oc, bias_.begin());
  for (int64_t oy = 0; oy < g.oh; ++oy)
    for (int64_t ox = 0; ox < g.ow; ++ox)
      pixel_offset_.push_back((oy * g.sh * wp_ + ox * g.sw) * kBlock);
  for (int64_t ky = 0; ky < g.kh; ++ky)
    for (int64_t kx = 0; kx < g.kw; ++kx)
      tap_offset_.push_back((ky * g.dh * wp_ + kx * g.dw) * kBlock);
}

// Rows [lo, hi) of the padded input (n * ic/8 * hp rows of wp pixels).
void DirectConv8::pad_rows(const float* x, float* padded, int64_t lo, int64_t hi) const {
  const Geometry& g = g_;
  const size_t px = kBlock * sizeof(float);
  for (int64_t r = lo; r < hi; ++r) {
    const int64_t plane = r / hp_, y = r % hp_ - g.pt;
    float* d = padded + r * wp_ * kBlock;
    if (y < 0 || y >= g.h) {
      std::memset(d, 0, static_cast<size_t>(wp_) * px);
      continue;
    }
    std::memset(d, 0, static_cast<size_t>(g.pl) * px);
    std::memcpy(d + g.pl * kBlock, x + (plane * g.h + y) * g.w * kBlock,
                static_cast<size_t>(g.w) * px);
    std::memset(d + (g.pl + g.w) * kBlock, 0, static_cast<size_t>(wp_ - g.pl - g.w) * px);
  }
}

// Post-ops of one group's output blocks over pixels [p0, p1) of an image.
void DirectConv8::finish(float* y, const float* residual, int64_t group, int64_t p0, int64_t p1,
                         int64_t image) const {
  if (post_.empty()) return;
  const int64_t pixels = g_.oh * g_.ow, ocb = g_.oc / kBlock;
  for (int64_t j = 0; j < kGroup; ++j) {
    const int64_t base = ((image * ocb + group * kGroup + j) * pixels) * kBlock;
    float* o = y + base;
    const float* r = residual ? residual + base : nullptr;
    for (int64_t i = p0 * kBlock; i < p1 * kBlock; ++i) {
      float v = o[i];
      for (Post s : post_) v = s == Post::kRelu ? std::max(v, 0.0f) : v + r[i];
      o[i] = v;
    }
  }
}

// Work items [lo, hi) of n * groups * blocks_.
void DirectConv8::items(const float* padded, const float* residual, float* y, int64_t lo,
                        int64_t hi) const {
  const Geometry& g = g_;
  const int64_t groups = g.oc / (kBlock * kGroup), icb = g.ic / kBlock, ocb = g.oc / kBlock;
  const int64_t pixels = g.oh * g.ow, ntaps = g.kh * g.kw;
  const int64_t plane = hp_ * wp_ * kBlock;  // floats per padded input block
  const int64_t* taps = tap_offset_.data();
  auto pixel_base = [&](const float* image_in, int64_t p) { return image_in + pixel_offset_[p]; };
  alignas(32) float spare[kGroup * kTile * kBlock];  // a partial tile's three pixels
  for (int64_t it = lo; it < hi; ++it) {
    const int64_t block = it % blocks_, rest = it / blocks_;
    const int64_t group = rest % groups, image = rest / groups;
    const int64_t p0 = block * pixels_per_item_, p1 = std::min(pixels, p0 + pixels_per_item_);
    const float* wg = packed_.data() + group * kGroup * kBlock * g.ic * ntaps;
    const float* in = padded + image * icb * plane;
    float* out = y + ((image * ocb + group * kGroup) * pixels) * kBlock;
    const float* res =
        residual ? residual + ((image * ocb + group * kGroup) * pixels) * kBlock : nullptr;
    int64_t tiled = p0;  // the end of the whole tiles (their post-ops ran in tile())
    const int64_t os = pixels * kBlock;
    for (int64_t b0 = 0; b0 < icb; b0 += kChunk) {
      TileArgs a;
      a.ntaps = ntaps;
      a.blocks = std::min(kChunk, icb - b0);
      a.block_stride = plane;
      a.out_stride = os;
      a.first = b0 == 0;
      a.bias = bias_.data() + group * kGroup * kBlock;
      const float* w = wg + b0 * ntaps * kBlock * kGroup * kBlock;
      const float* inb = in + b0 * plane;
      const bool last = b0 + kChunk >= icb;
      if (last) a.post = post_.data(), a.npost = static_cast<int64_t>(post_.size());
      int64_t p = p0;
      for (; p + kTile <= p1; p += kTile) {
        if (res) a.residual = res + p * kBlock;
        tile(pixel_base(inb, p), pixel_base(inb, p + 1), pixel_base(inb, p + 2), taps, w,
             out + p * kBlock, a);
      }
      tiled = p;
      if (p < p1) {
        // One or two pixels left: a whole tile into `spare`, its missing pixels repeating the
        // last one; the partial sums go back and forth between passes.
        const int64_t left = p1 - p;
        const float* q0 = pixel_base(inb, p);
        const float* q1 = pixel_base(inb, p + left - 1);
        const size_t px = kBlock * sizeof(float);
        TileArgs s = a;
        s.out_stride = kTile * kBlock;
        s.npost = 0;  // the post-ops of these pixels: finish() below
        if (!a.first)
          for (int64_t j = 0; j < kGroup; ++j)
            std::memcpy(spare + j * kTile * kBlock, out + j * os + p * kBlock,
                        static_cast<size_t>(left) * px);
        tile(q0, q1, q1, taps, w, spare, s);
        for (int64_t j = 0; j < kGroup; ++j)
          std::memcpy(out + j * os + p * kBlock, spare + j * kTile * kBlock,
                      static_cast<size_t>(left) * px);
      }
    }
    finish(y, residual, group, tiled, p1, image);
  }
}

void DirectConv8::run(const float* x, const float* residual, float* y) const {
  const Geometry& g = g_;
  const int64_t icb = g.ic / kBlock;
  // The padded input: the calling thread's buffer, kept between runs up to kKeptPadFloats
  // (a batch of 8 at 512 channels and 9x9 padded pixels is 1.3 MB); a larger one is this
  // run's only.
  thread_local std::vector<float> buffer;
  std::vector<float> once;
  const size_t need = static_cast<size_t>(g.n * icb * hp_ * wp_ * kBlock);
  std::vector<float>& use = need <= kKeptPadFloats ? buffer : once;
  if (use.size() < need) use.resize(need);
  float* padded = use.data();
  ThreadPool& pool = ThreadPool::get();
  const int64_t rows = g.n * icb * hp_;
  // Up to kSerialPadFloats the copy runs on the calling thread (200 KB for 256 channels at
  // 14x14: microseconds): a second team pass would cost a wake-up and a barrier, which on a
  // shared machine take longer than the copy.
  if (need <= kSerialPadFloats)
    pad_rows(x, padded, 0, rows);
  else
    pool.parallel_for(rows, std::max<int64_t>(1, 4096 / (wp_ * kBlock)),
                      [&](int64_t lo, int64_t hi) { pad_rows(x, padded, lo, hi); });
  const int64_t groups = g.oc / (kBlock * kGroup);
  pool.parallel_for(g.n * groups * blocks_, 1,
                    [&](int64_t lo, int64_t hi) { items(padded, residual, y, lo, hi); });
}

}  // namespace tensord::cpu
