// Schemas of ONNX's training-domain optimisers (ai.onnx.preview.training, version 1): Adagrad,
// Momentum, Adam. Registered as "ai.onnx.preview.training.<op>" (infer_node looks a node up by
// domain and op). Inputs: R (learning rate, scalar), T (update count, int64 scalar), then n
// tensors X, n gradients G and the n-tensor groups of state; outputs: the n new X, then the new
// state groups, each of its X's type.
#include "core/op_registry.h"

namespace tensord {

namespace {

OpSchema optimizer_schema(const char* name, int state_groups, std::set<std::string> attrs,
                          const char* doc) {
  OpSchema s;
  s.name = std::string("ai.onnx.preview.training.") + name;
  s.min_inputs = 2 + 2 + state_groups;
  s.max_inputs = -1;
  s.min_outputs = 1 + state_groups;
  s.max_outputs = 1 << 20;
  s.attributes = std::move(attrs);
  s.doc = doc;
  s.infer = [state_groups](InferenceContext& ctx) -> Status {
    const int groups = 2 + state_groups;  // X, G, state...
    const int tensors = ctx.num_inputs() - 2;
    if (tensors % groups != 0)
      return ctx.error("expects R, T and {} groups of equally many tensors, got {} inputs", groups,
                       ctx.num_inputs());
    const int n = tensors / groups;
    if (ctx.num_outputs() != n * (1 + state_groups))
      return ctx.error("expects {} outputs for {} tensors, got {}", n * (1 + state_groups), n,
                       ctx.num_outputs());
    if (!ctx.input_type(0).shape.empty() && shape_numel(ctx.input_shape(0)) != 1)
      return ctx.error("R must be a scalar, got shape {}", shape_to_string(ctx.input_shape(0)));
    if (!dtype_is_float(ctx.input_dtype(0)))
      return ctx.error("R must be floating point, got {}", dtype_name(ctx.input_dtype(0)));
    if (ctx.input_dtype(1) != DType::kInt64)
      return ctx.error("T must be int64, got {}", dtype_name(ctx.input_dtype(1)));
    for (int i = 0; i < n; ++i) {
      const TensorType& x = ctx.input_type(2 + i);
      if (!dtype_is_float(x.dtype))
        return ctx.error("X{} must be floating point, got {}", i, dtype_name(x.dtype));
      for (int g = 1; g < groups; ++g) {
        const TensorType& t = ctx.input_type(2 + g * n + i);
        if (t.dtype != x.dtype || t.shape != x.shape)
          return ctx.error("input {} ({} {}) must match X{} ({} {})", 2 + g * n + i,
                           dtype_name(t.dtype), shape_to_string(t.shape), i, dtype_name(x.dtype),
                           shape_to_string(x.shape));
      }
      for (int o = 0; o < 1 + state_groups; ++o) ctx.set_output(o * n + i, x.dtype, x.shape);
    }
    return OkStatus();
  };
  return s;
}

}  // namespace

void register_training_ops(OpRegistry& r) {
  r.add(optimizer_schema("Adagrad", 1, {"decay_factor", "epsilon", "norm_coefficient"},
                         "Adagrad update of X given G and the squared-gradient sums H."));
  r.add(optimizer_schema("Momentum", 1, {"alpha", "beta", "mode", "norm_coefficient"},
                         "Momentum (standard or Nesterov) update of X given G and momentum V."));
  r.add(optimizer_schema("Adam", 2,
                         {"alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"},
                         "Adam update of X given G, averaged gradient V and squared gradient H."));
}

}  // namespace tensord
