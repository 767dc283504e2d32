// The cpu backend: always present. Host memory, reference kernels for every op (the oracle of
// every other device), oneDNN kernels ahead of them in each op's kernel list, and a region
// compiler (oneDNN regions, element-wise programs).
#pragma once

#include <memory>

#include "backend/backend.h"

namespace tensord::cpu {

// Devices: cpu:0 .. cpu:N-1 with N from TENSORD_CPU_DEVICES (default 1). More than one host
// device is useful to exercise placement and copies on machines without accelerators (as
// XLA's --xla_force_host_platform_device_count).
std::unique_ptr<Backend> create_cpu_backend();

}  // namespace tensord::cpu
