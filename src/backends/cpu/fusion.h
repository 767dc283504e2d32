// The cpu graph compiler's common parts: the view of a graph it works on, the partitioner
// that groups nodes into fused steps without creating cycles, and the interface of a fused
// step. Two compilers use them: oneDNN regions (onednn_region.h, convolutional parts) and
// element-wise programs (elementwise_fusion.h, chains of element-wise ops in one pass).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"
#include "engine/backend.h"

namespace tensord::cpu {

// What a compiler may know about the graph being compiled.
struct FusionGraph {
  // Runnable nodes in topological order (nodes folded to constants are not listed).
  std::vector<const Node*> nodes;
  // The inferred type of a value, or nullptr when unknown or failed.
  std::function<const TensorType*(const std::string&)> type_of;
  // A value known at compile time (initializer or folded constant), or nullptr.
  std::function<const HostTensor*(const std::string&)> constant;
  // Whether a value is a graph output (it must then leave a fused step).
  std::function<bool(const std::string&)> is_graph_output;
};

// A compiled fused step: plain row-major inputs in, plain outputs out.
class FusedKernel {
 public:
  virtual ~FusedKernel() = default;
  // `inputs` / `outputs` follow FusedGroup::inputs / outputs; outputs are allocated by the
  // caller with the inferred types. Scratch memory comes from `allocator`.
  virtual Status run(const std::vector<TensorView>& inputs,
                     const std::vector<MutableTensorView>& outputs, Allocator& allocator) = 0;
  // Scratch bytes per run (a region's arena) and bytes of weights kept by the kernel.
  virtual int64_t arena_bytes() const = 0;
  virtual int64_t weight_bytes() const = 0;
  // What it does, for profiles and describe(): "OneDnnRegion: 27 nodes as ...".
  virtual std::string describe() const = 0;
};

struct FusedGroup {
  std::vector<size_t> members;       // indices into FusionGraph::nodes, topological order
  std::vector<std::string> inputs;   // non-constant values read from outside, first-use order
  std::vector<std::string> outputs;  // values used outside the group or graph outputs
  std::unique_ptr<FusedKernel> kernel;
};

// Greedy partition in topological order. `key(i, group_of)` names the kind of group node i
// may join ("" = none); group_of[j] is the group node j joined so far (-1: none). A node
// joins the open group of its key unless it reads a value that depends on that group through
// a node outside it (the contraction would make a cycle); then a new group of that key opens.
// Returns the groups with their edges (inputs skip constants).
std::vector<FusedGroup> partition_graph(
    const FusionGraph& g, const std::function<std::string(size_t, const std::vector<int>&)>& key);

}  // namespace tensord::cpu
