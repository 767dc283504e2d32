// The cpu backend's region compilers' common parts: the engine's FusionGraph / Region /
// partition_graph (src/backend/backend.h), and FusedKernel, a RegionKernel that computes on
// host memory. Two compilers use them: oneDNN regions (onednn_region.h, convolutional parts)
// and element-wise programs (elementwise_fusion.h, chains of element-wise ops in one pass).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backends/cpu/kernel.h"

namespace tensord::cpu {

using tensord::FusionGraph;
using tensord::partition_graph;
using FusedGroup = tensord::Region;

// The host address of a cpu buffer's bytes.
inline void* host_address(const Buffer& b) { return static_cast<char*>(b.ptr) + b.offset; }

// A compiled fused step on host memory: plain row-major inputs in, plain outputs out.
class FusedKernel : public RegionKernel {
 public:
  // `inputs` / `outputs` follow Region::inputs / outputs; outputs are allocated by the
  // caller with the inferred types. Scratch memory comes from `allocator`.
  virtual Status run_host(const std::vector<TensorView>& inputs,
                          const std::vector<MutableTensorView>& outputs, Allocator& allocator) = 0;

  Status run(const std::vector<DeviceTensor>& inputs, const std::vector<DeviceTensor>& outputs,
             Allocator& allocator) final {
    std::vector<TensorView> in(inputs.size());
    for (size_t k = 0; k < inputs.size(); ++k)
      in[k] = TensorView{inputs[k].dtype, inputs[k].shape, host_address(*inputs[k].buffer)};
    std::vector<MutableTensorView> out(outputs.size());
    for (size_t k = 0; k < outputs.size(); ++k)
      out[k] = MutableTensorView{outputs[k].dtype, outputs[k].shape,
                                 host_address(*outputs[k].buffer)};
    return run_host(in, out, allocator);
  }
};

}  // namespace tensord::cpu
