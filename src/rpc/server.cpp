#include "rpc/server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "core/errors.h"
#include "rpc/http_server.h"
#include "rpc/kserve.h"
#include "rpc/log_interceptor.h"
#include "rpc/monitor.h"
#include "rpc/server_internal.h"
#include "rpc/wire.h"

namespace tensord::rpc {
namespace {

using server_impl::Service;
using server_impl::Tenants;
using server_impl::TokenProcessor;

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

namespace {

// The token of an HTTP Authorization header as gRPC metadata would carry it: "Bearer TOKEN"
// as is; HTTP Basic auth (what a browser sends) with the token as the password.
std::string bearer_from_http(const std::string& header) {
  if (header.rfind("Basic ", 0) != 0) return header;
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string decoded;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 6; i < header.size(); ++i) {
    const char c = header[i];
    if (c == '=' || c == ' ') continue;
    const size_t v = kAlphabet.find(c);
    if (v == std::string::npos) return "";
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      decoded += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  const size_t colon = decoded.find(':');
  return colon == std::string::npos ? "" : "Bearer " + decoded.substr(colon + 1);
}

}  // namespace

struct RpcServer::Impl {
  std::unique_ptr<Service> service;
  // KServe v2 beside tensord's protocol (rpc/kserve.h): its gRPC service, and the runner both
  // fronts (gRPC, HTTP) share.
  std::shared_ptr<kserve::NamedModelRunner> kserve_runner;
  std::unique_ptr<grpc::Service> kserve_service;
  std::atomic<const Monitor*> ready_monitor{nullptr};  // `monitor`, once made (for the runner)
  std::unique_ptr<grpc::Server> server;
  std::string address;
  // Monitoring: the calls' counters (filled by an interceptor), the samples, HTTP.
  std::shared_ptr<RpcMetrics> rpc_metrics = std::make_shared<RpcMetrics>();
  std::atomic<bool> accepting{false};
  std::unique_ptr<Monitor> monitor;
  std::unique_ptr<HttpServer> http;
  std::string http_address, http_url;
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
  route_grpc_log();
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
  std::shared_ptr<Engine> monitored_engine = engine;
  impl->service = std::make_unique<Service>(std::move(engine), options, tenants, auth_in_filter);
  impl->service->set_rpc_metrics(impl->rpc_metrics);
  if (tenants->required()) {  // each tenant's calls and errors, for its own view of the status
    Service* svc = impl->service.get();
    impl->rpc_metrics->tenant_of = [svc](grpc::ServerContextBase* ctx) {
      auto t = svc->tenant_of(ctx);
      return t.ok() ? *t : std::string();
    };
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, creds, &port);
  builder.RegisterService(impl->service.get());
  {
    kserve::NamedModelRunner::Options ko;
    ko.session_memory_limit = options.session_memory_limit;
    ko.tenant_memory_limit = options.tenant_memory_limit;
    ko.model_runner = impl->service->model_runner();  // batching and per-model counters
    Impl* raw = impl.get();
    ko.ready = [raw](std::string* why) {
      const Monitor* m = raw->ready_monitor.load();
      if (!m && why) *why = "the broker is starting";
      return m && m->ready(why);
    };
    impl->kserve_runner = std::make_shared<kserve::NamedModelRunner>(monitored_engine, ko);
    Service* svc = impl->service.get();
    impl->kserve_service = kserve::make_grpc_service(
        impl->kserve_runner, [svc](grpc::ServerContextBase* ctx) { return svc->tenant_of(ctx); });
    builder.RegisterService(impl->kserve_service.get());
  }
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
  // Interceptors, in order, each self-contained: the metrics one counts every call
  // (rpc/monitor.h), the log's writes core/log.h lines for failed and slow calls. One call to
  // SetInterceptorCreators: a second would replace the first list.
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(make_metrics_interceptor(impl->rpc_metrics));
  interceptors.push_back(make_log_interceptor_factory(options.slow_request_ms));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  // A taken port makes gRPC log a long error text: keep it (at debug) and say why in one line.
  GrpcLogCapture capture;
  impl->server = builder.BuildAndStart();
  if (!impl->server || (!is_unix && port == 0)) {
    const std::string why = capture.os_error();
    if (!why.empty())
      return errors::Unavailable("cannot listen on '{}': {}", options.listen, why);
    return errors::Unavailable("cannot listen on '{}' (address in use, or not a local address?)",
                               options.listen);
  }
  if (is_unix) {
    impl->address = options.listen;
  } else {
    impl->address = options.listen.substr(0, options.listen.rfind(':') + 1) + std::to_string(port);
  }
  impl->accepting = true;

  MonitorSources sources;
  sources.engine = std::move(monitored_engine);
  sources.rpc = impl->rpc_metrics;
  Service* service = impl->service.get();
  sources.sessions = [service] { return service->session_summaries(); };
  Impl* raw = impl.get();
  sources.accepting = [raw] { return raw->accepting.load(); };
  sources.grpc_address = impl->address;
  sources.model_metrics = [runner = service->model_runner()] { return runner->prometheus(); };
  sources.tenants = tenants->required();
  impl->monitor = std::make_unique<Monitor>(std::move(sources));
  impl->service->set_monitor(impl->monitor.get());
  impl->ready_monitor.store(impl->monitor.get());
  if (!options.http_listen.empty()) {
    HttpServerOptions ho;
    ho.listen = options.http_listen;
    ho.insecure = options.insecure;
    ho.tls_cert_pem = options.tls_cert_pem;
    ho.tls_key_pem = options.tls_key_pem;
    ho.tls_client_ca_pem = options.tls_client_ca_pem;
    if (tenants->required())
      ho.authorize = [tenants](const std::string& header) -> std::optional<StatusView> {
        const std::string bearer = bearer_from_http(header);
        if (bearer.empty()) return std::nullopt;
        std::multimap<grpc::string_ref, grpc::string_ref> md;
        md.emplace(kAuthKey, bearer);
        StatusView v;
        auto t = tenants->authenticate(md, &v.all);
        if (!t.ok()) return std::nullopt;
        v.tenant = *t;
        return v;
      };
    ho.max_connections = options.http_max_connections;
    ho.max_connections_per_ip = options.http_max_connections_per_ip;
    ho.header_timeout = options.http_header_timeout;
    std::shared_ptr<kserve::NamedModelRunner> runner = impl->kserve_runner;
    ho.v2 = [runner](const kserve::HttpRequest& r, const std::optional<std::string>& tenant) {
      return kserve::handle_http(*runner, r, tenant);
    };
    if (options.max_message_bytes > 0) ho.max_body_bytes = options.max_message_bytes;
    auto http = HttpServer::start(impl->monitor.get(), ho);
    if (!http.ok()) {
      impl->accepting = false;
      impl->server->Shutdown(std::chrono::system_clock::now());
      impl->server->Wait();
      impl->monitor->stop();
      return http.status();
    }
    impl->http = std::move(http).value();
    impl->http_address = impl->http->address();
    impl->http_url = impl->http->url();
    impl->monitor->set_http_address(impl->http_url);
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
  impl_->accepting = false;  // /readyz answers 503 while the calls drain
  impl_->service->end_attachments();
  impl_->server->Shutdown(std::chrono::system_clock::now() + grace);
  impl_->server->Wait();
  impl_->service->stop_run_channels();  // each answers its call in flight first
  impl_->service->close_all();
  if (impl_->http) impl_->http->stop();
  impl_->kserve_runner.reset();  // (its sessions closed once the last request has finished)
  impl_->monitor->stop();
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

const std::string& RpcServer::http_address() const { return impl_->http_address; }
const std::string& RpcServer::http_url() const { return impl_->http_url; }

}  // namespace tensord::rpc
