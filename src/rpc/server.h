// RpcServer: an Engine served over gRPC (the service of proto/tensord.proto). `tensord serve`
// is this plus flags and signal handling.
//
// Sessions: each OpenSession opens an Engine session (with the per-session memory limit) and
// returns an unguessable id; calls name it in the "tensord-session" metadata. A session is
// freed on CloseSession, when the client's Attach call ends (its process died, its connection
// dropped), or when no call has named it for `lease` and none is in flight. Sessions may
// register shared-memory regions (same host) and move tensors through them.
//
// Threading: gRPC's synchronous server, one thread per in-flight call (blocking reads of
// values still being computed are fine), at most max_threads. Every method here is thread-safe.
//
// Security: tenants are tokens (RpcServerOptions::tenants); session ids are 128 random bits
// bound to the tenant that opened them. On loopback, unix-socket and TLS listeners a wrong
// token is refused while the call's headers are read, before its message is taken in (gRPC
// "local" or TLS credentials with an AuthMetadataProcessor); elsewhere in each method. A
// non-loopback listener needs a token or `insecure`.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "client/model_repository.h"
#include "engine/engine.h"
#include "tensord/status.h"

namespace tensord::rpc {

struct RpcServerOptions {
  // "HOST:PORT" (port 0 = a free port, see RpcServer::address) or "unix:PATH".
  std::string listen;
  // Bytes one session may hold on the broker; 0 = unlimited.
  int64_t session_memory_limit = 0;
  // Bytes all sessions of one tenant may hold together (tensors, models, uploads arriving, the
  // executables compiled for it); 0 = unlimited. Needs tokens: without any, callers are no
  // tenant (the engine's shared cache).
  int64_t tenant_memory_limit = 0;
  // A session that no call names for this long is closed and its tensors freed.
  std::chrono::milliseconds lease{30000};
  // Size of the chunks Read streams (clients may ask for another size per call).
  int64_t chunk_bytes = 2 << 20;
  // When not empty, every call must carry "authorization: Bearer <token>" (UNAUTHENTICATED
  // otherwise): one tenant, named "default", an operator. Kept for callers with a single
  // token; `tenants` is the general form (both may be given).
  std::string token;
  // Tenants: each token names one (`tensord serve --token-file`). A session belongs to the
  // tenant whose token opened it; another tenant's calls cannot see it (NOT_FOUND, as for an
  // id that never existed). Without any token every caller is the same tenant ("").
  // What the status surfaces (/api/status, the page, /metrics, BrokerStatus) show a token:
  // an operator's, everything; a tenant's, its own sessions, calls, errors and bytes and the
  // devices' capacity.
  struct Tenant {
    std::string name;
    std::string token;
    bool is_operator = false;  // token file: "operator NAME:TOKEN"
  };
  std::vector<Tenant> tenants;
  // A listener on a non-loopback address (0.0.0.0, [::], a LAN address) needs a token or this
  // flag (`--insecure`); RpcServer::start refuses otherwise.
  bool insecure = false;
  // TLS (PEM contents, not paths): with cert and key the broker speaks TLS only; with a client
  // CA as well it requires and verifies client certificates (mutual TLS).
  std::string tls_cert_pem, tls_key_pem, tls_client_ca_pem;

  // ---- limits (0 = the default shown)
  // The largest message a call may carry (bulk data is chunked by the streaming calls).
  int64_t max_message_bytes = 64 << 20;
  // Sessions open at once: all tenants together, and per tenant.
  int64_t max_sessions = 4096;
  int64_t max_sessions_per_tenant = 256;
  // The largest arena (OpenArena: shared memory a same-host client maps read-only, holding
  // its session's values of at least shm_arena_min_bytes on cpu devices) one session may
  // have; capped by session_memory_limit. Its pages stay with the session once touched.
  // 0 = no arenas.
  int64_t shm_arena_bytes = int64_t{1} << 30;
  int64_t shm_arena_min_bytes = int64_t{1} << 20;
  // Shared-memory regions (RegisterRegion) mapped into the broker at once, all sessions
  // together: their bytes (0 = the default: the machine's physical memory, at most a quarter of
  // the 128 TiB address space and half of RLIMIT_AS; no client can fill more shared memory
  // than the machine has, and the broker keeps the rest of its address space for itself) and
  // their number (0 = the default: a quarter of vm.max_map_count, one mapping each). With more
  // than one tenant, one tenant may take at most half of either. Regions also count, by their
  // mapped size, against session_memory_limit and tenant_memory_limit.
  int64_t max_region_bytes = 0;
  int64_t max_regions = 0;
  // Calls in flight at once naming one session (streams included, Attach excluded).
  int64_t max_calls_per_session = 64;
  // The largest serialized graph LoadModel takes (checked on its header, before a byte).
  int64_t max_model_bytes = (int64_t{2} << 30) - 1;
  // gRPC's threads (one per in-flight synchronous call) and memory for its buffers.
  int64_t max_threads = 256;
  int64_t grpc_memory_bytes = int64_t{2} << 30;

  // Named models' configurations by engine name (load_model_repository): dynamic batching
  // and instances (rpc/batcher.h). Models not here run unbatched, counted all the same.
  std::map<std::string, ModelConfig> model_configs;
  // Model control (LoadNamedModel/UnloadNamedModel, `tensord models load|unload`): the folder
  // named models come from, and whether control is on (`tensord serve --model-control`; off:
  // FAILED_PRECONDITION). Operators only (any caller without tokens).
  std::string models_dir;
  bool model_control = false;

  // ---- monitoring (rpc/monitor.h, rpc/http_server.h)
  // When not empty, also serve HTTP here (`--http`): the status page at /, /api/status,
  // /metrics (Prometheus), /healthz, /readyz. "PORT" or ":PORT" (127.0.0.1), "HOST:PORT";
  // port 0 = a free port (RpcServer::http_address). Behind the same tokens and TLS as gRPC.
  std::string http_listen;
  // HTTP connections held at once, in all and per client address (more are closed at once),
  // and the time a client has to send its request's headers (then it is closed).
  int http_max_connections = 256;
  int http_max_connections_per_ip = 32;
  std::chrono::milliseconds http_header_timeout{5000};
  // ---- log (core/log.h; the level and format are the process's, set by the caller)
  // A call that takes longer than this is logged as a slow request (a warning); 0 = never.
  int64_t slow_request_ms = 0;
};

// The listen address is on this host only: a loopback address (127.0.0.0/8, ::1, localhost)
// or a unix socket.
bool is_loopback_listen(const std::string& listen);

class RpcServer {
 public:
  // Binds options.listen and starts serving `engine`. UNAVAILABLE if the address cannot be
  // bound (in use, bad path), INVALID_ARGUMENT for bad options.
  static Result<std::unique_ptr<RpcServer>> start(std::shared_ptr<Engine> engine,
                                                  const RpcServerOptions& options);
  ~RpcServer();  // shutdown(0) unless already shut down

  // The bound address, as a client should dial it: "127.0.0.1:41234" (the chosen port for a
  // port-0 request) or "unix:/run/tensord.sock".
  const std::string& address() const;

  // Refuses new calls at once, lets in-flight calls finish for up to `grace` (then cancels
  // them), then closes every session. Idempotent; may be called from any thread.
  void shutdown(std::chrono::milliseconds grace);
  // Blocks until shutdown() has finished.
  void wait();

  int64_t session_count() const;
  // The HTTP listener's address ("127.0.0.1:9090") and URL ("http://127.0.0.1:9090"); empty
  // without RpcServerOptions::http_listen.
  const std::string& http_address() const;
  const std::string& http_url() const;

  struct Impl;

 private:
  explicit RpcServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensord::rpc
