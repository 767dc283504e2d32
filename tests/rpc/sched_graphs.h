// Graphs of the scheduling tests and benchmark: a long Loop (x + 1 per iteration, the trip
// count a runtime input, so nothing is folded at compile time) and a small Add.
#pragma once

#include <memory>

#include "tensord/graph.h"

namespace tensord::testing {

inline Node sched_node(std::string name, std::string op, std::vector<std::string> in,
                       std::vector<std::string> out, AttributeMap attrs = {}) {
  Node n;
  n.name = std::move(name);
  n.op = std::move(op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

// Inputs M: int64[], cond: bool[], x: float32[1]; output y: float32[1] = x + M.
inline Graph long_loop_graph() {
  auto body = std::make_shared<Graph>();
  body->name = "body";
  body->inputs = {{"i", {DType::kInt64, {}}}, {"c", {DType::kBool, {}}},
                  {"x", {DType::kFloat32, {1}}}};
  body->initializers.emplace("one", HostTensor::from_vector<float>({1.0f}, {1}));
  body->nodes.push_back(sched_node("keep", "Identity", {"c"}, {"c_out"}));
  body->nodes.push_back(sched_node("inc", "Add", {"x", "one"}, {"x_out"}));
  body->outputs = {{"c_out", {}}, {"x_out", {}}};
  Graph g;
  g.name = "long_loop";
  g.inputs = {{"M", {DType::kInt64, {}}}, {"cond", {DType::kBool, {}}},
              {"x", {DType::kFloat32, {1}}}};
  g.nodes.push_back(sched_node("loop", "Loop", {"M", "cond", "x"}, {"y_loop"},
                               {{"body", Attribute(std::shared_ptr<const Graph>(body))}}));
  // A Loop's outputs have no static shape: reshaped to float32[1], the result is small and
  // known at compile time, so the broker answers it inline (Execute waits for it).
  g.initializers.emplace("shape1", HostTensor::from_vector<int64_t>({1}, {1}));
  g.nodes.push_back(sched_node("fix", "Reshape", {"y_loop", "shape1"}, {"y"}));
  g.outputs = {{"y", {}}};
  return g;
}

// a + b over float32[4].
inline Graph small_add_graph() {
  Graph g;
  g.name = "add";
  g.inputs = {{"a", {DType::kFloat32, {4}}}, {"b", {DType::kFloat32, {4}}}};
  g.nodes.push_back(sched_node("add", "Add", {"a", "b"}, {"c"}));
  g.outputs = {{"c", {}}};
  return g;
}

}  // namespace tensord::testing
