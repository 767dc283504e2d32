// The Client-level engine and Array tests, run twice: on a LocalClient (an Engine in this
// process) and on a RemoteClient connected to a real `tensord serve` process (the shared test
// broker, on a unix socket in a temp folder). The tests that need the Engine object itself
// (compile/cache metrics, device filters) stay in tests/engine; memory is checked here through
// Client::devices(), which both sides answer.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "broker_process.h"
#include "engine/engine.h"
#include "client/local_client.h"
#include "rpc/remote_client.h"
#include "tensord/array.h"

namespace tensord {
namespace {

// kRemote: the client's automatic transport (shared memory, the broker being on this host);
// kRemoteGrpc: gRPC streams only.
enum class Kind { kLocal, kRemote, kRemoteGrpc };

std::string kind_name(const ::testing::TestParamInfo<Kind>& info) {
  return info.param == Kind::kLocal    ? "local"
         : info.param == Kind::kRemote ? "remote"
                                       : "remote_grpc";
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

class ClientSuite : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::kLocal) {
      // Two host devices (cpu:0, cpu:1), as the broker is started with.
      setenv("TENSORD_CPU_DEVICES", "2", 1);
      auto e = Engine::create(EngineOptions{});
      unsetenv("TENSORD_CPU_DEVICES");
      ASSERT_TRUE(e.ok()) << e.status().to_string();
      engine_ = std::shared_ptr<Engine>(std::move(e).value());
    } else {
      broker_ = testing::shared_broker();
      ASSERT_NE(broker_, nullptr);
    }
    auto c = make_client();
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    client_ = std::move(c).value();
    base0_ = in_use("cpu:0");
    base1_ = in_use("cpu:1");
  }

  Result<std::unique_ptr<Client>> make_client(int64_t memory_limit = 0) {
    if (GetParam() == Kind::kLocal)
      return std::unique_ptr<Client>(new LocalClient(engine_, memory_limit));
    rpc::RemoteClientOptions o;
    o.memory_limit = memory_limit;
    o.transport = GetParam() == Kind::kRemoteGrpc ? "grpc" : "auto";
    TD_ASSIGN_OR_RETURN(auto c, rpc::RemoteClient::connect(broker_->address(), o));
    return std::unique_ptr<Client>(std::move(c));
  }

  // Bytes held on `device` by every session (of this engine, or of the broker).
  int64_t in_use(const std::string& device) {
    auto devs = client_->devices();
    EXPECT_TRUE(devs.ok()) << devs.status().to_string();
    if (!devs.ok()) return -1;
    for (const auto& d : *devs)
      if (d.name == device) return d.memory_in_use;
    ADD_FAILURE() << "no device " << device;
    return -1;
  }
  // Freed bytes may outlive a release by the time queued work takes to finish.
  int64_t in_use_settled(const std::string& device, int64_t expect) {
    int64_t v = in_use(device);
    for (int i = 0; i < 200 && v != expect; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      v = in_use(device);
    }
    return v;
  }

  std::shared_ptr<Engine> engine_;
  testing::BrokerProcess* broker_ = nullptr;
  std::unique_ptr<Client> client_;
  int64_t base0_ = 0, base1_ = 0;
};

// ---------------------------------------------------------------- engine tests, Client level

TEST_P(ClientSuite, Devices) {
  auto all = client_->devices();
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  // Devices of other kinds present on this machine (opencl:N ...) come after the cpu ones.
  std::vector<DeviceInfo> cpus;
  for (const auto& d : *all)
    if (d.kind == "cpu") cpus.push_back(d);
  const std::vector<DeviceInfo>* devs = &cpus;
  ASSERT_EQ(devs->size(), 2u);
  EXPECT_EQ((*devs)[0].name, "cpu:0");
  EXPECT_EQ((*devs)[1].name, "cpu:1");
  EXPECT_EQ((*devs)[0].kind, "cpu");
  EXPECT_EQ((*devs)[1].index, 1);
  EXPECT_GT((*devs)[0].memory_bytes, 0);
  EXPECT_GE((*devs)[0].memory_peak, (*devs)[0].memory_in_use);
  EXPECT_FALSE((*devs)[0].backend.empty());
  EXPECT_EQ(client_->default_device(), "cpu:0");
}

TEST_P(ClientSuite, UploadReadRoundTripAndAccounting) {
  HostTensor t = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  auto h = client_->upload(t.view(), "cpu:1");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(in_use("cpu:1") - base1_, 24);
  // Held in a variable: `for (d : *client_->devices())` iterated a destroyed temporary (ASan:
  // stack-use-after-scope).
  auto devices = client_->devices();
  ASSERT_TRUE(devices.ok()) << devices.status().to_string();
  for (const auto& d : *devices)
    if (d.name == "cpu:1") EXPECT_GE(d.memory_peak, base1_ + 24);
  auto back = client_->read(*h);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->dtype(), DType::kFloat32);
  EXPECT_EQ(back->shape(), (Shape{2, 3}));
  EXPECT_EQ(back->data<float>()[5], 6.0f);
  auto info = client_->info(*h);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->device, "cpu:1");
  EXPECT_EQ(info->type, (TensorType{DType::kFloat32, {2, 3}}));
  ASSERT_TRUE(client_->release(*h).ok());
  EXPECT_EQ(in_use_settled("cpu:1", base1_), base1_);
  EXPECT_EQ(client_->read(*h).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->release(*h).code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->info(*h).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->wait(*h).code(), StatusCode::kNotFound);
}

TEST_P(ClientSuite, DtypesAndShapesRoundTrip) {
  std::vector<HostTensor> ts = {
      HostTensor::from_vector<int64_t>({-1, 1LL << 40, 7}, {3}),
      HostTensor::from_vector<uint8_t>({0, 255, 3, 4}, {2, 2}),
      HostTensor::from_vector<bool>({true, false, true}, {3, 1}),
      HostTensor::from_vector<double>({3.5}, {}),
      HostTensor(DType::kFloat16, {2, 0, 3}),  // no elements
      HostTensor::from_vector<int32_t>({5, 6}, {1, 1, 2}),
  };
  for (const auto& t : ts) {
    auto h = client_->upload(t.view(), "");
    ASSERT_TRUE(h.ok()) << t.type().to_string() << ": " << h.status().to_string();
    auto back = client_->read(*h);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->type(), t.type());
    ASSERT_EQ(back->nbytes(), t.nbytes());
    if (t.nbytes()) {
      EXPECT_EQ(std::memcmp(back->data(), t.data(), t.nbytes()), 0);
    }
  }
}

// Larger than one transfer chunk, and not a multiple of it: streamed both ways.
TEST_P(ClientSuite, LargeTensorsAreStreamedIntact) {
  const int64_t n = (5 << 20) + 3;  // 20 MiB + 12 bytes of float32
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i % 100003);
  HostTensor t = f32(v, {n});
  auto h = client_->upload(t.view(), "cpu:1");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(in_use("cpu:1") - base1_, n * 4);
  auto back = client_->read(*h);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->nbytes(), t.nbytes());
  EXPECT_EQ(std::memcmp(back->data(), t.data(), t.nbytes()), 0);
  if (auto* r = dynamic_cast<rpc::RemoteClient*>(client_.get()))
    EXPECT_EQ(r->transport(), GetParam() == Kind::kRemote ? "shm" : "grpc");
  // And through a computation.
  Graph g;
  g.inputs = {{"x", {}}};
  g.nodes = {node("neg", "Neg", {"x"}, {"y"})};
  g.outputs = {{"y", {}}};
  auto out = client_->execute(g, {*h}, "");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  auto y = client_->read((*out)[0]);
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  EXPECT_EQ(y->data<float>()[n - 1], -static_cast<float>((n - 1) % 100003));
}

// read_into: the bytes straight into the caller's memory (NumPy, DLPack, Node). The same
// on an embedded engine, through shared memory (kRemote) and over gRPC streams.
TEST_P(ClientSuite, ReadIntoWritesTheExactBytesAndNothingPastThem) {
  for (int64_t n : {int64_t{6}, int64_t{(5 << 20) + 3}}) {  // inline-sized, and 20 MiB + 12 B
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i % 100003) - 7;
    HostTensor t = f32(v, {n});
    auto h = client_->upload(t.view(), "cpu:1");
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    std::vector<unsigned char> dst(t.nbytes() + 64, 0xAB);  // room to spare, sentinel after
    auto type = client_->read_into(*h, dst.data(), dst.size());
    ASSERT_TRUE(type.ok()) << type.status().to_string();
    EXPECT_EQ(*type, (TensorType{DType::kFloat32, {n}}));
    EXPECT_EQ(std::memcmp(dst.data(), t.data(), t.nbytes()), 0) << n << " floats";
    for (size_t i = t.nbytes(); i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xAB) << "byte " << i;
    // Exactly the room needed, and a computed value (not the uploaded bytes).
    Graph g;
    g.inputs = {{"x", {}}};
    g.nodes = {node("neg", "Neg", {"x"}, {"y"})};
    g.outputs = {{"y", {}}};
    auto out = client_->execute(g, {*h}, "");
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    std::vector<float> y(static_cast<size_t>(n), 0.5f);
    auto ty = client_->read_into((*out)[0], y.data(), y.size() * sizeof(float));
    ASSERT_TRUE(ty.ok()) << ty.status().to_string();
    EXPECT_EQ(*ty, (TensorType{DType::kFloat32, {n}}));
    for (int64_t i = 0; i < n; i += std::max<int64_t>(1, n / 1000))
      ASSERT_EQ(y[static_cast<size_t>(i)], -v[static_cast<size_t>(i)]) << "element " << i;
    EXPECT_EQ(y.back(), -v.back());
    if (auto* r = dynamic_cast<rpc::RemoteClient*>(client_.get()); r && n > 1000)
      EXPECT_EQ(r->transport(), GetParam() == Kind::kRemote ? "shm" : "grpc");
  }
  // Every dtype and an empty tensor.
  std::vector<HostTensor> ts = {HostTensor::from_vector<int64_t>({-1, 1LL << 40, 7}, {3}),
                                HostTensor::from_vector<uint8_t>({0, 255, 3}, {3}),
                                HostTensor::from_vector<double>({3.5}, {}),
                                HostTensor(DType::kFloat16, {2, 0, 3})};
  for (const auto& t : ts) {
    auto h = client_->upload(t.view(), "");
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    std::vector<unsigned char> dst(t.nbytes() + 1, 0xCD);
    auto type = client_->read_into(*h, dst.data(), t.nbytes());
    ASSERT_TRUE(type.ok()) << t.type().to_string() << ": " << type.status().to_string();
    EXPECT_EQ(*type, t.type());
    if (t.nbytes()) EXPECT_EQ(std::memcmp(dst.data(), t.data(), t.nbytes()), 0);
    EXPECT_EQ(dst[t.nbytes()], 0xCD);
  }
}

TEST_P(ClientSuite, ReadIntoWithoutRoomWritesNothingAndReturnsTheType) {
  for (int64_t n : {int64_t{6}, int64_t{(1 << 20) + 5}}) {  // small, and past shm_min_bytes
    HostTensor t(DType::kFloat32, {2, n});
    auto* p = t.mutable_data<float>();
    for (int64_t i = 0; i < 2 * n; ++i) p[i] = static_cast<float>(i);
    auto h = client_->upload(t.view(), "");
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    std::vector<unsigned char> dst(t.nbytes(), 0x5A);
    for (size_t room : {t.nbytes() - 1, size_t{4}, size_t{0}}) {
      auto type = client_->read_into(*h, dst.data(), room);
      ASSERT_TRUE(type.ok()) << "room " << room << ": " << type.status().to_string();
      EXPECT_EQ(*type, (TensorType{DType::kFloat32, {2, n}})) << "room " << room;
      for (size_t i = 0; i < dst.size(); i += 997) ASSERT_EQ(dst[i], 0x5A) << "room " << room;
      ASSERT_EQ(dst.back(), 0x5A);
    }
    // Nowhere to write: only the type.
    auto type = client_->read_into(*h, nullptr, 0);
    ASSERT_TRUE(type.ok()) << type.status().to_string();
    EXPECT_EQ(type->shape, (Shape{2, n}));
    // Room claimed but no memory: an error, not a crash.
    auto bad = client_->read_into(*h, nullptr, t.nbytes());
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().to_string();
    // The handle still reads after all that.
    auto ok = client_->read_into(*h, dst.data(), dst.size());
    ASSERT_TRUE(ok.ok()) << ok.status().to_string();
    EXPECT_EQ(std::memcmp(dst.data(), t.data(), t.nbytes()), 0);
  }
}

TEST_P(ClientSuite, ReadIntoAFailedComputationOrAReleasedHandleIsAnError) {
  Graph g;
  g.inputs = {{"a", {}}, {"b", {}}};
  g.nodes = {node("mm", "MatMul", {"a", "b"}, {"p"})};
  g.outputs = {{"p", {}}};
  HostTensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3}), b = f32({1, 2, 3, 4}, {2, 2});
  auto ha = client_->upload(a.view(), ""), hb = client_->upload(b.view(), "");
  ASSERT_TRUE(ha.ok() && hb.ok());
  auto out = client_->execute(g, {*ha, *hb}, "");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  Status bad = client_->wait((*out)[0]);
  ASSERT_EQ(bad.code(), StatusCode::kInvalidArgument);
  std::vector<float> dst(64, 9.0f);
  auto r = client_->read_into((*out)[0], dst.data(), dst.size() * sizeof(float));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status(), bad);  // the computation's error: same code, same message
  EXPECT_NE(r.status().message().find("'mm'"), std::string::npos) << r.status().message();
  EXPECT_EQ(dst[0], 9.0f);
  // Released: NOT_FOUND, small and large alike.
  HostTensor big(DType::kFloat32, {1 << 20});
  auto hbig = client_->upload(big.view(), "");
  ASSERT_TRUE(hbig.ok()) << hbig.status().to_string();
  std::vector<float> room(1 << 20);
  for (TensorHandle h : {*ha, *hbig}) {
    ASSERT_TRUE(client_->release(h).ok());
    auto gone = client_->read_into(h, room.data(), room.size() * sizeof(float));
    ASSERT_FALSE(gone.ok());
    EXPECT_EQ(gone.status().code(), StatusCode::kNotFound) << gone.status().to_string();
  }
  auto never = client_->read_into(987654321, room.data(), room.size() * sizeof(float));
  EXPECT_EQ(never.status().code(), StatusCode::kNotFound);
}

TEST_P(ClientSuite, BadUploadsAreErrors) {
  HostTensor t = f32({1, 2}, {2});
  auto unknown = client_->upload(t.view(), "cuda:0");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("cuda:0"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("cpu:0"), std::string::npos);  // lists what exists

  // Larger than the device: RESOURCE_EXHAUSTED naming the device, not a crash (and the 8
  // bytes behind the view are never read past).
  TensorView huge{DType::kFloat32, {1LL << 20, 1LL << 20, 1LL << 10}, t.data()};
  auto big = client_->upload(huge, "cpu:0");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(big.status().message().find("cpu:0"), std::string::npos) << big.status().message();
  EXPECT_EQ(in_use("cpu:0"), base0_);

  TensorView overflow{DType::kFloat32, {1LL << 40, 1LL << 40}, t.data()};
  EXPECT_EQ(client_->upload(overflow, "").status().code(), StatusCode::kInvalidArgument);
  TensorView negative{DType::kFloat32, {-1}, t.data()};
  EXPECT_EQ(client_->upload(negative, "").status().code(), StatusCode::kInvalidArgument);
  TensorView bad_dtype{static_cast<DType>(42), {2}, t.data()};
  auto bd = client_->upload(bad_dtype, "");
  EXPECT_EQ(bd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bd.status().message().find("42"), std::string::npos) << bd.status().message();
}

TEST_P(ClientSuite, SessionQuotaIsResourceExhausted) {
  auto c = make_client(/*memory_limit=*/64);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  HostTensor small = f32(std::vector<float>(8, 1.0f), {8});  // 32 bytes
  ASSERT_TRUE((*c)->upload(small.view(), "").ok());
  ASSERT_TRUE((*c)->upload(small.view(), "").ok());
  auto third = (*c)->upload(small.view(), "");
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("session memory limit"), std::string::npos)
      << third.status().message();
  EXPECT_EQ(in_use("cpu:0") - base0_, 64);
  // Big ones are refused before their bytes travel.
  HostTensor big = f32(std::vector<float>(1 << 20, 1.0f), {1 << 20});
  auto b = (*c)->upload(big.view(), "");
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  // Others are not limited by it.
  EXPECT_TRUE(client_->upload(big.view(), "").ok());
}

TEST_P(ClientSuite, SessionsCannotSeeEachOthersHandles) {
  auto other = make_client();
  ASSERT_TRUE(other.ok());
  HostTensor t = f32({1, 2}, {2});
  auto h = client_->upload(t.view(), "");
  ASSERT_TRUE(h.ok());
  auto r = (*other)->read(*h);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*other)->release(*h).code(), StatusCode::kNotFound);
  EXPECT_EQ((*other)->info(*h).status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*other)->copy(*h, "cpu:1").status().code(), StatusCode::kNotFound);
  Graph g;
  g.inputs = {{"a", {}}};
  g.nodes = {node("r", "Relu", {"a"}, {"y"})};
  g.outputs = {{"y", {}}};
  EXPECT_EQ((*other)->execute(g, {*h}, "").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(client_->read(*h).ok());  // untouched
}

TEST_P(ClientSuite, ClosingASessionFreesItsTensors) {
  {
    auto c = make_client();
    ASSERT_TRUE(c.ok());
    HostTensor t = f32(std::vector<float>(1000, 2.0f), {1000});
    ASSERT_TRUE((*c)->upload(t.view(), "").ok());
    EXPECT_EQ(in_use("cpu:0") - base0_, 4000);
  }
  EXPECT_EQ(in_use_settled("cpu:0", base0_), base0_);
}

TEST_P(ClientSuite, ExecuteReturnsTypedHandlesAtOnce) {
  Graph g;
  g.inputs = {{"a", {DType::kFloat32, {3}}}, {"b", {DType::kFloat32, {3}}}};
  g.nodes = {node("add", "Add", {"a", "b"}, {"s"}), node("relu", "Relu", {"s"}, {"y"})};
  g.outputs = {{"y", {}}};
  HostTensor a = f32({1, -5, 3}, {3}), b = f32({1, 1, -4}, {3});
  auto ha = client_->upload(a.view(), ""), hb = client_->upload(b.view(), "");
  for (int i = 0; i < 3; ++i) {
    auto out = client_->execute(g, {*ha, *hb}, "");
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    ASSERT_EQ(out->size(), 1u);
    auto info = client_->info((*out)[0]);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->type, (TensorType{DType::kFloat32, {3}}));
    auto y = client_->read((*out)[0]);
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    EXPECT_EQ(y->to_double_vector(), (std::vector<double>{2, 0, 0}));
  }
  EXPECT_EQ(client_->stats().executes, 3);
  EXPECT_EQ(client_->stats().uploads, 2);
  EXPECT_EQ(client_->stats().downloads, 3);
}

// Every attribute kind, initializers and subgraphs survive the wire.
TEST_P(ClientSuite, GraphsWithEveryAttributeKindAndSubgraphs) {
  auto then_g = std::make_shared<Graph>();
  then_g->nodes = {node("t_add", "Add", {"x", "w"}, {"t_out"})};  // reads the outer scope
  then_g->outputs = {{"t_out", {DType::kFloat32, {3}}}};
  auto else_g = std::make_shared<Graph>();
  else_g->nodes = {node("e_neg", "Neg", {"x"}, {"e_out"})};
  else_g->outputs = {{"e_out", {DType::kFloat32, {3}}}};

  Graph g;
  g.name = "every_kind";
  g.inputs = {{"x", {DType::kFloat32, {3}}}, {"cond", {DType::kBool, {}}}};
  g.initializers["w"] = f32({10, 20, 30}, {3});
  g.nodes = {
      node("branch", "If", {"cond"}, {"b"},
           {{"then_branch", std::shared_ptr<const Graph>(then_g)},
            {"else_branch", std::shared_ptr<const Graph>(else_g)}}),
      node("k", "Constant", {}, {"k"}, {{"value", f32({0.5f, 0.5f, 0.5f}, {3})}}),
      node("mul", "Mul", {"b", "k"}, {"m"}),
      node("clip", "Clip", {"m", "", ""}, {"c"}),
      node("sm", "Softmax", {"c"}, {"s"}, {{"axis", int64_t{0}}}),
      node("lrelu", "LeakyRelu", {"m"}, {"l"}, {{"alpha", 0.25f}}),
      node("cast", "Cast", {"m"}, {"i"}, {{"to", int64_t{7}}}),
      node("tr", "Transpose", {"m2"}, {"t"}, {{"perm", std::vector<int64_t>{1, 0}}}),
      node("rs", "Reshape", {"m", "shape"}, {"m2"}),
      node("shape_c", "Constant", {}, {"shape"},
           {{"value", HostTensor::from_vector<int64_t>({3, 1}, {2})}}),
  };
  g.outputs = {{"b", {}}, {"l", {}}, {"i", {}}, {"t", {}}, {"s", {}}};
  HostTensor x = f32({1, -2, 3}, {3});
  HostTensor yes = HostTensor::scalar<bool>(true), no = HostTensor::scalar<bool>(false);
  auto hx = client_->upload(x.view(), "");
  auto hy = client_->upload(yes.view(), ""), hn = client_->upload(no.view(), "");
  ASSERT_TRUE(hx.ok() && hy.ok() && hn.ok());

  auto out = client_->execute(g, {*hx, *hy}, "");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_EQ(out->size(), 5u);
  EXPECT_EQ(client_->read((*out)[0])->to_double_vector(), (std::vector<double>{11, 18, 33}));
  EXPECT_EQ(client_->read((*out)[1])->to_double_vector(), (std::vector<double>{5.5, 9, 16.5}));
  auto i = client_->read((*out)[2]);
  ASSERT_TRUE(i.ok()) << i.status().to_string();
  EXPECT_EQ(i->dtype(), DType::kInt64);
  auto t = client_->read((*out)[3]);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->shape(), (Shape{1, 3}));
  ASSERT_TRUE(client_->read((*out)[4]).ok());

  auto out2 = client_->execute(g, {*hx, *hn}, "");
  ASSERT_TRUE(out2.ok()) << out2.status().to_string();
  EXPECT_EQ(client_->read((*out2)[0])->to_double_vector(), (std::vector<double>{-1, 2, -3}));
  EXPECT_EQ(client_->read((*out2)[1])->to_double_vector(),
            (std::vector<double>{-0.125, 1, -0.375}));
}

TEST_P(ClientSuite, ErrorLandsOnlyOnDependentOutputs) {
  Graph g;
  g.inputs = {{"a", {}}, {"b", {}}};
  g.nodes = {node("mm", "MatMul", {"a", "b"}, {"p"}), node("after", "Relu", {"p"}, {"q"}),
             node("good", "Neg", {"a"}, {"n"})};
  g.outputs = {{"q", {}}, {"n", {}}};
  HostTensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3}), b = f32({1, 2, 3, 4}, {2, 2});
  auto ha = client_->upload(a.view(), ""), hb = client_->upload(b.view(), "");
  auto out = client_->execute(g, {*ha, *hb}, "");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  Status bad = client_->wait((*out)[0]);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("MatMul"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("'mm'"), std::string::npos) << bad.message();
  EXPECT_EQ(client_->read((*out)[0]).status(), bad);  // same code, same message
  auto n = client_->read((*out)[1]);
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(n->to_double_vector(), (std::vector<double>{-1, -2, -3, -4, -5, -6}));
}

TEST_P(ClientSuite, UnknownOpAndBadAttributeNameTheNode) {
  HostTensor a = f32({1, 2}, {2});
  auto ha = client_->upload(a.view(), "");
  Graph g;
  g.inputs = {{"a", {}}};
  g.nodes = {node("weird", "FrobnicateOp", {"a"}, {"y"})};
  g.outputs = {{"y", {}}};
  auto out = client_->execute(g, {*ha}, "");
  ASSERT_TRUE(out.ok());
  Status s = client_->wait((*out)[0]);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("FrobnicateOp"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'weird'"), std::string::npos) << s.message();

  g.nodes = {node("sm", "Softmax", {"a"}, {"y"}, {{"axis", int64_t{5}}})};
  out = client_->execute(g, {*ha}, "");
  ASSERT_TRUE(out.ok());
  s = client_->wait((*out)[0]);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Softmax"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("5"), std::string::npos) << s.message();
}

TEST_P(ClientSuite, StructuralGraphErrorsFailTheCall) {
  HostTensor a = f32({1, 2}, {2});
  auto ha = client_->upload(a.view(), "");
  Graph g;
  g.inputs = {{"a", {}}};
  g.nodes = {node("x", "Relu", {"y"}, {"x1"}), node("y", "Relu", {"x1"}, {"y"})};
  g.outputs = {{"y", {}}};
  auto out = client_->execute(g, {*ha}, "");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("cycle"), std::string::npos) << out.status().message();
  g.nodes = {node("r", "Relu", {"a"}, {"y"})};
  EXPECT_EQ(client_->execute(g, {}, "").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->execute(g, {999999}, "").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->execute(g, {*ha}, "cuda:3").status().code(), StatusCode::kNotFound);
}

TEST_P(ClientSuite, CopyBetweenDevices) {
  HostTensor a = f32({1, 2, 3}, {3});
  auto h0 = client_->upload(a.view(), "cpu:0");
  auto h1 = client_->copy(*h0, "cpu:1");
  ASSERT_TRUE(h1.ok()) << h1.status().to_string();
  EXPECT_EQ(client_->info(*h1)->device, "cpu:1");
  auto back = client_->read(*h1);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->to_double_vector(), (std::vector<double>{1, 2, 3}));
  auto same = client_->copy(*h0, "cpu:0");
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(client_->stats().copies, 2);
  EXPECT_EQ(in_use("cpu:0") - base0_, 12);  // same-device copy shares the bytes
  EXPECT_EQ(in_use("cpu:1") - base1_, 12);
  EXPECT_EQ(client_->copy(*h0, "cpu:9").status().code(), StatusCode::kNotFound);
}

TEST_P(ClientSuite, ExecuteMovesInputsToTheTargetDevice) {
  HostTensor a = f32({1, 2}, {2}), b = f32({10, 20}, {2});
  auto ha = client_->upload(a.view(), "cpu:0"), hb = client_->upload(b.view(), "cpu:1");
  Graph g;
  g.inputs = {{"a", {}}, {"b", {}}};
  g.nodes = {node("add", "Add", {"a", "b"}, {"y"})};
  g.outputs = {{"y", {}}};
  auto out = client_->execute(g, {*ha, *hb}, "");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(client_->info((*out)[0])->device, "cpu:0");
  EXPECT_EQ(client_->read((*out)[0])->to_double_vector(), (std::vector<double>{11, 22}));
  auto out1 = client_->execute(g, {*ha, *hb}, "cpu:1");
  ASSERT_TRUE(out1.ok());
  EXPECT_EQ(client_->info((*out1)[0])->device, "cpu:1");
  EXPECT_EQ(client_->read((*out1)[0])->to_double_vector(), (std::vector<double>{11, 22}));
}

TEST_P(ClientSuite, ErrorsPropagateThroughLaterExecutes) {
  HostTensor a = f32({1, 2, 3}, {3}), b = f32({1, 2}, {2});
  auto ha = client_->upload(a.view(), ""), hb = client_->upload(b.view(), "");
  Graph g;
  g.inputs = {{"a", {}}, {"b", {}}};
  g.nodes = {node("bad_add", "Add", {"a", "b"}, {"y"})};
  g.outputs = {{"y", {}}};
  auto out = client_->execute(g, {*ha, *hb}, "");
  ASSERT_TRUE(out.ok());
  Graph g2;
  g2.inputs = {{"x", {}}};
  g2.nodes = {node("r", "Relu", {"x"}, {"y"})};
  g2.outputs = {{"y", {}}};
  auto out2 = client_->execute(g2, {(*out)[0]}, "");
  ASSERT_TRUE(out2.ok());
  Status s = client_->wait((*out2)[0]);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bad_add"), std::string::npos) << s.message();
}

TEST_P(ClientSuite, ConcurrentCallsFromManyThreads) {
  Graph g;
  g.inputs = {{"a", {}}};
  g.nodes = {node("m", "Mul", {"a", "a"}, {"y"})};
  g.outputs = {{"y", {}}};
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        HostTensor a = f32({static_cast<float>(t), static_cast<float>(i)}, {2});
        auto h = client_->upload(a.view(), t % 2 ? "cpu:1" : "cpu:0");
        if (!h.ok()) continue;
        auto out = client_->execute(g, {*h}, "");
        if (!out.ok()) continue;
        auto y = client_->read((*out)[0]);
        if (y.ok() && y->to_double_vector() == std::vector<double>{double(t * t), double(i * i)})
          good++;
        (void)client_->release(*h);
        (void)client_->release((*out)[0]);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(good.load(), 80);
  EXPECT_EQ(in_use_settled("cpu:0", base0_), base0_);
  EXPECT_EQ(in_use_settled("cpu:1", base1_), base1_);
}

// y = x . w + b, with the weights in the graph: loaded once, run with new inputs.
Graph affine_model(int64_t n, int64_t m, float w_value) {
  Graph g;
  g.name = "affine";
  g.inputs = {{"x", {DType::kFloat32, {1, n}}}};
  g.initializers["w"] = f32(std::vector<float>(static_cast<size_t>(n * m), w_value), {n, m});
  std::vector<float> b(static_cast<size_t>(m));
  for (int64_t j = 0; j < m; ++j) b[static_cast<size_t>(j)] = static_cast<float>(j);
  g.initializers["b"] = f32(b, {m});
  g.nodes = {node("mm", "MatMul", {"x", "w"}, {"p"}), node("add", "Add", {"p", "b"}, {"y"})};
  g.outputs = {{"y", {}}};
  return g;
}

// A run loop (run, read the small result, release it) is one round trip per run through a
// broker: the result comes with the answer and the release travels with the next run. Any
// other call sends pending releases first, so memory is back to the baseline when looked at.
TEST_P(ClientSuite, RunLoopIsOneRoundTripPerRunAndReleasesArriveInOrder) {
  auto model = client_->load(affine_model(4, 3, 0.5f), "cpu:0");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto hx = client_->upload(f32({1, 2, 3, 4}, {1, 4}).view(), "cpu:0");
  ASSERT_TRUE(hx.ok());
  auto* remote = dynamic_cast<rpc::RemoteClient*>(client_.get());
  const int64_t before = remote ? remote->rpc_count() : 0;
  std::vector<TensorHandle> released;
  for (int i = 0; i < 10; ++i) {
    auto out = client_->run(*model, {*hx});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    auto y = client_->read((*out)[0]);
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    EXPECT_EQ(y->shape(), (Shape{1, 3}));
    EXPECT_TRUE(client_->release((*out)[0]).ok());
    released.push_back((*out)[0]);
  }
  if (remote) EXPECT_EQ(remote->rpc_count() - before, 10);
  // A released handle is gone, whether or not its release has travelled yet.
  EXPECT_EQ(client_->info(released.back()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->read(released.front()).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(client_->release(*hx).ok());
  EXPECT_TRUE(client_->unload(*model).ok());
  EXPECT_EQ(in_use_settled("cpu:0", base0_), base0_);
}

TEST_P(ClientSuite, LoadedModelRunsManyTimesAndIsSessionOwned) {
  auto model = client_->load(affine_model(4, 3, 0.5f), "cpu:1");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  for (int k = 1; k <= 3; ++k) {
    HostTensor x = f32(std::vector<float>(4, static_cast<float>(k)), {1, 4});
    auto hx = client_->upload(x.view(), "");
    ASSERT_TRUE(hx.ok());
    auto out = client_->run(*model, {*hx});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    ASSERT_EQ(out->size(), 1u);
    EXPECT_EQ(client_->info((*out)[0])->device, "cpu:1");
    auto y = client_->read((*out)[0]);
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    EXPECT_EQ(y->shape(), (Shape{1, 3}));
    EXPECT_EQ(y->to_double_vector(), (std::vector<double>{2.0 * k, 2.0 * k + 1, 2.0 * k + 2}));
  }
  EXPECT_EQ(client_->stats().runs, 3);
  EXPECT_EQ(client_->stats().executes, 0);

  // Bad calls: wrong input count, a handle that is no model.
  HostTensor x = f32({1, 1, 1, 1}, {1, 4});
  auto hx = client_->upload(x.view(), "");
  EXPECT_EQ(client_->run(*model, {}).status().code(), StatusCode::kInvalidArgument);
  auto bogus = client_->run(*model + 777777, {*hx});
  EXPECT_EQ(bogus.status().code(), StatusCode::kNotFound);
  EXPECT_NE(bogus.status().message().find("model"), std::string::npos) << bogus.status().message();
  EXPECT_EQ(client_->run(0, {*hx}).status().code(), StatusCode::kNotFound);

  // Another session cannot name it.
  auto other = make_client();
  ASSERT_TRUE(other.ok());
  auto ox = (*other)->upload(x.view(), "");
  ASSERT_TRUE(ox.ok());
  EXPECT_EQ((*other)->run(*model, {*ox}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*other)->unload(*model).code(), StatusCode::kNotFound);
  EXPECT_TRUE(client_->run(*model, {*hx}).ok());  // untouched

  ASSERT_TRUE(client_->unload(*model).ok());
  auto gone = client_->run(*model, {*hx});
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->unload(*model).code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->load(affine_model(4, 3, 1), "cuda:7").status().code(), StatusCode::kNotFound);
}

// Weights larger than a transfer chunk (and than gRPC's usual 4 MiB message): the broker
// receives the graph in chunks.
TEST_P(ClientSuite, LargeModelIsLoaded) {
  auto model = client_->load(affine_model(1536, 1024, 0.001f), "");  // 6 MiB of weights
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  HostTensor x = f32(std::vector<float>(1536, 1.0f), {1, 1536});
  auto hx = client_->upload(x.view(), "");
  ASSERT_TRUE(hx.ok());
  auto out = client_->run(*model, {*hx});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  auto y = client_->read((*out)[0]);
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  ASSERT_EQ(y->numel(), 1024);
  EXPECT_NEAR(y->data<float>()[0], 1.536f, 1e-3);
  EXPECT_NEAR(y->data<float>()[1023], 1023 + 1.536f, 1e-2);
  EXPECT_TRUE(client_->unload(*model).ok());
}

// ---------------------------------------------------------------- Array API

class ArraySuite : public ClientSuite {
 protected:
  void SetUp() override {
    ClientSuite::SetUp();
    if (HasFatalFailure()) return;
    shared_ = std::shared_ptr<Client>(std::move(client_));
    client_.reset();
    ctx_ = std::make_shared<Context>(shared_);
  }
  Array vec(std::vector<float> v, Shape s, const std::string& device = "") {
    return Array::from_vector(v, std::move(s), device, ctx_);
  }
  std::vector<float> values(const Array& a) {
    auto v = a.to_vector<float>();
    EXPECT_TRUE(v.ok()) << v.status().to_string();
    return v.ok() ? *v : std::vector<float>{};
  }
  int64_t rpcs() const {
    auto* r = dynamic_cast<rpc::RemoteClient*>(shared_.get());
    return r ? r->rpc_count() : 0;
  }

  std::shared_ptr<Client> shared_;
  std::shared_ptr<Context> ctx_;
};

TEST_P(ArraySuite, ArithmeticWithBroadcastingAndScalars) {
  Array a = vec({1, 2, 3, 4, 5, 6}, {2, 3});
  Array b = vec({10, 20, 30}, {3});
  EXPECT_EQ(values(a + b), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(values(a * 2.0 - 1.0), (std::vector<float>{1, 3, 5, 7, 9, 11}));
  EXPECT_EQ(values(12.0 / a), (std::vector<float>{12, 6, 4, 3, 2.4f, 2}));
  EXPECT_EQ(values(-a), (std::vector<float>{-1, -2, -3, -4, -5, -6}));
  EXPECT_EQ(*(a + b).shape(), (Shape{2, 3}));
}

TEST_P(ArraySuite, AChainOfAHundredOpsIsOneFlushAndOneRoundTrip) {
  Array x = vec(std::vector<float>(100, 1.0f), {10, 10});
  Array y = x;
  for (int i = 0; i < 100; ++i) y = (i % 2) ? y * 1.5 : y + 1.0;
  EXPECT_EQ(shared_->stats().executes, 0);  // nothing ran yet
  const int64_t rpcs_before = rpcs();
  auto v = values(y);
  EXPECT_EQ(shared_->stats().executes, 1);
  EXPECT_EQ(ctx_->flushes(), 1);
  if (GetParam() != Kind::kLocal) {
    // x was uploaded when it was made: one Execute for the whole chain, whose answer carries
    // the small result (nothing per op, no Read).
    EXPECT_EQ(rpcs() - rpcs_before, 1);
  }
  double expect = 1.0;
  for (int i = 0; i < 100; ++i) expect = (i % 2) ? expect * 1.5 : expect + 1.0;
  ASSERT_EQ(v.size(), 100u);
  EXPECT_NEAR(v[0], expect, std::abs(expect) * 1e-5);
  const int64_t rpcs_after = rpcs();
  values(y);
  EXPECT_EQ(shared_->stats().executes, 1);
  if (GetParam() != Kind::kLocal) {
    EXPECT_EQ(rpcs() - rpcs_after, 0);
  }
}

TEST_P(ArraySuite, IntermediatesStillHeldAreComputedInTheSameFlush) {
  Array x = vec({1, 2}, {2});
  Array mid = x * 3.0;
  Array out = mid + 1.0;
  EXPECT_EQ(values(out), (std::vector<float>{4, 7}));
  EXPECT_EQ(values(mid), (std::vector<float>{3, 6}));
  EXPECT_EQ(shared_->stats().executes, 1);
  Array out2 = (vec({5, 6}, {2}) * 3.0) + 1.0;
  EXPECT_EQ(values(out2), (std::vector<float>{16, 19}));
}

TEST_P(ArraySuite, ShapesAreKnownBeforeRunning) {
  Array a = Array::zeros({4, 6}, DType::kFloat32, "", ctx_);
  Array r = a.reshape({2, 12}).transpose();
  auto s = r.shape();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (Shape{12, 2}));
  EXPECT_EQ(shared_->stats().executes, 0);
  EXPECT_EQ(*a.sum({1}).shape(), (Shape{4}));
  EXPECT_EQ(*a.mean({0}, true).shape(), (Shape{1, 6}));
  EXPECT_EQ(r.dtype(), DType::kFloat32);
}

TEST_P(ArraySuite, BadCallsCarryTheErrorToEvaluation) {
  Array a = vec({1, 2, 3}, {3});
  Array b = vec({1, 2}, {2});
  Array bad = (a + b).relu() * 2.0;
  Status s = bad.eval();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Add"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("[3]"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("[2]"), std::string::npos) << s.message();
  EXPECT_EQ(bad.to_host().status(), s);
  EXPECT_EQ(values(a + a), (std::vector<float>{2, 4, 6}));

  Array m = vec({1, 2, 3, 4, 5, 6}, {2, 3});
  Status mm = m.matmul(m).eval();
  EXPECT_NE(mm.message().find("MatMul"), std::string::npos) << mm.message();
  Status ax = m.softmax(7).eval();
  EXPECT_NE(ax.message().find("Softmax"), std::string::npos) << ax.message();
  EXPECT_FALSE(Array().eval().ok());
  EXPECT_EQ(Array::from_vector<float>({1, 2, 3}, {2}, "", ctx_).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(vec({1}, {1}, "cuda:9").status().code(), StatusCode::kNotFound);
}

TEST_P(ArraySuite, ToMovesBetweenDevicesAndOpsFollowTheirInputs) {
  std::vector<float> big(1000);
  for (int i = 0; i < 1000; ++i) big[static_cast<size_t>(i)] = static_cast<float>(i);
  Array a = vec(big, {1000}, "cpu:0");
  Array b = (a * 2.0).to("cpu:1");
  EXPECT_EQ(b.device(), "cpu:1");
  Array c = b + 1.0;
  EXPECT_EQ(c.device(), "cpu:1");
  auto v = values(c);
  ASSERT_EQ(v.size(), 1000u);
  EXPECT_EQ(v[999], 1999.0f);
  Array d = a + b;
  EXPECT_EQ(d.device(), "cpu:0");
  EXPECT_EQ(values(d)[10], 30.0f);
}

TEST_P(ArraySuite, CoreOpsThroughTheArrayApi) {
  Array x = vec({-1, 0, 2, 3}, {2, 2});
  EXPECT_EQ(values(x.relu()), (std::vector<float>{0, 0, 2, 3}));
  EXPECT_EQ(values(x.clip(-0.5, 2.5)), (std::vector<float>{-0.5f, 0, 2, 2.5f}));
  EXPECT_EQ(values(x.sum()), (std::vector<float>{4}));
  EXPECT_EQ(values(x.sum({0})), (std::vector<float>{1, 3}));
  EXPECT_EQ(values(x.max({1})), (std::vector<float>{0, 3}));
  EXPECT_EQ(*x.argmax(1).to_vector<int64_t>(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(values(x.transpose()), (std::vector<float>{-1, 2, 0, 3}));
  EXPECT_EQ(values(concat({x, x}, 0).slice({1}, {3})), (std::vector<float>{2, 3, -1, 0}));
  EXPECT_EQ(*x.cast(DType::kInt32).to_vector<int32_t>(), (std::vector<int32_t>{-1, 0, 2, 3}));
  auto sm = values(vec({0, 0, 0, 0}, {1, 4}).softmax());
  EXPECT_NEAR(sm[0], 0.25f, 1e-6);
  Array idx = Array::from_vector<int64_t>({1, 0}, {2}, "", ctx_);
  EXPECT_EQ(values(x.gather(idx, 0)), (std::vector<float>{2, 3, -1, 0}));
  Array A = vec({1, 2, 3, 4}, {2, 2});
  Array I = vec({1, 0, 0, 1}, {2, 2});
  EXPECT_EQ(values(gemm(A, I, vec({10, 20}, {2}), 2.0f)), (std::vector<float>{12, 24, 16, 28}));
}

TEST_P(ArraySuite, ConvAndPoolingThroughTheArrayApi) {
  Array x = vec({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  Array w = vec({1, 1, 1, 1}, {1, 1, 2, 2});
  EXPECT_EQ(values(conv(x, w, Array())), (std::vector<float>{12, 16, 24, 28}));
  PoolOptions p;
  p.kernel_shape = {2, 2};
  EXPECT_EQ(values(max_pool(x, p)), (std::vector<float>{5, 6, 8, 9}));
  EXPECT_EQ(values(avg_pool(x, p)), (std::vector<float>{3, 4, 6, 7}));
  EXPECT_EQ(values(global_avg_pool(x)), (std::vector<float>{5}));
}

// ---------------------------------------------------------------- across devices
// (Client::run_data_parallel and the collectives, written once on the Client calls)

// y = Relu(MatMul(x, W) + z), declared for a batch of 5: x [5, 3], z [5, 4].
Graph batch_model() {
  Graph g;
  g.name = "dp";
  g.inputs = {{"x", {DType::kFloat32, {5, 3}}}, {"z", {DType::kFloat32, {5, 4}}}};
  g.outputs = {{"y", {DType::kFloat32, {5, 4}}}};
  std::vector<float> w(12);
  for (int i = 0; i < 12; ++i) w[static_cast<size_t>(i)] = static_cast<float>(i % 5) - 1.5f;
  g.initializers.emplace("W", f32(w, {3, 4}));
  g.nodes = {node("mm", "MatMul", {"x", "W"}, {"xw"}), node("add", "Add", {"xw", "z"}, {"s"}),
             node("relu", "Relu", {"s"}, {"y"})};
  return g;
}

std::vector<float> ramp(int n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = scale * static_cast<float>(i % 7 - 3);
  return v;
}

TEST_P(ClientSuite, DataParallelRunMatchesOneDevice) {
  Client& c = *client_;
  auto model = c.load(batch_model(), "cpu:0");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto x = c.upload(f32(ramp(15, 0.5f), {5, 3}).view(), "cpu:0");
  auto z = c.upload(f32(ramp(20, 0.25f), {5, 4}).view(), "cpu:1");
  ASSERT_TRUE(x.ok() && z.ok());
  auto one = c.run(*model, {*x, *z});
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  auto ref = c.read((*one)[0]);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  // 5 examples over 2 devices (3 + 2) and over 3 (2 + 2 + 1, cpu:1 twice).
  for (const std::vector<std::string>& devices :
       {std::vector<std::string>{"cpu:0", "cpu:1"},
        std::vector<std::string>{"cpu:1", "cpu:0", "cpu:1"}}) {
    auto out = c.run_data_parallel(*model, {*x, *z}, devices);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    ASSERT_EQ(out->size(), 1u);
    auto info = c.info((*out)[0]);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->device, devices[0]);
    auto got = c.read((*out)[0]);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(got->shape(), (Shape{5, 4}));
    for (int i = 0; i < 20; ++i)
      EXPECT_FLOAT_EQ(got->data<float>()[i], ref->data<float>()[i]) << i << " on " << devices[0];
    EXPECT_TRUE(c.release((*out)[0]).ok());
  }
  // The bad calls: fewer examples than devices, inputs that disagree on the batch, nothing.
  auto x1 = c.upload(f32({1, 2, 3}, {1, 3}).view(), "cpu:0");
  auto z1 = c.upload(f32({1, 2, 3, 4}, {1, 4}).view(), "cpu:0");
  ASSERT_TRUE(x1.ok() && z1.ok());
  auto few = c.run_data_parallel(*model, {*x1, *z1}, {"cpu:0", "cpu:1"});
  ASSERT_FALSE(few.ok());
  EXPECT_EQ(few.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(few.status().message().find("batch of 1 cannot be split over 2"), std::string::npos)
      << few.status().message();
  auto disagree = c.run_data_parallel(*model, {*x, *z1}, {"cpu:0", "cpu:1"});
  ASSERT_FALSE(disagree.ok());
  EXPECT_EQ(disagree.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(disagree.status().message().find("disagree on the batch"), std::string::npos)
      << disagree.status().message();
  EXPECT_EQ(c.run_data_parallel(*model, {*x, *z}, {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(c.run_data_parallel(*model, {*x, *z}, {"cpu:0", "cpu:9"}).ok());
  EXPECT_TRUE(c.unload(*model).ok());
}

TEST_P(ClientSuite, CollectivesAcrossDevices) {
  Client& c = *client_;
  auto a = c.upload(f32({1, -2, 3, 4, 5, -6}, {2, 3}).view(), "cpu:0");
  auto b = c.upload(f32({10, 20, -30, 40, 50, 60}, {2, 3}).view(), "cpu:1");
  ASSERT_TRUE(a.ok() && b.ok());
  auto check = [&](const Result<std::vector<TensorHandle>>& r, const std::vector<float>& want,
                   const Shape& shape, const std::vector<std::string>& devices) {
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_EQ(r->size(), devices.size());
    for (size_t i = 0; i < devices.size(); ++i) {
      EXPECT_EQ(c.info((*r)[i])->device, devices[i]);
      auto v = c.read((*r)[i]);
      ASSERT_TRUE(v.ok()) << v.status().to_string();
      EXPECT_EQ(v->shape(), shape);
      EXPECT_EQ(std::vector<float>(v->data<float>(), v->data<float>() + v->numel()), want)
          << "result " << i;
      (void)c.release((*r)[i]);
    }
  };
  const std::vector<std::string> both{"cpu:0", "cpu:1"};
  check(c.allreduce({*a, *b}), {11, 18, -27, 44, 55, 54}, {2, 3}, both);
  check(c.allreduce({*a, *b}, ReduceOp::kMax), {10, 20, 3, 40, 50, 60}, {2, 3}, both);
  check(c.allreduce({*a, *b}, ReduceOp::kMin), {1, -2, -30, 4, 5, -6}, {2, 3}, both);
  check(c.allreduce({*a, *b}, ReduceOp::kMean), {5.5f, 9, -13.5f, 22, 27.5f, 27}, {2, 3}, both);
  check(c.allreduce({*b, *a, *b}), {21, 38, -57, 84, 105, 114}, {2, 3},
        {"cpu:1", "cpu:0", "cpu:1"});
  check(c.allgather({*b, *a}), {10, 20, -30, 40, 50, 60, 1, -2, 3, 4, 5, -6}, {4, 3},
        {"cpu:1", "cpu:0"});
  check(c.broadcast(*a, {"cpu:1", "cpu:0", "cpu:1"}), {1, -2, 3, 4, 5, -6}, {2, 3},
        {"cpu:1", "cpu:0", "cpu:1"});
  // Shapes that do not match are refused before anything runs.
  auto odd = c.upload(f32({1, 2, 3}, {1, 3}).view(), "cpu:1");
  ASSERT_TRUE(odd.ok());
  auto bad = c.allreduce({*a, *odd});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("does not match tensor 0"), std::string::npos)
      << bad.status().message();
  check(c.allgather({*a, *odd}), {1, -2, 3, 4, 5, -6, 1, 2, 3}, {3, 3}, both);
  EXPECT_EQ(c.allreduce({}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.broadcast(*a, {}).status().code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(, ClientSuite,
                         ::testing::Values(Kind::kLocal, Kind::kRemote, Kind::kRemoteGrpc),
                         kind_name);
INSTANTIATE_TEST_SUITE_P(, ArraySuite,
                         ::testing::Values(Kind::kLocal, Kind::kRemote, Kind::kRemoteGrpc),
                         kind_name);

}  // namespace
}  // namespace tensord
