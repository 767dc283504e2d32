#include "rpc/http_server.h"

#include <httplib.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>

#include <cctype>
#include <thread>

#include "core/errors.h"
#include "rpc/server.h"

namespace tensord::rpc {

namespace {

// "9090", ":9090", "HOST:9090", "[::1]:9090" -> host (no brackets) and port.
Status parse_listen(const std::string& listen, std::string* host, int* port) {
  std::string h, p;
  const bool digits = !listen.empty() && listen.find_first_not_of("0123456789") == std::string::npos;
  if (digits) {
    h = "127.0.0.1";
    p = listen;
  } else {
    const size_t colon = listen.rfind(':');
    if (colon == std::string::npos || listen.rfind("unix:", 0) == 0)
      return errors::InvalidArgument(
          "--http '{}': give PORT (on 127.0.0.1), HOST:PORT or [IPV6]:PORT (unix sockets are "
          "for gRPC only)",
          listen);
    h = listen.substr(0, colon);
    p = listen.substr(colon + 1);
    if (h.empty()) h = "127.0.0.1";
    if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  }
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(p) > 65535)
    return errors::InvalidArgument("--http '{}': the port must be a number from 0 to 65535",
                                   listen);
  *host = h;
  *port = std::stoi(p);
  return OkStatus();
}

// Certificates from PEM text into a server context: the certificate (and any chain after it),
// its key, and a client CA (then client certificates are required and verified).
bool setup_tls(SSL_CTX& ctx, const HttpServerOptions& o, std::string* why) {
  auto bio = [](const std::string& pem) {
    return std::unique_ptr<BIO, decltype(&BIO_free)>(
        BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  };
  SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
  {
    auto b = bio(o.tls_cert_pem);
    X509* cert = b ? PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr) : nullptr;
    if (!cert || SSL_CTX_use_certificate(&ctx, cert) != 1) {
      if (cert) X509_free(cert);
      *why = "cannot use the TLS certificate (--tls-cert) for HTTP";
      return false;
    }
    X509_free(cert);
    while (X509* extra = PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr))
      if (SSL_CTX_add_extra_chain_cert(&ctx, extra) != 1) {  // takes ownership on success
        X509_free(extra);
        break;
      }
    ERR_clear_error();  // the end of the chain reads as an error
  }
  {
    auto b = bio(o.tls_key_pem);
    EVP_PKEY* key = b ? PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr) : nullptr;
    const bool ok = key && SSL_CTX_use_PrivateKey(&ctx, key) == 1 && SSL_CTX_check_private_key(&ctx) == 1;
    if (key) EVP_PKEY_free(key);
    if (!ok) {
      *why = "cannot use the TLS key (--tls-key) for HTTP, or it does not match the certificate";
      return false;
    }
  }
  if (!o.tls_client_ca_pem.empty()) {
    auto b = bio(o.tls_client_ca_pem);
    X509_STORE* store = SSL_CTX_get_cert_store(&ctx);
    STACK_OF(X509_NAME)* names = sk_X509_NAME_new_null();
    int n = 0;
    while (X509* ca = b ? PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr) : nullptr) {
      X509_STORE_add_cert(store, ca);
      if (names) sk_X509_NAME_push(names, X509_NAME_dup(X509_get_subject_name(ca)));
      X509_free(ca);
      ++n;
    }
    ERR_clear_error();
    if (n == 0) {
      if (names) sk_X509_NAME_pop_free(names, X509_NAME_free);
      *why = "cannot read the client CA (--tls-ca) for HTTP";
      return false;
    }
    SSL_CTX_set_client_CA_list(&ctx, names);  // takes ownership
    SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return true;
}

// The page with the current status inside, so it renders before its first refresh. '<' is
// escaped so that no string in the JSON can end the <script> element.
std::string status_page(const Monitor& monitor) {
  std::string json = monitor.status(600).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string safe;
  safe.reserve(json.size());
  for (char c : json) {
    if (c == '<') safe += "\\u003c";
    else safe += c;
  }
  std::string page = kStatusPageHtml;
  const std::string marker = "/*TENSORD_INITIAL_STATUS*/null";
  const size_t at = page.find(marker);
  if (at != std::string::npos) page.replace(at, marker.size(), safe);
  return page;
}

}  // namespace

struct HttpServer::Impl {
  std::unique_ptr<httplib::Server> server;
  std::thread thread;
  std::string address, url;
  std::mutex stop_mu;
  bool stopped = false;
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() { stop(); }

const std::string& HttpServer::address() const { return impl_->address; }
const std::string& HttpServer::url() const { return impl_->url; }

void HttpServer::stop() {
  std::lock_guard<std::mutex> lock(impl_->stop_mu);
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->server->stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(const Monitor* monitor,
                                                      const HttpServerOptions& o) {
  if (!monitor) return errors::InvalidArgument("HttpServer: no monitor");
  std::string host;
  int port = 0;
  TD_RETURN_IF_ERROR(parse_listen(o.listen, &host, &port));
  const std::string bracketed = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  if (!o.authorize && !o.insecure && !is_loopback_listen(bracketed + ":" + std::to_string(port)))
    return errors::InvalidArgument(
        "refusing to serve HTTP on '{}' without a token: it is not a loopback address, and "
        "/metrics and the status page show every session's figures. Give --token-file (and "
        "--tls-cert/--tls-key), or --insecure to serve it open anyway",
        o.listen);
  const bool tls = !o.tls_cert_pem.empty();
  auto impl = std::make_unique<Impl>();
  if (tls) {
    std::string why;
    auto server = std::make_unique<httplib::SSLServer>(
        [&](SSL_CTX& ctx) { return setup_tls(ctx, o, &why); });
    if (!server->is_valid())
      return errors::InvalidArgument("{}", why.empty() ? "cannot set up TLS for HTTP" : why);
    impl->server = std::move(server);
  } else {
    impl->server = std::make_unique<httplib::Server>();
  }
  httplib::Server& s = *impl->server;
  // Not SO_REUSEPORT (httplib's default): a second broker must not share this port.
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  s.new_task_queue = [] { return new httplib::ThreadPool(4); };
  s.set_read_timeout(std::chrono::seconds(10));
  s.set_write_timeout(std::chrono::seconds(10));
  s.set_keep_alive_timeout(30);
  s.set_payload_max_length(64 << 10);

  const auto authorize = o.authorize;
  // Returns false (and answers 401) when a token is required and the request has none that
  // matches.
  auto allowed = [authorize](const httplib::Request& req, httplib::Response& res) {
    if (!authorize) return true;
    if (authorize(req.get_header_value("Authorization"))) return true;
    res.status = 401;
    res.set_header("WWW-Authenticate", "Basic realm=\"tensord\", charset=\"UTF-8\"");
    res.set_content(
        "401 Unauthorized: this broker requires a token: send 'Authorization: Bearer TOKEN' "
        "(or HTTP Basic auth with the token as the password)\n",
        "text/plain; charset=utf-8");
    return false;
  };
  auto common = [](httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_header("X-Content-Type-Options", "nosniff");
  };

  s.Get("/healthz", [common](const httplib::Request&, httplib::Response& res) {
    common(res);
    res.set_content("ok\n", "text/plain; charset=utf-8");
  });
  s.Get("/readyz", [monitor, common](const httplib::Request&, httplib::Response& res) {
    common(res);
    std::string why;
    const bool ok = monitor->ready(&why);
    res.status = ok ? 200 : 503;
    res.set_content(why + "\n", "text/plain; charset=utf-8");
  });
  s.Get("/metrics", [monitor, allowed, common](const httplib::Request& req, httplib::Response& res) {
    common(res);
    if (!allowed(req, res)) return;
    res.set_content(monitor->prometheus(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/api/status", [monitor, allowed, common](const httplib::Request& req,
                                                 httplib::Response& res) {
    common(res);
    if (!allowed(req, res)) return;
    int history = 600;
    if (req.has_param("history")) {
      const std::string h = req.get_param_value("history");
      if (h.empty() || h.size() > 6 || h.find_first_not_of("0123456789") != std::string::npos) {
        res.status = 400;
        res.set_content("400 Bad Request: history must be a number of seconds (0 to 600)\n",
                        "text/plain; charset=utf-8");
        return;
      }
      history = std::min(600, std::stoi(h));
    }
    res.set_content(monitor->status(history).dump(-1, ' ', false,
                                                   nlohmann::json::error_handler_t::replace),
                    "application/json");
  });
  s.Get("/", [monitor, allowed, common](const httplib::Request& req, httplib::Response& res) {
    common(res);
    if (!allowed(req, res)) return;
    // The page's own script and style only: nothing is loaded from elsewhere.
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                   "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
                   "frame-ancestors 'none'");
    res.set_content(status_page(*monitor), "text/html; charset=utf-8");
  });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404 && res.body.empty())
      res.set_content("404 Not Found: " + req.path +
                          " (endpoints: /, /api/status, /metrics, /healthz, /readyz)\n",
                      "text/plain; charset=utf-8");
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    res.status = 500;
    res.set_content("500 Internal Server Error: " + what + "\n", "text/plain; charset=utf-8");
  });

  int bound = port;
  errno = 0;  // bind()'s reason, if it fails, for the message below
  if (port == 0) {
    bound = s.bind_to_any_port(host);
    if (bound <= 0) bound = 0;
  } else if (!s.bind_to_port(host, port)) {
    bound = 0;
  }
  if (bound == 0)
    return errors::Unavailable("cannot serve HTTP on '{}': {}", o.listen,
                               errno ? std::strerror(errno) : "address in use, or not local?");
  impl->address = bracketed + ":" + std::to_string(bound);
  impl->url = std::string(tls ? "https://" : "http://") + impl->address;
  httplib::Server* raw = impl->server.get();
  impl->thread = std::thread([raw] { raw->listen_after_bind(); });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

}  // namespace tensord::rpc
