// The one file where the core meets the backends: every backend compiled into this build.
#include "backends/cpu/cpu_backend.h"
#include "backend/backend.h"

namespace tensord {

std::vector<std::unique_ptr<Backend>> create_backends() {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(cpu::create_cpu_backend());
  return backends;
}

}  // namespace tensord
