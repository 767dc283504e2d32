// MatMul/Gemm + bias (+ Relu / tanh-Gelu) -> one cublasLtMatmul with a bias epilogue: which
// groups of a graph cuBLASLt computes as ONNX defines them, read from the epilogue the engine
// tags (FusionGraph::epilogue_of). Host code only (no GPU, no cuBLASLt).
#include <map>

#include "backends/cuda/cuda_backend.h"
#include "core/node_attrs.h"

namespace tensord::cuda {
namespace {

bool is_f32_static(const TensorType* t) {
  return t && t->dtype == DType::kFloat32 && shape_is_static(t->shape);
}

}  // namespace

std::vector<LtFusion> plan_lt_fusions(const FusionGraph& g, std::vector<std::string>* notes) {
  auto here = [&](size_t i) { return g.placed_here.empty() || g.placed_here[i]; };
  auto domain_ok = [&](const Node& n) { return n.domain.empty() || n.domain == "ai.onnx"; };
  auto note = [&](const Node& n, const std::string& why) {
    if (notes) notes->push_back(fmt::format("cuBLASLt epilogue: {} not fused: {}", n.label(), why));
  };

  std::vector<LtFusion> out;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& mm = *g.nodes[i];
    if (!here(i) || !domain_ok(mm) || (mm.op != "MatMul" && mm.op != "Gemm")) continue;
    if (mm.inputs.size() < 2 || mm.outputs.size() != 1) continue;
    const TensorType* ta = g.type_of(mm.inputs[0]);
    const TensorType* tb = g.type_of(mm.inputs[1]);
    if (!is_f32_static(ta) || !is_f32_static(tb)) {
      note(mm, "operands not static float32");
      continue;
    }
    if (ta->shape.size() != 2 || tb->shape.size() != 2) {
      note(mm, "operands not 2-D (batched MatMul)");
      continue;
    }
    LtFusion f;
    f.a = mm.inputs[0];
    f.b = mm.inputs[1];
    bool gemm_bias = false;
    if (mm.op == "Gemm") {
      NodeAttrs at(mm);
      auto trans_a = at.attr_int("transA", 0), trans_b = at.attr_int("transB", 0);
      auto alpha = at.attr_float("alpha", 1.0f), beta = at.attr_float("beta", 1.0f);
      if (!trans_a.ok() || !trans_b.ok() || !alpha.ok() || !beta.ok()) continue;
      if (*trans_a != 0) {
        note(mm, "transA");
        continue;
      }
      if (*alpha != 1.0f) {
        note(mm, "alpha != 1");
        continue;
      }
      f.trans_b = *trans_b != 0;
      if (mm.inputs.size() > 2 && !mm.inputs[2].empty() && *beta != 0.0f) {
        const TensorType* tc = g.type_of(mm.inputs[2]);
        if (*beta != 1.0f || !is_f32_static(tc) || tc->shape.size() != 1) {
          note(mm, "Gemm's C is not a 1-D bias with beta=1");
          continue;
        }
        f.bias = mm.inputs[2];
        gemm_bias = true;
      }
    }
    f.m = ta->shape[0];
    f.k = ta->shape[1];
    f.n = f.trans_b ? tb->shape[0] : tb->shape[1];
    if ((f.trans_b ? tb->shape[1] : tb->shape[0]) != f.k || f.m <= 0 || f.n <= 0 || f.k <= 0) continue;
    if (gemm_bias && g.type_of(f.bias)->shape[0] != f.n) {
      note(mm, "Gemm's C is not [N]");
      continue;
    }
    f.members.push_back(i);
    std::string value = mm.outputs[0];
    // The epilogue the engine tagged: a bias Add (unless Gemm's C is one), then an activation
    // cuBLASLt computes exactly as ONNX does.
    const std::vector<EpilogueStep> chain = g.epilogue_of(i);
    size_t at = 0;
    if (!gemm_bias) {
      if (chain.empty() || chain[0].kind != EpilogueStep::Kind::kBinary ||
          chain[0].node->op != "Add")
        continue;
      const std::string& other = chain[0].operand;
      const TensorType* tbias = g.type_of(other);
      if (!is_f32_static(tbias) || tbias->shape.size() != 1 || tbias->shape[0] != f.n) {
        note(*chain[0].node, fmt::format("the bias {} is not a float32 [{}]", other, f.n));
        continue;
      }
      f.bias = other;
      f.members.push_back(chain[0].nodes[0]);
      value = chain[0].output;
      at = 1;
    }
    if (f.m > 0x7fffffff || f.n > 0x7fffffff || f.k > 0x7fffffff) continue;
    if (at < chain.size() && chain[at].kind == EpilogueStep::Kind::kActivation) {
      const Node& an = *chain[at].node;
      if (an.inputs.size() == 1) {
        if (an.op == "Relu") {
          f.epilogue = LtFusion::kReluBias;
        } else if (an.op == "Gelu") {
          auto approx = NodeAttrs(an).attr_string("approximate", "none");
          if (approx.ok() && *approx == "tanh") f.epilogue = LtFusion::kGeluBias;
          else note(an, "exact (erf) Gelu: cuBLASLt's GELU epilogue is the tanh approximation");
        }
        if (f.epilogue != LtFusion::kBias) {
          f.members.push_back(chain[at].nodes[0]);
          value = chain[at].output;
        }
      }
    }
    f.output = value;
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<ConvFusion> plan_conv_fusions(const FusionGraph& g, std::vector<std::string>* notes) {
  auto here = [&](size_t i) { return g.placed_here.empty() || g.placed_here[i]; };
  auto note = [&](const Node& n, const std::string& why) {
    if (notes) notes->push_back(fmt::format("cuDNN fused convolution: {} not fused: {}", n.label(), why));
  };
  std::vector<ConvFusion> out;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& conv = *g.nodes[i];
    if (!here(i) || conv.op != "Conv" || (!conv.domain.empty() && conv.domain != "ai.onnx") ||
        conv.inputs.size() < 2 || conv.outputs.size() != 1 || conv.inputs[0].empty())
      continue;
    const std::vector<EpilogueStep> chain = g.epilogue_of(i);
    size_t relu = 0;  // the Relu's step, + 1
    for (size_t k = 0; k < chain.size() && k < 3 && !relu; ++k)
      if (chain[k].kind == EpilogueStep::Kind::kActivation && chain[k].node->op == "Relu") relu = k + 1;
    if (!relu) continue;  // nothing cuDNN's call would fuse
    const TensorType* xt = g.type_of(conv.inputs[0]);
    const TensorType* yt = g.type_of(conv.outputs[0]);
    const HostTensor* w = g.constant(conv.inputs[1]);
    if (!is_f32_static(xt) || !is_f32_static(yt) || !w || w->dtype() != DType::kFloat32 ||
        g.constant(conv.inputs[0])) {
      note(conv, "not a float32 Conv of static shape with constant weights");
      continue;
    }
    ConvFusion f;
    f.members = {i};
    f.x = conv.inputs[0];
    f.w = conv.inputs[1];
    f.channels = w->shape().empty() ? 0 : w->shape()[0];
    if (conv.inputs.size() > 2 && !conv.inputs[2].empty()) {
      const HostTensor* b = g.constant(conv.inputs[2]);
      if (!b || b->dtype() != DType::kFloat32 || b->numel() != f.channels) {
        note(conv, "its bias is not a constant float32 [C]");
        continue;
      }
      f.bias = conv.inputs[2];
    }
    auto plan = plan_cudnn_conv(conv, xt->shape, w->shape(), !f.bias.empty());
    if (!plan.ok()) {
      note(conv, plan.status().message());
      continue;
    }
    // The steps before the Relu: at most one bias and one residual, each an Add.
    bool ok = true;
    for (size_t k = 0; k + 1 < relu && ok; ++k) {
      const EpilogueStep& s = chain[k];
      const bool add = s.kind == EpilogueStep::Kind::kBinary && s.node->op == "Add";
      if (add && s.form == EpilogueStep::Operand::kChannel && s.operand_constant && f.bias.empty()) {
        const HostTensor* b = g.constant(s.operand);
        ok = b->dtype() == DType::kFloat32 && b->numel() == f.channels;
        f.bias = s.operand;
      } else if (add && s.form == EpilogueStep::Operand::kSameShape && f.residual.empty()) {
        f.residual = s.operand;
      } else {
        ok = false;
      }
      if (ok) f.members.push_back(s.nodes[0]);
      else note(*s.node, "cuDNN's call adds one per-channel bias and one residual before the ReLU");
    }
    if (!ok) continue;
    f.members.push_back(chain[relu - 1].nodes[0]);
    f.output = chain[relu - 1].output;
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace tensord::cuda
