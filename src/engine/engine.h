// The Engine: owns the devices, the tensors on them (by session), and the compiled
// executables; places work, moves bytes between devices, and runs graphs asynchronously.
//
// Threading: every public method is thread-safe. Each device has one queue thread that runs
// that device's uploads, reads, copies and executables: in submission order within a session,
// round-robin between sessions (sessions share no tensors, so their work is independent); the
// caller gets handles at once and blocks only in read()/wait() (or info() on a data-dependent
// shape).
//
// Fairness: a graph that has run longer than EngineOptions::time_slice while other sessions
// have work queued on its device lets that work run inline on the same thread at its next
// step boundary (or Loop/Scan iteration), then resumes. So another session's small op waits
// at most about one time slice + one step of the running graph + its own run time. A task run
// that way that itself exceeds the slice is stopped and redone later in its own turn (work is
// pure: inputs immutable, outputs set only at the end). A single kernel is not preemptible:
// one huge MatMul holds the device until it returns.
//
// Cancellation: closing a session cancels its queued work (dropped, its outputs CANCELLED)
// and its running work (stopped at the next step boundary or loop iteration). A call can pass
// a CancelToken: waits give up when it fires, and work it submitted is stopped.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "tensord/client.h"

namespace tensord {

class Executable;  // engine/executor.h

using SessionId = uint64_t;

// Host memory for one session's large values on devices that compute on host memory (kind
// "cpu"): a broker places a shared-memory client's values where that client maps them
// read-only, so reading one is a single copy. Only the session's own allocations of at least
// min_bytes() come here (never constants or another session's values); allocate() answers
// nullptr when it has no room, and the device's pool serves instead. Thread-safe.
class SessionMemory {
 public:
  virtual ~SessionMemory() = default;
  virtual size_t min_bytes() const = 0;
  virtual void* allocate(size_t bytes) = 0;  // 64-byte aligned at least
  virtual void release(void* p, size_t bytes) = 0;
};

// Bytes a session holds outside the engine (a broker's shared-memory regions mapped for it):
// counted with its tensors against its memory limit and its tenant's, so what the engine
// allocates for it is refused once tensors and these together would pass a limit. Not part of
// Engine::session_bytes() or tenant_bytes(). Thread-safe (atomics only: callable under any
// lock). The holder takes back what it added before the session closes.
class ExternalBytes {
 public:
  virtual ~ExternalBytes() = default;
  virtual void add(int64_t delta) = 0;  // negative: taken back
  virtual int64_t bytes() const = 0;    // the session's total
};

struct SessionOptions {
  int64_t memory_limit = 0;         // bytes for this session; 0 = unlimited
  std::string tenant;               // who opened it (a broker's token); "" = no tenant
  int64_t tenant_memory_limit = 0;  // bytes for all of the tenant's sessions; 0 = unlimited
};

// A call's request breakdown (tensord bench --breakdown): when the engine started and ended
// its work (steady clock, ns since its epoch; 0 = not yet), and whether it ran on the calling
// thread. Stamped by the engine when the call's token carries one.
struct CallTrace {
  std::atomic<int64_t> started_ns{0}, finished_ns{0};
  std::atomic<bool> on_caller{false};
};

// Why work or a wait should stop: cancelled explicitly, or past a deadline (steady clock).
// Thread-safe; cheap to check (an atomic load, and a clock read while a deadline is set).
class CancelToken {
 public:
  using Clock = std::chrono::steady_clock;
  CancelToken() = default;
  explicit CancelToken(Clock::time_point deadline) { set_deadline(deadline); }
  // Fires the token with `why` (CANCELLED, DEADLINE_EXCEEDED ...); the first reason stays.
  void cancel(Status why);
  // DEADLINE_EXCEEDED from `deadline` on (time_point::max(): none).
  void set_deadline(Clock::time_point deadline);
  void clear_deadline() { set_deadline(Clock::time_point::max()); }
  // For waits: OK, why it was cancelled, or DEADLINE_EXCEEDED once the deadline passed.
  Status check() const;
  // For work: OK, or why it was cancelled (the deadline is not looked at).
  Status cancelled_status() const;
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  // Optional, for waits made with this token (called on the waiting thread, every few ms),
  // and for work while the token is armed: an error stops the wait and fires the token, e.g.
  // "the client went away". Set it before the token is shared; it must stay valid while
  // waits use the token and until disarm() returns.
  std::function<Status()> poll;
  // Optional: the call's timing, filled in by the engine (set before the token is shared).
  std::shared_ptr<CallTrace> trace;

  // Armed: work submitted with the token also stops at its deadline or a failing poll (the
  // call that submitted it has not answered yet, so nobody else can want its results; e.g.
  // the broker running a small graph on the calling thread). disarm() when the call answers:
  // from then on only cancel() stops the work. disarm() waits for a poll in progress.
  void arm() { armed_.store(true, std::memory_order_release); }
  void disarm();
  // For work: OK, or why it must stop (cancelled; armed: also deadline passed, poll failed
  // — then the token fires). Polls at most every 10 ms.
  Status work_status();

 private:
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> armed_{false};
  std::atomic<int64_t> deadline_ns_{INT64_MAX};
  std::atomic<int64_t> next_poll_ns_{0};
  mutable std::mutex mu_;
  std::mutex poll_mu_;  // held while poll runs for work (disarm waits for it)
  Status why_;
};

struct EngineOptions {
  // Device filter: comma list of globs over device names or kinds ("cpu:0,opencl:*", "cuda"),
  // or "none". Empty: all devices. (TENSORD_DEVICES; see from_env.)
  std::string device_filter;
  // Default device for new tensors. Empty: the first device. (TENSORD_DEVICE)
  std::string default_device;
  // Allow direct device-to-device copies (Device::copy_from); false forces host staging.
  bool peer_copy = true;
  // Compiled executables kept (least recently used are dropped first), by count and by their
  // estimated bytes (constants + a per-node cost).
  size_t executable_cache_size = 512;
  int64_t executable_cache_bytes = int64_t{1} << 30;
  // Time slice: how long a graph runs before other sessions' queued work on its device runs
  // inline at its next step boundary (TENSORD_TIME_SLICE_MS). See "Fairness" above.
  std::chrono::microseconds time_slice{20000};
  // Threads running a cpu device's queue (TENSORD_CPU_RUNNERS): up to this many sessions'
  // tasks run at once, each with its share of the CPU thread pool (one thread each when as many
  // are busy as the pool has threads). 0: the pool's size, at most 4. 1: one session at a time,
  // with the whole pool (the other devices' queues always have one thread).
  int cpu_runners = 0;
  // Constants folded at compile time that one executable may keep (TENSORD_MAX_FOLDED_BYTES);
  // past it nodes are computed at run time instead (0: no cap). The folded bytes, weights
  // prepared for a device and device copies of constants are charged to the tenant (or the
  // session, for its own models) as they are created: a compile that would pass a quota is
  // refused then, with RESOURCE_EXHAUSTED naming the node and the limit.
  int64_t max_folded_bytes = int64_t{256} << 20;
  // Compiled forms (one per input types) of one named model that one tenant may keep
  // (TENSORD_NAMED_MODEL_FORMS): its least recently used form goes to make room for a new
  // one, so no tenant can use up another's forms. The tenant that compiled a form pays for
  // it until its last session closes.
  size_t named_model_forms_per_tenant = 16;
  // Compiles one tenant may run at once (0: no limit). Up to 16 times as many wait for a
  // place; more are refused (RESOURCE_EXHAUSTED, naming the limit). Sessions without a
  // tenant are not limited.
  int max_compiles_per_tenant = 2;
  // Every compile as with CompileOptions::strict_device: a node the requested device does not
  // support is an error naming the ops instead of a fallback to cpu:0 (TENSORD_STRICT_DEVICE=1).
  bool strict_device = false;

  // Options from TENSORD_DEVICES / TENSORD_DEVICE / TENSORD_TIME_SLICE_MS / TENSORD_STRICT_DEVICE.
  static EngineOptions from_env();
};

struct EngineMetrics {
  int64_t executes = 0;
  int64_t compiles = 0;         // executable cache misses
  int64_t compiles_waited = 0;  // compiles that waited for a place (max_compiles_per_tenant)
  int64_t cache_hits = 0;
  int64_t uploads = 0;
  int64_t reads = 0;
  int64_t copies_same_device = 0;
  int64_t copies_peer = 0;      // direct device-to-device
  int64_t copies_staged = 0;    // through a host buffer (neither side host-visible)
  int64_t copies_mapped = 0;    // one side host-visible: one read or one write
  // Bytes moved per path: host->device (uploads, copies from host-visible memory),
  // device->host (reads, copies into host-visible memory), peer, staged.
  int64_t bytes_host_to_device = 0;
  int64_t bytes_device_to_host = 0;
  int64_t bytes_peer = 0;
  int64_t bytes_staged = 0;
  // Nodes placed on cpu:0 because the requested device does not support them, in all; and
  // by "device op" (e.g. "cpu:1 Relu"), counted when an executable is compiled.
  int64_t fallback_nodes = 0;
  std::map<std::string, int64_t> fallbacks;
  int64_t implicit_moves = 0;   // inputs moved to the executing device by execute()
  int64_t node_errors = 0;      // graph outputs that ended in an error
  int64_t tasks_cancelled = 0;  // work dropped or stopped (session closed, call gave up)
  int64_t tasks_nested = 0;     // work run inline inside another session's graph (time slice)
  int64_t tasks_preempted = 0;  // inline work stopped for exceeding its slice, redone later
  int64_t busy_us = 0;          // time the device queues spent running work (all devices)
  // Now: sessions open, models loaded (all sessions), compiled executables in the cache and
  // their estimated bytes.
  int64_t sessions_open = 0;
  int64_t models_loaded = 0;
  int64_t executables_cached = 0;
  int64_t executable_cache_bytes = 0;
  // Per device, in Engine::devices() order (the broker's /metrics labels them by name and kind).
  struct Device {
    std::string name, kind;
    int64_t tensors = 0;        // now: tensors of open sessions living on it
    int64_t graphs = 0;         // graphs submitted to it (execute and run calls)
    int64_t ops = 0;            // their nodes
    int64_t queue_depth = 0;    // now: tasks queued, not started
    int64_t tasks = 0;          // tasks started (uploads, reads, copies, graphs)
    int64_t queue_wait_us = 0;  // time those tasks waited in the queue, in all
    int64_t busy_us = 0;        // time its queue spent running work
  };
  std::vector<Device> devices;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const EngineOptions& options);
  // The process-wide engine built from the environment, created on first use.
  static Result<std::shared_ptr<Engine>> shared();
  ~Engine();  // finishes queued work, then frees every tensor

  // Visible devices with their current memory use.
  std::vector<DeviceInfo> devices() const;
  // Threads running `device`'s queue: tasks of that many sessions run at once there (cpu
  // devices: EngineOptions::cpu_runners; other devices 1). 1 for a device it does not hold.
  int queue_runners(const std::string& device) const;
  // Devices present on the machine but removed by the filter, and the filter text.
  const std::vector<std::string>& filtered_out() const { return filtered_out_; }
  // Backends of this build that found no devices, and why ("cuda devices: libcuda.so.1 ...").
  const std::vector<std::string>& unavailable_backends() const { return unavailable_; }
  const std::string& device_filter() const { return options_.device_filter; }
  // The default device's name, or an error naming what is wrong with TENSORD_DEVICE.
  Result<std::string> default_device() const;

  // Sessions own tensor handles. memory_limit 0 = unlimited.
  SessionId open_session(int64_t memory_limit = 0);
  // A session of a tenant: every session of one tenant also charges the tenant's counter
  // (limit `tenant_memory_limit`, 0 = unlimited; the latest open_session sets it), and the
  // tenant pays for the executables compiled for it, which no other tenant can hit. When a
  // tenant's last session closes its cached executables are dropped. An empty tenant is the
  // embedding process itself (shared cache, kept).
  SessionId open_session(const SessionOptions& options);
  // Bytes held for a tenant (its sessions' tensors and models, its cached executables).
  int64_t tenant_bytes(const std::string& tenant) const;
  // Gives back what the devices' caching allocators keep for reuse (freed blocks, idle slabs)
  // and the heap's free pages. For an idle process (a broker with no call for a while): the
  // next allocations of those sizes go to the device again. Returns the bytes given back by
  // the pools.
  int64_t release_cached_memory();
  // Frees every tensor of the session and cancels its work: queued work is dropped and
  // running work stops at its next step boundary, their outputs CANCELLED.
  Status close_session(SessionId session);

  // Where the session's large allocations on host-memory devices go from now on (see
  // SessionMemory); null = the device pools again. Values allocated before stay where they are.
  Status set_session_memory(SessionId session, std::shared_ptr<SessionMemory> memory);

  // Copies host bytes to a new tensor on `device` ("" = default).
  Result<TensorHandle> upload(SessionId session, const TensorView& src, const std::string& device);
  // Waits (read, read_into, wait, info) give up when `call` fires (its deadline passes, its
  // poll fails) or the session is closed, with that status.
  Result<HostTensor> read(SessionId session, TensorHandle h, CancelToken* call = nullptr);
  // Zero-copy upload: a tensor whose bytes ARE `src.data` (no copy), on a device whose memory
  // is host memory (kind "cpu"); other devices, and data not 64-byte aligned, get a copy as
  // with upload(). The bytes are counted against the session and the device like an
  // allocation of their size (RESOURCE_EXHAUSTED past either limit). `keepalive` is held until
  // the tensor and every value sharing its bytes (same-device copies, queued work) are gone;
  // its deleter is how the owner learns that the memory is free again.
  // Contract: the caller must not change or unmap the bytes while the engine holds
  // `keepalive` — kernels read them at any time until then, and tensors are immutable.
  Result<TensorHandle> upload_external(SessionId session, const TensorView& src,
                                       const std::string& device, std::shared_ptr<void> keepalive);
  // Blocks until the tensor is ready, then copies its bytes to `dst` when they fit in `room`
  // (nothing is written otherwise). Returns the value's type: its byte size tells the caller
  // whether it was written. Saves read()'s HostTensor when the bytes have a place to go.
  Result<TensorType> read_into(SessionId session, TensorHandle h, void* dst, size_t room,
                               CancelToken* call = nullptr);
  // Device memory the engine does not own (backend.h ForeignMemory: a CUDA buffer of this
  // process, or of another process on this host by IPC handle): a new tensor of `dtype` and
  // `shape` copied device to device from `src` on the device that reaches it (none:
  // FAILED_PRECONDITION naming why), then moved to `device` when that is another ("" = stay).
  // The copy has finished when it returns: the caller may reuse its memory.
  Result<TensorHandle> upload_foreign(SessionId session, DType dtype, const Shape& shape,
                                      const ForeignMemory& src, const std::string& device);
  // Waits for the tensor, then copies its bytes into `dst` (device to device, by way of the
  // device that reaches `dst` where the value is elsewhere) when they fit in dst.size bytes;
  // returns the value's type either way (as read_into). Finished when it returns.
  Result<TensorType> read_into_foreign(SessionId session, TensorHandle h, const ForeignMemory& dst,
                                       CancelToken* call = nullptr);
  Status wait(SessionId session, TensorHandle h, CancelToken* call = nullptr);
  // Zero-copy host access (DLPack export): waits until the tensor is ready and returns its
  // bytes in place where the device's memory is host memory, with the buffer as keepalive
  // (the bytes stay valid while it is held). FAILED_PRECONDITION on other devices.
  Result<HostMapping> map_host(SessionId session, TensorHandle h, CancelToken* call = nullptr);
  // Zero-copy GPU access (DLPack export of cuda tensors): waits until the tensor is ready and
  // returns its device address on a real cuda device (not the compile-only one), with the
  // buffer as keepalive. FAILED_PRECONDITION on other devices.
  Result<CudaMapping> map_cuda(SessionId session, TensorHandle h, CancelToken* call = nullptr);
  Result<TensorInfo> info(SessionId session, TensorHandle h, CancelToken* call = nullptr);
  // See Client::execute. With `run_here_if_idle`, when the device's queue is idle (nothing
  // queued or running) and the outputs are small (256 KiB in all, sizes known at compile time),
  // the graph runs on the calling thread before execute() returns — for a caller about to wait
  // for the outputs anyway (the broker answering small results inline), it saves two thread
  // hand-offs; otherwise it is queued as usual. Order is kept either way.
  // `call` (optional): the work stops (its outputs fail with the token's status) once the
  // token is cancelled, or while it is armed, at its deadline or a failing poll (see
  // CancelToken::arm and the broker's Execute for why the deadline counts only then).
  Result<std::vector<TensorHandle>> execute(SessionId session, const Graph& graph,
                                            const std::vector<TensorHandle>& inputs,
                                            const std::string& device,
                                            const CompileOptions& options = {},
                                            bool run_here_if_idle = false,
                                            std::shared_ptr<CancelToken> call = nullptr);
  Result<TensorHandle> copy(SessionId session, TensorHandle h, const std::string& device);
  Status release(SessionId session, TensorHandle h);

  // See Client::load / run / unload. A loaded model belongs to its session.
  Result<ModelHandle> load(SessionId session, const Graph& graph, const std::string& device,
                           const CompileOptions& options = {});
  // `device` non-empty: run on that device instead of the model's own (Client::run_on, data
  // parallel), compiled there once per input types; the inputs' and outputs' first dimension
  // may then differ from the declared one (a part of the batch).
  Result<std::vector<TensorHandle>> run(SessionId session, ModelHandle model,
                                        const std::vector<TensorHandle>& inputs,
                                        bool run_here_if_idle = false,
                                        std::shared_ptr<CancelToken> call = nullptr,
                                        const std::string& device = "");
  Status unload(SessionId session, ModelHandle model);

  // Named models (`tensord serve --models DIR`, LocalClientOptions::models_dir): graphs loaded
  // once for the whole engine, not for a session, and shared by every session that opens them.
  // Their initializers are held once, for the engine's lifetime, and charged to no session or
  // tenant. Their compiled forms (one per input types) are kept per tenant: charged to the
  // tenant whose run compiled one (what it holds beyond the shared graph: folded constants,
  // prepared weights, a per-node cost), at most EngineOptions::named_model_forms_per_tenant
  // per model and tenant (least recently used dropped first), dropped when the tenant's last
  // session closes. Sessions without a tenant share one set, charged to nobody. A session's handle (open_named_model) runs
  // like a loaded model's (its outputs belong to the session); unload() drops that handle only.
  // add_named_model: `info` carries the name and what the source declared (opset, producer);
  // device, inputs, outputs and weight_bytes are filled in here. ALREADY_EXISTS for a name
  // taken (unless `replace`), NOT_FOUND for an unknown device.
  // Replacing or removing a named model (model control: `tensord models load|unload`) takes
  // its name away from later opens only: handles sessions opened before keep running the
  // model they opened, which lives until the last of them is unloaded.
  Status add_named_model(const Graph& graph, const std::string& device, ModelInfo info,
                         const CompileOptions& options = {}, bool replace = false);
  // Another name for a named model (a version folder's "NAME" for "NAME:2"): the same model,
  // listed under both names. NOT_FOUND for an unknown target, ALREADY_EXISTS for a name taken
  // (unless `replace`).
  Status add_named_alias(const std::string& alias, const std::string& target,
                         bool replace = false);
  // Removes the named model `model` and its versions ("model:V"); returns the names removed.
  std::vector<std::string> remove_named_models(const std::string& model);
  // The named model a session's handle runs (its name as added, not an alias), or "" for a
  // session's own model or an unknown handle. `serial` (optional): which load of that name the
  // handle runs (each add_named_model takes a higher one; 0 for a session's own model).
  std::string named_model_of(SessionId session, ModelHandle model,
                             uint64_t* serial = nullptr) const;
  // A model that failed to load: listed (named_models) as not ready, with info.reason; opening
  // it is FAILED_PRECONDITION with that reason. A loaded one of that name stays, unless
  // `replace`.
  void add_unavailable_model(ModelInfo info, bool replace = false);
  // NOT_FOUND naming the model and listing those there are.
  Result<ModelHandle> open_named_model(SessionId session, const std::string& name,
                                       ModelInfo* info = nullptr);
  std::vector<ModelInfo> named_models() const;  // sorted by name
  // Marks a source of named models (a folder) as loaded: true the first time, false after
  // (an engine shared by several embedded clients loads each folder once).
  bool claim_models_source(const std::string& key);

  EngineMetrics metrics() const;
  // Bytes held by the session's tensors (as allocated by the engine on its behalf).
  int64_t session_bytes(SessionId session) const;
  // The session's bytes held outside the engine (see ExternalBytes); NOT_FOUND for a session
  // that is not open.
  Result<std::shared_ptr<ExternalBytes>> external_bytes(SessionId session);

  struct Impl;  // defined in engine.cpp

 private:
  struct Launch;
  Result<Launch> prepare(SessionId session, const std::vector<TensorHandle>& inputs,
                         const std::string& device, bool device_fixed, size_t fixed_device,
                         CancelToken* call);
  Result<std::vector<TensorHandle>> submit(SessionId session, Launch launch, size_t num_outputs,
                                           const std::shared_ptr<Executable>& exe,
                                           bool here_if_idle, std::shared_ptr<CancelToken> call);
  explicit Engine(std::unique_ptr<Impl> impl, EngineOptions options,
                  std::vector<std::string> filtered_out);
  std::unique_ptr<Impl> impl_;
  EngineOptions options_;
  std::vector<std::string> filtered_out_;
  std::vector<std::string> unavailable_;
};

// Matches a device name against a TENSORD_DEVICES-style filter (exposed for tests).
bool device_matches_filter(const std::string& device_name, const std::string& kind,
                           const std::string& filter);
// Whether any of a backend's local devices (kind = the backend's name) could pass the filter;
// the engine does not enumerate a backend for which this is false.
bool backend_may_match_filter(const std::string& backend, const std::string& filter);

}  // namespace tensord
