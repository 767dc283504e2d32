// The broker's RPC log (core/log.h), as a gRPC server interceptor: a warning (an error for
// INTERNAL, UNKNOWN and DATA_LOSS; debug for CANCELLED) for every call that ends with an error
// status, naming the method, the code and the message; a warning for a call slower than
// `slow_ms`; one trace line per call. Self-contained: register its factory beside any other
// interceptors (ServerBuilder::experimental().SetInterceptorCreators takes them all at once).
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace tensord::rpc {

// slow_ms <= 0: no slow-call lines. Attach (a stream held open for the session's life) is never
// slow.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> make_log_interceptor_factory(
    int64_t slow_ms);

// The lines the interceptor writes for one call, for calls that reach a handler another way
// (the run channel): `method_path` as gRPC names it ("/tensord.v1.Tensord/RunModel"), `code` a
// gRPC status code. The peer and session are asked for only when a line is written.
void log_request(std::string_view method_path, int code, std::string_view message, double ms,
                 int64_t slow_ms, const std::function<std::string()>& peer_of,
                 const std::function<std::string()>& session_of);

// Routes gRPC's own log (gpr_log) through core/log.h: gRPC's errors at warn, its info at debug,
// its debug at trace; and sets gRPC's verbosity from tensord's level (unless GRPC_VERBOSITY is
// set). Idempotent; call before gRPC starts work.
void route_grpc_log();

// While alive on a thread, gRPC's messages logged on that thread are kept (and logged at
// debug only), so that a failure can be reported in one short line: see os_error().
class GrpcLogCapture {
 public:
  GrpcLogCapture();
  ~GrpcLogCapture();
  GrpcLogCapture(const GrpcLogCapture&) = delete;
  GrpcLogCapture& operator=(const GrpcLogCapture&) = delete;
  // The first OS error named in what was captured ("Address already in use"), or "".
  std::string os_error() const;
  void append(const char* file, int line, const char* message);

 private:
  std::string text_;
  GrpcLogCapture* outer_;
};

}  // namespace tensord::rpc
