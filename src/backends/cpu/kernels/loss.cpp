// Reference kernels of the loss and normalisation ops: NegativeLogLikelihoodLoss,
// SoftmaxCrossEntropyLoss and MeanVarianceNormalization.
//
// The losses follow ONNX's reference implementation: the input [N, C, d1, ...] is viewed as
// [N, C, D] and the target [N, d1, ...] as [N, D]. Each position's loss is
// -w[t] * logp[n, t, d] (w = 1 without a weight input); a position whose target equals
// ignore_index contributes 0 loss and 0 weight. "mean" divides the summed loss by the summed
// weights of the non-ignored positions (NaN when there are none, as 0/0 in the reference).
// Sums accumulate in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/dispatch.h"
#include "backends/cpu/kernel.h"

namespace tensord::cpu {
namespace {

enum class Reduction { kNone, kSum, kMean };

struct LossParams {
  int64_t n = 0;  // batch
  int64_t c = 0;  // classes
  int64_t d = 1;  // product of d1, ..., dk
  Reduction reduction = Reduction::kMean;
  bool has_ignore = false;
  int64_t ignore_index = 0;
};

Result<LossParams> loss_params(KernelContext& ctx) {
  LossParams p;
  const Shape& in = ctx.input(0).shape;
  p.n = in[0];
  p.c = in[1];
  for (size_t i = 2; i < in.size(); ++i) p.d *= in[i];
  TD_ASSIGN_OR_RETURN(std::string reduction, ctx.attr_string("reduction", "mean"));
  if (reduction == "none")
    p.reduction = Reduction::kNone;
  else if (reduction == "sum")
    p.reduction = Reduction::kSum;
  else if (reduction == "mean")
    p.reduction = Reduction::kMean;
  else
    return ctx.error("reduction must be 'none', 'sum' or 'mean', got '{}'", reduction);
  p.has_ignore = ctx.has_attr("ignore_index");
  TD_ASSIGN_OR_RETURN(p.ignore_index, ctx.attr_int("ignore_index", 0));
  return p;
}

std::vector<int64_t> target_values(const TensorView& t) {
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = t.dtype == DType::kInt32 ? t.as<int32_t>()[i] : t.as<int64_t>()[i];
  return out;
}

// Writes the loss of log-probabilities `logp` ([N, C, D]) into output 0.
template <typename T>
Status write_loss(KernelContext& ctx, const LossParams& p, const T* logp) {
  const std::vector<int64_t> target = target_values(ctx.input(1));
  const T* weight = ctx.has_input(2) ? ctx.input(2).as<T>() : nullptr;
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  T* dst = out.as<T>();
  double loss_sum = 0.0;
  double weight_sum = 0.0;
  for (int64_t i = 0; i < p.n; ++i) {
    for (int64_t k = 0; k < p.d; ++k) {
      const int64_t pos = i * p.d + k;
      const int64_t t = target[static_cast<size_t>(pos)];
      double loss = 0.0;
      if (!(p.has_ignore && t == p.ignore_index)) {
        if (t < 0 || t >= p.c) {
          return ctx.error("target value {} at flat index {} is out of range [0, {}){}", t, pos,
                           p.c,
                           p.has_ignore ? fmt::format(" and is not ignore_index {}", p.ignore_index)
                                        : std::string());
        }
        const double w = weight ? static_cast<double>(weight[t]) : 1.0;
        loss = -w * static_cast<double>(logp[(i * p.c + t) * p.d + k]);
        weight_sum += w;
      }
      if (p.reduction == Reduction::kNone)
        dst[pos] = static_cast<T>(loss);
      else
        loss_sum += loss;
    }
  }
  if (p.reduction == Reduction::kSum) dst[0] = static_cast<T>(loss_sum);
  if (p.reduction == Reduction::kMean) dst[0] = static_cast<T>(loss_sum / weight_sum);
  return OkStatus();
}

Status run_nll(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(LossParams p, loss_params(ctx));
  return dispatch_float(ctx.input(0).dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    return write_loss<T>(ctx, p, ctx.input(0).as<T>());
  });
}

Status run_sce(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(LossParams p, loss_params(ctx));
  return dispatch_float(ctx.input(0).dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* x = ctx.input(0).as<T>();
    // log_softmax over axis 1: (x - max) - log(sum(exp(x - max))).
    std::vector<T> logp(static_cast<size_t>(p.n * p.c * p.d));
    for (int64_t i = 0; i < p.n; ++i) {
      for (int64_t k = 0; k < p.d; ++k) {
        double max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < p.c; ++j)
          max = std::max(max, static_cast<double>(x[(i * p.c + j) * p.d + k]));
        double sum = 0.0;
        for (int64_t j = 0; j < p.c; ++j)
          sum += std::exp(static_cast<double>(x[(i * p.c + j) * p.d + k]) - max);
        const double log_sum = std::log(sum);
        for (int64_t j = 0; j < p.c; ++j) {
          const int64_t at = (i * p.c + j) * p.d + k;
          logp[static_cast<size_t>(at)] =
              static_cast<T>(static_cast<double>(x[at]) - max - log_sum);
        }
      }
    }
    TD_RETURN_IF_ERROR(write_loss<T>(ctx, p, logp.data()));
    if (ctx.num_outputs() > 1 && !ctx.node().outputs[1].empty()) {
      TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(1));
      std::copy(logp.begin(), logp.end(), out.as<T>());
    }
    return OkStatus();
  });
}

// MeanVarianceNormalization: (x - mean) / (std + 1e-9), mean and (biased) variance taken over
// `axes` (default [0, 2, 3]; an empty list reduces every axis, as ReduceMean would).
Status run_mvn(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  const Shape& shape = x.shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  TD_ASSIGN_OR_RETURN(std::vector<int64_t> axes, ctx.attr_ints("axes", {0, 2, 3}));
  std::vector<bool> reduce(shape.size(), axes.empty());
  for (int64_t a : axes) {
    if (a < -rank || a >= rank)
      return ctx.error("axis {} is out of range for X of shape {}", a, shape_to_string(shape));
    reduce[static_cast<size_t>(a < 0 ? a + rank : a)] = true;
  }
  // Group of each element: its row-major index over the kept (non-reduced) axes.
  const int64_t numel = x.numel();
  std::vector<int64_t> group(static_cast<size_t>(numel));
  int64_t num_groups = 1;
  for (size_t i = 0; i < shape.size(); ++i)
    if (!reduce[i]) num_groups *= shape[i];
  {
    std::vector<int64_t> idx(shape.size(), 0);
    for (int64_t e = 0; e < numel; ++e) {
      int64_t g = 0;
      for (size_t i = 0; i < shape.size(); ++i)
        if (!reduce[i]) g = g * shape[i] + idx[i];
      group[static_cast<size_t>(e)] = g;
      for (size_t i = shape.size(); i-- > 0;) {
        if (++idx[i] < shape[i]) break;
        idx[i] = 0;
      }
    }
  }
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  return dispatch_float(x.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* src = x.as<T>();
    T* dst = out.as<T>();
    std::vector<double> mean(static_cast<size_t>(num_groups), 0.0);
    std::vector<double> var(static_cast<size_t>(num_groups), 0.0);
    std::vector<int64_t> count(static_cast<size_t>(num_groups), 0);
    for (int64_t e = 0; e < numel; ++e) {
      const size_t g = static_cast<size_t>(group[static_cast<size_t>(e)]);
      mean[g] += static_cast<double>(src[e]);
      ++count[g];
    }
    for (size_t g = 0; g < mean.size(); ++g) mean[g] /= static_cast<double>(count[g]);
    for (int64_t e = 0; e < numel; ++e) {
      const size_t g = static_cast<size_t>(group[static_cast<size_t>(e)]);
      const double diff = static_cast<double>(src[e]) - mean[g];
      var[g] += diff * diff;
    }
    for (size_t g = 0; g < var.size(); ++g) var[g] /= static_cast<double>(count[g]);
    for (int64_t e = 0; e < numel; ++e) {
      const size_t g = static_cast<size_t>(group[static_cast<size_t>(e)]);
      dst[e] = static_cast<T>((static_cast<double>(src[e]) - mean[g]) / (std::sqrt(var[g]) + 1e-9));
    }
    return OkStatus();
  });
}

}  // namespace

void register_reference_loss_kernels(KernelRegistry& r) {
  r.add(KernelDef{"NegativeLogLikelihoodLoss", "reference", nullptr, run_nll});
  r.add(KernelDef{"SoftmaxCrossEntropyLoss", "reference", nullptr, run_sce});
  r.add(KernelDef{"MeanVarianceNormalization", "reference", nullptr, run_mvn});
}

}  // namespace tensord::cpu
