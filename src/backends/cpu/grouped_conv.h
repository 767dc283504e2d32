// A grouped convolution whose groups have 2 or 4 channels in and out (ResNeXt's first stage:
// 32 groups of 4), on channels-last (NHWC) float32 values.
//
// oneDNN's direct kernels need each group's channels to fill whole SIMD blocks (8 on AVX2,
// 16 on AVX-512); narrower groups on a CPU without its channels-last brgemm kernels (AVX2)
// get its gemm implementation, an im2col and a tiny product per group: 2-8 GFLOP/s (ResNeXt-50's
// three such convolutions took 40 of its 72 ms on an AVX2 Zen 3). Here each output channel's
// sum over its group's inputs is cg fused multiply-adds of a whole vector of channels: the
// input vector with element j of each group broadcast across that group (an in-lane permute,
// since groups of 2 or 4 never straddle a 128-bit lane) times the weights of input j.
#pragma once

#include <cstdint>
#include <vector>

namespace tensord::cpu {

class SmallGroupConv {
 public:
  struct Geometry {
    int64_t n = 1, c = 0, h = 0, w = 0;  // input (channels in = channels out = c)
    int64_t oh = 0, ow = 0;              // output
    int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
    int64_t group = 1;
  };
  // Whether a convolution with these channel counts is one this kernel runs.
  static bool applies(int64_t c_in, int64_t c_out, int64_t group);
  // `weights`: ONNX's [C, C / group, kh, kw]; `bias`: C values or null; `relu`: max(0, .)
  // after the bias; `blocked8`: the values are nChw8c (oneDNN's aBcd8b: channels in blocks
  // of 8, the last padded with zeros, which the output's padding gets too) instead of
  // channels-last. nChw8c needs AVX2.
  SmallGroupConv(const Geometry& g, const float* weights, const float* bias, bool relu,
                 bool blocked8 = false);
  // x: [n, h, w, c] (or nChw8c); y: [n, oh, ow, c] (or nChw8c). Runs on the engine's pool
  // (its team limit).
  void run(const float* x, float* y) const;

 private:
  float channel(const float* x, int64_t b, int64_t oy, int64_t ox, int64_t o) const;
  void rows(const float* x, float* y, int64_t from, int64_t lo, int64_t hi) const;
  void rows_avx2(const float* x, float* y, int64_t lo, int64_t hi) const;
  Geometry g_;
  int64_t cg_ = 1, cp_ = 0;  // channels per group; c rounded up to 8
  bool relu_ = false, blocked8_ = false;
  std::vector<float> w_;     // [kh][kw][j < cg][cp]: the weight of input j of its group
  std::vector<float> bias_;  // cp (zeros past c)
};

}  // namespace tensord::cpu
