// The OpenCL device's library kernels: MatMul, Gemm and Conv through CLBlast (or the generated
// GEMM), RNN/GRU/LSTM as a loop of CLBlast GEMMs and generated step kernels; listed ahead of
// the shared GPU kernels (codegen/gpu_kernels.h).
#include <algorithm>
#include <iostream>
#include <optional>

#ifdef TENSORD_HAVE_CLBLAST
#include <clblast.h>
#endif

#include "backends/codegen/lower.h"
#include "backends/codegen/printer.h"
#include "backends/codegen/recurrent.h"
#include "backends/codegen/templates.h"
#include "backends/opencl/opencl_device.h"
#include "core/errors.h"
#include "core/node_attrs.h"

namespace tensord::opencl {

// ---- MatMul, Gemm and Conv through CLBlast ----

namespace {
std::atomic<int64_t> g_blas_calls{0};
}  // namespace

int64_t blas_calls() { return g_blas_calls.load(); }

// The element offset of a tensor's bytes in its allocation (float32: a multiple of 4).
Result<size_t> float_offset(const Arg& a) {
  if (a.offset % sizeof(float) != 0)
    return errors::Unimplemented("a float32 tensor at byte offset {} (not a multiple of 4)", a.offset);
  return static_cast<size_t>(a.offset / sizeof(float));
}

Status run_gemm(OpenClDevice& d, const GemmCall& g) {
#ifdef TENSORD_HAVE_CLBLAST
  using clblast::Layout;
  using clblast::Transpose;
  cl_command_queue q = d.queue();
  const Transpose ta = g.ta ? Transpose::kYes : Transpose::kNo;
  const Transpose tb = g.tb ? Transpose::kYes : Transpose::kNo;
  clblast::StatusCode st;
  const size_t count = g.a_off.size();
  if (count == 1) {
    st = clblast::Gemm<float>(Layout::kRowMajor, ta, tb, g.m, g.n, g.k, g.alpha, g.a, g.a_off[0], g.lda, g.b,
                              g.b_off[0], g.ldb, g.beta, g.c, g.c_off[0], g.ldc, &q, nullptr);
  } else {
    std::vector<float> alphas(count, g.alpha), betas(count, g.beta);
    st = clblast::GemmBatched<float>(Layout::kRowMajor, ta, tb, g.m, g.n, g.k, alphas.data(), g.a, g.a_off.data(),
                                     g.lda, g.b, g.b_off.data(), g.ldb, betas.data(), g.c, g.c_off.data(), g.ldc,
                                     count, &q, nullptr);
  }
  if (st != clblast::StatusCode::kSuccess)
    return errors::Internal("{}: CLBlast SGEMM {}x{}x{} (batch {}) failed with status {}", d.info().name, g.m,
                            g.n, g.k, count, static_cast<int>(st));
  g_blas_calls++;
  return OkStatus();
#else
  (void)g;
  return errors::Unimplemented("{}: built without CLBlast", d.info().name);
#endif
}

namespace {

// MatMul, Gemm and Conv: CLBlast's SGEMM (im2col for Conv, a 1x1 convolution needs none),
// falling back to the generated template kernel for what it does not cover (depthwise and
// 3-D convolutions, empty tensors, other dtypes) or when CLBlast fails on the device (said
// once on stderr).
class BlasKernel final : public Kernel {
 public:
  BlasKernel(OpenClDevice* d, const Node& node)
      : device_(d), node_(node), fallback_(codegen::make_template_kernel(d, node)) {}
  std::string name() const override {
    return node_.op == "Conv" && device_->conv_tile() > 0 ? "im2col+generated gemm" : "clblast";
  }
  std::vector<int> host_inputs() const override { return fallback_->host_inputs(); }
  Status run(KernelCall& call) override {
    if (!broken_) {
      Status s = run_blas(call);
      if (s.ok()) return device_->finish_if_sync();
      if (s.code() != StatusCode::kUnimplemented) {
        broken_ = true;
        std::cerr << "tensord: " << s.message() << "; " << node_.label() << " uses the generated kernel\n";
      }
    }
    return fallback_->run(call);
  }

 private:
  Status run_blas(KernelCall& call) {
    if (call.inputs.size() < 2 || !call.inputs[0].defined() || !call.inputs[1].defined() ||
        call.output_types.empty())
      return errors::Unimplemented("inputs");
    for (size_t i = 0; i < call.inputs.size() && i < 3; ++i)
      if (call.inputs[i].defined() && call.inputs[i].dtype != DType::kFloat32)
        return errors::Unimplemented("float32 only");
    const TensorType& out = call.output_types[0];
    if (!shape_is_static(out.shape) || shape_numel(out.shape) == 0) return errors::Unimplemented("empty");
    if (node_.op == "MatMul") return matmul(call);
    if (node_.op == "Gemm") return gemm(call);
    return conv(call);
  }

  Result<std::shared_ptr<Buffer>> output(KernelCall& call, const Shape& shape) {
    TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(DType::kFloat32, shape));
    return call.allocator->allocate(static_cast<size_t>(bytes));
  }

  Status matmul(KernelCall& call) {
    Shape a = call.inputs[0].shape, b = call.inputs[1].shape;
    if (a.empty() || b.empty()) return errors::Unimplemented("scalar");
    if (a.size() == 1) a.insert(a.begin(), 1);
    if (b.size() == 1) b.push_back(1);
    const int64_t M = a[a.size() - 2], K = a.back(), N = b.back();
    if (b[b.size() - 2] != K || K == 0) return errors::Unimplemented("shapes");
    const Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
    const size_t rank = std::max(ab.size(), bb.size());
    Shape batch(rank, 1), pa(rank, 1), pb(rank, 1);
    for (size_t k = 0; k < rank; ++k) {
      pa[k] = k + ab.size() >= rank ? ab[k + ab.size() - rank] : 1;
      pb[k] = k + bb.size() >= rank ? bb[k + bb.size() - rank] : 1;
      if (pa[k] != pb[k] && pa[k] != 1 && pb[k] != 1) return errors::Unimplemented("broadcast");
      batch[k] = std::max(pa[k], pb[k]);
    }
    const int64_t count = shape_numel(batch);
    if (count * M * N != shape_numel(call.output_types[0].shape)) return errors::Unimplemented("output");
    TD_ASSIGN_OR_RETURN(Arg xa, device_->arg(*call.inputs[0].buffer));
    TD_ASSIGN_OR_RETURN(Arg xb, device_->arg(*call.inputs[1].buffer));
    TD_ASSIGN_OR_RETURN(size_t oa, float_offset(xa));
    TD_ASSIGN_OR_RETURN(size_t ob, float_offset(xb));
    TD_ASSIGN_OR_RETURN(auto buffer, output(call, call.output_types[0].shape));
    TD_ASSIGN_OR_RETURN(Arg xc, device_->arg(*buffer));
    TD_ASSIGN_OR_RETURN(size_t oc, float_offset(xc));
    GemmCall g;
    g.a = mem(xa), g.b = mem(xb), g.c = mem(xc);
    g.n = static_cast<size_t>(N), g.k = static_cast<size_t>(K);
    g.lda = static_cast<size_t>(K), g.ldb = g.ldc = static_cast<size_t>(N);
    if (shape_numel(pb) == 1) {  // B shared by every batch entry: one GEMM over the stacked rows of A
      g.m = static_cast<size_t>(count * M);
      g.a_off = {oa}, g.b_off = {ob}, g.c_off = {oc};
    } else {
      g.m = static_cast<size_t>(M);
      std::vector<int64_t> idx(rank, 0);
      for (int64_t t = 0; t < count; ++t) {
        int64_t ia = 0, ib = 0;
        for (size_t d = 0; d < rank; ++d) {
          ia = ia * pa[d] + (pa[d] == 1 ? 0 : idx[d]);
          ib = ib * pb[d] + (pb[d] == 1 ? 0 : idx[d]);
        }
        g.a_off.push_back(oa + static_cast<size_t>(ia * M * K));
        g.b_off.push_back(ob + static_cast<size_t>(ib * K * N));
        g.c_off.push_back(oc + static_cast<size_t>(t * M * N));
        for (size_t d = rank; d-- > 0;) {
          if (++idx[d] < batch[d]) break;
          idx[d] = 0;
        }
      }
    }
    TD_RETURN_IF_ERROR(run_gemm(*device_, g));
    call.outputs.assign(1, DeviceTensor{DType::kFloat32, call.output_types[0].shape, buffer});
    return OkStatus();
  }

  Status gemm(KernelCall& call) {
    NodeAttrs at(node_);
    TD_ASSIGN_OR_RETURN(int64_t ta, at.attr_int("transA", 0));
    TD_ASSIGN_OR_RETURN(int64_t tb, at.attr_int("transB", 0));
    TD_ASSIGN_OR_RETURN(float alpha, at.attr_float("alpha", 1.0f));
    TD_ASSIGN_OR_RETURN(float beta, at.attr_float("beta", 1.0f));
    const Shape& a = call.inputs[0].shape;
    const Shape& b = call.inputs[1].shape;
    if (a.size() != 2 || b.size() != 2) return errors::Unimplemented("rank");
    const int64_t M = ta ? a[1] : a[0], K = ta ? a[0] : a[1];
    const int64_t N = tb ? b[0] : b[1], K2 = tb ? b[1] : b[0];
    const Shape& o = call.output_types[0].shape;
    if (K != K2 || K == 0 || shape_numel(o) != M * N) return errors::Unimplemented("shapes");
    // A row or two (a classifier at batch 1): the generated kernel, one output per work item
    // (CLBlast's tiled GEMM wastes its tiles on one row: ~16 ms for 1 x 1280 x 1000 on PoCL).
    if (M <= 2) return errors::Unimplemented("a matrix-vector product: the generated kernel");
    const bool has_c = call.inputs.size() > 2 && call.inputs[2].defined() && beta != 0.0f;
    TD_ASSIGN_OR_RETURN(auto buffer, output(call, o));
    TD_ASSIGN_OR_RETURN(Arg xc, device_->arg(*buffer));
    if (has_c) {  // C broadcast into the output, then out = alpha A B + beta out
      const DeviceTensor& c = call.inputs[2];
      if (c.shape.size() > 2) return errors::Unimplemented("C rank");
      const std::string key = shape_to_string(c.shape) + shape_to_string(o);
      if (!fill_ || key != fill_key_) {
        TD_ASSIGN_OR_RETURN(auto k, codegen::lower_expand(c.shape, Shape{M, N}, DType::kFloat32));
        static const codegen::OpenClPrinter printer;
        TD_ASSIGN_OR_RETURN(std::string source, printer.print(k));
        TD_ASSIGN_OR_RETURN(fill_, device_->program(source, k.name));
        fill_key_ = key;
      }
      TD_ASSIGN_OR_RETURN(Arg xin, device_->arg(*c.buffer));
      TD_RETURN_IF_ERROR(device_->launch(*fill_, {xin, xc}, M * N));
    }
    TD_ASSIGN_OR_RETURN(Arg xa, device_->arg(*call.inputs[0].buffer));
    TD_ASSIGN_OR_RETURN(Arg xb, device_->arg(*call.inputs[1].buffer));
    GemmCall g;
    g.ta = ta != 0, g.tb = tb != 0;
    g.m = static_cast<size_t>(M), g.n = static_cast<size_t>(N), g.k = static_cast<size_t>(K);
    g.alpha = alpha, g.beta = has_c ? beta : 0.0f;
    g.a = mem(xa), g.b = mem(xb), g.c = mem(xc);
    g.lda = static_cast<size_t>(a[1]), g.ldb = static_cast<size_t>(b[1]), g.ldc = static_cast<size_t>(N);
    TD_ASSIGN_OR_RETURN(size_t oa, float_offset(xa));
    TD_ASSIGN_OR_RETURN(size_t ob, float_offset(xb));
    TD_ASSIGN_OR_RETURN(size_t oc, float_offset(xc));
    g.a_off = {oa}, g.b_off = {ob}, g.c_off = {oc};
    TD_RETURN_IF_ERROR(run_gemm(*device_, g));
    call.outputs.assign(1, DeviceTensor{DType::kFloat32, o, buffer});
    return OkStatus();
  }

  Status conv(KernelCall& call) {
    codegen::OpCall c;
    c.node = &node_;
    for (const auto& in : call.inputs) c.inputs.push_back(in.defined() ? in.type() : TensorType{});
    c.outputs = call.output_types;
    TD_ASSIGN_OR_RETURN(codegen::ConvGeometry geo, codegen::conv_geometry(c));
    const int64_t CG = geo.C / geo.G, Mg = geo.M / geo.G, KK = geo.KH * geo.KW, OHW = geo.OH * geo.OW;
    if (geo.G > 1 && CG == 1) return errors::Unimplemented("depthwise: the generated kernel");
    if (geo.N == 0 || geo.C == 0 || OHW == 0 || KK == 0) return errors::Unimplemented("empty");
    const Shape& o = call.output_types[0].shape;
    TD_ASSIGN_OR_RETURN(auto buffer, output(call, o));
    TD_ASSIGN_OR_RETURN(Arg xo, device_->arg(*buffer));
    TD_ASSIGN_OR_RETURN(Arg xx, device_->arg(*call.inputs[0].buffer));
    TD_ASSIGN_OR_RETURN(Arg xw, device_->arg(*call.inputs[1].buffer));
    TD_RETURN_IF_ERROR(float_offset(xx).status());
    TD_ASSIGN_OR_RETURN(size_t ow, float_offset(xw));
    TD_ASSIGN_OR_RETURN(size_t oo, float_offset(xo));
    const int64_t tile = device_->conv_tile();
    Arg xbias;
    if (geo.bias) {
      TD_ASSIGN_OR_RETURN(xbias, device_->arg(*call.inputs[2].buffer));
    }
    if (geo.bias && tile == 0) {  // the output starts as the bias; the GEMM adds to it (beta = 1)
      const int64_t total = geo.N * geo.M * OHW;
      if (!bias_ || bias_n_ != total || bias_inner_ != OHW) {
        TD_ASSIGN_OR_RETURN(bias_, device_->template_program(codegen::channel_fill_kernel(total, OHW, geo.M)));
        bias_n_ = total, bias_inner_ = OHW;
      }
      TD_RETURN_IF_ERROR(device_->launch(*bias_, {xbias, xo}, total));
    }
    // out[n0 .. n0 + part.N) = W * columns: the generated GEMM or CLBlast's.
    auto multiply = [&](const codegen::ConvGeometry& part, int64_t n0, Arg cols) -> Status {
      if (tile > 0) {
        const codegen::TemplateKernel k = codegen::conv_gemm_kernel(part, tile);
        TD_ASSIGN_OR_RETURN(auto prog, device_->template_program(k));
        Arg out = xo;
        out.offset += static_cast<cl_ulong>(n0 * geo.M * OHW * 4);
        std::vector<Arg> args = {cols, xw};
        if (geo.bias) args.push_back(xbias);
        args.push_back(out);
        return device_->launch(*prog, args, k.n);
      }
      TD_ASSIGN_OR_RETURN(size_t ocol, float_offset(cols));
      GemmCall g;
      g.m = static_cast<size_t>(Mg), g.n = static_cast<size_t>(OHW), g.k = static_cast<size_t>(CG * KK);
      g.beta = geo.bias ? 1.0f : 0.0f;
      g.a = mem(xw), g.b = mem(cols), g.c = mem(xo);
      g.lda = g.k, g.ldb = g.ldc = g.n;
      for (int64_t n = 0; n < part.N; ++n)
        for (int64_t gi = 0; gi < geo.G; ++gi) {
          g.a_off.push_back(ow + static_cast<size_t>(gi * Mg * CG * KK));
          g.b_off.push_back(ocol + static_cast<size_t>((n * geo.C + gi * CG) * KK * OHW));
          g.c_off.push_back(oo + static_cast<size_t>(((n0 + n) * geo.M + gi * Mg) * OHW));
        }
      return run_gemm(*device_, g);
    };
    if (geo.pointwise()) {  // the input is the column matrix
      TD_RETURN_IF_ERROR(multiply(geo, 0, xx));
    } else {
      // Images in chunks whose columns fit in 256 MiB.
      const int64_t per_image = geo.C * KK * OHW;
      const int64_t chunk = std::clamp<int64_t>((int64_t{256} << 20) / 4 / std::max<int64_t>(per_image, 1), 1, geo.N);
      for (int64_t n0 = 0; n0 < geo.N; n0 += chunk) {
        codegen::ConvGeometry part = geo;
        part.N = std::min(chunk, geo.N - n0);
        TD_ASSIGN_OR_RETURN(auto cols, output(call, Shape{part.N * per_image}));
        TD_ASSIGN_OR_RETURN(Arg xcol, device_->arg(*cols));
        const codegen::TemplateKernel k = codegen::im2col_kernel(part);
        TD_ASSIGN_OR_RETURN(auto prog, device_->template_program(k));
        Arg in = xx;
        in.offset += static_cast<cl_ulong>(n0 * geo.C * geo.H * geo.W * 4);
        TD_RETURN_IF_ERROR(device_->launch(*prog, {in, xcol}, k.n));
        TD_RETURN_IF_ERROR(multiply(part, n0, xcol));
      }
    }
    call.outputs.assign(1, DeviceTensor{DType::kFloat32, o, buffer});
    return OkStatus();
  }

  OpenClDevice* device_;
  Node node_;
  std::unique_ptr<Kernel> fallback_;
  bool broken_ = false;
  std::string fill_key_;
  std::shared_ptr<codegen::GpuProgram> fill_, bias_;
  int64_t bias_n_ = 0, bias_inner_ = 0;
};

// RNN, GRU and LSTM as a static loop (codegen/recurrent.h): CLBlast GEMMs and generated
// kernels enqueued on the device's in-order queue, no host round trip per step.
class RecurrentKernel final : public Kernel {
 public:
  RecurrentKernel(OpenClDevice* d, const Node& node) : device_(d), node_(node) {}
  std::string name() const override { return "clblast+generated loop"; }
  std::vector<int> host_inputs() const override {
    // sequence_lens, checked on the host (a bad length is an error naming it, as on cpu:0).
    return node_.inputs.size() > 4 && !node_.inputs[4].empty() ? std::vector<int>{4} : std::vector<int>{};
  }
  Status run(KernelCall& call) override {
    std::vector<TensorType> types;
    for (const auto& in : call.inputs) types.push_back(in.defined() ? in.type() : TensorType{});
    TD_ASSIGN_OR_RETURN(codegen::RecurrentPlan p, codegen::plan_recurrent(node_, types));
    if (p.lens) {
      if (call.host_values.size() <= 4 || call.host_values[4].empty())
        return errors::Internal("{}: no host copy of sequence_lens", node_.label());
      const std::vector<double> lens = call.host_values[4].to_double_vector();
      for (size_t i = 0; i < lens.size(); ++i)
        if (lens[i] < 0 || lens[i] > static_cast<double>(p.seq))
          return errors::InvalidArgument("{}: sequence_lens[{}] = {} is outside [0, {}] (seq_length)",
                                         node_.op, i, lens[i], p.seq);
    }
    const int64_t D = p.dirs, B = p.batch, H = p.hidden, S = p.seq, GH = p.gh(), I = p.input;
    // The per-step products: CLBlast's GEMM and a gate kernel, or at a batch of one or two on
    // a CPU device inside the step kernels (p.fused: a tiled GEMM spends its tiles on one row,
    // and each launch costs; measured on PoCL, see the README). TENSORD_OPENCL_RNN_GEMM=clblast
    // or =generated forces one.
    p.fused = device_->is_cpu() && B <= 2;
    if (const char* e = std::getenv("TENSORD_OPENCL_RNN_GEMM"); e && *e) p.fused = std::string(e) == "generated";
    auto scratch = [&](int64_t floats) -> Result<std::shared_ptr<Buffer>> {
      return call.allocator->allocate(static_cast<size_t>(floats) * 4);
    };
    auto arg_of = [&](const std::shared_ptr<Buffer>& b) { return device_->arg(*b); };
    auto input = [&](size_t i) { return device_->arg(*call.inputs[i].buffer); };
    auto launch = [&](const codegen::TemplateKernel& k, const std::vector<Arg>& args) -> Status {
      TD_ASSIGN_OR_RETURN(auto prog, device_->template_program(k));
      return device_->launch(*prog, args, k.n);
    };
    // Outputs (Y, Y_h, Y_c as the node asks) and scratch.
    call.outputs.assign(call.output_types.size(), DeviceTensor{});
    std::vector<Arg> outs(3);
    for (size_t o = 0; o < call.output_types.size() && o < 3; ++o) {
      const TensorType& t = call.output_types[o];
      if (!t.defined() || !(o == 0 ? p.y : o == 1 ? p.y_h : p.y_c)) continue;
      TD_ASSIGN_OR_RETURN(auto buf, scratch(shape_numel(t.shape)));
      TD_ASSIGN_OR_RETURN(outs[o], arg_of(buf));
      call.outputs[o] = DeviceTensor{DType::kFloat32, t.shape, buf};
    }
    const bool lstm = p.kind == codegen::RecurrentPlan::kLstm;
    const bool gru_reset = p.kind == codegen::RecurrentPlan::kGru && !p.linear_before_reset;
    TD_ASSIGN_OR_RETURN(auto xp_buf, scratch(D * S * B * GH));
    TD_ASSIGN_OR_RETURN(auto hr_buf, scratch(D * B * GH));
    TD_ASSIGN_OR_RETURN(auto h_buf, scratch(D * B * H));
    std::shared_ptr<Buffer> c_buf, rh_buf, h2_buf;  // h2: the other state buffer (fused)
    if (p.fused) {
      TD_ASSIGN_OR_RETURN(h2_buf, scratch(D * B * H));
    }
    if (lstm) {
      TD_ASSIGN_OR_RETURN(c_buf, scratch(D * B * H));
    }
    if (gru_reset) {
      TD_ASSIGN_OR_RETURN(rh_buf, scratch(D * B * H));
    }
    TD_ASSIGN_OR_RETURN(auto steps_buf, scratch(S));
    TD_ASSIGN_OR_RETURN(Arg xp, arg_of(xp_buf));
    TD_ASSIGN_OR_RETURN(Arg hr, arg_of(hr_buf));
    TD_ASSIGN_OR_RETURN(Arg h, arg_of(h_buf));
    TD_ASSIGN_OR_RETURN(Arg steps, arg_of(steps_buf));
    // Optional operands: an Arg where the plan has them (never passed otherwise).
    Arg c, rh, bias, peep, lens, h0, c0, h2;
    if (p.fused) {
      TD_ASSIGN_OR_RETURN(h2, arg_of(h2_buf));
    }
    auto maybe = [&](bool present, size_t i, Arg* out) -> Status {
      if (!present) return OkStatus();
      TD_ASSIGN_OR_RETURN(*out, input(i));
      return OkStatus();
    };
    TD_RETURN_IF_ERROR(maybe(p.bias, 3, &bias));
    TD_RETURN_IF_ERROR(maybe(p.lens, 4, &lens));
    TD_RETURN_IF_ERROR(maybe(p.initial_h, 5, &h0));
    TD_RETURN_IF_ERROR(maybe(p.initial_c, 6, &c0));
    TD_RETURN_IF_ERROR(maybe(p.peepholes, 7, &peep));
    if (lstm) {
      TD_ASSIGN_OR_RETURN(c, arg_of(c_buf));
    }
    if (gru_reset) {
      TD_ASSIGN_OR_RETURN(rh, arg_of(rh_buf));
    }
    TD_ASSIGN_OR_RETURN(Arg x, input(0));
    TD_ASSIGN_OR_RETURN(Arg w, input(1));
    TD_ASSIGN_OR_RETURN(Arg r, input(2));

    // The states (initial_h / initial_c or 0), Y_h / Y_c zeroed, Y zeroed when entries may
    // stop early, the step numbers.
    std::vector<Arg> init_args;
    if (p.initial_h) init_args.push_back(h0);
    if (p.initial_c) init_args.push_back(c0);
    init_args.push_back(h);
    if (lstm) init_args.push_back(c);
    if (p.y_h) init_args.push_back(outs[1]);
    if (p.y_c) init_args.push_back(outs[2]);
    TD_RETURN_IF_ERROR(launch(codegen::recurrent_init_kernel(p), init_args));
    if (p.y && p.lens) TD_RETURN_IF_ERROR(launch(codegen::zero_kernel(shape_numel(call.output_types[0].shape)), {outs[0]}));
    TD_RETURN_IF_ERROR(launch(codegen::iota_kernel(S), {steps}));

    TD_ASSIGN_OR_RETURN(size_t ox, float_offset(x));
    TD_ASSIGN_OR_RETURN(size_t ow, float_offset(w));
    TD_ASSIGN_OR_RETURN(size_t orr, float_offset(r));
    TD_ASSIGN_OR_RETURN(size_t oxp, float_offset(xp));
    TD_ASSIGN_OR_RETURN(size_t ohr, float_offset(hr));
    TD_ASSIGN_OR_RETURN(size_t oh, float_offset(h));
    // XP[d] = X W[d]^T over every time step at once.
    GemmCall in_proj;
    in_proj.tb = true;
    in_proj.m = static_cast<size_t>(S * B), in_proj.n = static_cast<size_t>(GH), in_proj.k = static_cast<size_t>(I);
    in_proj.a = mem(x), in_proj.b = mem(w), in_proj.c = mem(xp);
    in_proj.lda = in_proj.ldb = static_cast<size_t>(I), in_proj.ldc = static_cast<size_t>(GH);
    // HR[d] = H[d] R[d]^T, per step.
    GemmCall rec;
    rec.tb = true;
    rec.m = static_cast<size_t>(B), rec.n = static_cast<size_t>(GH), rec.k = static_cast<size_t>(H);
    rec.a = mem(h), rec.b = mem(r), rec.c = mem(hr);
    rec.lda = rec.ldb = static_cast<size_t>(H), rec.ldc = static_cast<size_t>(GH);
    // GRU, linear_before_reset = 0: HR[d][:, 2H:3H] = RH[d] Rh[d]^T.
    GemmCall reset = rec;
    reset.n = static_cast<size_t>(H);
    reset.a = mem(rh);
    for (int64_t d = 0; d < D; ++d) {
      const auto u = [](int64_t v) { return static_cast<size_t>(v); };
      in_proj.a_off.push_back(ox), in_proj.b_off.push_back(ow + u(d * GH * I));
      in_proj.c_off.push_back(oxp + u(d * S * B * GH));
      rec.a_off.push_back(oh + u(d * B * H)), rec.b_off.push_back(orr + u(d * GH * H));
      rec.c_off.push_back(ohr + u(d * B * GH));
      if (gru_reset) {
        TD_ASSIGN_OR_RETURN(size_t orh, float_offset(rh));
        reset.a_off.push_back(orh + u(d * B * H)), reset.b_off.push_back(orr + u(d * GH * H + 2 * H * H));
        reset.c_off.push_back(ohr + u(d * B * GH + 2 * H));
      }
    }
    TD_RETURN_IF_ERROR(run_gemm(*device_, in_proj));

    const codegen::TemplateKernel gate = codegen::recurrent_gate_kernel(p);
    TD_ASSIGN_OR_RETURN(auto gate_prog, device_->template_program(gate));
    std::shared_ptr<codegen::GpuProgram> reset_prog;
    codegen::TemplateKernel reset_k;
    if (gru_reset) {
      reset_k = codegen::recurrent_reset_kernel(p);
      TD_ASSIGN_OR_RETURN(reset_prog, device_->template_program(reset_k));
    }
    // Argument lists (codegen/recurrent.h); fused, slot 2 (and the gate kernel's output 0)
    // alternate between the two state buffers.
    std::vector<Arg> gate_args = {steps, xp, p.fused ? h : hr};
    if (p.fused) gate_args.push_back(r);
    if (p.fused && gru_reset) gate_args.push_back(rh);
    if (p.bias) gate_args.push_back(bias);
    if (p.peepholes) gate_args.push_back(peep);
    if (p.lens) gate_args.push_back(lens);
    const size_t gate_out = gate_args.size();
    gate_args.push_back(p.fused ? h2 : h);
    if (lstm) gate_args.push_back(c);
    for (int o = 0; o < 3; ++o)
      if (o == 0 ? p.y : o == 1 ? p.y_h : p.y_c) gate_args.push_back(outs[static_cast<size_t>(o)]);
    std::vector<Arg> reset_args = {steps, xp, p.fused ? h : hr, p.fused ? r : h};
    if (p.bias) reset_args.push_back(bias);
    if (p.lens) reset_args.push_back(lens);
    reset_args.push_back(rh);
    for (int64_t s = 0; s < S; ++s) {
      gate_args[0].offset = reset_args[0].offset = steps.offset + static_cast<cl_ulong>(s * 4);
      if (p.fused) {
        const Arg& prev = s % 2 == 0 ? h : h2;
        const Arg& next = s % 2 == 0 ? h2 : h;
        gate_args[2] = reset_args[2] = prev;
        gate_args[gate_out] = next;
      } else {
        TD_RETURN_IF_ERROR(run_gemm(*device_, rec));
      }
      if (gru_reset) {
        TD_RETURN_IF_ERROR(device_->launch(*reset_prog, reset_args, reset_k.n));
        if (!p.fused) TD_RETURN_IF_ERROR(run_gemm(*device_, reset));
      }
      TD_RETURN_IF_ERROR(device_->launch(*gate_prog, gate_args, gate.n));
    }
    return device_->finish_if_sync();
  }

 private:
  OpenClDevice* device_;
  Node node_;
};

}  // namespace

// The OpenCL device's own kernels, ahead of the shared ones (codegen/gpu_kernels.h).
std::vector<codegen::GpuKernelEntry> opencl_kernels(OpenClDevice* d) {
  using Claim = std::optional<Status>;
  auto domain_ok = [](const Node& n) { return n.domain.empty() || n.domain == "ai.onnx"; };
  std::vector<codegen::GpuKernelEntry> list;
  // MatMul and Gemm (with CLBlast) and Conv but depthwise ones (one input channel per group:
  // the template's): CLBlast or the generated GEMM, the template where they do not apply.
  list.push_back({"clblast",
                  [d, domain_ok](const Node& node, const std::vector<TensorType>& inputs) -> Claim {
                    if (!domain_ok(node) || !((d->blas() && (node.op == "MatMul" || node.op == "Gemm")) ||
                                              node.op == "Conv"))
                      return std::nullopt;
                    if (node.op == "Conv" && inputs.size() > 1 && inputs[0].defined() && inputs[1].defined() &&
                        inputs[0].shape.size() > 1 && inputs[1].shape.size() > 1) {
                      auto g = NodeAttrs(node).attr_int("group", 1);
                      if (g.ok() && *g > 1 && inputs[1].shape[1] == 1) return std::nullopt;  // depthwise
                    }
                    for (const auto& t : inputs)
                      if (t.defined() && t.dtype == DType::kFloat64 && !d->no_fp64().empty())
                        return errors::Unimplemented("{}: {} {} ({})", node.op, d->name(), d->no_fp64(),
                                                     node.label());
                    return codegen::template_supported(node, inputs);
                  },
                  [d](const Node& node, const std::vector<TensorType>&) -> std::unique_ptr<Kernel> {
                    return std::make_unique<BlasKernel>(d, node);
                  }});
  list.push_back({"recurrent",
                  [d, domain_ok](const Node& node, const std::vector<TensorType>& inputs) -> Claim {
                    if (!domain_ok(node) || !(node.op == "RNN" || node.op == "GRU" || node.op == "LSTM"))
                      return std::nullopt;
                    if (!d->blas())
                      return errors::Unimplemented("{}: {} runs recurrent ops through CLBlast, which it lacks ({})",
                                                   node.op, d->name(), node.label());
                    return codegen::plan_recurrent(node, inputs).status();
                  },
                  [d](const Node& node, const std::vector<TensorType>&) -> std::unique_ptr<Kernel> {
                    return std::make_unique<RecurrentKernel>(d, node);
                  }});
  return list;
}
}  // namespace tensord::opencl
