#include "models/graph_builder.h"

#include <cmath>
#include <numbers>
#include <utility>

#include "core/errors.h"
#include "core/op_registry.h"

namespace tensord::models {

// ---- Rng ----

double Rng::uniform() {
  // 53 random bits from two 32-bit draws: every double in [0, 1) on a 2^-53 grid.
  const uint64_t hi = engine_() >> 5;  // 27 bits
  const uint64_t lo = engine_() >> 6;  // 26 bits
  return static_cast<double>((hi << 26) | lo) * (1.0 / 9007199254740992.0);
}

double Rng::uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

double Rng::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * std::numbers::pi * u2;
  spare_ = r * std::sin(theta);
  has_spare_ = true;
  return r * std::cos(theta);
}

int64_t Rng::uniform_int(int64_t lo, int64_t hi) {
  const double span = static_cast<double>(hi - lo + 1);
  const int64_t v = lo + static_cast<int64_t>(uniform() * span);
  return v > hi ? hi : v;
}

// ---- GraphBuilder ----

GraphBuilder::GraphBuilder(std::string graph_name, uint32_t seed) : rng_(seed) {
  graph_.name = std::move(graph_name);
}

void GraphBuilder::fail(Status status) {
  if (status_.ok()) status_ = std::move(status);
}

bool GraphBuilder::name_taken(const std::string& name) const {
  return types_.count(name) > 0 || node_names_.count(name) > 0;
}

std::string GraphBuilder::unique_name(const std::string& hint) {
  if (!name_taken(hint)) return hint;
  for (int i = 1;; ++i) {
    std::string candidate = hint + "_" + std::to_string(i);
    if (!name_taken(candidate)) return candidate;
  }
}

std::string GraphBuilder::input(const std::string& name, DType dtype, Shape shape) {
  if (name_taken(name)) {
    fail(errors::InvalidArgument("graph '{}': input name '{}' is already used", graph_.name, name));
    return name;
  }
  TensorType type{dtype, std::move(shape)};
  graph_.inputs.push_back({name, type});
  types_[name] = type;
  return name;
}

std::string GraphBuilder::add_initializer(const std::string& name, HostTensor value) {
  if (name_taken(name)) {
    fail(errors::InvalidArgument("graph '{}': initializer name '{}' is already used", graph_.name,
                                 name));
    return name;
  }
  types_[name] = value.type();
  graph_.initializers.emplace(name, std::move(value));
  return name;
}

std::string GraphBuilder::initializer(const std::string& name, HostTensor value) {
  return add_initializer(name, std::move(value));
}

std::string GraphBuilder::normal(const std::string& name, Shape shape, double std, double mean) {
  HostTensor t(DType::kFloat32, std::move(shape));
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(mean + std * rng_.normal());
  return add_initializer(name, std::move(t));
}

std::string GraphBuilder::uniform(const std::string& name, Shape shape, double lo, double hi) {
  HostTensor t(DType::kFloat32, std::move(shape));
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(rng_.uniform(lo, hi));
  return add_initializer(name, std::move(t));
}

std::string GraphBuilder::fill(const std::string& name, Shape shape, float value) {
  HostTensor t(DType::kFloat32, std::move(shape));
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = value;
  return add_initializer(name, std::move(t));
}

std::string GraphBuilder::scalar_constant(float value) {
  const std::string name = fmt::format("const_f32_{}", value);
  if (graph_.initializers.count(name)) return name;
  return add_initializer(name, HostTensor::scalar<float>(value));
}

TensorType GraphBuilder::type_of(const std::string& value) const {
  auto it = types_.find(value);
  return it == types_.end() ? TensorType{} : it->second;
}

std::vector<std::string> GraphBuilder::node(const std::string& op, const std::string& name_hint,
                                            std::vector<std::string> inputs, AttributeMap attrs,
                                            int num_outputs,
                                            const std::vector<bool>& skip_outputs) {
  Node n;
  n.name = unique_name(name_hint);
  n.op = op;
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  for (int i = 0; i < num_outputs; ++i) {
    const bool skip = static_cast<size_t>(i) < skip_outputs.size() && skip_outputs[i];
    n.outputs.push_back(skip ? "" : (i == 0 ? n.name : fmt::format("{}:{}", n.name, i)));
  }
  node_names_.insert(n.name);
  if (!ok()) return n.outputs;  // an earlier error: keep names flowing, add nothing

  std::vector<TensorType> in_types;
  std::vector<const TensorView*> in_values;
  std::vector<TensorView> views(n.inputs.size());
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const std::string& v = n.inputs[i];
    if (v.empty()) {
      in_types.emplace_back();
      in_values.push_back(nullptr);
      continue;
    }
    auto it = types_.find(v);
    if (it == types_.end()) {
      fail(errors::InvalidArgument("graph '{}': {} reads value '{}', which nothing defines",
                                   graph_.name, n.label(), v));
      return n.outputs;
    }
    in_types.push_back(it->second);
    auto init = graph_.initializers.find(v);
    if (init != graph_.initializers.end()) {
      views[i] = init->second.view();
      in_values.push_back(&views[i]);
    } else {
      in_values.push_back(nullptr);
    }
  }
  InferenceContext ctx(n, std::move(in_types), std::move(in_values));
  Status s = infer_node(OpRegistry::global(), ctx);
  if (!s.ok()) {
    fail(s.with_context(fmt::format("building graph '{}'", graph_.name)));
    return n.outputs;
  }
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (n.outputs[i].empty()) continue;
    types_[n.outputs[i]] = ctx.output_types().at(i);
  }
  std::vector<std::string> outputs = n.outputs;
  graph_.nodes.push_back(std::move(n));
  return outputs;
}

std::string GraphBuilder::op(const std::string& op, const std::string& name_hint,
                             std::vector<std::string> inputs, AttributeMap attrs) {
  return node(op, name_hint, std::move(inputs), std::move(attrs), 1).front();
}

// ---- blocks ----

std::string GraphBuilder::conv(const std::string& x, const std::string& name,
                               const ConvSpec& spec) {
  const Shape in = shape_of(x);
  if (!ok()) return name;
  if (in.size() != 4 || spec.group <= 0 || in[1] % spec.group != 0 ||
      spec.out_channels % spec.group != 0) {
    fail(errors::InvalidArgument(
        "graph '{}': conv '{}' wants an NCHW input with channels divisible by group {} and {} "
        "output channels divisible by it; input is {}",
        graph_.name, name, spec.group, spec.out_channels, shape_to_string(in)));
    return name;
  }
  const int64_t in_per_group = in[1] / spec.group;
  const int64_t fan_in = in_per_group * spec.kernel * spec.kernel;
  std::vector<std::string> inputs = {
      x, normal(name + ".weight", {spec.out_channels, in_per_group, spec.kernel, spec.kernel},
                std::sqrt(spec.gain / static_cast<double>(fan_in)))};
  if (spec.bias) inputs.push_back(normal(name + ".bias", {spec.out_channels}, 0.01));
  std::vector<int64_t> pads = spec.pads;
  if (pads.empty()) pads.assign(4, spec.kernel / 2);
  AttributeMap attrs = {{"kernel_shape", std::vector<int64_t>{spec.kernel, spec.kernel}},
                        {"strides", std::vector<int64_t>{spec.stride, spec.stride}},
                        {"pads", pads},
                        {"dilations", std::vector<int64_t>{1, 1}},
                        {"group", spec.group}};
  return op("Conv", name, std::move(inputs), std::move(attrs));
}

std::string GraphBuilder::batch_norm(const std::string& x, const std::string& name, float epsilon,
                                     double gamma) {
  const Shape in = shape_of(x);
  if (!ok()) return name;
  if (in.size() < 2 || in[1] < 0) {
    fail(errors::InvalidArgument("graph '{}': batch norm '{}' wants an [N, C, ...] input, got {}",
                                 graph_.name, name, shape_to_string(in)));
    return name;
  }
  const int64_t c = in[1];
  std::vector<std::string> inputs = {x, uniform(name + ".weight", {c}, 0.8 * gamma, 1.2 * gamma),
                                     normal(name + ".bias", {c}, 0.05),
                                     normal(name + ".running_mean", {c}, 0.1),
                                     uniform(name + ".running_var", {c}, 0.5, 1.5)};
  return op("BatchNormalization", name, std::move(inputs), {{"epsilon", epsilon}});
}

std::string GraphBuilder::relu(const std::string& x, const std::string& name) {
  return op("Relu", name, {x});
}

std::string GraphBuilder::relu6(const std::string& x, const std::string& name) {
  return op("Clip", name, {x, scalar_constant(0.f), scalar_constant(6.f)});
}

std::string GraphBuilder::activation(const std::string& x, const std::string& name,
                                     Activation act) {
  switch (act) {
    case Activation::kRelu:
      return relu(x, name);
    case Activation::kRelu6:
      return relu6(x, name);
    case Activation::kNone:
      break;
  }
  return x;
}

std::string GraphBuilder::conv_bn_act(const std::string& x, const std::string& conv_name,
                                      const std::string& bn_name, const std::string& act_name,
                                      const ConvSpec& spec, float bn_epsilon, Activation act,
                                      double bn_gamma) {
  std::string y = conv(x, conv_name, spec);
  y = batch_norm(y, bn_name, bn_epsilon, bn_gamma);
  return activation(y, act_name, act);
}

std::string GraphBuilder::linear(const std::string& x, const std::string& name,
                                 int64_t out_features, double gain) {
  const Shape in = shape_of(x);
  if (!ok()) return name;
  if (in.size() != 2 || in[1] <= 0) {
    fail(errors::InvalidArgument("graph '{}': linear '{}' wants an [N, features] input, got {}",
                                 graph_.name, name, shape_to_string(in)));
    return name;
  }
  const std::string w =
      normal(name + ".weight", {out_features, in[1]}, std::sqrt(gain / static_cast<double>(in[1])));
  const std::string b = normal(name + ".bias", {out_features}, 0.01);
  return op("Gemm", name, {x, w, b}, {{"transB", int64_t{1}}});
}

// ---- finishing ----

void GraphBuilder::output(const std::string& value, const std::string& name) {
  if (!ok()) return;
  auto it = types_.find(value);
  if (it == types_.end()) {
    fail(errors::InvalidArgument("graph '{}': output '{}' names value '{}', which nothing defines",
                                 graph_.name, name, value));
    return;
  }
  const TensorType type = it->second;
  if (value != name) {
    if (name_taken(name) || graph_.initializers.count(value) || [&] {
          for (const auto& in : graph_.inputs)
            if (in.name == value) return true;
          return false;
        }()) {
      fail(errors::InvalidArgument(
          "graph '{}': cannot rename value '{}' to output '{}' (name taken, or not a node output)",
          graph_.name, value, name));
      return;
    }
    for (Node& n : graph_.nodes) {
      for (std::string& v : n.inputs)
        if (v == value) v = name;
      for (std::string& v : n.outputs)
        if (v == value) v = name;
    }
    for (ValueInfo& o : graph_.outputs)
      if (o.name == value) o.name = name;
    types_.erase(it);
    types_[name] = type;
  }
  graph_.outputs.push_back({name, type});
}

Result<Graph> GraphBuilder::finish() {
  if (!ok()) return status_;
  if (graph_.outputs.empty())
    return errors::InvalidArgument("graph '{}' has no outputs", graph_.name);
  Graph g = std::move(graph_);
  graph_ = Graph{};
  types_.clear();
  node_names_.clear();
  return g;
}

}  // namespace tensord::models
