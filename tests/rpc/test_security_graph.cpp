// Issue 15, attacks 2 and 11, against a real `tensord serve` process: graphs a hostile client
// crafts to hit another graph's compiled executable, to nest subgraphs without end, or to
// make a kernel allocate past what shape inference promised. Each gets a clear status, the
// broker stays up, and nothing of another session comes back.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "broker_process.h"
#include "rpc/remote_client.h"
#include "rpc/wire.h"
#include "tensord.pb.h"

namespace tensord {
namespace {

using testing::BrokerOptions;
using testing::BrokerProcess;

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

std::unique_ptr<rpc::RemoteClient> connect_to(const BrokerProcess& b) {
  auto c = rpc::RemoteClient::connect(b.address());
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(c).value() : nullptr;
}

// The broker still serves: a fresh client uploads and reads back.
void expect_alive(const BrokerProcess& b) {
  auto c = connect_to(b);
  ASSERT_NE(c, nullptr);
  HostTensor t = HostTensor::from_vector<float>({1, 2, 3}, {3});
  auto h = c->upload(t.view(), "");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  auto back = c->read(*h);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->to_double_vector(), (std::vector<double>{1, 2, 3}));
}

class SecurityGraph : public ::testing::Test {
 protected:
  void SetUp() override {
    broker_ = testing::shared_broker();
    ASSERT_NE(broker_, nullptr);
  }
  BrokerProcess* broker_ = nullptr;
};

// Attack 2: a victim's graph Add(x: float32[N], y: float32[1]) is cached; the attacker sends a
// one-input graph whose input is *named* "x=float32[N];y" (so a key made by joining names
// with ';' and '=' was the victim's), with a 4-byte input. Before the fix the broker ran the
// victim's executable on it: SIGSEGV at N = 2^26, or N*4 bytes of broker heap read back.
TEST_F(SecurityGraph, ForgedInputNameDoesNotHitAnotherGraphsExecutable) {
  constexpr int64_t kN = int64_t{1} << 20;
  auto victim = connect_to(*broker_);
  auto attacker = connect_to(*broker_);
  ASSERT_NE(victim, nullptr);
  ASSERT_NE(attacker, nullptr);

  std::vector<float> secret(kN, 0);
  for (int64_t i = 0; i < kN; ++i) secret[static_cast<size_t>(i)] = 1000.0f + static_cast<float>(i);
  HostTensor xs = HostTensor::from_vector<float>(secret, {kN});
  HostTensor ys = HostTensor::from_vector<float>({0.5f}, {1});
  Graph g;
  g.inputs = {{"x", {}}, {"y", {}}};
  g.nodes = {node("add", "Add", {"x", "y"}, {"z"})};
  g.outputs = {{"z", {}}};
  auto xh = victim->upload(xs.view(), "");
  auto yh = victim->upload(ys.view(), "");
  ASSERT_TRUE(xh.ok() && yh.ok());
  auto vz = victim->execute(g, {*xh, *yh}, "");
  ASSERT_TRUE(vz.ok()) << vz.status().to_string();
  ASSERT_TRUE(victim->wait((*vz)[0]).ok());  // compiled and cached

  const std::string forged = "x=float32[" + std::to_string(kN) + "];y";
  for (const std::string& type_text : {std::string("float32[1]"), std::string()}) {
    (void)type_text;
    Graph f;
    f.inputs = {{forged, {}}};
    f.nodes = {node("add", "Add", {"x", "y"}, {"z"})};  // names the victim's inputs
    f.outputs = {{"z", {}}};
    HostTensor one = HostTensor::from_vector<float>({7.0f}, {1});
    auto oh = attacker->upload(one.view(), "");
    ASSERT_TRUE(oh.ok());
    auto out = attacker->execute(f, {*oh}, "");
    Status st = out.ok() ? attacker->read((*out)[0]).status() : out.status();
    ASSERT_FALSE(st.ok()) << "the forged graph ran";
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find("'x'"), std::string::npos) << st.message();  // names the dangling input
  }
  // The same forged name with a node that reads its own input is a fine graph: it computes on
  // the attacker's 4 bytes only.
  Graph ok;
  ok.inputs = {{forged, {}}};
  ok.nodes = {node("abs", "Abs", {forged}, {"z"})};
  ok.outputs = {{"z", {}}};
  HostTensor neg = HostTensor::from_vector<float>({-7.0f}, {1});
  auto nh = attacker->upload(neg.view(), "");
  ASSERT_TRUE(nh.ok());
  auto out = attacker->execute(ok, {*nh}, "");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  auto v = attacker->read((*out)[0]);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  ASSERT_EQ(v->numel(), 1);
  EXPECT_EQ(v->to_double_vector()[0], 7.0);
  // The victim's result is intact and its own.
  auto vv = victim->read((*vz)[0]);
  ASSERT_TRUE(vv.ok());
  EXPECT_EQ(vv->to_double_vector()[5], 1005.5);
  expect_alive(*broker_);
}

// Builds If nested `depth` deep: each else-branch holds the next If; the innermost returns x.
Graph nested_if(int depth) {
  Graph leaf;
  leaf.nodes = {node("id", "Identity", {"x"}, {"r"})};
  leaf.outputs = {{"r", {}}};
  Graph current = leaf;
  for (int i = 0; i < depth; ++i) {
    Graph outer;
    outer.nodes = {node("if" + std::to_string(i), "If", {"c"}, {"r"},
                        {{"then_branch", Attribute(std::make_shared<const Graph>(leaf))},
                         {"else_branch", Attribute(std::make_shared<const Graph>(current))}})};
    outer.outputs = {{"r", {}}};
    current = outer;
  }
  Graph g;
  g.inputs = {{"x", {}}, {"c", {}}};
  g.nodes = current.nodes;
  g.outputs = {{"r", {}}};
  return g;
}

// Attack 11a: If nested 30 deep gave INTERNAL with an empty message. Now: a clear
// INVALID_ARGUMENT naming the limit; a modest nesting still runs.
TEST_F(SecurityGraph, DeeplyNestedSubgraphsGetAClearError) {
  auto c = connect_to(*broker_);
  ASSERT_NE(c, nullptr);
  HostTensor x = HostTensor::from_vector<float>({3.0f}, {1});
  HostTensor cond = HostTensor::from_vector<bool>({false}, {});
  auto xh = c->upload(x.view(), "");
  auto ch = c->upload(cond.view(), "");
  ASSERT_TRUE(xh.ok() && ch.ok());
  for (int depth : {30, 200}) {
    auto out = c->execute(nested_if(depth), {*xh, *ch}, "");
    Status st = out.ok() ? c->read((*out)[0]).status() : out.status();
    ASSERT_FALSE(st.ok());
    std::printf("depth %d: %s\n", depth, st.to_string().c_str());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find("nested more than 16 deep"), std::string::npos) << st.message();
  }
  auto out = c->execute(nested_if(8), {*xh, *ch}, "");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  auto v = c->read((*out)[0]);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->to_double_vector(), (std::vector<double>{3.0}));
  expect_alive(*broker_);
}

// The broker's own decoder (what a raw gRPC client reaches, past any client-side check)
// bounds nesting and the node count.
TEST(SecurityGraphWire, DecoderBoundsNestingAndNodes) {
  v1::Graph deep;
  rpc::to_proto(nested_if(20), &deep);
  auto r = rpc::from_proto(deep);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("nested more than 16 deep"), std::string::npos);
  EXPECT_TRUE(rpc::from_proto(deep, {100000, 20}).ok());

  Graph wide;
  wide.inputs = {{"x", {}}};
  std::string last = "x";
  for (int i = 0; i < 2000; ++i) {
    wide.nodes.push_back(node("n" + std::to_string(i), "Relu", {last}, {"v" + std::to_string(i)}));
    last = "v" + std::to_string(i);
  }
  wide.outputs = {{last, {}}};
  v1::Graph p;
  rpc::to_proto(wide, &p);
  auto w = rpc::from_proto(p, {1000, 16});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("more than 1000 nodes"), std::string::npos);
  EXPECT_TRUE(rpc::from_proto(p).ok());
  EXPECT_FALSE(rpc::check_graph_limits(wide, {1000, 16}).ok());
}

// Attack 11b: Range from INT64_MIN to INT64_MAX gave INTERNAL "kernel must use
// allocate_output" (the element count overflowed to "unknown"). Now: INVALID_ARGUMENT naming
// the node and the values; a huge but representable Range is RESOURCE_EXHAUSTED, not a crash.
TEST_F(SecurityGraph, RangeOfAbsurdLengthIsRefusedClearly) {
  auto c = connect_to(*broker_);
  ASSERT_NE(c, nullptr);
  auto run_range = [&](int64_t start, int64_t limit, int64_t delta) -> Status {
    Graph g;
    g.initializers.emplace("s", HostTensor::from_vector<int64_t>({start}, {}));
    g.initializers.emplace("l", HostTensor::from_vector<int64_t>({limit}, {}));
    g.initializers.emplace("d", HostTensor::from_vector<int64_t>({delta}, {}));
    g.nodes = {node("range", "Range", {"s", "l", "d"}, {"r"})};
    g.outputs = {{"r", {}}};
    auto out = c->execute(g, {}, "");
    return out.ok() ? c->read((*out)[0]).status() : out.status();
  };
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  Status st = run_range(lo, hi, 1);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("too many elements"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("range"), std::string::npos) << st.message();
  st = run_range(0, int64_t{1} << 50, 1);  // 8 PiB of int64
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
  EXPECT_TRUE(run_range(0, 5, 2).ok());
  expect_alive(*broker_);
}

}  // namespace
}  // namespace tensord
