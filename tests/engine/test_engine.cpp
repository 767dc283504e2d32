// Tier 2: the engine through LocalClient — placement, async execution, error propagation,
// copies, accounting, sessions.
#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/engine.h"
#include "engine/local_client.h"

namespace tensord {
namespace {

// Two host devices (cpu:0, cpu:1) so placement and copies are exercised without a GPU.
std::shared_ptr<Engine> make_engine(bool peer_copy = true, const std::string& filter = "") {
  setenv("TENSORD_CPU_DEVICES", "2", 1);
  EngineOptions o;
  o.device_filter = filter;
  o.peer_copy = peer_copy;
  auto e = Engine::create(o);
  unsetenv("TENSORD_CPU_DEVICES");
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return std::shared_ptr<Engine>(std::move(e).value());
}

HostTensor f32(std::vector<float> v, Shape s) { return HostTensor::from_vector(v, std::move(s)); }

Node node(std::string name, std::string op, std::vector<std::string> in,
          std::vector<std::string> out, AttributeMap attrs = {}) {
  Node n;
  n.name = std::move(name);
  n.op = std::move(op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

TEST(Engine, DevicesAndFilters) {
  auto e = make_engine();
  auto devs = e->devices();
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[0].name, "cpu:0");
  EXPECT_EQ(devs[1].name, "cpu:1");
  EXPECT_GT(devs[0].memory_bytes, 0);
  EXPECT_EQ(*e->default_device(), "cpu:0");

  auto only1 = make_engine(true, "cpu:1");
  ASSERT_EQ(only1->devices().size(), 1u);
  EXPECT_EQ(only1->devices()[0].name, "cpu:1");
  EXPECT_EQ(only1->filtered_out(), std::vector<std::string>{"cpu:0"});
  EXPECT_EQ(*only1->default_device(), "cpu:1");

  auto none = make_engine(true, "none");
  EXPECT_TRUE(none->devices().empty());
  auto d = none->default_device();
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("no devices"), std::string::npos);

  EXPECT_TRUE(device_matches_filter("cpu:3", "cpu", "cpu:*"));
  EXPECT_TRUE(device_matches_filter("cpu:3", "cpu", "opencl:*, cpu"));
  EXPECT_FALSE(device_matches_filter("cpu:3", "cpu", "cuda:*"));
  EXPECT_FALSE(device_matches_filter("cpu:0", "cpu", "none"));
}

TEST(Engine, BadDefaultDeviceIsAClearError) {
  EngineOptions o;
  o.default_device = "cuda:7";
  auto e = Engine::create(o);
  ASSERT_TRUE(e.ok());
  auto d = (*e)->default_device();
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find("cuda:7"), std::string::npos);
}

TEST(Engine, UploadReadRoundTripAndAccounting) {
  auto e = make_engine();
  LocalClient c(e);
  HostTensor t = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  auto h = c.upload(t.view(), "cpu:1");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(e->devices()[1].memory_in_use, 24);
  EXPECT_EQ(e->session_bytes(c.session()), 24);
  auto back = c.read(*h);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->shape(), (Shape{2, 3}));
  EXPECT_EQ(back->data<float>()[5], 6.0f);
  auto info = c.info(*h);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->device, "cpu:1");
  EXPECT_EQ(info->type, (TensorType{DType::kFloat32, {2, 3}}));
  ASSERT_TRUE(c.release(*h).ok());
  EXPECT_EQ(e->devices()[1].memory_in_use, 0);
  EXPECT_EQ(c.read(*h).status().code(), StatusCode::kNotFound);
}

TEST(Engine, BadUploadsAreErrors) {
  auto e = make_engine();
  LocalClient c(e);
  HostTensor t = f32({1, 2}, {2});
  auto unknown = c.upload(t.view(), "cuda:0");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("cuda:0"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("cpu:0"), std::string::npos);  // lists what exists

  // Larger than the device: RESOURCE_EXHAUSTED naming the device, not a crash.
  TensorView huge{DType::kFloat32, {1LL << 20, 1LL << 20, 1LL << 10}, t.data()};
  auto big = c.upload(huge, "cpu:0");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(big.status().message().find("cpu:0"), std::string::npos);
  EXPECT_EQ(e->devices()[0].memory_in_use, 0);

  TensorView overflow{DType::kFloat32, {1LL << 40, 1LL << 40}, t.data()};
  EXPECT_EQ(c.upload(overflow, "").status().code(), StatusCode::kInvalidArgument);
  TensorView negative{DType::kFloat32, {-1}, t.data()};
  EXPECT_EQ(c.upload(negative, "").status().code(), StatusCode::kInvalidArgument);
  TensorView bad_dtype{static_cast<DType>(42), {2}, t.data()};
  EXPECT_EQ(c.upload(bad_dtype, "").status().code(), StatusCode::kInvalidArgument);
}

TEST(Engine, FilteredOutDeviceIsNotUsable) {
  auto e = make_engine(true, "cpu:0");
  LocalClient c(e);
  HostTensor t = f32({1}, {1});
  auto h = c.upload(t.view(), "cpu:1");
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kNotFound);
}

TEST(Engine, SessionQuotaIsResourceExhausted) {
  auto e = make_engine();
  LocalClient c(e, /*memory_limit=*/64);
  HostTensor small = f32(std::vector<float>(8, 1.0f), {8});   // 32 bytes
  ASSERT_TRUE(c.upload(small.view(), "").ok());
  ASSERT_TRUE(c.upload(small.view(), "").ok());
  auto third = c.upload(small.view(), "");
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("session memory limit"), std::string::npos);
  EXPECT_EQ(e->session_bytes(c.session()), 64);
}

TEST(Engine, SessionsCannotSeeEachOthersHandles) {
  auto e = make_engine();
  LocalClient a(e), b(e);
  HostTensor t = f32({1, 2}, {2});
  auto h = a.upload(t.view(), "");
  ASSERT_TRUE(h.ok());
  auto r = b.read(*h);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(b.release(*h).code(), StatusCode::kNotFound);
  EXPECT_TRUE(a.read(*h).ok());  // untouched
}

TEST(Engine, ClosingASessionFreesItsTensors) {
  auto e = make_engine();
  {
    LocalClient c(e);
    HostTensor t = f32(std::vector<float>(1000, 2.0f), {1000});
    ASSERT_TRUE(c.upload(t.view(), "").ok());
    EXPECT_EQ(e->devices()[0].memory_in_use, 4000);
  }
  EXPECT_EQ(e->devices()[0].memory_in_use, 0);
}

TEST(Engine, ExecuteRunsAsyncAndCachesExecutables) {
  auto e = make_engine();
  LocalClient c(e);
  Graph g;
  g.inputs = {{"a", {DType::kFloat32, {3}}}, {"b", {DType::kFloat32, {3}}}};
  g.nodes = {node("add", "Add", {"a", "b"}, {"s"}), node("relu", "Relu", {"s"}, {"y"})};
  g.outputs = {{"y", {}}};
  HostTensor a = f32({1, -5, 3}, {3}), b = f32({1, 1, -4}, {3});
  auto ha = c.upload(a.view(), ""), hb = c.upload(b.view(), "");
  for (int i = 0; i < 3; ++i) {
    auto out = c.execute(g, {*ha, *hb}, "");
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    ASSERT_EQ(out->size(), 1u);
    auto info = c.info((*out)[0]);  // type known before the value
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->type, (TensorType{DType::kFloat32, {3}}));
    auto y = c.read((*out)[0]);
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    EXPECT_EQ(y->to_double_vector(), (std::vector<double>{2, 0, 0}));
  }
  auto m = e->metrics();
  EXPECT_EQ(m.compiles, 1);
  EXPECT_EQ(m.cache_hits, 2);
  EXPECT_EQ(m.executes, 3);
}

TEST(Engine, ErrorLandsOnlyOnDependentOutputs) {
  auto e = make_engine();
  LocalClient c(e);
  Graph g;
  g.inputs = {{"a", {}}, {"b", {}}};
  // 'mm' fails (inner dims 3 vs 2); 'good' does not depend on it.
  g.nodes = {node("mm", "MatMul", {"a", "b"}, {"p"}), node("after", "Relu", {"p"}, {"q"}),
             node("good", "Neg", {"a"}, {"n"})};
  g.outputs = {{"q", {}}, {"n", {}}};
  HostTensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3}), b = f32({1, 2, 3, 4}, {2, 2});
  auto ha = c.upload(a.view(), ""), hb = c.upload(b.view(), "");
  auto out = c.execute(g, {*ha, *hb}, "");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  Status bad = c.wait((*out)[0]);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("MatMul"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("'mm'"), std::string::npos) << bad.message();
  EXPECT_EQ(c.read((*out)[0]).status(), bad);
  auto n = c.read((*out)[1]);
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(n->to_double_vector(), (std::vector<double>{-1, -2, -3, -4, -5, -6}));
}

TEST(Engine, UnknownOpAndBadAttributeNameTheNode) {
  auto e = make_engine();
  LocalClient c(e);
  HostTensor a = f32({1, 2}, {2});
  auto ha = c.upload(a.view(), "");
  Graph g;
  g.inputs = {{"a", {}}};
  g.nodes = {node("weird", "FrobnicateOp", {"a"}, {"y"})};
  g.outputs = {{"y", {}}};
  auto out = c.execute(g, {*ha}, "");
  ASSERT_TRUE(out.ok());
  Status s = c.wait((*out)[0]);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("FrobnicateOp"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'weird'"), std::string::npos) << s.message();

  g.nodes = {node("sm", "Softmax", {"a"}, {"y"}, {{"axis", int64_t{5}}})};
  out = c.execute(g, {*ha}, "");
  ASSERT_TRUE(out.ok());
  s = c.wait((*out)[0]);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Softmax"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("5"), std::string::npos) << s.message();
}

TEST(Engine, StructuralGraphErrorsFailTheCall) {
  auto e = make_engine();
  LocalClient c(e);
  HostTensor a = f32({1, 2}, {2});
  auto ha = c.upload(a.view(), "");
  Graph g;
  g.inputs = {{"a", {}}};
  g.nodes = {node("x", "Relu", {"y"}, {"x1"}), node("y", "Relu", {"x1"}, {"y"})};
  g.outputs = {{"y", {}}};
  auto out = c.execute(g, {*ha}, "");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("cycle"), std::string::npos);
  // Wrong number of inputs.
  g.nodes = {node("r", "Relu", {"a"}, {"y"})};
  EXPECT_EQ(c.execute(g, {}, "").status().code(), StatusCode::kInvalidArgument);
  // A handle that does not exist.
  EXPECT_EQ(c.execute(g, {999999}, "").status().code(), StatusCode::kNotFound);
}

void copy_between_devices(bool peer) {
  auto e = make_engine(peer);
  LocalClient c(e);
  HostTensor a = f32({1, 2, 3}, {3});
  auto h0 = c.upload(a.view(), "cpu:0");
  auto h1 = c.copy(*h0, "cpu:1");
  ASSERT_TRUE(h1.ok());
  EXPECT_EQ(c.info(*h1)->device, "cpu:1");
  auto back = c.read(*h1);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->to_double_vector(), (std::vector<double>{1, 2, 3}));
  auto same = c.copy(*h0, "cpu:0");
  ASSERT_TRUE(same.ok());
  auto m = e->metrics();
  EXPECT_EQ(m.copies_peer, peer ? 1 : 0);
  EXPECT_EQ(m.copies_staged, peer ? 0 : 1);
  EXPECT_EQ(m.copies_same_device, 1);
  EXPECT_EQ(e->devices()[0].memory_in_use, 12);  // same-device copy shares the bytes
  EXPECT_EQ(e->devices()[1].memory_in_use, 12);
}

TEST(Engine, PeerCopyBetweenDevices) { copy_between_devices(true); }
TEST(Engine, StagedCopyBetweenDevices) { copy_between_devices(false); }

TEST(Engine, ExecuteMovesInputsToTheTargetDevice) {
  auto e = make_engine(false);
  LocalClient c(e);
  HostTensor a = f32({1, 2}, {2}), b = f32({10, 20}, {2});
  auto ha = c.upload(a.view(), "cpu:0"), hb = c.upload(b.view(), "cpu:1");
  Graph g;
  g.inputs = {{"a", {}}, {"b", {}}};
  g.nodes = {node("add", "Add", {"a", "b"}, {"y"})};
  g.outputs = {{"y", {}}};
  auto out = c.execute(g, {*ha, *hb}, "");  // first input's device
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(c.info((*out)[0])->device, "cpu:0");
  EXPECT_EQ(c.read((*out)[0])->to_double_vector(), (std::vector<double>{11, 22}));
  auto out1 = c.execute(g, {*ha, *hb}, "cpu:1");  // named device
  ASSERT_TRUE(out1.ok());
  EXPECT_EQ(c.info((*out1)[0])->device, "cpu:1");
  EXPECT_EQ(c.read((*out1)[0])->to_double_vector(), (std::vector<double>{11, 22}));
  EXPECT_EQ(e->metrics().implicit_moves, 2);
}

TEST(Engine, ErrorsPropagateThroughLaterExecutes) {
  auto e = make_engine();
  LocalClient c(e);
  HostTensor a = f32({1, 2, 3}, {3}), b = f32({1, 2}, {2});
  auto ha = c.upload(a.view(), ""), hb = c.upload(b.view(), "");
  Graph g;
  g.inputs = {{"a", {}}, {"b", {}}};
  g.nodes = {node("bad_add", "Add", {"a", "b"}, {"y"})};
  g.outputs = {{"y", {}}};
  auto out = c.execute(g, {*ha, *hb}, "");
  ASSERT_TRUE(out.ok());
  Graph g2;
  g2.inputs = {{"x", {}}};
  g2.nodes = {node("r", "Relu", {"x"}, {"y"})};
  g2.outputs = {{"y", {}}};
  auto out2 = c.execute(g2, {(*out)[0]}, "");
  ASSERT_TRUE(out2.ok());
  Status s = c.wait((*out2)[0]);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bad_add"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tensord
