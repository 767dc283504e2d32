// The broker's service, private to src/rpc: the gRPC method handlers (service.cpp), streamed
// uploads and downloads (transfers.cpp), shared-memory regions
// (shared_memory.cpp), and the session table with its leases, tenants and tokens
// (sessions.cpp). server.cpp starts and stops it (rpc/server.h is the public entry).
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/auth_metadata_processor.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <list>
#include <map>
#include <memory>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "core/log.h"
#include "engine/engine.h"
#include "rpc/batcher.h"
#include "rpc/monitor.h"
#include "rpc/region_channel.h"
#include "rpc/shm_arena.h"
#include "rpc/server.h"
#include "rpc/wire.h"
#include "tensord.grpc.pb.h"

namespace tensord::rpc::server_impl {

using Clock = std::chrono::steady_clock;

// A client's shared-memory region, mapped into the broker. Held by shared_ptr so that a
// transfer in progress keeps it mapped through a concurrent UnregisterRegion or session end.
//
// Threat model. A region is registered only by the client handing the broker its own
// descriptor (SCM_RIGHTS on the region socket, redeemed with a one-time ticket that belongs to
// the session: rpc/region_channel.h), never by a path, so a session can map nothing but
// memory it holds itself: not another session's region, not the broker's own descriptors, not
// a file. The descriptor must be a memfd (tmpfs; not hugetlbfs, whose faults can fail) sealed
// with F_SEAL_SHRINK, checked on the descriptor the broker holds: seals are never removed,
// so the file can never become shorter than the mapping and no copy in or out can SIGBUS,
// whatever the client does to its file meanwhile (ftruncate fails with EPERM).
// What a client can still do with its own region: write it at any time, including while the
// broker copies from it (it gets torn values in its own tensor) or computes on it in place
// (a lent region: only float dtypes are computed in place, so no kernel reads an index, a size
// or a shape from client-writable memory; the client spoils only its own results). A region
// id means something only in the session that registered it (others get NOT_FOUND).
//
// Address space. A sealed memfd of 1 TiB costs its owner nothing until written, but mapping it
// takes 1 TiB of the broker's address space: a few hundred such regions would leave the broker
// unable to map anything (gRPC's allocator, thread stacks: it dies). So mapped regions are
// bounded broker-wide, in bytes and in number (RegionBudget: RpcServerOptions::max_region_bytes,
// max_regions; one tenant at most half of either when there are several), and count by their
// mapped size against the session's and the tenant's memory limits (less the bytes lent to
// tensors, which the engine counts already).
struct RegionBudget {
  std::atomic<int64_t> bytes{0};
  std::atomic<int64_t> count{0};
  // Takes one region of `n` bytes when it fits under both limits (each > 0).
  bool take(int64_t n, int64_t max_bytes, int64_t max_count) {
    if (count.fetch_add(1) + 1 > max_count) {
      count.fetch_sub(1);
      return false;
    }
    if (bytes.fetch_add(n) + n > max_bytes) {
      bytes.fetch_sub(n);
      count.fetch_sub(1);
      return false;
    }
    return true;
  }
  void give_back(int64_t n) {
    bytes.fetch_sub(n);
    count.fetch_sub(1);
  }
};

struct Region {
  unsigned char* base = nullptr;
  int64_t size = 0;
  std::string name;  // the memfd's name (the client's choice), for messages to its session
  // Tensors computing on the region's bytes where they are (UploadRegionRequest.lend), and
  // their bytes (counted by the engine: not charged again as the region's).
  std::atomic<int64_t> lent{0};
  std::atomic<int64_t> lent_bytes{0};
  // The budgets the mapping was taken from (the broker's, the tenant's), given back once it
  // is unmapped: when the last transfer or lent tensor over the region has gone.
  std::shared_ptr<RegionBudget> broker_budget, tenant_budget;
  ~Region() {
    if (base) munmap(base, static_cast<size_t>(size));
    if (broker_budget) broker_budget->give_back(size);
    if (tenant_budget) tenant_budget->give_back(size);
  }
  // What the region costs its session's and tenant's memory limits: its mapped size, less
  // the bytes lent tensors hold (charged to the session by the engine).
  int64_t charged() const { return std::max<int64_t>(0, size - lent_bytes.load()); }
  // The engine counts charged() against the session's and tenant's limits too (its own
  // allocation checks), through the session's ExternalBytes, while the region is registered:
  // attach() at RegisterRegion, detach() at UnregisterRegion and when the session closes;
  // lend()/unlend() as tensors over the region come and go (a Pin, possibly after detach).
  void attach(std::shared_ptr<ExternalBytes> e) {
    std::lock_guard<std::mutex> lock(ext_mu_);
    ext_ = std::move(e);
    sync_locked();
  }
  void detach() {
    std::lock_guard<std::mutex> lock(ext_mu_);
    if (ext_) ext_->add(-contributed_);
    contributed_ = 0;
    ext_.reset();
  }
  void lend(int64_t n) {
    std::lock_guard<std::mutex> lock(ext_mu_);
    lent.fetch_add(1);
    lent_bytes.fetch_add(n);
    sync_locked();
  }
  void unlend(int64_t n) {
    std::lock_guard<std::mutex> lock(ext_mu_);
    lent_bytes.fetch_sub(n);
    lent.fetch_sub(1);
    sync_locked();
  }
  // The bytes [offset, offset + n) of the region, or why not. The file is sealed against
  // shrinking: the whole mapping stays backed, so the bounds are all there is to check. (The
  // message names the start and the length: their sum may not fit in 64 bits.)
  Result<unsigned char*> span(int64_t offset, int64_t n, const char* what) const {
    if (offset < 0 || n < 0 || offset > size || n > size - offset)
      return errors::OutOfRange(
          "{}: {} bytes at offset {} are outside shared-memory region '{}' of {} bytes", what, n,
          offset, name, size);
    return base + offset;
  }

 private:
  void sync_locked() {
    if (!ext_) return;
    const int64_t c = charged();
    ext_->add(c - contributed_);
    contributed_ = c;
  }
  std::mutex ext_mu_;  // a leaf: only atomics under it
  std::shared_ptr<ExternalBytes> ext_;
  int64_t contributed_ = 0;  // what ext_ holds of this region
};

// A parallel upload in progress (BeginUpload .. FinishUpload): the bytes, and the parts received.
struct PendingUpload {
  v1::UploadHeader header;
  int64_t size = 0;
  std::shared_ptr<unsigned char> block;
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> parts;  // [begin, end) of each finished part
};

struct SessionState {
  SessionId engine_session = 0;
  int64_t memory_limit = 0;
  std::string tenant;         // whose token opened it; only that tenant's calls find it
  std::string peer;           // the client's address at OpenSession (for the log)
  int64_t pending_bytes = 0;  // upload blocks being filled and staged models, not yet tensors
  Clock::time_point last_seen;
  Clock::time_point opened = Clock::now();  // for the status page
  int in_flight = 0;
  std::unordered_map<uint64_t, std::shared_ptr<Region>> regions;
  uint64_t next_region = 1;
  // Bytes of its regions charged to its memory limits (Region::charged).
  int64_t region_bytes() const {
    int64_t n = 0;
    for (const auto& [id, r] : regions) n += r->charged();
    return n;
  }
  std::shared_ptr<ShmArena> arena;  // OpenArena: where its large cpu values live
  std::unordered_map<uint64_t, std::shared_ptr<PendingUpload>> uploads;
  uint64_t next_upload = 1;
};

constexpr size_t kMaxPendingUploads = 8;

// A new session id: 128 bits from the kernel's CSPRNG, as 32 lowercase hex characters.
Result<std::string> new_session_id();

// The broker's tokens, each naming a tenant. The token a call presents is compared with every
// token, in time independent of where they differ (and of which one matches).
class Tenants {
 public:
  explicit Tenants(const RpcServerOptions& o) {
    if (!o.token.empty()) list_.push_back({"default", "Bearer " + o.token, true});
    for (const auto& t : o.tenants)
      list_.push_back({t.name, "Bearer " + t.token, t.is_operator});
  }
  bool required() const { return !list_.empty(); }

  // The tenant whose token the metadata carries ("" when no token is required).
  Result<std::string> authenticate(
      const std::multimap<grpc::string_ref, grpc::string_ref>& md) const {
    bool op = false;
    return authenticate(md, &op);
  }
  // The same, and whether the token is an operator's (true when no token is required).
  Result<std::string> authenticate(const std::multimap<grpc::string_ref, grpc::string_ref>& md,
                                   bool* is_operator) const {
    *is_operator = list_.empty();
    if (list_.empty()) return std::string();
    auto it = md.find(kAuthKey);
    if (it == md.end())
      return Status(StatusCode::kUnauthenticated,
                    "this broker requires a token: set TENSORD_TOKEN (sent as the metadata "
                    "'authorization: Bearer <token>')");
    const grpc::string_ref got = it->second;
    size_t match = list_.size();
    for (size_t k = 0; k < list_.size(); ++k) {
      const std::string& want = list_[k].header;
      unsigned char diff = got.size() == want.size() ? 0 : 1;
      for (size_t i = 0; i < want.size(); ++i)
        diff |= static_cast<unsigned char>(want[i] ^ (i < got.size() ? got.data()[i] : 0));
      if (diff == 0) match = k;
    }
    if (match == list_.size())
      return Status(StatusCode::kUnauthenticated,
                    "wrong token: the broker refused the 'authorization' metadata (check "
                    "TENSORD_TOKEN against the broker's --token-file)");
    *is_operator = list_[match].is_operator;
    return list_[match].name;
  }

 private:
  struct Entry {
    std::string name, header;
    bool is_operator = false;
  };
  std::vector<Entry> list_;
};

// Checks the token while the call's headers are read, before gRPC takes its message: a call
// with a wrong token is refused without its (possibly huge) message being buffered. gRPC runs
// it only for secure server credentials (TLS, or "local" ones for loopback and unix sockets).
// It only refuses: the auth context gRPC hands it belongs to the connection, shared by every
// call on it (whatever their tokens), so the methods find the call's tenant from its own
// metadata again.
class TokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenProcessor(std::shared_ptr<const Tenants> tenants) : tenants_(std::move(tenants)) {}
  bool IsBlocking() const override { return false; }  // a comparison in memory
  grpc::Status Process(const InputMetadata& md, grpc::AuthContext* context,
                       OutputMetadata* consumed, OutputMetadata* response) override {
    auto tenant = tenants_->authenticate(md);
    if (!tenant.ok()) {
      // Refused before the call reaches the service (and its log interceptor): logged here.
      auto path = md.find(":path");
      log::warn("request failed",
                {{"method", path == md.end() ? std::string("?")
                                             : std::string(path->second.data(),
                                                           path->second.size())},
                 {"code", "UNAUTHENTICATED"},
                 {"message", tenant.status().message()}});
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, tenant.status().message());
    }
    return grpc::Status::OK;
  }

 private:
  std::shared_ptr<const Tenants> tenants_;
};

constexpr int kMaxRegionsPerSession = 256;

// Host memory for a transfer's bytes: at least `bytes`, 64-byte aligned, or null when the host
// has none. A streamed upload is received straight into one, which then becomes the tensor's
// storage (Engine::upload_external: no second copy). Large blocks come from the process-wide
// cache of core/host_blocks.h: whole 2 MiB pieces on transparent huge pages, recycled when the
// tensor goes, so the next transfer of a similar size writes to warm memory instead of faulting
// in fresh pages (which costs more than the copy itself); the session sweeper unmaps blocks
// idle for a while.
std::shared_ptr<unsigned char> host_block(size_t bytes);

// The defaults of RpcServerOptions::max_region_bytes and max_regions on this machine.
int64_t default_max_region_bytes();
int64_t default_max_regions();

class Service;

// The broker's side of a request breakdown (kBreakdownKey): clock reads at the handler's
// phases, the engine's start and end of the work (CallTrace), and the trailer at the end of
// the handler. Costs one metadata lookup when the client did not ask.
class RequestBreakdown {
 public:
  explicit RequestBreakdown(grpc::ServerContextBase* ctx);  // the trailer goes when this does
  explicit RequestBreakdown(bool asked);  // no gRPC call (the run channel): see text()
  ~RequestBreakdown();
  // The phases, the handler ending now ("" when not asked). The gRPC form's trailer is this.
  std::string text() const;
  RequestBreakdown(const RequestBreakdown&) = delete;
  RequestBreakdown& operator=(const RequestBreakdown&) = delete;
  void session_found() { stamp(&session_); }  // auth and session lookup done
  void parsed() { stamp(&parsed_); }           // Execute: the graph decoded
  void submitted() { stamp(&submitted_); }     // the engine call returned
  void answered() { stamp(&answered_); }       // the outputs are in the answer
  void attach(CancelToken& call) {
    if (asked_) call.trace = trace_;
  }

 private:
  void stamp(int64_t* at);
  grpc::ServerContextBase* ctx_ = nullptr;  // the gRPC call whose trailer gets the phases
  bool asked_ = false;
  std::shared_ptr<CallTrace> trace_;
  int64_t start_ = 0, session_ = 0, parsed_ = 0, submitted_ = 0, answered_ = 0;
};

// Attach: holds the session for as long as the client's call lives (callback API: no thread
// is held while it waits).
class AttachReactor final : public grpc::ServerWriteReactor<v1::AttachEvent> {
 public:
  AttachReactor(Service* service, std::string session);
  void OnWriteDone(bool ok) override {}
  void OnCancel() override;
  void OnDone() override;
  // The broker is stopping: end the call without closing the session (close_all does that
  // once the calls in flight have finished).
  void end_for_shutdown();

 private:
  void finish_once(const grpc::Status& s);
  Service* service_;
  std::string session_;
  v1::AttachEvent event_;
  std::mutex mu_;
  bool finished_ = false;
};

class Service final
    : public v1::Tensord::WithRawCallbackMethod_Read<v1::Tensord::WithRawCallbackMethod_Upload<
          v1::Tensord::WithCallbackMethod_Attach<v1::Tensord::Service>>> {
 public:
  // `auth_in_filter`: a TokenProcessor refused wrong tokens before calls got here (each method
  // still finds its tenant from the token, and checks it).
  Service(std::shared_ptr<Engine> engine, const RpcServerOptions& options,
          std::shared_ptr<const Tenants> tenants, bool auth_in_filter);
  ~Service() override;

  // ---------------------------------------------------------------- sessions (sessions.cpp)
  int64_t session_count() const;
  void close_all();
  void drop_session(const std::string& id);
  // Closes the engine session of `s` (already out of the table), logging why.
  Status close_logged(const std::string& id, const SessionState& s, const char* why);
  void attach_done(AttachReactor* r);
  void end_attachments();
  Result<std::string> tenant_of(grpc::ServerContextBase* ctx) const;
  Status check_token(grpc::ServerContextBase* ctx) const;
  grpc::Status OpenSession(grpc::ServerContext* ctx, const v1::OpenSessionRequest* req,
                           v1::OpenSessionResponse* resp) override;
  grpc::Status CloseSession(grpc::ServerContext* ctx, const v1::CloseSessionRequest* req,
                            v1::CloseSessionResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;
  grpc::ServerWriteReactor<v1::AttachEvent>* Attach(grpc::CallbackServerContext* ctx,
                                                    const v1::AttachRequest* req) override;

  // ---------------------------------------------------------------- service.cpp
  grpc::Status Handshake(grpc::ServerContext* ctx, const v1::HandshakeRequest* req,
                         v1::HandshakeResponse* resp) override;
  std::vector<DeviceInfo> visible_devices() const;
  grpc::Status ListDevices(grpc::ServerContext* ctx, const v1::ListDevicesRequest* req,
                           v1::ListDevicesResponse* resp) override;
  grpc::Status Echo(grpc::ServerContext* ctx, const v1::EchoMessage* req,
                    v1::EchoMessage* resp) override;
  grpc::Status Wait(grpc::ServerContext* ctx, const v1::HandleRequest* req,
                    v1::WaitResponse* resp) override;
  grpc::Status Info(grpc::ServerContext* ctx, const v1::HandleRequest* req,
                    v1::InfoResponse* resp) override;
  grpc::Status Execute(grpc::ServerContext* ctx, const v1::ExecuteRequest* req,
                       v1::ExecuteResponse* resp) override;
  grpc::Status LoadModel(grpc::ServerContext* ctx, grpc::ServerReader<v1::LoadModelChunk>* reader,
                         v1::LoadModelResponse* resp) override;
  grpc::Status LoadModelInline(grpc::ServerContext* ctx, const v1::LoadModelRequest* req,
                               v1::LoadModelResponse* resp) override;
  grpc::Status RunModel(grpc::ServerContext* ctx, const v1::RunModelRequest* req,
                        v1::RunModelResponse* resp) override;
  grpc::Status UnloadModel(grpc::ServerContext* ctx, const v1::ModelRequest* req,
                           v1::UnloadModelResponse* resp) override;
  grpc::Status ListModels(grpc::ServerContext* ctx, const v1::ListModelsRequest* req,
                          v1::ListModelsResponse* resp) override;
  grpc::Status OpenModel(grpc::ServerContext* ctx, const v1::OpenModelRequest* req,
                         v1::OpenModelResponse* resp) override;
  Status check_model_control(grpc::ServerContextBase* ctx, const char* what) const;
  grpc::Status LoadNamedModel(grpc::ServerContext* ctx, const v1::NamedModelRequest* req,
                              v1::NamedModelResponse* resp) override;
  grpc::Status UnloadNamedModel(grpc::ServerContext* ctx, const v1::NamedModelRequest* req,
                                v1::NamedModelResponse* resp) override;
  grpc::Status Copy(grpc::ServerContext* ctx, const v1::CopyRequest* req,
                    v1::CopyResponse* resp) override;
  grpc::Status Release(grpc::ServerContext* ctx, const v1::HandleRequest* req,
                       v1::ReleaseResponse* resp) override;

  // ---------------------------------------------------------------- transfers.cpp
  grpc::ServerReadReactor<grpc::ByteBuffer>* Upload(grpc::CallbackServerContext* ctx,
                                                     grpc::ByteBuffer* response) override;
  grpc::Status BeginUpload(grpc::ServerContext* ctx, const v1::UploadHeader* req,
                           v1::BeginUploadResponse* resp) override;
  grpc::Status FinishUpload(grpc::ServerContext* ctx, const v1::FinishUploadRequest* req,
                            v1::UploadResponse* resp) override;
  grpc::Status UploadInline(grpc::ServerContext* ctx, const v1::UploadChunk* req,
                            v1::UploadResponse* resp) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Read(grpc::CallbackServerContext* ctx,
                                                   const grpc::ByteBuffer* request) override;

  // ---------------------------------------------------------------- shared_memory.cpp
  grpc::Status RegionTicket(grpc::ServerContext* ctx, const v1::RegionTicketRequest* req,
                            v1::RegionTicketResponse* resp) override;
  grpc::Status RegisterRegion(grpc::ServerContext* ctx, const v1::RegisterRegionRequest* req,
                              v1::RegisterRegionResponse* resp) override;
  grpc::Status UnregisterRegion(grpc::ServerContext* ctx, const v1::RegionRequest* req,
                                v1::UnregisterRegionResponse* resp) override;
  grpc::Status UploadRegion(grpc::ServerContext* ctx, const v1::UploadRegionRequest* req,
                            v1::UploadResponse* resp) override;
  grpc::Status ReclaimRegions(grpc::ServerContext* ctx, const v1::ReclaimRegionsRequest* req,
                              v1::ReclaimRegionsResponse* resp) override;
  grpc::Status OpenArena(grpc::ServerContext* ctx, const v1::OpenArenaRequest* req,
                         v1::OpenArenaResponse* resp) override;
  grpc::Status ReadRegion(grpc::ServerContext* ctx, const v1::ReadRegionRequest* req,
                          v1::ReadRegionResponse* resp) override;

  // ---------------------------------------------------------------- cuda_ipc.cpp
  grpc::Status UploadCudaIpc(grpc::ServerContext* ctx, const v1::UploadCudaIpcRequest* req,
                             v1::UploadResponse* resp) override;
  grpc::Status ReadCudaIpc(grpc::ServerContext* ctx, const v1::ReadCudaIpcRequest* req,
                           v1::ReadCudaIpcResponse* resp) override;
  Result<ForeignMemory> cuda_ipc_memory(const v1::CudaIpcMemory& m) const;

  // ---------------------------------------------------------------- run_channel.cpp
  grpc::Status OpenRunChannel(grpc::ServerContext* ctx, const v1::RunChannelRequest* req,
                              v1::RunChannelResponse* resp) override;
  // The calls' counters, which calls through a run channel count in too (set before serving).
  void set_rpc_metrics(std::shared_ptr<RpcMetrics> metrics) { rpc_metrics_ = std::move(metrics); }
  // Ends every run channel once its call in flight has answered, and refuses new ones.
  void stop_run_channels();
  // Run channels open now (tests and the status).
  size_t run_channel_count();
  // At most this many run channels per session, per tenant (with tokens) and in all (each
  // holds a thread); a client refused one uses gRPC.
  static constexpr size_t kMaxRunChannelsPerSession = 4;
  static constexpr size_t kMaxRunChannelsPerTenant = 16;
  static constexpr size_t kMaxRunChannels = 64;

  // ---------------------------------------------------------------- status.cpp
  // The open sessions as the status page shows them, and BrokerStatus (`tensord status`):
  // the JSON of `monitor` (set once, just after the server starts; null: UNAVAILABLE).
  std::vector<SessionSummary> session_summaries() const;
  // What the call's token may see of the status (status.cpp).
  Result<StatusView> status_view(grpc::ServerContextBase* ctx) const;
  void set_monitor(const Monitor* monitor) { monitor_.store(monitor); }
  std::shared_ptr<ModelRunner> model_runner() const { return runner_; }
  grpc::Status BrokerStatus(grpc::ServerContext* ctx, const v1::BrokerStatusRequest* req,
                            v1::BrokerStatusResponse* resp) override;

 private:
  // Marks the session busy for the duration of one call (the reaper skips busy sessions) and
  // renews its lease at both ends of the call.
  class Guard {
   public:
    Guard(Service* service, grpc::ServerContextBase* ctx);
    // A call that did not come through gRPC (the run channel): the session and tenant the
    // channel was opened for.
    Guard(Service* service, const std::string& session_id, const std::string& tenant);
    ~Guard();
    bool ok() const { return status_.ok(); }
    const Status& status() const { return status_; }
    SessionId engine_session() const { return engine_session_; }
    int64_t memory_limit() const { return memory_limit_; }
    // Bytes of the session's uploads and model loads in progress.
    int64_t pending_bytes() const;
    Status charge(int64_t bytes, const char* what) const;
    void uncharge(int64_t bytes) const;
    const std::string& id() const { return id_; }
    const std::string& tenant() const { return tenant_; }
    SessionState* state_locked() const;

   private:
    void enter(const std::string& id, const std::string& tenant);
    Service* service_;
    Status status_;
    std::string id_;
    std::string tenant_;
    SessionId engine_session_ = 0;
    int64_t memory_limit_ = 0;
  };

  // A streamed upload (client streaming, raw messages): the header's size is checked before a
  // byte is taken, then each chunk's data is copied once, from gRPC's receive buffers straight
  // into a pooled block that becomes the tensor (no staging copy, no second allocation).
  // Messages are tensord.v1.UploadChunk, parsed here field by field for that reason.
  class UploadReactor;  // transfers.cpp
  // A streamed read (server streaming, raw messages): the value's bytes go out as slices of
  // the tensor's own memory (no copy on this side), waited for on a thread of its own.
  class ReadReactor;  // transfers.cpp
  // Read threads running; shared with them (one may outlive the service by a few instructions).
  std::shared_ptr<std::atomic<int>> read_threads_ = std::make_shared<std::atomic<int>>(0);

  static grpc::Status fail(grpc::ServerContextBase* ctx, const Status& s);
  Result<std::string> session_id(grpc::ServerContextBase* ctx) const;
  std::unordered_map<std::string, SessionState>::iterator find_session_locked(
      const std::string& id, const std::string& tenant);
  Status session_room_locked(const std::string& tenant) const;
  Status unknown_session() const;
  void reap_loop();
  Result<int64_t> check_header(const Guard& g, const v1::UploadHeader& h);
  grpc::Status finish_upload(grpc::ServerContext* ctx, const Guard& g, const v1::UploadHeader& h,
                             const void* data, v1::UploadResponse* resp);
  // Values of small outputs, for the answer (see ExecuteRequest.inline_max_bytes): outputs
  // whose size is known before they run and fits the budget are waited for and sent along.
  // Disarms a call's token when the handler returns (its poll reads the call's context).
  struct Disarm {
    CancelToken* token;
    ~Disarm() { token->disarm(); }
  };
  static std::shared_ptr<CancelToken> call_token(grpc::ServerContextBase* ctx);
  Status finish_submit(const Guard& g, CancelToken& call, const std::vector<TensorHandle>& out,
                       int64_t inline_max_bytes,
                       google::protobuf::RepeatedField<uint64_t>* outputs,
                       google::protobuf::RepeatedPtrField<v1::InlineValue>* values);
  // Execute's and RunModel's work, whichever way the call came (gRPC, the run channel):
  // `call` is the call's token.
  Status execute(const Guard& g, const v1::ExecuteRequest& req,
                 const std::shared_ptr<CancelToken>& call, RequestBreakdown& breakdown,
                 v1::ExecuteResponse* resp);
  Status run_model(const Guard& g, const v1::RunModelRequest& req,
                   const std::shared_ptr<CancelToken>& call, RequestBreakdown& breakdown,
                   v1::RunModelResponse* resp);
  void add_inline_values(const Guard& g, const std::vector<TensorHandle>& outputs,
                         int64_t max_bytes,
                         google::protobuf::RepeatedPtrField<v1::InlineValue>* dst,
                         CancelToken* call = nullptr);
  // Loads `graph` into the session; the answer names the model's inputs and outputs.
  grpc::Status finish_load(grpc::ServerContext* ctx, const Guard& g, const Graph& graph,
                           const std::string& device, v1::LoadModelResponse* resp);
  Result<std::shared_ptr<Region>> find_region(const Guard& g, uint64_t id);
  grpc::Status read_region_part(grpc::ServerContext* ctx, const Guard& g, Region& region,
                                const v1::ReadRegionRequest& req, v1::ReadRegionResponse* resp);
  bool read_from_arena(grpc::ServerContext* ctx, const Guard& g, const v1::ReadRegionRequest& req,
                       v1::ReadRegionResponse* resp, grpc::Status* out);
  Result<std::shared_ptr<Region>> open_region(int fd, int64_t bytes, const std::string& tenant);
  // Takes a region of `bytes` from the broker's budget and the tenant's share of it (the
  // region gives them back when it goes), or RESOURCE_EXHAUSTED naming the limit.
  Status take_region_budget(const std::string& tenant, int64_t bytes, Region& region);
  // The tenant's share of the region budget (created on first use). Caller holds mu_.
  std::shared_ptr<RegionBudget> tenant_region_budget_locked(const std::string& tenant);

  std::shared_ptr<Engine> engine_;
  std::shared_ptr<ModelRunner> runner_;  // named models' runs (batcher.h)
  RpcServerOptions options_;
  std::mutex model_control_mu_;  // one load or unload at a time
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::unordered_map<std::string, SessionState> sessions_;
  // The last sessions their clients closed, (id, tenant), oldest first, at most 1024: a
  // client's Attach stream may reach the broker after its CloseSession (a short session on
  // a loaded machine); that is its normal end, not an error. Caller holds mu_.
  std::deque<std::pair<std::string, std::string>> closed_by_client_;
  std::shared_ptr<const Tenants> tenants_;
  bool auth_in_filter_ = false;
  std::thread reaper_;
  const std::string host_id_ = host_boot_id();
  // The region socket (shared memory); null when it could not be opened: no shared memory.
  const std::unique_ptr<RegionChannel> region_channel_ = [] {
    auto c = RegionChannel::open();
    return c.ok() ? std::move(c).value() : nullptr;
  }();

  std::atomic<const Monitor*> monitor_{nullptr};

  // Run channels: each is a socket pair's broker end served by a thread of its own.
  struct RunChannel {
    int fd = -1;  // the broker's end
    int64_t max_message = 0;  // the largest answer it sends (seqpacket_send_limit)
    std::string session;
    std::string tenant;
    std::thread thread;
    std::atomic<bool> done{false};
    ~RunChannel();  // joins the thread, closes the end
  };
  void serve_run_channel(RunChannel* c);
  Status channel_call(const RunChannel& c, v1::ChannelRequest& req, v1::ChannelAnswer* answer,
                      const char** method);
  bool session_open(const std::string& id) const;
  std::shared_ptr<RpcMetrics> rpc_metrics_;
  std::mutex channels_mu_;
  std::list<std::unique_ptr<RunChannel>> channels_;
  bool channels_stopped_ = false;
  int channels_stop_fd_ = -1;  // an eventfd: readable once the channels are to stop

  // Mapped shared-memory regions: the broker's budget, each tenant's (under mu_), and their
  // limits (RpcServerOptions::max_region_bytes, max_regions, resolved to their defaults).
  const std::shared_ptr<RegionBudget> region_budget_ = std::make_shared<RegionBudget>();
  std::unordered_map<std::string, std::shared_ptr<RegionBudget>> tenant_region_budgets_;
  int64_t max_region_bytes_ = 0, max_regions_ = 0;
  int64_t tenant_region_bytes_ = 0, tenant_regions_ = 0;  // one tenant's share

  std::recursive_mutex attach_mu_;
  std::set<AttachReactor*> attached_;
  bool attach_closed_ = false;

  class RejectReactor final : public grpc::ServerWriteReactor<v1::AttachEvent> {
    void OnDone() override { delete this; }
  };
};

}  // namespace tensord::rpc::server_impl
