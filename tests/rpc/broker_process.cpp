#include "broker_process.h"

#include <fstream>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

extern char** environ;

namespace tensord::testing {

namespace {
constexpr const char* kReady = "tensord serving on ";
}

Result<std::unique_ptr<BrokerProcess>> BrokerProcess::start(const BrokerOptions& options) {
  std::unique_ptr<BrokerProcess> p(new BrokerProcess());
  std::string tmpl = (std::filesystem::temp_directory_path() / "tensord-test.XXXXXX").string();
  if (!mkdtemp(tmpl.data()))
    return Status(StatusCode::kInternal, std::string("mkdtemp: ") + std::strerror(errno));
  p->dir_ = tmpl;
  const std::string listen = !options.listen.empty() ? options.listen
                             : options.tcp           ? "127.0.0.1:0"
                                                     : "unix:" + p->dir_ + "/broker.sock";

  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::vector<std::string> args = {TENSORD_CLI_PATH, "serve", "--listen", listen};
  args.insert(args.end(), options.args.begin(), options.args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "TENSORD_", 8) == 0) continue;  // the test decides the broker's config
    env.emplace_back(*e);
  }
  env.push_back("TENSORD_CPU_DEVICES=" + std::to_string(options.cpu_devices));
  // The broker tests count and name cpu devices; an OpenCL platform (PoCL) would add opencl:0.
  env.push_back("TENSORD_OPENCL=0");
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return Status(StatusCode::kInternal, std::string("pipe: ") + std::strerror(errno));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return Status(StatusCode::kInternal, std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(fds[1], STDOUT_FILENO);  // dup2 clears O_CLOEXEC on the new descriptor
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(fds[1]);
  p->pid_ = pid;
  p->stdout_fd_ = fds[0];

  // Wait for the ready line.
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + options.ready_timeout;
  while (true) {
    const auto nl = out.find('\n');
    if (nl != std::string::npos) {
      const std::string line = out.substr(0, nl);
      if (line.rfind(kReady, 0) != 0)
        return Status(StatusCode::kInternal, "broker printed '" + line + "' instead of ready");
      p->address_ = line.substr(std::strlen(kReady));
      p->pending_ = out.substr(nl + 1);
      return p;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return Status(
          StatusCode::kDeadlineExceeded,
          "broker not ready after " + std::to_string(options.ready_timeout.count()) + " ms");
    pollfd pfd{p->stdout_fd_, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[256];
    const ssize_t n = read(p->stdout_fd_, buf, sizeof buf);
    if (n <= 0) {
      const int st = p->wait_exit(std::chrono::milliseconds(2000));
      return Status(StatusCode::kInternal,
                    "broker exited before it was ready (status " + std::to_string(st) + ")");
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

BrokerProcess::~BrokerProcess() {
  if (pid_ > 0 && exit_status_ < 0) {
    ::kill(pid_, SIGKILL);
    wait_exit(std::chrono::milliseconds(10000));
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

Result<std::string> BrokerProcess::next_line(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto nl = pending_.find('\n');
    if (nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return Status(StatusCode::kDeadlineExceeded, "the broker printed no further line");
    pollfd pfd{stdout_fd_, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[256];
    const ssize_t n = read(stdout_fd_, buf, sizeof buf);
    if (n <= 0) return Status(StatusCode::kInternal, "the broker closed its stdout");
    pending_.append(buf, static_cast<size_t>(n));
  }
}

void BrokerProcess::signal(int sig) {
  if (pid_ > 0 && exit_status_ < 0) ::kill(pid_, sig);
}

int BrokerProcess::wait_exit(std::chrono::milliseconds timeout) {
  if (exit_status_ >= 0) return exit_status_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int st = 0;
    const pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      exit_status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return exit_status_;
    }
    if (r < 0 || std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

namespace {

std::mutex g_shared_mu;
std::unique_ptr<BrokerProcess> g_shared;

class SharedBrokerEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    std::lock_guard<std::mutex> lock(g_shared_mu);
    if (!g_shared) return;
    g_shared->signal(SIGTERM);
    const int st = g_shared->wait_exit(std::chrono::milliseconds(15000));
    EXPECT_EQ(st, 0) << "the shared broker did not exit cleanly on SIGTERM";
    g_shared.reset();
  }
};

[[maybe_unused]] auto* const g_env =
    ::testing::AddGlobalTestEnvironment(new SharedBrokerEnvironment);

}  // namespace

BrokerProcess* shared_broker() {
  std::lock_guard<std::mutex> lock(g_shared_mu);
  if (!g_shared) {
    auto b = BrokerProcess::start();
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    if (!b.ok()) return nullptr;
    g_shared = std::move(b).value();
  }
  return g_shared.get();
}

int64_t proc_status_bytes(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) return std::atoll(line.c_str() + key.size() + 1) * 1024;
  return -1;
}

Result<BrokerProcess::HttpAddress> BrokerProcess::next_http_address(
    std::chrono::milliseconds timeout) {
  auto line = next_line(timeout);
  if (!line.ok()) return line.status();
  const std::string prefix = "tensord http on ";
  const size_t scheme = line->find("://");
  if (line->rfind(prefix, 0) != 0 || scheme == std::string::npos)
    return Status(StatusCode::kInternal, "expected the HTTP line, got '" + *line + "'");
  HttpAddress out;
  out.url = line->substr(prefix.size());
  const std::string hostport = line->substr(scheme + 3);
  out.host = hostport.substr(0, hostport.rfind(':'));
  out.port = std::stoi(hostport.substr(hostport.rfind(':') + 1));
  return out;
}

}  // namespace tensord::testing
