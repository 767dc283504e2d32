// The engine's caching allocator, one per device, for every backend: device allocations are
// kept when freed and handed out again, so a model run does not pay the device's allocation
// (page faults on the cpu, cudaMalloc/clCreateBuffer on GPUs) every time.
//   - Small blocks (<= 64 KiB) are sub-allocated out of 1 MiB slabs, one size class (powers
//     of two from 64 bytes) per slab: a Buffer is then (slab allocation, offset). A slab whose
//     blocks are all free goes back to the device when more than 8 MiB of slabs are idle.
//   - Larger blocks are rounded to 4 KiB and carved out of segments (device allocations) the
//     way PyTorch's and ONNX Runtime's caching allocators do: a request takes the smallest
//     free piece that holds it and splits off the rest; a freed piece merges with free
//     neighbours of its segment. A request no piece holds gets a segment of its own size,
//     after whole free segments went back (least recently freed first) while the pool would
//     otherwise hold more than a quarter above the most bytes ever in use at once. Kept by
//     exact size instead, blocks of every size a model asked for stayed: S3D held 287 MB
//     for 112 MB in use at most. Free bytes above `max_cached` go back when a segment empties.
//   - A device allocation that fails frees every cached block and tries again.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <utility>
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
  // A piece of a segment, free or handed out; pieces of a segment are linked in address order.
  struct Piece {
    void* segment = nullptr;  // the device allocation
    size_t offset = 0;
    size_t size = 0;
    bool free = false;
    uint64_t freed_at = 0;  // free_count_ when it was last freed
    Piece* prev = nullptr;
    Piece* next = nullptr;
  };
  Piece* take_piece(Piece* p, size_t size);  // hands out the start of free piece p
  void release_segment(Piece* p);            // p: a free piece spanning its segment
  static bool whole_segment(const Piece* p) { return !p->prev && !p->next; }

  // Free pieces by size, the most recently freed first among equal sizes (its bytes are the
  // likeliest to be in cache). A piece's size and freed_at change only while it is not here.
  struct ByFit {
    bool operator()(const Piece* a, const Piece* b) const {
      if (a->size != b->size) return a->size < b->size;
      if (a->freed_at != b->freed_at) return a->freed_at > b->freed_at;
      return a < b;
    }
  };
  std::set<Piece*, ByFit> free_pieces_;
  std::map<std::pair<void*, size_t>, Piece*> pieces_;         // every piece by (segment, offset)
  uint64_t free_count_ = 0;
  int64_t peak_in_use_ = 0;
  size_t cached_bytes_ = 0;  // free pieces' bytes
  size_t idle_slab_bytes_ = 0;
  int64_t reserved_ = 0;
  int64_t in_use_ = 0;
};

}  // namespace tensord
