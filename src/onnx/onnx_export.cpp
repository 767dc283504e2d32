#include "onnx/onnx_export.h"

#include <onnx/onnx_pb.h>

#include <climits>
#include <fstream>
#include <set>

#include "core/errors.h"
#include "core/graph_utils.h"
#include "core/op_registry.h"
#include "tensord/version.h"

namespace tensord::onnx {
namespace {

namespace pb = ::onnx;

constexpr int64_t kOpset = 17;
constexpr int64_t kIrVersion = 8;  // the IR version of opset 17 (ONNX 1.12)

Status write_tensor(const HostTensor& t, const std::string& name, pb::TensorProto* out) {
  if (t.empty()) return errors::InvalidArgument("tensor '{}' has no value", name);
  out->set_name(name);
  out->set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.shape()) out->add_dims(d);
  if (t.nbytes())
    out->set_raw_data(t.data(), t.nbytes());
  else
    out->set_raw_data("");
  return OkStatus();
}

// Symbolic dims get a stable name per value and axis: "input_dim0".
void write_value_info(const ValueInfo& v, pb::ValueInfoProto* out) {
  out->set_name(v.name);
  if (!v.type.defined()) return;  // allowed in subgraphs: the type comes from the outer op
  auto* tt = out->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(v.type.dtype));
  auto* shape = tt->mutable_shape();
  for (size_t i = 0; i < v.type.shape.size(); ++i) {
    auto* dim = shape->add_dim();
    if (v.type.shape[i] >= 0)
      dim->set_dim_value(v.type.shape[i]);
    else
      dim->set_dim_param(v.name + "_dim" + std::to_string(i));
  }
}

struct Exporter {
  std::set<std::string> domains;  // non-default domains the nodes use

  Status attribute(const std::string& name, const Attribute& a, pb::AttributeProto* out) {
    using A = pb::AttributeProto;
    out->set_name(name);
    switch (a.kind()) {
      case Attribute::Kind::kInt:
        out->set_type(A::INT);
        out->set_i(*a.get_if<int64_t>());
        break;
      case Attribute::Kind::kFloat:
        out->set_type(A::FLOAT);
        out->set_f(*a.get_if<float>());
        break;
      case Attribute::Kind::kString:
        out->set_type(A::STRING);
        out->set_s(*a.get_if<std::string>());
        break;
      case Attribute::Kind::kInts:
        out->set_type(A::INTS);
        for (int64_t v : *a.get_if<std::vector<int64_t>>()) out->add_ints(v);
        break;
      case Attribute::Kind::kFloats:
        out->set_type(A::FLOATS);
        for (float v : *a.get_if<std::vector<float>>()) out->add_floats(v);
        break;
      case Attribute::Kind::kStrings:
        out->set_type(A::STRINGS);
        for (const auto& v : *a.get_if<std::vector<std::string>>()) out->add_strings(v);
        break;
      case Attribute::Kind::kTensor:
        out->set_type(A::TENSOR);
        TD_RETURN_IF_ERROR(write_tensor(*a.get_if<HostTensor>(), "", out->mutable_t()));
        break;
      case Attribute::Kind::kGraph: {
        const auto& sub = *a.get_if<std::shared_ptr<const Graph>>();
        if (!sub) return errors::InvalidArgument("graph attribute '{}' is empty", name);
        out->set_type(A::GRAPH);
        TD_RETURN_IF_ERROR(graph(*sub, out->mutable_g()));
        break;
      }
    }
    return OkStatus();
  }

  Status graph(const Graph& g, pb::GraphProto* out) {
    out->set_name(g.name.empty() ? "tensord" : g.name);
    for (const auto& in : g.inputs) write_value_info(in, out->add_input());
    for (const auto& o : g.outputs) write_value_info(o, out->add_output());
    for (const auto& [name, value] : g.initializers) {
      Status s = write_tensor(value, name, out->add_initializer());
      if (!s.ok()) return s.with_context("initializer '" + name + "'");
    }
    for (const Node& n : g.nodes) {
      auto* np = out->add_node();
      np->set_name(n.name);
      np->set_op_type(n.op);
      if (!n.domain.empty()) {
        np->set_domain(n.domain);
        domains.insert(n.domain);
      }
      for (const auto& i : n.inputs) np->add_input(i);
      for (const auto& o : n.outputs) np->add_output(o);
      for (const auto& [name, a] : n.attrs) {
        Status s = attribute(name, a, np->add_attribute());
        if (!s.ok()) return s.with_context(n.label());
      }
    }
    return OkStatus();
  }
};

// Fills in the type of top-level outputs that have none, from schema inference on the
// declared input types (ONNX requires typed graph outputs). Best effort: an output that
// inference cannot type keeps no type and the checker will say so.
Graph with_output_types(const Graph& graph) {
  bool missing = false;
  for (const auto& o : graph.outputs) missing |= !o.type.defined();
  if (!missing) return graph;
  std::vector<TensorType> input_types;
  for (const auto& in : graph.inputs) input_types.push_back(in.type);
  auto types = infer_graph(OpRegistry::global(), graph, input_types);
  if (!types.ok()) return graph;
  Graph out = graph;
  for (auto& o : out.outputs) {
    if (o.type.defined()) continue;
    auto it = types->values.find(o.name);
    if (it != types->values.end() && it->second.ok()) o.type = *it->second;
  }
  return out;
}

}  // namespace

Result<std::string> export_model(const Graph& graph) {
  pb::ModelProto mp;
  mp.set_ir_version(kIrVersion);
  mp.set_producer_name("tensord");
  mp.set_producer_version(kVersion);
  Exporter ex;
  TD_RETURN_IF_ERROR(ex.graph(with_output_types(graph), mp.mutable_graph()));
  auto* opset = mp.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  for (const auto& d : ex.domains) {
    auto* o = mp.add_opset_import();
    o->set_domain(d);
    o->set_version(1);
  }
  const size_t size = mp.ByteSizeLong();
  if (size > static_cast<size_t>(INT_MAX))
    return errors::InvalidArgument(
        "the model is {} bytes, past protobuf's 2 GiB limit (external data is not written)", size);
  std::string bytes;
  if (!mp.SerializeToString(&bytes)) return errors::Internal("serializing the ONNX model failed");
  return bytes;
}

Status export_file(const Graph& graph, const std::string& path) {
  TD_ASSIGN_OR_RETURN(std::string bytes, export_model(graph));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return errors::InvalidArgument("cannot write '{}'", path);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) return errors::DataLoss("error writing '{}'", path);
  return OkStatus();
}

}  // namespace tensord::onnx
