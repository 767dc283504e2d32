// The engine's CPU threads: one pool per process, shared by every cpu device, session and
// caller (the broker's device threads, an embedded program's own threads).
//
// Every parallel piece of CPU work runs on it: tensord's own kernels through parallel_for, and
// oneDNN's primitives through the OpenMP entry points oneDNN calls. Debian's oneDNN is built
// for OpenMP and calls six functions of the OpenMP runtime (GOMP_parallel, GOMP_barrier,
// omp_get_max_threads, omp_get_num_threads, omp_get_thread_num, omp_in_parallel); tensord
// defines them (thread_pool.cpp), and the dynamic linker binds oneDNN's calls to them before
// libgomp's, so oneDNN's parallel regions run on this pool instead of on an OpenMP team per
// calling thread. What that gives (issue 28):
// - waiting spins for a short time (TENSORD_SPIN_US, default 50 us) and then sleeps in the
//   kernel, decided here at any time, not by environment variables read at process start;
// - a caller never starts a team of its own: it is thread 0 of a region and the pool's workers
//   are the others, so the process has the pool's threads and its callers, no more;
// - a region's part whose worker has not started by the time the caller finished its own part
//   (the worker is asleep or descheduled on a loaded machine) is run by the caller: a loaded
//   machine slows a region to the speed of the threads that do run, it does not stall it;
// - one region at a time holds the workers; another caller's region waits (sleeping) for them,
//   so concurrent sessions take turns at the granularity of one kernel;
// - the serial/team choice of a primitive is TeamLimit on the calling thread (what oneDNN reads
//   as omp_get_max_threads() when it creates and runs a primitive).
#pragma once

#include <cstdint>
#include <functional>

namespace tensord::cpu {

struct ThreadPoolStats {
  int workers = 0;            // threads the pool started (its size minus the caller)
  uint64_t regions = 0;       // parallel regions run with more than one thread
  uint64_t parts_by_caller = 0;  // region parts a caller took back from a worker not yet started
  uint64_t waits_for_pool = 0;   // regions that waited for another caller's region to end
  uint64_t sleeps = 0;        // waits that gave up spinning and slept
  uint64_t prewakes = 0;      // prewake() calls that woke (or kept spinning) the workers
  uint64_t prewakes_skipped = 0;  // ... that did not: no region had followed the last ones
};

class ThreadPool {
 public:
  // The process's pool, started on first use with team_size() - 1 workers.
  static ThreadPool& get();

  // Threads a region may use: TENSORD_NUM_THREADS (1..1024), else OMP_NUM_THREADS, else the
  // number of cores the process may run on.
  static int team_size();

  // Runs body(i, n) for every i in [0, n) exactly once, in chunks claimed dynamically by the
  // caller and the workers; grain is the smallest chunk worth handing to another thread.
  // Runs inline (on the calling thread, no worker involved) when n <= grain, when the calling
  // thread is already inside a region, or when TeamLimit says 1.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

  // An OpenMP-style region: fn(data) on exactly `threads` logical threads (omp_get_thread_num()
  // 0..threads-1), the caller being thread 0. Nested inside a region: fn(data) once, serially.
  void run_region(int threads, void (*fn)(void*), void* data);

  // Work is coming (Device::expect_work): when no runner is busy, sleeping workers wake and
  // spin for up to kPrewakeSpinUs (longer than TENSORD_SPIN_US), so the next region finds them
  // up. Cheap when they are awake already; nothing while runners run work (a graph started
  // then runs beside them on its share of the cores, without the workers).
  // Prewakes no region follows (a stream of runs too small for the team: a broker serving a
  // tiny model spent a tenth of its CPU in workers spinning for nothing) stop after
  // kUselessPrewakes in a row; then only every kPrewakeProbe-th call wakes them, and the next
  // region with more than one thread turns them back on.
  void prewake();
  static constexpr int64_t kPrewakeSpinUs = 500;
  static constexpr uint32_t kUselessPrewakes = 4;
  static constexpr uint32_t kPrewakeProbe = 32;
  // GOMP_barrier: waits until every thread of the calling thread's region arrived here.
  void barrier();

  ThreadPoolStats stats() const;
  // Whether a thread of the pool sleeps now (a region would first wake it: a futex call, some
  // microseconds, more than a small product takes on one thread).
  bool workers_asleep() const;

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  struct Impl;

 private:
  ThreadPool();
  Impl* impl_;
};

// The most threads the calling thread's work may use while this is alive (1: run serially, on
// the calling thread). What oneDNN reads as omp_get_max_threads(): oneDNN fixes a primitive's
// thread count when it creates it, so the scope covers creating and running the primitive.
// 0 or less: no limit (the pool's team size).
class TeamLimit {
 public:
  explicit TeamLimit(int max_threads);
  ~TeamLimit();
  TeamLimit(const TeamLimit&) = delete;
  TeamLimit& operator=(const TeamLimit&) = delete;

 private:
  int saved_;
};

// A device-queue runner (engine.cpp's WorkQueue) running one task while alive. While more than
// one runner of the process runs work at once (different sessions' graphs side by side), each
// one's threads_available() is the pool's size divided among them (1 on a 2-core machine): the
// sessions then share the cores graph by graph, each running its kernels serially, instead of
// taking turns at every kernel with the whole team (fork, join and a barrier per primitive).
// A thread's own TeamLimit still applies on top.
class RunnerScope {
 public:
  RunnerScope();
  ~RunnerScope();
  RunnerScope(const RunnerScope&) = delete;
  RunnerScope& operator=(const RunnerScope&) = delete;

 private:
  bool counted_;
};

// Runners running work now (RunnerScope), in the process.
int busy_runners();

// Threads the calling thread's next region would get (TeamLimit, nesting, sharing with other
// busy runners, the pool size).
int threads_available();

// Whether oneDNN's parallel regions run on this pool: runs a small oneDNN primitive with two
// threads once and looks whether its region came here. False when another OpenMP runtime was
// bound first (for example libgomp loaded into the global scope of a process before tensord);
// oneDNN then runs on that runtime's teams, which is correct but spins as OpenMP does.
bool openmp_bound_to_pool();

// Points libdnnl's six OpenMP calls at tensord's (see thread_pool.cpp); the pool does it when
// it starts. Returns the calls rewritten (0 when the dynamic linker had bound them here).
int bind_onednn_openmp();

// OpenMP regions (GOMP_parallel calls) the pool has run: oneDNN's, since tensord has none.
uint64_t openmp_regions_seen();

}  // namespace tensord::cpu
