// The engine's CPU thread pool and the OpenMP entry points oneDNN calls (see thread_pool.h).
#include "backends/cpu/thread_pool.h"

#include <elf.h>
#include <link.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TENSORD_CPU_RELAX() _mm_pause()
#else
#define TENSORD_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

#include "core/env.h"

namespace tensord::cpu {
namespace {

constexpr int kMaxThreads = 1024;

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr,
          nullptr, 0);
}

int read_team_size() {
  // An invalid TENSORD_NUM_THREADS never gets here: the cpu backend's check_settings() refuses
  // it. OMP_NUM_THREADS is honoured as the OpenMP convention users know (its first number).
  if (auto v = parse_count_env("TENSORD_NUM_THREADS", 1, kMaxThreads); v.ok() && *v > 0)
    return static_cast<int>(*v);
  if (const char* omp = std::getenv("OMP_NUM_THREADS")) {
    const long n = std::strtol(omp, nullptr, 10);
    if (n >= 1 && n <= kMaxThreads) return static_cast<int>(n);
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return std::min(n, kMaxThreads);
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(std::min<unsigned>(hw, kMaxThreads)) : 1;
}

// Microseconds a waiting thread spins before it sleeps: TENSORD_SPIN_US (0..100000).
int64_t read_spin_us() {
  const char* env = std::getenv("TENSORD_SPIN_US");
  if (env == nullptr || *env == '\0') return 50;  // unset: parse_count_env says 0
  if (auto v = parse_count_env("TENSORD_SPIN_US", 0, 100000); v.ok()) return *v;
  return 50;
}

// Where the calling thread is: inside which region, as which thread.
struct Region;
struct ThreadState {
  Region* region = nullptr;  // the region this thread runs a part of (nullptr: none)
  int num = 0;               // omp_get_thread_num()
  int size = 1;              // omp_get_num_threads()
  int level = 0;             // nesting depth of regions (active or not)
  int limit = 0;             // TeamLimit (0: none)
  bool runner = false;       // inside a RunnerScope
};
thread_local ThreadState t_state;

enum : uint32_t { kIdle = 0, kAssigned = 1, kTaken = 2 };

struct alignas(64) Slot {
  std::atomic<uint32_t> state{kIdle};
};

// The one region the workers serve at a time. Reused: its fields are written by the caller
// holding the pool before it marks the slots kAssigned (release), and read by a worker after
// it took a slot (acquire), so a worker that saw an older generation never reads a torn region.
struct Region {
  void (*fn)(void*) = nullptr;
  void* data = nullptr;
  int threads = 1;
  std::atomic<uint32_t> remaining{0};  // parts not finished (the caller's own excluded)
  std::atomic<uint32_t> barrier_arrived{0};
  std::atomic<uint32_t> barrier_gen{0};
  Slot slots[kMaxThreads];
};

}  // namespace

struct ThreadPool::Impl {
  int team = 1;
  int64_t spin_us = 50;
  std::vector<std::thread> workers;
  std::mutex hold;                  // the caller whose region the workers serve
  std::atomic<uint32_t> dispatch{0};  // bumped for every region: workers wait on it
  std::atomic<int> sleepers{0};       // threads asleep in futex_wait on any pool word
  Region region;
  std::atomic<uint64_t> regions{0}, by_caller{0}, pool_waits{0}, sleeps{0};
  std::atomic<uint64_t> prewakes{0}, prewakes_skipped{0};
  std::atomic<uint64_t> regions_at_prewake{~uint64_t{0}};  // `regions` at the last prewake()
  std::atomic<uint32_t> useless_prewakes{0};  // prewake() calls in a row no region followed
  // prewake(): workers keep spinning until this (steady clock, ns) at least.
  std::atomic<int64_t> spin_until_ns{0};

  // Waits until `word` differs from `seen` or done() holds: spins spin_us, then sleeps.
  template <typename Done>
  void wait(std::atomic<uint32_t>& word, uint32_t seen, Done done) {
    using clock = std::chrono::steady_clock;
    if (done()) return;
    auto until = clock::now() + std::chrono::microseconds(spin_us);
    const clock::time_point prewoken{
        std::chrono::nanoseconds(spin_until_ns.load(std::memory_order_relaxed))};
    if (prewoken > until) until = prewoken;
    for (int i = 0;; ++i) {
      for (int k = 0; k < 32; ++k) {
        if (word.load(std::memory_order_acquire) != seen || done()) return;
        TENSORD_CPU_RELAX();
      }
      if (clock::now() >= until) break;
    }
    sleeps.fetch_add(1, std::memory_order_relaxed);
    while (word.load(std::memory_order_seq_cst) == seen && !done()) {
      sleepers.fetch_add(1, std::memory_order_seq_cst);
      if (word.load(std::memory_order_seq_cst) == seen && !done()) futex_wait(word, seen);
      sleepers.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  void wake(std::atomic<uint32_t>& word) {
    if (sleepers.load(std::memory_order_seq_cst) > 0) futex_wake_all(word);
  }

  // Runs part `num` of the current region on this thread.
  void run_part(int num) {
    Region& r = region;
    const ThreadState saved = t_state;
    t_state.region = &r;
    t_state.num = num;
    t_state.size = r.threads;
    t_state.level = saved.level + 1;
    r.fn(r.data);
    t_state = saved;
  }

  void finish_part() {
    if (region.remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) wake(region.remaining);
  }

  void worker_main(int num) {
    uint32_t seen = 0;
    for (;;) {
      wait(dispatch, seen, [] { return false; });
      seen = dispatch.load(std::memory_order_acquire);
      uint32_t expected = kAssigned;
      if (region.slots[num].state.compare_exchange_strong(expected, kTaken,
                                                          std::memory_order_acq_rel)) {
        run_part(num);
        finish_part();
      }
    }
  }

  void start_workers() {
    for (int i = 1; i < team; ++i) {
      workers.emplace_back([this, i] {
        pthread_setname_np(pthread_self(), "tensord-cpu");
        worker_main(i);
      });
      workers.back().detach();
    }
  }

  void run_region(int threads, void (*fn)(void*), void* data) {
    threads = std::min(threads, team);
    if (threads <= 1 || t_state.level > 0) {  // serial, or nested (runs inactive, as OpenMP)
      const ThreadState saved = t_state;
      t_state.num = 0;
      t_state.size = 1;
      t_state.level = saved.level + 1;
      fn(data);
      t_state = saved;
      return;
    }
    std::unique_lock<std::mutex> lock(hold, std::try_to_lock);
    if (!lock.owns_lock()) {
      pool_waits.fetch_add(1, std::memory_order_relaxed);
      lock.lock();
    }
    regions.fetch_add(1, std::memory_order_relaxed);
    Region& r = region;
    r.fn = fn;
    r.data = data;
    r.threads = threads;
    r.barrier_arrived.store(0, std::memory_order_relaxed);
    r.remaining.store(static_cast<uint32_t>(threads - 1), std::memory_order_relaxed);
    for (int i = 1; i < threads; ++i) r.slots[i].state.store(kAssigned, std::memory_order_release);
    dispatch.fetch_add(1, std::memory_order_seq_cst);
    wake(dispatch);
    run_part(0);
    // Parts whose worker has not started yet run here, one at a time: a worker that is asleep
    // or descheduled does not hold the region up. (A part that waits at a barrier for another
    // part cannot be among them: this thread passed every barrier of its own part, so every
    // part had started.)
    for (int i = 1; i < threads; ++i) {
      uint32_t expected = kAssigned;
      if (r.slots[i].state.compare_exchange_strong(expected, kTaken, std::memory_order_acq_rel)) {
        by_caller.fetch_add(1, std::memory_order_relaxed);
        run_part(i);
        finish_part();
      }
    }
    for (uint32_t left; (left = r.remaining.load(std::memory_order_acquire)) != 0;)
      wait(r.remaining, left, [] { return false; });
    for (int i = 1; i < threads; ++i) r.slots[i].state.store(kIdle, std::memory_order_relaxed);
  }

  void prewake() {
    using clock = std::chrono::steady_clock;
    if (team <= 1) return;
    // Useless: no region with more than one thread since the last prewake (a heuristic:
    // relaxed atomics, concurrent callers may count one call twice or not at all).
    const uint64_t now_regions = regions.load(std::memory_order_relaxed);
    const uint64_t before = regions_at_prewake.exchange(now_regions, std::memory_order_relaxed);
    uint32_t useless = 0;
    if (now_regions == before)
      useless = useless_prewakes.fetch_add(1, std::memory_order_relaxed) + 1;
    else
      useless_prewakes.store(0, std::memory_order_relaxed);
    if (useless >= ThreadPool::kUselessPrewakes && useless % ThreadPool::kPrewakeProbe != 0) {
      prewakes_skipped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    prewakes.fetch_add(1, std::memory_order_relaxed);
    const int64_t until = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              (clock::now() + std::chrono::microseconds(kPrewakeSpinUs))
                                  .time_since_epoch())
                              .count();
    spin_until_ns.store(until, std::memory_order_relaxed);
    // Only sleepers need the bump: a worker that sees it finds no slot assigned to it (or the
    // current region's, which it may take) and waits again, spinning until spin_until_ns.
    if (sleepers.load(std::memory_order_seq_cst) == 0) return;
    dispatch.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(dispatch);
  }

  void barrier() {
    Region* r = t_state.region;
    if (r == nullptr || t_state.size <= 1) return;
    const uint32_t gen = r->barrier_gen.load(std::memory_order_acquire);
    if (r->barrier_arrived.fetch_add(1, std::memory_order_acq_rel) ==
        static_cast<uint32_t>(t_state.size - 1)) {
      r->barrier_arrived.store(0, std::memory_order_relaxed);
      r->barrier_gen.fetch_add(1, std::memory_order_seq_cst);
      wake(r->barrier_gen);
      return;
    }
    wait(r->barrier_gen, gen, [] { return false; });
  }
};

namespace {
std::atomic<ThreadPool*> g_pool{nullptr};
std::mutex g_pool_mu;
}  // namespace

ThreadPool::ThreadPool() : impl_(new Impl) {
  bind_onednn_openmp();
  impl_->team = team_size();
  impl_->spin_us = read_spin_us();
  impl_->start_workers();
}

ThreadPool& ThreadPool::get() {
  if (ThreadPool* p = g_pool.load(std::memory_order_acquire)) return *p;
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (ThreadPool* p = g_pool.load(std::memory_order_acquire)) return *p;
  static bool atfork_registered = false;
  if (!atfork_registered) {
    // A forked child has none of the parent's workers: it starts its own pool on first use
    // (the parent's is left behind, never freed).
    pthread_atfork(nullptr, nullptr, [] {
      new (&g_pool_mu) std::mutex;
      g_pool.store(nullptr, std::memory_order_release);
    });
    atfork_registered = true;
  }
  // Never destroyed: its workers sleep in the kernel until the process exits.
  auto* p = new ThreadPool();
  g_pool.store(p, std::memory_order_release);
  return *p;
}

void ThreadPool::barrier() { impl_->barrier(); }

int ThreadPool::team_size() {
  static const int n = read_team_size();
  return n;
}

void ThreadPool::run_region(int threads, void (*fn)(void*), void* data) {
  impl_->run_region(threads, fn, data);
}

namespace {
std::atomic<uint64_t> g_openmp_regions{0};
}  // namespace

uint64_t openmp_regions_seen() { return g_openmp_regions.load(std::memory_order_relaxed); }

namespace {
struct ForArgs {
  const std::function<void(int64_t, int64_t)>* body;
  int64_t n, chunk;
  std::atomic<int64_t> next{0};
};
void for_part(void* p) {
  auto* a = static_cast<ForArgs*>(p);
  for (;;) {
    const int64_t begin = a->next.fetch_add(a->chunk, std::memory_order_relaxed);
    if (begin >= a->n) return;
    (*a->body)(begin, std::min(a->n, begin + a->chunk));
  }
}
}  // namespace

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int threads = static_cast<int>(std::min<int64_t>(threads_available(), n / grain));
  if (threads <= 1) {
    body(0, n);
    return;
  }
  // Four chunks per thread: a thread that runs late leaves its chunks to the others.
  ForArgs args;
  args.body = &body;
  args.n = n;
  args.chunk = std::max(grain, (n + 4 * threads - 1) / (4 * threads));
  run_region(threads, for_part, &args);
}

// Only an idle device's next run gets the whole team: while a runner runs work, a new graph
// runs beside it with its share of the cores (RunnerScope), one thread on 2 cores, and
// workers spinning for it would take a core from the graphs that do run.
void ThreadPool::prewake() {
  if (busy_runners() > 0) return;
  impl_->prewake();
}

bool ThreadPool::workers_asleep() const {
  return impl_->sleepers.load(std::memory_order_relaxed) > 0;
}

ThreadPoolStats ThreadPool::stats() const {
  ThreadPoolStats s;
  s.workers = static_cast<int>(impl_->workers.size());
  s.regions = impl_->regions.load(std::memory_order_relaxed);
  s.parts_by_caller = impl_->by_caller.load(std::memory_order_relaxed);
  s.waits_for_pool = impl_->pool_waits.load(std::memory_order_relaxed);
  s.sleeps = impl_->sleeps.load(std::memory_order_relaxed);
  s.prewakes = impl_->prewakes.load(std::memory_order_relaxed);
  s.prewakes_skipped = impl_->prewakes_skipped.load(std::memory_order_relaxed);
  return s;
}

TeamLimit::TeamLimit(int max_threads) : saved_(t_state.limit) {
  t_state.limit = max_threads > 0 ? max_threads : 0;
}
TeamLimit::~TeamLimit() { t_state.limit = saved_; }

namespace {
std::atomic<int> g_busy_runners{0};

// The calling thread's nthreads-var: TeamLimit, its share of the pool while other runners are
// busy too, at most the pool's size.
int max_threads_here() {
  int team = ThreadPool::team_size();
  if (t_state.runner) {
    const int busy = g_busy_runners.load(std::memory_order_relaxed);
    if (busy > 1) team = std::max(1, team / busy);
  }
  return t_state.limit > 0 ? std::min(t_state.limit, team) : team;
}
}  // namespace

RunnerScope::RunnerScope() : counted_(!t_state.runner) {
  if (!counted_) return;  // a task run inline inside another: the runner is counted once
  t_state.runner = true;
  g_busy_runners.fetch_add(1, std::memory_order_relaxed);
}
RunnerScope::~RunnerScope() {
  if (!counted_) return;
  t_state.runner = false;
  g_busy_runners.fetch_sub(1, std::memory_order_relaxed);
}

int busy_runners() { return g_busy_runners.load(std::memory_order_relaxed); }

int threads_available() {
  if (t_state.level > 0) return 1;
  return max_threads_here();
}

}  // namespace tensord::cpu

// ---- The OpenMP runtime entry points oneDNN (Debian's libdnnl, built with GCC's OpenMP) calls.
// Defined here, they come before libgomp's in the dynamic linker's search order wherever
// libtensord is loaded ahead of libdnnl (always: libdnnl is libtensord's dependency), so
// oneDNN's regions run on the pool. Also what tensord's own code would reach through
// `#pragma omp parallel` (it has none left). Semantics as GCC's libgomp for what oneDNN uses:
// a region gets exactly the threads it asks for (capped at the pool's size), nested regions
// run with one thread.
namespace tensord::cpu {
namespace {

// The OpenMP entry points' bodies. Internal: the address of an exported function taken here
// would be the one the dynamic linker found first (libgomp's, where it was global first).
void pool_gomp_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) {
  (void)flags;  // proc_bind: the pool's threads are not pinned
  g_openmp_regions.fetch_add(1, std::memory_order_relaxed);
  const int want = num_threads == 0 ? threads_available() : static_cast<int>(num_threads);
  ThreadPool::get().run_region(want, fn, data);
}
void pool_gomp_barrier() { ThreadPool::get().barrier(); }
// As libgomp: the calling thread's nthreads-var (TeamLimit, else the pool's size), inside a
// region too (a nested region still runs with one thread).
int pool_omp_get_max_threads() { return max_threads_here(); }
int pool_omp_get_num_threads() { return t_state.size; }
int pool_omp_get_thread_num() { return t_state.num; }
int pool_omp_in_parallel() { return t_state.region != nullptr ? 1 : 0; }

}  // namespace
}  // namespace tensord::cpu


namespace tensord::cpu {

// oneDNN's calls of the OpenMP runtime, pointed at the functions below. The dynamic linker
// binds them there by itself wherever libtensord comes before libgomp in its search order, but
// not where libgomp was loaded into the process's global scope first (Python after `import
// torch`): then this rewrites the six slots of libdnnl's global offset table, as the linker
// would have written them. Returns the slots written.
int bind_onednn_openmp() {
#if !defined(__x86_64__)
  return 0;
#else
  struct Target {
    const char* name;
    void* fn;
  };
  static const Target targets[] = {
      {"GOMP_parallel", reinterpret_cast<void*>(&pool_gomp_parallel)},
      {"GOMP_barrier", reinterpret_cast<void*>(&pool_gomp_barrier)},
      {"omp_get_max_threads", reinterpret_cast<void*>(&pool_omp_get_max_threads)},
      {"omp_get_num_threads", reinterpret_cast<void*>(&pool_omp_get_num_threads)},
      {"omp_get_thread_num", reinterpret_cast<void*>(&pool_omp_get_thread_num)},
      {"omp_in_parallel", reinterpret_cast<void*>(&pool_omp_in_parallel)},
  };
  int written = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) -> int {
        if (info->dlpi_name == nullptr || std::strstr(info->dlpi_name, "/libdnnl.so") == nullptr)
          return 0;
        const ElfW(Addr) base = info->dlpi_addr;
        const ElfW(Dyn)* dyn = nullptr;
        for (int i = 0; i < info->dlpi_phnum; ++i)
          if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = reinterpret_cast<const ElfW(Dyn)*>(base + info->dlpi_phdr[i].p_vaddr);
        if (dyn == nullptr) return 1;
        // glibc relocates these entries of a loaded object in place; an unrelocated one is
        // an offset from the base.
        auto addr = [base](ElfW(Addr) p) { return p < base ? p + base : p; };
        const ElfW(Sym)* symtab = nullptr;
        const char* strtab = nullptr;
        const ElfW(Rela)* jmprel = nullptr;
        size_t jmprel_bytes = 0;
        for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
          if (d->d_tag == DT_SYMTAB) symtab = reinterpret_cast<const ElfW(Sym)*>(addr(d->d_un.d_ptr));
          if (d->d_tag == DT_STRTAB) strtab = reinterpret_cast<const char*>(addr(d->d_un.d_ptr));
          if (d->d_tag == DT_JMPREL) jmprel = reinterpret_cast<const ElfW(Rela)*>(addr(d->d_un.d_ptr));
          if (d->d_tag == DT_PLTRELSZ) jmprel_bytes = d->d_un.d_val;
        }
        if (symtab == nullptr || strtab == nullptr || jmprel == nullptr) return 1;
        ElfW(Addr) relro_begin = 0, relro_end = 0;
        for (int i = 0; i < info->dlpi_phnum; ++i)
          if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
            relro_begin = base + info->dlpi_phdr[i].p_vaddr;
            relro_end = relro_begin + info->dlpi_phdr[i].p_memsz;
          }
        const long page = sysconf(_SC_PAGESIZE);
        for (size_t r = 0; r < jmprel_bytes / sizeof(ElfW(Rela)); ++r) {
          if (ELF64_R_TYPE(jmprel[r].r_info) != R_X86_64_JUMP_SLOT) continue;
          const char* name = strtab + symtab[ELF64_R_SYM(jmprel[r].r_info)].st_name;
          for (const Target& t : targets) {
            if (std::strcmp(name, t.name) != 0) continue;
            auto** slot = reinterpret_cast<void**>(base + jmprel[r].r_offset);
            if (*slot == t.fn) break;
            // The table is read-only after loading (RELRO, BIND_NOW): writable for the write.
            void* first = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(slot) &
                                                  ~static_cast<uintptr_t>(page - 1));
            if (mprotect(first, static_cast<size_t>(page), PROT_READ | PROT_WRITE) != 0) break;
            __atomic_store_n(slot, t.fn, __ATOMIC_RELEASE);
            const auto at = reinterpret_cast<ElfW(Addr)>(slot);
            if (at >= relro_begin && at < relro_end)  // else the page was writable already
              mprotect(first, static_cast<size_t>(page), PROT_READ);
            ++*static_cast<int*>(out);
            break;
          }
        }
        return 1;
      },
      &written);
  return written;
#endif
}

}  // namespace tensord::cpu

extern "C" {

__attribute__((visibility("default"))) void GOMP_parallel(void (*fn)(void*), void* data,
                                                          unsigned num_threads, unsigned flags) {
  tensord::cpu::pool_gomp_parallel(fn, data, num_threads, flags);
}
__attribute__((visibility("default"))) void GOMP_barrier() { tensord::cpu::pool_gomp_barrier(); }
__attribute__((visibility("default"))) int omp_get_max_threads() {
  return tensord::cpu::pool_omp_get_max_threads();
}
__attribute__((visibility("default"))) int omp_get_num_threads() {
  return tensord::cpu::pool_omp_get_num_threads();
}
__attribute__((visibility("default"))) int omp_get_thread_num() {
  return tensord::cpu::pool_omp_get_thread_num();
}
__attribute__((visibility("default"))) int omp_in_parallel() {
  return tensord::cpu::pool_omp_in_parallel();
}
__attribute__((visibility("default"))) void omp_set_num_threads(int n) {
  tensord::cpu::t_state.limit = n > 0 ? n : 0;
}
}
