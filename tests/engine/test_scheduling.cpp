// Engine scheduling: fairness between sessions on one device (per-session FIFOs served
// round-robin, time slicing at step boundaries and loop iterations) and cancellation (a
// closed session's queued and running work stops; waits give up on a call's token).
// The bound checked: another session's small op waits about one time slice + one step of the
// running graph + its own run, asserted with a generous margin (2 s); the measured delays are
// printed, not asserted tightly (benchmarks are programs: bench/sched_delay.cpp).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "engine/engine.h"

namespace tensord {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// One runner per cpu queue by default: the tests of time slicing need the running graph to be
// the only way in (with more runners another session's work takes a free runner instead).
std::shared_ptr<Engine> make_engine(int devices = 1, int runners = 1) {
  setenv("TENSORD_CPU_DEVICES", std::to_string(devices).c_str(), 1);
  EngineOptions o;
  o.time_slice = milliseconds(20);
  o.cpu_runners = runners;
  auto e = Engine::create(o);
  unsetenv("TENSORD_CPU_DEVICES");
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return std::shared_ptr<Engine>(std::move(e).value());
}

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

// x -> Loop(M, true, x) with body x + 1 (two steps an iteration), or with an empty body (no
// steps at all: only the Loop kernel's own checkpoint can stop it).
Graph loop_graph(bool empty_body = false) {
  auto body = std::make_shared<Graph>();
  body->name = "body";
  body->inputs = {
      {"i", {DType::kInt64, {}}}, {"c", {DType::kBool, {}}}, {"x", {DType::kFloat32, {1}}}};
  if (empty_body) {
    body->outputs = {{"c", {}}, {"x", {}}};
  } else {
    body->initializers.emplace("one", HostTensor::from_vector<float>({1.0f}, {1}));
    body->nodes.push_back(node("keep", "Identity", {"c"}, {"c_out"}));
    body->nodes.push_back(node("inc", "Add", {"x", "one"}, {"x_out"}));
    body->outputs = {{"c_out", {}}, {"x_out", {}}};
  }
  Graph g;
  g.name = "long_loop";
  g.inputs = {
      {"M", {DType::kInt64, {}}}, {"cond", {DType::kBool, {}}}, {"x", {DType::kFloat32, {1}}}};
  g.nodes.push_back(node("loop", "Loop", {"M", "cond", "x"}, {"y"},
                         {{"body", Attribute(std::shared_ptr<const Graph>(body))}}));
  g.outputs = {{"y", {}}};
  return g;
}

Graph add_graph() {
  Graph g;
  g.name = "add";
  g.inputs = {{"a", {DType::kFloat32, {4}}}, {"b", {DType::kFloat32, {4}}}};
  g.nodes.push_back(node("add", "Add", {"a", "b"}, {"c"}));
  g.outputs = {{"c", {}}};
  return g;
}

// Starts a loop of `trips` iterations in `session`; returns its output handle.
TensorHandle start_loop(Engine& e, SessionId session, int64_t trips, bool empty_body = false,
                        std::shared_ptr<CancelToken> call = nullptr) {
  auto m = e.upload(session, HostTensor::scalar<int64_t>(trips).view(), "");
  auto c = e.upload(session, HostTensor::scalar<bool>(true).view(), "");
  auto x = e.upload(session, HostTensor::from_vector<float>({0.0f}, {1}).view(), "");
  EXPECT_TRUE(m.ok() && c.ok() && x.ok());
  auto out =
      e.execute(session, loop_graph(empty_body), {*m, *c, *x}, "", {}, false, std::move(call));
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  return out.ok() ? out->at(0) : 0;
}

// Runs a small Add in `session` and returns how long until its result was read (ms).
double small_op_ms(Engine& e, SessionId session) {
  const auto t0 = Clock::now();
  auto a = e.upload(session, HostTensor::from_vector<float>({1, 2, 3, 4}, {4}).view(), "");
  auto b = e.upload(session, HostTensor::from_vector<float>({10, 20, 30, 40}, {4}).view(), "");
  EXPECT_TRUE(a.ok() && b.ok());
  auto out = e.execute(session, add_graph(), {*a, *b}, "");
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  auto r = e.read(session, out->at(0));
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (r.ok()) {
    EXPECT_EQ(r->to_double_vector(), (std::vector<double>{11, 22, 33, 44}));
  }
  return ms_since(t0);
}

// Waits until the loop has surely started (it is the device's running task).
void let_it_run() { std::this_thread::sleep_for(milliseconds(100)); }

TEST(Scheduling, SmallOpOfAnotherSessionIsNotStuckBehindALongLoop) {
  auto e = make_engine();
  for (int64_t trips : {int64_t{10'000'000}, INT64_MAX}) {
    const SessionId a = e->open_session();
    const SessionId b = e->open_session();
    const TensorHandle y = start_loop(*e, a, trips);
    let_it_run();
    double worst = 0;
    for (int i = 0; i < 5; ++i) worst = std::max(worst, small_op_ms(*e, b));
    std::printf(
        "[ measure  ] trips=%lld: session B's small op behind A's loop: worst of 5 %.2f ms\n",
        static_cast<long long>(trips), worst);
    EXPECT_LT(worst, 2000.0);
    // A's loop is still running (B did not wait for it, it did not end early).
    auto info = e->info(a, y);
    ASSERT_TRUE(info.ok());
    auto early = std::make_shared<CancelToken>(Clock::now() + milliseconds(1));
    EXPECT_EQ(e->wait(a, y, early.get()).code(), StatusCode::kDeadlineExceeded);
    ASSERT_TRUE(e->close_session(a).ok());
    ASSERT_TRUE(e->close_session(b).ok());
  }
  EXPECT_GT(e->metrics().tasks_nested, 0);
}

TEST(Scheduling, ClosingTheSessionStopsItsRunningLoopAndDropsItsQueuedWork) {
  auto e = make_engine();
  for (bool empty_body : {false, true}) {
    const auto before = e->metrics();
    const SessionId a = e->open_session();
    const SessionId b = e->open_session();
    const TensorHandle y = start_loop(*e, a, INT64_MAX, empty_body);
    // Queued behind the loop in A's FIFO: dropped without running.
    auto p = e->upload(a, HostTensor::from_vector<float>({1, 2, 3, 4}, {4}).view(), "");
    ASSERT_TRUE(p.ok());
    auto q = e->execute(a, add_graph(), {*p, *p}, "");
    ASSERT_TRUE(q.ok());
    let_it_run();
    // A waiter on the loop's output (another thread) gives up when the session closes.
    Status waited;
    double waited_ms = 0;
    std::thread waiter([&] {
      waited = e->wait(a, y);
      waited_ms = 0;
    });
    std::this_thread::sleep_for(milliseconds(50));
    const auto t0 = Clock::now();
    ASSERT_TRUE(e->close_session(a).ok());
    waiter.join();
    waited_ms = ms_since(t0);
    EXPECT_EQ(waited.code(), StatusCode::kCancelled) << waited.to_string();
    EXPECT_NE(waited.message().find("the session was closed"), std::string::npos)
        << waited.to_string();
    // The device is idle again: both of A's tasks ended as cancelled, promptly.
    const auto t1 = Clock::now();
    while (e->metrics().tasks_cancelled < before.tasks_cancelled + 2 && ms_since(t1) < 5000)
      std::this_thread::sleep_for(milliseconds(1));
    const double stop_ms = ms_since(t1);
    EXPECT_GE(e->metrics().tasks_cancelled, before.tasks_cancelled + 2);
    const int64_t busy = e->metrics().busy_us;
    std::this_thread::sleep_for(milliseconds(200));
    EXPECT_EQ(e->metrics().busy_us, busy) << "the device still runs something";
    const double after = small_op_ms(*e, b);
    std::printf(
        "[ measure  ] empty_body=%d: waiter released %.2f ms after close, loop stopped "
        "within %.2f ms more; next op %.2f ms\n",
        empty_body, waited_ms, stop_ms, after);
    EXPECT_LT(waited_ms, 1000.0);
    EXPECT_LT(after, 1000.0);
    ASSERT_TRUE(e->close_session(b).ok());
  }
}

TEST(Scheduling, ACallsDeadlineStopsTheWaitNotTheWork) {
  auto e = make_engine();
  const SessionId a = e->open_session();
  const auto before = e->metrics();
  const TensorHandle y = start_loop(*e, a, INT64_MAX);
  auto call = std::make_shared<CancelToken>(Clock::now() + milliseconds(200));
  const auto t0 = Clock::now();
  Status w = e->wait(a, y, call.get());
  const double ms = ms_since(t0);
  EXPECT_EQ(w.code(), StatusCode::kDeadlineExceeded) << w.to_string();
  EXPECT_GT(ms, 150.0);
  EXPECT_LT(ms, 1500.0);
  auto r = e->read(a, y, call.get());  // already past: at once
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  // A wait's deadline is the caller's patience: the work goes on.
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(e->metrics().tasks_cancelled, before.tasks_cancelled);
  ASSERT_TRUE(e->close_session(a).ok());
}

TEST(Scheduling, CancellingTheSubmittingCallsTokenStopsItsWork) {
  auto e = make_engine();
  const SessionId a = e->open_session();
  auto call = std::make_shared<CancelToken>();
  const TensorHandle y = start_loop(*e, a, INT64_MAX, false, call);
  let_it_run();
  const auto t0 = Clock::now();
  call->cancel(Status(StatusCode::kDeadlineExceeded, "deadline exceeded: test"));
  Status w = e->wait(a, y);  // no token of its own: ends because the work ended
  EXPECT_EQ(w.code(), StatusCode::kDeadlineExceeded) << w.to_string();
  EXPECT_LT(ms_since(t0), 1000.0);
  // The session lives on and computes.
  EXPECT_LT(small_op_ms(*e, a), 1000.0);
  ASSERT_TRUE(e->close_session(a).ok());
}

TEST(Scheduling, ASecondLongGraphRunInlineIsPreemptedSoAThirdSessionStillGetsIn) {
  auto e = make_engine();
  const SessionId a = e->open_session();
  const SessionId b = e->open_session();
  const SessionId c = e->open_session();
  const TensorHandle ya = start_loop(*e, a, INT64_MAX);
  let_it_run();
  const TensorHandle yb = start_loop(*e, b, 1'000'000);  // would run inline inside A's loop
  let_it_run();
  double worst = 0;
  for (int i = 0; i < 5; ++i) worst = std::max(worst, small_op_ms(*e, c));
  std::printf("[ measure  ] C's small op behind A's endless loop and B's long one: worst %.2f ms\n",
              worst);
  EXPECT_LT(worst, 2000.0);
  EXPECT_GE(e->metrics().tasks_preempted, 1);
  // Once A is gone, B's loop runs in its turn and completes with the right value.
  ASSERT_TRUE(e->close_session(a).ok());
  auto r = e->read(b, yb);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->to_double_vector(), std::vector<double>{1e6});
  (void)ya;
  ASSERT_TRUE(e->close_session(b).ok());
  ASSERT_TRUE(e->close_session(c).ok());
}

// With two runners, another session's work runs beside a long graph on the second runner
// (nothing nested inside the long one); with both busy, a third session's still gets in inline.
TEST(Scheduling, TwoRunnersRunTwoSessionsSideBySide) {
  auto e = make_engine(1, 2);
  const SessionId a = e->open_session();
  const SessionId b = e->open_session();
  const SessionId c = e->open_session();
  const TensorHandle ya = start_loop(*e, a, INT64_MAX);
  let_it_run();
  double worst = 0;
  for (int i = 0; i < 5; ++i) worst = std::max(worst, small_op_ms(*e, b));
  std::printf("[ measure  ] two runners: B's small op beside A's endless loop: worst %.2f ms\n",
              worst);
  EXPECT_LT(worst, 2000.0);
  EXPECT_EQ(e->metrics().tasks_nested, 0);  // B's ops ran on the second runner
  const TensorHandle yb = start_loop(*e, b, INT64_MAX);
  let_it_run();
  worst = 0;
  for (int i = 0; i < 5; ++i) worst = std::max(worst, small_op_ms(*e, c));
  std::printf("[ measure  ] two runners both busy: C's small op: worst %.2f ms\n", worst);
  EXPECT_LT(worst, 2000.0);
  EXPECT_GT(e->metrics().tasks_nested, 0);
  (void)ya;
  (void)yb;
  ASSERT_TRUE(e->close_session(a).ok());
  ASSERT_TRUE(e->close_session(b).ok());
  ASSERT_TRUE(e->close_session(c).ok());
}

class SchedulingRunners : public ::testing::TestWithParam<int> {};

TEST_P(SchedulingRunners, OrderWithinASessionIsKeptAndSessionsTakeTurns) {
  auto e = make_engine(1, GetParam());
  const SessionId a = e->open_session();
  const SessionId b = e->open_session();
  // A queues many ops behind a 300 ms loop; B's op, queued last, does not wait for all of A's.
  const TensorHandle y = start_loop(*e, a, 300'000);
  auto p = e->upload(a, HostTensor::from_vector<float>({1, 2, 3, 4}, {4}).view(), "");
  ASSERT_TRUE(p.ok());
  TensorHandle last = *p;
  for (int i = 0; i < 50; ++i) {  // a chain: each depends on the previous one
    auto q = e->execute(a, add_graph(), {last, *p}, "");
    ASSERT_TRUE(q.ok());
    last = q->at(0);
  }
  EXPECT_LT(small_op_ms(*e, b), 2000.0);
  auto r = e->read(a, last);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->to_double_vector(), (std::vector<double>{51, 102, 153, 204}));
  auto ry = e->read(a, y);
  ASSERT_TRUE(ry.ok()) << ry.status().to_string();
  EXPECT_EQ(ry->to_double_vector(), std::vector<double>{3e5});
}

// x[1,16,32,32] -> Conv(3x3, 32 filters, pads 1) -> Relu, its weights scaled by `scale`: on
// cpu:0 one oneDNN region.
Graph conv_relu_graph(float scale) {
  std::vector<float> w(32 * 16 * 3 * 3);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = scale * (static_cast<float>((i * 7919) % 97) / 97.0f - 0.5f);
  Graph g;
  g.name = "conv";
  g.inputs = {{"x", {DType::kFloat32, {1, 16, 32, 32}}}};
  g.initializers.emplace("w", HostTensor::from_vector<float>(w, {32, 16, 3, 3}));
  g.nodes.push_back(node("conv", "Conv", {"x", "w"}, {"c"},
                         {{"pads", Attribute(std::vector<int64_t>{1, 1, 1, 1})}}));
  g.nodes.push_back(node("relu", "Relu", {"c"}, {"y"}));
  g.outputs = {{"y", {}}};
  return g;
}

// Four sessions on threads of their own, session t running graphs[t % n] 20 times, all at once;
// returns the runs whose result differs from a lone run of the same graph (each printed).
int side_by_side_mismatches(Engine& e, const std::vector<Graph>& graphs) {
  std::vector<float> x(16 * 32 * 32);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 104729) % 89) / 89.0f;
  const HostTensor in = HostTensor::from_vector<float>(x, {1, 16, 32, 32});
  auto run_once = [&](SessionId s, const Graph& g) -> std::vector<double> {
    auto h = e.upload(s, in.view(), "");
    if (!h.ok()) return {};
    auto out = e.execute(s, g, {*h}, "");
    if (!out.ok()) return {};
    auto r = e.read(s, out->at(0));
    return r.ok() ? r->to_double_vector() : std::vector<double>{};
  };
  std::vector<std::vector<double>> wants;
  const SessionId lone = e.open_session();
  for (const Graph& g : graphs) {
    wants.push_back(run_once(lone, g));
    EXPECT_EQ(wants.back().size(), size_t{32 * 32 * 32});
  }
  std::atomic<int> bad{0};
  std::vector<std::thread> ts;
  for (size_t t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      const Graph& g = graphs[t % graphs.size()];
      const std::vector<double>& want = wants[t % graphs.size()];
      const SessionId s = e.open_session();
      for (int i = 0; i < 20; ++i) {
        const std::vector<double> got = run_once(s, g);
        size_t first_bad = 0, count = got.size() == want.size() ? 0 : 1;
        if (count == 0)
          for (size_t k = 0; k < got.size(); ++k)
            if (std::abs(got[k] - want[k]) > 1e-5 * (1 + std::abs(want[k])) && count++ == 0)
              first_bad = k;
        if (count > 0) {
          bad++;
          std::printf("[ mismatch ] size %zu, %zu elements differ, first at %zu\n", got.size(),
                      count, first_bad);
        }
      }
      (void)e.close_session(s);
    });
  for (auto& th : ts) th.join();
  (void)e.close_session(lone);
  return bad.load();
}

// Two runners, four sessions running the same convolution graph at once (one cached executable:
// its oneDNN region's runs take turns, on its one-thread variants while both runners are busy):
// every result equals the one a lone run gives. (Before runs of a region took turns, 1 in 40
// results here were wrong.)
TEST(Scheduling, SessionsSideBySideOnOneCachedRegionAgreeWithALoneRun) {
  auto e = make_engine(1, 2);
  EXPECT_EQ(side_by_side_mismatches(*e, {conv_relu_graph(1.0f)}), 0);
}

// Four sessions, each its own convolution (same shapes, other weights: its own executable and
// region, the same oneDNN primitive descriptors), side by side on two runners: each result
// equals its lone run.
TEST(Scheduling, SessionsSideBySideOnTheirOwnRegionsAgreeWithLoneRuns) {
  auto e = make_engine(1, 2);
  EXPECT_EQ(side_by_side_mismatches(*e, {conv_relu_graph(1.0f), conv_relu_graph(1.25f),
                                         conv_relu_graph(1.5f), conv_relu_graph(1.75f)}),
            0);
}

INSTANTIATE_TEST_SUITE_P(Runners, SchedulingRunners, ::testing::Values(1, 2, 4));

TEST(Scheduling, WorkAcrossTwoDevicesOfManySessionsCompletes) {
  // Transfers between devices and round-robin picking: no deadlock, right values, with one
  // runner per queue and with two.
  for (int runners : {1, 2}) {
    auto e = make_engine(2, runners);
    std::vector<std::thread> threads;
    std::atomic<int> good{0};
    for (int t = 0; t < 6; ++t) {
      threads.emplace_back([&, t] {
        const SessionId s = e->open_session();
        auto p = e->upload(s, HostTensor::from_vector<float>({1, 2, 3, 4}, {4}).view(),
                           t % 2 ? "cpu:1" : "cpu:0");
        TensorHandle last = *p;
        for (int i = 0; i < 40; ++i) {
          auto q = e->execute(s, add_graph(), {last, *p}, i % 2 ? "cpu:0" : "cpu:1");
          if (!q.ok()) return;
          last = q->at(0);
        }
        auto r = e->read(s, last);
        if (r.ok() && r->to_double_vector() == std::vector<double>{41, 82, 123, 164}) good++;
        (void)e->close_session(s);
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(good.load(), 6) << runners << " runners";
  }
}

}  // namespace
}  // namespace tensord
