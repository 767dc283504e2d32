#include "onnx/onnx_sequences.h"

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "onnx/onnx_import.h"

namespace tensord::onnx {
namespace {

namespace pb = ::onnx;

constexpr int64_t kMaxTrips = 256;  // a longer Loop is not unrolled
constexpr int kMaxDepth = 4;        // Loops inside unrolled bodies
// The most bytes of node protos an unrolling may copy in all (a body's constants are copied
// once per trip: a hostile model's large Constant in a long Loop must not multiply).
constexpr size_t kMaxUnrolledBytes = size_t{16} << 20;

// The integers of a small integer or bool tensor (at most 16 values), or false; decoded by the
// importer's own tensor reader (raw or typed data alike).
bool small_ints(const pb::TensorProto& t, std::vector<int64_t>* out) {
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0 || d > 16) return false;
    n *= d;
  }
  if (n > 16 || t.data_location() == pb::TensorProto::EXTERNAL) return false;
  if (t.data_type() != pb::TensorProto::INT64 && t.data_type() != pb::TensorProto::INT32 &&
      t.data_type() != pb::TensorProto::BOOL)
    return false;
  auto h = parse_tensor(t.SerializeAsString(), "a constant");
  if (!h.ok() || h->numel() != n) return false;
  out->clear();
  for (int64_t i = 0; i < n; ++i)
    out->push_back(h->dtype() == DType::kInt64   ? h->data<int64_t>()[i]
                   : h->dtype() == DType::kInt32 ? h->data<int32_t>()[i]
                                                 : (h->data<bool>()[i] ? 1 : 0));
  return true;
}

const pb::AttributeProto* find_attr(const pb::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

bool has_subgraph(const pb::NodeProto& n) {
  for (const auto& a : n.attribute())
    if (a.has_g() || a.graphs_size() > 0) return true;
  return false;
}

// Every value name a subgraph (and the subgraphs in it) reads.
void names_read(const pb::GraphProto& g, std::set<std::string>* out) {
  for (const auto& n : g.node()) {
    for (const auto& i : n.input()) out->insert(i);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) names_read(a.g(), out);
      for (const auto& sub : a.graphs()) names_read(sub, out);
    }
  }
}

class Resolver {
 public:
  explicit Resolver(int64_t max_nodes) : max_nodes_(max_nodes > 0 ? max_nodes : 100000) {}

  // Appends n's rewrite to out_; false: a sequence this cannot resolve (or too many nodes).
  bool node(const pb::NodeProto& n, int depth) {
    if (static_cast<int64_t>(out_.size()) > max_nodes_) return false;
    const std::string& op = n.op_type();
    const bool onnx_domain = n.domain().empty() || n.domain() == "ai.onnx";
    if (!onnx_domain) return plain(n);
    auto input = [&](int k) -> std::string {
      return k < n.input_size() ? n.input(k) : std::string();
    };
    auto seq = [&](int k) -> std::vector<std::string>* {
      auto it = seqs_.find(input(k));
      return it == seqs_.end() ? nullptr : &it->second;
    };
    auto int_of = [&](int k, int64_t* v) {
      auto it = ints_.find(input(k));
      if (it == ints_.end() || it->second.size() != 1) return false;
      *v = it->second[0];
      return true;
    };
    if (op == "Constant") {
      if (n.output_size() == 1) {
        std::vector<int64_t> v;
        if (const auto* a = find_attr(n, "value"); a && a->has_t() && small_ints(a->t(), &v))
          ints_[n.output(0)] = v;
        else if (const auto* ai = find_attr(n, "value_int"))
          ints_[n.output(0)] = {ai->i()};
      }
      return plain(n);
    }
    if (op == "Identity" && n.output_size() == 1) {
      if (auto* s = seq(0)) {
        seqs_[n.output(0)] = *s;
        return true;
      }
      if (auto it = ints_.find(input(0)); it != ints_.end()) ints_[n.output(0)] = it->second;
      return plain(n);
    }
    if (op == "SequenceEmpty" && n.output_size() == 1) {
      seqs_[n.output(0)] = {};
      return true;
    }
    if (op == "SequenceConstruct" && n.output_size() == 1) {
      for (const auto& i : n.input())
        if (i.empty() || seqs_.count(i)) return false;
      seqs_[n.output(0)] = {n.input().begin(), n.input().end()};
      return true;
    }
    if (op == "SequenceInsert" && n.output_size() == 1) {
      auto* s = seq(0);
      if (!s || input(1).empty() || seqs_.count(input(1))) return false;
      std::vector<std::string> list = *s;
      int64_t pos = static_cast<int64_t>(list.size());
      if (!input(2).empty()) {
        if (!int_of(2, &pos)) return false;
        if (pos < 0) pos += static_cast<int64_t>(list.size());
        if (pos < 0 || pos > static_cast<int64_t>(list.size())) return false;
      }
      list.insert(list.begin() + pos, input(1));
      seqs_[n.output(0)] = std::move(list);
      return true;
    }
    if (op == "SequenceErase" && n.output_size() == 1) {
      auto* s = seq(0);
      if (!s || s->empty()) return false;
      std::vector<std::string> list = *s;
      int64_t pos = -1;
      if (!input(1).empty() && !int_of(1, &pos)) return false;
      if (pos < 0) pos += static_cast<int64_t>(list.size());
      if (pos < 0 || pos >= static_cast<int64_t>(list.size())) return false;
      list.erase(list.begin() + pos);
      seqs_[n.output(0)] = std::move(list);
      return true;
    }
    if (op == "SequenceAt" && n.output_size() == 1) {
      auto* s = seq(0);
      int64_t pos;
      if (!s || !int_of(1, &pos)) return false;
      if (pos < 0) pos += static_cast<int64_t>(s->size());
      if (pos < 0 || pos >= static_cast<int64_t>(s->size())) return false;
      add_identity((*s)[static_cast<size_t>(pos)], n.output(0));
      return true;
    }
    if (op == "SequenceLength" && n.output_size() == 1) {
      auto* s = seq(0);
      if (!s) return false;
      pb::NodeProto c;
      c.set_op_type("Constant");
      c.set_name(fresh("SequenceLength"));
      c.add_output(n.output(0));
      auto* a = c.add_attribute();
      a->set_name("value");
      a->set_type(pb::AttributeProto::TENSOR);
      a->mutable_t()->set_data_type(pb::TensorProto::INT64);
      a->mutable_t()->add_int64_data(static_cast<int64_t>(s->size()));
      ints_[n.output(0)] = {static_cast<int64_t>(s->size())};
      out_.push_back(std::move(c));
      return true;
    }
    if (op == "ConcatFromSequence" && n.output_size() == 1) {
      auto* s = seq(0);
      const auto* axis = find_attr(n, "axis");
      const auto* new_axis = find_attr(n, "new_axis");
      if (!s || s->empty() || !axis || (new_axis && new_axis->i() != 0)) return false;
      pb::NodeProto c;
      c.set_op_type("Concat");
      c.set_name(fresh("ConcatFromSequence"));
      for (const auto& t : *s) c.add_input(t);
      c.add_output(n.output(0));
      auto* a = c.add_attribute();
      a->set_name("axis");
      a->set_type(pb::AttributeProto::INT);
      a->set_i(axis->i());
      out_.push_back(std::move(c));
      return true;
    }
    if (op == "Loop") {
      bool carries_sequence = false;
      for (int k = 2; k < n.input_size(); ++k) carries_sequence |= seqs_.count(n.input(k)) > 0;
      if (carries_sequence) return unroll(n, depth);
    }
    return plain(n);  // (a sequence op not resolved here is left for the importer to refuse)
  }

  void initializer(const pb::TensorProto& t) {
    std::vector<int64_t> v;
    if (!t.name().empty() && small_ints(t, &v)) ints_[t.name()] = v;
  }

  bool finish(pb::GraphProto* g) {
    if (seqs_.empty()) return false;  // nothing to resolve (or nothing resolvable)
    for (const auto& o : g->output())
      if (seqs_.count(o.name())) return false;
    // Every sequence value must be gone: no node left reads one.
    for (const auto& n : out_) {
      for (const auto& i : n.input())
        if (seqs_.count(i)) return false;
      std::set<std::string> inner;
      for (const auto& a : n.attribute()) {
        if (a.has_g()) names_read(a.g(), &inner);
        for (const auto& sub : a.graphs()) names_read(sub, &inner);
      }
      for (const auto& i : inner)
        if (seqs_.count(i)) return false;
    }
    g->clear_node();
    for (auto& n : out_) *g->add_node() = std::move(n);
    // Declared types of the values that are gone.
    auto* vi = g->mutable_value_info();
    for (int k = vi->size() - 1; k >= 0; --k)
      if (seqs_.count(vi->Get(k).name())) vi->DeleteSubrange(k, 1);
    return true;
  }

 private:
  bool plain(const pb::NodeProto& n) {
    for (const auto& i : n.input())
      if (seqs_.count(i)) return false;
    out_.push_back(n);
    return true;
  }

  std::string fresh(const std::string& what) {
    return "__tensord_seq_" + what + "_" + std::to_string(counter_++);
  }

  void add_identity(const std::string& from, const std::string& to) {
    pb::NodeProto c;
    c.set_op_type("Identity");
    c.set_name(fresh("Identity"));
    c.add_input(from);
    c.add_output(to);
    if (auto it = ints_.find(from); it != ints_.end()) ints_[to] = it->second;
    out_.push_back(std::move(c));
  }

  std::string constant(int64_t v, pb::TensorProto::DataType type) {
    pb::NodeProto c;
    c.set_op_type("Constant");
    const std::string name = fresh("Constant");
    c.set_name(name);
    c.add_output(name);
    auto* a = c.add_attribute();
    a->set_name("value");
    a->set_type(pb::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(type);
    if (type == pb::TensorProto::INT64)
      a->mutable_t()->add_int64_data(v);
    else
      a->mutable_t()->add_int32_data(static_cast<int32_t>(v));
    ints_[name] = {v};
    out_.push_back(std::move(c));
    return name;
  }

  // A Loop carrying a sequence: unrolled when its trip count is a constant, its condition
  // stays true and it has no scan outputs.
  bool unroll(const pb::NodeProto& n, int depth) {
    if (depth >= kMaxDepth || n.input_size() < 2 || n.input(0).empty()) return false;
    auto trips_it = ints_.find(n.input(0));
    if (trips_it == ints_.end() || trips_it->second.size() != 1) return false;
    const int64_t trips = trips_it->second[0];
    if (trips < 0 || trips > kMaxTrips) return false;
    if (!n.input(1).empty()) {
      auto c = ints_.find(n.input(1));
      if (c == ints_.end() || c->second.size() != 1 || c->second[0] == 0) return false;
    }
    const auto* body_attr = find_attr(n, "body");
    if (!body_attr || !body_attr->has_g()) return false;
    const pb::GraphProto& body = body_attr->g();
    const int carried = n.input_size() - 2;
    if (body.input_size() != 2 + carried || body.output_size() != 1 + carried ||
        n.output_size() > carried)
      return false;
    size_t body_bytes = 0;
    for (const auto& bn : body.node()) {
      if (has_subgraph(bn)) return false;
      body_bytes += bn.ByteSizeLong();
    }
    unrolled_bytes_ += body_bytes * static_cast<size_t>(trips);
    if (unrolled_bytes_ > kMaxUnrolledBytes) return false;
    std::vector<std::string> current(n.input().begin() + 2, n.input().end());
    for (const auto& c : current)
      if (c.empty()) return false;
    for (int64_t i = 0; i < trips; ++i) {
      std::map<std::string, std::string> rename;
      rename[body.input(0).name()] = constant(i, pb::TensorProto::INT64);
      const std::string cond_in = constant(1, pb::TensorProto::BOOL);
      rename[body.input(1).name()] = cond_in;
      for (int k = 0; k < carried; ++k) rename[body.input(2 + k).name()] = current[k];
      auto renamed = [&](const std::string& name) {
        auto it = rename.find(name);
        return it == rename.end() ? name : it->second;  // a name of the outer graph
      };
      for (const auto& bn : body.node()) {
        pb::NodeProto c = bn;
        c.set_name(fresh(bn.op_type()));
        for (int k = 0; k < c.input_size(); ++k)
          if (!c.input(k).empty()) c.set_input(k, renamed(c.input(k)));
        for (int k = 0; k < c.output_size(); ++k) {
          if (c.output(k).empty()) continue;
          const std::string to = fresh("v");
          rename[c.output(k)] = to;
          c.set_output(k, to);
        }
        if (!node(c, depth + 1)) return false;
      }
      const std::string cond_out = renamed(body.output(0).name());
      if (cond_out != cond_in) {
        auto c = ints_.find(cond_out);
        if (c == ints_.end() || c->second.size() != 1 || c->second[0] == 0) return false;
      }
      for (int k = 0; k < carried; ++k) current[k] = renamed(body.output(1 + k).name());
    }
    for (int k = 0; k < n.output_size(); ++k) {
      if (n.output(k).empty()) continue;
      if (auto it = seqs_.find(current[k]); it != seqs_.end())
        seqs_[n.output(k)] = it->second;
      else
        add_identity(current[k], n.output(k));
    }
    return true;
  }

  int64_t max_nodes_;
  std::vector<pb::NodeProto> out_;
  std::map<std::string, std::vector<std::string>> seqs_;  // sequence value -> its tensors
  std::map<std::string, std::vector<int64_t>> ints_;      // small integer constants
  int64_t counter_ = 0;
  size_t unrolled_bytes_ = 0;
};

}  // namespace

bool resolve_static_sequences(pb::GraphProto* g, int64_t max_nodes) {
  bool any = false;
  for (const auto& n : g->node()) {
    const std::string& op = n.op_type();
    if (op.rfind("Sequence", 0) == 0 || op == "SplitToSequence" || op == "ConcatFromSequence") {
      any = true;
      break;
    }
  }
  if (!any) return false;
  Resolver r(max_nodes);
  for (const auto& t : g->initializer()) r.initializer(t);
  for (const auto& n : g->node())
    if (!r.node(n, 0)) return false;
  return r.finish(g);
}

}  // namespace tensord::onnx
