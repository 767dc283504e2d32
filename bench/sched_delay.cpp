// bench_sched_delay: how long another session's small op waits behind a long graph on the
// same device (issue 15, attack 7). Session A runs an endless Loop (two steps an iteration);
// session B then runs a small Add and reads it back, N times; the program prints the median
// and worst of B's latency, next to the same op on an idle device, for a few time slices.
// A benchmark program, not a test: run it by hand (build/bench/bench_sched_delay [N]).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "engine/engine.h"

using namespace tensord;
using Clock = std::chrono::steady_clock;

namespace {

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

Graph loop_graph() {
  auto body = std::make_shared<Graph>();
  body->inputs = {{"i", {DType::kInt64, {}}}, {"c", {DType::kBool, {}}}, {"x", {DType::kFloat32, {1}}}};
  body->initializers.emplace("one", HostTensor::from_vector<float>({1.0f}, {1}));
  body->nodes.push_back(node("keep", "Identity", {"c"}, {"c_out"}));
  body->nodes.push_back(node("inc", "Add", {"x", "one"}, {"x_out"}));
  body->outputs = {{"c_out", {}}, {"x_out", {}}};
  Graph g;
  g.inputs = {{"M", {DType::kInt64, {}}}, {"cond", {DType::kBool, {}}}, {"x", {DType::kFloat32, {1}}}};
  g.nodes.push_back(node("loop", "Loop", {"M", "cond", "x"}, {"y"},
                         {{"body", Attribute(std::shared_ptr<const Graph>(body))}}));
  g.outputs = {{"y", {}}};
  return g;
}

Graph add_graph() {
  Graph g;
  g.inputs = {{"a", {DType::kFloat32, {4}}}, {"b", {DType::kFloat32, {4}}}};
  g.nodes.push_back(node("add", "Add", {"a", "b"}, {"c"}));
  g.outputs = {{"c", {}}};
  return g;
}

double small_op_ms(Engine& e, SessionId s) {
  const auto t0 = Clock::now();
  auto a = e.upload(s, HostTensor::from_vector<float>({1, 2, 3, 4}, {4}).view(), "");
  auto out = e.execute(s, add_graph(), {*a, *a}, "");
  auto r = e.read(s, out->at(0));
  if (!r.ok()) std::fprintf(stderr, "small op failed: %s\n", r.status().to_string().c_str());
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Stats {
  double median, worst;
};

Stats measure(Engine& e, SessionId b, int n) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) {
    v.push_back(small_op_ms(e, b));
    std::this_thread::sleep_for(std::chrono::milliseconds(7));  // land at varied loop phases
  }
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::max(1, std::atoi(argv[1])) : 50;
  setenv("TENSORD_CPU_DEVICES", "1", 1);
  std::printf("B's small op (Add float32[4], execute + read) behind A's endless Loop on one "
              "device, %d runs each\n", n);
  std::printf("%10s %14s %14s %14s %14s\n", "slice_ms", "idle_median", "idle_worst",
              "behind_median", "behind_worst");
  for (int slice_ms : {1, 5, 20, 50}) {
    EngineOptions o;
    o.time_slice = std::chrono::milliseconds(slice_ms);
    auto e = Engine::create(o);
    if (!e.ok()) return 1;
    Engine& engine = **e;
    const SessionId b = engine.open_session();
    const Stats idle = measure(engine, b, n);
    const SessionId a = engine.open_session();
    auto m = engine.upload(a, HostTensor::scalar<int64_t>(INT64_MAX).view(), "");
    auto c = engine.upload(a, HostTensor::scalar<bool>(true).view(), "");
    auto x = engine.upload(a, HostTensor::from_vector<float>({0.0f}, {1}).view(), "");
    auto y = engine.execute(a, loop_graph(), {*m, *c, *x}, "");
    if (!y.ok()) return 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const Stats behind = measure(engine, b, n);
    (void)engine.close_session(a);
    std::printf("%10d %14.3f %14.3f %14.3f %14.3f\n", slice_ms, idle.median, idle.worst,
                behind.median, behind.worst);
    const auto m2 = engine.metrics();
    std::printf("           (nested runs %lld, cancelled %lld)\n",
                static_cast<long long>(m2.tasks_nested), static_cast<long long>(m2.tasks_cancelled));
  }
  return 0;
}
