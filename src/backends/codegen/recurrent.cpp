#include "backends/codegen/recurrent.h"

#include <fmt/format.h>

#include "core/errors.h"
#include "core/node_attrs.h"
#include "core/ops/op_helpers.h"

namespace tensord::codegen {
namespace {

std::string C(int64_t v) { return "((i64)" + std::to_string(v) + ")"; }

}  // namespace

Result<RecurrentPlan> plan_recurrent(const Node& node, const std::vector<TensorType>& in) {
  auto no = [&](const std::string& why) {
    return errors::Unimplemented("{}: the generated recurrent loop {} ({})", node.op, why, node.label());
  };
  RecurrentPlan p;
  std::vector<std::string> defaults;
  if (node.op == "RNN") {
    p.kind = RecurrentPlan::kRnn, p.gates = 1, defaults = {"tanh"};
  } else if (node.op == "GRU") {
    p.kind = RecurrentPlan::kGru, p.gates = 3, defaults = {"sigmoid", "tanh"};
  } else if (node.op == "LSTM") {
    p.kind = RecurrentPlan::kLstm, p.gates = 4, defaults = {"sigmoid", "tanh", "tanh"};
  } else {
    return no("covers RNN, GRU and LSTM only");
  }
  if (!node.domain.empty() && node.domain != "ai.onnx") return no("covers ai.onnx only");
  auto has = [&](size_t i) { return i < in.size() && in[i].defined(); };
  if (!has(0) || !has(1) || !has(2)) return no("needs X, W and R");
  const size_t max_inputs = p.kind == RecurrentPlan::kLstm ? 8 : 6;
  for (size_t i = max_inputs; i < in.size(); ++i)
    if (has(i)) return no(fmt::format("takes {} inputs at most", max_inputs));
  for (size_t i = 0; i < in.size(); ++i) {
    if (!has(i)) continue;
    if (!shape_is_static(in[i].shape)) return no("needs static shapes");
    if (i == 4) {
      if (in[i].dtype != DType::kInt32 && in[i].dtype != DType::kInt64)
        return no("needs int32 or int64 sequence_lens");
    } else if (in[i].dtype != DType::kFloat32) {
      return no(std::string("computes float32 only, input ") + std::to_string(i) + " is " +
                dtype_name(in[i].dtype));
    }
  }
  NodeAttrs a(node);
  TD_ASSIGN_OR_RETURN(std::string direction, a.attr_string("direction", "forward"));
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    return errors::InvalidArgument("{}: direction '{}' is not forward, reverse or bidirectional ({})", node.op,
                                   direction, node.label());
  p.dirs = direction == "bidirectional" ? 2 : 1;
  p.reverse[0] = direction == "reverse";
  p.reverse[1] = true;
  TD_ASSIGN_OR_RETURN(p.layout, a.attr_int("layout", 0));
  if (p.layout != 0 && p.layout != 1) return no(fmt::format("has no layout {}", p.layout));
  if (a.has_attr("clip")) return no("has no clip");
  TD_ASSIGN_OR_RETURN(int64_t lbr, a.attr_int("linear_before_reset", 0));
  p.linear_before_reset = lbr != 0;
  TD_ASSIGN_OR_RETURN(int64_t forget, a.attr_int("input_forget", 0));
  p.input_forget = forget != 0;
  std::vector<std::string> names;
  std::vector<float> alphas, betas;
  TD_RETURN_IF_ERROR(rnn::resolve_activations(a, defaults, p.dirs, &names, &alphas, &betas));
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] != defaults[i % defaults.size()])
      return no(fmt::format("has only the default activations ({}), not '{}'", fmt::join(defaults, ", "),
                            names[i]));
  const Shape& x = in[0].shape;
  const Shape& w = in[1].shape;
  const Shape& r = in[2].shape;
  if (x.size() != 3 || w.size() != 3 || r.size() != 3)
    return errors::InvalidArgument("{}: X, W and R must be 3-D ({})", node.op, node.label());
  p.seq = p.layout == 0 ? x[0] : x[1];
  p.batch = p.layout == 0 ? x[1] : x[0];
  p.input = x[2];
  p.hidden = r[2];
  const int64_t G = p.gates, H = p.hidden, D = p.dirs;
  if (w[0] != D || w[1] != G * H || w[2] != p.input || r[0] != D || r[1] != G * H)
    return errors::InvalidArgument("{}: W {} and R {} do not fit X {} with {} direction(s) of {} gates ({})",
                                   node.op, shape_to_string(w), shape_to_string(r), shape_to_string(x), D, G,
                                   node.label());
  if (p.seq <= 0 || p.batch <= 0 || p.input <= 0 || H <= 0) return no("needs non-empty tensors");
  const Shape state = p.layout == 0 ? Shape{D, p.batch, H} : Shape{p.batch, D, H};
  auto check = [&](size_t i, const Shape& want, const char* what) -> Status {
    if (has(i) && in[i].shape != want)
      return errors::InvalidArgument("{}: {} has shape {}, expected {} ({})", node.op, what,
                                     shape_to_string(in[i].shape), shape_to_string(want), node.label());
    return OkStatus();
  };
  TD_RETURN_IF_ERROR(check(3, Shape{D, 2 * G * H}, "B"));
  TD_RETURN_IF_ERROR(check(4, Shape{p.batch}, "sequence_lens"));
  TD_RETURN_IF_ERROR(check(5, state, "initial_h"));
  TD_RETURN_IF_ERROR(check(6, state, "initial_c"));
  TD_RETURN_IF_ERROR(check(7, Shape{D, 3 * H}, "P"));
  p.bias = has(3);
  p.lens = has(4);
  p.lens_int64 = p.lens && in[4].dtype == DType::kInt64;
  p.initial_h = has(5);
  p.initial_c = p.kind == RecurrentPlan::kLstm && has(6);
  p.peepholes = p.kind == RecurrentPlan::kLstm && has(7);
  auto wants = [&](size_t i) { return i < node.outputs.size() && !node.outputs[i].empty(); };
  p.y = wants(0);
  p.y_h = wants(1);
  p.y_c = p.kind == RecurrentPlan::kLstm && wants(2);
  return p;
}

TemplateKernel zero_kernel(int64_t n) {
  TemplateKernel k;
  k.name = "tensord_zero";
  k.out_types = {"float"};
  k.n = n;
  k.body = "out0[gid] = 0.0f;\n";
  return k;
}

TemplateKernel iota_kernel(int64_t n) {
  TemplateKernel k;
  k.name = "tensord_iota";
  k.out_types = {"int"};
  k.n = n;
  k.body = "out0[gid] = (int)gid;\n";
  return k;
}

namespace {

// Index of state element gid = (d, b, j) in a tensor of the node's state layout
// ([D][B][H] for layout 0, [B][D][H] for layout 1).
std::string state_index(const RecurrentPlan& p) {
  if (p.layout == 0) return "gid";
  return fmt::format("((b * {} + d) * {} + j)", C(p.dirs), C(p.hidden));
}

// The common head of the step kernels: d, b, j, the step, the entry's length L, whether it
// is active (else return), its time t and row of X, and pointers xp, hr, wb, rb.
std::string step_head(const RecurrentPlan& p, int lens_input, int bias_input, bool copy_state) {
  const int64_t B = p.batch, H = p.hidden, S = p.seq, GH = p.gh();
  std::string s = fmt::format(
      "const i64 d = gid / {0};\nconst i64 b = (gid / {1}) % {2};\nconst i64 j = gid % {1};\n"
      "const i64 s = (i64)in0[0];\n",
      C(B * H), C(H), C(B));
  if (lens_input >= 0) {
    // The host checked 0 <= L <= S; clamped anyway so no index leaves the buffers.
    s += fmt::format("i64 L = (i64)in{0}[b];\nif (L > {1}) L = {1};\nif (L < 0) L = 0;\n", lens_input, C(S));
  } else {
    s += fmt::format("const i64 L = {};\n", C(S));
  }
  // Past its length an entry keeps its state (fused: copied to the buffer the next step reads).
  s += p.fused && copy_state ? "if (s >= L) { out0[gid] = in2[gid]; return; }\n" : "if (s >= L) return;\n";
  const std::string rev = p.dirs == 2 ? "d == 1" : p.reverse[0] ? "1" : "0";
  s += fmt::format("const i64 t = ({}) ? L - 1 - s : s;\n", rev);
  s += fmt::format("const i64 row = {};\n", p.layout == 0 ? fmt::format("t * {} + b", C(B))
                                                          : fmt::format("b * {} + t", C(S)));
  s += fmt::format("GLOBAL const float* xp = in1 + d * {} + row * {};\n", C(S * B * GH), C(GH));
  if (!p.fused) s += fmt::format("GLOBAL const float* hr = in2 + (d * {} + b) * {};\n", C(B), C(GH));
  if (bias_input >= 0) {
    s += fmt::format("GLOBAL const float* wb = in{} + d * {};\nGLOBAL const float* rb = wb + {};\n", bias_input,
                     C(2 * GH), C(GH));
  }
  return s;
}

// Fused: hr<g> = sum_k src_g[k] R[d][g H + j][k] for each (gate g, source row pointer): the
// step's products in the kernel, one pass over k.
std::string dots(const RecurrentPlan& p, int r_input, const std::vector<std::pair<int, std::string>>& gates) {
  const int64_t B = p.batch, H = p.hidden;
  std::string s = fmt::format("GLOBAL const float* rw = in{} + d * {} + j * {};\n", r_input, C(p.gh() * H), C(H));
  std::string loop;
  for (const auto& [g, src] : gates) {
    s += fmt::format("float hr{} = 0.0f;\nGLOBAL const float* src{} = {} + (d * {} + b) * {};\n", g, g, src, C(B),
                     C(H));
    loop += fmt::format("  hr{0} += src{0}[k] * rw[{1} + k];\n", g, C(g * H * H));
  }
  return s + fmt::format("for (i64 k = 0; k < {}; ++k) {{\n{}}}\n", C(H), loop);
}

// H R^T of gate g at unit j: from HR (the GEMMs'), or hr<g> (fused, dots()).
std::string hr_term(const RecurrentPlan& p, int g) {
  if (p.fused) return fmt::format("hr{}", g);
  return g == 0 ? "hr[j]" : fmt::format("hr[{} + j]", C(g * p.hidden));
}

// The pre-activation of gate g (0-based) at unit j: X W^T + H R^T (+ Wb + Rb).
std::string pre(const RecurrentPlan& p, int g, bool with_hr = true) {
  const std::string o = g == 0 ? "j" : fmt::format("{} + j", C(g * p.hidden));
  std::string e = "xp[" + o + "]";
  if (with_hr) e += " + " + hr_term(p, g);
  if (p.bias) e += " + wb[" + o + "]" + (with_hr ? " + rb[" + o + "]" : "");
  return e;
}

// A numerically stable logistic sigmoid of the variable x.
std::string sig(const std::string& x) {
  return fmt::format("({0} >= 0.0f ? 1.0f / (1.0f + exp(-{0})) : exp({0}) / (1.0f + exp({0})))", x);
}

}  // namespace

TemplateKernel recurrent_init_kernel(const RecurrentPlan& p) {
  TemplateKernel k;
  k.name = "tensord_rnn_init";
  k.n = p.state_numel();
  const bool lstm = p.kind == RecurrentPlan::kLstm;
  const int64_t H = p.hidden, B = p.batch;
  k.body = fmt::format("const i64 d = gid / {0};\nconst i64 b = (gid / {1}) % {2};\nconst i64 j = gid % {1};\n"
                       "const i64 si = {3};\n(void)d; (void)b; (void)j; (void)si;\n",
                       C(B * H), C(H), C(B), state_index(p));
  int in = 0, out = 0;
  if (p.initial_h) k.in_types.push_back("float");
  const std::string h0 = p.initial_h ? fmt::format("in{}[si]", in++) : "0.0f";
  if (p.initial_c) k.in_types.push_back("float");
  const std::string c0 = p.initial_c ? fmt::format("in{}[si]", in++) : "0.0f";
  k.out_types.push_back("float");
  k.body += fmt::format("out{}[gid] = {};\n", out++, h0);
  if (lstm) {
    k.out_types.push_back("float");
    k.body += fmt::format("out{}[gid] = {};\n", out++, c0);
  }
  for (bool o : {p.y_h, p.y_c && lstm}) {
    if (!o) continue;
    k.out_types.push_back("float");
    k.body += fmt::format("out{}[si] = 0.0f;\n", out++);
  }
  return k;
}

TemplateKernel recurrent_reset_kernel(const RecurrentPlan& p) {
  TemplateKernel k;
  k.name = "tensord_gru_reset";
  k.n = p.state_numel();
  k.in_types = {"int", "float", "float", "float"};  // step, XP, HR, H (fused: step, XP, H, R)
  int bias_in = -1, lens_in = -1;
  if (p.bias) bias_in = static_cast<int>(k.in_types.size()), k.in_types.push_back("float");
  if (p.lens) lens_in = static_cast<int>(k.in_types.size()), k.in_types.push_back(p.lens_int64 ? "i64" : "int");
  k.out_types = {"float"};
  k.body = step_head(p, lens_in, bias_in, false);
  if (p.fused) k.body += dots(p, 3, {{1, "in2"}});
  k.body += fmt::format("const float rp = {};\nout0[gid] = {} * {}[gid];\n", pre(p, 1), sig("rp"),
                        p.fused ? "in2" : "in3");
  return k;
}

TemplateKernel recurrent_gate_kernel(const RecurrentPlan& p) {
  TemplateKernel k;
  k.name = p.kind == RecurrentPlan::kRnn ? "tensord_rnn_step"
           : p.kind == RecurrentPlan::kGru ? "tensord_gru_step" : "tensord_lstm_step";
  k.n = p.state_numel();
  const bool lstm = p.kind == RecurrentPlan::kLstm;
  k.in_types = {"int", "float", "float"};  // step, XP, HR (fused: H_{t-1})
  const bool gru_reset = p.kind == RecurrentPlan::kGru && !p.linear_before_reset;
  if (p.fused) k.in_types.push_back("float");                // R
  if (p.fused && gru_reset) k.in_types.push_back("float");  // RH
  int bias_in = -1, peep_in = -1, lens_in = -1;
  if (p.bias) bias_in = static_cast<int>(k.in_types.size()), k.in_types.push_back("float");
  if (p.peepholes) peep_in = static_cast<int>(k.in_types.size()), k.in_types.push_back("float");
  if (p.lens) lens_in = static_cast<int>(k.in_types.size()), k.in_types.push_back(p.lens_int64 ? "i64" : "int");
  k.out_types = {"float"};  // H
  if (lstm) k.out_types.push_back("float");  // C
  std::string& s = k.body;
  s = step_head(p, lens_in, bias_in, true);
  const int64_t H = p.hidden;
  if (p.fused) {
    std::vector<std::pair<int, std::string>> gates;
    for (int g = 0; g < p.gates; ++g) {
      if (gru_reset && g == 1) continue;  // r came from the reset kernel, as RH
      gates.emplace_back(g, gru_reset && g == 2 ? "in4" : "in2");
    }
    s += dots(p, 3, gates);
  }
  if (p.kind == RecurrentPlan::kRnn) {
    s += fmt::format("const float a = {};\nconst float h = tanh(a);\n", pre(p, 0));
  } else if (p.kind == RecurrentPlan::kGru) {
    s += fmt::format("const float zp = {};\nconst float z = {};\n", pre(p, 0), sig("zp"));
    std::string rh = hr_term(p, 2);
    if (p.bias) rh += " + rb[" + C(2 * H) + " + j]";
    std::string hp = pre(p, 2, false);
    if (p.linear_before_reset) {
      s += fmt::format("const float rp = {};\nconst float r = {};\n", pre(p, 1), sig("rp"));
      s += fmt::format("const float hp = {} + r * ({});\n", hp, rh);
    } else {  // hr[2H..3H) (hr2 fused) already holds (r . H) Rh^T
      s += fmt::format("const float hp = {} + {};\n", hp, rh);
    }
    s += fmt::format("const float h = (1.0f - z) * tanh(hp) + z * {}[gid];\n", p.fused ? "in2" : "out0");
  } else {
    s += "const float cp = out1[gid];\n";
    auto peep = [&](int g, const char* c) {
      return p.peepholes ? fmt::format(" + in{}[d * {} + {} + j] * {}", peep_in, C(3 * H), C(g * H), c)
                         : std::string();
    };
    s += fmt::format("const float ip = {}{};\nconst float i = {};\n", pre(p, 0), peep(0, "cp"), sig("ip"));
    if (p.input_forget) {
      s += "const float f = 1.0f - i;\n";
    } else {
      s += fmt::format("const float fp = {}{};\nconst float f = {};\n", pre(p, 2), peep(2, "cp"), sig("fp"));
    }
    s += fmt::format("const float c = f * cp + i * tanh({});\n", pre(p, 3));
    s += fmt::format("const float op = {}{};\nconst float o = {};\n", pre(p, 1), peep(1, "c"), sig("op"));
    s += "const float h = o * tanh(c);\nout1[gid] = c;\n";
  }
  s += "out0[gid] = h;\n";
  const int64_t B = p.batch, D = p.dirs, S = p.seq;
  int out = lstm ? 2 : 1;
  if (p.y) {
    k.out_types.push_back("float");
    s += fmt::format("out{}[{}] = h;\n", out++,
                     p.layout == 0 ? fmt::format("((t * {} + d) * {} + b) * {} + j", C(D), C(B), C(H))
                                   : fmt::format("((b * {} + t) * {} + d) * {} + j", C(S), C(D), C(H)));
  }
  const std::string si = state_index(p);
  if (p.y_h) {
    k.out_types.push_back("float");
    s += fmt::format("out{}[{}] = h;\n", out++, si);
  }
  if (p.y_c && lstm) {
    k.out_types.push_back("float");
    s += fmt::format("out{}[{}] = c;\n", out++, si);
  }
  return k;
}

}  // namespace tensord::codegen
