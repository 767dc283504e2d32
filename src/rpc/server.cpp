#include "rpc/server.h"

#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <new>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include "core/errors.h"
#include "rpc/region_channel.h"
#include "rpc/wire.h"
#include "tensord.grpc.pb.h"
#include "tensord/version.h"

namespace tensord::rpc {
namespace {

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
struct Region {
  unsigned char* base = nullptr;
  int64_t size = 0;
  std::string name;  // the memfd's name (the client's choice), for messages to its session
  // Tensors computing on the region's bytes where they are (UploadRegionRequest.lend).
  std::atomic<int64_t> lent{0};
  ~Region() {
    if (base) munmap(base, static_cast<size_t>(size));
  }
  // The bytes [offset, offset + n) of the region, or why not. The file is sealed against
  // shrinking: the whole mapping stays backed, so the bounds are all there is to check.
  Result<unsigned char*> span(int64_t offset, int64_t n, const char* what) const {
    if (offset < 0 || n < 0 || offset > size || n > size - offset)
      return errors::OutOfRange(
          "{}: bytes [{}, {}) are outside shared-memory region '{}' of {} bytes", what, offset,
          offset + n, name, size);
    return base + offset;
  }
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
  int64_t pending_bytes = 0;  // upload blocks being filled and staged models, not yet tensors
  Clock::time_point last_seen;
  int in_flight = 0;
  std::unordered_map<uint64_t, std::shared_ptr<Region>> regions;
  uint64_t next_region = 1;
  std::unordered_map<uint64_t, std::shared_ptr<PendingUpload>> uploads;
  uint64_t next_upload = 1;
};

constexpr size_t kMaxPendingUploads = 8;

// A new session id: 128 bits from the kernel's CSPRNG, as 32 lowercase hex characters.
Result<std::string> new_session_id() {
  unsigned char b[16];
  size_t got = 0;
  while (got < sizeof b) {
    const ssize_t n = getrandom(b + got, sizeof b - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errors::Internal("OpenSession: getrandom failed: {}", std::strerror(errno));
    }
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(32, '0');
  for (size_t i = 0; i < sizeof b; ++i) {
    id[2 * i] = kHex[b[i] >> 4];
    id[2 * i + 1] = kHex[b[i] & 15];
  }
  return id;
}

// The broker's tokens, each naming a tenant. The token a call presents is compared with every
// token, in time independent of where they differ (and of which one matches).
class Tenants {
 public:
  explicit Tenants(const RpcServerOptions& o) {
    if (!o.token.empty()) list_.push_back({"default", "Bearer " + o.token});
    for (const auto& t : o.tenants) list_.push_back({t.name, "Bearer " + t.token});
  }
  bool required() const { return !list_.empty(); }

  // The tenant whose token the metadata carries ("" when no token is required).
  Result<std::string> authenticate(
      const std::multimap<grpc::string_ref, grpc::string_ref>& md) const {
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
    return list_[match].name;
  }

 private:
  struct Entry {
    std::string name, header;
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
    if (!tenant.ok())
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, tenant.status().message());
    return grpc::Status::OK;
  }

 private:
  std::shared_ptr<const Tenants> tenants_;
};

constexpr int kMaxRegionsPerSession = 256;

// Host memory for streamed uploads. A streamed tensor is received straight into one of these
// blocks, which then becomes the tensor's storage (Engine::upload_external: no second copy);
// when the tensor goes, the block comes back here, its pages still mapped, so the next upload
// of a similar size writes to warm memory instead of faulting in fresh pages (which costs more
// than the copy itself). Idle blocks are bounded in bytes and dropped after a while unused,
// like a caching allocator's.
class HostPool {
 public:
  static constexpr size_t kMinPooled = 1 << 20;
  explicit HostPool(size_t max_idle_bytes)
      : state_(std::make_shared<State>()) { state_->max_idle = max_idle_bytes; }

  // At least `bytes` (64-byte aligned), or null when the host is out of memory.
  std::shared_ptr<unsigned char> get(size_t bytes) {
    const size_t want = std::max<size_t>((bytes + 63) & ~size_t{63}, 64);
    unsigned char* p = nullptr;
    size_t size = want;
    if (want >= kMinPooled) {
      std::lock_guard<std::mutex> lock(state_->mu);
      auto& idle = state_->idle;
      auto best = idle.end();
      for (auto it = idle.begin(); it != idle.end(); ++it)
        if (it->size >= want && it->size <= want + want / 4 &&
            (best == idle.end() || it->size < best->size))
          best = it;
      if (best != idle.end()) {
        p = best->p;
        size = best->size;
        state_->idle_bytes -= best->size;
        idle.erase(best);
      }
    }
    if (!p) p = static_cast<unsigned char*>(std::aligned_alloc(64, want));
    if (!p) return nullptr;
    auto state = state_;
    return std::shared_ptr<unsigned char>(p, [state, size](unsigned char* q) {
      if (size >= kMinPooled) {
        std::lock_guard<std::mutex> lock(state->mu);
        if (state->idle_bytes + size <= state->max_idle) {
          state->idle.push_back({q, size, Clock::now()});
          state->idle_bytes += size;
          return;
        }
      }
      std::free(q);
    });
  }

  // Frees blocks idle since before `cutoff`.
  void trim(Clock::time_point cutoff) {
    std::vector<unsigned char*> dead;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      auto& idle = state_->idle;
      for (auto it = idle.begin(); it != idle.end();) {
        if (it->since < cutoff) {
          dead.push_back(it->p);
          state_->idle_bytes -= it->size;
          it = idle.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (unsigned char* p : dead) std::free(p);
  }

 private:
  struct Block {
    unsigned char* p;
    size_t size;
    Clock::time_point since;
  };
  struct State {
    std::mutex mu;
    std::vector<Block> idle;
    size_t idle_bytes = 0;
    size_t max_idle = 0;
    ~State() {
      for (auto& b : idle) std::free(b.p);
    }
  };
  std::shared_ptr<State> state_;  // shared with the blocks' deleters: tensors may outlive us
};

size_t host_pool_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const size_t phys = pages > 0 && page > 0 ? static_cast<size_t>(pages) * page : 0;
  return std::min<size_t>(size_t{1} << 30, phys / 8);
}

// Whether the broker may compute on bytes a client can still write (lent regions): only
// values no kernel reads as an index, a size or a shape, so that a client breaking its promise
// can spoil its own results but never make the broker read or write out of bounds.
bool may_compute_in_place(DType t) { return dtype_is_float(t); }
constexpr int64_t kMaxGraphBytes = (int64_t{2} << 30) - 1;  // protobuf's message limit

class Service;

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
    : public v1::Tensord::WithRawCallbackMethod_Upload<
          v1::Tensord::WithCallbackMethod_Attach<v1::Tensord::Service>> {
 public:
  // `auth_in_filter`: a TokenProcessor refused wrong tokens before calls got here (each method
  // still finds its tenant from the token, and checks it).
  Service(std::shared_ptr<Engine> engine, const RpcServerOptions& options,
          std::shared_ptr<const Tenants> tenants, bool auth_in_filter)
      : engine_(std::move(engine)),
        options_(options),
        tenants_(std::move(tenants)),
        auth_in_filter_(auth_in_filter) {
    reaper_ = std::thread([this] { reap_loop(); });
  }

  ~Service() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    reaper_.join();
    close_all();
  }

  int64_t session_count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(sessions_.size());
  }

  void close_all() {
    std::unordered_map<std::string, SessionState> dead;
    {
      std::lock_guard<std::mutex> lock(mu_);
      dead.swap(sessions_);
    }
    for (auto& [id, s] : dead) (void)engine_->close_session(s.engine_session);
  }

  // A session whose Attach call ended (the client went away): freed at once.
  void drop_session(const std::string& id) {
    SessionState dead;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = sessions_.find(id);
      if (it == sessions_.end()) return;
      dead = std::move(it->second);
      sessions_.erase(it);
    }
    (void)engine_->close_session(dead.engine_session);
  }

  void attach_done(AttachReactor* r) {
    std::lock_guard<std::recursive_mutex> lock(attach_mu_);
    attached_.erase(r);
  }

  // Ends every Attach call (before the server's shutdown, which would otherwise wait for them
  // for the whole grace period).
  void end_attachments() {
    // Recursive, and over a copy: should gRPC run a reactor's OnDone inline in Finish, it
    // comes back here on this thread. Reactors are deleted only after attach_done, which
    // waits for this lock, so every pointer in the copy stays valid.
    std::lock_guard<std::recursive_mutex> lock(attach_mu_);
    attach_closed_ = true;
    const std::vector<AttachReactor*> live(attached_.begin(), attached_.end());
    for (AttachReactor* r : live) r->end_for_shutdown();
  }

  // The tenant of the call: its token's (UNAUTHENTICATED when the broker requires a token and
  // the call has none or a wrong one), "" when the broker requires none.
  Result<std::string> tenant_of(grpc::ServerContextBase* ctx) const {
    return tenants_->authenticate(ctx->client_metadata());
  }
  Status check_token(grpc::ServerContextBase* ctx) const { return tenant_of(ctx).status(); }

  // ---------------------------------------------------------------- no session needed

  grpc::Status Handshake(grpc::ServerContext* ctx, const v1::HandshakeRequest* req,
                         v1::HandshakeResponse* resp) override {
    if (Status a = check_token(ctx); !a.ok()) return fail(ctx, a);
    resp->set_server_version(kVersion);
    resp->set_protocol_version(kProtocolVersion);
    for (const auto& d : visible_devices()) to_proto(d, resp->add_devices());
    auto dd = engine_->default_device();
    if (dd.ok()) resp->set_default_device(*dd);
    resp->set_host_id(host_id_);
    resp->set_shared_memory(region_channel_ != nullptr);
    if (region_channel_) resp->set_region_socket(region_channel_->name());
    resp->set_max_message_bytes(options_.max_message_bytes > 0 ? options_.max_message_bytes
                                                               : kMaxMessageBytes);
    return grpc::Status::OK;
  }

  // The devices as a client may see them: with tenants (a token file), how much of a device
  // is in use — and its high-water mark — is other tenants' business, so both read 0.
  std::vector<DeviceInfo> visible_devices() const {
    std::vector<DeviceInfo> devices = engine_->devices();
    if (tenants_->required())
      for (auto& d : devices) d.memory_in_use = d.memory_peak = 0;
    return devices;
  }

  grpc::Status ListDevices(grpc::ServerContext* ctx, const v1::ListDevicesRequest* req,
                           v1::ListDevicesResponse* resp) override {
    if (Status a = check_token(ctx); !a.ok()) return fail(ctx, a);
    for (const auto& d : visible_devices()) to_proto(d, resp->add_devices());
    auto dd = engine_->default_device();
    if (dd.ok()) resp->set_default_device(*dd);
    return grpc::Status::OK;
  }

  grpc::Status Echo(grpc::ServerContext* ctx, const v1::EchoMessage* req,
                    v1::EchoMessage* resp) override {
    if (Status a = check_token(ctx); !a.ok()) return fail(ctx, a);
    *resp = *req;
    return grpc::Status::OK;
  }

  grpc::Status OpenSession(grpc::ServerContext* ctx, const v1::OpenSessionRequest* req,
                           v1::OpenSessionResponse* resp) override {
    auto tenant = tenant_of(ctx);
    if (!tenant.ok()) return fail(ctx, tenant.status());
    if (req->memory_limit() < 0)
      return fail(ctx, errors::InvalidArgument("OpenSession: negative memory limit {}",
                                               req->memory_limit()));
    int64_t limit = options_.session_memory_limit;
    if (req->memory_limit() > 0)
      limit = limit ? std::min(limit, req->memory_limit()) : req->memory_limit();
    {
      std::lock_guard<std::mutex> lock(mu_);  // refused before an engine session is made
      if (Status room = session_room_locked(*tenant); !room.ok()) return fail(ctx, room);
    }
    SessionState s;
    SessionOptions so;
    so.memory_limit = limit;
    so.tenant = *tenant;
    so.tenant_memory_limit = options_.tenant_memory_limit;
    s.engine_session = engine_->open_session(so);
    s.memory_limit = limit;
    s.tenant = *tenant;
    s.last_seen = Clock::now();
    std::string id;
    {
      std::unique_lock<std::mutex> lock(mu_);
      Status room = session_room_locked(*tenant);  // again: others may have opened meanwhile
      while (room.ok()) {
        auto fresh = new_session_id();
        if (!fresh.ok()) {
          room = fresh.status();
          break;
        }
        id = std::move(fresh).value();
        if (!sessions_.count(id)) break;
      }
      if (!room.ok()) {
        lock.unlock();
        (void)engine_->close_session(s.engine_session);
        return fail(ctx, room);
      }
      sessions_.emplace(id, std::move(s));
    }
    resp->set_session_id(id);
    resp->set_lease_ms(options_.lease.count());
    resp->set_memory_limit(limit);
    return grpc::Status::OK;
  }

  // ---------------------------------------------------------------- in a session

  grpc::Status CloseSession(grpc::ServerContext* ctx, const v1::CloseSessionRequest* req,
                            v1::CloseSessionResponse* resp) override {
    auto tenant = tenant_of(ctx);
    if (!tenant.ok()) return fail(ctx, tenant.status());
    auto id = session_id(ctx);
    if (!id.ok()) return fail(ctx, id.status());
    SessionState dead;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = find_session_locked(*id, *tenant);
      if (it == sessions_.end()) return fail(ctx, unknown_session());
      dead = std::move(it->second);
      sessions_.erase(it);
    }
    return fail(ctx, engine_->close_session(dead.engine_session));
  }

  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    resp->set_lease_ms(options_.lease.count());
    return grpc::Status::OK;
  }

  // Upload: raw bytes in, straight into a pooled block that becomes the tensor (UploadReactor).
  grpc::ServerReadReactor<grpc::ByteBuffer>* Upload(grpc::CallbackServerContext* ctx,
                                                     grpc::ByteBuffer* response) override {
    return new UploadReactor(this, ctx, response);
  }

  grpc::Status BeginUpload(grpc::ServerContext* ctx, const v1::UploadHeader* req,
                           v1::BeginUploadResponse* resp) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    auto size = check_header(g, *req);
    if (!size.ok()) return fail(ctx, size.status().with_context("upload"));
    {
      std::lock_guard<std::mutex> lock(mu_);
      SessionState* s = g.state_locked();
      if (!s) return fail(ctx, errors::NotFound("the session ended during BeginUpload"));
      if (s->uploads.size() >= kMaxPendingUploads)
        return fail(ctx, errors::ResourceExhausted(
                             "upload: a session may have at most {} parallel uploads in progress",
                             kMaxPendingUploads));
    }
    // Charged to the session until FinishUpload (or the session's end) settles it.
    if (Status c = g.charge(*size, "upload"); !c.ok()) return fail(ctx, c);
    auto pending = std::make_shared<PendingUpload>();
    pending->header = *req;
    pending->size = *size;
    pending->block = pool_.get(static_cast<size_t>(*size));
    if (!pending->block) {
      g.uncharge(*size);
      return fail(ctx, errors::ResourceExhausted(
                           "upload: cannot hold {} bytes in the broker's host memory", *size));
    }
    std::lock_guard<std::mutex> lock(mu_);
    SessionState* s = g.state_locked();
    if (!s) return fail(ctx, errors::NotFound("the session ended during BeginUpload"));
    if (s->uploads.size() >= kMaxPendingUploads) {
      s->pending_bytes -= *size;
      return fail(ctx, errors::ResourceExhausted(
                           "upload: a session may have at most {} parallel uploads in progress",
                           kMaxPendingUploads));
    }
    const uint64_t id = s->next_upload++;
    s->uploads.emplace(id, std::move(pending));
    resp->set_upload(id);
    return grpc::Status::OK;
  }

  grpc::Status FinishUpload(grpc::ServerContext* ctx, const v1::FinishUploadRequest* req,
                            v1::UploadResponse* resp) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    std::shared_ptr<PendingUpload> p;
    {
      std::lock_guard<std::mutex> lock(mu_);
      SessionState* s = g.state_locked();
      auto it = s ? s->uploads.find(req->upload()) : decltype(s->uploads)::iterator{};
      if (!s || it == s->uploads.end())
        return fail(ctx, errors::NotFound("upload {} does not exist in this session",
                                          req->upload()));
      p = std::move(it->second);
      s->uploads.erase(it);  // finished or failed: either way it is over
    }
    // Its bytes stop counting as pending when this call ends (they are the tensor's then).
    struct Uncharge {
      const Guard& g;
      int64_t n;
      ~Uncharge() { g.uncharge(n); }
    } uncharge{g, p->size};
    std::lock_guard<std::mutex> lock(p->mu);
    std::sort(p->parts.begin(), p->parts.end());
    int64_t covered = 0;
    for (const auto& [b, e] : p->parts) {
      if (b != covered)
        return fail(ctx, errors::InvalidArgument(
                             "upload {}: bytes [{}, {}) {}", req->upload(), std::min(b, covered),
                             std::max(b, covered), b > covered ? "never arrived" : "arrived twice"));
      covered = e;
    }
    if (covered != p->size)
      return fail(ctx, errors::InvalidArgument("upload {}: bytes [{}, {}) never arrived",
                                               req->upload(), covered, p->size));
    TensorView view{static_cast<DType>(p->header.dtype()),
                    Shape(p->header.shape().begin(), p->header.shape().end()), p->block.get()};
    auto h = engine_->upload_external(g.engine_session(), view, p->header.device(),
                                      std::shared_ptr<void>(p->block));
    if (!h.ok()) return fail(ctx, h.status());
    resp->set_handle(*h);
    return grpc::Status::OK;
  }

  grpc::Status UploadInline(grpc::ServerContext* ctx, const v1::UploadChunk* req,
                            v1::UploadResponse* resp) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    if (!req->has_header())
      return fail(ctx, errors::InvalidArgument("upload: the message carries no header"));
    auto size = check_header(g, req->header());
    if (!size.ok()) return fail(ctx, size.status());
    if (static_cast<int64_t>(req->data().size()) != *size)
      return fail(ctx, errors::InvalidArgument(
                           "upload: the header declares {} bytes, but the message carries {}",
                           *size, req->data().size()));
    return finish_upload(ctx, g, req->header(), req->data().data(), resp);
  }

  grpc::Status Read(grpc::ServerContext* ctx, const v1::ReadRequest* req,
                    grpc::ServerWriter<v1::ReadChunk>* writer) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    auto call = call_token(ctx);
    auto t = engine_->read(g.engine_session(), req->handle(), call.get());
    if (!t.ok()) return fail(ctx, t.status());
    int64_t chunk = req->chunk_bytes() > 0 ? req->chunk_bytes() : options_.chunk_bytes;
    chunk = std::clamp<int64_t>(chunk, 64 << 10, 64 << 20);
    const auto* bytes = static_cast<const char*>(t->data());
    const int64_t total = static_cast<int64_t>(t->nbytes());
    v1::ReadChunk msg;
    auto* h = msg.mutable_header();
    h->set_dtype(static_cast<int32_t>(t->dtype()));
    h->mutable_shape()->Assign(t->shape().begin(), t->shape().end());
    h->set_total_bytes(total);
    int64_t off = 0;
    do {
      const int64_t n = std::min(chunk, total - off);
      msg.set_data(bytes + off, static_cast<size_t>(n));
      off += n;
      if (!writer->Write(msg))
        return fail(ctx, Status(StatusCode::kCancelled, "read: the client went away"));
      msg.clear_header();
    } while (off < total);
    return grpc::Status::OK;
  }

  grpc::Status Wait(grpc::ServerContext* ctx, const v1::HandleRequest* req,
                    v1::WaitResponse* resp) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    auto call = call_token(ctx);
    return fail(ctx, engine_->wait(g.engine_session(), req->handle(), call.get()));
  }

  grpc::Status Info(grpc::ServerContext* ctx, const v1::HandleRequest* req,
                    v1::InfoResponse* resp) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    auto call = call_token(ctx);
    auto info = engine_->info(g.engine_session(), req->handle(), call.get());
    if (!info.ok()) return fail(ctx, info.status());
    to_proto(info->type, resp->mutable_type());
    resp->set_device(info->device);
    return grpc::Status::OK;
  }

  grpc::Status Execute(grpc::ServerContext* ctx, const v1::ExecuteRequest* req,
                       v1::ExecuteResponse* resp) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    auto graph = from_proto(req->graph());
    if (!graph.ok()) return fail(ctx, graph.status().with_context("execute"));
    for (uint64_t h : req->release())  // released by the client since its last call
      (void)engine_->release(g.engine_session(), h);
    std::vector<TensorHandle> inputs(req->inputs().begin(), req->inputs().end());
    // Deadline semantics: the work outlives the call (the client consumes its outputs in
    // later calls), so once the call has answered, its deadline no longer bounds the work
    // (only closing the session does). Until it answers — waiting for inline values, or
    // running the graph on this thread — the work stops at the call's deadline or when the
    // client goes away: the client never learns the output handles then, so nobody can want
    // the results; they are released (call_token, finish_submit).
    auto call = call_token(ctx);
    call->arm();  // until the answer: the work stops at the deadline too
    Disarm disarm{call.get()};
    // Small results are waited for below: run here when the device is idle (no hand-off).
    auto out = engine_->execute(g.engine_session(), *graph, inputs, req->device(), {},
                                req->inline_max_bytes() > 0, call);
    if (!out.ok()) return fail(ctx, out.status());
    return finish_submit(ctx, g, *call, *out, req->inline_max_bytes(), resp->mutable_outputs(),
                         resp->mutable_values());
  }

  // ---------------------------------------------------------------- loaded models

  grpc::Status LoadModel(grpc::ServerContext* ctx, grpc::ServerReader<v1::LoadModelChunk>* reader,
                         v1::LoadModelResponse* resp) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    v1::LoadModelChunk chunk;
    if (!reader->Read(&chunk) || !chunk.has_header())
      return fail(ctx, errors::InvalidArgument(
                           "load model: the first message must carry the header (device, "
                           "graph_bytes)"));
    const v1::LoadModelHeader header = chunk.header();
    const int64_t total = header.graph_bytes();
    if (total < 0 || total > kMaxGraphBytes)
      return fail(ctx, errors::InvalidArgument(
                           "load model: graph_bytes {} is outside [0, {}] (protobuf's limit)",
                           total, kMaxGraphBytes));
    // Refused on the header, before a byte is staged: the broker's model size limit, and the
    // session's memory (the staging buffer counts against it while the graph arrives).
    if (options_.max_model_bytes > 0 && total > options_.max_model_bytes)
      return fail(ctx, errors::ResourceExhausted(
                           "load model: the graph takes {} bytes, over the broker's limit "
                           "(tensord serve --max-model-bytes {})",
                           total, options_.max_model_bytes));
    if (Status c = g.charge(total, "load model"); !c.ok()) return fail(ctx, c);
    struct Uncharge {
      const Guard& g;
      int64_t n;
      ~Uncharge() { g.uncharge(n); }
    } uncharge{g, total};
    std::string bytes;
    try {
      bytes.reserve(static_cast<size_t>(total));
    } catch (const std::bad_alloc&) {
      return fail(ctx, errors::ResourceExhausted(
                           "load model: cannot stage {} bytes in the broker's host memory", total));
    }
    int64_t messages = 0;
    do {
      ++messages;
      if (messages > 1 && chunk.has_header())
        return fail(ctx,
                    errors::InvalidArgument("load model: message {} repeats the header", messages));
      if (static_cast<int64_t>(chunk.data().size()) > total - static_cast<int64_t>(bytes.size()))
        return fail(ctx, errors::InvalidArgument(
                             "load model: the header declares {} bytes, but the stream carries "
                             "more (after message {})",
                             total, messages));
      bytes += chunk.data();
    } while (reader->Read(&chunk));
    if (ctx->IsCancelled())
      return fail(ctx, Status(StatusCode::kCancelled, "load model: the client cancelled"));
    if (static_cast<int64_t>(bytes.size()) != total)
      return fail(ctx, errors::InvalidArgument(
                           "load model: the header declares {} bytes, but the stream carried {}",
                           total, bytes.size()));
    v1::Graph proto;
    if (!proto.ParseFromString(bytes))
      return fail(
          ctx, errors::InvalidArgument(
                   "load model: the {} bytes sent are not a serialized tensord.v1.Graph", total));
    bytes.clear();
    bytes.shrink_to_fit();
    return finish_load(ctx, g, proto, header.device(), resp);
  }

  grpc::Status LoadModelInline(grpc::ServerContext* ctx, const v1::LoadModelRequest* req,
                               v1::LoadModelResponse* resp) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    return finish_load(ctx, g, req->graph(), req->device(), resp);
  }

  grpc::Status RunModel(grpc::ServerContext* ctx, const v1::RunModelRequest* req,
                        v1::RunModelResponse* resp) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    for (uint64_t h : req->release())  // released by the client since its last call
      (void)engine_->release(g.engine_session(), h);
    std::vector<TensorHandle> inputs(req->inputs().begin(), req->inputs().end());
    // Queued on the device's thread even when the answer waits for the outputs: a model's
    // kernels keep their thread (oneDNN and OpenMP state live per thread), and its run dwarfs
    // the hand-off.
    auto call = call_token(ctx);  // as in Execute
    call->arm();
    Disarm disarm{call.get()};
    auto out = engine_->run(g.engine_session(), req->model(), inputs, false, call);
    if (!out.ok()) return fail(ctx, out.status());
    return finish_submit(ctx, g, *call, *out, req->inline_max_bytes(), resp->mutable_outputs(),
                         resp->mutable_values());
  }

  grpc::Status UnloadModel(grpc::ServerContext* ctx, const v1::ModelRequest* req,
                           v1::UnloadModelResponse* resp) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    return fail(ctx, engine_->unload(g.engine_session(), req->model()));
  }

  // ---------------------------------------------------------------- connection-bound sessions

  grpc::ServerWriteReactor<v1::AttachEvent>* Attach(grpc::CallbackServerContext* ctx,
                                                    const v1::AttachRequest* req) override {
    auto tenant = tenant_of(ctx);
    Result<std::string> id = tenant.ok() ? session_id(ctx) : Result<std::string>(tenant.status());
    if (id.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (find_session_locked(*id, *tenant) == sessions_.end()) id = unknown_session();
    }
    if (!id.ok()) {
      auto* r = new RejectReactor();
      ctx->AddTrailingMetadata(kErrorKey, "1");
      r->Finish(to_grpc(id.status()));
      return r;
    }
    std::lock_guard<std::recursive_mutex> lock(attach_mu_);
    if (attach_closed_) {
      auto* r = new RejectReactor();
      r->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the broker is shutting down"));
      return r;
    }
    auto* r = new AttachReactor(this, *id);
    attached_.insert(r);
    return r;
  }

  // ---------------------------------------------------------------- shared memory

  grpc::Status RegionTicket(grpc::ServerContext* ctx, const v1::RegionTicketRequest* req,
                            v1::RegionTicketResponse* resp) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    if (!region_channel_)
      return fail(ctx, errors::Unimplemented("this broker offers no shared memory"));
    auto ticket = region_channel_->issue(g.engine_session());
    if (!ticket.ok()) return fail(ctx, ticket.status());
    resp->set_ticket(*ticket);
    resp->set_ttl_ms(std::chrono::milliseconds(RegionChannel::kTicketTtl).count());
    return grpc::Status::OK;
  }

  grpc::Status RegisterRegion(grpc::ServerContext* ctx, const v1::RegisterRegionRequest* req,
                              v1::RegisterRegionResponse* resp) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    // Paths are refused without being looked at: nothing is opened, so the answer says
    // nothing about what a path (a /proc/<pid>/fd/<n> of the broker or of another client)
    // points to.
    if (!req->path().empty())
      return fail(ctx, errors::InvalidArgument(
                           "RegisterRegion: regions are not registered by path; pass the memfd "
                           "on the broker's region socket with a ticket (RegionTicket) and name "
                           "the ticket"));
    if (!region_channel_)
      return fail(ctx, errors::Unimplemented("this broker offers no shared memory"));
    if (req->bytes() <= 0 || req->bytes() > (int64_t{1} << 40))
      return fail(ctx, errors::InvalidArgument(
                           "RegisterRegion: region size {} is not in (0, 1 TiB]", req->bytes()));
    auto fd = region_channel_->redeem(g.engine_session(), req->ticket());
    if (!fd.ok()) return fail(ctx, fd.status());
    auto region = open_region(*fd, req->bytes());
    close(*fd);  // mapped (or refused): the mapping does not need the descriptor
    if (!region.ok()) return fail(ctx, region.status());
    std::lock_guard<std::mutex> lock(mu_);
    SessionState* s = g.state_locked();
    if (!s) return fail(ctx, errors::NotFound("the session ended during RegisterRegion"));
    if (s->regions.size() >= kMaxRegionsPerSession)
      return fail(
          ctx, errors::ResourceExhausted("a session may register at most {} shared-memory regions",
                                         kMaxRegionsPerSession));
    const uint64_t id = s->next_region++;
    s->regions.emplace(id, std::move(region).value());
    resp->set_region(id);
    return grpc::Status::OK;
  }

  grpc::Status UnregisterRegion(grpc::ServerContext* ctx, const v1::RegionRequest* req,
                                v1::UnregisterRegionResponse* resp) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    std::shared_ptr<Region> dead;  // unmapped outside the lock
    std::lock_guard<std::mutex> lock(mu_);
    SessionState* s = g.state_locked();
    auto it = s ? s->regions.find(req->region()) : decltype(s->regions.end()){};
    if (!s || it == s->regions.end())
      return fail(ctx, errors::NotFound("shared-memory region {} is not registered in this session",
                                        req->region()));
    dead = std::move(it->second);
    s->regions.erase(it);
    return grpc::Status::OK;
  }

  grpc::Status UploadRegion(grpc::ServerContext* ctx, const v1::UploadRegionRequest* req,
                            v1::UploadResponse* resp) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    auto size = check_header(g, req->header());
    if (!size.ok()) return fail(ctx, size.status());
    auto region = find_region(g, req->region());
    if (!region.ok()) return fail(ctx, region.status());
    auto ptr = (*region)->span(req->offset(), *size, "upload");
    if (!ptr.ok()) return fail(ctx, ptr.status());
    const auto& h = req->header();
    const DType dtype = static_cast<DType>(h.dtype());
    if (req->lend() && may_compute_in_place(dtype)) {
      // Lent: the tensor is the region's bytes (a cpu device computes on them where they
      // are); the region counts as in use until the last tensor over it goes.
      struct Pin {
        std::shared_ptr<Region> region;
        ~Pin() { region->lent.fetch_sub(1); }
      };
      (*region)->lent.fetch_add(1);
      auto pin = std::make_shared<Pin>();
      pin->region = *region;
      TensorView view{dtype, Shape(h.shape().begin(), h.shape().end()), *ptr};
      auto handle = engine_->upload_external(g.engine_session(), view, h.device(), std::move(pin));
      if (!handle.ok()) return fail(ctx, handle.status());
      resp->set_handle(*handle);
      return grpc::Status::OK;
    }
    return finish_upload(ctx, g, h, *ptr, resp);
  }

  grpc::Status ReclaimRegions(grpc::ServerContext* ctx, const v1::ReclaimRegionsRequest* req,
                              v1::ReclaimRegionsResponse* resp) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    std::lock_guard<std::mutex> lock(mu_);
    SessionState* s = g.state_locked();
    for (uint64_t id : req->regions()) {
      auto it = s ? s->regions.find(id) : decltype(s->regions.end()){};
      if (!s || it == s->regions.end() || it->second->lent.load() == 0) resp->add_free(id);
    }
    return grpc::Status::OK;
  }

  grpc::Status ReadRegion(grpc::ServerContext* ctx, const v1::ReadRegionRequest* req,
                          v1::ReadRegionResponse* resp) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    auto region = find_region(g, req->region());
    if (!region.ok()) return fail(ctx, region.status());
    if (req->offset() < 0 || req->offset() > (*region)->size || req->max_bytes() < 0)
      return fail(ctx, errors::OutOfRange(
                           "read: offset {} (max_bytes {}) is outside shared-memory region '{}' "
                           "of {} bytes",
                           req->offset(), req->max_bytes(), (*region)->name, (*region)->size));
    const int64_t room = req->max_bytes() > 0
                             ? std::min(req->max_bytes(), (*region)->size - req->offset())
                             : (*region)->size - req->offset();
    // A statically known size that does not fit is answered before the value is read.
    auto info = engine_->info(g.engine_session(), req->handle());
    if (!info.ok()) return fail(ctx, info.status());
    auto known = checked_byte_size(info->type.dtype, info->type.shape);
    auto* h = resp->mutable_header();
    if (known.ok() && *known > room) {
      h->set_dtype(static_cast<int32_t>(info->type.dtype));
      h->mutable_shape()->Assign(info->type.shape.begin(), info->type.shape.end());
      h->set_total_bytes(*known);
      return grpc::Status::OK;  // written = false: the client retries with room enough
    }
    // Straight into the region (no host copy in between). The span is checked first, against
    // the room the value can take; a data-dependent size is checked again once known.
    const int64_t span_bytes = known.ok() ? *known : room;
    auto ptr = (*region)->span(req->offset(), span_bytes, "read");
    if (!ptr.ok()) return fail(ctx, ptr.status());
    auto t = engine_->read_into(g.engine_session(), req->handle(), *ptr,
                                static_cast<size_t>(span_bytes));
    if (!t.ok()) return fail(ctx, t.status());
    auto bytes = checked_byte_size(t->dtype, t->shape);
    if (!bytes.ok()) return fail(ctx, bytes.status());
    h->set_dtype(static_cast<int32_t>(t->dtype));
    h->mutable_shape()->Assign(t->shape.begin(), t->shape.end());
    h->set_total_bytes(*bytes);
    resp->set_written(*bytes <= span_bytes);
    return grpc::Status::OK;
  }

  grpc::Status Copy(grpc::ServerContext* ctx, const v1::CopyRequest* req,
                    v1::CopyResponse* resp) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    auto h = engine_->copy(g.engine_session(), req->handle(), req->device());
    if (!h.ok()) return fail(ctx, h.status());
    resp->set_handle(*h);
    return grpc::Status::OK;
  }

  grpc::Status Release(grpc::ServerContext* ctx, const v1::HandleRequest* req,
                       v1::ReleaseResponse* resp) override {
    Guard g(this, ctx);
    if (!g.ok()) return fail(ctx, g.status());
    return fail(ctx, engine_->release(g.engine_session(), req->handle()));
  }

 private:
  // Marks the session busy for the duration of one call (the reaper skips busy sessions) and
  // renews its lease at both ends of the call.
  class Guard {
   public:
    Guard(Service* service, grpc::ServerContextBase* ctx) : service_(service) {
      auto tenant = service->tenant_of(ctx);
      if (!tenant.ok()) {
        status_ = tenant.status();
        return;
      }
      auto id = service->session_id(ctx);
      if (!id.ok()) {
        status_ = id.status();
        return;
      }
      std::lock_guard<std::mutex> lock(service->mu_);
      auto it = service->find_session_locked(*id, *tenant);
      if (it == service->sessions_.end()) {
        status_ = service->unknown_session();
        return;
      }
      const int64_t max_calls = service->options_.max_calls_per_session;
      if (max_calls > 0 && it->second.in_flight >= max_calls) {
        status_ = errors::ResourceExhausted(
            "the session has {} calls in flight, its limit (tensord serve "
            "--max-calls-per-session {})",
            it->second.in_flight, max_calls);
        return;
      }
      it->second.in_flight++;
      it->second.last_seen = Clock::now();
      id_ = *id;
      engine_session_ = it->second.engine_session;
      memory_limit_ = it->second.memory_limit;
    }
    ~Guard() {
      if (id_.empty()) return;
      std::lock_guard<std::mutex> lock(service_->mu_);
      auto it = service_->sessions_.find(id_);
      if (it == service_->sessions_.end()) return;  // closed meanwhile
      it->second.in_flight--;
      it->second.last_seen = Clock::now();
    }
    bool ok() const { return status_.ok(); }
    const Status& status() const { return status_; }
    SessionId engine_session() const { return engine_session_; }
    int64_t memory_limit() const { return memory_limit_; }
    // Bytes of the session's uploads and model loads in progress.
    int64_t pending_bytes() const {
      std::lock_guard<std::mutex> lock(service_->mu_);
      SessionState* s = state_locked();
      return s ? s->pending_bytes : 0;
    }
    // Charges `bytes` being received (an upload block, a model's staging buffer) to the
    // session until uncharge(): refused when they would take it past its memory limit.
    Status charge(int64_t bytes, const char* what) const {
      std::lock_guard<std::mutex> lock(service_->mu_);
      SessionState* s = state_locked();
      if (!s) return errors::NotFound("the session ended during {}", what);
      if (memory_limit_ > 0) {
        const int64_t held = service_->engine_->session_bytes(engine_session_) + s->pending_bytes;
        if (bytes > memory_limit_ - held)
          return errors::ResourceExhausted(
              "session memory limit exceeded: {} of {} bytes would bring the session to {} "
              "bytes, {} of them still arriving (limit {})",
              what, bytes, held + bytes, s->pending_bytes + bytes, memory_limit_);
      }
      const int64_t tenant_limit = service_->options_.tenant_memory_limit;
      if (tenant_limit > 0 && !s->tenant.empty()) {
        int64_t pending = 0;  // all of the tenant's sessions
        for (const auto& [id, other] : service_->sessions_)
          if (other.tenant == s->tenant) pending += other.pending_bytes;
        const int64_t held = service_->engine_->tenant_bytes(s->tenant) + pending;
        if (bytes > tenant_limit - held)
          return errors::ResourceExhausted(
              "tenant memory limit exceeded: {} of {} bytes would bring the tenant's sessions to "
              "{} bytes, {} of them still arriving (tensord serve --tenant-memory-limit {})",
              what, bytes, held + bytes, pending + bytes, tenant_limit);
      }
      s->pending_bytes += bytes;
      return OkStatus();
    }
    void uncharge(int64_t bytes) const {
      if (bytes == 0) return;
      std::lock_guard<std::mutex> lock(service_->mu_);
      if (SessionState* s = state_locked()) s->pending_bytes -= bytes;
    }
    const std::string& id() const { return id_; }
    // The session's state; the caller holds service->mu_. Null once the session has ended.
    SessionState* state_locked() const {
      auto it = service_->sessions_.find(id_);
      return it == service_->sessions_.end() ? nullptr : &it->second;
    }

   private:
    Service* service_;
    Status status_;
    std::string id_;
    SessionId engine_session_ = 0;
    int64_t memory_limit_ = 0;
  };

  // Errors the broker raises are marked, so a client can tell them from transport failures.
  static grpc::Status fail(grpc::ServerContextBase* ctx, const Status& s) {
    if (s.ok()) return grpc::Status::OK;
    ctx->AddTrailingMetadata(kErrorKey, "1");
    return to_grpc(s);
  }

  // The session id the call names: 32 lowercase hex characters (OpenSessionResponse.session_id).
  Result<std::string> session_id(grpc::ServerContextBase* ctx) const {
    const auto& md = ctx->client_metadata();
    auto it = md.find(kSessionKey);
    if (it == md.end())
      return errors::InvalidArgument(
          "no session: the call needs the metadata '{}' with the id OpenSession returned",
          kSessionKey);
    std::string text(it->second.data(), it->second.size());
    bool hex = text.size() == 32;
    for (char c : text) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    if (!hex) {
      if (text.size() > 40) text = text.substr(0, 40) + "...";
      return errors::InvalidArgument(
          "invalid session id '{}' in the metadata '{}': expected the 32 hex characters "
          "OpenSession returned (session_id)",
          text, kSessionKey);
    }
    return text;
  }

  // The session `id` if it exists and belongs to `tenant`, else sessions_.end(): a session of
  // another tenant is not found, exactly like one that never existed. Caller holds mu_.
  std::unordered_map<std::string, SessionState>::iterator find_session_locked(
      const std::string& id, const std::string& tenant) {
    auto it = sessions_.find(id);
    if (it == sessions_.end() || it->second.tenant != tenant) return sessions_.end();
    return it;
  }

  // Whether `tenant` may open one more session (the broker's and the tenant's session limits).
  // Caller holds mu_.
  Status session_room_locked(const std::string& tenant) const {
    if (options_.max_sessions > 0 && static_cast<int64_t>(sessions_.size()) >= options_.max_sessions)
      return errors::ResourceExhausted(
          "OpenSession: the broker holds its limit of {} sessions (tensord serve --max-sessions)",
          options_.max_sessions);
    if (options_.max_sessions_per_tenant > 0) {
      int64_t mine = 0;
      for (const auto& [id, s] : sessions_) mine += s.tenant == tenant;
      if (mine >= options_.max_sessions_per_tenant)
        return errors::ResourceExhausted(
            "OpenSession: this tenant has {} sessions open, its limit (tensord serve "
            "--max-sessions-per-tenant {}); close some first",
            mine, options_.max_sessions_per_tenant);
    }
    return OkStatus();
  }

  // A streamed upload (client streaming, raw messages): the header's size is checked before a
  // byte is taken, then each chunk's data is copied once, from gRPC's receive buffers straight
  // into a pooled block that becomes the tensor (no staging copy, no second allocation).
  // Messages are tensord.v1.UploadChunk, parsed here field by field for that reason.
  class UploadReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
   public:
    UploadReactor(Service* service, grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response)
        : service_(service), ctx_(ctx), response_(response), guard_(service, ctx) {
      if (!guard_.ok()) {
        end(guard_.status());
        return;
      }
      StartRead(&message_);
    }
    void OnReadDone(bool ok) override {
      if (!ok) {  // the client finished sending (or went away)
        end(complete());
        return;
      }
      Status s = take(message_);
      message_.Clear();
      if (!s.ok()) {
        end(s);
        return;
      }
      StartRead(&message_);
    }
    void OnDone() override { delete this; }
    ~UploadReactor() override { guard_.uncharge(std::exchange(charged_, 0)); }

   private:
    using WFL = google::protobuf::internal::WireFormatLite;

    // One UploadChunk: its header (first message only) and data, in whatever field order.
    Status take(grpc::ByteBuffer& message) {
      ++messages_;
      grpc::ProtoBufferReader reader(&message);
      google::protobuf::io::CodedInputStream in(&reader);
      std::string early;  // data that came before the header in the first message
      bool header_here = false;
      for (uint32_t tag = in.ReadTag(); tag != 0; tag = in.ReadTag()) {
        const int field = WFL::GetTagFieldNumber(tag);
        const bool delimited = WFL::GetTagWireType(tag) == WFL::WIRETYPE_LENGTH_DELIMITED;
        uint32_t len = 0;
        if ((field == 1 || field == 2) && (!delimited || !in.ReadVarint32(&len)))
          return malformed();
        if (field == 3 || field == 4) {  // part_of, offset: first message, before any data
          uint64_t v = 0;
          if (WFL::GetTagWireType(tag) != WFL::WIRETYPE_VARINT || !in.ReadVarint64(&v) ||
              messages_ > 1 || block_ || header_here)
            return malformed();
          (field == 3 ? part_of_ : part_offset_) = v;
          continue;
        }
        if (field == 1) {
          if (part_of_ != 0) return malformed();
          if (messages_ > 1)
            return errors::InvalidArgument("upload: message {} repeats the header", messages_);
          std::string bytes;
          if (!in.ReadString(&bytes, static_cast<int>(len)) || !header_.ParseFromString(bytes))
            return malformed();
          header_here = true;
          TD_RETURN_IF_ERROR(start());
          if (!early.empty()) TD_RETURN_IF_ERROR(append(early.data(), early.size()));
        } else if (field == 2) {
          if (!block_ && part_of_ != 0) TD_RETURN_IF_ERROR(attach_part());
          if (!block_) {  // the header has not come yet
            if (messages_ > 1 || !early.empty()) return malformed();
            if (!in.ReadString(&early, static_cast<int>(len))) return malformed();
            continue;
          }
          TD_RETURN_IF_ERROR(check_room(len));
          if (!in.ReadRaw(block_.get() + received_, static_cast<int>(len))) return malformed();
          received_ += len;
        } else if (!WFL::SkipField(&in, tag)) {
          return malformed();
        }
      }
      if (!in.ConsumedEntireMessage()) return malformed();
      if (messages_ == 1 && !header_here && part_of_ != 0 && !block_) {
        // part_of came after the data (protobuf writes fields in number order).
        TD_RETURN_IF_ERROR(attach_part());
        if (!early.empty()) TD_RETURN_IF_ERROR(append(early.data(), early.size()));
      }
      if (messages_ == 1 && !header_here && part_of_ == 0)
        return errors::InvalidArgument(
            "upload: the first message must carry the header (dtype, shape, device, "
            "total_bytes)");
      return OkStatus();
    }
    Status malformed() const {
      return errors::InvalidArgument("upload: message {} is not a tensord.v1.UploadChunk",
                                     messages_);
    }
    Status check_room(uint64_t n) const {
      if (static_cast<int64_t>(n) > size_ - received_)
        return errors::InvalidArgument(
            "upload: the header declares {} bytes, but the stream carries more ({} after "
            "message {})",
            size_, received_ + static_cast<int64_t>(n), messages_);
      return OkStatus();
    }
    Status append(const void* data, size_t n) {
      TD_RETURN_IF_ERROR(check_room(n));
      std::memcpy(block_.get() + received_, data, n);
      received_ += static_cast<int64_t>(n);
      return OkStatus();
    }
    Status start() {
      TD_ASSIGN_OR_RETURN(size_, service_->check_header(guard_, header_));
      // Charged to the session while it arrives (the engine counts it once it is a tensor).
      TD_RETURN_IF_ERROR(guard_.charge(size_, "upload"));
      charged_ = size_;
      block_ = service_->pool_.get(static_cast<size_t>(size_));
      if (!block_)
        return errors::ResourceExhausted(
            "upload: cannot hold {} bytes in the broker's host memory", size_);
      return OkStatus();
    }
    // The first message of a part: the pending upload's bytes, from its offset.
    Status attach_part() {
      std::lock_guard<std::mutex> lock(service_->mu_);
      SessionState* s = guard_.state_locked();
      auto it = s ? s->uploads.find(part_of_) : decltype(s->uploads)::iterator{};
      if (!s || it == s->uploads.end())
        return errors::NotFound("upload {} does not exist in this session", part_of_);
      pending_ = it->second;
      if (part_offset_ > static_cast<uint64_t>(pending_->size))
        return errors::InvalidArgument("upload {}: offset {} is past its {} bytes", part_of_,
                                       part_offset_, pending_->size);
      block_ = pending_->block;
      size_ = pending_->size;
      received_ = static_cast<int64_t>(part_offset_);
      return OkStatus();
    }
    Status complete() {
      if (ctx_->IsCancelled())
        return Status(StatusCode::kCancelled, "upload: the client cancelled the stream");
      if (messages_ == 0)
        return errors::InvalidArgument("upload: the stream ended before its header");
      if (pending_) {  // a part: recorded; FinishUpload checks the whole
        {
          std::lock_guard<std::mutex> lock(pending_->mu);
          pending_->parts.emplace_back(static_cast<int64_t>(part_offset_), received_);
        }
        v1::UploadResponse resp;
        std::string bytes = resp.SerializeAsString();
        grpc::Slice slice(bytes);
        *response_ = grpc::ByteBuffer(&slice, 1);
        return OkStatus();
      }
      if (received_ != size_)
        return errors::InvalidArgument(
            "upload: the header declares {} bytes, but the stream carried {}", size_, received_);
      TensorView view{static_cast<DType>(header_.dtype()),
                      Shape(header_.shape().begin(), header_.shape().end()), block_.get()};
      TD_ASSIGN_OR_RETURN(TensorHandle h, service_->engine_->upload_external(
                                              guard_.engine_session(), view, header_.device(),
                                              std::shared_ptr<void>(block_)));
      v1::UploadResponse resp;
      resp.set_handle(h);
      std::string bytes = resp.SerializeAsString();
      grpc::Slice slice(bytes);
      *response_ = grpc::ByteBuffer(&slice, 1);
      return OkStatus();
    }
    void end(const Status& s) {
      block_.reset();  // an error frees the block now, not when gRPC is done with the call
      guard_.uncharge(std::exchange(charged_, 0));
      Finish(fail(ctx_, s));
    }

    Service* service_;
    grpc::CallbackServerContext* ctx_;
    grpc::ByteBuffer* response_;
    Guard guard_;
    grpc::ByteBuffer message_;
    v1::UploadHeader header_;
    std::shared_ptr<unsigned char> block_;
    int64_t size_ = 0, received_ = 0, messages_ = 0;
    int64_t charged_ = 0;  // bytes charged to the session's pending uploads
    uint64_t part_of_ = 0, part_offset_ = 0;       // a part of a parallel upload
    std::shared_ptr<PendingUpload> pending_;
  };

  // The same for every session the caller cannot use (never existed, ended, another tenant's).
  Status unknown_session() const {
    return errors::NotFound(
        "the session named in the metadata '{}' does not exist (closed, or no call renewed its "
        "lease of {} ms)",
        kSessionKey, options_.lease.count());
  }

  // Validates an upload header: dtype, shape, declared size, and whether the bytes can fit
  // (device memory, session limit) before any are received. Returns the byte size.
  Result<int64_t> check_header(const Guard& g, const v1::UploadHeader& h) {
    TD_ASSIGN_OR_RETURN(int64_t size, checked_wire_size(h.dtype(), h.shape(), "upload"));
    if (h.total_bytes() != size)
      return errors::InvalidArgument(
          "upload: the header declares {} bytes, but {}{} takes {} bytes", h.total_bytes(),
          dtype_name(static_cast<DType>(h.dtype())),
          shape_to_string(Shape(h.shape().begin(), h.shape().end())), size);
    if (g.memory_limit() > 0) {
      const int64_t held = engine_->session_bytes(g.engine_session()) + g.pending_bytes();
      if (size > g.memory_limit() - held)
        return errors::ResourceExhausted(
            "session memory limit exceeded: uploading {} bytes would bring the session to {} "
            "bytes (limit {})",
            size, held + size, g.memory_limit());
    }
    std::string device = h.device();
    if (device.empty()) {
      auto dd = engine_->default_device();
      if (dd.ok()) device = *dd;
    }
    for (const auto& d : engine_->devices()) {
      if (d.name != device) continue;
      if (size > d.memory_bytes - d.memory_in_use)
        return errors::ResourceExhausted(
            "upload: {} bytes do not fit on {} now (capacity {} bytes)", size, d.name,
            d.memory_bytes);
    }
    return size;  // an unknown device is the engine's to report
  }

  grpc::Status finish_upload(grpc::ServerContext* ctx, const Guard& g, const v1::UploadHeader& h,
                             const void* data, v1::UploadResponse* resp) {
    TensorView view{static_cast<DType>(h.dtype()), Shape(h.shape().begin(), h.shape().end()), data};
    auto handle = engine_->upload(g.engine_session(), view, h.device());
    if (!handle.ok()) return fail(ctx, handle.status());
    resp->set_handle(*handle);
    return grpc::Status::OK;
  }

  // Values of small outputs, for the answer (see ExecuteRequest.inline_max_bytes): outputs
  // whose size is known before they run and fits the budget are waited for and sent along.
  // Disarms a call's token when the handler returns (its poll reads the call's context).
  struct Disarm {
    CancelToken* token;
    ~Disarm() { token->disarm(); }
  };

  // A call's token (Engine waits give up when it fires; work submitted with it stops): the
  // client's gRPC deadline, if any, and a poll of "the client cancelled or went away".
  static std::shared_ptr<CancelToken> call_token(grpc::ServerContext* ctx) {
    auto token = std::make_shared<CancelToken>();
    const auto deadline = ctx->deadline();
    const auto now = std::chrono::system_clock::now();
    if (deadline < now + std::chrono::hours(24 * 365))
      token->set_deadline(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::max(deadline - now, decltype(deadline - now){0})));
    // Only waits made in this call poll it (on this thread), never the work.
    token->poll = [ctx] {
      return ctx->IsCancelled() ? Status(StatusCode::kCancelled,
                                         "cancelled: the client cancelled the call or went away")
                                : OkStatus();
    };
    return token;
  }

  // The answer of Execute / RunModel: the output handles and the small values inline. When
  // the call gave up while waiting for them (its token fired: deadline, client gone), its work
  // is cancelled and the outputs released, since the client will never see their handles.
  grpc::Status finish_submit(grpc::ServerContext* ctx, const Guard& g, CancelToken& call,
                             const std::vector<TensorHandle>& out, int64_t inline_max_bytes,
                             google::protobuf::RepeatedField<uint64_t>* outputs,
                             google::protobuf::RepeatedPtrField<v1::InlineValue>* values) {
    outputs->Assign(out.begin(), out.end());
    add_inline_values(g, out, inline_max_bytes, values, &call);
    if (Status s = call.cancelled_status(); !s.ok()) {
      for (TensorHandle h : out) (void)engine_->release(g.engine_session(), h);
      return fail(ctx, s);
    }
    return grpc::Status::OK;
  }

  void add_inline_values(const Guard& g, const std::vector<TensorHandle>& outputs,
                         int64_t max_bytes,
                         google::protobuf::RepeatedPtrField<v1::InlineValue>* dst,
                         CancelToken* call = nullptr) {
    if (max_bytes <= 0) return;
    int64_t budget = std::min<int64_t>(max_bytes, kMaxInlineBytes);
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (call && call->cancelled()) return;  // the call gave up: see finish_submit
      auto info = engine_->info(g.engine_session(), outputs[i], call);
      v1::InlineValue v;
      v.set_index(static_cast<int32_t>(i));
      if (!info.ok()) {
        v.set_code(static_cast<int32_t>(info.status().code()));
        v.set_message(info.status().message());
        *dst->Add() = std::move(v);
        continue;
      }
      auto size = checked_byte_size(info->type.dtype, info->type.shape);
      if (!size.ok() || *size > budget) continue;  // data-dependent or too large: by handle
      // Read straight into the answer's bytes (no HostTensor in between).
      std::string* data = v.mutable_value()->mutable_data();
      data->resize(static_cast<size_t>(*size));
      auto t = engine_->read_into(g.engine_session(), outputs[i], data->data(), data->size(),
                                  call);
      v.set_device(info->device);
      if (!t.ok()) {
        v.clear_value();
        v.set_code(static_cast<int32_t>(t.status().code()));
        v.set_message(t.status().message());
      } else if (auto n = checked_byte_size(t->dtype, t->shape); !n.ok() || *n != *size) {
        continue;  // not the size inferred before it ran: read by handle
      } else {
        budget -= *size;
        v.mutable_value()->set_dtype(static_cast<int32_t>(t->dtype));
        v.mutable_value()->mutable_shape()->Assign(t->shape.begin(), t->shape.end());
      }
      *dst->Add() = std::move(v);
    }
  }

  grpc::Status finish_load(grpc::ServerContext* ctx, const Guard& g, const v1::Graph& proto,
                           const std::string& device, v1::LoadModelResponse* resp) {
    auto graph = from_proto(proto);
    if (!graph.ok()) return fail(ctx, graph.status().with_context("load model"));
    auto model = engine_->load(g.engine_session(), *graph, device);
    if (!model.ok()) return fail(ctx, model.status());
    resp->set_model(*model);
    return grpc::Status::OK;
  }

  Result<std::shared_ptr<Region>> find_region(const Guard& g, uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    SessionState* s = g.state_locked();
    if (s) {
      auto it = s->regions.find(id);
      if (it != s->regions.end()) return it->second;
    }
    return errors::NotFound(
        "shared-memory region {} is not registered in this session (RegisterRegion first)", id);
  }

  // Maps a client's region from the descriptor it passed (see Region): a memfd on tmpfs,
  // sealed against shrinking, at least `bytes` long. The caller keeps the descriptor.
  Result<std::shared_ptr<Region>> open_region(int fd, int64_t bytes) {
    auto r = std::make_shared<Region>();
    {
      char link[320] = {};
      const std::string self = "/proc/self/fd/" + std::to_string(fd);
      const ssize_t n = readlink(self.c_str(), link, sizeof link - 1);
      std::string name = n > 0 ? std::string(link, static_cast<size_t>(n)) : "";
      if (name.rfind("/memfd:", 0) == 0) name = name.substr(7);
      if (const size_t d = name.rfind(" (deleted)"); d != std::string::npos) name.resize(d);
      r->name = name.empty() ? "memfd" : name;
    }
    // Seals first, then the size: once F_SEAL_SHRINK is seen, the size read after it can
    // only grow, so the whole mapping stays backed.
    struct statfs fs {};
    const int seals =
        fstatfs(fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC ? fcntl(fd, F_GET_SEALS) : -1;
    struct stat st {};
    if (seals < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
      return errors::FailedPrecondition(
          "RegisterRegion: the descriptor is not a memfd (create the region with "
          "memfd_create(MFD_ALLOW_SEALING), without MFD_HUGETLB)");
    if (!(seals & F_SEAL_SHRINK))
      return errors::FailedPrecondition(
          "RegisterRegion: region '{}' is not sealed against shrinking: seal it with "
          "F_SEAL_SHRINK (fcntl F_ADD_SEALS; memfd_create with MFD_ALLOW_SEALING), so that it "
          "can never become shorter than the broker's mapping",
          r->name);
    if (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE))
      return errors::FailedPrecondition(
          "RegisterRegion: region '{}' is sealed against writing (F_SEAL_WRITE or "
          "F_SEAL_FUTURE_WRITE): the broker writes read results into it",
          r->name);
    if (st.st_size < bytes)
      return errors::InvalidArgument(
          "RegisterRegion: region '{}' is {} bytes, smaller than the {} bytes declared", r->name,
          static_cast<int64_t>(st.st_size), bytes);
    void* base =
        mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
      return errors::ResourceExhausted("RegisterRegion: cannot map {} bytes of region '{}': {}",
                                       bytes, r->name, std::strerror(errno));
    r->base = static_cast<unsigned char*>(base);
    r->size = bytes;
    return r;
  }

  void reap_loop() {
    const auto period = std::clamp<std::chrono::milliseconds>(
        options_.lease / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      cv_.wait_for(lock, period);
      if (stopping_) break;
      const auto now = Clock::now();
      std::vector<SessionId> expired;
      for (auto it = sessions_.begin(); it != sessions_.end();) {
        if (it->second.in_flight == 0 && now - it->second.last_seen > options_.lease) {
          expired.push_back(it->second.engine_session);
          it = sessions_.erase(it);
        } else {
          ++it;
        }
      }
      lock.unlock();
      for (SessionId s : expired) (void)engine_->close_session(s);
      pool_.trim(now - std::chrono::seconds(10));
      lock.lock();
    }
  }

  std::shared_ptr<Engine> engine_;
  RpcServerOptions options_;
  HostPool pool_{host_pool_bytes()};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::unordered_map<std::string, SessionState> sessions_;
  std::shared_ptr<const Tenants> tenants_;
  bool auth_in_filter_ = false;
  std::thread reaper_;
  const std::string host_id_ = host_boot_id();
  // The region socket (shared memory); null when it could not be opened: no shared memory.
  const std::unique_ptr<RegionChannel> region_channel_ = [] {
    auto c = RegionChannel::open();
    return c.ok() ? std::move(c).value() : nullptr;
  }();

  std::recursive_mutex attach_mu_;
  std::set<AttachReactor*> attached_;
  bool attach_closed_ = false;

  class RejectReactor final : public grpc::ServerWriteReactor<v1::AttachEvent> {
    void OnDone() override { delete this; }
  };
};

AttachReactor::AttachReactor(Service* service, std::string session)
    : service_(service), session_(std::move(session)) {
  event_.set_session_id(session_);
  StartWrite(&event_);
}

void AttachReactor::finish_once(const grpc::Status& s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  finished_ = true;
  Finish(s);
}

void AttachReactor::OnCancel() {
  // The client cancelled, died, or its connection dropped: free its session now.
  service_->drop_session(session_);
  finish_once(grpc::Status::CANCELLED);
}

void AttachReactor::end_for_shutdown() {
  finish_once(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the broker is shutting down"));
}

void AttachReactor::OnDone() {
  service_->attach_done(this);
  delete this;
}

// True when a process accepts connections on the unix socket at `path`. gRPC unlinks an
// existing socket file before binding, which would silently take a live broker's address.
bool unix_socket_is_served(const std::string& path) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool served = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return served;
}

}  // namespace

bool is_loopback_listen(const std::string& listen) {
  if (listen.rfind("unix:", 0) == 0 || listen.rfind("unix-abstract:", 0) == 0) return true;
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host == "localhost" || host == "::1" || host == "0:0:0:0:0:0:0:1") return true;
  // 127.0.0.0/8, dotted quad only.
  unsigned a = 0, b = 0, c = 0, d = 0;
  char tail = 0;
  return std::sscanf(host.c_str(), "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 && a == 127 &&
         b < 256 && c < 256 && d < 256;
}

struct RpcServer::Impl {
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  std::mutex shutdown_mu;
  std::condition_variable shutdown_cv;
  bool shutdown_started = false;
  bool shutdown_done = false;
};

RpcServer::RpcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RpcServer::~RpcServer() {
  shutdown(std::chrono::milliseconds(0));
  wait();
}

Result<std::unique_ptr<RpcServer>> RpcServer::start(std::shared_ptr<Engine> engine,
                                                    const RpcServerOptions& options) {
  if (!engine) return errors::InvalidArgument("RpcServer: no engine");
  if (options.listen.empty()) return errors::InvalidArgument("RpcServer: no listen address");
  if (options.lease.count() <= 0)
    return errors::InvalidArgument("RpcServer: the session lease must be positive, got {} ms",
                                   options.lease.count());
  if (options.session_memory_limit < 0)
    return errors::InvalidArgument("RpcServer: negative session memory limit {}",
                                   options.session_memory_limit);
  if (options.tenant_memory_limit < 0)
    return errors::InvalidArgument("RpcServer: negative tenant memory limit {}",
                                   options.tenant_memory_limit);
  if (options.tenant_memory_limit > 0 && options.token.empty() && options.tenants.empty())
    return errors::InvalidArgument(
        "a tenant memory limit needs tenants: give --token-file (without tokens every caller "
        "is the same anonymous user; --session-memory-limit and --max-sessions bound them)");
  const bool is_unix = options.listen.rfind("unix:", 0) == 0;
  if (!is_unix && options.listen.find(':') == std::string::npos)
    return errors::InvalidArgument("listen address '{}' is neither HOST:PORT nor unix:PATH",
                                   options.listen);
  for (const auto& [name, v] : {std::pair<const char*, int64_t>{"max_message_bytes",
                                                                 options.max_message_bytes},
                                {"max_sessions", options.max_sessions},
                                {"max_sessions_per_tenant", options.max_sessions_per_tenant},
                                {"max_calls_per_session", options.max_calls_per_session},
                                {"max_model_bytes", options.max_model_bytes},
                                {"max_threads", options.max_threads},
                                {"grpc_memory_bytes", options.grpc_memory_bytes}})
    if (v < 0) return errors::InvalidArgument("RpcServer: negative {} {}", name, v);
  if (options.max_message_bytes > kMaxMessageBytes)
    return errors::InvalidArgument("RpcServer: max_message_bytes {} is over {}",
                                   options.max_message_bytes, kMaxMessageBytes);
  auto tenants = std::make_shared<const Tenants>(options);
  const bool tls = !options.tls_cert_pem.empty() || !options.tls_key_pem.empty();
  if (tls && (options.tls_cert_pem.empty() || options.tls_key_pem.empty()))
    return errors::InvalidArgument("TLS needs both a certificate and its key (--tls-cert, --tls-key)");
  if (!tls && !options.tls_client_ca_pem.empty())
    return errors::InvalidArgument(
        "a client CA (--tls-ca) needs TLS itself: give --tls-cert and --tls-key too");
  const bool loopback = is_loopback_listen(options.listen);
  if (!loopback && !tenants->required() && !options.insecure)
    return errors::InvalidArgument(
        "refusing to listen on '{}' without a token: it is not a loopback address, so anyone "
        "who can reach it could use this broker. Give --token-file (and --tls-cert/--tls-key), "
        "or --insecure to serve it open anyway",
        options.listen);

  if (is_unix && unix_socket_is_served(options.listen.substr(5)))
    return errors::Unavailable("cannot listen on '{}': another process is serving there",
                               options.listen);
  keep_grpc_initialized();
  // Credentials. Tokens are checked by a TokenProcessor, before a call's message is read,
  // wherever gRPC runs one: TLS, and "local" credentials (no handshake on the wire: plain
  // HTTP/2 as with insecure ones, but only for loopback peers or unix sockets). A plain
  // listener on another address can only check them in the methods, after the message came
  // (bounded by max_message_bytes).
  std::shared_ptr<grpc::ServerCredentials> creds;
  bool auth_in_filter = false;
  if (tls) {
    grpc::SslServerCredentialsOptions ssl(
        options.tls_client_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = options.tls_client_ca_pem;
    ssl.pem_key_cert_pairs.push_back({options.tls_key_pem, options.tls_cert_pem});
    creds = grpc::SslServerCredentials(ssl);
    auth_in_filter = true;
  } else if (loopback) {
    creds = grpc::experimental::LocalServerCredentials(is_unix ? UDS : LOCAL_TCP);
    auth_in_filter = true;
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  if (!creds) return errors::InvalidArgument("cannot make the server's credentials (bad PEM?)");
  if (auth_in_filter && tenants->required())
    creds->SetAuthMetadataProcessor(std::make_shared<TokenProcessor>(tenants));
  else
    auth_in_filter = false;

  auto impl = std::make_unique<Impl>();
  impl->service = std::make_unique<Service>(std::move(engine), options, tenants, auth_in_filter);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, creds, &port);
  builder.RegisterService(impl->service.get());
  // Threads (one per in-flight synchronous call) and gRPC's buffers are bounded: held-open
  // streams get RESOURCE_EXHAUSTED past the thread limit instead of a thread each.
  grpc::ResourceQuota quota("tensord-serve");
  if (options.max_threads > 0) quota.SetMaxThreads(static_cast<int>(options.max_threads));
  if (options.grpc_memory_bytes > 0) quota.Resize(static_cast<size_t>(options.grpc_memory_bytes));
  builder.SetResourceQuota(quota);
  // gRPC sets SO_REUSEPORT by default: a second broker on the same port would then start and
  // share the connections with the first. Refuse a taken port instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(
      options.max_message_bytes > 0 ? options.max_message_bytes : kMaxMessageBytes));
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // Let clients keep idle connections checked with pings (see RemoteClient), and find dead
  // clients ourselves.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  // Bulk transfers: a large initial stream window so a chunked upload is not stalled by
  // HTTP/2 flow control before BDP probing has grown the window.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 20);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, 4 << 20);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, 8 << 20);
  // The sync server's pollers notice a shutdown only when their completion-queue wait times
  // out (10 s by default), which made SIGTERM take up to 10 s.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::CQ_TIMEOUT_MSEC, 100);
  impl->server = builder.BuildAndStart();
  if (!impl->server || (!is_unix && port == 0))
    return errors::Unavailable("cannot listen on '{}' (address in use, or not a local address?)",
                               options.listen);
  if (is_unix) {
    impl->address = options.listen;
  } else {
    impl->address = options.listen.substr(0, options.listen.rfind(':') + 1) + std::to_string(port);
  }
  return std::unique_ptr<RpcServer>(new RpcServer(std::move(impl)));
}

const std::string& RpcServer::address() const { return impl_->address; }

void RpcServer::shutdown(std::chrono::milliseconds grace) {
  {
    std::lock_guard<std::mutex> lock(impl_->shutdown_mu);
    if (impl_->shutdown_started) return;
    impl_->shutdown_started = true;
  }
  impl_->service->end_attachments();
  impl_->server->Shutdown(std::chrono::system_clock::now() + grace);
  impl_->server->Wait();
  impl_->service->close_all();
  {
    std::lock_guard<std::mutex> lock(impl_->shutdown_mu);
    impl_->shutdown_done = true;
  }
  impl_->shutdown_cv.notify_all();
}

void RpcServer::wait() {
  std::unique_lock<std::mutex> lock(impl_->shutdown_mu);
  impl_->shutdown_cv.wait(lock, [&] { return impl_->shutdown_done; });
}

int64_t RpcServer::session_count() const { return impl_->service->session_count(); }

}  // namespace tensord::rpc
