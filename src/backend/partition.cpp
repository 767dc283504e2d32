#include "backend/backend.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/graph_utils.h"
#include "core/op_registry.h"

namespace tensord {
namespace {

std::vector<std::string> reads_of(const Node& node) {
  std::vector<std::string> reads = node.inputs;
  for (const auto& v : implicit_inputs(node)) reads.push_back(v);
  return reads;
}

}  // namespace

void FusionGraph::index_uses() const {
  readers_.clear();
  producer_.clear();
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const auto& o : nodes[i]->outputs)
      if (!o.empty()) producer_[o] = i;
    for (const auto& v : reads_of(*nodes[i]))
      if (!v.empty()) readers_[v].push_back(i);
  }
  indexed_ = true;
}

const std::vector<size_t>& FusionGraph::readers_of(const std::string& value) const {
  static const std::vector<size_t> none;
  if (!indexed_) index_uses();
  auto it = readers_.find(value);
  return it == readers_.end() ? none : it->second;
}

int64_t FusionGraph::producer_of(const std::string& value) const {
  if (!indexed_) index_uses();
  auto it = producer_.find(value);
  return it == producer_.end() ? -1 : static_cast<int64_t>(it->second);
}

std::optional<size_t> FusionGraph::sole_reader(const std::string& value) const {
  if (is_graph_output && is_graph_output(value)) return std::nullopt;
  const std::vector<size_t>& r = readers_of(value);
  if (r.size() != 1) return std::nullopt;
  return r[0];
}

std::vector<EpilogueStep> FusionGraph::epilogue_of(size_t i) const {
  std::vector<EpilogueStep> steps;
  if (i >= nodes.size()) return steps;
  const Node& c = *nodes[i];
  if (op_kind(c.op) != OpKind::kContraction || c.outputs.empty() || c.outputs[0].empty())
    return steps;
  const TensorType* ct = type_of ? type_of(c.outputs[0]) : nullptr;
  if (!ct || ct->shape.empty()) return steps;
  const TensorType result = *ct;
  const bool conv = c.op == "Conv" || c.op == "ConvTranspose" || c.op == "ConvInteger" ||
                    c.op == "QLinearConv";
  const size_t rank = result.shape.size();
  const size_t channel_axis = conv ? (rank > 1 ? 1 : 0) : rank - 1;
  const bool here = placed_here.empty() || placed_here[i];
  // A node that may join the chain: standard domain, placed like the contraction, one output
  // of the result's type and shape.
  auto joins = [&](size_t j) {
    const Node& n = *nodes[j];
    if (!n.domain.empty() && n.domain != "ai.onnx") return false;
    if (!placed_here.empty() && placed_here[j] != here) return false;
    if (n.outputs.size() != 1) return false;
    const TensorType* t = type_of(n.outputs[0]);
    return t && t->dtype == result.dtype && t->shape == result.shape;
  };
  auto form_of = [&](const std::string& operand) {
    const TensorType* t = type_of(operand);
    if (!t) return EpilogueStep::Operand::kOther;
    if (t->shape == result.shape) return EpilogueStep::Operand::kSameShape;
    if (!shape_is_static(t->shape) || t->shape.size() > rank) return EpilogueStep::Operand::kOther;
    if (shape_numel(t->shape) == 1) return EpilogueStep::Operand::kScalar;
    // Right-aligned against the result: 1 on every axis but the channel's, which matches.
    const size_t lead = rank - t->shape.size();
    for (size_t d = 0; d < t->shape.size(); ++d) {
      const int64_t want = lead + d == channel_axis ? result.shape[channel_axis] : 1;
      if (t->shape[d] != want) return EpilogueStep::Operand::kOther;
    }
    return lead <= channel_axis ? EpilogueStep::Operand::kChannel : EpilogueStep::Operand::kOther;
  };
  std::string v = c.outputs[0];
  while (steps.size() < 8) {
    if (is_graph_output && is_graph_output(v)) break;
    const std::vector<size_t>& r = readers_of(v);
    EpilogueStep s;
    s.input = v;
    if (r.size() == 2 && r[0] != r[1]) {  // x * Sigmoid(x)
      for (int k = 0; k < 2 && s.nodes.empty(); ++k) {
        const size_t si = r[static_cast<size_t>(k)], mi = r[static_cast<size_t>(1 - k)];
        const Node& sig = *nodes[si];
        const Node& mul = *nodes[mi];
        if (sig.op != "Sigmoid" || sig.inputs.size() != 1 || mul.op != "Mul" ||
            mul.inputs.size() != 2 || !joins(si) || !joins(mi))
          continue;
        const std::optional<size_t> only = sole_reader(sig.outputs[0]);
        const bool pair = (mul.inputs[0] == v && mul.inputs[1] == sig.outputs[0]) ||
                          (mul.inputs[1] == v && mul.inputs[0] == sig.outputs[0]);
        if (only && *only == mi && pair && si < mi) {
          s.kind = EpilogueStep::Kind::kSwish;
          s.nodes = {si, mi};
          s.node = &mul;
        }
      }
      if (s.nodes.empty()) break;
    } else {
      const std::optional<size_t> j = sole_reader(v);
      if (!j || !joins(*j)) break;
      const Node& n = *nodes[*j];
      const OpKind kind = op_kind(n.op);
      if (kind == OpKind::kElementwise && !n.inputs.empty() && n.inputs[0] == v) {
        s.kind = EpilogueStep::Kind::kActivation;
      } else if (kind == OpKind::kBroadcast && n.inputs.size() == 2 &&
                 n.inputs[0] != n.inputs[1] && !n.inputs[0].empty() && !n.inputs[1].empty()) {
        s.kind = EpilogueStep::Kind::kBinary;
        s.operand_first = n.inputs[1] == v;
        s.operand = n.inputs[s.operand_first ? 0 : 1];
        s.form = form_of(s.operand);
        s.operand_constant = constant && constant(s.operand) != nullptr;
      } else {
        break;
      }
      s.nodes = {*j};
      s.node = &n;
    }
    s.output = s.node->outputs[0];
    v = s.output;
    steps.push_back(std::move(s));
  }
  return steps;
}

std::vector<Region> partition_graph(
    const FusionGraph& g, const std::function<std::string(size_t, const std::vector<int>&)>& key) {
  const size_t n = g.nodes.size();
  std::vector<int> group_of(n, -1);
  std::vector<std::vector<size_t>> groups;
  // Dependencies, with each group contracted to one node (a region runs as a unit: every
  // output of it waits for every input). vdeps[v]: the groups value v depends on through no
  // other group (its producer's group, or, for a value made outside any group, those of what
  // its producer read). gdeps[G]: the groups G's members read from (the same way). A group
  // depends on H when H is reachable over gdeps; a node may join group O only if none of its
  // reads from outside O depends on O (else the contraction would close a cycle). Both sets
  // are kept per group, not per value made so far: a group that comes to depend on another
  // later makes every value it produced depend on it too.
  std::unordered_map<std::string, std::unordered_set<int>> vdeps;
  std::vector<std::unordered_set<int>> gdeps;
  auto depends_on = [&](const std::unordered_set<int>& from, int target) {
    std::vector<int> stack(from.begin(), from.end());
    std::unordered_set<int> seen(from.begin(), from.end());
    while (!stack.empty()) {
      const int g = stack.back();
      stack.pop_back();
      if (g == target) return true;
      for (int h : gdeps[static_cast<size_t>(g)])
        if (seen.insert(h).second) stack.push_back(h);
    }
    return false;
  };
  std::map<std::string, int> open;  // by key: the group a node of that key may join
  for (size_t i = 0; i < n; ++i) {
    const Node& node = *g.nodes[i];
    const std::vector<std::string> reads = reads_of(node);
    const bool here = g.placed_here.empty() || g.placed_here[i];
    const std::string k = here ? key(i, group_of) : std::string();
    if (!k.empty()) {
      auto it = open.find(k);
      int o = it == open.end() ? -1 : it->second;
      if (o >= 0)
        for (const auto& v : reads) {
          if (v.empty()) continue;
          const int64_t p = g.producer_of(v);
          if (p >= 0 && group_of[static_cast<size_t>(p)] == o) continue;  // inside the group
          auto d = vdeps.find(v);
          if (d != vdeps.end() && depends_on(d->second, o)) {
            o = -1;  // would close a cycle: a new group of this key
            break;
          }
        }
      if (o < 0) {
        groups.emplace_back();
        gdeps.emplace_back();
        o = static_cast<int>(groups.size() - 1);
        open[k] = o;
      }
      group_of[i] = o;
      groups[static_cast<size_t>(o)].push_back(i);
    }
    // What this node's reads bring in.
    std::unordered_set<int> in;
    for (const auto& v : reads) {
      if (v.empty()) continue;
      const int64_t p = g.producer_of(v);
      if (p >= 0 && group_of[static_cast<size_t>(p)] >= 0 &&
          group_of[static_cast<size_t>(p)] == group_of[i])
        continue;
      auto d = vdeps.find(v);
      if (d != vdeps.end()) in.insert(d->second.begin(), d->second.end());
    }
    if (group_of[i] >= 0) {
      auto& gd = gdeps[static_cast<size_t>(group_of[i])];
      gd.insert(in.begin(), in.end());
      for (const auto& out : node.outputs)
        if (!out.empty()) vdeps[out] = {group_of[i]};
    } else {
      for (const auto& out : node.outputs)
        if (!out.empty() && !in.empty()) vdeps[out] = in;
    }
  }
  std::vector<Region> result;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    Region fg;
    fg.members = groups[gi];
    std::unordered_set<std::string> seen;
    for (size_t i : fg.members) {
      for (const auto& v : reads_of(*g.nodes[i])) {
        if (v.empty() || seen.count(v) || g.constant(v)) continue;
        const int64_t p = g.producer_of(v);
        if (p >= 0 && group_of[static_cast<size_t>(p)] == static_cast<int>(gi)) continue;
        seen.insert(v);
        fg.inputs.push_back(v);
      }
    }
    for (size_t i : fg.members) {
      for (const auto& o : g.nodes[i]->outputs) {
        if (o.empty()) continue;
        bool out = g.is_graph_output(o);
        for (size_t c : g.readers_of(o))
          if (group_of[c] != static_cast<int>(gi)) out = true;
        if (out) fg.outputs.push_back(o);
      }
    }
    result.push_back(std::move(fg));
  }
  return result;
}

std::vector<size_t> groups_closing_cycles(const FusionGraph& g,
                                          const std::vector<std::vector<size_t>>& groups) {
  const size_t n = g.nodes.size();
  std::vector<std::vector<size_t>> node_deps(n);  // the nodes each node reads from
  for (size_t i = 0; i < n; ++i)
    for (const auto& v : reads_of(*g.nodes[i])) {
      const int64_t p = v.empty() ? -1 : g.producer_of(v);
      if (p >= 0 && static_cast<size_t>(p) != i) node_deps[i].push_back(static_cast<size_t>(p));
    }
  std::vector<bool> dropped(groups.size(), false);
  std::vector<size_t> out;
  for (;;) {
    // Units: the kept groups, then every node outside them; Kahn over the contraction.
    std::vector<size_t> unit(n);
    for (size_t i = 0; i < n; ++i) unit[i] = groups.size() + i;
    for (size_t r = 0; r < groups.size(); ++r)
      if (!dropped[r])
        for (size_t m : groups[r]) unit[m] = r;
    const size_t units = groups.size() + n;
    std::vector<std::unordered_set<size_t>> deps(units);
    for (size_t i = 0; i < n; ++i)
      for (size_t p : node_deps[i])
        if (unit[p] != unit[i]) deps[unit[i]].insert(unit[p]);
    std::vector<std::vector<size_t>> users(units);
    std::vector<size_t> pending(units, 0);
    std::vector<size_t> ready;
    for (size_t u = 0; u < units; ++u) {
      pending[u] = deps[u].size();
      for (size_t d : deps[u]) users[d].push_back(u);
      if (pending[u] == 0) ready.push_back(u);
    }
    while (!ready.empty()) {
      const size_t u = ready.back();
      ready.pop_back();
      for (size_t w : users[u])
        if (--pending[w] == 0) ready.push_back(w);
    }
    size_t stuck = groups.size();
    for (size_t r = groups.size(); r-- > 0;)
      if (!dropped[r] && pending[r] > 0) {
        stuck = r;
        break;
      }
    if (stuck == groups.size()) break;  // (a stuck node alone cannot be: the graph is acyclic)
    dropped[stuck] = true;
    out.push_back(stuck);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace tensord
