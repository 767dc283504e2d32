#include "engine/canonicalize.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "core/graph_utils.h"
#include "core/op_registry.h"

namespace tensord {
namespace {

// Producers and readers of every value of the top-level graph (a subgraph's reads of an
// outer value count as reads by the node that holds the subgraph), and the graph's outputs.
class Index {
 public:
  explicit Index(const Graph& g) : g_(g) {
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      for (const auto& o : g.nodes[i].outputs)
        if (!o.empty()) producer_[o] = i;
      for (const auto& in : g.nodes[i].inputs)
        if (!in.empty()) readers_[in].push_back(i);
      for (const auto& in : implicit_inputs(g.nodes[i])) readers_[in].push_back(i);
    }
    for (const auto& o : g.outputs) outputs_.insert(o.name);
  }
  // The node producing `v` (not yet removed), or null.
  const Node* producer(const std::string& v, const std::vector<bool>& dead) const {
    auto it = producer_.find(v);
    return it == producer_.end() || dead[it->second] ? nullptr : &g_.nodes[it->second];
  }
  size_t producer_index(const std::string& v) const { return producer_.at(v); }
  std::optional<size_t> producer_of(const std::string& v) const {
    auto it = producer_.find(v);
    return it == producer_.end() ? std::nullopt : std::optional<size_t>(it->second);
  }
  const std::vector<size_t>& readers(const std::string& v) const {
    static const std::vector<size_t> none;
    auto it = readers_.find(v);
    return it == readers_.end() ? none : it->second;
  }
  bool is_output(const std::string& v) const { return outputs_.count(v) > 0; }
  // `v` is read by exactly the nodes `who` (as a multiset: a node reading it twice is listed
  // twice) and is not a graph output.
  bool read_only_by(const std::string& v, std::vector<size_t> who) const {
    if (is_output(v)) return false;
    std::vector<size_t> r = readers(v);
    std::sort(r.begin(), r.end());
    std::sort(who.begin(), who.end());
    return r == who;
  }

 private:
  const Graph& g_;
  std::map<std::string, size_t> producer_;
  std::map<std::string, std::vector<size_t>> readers_;
  std::set<std::string> outputs_;
};

// Values folded by the caller (canonicalize's `known`), for the current pass.
thread_local const std::map<std::string, HostTensor>* t_known = nullptr;

// A constant value of the graph: an initializer, a Constant node's output, or a value the
// caller folded.
const HostTensor* constant_of(const Graph& g, const Index& ix, const std::vector<bool>& dead,
                              const std::string& v, HostTensor* scratch) {
  if (auto it = g.initializers.find(v); it != g.initializers.end()) return &it->second;
  if (t_known)
    if (auto it = t_known->find(v); it != t_known->end()) return &it->second;
  const Node* p = ix.producer(v, dead);
  if (!p || p->op != "Constant" || !p->domain.empty()) return nullptr;
  if (auto a = p->attrs.find("value"); a != p->attrs.end())
    if (const auto* t = a->second.get_if<HostTensor>()) return t;
  if (auto a = p->attrs.find("value_float"); a != p->attrs.end())
    if (const auto* f = a->second.get_if<float>()) {
      *scratch = HostTensor::scalar<float>(*f);
      return scratch;
    }
  return nullptr;
}

bool is_float(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 ||
         t == DType::kBFloat16;
}

// The single value of a one-element floating constant.
std::optional<double> scalar_of(const Graph& g, const Index& ix, const std::vector<bool>& dead,
                                const std::string& v) {
  HostTensor scratch;
  const HostTensor* t = constant_of(g, ix, dead, v, &scratch);
  if (!t || t->numel() != 1 || !is_float(t->dtype())) return std::nullopt;
  return t->to_double_vector().at(0);
}

float float_attr(const Node& n, const char* name, float fallback) {
  auto it = n.attrs.find(name);
  if (it == n.attrs.end()) return fallback;
  if (const auto* f = it->second.get_if<float>()) return *f;
  return std::nanf("");
}

int64_t int_attr(const Node& n, const char* name, int64_t fallback) {
  auto it = n.attrs.find(name);
  if (it == n.attrs.end()) return fallback;
  if (const auto* i = it->second.get_if<int64_t>()) return *i;
  return fallback;
}

bool plain(const Node& n, const char* op, size_t inputs) {
  return n.op == op && n.domain.empty() && n.inputs.size() == inputs && n.outputs.size() == 1;
}

void erase_dead(Graph& g, const std::vector<bool>& dead) {
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!dead[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
}

// A value name not used in the graph yet.
std::string fresh_name(const Graph& g, const std::string& base, int* counter) {
  std::set<std::string> used;
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs) used.insert(o);
  for (;;) {
    std::string name = base + "_canonical" + std::to_string((*counter)++);
    if (!used.count(name) && !g.initializers.count(name)) return name;
  }
}

// A node of the standard domain with one output, named after it.
Node simple_node(const char* op, std::vector<std::string> inputs, const std::string& output,
                 AttributeMap attrs = {}) {
  Node n;
  n.name = output;
  n.op = op;
  n.inputs = std::move(inputs);
  n.outputs = {output};
  n.attrs = std::move(attrs);
  return n;
}

// ---- DequantizeLinear(QuantizeLinear(x, s, z), s, z) -> Mul(Clip(Round(Div(x, s))), s) ----
// A per-tensor quantize-dequantize pair (QDQ models: ONNX Runtime's quantizer writes one on
// every activation) is x rounded to the grid of the quantized type, in float:
// clip(round(x / s), qmin - z, qmax - z) * s, exactly what the two ops compute (the integer q
// never leaves the pair). As standard float ops it runs inside a oneDNN region or an
// element-wise program instead of as two reference kernels that split the region.
int qdq_pass(Graph& g) {
  Index ix(g);
  std::vector<bool> dead(g.nodes.size(), false);
  int count = 0, counter = 0;
  std::vector<Node> added;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& dq = g.nodes[i];
    if (dead[i] || dq.op != "DequantizeLinear" || !dq.domain.empty() || dq.inputs.size() < 2 ||
        dq.outputs.size() != 1)
      continue;
    const Node* q = ix.producer(dq.inputs[0], dead);
    if (!q || q->op != "QuantizeLinear" || !q->domain.empty() || q->inputs.size() < 2 ||
        q->outputs.size() != 1 || !ix.read_only_by(dq.inputs[0], {i}))
      continue;
    if (q->attrs.count("output_dtype") || q->attrs.count("block_size") ||
        dq.attrs.count("block_size"))
      continue;
    HostTensor scratch[4];
    const HostTensor* s1 = constant_of(g, ix, dead, q->inputs[1], &scratch[0]);
    const HostTensor* s2 = constant_of(g, ix, dead, dq.inputs[1], &scratch[1]);
    if (!s1 || !s2 || s1->dtype() != DType::kFloat32 || s2->dtype() != DType::kFloat32 ||
        s1->numel() != 1 || s2->numel() != 1 || s1->data<float>()[0] != s2->data<float>()[0])
      continue;
    const float scale = s1->data<float>()[0];
    if (!(scale > 0) || !std::isfinite(scale)) continue;
    // The zero points: absent (uint8 0) or one-value constants of the same type and value.
    const HostTensor* z1 = q->inputs.size() > 2 && !q->inputs[2].empty()
                               ? constant_of(g, ix, dead, q->inputs[2], &scratch[2]) : nullptr;
    const HostTensor* z2 = dq.inputs.size() > 2 && !dq.inputs[2].empty()
                               ? constant_of(g, ix, dead, dq.inputs[2], &scratch[3]) : nullptr;
    if ((q->inputs.size() > 2 && !q->inputs[2].empty() && !z1) ||
        (dq.inputs.size() > 2 && !dq.inputs[2].empty() && !z2))
      continue;
    const DType zt = z1 ? z1->dtype() : DType::kUInt8;
    if ((z2 ? z2->dtype() : DType::kUInt8) != zt || (z1 && z1->numel() != 1) || (z2 && z2->numel() != 1))
      continue;
    double lo, hi;
    if (zt == DType::kUInt8) { lo = 0; hi = 255; }
    else if (zt == DType::kInt8) { lo = -128; hi = 127; }
    else if (zt == DType::kUInt16) { lo = 0; hi = 65535; }
    else if (zt == DType::kInt16) { lo = -32768; hi = 32767; }
    else continue;
    const double zp1 = z1 ? z1->to_double_vector()[0] : 0.0, zp2 = z2 ? z2->to_double_vector()[0] : 0.0;
    if (zp1 != zp2) continue;
    const std::string base = dq.outputs[0];
    const std::string sname = fresh_name(g, base + "_scale", &counter);
    const std::string lname = fresh_name(g, base + "_lo", &counter);
    const std::string hname = fresh_name(g, base + "_hi", &counter);
    g.initializers[sname] = HostTensor::scalar<float>(scale);
    g.initializers[lname] = HostTensor::scalar<float>(static_cast<float>(lo - zp1));
    g.initializers[hname] = HostTensor::scalar<float>(static_cast<float>(hi - zp1));
    const std::string divided = fresh_name(g, base + "_div", &counter);
    const std::string rounded = fresh_name(g, base + "_round", &counter);
    const std::string clipped = fresh_name(g, base + "_clip", &counter);
    added.push_back(simple_node("Div", {q->inputs[0], sname}, divided));
    added.push_back(simple_node("Round", {divided}, rounded));
    added.push_back(simple_node("Clip", {rounded, lname, hname}, clipped));
    const std::string out = dq.outputs[0];
    dead[ix.producer_index(dq.inputs[0])] = true;
    dq.op = "Mul";
    dq.inputs = {clipped, sname};
    dq.attrs.clear();
    dq.outputs = {out};
    ++count;
  }
  erase_dead(g, dead);
  for (auto& n : added) g.nodes.push_back(std::move(n));
  return count;
}

// ---- Mul(x, HardSigmoid(x; 1/6, 0.5)) -> HardSwish(x) ----
int hardswish_pass(Graph& g) {
  Index ix(g);
  std::vector<bool> dead(g.nodes.size(), false);
  int count = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& mul = g.nodes[i];
    if (dead[i] || !plain(mul, "Mul", 2)) continue;
    for (int k = 0; k < 2; ++k) {
      const std::string& s = mul.inputs[static_cast<size_t>(k)];
      const std::string& x = mul.inputs[static_cast<size_t>(1 - k)];
      const Node* hs = ix.producer(s, dead);
      if (!hs || !plain(*hs, "HardSigmoid", 1) || hs->inputs[0] != x) continue;
      if (std::fabs(float_attr(*hs, "alpha", 0.2f) - 1.0f / 6) > 1e-6f ||
          std::fabs(float_attr(*hs, "beta", 0.5f) - 0.5f) > 1e-6f)
        continue;
      const size_t h = ix.producer_index(s);
      if (ix.read_only_by(s, {i})) dead[h] = true;  // else it stays for its other readers
      const std::string in = x;
      mul.op = "HardSwish";
      mul.inputs = {in};
      mul.attrs.clear();
      ++count;
      break;
    }
  }
  erase_dead(g, dead);
  return count;
}

// ---- Mul(Sigmoid(x), x) -> Mul(x, Sigmoid(x)) with a Sigmoid of its own ----
int silu_pass(Graph& g) {
  Index ix(g);
  std::vector<bool> dead(g.nodes.size(), false);
  std::vector<std::pair<size_t, Node>> added;  // (insert before node i, the new Sigmoid)
  int counter = 0, count = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& mul = g.nodes[i];
    if (!plain(mul, "Mul", 2) || mul.inputs[0] == mul.inputs[1]) continue;
    for (int k = 0; k < 2; ++k) {
      const std::string s = mul.inputs[static_cast<size_t>(k)];
      const std::string x = mul.inputs[static_cast<size_t>(1 - k)];
      const Node* sig = ix.producer(s, dead);
      if (!sig || !plain(*sig, "Sigmoid", 1) || sig->inputs[0] != x) continue;
      const bool own = ix.read_only_by(s, {i});
      if (own && k == 1) break;  // already the canonical form
      // A Sigmoid the graph also returns is computed anyway: a copy would be one more kernel
      // (the Mul's swish cannot fuse into a producer the output reads too).
      if (!own && std::any_of(g.outputs.begin(), g.outputs.end(),
                              [&](const auto& o) { return o.name == s; }))
        break;
      std::string s2 = s;
      if (!own) {  // the Sigmoid is shared: this Mul gets one of its own
        Node copy = *sig;
        s2 = fresh_name(g, s, &counter);
        copy.name = sig->name.empty() ? "" : sig->name + "_silu" + std::to_string(counter);
        copy.outputs = {s2};
        added.emplace_back(i, std::move(copy));
      }
      mul.inputs = {x, s2};
      ++count;
      break;
    }
  }
  for (auto it = added.rbegin(); it != added.rend(); ++it)
    g.nodes.insert(g.nodes.begin() + static_cast<std::ptrdiff_t>(it->first), std::move(it->second));
  return count;
}

// ---- decomposed LayerNorm -> LayerNormalization ----
bool last_axis_mean(const Node& n) {
  if (!plain(n, "ReduceMean", 1) || int_attr(n, "keepdims", 1) != 1) return false;
  auto it = n.attrs.find("axes");
  if (it == n.attrs.end()) return false;
  const auto* axes = it->second.get_if<std::vector<int64_t>>();
  return axes && axes->size() == 1 && (*axes)[0] == -1;
}

int layernorm_pass(Graph& g) {
  Index ix(g);
  std::vector<bool> dead(g.nodes.size(), false);
  int count = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& div = g.nodes[i];
    if (dead[i] || !plain(div, "Div", 2)) continue;
    const std::string d = div.inputs[0];
    const Node* sqrt = ix.producer(div.inputs[1], dead);
    if (!sqrt || !plain(*sqrt, "Sqrt", 1)) continue;
    const Node* add = ix.producer(sqrt->inputs[0], dead);
    if (!add || !plain(*add, "Add", 2)) continue;
    std::optional<double> eps;
    std::string v;
    for (int k = 0; k < 2 && !eps; ++k)
      if ((eps = scalar_of(g, ix, dead, add->inputs[static_cast<size_t>(k)])))
        v = add->inputs[static_cast<size_t>(1 - k)];
    if (!eps || !(*eps >= 0)) continue;
    const Node* var = ix.producer(v, dead);
    if (!var || !last_axis_mean(*var)) continue;
    const Node* sq = ix.producer(var->inputs[0], dead);
    if (!sq) continue;
    const bool pow2 = plain(*sq, "Pow", 2) && sq->inputs[0] == d &&
                      scalar_of(g, ix, dead, sq->inputs[1]) == 2.0;
    const bool dd = plain(*sq, "Mul", 2) && sq->inputs[0] == d && sq->inputs[1] == d;
    if (!pow2 && !dd) continue;
    const Node* sub = ix.producer(d, dead);
    if (!sub || !plain(*sub, "Sub", 2)) continue;
    const std::string x = sub->inputs[0];
    const Node* mean = ix.producer(sub->inputs[1], dead);
    if (!mean || !last_axis_mean(*mean) || mean->inputs[0] != x) continue;
    // Every intermediate read only inside the pattern.
    const size_t i_sqrt = ix.producer_index(div.inputs[1]),
                 i_add = ix.producer_index(sqrt->inputs[0]), i_var = ix.producer_index(v), i_sq = ix.producer_index(var->inputs[0]),
                 i_sub = ix.producer_index(d), i_mean = ix.producer_index(sub->inputs[1]);
    std::vector<size_t> d_readers = {i, i_sq};
    if (dd) d_readers.push_back(i_sq);
    if (!ix.read_only_by(sub->inputs[1], {i_sub}) || !ix.read_only_by(d, d_readers) ||
        !ix.read_only_by(sq->outputs[0], {i_var}) || !ix.read_only_by(v, {i_add}) ||
        !ix.read_only_by(add->outputs[0], {i_sqrt}) || !ix.read_only_by(sqrt->outputs[0], {i}))
      continue;
    // The scale (required: LayerNormalization's Scale) and the optional bias: 1-D float
    // constants of more than one element (a 1-element one could broadcast over any width).
    auto vector_const = [&](const std::string& name) {
      HostTensor scratch;
      const HostTensor* t = constant_of(g, ix, dead, name, &scratch);
      return t && t->shape().size() == 1 && t->numel() > 1 && is_float(t->dtype()) &&
             g.initializers.count(name);
    };
    // An initializer behind Identity nodes (PyTorch's export replaces initializers equal to
    // an earlier one, as every fresh LayerNorm's weights are, by an Identity of that one).
    auto through_identity = [&](std::string name) {
      for (int hops = 0; hops < 8 && !g.initializers.count(name); ++hops) {
        const Node* p = ix.producer(name, dead);
        if (!p || !plain(*p, "Identity", 1)) break;
        name = p->inputs[0];
      }
      return name;
    };
    const auto& r_div = ix.readers(div.outputs[0]);
    if (r_div.size() != 1 || ix.is_output(div.outputs[0])) continue;
    const size_t i_scale = r_div[0];
    const Node& smul = g.nodes[i_scale];
    if (dead[i_scale] || !plain(smul, "Mul", 2)) continue;
    const std::string gamma =
        through_identity(smul.inputs[0] == div.outputs[0] ? smul.inputs[1] : smul.inputs[0]);
    if (!vector_const(gamma)) continue;
    size_t last = i_scale;
    std::string beta;
    const auto& r_mul = ix.readers(smul.outputs[0]);
    if (r_mul.size() == 1 && !ix.is_output(smul.outputs[0]) && !dead[r_mul[0]] &&
        plain(g.nodes[r_mul[0]], "Add", 2)) {
      const Node& badd = g.nodes[r_mul[0]];
      const std::string b =
          through_identity(badd.inputs[0] == smul.outputs[0] ? badd.inputs[1] : badd.inputs[0]);
      if (vector_const(b) && g.initializers.at(b).numel() == g.initializers.at(gamma).numel() &&
          g.initializers.at(b).dtype() == g.initializers.at(gamma).dtype()) {
        beta = b;
        last = r_mul[0];
      }
    }
    Node ln;
    ln.name = g.nodes[last].name.empty() ? "" : g.nodes[last].name + "_layernorm";
    ln.op = "LayerNormalization";
    ln.inputs = {x, gamma};
    if (!beta.empty()) ln.inputs.push_back(beta);
    ln.outputs = {g.nodes[last].outputs[0]};
    ln.attrs["axis"] = int64_t{-1};
    ln.attrs["epsilon"] = static_cast<float>(*eps);
    for (size_t k : {i_mean, i_sub, i_sq, i_var, i_add, i_sqrt, i, i_scale}) dead[k] = true;
    g.nodes[last] = std::move(ln);
    dead[last] = false;
    ++count;
  }
  erase_dead(g, dead);
  return count;
}

// ---- the erf GELU, decomposed -> Gelu ----
int gelu_pass(Graph& g) {
  Index ix(g);
  std::vector<bool> dead(g.nodes.size(), false);
  int count = 0;
  auto near = [](std::optional<double> v, double want) {
    return v && std::fabs(*v - want) <= 1e-4 * std::fabs(want);
  };
  // The operand of a two-input node other than `v` ("" unless exactly one input is `v`).
  auto other_of = [](const Node& n, const std::string& v) -> std::string {
    if (n.inputs.size() != 2 || (n.inputs[0] == v) == (n.inputs[1] == v)) return "";
    return n.inputs[0] == v ? n.inputs[1] : n.inputs[0];
  };
  // The node reading `v`, when it alone reads it (once) and `v` is no graph output.
  auto sole = [&](const std::string& v) -> std::optional<size_t> {
    const auto& r = ix.readers(v);
    if (r.size() != 1 || ix.is_output(v) || dead[r[0]]) return std::nullopt;
    return r[0];
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& scale = g.nodes[i];
    if (dead[i] || scale.outputs.size() != 1 || !scale.domain.empty()) continue;
    std::string x;
    if (plain(scale, "Div", 2) && near(scalar_of(g, ix, dead, scale.inputs[1]), std::sqrt(2.0)))
      x = scale.inputs[0];
    else if (plain(scale, "Mul", 2))
      for (int k = 0; k < 2 && x.empty(); ++k)
        if (near(scalar_of(g, ix, dead, scale.inputs[static_cast<size_t>(k)]), std::sqrt(0.5)))
          x = scale.inputs[static_cast<size_t>(1 - k)];
    if (x.empty()) continue;
    const auto ie = sole(scale.outputs[0]);
    if (!ie || !plain(g.nodes[*ie], "Erf", 1)) continue;
    const std::string e = g.nodes[*ie].outputs[0];
    const auto ia = sole(e);
    if (!ia || !plain(g.nodes[*ia], "Add", 2) ||
        !near(scalar_of(g, ix, dead, other_of(g.nodes[*ia], e)), 1.0))
      continue;
    const std::string a = g.nodes[*ia].outputs[0];
    const auto im = sole(a);  // the Mul reading 1 + erf
    if (!im || !plain(g.nodes[*im], "Mul", 2)) continue;
    const Node& m = g.nodes[*im];
    const std::string other = other_of(m, a);
    size_t last;
    if (other == x) {  // (x * (1 + erf)) * 0.5
      const auto ih = sole(m.outputs[0]);
      if (!ih || !plain(g.nodes[*ih], "Mul", 2) ||
          !near(scalar_of(g, ix, dead, other_of(g.nodes[*ih], m.outputs[0])), 0.5))
        continue;
      last = *ih;
    } else {  // (x * 0.5) * (1 + erf)
      const Node* h = ix.producer(other, dead);
      if (!h || !plain(*h, "Mul", 2) || other_of(*h, x).empty() ||
          !near(scalar_of(g, ix, dead, other_of(*h, x)), 0.5) || !ix.read_only_by(other, {*im}))
        continue;
      dead[ix.producer_index(other)] = true;
      last = *im;
    }
    Node gelu;
    gelu.name = g.nodes[last].name.empty() ? "" : g.nodes[last].name + "_gelu";
    gelu.op = "Gelu";
    gelu.inputs = {x};
    gelu.outputs = {g.nodes[last].outputs[0]};
    gelu.attrs["approximate"] = std::string("none");
    for (size_t k : {i, *ie, *ia, *im}) dead[k] = true;
    g.nodes[last] = std::move(gelu);
    dead[last] = false;
    ++count;
  }
  erase_dead(g, dead);
  return count;
}

// ---- Pad(x, zeros at the spatial ends) -> Conv(x) with the pads added to its own ----
int pad_conv_pass(Graph& g) {
  Index ix(g);
  std::vector<bool> dead(g.nodes.size(), false);
  int count = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& pad = g.nodes[i];
    if (dead[i] || pad.op != "Pad" || !pad.domain.empty() || pad.inputs.size() < 2 ||
        pad.inputs.size() > 3 || pad.outputs.size() != 1)
      continue;
    auto mode = pad.attrs.find("mode");
    if (mode != pad.attrs.end()) {
      const auto* m = mode->second.get_if<std::string>();
      if (!m || *m != "constant") continue;
    }
    if (pad.inputs.size() == 3 && !pad.inputs[2].empty()) {
      const auto value = scalar_of(g, ix, dead, pad.inputs[2]);
      if (!value || *value != 0.0) continue;
    }
    HostTensor scratch;
    const HostTensor* pt = constant_of(g, ix, dead, pad.inputs[1], &scratch);
    if (!pt) continue;
    auto pads = pt->to_int64_vector();
    if (!pads.ok() || pads->size() < 6 || pads->size() % 2) continue;
    const size_t rank = pads->size() / 2;
    // Nothing on the batch and channel axes, nothing negative (a crop).
    if ((*pads)[0] || (*pads)[1] || (*pads)[rank] || (*pads)[rank + 1]) continue;
    if (std::any_of(pads->begin(), pads->end(), [](int64_t p) { return p < 0; })) continue;
    const auto& readers = ix.readers(pad.outputs[0]);
    if (readers.size() != 1 || ix.is_output(pad.outputs[0]) || dead[readers[0]]) continue;
    Node& conv = g.nodes[readers[0]];
    // An AveragePool counting its padding (count_include_pad 1, or no pads of its own) takes
    // the zeros as its pads exactly (avg_pool2d(padding=p, count_include_pad=True) exported
    // before opset 19: Inception v3's pools); not with ceil_mode, whose last window may run
    // past the pads.
    const bool pool = conv.op == "AveragePool";
    if (pool) {
      bool zero_pads = true;
      if (auto it = conv.attrs.find("pads"); it != conv.attrs.end()) {
        const auto* v = it->second.get_if<std::vector<int64_t>>();
        zero_pads = v && std::all_of(v->begin(), v->end(), [](int64_t p) { return p == 0; });
      }
      if (int_attr(conv, "ceil_mode", 0) != 0 ||
          (int_attr(conv, "count_include_pad", 0) == 0 && !zero_pads))
        continue;
    }
    if ((conv.op != "Conv" && !pool) || !conv.domain.empty() || conv.inputs.empty() ||
        conv.inputs[0] != pad.outputs[0])
      continue;
    if (auto ap = conv.attrs.find("auto_pad"); ap != conv.attrs.end()) {
      const auto* v = ap->second.get_if<std::string>();
      if (!v || *v != "NOTSET") continue;
    }
    const size_t spatial = rank - 2;
    std::vector<int64_t> cp(2 * spatial, 0);
    if (auto it = conv.attrs.find("pads"); it != conv.attrs.end()) {
      const auto* v = it->second.get_if<std::vector<int64_t>>();
      if (!v || v->size() != cp.size()) continue;
      cp = *v;
    }
    for (size_t k = 0; k < spatial; ++k) {
      cp[k] += (*pads)[2 + k];
      cp[spatial + k] += (*pads)[rank + 2 + k];
    }
    conv.attrs["pads"] = cp;
    if (pool) conv.attrs["count_include_pad"] = int64_t{1};
    conv.inputs[0] = pad.inputs[0];
    dead[i] = true;
    ++count;
  }
  erase_dead(g, dead);
  return count;
}

// ---- common subexpressions: one node per (op, inputs, attributes) ----

// Ops whose result is not a function of their inputs and attributes alone.
bool nondeterministic(const Node& n) {
  static const std::set<std::string> kRandom = {"RandomNormal", "RandomUniform",
                                                "RandomNormalLike", "RandomUniformLike",
                                                "Multinomial", "Bernoulli", "Dropout"};
  return !n.domain.empty() ? n.domain != "ai.onnx.preview.training" : kRandom.count(n.op) > 0;
}

// The node's attributes as a string, or nullopt for one that is not worth comparing (a
// subgraph, a tensor of more than 64 values).
std::optional<std::string> attrs_key(const Node& n) {
  std::ostringstream k;
  k.precision(9);
  for (const auto& [name, a] : n.attrs) {
    k << name << '=' << a.value().index() << ':';
    if (const auto* i = a.get_if<int64_t>()) {
      k << *i;
    } else if (const auto* f = a.get_if<float>()) {
      uint32_t bits;
      std::memcpy(&bits, f, sizeof bits);
      k << bits;
    } else if (const auto* str = a.get_if<std::string>()) {
      k << str->size() << ':' << *str;
    } else if (const auto* is = a.get_if<std::vector<int64_t>>()) {
      for (int64_t v : *is) k << v << ',';
    } else if (const auto* fs = a.get_if<std::vector<float>>()) {
      for (float v : *fs) {
        uint32_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        k << bits << ',';
      }
    } else if (const auto* ss = a.get_if<std::vector<std::string>>()) {
      for (const auto& v : *ss) k << v.size() << ':' << v << ',';
    } else if (const auto* t = a.get_if<HostTensor>()) {
      if (t->numel() > 64) return std::nullopt;
      k << static_cast<int>(t->dtype()) << '[' << shape_to_string(t->shape()) << ']';
      const auto* b = static_cast<const unsigned char*>(t->data());
      for (size_t i = 0; i < t->nbytes(); ++i) k << static_cast<int>(b[i]) << '.';
    } else {
      return std::nullopt;  // a subgraph
    }
    k << ';';
  }
  return k.str();
}

int cse_pass(Graph& g) {
  std::set<std::string> graph_outputs, implicit;
  for (const auto& o : g.outputs) graph_outputs.insert(o.name);
  for (const auto& n : g.nodes)
    for (const auto& v : implicit_inputs(n)) implicit.insert(v);
  std::map<std::string, std::string> renamed;  // a dropped node's output -> the kept one's
  std::map<std::string, size_t> first;         // key -> the node that computes it
  std::vector<bool> dead(g.nodes.size(), false);
  int count = 0;
  for (size_t j = 0; j < g.nodes.size(); ++j) {
    Node& n = g.nodes[j];
    for (auto& in : n.inputs)
      if (auto r = renamed.find(in); r != renamed.end()) in = r->second;
    if (n.inputs.empty() || nondeterministic(n)) continue;
    auto attrs = attrs_key(n);
    if (!attrs) continue;
    std::string key = n.domain + '|' + n.op + '|';
    for (const auto& in : n.inputs) key += std::to_string(in.size()) + ':' + in + ',';
    key += '|' + *attrs;
    auto [it, fresh] = first.emplace(key, j);
    if (fresh) continue;
    Node& kept = g.nodes[it->second];
    // Each output of the duplicate becomes the kept node's (a name a subgraph reads or the
    // graph returns is not renamed: then both nodes stay).
    bool ok = true;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const std::string& o = n.outputs[k];
      const bool kept_has = k < kept.outputs.size() && !kept.outputs[k].empty();
      if (!o.empty() && kept_has && (graph_outputs.count(o) || implicit.count(o))) ok = false;
    }
    if (!ok) continue;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const std::string& o = n.outputs[k];
      if (o.empty()) continue;
      if (k < kept.outputs.size() && !kept.outputs[k].empty()) {
        renamed[o] = kept.outputs[k];
      } else {  // an optional output only the duplicate asked for (MaxPool's Indices)
        if (kept.outputs.size() <= k) kept.outputs.resize(k + 1);
        kept.outputs[k] = o;
      }
    }
    dead[j] = true;
    ++count;
  }
  erase_dead(g, dead);
  return count;
}


// ---- Identity(initializer) -> the initializer ----
// PyTorch's exporter replaces an initializer equal to an earlier one by an Identity of that
// one (every fresh LayerNorm's ones and zeros, the layers nn.TransformerEncoder clones, tied
// weights): behind the Identity a weight is a computed value, and every pattern that wants
// a constant (a Linear's B, a Conv's W, a LayerNorm's scale) passed it by (an encoder
// exported so ran its MatMuls without prepared weights: 55% of its time). Readers read the
// initializer itself; not for a graph output, a name a subgraph reads, or an initializer
// that is also a graph input (a caller may override it).
int identity_pass(Graph& g) {
  std::set<std::string> graph_outputs, implicit, graph_inputs;
  for (const auto& o : g.outputs) graph_outputs.insert(o.name);
  for (const auto& i : g.inputs) graph_inputs.insert(i.name);
  for (const auto& n : g.nodes)
    for (const auto& v : implicit_inputs(n)) implicit.insert(v);
  std::map<std::string, std::string> renamed;  // a dropped Identity's output -> its initializer
  std::vector<bool> dead(g.nodes.size(), false);
  int count = 0;
  for (size_t j = 0; j < g.nodes.size(); ++j) {
    const Node& n = g.nodes[j];
    if (!plain(n, "Identity", 1)) continue;
    const std::string& src = n.inputs[0];
    const std::string& out = n.outputs[0];
    if (out.empty() || !g.initializers.count(src) || graph_inputs.count(src) ||
        graph_outputs.count(out) || implicit.count(out) || g.initializers.count(out))
      continue;
    renamed[out] = src;
    dead[j] = true;
    ++count;
  }
  if (count == 0) return 0;
  for (size_t j = 0; j < g.nodes.size(); ++j)  // readers anywhere (not only after, in order)
    for (auto& in : g.nodes[j].inputs)
      if (auto r = renamed.find(in); r != renamed.end()) in = r->second;
  erase_dead(g, dead);
  return count;
}

// ---- If with a condition known at compile time ----

// PyTorch exports `x.squeeze(d)` of a dim it cannot see as If(Equal(Shape(x)[d], 1)) with a
// Squeeze in one branch and an Identity in the other. Until it runs, the If's output has no
// shape, nor has anything computed from it, and kernels are chosen for unknown shapes
// (MViT-v1-B: 3 such Ifs, its attention MatMuls on the reference kernel, 60% of its time).
// With the condition folded from the input shapes, the taken branch's nodes replace the If
// (its values renamed apart; its outputs become Identity nodes giving the If's). A branch
// holding subgraphs of its own is left alone.
int if_pass(Graph& g) {
  const Index ix(g);
  std::set<std::string> used;
  for (const auto& n : g.nodes) {
    for (const auto& o : n.outputs) used.insert(o);
    if (!n.name.empty()) used.insert(n.name);
  }
  for (const auto& [name, t] : g.initializers) used.insert(name);
  int counter = 0;
  auto fresh = [&](const std::string& base) {
    for (;;) {
      std::string name = base + "_inlined" + std::to_string(counter++);
      if (used.insert(name).second) return name;
    }
  };
  std::vector<bool> dead(g.nodes.size(), false);
  std::vector<Node> added;
  std::map<std::string, HostTensor> added_initializers;
  int count = 0;
  for (size_t j = 0; j < g.nodes.size(); ++j) {
    const Node& n = g.nodes[j];
    if (n.op != "If" || !n.domain.empty() || n.inputs.size() != 1) continue;
    HostTensor scratch;
    const HostTensor* c = constant_of(g, ix, dead, n.inputs[0], &scratch);
    if (!c || c->numel() != 1 || c->dtype() != DType::kBool) continue;
    const auto branch = n.attrs.find(c->data<bool>()[0] ? "then_branch" : "else_branch");
    if (branch == n.attrs.end()) continue;
    const auto* sub = branch->second.get_if<std::shared_ptr<const Graph>>();
    if (!sub || !*sub) continue;
    const Graph& b = **sub;
    if (!b.inputs.empty() || b.outputs.size() != n.outputs.size()) continue;
    bool nested = false;
    for (const auto& bn : b.nodes)
      for (const auto& [key, a] : bn.attrs) nested |= a.get_if<std::shared_ptr<const Graph>>() != nullptr;
    if (nested) continue;
    const std::string where = n.name.empty() ? "If" : n.name;
    std::map<std::string, std::string> rename;  // the branch's own values -> fresh names
    for (const auto& [name, t] : b.initializers) {
      rename[name] = fresh(where + "/" + name);
      added_initializers.emplace(rename[name], t);
    }
    for (const auto& bn : b.nodes)
      for (const auto& o : bn.outputs)
        if (!o.empty()) rename[o] = fresh(where + "/" + o);
    auto renamed = [&](const std::string& v) {
      auto it = rename.find(v);
      return it == rename.end() ? v : it->second;  // else a value of the outer graph
    };
    for (const auto& bn : b.nodes) {
      Node copy = bn;
      copy.name = fresh(where + "/" + (bn.name.empty() ? bn.op : bn.name));
      for (auto& in : copy.inputs)
        if (!in.empty()) in = renamed(in);
      for (auto& o : copy.outputs)
        if (!o.empty()) o = renamed(o);
      added.push_back(std::move(copy));
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k].empty()) continue;
      Node id;
      id.op = "Identity";
      id.name = fresh(where + "/output");
      id.inputs = {renamed(b.outputs[k].name)};
      id.outputs = {n.outputs[k]};
      added.push_back(std::move(id));
    }
    dead[j] = true;
    ++count;
  }
  if (count == 0) return 0;
  erase_dead(g, dead);
  for (auto& a : added) g.nodes.push_back(std::move(a));
  for (auto& [name, t] : added_initializers) g.initializers.emplace(name, std::move(t));
  return count;
}

// ---- BatchNormalization folded into the contraction before it ----

// A float32/float64 constant of `types`, or null.
const HostTensor* float_constant(const GraphTypes& types, const std::string& v) {
  auto it = types.constants.find(v);
  if (it == types.constants.end()) return nullptr;
  const DType t = it->second.dtype();
  return t == DType::kFloat32 || t == DType::kFloat64 ? &it->second : nullptr;
}

// `values` (in double) as a tensor of `dtype` (float32 or float64) and `shape`.
HostTensor tensor_of(DType dtype, Shape shape, const std::vector<double>& values) {
  if (dtype == DType::kFloat64) return HostTensor::from_vector<double>(values, std::move(shape));
  std::vector<float> f(values.begin(), values.end());
  return HostTensor::from_vector<float>(f, std::move(shape));
}

// y = x * s + t per output channel of a contraction, for the node `n` reading x (the
// contraction's only output, `m` channels on axis 1 of a rank-`rank` value): an inference
// BatchNormalization; with `affine`, a Mul, Add or Sub by a constant that varies along the
// channel axis at most. False: not such a node.
bool channel_affine(const Node& n, const std::string& x, int64_t m, size_t rank,
                    const GraphTypes& types, bool bn, bool affine, std::vector<double>* s,
                    std::vector<double>* t) {
  if (!n.domain.empty() || n.outputs.empty() || n.outputs[0].empty()) return false;
  if (n.op == "BatchNormalization") {
    if (!bn || n.inputs.size() != 5 || n.inputs[0] != x) return false;
    // Inference: the running statistics, no statistics asked for (training_mode, or the
    // optional outputs of opsets before 14).
    if (int_attr(n, "training_mode", 0) != 0 || int_attr(n, "spatial", 1) != 1) return false;
    if (std::any_of(n.outputs.begin() + 1, n.outputs.end(),
                    [](const std::string& o) { return !o.empty(); }))
      return false;
    const float eps = float_attr(n, "epsilon", 1e-5f);
    if (!(eps >= 0)) return false;
    for (size_t k = 1; k < 5; ++k) {
      const HostTensor* p = float_constant(types, n.inputs[k]);
      if (!p || p->numel() != m) return false;
    }
    const std::vector<double> scale = types.constants.at(n.inputs[1]).to_double_vector();
    const std::vector<double> shift = types.constants.at(n.inputs[2]).to_double_vector();
    const std::vector<double> mean = types.constants.at(n.inputs[3]).to_double_vector();
    const std::vector<double> var = types.constants.at(n.inputs[4]).to_double_vector();
    s->resize(static_cast<size_t>(m));
    t->resize(static_cast<size_t>(m));
    for (size_t o = 0; o < s->size(); ++o) {
      (*s)[o] = scale[o] / std::sqrt(var[o] + double(eps));
      (*t)[o] = shift[o] - mean[o] * (*s)[o];
    }
    return true;
  }
  const bool mul = n.op == "Mul", add = n.op == "Add", sub = n.op == "Sub";
  if (!affine || (!mul && !add && !sub) || n.inputs.size() != 2 || n.outputs.size() != 1) return false;
  if ((n.inputs[0] == x) == (n.inputs[1] == x)) return false;
  if (sub && n.inputs[0] != x) return false;  // c - x negates x: not worth a case
  const HostTensor* c = float_constant(types, n.inputs[0] == x ? n.inputs[1] : n.inputs[0]);
  if (!c) return false;
  // One value, or m values along the channel axis (axis 1 of the output), 1 elsewhere: the
  // constant's shape right-aligned to the output's, no longer than it.
  const Shape& cs = c->shape();
  if (cs.size() > rank) return false;
  bool per_channel = c->numel() == m && m > 1;
  for (size_t k = 0; k < cs.size(); ++k) {
    const size_t axis = rank - cs.size() + k;
    if (cs[k] != 1 && (axis != 1 || cs[k] != m)) return false;
  }
  if (c->numel() != 1 && !per_channel) return false;
  const std::vector<double> cv = c->to_double_vector();
  s->assign(static_cast<size_t>(m), 1.0);
  t->assign(static_cast<size_t>(m), 0.0);
  for (size_t o = 0; o < s->size(); ++o) {
    const double v = cv[per_channel ? o : 0];
    if (mul) (*s)[o] = v;
    else (*t)[o] = sub ? -v : v;
  }
  return true;
}

int fold_affine_impl(Graph& g, GraphTypes& types, std::vector<bool>* dropped, bool bn,
                     bool affine,
                     const std::function<bool(const std::string&, int64_t)>& charge) {
  const Index ix(g);
  // Outputs a fold moved onto the contraction before them: their producer now.
  std::map<std::string, size_t> moved;
  auto producer_of = [&](const std::string& v) -> std::optional<size_t> {
    if (auto it = moved.find(v); it != moved.end()) return it->second;
    return ix.producer_of(v);
  };
  std::set<std::string> made;  // constants this pass made (a second fold rewrites them)
  auto fresh = [&](const std::string& base) {
    for (int k = 0;; ++k) {
      std::string name = base + "_folded" + std::to_string(k);
      // types.values names every graph input and node output already.
      if (!types.values.count(name) && !types.constants.count(name) && !g.initializers.count(name))
        return name;
    }
  };
  // A tensor this pass made is rewritten in place; another gets a new one (charged).
  auto put = [&](const std::string& old, const std::string& base, HostTensor value,
                 std::string* name) {
    if (made.count(old) && types.constants.at(old).nbytes() == value.nbytes()) {
      types.constants.at(old) = std::move(value);
      *name = old;
      return true;
    }
    *name = fresh(base);
    if (!charge(*name, static_cast<int64_t>(value.nbytes()))) return false;
    types.values.insert_or_assign(*name, Result<TensorType>(value.type()));
    types.constants.insert_or_assign(*name, std::move(value));
    made.insert(*name);
    return true;
  };
  int count = 0;
  for (size_t b = 0; b < g.nodes.size(); ++b) {
    const Node& n = g.nodes[b];
    if ((*dropped)[b] || n.inputs.empty() || n.outputs.empty()) continue;
    if (n.op != "BatchNormalization" && n.op != "Mul" && n.op != "Add" && n.op != "Sub") continue;
    // The value read that a contraction made: read only here, no graph output.
    std::string x;
    for (const auto& in : n.inputs)
      if (auto j = producer_of(in); j && !(*dropped)[*j]) {
        const Node& c = g.nodes[*j];
        if (c.op == "Conv" || c.op == "ConvTranspose" || c.op == "Gemm") x = in;
      }
    if (x.empty() || types.constants.count(x) || ix.is_output(x) || ix.readers(x).size() != 1)
      continue;
    const size_t pi = *producer_of(x);
    Node& p = g.nodes[pi];
    const bool conv = p.op == "Conv", convt = p.op == "ConvTranspose", gemm = p.op == "Gemm";
    if (!p.domain.empty() || p.outputs.size() != 1 || p.outputs[0] != x || p.inputs.size() < 2)
      continue;
    const HostTensor* w = float_constant(types, p.inputs[1]);
    if (!w || w->numel() == 0) continue;
    const Shape& ws = w->shape();
    // Output channels, and the channel of each weight.
    int64_t m = 0;
    std::function<int64_t(int64_t)> channel_of;
    if (conv) {
      if (ws.size() < 3) continue;
      m = ws[0];
      const int64_t per = w->numel() / m;
      channel_of = [per](int64_t i) { return i / per; };
    } else if (convt) {
      const int64_t group = int_attr(p, "group", 1);
      if (ws.size() < 3 || group < 1 || ws[0] % group) continue;
      const int64_t per_group = ws[1], in_per_group = ws[0] / group;
      m = group * per_group;
      const int64_t kk = w->numel() / (ws[0] * ws[1]);
      channel_of = [=](int64_t i) {
        const int64_t c = i / (per_group * kk), o = (i / kk) % per_group;
        return (c / in_per_group) * per_group + o;
      };
    } else {
      if (ws.size() != 2) continue;
      const bool trans_b = int_attr(p, "transB", 0) != 0;
      m = trans_b ? ws[0] : ws[1];
      const int64_t cols = ws[1];
      channel_of = trans_b ? std::function<int64_t(int64_t)>([cols](int64_t i) { return i / cols; })
                           : std::function<int64_t(int64_t)>([cols](int64_t i) { return i % cols; });
    }
    auto xt = types.values.find(x);
    if (m <= 0 || xt == types.values.end() || !xt->second.ok()) continue;
    const size_t rank = xt->second->shape.size();
    std::vector<double> s, t;
    if (rank < 2 || !channel_affine(n, x, m, rank, types, bn, affine, &s, &t)) continue;
    // The bias before the fold, per output channel (Gemm: beta * C broadcast over the rows).
    std::vector<double> bias(static_cast<size_t>(m), 0.0);
    const std::string bias_in = p.inputs.size() > 2 ? p.inputs[2] : "";
    if (!bias_in.empty()) {
      const HostTensor* c = float_constant(types, bias_in);
      if (!c) continue;
      const Shape& cs = c->shape();
      const bool per_channel = c->numel() == m && (cs.size() == 1 || (gemm && cs.size() == 2 && cs[0] == 1));
      const bool one = gemm && c->numel() == 1 && cs.size() <= 2;
      if (!per_channel && !one) continue;
      const std::vector<double> cv = c->to_double_vector();
      const double beta = gemm ? float_attr(p, "beta", 1.0f) : 1.0;
      if (!std::isfinite(beta)) continue;
      for (size_t o = 0; o < bias.size(); ++o) bias[o] = beta * cv[per_channel ? o : 0];
    }
    std::vector<double> wv = w->to_double_vector();
    bool scaled = false;
    for (double v : s) scaled |= v != 1.0;
    if (scaled)
      for (int64_t i = 0; i < static_cast<int64_t>(wv.size()); ++i)
        wv[static_cast<size_t>(i)] *= s[static_cast<size_t>(channel_of(i))];
    for (size_t o = 0; o < bias.size(); ++o) bias[o] = bias[o] * s[o] + t[o];
    std::string w_name = p.inputs[1], b_name;
    if (scaled && !put(p.inputs[1], p.inputs[1], tensor_of(w->dtype(), ws, wv), &w_name)) continue;
    if (!put(bias_in, bias_in.empty() ? p.inputs[1] + "_bias" : bias_in,
             tensor_of(w->dtype(), {m}, bias), &b_name))
      continue;  // a weight made stays unread
    p.inputs[1] = w_name;
    p.inputs.resize(3);
    p.inputs[2] = b_name;
    if (gemm) p.attrs["beta"] = 1.0f;
    p.outputs[0] = n.outputs[0];
    moved[n.outputs[0]] = pi;
    (*dropped)[b] = true;
    ++count;
  }
  return count;
}

// ---- a Conv's kernel taps that read only padding, dropped ----
// Along one spatial axis of a convolution (input size h, kernel k, stride s, dilation d, pads
// pb and pe, output size oh), tap t reads input o s + t d - pb for output o; it is live when
// one of those falls inside [0, h). Returns the live taps [t0, t1], or nullopt when none is
// live or the live ones are not one run.
std::optional<std::pair<int64_t, int64_t>> live_taps(int64_t h, int64_t k, int64_t s, int64_t d,
                                                     int64_t pb, int64_t oh) {
  auto live = [&](int64_t t) {
    const int64_t c = t * d - pb;                             // input read by output 0
    const int64_t o = c >= 0 ? 0 : (-c + s - 1) / s;          // first output reading >= 0
    return o < oh && o * s + c < h;
  };
  int64_t t0 = -1, t1 = -1;
  for (int64_t t = 0; t < k; ++t)
    if (live(t)) {
      if (t0 < 0) t0 = t;
      if (t1 >= 0 && t1 != t - 1) return std::nullopt;  // a gap
      t1 = t;
    }
  if (t0 < 0) return std::nullopt;
  return std::make_pair(t0, t1);
}

int trim_conv_taps_impl(Graph& g, GraphTypes& types,
                        const std::function<bool(const std::string&, int64_t)>& charge) {
  int count = 0;
  for (Node& n : g.nodes) {
    if (n.op != "Conv" || !n.domain.empty() || n.inputs.size() < 2 || n.outputs.size() != 1)
      continue;
    if (auto ap = n.attrs.find("auto_pad"); ap != n.attrs.end()) {
      const auto* v = ap->second.get_if<std::string>();
      if (!v || *v != "NOTSET") continue;
    }
    auto xt = types.values.find(n.inputs[0]);
    auto wc = types.constants.find(n.inputs[1]);
    if (xt == types.values.end() || !xt->second.ok() || wc == types.constants.end()) continue;
    const Shape& xs = xt->second->shape;
    const HostTensor& w = wc->second;
    const Shape ws = w.shape();
    const size_t spatial = ws.size() >= 3 ? ws.size() - 2 : 0;
    if (spatial == 0 || xs.size() != ws.size() || w.dtype() == DType::kUndefined) continue;
    bool known = true;
    for (size_t a = 0; a < spatial; ++a) known = known && xs[2 + a] > 0;
    if (!known) continue;
    auto ints = [&](const char* name, int64_t fallback, size_t size) {
      std::vector<int64_t> v(size, fallback);
      if (auto it = n.attrs.find(name); it != n.attrs.end()) {
        const auto* p = it->second.get_if<std::vector<int64_t>>();
        if (!p || p->size() != size) return std::vector<int64_t>{};
        v = *p;
      }
      return v;
    };
    const std::vector<int64_t> strides = ints("strides", 1, spatial);
    std::vector<int64_t> dil = ints("dilations", 1, spatial), pads = ints("pads", 0, 2 * spatial);
    if (strides.empty() || dil.empty() || pads.empty()) continue;
    std::vector<int64_t> t0(spatial), kept(spatial);
    bool trims = false, ok = true;
    for (size_t a = 0; a < spatial && ok; ++a) {
      const int64_t h = xs[2 + a], k = ws[2 + a], s = strides[a], d = dil[a];
      const int64_t pb = pads[a], pe = pads[spatial + a];
      if (k <= 0 || s <= 0 || d <= 0 || pb < 0 || pe < 0) { ok = false; break; }
      const int64_t oh = (h + pb + pe - d * (k - 1) - 1) / s + 1;
      const auto run = oh > 0 ? live_taps(h, k, s, d, pb, oh) : std::nullopt;
      if (!run) { ok = false; break; }
      t0[a] = run->first;
      kept[a] = run->second - run->first + 1;
      // The new pads keep the output size: pb - t0 d before, pe - (k - 1 - t1) d after; a
      // negative one (a crop) is not a Conv's.
      const int64_t nb = pb - t0[a] * d, ne = pe - (k - 1 - run->second) * d;
      if (nb < 0 || ne < 0) { ok = false; break; }
      trims = trims || kept[a] < k;
    }
    if (!ok || !trims) continue;
    // The kept block of W: [M, C/g, kept...] from [M, C/g, k...].
    Shape ns = ws;
    for (size_t a = 0; a < spatial; ++a) ns[2 + a] = kept[a];
    HostTensor nw(w.dtype(), ns);
    // Row by row of the kept block (every axis but the last), a run of kept.back() values each.
    const size_t esize = dtype_size(w.dtype());
    const int64_t run = kept.back();
    const int64_t rows = shape_numel(ns) / run;
    const auto* src = static_cast<const uint8_t*>(w.data());
    auto* dst = static_cast<uint8_t*>(nw.mutable_data());
    for (int64_t q = 0; q < rows; ++q) {
      int64_t rem = q, off = t0.back(), stride = ws.back();
      for (size_t a = spatial - 1; a-- > 0;) {
        off += (rem % kept[a] + t0[a]) * stride;
        rem /= kept[a];
        stride *= ws[2 + a];
      }
      off += rem * stride;  // rem: the row of [M, C/g]
      std::memcpy(dst + q * run * esize, src + off * esize, static_cast<size_t>(run) * esize);
    }
    std::string name;
    for (int k = 0;; ++k) {
      name = n.inputs[1] + "_taps" + std::to_string(k);
      if (!types.values.count(name) && !types.constants.count(name) && !g.initializers.count(name))
        break;
    }
    if (!charge(name, static_cast<int64_t>(nw.nbytes()))) continue;
    for (size_t a = 0; a < spatial; ++a) {
      pads[a] -= t0[a] * dil[a];
      pads[spatial + a] -= (ws[2 + a] - t0[a] - kept[a]) * dil[a];
      if (kept[a] == 1) dil[a] = 1;
    }
    n.attrs["pads"] = pads;
    n.attrs["dilations"] = dil;
    if (n.attrs.count("kernel_shape"))
      n.attrs["kernel_shape"] = std::vector<int64_t>(ns.begin() + 2, ns.end());
    types.values.insert_or_assign(name, Result<TensorType>(nw.type()));
    types.constants.insert_or_assign(name, std::move(nw));
    n.inputs[1] = name;
    ++count;
  }
  return count;
}

}  // namespace

int trim_conv_taps(Graph& graph, GraphTypes& types, const CanonicalizeOptions& options,
                   const std::function<bool(const std::string&, int64_t)>& charge) {
  return options.taps ? trim_conv_taps_impl(graph, types, charge) : 0;
}

int fold_affine(Graph& graph, GraphTypes& types, std::vector<bool>* dropped,
                const CanonicalizeOptions& options,
                const std::function<bool(const std::string&, int64_t)>& charge) {
  dropped->assign(graph.nodes.size(), false);
  if (!options.bnfold && !options.affine) return 0;
  return fold_affine_impl(graph, types, dropped, options.bnfold, options.affine, charge);
}

namespace {

// Whether a float16 value can arise: a float16 input, initializer or constant, a Cast to
// float16, a dtype attribute asking for it (a cheap look before typing the graph: most
// compiles have none).
bool may_have_float16(const Graph& graph, const std::vector<TensorType>& input_types) {
  constexpr int64_t kHalf = static_cast<int64_t>(DType::kFloat16);
  for (const auto& t : input_types)
    if (t.dtype == DType::kFloat16) return true;
  for (const auto& [name, t] : graph.initializers)
    if (t.dtype() == DType::kFloat16) return true;
  for (const auto& n : graph.nodes)
    for (const auto& [k, a] : n.attrs) {
      if (const auto* t = a.get_if<HostTensor>(); t && t->dtype() == DType::kFloat16) return true;
      if (const auto* v = a.get_if<int64_t>(); v && *v == kHalf && (k == "to" || k == "dtype"))
        return true;
    }
  return false;
}

}  // namespace

int widen_float16(Graph& graph, const std::vector<TensorType>& input_types) {
  constexpr int64_t kOnnxFloat = static_cast<int64_t>(DType::kFloat32);
  constexpr int64_t kOnnxFloat16 = static_cast<int64_t>(DType::kFloat16);
  if (!may_have_float16(graph, input_types)) return 0;
  auto types = infer_graph(OpRegistry::global(), graph, input_types);
  if (!types.ok()) return 0;
  auto is_half = [&](const std::string& name) {
    auto it = types->values.find(name);
    return it != types->values.end() && it->second.ok() && it->second->dtype == DType::kFloat16;
  };
  if (std::none_of(types->values.begin(), types->values.end(), [](const auto& v) {
        return v.second.ok() && v.second->dtype == DType::kFloat16;
      }))
    return 0;
  // Left as they are: bodies that read outer values (Loop, If, Scan), sequences, and a float16
  // graph output that is an initializer (it would change type).
  for (const auto& n : graph.nodes) {
    for (const auto& [k, a] : n.attrs)
      if (a.kind() == Attribute::Kind::kGraph) return 0;
    if (n.op.rfind("Sequence", 0) == 0 || n.op == "SplitToSequence" || n.op == "ConcatFromSequence")
      return 0;
  }
  for (const auto& o : graph.outputs)
    if (graph.initializers.count(o.name) && is_half(o.name)) return 0;

  auto widen = [](const HostTensor& h) {
    HostTensor f(DType::kFloat32, h.shape());
    for (int64_t i = 0; i < h.numel(); ++i)
      f.mutable_data<float>()[i] = half_to_float(h.data<uint16_t>()[i]);
    return f;
  };
  auto cast = [](const std::string& in, const std::string& out, int64_t to) {
    return simple_node("Cast", {in}, out, {{"to", Attribute(to)}});
  };
  std::set<std::string> taken;
  for (const auto& n : graph.nodes)
    for (const auto& o : n.outputs) taken.insert(o);
  for (const auto& i : graph.inputs) taken.insert(i.name);
  for (const auto& [name, t] : graph.initializers) taken.insert(name);
  auto fresh = [&](const std::string& base) {
    std::string n = base;
    for (int k = 2; taken.count(n); ++k) n = base + std::to_string(k);
    taken.insert(n);
    return n;
  };
  std::vector<Node> before, after;
  std::map<std::string, std::string> renamed;  // a value's readers read another name
  int widened = 0;
  for (const auto& in : graph.inputs) {
    if (!is_half(in.name)) continue;
    const std::string w = fresh(in.name + "__float");
    before.push_back(cast(in.name, w, kOnnxFloat));
    renamed[in.name] = w;
    ++widened;
  }
  for (auto& [name, t] : graph.initializers)
    if (t.dtype() == DType::kFloat16) {
      t = widen(t);
      ++widened;
    }
  // Graph outputs of float16: their producer writes a float value, a Cast makes the output.
  std::map<std::string, std::string> output_from;
  for (const auto& o : graph.outputs)
    if (is_half(o.name) && !renamed.count(o.name) && !output_from.count(o.name)) {
      bool input = false;
      for (const auto& i : graph.inputs) input = input || i.name == o.name;
      if (input) continue;  // passed through: stays the float16 input itself
      output_from[o.name] = fresh(o.name + "__float");
    }
  for (auto& n : graph.nodes) {
    for (auto& i : n.inputs) {
      auto r = renamed.find(i);
      if (r != renamed.end()) i = r->second;
      auto o = output_from.find(i);
      if (o != output_from.end()) i = o->second;
    }
    for (auto& o : n.outputs) {
      auto it = output_from.find(o);
      if (it != output_from.end()) o = it->second;
    }
    auto retype = [&](const char* attr) {
      auto it = n.attrs.find(attr);
      if (it == n.attrs.end()) return;
      if (const HostTensor* t = it->second.get_if<HostTensor>(); t && t->dtype() == DType::kFloat16) {
        it->second = Attribute(widen(*t));
        ++widened;
      }
      if (const int64_t* v = it->second.get_if<int64_t>(); v && *v == kOnnxFloat16) {
        it->second = Attribute(kOnnxFloat);
        ++widened;
      }
    };
    if (n.op == "Constant" || n.op == "ConstantOfShape") retype("value");
    if (n.op == "EyeLike" || n.op.rfind("Random", 0) == 0 || n.op == "Bernoulli") retype("dtype");
  }
  // A conversion to float16 (Cast, CastLike) keeps its rounding: Cast to float16, then back
  // to float under the node's output name.
  std::vector<Node> nodes;
  for (auto& n : graph.nodes) {
    std::string out = n.outputs.empty() ? std::string() : n.outputs[0];
    std::string original = out;
    for (const auto& [o, w] : output_from)
      if (w == out) original = o;
    if ((n.op == "Cast" || n.op == "CastLike") && !out.empty() && is_half(original)) {
      const std::string h = fresh(original + "__half");
      nodes.push_back(cast(n.inputs[0], h, kOnnxFloat16));
      nodes.push_back(cast(h, out, kOnnxFloat));
      ++widened;
      continue;
    }
    nodes.push_back(std::move(n));
  }
  for (const auto& [o, w] : output_from) after.push_back(cast(w, o, kOnnxFloat16));
  graph.nodes.clear();
  for (auto& n : before) graph.nodes.push_back(std::move(n));
  for (auto& n : nodes) graph.nodes.push_back(std::move(n));
  for (auto& n : after) graph.nodes.push_back(std::move(n));
  return widened;
}

CanonicalizeOptions CanonicalizeOptions::none() {
  CanonicalizeOptions o;
  o.hardswish = o.silu = o.layernorm = o.pad_conv = o.cse = o.bnfold = o.gelu = o.affine =
      o.identity = o.if_const = o.taps = o.f16 = o.qdq = false;
  return o;
}

CanonicalizeOptions CanonicalizeOptions::from_env() {
  CanonicalizeOptions base;
  const char* env = std::getenv("TENSORD_CANONICAL");
  if (!env) return base;
  const std::string s = env;
  if (s == "0" || s == "none" || s == "off") return none();
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const bool on = item.empty() || item[0] != '-';
    const bool signed_name = !item.empty() && (item[0] == '-' || item[0] == '+');
    const std::string name = signed_name ? item.substr(1) : item;
    if (name == "hardswish") base.hardswish = on;
    if (name == "silu") base.silu = on;
    if (name == "layernorm") base.layernorm = on;
    if (name == "padconv") base.pad_conv = on;
    if (name == "cse") base.cse = on;
    if (name == "bnfold") base.bnfold = on;
    if (name == "gelu") base.gelu = on;
    if (name == "affine") base.affine = on;
    if (name == "identity") base.identity = on;
    if (name == "if") base.if_const = on;
    if (name == "taps") base.taps = on;
    if (name == "f16") base.f16 = on;
    if (name == "qdq") base.qdq = on;
  }
  return base;
}

bool canonicalize_wants_constants(const Graph& g, const CanonicalizeOptions& options) {
  std::set<std::string> computed;  // outputs of nodes other than Constant
  for (const auto& n : g.nodes)
    if (n.op != "Constant")
      for (const auto& o : n.outputs) computed.insert(o);
  if (options.if_const)
    for (const auto& n : g.nodes)
      if (n.op == "If" && n.inputs.size() == 1 && computed.count(n.inputs[0])) return true;
  if (!options.pad_conv) return false;
  std::set<std::string> conv_inputs;
  for (const auto& n : g.nodes)
    if ((n.op == "Conv" || n.op == "AveragePool") && !n.inputs.empty())
      conv_inputs.insert(n.inputs[0]);
  for (const auto& n : g.nodes)
    if (n.op == "Pad" && n.inputs.size() >= 2 && n.outputs.size() == 1 &&
        conv_inputs.count(n.outputs[0]) && computed.count(n.inputs[1]))
      return true;
  return false;
}

CanonicalizeStats canonicalize(Graph& graph, const CanonicalizeOptions& options,
                               const std::map<std::string, HostTensor>* known) {
  struct Scope {
    explicit Scope(const std::map<std::string, HostTensor>* k) { t_known = k; }
    ~Scope() { t_known = nullptr; }
  } scope(known);
  CanonicalizeStats stats;
  if (options.qdq) stats.qdq = qdq_pass(graph);
  if (options.if_const) stats.if_const = if_pass(graph);
  if (options.identity) stats.identity = identity_pass(graph);
  if (options.cse) stats.cse = cse_pass(graph);
  if (options.hardswish) stats.hardswish = hardswish_pass(graph);
  if (options.layernorm) stats.layernorm = layernorm_pass(graph);
  if (options.silu) stats.silu = silu_pass(graph);
  if (options.gelu) stats.gelu = gelu_pass(graph);
  if (options.pad_conv) stats.pad_conv = pad_conv_pass(graph);
  return stats;
}

}  // namespace tensord
