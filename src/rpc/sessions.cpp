// The session table: opening, closing and leasing sessions, their tenants (tokens), the
// per-call Guard that charges their memory, and Attach.
#include "rpc/server_internal.h"

#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/host_blocks.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include "core/log.h"

namespace tensord::rpc::server_impl {

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

Service::Service(std::shared_ptr<Engine> engine, const RpcServerOptions& options,
                 std::shared_ptr<const Tenants> tenants, bool auth_in_filter)
    : engine_(std::move(engine)),
      options_(options),
      tenants_(std::move(tenants)),
      auth_in_filter_(auth_in_filter) {
  runner_ = std::make_shared<ModelRunner>(engine_, options_.model_configs);
  runner_->start();  // batched models compile their batch forms now, not at their first request
  max_region_bytes_ =
      options_.max_region_bytes > 0 ? options_.max_region_bytes : default_max_region_bytes();
  max_regions_ = options_.max_regions > 0 ? options_.max_regions : default_max_regions();
  std::set<std::string> names;
  if (!options_.token.empty()) names.insert("default");
  for (const auto& t : options_.tenants) names.insert(t.name);
  // Several tenants: none may take more than half of the broker's regions.
  const int64_t share = names.size() > 1 ? 2 : 1;
  tenant_region_bytes_ = std::max<int64_t>(max_region_bytes_ / share, 1);
  tenant_regions_ = std::max<int64_t>(max_regions_ / share, 1);
  log::debug("shared-memory regions", {{"max_region_bytes", max_region_bytes_},
                                       {"max_regions", max_regions_},
                                       {"tenant_region_bytes", tenant_region_bytes_},
                                       {"tenant_regions", tenant_regions_}});
  channels_stop_fd_ = eventfd(0, EFD_CLOEXEC);  // -1: OpenRunChannel refuses (see run_channel.cpp)
  reaper_ = std::thread([this] { reap_loop(); });
}

Service::~Service() {
  stop_run_channels();
  if (channels_stop_fd_ >= 0) close(channels_stop_fd_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  reaper_.join();
  close_all();
}

int64_t Service::session_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(sessions_.size());
}

void Service::close_all() {
  std::unordered_map<std::string, SessionState> dead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dead.swap(sessions_);
  }
  for (auto& [id, s] : dead) (void)close_logged(id, s, "broker stopping");
}

// A session whose Attach call ended (the client went away): freed at once.
void Service::drop_session(const std::string& id) {
  SessionState dead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return;
    dead = std::move(it->second);
    sessions_.erase(it);
  }
  (void)close_logged(id, dead, "client went away");
}

// Closes the engine session of `s` (already out of the table) with one log line saying why.
Status Service::close_logged(const std::string& id, const SessionState& s, const char* why) {
  const int64_t bytes = engine_->session_bytes(s.engine_session);
  // Its regions stop counting in the engine (its tenant's other sessions go on).
  for (const auto& [rid, r] : s.regions) r->detach();
  Status st = engine_->close_session(s.engine_session);
  log::info("session closed", {{"session", id.substr(0, 8)},
                               {"reason", why},
                               {"peer", s.peer},
                               {"tenant", s.tenant},
                               {"memory_bytes", bytes}});
  return st;
}

void Service::attach_done(AttachReactor* r) {
  std::lock_guard<std::recursive_mutex> lock(attach_mu_);
  attached_.erase(r);
}

// Ends every Attach call (before the server's shutdown, which would otherwise wait for them
// for the whole grace period).
void Service::end_attachments() {
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
Result<std::string> Service::tenant_of(grpc::ServerContextBase* ctx) const {
  return tenants_->authenticate(ctx->client_metadata());
}

Status Service::check_token(grpc::ServerContextBase* ctx) const { return tenant_of(ctx).status(); }

grpc::Status Service::OpenSession(grpc::ServerContext* ctx, const v1::OpenSessionRequest* req,
                                  v1::OpenSessionResponse* resp) {
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
  s.peer = ctx->peer();
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
    log::info("session opened", {{"session", id.substr(0, 8)},
                                 {"peer", s.peer},
                                 {"tenant", s.tenant},
                                 {"memory_limit_bytes", limit}});
    sessions_.emplace(id, std::move(s));
  }
  resp->set_session_id(id);
  resp->set_lease_ms(options_.lease.count());
  resp->set_memory_limit(limit);
  return grpc::Status::OK;
}

grpc::Status Service::CloseSession(grpc::ServerContext* ctx, const v1::CloseSessionRequest* req,
                                   v1::CloseSessionResponse* resp) {
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
    closed_by_client_.emplace_back(*id, *tenant);
    if (closed_by_client_.size() > 1024) closed_by_client_.pop_front();
  }
  return fail(ctx, close_logged(*id, dead, "closed by the client"));
}

grpc::Status Service::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                v1::HeartbeatResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  resp->set_lease_ms(options_.lease.count());
  return grpc::Status::OK;
}

grpc::ServerWriteReactor<v1::AttachEvent>* Service::Attach(grpc::CallbackServerContext* ctx,
                                                           const v1::AttachRequest* req) {
  auto tenant = tenant_of(ctx);
  Result<std::string> id = tenant.ok() ? session_id(ctx) : Result<std::string>(tenant.status());
  bool closed = false;  // by its own client, before this call arrived
  if (id.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (find_session_locked(*id, *tenant) == sessions_.end()) {
      closed = std::find(closed_by_client_.begin(), closed_by_client_.end(),
                         std::make_pair(*id, *tenant)) != closed_by_client_.end();
      id = unknown_session();
    }
  }
  if (closed) {  // ends as an Attach ends when its client closes the session: CANCELLED
    auto* r = new RejectReactor();
    r->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the session was closed by its client"));
    return r;
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

// The session id the call names: 32 lowercase hex characters (OpenSessionResponse.session_id).
Result<std::string> Service::session_id(grpc::ServerContextBase* ctx) const {
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
std::unordered_map<std::string, SessionState>::iterator Service::find_session_locked(
    const std::string& id, const std::string& tenant) {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second.tenant != tenant) return sessions_.end();
  return it;
}

// Whether `tenant` may open one more session (the broker's and the tenant's session limits).
// Caller holds mu_.
Status Service::session_room_locked(const std::string& tenant) const {
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

// The same for every session the caller cannot use (never existed, ended, another tenant's).
Status Service::unknown_session() const {
  return errors::NotFound(
      "the session named in the metadata '{}' does not exist (closed, or no call renewed its "
      "lease of {} ms)",
      kSessionKey, options_.lease.count());
}

void Service::reap_loop() {
  const auto period = std::clamp<std::chrono::milliseconds>(
      options_.lease / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
  std::unique_lock<std::mutex> lock(mu_);
  auto last_trim = Clock::now();
  // When the engine last did work (a lease renewal is no work: clients renew every few
  // seconds), and what it had done by then.
  auto last_active = Clock::now();
  int64_t work_seen = -1;
  auto pools_trimmed = Clock::time_point::min();
  while (!stopping_) {
    cv_.wait_for(lock, period);
    if (stopping_) break;
    const auto now = Clock::now();
    std::vector<std::pair<std::string, SessionState>> expired;
    bool busy = false;
    for (const auto& [id, st] : sessions_) busy = busy || st.in_flight > 0;
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (it->second.in_flight == 0 && now - it->second.last_seen > options_.lease) {
        expired.emplace_back(it->first, std::move(it->second));
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
    lock.unlock();
    for (const auto& [id, s] : expired) (void)close_logged(id, s, "lease expired");
    trim_idle_host_blocks(std::chrono::seconds(10));
    {
      const EngineMetrics em = engine_->metrics();
      // A session closing counts too: its tensors go back to the pools then.
      const int64_t work = em.executes + em.uploads + em.reads + em.compiles + em.cache_hits +
                           em.copies_same_device + em.copies_peer + em.copies_staged +
                           em.copies_mapped + (em.sessions_open << 32);
      if (work != work_seen) {
        work_seen = work;
        last_active = now;
      }
    }
    if (!busy && pools_trimmed < last_active && now - last_active >= std::chrono::seconds(10)) {
      // No call for 10 s: the devices' caching allocators give back what they keep for reuse
      // (a tenant's batch-64 runs left 40 MiB of blocks cached for good), and the heap its
      // free pages.
      const int64_t released = engine_->release_cached_memory();
      if (released > 0)
        log::debug("idle: cached device memory released", {{"bytes", released}});
      pools_trimmed = now;
      last_trim = now;
    }
#ifdef __GLIBC__
    // malloc keeps what it freed (the stream tuning in wire.cpp keeps big buffers in the
    // arenas on purpose, for speed while busy): a refused 900 MiB message, a dropped
    // executable or a closed tenant's compile left their peak as RSS for good. When no call
    // is in flight, at most every 5 s, the free pages go back to the kernel.
    if (!busy && now - last_trim >= std::chrono::seconds(5)) {
      malloc_trim(0);
      last_trim = now;
    }
#endif
    lock.lock();
  }
}

Service::Guard::Guard(Service* service, grpc::ServerContextBase* ctx) : service_(service) {
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
  enter(*id, *tenant);
}

Service::Guard::Guard(Service* service, const std::string& session_id, const std::string& tenant)
    : service_(service) {
  enter(session_id, tenant);
}

void Service::Guard::enter(const std::string& id, const std::string& tenant) {
  std::lock_guard<std::mutex> lock(service_->mu_);
  auto it = service_->find_session_locked(id, tenant);
  if (it == service_->sessions_.end()) {
    status_ = service_->unknown_session();
    return;
  }
  const int64_t max_calls = service_->options_.max_calls_per_session;
  if (max_calls > 0 && it->second.in_flight >= max_calls) {
    status_ = errors::ResourceExhausted(
        "the session has {} calls in flight, its limit (tensord serve "
        "--max-calls-per-session {})",
        it->second.in_flight, max_calls);
    return;
  }
  it->second.in_flight++;
  it->second.last_seen = Clock::now();
  id_ = id;
  tenant_ = tenant;
  engine_session_ = it->second.engine_session;
  memory_limit_ = it->second.memory_limit;
}

Service::Guard::~Guard() {
  if (id_.empty()) return;
  std::lock_guard<std::mutex> lock(service_->mu_);
  auto it = service_->sessions_.find(id_);
  if (it == service_->sessions_.end()) return;  // closed meanwhile
  it->second.in_flight--;
  it->second.last_seen = Clock::now();
}

  // Bytes of the session's uploads and model loads in progress.
int64_t Service::Guard::pending_bytes() const {
  std::lock_guard<std::mutex> lock(service_->mu_);
  SessionState* s = state_locked();
  return s ? s->pending_bytes : 0;
}

  // Charges `bytes` being received (an upload block, a model's staging buffer) to the
  // session until uncharge(): refused when they would take it past its memory limit.
Status Service::Guard::charge(int64_t bytes, const char* what) const {
  std::lock_guard<std::mutex> lock(service_->mu_);
  SessionState* s = state_locked();
  if (!s) return errors::NotFound("the session ended during {}", what);
  // Shared-memory regions count by their mapped size (Region::charged).
  if (memory_limit_ > 0) {
    const int64_t regions = s->region_bytes();
    const int64_t held =
        service_->engine_->session_bytes(engine_session_) + s->pending_bytes + regions;
    if (bytes > memory_limit_ - held)
      return errors::ResourceExhausted(
          "session memory limit exceeded: {} of {} bytes would bring the session to {} "
          "bytes, {} of them still arriving, {} in shared-memory regions (limit {})",
          what, bytes, held + bytes, s->pending_bytes + bytes, regions, memory_limit_);
  }
  const int64_t tenant_limit = service_->options_.tenant_memory_limit;
  if (tenant_limit > 0 && !s->tenant.empty()) {
    int64_t pending = 0, regions = 0;  // all of the tenant's sessions
    for (const auto& [id, other] : service_->sessions_) {
      if (other.tenant != s->tenant) continue;
      pending += other.pending_bytes;
      regions += other.region_bytes();
    }
    const int64_t held = service_->engine_->tenant_bytes(s->tenant) + pending + regions;
    if (bytes > tenant_limit - held)
      return errors::ResourceExhausted(
          "tenant memory limit exceeded: {} of {} bytes would bring the tenant's sessions to "
          "{} bytes, {} of them still arriving, {} in shared-memory regions (tensord serve "
          "--tenant-memory-limit {})",
          what, bytes, held + bytes, pending + bytes, regions, tenant_limit);
  }
  s->pending_bytes += bytes;
  return OkStatus();
}

void Service::Guard::uncharge(int64_t bytes) const {
  if (bytes == 0) return;
  std::lock_guard<std::mutex> lock(service_->mu_);
  if (SessionState* s = state_locked()) s->pending_bytes -= bytes;
}

  // The session's state; the caller holds service->mu_. Null once the session has ended.
SessionState* Service::Guard::state_locked() const {
  auto it = service_->sessions_.find(id_);
  return it == service_->sessions_.end() ? nullptr : &it->second;
}

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

}  // namespace tensord::rpc::server_impl
