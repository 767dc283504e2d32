#include "core/graph_float64.h"

#include <map>
#include <memory>

#include "core/errors.h"
#include "core/graph_utils.h"
#include "core/op_registry.h"

namespace tensord {
namespace {

constexpr int64_t kFloat = static_cast<int64_t>(DType::kFloat32);
constexpr int64_t kDouble = static_cast<int64_t>(DType::kFloat64);

bool has_dtype_attr(const std::string& op) {
  return op == "RandomNormal" || op == "RandomUniform" || op == "RandomNormalLike" ||
         op == "RandomUniformLike" || op == "EyeLike" || op == "Multinomial" || op == "Bernoulli";
}

void widen_types(std::vector<ValueInfo>& values) {
  for (auto& v : values)
    if (v.type.dtype == DType::kFloat32) v.type.dtype = DType::kFloat64;
}

Graph widen_graph(const Graph& g);

// The node's attributes in float64 form.
void widen_attrs(Node& node) {
  if (node.op == "Cast")
    if (auto it = node.attrs.find("to"); it != node.attrs.end())
      if (const auto* to = it->second.get_if<int64_t>(); to && *to == kFloat)
        it->second = Attribute(kDouble);
  if (has_dtype_attr(node.op))
    if (auto it = node.attrs.find("dtype"); it != node.attrs.end())
      if (const auto* dt = it->second.get_if<int64_t>(); dt && *dt == kFloat)
        it->second = Attribute(kDouble);
  if (node.op == "Constant") {
    if (auto it = node.attrs.find("value_float"); it != node.attrs.end()) {
      if (const auto* f = it->second.get_if<float>()) {
        HostTensor v = HostTensor::scalar<double>(*f);
        node.attrs.erase(it);
        node.attrs["value"] = Attribute(std::move(v));
      }
    } else if (auto it2 = node.attrs.find("value_floats"); it2 != node.attrs.end()) {
      if (const auto* fs = it2->second.get_if<std::vector<float>>()) {
        std::vector<double> d(fs->begin(), fs->end());
        HostTensor v = HostTensor::from_vector<double>(d, {static_cast<int64_t>(d.size())});
        node.attrs.erase(it2);
        node.attrs["value"] = Attribute(std::move(v));
      }
    }
  }
  for (auto& [name, attr] : node.attrs) {
    if (const auto* t = attr.get_if<HostTensor>(); t && t->dtype() == DType::kFloat32) {
      attr = Attribute(widen_tensor(*t));
    } else if (const auto* sub = attr.get_if<std::shared_ptr<const Graph>>(); sub && *sub) {
      attr = Attribute(std::shared_ptr<const Graph>(std::make_shared<Graph>(widen_graph(**sub))));
    }
  }
}

Graph widen_graph(const Graph& g) {
  Graph out = g;
  widen_types(out.inputs);
  widen_types(out.outputs);
  for (auto& [name, t] : out.initializers) t = widen_tensor(t);
  for (auto& node : out.nodes) widen_attrs(node);
  return out;
}

}  // namespace

HostTensor widen_tensor(const HostTensor& t) {
  if (t.dtype() != DType::kFloat32) return t;
  HostTensor out(DType::kFloat64, t.shape());
  const float* src = t.data<float>();
  double* dst = out.mutable_data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) dst[i] = src[i];
  return out;
}

HostTensor narrow_tensor(const HostTensor& t) {
  if (t.dtype() != DType::kFloat64) return t;
  HostTensor out(DType::kFloat32, t.shape());
  const double* src = t.data<double>();
  float* dst = out.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) dst[i] = static_cast<float>(src[i]);
  return out;
}

Result<Graph> widen_to_float64(const Graph& graph, const std::vector<TensorType>& input_types,
                               const std::set<std::string>& keep_float32) {
  // Names for unnamed nodes, so that errors (and keep_float32) can name every node.
  Graph named = graph;
  std::set<std::string> names;
  for (const auto& n : named.nodes)
    if (!n.name.empty()) names.insert(n.name);
  for (size_t i = 0; i < named.nodes.size(); ++i) {
    Node& n = named.nodes[i];
    if (!n.name.empty()) continue;
    std::string name = "n" + std::to_string(i);
    while (names.count(name)) name += "_";
    names.insert(name);
    n.name = name;
  }
  for (const auto& k : keep_float32)
    if (!names.count(k))
      return errors::InvalidArgument("widen_to_float64: no node named '{}' to keep in float32", k);

  Graph out = widen_graph(named);
  if (keep_float32.empty()) return out;

  // Which values were float32 in the float32 graph.
  std::map<std::string, DType> dtypes;
  for (const auto& in : named.inputs) dtypes[in.name] = in.type.dtype;
  for (const auto& [name, t] : named.initializers) dtypes[name] = t.dtype();
  auto types = infer_graph(OpRegistry::global(), named, input_types);
  if (types.ok())
    for (const auto& [name, t] : types->values)
      if (t.ok()) dtypes[name] = t->dtype;
  auto is_float32 = [&](const std::string& v) {
    auto it = dtypes.find(v);
    return it != dtypes.end() && it->second == DType::kFloat32;
  };

  std::map<std::string, std::string> narrowed;  // widened value -> its float32 cast
  std::vector<Node> casts;
  std::set<std::string> taken;
  for (const auto& n : out.nodes) {
    for (const auto& v : n.inputs) taken.insert(v);
    for (const auto& v : n.outputs) taken.insert(v);
  }
  for (const auto& in : out.inputs) taken.insert(in.name);
  for (const auto& [name, t] : out.initializers) taken.insert(name);
  auto fresh = [&](std::string base) {
    while (taken.count(base)) base += "_";
    taken.insert(base);
    return base;
  };
  for (size_t i = 0; i < out.nodes.size(); ++i) {
    Node& n = out.nodes[i];
    if (!keep_float32.count(n.name)) continue;
    n.attrs = named.nodes[i].attrs;  // its float32 form
    for (auto& v : n.inputs) {
      if (v.empty() || !is_float32(v)) continue;
      auto it = narrowed.find(v);
      if (it == narrowed.end()) {
        Node cast;
        cast.op = "Cast";
        cast.name = fresh(v + "_to_float32");
        cast.inputs = {v};
        cast.outputs = {fresh(v + "_float32")};
        cast.attrs["to"] = Attribute(kFloat);
        it = narrowed.emplace(v, cast.outputs[0]).first;
        casts.push_back(std::move(cast));
      }
      v = it->second;
    }
    for (auto& v : n.outputs) {
      if (v.empty() || !is_float32(v)) continue;
      Node cast;
      cast.op = "Cast";
      cast.name = fresh(v + "_to_float64");
      cast.outputs = {v};
      v = fresh(v + "_float32");
      cast.inputs = {v};
      cast.attrs["to"] = Attribute(kDouble);
      casts.push_back(std::move(cast));
    }
  }
  for (auto& c : casts) out.nodes.push_back(std::move(c));
  return out;
}

std::string node_named_in(const std::string& message) {
  const std::string key = "node '";
  const size_t at = message.find(key);
  if (at == std::string::npos) return "";
  const size_t start = at + key.size();
  const size_t end = message.find('\'', start);
  if (end == std::string::npos) return "";
  return message.substr(start, end - start);
}

}  // namespace tensord
