// The built-in model zoo: well-known architectures built in C++ with seeded random weights, so
// benchmarks and tests need no downloads. Each builds the same network as the framework it
// names, in the graph IR's ONNX opset-17 form, with one input "input" and one output "output".
//
// - mobilenet: Keras applications MobileNet (v1, alpha 1.0, 224): 3x3/2 conv, 13
//   depthwise-separable blocks, ReLU6, global pool, 1000-way dense, softmax.
//   float32 [N, 3, 224, 224] -> probabilities [N, 1000].
// - mobilenet_v2: torchvision mobilenet_v2 (inverted residuals, expansion 6, ReLU6).
//   float32 [N, 3, 224, 224] -> logits [N, 1000].
// - resnet50: torchvision resnet50 (Bottleneck v1.5: the stride on the 3x3 conv).
//   float32 [N, 3, 224, 224] -> logits [N, 1000].
// - imdb_lstm: Keras' imdb_lstm example: Embedding(20000, 128) -> LSTM(128) -> Dense(1) ->
//   sigmoid. int64 token ids [N, 80] -> probability [N, 1].
//
// Parameters are named as the original's weights (torchvision state_dict keys, e.g.
// "layer1.0.conv1.weight", "layer1.0.bn1.running_var"; Keras layer names for the Keras models),
// so they can be loaded into the original model and the outputs compared
// (tests/models/test_zoo_vs_torch.py does this for mobilenet_v2, resnet50 and imdb_lstm).
//
// Weights: He-normal convolutions and dense layers (activations stay O(1) through the depth),
// BatchNormalization with non-trivial scale, shift, running mean and running variance (so a
// BN-folding pass really changes the weights), all from a fixed seed per model: the same name
// and batch always give the same graph, byte for byte.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensord/graph.h"

namespace tensord::models {

// The names build_model accepts, sorted.
std::vector<std::string> model_names();

// Builds the named model for a fixed batch size (the input and output shapes carry it).
// Errors: NOT_FOUND for an unknown name (listing the known ones), INVALID_ARGUMENT for
// batch <= 0.
Result<Graph> build_model(const std::string& name, int64_t batch);

// A deterministic input for the named model at `batch`: N(0, 1) images, or token ids in
// [1, 20000) left-padded with 0 to length 80 (as Keras' pad_sequences does). Same errors as
// build_model.
Result<HostTensor> sample_input(const std::string& name, int64_t batch);

// The number of learned parameters of a graph, counted as PyTorch's
// `sum(p.numel() for p in model.parameters())`: the initializers a node reads as a weight,
// bias, embedding table or normalization scale / shift (initializer inputs of Conv,
// ConvTranspose, Gemm and MatMul; inputs 1-2 of BatchNormalization, InstanceNormalization and
// LayerNormalization; RNN/GRU/LSTM W, R, B and P; Gather's data), each counted once.
// BatchNormalization running statistics, shape tensors and constants such as Clip's bounds are
// not parameters.
int64_t parameter_count(const Graph& graph);

}  // namespace tensord::models
