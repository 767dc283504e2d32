#include "rpc/shm_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <string>

#include "core/errors.h"

namespace tensord::rpc {

namespace {
constexpr size_t kPage = 4096;
size_t round_up(size_t n) { return (n + kPage - 1) / kPage * kPage; }
}  // namespace

Result<std::shared_ptr<ShmArena>> ShmArena::create(size_t bytes, size_t min_bytes) {
  bytes = round_up(bytes);
  if (bytes == 0) return errors::InvalidArgument("arena: no size");
  const int fd = memfd_create("tensord-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return errors::Unavailable("arena: memfd_create: {}", std::strerror(errno));
  auto fail = [fd](const char* what) {
    const int e = errno;
    close(fd);
    return errors::Unavailable("arena: {}: {}", what, std::strerror(e));
  };
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) return fail("ftruncate");
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (base == MAP_FAILED) return fail("mmap");
  // After the broker's own writable mapping exists: nobody can write through a new one.
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int e = errno;
    munmap(base, bytes);
    close(fd);
    return errors::Unavailable("arena: sealing the memfd: {}", std::strerror(e));
  }
  std::shared_ptr<ShmArena> a(
      new ShmArena(fd, static_cast<unsigned char*>(base), bytes, std::max(min_bytes, kPage)));
  a->free_.emplace(0, bytes);
  return a;
}

ShmArena::~ShmArena() {
  munmap(base_, size_);
  close(fd_);
}

Result<int> ShmArena::client_fd() const {
  // A new open file description, read-only (writes through it are refused twice over: by the
  // access mode and by the seals).
  const std::string path = "/proc/self/fd/" + std::to_string(fd_);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errors::Unavailable("arena: re-opening {} read-only: {}", path, std::strerror(errno));
  return fd;
}

int64_t ShmArena::offset_of(const void* p, size_t n) const {
  const auto* q = static_cast<const unsigned char*>(p);
  if (q < base_ || q > base_ + size_ || n > static_cast<size_t>(base_ + size_ - q)) return -1;
  return q - base_;
}

size_t ShmArena::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

void* ShmArena::allocate(size_t bytes) {
  if (bytes == 0 || bytes > size_) return nullptr;
  const size_t n = round_up(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  // Best fit: the smallest free range that holds it (keeps large ranges whole, and reuses the
  // pages of a same-sized block freed before, which are already touched).
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it)
    if (it->second >= n && (best == free_.end() || it->second < best->second)) best = it;
  if (best == free_.end()) return nullptr;
  const size_t off = best->first, have = best->second;
  free_.erase(best);
  if (have > n) free_.emplace(off + n, have - n);
  in_use_ += n;
  return base_ + off;
}

void ShmArena::release(void* p, size_t bytes) {
  const size_t n = round_up(bytes);
  size_t off = static_cast<size_t>(static_cast<unsigned char*>(p) - base_);
  size_t len = n;
  std::lock_guard<std::mutex> lock(mu_);
  in_use_ -= n;
  auto next = free_.lower_bound(off);
  if (next != free_.end() && off + len == next->first) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      off = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(off, len);
}

}  // namespace tensord::rpc
