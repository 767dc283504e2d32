// Tier 2: engine-level behaviour seen through the Engine object — device filters, metrics
// (executable cache, peer vs staged copies, implicit moves), per-session byte counters.
// Everything a Client can observe (results, errors, sessions, quotas) lives in the one
// Client suite, tests/rpc/test_client_suite.cpp, which runs on an embedded engine and on a
// real broker process.
#include <gtest/gtest.h>

#include <algorithm>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <atomic>
#include <random>
#include <cmath>
#include "engine/engine.h"
#include "client/local_client.h"

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
  // Devices of other kinds present on this machine (opencl:N ...) come after the cpu ones.
  devs.erase(std::remove_if(devs.begin(), devs.end(), [](const DeviceInfo& d) { return d.kind != "cpu"; }),
             devs.end());
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[0].name, "cpu:0");
  EXPECT_EQ(devs[1].name, "cpu:1");
  EXPECT_GT(devs[0].memory_bytes, 0);
  EXPECT_EQ(*e->default_device(), "cpu:0");

  auto only1 = make_engine(true, "cpu:1");
  ASSERT_EQ(only1->devices().size(), 1u);
  EXPECT_EQ(only1->devices()[0].name, "cpu:1");
  ASSERT_FALSE(only1->filtered_out().empty());
  EXPECT_EQ(only1->filtered_out()[0], "cpu:0");
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

  // Backends the filter cannot admit are not probed at all (PoCL maps 65 MB just to list).
  EXPECT_TRUE(backend_may_match_filter("opencl", ""));
  EXPECT_TRUE(backend_may_match_filter("opencl", "cpu:0, opencl:1"));
  EXPECT_TRUE(backend_may_match_filter("opencl", "open*"));
  EXPECT_TRUE(backend_may_match_filter("cuda", "*:0"));
  EXPECT_FALSE(backend_may_match_filter("opencl", "cpu:0"));
  EXPECT_FALSE(backend_may_match_filter("opencl", "cpu,cuda:*"));
  EXPECT_FALSE(backend_may_match_filter("opencl", "none"));
  EXPECT_FALSE(backend_may_match_filter("opencl", "n1/opencl:0"));
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
  // Without peer copies: both cpu devices are host-visible, so one write from the source's
  // bytes (no staging buffer).
  EXPECT_EQ(m.copies_mapped, peer ? 0 : 1);
  EXPECT_EQ(m.copies_staged, 0);
  EXPECT_EQ(peer ? m.bytes_peer : m.bytes_host_to_device - 12, 12);
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

// A loaded model compiles once per input types, runs on its own device (inputs elsewhere are
// moved), belongs to its session, and its bytes and executables go with unload().
// A named model: held once by the engine, opened by any session, charged to none (a session
// whose quota is below the weights runs it), compiled once for all; unload closes one
// session's handle only.
TEST(Engine, NamedModelIsSharedAndChargedToNoSession) {
  auto e = make_engine();
  Graph g;
  g.name = "bias";
  g.inputs = {{"x", {}}};
  g.outputs = {{"y", {}}};
  std::vector<float> w(64 << 10, 1.0f);  // 256 KiB of weights
  g.initializers.emplace("w", f32(w, {static_cast<int64_t>(w.size())}));
  g.nodes.push_back(node("add", "Add", {"x", "w"}, {"y"}));
  ModelInfo info;
  info.name = "bias";
  ASSERT_TRUE(e->add_named_model(g, "cpu:1", info).ok());
  EXPECT_EQ(e->add_named_model(g, "", info).code(), StatusCode::kAlreadyExists);
  ModelInfo broken;
  broken.name = "bias";
  broken.reason = "must not replace the loaded one";
  e->add_unavailable_model(broken);
  broken.name = "zz";
  broken.reason = "corrupt file";
  e->add_unavailable_model(broken);
  auto list = e->named_models();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_TRUE(list[0].ready);
  EXPECT_EQ(list[0].device, "cpu:1");
  EXPECT_EQ(list[0].weight_bytes, 256 << 10);
  EXPECT_FALSE(list[1].ready);

  const SessionId a = e->open_session(64 << 10);  // a quarter of the weights
  const SessionId b = e->open_session(64 << 10);
  const auto before = e->metrics();
  std::vector<ModelHandle> handles;
  for (SessionId s : {a, b}) {
    ModelInfo got;
    auto m = e->open_named_model(s, "bias", &got);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(got.inputs.size(), 1u);
    handles.push_back(*m);
    auto x = e->upload(s, f32(std::vector<float>(w.size(), 2.0f), {static_cast<int64_t>(w.size())}).view(), "cpu:1");
    ASSERT_FALSE(x.ok()) << "an input of 256 KiB fit in a 64 KiB session";
    auto small = e->upload(s, f32({2.0f}, {1}).view(), "cpu:1");
    ASSERT_TRUE(small.ok());
    auto y = e->run(s, *m, {*small});  // broadcast: [1] + [65536]
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    // The output (256 KiB) is the session's: over its quota, so it fails, naming the limit.
    auto v = e->read(s, (*y)[0]);
    EXPECT_EQ(v.status().code(), StatusCode::kResourceExhausted) << v.status().to_string();
    EXPECT_LT(e->session_bytes(s), 64 << 10) << "the weights were charged to the session";
  }
  EXPECT_EQ(e->metrics().compiles - before.compiles, 1) << "compiled once for both sessions";
  EXPECT_EQ(e->open_named_model(a, "zz").status().code(), StatusCode::kFailedPrecondition);
  auto unknown = e->open_named_model(a, "nope");
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("'bias', 'zz'"), std::string::npos);
  // Unload (and a closed session) drop one handle: the other session still runs it.
  EXPECT_TRUE(e->unload(a, handles[0]).ok());
  EXPECT_TRUE(e->close_session(a).ok());
  auto x = e->upload(b, f32({1.0f}, {1}).view(), "");
  ASSERT_TRUE(x.ok());
  EXPECT_TRUE(e->run(b, handles[1], {*x}).ok());
  EXPECT_TRUE(e->open_named_model(b, "bias").ok());
  EXPECT_TRUE(e->close_session(b).ok());
}

TEST(Engine, LoadedModelCompilesOnceAndIsSessionOwned) {
  auto e = make_engine();
  const SessionId s = e->open_session();
  Graph g;
  g.inputs = {{"x", {}}};
  g.outputs = {{"y", {}}};
  g.initializers.emplace("w", f32({10, 20}, {2}));
  g.nodes.push_back(node("add", "Add", {"x", "w"}, {"y"}));
  auto model = e->load(s, g, "cpu:1");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto before = e->metrics();
  for (float k : {1.0f, 2.0f, 3.0f}) {
    auto x = e->upload(s, f32({k, k}, {2}).view(), "cpu:0");
    ASSERT_TRUE(x.ok());
    auto y = e->run(s, *model, {*x});
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    auto info = e->info(s, (*y)[0]);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->device, "cpu:1");
    auto v = e->read(s, (*y)[0]);
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(v->data<float>()[0], 10 + k);
    EXPECT_EQ(v->data<float>()[1], 20 + k);
  }
  const auto after = e->metrics();
  EXPECT_EQ(after.compiles - before.compiles, 1);
  EXPECT_EQ(after.cache_hits - before.cache_hits, 2);
  EXPECT_EQ(after.implicit_moves - before.implicit_moves, 3);

  // Wrong input count, another session, unload, a stale handle.
  EXPECT_EQ(e->run(s, *model, {}).status().code(), StatusCode::kInvalidArgument);
  const SessionId other = e->open_session();
  auto foreign = e->run(other, *model, {});
  EXPECT_EQ(foreign.status().code(), StatusCode::kNotFound);
  EXPECT_NE(foreign.status().message().find("model handle"), std::string::npos);
  EXPECT_TRUE(e->unload(s, *model).ok());
  EXPECT_EQ(e->unload(s, *model).code(), StatusCode::kNotFound);
  EXPECT_TRUE(e->close_session(other).ok());
  EXPECT_TRUE(e->close_session(s).ok());

  // A graph with a cycle is refused at load.
  Graph bad = g;
  bad.nodes[0].inputs = {"y", "w"};
  const SessionId s2 = e->open_session();
  EXPECT_FALSE(e->load(s2, bad, "").ok());
  EXPECT_EQ(e->load(s2, g, "cpu:7").status().code(), StatusCode::kNotFound);
}

TEST(Engine, PeakMemoryIsAHighWaterMark) {
  auto e = make_engine();
  const SessionId s = e->open_session();
  const int64_t base = e->devices()[0].memory_peak;
  HostTensor big(DType::kFloat32, {1 << 20});
  auto h = e->upload(s, big.view(), "cpu:0");
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(e->wait(s, *h).ok());
  EXPECT_GE(e->devices()[0].memory_peak, base + (4 << 20));
  EXPECT_TRUE(e->release(s, *h).ok());
  EXPECT_EQ(e->devices()[0].memory_in_use, 0);
  EXPECT_GE(e->devices()[0].memory_peak, 4 << 20);  // the peak stays
}

// Issue 35: after every session closed, a device showed a few bytes "used" with no tensor: the
// constants of compiled graphs, kept in the executable cache. They are reported apart now
// (memory_cached, part of memory_reserved): "used" is exactly 0 once the last tensor is freed.
TEST(Engine, CachedConstantsAreNotUsedMemory) {
  // cpu:1 without host access (constants uploaded to it, as on an accelerator), and opencl:0
  // where this machine has one.
  setenv("TENSORD_TEST_CPU_NO_HOST_ACCESS", "1", 1);
  auto e = make_engine();
  unsetenv("TENSORD_TEST_CPU_NO_HOST_ACCESS");
  std::vector<std::string> names = {"cpu:0", "cpu:1"};
  for (const DeviceInfo& d : e->devices())
    if (d.name == "opencl:0") names.push_back(d.name);
  Graph g;
  g.name = "plus_w";
  g.inputs = {{"x", {DType::kFloat32, {4}}}};
  g.initializers.emplace("w", f32({10, 20, 30, 40}, {4}));
  g.nodes = {node("add", "Add", {"x", "w"}, {"y"})};
  g.outputs = {{"y", {}}};
  for (const std::string& name : names) {
    const SessionId s = e->open_session();
    HostTensor x = f32({1, 2, 3, 4}, {4});
    auto h = e->upload(s, x.view(), name);
    ASSERT_TRUE(h.ok()) << name << ": " << h.status().to_string();
    auto out = e->execute(s, g, {*h}, name);
    ASSERT_TRUE(out.ok()) << name << ": " << out.status().to_string();
    auto y = e->read(s, (*out)[0]);
    ASSERT_TRUE(y.ok()) << name << ": " << y.status().to_string();
    EXPECT_EQ(y->to_double_vector(), (std::vector<double>{11, 22, 33, 44})) << name;
    ASSERT_TRUE(e->release(s, (*out)[0]).ok());
    ASSERT_TRUE(e->release(s, *h).ok());
    ASSERT_TRUE(e->close_session(s).ok());
  }
  EXPECT_GE(e->metrics().executables_cached, static_cast<int64_t>(names.size()));
  // Values are let go asynchronously (the queue's last reference): wait until they are.
  auto any_used = [&] {
    for (const DeviceInfo& d : e->devices())
      if (d.memory_in_use != 0) return true;
    return false;
  };
  for (int i = 0; i < 500 && any_used(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  for (const DeviceInfo& d : e->devices()) {
    EXPECT_EQ(d.memory_in_use, 0) << d.name << " (cached " << d.memory_cached << ")";
    EXPECT_GE(d.memory_reserved, d.memory_cached) << d.name;
    std::printf("[ figures ] %s: used %lld B, cached %lld B, reserved %lld B\n", d.name.c_str(),
                static_cast<long long>(d.memory_in_use), static_cast<long long>(d.memory_cached),
                static_cast<long long>(d.memory_reserved));
    // cpu:0 computes on the executable's own host copy of w (nothing allocated); opencl:0
    // holds its 16 bytes on the device. (On cpu:1 the Add's compiled region keeps w with its
    // prepared weights, not as a device constant: Placement.DeviceWithoutHostAccess… covers
    // constants on a cpu device without host access.)
    if (d.name == "cpu:0") EXPECT_EQ(d.memory_cached, 0) << d.name;
    if (d.name == "opencl:0") EXPECT_EQ(d.memory_cached, 16) << d.name;
  }
}

// Issue 15, attack 6: all sessions of one tenant share its limit; compiled graphs are charged
// to the tenant that caused them, never shared with another tenant, and go with its last
// session.
TEST(Engine, TenantsShareOneLimitAndOwnTheirExecutables) {
  auto e = make_engine();
  SessionOptions a;
  a.tenant = "alice";
  a.memory_limit = 8 << 20;
  a.tenant_memory_limit = 6 << 20;
  const SessionId a1 = e->open_session(a), a2 = e->open_session(a);
  HostTensor big(DType::kFloat32, {1 << 20});  // 4 MiB
  auto h1 = e->upload(a1, big.view(), "cpu:0");
  ASSERT_TRUE(h1.ok()) << h1.status().to_string();
  // A second session of the same tenant cannot hold another 4 MiB: the tenant has 6.
  auto h2 = e->upload(a2, big.view(), "cpu:0");
  ASSERT_FALSE(h2.ok());
  EXPECT_EQ(h2.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(h2.status().message().find("tenant memory limit"), std::string::npos)
      << h2.status().message();
  EXPECT_GE(e->tenant_bytes("alice"), 4 << 20);

  // The same graph compiled for two tenants: two compiles, each charged to its tenant.
  Graph g;
  g.inputs = {{"x", {}}};
  g.outputs = {{"y", {}}};
  g.initializers.emplace("w", f32({10, 20}, {2}));
  g.nodes.push_back(node("add", "Add", {"x", "w"}, {"y"}));
  SessionOptions b;
  b.tenant = "bob";
  const SessionId b1 = e->open_session(b);
  const auto before = e->metrics();
  for (SessionId s : {a1, b1, a2}) {
    auto x = e->upload(s, f32({1, 2}, {2}).view(), "cpu:0");
    ASSERT_TRUE(x.ok());
    auto y = e->execute(s, g, {*x}, "");
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    auto v = e->read(s, (*y)[0]);
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    EXPECT_EQ(v->data<float>()[1], 22);
  }
  const auto after = e->metrics();
  EXPECT_EQ(after.compiles - before.compiles, 2);  // alice once, bob once
  EXPECT_EQ(after.cache_hits - before.cache_hits, 1);  // alice's second session
  EXPECT_GT(e->tenant_bytes("bob"), 0);

  // Bob's last session closes: nothing is left on his behalf.
  EXPECT_TRUE(e->close_session(b1).ok());
  EXPECT_EQ(e->tenant_bytes("bob"), 0);
  EXPECT_TRUE(e->close_session(a1).ok());
  EXPECT_TRUE(e->close_session(a2).ok());
  EXPECT_EQ(e->tenant_bytes("alice"), 0);
  // A new bob compiles again (his cache went with him).
  const SessionId b2 = e->open_session(b);
  auto x = e->upload(b2, f32({1, 2}, {2}).view(), "cpu:0");
  ASSERT_TRUE(x.ok());
  const auto c0 = e->metrics().compiles;
  ASSERT_TRUE(e->execute(b2, g, {*x}, "").ok());
  EXPECT_EQ(e->metrics().compiles - c0, 1);
  EXPECT_TRUE(e->close_session(b2).ok());
}

// Issue 27, finding 2: `n` ConstantOfShape nodes of 65,534 float64 (512 KiB each) read by one
// Sum: every node folds at compile time.
Graph folding_graph(int n) {
  Graph g;
  g.name = "folds";
  g.initializers.emplace("shape", HostTensor::from_vector<int64_t>({65534}, {1}));
  std::vector<std::string> parts;
  for (int i = 0; i < n; ++i) {
    parts.push_back("c" + std::to_string(i));
    g.nodes.push_back(node(parts.back(), "ConstantOfShape", {"shape"}, {parts.back()}));
    // each its own value (equal ones would be computed once: canonicalize's cse)
    g.nodes.back().attrs.emplace("value",
                                 Attribute(HostTensor::from_vector<double>({1.0 + i}, {1})));
  }
  g.nodes.push_back(node("sum", "Sum", parts, {"out"}));
  g.outputs = {{"out", {}}};
  return g;
}

std::unique_ptr<Engine> engine_with(EngineOptions o) {
  setenv("TENSORD_CPU_DEVICES", "1", 1);
  auto created = Engine::create(o);
  unsetenv("TENSORD_CPU_DEVICES");
  return created.ok() ? std::move(created).value() : nullptr;
}

// The constants a compile folds are charged to the tenant exactly as they are made (and held
// while the executable is cached); past the per-executable cap the rest are computed at run
// time, with the same result; everything goes back with the tenant's last session.
TEST(Engine, FoldedConstantsAreChargedExactlyAndCapped) {
  constexpr int64_t kPiece = 65534 * 8;
  for (int64_t cap : {int64_t{0}, int64_t{4} << 20}) {
    EngineOptions o;
    o.max_folded_bytes = cap;
    auto e = engine_with(o);
    ASSERT_NE(e, nullptr);
    SessionOptions so;
    so.tenant = "t";
    const SessionId s = e->open_session(so);
    auto y = e->execute(s, folding_graph(32), {}, "");
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    auto v = e->read(s, (*y)[0]);
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    EXPECT_EQ(v->to_double_vector()[123], 32.0 * 33 / 2) << "cap " << cap;  // 1 + ... + 32
    ASSERT_TRUE(e->release(s, (*y)[0]).ok());
    for (int i = 0; i < 200 && e->session_bytes(s) != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    // Held now: the cached executable's graph estimate (under 64 KiB here) and its folded
    // constants: all 32 without a cap, as many as fit in 4 MiB with it.
    const int64_t held = e->tenant_bytes("t");
    const int64_t folded = cap == 0 ? 32 * kPiece : (cap / kPiece) * kPiece;
    EXPECT_GE(held, folded) << "cap " << cap;
    EXPECT_LT(held, folded + (64 << 10)) << "cap " << cap;
    ASSERT_TRUE(e->close_session(s).ok());
    EXPECT_EQ(e->tenant_bytes("t"), 0);
  }
}

// A compile that would fold past the tenant's limit is refused while folding, naming the node
// and the limit; nothing stays charged, and the tenant's other work goes on.
TEST(Engine, FoldingPastTheTenantLimitIsRefusedDuringTheCompile) {
  auto e = engine_with(EngineOptions{});
  ASSERT_NE(e, nullptr);
  SessionOptions so;
  so.tenant = "t";
  so.tenant_memory_limit = 4 << 20;
  const SessionId s = e->open_session(so);
  auto y = e->execute(s, folding_graph(64), {}, "");  // 32 MiB to fold
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), StatusCode::kResourceExhausted) << y.status().to_string();
  for (const char* word : {"tenant memory limit", "ConstantOfShape", "'c", "4.0 MiB"})
    EXPECT_NE(y.status().message().find(word), std::string::npos)
        << word << " not in: " << y.status().message();
  EXPECT_EQ(e->tenant_bytes("t"), 0);
  auto ok = e->execute(s, folding_graph(4), {}, "");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  auto v = e->read(s, (*ok)[0]);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->to_double_vector()[0], 10.0);  // 1 + 2 + 3 + 4
  ASSERT_TRUE(e->close_session(s).ok());
  EXPECT_EQ(e->tenant_bytes("t"), 0);
}

// The executable cache is bounded in bytes too: a graph whose constants exceed the bound runs
// but is not kept, and the bytes held by the cache never pass it.
TEST(Engine, ExecutableCacheIsBoundedInBytes) {
  setenv("TENSORD_CPU_DEVICES", "1", 1);
  EngineOptions o;
  o.executable_cache_bytes = 1 << 20;
  auto created = Engine::create(o);
  unsetenv("TENSORD_CPU_DEVICES");
  ASSERT_TRUE(created.ok());
  auto& e = *created;
  SessionOptions so;
  so.tenant = "t";
  const SessionId s = e->open_session(so);
  Graph g;
  g.inputs = {{"x", {}}};
  g.outputs = {{"y", {}}};
  g.initializers.emplace("w", HostTensor(DType::kFloat32, {1 << 19}));  // 2 MiB of constants
  g.nodes.push_back(node("add", "Add", {"x", "w"}, {"y"}));
  HostTensor x(DType::kFloat32, {1 << 19});
  auto xh = e->upload(s, x.view(), "");
  ASSERT_TRUE(xh.ok());
  const auto c0 = e->metrics().compiles;
  for (int i = 0; i < 2; ++i) {
    auto y = e->execute(s, g, {*xh}, "");
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    ASSERT_TRUE(e->wait(s, (*y)[0]).ok());
    ASSERT_TRUE(e->release(s, (*y)[0]).ok());
  }
  EXPECT_EQ(e->metrics().compiles - c0, 2);  // never cached
  ASSERT_TRUE(e->release(s, *xh).ok());
  // The queue thread drops a finished task's buffers just after publishing its outputs.
  for (int i = 0; i < 200 && e->tenant_bytes("t") != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(e->tenant_bytes("t"), 0);
}

// A Loop's body outputs reach the Loop kernel as the engine's own buffers (not copied), except
// one lying in a borrowed input's memory: here the body passes carried value x through (its
// output is its input) while computing y + 1 and a scan output 2x. After five iterations x is intact,
// y is y0 + 5 and each scan row is 2x, with large values (buffers, not small copies).
TEST(Engine, LoopOutputsPassingACarriedValueThroughStayIntact) {
  auto e = make_engine();
  auto body = std::make_shared<Graph>();
  body->name = "body";
  body->inputs = {{"i", {DType::kInt64, {}}},
                  {"c", {DType::kBool, {}}},
                  {"x", {DType::kFloat32, {4096}}},
                  {"y", {DType::kFloat32, {4096}}}};
  body->initializers.emplace("one", f32({1.0f}, {1}));
  body->nodes = {node("keep", "Identity", {"c"}, {"c_out"}),
                 node("inc", "Add", {"y", "one"}, {"y_out"}),
                 node("twice", "Add", {"x", "x"}, {"s"})};
  body->outputs = {{"c_out", {}}, {"x", {}}, {"y_out", {}}, {"s", {}}};
  Graph g;
  g.name = "loop_pass_through";
  g.inputs = {{"M", {DType::kInt64, {}}},
              {"cond", {DType::kBool, {}}},
              {"x", {DType::kFloat32, {4096}}},
              {"y", {DType::kFloat32, {4096}}}};
  g.nodes.push_back(node("loop", "Loop", {"M", "cond", "x", "y"}, {"xf", "yf", "scan"},
                         {{"body", Attribute(std::shared_ptr<const Graph>(body))}}));
  g.outputs = {{"xf", {}}, {"yf", {}}, {"scan", {}}};
  std::vector<float> x(4096), y(4096);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(i % 97) - 40.0f;
    y[i] = static_cast<float>(i % 13);
  }
  const SessionId s = e->open_session();
  auto m = e->upload(s, HostTensor::scalar<int64_t>(5).view(), "");
  auto c = e->upload(s, HostTensor::scalar<bool>(true).view(), "");
  auto xh = e->upload(s, f32(x, {4096}).view(), "");
  auto yh = e->upload(s, f32(y, {4096}).view(), "");
  ASSERT_TRUE(m.ok() && c.ok() && xh.ok() && yh.ok());
  for (int run = 0; run < 3; ++run) {
    auto out = e->execute(s, g, {*m, *c, *xh, *yh}, "cpu:0");
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    auto xf = e->read(s, out->at(0));
    auto yf = e->read(s, out->at(1));
    auto scan = e->read(s, out->at(2));
    ASSERT_TRUE(xf.ok() && yf.ok() && scan.ok());
    ASSERT_EQ(scan->shape(), (Shape{5, 4096}));
    int bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      bad += xf->data<float>()[i] != x[i];
      bad += yf->data<float>()[i] != y[i] + 5.0f;
      for (size_t r = 0; r < 5; ++r) bad += scan->data<float>()[r * 4096 + i] != 2.0f * x[i];
    }
    EXPECT_EQ(bad, 0) << "run " << run;
  }
}

// Sessions share one compiled executable per graph (the engine's cache): four sessions running
// a graph of a oneDNN region (Conv, Relu, Conv + residual), a Linear layer and a per-node
// MatMul at once, on the cpu runners side by side, each read back what one run alone gives.
// A oneDNN primitive keeps its scratchpad: one executed by two threads at once must not share
// it (the per-node MatMul's cached primitives did, for a moment: wrong values under load).
TEST(Engine, SessionsRunningOneExecutableAtOnceGetTheirOwnResults) {
  EngineOptions o;
  o.cpu_runners = 4;
  auto created = Engine::create(o);
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  std::shared_ptr<Engine> e(std::move(created).value());
  std::mt19937 rng(5);
  auto random = [&](Shape s) {
    HostTensor t(DType::kFloat32, s);
    std::uniform_real_distribution<float> d(-1, 1);
    for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = d(rng);
    return t;
  };
  Graph g;
  g.inputs = {{"x", {DType::kFloat32, {2, 16, 12, 12}}}, {"b", {DType::kFloat32, {64, 48}}}};
  g.initializers["w1"] = random({32, 16, 3, 3});
  g.initializers["w2"] = random({16, 32, 3, 3});
  g.initializers["wl"] = random({12, 64});
  const AttributeMap pads = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
  g.nodes = {node("c1", "Conv", {"x", "w1"}, {"c1"}, pads), node("r1", "Relu", {"c1"}, {"r1"}),
             node("c2", "Conv", {"r1", "w2"}, {"c2"}, pads), node("s", "Add", {"c2", "x"}, {"s"}),
             node("l", "MatMul", {"s", "wl"}, {"l"}), node("f", "Reshape", {"l", "shape"}, {"f"}),
             node("p", "MatMul", {"f", "b"}, {"y"})};
  g.initializers["shape"] = HostTensor::from_vector<int64_t>({384, 64}, {2});
  g.outputs = {{"y", {}}};
  std::vector<std::pair<HostTensor, HostTensor>> inputs;
  for (int k = 0; k < 4; ++k) inputs.emplace_back(random({2, 16, 12, 12}), random({64, 48}));
  // Each session's answer, alone.
  std::vector<HostTensor> alone;
  const SessionId first = e->open_session(0);
  for (const auto& [x, b] : inputs) {
    auto hx = e->upload(first, x.view(), "cpu:0");
    auto hb = e->upload(first, b.view(), "cpu:0");
    ASSERT_TRUE(hx.ok() && hb.ok());
    auto out = e->execute(first, g, {*hx, *hb}, "cpu:0");
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    auto y = e->read(first, (*out)[0]);
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    alone.push_back(std::move(*y));
  }
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      const SessionId s = e->open_session(0);
      auto hx = e->upload(s, inputs[static_cast<size_t>(k)].first.view(), "cpu:0");
      auto hb = e->upload(s, inputs[static_cast<size_t>(k)].second.view(), "cpu:0");
      if (!hx.ok() || !hb.ok()) {
        failed++;
        return;
      }
      for (int i = 0; i < 40; ++i) {
        auto out = e->execute(s, g, {*hx, *hb}, "cpu:0");
        auto y = out.ok() ? e->read(s, (*out)[0]) : Result<HostTensor>(out.status());
        if (!y.ok()) {
          failed++;
          continue;
        }
        const HostTensor& want = alone[static_cast<size_t>(k)];
        for (int64_t j = 0; j < want.numel(); ++j) {
          const float a = y->data<float>()[j], w = want.data<float>()[j];
          if (!(std::fabs(a - w) <= 1e-3f * (1 + std::fabs(w)))) {
            wrong++;
            break;
          }
        }
        for (TensorHandle h : *out) (void)e->release(s, h);
      }
      (void)e->close_session(s);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0) << "runs of one executable at once read back other values";
}

}  // namespace
}  // namespace tensord
