// Schemas of the loss and normalisation ops (opset 17 forms): NegativeLogLikelihoodLoss,
// SoftmaxCrossEntropyLoss (optional second output log_prob) and MeanVarianceNormalization.
#include <set>
#include <string>
#include <vector>

#include "core/op_registry.h"
#include "core/ops/all_ops.h"

namespace tensord {
namespace {

// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss take float16/float32/float64 scores
// (no bfloat16 in opset 13+) and int32/int64 targets.
bool is_loss_float(DType t) {
  return t == DType::kFloat16 || t == DType::kFloat32 || t == DType::kFloat64;
}

// Two dims agree when equal or either is unknown (-1).
bool dims_agree(int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; }

// Shared by NegativeLogLikelihoodLoss (`name` "input") and SoftmaxCrossEntropyLoss ("scores"):
// input [N, C, d1, ..., dk], target [N, d1, ..., dk], optional weight [C].
Status infer_loss(InferenceContext& ctx, const char* input_name, bool log_prob_output) {
  const DType dtype = ctx.input_dtype(0);
  if (!is_loss_float(dtype))
    return ctx.error("{} must be float16, float32 or float64, got {}", input_name,
                     dtype_name(dtype));
  const DType tdtype = ctx.input_dtype(1);
  if (tdtype != DType::kInt32 && tdtype != DType::kInt64)
    return ctx.error("target must be int32 or int64, got {}", dtype_name(tdtype));
  const Shape& in = ctx.input_shape(0);
  const Shape& target = ctx.input_shape(1);
  if (in.size() < 2)
    return ctx.error("{} must have rank >= 2 ([N, C, d1, ...]), got shape {}", input_name,
                     shape_to_string(in));
  bool target_ok = target.size() + 1 == in.size() && dims_agree(target[0], in[0]);
  for (size_t i = 1; target_ok && i < target.size(); ++i)
    target_ok = dims_agree(target[i], in[i + 1]);
  if (!target_ok)
    return ctx.error(
        "target shape {} does not match {} shape {} (expected [N, d1, ...] of "
        "[N, C, d1, ...])",
        shape_to_string(target), input_name, shape_to_string(in));
  if (ctx.has_input(2)) {
    const DType wdtype = ctx.input_dtype(2);
    if (wdtype != dtype)
      return ctx.error("weight must have the dtype of {} ({}), got {}", input_name,
                       dtype_name(dtype), dtype_name(wdtype));
    const Shape& w = ctx.input_shape(2);
    if (w.size() != 1 || !dims_agree(w[0], in[1]))
      return ctx.error("weight must have shape [C] = [{}], got {}", in[1], shape_to_string(w));
  }
  TD_ASSIGN_OR_RETURN(std::string reduction, ctx.attr_string("reduction", "mean"));
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    return ctx.error("reduction must be 'none', 'sum' or 'mean', got '{}'", reduction);
  TD_RETURN_IF_ERROR(ctx.attr_int("ignore_index", 0).status());
  ctx.set_output(0, dtype, reduction == "none" ? target : Shape{});
  if (log_prob_output && ctx.num_outputs() > 1) ctx.set_output(1, dtype, in);
  return OkStatus();
}

Status infer_mvn(InferenceContext& ctx) {
  const DType dtype = ctx.input_dtype(0);
  if (!dtype_is_float(dtype))
    return ctx.error("X must be float16, bfloat16, float32 or float64, got {}", dtype_name(dtype));
  const Shape& in = ctx.input_shape(0);
  const int64_t rank = static_cast<int64_t>(in.size());
  TD_ASSIGN_OR_RETURN(std::vector<int64_t> axes, ctx.attr_ints("axes", {0, 2, 3}));
  std::set<int64_t> seen;
  for (int64_t a : axes) {
    if (a < -rank || a >= rank)
      return ctx.error("axis {} is out of range for X of shape {} (axes {})", a,
                       shape_to_string(in), axes);
    if (!seen.insert(a < 0 ? a + rank : a).second)
      return ctx.error("axis {} is repeated in axes {}", a, axes);
  }
  ctx.set_output(0, dtype, in);
  return OkStatus();
}

}  // namespace

void register_loss_ops(OpRegistry& r) {
  {
    OpSchema s;
    s.name = "NegativeLogLikelihoodLoss";
    s.min_inputs = 2;
    s.max_inputs = 3;
    s.attributes = {"reduction", "ignore_index"};
    s.infer = [](InferenceContext& ctx) {
      return infer_loss(ctx, "input", /*log_prob_output=*/false);
    };
    s.doc = "Negative log likelihood of log-probabilities input[N, C, ...] at target[N, ...].";
    r.add(std::move(s));
  }
  {
    OpSchema s;
    s.name = "SoftmaxCrossEntropyLoss";
    s.min_inputs = 2;
    s.max_inputs = 3;
    s.min_outputs = 1;
    s.max_outputs = 2;
    s.attributes = {"reduction", "ignore_index"};
    s.infer = [](InferenceContext& ctx) {
      return infer_loss(ctx, "scores", /*log_prob_output=*/true);
    };
    s.doc = "Cross entropy of softmax(scores) over axis 1 against target; optional log_prob.";
    r.add(std::move(s));
  }
  {
    OpSchema s;
    s.name = "MeanVarianceNormalization";
    s.min_inputs = 1;
    s.max_inputs = 1;
    s.attributes = {"axes"};
    s.infer = infer_mvn;
    s.doc = "(X - mean) / (std + 1e-9) over axes (default [0, 2, 3]).";
    r.add(std::move(s));
  }
}

}  // namespace tensord
