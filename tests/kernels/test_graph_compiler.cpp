// The cpu graph compiler (src/backends/cpu/onednn_region.cpp): which nodes become oneDNN
// regions, and that every fusion gives the reference kernels' results (fusion off).
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "engine/executor.h"
#include "tensord/client.h"
#include "tensord/graph.h"
#include "backends/cpu/direct_conv8.h"
#include "backends/cpu/elementwise_fusion.h"
#include "backends/cpu/onednn_region.h"
#include "backends/cpu/thread_pool.h"
#include "core/op_registry.h"

namespace tensord {
namespace {

HostTensor random(Shape shape, uint32_t seed, float lo = -1, float hi = 1) {
  HostTensor t(DType::kFloat32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = d(rng);
  return t;
}

struct G {
  Graph g;
  int counter = 0;
  std::string in(const std::string& name, Shape s) {
    g.inputs.push_back({name, {DType::kFloat32, s}});
    return name;
  }
  std::string constant(HostTensor t) {
    std::string name = "c" + std::to_string(counter++);
    g.initializers.emplace(name, std::move(t));
    return name;
  }
  std::string op(const std::string& type, std::vector<std::string> inputs, AttributeMap attrs = {}) {
    Node n;
    n.op = type;
    n.name = type + std::to_string(counter++);
    n.inputs = std::move(inputs);
    n.outputs = {n.name + "_out"};
    n.attrs = std::move(attrs);
    g.nodes.push_back(n);
    return n.outputs[0];
  }
  std::string conv(const std::string& x, int64_t cin, int64_t cout, int64_t k, int64_t stride = 1,
                   int64_t group = 1, bool bias = true) {
    std::vector<std::string> ins = {x, constant(random({cout, cin / group, k, k}, counter + 7, -0.5f, 0.5f))};
    if (bias) ins.push_back(constant(random({cout}, counter + 11)));
    const int64_t p = k / 2;
    return op("Conv", ins,
              {{"kernel_shape", std::vector<int64_t>{k, k}},
               {"strides", std::vector<int64_t>{stride, stride}},
               {"pads", std::vector<int64_t>{p, p, p, p}},
               {"group", group}});
  }
  std::string bn(const std::string& x, int64_t c) {
    return op("BatchNormalization",
              {x, constant(random({c}, counter + 1, 0.5f, 1.5f)), constant(random({c}, counter + 2)),
               constant(random({c}, counter + 3)), constant(random({c}, counter + 4, 0.5f, 2.0f))},
              {{"epsilon", 1e-5f}});
  }
  void out(const std::string& v) { g.outputs.push_back({v, {}}); }
};

// Runs with fusion on and off; every output must agree. Returns the compiled plan.
std::string check(const Graph& g, const std::vector<HostTensor>& inputs) {
  std::vector<TensorType> types;
  for (const auto& t : inputs) types.push_back(t.type());
  auto plan = describe_compiled(g, types, CompileOptions{true});
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  auto fused = run_graph_on_host(g, inputs, CompileOptions{true});
  auto ref = run_graph_on_host(g, inputs, CompileOptions{false});
  EXPECT_TRUE(fused.ok() && ref.ok());
  if (!fused.ok() || !ref.ok()) return "";
  EXPECT_EQ(fused->size(), ref->size());
  for (size_t o = 0; o < fused->size() && o < ref->size(); ++o) {
    EXPECT_TRUE((*fused)[o].ok()) << (*fused)[o].status().to_string();
    EXPECT_TRUE((*ref)[o].ok()) << (*ref)[o].status().to_string();
    if (!(*fused)[o].ok() || !(*ref)[o].ok()) continue;
    const HostTensor& a = *(*fused)[o];
    const HostTensor& b = *(*ref)[o];
    EXPECT_EQ(a.type(), b.type()) << "output " << o;
    if (a.type() != b.type()) continue;
    int64_t bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      const double x = a.data<float>()[i], y = b.data<float>()[i];
      const double d = std::fabs(x - y);
      worst = std::max(worst, d);
      if (std::isnan(x) && std::isnan(y)) continue;
      if (!(d <= 1e-4 + 1e-4 * std::fabs(y))) ++bad;
    }
    EXPECT_EQ(bad, 0) << "output " << o << ": " << bad << " of " << a.numel()
                      << " differ, worst " << worst << "\n" << *plan;
  }
  if (std::getenv("SHOW_PLAN")) std::cerr << *plan;
  return plan.ok() ? *plan : "";
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(GraphCompiler, ReshapesOfIntermediatesAreViewsOfTheirBytes) {
  // a = Relu(x) is read by a Reshape (a view of a's buffer) and later by an Add; the Flatten
  // the graph returns gets a buffer of its own.
  G b;
  auto x = b.in("x", {2, 6, 4});
  auto a = b.op("Relu", {x});
  auto r = b.op("Reshape", {a, b.constant(HostTensor::from_vector<int64_t>({12, 4}, {2}))});
  b.out(b.op("Softmax", {r}, {{"axis", int64_t{-1}}}));
  b.out(b.op("Add", {a, a}));
  b.out(b.op("Flatten", {x}));
  auto steps = [&](bool views) {
    if (!views) setenv("TENSORD_VIEWS", "0", 1);
    set_profiling(true);
    reset_profile_totals();
    check(b.g, {random({2, 6, 4}, 41)});
    std::set<std::string> names;
    for (const auto& row : profile_totals().rows) names.insert(row.step);
    set_profiling(false);
    unsetenv("TENSORD_VIEWS");
    return names;
  };
  auto on = steps(true);
  EXPECT_TRUE(on.count("Reshape [view]")) << ::testing::PrintToString(on);
  EXPECT_TRUE(on.count("Flatten [reference]")) << ::testing::PrintToString(on);
  auto off = steps(false);
  EXPECT_FALSE(off.count("Reshape [view]")) << ::testing::PrintToString(off);
}

TEST(GraphCompiler, ConvBatchNormReluIsOneRegionWithFoldedBn) {
  // The engine folded the BatchNormalization into the Conv's weights (bnfold): the region
  // holds the Conv and its Relu, one convolution with the Relu as a post-op.
  G b;
  auto x = b.in("x", {2, 8, 12, 12});
  auto y = b.op("Relu", {b.bn(b.conv(x, 8, 16, 3), 16)});
  b.out(y);
  const std::string plan = check(b.g, {random({2, 8, 12, 12}, 1)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
  EXPECT_NE(plan.find("2 nodes as"), std::string::npos) << plan;
  EXPECT_NE(plan.find("1 conv"), std::string::npos) << plan;
  EXPECT_NE(plan.find("1 fused post-ops"), std::string::npos) << plan;
}

TEST(GraphCompiler, ResidualBlockAccumulatesInPlace) {
  // ResNet basic block: relu(bn(conv(relu(bn(conv(x))))) + x), then a second block.
  G b;
  auto x = b.in("x", {1, 16, 10, 10});
  auto stem = b.op("Relu", {b.conv(x, 16, 16, 3)});
  auto h = b.op("Relu", {b.bn(b.conv(stem, 16, 16, 3), 16)});
  auto y = b.op("Relu", {b.op("Add", {b.bn(b.conv(h, 16, 16, 3), 16), stem})});
  auto y2 = b.op("Relu", {b.op("Add", {y, b.conv(y, 16, 16, 1)})});  // residual first
  b.out(y2);
  const std::string plan = check(b.g, {random({1, 16, 10, 10}, 2)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
  EXPECT_NE(plan.find("4 conv"), std::string::npos) << plan;
}

TEST(GraphCompiler, LargerBatchesOfPlainConvolutionsUseNChw16c) {
  // Batch 4, channels in multiples of 16 (the first layer's 3 may differ): nChw16c. The same
  // network at batch 1 keeps oneDNN's choice; both agree with the reference.
  for (int64_t batch : {4, 1}) {
    G b;
    auto x = b.in("x", {batch, 3, 12, 12});
    auto c1 = b.op("Relu", {b.bn(b.conv(x, 3, 16, 3, 2), 16)});
    auto y = b.op("Relu", {b.op("Add", {b.conv(b.op("Relu", {b.conv(c1, 16, 32, 3)}), 32, 16, 1), c1})});
    b.out(b.op("GlobalAveragePool", {y}));
    const std::string plan = check(b.g, {random({batch, 3, 12, 12}, 30)});
    // Where oneDNN's own choice is already blocked (AVX2: nChw8c), that choice at every batch.
    const bool blocked16 = batch == 4 && cpu::conv_native_layout() == "channels-last";
    EXPECT_NE(plan.find(blocked16 ? "nChw16c activations" : "oneDNN-chosen activations"),
              std::string::npos) << plan;
  }
}

TEST(GraphCompiler, ResidualStillNeededIsCopiedNotOverwritten) {
  G b;
  auto x = b.in("x", {1, 8, 6, 6});
  auto a = b.conv(x, 8, 8, 3);
  auto s = b.op("Add", {b.conv(a, 8, 8, 3), a});  // a is also used below
  auto t = b.op("Mul", {s, a});
  b.out(t);
  check(b.g, {random({1, 8, 6, 6}, 3)});
}

TEST(GraphCompiler, ConvWhoseInputIsItsOwnResidualIsNotAccumulatedInPlace) {
  // y = conv3x3(a) + a with a dead afterwards: the sum must not be accumulated into a's bytes
  // while the Conv still reads them (found by tests/engine/test_placement.cpp's network).
  G b;
  auto x = b.in("x", {1, 3, 8, 8});
  auto a = b.op("Relu", {b.conv(x, 3, 4, 3)});
  auto y = b.op("Sigmoid", {b.op("Add", {b.conv(a, 4, 4, 3, 1, 1, false), a})});
  b.out(y);
  const std::string plan = check(b.g, {random({1, 3, 8, 8}, 5)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
}

TEST(GraphCompiler, InvertedResidualWithDepthwiseAndRelu6) {
  // MobileNetV2 block: 1x1 expand, ReLU6, 3x3 depthwise, ReLU6, 1x1 project, + x.
  G b;
  auto x = b.in("x", {1, 16, 14, 14});
  auto lo = b.constant(HostTensor::scalar(0.0f));
  auto hi = b.constant(HostTensor::scalar(6.0f));
  auto e = b.op("Clip", {b.bn(b.conv(x, 16, 96, 1, 1, 1, false), 96), lo, hi});
  auto d = b.op("Clip", {b.bn(b.conv(e, 96, 96, 3, 1, 96, false), 96), lo, hi});
  auto p = b.bn(b.conv(d, 96, 16, 1, 1, 1, false), 16);
  auto y = b.op("Add", {x, p});
  auto g = b.op("GlobalAveragePool", {y});
  b.out(g);
  const std::string plan = check(b.g, {random({1, 16, 14, 14}, 4)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
  EXPECT_NE(plan.find("3 conv"), std::string::npos) << plan;
}

// A depthwise convolution with a channel multiplier (group = in channels, out = 2 x group):
// oneDNN 2.6's blocked depthwise kernels crashed on it inside a region (ONNX's
// test_Conv2d_depthwise_with_multiplier, SIGSEGV); it now runs on the per-node kernels and
// matches the reference, and a plain depthwise one still joins a region.
TEST(GraphCompiler, DepthwiseWithChannelMultiplierStaysOutOfRegions) {
  G b;
  auto x = b.in("x", {2, 4, 6, 6});
  auto y = b.op("Relu", {b.conv(x, 4, 8, 3, 1, 4, true)});
  b.out(y);
  check(b.g, {random({2, 4, 6, 6}, 11)});
  G d;
  auto x2 = d.in("x", {2, 4, 6, 6});
  d.out(d.op("Relu", {d.conv(x2, 4, 4, 3, 1, 4, true)}));
  const std::string plan = check(d.g, {random({2, 4, 6, 6}, 12)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
}

TEST(GraphCompiler, PoolingConcatBinaryAndActivations) {
  G b;
  auto x = b.in("x", {2, 4, 15, 15});
  auto c = b.conv(x, 4, 8, 3, 2);  // 8x8
  auto mp = b.op("MaxPool", {c}, {{"kernel_shape", std::vector<int64_t>{3, 3}},
                                  {"strides", std::vector<int64_t>{2, 2}},
                                  {"ceil_mode", int64_t{1}}});
  auto ap = b.op("AveragePool", {c}, {{"kernel_shape", std::vector<int64_t>{2, 2}},
                                      {"strides", std::vector<int64_t>{2, 2}},
                                      {"pads", std::vector<int64_t>{0, 0, 1, 1}}});
  auto cat = b.op("Concat", {mp, b.op("Sigmoid", {ap})}, {{"axis", int64_t{1}}});
  auto scale = b.constant(random({1, 16, 1, 1}, 9));
  auto mul = b.op("Mul", {scale, cat});  // broadcast operand first
  auto hs = b.op("HardSwish", {b.op("HardSigmoid", {mul})});
  auto lr = b.op("LeakyRelu", {b.conv(hs, 16, 8, 3)}, {{"alpha", 0.2f}});
  auto gm = b.op("GlobalMaxPool", {lr});
  b.out(gm);
  b.out(cat);  // used inside and outside the region
  const std::string plan = check(b.g, {random({2, 4, 15, 15}, 5)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
}

TEST(GraphCompiler, OutsideNodeBetweenRegionNodesDoesNotMakeACycle) {
  // conv -> Softmax (not in regions, axis 1 over 4-D) -> Add with conv output -> conv.
  G b;
  auto x = b.in("x", {1, 4, 6, 6});
  auto c = b.conv(x, 4, 4, 3);
  auto sm = b.op("Softmax", {c}, {{"axis", int64_t{1}}});
  auto s = b.op("Add", {c, sm});
  auto y = b.conv(s, 4, 4, 3);
  b.out(y);
  const std::string plan = check(b.g, {random({1, 4, 6, 6}, 6)});
  EXPECT_NE(plan.find("Softmax"), std::string::npos) << plan;
}

// a1 = Relu(x), b1 = Neg(x), X = Softmax(a1), b2 = Add(b1, X), a2 = Exp(b1), y = Add(a2, b2):
// groups {a1, a2} and {b1, b2} each look acyclic but close A -> X -> B -> A together.
std::vector<Node> two_key_graph() {
  auto node = [](const char* op, std::vector<std::string> in, const char* out) {
    Node n;
    n.op = op;
    n.name = out;
    n.inputs = std::move(in);
    n.outputs = {out};
    return n;
  };
  return {node("Relu", {"x"}, "a1"), node("Neg", {"x"}, "b1"),    node("Softmax", {"a1"}, "X"),
          node("Add", {"b1", "X"}, "b2"), node("Exp", {"b1"}, "a2"), node("Add", {"a2", "b2"}, "y")};
}

// partition_graph contracts each group into one step: no group may then depend on itself.
// Here group B comes to depend on group A (b2 reads X, made from a1) only after b1, an earlier
// member of B, was made; a2 (key A) reading b1 must start a new group, or A -> X -> B -> A.
// (A transformer's training step hit this as "cyclic region": the check followed values, not
// groups, so b1 looked independent of A.)
TEST(GraphCompiler, PartitionNeverContractsIntoACycle) {
  const std::vector<Node> nodes = two_key_graph();
  FusionGraph g;
  for (const Node& n : nodes) g.nodes.push_back(&n);
  g.constant = [](const std::string&) -> const HostTensor* { return nullptr; };
  g.is_graph_output = [](const std::string& v) { return v == "y"; };
  auto key = [&](size_t i, const std::vector<int>&) -> std::string {
    const std::string& op = g.nodes[i]->op;
    if (op == "Relu" || op == "Exp") return "A";
    if (op == "Neg" || op == "Add") return "B";
    return "";
  };
  const std::vector<Region> regions = partition_graph(g, key);
  // Contracted, the regions must leave the graph acyclic.
  std::vector<std::vector<size_t>> members;
  for (const Region& r : regions) members.push_back(r.members);
  EXPECT_TRUE(groups_closing_cycles(g, members).empty()) << "the contracted regions form a cycle";
  // a1 and a2 are in different groups.
  int ga1 = -1, ga2 = -1;
  for (size_t r = 0; r < regions.size(); ++r)
    for (size_t m : regions[r].members) {
      if (m == 0) ga1 = static_cast<int>(r);
      if (m == 4) ga2 = static_cast<int>(r);
    }
  EXPECT_NE(ga1, ga2);
}

// FusionGraph::epilogue_of, the epilogue every backend reads: each step's kind, nodes and
// operand form along a Conv's chain (a channel bias, a swish, a residual given first, an
// activation with constant operands, a scalar scale), the chain ending at a shape change; and
// where it must stop: a value read twice, a graph output, a node placed elsewhere, a read
// inside a Loop body, a node of another domain; nothing for a node that is no contraction.
TEST(FusionGraph, EpilogueOfAContractionTagsEachStep) {
  auto node = [](std::string op, std::vector<std::string> in, std::string out) {
    Node n;
    n.op = op;
    n.name = out;
    n.inputs = std::move(in);
    n.outputs = {std::move(out)};
    return n;
  };
  const Shape ys = {2, 8, 5, 5};
  std::map<std::string, TensorType> types = {
      {"c", {DType::kFloat32, ys}},      {"bias", {DType::kFloat32, {1, 8, 1, 1}}},
      {"a", {DType::kFloat32, ys}},      {"s", {DType::kFloat32, ys}},
      {"sw", {DType::kFloat32, ys}},     {"r", {DType::kFloat32, ys}},
      {"res", {DType::kFloat32, ys}},    {"lo", {DType::kFloat32, {}}},
      {"y1", {DType::kFloat32, ys}},     {"k", {DType::kFloat32, {1}}},
      {"y2", {DType::kFloat32, ys}},     {"flat", {DType::kFloat32, {2, 200}}},
      {"shape", {DType::kInt64, {2}}},   {"w_bias", {DType::kFloat32, {8}}}};
  std::map<std::string, HostTensor> constants = {
      {"bias", random({1, 8, 1, 1}, 1)}, {"lo", random({}, 2)}, {"k", random({1}, 3)},
      {"w_bias", random({8}, 4)}};
  const std::vector<Node> chain = {
      node("Conv", {"x", "w"}, "c"),         node("Add", {"c", "bias"}, "a"),
      node("Sigmoid", {"a"}, "s"),           node("Mul", {"a", "s"}, "sw"),
      node("Add", {"r", "sw"}, "res"),       node("Clip", {"res", "lo"}, "y1"),
      node("Mul", {"y1", "k"}, "y2"),        node("Reshape", {"y2", "shape"}, "flat")};
  std::set<std::string> outputs = {"flat"};
  std::vector<bool> placed;
  auto graph = [&](const std::vector<Node>& nodes) {
    FusionGraph g;
    for (const Node& n : nodes) g.nodes.push_back(&n);
    g.placed_here = placed;
    g.type_of = [&](const std::string& v) -> const TensorType* {
      auto it = types.find(v);
      return it == types.end() ? nullptr : &it->second;
    };
    g.constant = [&](const std::string& v) -> const HostTensor* {
      auto it = constants.find(v);
      return it == constants.end() ? nullptr : &it->second;
    };
    g.is_graph_output = [&](const std::string& v) { return outputs.count(v) > 0; };
    return g;
  };
  using K = EpilogueStep::Kind;
  using F = EpilogueStep::Operand;
  {
    const FusionGraph g = graph(chain);
    const std::vector<EpilogueStep> e = g.epilogue_of(0);
    ASSERT_EQ(e.size(), 5u);
    EXPECT_EQ(e[0].kind, K::kBinary);
    EXPECT_EQ(e[0].form, F::kChannel);
    EXPECT_TRUE(e[0].operand_constant);
    EXPECT_EQ(e[0].operand, "bias");
    EXPECT_FALSE(e[0].operand_first);
    EXPECT_EQ(e[1].kind, K::kSwish);
    EXPECT_EQ(e[1].nodes, (std::vector<size_t>{2, 3}));
    EXPECT_EQ(e[1].input, "a");
    EXPECT_EQ(e[1].output, "sw");
    EXPECT_EQ(e[2].kind, K::kBinary);
    EXPECT_EQ(e[2].form, F::kSameShape);
    EXPECT_FALSE(e[2].operand_constant);
    EXPECT_TRUE(e[2].operand_first);
    EXPECT_EQ(e[3].kind, K::kActivation);
    EXPECT_EQ(e[3].node->op, "Clip");
    EXPECT_EQ(e[4].form, F::kScalar);
    EXPECT_EQ(e[4].output, "y2");
    EXPECT_TRUE(g.epilogue_of(1).empty()) << "an Add is no contraction";
    EXPECT_TRUE(g.epilogue_of(99).empty());
  }
  {  // A graph output ends the chain at it.
    outputs = {"sw", "flat"};
    EXPECT_EQ(graph(chain).epilogue_of(0).size(), 2u);
    outputs = {"flat"};
  }
  {  // Read twice: the bias Add's result also read by another node.
    std::vector<Node> nodes = chain;
    nodes.push_back(node("Neg", {"res"}, "other"));
    EXPECT_EQ(graph(nodes).epilogue_of(0).size(), 3u);
  }
  {  // Placed elsewhere: the Clip runs on another device.
    placed = {true, true, true, true, true, false, true, true};
    EXPECT_EQ(graph(chain).epilogue_of(0).size(), 3u);
    placed.clear();
  }
  {  // Read inside a Loop body (an implicit input of the Loop): the swish's value.
    auto body = std::make_shared<Graph>();
    body->nodes = {node("Identity", {"sw"}, "inner")};
    std::vector<Node> nodes = chain;
    Node loop = node("Loop", {"", ""}, "z");
    loop.attrs = {{"body", Attribute(std::shared_ptr<const Graph>(body))}};
    nodes.push_back(loop);
    EXPECT_EQ(graph(nodes).epilogue_of(0).size(), 2u);
  }
  {  // Another domain's op is no step.
    std::vector<Node> nodes = chain;
    nodes[5].domain = "com.example";
    EXPECT_EQ(graph(nodes).epilogue_of(0).size(), 3u);
  }
  {  // A MatMul's channel is its last axis: [8] is a bias of a [4, 8] product, [4, 1] is not.
    types["p"] = {DType::kFloat32, {4, 8}};
    types["pb"] = {DType::kFloat32, {4, 8}};
    types["col"] = {DType::kFloat32, {4, 1}};
    types["pc"] = {DType::kFloat32, {4, 8}};
    const std::vector<Node> mm = {node("MatMul", {"x", "w"}, "p"),
                                  node("Add", {"w_bias", "p"}, "pb"),
                                  node("Mul", {"pb", "col"}, "pc")};
    outputs = {"pc"};
    const std::vector<EpilogueStep> e = graph(mm).epilogue_of(0);
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0].form, F::kChannel);
    EXPECT_TRUE(e[0].operand_first);
    EXPECT_EQ(e[1].form, F::kOther);
    EXPECT_FALSE(e[1].operand_constant);
  }
}

// Groups that are each acyclic can close a cycle together (two partitioners' groups, or two
// devices'): A = {a1, a2} and B = {b1, b2} with A -> X -> B (b2 reads X, made from a1) and
// B -> A (a2 reads b1). The executor gives the last stuck group back to its nodes.
TEST(GraphCompiler, GroupsThatTogetherCloseACycleAreFound) {
  const std::vector<Node> nodes = two_key_graph();
  FusionGraph g;
  for (const Node& n : nodes) g.nodes.push_back(&n);
  EXPECT_EQ(groups_closing_cycles(g, {{0, 4}, {1, 3}}), (std::vector<size_t>{1}));
  EXPECT_EQ(groups_closing_cycles(g, {{1, 3}, {0, 4}}), (std::vector<size_t>{1}));
  EXPECT_TRUE(groups_closing_cycles(g, {{0, 4}}).empty());
  EXPECT_TRUE(groups_closing_cycles(g, {{0, 2}, {1, 3}, {4, 5}}).empty());
  EXPECT_TRUE(groups_closing_cycles(g, {}).empty());
  // A cycle through a node outside every group: {a1, y} reads b2, which reads X (from a1).
  EXPECT_EQ(groups_closing_cycles(g, {{0, 5}}), (std::vector<size_t>{0}));
}

TEST(GraphCompiler, NoRegionWithoutConvOrForOtherTypes) {
  G b;
  auto x = b.in("x", {1, 4, 6, 6});
  b.out(b.op("Relu", {b.op("Add", {x, x})}));
  std::string plan = check(b.g, {random({1, 4, 6, 6}, 7)});
  EXPECT_EQ(plan.find("OneDnnRegion"), std::string::npos) << plan;

  // Runtime weights (a graph input, not a constant) keep the per-node kernels.
  G w;
  auto xi = w.in("x", {1, 4, 6, 6});
  auto wi = w.in("w", {4, 4, 3, 3});
  w.out(w.op("Conv", {xi, wi}, {{"kernel_shape", std::vector<int64_t>{3, 3}}}));
  plan = check(w.g, {random({1, 4, 6, 6}, 8), random({4, 4, 3, 3}, 9)});
  EXPECT_EQ(plan.find("OneDnnRegion"), std::string::npos) << plan;
}

TEST(GraphCompiler, FusionOffUsesReferenceKernelsOnly) {
  G b;
  auto x = b.in("x", {1, 4, 6, 6});
  b.out(b.op("Relu", {b.conv(x, 4, 4, 3)}));
  auto plan = describe_compiled(b.g, {{DType::kFloat32, {1, 4, 6, 6}}}, CompileOptions{false});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->find("OneDnnRegion"), std::string::npos) << *plan;
  EXPECT_NE(plan->find("Conv 'Conv"), std::string::npos) << *plan;
  EXPECT_NE(plan->find("[reference]"), std::string::npos) << *plan;
}

TEST(GraphCompiler, ClassifierHeadIsAnInnerProductOnTheBlockedTensor) {
  // conv -> GlobalAveragePool -> Flatten -> Gemm(transB=1, bias) and MatMul(B constant);
  // the flattened value is also a graph output (materialised in plain layout).
  G b;
  auto x = b.in("x", {2, 8, 9, 9});
  auto pooled = b.op("GlobalAveragePool", {b.op("Relu", {b.conv(x, 8, 32, 3)})});
  auto flat = b.op("Flatten", {pooled}, {{"axis", int64_t{1}}});
  auto logits = b.op("Gemm", {flat, b.constant(random({10, 32}, 21)), b.constant(random({10}, 22))},
                     {{"transB", int64_t{1}}});
  auto proj = b.op("MatMul", {flat, b.constant(random({32, 5}, 23))});
  b.out(logits);
  b.out(proj);
  b.out(flat);
  const std::string plan = check(b.g, {random({2, 8, 9, 9}, 20)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
  EXPECT_NE(plan.find("2 inner_product"), std::string::npos) << plan;
  EXPECT_EQ(plan.find("Gemm '"), std::string::npos) << plan;
}

TEST(GraphCompiler, ElementwiseChainIsOneProgram) {
  // A chain of ten element-wise ops with scalars, a runtime one-element input, an
  // intermediate that is also a graph output, and every supported activation.
  G b;
  auto x = b.in("x", {3, 1000});
  auto y = b.in("y", {3, 1000});
  auto k = b.in("k", {1});
  auto half = b.constant(HostTensor::scalar(0.5f));
  auto lo = b.constant(HostTensor::scalar(-0.25f));
  auto hi = b.constant(HostTensor::scalar(0.75f));
  auto v = b.op("Add", {x, y});
  v = b.op("Mul", {v, half});
  auto mid = b.op("Tanh", {v});
  v = b.op("Sub", {mid, k});
  v = b.op("Div", {v, b.op("Add", {b.op("Abs", {y}), b.constant(HostTensor::scalar(1.0f))})});
  v = b.op("Max", {v, b.op("Neg", {x})});
  v = b.op("Min", {v, b.op("Sigmoid", {y})});
  v = b.op("Clip", {v, lo, hi});
  v = b.op("LeakyRelu", {v}, {{"alpha", 0.1f}});
  v = b.op("Elu", {b.op("HardSigmoid", {b.op("HardSwish", {v})})});
  v = b.op("Relu", {b.op("Softplus", {b.op("Exp", {b.op("Sqrt", {b.op("Abs", {v})})})})});
  b.out(v);
  b.out(mid);
  const std::string plan = check(b.g, {random({3, 1000}, 10, -3, 3), random({3, 1000}, 11, -3, 3),
                                       random({1}, 12)});
  EXPECT_EQ(count(plan, "ElementwiseProgram"), 1) << plan;
  EXPECT_NE(plan.find("2 outputs"), std::string::npos) << plan;
  EXPECT_EQ(count(plan, "[reference]"), 0) << plan;
}

TEST(GraphCompiler, ElementwiseProgramSplitsAroundOtherOpsAndShapes) {
  // A broadcast along a trailing axis (a column) joins the program; a Softmax in the middle
  // keeps its own kernel; a large tensor runs across threads; NaN stays NaN through
  // Max/Min/Relu/Clip.
  G b;
  auto x = b.in("x", {4, 70000});
  auto col = b.in("col", {4, 1});
  auto lo = b.constant(HostTensor::scalar(0.0f));
  auto v = b.op("Relu", {b.op("Mul", {x, x})});
  auto w = b.op("Add", {v, col});  // [4, 1]: a broadcast operand of the program
  auto s = b.op("Softmax", {w}, {{"axis", int64_t{1}}});
  auto z = b.op("Clip", {b.op("Max", {s, b.op("Min", {x, lo})}), lo});
  b.out(z);
  HostTensor xs = random({4, 70000}, 13, -2, 2);
  xs.mutable_data<float>()[5] = std::nanf("");
  const std::string plan = check(b.g, {xs, random({4, 1}, 14)});
  EXPECT_EQ(count(plan, "ElementwiseProgram"), 2) << plan;
  EXPECT_EQ(plan.find("Add '"), std::string::npos) << plan;
  EXPECT_NE(plan.find("Softmax '"), std::string::npos) << plan;
  auto out = run_graph_on_host(b.g, {xs, random({4, 1}, 14)});
  ASSERT_TRUE(out.ok() && (*out)[0].ok());
  EXPECT_TRUE(std::isnan((*(*out)[0]).data<float>()[5]));
}

TEST(GraphCompiler, LeadingAxesBroadcastsJoinTheProgram) {
  // A bias (constant [N] and [1, N]), a runtime [T, N] input broadcast over the batch, then
  // the erf form of GELU: MatMul's epilogue in a transformer, as one program. Lengths that are
  // not multiples of the 512-value block make the repeats straddle blocks.
  G b;
  auto x = b.in("x", {3, 7, 37});
  auto pos = b.in("pos", {7, 37});
  auto bias = b.constant(random({37}, 21));
  auto bias2 = b.constant(random({1, 37}, 22));
  auto v = b.op("Add", {bias, x});  // the broadcast operand first
  v = b.op("Add", {v, pos});
  v = b.op("Mul", {v, bias2});
  auto gelu = b.op("Mul", {b.op("Mul", {v, b.op("Add", {b.op("Erf", {b.op("Div", {v, b.constant(HostTensor::scalar(1.4142135f))})}), b.constant(HostTensor::scalar(1.0f))})}), b.constant(HostTensor::scalar(0.5f))});
  b.out(gelu);
  const std::string plan = check(b.g, {random({3, 7, 37}, 23, -3, 3), random({7, 37}, 24)});
  EXPECT_EQ(count(plan, "ElementwiseProgram"), 1) << plan;
  EXPECT_EQ(count(plan, "[reference]"), 0) << plan;
}


TEST(GraphCompiler, AnyNumpyBroadcastJoinsTheProgram) {
  // An attention mask [B, 1, 1, T] onto scores [B, h, T, T] (a BERT encoder's), a per-head
  // constant [h, 1, 1] and a column [T, 1]: broadcasts along inner and middle axes, read
  // through strides, with blocks of 512 values that end mid-row.
  G b;
  auto scores = b.in("scores", {2, 3, 19, 19});
  auto mask = b.in("mask", {2, 1, 1, 19});
  auto col = b.in("col", {19, 1});
  auto head = b.constant(random({3, 1, 1}, 61));
  auto v = b.op("Add", {scores, mask});
  v = b.op("Mul", {head, v});
  v = b.op("Sub", {v, col});
  b.out(b.op("Relu", {v}));
  const std::string plan = check(b.g, {random({2, 3, 19, 19}, 62, -3, 3),
                                       random({2, 1, 1, 19}, 63), random({19, 1}, 64)});
  EXPECT_EQ(count(plan, "ElementwiseProgram"), 1) << plan;
  EXPECT_EQ(count(plan, "[reference]"), 0) << plan;
}

TEST(GraphCompiler, ComparisonsAndWhereJoinTheProgram) {
  // Relu's gradient as td.grad writes it, Where(Greater(x, 0), dy, 0), beside a LeakyRelu
  // gradient and every comparison; a comparison read outside the program (the Cast) is stored
  // as bool; a bool input of the program's size is its condition; NaN compares false.
  G b;
  auto x = b.in("x", {3, 1000});
  auto dy = b.in("dy", {3, 1000});
  const std::string m = "m";
  b.g.inputs.push_back({m, {DType::kBool, {3, 1000}}});
  auto zero = b.constant(HostTensor::scalar(0.0f));
  auto pos = b.op("Greater", {x, zero});
  auto g = b.op("Where", {pos, dy, zero});
  g = b.op("Add", {g, b.op("Where", {pos, dy, b.op("Mul", {dy, b.constant(HostTensor::scalar(0.01f))})})});
  for (const char* cmp : {"Less", "GreaterOrEqual", "LessOrEqual", "Equal"})
    g = b.op("Add", {g, b.op("Where", {b.op(cmp, {x, dy}), x, dy})});
  g = b.op("Where", {m, g, b.op("Neg", {g})});
  b.out(g);
  b.out(b.op("Cast", {pos}, {{"to", int64_t{1}}}));
  HostTensor xs = random({3, 1000}, 71, -2, 2), ds = random({3, 1000}, 72, -2, 2);
  xs.mutable_data<float>()[7] = std::nanf("");
  xs.mutable_data<float>()[8] = ds.data<float>()[8];  // Equal, LessOrEqual, GreaterOrEqual hold
  HostTensor ms(DType::kBool, {3, 1000});
  for (int64_t i = 0; i < ms.numel(); ++i) ms.mutable_data<bool>()[i] = i % 3 == 0;
  const std::string plan = check(b.g, {xs, ds, ms});
  EXPECT_EQ(count(plan, "ElementwiseProgram"), 1) << plan;
  EXPECT_EQ(count(plan, "[reference]"), 1) << plan;  // the Cast
  EXPECT_EQ(plan.find("Where '"), std::string::npos) << plan;
}

// The number `n` in "... n <kind>, ..." of a region's description (0 when absent).
int primitives(const std::string& plan, const std::string& kind) {
  int total = 0;
  const std::string key = " " + kind;
  for (size_t p = plan.find(key); p != std::string::npos; p = plan.find(key, p + 1)) {
    const char after = p + key.size() < plan.size() ? plan[p + key.size()] : ' ';
    if (after != ',' && after != ')') continue;
    size_t b = p;
    while (b > 0 && std::isdigit(static_cast<unsigned char>(plan[b - 1]))) --b;
    if (b < p) total += std::stoi(plan.substr(b, p - b));
  }
  return total;
}

// Whether a plan's convolutions run on oneDNN's JIT direct kernels (a CPU below AVX2, or
// ONEDNN_MAX_CPU_ISA lowered, leaves them on its gemm kernel; the forms chosen around them,
// the layouts tensord's loops take, then differ, while results must not).
bool jit_convs(const std::string& plan) { return plan.find("on oneDNN's gemm kernel") == std::string::npos; }

// RegNetY block: 1x1 conv, grouped 3x3 conv (groups of 8 channels), squeeze-excitation
// (GlobalAveragePool -> 1x1 conv -> ReLU -> 1x1 conv -> Sigmoid -> Mul broadcast), 1x1 conv,
// residual Add. One region; the activations stay in one layout: no reorder between blocks (oneDNN's own choice for the grouped conv, nChw8c, needed one in
// and out of every block and sent the SE Mul to oneDNN's reference binary kernel).
TEST(GraphCompiler, GroupedConvAndSqueezeExcitationStayInOneLayout) {
  G b;
  auto x = b.in("x", {1, 64, 14, 14});
  auto a = b.op("Relu", {b.bn(b.conv(x, 64, 64, 1, 1, 1, false), 64)});
  auto gc = b.op("Relu", {b.bn(b.conv(a, 64, 64, 3, 1, 8, false), 64)});
  auto se = b.op("GlobalAveragePool", {gc});
  se = b.op("Relu", {b.conv(se, 64, 16, 1)});
  se = b.op("Sigmoid", {b.conv(se, 16, 64, 1)});
  auto m = b.op("Mul", {gc, se});
  auto p = b.bn(b.conv(m, 64, 64, 1, 1, 1, false), 64);
  auto y = b.op("Relu", {b.op("Add", {x, p})});
  // A second block, so a layout change between blocks would show as reorders.
  auto gc2 = b.op("Relu", {b.conv(y, 64, 64, 3, 2, 8)});
  auto se2 = b.op("Sigmoid", {b.conv(b.op("GlobalAveragePool", {gc2}), 64, 64, 1)});
  b.out(b.op("Mul", {se2, gc2}));  // broadcast operand first
  const std::string plan = check(b.g, {random({1, 64, 14, 14}, 21)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
  EXPECT_EQ(primitives(plan, "conv"), 7) << plan;
  EXPECT_EQ(primitives(plan, "binary"), 2) << plan;
  // Reorders: the input into the region's layout, the output out of it, and the copy of the
  // input the residual Add accumulates into (a region input is never written).
  EXPECT_LE(primitives(plan, "reorder"), 3) << plan;
}

// ResNeXt's first stage: grouped 3x3 convolutions with 4 channels per group (BatchNorm and
// ReLU after), a strided one with 2 per group and channels that are not a multiple of 8, and
// one with 4 per group whose Sigmoid is not fused. Where oneDNN has only its gemm (or
// reference) implementation for such groups (AVX2: its direct kernels need 8 channels per
// group), tensord's own kernel runs them in the region (SmallGroupConv, "grouped conv");
// the reference kernels' results either way, and no reference primitive.
TEST(GraphCompiler, NarrowGroupsRunOnTheirOwnKernelInTheRegion) {
  G b;
  auto x = b.in("x", {2, 64, 15, 13});
  auto a = b.op("Relu", {b.bn(b.conv(x, 64, 128, 1, 1, 1, false), 128)});
  auto gc = b.op("Relu", {b.bn(b.conv(a, 128, 128, 3, 1, 32, false), 128)});
  auto y = b.op("Relu", {b.op("Add", {x, b.bn(b.conv(gc, 128, 64, 1, 1, 1, false), 64)})});
  auto n = b.op("Relu", {b.conv(y, 64, 12, 1)});
  auto g2 = b.conv(n, 12, 12, 3, 2, 6);              // 2 per group, stride 2, 12 channels
  auto g4 = b.op("Sigmoid", {b.conv(g2, 12, 12, 3, 1, 3)});  // 4 per group, 12 channels
  b.out(b.op("GlobalAveragePool", {g4}));
  b.out(g2);
  const std::string plan = check(b.g, {random({2, 64, 15, 13}, 400)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
  EXPECT_EQ(count(plan, "oneDNN reference primitive"), 0) << plan;
  EXPECT_EQ(primitives(plan, "conv") + primitives(plan, "grouped conv"), 6) << plan;
  if (cpu::conv_native_layout() == "nChw8c") {  // AVX2: oneDNN's gemm for all three
    EXPECT_EQ(primitives(plan, "grouped conv"), 3) << plan;
  }
}

// Conv1d / MaxPool1d / AveragePool1d / BatchNorm / broadcast Add on [N, C, L] values run in a
// region (as [N, C, 1, L]) with the reference kernels' results.
TEST(GraphCompiler, OneDimensionalConvolutionsAndPoolingRunInARegion) {
  G b;
  auto x = b.in("x", {2, 3, 101});
  auto conv1d = [&](const std::string& in, int64_t cin, int64_t cout, int64_t k, int64_t stride,
                    int64_t pad, int64_t dil) {
    return b.op("Conv",
                {in, b.constant(random({cout, cin, k}, b.counter + 3, -0.5f, 0.5f)),
                 b.constant(random({cout}, b.counter + 5))},
                {{"kernel_shape", std::vector<int64_t>{k}},
                 {"strides", std::vector<int64_t>{stride}},
                 {"dilations", std::vector<int64_t>{dil}},
                 {"pads", std::vector<int64_t>{pad, pad}}});
  };
  auto c1 = b.op("Relu", {conv1d(x, 3, 16, 7, 2, 3, 1)});  // [2, 16, 51]
  auto mp = b.op("MaxPool", {c1}, {{"kernel_shape", std::vector<int64_t>{2}},
                                   {"strides", std::vector<int64_t>{2}},
                                   {"ceil_mode", int64_t{1}}});  // [2, 16, 26]
  auto c2 = b.op("Relu", {b.bn(conv1d(mp, 16, 16, 3, 1, 2, 2), 16)});
  auto bias = b.constant(random({16, 1}, 31));
  auto s = b.op("Add", {c2, bias});
  auto ap = b.op("AveragePool", {s}, {{"kernel_shape", std::vector<int64_t>{3}},
                                      {"strides", std::vector<int64_t>{1}},
                                      {"pads", std::vector<int64_t>{1, 1}}});
  auto gp = b.op("GlobalAveragePool", {ap});  // [2, 16, 1]
  b.out(gp);
  b.out(c1);
  const std::string plan = check(b.g, {random({2, 3, 101}, 22)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
  EXPECT_EQ(primitives(plan, "conv"), 2) << plan;
  EXPECT_EQ(primitives(plan, "pool"), 3) << plan;
  EXPECT_EQ(plan.find("[reference]"), std::string::npos) << plan;
}

// A TCN residual block: dilated Conv1d -> ReLU -> + residual -> ReLU. Where no fast kernel
// takes that whole post-op chain (AVX2's direct kernels lack ReLU + sum + ReLU; oneDNN then
// offers only ref:any, 50 ms a call), the chain is shortened and the rest runs as primitives
// of their own: no region holds a reference primitive, on any CPU.
TEST(GraphCompiler, PostOpChainsNoFastKernelTakesAreShortened) {
  G b;
  auto x = b.in("x", {4, 32, 200});
  std::string h = x;
  for (int64_t dil : {1, 2, 4, 8}) {
    auto c = b.op("Conv",
                  {h, b.constant(random({32, 32, 3}, 300 + dil, -0.2f, 0.2f)),
                   b.constant(random({32}, 310 + dil))},
                  {{"kernel_shape", std::vector<int64_t>{3}},
                   {"dilations", std::vector<int64_t>{dil}},
                   {"pads", std::vector<int64_t>{dil, dil}}});
    h = b.op("Relu", {b.op("Add", {b.op("Relu", {c}), h})});
  }
  b.out(h);
  const std::string plan = check(b.g, {random({4, 32, 200}, 320)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
  EXPECT_EQ(primitives(plan, "conv") + primitives(plan, "phase conv"), 4) << plan;
  EXPECT_EQ(count(plan, "oneDNN reference primitive"), 0) << plan;
}

// Dilated Conv1d where oneDNN's direct kernels take no dilation (AVX2: its gemm kernel ran
// them at half the undilated speed) run undilated over the input's phases: from a dilation of
// 8, a k x 1 convolution of the input viewed as [N, C, W / d, d] (no byte moved, so no reorder
// added); below it, with the phases as the batch ([N * d, C, 1, W / d], a "phase reorder" in
// and out).
// A width not a multiple of the dilation keeps the dilated form; a depthwise one has its own
// kernel. Every case: the reference kernels' results.
TEST(GraphCompiler, DilatedConv1dRunsUndilatedOverItsPhases) {
  struct Case {
    int64_t width, dil, pad_l, pad_r, group, out;
  };
  for (const Case& c : {Case{96, 4, 8, 0, 1, 32}, Case{96, 2, 2, 2, 1, 32},
                        Case{90, 4, 4, 4, 1, 32}, Case{96, 8, 16, 0, 1, 16},
                        Case{96, 4, 4, 4, 1, 16}, Case{96, 3, 3, 3, 16, 16}}) {
    SCOPED_TRACE("width " + std::to_string(c.width) + " dilation " + std::to_string(c.dil) +
                 " group " + std::to_string(c.group));
    G b;
    auto x = b.in("x", {2, 16, c.width});
    auto h = b.op("Relu", {b.op("Conv",
                                {x, b.constant(random({16, 16, 1}, 401, -0.3f, 0.3f))},
                                {{"kernel_shape", std::vector<int64_t>{1}}})});
    auto conv = b.op("Conv",
                     {h, b.constant(random({c.out, 16 / c.group, 3}, 402, -0.3f, 0.3f)),
                      b.constant(random({c.out}, 403))},
                     {{"kernel_shape", std::vector<int64_t>{3}},
                      {"dilations", std::vector<int64_t>{c.dil}},
                      {"group", c.group},
                      {"pads", std::vector<int64_t>{c.pad_l, c.pad_r}}});
    // With 16 outputs, a residual Add after it (a sum post-op into the result's bytes).
    b.out(b.op("Relu", {c.out == 16 && c.group == 1 ? b.op("Add", {conv, h}) : conv}));
    const std::string plan = check(b.g, {random({2, 16, c.width}, 404)});
    EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
    EXPECT_EQ(primitives(plan, "conv") + primitives(plan, "phase conv"), 2) << plan;
    EXPECT_EQ(count(plan, "oneDNN reference primitive"), 0) << plan;
    const bool fits = c.width % c.dil == 0 && c.pad_l % c.dil == 0 && c.pad_r % c.dil == 0;
    if (!fits) {
      EXPECT_EQ(primitives(plan, "phase conv"), 0) << plan;
    }
    // Where oneDNN's convolutions are nChw8c (AVX2), its dilated plain convolution is its gemm
    // kernel: the phase form must be taken.
    // Where it fits, no convolution is left on oneDNN's gemm kernel (on AVX2 its direct kernel
    // takes a dilation of 2, not 4 or 8).
    if (fits) {
      EXPECT_EQ(count(plan, "gemm kernel"), 0) << plan;
    }
    // The views move no bytes: no more reorders than the dilated form has.
    setenv("TENSORD_NO_PHASE_CONV", "1", 1);
    const std::string dilated = check(b.g, {random({2, 16, c.width}, 404)});
    unsetenv("TENSORD_NO_PHASE_CONV");
    EXPECT_EQ(primitives(dilated, "phase conv"), 0) << dilated;
    EXPECT_LE(primitives(plan, "reorder"), primitives(dilated, "reorder")) << plan << dilated;
  }
}

// DenseNet: Concat of everything before, then BN+ReLU before a 1x1 and a 3x3 conv; a
// transition of BN+ReLU, 1x1 conv, Pad of nothing and AveragePool. One region: the
// BatchNormalizations that no Conv produces run as fused scale-shift(+ReLU) primitives, the
// Concats on the blocked tensors, the Pad as the same bytes; reference kernels' results.
TEST(GraphCompiler, DenseBlockWithBatchNormBeforeConvAndConcatIsOneRegion) {
  G b;
  auto x = b.in("x", {1, 16, 12, 12});
  auto stem = b.op("Relu", {b.conv(x, 16, 32, 3)});
  std::vector<std::string> feats = {stem};
  int64_t ch = 32;
  for (int layer = 0; layer < 2; ++layer) {
    auto cat = feats.size() == 1 ? b.op("Concat", feats, {{"axis", int64_t{1}}})
                                 : b.op("Concat", feats, {{"axis", int64_t{-3}}});
    auto h = b.op("Relu", {b.bn(cat, ch)});
    h = b.op("Relu", {b.conv(h, ch, 32, 1)});
    feats.push_back(b.conv(h, 32, 8, 3, 1, 1, false));
    ch += 8;
  }
  auto cat = b.op("Concat", feats, {{"axis", int64_t{1}}});
  auto t = b.conv(b.op("Relu", {b.bn(cat, ch)}), ch, 16, 1, 1, 1, false);
  HostTensor pads(DType::kInt64, {8});
  for (int i = 0; i < 8; ++i) pads.mutable_data<int64_t>()[i] = 0;
  auto padded = b.op("Pad", {t, b.constant(pads)}, {{"mode", std::string("constant")}});
  auto pool = b.op("AveragePool", {padded}, {{"kernel_shape", std::vector<int64_t>{2, 2}},
                                             {"strides", std::vector<int64_t>{2, 2}}});
  // A BatchNormalization of a value other nodes read too (not foldable), without a ReLU.
  auto c2 = b.conv(pool, 16, 16, 3);
  auto y = b.op("Add", {b.bn(c2, 16), c2});
  b.out(y);
  const std::string plan = check(b.g, {random({1, 16, 12, 12}, 23)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
  EXPECT_EQ(primitives(plan, "scale_shift"), 4) << plan;
  EXPECT_EQ(primitives(plan, "concat"), 3) << plan;
  EXPECT_EQ(plan.find("[reference]"), std::string::npos) << plan;
}

// A Concat of blocked (or plain) tensors whose channel counts are multiples of the block is
// copies of whole runs per batch entry ("concat by memcpy": oneDNN 2.6's simple concat moved
// them at 1.3 GB/s); sources from convolutions and from the region's input, batch 2, three
// sources; the reference kernels' results. An odd channel count takes oneDNN's concat.
TEST(GraphCompiler, ConcatOfWholeChannelBlocksIsCopies) {
  for (int64_t odd : {int64_t{0}, int64_t{3}}) {
    SCOPED_TRACE(odd ? "odd channels" : "whole blocks");
    G b;
    auto x = b.in("x", {2, 16, 9, 9});
    auto a = b.op("Relu", {b.conv(x, 16, 32, 3)});
    auto c = b.conv(x, 16, 16 + odd, 1);
    auto cat = b.op("Concat", {a, c, b.op("Relu", {b.conv(x, 16, 16, 3)})},
                    {{"axis", int64_t{1}}});
    b.out(b.conv(cat, 64 + odd, 8, 1));
    const std::string plan = check(b.g, {random({2, 16, 9, 9}, 41)});
    EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
    EXPECT_EQ(primitives(plan, "concat"), 1) << plan;
    // nChw8c on AVX2 and no AVX-512: the region's layout is blocked by 8 there.
    if (odd)
      EXPECT_EQ(plan.find("concat by memcpy"), std::string::npos) << plan;
    else if (!__builtin_cpu_supports("avx512f"))
      EXPECT_NE(plan.find("1 concat by memcpy"), std::string::npos) << plan;
  }
}

// A U-Net decoder step: ConvTranspose (stride 2) -> Relu -> Concat with the skip -> Conv, and
// odd geometries (pads, output_padding, dilations, no bias, odd channel counts) are one region
// with the deconvolutions in it: no reorder around them, in oneDNN's layout and in nChw16c.
// A grouped ConvTranspose stays a per-node kernel. The reference kernels' results.
G unet_decoder_step() {
  G b;
  auto x = b.in("x", {1, 16, 6, 8});
  auto skip = b.op("Relu", {b.conv(x, 16, 16, 3)});
  auto down = b.op("MaxPool", {skip}, {{"kernel_shape", std::vector<int64_t>{2, 2}},
                                       {"strides", std::vector<int64_t>{2, 2}}});
  auto mid = b.op("Relu", {b.conv(down, 16, 32, 3)});  // [1, 32, 3, 4]
  auto up = b.op("ConvTranspose",
                 {mid, b.constant(random({32, 16, 2, 2}, 81, -0.5f, 0.5f)),
                  b.constant(random({16}, 82))},
                 {{"kernel_shape", std::vector<int64_t>{2, 2}},
                  {"strides", std::vector<int64_t>{2, 2}}});  // [1, 16, 6, 8]
  up = b.op("Relu", {up});
  auto cat = b.op("Concat", {up, skip}, {{"axis", int64_t{1}}});
  auto y = b.op("Relu", {b.conv(cat, 32, 16, 3)});
  // Kernel 3, stride 2, pads 1, output_padding 1, dilation 2, no bias, 16 -> 5 channels.
  auto odd = b.op("ConvTranspose", {y, b.constant(random({16, 5, 3, 3}, 83, -0.5f, 0.5f))},
                  {{"kernel_shape", std::vector<int64_t>{3, 3}},
                   {"strides", std::vector<int64_t>{2, 2}},
                   {"pads", std::vector<int64_t>{1, 1, 1, 1}},
                   {"output_padding", std::vector<int64_t>{1, 1}},
                   {"dilations", std::vector<int64_t>{2, 2}}});
  b.out(b.conv(b.op("Sigmoid", {odd}), 5, 3, 1));
  // Two groups: per node.
  auto grouped = b.op("ConvTranspose",
                      {y, b.constant(random({16, 4, 2, 2}, 84, -0.5f, 0.5f))},
                      {{"kernel_shape", std::vector<int64_t>{2, 2}},
                       {"strides", std::vector<int64_t>{2, 2}},
                       {"group", int64_t{2}}});
  b.out(grouped);
  return b;
}

// A ConvTranspose's work is its multiply-adds (input values x M/group x kernel), not the
// values it moves: a VAE decoder's stride-2 deconvolutions (38 M multiply-adds, 50 k values)
// ran on one thread. Between the two limits below, the two deconvolutions (2.4 M
// multiply-adds each, 8-33 k values) run on the team under one and serially under the other.
TEST(GraphCompiler, ConvTransposeWorkIsItsMultiplyAdds) {
  G b;
  auto x = b.in("x", {2, 64, 8, 8});
  auto deconv = [&](const std::string& in, int64_t c, int64_t m) {
    return b.op("ConvTranspose", {in, b.constant(random({c, m, 3, 3}, 91, -0.5f, 0.5f))},
                {{"kernel_shape", std::vector<int64_t>{3, 3}},
                 {"strides", std::vector<int64_t>{2, 2}},
                 {"pads", std::vector<int64_t>{1, 1, 1, 1}},
                 {"output_padding", std::vector<int64_t>{1, 1}}});
  };
  auto h = b.op("LeakyRelu", {deconv(x, 64, 32)}, {{"alpha", 0.2f}});  // [2, 32, 16, 16]
  b.out(deconv(h, 32, 16));                                              // [2, 16, 32, 32]
  auto serial_ops = [](const std::string& plan) {
    const size_t at = plan.find(" serial");
    size_t begin = at;
    while (begin > 0 && std::isdigit(static_cast<unsigned char>(plan[begin - 1]))) --begin;
    return at == std::string::npos || begin == at ? -1 : std::stoi(plan.substr(begin, at - begin));
  };
  ASSERT_EQ(setenv("TENSORD_SERIAL_WORK_K", "100", 1), 0);  // 100 k
  const std::string team = check(b.g, {random({2, 64, 8, 8}, 92)});
  ASSERT_EQ(setenv("TENSORD_SERIAL_WORK_K", "10000", 1), 0);  // 10 M
  const std::string serial = check(b.g, {random({2, 64, 8, 8}, 92)});
  unsetenv("TENSORD_SERIAL_WORK_K");
  // Each a oneDNN deconvolution, or four phase convolutions (phase_deconv).
  EXPECT_EQ(primitives(team, "deconv") + primitives(team, "phase deconv") / 4, 2) << team;
  // At 100 k the serial ops are at most the eltwise and reorders (none of the deconvolutions);
  // at 10 M the deconvolutions are serial too.
  EXPECT_LE(serial_ops(team), primitives(team, "eltwise") + primitives(team, "reorder")) << team;
  EXPECT_GE(serial_ops(serial) - serial_ops(team), 2) << team << "\n" << serial;
}

// A pooling's work is its window's reads (9 per output of a 3x3 window), not the elements it
// moves: counted as moved (7.8 k here), a MaxPool ran on one thread below a limit its window
// work (20 k) passes. (node_work's rules; an op with no rule runs on the team.)
TEST(GraphCompiler, PoolingWorkIsItsWindow) {
  G b;
  auto x = b.in("x", {1, 16, 14, 14});
  auto c = b.conv(x, 16, 32, 1);  // 100 k multiply-adds
  b.out(b.op("MaxPool", {c}, {{"kernel_shape", std::vector<int64_t>{3, 3}},
                              {"strides", std::vector<int64_t>{2, 2}},
                              {"pads", std::vector<int64_t>{1, 1, 1, 1}}}));  // [1, 32, 7, 7]
  auto serial_ops = [](const std::string& plan) {
    const size_t at = plan.find(" serial");
    size_t begin = at;
    while (begin > 0 && std::isdigit(static_cast<unsigned char>(plan[begin - 1]))) --begin;
    return at == std::string::npos || begin == at ? 0 : std::stoi(plan.substr(begin, at - begin));
  };
  // Between 15 k and 25 k only the pooling's side changes (the convolution's 100 k is above
  // both; the reorders' 3-6 k values below both).
  ASSERT_EQ(setenv("TENSORD_SERIAL_WORK_K", "15", 1), 0);
  const std::string below = check(b.g, {random({1, 16, 14, 14}, 93)});
  ASSERT_EQ(setenv("TENSORD_SERIAL_WORK_K", "25", 1), 0);
  const std::string above = check(b.g, {random({1, 16, 14, 14}, 93)});
  unsetenv("TENSORD_SERIAL_WORK_K");
  EXPECT_EQ(primitives(below, "pool"), 1) << below;
  EXPECT_EQ(primitives(below, "conv"), 1) << below;
  EXPECT_EQ(serial_ops(above) - serial_ops(below), 1) << below << "\n" << above;
}

// A pooling that reads a region input (plain NCHW) ran on oneDNN's generic "simple_nchw" loop
// (MaxViT's downsampling, 8% of its time on AVX2); it now pools a channels-last or blocked copy.
TEST(GraphCompiler, PoolingOfARegionInputRunsOnAJitKernel) {
  for (const char* op : {"AveragePool", "MaxPool"}) {
    G b;
    auto x = b.in("x", {1, 24, 16, 16});
    auto p = b.op(op, {x}, {{"kernel_shape", std::vector<int64_t>{3, 3}},
                            {"strides", std::vector<int64_t>{2, 2}},
                            {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
    b.out(b.op("Relu", {b.conv(p, 24, 32, 1)}));
    const std::string plan = check(b.g, {random({1, 24, 16, 16}, 94)});
    EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << op << "\n" << plan;
    EXPECT_EQ(primitives(plan, "pool"), 1) << op << "\n" << plan;
    EXPECT_EQ(count(plan, "oneDNN reference primitive"), 0) << op << "\n" << plan;
  }
}

// Poolings of a convolution's output where that is nChw8c (AVX2) run on tensord's loop
// (blocked_pool.h; oneDNN's AVX2 pooling took three times as long): max and average with and
// without the padding counted, ceil_mode, dilations, asymmetric pads, channels that do not fill
// the last block (20) and a 1-D pooling, each against the reference kernels.
TEST(GraphCompiler, PoolingOfBlockedValuesRunsOnTensordsLoop) {
  struct Case {
    const char* op;
    AttributeMap attrs;
  };
  auto ints = [](std::vector<int64_t> v) { return Attribute(std::move(v)); };
  const std::vector<Case> cases = {
      {"MaxPool", {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})},
                   {"pads", ints({1, 1, 1, 1})}}},
      {"MaxPool", {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})},
                   {"ceil_mode", int64_t{1}}}},
      {"MaxPool", {{"kernel_shape", ints({3, 3})}, {"strides", ints({1, 1})},
                   {"pads", ints({1, 1, 1, 1})}}},
      {"MaxPool", {{"kernel_shape", ints({2, 3})}, {"dilations", ints({2, 2})},
                   {"pads", ints({0, 2, 1, 0})}}},
      {"AveragePool", {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})},
                       {"pads", ints({1, 1, 1, 1})}, {"ceil_mode", int64_t{1}}}},
      {"AveragePool", {{"kernel_shape", ints({3, 3})}, {"strides", ints({1, 1})},
                       {"pads", ints({1, 1, 1, 1})}, {"count_include_pad", int64_t{1}}}},
      {"AveragePool", {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}}},
  };
  const bool blocked8 = cpu::conv_native_layout() == "nChw8c";
  for (int64_t c : {16, 20}) {
    for (size_t i = 0; i < cases.size(); ++i) {
      G b;
      auto x = b.in("x", {2, 8, 13, 11});
      auto p = b.op(cases[i].op, {b.op("Relu", {b.conv(x, 8, c, 3)})}, cases[i].attrs);
      b.out(b.op("Relu", {b.conv(p, c, 8, 1)}));
      const std::string plan = check(b.g, {random({2, 8, 13, 11}, 95 + static_cast<int>(i), -2, 2)});
      EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << i << "\n" << plan;
      EXPECT_EQ(primitives(plan, "pool"), 1) << i << "\n" << plan;
      if (blocked8 && jit_convs(plan))
        EXPECT_EQ(count(plan, "1 pool on tensord's loop"), 1) << i << "\n" << plan;
    }
  }
  // 1-D: [N, C, W] pooled as H = 1.
  G b;
  auto x = b.in("x", {1, 8, 40});
  auto w = b.constant(random({16, 8, 3}, 7, -0.5f, 0.5f));
  auto c1 = b.op("Conv", {x, w}, {{"kernel_shape", ints({3})}, {"pads", ints({1, 1})}});
  auto p = b.op("MaxPool", {b.op("Relu", {c1})}, {{"kernel_shape", ints({3})},
                                                   {"strides", ints({2})}, {"pads", ints({1, 1})}});
  auto w2 = b.constant(random({8, 16, 1}, 8, -0.5f, 0.5f));
  b.out(b.op("Conv", {p, w2}, {{"kernel_shape", ints({1})}}));
  const std::string plan = check(b.g, {random({1, 8, 40}, 99, -2, 2)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
  if (blocked8 && jit_convs(plan)) EXPECT_EQ(count(plan, "1 pool on tensord's loop"), 1) << plan;
}

// The deep layers of a CNN (3x3 convolutions, maps of at most 17x17 outputs, 32k output
// channels, at least 128 input channels) run on tensord's kernel where the region's layout is nChw8c and the CPU has AVX2
// (direct_conv8.h; oneDNN's AVX2 kernel ran ResNet-18/34's deep layers 12-28% slower than ONNX
// Runtime; also Inception's 1x7, 7x1, 1x3 and 3x1 windows up to 17x17). Against the reference
// kernels: residual blocks (ReLU, then an Add of the block's
// input, then ReLU; and a ReLU before the Add), strides 1 and 2, batch 2, with and without
// bias, asymmetric pads, maps whose pixels leave partial tiles (1, 2 or none left of three),
// input channels whose last pass does not fill (17 blocks); convolutions with 48 output
// channels or 48 input channels stay on oneDNN.
TEST(GraphCompiler, DeepLayerConvolutionsRunOnTensordsKernel) {
  // On any CPU with AVX2 (it is taken on AMD cores only by default).
  ASSERT_EQ(setenv("TENSORD_OWN_CONV", "1", 1), 0);
  struct Unset {
    ~Unset() { unsetenv("TENSORD_OWN_CONV"); }
  } unset;
  auto ints = [](std::vector<int64_t> v) { return Attribute(std::move(v)); };
  const bool blocked8 = cpu::conv_native_layout() == "nChw8c";
  auto takes = [](int64_t ic, int64_t oc, int64_t oh, int64_t ow) {
    cpu::DirectConv8::Geometry g;
    g.ic = ic, g.oc = oc, g.h = oh, g.w = ow, g.oh = oh, g.ow = ow, g.kh = 3, g.kw = 3;
    return cpu::DirectConv8::applies(g);
  };
  // A 3x3 convolution with weights scaled to its fan-in (values stay of order 1 through the
  // blocks, so float32 sums of 864 products stay within the check's 1e-4).
  auto conv = [&](G& b, const std::string& x, int64_t cin, int64_t cout, int64_t stride,
                  std::vector<int64_t> pads, bool bias) {
    const float s = 1.5f / std::sqrt(static_cast<float>(cin * 9));
    std::vector<std::string> in = {x, b.constant(random({cout, cin, 3, 3}, b.counter + 7, -s, s))};
    if (bias) in.push_back(b.constant(random({cout}, b.counter + 11)));
    return b.op("Conv", in, {{"kernel_shape", ints({3, 3})}, {"strides", ints({stride, stride})},
                             {"pads", ints(std::move(pads))}});
  };
  struct Map {
    int64_t h, w;
  };
  // 7x7 (49 = 16 x 3 + 1), 4x5 (20: 2 left), 3x3 (9: none left), 2x4, 16x16 (256).
  for (Map m : {Map{7, 7}, Map{4, 5}, Map{3, 3}, Map{2, 4}, Map{16, 16}}) {
    for (int64_t c : {128, 160}) {
      G b;
      const std::vector<int64_t> p1 = {1, 1, 1, 1};
      auto x = b.in("x", {2, 8, m.h, m.w});
      auto stem = b.op("Relu", {conv(b, x, 8, c, 1, p1, true)});
      auto c1 = b.op("Relu", {conv(b, stem, c, c, 1, p1, true)});  // ReLU
      auto c2 = conv(b, c1, c, c, 1, p1, false);                     // no bias, + sum + ReLU
      auto blk = b.op("Relu", {b.op("Add", {c2, stem})});
      auto c3 = b.op("Relu", {conv(b, blk, c, c, 1, p1, true)});   // ReLU, then the sum
      b.out(b.op("Add", {c3, blk}));
      const std::string plan = check(b.g, {random({2, 8, m.h, m.w}, 130, -2, 2)});
      const std::string at = std::to_string(m.h) + "x" + std::to_string(m.w) + " c " +
                             std::to_string(c) + "\n" + plan;
      EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << at;
      if (blocked8 && takes(c, c, m.h, m.w) && jit_convs(plan))
        EXPECT_EQ(count(plan, "3 conv on tensord's kernel"), 1) << at;  // not the stem's
    }
  }
  // Stride 2 into 7x7 (13x13 in, pads 1; 136 input channels: passes of 4 blocks and one of
  // 1), asymmetric pads (none top and left, 1 bottom and right: 7x7 -> 6x6), then
  // convolutions to 48 channels (not a multiple of 32) and from 48 (fewer than 128): oneDNN's.
  G b;
  auto x = b.in("x", {1, 16, 13, 13});
  auto a = b.op("Relu", {conv(b, x, 16, 136, 1, {1, 1, 1, 1}, true)});
  auto s2 = b.op("Relu", {conv(b, a, 136, 128, 2, {1, 1, 1, 1}, true)});  // [1, 128, 7, 7]
  auto asym = conv(b, s2, 128, 128, 1, {0, 0, 1, 1}, false);             // [1, 128, 6, 6]
  auto c48 = b.op("Relu", {conv(b, asym, 128, 48, 1, {1, 1, 1, 1}, true)});
  b.out(conv(b, c48, 48, 64, 1, {1, 1, 1, 1}, true));
  const std::string plan = check(b.g, {random({1, 16, 13, 13}, 132, -2, 2)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
  if (blocked8 && takes(136, 128, 7, 7) && jit_convs(plan)) {
    EXPECT_EQ(count(plan, "2 conv on tensord's kernel"), 1) << plan;
    EXPECT_EQ(primitives(plan, "conv"), 5) << plan;
  }
  // Inception's factorised windows at 17x17 (289 pixels): 1x7 then 7x1, and 1x3 beside 3x1.
  G f;
  auto y = f.in("y", {1, 128, 17, 17});
  auto win = [&](const std::string& in, int64_t kh, int64_t kw) {
    const float s = 1.5f / std::sqrt(static_cast<float>(128 * kh * kw));
    auto w = f.constant(random({128, 128, kh, kw}, f.counter + 7, -s, s));
    return f.op("Relu", {f.op("Conv", {in, w}, {{"kernel_shape", ints({kh, kw})},
                                               {"pads", ints({kh / 2, kw / 2, kh / 2, kw / 2})}})});
  };
  auto seven = win(win(y, 1, 7), 7, 1);
  f.out(f.op("Concat", {win(seven, 1, 3), win(seven, 3, 1)}, {{"axis", int64_t{1}}}));
  const std::string plan2 = check(f.g, {random({1, 128, 17, 17}, 133, -2, 2)});
  EXPECT_EQ(count(plan2, "OneDnnRegion"), 1) << plan2;
  if (blocked8 && takes(128, 128, 17, 17) && jit_convs(plan2))
    EXPECT_EQ(count(plan2, "4 conv on tensord's kernel"), 1) << plan2;
}

// Video networks (S3D, R(2+1)D, MC3, R3D): 3-D convolutions, 3-D poolings, residual Adds and
// channel concats of 5-D values run in one region in the convolutions' layout (nCdhw8c on AVX2)
// instead of per node with a reorder in and out of each convolution (S3D 1.47x faster on Zen 3).
// Separable (1x3x3 then 3x1x1) and full 3x3x3 kernels, strides, a block of channels not filled
// (20), each pooling form against the reference kernels; the poolings of blocked values on
// tensord's loop where the layout is nCdhw8c.
TEST(GraphCompiler, VideoNetworksRunInOneRegion) {
  auto ints = [](std::vector<int64_t> v) { return Attribute(std::move(v)); };
  const std::vector<AttributeMap> pools = {
      {{"kernel_shape", ints({1, 3, 3})}, {"strides", ints({1, 2, 2})},
       {"pads", ints({0, 1, 1, 0, 1, 1})}},
      {{"kernel_shape", ints({3, 3, 3})}, {"strides", ints({2, 2, 2})},
       {"pads", ints({1, 1, 1, 1, 1, 1})}, {"ceil_mode", int64_t{1}}},
      {{"kernel_shape", ints({2, 2, 2})}, {"strides", ints({2, 2, 2})}},
  };
  const bool blocked8 = cpu::conv_native_layout() == "nChw8c";
  for (int64_t c : {16, 20}) {
    for (size_t i = 0; i < pools.size(); ++i) {
      for (const char* pool_op : {"MaxPool", "AveragePool"}) {
        G b;
        auto conv3 = [&](const std::string& x, int64_t cin, int64_t cout, std::vector<int64_t> k,
                         std::vector<int64_t> stride) {
          std::vector<int64_t> pads;
          for (int64_t v : k) pads.push_back(v / 2);
          for (int64_t v : k) pads.push_back(v / 2);
          auto w = b.constant(random({cout, cin, k[0], k[1], k[2]}, b.counter + 7, -0.5f, 0.5f));
          auto bias = b.constant(random({cout}, b.counter + 11));
          return b.op("Conv", {x, w, bias},
                      {{"kernel_shape", ints(k)}, {"strides", ints(stride)}, {"pads", ints(pads)}});
        };
        auto x = b.in("x", {1, 3, 6, 11, 10});
        auto stem = b.op("Relu", {conv3(x, 3, c, {3, 3, 3}, {1, 2, 2})});  // [1, c, 6, 6, 5]
        AttributeMap attrs = pools[i];
        if (std::string(pool_op) == "AveragePool" && i == 0)
          attrs["count_include_pad"] = int64_t{1};
        auto p = b.op(pool_op, {stem}, attrs);
        // A separable branch (R(2+1)D, S3D) with a residual Add, beside a 1x1x1 branch.
        auto s1 = b.op("Relu", {conv3(p, c, c, {1, 3, 3}, {1, 1, 1})});
        auto s2 = conv3(s1, c, c, {3, 1, 1}, {1, 1, 1});
        auto res = b.op("Relu", {b.op("Add", {s2, p})});
        auto one = b.op("Relu", {conv3(p, c, 8, {1, 1, 1}, {1, 1, 1})});
        auto cat = b.op("Concat", {res, one}, {{"axis", int64_t{1}}});
        b.out(conv3(cat, c + 8, 8, {1, 1, 1}, {1, 1, 1}));
        const std::string plan =
            check(b.g, {random({1, 3, 6, 11, 10}, 120 + static_cast<int>(i), -2, 2)});
        const std::string at = std::string(pool_op) + " " + std::to_string(i) + " c " +
                               std::to_string(c) + "\n" + plan;
        EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << at;
        EXPECT_EQ(primitives(plan, "conv"), 5) << at;
        EXPECT_EQ(primitives(plan, "pool"), 1) << at;
        EXPECT_EQ(count(plan, "oneDNN reference primitive"), 0) << at;
        if (blocked8 && jit_convs(plan)) EXPECT_EQ(count(plan, "1 pool on tensord's loop"), 1) << at;
      }
    }
  }
  // X3D's depthwise 3-D convolution between 1x1x1 ones, and a per-channel constant Add (not a
  // same-shaped binary: it stays outside the region, which splits around it).
  G b;
  auto x = b.in("x", {1, 8, 4, 9, 9});
  auto c5 = [&](const std::string& in, int64_t cin, int64_t cout, int64_t k, int64_t group) {
    auto w = b.constant(random({cout, cin / group, k, k, k}, b.counter + 7, -0.5f, 0.5f));
    const int64_t p = k / 2;
    return b.op("Conv", {in, w},
                {{"kernel_shape", ints({k, k, k})}, {"pads", ints({p, p, p, p, p, p})},
                 {"group", group}});
  };
  auto e = b.op("Relu", {c5(x, 8, 24, 1, 1)});
  auto dw = b.op("Relu", {c5(e, 24, 24, 3, 24)});
  auto shifted = b.op("Add", {dw, b.constant(random({24, 1, 1, 1}, 170))});
  b.out(c5(shifted, 24, 8, 1, 1));
  const std::string plan = check(b.g, {random({1, 8, 4, 9, 9}, 171, -2, 2)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 2) << plan;
  EXPECT_EQ(count(plan, "oneDNN reference primitive"), 0) << plan;
  // TENSORD_NO_5D_REGIONS is read once per process: not testable here; the per-node path is
  // what check() compares with.
}

// A ConvTranspose whose kernel equals its stride (U-Net's upsampling) runs as phase convolutions
// (phase_deconv), each a 1x1 convolution, and a scatter of each input pixel's patch (oneDNN
// 2.6's AVX2 deconvolution ran U-Net's at 16 GFLOP/s). Kernels 2x2 and 3x2, a batch of 2, with
// and without bias, activations after it as post-ops, in each layout, 16 and 20 channels.
TEST(GraphCompiler, ConvTransposeWithKernelEqualToStrideIsA1x1Conv) {
  auto ints = [](std::vector<int64_t> v) { return Attribute(std::move(v)); };
  for (const char* layout : {"any", "blocked16"}) {
    for (int64_t oc : {16, 20}) {
      for (bool bias : {true, false}) {
        ASSERT_EQ(setenv("TENSORD_CONV_LAYOUT", layout, 1), 0);
        G b;
        auto x = b.in("x", {2, 16, 5, 7});
        auto c = b.op("Relu", {b.conv(x, 16, 32, 3)});
        std::vector<std::string> ins = {c, b.constant(random({32, oc, 3, 2}, 130, -0.5f, 0.5f))};
        if (bias) ins.push_back(b.constant(random({oc}, 131)));
        auto up = b.op("ConvTranspose", ins,
                       {{"kernel_shape", ints({3, 2})}, {"strides", ints({3, 2})}});  // 15 x 14
        auto act = b.op("LeakyRelu", {up}, {{"alpha", 0.1f}});
        auto up2 = b.op("ConvTranspose",
                        {act, b.constant(random({oc, 16, 2, 2}, 132, -0.5f, 0.5f))},
                        {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}});  // 30 x 28
        b.out(b.conv(up2, 16, 8, 3));
        const std::string plan = check(b.g, {random({2, 16, 5, 7}, 133, -2, 2)});
        unsetenv("TENSORD_CONV_LAYOUT");
        const std::string at = std::string(layout) + " oc " + std::to_string(oc) + "\n" + plan;
        EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << at;
        EXPECT_EQ(count(plan, "oneDNN reference primitive"), 0) << at;
        if (!jit_convs(plan)) continue;
        // nChw16c forced on an AVX2 CPU has no JIT 1x1 kernel (gemm): the deconvolutions stay.
        const bool blocked16 = std::string(layout) == "blocked16";
        if (blocked16 && cpu::conv_native_layout() == "nChw8c") continue;
        // Six phases (3x2) and four (2x2), one scatter each; no deconvolution.
        EXPECT_EQ(primitives(plan, "phase deconv"), 10) << at;
        EXPECT_EQ(primitives(plan, "phase scatter"), 2) << at;
        EXPECT_EQ(primitives(plan, "deconv"), 0) << at;
      }
    }
  }
}

// A strided ConvTranspose whose kernel overlaps (the VAE decoder's 3x3 stride 2 with output
// padding, DCGAN's 4x4 stride 2) is one convolution per output phase and a scatter of the
// phases' pixels (oneDNN 2.6's AVX2 deconvolution ran the VAE's at about 24 GFLOP/s). Channel
// counts that do not fill a block (5, 12), bias or none, strides 2 and 3, activations after it
// as post-ops, against the reference kernels; a geometry with a phase of no taps (kernel 1,
// stride 2) stays a deconvolution.
TEST(GraphCompiler, StridedConvTransposeRunsAsPhaseConvolutions) {
  auto ints = [](std::vector<int64_t> v) { return Attribute(std::move(v)); };
  struct Case {
    std::vector<int64_t> k, s, pads, out_pad;
    int phases;  // 0: stays a deconvolution
  };
  const std::vector<Case> cases = {
      {{3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 4},  // VAE
      {{4, 4}, {2, 2}, {1, 1, 1, 1}, {0, 0}, 4},  // DCGAN
      {{3, 3}, {2, 2}, {0, 0, 0, 0}, {0, 0}, 4},
      {{5, 3}, {3, 2}, {2, 1, 2, 1}, {2, 1}, 6},
      {{3, 3}, {1, 2}, {1, 1, 1, 1}, {0, 1}, 2},
      {{1, 1}, {2, 2}, {0, 0, 0, 0}, {0, 0}, 0},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    for (int64_t oc : {5, 12, 16}) {
      const Case& c = cases[i];
      G b;
      auto x = b.in("x", {2, 16, 5, 6});
      auto h = b.op("Relu", {b.conv(x, 16, 16, 3)});
      std::vector<std::string> ins = {
          h, b.constant(random({16, oc, c.k[0], c.k[1]}, 140 + static_cast<int>(i), -0.5f, 0.5f))};
      if (oc != 12) ins.push_back(b.constant(random({oc}, 150)));
      auto up = b.op("ConvTranspose", ins,
                     {{"kernel_shape", ints(c.k)}, {"strides", ints(c.s)}, {"pads", ints(c.pads)},
                      {"output_padding", ints(c.out_pad)}});
      auto act = b.op("LeakyRelu", {up}, {{"alpha", 0.2f}});
      b.out(b.conv(act, oc, 8, 3));
      b.out(act);
      const std::string plan = check(b.g, {random({2, 16, 5, 6}, 160, -2, 2)});
      const std::string at = std::to_string(i) + " oc " + std::to_string(oc) + "\n" + plan;
      EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << at;
      EXPECT_EQ(count(plan, "oneDNN reference primitive"), 0) << at;
      if (!jit_convs(plan)) continue;
      EXPECT_EQ(primitives(plan, "phase deconv"), c.phases) << at;
      EXPECT_EQ(primitives(plan, "phase scatter"), c.phases ? 1 : 0) << at;
      EXPECT_EQ(primitives(plan, "deconv"), c.phases ? 0 : 1) << at;
    }
  }
}

TEST(GraphCompiler, ConvTransposeRunsInTheRegionWithoutReorders) {
  for (const char* layout : {"any", "blocked16"}) {
    ASSERT_EQ(setenv("TENSORD_CONV_LAYOUT", layout, 1), 0);
    G b = unet_decoder_step();
    const std::string plan = check(b.g, {random({1, 16, 6, 8}, 80, -2, 2)});
    unsetenv("TENSORD_CONV_LAYOUT");
    EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << layout << "\n" << plan;
    // The 2x2 stride-2 one is four 1x1 phase convolutions and a scatter (phase_deconv), its
    // Relu a post-op; the dilated one a oneDNN deconvolution. (Not in nChw16c forced on an
    // AVX2 CPU: no JIT 1x1 kernel there.)
    const int patch = std::string(layout) == "blocked16" &&
                              cpu::conv_native_layout() == "nChw8c" ? 0 : 1;
    EXPECT_EQ(primitives(plan, "deconv"), 2 - patch) << layout << "\n" << plan;
    EXPECT_EQ(primitives(plan, "phase deconv"), 4 * patch) << layout << "\n" << plan;
    EXPECT_EQ(primitives(plan, "phase scatter"), patch) << layout << "\n" << plan;
    EXPECT_EQ(count(plan, "ConvTranspose '"), 1) << layout << "\n" << plan;  // the grouped one
    EXPECT_EQ(count(plan, "Relu '"), 0) << layout << "\n" << plan;
    // The Sigmoid after the dilated deconvolution is a primitive of its own: a
    // deconvolution's post-ops run as oneDNN's reference loop (4-8x its time).
    EXPECT_EQ(primitives(plan, "eltwise"), 2 - patch) << layout << "\n" << plan;
    EXPECT_EQ(count(plan, "oneDNN reference primitive"), 0) << layout << "\n" << plan;
    if (std::string(layout) == "any") {  // the input's and the outputs' only
      // Where the region's layout is blocked (AVX2: nChw8c), the 5-channel value (padded to
      // 8) has oneDNN's reference Sigmoid only: it runs channels-last between two reorders.
      EXPECT_LE(primitives(plan, "reorder"),
                cpu::conv_native_layout() == "channels-last" ? 3 : 5) << plan;
    }
  }
}

// SiLU written as x * Sigmoid(x) (PyTorch's export): a swish post-op of the Conv before it,
// or one swish primitive after a non-Conv; not when x is read elsewhere too.
TEST(GraphCompiler, MulOfSigmoidIsOneSwish) {
  G b;
  auto x = b.in("x", {1, 16, 10, 10});
  auto c = b.conv(x, 16, 32, 3);
  auto s1 = b.op("Mul", {b.op("Sigmoid", {c}), c});  // Conv + swish post-op
  auto p = b.op("MaxPool", {s1}, {{"kernel_shape", std::vector<int64_t>{2, 2}},
                                  {"strides", std::vector<int64_t>{2, 2}}});
  auto s2 = b.op("Mul", {p, b.op("Sigmoid", {p})});  // after a pool: a swish primitive
  auto c2 = b.conv(s2, 32, 32, 1);
  auto sig = b.op("Sigmoid", {c2});
  auto s3 = b.op("Mul", {c2, sig});
  b.out(s3);
  b.out(sig);  // read outside: Sigmoid and Mul stay separate
  const std::string plan = check(b.g, {random({1, 16, 10, 10}, 24, -3, 3)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
  EXPECT_EQ(primitives(plan, "eltwise"), 2) << plan;  // the swish after the pool, the Sigmoid
  EXPECT_EQ(primitives(plan, "binary"), 1) << plan;   // the last Mul
}

HostTensor ints(std::vector<int64_t> v) {
  HostTensor t(DType::kInt64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.mutable_data<int64_t>()[i] = v[i];
  return t;
}

// ShuffleNetV2 units: channel Slices (views of the blocked tensor), a branch of convs, Concat,
// and the channel shuffle Reshape -> Transpose(0, 2, 1, 3, 4) -> Reshape as one reorder that
// permutes the channels: one region, no reference kernels, the reference kernels' results.
// A Reshape/Transpose that is not a channel shuffle still leaves the region.
TEST(GraphCompiler, ChannelShuffleAndChannelSlicesStayInTheRegion) {
  G b;
  auto x = b.in("x", {1, 8, 10, 10});
  auto v = b.op("Relu", {b.conv(x, 8, 32, 3)});
  auto shuffle = [&](const std::string& in, int64_t c, int64_t groups) {
    auto r = b.op("Reshape", {in, b.constant(ints({1, groups, c / groups, 10, 10}))});
    auto t = b.op("Transpose", {r}, {{"perm", std::vector<int64_t>{0, 2, 1, 3, 4}}});
    return b.op("Reshape", {t, b.constant(ints({1, c, 10, 10}))});
  };
  for (int unit = 0; unit < 2; ++unit) {
    auto left = b.op("Slice", {v, b.constant(ints({0})), b.constant(ints({16})),
                               b.constant(ints({1}))});
    auto right = b.op("Slice", {v, b.constant(ints({16})), b.constant(ints({32})),
                                b.constant(ints({-3})), b.constant(ints({1}))});
    auto br = b.op("Relu", {b.conv(right, 16, 16, 1)});
    br = b.conv(br, 16, 16, 3, 1, 16);
    br = b.op("Relu", {b.conv(br, 16, 16, 1)});
    v = shuffle(b.op("Concat", {left, br}, {{"axis", int64_t{1}}}), 32, 2);
  }
  auto y = b.op("Add", {v, b.conv(v, 32, 32, 1)});
  b.out(y);
  const std::string plan = check(b.g, {random({1, 8, 10, 10}, 25)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
  EXPECT_EQ(plan.find("[reference]"), std::string::npos) << plan;
  EXPECT_EQ(primitives(plan, "concat"), 2) << plan;

  // Transpose of other axes: not a shuffle, runs on the per-node kernels.
  G o;
  auto x2 = o.in("x", {1, 8, 10, 10});
  auto c2 = o.conv(x2, 8, 8, 3);
  auto r2 = o.op("Reshape", {c2, o.constant(ints({1, 2, 4, 10, 10}))});
  auto t2 = o.op("Transpose", {r2}, {{"perm", std::vector<int64_t>{0, 1, 2, 4, 3}}});
  o.out(o.op("Reshape", {t2, o.constant(ints({1, 8, 10, 10}))}));
  const std::string plan2 = check(o.g, {random({1, 8, 10, 10}, 26)});
  EXPECT_NE(plan2.find("Transpose"), std::string::npos) << plan2;
}

// ReduceMean over the spatial axes (PyTorch's x.mean([2, 3]) head; axes as an attribute or,
// opset 18, an input; keepdims 0 or 1) is a global average pooling in the region, and the
// classifier Gemm after it joins the region as an inner product; over other axes it does not.
TEST(GraphCompiler, SpatialReduceMeanIsAGlobalPoolInTheRegion) {
  G b;
  auto x = b.in("x", {2, 8, 7, 7});
  auto c = b.op("Relu", {b.conv(x, 8, 16, 3)});
  auto m = b.op("ReduceMean", {c}, {{"axes", std::vector<int64_t>{-1, 2}}, {"keepdims", int64_t{0}}});
  auto fc = b.op("Gemm", {m, b.constant(random({10, 16}, 41)), b.constant(random({10}, 42))},
                 {{"transB", int64_t{1}}});
  b.out(fc);
  auto k = b.op("ReduceMean", {c, b.constant(ints({2, 3}))});  // keepdims 1, axes input
  b.out(k);
  auto other = b.op("ReduceMean", {c}, {{"axes", std::vector<int64_t>{1}}});
  b.out(other);
  const std::string plan = check(b.g, {random({2, 8, 7, 7}, 27)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
  EXPECT_EQ(primitives(plan, "pool"), 2) << plan;
  EXPECT_EQ(primitives(plan, "inner_product"), 1) << plan;
  EXPECT_EQ(count(plan, "ReduceMean '"), 1) << plan;  // the channel mean, per-node

  // 1-D: [N, C, L] averaged over L.
  G d;
  auto x1 = d.in("x", {1, 4, 50});
  auto c1 = d.op("Conv", {x1, d.constant(random({6, 4, 3}, 43)), d.constant(random({6}, 44))},
                 {{"kernel_shape", std::vector<int64_t>{3}}});
  d.out(d.op("ReduceMean", {c1}, {{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{0}}}));
  const std::string plan1 = check(d.g, {random({1, 4, 50}, 28)});
  EXPECT_EQ(count(plan1, "OneDnnRegion"), 1) << plan1;
  EXPECT_EQ(count(plan1, "ReduceMean '"), 0) << plan1;
}

// Activations of a Linear layer's 2-D result stay in the region: a post-op of the inner product
// when only the next Linear reads them (MobileNetV3's Linear -> HardSwish -> Linear head), an
// eltwise on the 2-D result when the product is read elsewhere too.
TEST(GraphCompiler, ActivationBetweenLinearLayersStaysInTheRegion) {
  G b;
  auto x = b.in("x", {2, 8, 9, 9});
  auto pooled = b.op("GlobalAveragePool", {b.op("Relu", {b.conv(x, 8, 32, 3)})});
  auto flat = b.op("Flatten", {pooled}, {{"axis", int64_t{1}}});
  auto h = b.op("Gemm", {flat, b.constant(random({24, 32}, 31)), b.constant(random({24}, 32))},
                {{"transB", int64_t{1}}});
  auto a = b.op("HardSwish", {h});
  auto logits = b.op("Gemm", {a, b.constant(random({10, 24}, 33)), b.constant(random({10}, 34))},
                     {{"transB", int64_t{1}}});
  auto h2 = b.op("MatMul", {flat, b.constant(random({32, 6}, 35))});
  auto r = b.op("Relu", {h2});
  auto y2 = b.op("MatMul", {r, b.constant(random({6, 4}, 36))});
  b.out(logits);
  b.out(h2);  // read outside too: its Relu is not a post-op
  b.out(y2);
  const std::string plan = check(b.g, {random({2, 8, 9, 9}, 30)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
  EXPECT_EQ(primitives(plan, "inner_product"), 4) << plan;
  EXPECT_EQ(primitives(plan, "eltwise"), 1) << plan;
  EXPECT_EQ(plan.find("Gemm '"), std::string::npos) << plan;
  EXPECT_EQ(plan.find("MatMul '"), std::string::npos) << plan;
  EXPECT_EQ(plan.find("Elementwise"), std::string::npos) << plan;
}

// A first layer with few input channels reads the region's NCHW input as is (oneDNN's direct
// kernel, nChw16c out) when it writes 16 channels, which are the same bytes as channels-last:
// no reorder in, none after it; only the region's output is reordered. With many output
// channels the input is reordered instead (fewer bytes). The reference kernels' results.
TEST(GraphCompiler, FirstLayerReadsThePlainInputWithoutAReorder) {
  {
    G b;
    auto x = b.in("x", {1, 3, 33, 31});
    auto h = b.op("HardSwish", {b.bn(b.conv(x, 3, 16, 3, 2), 16)});
    h = b.op("Relu", {b.conv(h, 16, 16, 3, 1, 16)});  // depthwise, channels-last
    b.out(b.conv(h, 16, 24, 1));
    const std::string plan = check(b.g, {random({1, 3, 33, 31}, 40)});
    EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
    EXPECT_EQ(primitives(plan, "conv"), 3) << plan;
    EXPECT_EQ(primitives(plan, "reorder"), 1) << plan;
  }
  {
    G b;
    auto x = b.in("x", {1, 3, 30, 30});
    auto h = b.op("Relu", {b.conv(x, 3, 64, 3, 1)});
    b.out(b.conv(h, 64, 32, 1));
    const std::string plan = check(b.g, {random({1, 3, 30, 30}, 41)});
    EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
    // In a blocked region (AVX2: nChw8c) the direct kernel writes the region's layout from
    // the plain input: only the output is reordered.
    EXPECT_EQ(primitives(plan, "reorder"), cpu::conv_native_layout() == "channels-last" ? 2 : 1)
        << plan;
  }
}

// A transformer MLP block on [B, T, C] tokens: Linear (bias first, as PyTorch exports it) ->
// erf GELU (Div, Erf, Add 1, Mul x, Mul 0.5) -> Linear -> per-channel scale (layer scale) ->
// residual Add. Each Linear is one oneDNN matmul with the rest as post-ops; the reference
// kernels' results.
TEST(GraphCompiler, LinearLayersTakeBiasGeluScaleAndResidualAsPostOps) {
  G b;
  auto x = b.in("x", {2, 7, 16});
  auto h = b.op("MatMul", {x, b.constant(random({16, 48}, 41, -0.5f, 0.5f))});
  h = b.op("Add", {b.constant(random({48}, 42)), h});
  auto d = b.op("Div", {h, b.constant(HostTensor::scalar(1.4142135f))});
  auto e = b.op("Add", {b.op("Erf", {d}), b.constant(HostTensor::scalar(1.0f))});
  auto gelu = b.op("Mul", {b.op("Mul", {h, e}), b.constant(HostTensor::scalar(0.5f))});
  auto y = b.op("MatMul", {gelu, b.constant(random({48, 16}, 43, -0.5f, 0.5f))});
  y = b.op("Add", {y, b.constant(random({16}, 44))});
  y = b.op("Mul", {y, b.constant(random({16}, 45))});
  y = b.op("Add", {x, y});
  b.out(y);
  const std::string plan = check(b.g, {random({2, 7, 16}, 40, -2, 2)});
  EXPECT_EQ(count(plan, "Linear: [14, 16] x [16, 48] + bias + gelu as one oneDNN matmul"), 1)
      << plan;
  EXPECT_EQ(count(plan, "Linear: [14, 48] x [48, 16] + bias + mul + residual"), 1) << plan;
  EXPECT_EQ(count(plan, "MatMul '"), 0) << plan;
  EXPECT_EQ(count(plan, "Erf '"), 0) << plan;
  EXPECT_EQ(count(plan, "Elementwise"), 0) << plan;
}

// The weights behind Identity nodes (PyTorch's export of layers cloned from one, as
// nn.TransformerEncoder makes them: every later layer's weights an Identity of the first's):
// still Linear layers with prepared weights, not per-node MatMuls.
TEST(GraphCompiler, LinearLayersTakeWeightsBehindIdentityNodes) {
  G b;
  auto x = b.in("x", {2, 7, 256});
  const std::string w = b.constant(random({256, 256}, 61, -0.1f, 0.1f));
  const std::string bias = b.constant(random({256}, 62));
  auto h = x;
  for (int layer = 0; layer < 3; ++layer) {
    const std::string wl = layer == 0 ? w : b.op("Identity", {w});
    const std::string bl = layer == 0 ? bias : b.op("Identity", {bias});
    h = b.op("Relu", {b.op("Add", {b.op("MatMul", {h, wl}), bl})});
  }
  b.out(h);
  const std::string plan = check(b.g, {random({2, 7, 256}, 60, -2, 2)});
  EXPECT_EQ(count(plan, "Linear: [14, 256] x [256, 256] + bias + eltwise as one oneDNN matmul"), 3)
      << plan;
  EXPECT_EQ(count(plan, "MatMul '"), 0) << plan;
}

// Constant weights oneDNN's gemm reads row-major (AVX2) with rows a multiple of 1 KB long are
// stored with their rows 64 bytes apart more: at a row of exactly 4 KB the gemm's walk down B's
// columns stays in a few cache sets (a transformer's 256 x 1024 up-projection ran 1.85x slower).
// Where oneDNN takes blocked weights (AVX-512's brgemm) nothing is padded. Same results.
TEST(GraphCompiler, RowMajorWeightsWithCriticalStrideArePadded) {
  G b;
  auto x = b.in("x", {40, 256});
  auto up = b.op("Relu", {b.op("Add", {b.op("MatMul", {x, b.constant(random({256, 1024}, 63, -0.1f, 0.1f))}),
                                       b.constant(random({1024}, 64))})});
  auto down = b.op("MatMul", {up, b.constant(random({1024, 200}, 65, -0.05f, 0.05f))});
  b.out(down);
  const std::string plan = check(b.g, {random({40, 256}, 66, -2, 2)});
  EXPECT_EQ(count(plan, "Linear: [40, 256] x [256, 1024]"), 1) << plan;
  EXPECT_EQ(count(plan, "Linear: [40, 1024] x [1024, 200]"), 1) << plan;
  // The 1024-wide layer is padded where the primitive is the row-major gemm; the 200-wide never.
  const bool gemm = count(plan, "[256, 1024] + bias + eltwise as one oneDNN matmul (gemm:jit)") == 1;
  EXPECT_EQ(count(plan, "weight rows padded"), gemm ? 1 : 0) << plan;
}

// `x.squeeze(1)` as PyTorch exports it when it cannot see the dim: If(Shape(x)[1] == 1) with a
// Squeeze in one branch and an Identity in the other; a second If, after it, tests the first's
// output (MViT-v1-B has three in a row). With the input shapes the conditions fold, the taken
// branches replace the Ifs, and the MatMul behind them sees its shapes: a oneDNN Linear, not a
// per-node MatMul chosen for unknown shapes. TENSORD_CANONICAL=-if keeps the Ifs.
TEST(GraphCompiler, IfsWithConditionsKnownFromShapesBecomeTheirBranches) {
  // If(Shape(x)[axis] == dim): the then branch squeezes `axis` when `then_squeezes`, else the
  // other does; each branch declares its output's rank, as exporters write them.
  auto squeeze_if = [](G& b, const std::string& x, int64_t axis, int64_t dim, bool then_squeezes,
                       size_t rank) {
    auto branch = [&](bool squeeze) {
      auto g = std::make_shared<Graph>();
      g->name = squeeze ? "squeeze" : "keep";
      g->initializers["axes"] = HostTensor::from_vector(std::vector<int64_t>{axis}, {1});
      Node n;
      n.op = squeeze ? "Squeeze" : "Identity";
      n.name = g->name + "_node";
      n.inputs = squeeze ? std::vector<std::string>{x, "axes"} : std::vector<std::string>{x};
      n.outputs = {"out"};
      g->nodes.push_back(n);
      g->outputs = {{"out", {DType::kFloat32, Shape(squeeze ? rank - 1 : rank, -1)}}};
      return std::shared_ptr<const Graph>(g);
    };
    auto dim_is = b.op("Equal", {b.op("Gather", {b.op("Shape", {x}), b.constant(HostTensor::scalar<int64_t>(axis))}),
                                 b.constant(HostTensor::scalar<int64_t>(dim))});
    return b.op("If", {dim_is}, {{"then_branch", branch(then_squeezes)},
                                 {"else_branch", branch(!then_squeezes)}});
  };
  G b;
  auto x = b.in("x", {6, 1, 32});
  auto s = squeeze_if(b, x, 1, 1, true, 3);   // dim 1 is 1: squeezed, [6, 32]
  auto t = squeeze_if(b, s, 0, 6, false, 2);  // dim 0 is 6: the then branch keeps [6, 32]
  b.out(b.op("Relu", {b.op("MatMul", {t, b.constant(random({32, 16}, 81, -0.5f, 0.5f))})}));
  const std::vector<HostTensor> in = {random({6, 1, 32}, 80, -2, 2)};
  const std::string plan = check(b.g, in);
  EXPECT_EQ(count(plan, "If"), 0) << plan;
  EXPECT_EQ(count(plan, "Linear: [6, 32] x [32, 16] + eltwise as one oneDNN matmul"), 1) << plan;
  setenv("TENSORD_CANONICAL", "-if", 1);
  const std::string kept = check(b.g, in);
  unsetenv("TENSORD_CANONICAL");
  EXPECT_GE(count(kept, "If"), 2) << kept;
}

// The other GELU order ((x * 0.5) * (1 + erf(x * 0.7071))), a Relu, 2-D and 4-D activations;
// a result read twice, or also a graph output, ends the post-ops there.
TEST(GraphCompiler, LinearLayersStopWhereAValueIsReadElsewhere) {
  G b;
  auto x = b.in("x", {3, 2, 5, 8});
  auto h = b.op("MatMul", {x, b.constant(random({8, 12}, 51, -0.5f, 0.5f))});
  auto half = b.op("Mul", {h, b.constant(HostTensor::scalar(0.5f))});
  auto scaled = b.op("Mul", {h, b.constant(HostTensor::scalar(0.70710678f))});
  auto e = b.op("Add", {b.constant(HostTensor::scalar(1.0f)), b.op("Erf", {scaled})});
  auto gelu = b.op("Mul", {half, e});
  auto shared = b.op("MatMul", {gelu, b.constant(random({12, 6}, 52, -0.5f, 0.5f))});
  auto r1 = b.op("Relu", {shared});  // `shared` has two readers: not a post-op
  auto r2 = b.op("Sigmoid", {shared});
  auto z = b.in("z", {4, 8});
  auto zl = b.op("MatMul", {z, b.constant(random({8, 3}, 53))});
  auto zr = b.op("Relu", {zl});
  b.out(r1);
  b.out(r2);
  b.out(zl);  // a graph output: its Relu stays out
  b.out(zr);
  const std::string plan = check(b.g, {random({3, 2, 5, 8}, 50, -2, 2), random({4, 8}, 54)});
  EXPECT_EQ(count(plan, "Linear: [30, 8] x [8, 12] + gelu as"), 1) << plan;
  EXPECT_EQ(count(plan, "Linear: [30, 12] x [12, 6] as"), 1) << plan;
  EXPECT_EQ(count(plan, "Linear: [4, 8] x [8, 3] as"), 1) << plan;
  EXPECT_EQ(count(plan, "Erf '"), 0) << plan;
}

// Gemm by constant weights is the same Linear layer: B as stored [N, K] (transB) or [K, N],
// alpha folded into the weights, beta * C (of [N], [1, N] or one value) as the bias, the
// activation after it as a post-op. A C of [M, N] or a transposed A stays a Gemm node.
TEST(GraphCompiler, GemmByConstantWeightsIsALinearLayer) {
  G b;
  auto x = b.in("x", {3, 13});
  auto y1 = b.op("Gemm", {x, b.constant(random({7, 13}, 71)), b.constant(random({7}, 72))},
                 {{"transB", int64_t{1}}, {"alpha", 0.5f}, {"beta", 2.0f}});
  y1 = b.op("Relu", {y1});
  auto y2 = b.op("Gemm", {x, b.constant(random({13, 5}, 73)),
                          b.constant(HostTensor::scalar(0.25f))});
  auto y3 = b.op("Gemm", {x, b.constant(random({13, 4}, 74)), b.constant(random({1, 4}, 75))},
                 {{"beta", 0.0f}});
  auto y4 = b.op("Gemm", {x, b.constant(random({13, 6}, 76)), b.constant(random({3, 6}, 77))});
  auto xt = b.in("xt", {13, 3});
  auto y5 = b.op("Gemm", {xt, b.constant(random({13, 2}, 78))}, {{"transA", int64_t{1}}});
  for (const auto& y : {y1, y2, y3, y4, y5}) b.out(y);
  const std::string plan = check(b.g, {random({3, 13}, 70, -2, 2), random({13, 3}, 79)});
  EXPECT_EQ(count(plan, "Linear: [3, 13] x [13, 7] (B transposed) + bias + eltwise as"), 1)
      << plan;
  EXPECT_EQ(count(plan, "Linear: [3, 13] x [13, 5] + bias as"), 1) << plan;
  EXPECT_EQ(count(plan, "Linear: [3, 13] x [13, 4] as"), 1) << plan;
  EXPECT_EQ(count(plan, "Gemm '"), 2) << plan;  // C of [M, N]; transA
  EXPECT_EQ(count(plan, "Relu '"), 0) << plan;
}

// Attention: softmax(Q K^T * scale) V on [B, H, T, D]. Q K^T reads K through its strides (the
// Transpose is absorbed) with the scale as a post-op; P V is a second batched matmul. A
// Transpose also read elsewhere stays a node; a B with broadcast batch axes stays per-node.
TEST(GraphCompiler, AttentionProductsAbsorbTheTransposeAndTheScale) {
  G b;
  auto q = b.in("q", {2, 3, 5, 4});
  auto k = b.in("k", {2, 3, 5, 4});
  auto v = b.in("v", {2, 3, 5, 4});
  AttributeMap perm = {{"perm", std::vector<int64_t>{0, 1, 3, 2}}};
  auto s = b.op("MatMul", {q, b.op("Transpose", {k}, perm)});
  s = b.op("Mul", {s, b.constant(HostTensor::scalar(0.5f))});
  auto p = b.op("Softmax", {s}, {{"axis", int64_t{-1}}});
  auto o = b.op("MatMul", {p, v});
  auto vt = b.op("Transpose", {v}, perm);  // read twice: not absorbed
  auto o2 = b.op("MatMul", {q, vt});
  auto o3 = b.op("MatMul", {o, b.in("w", {4, 3})});  // B of rank 2, not constant: per-node
  b.out(o);
  b.out(o2);
  b.out(vt);
  b.out(o3);
  const std::string plan =
      check(b.g, {random({2, 3, 5, 4}, 60, -2, 2), random({2, 3, 5, 4}, 61, -2, 2),
                  random({2, 3, 5, 4}, 62), random({4, 3}, 63)});
  EXPECT_EQ(count(plan, "MatMul: [2, 3, 5, 4] x [2, 3, 4, 5] (B transposed) + mul as"), 1) << plan;
  EXPECT_EQ(count(plan, "MatMul: [2, 3, 5, 5] x [2, 3, 5, 4] as"), 1) << plan;
  EXPECT_EQ(count(plan, "MatMul: [2, 3, 5, 4] x [2, 3, 4, 5] as"), 1) << plan;
  EXPECT_EQ(count(plan, "Transpose '"), 1) << plan;
  EXPECT_EQ(count(plan, "MatMul '"), 1) << plan;
}

// Constants of other broadcast shapes after a batched product are post-ops too: a causal
// mask [T, T] of 0 and -inf over [B, H, T, T] scores, a padding mask [B, 1, 1, T], a per-head
// scale [H, 1, 1]. Where oneDNN refuses a broadcast, the layer is matched again without it and
// the op runs after it; the reference kernels' results either way (-inf masked rows included).
TEST(GraphCompiler, AttentionMasksAreBroadcastPostOps) {
  const int64_t B = 2, H = 3, T = 5, D = 3;
  G b;
  auto q = b.in("q", {B, H, T, D});
  auto k = b.in("k", {B, H, T, D});
  auto v = b.in("v", {B, H, T, D});
  HostTensor causal(DType::kFloat32, {T, T});
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j)
      causal.mutable_data<float>()[i * T + j] = j > i ? -INFINITY : 0.0f;
  HostTensor padding(DType::kFloat32, {B, 1, 1, T});
  for (int64_t i = 0; i < B * T; ++i)
    padding.mutable_data<float>()[i] = i % T >= T - 1 - i / T ? -1e9f : 0.0f;
  AttributeMap perm = {{"perm", std::vector<int64_t>{0, 1, 3, 2}}};
  // Each chain its own keys (the same product thrice would be computed once: canonicalize's
  // cse).
  auto scores = [&](const std::string& mask_op, HostTensor mask, const std::string& k) {
    auto s = b.op("MatMul", {q, b.op("Transpose", {k}, perm)});
    s = b.op("Mul", {s, b.constant(HostTensor::scalar(0.57735f))});
    s = b.op(mask_op, {b.constant(std::move(mask)), s});
    return b.op("MatMul", {b.op("Softmax", {s}, {{"axis", int64_t{-1}}}), v});
  };
  auto k2 = b.in("k2", {B, H, T, D});
  auto k3 = b.in("k3", {B, H, T, D});
  b.out(scores("Add", causal, k));
  b.out(scores("Add", padding, k2));
  b.out(scores("Mul", random({H, 1, 1}, 91, 0.5f, 1.5f), k3));
  const std::string plan =
      check(b.g, {random({B, H, T, D}, 92, -2, 2), random({B, H, T, D}, 93, -2, 2),
                  random({B, H, T, D}, 94), random({B, H, T, D}, 95, -2, 2),
                  random({B, H, T, D}, 96, -2, 2)});
  // The [T, T] mask over two batches has only oneDNN's reference matmul: an Add after it.
  EXPECT_EQ(count(plan, "MatMul: [2, 3, 5, 3] x [2, 3, 3, 5] (B transposed) + mul + add as"), 1)
      << plan;
  EXPECT_EQ(count(plan, "(B transposed) + mul as"), 1) << plan;
  EXPECT_EQ(count(plan, "(ref:"), 0) << plan;
  EXPECT_EQ(count(plan, "(B transposed) + mul + mul as"), 1) << plan;
  EXPECT_EQ(count(plan, "MatMul '"), 0) << plan;
  EXPECT_EQ(count(plan, "Transpose '"), 0) << plan;
}

// Reshape, Squeeze, Unsqueeze, Flatten and Identity only a product reads are the same bytes:
// the product reads their input's buffer with its own view (Q, K, V split out of one [3, ...]
// tensor and squeezed; a Linear layer on a Reshape of the heads; a Reshape to a Shape the
// compiler folds). One still read elsewhere stays a node.
TEST(GraphCompiler, ProductsReadThroughSameByteShapeOps) {
  G b;
  auto qkv = b.in("qkv", {3, 2, 3, 5, 4});
  HostTensor sizes(DType::kInt64, {3}), axes(DType::kInt64, {1});
  for (int i = 0; i < 3; ++i) sizes.mutable_data<int64_t>()[i] = 1;
  axes.mutable_data<int64_t>()[0] = 0;
  Node split;
  split.op = "Split";
  split.name = "split";
  split.inputs = {qkv, b.constant(sizes)};
  split.outputs = {"s0", "s1", "s2"};
  split.attrs = {{"axis", int64_t{0}}};
  b.g.nodes.push_back(split);
  const std::string ax = b.constant(axes);
  auto q = b.op("Squeeze", {"s0", ax});
  auto k = b.op("Squeeze", {"s1", ax});
  auto v = b.op("Squeeze", {"s2", ax});
  AttributeMap perm = {{"perm", std::vector<int64_t>{0, 1, 3, 2}}};
  auto s = b.op("MatMul", {q, b.op("Transpose", {k}, perm)});
  auto o = b.op("MatMul", {b.op("Softmax", {s}, {{"axis", int64_t{-1}}}), v});  // [2, 3, 5, 4]
  HostTensor shape(DType::kInt64, {2});
  shape.mutable_data<int64_t>()[0] = 10;
  shape.mutable_data<int64_t>()[1] = 12;
  auto flat = b.op("Reshape", {o, b.constant(shape)});  // [10, 12]: not o's rows, same bytes
  auto y = b.op("MatMul", {flat, b.constant(random({12, 7}, 101))});
  b.out(y);
  // Read twice: stays.
  auto z = b.in("z", {1, 6, 4});
  auto zs = b.op("Squeeze", {z, ax});
  b.out(b.op("MatMul", {zs, b.constant(random({4, 3}, 102))}));
  b.out(zs);
  // A shape computed from static shapes: folded to a constant, so read through too.
  auto w = b.in("w", {2, 8});
  auto ws = b.op("Reshape", {w, b.op("Shape", {b.in("like", {4, 4})})});
  b.out(b.op("MatMul", {ws, b.constant(random({4, 2}, 103))}));
  const std::string plan = check(
      b.g, {random({3, 2, 3, 5, 4}, 100, -2, 2), random({1, 6, 4}, 104), random({2, 8}, 105),
            random({4, 4}, 106)});
  EXPECT_EQ(count(plan, "(B transposed) as one oneDNN matmul"), 1) << plan;
  EXPECT_EQ(count(plan, "Squeeze '"), 1) << plan;  // z's
  EXPECT_EQ(count(plan, "Reshape '"), 0) << plan;
  // oneDNN's implementation in the parentheses depends on the CPU (brg:avx512_core, gemm:jit).
  const size_t at = plan.find("Linear: [4, 4] x [4, 2] as one oneDNN matmul (");
  ASSERT_NE(at, std::string::npos) << plan;
  EXPECT_NE(plan.substr(at, plan.find(']', at + 30) - at).find("), 2 nodes"), std::string::npos)
      << plan;
  EXPECT_EQ(count(plan, "Transpose '"), 0) << plan;
  EXPECT_EQ(count(plan, "Linear: [10, 12] x [12, 7] as"), 1) << plan;
  EXPECT_EQ(count(plan, "MatMul '"), 0) << plan;
}

// A product between the serial limit and a few million multiply-adds keeps a one-thread and
// a team primitive; its first runs time both and keep the faster. Every run, trials included,
// gives the reference kernels' results: a loaded model run 14 times on new inputs.
TEST(GraphCompiler, SmallProductsMeasureOneThreadAgainstTheTeam) {
  G b;
  auto q = b.in("q", {1, 4, 64, 64});
  auto k = b.in("k", {1, 4, 64, 64});
  AttributeMap perm = {{"perm", std::vector<int64_t>{0, 1, 3, 2}}};
  b.out(b.op("MatMul", {q, b.op("Transpose", {k}, perm)}));  // 1M multiply-adds
  std::vector<TensorType> types = {{DType::kFloat32, {1, 4, 64, 64}},
                                   {DType::kFloat32, {1, 4, 64, 64}}};
  auto plan = describe_compiled(b.g, types, CompileOptions{true});
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  if (tensord::cpu::threads_available() > 1) {
    EXPECT_EQ(count(*plan, "threads measured at run time"), 1) << *plan;
  }
  auto client = make_local_client({});
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  auto model = (*client)->load(b.g, "cpu:0");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  for (uint32_t run = 0; run < 14; ++run) {
    const std::vector<HostTensor> in = {random({1, 4, 64, 64}, 200 + run, -2, 2),
                                        random({1, 4, 64, 64}, 300 + run, -2, 2)};
    std::vector<TensorHandle> handles;
    for (const auto& t : in) {
      auto h = (*client)->upload(t.view(), "cpu:0");
      ASSERT_TRUE(h.ok()) << h.status().to_string();
      handles.push_back(*h);
    }
    auto outs = (*client)->run(*model, handles);
    ASSERT_TRUE(outs.ok()) << outs.status().to_string();
    auto got = (*client)->read((*outs)[0]);
    auto ref = run_graph_on_host(b.g, in, CompileOptions{false});
    ASSERT_TRUE(got.ok() && ref.ok() && (*ref)[0].ok());
    const HostTensor& want = *(*ref)[0];
    ASSERT_EQ(got->numel(), want.numel());
    int64_t bad = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      const double x = got->data<float>()[i], y = want.data<float>()[i];
      if (!(std::fabs(x - y) <= 1e-4 + 1e-4 * std::fabs(y))) ++bad;
    }
    EXPECT_EQ(bad, 0) << "run " << run;
    for (TensorHandle h : handles) (void)(*client)->release(h);
    for (TensorHandle h : *outs) (void)(*client)->release(h);
  }
}

}  // namespace
}  // namespace tensord

namespace tensord {
namespace {

int total_primitives(const std::string& plan) {
  const size_t p = plan.find(" primitives (");
  if (p == std::string::npos) return -1;
  size_t b = p;
  while (b > 0 && std::isdigit(static_cast<unsigned char>(plan[b - 1]))) --b;
  return b < p ? std::stoi(plan.substr(b, p - b)) : -1;
}

// A block with one large convolution and a squeeze-excitation tail. The tail's 1x1
// convolutions on the pooled values (1024 multiply-adds each) run on one thread, the large
// convolution on the whole team; results are the reference kernels' either way.
G large_conv_small_tail() {
  G b;
  auto x = b.in("x", {1, 64, 56, 56});
  auto big = b.op("Relu", {b.conv(x, 64, 64, 3)});  // 115M multiply-adds
  auto se = b.op("GlobalAveragePool", {big});
  se = b.op("Relu", {b.conv(se, 64, 16, 1)});
  se = b.op("Sigmoid", {b.conv(se, 16, 64, 1)});
  b.out(b.op("Mul", {big, se}));
  return b;
}

TEST(GraphCompiler, SmallPrimitivesRunOnOneThreadLargeOnesOnTheTeam) {
  G b = large_conv_small_tail();
  const std::string plan = check(b.g, {random({1, 64, 56, 56}, 31)});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
  const int serial = primitives(plan, "serial");
  EXPECT_GE(serial, 2) << plan;  // the two 1x1 convolutions at least
  EXPECT_LT(serial, total_primitives(plan)) << plan;  // not the large convolution
}

int threads_of_this_process() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) n += !e.path().empty();
  return n;
}

// Compiling a region (its weights are reordered in parallel) on a fresh thread, as a client's
// thread compiling, starts no thread: the compiling thread is thread 0 of regions on the
// engine's pool, which already runs (an OpenMP team of its own per calling thread was what
// libgomp gave, and with more threads than cores every barrier slept in the kernel).
TEST(GraphCompiler, CompilingARegionStartsNoOpenMpTeam) {
  if (!std::filesystem::exists("/proc/self/task")) GTEST_SKIP() << "no /proc/self/task here";
  tensord::cpu::ThreadPool::get();  // started by the first cpu work of the process
  G b = large_conv_small_tail();
  std::vector<TensorType> types = {{DType::kFloat32, {1, 64, 56, 56}}};
  int before = 0, after = 0;
  std::string plan;
  // A fresh thread, as a client's thread compiling: its OpenMP team would be new.
  std::thread t([&] {
    before = threads_of_this_process();
    auto p = describe_compiled(b.g, types, CompileOptions{true});
    plan = p.ok() ? *p : p.status().to_string();
    after = threads_of_this_process();
  });
  t.join();
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
  EXPECT_EQ(after, before) << "compiling started " << after - before << " threads\n" << plan;
}

TEST(GraphCompiler, OneDnnRunsOnTheEnginesThreadPool) {
  if (cpu::ThreadPool::team_size() < 2) GTEST_SKIP() << "one thread: oneDNN forks no region";
  EXPECT_TRUE(cpu::openmp_bound_to_pool())
      << "oneDNN's GOMP_parallel went to another OpenMP runtime (libgomp): tensord's must be "
         "found first by the dynamic linker";
  const uint64_t before = cpu::openmp_regions_seen();
  G b = large_conv_small_tail();
  check(b.g, {random({1, 64, 56, 56}, 41)});
  EXPECT_GT(cpu::openmp_regions_seen(), before) << "the region's primitives forked nothing";
}

// The issue's gate: the number of threads in the process stays at the pool's size across
// compile, run and many sessions, each on a thread of its own (as a broker's gRPC threads or an
// embedded program's threads): no caller starts a team.
TEST(GraphCompiler, CompilesAndRunsOnManyThreadsStartNoThreads) {
  if (!std::filesystem::exists("/proc/self/task")) GTEST_SKIP() << "no /proc/self/task here";
  cpu::ThreadPool::get();
  auto client = make_local_client({});
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  G b = large_conv_small_tail();
  // Warm up: the engine's device threads exist from here on.
  {
    auto model = (*client)->load(b.g, "cpu:0");
    ASSERT_TRUE(model.ok()) << model.status().to_string();
  }
  const int before = threads_of_this_process();
  std::atomic<int> peak{0}, failures{0};
  constexpr int kThreads = 4;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int s = 0; s < 3; ++s) {
        G g = large_conv_small_tail();
        auto model = (*client)->load(g.g, "cpu:0");
        if (!model.ok()) {
          failures.fetch_add(1);
          return;
        }
        const HostTensor in = random({1, 64, 56, 56}, static_cast<uint32_t>(100 + t * 10 + s));
        auto h = (*client)->upload(in.view(), "cpu:0");
        if (!h.ok()) {
          failures.fetch_add(1);
          return;
        }
        auto out = (*client)->run(*model, {*h});
        if (!out.ok() || !(*client)->read((*out)[0]).ok()) failures.fetch_add(1);
        int now = threads_of_this_process(), p = peak.load();
        while (now > p && !peak.compare_exchange_weak(p, now)) {
        }
      }
    });
  }
  for (auto& th : ts) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(peak.load(), before + kThreads)
      << "the callers' own threads and no more: " << cpu::ThreadPool::get().stats().workers
      << " pool workers";
  EXPECT_EQ(threads_of_this_process(), before);
  EXPECT_EQ(cpu::ThreadPool::get().stats().workers, cpu::ThreadPool::team_size() - 1);
}

TEST(GraphCompiler, SerialWorkLimitFromTheEnvironment) {
  G b = large_conv_small_tail();
  // Everything below 10^9 work units: every primitive serial, same results.
  ASSERT_EQ(setenv("TENSORD_SERIAL_WORK_K", "1000000", 1), 0);
  const std::string all = check(b.g, {random({1, 64, 56, 56}, 32)});
  EXPECT_EQ(primitives(all, "serial"), total_primitives(all)) << all;
  // Below 1000: nothing here is that small, every primitive on the team.
  ASSERT_EQ(setenv("TENSORD_SERIAL_WORK_K", "1", 1), 0);
  const std::string none = check(b.g, {random({1, 64, 56, 56}, 33)});
  EXPECT_EQ(primitives(none, "serial"), 0) << none;
  unsetenv("TENSORD_SERIAL_WORK_K");
}


// A classifier over 2,048 features (ResNet-50's) is summed in chunks of 128: one fp32 chain
// over all of K drifts by ~1e-5 on logits of ~8 (non-negative features after ReLU), enough
// to fail plaidbench's atol 1e-6 on logits near zero. Against the same features' products
// summed in double, the region's logits must be at least twice as accurate as one fp32 chain.
TEST(GraphCompiler, LongClassifierDotProductIsSummedInChunks) {
  const int64_t batch = 8, k = 2048, n = 64;
  G b;
  auto x = b.in("x", {batch, 16, 4, 4});
  auto pooled = b.op("GlobalAveragePool", {b.op("Relu", {b.conv(x, 16, k, 1)})});
  auto flat = b.op("Flatten", {pooled}, {{"axis", int64_t{1}}});
  const HostTensor w = random({n, k}, 51), bias = random({n}, 52);
  auto logits = b.op("Gemm", {flat, b.constant(w), b.constant(bias)}, {{"transB", int64_t{1}}});
  b.out(logits);
  b.out(flat);
  const HostTensor input = random({batch, 16, 4, 4}, 50);
  const std::string plan = check(b.g, {input});
  EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
  EXPECT_EQ(primitives(plan, "matmul"), 2) << plan;  // the partial products, their sum
  EXPECT_EQ(primitives(plan, "inner_product"), 0) << plan;

  auto outs = run_graph_on_host(b.g, {input}, CompileOptions{true});
  ASSERT_TRUE(outs.ok()) << outs.status().to_string();
  ASSERT_TRUE((*outs)[0].ok() && (*outs)[1].ok());
  const float* y = (*outs)[0]->data<float>();
  const float* f = (*outs)[1]->data<float>();
  const float* pw = w.data<float>();
  double fused_err = 0, chain_err = 0;
  for (int64_t i = 0; i < batch; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double exact = bias.data<float>()[j];
      float chain = 0;
      for (int64_t q = 0; q < k; ++q) {
        exact += double(f[i * k + q]) * double(pw[j * k + q]);
        chain += f[i * k + q] * pw[j * k + q];
      }
      chain += bias.data<float>()[j];
      fused_err = std::max(fused_err, std::fabs(double(y[i * n + j]) - exact));
      chain_err = std::max(chain_err, std::fabs(double(chain) - exact));
    }
  }
  EXPECT_GT(chain_err, 0.0);
  EXPECT_LE(fused_err, 0.5 * chain_err) << "fp32 chain " << chain_err << "\n" << plan;
}

// The chunked sum reads a flattened N x C x H x W value in NCHW order (the weights' order),
// keeps a following Relu as its post-op, and leaves a short product (K < 1024) to the inner
// product; so are products of fewer than 4 rows (matrix-vector products, bound by reading the
// weights), whatever their length.
TEST(GraphCompiler, ChunkedDotProductOverAFlattenedMapWithPostOp) {
  for (int64_t batch : {4, 1}) {
    G b;
    auto x = b.in("x", {batch, 8, 4, 4});
    auto c = b.op("Relu", {b.conv(x, 8, 64, 3)});
    auto flat = b.op("Flatten", {c}, {{"axis", int64_t{1}}});  // K = 64 * 4 * 4 = 1024
    auto h = b.op("Relu", {b.op("Gemm", {flat, b.constant(random({40, 1024}, 61)),
                                          b.constant(random({40}, 62))},
                                    {{"transB", int64_t{1}}})});
    auto logits = b.op("Gemm", {h, b.constant(random({10, 40}, 63)), b.constant(random({10}, 64))},
                       {{"transB", int64_t{1}}});
    auto nobias = b.op("MatMul", {flat, b.constant(random({1024, 6}, 65))});
    b.out(logits);
    b.out(nobias);
    const std::string plan = check(b.g, {random({batch, 8, 4, 4}, 60)});
    EXPECT_EQ(count(plan, "OneDnnRegion"), 1) << plan;
    EXPECT_EQ(primitives(plan, "matmul"), batch == 4 ? 4 : 0) << plan;
    EXPECT_EQ(primitives(plan, "inner_product"), batch == 4 ? 1 : 3) << plan;
    EXPECT_EQ(plan.find("Relu '"), std::string::npos) << plan;
  }
}

// Op kinds (core/op_registry.h) are the one answer to "is this op element-wise": every op the
// table names is registered, and every op a cpu fuser computes element-wise is element-wise
// or broadcast by its schema (a table that drifts from the schemas fails here).
TEST(OpKinds, EveryFusedElementwiseOpIsElementwiseByItsSchema) {
  const OpRegistry& r = OpRegistry::global();
  int listed = 0;
  for (const auto& name : r.op_names()) {
    const OpSchema* s = r.find(name);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->kind, op_kind(name)) << name;
    listed += s->kind != OpKind::kOpaque;
  }
  EXPECT_GT(listed, 100);
  for (const char* op : {"Relu", "Add", "ReduceSum", "MatMul", "Transpose", "LSTM"})
    EXPECT_NE(r.find(op), nullptr) << op;
  EXPECT_EQ(op_kind("Relu"), OpKind::kElementwise);
  EXPECT_EQ(op_kind("Where"), OpKind::kBroadcast);
  EXPECT_EQ(op_kind("Softmax"), OpKind::kReduction);
  EXPECT_EQ(op_kind("Conv"), OpKind::kContraction);
  EXPECT_EQ(op_kind("Gather"), OpKind::kDataMovement);
  EXPECT_EQ(op_kind("LSTM"), OpKind::kOpaque);
  for (const auto& list : {cpu::elementwise_program_ops(), cpu::onednn_elementwise_ops()})
    for (const auto& op : list) {
      EXPECT_NE(r.find(op), nullptr) << op;
      EXPECT_TRUE(is_elementwise_kind(op_kind(op))) << op << " is " << op_kind_name(op_kind(op));
    }
}

}  // namespace
}  // namespace tensord
