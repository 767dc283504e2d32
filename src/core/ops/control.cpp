// Schemas of the control-flow ops: If, Loop, Scan (opset 9+ form). Their bodies are graph
// attributes run by the backend; output types come from the bodies' declared outputs, with
// dims left unknown where iterations decide them.
#include "core/op_registry.h"
#include "core/ops/all_ops.h"

namespace tensord {
namespace {

constexpr int kManyOutputs = 1 << 20;

Result<const Graph*> body_attr(const InferenceContext& ctx, const std::string& name) {
  const Attribute* a = ctx.attr(name);
  if (!a) return ctx.error("missing graph attribute '{}'", name);
  const auto* g = a->get_if<std::shared_ptr<const Graph>>();
  if (!g || !*g) return ctx.error("attribute '{}' must be a graph", name);
  return g->get();
}

// Declared type of a body output; unknown dims stay -1.
TensorType declared(const Graph& g, size_t i) {
  return i < g.outputs.size() ? g.outputs[i].type : TensorType{};
}

Shape unknown_dims(size_t rank) { return Shape(rank, -1); }

Status infer_if(InferenceContext& ctx) {
  if (ctx.input_dtype(0) != DType::kBool) return ctx.error("cond must be bool, got {}", dtype_name(ctx.input_dtype(0)));
  if (shape_is_static(ctx.input_shape(0)) && shape_numel(ctx.input_shape(0)) != 1)
    return ctx.error("cond must have one element, got shape {}", shape_to_string(ctx.input_shape(0)));
  TD_ASSIGN_OR_RETURN(const Graph* then_g, body_attr(ctx, "then_branch"));
  TD_ASSIGN_OR_RETURN(const Graph* else_g, body_attr(ctx, "else_branch"));
  const size_t n = static_cast<size_t>(ctx.num_outputs());
  if (then_g->outputs.size() != n || else_g->outputs.size() != n)
    return ctx.error("then_branch has {} outputs and else_branch {}, but the node has {}",
                     then_g->outputs.size(), else_g->outputs.size(), n);
  for (size_t i = 0; i < n; ++i) {
    TensorType t = declared(*then_g, i), e = declared(*else_g, i);
    DType dt = t.defined() ? t.dtype : e.dtype;
    if (t.defined() && e.defined() && t.dtype != e.dtype)
      return ctx.error("output {}: then_branch gives {}, else_branch {}", i, dtype_name(t.dtype),
                       dtype_name(e.dtype));
    Shape s = t.shape;
    if (t.shape != e.shape) s = unknown_dims(t.shape.size());
    if (dt == DType::kUndefined) dt = DType::kFloat32;  // decided by the branch that runs
    ctx.set_output(static_cast<int>(i), dt, s);
  }
  return OkStatus();
}

Status infer_loop(InferenceContext& ctx) {
  TD_ASSIGN_OR_RETURN(const Graph* body, body_attr(ctx, "body"));
  const int n_carried = ctx.num_inputs() - 2;
  if (n_carried < 0) return ctx.error("expects at least 2 inputs (M, cond), got {}", ctx.num_inputs());
  if (ctx.has_input(0) && ctx.input_dtype(0) != DType::kInt64)
    return ctx.error("M must be int64, got {}", dtype_name(ctx.input_dtype(0)));
  if (ctx.has_input(1) && ctx.input_dtype(1) != DType::kBool)
    return ctx.error("cond must be bool, got {}", dtype_name(ctx.input_dtype(1)));
  if (static_cast<int>(body->inputs.size()) != 2 + n_carried)
    return ctx.error("body takes {} inputs, expected {} (iteration, cond, {} loop-carried)",
                     body->inputs.size(), 2 + n_carried, n_carried);
  const int n_scan = static_cast<int>(body->outputs.size()) - 1 - n_carried;
  if (n_scan < 0)
    return ctx.error("body has {} outputs, expected at least {} (cond + loop-carried)",
                     body->outputs.size(), 1 + n_carried);
  if (ctx.num_outputs() > n_carried + n_scan)
    return ctx.error("node has {} outputs, the body gives {} loop-carried and {} scan outputs",
                     ctx.num_outputs(), n_carried, n_scan);
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    if (i < n_carried) {
      const TensorType& init = ctx.input_type(2 + i);
      const TensorType d = declared(*body, static_cast<size_t>(1 + i));
      ctx.set_output(i, init.dtype, d.shape == init.shape ? init.shape : unknown_dims(init.shape.size()));
    } else {
      const TensorType d = declared(*body, static_cast<size_t>(1 + i));
      Shape s{-1};
      for (size_t k = 0; k < d.shape.size(); ++k) s.push_back(-1);
      ctx.set_output(i, d.defined() ? d.dtype : DType::kFloat32, s);
    }
  }
  return OkStatus();
}

Status infer_scan(InferenceContext& ctx) {
  TD_ASSIGN_OR_RETURN(const Graph* body, body_attr(ctx, "body"));
  TD_ASSIGN_OR_RETURN(int64_t m, ctx.attr_int("num_scan_inputs", -1));
  if (m < 1 || m > ctx.num_inputs())
    return ctx.error("num_scan_inputs {} must be in [1, {}]", m, ctx.num_inputs());
  const int n_state = ctx.num_inputs() - static_cast<int>(m);
  if (static_cast<int>(body->inputs.size()) != ctx.num_inputs())
    return ctx.error("body takes {} inputs, the node gives {}", body->inputs.size(), ctx.num_inputs());
  const int k = static_cast<int>(body->outputs.size()) - n_state;
  if (k < 0 || ctx.num_outputs() != n_state + k)
    return ctx.error("node has {} outputs, the body gives {} states and {} scan outputs",
                     ctx.num_outputs(), n_state, k);
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    if (i < n_state) {
      ctx.set_output(i, ctx.input_dtype(i), ctx.input_shape(i));
    } else {
      const TensorType d = declared(*body, static_cast<size_t>(i));
      ctx.set_output(i, d.defined() ? d.dtype : DType::kFloat32, unknown_dims(d.shape.size() + 1));
    }
  }
  return OkStatus();
}

}  // namespace

void register_control_ops(OpRegistry& r) {
  r.add({"If", 1, 1, 1, kManyOutputs, {"then_branch", "else_branch"}, infer_if,
         "runs one of two subgraphs"});
  r.add({"Loop", 2, -1, 0, kManyOutputs, {"body"}, infer_loop, "runs a subgraph repeatedly"});
  r.add({"Scan", 1, -1, 1, kManyOutputs,
         {"body", "num_scan_inputs", "scan_input_axes", "scan_input_directions",
          "scan_output_axes", "scan_output_directions"},
         infer_scan, "iterates a subgraph over slices of its inputs"});
}

}  // namespace tensord
