// Tier 1: ONNX import, including every kind of bad file, with models built in the test.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <fstream>
#include <stdexcept>
#include <tuple>

#include "onnx/onnx_import.h"
#include "tensord/onnx.h"

namespace tensord {
namespace {

namespace pb = ::onnx;

pb::ModelProto base_model(int64_t opset = 13) {
  pb::ModelProto m;
  m.set_ir_version(7);
  m.set_producer_name("test");
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* in = g->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(pb::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_param("N");
  tt->mutable_shape()->add_dim()->set_dim_value(3);
  g->add_output()->set_name("y");
  return m;
}

pb::NodeProto* add_node(pb::ModelProto& m, const std::string& op, std::vector<std::string> in,
                        std::vector<std::string> out, const std::string& name = "") {
  auto* n = m.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (auto& s : in) n->add_input(s);
  for (auto& s : out) n->add_output(s);
  return n;
}

Result<onnx::Model> import(const pb::ModelProto& m) {
  return onnx::import_bytes(m.SerializeAsString(), "model.onnx");
}

TEST(OnnxImport, SimpleModel) {
  auto m = base_model();
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(pb::TensorProto::FLOAT);
  w->add_dims(3);
  for (float v : {1.f, 2.f, 3.f}) w->add_float_data(v);
  add_node(m, "Add", {"x", "w"}, {"s"}, "add");
  add_node(m, "Relu", {"s"}, {"y"}, "relu");
  auto r = import(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->opset, 13);
  ASSERT_EQ(r->graph.inputs.size(), 1u);
  EXPECT_EQ(r->graph.inputs[0].type, (TensorType{DType::kFloat32, {-1, 3}}));
  EXPECT_EQ(r->graph.nodes.size(), 2u);
  ASSERT_EQ(r->graph.initializers.count("w"), 1u);
  EXPECT_EQ(r->graph.initializers.at("w").data<float>()[2], 3.f);
}

TEST(OnnxImport, LoadOnnxFileNamesTheGraphByItsFileOrFolder) {
  auto m = base_model();
  m.mutable_graph()->set_name("torch_jit");
  add_node(m, "Relu", {"x"}, {"y"}, "relu");
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tensord_name_test_" + std::to_string(::getpid())) / "resnet18";
  std::filesystem::create_directories(dir);
  for (const auto& [file, want] : {std::pair<std::string, std::string>{"model.onnx", "resnet18"},
                                   {"tiny-mlp.onnx", "tiny-mlp"}}) {
    std::ofstream(dir / file, std::ios::binary) << m.SerializeAsString();
    auto g = load_onnx_file((dir / file).string());
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_EQ(g->name, want);
  }
  std::filesystem::remove_all(dir.parent_path());
}

TEST(OnnxImport, CorruptTruncatedAndEmptyFiles) {
  auto m = base_model();
  add_node(m, "Relu", {"x"}, {"y"});
  const std::string bytes = m.SerializeAsString();
  for (const std::string& bad : {std::string(), std::string("\x89PNG\r\n\x1a\n garbage", 16),
                                 bytes.substr(0, bytes.size() / 2)}) {
    auto r = onnx::import_bytes(bad, "broken.onnx");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("broken.onnx"), std::string::npos) << r.status().message();
  }
  auto missing = onnx::import_file("/nonexistent/model.onnx");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(OnnxImport, CyclesAndDanglingNamesNameTheNode) {
  auto cyc = base_model();
  add_node(cyc, "Relu", {"b"}, {"a"}, "first");
  add_node(cyc, "Relu", {"a"}, {"b"}, "second");
  add_node(cyc, "Relu", {"b"}, {"y"}, "third");
  auto r = import(cyc);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cycle"), std::string::npos) << r.status().message();

  auto dangling = base_model();
  add_node(dangling, "Add", {"x", "ghost"}, {"y"}, "adder");
  r = import(dangling);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'ghost'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("adder"), std::string::npos) << r.status().message();
}

TEST(OnnxImport, InitializerSizeMustMatchShape) {
  auto m = base_model();
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(pb::TensorProto::FLOAT);
  w->add_dims(4);
  w->set_raw_data(std::string(12, '\0'));  // 3 floats for a shape of 4
  add_node(m, "Add", {"x", "w"}, {"y"});
  auto r = import(m);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'w'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("12 bytes"), std::string::npos) << r.status().message();

  auto absurd = base_model();
  auto* big = absurd.mutable_graph()->add_initializer();
  big->set_name("big");
  big->set_data_type(pb::TensorProto::FLOAT);
  big->add_dims(1LL << 40);
  big->add_dims(1LL << 40);
  add_node(absurd, "Add", {"x", "big"}, {"y"});
  r = import(absurd);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'big'"), std::string::npos) << r.status().message();

  auto negative = base_model();
  auto* neg = negative.mutable_graph()->add_initializer();
  neg->set_name("neg");
  neg->set_data_type(pb::TensorProto::FLOAT);
  neg->add_dims(-5);
  add_node(negative, "Add", {"x", "neg"}, {"y"});
  EXPECT_FALSE(import(negative).ok());
}

TEST(OnnxImport, UnsupportedOpsetAndOpsAreReportedAtOnce) {
  auto future = base_model(22);
  add_node(future, "Relu", {"x"}, {"y"});
  auto r = import(future);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("opset 22"), std::string::npos);

  auto m = base_model();
  add_node(m, "FancyOp", {"x"}, {"a"});
  add_node(m, "FancyOp", {"a"}, {"b"});
  add_node(m, "OtherOp", {"b"}, {"y"});
  r = import(m);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("FancyOp (2 nodes)"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("OtherOp (1 node)"), std::string::npos) << r.status().message();
}

TEST(OnnxImport, OldOpsetFormsBecomeOpset17Forms) {
  auto m = base_model(6 + 1);  // opset 7: Clip min/max and Slice starts/ends are attributes
  auto* clip = add_node(m, "Clip", {"x"}, {"c"}, "clip");
  auto* a = clip->add_attribute();
  a->set_name("min");
  a->set_type(pb::AttributeProto::FLOAT);
  a->set_f(-1.f);
  auto* slice = add_node(m, "Slice", {"c"}, {"y"}, "slice");
  auto* s = slice->add_attribute();
  s->set_name("starts");
  s->set_type(pb::AttributeProto::INTS);
  s->add_ints(1);
  auto* e = slice->add_attribute();
  e->set_name("ends");
  e->set_type(pb::AttributeProto::INTS);
  e->add_ints(3);
  auto r = import(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Node& c = r->graph.nodes[0];
  EXPECT_TRUE(c.attrs.empty());
  ASSERT_EQ(c.inputs.size(), 3u);
  EXPECT_EQ(r->graph.initializers.at(c.inputs[1]).data<float>()[0], -1.f);
  const Node& sl = r->graph.nodes[1];
  ASSERT_EQ(sl.inputs.size(), 3u);
  EXPECT_EQ(r->graph.initializers.at(sl.inputs[1]).data<int64_t>()[0], 1);
  EXPECT_EQ(r->graph.initializers.at(sl.inputs[2]).data<int64_t>()[0], 3);
}

// A model of the given opset with float inputs of the given shapes (declared or not).
pb::ModelProto legacy_model(int64_t opset,
                            const std::vector<std::pair<std::string, std::vector<int64_t>>>& inputs,
                            bool declare_shapes = true) {
  pb::ModelProto m;
  m.set_ir_version(3);
  m.add_opset_import()->set_version(opset);
  auto* g = m.mutable_graph();
  g->set_name("legacy");
  for (const auto& [name, dims] : inputs) {
    auto* in = g->add_input();
    in->set_name(name);
    auto* tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(pb::TensorProto::FLOAT);
    if (declare_shapes) {
      auto* shape = tt->mutable_shape();
      for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
    }
  }
  g->add_output()->set_name("y");
  return m;
}

void set_int(pb::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::INT);
  a->set_i(v);
}

// The Unsqueeze the importer put in front of `node`'s input 1, and its axes; fails if none.
std::vector<int64_t> aligned_axes(const Graph& g, const Node& node) {
  for (const Node& n : g.nodes)
    if (n.op == "Unsqueeze" && n.outputs.size() == 1 && n.outputs[0] == node.inputs.at(1)) {
      const HostTensor& axes = g.initializers.at(n.inputs.at(1));
      return std::vector<int64_t>(axes.data<int64_t>(), axes.data<int64_t>() + axes.numel());
    }
  ADD_FAILURE() << "no Unsqueeze feeds input 1 of " << node.label();
  return {};
}

const Node& node_named(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes)
    if (n.name == name) return n;
  throw std::runtime_error("no node " + name);
}

TEST(OnnxImport, Opset6BroadcastWithAxisBecomesNumpyBroadcasting) {
  // A [2, 3, 4, 5] + B [3, 4] at axis 1: B becomes [3, 4, 1].
  auto m = legacy_model(6, {{"a", {2, 3, 4, 5}}, {"b", {3, 4}}});
  auto* add = add_node(m, "Add", {"a", "b"}, {"s"}, "add");
  set_int(add, "broadcast", 1);
  set_int(add, "axis", 1);
  // Behind an op whose output shape only inference knows: Relu(s) * B2 [2] at axis 0.
  auto* c = m.mutable_graph()->add_input();
  c->set_name("c");
  c->mutable_type()->mutable_tensor_type()->set_elem_type(pb::TensorProto::FLOAT);
  c->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(2);
  add_node(m, "Relu", {"s"}, {"r"}, "relu");
  auto* mul = add_node(m, "Mul", {"r", "c"}, {"y"}, "mul");
  set_int(mul, "broadcast", 1);
  set_int(mul, "axis", 0);
  auto r = import(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Node& a = node_named(r->graph, "add");
  EXPECT_EQ(a.attrs.count("axis"), 0u);
  EXPECT_EQ(a.attrs.count("broadcast"), 0u);
  EXPECT_EQ(aligned_axes(r->graph, a), (std::vector<int64_t>{2}));
  EXPECT_EQ(aligned_axes(r->graph, node_named(r->graph, "mul")), (std::vector<int64_t>{1, 2, 3}));

  // Size-1 dims of B broadcast (PyTorch's exporter writes them); a trailing fit needs nothing.
  auto ones = legacy_model(6, {{"a", {2, 3}}, {"b", {2, 1}}});
  auto* o = add_node(ones, "Sub", {"a", "b"}, {"y"}, "sub");
  set_int(o, "broadcast", 1);
  set_int(o, "axis", 0);
  r = import(ones);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->graph.nodes.size(), 1u);
  EXPECT_EQ(r->graph.nodes[0].inputs[1], "b");
}

TEST(OnnxImport, Opset6BroadcastThatCannotAlignIsInvalidArgument) {
  for (const auto& [b_dims, axis, what] :
       std::vector<std::tuple<std::vector<int64_t>, int64_t, std::string>>{
           {{4}, 1, "B's dim 0 (4) differs from A's dim 1 (3)"},
           {{3, 4}, 2, "do not fit"},
           {{3}, 5, "do not fit"},
           {{2}, -4, "do not fit"}}) {
    auto m = legacy_model(6, {{"a", {2, 3, 4}}, {"b", b_dims}});
    auto* n = add_node(m, "Div", {"a", "b"}, {"y"}, "div");
    set_int(n, "broadcast", 1);
    set_int(n, "axis", axis);
    auto r = import(m);
    ASSERT_FALSE(r.ok()) << "axis " << axis;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    const std::string msg = r.status().message();
    EXPECT_NE(msg.find("node 'div'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("axis=" + std::to_string(axis)), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
  // Without declared shapes the rank of A is unknown: a refusal naming the form.
  auto unknown = legacy_model(6, {{"a", {}}, {"b", {3}}}, /*declare_shapes=*/false);
  auto* n = add_node(unknown, "Add", {"a", "b"}, {"y"}, "add");
  set_int(n, "broadcast", 1);
  set_int(n, "axis", 1);
  auto r = import(unknown);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("opset-6 broadcasting with axis=1"), std::string::npos)
      << r.status().message();
}

TEST(OnnxImport, Opset6PReluSlopeIsPerChannel) {
  auto m = legacy_model(6, {{"x", {2, 3, 4, 5}}, {"slope", {3}}});
  add_node(m, "PRelu", {"x", "slope"}, {"y"}, "prelu");
  auto r = import(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(aligned_axes(r->graph, node_named(r->graph, "prelu")), (std::vector<int64_t>{1, 2}));

  // One shared slope, and opset 7's NumPy alignment: nothing to rewrite.
  for (const auto& [opset, slope] :
       std::vector<std::pair<int64_t, std::vector<int64_t>>>{{6, {1}}, {7, {5}}}) {
    auto same = legacy_model(opset, {{"x", {2, 3, 4, 5}}, {"slope", slope}});
    add_node(same, "PRelu", {"x", "slope"}, {"y"}, "prelu");
    r = import(same);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->graph.nodes.size(), 1u) << "opset " << opset;
  }

  auto wrong = legacy_model(6, {{"x", {2, 3, 4, 5}}, {"slope", {5}}});
  add_node(wrong, "PRelu", {"x", "slope"}, {"y"}, "prelu");
  r = import(wrong);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("3 channels"), std::string::npos) << r.status().message();
}

TEST(OnnxImport, ExternalDataStaysInsideTheModelFolder) {
  const auto dir = std::filesystem::temp_directory_path() / "tensord_ext_test";
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir / "weights.bin", std::ios::binary);
    float v[3] = {4, 5, 6};
    f.write(reinterpret_cast<const char*>(v), sizeof v);
  }
  auto make = [&](const std::string& location, int64_t dims) {
    auto m = base_model();
    auto* w = m.mutable_graph()->add_initializer();
    w->set_name("w");
    w->set_data_type(pb::TensorProto::FLOAT);
    w->add_dims(dims);
    w->set_data_location(pb::TensorProto::EXTERNAL);
    auto* kv = w->add_external_data();
    kv->set_key("location");
    kv->set_value(location);
    add_node(m, "Add", {"x", "w"}, {"y"});
    return m.SerializeAsString();
  };
  auto ok = onnx::import_bytes(make("weights.bin", 3), "m.onnx", dir.string());
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->graph.initializers.at("w").data<float>()[1], 5.f);
  EXPECT_FALSE(onnx::import_bytes(make("../etc/passwd", 3), "m.onnx", dir.string()).ok());
  EXPECT_FALSE(onnx::import_bytes(make("/etc/passwd", 3), "m.onnx", dir.string()).ok());
  auto short_file = onnx::import_bytes(make("weights.bin", 4), "m.onnx", dir.string());
  ASSERT_FALSE(short_file.ok());
  EXPECT_NE(short_file.status().message().find("past the end"), std::string::npos)
      << short_file.status().message();
  std::filesystem::remove_all(dir);
}

TEST(OnnxImport, TensorFilesRoundTrip) {
  HostTensor t = HostTensor::from_vector<int64_t>({1, -2, 3}, {3});
  auto back = onnx::parse_tensor(onnx::serialize_tensor(t, "t"), "t.pb");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->to_double_vector(), (std::vector<double>{1, -2, 3}));
  EXPECT_FALSE(onnx::parse_tensor("\xff\xff\xff", "bad.pb").ok());
}

TEST(OnnxImport, OutOfScopeReasons) {
  auto m = base_model();
  add_node(m, "SequenceConstruct", {"x"}, {"y"});
  EXPECT_NE(onnx::out_of_scope_reason(m.SerializeAsString()).find("SequenceConstruct"),
            std::string::npos);
  auto plain = base_model();
  add_node(plain, "Relu", {"x"}, {"y"});
  EXPECT_EQ(onnx::out_of_scope_reason(plain.SerializeAsString()), "");
}

// A sequence whose contents are known at import is replaced by its tensors (the engine's values
// are tensors only); one read at a position known only at run time stays out of scope.
TEST(OnnxImport, SequencesKnownAtImportBecomeTheirTensors) {
  auto with_index = [](bool constant) {
    auto m = base_model();
    add_node(m, "Relu", {"x"}, {"r"});
    add_node(m, "SequenceConstruct", {"x", "r"}, {"s"});
    add_node(m, "SequenceEmpty", {}, {"e"});
    add_node(m, "SequenceInsert", {"e", "r"}, {"e1"});
    if (constant) {
      auto* c = add_node(m, "Constant", {}, {"k"});
      auto* a = c->add_attribute();
      a->set_name("value");
      a->set_type(pb::AttributeProto::TENSOR);
      a->mutable_t()->set_data_type(pb::TensorProto::INT64);
      a->mutable_t()->add_int64_data(-1);  // the last: r
    } else {
      add_node(m, "Shape", {"x"}, {"shape"});
      add_node(m, "ReduceMin", {"shape"}, {"k"});
    }
    add_node(m, "SequenceAt", {"s", "k"}, {"at"});
    add_node(m, "ConcatFromSequence", {"e1"}, {"cat"})->add_attribute()->set_name("axis");
    add_node(m, "Add", {"at", "cat"}, {"y"});
    return m;
  };
  const auto m = with_index(true);
  EXPECT_EQ(onnx::out_of_scope_reason(m.SerializeAsString()), "");
  auto r = import(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  std::map<std::string, int> ops;
  for (const auto& n : r->graph.nodes) ops[n.op]++;
  EXPECT_EQ(ops, (std::map<std::string, int>{
                     {"Add", 1}, {"Concat", 1}, {"Constant", 1}, {"Identity", 1}, {"Relu", 1}}));
  for (const auto& n : r->graph.nodes)
    if (n.op == "Identity") EXPECT_EQ(n.inputs, (std::vector<std::string>{"r"}));
  // A Loop carrying a list, 256 trips, its body a 1 MiB Constant: unrolled it would copy
  // 256 MiB of nodes; it is left alone (and refused as a sequence), not multiplied.
  {
    auto big = base_model();
    add_node(big, "SequenceEmpty", {}, {"e"});
    auto int_constant = [&](const std::string& name, int64_t v, pb::TensorProto::DataType t) {
      auto* c = add_node(big, "Constant", {}, {name});
      auto* a = c->add_attribute();
      a->set_name("value");
      a->set_type(pb::AttributeProto::TENSOR);
      a->mutable_t()->set_data_type(t);
      if (t == pb::TensorProto::INT64) a->mutable_t()->add_int64_data(v);
      else a->mutable_t()->add_int32_data(static_cast<int32_t>(v));
    };
    int_constant("trips", 256, pb::TensorProto::INT64);
    int_constant("true", 1, pb::TensorProto::BOOL);
    auto* loop = add_node(big, "Loop", {"trips", "true", "e"}, {"list"});
    auto* attr = loop->add_attribute();
    attr->set_name("body");
    attr->set_type(pb::AttributeProto::GRAPH);
    auto* body = attr->mutable_g();
    body->set_name("body");
    for (const char* in : {"i", "c", "s"}) body->add_input()->set_name(in);
    auto* c = body->add_node();
    c->set_op_type("Constant");
    c->add_output("w");
    auto* v = c->add_attribute();
    v->set_name("value");
    v->set_type(pb::AttributeProto::TENSOR);
    v->mutable_t()->set_data_type(pb::TensorProto::FLOAT);
    v->mutable_t()->add_dims(1 << 18);
    v->mutable_t()->set_raw_data(std::string(size_t{1} << 20, '\0'));
    auto* ins = body->add_node();
    ins->set_op_type("SequenceInsert");
    ins->add_input("s");
    ins->add_input("w");
    ins->add_output("s2");
    body->add_output()->set_name("c");
    body->add_output()->set_name("s2");
    int_constant("zero", 0, pb::TensorProto::INT64);
    add_node(big, "SequenceAt", {"list", "zero"}, {"y"});
    EXPECT_NE(onnx::out_of_scope_reason(big.SerializeAsString()).find("Sequence"),
              std::string::npos);
    EXPECT_FALSE(import(big).ok());
  }
  const auto dynamic = with_index(false);
  EXPECT_NE(onnx::out_of_scope_reason(dynamic.SerializeAsString()).find("Sequence"),
            std::string::npos);
  EXPECT_FALSE(import(dynamic).ok());
}

}  // namespace
}  // namespace tensord
