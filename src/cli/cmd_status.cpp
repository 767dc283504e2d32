// `tensord status`: a broker's devices, sessions, throughput and recent errors in the
// terminal, like nvidia-smi. It asks the broker over gRPC (BrokerStatus: the JSON its HTTP
// /api/status serves too), so it needs no --http and opens no session.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "cli/broker_address.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "rpc/remote_client.h"

namespace tensord::cli {
namespace {

using nlohmann::json;

struct StatusOptions {
  std::string address;  // "" = TENSORD_ADDRESS
  bool watch = false;
  double interval = 1.0;
  int64_t count = 0;  // --watch: stop after this many screens (0: until interrupted)
  bool json = false;
  std::string tls_ca;
};

std::string bytes(double n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  double v = std::fabs(n);
  while (v >= 1024 && i < 4) {
    v /= 1024;
    ++i;
  }
  char buf[32];
  if (i == 0)
    std::snprintf(buf, sizeof buf, "%.0f %s", v, units[i]);
  else
    std::snprintf(buf, sizeof buf, "%.*f %s", v < 10 ? 2 : v < 100 ? 1 : 0, v, units[i]);
  return buf;
}

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string latency(const json& v) {
  if (!v.is_number()) return "-";
  const double ms = v.get<double>();
  if (ms < 0) return "-";
  if (ms < 1) return fixed(ms * 1000, 0) + " us";
  if (ms < 1000) return fixed(ms, ms < 10 ? 2 : 1) + " ms";
  return fixed(ms / 1000, 2) + " s";
}

std::string duration(double s) {
  if (s < 60) return fixed(s, 0) + " s";
  if (s < 3600) return fixed(s / 60, 1) + " min";
  return fixed(s / 3600, 1) + " h";
}

// Pads or cuts `s` to `w` columns (left aligned; right aligned with right=true).
std::string cell(const std::string& s, size_t w, bool right = false) {
  std::string t = s.size() > w ? s.substr(0, w - 1) + "~" : s;
  const std::string pad(w - t.size(), ' ');
  return right ? pad + t : t + pad;
}

std::string memory_bar(int64_t used, int64_t reserved, int64_t total, size_t width) {
  if (total <= 0) return std::string(width, ' ');
  const auto cells = [&](int64_t v) {
    return std::min<size_t>(width, static_cast<size_t>(std::llround(
                                       static_cast<double>(v) / static_cast<double>(total) * width)));
  };
  const size_t u = cells(used), r = std::max(u, cells(reserved));
  return std::string(u, '#') + std::string(r - u, '+') + std::string(width - r, '.');
}

template <class T>
T last_of(const json& column, T fallback) {
  if (!column.is_array() || column.empty() || column.back().is_null()) return fallback;
  return column.back().get<T>();
}

std::string render(const json& st) {
  std::ostringstream o;
  const auto& s = st.at("samples");
  const std::time_t now = static_cast<std::time_t>(st.value("now_unix_ms", int64_t{0}) / 1000);
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  o << "tensord " << st.value("version", "") << "   " << st.value("address", "") << "   up "
    << duration(st.value("uptime_s", 0.0)) << "   "
    << (st.value("ready", false) ? "ready" : "NOT READY (" + st.value("ready_reason", "") + ")")
    << "   " << when << "\n";
  if (!st.value("http_address", "").empty()) o << "status page: " << st.value("http_address", "") << "/\n";

  const std::string rule =
      "+----------+--------+--------------------------------------------+---------+---------+--------+----------+------+\n";
  o << rule
    << "| Device   | Kind   | Memory used / reserved / total             | Tensors |  Graphs |  Queue | Avg wait | Busy |\n"
    << rule;
  const auto& devices = st.at("devices");
  for (size_t i = 0; i < devices.size(); ++i) {
    const auto& d = devices[i];
    const int64_t used = d.value("memory_used_bytes", int64_t{0});
    const int64_t reserved = d.value("memory_reserved_bytes", int64_t{0});
    const int64_t total = d.value("memory_total_bytes", int64_t{0});
    const std::string mem = memory_bar(used, reserved, total, 12) + " " + bytes(static_cast<double>(used)) +
                            " / " + bytes(static_cast<double>(reserved)) + " / " +
                            bytes(static_cast<double>(total));
    const int64_t tasks = d.value("queue_tasks", int64_t{0});
    const double wait_ms = tasks ? d.value("queue_wait_s", 0.0) / static_cast<double>(tasks) * 1e3 : -1;
    std::string busy = "-";
    const auto& b = s.at("busy");
    if (b.is_array() && !b.empty() && b.back().is_array() && i < b.back().size())
      busy = fixed(b.back()[i].get<double>() * 100, 0) + "%";
    o << "| " << cell(d.value("name", ""), 8) << " | " << cell(d.value("kind", ""), 6) << " | "
      << cell(mem, 42) << " | " << cell(std::to_string(d.value("tensors", int64_t{0})), 7, true)
      << " | " << cell(std::to_string(d.value("graphs", int64_t{0})), 7, true) << " | "
      << cell(std::to_string(d.value("queue_depth", int64_t{0})), 6, true) << " | "
      << cell(wait_ms < 0 ? "-" : latency(wait_ms), 8, true) << " | " << cell(busy, 4, true)
      << " |\n";
    o << "|          | " << cell(d.value("model", "") + " (" + d.value("backend", "") + ")", 98)
      << " |\n";
  }
  o << rule;

  const auto& t = st.at("totals");
  o << "Now:    " << fixed(last_of(s.at("rpc_per_s"), 0.0), 1) << " calls/s, "
    << fixed(last_of(s.at("graphs_per_s"), 0.0), 1) << " graphs/s, "
    << fixed(last_of(s.at("errors_per_s"), 0.0), 1) << " errors/s; latency p50 "
    << latency(s.at("latency_p50_ms").empty() ? json() : s.at("latency_p50_ms").back()) << ", p99 "
    << latency(s.at("latency_p99_ms").empty() ? json() : s.at("latency_p99_ms").back()) << "; in "
    << bytes(last_of(s.at("bytes_in_per_s"), 0.0)) << "/s, out "
    << bytes(last_of(s.at("bytes_out_per_s"), 0.0)) << "/s\n";
  const auto& bm = t.at("bytes_moved");
  o << "Totals: " << t.value("rpcs", int64_t{0}) << " calls (" << t.value("rpc_errors", int64_t{0})
    << " errors), " << t.value("graphs", int64_t{0}) << " graphs, " << t.value("ops", int64_t{0})
    << " ops, " << t.value("compiles", int64_t{0}) << " compiles, "
    << t.value("cache_hits", int64_t{0}) << " cache hits, "
    << t.value("executables_cached", int64_t{0}) << " cached, "
    << t.value("models_loaded", int64_t{0}) << " models\n"
    << "Moved:  host->device " << bytes(bm.value("host_to_device", 0.0)) << ", device->host "
    << bytes(bm.value("device_to_host", 0.0)) << ", peer " << bytes(bm.value("peer", 0.0))
    << ", staged " << bytes(bm.value("staged", 0.0)) << ", shared memory in "
    << bytes(bm.value("shared_memory_in", 0.0)) << " / out "
    << bytes(bm.value("shared_memory_out", 0.0)) << "\n\n";

  const auto& sessions = st.at("sessions");
  o << "Sessions: " << sessions.value("open", int64_t{0}) << "\n";
  if (!sessions.at("list").empty()) {
    o << "  " << cell("Tenant", 16) << cell("Memory", 12, true) << cell("In flight", 11, true)
      << cell("Regions", 9, true) << cell("Age", 10, true) << cell("Idle", 10, true) << "\n";
    size_t shown = 0;
    for (const auto& x : sessions.at("list")) {
      if (++shown > 10) break;
      const std::string tenant = x.value("tenant", "");
      o << "  " << cell(tenant.empty() ? "(no token)" : tenant, 16)
        << cell(bytes(x.value("bytes", 0.0)), 12, true)
        << cell(std::to_string(x.value("in_flight", 0)), 11, true)
        << cell(std::to_string(x.value("regions", 0)), 9, true)
        << cell(duration(x.value("age_s", 0.0)), 10, true)
        << cell(duration(x.value("idle_s", 0.0)), 10, true) << "\n";
    }
  }
  o << "\nCalls by method:\n  " << cell("Method", 18) << cell("Calls", 10, true)
    << cell("Errors", 8, true) << cell("In flight", 10, true) << cell("Mean", 10, true)
    << cell("p50", 10, true) << cell("p99", 10, true) << "\n";
  for (const auto& m : st.at("methods")) {
    if (m.value("count", int64_t{0}) == 0 && m.value("in_flight", int64_t{0}) == 0) continue;
    o << "  " << cell(m.value("name", ""), 18) << cell(std::to_string(m.value("count", int64_t{0})), 10, true)
      << cell(std::to_string(m.value("errors", int64_t{0})), 8, true)
      << cell(std::to_string(m.value("in_flight", int64_t{0})), 10, true)
      << cell(latency(m.at("mean_ms")), 10, true) << cell(latency(m.at("p50_ms")), 10, true)
      << cell(latency(m.at("p99_ms")), 10, true) << "\n";
  }
  if (st.contains("models") && !st.at("models").empty()) {
    o << "\nModels:\n  " << cell("Name", 18) << cell("State", 13) << cell("Device", 10)
      << "Inputs -> outputs\n";
    auto shapes = [](const json& vs) {
      std::string out;
      for (const auto& v : vs) {
        std::string shape;
        for (const auto& d : v.at("shape"))
          shape += (shape.empty() ? "" : ",") +
                   (d.get<int64_t>() < 0 ? std::string("?") : std::to_string(d.get<int64_t>()));
        out += (out.empty() ? "" : ", ") + v.value("name", "") + " " + v.value("dtype", "") + "[" +
               shape + "]";
      }
      return out;
    };
    for (const auto& m : st.at("models")) {
      const bool ready = m.value("ready", false);
      o << "  " << cell(m.value("name", ""), 18) << cell(ready ? "ready" : "unavailable", 13)
        << cell(m.value("device", ""), 10);
      if (ready) {
        o << shapes(m.at("inputs")) << " -> " << shapes(m.at("outputs")) << "\n";
      } else {
        std::string why = m.value("reason", "");
        if (why.size() > 90) why = why.substr(0, 87) + "...";
        o << why << "\n";
      }
    }
  }
  const auto& errs = st.at("recent_errors");
  o << "\nRecent errors: " << (errs.empty() ? "none" : "") << "\n";
  size_t shown = 0;
  for (auto it = errs.rbegin(); it != errs.rend() && shown < 5; ++it, ++shown) {
    const std::time_t at = static_cast<std::time_t>(it->value("unix_ms", int64_t{0}) / 1000);
    char hms[16];
    std::strftime(hms, sizeof hms, "%H:%M:%S", std::localtime(&at));
    std::string msg = it->value("message", "");
    if (msg.size() > 90) msg = msg.substr(0, 87) + "...";
    o << "  " << hms << "  " << it->value("method", "") << "  " << it->value("code", "") << "  "
      << msg << "\n";
  }
  return o.str();
}

int run_status(StatusOptions o) {
  o.address = broker_address(o.address, "status");
  if (o.address.empty()) return kExitUsage;
  if (!(o.interval > 0) || !std::isfinite(o.interval)) {
    std::cerr << "tensord: --interval must be > 0 seconds\n";
    return kExitUsage;
  }
  if (!o.tls_ca.empty()) setenv("TENSORD_TLS_CA", o.tls_ca.c_str(), 1);
  const bool tty = isatty(STDOUT_FILENO);
  for (int64_t n = 1;; ++n) {
    auto raw = rpc::broker_status(o.address, {}, 10);
    if (!raw.ok()) {
      std::cerr << "tensord: " << raw.status().to_string() << "\n";
      if (!o.watch) return raw.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
    } else {
      json st = json::parse(*raw, nullptr, /*allow_exceptions=*/false);
      if (st.is_discarded() || !st.is_object()) {
        std::cerr << "tensord: the broker's status is not JSON\n";
        return kExitFailure;
      }
      std::string text;
      if (o.json) {
        text = st.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
      } else {
        try {
          text = render(st);
        } catch (const json::exception& e) {
          std::cerr << "tensord: unexpected status from the broker (" << e.what() << ")\n";
          return kExitFailure;
        }
      }
      if (o.watch && tty) std::cout << "\033[H\033[2J";  // home, clear: redraw in place
      std::cout << text << std::flush;
    }
    if (!o.watch || (o.count > 0 && n >= o.count)) break;
    std::this_thread::sleep_for(std::chrono::duration<double>(o.interval));
  }
  return kExitOk;
}

}  // namespace

StatusCommand add_status_command(CLI::App& app) {
  auto options = std::make_shared<StatusOptions>();
  auto* cmd = app.add_subcommand(
      "status", "A broker's devices, memory, sessions, throughput and errors (like nvidia-smi)");
  cmd->add_option("--address", options->address,
                  "The broker (HOST:PORT or unix:PATH; default TENSORD_ADDRESS)");
  cmd->add_flag("--watch,-w", options->watch, "Redraw every --interval seconds until Ctrl-C");
  cmd->add_option("--interval", options->interval, "Seconds between redraws with --watch (default 1)");
  cmd->add_option("--count", options->count,
                  "With --watch: stop after this many redraws (default 0: until Ctrl-C)");
  cmd->add_flag("--json", options->json, "Print the status as JSON (the same as HTTP /api/status)");
  cmd->add_option("--tls-ca", options->tls_ca, "Speak TLS to the broker, verified with this PEM CA");
  return {[cmd] { return cmd->parsed(); }, [options] { return run_status(*options); }};
}

}  // namespace tensord::cli
