#include "cli/cmd_serve.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <vector>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/cli_common.h"
#include "core/log.h"
#include "client/model_repository.h"
#include "cluster/cluster.h"
#include "engine/engine.h"
#include "rpc/server.h"

namespace tensord::cli {
namespace {
// cli_common.cpp is only built with the ONNX importer; serve does not need it.
// A reason not to serve: a log line, or plain stderr when the log is off (never silent).
void serve_error(const std::string& message) {
  if (log::enabled(log::Level::kError))
    log::error(message);
  else
    std::cerr << "tensord: " << message << "\n";
}

// --token-file: one tenant a line, "NAME:TOKEN" or a bare "TOKEN" (its tenant is then
// "line-N"); blank lines and lines starting with '#' are skipped, surrounding whitespace
// trimmed. "operator NAME:TOKEN" (or "operator TOKEN") makes the token an operator's: the
// status surfaces show it every tenant's figures (a tenant's token sees its own). A token has
// no spaces, so no line valid before this form changes its meaning. Tokens are printable ASCII without spaces, each used once; several lines may name
// the same tenant (two tokens while one is being replaced). The file must not be readable or
// writable by group or others, like ssh's keys.
Result<std::vector<rpc::RpcServerOptions::Tenant>> read_token_file(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    return Status(StatusCode::kInvalidArgument,
                  "cannot read '" + path + "': " + std::strerror(errno));
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status(StatusCode::kInvalidArgument,
                  "'" + path + "' is accessible by group or others (mode " + mode +
                      "): tokens are secrets; run chmod 600 '" + path + "'");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(StatusCode::kInvalidArgument, "cannot read '" + path + "'");
  std::vector<rpc::RpcServerOptions::Tenant> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const auto at = [&](const std::string& why) {
      return Status(StatusCode::kInvalidArgument,
                    "'" + path + "' line " + std::to_string(n) + ": " + why);
    };
    size_t b = 0, e = line.size();
    while (b < e && std::isspace(static_cast<unsigned char>(line[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(line[e - 1]))) --e;
    line = line.substr(b, e - b);
    if (line.empty() || line[0] == '#') continue;
    rpc::RpcServerOptions::Tenant t;
    static constexpr std::string_view kOperator = "operator";
    if (line.size() > kOperator.size() && line.compare(0, kOperator.size(), kOperator) == 0 &&
        std::isspace(static_cast<unsigned char>(line[kOperator.size()]))) {
      t.is_operator = true;
      size_t rest = kOperator.size();
      while (rest < line.size() && std::isspace(static_cast<unsigned char>(line[rest]))) ++rest;
      line = line.substr(rest);
    }
    const size_t colon = line.find(':');
    if (colon == std::string::npos) {
      t.name = "line-" + std::to_string(n);
      t.token = line;
    } else {
      t.name = line.substr(0, colon);
      t.token = line.substr(colon + 1);
      if (t.name.empty() || t.name.size() > 64) return at("a tenant name has 1 to 64 characters");
      for (char c : t.name)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.' &&
            c != '@')
          return at("tenant names use letters, digits and - _ . @ only (NAME:TOKEN)");
    }
    if (t.token.empty()) return at("no token after the tenant name");
    for (char c : t.token)
      if (c < 0x21 || c > 0x7e) return at("a token is printable ASCII without spaces");
    for (const auto& o : out)
      if (o.token == t.token) return at("this token is already on an earlier line");
    out.push_back(std::move(t));
  }
  if (out.empty())
    return Status(StatusCode::kInvalidArgument,
                  "'" + path + "' holds no token (one a line: NAME:TOKEN or TOKEN)");
  return out;
}
// The broker holds a descriptor for every connection (gRPC, HTTP, the region socket), every
// session's arena and every pending region ticket: the soft limit (often 1,024) is raised to
// the hard one (capped by fs.nr_open), so that idle sockets cannot leave it unable to open
// the next one. Returns the log line's fields, written once the broker serves (a broker that
// cannot start says only why).
struct DescriptorLimit {
  int64_t before = -1, soft = -1, hard = -1;
  std::string error;
  void log() const {
    if (!error.empty())
      log::warn("descriptor limit not raised", {{"soft", soft}, {"hard", hard}, {"error", error}});
    else
      log::info("descriptor limit", {{"soft_before", before}, {"soft", soft}, {"hard", hard}});
  }
};

DescriptorLimit raise_descriptor_limit() {
  DescriptorLimit out;
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) {
    out.error = std::strerror(errno);
    return out;
  }
  const auto n = [](rlim_t v) {
    return v == RLIM_INFINITY ? int64_t{-1} : static_cast<int64_t>(v);
  };
  out.before = out.soft = n(r.rlim_cur);
  out.hard = n(r.rlim_max);
  rlim_t want = r.rlim_max;
  if (want == RLIM_INFINITY) {
    want = 1 << 20;
    if (FILE* f = std::fopen("/proc/sys/fs/nr_open", "r")) {
      unsigned long long v = 0;
      if (std::fscanf(f, "%llu", &v) == 1 && v > 0) want = static_cast<rlim_t>(v);
      std::fclose(f);
    }
  }
  if (want > r.rlim_cur) {
    r.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &r) != 0) {
      out.error = std::strerror(errno);
      return out;
    }
    out.soft = n(want);
  }
  return out;
}
}  // namespace

int cmd_serve(const ServeOptions& options) {
  // glibc gives every thread that contends for malloc an arena of its own, up to 8 per core,
  // and keeps what they grew: a broker with hundreds of gRPC threads then stays 10% or more
  // above its baseline after a burst of clients has gone (measured with `tensord bench load`,
  // 64 clients x 60 s). One arena: malloc_trim (the idle trim in sessions.cpp) gives back the
  // main arena's top, but never a thread arena's, so with two a tenant's compile that ran on
  // a runner holding the second arena left up to its peak resident after the tenant had gone
  // (SecurityGraphFold.FoldedConstantsAreChargedToTheTenantAndGiveBackTheirMemory: 74 MiB
  // against a 41 MiB baseline, about one CI run in three). Large tensors do not use malloc
  // (cpu_backend.cpp maps them), so the one arena's contention is small. The environment's
  // MALLOC_ARENA_MAX wins.
  if (!std::getenv("MALLOC_ARENA_MAX")) mallopt(M_ARENA_MAX, 1);
  if (options.session_memory_limit < 0) {
    serve_error("--session-memory-limit must be >= 0, got " +
                std::to_string(options.session_memory_limit));
    return kExitUsage;
  }
  if (!(options.lease_seconds > 0) || !std::isfinite(options.lease_seconds)) {
    serve_error("--lease-seconds must be > 0, got " + std::to_string(options.lease_seconds));
    return kExitUsage;
  }
  if (!(options.drain_seconds >= 0) || !std::isfinite(options.drain_seconds)) {
    serve_error("--drain-seconds must be >= 0, got " + std::to_string(options.drain_seconds));
    return kExitUsage;
  }

  std::vector<rpc::RpcServerOptions::Tenant> tenants;
  if (!options.token_file.empty()) {
    auto t = read_token_file(options.token_file);
    if (!t.ok()) {
      serve_error("--token-file: " + t.status().message());
      return kExitUsage;
    }
    tenants = std::move(t).value();
  }
  std::string tls_cert, tls_key, tls_ca;
  for (auto [flag, path, dst] : {std::tuple<const char*, const std::string*, std::string*>{
                                     "--tls-cert", &options.tls_cert, &tls_cert},
                                 {"--tls-key", &options.tls_key, &tls_key},
                                 {"--tls-ca", &options.tls_ca, &tls_ca}}) {
    if (path->empty()) continue;
    std::ifstream in(*path, std::ios::binary);
    std::stringstream ss;
    if (in) ss << in.rdbuf();
    *dst = ss.str();
    if (!in || dst->find("-----BEGIN ") == std::string::npos) {
      serve_error(std::string(flag) + ": cannot read a PEM file at '" + *path + "'");
      return kExitUsage;
    }
  }
  for (auto [flag, v] : {std::pair<const char*, int64_t>{"--max-message-bytes",
                                                          options.max_message_bytes},
                         {"--max-sessions", options.max_sessions},
                         {"--tenant-memory-limit", options.tenant_memory_limit},
                         {"--max-sessions-per-tenant", options.max_sessions_per_tenant},
                         {"--max-calls-per-session", options.max_calls_per_session},
                         {"--max-region-bytes", options.max_region_bytes},
                         {"--max-regions", options.max_regions},
                         {"--max-model-bytes", options.max_model_bytes},
                         {"--max-threads", options.max_threads},
                         {"--grpc-memory-bytes", options.grpc_memory_bytes},
                         {"--http-max-connections", options.http_max_connections},
                         {"--http-max-connections-per-ip", options.http_max_connections_per_ip},
                         {"--http-header-timeout-ms", options.http_header_timeout_ms}}) {
    if (v < 0) {
      serve_error(std::string(flag) + " must be >= 0 (0: the default), got " + std::to_string(v));
      return kExitUsage;
    }
  }
  if (options.shm_arena_bytes < 0) {
    serve_error("--shm-arena-bytes must be >= 0 (0: no arenas), got " +
                std::to_string(options.shm_arena_bytes));
    return kExitUsage;
  }
  if (options.max_message_bytes > (1 << 30)) {
    serve_error("--max-message-bytes must be at most 1 GiB (1073741824), got " +
                std::to_string(options.max_message_bytes));
    return kExitUsage;
  }

  // Block the stop signals before any thread starts (engine queues, gRPC pollers inherit the
  // mask), so that only the sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  // From here on the lines are a service's log: with their time (the level and format were
  // set by serve_config.cpp); usage errors above read like any other command's.
  log::set_timestamps(true);
  const DescriptorLimit descriptors = raise_descriptor_limit();
  if (options.cluster) {  // before the engine: rank 0's engine sees the other ranks' devices
    if (options.cluster_timeout_ms <= 0) {
      serve_error("--cluster-timeout-ms must be > 0, got " +
                  std::to_string(options.cluster_timeout_ms));
      return kExitUsage;
    }
    cluster::ClusterOptions co;
    co.timeout = std::chrono::milliseconds(options.cluster_timeout_ms);
    auto started = cluster::start(co);
    if (!started.ok()) {
      serve_error(started.status().to_string());
      return started.status().code() == StatusCode::kFailedPrecondition ? kExitUsage
                                                                          : kExitFailure;
    }
    if (started->exit_code >= 0) return started->exit_code;  // a worker rank, done
  }
  struct ClusterStop {
    ~ClusterStop() { cluster::stop(); }
  } cluster_stop;
  // The engine reads its options from the environment (EngineOptions::from_env).
  setenv("TENSORD_MAX_COMPILES_PER_TENANT", std::to_string(options.max_compiles_per_tenant).c_str(),
         1);
  auto engine = Engine::shared();
  if (!engine.ok()) {
    serve_error(engine.status().to_string());
    return engine.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
  }
  std::map<std::string, ModelConfig> model_configs;
  if (options.model_control && options.models_dir.empty()) {
    serve_error("--model-control needs --models DIR (the folder models are loaded from)");
    return kExitUsage;
  }
  if (!options.models_dir.empty()) {  // named models: loaded once, before clients can connect
    auto models = load_model_repository(**engine, options.models_dir, &model_configs);
    if (!models.ok()) {
      serve_error("--models: " + models.status().message());
      return kExitUsage;
    }
    int ready = 0;
    for (const ModelInfo& m : *models) {
      ready += m.ready;
      if (m.ready)
        log::info("model '" + m.name + "' ready on " + m.device + " (" +
                  format_bytes(m.weight_bytes) + " of weights, held once)");
      else
        log::warn("model '" + m.name + "' UNAVAILABLE: " + m.reason);
    }
    log::info("named models from '" + options.models_dir + "': " + std::to_string(ready) +
              " ready, " + std::to_string(models->size() - ready) + " unavailable");
  }
  rpc::RpcServerOptions ro;
  ro.listen = options.listen;
  ro.session_memory_limit = options.session_memory_limit;
  ro.tenant_memory_limit = options.tenant_memory_limit;
  ro.tenants = tenants;
  ro.insecure = options.insecure;
  ro.tls_cert_pem = tls_cert;
  ro.tls_key_pem = tls_key;
  ro.tls_client_ca_pem = tls_ca;
  ro.max_message_bytes = options.max_message_bytes;
  ro.max_sessions = options.max_sessions;
  ro.max_sessions_per_tenant = options.max_sessions_per_tenant;
  ro.shm_arena_bytes = options.shm_arena_bytes;
  ro.max_calls_per_session = options.max_calls_per_session;
  ro.max_region_bytes = options.max_region_bytes;
  ro.max_regions = options.max_regions;
  ro.max_model_bytes = options.max_model_bytes;
  ro.max_threads = options.max_threads;
  ro.grpc_memory_bytes = options.grpc_memory_bytes;
  ro.model_configs = std::move(model_configs);
  ro.models_dir = options.models_dir;
  ro.model_control = options.model_control;
  ro.http_listen = options.http;
  if (options.http_max_connections > 0)
    ro.http_max_connections = static_cast<int>(std::min<int64_t>(options.http_max_connections, 1 << 20));
  if (options.http_max_connections_per_ip > 0)
    ro.http_max_connections_per_ip =
        static_cast<int>(std::min<int64_t>(options.http_max_connections_per_ip, 1 << 20));
  if (options.http_header_timeout_ms > 0)
    ro.http_header_timeout = std::chrono::milliseconds(options.http_header_timeout_ms);
  ro.slow_request_ms = options.slow_request_ms;
  ro.lease =
      std::chrono::milliseconds(std::max<int64_t>(1, std::llround(options.lease_seconds * 1000.0)));
  auto server = rpc::RpcServer::start(*engine, ro);
  if (!server.ok()) {
    serve_error(server.status().to_string());
    return server.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
  }

  std::string devices;
  for (const auto& d : (*engine)->devices()) devices += (devices.empty() ? "" : ", ") + d.name;
  std::ostringstream summary;
  summary << "devices: " << (devices.empty() ? "none" : devices) << "; session lease "
          << options.lease_seconds << " s; session memory limit "
          << (options.session_memory_limit
                  ? std::to_string(options.session_memory_limit) + " bytes"
                  : std::string("none"))
          << "; "
          << (tenants.empty() ? std::string("no token")
                              : std::to_string(tenants.size()) + " token(s) required")
          << "; " << (tls_cert.empty() ? "no TLS" : tls_ca.empty() ? "TLS" : "mutual TLS");
  log::info(summary.str());
  descriptors.log();
  if (options.cluster) log::info("cluster: " + cluster::describe());
  if (!tenants.empty() && tls_cert.empty() && !rpc::is_loopback_listen(options.listen))
    log::warn("tokens travel in cleartext on " + options.listen +
              " (not a loopback address): give --tls-cert and --tls-key");
  log::info("serving", {{"address", (*server)->address()}});
  std::cout << "tensord serving on " << (*server)->address() << std::endl;
  if (!(*server)->http_url().empty())
    std::cout << "tensord http on " << (*server)->http_url() << std::endl;

  int sig = 0;
  while (sigwait(&stop_signals, &sig) != 0) {
  }
  log::info(std::string(sig == SIGINT ? "SIGINT" : "SIGTERM") +
            ": refusing new calls, finishing the ones in flight");
  (*server)->shutdown(std::chrono::milliseconds(std::llround(options.drain_seconds * 1000.0)));
  server->reset();
  log::info("stopped");
  return kExitOk;
}

}  // namespace tensord::cli
