// The engine's caching allocator, one per device, for every backend: device allocations are
// kept when freed and handed out again, so a model run does not pay the device's allocation
// (page faults on the cpu, cudaMalloc/clCreateBuffer on GPUs) every time.
//   - Small blocks (<= 64 KiB) are sub-allocated out of 1 MiB slabs, one size class (powers
//     of two from 64 bytes) per slab: a Buffer is then (slab allocation, offset). A slab whose
//     blocks are all free goes back to the device when more than 8 MiB of slabs are idle.
//   - Larger blocks are rounded to 4 KiB and cached by size, up to `max_cached` bytes.
//   - A device allocation that fails frees every cached block and tries again.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"

namespace tensord {

class DevicePool {
 public:
  struct Block {
    void* base = nullptr;  // the device allocation
    size_t offset = 0;     // where this block starts in it
    size_t size = 0;       // the block's (rounded) size
    int slab = -1;         // small blocks: the slab's index; -1: a whole allocation
  };

  explicit DevicePool(Device* device, size_t max_cached = size_t{512} << 20);
  ~DevicePool();  // returns everything to the device (every block must be free by then)
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  Result<Block> allocate(size_t bytes);
  void free(const Block& block);
  // Bytes held from the device: blocks in use, cached blocks and slabs.
  int64_t reserved() const;
  // Bytes of blocks handed out and not yet freed (rounded sizes).
  int64_t in_use() const;
  // Returns every cached block and idle slab to the device.
  void trim();

  static constexpr size_t kSmallMax = 64 << 10;
  static constexpr size_t kSlabBytes = 1 << 20;

 private:
  struct Slab {
    void* base = nullptr;
    size_t block_size = 0;
    int used = 0;
    std::vector<size_t> free_offsets;
    bool live = false;
  };
  static int size_class(size_t bytes);  // small classes: 0 = 64 B, 1 = 128 B, ...
  Result<void*> device_allocate(size_t bytes);  // with one retry after trimming
  void trim_locked();

  Device* device_;
  size_t max_cached_;
  mutable std::mutex mu_;
  std::vector<Slab> slabs_;
  std::vector<std::vector<int>> slabs_with_room_;  // per class: slab indices with free blocks
  std::vector<int> dead_slabs_;                    // reusable slab indices
  std::unordered_map<size_t, std::vector<void*>> cached_;  // large blocks by rounded size
  size_t cached_bytes_ = 0;
  size_t idle_slab_bytes_ = 0;
  int64_t reserved_ = 0;
  int64_t in_use_ = 0;
};

}  // namespace tensord
