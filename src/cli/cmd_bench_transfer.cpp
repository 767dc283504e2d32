// `tensord bench transfer`: how fast bytes move between a client and a broker, on each path
// (gRPC streams, same-host shared memory), next to what the machine itself does in the same
// run (raw loopback TCP, memcpy), and the round trip of one tiny evaluated Add next to a bare
// gRPC echo on the same channel.
//
// Without --address it starts a broker in this process on a temp unix socket (the engine from
// the environment), so the figures are real client<->broker transfers either way.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "cli/cli_common.h"
#include "cli/units.h"
#include "cli/commands.h"
#include "core/errors.h"
#include "engine/engine.h"
#include "rpc/remote_client.h"
#include "rpc/server.h"

namespace tensord::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct TransferOptions {
  std::string address;
  int64_t size = 256 << 20;
  int iterations = 5;
  int small_iterations = 2000;
  int64_t chunk_bytes = 0;  // gRPC stream message size (0: the client's default)
  bool json = false;
};

double seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Best of `n` runs of f() (seconds).
template <typename F>
double best_of(int n, F&& f) {
  double best = 1e30;
  for (int i = 0; i < n; ++i) best = std::min(best, f());
  return best;
}

double memcpy_gbps(int64_t size, int iterations) {
  std::vector<unsigned char> a(static_cast<size_t>(size), 1), b(static_cast<size_t>(size), 2);
  const double t = best_of(iterations, [&] {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), a.size());
    return seconds(t0);
  });
  return static_cast<double>(size) / t / 1e9;
}

// One TCP connection over 127.0.0.1: `size` bytes written in 4 MiB pieces by one thread and
// read by another. Returns GB/s, or a negative value when sockets are not available.
double tcp_gbps(int64_t size, int iterations) {
  const int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (ls < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(ls, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(ls, 1) != 0 ||
      getsockname(ls, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(ls);
    return -1;
  }
  const int cs = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (cs < 0 || connect(cs, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(ls);
    if (cs >= 0) close(cs);
    return -1;
  }
  const int ss = accept(ls, nullptr, nullptr);
  close(ls);
  if (ss < 0) {
    close(cs);
    return -1;
  }
  const size_t piece = 4 << 20;
  std::vector<unsigned char> src(piece, 7), dst(piece);
  const double t = best_of(iterations, [&] {
    const auto t0 = Clock::now();
    std::thread writer([&] {
      int64_t left = size;
      while (left > 0) {
        const ssize_t n = write(cs, src.data(), std::min<int64_t>(left, piece));
        if (n <= 0) return;
        left -= n;
      }
    });
    int64_t got = 0;
    while (got < size) {
      const ssize_t n = read(ss, dst.data(), piece);
      if (n <= 0) break;
      got += n;
    }
    writer.join();
    return seconds(t0);
  });
  close(cs);
  close(ss);
  return static_cast<double>(size) / t / 1e9;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// One path's figures, GB/s, each the median of interleaved rounds (upload, read_into, upload,
// ...): the machine's state drifts alike for both; then read() (a new HostTensor per call).
struct PathFigures {
  std::string path;
  double upload_gbps = 0;
  double download_gbps = 0;    // read_into() the value uploaded: the caller's memory, already there
  // read_into() memory from Client::allocate_host() (shared memory the broker writes into
  // directly on shm; an ordinary allocation elsewhere), of the computed value below
  double download_host_gbps = 0;
  // read(): a new HostTensor per call — allocated and page-faulted, except on shared memory
  // where a large value's tensor is the region the broker wrote it into (one copy)
  double read_alloc_gbps = 0;
  // read_into() the caller's memory of a value the broker computed (Neg of the upload): on
  // shared memory the broker computed it into the session's arena, which this process maps
  // read-only (one copy out of it)
  double download_computed_gbps = 0;
  double download_ms = 0, upload_ms = 0;
  std::string error;
};

PathFigures measure_client(Client& c, const std::string& name, const HostTensor& data,
                           int iterations) {
  PathFigures f;
  f.path = name;
  const double bytes = static_cast<double>(data.nbytes());
  // The caller's buffer, written once so that its pages are there (as a NumPy array's are).
  std::vector<unsigned char> dst(data.nbytes(), 1);
  auto host = c.allocate_host(DType::kUInt8, {static_cast<int64_t>(data.nbytes())});
  if (!host.ok()) {
    f.error = host.status().to_string();
    return f;
  }
  if (host->nbytes()) std::memset(host->mutable_data(), 1, host->nbytes());
  std::vector<double> up, down, down_host, down_computed, alloc;
  TensorHandle kept = 0;
  Status failed;
  Graph neg;
  neg.name = "neg";
  neg.inputs = {{"x", data.type()}};
  Node n;
  n.name = "neg";
  n.op = "Neg";
  n.inputs = {"x"};
  n.outputs = {"y"};
  neg.nodes = {n};
  neg.outputs = {{"y", {}}};
  // Round 0 is not counted: the regions and the broker's staging are then warm, as in use.
  for (int round = 0; round <= iterations && failed.ok(); ++round) {
    auto t0 = Clock::now();
    auto h = c.upload(data.view(), "");
    const double tu = seconds(t0);
    if (!h.ok()) {
      failed = h.status();
      break;
    }
    if (kept) (void)c.release(kept);
    kept = *h;
    if (Status w = c.wait(kept); !w.ok()) {
      failed = w;
      break;
    }
    t0 = Clock::now();
    auto r = c.read_into(kept, dst.data(), dst.size());
    const double td = seconds(t0);
    if (!r.ok()) {
      failed = r.status();
      break;
    }
    if (round == 0 && std::memcmp(dst.data(), data.data(), data.nbytes()) != 0)
      failed = errors::Internal("{}: the bytes read back differ from those uploaded", name);
    // A computed value (made and waited for before the timed reads): into the caller's
    // memory, then into allocate_host() memory.
    auto y = c.execute(neg, {kept}, "");
    if (!y.ok() || y->size() != 1) {
      failed = y.ok() ? errors::Internal("{}: Neg gave {} outputs", name, y->size()) : y.status();
      break;
    }
    const TensorHandle computed = (*y)[0];
    Status st = c.wait(computed);
    double tc = 0, th = 0;
    if (st.ok()) {
      t0 = Clock::now();
      auto rc = c.read_into(computed, dst.data(), dst.size());
      tc = seconds(t0);
      t0 = Clock::now();
      auto rh = c.read_into(computed, host->mutable_data(), host->nbytes());
      th = seconds(t0);
      st = !rc.ok() ? rc.status() : rh.status();
    }
    (void)c.release(computed);
    if (!st.ok()) {
      failed = st;
      break;
    }
    if (round == 0) {
      const auto* x = data.data<float>();
      const auto* got = reinterpret_cast<const float*>(dst.data());
      const auto* got_host = static_cast<const float*>(host->data());
      for (int64_t i = 0; i < data.numel() && failed.ok(); ++i)
        if (got[i] != -x[i] || got_host[i] != -x[i])
          failed = errors::Internal(
              "{}: element {} of the computed value read back is {} (allocate_host: {}), not {}",
              name, i, got[i], got_host[i], -x[i]);
      continue;
    }
    up.push_back(tu);
    down.push_back(td);
    down_host.push_back(th);
    down_computed.push_back(tc);
  }
  // read() apart: its fresh allocations would disturb the rounds above.
  for (int i = 0; i < std::min(iterations, 3) && failed.ok(); ++i) {
    const auto t0 = Clock::now();
    auto t = c.read(kept);
    alloc.push_back(seconds(t0));
    if (!t.ok())
      failed = t.status();
    else if (i == 0 && std::memcmp(t->data(), data.data(), data.nbytes()) != 0)
      failed = errors::Internal("{}: the bytes read() returned differ from those uploaded", name);
  }
  if (kept) (void)c.release(kept);
  if (!failed.ok()) {
    f.error = failed.to_string();
    return f;
  }
  f.upload_ms = median(up) * 1e3;
  f.download_ms = median(down) * 1e3;
  f.upload_gbps = bytes / median(up) / 1e9;
  f.download_gbps = bytes / median(down) / 1e9;
  f.download_host_gbps = bytes / median(down_host) / 1e9;
  f.read_alloc_gbps = bytes / median(alloc) / 1e9;
  f.download_computed_gbps = bytes / median(down_computed) / 1e9;
  return f;
}

PathFigures measure_path(const std::string& address, const std::string& transport,
                         const HostTensor& data, int iterations, int64_t chunk_bytes) {
  rpc::RemoteClientOptions o;
  o.transport = transport;
  o.chunk_bytes = chunk_bytes;
  const std::string name = transport == "grpc" ? "grpc-stream" : "shm";
  auto c = rpc::RemoteClient::connect(address, o);
  if (!c.ok()) {
    PathFigures f;
    f.path = name;
    f.error = c.status().to_string();
    return f;
  }
  return measure_client(**c, name, data, iterations);
}

PathFigures measure_embedded(const HostTensor& data, int iterations) {
  auto c = make_local_client();
  if (!c.ok()) {
    PathFigures f;
    f.path = "embedded";
    f.error = c.status().to_string();
    return f;
  }
  return measure_client(**c, "embedded", data, iterations);
}

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct RoundTrip {
  double add_us = 0, echo_us = 0;
  double add_cpu_us = 0, echo_cpu_us = 0;  // this process's CPU time per call (both sides
                                           // when the broker runs in this process)
  // The tiny Add's phases (medians of an extra, untimed set asked for a breakdown), us.
  std::vector<std::pair<std::string, double>> add_phases;
  std::string error;
};

RoundTrip measure_round_trip(const std::string& address, int iterations) {
  RoundTrip r;
  auto c = rpc::RemoteClient::connect(address);
  if (!c.ok()) {
    r.error = c.status().to_string();
    return r;
  }
  HostTensor a = HostTensor::from_vector<float>({1, 2, 3, 4}, {4});
  auto ha = (*c)->upload(a.view(), ""), hb = (*c)->upload(a.view(), "");
  if (!ha.ok() || !hb.ok()) {
    r.error = (ha.ok() ? hb.status() : ha.status()).to_string();
    return r;
  }
  Graph g;
  g.name = "tiny_add";
  g.inputs = {{"a", {DType::kFloat32, {4}}}, {"b", {DType::kFloat32, {4}}}};
  Node add;
  add.name = "add";
  add.op = "Add";
  add.inputs = {"a", "b"};
  add.outputs = {"y"};
  g.nodes = {add};
  g.outputs = {{"y", {}}};
  // Outputs are released after the timed part: a release is a call of its own.
  std::vector<TensorHandle> outputs;
  auto one_add = [&]() -> Status {
    TD_ASSIGN_OR_RETURN(auto out, (*c)->execute(g, {*ha, *hb}, ""));
    outputs.push_back(out[0]);
    TD_ASSIGN_OR_RETURN(auto y, (*c)->read(out[0]));
    if (y.data<float>()[3] != 8.0f) return errors::Internal("tiny Add: wrong value");
    return OkStatus();
  };
  // Interleaved in blocks, so both see the same machine state; warm-up first.
  for (int i = 0; i < 50; ++i) {
    if (Status s = one_add(); !s.ok()) {
      r.error = s.to_string();
      return r;
    }
    (void)(*c)->echo(0);
  }
  double add_total = 0, echo_total = 0, add_cpu = 0, echo_cpu = 0;
  const int block = 100;
  for (int done = 0; done < iterations; done += block) {
    const int n = std::min(block, iterations - done);
    auto t0 = Clock::now();
    double c0 = cpu_seconds();
    for (int i = 0; i < n; ++i) (void)one_add();
    add_total += seconds(t0);
    add_cpu += cpu_seconds() - c0;
    t0 = Clock::now();
    c0 = cpu_seconds();
    for (int i = 0; i < n; ++i) (void)(*c)->echo(0);
    echo_total += seconds(t0);
    echo_cpu += cpu_seconds() - c0;
    for (TensorHandle h : outputs) (void)(*c)->release(h);
    outputs.clear();
  }
  r.add_us = add_total / iterations * 1e6;
  r.echo_us = echo_total / iterations * 1e6;
  // Where a tiny Add's time goes: a further set with the broker's breakdown (not in the
  // figures above: asking adds a trailer).
  (*c)->set_breakdown(true);
  for (int i = 0; i < std::min(iterations, 500); ++i) (void)one_add();
  (*c)->set_breakdown(false);
  for (TensorHandle h : outputs) (void)(*c)->release(h);
  outputs.clear();
  const auto timings = (*c)->take_breakdown();
  r.add_phases = rpc::median_phases(timings);
  r.add_cpu_us = add_cpu / iterations * 1e6;
  r.echo_cpu_us = echo_cpu / iterations * 1e6;
  return r;
}

int run_transfer(const TransferOptions& options) {
  if (options.size < 4 || options.size > (int64_t{16} << 30)) {
    print_error("bench transfer: --size must be in [4, 16 GiB], got " +
                std::to_string(options.size));
    return kExitUsage;
  }
  if (options.iterations < 1 || options.small_iterations < 1) {
    print_error("bench transfer: --iterations and --round-trips must be >= 1");
    return kExitUsage;
  }
  std::string address = options.address;
  if (address.empty())
    if (const char* env = std::getenv("TENSORD_ADDRESS")) address = env;
  std::unique_ptr<rpc::RpcServer> server;
  std::string dir;
  if (address.empty()) {  // a broker of our own, in this process
    auto engine = Engine::create(EngineOptions::from_env());
    if (!engine.ok()) {
      print_error(engine.status().to_string());
      return kExitFailure;
    }
    std::string tmpl = (std::filesystem::temp_directory_path() / "tensord-bench.XXXXXX").string();
    if (!mkdtemp(tmpl.data())) {
      print_error("bench transfer: cannot make a temp folder");
      return kExitFailure;
    }
    dir = tmpl;
    rpc::RpcServerOptions ro;
    ro.listen = "unix:" + dir + "/broker.sock";
    auto s = rpc::RpcServer::start(std::shared_ptr<Engine>(std::move(engine).value()), ro);
    if (!s.ok()) {
      print_error(s.status().to_string());
      std::filesystem::remove_all(dir);
      return kExitFailure;
    }
    server = std::move(s).value();
    address = server->address();
  }

  const int64_t floats = options.size / 4;
  HostTensor data(DType::kFloat32, {floats});
  auto* p = data.mutable_data<float>();
  for (int64_t i = 0; i < floats; ++i) p[i] = static_cast<float>(i & 1023);
  const int64_t bytes = floats * 4;

  const double mem = memcpy_gbps(bytes, options.iterations);
  const double tcp = tcp_gbps(bytes, options.iterations);
  std::vector<PathFigures> paths = {measure_path(address, "grpc", data, options.iterations,
                                                 options.chunk_bytes),
                                    measure_path(address, "shm", data, options.iterations,
                                                 options.chunk_bytes),
                                    measure_embedded(data, options.iterations)};
  const RoundTrip rt = measure_round_trip(address, options.small_iterations);

  if (server) {
    server->shutdown(std::chrono::milliseconds(1000));
    server.reset();
    std::filesystem::remove_all(dir);
  }

  if (options.json) {
    nlohmann::json j;
    j["address"] = options.address.empty() ? "in-process broker (" + address + ")" : address;
    j["bytes"] = bytes;
    j["memcpy_gbps"] = mem;
    j["tcp_loopback_gbps"] = tcp;
    for (const auto& f : paths) {
      nlohmann::json pj = {{"upload_gbps", f.upload_gbps},
                           {"download_gbps", f.download_gbps},
                           {"download_allocate_host_gbps", f.download_host_gbps},
                           {"read_alloc_gbps", f.read_alloc_gbps},
                           {"download_computed_gbps", f.download_computed_gbps},
                           {"upload_ms", f.upload_ms},
                           {"download_ms", f.download_ms}};
      if (f.upload_gbps > 0) {
        pj["download_vs_upload"] = f.download_gbps / f.upload_gbps;
        pj["download_allocate_host_vs_upload"] = f.download_host_gbps / f.upload_gbps;
        pj["read_vs_upload"] = f.read_alloc_gbps / f.upload_gbps;
        pj["download_computed_vs_upload"] = f.download_computed_gbps / f.upload_gbps;
      }
      if (!f.error.empty()) pj["error"] = f.error;
      j["paths"][f.path] = pj;
    }
    j["memcpy_ms"] = bytes / mem / 1e6;
    j["rounds"] = options.iterations;
    j["tiny_add_round_trip_us"] = rt.add_us;
    j["echo_round_trip_us"] = rt.echo_us;
    j["tiny_add_cpu_us"] = rt.add_cpu_us;
    j["echo_cpu_us"] = rt.echo_cpu_us;
    if (rt.echo_us > 0) j["tiny_add_vs_echo"] = rt.add_us / rt.echo_us;
    nlohmann::json phases = nlohmann::json::object();
    for (const auto& [name, us] : rt.add_phases) phases[name + "_us"] = us;
    j["tiny_add_breakdown"] = phases;
    if (!rt.error.empty()) j["round_trip_error"] = rt.error;
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("broker: %s\n",
                options.address.empty() ? ("in-process, " + address).c_str() : address.c_str());
    std::printf("transfer of %.1f MiB (median of %d interleaved rounds; memcpy and TCP best of)\n",
                bytes / 1048576.0, options.iterations);
    std::printf("  %-22s %8.2f GB/s  (%.1f ms)\n", "memcpy", mem, bytes / mem / 1e6);
    if (tcp > 0)
      std::printf("  %-22s %8.2f GB/s\n", "raw loopback TCP", tcp);
    else
      std::printf("  %-22s %8s\n", "raw loopback TCP", "n/a");
    std::printf("  %-12s %18s  %13s  %13s  %13s  %13s\n", "path", "upload", "uploaded",
                "computed", "computed@host", "read()");
    for (const auto& f : paths) {
      if (!f.error.empty()) {
        std::printf("  %-22s unavailable: %s\n", f.path.c_str(), f.error.c_str());
        continue;
      }
      auto pct = [&](double g) { return 100 * g / f.upload_gbps; };
      std::printf(
          "  %-12s %7.2f (%5.1f ms)  %7.2f (%3.0f%%)  %7.2f (%3.0f%%)  %7.2f (%3.0f%%)  %7.2f "
          "(%3.0f%%)\n",
          f.path.c_str(), f.upload_gbps, f.upload_ms, f.download_gbps, pct(f.download_gbps),
          f.download_computed_gbps, pct(f.download_computed_gbps), f.download_host_gbps,
          pct(f.download_host_gbps), f.read_alloc_gbps, pct(f.read_alloc_gbps));
    }
    std::printf(
        "  (GB/s, %% of upload; reads into memory already there, as a NumPy array's.\n"
        "   uploaded: read_into() the caller's memory of the value just uploaded; on shm its\n"
        "   bytes are still in the region this process lent, so one copy out of it.\n"
        "   computed: the same for a value the broker computed (Neg of the upload); on shm\n"
        "   computed into the session's arena, which this process maps read-only: one copy.\n"
        "   computed@host: that value into memory from Client::allocate_host(), which on shm\n"
        "   the broker writes straight into (one copy). read(): a new HostTensor per call,\n"
        "   over the region the broker wrote into on shm)\n");
    if (paths[2].error.empty())
      std::printf("  embedded read / memcpy:   read_into() %.2fx, read() %.2fx\n",
                  paths[2].download_ms / (bytes / mem / 1e6),
                  mem / paths[2].read_alloc_gbps);
    if (tcp > 0 && paths[0].error.empty())
      std::printf("  grpc-stream upload / TCP: %.0f%%\n", 100 * paths[0].upload_gbps / tcp);
    if (paths[1].error.empty())
      std::printf("  shm upload / memcpy:      %.0f%%\n", 100 * paths[1].upload_gbps / mem);
    if (rt.error.empty())
      std::printf(
          "round trip (mean of %d): tiny Add evaluated %.1f us, gRPC echo %.1f us (%.2fx)\n",
          options.small_iterations, rt.add_us, rt.echo_us, rt.add_us / rt.echo_us);
    if (rt.error.empty()) {
      std::printf("  CPU time per call in this process: tiny Add %.1f us, echo %.1f us\n",
                  rt.add_cpu_us, rt.echo_cpu_us);
      std::string phases;
      for (const auto& [name, us] : rt.add_phases)
        phases += fmt::format("{}{} {:.1f}", phases.empty() ? "" : ", ", name, us);
      std::printf("  tiny Add's phases (medians, us): %s\n", phases.c_str());
    }
    else
      std::printf("round trip: %s\n", rt.error.c_str());
  }
  bool ok = rt.error.empty() && paths[0].error.empty();
  return ok ? kExitOk : kExitFailure;
}

}  // namespace

std::function<int()> add_bench_transfer_command(CLI::App& bench) {
  auto options = std::make_shared<TransferOptions>();
  auto* cmd = bench.add_subcommand(
      "transfer",
      "Client<->broker transfer speed per path (gRPC stream, shared memory), small-op round "
      "trip vs a bare gRPC echo, loopback TCP and memcpy");
  cmd->add_option("--address", options->address,
                  "Broker to measure (default TENSORD_ADDRESS, else one started in this process)");
  accept_size(cmd->add_option("--size", options->size, "Bytes per transfer (default 256 MiB)"));
  accept_size(cmd->add_option("--chunk-bytes", options->chunk_bytes,
                  "gRPC stream message size, 4 KiB to 64 MiB (default: the client's, 2 MiB)"));
  cmd->add_option("--iterations", options->iterations,
                  "Rounds per figure (the median is kept; memcpy and TCP keep the best)")
      ->capture_default_str();
  cmd->add_option("--round-trips", options->small_iterations, "Round trips to average")
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "Print one JSON object");
  return [options] { return run_transfer(*options); };
}

}  // namespace tensord::cli
