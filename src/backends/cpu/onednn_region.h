// The cpu backend's graph compiler for convolutional networks: oneDNN regions.
//
// A region is a connected part of a graph made of ops oneDNN runs well on 4-D float32
// tensors (Conv, pooling, element-wise activations, binary element-wise, Concat, and
// BatchNormalization after a Conv), containing at least one Conv. It is compiled once into
// a sequence of oneDNN primitives:
//   - BatchNormalization after a Conv is folded into the Conv's weights and bias;
//   - activations (Relu, Clip/Relu6, LeakyRelu, Sigmoid, Tanh, Elu, HardSwish, HardSigmoid,
//     Softplus ...) and a residual Add after a Conv become its post-ops (the residual is
//     accumulated in place when it is not needed afterwards);
//   - layouts are chosen by oneDNN ("any": blocked formats such as nChw16c) and kept between
//     primitives; reorders happen only at the region's edges (its inputs and outputs stay in
//     the executor's plain row-major layout) or where two primitives disagree;
//   - weights are reordered once, at compile time, into the layout their primitive wants;
//   - intermediate tensors live in one arena with a static memory plan (offsets reused by
//     lifetime), allocated through the engine's allocator for each run.
// To the executor a region is one step with plain inputs and outputs, so everything else
// (poisoning, accounting, the reference kernels) is unchanged.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"
#include "engine/backend.h"

namespace tensord::cpu {

// What the partitioner may know about the graph being compiled.
struct RegionGraph {
  // Runnable nodes in topological order (nodes folded to constants are not listed).
  std::vector<const Node*> nodes;
  // The inferred type of a value, or nullptr when unknown or failed.
  std::function<const TensorType*(const std::string&)> type_of;
  // A value known at compile time (initializer or folded constant), or nullptr.
  std::function<const HostTensor*(const std::string&)> constant;
  // Whether a value is a graph output (it must then leave the region in plain layout).
  std::function<bool(const std::string&)> is_graph_output;
};

// A compiled region: plain inputs in, plain outputs out.
class RegionKernel {
 public:
  virtual ~RegionKernel() = default;
  // `inputs` / `outputs` follow Region::inputs / Region::outputs; outputs are allocated by
  // the caller with the inferred types. Scratch memory comes from `allocator`.
  virtual Status run(const std::vector<TensorView>& inputs,
                     const std::vector<MutableTensorView>& outputs, Allocator& allocator) = 0;
  // Bytes of the intermediate arena (the static memory plan's peak) and of reordered weights.
  virtual int64_t arena_bytes() const = 0;
  virtual int64_t weight_bytes() const = 0;
  // "27 ops (17 Conv, 10 fused post-ops), 3 reorders" — for profiles and logs.
  virtual std::string describe() const = 0;
};

struct Region {
  std::vector<size_t> members;       // indices into RegionGraph::nodes, topological order
  std::vector<std::string> inputs;   // non-constant values read from outside, in first-use order
  std::vector<std::string> outputs;  // values used outside the region or graph outputs
  std::unique_ptr<RegionKernel> kernel;
};

// Finds the regions of `g` and compiles each. A region oneDNN cannot compile is dropped (its
// nodes keep their per-node kernels); the reason goes to `notes` when given.
std::vector<Region> build_onednn_regions(const RegionGraph& g,
                                         std::vector<std::string>* notes = nullptr);

}  // namespace tensord::cpu
