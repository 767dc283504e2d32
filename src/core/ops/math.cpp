// Schemas of the miscellaneous math ops (opset 17 forms): Einsum, Det, Compress, Unique,
// ReverseSequence, Shrink, Mish, the window functions (HannWindow, HammingWindow,
// BlackmanWindow), DFT, STFT, MelWeightMatrix and the random generators (Bernoulli,
// RandomNormal, RandomUniform and their *Like forms).
//
// The Einsum equation is parsed in one place, math::parse_einsum below, which the cpu kernel
// calls too, so inference and kernel agree on labels, implicit outputs and broadcasting.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/op_registry.h"
#include "core/ops/all_ops.h"
#include "core/ops/op_helpers.h"

namespace tensord {

// ---- Einsum equation parsing, shared with src/backends/cpu/kernels/math.cpp ----
namespace math {

// Parses `equation` for inputs of the given shapes (dims may be -1 = unknown).
//
// Labels are numbered: 'A'..'Z' are 0..25, 'a'..'z' 26..51 (so ascending ids are numpy's
// alphabetical order for implicit outputs), and the broadcast dims covered by '...' are
// 52, 53, ... aligned to the right (NumPy broadcasting).
// Outputs: input_labels[i][d] is the label of axis d of input i (a label repeated within one
// input takes its diagonal); output_labels lists the output's labels in order; label_sizes[l]
// is the (broadcast) size of label l, -1 when unknown, and -2 for ids not used.
// Errors: InvalidArgument with a message naming the equation (the caller adds the op/node).
Status parse_einsum(const std::string& equation, const std::vector<Shape>& shapes,
                    std::vector<std::vector<int>>* input_labels, std::vector<int>* output_labels,
                    std::vector<int64_t>* label_sizes) {
  constexpr int kEllipsisBase = 52;
  std::string eq;
  for (char c : equation)
    if (c != ' ' && c != '\t' && c != '\n') eq += c;
  std::string lhs = eq, rhs;
  const size_t arrow = eq.find("->");
  const bool explicit_output = arrow != std::string::npos;
  if (explicit_output) {
    lhs = eq.substr(0, arrow);
    rhs = eq.substr(arrow + 2);
    if (rhs.find("->") != std::string::npos)
      return errors::InvalidArgument("equation '{}' has more than one '->'", equation);
  }
  std::vector<std::string> terms;
  {
    size_t start = 0;
    for (;;) {
      const size_t comma = lhs.find(',', start);
      terms.push_back(
          lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (terms.size() != shapes.size())
    return errors::InvalidArgument("equation '{}' has {} input terms but there are {} inputs",
                                   equation, terms.size(), shapes.size());

  // A term as a list of letter ids, with -1 where '...' stands.
  auto parse_term = [&](const std::string& term, std::vector<int>* out) -> Status {
    bool seen_ellipsis = false;
    for (size_t i = 0; i < term.size(); ++i) {
      const char c = term[i];
      if (c >= 'A' && c <= 'Z') {
        out->push_back(c - 'A');
      } else if (c >= 'a' && c <= 'z') {
        out->push_back(26 + (c - 'a'));
      } else if (c == '.') {
        if (term.compare(i, 3, "...") != 0)
          return errors::InvalidArgument("equation '{}': '.' must be part of '...' in term '{}'",
                                         equation, term);
        if (seen_ellipsis)
          return errors::InvalidArgument("equation '{}': term '{}' has more than one '...'",
                                         equation, term);
        seen_ellipsis = true;
        out->push_back(-1);
        i += 2;
      } else {
        return errors::InvalidArgument("equation '{}': invalid character '{}' in term '{}'",
                                       equation, std::string(1, c), term);
      }
    }
    return OkStatus();
  };

  std::vector<std::vector<int>> parsed(terms.size());
  std::vector<int64_t> ell_rank(terms.size(), 0);
  int64_t max_ell = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    TD_RETURN_IF_ERROR(parse_term(terms[i], &parsed[i]));
    const bool has_ell = std::count(parsed[i].begin(), parsed[i].end(), -1) > 0;
    const int64_t letters = static_cast<int64_t>(parsed[i].size()) - (has_ell ? 1 : 0);
    const int64_t rank = static_cast<int64_t>(shapes[i].size());
    if (has_ell ? rank < letters : rank != letters)
      return errors::InvalidArgument(
          "equation '{}': term '{}' has {} labels but input {} has rank {} (shape {})", equation,
          terms[i], letters, i, rank, shape_to_string(shapes[i]));
    ell_rank[i] = has_ell ? rank - letters : 0;
    max_ell = std::max(max_ell, ell_rank[i]);
  }

  label_sizes->assign(static_cast<size_t>(kEllipsisBase + max_ell), -2);
  input_labels->assign(terms.size(), {});
  std::vector<int> occurrences(label_sizes->size(), 0);
  for (size_t i = 0; i < terms.size(); ++i) {
    std::vector<int>& labels = (*input_labels)[i];
    for (int l : parsed[i]) {
      if (l >= 0) {
        labels.push_back(l);
        continue;
      }
      for (int64_t t = 0; t < ell_rank[i]; ++t)
        labels.push_back(static_cast<int>(kEllipsisBase + (max_ell - ell_rank[i]) + t));
    }
    for (size_t d = 0; d < labels.size(); ++d) {
      const int l = labels[d];
      ++occurrences[static_cast<size_t>(l)];
      int64_t& size = (*label_sizes)[static_cast<size_t>(l)];
      const int64_t s = shapes[i][d];
      // Size-1 dims broadcast; -1 (unknown) defers to a known size.
      if (size == -2 || size == 1 || (size == -1 && s > 1)) {
        size = s;
      } else if (s != 1 && s != -1 && size != -1 && s != size) {
        const std::string name =
            l < kEllipsisBase ? std::string(1, static_cast<char>(l < 26 ? 'A' + l : 'a' + l - 26))
                              : std::string("...");
        return errors::InvalidArgument(
            "equation '{}': label '{}' has size {} in input {} (shape {}) but {} elsewhere",
            equation, name, s, i, shape_to_string(shapes[i]), size);
      }
    }
  }

  output_labels->clear();
  if (explicit_output) {
    std::vector<int> out;
    TD_RETURN_IF_ERROR(parse_term(rhs, &out));
    for (int l : out) {
      if (l < 0) {
        for (int64_t t = 0; t < max_ell; ++t)
          output_labels->push_back(static_cast<int>(kEllipsisBase + t));
        continue;
      }
      const char c = static_cast<char>(l < 26 ? 'A' + l : 'a' + l - 26);
      if (occurrences[static_cast<size_t>(l)] == 0)
        return errors::InvalidArgument("equation '{}': output label '{}' is not in any input",
                                       equation, std::string(1, c));
      if (std::count(output_labels->begin(), output_labels->end(), l) > 0)
        return errors::InvalidArgument("equation '{}': output label '{}' appears twice", equation,
                                       std::string(1, c));
      output_labels->push_back(l);
    }
  } else {
    // Implicit output: the broadcast dims, then the labels that appear exactly once, sorted.
    for (int64_t t = 0; t < max_ell; ++t)
      output_labels->push_back(static_cast<int>(kEllipsisBase + t));
    for (int l = 0; l < kEllipsisBase; ++l)
      if (occurrences[static_cast<size_t>(l)] == 1) output_labels->push_back(l);
  }
  return OkStatus();
}

}  // namespace math

namespace {



Status expect_float(const InferenceContext& ctx, int i, const char* what) {
  if (dtype_is_float(ctx.input_dtype(i))) return OkStatus();
  return ctx.error("input {} ({}) has dtype {}, expected float16, bfloat16, float32 or float64", i,
                   what, dtype_name(ctx.input_dtype(i)));
}

Status expect_numeric(const InferenceContext& ctx, int i, const char* what) {
  if (dtype_is_numeric(ctx.input_dtype(i))) return OkStatus();
  return ctx.error("input {} ({}) has dtype {}, expected a numeric type", i, what,
                   dtype_name(ctx.input_dtype(i)));
}

Status expect_int(const InferenceContext& ctx, int i, const char* what) {
  const DType t = ctx.input_dtype(i);
  if (t == DType::kInt32 || t == DType::kInt64) return OkStatus();
  return ctx.error("input {} ({}) has dtype {}, expected int32 or int64", i, what, dtype_name(t));
}

// A scalar (rank 0, or 1-D with one element).
Status expect_scalar(const InferenceContext& ctx, int i, const char* what) {
  const Shape& s = ctx.input_shape(i);
  if (s.empty() || (s.size() == 1 && (s[0] == 1 || s[0] < 0))) return OkStatus();
  return ctx.error("input {} ({}) must be a scalar, got shape {}", i, what, shape_to_string(s));
}

// The value of an integer scalar input when known.
Result<std::optional<int64_t>> scalar_int(const InferenceContext& ctx, int i) {
  TD_ASSIGN_OR_RETURN(auto v, ctx.input_ints(i));
  if (!v) return std::optional<int64_t>();
  if (v->size() != 1) return ctx.error("input {} must hold one value, got {}", i, v->size());
  return std::optional<int64_t>((*v)[0]);
}

// An attribute naming a dtype (output_datatype, dtype) that must be one of `allowed`.
Result<DType> dtype_attr(const InferenceContext& ctx, const char* name, DType dflt,
                         bool (*allowed)(DType), const char* allowed_names) {
  TD_ASSIGN_OR_RETURN(int64_t v, ctx.attr_int(name, static_cast<int64_t>(dflt)));
  if (v < 0 || v > 1000 || !dtype_is_valid(static_cast<int32_t>(v)) ||
      !allowed(static_cast<DType>(v)))
    return ctx.error("attribute '{}' is {}, expected a dtype among {}", name, v, allowed_names);
  return static_cast<DType>(v);
}

bool is_numeric_or_bool_dtype(DType t) { return dtype_is_numeric(t) || t == DType::kBool; }

// ---- Einsum ----

OpSchema einsum_schema() {
  OpSchema s;
  s.name = "Einsum";
  s.min_inputs = 1;
  s.max_inputs = -1;
  s.attributes = {"equation"};
  s.doc = "Einstein summation (numpy.einsum): implicit/explicit output, diagonals, '...'";
  s.infer = [](InferenceContext& ctx) -> Status {
    if (!ctx.has_attr("equation")) return ctx.error("attribute 'equation' is required");
    TD_ASSIGN_OR_RETURN(std::string equation, ctx.attr_string("equation", ""));
    std::vector<Shape> shapes;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      if (!ctx.has_input(i)) return ctx.error("input {} is missing", i);
      TD_RETURN_IF_ERROR(expect_numeric(ctx, i, "Inputs"));
      if (ctx.input_dtype(i) != ctx.input_dtype(0))
        return ctx.error("input {} has dtype {} but input 0 has dtype {}; they must match", i,
                         dtype_name(ctx.input_dtype(i)), dtype_name(ctx.input_dtype(0)));
      shapes.push_back(ctx.input_shape(i));
    }
    std::vector<std::vector<int>> in_labels;
    std::vector<int> out_labels;
    std::vector<int64_t> sizes;
    Status st = math::parse_einsum(equation, shapes, &in_labels, &out_labels, &sizes);
    if (!st.ok()) return ctx.wrap(st);
    Shape out;
    for (int l : out_labels) out.push_back(sizes[static_cast<size_t>(l)]);
    ctx.set_output(0, ctx.input_dtype(0), std::move(out));
    return OkStatus();
  };
  return s;
}

// ---- Det ----

OpSchema det_schema() {
  OpSchema s;
  s.name = "Det";
  s.min_inputs = s.max_inputs = 1;
  s.doc = "determinants of the square matrices in the last two dims";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(expect_float(ctx, 0, "X"));
    const Shape& x = ctx.input_shape(0);
    if (x.size() < 2)
      return ctx.error("input must have rank >= 2 ([*, M, M]), got shape {}", shape_to_string(x));
    if (dims_conflict(x[x.size() - 1], x[x.size() - 2]))
      return ctx.error("input matrices must be square, got shape {}", shape_to_string(x));
    ctx.set_output(0, ctx.input_dtype(0), Shape(x.begin(), x.end() - 2));
    return OkStatus();
  };
  return s;
}

// ---- Compress, Unique, ReverseSequence ----

OpSchema compress_schema() {
  OpSchema s;
  s.name = "Compress";
  s.min_inputs = s.max_inputs = 2;
  s.attributes = {"axis"};
  s.doc = "selects slices (along axis) or elements (flattened) where condition is true";
  s.infer = [](InferenceContext& ctx) -> Status {
    const Shape& x = ctx.input_shape(0);
    if (ctx.input_dtype(1) != DType::kBool)
      return ctx.error("input 1 (condition) has dtype {}, expected bool",
                       dtype_name(ctx.input_dtype(1)));
    const Shape& cond = ctx.input_shape(1);
    if (cond.size() != 1)
      return ctx.error("condition must be 1-D, got shape {}", shape_to_string(cond));
    int64_t limit = 0;  // length along which condition selects
    int64_t axis = -1;
    if (ctx.has_attr("axis")) {
      TD_ASSIGN_OR_RETURN(int64_t a, ctx.attr_int("axis", 0));
      auto na = normalize_axis(a, static_cast<int64_t>(x.size()));
      if (!na.ok())
        return ctx.error("axis {} is out of range for input of shape {}", a, shape_to_string(x));
      axis = *na;
      limit = x[static_cast<size_t>(axis)];
    } else {
      limit = shape_is_static(x) ? shape_numel(x) : -1;
    }
    if (cond[0] >= 0 && limit >= 0 && cond[0] > limit)
      return ctx.error("condition has {} values but the {} has {}", cond[0],
                       axis >= 0 ? "axis" : "flattened input", limit);
    int64_t selected = -1;
    if (const TensorView* c = ctx.input_value(1)) {
      selected = 0;
      for (int64_t i = 0; i < c->numel(); ++i) selected += c->as<bool>()[i] ? 1 : 0;
    }
    Shape out = {selected};
    if (axis >= 0) {
      out = x;
      out[static_cast<size_t>(axis)] = selected;
    }
    ctx.set_output(0, ctx.input_dtype(0), std::move(out));
    return OkStatus();
  };
  return s;
}

OpSchema unique_schema() {
  OpSchema s;
  s.name = "Unique";
  s.min_inputs = s.max_inputs = 1;
  s.min_outputs = 1;
  s.max_outputs = 4;
  s.attributes = {"axis", "sorted"};
  s.doc = "unique elements or slices, with first indices, inverse indices and counts";
  s.infer = [](InferenceContext& ctx) -> Status {
    const Shape& x = ctx.input_shape(0);
    const DType t = ctx.input_dtype(0);
    if (!dtype_is_numeric(t) && t != DType::kBool)
      return ctx.error("input 0 (X) has dtype {}, expected a numeric or bool type", dtype_name(t));
    TD_ASSIGN_OR_RETURN(int64_t sorted, ctx.attr_int("sorted", 1));
    if (sorted != 0 && sorted != 1) return ctx.error("sorted must be 0 or 1, got {}", sorted);
    Shape y = {-1};
    int64_t n = shape_is_static(x) ? shape_numel(x) : -1;
    if (ctx.has_attr("axis")) {
      TD_ASSIGN_OR_RETURN(int64_t a, ctx.attr_int("axis", 0));
      auto na = normalize_axis(a, static_cast<int64_t>(x.size()));
      if (!na.ok())
        return ctx.error("axis {} is out of range for input of shape {}", a, shape_to_string(x));
      y = x;
      y[static_cast<size_t>(*na)] = -1;
      n = x[static_cast<size_t>(*na)];
    }
    ctx.set_output(0, t, std::move(y));
    ctx.set_output(1, DType::kInt64, {-1});
    ctx.set_output(2, DType::kInt64, {n});
    ctx.set_output(3, DType::kInt64, {-1});
    return OkStatus();
  };
  return s;
}

OpSchema reverse_sequence_schema() {
  OpSchema s;
  s.name = "ReverseSequence";
  s.min_inputs = s.max_inputs = 2;
  s.attributes = {"batch_axis", "time_axis"};
  s.doc = "reverses the first sequence_lens[b] steps along time_axis of each batch entry";
  s.infer = [](InferenceContext& ctx) -> Status {
    const Shape& x = ctx.input_shape(0);
    if (x.size() < 2)
      return ctx.error("input must have rank >= 2, got shape {}", shape_to_string(x));
    if (ctx.input_dtype(1) != DType::kInt64)
      return ctx.error("input 1 (sequence_lens) has dtype {}, expected int64",
                       dtype_name(ctx.input_dtype(1)));
    TD_ASSIGN_OR_RETURN(int64_t batch_axis, ctx.attr_int("batch_axis", 1));
    TD_ASSIGN_OR_RETURN(int64_t time_axis, ctx.attr_int("time_axis", 0));
    if ((batch_axis != 0 && batch_axis != 1) || (time_axis != 0 && time_axis != 1) ||
        batch_axis == time_axis)
      return ctx.error("batch_axis and time_axis must be 0 and 1 in some order, got {} and {}",
                       batch_axis, time_axis);
    const Shape& lens = ctx.input_shape(1);
    if (lens.size() != 1 || dims_conflict(lens[0], x[static_cast<size_t>(batch_axis)]))
      return ctx.error("sequence_lens has shape {}, expected [{}] (the batch size of {})",
                       shape_to_string(lens), x[static_cast<size_t>(batch_axis)],
                       shape_to_string(x));
    ctx.set_output(0, ctx.input_dtype(0), x);
    return OkStatus();
  };
  return s;
}

// ---- Shrink, Mish ----

OpSchema shrink_schema() {
  OpSchema s;
  s.name = "Shrink";
  s.min_inputs = s.max_inputs = 1;
  s.attributes = {"bias", "lambd"};
  s.doc = "y = x + bias if x < -lambd, x - bias if x > lambd, else 0";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(expect_numeric(ctx, 0, "input"));
    TD_RETURN_IF_ERROR(ctx.attr_float("bias", 0.0f).status());
    TD_RETURN_IF_ERROR(ctx.attr_float("lambd", 0.5f).status());
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
    return OkStatus();
  };
  return s;
}

OpSchema mish_schema() {
  OpSchema s;
  s.name = "Mish";
  s.min_inputs = s.max_inputs = 1;
  s.doc = "y = x * tanh(softplus(x))";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(expect_float(ctx, 0, "X"));
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
    return OkStatus();
  };
  return s;
}

// ---- window functions ----

OpSchema window_schema(const char* name) {
  OpSchema s;
  s.name = name;
  s.min_inputs = s.max_inputs = 1;
  s.attributes = {"output_datatype", "periodic"};
  s.doc = "window of the given size (periodic or symmetric)";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(expect_int(ctx, 0, "size"));
    TD_RETURN_IF_ERROR(expect_scalar(ctx, 0, "size"));
    TD_ASSIGN_OR_RETURN(DType out, dtype_attr(ctx, "output_datatype", DType::kFloat32,
                                              dtype_is_numeric, "the numeric types"));
    TD_ASSIGN_OR_RETURN(int64_t periodic, ctx.attr_int("periodic", 1));
    if (periodic != 0 && periodic != 1)
      return ctx.error("periodic must be 0 or 1, got {}", periodic);
    TD_ASSIGN_OR_RETURN(std::optional<int64_t> size, scalar_int(ctx, 0));
    if (size && *size < 0) return ctx.error("size must be >= 0, got {}", *size);
    ctx.set_output(0, out, {size ? *size : -1});
    return OkStatus();
  };
  return s;
}

// ---- DFT, STFT, MelWeightMatrix ----

OpSchema dft_schema() {
  OpSchema s;
  s.name = "DFT";
  s.min_inputs = 1;
  s.max_inputs = 3;  // input 2: the axis (opset 20), when not a constant the importer folded
  s.attributes = {"axis", "inverse", "onesided"};
  s.doc = "discrete Fourier transform along one axis; complex values as a last dim of 2";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(expect_float(ctx, 0, "input"));
    const Shape& x = ctx.input_shape(0);
    const int64_t rank = static_cast<int64_t>(x.size());
    if (rank < 2)
      return ctx.error("input must have rank >= 2 ([..., 1] real or [..., 2] complex), got {}",
                       shape_to_string(x));
    if (x.back() != 1 && x.back() != 2 && x.back() != -1)
      return ctx.error("input's last dim must be 1 (real) or 2 (complex), got shape {}",
                       shape_to_string(x));
    TD_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis", 1));
    if (ctx.has_input(2)) {
      if (ctx.has_attr("axis")) return ctx.error("axis is given both as an attribute and as input 2");
      TD_RETURN_IF_ERROR(expect_int(ctx, 2, "axis"));
      TD_RETURN_IF_ERROR(expect_scalar(ctx, 2, "axis"));
      TD_ASSIGN_OR_RETURN(std::optional<int64_t> a, scalar_int(ctx, 2));
      if (!a) {
        Shape out(x.size(), -1);
        out.back() = 2;
        ctx.set_output(0, ctx.input_dtype(0), std::move(out));
        return OkStatus();
      }
      axis = *a;
    }
    // Accepted range [-r, -2] U [0, r-2]: the last dim holds the real/imaginary parts.
    if (axis < -rank || axis > rank - 2 || axis == -1)
      return ctx.error(
          "axis {} is out of range for input of shape {} (valid: [{}, -2] or "
          "[0, {}])",
          axis, shape_to_string(x), -rank, rank - 2);
    if (axis < 0) axis += rank;
    TD_ASSIGN_OR_RETURN(int64_t inverse, ctx.attr_int("inverse", 0));
    TD_ASSIGN_OR_RETURN(int64_t onesided, ctx.attr_int("onesided", 0));
    if (inverse != 0 && inverse != 1) return ctx.error("inverse must be 0 or 1, got {}", inverse);
    if (onesided != 0 && onesided != 1)
      return ctx.error("onesided must be 0 or 1, got {}", onesided);
    int64_t n = x[static_cast<size_t>(axis)];
    if (ctx.has_input(1)) {
      TD_RETURN_IF_ERROR(expect_int(ctx, 1, "dft_length"));
      TD_RETURN_IF_ERROR(expect_scalar(ctx, 1, "dft_length"));
      TD_ASSIGN_OR_RETURN(std::optional<int64_t> len, scalar_int(ctx, 1));
      if (len && *len < 1) return ctx.error("dft_length must be >= 1, got {}", *len);
      n = len ? *len : -1;
    }
    Shape out = x;
    out[static_cast<size_t>(axis)] = onesided && n >= 0 ? n / 2 + 1 : n;
    out.back() = 2;
    ctx.set_output(0, ctx.input_dtype(0), std::move(out));
    return OkStatus();
  };
  return s;
}

OpSchema stft_schema() {
  OpSchema s;
  s.name = "STFT";
  s.min_inputs = 2;
  s.max_inputs = 4;
  s.attributes = {"onesided"};
  s.doc = "short-time Fourier transform of [batch, length, 1 or 2] signals";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(expect_float(ctx, 0, "signal"));
    const Shape& x = ctx.input_shape(0);
    if (x.size() != 3 || (x[2] != 1 && x[2] != 2 && x[2] != -1))
      return ctx.error("signal must have shape [batch, length, 1 or 2], got {}",
                       shape_to_string(x));
    TD_ASSIGN_OR_RETURN(int64_t onesided, ctx.attr_int("onesided", 1));
    if (onesided != 0 && onesided != 1)
      return ctx.error("onesided must be 0 or 1, got {}", onesided);
    TD_RETURN_IF_ERROR(expect_int(ctx, 1, "frame_step"));
    TD_RETURN_IF_ERROR(expect_scalar(ctx, 1, "frame_step"));
    TD_ASSIGN_OR_RETURN(std::optional<int64_t> step, scalar_int(ctx, 1));
    if (step && *step < 1) return ctx.error("frame_step must be >= 1, got {}", *step);
    int64_t frame_length = -1;
    bool known_length = false;
    if (ctx.has_input(2)) {
      if (ctx.input_dtype(2) != ctx.input_dtype(0))
        return ctx.error("window has dtype {} but signal has dtype {}; they must match",
                         dtype_name(ctx.input_dtype(2)), dtype_name(ctx.input_dtype(0)));
      const Shape& w = ctx.input_shape(2);
      if (w.size() != 1) return ctx.error("window must be 1-D, got shape {}", shape_to_string(w));
      frame_length = w[0];
      known_length = true;
    }
    if (ctx.has_input(3)) {
      TD_RETURN_IF_ERROR(expect_int(ctx, 3, "frame_length"));
      TD_RETURN_IF_ERROR(expect_scalar(ctx, 3, "frame_length"));
      TD_ASSIGN_OR_RETURN(std::optional<int64_t> len, scalar_int(ctx, 3));
      if (len && *len < 1) return ctx.error("frame_length must be >= 1, got {}", *len);
      if (len && known_length && dims_conflict(frame_length, *len))
        return ctx.error("frame_length is {} but the window has {} values", *len, frame_length);
      frame_length = len ? *len : frame_length;
      known_length = true;
    }
    if (!known_length) return ctx.error("needs a window or a frame_length to know the frame size");
    if (frame_length == 0) return ctx.error("the window must not be empty");
    int64_t frames = -1;
    if (x[1] >= 0 && frame_length >= 0) {
      if (frame_length > x[1])
        return ctx.error("frame length {} is longer than the signal ({} samples)", frame_length,
                         x[1]);
      if (step) frames = (x[1] - frame_length) / *step + 1;
    }
    const int64_t bins = frame_length < 0 ? -1 : onesided ? frame_length / 2 + 1 : frame_length;
    ctx.set_output(0, ctx.input_dtype(0), {x[0], frames, bins, 2});
    return OkStatus();
  };
  return s;
}

OpSchema mel_weight_matrix_schema() {
  OpSchema s;
  s.name = "MelWeightMatrix";
  s.min_inputs = s.max_inputs = 5;
  s.attributes = {"output_datatype"};
  s.doc = "[dft_length / 2 + 1, num_mel_bins] matrix warping linear to mel frequencies";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(expect_int(ctx, 0, "num_mel_bins"));
    TD_RETURN_IF_ERROR(expect_int(ctx, 1, "dft_length"));
    TD_RETURN_IF_ERROR(expect_int(ctx, 2, "sample_rate"));
    TD_RETURN_IF_ERROR(expect_float(ctx, 3, "lower_edge_hertz"));
    TD_RETURN_IF_ERROR(expect_float(ctx, 4, "upper_edge_hertz"));
    static const char* kNames[] = {"num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz",
                                   "upper_edge_hertz"};
    for (int i = 0; i < 5; ++i) TD_RETURN_IF_ERROR(expect_scalar(ctx, i, kNames[i]));
    TD_ASSIGN_OR_RETURN(DType out, dtype_attr(ctx, "output_datatype", DType::kFloat32,
                                              dtype_is_numeric, "the numeric types"));
    TD_ASSIGN_OR_RETURN(std::optional<int64_t> bins, scalar_int(ctx, 0));
    TD_ASSIGN_OR_RETURN(std::optional<int64_t> dft, scalar_int(ctx, 1));
    TD_ASSIGN_OR_RETURN(std::optional<int64_t> rate, scalar_int(ctx, 2));
    if (bins && *bins < 1) return ctx.error("num_mel_bins must be >= 1, got {}", *bins);
    if (dft && *dft < 1) return ctx.error("dft_length must be >= 1, got {}", *dft);
    if (rate && *rate < 1) return ctx.error("sample_rate must be >= 1, got {}", *rate);
    ctx.set_output(0, out, {dft ? *dft / 2 + 1 : -1, bins ? *bins : -1});
    return OkStatus();
  };
  return s;
}

// ---- random generators ----

Status check_seed(const InferenceContext& ctx) { return ctx.attr_float("seed", 0.0f).status(); }

OpSchema random_schema(const char* name, bool like, bool normal) {
  OpSchema s;
  s.name = name;
  s.min_inputs = s.max_inputs = like ? 1 : 0;
  s.attributes = {"dtype", "seed"};
  if (normal) {
    s.attributes.insert("mean");
    s.attributes.insert("scale");
  } else {
    s.attributes.insert("low");
    s.attributes.insert("high");
  }
  if (!like) s.attributes.insert("shape");
  s.doc = normal ? "samples of a normal distribution" : "samples of a uniform distribution";
  s.infer = [like, normal](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(check_seed(ctx));
    if (normal) {
      TD_RETURN_IF_ERROR(ctx.attr_float("mean", 0.0f).status());
      TD_RETURN_IF_ERROR(ctx.attr_float("scale", 1.0f).status());
    } else {
      TD_ASSIGN_OR_RETURN(float low, ctx.attr_float("low", 0.0f));
      TD_ASSIGN_OR_RETURN(float high, ctx.attr_float("high", 1.0f));
      if (!(low <= high)) return ctx.error("low ({}) must not exceed high ({})", low, high);
    }
    if (like) {
      DType dflt = ctx.input_dtype(0);
      if (!ctx.has_attr("dtype") && !dtype_is_float(dflt))
        return ctx.error(
            "input has dtype {}; without a 'dtype' attribute the output must have "
            "the input's dtype, which must be a float type",
            dtype_name(dflt));
      if (!dtype_is_float(dflt)) dflt = DType::kFloat32;
      TD_ASSIGN_OR_RETURN(DType out, dtype_attr(ctx, "dtype", dflt, dtype_is_float,
                                                "float16, bfloat16, float32, float64"));
      ctx.set_output(0, out, ctx.input_shape(0));
      return OkStatus();
    }
    TD_ASSIGN_OR_RETURN(DType out, dtype_attr(ctx, "dtype", DType::kFloat32, dtype_is_float,
                                              "float16, bfloat16, float32, float64"));
    if (!ctx.has_attr("shape")) return ctx.error("attribute 'shape' is required");
    TD_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ctx.attr_ints("shape"));
    for (int64_t d : shape)
      if (d < 0) return ctx.error("shape {} has a negative dim", shape);
    if (!checked_byte_size(out, shape).ok()) return ctx.error("shape {} is too large", shape);
    ctx.set_output(0, out, shape);
    return OkStatus();
  };
  return s;
}

OpSchema bernoulli_schema() {
  OpSchema s;
  s.name = "Bernoulli";
  s.min_inputs = s.max_inputs = 1;
  s.attributes = {"dtype", "seed"};
  s.doc = "y[i] = 1 with probability input[i], else 0";
  s.infer = [](InferenceContext& ctx) -> Status {
    TD_RETURN_IF_ERROR(expect_float(ctx, 0, "input"));
    TD_RETURN_IF_ERROR(check_seed(ctx));
    TD_ASSIGN_OR_RETURN(DType out,
                        dtype_attr(ctx, "dtype", ctx.input_dtype(0), is_numeric_or_bool_dtype,
                                   "the numeric types and bool"));
    ctx.set_output(0, out, ctx.input_shape(0));
    return OkStatus();
  };
  return s;
}

}  // namespace

void register_math_ops(OpRegistry& r) {
  r.add(einsum_schema());
  r.add(det_schema());
  r.add(compress_schema());
  r.add(unique_schema());
  r.add(reverse_sequence_schema());
  r.add(shrink_schema());
  r.add(mish_schema());
  r.add(window_schema("HannWindow"));
  r.add(window_schema("HammingWindow"));
  r.add(window_schema("BlackmanWindow"));
  r.add(dft_schema());
  r.add(stft_schema());
  r.add(mel_weight_matrix_schema());
  r.add(random_schema("RandomNormal", false, true));
  r.add(random_schema("RandomNormalLike", true, true));
  r.add(random_schema("RandomUniform", false, false));
  r.add(random_schema("RandomUniformLike", true, false));
  r.add(bernoulli_schema());
}

}  // namespace tensord
