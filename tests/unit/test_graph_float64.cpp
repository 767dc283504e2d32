// widen_to_float64: the float64 oracle's graph rewrite (core/graph_float64.h).
#include <gtest/gtest.h>

#include "core/graph_float64.h"
#include "core/graph_utils.h"
#include "core/op_registry.h"

namespace tensord {
namespace {

Node make_node(std::string name, std::string op, std::vector<std::string> in,
               std::vector<std::string> out, AttributeMap attrs = {}) {
  Node n;
  n.name = std::move(name);
  n.op = std::move(op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

// y = Cast<float>(Cast<int64>(x)) * w + c + k (Constant value_float), idx an int64 initializer
// left alone; z = Gather(x, idx).
Graph sample_graph() {
  Graph g;
  g.inputs = {{"x", {DType::kFloat32, {2, 3}}}};
  g.outputs = {{"y", {DType::kFloat32, {2, 3}}}, {"z", {DType::kFloat32, {2, 3}}}};
  g.initializers["w"] = HostTensor::from_vector<float>({0.1f, 0.2f, 0.3f}, {3});
  g.initializers["idx"] = HostTensor::from_vector<int64_t>({1, 0}, {2});
  g.nodes.push_back(make_node("", "Cast", {"x"}, {"xi"}, {{"to", int64_t{7}}}));
  g.nodes.push_back(make_node("back", "Cast", {"xi"}, {"xf"}, {{"to", int64_t{1}}}));
  g.nodes.push_back(make_node("mul", "Mul", {"xf", "w"}, {"m"}));
  g.nodes.push_back(make_node("c", "Constant", {}, {"cv"},
                              {{"value", HostTensor::from_vector<float>({1.5f}, {1})}}));
  g.nodes.push_back(make_node("k", "Constant", {}, {"kv"}, {{"value_float", 0.25f}}));
  g.nodes.push_back(make_node("add", "Add", {"m", "cv"}, {"a"}));
  g.nodes.push_back(make_node("add2", "Add", {"a", "kv"}, {"y"}));
  g.nodes.push_back(make_node("gather", "Gather", {"x", "idx"}, {"z"}, {{"axis", int64_t{0}}}));
  return g;
}

const Node* find_node(const Graph& g, const std::string& name) {
  for (const auto& n : g.nodes)
    if (n.name == name) return &n;
  return nullptr;
}

std::map<std::string, DType> value_dtypes(const Graph& g, DType input) {
  auto types = infer_graph(OpRegistry::global(), g, {{input, {2, 3}}});
  EXPECT_TRUE(types.ok()) << types.status().message();
  std::map<std::string, DType> out;
  if (!types.ok()) return out;
  for (const auto& [name, t] : types->values) {
    EXPECT_TRUE(t.ok()) << name << ": " << t.status().message();
    if (t.ok()) out[name] = t->dtype;
  }
  return out;
}

TEST(WidenToFloat64, EveryFloat32ValueBecomesFloat64) {
  const Graph g = sample_graph();
  auto w = widen_to_float64(g, {{DType::kFloat32, {2, 3}}});
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w->inputs[0].type.dtype, DType::kFloat64);
  EXPECT_EQ(w->outputs[0].type.dtype, DType::kFloat64);
  EXPECT_EQ(w->outputs[1].type.dtype, DType::kFloat64);
  // Initializers: float32 widened exactly, integers untouched.
  const HostTensor& wt = w->initializers.at("w");
  ASSERT_EQ(wt.dtype(), DType::kFloat64);
  EXPECT_EQ(wt.data<double>()[1], static_cast<double>(0.2f));
  EXPECT_EQ(w->initializers.at("idx").dtype(), DType::kInt64);
  // Cast to FLOAT names DOUBLE; Cast to INT64 stays; the unnamed node got a name.
  EXPECT_EQ(*find_node(*w, "back")->attrs.at("to").get_if<int64_t>(), 11);
  const Node* first = find_node(*w, "n0");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(*first->attrs.at("to").get_if<int64_t>(), 7);
  // Constants: tensor value widened, value_float turned into a float64 value.
  EXPECT_EQ(find_node(*w, "c")->attrs.at("value").get_if<HostTensor>()->dtype(), DType::kFloat64);
  const Node* k = find_node(*w, "k");
  EXPECT_EQ(k->attrs.count("value_float"), 0u);
  EXPECT_EQ(k->attrs.at("value").get_if<HostTensor>()->dtype(), DType::kFloat64);
  // Inference agrees: every value that was float32 is float64, the rest as before.
  const auto before = value_dtypes(g, DType::kFloat32);
  const auto after = value_dtypes(*w, DType::kFloat64);
  for (const auto& [name, dt] : before) {
    ASSERT_TRUE(after.count(name)) << name;
    EXPECT_EQ(after.at(name), dt == DType::kFloat32 ? DType::kFloat64 : dt) << name;
  }
  // The original is untouched.
  EXPECT_EQ(g.initializers.at("w").dtype(), DType::kFloat32);
  EXPECT_TRUE(g.nodes[0].name.empty());
}

TEST(WidenToFloat64, KeptNodesRunInFloat32BetweenCasts) {
  const Graph g = sample_graph();
  auto w = widen_to_float64(g, {{DType::kFloat32, {2, 3}}}, {"mul"});
  ASSERT_TRUE(w.ok()) << w.status().message();
  const Node* mul = find_node(*w, "mul");
  ASSERT_NE(mul, nullptr);
  const auto types = value_dtypes(*w, DType::kFloat64);
  for (const auto& v : mul->inputs) EXPECT_EQ(types.at(v), DType::kFloat32) << v;
  EXPECT_EQ(types.at(mul->outputs[0]), DType::kFloat32);
  EXPECT_NE(mul->outputs[0], "m");
  EXPECT_EQ(types.at("m"), DType::kFloat64);  // cast back up for its consumers
  EXPECT_EQ(types.at("y"), DType::kFloat64);
  EXPECT_EQ(w->nodes.size(), g.nodes.size() + 3);  // two casts down, one up

  auto bad = widen_to_float64(g, {{DType::kFloat32, {2, 3}}}, {"nope"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'nope'"), std::string::npos);
}

TEST(WidenToFloat64, NodeNamedInAnError) {
  EXPECT_EQ(node_named_in("node 'conv1' (Conv): dtype float64 is not supported here"), "conv1");
  EXPECT_EQ(node_named_in("Foo: cpu:0 has no kernel for this op (node 'n3')"), "n3");
  EXPECT_EQ(node_named_in("something else"), "");
}

TEST(WidenToFloat64, TensorsRoundTrip) {
  const HostTensor f = HostTensor::from_vector<float>({1.f / 3, -2.5f}, {2});
  const HostTensor d = widen_tensor(f);
  ASSERT_EQ(d.dtype(), DType::kFloat64);
  EXPECT_EQ(d.data<double>()[0], static_cast<double>(1.f / 3));
  const HostTensor back = narrow_tensor(HostTensor::from_vector<double>({1.0 / 3, 1e-300}, {2}));
  ASSERT_EQ(back.dtype(), DType::kFloat32);
  EXPECT_EQ(back.data<float>()[0], static_cast<float>(1.0 / 3));
  const HostTensor i = HostTensor::from_vector<int32_t>({4}, {1});
  EXPECT_EQ(widen_tensor(i).dtype(), DType::kInt32);
}

}  // namespace
}  // namespace tensord
