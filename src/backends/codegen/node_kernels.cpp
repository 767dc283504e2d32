#include "backends/codegen/node_kernels.h"

#include <algorithm>

#include "core/errors.h"
#include "core/node_attrs.h"

namespace tensord::codegen {
namespace {

class ViewKernel final : public Kernel {
 public:
  explicit ViewKernel(const Node& node) : node_(node) {}
  std::string name() const override { return "view"; }
  std::vector<int> host_inputs() const override {
    if (node_.op == "Reshape" || ((node_.op == "Squeeze" || node_.op == "Unsqueeze") &&
                                  node_.inputs.size() > 1 && !node_.inputs[1].empty()))
      return {1};
    return {};
  }
  Status run(KernelCall& call) override {
    TD_RETURN_IF_ERROR(check_unary_call(node_, call));
    const DeviceTensor& x = call.inputs[0];
    const TensorType& out = call.output_types[0];
    if (!shape_is_static(out.shape) || shape_numel(out.shape) != shape_numel(x.shape) ||
        out.dtype != x.dtype)
      return errors::Internal("{}: output {} is not a view of input {}", node_.label(),
                              shape_to_string(out.shape), shape_to_string(x.shape));
    call.outputs.assign(1, DeviceTensor{x.dtype, out.shape, x.buffer});
    return OkStatus();
  }

 private:
  Node node_;
};

std::vector<int64_t> ints(const HostTensor& t) {
  std::vector<int64_t> v;
  for (double d : t.to_double_vector()) v.push_back(static_cast<int64_t>(d));
  return v;
}

}  // namespace

bool is_view_op(const std::string& op) {
  return op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze" || op == "Identity";
}

Status check_unary_call(const Node& node, const KernelCall& call) {
  if (call.inputs.empty() || !call.inputs[0].defined() || call.output_types.empty())
    return errors::Internal("{}: no input", node.label());
  return OkStatus();
}

std::unique_ptr<Kernel> make_view_kernel(const Node& node) { return std::make_unique<ViewKernel>(node); }

const std::map<std::string, std::string>& reduce_ops() {
  static const std::map<std::string, std::string> t = {
      {"ReduceSum", "sum"},         {"ReduceMean", "mean"}, {"ReduceMax", "max"},
      {"ReduceMin", "min"},         {"ReduceProd", "prod"}, {"ReduceSumSquare", "sum_square"},
      {"ReduceL1", "l1"},           {"ReduceL2", "l2"},     {"ReduceLogSum", "log_sum"},
      {"ReduceLogSumExp", "log_sum_exp"}};
  return t;
}

Status reduce_axes(const Node& node, const KernelCall& call, int64_t rank, std::vector<bool>* mask, bool* noop) {
  NodeAttrs attrs(node);
  std::vector<int64_t> axes;
  *noop = false;
  if (attrs.has_attr("axes")) {  // before opset 13 (ReduceSum) / 18 (the others)
    TD_ASSIGN_OR_RETURN(axes, attrs.attr_ints("axes", {}));
  } else {  // axes as an input, possibly omitted or empty
    TD_ASSIGN_OR_RETURN(int64_t noop_attr, attrs.attr_int("noop_with_empty_axes", 0));
    if (node.inputs.size() > 1 && call.host_values.size() > 1 && !call.host_values[1].empty())
      axes = ints(call.host_values[1]);
    *noop = axes.empty() && noop_attr != 0;
  }
  mask->assign(static_cast<size_t>(rank), axes.empty());
  for (int64_t a : axes) {
    if (a < -rank || a >= rank)
      return errors::InvalidArgument("{}: axis {} is out of range for rank {}", node.label(), a, rank);
    const size_t k = static_cast<size_t>(a < 0 ? a + rank : a);
    if ((*mask)[k] && std::count(axes.begin(), axes.end(), a) > 1)
      return errors::InvalidArgument("{}: axis {} is repeated", node.label(), a);
    (*mask)[k] = true;
  }
  return OkStatus();
}

bool broadcast_shape(const std::vector<TensorType>& inputs, Shape* out) {
  size_t rank = 0;
  for (const auto& t : inputs)
    if (t.defined()) rank = std::max(rank, t.shape.size());
  Shape s(rank, 1);
  for (const auto& t : inputs) {
    if (!t.defined()) continue;
    for (size_t k = 0; k < t.shape.size(); ++k) {
      int64_t& d = s[rank - t.shape.size() + k];
      const int64_t v = t.shape[k];
      if (v == d || v == 1) continue;
      if (d != 1) return false;
      d = v;
    }
  }
  *out = s;
  return true;
}

Status slice_params(const Node& node, const KernelCall& call, const Shape& in, std::vector<int64_t>* starts,
                    std::vector<int64_t>* steps) {
  auto host = [&](size_t i) -> const HostTensor* {
    return i < call.host_values.size() && !call.host_values[i].empty() ? &call.host_values[i] : nullptr;
  };
  if (!host(1)) return errors::Internal("{}: no host copy of starts", node.label());
  const std::vector<int64_t> st = ints(*host(1));
  std::vector<int64_t> axes, sp;
  if (host(3)) axes = ints(*host(3));
  else for (size_t a = 0; a < st.size(); ++a) axes.push_back(static_cast<int64_t>(a));
  if (host(4)) sp = ints(*host(4));
  else sp.assign(st.size(), 1);
  if (axes.size() != st.size() || sp.size() != st.size())
    return errors::InvalidArgument("{}: starts, axes and steps differ in length", node.label());
  const int64_t rank = static_cast<int64_t>(in.size());
  starts->assign(in.size(), 0);
  steps->assign(in.size(), 1);
  for (size_t k = 0; k < st.size(); ++k) {
    int64_t a = axes[k] < 0 ? axes[k] + rank : axes[k];
    if (a < 0 || a >= rank) return errors::InvalidArgument("{}: axis {} out of range", node.label(), axes[k]);
    const int64_t dim = in[static_cast<size_t>(a)];
    if (sp[k] == 0) return errors::InvalidArgument("{}: a step is 0", node.label());
    int64_t s0 = st[k] < 0 ? st[k] + dim : st[k];
    s0 = sp[k] > 0 ? std::clamp<int64_t>(s0, 0, dim) : std::clamp<int64_t>(s0, 0, dim - 1);
    (*starts)[static_cast<size_t>(a)] = s0;
    (*steps)[static_cast<size_t>(a)] = sp[k];
  }
  return OkStatus();
}

OpCall template_call(const Node& node, const KernelCall& call) {
  OpCall c;
  c.node = &node;
  for (const auto& in : call.inputs) c.inputs.push_back(in.defined() ? in.type() : TensorType{});
  c.host.assign(call.inputs.size(), nullptr);
  for (size_t i = 0; i < call.host_values.size() && i < c.host.size(); ++i)
    if (!call.host_values[i].empty()) c.host[i] = &call.host_values[i];
  c.outputs = call.output_types;
  return c;
}

Status allocate_template_outputs(const OpPlan& plan, KernelCall& call) {
  call.outputs.assign(call.output_types.size(), DeviceTensor{});
  for (size_t o = 0; o < call.output_types.size(); ++o) {
    TensorType t = call.output_types[o];
    if (o < plan.output_shapes.size()) t.shape = plan.output_shapes[o];
    if (!t.defined()) continue;
    TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(t.dtype, t.shape));
    TD_ASSIGN_OR_RETURN(auto buffer, call.allocator->allocate(static_cast<size_t>(bytes)));
    call.outputs[o] = DeviceTensor{t.dtype, t.shape, buffer};
  }
  return OkStatus();
}

}  // namespace tensord::codegen
