// Max and average pooling of nChw8c and nCdhw8c values (the activations of oneDNN's AVX2
// convolutions, 2-D and 3-D): one 8-channel vector per output pixel, the maximum or sum of its
// window's vectors.
//
// Why: oneDNN's AVX2 pooling kernel (jit:avx2, oneDNN 2.6) takes about three times as long
// as this loop on the same layout (GoogLeNet's 3x3 max pools, ResNet's stem pool: 0.21 -> 0.07
// ms for 512 channels at 14x14, 0.44 -> 0.14 ms for 64 channels 112 -> 56, two threads, Zen 3);
// GoogLeNet spent 12% of its time there against ONNX Runtime's 3.6%.
#pragma once

#include <cstdint>
#include <vector>

namespace tensord::cpu {

class BlockedPool {
 public:
  // A 2-D pooling is a 3-D one of depth 1 (the depth fields' defaults).
  struct Geometry {
    int64_t n = 1, c = 0, h = 0, w = 0;  // input (c: channels; the blocks hold c rounded up to 8)
    int64_t oh = 0, ow = 0;              // output
    int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
    int64_t pt = 0, pl = 0;  // padding before (top, left)
    int64_t pb = 0, pr = 0;  // padding after, as the model gives it (not ceil_mode's extension)
    int64_t d = 1, od = 1, kd = 1, sd = 1, dd = 1;  // depth: input, output, window, stride, dilation
    int64_t pf = 0, pk = 0;  // depth padding before (front) and after (back)
  };
  enum class Kind { kMax, kAverageExcludePad, kAverageIncludePad };
  // One output index of one dimension: its window's taps that read the input are
  // [lo, hi); `count` is its factor of the average's divisor (taps inside the input, or
  // inside the padded input when padding counts).
  struct Span {
    int64_t lo, hi, count;
  };

  BlockedPool(const Geometry& g, Kind kind);

  // x: [n, c, h, w] as nChw8c, or [n, c, d, h, w] as nCdhw8c; y: the output in the same
  // layout. Windows that hold no input value (possible only with padding larger than the
  // window's reach) give 0 (average) or the lowest float (max), as oneDNN. Average with
  // padding counted: the divisor is the window's taps inside [-pf, d + pk) x [-pt, h + pb) x
  // [-pl, w + pr), as ONNX's count_include_pad. On the engine's pool (the calling thread's
  // team limit).
  void run(const float* x, float* y) const;

 private:
  void rows(const float* x, float* y, int64_t lo, int64_t hi) const;
  void rows_avx(const float* x, float* y, int64_t lo, int64_t hi) const;
  Geometry g_;
  Kind kind_;
  std::vector<Span> z_, y_, x_;  // per output depth, row and column
};

}  // namespace tensord::cpu
