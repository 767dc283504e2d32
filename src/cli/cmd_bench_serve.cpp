// `tensord bench serve`: N concurrent clients (default 16), each its own session, sending one
// named model batch-1 requests (upload, run, read) for S seconds, through a broker this command
// starts itself (`tensord serve --models DIR` on a unix socket, DIR holding the model twice:
// "plain" without batching and "batched" with dynamic batching). Reports aggregate requests/s,
// p50/p99 latency and the mean batch formed (from the broker's /metrics), beside the same N
// clients as separate ONNX Runtime processes (the onnxruntime node peer, 1 and 2 threads
// each). Every output is compared with the first unbatched one (the correctness criterion).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "cli/bench_peers.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "core/errors.h"
#include "core/npy.h"
#include "onnx/onnx_import.h"
#include "rpc/remote_client.h"

extern char** environ;

namespace tensord::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct ServeBenchOptions {
  std::string model;  // .onnx file
  int clients = 16;
  double seconds = 10;
  double warmup = 3;
  int64_t max_batch_size = 0;  // 0: the number of clients
  int64_t delay_us = 2000;
  int instances = 0;  // 0: the broker's default (a cpu device's runners)
  std::string device;  // "" = the broker's default
  bool no_peers = false;
  bool json = false;
};

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  return v[i];
}

// A free TCP port on 127.0.0.1 (for the broker's --http).
int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

// GET http://127.0.0.1:PORT/PATH -> the body ("" on failure).
std::string http_get(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return {};
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;)
        out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  const size_t body = out.find("\r\n\r\n");
  return body == std::string::npos ? std::string() : out.substr(body + 4);
}

// tensord_model_batch_size_{sum,count}{model="NAME",...} from /metrics.
std::pair<double, double> batch_sums(const std::string& metrics, const std::string& model) {
  double sum = 0, count = 0;
  std::istringstream in(metrics);
  std::string line;
  const std::string label = "{model=\"" + model + "\"";
  while (std::getline(in, line)) {
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    if (line.rfind("tensord_model_batch_size_sum" + label, 0) == 0)
      sum = std::atof(line.c_str() + sp);
    if (line.rfind("tensord_model_batch_size_count" + label, 0) == 0)
      count = std::atof(line.c_str() + sp);
  }
  return {sum, count};
}

struct Round {
  std::vector<double> latency;  // seconds per request
  int64_t errors = 0;
  std::vector<std::string> messages;
  double elapsed = 0;
};

bool close_to(const HostTensor& a, const HostTensor& b) {
  if (a.type() != b.type() || a.dtype() != DType::kFloat32) return a.nbytes() == b.nbytes();
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  for (int64_t i = 0; i < a.numel(); ++i)
    if (!(std::fabs(x[i] - y[i]) <= 1e-4f + 1e-3f * std::fabs(y[i]))) return false;
  return true;
}

// N clients sending `name` batch-1 requests until the deadline.
Round run_round(const std::string& address, const std::string& name, int clients, double secs,
                const std::vector<HostTensor>& inputs, const HostTensor* reference) {
  Round round;
  std::mutex mu;
  const auto start = Clock::now();
  const auto deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(secs));
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i)
    threads.emplace_back([&, i] {
      std::vector<double> lat;
      auto fail = [&](const std::string& what, const Status& s) {
        std::lock_guard<std::mutex> lock(mu);
        round.errors++;
        if (round.messages.size() < 5) round.messages.push_back(what + ": " + s.to_string());
      };
      rpc::RemoteClientOptions o;
      o.transport = i % 2 == 0 ? "auto" : "grpc";
      auto c = rpc::RemoteClient::connect(address, o);
      if (!c.ok()) return fail("connect", c.status());
      auto m = (*c)->open_model(name);
      if (!m.ok()) return fail("open_model", m.status());
      while (Clock::now() < deadline) {
        const auto t0 = Clock::now();
        std::vector<TensorHandle> in;
        Status st;
        for (const HostTensor& t : inputs) {
          auto h = (*c)->upload(t.view(), "");
          if (!h.ok()) {
            st = h.status();
            break;
          }
          in.push_back(*h);
        }
        if (st.ok()) {
          auto out = (*c)->run(*m, in);
          if (!out.ok()) {
            st = out.status();
          } else {
            auto y = (*c)->read((*out)[0]);
            if (!y.ok())
              st = y.status();
            else if (reference && !close_to(*y, *reference))
              st =
                  errors::Internal("output differs from the unbatched run's beyond 1e-4 + 1e-3|y|");
            for (TensorHandle h : *out) (void)(*c)->release(h);
          }
        }
        for (TensorHandle h : in) (void)(*c)->release(h);
        if (st.ok())
          lat.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        else
          fail("request", st);
      }
      std::lock_guard<std::mutex> lock(mu);
      round.latency.insert(round.latency.end(), lat.begin(), lat.end());
    });
  for (auto& t : threads) t.join();
  round.elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  return round;
}

int run_serve_bench(const ServeBenchOptions& o) {
  if (o.model.empty()) {
    print_error(
        "bench serve: --model FILE.onnx is required (e.g. `tensord bench mobilenet_v2 "
        "--export m.onnx`)");
    return kExitUsage;
  }
  if (o.clients < 1 || o.seconds <= 0) {
    print_error("bench serve: --clients must be >= 1 and --seconds > 0");
    return kExitUsage;
  }
  auto imported = onnx::import_file(o.model);
  if (!imported.ok()) {
    print_error("bench serve: " + imported.status().to_string());
    return kExitFailure;
  }
  // Batch-1 inputs: the declared shapes with the first dimension 1, deterministic values.
  std::vector<HostTensor> inputs;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const ValueInfo& v : imported->graph.inputs) {
    Shape s = v.type.shape;
    if (s.empty() || v.type.dtype != DType::kFloat32) {
      print_error("bench serve: input '" + v.name + "' is " + v.type.to_string() +
                  "; a float32 input with a batch axis is needed");
      return kExitUsage;
    }
    s[0] = 1;
    for (size_t d = 1; d < s.size(); ++d)
      if (s[d] < 0) {
        print_error("bench serve: input '" + v.name + "' has a free dimension " +
                    std::to_string(d) + " (" + v.type.to_string() +
                    "); give a model with fixed dims");
        return kExitUsage;
      }
    HostTensor t(DType::kFloat32, s);
    for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = dist(rng);
    inputs.push_back(std::move(t));
  }
  // The models folder and the broker.
  std::string tmp = (fs::temp_directory_path() / "tensord-bench-serve.XXXXXX").string();
  if (!mkdtemp(tmp.data())) {
    print_error("bench serve: cannot make a temp folder");
    return kExitFailure;
  }
  struct Cleanup {
    std::string dir;
    pid_t pid = 0;
    ~Cleanup() {
      if (pid > 0) {
        kill(pid, SIGTERM);
        int st;
        waitpid(pid, &st, 0);
      }
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{tmp};
  const int64_t max_batch = o.max_batch_size > 0 ? o.max_batch_size : o.clients;
  const std::string abs_model = fs::absolute(o.model).string();
  for (const char* name : {"plain", "batched"}) {
    fs::create_directories(fs::path(tmp) / "models" / name);
    fs::create_symlink(abs_model, fs::path(tmp) / "models" / name / "model.onnx");
    nlohmann::json c = nlohmann::json::object();
    if (o.device.find(',') != std::string::npos) {  // a list: batches spread over them
      nlohmann::json list = nlohmann::json::array();
      std::stringstream ss(o.device);
      for (std::string d; std::getline(ss, d, ',');) list.push_back(d);
      c["device"] = list;
    } else if (!o.device.empty()) {
      c["device"] = o.device;
    }
    if (std::string(name) == "batched") {
      c["max_batch_size"] = max_batch;
      c["dynamic_batching"] = {{"max_queue_delay_microseconds", o.delay_us}};
      if (o.instances > 0) c["instances"] = o.instances;
    }
    std::ofstream(fs::path(tmp) / "models" / name / "config.json") << c.dump(2);
  }
  const std::string address = "unix:" + tmp + "/broker.sock";
  const int http_port = free_port();
  std::vector<std::string> args = {
      "/proc/self/exe", "serve",         "--listen", address,
      "--models",       tmp + "/models", "--http",   "127.0.0.1:" + std::to_string(http_port)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, (tmp + "/broker.log").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  if (posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv.data(), environ) != 0) {
    print_error("bench serve: cannot start the broker");
    return kExitFailure;
  }
  posix_spawn_file_actions_destroy(&fa);
  cleanup.pid = pid;
  // Ready: a client connects and opens both models (loading the model may take a while).
  bool ready = false;
  std::string why;
  for (int i = 0; i < 600 && !ready; ++i) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      cleanup.pid = 0;
      std::ifstream log(tmp + "/broker.log");
      std::stringstream ss;
      ss << log.rdbuf();
      print_error("bench serve: the broker exited: " + ss.str());
      return kExitFailure;
    }
    auto c = rpc::RemoteClient::connect(address, {});
    if (c.ok()) {
      auto a = (*c)->open_model("plain"), b = (*c)->open_model("batched");
      ready = a.ok() && b.ok();
      if (!ready) why = (a.ok() ? b.status() : a.status()).to_string();
      if (!ready && !why.empty()) break;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  if (!ready) {
    print_error("bench serve: the broker did not get ready: " + why);
    return kExitFailure;
  }
  // The reference output: one unbatched run.
  HostTensor reference;
  {
    auto c = rpc::RemoteClient::connect(address, {});
    auto m = c.ok() ? (*c)->open_model("plain") : Result<ModelHandle>(c.status());
    std::vector<TensorHandle> in;
    for (const HostTensor& t : inputs)
      if (m.ok()) in.push_back(*(*c)->upload(t.view(), ""));
    auto out = m.ok() ? (*c)->run(*m, in) : Result<std::vector<TensorHandle>>(m.status());
    auto y = out.ok() ? (*c)->read((*out)[0]) : Result<HostTensor>(out.status());
    if (!y.ok()) {
      print_error("bench serve: the reference run failed: " + y.status().to_string());
      return kExitFailure;
    }
    reference = std::move(*y);
  }

  nlohmann::json j;
  j["model"] = o.model;
  j["clients"] = o.clients;
  j["seconds"] = o.seconds;
  j["max_batch_size"] = max_batch;
  j["max_queue_delay_us"] = o.delay_us;
  j["instances"] = o.instances;
  j["device"] = o.device.empty() ? "default" : o.device;
  j["rows"] = nlohmann::json::array();
  int64_t total_errors = 0;
  double best_rps = 0;
  for (const char* name : {"plain", "batched"}) {
    if (o.warmup > 0) (void)run_round(address, name, o.clients, o.warmup, inputs, nullptr);
    const auto before = batch_sums(http_get(http_port, "/metrics"), name);
    Round r = run_round(address, name, o.clients, o.seconds, inputs, &reference);
    const auto after = batch_sums(http_get(http_port, "/metrics"), name);
    const double runs = after.second - before.second;
    const double rps = static_cast<double>(r.latency.size()) / r.elapsed;
    best_rps = std::max(best_rps, rps);
    total_errors += r.errors;
    j["rows"].push_back(
        {{"name", std::string("tensord ") +
                      (std::string(name) == "plain" ? "no batching" : "dynamic batching")},
         {"requests", r.latency.size()},
         {"requests_per_s", rps},
         {"p50_ms", percentile(r.latency, 0.5) * 1e3},
         {"p99_ms", percentile(r.latency, 0.99) * 1e3},
         {"mean_batch", runs > 0 ? (after.first - before.first) / runs : 0.0},
         {"errors", r.errors},
         {"error_messages", r.messages}});
  }
  // The peers: N ONNX Runtime processes at once, x1 and x2 threads each, about as many
  // examples each as a client of the faster tensord round ran (so they overlap about as long).
  if (!o.no_peers) {
    std::vector<std::pair<std::string, std::string>> npy;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string f = tmp + "/input" + std::to_string(i) + ".npy";
      (void)write_npy(f, inputs[i]);
      npy.emplace_back(imported->graph.inputs[i].name, f);
    }
    const int64_t examples =
        std::clamp<int64_t>(static_cast<int64_t>(best_rps * o.seconds / o.clients), 8, 4000);
    for (int threads : {1, 2}) {
      std::vector<PeerResult> res(static_cast<size_t>(o.clients));
      std::vector<std::thread> ts;
      const auto start = Clock::now();
      for (int i = 0; i < o.clients; ++i)
        ts.emplace_back([&, i] {
          PeerRequest req;
          req.model = abs_model;
          req.inputs = npy;
          req.examples = examples;
          req.batch_size = 1;
          req.warmup = 4;
          req.threads = threads;
          res[static_cast<size_t>(i)] = run_peer("onnxruntime", req);
        });
      for (auto& t : ts) t.join();
      const double wall = std::chrono::duration<double>(Clock::now() - start).count();
      nlohmann::json row = {{"name", fmt::format("{} onnxruntime processes x{} thread{}", o.clients,
                                                 threads, threads > 1 ? "s" : "")}};
      std::vector<double> per;
      double rps = 0;
      std::string reason;
      for (const PeerResult& p : res) {
        if (!p.available) {
          reason = p.reason;
          continue;
        }
        per.push_back(p.per_example_s);
        rps += 1.0 / p.per_example_s;
      }
      if (per.empty()) {
        row["available"] = false;
        row["reason"] = reason;
      } else {
        row["available"] = true;
        row["processes"] = per.size();
        row["examples_each"] = examples;
        // Each process's own rate while the others ran beside it, summed; latency: the
        // processes' mean time per request (p50 the median process, p99 the slowest).
        row["requests_per_s"] = rps;
        row["p50_ms"] = percentile(per, 0.5) * 1e3;
        row["p99_ms"] = *std::max_element(per.begin(), per.end()) * 1e3;
        row["mean_batch"] = 1.0;
        row["wall_s"] = wall;
        row["latency_note"] = "per-process mean time per request (the peer reports no percentiles)";
      }
      j["rows"].push_back(row);
    }
  }
  j["errors"] = total_errors;
  if (o.json) {
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf(
        "bench serve: %s, %d clients x %.0f s, batch-1 requests; batching: max %lld, delay %lld "
        "us\n",
        o.model.c_str(), o.clients, o.seconds, static_cast<long long>(max_batch),
        static_cast<long long>(o.delay_us));
    std::printf("  %-42s %10s %9s %9s %10s\n", "", "req/s", "p50 ms", "p99 ms", "mean batch");
    for (const auto& row : j["rows"]) {
      if (row.contains("available") && !row["available"].get<bool>()) {
        std::printf("  %-42s not available: %s\n", row["name"].get<std::string>().c_str(),
                    row["reason"].get<std::string>().c_str());
        continue;
      }
      std::printf("  %-42s %10.1f %9.2f %9.2f %10.2f\n", row["name"].get<std::string>().c_str(),
                  row["requests_per_s"].get<double>(), row["p50_ms"].get<double>(),
                  row["p99_ms"].get<double>(), row["mean_batch"].get<double>());
      if (row.contains("error_messages"))
        for (const auto& m : row["error_messages"])
          std::printf("    error: %s\n", m.get<std::string>().c_str());
    }
  }
  return total_errors == 0 ? kExitOk : kExitFailure;
}

}  // namespace

std::function<int()> add_bench_serve_command(CLI::App& bench) {
  auto o = std::make_shared<ServeBenchOptions>();
  auto* cmd = bench.add_subcommand(
      "serve",
      "N clients sending one named model batch-1 requests through a broker this starts, with "
      "and without dynamic batching, beside N ONNX Runtime processes: req/s, p50/p99, mean batch");
  cmd->add_option("--model", o->model, "The model, an ONNX file with a batch axis")->required();
  cmd->add_option("--clients", o->clients, "Concurrent clients, one session each (default 16)");
  cmd->add_option("--seconds", o->seconds, "How long each measured round runs (default 10)");
  cmd->add_option("--warmup", o->warmup, "Seconds of the same load before each round (default 3)");
  cmd->add_option("--max-batch-size", o->max_batch_size,
                  "max_batch_size of the batched model (default: the number of clients)");
  cmd->add_option("--delay-us", o->delay_us,
                  "max_queue_delay_microseconds of the batched model (default 2000)");
  cmd->add_option("--instances", o->instances, "instances of the batched model (default: the broker's, as many as a cpu device's runners, else 1)");
  cmd->add_option("--model-device", o->device,
                  "The models' device in config.json, or a comma list (\"cpu:0,cpu:1\": the "
                  "batched model's batches spread over them; with TENSORD_CPU_DEVICES=2 "
                  "TENSORD_NUM_THREADS=1) (default: the broker's)");
  cmd->add_flag("--no-peers", o->no_peers, "Skip the ONNX Runtime processes");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  return [o] { return run_serve_bench(*o); };
}

}  // namespace tensord::cli
