#include "engine/memory_pool.h"

#include <algorithm>

namespace tensord {
namespace {
constexpr size_t kMinSmall = 64;
constexpr size_t kLargeUnit = 4096;
constexpr size_t kMaxIdleSlabBytes = 8 << 20;
}  // namespace

DevicePool::DevicePool(Device* device, size_t max_cached)
    : device_(device), max_cached_(max_cached), slabs_with_room_(size_class(kSmallMax) + 1) {}

DevicePool::~DevicePool() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, blocks] : cached_)
    for (void* p : blocks) device_->free(p, size);
  for (auto& s : slabs_)
    if (s.live) device_->free(s.base, kSlabBytes);
}

int DevicePool::size_class(size_t bytes) {
  int c = 0;
  size_t s = kMinSmall;
  while (s < bytes) {
    s <<= 1;
    ++c;
  }
  return c;
}

Result<void*> DevicePool::device_allocate(size_t bytes) {
  auto p = device_->allocate(bytes);
  if (p.ok()) return p;
  trim_locked();  // the cache may be what fills the device
  return device_->allocate(bytes);
}

Result<DevicePool::Block> DevicePool::allocate(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t want = std::max<size_t>(bytes, 1);
  if (want <= kSmallMax) {
    const int c = size_class(want);
    const size_t block = kMinSmall << c;
    auto& room = slabs_with_room_[static_cast<size_t>(c)];
    if (room.empty()) {
      TD_ASSIGN_OR_RETURN(void* base, device_allocate(kSlabBytes));
      int index;
      if (!dead_slabs_.empty()) {
        index = dead_slabs_.back();
        dead_slabs_.pop_back();
      } else {
        index = static_cast<int>(slabs_.size());
        slabs_.emplace_back();
      }
      Slab& s = slabs_[static_cast<size_t>(index)];
      s.base = base;
      s.block_size = block;
      s.used = 0;
      s.live = true;
      s.free_offsets.clear();
      for (size_t off = kSlabBytes; off >= block; off -= block) s.free_offsets.push_back(off - block);
      reserved_ += static_cast<int64_t>(kSlabBytes);
      idle_slab_bytes_ += kSlabBytes;
      room.push_back(index);
    }
    const int index = room.back();
    Slab& s = slabs_[static_cast<size_t>(index)];
    const size_t off = s.free_offsets.back();
    s.free_offsets.pop_back();
    if (s.used++ == 0) idle_slab_bytes_ -= kSlabBytes;
    if (s.free_offsets.empty()) room.pop_back();
    in_use_ += static_cast<int64_t>(block);
    return Block{s.base, off, block, index};
  }
  const size_t rounded = (want + kLargeUnit - 1) / kLargeUnit * kLargeUnit;
  auto it = cached_.find(rounded);
  if (it != cached_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= rounded;
    in_use_ += static_cast<int64_t>(rounded);
    return Block{p, 0, rounded, -1};
  }
  TD_ASSIGN_OR_RETURN(void* p, device_allocate(rounded));
  reserved_ += static_cast<int64_t>(rounded);
  in_use_ += static_cast<int64_t>(rounded);
  return Block{p, 0, rounded, -1};
}

void DevicePool::free(const Block& b) {
  std::lock_guard<std::mutex> lock(mu_);
  in_use_ -= static_cast<int64_t>(b.size);
  if (b.slab >= 0) {
    Slab& s = slabs_[static_cast<size_t>(b.slab)];
    if (s.free_offsets.empty()) slabs_with_room_[static_cast<size_t>(size_class(s.block_size))].push_back(b.slab);
    s.free_offsets.push_back(b.offset);
    if (--s.used == 0) {
      idle_slab_bytes_ += kSlabBytes;
      if (idle_slab_bytes_ > kMaxIdleSlabBytes) {  // give this one back
        auto& room = slabs_with_room_[static_cast<size_t>(size_class(s.block_size))];
        room.erase(std::remove(room.begin(), room.end(), b.slab), room.end());
        device_->free(s.base, kSlabBytes);
        s.live = false;
        s.free_offsets.clear();
        dead_slabs_.push_back(b.slab);
        idle_slab_bytes_ -= kSlabBytes;
        reserved_ -= static_cast<int64_t>(kSlabBytes);
      }
    }
    return;
  }
  if (cached_bytes_ + b.size <= max_cached_) {
    cached_[b.size].push_back(b.base);
    cached_bytes_ += b.size;
    return;
  }
  device_->free(b.base, b.size);
  reserved_ -= static_cast<int64_t>(b.size);
}

void DevicePool::trim_locked() {
  for (auto& [size, blocks] : cached_) {
    for (void* p : blocks) device_->free(p, size);
    reserved_ -= static_cast<int64_t>(size * blocks.size());
    blocks.clear();
  }
  cached_bytes_ = 0;
  for (size_t i = 0; i < slabs_.size(); ++i) {
    Slab& s = slabs_[i];
    if (!s.live || s.used != 0) continue;
    auto& room = slabs_with_room_[static_cast<size_t>(size_class(s.block_size))];
    room.erase(std::remove(room.begin(), room.end(), static_cast<int>(i)), room.end());
    device_->free(s.base, kSlabBytes);
    s.live = false;
    s.free_offsets.clear();
    dead_slabs_.push_back(static_cast<int>(i));
    reserved_ -= static_cast<int64_t>(kSlabBytes);
  }
  idle_slab_bytes_ = 0;
}

void DevicePool::trim() {
  std::lock_guard<std::mutex> lock(mu_);
  trim_locked();
}

int64_t DevicePool::reserved() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reserved_;
}

int64_t DevicePool::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

}  // namespace tensord
