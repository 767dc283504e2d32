// The cpu backend's kernel interface. A kernel computes one node on host memory.
//
// Kernels are kept in ordered lists per op (oneDNN's implementation lists): the first kernel
// whose `accepts` returns OK for a node wins; the reference kernel, simple and obviously
// correct, is always last and is the oracle the conformance tests compare others with.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/node_attrs.h"
#include "tensord/tensor.h"

namespace tensord::cpu {

struct MutableTensorView {
  DType dtype = DType::kUndefined;
  Shape shape;
  void* data = nullptr;
  int64_t numel() const { return shape_numel(shape); }
  template <typename T>
  T* as() const { return static_cast<T*>(data); }
  TensorView view() const { return {dtype, shape, data}; }
};

// Gives a kernel its inputs, attributes and outputs. Output memory comes from the engine's
// allocator (accounted per device).
class KernelContext : public NodeAttrs {
 public:
  using AllocateFn = std::function<Result<MutableTensorView>(int index, DType, const Shape&)>;

  KernelContext(const Node& node, std::vector<TensorView> inputs,
                std::vector<TensorType> output_types, AllocateFn allocate)
      : NodeAttrs(node), inputs_(std::move(inputs)), output_types_(std::move(output_types)),
        allocate_(std::move(allocate)), outputs_(output_types_.size()),
        allocated_(output_types_.size(), false) {}

  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  // False for an omitted optional input.
  bool has_input(int i) const { return i < num_inputs() && inputs_[i].dtype != DType::kUndefined; }
  const TensorView& input(int i) const { return inputs_.at(i); }
  int num_outputs() const { return static_cast<int>(output_types_.size()); }

  // Output i with the type inference gave it (allocated on first call). For an output whose
  // shape inference left unknown (data-dependent), use allocate_output instead.
  Result<MutableTensorView> output(int i);
  // Allocates output i with an explicit type (data-dependent shapes, e.g. NonZero).
  Result<MutableTensorView> allocate_output(int i, DType dtype, const Shape& shape);
  // Whether the node wants output i (an omitted optional output has an empty name and an
  // undefined type; a kernel must not produce it).
  bool wants_output(int i) const {
    return i < num_outputs() && output_types_[static_cast<size_t>(i)].defined();
  }
  // Type inference gave output i (dims may be -1 for data-dependent shapes).
  const TensorType& output_type(int i) const { return output_types_.at(i); }
  // Whether output i has been allocated (the executor checks every output was produced).
  bool output_allocated(int i) const { return allocated_.at(i); }
  const MutableTensorView& allocated_output(int i) const { return outputs_.at(i); }

  // Runs a subgraph attribute (If/Loop/Scan bodies) with `inputs` bound to its graph inputs;
  // values it reads from enclosing scopes are supplied by the executor. Returns its outputs.
  using SubgraphFn = std::function<Result<std::vector<HostTensor>>(
      const Graph& graph, const std::vector<TensorView>& inputs)>;
  void set_subgraph_runner(SubgraphFn fn) { run_subgraph_ = std::move(fn); }
  Result<std::vector<HostTensor>> run_subgraph(const Graph& graph,
                                               const std::vector<TensorView>& inputs) {
    if (!run_subgraph_) return error("subgraphs cannot run here");
    return run_subgraph_(graph, inputs);
  }

 private:
  std::vector<TensorView> inputs_;
  std::vector<TensorType> output_types_;
  AllocateFn allocate_;
  std::vector<MutableTensorView> outputs_;
  std::vector<bool> allocated_;
  SubgraphFn run_subgraph_;
};

using KernelFn = std::function<Status(KernelContext&)>;
// OK when the kernel handles this node with these input types; otherwise why not.
using AcceptsFn = std::function<Status(const Node&, const std::vector<TensorType>& inputs)>;

struct KernelDef {
  std::string op;
  std::string name;  // "reference", "onednn", ...
  AcceptsFn accepts;  // null: accepts every node of its op
  KernelFn run;
  // When false, float16/bfloat16 inputs are widened to float32 around the kernel, and
  // float16/bfloat16 outputs narrowed back, so a kernel need only implement float32/float64.
  bool native_low_precision = false;
};

class KernelRegistry {
 public:
  // Every cpu kernel, in preference order.
  static const KernelRegistry& global();

  void add(KernelDef def);
  // Kernels for `op` in preference order (empty if none).
  const std::vector<KernelDef>& find(const std::string& op) const;
  std::vector<std::string> op_names() const;

 private:
  std::map<std::string, std::vector<KernelDef>> kernels_;
};

// RNN/GRU/LSTM input 4 (sequence_lens, int32 or int64) checked against [0, seq], or seq for
// every batch entry when absent (kernels/rnn.cpp; shared by the fast LSTM).
Result<std::vector<int64_t>> rnn_sequence_lengths(const KernelContext& ctx, int64_t batch,
                                                  int64_t seq);

// Reference kernel families, one file each under kernels/; listed in kernel_registry.cpp.
// oneDNN kernels (kernels/onednn.cpp); registered first, ahead of the reference kernels.
void register_onednn_kernels(KernelRegistry& r);
// The fast LSTM (kernels/onednn_rnn.cpp): SGEMMs through oneDNN plus vectorised gate math.
void register_onednn_rnn_kernels(KernelRegistry& r);
void register_fast_select_kernels(KernelRegistry& r);  // comparisons, Where, MaxPool+Indices
void register_fast_dgemm_kernels(KernelRegistry& r);   // float64 MatMul/Gemm (cblas_dgemm)
void register_fast_cast_kernels(KernelRegistry& r);    // float32 <-> float16/bfloat16 Cast
void register_fast_binary_kernels(KernelRegistry& r);  // int32/int64/float64 Add, Sub, Mul, ...
void register_fast_einsum_kernels(KernelRegistry& r);  // Einsum as batched SGEMM
void register_fast_norm_kernels(KernelRegistry& r);  // LayerNormalization, Softmax, LogSoftmax
void register_reference_elementwise_kernels(KernelRegistry& r);
void register_reference_nn_kernels(KernelRegistry& r);
void register_reference_shape_kernels(KernelRegistry& r);
void register_reference_reduction_kernels(KernelRegistry& r);
void register_reference_rnn_kernels(KernelRegistry& r);
void register_reference_image_kernels(KernelRegistry& r);
void register_reference_quant_kernels(KernelRegistry& r);
void register_reference_math_kernels(KernelRegistry& r);
void register_reference_control_kernels(KernelRegistry& r);
void register_reference_loss_kernels(KernelRegistry& r);
void register_reference_opset18_kernels(KernelRegistry& r);  // Gelu, GroupNormalization, Col2Im ...

}  // namespace tensord::cpu
