#include "backend/backend.h"

#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/graph_utils.h"

namespace tensord {
namespace {

std::vector<std::string> reads_of(const Node& node) {
  std::vector<std::string> reads = node.inputs;
  for (const auto& v : implicit_inputs(node)) reads.push_back(v);
  return reads;
}

}  // namespace

std::vector<Region> partition_graph(
    const FusionGraph& g, const std::function<std::string(size_t, const std::vector<int>&)>& key) {
  const size_t n = g.nodes.size();
  std::unordered_map<std::string, size_t> producer;
  std::unordered_map<std::string, std::vector<size_t>> consumers;
  for (size_t i = 0; i < n; ++i) {
    for (const auto& o : g.nodes[i]->outputs)
      if (!o.empty()) producer[o] = i;
    for (const auto& v : reads_of(*g.nodes[i]))
      if (!v.empty()) consumers[v].push_back(i);
  }
  std::vector<int> group_of(n, -1);
  std::vector<std::vector<size_t>> groups;
  struct Open {
    int group = -1;
    std::unordered_set<std::string> tainted;  // outside values that depend on the group
  };
  std::map<std::string, Open> open;  // by key
  for (size_t i = 0; i < n; ++i) {
    const Node& node = *g.nodes[i];
    const std::vector<std::string> reads = reads_of(node);
    const bool here = g.placed_here.empty() || g.placed_here[i];
    const std::string k = here ? key(i, group_of) : std::string();
    if (!k.empty()) {
      Open& o = open[k];
      bool joins = o.group >= 0;
      for (const auto& v : reads)
        if (!v.empty() && o.tainted.count(v)) joins = false;
      if (!joins) {
        groups.emplace_back();
        o.group = static_cast<int>(groups.size() - 1);
        o.tainted.clear();
      }
      group_of[i] = o.group;
      groups[static_cast<size_t>(o.group)].push_back(i);
    }
    // Values this node produces depend on every open group it reads from (directly or
    // through tainted values), unless it is a member of that group.
    for (auto& [ok, o] : open) {
      if (o.group < 0 || group_of[i] == o.group) continue;
      bool depends = false;
      for (const auto& v : reads) {
        if (v.empty()) continue;
        auto p = producer.find(v);
        if (o.tainted.count(v) || (p != producer.end() && group_of[p->second] == o.group))
          depends = true;
      }
      if (depends)
        for (const auto& out : node.outputs)
          if (!out.empty()) o.tainted.insert(out);
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
        auto p = producer.find(v);
        if (p != producer.end() && group_of[p->second] == static_cast<int>(gi)) continue;
        seen.insert(v);
        fg.inputs.push_back(v);
      }
    }
    for (size_t i : fg.members) {
      for (const auto& o : g.nodes[i]->outputs) {
        if (o.empty()) continue;
        bool out = g.is_graph_output(o);
        for (size_t c : consumers[o])
          if (group_of[c] != static_cast<int>(gi)) out = true;
        if (out) fg.outputs.push_back(o);
      }
    }
    result.push_back(std::move(fg));
  }
  return result;
}

}  // namespace tensord
