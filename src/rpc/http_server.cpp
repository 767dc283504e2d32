#include "rpc/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

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
std::string status_page(const Monitor& monitor, const StatusView& view) {
  std::string json = monitor.status(600, view).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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


using Clock = std::chrono::steady_clock;

constexpr size_t kMaxHeaderBytes = 16 << 10;  // the request line and headers
constexpr size_t kMaxQueued = 64;             // requests waiting for a worker
constexpr auto kWriteTimeout = std::chrono::seconds(10);

// One client connection, from accept to close.
struct Conn {
  int fd = -1;
  SSL* ssl = nullptr;
  std::string ip;
  std::string buf;  // what came so far (the request line and headers)
  Clock::time_point deadline;
  uint32_t events = EPOLLIN;
};

struct Request {
  std::string method, path, query, authorization;
  // For a POST (KServe v2's infer): its body's length, and what came of it with the headers.
  std::string content_type, expect, transfer_encoding, body;
  int64_t content_length = -1, inference_header_length = -1;
  size_t header_end = 0;  // where the headers end in the bytes received
};

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

const char* reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 403: return "Forbidden";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Unknown";
  }
}

std::string render(const Response& r, bool head) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + reason(r.status) + "\r\n";
  out += "Content-Type: " + r.content_type + "\r\n";
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  out += "Connection: close\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n";
  for (const auto& [k, v] : r.headers) out += k + ": " + v + "\r\n";
  out += "\r\n";
  if (!head) out += r.body;
  return out;
}

Response text(int status, std::string body) {
  Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

// The request line and headers in `raw` (ending with an empty line). False: not HTTP/1.x.
bool parse_request(const std::string& raw, Request* req) {
  size_t eol = raw.find('\n');
  if (eol == std::string::npos) return false;
  std::string line = raw.substr(0, eol);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const size_t sp1 = line.find(' ');
  const size_t sp2 = line.rfind(' ');
  if (sp1 == std::string::npos || sp2 == sp1) return false;
  req->method = line.substr(0, sp1);
  std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (line.compare(sp2 + 1, 7, "HTTP/1.") != 0) return false;
  const size_t q = target.find('?');
  req->path = target.substr(0, q);
  if (q != std::string::npos) req->query = target.substr(q + 1);
  for (size_t at = eol + 1; at < raw.size();) {
    size_t end = raw.find('\n', at);
    if (end == std::string::npos) end = raw.size();
    std::string h = raw.substr(at, end - at);
    at = end + 1;
    if (!h.empty() && h.back() == '\r') h.pop_back();
    if (h.empty()) {
      req->header_end = std::min(at, raw.size());
      break;
    }
    const size_t colon = h.find(':');
    if (colon == std::string::npos) continue;
    std::string name = h.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    size_t b = colon + 1, e = h.size();
    while (b < e && (h[b] == ' ' || h[b] == '\t')) ++b;
    while (e > b && (h[e - 1] == ' ' || h[e - 1] == '\t')) --e;
    const std::string value = h.substr(b, e - b);
    auto number = [&](int64_t* out) {
      if (value.empty() || value.size() > 18 ||
          value.find_first_not_of("0123456789") != std::string::npos)
        *out = -2;  // malformed
      else
        *out = std::stoll(value);
    };
    if (name == "authorization") {
      req->authorization = value;
    } else if (name == "content-type") {
      req->content_type = value;
    } else if (name == "expect") {
      req->expect = value;
    } else if (name == "transfer-encoding") {
      req->transfer_encoding = value;
    } else if (name == "content-length") {
      number(&req->content_length);
    } else if (name == "inference-header-content-length") {
      number(&req->inference_header_length);
    }
  }
  return true;
}

// The value of `key` in a query string; false when it is not there.
bool query_param(const std::string& query, const std::string& key, std::string* value) {
  size_t at = 0;
  while (at <= query.size()) {
    size_t end = query.find('&', at);
    if (end == std::string::npos) end = query.size();
    const std::string part = query.substr(at, end - at);
    const size_t eq = part.find('=');
    if (part.substr(0, eq) == key) {
      *value = eq == std::string::npos ? "" : part.substr(eq + 1);
      return true;
    }
    at = end + 1;
  }
  return false;
}

std::string peer_ip(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, buf, sizeof buf);
  else if (ss.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr, buf, sizeof buf);
  return buf;
}

}  // namespace

struct HttpServer::Impl {
  const Monitor* monitor = nullptr;
  HttpServerOptions options;
  SSL_CTX* ssl_ctx = nullptr;
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
  std::string address, url;

  std::thread front;
  std::vector<std::thread> workers;
  std::unordered_map<int, std::unique_ptr<Conn>> conns;  // the front's, waiting for headers
  bool listen_paused = false;                            // out of descriptors: accept later
  Clock::time_point resume_at;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<std::unique_ptr<Conn>, Request>> queue;
  std::map<std::string, int> per_ip;
  int total = 0;
  bool stopping = false;

  std::mutex stop_mu;
  bool stopped = false;

  ~Impl() {
    if (listen_fd >= 0) close(listen_fd);
    if (epoll_fd >= 0) close(epoll_fd);
    if (wake_fd >= 0) close(wake_fd);
    if (ssl_ctx) SSL_CTX_free(ssl_ctx);
  }

  void close_conn(std::unique_ptr<Conn> c) {
    if (c->ssl) {
      SSL_shutdown(c->ssl);  // best effort (non-blocking)
      SSL_free(c->ssl);
    }
    close(c->fd);
    std::lock_guard<std::mutex> lock(mu);
    --total;
    auto it = per_ip.find(c->ip);
    if (it != per_ip.end() && --it->second <= 0) per_ip.erase(it);
  }

  // Writes `data` within the deadline (the socket is non-blocking). False: not all of it.
  static bool write_all(Conn& c, const std::string& data, Clock::time_point deadline) {
    size_t at = 0;
    while (at < data.size()) {
      short wait = POLLOUT;
      if (c.ssl) {
        const int n = SSL_write(c.ssl, data.data() + at, static_cast<int>(data.size() - at));
        if (n > 0) {
          at += static_cast<size_t>(n);
          continue;
        }
        const int err = SSL_get_error(c.ssl, n);
        if (err == SSL_ERROR_WANT_READ) wait = POLLIN;
        else if (err != SSL_ERROR_WANT_WRITE) return false;
      } else {
        const ssize_t n = send(c.fd, data.data() + at, data.size() - at, MSG_NOSIGNAL);
        if (n > 0) {
          at += static_cast<size_t>(n);
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return false;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{c.fd, wait, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    }
    return true;
  }

  void answer(std::unique_ptr<Conn> c, const Request& req, const Response& res,
              Clock::duration budget) {
    write_all(*c, render(res, req.method == "HEAD"), Clock::now() + budget);
    close_conn(std::move(c));
  }

  // Returns false (and fills `res` with a 401) when a token is required and the request has
  // none that matches; else what it may see.
  bool allowed(const Request& req, Response& res, StatusView* view) const {
    if (!options.authorize) return true;
    if (auto v = options.authorize(req.authorization)) {
      *view = *v;
      return true;
    }
    res = text(401,
               "401 Unauthorized: this broker requires a token: send 'Authorization: Bearer TOKEN' "
               "(or HTTP Basic auth with the token as the password)\n");
    res.headers.push_back({"WWW-Authenticate", "Basic realm=\"tensord\", charset=\"UTF-8\""});
    return false;
  }

  // /healthz and /readyz: cheap, answered by the front thread itself.
  Response probe(const Request& req) const {
    if (req.path == "/healthz") return text(200, "ok\n");
    std::string why;
    const bool ok = monitor->ready(&why);
    return text(ok ? 200 : 503, why + "\n");
  }

  // The rest of a POST's body (what came with the headers is in req.body already), within
  // body_timeout; after "Expect: 100-continue" the client is told to send it first. False
  // (and `res` says why): it did not come whole.
  bool read_body(Conn& c, Request& req, Response* res) const {
    const auto deadline = Clock::now() + options.body_timeout;
    const size_t want = static_cast<size_t>(req.content_length);
    if (req.body.size() > want) req.body.resize(want);  // (no pipelining: Connection: close)
    if (req.body.size() < want && strcasecmp(req.expect.c_str(), "100-continue") == 0 &&
        !write_all(c, "HTTP/1.1 100 Continue\r\n\r\n", deadline)) {
      *res = text(400, "400 Bad Request: the client went away\n");
      return false;
    }
    try {
      req.body.reserve(want);
    } catch (const std::bad_alloc&) {
      *res = text(503, "503 Service Unavailable: no memory for the body\n");
      return false;
    }
    std::string tmp(std::min<size_t>(want - req.body.size(), 1 << 20) + 1, '\0');
    while (req.body.size() < want) {
      const size_t room = std::min(tmp.size(), want - req.body.size());
      short wait = POLLIN;
      if (c.ssl) {
        const int n = SSL_read(c.ssl, tmp.data(), static_cast<int>(room));
        if (n > 0) {
          req.body.append(tmp.data(), static_cast<size_t>(n));
          continue;
        }
        const int err = SSL_get_error(c.ssl, n);
        if (err == SSL_ERROR_WANT_WRITE) wait = POLLOUT;
        else if (err != SSL_ERROR_WANT_READ) break;
      } else {
        const ssize_t n = recv(c.fd, tmp.data(), room, 0);
        if (n > 0) {
          req.body.append(tmp.data(), static_cast<size_t>(n));
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) break;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        *res = text(408, "408 Request Timeout: the body did not arrive within " +
                             std::to_string(options.body_timeout.count()) + " ms\n");
        return false;
      }
      pollfd p{c.fd, wait, 0};
      poll(&p, 1, static_cast<int>(left.count()));
    }
    if (req.body.size() < want) {
      *res = text(400, "400 Bad Request: the connection closed after " +
                           std::to_string(req.body.size()) + " of the body's " +
                           std::to_string(want) + " bytes\n");
      return false;
    }
    return true;
  }

  // /v2/...: KServe v2 (rpc/kserve_http.cpp), with the caller's tenant when its token is good.
  Response kserve(const Request& req) const {
    std::optional<std::string> tenant = std::string();
    if (options.authorize) {
      auto v = options.authorize(req.authorization);
      tenant = v ? std::optional<std::string>(v->tenant) : std::nullopt;
    }
    kserve::HttpRequest kr;
    kr.method = req.method;
    kr.path = req.path;
    kr.content_type = req.content_type;
    kr.body = req.body;
    if (req.inference_header_length == -2)
      return text(400, "400 Bad Request: malformed Inference-Header-Content-Length\n");
    kr.inference_header_length = req.inference_header_length;
    kserve::HttpResponse kres = options.v2(kr, tenant);
    Response res;
    res.status = kres.status;
    res.content_type = kres.content_type;
    res.body = std::move(kres.body);
    res.headers = std::move(kres.headers);
    if (res.status == 401)
      res.headers.push_back({"WWW-Authenticate", "Basic realm=\"tensord\", charset=\"UTF-8\""});
    return res;
  }

  // Everything else, on a worker.
  Response route(const Request& req) const {
    Response res;
    StatusView view;
    if (options.v2 && (req.path == "/v2" || req.path.rfind("/v2/", 0) == 0)) return kserve(req);
    if (req.path == "/metrics") {
      if (!allowed(req, res, &view)) return res;
      res.content_type = "text/plain; version=0.0.4; charset=utf-8";
      res.body = monitor->prometheus(view);
      return res;
    }
    if (req.path == "/api/status") {
      if (!allowed(req, res, &view)) return res;
      int history = 600;
      std::string h;
      if (query_param(req.query, "history", &h)) {
        if (h.empty() || h.size() > 6 || h.find_first_not_of("0123456789") != std::string::npos)
          return text(400, "400 Bad Request: history must be a number of seconds (0 to 600)\n");
        history = std::min(600, std::stoi(h));
      }
      res.content_type = "application/json";
      res.body = monitor->status(history, view).dump(-1, ' ', false,
                                                      nlohmann::json::error_handler_t::replace);
      return res;
    }
    if (req.path == "/") {
      if (!allowed(req, res, &view)) return res;
      // The page's own script and style only: nothing is loaded from elsewhere.
      res.headers.push_back(
          {"Content-Security-Policy",
           "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
           "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
           "frame-ancestors 'none'"});
      res.content_type = "text/html; charset=utf-8";
      res.body = status_page(*monitor, view);
      return res;
    }
    std::string shown = req.path.substr(0, 200);
    for (char& c : shown)
      if (static_cast<unsigned char>(c) < 0x20) c = '?';
    return text(404, "404 Not Found: " + shown + (req.path.size() > 200 ? "..." : "") +
                         " (endpoints: /, /api/status, /metrics, /healthz, /readyz, /v2/...)\n");
  }

  void worker_loop() {
    for (;;) {
      std::unique_ptr<Conn> c;
      Request req;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;  // stopping
        c = std::move(queue.front().first);
        req = std::move(queue.front().second);
        queue.pop_front();
      }
      Response res;
      try {
        if (req.method == "POST" && !read_body(*c, req, &res)) {
          answer(std::move(c), req, res, std::chrono::milliseconds(100));
          continue;
        }
        res = route(req);
      } catch (const std::exception& e) {
        res = text(500, std::string("500 Internal Server Error: ") + e.what() + "\n");
      }
      answer(std::move(c), req, res, kWriteTimeout);
    }
  }

  void set_events(Conn& c, uint32_t events) {
    if (c.events == events) return;
    c.events = events;
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = c.fd;
    epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &ev);
  }

  // The connection to close for a newcomer whose address holds `newcomer_holds`: the oldest
  // one still sending its headers (the front's) from the address holding the most, when that
  // address holds more than the newcomer's would with it; -1 when there is none.
  int eviction_victim_locked(int newcomer_holds) const {
    const std::string* top = nullptr;
    int top_count = newcomer_holds + 1;
    for (const auto& [ip, n] : per_ip)
      if (n > top_count) {
        top = &ip;
        top_count = n;
      }
    if (!top) return -1;
    int victim = -1;
    Clock::time_point oldest = Clock::time_point::max();
    for (const auto& [fd, c] : conns)
      if (c->ip == *top && c->deadline < oldest) {
        oldest = c->deadline;
        victim = fd;
      }
    return victim;
  }

  void drop(int fd) {
    auto it = conns.find(fd);
    if (it == conns.end()) return;
    std::unique_ptr<Conn> c = std::move(it->second);
    conns.erase(it);
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    close_conn(std::move(c));
  }

  // The request's headers are complete: a probe is answered here, the rest queued.
  void dispatch(int fd) {
    auto it = conns.find(fd);
    std::unique_ptr<Conn> c = std::move(it->second);
    conns.erase(it);
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    Request req;
    if (!parse_request(c->buf, &req)) {
      answer(std::move(c), req, text(400, "400 Bad Request: not an HTTP/1.x request\n"),
             std::chrono::milliseconds(100));
      return;
    }
    const bool v2 = options.v2 && (req.path == "/v2" || req.path.rfind("/v2/", 0) == 0);
    if (req.method == "POST" && v2) {
      // KServe v2's infer: the body is read by the worker (read_body), bounded here.
      Response r;
      if (!req.transfer_encoding.empty())
        r = text(411,
                 "411 Length Required: send the body with a Content-Length (no "
                 "Transfer-Encoding)\n");
      else if (req.content_length < 0)
        r = text(req.content_length == -1 ? 411 : 400,
                 req.content_length == -1 ? "411 Length Required: a POST needs Content-Length\n"
                                          : "400 Bad Request: malformed Content-Length\n");
      else if (req.content_length > options.max_body_bytes)
        r = text(413, "413 Content Too Large: the body's " + std::to_string(req.content_length) +
                          " bytes are over the broker's limit of " +
                          std::to_string(options.max_body_bytes) + "\n");
      if (r.status != 200) {
        answer(std::move(c), req, r, std::chrono::milliseconds(100));
        return;
      }
      req.body = c->buf.substr(std::min(req.header_end, c->buf.size()));
    } else if (req.method != "GET" && req.method != "HEAD") {
      Response r = text(405, "405 Method Not Allowed: only GET and HEAD\n");
      r.headers.push_back({"Allow", "GET, HEAD"});
      answer(std::move(c), req, r, std::chrono::milliseconds(100));
      return;
    }
    if (req.path == "/healthz" || req.path == "/readyz") {
      // A small answer into an empty socket buffer: it does not wait (a client that does not
      // read it within 100 ms loses it).
      answer(std::move(c), req, probe(req), std::chrono::milliseconds(100));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      if (queue.size() < kMaxQueued) {
        queue.emplace_back(std::move(c), std::move(req));
        cv.notify_one();
        return;
      }
    }
    answer(std::move(c), req, text(503, "503 Service Unavailable: too many requests in progress\n"),
           std::chrono::milliseconds(100));
  }

  // Reads what the connection has; dispatches it once the headers are complete.
  void on_readable(int fd) {
    auto it = conns.find(fd);
    if (it == conns.end()) return;
    Conn& c = *it->second;
    char tmp[4096];
    for (;;) {
      ssize_t n;
      if (c.ssl) {
        const int r = SSL_read(c.ssl, tmp, sizeof tmp);
        if (r <= 0) {
          const int err = SSL_get_error(c.ssl, r);
          if (err == SSL_ERROR_WANT_READ) return set_events(c, EPOLLIN);
          if (err == SSL_ERROR_WANT_WRITE) return set_events(c, EPOLLOUT);
          ERR_clear_error();
          return drop(fd);  // a failed handshake, plain HTTP on the HTTPS port, a close
        }
        n = r;
      } else {
        n = recv(fd, tmp, sizeof tmp, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return set_events(c, EPOLLIN);
        if (n <= 0) return drop(fd);
      }
      const size_t from = c.buf.size() > 3 ? c.buf.size() - 3 : 0;
      c.buf.append(tmp, static_cast<size_t>(n));
      if (c.buf.find("\r\n\r\n", from) != std::string::npos ||
          c.buf.find("\n\n", from) != std::string::npos)
        return dispatch(fd);
      if (c.buf.size() > kMaxHeaderBytes) {
        std::unique_ptr<Conn> owned = std::move(it->second);
        conns.erase(it);
        epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
        answer(std::move(owned), Request{},
               text(431, "431 Request Header Fields Too Large: the headers are over 16 KiB\n"),
               std::chrono::milliseconds(100));
        return;
      }
    }
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: stop accepting for a moment rather than spin on the listener.
          epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
          listen_paused = true;
          resume_at = Clock::now() + std::chrono::milliseconds(100);
        }
        return;
      }
      auto c = std::make_unique<Conn>();
      c->fd = fd;
      c->ip = peer_ip(ss);
      int victim = -1;
      {
        std::lock_guard<std::mutex> lock(mu);
        auto it = per_ip.find(c->ip);
        const int from_ip = it == per_ip.end() ? 0 : it->second;
        if (from_ip >= options.max_connections_per_ip) {
          close(fd);  // over the per-address cap: closed at once
          continue;
        }
        if (total >= options.max_connections) {
          victim = eviction_victim_locked(from_ip);
          if (victim < 0) {
            close(fd);  // every place is held fairly: closed at once
            continue;
          }
        }
      }
      // At the total cap a newcomer (a liveness probe, say) takes the place of the oldest
      // connection still sending its headers from the address holding the most, so that
      // connections held idle from a few addresses cannot keep others out.
      if (victim >= 0) drop(victim);
      {
        std::lock_guard<std::mutex> lock(mu);
        ++per_ip[c->ip];
        ++total;
      }
      c->deadline = Clock::now() + options.header_timeout;
      if (ssl_ctx) {
        c->ssl = SSL_new(ssl_ctx);
        if (!c->ssl || SSL_set_fd(c->ssl, fd) != 1) {
          close_conn(std::move(c));
          continue;
        }
        SSL_set_accept_state(c->ssl);
      }
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close_conn(std::move(c));
        continue;
      }
      conns.emplace(fd, std::move(c));
    }
  }

  void front_loop() {
    std::vector<epoll_event> events(64);
    for (;;) {
      const int n = epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), 100);
      if (n < 0 && errno != EINTR) break;
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == wake_fd) return;
        if (fd == listen_fd) {
          accept_all();
          continue;
        }
        on_readable(fd);  // (a handshake may wait for writability too: the same step)
      }
      const auto now = Clock::now();
      if (listen_paused && now >= resume_at) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = listen_fd;
        epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev);
        listen_paused = false;
      }
      std::vector<int> late;
      for (const auto& [fd, c] : conns)
        if (now >= c->deadline) late.push_back(fd);
      for (int fd : late) drop(fd);  // no headers in time: closed, no answer
    }
  }
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() { stop(); }

const std::string& HttpServer::address() const { return impl_->address; }
const std::string& HttpServer::url() const { return impl_->url; }

void HttpServer::stop() {
  std::lock_guard<std::mutex> lock(impl_->stop_mu);
  if (impl_->stopped) return;
  impl_->stopped = true;
  const uint64_t one = 1;
  if (write(impl_->wake_fd, &one, sizeof one) < 0) {
  }
  if (impl_->front.joinable()) impl_->front.join();
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  for (auto& t : impl_->workers) t.join();  // (they finish the requests queued)
  std::vector<int> fds;
  for (const auto& [fd, c] : impl_->conns) fds.push_back(fd);
  for (int fd : fds) impl_->drop(fd);
  close(impl_->listen_fd);
  impl_->listen_fd = -1;
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(const Monitor* monitor,
                                                      const HttpServerOptions& o) {
  if (!monitor) return errors::InvalidArgument("HttpServer: no monitor");
  if (o.max_connections < 1 || o.max_connections_per_ip < 1 || o.workers < 1 ||
      o.header_timeout.count() <= 0)
    return errors::InvalidArgument(
        "HttpServer: max_connections {}, max_connections_per_ip {}, workers {} and "
        "header_timeout {} ms must all be positive",
        o.max_connections, o.max_connections_per_ip, o.workers, o.header_timeout.count());
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
  impl->monitor = monitor;
  impl->options = o;
  if (tls) {
    impl->ssl_ctx = SSL_CTX_new(TLS_server_method());
    std::string why;
    if (!impl->ssl_ctx || !setup_tls(*impl->ssl_ctx, o, &why))
      return errors::InvalidArgument("{}", why.empty() ? "cannot set up TLS for HTTP" : why);
  }

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found) != 0 || !found)
    return errors::Unavailable("cannot serve HTTP on '{}': cannot resolve '{}'", o.listen, host);
  int fd = -1;
  int bind_errno = 0;  // the reason, for the message when no address could be bound
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // Not SO_REUSEPORT: a second broker must not share this port.
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
      bind_errno = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0)
    return errors::Unavailable("cannot serve HTTP on '{}': {}", o.listen,
                               bind_errno ? std::strerror(bind_errno)
                                          : "address in use, or not a local address?");
  impl->listen_fd = fd;
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int bound_port = ntohs(bound.ss_family == AF_INET6
                                   ? reinterpret_cast<sockaddr_in6&>(bound).sin6_port
                                   : reinterpret_cast<sockaddr_in&>(bound).sin_port);
  impl->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  impl->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->epoll_fd < 0 || impl->wake_fd < 0)
    return errors::Unavailable("cannot serve HTTP on '{}': epoll: {}", o.listen,
                               std::strerror(errno));
  for (int f : {impl->listen_fd, impl->wake_fd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = f;
    epoll_ctl(impl->epoll_fd, EPOLL_CTL_ADD, f, &ev);
  }
  impl->address = bracketed + ":" + std::to_string(bound_port);
  impl->url = std::string(tls ? "https://" : "http://") + impl->address;
  Impl* raw = impl.get();
  impl->front = std::thread([raw] { raw->front_loop(); });
  for (int i = 0; i < o.workers; ++i) impl->workers.emplace_back([raw] { raw->worker_loop(); });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

}  // namespace tensord::rpc
