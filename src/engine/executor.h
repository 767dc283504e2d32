// The executor and the graph compiler's device-independent passes: a Graph compiled for a
// device (and its fallback) into steps — constant folding through the host's reference
// kernels, placement by the devices' supports() with fallback to cpu:0 and copies at the
// cuts, the devices' region compilers, last-use freeing — and run with values on devices,
// poison propagation, run-time shape inference, subgraphs (If/Loop/Scan bodies) and
// profiling (TENSORD_PROFILE=1).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace tensord {

// Where a graph is compiled for.
struct CompileTarget {
  Device* device = nullptr;    // the requested device
  Device* fallback = nullptr;  // where nodes `device` does not support run (cpu:0); null: none
  Device* host = nullptr;      // evaluates constants at compile time (a cpu device)
  // Memory for constants on devices that cannot adopt host memory (accounted by the engine).
  // Null: the device's raw allocations.
  std::function<Result<std::shared_ptr<Buffer>>(Device&, size_t)> allocate_constant;
};

// What a run needs from whoever runs it (the engine, or run_graph_on_host).
class RunServices {
 public:
  virtual ~RunServices() = default;
  // Memory on `device` for the run's session.
  virtual Allocator& allocator(Device& device) = 0;
  // `value` moved to `dst` by the cheapest path the two devices offer (same device: as is).
  virtual Result<DeviceTensor> transfer(const DeviceTensor& value, Device& dst) = 0;
};

// A node placed on the fallback device because the requested one does not support it.
struct Fallback {
  std::string op;
  std::string node;
  std::string why;  // the requested device's supports() status
};

class Executable {
 public:
  static Result<std::unique_ptr<Executable>> compile(const Graph& graph,
                                                     const std::vector<TensorType>& input_types,
                                                     const CompileTarget& target,
                                                     const CompileOptions& options);
  ~Executable();

  // Output types as inferred at compile time (dims may be -1 for data-dependent shapes), or
  // the error of the node that cannot produce that output.
  const std::vector<Result<TensorType>>& output_types() const;
  // Runs on the calling thread. `inputs` are bound to graph.inputs in order; an input may be
  // an error (its producer failed), which propagates like a failed node. One result per graph
  // output, on the target device: a failed node's (or input's) error lands on exactly the
  // outputs that depend on it (naming the node and op); the others are values.
  std::vector<Result<DeviceTensor>> run(const std::vector<Result<DeviceTensor>>& inputs,
                                        RunServices& services);
  // One line per step: "Op 'name' [device kernel]", fused regions, copies at cuts, fallbacks,
  // and notes from the region compilers.
  std::string describe() const;
  const std::vector<Fallback>& fallbacks() const;
  const std::string& fallback_device() const;

  struct Impl;

 private:
  explicit Executable(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Outside any engine (tests, tools): compiles and runs `graph` on a private cpu device.
// Each output is a value or the error of the node it depends on.
Result<std::vector<Result<HostTensor>>> run_graph_on_host(const Graph& graph,
                                                          const std::vector<HostTensor>& inputs,
                                                          const CompileOptions& options = {});
// What the compiler makes of `graph` for a private cpu device (Executable::describe).
Result<std::string> describe_compiled(const Graph& graph, const std::vector<TensorType>& types,
                                      const CompileOptions& options = {});

}  // namespace tensord
