// Whole-graph checks and inference shared by every backend's compile step.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/op_registry.h"
#include "tensord/graph.h"

namespace tensord {

// Names a graph reads but does not define (its inputs, initializers and node outputs), looking
// into nested subgraphs too: the values a subgraph takes from its enclosing scopes. Sorted.
std::vector<std::string> outer_references(const Graph& graph);
// The outer references of every subgraph attribute of `node`. Sorted, unique.
std::vector<std::string> implicit_inputs(const Node& node);

// Node indices in an order where every node comes after the producers of its inputs.
// Errors: a cycle (names a node on it), an input name no node/initializer/graph input
// produces (names the node and the value), a value produced twice, a graph output nobody
// produces.
Result<std::vector<size_t>> topological_order(const Graph& graph);

// Types of every value in a graph, given concrete input types.
struct GraphTypes {
  // Per value name: its type, or the error that stopped it (the failing node's, carried to
  // everything downstream — "poison").
  std::map<std::string, Result<TensorType>> values;
  // Known constant values by name: initializers and Constant nodes' values.
  std::map<std::string, HostTensor> constants;
  std::vector<size_t> order;  // topological order used
};

// Computes a node whose inputs are all known constants (a backend's reference kernels);
// lets infer_graph fold shape computations (Shape -> Gather -> Concat -> Reshape ...) at
// compile time, when the input types are concrete.
using ConstantEvaluator = std::function<Result<std::vector<HostTensor>>(
    const Node& node, const std::vector<TensorView>& inputs)>;

// Runs schema inference over the graph. Structural errors (cycles, dangling names, arity of
// graph inputs) fail the whole call; a node whose inference fails poisons only its
// downstream values. Shape and Size of inputs with static shapes are always folded into
// constants; with an evaluator, so is every deterministic node whose inputs are all constants
// (constant folding of initializer-only subgraphs) when it is small (64k elements in and out)
// or a linear-cost op that makes no more elements than it reads (a float16 weight's Cast, a
// weight normalisation's Div: graph_utils.cpp's folds_at_any_size).
Result<GraphTypes> infer_graph(const OpRegistry& registry, const Graph& graph,
                               const std::vector<TensorType>& input_types,
                               const ConstantEvaluator& evaluator = nullptr);

}  // namespace tensord

namespace tensord {

// A canonical string for a graph and its input types: equal strings mean the same
// computation (ops, attributes, wiring, names, initializer contents, input dtypes and
// shapes). The executable cache's key.
std::string graph_signature(const Graph& graph, const std::vector<TensorType>& input_types);

}  // namespace tensord
