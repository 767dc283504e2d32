// The cpu backend: always present. Host memory, reference kernels (the oracle) and, later,
// fast kernels ahead of them in each op's kernel list.
#pragma once

#include <memory>
#include <vector>

#include "engine/backend.h"
#include "tensord/tensor.h"

namespace tensord::cpu {

// Devices: cpu:0 .. cpu:N-1 with N from TENSORD_CPU_DEVICES (default 1). More than one host
// device is useful to exercise placement and copies on machines without accelerators (as
// XLA's --xla_force_host_platform_device_count).
std::unique_ptr<Backend> create_cpu_backend();

// Compiles and runs `graph` on a private cpu device, outside any engine (tests, tools).
// Each output is a value or the error of the node it depends on.
Result<std::vector<Result<HostTensor>>> run_graph_on_host(const Graph& graph,
                                                          const std::vector<HostTensor>& inputs,
                                                          const CompileOptions& options = {});

// What the cpu compiler makes of `graph` (Executable::describe): one line per step.
Result<std::string> describe_compiled(const Graph& graph, const std::vector<TensorType>& types,
                                      const CompileOptions& options = {});

}  // namespace tensord::cpu
