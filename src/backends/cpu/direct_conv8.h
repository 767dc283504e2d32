// A direct convolution of nChw8c values on AVX2 (the layout oneDNN's AVX2 kernels use), for the
// deep layers of a CNN: small maps (at most 17x17 outputs), many channels.
//
// Why: oneDNN 2.6's AVX2 direct kernel (jit:avx2) covers an output row in tiles of three
// pixels, so a 7-wide row ends in a one-pixel tile that reloads every weight for four FMAs, and
// it splits two threads over rows of such tiles. On the deep layers of ResNet-18/34 (3x3,
// 256 channels at 14x14, 512 at 7x7) it ran 12-28% slower than ONNX Runtime's MLAS kernels
// (bench/opclass.py, Zen 3, two threads). This kernel tiles the output map flattened: three
// output pixels of any rows x 32 output channels per tile (12 accumulators; the three input
// pointers are independent), so a map leaves at most one partial tile; a work item is one
// group of 32 output channels over a run of pixels, its weights (packed per item) streamed once
// per item. Standalone, two threads: 0.75-0.89x oneDNN's time on those layers; at parity on
// large maps (not taken there).
//
// Inputs are copied once per run into a zero-padded buffer (small at these map sizes), so the
// inner loop has no bounds checks. Post-ops: ReLU and the addition of a residual value of the
// output's shape, in any order, applied to each tile as it is finished.
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <vector>

namespace tensord::cpu {

class DirectConv8 {
 public:
  struct Geometry {
    int64_t n = 1, ic = 0, h = 0, w = 0;  // input [n, ic, h, w], nChw8c
    int64_t oc = 0, oh = 0, ow = 0;       // output [n, oc, oh, ow], nChw8c
    int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
    int64_t pt = 0, pl = 0;  // padding before (top, left); after is whatever the reads need
  };
  enum class Post { kRelu, kSum };

  // Whether this kernel takes a convolution of these sizes here: AVX2 and FMA present (and
  // allowed: oneDNN's ISA limit, ONEDNN_MAX_CPU_ISA, applies to it too), ic a multiple of 8
  // and at least kMinInputChannels, oc a multiple of 32 and at least kMinOutputChannels, at
  // most kMaxPixels output pixels per image. Measured against oneDNN in whole networks (same
  // build, ABBA rounds): faster on ResNet-18/34/50's deep layers and Inception's 17x17 and 8x8
  // ones; slower at 28x28 (ResNet-50's second stage, 8%), with 48-64 input channels
  // (SqueezeNet 1.1's 13x13 expand convolutions, 9%) and with 32 output channels (DenseNet's
  // growth convolutions, 0.05 ms each: one work item per 24 pixels, two passes of the pool).
  // Taken on AMD cores only: on an Intel Xeon (Sapphire Rapids class, oneDNN held to AVX2)
  // oneDNN's kernel was the faster, ResNet-18 1.05x and ResNet-50 1.02x slower on this one
  // (after aligning its weights and fusing its post-ops); TENSORD_OWN_CONV=1 takes it on any
  // CPU with AVX2, =0 on none.
  static bool applies(const Geometry& g);
  static constexpr int64_t kMaxPixels = 320;
  static constexpr int64_t kMinInputChannels = 128;
  static constexpr int64_t kMinOutputChannels = 64;

  // weights: [oc, ic, kh, kw] (ONNX's OIHW); bias: oc values or null.
  DirectConv8(const Geometry& g, const float* weights, const float* bias, std::vector<Post> post);

  // x: the input; residual: the value kSum adds (null without kSum); y: the output. On the
  // engine's pool (the calling thread's team limit).
  void run(const float* x, const float* residual, float* y) const;

  int64_t weight_bytes() const { return static_cast<int64_t>(packed_.size() * sizeof(float)); }

 private:
  void pad_rows(const float* x, float* padded, int64_t lo, int64_t hi) const;
  void items(const float* padded, const float* residual, float* y, int64_t lo, int64_t hi) const;
  void finish(float* y, const float* residual, int64_t group, int64_t p0, int64_t p1,
              int64_t image) const;

  Geometry g_;
  int64_t hp_ = 0, wp_ = 0;            // the padded input's height and width
  int64_t pixels_per_item_ = 0;        // output pixels a work item covers (a multiple of 3)
  int64_t blocks_ = 0;                 // work items per image and group
  // Cache-line aligned: a 32-byte weight load at 16 bytes past a line (malloc's alignment for
  // a large block) splits every other load across two lines, which Intel cores pay for
  // (ResNet-18 1.12x slower than oneDNN's kernel on a Xeon, two threads, before).
  template <class T>
  struct LineAligned {
    using value_type = T;
    LineAligned() = default;
    template <class U>
    LineAligned(const LineAligned<U>&) {}
    T* allocate(size_t n) {
      return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64}));
    }
    void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{64}); }
    template <class U>
    bool operator==(const LineAligned<U>&) const { return true; }
    template <class U>
    bool operator!=(const LineAligned<U>&) const { return false; }
  };
  std::vector<float, LineAligned<float>> packed_;  // [oc / 32][ic / 8][kh][kw][8 ic][4][8 oc]
  std::vector<float> bias_;            // oc values (zeros without a bias)
  std::vector<int64_t> pixel_offset_;  // per output pixel: its window's first input, in floats
  std::vector<int64_t> tap_offset_;    // per window tap: its offset from that, in floats
  std::vector<Post> post_;
};

}  // namespace tensord::cpu
