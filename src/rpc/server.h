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
// values still being computed are fine). Every method here is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "tensord/status.h"

namespace tensord::rpc {

struct RpcServerOptions {
  // "HOST:PORT" (port 0 = a free port, see RpcServer::address) or "unix:PATH".
  std::string listen;
  // Bytes one session may hold on the broker; 0 = unlimited.
  int64_t session_memory_limit = 0;
  // A session that no call names for this long is closed and its tensors freed.
  std::chrono::milliseconds lease{30000};
  // Size of the chunks Read streams (clients may ask for another size per call).
  int64_t chunk_bytes = 2 << 20;
  // When not empty, every call must carry "authorization: Bearer <token>" (UNAUTHENTICATED
  // otherwise).
  std::string token;
};

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

  struct Impl;

 private:
  explicit RpcServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensord::rpc
