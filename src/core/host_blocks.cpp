#include "core/host_blocks.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "core/env.h"

namespace tensord {
namespace {

// From this size on a block is mapped on its own and recycled; below it, the allocator's.
constexpr size_t kLargeBytes = size_t{1} << 20;
// Large blocks are whole 2 MiB pieces, so that the kernel can back them with huge pages
// (transparent huge pages on request: one fault per 2 MiB instead of per 4 KiB).
constexpr size_t kHugeBytes = size_t{2} << 20;

size_t default_cap() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const size_t phys = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page)
                                            : size_t{8} << 30;
  return std::min(size_t{1} << 30, phys / 8);
}

size_t cap_from_env() {
  const char* env = std::getenv("TENSORD_HOST_CACHE_MIB");
  if (!env || !*env) return default_cap();
  auto v = parse_count_env("TENSORD_HOST_CACHE_MIB", 0, 1 << 20);
  if (!v.ok()) {
    std::fprintf(stderr, "tensord: %s; using the default (%zu MiB)\n",
                 v.status().message().c_str(), default_cap() >> 20);
    return default_cap();
  }
  return static_cast<size_t>(*v) << 20;
}

class BlockCache {
 public:
  BlockCache() : cap_(cap_from_env()) {}

  void* take(size_t mapped) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      // The smallest idle block that fits without wasting more than a quarter of it.
      size_t best = idle_.size();
      for (size_t i = 0; i < idle_.size(); ++i)
        if (idle_[i].size >= mapped && idle_[i].size <= mapped + mapped / 4 &&
            (best == idle_.size() || idle_[i].size < idle_[best].size))
          best = i;
      if (best != idle_.size()) {
        void* p = idle_[best].p;
        idle_bytes_ -= idle_[best].size;
        idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(best));
        reused_++;
        return p;
      }
      mapped_++;
    }
    void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      // Idle blocks may be what is missing: give them back and try once more.
      trim(0);
      p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(p, mapped, MADV_HUGEPAGE);
#endif
    return p;
  }

  void give(void* p, size_t mapped) {
    if (mapped > cap_) {
      munmap(p, mapped);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      idle_.push_back({p, mapped, std::chrono::steady_clock::now()});
      idle_bytes_ += mapped;
    }
    trim(cap_);
  }

  // Unmaps the oldest idle blocks until at most `keep` bytes are idle, and those idle since
  // before `cutoff`.
  void trim(size_t keep, std::chrono::steady_clock::time_point cutoff = {}) {
    std::vector<Block> drop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!idle_.empty() && (idle_bytes_ > keep || idle_.front().since < cutoff)) {
        drop.push_back(idle_.front());
        idle_bytes_ -= idle_.front().size;
        idle_.erase(idle_.begin());
      }
    }
    for (const Block& b : drop) munmap(b.p, b.size);
  }

  HostBlockStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return {static_cast<int64_t>(idle_bytes_), static_cast<int64_t>(cap_), reused_, mapped_};
  }

 private:
  struct Block {
    void* p;
    size_t size;
    std::chrono::steady_clock::time_point since;  // idle since
  };
  std::mutex mu_;
  std::vector<Block> idle_;  // oldest first
  size_t idle_bytes_ = 0;
  const size_t cap_;
  int64_t reused_ = 0, mapped_ = 0;
};

BlockCache& cache() {
  // Never destroyed: tensors may outlive static destruction (a global holding one).
  static BlockCache* c = new BlockCache();
  return *c;
}

}  // namespace

std::shared_ptr<void> allocate_host_bytes(size_t n) {
  if (n == 0) return nullptr;
  if (n < kLargeBytes) {
    void* p = ::operator new(n, std::align_val_t{64});
    return std::shared_ptr<void>(p, [](void* q) { ::operator delete(q, std::align_val_t{64}); });
  }
  if (n > SIZE_MAX - kHugeBytes) throw std::bad_alloc();
  const size_t mapped = (n + kHugeBytes - 1) / kHugeBytes * kHugeBytes;
  void* p = cache().take(mapped);
  return std::shared_ptr<void>(p, [mapped](void* q) { cache().give(q, mapped); });
}

HostBlockStats host_block_stats() { return cache().stats(); }

void trim_idle_host_blocks(std::chrono::steady_clock::duration idle_for) {
  cache().trim(SIZE_MAX, std::chrono::steady_clock::now() - idle_for);
}

}  // namespace tensord
