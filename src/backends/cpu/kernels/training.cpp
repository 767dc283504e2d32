// Reference kernels of ONNX's training-domain optimisers (ai.onnx.preview.training: Adagrad,
// Momentum, Adam), the formulas of the ONNX operator specs, accumulating in double. Float32
// and float64 (float16/bfloat16 are widened around the kernel by the registry).
#include <cmath>
#include <string>

#include "backends/cpu/kernel.h"

namespace tensord::cpu {
namespace {

Result<double> scalar_of(KernelContext& ctx, int i) {
  const TensorView& v = ctx.input(i);
  if (v.numel() != 1) return ctx.error("input {} must be a scalar", i);
  switch (v.dtype) {
    case DType::kFloat32:
      return static_cast<double>(*v.as<float>());
    case DType::kFloat64:
      return *v.as<double>();
    case DType::kInt64:
      return static_cast<double>(*v.as<int64_t>());
    default:
      return ctx.error("input {}: unsupported dtype {}", i, dtype_name(v.dtype));
  }
}

// Calls f(x, g, state..., out_x, out_state..., count) per tensor, typed.
template <typename F>
Status for_each_tensor(KernelContext& ctx, int state_groups, F f) {
  const int n = (ctx.num_inputs() - 2) / (2 + state_groups);
  for (int i = 0; i < n; ++i) {
    const TensorView& x = ctx.input(2 + i);
    std::vector<const TensorView*> in;
    for (int g = 0; g < 2 + state_groups; ++g) in.push_back(&ctx.input(2 + g * n + i));
    std::vector<MutableTensorView> out;
    for (int o = 0; o < 1 + state_groups; ++o) {
      TD_ASSIGN_OR_RETURN(MutableTensorView v, ctx.output(o * n + i));
      out.push_back(v);
    }
    const int64_t count = x.numel();
    if (x.dtype == DType::kFloat32) {
      f(in, out, count, float{});
    } else if (x.dtype == DType::kFloat64) {
      f(in, out, count, double{});
    } else {
      return ctx.error("X{}: unsupported dtype {}", i, dtype_name(x.dtype));
    }
  }
  return OkStatus();
}

Status adagrad_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(double r, scalar_of(ctx, 0));
  TD_ASSIGN_OR_RETURN(double t, scalar_of(ctx, 1));
  TD_ASSIGN_OR_RETURN(float decay, ctx.attr_float("decay_factor", 0.0f));
  TD_ASSIGN_OR_RETURN(float eps, ctx.attr_float("epsilon", 1e-6f));
  TD_ASSIGN_OR_RETURN(float norm, ctx.attr_float("norm_coefficient", 0.0f));
  const double rr = r / (1 + t * decay);
  return for_each_tensor(ctx, 1, [&](auto& in, auto& out, int64_t count, auto tag) {
    using T = decltype(tag);
    const T *x = in[0]->template as<T>(), *g = in[1]->template as<T>(),
            *h = in[2]->template as<T>();
    T *xo = out[0].template as<T>(), *ho = out[1].template as<T>();
    for (int64_t k = 0; k < count; ++k) {
      const double gr = norm * double(x[k]) + double(g[k]);
      const double hn = double(h[k]) + gr * gr;
      ho[k] = static_cast<T>(hn);
      xo[k] = static_cast<T>(double(x[k]) - rr * gr / (std::sqrt(hn) + eps));
    }
  });
}

Status momentum_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(double r, scalar_of(ctx, 0));
  TD_ASSIGN_OR_RETURN(double t, scalar_of(ctx, 1));
  TD_ASSIGN_OR_RETURN(float alpha, ctx.attr_float("alpha", 0.9f));
  TD_ASSIGN_OR_RETURN(float beta, ctx.attr_float("beta", 1.0f));
  TD_ASSIGN_OR_RETURN(float norm, ctx.attr_float("norm_coefficient", 0.0f));
  TD_ASSIGN_OR_RETURN(std::string mode, ctx.attr_string("mode", "standard"));
  if (mode != "standard" && mode != "nesterov")
    return ctx.error("mode must be 'standard' or 'nesterov', got '{}'", mode);
  const bool nesterov = mode == "nesterov";
  const double b = t > 0 ? beta : 1.0;
  return for_each_tensor(ctx, 1, [&](auto& in, auto& out, int64_t count, auto tag) {
    using T = decltype(tag);
    const T *x = in[0]->template as<T>(), *g = in[1]->template as<T>(),
            *v = in[2]->template as<T>();
    T *xo = out[0].template as<T>(), *vo = out[1].template as<T>();
    for (int64_t k = 0; k < count; ++k) {
      const double gr = norm * double(x[k]) + double(g[k]);
      const double vn = alpha * double(v[k]) + b * gr;
      vo[k] = static_cast<T>(vn);
      xo[k] = static_cast<T>(double(x[k]) - r * (nesterov ? gr + alpha * vn : vn));
    }
  });
}

Status adam_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(double r, scalar_of(ctx, 0));
  TD_ASSIGN_OR_RETURN(double t, scalar_of(ctx, 1));
  TD_ASSIGN_OR_RETURN(float alpha, ctx.attr_float("alpha", 0.9f));
  TD_ASSIGN_OR_RETURN(float beta, ctx.attr_float("beta", 0.999f));
  TD_ASSIGN_OR_RETURN(float eps, ctx.attr_float("epsilon", 1e-6f));
  TD_ASSIGN_OR_RETURN(float norm, ctx.attr_float("norm_coefficient", 0.0f));
  TD_ASSIGN_OR_RETURN(float post, ctx.attr_float("norm_coefficient_post", 0.0f));
  const double ra =
      t > 0 ? r * std::sqrt(1 - std::pow(double(beta), t)) / (1 - std::pow(double(alpha), t)) : r;
  return for_each_tensor(ctx, 2, [&](auto& in, auto& out, int64_t count, auto tag) {
    using T = decltype(tag);
    const T *x = in[0]->template as<T>(), *g = in[1]->template as<T>(),
            *v = in[2]->template as<T>(), *h = in[3]->template as<T>();
    T *xo = out[0].template as<T>(), *vo = out[1].template as<T>(), *ho = out[2].template as<T>();
    for (int64_t k = 0; k < count; ++k) {
      const double gr = norm * double(x[k]) + double(g[k]);
      const double vn = alpha * double(v[k]) + (1 - alpha) * gr;
      const double hn = beta * double(h[k]) + (1 - beta) * gr * gr;
      vo[k] = static_cast<T>(vn);
      ho[k] = static_cast<T>(hn);
      xo[k] = static_cast<T>((1 - post) * (double(x[k]) - ra * vn / (std::sqrt(hn) + eps)));
    }
  });
}

}  // namespace

void register_training_kernels(KernelRegistry& r) {
  r.add(KernelDef{"Adagrad", "reference", nullptr, adagrad_kernel});
  r.add(KernelDef{"Momentum", "reference", nullptr, momentum_kernel});
  r.add(KernelDef{"Adam", "reference", nullptr, adam_kernel});
}

}  // namespace tensord::cpu
