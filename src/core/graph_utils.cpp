#include "core/graph_utils.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>

namespace tensord {

std::vector<std::string> implicit_inputs(const Node& node) {
  std::set<std::string> refs;
  for (const auto& [name, a] : node.attrs) {
    if (const auto* g = a.get_if<std::shared_ptr<const Graph>>()) {
      if (!*g) continue;
      for (auto& r : outer_references(**g)) refs.insert(std::move(r));
    }
  }
  return {refs.begin(), refs.end()};
}

std::vector<std::string> outer_references(const Graph& graph) {
  std::set<std::string> defined;
  for (const auto& in : graph.inputs) defined.insert(in.name);
  for (const auto& [name, t] : graph.initializers) defined.insert(name);
  for (const auto& n : graph.nodes)
    for (const auto& out : n.outputs) defined.insert(out);
  std::set<std::string> refs;
  for (const auto& n : graph.nodes) {
    for (const auto& in : n.inputs)
      if (!in.empty() && !defined.count(in)) refs.insert(in);
    for (const auto& r : implicit_inputs(n))
      if (!defined.count(r)) refs.insert(r);
  }
  for (const auto& out : graph.outputs)
    if (!defined.count(out.name)) refs.insert(out.name);
  return {refs.begin(), refs.end()};
}

Result<std::vector<size_t>> topological_order(const Graph& graph) {
  // Who produces each value: -1 for graph inputs and initializers.
  std::unordered_map<std::string, int64_t> producer;
  for (const auto& in : graph.inputs) {
    if (in.name.empty()) return errors::InvalidArgument("graph input with an empty name");
    if (!producer.emplace(in.name, -1).second)
      return errors::InvalidArgument("graph input '{}' is declared twice", in.name);
  }
  for (const auto& [name, t] : graph.initializers) producer.emplace(name, -1);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    for (const auto& out : graph.nodes[i].outputs) {
      if (out.empty()) continue;
      auto [it, inserted] = producer.emplace(out, static_cast<int64_t>(i));
      if (!inserted) {
        if (it->second < 0)
          return errors::InvalidArgument("{} writes '{}', which is a graph input or initializer",
                                         graph.nodes[i].label(), out);
        return errors::InvalidArgument("value '{}' is produced twice: by {} and {}", out,
                                       graph.nodes[static_cast<size_t>(it->second)].label(),
                                       graph.nodes[i].label());
      }
    }
  }
  // Kahn's algorithm, keeping the given order among ready nodes (stable, deterministic).
  const size_t n = graph.nodes.size();
  std::vector<int> pending(n, 0);
  std::vector<std::vector<size_t>> consumers(n);
  for (size_t i = 0; i < n; ++i) {
    std::set<int64_t> deps;
    std::vector<std::string> reads = graph.nodes[i].inputs;
    for (auto& r : implicit_inputs(graph.nodes[i])) reads.push_back(std::move(r));
    for (const auto& in : reads) {
      if (in.empty()) continue;
      auto it = producer.find(in);
      if (it == producer.end())
        return errors::InvalidArgument("{} reads '{}', which no node, initializer or graph "
                                       "input produces",
                                       graph.nodes[i].label(), in);
      if (it->second >= 0) deps.insert(it->second);
    }
    for (int64_t d : deps) {
      if (static_cast<size_t>(d) == i)
        return errors::InvalidArgument("{} reads its own output (cycle)", graph.nodes[i].label());
      consumers[static_cast<size_t>(d)].push_back(i);
    }
    pending[i] = static_cast<int>(deps.size());
  }
  std::vector<size_t> order;
  order.reserve(n);
  std::set<size_t> ready;
  for (size_t i = 0; i < n; ++i)
    if (pending[i] == 0) ready.insert(i);
  while (!ready.empty()) {
    size_t i = *ready.begin();
    ready.erase(ready.begin());
    order.push_back(i);
    for (size_t c : consumers[i])
      if (--pending[c] == 0) ready.insert(c);
  }
  if (order.size() != n) {
    for (size_t i = 0; i < n; ++i)
      if (pending[i] > 0)
        return errors::InvalidArgument("graph has a cycle through {}", graph.nodes[i].label());
  }
  for (const auto& out : graph.outputs) {
    if (!producer.count(out.name))
      return errors::InvalidArgument("graph output '{}' is not produced by any node", out.name);
  }
  return order;
}

namespace {

// Ops never folded: their results are not a function of their inputs.
bool is_nondeterministic(const std::string& op) {
  return op == "RandomNormal" || op == "RandomUniform" || op == "RandomNormalLike" ||
         op == "RandomUniformLike" || op == "Bernoulli" || op == "Multinomial" ||
         op == "Dropout";
}

bool has_subgraph(const Node& n) {
  for (const auto& [k, a] : n.attrs)
    if (a.kind() == Attribute::Kind::kGraph) return true;
  return false;
}

// Shape(x) and Size(x) are known once x's shape is, whatever its values.
std::optional<HostTensor> fold_shape_op(const Node& node, const TensorType& in) {
  if (!shape_is_static(in.shape)) return std::nullopt;
  if (node.op == "Size") return HostTensor::scalar<int64_t>(shape_numel(in.shape));
  if (node.op != "Shape") return std::nullopt;
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  int64_t start = 0, end = rank;
  auto get = [&](const char* name, int64_t& v) {
    auto it = node.attrs.find(name);
    if (it != node.attrs.end())
      if (const int64_t* i = it->second.get_if<int64_t>()) v = *i;
  };
  get("start", start);
  get("end", end);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  std::vector<int64_t> dims(in.shape.begin() + start, in.shape.begin() + std::max(start, end));
  return HostTensor::from_vector(dims, {static_cast<int64_t>(dims.size())});
}

constexpr int64_t kFoldLimit = 1 << 16;  // elements: any deterministic node this small folds

// Ops whose cost is linear in their inputs and outputs: folded at any size when they make no
// more elements than their constant inputs hold (weights stored as float16 and Cast, weight
// normalisation's Div/Mul/ReduceL2, DequantizeLinear, a Transpose of a weight). The output is
// then at most the size of weights the model already carries, and the executable's folding
// cap and the tenant's quota (CompileBudget) bound it. Contractions (MatMul, Conv, ...) and
// growing ops (Expand, Tile, ConstantOfShape, Range) fold only under kFoldLimit: their cost
// or their output is not bounded by the model's own size.
bool folds_at_any_size(const std::string& op) {
  static const std::set<std::string> ops = {
      "Cast", "CastLike", "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose",
      "Concat", "Split", "Slice", "Gather", "Neg", "Abs", "Sqrt", "Reciprocal", "Exp", "Log",
      "Relu", "Sigmoid", "Tanh", "Clip", "Add", "Sub", "Mul", "Div", "Pow", "Where", "Max",
      "Min", "DequantizeLinear", "ReduceL2", "ReduceSum", "ReduceMean", "ReduceMax",
      "ReduceMin", "ReduceSumSquare", "LpNormalization", "Softplus", "Sign", "Erf"};
  return ops.count(op) > 0;
}

}  // namespace

Result<GraphTypes> infer_graph(const OpRegistry& registry, const Graph& graph,
                               const std::vector<TensorType>& input_types,
                               const ConstantEvaluator& evaluator) {
  if (input_types.size() != graph.inputs.size())
    return errors::InvalidArgument("graph '{}' takes {} inputs, got {}", graph.name,
                                   graph.inputs.size(), input_types.size());
  GraphTypes result;
  TD_ASSIGN_OR_RETURN(result.order, topological_order(graph));
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    const ValueInfo& decl = graph.inputs[i];
    const TensorType& got = input_types[i];
    if (decl.type.defined() && decl.type.dtype != got.dtype)
      return errors::InvalidArgument("graph input '{}' expects {}, got {}", decl.name,
                                     dtype_name(decl.type.dtype), dtype_name(got.dtype));
    if (decl.type.defined() && !decl.type.shape.empty()) {
      bool match = decl.type.shape.size() == got.shape.size();
      for (size_t d = 0; match && d < got.shape.size(); ++d)
        match = decl.type.shape[d] < 0 || decl.type.shape[d] == got.shape[d];
      if (!match)
        return errors::InvalidArgument("graph input '{}' expects shape {}, got {}", decl.name,
                                       shape_to_string(decl.type.shape),
                                       shape_to_string(got.shape));
    }
    result.values.emplace(decl.name, got);
  }
  for (const auto& [name, t] : graph.initializers) {
    result.values.emplace(name, t.type());
    result.constants.emplace(name, t);
  }
  // Records the node's outputs as constants when they can be computed now.
  auto fold = [&](const Node& node, const InferenceContext& ctx,
                  const std::vector<TensorView>& inputs) {
    if (node.outputs.empty() || node.outputs[0].empty() || result.constants.count(node.outputs[0]))
      return;
    if ((node.op == "Shape" || node.op == "Size") && ctx.num_inputs() == 1) {
      if (auto t = fold_shape_op(node, ctx.input_type(0))) result.constants.emplace(node.outputs[0], *t);
      return;
    }
    if (!evaluator || is_nondeterministic(node.op) || has_subgraph(node)) return;
    int64_t in_elems = 0, out_elems = 0;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      if (!ctx.has_input(i)) continue;
      if (!ctx.input_value(i)) return;
      in_elems += shape_numel(ctx.input_shape(i));
    }
    for (const auto& t : ctx.output_types()) {
      if (!shape_is_static(t.shape)) return;
      out_elems += shape_numel(t.shape);
    }
    if (in_elems + out_elems > kFoldLimit &&
        !(folds_at_any_size(node.op) && out_elems <= in_elems))
      return;
    auto outs = evaluator(node, inputs);
    if (!outs.ok() || outs->size() != node.outputs.size()) return;  // left to run time
    for (size_t k = 0; k < node.outputs.size(); ++k)
      if (!node.outputs[k].empty()) result.constants.emplace(node.outputs[k], std::move((*outs)[k]));
  };
  for (size_t idx : result.order) {
    const Node& node = graph.nodes[idx];
    std::vector<TensorType> types;
    std::vector<const TensorView*> values;
    std::vector<TensorView> value_storage(node.inputs.size());
    Status poison;
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const std::string& in = node.inputs[k];
      if (in.empty()) {
        types.emplace_back();
        values.push_back(nullptr);
        continue;
      }
      const Result<TensorType>& t = result.values.at(in);
      if (!t.ok()) {
        poison = t.status();
        break;
      }
      types.push_back(*t);
      auto c = result.constants.find(in);
      if (c != result.constants.end()) {
        value_storage[k] = c->second.view();
        values.push_back(&value_storage[k]);
      } else {
        values.push_back(nullptr);
      }
    }
    if (poison.ok()) {
      InferenceContext ctx(node, std::move(types), std::move(values));
      poison = infer_node(registry, ctx);
      if (poison.ok()) {
        for (size_t k = 0; k < node.outputs.size(); ++k) {
          if (node.outputs[k].empty()) continue;
          result.values.insert_or_assign(node.outputs[k], ctx.output_types()[k]);
        }
        if (node.op == "Constant" && !node.outputs.empty()) {
          auto it = node.attrs.find("value");
          if (it != node.attrs.end())
            if (const HostTensor* t = it->second.get_if<HostTensor>())
              result.constants.emplace(node.outputs[0], *t);
        }
        fold(node, ctx, value_storage);
        continue;
      }
    }
    for (const auto& out : node.outputs)
      if (!out.empty()) result.values.insert_or_assign(out, poison);
  }
  return result;
}

}  // namespace tensord

namespace tensord {
namespace {

// A 64-bit content hash, eight bytes a step (a model's initializers are hashed on every
// execute() of its graph: byte-at-a-time FNV-1a cost ~15 ms per 14 MB), then the tail bytes.
uint64_t content_hash(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h ^ (h >> 32) ^ n;
}

// Every variable-length piece of the signature is written as <length>:<bytes> and every list
// as <count>#, so no choice of names, attribute strings or nesting can make two different
// graphs produce the same string (names may contain any byte, ';' and '=' included: a key
// built by joining them could be forged by a client to hit another graph's executable).
void put(std::string& s, std::string_view text) {
  s += std::to_string(text.size());
  s += ':';
  s += text;
}

void put_count(std::string& s, size_t n) {
  s += std::to_string(n);
  s += '#';
}

void append_tensor(std::string& s, const HostTensor& t) {
  put(s, t.type().to_string());
  // Two different hashes of the contents make an accidental collision negligible.
  s += std::to_string(content_hash(t.data(), t.nbytes(), 1469598103934665603ull));
  s += '/';
  s += std::to_string(content_hash(t.data(), t.nbytes(), 0xC2B2AE3D27D4EB4Full));
  s += ';';
}

void append_attr(std::string& s, const Attribute& a) {
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, int64_t> || std::is_same_v<V, float>) {
          put(s, fmt::format("{}", v));
        } else if constexpr (std::is_same_v<V, std::string>) {
          put(s, v);
        } else if constexpr (std::is_same_v<V, HostTensor>) {
          append_tensor(s, v);
        } else if constexpr (std::is_same_v<V, std::shared_ptr<const Graph>>) {
          put(s, v ? graph_signature(*v, {}) : std::string("null"));
        } else {
          put(s, fmt::format("{}", fmt::join(v, ",")));
        }
      },
      a.value());
}

}  // namespace

std::string graph_signature(const Graph& graph, const std::vector<TensorType>& input_types) {
  std::string s;
  s.reserve(256 + graph.nodes.size() * 64);
  s += "in:";
  put_count(s, graph.inputs.size());
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    put(s, graph.inputs[i].name);
    put(s, i < input_types.size() ? input_types[i].to_string() : graph.inputs[i].type.to_string());
  }
  s += "init:";
  put_count(s, graph.initializers.size());
  for (const auto& [name, t] : graph.initializers) {
    put(s, name);
    append_tensor(s, t);
  }
  s += "nodes:";
  put_count(s, graph.nodes.size());
  for (const Node& n : graph.nodes) {
    put(s, n.name);
    put(s, n.domain);
    put(s, n.op);
    put_count(s, n.inputs.size());
    for (const auto& in : n.inputs) put(s, in);
    put_count(s, n.outputs.size());
    for (const auto& out : n.outputs) put(s, out);
    put_count(s, n.attrs.size());
    for (const auto& [k, v] : n.attrs) {
      put(s, k);
      put(s, Attribute::kind_name(v.kind()));
      append_attr(s, v);
    }
  }
  s += "out:";
  put_count(s, graph.outputs.size());
  for (const auto& o : graph.outputs) put(s, o.name);
  return s;
}

}  // namespace tensord
