// Canonical forms of export variants (engine/canonicalize.h): each pass rewrites the form an
// exporter writes (ONNX graphs as PyTorch 1.13 exports them before opsets 14 and 17), leaves
// alone what it cannot prove (other readers, other constants), can be switched off, and the
// fast path on the rewritten graph agrees with the reference kernels on the original.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>

#include "engine/canonicalize.h"
#include "engine/executor.h"

namespace tensord {
namespace {

Node node(std::string op, std::vector<std::string> in, std::vector<std::string> out,
          AttributeMap attrs = {}) {
  Node n;
  n.name = out.empty() ? op : out[0] + "_node";
  n.op = std::move(op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

HostTensor random_tensor(Shape shape, uint32_t seed) {
  HostTensor t(DType::kFloat32, shape);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = d(rng);
  return t;
}

std::vector<std::string> ops_of(const Graph& g) {
  std::vector<std::string> ops;
  for (const auto& n : g.nodes) ops.push_back(n.op);
  return ops;
}

// The fast path (canonicalised at compile) against the reference kernels on the graph as given.
void expect_same_as_reference(const Graph& g, const std::vector<HostTensor>& inputs,
                              float tol = 1e-5f) {
  CompileOptions ref;
  ref.fuse = false;
  auto want = run_graph_on_host(g, inputs, ref);
  auto got = run_graph_on_host(g, inputs);
  ASSERT_TRUE(want.ok()) << want.status().message();
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_EQ(want->size(), got->size());
  for (size_t k = 0; k < want->size(); ++k) {
    ASSERT_TRUE((*want)[k].ok()) << (*want)[k].status().message();
    ASSERT_TRUE((*got)[k].ok()) << (*got)[k].status().message();
    const HostTensor& a = *(*want)[k];
    const HostTensor& b = *(*got)[k];
    ASSERT_EQ(a.shape(), b.shape());
    for (int64_t i = 0; i < a.numel(); ++i)
      ASSERT_NEAR(a.data<float>()[i], b.data<float>()[i],
                  tol * (1 + std::fabs(a.data<float>()[i])))
          << "element " << i;
  }
}

// Mul(x, HardSigmoid(x)) as torch.onnx.export writes nn.Hardswish at opset 13.
Graph hardswish_graph(float alpha = 1.0f / 6, bool swapped = false) {
  Graph g;
  g.inputs = {{"x", {DType::kFloat32, {1, 4, 5, 5}}}};
  g.outputs = {{"y", {DType::kFloat32, {1, 4, 5, 5}}}};
  g.nodes.push_back(node("HardSigmoid", {"x"}, {"hs"}, {{"alpha", alpha}, {"beta", 0.5f}}));
  g.nodes.push_back(swapped ? node("Mul", {"hs", "x"}, {"y"}) : node("Mul", {"x", "hs"}, {"y"}));
  return g;
}

TEST(Canonicalize, HardSigmoidTimesXBecomesHardSwish) {
  for (bool swapped : {false, true}) {
    Graph g = hardswish_graph(1.0f / 6, swapped);
    Graph c = g;
    auto stats = canonicalize(c);
    EXPECT_EQ(stats.hardswish, 1);
    ASSERT_EQ(ops_of(c), std::vector<std::string>{"HardSwish"});
    EXPECT_EQ(c.nodes[0].inputs, std::vector<std::string>{"x"});
    EXPECT_EQ(c.nodes[0].outputs, std::vector<std::string>{"y"});
    expect_same_as_reference(g, {random_tensor({1, 4, 5, 5}, 1)});
  }
}

TEST(Canonicalize, HardSwishLeavesOtherAlphasAndSharedHardSigmoids) {
  Graph g = hardswish_graph(0.2f);  // HardSigmoid's default alpha: not HardSwish
  EXPECT_EQ(canonicalize(g).hardswish, 0);
  EXPECT_EQ(ops_of(g), (std::vector<std::string>{"HardSigmoid", "Mul"}));
  // The HardSigmoid read elsewhere too: it stays for that reader, the Mul still becomes
  // HardSwish.
  Graph s = hardswish_graph();
  s.outputs.push_back({"hs", {DType::kFloat32, {1, 4, 5, 5}}});
  EXPECT_EQ(canonicalize(s).hardswish, 1);
  EXPECT_EQ(ops_of(s), (std::vector<std::string>{"HardSigmoid", "HardSwish"}));
  expect_same_as_reference(hardswish_graph(), {random_tensor({1, 4, 5, 5}, 2)});
}

TEST(Canonicalize, PassesCanBeSwitchedOff) {
  Graph g = hardswish_graph();
  CanonicalizeOptions off;
  off.hardswish = false;
  EXPECT_EQ(canonicalize(g, off).hardswish, 0);
  EXPECT_EQ(ops_of(g), (std::vector<std::string>{"HardSigmoid", "Mul"}));
  setenv("TENSORD_CANONICAL", "-hardswish,-layernorm", 1);
  const auto env = CanonicalizeOptions::from_env();
  unsetenv("TENSORD_CANONICAL");
  EXPECT_FALSE(env.hardswish);
  EXPECT_FALSE(env.layernorm);
  EXPECT_TRUE(env.silu);
  setenv("TENSORD_CANONICAL", "0", 1);
  const auto none = CanonicalizeOptions::from_env();
  unsetenv("TENSORD_CANONICAL");
  EXPECT_FALSE(none.hardswish || none.silu || none.layernorm);
}

TEST(Canonicalize, SiluGetsItsOwnSigmoidInTheFusedOrder) {
  // Sigmoid(x) read by two Muls, one of them Mul(Sigmoid(x), x): each Mul of x gets a Sigmoid
  // of its own, second operand.
  Graph g;
  g.inputs = {{"x", {DType::kFloat32, {2, 16}}}, {"z", {DType::kFloat32, {2, 16}}}};
  g.outputs = {{"y", {DType::kFloat32, {2, 16}}}, {"w", {DType::kFloat32, {2, 16}}}};
  g.nodes.push_back(node("Sigmoid", {"x"}, {"s"}));
  g.nodes.push_back(node("Mul", {"s", "x"}, {"y"}));
  g.nodes.push_back(node("Mul", {"s", "z"}, {"w"}));
  Graph c = g;
  EXPECT_EQ(canonicalize(c).silu, 1);
  ASSERT_EQ(ops_of(c), (std::vector<std::string>{"Sigmoid", "Sigmoid", "Mul", "Mul"}));
  EXPECT_EQ(c.nodes[2].inputs[0], "x");
  EXPECT_EQ(c.nodes[1].outputs[0], c.nodes[2].inputs[1]);
  EXPECT_EQ(c.nodes[1].inputs[0], "x");
  EXPECT_EQ(c.nodes[3].inputs, (std::vector<std::string>{"s", "z"}));
  // Already canonical: nothing to do.
  Graph d;
  d.inputs = {{"x", {DType::kFloat32, {2, 16}}}};
  d.outputs = {{"y", {DType::kFloat32, {2, 16}}}};
  d.nodes.push_back(node("Sigmoid", {"x"}, {"s"}));
  d.nodes.push_back(node("Mul", {"x", "s"}, {"y"}));
  EXPECT_EQ(canonicalize(d).silu, 0);
  expect_same_as_reference(g, {random_tensor({2, 16}, 3), random_tensor({2, 16}, 4)});
}

// LayerNorm as BERT code before opset 17 exports it: ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/
// Div, then Mul gamma, Add beta (constants as initializers, eps and 2 as Constant nodes).
Graph layernorm_graph(bool with_beta, float exponent = 2.0f) {
  Graph g;
  const int64_t c = 32;
  g.inputs = {{"x", {DType::kFloat32, {2, 3, c}}}};
  g.outputs = {{"y", {DType::kFloat32, {2, 3, c}}}};
  AttributeMap mean = {{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{1}}};
  g.nodes.push_back(node("ReduceMean", {"x"}, {"u"}, mean));
  g.nodes.push_back(node("Sub", {"x", "u"}, {"d"}));
  g.nodes.push_back(
      node("Constant", {}, {"two"}, {{"value", HostTensor::scalar<float>(exponent)}}));
  g.nodes.push_back(node("Pow", {"d", "two"}, {"p"}));
  g.nodes.push_back(node("ReduceMean", {"p"}, {"v"}, mean));
  g.nodes.push_back(node("Constant", {}, {"eps"}, {{"value", HostTensor::scalar<float>(1e-5f)}}));
  g.nodes.push_back(node("Add", {"v", "eps"}, {"e"}));
  g.nodes.push_back(node("Sqrt", {"e"}, {"s"}));
  g.nodes.push_back(node("Div", {"d", "s"}, {"n"}));
  g.nodes.push_back(node("Mul", {"n", "gamma"}, {with_beta ? "m" : "y"}));
  if (with_beta) g.nodes.push_back(node("Add", {"m", "beta"}, {"y"}));
  g.initializers["gamma"] = random_tensor({c}, 7);
  if (with_beta) g.initializers["beta"] = random_tensor({c}, 8);
  return g;
}

TEST(Canonicalize, DecomposedLayerNormBecomesLayerNormalization) {
  for (bool with_beta : {true, false}) {
    Graph g = layernorm_graph(with_beta);
    Graph c = g;
    EXPECT_EQ(canonicalize(c).layernorm, 1);
    // The Constant nodes stay (dead, for the compiler to drop); the chain is one node.
    ASSERT_EQ(ops_of(c), (std::vector<std::string>{"Constant", "Constant", "LayerNormalization"}));
    const Node& ln = c.nodes[2];
    EXPECT_EQ(ln.inputs, with_beta ? (std::vector<std::string>{"x", "gamma", "beta"})
                                   : (std::vector<std::string>{"x", "gamma"}));
    EXPECT_EQ(ln.outputs, std::vector<std::string>{"y"});
    EXPECT_FLOAT_EQ(*ln.attrs.at("epsilon").get_if<float>(), 1e-5f);
    expect_same_as_reference(g, {random_tensor({2, 3, 32}, 9)}, 1e-4f);
  }
}

TEST(Canonicalize, LayerNormScaleBehindIdentity) {
  // PyTorch's export of a second LayerNorm with the same (fresh) weights: Identity(gamma).
  Graph g = layernorm_graph(true);
  g.nodes.push_back(node("Identity", {"gamma"}, {"gamma2"}));
  for (auto& n : g.nodes)
    if (n.op == "Mul" && n.inputs[1] == "gamma") n.inputs[1] = "gamma2";
  Graph c = g;
  EXPECT_EQ(canonicalize(c).layernorm, 1);
  for (const auto& n : c.nodes) {
    if (n.op == "LayerNormalization") {
      EXPECT_EQ(n.inputs[1], "gamma");
    }
  }
  expect_same_as_reference(g, {random_tensor({2, 3, 32}, 10)}, 1e-4f);
}

TEST(Canonicalize, LayerNormLeavesWhatItCannotProve) {
  Graph cube = layernorm_graph(true, 3.0f);  // Pow 3: not a variance
  EXPECT_EQ(canonicalize(cube).layernorm, 0);
  Graph shared = layernorm_graph(true);  // the centred value read elsewhere too
  shared.outputs.push_back({"d", {DType::kFloat32, {2, 3, 32}}});
  EXPECT_EQ(canonicalize(shared).layernorm, 0);
  Graph axis = layernorm_graph(true);  // the mean over another axis
  axis.nodes[0].attrs["axes"] = std::vector<int64_t>{1};
  EXPECT_EQ(canonicalize(axis).layernorm, 0);
  CanonicalizeOptions off;
  off.layernorm = false;
  Graph g = layernorm_graph(true);
  EXPECT_EQ(canonicalize(g, off).layernorm, 0);
  EXPECT_EQ(g.nodes.size(), 11u);
}

// F.pad(x, (4, 0)) before a dilated Conv1d, as a causal convolution exports.
Graph pad_conv_graph(std::vector<int64_t> pads, const char* mode = "constant") {
  Graph g;
  g.inputs = {{"x", {DType::kFloat32, {2, 4, 20}}}};
  g.outputs = {{"y", {DType::kFloat32, {2, 4, 20}}}};
  g.initializers["pads"] = HostTensor::from_vector<int64_t>(pads, {6});
  g.initializers["w"] = random_tensor({4, 4, 3}, 11);
  g.initializers["b"] = random_tensor({4}, 12);
  g.nodes.push_back(node("Pad", {"x", "pads"}, {"p"}, {{"mode", std::string(mode)}}));
  g.nodes.push_back(node("Conv", {"p", "w", "b"}, {"y"},
                         {{"dilations", std::vector<int64_t>{2}},
                          {"kernel_shape", std::vector<int64_t>{3}}}));
  return g;
}

TEST(Canonicalize, ZeroPadBeforeConvBecomesConvPads) {
  Graph g = pad_conv_graph({0, 0, 4, 0, 0, 0});
  Graph c = g;
  EXPECT_EQ(canonicalize(c).pad_conv, 1);
  ASSERT_EQ(ops_of(c), std::vector<std::string>{"Conv"});
  EXPECT_EQ(c.nodes[0].inputs[0], "x");
  EXPECT_EQ(*c.nodes[0].attrs.at("pads").get_if<std::vector<int64_t>>(),
            (std::vector<int64_t>{4, 0}));
  expect_same_as_reference(g, {random_tensor({2, 4, 20}, 13)}, 1e-4f);
  // Not a zero pad of the spatial axes: left alone.
  Graph channels = pad_conv_graph({0, 1, 4, 0, 0, 0});
  Graph reflect = pad_conv_graph({0, 0, 4, 0, 0, 0}, "reflect");
  EXPECT_EQ(canonicalize(channels).pad_conv, 0);
  EXPECT_EQ(canonicalize(reflect).pad_conv, 0);
  CanonicalizeOptions off;
  off.pad_conv = false;
  Graph o = pad_conv_graph({0, 0, 4, 0, 0, 0});
  EXPECT_EQ(canonicalize(o, off).pad_conv, 0);
}

TEST(Canonicalize, ZeroPadBeforeAnAveragePoolCountingPadsBecomesItsPads) {
  // avg_pool2d(x, 3, stride 1, padding 1, count_include_pad=True) as exported before opset 19.
  auto graph = [](AttributeMap pool) {
    Graph g;
    g.inputs = {{"x", {DType::kFloat32, {1, 3, 7, 7}}}};
    g.outputs = {{"y", {DType::kFloat32, {1, 3, 7, 7}}}};
    g.initializers["pads"] = HostTensor::from_vector<int64_t>({0, 0, 1, 1, 0, 0, 1, 1}, {8});
    g.nodes.push_back(node("Pad", {"x", "pads"}, {"p"}));
    pool["kernel_shape"] = std::vector<int64_t>{3, 3};
    g.nodes.push_back(node("AveragePool", {"p"}, {"y"}, pool));
    return g;
  };
  for (int64_t include : {0, 1}) {
    Graph g = graph({{"count_include_pad", include}});
    Graph c = g;
    EXPECT_EQ(canonicalize(c).pad_conv, 1);
    ASSERT_EQ(ops_of(c), std::vector<std::string>{"AveragePool"});
    EXPECT_EQ(*c.nodes[0].attrs.at("pads").get_if<std::vector<int64_t>>(),
              (std::vector<int64_t>{1, 1, 1, 1}));
    EXPECT_EQ(*c.nodes[0].attrs.at("count_include_pad").get_if<int64_t>(), 1);
    expect_same_as_reference(g, {random_tensor({1, 3, 7, 7}, 31)});
  }
  // Pads of its own not counted, or ceil_mode: left alone.
  Graph own = graph({{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  own.outputs[0].type.shape = {1, 3, 9, 9};
  EXPECT_EQ(canonicalize(own).pad_conv, 0);
  Graph ceil = graph({{"ceil_mode", int64_t{1}}, {"count_include_pad", int64_t{1}}});
  EXPECT_EQ(canonicalize(ceil).pad_conv, 0);
}

// The forward MaxPool and its gradient's MaxPool with Indices (as td.grad writes them), a
// Relu computed twice, and what must stay: random ops, a duplicate the graph returns.
Graph duplicates_graph() {
  Graph g;
  g.inputs = {{"x", {DType::kFloat32, {2, 3, 6, 6}}}};
  g.outputs = {{"s", {DType::kFloat32, {2, 3, 3, 3}}},
               {"t", {DType::kFloat32, {2, 3, 3, 3}}},
               {"fi", {DType::kFloat32, {2, 3, 3, 3}}},
               {"r3", {DType::kFloat32, {2, 3, 3, 3}}}};
  const AttributeMap pool = {{"kernel_shape", std::vector<int64_t>{2, 2}},
                             {"strides", std::vector<int64_t>{2, 2}}};
  g.nodes.push_back(node("MaxPool", {"x"}, {"y1"}, pool));
  g.nodes.push_back(node("Relu", {"y1"}, {"r1"}));
  g.nodes.push_back(node("Relu", {"y1"}, {"r2"}));
  g.nodes.push_back(node("Add", {"r1", "r2"}, {"s"}));
  g.nodes.push_back(node("MaxPool", {"x"}, {"y2", "idx"}, pool));
  g.nodes.push_back(node("Add", {"y2", "r1"}, {"t"}));
  g.nodes.push_back(node("Cast", {"idx"}, {"fi"}, {{"to", int64_t{1}}}));
  g.nodes.push_back(node("Relu", {"y1"}, {"r3"}));  // the same Relu, but a graph output
  g.nodes.push_back(node("RandomUniformLike", {"x"}, {"u1"}));
  g.nodes.push_back(node("RandomUniformLike", {"x"}, {"u2"}));
  return g;
}

TEST(Canonicalize, CommonSubexpressionsAreComputedOnce) {
  Graph g = duplicates_graph();
  Graph c = g;
  EXPECT_EQ(canonicalize(c).cse, 2);
  EXPECT_EQ(ops_of(c), (std::vector<std::string>{"MaxPool", "Relu", "Add", "Add", "Cast", "Relu",
                                                 "RandomUniformLike", "RandomUniformLike"}));
  // The forward pool now also gives the Indices its gradient asked for.
  EXPECT_EQ(c.nodes[0].outputs, (std::vector<std::string>{"y1", "idx"}));
  EXPECT_EQ(c.nodes[2].inputs, (std::vector<std::string>{"r1", "r1"}));
  EXPECT_EQ(c.nodes[3].inputs, (std::vector<std::string>{"y1", "r1"}));
  // Other attributes are another computation.
  Graph other = duplicates_graph();
  other.nodes[4].attrs["strides"] = std::vector<int64_t>{1, 1};
  other.outputs[1].type.shape = {2, 3, 5, 5};
  other.outputs[2].type.shape = {2, 3, 5, 5};
  other.nodes[5] = node("Relu", {"y2"}, {"t"});
  EXPECT_EQ(canonicalize(other).cse, 1);
  CanonicalizeOptions off;
  off.cse = false;
  Graph o = duplicates_graph();
  EXPECT_EQ(canonicalize(o, off).cse, 0);
  EXPECT_EQ(o.nodes.size(), g.nodes.size());
  g.nodes.resize(8);  // the random ones out: the outputs are compared with the reference's
  expect_same_as_reference(g, {random_tensor({2, 3, 6, 6}, 21)});
}

// ---- gelu: the erf GELU as PyTorch exports nn.GELU before opset 20 ----

// y = GELU(x) in the three orders exporters write: (x * (1 + erf(x / sqrt2))) * 0.5,
// (x * 0.5) * (1 + erf(x * 1/sqrt2)), and 0.5 * ((1 + erf) * x) with operands swapped.
// Identity of an initializer (PyTorch's export of a weight equal to an earlier one): readers
// read the initializer; an Identity the graph returns, one a subgraph reads, and one of an
// initializer that is also a graph input stay.
TEST(Canonicalize, IdentityOfAnInitializerIsReadAsTheInitializer) {
  Graph g;
  g.name = "identity";
  g.inputs = {{"x", {DType::kFloat32, {3, 4}}}, {"w_in", {DType::kFloat32, {4, 5}}}};
  g.initializers["w"] = random_tensor({4, 5}, 71);
  g.initializers["b"] = random_tensor({5}, 72);
  g.initializers["w_in"] = random_tensor({4, 5}, 73);  // overridable: also a graph input
  g.outputs = {{"y", {DType::kFloat32, {3, 5}}}, {"z", {DType::kFloat32, {3, 5}}},
               {"b2", {DType::kFloat32, {5}}}};
  g.nodes.push_back(node("Identity", {"w"}, {"w2"}));
  g.nodes.push_back(node("Identity", {"b"}, {"b1"}));
  g.nodes.push_back(node("Identity", {"b"}, {"b2"}));  // a graph output
  g.nodes.push_back(node("Identity", {"w_in"}, {"w3"}));
  g.nodes.push_back(node("MatMul", {"x", "w2"}, {"m"}));
  g.nodes.push_back(node("Add", {"m", "b1"}, {"y"}));
  g.nodes.push_back(node("MatMul", {"x", "w3"}, {"z"}));
  Graph c = g;
  EXPECT_EQ(canonicalize(c).identity, 2);
  EXPECT_EQ(ops_of(c), (std::vector<std::string>{"Identity", "Identity", "MatMul", "Add",
                                                 "MatMul"}));
  EXPECT_EQ(c.nodes[2].inputs, (std::vector<std::string>{"x", "w"}));
  EXPECT_EQ(c.nodes[3].inputs, (std::vector<std::string>{"m", "b"}));
  EXPECT_EQ(c.nodes[4].inputs, (std::vector<std::string>{"x", "w3"}));
  CanonicalizeOptions off;
  off.identity = false;
  Graph o = g;
  EXPECT_EQ(canonicalize(o, off).identity, 0);
  EXPECT_EQ(o.nodes.size(), g.nodes.size());
  expect_same_as_reference(g, {random_tensor({3, 4}, 74), random_tensor({4, 5}, 75)});
}

Graph gelu_graph(int form) {
  Graph g;
  g.inputs = {{"x", {DType::kFloat32, {3, 40}}}};
  g.outputs = {{"y", {DType::kFloat32, {3, 40}}}};
  g.initializers["half"] = HostTensor::scalar(0.5f);
  g.initializers["one"] = HostTensor::scalar(1.0f);
  g.initializers["sqrt2"] = HostTensor::scalar(1.4142135f);
  g.initializers["rsqrt2"] = HostTensor::scalar(0.70710678f);
  if (form == 1) {
    g.nodes.push_back(node("Mul", {"x", "half"}, {"h"}));
    g.nodes.push_back(node("Mul", {"x", "rsqrt2"}, {"s"}));
  } else {
    g.nodes.push_back(node("Div", {"x", "sqrt2"}, {"s"}));
  }
  g.nodes.push_back(node("Erf", {"s"}, {"e"}));
  g.nodes.push_back(node("Add", form == 2 ? std::vector<std::string>{"one", "e"}
                                          : std::vector<std::string>{"e", "one"}, {"a"}));
  if (form == 0) {
    g.nodes.push_back(node("Mul", {"x", "a"}, {"m"}));
    g.nodes.push_back(node("Mul", {"m", "half"}, {"y"}));
  } else if (form == 1) {
    g.nodes.push_back(node("Mul", {"h", "a"}, {"y"}));
  } else {
    g.nodes.push_back(node("Mul", {"a", "x"}, {"m"}));
    g.nodes.push_back(node("Mul", {"half", "m"}, {"y"}));
  }
  return g;
}

TEST(Canonicalize, DecomposedErfGeluBecomesGelu) {
  for (int form : {0, 1, 2}) {
    SCOPED_TRACE(form);
    Graph g = gelu_graph(form);
    Graph c = g;
    EXPECT_EQ(canonicalize(c).gelu, 1);
    ASSERT_EQ(ops_of(c), std::vector<std::string>{"Gelu"});
    EXPECT_EQ(c.nodes[0].inputs, std::vector<std::string>{"x"});
    EXPECT_EQ(c.nodes[0].outputs, std::vector<std::string>{"y"});
    expect_same_as_reference(g, {random_tensor({3, 40}, 50)}, 1e-5f);
  }
}

TEST(Canonicalize, GeluLeavesWhatItCannotProve) {
  {  // the Erf's output is read elsewhere too
    Graph g = gelu_graph(0);
    g.outputs.push_back({"e", {DType::kFloat32, {3, 40}}});
    EXPECT_EQ(canonicalize(g).gelu, 0);
  }
  {  // another constant: not a GELU
    Graph g = gelu_graph(0);
    g.initializers["half"] = HostTensor::scalar(0.25f);
    EXPECT_EQ(canonicalize(g).gelu, 0);
  }
  {  // x * 0.5 read by something else as well: that Mul stays, the pattern is left alone
    Graph g = gelu_graph(1);
    g.nodes.push_back(node("Neg", {"h"}, {"z"}));
    g.outputs.push_back({"z", {DType::kFloat32, {3, 40}}});
    EXPECT_EQ(canonicalize(g).gelu, 0);
  }
  CanonicalizeOptions off;
  off.gelu = false;
  Graph g = gelu_graph(0);
  EXPECT_EQ(canonicalize(g, off).gelu, 0);
  EXPECT_EQ(g.nodes.size(), 5u);
}

// ---- bnfold: an inference BatchNormalization folded into the contraction before it ----

HostTensor positive_tensor(Shape shape, uint32_t seed) {
  HostTensor t = random_tensor(std::move(shape), seed);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.mutable_data<float>()[i] = 0.5f + std::fabs(t.mutable_data<float>()[i]);
  return t;
}

// x -> `op` (weights "w", bias "b" when `bias`) -> BatchNormalization -> Relu -> y.
Graph bn_graph(const std::string& op, bool bias, AttributeMap attrs = {}) {
  Graph g;
  int64_t m = 6;
  Shape xs, ws, ys;
  if (op == "Conv") {
    xs = {2, 4, 7, 7}, ws = {m, 4, 3, 3}, ys = {2, m, 5, 5};
  } else if (op == "ConvTranspose") {  // group 2: each group's 2 inputs make 3 outputs
    xs = {2, 4, 5, 5}, ws = {4, 3, 3, 3}, ys = {2, m, 7, 7};
    attrs["group"] = int64_t{2};
  } else {  // Gemm
    const bool tb = attrs.count("transB") > 0;
    xs = {3, 5}, ws = tb ? Shape{m, 5} : Shape{5, m}, ys = {3, m};
  }
  g.inputs = {{"x", {DType::kFloat32, xs}}};
  g.outputs = {{"y", {DType::kFloat32, ys}}};
  g.initializers["w"] = random_tensor(ws, 31);
  std::vector<std::string> in = {"x", "w"};
  if (bias) {
    g.initializers["b"] = random_tensor({m}, 32);
    in.push_back("b");
  }
  g.initializers["scale"] = random_tensor({m}, 33);
  g.initializers["shift"] = random_tensor({m}, 34);
  g.initializers["mean"] = random_tensor({m}, 35);
  g.initializers["var"] = positive_tensor({m}, 36);
  g.nodes.push_back(node(op, in, {"c"}, attrs));
  g.nodes.push_back(node("BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"n"},
                         {{"epsilon", 1e-3f}}));
  g.nodes.push_back(node("Relu", {"n"}, {"y"}));
  return g;
}

// What the compiler makes of `g` on the cpu: with every region compiler off (per_node), a
// step per node, named; else its steps as compiled.
std::string described(const Graph& g, bool per_node,
                      std::shared_ptr<CompileBudget> budget = nullptr) {
  if (per_node) {
    setenv("TENSORD_NO_ONEDNN_REGIONS", "1", 1);
    setenv("TENSORD_NO_ELEMENTWISE_FUSION", "1", 1);
    setenv("TENSORD_NO_LINEAR_FUSION", "1", 1);
  }
  std::unique_ptr<Device> host;
  for (auto& backend : create_backends())
    if (backend->name() == "cpu" && !host) host = std::move(backend->enumerate().front());
  CompileTarget target;
  target.device = host.get();
  target.host = host.get();
  target.budget = std::move(budget);
  std::vector<TensorType> in;
  for (const auto& i : g.inputs) in.push_back(i.type);
  auto exe = Executable::compile(g, in, target, CompileOptions{});
  unsetenv("TENSORD_NO_ONEDNN_REGIONS");
  unsetenv("TENSORD_NO_ELEMENTWISE_FUSION");
  unsetenv("TENSORD_NO_LINEAR_FUSION");
  EXPECT_TRUE(exe.ok()) << exe.status().message();
  return exe.ok() ? (*exe)->describe() : "";
}

std::string described_per_node(const Graph& g, std::shared_ptr<CompileBudget> budget = nullptr) {
  return described(g, true, std::move(budget));
}

// The first output of `g` on the fast path and on the reference kernels.
std::pair<HostTensor, HostTensor> fast_and_reference(const Graph& g,
                                                     const std::vector<HostTensor>& inputs) {
  CompileOptions ref;
  ref.fuse = false;
  auto want = run_graph_on_host(g, inputs, ref);
  auto got = run_graph_on_host(g, inputs);
  EXPECT_TRUE(want.ok() && got.ok());
  if (!want.ok() || !got.ok()) return {};
  EXPECT_TRUE((*want)[0].ok() && (*got)[0].ok());
  if (!(*want)[0].ok() || !(*got)[0].ok()) return {};
  return {*(*got)[0], *(*want)[0]};
}

// The passes' view of it: folded on the typed graph, as the compiler does.
int folds(Graph& g, std::vector<bool>* dropped) {
  std::vector<TensorType> in;
  for (const auto& i : g.inputs) in.push_back(i.type);
  auto types = infer_graph(OpRegistry::global(), g, in);
  EXPECT_TRUE(types.ok()) << types.status().message();
  if (!types.ok()) return -1;
  return fold_affine(g, *types, dropped, CanonicalizeOptions{},
                     [](const std::string&, int64_t) { return true; });
}

TEST(Canonicalize, BatchNormFoldsIntoConvConvTransposeAndGemm) {
  struct Case {
    std::string op;
    bool bias;
    AttributeMap attrs;
  };
  const std::vector<Case> cases = {
      {"Conv", true, {}},
      {"Conv", false, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}},
      {"ConvTranspose", true, {}},
      {"ConvTranspose", false, {}},
      {"Gemm", true, {{"alpha", 0.5f}, {"beta", 2.0f}}},
      {"Gemm", false, {{"transB", int64_t{1}}}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.op + (c.bias ? " with bias" : " without bias"));
    Graph g = bn_graph(c.op, c.bias, c.attrs);
    if (c.op == "Conv" && !c.bias) g.outputs[0].type.shape = {2, 6, 7, 7};
    Graph f = g;
    std::vector<bool> dropped;
    ASSERT_EQ(folds(f, &dropped), 1);
    EXPECT_EQ(dropped, (std::vector<bool>{false, true, false}));
    // The contraction now makes the BatchNormalization's output from new constants.
    EXPECT_EQ(f.nodes[0].outputs[0], "n");
    ASSERT_EQ(f.nodes[0].inputs.size(), 3u);
    EXPECT_NE(f.nodes[0].inputs[1], "w");
    if (c.op == "Gemm") {
      const float* beta = f.nodes[0].attrs.at("beta").get_if<float>();
      ASSERT_TRUE(beta);
      EXPECT_EQ(*beta, 1.0f);
    }
    // Compiled (folded) against the reference kernels on the graph as given.
    const Shape xs = g.inputs[0].type.shape;
    expect_same_as_reference(g, {random_tensor(xs, 37)}, 1e-4f);
    const std::string described = described_per_node(g);
    EXPECT_NE(described.find(c.op), std::string::npos) << described;
    EXPECT_EQ(described.find("BatchNormalization"), std::string::npos) << described;
  }
}

// Weights the graph computes from initializers, larger than the 64k elements any node folds
// at: float16 weights Cast to float, and weight normalisation (w = g * v / ||v||), as
// unfolded exports write them. They fold at compile time, so the convolution takes constant
// weights and the BatchNormalization folds into it: no Cast, Div, ReduceL2 or Mul is left
// to run (before, each ran every run on the reference kernels: ResNet-18 with float16 weights
// at 3.4x ONNX Runtime). A node that makes more than it reads (Expand) still folds only when
// small.
TEST(Canonicalize, LargeWeightMathFoldsAtCompileTime) {
  const Shape ws = {128, 64, 3, 3};  // 73,728 elements
  auto conv_bn = [](Graph& g, const std::string& w) {
    g.inputs = {{"x", {DType::kFloat32, {1, 64, 6, 6}}}};
    g.initializers["scale"] = random_tensor({128}, 31);
    g.initializers["shift"] = random_tensor({128}, 32);
    g.initializers["mean"] = random_tensor({128}, 33);
    HostTensor var = random_tensor({128}, 34);
    for (int64_t i = 0; i < var.numel(); ++i)
      var.mutable_data<float>()[i] = 0.5f + std::fabs(var.data<float>()[i]);
    g.initializers["var"] = var;
    g.nodes.push_back(node("Conv", {"x", w}, {"c"}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
    g.nodes.push_back(node("BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"n"}));
    g.nodes.push_back(node("Relu", {"n"}, {"y"}));
    g.outputs = {{"y", {DType::kFloat32, {1, 128, 6, 6}}}};
  };
  {
    SCOPED_TRACE("float16 weights");
    Graph g;
    HostTensor w = random_tensor(ws, 41);
    HostTensor h(DType::kFloat16, ws);
    for (int64_t i = 0; i < w.numel(); ++i)
      h.mutable_data<uint16_t>()[i] = float_to_half(0.05f * w.data<float>()[i]);
    g.initializers["w16"] = h;
    g.nodes.push_back(node("Cast", {"w16"}, {"w"}, {{"to", int64_t{1}}}));
    conv_bn(g, "w");
    expect_same_as_reference(g, {random_tensor({1, 64, 6, 6}, 42)}, 1e-4f);
    const std::string described = described_per_node(g);
    EXPECT_NE(described.find("Conv"), std::string::npos) << described;
    for (const char* op : {"Cast", "BatchNormalization"})
      EXPECT_EQ(described.find(op), std::string::npos) << op << " runs: " << described;
  }
  {
    SCOPED_TRACE("weight normalisation");
    Graph g;
    g.initializers["v"] = random_tensor(ws, 43);
    g.initializers["g"] = random_tensor({128, 1, 1, 1}, 44);
    g.nodes.push_back(node("ReduceL2", {"v"}, {"norm"},
                           {{"axes", std::vector<int64_t>{1, 2, 3}}, {"keepdims", int64_t{1}}}));
    g.nodes.push_back(node("Div", {"v", "norm"}, {"unit"}));
    g.nodes.push_back(node("Mul", {"g", "unit"}, {"w"}));
    conv_bn(g, "w");
    expect_same_as_reference(g, {random_tensor({1, 64, 6, 6}, 45)}, 1e-4f);
    const std::string described = described_per_node(g);
    for (const char* op : {"ReduceL2", "Div", "Mul", "BatchNormalization"})
      EXPECT_EQ(described.find(op), std::string::npos) << op << " runs: " << described;
  }
  {
    SCOPED_TRACE("a growing node stays at run time");
    Graph g;
    g.inputs = {{"x", {DType::kFloat32, {100000}}}};
    g.initializers["one"] = HostTensor::from_vector<float>({1.0f}, {1});
    g.initializers["shape"] = HostTensor::from_vector<int64_t>({100000}, {1});
    g.nodes.push_back(node("Expand", {"one", "shape"}, {"ones"}));
    g.nodes.push_back(node("Add", {"x", "ones"}, {"y"}));
    g.outputs = {{"y", {DType::kFloat32, {100000}}}};
    const std::string described = described_per_node(g);
    EXPECT_NE(described.find("Expand"), std::string::npos) << described;
  }
}

HostTensor to_half(const HostTensor& f) {
  HostTensor h(DType::kFloat16, f.shape());
  for (int64_t i = 0; i < f.numel(); ++i)
    h.mutable_data<uint16_t>()[i] = float_to_half(f.data<float>()[i]);
  return h;
}

// float16 on the cpu runs in float32 (widen_float16): the convolution on oneDNN, not on the
// reference kernels (a float16 ResNet-18 ran 1.3 s an example there, 87x ONNX Runtime); the
// graph's float16 inputs and outputs stay float16; a Cast to float16 inside keeps its
// rounding; nothing changes without a float16 value or with a subgraph.
TEST(Canonicalize, Float16RunsInFloat32OnTheCpu) {
  {
    SCOPED_TRACE("a float16 convolution");
    Graph g;
    g.inputs = {{"x", {DType::kFloat16, {1, 8, 10, 10}}}};
    HostTensor w = random_tensor({16, 8, 3, 3}, 51);
    for (int64_t i = 0; i < w.numel(); ++i) w.mutable_data<float>()[i] *= 0.1f;
    g.initializers["w"] = to_half(w);
    g.initializers["b"] = to_half(random_tensor({16}, 52));
    g.nodes.push_back(node("Conv", {"x", "w", "b"}, {"c"}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
    g.nodes.push_back(node("Relu", {"c"}, {"y"}));
    g.outputs = {{"y", {DType::kFloat16, {1, 16, 10, 10}}}};
    Graph widened = g;
    EXPECT_GT(widen_float16(widened, {g.inputs[0].type}), 0);
    const auto [b, a] = fast_and_reference(g, {to_half(random_tensor({1, 8, 10, 10}, 53))});
    ASSERT_EQ(b.dtype(), DType::kFloat16);
    ASSERT_EQ(a.shape(), b.shape());
    for (int64_t i = 0; i < a.numel(); ++i) {
      const float u = half_to_float(a.data<uint16_t>()[i]), v = half_to_float(b.data<uint16_t>()[i]);
      ASSERT_NEAR(u, v, 2e-3f * (1 + std::fabs(u))) << i;
    }
    const std::string described = described_per_node(g);
    const size_t conv = described.find("Conv '");
    ASSERT_NE(conv, std::string::npos) << described;
    const std::string line = described.substr(conv, described.find('\n', conv) - conv);
    EXPECT_NE(line.find("[onednn]"), std::string::npos) << described;
  }
  {
    SCOPED_TRACE("a Cast to float16 keeps its rounding");
    Graph g;
    g.inputs = {{"x", {DType::kFloat32, {64}}}};
    g.nodes.push_back(node("Cast", {"x"}, {"h"}, {{"to", int64_t{10}}}));
    g.nodes.push_back(node("Add", {"h", "h"}, {"s"}));
    g.nodes.push_back(node("Cast", {"s"}, {"y"}, {{"to", int64_t{1}}}));
    g.outputs = {{"y", {DType::kFloat32, {64}}}};
    const HostTensor x = random_tensor({64}, 54);
    const auto [got, want] = fast_and_reference(g, {x});
    ASSERT_EQ(got.numel(), 64);
    ASSERT_EQ(want.numel(), 64);
    for (int64_t i = 0; i < 64; ++i) {
      EXPECT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
      EXPECT_EQ(got.data<float>()[i], 2 * half_to_float(float_to_half(x.data<float>()[i])));
    }
  }
  {
    SCOPED_TRACE("left alone");
    Graph g = bn_graph("Conv", true);
    std::vector<TensorType> in = {g.inputs[0].type};
    EXPECT_EQ(widen_float16(g, in), 0);  // no float16 value
    Graph h;
    h.inputs = {{"x", {DType::kFloat16, {4}}}, {"c", {DType::kBool, {}}}};
    auto branch = std::make_shared<Graph>();
    branch->nodes.push_back(node("Identity", {"x"}, {"o"}));
    branch->outputs = {{"o", {DType::kFloat16, {4}}}};
    h.nodes.push_back(node("If", {"c"}, {"y"},
                           {{"then_branch", Attribute(std::shared_ptr<const Graph>(branch))},
                            {"else_branch", Attribute(std::shared_ptr<const Graph>(branch))}}));
    h.outputs = {{"y", {DType::kFloat16, {4}}}};
    EXPECT_EQ(widen_float16(h, {h.inputs[0].type, h.inputs[1].type}), 0);  // a subgraph
  }
}

// A per-tensor QuantizeLinear -> DequantizeLinear pair (QDQ models) runs as Div, Round, Clip,
// Mul on the fast path, bit for bit what the two reference kernels give: uint8 with a zero
// point, int8, no zero point (uint8 0); values past the range saturate. A pair whose integer
// is read elsewhere, or whose scales differ, stays. (QDQ ResNet-18: 8.1x -> 2.6x ONNX
// Runtime, which runs int8 kernels; the two reference kernels were 66% of the time.)
TEST(Canonicalize, QuantizeDequantizePairsRunAsFloatOps) {
  struct Case {
    const char* what;
    std::optional<HostTensor> zp;
  };
  const std::vector<Case> cases = {
      {"uint8, zero point 100", HostTensor::scalar<uint8_t>(100)},
      {"int8, zero point -3", HostTensor::scalar<int8_t>(-3)},
      {"no zero point", std::nullopt},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    Graph g;
    g.inputs = {{"x", {DType::kFloat32, {2, 3, 17}}}};
    g.initializers["s"] = HostTensor::scalar<float>(0.037f);
    std::vector<std::string> qin = {"x", "s"}, dqin = {"q", "s"};
    if (c.zp) {
      g.initializers["z"] = *c.zp;
      qin.push_back("z");
      dqin.push_back("z");
    }
    g.nodes.push_back(node("QuantizeLinear", qin, {"q"}));
    g.nodes.push_back(node("DequantizeLinear", dqin, {"d"}));
    g.nodes.push_back(node("Relu", {"d"}, {"y"}));
    g.outputs = {{"y", {DType::kFloat32, {2, 3, 17}}}};
    Graph rewritten = g;
    EXPECT_EQ(canonicalize(rewritten).qdq, 1);
    EXPECT_EQ(ops_of(rewritten), (std::vector<std::string>{"Mul", "Relu", "Div", "Round", "Clip"}));
    expect_same_as_reference(g, {random_tensor({2, 3, 17}, 61)}, 0.0f);
    HostTensor wide = random_tensor({2, 3, 17}, 62);
    for (int64_t i = 0; i < wide.numel(); ++i) wide.mutable_data<float>()[i] *= 4.0f;  // saturates
    expect_same_as_reference(g, {wide}, 0.0f);
  }
  {
    // Between two convolutions (a oneDNN region: Round as its eltwise_round). Integer inputs,
    // identity weights and a scale of 2 make every sum exact and every x / s an integer or a
    // tie, so the region must round half to even as the reference kernels do.
    SCOPED_TRACE("inside a region, ties");
    Graph g;
    g.inputs = {{"x", {DType::kFloat32, {1, 16, 5, 5}}}};
    HostTensor eye(DType::kFloat32, {16, 16, 1, 1});
    for (int64_t i = 0; i < 16; ++i) eye.mutable_data<float>()[i * 16 + i] = 1.0f;
    g.initializers["w"] = eye;
    g.initializers["s"] = HostTensor::scalar<float>(2.0f);
    g.initializers["z"] = HostTensor::scalar<uint8_t>(7);
    g.nodes.push_back(node("Conv", {"x", "w"}, {"c"}));
    g.nodes.push_back(node("QuantizeLinear", {"c", "s", "z"}, {"q"}));
    g.nodes.push_back(node("DequantizeLinear", {"q", "s", "z"}, {"d"}));
    g.nodes.push_back(node("Conv", {"d", "w"}, {"y"}));
    g.outputs = {{"y", {DType::kFloat32, {1, 16, 5, 5}}}};
    HostTensor x(DType::kFloat32, {1, 16, 5, 5});
    for (int64_t i = 0; i < x.numel(); ++i)
      x.mutable_data<float>()[i] = static_cast<float>((i * 37) % 601 - 300);
    expect_same_as_reference(g, {x}, 0.0f);
    const std::string plan = described(g, /*per_node=*/false);
    EXPECT_NE(plan.find("OneDnnRegion"), std::string::npos) << plan;
    EXPECT_EQ(plan.find("Round '"), std::string::npos) << plan;  // inside the region
    EXPECT_NE(plan.find("quantize-dequantize"), std::string::npos) << plan;
  }
  {
    SCOPED_TRACE("left alone");
    Graph g;
    g.inputs = {{"x", {DType::kFloat32, {8}}}};
    g.initializers["s"] = HostTensor::scalar<float>(0.5f);
    g.initializers["s2"] = HostTensor::scalar<float>(0.25f);
    g.nodes.push_back(node("QuantizeLinear", {"x", "s"}, {"q"}));
    g.nodes.push_back(node("DequantizeLinear", {"q", "s2"}, {"d"}));  // another scale
    g.nodes.push_back(node("QuantizeLinear", {"x", "s"}, {"q2"}));
    g.nodes.push_back(node("DequantizeLinear", {"q2", "s"}, {"d2"}));
    g.outputs = {{"d", {}}, {"d2", {}}, {"q2", {}}};  // q2 is read beside its pair
    EXPECT_EQ(canonicalize(g, CanonicalizeOptions{}).qdq, 0);
  }
}

TEST(Canonicalize, BatchNormFoldLeavesWhatItCannotProve) {
  std::vector<bool> dropped;
  {  // the contraction's output has another reader
    Graph g = bn_graph("Conv", true);
    g.nodes.push_back(node("Neg", {"c"}, {"z"}));
    g.outputs.push_back({"z", {DType::kFloat32, {2, 6, 5, 5}}});
    EXPECT_EQ(folds(g, &dropped), 0);
  }
  {  // ... or is a graph output
    Graph g = bn_graph("Conv", true);
    g.outputs.push_back({"c", {DType::kFloat32, {2, 6, 5, 5}}});
    EXPECT_EQ(folds(g, &dropped), 0);
  }
  {  // weights that are an input, not a constant
    Graph g = bn_graph("Conv", true);
    g.initializers.erase("w");
    g.inputs.push_back({"w", {DType::kFloat32, {6, 4, 3, 3}}});
    EXPECT_EQ(folds(g, &dropped), 0);
  }
  {  // training mode: batch statistics
    Graph g = bn_graph("Conv", true);
    g.nodes[1].attrs["training_mode"] = int64_t{1};
    EXPECT_EQ(folds(g, &dropped), 0);
  }
  {  // a Gemm bias per row and column, not per column
    Graph g = bn_graph("Gemm", true);
    g.initializers["b"] = random_tensor({3, 6}, 38);
    EXPECT_EQ(folds(g, &dropped), 0);
  }
  {  // a refused constant (a quota): nothing changes
    Graph g = bn_graph("Conv", true);
    std::vector<TensorType> in = {g.inputs[0].type};
    auto types = infer_graph(OpRegistry::global(), g, in);
    ASSERT_TRUE(types.ok());
    Graph before = g;
    EXPECT_EQ(fold_affine(g, *types, &dropped, CanonicalizeOptions{},
                          [](const std::string&, int64_t) { return false; }),
              0);
    EXPECT_EQ(g.nodes[0].inputs, before.nodes[0].inputs);
    EXPECT_EQ(g.nodes[0].outputs, before.nodes[0].outputs);
  }
  // Switched off: the compiled graph keeps its BatchNormalization.
  Graph g = bn_graph("Conv", true);
  setenv("TENSORD_CANONICAL", "-bnfold", 1);
  const std::string described = described_per_node(g);
  unsetenv("TENSORD_CANONICAL");
  EXPECT_NE(described.find("BatchNormalization"), std::string::npos) << described;
  expect_same_as_reference(g, {random_tensor({2, 4, 7, 7}, 39)}, 1e-4f);
}

// Conv -> BN -> Mul (per channel, [M, 1, 1]) -> Add (one value) -> Sub (per channel) folds
// step by step into one Conv; a Mul by a constant varying along another axis does not fold.
TEST(Canonicalize, ConstantMulAndAddFoldIntoTheContractionBeforeThem) {
  Graph g = bn_graph("Conv", false);
  g.nodes.pop_back();  // the Relu
  g.initializers["k"] = random_tensor({6, 1, 1}, 40);
  g.initializers["one"] = HostTensor::scalar(0.25f);
  g.initializers["d"] = random_tensor({1, 6, 1, 1}, 41);
  g.nodes.push_back(node("Mul", {"k", "n"}, {"m1"}));
  g.nodes.push_back(node("Add", {"m1", "one"}, {"m2"}));
  g.nodes.push_back(node("Sub", {"m2", "d"}, {"y"}));
  Graph f = g;
  std::vector<bool> dropped;
  ASSERT_EQ(folds(f, &dropped), 4);
  EXPECT_EQ(dropped, (std::vector<bool>{false, true, true, true, true}));
  EXPECT_EQ(f.nodes[0].outputs[0], "y");
  expect_same_as_reference(g, {random_tensor({2, 4, 7, 7}, 42)}, 1e-4f);
  const std::string described = described_per_node(g);
  EXPECT_EQ(described.find("Mul"), std::string::npos) << described;
  EXPECT_EQ(described.find("Sub"), std::string::npos) << described;

  // Along the width: not per channel.
  Graph w = bn_graph("Conv", true);
  w.nodes.pop_back();
  w.initializers["k"] = random_tensor({1, 5}, 43);
  w.nodes.push_back(node("Mul", {"n", "k"}, {"y"}));
  Graph wf = w;
  EXPECT_EQ(folds(wf, &dropped), 1);  // the BN only
  EXPECT_FALSE(dropped[2]);
  // Switched off: the BN still folds, the Mul and Add stay.
  Graph off = g;
  CanonicalizeOptions no_affine;
  no_affine.affine = false;
  std::vector<TensorType> in = {off.inputs[0].type};
  auto types = infer_graph(OpRegistry::global(), off, in);
  ASSERT_TRUE(types.ok());
  EXPECT_EQ(fold_affine(off, *types, &dropped, no_affine,
                        [](const std::string&, int64_t) { return true; }),
            1);
}

// The weights a fold makes are charged to the compile's budget, and a budget that refuses
// them leaves the BatchNormalization to run (same results).
TEST(Canonicalize, BatchNormFoldIsChargedAndARefusedOneStillRuns) {
  Graph g = bn_graph("Conv", true);
  const int64_t made = (6 * 4 * 3 * 3 + 6) * 4;
  for (bool refuse : {false, true}) {
    SCOPED_TRACE(refuse ? "refused" : "charged");
    int64_t charged = 0;
    auto budget = std::make_shared<CompileBudget>(
        0,
        [&](int64_t bytes, const std::string& what) -> Status {
          if (refuse && what.find("BatchNormalization") != std::string::npos)
            return errors::ResourceExhausted("over the test's quota: {}", what);
          charged += bytes;
          return OkStatus();
        },
        [&](int64_t bytes) { charged -= bytes; });
    const std::string d = described_per_node(g, budget);
    // Charged while compiling (given back after: nothing outside the compile reads them).
    EXPECT_EQ(budget->peak() >= made, !refuse) << budget->peak();
    EXPECT_EQ(d.find("BatchNormalization") == std::string::npos, !refuse) << d;
  }
}

// A Conv whose kernel taps read only padding at every output position loses them: W cut to
// the live taps, the pads reduced so the output keeps its size, a one-tap axis undilated.
// DeepLabV3's ASPP (3x3, dilation 24 and 36, pads equal, on a 14x14 map) becomes 1x1.
struct TapsCase {
  std::string what;
  Shape x;               // [N, C, spatial...]
  Shape w;               // [M, C/g, k...]
  AttributeMap attrs;
  Shape kept;            // the kernel's spatial dims after the pass ({} : left as it is)
  std::vector<int64_t> pads, dilations;  // after the pass
};

TEST(Canonicalize, ConvTapsThatReadOnlyPaddingAreDropped) {
  using V = std::vector<int64_t>;
  const std::vector<TapsCase> cases = {
      {"ASPP dilation 24: the centre alone", {1, 8, 14, 14}, {5, 8, 3, 3},
       {{"dilations", V{24, 24}}, {"pads", V{24, 24, 24, 24}}}, {1, 1}, {0, 0, 0, 0}, {1, 1}},
      {"one axis only", {1, 4, 14, 40}, {3, 4, 3, 3},
       {{"dilations", V{24, 24}}, {"pads", V{24, 24, 24, 24}}}, {1, 3}, {0, 24, 0, 24}, {1, 24}},
      {"a 1-D causal pad: the first taps", {2, 3, 5}, {4, 3, 4},
       {{"dilations", V{3}}, {"pads", V{9, 0}}}, {2}, {3, 0}, {3}},
      {"strided, grouped", {1, 6, 9, 9}, {6, 2, 5, 5},
       {{"dilations", V{5, 5}}, {"pads", V{10, 10, 10, 10}}, {"strides", V{2, 2}},
        {"group", int64_t{3}}}, {3, 3}, {5, 5, 5, 5}, {5, 5}},
      // Every tap sees the image: nothing to cut.
      {"ASPP dilation 12", {1, 4, 14, 14}, {3, 4, 3, 3},
       {{"dilations", V{12, 12}}, {"pads", V{12, 12, 12, 12}}}, {}, {}, {}},
      // The live tap starts inside the image: the pad would be negative (a crop).
      {"a crop", {1, 2, 14, 14}, {2, 2, 3, 3},
       {{"dilations", V{30, 30}}, {"pads", V{24, 24, 24, 24}}}, {}, {}, {}},
  };
  for (const TapsCase& c : cases) {
    SCOPED_TRACE(c.what);
    Graph g;
    g.inputs = {{"x", {DType::kFloat32, c.x}}};
    g.initializers["w"] = random_tensor(c.w, 41);
    g.initializers["b"] = random_tensor({c.w[0]}, 42);
    g.nodes.push_back(node("Conv", {"x", "w", "b"}, {"y"}, c.attrs));
    g.outputs = {{"y", {}}};
    Graph f = g;
    auto types = infer_graph(OpRegistry::global(), f, {g.inputs[0].type});
    ASSERT_TRUE(types.ok()) << types.status().message();
    const Shape y_before = types->values.at("y")->shape;
    int64_t charged = 0;
    const int cut = trim_conv_taps(f, *types, CanonicalizeOptions{},
                                   [&](const std::string&, int64_t bytes) {
                                     charged += bytes;
                                     return true;
                                   });
    if (c.kept.empty()) {
      EXPECT_EQ(cut, 0);
      EXPECT_EQ(f.nodes[0].inputs[1], "w");
    } else {
      ASSERT_EQ(cut, 1);
      const HostTensor& nw = types->constants.at(f.nodes[0].inputs[1]);
      Shape want = {c.w[0], c.w[1]};
      want.insert(want.end(), c.kept.begin(), c.kept.end());
      EXPECT_EQ(nw.shape(), want);
      EXPECT_EQ(charged, nw.nbytes());
      EXPECT_EQ(*f.nodes[0].attrs.at("pads").get_if<V>(), c.pads);
      EXPECT_EQ(*f.nodes[0].attrs.at("dilations").get_if<V>(), c.dilations);
      // The cut node infers the same output shape.
      Graph h = f;
      h.initializers[f.nodes[0].inputs[1]] = nw;
      auto again = infer_graph(OpRegistry::global(), h, {g.inputs[0].type});
      ASSERT_TRUE(again.ok()) << again.status().message();
      EXPECT_EQ(again->values.at("y")->shape, y_before);
    }
    // Compiled (cut) against the reference kernels on the graph as given.
    expect_same_as_reference(g, {random_tensor(c.x, 43)}, 1e-4f);
  }
  // TENSORD_CANONICAL=-taps leaves it.
  Graph g;
  g.inputs = {{"x", {DType::kFloat32, {1, 2, 6, 6}}}};
  g.initializers["w"] = random_tensor({2, 2, 3, 3}, 44);
  g.nodes.push_back(node("Conv", {"x", "w"}, {"y"},
                         {{"dilations", V{8, 8}}, {"pads", V{8, 8, 8, 8}}}));
  g.outputs = {{"y", {}}};
  auto types = infer_graph(OpRegistry::global(), g, {g.inputs[0].type});
  ASSERT_TRUE(types.ok());
  CanonicalizeOptions off;
  off.taps = false;
  EXPECT_EQ(trim_conv_taps(g, *types, off, [](const std::string&, int64_t) { return true; }), 0);
  EXPECT_EQ(trim_conv_taps(g, *types, CanonicalizeOptions{},
                           [](const std::string&, int64_t) { return false; }), 0)
      << "a refused charge leaves the Conv";
  EXPECT_EQ(g.nodes[0].inputs[1], "w");
}

}  // namespace
}  // namespace tensord
