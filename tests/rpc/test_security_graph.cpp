// Issue 15, attacks 2 and 11, against a real `tensord serve` process: graphs a hostile client
// crafts to hit another graph's compiled executable, to nest subgraphs without end, or to
// make a kernel allocate past what shape inference promised. Each gets a clear status, the
// broker stays up, and nothing of another session comes back.
#include <gtest/gtest.h>

#include <atomic>
#include <algorithm>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "broker_process.h"
#include "rpc/remote_client.h"
#include "rpc/wire.h"
#include "tensord.pb.h"

namespace tensord {
namespace {

using testing::BrokerOptions;
using testing::BrokerProcess;
using testing::proc_status_bytes;

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


// ---------------------------------------------------------------- issue 27, finding 2

// A fresh folder for a token file, removed at the end.
class TokenDir {
 public:
  TokenDir() {
    std::string t = (std::filesystem::temp_directory_path() / "tensord-fold.XXXXXX").string();
    path_ = mkdtemp(t.data()) ? t : "";
  }
  ~TokenDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary) << text;
    chmod(p.c_str(), 0600);  // tokens are secrets: the broker refuses a file others can read
    return p;
  }

 private:
  std::string path_;
};


std::unique_ptr<rpc::RemoteClient> connect_as(const BrokerProcess& b, const std::string& token) {
  rpc::RemoteClientOptions o;
  o.token = token;
  o.transport = "grpc";  // the memory measured is the broker's own, not a shared region's
  auto c = rpc::RemoteClient::connect(b.address(), o);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(c).value() : nullptr;
}

// A small op answers for `c` (within `limit`; generous for a loaded 2-core machine).
void expect_small_op(rpc::RemoteClient& c, const char* who,
                     std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
  const auto t0 = std::chrono::steady_clock::now();
  HostTensor x = HostTensor::from_vector<float>({1, -2, 3}, {3});
  auto h = c.upload(x.view(), "");
  ASSERT_TRUE(h.ok()) << who << ": " << h.status().to_string();
  Graph g;
  g.inputs = {{"x", {}}};
  g.nodes = {node("relu", "Relu", {"x"}, {"y"})};
  g.outputs = {{"y", {}}};
  auto out = c.execute(g, {*h}, "");
  ASSERT_TRUE(out.ok()) << who << ": " << out.status().to_string();
  auto y = c.read((*out)[0]);
  ASSERT_TRUE(y.ok()) << who << ": " << y.status().to_string();
  EXPECT_EQ(y->to_double_vector(), (std::vector<double>{1, 0, 3})) << who;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, limit) << who;
  (void)c.release(*h);
  (void)c.release((*out)[0]);
}

// `n` ConstantOfShape nodes, each of 65,534 float64 (512 KiB: just under the 65,536-element
// folding limit) from a 1-element shape, all read by one Sum: 4,000 of them fold to 2 GiB of
// constants from about 200 KiB of graph.
// Each constant differs from the others (equal ones would be computed once: canonicalize's cse).
Graph folded_constants_graph(int n) {
  Graph g;
  g.name = "folds";
  g.initializers.emplace("shape", HostTensor::from_vector<int64_t>({65534}, {1}));
  std::vector<std::string> parts;
  for (int i = 0; i < n; ++i) {
    AttributeMap a;
    a.emplace("value", Attribute(HostTensor::from_vector<double>({1.0 + i}, {1})));
    parts.push_back("c" + std::to_string(i));
    g.nodes.push_back(node(parts.back(), "ConstantOfShape", {"shape"}, {parts.back()}));
    g.nodes.back().attrs = std::move(a);
  }
  g.nodes.push_back(node("sum", "Sum", parts, {"out"}));
  g.outputs = {{"out", {}}};
  return g;
}

// Finding 2: the constants a compile folds are the tenant's bytes, charged as they are made.
// Before: RSS 98 -> 2,111 MiB under a 64 MiB tenant limit, 1,954 MiB kept after close. Now the
// compile stops at the tenant's limit with RESOURCE_EXHAUSTED naming the node and the limit,
// the broker's RSS stays near its baseline, another tenant's small op answers throughout, and
// the memory is back once the tenant's session closes.
TEST(SecurityGraphFold, FoldedConstantsAreChargedToTheTenantAndGiveBackTheirMemory) {
  TokenDir dir;
  BrokerOptions o;
  o.args = {"--token-file", dir.write("tokens", "alice:alice-token-0123\nbob:bob-token-4567\n"),
            "--tenant-memory-limit", std::to_string(64 << 20)};
  o.cpu_devices = 1;
  auto b = BrokerProcess::start(o);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto bob = connect_as(**b, "bob-token-4567");
  ASSERT_NE(bob, nullptr);
  int64_t baseline = 0;
  {
    auto alice = connect_as(**b, "alice-token-0123");
    ASSERT_NE(alice, nullptr);
    expect_small_op(*alice, "alice (warm-up)");
    expect_small_op(*bob, "bob (warm-up)");
    // A legitimate graph with a few folded constants still folds and runs.
    {
      auto out = alice->execute(folded_constants_graph(4), {}, "");
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      auto v = alice->read((*out)[0]);
      ASSERT_TRUE(v.ok()) << v.status().to_string();
      EXPECT_EQ(v->shape(), (Shape{65534}));
      EXPECT_EQ(v->to_double_vector()[65533], 1.0 + 2.0 + 3.0 + 4.0);
      (void)alice->release((*out)[0]);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    baseline = proc_status_bytes((*b)->pid(), "VmRSS");
    ASSERT_GT(baseline, 0);

    std::atomic<bool> done{false};
    std::atomic<int64_t> peak{0};
    std::thread watch([&] {  // the broker's RSS while the attack runs
      while (!done.load()) {
        peak = std::max<int64_t>(peak.load(), proc_status_bytes((*b)->pid(), "VmRSS"));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
    const Graph attack = folded_constants_graph(4000);
    Status st;
    auto out = alice->execute(attack, {}, "");
    st = out.ok() ? alice->read((*out)[0]).status() : out.status();
    expect_small_op(*bob, "bob (during)");
    done = true;
    watch.join();
    ASSERT_FALSE(st.ok()) << "2 GiB of folded constants under a 64 MiB tenant limit";
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
    EXPECT_NE(st.message().find("tenant memory limit"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("ConstantOfShape"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("64.0 MiB"), std::string::npos) << st.message();
    const int64_t after_attack = proc_status_bytes((*b)->pid(), "VmRSS");
    std::printf("[ figures ] 4,000 folded ConstantOfShape under a 64 MiB tenant limit: broker RSS "
                "%.1f MiB -> peak %.1f MiB, %.1f MiB after the refusal\n",
                baseline / 1048576.0, peak.load() / 1048576.0, after_attack / 1048576.0);
    if (!testing::kSanitizedBuild) {
      EXPECT_LT(peak.load() - baseline, int64_t{256} << 20) << "the folded bytes passed the quota";
    }
    // Alice is still served within her quota: 100 folded constants (50 MiB) fit in it, and
    // stay held (charged to her) while her executable is cached.
    expect_small_op(*alice, "alice (after)");
    auto fits = alice->execute(folded_constants_graph(100), {}, "");
    ASSERT_TRUE(fits.ok()) << fits.status().to_string();
    auto v = alice->read((*fits)[0]);
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    EXPECT_EQ(v->to_double_vector()[0], 100.0 * 101 / 2);  // 1 + 2 + ... + 100
    (void)alice->release((*fits)[0]);
    std::printf("[ figures ] 100 folded ConstantOfShape (50 MiB) within the quota: broker RSS "
                "%.1f MiB\n", proc_status_bytes((*b)->pid(), "VmRSS") / 1048576.0);
  }  // alice's session closes: whatever the compile held goes back
  expect_small_op(*bob, "bob (after)");
  int64_t after_close = 0;
  for (int i = 0; i < 50; ++i) {  // the close is asynchronous to the client's return
    after_close = proc_status_bytes((*b)->pid(), "VmRSS");
    if (after_close <= baseline + baseline / 10) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::printf("[ figures ] broker RSS after the tenant's last session closed: %.1f MiB "
              "(baseline %.1f MiB)\n",
              after_close / 1048576.0, baseline / 1048576.0);
  if (!testing::kSanitizedBuild) {
    EXPECT_LE(after_close, baseline + baseline / 10);
  }
}

// A chain of `n` Relu nodes over x, then + `k`: a graph of its own for each k (a cache miss).
Graph relu_chain(int n, float k) {
  Graph g;
  g.name = "chain" + std::to_string(static_cast<int>(k));
  g.inputs = {{"x", {DType::kFloat32, {4}}}};
  g.initializers.emplace("k", HostTensor::from_vector<float>({k}, {1}));
  std::string prev = "x";
  for (int i = 0; i < n; ++i) {
    const std::string out = "r" + std::to_string(i);
    g.nodes.push_back(node(out, "Relu", {prev}, {out}));
    prev = out;
  }
  g.nodes.push_back(node("plus", "Add", {prev, "k"}, {"y"}));
  g.outputs = {{"y", {}}};
  return g;
}

// Known gap closed: compiles ran on the gRPC thread of each call, as many at once as a tenant
// sent. Now one tenant's compiles run --max-compiles-per-tenant at once, 16 times as many
// wait, the rest are refused naming the limit; another tenant is served throughout.
TEST(SecurityGraphCompile, OneTenantsCompilesAreBoundedAndOthersAreServed) {
  TokenDir dir;
  BrokerOptions o;
  o.args = {"--token-file", dir.write("tokens", "alice:alice-token-0123\nbob:bob-token-4567\n"),
            "--max-compiles-per-tenant", "1"};
  o.cpu_devices = 1;
  auto b = BrokerProcess::start(o);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto bob = connect_as(**b, "bob-token-4567");
  ASSERT_NE(bob, nullptr);
  expect_small_op(*bob, "bob (warm-up)");
  constexpr int kCalls = 40;  // 1 runs, 16 wait: at least 23 refused
  std::vector<std::unique_ptr<rpc::RemoteClient>> alices;
  for (int i = 0; i < kCalls; ++i) {
    alices.push_back(connect_as(**b, "alice-token-0123"));
    ASSERT_NE(alices.back(), nullptr);
  }
  std::vector<Status> results(kCalls);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kCalls; ++i)
    threads.emplace_back([&, i] {
      const Graph g = relu_chain(6000, static_cast<float>(i + 1));
      HostTensor x = HostTensor::from_vector<float>({-1, 2, -3, 4}, {4});
      auto h = alices[i]->upload(x.view(), "");
      if (!h.ok()) {
        results[i] = h.status();
        return;
      }
      ++ready;
      while (ready.load() < kCalls) std::this_thread::yield();  // all at once
      auto out = alices[i]->execute(g, {*h}, "");
      if (!out.ok()) {
        results[i] = out.status();
        return;
      }
      auto y = alices[i]->read((*out)[0]);
      results[i] = y.status();
      if (y.ok() && y->to_double_vector() != std::vector<double>{1.0 + i, 3.0 + i, 1.0 + i,
                                                                 5.0 + i})
        results[i] = Status(StatusCode::kInternal, "wrong values");
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  expect_small_op(*bob, "bob (during)");
  for (auto& t : threads) t.join();
  int ok = 0, refused = 0;
  for (const Status& st : results) {
    if (st.ok()) {
      ++ok;
      continue;
    }
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
    EXPECT_NE(st.message().find("compiles running"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("--max-compiles-per-tenant"), std::string::npos) << st.message();
    ++refused;
  }
  std::printf("[ figures ] %d concurrent compiles of one tenant, --max-compiles-per-tenant 1: "
              "%d ran, %d refused\n", kCalls, ok, refused);
  EXPECT_GE(ok, 17) << "one running and 16 waiting must all be served";
  EXPECT_GE(refused, 1) << "every compile was admitted: there is no bound";
  // Refused calls are retryable: the tenant is served again once its compiles finished.
  expect_small_op(*alices[1], "alice (after)");
  expect_small_op(*bob, "bob (after)");
}

}  // namespace
}  // namespace tensord
