// The built-in model zoo: names and errors, the architectures' parameter counts against the
// frameworks they reproduce (torchvision's `sum(p.numel() for p in model.parameters())`,
// Keras' trainable parameters), structure, determinism, and a run of every model on the cpu
// reference kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/executor.h"
#include "models/graph_builder.h"
#include "models/zoo.h"

namespace tensord::models {
namespace {

int count_ops(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op == op;
  return n;
}

Graph build_ok(const std::string& name, int64_t batch) {
  Result<Graph> g = build_model(name, batch);
  EXPECT_TRUE(g.ok()) << name << ": " << g.status().to_string();
  return g.ok() ? *std::move(g) : Graph{};
}

TEST(Zoo, ModelNames) {
  EXPECT_EQ(model_names(),
            (std::vector<std::string>{"imdb_lstm", "mobilenet", "mobilenet_v2", "resnet50"}));
}

TEST(Zoo, UnknownModelIsNotFoundAndListsTheNames) {
  for (const Status& s : {build_model("resnet51", 1).status(), sample_input("vgg", 1).status()}) {
    EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.to_string();
    for (const char* part : {"unknown model", "imdb_lstm", "mobilenet", "mobilenet_v2", "resnet50"})
      EXPECT_NE(s.message().find(part), std::string::npos) << s.message() << " lacks " << part;
  }
  EXPECT_NE(build_model("resnet51", 1).status().message().find("'resnet51'"), std::string::npos);
}

TEST(Zoo, BadBatchIsInvalidArgument) {
  for (int64_t batch : {int64_t{0}, int64_t{-3}, int64_t{1} << 40}) {
    for (const Status& s :
         {build_model("mobilenet_v2", batch).status(), sample_input("imdb_lstm", batch).status()}) {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
      EXPECT_NE(s.message().find(std::to_string(batch)), std::string::npos) << s.message();
    }
  }
}

// The architecture check: the counts of the originals.
TEST(Zoo, ParameterCountsMatchTheOriginals) {
  const std::map<std::string, int64_t> expected = {
      {"mobilenet_v2", 3'504'872},  // torchvision.models.mobilenet_v2()
      {"resnet50", 25'557'032},     // torchvision.models.resnet50()
      {"mobilenet", 4'231'976},     // keras.applications.MobileNet(): trainable parameters
      // Keras reports 2,691,713: one LSTM bias vector where ONNX (and PyTorch) have two.
      {"imdb_lstm", 2'692'225},
  };
  for (const auto& [name, count] : expected) {
    const Graph g = build_ok(name, 1);
    EXPECT_EQ(parameter_count(g), count) << name;
  }
}

TEST(Zoo, Structure) {
  const Graph v2 = build_ok("mobilenet_v2", 1);
  EXPECT_EQ(count_ops(v2, "Conv"), 52);
  EXPECT_EQ(count_ops(v2, "BatchNormalization"), 52);
  EXPECT_EQ(count_ops(v2, "Clip"), 35);  // ReLU6
  EXPECT_EQ(count_ops(v2, "Add"), 10);   // residual connections
  EXPECT_EQ(count_ops(v2, "Gemm"), 1);

  const Graph r50 = build_ok("resnet50", 1);
  EXPECT_EQ(count_ops(r50, "Conv"), 53);
  EXPECT_EQ(count_ops(r50, "BatchNormalization"), 53);
  EXPECT_EQ(count_ops(r50, "Add"), 16);
  EXPECT_EQ(count_ops(r50, "MaxPool"), 1);
  // Bottleneck v1.5: each stage's first block strides on its 3x3 conv, never on the 1x1 conv1.
  for (const Node& n : r50.nodes) {
    if (n.op != "Conv") continue;
    const auto* strides = n.attrs.at("strides").get_if<std::vector<int64_t>>();
    ASSERT_NE(strides, nullptr) << n.name;
    const bool strided = (*strides)[0] == 2;
    const bool may_stride =
        n.name == "conv1" || n.name.ends_with(".conv2") || n.name.ends_with(".downsample.0");
    if (strided) {
      EXPECT_TRUE(may_stride) << n.name;
    }
    if (n.name == "layer2.0.conv2" || n.name == "layer3.0.conv2" || n.name == "layer4.0.conv2") {
      EXPECT_TRUE(strided) << n.name;
    }
  }

  const Graph v1 = build_ok("mobilenet", 1);
  EXPECT_EQ(count_ops(v1, "Conv"), 27);
  int depthwise = 0;
  for (const Node& n : v1.nodes)
    if (n.op == "Conv" && *n.attrs.at("group").get_if<int64_t>() > 1) ++depthwise;
  EXPECT_EQ(depthwise, 13);
  EXPECT_EQ(count_ops(v1, "Softmax"), 1);

  const Graph lstm = build_ok("imdb_lstm", 1);
  EXPECT_EQ(count_ops(lstm, "Gather"), 1);
  EXPECT_EQ(count_ops(lstm, "LSTM"), 1);
  EXPECT_EQ(count_ops(lstm, "Sigmoid"), 1);
}

TEST(Zoo, InputsOutputsAndBatch) {
  for (const std::string& name : model_names()) {
    const Graph g = build_ok(name, 3);
    ASSERT_EQ(g.inputs.size(), 1u) << name;
    ASSERT_EQ(g.outputs.size(), 1u) << name;
    EXPECT_EQ(g.inputs[0].name, "input");
    EXPECT_EQ(g.outputs[0].name, "output");
    EXPECT_EQ(g.inputs[0].type.shape[0], 3) << name;
    const Shape out = {3, name == "imdb_lstm" ? 1 : 1000};
    EXPECT_EQ(g.outputs[0].type, (TensorType{DType::kFloat32, out})) << name;
    Result<HostTensor> x = sample_input(name, 3);
    ASSERT_TRUE(x.ok()) << x.status().to_string();
    EXPECT_EQ(x->type(), g.inputs[0].type) << name;
  }
  const Graph lstm = build_ok("imdb_lstm", 2);
  EXPECT_EQ(lstm.inputs[0].type, (TensorType{DType::kInt64, {2, 80}}));
}

// BN folding is only tested if the statistics are not the identity.
TEST(Zoo, BatchNormStatisticsAreNonTrivial) {
  const Graph g = build_ok("mobilenet_v2", 1);
  int checked = 0;
  for (const Node& n : g.nodes) {
    if (n.op != "BatchNormalization") continue;
    const HostTensor& mean = g.initializers.at(n.inputs[3]);
    const HostTensor& var = g.initializers.at(n.inputs[4]);
    bool mean_zero = true, var_one = true;
    for (int64_t i = 0; i < mean.numel(); ++i) {
      mean_zero &= mean.data<float>()[i] == 0.f;
      var_one &= var.data<float>()[i] == 1.f;
      ASSERT_GT(var.data<float>()[i], 0.f) << n.name;
    }
    EXPECT_FALSE(mean_zero) << n.name;
    EXPECT_FALSE(var_one) << n.name;
    ++checked;
  }
  EXPECT_EQ(checked, 52);
}

TEST(Zoo, Deterministic) {
  for (const char* name : {"mobilenet_v2", "imdb_lstm"}) {
    const Graph a = build_ok(name, 1);
    const Graph b = build_ok(name, 2);  // the batch changes shapes, not weights
    ASSERT_EQ(a.initializers.size(), b.initializers.size());
    for (const auto& [key, t] : a.initializers) {
      const HostTensor& u = b.initializers.at(key);
      ASSERT_EQ(t.type(), u.type()) << key;
      EXPECT_EQ(std::memcmp(t.data(), u.data(), t.nbytes()), 0) << name << " " << key;
    }
    const HostTensor x1 = *sample_input(name, 2);
    const HostTensor x2 = *sample_input(name, 2);
    EXPECT_EQ(std::memcmp(x1.data(), x2.data(), x1.nbytes()), 0) << name;
  }
}

TEST(GraphBuilder, ErrorsAreStickyAndNameTheNode) {
  GraphBuilder b("g", 1);
  const std::string x = b.input("x", DType::kFloat32, {1, 3, 8, 8});
  std::string y = b.conv(x, "c1", {.out_channels = 4, .kernel = 3});
  y = b.op("Softmax", "bad", {y}, {{"no_such_attribute", int64_t{1}}});
  y = b.relu(y, "r");
  b.output(y, "out");
  Result<Graph> g = b.finish();
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("no_such_attribute"), std::string::npos)
      << g.status().message();
  EXPECT_NE(g.status().message().find("'bad'"), std::string::npos) << g.status().message();

  GraphBuilder b2("g2", 1);
  b2.relu("undefined_value", "r");
  EXPECT_NE(b2.status().message().find("undefined_value"), std::string::npos);
}

TEST(GraphBuilder, UniqueNodeNames) {
  GraphBuilder b("g", 1);
  std::string x = b.input("x", DType::kFloat32, {2, 4});
  x = b.relu(x, "relu");
  x = b.relu(x, "relu");
  b.output(x, "y");
  Result<Graph> g = b.finish();
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  ASSERT_EQ(g->nodes.size(), 2u);
  EXPECT_EQ(g->nodes[0].name, "relu");
  EXPECT_EQ(g->nodes[1].name, "relu_1");
  EXPECT_EQ(g->nodes[1].outputs[0], "y");
}

// Every model runs on the cpu kernels; outputs are finite, not degenerate, and O(1).
class ZooRun : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooRun, RunsOnTheCpuKernels) {
  const std::string name = GetParam();
  const int64_t batch = name == "imdb_lstm" ? 4 : 1;
  const Graph g = build_ok(name, batch);
  Result<HostTensor> x = sample_input(name, batch);
  ASSERT_TRUE(x.ok()) << x.status().to_string();
  auto outputs = run_graph_on_host(g, {*x});
  ASSERT_TRUE(outputs.ok()) << outputs.status().to_string();
  ASSERT_EQ(outputs->size(), 1u);
  ASSERT_TRUE((*outputs)[0].ok()) << (*outputs)[0].status().to_string();
  const HostTensor& y = *(*outputs)[0];
  const int64_t classes = name == "imdb_lstm" ? 1 : 1000;
  ASSERT_EQ(y.type(), (TensorType{DType::kFloat32, {batch, classes}}));
  const float* p = y.data<float>();
  double min = p[0], max = p[0];
  for (int64_t i = 0; i < y.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(p[i])) << name << " output " << i << " = " << p[i];
    min = std::min(min, static_cast<double>(p[i]));
    max = std::max(max, static_cast<double>(p[i]));
  }
  if (name == "mobilenet") {  // softmax probabilities
    for (int64_t n = 0; n < batch; ++n) {
      double sum = 0.0;
      for (int64_t c = 0; c < classes; ++c) {
        ASSERT_GE(p[n * classes + c], 0.f);
        sum += p[n * classes + c];
      }
      EXPECT_NEAR(sum, 1.0, 1e-4) << name << " row " << n;
    }
    EXPECT_GT(max, 2.0 / classes) << "softmax is flat: the logits carry no signal";
  } else if (name == "imdb_lstm") {  // sigmoid probabilities, differing per review
    EXPECT_GT(min, 0.0);
    EXPECT_LT(max, 1.0);
    EXPECT_GT(max - min, 1e-3) << "every review gets the same score";
  } else {  // logits: spread, but not exploded by a bad weight scale
    EXPECT_GT(max - min, 0.1) << name;
    EXPECT_LT(std::max(std::fabs(min), std::fabs(max)), 1e3) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ZooRun,
                         ::testing::Values("mobilenet", "mobilenet_v2", "resnet50", "imdb_lstm"),
                         [](const auto& info) { return info.param; });

// The graph compiler (oneDNN regions: BN folding, post-op fusion, blocked layouts, arena
// memory plan) changes no result: each model with fusion on matches the reference kernels
// with fusion off (rtol 1e-3, as the issue asks against PyTorch).
class ZooFusion : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooFusion, FusedMatchesReference) {
  const std::string name = GetParam();
  const int64_t batch = name == "imdb_lstm" ? 4 : 2;
  const Graph g = build_ok(name, batch);
  Result<HostTensor> x = sample_input(name, batch);
  ASSERT_TRUE(x.ok()) << x.status().to_string();
  auto fused = run_graph_on_host(g, {*x}, CompileOptions{/*fuse=*/true});
  auto ref = run_graph_on_host(g, {*x}, CompileOptions{/*fuse=*/false});
  ASSERT_TRUE(fused.ok() && ref.ok());
  ASSERT_TRUE((*fused)[0].ok()) << (*fused)[0].status().to_string();
  ASSERT_TRUE((*ref)[0].ok()) << (*ref)[0].status().to_string();
  const HostTensor& a = *(*fused)[0];
  const HostTensor& b = *(*ref)[0];
  ASSERT_EQ(a.type(), b.type());
  double scale = 0;
  for (int64_t i = 0; i < b.numel(); ++i) scale = std::max(scale, std::fabs(double(b.data<float>()[i])));
  int64_t bad = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::fabs(double(a.data<float>()[i]) - b.data<float>()[i]);
    if (!(d <= 1e-3 * std::fabs(double(b.data<float>()[i])) + 1e-4 * scale)) ++bad;
  }
  EXPECT_EQ(bad, 0) << name << ": " << bad << " of " << a.numel() << " outputs differ";
}

INSTANTIATE_TEST_SUITE_P(Models, ZooFusion,
                         ::testing::Values("mobilenet", "mobilenet_v2", "resnet50", "imdb_lstm"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tensord::models
