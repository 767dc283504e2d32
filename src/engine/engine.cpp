#include "engine/engine.h"

#include <fnmatch.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <list>
#include <map>
#include <string_view>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include "core/errors.h"
#include "core/graph_utils.h"
#include "core/text.h"
#include "engine/executor.h"
#include "engine/memory_pool.h"
#include "engine/work_queue.h"
#include "backends/cpu/thread_pool.h"

namespace tensord {
namespace {

using namespace engine_queue;

// execute/run with run_here_if_idle run on the caller's thread only when the outputs fit this.
constexpr int64_t kRunHereMaxOutputBytes = 256 << 10;

// Compiled forms (one per distinct input types) one loaded model may keep.
constexpr size_t kMaxExecutablesPerModel = 64;

struct DeviceSlot {
  std::unique_ptr<Device> device;
  std::unique_ptr<DevicePool> pool;  // the caching allocator (created with the slot)
  std::atomic<int64_t> in_use{0};  // every allocation, for the capacity check
  std::atomic<int64_t> peak{0};
  // Of in_use: compiled executables' constants (held while they are cached, whoever's
  // sessions are gone), reported apart from the bytes tensors hold (DeviceInfo::memory_cached).
  std::atomic<int64_t> cached{0};
  std::unique_ptr<WorkQueue> queue;
  std::atomic<int64_t> graphs{0}, ops{0};  // graphs submitted here, and their nodes
  const std::string& name() const { return device->info().name; }
};

// Bytes held on behalf of a session, and of its tenant: every session of one tenant charges
// the tenant's counter too, so a tenant cannot hold N times its quota by opening N sessions.
// Executables compiled for a tenant and the initializers of its models are charged there.
struct SessionCounter {
  std::atomic<int64_t> bytes{0};
  int64_t limit = 0;
  std::shared_ptr<SessionCounter> tenant;  // null: the session belongs to no tenant
  std::string tenant_name;                 // set on tenant counters
  int sessions = 0;                        // tenant counters: open sessions (under Impl::mu)
  // Tenant counters: compiles running and waiting for a place (under Impl::compile_mu).
  int compiles_running = 0, compiles_waiting = 0;

  // Bytes held outside the engine on the session's behalf (Engine::external_bytes: the
  // shared-memory regions a broker maps for it); tenant counters: the sum over its sessions.
  // Not in `bytes`, but counted with them against the limits.
  std::atomic<int64_t> external{0};

  // Adds n bytes to this counter and its tenant's. When a limit would be passed nothing is
  // added and the error says which limit, with `what` ("allocating 4 MiB on cpu:0") in it.
  Status charge(int64_t n, const std::string& what) {
    return charge_lazy(n, [&] { return what; });
  }
  // The same, `what()` called only for a refusal (an allocation's description costs a
  // formatting per tensor otherwise).
  template <typename What>
  Status charge_lazy(int64_t n, const What& what_of) {
    const int64_t s = bytes.fetch_add(n) + n;
    const int64_t ext = external.load();
    if (limit > 0 && n > 0 && s + ext > limit) {
      bytes.fetch_sub(n);
      const char* whose = tenant_name.empty() ? "session" : "tenant";
      return errors::ResourceExhausted("{} memory limit exceeded: {} would bring the {} to {}{} "
                                       "of its {} limit",
                                       whose, what_of(), whose, format_bytes(s + ext),
                                       external_note(ext), format_bytes(limit));
    }
    if (tenant) {
      const int64_t t = tenant->bytes.fetch_add(n) + n;
      const int64_t text = tenant->external.load();
      if (tenant->limit > 0 && n > 0 && t + text > tenant->limit) {
        tenant->bytes.fetch_sub(n);
        bytes.fetch_sub(n);
        return errors::ResourceExhausted(
            "tenant memory limit exceeded: {} would bring the tenant's sessions, models and "
            "compiled graphs to {}{} of its {} limit",
            what_of(), format_bytes(t + text), external_note(text), format_bytes(tenant->limit));
      }
    }
    return OkStatus();
  }
  static std::string external_note(int64_t ext) {
    return ext > 0 ? fmt::format(" ({} of them in shared-memory regions)", format_bytes(ext))
                   : std::string();
  }
  void uncharge(int64_t n) {
    bytes.fetch_sub(n);
    if (tenant) tenant->bytes.fetch_sub(n);
  }

  // Session counters: where the session's large allocations on host-memory devices go
  // (Engine::set_session_memory), or null. Set once; read by every allocation.
  std::shared_ptr<SessionMemory> memory() const {
    if (memory_min.load(std::memory_order_acquire) == SIZE_MAX) return nullptr;
    std::lock_guard<std::mutex> lock(memory_mu);
    return memory_;
  }
  void set_memory(std::shared_ptr<SessionMemory> m) {
    std::lock_guard<std::mutex> lock(memory_mu);
    memory_ = std::move(m);
    memory_min.store(memory_ ? memory_->min_bytes() : SIZE_MAX, std::memory_order_release);
  }
  std::atomic<size_t> memory_min{SIZE_MAX};  // allocations from this size on ask memory()

 private:
  mutable std::mutex memory_mu;
  std::shared_ptr<SessionMemory> memory_;
};

using ValueFuture = std::shared_future<Result<DeviceTensor>>;

ValueFuture ready_future(Result<DeviceTensor> v) {
  std::promise<Result<DeviceTensor>> p;
  p.set_value(std::move(v));
  return p.get_future().share();
}

// A tensor: its type as known when it was created (dims -1 when data-dependent), where it
// lives, and its value-to-be.
struct TensorEntry {
  TensorType type;
  size_t device = 0;
  ValueFuture value;
};

// A graph loaded once into a session: its signature is computed once, and its executables
// (one per input types) live as long as the model.
struct LoadedModel {
  Graph graph;
  size_t device = 0;
  std::string named;  // a named model's name (Engine::add_named_model); "" for a session's own
  uint64_t serial = 0;  // a named model's: which load of that name (higher = newer)
  CompileOptions options;
  std::mutex mu;
  std::map<std::string, std::shared_ptr<Executable>> executables;  // by input types
  // The initializers' bytes, counted against the session's quota while the model lives.
  // Null for a named model (Engine::add_named_model): held once, charged to nobody.
  std::shared_ptr<SessionCounter> counter;
  int64_t counted = 0;
  // A named model's compiled forms, by tenant and input types (see Engine::add_named_model):
  // each charged to the tenant whose run compiled it (`counted`, a per-node cost; the
  // executable's own budget holds its folded constants and prepared weights).
  struct Form {
    std::shared_ptr<Executable> exe;
    std::shared_ptr<SessionCounter> tenant;  // null: sessions without a tenant (nobody pays)
    int64_t counted = 0;
    uint64_t used = 0;  // for least-recently-used eviction
    ~Form() {
      if (tenant) tenant->uncharge(counted);
    }
  };
  std::map<std::string, std::unique_ptr<Form>> forms;  // under mu
  uint64_t tick = 0;                                   // under mu
  ~LoadedModel() {
    if (counter) counter->uncharge(counted);
  }
};

// Gives freed heap memory back to the system after large frees (dropped executables, their
// folded constants): glibc keeps freed chunks of a size it has seen freed before (the
// mmap threshold rises to them), so without this a broker's RSS stays at its peak.
void return_memory_to_system(int64_t freed) {
#if defined(__GLIBC__)
  if (freed >= (int64_t{8} << 20)) malloc_trim(0);
#else
  (void)freed;
#endif
}


// A compiled executable in the engine's cache: the key is the full canonical signature (no
// hash of it), and the input types it was compiled for are checked again on every hit.
// Its estimated bytes are charged to the tenant that compiled it while it stays cached.
struct CacheEntry {
  std::string key;
  std::shared_ptr<Executable> exe;
  std::vector<TensorType> types;
  size_t num_inputs = 0;
  int64_t bytes = 0;
  // What the executable holds beyond the graph (folded constants, prepared weights): charged
  // by its own budget, counted here against the cache's bound.
  int64_t held = 0;
  std::shared_ptr<SessionCounter> tenant;  // charged `bytes`; null: nobody's (embedded use)
  CacheEntry() = default;
  CacheEntry(const CacheEntry&) = delete;
  CacheEntry& operator=(const CacheEntry&) = delete;
  ~CacheEntry() {
    if (tenant) tenant->uncharge(bytes);
  }
};

// What a compiled graph holds, estimated from the graph: its constants (initializers and
// tensor attributes, also in subgraphs) plus a fixed cost per node for kernels and plans. A
// float16 constant counts twice its size: a cpu compile keeps it widened to float32
// (widen_float16; other devices keep it as it is, so this over-counts there).
int64_t estimate_executable_bytes(const Graph& graph, int depth = 0) {
  auto held = [](const HostTensor& t) {
    return static_cast<int64_t>(t.nbytes()) * (t.dtype() == DType::kFloat16 ? 2 : 1);
  };
  int64_t bytes = 4096;
  for (const auto& [name, t] : graph.initializers) bytes += held(t);
  for (const Node& n : graph.nodes) {
    bytes += 512;
    for (const auto& [k, a] : n.attrs) {
      if (const auto* t = std::get_if<HostTensor>(&a.value())) {
        bytes += held(*t);
      } else if (const auto* g = std::get_if<std::shared_ptr<const Graph>>(&a.value())) {
        if (*g && depth < 64) bytes += estimate_executable_bytes(**g, depth + 1);
      }
    }
  }
  return bytes;
}

struct Session {
  std::unordered_map<TensorHandle, std::shared_ptr<TensorEntry>> tensors;
  std::unordered_map<ModelHandle, std::shared_ptr<LoadedModel>> models;
  std::shared_ptr<SessionCounter> counter;
  std::shared_ptr<CancelToken> token = std::make_shared<CancelToken>();  // fired by close
};

// What work of a session is queued with.
struct SessionRef {
  SessionId id = 0;
  std::shared_ptr<SessionCounter> counter;
  std::shared_ptr<CancelToken> token;
};

// A task of `ref`'s session that always completes (never preempted): uploads, reads, copies.
template <class Ready, class Fn>
Task make_task(const SessionRef& ref, Ready ready, Fn fn) {
  Task t;
  t.session = ref.id;
  t.tokens.session = ref.token;
  if constexpr (!std::is_same_v<Ready, std::nullptr_t>) t.ready = std::move(ready);
  t.fn = [fn = std::move(fn)](Frame& f) mutable {
    fn(f);
    return true;
  };
  return t;
}

bool is_ready(const ValueFuture& f) {
  return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

// Waits for `f`, giving up when the session closes or `call` fires (its deadline, its poll),
// with that status. Without either, a plain wait.
template <class Future>
Status wait_ready(const Future& f, const CancelToken* session, CancelToken* call) {
  using namespace std::chrono;
  if (f.wait_for(seconds(0)) == std::future_status::ready) return OkStatus();
  if (!session && !call) {
    f.wait();
    return OkStatus();
  }
  // Cancellation is noticed within a poll period; readiness at once.
  constexpr auto kPoll = milliseconds(10);
  for (;;) {
    if (f.wait_for(kPoll) == std::future_status::ready) return OkStatus();
    if (session && session->cancelled()) return session->cancelled_status();
    if (call) {
      Status s = call->check();
      if (s.ok() && call->poll) s = call->poll();
      if (!s.ok()) {
        call->cancel(s);  // whatever the call submitted stops too
        return s;
      }
    }
  }
}

// Allocations for one session on one device: accounted to both, refused past either limit.
class EngineAllocator final : public Allocator {
 public:
  // `cached`: an executable's constants (counted in DeviceSlot::cached too).
  EngineAllocator(DeviceSlot* slot, std::shared_ptr<SessionCounter> counter, bool cached = false)
      : slot_(slot), counter_(std::move(counter)), cached_(cached) {}

  Result<std::shared_ptr<Buffer>> allocate(size_t bytes) override {
    const int64_t n = static_cast<int64_t>(bytes);
    TD_RETURN_IF_ERROR(reserve(n, /*check_capacity=*/true));
    if (counter_ && bytes >= counter_->memory_min.load(std::memory_order_relaxed) &&
        slot_->device->adopts_host_memory()) {
      if (auto memory = counter_->memory()) {
        if (void* p = memory->allocate(bytes)) {
          DeviceSlot* slot = slot_;
          auto counter = counter_;
          return std::shared_ptr<Buffer>(new Buffer{slot->device.get(), p, bytes, 0},
                                         [slot, counter, memory](Buffer* b) {
                                           memory->release(b->ptr, b->size);
                                           slot->in_use.fetch_sub(static_cast<int64_t>(b->size));
                                           counter->uncharge(static_cast<int64_t>(b->size));
                                           delete b;
                                         });
        }
      }
    }
    auto block = slot_->pool->allocate(bytes);
    if (!block.ok()) {
      unreserve(n);
      return block.status();
    }
    DeviceSlot* slot = slot_;
    auto counter = counter_;
    const DevicePool::Block blk = *block;
    const bool cached = cached_;
    if (cached) slot->cached.fetch_add(n);
    return std::shared_ptr<Buffer>(new Buffer{slot->device.get(), blk.base, bytes, blk.offset},
                                   [slot, counter, blk, cached](Buffer* b) {
                                     slot->pool->free(blk);
                                     if (cached) slot->cached.fetch_sub(static_cast<int64_t>(b->size));
                                     slot->in_use.fetch_sub(static_cast<int64_t>(b->size));
                                     if (counter) counter->uncharge(static_cast<int64_t>(b->size));
                                     delete b;
                                   });
  }

  // A buffer over memory the engine does not own (see Engine::upload_external): accounted
  // like allocate() (the bytes exist already, so only the session quota applies), never freed
  // by the device; `keepalive` is dropped with the buffer.
  Result<std::shared_ptr<Buffer>> adopt(void* ptr, size_t bytes, std::shared_ptr<void> keepalive) {
    TD_RETURN_IF_ERROR(reserve(static_cast<int64_t>(bytes), /*check_capacity=*/false));
    DeviceSlot* slot = slot_;
    auto counter = counter_;
    return std::shared_ptr<Buffer>(new Buffer{slot->device.get(), ptr, bytes, 0},
                                   [slot, counter, keepalive = std::move(keepalive)](Buffer* b) {
                                     slot->in_use.fetch_sub(static_cast<int64_t>(b->size));
                                     if (counter) counter->uncharge(static_cast<int64_t>(b->size));
                                     delete b;
                                   });
  }

 private:
  // Counts n bytes against the device (its capacity when asked) and the session's quota.
  Status reserve(int64_t n, bool check_capacity) {
    const int64_t capacity = slot_->device->info().memory_bytes;
    const int64_t used = slot_->in_use.fetch_add(n) + n;
    if (check_capacity && capacity > 0 && used > capacity) {
      slot_->in_use.fetch_sub(n);
      // The device's use is not named: it is other tenants' business.
      return errors::ResourceExhausted("{}: cannot allocate {} ({} bytes): the device is full "
                                       "(capacity {})",
                                       slot_->name(), format_bytes(n), n, format_bytes(capacity));
    }
    if (counter_) {
      Status st = counter_->charge_lazy(n, [&] {
        return fmt::format("allocating {} on {}", format_bytes(n), slot_->name());
      });
      if (!st.ok()) {
        slot_->in_use.fetch_sub(n);
        return st;
      }
    }
    update_peak(used);
    return OkStatus();
  }
  void unreserve(int64_t n) {
    slot_->in_use.fetch_sub(n);
    if (counter_) counter_->uncharge(n);
  }
  void update_peak(int64_t used) {
    int64_t peak = slot_->peak.load();
    while (used > peak && !slot_->peak.compare_exchange_weak(peak, used)) {
    }
  }
  DeviceSlot* slot_;
  std::shared_ptr<SessionCounter> counter_;
  bool cached_ = false;
};

Result<HostTensor> read_to_host(DeviceSlot& slot, const DeviceTensor& t) {
  TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(t.dtype, t.shape));
  if (bytes == 0) return HostTensor(t.dtype, t.shape);
  TD_ASSIGN_OR_RETURN(HostTensor host, HostTensor::uninitialized(t.dtype, t.shape));
  if (void* p = slot.device->host_pointer(*t.buffer)) {
    std::memcpy(host.mutable_data(), p, static_cast<size_t>(bytes));
  } else {
    TD_RETURN_IF_ERROR(slot.device->read(*t.buffer, 0, host.mutable_data(), static_cast<size_t>(bytes)));
  }
  return host;
}

}  // namespace

struct Engine::Impl {
  std::vector<std::unique_ptr<DeviceSlot>> slots;
  std::unordered_map<const Device*, DeviceSlot*> slot_of;
  // Compile-time constant folding runs on a cpu device: cpu:0, or a hidden one when the
  // filter removed it. Fallback placement goes to cpu:0 when it is visible.
  std::unique_ptr<Device> hidden_host;
  Device* host = nullptr;
  DeviceSlot* fallback = nullptr;
  std::string default_device;
  Status default_error;
  bool peer_copy = true;
  bool strict_device = false;

  mutable std::mutex mu;  // sessions
  std::unordered_map<SessionId, Session> sessions;
  std::atomic<uint64_t> next_handle{1};
  std::atomic<uint64_t> next_session{1};

  std::unordered_map<std::string, std::shared_ptr<SessionCounter>> tenants;  // under mu

  // Named models (Engine::add_named_model): by name, with what list/open report. A model
  // that failed to load has info.ready false and no graph.
  struct NamedModel {
    ModelInfo info;
    std::shared_ptr<LoadedModel> model;
  };
  mutable std::mutex named_mu;
  std::map<std::string, NamedModel> named;   // under named_mu
  std::set<std::string> named_sources;       // under named_mu
  uint64_t named_serial = 0;                 // under named_mu: the last named load's

  std::mutex cache_mu;
  size_t cache_capacity = 512;
  int64_t cache_max_bytes = int64_t{1} << 30;
  int64_t max_folded_bytes = int64_t{256} << 20;
  size_t named_forms_per_tenant = 16;
  int64_t cache_bytes = 0;
  std::list<std::unique_ptr<CacheEntry>> lru;
  std::unordered_map<std::string_view, decltype(lru)::iterator> cache;  // views of entries' keys

  struct Counters {
    std::atomic<int64_t> executes{0}, compiles{0}, compiles_waited{0}, cache_hits{0}, uploads{0}, reads{0},
        copies_same{0}, copies_peer{0}, copies_staged{0}, copies_mapped{0}, implicit_moves{0},
        node_errors{0}, bytes_host_to_device{0}, bytes_device_to_host{0}, bytes_peer{0},
        bytes_staged{0}, fallback_nodes{0};
  } m;
  std::mutex fallback_mu;
  std::map<std::string, int64_t> fallbacks;  // "cpu:1 Relu" -> nodes placed on the fallback

  // Moves `v` to `dst` now, on the calling thread, by the cheapest path: same device (as is),
  // peer (dst.copy_from), host-mapped (one side's host pointer: one read or one write), or
  // staged through a host buffer. Counted per path.
  Result<DeviceTensor> move_now(const DeviceTensor& v, DeviceSlot* dst,
                                const std::shared_ptr<SessionCounter>& counter) {
    Device* src_device = v.buffer ? v.buffer->device : nullptr;
    if (src_device == dst->device.get()) {
      m.copies_same++;
      return v;
    }
    TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(v.dtype, v.shape));
    EngineAllocator alloc(dst, counter);
    TD_ASSIGN_OR_RETURN(auto buf, alloc.allocate(static_cast<size_t>(bytes)));
    DeviceTensor out{v.dtype, v.shape, buf};
    if (bytes == 0) return out;
    const size_t n = static_cast<size_t>(bytes);
    if (!src_device) return errors::Internal("copy to {}: a value without a device", dst->name());
    if (peer_copy && dst->device->copy_from(*buf, *v.buffer)) {
      m.copies_peer++;
      m.bytes_peer += bytes;
      return out;
    }
    if (void* p = src_device->host_pointer(*v.buffer)) {
      TD_RETURN_IF_ERROR(dst->device->write(*buf, 0, p, n));
      m.copies_mapped++;
      m.bytes_host_to_device += bytes;
      return out;
    }
    if (void* p = dst->device->host_pointer(*buf)) {
      TD_RETURN_IF_ERROR(src_device->read(*v.buffer, 0, p, n));
      m.copies_mapped++;
      m.bytes_device_to_host += bytes;
      return out;
    }
    // Neither side is host-visible: through a host buffer, charged to the session meanwhile.
    if (counter)
      TD_RETURN_IF_ERROR(counter->charge(bytes, fmt::format("staging {} from {} to {}", format_bytes(bytes),
                                                            src_device->info().name, dst->name())));
    struct Uncharge {
      const std::shared_ptr<SessionCounter>& c;
      int64_t n;
      ~Uncharge() {
        if (c) c->uncharge(n);
      }
    } uncharge{counter, bytes};
    std::unique_ptr<char[]> host(new (std::nothrow) char[n]);
    if (!host) return errors::ResourceExhausted("out of host memory staging {} bytes", bytes);
    TD_RETURN_IF_ERROR(src_device->read(*v.buffer, 0, host.get(), n));
    TD_RETURN_IF_ERROR(dst->device->write(*buf, 0, host.get(), n));
    m.copies_staged++;
    m.bytes_staged += bytes;
    return out;
  }

  // What an executable's run gets from the engine: the session's allocators per device and
  // copies between devices.
  struct Services final : RunServices {
    Impl* impl;
    std::shared_ptr<SessionCounter> counter;
    std::map<const Device*, std::unique_ptr<EngineAllocator>> allocators;
    Services(Impl* i, std::shared_ptr<SessionCounter> c) : impl(i), counter(std::move(c)) {}
    Allocator& allocator(Device& device) override {
      auto& a = allocators[&device];
      if (!a) a = std::make_unique<EngineAllocator>(impl->slot_of.at(&device), counter);
      return *a;
    }
    Result<DeviceTensor> transfer(const DeviceTensor& value, Device& dst) override {
      auto it = impl->slot_of.find(&dst);
      if (it == impl->slot_of.end()) return errors::Internal("copy to a device the engine does not hold");
      return impl->move_now(value, it->second, counter);
    }
  };

  // Compiles `graph` for the device of `slot` with fallback placement on cpu:0.
  // What a compile's own bytes (folded constants, prepared weights, device copies of
  // constants) are charged to: held on `holder` (a tenant's counter, or a session's for its
  // own models: then its tenant too) while the executable lives; `session` (the session
  // compiling) must also stay within its limit while they are. Both null: nobody pays, only
  // the folding cap applies.
  std::shared_ptr<CompileBudget> make_budget(std::shared_ptr<SessionCounter> holder,
                                             std::shared_ptr<SessionCounter> session) {
    if (session == holder) session = nullptr;  // holder->charge checks it already
    if (session && session->limit <= 0) session = nullptr;
    if (!holder && !session) return std::make_shared<CompileBudget>(max_folded_bytes, nullptr, nullptr);
    auto pending = std::make_shared<std::atomic<int64_t>>(0);
    auto charge = [holder, session, pending](int64_t n, const std::string& what) -> Status {
      if (session) {
        const int64_t s =
            session->bytes.load() + session->external.load() + pending->load() + n;
        if (s > session->limit)
          return errors::ResourceExhausted(
              "session memory limit exceeded: {} would bring the session to {} of its {} limit",
              what, format_bytes(s), format_bytes(session->limit));
      }
      if (holder) TD_RETURN_IF_ERROR(holder->charge(n, what));
      *pending += n;
      return OkStatus();
    };
    auto uncharge = [holder, pending](int64_t n) {
      if (holder) holder->uncharge(n);
      *pending -= n;
    };
    return std::make_shared<CompileBudget>(max_folded_bytes, std::move(charge), std::move(uncharge));
  }

  // Compiles of one tenant at once: EngineOptions::max_compiles_per_tenant run, up to 16 times
  // as many wait (holding their callers' threads), more are refused, so that a tenant sending
  // many large graphs takes at most that many cores and a bounded number of a broker's threads.
  std::mutex compile_mu;
  std::condition_variable compile_cv;
  int max_compiles_per_tenant = 2;

  class CompileSlot {
   public:
    CompileSlot() = default;
    CompileSlot(Impl* impl, std::shared_ptr<SessionCounter> tenant)
        : impl_(impl), tenant_(std::move(tenant)) {}
    CompileSlot(CompileSlot&& o) noexcept : impl_(o.impl_), tenant_(std::move(o.tenant_)) {
      o.impl_ = nullptr;
    }
    CompileSlot& operator=(CompileSlot&&) = delete;
    ~CompileSlot() {
      if (!impl_ || !tenant_) return;
      {
        std::lock_guard<std::mutex> lock(impl_->compile_mu);
        --tenant_->compiles_running;
      }
      impl_->compile_cv.notify_all();
    }

   private:
    Impl* impl_ = nullptr;
    std::shared_ptr<SessionCounter> tenant_;
  };

  Result<CompileSlot> admit_compile(const std::shared_ptr<SessionCounter>& tenant,
                                    const std::string& what) {
    if (!tenant || max_compiles_per_tenant <= 0) return CompileSlot();
    const int max_waiting = max_compiles_per_tenant * 16;
    std::unique_lock<std::mutex> lock(compile_mu);
    if (tenant->compiles_running >= max_compiles_per_tenant) {
      if (tenant->compiles_waiting >= max_waiting)
        return errors::ResourceExhausted(
            "{}: tenant '{}' has {} compiles running and {} waiting, the most it may (at most "
            "{} run at once per tenant: tensord serve --max-compiles-per-tenant); retry when "
            "one has finished",
            what, clip_text(tenant->tenant_name, 200), tenant->compiles_running,
            tenant->compiles_waiting, max_compiles_per_tenant);
      ++tenant->compiles_waiting;
      m.compiles_waited++;
      compile_cv.wait(lock, [&] { return tenant->compiles_running < max_compiles_per_tenant; });
      --tenant->compiles_waiting;
    }
    ++tenant->compiles_running;
    return CompileSlot(this, tenant);
  }

  Result<std::unique_ptr<Executable>> compile(size_t device, const Graph& graph,
                                              const std::vector<TensorType>& types,
                                              CompileOptions options,
                                              std::shared_ptr<CompileBudget> budget) {
    options.strict_device |= strict_device;
    CompileTarget t;
    t.budget = budget ? std::move(budget) : make_budget(nullptr, nullptr);
    t.device = slots[device]->device.get();
    t.fallback = fallback ? fallback->device.get() : nullptr;
    t.host = host;
    t.allocate_constant = [this](Device& d, size_t bytes) -> Result<std::shared_ptr<Buffer>> {
      EngineAllocator alloc(slot_of.at(&d), nullptr, /*cached=*/true);
      return alloc.allocate(bytes);
    };
    auto compiled = Executable::compile(graph, types, t, options);
    if (!compiled.ok()) {
      return_memory_to_system(t.budget->peak());  // what a refused compile had folded
      return compiled.status();
    }
    std::unique_ptr<Executable> exe = std::move(compiled).value();
    if (!exe->fallbacks().empty()) {
      std::lock_guard<std::mutex> lock(fallback_mu);
      for (const auto& f : exe->fallbacks()) {
        fallbacks[slots[device]->name() + " " + f.op]++;
        m.fallback_nodes++;
      }
    }
    return exe;
  }

  QueueStats queue_stats;

  ~Impl() {
    // Finish queued work first (it may still hold buffers), then free tensors, then devices.
    // Work of sessions still open is cancelled: an endless loop must not hang the shutdown.
    for (auto& [id, s] : sessions)
      s.token->cancel(Status(StatusCode::kCancelled, "cancelled: the engine is shutting down"));
    for (auto& s : slots) s->queue.reset();
    sessions.clear();
    named.clear();
    cache.clear();
    lru.clear();
  }

  Result<size_t> find_device(const std::string& name) const {
    const std::string& want0 = name.empty() ? default_device : name;
    if (name.empty() && !default_error.ok()) return default_error;
    // In a cluster, "n0/cpu:0" is this process's own cpu:0 (backend.h, local_node_prefix).
    const std::string& prefix = local_node_prefix();
    const std::string want = !prefix.empty() && want0.rfind(prefix, 0) == 0
                                 ? want0.substr(prefix.size()) : want0;
    for (size_t i = 0; i < slots.size(); ++i)
      if (slots[i]->name() == want) return i;
    std::vector<std::string> names;
    for (const auto& s : slots) names.push_back(s->name());
    return errors::NotFound("device '{}' is not available (devices: {})", want,
                            names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", ")));
  }

  // The session, its tensor and its model by id, with `mu` held; NOT_FOUND naming what is
  // missing. (One lookup for every engine call: the messages are the API's.)
  Result<const Session*> session_locked(SessionId session) const {
    auto s = sessions.find(session);
    if (s == sessions.end()) return errors::NotFound("session {} does not exist", session);
    return &s->second;
  }
  Result<Session*> session_locked(SessionId session) {
    TD_ASSIGN_OR_RETURN(const Session* s, std::as_const(*this).session_locked(session));
    return const_cast<Session*>(s);
  }
  static Result<std::shared_ptr<TensorEntry>> tensor_in(const Session& s, TensorHandle h) {
    auto t = s.tensors.find(h);
    if (t == s.tensors.end())
      return errors::NotFound("tensor handle {} does not exist in this session", h);
    return t->second;
  }
  static Result<std::shared_ptr<LoadedModel>> model_in(const Session& s, ModelHandle model) {
    auto it = s.models.find(model);
    if (it == s.models.end())
      return errors::NotFound("model handle {} does not exist in this session", model);
    return it->second;
  }

  Result<std::shared_ptr<TensorEntry>> find_tensor(SessionId session, TensorHandle h) const {
    TD_ASSIGN_OR_RETURN(auto both, find_for_wait(session, h));
    return both.first;
  }

  Result<std::shared_ptr<SessionCounter>> counter(SessionId session) const {
    TD_ASSIGN_OR_RETURN(SessionRef r, ref(session));
    return r.counter;
  }

  Result<SessionRef> ref(SessionId session) const {
    std::lock_guard<std::mutex> lock(mu);
    TD_ASSIGN_OR_RETURN(const Session* s, session_locked(session));
    return SessionRef{session, s->counter, s->token};
  }

  // A tensor and its session's token (for waits that stop when the session closes).
  Result<std::pair<std::shared_ptr<TensorEntry>, std::shared_ptr<CancelToken>>> find_for_wait(
      SessionId session, TensorHandle h) const {
    std::lock_guard<std::mutex> lock(mu);
    TD_ASSIGN_OR_RETURN(const Session* s, session_locked(session));
    TD_ASSIGN_OR_RETURN(auto t, tensor_in(*s, h));
    return std::make_pair(std::move(t), s->token);
  }

  Result<TensorHandle> add(SessionId session, std::shared_ptr<TensorEntry> e) {
    std::lock_guard<std::mutex> lock(mu);
    TD_ASSIGN_OR_RETURN(Session* s, session_locked(session));
    const TensorHandle h = next_handle.fetch_add(1);
    s->tensors.emplace(h, std::move(e));
    return h;
  }

  // Moves `src`'s value to device `dst` (after it is ready), on the destination's queue, by
  // the cheapest path (move_now).
  ValueFuture transfer(const std::shared_ptr<TensorEntry>& src, size_t dst, const SessionRef& ref) {
    std::shared_ptr<SessionCounter> session_counter = ref.counter;
    DeviceSlot* dst_slot = slots[dst].get();
    auto promise = std::make_shared<std::promise<Result<DeviceTensor>>>();
    ValueFuture out = promise->get_future().share();
    dst_slot->queue->push(make_task(ref, [src] { return is_ready(src->value); },
                                    [this, src, dst_slot, promise, session_counter](Frame& f) {
      if (Status c = f.cancelled(); !c.ok()) return promise->set_value(c);
      const Result<DeviceTensor>& v = src->value.get();
      if (!v.ok()) return promise->set_value(v.status());
      promise->set_value(move_now(*v, dst_slot, session_counter));
    }));
    return out;
  }

  // Drops the least recently used entry; the caller holds cache_mu. Returns it, to be
  // destroyed outside the lock.
  std::unique_ptr<CacheEntry> evict_lru_locked(decltype(lru)::iterator it) {
    std::unique_ptr<CacheEntry> dead = std::move(*it);
    cache.erase(dead->key);
    cache_bytes -= dead->bytes + dead->held;
    lru.erase(it);
    return dead;
  }

  // Every cached executable of `tenant` (its last session closed).
  // And the forms of named models it compiled. The memory goes back to the system.
  void purge_tenant(const std::shared_ptr<SessionCounter>& tenant) {
    int64_t freed = 0;
    {
      std::vector<std::unique_ptr<CacheEntry>> dead;
      {
        std::lock_guard<std::mutex> lock(cache_mu);
        for (auto it = lru.begin(); it != lru.end();) {
          auto next = std::next(it);
          if ((*it)->tenant == tenant) dead.push_back(evict_lru_locked(it));
          it = next;
        }
      }
      for (const auto& e : dead) freed += e->bytes + (e->exe ? e->exe->held_bytes() : 0);
      std::vector<std::unique_ptr<LoadedModel::Form>> dead_forms;
      std::vector<std::shared_ptr<LoadedModel>> models;
      {
        std::lock_guard<std::mutex> lock(named_mu);
        for (const auto& [name, n] : named)
          if (n.model) models.push_back(n.model);
      }
      for (const auto& m : models) {
        std::lock_guard<std::mutex> lock(m->mu);
        for (auto it = m->forms.begin(); it != m->forms.end();) {
          if (it->second->tenant == tenant) {
            dead_forms.push_back(std::move(it->second));
            it = m->forms.erase(it);
          } else {
            ++it;
          }
        }
      }
      for (const auto& f : dead_forms) freed += f->counted + (f->exe ? f->exe->held_bytes() : 0);
    }  // destroyed here
    return_memory_to_system(freed);
  }

  // The executable of `graph` for `types` on `device`, compiled or from the cache. The cache
  // is per tenant: a tenant never runs, or learns the existence of, another tenant's
  // executables; and the key is the graph's canonical signature itself, so a hit is the same
  // graph. The stored input types are checked against the request on every hit.
  Result<std::shared_ptr<Executable>> get_executable(size_t device, const Graph& graph,
                                                     const std::vector<TensorType>& types,
                                                     const CompileOptions& options,
                                                     const std::shared_ptr<SessionCounter>& counter) {
    const std::shared_ptr<SessionCounter> tenant = counter ? counter->tenant : nullptr;
    std::string key = slots[device]->name() + (options.fuse ? "|fuse|" : "|ref|") +
                      (options.strict_device || strict_device ? "strict|" : "");
    const std::string tenant_name = tenant ? tenant->tenant_name : std::string();
    key += std::to_string(tenant_name.size()) + ":" + tenant_name + "|";
    key += graph_signature(graph, types);
    {
      std::lock_guard<std::mutex> lock(cache_mu);
      auto it = cache.find(key);
      if (it != cache.end()) {
        const CacheEntry& e = **it->second;
        if (e.num_inputs != graph.inputs.size() || e.types != types || e.tenant != tenant)
          return errors::Internal(
              "executable cache: the entry for this graph was compiled for other inputs "
              "(refusing to run it)");
        lru.splice(lru.begin(), lru, it->second);
        m.cache_hits++;
        return e.exe;
      }
    }
    // Compile outside the lock; a concurrent compile of the same key is harmless. What the
    // compile creates is charged to the tenant as it is created (the session's limit is
    // checked too), and held while the executable lives.
    TD_ASSIGN_OR_RETURN(CompileSlot slot, admit_compile(tenant, "compiling a graph"));
    TD_ASSIGN_OR_RETURN(std::unique_ptr<Executable> exe,
                        compile(device, graph, types, options, make_budget(tenant, counter)));
    m.compiles++;
    std::shared_ptr<Executable> shared(std::move(exe));
    auto entry = std::make_unique<CacheEntry>();
    entry->exe = shared;
    entry->types = types;
    entry->num_inputs = graph.inputs.size();
    entry->bytes = estimate_executable_bytes(graph);
    entry->held = shared->held_bytes();
    if (entry->bytes + entry->held > cache_max_bytes) return shared;  // runs, but is not kept
    std::vector<std::unique_ptr<CacheEntry>> dead;  // destroyed after the lock is released
    std::lock_guard<std::mutex> lock(cache_mu);
    if (cache.count(key)) return shared;
    if (tenant) {
      // Charged to the tenant: its oldest executables make room, else this one is not kept.
      for (;;) {
        if (tenant->charge(entry->bytes, "caching a compiled graph").ok()) {
          entry->tenant = tenant;
          break;
        }
        auto victim = lru.end();
        for (auto it = lru.begin(); it != lru.end(); ++it)
          if ((*it)->tenant == tenant) victim = it;
        if (victim == lru.end()) return shared;
        dead.push_back(evict_lru_locked(victim));
      }
    }
    entry->key = std::move(key);
    cache_bytes += entry->bytes + entry->held;
    lru.push_front(std::move(entry));
    cache.emplace(lru.front()->key, lru.begin());
    while (!lru.empty() && (lru.size() > cache_capacity || cache_bytes > cache_max_bytes))
      dead.push_back(evict_lru_locked(std::prev(lru.end())));
    return shared;
  }
};

EngineOptions EngineOptions::from_env() {
  EngineOptions o;
  if (const char* d = std::getenv("TENSORD_DEVICES")) o.device_filter = d;
  if (const char* d = std::getenv("TENSORD_DEVICE")) o.default_device = d;
  if (const char* v = std::getenv("TENSORD_STRICT_DEVICE")) o.strict_device = *v && *v != '0';
  if (const char* v = std::getenv("TENSORD_MAX_FOLDED_BYTES"); v && *v)
    o.max_folded_bytes = std::max<int64_t>(0, std::atoll(v));
  if (const char* v = std::getenv("TENSORD_MAX_COMPILES_PER_TENANT"); v && *v)
    o.max_compiles_per_tenant = static_cast<int>(std::clamp<long long>(std::atoll(v), 0, 1 << 16));
  if (const char* v = std::getenv("TENSORD_NAMED_MODEL_FORMS"); v && std::atoll(v) > 0)
    o.named_model_forms_per_tenant = static_cast<size_t>(std::atoll(v));
  if (const char* v = std::getenv("TENSORD_CPU_RUNNERS"); v && *v)
    o.cpu_runners = static_cast<int>(std::clamp<long long>(std::atoll(v), 0, 64));
  if (const char* t = std::getenv("TENSORD_TIME_SLICE_MS")) {
    const double ms = std::atof(t);
    if (ms > 0) o.time_slice = std::chrono::microseconds(static_cast<int64_t>(ms * 1000));
  }
  return o;
}

void CancelToken::cancel(Status why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_.load(std::memory_order_relaxed)) return;
  why_ = why.ok() ? Status(StatusCode::kCancelled, "cancelled") : std::move(why);
  cancelled_.store(true, std::memory_order_release);
}

void CancelToken::set_deadline(Clock::time_point deadline) {
  deadline_ns_.store(deadline == Clock::time_point::max()
                         ? INT64_MAX
                         : std::chrono::duration_cast<std::chrono::nanoseconds>(
                               deadline.time_since_epoch()).count(),
                     std::memory_order_relaxed);
}

Status CancelToken::cancelled_status() const {
  if (!cancelled()) return OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  return why_;
}

void CancelToken::disarm() {
  std::lock_guard<std::mutex> lock(poll_mu_);
  armed_.store(false, std::memory_order_release);
}

Status CancelToken::work_status() {
  if (cancelled()) return cancelled_status();
  if (!armed_.load(std::memory_order_acquire)) return OkStatus();
  Status s = check();  // the deadline
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          Clock::now().time_since_epoch()).count();
  if (s.ok() && poll && now >= next_poll_ns_.load(std::memory_order_relaxed)) {
    next_poll_ns_.store(now + 10'000'000, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(poll_mu_);
    if (armed_.load(std::memory_order_acquire)) s = poll();
  }
  if (!s.ok()) cancel(s);
  return cancelled_status();
}

Status CancelToken::check() const {
  if (cancelled()) return cancelled_status();
  const int64_t d = deadline_ns_.load(std::memory_order_relaxed);
  if (d != INT64_MAX &&
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count() >= d)
    return Status(StatusCode::kDeadlineExceeded, "deadline exceeded: the call's deadline passed");
  return OkStatus();
}

namespace {

// The patterns of a TENSORD_DEVICES-style filter: comma-separated, trimmed, without the empty
// ones and "none".
std::vector<std::string> filter_patterns(const std::string& filter) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= filter.size()) {
    size_t end = filter.find(',', start);
    if (end == std::string::npos) end = filter.size();
    std::string pat = filter.substr(start, end - start);
    pat.erase(0, pat.find_first_not_of(" \t"));
    pat.erase(pat.find_last_not_of(" \t") + 1);
    if (!pat.empty() && pat != "none") out.push_back(std::move(pat));
    start = end + 1;
  }
  return out;
}

}  // namespace

bool device_matches_filter(const std::string& name, const std::string& kind,
                           const std::string& filter) {
  if (filter.empty()) return true;
  for (const auto& pat : filter_patterns(filter)) {
    const std::string& subject = pat.find(':') == std::string::npos ? kind : name;
    if (fnmatch(pat.c_str(), subject.c_str(), 0) == 0) return true;
  }
  return false;
}

bool backend_may_match_filter(const std::string& backend, const std::string& filter) {
  if (filter.empty()) return true;
  for (const auto& pat : filter_patterns(filter)) {
    // A local device's kind is its backend's name and its name "<backend>:<index>"; a
    // pattern naming another node's device ("n1/cpu:0") does not concern local backends.
    const std::string kind = pat.substr(0, pat.find(':'));
    if (kind.find('/') == std::string::npos && fnmatch(kind.c_str(), backend.c_str(), 0) == 0)
      return true;
  }
  return false;
}

Engine::Engine(std::unique_ptr<Impl> impl, EngineOptions options,
               std::vector<std::string> filtered_out)
    : impl_(std::move(impl)), options_(std::move(options)), filtered_out_(std::move(filtered_out)) {}

Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::create(const EngineOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->peer_copy = options.peer_copy;
  impl->cache_capacity = std::max<size_t>(options.executable_cache_size, 1);
  impl->cache_max_bytes = std::max<int64_t>(options.executable_cache_bytes, 0);
  impl->max_folded_bytes = std::max<int64_t>(options.max_folded_bytes, 0);
  impl->named_forms_per_tenant = std::max<size_t>(options.named_model_forms_per_tenant, 1);
  impl->max_compiles_per_tenant = std::max(options.max_compiles_per_tenant, 0);
  std::vector<std::string> filtered_out;
  impl->strict_device = options.strict_device;
  auto backends = create_backends();
  for (const auto& backend : backends) TD_RETURN_IF_ERROR(backend->check_settings());
  std::vector<std::string> unavailable;
  for (auto& backend : backends) {
    // A backend none of whose devices the filter can admit is not even asked: discovery can
    // cost (PoCL's clGetPlatformIDs maps LLVM, 65 MB of resident memory). cpu:0 is always
    // enumerated, since constant folding needs it.
    if (backend->name() != "cpu" && !backend_may_match_filter(backend->name(), options.device_filter)) {
      filtered_out.push_back(backend->name() + ":* (not probed)");
      continue;
    }
    auto enumerated = backend->enumerate();
    if (enumerated.empty()) {
      const std::string why = backend->unavailable_reason();
      if (!why.empty()) unavailable.push_back(backend->name() + " devices: " + why);
    }
    for (auto& device : enumerated) {
      const DeviceInfo& info = device->info();
      if (!device_matches_filter(info.name, info.kind, options.device_filter)) {
        filtered_out.push_back(info.name);
        // Constant folding needs a cpu device even when the filter hides them all.
        if (info.kind == "cpu" && info.index == 0 && info.name == "cpu:0") impl->hidden_host = std::move(device);
        continue;
      }
      auto slot = std::make_unique<DeviceSlot>();
      slot->device = std::move(device);
      slot->pool = std::make_unique<DevicePool>(slot->device.get());
      impl->slot_of[slot->device.get()] = slot.get();
      // (not another node's cpu:0, "n1/cpu:0", which the cluster layer proxies)
      if (info.kind == "cpu" && info.index == 0 && info.name == "cpu:0") {
        impl->host = slot->device.get();
        impl->fallback = slot.get();
      }
      int runners = 1;
      if (info.kind == "cpu" && info.name.find('/') == std::string::npos)
        runners = options.cpu_runners > 0 ? options.cpu_runners
                                          : std::min(4, cpu::ThreadPool::team_size());
      slot->queue = std::make_unique<WorkQueue>(
          std::max(options.time_slice, std::chrono::microseconds(100)), &impl->queue_stats,
          runners);
      impl->slots.push_back(std::move(slot));
    }
  }
  if (!impl->host && impl->hidden_host) impl->host = impl->hidden_host.get();
  if (impl->slots.empty()) {
    impl->default_error = errors::NotFound(
        "no devices available (TENSORD_DEVICES='{}' leaves none of: {})", options.device_filter,
        filtered_out.empty() ? std::string("none") : fmt::format("{}", fmt::join(filtered_out, ", ")));
  } else if (!options.default_device.empty()) {
    impl->default_device = options.default_device;
    bool found = false;
    for (const auto& s : impl->slots) found |= s->name() == options.default_device;
    if (!found) {
      std::vector<std::string> names;
      for (const auto& s : impl->slots) names.push_back(s->name());
      impl->default_error = errors::NotFound(
          "default device '{}' (TENSORD_DEVICE) is not available (devices: {})",
          options.default_device, fmt::join(names, ", "));
    }
  } else {
    impl->default_device = impl->slots.front()->name();
  }
  auto engine = std::unique_ptr<Engine>(new Engine(std::move(impl), options, std::move(filtered_out)));
  engine->unavailable_ = std::move(unavailable);
  return engine;
}

Result<std::shared_ptr<Engine>> Engine::shared() {
  static std::mutex mu;
  static std::shared_ptr<Engine> engine;
  std::lock_guard<std::mutex> lock(mu);
  if (!engine) {
    TD_ASSIGN_OR_RETURN(auto e, create(EngineOptions::from_env()));
    engine = std::move(e);
  }
  return engine;
}

std::vector<DeviceInfo> Engine::devices() const {
  std::vector<DeviceInfo> out;
  for (const auto& s : impl_->slots) {
    DeviceInfo info = s->device->info();
    // (Two loads: exact when no constant is being made or freed meanwhile.)
    const int64_t cached = s->cached.load();
    info.memory_in_use = std::max<int64_t>(0, s->in_use.load() - cached);
    info.memory_cached = cached;
    info.memory_peak = s->peak.load();
    info.memory_reserved = s->pool->reserved();
    out.push_back(std::move(info));
  }
  return out;
}

int Engine::queue_runners(const std::string& device) const {
  for (const auto& s : impl_->slots)
    if (s->device->info().name == device && s->queue) return s->queue->runners();
  return 1;
}

Result<std::string> Engine::default_device() const {
  if (!impl_->default_error.ok()) return impl_->default_error;
  return impl_->default_device;
}

SessionId Engine::open_session(int64_t memory_limit) {
  SessionOptions o;
  o.memory_limit = memory_limit;
  return open_session(o);
}

SessionId Engine::open_session(const SessionOptions& options) {
  const SessionId id = impl_->next_session.fetch_add(1);
  Session s;
  s.counter = std::make_shared<SessionCounter>();
  s.counter->limit = options.memory_limit;
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!options.tenant.empty()) {
    auto& t = impl_->tenants[options.tenant];
    if (!t) {
      t = std::make_shared<SessionCounter>();
      t->tenant_name = options.tenant;
    }
    t->limit = options.tenant_memory_limit;  // the latest session's setting
    t->sessions++;
    s.counter->tenant = t;
  }
  impl_->sessions.emplace(id, std::move(s));
  return id;
}

int64_t Engine::release_cached_memory() {
  int64_t released = 0;
  for (const auto& slot : impl_->slots) {
    if (!slot->pool) continue;
    const int64_t before = slot->pool->reserved();
    slot->pool->trim();
    released += std::max<int64_t>(0, before - slot->pool->reserved());
  }
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
  return released;
}

int64_t Engine::tenant_bytes(const std::string& tenant) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->tenants.find(tenant);
  return it == impl_->tenants.end() ? 0 : it->second->bytes.load();
}

Status Engine::close_session(SessionId session) {
  Session dead;  // destroyed outside the lock
  std::shared_ptr<SessionCounter> last_of_tenant;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    TD_ASSIGN_OR_RETURN(Session* s, impl_->session_locked(session));
    dead = std::move(*s);
    impl_->sessions.erase(session);
    if (const auto& t = dead.counter->tenant; t && --t->sessions == 0) {
      impl_->tenants.erase(t->tenant_name);
      last_of_tenant = t;
    }
  }
  // Its queued work is dropped when its turn comes (at once: cancelled work is always
  // eligible), its running work stops at the next step boundary.
  dead.token->cancel(Status(StatusCode::kCancelled, "cancelled: the session was closed"));
  // The tenant's last session: its compiled graphs go too (they are charged to it, and
  // nothing may stay on the broker on behalf of a tenant that has gone).
  if (last_of_tenant) impl_->purge_tenant(last_of_tenant);
  bool none_left;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    none_left = impl_->sessions.empty();
  }
  if (none_left) {  // the broker is idle: what the sessions freed goes back to the system
    dead = Session{};
    return_memory_to_system(INT64_MAX);
  }
  return OkStatus();
}

Status Engine::set_session_memory(SessionId session, std::shared_ptr<SessionMemory> memory) {
  TD_ASSIGN_OR_RETURN(auto counter, impl_->counter(session));
  counter->set_memory(std::move(memory));
  return OkStatus();
}

int64_t Engine::session_bytes(SessionId session) const {
  auto c = impl_->counter(session);
  return c.ok() ? (*c)->bytes.load() : 0;
}

namespace {
class CounterExternalBytes final : public ExternalBytes {
 public:
  explicit CounterExternalBytes(std::shared_ptr<SessionCounter> c) : c_(std::move(c)) {}
  void add(int64_t delta) override {
    c_->external.fetch_add(delta);
    if (c_->tenant) c_->tenant->external.fetch_add(delta);
  }
  int64_t bytes() const override { return c_->external.load(); }

 private:
  std::shared_ptr<SessionCounter> c_;
};
}  // namespace

Result<std::shared_ptr<ExternalBytes>> Engine::external_bytes(SessionId session) {
  TD_ASSIGN_OR_RETURN(auto counter, impl_->counter(session));
  return std::shared_ptr<ExternalBytes>(std::make_shared<CounterExternalBytes>(std::move(counter)));
}

Result<TensorHandle> Engine::upload(SessionId session, const TensorView& src,
                                    const std::string& device) {
  if (!dtype_is_valid(static_cast<int32_t>(src.dtype)))
    return errors::InvalidArgument("upload: invalid dtype {}", static_cast<int>(src.dtype));
  TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(src.dtype, src.shape));
  if (bytes > 0 && !src.data) return errors::InvalidArgument("upload: no data for {} bytes", bytes);
  TD_ASSIGN_OR_RETURN(size_t d, impl_->find_device(device));
  TD_ASSIGN_OR_RETURN(SessionRef ref, impl_->ref(session));
  DeviceSlot* slot = impl_->slots[d].get();
  EngineAllocator alloc(slot, ref.counter);
  TD_ASSIGN_OR_RETURN(auto buf, alloc.allocate(static_cast<size_t>(bytes)));
  auto entry = std::make_shared<TensorEntry>();
  entry->type = {src.dtype, src.shape};
  entry->device = d;
  if (void* p = slot->device->host_pointer(*buf)) {
    if (bytes) std::memcpy(p, src.data, static_cast<size_t>(bytes));
    entry->value = ready_future(DeviceTensor{src.dtype, src.shape, buf});
  } else {
    // The caller's bytes are only valid during this call: stage a copy for the queue.
    auto host = HostTensor::from_bytes(src.dtype, src.shape, src.data, static_cast<size_t>(bytes));
    if (!host.ok()) return host.status();
    auto promise = std::make_shared<std::promise<Result<DeviceTensor>>>();
    entry->value = promise->get_future().share();
    slot->queue->push(make_task(ref, nullptr, [slot, buf, h = std::move(host).value(), promise](Frame& f) {
      if (Status c = f.cancelled(); !c.ok()) return promise->set_value(c);
      Status s = slot->device->write(*buf, 0, h.data(), h.nbytes());
      if (!s.ok()) return promise->set_value(s);
      promise->set_value(DeviceTensor{h.dtype(), h.shape(), buf});
    }));
  }
  impl_->m.uploads++;
  impl_->m.bytes_host_to_device += bytes;
  return impl_->add(session, std::move(entry));
}

Result<TensorHandle> Engine::upload_external(SessionId session, const TensorView& src,
                                             const std::string& device,
                                             std::shared_ptr<void> keepalive) {
  if (!dtype_is_valid(static_cast<int32_t>(src.dtype)))
    return errors::InvalidArgument("upload: invalid dtype {}", static_cast<int>(src.dtype));
  TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(src.dtype, src.shape));
  if (bytes > 0 && !src.data) return errors::InvalidArgument("upload: no data for {} bytes", bytes);
  TD_ASSIGN_OR_RETURN(size_t d, impl_->find_device(device));
  DeviceSlot* slot = impl_->slots[d].get();
  // Only devices computing on host memory adopt it; kernels get the pool's 64-byte alignment.
  if (bytes == 0 || !slot->device->adopts_host_memory() ||
      reinterpret_cast<uintptr_t>(src.data) % 64 != 0)
    return upload(session, src, device);
  TD_ASSIGN_OR_RETURN(auto counter, impl_->counter(session));
  EngineAllocator alloc(slot, counter);
  TD_ASSIGN_OR_RETURN(auto buf, alloc.adopt(const_cast<void*>(src.data), static_cast<size_t>(bytes),
                                            std::move(keepalive)));
  auto entry = std::make_shared<TensorEntry>();
  entry->type = {src.dtype, src.shape};
  entry->device = d;
  entry->value = ready_future(DeviceTensor{src.dtype, src.shape, std::move(buf)});
  impl_->m.uploads++;
  return impl_->add(session, std::move(entry));
}

Result<TensorType> Engine::read_into(SessionId session, TensorHandle h, void* dst, size_t room,
                                     CancelToken* call) {
  TD_ASSIGN_OR_RETURN(auto found, impl_->find_for_wait(session, h));
  auto& [entry, token] = found;
  TD_RETURN_IF_ERROR(wait_ready(entry->value, token.get(), call));
  const Result<DeviceTensor>& v = entry->value.get();
  if (!v.ok()) return v.status();
  TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(v->dtype, v->shape));
  if (bytes == 0 || static_cast<size_t>(bytes) > room) return v->type();
  if (!dst) return errors::InvalidArgument("read_into: no destination for {} bytes", bytes);
  DeviceSlot* slot = impl_->slots[entry->device].get();
  impl_->m.reads++;
  impl_->m.bytes_device_to_host += bytes;
  if (void* p = slot->device->host_pointer(*v->buffer)) {
    std::memcpy(dst, p, static_cast<size_t>(bytes));
    return v->type();
  }
  // The queued read writes to `dst` unless this wait gave up first (then it must not).
  struct Target {
    std::mutex mu;
    void* dst;
    bool abandoned = false;
  };
  auto target = std::make_shared<Target>();
  target->dst = dst;
  auto p = std::make_shared<std::promise<Status>>();
  auto f = p->get_future().share();
  TD_ASSIGN_OR_RETURN(SessionRef ref, impl_->ref(session));
  DeviceTensor value = *v;
  slot->queue->push(make_task(ref, nullptr, [slot, value, bytes, target, p](Frame& fr) {
    if (Status c = fr.cancelled(); !c.ok()) return p->set_value(c);
    std::lock_guard<std::mutex> lock(target->mu);
    if (target->abandoned) return p->set_value(OkStatus());
    p->set_value(slot->device->read(*value.buffer, 0, target->dst, static_cast<size_t>(bytes)));
  }));
  if (Status w = wait_ready(f, token.get(), call); !w.ok()) {
    std::lock_guard<std::mutex> lock(target->mu);
    target->abandoned = true;
    return w;
  }
  TD_RETURN_IF_ERROR(f.get());
  return v->type();
}

// The device that reaches foreign memory (ForeignMemory), or why none does.
static Result<size_t> foreign_device(const std::vector<std::unique_ptr<DeviceSlot>>& slots,
                                     const std::vector<std::string>& unavailable, const ForeignMemory& m) {
  std::vector<std::string> why;
  for (size_t i = 0; i < slots.size(); ++i) {
    Device& d = *slots[i]->device;
    if (d.info().kind != m.kind) continue;
    Status s = d.copy_foreign(Buffer{}, 0, m, 0, true);
    if (s.ok()) return i;
    why.push_back(s.message());
  }
  if (why.empty()) {
    std::string more;
    for (const auto& u : unavailable)
      if (u.rfind(m.kind, 0) == 0) more = " (" + u + ")";
    return errors::FailedPrecondition("{} memory: this engine has no {} device{}", m.kind, m.kind, more);
  }
  return errors::FailedPrecondition("{} memory: no device here reaches it: {}", m.kind, fmt::join(why, "; "));
}

Result<TensorHandle> Engine::upload_foreign(SessionId session, DType dtype, const Shape& shape,
                                            const ForeignMemory& src, const std::string& device) {
  if (!dtype_is_valid(static_cast<int32_t>(dtype)))
    return errors::InvalidArgument("upload: invalid dtype {}", static_cast<int>(dtype));
  TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(dtype, shape));
  if (static_cast<uint64_t>(bytes) > src.size)
    return errors::OutOfRange("upload: {} bytes of {} do not fit in the {} bytes of {} memory given", bytes,
                              TensorType{dtype, shape}.to_string(), src.size, src.kind);
  std::optional<size_t> wanted;
  if (!device.empty()) {
    TD_ASSIGN_OR_RETURN(size_t d, impl_->find_device(device));
    wanted = d;
  }
  TD_ASSIGN_OR_RETURN(size_t d, foreign_device(impl_->slots, unavailable_, src));
  TD_ASSIGN_OR_RETURN(SessionRef ref, impl_->ref(session));
  DeviceSlot* slot = impl_->slots[d].get();
  EngineAllocator alloc(slot, ref.counter);
  TD_ASSIGN_OR_RETURN(auto buf, alloc.allocate(static_cast<size_t>(bytes)));
  // On the device's queue (in order with its kernels and a run being recorded), waited for:
  // the caller's memory is free again when this returns.
  auto p = std::make_shared<std::promise<Status>>();
  auto f = p->get_future();
  slot->queue->push(make_task(ref, nullptr, [slot, buf, src, bytes, p](Frame& fr) {
    if (Status c = fr.cancelled(); !c.ok()) return p->set_value(c);
    p->set_value(slot->device->copy_foreign(*buf, 0, src, static_cast<size_t>(bytes), true));
  }));
  TD_RETURN_IF_ERROR(f.get());
  auto entry = std::make_shared<TensorEntry>();
  entry->type = {dtype, shape};
  entry->device = d;
  entry->value = ready_future(DeviceTensor{dtype, shape, buf});
  impl_->m.uploads++;
  TD_ASSIGN_OR_RETURN(TensorHandle h, impl_->add(session, std::move(entry)));
  if (!wanted || *wanted == d) return h;
  auto moved = copy(session, h, device);
  (void)release(session, h);
  return moved;
}

Result<TensorType> Engine::read_into_foreign(SessionId session, TensorHandle h, const ForeignMemory& dst,
                                             CancelToken* call) {
  TD_ASSIGN_OR_RETURN(auto found, impl_->find_for_wait(session, h));
  auto& [entry, token] = found;
  TD_RETURN_IF_ERROR(wait_ready(entry->value, token.get(), call));
  const Result<DeviceTensor>& v = entry->value.get();
  if (!v.ok()) return v.status();
  TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(v->dtype, v->shape));
  if (bytes == 0 || static_cast<uint64_t>(bytes) > dst.size) return v->type();
  TD_ASSIGN_OR_RETURN(SessionRef ref, impl_->ref(session));
  size_t d = entry->device;
  DeviceTensor value = *v;
  if (!impl_->slots[d]->device->copy_foreign(Buffer{}, 0, dst, 0, false).ok()) {
    // Elsewhere (cpu:0, another GPU): moved first to the device that reaches `dst`.
    TD_ASSIGN_OR_RETURN(d, foreign_device(impl_->slots, unavailable_, dst));
    ValueFuture moved = impl_->transfer(entry, d, ref);
    TD_RETURN_IF_ERROR(wait_ready(moved, token.get(), call));
    if (!moved.get().ok()) return moved.get().status();
    value = *moved.get();
  }
  DeviceSlot* slot = impl_->slots[d].get();
  auto p = std::make_shared<std::promise<Status>>();
  auto f = p->get_future();
  slot->queue->push(make_task(ref, nullptr, [slot, value, dst, bytes, p](Frame& fr) {
    if (Status c = fr.cancelled(); !c.ok()) return p->set_value(c);
    p->set_value(slot->device->copy_foreign(*value.buffer, 0, dst, static_cast<size_t>(bytes), false));
  }));
  // Waited for to the end, even past a cancelled call: the caller's memory is written until then.
  TD_RETURN_IF_ERROR(f.get());
  impl_->m.reads++;
  return v->type();
}

Result<HostTensor> Engine::read(SessionId session, TensorHandle h, CancelToken* call) {
  TD_ASSIGN_OR_RETURN(auto found, impl_->find_for_wait(session, h));
  auto& [entry, token] = found;
  TD_RETURN_IF_ERROR(wait_ready(entry->value, token.get(), call));
  const Result<DeviceTensor>& v = entry->value.get();
  if (!v.ok()) return v.status();
  DeviceSlot* slot = impl_->slots[entry->device].get();
  impl_->m.reads++;
  if (auto n = checked_byte_size(v->dtype, v->shape); n.ok()) impl_->m.bytes_device_to_host += *n;
  if (slot->device->host_pointer(*v->buffer)) return read_to_host(*slot, *v);
  auto p = std::make_shared<std::promise<Result<HostTensor>>>();
  auto f = p->get_future().share();
  TD_ASSIGN_OR_RETURN(SessionRef ref, impl_->ref(session));
  DeviceTensor value = *v;
  slot->queue->push(make_task(ref, nullptr, [slot, value, p](Frame& fr) {
    if (Status c = fr.cancelled(); !c.ok()) return p->set_value(c);
    p->set_value(read_to_host(*slot, value));
  }));
  TD_RETURN_IF_ERROR(wait_ready(f, token.get(), call));
  return f.get();
}

Result<HostMapping> Engine::map_host(SessionId session, TensorHandle h, CancelToken* call) {
  TD_ASSIGN_OR_RETURN(auto found, impl_->find_for_wait(session, h));
  auto& [entry, token] = found;
  TD_RETURN_IF_ERROR(wait_ready(entry->value, token.get(), call));
  const Result<DeviceTensor>& v = entry->value.get();
  if (!v.ok()) return v.status();
  DeviceSlot* slot = impl_->slots[entry->device].get();
  void* p = slot->device->host_pointer(*v->buffer);
  if (!p && v->buffer->size > 0)
    return errors::FailedPrecondition("map_host: tensor {} on {} is not in host memory", h,
                                      slot->name());
  return HostMapping{TensorView{v->dtype, v->shape, p}, v->buffer};
}

Result<CudaMapping> Engine::map_cuda(SessionId session, TensorHandle h, CancelToken* call) {
  TD_ASSIGN_OR_RETURN(auto found, impl_->find_for_wait(session, h));
  auto& [entry, token] = found;
  TD_RETURN_IF_ERROR(wait_ready(entry->value, token.get(), call));
  const Result<DeviceTensor>& v = entry->value.get();
  if (!v.ok()) return v.status();
  DeviceSlot* slot = impl_->slots[entry->device].get();
  const DeviceInfo& info = slot->device->info();
  ForeignMemory probe;
  probe.kind = "cuda";
  // Only a device that reaches CUDA memory has its bytes in it (the compile-only cuda:0 does not).
  if (info.kind != "cuda" || !slot->device->copy_foreign(Buffer{}, 0, probe, 0, true).ok())
    return errors::FailedPrecondition("map_cuda: tensor {} on {} is not in CUDA device memory", h, slot->name());
  // A value is ready once its device has finished the work that made it (Device::synchronize
  // at the end of a run), so another stream may read it at once.
  const auto base = reinterpret_cast<uintptr_t>(v->buffer->ptr) + v->buffer->offset;
  return CudaMapping{TensorView{v->dtype, v->shape, reinterpret_cast<const void*>(base)}, info.index, v->buffer};
}

Status Engine::wait(SessionId session, TensorHandle h, CancelToken* call) {
  TD_ASSIGN_OR_RETURN(auto found, impl_->find_for_wait(session, h));
  TD_RETURN_IF_ERROR(wait_ready(found.first->value, found.second.get(), call));
  return found.first->value.get().status();
}

Result<TensorInfo> Engine::info(SessionId session, TensorHandle h, CancelToken* call) {
  TD_ASSIGN_OR_RETURN(auto found, impl_->find_for_wait(session, h));
  const auto& entry = found.first;
  TensorInfo info{entry->type, impl_->slots[entry->device]->name()};
  if (info.type.defined() && !shape_is_static(info.type.shape) &&
      entry->value.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    // A data-dependent shape, computed by now: report the value's.
    const auto& v = entry->value.get();
    if (v.ok()) info.type = v->type();
  }
  if (!info.type.defined()) {  // its node failed at compile time: report why
    TD_RETURN_IF_ERROR(wait_ready(entry->value, found.second.get(), call));
    const auto& v = entry->value.get();
    if (!v.ok()) return v.status();
    info.type = v->type();
  }
  return info;
}

// Inputs of an execute/run, resolved: entries on the executing device and their types.
struct Engine::Launch {
  size_t target = 0;
  std::vector<std::shared_ptr<TensorEntry>> in;
  std::vector<TensorType> types;
  SessionRef ref;
  Status input_error;  // an input whose value failed (data-dependent shape): poisons every output
};

Result<Engine::Launch> Engine::prepare(SessionId session, const std::vector<TensorHandle>& inputs,
                                       const std::string& device, bool device_fixed,
                                       size_t fixed_device, CancelToken* call) {
  Launch l;
  TD_ASSIGN_OR_RETURN(l.ref, impl_->ref(session));
  for (TensorHandle h : inputs) {
    TD_ASSIGN_OR_RETURN(auto e, impl_->find_tensor(session, h));
    l.in.push_back(std::move(e));
  }
  if (device_fixed) {
    l.target = fixed_device;
  } else if (!device.empty() || l.in.empty()) {
    TD_ASSIGN_OR_RETURN(l.target, impl_->find_device(device));
  } else {
    l.target = l.in.front()->device;
  }
  // Inputs living elsewhere are moved to the executing device.
  for (auto& e : l.in) {
    if (e->device == l.target) continue;
    auto moved = std::make_shared<TensorEntry>();
    moved->type = e->type;
    moved->device = l.target;
    moved->value = impl_->transfer(e, l.target, l.ref);
    impl_->m.implicit_moves++;
    e = std::move(moved);
  }
  for (auto& e : l.in) {
    if (shape_is_static(e->type.shape) && e->type.defined()) {
      l.types.push_back(e->type);
      continue;
    }
    // A data-dependent shape: the executable is specialised on it, so wait for the value.
    TD_RETURN_IF_ERROR(wait_ready(e->value, l.ref.token.get(), call));
    const auto& v = e->value.get();
    if (!v.ok()) {
      l.input_error = v.status();
      break;
    }
    l.types.push_back(v->type());
  }
  return l;
}

Result<std::vector<TensorHandle>> Engine::submit(SessionId session, Launch launch,
                                                 size_t num_outputs,
                                                 const std::shared_ptr<Executable>& exe,
                                                 bool here_if_idle,
                                                 std::shared_ptr<CancelToken> call) {
  impl_->m.executes++;
  if (!launch.input_error.ok()) {
    // An input that failed: every output carries its error (nothing can be compiled).
    std::vector<TensorHandle> handles;
    for (size_t i = 0; i < num_outputs; ++i) {
      auto entry = std::make_shared<TensorEntry>();
      entry->device = launch.target;
      entry->value = ready_future(launch.input_error);
      TD_ASSIGN_OR_RETURN(TensorHandle h, impl_->add(session, std::move(entry)));
      handles.push_back(h);
    }
    return handles;
  }
  std::vector<std::shared_ptr<std::promise<Result<DeviceTensor>>>> promises;
  std::vector<TensorHandle> handles;
  const auto& out_types = exe->output_types();
  for (size_t i = 0; i < out_types.size(); ++i) {
    auto entry = std::make_shared<TensorEntry>();
    entry->type = out_types[i].ok() ? *out_types[i] : TensorType{};
    entry->device = launch.target;
    auto p = std::make_shared<std::promise<Result<DeviceTensor>>>();
    entry->value = p->get_future().share();
    promises.push_back(std::move(p));
    TD_ASSIGN_OR_RETURN(TensorHandle h, impl_->add(session, std::move(entry)));
    handles.push_back(h);
  }
  DeviceSlot* slot = impl_->slots[launch.target].get();
  Impl* impl = impl_.get();
  Task task;
  task.session = session;
  task.tokens.session = launch.ref.token;
  std::shared_ptr<CallTrace> trace = call ? call->trace : nullptr;
  task.tokens.call = std::move(call);
  // The inputs are held until the outputs are computed, then dropped *before* the outputs
  // are published: whoever sees an output may rely on the inputs' bytes being let go (an
  // owner reusing memory lent with upload_external, byte counters back to 0).
  auto in = std::make_shared<std::vector<std::shared_ptr<TensorEntry>>>(std::move(launch.in));
  task.ready = [in] {
    for (const auto& e : *in)
      if (!is_ready(e->value)) return false;
    return true;
  };
  task.fn = [impl, slot, exe, in, promises, trace,
             counter = std::move(launch.ref.counter)](Frame& f) mutable {
    auto stamp = [](std::atomic<int64_t>& at) {
      at.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                   Clock::now().time_since_epoch())
                   .count(),
               std::memory_order_relaxed);
    };
    if (trace) stamp(trace->started_ns);
    std::vector<Result<DeviceTensor>> outs;
    if (Status c = f.cancelled(); !c.ok()) {
      outs.assign(promises.size(), c);  // dropped before it ran
    } else {
      try {
        std::vector<Result<DeviceTensor>> values;
        values.reserve(in->size());
        for (const auto& e : *in) values.push_back(e->value.get());
        Impl::Services services(impl, counter);
        outs = exe->run(values, services);
      } catch (const std::exception& e) {  // e.g. bad_alloc: an error on every output, no abort
        outs.assign(promises.size(),
                    errors::Internal("{}: execution failed: {}", slot->name(), e.what()));
      }
      if (f.preempted) return false;  // run again later from the start: nothing was set
      // Stopped part way: every output says why, not the step it stopped at.
      if (Status c = f.cancelled(); !c.ok()) outs.assign(promises.size(), c);
    }
    if (trace) stamp(trace->finished_ns);  // (before the outputs are published)
    in->clear();
    for (size_t i = 0; i < promises.size(); ++i) {
      if (i < outs.size()) {
        if (!outs[i].ok()) impl->m.node_errors++;
        promises[i]->set_value(std::move(outs[i]));
      } else {
        promises[i]->set_value(errors::Internal("executable produced {} of {} outputs",
                                                outs.size(), promises.size()));
      }
    }
    // The values now live in the tensors' futures only: a closed session frees them at once,
    // not when the queue gets round to destroying this task.
    promises.clear();
    return true;
  };
  // Only small results are worth running here: the caller waits for them; a graph with large
  // (or data-dependent) outputs may run long and execute() must stay asynchronous for it.
  if (here_if_idle) {
    int64_t out_bytes = 0;
    for (const auto& t : out_types) {
      auto n = t.ok() && shape_is_static(t->shape) ? checked_byte_size(t->dtype, t->shape)
                                                   : Result<int64_t>(errors::Internal("unknown"));
      out_bytes = n.ok() ? out_bytes + *n : INT64_MAX / 2;
    }
    if (out_bytes > kRunHereMaxOutputBytes) here_if_idle = false;
  }
  if (here_if_idle && trace) trace->on_caller.store(true, std::memory_order_relaxed);
  if (!here_if_idle || !slot->queue->run_here_if_idle(task)) {
    if (trace) trace->on_caller.store(false, std::memory_order_relaxed);
    slot->queue->push(std::move(task));
  }
  return handles;
}

Result<std::vector<TensorHandle>> Engine::execute(SessionId session, const Graph& graph,
                                                  const std::vector<TensorHandle>& inputs,
                                                  const std::string& device,
                                                  const CompileOptions& options,
                                                  bool run_here_if_idle,
                                                  std::shared_ptr<CancelToken> call) {
  if (inputs.size() != graph.inputs.size())
    return errors::InvalidArgument("execute: graph '{}' takes {} inputs, got {}", graph.name,
                                   graph.inputs.size(), inputs.size());
  TD_ASSIGN_OR_RETURN(Launch launch, prepare(session, inputs, device, false, 0, call.get()));
  std::shared_ptr<Executable> exe;
  if (launch.input_error.ok()) {
    TD_ASSIGN_OR_RETURN(exe, impl_->get_executable(launch.target, graph, launch.types, options,
                                                   launch.ref.counter));
  }
  {
    DeviceSlot& slot = *impl_->slots[launch.target];
    slot.graphs.fetch_add(1, std::memory_order_relaxed);
    slot.ops.fetch_add(static_cast<int64_t>(graph.nodes.size()), std::memory_order_relaxed);
  }
  return submit(session, std::move(launch), graph.outputs.size(), exe, run_here_if_idle,
                std::move(call));
}

Result<ModelHandle> Engine::load(SessionId session, const Graph& graph, const std::string& device,
                                 const CompileOptions& options) {
  TD_ASSIGN_OR_RETURN(size_t target, impl_->find_device(device));
  TD_RETURN_IF_ERROR(topological_order(graph).status());  // cycles, dangling names
  TD_ASSIGN_OR_RETURN(auto counter, impl_->counter(session));
  // The initializers stay with the model: they count against the session's quota.
  int64_t bytes = 0;
  for (const auto& [name, t] : graph.initializers) bytes += static_cast<int64_t>(t.nbytes());
  TD_RETURN_IF_ERROR(counter->charge(
      bytes, fmt::format("loading '{}' ({} of initializers)", graph.name, format_bytes(bytes))));
  auto model = std::make_shared<LoadedModel>();
  model->counter = counter;
  model->counted = bytes;
  model->graph = graph;
  model->device = target;
  model->options = options;
  const ModelHandle h = impl_->next_handle.fetch_add(1);
  std::lock_guard<std::mutex> lock(impl_->mu);
  TD_ASSIGN_OR_RETURN(Session* s, impl_->session_locked(session));
  s->models.emplace(h, std::move(model));
  return h;
}

Result<std::vector<TensorHandle>> Engine::run(SessionId session, ModelHandle model,
                                              const std::vector<TensorHandle>& inputs,
                                              bool run_here_if_idle,
                                              std::shared_ptr<CancelToken> call,
                                              const std::string& device) {
  std::shared_ptr<LoadedModel> m;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    TD_ASSIGN_OR_RETURN(const Session* s, impl_->session_locked(session));
    TD_ASSIGN_OR_RETURN(m, Impl::model_in(*s, model));
  }
  const Graph& graph = m->graph;
  if (inputs.size() != graph.inputs.size())
    return errors::InvalidArgument("run: model '{}' takes {} inputs, got {}", graph.name,
                                   graph.inputs.size(), inputs.size());
  size_t target = m->device;
  if (!device.empty()) {
    TD_ASSIGN_OR_RETURN(target, impl_->find_device(device));
  }
  const bool elsewhere = !device.empty();
  // The device's threads wake while the inputs are checked and the compiled form is found.
  if (target < impl_->slots.size()) impl_->slots[target]->device->expect_work();
  TD_ASSIGN_OR_RETURN(Launch launch, prepare(session, inputs, "", true, target, call.get()));
  std::shared_ptr<Executable> exe;
  if (launch.input_error.ok()) {
    // Run on another device (data parallel): compiled there, from the graph with its
    // declared first dimension left free.
    std::string key = elsewhere ? fmt::format("@{}/free0;", target) : std::string();
    for (const auto& t : launch.types) key += t.to_string() + ";";
    auto compile_form = [&](std::shared_ptr<CompileBudget> budget) {
      if (!elsewhere) return impl_->compile(m->device, graph, launch.types, m->options, budget);
      Graph free0 = graph;
      for (auto* list : {&free0.inputs, &free0.outputs})
        for (ValueInfo& v : *list)
          if (!v.type.shape.empty()) v.type.shape[0] = -1;
      return impl_->compile(target, free0, launch.types, m->options, budget);
    };
    std::vector<std::unique_ptr<LoadedModel::Form>> dead;  // destroyed after m->mu
    int64_t freed = 0;
    if (!m->counter) {
      // A named model: forms per tenant, charged to it, least recently used dropped first.
      const std::shared_ptr<SessionCounter>& session_counter = launch.ref.counter;
      std::shared_ptr<SessionCounter> tenant = session_counter ? session_counter->tenant : nullptr;
      const std::string tenant_name = tenant ? tenant->tenant_name : std::string();
      const std::string prefix = std::to_string(tenant_name.size()) + ":" + tenant_name + "|";
      key = prefix + key;
      // Not under m->mu while compiling: the other tenants' runs of the model (their forms
      // cached or not) go on while one tenant compiles a new form.
      auto count_mine = [&] {  // under m->mu
        size_t n = 0;
        for (const auto& [k, f] : m->forms) n += k.compare(0, prefix.size(), prefix) == 0;
        return n;
      };
      // Room among this tenant's forms of the model: its least recently used go (under m->mu).
      auto make_room = [&](size_t keep) {
        while (count_mine() > keep) {
          auto victim = m->forms.end();
          for (auto f = m->forms.begin(); f != m->forms.end(); ++f)
            if (f->first.compare(0, prefix.size(), prefix) == 0 &&
                (victim == m->forms.end() || f->second->used < victim->second->used))
              victim = f;
          freed += victim->second->counted +
                   (victim->second->exe ? victim->second->exe->held_bytes() : 0);
          dead.push_back(std::move(victim->second));
          m->forms.erase(victim);
        }
      };
      size_t mine = 0;
      {
        std::lock_guard<std::mutex> lock(m->mu);
        auto it = m->forms.find(key);
        if (it != m->forms.end() && it->second->tenant == tenant) {
          impl_->m.cache_hits++;
          it->second->used = ++m->tick;
          exe = it->second->exe;
        } else {
          make_room(impl_->named_forms_per_tenant - 1);
          mine = count_mine();
        }
      }
      if (!exe) {
        dead.clear();  // what made room goes before the new form's bytes come
        return_memory_to_system(freed);
        freed = 0;
        int64_t init = 0;
        for (const auto& [name, t] : graph.initializers) init += static_cast<int64_t>(t.nbytes());
        auto form = std::make_unique<LoadedModel::Form>();
        // The graph and its initializers are the model's (held once); a form costs its nodes.
        const int64_t bytes = std::max<int64_t>(0, estimate_executable_bytes(graph) - init);
        if (tenant) {
          TD_RETURN_IF_ERROR(tenant->charge(
              bytes, fmt::format("compiling named model '{}' for new input types ({} of its "
                                 "forms are this tenant's)",
                                 clip_text(graph.name, 200), mine)));
          form->tenant = tenant;
          form->counted = bytes;
        }
        TD_ASSIGN_OR_RETURN(
            Impl::CompileSlot slot,
            impl_->admit_compile(tenant, fmt::format("compiling named model '{}'",
                                                     clip_text(graph.name, 200))));
        auto compiled = compile_form(impl_->make_budget(tenant, nullptr));
        if (!compiled.ok()) return compiled.status();  // form uncharges
        impl_->m.compiles++;
        exe = std::shared_ptr<Executable>(std::move(compiled).value());
        form->exe = exe;
        std::lock_guard<std::mutex> lock(m->mu);
        auto it = m->forms.find(key);
        if (it != m->forms.end() && it->second->tenant == tenant) {
          // The same form, compiled meanwhile by another run of this tenant: keep that one.
          it->second->used = ++m->tick;
          exe = it->second->exe;
          freed += form->counted + form->exe->held_bytes();
          dead.push_back(std::move(form));
        } else {
          make_room(impl_->named_forms_per_tenant - 1);
          form->used = ++m->tick;
          m->forms[key] = std::move(form);
        }
      }
    } else {
      std::lock_guard<std::mutex> lock(m->mu);  // one compile per input types
      auto it = m->executables.find(key);
      if (it != m->executables.end()) {
        impl_->m.cache_hits++;
        exe = it->second;
      } else {
        // Each compiled form lives as long as the model and is charged with it: a per-node
        // cost here, its folded constants and prepared weights by its budget.
        if (m->executables.size() >= kMaxExecutablesPerModel)
          return errors::ResourceExhausted(
              "run: model '{}' has been compiled for {} different input types already (the "
              "limit); unload and load it again",
              graph.name, m->executables.size());
        const int64_t bytes = estimate_executable_bytes(graph);
        TD_RETURN_IF_ERROR(m->counter->charge(
            bytes, fmt::format("compiling model '{}' for new input types", graph.name)));
        m->counted += bytes;
        auto slot = impl_->admit_compile(m->counter->tenant,
                                         fmt::format("compiling model '{}' for new input types",
                                                     clip_text(graph.name, 200)));
        if (!slot.ok()) {
          m->counter->uncharge(bytes);
          m->counted -= bytes;
          return slot.status();
        }
        auto compiled = compile_form(impl_->make_budget(m->counter, m->counter));
        if (!compiled.ok()) {
          m->counter->uncharge(bytes);
          m->counted -= bytes;
          return compiled.status();
        }
        impl_->m.compiles++;
        exe = std::shared_ptr<Executable>(std::move(compiled).value());
        m->executables.emplace(key, exe);
      }
    }
    dead.clear();  // the forms evicted (their executables, unless a run still holds one)
    return_memory_to_system(freed);
  }
  {
    DeviceSlot& slot = *impl_->slots[launch.target];
    slot.graphs.fetch_add(1, std::memory_order_relaxed);
    slot.ops.fetch_add(static_cast<int64_t>(graph.nodes.size()), std::memory_order_relaxed);
  }
  return submit(session, std::move(launch), graph.outputs.size(), exe, run_here_if_idle,
                std::move(call));
}

Status Engine::unload(SessionId session, ModelHandle model) {
  std::shared_ptr<LoadedModel> dead;  // freed outside the lock
  std::lock_guard<std::mutex> lock(impl_->mu);
  TD_ASSIGN_OR_RETURN(Session* s, impl_->session_locked(session));
  TD_ASSIGN_OR_RETURN(dead, Impl::model_in(*s, model));
  s->models.erase(model);
  return OkStatus();
}

Status Engine::add_named_model(const Graph& graph, const std::string& device, ModelInfo info,
                               const CompileOptions& options, bool replace) {
  TD_ASSIGN_OR_RETURN(size_t target, impl_->find_device(device));
  TD_RETURN_IF_ERROR(topological_order(graph).status());  // cycles, dangling names
  auto model = std::make_shared<LoadedModel>();  // no counter: charged to nobody
  model->graph = graph;
  model->device = target;
  model->options = options;
  model->named = info.name;
  info.ready = true;
  info.reason.clear();
  info.device = impl_->slots[target]->name();
  info.inputs = graph.inputs;
  info.outputs = graph.outputs;
  info.weight_bytes = 0;
  for (const auto& [name, t] : graph.initializers)
    info.weight_bytes += static_cast<int64_t>(t.nbytes());
  std::shared_ptr<LoadedModel> old;  // dropped outside the lock (its forms uncharge tenants)
  std::lock_guard<std::mutex> lock(impl_->named_mu);
  auto it = impl_->named.find(info.name);
  if (it != impl_->named.end() && !replace)
    return Status(StatusCode::kAlreadyExists,
                  fmt::format("a named model '{}' is loaded already", info.name));
  model->serial = ++impl_->named_serial;
  const std::string name = info.name;
  if (it != impl_->named.end()) {
    old = std::move(it->second.model);
    it->second = Impl::NamedModel{std::move(info), std::move(model)};
  } else {
    impl_->named.emplace(name, Impl::NamedModel{std::move(info), std::move(model)});
  }
  return OkStatus();
}

Status Engine::add_named_alias(const std::string& alias, const std::string& target, bool replace) {
  std::lock_guard<std::mutex> lock(impl_->named_mu);
  auto it = impl_->named.find(target);
  if (it == impl_->named.end())
    return errors::NotFound("alias '{}': no named model '{}'", alias, target);
  auto at = impl_->named.find(alias);
  if (at != impl_->named.end() && !replace)
    return Status(StatusCode::kAlreadyExists,
                  fmt::format("a named model '{}' is loaded already", alias));
  Impl::NamedModel entry = it->second;  // the same LoadedModel: one graph, one set of forms
  entry.info.name = alias;
  if (at != impl_->named.end())
    at->second = std::move(entry);
  else
    impl_->named.emplace(alias, std::move(entry));
  return OkStatus();
}

std::vector<std::string> Engine::remove_named_models(const std::string& model) {
  std::vector<std::string> removed;
  std::vector<std::shared_ptr<LoadedModel>> dropped;  // freed outside the lock
  std::lock_guard<std::mutex> lock(impl_->named_mu);
  for (auto it = impl_->named.begin(); it != impl_->named.end();) {
    const std::string& n = it->first;
    if (n == model || (n.size() > model.size() + 1 && n.compare(0, model.size(), model) == 0 &&
                       n[model.size()] == ':')) {
      removed.push_back(n);
      dropped.push_back(std::move(it->second.model));
      it = impl_->named.erase(it);
    } else {
      ++it;
    }
  }
  return removed;
}

std::string Engine::named_model_of(SessionId session, ModelHandle model, uint64_t* serial) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (serial) *serial = 0;
  auto s = impl_->sessions.find(session);
  if (s == impl_->sessions.end()) return {};
  auto it = s->second.models.find(model);
  if (it == s->second.models.end() || !it->second) return {};
  if (serial) *serial = it->second->serial;
  return it->second->named;
}

void Engine::add_unavailable_model(ModelInfo info, bool replace) {
  info.ready = false;
  std::shared_ptr<LoadedModel> old;  // dropped outside the lock
  std::lock_guard<std::mutex> lock(impl_->named_mu);
  const std::string name = info.name;
  auto it = impl_->named.find(name);
  if (it == impl_->named.end()) {
    impl_->named.emplace(name, Impl::NamedModel{std::move(info), nullptr});
  } else if (replace) {
    old = std::move(it->second.model);
    it->second = Impl::NamedModel{std::move(info), nullptr};
  }  // else a loaded one stays
}

Result<ModelHandle> Engine::open_named_model(SessionId session, const std::string& name,
                                             ModelInfo* info) {
  std::shared_ptr<LoadedModel> model;
  {
    std::lock_guard<std::mutex> lock(impl_->named_mu);
    auto it = impl_->named.find(name);
    if (it == impl_->named.end()) {
      if (impl_->named.empty())
        return errors::NotFound(
            "no model named '{}': no named models are loaded (a broker loads them with "
            "`tensord serve --models DIR`; an embedded engine from TENSORD_MODELS)",
            name);
      std::string names;
      size_t listed = 0;
      for (const auto& [n, e] : impl_->named) {
        if (listed++ == 32) {
          names += fmt::format(" and {} more", impl_->named.size() - 32);
          break;
        }
        names += (names.empty() ? "'" : ", '") + n + "'";
      }
      return errors::NotFound("no model named '{}' (the models are {})", name, names);
    }
    if (!it->second.model)
      return errors::FailedPrecondition("model '{}' is unavailable: it failed to load: {}", name,
                                        it->second.info.reason);
    model = it->second.model;
    if (info) *info = it->second.info;
  }
  const ModelHandle h = impl_->next_handle.fetch_add(1);
  std::lock_guard<std::mutex> lock(impl_->mu);
  TD_ASSIGN_OR_RETURN(Session* s, impl_->session_locked(session));
  s->models.emplace(h, std::move(model));
  return h;
}

std::vector<ModelInfo> Engine::named_models() const {
  std::lock_guard<std::mutex> lock(impl_->named_mu);
  std::vector<ModelInfo> out;
  for (const auto& [name, e] : impl_->named) out.push_back(e.info);
  return out;
}

bool Engine::claim_models_source(const std::string& key) {
  std::lock_guard<std::mutex> lock(impl_->named_mu);
  return impl_->named_sources.insert(key).second;
}

Result<TensorHandle> Engine::copy(SessionId session, TensorHandle h, const std::string& device) {
  TD_ASSIGN_OR_RETURN(auto src, impl_->find_tensor(session, h));
  TD_ASSIGN_OR_RETURN(size_t dst, impl_->find_device(device));
  if (src->device == dst) {  // tensors are immutable: share the bytes
    impl_->m.copies_same++;
    return impl_->add(session, src);
  }
  TD_ASSIGN_OR_RETURN(SessionRef ref, impl_->ref(session));
  auto entry = std::make_shared<TensorEntry>();
  entry->type = src->type;
  entry->device = dst;
  entry->value = impl_->transfer(src, dst, ref);
  return impl_->add(session, std::move(entry));
}

Status Engine::release(SessionId session, TensorHandle h) {
  std::shared_ptr<TensorEntry> dead;  // freed outside the lock
  std::lock_guard<std::mutex> lock(impl_->mu);
  TD_ASSIGN_OR_RETURN(Session* s, impl_->session_locked(session));
  TD_ASSIGN_OR_RETURN(dead, Impl::tensor_in(*s, h));
  s->tensors.erase(h);
  return OkStatus();
}

EngineMetrics Engine::metrics() const {
  const auto& m = impl_->m;
  EngineMetrics out;
  out.executes = m.executes;
  out.compiles = m.compiles;
  out.compiles_waited = m.compiles_waited;
  out.cache_hits = m.cache_hits;
  out.uploads = m.uploads;
  out.reads = m.reads;
  out.copies_same_device = m.copies_same;
  out.copies_peer = m.copies_peer;
  out.copies_staged = m.copies_staged;
  out.copies_mapped = m.copies_mapped;
  out.bytes_host_to_device = m.bytes_host_to_device;
  out.bytes_device_to_host = m.bytes_device_to_host;
  out.bytes_peer = m.bytes_peer;
  out.bytes_staged = m.bytes_staged;
  out.fallback_nodes = m.fallback_nodes;
  {
    std::lock_guard<std::mutex> lock(impl_->fallback_mu);
    out.fallbacks = impl_->fallbacks;
  }
  out.implicit_moves = m.implicit_moves;
  out.node_errors = m.node_errors;
  const auto& q = impl_->queue_stats;
  out.tasks_cancelled = q.cancelled;
  out.tasks_nested = q.nested;
  out.tasks_preempted = q.preempted;
  out.busy_us = q.busy_us;
  // Per device: tensors held by sessions (by where they live), queue, work done.
  std::vector<int64_t> tensors(impl_->slots.size(), 0);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (const auto& [id, s] : impl_->sessions) {
      for (const auto& [h, t] : s.tensors)
        if (t && t->device < tensors.size()) tensors[t->device]++;
      out.models_loaded += static_cast<int64_t>(s.models.size());
    }
    out.sessions_open = static_cast<int64_t>(impl_->sessions.size());
  }
  {
    std::lock_guard<std::mutex> lock(impl_->cache_mu);
    out.executables_cached = static_cast<int64_t>(impl_->lru.size());
    out.executable_cache_bytes = impl_->cache_bytes;
  }
  for (size_t i = 0; i < impl_->slots.size(); ++i) {
    const DeviceSlot& slot = *impl_->slots[i];
    EngineMetrics::Device d;
    d.name = slot.name();
    d.kind = slot.device->info().kind;
    d.tensors = tensors[i];
    d.graphs = slot.graphs.load(std::memory_order_relaxed);
    d.ops = slot.ops.load(std::memory_order_relaxed);
    if (slot.queue) {
      d.queue_depth = slot.queue->depth();
      d.tasks = slot.queue->started();
      d.queue_wait_us = slot.queue->wait_us();
      d.busy_us = slot.queue->busy_us();
    }
    out.devices.push_back(std::move(d));
  }
  return out;
}

}  // namespace tensord
