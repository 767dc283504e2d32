// A real `tensord serve` process for tests: started with a listen address of the test's own
// (a unix socket in a fresh temp folder, or 127.0.0.1:0), ready once it prints its
// "tensord serving on ADDR" line, killed when the object goes (and by the kernel if the test
// process dies first: PR_SET_PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tensord/status.h"

namespace tensord::testing {

// Built with ASan or TSan: their allocators keep freed memory (quarantine, their own caches)
// and shadow it, so resident-memory figures say nothing about glibc's. Memory bounds are
// checked in the Release build only; the figures are printed in both.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif
#else
inline constexpr bool kSanitizedBuild = false;
#endif

struct BrokerOptions {
  std::vector<std::string> args;  // extra `tensord serve` flags
  bool tcp = false;               // 127.0.0.1:0 instead of a unix socket
  std::string listen;             // another --listen address (overrides tcp)
  int cpu_devices = 2;            // TENSORD_CPU_DEVICES of the broker
  std::chrono::milliseconds ready_timeout{20000};
};

class BrokerProcess {
 public:
  // Starts the broker and waits for its ready line. The binary is TENSORD_CLI_PATH.
  static Result<std::unique_ptr<BrokerProcess>> start(const BrokerOptions& options = {});
  ~BrokerProcess();  // SIGKILL if still running, reap, remove the temp folder

  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  void signal(int sig);
  // Waits up to `timeout` for the process to exit. Returns its exit status, 128+signal if a
  // signal ended it, or -1 on timeout.
  int wait_exit(std::chrono::milliseconds timeout);
  // The next line the broker prints on stdout after its ready line (e.g. "tensord http on
  // URL" with --http), without its newline; DEADLINE_EXCEEDED after `timeout`.
  Result<std::string> next_line(std::chrono::milliseconds timeout);
  // With --http: reads the next line, "tensord http on URL", and returns the URL split (the
  // fixture every --http test needs). INTERNAL naming the line when it is another.
  struct HttpAddress {
    std::string url, host;
    int port = 0;
  };
  Result<HttpAddress> next_http_address(std::chrono::milliseconds timeout);

 private:
  BrokerProcess() = default;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int exit_status_ = -1;
  std::string dir_;
  std::string address_;
  std::string pending_;  // stdout read past the ready line
};

// "VmRSS", "VmHWM", "VmSize", ... of a process (/proc/PID/status), in bytes; -1 when absent.
int64_t proc_status_bytes(pid_t pid, const std::string& key);

// The broker shared by the tests of one test process, started on first use and stopped at
// exit (SIGTERM, then a clean exit is expected). Fails the calling test if it cannot start.
BrokerProcess* shared_broker();

}  // namespace tensord::testing
