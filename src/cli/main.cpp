// The `tensord` command.
//
// Exit status (scripts may rely on it): 0 success; 1 the operation failed (a device or
// runtime error, message on stderr); 2 bad usage or bad input (unknown flag, unreadable file).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "tensord/client.h"
#include "tensord/version.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

std::string human_bytes(int64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

int cmd_devices(bool json) {
  auto engine = tensord::Engine::shared();
  if (!engine.ok()) {
    std::cerr << "tensord: " << engine.status().to_string() << "\n";
    return kExitFailure;
  }
  const auto devices = (*engine)->devices();
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& d : devices) {
      out.push_back({{"name", d.name},
                     {"kind", d.kind},
                     {"index", d.index},
                     {"vendor", d.vendor},
                     {"model", d.model},
                     {"memory_bytes", d.memory_bytes},
                     {"memory_in_use_bytes", d.memory_in_use},
                     {"backend", d.backend},
                     {"backend_version", d.backend_version},
                     {"threads", d.threads}});
    }
    std::cout << out.dump(2) << "\n";
  } else {
    for (const auto& d : devices) {
      std::cout << d.name << "  " << d.model << " (" << d.vendor << ")  memory "
                << human_bytes(d.memory_bytes);
      if (d.threads) std::cout << "  threads " << d.threads;
      std::cout << "  backend " << d.backend_version << "\n";
    }
  }
  if (devices.empty()) {
    const auto& gone = (*engine)->filtered_out();
    std::string names;
    for (const auto& n : gone) names += (names.empty() ? "" : ", ") + n;
    std::cerr << "tensord: no devices available: TENSORD_DEVICES='" << (*engine)->device_filter()
              << "' filters out every device" << (names.empty() ? "" : " (" + names + ")") << "\n";
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tensord: a tensor compute broker (devices, ONNX models, NumPy-like API)"};
  app.set_version_flag("--version", std::string("tensord ") + tensord::kVersion +
                                        " (protocol " + std::to_string(tensord::kProtocolVersion) + ")");
  app.require_subcommand(1);

  auto* devices = app.add_subcommand("devices", "List the devices tensord may use");
  bool json = false;
  devices->add_flag("--json", json, "Print one JSON array");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  if (devices->parsed()) return cmd_devices(json);
  return kExitUsage;
}
