#include "cli/bench_peers.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tensord::cli {

namespace fs = std::filesystem;

ProcessResult run_process(const std::vector<std::string>& argv) {
  ProcessResult r;
  int out_pipe[2], err_pipe[2], exec_pipe[2];
  if (pipe(out_pipe) != 0) return {-1, "", "", std::strerror(errno)};
  if (pipe(err_pipe) != 0 || pipe2(exec_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return {-1, "", "", std::strerror(errno)};
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    close(out_pipe[0]);
    close(err_pipe[0]);
    close(exec_pipe[0]);
    execvp(args[0], args.data());
    const int e = errno;  // tell the parent why exec failed
    (void)!write(exec_pipe[1], &e, sizeof e);
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  close(exec_pipe[1]);
  if (pid < 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    close(exec_pipe[0]);
    return {-1, "", "", std::strerror(errno)};
  }
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int exec_errno = 0;
  if (read(exec_pipe[0], &exec_errno, sizeof exec_errno) == sizeof exec_errno)
    r.start_error = std::strerror(exec_errno);
  close(exec_pipe[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

namespace {

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  const auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

std::string peer_script(const std::string& peer) {
  return peer == "onnxruntime" ? "onnxruntime.js" : peer + ".py";
}

std::string self_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "" : exe.parent_path().string();
}

}  // namespace

const std::vector<std::string>& known_peers() {
  static const std::vector<std::string> peers = {"onnxruntime", "torch"};
  return peers;
}

std::vector<std::string> peers_dir_candidates() {
  std::vector<std::string> out;
  const std::string exe_dir = self_dir();
  if (exe_dir.empty()) return out;
  const fs::path exe(exe_dir);
#ifdef TENSORD_PEERS_FROM_BINDIR
  // Installed: <prefix>/<bindir>/tensord and <prefix>/<datadir>/tensord/peers.
  out.push_back((exe / TENSORD_PEERS_FROM_BINDIR).lexically_normal().string());
#endif
  out.push_back((exe / ".." / "share" / "tensord" / "peers").lexically_normal().string());
  // A build folder inside the checkout (build/tensord), or the checkout itself.
  out.push_back((exe / ".." / "bench" / "peers").lexically_normal().string());
  out.push_back((exe / "bench" / "peers").lexically_normal().string());
  std::vector<std::string> unique;
  for (auto& c : out)
    if (std::find(unique.begin(), unique.end(), c) == unique.end()) unique.push_back(c);
  return unique;
}

std::string peers_dir() {
  if (const char* env = std::getenv("TENSORD_BENCH_PEERS"); env && *env) return env;
  const auto candidates = peers_dir_candidates();
  for (const auto& c : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(fs::path(c) / "torch.py", ec) ||
        fs::is_regular_file(fs::path(c) / "onnxruntime.js", ec))
      return c;
  }
  return "";
}

PeerResult run_peer(const std::string& peer, const PeerRequest& request) {
  PeerResult res;
  res.peer = peer;
  const std::string dir = peers_dir();
  if (dir.empty()) {
    std::string looked;
    for (const auto& c : peers_dir_candidates()) looked += (looked.empty() ? "" : ", ") + c;
    res.reason = "the peer scripts were not found (looked in " + looked +
                 "; set TENSORD_BENCH_PEERS to the folder holding " + peer_script(peer) + ")";
    return res;
  }
  std::vector<std::string> argv;
  std::string script;
  if (peer == "onnxruntime") {
    script = (fs::path(dir) / "onnxruntime.js").string();
    argv = {"node", script};
  } else if (peer == "torch") {
    script = (fs::path(dir) / "torch.py").string();
    std::error_code ec;
    argv = {fs::exists("/usr/bin/python3", ec) ? "/usr/bin/python3" : "python3", script};
  } else {
    res.reason = "unknown peer '" + peer + "'";
    return res;
  }
  std::error_code ec;
  if (!fs::exists(script, ec)) {
    res.reason = "peer script " + script + " not found (set TENSORD_BENCH_PEERS to its folder)";
    return res;
  }
  argv.insert(argv.end(), {"--model", request.model});
  if (peer == "torch" && !request.network.empty())
    argv.insert(argv.end(), {"--network", request.network});
  for (const auto& [name, file] : request.inputs)
    argv.insert(argv.end(), {"--input", name + "=" + file});
  argv.insert(argv.end(),
              {"--examples", std::to_string(request.examples), "--batch-size",
               std::to_string(request.batch_size), "--warmup", std::to_string(request.warmup)});
  if (request.threads > 0) argv.insert(argv.end(), {"--threads", std::to_string(request.threads)});
  if (!request.outputs_dir.empty()) argv.insert(argv.end(), {"--outputs", request.outputs_dir});
  if (request.start_at > 0)
    argv.insert(argv.end(), {"--start-at", fmt::format("{:.3f}", request.start_at)});

  const ProcessResult pr = run_process(argv);
  if (!pr.start_error.empty()) {
    res.reason = "cannot start '" + argv[0] + "': " + pr.start_error;
    return res;
  }
  if (pr.exit_code != 0) {
    res.failed = true;
    const std::string why = last_line(pr.err);
    res.reason = (pr.exit_code < 0 ? std::string("killed by a signal")
                                   : "exit status " + std::to_string(pr.exit_code)) +
                 (why.empty() ? "" : ": " + why);
    return res;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(last_line(pr.out));
    res.available = j.value("available", false);
    if (!res.available) {
      res.reason = j.value("reason", std::string("not available"));
      return res;
    }
    res.version = j.value("version", std::string());
    res.threads = j.value("threads", 0);
    res.compile_s = j.at("compile_s").get<double>();
    res.execution_s = j.at("execution_s").get<double>();
    res.per_example_s = j.at("per_example_s").get<double>();
    res.timed_start_unix = j.value("timed_start_unix", 0.0);
    res.timed_end_unix = j.value("timed_end_unix", 0.0);
    if (j.contains("outputs") && j["outputs"].is_object())
      for (const auto& [name, path] : j["outputs"].items())
        if (path.is_string()) res.outputs[name] = path.get<std::string>();
  } catch (const std::exception& e) {
    res.available = false;
    res.failed = true;
    res.reason = std::string("unreadable answer (") + e.what() + "): " + last_line(pr.out);
  }
  return res;
}

}  // namespace tensord::cli
