// Reverse-mode differentiation of graphs (issue 34). The result is a graph of ordinary ONNX
// ops, so every backend runs it (with fallback to cpu:0 as usual) and the compiler fuses it
// like any other graph.
#pragma once

#include <string>
#include <vector>

#include "tensord/graph.h"
#include "tensord/status.h"

namespace tensord {

// The name of the gradient output for value `wrt` in the graph gradients() returns.
std::string gradient_name(const std::string& wrt);

// The gradient of `loss` (a value of `graph`: an output, or any value a node produces) with
// respect to each of `wrt` (graph inputs, initializers or node outputs; floating point).
// A non-scalar loss is summed (its seed is ones of its shape), as `loss.sum()` would be.
//
// Returns a graph with `graph`'s inputs and initializers, every node of `graph` (forward
// values keep their names, so a caller that already holds them can bind them) followed by
// the backward nodes, and one output per `wrt`, in order, named gradient_name(wrt), of the
// wrt value's type. A wrt value the loss does not depend on gets zeros.
//
// `input_types` (default: the graph inputs' declared types) must have static shapes: the
// backward graph reduces broadcast gradients to their inputs' shapes.
//
// Ops on the path from a wrt value to the loss need a gradient rule; one without a rule is
// UNIMPLEMENTED naming the op and the node ("no gradient rule for op 'Cosh' (node ...)").
// Rules (gradient_ops()): Add Sub Mul Div Pow Max Min Neg Exp Log Sqrt Abs Reciprocal Relu
// LeakyRelu Elu Softplus Gelu Sigmoid Tanh Sin Cos Erf Identity Cast Sum Mean Where Clip,
// MatMul Gemm, ReduceSum ReduceMean, Softmax LogSoftmax, Reshape Flatten Squeeze Unsqueeze
// Expand Transpose Concat Split Slice Gather Pad (constant), Conv (any group, explicit pads),
// MaxPool AveragePool GlobalAveragePool, LayerNormalization, BatchNormalization (training and
// inference mode), Dropout (its mask output or a seed), SoftmaxCrossEntropyLoss
// NegativeLogLikelihoodLoss.
Result<Graph> gradients(const Graph& graph, const std::string& loss,
                        const std::vector<std::string>& wrt,
                        const std::vector<TensorType>& input_types = {});

// The names of the ops with a gradient rule, sorted.
std::vector<std::string> gradient_ops();

}  // namespace tensord
