// The broker a client command (`tensord status`, `models`, `bench load`) talks to.
#pragma once

#include <cstdlib>
#include <iostream>
#include <string>

namespace tensord::cli {

// `address` (its --address), else TENSORD_ADDRESS; "" after printing why to stderr when
// neither names a broker (the command then exits with kExitUsage).
inline std::string broker_address(const std::string& address, const std::string& command) {
  if (!address.empty()) return address;
  if (const char* env = std::getenv("TENSORD_ADDRESS"); env && *env) return env;
  std::cerr << "tensord: " << command
            << " needs a broker: --address HOST:PORT or unix:PATH (or TENSORD_ADDRESS)\n";
  return {};
}

}  // namespace tensord::cli
