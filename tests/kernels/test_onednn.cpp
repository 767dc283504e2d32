// The oneDNN kernels (CompileOptions{fuse=true}) against the reference kernels (fuse=false) on
// random Conv, MatMul, Gemm and pooling problems.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <atomic>
#include <random>
#include <string>
#include <vector>

#include "engine/executor.h"
#include "backends/cpu/kernel.h"
#include "backends/cpu/vec_math.h"
#include "kernels/op_test_util.h"

namespace tensord::testing {
namespace {

HostTensor random_f32(const Shape& shape, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  HostTensor t(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = dist(rng);
  return t;
}

Graph one_node_graph(const std::string& op, const std::vector<HostTensor>& inputs,
                     AttributeMap attrs, std::vector<HostTensor>* bound) {
  Graph g;
  Node n;
  n.name = "test_" + op;
  n.op = op;
  n.attrs = std::move(attrs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) {
      n.inputs.push_back("");
      continue;
    }
    const std::string name = "x" + std::to_string(i);
    n.inputs.push_back(name);
    g.inputs.push_back({name, inputs[i].type()});
    bound->push_back(inputs[i]);
  }
  n.outputs.push_back("y0");
  g.outputs.push_back({"y0", {}});
  g.nodes.push_back(n);
  return g;
}

// Runs the node with fast kernels and with reference kernels only; checks the oneDNN kernel
// is the one the fast run picks, and that both agree.
void expect_fast_matches_reference(const std::string& op, const std::vector<HostTensor>& inputs,
                                   AttributeMap attrs = {}, const std::string& kernel = "onednn") {
  std::vector<HostTensor> bound;
  const Graph g = one_node_graph(op, inputs, std::move(attrs), &bound);
  const auto& kernels = cpu::KernelRegistry::global().find(op);
  ASSERT_FALSE(kernels.empty());
  std::vector<TensorType> types;
  for (const auto& t : inputs) types.push_back(t.empty() ? TensorType{} : t.type());
  // `kernel` is the first in the op's list that takes these inputs: the one that runs.
  size_t k = 0;
  while (k < kernels.size() && kernels[k].name != kernel) {
    EXPECT_FALSE(kernels[k].accepts && kernels[k].accepts(g.nodes[0], types).ok())
        << op << ": " << kernels[k].name << " comes first and takes it";
    ++k;
  }
  ASSERT_LT(k, kernels.size()) << op << " has no " << kernel << " kernel";
  const Status accepted = kernels[k].accepts(g.nodes[0], types);
  EXPECT_TRUE(accepted.ok()) << op << ": " << accepted.to_string();

  auto fast = run_graph_on_host(g, bound, CompileOptions{true});
  auto ref = run_graph_on_host(g, bound, CompileOptions{false});
  ASSERT_TRUE(fast.ok()) << fast.status().to_string();
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  ASSERT_TRUE((*fast)[0].ok()) << (*fast)[0].status().to_string();
  ASSERT_TRUE((*ref)[0].ok()) << (*ref)[0].status().to_string();
  EXPECT_TRUE(tensors_near(*(*fast)[0], *(*ref)[0], 1e-4, 1e-5)) << op;
}

struct ConvCase {
  int64_t n, c, h, w, m, kh, kw, group;
  std::vector<int64_t> strides, pads, dilations;
  std::string auto_pad;
  bool bias;
};

TEST(OneDnn, ConvMatchesReference) {
  std::mt19937 rng(1234);
  const std::vector<ConvCase> cases = {
      {1, 3, 8, 8, 4, 3, 3, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, "", false},
      {2, 4, 9, 7, 6, 3, 3, 1, {2, 2}, {1, 1, 1, 1}, {1, 1}, "", true},
      {1, 4, 10, 10, 8, 3, 3, 2, {1, 1}, {1, 2, 0, 1}, {2, 2}, "", true},
      {1, 8, 7, 7, 8, 3, 3, 8, {1, 1}, {1, 1, 1, 1}, {1, 1}, "", true},   // depthwise
      {2, 6, 12, 11, 6, 5, 3, 6, {2, 1}, {2, 1, 2, 1}, {1, 2}, "", false},  // depthwise, strided
      {1, 5, 9, 9, 7, 1, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, "", true},   // pointwise
      {1, 3, 11, 13, 4, 4, 2, 1, {3, 2}, {}, {1, 1}, "SAME_UPPER", true},
      {1, 3, 11, 13, 4, 3, 4, 1, {2, 3}, {}, {1, 1}, "SAME_LOWER", false},
      {3, 12, 6, 6, 9, 2, 2, 3, {1, 2}, {0, 1, 1, 0}, {3, 1}, "", true},
  };
  for (const ConvCase& k : cases) {
    SCOPED_TRACE("conv case c=" + std::to_string(k.c) + " group=" + std::to_string(k.group));
    std::vector<HostTensor> inputs = {random_f32({k.n, k.c, k.h, k.w}, rng),
                                      random_f32({k.m, k.c / k.group, k.kh, k.kw}, rng)};
    if (k.bias) inputs.push_back(random_f32({k.m}, rng));
    AttributeMap attrs = {{"group", k.group}, {"strides", k.strides}, {"dilations", k.dilations}};
    if (!k.pads.empty()) attrs["pads"] = k.pads;
    if (!k.auto_pad.empty()) attrs["auto_pad"] = k.auto_pad;
    expect_fast_matches_reference("Conv", inputs, attrs);
  }
}

// Conv 1-D and 3-D (audio Conv1d, volumetric Conv3d) through the same oneDNN kernel.
TEST(OneDnn, Conv1dAnd3dMatchReference) {
  std::mt19937 rng(4321);
  // Conv1d: plain, strided with a long kernel (raw-waveform front end), grouped, dilated + bias.
  expect_fast_matches_reference("Conv", {random_f32({1, 1, 200}, rng), random_f32({8, 1, 20}, rng)},
                                {{"strides", std::vector<int64_t>{4}}});
  expect_fast_matches_reference(
      "Conv", {random_f32({2, 6, 31}, rng), random_f32({4, 3, 3}, rng), random_f32({4}, rng)},
      {{"group", int64_t{2}}, {"pads", std::vector<int64_t>{1, 2}},
       {"dilations", std::vector<int64_t>{2}}});
  expect_fast_matches_reference("Conv", {random_f32({1, 5, 17}, rng), random_f32({7, 5, 5}, rng)},
                                {{"auto_pad", "SAME_UPPER"}});
  // Conv3d.
  expect_fast_matches_reference(
      "Conv", {random_f32({1, 3, 5, 6, 7}, rng), random_f32({4, 3, 3, 2, 3}, rng),
               random_f32({4}, rng)},
      {{"strides", std::vector<int64_t>{1, 2, 1}}, {"pads", std::vector<int64_t>{1, 0, 1, 1, 1, 0}}});
  // Conv3d 1x1x1 (one SGEMM per image on the plain layout), batch 2, with and without bias;
  // strided or padded ones stay on the blocked path.
  expect_fast_matches_reference(
      "Conv", {random_f32({2, 6, 3, 5, 7}, rng), random_f32({9, 6, 1, 1, 1}, rng),
               random_f32({9}, rng)});
  expect_fast_matches_reference(
      "Conv", {random_f32({1, 20, 2, 4, 4}, rng), random_f32({3, 20, 1, 1, 1}, rng)});
  expect_fast_matches_reference(
      "Conv", {random_f32({1, 4, 3, 5, 5}, rng), random_f32({5, 4, 1, 1, 1}, rng)},
      {{"strides", std::vector<int64_t>{1, 2, 2}}});
}

// A 1x1x1 convolution whose weights disagree with the input's channels: a status naming the
// problem, not a read past the weights.
TEST(OneDnn, PointwiseConv3dWithMismatchedChannelsFails) {
  std::mt19937 rng(5);
  std::vector<HostTensor> bound;
  Graph g = one_node_graph(
      "Conv", {random_f32({1, 4, 2, 3, 3}, rng), random_f32({3, 5, 1, 1, 1}, rng)}, {}, &bound);
  for (bool known : {true, false}) {
    // Unknown dims: the compile cannot check the channels, so the kernel must.
    if (!known) g.inputs[0].type.shape = {-1, -1, -1, -1, -1};
    auto fast = run_graph_on_host(g, bound, CompileOptions{true});
    const Status st = fast.ok() ? (*fast)[0].status() : fast.status();
    EXPECT_FALSE(st.ok()) << known;
    EXPECT_NE(st.message().find("channel"), std::string::npos) << st.message();
  }
}

TEST(OneDnn, MatMulMatchesReference) {
  std::mt19937 rng(99);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 5}, {5, 4}},          {{1, 64}, {64, 10}},        {{17, 33}, {33, 9}},
      {{2, 3, 5}, {2, 5, 4}},    {{2, 3, 4, 6}, {2, 3, 6, 5}}, {{4, 7, 8}, {8, 3}},
      {{2, 2, 3, 8}, {8, 16}},
  };
  for (const auto& [a, b] : cases) {
    SCOPED_TRACE("matmul " + shape_to_string(a) + " x " + shape_to_string(b));
    expect_fast_matches_reference("MatMul", {random_f32(a, rng), random_f32(b, rng)});
  }
}

TEST(OneDnn, MatMulRefusesBroadcastAndOtherDtypes) {
  const auto& k = cpu::KernelRegistry::global().find("MatMul").front();
  Node n;
  n.op = "MatMul";
  EXPECT_FALSE(k.accepts(n, {{DType::kFloat32, {2, 3, 4}}, {DType::kFloat32, {1, 4, 5}}}).ok());
  EXPECT_FALSE(k.accepts(n, {{DType::kFloat32, {3, 4}}, {DType::kFloat32, {2, 4, 5}}}).ok());
  EXPECT_FALSE(k.accepts(n, {{DType::kFloat32, {4}}, {DType::kFloat32, {4, 5}}}).ok());
  EXPECT_FALSE(k.accepts(n, {{DType::kFloat64, {3, 4}}, {DType::kFloat64, {4, 5}}}).ok());
  EXPECT_FALSE(k.accepts(n, {{DType::kInt32, {3, 4}}, {DType::kInt32, {4, 5}}}).ok());
}

TEST(OneDnn, GemmMatchesReference) {
  std::mt19937 rng(7);
  struct GemmCase {
    int64_t m, k, n, trans_a, trans_b;
    float alpha, beta;
    Shape c;  // empty vector with has_c=false: no C
    bool has_c;
  };
  const std::vector<GemmCase> cases = {
      {3, 5, 4, 0, 0, 1.0f, 1.0f, {}, false},
      {3, 5, 4, 0, 0, 1.0f, 1.0f, {4}, true},
      {3, 5, 4, 1, 0, 1.0f, 1.0f, {3, 4}, true},
      {6, 7, 2, 0, 1, 0.5f, 1.0f, {2}, true},
      {6, 7, 2, 1, 1, 2.0f, -0.75f, {6, 2}, true},
      {4, 9, 5, 0, 1, 1.0f, 0.25f, {}, true},  // scalar C
      {4, 9, 5, 0, 0, 1.5f, 2.0f, {1, 1}, true},
      {1, 2048, 10, 0, 1, 1.0f, 1.0f, {1, 10}, true},
  };
  for (const GemmCase& g : cases) {
    SCOPED_TRACE("gemm m=" + std::to_string(g.m) + " k=" + std::to_string(g.k) +
                 " n=" + std::to_string(g.n));
    std::vector<HostTensor> inputs = {
        random_f32(g.trans_a ? Shape{g.k, g.m} : Shape{g.m, g.k}, rng),
        random_f32(g.trans_b ? Shape{g.n, g.k} : Shape{g.k, g.n}, rng)};
    if (g.has_c) inputs.push_back(random_f32(g.c, rng));
    expect_fast_matches_reference("Gemm", inputs,
                                  {{"alpha", g.alpha}, {"beta", g.beta}, {"transA", g.trans_a},
                                   {"transB", g.trans_b}});
  }
}

TEST(OneDnn, PoolsMatchReference) {
  std::mt19937 rng(5);
  const HostTensor x = random_f32({2, 3, 9, 10}, rng);
  const std::vector<int64_t> k3 = {3, 3}, k2 = {2, 2}, s2 = {2, 2}, s1 = {1, 1};
  for (const char* op : {"MaxPool", "AveragePool"}) {
    SCOPED_TRACE(op);
    expect_fast_matches_reference(op, {x}, {{"kernel_shape", k3}, {"strides", s2}});
    expect_fast_matches_reference(
        op, {x}, {{"kernel_shape", k3}, {"strides", s2}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
    expect_fast_matches_reference(op, {x}, {{"kernel_shape", k2}, {"strides", s1},
                                            {"auto_pad", "SAME_UPPER"}});
  }
  expect_fast_matches_reference("AveragePool", {x},
                                {{"kernel_shape", k3},
                                 {"count_include_pad", int64_t{1}},
                                 {"pads", std::vector<int64_t>{1, 0, 1, 2}}});
}

TEST(OneDnn, Pools1dAnd3dMatchReference) {
  std::mt19937 rng(6);
  const HostTensor x1 = random_f32({2, 3, 40}, rng);
  const HostTensor x3 = random_f32({1, 2, 6, 7, 5}, rng);
  for (const char* op : {"MaxPool", "AveragePool"}) {
    SCOPED_TRACE(op);
    expect_fast_matches_reference(op, {x1}, {{"kernel_shape", std::vector<int64_t>{4}},
                                             {"strides", std::vector<int64_t>{4}}});
    expect_fast_matches_reference(op, {x1}, {{"kernel_shape", std::vector<int64_t>{3}},
                                             {"pads", std::vector<int64_t>{1, 1}}});
    expect_fast_matches_reference(op, {x3}, {{"kernel_shape", std::vector<int64_t>{2, 3, 2}},
                                             {"strides", std::vector<int64_t>{2, 1, 2}}});
  }
  // The 1-D loop: asymmetric pads counted in the average, a dilated max window.
  expect_fast_matches_reference("AveragePool", {x1},
                                {{"kernel_shape", std::vector<int64_t>{5}},
                                 {"strides", std::vector<int64_t>{3}},
                                 {"pads", std::vector<int64_t>{2, 1}},
                                 {"count_include_pad", int64_t{1}}});
  expect_fast_matches_reference("MaxPool", {x1},
                                {{"kernel_shape", std::vector<int64_t>{3}},
                                 {"dilations", std::vector<int64_t>{2}},
                                 {"pads", std::vector<int64_t>{1, 2}}});
}

// LayerNormalization and Softmax/LogSoftmax over the last axis (fast_norm.cpp).
TEST(FastNorm, LayerNormMatchesReference) {
  std::mt19937 rng(17);
  // Rows of 256 (transformer), 768 + an odd tail, normalised over two axes, no bias,
  // a [1, D] scale, a row with a large mean (the centred variance keeps its digits).
  expect_fast_matches_reference("LayerNormalization",
                                {random_f32({2, 64, 256}, rng), random_f32({256}, rng),
                                 random_f32({256}, rng)},
                                {{"axis", int64_t{-1}}, {"epsilon", 1e-6f}}, "fast");
  expect_fast_matches_reference("LayerNormalization",
                                {random_f32({3, 771}, rng), random_f32({771}, rng)}, {}, "fast");
  expect_fast_matches_reference("LayerNormalization",
                                {random_f32({2, 5, 6, 7}, rng), random_f32({6, 7}, rng),
                                 random_f32({1, 6, 7}, rng)},
                                {{"axis", int64_t{2}}}, "fast");
  HostTensor shifted = random_f32({4, 100}, rng);
  for (int64_t i = 0; i < shifted.numel(); ++i) shifted.mutable_data<float>()[i] += 1000.0f;
  expect_fast_matches_reference("LayerNormalization",
                                {shifted, random_f32({100}, rng), random_f32({100}, rng)}, {},
                                "fast");
  // What it leaves to the reference: the Mean output, a scale broadcast within the row.
  const auto& fast = cpu::KernelRegistry::global().find("LayerNormalization").front();
  Node mean;
  mean.op = "LayerNormalization";
  mean.outputs = {"y", "mean"};
  EXPECT_FALSE(fast.accepts(mean, {{DType::kFloat32, {2, 8}}, {DType::kFloat32, {8}}}).ok());
  Node bcast;
  bcast.op = "LayerNormalization";
  bcast.outputs = {"y"};
  EXPECT_FALSE(fast.accepts(bcast, {{DType::kFloat32, {2, 8}}, {DType::kFloat32, {1}}}).ok());
}

TEST(FastNorm, SoftmaxMatchesReference) {
  std::mt19937 rng(18);
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    SCOPED_TRACE(op);
    HostTensor x = random_f32({2, 4, 16, 131}, rng);  // attention scores, an odd row length
    for (int64_t i = 0; i < x.numel(); i += 7) x.mutable_data<float>()[i] *= 30.0f;
    expect_fast_matches_reference(op, {x}, {}, "fast");
    expect_fast_matches_reference(op, {random_f32({5, 3}, rng)}, {{"axis", int64_t{1}}}, "fast");
    // Rows of many 16-value lanes and a tail, and of less than one lane.
    expect_fast_matches_reference(op, {random_f32({3, 1013}, rng)}, {}, "fast");
    expect_fast_matches_reference(op, {random_f32({4, 7}, rng)}, {}, "fast");
    // An axis with trailing dims goes to the reference.
    const auto& fast = cpu::KernelRegistry::global().find(op).front();
    Node n;
    n.op = op;
    n.attrs = {{"axis", int64_t{1}}};
    EXPECT_FALSE(fast.accepts(n, {{DType::kFloat32, {2, 3, 4}}}).ok());
  }
}

// A NaN anywhere in a row (first, in the 16-value lanes, in the tail) makes the whole row NaN,
// as the reference's; the other rows are untouched.
TEST(FastNorm, SoftmaxRowWithNanIsAllNan) {
  std::mt19937 rng(20);
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    SCOPED_TRACE(op);
    HostTensor x = random_f32({4, 40}, rng);
    float* d = x.mutable_data<float>();
    d[0] = NAN;
    d[40 + 5] = NAN;
    d[80 + 37] = NAN;
    std::vector<HostTensor> bound;
    const Graph g = one_node_graph(op, {x}, {}, &bound);
    auto out = run_graph_on_host(g, bound, CompileOptions{true});
    ASSERT_TRUE(out.ok() && (*out)[0].ok());
    const float* y = (*out)[0]->data<float>();
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t j = 0; j < 40; ++j) EXPECT_TRUE(std::isnan(y[r * 40 + j])) << r << "," << j;
    double sum = 0;
    for (int64_t j = 0; j < 40; ++j) {
      EXPECT_FALSE(std::isnan(y[120 + j]));
      sum += std::string(op) == "Softmax" ? y[120 + j] : std::exp(y[120 + j]);
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

// The fast float32 Resize (image.cpp) against the reference: linear and cubic, each coordinate
// transformation, up and down, antialias with exclude_outside, an output of one row; a Resize
// that also scales the channels runs the reference from inside the fast kernel.
TEST(FastResize, LinearAndCubicMatchReference) {
  std::mt19937 rng(21);
  auto f32 = [](std::vector<float> v) {
    HostTensor t(DType::kFloat32, {static_cast<int64_t>(v.size())});
    for (size_t i = 0; i < v.size(); ++i) t.mutable_data<float>()[i] = v[i];
    return t;
  };
  auto i64 = [](std::vector<int64_t> v) {
    HostTensor t(DType::kInt64, {static_cast<int64_t>(v.size())});
    for (size_t i = 0; i < v.size(); ++i) t.mutable_data<int64_t>()[i] = v[i];
    return t;
  };
  const HostTensor x = random_f32({2, 3, 7, 9}, rng);
  const HostTensor none;
  struct Case {
    std::string mode, ctm;
    HostTensor scales, sizes;
    int64_t antialias = 0, exclude = 0;
  };
  const std::vector<Case> cases = {
      {"linear", "half_pixel", none, i64({2, 3, 56, 72})},  // x8, the segmentation heads'
      {"linear", "align_corners", f32({1, 1, 2, 3}), none},
      {"linear", "pytorch_half_pixel", none, i64({2, 3, 1, 20})},
      {"linear", "asymmetric", f32({1, 1, 0.5f, 0.6f}), none, 1},
      {"cubic", "half_pixel", f32({1, 1, 2.5f, 1.5f}), none},
      {"cubic", "asymmetric", f32({1, 1, 0.5f, 0.6f}), none, 1, 1},
      {"linear", "half_pixel", f32({1, 2, 2, 2}), none},  // channels too: the reference
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.mode + " " + c.ctm);
    expect_fast_matches_reference("Resize", {x, none, c.scales, c.sizes},
                                  {{"mode", c.mode},
                                   {"coordinate_transformation_mode", c.ctm},
                                   {"antialias", c.antialias},
                                   {"exclude_outside", c.exclude}},
                                  "fast");
  }
  // Nearest and tf_crop_and_resize are the reference's.
  const auto& fast = cpu::KernelRegistry::global().find("Resize").front();
  Node n;
  n.op = "Resize";
  n.attrs = {{"mode", std::string("nearest")}};
  EXPECT_FALSE(fast.accepts(n, {x.type()}).ok());
  n.attrs = {{"mode", std::string("linear")},
             {"coordinate_transformation_mode", std::string("tf_crop_and_resize")}};
  EXPECT_FALSE(fast.accepts(n, {x.type()}).ok());
}

// The element-wise programs' erf (GELU's): within 1e-6 relative of libm's double erf over
// [-6, 6], exact limits, NaN through.
TEST(VecMath, ErfMatchesLibm) {
  double worst = 0;
  for (double xd = -6; xd <= 6; xd += 1e-4) {
    const float x = static_cast<float>(xd);
    const double r = std::erf(static_cast<double>(x));
    worst = std::max(worst, std::fabs(cpu::vec::erf(x) - r) / std::max(1e-30, std::fabs(r)));
  }
  EXPECT_LT(worst, 1e-6);
  EXPECT_EQ(cpu::vec::erf(0.0f), 0.0f);
  EXPECT_FLOAT_EQ(cpu::vec::erf(1e-20f), static_cast<float>(std::erf(1e-20)));
  EXPECT_EQ(cpu::vec::erf(INFINITY), 1.0f);
  EXPECT_EQ(cpu::vec::erf(-INFINITY), -1.0f);
  EXPECT_TRUE(std::isnan(cpu::vec::erf(NAN)));
}

// The element-wise programs' exp: within 2 ulp of libm's over its range, and libm's limits
// beyond it (it used to clamp: exp(-175) was 1.2e-38, FLT_MIN, and exp(100) 3.4e38).
TEST(VecMath, ExpMatchesLibmAndItsLimits) {
  double worst = 0;
  for (double xd = -87; xd <= 88; xd += 1e-3) {
    const float x = static_cast<float>(xd);
    const double r = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(cpu::vec::exp(x) - r) / r);
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(cpu::vec::exp(-175.0f), 0.0f);
  EXPECT_EQ(cpu::vec::exp(-INFINITY), 0.0f);
  EXPECT_EQ(cpu::vec::exp(100.0f), INFINITY);
  EXPECT_EQ(cpu::vec::exp(INFINITY), INFINITY);
  EXPECT_EQ(cpu::vec::exp(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(cpu::vec::exp(NAN)));
  EXPECT_EQ(cpu::vec::sigmoid(-200.0f), 0.0f);
  EXPECT_EQ(cpu::vec::sigmoid(200.0f), 1.0f);
  EXPECT_EQ(cpu::vec::tanh(100.0f), 1.0f);
  EXPECT_EQ(cpu::vec::tanh(-100.0f), -1.0f);
}

// Transpose's strided copy (merged dims, block copies, 16x16 tiles) against a naive loop, on
// sizes that are not multiples of the tile and permutations of each kind.
// The fast Slice, Expand and Gather (their copies split across the threads when large) equal
// the reference kernels bit for bit: a broadcast innermost axis (the message-passing form, int64
// indices [E,1] to [E,D]), broadcast outer axes, steps, a negative step, rows gathered on axis 0
// and on an inner axis with negative indices.
TEST(StridedCopy, LargeSliceExpandAndGatherEqualTheReference) {
  std::mt19937 rng(23);
  auto ints = [](std::vector<int64_t> v) {
    const int64_t n = static_cast<int64_t>(v.size());
    return HostTensor::from_vector<int64_t>(std::move(v), {n});
  };
  std::vector<int64_t> index(4096);
  for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<int64_t>((i * 37) % 256);
  const HostTensor x = random_f32({8, 96, 130}, rng);
  struct Case {
    const char* what;
    std::string op;
    std::vector<HostTensor> inputs;
    AttributeMap attrs = {};
  };
  std::vector<int64_t> inner_index(300);
  for (size_t i = 0; i < inner_index.size(); ++i)
    inner_index[i] = static_cast<int64_t>(i % 3 == 0 ? -1 - static_cast<int64_t>(i % 40) : i / 2);
  const std::vector<Case> cases = {
      {"int64 [4096,1] to [4096,64]", "Expand",
       {HostTensor::from_vector<int64_t>(index, {4096, 1}), ints({4096, 64})}},
      {"[96,1] to [8,96,130]", "Expand", {random_f32({96, 1}, rng), ints({8, 96, 130})}},
      {"steps 1,2,1", "Slice", {x, ints({1, 5, 0}), ints({8, 90, 130}), ints({0, 1, 2}),
                                ints({1, 2, 1})}},
      {"a negative step and a step of 3", "Slice",
       {x, ints({7, 2}), ints({-9, 130}), ints({0, 2}), ints({-1, 3})}},
      {"rows of [256,64] by [4096] int64", "Gather",
       {random_f32({256, 64}, rng), HostTensor::from_vector<int64_t>(index, {4096})}},
      {"axis 1 of [8,300,40] by [2,150], negative indices", "Gather",
       {random_f32({8, 300, 40}, rng),
        HostTensor::from_vector<int64_t>(inner_index, {2, 150})},
       {{"axis", int64_t{1}}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op + " " + c.what);
    ASSERT_EQ(cpu::KernelRegistry::global().find(c.op).front().name, "fast");
    std::vector<HostTensor> bound;
    const Graph g = one_node_graph(c.op, c.inputs, c.attrs, &bound);
    auto fast = run_graph_on_host(g, bound, CompileOptions{true});
    auto ref = run_graph_on_host(g, bound, CompileOptions{false});
    ASSERT_TRUE(fast.ok() && (*fast)[0].ok()) << fast.status().to_string();
    ASSERT_TRUE(ref.ok() && (*ref)[0].ok()) << ref.status().to_string();
    const HostTensor& a = *(*fast)[0];
    const HostTensor& b = *(*ref)[0];
    ASSERT_EQ(a.shape(), b.shape());
    EXPECT_GE(a.nbytes(), 1 << 17) << "large enough to be split across the threads";
    EXPECT_EQ(std::memcmp(a.data(), b.data(), static_cast<size_t>(a.nbytes())), 0);
  }
}

// The fast Concat and Split equal the reference bit for bit, split across the threads both
// ways: many rows (axis 1 of [64,8192,3]: the rows go to threads) and few long blocks (axis 0:
// the blocks are cut in pieces), with an empty part, int64 and a small copy left on one thread.
TEST(StridedCopy, ConcatAndSplitEqualTheReference) {
  std::mt19937 rng(29);
  struct Case {
    const char* what;
    std::string op;
    std::vector<HostTensor> inputs;
    int64_t axis;
    std::vector<int64_t> split;  // Split's sizes (their count is the outputs')
  };
  std::vector<int64_t> big(3 << 18);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<int64_t>(i * 7919);
  const std::vector<Case> cases = {
      {"rows: axis 1 of [64,8192,3]", "Split", {random_f32({64, 8192, 3}, rng)}, 1,
       {4000, 0, 4192}},
      {"long blocks: axis 0 of int64 [3,262144]", "Split",
       {HostTensor::from_vector<int64_t>(big, {3, 1 << 18})}, 0, {1, 2}},
      {"small: [32,2,384] in three", "Split", {random_f32({32, 2, 384}, rng)}, -1,
       {128, 128, 128}},
      {"rows: axis 2 of [16,64,*]", "Concat",
       {random_f32({16, 64, 300}, rng), random_f32({16, 64, 0}, rng),
        random_f32({16, 64, 77}, rng)}, 2, {}},
      {"long blocks: axis 0", "Concat",
       {random_f32({1, 300000}, rng), random_f32({2, 300000}, rng)}, 0, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op + " " + c.what);
    ASSERT_EQ(cpu::KernelRegistry::global().find(c.op).front().name, "fast");
    std::vector<HostTensor> inputs = c.inputs;
    if (!c.split.empty()) {
      const int64_t n = static_cast<int64_t>(c.split.size());
      inputs.push_back(HostTensor::from_vector<int64_t>(c.split, {n}));
    }
    std::vector<HostTensor> bound;
    Graph g = one_node_graph(c.op, inputs, {{"axis", c.axis}}, &bound);
    for (size_t i = 1; i < c.split.size(); ++i) {
      const std::string name = "y" + std::to_string(i);
      g.nodes[0].outputs.push_back(name);
      g.outputs.push_back({name, {}});
    }
    auto fast = run_graph_on_host(g, bound, CompileOptions{true});
    auto ref = run_graph_on_host(g, bound, CompileOptions{false});
    ASSERT_TRUE(fast.ok()) << fast.status().to_string();
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    ASSERT_EQ(fast->size(), std::max<size_t>(1, c.split.size()));
    for (size_t i = 0; i < fast->size(); ++i) {
      ASSERT_TRUE((*fast)[i].ok() && (*ref)[i].ok());
      const HostTensor& a = *(*fast)[i];
      const HostTensor& b = *(*ref)[i];
      ASSERT_EQ(a.shape(), b.shape()) << "output " << i;
      if (a.nbytes())
        EXPECT_EQ(std::memcmp(a.data(), b.data(), static_cast<size_t>(a.nbytes())), 0)
            << "output " << i;
    }
  }
}

// The fast MaxPool with Indices and the fast ScatterElements (a CNN's pool and its gradient)
// equal the reference kernels bit for bit on sizes split across the threads: the 2x2 and 3x3
// windows inside the plane, a padded pool (clamped windows), ties and NaN; the scatter-add
// of [4096, 16] updates into [4096, 64] rows with repeated indices, int32 and int64, and an
// index out of range named.
TEST(FastPoolGradient, MaxPoolIndicesAndScatterEqualTheReference) {
  std::mt19937 rng(31);
  HostTensor x = random_f32({64, 16, 9, 9}, rng);
  float* xv = x.mutable_data<float>();
  for (int64_t i = 0; i + 1 < x.numel(); i += 7) xv[i] = xv[i + 1];  // ties
  xv[5] = std::numeric_limits<float>::quiet_NaN();
  auto ints = [](std::vector<int64_t> v) { return Attribute(std::move(v)); };
  struct Case {
    const char* what;
    AttributeMap attrs;
  };
  const std::vector<Case> pools = {
      {"2x2 stride 2", {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}}},
      {"3x3 stride 2", {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}}},
      {"3x3 stride 1 pads 1", {{"kernel_shape", ints({3, 3})}, {"pads", ints({1, 1, 1, 1})}}},
  };
  auto both = [](const Graph& g, const std::vector<HostTensor>& bound) {
    auto fast = run_graph_on_host(g, bound, CompileOptions{true});
    auto ref = run_graph_on_host(g, bound, CompileOptions{false});
    EXPECT_TRUE(fast.ok() && ref.ok());
    return std::make_pair(std::move(fast), std::move(ref));
  };
  for (const Case& c : pools) {
    SCOPED_TRACE(c.what);
    const auto& pool_kernels = cpu::KernelRegistry::global().find("MaxPool");
    ASSERT_TRUE(std::any_of(pool_kernels.begin(), pool_kernels.end(),
                            [](const cpu::KernelDef& k) { return k.name == "fast"; }));
    std::vector<HostTensor> bound;
    Graph g = one_node_graph("MaxPool", {x}, c.attrs, &bound);
    g.nodes[0].outputs.push_back("y1");
    g.outputs.push_back({"y1", {}});
    auto [fast, ref] = both(g, bound);
    ASSERT_TRUE(fast.ok() && ref.ok());
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_TRUE((*fast)[i].ok() && (*ref)[i].ok()) << (*fast)[i].status().to_string();
      const HostTensor& a = *(*fast)[i];
      const HostTensor& b = *(*ref)[i];
      ASSERT_EQ(a.shape(), b.shape());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), static_cast<size_t>(a.nbytes())), 0) << "output " << i;
    }
  }
  std::vector<int64_t> index(4096 * 16);
  for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<int64_t>((i * 37 + i / 5) % 64);
  std::vector<int32_t> index32(index.begin(), index.end());
  for (bool wide : {true, false}) {
    SCOPED_TRACE(wide ? "int64" : "int32");
    ASSERT_EQ(cpu::KernelRegistry::global().find("ScatterElements").front().name, "fast");
    const HostTensor idx = wide ? HostTensor::from_vector<int64_t>(index, {4096, 16})
                                : HostTensor::from_vector<int32_t>(index32, {4096, 16});
    std::vector<HostTensor> bound;
    const Graph g = one_node_graph("ScatterElements", {random_f32({4096, 64}, rng), idx, random_f32({4096, 16}, rng)},
                                   {{"axis", int64_t{1}}, {"reduction", std::string("add")}}, &bound);
    auto [fast, ref] = both(g, bound);
    ASSERT_TRUE(fast.ok() && ref.ok());
    ASSERT_TRUE((*fast)[0].ok() && (*ref)[0].ok());
    EXPECT_TRUE(tensors_near(*(*fast)[0], *(*ref)[0], 1e-6, 1e-6));
  }
  index[4096 * 9 + 3] = 64;
  std::vector<HostTensor> bound;
  const Graph g = one_node_graph("ScatterElements",
                                 {random_f32({4096, 64}, rng), HostTensor::from_vector<int64_t>(index, {4096, 16}),
                                  random_f32({4096, 16}, rng)},
                                 {{"axis", int64_t{1}}, {"reduction", std::string("add")}}, &bound);
  auto bad = run_graph_on_host(g, bound, CompileOptions{true});
  const Status st = !bad.ok() ? bad.status() : (*bad)[0].status();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("index 64 is out of range"), std::string::npos) << st.to_string();
}

// The per-node MatMul and Gemm keep their oneDNN primitives; several threads running products
// of one shape at once (four broker sessions' 4x4 MatMuls, the load benchmark) each get the
// right values: a primitive's scratchpad is never shared between two threads.
TEST(FastMatMul, ConcurrentProductsOfOneShapeStayCorrect) {
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0}, failed{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &wrong, &failed] {
      std::mt19937 rng(100 + t);
      for (int i = 0; i < 240; ++i) {
        for (const char* op : {"MatMul", "Gemm"}) {
          const int64_t m = 4 + (i % 3) * 12;  // a few shapes, each met by every thread
          std::vector<HostTensor> bound;
          const Graph g = one_node_graph(op, {random_f32({m, 48}, rng), random_f32({48, 20}, rng)}, {}, &bound);
          auto fast = run_graph_on_host(g, bound, CompileOptions{true});
          auto ref = run_graph_on_host(g, bound, CompileOptions{false});
          if (!fast.ok() || !ref.ok() || !(*fast)[0].ok() || !(*ref)[0].ok()) {
            failed++;
            continue;
          }
          if (!tensors_near(*(*fast)[0], *(*ref)[0], 1e-4, 1e-5)) wrong++;
        }
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0) << "products computed concurrently read back wrong values";
}

TEST(StridedCopy, TransposeMatchesNaive) {
  std::mt19937 rng(19);
  const Shape shape = {2, 3, 37, 21};
  const HostTensor x = random_f32(shape, rng);
  const std::vector<std::vector<int64_t>> perms = {
      {0, 2, 3, 1}, {0, 3, 1, 2}, {3, 2, 1, 0}, {1, 0, 2, 3}, {0, 1, 3, 2}, {2, 0, 1, 3}};
  for (const auto& perm : perms) {
    SCOPED_TRACE("perm " + shape_to_string(perm));
    std::vector<HostTensor> bound;
    const Graph g = one_node_graph("Transpose", {x}, {{"perm", perm}}, &bound);
    auto out = run_graph_on_host(g, bound, CompileOptions{true});
    ASSERT_TRUE(out.ok() && (*out)[0].ok());
    const HostTensor& y = *(*out)[0];
    Shape oshape(4);
    for (size_t i = 0; i < 4; ++i) oshape[i] = shape[static_cast<size_t>(perm[i])];
    ASSERT_EQ(y.shape(), oshape);
    int64_t bad = 0, i = 0;
    int64_t o[4];
    for (o[0] = 0; o[0] < oshape[0]; ++o[0])
      for (o[1] = 0; o[1] < oshape[1]; ++o[1])
        for (o[2] = 0; o[2] < oshape[2]; ++o[2])
          for (o[3] = 0; o[3] < oshape[3]; ++o[3], ++i) {
            int64_t src[4];
            for (size_t d = 0; d < 4; ++d) src[perm[d]] = o[d];
            const int64_t f = ((src[0] * shape[1] + src[1]) * shape[2] + src[2]) * shape[3] + src[3];
            bad += y.data<float>()[i] != x.data<float>()[f];
          }
    EXPECT_EQ(bad, 0);
  }
}

// An LSTM or GRU node with the inputs both take (X, W, R, [B], [sequence_lens]; W and R have
// `gates` blocks of hidden rows); the caller adds the rest, then check() runs it on the fast
// kernel and on the reference and compares every output.
struct RnnGraph {
  Graph g;
  Node n;
  std::vector<HostTensor> bound;
  RnnGraph(const std::string& op, AttributeMap attrs, int64_t seq, int64_t batch, int64_t input,
           int64_t hidden, int64_t dirs, int64_t layout, int64_t gates, bool bias, bool lens,
           std::mt19937& rng) {
    n.name = "rnn";
    n.op = op;
    n.attrs = std::move(attrs);
    add("x", random_f32(layout == 0 ? Shape{seq, batch, input} : Shape{batch, seq, input}, rng));
    add("w", random_f32({dirs, gates * hidden, input}, rng));
    add("r", random_f32({dirs, gates * hidden, hidden}, rng));
    if (bias) add("b", random_f32({dirs, 2 * gates * hidden}, rng)); else skip();
    if (lens) {
      std::vector<int32_t> l;
      for (int64_t b = 0; b < batch; ++b) l.push_back(static_cast<int32_t>((seq - b) % (seq + 1)));
      l.back() = 0;  // an empty sequence
      add("lens", HostTensor::from_vector(l, {batch}));
    } else {
      skip();
    }
  }
  void add(const std::string& name, HostTensor t) {
    n.inputs.push_back(name);
    g.inputs.push_back({name, t.type()});
    bound.push_back(std::move(t));
  }
  void skip() { n.inputs.push_back(""); }
  void check(const std::vector<std::string>& outputs) {
    n.outputs = outputs;
    for (const auto& o : outputs) g.outputs.push_back({o, {}});
    g.nodes.push_back(n);
    std::vector<TensorType> types(n.inputs.size());
    size_t bi = 0;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (!n.inputs[i].empty()) types[i] = bound[bi++].type();
    const auto& kernels = cpu::KernelRegistry::global().find(n.op);
    ASSERT_EQ(kernels.front().name, "onednn");
    EXPECT_TRUE(kernels.front().accepts(n, types).ok());
    auto fast = run_graph_on_host(g, bound, CompileOptions{true});
    auto ref = run_graph_on_host(g, bound, CompileOptions{false});
    ASSERT_TRUE(fast.ok() && ref.ok());
    for (size_t o = 0; o < outputs.size(); ++o) {
      ASSERT_TRUE((*fast)[o].ok()) << (*fast)[o].status().to_string();
      ASSERT_TRUE((*ref)[o].ok()) << (*ref)[o].status().to_string();
      EXPECT_TRUE(tensors_near(*(*fast)[o], *(*ref)[o], 1e-4, 1e-5)) << "output " << o;
    }
  }
};

// `body` under every form of the RNN kernels this CPU has: its own (AVX-512 or AVX2
// intrinsics), AVX2's, and the compiler's clones (TENSORD_TEST_RNN_ISA).
template <class F>
void for_each_rnn_isa(F&& body) {
  for (const char* isa : {"", "avx2", "generic"}) {
    if (*isa) setenv("TENSORD_TEST_RNN_ISA", isa, 1); else unsetenv("TENSORD_TEST_RNN_ISA");
    SCOPED_TRACE(std::string("TENSORD_TEST_RNN_ISA=") + isa);
    body();
  }
  unsetenv("TENSORD_TEST_RNN_ISA");
}

// The fast LSTM (SGEMMs + vectorised gates) against the reference on Y, Y_h and Y_c.
struct LstmCase {
  int64_t seq, batch, input, hidden;
  std::string direction;
  int64_t layout;
  bool bias, lens, initial, peepholes;
};

TEST(OneDnn, LstmMatchesReference) {
  std::mt19937 rng(7);
  const std::vector<LstmCase> cases = {
      {5, 1, 3, 4, "forward", 0, false, false, false, false},
      {6, 3, 4, 5, "reverse", 0, true, true, true, false},
      {4, 2, 3, 6, "bidirectional", 0, true, true, true, true},
      {7, 3, 5, 4, "bidirectional", 1, true, false, true, true},
      {80, 2, 16, 32, "forward", 0, true, false, false, false},  // imdb_lstm-like
      // Hidden 128 (the 128-column product block), and 20 (a vector remainder) with and
      // without peepholes: the cell without them is a separate function.
      {6, 1, 16, 128, "forward", 0, true, false, true, false},
      {5, 1, 7, 20, "reverse", 0, true, false, true, true},
      {5, 2, 7, 20, "bidirectional", 1, false, true, false, false},
      // Enough work per direction that the two directions run on two threads at once.
      {8, 3, 16, 64, "bidirectional", 0, true, true, true, true},
      {3, 2, 0, 16, "forward", 0, true, false, true, false},  // no input features
      // Batches of 4 and 3 on hidden 96 (four entries' recurrent products at once, R read once
      // a step; a remainder of 3), with lengths: the corpus's padded-batch form. (Random
      // weights make a long recurrence chaotic: over 50 steps a change in the order of a sum
      // grows past the tolerance, so the sequence is kept short.)
      {12, 4, 64, 96, "forward", 0, true, true, true, false},
      {9, 3, 16, 32, "reverse", 1, true, true, false, true},
  };
  for_each_rnn_isa([&] {
    for (const LstmCase& k : cases) {
      SCOPED_TRACE("lstm " + k.direction + " layout " + std::to_string(k.layout));
      const int64_t dirs = k.direction == "bidirectional" ? 2 : 1;
      RnnGraph r("LSTM",
                 {{"hidden_size", k.hidden}, {"direction", k.direction}, {"layout", k.layout}},
                 k.seq, k.batch, k.input, k.hidden, dirs, k.layout, 4, k.bias, k.lens, rng);
      const Shape state = k.layout == 0 ? Shape{dirs, k.batch, k.hidden} : Shape{k.batch, dirs, k.hidden};
      if (k.initial) {
        r.add("h0", random_f32(state, rng));
        r.add("c0", random_f32(state, rng));
      } else {
        r.skip();
        r.skip();
      }
      if (k.peepholes) r.add("p", random_f32({dirs, 3 * k.hidden}, rng));
      r.check({"y", "yh", "yc"});
    }
  });
  // What the fast kernel leaves to the reference, and says why.
  Node clip;
  clip.op = "LSTM";
  clip.attrs = {{"clip", 3.0f}};
  const std::vector<TensorType> f32 = {{DType::kFloat32, {2, 1, 3}}, {DType::kFloat32, {1, 8, 3}},
                                       {DType::kFloat32, {1, 8, 2}}};
  const auto& fast = cpu::KernelRegistry::global().find("LSTM").front();
  EXPECT_NE(fast.accepts(clip, f32).message().find("clip"), std::string::npos);
  Node acts;
  acts.op = "LSTM";
  acts.attrs = {{"activations", std::vector<std::string>{"Relu", "Tanh", "Tanh"}}};
  EXPECT_NE(fast.accepts(acts, f32).message().find("default activations"), std::string::npos);
  Node f64;
  f64.op = "LSTM";
  EXPECT_FALSE(fast.accepts(f64, {{DType::kFloat64, {2, 1, 3}}, {DType::kFloat64, {1, 8, 3}},
                                  {DType::kFloat64, {1, 8, 2}}}).ok());
}

// The fast GRU against the reference on Y and Y_h: both forms of linear_before_reset, small
// batches (vectorised matrix-vector products) and larger ones (SGEMM per step).
struct GruCase {
  int64_t seq, batch, input, hidden;
  std::string direction;
  int64_t layout, linear_before_reset;
  bool bias, lens, initial;
};

TEST(OneDnn, GruMatchesReference) {
  std::mt19937 rng(11);
  const std::vector<GruCase> cases = {
      {5, 1, 3, 4, "forward", 0, 0, false, false, false},
      {5, 1, 3, 4, "forward", 0, 1, true, false, false},
      {6, 3, 4, 5, "reverse", 0, 0, true, true, true},
      {4, 2, 3, 6, "bidirectional", 0, 1, true, true, true},  // Conv1d + BiGRU-like
      {7, 6, 5, 4, "bidirectional", 1, 0, true, true, true},  // batch > 4: SGEMM steps
      {9, 7, 6, 8, "forward", 0, 1, true, false, true},
      // Hidden sizes whose products run in 128- and 64-column blocks plus a remainder.
      {3, 1, 5, 80, "bidirectional", 0, 1, true, false, false},
      {3, 2, 7, 96, "forward", 0, 0, true, true, true},
      {2, 1, 4, 128, "reverse", 0, 1, true, false, true},
      // linear_before_reset without B (Rbh taken as zeros), small and SGEMM batches.
      {4, 1, 3, 20, "bidirectional", 0, 1, false, false, true},
      {4, 6, 3, 20, "forward", 1, 1, false, true, false},
      // Enough work per direction that the two directions run on two threads at once.
      {6, 2, 16, 64, "bidirectional", 1, 0, true, true, true},
      {5, 6, 8, 48, "bidirectional", 0, 1, true, true, true},
      // Batches of 4 and 3 (four entries' products at once), both forms of the reset gate.
      {7, 4, 8, 48, "forward", 0, 0, true, true, true},
      {6, 3, 8, 32, "reverse", 1, 1, true, true, false},
      // No input features: X W^T is zero (its buffer is not zeroed beforehand).
      {3, 2, 0, 16, "forward", 0, 1, true, false, true},
  };
  for_each_rnn_isa([&] {
    for (const GruCase& k : cases) {
      SCOPED_TRACE("gru " + k.direction + " layout " + std::to_string(k.layout) + " lbr " +
                   std::to_string(k.linear_before_reset) + " batch " + std::to_string(k.batch));
      const int64_t dirs = k.direction == "bidirectional" ? 2 : 1;
      RnnGraph r("GRU",
                 {{"hidden_size", k.hidden},
                  {"direction", k.direction},
                  {"layout", k.layout},
                  {"linear_before_reset", k.linear_before_reset}},
                 k.seq, k.batch, k.input, k.hidden, dirs, k.layout, 3, k.bias, k.lens, rng);
      const Shape state = k.layout == 0 ? Shape{dirs, k.batch, k.hidden} : Shape{k.batch, dirs, k.hidden};
      if (k.initial) r.add("h0", random_f32(state, rng)); else r.skip();
      r.check({"y", "yh"});
    }
  });
  // What the fast kernel leaves to the reference, and says why.
  const auto& fast = cpu::KernelRegistry::global().find("GRU").front();
  const std::vector<TensorType> f32 = {{DType::kFloat32, {2, 1, 3}}, {DType::kFloat32, {1, 6, 3}},
                                       {DType::kFloat32, {1, 6, 2}}};
  Node clip;
  clip.op = "GRU";
  clip.attrs = {{"clip", 3.0f}};
  EXPECT_NE(fast.accepts(clip, f32).message().find("clip"), std::string::npos);
  Node acts;
  acts.op = "GRU";
  acts.attrs = {{"activations", std::vector<std::string>{"Sigmoid", "Relu"}}};
  EXPECT_NE(fast.accepts(acts, f32).message().find("default activations"), std::string::npos);
}

// Add, Sub, Mul, Max, Min and Equal on int32, int64 and float64 with broadcasting (index
// arithmetic: MaxPool's gradient subtracts a [P, 1] column) run as rows on the fast kernel and
// agree exactly with the reference loops, wrap-around and NaN included.
TEST(FastBinary, BroadcastIntegerAndDoubleArithmeticMatchesReference) {
  std::mt19937 rng(99);
  auto make = [&](DType t, Shape s) {
    HostTensor h(t, s);
    std::uniform_int_distribution<int64_t> d(-1000, 1000);
    for (int64_t i = 0; i < h.numel(); ++i) {
      const int64_t v = d(rng);
      if (t == DType::kInt32) h.mutable_data<int32_t>()[i] = static_cast<int32_t>(v);
      if (t == DType::kInt64) h.mutable_data<int64_t>()[i] = v * 3037000493LL;  // products wrap
      if (t == DType::kFloat64) h.mutable_data<double>()[i] = i == 3 ? std::nan("") : v * 0.37;
    }
    return h;
  };
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{4096, 16}, {4096, 1}}, {{8, 5}, {8, 5}},     {{1, 7}, {6, 1}},    {{2, 1, 3}, {1, 4, 1}},
      {{3, 4, 5}, {5}},        {{300, 300}, {}},     {{}, {2, 3}},        {{2, 0, 3}, {1, 3}},
      {{5, 1, 6, 1}, {1, 3, 1, 2}}};
  for (DType t : {DType::kInt32, DType::kInt64, DType::kFloat64})
    for (const char* op : {"Add", "Sub", "Mul", "Max", "Min", "Equal"})
      for (const auto& [sa, sb] : shapes) {
        SCOPED_TRACE(std::string(op) + " " + dtype_name(t) + " " + shape_to_string(sa) + " " +
                     shape_to_string(sb));
        std::vector<HostTensor> bound;
        const Graph g = one_node_graph(op, {make(t, sa), make(t, sb)}, {}, &bound);
        auto fast = run_graph_on_host(g, bound, CompileOptions{true});
        auto ref = run_graph_on_host(g, bound, CompileOptions{false});
        ASSERT_TRUE(fast.ok() && ref.ok());
        ASSERT_TRUE((*fast)[0].ok()) << (*fast)[0].status().to_string();
        ASSERT_TRUE((*ref)[0].ok());
        const HostTensor& a = *(*fast)[0];
        const HostTensor& b = *(*ref)[0];
        ASSERT_EQ(a.shape(), b.shape());
        ASSERT_EQ(a.dtype(), b.dtype());
        if (t == DType::kFloat64 && a.dtype() == DType::kFloat64) {
          for (int64_t i = 0; i < a.numel(); ++i) {
            const double x = a.data<double>()[i], y = b.data<double>()[i];
            ASSERT_TRUE(x == y || (std::isnan(x) && std::isnan(y))) << i << ": " << x << " vs " << y;
          }
        } else if (a.nbytes() > 0) {  // an empty tensor has no data pointer
          ASSERT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
        }
        std::vector<TensorType> types = {bound[0].type(), bound[1].type()};
        auto d = describe_compiled(g, types);
        ASSERT_TRUE(d.ok());
        EXPECT_NE(d->find("fast"), std::string::npos) << *d;
      }
}

// float32 <-> float16 / bfloat16 Cast (fast_cast.cpp: F16C where the CPU has it) equal to the
// reference conversion bit for bit: every float16 value widened; floats narrowed across
// float16's range, its subnormals, ties, overflow, zeros, infinities and NaN (NaN stays NaN);
// more values than one thread converts, so the parallel split is covered too.
TEST(FastCast, Float16AndBFloat16MatchTheReferenceBitForBit) {
  auto run_cast = [](const HostTensor& x, int64_t to, bool fast) {
    std::vector<HostTensor> bound;
    const Graph g = one_node_graph("Cast", {x}, {{"to", to}}, &bound);
    auto r = run_graph_on_host(g, bound, CompileOptions{fast});
    EXPECT_TRUE(r.ok() && (*r)[0].ok());
    return r.ok() && (*r)[0].ok() ? *(*r)[0] : HostTensor();
  };
  const auto& fast = cpu::KernelRegistry::global().find("Cast").front();
  ASSERT_EQ(fast.name, "fast");
  Node cast;
  cast.op = "Cast";
  cast.attrs.emplace("to", int64_t{10});
  EXPECT_TRUE(fast.accepts(cast, {{DType::kFloat32, {4}}}).ok());
  EXPECT_FALSE(fast.accepts(cast, {{DType::kFloat64, {4}}}).ok());  // left to the reference

  const int64_t n = 300000;
  HostTensor halves(DType::kFloat16, {n});
  for (int64_t i = 0; i < n; ++i) halves.mutable_data<uint16_t>()[i] = static_cast<uint16_t>(i * 40503u);
  for (int64_t i = 0; i < 65536; ++i) halves.mutable_data<uint16_t>()[i] = static_cast<uint16_t>(i);
  for (DType low : {DType::kFloat16, DType::kBFloat16}) {
    SCOPED_TRACE(low == DType::kFloat16 ? "float16" : "bfloat16");
    HostTensor in(low, {n});
    std::memcpy(in.mutable_data<uint16_t>(), halves.data<uint16_t>(), n * 2);
    const HostTensor a = run_cast(in, 1, true), b = run_cast(in, 1, false);
    ASSERT_EQ(a.numel(), n);
    ASSERT_EQ(b.numel(), n);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float x = a.data<float>()[i], y = b.data<float>()[i];
      if (!(std::isnan(x) && std::isnan(y)) && std::memcmp(&x, &y, 4) != 0) ++differ;
    }
    EXPECT_EQ(differ, 0);
  }
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> exponent(-30.0f, 18.0f);
  HostTensor floats(DType::kFloat32, {n});
  float* f = floats.mutable_data<float>();
  for (int64_t i = 0; i < n; ++i)
    f[i] = std::exp2(exponent(rng)) * ((i & 1) ? -1.0f : 1.0f) * (1.0f + (i % 1000) * 1e-3f);
  const float special[] = {0.0f, -0.0f, 65504.0f, 65520.0f, 70000.0f, 2049.0f, 2051.0f,
                           1.0f / 3, 5.9604645e-8f, 2.9802322e-8f, 6.1035156e-5f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(), 1.00048828125f,
                           1.001953125f, 3.14159265f};
  for (size_t k = 0; k < sizeof(special) / sizeof(special[0]); ++k) f[k] = special[k];
  for (int64_t to : {int64_t{10}, int64_t{16}}) {
    SCOPED_TRACE(to == 10 ? "to float16" : "to bfloat16");
    const HostTensor a = run_cast(floats, to, true), b = run_cast(floats, to, false);
    ASSERT_EQ(a.numel(), n);
    ASSERT_EQ(b.numel(), n);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t x = a.data<uint16_t>()[i], y = b.data<uint16_t>()[i];
      const float fx = to == 10 ? half_to_float(x) : bfloat16_to_float(x);
      const float fy = to == 10 ? half_to_float(y) : bfloat16_to_float(y);
      if (!(std::isnan(fx) && std::isnan(fy)) && x != y) ++differ;
    }
    EXPECT_EQ(differ, 0);
  }
}

// float64 MatMul and Gemm on the system BLAS (fast_dgemm.cpp) equal to the reference kernel
// (double accumulation both): batched with broadcasting, 1-D operands, enough rows to be
// split over the threads, Gemm's transposes, alpha, beta and every C broadcast; float32
// stays with oneDNN.
TEST(FastDgemm, MatMulAndGemmMatchTheReference) {
  std::mt19937 rng(7);
  auto f64 = [&](const Shape& s) {
    std::uniform_real_distribution<double> d(-1.0, 1.0);
    HostTensor t(DType::kFloat64, s);
    for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<double>()[i] = d(rng);
    return t;
  };
  expect_fast_matches_reference("MatMul", {f64({300, 70}), f64({70, 90})}, {}, "blas");
  expect_fast_matches_reference("MatMul", {f64({3, 1, 40, 50}), f64({5, 50, 20})}, {}, "blas");
  expect_fast_matches_reference("MatMul", {f64({50}), f64({4, 50, 20})}, {}, "blas");
  expect_fast_matches_reference("MatMul", {f64({4, 3, 50}), f64({50})}, {}, "blas");
  expect_fast_matches_reference("MatMul", {f64({50}), f64({50})}, {}, "blas");
  expect_fast_matches_reference("MatMul", {f64({7, 0}), f64({0, 5})}, {}, "blas");
  for (const Shape& cs : {Shape{}, Shape{30}, Shape{600, 1}, Shape{600, 30}}) {
    expect_fast_matches_reference("Gemm", {f64({600, 60}), f64({60, 30}), f64(cs)},
                                  {{"alpha", 0.5f}, {"beta", 2.0f}}, "blas");
  }
  expect_fast_matches_reference("Gemm", {f64({60, 900}), f64({30, 60})},
                                {{"transA", int64_t{1}}, {"transB", int64_t{1}}}, "blas");
  for (const auto& kd : cpu::KernelRegistry::global().find("MatMul"))
    if (kd.name == "blas")
      EXPECT_FALSE(kd.accepts(Node{}, {{DType::kFloat32, {2, 2}}, {DType::kFloat32, {2, 2}}}).ok());
}

}  // namespace
}  // namespace tensord::testing
