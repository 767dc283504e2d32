// The engine's CPU thread pool (src/backends/cpu/thread_pool.h): its parallel_for and regions,
// the OpenMP entry points oneDNN reaches it through. (oneDNN on the pool, and the process's
// thread count across compiles and runs on many threads: test_graph_compiler.cpp.)
#include "backends/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>


extern "C" {
void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags);
void GOMP_barrier();
int omp_get_thread_num();
int omp_get_num_threads();
int omp_in_parallel();
int omp_get_max_threads();
}

namespace tensord {
namespace {

using cpu::ThreadPool;

int threads_of_this_process() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task"))
    n += !e.path().empty();
  return n;
}

TEST(ThreadPool, ParallelForRunsEveryIndexOnce) {
  for (int64_t n : {1, 2, 3, 7, 64, 1000, 100003}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    ThreadPool::get().parallel_for(n, 1, [&](int64_t begin, int64_t end) {
      ASSERT_LE(0, begin);
      ASSERT_LT(begin, end);
      ASSERT_LE(end, n);
      for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
  }
}

TEST(ThreadPool, NestedWorkAndTeamLimitOneRunInline) {
  const std::thread::id self = std::this_thread::get_id();
  {
    cpu::TeamLimit one(1);
    EXPECT_EQ(cpu::threads_available(), 1);
    EXPECT_EQ(omp_get_max_threads(), 1);
    ThreadPool::get().parallel_for(1000, 1, [&](int64_t, int64_t) {
      EXPECT_EQ(std::this_thread::get_id(), self);
    });
  }
  EXPECT_EQ(cpu::threads_available(), ThreadPool::team_size());
  std::atomic<int> inner_calls{0};
  ThreadPool::get().parallel_for(64, 1, [&](int64_t, int64_t) {
    const std::thread::id outer = std::this_thread::get_id();
    EXPECT_EQ(cpu::threads_available(), 1);
    ThreadPool::get().parallel_for(1000, 1, [&](int64_t begin, int64_t end) {
      EXPECT_EQ(std::this_thread::get_id(), outer);  // nested: inline
      EXPECT_EQ(begin, 0);
      EXPECT_EQ(end, 1000);
      inner_calls.fetch_add(1);
    });
  });
  EXPECT_GE(inner_calls.load(), 1);
}

// What GCC's OpenMP code in oneDNN does: GOMP_parallel with a thread count, then the thread
// number and team size inside, barriers between phases.
struct PhaseData {
  int threads = 0;
  std::vector<std::atomic<int>>* marks = nullptr;  // [phase * threads + thread]
  std::atomic<int> bad{0};
};

void phases(void* p) {
  auto* d = static_cast<PhaseData*>(p);
  const int me = omp_get_thread_num(), n = omp_get_num_threads();
  if (n != d->threads || !omp_in_parallel()) d->bad.fetch_add(1);
  for (int phase = 0; phase < 3; ++phase) {
    (*d->marks)[static_cast<size_t>(phase * n + me)].store(1);
    GOMP_barrier();
    // After the barrier every thread's mark of this phase is there.
    for (int t = 0; t < n; ++t)
      if ((*d->marks)[static_cast<size_t>(phase * n + t)].load() != 1) d->bad.fetch_add(1);
    GOMP_barrier();
  }
}

TEST(ThreadPool, OpenMpRegionsGetTheirThreadsAndBarriersHold) {
  const int team = ThreadPool::team_size();
  for (int round = 0; round < 200; ++round) {
    PhaseData d;
    d.threads = team;
    std::vector<std::atomic<int>> marks(static_cast<size_t>(3 * team));
    d.marks = &marks;
    GOMP_parallel(phases, &d, static_cast<unsigned>(team), 0);
    ASSERT_EQ(d.bad.load(), 0) << "round " << round;
    EXPECT_FALSE(omp_in_parallel());
    EXPECT_EQ(omp_get_num_threads(), 1);
  }
}

// prewake() (a run is coming) wakes the workers until a few in a row are followed by no
// region; then only every kPrewakeProbe-th does, until a region with more than one thread.
TEST(ThreadPool, PrewakesNoRegionFollowsStop) {
  ThreadPool& pool = ThreadPool::get();
  if (ThreadPool::team_size() < 2) GTEST_SKIP() << "a pool of one thread never prewakes";
  ASSERT_EQ(cpu::busy_runners(), 0);
  pool.parallel_for(1000, 1, [](int64_t, int64_t) {});  // a region: prewakes count again
  const cpu::ThreadPoolStats s0 = pool.stats();
  const uint32_t n = ThreadPool::kUselessPrewakes + 2 * ThreadPool::kPrewakeProbe;
  for (uint32_t i = 0; i < n; ++i) pool.prewake();
  const cpu::ThreadPoolStats s1 = pool.stats();
  // The first call follows a region; the next kUselessPrewakes - 1 still wake; then two probes.
  EXPECT_EQ(s1.prewakes - s0.prewakes, ThreadPool::kUselessPrewakes + 2);
  EXPECT_EQ(s1.prewakes_skipped - s0.prewakes_skipped,
            n - ThreadPool::kUselessPrewakes - 2);
  pool.parallel_for(1000, 1, [](int64_t, int64_t) {});
  pool.prewake();
  EXPECT_EQ(pool.stats().prewakes - s1.prewakes, 1u);
}

TEST(ThreadPool, ConcurrentCallersShareThePool) {
  // More callers than cores, each with parallel work: every result right, and the pool keeps
  // its size (the callers take turns for the workers; a part whose worker is late runs on its
  // caller).
  ThreadPool::get();
  const int before = threads_of_this_process();
  constexpr int kCallers = 6;
  std::vector<int64_t> sums(kCallers, 0);
  std::atomic<int> peak{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < 300; ++round) {
        std::atomic<int64_t> sum{0};
        ThreadPool::get().parallel_for(10000, 16, [&](int64_t begin, int64_t end) {
          int64_t s = 0;
          for (int64_t i = begin; i < end; ++i) s += i;
          sum.fetch_add(s);
        });
        sums[static_cast<size_t>(c)] += sum.load();
        int now = threads_of_this_process(), p = peak.load();
        while (now > p && !peak.compare_exchange_weak(p, now)) {
        }
      }
    });
  }
  for (auto& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) EXPECT_EQ(sums[static_cast<size_t>(c)], 300LL * 49995000LL);
  EXPECT_LE(peak.load(), before + kCallers) << "the callers' threads and the pool's only";
}

}  // namespace
}  // namespace tensord
