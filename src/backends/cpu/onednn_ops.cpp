#include "backends/cpu/onednn_ops.h"

#include <cfloat>

#include "backends/cpu/onednn_region.h"
#include "core/errors.h"
#include "core/node_attrs.h"
#include "core/op_registry.h"

namespace tensord::cpu {

using dnnl_names::Alg;

bool is_reference(const std::string& impl) { return impl.find("ref") != std::string::npos; }

bool is_slow_pooling(const std::string& impl) {
  return is_reference(impl) || impl.find("simple") != std::string::npos;
}

// The implementation oneDNN chose for a created primitive ("jit:avx2", "ref:any"), or "".
std::string impl_of(const dnnl::primitive& prim) {
  if (!prim) return "";
  const char* info = nullptr;
  try {
    if (dnnl_primitive_desc_query(prim.get_primitive_desc(), dnnl_query_impl_info_str, 0,
                                  &info) != dnnl_success)
      return "";
  } catch (const dnnl::error&) {
    return "";
  }
  return info ? std::string(info) : std::string();
}



// The element-wise ops with a oneDNN eltwise algorithm (eltwise_of) and the broadcast ops
// with a oneDNN binary one; an op is taken only when its schema's OpKind says so too.
const std::set<std::string>& unary_eltwise_ops() {
  static const std::set<std::string> ops = {"Relu",  "LeakyRelu", "Clip",     "Sigmoid",
                                            "Tanh",  "Elu",       "HardSwish", "HardSigmoid",
                                            "Softplus", "Exp",    "Abs",       "Sqrt", "Neg", "Gelu",
                                            "Round"};
  return ops;
}
const std::set<std::string>& binary_ops() {
  static const std::set<std::string> ops = {"Add", "Sub", "Mul", "Div", "Max", "Min"};
  return ops;
}

bool is_unary_eltwise(const std::string& op) {
  return unary_eltwise_ops().count(op) > 0 && op_kind(op) == OpKind::kElementwise;
}

bool is_binary(const std::string& op) {
  return binary_ops().count(op) > 0 && op_kind(op) == OpKind::kBroadcast;
}

bool is_commutative(const std::string& op) { return op != "Sub" && op != "Div"; }

Alg binary_alg(const std::string& op) {
  if (op == "Add") return Alg::binary_add;
  if (op == "Sub") return Alg::binary_sub;
  if (op == "Mul") return Alg::binary_mul;
  if (op == "Div") return Alg::binary_div;
  if (op == "Max") return Alg::binary_max;
  return Alg::binary_min;
}

float scalar_of(const HostTensor& t) { return t.data<float>()[0]; }

// The oneDNN eltwise steps of a unary op (HardSigmoid needs two), or an error.
Result<std::vector<Eltwise>> eltwise_steps(const Node& node, const FusionGraph& g) {
  NodeAttrs a(node);
  const std::string& op = node.op;
  if (op == "Relu") return std::vector<Eltwise>{{Alg::eltwise_relu, 0, 0}};
  if (op == "LeakyRelu") {
    TD_ASSIGN_OR_RETURN(float alpha, a.attr_float("alpha", 0.01f));
    return std::vector<Eltwise>{{Alg::eltwise_relu, alpha, 0}};
  }
  if (op == "Clip") {
    float lo = -FLT_MAX, hi = FLT_MAX;
    for (size_t i = 1; i < node.inputs.size() && i < 3; ++i) {
      if (node.inputs[i].empty()) continue;
      const HostTensor* c = g.constant(node.inputs[i]);
      if (!c || c->dtype() != DType::kFloat32 || c->numel() != 1)
        return errors::Unimplemented("Clip bounds must be float32 constants");
      (i == 1 ? lo : hi) = scalar_of(*c);
    }
    return std::vector<Eltwise>{{Alg::eltwise_clip, lo, hi}};
  }
  if (op == "Sigmoid") return std::vector<Eltwise>{{Alg::eltwise_logistic, 0, 0}};
  if (op == "Tanh") return std::vector<Eltwise>{{Alg::eltwise_tanh, 0, 0}};
  if (op == "Elu") {
    TD_ASSIGN_OR_RETURN(float alpha, a.attr_float("alpha", 1.0f));
    return std::vector<Eltwise>{{Alg::eltwise_elu, alpha, 0}};
  }
  if (op == "HardSwish") return std::vector<Eltwise>{{Alg::eltwise_hardswish, 1.0f / 6, 0.5f}};
  if (op == "HardSigmoid") {
    TD_ASSIGN_OR_RETURN(float alpha, a.attr_float("alpha", 0.2f));
    TD_ASSIGN_OR_RETURN(float beta, a.attr_float("beta", 0.5f));
    return std::vector<Eltwise>{{Alg::eltwise_linear, alpha, beta}, {Alg::eltwise_clip, 0, 1}};
  }
  if (op == "Softplus") return std::vector<Eltwise>{{Alg::eltwise_soft_relu, 0, 0}};
  if (op == "Exp") return std::vector<Eltwise>{{Alg::eltwise_exp, 0, 0}};
  if (op == "Abs") return std::vector<Eltwise>{{Alg::eltwise_abs, 0, 0}};
  if (op == "Sqrt") return std::vector<Eltwise>{{Alg::eltwise_sqrt, 0, 0}};
  if (op == "Neg") return std::vector<Eltwise>{{Alg::eltwise_linear, -1, 0}};
  if (op == "Round") return std::vector<Eltwise>{{Alg::eltwise_round, 0, 0}};  // half to even
  if (op == "Gelu") {
    TD_ASSIGN_OR_RETURN(std::string approximate, a.attr_string("approximate", "none"));
    if (approximate == "none") return std::vector<Eltwise>{{Alg::eltwise_gelu_erf, 0, 0}};
    if (approximate == "tanh") return std::vector<Eltwise>{{Alg::eltwise_gelu_tanh, 0, 0}};
    return errors::InvalidArgument("Gelu: approximate '{}' is neither 'none' nor 'tanh'", approximate);
  }
  return errors::Unimplemented("{} is not an element-wise activation", op);
}

std::vector<std::string> onednn_elementwise_ops() {
  std::vector<std::string> names(unary_eltwise_ops().begin(), unary_eltwise_ops().end());
  names.insert(names.end(), binary_ops().begin(), binary_ops().end());
  return names;
}

}  // namespace tensord::cpu
