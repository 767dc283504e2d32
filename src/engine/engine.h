// The Engine: owns the devices, the tensors on them (by session), and the compiled
// executables; places work, moves bytes between devices, and runs graphs asynchronously.
//
// Threading: every public method is thread-safe. Each device has one queue thread that runs
// that device's uploads, reads, copies and executables in submission order; the caller gets
// handles at once and blocks only in read()/wait() (or info() on a data-dependent shape).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "tensord/client.h"

namespace tensord {

using SessionId = uint64_t;

struct SessionOptions {
  int64_t memory_limit = 0;         // bytes for this session; 0 = unlimited
  std::string tenant;               // who opened it (a broker's token); "" = no tenant
  int64_t tenant_memory_limit = 0;  // bytes for all of the tenant's sessions; 0 = unlimited
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

  // Options from TENSORD_DEVICES / TENSORD_DEVICE.
  static EngineOptions from_env();
};

struct EngineMetrics {
  int64_t executes = 0;
  int64_t compiles = 0;         // executable cache misses
  int64_t cache_hits = 0;
  int64_t uploads = 0;
  int64_t reads = 0;
  int64_t copies_same_device = 0;
  int64_t copies_peer = 0;      // direct device-to-device
  int64_t copies_staged = 0;    // through host memory
  int64_t implicit_moves = 0;   // inputs moved to the executing device by execute()
  int64_t node_errors = 0;      // graph outputs that ended in an error
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const EngineOptions& options);
  // The process-wide engine built from the environment, created on first use.
  static Result<std::shared_ptr<Engine>> shared();
  ~Engine();  // finishes queued work, then frees every tensor

  // Visible devices with their current memory use.
  std::vector<DeviceInfo> devices() const;
  // Devices present on the machine but removed by the filter, and the filter text.
  const std::vector<std::string>& filtered_out() const { return filtered_out_; }
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
  // Frees every tensor of the session (work already queued still completes).
  Status close_session(SessionId session);

  // Copies host bytes to a new tensor on `device` ("" = default).
  Result<TensorHandle> upload(SessionId session, const TensorView& src, const std::string& device);
  Result<HostTensor> read(SessionId session, TensorHandle h);
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
  Result<TensorType> read_into(SessionId session, TensorHandle h, void* dst, size_t room);
  Status wait(SessionId session, TensorHandle h);
  Result<TensorInfo> info(SessionId session, TensorHandle h);
  // See Client::execute. With `run_here_if_idle`, when the device's queue is idle (nothing
  // queued or running) and the outputs are small (256 KiB in all, sizes known at compile time),
  // the graph runs on the calling thread before execute() returns — for a caller about to wait
  // for the outputs anyway (the broker answering small results inline), it saves two thread
  // hand-offs; otherwise it is queued as usual. Order is kept either way.
  Result<std::vector<TensorHandle>> execute(SessionId session, const Graph& graph,
                                            const std::vector<TensorHandle>& inputs,
                                            const std::string& device,
                                            const CompileOptions& options = {},
                                            bool run_here_if_idle = false);
  Result<TensorHandle> copy(SessionId session, TensorHandle h, const std::string& device);
  Status release(SessionId session, TensorHandle h);

  // See Client::load / run / unload. A loaded model belongs to its session.
  Result<ModelHandle> load(SessionId session, const Graph& graph, const std::string& device,
                           const CompileOptions& options = {});
  Result<std::vector<TensorHandle>> run(SessionId session, ModelHandle model,
                                        const std::vector<TensorHandle>& inputs,
                                        bool run_here_if_idle = false);
  Status unload(SessionId session, ModelHandle model);

  EngineMetrics metrics() const;
  // Bytes held by the session's tensors (as allocated by the engine on its behalf).
  int64_t session_bytes(SessionId session) const;

  struct Impl;  // defined in engine.cpp

 private:
  struct Launch;
  Result<Launch> prepare(SessionId session, const std::vector<TensorHandle>& inputs,
                         const std::string& device, bool device_fixed, size_t fixed_device);
  Result<std::vector<TensorHandle>> submit(SessionId session, Launch launch, size_t num_outputs,
                                           const std::shared_ptr<Executable>& exe,
                                           bool here_if_idle = false);
  explicit Engine(std::unique_ptr<Impl> impl, EngineOptions options,
                  std::vector<std::string> filtered_out);
  std::unique_ptr<Impl> impl_;
  EngineOptions options_;
  std::vector<std::string> filtered_out_;
};

// Matches a device name against a TENSORD_DEVICES-style filter (exposed for tests).
bool device_matches_filter(const std::string& device_name, const std::string& kind,
                           const std::string& filter);

}  // namespace tensord
