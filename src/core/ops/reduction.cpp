// Schemas of the reductions: ReduceSum takes `axes` as an optional input with
// noop_with_empty_axes (opset 13); every other Reduce* takes `axes` either as an attribute (up to
// opset 17; the importer also moves a constant opset-18 axes input here, where the compiler's
// passes read it) or as an optional input with noop_with_empty_axes (opset 18), never both.
// ArgMax and ArgMin.
#include <set>
#include <string>

#include "core/op_registry.h"
#include "core/ops/all_ops.h"

namespace tensord {
namespace {


Shape reduced_shape(const Shape& in, const std::vector<bool>& reduce, bool keepdims) {
  Shape out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!reduce[i])
      out.push_back(in[i]);
    else if (keepdims)
      out.push_back(1);
  }
  return out;
}

// Shared by every Reduce*: `axes_from_input` selects ReduceSum's opset-13 form.
// `allow_bool`: ReduceMax and ReduceMin take bool data since opset 20 (any / all).
Status infer_reduce(InferenceContext& ctx, bool axes_from_input, bool allow_bool = false) {
  const DType dtype = ctx.input_dtype(0);
  if (!dtype_is_numeric(dtype) && !(allow_bool && dtype == DType::kBool))
    return ctx.error("data must be numeric{}, got {}", allow_bool ? " or bool" : "",
                     dtype_name(dtype));
  const Shape& in = ctx.input_shape(0);
  const int64_t rank = static_cast<int64_t>(in.size());
  TD_ASSIGN_OR_RETURN(int64_t keepdims, ctx.attr_int("keepdims", 1));
  std::vector<int64_t> axes;
  TD_ASSIGN_OR_RETURN(int64_t noop_attr, ctx.attr_int("noop_with_empty_axes", 0));
  bool noop = noop_attr != 0;
  if (ctx.has_input(1) && ctx.has_attr("axes"))
    return ctx.error("axes is given both as an attribute and as input 1; give one");
  if (axes_from_input || ctx.has_input(1)) {
    if (ctx.has_input(1)) {
      if (ctx.input_dtype(1) != DType::kInt64)
        return ctx.error("axes must be int64, got {}", dtype_name(ctx.input_dtype(1)));
      const Shape& as = ctx.input_shape(1);
      if (as.size() != 1)
        return ctx.error("axes must be a 1-D tensor, got shape {}", shape_to_string(as));
      TD_ASSIGN_OR_RETURN(auto v, ctx.input_ints(1));
      if (!v) {
        if (as[0] == 0) {
          // Known to be empty: handled below like an absent input.
        } else if (keepdims) {
          ctx.set_output(0, dtype, Shape(in.size(), -1));
          return OkStatus();
        } else if (as[0] > 0 && as[0] <= rank) {
          ctx.set_output(0, dtype, Shape(static_cast<size_t>(rank - as[0]), -1));
          return OkStatus();
        } else if (as[0] > rank) {
          return ctx.error("{} axes given for an input of rank {}", as[0], rank);
        } else {
          return ctx.unimplemented("the length of the axes input is unknown");
        }
      } else {
        axes = *v;
      }
    }
  } else {
    TD_ASSIGN_OR_RETURN(axes, ctx.attr_ints("axes"));
  }
  noop = noop && axes.empty();
  std::vector<bool> reduce(in.size(), axes.empty() && !noop);
  std::set<int64_t> seen;
  for (int64_t a : axes) {
    if (a < -rank || a >= rank)
      return ctx.error("axis {} is out of range for rank {} (axes {})", a, rank, axes);
    const int64_t n = a < 0 ? a + rank : a;
    if (!seen.insert(n).second) return ctx.error("axis {} is repeated in axes {}", a, axes);
    reduce[static_cast<size_t>(n)] = true;
  }
  ctx.set_output(0, dtype, reduced_shape(in, reduce, keepdims != 0));
  return OkStatus();
}

Status infer_arg(InferenceContext& ctx) {
  const DType dtype = ctx.input_dtype(0);
  if (!dtype_is_numeric(dtype)) return ctx.error("data must be numeric, got {}", dtype_name(dtype));
  const Shape& in = ctx.input_shape(0);
  const int64_t rank = static_cast<int64_t>(in.size());
  if (rank == 0) return ctx.error("data must have rank >= 1, got a scalar");
  TD_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis", 0));
  TD_ASSIGN_OR_RETURN(int64_t keepdims, ctx.attr_int("keepdims", 1));
  TD_RETURN_IF_ERROR(ctx.attr_int("select_last_index", 0).status());
  if (axis < -rank || axis >= rank)
    return ctx.error("axis {} is out of range for rank {}", axis, rank);
  if (axis < 0) axis += rank;
  if (in[static_cast<size_t>(axis)] == 0)
    return ctx.error("cannot take the arg of an empty axis {} (input {})", axis,
                     shape_to_string(in));
  std::vector<bool> reduce(in.size(), false);
  reduce[static_cast<size_t>(axis)] = true;
  ctx.set_output(0, DType::kInt64, reduced_shape(in, reduce, keepdims != 0));
  return OkStatus();
}

}  // namespace

void register_reduction_ops(OpRegistry& r) {
  const char* attr_form[] = {"ReduceMean",   "ReduceMax",       "ReduceMin",
                             "ReduceProd",   "ReduceL1",        "ReduceL2",
                             "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};
  for (const char* name : attr_form) {
    OpSchema s;
    s.name = name;
    s.min_inputs = 1;
    s.max_inputs = 2;
    s.attributes = {"axes", "keepdims", "noop_with_empty_axes"};
    const bool allow_bool = std::string(name) == "ReduceMax" || std::string(name) == "ReduceMin";
    s.infer = [allow_bool](InferenceContext& ctx) {
      return infer_reduce(ctx, /*axes_from_input=*/false, allow_bool);
    };
    s.doc = "Reduces over the axes attribute or input (all axes when absent, none with "
            "noop_with_empty_axes).";
    r.add(std::move(s));
  }
  {
    OpSchema s;
    s.name = "ReduceSum";
    s.min_inputs = 1;
    s.max_inputs = 2;
    s.attributes = {"keepdims", "noop_with_empty_axes"};
    s.infer = [](InferenceContext& ctx) { return infer_reduce(ctx, /*axes_from_input=*/true); };
    s.doc = "Sums over the axes input (all axes, or none with noop_with_empty_axes, when empty).";
    r.add(std::move(s));
  }
  for (const char* name : {"ArgMax", "ArgMin"}) {
    OpSchema s;
    s.name = name;
    s.min_inputs = 1;
    s.max_inputs = 1;
    s.attributes = {"axis", "keepdims", "select_last_index"};
    s.infer = infer_arg;
    s.doc = "Index (int64) of the largest/smallest element along axis.";
    r.add(std::move(s));
  }
}

}  // namespace tensord
