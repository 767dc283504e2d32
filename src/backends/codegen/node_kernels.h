// The device-neutral parts of the GPU backends' per-node kernels (OpenCL, CUDA): which ops are
// views (and their kernel, which launches nothing), the reductions the generator emits, the
// static broadcast check, Slice's per-dim starts and steps, a reduction's axes, and a
// template call's binding (templates.h) to a KernelCall. A backend keeps only what touches its
// device API: compiling and launching.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backends/codegen/templates.h"

namespace tensord::codegen {

// Reshape, Flatten, Squeeze, Unsqueeze, Identity: the output is the input's buffer under the
// inferred shape (values are immutable, so sharing is safe): no copy, no launch.
bool is_view_op(const std::string& op);
std::unique_ptr<Kernel> make_view_kernel(const Node& node);

// A one-input kernel's call: input 0 given and an output type (INTERNAL naming the node
// otherwise: the executor's invariant, not a client's error).
Status check_unary_call(const Node& node, const KernelCall& call);

// ReduceSum -> "sum", ... (the ReduceKernel ops of printer.h).
const std::map<std::string, std::string>& reduce_ops();
// Which axes a reduction node reduces for an input of `rank` (axes from the attribute or the
// host copy of input 1), or *noop when the node passes its input through
// (noop_with_empty_axes). Bad or repeated axes are INVALID_ARGUMENT naming the node.
Status reduce_axes(const Node& node, const KernelCall& call, int64_t rank, std::vector<bool>* mask, bool* noop);

// Multidirectional broadcast of static shapes (false when they do not fit).
bool broadcast_shape(const std::vector<TensorType>& inputs, Shape* out);

// Slice: per input dim the first element read and the step, normalised as ONNX's Slice says
// (from the host copies of starts, axes and steps; the inferred output shape says how many).
Status slice_params(const Node& node, const KernelCall& call, const Shape& in, std::vector<int64_t>* starts,
                    std::vector<int64_t>* steps);

// A kernel call as plan_template() takes it.
OpCall template_call(const Node& node, const KernelCall& call);
// Allocates the call's outputs for `plan` (call.outputs, one per output type; undefined ones
// left empty).
Status allocate_template_outputs(const OpPlan& plan, KernelCall& call);

}  // namespace tensord::codegen
