#include "engine/memory_pool.h"

#include <algorithm>
#include <vector>

#include "core/errors.h"

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
  for (auto& [key, p] : pieces_) {
    if (whole_segment(p)) device_->free(p->segment, p->size);
    delete p;
  }
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
  if (rounded < want) return errors::ResourceExhausted("{} bytes cannot be allocated", want);
  peak_in_use_ = std::max(peak_in_use_, in_use_ + static_cast<int64_t>(rounded));
  Piece probe;
  probe.size = rounded;
  probe.freed_at = UINT64_MAX;  // before every piece of its size
  auto fit = free_pieces_.lower_bound(&probe);
  if (fit != free_pieces_.end()) {
    Piece* p = take_piece(*fit, rounded);
    return Block{p->segment, p->offset, p->size, -1};
  }
  // No free piece holds it: whole free segments go back, the longest idle first, while the
  // pool would otherwise hold more than a quarter above the most bytes ever in use at once.
  const int64_t bound = peak_in_use_ + peak_in_use_ / 4;
  while (reserved_ + static_cast<int64_t>(rounded) > bound) {
    Piece* oldest = nullptr;
    for (Piece* p : free_pieces_)
      if (whole_segment(p) && (!oldest || p->freed_at < oldest->freed_at)) oldest = p;
    if (!oldest) break;
    release_segment(oldest);
  }
  TD_ASSIGN_OR_RETURN(void* base, device_allocate(rounded));
  reserved_ += static_cast<int64_t>(rounded);
  in_use_ += static_cast<int64_t>(rounded);
  auto* p = new Piece{base, 0, rounded, false, 0, nullptr, nullptr};
  pieces_[{base, 0}] = p;
  return Block{base, 0, rounded, -1};
}

DevicePool::Piece* DevicePool::take_piece(Piece* p, size_t size) {
  free_pieces_.erase(p);
  cached_bytes_ -= p->size;
  // Split off the rest when a large request could use it; a smaller rest stays with it.
  if (p->size - size > kSmallMax) {
    auto* rest = new Piece{p->segment, p->offset + size, p->size - size, true, p->freed_at, p,
                           p->next};
    if (p->next) p->next->prev = rest;
    p->next = rest;
    p->size = size;
    pieces_[{rest->segment, rest->offset}] = rest;
    free_pieces_.insert(rest);
    cached_bytes_ += rest->size;
  }
  p->free = false;
  in_use_ += static_cast<int64_t>(p->size);
  return p;
}

void DevicePool::release_segment(Piece* p) {
  free_pieces_.erase(p);
  pieces_.erase({p->segment, p->offset});
  cached_bytes_ -= p->size;
  reserved_ -= static_cast<int64_t>(p->size);
  device_->free(p->segment, p->size);
  delete p;
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
  auto found = pieces_.find({b.base, b.offset});
  if (found == pieces_.end()) return;  // not this pool's (never happens)
  Piece* p = found->second;
  p->free = true;
  p->freed_at = ++free_count_;
  // Merge with free neighbours.
  for (Piece* n : {p->next, p->prev}) {
    if (!n || !n->free) continue;
    free_pieces_.erase(n);
    cached_bytes_ -= n->size;
    Piece* first = n == p->prev ? n : p;
    Piece* second = n == p->prev ? p : n;
    first->size += second->size;
    first->next = second->next;
    if (second->next) second->next->prev = first;
    pieces_.erase({second->segment, second->offset});
    first->freed_at = free_count_;
    first->free = true;
    delete second;
    p = first;
  }
  free_pieces_.insert(p);
  cached_bytes_ += p->size;
  if (whole_segment(p) && cached_bytes_ > max_cached_) release_segment(p);
}

void DevicePool::trim_locked() {
  std::vector<Piece*> whole;
  for (Piece* p : free_pieces_)
    if (whole_segment(p)) whole.push_back(p);
  for (Piece* p : whole) release_segment(p);
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
