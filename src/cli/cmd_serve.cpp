#include "cli/cmd_serve.h"

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/cli_common.h"
#include "engine/engine.h"
#include "rpc/server.h"

namespace tensord::cli {
namespace {
// cli_common.cpp is only built with the ONNX importer; serve does not need it.
void serve_error(const std::string& message) { std::cerr << "tensord: " << message << "\n"; }
}  // namespace

int cmd_serve(const ServeOptions& options) {
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

  std::string token;
  if (!options.token_file.empty()) {
    std::ifstream in(options.token_file, std::ios::binary);
    if (!in) {
      serve_error("--token-file: cannot read '" + options.token_file + "'");
      return kExitUsage;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    token = ss.str();
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back())))
      token.pop_back();
    if (token.empty() || token.find_first_of(" \t\r\n") != std::string::npos) {
      serve_error("--token-file: '" + options.token_file +
                  "' must hold one token (no spaces), got " +
                  (token.empty() ? std::string("nothing") : std::string("whitespace inside")));
      return kExitUsage;
    }
  }

  // Block the stop signals before any thread starts (engine queues, gRPC pollers inherit the
  // mask), so that only the sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto engine = Engine::shared();
  if (!engine.ok()) {
    serve_error(engine.status().to_string());
    return kExitFailure;
  }
  rpc::RpcServerOptions ro;
  ro.listen = options.listen;
  ro.session_memory_limit = options.session_memory_limit;
  ro.token = token;
  ro.lease =
      std::chrono::milliseconds(std::max<int64_t>(1, std::llround(options.lease_seconds * 1000.0)));
  auto server = rpc::RpcServer::start(*engine, ro);
  if (!server.ok()) {
    serve_error(server.status().to_string());
    return server.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
  }

  std::string devices;
  for (const auto& d : (*engine)->devices()) devices += (devices.empty() ? "" : ", ") + d.name;
  std::cerr << "tensord: devices: " << (devices.empty() ? "none" : devices) << "; session lease "
            << options.lease_seconds << " s; session memory limit "
            << (options.session_memory_limit
                    ? std::to_string(options.session_memory_limit) + " bytes"
                    : std::string("none"))
            << "; " << (token.empty() ? "no token" : "token required") << "\n";
  std::cout << "tensord serving on " << (*server)->address() << std::endl;

  int sig = 0;
  while (sigwait(&stop_signals, &sig) != 0) {
  }
  std::cerr << "tensord: " << (sig == SIGINT ? "SIGINT" : "SIGTERM")
            << ": refusing new calls, finishing the ones in flight\n";
  (*server)->shutdown(std::chrono::milliseconds(std::llround(options.drain_seconds * 1000.0)));
  server->reset();
  std::cerr << "tensord: stopped\n";
  return kExitOk;
}

}  // namespace tensord::cli
