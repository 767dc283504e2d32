// Schemas of the shape and data-movement ops (opset 17 forms): Constant, Identity, Reshape,
// Flatten, Squeeze, Unsqueeze, Transpose, Concat, Split, Slice, Gather, GatherElements,
// GatherND, ScatterElements, ScatterND, Shape, Size, Expand, Tile, Pad, ConstantOfShape, Range,
// OneHot, NonZero, Trilu, CumSum, TopK, DepthToSpace, SpaceToDepth, EyeLike.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

#include "core/op_registry.h"
#include "core/ops/all_ops.h"

namespace tensord {
namespace {

using IntsOpt = std::optional<std::vector<int64_t>>;

bool is_index_type(DType t) { return t == DType::kInt32 || t == DType::kInt64; }

// Every dtype a tensor may have (all of them, bool included).
bool is_any_type(DType t) { return t != DType::kUndefined && dtype_size(t) != 0; }


// Input i must be a 1-D integer tensor (int64, or int32 too when `int32_ok`).
Status require_int_vector(const InferenceContext& ctx, int i, const char* what, bool int32_ok) {
  const DType t = ctx.input_dtype(i);
  if (!(t == DType::kInt64 || (int32_ok && t == DType::kInt32)))
    return ctx.error("{} must be {}, got {}", what, int32_ok ? "int32 or int64" : "int64",
                     dtype_name(t));
  if (ctx.input_shape(i).size() != 1)
    return ctx.error("{} must be a 1-D tensor, got shape {}", what,
                     shape_to_string(ctx.input_shape(i)));
  return OkStatus();
}

// Input i must hold a single element (a scalar, or a 1-element 1-D tensor when `allow_1d`).
Status require_scalar(const InferenceContext& ctx, int i, const char* what, bool allow_1d) {
  const Shape& s = ctx.input_shape(i);
  if (s.empty()) return OkStatus();
  if (allow_1d && s.size() == 1 && (s[0] == 1 || s[0] < 0)) return OkStatus();
  return ctx.error("{} must be a scalar{}, got shape {}", what,
                   allow_1d ? " or a 1-element 1-D tensor" : "", shape_to_string(s));
}

// Length of a 1-D input when its shape is known, else -1.
int64_t vector_length(const InferenceContext& ctx, int i) {
  const Shape& s = ctx.input_shape(i);
  return s.size() == 1 ? s[0] : -1;
}

// Normalises a list of axes against `rank`; error on out-of-range or repeated axes.
Result<std::vector<int64_t>> normalize_axes(const InferenceContext& ctx,
                                            const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> out;
  std::set<int64_t> seen;
  for (int64_t a : axes) {
    if (a < -rank || a >= rank)
      return ctx.error("axis {} is out of range for rank {} (axes {})", a, rank, axes);
    const int64_t n = a < 0 ? a + rank : a;
    if (!seen.insert(n).second) return ctx.error("axis {} is repeated in axes {}", a, axes);
    out.push_back(n);
  }
  return out;
}

Result<int64_t> normalize_axis_attr(const InferenceContext& ctx, int64_t axis, int64_t rank,
                                    const char* what = "axis") {
  if (axis < -rank || axis >= rank)
    return ctx.error("{} {} is out of range for rank {}", what, axis, rank);
  return axis < 0 ? axis + rank : axis;
}

// Product of dims, -1 when any is unknown.
int64_t product_or_unknown(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) {
    if (s[i] < 0) return -1;
    // Past int64 (dims from the client's shape values): unknown; checked_product says why.
    if (__builtin_mul_overflow(p, s[i], &p)) return -1;
  }
  return p;
}

// The element count of a shape with no unknown dims, or false when it overflows int64
// (fuzz_wire: a Reshape to [2^62, 3] was signed overflow, undefined behaviour).
bool checked_product(const Shape& s, int64_t* out) {
  int64_t p = 1;
  for (int64_t d : s)
    if (__builtin_mul_overflow(p, d, &p)) return false;
  *out = p;
  return true;
}

// A scalar input's value as double (any numeric dtype); nullopt when unknown.
std::optional<double> scalar_value(const InferenceContext& ctx, int i) {
  const TensorView* v = ctx.input_value(i);
  if (!v || v->numel() < 1) return std::nullopt;
  switch (v->dtype) {
    case DType::kFloat32:
      return v->as<float>()[0];
    case DType::kFloat64:
      return v->as<double>()[0];
    case DType::kFloat16:
      return half_to_float(v->as<uint16_t>()[0]);
    case DType::kBFloat16:
      return bfloat16_to_float(v->as<uint16_t>()[0]);
    case DType::kInt8:
      return v->as<int8_t>()[0];
    case DType::kUInt8:
      return v->as<uint8_t>()[0];
    case DType::kInt16:
      return v->as<int16_t>()[0];
    case DType::kUInt16:
      return v->as<uint16_t>()[0];
    case DType::kInt32:
      return v->as<int32_t>()[0];
    case DType::kUInt32:
      return v->as<uint32_t>()[0];
    case DType::kInt64:
      return static_cast<double>(v->as<int64_t>()[0]);
    case DType::kUInt64:
      return static_cast<double>(v->as<uint64_t>()[0]);
    case DType::kBool:
      return v->as<bool>()[0] ? 1.0 : 0.0;
    default:
      return std::nullopt;
  }
}

// ---- Constant, Identity ----

Status infer_constant(InferenceContext& ctx) {
  static const char* kNames[] = {"value",      "value_float",  "value_floats",  "value_int",
                                 "value_ints", "value_string", "value_strings", "sparse_value"};
  std::vector<std::string> present;
  for (const char* n : kNames)
    if (ctx.has_attr(n)) present.emplace_back(n);
  if (present.size() != 1)
    return ctx.error("exactly one value attribute must be set, got {} ({})", present.size(),
                     present);
  const std::string& which = present[0];
  if (which == "value_string" || which == "value_strings" || which == "sparse_value")
    return ctx.unimplemented("attribute '{}' is not supported (no string or sparse tensors)",
                             which);
  if (which == "value") {
    const HostTensor* t = ctx.attr("value")->get_if<HostTensor>();
    if (!t)
      return ctx.error("attribute 'value' must be a tensor, got {}",
                       Attribute::kind_name(ctx.attr("value")->kind()));
    if (t->empty()) return ctx.error("attribute 'value' is an undefined tensor");
    ctx.set_output(0, t->dtype(), t->shape());
  } else if (which == "value_float") {
    TD_RETURN_IF_ERROR(ctx.attr_float(which, 0).status());
    ctx.set_output(0, DType::kFloat32, {});
  } else if (which == "value_floats") {
    TD_ASSIGN_OR_RETURN(auto v, ctx.attr_floats(which));
    ctx.set_output(0, DType::kFloat32, {static_cast<int64_t>(v.size())});
  } else if (which == "value_int") {
    TD_RETURN_IF_ERROR(ctx.attr_int(which, 0).status());
    ctx.set_output(0, DType::kInt64, {});
  } else {
    TD_ASSIGN_OR_RETURN(auto v, ctx.attr_ints(which));
    ctx.set_output(0, DType::kInt64, {static_cast<int64_t>(v.size())});
  }
  return OkStatus();
}

Status infer_identity(InferenceContext& ctx) {
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  return OkStatus();
}

// ---- Reshape, Flatten, Squeeze, Unsqueeze ----

Status infer_reshape(InferenceContext& ctx) {
  TD_RETURN_IF_ERROR(require_int_vector(ctx, 1, "shape", /*int32_ok=*/false));
  TD_ASSIGN_OR_RETURN(int64_t allowzero, ctx.attr_int("allowzero", 0));
  const Shape& in = ctx.input_shape(0);
  TD_ASSIGN_OR_RETURN(IntsOpt shape, ctx.input_ints(1));
  if (!shape) {
    const int64_t n = vector_length(ctx, 1);
    if (n < 0) return ctx.unimplemented("the length of the shape input is unknown");
    ctx.set_output(0, ctx.input_dtype(0), Shape(static_cast<size_t>(n), -1));
    return OkStatus();
  }
  const std::vector<int64_t>& s = *shape;
  Shape out(s.size());
  int64_t infer_at = -1;
  bool has_zero = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const int64_t v = s[i];
    if (v == 0 && !allowzero) {
      if (i >= in.size())
        return ctx.error("shape {} copies dimension {} (0) but the input {} has rank {}", s, i,
                         shape_to_string(in), in.size());
      out[i] = in[i];
    } else if (v == -1) {
      if (infer_at >= 0) return ctx.error("shape {} has more than one -1", s);
      infer_at = static_cast<int64_t>(i);
    } else if (v < -1) {
      return ctx.error("shape {} has an invalid dimension {}", s, v);
    } else {
      has_zero |= v == 0;
      out[i] = v;
    }
  }
  if (allowzero && has_zero && infer_at >= 0)
    return ctx.error("shape {} has both 0 and -1, which allowzero=1 forbids", s);
  const bool in_static = shape_is_static(in);
  if (infer_at >= 0) {
    out[static_cast<size_t>(infer_at)] = 1;
    int64_t known = product_or_unknown(out, 0, out.size());
    if (shape_is_static(out) && !checked_product(out, &known))
      return ctx.error("cannot reshape input {} to {}: more than 2^63 elements",
                       shape_to_string(in), s);
    if (!in_static || known < 0) {
      out[static_cast<size_t>(infer_at)] = -1;
    } else {
      const int64_t total = shape_numel(in);
      if (known == 0)
        return ctx.error(
            "cannot infer the -1 in shape {} for input {}: the other dimensions "
            "multiply to 0",
            s, shape_to_string(in));
      if (total % known != 0)
        return ctx.error("cannot reshape input {} ({} elements) to {}", shape_to_string(in), total,
                         s);
      out[static_cast<size_t>(infer_at)] = total / known;
    }
  } else if (in_static && shape_is_static(out)) {
    int64_t n_out = 0;
    if (!checked_product(out, &n_out))
      return ctx.error("cannot reshape input {} to {}: more than 2^63 elements",
                       shape_to_string(in), s);
    if (shape_numel(in) != n_out)
      return ctx.error("cannot reshape input {} ({} elements) to {} ({} elements)",
                       shape_to_string(in), shape_numel(in), shape_to_string(out), n_out);
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
  return OkStatus();
}

Status infer_flatten(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const int64_t rank = static_cast<int64_t>(in.size());
  TD_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis", 1));
  if (axis < -rank || axis > rank)
    return ctx.error("axis {} is out of range for rank {} (must be in [{}, {}])", axis, rank, -rank,
                     rank);
  if (axis < 0) axis += rank;
  const size_t a = static_cast<size_t>(axis);
  ctx.set_output(0, ctx.input_dtype(0),
                 {product_or_unknown(in, 0, a), product_or_unknown(in, a, in.size())});
  return OkStatus();
}

Status infer_squeeze(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const int64_t rank = static_cast<int64_t>(in.size());
  Shape out;
  if (!ctx.has_input(1)) {
    // Unknown dims are kept: they are not known to be 1 (re-inferred at run time).
    for (int64_t d : in)
      if (d != 1) out.push_back(d);
    ctx.set_output(0, ctx.input_dtype(0), out);
    return OkStatus();
  }
  TD_RETURN_IF_ERROR(require_int_vector(ctx, 1, "axes", /*int32_ok=*/false));
  TD_ASSIGN_OR_RETURN(IntsOpt axes_v, ctx.input_ints(1));
  if (!axes_v) {
    const int64_t n = vector_length(ctx, 1);
    if (n < 0) return ctx.unimplemented("the length of the axes input is unknown");
    if (n > rank) return ctx.error("{} axes given for an input of rank {}", n, rank);
    ctx.set_output(0, ctx.input_dtype(0), Shape(static_cast<size_t>(rank - n), -1));
    return OkStatus();
  }
  TD_ASSIGN_OR_RETURN(auto axes, normalize_axes(ctx, *axes_v, rank));
  std::vector<bool> drop(in.size(), false);
  for (int64_t a : axes) {
    const int64_t d = in[static_cast<size_t>(a)];
    if (d >= 0 && d != 1)
      return ctx.error("cannot squeeze axis {} of size {} (input shape {})", a, d,
                       shape_to_string(in));
    drop[static_cast<size_t>(a)] = true;
  }
  for (size_t i = 0; i < in.size(); ++i)
    if (!drop[i]) out.push_back(in[i]);
  ctx.set_output(0, ctx.input_dtype(0), out);
  return OkStatus();
}

Status infer_unsqueeze(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  TD_RETURN_IF_ERROR(require_int_vector(ctx, 1, "axes", /*int32_ok=*/false));
  TD_ASSIGN_OR_RETURN(IntsOpt axes_v, ctx.input_ints(1));
  const int64_t n = axes_v ? static_cast<int64_t>(axes_v->size()) : vector_length(ctx, 1);
  if (n < 0) return ctx.unimplemented("the length of the axes input is unknown");
  const int64_t out_rank = static_cast<int64_t>(in.size()) + n;
  if (!axes_v) {
    ctx.set_output(0, ctx.input_dtype(0), Shape(static_cast<size_t>(out_rank), -1));
    return OkStatus();
  }
  TD_ASSIGN_OR_RETURN(auto axes, normalize_axes(ctx, *axes_v, out_rank));
  std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
  for (int64_t a : axes) inserted[static_cast<size_t>(a)] = true;
  Shape out;
  size_t k = 0;
  for (int64_t i = 0; i < out_rank; ++i)
    out.push_back(inserted[static_cast<size_t>(i)] ? 1 : in[k++]);
  ctx.set_output(0, ctx.input_dtype(0), out);
  return OkStatus();
}

// ---- Transpose, Concat, Split ----

Status infer_transpose(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const int64_t rank = static_cast<int64_t>(in.size());
  std::vector<int64_t> perm;
  if (ctx.has_attr("perm")) {
    TD_ASSIGN_OR_RETURN(perm, ctx.attr_ints("perm"));
  } else {
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  if (static_cast<int64_t>(perm.size()) != rank)
    return ctx.error("perm {} has {} entries but the input {} has rank {}", perm, perm.size(),
                     shape_to_string(in), rank);
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  Shape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[static_cast<size_t>(p)])
      return ctx.error("perm {} is not a permutation of [0, {})", perm, rank);
    seen[static_cast<size_t>(p)] = true;
    out.push_back(in[static_cast<size_t>(p)]);
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
  return OkStatus();
}

Status infer_concat(InferenceContext& ctx) {
  if (!ctx.has_attr("axis")) return ctx.error("attribute 'axis' is required");
  TD_ASSIGN_OR_RETURN(int64_t axis_attr, ctx.attr_int("axis", 0));
  const Shape& first = ctx.input_shape(0);
  const DType dtype = ctx.input_dtype(0);
  const int64_t rank = static_cast<int64_t>(first.size());
  if (rank == 0) return ctx.error("cannot concatenate scalars (input 0 has shape [])");
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis_attr(ctx, axis_attr, rank));
  Shape out = first;
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.error("input {} is missing", i);
    const Shape& s = ctx.input_shape(i);
    if (ctx.input_dtype(i) != dtype)
      return ctx.error("input {} is {} but input 0 is {}", i, dtype_name(ctx.input_dtype(i)),
                       dtype_name(dtype));
    if (static_cast<int64_t>(s.size()) != rank)
      return ctx.error("input {} has shape {} but input 0 has shape {} (ranks differ)", i,
                       shape_to_string(s), shape_to_string(first));
    for (size_t d = 0; d < s.size(); ++d) {
      if (static_cast<int64_t>(d) == axis) {
        out[d] = (out[d] < 0 || s[d] < 0) ? -1 : out[d] + s[d];
      } else if (out[d] >= 0 && s[d] >= 0 && out[d] != s[d]) {
        return ctx.error(
            "input {} has shape {} which differs from input 0 {} on axis {} "
            "(concatenating on axis {})",
            i, shape_to_string(s), shape_to_string(first), d, axis);
      } else if (out[d] < 0) {
        out[d] = s[d];
      }
    }
  }
  ctx.set_output(0, dtype, out);
  return OkStatus();
}

Status infer_split(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const int64_t rank = static_cast<int64_t>(in.size());
  if (rank == 0) return ctx.error("cannot split a scalar");
  TD_ASSIGN_OR_RETURN(int64_t axis_attr, ctx.attr_int("axis", 0));
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis_attr(ctx, axis_attr, rank));
  const int n = ctx.num_outputs();
  const int64_t dim = in[static_cast<size_t>(axis)];
  std::vector<int64_t> sizes(static_cast<size_t>(n), -1);
  bool have_split = false;
  if (ctx.has_attr("num_outputs")) {
    // Opset 18: n parts of ceil(dim / n), the last one smaller when dim does not divide.
    TD_ASSIGN_OR_RETURN(int64_t parts, ctx.attr_int("num_outputs", 0));
    if (ctx.has_input(1)) return ctx.error("give either the split input or num_outputs, not both");
    if (parts < 1) return ctx.error("num_outputs must be >= 1, got {}", parts);
    if (parts != n)
      return ctx.error("num_outputs is {} but the node has {} outputs", parts, n);
    if (dim >= 0) {
      const int64_t chunk = (dim + n - 1) / n;
      const int64_t last = dim - chunk * (n - 1);
      if (last < 0)
        return ctx.error("axis {} of input {} (size {}) cannot be split into {} parts of {} "
                         "(num_outputs is too large for the axis)",
                         axis, shape_to_string(in), dim, n, chunk);
      std::fill(sizes.begin(), sizes.end(), chunk);
      sizes.back() = last;
    }
    have_split = true;
  } else if (ctx.has_input(1)) {
    TD_RETURN_IF_ERROR(require_int_vector(ctx, 1, "split", /*int32_ok=*/false));
    TD_ASSIGN_OR_RETURN(IntsOpt split, ctx.input_ints(1));
    const int64_t len = split ? static_cast<int64_t>(split->size()) : vector_length(ctx, 1);
    if (len != 0) {
      have_split = true;
      if (len > 0 && len != n)
        return ctx.error("split has {} entries but the node has {} outputs", len, n);
      if (split) {
        int64_t sum = 0;
        for (int64_t v : *split) {
          if (v < 0) return ctx.error("split {} has a negative size", *split);
          sum += v;
        }
        if (dim >= 0 && sum != dim)
          return ctx.error("split {} sums to {} but axis {} of input {} has size {}", *split, sum,
                           axis, shape_to_string(in), dim);
        sizes = *split;
      }
    }
  }
  if (!have_split && dim >= 0) {
    if (dim % n != 0)
      return ctx.error("axis {} of input {} (size {}) cannot be split into {} equal parts", axis,
                       shape_to_string(in), dim, n);
    std::fill(sizes.begin(), sizes.end(), dim / n);
  }
  for (int i = 0; i < n; ++i) {
    Shape s = in;
    s[static_cast<size_t>(axis)] = sizes[static_cast<size_t>(i)];
    ctx.set_output(i, ctx.input_dtype(0), s);
  }
  return OkStatus();
}

// ---- Slice ----

// Effective start and output length of one sliced axis of size `dim`, as ONNX clamps them.
void slice_axis(int64_t start, int64_t end, int64_t step, int64_t dim, int64_t* eff_start,
                int64_t* len) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    *len = end > start ? (end - start - 1) / step + 1 : 0;
  } else {
    start = std::clamp<int64_t>(start, 0, std::max<int64_t>(dim - 1, 0));
    end = std::clamp<int64_t>(end, -1, dim - 1);
    const uint64_t ustep = static_cast<uint64_t>(-(step + 1)) + 1;
    *len = (dim > 0 && start > end)
               ? static_cast<int64_t>(static_cast<uint64_t>(start - end - 1) / ustep) + 1
               : 0;
  }
  *eff_start = start;
}

Status infer_slice(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const int64_t rank = static_cast<int64_t>(in.size());
  const char* names[] = {"data", "starts", "ends", "axes", "steps"};
  int64_t n = -1;
  std::vector<IntsOpt> vals(5);
  for (int i = 1; i < 5; ++i) {
    if (!ctx.has_input(i)) continue;
    // A scalar is read as one entry, as ONNX Runtime does: PyTorch's exporter writes Slice
    // with scalar starts and ends from a Gather in a Loop body (torchvision's MViT).
    const bool scalar = ctx.input_shape(i).empty();
    if (scalar && ctx.input_dtype(i) != DType::kInt64 && ctx.input_dtype(i) != DType::kInt32)
      return ctx.error("{} must be int32 or int64, got {}", names[i],
                       dtype_name(ctx.input_dtype(i)));
    if (!scalar) TD_RETURN_IF_ERROR(require_int_vector(ctx, i, names[i], /*int32_ok=*/true));
    TD_ASSIGN_OR_RETURN(vals[static_cast<size_t>(i)], ctx.input_ints(i));
    const int64_t len = scalar ? 1 : vector_length(ctx, i);
    if (len >= 0) {
      if (n >= 0 && len != n)
        return ctx.error(
            "starts, ends, axes and steps must have the same length, got {} ({}) "
            "and {}",
            len, names[i], n);
      n = len;
    }
  }
  Shape out = in;
  std::vector<int64_t> axes;
  if (ctx.has_input(3)) {
    if (!vals[3]) {  // which axes are sliced is unknown
      ctx.set_output(0, ctx.input_dtype(0), Shape(in.size(), -1));
      return OkStatus();
    }
    TD_ASSIGN_OR_RETURN(axes, normalize_axes(ctx, *vals[3], rank));
  } else {
    if (n < 0) {
      ctx.set_output(0, ctx.input_dtype(0), Shape(in.size(), -1));
      return OkStatus();
    }
    if (n > rank)
      return ctx.error("starts has {} entries but the input {} has rank {}", n, shape_to_string(in),
                       rank);
    for (int64_t i = 0; i < n; ++i) axes.push_back(i);
  }
  if (vals[4])
    for (int64_t s : *vals[4])
      if (s == 0) return ctx.error("steps {} contains 0", *vals[4]);
  for (size_t i = 0; i < axes.size(); ++i) {
    const size_t a = static_cast<size_t>(axes[i]);
    if (!vals[1] || !vals[2] || (ctx.has_input(4) && !vals[4]) || in[a] < 0) {
      out[a] = -1;
      continue;
    }
    const int64_t step = vals[4] ? (*vals[4])[i] : 1;
    int64_t start = 0;
    slice_axis((*vals[1])[i], (*vals[2])[i], step, in[a], &start, &out[a]);
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
  return OkStatus();
}

// ---- Gather family, Scatter family ----

Status infer_gather(InferenceContext& ctx) {
  const Shape& data = ctx.input_shape(0);
  const Shape& idx = ctx.input_shape(1);
  if (!is_index_type(ctx.input_dtype(1)))
    return ctx.error("indices must be int32 or int64, got {}", dtype_name(ctx.input_dtype(1)));
  const int64_t rank = static_cast<int64_t>(data.size());
  if (rank == 0) return ctx.error("data must have rank >= 1, got a scalar");
  TD_ASSIGN_OR_RETURN(int64_t axis_attr, ctx.attr_int("axis", 0));
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis_attr(ctx, axis_attr, rank));
  Shape out(data.begin(), data.begin() + axis);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  ctx.set_output(0, ctx.input_dtype(0), out);
  return OkStatus();
}

Status infer_gather_elements(InferenceContext& ctx) {
  const Shape& data = ctx.input_shape(0);
  const Shape& idx = ctx.input_shape(1);
  if (!is_index_type(ctx.input_dtype(1)))
    return ctx.error("indices must be int32 or int64, got {}", dtype_name(ctx.input_dtype(1)));
  const int64_t rank = static_cast<int64_t>(data.size());
  if (rank == 0) return ctx.error("data must have rank >= 1, got a scalar");
  if (idx.size() != data.size())
    return ctx.error("indices {} must have the same rank as data {}", shape_to_string(idx),
                     shape_to_string(data));
  TD_ASSIGN_OR_RETURN(int64_t axis_attr, ctx.attr_int("axis", 0));
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis_attr(ctx, axis_attr, rank));
  for (int64_t d = 0; d < rank; ++d) {
    const size_t k = static_cast<size_t>(d);
    if (d != axis && idx[k] >= 0 && data[k] >= 0 && idx[k] > data[k])
      return ctx.error("indices {} is larger than data {} on axis {}", shape_to_string(idx),
                       shape_to_string(data), d);
  }
  ctx.set_output(0, ctx.input_dtype(0), idx);
  return OkStatus();
}

Status infer_gather_nd(InferenceContext& ctx) {
  const Shape& data = ctx.input_shape(0);
  const Shape& idx = ctx.input_shape(1);
  if (ctx.input_dtype(1) != DType::kInt64)
    return ctx.error("indices must be int64, got {}", dtype_name(ctx.input_dtype(1)));
  const int64_t r = static_cast<int64_t>(data.size());
  const int64_t q = static_cast<int64_t>(idx.size());
  TD_ASSIGN_OR_RETURN(int64_t b, ctx.attr_int("batch_dims", 0));
  if (r < 1 || q < 1)
    return ctx.error("data {} and indices {} must both have rank >= 1", shape_to_string(data),
                     shape_to_string(idx));
  if (b < 0 || b >= std::min(r, q))
    return ctx.error("batch_dims {} must be in [0, {}) for data {} and indices {}", b,
                     std::min(r, q), shape_to_string(data), shape_to_string(idx));
  for (int64_t i = 0; i < b; ++i) {
    const size_t k = static_cast<size_t>(i);
    if (data[k] >= 0 && idx[k] >= 0 && data[k] != idx[k])
      return ctx.error("batch dimension {} differs: data {} vs indices {}", i,
                       shape_to_string(data), shape_to_string(idx));
  }
  const int64_t k = idx.back();
  if (k < 0)
    return ctx.unimplemented("the last dimension of indices {} is unknown", shape_to_string(idx));
  if (k < 1 || k > r - b)
    return ctx.error(
        "the last dimension of indices {} is {}, must be in [1, {}] for data {} "
        "with batch_dims {}",
        shape_to_string(idx), k, r - b, shape_to_string(data), b);
  Shape out(idx.begin(), idx.end() - 1);
  out.insert(out.end(), data.begin() + b + k, data.end());
  ctx.set_output(0, ctx.input_dtype(0), out);
  return OkStatus();
}

Status check_reduction_attr(const InferenceContext& ctx) {
  TD_ASSIGN_OR_RETURN(std::string red, ctx.attr_string("reduction", "none"));
  if (red != "none" && red != "add" && red != "mul" && red != "max" && red != "min")
    return ctx.error("reduction must be 'none', 'add', 'mul', 'max' or 'min', got '{}'", red);
  if (red != "none" && ctx.input_dtype(0) == DType::kBool)
    return ctx.error("reduction '{}' is not defined for bool data", red);
  return OkStatus();
}

Status infer_scatter_elements(InferenceContext& ctx) {
  const Shape& data = ctx.input_shape(0);
  const Shape& idx = ctx.input_shape(1);
  const Shape& upd = ctx.input_shape(2);
  if (!is_index_type(ctx.input_dtype(1)))
    return ctx.error("indices must be int32 or int64, got {}", dtype_name(ctx.input_dtype(1)));
  if (ctx.input_dtype(2) != ctx.input_dtype(0))
    return ctx.error("updates are {} but data is {}", dtype_name(ctx.input_dtype(2)),
                     dtype_name(ctx.input_dtype(0)));
  TD_RETURN_IF_ERROR(check_reduction_attr(ctx));
  const int64_t rank = static_cast<int64_t>(data.size());
  if (rank == 0) return ctx.error("data must have rank >= 1, got a scalar");
  if (idx.size() != data.size() || upd.size() != idx.size())
    return ctx.error("data {}, indices {} and updates {} must have the same rank",
                     shape_to_string(data), shape_to_string(idx), shape_to_string(upd));
  TD_ASSIGN_OR_RETURN(int64_t axis_attr, ctx.attr_int("axis", 0));
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis_attr(ctx, axis_attr, rank));
  for (int64_t d = 0; d < rank; ++d) {
    const size_t k = static_cast<size_t>(d);
    if (idx[k] >= 0 && upd[k] >= 0 && idx[k] != upd[k])
      return ctx.error("indices {} and updates {} must have the same shape", shape_to_string(idx),
                       shape_to_string(upd));
    if (d != axis && idx[k] >= 0 && data[k] >= 0 && idx[k] > data[k])
      return ctx.error("indices {} is larger than data {} on axis {}", shape_to_string(idx),
                       shape_to_string(data), d);
  }
  ctx.set_output(0, ctx.input_dtype(0), data);
  return OkStatus();
}

Status infer_scatter_nd(InferenceContext& ctx) {
  const Shape& data = ctx.input_shape(0);
  const Shape& idx = ctx.input_shape(1);
  const Shape& upd = ctx.input_shape(2);
  if (ctx.input_dtype(1) != DType::kInt64)
    return ctx.error("indices must be int64, got {}", dtype_name(ctx.input_dtype(1)));
  if (ctx.input_dtype(2) != ctx.input_dtype(0))
    return ctx.error("updates are {} but data is {}", dtype_name(ctx.input_dtype(2)),
                     dtype_name(ctx.input_dtype(0)));
  TD_RETURN_IF_ERROR(check_reduction_attr(ctx));
  const int64_t r = static_cast<int64_t>(data.size());
  const int64_t q = static_cast<int64_t>(idx.size());
  if (r < 1 || q < 1)
    return ctx.error("data {} and indices {} must both have rank >= 1", shape_to_string(data),
                     shape_to_string(idx));
  const int64_t k = idx.back();
  if (k >= 0) {
    if (k > r)
      return ctx.error("the last dimension of indices {} is {}, larger than the rank {} of data",
                       shape_to_string(idx), k, r);
    Shape expect(idx.begin(), idx.end() - 1);
    expect.insert(expect.end(), data.begin() + k, data.end());
    bool match = expect.size() == upd.size();
    for (size_t i = 0; match && i < upd.size(); ++i)
      match = expect[i] < 0 || upd[i] < 0 || expect[i] == upd[i];
    if (!match)
      return ctx.error("updates has shape {}, expected {} for data {} and indices {}",
                       shape_to_string(upd), shape_to_string(expect), shape_to_string(data),
                       shape_to_string(idx));
  }
  ctx.set_output(0, ctx.input_dtype(0), data);
  return OkStatus();
}

// ---- Shape, Size, Expand, Tile, Pad, ConstantOfShape ----

Status infer_shape(InferenceContext& ctx) {
  const int64_t rank = static_cast<int64_t>(ctx.input_shape(0).size());
  TD_ASSIGN_OR_RETURN(int64_t start, ctx.attr_int("start", 0));
  TD_ASSIGN_OR_RETURN(int64_t end, ctx.attr_int("end", rank));
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  ctx.set_output(0, DType::kInt64, {std::max<int64_t>(end - start, 0)});
  return OkStatus();
}

Status infer_size(InferenceContext& ctx) {
  ctx.set_output(0, DType::kInt64, {});
  return OkStatus();
}

Status infer_expand(InferenceContext& ctx) {
  TD_RETURN_IF_ERROR(require_int_vector(ctx, 1, "shape", /*int32_ok=*/false));
  const Shape& in = ctx.input_shape(0);
  TD_ASSIGN_OR_RETURN(IntsOpt shape, ctx.input_ints(1));
  if (!shape) {
    const int64_t n = vector_length(ctx, 1);
    if (n < 0) return ctx.unimplemented("the length of the shape input is unknown");
    ctx.set_output(0, ctx.input_dtype(0),
                   Shape(static_cast<size_t>(std::max<int64_t>(n, in.size())), -1));
    return OkStatus();
  }
  for (int64_t d : *shape)
    if (d < 0) return ctx.error("shape {} has a negative dimension", *shape);
  auto out = broadcast_shapes(in, *shape);
  if (!out.ok())
    return ctx.error("input {} cannot be expanded to shape {}", shape_to_string(in), *shape);
  ctx.set_output(0, ctx.input_dtype(0), *out);
  return OkStatus();
}

Status infer_tile(InferenceContext& ctx) {
  TD_RETURN_IF_ERROR(require_int_vector(ctx, 1, "repeats", /*int32_ok=*/false));
  const Shape& in = ctx.input_shape(0);
  const int64_t len = vector_length(ctx, 1);
  if (len >= 0 && len != static_cast<int64_t>(in.size()))
    return ctx.error("repeats has {} entries but the input {} has rank {}", len,
                     shape_to_string(in), in.size());
  TD_ASSIGN_OR_RETURN(IntsOpt rep, ctx.input_ints(1));
  Shape out(in.size(), -1);
  if (rep) {
    for (size_t i = 0; i < in.size(); ++i) {
      const int64_t r = (*rep)[i];
      if (r < 0) return ctx.error("repeats {} has a negative entry", *rep);
      if (r != 0 && in[i] >= 0 && __builtin_mul_overflow(in[i], r, &out[i]))
        return ctx.error("repeats {} make dimension {} of input {} overflow int64", *rep, i,
                         shape_to_string(in));
      out[i] = r == 0 ? 0 : (in[i] < 0 ? -1 : out[i]);
    }
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
  return OkStatus();
}

Status infer_pad(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const int64_t rank = static_cast<int64_t>(in.size());
  TD_ASSIGN_OR_RETURN(std::string mode, ctx.attr_string("mode", "constant"));
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    return ctx.error("mode must be 'constant', 'reflect', 'edge' or 'wrap', got '{}'", mode);
  TD_RETURN_IF_ERROR(require_int_vector(ctx, 1, "pads", /*int32_ok=*/false));
  if (ctx.has_input(2)) {
    if (ctx.input_dtype(2) != ctx.input_dtype(0))
      return ctx.error("constant_value is {} but data is {}", dtype_name(ctx.input_dtype(2)),
                       dtype_name(ctx.input_dtype(0)));
    TD_RETURN_IF_ERROR(require_scalar(ctx, 2, "constant_value", /*allow_1d=*/true));
  }
  std::vector<int64_t> axes;
  Shape out(in.size(), -1);
  if (ctx.has_input(3)) {
    TD_RETURN_IF_ERROR(require_int_vector(ctx, 3, "axes", /*int32_ok=*/true));
    TD_ASSIGN_OR_RETURN(IntsOpt axes_v, ctx.input_ints(3));
    if (!axes_v) {
      ctx.set_output(0, ctx.input_dtype(0), out);
      return OkStatus();
    }
    TD_ASSIGN_OR_RETURN(axes, normalize_axes(ctx, *axes_v, rank));
  } else {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  const int64_t n = static_cast<int64_t>(axes.size());
  const int64_t len = vector_length(ctx, 1);
  if (len >= 0 && len != 2 * n)
    return ctx.error("pads has {} entries, expected {} (2 per padded axis) for input {}", len,
                     2 * n, shape_to_string(in));
  TD_ASSIGN_OR_RETURN(IntsOpt pads, ctx.input_ints(1));
  out = in;
  for (int64_t i = 0; i < n; ++i) {
    const size_t a = static_cast<size_t>(axes[static_cast<size_t>(i)]);
    if (!pads || in[a] < 0) {
      out[a] = -1;
      continue;
    }
    const int64_t begin = (*pads)[static_cast<size_t>(i)];
    const int64_t end = (*pads)[static_cast<size_t>(i + n)];
    const int64_t d = in[a] + begin + end;
    if (d < 0)
      return ctx.error("pads {} make axis {} of input {} negative ({})", *pads, a,
                       shape_to_string(in), d);
    const int64_t kept = in[a] + std::min<int64_t>(begin, 0) + std::min<int64_t>(end, 0);
    if (mode != "constant" && kept <= 0 && (begin > 0 || end > 0))
      return ctx.error("mode '{}' cannot pad axis {} of input {}: no elements remain to copy", mode,
                       a, shape_to_string(in));
    out[a] = d;
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
  return OkStatus();
}

Status infer_constant_of_shape(InferenceContext& ctx) {
  TD_RETURN_IF_ERROR(require_int_vector(ctx, 0, "input", /*int32_ok=*/false));
  DType dtype = DType::kFloat32;
  if (const Attribute* a = ctx.attr("value")) {
    const HostTensor* t = a->get_if<HostTensor>();
    if (!t)
      return ctx.error("attribute 'value' must be a tensor, got {}",
                       Attribute::kind_name(a->kind()));
    if (t->empty() || t->numel() != 1)
      return ctx.error("attribute 'value' must hold exactly one element, got shape {}",
                       shape_to_string(t->shape()));
    dtype = t->dtype();
  }
  TD_ASSIGN_OR_RETURN(IntsOpt shape, ctx.input_ints(0));
  if (!shape) {
    const int64_t n = vector_length(ctx, 0);
    if (n < 0) return ctx.unimplemented("the length of the shape input is unknown");
    ctx.set_output(0, dtype, Shape(static_cast<size_t>(n), -1));
    return OkStatus();
  }
  for (int64_t d : *shape)
    if (d < 0) return ctx.error("shape {} has a negative dimension", *shape);
  ctx.set_output(0, dtype, *shape);
  return OkStatus();
}

// ---- Range, OneHot, NonZero, Trilu, CumSum, TopK, DepthToSpace, SpaceToDepth, EyeLike ----

Status infer_range(InferenceContext& ctx) {
  const DType t = ctx.input_dtype(0);
  if (t != DType::kFloat32 && t != DType::kFloat64 && t != DType::kInt16 && t != DType::kInt32 &&
      t != DType::kInt64)
    return ctx.error("inputs must be float32, float64, int16, int32 or int64, got {}",
                     dtype_name(t));
  const char* names[] = {"start", "limit", "delta"};
  for (int i = 0; i < 3; ++i) {
    if (ctx.input_dtype(i) != t)
      return ctx.error("{} is {} but start is {}", names[i], dtype_name(ctx.input_dtype(i)),
                       dtype_name(t));
    TD_RETURN_IF_ERROR(require_scalar(ctx, i, names[i], /*allow_1d=*/true));
  }
  int64_t n = -1;
  if (ctx.input_value(0) && ctx.input_value(1) && ctx.input_value(2)) {
    if (dtype_is_integer(t)) {
      TD_ASSIGN_OR_RETURN(IntsOpt s, ctx.input_ints(0));
      TD_ASSIGN_OR_RETURN(IntsOpt l, ctx.input_ints(1));
      TD_ASSIGN_OR_RETURN(IntsOpt d, ctx.input_ints(2));
      if (s->empty() || l->empty() || d->empty())
        return ctx.error("start, limit and delta must each hold one value");
      const int64_t start = (*s)[0], limit = (*l)[0], delta = (*d)[0];
      if (delta == 0) return ctx.error("delta must not be 0");
      // ceil((limit - start) / delta) in 128 bits: no overflow for any int64 values.
      const __int128 span = static_cast<__int128>(limit) - start;
      __int128 q = span / delta;
      if ((span % delta != 0) && ((span < 0) == (delta < 0))) ++q;
      if (q > static_cast<__int128>(int64_t{1} << 53))
        return ctx.error("start {}, limit {} and delta {} give too many elements", start, limit,
                         delta);
      n = q > 0 ? static_cast<int64_t>(q) : 0;
    } else {
      const double start = *scalar_value(ctx, 0), limit = *scalar_value(ctx, 1),
                   delta = *scalar_value(ctx, 2);
      if (delta == 0) return ctx.error("delta must not be 0");
      const double q = std::ceil((limit - start) / delta);
      if (!std::isfinite(q) || q > 1e15)
        return ctx.error("start {}, limit {} and delta {} give too many elements", start, limit,
                         delta);
      n = q > 0 ? static_cast<int64_t>(q) : 0;
    }
  }
  ctx.set_output(0, t, {n});
  return OkStatus();
}

Status infer_one_hot(InferenceContext& ctx) {
  const Shape& idx = ctx.input_shape(0);
  if (!dtype_is_numeric(ctx.input_dtype(0)))
    return ctx.error("indices must be numeric, got {}", dtype_name(ctx.input_dtype(0)));
  if (!dtype_is_numeric(ctx.input_dtype(1)))
    return ctx.error("depth must be numeric, got {}", dtype_name(ctx.input_dtype(1)));
  TD_RETURN_IF_ERROR(require_scalar(ctx, 1, "depth", /*allow_1d=*/true));
  const Shape& values = ctx.input_shape(2);
  if (values.size() != 1 || (values[0] >= 0 && values[0] != 2))
    return ctx.error("values must be a 1-D tensor of 2 elements [off, on], got shape {}",
                     shape_to_string(values));
  const int64_t out_rank = static_cast<int64_t>(idx.size()) + 1;
  TD_ASSIGN_OR_RETURN(int64_t axis_attr, ctx.attr_int("axis", -1));
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis_attr(ctx, axis_attr, out_rank));
  int64_t depth = -1;
  if (auto dv = scalar_value(ctx, 1)) {
    if (!(*dv >= 1) || *dv > 1e15) return ctx.error("depth must be >= 1, got {}", *dv);
    depth = static_cast<int64_t>(*dv);
  }
  Shape out = idx;
  out.insert(out.begin() + axis, depth);
  ctx.set_output(0, ctx.input_dtype(2), out);
  return OkStatus();
}

Status infer_non_zero(InferenceContext& ctx) {
  const int64_t rank = static_cast<int64_t>(ctx.input_shape(0).size());
  ctx.set_output(0, DType::kInt64, {std::max<int64_t>(rank, 1), -1});
  return OkStatus();
}

Status infer_trilu(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  if (in.size() < 2)
    return ctx.error("input must have rank >= 2, got shape {}", shape_to_string(in));
  TD_RETURN_IF_ERROR(ctx.attr_int("upper", 1).status());
  if (ctx.has_input(1)) {
    if (ctx.input_dtype(1) != DType::kInt64)
      return ctx.error("k must be int64, got {}", dtype_name(ctx.input_dtype(1)));
    TD_RETURN_IF_ERROR(require_scalar(ctx, 1, "k", /*allow_1d=*/true));
  }
  ctx.set_output(0, ctx.input_dtype(0), in);
  return OkStatus();
}

Status infer_cum_sum(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  if (!dtype_is_numeric(ctx.input_dtype(0)))
    return ctx.error("x must be numeric, got {}", dtype_name(ctx.input_dtype(0)));
  if (!is_index_type(ctx.input_dtype(1)))
    return ctx.error("axis must be int32 or int64, got {}", dtype_name(ctx.input_dtype(1)));
  TD_RETURN_IF_ERROR(require_scalar(ctx, 1, "axis", /*allow_1d=*/true));
  TD_RETURN_IF_ERROR(ctx.attr_int("exclusive", 0).status());
  TD_RETURN_IF_ERROR(ctx.attr_int("reverse", 0).status());
  const int64_t rank = static_cast<int64_t>(in.size());
  if (rank == 0) return ctx.error("x must have rank >= 1, got a scalar");
  TD_ASSIGN_OR_RETURN(IntsOpt axis, ctx.input_ints(1));
  if (axis && !axis->empty())
    TD_RETURN_IF_ERROR(normalize_axis_attr(ctx, (*axis)[0], rank).status());
  ctx.set_output(0, ctx.input_dtype(0), in);
  return OkStatus();
}

Status infer_top_k(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  if (!dtype_is_numeric(ctx.input_dtype(0)))
    return ctx.error("X must be numeric, got {}", dtype_name(ctx.input_dtype(0)));
  if (ctx.input_dtype(1) != DType::kInt64)
    return ctx.error("K must be int64, got {}", dtype_name(ctx.input_dtype(1)));
  TD_RETURN_IF_ERROR(require_scalar(ctx, 1, "K", /*allow_1d=*/true));
  const int64_t rank = static_cast<int64_t>(in.size());
  if (rank == 0) return ctx.error("X must have rank >= 1, got a scalar");
  TD_ASSIGN_OR_RETURN(int64_t axis_attr, ctx.attr_int("axis", -1));
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis_attr(ctx, axis_attr, rank));
  TD_RETURN_IF_ERROR(ctx.attr_int("largest", 1).status());
  TD_RETURN_IF_ERROR(ctx.attr_int("sorted", 1).status());
  TD_ASSIGN_OR_RETURN(IntsOpt kv, ctx.input_ints(1));
  Shape out = in;
  const size_t a = static_cast<size_t>(axis);
  if (kv && !kv->empty()) {
    const int64_t k = (*kv)[0];
    if (k < 0 || (in[a] >= 0 && k > in[a]))
      return ctx.error("K {} is out of range for axis {} of size {} (input {})", k, axis, in[a],
                       shape_to_string(in));
    out[a] = k;
  } else {
    out[a] = -1;
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
  ctx.set_output(1, DType::kInt64, out);
  return OkStatus();
}

Status infer_depth_to_space(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  if (in.size() != 4)
    return ctx.error("input must have rank 4 [N, C, H, W], got shape {}", shape_to_string(in));
  if (!ctx.has_attr("blocksize")) return ctx.error("attribute 'blocksize' is required");
  TD_ASSIGN_OR_RETURN(int64_t b, ctx.attr_int("blocksize", 0));
  if (b < 1 || b > (1 << 20)) return ctx.error("blocksize must be >= 1, got {}", b);
  TD_ASSIGN_OR_RETURN(std::string mode, ctx.attr_string("mode", "DCR"));
  if (mode != "DCR" && mode != "CRD")
    return ctx.error("mode must be 'DCR' or 'CRD', got '{}'", mode);
  if (in[1] >= 0 && in[1] % (b * b) != 0)
    return ctx.error("channels {} of input {} are not divisible by blocksize^2 = {}", in[1],
                     shape_to_string(in), b * b);
  auto mul = [](int64_t d, int64_t m) { return d < 0 ? -1 : d * m; };
  ctx.set_output(0, ctx.input_dtype(0),
                 {in[0], in[1] < 0 ? -1 : in[1] / (b * b), mul(in[2], b), mul(in[3], b)});
  return OkStatus();
}

Status infer_space_to_depth(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  if (in.size() != 4)
    return ctx.error("input must have rank 4 [N, C, H, W], got shape {}", shape_to_string(in));
  if (!ctx.has_attr("blocksize")) return ctx.error("attribute 'blocksize' is required");
  TD_ASSIGN_OR_RETURN(int64_t b, ctx.attr_int("blocksize", 0));
  if (b < 1 || b > (1 << 20)) return ctx.error("blocksize must be >= 1, got {}", b);
  for (size_t d = 2; d < 4; ++d)
    if (in[d] >= 0 && in[d] % b != 0)
      return ctx.error("{} {} of input {} is not divisible by blocksize {}",
                       d == 2 ? "height" : "width", in[d], shape_to_string(in), b);
  auto div = [](int64_t d, int64_t m) { return d < 0 ? -1 : d / m; };
  ctx.set_output(0, ctx.input_dtype(0),
                 {in[0], in[1] < 0 ? -1 : in[1] * b * b, div(in[2], b), div(in[3], b)});
  return OkStatus();
}

Status infer_eye_like(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  if (in.size() != 2) return ctx.error("input must have rank 2, got shape {}", shape_to_string(in));
  TD_RETURN_IF_ERROR(ctx.attr_int("k", 0).status());
  DType dtype = ctx.input_dtype(0);
  if (ctx.has_attr("dtype")) {
    TD_ASSIGN_OR_RETURN(int64_t dt, ctx.attr_int("dtype", 0));
    if (dt < INT32_MIN || dt > INT32_MAX || !dtype_is_valid(static_cast<int32_t>(dt)) ||
        dt == static_cast<int64_t>(DType::kUndefined) ||
        dt == static_cast<int64_t>(DType::kBFloat16))
      return ctx.error("dtype {} is not a supported output type", dt);
    dtype = static_cast<DType>(dt);
  }
  if (dtype == DType::kBFloat16) return ctx.error("bfloat16 is not a supported output type");
  ctx.set_output(0, dtype, in);
  return OkStatus();
}

// Wraps an inference function with a check that the data input has a defined, known dtype.
InferenceFn any_data(InferenceFn fn) {
  return [fn = std::move(fn)](InferenceContext& ctx) -> Status {
    if (ctx.num_inputs() > 0 && ctx.has_input(0) && !is_any_type(ctx.input_dtype(0)))
      return ctx.error("input 0 has an invalid dtype {}", static_cast<int>(ctx.input_dtype(0)));
    return fn(ctx);
  };
}

}  // namespace

void register_shape_ops(OpRegistry& r) {
  auto add = [&](const char* name, int min_in, int max_in, int min_out, int max_out,
                 std::set<std::string> attrs, InferenceFn fn, const char* doc) {
    OpSchema s;
    s.name = name;
    s.min_inputs = min_in;
    s.max_inputs = max_in;
    s.min_outputs = min_out;
    s.max_outputs = max_out;
    s.attributes = std::move(attrs);
    s.infer = any_data(std::move(fn));
    s.doc = doc;
    r.add(std::move(s));
  };
  add("Constant", 0, 0, 1, 1,
      {"value", "value_float", "value_floats", "value_int", "value_ints", "value_string",
       "value_strings", "sparse_value"},
      infer_constant, "A constant tensor from an attribute.");
  add("Identity", 1, 1, 1, 1, {}, infer_identity, "Copies the input.");
  add("Reshape", 2, 2, 1, 1, {"allowzero"}, infer_reshape,
      "Reshapes to the shape input (0 copies a dim unless allowzero, -1 is inferred).");
  add("Flatten", 1, 1, 1, 1, {"axis"}, infer_flatten, "Flattens to 2-D around axis.");
  add("Squeeze", 1, 2, 1, 1, {}, infer_squeeze, "Removes size-1 dims (all, or the axes input).");
  add("Unsqueeze", 2, 2, 1, 1, {}, infer_unsqueeze, "Inserts size-1 dims at the axes input.");
  add("Transpose", 1, 1, 1, 1, {"perm"}, infer_transpose, "Permutes dims (default: reverse).");
  add("Concat", 1, -1, 1, 1, {"axis"}, infer_concat, "Concatenates inputs along axis.");
  add("Split", 1, 2, 1, 1 << 16, {"axis", "num_outputs"}, infer_split,
      "Splits along axis into the outputs (sizes from the split input, else num_outputs parts "
      "of ceil(size / n), else equal).");
  add("Slice", 3, 5, 1, 1, {}, infer_slice, "Slices with starts/ends/axes/steps inputs.");
  add("Gather", 2, 2, 1, 1, {"axis"}, infer_gather, "Gathers slices along axis by indices.");
  add("GatherElements", 2, 2, 1, 1, {"axis"}, infer_gather_elements,
      "Gathers elements along axis (indices of data's rank).");
  add("GatherND", 2, 2, 1, 1, {"batch_dims"}, infer_gather_nd,
      "Gathers slices by index tuples in the last dim of indices.");
  add("ScatterElements", 3, 3, 1, 1, {"axis", "reduction"}, infer_scatter_elements,
      "Scatters updates along axis (reduction none/add/mul/max/min).");
  add("ScatterND", 3, 3, 1, 1, {"reduction"}, infer_scatter_nd,
      "Scatters update slices at index tuples (reduction none/add/mul/max/min).");
  add("Shape", 1, 1, 1, 1, {"start", "end"}, infer_shape, "The input's shape as int64.");
  add("Size", 1, 1, 1, 1, {}, infer_size, "The input's element count as an int64 scalar.");
  add("Expand", 2, 2, 1, 1, {}, infer_expand, "Broadcasts the input to the shape input.");
  add("Tile", 2, 2, 1, 1, {}, infer_tile, "Repeats the input along each axis.");
  add("Pad", 2, 4, 1, 1, {"mode"}, infer_pad, "Pads (constant/reflect/edge/wrap); negative crops.");
  add("ConstantOfShape", 1, 1, 1, 1, {"value"}, infer_constant_of_shape,
      "A tensor of the shape input filled with the value attribute (default float32 0).");
  add("Range", 3, 3, 1, 1, {}, infer_range, "start + i * delta for i < ceil((limit-start)/delta).");
  add("OneHot", 3, 3, 1, 1, {"axis"}, infer_one_hot, "One-hot encoding of indices.");
  add("NonZero", 1, 1, 1, 1, {}, infer_non_zero, "Indices of non-zero elements [rank, n].");
  add("Trilu", 1, 2, 1, 1, {"upper"}, infer_trilu, "Upper/lower triangle of the last 2 dims.");
  add("CumSum", 2, 2, 1, 1, {"exclusive", "reverse"}, infer_cum_sum,
      "Cumulative sum along the axis input.");
  add("TopK", 2, 2, 2, 2, {"axis", "largest", "sorted"}, infer_top_k,
      "The K largest (or smallest) values along axis, and their indices.");
  add("DepthToSpace", 1, 1, 1, 1, {"blocksize", "mode"}, infer_depth_to_space,
      "Moves channel blocks into spatial blocks (DCR/CRD).");
  add("SpaceToDepth", 1, 1, 1, 1, {"blocksize"}, infer_space_to_depth,
      "Moves spatial blocks into channels.");
  add("EyeLike", 1, 1, 1, 1, {"dtype", "k"}, infer_eye_like,
      "A 2-D tensor with ones on the k-th diagonal.");
}

}  // namespace tensord
