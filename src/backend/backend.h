// The interface a device kind implements to plug into the engine (a backend), and the engine's
// side of it. A backend supplies only what differs per device kind: devices, memory (allocate,
// free, host<->device copies; optionally peer copies and host mapping, as capabilities), a
// kernel table with supports(), and optionally a region compiler for fused subgraphs.
// Everything else — the executor (values, poison, freeing, run-time shapes, subgraphs,
// profiling), the graph compiler's passes (constant folding, placement with fallback,
// partitioning), copies between devices, the caching allocator, sessions, quotas — is the
// engine's (src/engine/). A backend is one folder under src/backends/ and one line in
// src/backends/registry.cpp; backends and the engine include this header, never each other.
//
// Threading: the engine may call a Device's methods from any of its threads (a graph placed
// on two devices runs both devices' kernels on the executing device's queue thread; copies
// run where they are needed), so a backend makes them thread-safe. A Kernel object is run by
// one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensord/device.h"
#include "tensord/graph.h"
#include "tensord/status.h"

namespace tensord {

class Device;

// Device memory: `size` bytes at `offset` into the backend's allocation `ptr` (the engine's
// caching allocator sub-allocates small buffers out of larger device allocations). Owned by
// the engine (shared_ptr whose deleter returns it to the pool); a backend reads the fields.
struct Buffer {
  Device* device = nullptr;
  void* ptr = nullptr;  // backend-specific: a host pointer (cpu), a cl_mem, a CUdeviceptr ...
  size_t size = 0;
  size_t offset = 0;    // where the bytes start inside `ptr`'s allocation
};

// A value on a device as backends see it: immutable once produced.
struct DeviceTensor {
  DType dtype = DType::kUndefined;
  Shape shape;
  std::shared_ptr<Buffer> buffer;
  TensorType type() const { return {dtype, shape}; }
  bool defined() const { return dtype != DType::kUndefined; }
};

// Device memory the engine does not own (CUDA: a buffer of this process by its address, or of
// another process on this host by its IPC memory handle), which a device copies to or from
// without a trip through host memory (Device::copy_foreign; Engine::upload_foreign).
struct ForeignMemory {
  std::string kind;         // the device kind that can reach it: "cuda"
  std::string ipc_handle;   // another process's memory: its IPC handle (CUDA: 64 bytes)
  uint64_t pointer = 0;     // this process's memory (ipc_handle empty): the device address
  uint64_t offset = 0;      // bytes from the handle's allocation (or from `pointer`)
  uint64_t size = 0;        // bytes usable from there
  std::string device_uuid;  // the GPU holding it ("GPU-…"; "" = not said)
};

// Given by the engine to kernels: memory on the kernel's device, accounted to the device and
// the session, failing with RESOURCE_EXHAUSTED past the device's capacity or a quota.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Result<std::shared_ptr<Buffer>> allocate(size_t bytes) = 0;
};

struct CompileOptions {
  bool fuse = true;  // allow fusion / fast kernels (false: reference kernels only)
  // A node the requested device does not support is an error naming the ops, instead of
  // running on cpu:0 with copies at the cuts (ONNX Runtime's "disable CPU fallback").
  bool strict_device = false;
};

// Cooperative scheduling: the engine runs every piece of work under a RunContext, current on
// the device's queue thread while that work runs. The executor calls run_checkpoint() between
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

// Runs a subgraph attribute (If/Loop/Scan bodies) on the kernel's device: `inputs` bound to
// the subgraph's inputs in order; values it reads from enclosing scopes are supplied by the
// engine. Compiled once per input types.
class SubgraphRunner {
 public:
  virtual ~SubgraphRunner() = default;
  virtual Result<std::vector<DeviceTensor>> run(const Graph& graph,
                                                const std::vector<DeviceTensor>& inputs) = 0;
};

// One call of a kernel: a node's inputs on the kernel's device, and room for its outputs.
struct KernelCall {
  const Node* node = nullptr;
  // Bound to node->inputs; an omitted optional input is an undefined DeviceTensor.
  std::vector<DeviceTensor> inputs;
  // The host copies of the inputs the kernel asked for (Kernel::host_inputs), else empty.
  std::vector<HostTensor> host_values;
  // Types of node->outputs as inferred (at run time when data-dependent: dims are then -1
  // where only the values tell; the kernel allocates those itself). Omitted optional outputs
  // have an undefined type and must not be produced.
  std::vector<TensorType> output_types;
  // Outputs and scratch memory, on this device.
  Allocator* allocator = nullptr;
  SubgraphRunner* subgraphs = nullptr;
  // Set by the kernel, one per output (left undefined for omitted ones).
  std::vector<DeviceTensor> outputs;
};

// A node compiled for a device. Errors name the node (the engine adds "Op 'name': " when the
// message does not start with the op already).
class Kernel {
 public:
  virtual ~Kernel() = default;
  // "reference", "onednn", "generated" ... for describe() and profiles.
  virtual std::string name() const = 0;
  // Inputs the kernel needs in host memory (shape-valued inputs); the engine provides them
  // in KernelCall::host_values.
  virtual std::vector<int> host_inputs() const { return {}; }
  virtual Status run(KernelCall& call) = 0;
};

// A device kind's kernels. supports() is how placement decides where a node runs.
class KernelTable {
 public:
  virtual ~KernelTable() = default;
  // OK when this device can run `node` with these input types (an omitted optional input has
  // an undefined type); otherwise why not (UNIMPLEMENTED for a missing op or form).
  virtual Status supports(const Node& node, const std::vector<TensorType>& inputs,
                          const CompileOptions& options) const = 0;
  // The kernel for the node (only called when supports() said OK).
  virtual Result<std::unique_ptr<Kernel>> create(const Node& node,
                                                 const std::vector<TensorType>& inputs,
                                                 const std::vector<TensorType>& outputs,
                                                 const CompileOptions& options) const = 0;
};

// One step of a contraction's epilogue: element-wise work on its result, in its shape and
// type, that a library or a generated kernel can apply as the result is written (oneDNN
// post-ops, cuBLASLt epilogues, cuDNN's bias+activation, the OpenCL conv region's epilogue).
// FusionGraph::epilogue_of tags the chain once for every backend; each takes the longest
// prefix it accepts and leaves the rest to run on its own.
struct EpilogueStep {
  enum class Kind {
    kActivation,  // a one-input element-wise op on the chain's value (Relu, Clip, Gelu, ...)
    kSwish,       // Mul(x, Sigmoid(x)): two nodes, the Sigmoid read by the Mul alone
    kBinary,      // a broadcasting op (Add, Sub, Mul, Div, ...) with one other operand
  };
  // The shape of a binary step's other operand against the contraction's result.
  enum class Operand {
    kNone,
    kScalar,     // one value
    kChannel,    // one value per output channel (axis 1 of a convolution, the last axis of a
                 // product), broadcast over the rest: a bias or a per-channel scale
    kSameShape,  // the result's shape: a residual
    kOther,      // another broadcast (a mask)
  };
  Kind kind = Kind::kActivation;
  std::vector<size_t> nodes;  // indices into FusionGraph::nodes (kSwish: Sigmoid, then Mul)
  const Node* node = nullptr;  // the step's last node (kSwish: the Mul)
  std::string input, output;  // the chain's value before and after the step
  // kBinary: the other input, whether it is the node's first input (c - x rather than x - c),
  // its form and whether it is known at compile time.
  std::string operand;
  bool operand_first = false;
  Operand form = Operand::kNone;
  bool operand_constant = false;
};

// What a region compiler may know about the graph being compiled.
struct FusionGraph {
  // Runnable nodes in topological order (nodes folded to constants are not listed).
  std::vector<const Node*> nodes;
  // Whether node i is placed on the compiling device (a region takes only such nodes).
  std::vector<bool> placed_here;
  // The inferred type of a value, or nullptr when unknown or failed.
  std::function<const TensorType*(const std::string&)> type_of;
  // A value known at compile time (initializer or folded constant), or nullptr.
  std::function<const HostTensor*(const std::string&)> constant;
  // Whether a value is a graph output (it must then leave a fused step).
  std::function<bool(const std::string&)> is_graph_output;

  // The use/def index every region compiler reads (one place, so that none misses a read):
  // the nodes reading a value, one entry per read, reads inside a node's subgraphs (If, Loop
  // and Scan bodies reading the outer scope) included; and the node making it. Built from
  // `nodes` on first use (index_uses() builds it again after `nodes` changed).
  // (src/backend/partition.cpp)
  const std::vector<size_t>& readers_of(const std::string& value) const;
  // The node making `value`, or -1 (a graph input, an initializer or a folded constant).
  int64_t producer_of(const std::string& value) const;
  // The node that reads `value` once when nothing else reads it and it is no graph output.
  std::optional<size_t> sole_reader(const std::string& value) const;
  void index_uses() const;
  // The epilogue of contraction node `i` (op kind kContraction: Conv, ConvTranspose, MatMul,
  // Gemm, ...), in graph order: each step the sole reader of the value before it (a read
  // inside a subgraph counts; a graph output ends the chain), in the standard domain, placed
  // like the contraction, with one output of the contraction result's type and shape. Empty
  // for a node that is no contraction. At most 8 steps.
  std::vector<EpilogueStep> epilogue_of(size_t i) const;

 private:
  mutable bool indexed_ = false;
  mutable std::unordered_map<std::string, std::vector<size_t>> readers_;
  mutable std::unordered_map<std::string, size_t> producer_;
};

// A compiled fused step: inputs on the device, outputs allocated by the engine with the
// inferred types (static shapes) before the call.
class RegionKernel {
 public:
  virtual ~RegionKernel() = default;
  virtual Status run(const std::vector<DeviceTensor>& inputs,
                     const std::vector<DeviceTensor>& outputs, Allocator& allocator) = 0;
  // Scratch bytes per run (an arena) and bytes of weights kept by the kernel.
  virtual int64_t arena_bytes() const = 0;
  virtual int64_t weight_bytes() const = 0;
  // What it does, for profiles and describe(): "OneDnnRegion: 27 nodes as ...".
  virtual std::string describe() const = 0;
  // The library primitives it runs in a library's reference (slow, portable) implementation,
  // one line each ("eltwise (ref:any)"): the profile counts such a step as reference time.
  virtual std::vector<std::string> reference_impls() const { return {}; }
};

struct Region {
  std::vector<size_t> members;       // indices into FusionGraph::nodes, topological order
  std::vector<std::string> inputs;   // non-constant values read from outside, first-use order
  std::vector<std::string> outputs;  // values used outside the group or graph outputs
  std::unique_ptr<RegionKernel> kernel;
};

// Optional: fuses parts of a graph into single steps (the cpu backend's oneDNN regions and
// element-wise programs; the GPU backends' generated kernels).
class RegionCompiler {
 public:
  virtual ~RegionCompiler() = default;
  // Regions over nodes placed on this device, disjoint, each acyclic when contracted
  // (partition_graph helps). What it left alone and why goes to `notes`.
  virtual std::vector<Region> compile(const FusionGraph& graph,
                                      std::vector<std::string>* notes) = 0;
};

// Records the launches of one run on a device and replays them (CUDA graphs). The executor
// (src/engine/executor.cpp) calls begin(), runs every step, then end(): nothing the steps
// queued in between has run yet — replay() runs it, and runs it again on each later call over
// the same buffers.
class RunRecorder {
 public:
  virtual ~RunRecorder() = default;
  virtual Status begin() = 0;
  // An error when the recording cannot be replayed (a step did what a capture cannot hold):
  // the executor then runs plainly.
  virtual Status end() = 0;
  virtual Status replay() = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  // name is "kind:index"; memory_bytes is the capacity the engine may allocate.
  virtual const DeviceInfo& info() const = 0;

  // Required. Raw device allocations (the engine pools and sub-allocates them).
  virtual Result<void*> allocate(size_t bytes) = 0;
  virtual void free(void* ptr, size_t bytes) = 0;
  // Synchronous host->device and device->host copies of `bytes` at `offset` into the buffer
  // (relative to the buffer's own offset).
  virtual Status write(const Buffer& dst, size_t offset, const void* src, size_t bytes) = 0;
  virtual Status read(const Buffer& src, size_t offset, void* dst, size_t bytes) = 0;
  virtual const KernelTable& kernels() const = 0;

  // Optional: the region compiler (nullptr: per-node kernels only).
  virtual RegionCompiler* region_compiler() { return nullptr; }
  // Optional (peer copy): a direct copy from another device's buffer (same backend: P2P, one
  // context ...). Return false when not possible; the engine then stages through host memory.
  virtual bool copy_from(const Buffer& dst, const Buffer& src) {
    (void)dst;
    (void)src;
    return false;
  }
  // Optional (host mapping): a host pointer to the buffer's bytes when its memory is
  // host-visible (zero-copy reads and writes); nullptr otherwise.
  virtual void* host_pointer(const Buffer& buffer) {
    (void)buffer;
    return nullptr;
  }
  // Optional (host adoption): whether kernels of this device can compute on host memory
  // the engine wraps as a Buffer{ptr = host address} (zero-copy uploads, constants).
  virtual bool adopts_host_memory() const { return false; }
  // Optional (whole-run replay): a recorder for an executable whose every step runs here with
  // static shapes and reads no value on the host (nullptr: each run launches step by step).
  virtual std::unique_ptr<RunRecorder> run_recorder() { return nullptr; }
  // Optional: work for this device is about to start (a broker's request arrived, a run was
  // submitted). A cpu device wakes its sleeping pool threads now, so that they are up when
  // the first kernel needs them instead of the caller running it alone while they wake.
  virtual void expect_work() {}
  // Optional (asynchronous devices): returns when every kernel and copy queued so far has
  // finished, with the first error any of them hit. The executor calls it at the end of a run,
  // so a value is ready (Client::wait, a benchmark's clock) only once the device is done.
  virtual Status synchronize() { return OkStatus(); }
  // Optional (foreign device memory): copies `bytes` from `foreign` into `buffer` at `offset`
  // (to_buffer) or from there into `foreign`, finished when it returns. With bytes 0 it only
  // says whether it could. FAILED_PRECONDITION naming why where this device cannot reach the
  // memory (another kind, another GPU, no IPC on this device or platform).
  virtual Status copy_foreign(const Buffer& buffer, size_t offset, const ForeignMemory& foreign,
                              size_t bytes, bool to_buffer) {
    (void)buffer, (void)offset, (void)bytes, (void)to_buffer;
    return Status(StatusCode::kFailedPrecondition,
                  info().name + " cannot reach " + (foreign.kind.empty() ? "foreign" : foreign.kind) +
                      " device memory");
  }
};

// Foreign memory of this process for another process on this host: the IPC handle of the
// device buffer at `ptr` (`bytes` long), its allocation offset and GPU (CUDA: cuIpcGetMemHandle;
// src/backends/registry.cpp). FAILED_PRECONDITION naming why where it cannot be (no CUDA in this
// build or process, not device memory, memory that cannot be exported).
// With `ipc` false: the same description without a handle, for this process (pointer = the
// allocation's base).
Result<ForeignMemory> export_device_memory(const void* ptr, size_t bytes, bool ipc = true);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::string version() const = 0;
  // The devices of this kind on this machine (possibly none), index order.
  virtual std::vector<std::unique_ptr<Device>> enumerate() = 0;
  // Checks this backend's settings (its environment variables) before enumerate(): an
  // INVALID_ARGUMENT naming the variable and its value refuses to create the engine, rather
  // than a bad value being ignored.
  virtual Status check_settings() const { return OkStatus(); }
  // After enumerate() found no devices: why, in one line ("libcuda.so.1 not found ..."), for
  // `tensord devices` to print on stderr; empty when there is nothing to say.
  virtual std::string unavailable_reason() const { return ""; }
};

// Every backend compiled into this build, in preference order (src/backends/registry.cpp),
// then those added at run time by add_backend_factory.
std::vector<std::unique_ptr<Backend>> create_backends();
// Adds a backend made at run time to every engine created afterwards (the cluster's proxy
// devices for other MPI ranks, src/cluster/). Call before the engine is created.
void add_backend_factory(std::function<std::unique_ptr<Backend>()> factory);
// In a cluster this process's own devices also answer to "<prefix>NAME" ("n0/cpu:0"); set once
// by the cluster layer before engines exist. "" (the default): no such alias.
void set_local_node_prefix(const std::string& prefix);
const std::string& local_node_prefix();

// Greedy partition in topological order, for region compilers. `key(i, group_of)` names the
// kind of group node i may join ("" = none); group_of[j] is the group node j joined so far
// (-1: none). A node joins the open group of its key unless it reads a value that depends on
// that group through a node outside it (the contraction would make a cycle); then a new
// group of that key opens. Returns the groups with their edges (inputs skip constants);
// kernels are left null. (src/backend/partition.cpp)
std::vector<Region> partition_graph(
    const FusionGraph& g, const std::function<std::string(size_t, const std::vector<int>&)>& key);

// The groups (disjoint member lists over g.nodes) to give back to their nodes so that
// contracting the others leaves the graph acyclic, in increasing order. Each partitioner keeps
// its own groups acyclic, but the groups of two (the cpu backend has three; or two devices'
// regions) can still close a cycle through each other: the executor checks them all at once.
// Of the groups stuck in the dependency order, the last one is given back, until none is.
std::vector<size_t> groups_closing_cycles(const FusionGraph& g,
                                          const std::vector<std::vector<size_t>>& groups);

}  // namespace tensord
