// `tensord bench load`: many clients at once against one broker, each its own session, doing a
// mix of what clients do — small Array API ops (Add / MatMul / Relu chains, read back), uploads
// of various sizes (some through shared memory when the broker is on this host, the rest over
// gRPC) read back and compared, and runs of a small MLP loaded once per client. Reports ops/s,
// p50/p99 latency per kind, errors (count and the first messages; every value is checked, so a
// wrong byte is an error too) and the broker's resident memory before, at peak and after the
// clients have left (from /proc/<pid>/status when the broker runs on this host: --broker-pid,
// or the peer of a unix socket address found with SO_PEERCRED).
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "cli/broker_address.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "core/errors.h"
#include "rpc/remote_client.h"
#include "tensord/array.h"

namespace tensord::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct LoadOptions {
  std::string address;
  int clients = 8;
  double seconds = 10;
  double warmup = 0;  // seconds of the same load before the measured run (RSS baseline after it)
  int64_t broker_pid = 0;
  bool json = false;
};

enum Kind { kSmallOp = 0, kUpload = 1, kModelRun = 2, kKinds = 3 };
const char* const kKindNames[kKinds] = {"small_op", "upload", "model_run"};

// What one client thread measured.
struct ClientResult {
  std::vector<double> latency[kKinds];  // seconds per op
  int64_t errors = 0;
  std::vector<std::string> messages;  // the first few
  std::string transport;
};

void record_error(ClientResult& r, const std::string& what, const Status& s) {
  ++r.errors;
  if (r.messages.size() < 3) r.messages.push_back(what + ": " + s.to_string());
}

// A small MLP: [8, 64] -> MatMul 64x128 + bias -> Relu -> MatMul 128x10 + bias.
Graph make_mlp() {
  auto weights = [](int64_t rows, int64_t cols, float scale) {
    std::vector<float> v(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>((i * 37 % 101)) / 101.0f - scale / 2;
    return HostTensor::from_vector(v, {rows, cols});
  };
  Graph g;
  g.name = "bench_load_mlp";
  g.inputs = {{"x", {DType::kFloat32, {8, 64}}}};
  g.outputs = {{"y", {}}};
  g.initializers["w1"] = weights(64, 128, 0.2f);
  g.initializers["b1"] = weights(1, 128, 0.1f);
  g.initializers["w2"] = weights(128, 10, 0.2f);
  g.initializers["b2"] = weights(1, 10, 0.1f);
  auto node = [](std::string op, std::vector<std::string> in, std::string out) {
    Node n;
    n.op = std::move(op);
    n.name = out;
    n.inputs = std::move(in);
    n.outputs = {std::move(out)};
    return n;
  };
  g.nodes = {node("MatMul", {"x", "w1"}, "h0"), node("Add", {"h0", "b1"}, "h1"),
             node("Relu", {"h1"}, "h2"), node("MatMul", {"h2", "w2"}, "h3"),
             node("Add", {"h3", "b2"}, "y")};
  return g;
}

// The small-op chain: relu((a + b) @ a) * 0.5, 4x4, with its expected value computed here.
std::vector<float> small_op_expected(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> out(16, 0);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      float s = 0;
      for (int k = 0; k < 4; ++k) s += (a[i * 4 + k] + b[i * 4 + k]) * a[k * 4 + j];
      out[i * 4 + j] = std::max(s, 0.0f) * 0.5f;
    }
  return out;
}

bool close_enough(const std::vector<float>& x, const std::vector<float>& y) {
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (!(std::fabs(x[i] - y[i]) <= 1e-4f * (1 + std::fabs(y[i])))) return false;
  return true;
}

void run_client(int index, const std::string& address, Clock::time_point deadline,
                ClientResult& r) {
  rpc::RemoteClientOptions o;
  // Half the clients move bulk bytes over shared memory when the broker is on this host
  // ("auto"), the other half over gRPC streams.
  o.transport = index % 2 == 0 ? "auto" : "grpc";
  r.transport = o.transport;
  auto connected = rpc::RemoteClient::connect(address, o);
  if (!connected.ok()) {
    record_error(r, "connect", connected.status());
    return;
  }
  std::shared_ptr<Client> client(std::move(connected).value());
  auto ctx = std::make_shared<Context>(client);

  std::vector<float> a(16), b(16);
  for (int i = 0; i < 16; ++i) {
    a[i] = static_cast<float>((i * 7 + index) % 11) / 4.0f - 1.0f;
    b[i] = static_cast<float>((i * 5 + 3 * index) % 13) / 6.0f - 1.0f;
  }
  const std::vector<float> expected_small = small_op_expected(a, b);

  const Graph mlp = make_mlp();
  auto model = client->load(mlp, "");
  if (!model.ok()) record_error(r, "load model", model.status());
  std::vector<float> x(8 * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i + index) % 17) / 8.0f - 1.0f;
  const HostTensor model_input = HostTensor::from_vector(x, {8, 64});
  std::vector<float> expected_model;  // the first run's output; every later run must match

  // Upload sizes: 4 KiB and 48 KiB go in gRPC messages; 256 KiB and 1 MiB go through shared
  // memory on the "auto" clients when the broker is on this host.
  const int64_t kSizes[] = {4 << 10, 48 << 10, 256 << 10, 1 << 20};
  std::vector<HostTensor> payloads;
  for (int64_t size : kSizes) {
    HostTensor t(DType::kUInt8, {size});
    auto* p = t.mutable_data<uint8_t>();
    for (int64_t i = 0; i < size; ++i) p[i] = static_cast<uint8_t>((i * 131 + index * 7 + size) & 255);
    payloads.push_back(std::move(t));
  }

  int64_t iteration = 0;
  while (Clock::now() < deadline) {
    // 2 small ops : 1 upload : 1 model run.
    const int slot = static_cast<int>(iteration++ % 4);
    const Kind kind = slot < 2 ? kSmallOp : slot == 2 ? kUpload : kModelRun;
    const auto t0 = Clock::now();
    Status st;
    if (kind == kSmallOp) {
      Array aa = Array::from_vector(a, {4, 4}, "", ctx);
      Array bb = Array::from_vector(b, {4, 4}, "", ctx);
      Array y = (aa + bb).matmul(aa).relu() * 0.5;
      auto v = y.to_vector<float>();
      if (!v.ok())
        st = v.status();
      else if (!close_enough(*v, expected_small))
        st = errors::Internal("small op: wrong values read back");
    } else if (kind == kUpload) {
      const HostTensor& t = payloads[static_cast<size_t>(iteration / 4) % payloads.size()];
      auto h = client->upload(t.view(), "");
      if (!h.ok()) {
        st = h.status();
      } else {
        auto back = client->read(*h);
        if (!back.ok())
          st = back.status();
        else if (back->nbytes() != t.nbytes() ||
                 std::memcmp(back->data<uint8_t>(), t.data<uint8_t>(),
                             static_cast<size_t>(t.nbytes())) != 0)
          st = errors::Internal("upload of {} bytes: different bytes read back", t.nbytes());
        Status rel = client->release(*h);
        if (st.ok()) st = rel;
      }
    } else {
      if (!model.ok()) continue;
      auto in = client->upload(model_input.view(), "");
      if (!in.ok()) {
        st = in.status();
      } else {
        auto out = client->run(*model, {*in});
        if (!out.ok()) {
          st = out.status();
        } else {
          auto y = client->read((*out)[0]);
          if (!y.ok()) {
            st = y.status();
          } else {
            std::vector<float> v(y->data<float>(), y->data<float>() + y->numel());
            if (expected_model.empty())
              expected_model = v;
            else if (!close_enough(v, expected_model))
              st = errors::Internal("model run: a different output than the first run");
          }
          for (TensorHandle h : *out) (void)client->release(h);
        }
        (void)client->release(*in);
      }
    }
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (st.ok())
      r.latency[kind].push_back(dt);
    else
      record_error(r, kKindNames[kind], st);
  }
  if (model.ok()) {
    if (Status s = client->unload(*model); !s.ok()) record_error(r, "unload", s);
  }
}

// The pid of the process listening on a unix socket (SO_PEERCRED), or 0.
int64_t unix_peer_pid(const std::string& address) {
  if (address.rfind("unix:", 0) != 0) return 0;
  std::string path = address.substr(5);
  if (path.rfind("//", 0) == 0) path = path.substr(2);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof sa.sun_path) return 0;
  std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  int64_t pid = 0;
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) pid = cred.pid;
  }
  close(fd);
  return pid;
}

// VmRSS of a process in bytes, or -1.
int64_t rss_bytes(int64_t pid) {
  if (pid <= 0) return -1;
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
  return -1;
}

double percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

int run_load(const LoadOptions& options) {
  if (options.clients < 1 || options.clients > 4096) {
    print_error("bench load: --clients must be in [1, 4096], got " + std::to_string(options.clients));
    return kExitUsage;
  }
  if (!(options.warmup >= 0) || options.warmup > 86400) {
    print_error("bench load: --warmup must be in [0, 86400], got " + std::to_string(options.warmup));
    return kExitUsage;
  }
  if (!(options.seconds > 0) || options.seconds > 86400) {
    print_error("bench load: --seconds must be in (0, 86400], got " + std::to_string(options.seconds));
    return kExitUsage;
  }
  const std::string address = broker_address(options.address, "bench load");
  if (address.empty()) return kExitUsage;
  const int64_t pid = options.broker_pid > 0 ? options.broker_pid : unix_peer_pid(address);
  const int64_t rss_start = rss_bytes(pid);

  // One round: every client runs until the deadline; the broker's RSS sampled meanwhile.
  auto round = [&](double secs, std::vector<ClientResult>& results, int64_t& rss_peak) {
    results.assign(static_cast<size_t>(options.clients), ClientResult{});
    std::atomic<bool> done{false};
    std::thread sampler([&] {
      while (!done.load()) {
        rss_peak = std::max(rss_peak, rss_bytes(pid));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
    const auto start = Clock::now();
    const auto deadline =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(secs));
    std::vector<std::thread> threads;
    for (int i = 0; i < options.clients; ++i)
      threads.emplace_back(
          [&, i] { run_client(i, address, deadline, results[static_cast<size_t>(i)]); });
    for (auto& t : threads) t.join();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    done = true;
    sampler.join();
    return elapsed;
  };
  // After a round the clients have closed their sessions; give the broker a moment to free
  // what they held (up to 5 s, until its RSS stops falling).
  auto settled_rss = [&] {
    int64_t rss = rss_bytes(pid);
    for (int i = 0; i < 10 && rss > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      const int64_t now = rss_bytes(pid);
      if (now >= rss) return now;
      rss = now;
    }
    return rss;
  };

  std::vector<ClientResult> results;
  int64_t warmup_errors = 0;
  if (options.warmup > 0) {  // the same load, unmeasured: the broker's steady state
    int64_t unused = 0;
    (void)round(options.warmup, results, unused);
    for (const auto& r : results) warmup_errors += r.errors;
  }
  const int64_t rss_before = options.warmup > 0 ? settled_rss() : rss_start;
  int64_t rss_peak = rss_before;
  const double elapsed = round(options.seconds, results, rss_peak);
  const int64_t rss_after = settled_rss();

  std::vector<double> lat[kKinds];
  int64_t errors = 0;
  std::vector<std::string> messages;
  for (auto& r : results) {
    for (int k = 0; k < kKinds; ++k) lat[k].insert(lat[k].end(), r.latency[k].begin(), r.latency[k].end());
    errors += r.errors;
    for (auto& m : r.messages)
      if (messages.size() < 10) messages.push_back(m);
  }
  int64_t ops = 0;
  for (auto& l : lat) ops += static_cast<int64_t>(l.size());

  nlohmann::json j;
  j["address"] = address;
  j["clients"] = options.clients;
  j["seconds"] = elapsed;
  j["ops"] = ops;
  j["ops_per_s"] = static_cast<double>(ops) / elapsed;
  j["errors"] = errors;
  j["warmup_seconds"] = options.warmup;
  j["warmup_errors"] = warmup_errors;
  j["error_messages"] = messages;
  for (int k = 0; k < kKinds; ++k) {
    auto& l = lat[k];
    j["kinds"][kKindNames[k]] = {{"ops", l.size()},
                                 {"ops_per_s", static_cast<double>(l.size()) / elapsed},
                                 {"p50_ms", percentile(l, 0.50) * 1e3},
                                 {"p99_ms", percentile(l, 0.99) * 1e3},
                                 {"max_ms", l.empty() ? 0 : *std::max_element(l.begin(), l.end()) * 1e3}};
  }
  j["broker_pid"] = pid > 0 ? nlohmann::json(pid) : nlohmann::json(nullptr);
  if (rss_before > 0 && rss_after > 0) {
    j["broker_rss_start_bytes"] = rss_start;  // before any client (and the warm-up)
    j["broker_rss_before_bytes"] = rss_before;
    j["broker_rss_peak_bytes"] = rss_peak;
    j["broker_rss_after_bytes"] = rss_after;
    j["broker_rss_after_vs_before"] =
        static_cast<double>(rss_after) / static_cast<double>(rss_before);
  } else {
    j["broker_rss_start_bytes"] = nullptr;
    j["broker_rss_before_bytes"] = nullptr;
    j["broker_rss_peak_bytes"] = nullptr;
    j["broker_rss_after_bytes"] = nullptr;
    j["broker_rss_after_vs_before"] = nullptr;
  }

  if (options.json) {
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("broker: %s, %d clients for %.1f s\n", address.c_str(), options.clients, elapsed);
    std::printf("  %-10s %10s %10s %10s %10s %10s\n", "kind", "ops", "ops/s", "p50 ms", "p99 ms",
                "max ms");
    for (int k = 0; k < kKinds; ++k) {
      const auto& kj = j["kinds"][kKindNames[k]];
      std::printf("  %-10s %10lld %10.1f %10.3f %10.3f %10.3f\n", kKindNames[k],
                  static_cast<long long>(kj["ops"].get<int64_t>()), kj["ops_per_s"].get<double>(),
                  kj["p50_ms"].get<double>(), kj["p99_ms"].get<double>(), kj["max_ms"].get<double>());
    }
    std::printf("  all: %lld ops, %.1f ops/s, %lld errors\n", static_cast<long long>(ops),
                static_cast<double>(ops) / elapsed, static_cast<long long>(errors));
    if (options.warmup > 0)
      std::printf("  warm-up: %.1f s, %lld errors\n", options.warmup,
                  static_cast<long long>(warmup_errors));
    for (const auto& m : messages) std::printf("    error: %s\n", m.c_str());
    if (rss_before > 0 && rss_after > 0 && options.warmup > 0)
      std::printf("broker RSS at start (before any client): %.1f MiB\n", rss_start / 1048576.0);
    if (rss_before > 0 && rss_after > 0)
      std::printf("broker RSS (pid %lld): before %.1f MiB, peak %.1f MiB, after %.1f MiB (%+.1f%%)\n",
                  static_cast<long long>(pid), rss_before / 1048576.0, rss_peak / 1048576.0,
                  rss_after / 1048576.0, 100.0 * (rss_after - rss_before) / rss_before);
    else
      std::printf("broker RSS: unknown (not on this host; pass --broker-pid)\n");
  }
  return errors == 0 && warmup_errors == 0 ? kExitOk : kExitFailure;
}

}  // namespace

std::function<int()> add_bench_load_command(CLI::App& bench) {
  auto options = std::make_shared<LoadOptions>();
  auto* cmd = bench.add_subcommand(
      "load",
      "Many concurrent clients against one broker (small ops, uploads, model runs): ops/s, "
      "p50/p99 per kind, errors, the broker's RSS before and after");
  cmd->add_option("--address", options->address, "Broker to load (default TENSORD_ADDRESS)");
  cmd->add_option("--clients", options->clients, "Concurrent clients, one session each (default 8)");
  cmd->add_option("--seconds", options->seconds, "How long the clients run (default 10)");
  cmd->add_option("--warmup", options->warmup,
                  "Seconds of the same load first, unmeasured; the RSS baseline is taken after "
                  "it (the broker's warm state: thread pools, caches, allocator arenas)");
  cmd->add_option("--broker-pid", options->broker_pid,
                  "The broker's pid, for its RSS (default: the peer of a unix: address)");
  cmd->add_flag("--json", options->json, "Print one JSON object");
  return [options] { return run_load(*options); };
}

}  // namespace tensord::cli
