// `tensord bench share`: what a shared machine gets from tensord against ONNX Runtime, side by
// side in one run (issue 28). For each network, batch 1, in rounds (medians reported):
// - one process alone: tensord embedded and ONNX Runtime (its default threads: the cores; and
//   one thread), ms per example, on the idle machine and beside a fixed background load
//   (--load-threads busy threads in this process, default 2);
// - N processes at once (--clients, default 4), each with its own copy of the model, total
//   examples/s: tensord embedded, tensord through one broker (`tensord serve` on a unix socket,
//   each client its own session), ONNX Runtime with one thread and with the cores' threads;
//   and one client alone through the broker.
// The total of N processes is the sum of each one's examples/s over its timed run, all of which
// ran at the same time (each warms up first, so compiles and starts do not overlap the timing
// much). Every process is a real one: this executable (`tensord bench NET`), the broker
// (`tensord serve`) and the ONNX Runtime peer (bench/peers/onnxruntime.js).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "cli/bench_peers.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "core/npy.h"
#include "onnx/onnx_import.h"
#include "tensord/client.h"

namespace tensord::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct ShareOptions {
  std::vector<std::string> networks = {"mobilenet_v2", "resnet50"};
  int clients = 4;
  int64_t examples = 0;  // per process; 0: per network (enough for a few seconds)
  int64_t warmup = 16;
  int rounds = 3;
  int load_threads = 2;
  bool json = false;
};

int64_t default_examples(const std::string& network) {
  if (network == "resnet50") return 48;
  if (network == "mobilenet_v2" || network == "mobilenet") return 256;
  return 64;
}

std::string self_exe() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "tensord" : p.string();
}

// Busy threads in this process while alive: the "other job" on the machine.
class BackgroundLoad {
 public:
  explicit BackgroundLoad(int threads) {
    for (int i = 0; i < threads; ++i)
      threads_.emplace_back([this] {
        volatile uint64_t x = 0;
        while (!stop_.load(std::memory_order_relaxed)) x = x + 1;
      });
  }
  ~BackgroundLoad() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// A `tensord serve` on a unix socket in a temporary folder, stopped (SIGTERM) on destruction.
class Broker {
 public:
  Broker(const std::string& exe, const std::string& dir) {
    address_ = "unix:" + dir + "/broker.sock";
    pid_ = fork();
    if (pid_ == 0) {
      const std::string log = dir + "/broker.log";
      FILE* f = std::freopen(log.c_str(), "w", stdout);
      (void)f;
      dup2(STDOUT_FILENO, STDERR_FILENO);
      execl(exe.c_str(), exe.c_str(), "serve", "--listen", address_.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    // Ready when a client connects (up to 30 s: a loaded machine).
    const auto until = Clock::now() + std::chrono::seconds(30);
    while (pid_ > 0 && Clock::now() < until) {
      if (auto c = connect(address_); c.ok()) {
        ready_ = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~Broker() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  bool ready() const { return ready_; }
  const std::string& address() const { return address_; }

 private:
  pid_t pid_ = -1;
  bool ready_ = false;
  std::string address_;
};

// One process's figures (`error` set when it failed).
struct Run {
  double per_example_s = 0, compile_s = 0;
  double start = 0, end = 0;  // Unix times of its timed run
  int64_t examples = 0;
  std::string error;
};

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Run tensord_run(const std::string& exe, const std::string& network, int64_t examples,
                int64_t warmup, const std::string& address, double start_at = 0) {
  std::vector<std::string> argv = {exe,       "bench",   network,
                                   "-n",      std::to_string(examples),
                                   "--warmup", std::to_string(warmup),
                                   "--no-check", "--json", "-d", "cpu:0"};
  if (!address.empty()) argv.insert(argv.end(), {"--address", address});
  if (start_at > 0) argv.insert(argv.end(), {"--start-at", fmt::format("{:.3f}", start_at)});
  const ProcessResult pr = run_process(argv);
  Run r;
  if (pr.exit_code != 0) {
    r.error = fmt::format("tensord bench exit {}: {}", pr.exit_code,
                          pr.err.substr(pr.err.size() > 300 ? pr.err.size() - 300 : 0));
    return r;
  }
  try {
    const auto j = nlohmann::json::parse(pr.out.substr(pr.out.find('{')));
    r.per_example_s = j.at("per_example_s").get<double>();
    r.compile_s = j.at("compile_s").get<double>();
    r.start = j.at("timed_start_unix").get<double>();
    r.end = j.at("timed_end_unix").get<double>();
    r.examples = examples;
  } catch (const std::exception& e) {
    r.error = std::string("unreadable tensord bench output: ") + e.what();
  }
  return r;
}

Run ort_run(const PeerRequest& base, int threads, double start_at = 0) {
  PeerRequest req = base;
  req.threads = threads;
  req.start_at = start_at;
  const PeerResult p = run_peer("onnxruntime", req);
  Run r;
  if (!p.available || p.failed) {
    r.error = "onnxruntime: " + p.reason;
    return r;
  }
  r.per_example_s = p.per_example_s;
  r.compile_s = p.compile_s;
  r.start = p.timed_start_unix;
  r.end = p.timed_end_unix;
  r.examples = base.examples;
  return r;
}

// `n` copies of `one(start_at)` at once, their timed runs told to start at the same time, late
// enough for all to have compiled and warmed up (`solo`: one such process alone, scaled by n
// and a margin). Total examples/s = all examples over the span from the first timed start to
// the last end: a process that started late counts against the total, not for it.
std::pair<double, std::string> together(int n, const Run& solo, int64_t warmup,
                                        const std::function<Run(double)>& one) {
  const double prepare =
      solo.compile_s + static_cast<double>(warmup + 1) * solo.per_example_s + 0.5;
  const double start_at = unix_now() + std::max(2.0, 1.5 * n * prepare);
  std::vector<Run> runs(static_cast<size_t>(n));
  std::vector<std::thread> ts;
  for (int i = 0; i < n; ++i)
    ts.emplace_back([&, i] { runs[static_cast<size_t>(i)] = one(start_at); });
  for (auto& t : ts) t.join();
  double first = 0, last = 0;
  int64_t examples = 0;
  for (const Run& r : runs) {
    if (!r.error.empty()) return {0, r.error};
    first = first == 0 ? r.start : std::min(first, r.start);
    last = std::max(last, r.end);
    examples += r.examples;
  }
  if (last <= first) return {0, "no timed interval reported"};
  return {static_cast<double>(examples) / (last - first), ""};
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// The rows of one network, in the order they run in each round.
struct Row {
  std::string key, label, unit;  // unit: "ms" (per example) or "ex/s" (total)
};

const std::vector<Row>& rows() {
  static const std::vector<Row> r = {
      {"idle.tensord", "one process, idle: tensord", "ms"},
      {"idle.ort", "one process, idle: onnxruntime (cores' threads)", "ms"},
      {"idle.ort1", "one process, idle: onnxruntime (1 thread)", "ms"},
      {"loaded.tensord", "one process, busy threads beside: tensord", "ms"},
      {"loaded.ort", "one process, busy threads beside: onnxruntime (cores' threads)", "ms"},
      {"loaded.ort1", "one process, busy threads beside: onnxruntime (1 thread)", "ms"},
      {"broker1", "one client through a broker: tensord", "ex/s"},
      {"brokerN", "N clients through one broker: tensord", "ex/s"},
      {"embeddedN", "N processes: tensord embedded", "ex/s"},
      {"ortN1", "N processes: onnxruntime x 1 thread", "ex/s"},
      {"ortN", "N processes: onnxruntime x cores' threads", "ex/s"},
  };
  return r;
}

int run_share(const ShareOptions& o) {
  const std::string exe = self_exe();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  char tmpl[] = "/tmp/tensord-share-XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::cerr << "bench share: cannot create a temporary folder\n";
    return kExitFailure;
  }
  const std::string dir = tmpl;
  struct Cleanup {
    std::string d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};

  nlohmann::json out;
  out["clients"] = o.clients;
  out["load_threads"] = o.load_threads;
  out["rounds"] = o.rounds;
  out["cores"] = cores;
  bool failed = false;
  for (const std::string& net : o.networks) {
    const int64_t examples = o.examples > 0 ? o.examples : default_examples(net);
    // The network as ONNX and one random input batch, for the ONNX Runtime peer.
    PeerRequest req;
    req.model = dir + "/" + net + ".onnx";
    req.examples = examples;
    req.warmup = o.warmup;
    req.batch_size = 1;
    {
      const ProcessResult pr = run_process({exe, "bench", net, "--export", req.model});
      if (pr.exit_code != 0) {
        std::cerr << "bench share: cannot export " << net << ": " << pr.err << "\n";
        return kExitFailure;
      }
      auto model = onnx::import_file(req.model);
      if (!model.ok()) {
        std::cerr << "bench share: " << model.status().to_string() << "\n";
        return kExitFailure;
      }
      std::mt19937 rng(7);
      std::uniform_real_distribution<float> d(0.0f, 1.0f);
      for (size_t k = 0; k < model->graph.inputs.size(); ++k) {
        const auto& in = model->graph.inputs[k];
        Shape shape;
        for (int64_t dim : in.type.shape) shape.push_back(dim < 0 ? 1 : dim);
        HostTensor t(in.type.dtype, shape);
        if (in.type.dtype == DType::kFloat32)
          for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = d(rng);
        const std::string f = fmt::format("{}/{}_input_{}.npy", dir, net, k);
        if (Status s = write_npy(f, t); !s.ok()) {
          std::cerr << "bench share: " << s.to_string() << "\n";
          return kExitFailure;
        }
        req.inputs.emplace_back(in.name, f);
      }
    }
    std::map<std::string, std::vector<double>> values;
    std::map<std::string, std::string> errors;
    auto record = [&](const std::string& key, double v, const std::string& err) {
      if (!err.empty()) {
        errors.emplace(key, err);
        return;
      }
      values[key].push_back(v);
    };
    auto ms = [](const Run& r) { return r.per_example_s * 1e3; };
    for (int round = 0; round < o.rounds; ++round) {
      if (!o.json)
        std::fprintf(stderr, "bench share: %s, round %d of %d\n", net.c_str(), round + 1,
                     o.rounds);
      const Run solo = tensord_run(exe, net, examples, o.warmup, "");
      record("idle.tensord", ms(solo), solo.error);
      const Run ort_solo = ort_run(req, 0);
      record("idle.ort", ms(ort_solo), ort_solo.error);
      Run r = ort_run(req, 1);
      record("idle.ort1", ms(r), r.error);
      const Run ort1_solo = r;
      {
        BackgroundLoad load(o.load_threads);
        r = tensord_run(exe, net, examples, o.warmup, "");
        record("loaded.tensord", ms(r), r.error);
        r = ort_run(req, 0);
        record("loaded.ort", ms(r), r.error);
        r = ort_run(req, 1);
        record("loaded.ort1", ms(r), r.error);
      }
      {
        Broker broker(exe, dir);
        if (!broker.ready()) {
          record("broker1", 0, "the broker did not start (see its log)");
          record("brokerN", 0, "the broker did not start");
        } else {
          r = tensord_run(exe, net, examples, o.warmup, broker.address());
          record("broker1", r.error.empty() ? 1.0 / r.per_example_s : 0, r.error);
          auto [total, err] = together(o.clients, solo, o.warmup, [&](double at) {
            return tensord_run(exe, net, examples, o.warmup, broker.address(), at);
          });
          record("brokerN", total, err);
        }
      }
      {
        auto [total, err] = together(o.clients, solo, o.warmup, [&](double at) {
          return tensord_run(exe, net, examples, o.warmup, "", at);
        });
        record("embeddedN", total, err);
      }
      {
        auto [total, err] =
            together(o.clients, ort1_solo, o.warmup, [&](double at) { return ort_run(req, 1, at); });
        record("ortN1", total, err);
      }
      {
        auto [total, err] =
            together(o.clients, ort_solo, o.warmup, [&](double at) { return ort_run(req, 0, at); });
        record("ortN", total, err);
      }
    }
    nlohmann::json jn;
    jn["examples"] = examples;
    auto med = [&](const std::string& k) { return values.count(k) ? median(values[k]) : 0.0; };
    for (const Row& row : rows()) {
      nlohmann::json jr;
      jr["unit"] = row.unit == "ms" ? "ms_per_example" : "examples_per_s";
      jr["median"] = med(row.key);
      jr["runs"] = values.count(row.key) ? values[row.key] : std::vector<double>{};
      if (errors.count(row.key)) {
        jr["error"] = errors[row.key];
        failed = true;
      }
      jn["rows"][row.key] = jr;
    }
    // The ratios.
    const double best_ort_n = std::max(med("ortN1"), med("ortN"));
    nlohmann::json ratios;
    if (med("loaded.ort") > 0) ratios["loaded_tensord_over_ort"] = med("loaded.tensord") / med("loaded.ort");
    if (med("idle.ort") > 0) ratios["idle_tensord_over_ort"] = med("idle.tensord") / med("idle.ort");
    if (best_ort_n > 0) ratios["brokerN_over_best_ortN"] = med("brokerN") / best_ort_n;
    if (best_ort_n > 0) ratios["embeddedN_over_best_ortN"] = med("embeddedN") / best_ort_n;
    if (med("broker1") > 0) ratios["brokerN_over_broker1"] = med("brokerN") / med("broker1");
    jn["ratios"] = ratios;
    out["networks"][net] = jn;

    if (!o.json) {
      std::printf("\n%s, batch 1, %d examples per process, %d busy threads as the load, N = %d, "
                  "%d cores, medians of %d rounds\n",
                  net.c_str(), static_cast<int>(examples), o.load_threads, o.clients, cores,
                  o.rounds);
      for (const Row& row : rows()) {
        if (errors.count(row.key)) {
          std::printf("  %-66s  failed: %s\n", row.label.c_str(), errors[row.key].c_str());
          continue;
        }
        std::printf("  %-66s %9.2f %s\n", row.label.c_str(), med(row.key),
                    row.unit == "ms" ? "ms/example" : "examples/s");
      }
      for (auto it = ratios.begin(); it != ratios.end(); ++it)
        std::printf("  %-66s %9.2f\n", it.key().c_str(), it.value().get<double>());
    }
  }
  if (o.json) std::cout << out.dump(2) << "\n";
  return failed ? kExitFailure : kExitOk;
}

}  // namespace

std::function<int()> add_bench_share_command(CLI::App& bench) {
  auto options = std::make_shared<ShareOptions>();
  auto* cmd = bench.add_subcommand(
      "share",
      "A shared machine: one process beside busy threads, N processes at once (embedded and "
      "through one broker), against the same as ONNX Runtime processes; medians of rounds");
  cmd->add_option("--networks", options->networks,
                  "Zoo networks (default mobilenet_v2 resnet50)")
      ->delimiter(',');
  cmd->add_option("--clients", options->clients, "N: processes at once (default 4)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("-n,--examples", options->examples,
                  "Timed examples per process (default: 256 for mobilenet_v2, 48 for resnet50)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--warmup", options->warmup, "Untimed examples per process first (default 16)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("--rounds", options->rounds, "Rounds; medians reported (default 3)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--load-threads", options->load_threads,
                  "Busy threads beside the 'busy threads beside' rows (default 2)")
      ->check(CLI::Range(0, 256));
  cmd->add_flag("--json", options->json, "Print one JSON object");
  return [options] { return run_share(*options); };
}

}  // namespace tensord::cli
