// Schemas of the recurrent ops (opset 14+ forms, which opset 17 keeps): RNN, GRU and LSTM.
//
// All three share one input layout (X, W, R, B, sequence_lens, initial_h [, initial_c, P]) and
// one output layout (Y, Y_h [, Y_c]), differing in the number of gates (RNN 1, GRU 3 in zrh
// order, LSTM 4 in iofc order) and of activation functions per direction (1, 2, 3).
//
// The activation list (names, alphas, betas) is resolved in one place, rnn::resolve_activations
// below, which the cpu kernels call too, so inference and kernels cannot disagree.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/op_registry.h"
#include "core/ops/all_ops.h"
#include "core/ops/op_helpers.h"

namespace tensord {
namespace rnn {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Activation names (lower case) and whether they take alpha / beta, with the defaults of the
// corresponding ONNX operators (Affine and ScaledTanh have none there: 1 and 0 / 1 and 1).
struct ActivationInfo {
  const char* name;
  bool uses_alpha;
  bool uses_beta;
  float default_alpha;
  float default_beta;
};

constexpr ActivationInfo kActivations[] = {
    {"relu", false, false, 0.f, 0.f},       {"tanh", false, false, 0.f, 0.f},
    {"sigmoid", false, false, 0.f, 0.f},    {"affine", true, true, 1.f, 0.f},
    {"leakyrelu", true, false, 0.01f, 0.f}, {"thresholdedrelu", true, false, 1.f, 0.f},
    {"scaledtanh", true, true, 1.f, 1.f},   {"hardsigmoid", true, true, 0.2f, 0.5f},
    {"elu", true, false, 1.f, 0.f},         {"softsign", false, false, 0.f, 0.f},
    {"softplus", false, false, 0.f, 0.f},
};

}  // namespace

// Resolves the activations of an RNN/GRU/LSTM node: `per_direction` functions (1, 2 or 3) for
// each of `num_directions` directions, from the 'activations' attribute (default
// `defaults`, repeated per direction; a bidirectional node may also list one direction's worth,
// which then serves both, as onnxruntime allows). Names are matched case-insensitively and
// returned in lower case. 'activation_alpha' / 'activation_beta' values are consumed in order
// by the functions that take them; missing ones get the operator's default. Outputs have
// per_direction * num_directions entries, forward direction first.
Status resolve_activations(const NodeAttrs& a, const std::vector<std::string>& defaults,
                           int64_t num_directions, std::vector<std::string>* names,
                           std::vector<float>* alphas, std::vector<float>* betas) {
  const size_t per_dir = defaults.size();
  const size_t total = per_dir * static_cast<size_t>(num_directions);
  std::vector<std::string> given;
  if (const Attribute* attr = a.attr("activations")) {
    const auto* list = attr->get_if<std::vector<std::string>>();
    if (!list) {
      if (const auto* one = attr->get_if<std::string>()) {
        given = {*one};
      } else {
        return a.error("attribute 'activations' must be a list of strings, got {}",
                       Attribute::kind_name(attr->kind()));
      }
    } else {
      given = *list;
    }
  }
  if (given.empty()) {
    for (int64_t d = 0; d < num_directions; ++d)
      given.insert(given.end(), defaults.begin(), defaults.end());
  } else if (given.size() == per_dir && num_directions == 2) {
    const std::vector<std::string> one = given;
    given.insert(given.end(), one.begin(), one.end());
  }
  if (given.size() != total)
    return a.error(
        "'activations' has {} values [{}], expected {} ({} per direction x {} "
        "direction(s))",
        given.size(), fmt::join(given, ", "), total, per_dir, num_directions);
  TD_ASSIGN_OR_RETURN(std::vector<float> alpha_list, a.attr_floats("activation_alpha", {}));
  TD_ASSIGN_OR_RETURN(std::vector<float> beta_list, a.attr_floats("activation_beta", {}));
  size_t next_alpha = 0, next_beta = 0;
  names->clear();
  alphas->clear();
  betas->clear();
  for (const std::string& g : given) {
    const std::string name = lower(g);
    const ActivationInfo* info = nullptr;
    for (const auto& k : kActivations)
      if (name == k.name) info = &k;
    if (!info)
      return a.error(
          "unknown activation '{}' (expected one of Relu, Tanh, Sigmoid, Affine, LeakyRelu, "
          "ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus)",
          g);
    float alpha = info->default_alpha, beta = info->default_beta;
    if (info->uses_alpha && next_alpha < alpha_list.size()) alpha = alpha_list[next_alpha++];
    if (info->uses_beta && next_beta < beta_list.size()) beta = beta_list[next_beta++];
    names->push_back(name);
    alphas->push_back(alpha);
    betas->push_back(beta);
  }
  return OkStatus();
}

}  // namespace rnn

namespace {

enum class RnnKind { kRnn, kGru, kLstm };

int gates_of(RnnKind k) { return k == RnnKind::kRnn ? 1 : k == RnnKind::kGru ? 3 : 4; }

std::vector<std::string> default_activations(RnnKind k) {
  switch (k) {
    case RnnKind::kRnn:
      return {"Tanh"};
    case RnnKind::kGru:
      return {"Sigmoid", "Tanh"};
    case RnnKind::kLstm:
      return {"Sigmoid", "Tanh", "Tanh"};
  }
  return {};
}



// Checks input i has exactly `expected` (rank and each dim; -1 entries match anything).
Status check_shape(const InferenceContext& ctx, int i, const char* what, const Shape& expected,
                   const char* layout_doc) {
  const Shape& s = ctx.input_shape(i);
  bool ok = s.size() == expected.size();
  for (size_t k = 0; ok && k < s.size(); ++k) ok = !dims_conflict(s[k], expected[k]);
  if (ok) return OkStatus();
  return ctx.error("input {} ({}) must have shape {} ({}), got {}", i, what,
                   shape_to_string(expected), layout_doc, shape_to_string(s));
}

// Returns the first known dim of the candidates, else -1.
int64_t known(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims)
    if (d >= 0) return d;
  return -1;
}

Status rnn_infer(InferenceContext& ctx, RnnKind kind) {
  const int gates = gates_of(kind);
  const DType dt = ctx.input_dtype(0);
  if (!dtype_is_float(dt))
    return ctx.error("input 0 (X) has dtype {}, expected float16, bfloat16, float32 or float64",
                     dtype_name(dt));
  static const char* kNames[] = {"X",         "W",         "R", "B", "sequence_lens",
                                 "initial_h", "initial_c", "P"};
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    if (i == 4 || !ctx.has_input(i)) continue;
    if (ctx.input_dtype(i) != dt)
      return ctx.error("input {} ({}) has dtype {} but X has dtype {}; they must match", i,
                       kNames[i], dtype_name(ctx.input_dtype(i)), dtype_name(dt));
  }

  TD_ASSIGN_OR_RETURN(std::string direction, ctx.attr_string("direction", "forward"));
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    return ctx.error("direction must be forward, reverse or bidirectional, got '{}'", direction);
  const int64_t num_dir = direction == "bidirectional" ? 2 : 1;
  TD_ASSIGN_OR_RETURN(int64_t layout, ctx.attr_int("layout", 0));
  if (layout != 0 && layout != 1) return ctx.error("layout must be 0 or 1, got {}", layout);
  if (ctx.has_attr("clip")) {
    TD_ASSIGN_OR_RETURN(float clip, ctx.attr_float("clip", 0.f));
    if (!(clip > 0.f)) return ctx.error("clip must be > 0, got {}", clip);
  }
  if (kind == RnnKind::kGru) {
    TD_ASSIGN_OR_RETURN(int64_t lbr, ctx.attr_int("linear_before_reset", 0));
    if (lbr != 0 && lbr != 1) return ctx.error("linear_before_reset must be 0 or 1, got {}", lbr);
  }
  if (kind == RnnKind::kLstm) {
    TD_ASSIGN_OR_RETURN(int64_t input_forget, ctx.attr_int("input_forget", 0));
    if (input_forget != 0 && input_forget != 1)
      return ctx.error("input_forget must be 0 or 1, got {}", input_forget);
  }
  std::vector<std::string> names;
  std::vector<float> alphas, betas;
  TD_RETURN_IF_ERROR(
      rnn::resolve_activations(ctx, default_activations(kind), num_dir, &names, &alphas, &betas));

  const Shape& x = ctx.input_shape(0);
  const Shape& w = ctx.input_shape(1);
  const Shape& r = ctx.input_shape(2);
  if (x.size() != 3)
    return ctx.error("input 0 (X) must have rank 3 ({}), got shape {}",
                     layout == 0 ? "[seq_length, batch_size, input_size]"
                                 : "[batch_size, seq_length, input_size]",
                     shape_to_string(x));
  if (w.size() != 3 || r.size() != 3)
    return ctx.error("inputs W and R must have rank 3, got W {} and R {}", shape_to_string(w),
                     shape_to_string(r));
  const int64_t seq = layout == 0 ? x[0] : x[1];
  const int64_t batch = layout == 0 ? x[1] : x[0];
  const int64_t input_size = x[2];

  int64_t hidden = -1;
  if (ctx.has_attr("hidden_size")) {
    TD_ASSIGN_OR_RETURN(hidden, ctx.attr_int("hidden_size", 0));
    if (hidden <= 0) return ctx.error("hidden_size must be > 0, got {}", hidden);
  } else {
    hidden = known({r[2], r[1] >= 0 ? r[1] / gates : -1, w[1] >= 0 ? w[1] / gates : -1});
  }
  const int64_t gh = hidden >= 0 ? gates * hidden : -1;
  const std::string gate_doc = fmt::format("[num_directions, {}*hidden_size, input_size]", gates);
  TD_RETURN_IF_ERROR(check_shape(ctx, 1, "W", {num_dir, gh, input_size}, gate_doc.c_str()));
  const std::string rdoc = fmt::format("[num_directions, {}*hidden_size, hidden_size]", gates);
  TD_RETURN_IF_ERROR(check_shape(ctx, 2, "R", {num_dir, gh, hidden}, rdoc.c_str()));
  if (ctx.has_input(3)) {
    const std::string bdoc = fmt::format("[num_directions, {}*hidden_size]", 2 * gates);
    TD_RETURN_IF_ERROR(
        check_shape(ctx, 3, "B", {num_dir, hidden >= 0 ? 2 * gh : -1}, bdoc.c_str()));
  }
  if (ctx.has_input(4)) {
    const DType st = ctx.input_dtype(4);
    if (st != DType::kInt32 && st != DType::kInt64)
      return ctx.error("input 4 (sequence_lens) has dtype {}, expected int32", dtype_name(st));
    TD_RETURN_IF_ERROR(check_shape(ctx, 4, "sequence_lens", {batch}, "[batch_size]"));
    TD_ASSIGN_OR_RETURN(auto lens, ctx.input_ints(4));
    if (lens && seq >= 0) {
      for (int64_t v : *lens)
        if (v < 0 || v > seq)
          return ctx.error("sequence_lens values must be in [0, {}] (seq_length), got {}", seq,
                           *lens);
    }
  }
  const Shape state = layout == 0 ? Shape{num_dir, batch, hidden} : Shape{batch, num_dir, hidden};
  const char* state_doc = layout == 0 ? "[num_directions, batch_size, hidden_size]"
                                      : "[batch_size, num_directions, hidden_size]";
  if (ctx.has_input(5)) TD_RETURN_IF_ERROR(check_shape(ctx, 5, "initial_h", state, state_doc));
  if (kind == RnnKind::kLstm) {
    if (ctx.has_input(6)) TD_RETURN_IF_ERROR(check_shape(ctx, 6, "initial_c", state, state_doc));
    if (ctx.has_input(7))
      TD_RETURN_IF_ERROR(check_shape(ctx, 7, "P", {num_dir, hidden >= 0 ? 3 * hidden : -1},
                                     "[num_directions, 3*hidden_size]"));
  }
  ctx.set_output(
      0, dt, layout == 0 ? Shape{seq, num_dir, batch, hidden} : Shape{batch, seq, num_dir, hidden});
  ctx.set_output(1, dt, state);
  if (kind == RnnKind::kLstm) ctx.set_output(2, dt, state);
  return OkStatus();
}

OpSchema rnn_schema(const char* name, RnnKind kind, const char* doc) {
  OpSchema s;
  s.name = name;
  s.min_inputs = 3;
  s.max_inputs = kind == RnnKind::kLstm ? 8 : 6;
  s.min_outputs = 0;
  s.max_outputs = kind == RnnKind::kLstm ? 3 : 2;
  s.attributes = {"activation_alpha", "activation_beta", "activations", "clip",
                  "direction",        "hidden_size",     "layout"};
  if (kind == RnnKind::kGru) s.attributes.insert("linear_before_reset");
  if (kind == RnnKind::kLstm) s.attributes.insert("input_forget");
  s.doc = doc;
  s.infer = [kind](InferenceContext& ctx) { return rnn_infer(ctx, kind); };
  return s;
}

}  // namespace

void register_rnn_ops(OpRegistry& r) {
  r.add(rnn_schema("RNN", RnnKind::kRnn, "one-layer Elman RNN: H = f(X W^T + H R^T + Wb + Rb)"));
  r.add(rnn_schema("GRU", RnnKind::kGru, "one-layer GRU (gates z, r, h; linear_before_reset)"));
  r.add(rnn_schema("LSTM", RnnKind::kLstm,
                   "one-layer LSTM (gates i, o, f, c; peepholes, input_forget, clip)"));
}

}  // namespace tensord
