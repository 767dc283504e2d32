// The run channel: RunModel and Execute from a client on the broker's host without gRPC.
//
// Through gRPC, a request crosses three or four threads each way (the event engine's pollers,
// then the sync server's thread), and on a small VM each wake-up costs tens of microseconds:
// about 0.35 ms per MobileNetV2 request against 0.13 ms for a bare echo. A run channel is one
// SOCK_SEQPACKET socket pair per client: the broker's end is served by a thread of its own,
// which reads a ChannelRequest, runs it exactly as the gRPC handler would (the same Guard,
// limits, engine calls, counters and log lines) and writes the ChannelAnswer back. The client's
// end is handed over by descriptor through the region socket under a one-time ticket that only
// the session's OpenRunChannel call learns, so the channel carries that session's calls and no
// other's; nothing on it names a session or a token.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "rpc/log_interceptor.h"
#include "rpc/server_internal.h"

namespace tensord::rpc::server_impl {
namespace {

constexpr int kIdleCheckMs = 1000;  // how often an idle channel checks its session is open
constexpr const char* kRunModelPath = "/tensord.v1.Tensord/RunModel";
constexpr const char* kExecutePath = "/tensord.v1.Tensord/Execute";

}  // namespace

Service::RunChannel::~RunChannel() {
  if (thread.joinable()) thread.join();
  if (fd >= 0) close(fd);
}

grpc::Status Service::OpenRunChannel(grpc::ServerContext* ctx, const v1::RunChannelRequest* req,
                                     v1::RunChannelResponse* resp) {
  (void)req;
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  if (!region_channel_)
    return fail(ctx, errors::FailedPrecondition(
                         "OpenRunChannel: this broker has no region socket to hand the "
                         "channel over (no shared memory); use RunModel and Execute"));
  int ends[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) != 0)
    return fail(ctx, errors::Unavailable("OpenRunChannel: socketpair failed: {}",
                                         std::strerror(errno)));
  std::list<std::unique_ptr<RunChannel>> finished;  // joined outside the lock
  RunChannel* c = nullptr;
  {
    std::lock_guard<std::mutex> lock(channels_mu_);
    for (auto it = channels_.begin(); it != channels_.end();) {
      if ((*it)->done.load()) {
        finished.splice(finished.end(), channels_, it++);
      } else {
        ++it;
      }
    }
    size_t session = 0, tenant = 0;
    for (const auto& ch : channels_) {
      session += ch->session == g.id();
      tenant += ch->tenant == g.tenant();
    }
    Status refused;
    if (channels_stopped_)
      refused = errors::Unavailable("OpenRunChannel: the broker is stopping");
    else if (channels_stop_fd_ < 0)
      refused = errors::Unavailable("OpenRunChannel: the broker could not make its eventfd");
    else if (session >= kMaxRunChannelsPerSession)
      refused = errors::ResourceExhausted(
          "OpenRunChannel: this session has {} run channels open, the most a session may "
          "(close a client, or use RunModel)",
          session);
    else if (tenants_->required() && tenant >= kMaxRunChannelsPerTenant)
      refused = errors::ResourceExhausted(
          "OpenRunChannel: this tenant's sessions have {} run channels open, the most a tenant "
          "may",
          tenant);
    else if (channels_.size() >= kMaxRunChannels)
      refused = errors::ResourceExhausted(
          "OpenRunChannel: the broker has {} run channels open, its limit", channels_.size());
    if (!refused.ok()) {
      close(ends[0]);
      close(ends[1]);
      return fail(ctx, refused);
    }
    auto ch = std::make_unique<RunChannel>();
    ch->fd = ends[0];
    ch->max_message = seqpacket_send_limit(ends[0], kChannelMaxMessage);
    ch->session = g.id();
    ch->tenant = g.tenant();
    c = ch.get();
    channels_.push_back(std::move(ch));
  }
  auto ticket = region_channel_->offer(g.engine_session(), ends[1], g.tenant());  // owns ends[1]
  std::lock_guard<std::mutex> lock(channels_mu_);
  if (!ticket.ok() || channels_stopped_) {
    c->done = true;  // never started: dropped (and its end closed) by the next OpenRunChannel
    return fail(ctx, ticket.ok() ? errors::Unavailable("OpenRunChannel: the broker is stopping")
                                 : ticket.status().with_context("OpenRunChannel"));
  }
  c->thread = std::thread([this, c] { serve_run_channel(c); });
  resp->set_ticket(*ticket);
  resp->set_ttl_ms(std::chrono::duration_cast<std::chrono::milliseconds>(RegionChannel::kTicketTtl)
                       .count());
  resp->set_max_message_bytes(c->max_message);
  return grpc::Status::OK;
}

bool Service::session_open(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.count(id) > 0;
}

void Service::serve_run_channel(RunChannel* c) {
  std::string buffer(static_cast<size_t>(kChannelMaxMessage), '\0');
  std::string out;
  v1::ChannelRequest req;
  v1::ChannelAnswer answer;
  // The methods' counters, looked up once (RpcMetrics::method takes a lock and a map lookup).
  RpcMetrics::Method* const run_counters =
      rpc_metrics_ ? rpc_metrics_->method(kRunModelPath) : nullptr;
  RpcMetrics::Method* const execute_counters =
      rpc_metrics_ ? rpc_metrics_->method(kExecutePath) : nullptr;
  for (;;) {
    pollfd p[2] = {{c->fd, POLLIN, 0}, {channels_stop_fd_, POLLIN, 0}};
    const int ready = poll(p, 2, kIdleCheckMs);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0 || p[1].revents != 0) break;
    if (ready == 0) {
      if (!session_open(c->session)) break;  // closed or reaped: the channel goes with it
      continue;
    }
    const ssize_t n = recv(c->fd, buffer.data(), buffer.size(), MSG_TRUNC | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) break;  // the client closed its end
    const auto start = std::chrono::steady_clock::now();
    answer.Clear();
    const char* method = kRunModelPath;
    Status s;
    if (static_cast<size_t>(n) > buffer.size())
      s = errors::InvalidArgument(
          "run channel: a message of {} bytes, over the channel's limit of {} (larger calls go "
          "through gRPC)",
          n, buffer.size());
    else if (!req.ParseFromArray(buffer.data(), static_cast<int>(n)))
      s = errors::InvalidArgument(
          "run channel: the {} bytes received are not a tensord.v1.ChannelRequest", n);
    else
      s = channel_call(*c, req, &answer, &method);
    answer.set_code(static_cast<int32_t>(s.code()));
    answer.set_message(s.message());
    out.clear();
    answer.SerializeToString(&out);
    if (static_cast<int64_t>(out.size()) > c->max_message) {
      // Too many outputs to answer inline: their handles go back without values (the client
      // reads them), or, with so many handles that even those do not fit, the error.
      answer.mutable_run()->clear_values();
      answer.mutable_execute()->clear_values();
      out.clear();
      answer.SerializeToString(&out);
      if (static_cast<int64_t>(out.size()) > c->max_message) {
        const v1::ChannelAnswer& done = answer;
        if (Guard g(this, c->session, c->tenant); g.ok())
          for (const auto* outputs : {&done.run().outputs(), &done.execute().outputs()})
            for (uint64_t h : *outputs) (void)engine_->release(g.engine_session(), h);
        s = errors::ResourceExhausted(
            "run channel: the answer's {} bytes do not fit a channel message ({}); the outputs "
            "were released (make this call through gRPC)",
            out.size(), c->max_message);
        answer.Clear();
        answer.set_code(static_cast<int32_t>(s.code()));
        answer.set_message(s.message());
        out.clear();
        answer.SerializeToString(&out);
      }
    }
    const auto took = std::chrono::steady_clock::now() - start;
    // Counted and logged as the gRPC interceptors count and log the same call.
    const int code = static_cast<int>(to_grpc(s).error_code());
    if (rpc_metrics_) {
      RpcMetrics::Method* m = method == kExecutePath ? execute_counters : run_counters;
      rpc_metrics_->record(m, code, took, s.message(),
                           rpc_metrics_->tenant_of ? c->tenant : std::string());
    }
    log_request(method, code, s.message(), std::chrono::duration<double, std::milli>(took).count(),
                options_.slow_request_ms, [] { return std::string("unix:run-channel"); },
                [c] { return c->session.substr(0, 8); });
    if (send(c->fd, out.data(), out.size(), MSG_NOSIGNAL) < 0) break;
  }
  shutdown(c->fd, SHUT_RDWR);  // a client waiting on its end learns at once
  c->done = true;
}

// One call on a channel: as the gRPC handler's, for the channel's session and tenant.
Status Service::channel_call(const RunChannel& c, v1::ChannelRequest& req,
                             v1::ChannelAnswer* answer, const char** method) {
  RequestBreakdown breakdown(req.breakdown());
  Guard g(this, c.session, c.tenant);
  if (!g.ok()) return g.status();
  breakdown.session_found();
  auto call = std::make_shared<CancelToken>();
  if (req.timeout_ms() > 0)
    call->set_deadline(Clock::now() + std::chrono::milliseconds(req.timeout_ms()));
  const int fd = c.fd;
  call->poll = [fd] {  // the client closed its end: nobody will read the answer
    pollfd p{fd, 0, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR)) != 0
               ? Status(StatusCode::kCancelled, "cancelled: the client closed its run channel")
               : OkStatus();
  };
  // Values inline up to what leaves room for the rest of the answer in one message.
  const int64_t inline_cap =
      std::max<int64_t>(0, std::min(kChannelMaxInlineBytes, c.max_message - (16 << 10)));
  Status s;
  if (req.has_run()) {
    *method = kRunModelPath;
    v1::RunModelRequest& run = *req.mutable_run();
    run.set_inline_max_bytes(std::min(run.inline_max_bytes(), inline_cap));
    s = run_model(g, run, call, breakdown, answer->mutable_run());
  } else if (req.has_execute()) {
    *method = kExecutePath;
    v1::ExecuteRequest& exec = *req.mutable_execute();
    exec.set_inline_max_bytes(std::min(exec.inline_max_bytes(), inline_cap));
    s = execute(g, exec, call, breakdown, answer->mutable_execute());
  } else {
    s = errors::InvalidArgument("run channel: the message names no call (run or execute)");
  }
  if (req.breakdown()) answer->set_breakdown(breakdown.text());
  return s;
}

void Service::stop_run_channels() {
  std::list<std::unique_ptr<RunChannel>> all;
  {
    std::lock_guard<std::mutex> lock(channels_mu_);
    channels_stopped_ = true;
    const uint64_t one = 1;
    if (channels_stop_fd_ >= 0) (void)!write(channels_stop_fd_, &one, sizeof one);
    all.swap(channels_);
  }
  all.clear();  // joins each thread once its call in flight has answered
}

size_t Service::run_channel_count() {
  std::lock_guard<std::mutex> lock(channels_mu_);
  size_t n = 0;
  for (const auto& c : channels_) n += !c->done.load();
  return n;
}

}  // namespace tensord::rpc::server_impl
