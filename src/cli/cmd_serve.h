// `tensord serve`: the broker (an Engine behind the gRPC service of proto/tensord.proto).
#pragma once

#include <cstdint>
#include <string>

namespace tensord::cli {

struct ServeOptions {
  std::string listen;                // "HOST:PORT" (port 0 = any free port) or "unix:PATH"
  int64_t session_memory_limit = 0;  // bytes per session; 0 = unlimited
  int64_t tenant_memory_limit = 0;   // bytes per tenant (all its sessions); 0 = unlimited
  double lease_seconds = 30;         // a session no call names for this long is freed
  double drain_seconds = 30;         // on SIGTERM/SIGINT: how long in-flight calls may finish
  std::string token_file;            // "" = no token; else tenants and their tokens (see README)
  bool insecure = false;             // allow a non-loopback listener without a token
  std::string tls_cert, tls_key;     // PEM files: serve TLS only
  std::string tls_ca;                // PEM file: require client certificates it signed (mTLS)
  // Named models: every MODELS/NAME/model.onnx loaded once at start, shared by all sessions
  // (see client/model_repository.h). A model that fails to load is reported and left out
  // (listed as unavailable); a missing folder stops the broker. "" = none.
  std::string models_dir;
  bool model_control = false;  // --model-control: `tensord models load|unload` while serving
  // Limits (see RpcServerOptions).
  int64_t max_message_bytes = 64 << 20;
  int64_t max_sessions = 4096;
  int64_t max_sessions_per_tenant = 256;
  int64_t shm_arena_bytes = int64_t{1} << 30;  // per session; 0 = no arenas
  int64_t max_calls_per_session = 64;
  int64_t max_region_bytes = 0;  // mapped shared-memory regions, all sessions; 0 = physical RAM
  int64_t max_regions = 0;       // their number; 0 = a quarter of vm.max_map_count
  int64_t max_model_bytes = (int64_t{2} << 30) - 1;
  int64_t max_threads = 256;
  int64_t max_compiles_per_tenant = 2;  // EngineOptions::max_compiles_per_tenant
  int64_t grpc_memory_bytes = int64_t{2} << 30;
  // "" = none; else serve the status page, /metrics, /healthz, /readyz over HTTP here
  // ("PORT" on 127.0.0.1, or "HOST:PORT"; see RpcServerOptions::http_listen).
  std::string http;
  int64_t http_max_connections = 256;        // connections waiting for an answer, all clients
  int64_t http_max_connections_per_ip = 32;  // of those, from one client address
  int64_t http_header_timeout_ms = 5000;     // from accept to the request's headers' end
  // Log (core/log.h) and config file (serve_config.h).
  std::string log_level = "info";    // trace | debug | info | warn | error | off
  std::string log_format = "text";   // text | json
  int64_t slow_request_ms = 1000;    // calls slower than this are logged; 0 = never
  std::string config;                // --config FILE: TOML, every flag a key
  bool dump_config = false;          // print the effective config and exit
  // --cluster: one rank of `mpirun -np N tensord serve --cluster` (src/cluster/cluster.h).
  bool cluster = false;
  int64_t cluster_timeout_ms = 3000;
};

// Serves until SIGTERM or SIGINT, then stops taking calls, lets in-flight ones finish (up to
// drain_seconds) and returns 0. Prints "tensord serving on ADDR" on stdout once clients can
// connect (ADDR with the chosen port when port 0 was asked for).
int cmd_serve(const ServeOptions& options);

}  // namespace tensord::cli
