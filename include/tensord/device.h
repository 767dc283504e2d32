// What a client can learn about a device.
#pragma once

#include <cstdint>
#include <string>

namespace tensord {

struct DeviceInfo {
  std::string name;     // "cpu:0", "opencl:1", "cuda:0"; in a cluster "n2/cuda:0"
  std::string kind;     // "cpu", "opencl", "cuda"
  int index = 0;        // index within its kind
  std::string vendor;   // "GenuineIntel", "NVIDIA Corporation", ...
  std::string model;    // "AMD EPYC 7B13", "NVIDIA H200", ...
  int64_t memory_bytes = 0;  // total memory the engine may allocate on it
  int64_t memory_in_use = 0;  // bytes currently held by tensors on it
  // Bytes held by the constants of compiled graphs the engine keeps cached (not in
  // memory_in_use; part of memory_reserved): they stay after the sessions that ran them close.
  int64_t memory_cached = 0;
  int64_t memory_peak = 0;    // the most bytes held at once since the engine started
  // Bytes the engine's caching allocator holds from the device (in use + cached for reuse).
  int64_t memory_reserved = 0;
  std::string backend;  // backend name, e.g. "cpu-reference"
  std::string backend_version;
  int threads = 0;      // compute threads (cpu), 0 if not meaningful
  // Accelerators (opencl, cuda): the driver's version, compute units, float16 support.
  std::string driver_version;
  int compute_units = 0;
  bool fp16 = false;
};

}  // namespace tensord
