// A Conv with constant weights and what follows it (a residual Add, an activation; an
// inference BatchNormalization after it the engine has folded into its weights: bnfold) as one
// generated kernel: the OpenCL device's own regions, formed before
// the shared element-wise fusion (codegen::GpuRegionCompiler).
#include <cmath>
#include <limits>
#include <optional>

#include "backends/codegen/templates.h"
#include "backends/opencl/opencl_device.h"
#include "core/errors.h"
#include "core/node_attrs.h"

namespace tensord::opencl {
namespace {

std::atomic<int64_t> g_conv_regions{0};

// A convolution with constant weights and what follows it: a residual Add and an activation
// become the kernel's epilogue (an inference BatchNormalization was folded into the weights by
// the engine before placement, engine/canonicalize.h). 1x1 windows of stride 1 multiply the
// input directly (no im2col), depthwise convolutions have their own vectorised kernel, others
// run im2col + the vectorised GEMM (codegen::conv_gemm_vec_kernel).
class ConvRegion final : public RegionKernel {
 public:
  ConvRegion(OpenClDevice* d, codegen::ConvGeometry geo, bool depthwise, std::string summary)
      : device_(d), geo_(geo), depthwise_(depthwise), summary_(std::move(summary)), uploads_(d) {}
  Result<Arg> upload(const std::vector<float>& v) { return uploads_.upload(v.data(), v.size() * sizeof(float)); }
  Status prepare(const std::vector<float>& weights, const std::vector<float>& bias,
                 const codegen::ConvEpilogue& e, int64_t tile) {
    epilogue_ = e;
    TD_ASSIGN_OR_RETURN(weights_, upload(weights));
    if (e.bias) {
      TD_ASSIGN_OR_RETURN(bias_, upload(bias));
    }
    int64_t vec = 8;
    if (const char* v = std::getenv("TENSORD_OPENCL_CONV_VEC"); v && *v) vec = std::atoll(v);
    const codegen::TemplateKernel k =
        depthwise_ ? codegen::depthwise_vec_kernel(geo_, 8, e)
                   : codegen::conv_gemm_vec_kernel(geo_, tile, vec, e, rows_fastest());
    TD_ASSIGN_OR_RETURN(main_, device_->template_program(k));
    main_n_ = k.n;
    if (!depthwise_ && !geo_.pointwise()) {
      const codegen::TemplateKernel c = codegen::im2col_kernel(geo_);
      TD_ASSIGN_OR_RETURN(im2col_, device_->template_program(c));
      im2col_n_ = c.n;
      arena_ = geo_.N * geo_.C * geo_.KH * geo_.KW * geo_.OH * geo_.OW * 4;
    }
    return OkStatus();
  }
  Status run(const std::vector<DeviceTensor>& inputs, const std::vector<DeviceTensor>& outputs,
             Allocator& allocator) override {
    if (inputs.empty() || !inputs[0].buffer || outputs.empty() || !outputs[0].buffer ||
        (epilogue_.residual && (inputs.size() < 2 || !inputs[1].buffer)))
      return errors::Internal("{}: fused convolution input or output missing", device_->name());
    TD_ASSIGN_OR_RETURN(Arg x, device_->arg(*inputs[0].buffer));
    TD_ASSIGN_OR_RETURN(Arg out, device_->arg(*outputs[0].buffer));
    std::shared_ptr<Buffer> cols;
    if (im2col_) {
      TD_ASSIGN_OR_RETURN(cols, allocator.allocate(static_cast<size_t>(arena_)));
      TD_ASSIGN_OR_RETURN(Arg c, device_->arg(*cols));
      TD_RETURN_IF_ERROR(device_->launch(*im2col_, {x, c}, im2col_n_));
      x = c;
    }
    std::vector<Arg> args = {x, weights_};
    if (epilogue_.bias) args.push_back(bias_);
    if (epilogue_.residual) {
      TD_ASSIGN_OR_RETURN(Arg r, device_->arg(*inputs[1].buffer));
      args.push_back(r);
    }
    args.push_back(out);
    return device_->launch(*main_, args, main_n_);
  }
  int64_t arena_bytes() const override { return arena_; }
  int64_t weight_bytes() const override { return uploads_.bytes(); }
  std::string describe() const override { return summary_; }
  bool rows_fastest() const {
    if (const char* v = std::getenv("TENSORD_OPENCL_CONV_ROWS"); v && *v) return std::atoi(v) != 0;
    return device_->is_cpu();
  }

 private:
  OpenClDevice* device_;
  codegen::ConvGeometry geo_;
  bool depthwise_;
  std::string summary_;
  codegen::ConvEpilogue epilogue_;
  Arg weights_{}, bias_{};
  std::shared_ptr<codegen::GpuProgram> main_, im2col_;
  int64_t main_n_ = 0, im2col_n_ = 0, arena_ = 0;
  codegen::HeldBuffers uploads_;
};

// The float32 values of a constant (empty when it is not a float32 constant).
std::vector<float> constant_floats(const FusionGraph& g, const std::string& name) {
  const HostTensor* t = name.empty() ? nullptr : g.constant(name);
  if (!t || t->dtype() != DType::kFloat32) return {};
  return std::vector<float>(t->data<float>(), t->data<float>() + t->numel());
}

}  // namespace

int64_t conv_regions_built() { return g_conv_regions.load(); }

// Conv chains of `g` as regions (their members are marked in `taken`).
std::vector<Region> conv_regions(OpenClDevice& device, const FusionGraph& g, std::vector<bool>& taken,
                                 std::vector<std::string>* notes) {
  std::vector<Region> regions;
  if (std::getenv("TENSORD_OPENCL_NO_CONV_FUSION")) return regions;
  auto here = [&](size_t i) { return g.placed_here.empty() || g.placed_here[i]; };
  auto domain_ok = [](const Node& n) { return n.domain.empty() || n.domain == "ai.onnx"; };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& conv = *g.nodes[i];
    if (taken[i] || !here(i) || conv.op != "Conv" || !domain_ok(conv) || conv.outputs.size() != 1 ||
        conv.inputs.size() < 2 || conv.inputs[0].empty())
      continue;
    const TensorType* xt = g.type_of(conv.inputs[0]);
    const TensorType* ot = g.type_of(conv.outputs[0]);
    const HostTensor* w = g.constant(conv.inputs[1]);
    if (!xt || !ot || !w || xt->dtype != DType::kFloat32 || w->dtype() != DType::kFloat32 ||
        !shape_is_static(xt->shape) || !shape_is_static(ot->shape) || shape_numel(ot->shape) == 0 ||
        g.constant(conv.inputs[0]))
      continue;
    const bool has_bias = conv.inputs.size() > 2 && !conv.inputs[2].empty();
    if (has_bias && !g.constant(conv.inputs[2])) continue;
    codegen::OpCall call;
    call.node = &conv;
    call.inputs = {*xt, w->type()};
    if (has_bias) call.inputs.push_back(g.constant(conv.inputs[2])->type());
    call.outputs = {*ot};
    auto geo_or = codegen::conv_geometry(call);
    if (!geo_or.ok()) continue;
    codegen::ConvGeometry geo = *geo_or;
    if (geo.N == 0 || geo.C == 0 || geo.KW == 0) continue;
    const int64_t CG = geo.C / geo.G;
    const bool depthwise = geo.G > 1 && CG == 1 && geo.M == geo.C;
    if (geo.G > 1 && CG == 1 && !depthwise) continue;  // a channel multiplier: the node's kernel
    std::vector<float> weights(w->data<float>(), w->data<float>() + w->numel());
    std::vector<float> bias(static_cast<size_t>(geo.M), 0.0f);
    if (has_bias) {
      bias = constant_floats(g, conv.inputs[2]);
      if (bias.size() != static_cast<size_t>(geo.M)) continue;
    }
    Region r;
    r.members = {i};
    r.inputs = {conv.inputs[0]};
    std::vector<std::string> ops = {"Conv"};
    std::string value = conv.outputs[0];
    codegen::ConvEpilogue e;
    e.bias = has_bias;
    // The epilogue the engine tagged: a residual Add of a value of the output's shape, then an
    // activation, each taken only while no earlier region took it.
    const std::vector<EpilogueStep> chain = g.epilogue_of(i);
    size_t at = 0;
    auto free_step = [&](size_t k) {
      return k < chain.size() && !taken[chain[k].nodes.back()] && !taken[chain[k].nodes.front()];
    };
    if (free_step(at) && chain[at].kind == EpilogueStep::Kind::kBinary &&
        chain[at].node->op == "Add" && chain[at].form == EpilogueStep::Operand::kSameShape &&
        !chain[at].operand_constant && xt->dtype == DType::kFloat32) {
      e.residual = true;
      r.members.push_back(chain[at].nodes[0]);
      r.inputs.push_back(chain[at].operand);
      ops.push_back("Add");
      value = chain[at].output;
      ++at;
    }
    // An activation.
    if (free_step(at) && chain[at].kind == EpilogueStep::Kind::kActivation) {
      const size_t j = chain[at].nodes[0];
      const Node& act = *g.nodes[j];
      NodeAttrs at_attrs(act);
      bool ok = true;
      if (ok && act.op == "Relu") {
        e.activation = "Relu";
      } else if (ok && act.op == "Clip") {
        float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
        if (at_attrs.has_attr("min") || at_attrs.has_attr("max")) {  // before opset 11
          auto a = at_attrs.attr_float("min", lo), b = at_attrs.attr_float("max", hi);
          ok = a.ok() && b.ok();
          if (ok) lo = *a, hi = *b;
        }
        for (size_t k = 1; ok && k < act.inputs.size() && k < 3; ++k) {
          if (act.inputs[k].empty()) continue;
          const std::vector<float> v = constant_floats(g, act.inputs[k]);
          ok = v.size() == 1;
          if (ok) (k == 1 ? lo : hi) = v[0];
        }
        if (ok) e.activation = "Clip", e.alpha = lo, e.beta = hi;
      } else if (ok && act.op == "LeakyRelu") {
        auto a = at_attrs.attr_float("alpha", 0.01f);
        if (a.ok()) e.activation = "LeakyRelu", e.alpha = *a;
      } else if (ok && act.op == "HardSigmoid") {
        auto a = at_attrs.attr_float("alpha", 0.2f), b = at_attrs.attr_float("beta", 0.5f);
        if (a.ok() && b.ok()) e.activation = "HardSigmoid", e.alpha = *a, e.beta = *b;
      } else if (ok && (act.op == "HardSwish" || act.op == "Sigmoid")) {
        e.activation = act.op;
      }
      if (!e.activation.empty()) {
        r.members.push_back(j);
        ops.push_back(act.op);
        value = act.outputs[0];
      }
    }
    r.outputs = {value};
    const std::string summary =
        fmt::format("OpenClConv: {} as 1 {} kernel{} over {}", fmt::join(ops, "+"),
                    depthwise ? "depthwise" : geo.pointwise() ? "1x1 GEMM" : "im2col + GEMM",
                    depthwise || geo.pointwise() ? "" : "s", shape_to_string(ot->shape));
    auto kernel = std::make_unique<ConvRegion>(&device, geo, depthwise, summary);
    const int64_t tile = device.conv_tile() > 0 ? device.conv_tile() : 8;
    if (Status st = kernel->prepare(weights, bias, e, tile); !st.ok()) {
      if (notes) notes->push_back(fmt::format("{}: {} left unfused: {}", device.name(), conv.label(), st.message()));
      continue;
    }
    r.kernel = std::move(kernel);
    for (size_t m : r.members) taken[m] = true;
    g_conv_regions++;
    regions.push_back(std::move(r));
  }
  return regions;
}
}  // namespace tensord::opencl
