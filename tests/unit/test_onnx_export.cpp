// ONNX export: graph IR -> ModelProto -> import gives back a graph that computes the same
// outputs (on the cpu kernels), for a hand-built graph with every attribute kind and an If
// subgraph, and for zoo networks; the ModelProto declares opset 17 and typed inputs/outputs;
// bad graphs and unwritable paths are errors that say what was wrong.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "engine/executor.h"
#include "models/zoo.h"
#include "onnx/onnx_export.h"
#include "onnx/onnx_import.h"

namespace tensord::onnx {
namespace {

std::vector<HostTensor> run_ok(const Graph& g, const std::vector<HostTensor>& inputs) {
  auto outs = run_graph_on_host(g, inputs);
  EXPECT_TRUE(outs.ok()) << outs.status().to_string();
  std::vector<HostTensor> values;
  if (!outs.ok()) return values;
  for (auto& o : *outs) {
    EXPECT_TRUE(o.ok()) << o.status().to_string();
    if (o.ok()) values.push_back(*o);
  }
  return values;
}

void expect_same_bytes(const std::vector<HostTensor>& a, const std::vector<HostTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].type(), b[i].type()) << "output " << i;
    ASSERT_EQ(a[i].nbytes(), b[i].nbytes()) << "output " << i;
    EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].nbytes()), 0) << "output " << i;
  }
}

Graph round_trip(const Graph& g) {
  auto bytes = export_model(g);
  EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
  if (!bytes.ok()) return {};
  auto model = import_bytes(*bytes, "exported");
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return {};
  EXPECT_EQ(model->opset, 17);
  EXPECT_EQ(model->producer.rfind("tensord", 0), 0u) << model->producer;
  return model->graph;
}

Node node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
          AttributeMap attrs = {}) {
  Node n;
  n.name = op + "_" + out.at(0);
  n.op = op;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

// y = If(flag, then: Relu(x W + b) transposed, else: LeakyRelu(...)); every attribute kind.
Graph attribute_graph() {
  Graph g;
  g.name = "attrs";
  g.inputs = {{"x", {DType::kFloat32, {-1, 3}}}, {"flag", {DType::kBool, {}}}};
  g.outputs = {{"y", {DType::kFloat32, {4, -1}}}, {"padded", {DType::kFloat32, {}}}};
  g.initializers.emplace("W", HostTensor::from_vector<float>({0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f,
                                                              0.7f, 0.8f, -0.9f, 1.0f, 1.1f, -1.2f},
                                                             {3, 4}));
  g.nodes.push_back(node("MatMul", {"x", "W"}, {"xw"}));
  g.nodes.push_back(
      node("Constant", {}, {"b"},
           {{"value", HostTensor::from_vector<float>({0.5f, -0.5f, 0.25f, 0}, {4})}}));
  g.nodes.push_back(node("Add", {"xw", "b"}, {"z"}));
  auto then_g = std::make_shared<Graph>();
  then_g->outputs = {{"t_out", {DType::kFloat32, {}}}};
  then_g->nodes.push_back(node("Relu", {"z"}, {"t_relu"}));
  then_g->nodes.push_back(
      node("Transpose", {"t_relu"}, {"t_out"}, {{"perm", std::vector<int64_t>{1, 0}}}));
  auto else_g = std::make_shared<Graph>();
  else_g->outputs = {{"e_out", {DType::kFloat32, {}}}};
  else_g->nodes.push_back(node("LeakyRelu", {"z"}, {"e_leaky"}, {{"alpha", 0.25f}}));
  else_g->nodes.push_back(
      node("Transpose", {"e_leaky"}, {"e_out"}, {{"perm", std::vector<int64_t>{1, 0}}}));
  g.nodes.push_back(node("If", {"flag"}, {"y"},
                         {{"then_branch", std::shared_ptr<const Graph>(then_g)},
                          {"else_branch", std::shared_ptr<const Graph>(else_g)}}));
  // floats (Constant value_floats) and string (Pad mode) attributes.
  g.nodes.push_back(node("Constant", {}, {"cf"},
                         {{"value_floats", std::vector<float>{1.5f, -2.0f, 0.0f, 3.25f}}}));
  g.nodes.push_back(node("Mul", {"z", "cf"}, {"zc"}));
  g.initializers.emplace("pads", HostTensor::from_vector<int64_t>({1, 0, 1, 0}, {4}));
  g.nodes.push_back(node("Pad", {"zc", "pads"}, {"padded"}, {{"mode", std::string("reflect")}}));
  return g;
}

TEST(OnnxExport, AttributeKindsAndSubgraphsRoundTrip) {
  const Graph g = attribute_graph();
  const Graph back = round_trip(g);
  ASSERT_EQ(back.nodes.size(), g.nodes.size());
  ASSERT_EQ(back.inputs.size(), 2u);
  EXPECT_EQ(back.inputs[0].type, g.inputs[0].type);  // -1 dims survive as symbolic dims
  EXPECT_EQ(back.outputs[0].type, g.outputs[0].type);
  for (const Node& n : back.nodes) {
    if (n.op != "If") continue;
    for (const char* branch : {"then_branch", "else_branch"}) {
      const auto* sub = n.attrs.at(branch).get_if<std::shared_ptr<const Graph>>();
      ASSERT_TRUE(sub && *sub) << branch;
      EXPECT_EQ((*sub)->nodes.size(), 2u) << branch;
    }
  }
  const HostTensor x = HostTensor::from_vector<float>({1, 2, 3, -1, 0.5f, 2, 0, -3, 1}, {3, 3});
  for (bool flag : {true, false}) {
    const std::vector<HostTensor> inputs = {x, HostTensor::scalar<bool>(flag)};
    expect_same_bytes(run_ok(g, inputs), run_ok(back, inputs));
  }
}

TEST(OnnxExport, ModelProtoDeclaresOpsetTypesAndRawInitializers) {
  auto bytes = export_model(attribute_graph());
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  ::onnx::ModelProto mp;
  ASSERT_TRUE(mp.ParseFromString(*bytes));
  EXPECT_EQ(mp.ir_version(), 8);
  ASSERT_EQ(mp.opset_import_size(), 1);
  EXPECT_EQ(mp.opset_import(0).domain(), "");
  EXPECT_EQ(mp.opset_import(0).version(), 17);
  const auto& g = mp.graph();
  ASSERT_EQ(g.input_size(), 2);
  const auto& x = g.input(0).type().tensor_type();
  EXPECT_EQ(x.elem_type(), ::onnx::TensorProto::FLOAT);
  ASSERT_EQ(x.shape().dim_size(), 2);
  EXPECT_EQ(x.shape().dim(0).dim_param(), "x_dim0");
  EXPECT_EQ(x.shape().dim(1).dim_value(), 3);
  for (const auto& t : g.initializer()) {
    EXPECT_TRUE(t.has_raw_data()) << t.name();
    EXPECT_EQ(t.float_data_size(), 0) << t.name();
  }
}

TEST(OnnxExport, StringsAttributesAndOtherDomains) {
  Graph g;
  g.inputs = {{"a", {DType::kFloat32, {2}}}};
  g.outputs = {{"b", {DType::kFloat32, {2}}}};
  g.nodes.push_back(node("Custom", {"a"}, {"b"},
                         {{"names", std::vector<std::string>{"p", "q"}}, {"n", int64_t{7}}}));
  g.nodes.back().domain = "com.example";
  auto bytes = export_model(g);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  ::onnx::ModelProto mp;
  ASSERT_TRUE(mp.ParseFromString(*bytes));
  ASSERT_EQ(mp.opset_import_size(), 2);
  EXPECT_EQ(mp.opset_import(1).domain(), "com.example");
  ImportOptions no_check;
  no_check.check_ops = false;
  auto back = import_bytes(*bytes, "exported", "", no_check);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  const Node& n = back->graph.nodes.at(0);
  EXPECT_EQ(n.domain, "com.example");
  EXPECT_EQ(*n.attrs.at("names").get_if<std::vector<std::string>>(),
            (std::vector<std::string>{"p", "q"}));
  EXPECT_EQ(*n.attrs.at("n").get_if<int64_t>(), 7);
}

// tensord's own ops (the linalg ops of src/core/ops/linalg.cpp) round-trip with their domain and
// pass the importer's op check, which still names an op of another domain as unknown.
TEST(OnnxExport, TensordDomainOpsRoundTrip) {
  Graph g;
  g.inputs = {{"a", {DType::kFloat32, {3, 3}}}};
  g.outputs = {{"b", {DType::kFloat32, {3, 3}}}};
  g.nodes.push_back(node("Inv", {"a"}, {"b"}, {}));
  g.nodes.back().domain = "tensord";
  auto bytes = export_model(g);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto back = import_bytes(*bytes, "exported", "", ImportOptions{});
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->graph.nodes.at(0).domain, "tensord");
  EXPECT_EQ(back->graph.nodes.at(0).op, "Inv");
  g.nodes.back().domain = "com.example";
  bytes = export_model(g);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto other = import_bytes(*bytes, "exported", "", ImportOptions{});
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("com.example.Inv"), std::string::npos)
      << other.status().to_string();
}

TEST(OnnxExport, UntypedOutputsGetInferredTypes) {
  Graph g;
  g.inputs = {{"a", {DType::kFloat32, {2, 3}}}};
  g.outputs = {{"b", {}}};
  g.nodes.push_back(node("Relu", {"a"}, {"b"}));
  auto bytes = export_model(g);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto back = import_bytes(*bytes, "exported");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->graph.outputs[0].type, (TensorType{DType::kFloat32, {2, 3}}));
}

TEST(OnnxExport, ZooNetworksRoundTripWithTheSameOutputs) {
  for (const char* name : {"imdb_lstm", "mobilenet_v2"}) {
    SCOPED_TRACE(name);
    auto g = models::build_model(name, 2);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    auto x = models::sample_input(name, 2);
    ASSERT_TRUE(x.ok()) << x.status().to_string();
    const Graph back = round_trip(*g);
    EXPECT_EQ(back.initializers.size(), g->initializers.size());
    expect_same_bytes(run_ok(*g, {*x}), run_ok(back, {*x}));
  }
}

TEST(OnnxExport, FileRoundTripAndErrors) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tensord-export-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "m.onnx").string();
  ASSERT_TRUE(export_file(attribute_graph(), path).ok());
  auto back = import_file(path);
  EXPECT_TRUE(back.ok()) << back.status().to_string();

  const Status unwritable = export_file(attribute_graph(), (dir / "no/such/dir/m.onnx").string());
  EXPECT_FALSE(unwritable.ok());
  EXPECT_NE(unwritable.message().find("no/such/dir/m.onnx"), std::string::npos)
      << unwritable.message();

  Graph empty_init = attribute_graph();
  empty_init.initializers["W"] = HostTensor();
  const auto bad = export_model(empty_init);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'W'"), std::string::npos) << bad.status().message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tensord::onnx
