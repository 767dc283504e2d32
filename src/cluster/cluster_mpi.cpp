// The cluster over MPI (see cluster.h). Protocol, all on MPI_COMM_WORLD (a duplicate):
//   rank r -> 0, tag kTagHello at start: rank r's device list.
//   0 -> r, tag kTagRequest: a request (Header + payload) naming a reply tag t unique to it;
//   bulk bytes of a write follow from 0 on tag t; the answer (code, message, payload) comes
//   back from r on tag t, followed by the bulk bytes of a read.
#include <mpi.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <cstdlib>
#include <thread>
#include <unordered_map>

#include "backend/backend.h"
#include "cluster/cluster.h"
#include "core/errors.h"
#include "core/log.h"
#include "engine/engine.h"
#include "engine/executor.h"
#include "engine/memory_pool.h"
#include "rpc/wire.h"

namespace tensord::cluster {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTagHello = 1;
constexpr int kTagRequest = 2;
constexpr int kFirstReplyTag = 16;
constexpr size_t kChunkBytes = size_t{8} << 20;

enum Op : uint32_t {
  kAlloc = 1, kFree, kWrite, kRead, kExec, kPing, kShutdown, kSendTo, kRecvFrom,
  kRegion,      // run a region compiled before (or now, from the graph sent along)
  kFreeRegion,  // forget a region
  kPeerDead,    // rank `a` is dead: give up transfers with it
};

struct Header {
  uint32_t op = 0;
  int32_t tag = 0;
  uint64_t a = 0, b = 0, c = 0;  // op-specific (handle, offset, bytes, device index)
};

// ---- byte strings --------------------------------------------------------------------------
struct Writer {
  std::string s;
  template <class T>
  void pod(const T& v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void str(const std::string& v) { pod<uint64_t>(v.size()); s += v; }
  void type(const TensorType& t) {
    pod<int32_t>(static_cast<int32_t>(t.dtype));
    pod<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) pod<int64_t>(d);
  }
};
struct Reader {
  const char* p;
  const char* end;
  bool ok = true;
  explicit Reader(const std::string& s) : p(s.data()), end(s.data() + s.size()) {}
  template <class T>
  T pod() {
    T v{};
    if (static_cast<size_t>(end - p) < sizeof v) { ok = false; return v; }
    std::memcpy(&v, p, sizeof v);
    p += sizeof v;
    return v;
  }
  std::string str() {
    auto n = pod<uint64_t>();
    if (!ok || static_cast<uint64_t>(end - p) < n) { ok = false; return {}; }
    std::string r(p, n);
    p += n;
    return r;
  }
  TensorType type() {
    TensorType t;
    t.dtype = static_cast<DType>(pod<int32_t>());
    uint32_t n = pod<uint32_t>();
    if (n > 64) { ok = false; return t; }
    for (uint32_t i = 0; i < n && ok; ++i) t.shape.push_back(pod<int64_t>());
    return t;
  }
};

void put_info(Writer& w, const DeviceInfo& d) {
  w.str(d.name); w.str(d.kind); w.pod<int32_t>(d.index); w.str(d.vendor); w.str(d.model);
  w.pod<int64_t>(d.memory_bytes); w.str(d.backend); w.str(d.backend_version);
  w.pod<int32_t>(d.threads); w.str(d.driver_version); w.pod<int32_t>(d.compute_units);
  w.pod<uint8_t>(d.fp16);
}
DeviceInfo get_info(Reader& r) {
  DeviceInfo d;
  d.name = r.str(); d.kind = r.str(); d.index = r.pod<int32_t>(); d.vendor = r.str();
  d.model = r.str(); d.memory_bytes = r.pod<int64_t>(); d.backend = r.str();
  d.backend_version = r.str(); d.threads = r.pod<int32_t>(); d.driver_version = r.str();
  d.compute_units = r.pod<int32_t>(); d.fp16 = r.pod<uint8_t>() != 0;
  return d;
}

// ---- MPI, with every wait a test loop --------------------------------------------------------
struct Mpi {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1, thread_level = 0;
  int tag_ub = 32767;
  std::mutex mu;  // held around each MPI call when the library is not MPI_THREAD_MULTIPLE
  std::atomic<bool> running{false};

  template <class F>
  int call(F&& f) {
    if (thread_level >= MPI_THREAD_MULTIPLE) return f();
    std::lock_guard<std::mutex> lock(mu);
    return f();
  }
  // Waits for `reqs` while `check` says OK; on an error the requests are abandoned (freed).
  // `busy`: never sleep between tests (bulk transfers: the library moves a large message only
  // while it is being progressed, so a sleeping waiter throttles it to a trickle).
  Status wait(std::vector<MPI_Request>& reqs, const std::function<Status()>& check,
              bool busy = false) {
    int spins = 0;
    for (;;) {
      int done = 0;
      int rc = call([&] {
        return MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE);
      });
      if (rc != MPI_SUCCESS) return errors::Unavailable("MPI error {} while waiting", rc);
      if (done) return OkStatus();
      Status s = check();
      if (!s.ok()) {
        // Cancelled first: a receive that never matched then never writes into a buffer the
        // caller is about to free (one already under way may still land: see Ping below).
        for (auto& r : reqs)
          if (r != MPI_REQUEST_NULL) {
            call([&] { return MPI_Cancel(&r); });
            call([&] { return MPI_Request_free(&r); });
          }
        return s;
      }
      if (busy || ++spins < 2000) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  // Receives one message of any size from `src` on `tag`.
  Result<std::string> recv(int src, int tag, const std::function<Status()>& check) {
    int spins = 0;
    for (;;) {
      int found = 0;
      MPI_Message msg;
      MPI_Status st;
      int rc = call([&] { return MPI_Improbe(src, tag, comm, &found, &msg, &st); });
      if (rc != MPI_SUCCESS) return errors::Unavailable("MPI error {} while receiving", rc);
      if (found) {
        int count = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        std::string out(static_cast<size_t>(count), '\0');
        rc = call([&] { return MPI_Mrecv(out.data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE); });
        if (rc != MPI_SUCCESS) return errors::Unavailable("MPI error {} while receiving", rc);
        return out;
      }
      TD_RETURN_IF_ERROR(check());
      if (++spins < 2000) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  Status send(const std::string& bytes, int dst, int tag, const std::function<Status()>& check) {
    std::vector<MPI_Request> req(1);
    int rc = call([&] {
      return MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, dst, tag, comm,
                       &req[0]);
    });
    if (rc != MPI_SUCCESS) return errors::Unavailable("MPI error {} while sending", rc);
    return wait(req, check);
  }
  // Bulk bytes in chunks, all posted at once (the transport pipelines them).
  Status send_bulk(const void* data, size_t bytes, int dst, int tag,
                   const std::function<Status()>& check) {
    std::vector<MPI_Request> reqs;
    for (size_t off = 0; off < bytes; off += kChunkBytes) {
      reqs.emplace_back();
      int n = static_cast<int>(std::min(kChunkBytes, bytes - off));
      int rc = call([&] {
        return MPI_Isend(static_cast<const char*>(data) + off, n, MPI_BYTE, dst, tag, comm,
                         &reqs.back());
      });
      if (rc != MPI_SUCCESS) { reqs.pop_back(); (void)wait(reqs, check); return errors::Unavailable("MPI error {} while sending", rc); }
    }
    return wait(reqs, check, /*busy=*/true);
  }
  Status recv_bulk(void* data, size_t bytes, int src, int tag,
                   const std::function<Status()>& check) {
    std::vector<MPI_Request> reqs;
    for (size_t off = 0; off < bytes; off += kChunkBytes) {
      reqs.emplace_back();
      int n = static_cast<int>(std::min(kChunkBytes, bytes - off));
      int rc = call([&] {
        return MPI_Irecv(static_cast<char*>(data) + off, n, MPI_BYTE, src, tag, comm, &reqs.back());
      });
      if (rc != MPI_SUCCESS) { reqs.pop_back(); (void)wait(reqs, check); return errors::Unavailable("MPI error {} while receiving", rc); }
    }
    return wait(reqs, check, /*busy=*/true);
  }
};

Mpi& mpi() {
  static Mpi m;
  return m;
}

std::string answer(const Status& s, const std::string& payload = {}) {
  Writer w;
  w.pod<int32_t>(static_cast<int32_t>(s.code()));
  w.str(s.message());
  w.s += payload;
  return w.s;
}
// The status in an answer; `rest` gets the payload.
Status parse_answer(const std::string& msg, std::string* rest) {
  Reader r(msg);
  auto code = r.pod<int32_t>();
  std::string message = r.str();
  if (!r.ok) return errors::Internal("cluster: a malformed answer ({} bytes)", msg.size());
  if (rest) rest->assign(r.p, r.end);
  if (code != 0) return Status(static_cast<StatusCode>(code), message);
  return OkStatus();
}

// ==== rank 0: peers and proxy devices ========================================================
struct Peer {
  int rank = 0;
  std::vector<DeviceInfo> devices;
  std::atomic<bool> dead{false};
  std::mutex mu;
  std::string why;
  Status status() {
    if (!dead.load(std::memory_order_acquire)) return OkStatus();
    std::lock_guard<std::mutex> lock(mu);
    return Status(StatusCode::kUnavailable, why);
  }
  void mark_dead(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu);
    if (dead.load()) return;
    why = reason;
    dead.store(true, std::memory_order_release);
    log::error(reason);
  }
};

struct Front {
  ClusterOptions options;
  std::vector<std::unique_ptr<Peer>> peers;  // index = rank (peers[0] unused)
  std::atomic<int> next_tag{kFirstReplyTag};
  std::atomic<bool> stopped{false};
  std::thread heartbeat;
  std::mutex hb_mu;
  std::condition_variable hb_cv;

  int new_tag() {
    const int span = std::max(mpi().tag_ub - kFirstReplyTag, 1024);
    return kFirstReplyTag + (next_tag.fetch_add(1) - kFirstReplyTag) % span;
  }
  std::function<Status()> alive(int rank) {
    Peer* p = peers[rank].get();
    return [this, p] {
      if (stopped.load()) return errors::Unavailable("the cluster has stopped");
      return p->status();
    };
  }
  // Sends a request and, unless `reply` is null, waits for its answer (payload to *reply).
  Status request(int rank, Header h, const std::string& payload, std::string* reply,
                 const void* bulk = nullptr, size_t bulk_bytes = 0) {
    auto check = alive(rank);
    TD_RETURN_IF_ERROR(check());
    std::string msg(reinterpret_cast<const char*>(&h), sizeof h);
    msg += payload;
    TD_RETURN_IF_ERROR(mpi().send(msg, rank, kTagRequest, check));
    if (bulk_bytes) TD_RETURN_IF_ERROR(mpi().send_bulk(bulk, bulk_bytes, rank, h.tag, check));
    if (!reply) return OkStatus();
    TD_ASSIGN_OR_RETURN(std::string ans, mpi().recv(rank, h.tag, check));
    return parse_answer(ans, reply);
  }
  void beat() {
    const auto period = std::max(options.timeout / 3, std::chrono::milliseconds(50));
    std::unique_lock<std::mutex> lock(hb_mu);
    while (!stopped.load()) {
      hb_cv.wait_for(lock, period);
      if (stopped.load()) break;
      lock.unlock();
      // One ping to every live rank, all outstanding at once, one deadline.
      struct Ping { int rank; int tag; std::string msg; std::vector<MPI_Request> reqs; char buf[64]; };
      std::vector<std::unique_ptr<Ping>> pings;
      for (size_t r = 1; r < peers.size(); ++r) {
        if (peers[r]->dead.load()) continue;
        auto p = std::make_unique<Ping>();
        p->rank = static_cast<int>(r);
        p->tag = new_tag();
        Header h{kPing, p->tag};
        p->msg.assign(reinterpret_cast<const char*>(&h), sizeof h);
        p->reqs.resize(2);
        mpi().call([&] { return MPI_Irecv(p->buf, sizeof p->buf, MPI_BYTE, p->rank, p->tag, mpi().comm, &p->reqs[0]); });
        mpi().call([&] { return MPI_Isend(p->msg.data(), static_cast<int>(p->msg.size()), MPI_BYTE, p->rank, kTagRequest, mpi().comm, &p->reqs[1]); });
        pings.push_back(std::move(p));
      }
      const auto deadline = Clock::now() + options.timeout;
      for (auto& p : pings) {
        const int rank = p->rank;
        Status s = mpi().wait(p->reqs, [&]() -> Status {
          if (stopped.load()) return errors::Unavailable("stopped");
          if (Clock::now() > deadline) return Status(StatusCode::kDeadlineExceeded, "no answer");
          return OkStatus();
        });
        if (!s.ok()) (void)p.release();  // a late answer may still land in it: kept for good
        if (!s.ok() && !stopped.load()) {
          std::string names;
          for (const auto& d : peers[rank]->devices)
            names += (names.empty() ? "" : ", ") + fmt::format("n{}/{}", rank, d.name);
          peers[rank]->mark_dead(fmt::format(
              "n{0} (MPI rank {0}) stopped answering: no heartbeat reply within {1} ms; its "
              "devices ({2}) are unavailable", rank, options.timeout.count(), names));
          // The others stop waiting for it in rank-to-rank copies.
          for (size_t r = 1; r < peers.size(); ++r) {
            if (peers[r]->dead.load()) continue;
            Header h{kPeerDead, 0, static_cast<uint64_t>(rank)};
            (void)request(static_cast<int>(r), h, {}, nullptr);
          }
        }
      }
      lock.lock();
    }
  }
};

Front* g_front = nullptr;
std::atomic<uint64_t> g_kernel_ids{1};

// A node run on another rank: shipped as a one-node graph, compiled and run there.
class ProxyKernel final : public Kernel {
 public:
  ProxyKernel(Device* device, int rank, uint32_t device_index, std::string graph,
              std::vector<int> input_slot, std::vector<int> output_of)
      : device_(device), rank_(rank), device_index_(device_index), graph_(std::move(graph)),
        input_slot_(std::move(input_slot)), output_of_(std::move(output_of)) {}
  std::string name() const override { return fmt::format("remote(n{})", rank_); }
  Status run(KernelCall& call) override;

 private:
  Device* device_;
  int rank_;
  uint32_t device_index_;
  std::string graph_;              // v1::Graph bytes
  std::vector<int> input_slot_;    // graph input i = call.inputs[input_slot_[i]]
  std::vector<int> output_of_;     // graph output i = call.outputs[output_of_[i]]
};

class ProxyKernels final : public KernelTable {
 public:
  ProxyKernels(Device* device, int rank, uint32_t index)
      : device_(device), rank_(rank), index_(index) {}
  Status supports(const Node& node, const std::vector<TensorType>& inputs,
                  const CompileOptions& options) const override {
    (void)inputs;
    (void)options;
    for (const auto& [k, a] : node.attrs)
      if (a.kind() == Attribute::Kind::kGraph)
        return errors::Unimplemented("{}: nodes with subgraphs do not run on another rank yet",
                                     node.label());
    return OkStatus();
  }
  Result<std::unique_ptr<Kernel>> create(const Node& node, const std::vector<TensorType>& inputs,
                                         const std::vector<TensorType>& outputs,
                                         const CompileOptions& options) const override {
    (void)outputs;
    (void)options;
    Graph g;
    g.name = node.label();
    std::vector<int> slot;
    std::map<std::string, size_t> seen;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const std::string& n = node.inputs[i];
      if (n.empty() || seen.count(n)) continue;
      seen[n] = g.inputs.size();
      g.inputs.push_back({n, i < inputs.size() ? inputs[i] : TensorType{}});
      slot.push_back(static_cast<int>(i));
    }
    std::vector<int> out_of;
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      if (node.outputs[i].empty()) continue;
      g.outputs.push_back({node.outputs[i], {}});
      out_of.push_back(static_cast<int>(i));
    }
    g.nodes.push_back(node);
    v1::Graph proto;
    rpc::to_proto(g, &proto);
    return std::unique_ptr<Kernel>(new ProxyKernel(device_, rank_, index_,
                                                   proto.SerializeAsString(), std::move(slot),
                                                   std::move(out_of)));
  }

 private:
  Device* device_;
  int rank_;
  uint32_t index_;
};

void put_tensor(Writer& w, const DeviceTensor& t) {
  w.type(t.type());
  w.pod<uint64_t>(t.buffer ? reinterpret_cast<uintptr_t>(t.buffer->ptr) : 0);
  w.pod<uint64_t>(t.buffer ? t.buffer->offset : 0);
  w.pod<uint64_t>(t.buffer ? t.buffer->size : 0);
}

// A fused region run on another rank: its subgraph (with its constants) is sent on the first
// run and compiled there, with that rank's own fusion; later runs send handles only. Outputs
// are the engine's buffers on the proxy device; the rank writes the results into them.
class ProxyRegion final : public RegionKernel {
 public:
  ProxyRegion(int rank, uint32_t device_index, std::string graph, size_t nodes, int64_t weights)
      : rank_(rank), device_index_(device_index), id_(g_kernel_ids.fetch_add(1)),
        graph_(std::move(graph)), nodes_(nodes), weights_(weights) {}
  ~ProxyRegion() override {
    if (!sent_.load() || !g_front || g_front->stopped.load()) return;
    Header h{kFreeRegion, 0, id_};
    (void)g_front->request(rank_, h, {}, nullptr);
  }
  Status run(const std::vector<DeviceTensor>& inputs, const std::vector<DeviceTensor>& outputs,
             Allocator& allocator) override {
    (void)allocator;
    Status s = send(inputs, outputs, !sent_.load());
    if (s.code() == StatusCode::kFailedPrecondition && sent_.load())
      s = send(inputs, outputs, true);  // the rank forgot it: send the graph again
    return s;
  }
  int64_t arena_bytes() const override { return 0; }
  int64_t weight_bytes() const override { return weights_; }
  std::string describe() const override {
    return fmt::format("remote region on n{}: {} nodes", rank_, nodes_);
  }

 private:
  Status send(const std::vector<DeviceTensor>& inputs, const std::vector<DeviceTensor>& outputs,
              bool with_graph) {
    Writer w;
    w.pod<uint64_t>(id_);
    w.str(with_graph ? graph_ : std::string());
    w.pod<uint32_t>(static_cast<uint32_t>(inputs.size()));
    for (const auto& t : inputs) put_tensor(w, t);
    w.pod<uint32_t>(static_cast<uint32_t>(outputs.size()));
    for (const auto& t : outputs) put_tensor(w, t);
    Header h{kRegion, g_front->new_tag(), device_index_};
    std::string reply;
    TD_RETURN_IF_ERROR(g_front->request(rank_, h, w.s, &reply));
    if (with_graph) sent_ = true;
    return OkStatus();
  }
  int rank_;
  uint32_t device_index_;
  uint64_t id_;
  std::string graph_;
  size_t nodes_;
  int64_t weights_;
  std::atomic<bool> sent_{false};
};

class ProxyRegionCompiler final : public RegionCompiler {
 public:
  ProxyRegionCompiler(int rank, uint32_t index) : rank_(rank), index_(index) {}
  std::vector<Region> compile(const FusionGraph& g, std::vector<std::string>* notes) override {
    // Every node placed here whose outputs have static types (the engine allocates them),
    // without subgraphs; partition_graph keeps each group acyclic.
    auto key = [&](size_t i, const std::vector<int>&) -> std::string {
      if (!g.placed_here[i]) return "";
      const Node& n = *g.nodes[i];
      for (const auto& [k, a] : n.attrs)
        if (a.kind() == Attribute::Kind::kGraph) return "";
      for (const auto& o : n.outputs) {
        if (o.empty()) continue;
        const TensorType* t = g.type_of(o);
        if (!t || !t->defined() || !shape_is_static(t->shape)) return "";
      }
      return "remote";
    };
    auto regions = partition_graph(g, key);
    for (auto& r : regions) {
      Graph sub;
      sub.name = fmt::format("region of {} nodes", r.members.size());
      int64_t weights = 0;
      for (const auto& in : r.inputs) {
        const TensorType* t = g.type_of(in);
        sub.inputs.push_back({in, t ? *t : TensorType{}});
      }
      for (size_t m : r.members) {
        const Node& n = *g.nodes[m];
        sub.nodes.push_back(n);
        for (const auto& in : n.inputs) {
          if (in.empty() || sub.initializers.count(in)) continue;
          if (const HostTensor* c = g.constant(in)) {
            sub.initializers[in] = *c;
            weights += c->nbytes();
          }
        }
      }
      for (const auto& out : r.outputs) sub.outputs.push_back({out, *g.type_of(out)});
      v1::Graph proto;
      rpc::to_proto(sub, &proto);
      r.kernel = std::make_unique<ProxyRegion>(rank_, index_, proto.SerializeAsString(),
                                               r.members.size(), weights);
    }
    if (notes && regions.empty()) notes->push_back(fmt::format("n{}: no region", rank_));
    return regions;
  }

 private:
  int rank_;
  uint32_t index_;
};

class ProxyDevice final : public Device {
 public:
  ProxyDevice(int rank, uint32_t index, DeviceInfo remote)
      : rank_(rank), index_(index), kernels_(this, rank, index), regions_(rank, index) {
    info_ = std::move(remote);
    info_.name = fmt::format("n{}/{}", rank, info_.name);
    info_.backend = fmt::format("mpi:{}", info_.backend);
  }
  const DeviceInfo& info() const override { return info_; }
  Result<void*> allocate(size_t bytes) override {
    Header h{kAlloc, g_front->new_tag(), index_, bytes};
    std::string reply;
    TD_RETURN_IF_ERROR(g_front->request(rank_, h, {}, &reply));
    Reader r(reply);
    auto id = r.pod<uint64_t>();
    if (!r.ok) return errors::Internal("cluster: a malformed allocation answer");
    return reinterpret_cast<void*>(static_cast<uintptr_t>(id));
  }
  void free(void* ptr, size_t bytes) override {
    (void)bytes;
    if (!g_front || g_front->stopped.load() || g_front->peers[rank_]->dead.load()) return;
    Header h{kFree, 0, reinterpret_cast<uintptr_t>(ptr)};
    (void)g_front->request(rank_, h, {}, nullptr);
  }
  Status write(const Buffer& dst, size_t offset, const void* src, size_t bytes) override {
    Header h{kWrite, g_front->new_tag(), reinterpret_cast<uintptr_t>(dst.ptr), dst.offset + offset,
             bytes};
    std::string reply;
    return g_front->request(rank_, h, {}, &reply, src, bytes);
  }
  Status read(const Buffer& src, size_t offset, void* dst, size_t bytes) override {
    Header h{kRead, g_front->new_tag(), reinterpret_cast<uintptr_t>(src.ptr), src.offset + offset,
             bytes};
    std::string reply;
    TD_RETURN_IF_ERROR(g_front->request(rank_, h, {}, &reply));
    return mpi().recv_bulk(dst, bytes, rank_, h.tag, g_front->alive(rank_));
  }
  const KernelTable& kernels() const override { return kernels_; }
  RegionCompiler* region_compiler() override {
    static const bool off = [] {
      const char* e = std::getenv("TENSORD_CLUSTER_REGIONS");
      return e && std::string(e) == "0";
    }();
    return off ? nullptr : &regions_;
  }
  // Rank to rank: the source rank sends straight to this one (no stop on rank 0).
  bool copy_from(const Buffer& dst, const Buffer& src) override;
  int rank() const { return rank_; }

 private:
  int rank_;
  uint32_t index_;
  DeviceInfo info_;
  ProxyKernels kernels_;
  ProxyRegionCompiler regions_;
};

bool ProxyDevice::copy_from(const Buffer& dst, const Buffer& src) {
  auto* from = dynamic_cast<ProxyDevice*>(src.device);
  if (!from || from->rank_ == rank_ || src.size < dst.size) return false;
  const int tag = g_front->new_tag();  // the data's tag, between the two ranks
  Writer to_dst, to_src;
  to_dst.pod<int32_t>(from->rank_);
  to_dst.pod<int32_t>(tag);
  to_src.pod<int32_t>(rank_);
  to_src.pod<int32_t>(tag);
  Header recv_h{kRecvFrom, g_front->new_tag(), reinterpret_cast<uintptr_t>(dst.ptr), dst.offset,
                dst.size};
  Header send_h{kSendTo, g_front->new_tag(), reinterpret_cast<uintptr_t>(src.ptr), src.offset,
                dst.size};
  if (!g_front->request(rank_, recv_h, to_dst.s, nullptr).ok()) return false;
  if (!g_front->request(from->rank_, send_h, to_src.s, nullptr).ok()) return false;
  auto both = [&]() -> Status {
    TD_RETURN_IF_ERROR(g_front->alive(rank_)());
    return g_front->alive(from->rank_)();
  };
  auto a = mpi().recv(from->rank_, send_h.tag, both);
  auto b = mpi().recv(rank_, recv_h.tag, both);
  if (!a.ok() || !b.ok()) return false;
  return parse_answer(*a, nullptr).ok() && parse_answer(*b, nullptr).ok();
}

// A remote buffer as rank 0 holds it: freed on its rank when the last reference goes.
std::shared_ptr<Buffer> remote_buffer(Device* device, int rank, uint64_t id, size_t offset,
                                      size_t size) {
  return std::shared_ptr<Buffer>(
      new Buffer{device, reinterpret_cast<void*>(static_cast<uintptr_t>(id)), size, offset},
      [](Buffer* b) {
        b->device->free(b->ptr, b->size);
        delete b;
      });
  (void)rank;
}

Status ProxyKernel::run(KernelCall& call) {
  Writer w;
  w.str(graph_);
  w.pod<uint32_t>(static_cast<uint32_t>(input_slot_.size()));
  for (int slot : input_slot_) {
    const DeviceTensor& t = call.inputs[static_cast<size_t>(slot)];
    w.type(t.type());
    w.pod<uint64_t>(t.buffer ? reinterpret_cast<uintptr_t>(t.buffer->ptr) : 0);
    w.pod<uint64_t>(t.buffer ? t.buffer->offset : 0);
    w.pod<uint64_t>(t.buffer ? t.buffer->size : 0);
  }
  Header h{kExec, g_front->new_tag(), device_index_};
  std::string reply;
  TD_RETURN_IF_ERROR(g_front->request(rank_, h, w.s, &reply));
  Reader r(reply);
  uint32_t n = r.pod<uint32_t>();
  if (!r.ok || n != output_of_.size())
    return errors::Internal("cluster: n{} answered {} outputs for {}", rank_, n, call.node->label());
  Status first;
  for (uint32_t i = 0; i < n; ++i) {
    auto code = r.pod<int32_t>();
    std::string message = r.str();
    TensorType type = r.type();
    auto id = r.pod<uint64_t>();
    auto offset = r.pod<uint64_t>();
    auto size = r.pod<uint64_t>();
    if (!r.ok) return errors::Internal("cluster: a malformed answer from n{}", rank_);
    if (code != 0) {
      if (first.ok()) first = Status(static_cast<StatusCode>(code), message);
      continue;
    }
    DeviceTensor& out = call.outputs[static_cast<size_t>(output_of_[i])];
    out.dtype = type.dtype;
    out.shape = type.shape;
    out.buffer = remote_buffer(device_, rank_, id, offset, size);
  }
  return first;
}

// ==== other ranks: the worker =================================================================
// Memory on a worker's device through the engine's caching allocator (a model's arena is
// not paid in page faults on every run).
class RawAllocator final : public Allocator {
 public:
  explicit RawAllocator(Device* d) : d_(d), pool_(std::make_shared<DevicePool>(d)) {}
  Result<std::shared_ptr<Buffer>> allocate(size_t bytes) override {
    TD_ASSIGN_OR_RETURN(DevicePool::Block b, pool_->allocate(std::max<size_t>(bytes, 1)));
    auto pool = pool_;
    return std::shared_ptr<Buffer>(new Buffer{d_, b.base, bytes, b.offset}, [pool, b](Buffer* p) {
      pool->free(b);
      delete p;
    });
  }

 private:
  Device* d_;
  std::shared_ptr<DevicePool> pool_;
};

class WorkerServices final : public RunServices {
 public:
  Allocator& allocator(Device& device) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto& a = allocators_[&device];
    if (!a) a = std::make_unique<RawAllocator>(&device);
    return *a;
  }
  Result<DeviceTensor> transfer(const DeviceTensor& v, Device& dst) override {
    if (v.buffer && v.buffer->device == &dst) return v;
    TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(v.dtype, v.shape));
    TD_ASSIGN_OR_RETURN(auto buf, allocator(dst).allocate(static_cast<size_t>(bytes)));
    if (bytes > 0) {
      std::vector<char> host(static_cast<size_t>(bytes));
      TD_RETURN_IF_ERROR(v.buffer->device->read(*v.buffer, 0, host.data(), host.size()));
      TD_RETURN_IF_ERROR(dst.write(*buf, 0, host.data(), host.size()));
    }
    return DeviceTensor{v.dtype, v.shape, buf};
  }

 private:
  std::mutex mu_;
  std::map<Device*, std::unique_ptr<RawAllocator>> allocators_;
};

// A fixed pool of threads for a rank's requests that never wait on another rank (alloc,
// write, read, exec, region): at most `n` run at once, the rest wait in arrival order.
class RequestPool {
 public:
  void start(size_t n) {
    for (size_t i = 0; i < n; ++i) threads_.emplace_back([this] { loop(); });
  }
  void push(std::function<void()> f) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(f));
    }
    cv_.notify_one();
  }
  // Stops taking work; joins the threads when `join` (all work done), else leaves them.
  void finish(bool join) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      if (!join) queue_.clear();  // the process is about to exit: start nothing more
    }
    cv_.notify_all();
    for (auto& t : threads_) join ? t.join() : t.detach();
    threads_.clear();
  }
  size_t size() const { return threads_.size(); }

 private:
  void loop() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        f = std::move(queue_.front());
        queue_.pop_front();
      }
      f();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

struct Worker {
  ClusterOptions options;
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<std::unique_ptr<Device>> devices;
  Device* host = nullptr;  // this rank's cpu:0 (constants, fallback)
  std::mutex mu;
  std::unordered_map<uint64_t, std::shared_ptr<Buffer>> handles;
  uint64_t next_handle = 1;
  std::mutex exe_mu;
  std::list<std::pair<std::string, std::shared_ptr<Executable>>> exe_lru;
  std::unordered_map<std::string, decltype(exe_lru)::iterator> exes;
  WorkerServices services;
  std::atomic<int> in_flight{0};
  // Waits on this rank give up only when it is shutting down (rank 0 watches the deadlines).
  std::atomic<bool> stopping{false};
  std::unique_ptr<std::atomic<bool>[]> peer_dead{new std::atomic<bool>[static_cast<size_t>(mpi().size)]{}};
  std::function<Status()> always_ok = [this] {
    return stopping.load() ? errors::Unavailable("cluster: n{} is shutting down", mpi().rank)
                           : OkStatus();
  };

  uint64_t add(std::shared_ptr<Buffer> b) {
    std::lock_guard<std::mutex> lock(mu);
    uint64_t id = next_handle++;
    handles[id] = std::move(b);
    return id;
  }
  Result<std::shared_ptr<Buffer>> find(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = handles.find(id);
    if (it == handles.end())
      return errors::NotFound("cluster: n{} has no buffer {}", mpi().rank, id);
    return it->second;
  }
  Result<Device*> device(uint64_t index) {
    if (index >= devices.size())
      return errors::NotFound("cluster: n{} has no device #{}", mpi().rank, index);
    return devices[index].get();
  }
  // A view of (handle, offset, size) as a buffer on this rank, keeping the handle's memory.
  Result<std::shared_ptr<Buffer>> view(uint64_t id, uint64_t offset, uint64_t size) {
    TD_ASSIGN_OR_RETURN(auto owner, find(id));
    if (offset > owner->size || size > owner->size - offset)
      return errors::OutOfRange("cluster: bytes [{}, {}) past buffer {} of {} bytes", offset,
                                offset + size, id, owner->size);
    return std::shared_ptr<Buffer>(
        new Buffer{owner->device, owner->ptr, size, owner->offset + offset},
        [owner](Buffer* b) { delete b; });
  }

  Result<std::string> handle(const Header& h, const std::string& payload) {
    switch (h.op) {
      case kAlloc: {
        TD_ASSIGN_OR_RETURN(Device* d, device(h.a));
        TD_ASSIGN_OR_RETURN(auto buf, services.allocator(*d).allocate(h.b));
        Writer w;
        w.pod<uint64_t>(add(std::move(buf)));
        return w.s;
      }
      case kWrite: {
        auto buf = view(h.a, h.b, h.c);
        // The bytes are on their way whatever happens: receive them first.
        std::vector<char> staging;
        void* dst = nullptr;
        if (buf.ok()) dst = (*buf)->device->host_pointer(**buf);
        if (!dst) { staging.resize(h.c); dst = staging.data(); }
        const auto t0 = Clock::now();
        TD_RETURN_IF_ERROR(mpi().recv_bulk(dst, h.c, 0, h.tag, always_ok));
        if (log::enabled(log::Level::kDebug))
          log::debug(fmt::format("cluster n{}: received {} bytes from rank 0 in {:.1f} ms",
                                 mpi().rank, h.c,
                                 std::chrono::duration<double, std::milli>(Clock::now() - t0).count()));
        if (!buf.ok()) return buf.status();
        if (!staging.empty())
          TD_RETURN_IF_ERROR((*buf)->device->write(**buf, 0, staging.data(), h.c));
        return std::string();
      }
      case kExec: return exec(h, payload);
      case kRegion: return region(h, payload);
      case kSendTo:
      case kRecvFrom: {
        Reader r(payload);
        int peer = r.pod<int32_t>();
        int tag = r.pod<int32_t>();
        if (!r.ok || peer <= 0 || peer >= mpi().size || peer == mpi().rank)
          return errors::InvalidArgument("cluster: a malformed copy request");
        auto with_peer = [this, peer]() -> Status {
          TD_RETURN_IF_ERROR(always_ok());
          if (peer_dead[static_cast<size_t>(peer)].load())
            return errors::Unavailable("cluster: n{} is dead (rank 0 says)", peer);
          return OkStatus();
        };
        auto buf = view(h.a, h.b, h.c);
        std::vector<char> staging;
        void* p = buf.ok() ? (*buf)->device->host_pointer(**buf) : nullptr;
        if (!p) { staging.resize(h.c); p = staging.data(); }
        if (h.op == kSendTo) {
          if (!buf.ok()) {  // still send: the receiver waits for the bytes
            (void)mpi().send_bulk(p, h.c, peer, tag, with_peer);
            return buf.status();
          }
          if (!staging.empty()) TD_RETURN_IF_ERROR((*buf)->device->read(**buf, 0, p, h.c));
          TD_RETURN_IF_ERROR(mpi().send_bulk(p, h.c, peer, tag, with_peer));
          return std::string();
        }
        TD_RETURN_IF_ERROR(mpi().recv_bulk(p, h.c, peer, tag, with_peer));
        if (!buf.ok()) return buf.status();
        if (!staging.empty()) TD_RETURN_IF_ERROR((*buf)->device->write(**buf, 0, p, h.c));
        return std::string();
      }
      default: return errors::InvalidArgument("cluster: unknown request {}", h.op);
    }
  }

  std::mutex region_mu;
  std::unordered_map<uint64_t, std::shared_ptr<Executable>> regions;

  Result<std::vector<Result<DeviceTensor>>> read_tensors(Reader& r, std::vector<TensorType>* types) {
    uint32_t n = r.pod<uint32_t>();
    std::vector<Result<DeviceTensor>> out;
    for (uint32_t i = 0; i < n && r.ok; ++i) {
      TensorType t = r.type();
      auto id = r.pod<uint64_t>();
      auto off = r.pod<uint64_t>();
      auto size = r.pod<uint64_t>();
      if (types) types->push_back(t);
      if (!t.defined()) { out.push_back(DeviceTensor{}); continue; }
      TD_ASSIGN_OR_RETURN(auto buf, view(id, off, size));
      out.push_back(DeviceTensor{t.dtype, t.shape, std::move(buf)});
    }
    if (!r.ok) return errors::InvalidArgument("cluster: a malformed request");
    return out;
  }

  Result<std::string> region(const Header& h, const std::string& payload) {
    TD_ASSIGN_OR_RETURN(Device* d, device(h.a));
    Reader r(payload);
    const uint64_t id = r.pod<uint64_t>();
    std::string graph_bytes = r.str();
    std::vector<TensorType> types;
    TD_ASSIGN_OR_RETURN(auto inputs, read_tensors(r, &types));
    TD_ASSIGN_OR_RETURN(auto outputs, read_tensors(r, nullptr));
    std::shared_ptr<Executable> exe;
    {
      std::lock_guard<std::mutex> lock(region_mu);
      auto it = regions.find(id);
      if (it != regions.end()) exe = it->second;
    }
    if (!exe) {
      if (graph_bytes.empty())
        return errors::FailedPrecondition("cluster: n{} does not know region {}", mpi().rank, id);
      v1::Graph proto;
      if (!proto.ParseFromString(graph_bytes))
        return errors::InvalidArgument("cluster: a malformed graph");
      TD_ASSIGN_OR_RETURN(Graph g, rpc::from_proto(proto));
      CompileTarget target;
      target.device = d;
      target.fallback = host;
      target.host = host;
      TD_ASSIGN_OR_RETURN(auto compiled, Executable::compile(g, types, target, CompileOptions{}));
      exe = std::shared_ptr<Executable>(std::move(compiled));
      if (log::enabled(log::Level::kDebug))
        log::debug(fmt::format("cluster n{}: compiled {} for {}: {}", mpi().rank, g.name,
                               d->info().name, exe->describe()));
      std::lock_guard<std::mutex> lock(region_mu);
      regions[id] = exe;
    }
    auto results = exe->run(inputs, services);
    if (results.size() != outputs.size())
      return errors::Internal("cluster: region {} made {} outputs, {} expected", id,
                              results.size(), outputs.size());
    for (size_t i = 0; i < results.size(); ++i) {
      if (!results[i].ok()) return results[i].status();
      if (!outputs[i].ok()) return outputs[i].status();
      const DeviceTensor& v = *results[i];
      const DeviceTensor& dst = *outputs[i];
      TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(v.dtype, v.shape));
      if (!dst.buffer || static_cast<int64_t>(dst.buffer->size) < bytes)
        return errors::Internal("cluster: region {} output {} does not fit", id, i);
      if (bytes == 0) continue;
      void* to = dst.buffer->device->host_pointer(*dst.buffer);
      void* from = v.buffer->device->host_pointer(*v.buffer);
      if (to && from) {
        std::memcpy(to, from, static_cast<size_t>(bytes));
      } else {
        std::vector<char> staging(static_cast<size_t>(bytes));
        TD_RETURN_IF_ERROR(v.buffer->device->read(*v.buffer, 0, staging.data(), staging.size()));
        TD_RETURN_IF_ERROR(dst.buffer->device->write(*dst.buffer, 0, staging.data(), staging.size()));
      }
    }
    return std::string();
  }

  Result<std::string> exec(const Header& h, const std::string& payload) {
    TD_ASSIGN_OR_RETURN(Device* d, device(h.a));
    Reader r(payload);
    std::string graph_bytes = r.str();
    uint32_t n = r.pod<uint32_t>();
    std::vector<Result<DeviceTensor>> inputs;
    std::vector<TensorType> types;
    std::string key = graph_bytes;
    for (uint32_t i = 0; i < n && r.ok; ++i) {
      TensorType t = r.type();
      auto id = r.pod<uint64_t>();
      auto off = r.pod<uint64_t>();
      auto size = r.pod<uint64_t>();
      key += shape_to_string(t.shape) + std::to_string(static_cast<int>(t.dtype));
      types.push_back(t);
      if (!t.defined()) { inputs.push_back(DeviceTensor{}); continue; }
      TD_ASSIGN_OR_RETURN(auto buf, view(id, off, size));
      inputs.push_back(DeviceTensor{t.dtype, t.shape, std::move(buf)});
    }
    if (!r.ok) return errors::InvalidArgument("cluster: a malformed exec request");
    std::shared_ptr<Executable> exe;
    {
      std::lock_guard<std::mutex> lock(exe_mu);
      key += "@" + std::to_string(h.a);
      auto it = exes.find(key);
      if (it != exes.end()) {
        exe_lru.splice(exe_lru.begin(), exe_lru, it->second);
        exe = it->second->second;
      }
    }
    if (!exe) {
      v1::Graph proto;
      if (!proto.ParseFromString(graph_bytes))
        return errors::InvalidArgument("cluster: a malformed graph");
      TD_ASSIGN_OR_RETURN(Graph g, rpc::from_proto(proto));
      for (size_t i = 0; i < g.inputs.size() && i < types.size(); ++i) g.inputs[i].type = types[i];
      CompileTarget target;
      target.device = d;
      target.fallback = host;
      target.host = host;
      TD_ASSIGN_OR_RETURN(auto compiled, Executable::compile(g, types, target, CompileOptions{}));
      exe = std::shared_ptr<Executable>(std::move(compiled));
      if (log::enabled(log::Level::kDebug))
        log::debug(fmt::format("cluster n{}: compiled '{}' for {}: {}", mpi().rank, g.name,
                               d->info().name, exe->describe()));
      std::lock_guard<std::mutex> lock(exe_mu);
      exe_lru.emplace_front(key, exe);
      exes[key] = exe_lru.begin();
      while (exe_lru.size() > 1024) {
        exes.erase(exe_lru.back().first);
        exe_lru.pop_back();
      }
    }
    auto outs = exe->run(inputs, services);
    Writer w;
    w.pod<uint32_t>(static_cast<uint32_t>(outs.size()));
    for (auto& o : outs) {
      if (!o.ok()) {
        w.pod<int32_t>(static_cast<int32_t>(o.status().code()));
        w.str(o.status().message());
        w.type({});
        w.pod<uint64_t>(0); w.pod<uint64_t>(0); w.pod<uint64_t>(0);
        continue;
      }
      // On another of this rank's devices (a fallback)? Bring it to the requested one.
      DeviceTensor v = *o;
      if (v.buffer && v.buffer->device != d) {
        auto moved = services.transfer(v, *d);
        if (!moved.ok()) {
          w.pod<int32_t>(static_cast<int32_t>(moved.status().code()));
          w.str(moved.status().message());
          w.type({});
          w.pod<uint64_t>(0); w.pod<uint64_t>(0); w.pod<uint64_t>(0);
          continue;
        }
        v = *moved;
      }
      w.pod<int32_t>(0);
      w.str({});
      w.type(v.type());
      uint64_t off = v.buffer ? v.buffer->offset : 0;
      uint64_t size = v.buffer ? v.buffer->size : 0;
      // The handle is the buffer object itself (a view keeps its owner alive); rank 0 names
      // it with offset 0 relative to it.
      w.pod<uint64_t>(add(v.buffer));
      (void)off;
      w.pod<uint64_t>(0);
      w.pod<uint64_t>(size);
    }
    return w.s;
  }

  RequestPool pool;

  int serve() {
    Mpi& m = mpi();
    // Requests run on a fixed pool (TENSORD_CLUSTER_THREADS, default: the cores, at least 4).
    size_t threads = std::max(4u, std::thread::hardware_concurrency());
    if (const char* env = std::getenv("TENSORD_CLUSTER_THREADS"); env && std::atoi(env) > 0)
      threads = static_cast<size_t>(std::atoi(env));
    pool.start(std::min<size_t>(threads, 256));
    auto last_ping = Clock::now();
    int spins = 0;
    for (;;) {
      int found = 0;
      MPI_Message msg;
      MPI_Status st;
      int rc = m.call([&] { return MPI_Improbe(0, kTagRequest, m.comm, &found, &msg, &st); });
      if (rc != MPI_SUCCESS) {
        log::error(fmt::format("cluster n{}: MPI error {} waiting for requests; exiting", m.rank, rc));
        return 1;
      }
      if (!found) {
        if (Clock::now() - last_ping > 3 * options.timeout) {
          log::error(fmt::format("cluster n{}: rank 0 has not pinged for {} ms; exiting", m.rank,
                                 3 * options.timeout.count()));
          return 1;
        }
        // Idle: spin briefly, then back off (an idle rank must not take a core).
        ++spins;
        if (spins < 2000) std::this_thread::yield();
        else std::this_thread::sleep_for(std::chrono::microseconds(spins < 20000 ? 50 : 500));
        continue;
      }
      spins = 0;
      int count = 0;
      MPI_Get_count(&st, MPI_BYTE, &count);
      std::string buf(static_cast<size_t>(count), '\0');
      m.call([&] { return MPI_Mrecv(buf.data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE); });
      Header h;
      if (buf.size() < sizeof h) continue;
      std::memcpy(&h, buf.data(), sizeof h);
      std::string payload = buf.substr(sizeof h);
      if (h.op == kPing) {
        last_ping = Clock::now();
        char pong = 1;
        m.call([&] { return MPI_Send(&pong, 1, MPI_BYTE, 0, h.tag, m.comm); });
        continue;
      }
      if (h.op == kShutdown) break;
      if (h.op == kPeerDead) {
        if (h.a > 0 && h.a < static_cast<uint64_t>(m.size)) peer_dead[h.a] = true;
        continue;
      }
      if (h.op == kFreeRegion) {
        std::lock_guard<std::mutex> lock(region_mu);
        regions.erase(h.a);
        continue;
      }
      if (h.op == kFree) {
        std::shared_ptr<Buffer> drop;
        std::lock_guard<std::mutex> lock(mu);
        auto it = handles.find(h.a);
        if (it != handles.end()) { drop = std::move(it->second); handles.erase(it); }
        continue;
      }
      if (h.op == kRead) {
        ++in_flight;
        pool.push([this, h] {
          auto buf = view(h.a, h.b, h.c);
          std::vector<char> staging;
          const void* src = nullptr;
          Status s = buf.status();
          if (s.ok()) {
            src = (*buf)->device->host_pointer(**buf);
            if (!src) {
              staging.resize(h.c);
              s = (*buf)->device->read(**buf, 0, staging.data(), h.c);
              src = staging.data();
            }
          }
          (void)mpi().send(answer(s), 0, h.tag, always_ok);
          if (s.ok()) (void)mpi().send_bulk(src, h.c, 0, h.tag, always_ok);
          --in_flight;
        });
        continue;
      }
      ++in_flight;
      auto work = [this, h, payload = std::move(payload)] {
        auto result = handle(h, payload);
        (void)mpi().send(result.ok() ? answer(OkStatus(), *result) : answer(result.status()), 0,
                         h.tag, always_ok);
        --in_flight;
      };
      // A copy between ranks waits for its partner request on the peer: a pool full of such
      // waits on both ranks could queue the partners forever (a deadlock across ranks), so
      // each keeps a thread of its own (rank 0 bounds how many copies are in flight).
      if (h.op == kSendTo || h.op == kRecvFrom) std::thread(std::move(work)).detach();
      else pool.push(std::move(work));
    }
    stopping = true;  // requests still in flight (a peer that died mid-copy) give up
    const auto deadline = Clock::now() + options.timeout;
    while (in_flight.load() > 0 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const bool drained = in_flight.load() == 0;
    pool.finish(drained);
    return drained ? 0 : 1;
  }
};

bool g_started = false;

}  // namespace

bool built_with_mpi() { return true; }

Result<Started> start(const ClusterOptions& options) {
  if (g_started) return errors::FailedPrecondition("cluster: already started");
  g_started = true;
  Mpi& m = mpi();
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    return errors::Unavailable("cluster: MPI_Init_thread failed");
  m.thread_level = provided;
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Abort(MPI_COMM_WORLD, 1);
    return errors::FailedPrecondition("cluster: the MPI library gives thread level {}", provided);
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &m.comm);
  MPI_Comm_set_errhandler(m.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(m.comm, &m.rank);
  MPI_Comm_size(m.comm, &m.size);
  int flag = 0;
  int* ub = nullptr;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  if (flag && ub) m.tag_ub = *ub;
  m.running = true;
  Started started{m.rank, m.size, -1};

  if (m.rank != 0) {
    Worker w;
    w.options = options;
    w.backends = create_backends();
    const std::string filter = EngineOptions::from_env().device_filter;
    for (auto& b : w.backends) {
      if (!b->check_settings().ok()) continue;
      for (auto& d : b->enumerate()) {
        const DeviceInfo& info = d->info();
        if (info.name == "cpu:0") w.host = d.get();
        if (info.name != "cpu:0" && !device_matches_filter(info.name, info.kind, filter)) continue;
        w.devices.push_back(std::move(d));
      }
    }
    Writer hello;
    hello.pod<uint32_t>(static_cast<uint32_t>(w.devices.size()));
    for (const auto& d : w.devices) put_info(hello, d->info());
    MPI_Send(hello.s.data(), static_cast<int>(hello.s.size()), MPI_BYTE, 0, kTagHello, m.comm);
    log::info(fmt::format("cluster n{}: serving {} device(s) for rank 0", m.rank, w.devices.size()));
    // The broker blocked SIGTERM/SIGINT for its sigwait; a worker has none: let mpirun's
    // SIGTERM end it.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
    started.exit_code = w.serve();
    w.handles.clear();
    m.running = false;
    if (started.exit_code == 0) MPI_Finalize();
    return started;
  }

  auto* front = new Front();
  front->options = options;
  front->peers.resize(static_cast<size_t>(m.size));
  for (int r = 0; r < m.size; ++r) {
    front->peers[static_cast<size_t>(r)] = std::make_unique<Peer>();
    front->peers[static_cast<size_t>(r)]->rank = r;
  }
  for (int i = 1; i < m.size; ++i) {
    MPI_Status st;
    MPI_Probe(MPI_ANY_SOURCE, kTagHello, m.comm, &st);
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    std::string buf(static_cast<size_t>(count), '\0');
    MPI_Recv(buf.data(), count, MPI_BYTE, st.MPI_SOURCE, kTagHello, m.comm, MPI_STATUS_IGNORE);
    Reader r(buf);
    uint32_t n = r.pod<uint32_t>();
    auto& peer = *front->peers[static_cast<size_t>(st.MPI_SOURCE)];
    for (uint32_t k = 0; k < n && r.ok; ++k) peer.devices.push_back(get_info(r));
    if (!r.ok) return errors::Internal("cluster: a malformed device list from rank {}", st.MPI_SOURCE);
  }
  g_front = front;
  set_local_node_prefix("n0/");
  class ProxyBackend final : public Backend {
   public:
    std::string name() const override { return "mpi"; }
    std::string version() const override {
      char v[MPI_MAX_LIBRARY_VERSION_STRING];
      int len = 0;
      MPI_Get_library_version(v, &len);
      std::string s(v, static_cast<size_t>(len));
      return s.substr(0, s.find_first_of(",\n"));
    }
    std::vector<std::unique_ptr<Device>> enumerate() override {
      std::vector<std::unique_ptr<Device>> out;
      for (size_t r = 1; r < g_front->peers.size(); ++r)
        for (size_t i = 0; i < g_front->peers[r]->devices.size(); ++i)
          out.push_back(std::make_unique<ProxyDevice>(static_cast<int>(r), static_cast<uint32_t>(i),
                                                      g_front->peers[r]->devices[i]));
      return out;
    }
  };
  add_backend_factory([] { return std::make_unique<ProxyBackend>(); });
  front->heartbeat = std::thread([front] { front->beat(); });
  return started;
}

void stop() {
  Front* f = g_front;
  if (!f || f->stopped.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(f->hb_mu);
    f->hb_cv.notify_all();
  }
  if (f->heartbeat.joinable()) f->heartbeat.join();
  bool any_dead = false;
  for (size_t r = 1; r < f->peers.size(); ++r) {
    if (f->peers[r]->dead.load()) { any_dead = true; continue; }
    Header h{kShutdown};
    std::string msg(reinterpret_cast<const char*>(&h), sizeof h);
    const auto deadline = Clock::now() + f->options.timeout;
    Status s = mpi().send(msg, static_cast<int>(r), kTagRequest, [&]() -> Status {
      return Clock::now() > deadline ? Status(StatusCode::kDeadlineExceeded, "shutdown") : OkStatus();
    });
    if (!s.ok()) any_dead = true;
  }
  mpi().running = false;
  if (!any_dead) MPI_Finalize();
}

std::string describe() {
  Mpi& m = mpi();
  if (!g_front) return "not in a cluster";
  std::string out = fmt::format("{} rank(s), MPI thread level {}", m.size,
                                m.thread_level >= MPI_THREAD_MULTIPLE ? "multiple" : "serialized");
  for (size_t r = 1; r < g_front->peers.size(); ++r)
    out += fmt::format("; n{}: {} device(s){}", r, g_front->peers[r]->devices.size(),
                       g_front->peers[r]->dead.load() ? " (dead)" : "");
  return out;
}

}  // namespace tensord::cluster
