// Fast float32 kernels through oneDNN (Debian libdnnl-dev, 2.x API): MatMul, Gemm, Conv,
// ConvTranspose and MaxPool/AveragePool, 1-D to 3-D.
//
// Tensors are in the plain layouts the executor uses (NCHW, OIHW, row-major); Conv and
// ConvTranspose reorder into the layouts oneDNN picks and back. MatMul and Gemm keep their
// primitives by shape (cached_matmul); Conv builds its own each call (oneDNN's primitive cache
// makes the primitive cheap, not its descriptor). `accepts` refuses what these kernels do not cover, so the reference kernel takes it.
// Shapes known only at run time that turn out unsupported, and problems oneDNN itself rejects,
// are handed to the op's reference kernel (last in its list) from inside the run function.

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <thread>
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include <dnnl.h>
#include <dnnl.hpp>

#include "backends/cpu/kernel.h"
#include "backends/cpu/onednn_common.h"
#include "backends/cpu/onednn_ops.h"
#include "backends/cpu/thread_pool.h"
#include "core/env.h"
#include "core/ops/op_helpers.h"

namespace tensord::cpu {
namespace {

using dnnl::memory;
using DT = memory::data_type;
using Tag = memory::format_tag;

Status refuse(const std::string& why) { return Status(StatusCode::kUnimplemented, why); }

bool all_float32(const std::vector<TensorType>& in) {
  for (const TensorType& t : in)
    if (t.defined() && t.dtype != DType::kFloat32) return false;
  return true;
}

// The reference kernel of `op` (always last in its list).
Status run_reference(const std::string& op, KernelContext& ctx) {
  return KernelRegistry::global().find(op).back().run(ctx);
}

memory wrap(const memory::desc& md, const void* data) {
  return memory(md, cpu_engine(), const_cast<void*>(data));
}

memory::dims row_major_strides(const memory::dims& d) {
  memory::dims s(d.size(), 1);
  for (size_t i = d.size(); i-- > 1;) s[i - 1] = s[i] * std::max<int64_t>(d[i], 1);
  return s;
}

memory::desc plain_f32(const memory::dims& d) {
  return memory::desc(d, DT::f32, row_major_strides(d));
}

// Runs `body`; a problem oneDNN rejects (dnnl::error) goes to the reference kernel instead.
template <typename F>
Status with_fallback(const std::string& op, KernelContext& ctx, F&& body) {
  try {
    return body();
  } catch (const dnnl::error&) {
    return run_reference(op, ctx);
  }
}

void execute(const dnnl::primitive& p, const std::unordered_map<int, memory>& args) {
  p.execute(cpu_stream(), args);
  cpu_stream().wait();
}

// A convolution (or deconvolution) over plain tensors run as PyTorch's oneDNN path runs one:
// in the layouts oneDNN picks for it (format `any`), the plain inputs reordered into them and
// the output back. On plain layouts alone oneDNN often has only im2col + GEMM (a first layer
// of one input channel, batch 256 of 8x8: 4 ms against a fraction of that blocked, on a
// digits CNN's training step with AVX-512). `make(src, weights, dst)` makes the primitive
// descriptor from three memory descriptors.
template <typename Primitive, typename Make>
void run_in_picked_layouts(const memory::desc& src_md, const void* src,
                           const memory::desc& wei_md, const void* wei,
                           const memory::desc& dst_md, void* dst, const memory::desc& bias_md,
                           const void* bias, Make&& make) {
  auto any = [](const memory::desc& md) { return memory::desc(md.dims(), DT::f32, Tag::any); };
  const auto pd = make(any(src_md), any(wei_md), any(dst_md));
  auto into = [](const memory::desc& want, const memory::desc& have, const void* data) {
    memory plain = wrap(have, data);
    if (want == have) return plain;
    memory m(want, cpu_engine());
    execute(dnnl::reorder(plain, m), {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, m}});
    return m;
  };
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, into(pd.src_desc(), src_md, src)},
                                          {DNNL_ARG_WEIGHTS, into(pd.weights_desc(), wei_md, wei)}};
  const memory out_plain = wrap(dst_md, dst);
  const bool same = pd.dst_desc() == dst_md;
  const memory out = same ? out_plain : memory(pd.dst_desc(), cpu_engine());
  args[DNNL_ARG_DST] = out;
  if (bias) args[DNNL_ARG_BIAS] = wrap(bias_md, bias);
  execute(Primitive(pd), args);
  if (!same) execute(dnnl::reorder(out, out_plain), {{DNNL_ARG_FROM, out}, {DNNL_ARG_TO, out_plain}});
}

// One thread (the calling one) while alive when `serial` (a product with less work than
// serial_work_limit()). oneDNN fixes a primitive's thread count when it is created, so the
// scope covers creating the primitive and running it.
class SerialScope {
 public:
  // With the pool's workers asleep the team costs a wake-up first (a futex call: 5.3% of
  // EmbeddingBag's export, two [8, 128] x [128, 128] Gemms a batch): up to 4x the work runs
  // serially then.
  explicit SerialScope(double work)
      : limit_(work < serial_work_limit() * (ThreadPool::get().workers_asleep() ? 4 : 1) ? 1 : 0) {}

 private:
  TeamLimit limit_;
};

// The matmul primitives of the per-node MatMul and Gemm kernels, by everything their
// creation reads (shapes, transposes, bias, attributes, the threads it may use): making the
// primitive descriptor costs 10-25 us (oneDNN's own cache spares the primitive, not its
// descriptor), more than a small product computes (a [8, 64] x [64, 32] Gemm took 25 us a
// call; EmbeddingBag's export runs two each batch). Per thread: a primitive object holds its
// scratchpad (oneDNN's "library" mode), so two threads must not execute the same one at once
// (four broker clients' 4x4 MatMuls read back wrong values when they did). Bounded: cleared
// at 256 entries.
dnnl::matmul cached_matmul(const std::vector<int64_t>& key,
                           const std::function<dnnl::matmul::primitive_desc()>& make) {
  thread_local std::map<std::vector<int64_t>, dnnl::matmul> cache;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  dnnl::matmul prim(make());
  if (cache.size() >= 256) cache.clear();
  cache.emplace(key, prim);
  return prim;
}

int64_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// ---- MatMul ----

// Supported: both operands rank >= 2 with equal (known) batch dims, or a rank-2 B (A's batch
// dims fold into its rows). 1-D operands and broadcast batch dims go to the reference.
Status matmul_shapes_ok(const Shape& a, const Shape& b) {
  if (a.size() < 2 || b.size() < 2) return refuse("MatMul: oneDNN kernel needs rank >= 2");
  if (a.size() > 12 || b.size() > 12) return refuse("MatMul: oneDNN kernel needs rank <= 12");
  if (b.size() == 2) return OkStatus();
  if (a.size() != b.size()) return refuse("MatMul: oneDNN kernel does not broadcast batch dims");
  for (size_t i = 0; i + 2 < a.size(); ++i)
    if (a[i] != b[i] || a[i] < 0)
      return refuse("MatMul: oneDNN kernel does not broadcast batch dims");
  return OkStatus();
}

Status matmul_accepts(const Node&, const std::vector<TensorType>& in) {
  if (in.size() < 2 || !all_float32(in)) return refuse("MatMul: oneDNN kernel is float32 only");
  return matmul_shapes_ok(in[0].shape, in[1].shape);
}

Status matmul_run(KernelContext& ctx) {
  const TensorView& av = ctx.input(0);
  const TensorView& bv = ctx.input(1);
  if (!matmul_shapes_ok(av.shape, bv.shape).ok()) return run_reference("MatMul", ctx);
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  if (out.numel() == 0) return OkStatus();
  const int64_t k = av.shape.back();
  if (k == 0) {  // empty reduction
    for (int64_t i = 0; i < out.numel(); ++i) out.as<float>()[i] = 0.0f;
    return OkStatus();
  }
  memory::dims a_dims = av.shape, b_dims = bv.shape, c_dims = out.shape;
  if (b_dims.size() == 2) {
    a_dims = {av.numel() / k, k};
    c_dims = {a_dims[0], b_dims[1]};
  }
  const SerialScope serial(static_cast<double>(out.numel()) * static_cast<double>(k));
  return with_fallback("MatMul", ctx, [&]() -> Status {
    const memory::desc amd = plain_f32(a_dims), bmd = plain_f32(b_dims), cmd = plain_f32(c_dims);
    std::vector<int64_t> key = {0, threads_available(), static_cast<int64_t>(a_dims.size())};
    for (const auto* d : {&a_dims, &b_dims, &c_dims}) key.insert(key.end(), d->begin(), d->end());
    const dnnl::matmul prim = cached_matmul(key, [&] {
      return dnnl::matmul::primitive_desc(dnnl::matmul::desc(amd, bmd, cmd), cpu_engine());
    });
    execute(prim, {{DNNL_ARG_SRC, wrap(amd, av.data)},
                               {DNNL_ARG_WEIGHTS, wrap(bmd, bv.data)},
                               {DNNL_ARG_DST, wrap(cmd, out.data)}});
    return OkStatus();
  });
}

// ---- Gemm ----

// C's broadcast form: none, a scalar (one element), a row [N] / [1, N], or a full [M, N].
enum class BiasKind { kNone, kScalar, kRow, kFull, kUnsupported };

BiasKind gemm_bias_kind(const Shape& c, int64_t m, int64_t n) {
  int64_t numel = 1;
  for (int64_t d : c) {
    if (d < 0) return BiasKind::kUnsupported;
    numel *= d;
  }
  if (c.size() <= 2 && numel == 1) return BiasKind::kScalar;
  if (c.size() == 1 && c[0] == n) return BiasKind::kRow;
  if (c.size() == 2 && c[0] == 1 && c[1] == n) return BiasKind::kRow;
  if (c.size() == 2 && c[0] == m && c[1] == n) return BiasKind::kFull;
  return BiasKind::kUnsupported;
}

Status gemm_accepts(const Node& node, const std::vector<TensorType>& in) {
  if (in.size() < 2 || !all_float32(in)) return refuse("Gemm: oneDNN kernel is float32 only");
  if (in[0].shape.size() != 2 || in[1].shape.size() != 2)
    return refuse("Gemm: oneDNN kernel needs 2-D A and B");
  if (in.size() > 2 && in[2].defined()) {
    NodeAttrs a(node);
    TD_ASSIGN_OR_RETURN(int64_t trans_a, a.attr_int("transA", 0));
    TD_ASSIGN_OR_RETURN(int64_t trans_b, a.attr_int("transB", 0));
    const int64_t m = in[0].shape[trans_a ? 1 : 0];
    const int64_t n = in[1].shape[trans_b ? 0 : 1];
    if (m >= 0 && n >= 0 && gemm_bias_kind(in[2].shape, m, n) == BiasKind::kUnsupported)
      return refuse("Gemm: oneDNN kernel takes C of shape [N], [M, N] or a scalar");
  }
  return OkStatus();
}

Status gemm_run(KernelContext& ctx) {
  const TensorView& av = ctx.input(0);
  const TensorView& bv = ctx.input(1);
  TD_ASSIGN_OR_RETURN(const nn::GemmParams g, nn::gemm_params(ctx, av.shape, bv.shape));
  const float alpha = g.alpha, beta = g.beta;
  const bool trans_a = g.trans_a, trans_b = g.trans_b;
  const int64_t m = g.m, k = g.k, n = g.n;
  BiasKind bias = BiasKind::kNone;
  if (ctx.has_input(2)) bias = gemm_bias_kind(ctx.input(2).shape, m, n);
  if (bias == BiasKind::kUnsupported || k == 0) return run_reference("Gemm", ctx);
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  if (out.numel() == 0) return OkStatus();
  float* y = out.as<float>();
  // alpha = beta = 1 with a row or full C: C is oneDNN's bias. Otherwise beta * C is written
  // into Y first and accumulated with a sum post-op (Y = alpha * A·B + Y).
  const bool as_bias = alpha == 1.0f && beta == 1.0f &&
                       (bias == BiasKind::kRow || bias == BiasKind::kFull);
  const bool prefill = bias != BiasKind::kNone && !as_bias && beta != 0.0f;
  if (prefill) {
    const float* c = ctx.input(2).as<float>();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        y[i * n + j] = beta * (bias == BiasKind::kScalar ? c[0]
                               : bias == BiasKind::kRow  ? c[j]
                                                         : c[i * n + j]);
  }
  const SerialScope serial(static_cast<double>(m) * static_cast<double>(n) *
                           static_cast<double>(k));
  return with_fallback("Gemm", ctx, [&]() -> Status {
    const memory::desc amd({m, k}, DT::f32, trans_a ? memory::dims{1, m} : memory::dims{k, 1});
    const memory::desc bmd({k, n}, DT::f32, trans_b ? memory::dims{1, k} : memory::dims{n, 1});
    const memory::desc cmd = plain_f32({m, n});
    dnnl::primitive_attr attr;
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (prefill) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, wrap(amd, av.data)},
                                            {DNNL_ARG_WEIGHTS, wrap(bmd, bv.data)},
                                            {DNNL_ARG_DST, wrap(cmd, y)}};
    const std::vector<int64_t> key = {1, threads_available(), m, k, n, trans_a, trans_b,
                                      float_bits(alpha), prefill, as_bias,
                                      static_cast<int64_t>(bias)};
    if (as_bias) {
      const memory::desc biasmd = plain_f32({bias == BiasKind::kRow ? 1 : m, n});
      const dnnl::matmul prim = cached_matmul(key, [&] {
        return dnnl::matmul::primitive_desc(dnnl::matmul::desc(amd, bmd, biasmd, cmd), attr,
                                            cpu_engine());
      });
      args[DNNL_ARG_BIAS] = wrap(biasmd, ctx.input(2).data);
      execute(prim, args);
    } else {
      const dnnl::matmul prim = cached_matmul(key, [&] {
        return dnnl::matmul::primitive_desc(dnnl::matmul::desc(amd, bmd, cmd), attr, cpu_engine());
      });
      execute(prim, args);
    }
    return OkStatus();
  });
}

// ---- Conv ----

Status conv_accepts(const Node&, const std::vector<TensorType>& in) {
  if (in.size() < 2 || !all_float32(in)) return refuse("Conv: oneDNN kernel is float32 only");
  const size_t r = in[0].shape.size();
  if (r < 3 || r > 5 || in[1].shape.size() != r)
    return refuse("Conv: oneDNN kernel is 1-D to 3-D");
  return OkStatus();
}

// A 1x1x1 convolution (stride 1, no padding) of NCDHW values: per image one SGEMM,
// Y[oc, S] = W[oc, ic] X[ic, S] (+ bias), on the plain layouts themselves. Through oneDNN's
// blocked convolution each such call reordered its input to channels-last and its output
// back (the reorders were 42% of S3D's time, its convolutions 49%).
bool is_pointwise(const Shape& kernel, const std::vector<int64_t>& strides,
                  const std::vector<int64_t>& pads) {
  for (int64_t k : kernel)
    if (k != 1) return false;
  for (int64_t s : strides)
    if (s != 1) return false;
  for (int64_t p : pads)
    if (p != 0) return false;
  return true;
}

Status pointwise_conv(KernelContext& ctx, const TensorView& x, const TensorView& w,
                      MutableTensorView& out) {
  const int64_t n = x.shape[0], ic = x.shape[1], oc = w.shape[0];
  int64_t spatial = 1;
  for (size_t d = 2; d < x.shape.size(); ++d) spatial *= x.shape[d];
  const float* xs = x.as<float>();
  const float* ws = w.as<float>();
  float* ys = out.as<float>();
  const float* bias = ctx.has_input(2) ? ctx.input(2).as<float>() : nullptr;
  // Shapes that disagree (a malformed model) go to the reference kernel, which names them.
  if (w.shape[1] != ic || w.numel() != oc * ic || (bias && ctx.input(2).numel() != oc))
    return run_reference("Conv", ctx);
  const SerialScope serial(static_cast<double>(oc) * static_cast<double>(ic) *
                           static_cast<double>(spatial));
  for (int64_t i = 0; i < n; ++i) {
    float* y = ys + i * oc * spatial;
    if (bias) {
      for (int64_t o = 0; o < oc; ++o) std::fill_n(y + o * spatial, spatial, bias[o]);
    }
    if (dnnl_sgemm('N', 'N', oc, spatial, ic, 1.0f, ws, ic, xs + i * ic * spatial, spatial,
                   bias ? 1.0f : 0.0f, y, spatial) != dnnl_success)
      return ctx.error("dnnl_sgemm failed on a 1x1x1 convolution");
  }
  return OkStatus();
}

Status conv_run(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  const TensorView& w = ctx.input(1);
  TD_ASSIGN_OR_RETURN(int64_t group, ctx.attr_int("group", 1));
  const Shape in_spatial(x.shape.begin() + 2, x.shape.end());
  const Shape kernel(w.shape.begin() + 2, w.shape.end());
  std::vector<int64_t> strides, dilations, pads;
  Shape out_spatial;
  TD_RETURN_IF_ERROR(nn::window_geometry(ctx, in_spatial, kernel, false, &strides, &dilations,
                                         &pads, &out_spatial));
  for (int64_t p : pads)
    if (p < 0) return run_reference("Conv", ctx);
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  if (out.numel() == 0) return OkStatus();
  const int64_t oc = w.shape[0];
  const size_t nd = x.shape.size() - 2;
  if (group < 1 || oc % group != 0) return run_reference("Conv", ctx);  // it names what is wrong
  if (nd == 3 && group == 1 && is_pointwise(kernel, strides, pads))
    return pointwise_conv(ctx, x, w, out);
  return with_fallback("Conv", ctx, [&]() -> Status {
    static const Tag plain[] = {Tag::abc, Tag::abcd, Tag::abcde};
    static const Tag grouped[] = {Tag::abcd, Tag::abcde, Tag::abcdef};
    const memory::desc src_md(x.shape, DT::f32, plain[nd - 1]);
    const memory::desc dst_md(out.shape, DT::f32, plain[nd - 1]);
    memory::dims wd = w.shape;
    if (group > 1) {
      wd = {group, oc / group};
      wd.insert(wd.end(), w.shape.begin() + 1, w.shape.end());
    }
    const memory::desc wei_md(wd, DT::f32, group == 1 ? plain[nd - 1] : grouped[nd - 1]);
    const bool has_bias = ctx.has_input(2);
    const memory::desc bias_md = has_bias ? memory::desc({oc}, DT::f32, Tag::x) : memory::desc();
    memory::dims dnnl_strides(nd), dnnl_dilates(nd), pad_l(nd), pad_r(nd);
    for (size_t d = 0; d < nd; ++d) {
      dnnl_strides[d] = strides[d];
      dnnl_dilates[d] = dilations[d] - 1;
      pad_l[d] = pads[d];
      pad_r[d] = pads[d + nd];
    }
    run_in_picked_layouts<dnnl::convolution_forward>(
        src_md, x.data, wei_md, w.data, dst_md, out.data, bias_md,
        has_bias ? ctx.input(2).data : nullptr,
        [&](const memory::desc& s, const memory::desc& wt, const memory::desc& d) {
          using C = dnnl::convolution_forward;
          const auto k = dnnl::prop_kind::forward_inference;
          const auto a = dnnl::algorithm::convolution_direct;
          return C::primitive_desc(
              has_bias ? C::desc(k, a, s, wt, bias_md, d, dnnl_strides, dnnl_dilates, pad_l, pad_r)
                       : C::desc(k, a, s, wt, d, dnnl_strides, dnnl_dilates, pad_l, pad_r),
              cpu_engine());
        });
    return OkStatus();
  });
}

// ---- ConvTranspose (oneDNN's deconvolution), 1-D to 3-D, any group ----

Status conv_transpose_accepts(const Node&, const std::vector<TensorType>& in) {
  if (in.size() < 2 || !all_float32(in))
    return refuse("ConvTranspose: oneDNN kernel is float32 only");
  const size_t r = in[0].shape.size();
  if (r < 3 || r > 5 || in[1].shape.size() != r)
    return refuse("ConvTranspose: oneDNN kernel is 1-D to 3-D");
  return OkStatus();
}

Status conv_transpose_run(KernelContext& ctx) {
  const TensorView& x = ctx.input(0);
  const TensorView& w = ctx.input(1);
  TD_ASSIGN_OR_RETURN(int64_t group, ctx.attr_int("group", 1));
  const size_t nd = x.shape.size() - 2;
  if (group < 1 || x.shape[1] != w.shape[0] || x.shape[1] % group != 0)
    return run_reference("ConvTranspose", ctx);  // it names what is wrong
  const Shape in_spatial(x.shape.begin() + 2, x.shape.end());
  const Shape kernel(w.shape.begin() + 2, w.shape.end());
  std::vector<int64_t> strides, dilations, pads;
  Shape out_spatial;
  TD_RETURN_IF_ERROR(nn::conv_transpose_geometry(ctx, in_spatial, kernel, &strides, &dilations,
                                                 &pads, &out_spatial));
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  if (out.numel() == 0) return OkStatus();
  const int64_t ic = x.shape[1], oc = w.shape[1] * group;
  if (out.shape.size() != x.shape.size() || out.shape[1] != oc)
    return run_reference("ConvTranspose", ctx);
  // oneDNN: dst = (src - 1) * stride + (k - 1) * dilation + 1 - pad_l - pad_r, so pad_r is
  // what makes the output the size ONNX says (output_padding, output_shape); a negative one
  // is refused by oneDNN and the reference kernel runs.
  memory::dims st(nd), dl(nd), pl(nd), pr(nd);
  for (size_t d = 0; d < nd; ++d) {
    st[d] = strides[d];
    dl[d] = dilations[d] - 1;
    pl[d] = pads[d];
    pr[d] = (in_spatial[d] - 1) * strides[d] + (kernel[d] - 1) * dilations[d] + 1 - pads[d] -
            out.shape[2 + d];
  }
  return with_fallback("ConvTranspose", ctx, [&]() -> Status {
    static const Tag plain[] = {Tag::abc, Tag::abcd, Tag::abcde};
    // ONNX weights are [C_in, C_out / group, k...]: oneDNN's "io" order, per group.
    static const Tag io[] = {Tag::bac, Tag::bacd, Tag::bacde};
    static const Tag gio[] = {Tag::acbd, Tag::acbde, Tag::acbdef};
    const memory::desc src_md(x.shape, DT::f32, plain[nd - 1]);
    const memory::desc dst_md(out.shape, DT::f32, plain[nd - 1]);
    memory::dims wd;
    if (group == 1) {
      wd = {oc, ic};
    } else {
      wd = {group, oc / group, ic / group};
    }
    wd.insert(wd.end(), kernel.begin(), kernel.end());
    const memory::desc wei_md(wd, DT::f32, group == 1 ? io[nd - 1] : gio[nd - 1]);
    const bool has_bias = ctx.has_input(2);
    if (has_bias && ctx.input(2).numel() != oc) return run_reference("ConvTranspose", ctx);
    const memory::desc bias_md = has_bias ? memory::desc({oc}, DT::f32, Tag::x) : memory::desc();
    run_in_picked_layouts<dnnl::deconvolution_forward>(
        src_md, x.data, wei_md, w.data, dst_md, out.data, bias_md,
        has_bias ? ctx.input(2).data : nullptr,
        [&](const memory::desc& s, const memory::desc& wt, const memory::desc& d) {
          using D = dnnl::deconvolution_forward;
          const auto k = dnnl::prop_kind::forward_inference;
          const auto a = dnnl::algorithm::deconvolution_direct;
          return D::primitive_desc(has_bias ? D::desc(k, a, s, wt, bias_md, d, st, dl, pl, pr)
                                            : D::desc(k, a, s, wt, d, st, dl, pl, pr),
                                   cpu_engine());
        });
    return OkStatus();
  });
}

// ---- MaxPool, AveragePool ----

Status pool_accepts(const Node& node, const std::vector<TensorType>& in) {
  if (in.empty() || !all_float32(in)) return refuse(node.op + ": oneDNN kernel is float32 only");
  const size_t r = in[0].shape.size();
  if (r < 3 || r > 5) return refuse(node.op + ": oneDNN kernel is 1-D to 3-D");
  NodeAttrs a(node);
  TD_ASSIGN_OR_RETURN(int64_t ceil_mode, a.attr_int("ceil_mode", 0));
  if (ceil_mode != 0) return refuse(node.op + ": oneDNN kernel has no ceil_mode");
  if (node.outputs.size() > 1 && !node.outputs[1].empty())
    return refuse(node.op + ": oneDNN kernel has no Indices output");
  return OkStatus();
}

Status pool_run(KernelContext& ctx, bool max) {
  const std::string op = max ? "MaxPool" : "AveragePool";
  const TensorView& x = ctx.input(0);
  TD_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, ctx.attr_ints("kernel_shape"));
  TD_ASSIGN_OR_RETURN(int64_t count_include_pad, ctx.attr_int("count_include_pad", 0));
  const Shape in_spatial(x.shape.begin() + 2, x.shape.end());
  std::vector<int64_t> strides, dilations, pads;
  Shape out_spatial;
  TD_RETURN_IF_ERROR(nn::window_geometry(ctx, in_spatial, kernel, true, &strides, &dilations,
                                         &pads, &out_spatial));
  const size_t nd = x.shape.size() - 2;
  bool simple = nd >= 1 && nd <= 3 && kernel.size() == nd;
  for (size_t d = 0; simple && d < nd; ++d)
    simple = pads[d] >= 0 && pads[d + nd] >= 0 && pads[d] < kernel[d] && pads[d + nd] < kernel[d];
  if (!simple) return run_reference(op, ctx);
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  if (out.numel() == 0) return OkStatus();
  if (nd == 1) {
    // 1-D: a direct loop per row; oneDNN's plain-layout (ncw) pooling took ~2 ms on
    // [1, 64, 3981] (M5's MaxPool1d), forty times this.
    const int64_t rows = x.shape[0] * x.shape[1], iw = x.shape[2], ow = out.shape[2];
    const int64_t k = kernel[0], st = strides[0], dl = dilations[0], pl = pads[0];
    const float* src = x.as<float>();
    float* dst = out.as<float>();
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = src + r * iw;
      float* yr = dst + r * ow;
      for (int64_t o = 0; o < ow; ++o) {
        const int64_t start = o * st - pl;
        float acc = max ? -std::numeric_limits<float>::infinity() : 0.0f;
        int64_t valid = 0, padded = 0;
        for (int64_t j = 0; j < k; ++j) {
          const int64_t i = start + j * dl;
          if (i < -pl || i >= iw + pads[1]) continue;  // beyond the padding
          ++padded;
          if (i < 0 || i >= iw) continue;
          const float v = xr[i];
          ++valid;
          if (max) {
            acc = (v > acc || v != v) ? v : acc;
          } else {
            acc += v;
          }
        }
        yr[o] = max ? acc : acc / static_cast<float>(count_include_pad ? padded : valid);
      }
    }
    return OkStatus();
  }
  return with_fallback(op, ctx, [&]() -> Status {
    static const Tag plain[] = {Tag::abc, Tag::abcd, Tag::abcde};
    const memory::desc src_md(x.shape, DT::f32, plain[nd - 1]);
    const memory::desc dst_md(out.shape, DT::f32, plain[nd - 1]);
    memory::dims st(nd), ks(nd), dl(nd), pl(nd), pr(nd);
    for (size_t d = 0; d < nd; ++d) {
      st[d] = strides[d];
      ks[d] = kernel[d];
      dl[d] = dilations[d] - 1;
      pl[d] = pads[d];
      pr[d] = pads[d + nd];
    }
    const dnnl::algorithm alg = max                 ? dnnl::algorithm::pooling_max
                                : count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                                    : dnnl::algorithm::pooling_avg_exclude_padding;
    auto make = [&](const memory::desc& s, const memory::desc& d) {
      dnnl::pooling_v2_forward::desc desc(dnnl::prop_kind::forward_inference, alg, s, d, st, ks,
                                          dl, pl, pr);
      return dnnl::pooling_v2_forward::primitive_desc(desc, cpu_engine());
    };
    dnnl::pooling_v2_forward::primitive_desc pd = make(src_md, dst_md);
    // On plain layouts oneDNN may have only a generic C++ loop (`simple_nchw`; on AVX2 S3D's
    // 3-D MaxPools took 60% of its time in it, 1.1 s an example against ONNX Runtime's 0.34 s
    // for the whole model): then a channel-blocked layout with a JIT kernel, the input
    // reordered into it and the output back.
    if (nd >= 2 && is_slow_pooling(pd.impl_info_str())) {
      static const Tag blocked8[] = {Tag::aBc8b, Tag::aBcd8b, Tag::aBcde8b};
      static const Tag blocked16[] = {Tag::aBc16b, Tag::aBcd16b, Tag::aBcde16b};
      for (const Tag* tags : {blocked16, blocked8}) {
        std::optional<dnnl::pooling_v2_forward::primitive_desc> alt;
        try {
          alt = make(memory::desc(x.shape, DT::f32, tags[nd - 1]),
                     memory::desc(out.shape, DT::f32, tags[nd - 1]));
        } catch (const dnnl::error&) {
          continue;
        }
        if (is_slow_pooling(alt->impl_info_str())) continue;
        memory xs = wrap(src_md, x.data), ys = wrap(dst_md, out.data);
        memory xb(alt->src_desc(), cpu_engine()), yb(alt->dst_desc(), cpu_engine());
        execute(dnnl::reorder(xs, xb), {{DNNL_ARG_FROM, xs}, {DNNL_ARG_TO, xb}});
        execute(dnnl::pooling_v2_forward(*alt), {{DNNL_ARG_SRC, xb}, {DNNL_ARG_DST, yb}});
        execute(dnnl::reorder(yb, ys), {{DNNL_ARG_FROM, yb}, {DNNL_ARG_TO, ys}});
        return OkStatus();
      }
    }
    execute(dnnl::pooling_v2_forward(pd),
            {{DNNL_ARG_SRC, wrap(src_md, x.data)}, {DNNL_ARG_DST, wrap(dst_md, out.data)}});
    return OkStatus();
  });
}

}  // namespace

// Nodes with less work than this (multiply-adds, or elements read and written; see
// node_work) run their primitives on one thread: an OpenMP fork and join costs microseconds
// on idle cores and far more on busy ones, more than halving a tiny primitive (the 1x1
// convolutions of a squeeze-excitation on pooled values) saves. Larger limits measured no
// better on 2 cores once the compiling thread stopped starting a second OpenMP team
// (add_weights). TENSORD_SERIAL_WORK_K (thousands of work units; 1 = split everything)
// overrides.
constexpr double kDefaultSerialWork = 1e5;

double serial_work_limit() {
  // An invalid value never gets here: the cpu backend's check_settings() refuses it.
  if (auto v = parse_count_env("TENSORD_SERIAL_WORK_K", 1, 1000000); v.ok() && *v > 0)
    return 1000.0 * *v;
  return kDefaultSerialWork;
}

dnnl::engine& cpu_engine() {
  static dnnl::engine engine = [] {
    ThreadPool::get();  // before oneDNN forks a region: oneDNN's OpenMP calls bound to the pool
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return engine;
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch);
}

int compute_threads() { return ThreadPool::team_size(); }

dnnl::stream& cpu_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

bool openmp_bound_to_pool() {
  static const bool bound = [] {
    // A ReLU over 1 MiB with two threads allowed: oneDNN splits it into a parallel region.
    if (ThreadPool::team_size() < 2) return true;  // nothing would fork: nothing to bind
    TeamLimit two(2);
    const uint64_t before = openmp_regions_seen();
    try {
      dnnl::memory::desc md({1 << 18}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
      dnnl::memory src(md, cpu_engine()), dst(md, cpu_engine());
      std::fill_n(static_cast<float*>(src.get_data_handle()), 1 << 18, -1.0f);
      dnnl::eltwise_forward::primitive_desc pd(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference,
                                      dnnl::algorithm::eltwise_relu, md, 0.0f),
          cpu_engine());
      dnnl::eltwise_forward(pd).execute(cpu_stream(),
                                        {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
      cpu_stream().wait();
    } catch (const dnnl::error&) {
      return false;
    }
    return openmp_regions_seen() > before;
  }();
  return bound;
}

void register_onednn_kernels(KernelRegistry& r) {
  auto add = [&r](const char* op, AcceptsFn accepts, KernelFn fn) {
    r.add(KernelDef{op, "onednn", std::move(accepts), std::move(fn), false});
  };
  add("MatMul", matmul_accepts, matmul_run);
  add("Gemm", gemm_accepts, gemm_run);
  add("Conv", conv_accepts, conv_run);
  add("ConvTranspose", conv_transpose_accepts, conv_transpose_run);
  add("MaxPool", pool_accepts, [](KernelContext& c) { return pool_run(c, true); });
  add("AveragePool", pool_accepts, [](KernelContext& c) { return pool_run(c, false); });
}

}  // namespace tensord::cpu
