// A session's arena: shared memory the broker places a shared-memory client's large values in
// (Engine::set_session_memory), which the client maps read-only, so reading a computed value
// is one copy (out of the mapping into the caller's memory) instead of two.
//
// Safety: the memfd is sealed once the broker has mapped it (F_SEAL_FUTURE_WRITE, SHRINK, GROW,
// SEAL): no process can write it through a new mapping or write(), punch holes in it, or resize
// it — whatever the client does with the descriptor (even re-opened read-write through /proc),
// the broker's mapping keeps its pages and bytes, and no index or shape the broker computed can
// change under a kernel. It holds this session's values only (the engine asks it for nothing
// else), so the client sees nothing it could not read anyway. Pages stay with the arena once
// touched (the seals forbid punching holes), until the session ends and the client unmaps it:
// its size is bounded (RpcServerOptions::shm_arena_bytes, and the session's memory limit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "engine/engine.h"

namespace tensord::rpc {

class ShmArena final : public SessionMemory {
 public:
  // Blocks are page-aligned and rounded to pages; allocations below min_bytes go to the pool.
  static Result<std::shared_ptr<ShmArena>> create(size_t bytes, size_t min_bytes);
  ~ShmArena() override;
  ShmArena(const ShmArena&) = delete;
  ShmArena& operator=(const ShmArena&) = delete;

  // A read-only descriptor of the sealed memfd for the client (the caller closes it).
  Result<int> client_fd() const;
  size_t size() const { return size_; }
  // Where [p, p + n) lies in the arena, or -1 when it is not wholly inside.
  int64_t offset_of(const void* p, size_t n) const;
  // Bytes of blocks handed out (rounded), for tests.
  size_t in_use() const;

  size_t min_bytes() const override { return min_bytes_; }
  void* allocate(size_t bytes) override;
  void release(void* p, size_t bytes) override;

 private:
  ShmArena(int fd, unsigned char* base, size_t size, size_t min_bytes)
      : fd_(fd), base_(base), size_(size), min_bytes_(min_bytes) {}
  int fd_;
  unsigned char* base_;
  size_t size_;
  size_t min_bytes_;
  mutable std::mutex mu_;
  std::map<size_t, size_t> free_;  // offset -> bytes, coalesced
  size_t in_use_ = 0;
};

}  // namespace tensord::rpc
