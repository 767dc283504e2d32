// ONNX element-wise nodes -> the kernel IR (device-neutral; the OpenCL and CUDA backends
// share it). A group of nodes over one output shape lowers to one kernel: values produced
// inside stay in registers, values from outside are loads with broadcast strides, scalar
// constants are literals and larger constants become parameters the backend uploads.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "backends/codegen/kernel_ir.h"
#include "tensord/graph.h"
#include "tensord/tensor.h"

namespace tensord::codegen {

// OK when `node` with inputs of these dtypes lowers to generated code (shapes are checked at
// lowering); `constant` gives values known at compile time (or nullptr). `halves`: float16
// and bfloat16 tensors too, computed in float32 (kernel_ir.h Storage) — for a printer that
// prints their conversions (CUDA C; the OpenCL C printer has none yet).
// The ops the generator computes element-wise (each also element-wise or broadcast by its
// schema's OpKind, which the generator checks first).
std::vector<std::string> elementwise_ops();

Status elementwise_supported(const Node& node, const std::vector<TensorType>& inputs,
                             const std::function<const HostTensor*(const std::string&)>& constant,
                             bool halves = false);

struct LoweredGroup {
  ElementwiseKernel kernel;
  // Per kernel input: the value it binds, and the constant to upload for it (nullptr: a
  // run-time input).
  std::vector<std::string> params;
  std::vector<const HostTensor*> constants;
  std::string summary;  // "3 ops (1 Add, 1 Mul, 1 Relu)"
};

// Lowers `nodes` (topological order, each with one output of shape `out_shape`) storing
// `outputs` (values of the group, in order). type_of gives every value's type. `halves` as
// for elementwise_supported: each node whose result is float16/bfloat16 rounds it to that
// dtype, so a fused chain computes what the node-by-node reference computes.
Result<LoweredGroup> lower_elementwise(
    const std::vector<const Node*>& nodes, const std::vector<std::string>& outputs,
    const Shape& out_shape, const std::function<const TensorType*(const std::string&)>& type_of,
    const std::function<const HostTensor*(const std::string&)>& constant, bool halves = false);

// Data movement as a kernel that loads through strides and stores contiguously, for any dtype
// of 1, 4 or 8 bytes (moved as bits). Transpose: out dim d reads in dim perm[d]. Expand: `in`
// broadcast to `out`.
Result<ElementwiseKernel> lower_transpose(const Shape& in, const std::vector<int64_t>& perm,
                                          DType dtype);
Result<ElementwiseKernel> lower_expand(const Shape& in, const Shape& out, DType dtype);
// Slice: output dim d reads input dim d from starts[d] in steps of steps[d] (starts already
// normalised and clamped as ONNX says; the output shape decides where it ends).
Result<ElementwiseKernel> lower_slice(const Shape& in, const Shape& out,
                                      const std::vector<int64_t>& starts,
                                      const std::vector<int64_t>& steps, DType dtype);

}  // namespace tensord::codegen
