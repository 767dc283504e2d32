// Host memory for tensors' bytes: 64-byte aligned, not initialised. Large blocks are recycled
// through a small process-wide cache so that a loop of reads of the same size (read(), a
// model's outputs copied out each run) does not map and page-fault fresh memory every time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace tensord {

// `n` bytes (nullptr for 0). Throws std::bad_alloc when the memory cannot be had.
std::shared_ptr<void> allocate_host_bytes(size_t n);

struct HostBlockStats {
  int64_t idle_bytes = 0;     // held by the cache for the next allocation of about that size
  int64_t cap_bytes = 0;      // most it holds (TENSORD_HOST_CACHE_MIB)
  int64_t reused = 0;         // large allocations served from the cache
  int64_t mapped = 0;         // large allocations that mapped fresh memory
};
HostBlockStats host_block_stats();

// Unmaps the cached blocks idle for longer than `idle_for` (a broker calls it from time to
// time, so that memory a burst of transfers used goes back to the system).
void trim_idle_host_blocks(std::chrono::steady_clock::duration idle_for);

}  // namespace tensord
