// The interface a device kind implements to plug into the engine. Everything else —
// placement, staging copies between devices, fallbacks, caching, accounting — is the
// engine's. A backend is one folder under src/backends/ and one line in
// src/backends/registry.cpp.
//
// Threading: the engine calls a Device's compile() from any thread, and write/read/run from
// that device's queue thread; a backend needs no locking of its own beyond that.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tensord/device.h"
#include "tensord/graph.h"
#include "tensord/status.h"

namespace tensord {

class Device;

// Device memory. Owned by the engine (shared_ptr with a deleter that calls Device::free and
// updates the device's byte counters); a backend only reads `ptr`.
struct Buffer {
  Device* device = nullptr;
  void* ptr = nullptr;  // backend-specific: a host pointer (cpu), a cl_mem, a CUdeviceptr ...
  size_t size = 0;
};

// A value on a device as backends see it: immutable once produced.
struct DeviceTensor {
  DType dtype = DType::kUndefined;
  Shape shape;
  std::shared_ptr<Buffer> buffer;
  TensorType type() const { return {dtype, shape}; }
};

// Given by the engine to a running executable: allocations are accounted to the device and
// fail with RESOURCE_EXHAUSTED past its capacity or the session's quota.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Result<std::shared_ptr<Buffer>> allocate(size_t bytes) = 0;
};

struct CompileOptions {
  bool fuse = true;  // allow fusion / fast kernels (false: reference kernels only)
};

// Cooperative scheduling: the engine runs every piece of work under a RunContext, current on
// the device's queue thread while that work runs. Executors call run_checkpoint() between
// steps, and kernels that iterate over a subgraph (Loop, Scan) between iterations. It returns
// CANCELLED or DEADLINE_EXCEEDED when the work's session was closed or its call gave up (the
// executor then stops and fails its remaining outputs with that status; ABORTED when the
// engine preempted the run to redo it later), and it may run other sessions' queued work
// inline before returning (time slicing), so a long graph does not hold the device.
// Call it only between kernels: never from inside a parallel region or with a lock held.
// Outside engine work (compile-time folding, run_graph_on_host) it is a no-op.
class RunContext {
 public:
  virtual ~RunContext() = default;
  virtual Status checkpoint() = 0;
};

namespace detail {
inline thread_local RunContext* current_run_context = nullptr;
}  // namespace detail

inline Status run_checkpoint() {
  RunContext* c = detail::current_run_context;
  return c ? c->checkpoint() : OkStatus();
}

// Makes `context` current on this thread for the scope (restores the previous one after).
class ScopedRunContext {
 public:
  explicit ScopedRunContext(RunContext* context) : prev_(detail::current_run_context) {
    detail::current_run_context = context;
  }
  ~ScopedRunContext() { detail::current_run_context = prev_; }
  ScopedRunContext(const ScopedRunContext&) = delete;
  ScopedRunContext& operator=(const ScopedRunContext&) = delete;

 private:
  RunContext* prev_;
};

// A graph compiled for one device and one set of input types.
class Executable {
 public:
  virtual ~Executable() = default;
  // Output types as inferred at compile time (dims may be -1 for data-dependent shapes), or
  // the error of the node that cannot produce that output.
  virtual const std::vector<Result<TensorType>>& output_types() const = 0;
  // Runs on the device's queue thread. `inputs` are bound to graph.inputs in order and live
  // on this device; an input may be an error (its producer failed), which propagates like a
  // failed node. One result per graph output: a failed node's (or input's) error lands on
  // exactly the outputs that depend on it (naming the node and op); the others are values.
  virtual std::vector<Result<DeviceTensor>> run(const std::vector<Result<DeviceTensor>>& inputs,
                                                Allocator& allocator) = 0;
  // What the compiler made of the graph, one line per step (kernels, fused regions, notes),
  // for logs, profiles and tests. Optional.
  virtual std::string describe() const { return ""; }
};

class Device {
 public:
  virtual ~Device() = default;
  // name is "kind:index"; memory_bytes is the capacity the engine may allocate.
  virtual const DeviceInfo& info() const = 0;

  // Required.
  virtual Result<void*> allocate(size_t bytes) = 0;
  virtual void free(void* ptr, size_t bytes) = 0;
  // Synchronous host→device and device→host copies of `bytes` at `offset` into the buffer.
  virtual Status write(const Buffer& dst, size_t offset, const void* src, size_t bytes) = 0;
  virtual Status read(const Buffer& src, size_t offset, void* dst, size_t bytes) = 0;
  // Compiles `graph` for concrete input types. A node that cannot run (bad shapes, unknown op,
  // unsupported dtype) does not fail the compile: its error lands on the outputs that depend
  // on it. Structural errors (cycles, dangling names, wrong input count) fail the compile.
  virtual Result<std::unique_ptr<Executable>> compile(const Graph& graph,
                                                      const std::vector<TensorType>& input_types,
                                                      const CompileOptions& options) = 0;

  // Optional: direct copy from another device's buffer (same backend: P2P, one context ...).
  // Return false when not possible; the engine then stages through host memory.
  virtual bool copy_from(const Buffer& dst, const Buffer& src) {
    (void)dst;
    (void)src;
    return false;
  }
  // Optional: a host pointer to the buffer's bytes when its memory is host-visible
  // (zero-copy reads and writes); nullptr otherwise.
  virtual void* host_pointer(const Buffer& buffer) {
    (void)buffer;
    return nullptr;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::string version() const = 0;
  // The devices of this kind on this machine (possibly none), index order.
  virtual std::vector<std::unique_ptr<Device>> enumerate() = 0;
};

// Every backend compiled into this build, in preference order (src/backends/registry.cpp).
std::vector<std::unique_ptr<Backend>> create_backends();

}  // namespace tensord
