#include "models/zoo.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <utility>

#include "core/errors.h"
#include "models/graph_builder.h"

namespace tensord::models {
namespace {

// Larger batches only overflow shapes and memory; nobody benchmarks them.
constexpr int64_t kMaxBatch = int64_t{1} << 16;

constexpr int64_t kImageSize = 224;
constexpr int64_t kImdbVocabulary = 20000;  // Keras example: max_features
constexpr int64_t kImdbSequence = 80;       // maxlen
constexpr int64_t kImdbEmbedding = 128;
constexpr int64_t kImdbHidden = 128;

using Builder = std::function<Result<Graph>(int64_t batch)>;

std::string image_input(GraphBuilder& b, int64_t batch) {
  return b.input("input", DType::kFloat32, {batch, 3, kImageSize, kImageSize});
}

// Pools [N, C, H, W] to [N, C] as GlobalAveragePool + Flatten (what torch.onnx exports for
// adaptive_avg_pool2d(1) + flatten).
std::string global_pool(GraphBuilder& b, const std::string& x, const std::string& name) {
  std::string y = b.op("GlobalAveragePool", name, {x});
  return b.op("Flatten", "flatten", {y}, {{"axis", int64_t{1}}});
}

// Keras applications MobileNet (v1), alpha 1.0, 224x224, include_top. Keras pads stride-2
// convolutions "same" on an even input, i.e. 0 before and 1 after ((0, 1) ZeroPadding2D + a
// valid conv); stride-1 3x3 convolutions pad 1 on each side. Convolutions have no bias; every
// one is followed by BatchNormalization (Keras' epsilon 1e-3) and ReLU6. The classifier is
// Keras' 1x1 conv "conv_preds" on the pooled features, written here as the equivalent dense
// layer (Gemm), then softmax. Dropout is the identity at inference.
Result<Graph> build_mobilenet(int64_t batch) {
  constexpr float kEps = 1e-3f;
  const std::vector<int64_t> kPadAfter = {0, 0, 1, 1};
  GraphBuilder b("mobilenet", 0x6d6e3101u);
  std::string x = image_input(b, batch);
  x = b.conv_bn_act(x, "conv1", "conv1_bn", "conv1_relu",
                    {.out_channels = 32, .kernel = 3, .stride = 2, .pads = kPadAfter}, kEps,
                    Activation::kRelu6);
  struct Block {
    int64_t filters, stride;
  };
  const Block kBlocks[] = {{64, 1},  {128, 2}, {128, 1}, {256, 2}, {256, 1},  {512, 2}, {512, 1},
                           {512, 1}, {512, 1}, {512, 1}, {512, 1}, {1024, 2}, {1024, 1}};
  int id = 1;
  for (const Block& blk : kBlocks) {
    const int64_t c = b.shape_of(x).size() == 4 ? b.shape_of(x)[1] : 0;
    const std::string dw = fmt::format("conv_dw_{}", id);
    const std::string pw = fmt::format("conv_pw_{}", id);
    x = b.conv_bn_act(x, dw, dw + "_bn", dw + "_relu",
                      {.out_channels = c,
                       .kernel = 3,
                       .stride = blk.stride,
                       .pads = blk.stride == 2 ? kPadAfter : std::vector<int64_t>{1, 1, 1, 1},
                       .group = c},
                      kEps, Activation::kRelu6);
    x = b.conv_bn_act(x, pw, pw + "_bn", pw + "_relu", {.out_channels = blk.filters, .kernel = 1},
                      kEps, Activation::kRelu6);
    ++id;
  }
  x = global_pool(b, x, "global_average_pooling2d");
  x = b.linear(x, "conv_preds", 1000);
  x = b.op("Softmax", "predictions", {x}, {{"axis", int64_t{-1}}});
  b.output(x, "output");
  return b.finish();
}

// torchvision.models.mobilenet_v2() (width 1.0, 1000 classes): Conv2dNormActivation modules
// are Conv(no bias) + BatchNorm(eps 1e-5) + ReLU6; an InvertedResidual is an optional 1x1
// expansion (t != 1), a 3x3 depthwise conv with the stride, and a linear 1x1 projection, with
// the input added when stride is 1 and the channels match. Names are the state_dict keys.
Result<Graph> build_mobilenet_v2(int64_t batch) {
  constexpr float kEps = 1e-5f;
  GraphBuilder b("mobilenet_v2", 0x6d6e3202u);
  std::string x = image_input(b, batch);
  x = b.conv_bn_act(x, "features.0.0", "features.0.1", "features.0.2",
                    {.out_channels = 32, .kernel = 3, .stride = 2}, kEps, Activation::kRelu6);
  struct Setting {
    int64_t t, c, n, s;
  };
  const Setting kSettings[] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                               {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  int64_t in_c = 32;
  int index = 1;
  for (const Setting& st : kSettings) {
    for (int64_t i = 0; i < st.n; ++i) {
      const int64_t stride = i == 0 ? st.s : 1;
      const int64_t hidden = in_c * st.t;
      const std::string p = fmt::format("features.{}.conv", index);
      std::string y = x;
      int j = 0;
      if (st.t != 1) {
        y = b.conv_bn_act(y, p + ".0.0", p + ".0.1", p + ".0.2",
                          {.out_channels = hidden, .kernel = 1}, kEps, Activation::kRelu6);
        j = 1;
      }
      y = b.conv_bn_act(y, fmt::format("{}.{}.0", p, j), fmt::format("{}.{}.1", p, j),
                        fmt::format("{}.{}.2", p, j),
                        {.out_channels = hidden, .kernel = 3, .stride = stride, .group = hidden},
                        kEps, Activation::kRelu6);
      y = b.conv(y, fmt::format("{}.{}", p, j + 1),
                 {.out_channels = st.c, .kernel = 1, .gain = 1.0});
      const bool residual = stride == 1 && in_c == st.c;
      // A residual branch adds to its input; a smaller BN scale keeps the sum's variance from
      // doubling at every block.
      y = b.batch_norm(y, fmt::format("{}.{}", p, j + 2), kEps, residual ? 0.5 : 1.0);
      if (residual) y = b.op("Add", fmt::format("features.{}.add", index), {x, y});
      x = y;
      in_c = st.c;
      ++index;
    }
  }
  x = b.conv_bn_act(x, fmt::format("features.{}.0", index), fmt::format("features.{}.1", index),
                    fmt::format("features.{}.2", index), {.out_channels = 1280, .kernel = 1}, kEps,
                    Activation::kRelu6);
  x = global_pool(b, x, "avgpool");
  x = b.linear(x, "classifier.1", 1000);  // classifier.0 is Dropout
  b.output(x, "output");
  return b.finish();
}

// torchvision.models.resnet50(): Bottleneck blocks [3, 4, 6, 3] with the stride on the 3x3
// conv (ResNet v1.5), a 1x1 conv + BN downsample on each stage's first block, ReLU after the
// residual add; BatchNorm eps 1e-5. Names are the state_dict keys.
Result<Graph> build_resnet50(int64_t batch) {
  constexpr float kEps = 1e-5f;
  // Scale of each residual branch's last BN: the sum of 16 blocks stays O(1) (torchvision's
  // zero_init_residual idea, not taken to zero so that the branches matter).
  constexpr double kResidualGamma = 0.4;
  GraphBuilder b("resnet50", 0x72353003u);
  std::string x = image_input(b, batch);
  x = b.conv_bn_act(x, "conv1", "bn1", "relu", {.out_channels = 64, .kernel = 7, .stride = 2}, kEps,
                    Activation::kRelu);
  x = b.op("MaxPool", "maxpool", {x},
           {{"kernel_shape", std::vector<int64_t>{3, 3}},
            {"strides", std::vector<int64_t>{2, 2}},
            {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  struct Stage {
    int64_t planes, blocks, stride;
  };
  const Stage kStages[] = {{64, 3, 1}, {128, 4, 2}, {256, 6, 2}, {512, 3, 2}};
  constexpr int64_t kExpansion = 4;
  int64_t inplanes = 64;
  int layer = 1;
  for (const Stage& st : kStages) {
    for (int64_t blk = 0; blk < st.blocks; ++blk) {
      const int64_t stride = blk == 0 ? st.stride : 1;
      const int64_t out_c = st.planes * kExpansion;
      const std::string p = fmt::format("layer{}.{}", layer, blk);
      std::string y =
          b.conv_bn_act(x, p + ".conv1", p + ".bn1", p + ".relu",
                        {.out_channels = st.planes, .kernel = 1}, kEps, Activation::kRelu);
      y = b.conv_bn_act(y, p + ".conv2", p + ".bn2", p + ".relu",
                        {.out_channels = st.planes, .kernel = 3, .stride = stride}, kEps,
                        Activation::kRelu);
      y = b.conv(y, p + ".conv3", {.out_channels = out_c, .kernel = 1, .gain = 1.0});
      y = b.batch_norm(y, p + ".bn3", kEps, kResidualGamma);
      std::string identity = x;
      if (stride != 1 || inplanes != out_c) {
        identity = b.conv(x, p + ".downsample.0",
                          {.out_channels = out_c, .kernel = 1, .stride = stride, .gain = 1.0});
        identity = b.batch_norm(identity, p + ".downsample.1", kEps);
      }
      y = b.op("Add", p + ".add", {y, identity});
      x = b.relu(y, p + ".relu");
      inplanes = out_c;
    }
    ++layer;
  }
  x = global_pool(b, x, "avgpool");
  x = b.linear(x, "fc", 1000);
  b.output(x, "output");
  return b.finish();
}

// Keras' examples/imdb_lstm.py: Embedding(20000, 128) -> LSTM(128) -> Dense(1, sigmoid) on
// sequences of 80 token ids. The LSTM returns its last hidden state (Y_h). ONNX's LSTM has two
// bias vectors (Wb, Rb) where Keras has one, so this graph has 512 more parameters than
// Keras' 2,691,713: PyTorch's count for the same layers, 2,692,225. Weights: embedding
// N(0, 1), W and R He-normal (gain 1), biases small with the forget gate's input bias at 1
// (Keras' unit_forget_bias). ONNX gate order is i, o, f, c.
Result<Graph> build_imdb_lstm(int64_t batch) {
  constexpr int64_t kGates = 4;
  const int64_t h = kImdbHidden;
  GraphBuilder b("imdb_lstm", 0x6c737404u);
  const std::string tokens = b.input("input", DType::kInt64, {batch, kImdbSequence});
  const std::string table = b.normal("embedding.weight", {kImdbVocabulary, kImdbEmbedding}, 1.0);
  std::string x = b.op("Gather", "embedding", {table, tokens}, {{"axis", int64_t{0}}});
  x = b.op("Transpose", "lstm.transpose", {x}, {{"perm", std::vector<int64_t>{1, 0, 2}}});
  const std::string w = b.normal("lstm.W", {1, kGates * h, kImdbEmbedding},
                                 std::sqrt(1.0 / static_cast<double>(kImdbEmbedding)));
  const std::string r =
      b.normal("lstm.R", {1, kGates * h, h}, std::sqrt(1.0 / static_cast<double>(h)));
  HostTensor bias(DType::kFloat32, {1, 2 * kGates * h});
  float* pb = bias.mutable_data<float>();
  for (int64_t i = 0; i < 2 * kGates * h; ++i) {
    const bool forget_input_bias = i >= 2 * h && i < 3 * h;  // Wb's f segment
    pb[i] = static_cast<float>((forget_input_bias ? 1.0 : 0.0) + 0.05 * b.rng().normal());
  }
  const std::string bias_name = b.initializer("lstm.B", std::move(bias));
  const std::vector<std::string> lstm_out =
      b.node("LSTM", "lstm", {x, w, r, bias_name}, {{"hidden_size", h}}, 2, {true, false});
  const std::string axes =
      b.initializer("lstm.squeeze_axes", HostTensor::from_vector<int64_t>({0}, {1}));
  x = b.op("Squeeze", "lstm.squeeze", {lstm_out[1], axes});  // [1, N, h] -> [N, h]
  x = b.linear(x, "dense", 1);
  x = b.op("Sigmoid", "dense.sigmoid", {x});
  b.output(x, "output");
  return b.finish();
}

const std::map<std::string, Builder>& builders() {
  static const std::map<std::string, Builder> kBuilders = {
      {"imdb_lstm", build_imdb_lstm},
      {"mobilenet", build_mobilenet},
      {"mobilenet_v2", build_mobilenet_v2},
      {"resnet50", build_resnet50},
  };
  return kBuilders;
}

Status check_request(const std::string& name, int64_t batch) {
  if (!builders().count(name))
    return errors::NotFound("unknown model '{}'; the zoo has: {}", name,
                            fmt::join(model_names(), ", "));
  if (batch < 1 || batch > kMaxBatch)
    return errors::InvalidArgument("model '{}': batch must be in [1, {}], got {}", name, kMaxBatch,
                                   batch);
  return OkStatus();
}

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& [name, builder] : builders()) names.push_back(name);
  return names;  // std::map: sorted
}

Result<Graph> build_model(const std::string& name, int64_t batch) {
  TD_RETURN_IF_ERROR(check_request(name, batch));
  return builders().at(name)(batch);
}

Result<HostTensor> sample_input(const std::string& name, int64_t batch) {
  TD_RETURN_IF_ERROR(check_request(name, batch));
  if (name == "imdb_lstm") {
    Rng rng(0x1d6b0000u);
    HostTensor t(DType::kInt64, {batch, kImdbSequence});
    int64_t* p = t.mutable_data<int64_t>();
    for (int64_t n = 0; n < batch; ++n) {
      // A review of 20..80 tokens, zero-padded in front (Keras' pad_sequences default).
      const int64_t length = rng.uniform_int(20, kImdbSequence);
      for (int64_t i = 0; i < kImdbSequence; ++i)
        p[n * kImdbSequence + i] =
            i < kImdbSequence - length ? 0 : rng.uniform_int(1, kImdbVocabulary - 1);
    }
    return t;
  }
  const Shape shape = {batch, 3, kImageSize, kImageSize};
  TD_RETURN_IF_ERROR(checked_byte_size(DType::kFloat32, shape).status());
  Rng rng(0x1a6e0000u);
  HostTensor t(DType::kFloat32, shape);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(rng.normal());
  return t;
}

int64_t parameter_count(const Graph& graph) {
  // Inputs of each op that hold learned parameters when they are initializers.
  static const std::map<std::string, std::vector<size_t>> kParameterInputs = {
      {"Conv", {1, 2}},
      {"ConvTranspose", {1, 2}},
      {"Gemm", {0, 1, 2}},
      {"MatMul", {0, 1}},
      {"BatchNormalization", {1, 2}},
      {"InstanceNormalization", {1, 2}},
      {"LayerNormalization", {1, 2}},
      {"RNN", {1, 2, 3}},
      {"GRU", {1, 2, 3}},
      {"LSTM", {1, 2, 3, 7}},
      {"Gather", {0}},
  };
  std::set<std::string> counted;
  int64_t total = 0;
  for (const Node& node : graph.nodes) {
    auto it = kParameterInputs.find(node.op);
    if (it == kParameterInputs.end()) continue;
    for (size_t i : it->second) {
      if (i >= node.inputs.size() || node.inputs[i].empty()) continue;
      auto init = graph.initializers.find(node.inputs[i]);
      if (init == graph.initializers.end() || !counted.insert(init->first).second) continue;
      total += init->second.numel();
    }
  }
  return total;
}

}  // namespace tensord::models
