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

}  // namespace tensord
