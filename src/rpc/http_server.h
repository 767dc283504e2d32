// The broker's HTTP endpoints (`tensord serve --http ADDR`, cpp-httplib):
//
//   GET /            the status page (one self-contained HTML page: rpc/status_page.cpp)
//   GET /api/status  its JSON (Monitor::status; ?history=SECONDS, default 600)
//   GET /metrics     Prometheus text format 0.0.4 (Monitor::prometheus)
//   GET /healthz     200 while the process serves HTTP at all
//   GET /readyz      200 when the engine has devices and the gRPC server accepts calls, else 503
//
// Security follows the gRPC listener's: when tokens are required, /, /api/status and /metrics
// need one ("Authorization: Bearer TOKEN", or HTTP Basic auth with the token as the password,
// which a browser asks for); /healthz and /readyz stay open (they say only up or down, and
// probes seldom carry secrets). With TLS the endpoints are HTTPS with the same certificate and
// key, and with a client CA they require client certificates as well. A non-loopback address
// needs a token or `insecure`, as for gRPC.
//
// Private to src/rpc; RpcServer starts it (RpcServerOptions::http_listen).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "rpc/monitor.h"
#include "tensord/status.h"

namespace tensord::rpc {

struct HttpServerOptions {
  // "PORT" or ":PORT" (loopback: 127.0.0.1), "HOST:PORT", "[V6]:PORT"; port 0: a free port.
  std::string listen;
  // Checks an Authorization header's value; null: no token required.
  std::function<bool(const std::string& authorization)> authorize;
  bool insecure = false;
  std::string tls_cert_pem, tls_key_pem, tls_client_ca_pem;  // PEM contents
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
