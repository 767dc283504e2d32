// The GPU layer shared by the OpenCL and CUDA backends, written once against the runtime of
// gpu_runtime.h: the generated per-node kernels (element-wise, data movement, reductions, the
// templates of templates.h), the fused element-wise region, the region compiler, and the
// ordered kernel list that answers both `supports` and `create` (as the cpu backend's
// kernel.h: the first entry that claims a node decides), so the two can never disagree.
//
// A backend puts its library kernels (CLBlast, cuBLAS, cuDNN, ...) ahead of the shared
// entries (shared_gpu_kernels) in its list, and its library regions in
// GpuDevice::backend_regions.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backends/codegen/gpu_runtime.h"
#include "backends/codegen/lower.h"

namespace tensord::codegen {

// One entry of a GPU backend's kernel list.
struct GpuKernelEntry {
  std::string name;  // what the list calls it ("clblast", "template", ...)
  // nullopt: not this entry's node (the next entry is asked); OK: this entry runs it;
  // an error: the node does not run on the device, and why (no later entry is asked).
  std::function<std::optional<Status>(const Node&, const std::vector<TensorType>&)> claims;
  // The kernel for a node this entry claimed with OK.
  std::function<std::unique_ptr<Kernel>(const Node&, const std::vector<TensorType>&)> create;
};

// The entries every GPU device shares, in order: template ops, views, reductions, data
// movement, and last the element-wise catch-all (which claims every node).
std::vector<GpuKernelEntry> shared_gpu_kernels(GpuDevice* device);

// A KernelTable over an ordered list: `supports` is the status of the first entry that claims
// the node, `create` that entry's kernel.
class GpuKernelTable final : public KernelTable {
 public:
  // `backend` first, then shared_gpu_kernels(device).
  GpuKernelTable(GpuDevice* device, std::vector<GpuKernelEntry> backend);
  Status supports(const Node& node, const std::vector<TensorType>& inputs,
                  const CompileOptions& options) const override;
  Result<std::unique_ptr<Kernel>> create(const Node& node, const std::vector<TensorType>& inputs,
                                         const std::vector<TensorType>& outputs,
                                         const CompileOptions& options) const override;

 private:
  const GpuKernelEntry* find(const Node& node, const std::vector<TensorType>& inputs,
                             Status* status) const;
  GpuDevice* device_;
  std::vector<GpuKernelEntry> entries_;
};

// Regions a backend forms before the shared element-wise fusion (library calls with
// epilogues, fused convolutions), marking their members in `taken`; what it left alone and why
// goes to `notes` (may be null).
using BackendRegions = std::function<std::vector<Region>(
    const FusionGraph& g, std::vector<bool>* taken, std::vector<std::string>* notes)>;

// The backend's regions (optional), then chains of element-wise nodes of one static shape as
// one generated kernel each (TENSORD_NO_ELEMENTWISE_FUSION: none).
class GpuRegionCompiler final : public RegionCompiler {
 public:
  explicit GpuRegionCompiler(GpuDevice* device, BackendRegions first = nullptr)
      : device_(device), first_(std::move(first)) {}
  std::vector<Region> compile(const FusionGraph& g, std::vector<std::string>* notes) override;

 private:
  GpuDevice* device_;
  BackendRegions first_;
};

// A lowered, compiled element-wise kernel and how its parameters bind.
struct CompiledGroup {
  LoweredGroup lowered;
  std::shared_ptr<GpuProgram> program;
};
// `nodes` (element-wise, one output shape) lowered, printed in the device's dialect and built.
Result<CompiledGroup> compile_group(
    GpuDevice& device, const std::vector<const Node*>& nodes,
    const std::vector<std::string>& outputs, const Shape& shape,
    const std::function<const TensorType*(const std::string&)>& type_of,
    const std::function<const HostTensor*(const std::string&)>& constant);

// A node the templates generate (templates.h), specialised to each call's shapes (what a
// backend's library kernel falls back to).
std::unique_ptr<Kernel> make_template_kernel(GpuDevice* device, const Node& node);

// The source of an element-wise kernel in the device's dialect.
Result<std::string> print_for(const GpuDevice& device, const ElementwiseKernel& k);

}  // namespace tensord::codegen
