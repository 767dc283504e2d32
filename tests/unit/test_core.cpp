// Tier 1: core types with no device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/graph_utils.h"
#include "core/host_blocks.h"
#include "core/npy.h"
#include "core/op_registry.h"
#include "tensord/dtype.h"
#include "tensord/status.h"
#include "tensord/tensor.h"

namespace tensord {
namespace {

TEST(Status, CodesAndMessages) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.to_string(), "OK");
  Status s(StatusCode::kInvalidArgument, "bad shape");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.to_string(), "INVALID_ARGUMENT: bad shape");
  EXPECT_EQ(s.with_context("load").message(), "load: bad shape");
  // Codes are gRPC's numbers.
  EXPECT_EQ(static_cast<int>(StatusCode::kResourceExhausted), 8);
  EXPECT_EQ(static_cast<int>(StatusCode::kUnimplemented), 12);
  EXPECT_STREQ(status_code_name(StatusCode::kUnavailable), "UNAVAILABLE");
}

Result<int> half_of(int x) {
  if (x % 2) return Status(StatusCode::kInvalidArgument, "odd");
  return x / 2;
}
Result<int> quarter_of(int x) {
  TD_ASSIGN_OR_RETURN(int h, half_of(x));
  TD_ASSIGN_OR_RETURN(int q, half_of(h));
  return q;
}

TEST(Status, ResultMacros) {
  EXPECT_EQ(*quarter_of(8), 2);
  EXPECT_EQ(quarter_of(6).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(quarter_of(6).status().message(), "odd");
}

TEST(DType, NamesSizesAndParsing) {
  EXPECT_EQ(dtype_size(DType::kFloat32), 4u);
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::kBool), 1u);
  EXPECT_EQ(dtype_size(DType::kInt64), 8u);
  EXPECT_STREQ(dtype_name(DType::kFloat16), "float16");
  EXPECT_EQ(dtype_from_name("float"), DType::kFloat32);
  EXPECT_EQ(dtype_from_name("int64"), DType::kInt64);
  EXPECT_EQ(dtype_from_name("bfloat16"), DType::kBFloat16);
  EXPECT_FALSE(dtype_from_name("complex64").has_value());
  EXPECT_TRUE(dtype_is_valid(16));
  EXPECT_FALSE(dtype_is_valid(8));  // string: out of scope
  EXPECT_FALSE(dtype_is_valid(99));
  // ONNX numbering.
  EXPECT_EQ(static_cast<int>(DType::kFloat16), 10);
  EXPECT_EQ(static_cast<int>(DType::kFloat64), 11);
}

TEST(DType, HalfConversions) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(1e6f), 0x7c00);             // overflow -> inf
  EXPECT_EQ(float_to_half(5.9604645e-8f), 0x0001);    // smallest subnormal
  EXPECT_EQ(float_to_half(1.0f + 1.0f / 2048), 0x3c00);  // halfway rounds to even
  EXPECT_EQ(half_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(half_to_float(0x0001), 5.9604645e-8f);
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(bfloat16_to_float(0x4049), 3.140625f);
  for (int i = 0; i < 0x7c00; i += 7) EXPECT_EQ(float_to_half(half_to_float(i)), i) << i;
}

TEST(Shape, NumelStringsAndOverflow) {
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({2, 3, 4}), 24);
  EXPECT_EQ(shape_to_string({2, -1}), "[2, ?]");
  EXPECT_EQ(*checked_byte_size(DType::kFloat32, {2, 3}), 24);
  auto huge = checked_byte_size(DType::kFloat32, {1LL << 40, 1LL << 40});
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(huge.status().message().find("too large"), std::string::npos);
  EXPECT_EQ(checked_byte_size(DType::kFloat32, {-3}).status().code(), StatusCode::kInvalidArgument);
}

TEST(HostTensor, FromBytesChecksSize) {
  float v[3] = {1, 2, 3};
  EXPECT_TRUE(HostTensor::from_bytes(DType::kFloat32, {3}, v, 12).ok());
  auto bad = HostTensor::from_bytes(DType::kFloat32, {4}, v, 12);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("needs 16 bytes, got 12"), std::string::npos);
}

TEST(Npy, RoundTripAndCorruption) {
  HostTensor t = HostTensor::from_vector<float>({1.5f, -2, 3, 4, 5, 6}, {2, 3});
  auto back = parse_npy(serialize_npy(t));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->shape(), (Shape{2, 3}));
  EXPECT_EQ(back->data<float>()[0], 1.5f);
  HostTensor s = HostTensor::scalar<int64_t>(7);
  auto sb = parse_npy(serialize_npy(s));
  ASSERT_TRUE(sb.ok());
  EXPECT_EQ(sb->shape(), Shape{});
  std::string bytes = serialize_npy(t);
  EXPECT_EQ(parse_npy(bytes.substr(0, bytes.size() - 4)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_npy("garbage").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(read_npy("/nonexistent/x.npy").status().code(), StatusCode::kNotFound);
}

TEST(Broadcast, NumpyRules) {
  EXPECT_EQ(*broadcast_shapes({2, 3}, {3}), (Shape{2, 3}));
  EXPECT_EQ(*broadcast_shapes({4, 1, 5}, {3, 1}), (Shape{4, 3, 5}));
  EXPECT_EQ(*broadcast_shapes({}, {2}), (Shape{2}));
  EXPECT_EQ(*broadcast_shapes({-1, 3}, {2, 3}), (Shape{2, 3}));
  auto bad = broadcast_shapes({2, 3}, {4});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("[2, 3] and [4]"), std::string::npos);
  EXPECT_EQ(*normalize_axis(-1, 3), 2);
  EXPECT_FALSE(normalize_axis(3, 3).ok());
}

Graph two_node_graph() {
  Graph g;
  g.inputs.push_back({"a", {DType::kFloat32, {2}}});
  Node n1;
  n1.name = "first";
  n1.op = "Relu";
  n1.inputs = {"a"};
  n1.outputs = {"b"};
  Node n2;
  n2.name = "second";
  n2.op = "Neg";
  n2.inputs = {"b"};
  n2.outputs = {"c"};
  g.nodes = {n2, n1};  // out of order on purpose
  g.outputs.push_back({"c", {}});
  return g;
}

TEST(GraphUtils, TopologicalOrder) {
  auto order = topological_order(two_node_graph());
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(*order, (std::vector<size_t>{1, 0}));
}

TEST(GraphUtils, StructuralErrorsNameTheProblem) {
  Graph cyc = two_node_graph();
  cyc.nodes[1].inputs = {"c"};  // Relu reads Neg's output: cycle
  auto r = topological_order(cyc);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cycle"), std::string::npos);

  Graph dangling = two_node_graph();
  dangling.nodes[0].inputs = {"nope"};
  r = topological_order(dangling);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'nope'"), std::string::npos);
  EXPECT_NE(r.status().message().find("node 'second' (Neg)"), std::string::npos);

  Graph twice = two_node_graph();
  twice.nodes[0].outputs = {"b"};
  r = topological_order(twice);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("produced twice"), std::string::npos);

  Graph no_out = two_node_graph();
  no_out.outputs = {{"zzz", {}}};
  EXPECT_FALSE(topological_order(no_out).ok());
}

TEST(GraphUtils, InferencePoisonsOnlyDownstream) {
  Graph g;
  g.inputs.push_back({"a", {}});
  g.inputs.push_back({"b", {}});
  Node bad;
  bad.name = "bad";
  bad.op = "NoSuchOp";
  bad.inputs = {"a"};
  bad.outputs = {"x"};
  Node after;
  after.name = "after";
  after.op = "Relu";
  after.inputs = {"x"};
  after.outputs = {"y"};
  g.nodes = {bad, after};
  g.outputs = {{"y", {}}, {"b", {}}};
  auto types = infer_graph(OpRegistry::global(), g,
                           {{DType::kFloat32, {2}}, {DType::kInt64, {3}}});
  ASSERT_TRUE(types.ok()) << types.status().to_string();
  const auto& y = types->values.at("y");
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(y.status().message().find("NoSuchOp"), std::string::npos);
  EXPECT_NE(y.status().message().find("'bad'"), std::string::npos);
  EXPECT_TRUE(types->values.at("b").ok());
  // Wrong number of inputs is structural.
  EXPECT_FALSE(infer_graph(OpRegistry::global(), g, {{DType::kFloat32, {2}}}).ok());
}

TEST(GraphUtils, SignatureSeesEverythingThatMatters) {
  Graph g = two_node_graph();
  const std::vector<TensorType> t2{{DType::kFloat32, {2}}};
  const std::string base = graph_signature(g, t2);
  EXPECT_EQ(base, graph_signature(two_node_graph(), t2));
  EXPECT_NE(base, graph_signature(g, {{DType::kFloat32, {3}}}));
  EXPECT_NE(base, graph_signature(g, {{DType::kFloat64, {2}}}));
  Graph attr = g;
  attr.nodes[0].attrs["x"] = int64_t{1};
  EXPECT_NE(base, graph_signature(attr, t2));
  Graph init1 = g, init2 = g;
  init1.initializers["w"] = HostTensor::from_vector<float>({1, 2}, {2});
  init2.initializers["w"] = HostTensor::from_vector<float>({1, 3}, {2});
  EXPECT_NE(graph_signature(init1, t2), graph_signature(init2, t2));
}

// Issue 15, attack 2: names are free text, so a one-input graph whose input is named
// "x=float32[N];y" must not produce the key of a two-input graph (x, y) — nor may any
// other re-arrangement of separators in names, ops or attribute strings.
TEST(GraphUtils, SignatureCannotBeForgedWithSeparatorsInNames) {
  auto add_graph = [](std::vector<std::string> inputs) {
    Graph g;
    for (auto& n : inputs) g.inputs.push_back({n, {}});
    Node n;
    n.name = "add";
    n.op = "Add";
    n.inputs = {inputs.front(), inputs.back()};
    n.outputs = {"z"};
    g.nodes = {n};
    g.outputs = {{"z", {}}};
    return g;
  };
  const TensorType big{DType::kFloat32, {1 << 26}};
  const std::string two = graph_signature(add_graph({"x", "y"}), {big, big});
  // Every way of spelling the two-input key's text into one input's name.
  const std::string forged_name = "x=" + big.to_string() + ";y";
  EXPECT_NE(two, graph_signature(add_graph({forged_name}), {big}));
  EXPECT_NE(two, graph_signature(add_graph({forged_name}), {{DType::kFloat32, {1}}}));
  // Node fields that run into one another.
  Graph a = add_graph({"x", "y"}), b = add_graph({"x", "y"});
  a.nodes[0].name = "n:";
  a.nodes[0].domain = "";
  b.nodes[0].name = "n";
  b.nodes[0].domain = ":";
  EXPECT_NE(graph_signature(a, {big, big}), graph_signature(b, {big, big}));
  // Attribute strings holding separators.
  Graph c = add_graph({"x", "y"}), d = add_graph({"x", "y"});
  c.nodes[0].attrs["k"] = std::string("a';k=string:'b");
  d.nodes[0].attrs["k"] = std::string("a");
  d.nodes[0].attrs["k';k=string:'b"] = std::string("");
  EXPECT_NE(graph_signature(c, {big, big}), graph_signature(d, {big, big}));
  // Lists of node inputs/outputs: ("a,b") vs ("a","b").
  Graph e = add_graph({"x", "y"}), f = add_graph({"x", "y"});
  e.nodes[0].outputs = {"p,q"};
  f.nodes[0].outputs = {"p", "q"};
  EXPECT_NE(graph_signature(e, {big, big}), graph_signature(f, {big, big}));
}

TEST(OpRegistry, ArityAndAttributeChecks) {
  Node n;
  n.name = "r";
  n.op = "Relu";
  n.inputs = {"a", "b"};
  n.outputs = {"y"};
  InferenceContext ctx(n, {{DType::kFloat32, {2}}, {DType::kFloat32, {2}}}, {});
  Status s = infer_node(OpRegistry::global(), ctx);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Relu"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("(node 'r')"), std::string::npos) << s.message();

  n.inputs = {"a"};
  n.attrs["bogus"] = int64_t{1};
  InferenceContext ctx2(n, {{DType::kFloat32, {2}}}, {});
  s = infer_node(OpRegistry::global(), ctx2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown attribute 'bogus'"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tensord

namespace tensord {
namespace {
// Large tensors' memory is recycled: a loop of reads of one size maps memory once.
TEST(HostBlocks, LargeAllocationsAreReusedAndAligned) {
  const HostBlockStats before = host_block_stats();
  if (before.cap_bytes < (int64_t{64} << 20)) GTEST_SKIP() << "host block cache smaller than 64 MiB";
  const Shape shape{(int64_t{24} << 20) / 4};  // 24 MiB
  for (int i = 0; i < 5; ++i) {
    auto t = HostTensor::uninitialized(DType::kFloat32, shape);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data()) % 64, 0u);
    std::memset(t->mutable_data(), i, t->nbytes());
  }
  const HostBlockStats after = host_block_stats();
  EXPECT_GE(after.reused - before.reused, 4);
  EXPECT_LE(after.idle_bytes, after.cap_bytes);
  // A copy keeps the block: it is not handed out again while a tensor holds it.
  auto a = HostTensor::uninitialized(DType::kFloat32, shape);
  ASSERT_TRUE(a.ok());
  HostTensor keep = *a;
  auto b = HostTensor::uninitialized(DType::kFloat32, shape);
  ASSERT_TRUE(b.ok());
  EXPECT_NE(keep.data(), b->data());
  // Small ones and zeros still work.
  auto z = HostTensor::uninitialized(DType::kFloat32, {0});
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->nbytes(), 0u);
  auto s = HostTensor::uninitialized(DType::kUInt8, {100});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s->data()) % 64, 0u);
}
}  // namespace
}  // namespace tensord
