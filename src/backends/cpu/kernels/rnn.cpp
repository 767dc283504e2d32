// Reference kernels of the recurrent ops: RNN, GRU and LSTM (ONNX opset 14+ semantics).
//
// One loop nest for all three: per direction, per batch entry, per time step, the gate
// pre-activations X_t W^T + H_{t-1} R^T + Wb + Rb are computed in double, then combined per op.
// Behaviour the spec leaves open follows onnxruntime: clip bounds every gate pre-activation
// (and C_t before h() in LSTM); input_forget sets f = 1 - i; outputs past an entry's sequence
// length are 0, and an entry of length 0 has Y_h (and Y_c) 0; the reverse direction runs over
// each entry's own length, from its last valid step down to 0.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/dispatch.h"
#include "backends/cpu/kernel.h"
#include "core/op_registry.h"
#include "core/ops/op_helpers.h"

namespace tensord {
namespace cpu {
namespace {

enum class RnnKind { kRnn, kGru, kLstm };

enum class ActKind {
  kRelu,
  kTanh,
  kSigmoid,
  kAffine,
  kLeakyRelu,
  kThresholdedRelu,
  kScaledTanh,
  kHardSigmoid,
  kElu,
  kSoftsign,
  kSoftplus
};

struct Activation {
  ActKind kind = ActKind::kTanh;
  double alpha = 0;
  double beta = 0;

  double operator()(double x) const {
    switch (kind) {
      case ActKind::kRelu:
        return x > 0 ? x : 0;
      case ActKind::kTanh:
        return std::tanh(x);
      case ActKind::kSigmoid:
        return 1.0 / (1.0 + std::exp(-x));
      case ActKind::kAffine:
        return alpha * x + beta;
      case ActKind::kLeakyRelu:
        return x >= 0 ? x : alpha * x;
      case ActKind::kThresholdedRelu:
        return x > alpha ? x : 0;
      case ActKind::kScaledTanh:
        return alpha * std::tanh(beta * x);
      case ActKind::kHardSigmoid:
        return std::max(0.0, std::min(1.0, alpha * x + beta));
      case ActKind::kElu:
        return x >= 0 ? x : alpha * (std::exp(x) - 1);
      case ActKind::kSoftsign:
        return x / (1 + std::abs(x));
      case ActKind::kSoftplus:
        return std::log1p(std::exp(x));
    }
    return x;
  }
};

ActKind act_kind(const std::string& lower_name) {
  static const std::pair<const char*, ActKind> kMap[] = {
      {"relu", ActKind::kRelu},
      {"tanh", ActKind::kTanh},
      {"sigmoid", ActKind::kSigmoid},
      {"affine", ActKind::kAffine},
      {"leakyrelu", ActKind::kLeakyRelu},
      {"thresholdedrelu", ActKind::kThresholdedRelu},
      {"scaledtanh", ActKind::kScaledTanh},
      {"hardsigmoid", ActKind::kHardSigmoid},
      {"elu", ActKind::kElu},
      {"softsign", ActKind::kSoftsign},
      {"softplus", ActKind::kSoftplus},
  };
  for (const auto& [name, kind] : kMap)
    if (lower_name == name) return kind;
  return ActKind::kTanh;  // unreachable: resolve_activations validated the names
}

std::vector<double> to_doubles(const TensorView& v) {
  std::vector<double> out(static_cast<size_t>(v.numel()));
  (void)dispatch_float(v.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(v.as<T>()[i]);
    return OkStatus();
  });
  return out;
}

Status store(const MutableTensorView& dst, const std::vector<double>& values) {
  return dispatch_float(dst.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < values.size(); ++i) dst.as<T>()[i] = static_cast<T>(values[i]);
    return OkStatus();
  });
}

bool wants_output(const KernelContext& ctx, int i) {
  return i < ctx.num_outputs() && ctx.output_type(i).defined();
}

}  // namespace

Result<std::vector<int64_t>> rnn_sequence_lengths(const KernelContext& ctx, int64_t batch,
                                                  int64_t seq) {
  std::vector<int64_t> lens(static_cast<size_t>(batch), seq);
  if (!ctx.has_input(4)) return lens;
  const TensorView& sv = ctx.input(4);
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t v = sv.dtype == DType::kInt64 ? sv.as<int64_t>()[i] : sv.as<int32_t>()[i];
    if (v < 0 || v > seq)
      return ctx.error("sequence_lens[{}] = {} is outside [0, {}] (seq_length)", i, v, seq);
    lens[static_cast<size_t>(i)] = v;
  }
  return lens;
}

namespace {

Status rnn_kernel(KernelContext& ctx, RnnKind kind) {
  const int gates = kind == RnnKind::kRnn ? 1 : kind == RnnKind::kGru ? 3 : 4;
  const std::vector<std::string> defaults =
      kind == RnnKind::kRnn   ? std::vector<std::string>{"tanh"}
      : kind == RnnKind::kGru ? std::vector<std::string>{"sigmoid", "tanh"}
                              : std::vector<std::string>{"sigmoid", "tanh", "tanh"};
  const int acts_per_dir = static_cast<int>(defaults.size());

  TD_ASSIGN_OR_RETURN(std::string direction, ctx.attr_string("direction", "forward"));
  const int64_t num_dir = direction == "bidirectional" ? 2 : 1;
  TD_ASSIGN_OR_RETURN(int64_t layout, ctx.attr_int("layout", 0));
  const bool has_clip = ctx.has_attr("clip");
  TD_ASSIGN_OR_RETURN(float clip_f, ctx.attr_float("clip", 0.f));
  const double clip = clip_f;
  TD_ASSIGN_OR_RETURN(int64_t linear_before_reset, ctx.attr_int("linear_before_reset", 0));
  TD_ASSIGN_OR_RETURN(int64_t input_forget, ctx.attr_int("input_forget", 0));
  std::vector<std::string> names;
  std::vector<float> alphas, betas;
  TD_RETURN_IF_ERROR(rnn::resolve_activations(ctx, defaults, num_dir, &names, &alphas, &betas));
  std::vector<Activation> acts;
  for (size_t i = 0; i < names.size(); ++i)
    acts.push_back({act_kind(names[i]), alphas[i], betas[i]});

  const TensorView& xv = ctx.input(0);
  const int64_t seq = layout == 0 ? xv.shape[0] : xv.shape[1];
  const int64_t batch = layout == 0 ? xv.shape[1] : xv.shape[0];
  const int64_t in_size = xv.shape[2];
  const int64_t hidden = ctx.input(2).shape[2];
  const int64_t gh = gates * hidden;

  const std::vector<double> x = to_doubles(xv);
  const std::vector<double> w = to_doubles(ctx.input(1));
  const std::vector<double> r = to_doubles(ctx.input(2));
  std::vector<double> b(static_cast<size_t>(num_dir * 2 * gh), 0.0);
  if (ctx.has_input(3)) b = to_doubles(ctx.input(3));
  TD_ASSIGN_OR_RETURN(const std::vector<int64_t> lens, rnn_sequence_lengths(ctx, batch, seq));
  const int64_t state_n = num_dir * batch * hidden;
  std::vector<double> h0(static_cast<size_t>(state_n), 0.0), c0(h0);
  if (ctx.has_input(5)) h0 = to_doubles(ctx.input(5));
  const bool is_lstm = kind == RnnKind::kLstm;
  if (is_lstm && ctx.has_input(6)) c0 = to_doubles(ctx.input(6));
  std::vector<double> p;
  if (is_lstm && ctx.has_input(7)) p = to_doubles(ctx.input(7));

  // Index helpers (layout 0 is time-major, layout 1 batch-major).
  auto x_at = [&](int64_t t, int64_t bi) {
    return (layout == 0 ? t * batch + bi : bi * seq + t) * in_size;
  };
  auto y_at = [&](int64_t t, int64_t d, int64_t bi) {
    return (layout == 0 ? (t * num_dir + d) * batch + bi : (bi * seq + t) * num_dir + d) * hidden;
  };
  auto state_at = [&](int64_t d, int64_t bi) {
    return (layout == 0 ? d * batch + bi : bi * num_dir + d) * hidden;
  };

  std::vector<double> y(static_cast<size_t>(seq * num_dir * batch * hidden), 0.0);
  std::vector<double> yh(static_cast<size_t>(state_n), 0.0), yc(yh);
  auto clip_fn = [&](double v) { return has_clip ? std::max(-clip, std::min(clip, v)) : v; };

  const size_t uh = static_cast<size_t>(hidden);
  std::vector<double> h(uh), c(uh), hn(uh), z(uh), rg(uh), gx(static_cast<size_t>(gh)),
      gr(static_cast<size_t>(gh));
  for (int64_t d = 0; d < num_dir; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    const double* wd = w.data() + d * gh * in_size;
    const double* rd = r.data() + d * gh * hidden;
    const double* wb = b.data() + d * 2 * gh;
    const double* rb = wb + gh;
    const double* pd = p.empty() ? nullptr : p.data() + d * 3 * hidden;
    const Activation* act = acts.data() + d * acts_per_dir;
    for (int64_t bi = 0; bi < batch; ++bi) {
      const int64_t len = lens[static_cast<size_t>(bi)];
      const int64_t s0 = state_at(d, bi);
      std::copy_n(h0.begin() + s0, hidden, h.begin());
      std::copy_n(c0.begin() + s0, hidden, c.begin());
      for (int64_t step = 0; step < len; ++step) {
        const int64_t t = reverse ? len - 1 - step : step;
        const double* xt = x.data() + x_at(t, bi);
        // gx = X_t W^T + Wb, gr = H_{t-1} R^T + Rb, one row per gate unit.
        for (int64_t g = 0; g < gh; ++g) {
          double ax = wb[g], ar = rb[g];
          for (int64_t k = 0; k < in_size; ++k) ax += xt[k] * wd[g * in_size + k];
          for (int64_t k = 0; k < hidden; ++k) ar += h[static_cast<size_t>(k)] * rd[g * hidden + k];
          gx[static_cast<size_t>(g)] = ax;
          gr[static_cast<size_t>(g)] = ar;
        }
        if (kind == RnnKind::kRnn) {
          for (size_t j = 0; j < uh; ++j) hn[j] = act[0](clip_fn(gx[j] + gr[j]));
        } else if (kind == RnnKind::kGru) {
          // Gates z, r, h at offsets 0, H, 2H.
          for (size_t j = 0; j < uh; ++j) {
            z[j] = act[0](clip_fn(gx[j] + gr[j]));
            rg[j] = act[0](clip_fn(gx[uh + j] + gr[uh + j]));
          }
          for (size_t j = 0; j < uh; ++j) {
            const size_t hj = 2 * uh + j;
            double pre;
            if (linear_before_reset) {
              pre = gx[hj] + rg[j] * gr[hj];
            } else {  // (r . H_{t-1}) Rh^T + Rbh
              double acc = rb[hj];
              const double* rrow = rd + hj * uh;
              for (size_t k = 0; k < uh; ++k) acc += rg[k] * h[k] * rrow[k];
              pre = gx[hj] + acc;
            }
            hn[j] = (1 - z[j]) * act[1](clip_fn(pre)) + z[j] * h[j];
          }
        } else {
          // Gates i, o, f, c at offsets 0, H, 2H, 3H; peepholes i, o, f.
          for (size_t j = 0; j < uh; ++j) {
            const double c_prev = c[j];
            const double pi = pd ? pd[j] : 0, po = pd ? pd[uh + j] : 0,
                         pf = pd ? pd[2 * uh + j] : 0;
            const double ig = act[0](clip_fn(gx[j] + gr[j] + pi * c_prev));
            const double fg = input_forget
                                  ? 1 - ig
                                  : act[0](clip_fn(gx[2 * uh + j] + gr[2 * uh + j] + pf * c_prev));
            const double cg = act[1](clip_fn(gx[3 * uh + j] + gr[3 * uh + j]));
            const double c_new = fg * c_prev + ig * cg;
            const double og = act[0](clip_fn(gx[uh + j] + gr[uh + j] + po * c_new));
            c[j] = c_new;
            hn[j] = og * act[2](clip_fn(c_new));
          }
        }
        h = hn;
        std::copy(h.begin(), h.end(), y.begin() + y_at(t, d, bi));
      }
      if (len > 0) {
        std::copy(h.begin(), h.end(), yh.begin() + s0);
        std::copy(c.begin(), c.end(), yc.begin() + s0);
      }
    }
  }
  if (wants_output(ctx, 0)) {
    TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
    TD_RETURN_IF_ERROR(store(out, y));
  }
  if (wants_output(ctx, 1)) {
    TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(1));
    TD_RETURN_IF_ERROR(store(out, yh));
  }
  if (is_lstm && wants_output(ctx, 2)) {
    TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(2));
    TD_RETURN_IF_ERROR(store(out, yc));
  }
  return OkStatus();
}

}  // namespace

void register_reference_rnn_kernels(KernelRegistry& r) {
  r.add(KernelDef{"RNN", "reference", nullptr,
                  [](KernelContext& c) { return rnn_kernel(c, RnnKind::kRnn); }});
  r.add(KernelDef{"GRU", "reference", nullptr,
                  [](KernelContext& c) { return rnn_kernel(c, RnnKind::kGru); }});
  r.add(KernelDef{"LSTM", "reference", nullptr,
                  [](KernelContext& c) { return rnn_kernel(c, RnnKind::kLstm); }});
}

}  // namespace cpu
}  // namespace tensord
