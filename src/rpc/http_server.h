// The broker's HTTP endpoints (`tensord serve --http ADDR`, cpp-httplib):
//
//   GET /            the status page (one self-contained HTML page: rpc/status_page.cpp)
//   GET /api/status  its JSON (Monitor::status; ?history=SECONDS, default 600)
//   GET /metrics     Prometheus text format 0.0.4 (Monitor::prometheus)
//   GET /healthz     200 while the process serves HTTP at all
//   GET /readyz      200 when the engine has devices and the gRPC server accepts calls, else 503
//   /v2/...          the KServe v2 inference protocol over HTTP (rpc/kserve.h; GET, and POST
//                    with a body of Content-Length bytes, at most max_body_bytes)
//
// Security follows the gRPC listener's: when tokens are required, /, /api/status and /metrics
// need one ("Authorization: Bearer TOKEN", or HTTP Basic auth with the token as the password,
// which a browser asks for); /healthz and /readyz stay open (they say only up or down, and
// probes seldom carry secrets). What a token is shown is its StatusView (rpc/monitor.h): an
// operator's token everything, a tenant's its own figures. With TLS the endpoints are HTTPS
// with the same certificate and key, and with a client CA they require client certificates as
// well. A non-loopback address needs a token or `insecure`, as for gRPC.
//
// Connections cannot starve it: one thread (epoll) accepts every connection and reads its
// request's headers (and does the TLS handshake) without blocking, with a deadline
// (header_timeout) after which the connection is closed; connections past max_connections, or
// past max_connections_per_ip from one client address, are closed at once. /healthz and
// /readyz are answered by that thread itself; the other endpoints by a few workers, each given
// only a request whose headers are complete. Every answer closes its connection (no
// keep-alive: an idle client holds nothing).
//
// Private to src/rpc; RpcServer starts it (RpcServerOptions::http_listen).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "rpc/kserve.h"
#include "rpc/monitor.h"
#include "tensord/status.h"

namespace tensord::rpc {

struct HttpServerOptions {
  // "PORT" or ":PORT" (loopback: 127.0.0.1), "HOST:PORT", "[V6]:PORT"; port 0: a free port.
  std::string listen;
  // Checks an Authorization header's value: what it may see, or nullopt (401) when it is no
  // token of the broker's. Null: no token required (everything is shown).
  std::function<std::optional<StatusView>(const std::string& authorization)> authorize;
  bool insecure = false;
  std::string tls_cert_pem, tls_key_pem, tls_client_ca_pem;  // PEM contents
  int max_connections = 256;       // connections held at once (accepted, not yet answered)
  int max_connections_per_ip = 32;  // of those, from one client address
  std::chrono::milliseconds header_timeout{5000};  // from accept to the headers' end
  int workers = 4;                 // threads answering /, /api/status and /metrics
  // /v2/...: KServe v2 (kserve::handle_http), given the request with its body and the caller's
  // tenant (nullopt: no valid token). Null: those paths are 404.
  std::function<kserve::HttpResponse(const kserve::HttpRequest&,
                                     const std::optional<std::string>& tenant)>
      v2;
  int64_t max_body_bytes = int64_t{64} << 20;     // a POST's body (413 beyond)
  std::chrono::milliseconds body_timeout{30000};  // to receive it once the headers are in
};

class HttpServer {
 public:
  static Result<std::unique_ptr<HttpServer>> start(const Monitor* monitor,
                                                   const HttpServerOptions& options);
  ~HttpServer();  // stop()
  // Stops listening and waits for requests in progress. Idempotent.
  void stop();
  // "127.0.0.1:9090" (the chosen port for port 0), and "http://127.0.0.1:9090" or https.
  const std::string& address() const;
  const std::string& url() const;

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The status page's HTML (rpc/status_page.cpp). "/*TENSORD_INITIAL_STATUS*/null" in it is
// replaced by the status JSON when served, so it renders before its first refresh.
extern const char* const kStatusPageHtml;

}  // namespace tensord::rpc
