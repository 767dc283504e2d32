// One registration function per op family; each lives in src/core/ops/<family>.cpp.
#pragma once

namespace tensord {
class OpRegistry;

void register_elementwise_ops(OpRegistry& r);  // arithmetic, comparison, logic, unary math,
                                               // activations, Clip, Where, Cast, variadic
void register_nn_ops(OpRegistry& r);           // MatMul, Gemm, Conv, pools, BatchNorm, Softmax
void register_shape_ops(OpRegistry& r);        // Reshape, Transpose, Concat, Slice, Gather,
                                               // Flatten, Squeeze, Unsqueeze, Constant, Identity
void register_reduction_ops(OpRegistry& r);    // Reduce*, ArgMax, ArgMin
void register_rnn_ops(OpRegistry& r);          // RNN, GRU, LSTM
void register_image_ops(OpRegistry& r);        // Resize, GridSample, RoiAlign, MaxUnpool, NMS ...
void register_quant_ops(OpRegistry& r);        // QuantizeLinear, QLinear*, *Integer
void register_math_ops(OpRegistry& r);         // Einsum, Det, Unique, DFT, windows, ...
void register_control_ops(OpRegistry& r);      // If, Loop, Scan
void register_loss_ops(OpRegistry& r);         // NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss,
                                               // MeanVarianceNormalization
void register_opset18_ops(OpRegistry& r);      // Gelu, GroupNormalization, Col2Im, CenterCropPad,
                                               // AffineGrid, DeformConv (opsets 18-20)
void register_linalg_ops(OpRegistry& r);       // tensord domain: Cholesky, Eigh, QR, SVD, Solve,
                                               // Inv, SLogDet (LAPACK on cpu)

}  // namespace tensord
