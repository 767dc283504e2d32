#include "rpc/log_interceptor.h"

#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string_view>

#include "core/log.h"
#include "rpc/wire.h"

namespace tensord::rpc {
namespace {

using grpc::experimental::InterceptionHookPoints;

const char* code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN_CODE";
  }
}

// The first 8 characters of the call's session id: enough to follow a session through the
// log, not enough to use it (the id is the session's capability when no token is required).
std::string session_prefix(grpc::ServerContextBase* ctx) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(kSessionKey);
  if (it == md.end()) return "";
  return std::string(it->second.data(), std::min<size_t>(8, it->second.size()));
}

class LogInterceptor : public grpc::experimental::Interceptor {
 public:
  LogInterceptor(grpc::experimental::ServerRpcInfo* info, int64_t slow_ms)
      : info_(info), slow_ms_(slow_ms), start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS))
      report(methods->GetSendStatus());
    methods->Proceed();
  }

 private:
  void report(const grpc::Status& status) {
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
            .count();
    grpc::ServerContextBase* ctx = info_->server_context();
    // Only what is logged is gathered (the peer and session cost a string each).
    log_request(info_->method() ? info_->method() : "?", static_cast<int>(status.error_code()),
                status.error_message(), ms, slow_ms_,
                [ctx] { return ctx ? ctx->peer() : std::string(); },
                [ctx] { return ctx ? session_prefix(ctx) : std::string(); });
  }

  grpc::experimental::ServerRpcInfo* info_;
  int64_t slow_ms_;
  std::chrono::steady_clock::time_point start_;
};

class LogInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit LogInterceptorFactory(int64_t slow_ms) : slow_ms_(slow_ms) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new LogInterceptor(info, slow_ms_);
  }

 private:
  int64_t slow_ms_;
};

thread_local GrpcLogCapture* current_capture = nullptr;

void grpc_log_to_tensord(gpr_log_func_args* args) {
  const char* message = args->message ? args->message : "";
  if (current_capture) {
    current_capture->append(args->file, args->line, message);
    log::debug(message, {{"source", "grpc"}});
    return;
  }
  log::Level level = args->severity == GPR_LOG_SEVERITY_ERROR  ? log::Level::kWarn
                     : args->severity == GPR_LOG_SEVERITY_INFO ? log::Level::kDebug
                                                               : log::Level::kTrace;
  if (!log::enabled(level)) return;
  const char* file = args->file ? args->file : "";
  if (const char* slash = std::strrchr(file, '/')) file = slash + 1;
  log::write(level, message,
             {{"source", "grpc"}, {"file", std::string(file) + ":" + std::to_string(args->line)}});
}

}  // namespace

void log_request(std::string_view method_path, int code, std::string_view message, double ms,
                 int64_t slow_ms, const std::function<std::string()>& peer_of,
                 const std::function<std::string()>& session_of) {
  const auto status_code = static_cast<grpc::StatusCode>(code);
  // The path comes from the wire (any name a caller sends): at most 128 bytes of it.
  std::string method(method_path);
  if (method.size() > 128)
    method = method.substr(0, 128) + "... (" + std::to_string(method.size()) + " bytes)";
  const bool slow = slow_ms > 0 && ms > static_cast<double>(slow_ms) &&
                    !std::string_view(method).ends_with("/Attach");
  log::Level level = log::Level::kTrace;
  if (status_code != grpc::StatusCode::OK) {
    switch (status_code) {
      // The client cancelled or went away (an Attach stream ends so when a client closes).
      case grpc::StatusCode::CANCELLED: level = log::Level::kDebug; break;
      case grpc::StatusCode::INTERNAL:
      case grpc::StatusCode::UNKNOWN:
      case grpc::StatusCode::DATA_LOSS: level = log::Level::kError; break;
      default: level = log::Level::kWarn;
    }
  }
  const bool slow_line = slow && log::enabled(log::Level::kWarn);
  if (!log::enabled(level) && !slow_line) return;
  const std::string peer = peer_of ? peer_of() : "";
  const std::string session = session_of ? session_of() : "";
  const auto ms_rounded = static_cast<int64_t>(ms + 0.5);
  if (slow_line)
    log::warn("slow request", {{"method", method},
                               {"ms", ms_rounded},
                               {"code", code_name(status_code)},
                               {"peer", peer},
                               {"session", session}});
  if (status_code != grpc::StatusCode::OK)
    log::write(level, "request failed", {{"method", method},
                                         {"code", code_name(status_code)},
                                         {"message", std::string(message)},
                                         {"ms", ms_rounded},
                                         {"peer", peer},
                                         {"session", session}});
  else if (!slow_line)
    log::trace("request", {{"method", method}, {"code", "OK"}, {"ms", ms_rounded},
                           {"peer", peer}, {"session", session}});
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> make_log_interceptor_factory(
    int64_t slow_ms) {
  return std::make_unique<LogInterceptorFactory>(slow_ms);
}

void route_grpc_log() {
  static std::once_flag once;
  std::call_once(once, [] { gpr_set_log_function(grpc_log_to_tensord); });
  // gRPC formats and hands over only the messages at or above its verbosity.
  if (const char* env = std::getenv("GRPC_VERBOSITY"); env && *env) return;
  const log::Level level = log::level();
  gpr_set_log_verbosity(level <= log::Level::kTrace   ? GPR_LOG_SEVERITY_DEBUG
                        : level <= log::Level::kDebug ? GPR_LOG_SEVERITY_INFO
                                                      : GPR_LOG_SEVERITY_ERROR);
}

GrpcLogCapture::GrpcLogCapture() : outer_(current_capture) { current_capture = this; }
GrpcLogCapture::~GrpcLogCapture() { current_capture = outer_; }

void GrpcLogCapture::append(const char* file, int line, const char* message) {
  if (!text_.empty()) text_ += '\n';
  text_ += message;
}

// gRPC's error text names the OS error as os_error:"..." (absl status) or "os_error":"..."
// (older JSON form).
std::string GrpcLogCapture::os_error() const {
  for (const char* key : {"os_error:\"", "\"os_error\":\""}) {
    const size_t at = text_.find(key);
    if (at == std::string::npos) continue;
    const size_t begin = at + std::strlen(key);
    const size_t end = text_.find('"', begin);
    if (end != std::string::npos) return text_.substr(begin, end - begin);
  }
  return "";
}

}  // namespace tensord::rpc
