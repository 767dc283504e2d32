#include "backends/cpu/kernel.h"

namespace tensord::cpu {

void register_linalg_kernels(KernelRegistry& r);  // kernels/linalg.cpp (LAPACKE)
void register_training_kernels(KernelRegistry& r);  // kernels/training.cpp (ai.onnx.preview.training)


Result<MutableTensorView> KernelContext::output(int i) {
  if (i < 0 || i >= num_outputs()) return error("output {} does not exist", i);
  if (allocated_[static_cast<size_t>(i)]) return outputs_[static_cast<size_t>(i)];
  const TensorType& t = output_types_[static_cast<size_t>(i)];
  if (!shape_is_static(t.shape))
    return make_error(StatusCode::kInternal,
                      fmt::format("output {} has a data-dependent shape {}; the kernel must use "
                                  "allocate_output",
                                  i, shape_to_string(t.shape)));
  return allocate_output(i, t.dtype, t.shape);
}

Result<MutableTensorView> KernelContext::allocate_output(int i, DType dtype, const Shape& shape) {
  if (i < 0 || i >= num_outputs()) return error("output {} does not exist", i);
  if (allocated_[static_cast<size_t>(i)])
    return make_error(StatusCode::kInternal, fmt::format("output {} allocated twice", i));
  TD_ASSIGN_OR_RETURN(MutableTensorView v, allocate_(i, dtype, shape));
  outputs_[static_cast<size_t>(i)] = v;
  allocated_[static_cast<size_t>(i)] = true;
  return v;
}

const KernelRegistry& KernelRegistry::global() {
  static const KernelRegistry* registry = [] {
    auto* r = new KernelRegistry();
    // Fast kernels register first (when a family has them); reference kernels last.
    register_onednn_kernels(*r);
    register_onednn_rnn_kernels(*r);
    register_fast_norm_kernels(*r);
    register_fast_select_kernels(*r);
    register_fast_binary_kernels(*r);
    register_fast_cast_kernels(*r);
    register_fast_dgemm_kernels(*r);
    register_fast_einsum_kernels(*r);
    register_reference_elementwise_kernels(*r);
    register_reference_nn_kernels(*r);
    register_reference_shape_kernels(*r);
    register_reference_reduction_kernels(*r);
    register_reference_rnn_kernels(*r);
    register_reference_image_kernels(*r);
    register_reference_quant_kernels(*r);
    register_reference_math_kernels(*r);
    register_reference_control_kernels(*r);
    register_reference_loss_kernels(*r);
    register_reference_opset18_kernels(*r);
    register_linalg_kernels(*r);  // LAPACKE
    register_training_kernels(*r);
    return r;
  }();
  return *registry;
}

void KernelRegistry::add(KernelDef def) {
  std::string op = def.op;
  kernels_[op].push_back(std::move(def));
}

const std::vector<KernelDef>& KernelRegistry::find(const std::string& op) const {
  static const std::vector<KernelDef> kNone;
  auto it = kernels_.find(op);
  return it == kernels_.end() ? kNone : it->second;
}

std::vector<std::string> KernelRegistry::op_names() const {
  std::vector<std::string> names;
  for (const auto& [k, v] : kernels_) names.push_back(k);
  return names;
}

}  // namespace tensord::cpu
