// Helpers shared between op schemas (src/core/ops) and the kernels of every backend, so
// the geometry a schema infers and the geometry a kernel computes are one piece of code.
#pragma once

#include <string>
#include <vector>

#include "core/node_attrs.h"
#include "tensord/tensor.h"

namespace tensord {

// Two dims that must agree when both are known (-1 = unknown agrees with anything).
inline bool dims_conflict(int64_t a, int64_t b) { return a >= 0 && b >= 0 && a != b; }

namespace nn {

// Sliding-window geometry of Conv (pool=false) and MaxPool/AveragePool/LpPool (pool=true,
// which also reads ceil_mode). `in_spatial` and `kernel` are the spatial input sizes and the
// kernel sizes (either may hold -1 = unknown, giving -1 output sizes). Outputs: strides and
// dilations (n values), pads (2n values: all begins, then all ends, as ONNX orders them;
// computed from auto_pad when it is SAME_*), and the spatial output sizes.
// Defined in src/core/ops/nn.cpp.
Status window_geometry(const NodeAttrs& a, const Shape& in_spatial, const Shape& kernel, bool pool,
                       std::vector<int64_t>* strides, std::vector<int64_t>* dilations,
                       std::vector<int64_t>* pads, Shape* out_spatial);

// Geometry of ConvTranspose: strides, dilations, pads (2n, begins then ends; these crop the
// full transposed output, and a negative end pad extends it with zeros) and the spatial
// output sizes. Honors output_padding, output_shape and auto_pad. Defined in nn.cpp.
Status conv_transpose_geometry(const NodeAttrs& a, const Shape& in_spatial, const Shape& kernel,
                               std::vector<int64_t>* strides, std::vector<int64_t>* dilations,
                               std::vector<int64_t>* pads, Shape* out_spatial);

// Output shape [N, M, spatial...] of a convolution of x by weight w (Conv, ConvInteger,
// QLinearConv): checks ranks, groups, channels and kernel_shape, then the window geometry.
// Defined in nn.cpp.
Result<Shape> conv_output_shape(const NodeAttrs& a, const Shape& x, const Shape& w);

// Gemm's attributes and problem sizes: Y[m, n] = alpha * A'[m, k] * B'[k, n] + beta * C.
struct GemmParams {
  float alpha = 1.0f, beta = 1.0f;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, k = 0, n = 0;
};
inline Result<GemmParams> gemm_params(const NodeAttrs& a, const Shape& a_shape,
                                      const Shape& b_shape) {
  GemmParams p;
  TD_ASSIGN_OR_RETURN(p.alpha, a.attr_float("alpha", 1.0f));
  TD_ASSIGN_OR_RETURN(p.beta, a.attr_float("beta", 1.0f));
  TD_ASSIGN_OR_RETURN(int64_t ta, a.attr_int("transA", 0));
  TD_ASSIGN_OR_RETURN(int64_t tb, a.attr_int("transB", 0));
  if (a_shape.size() != 2 || b_shape.size() != 2)
    return a.error("A and B must be 2-D, got {} and {}", shape_to_string(a_shape),
                   shape_to_string(b_shape));
  p.trans_a = ta != 0;
  p.trans_b = tb != 0;
  p.m = p.trans_a ? a_shape[1] : a_shape[0];
  p.k = p.trans_a ? a_shape[0] : a_shape[1];
  p.n = p.trans_b ? b_shape[0] : b_shape[1];
  return p;
}

// Col2Im (opset 18): checks image_shape, block_shape and the strides/dilations/pads
// attributes and returns the number of block positions along each spatial axis. In opset18.cpp.
Result<std::vector<int64_t>> col2im_blocks(const NodeAttrs& a, const std::vector<int64_t>& image,
                                           const std::vector<int64_t>& block,
                                           std::vector<int64_t>* strides,
                                           std::vector<int64_t>* dilations,
                                           std::vector<int64_t>* pads);

}  // namespace nn

namespace math {

// Parses an Einsum `equation` for inputs of the given shapes (dims may be -1 = unknown).
// Labels: 'A'..'Z' are 0..25, 'a'..'z' 26..51, '...' dims 52, 53, ... aligned right.
// input_labels[i][d]: label of axis d of input i; output_labels: the output's labels;
// label_sizes[l]: broadcast size of label l (-1 unknown, -2 unused). Defined in math.cpp.
Status parse_einsum(const std::string& equation, const std::vector<Shape>& shapes,
                    std::vector<std::vector<int>>* input_labels, std::vector<int>* output_labels,
                    std::vector<int64_t>* label_sizes);

}  // namespace math

namespace rnn {
// The activations of an RNN/GRU/LSTM node: `defaults.size()` functions per direction, from
// the 'activations' attribute or the defaults, with their alphas and betas. In rnn.cpp.
Status resolve_activations(const NodeAttrs& a, const std::vector<std::string>& defaults,
                           int64_t num_directions, std::vector<std::string>* names,
                           std::vector<float>* alphas, std::vector<float>* betas);
}  // namespace rnn
}  // namespace tensord
