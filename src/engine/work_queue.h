// A device's work queue (the engine's runners): per-session FIFOs served round-robin with time
// slicing, the tasks they run and the RunContext a running task sees. Internal to the engine
// (src/engine/engine.cpp builds one per device).
#pragma once

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backends/cpu/thread_pool.h"
#include "engine/engine.h"

namespace tensord::engine_queue {

using Clock = std::chrono::steady_clock;

// What stops a piece of queued work: its session closing, the call that submitted it giving up.
struct WorkTokens {
  std::shared_ptr<CancelToken> session;
  std::shared_ptr<CancelToken> call;  // optional
  bool cancelled() const { return (session && session->cancelled()) || (call && call->cancelled()); }
  Status check() const {
    if (session && session->cancelled()) return session->cancelled_status();
    return call ? call->work_status() : OkStatus();
  }
};

// Counters the queues keep (Engine::metrics).
struct QueueStats {
  std::atomic<int64_t> cancelled{0}, nested{0}, preempted{0}, busy_us{0};
};

class WorkQueue;
struct Task;

// The RunContext of one task while it runs (see RunContext in backend.h).
struct Frame final : RunContext {
  WorkQueue* queue = nullptr;
  Task* task = nullptr;
  bool nested = false;         // run inline inside another session's task
  Clock::time_point slice_start;
  bool preempted = false;      // a nested run stopped at its budget: to be redone later
  Status cancelled() const;
  Status checkpoint() override;
};

// One piece of work on a device queue.
struct Task {
  SessionId session = 0;
  WorkTokens tokens;
  // Whether everything it reads is ready (null: always). Only ready (or cancelled) tasks run
  // inline or ahead of older ones, so they never block on other queues (see WorkQueue).
  std::function<bool()> ready;
  // Does the work, or (frame.cancelled() not OK) just fails its outputs with that status.
  // Returns false when the run was preempted (frame.preempted): it then set nothing and runs
  // again later.
  std::function<bool(Frame&)> fn;
  uint64_t seq = 0;
  bool long_running = false;  // preempted once: runs only in its own turn from now on
  Clock::time_point queued{};  // when it was first queued (Engine::metrics: queue wait)
  bool eligible() const { return tokens.cancelled() || !ready || ready(); }
};

// The threads running a device's tasks: per-session FIFOs served round-robin (order within a
// session is kept; sessions share no tensors, so their order is free), with time slicing: a
// task that has run past the slice while other sessions have work queued (and no runner is
// free to take it) runs that work inline at its next checkpoint (one level deep, another
// session's only), then resumes.
//
// Runners: one thread, or (cpu devices, EngineOptions::cpu_runners) several. A session's tasks
// never run two at a time: a runner takes the front task of a session no runner is running.
// Runners besides the first take only tasks whose inputs are ready, so they never block; with
// several busy at once each one's kernels get its share of the cores (cpu::RunnerScope): two
// sessions' graphs side by side on 2 cores, each on one thread, instead of taking turns with
// the whole team at every kernel.
//
// Deadlock freedom: a task may block on the result of an older task of its session on
// another queue. Out of order (round-robin, inline, other runners) only tasks whose inputs are
// ready run, and they never block; when no queued task is ready, the first runner runs the
// oldest one (and may block on older work elsewhere). A chain of blocked queues thus always
// points at older and older work, so it ends at a queue that makes progress, as with the plain
// FIFO before.
class WorkQueue {
 public:
  int runners() const { return runners_; }
  WorkQueue(std::chrono::microseconds slice, QueueStats* stats, int runners = 1)
      : slice_(slice), stats_(stats), runners_(std::max(1, runners)) {
    for (int i = 0; i < runners_; ++i)
      threads_.emplace_back([this, i] {
        pthread_setname_np(pthread_self(), "tensord-queue");  // seen in top -H, gdb
        loop(i);
      });
  }
  ~WorkQueue() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void push(Task task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      task.seq = next_seq_++;
      enqueue_locked(std::move(task), /*front=*/false);
    }
    notify();
  }
  // Runs `task` on the calling thread when nothing is queued or running and its inputs are
  // ready (then true), keeping the queue's order: no runner takes a task of its session
  // meanwhile. Else false, nothing done.
  bool run_here_if_idle(Task& task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (busy_ > 0 || stop_ || !fifos_.empty() || !task.eligible()) return false;
      start_locked(task.session);
    }
    started_.fetch_add(1, std::memory_order_relaxed);  // waited for nothing
    run_top(task);
    finish(task.session);
    return true;
  }

  // Frame::checkpoint of a top-level task: run other sessions' queued work once its slice is
  // used up.
  void maybe_yield(Frame& f) {
    if (!others_waiting_.load(std::memory_order_relaxed)) return;
    const auto now = Clock::now();
    if (now - f.slice_start < slice_) return;
    run_others();
    f.slice_start = Clock::now();
  }
  std::chrono::microseconds slice() const { return slice_; }
  // For Engine::metrics: tasks queued now, tasks started (queued or run here), the time they
  // waited in the queue in all, and the time this queue spent running work.
  int64_t depth() const { return depth_.load(std::memory_order_relaxed); }
  int64_t started() const { return started_.load(std::memory_order_relaxed); }
  int64_t wait_us() const { return wait_us_.load(std::memory_order_relaxed); }
  int64_t busy_us() const { return busy_us_.load(std::memory_order_relaxed); }

 private:
  void notify() {
    if (runners_ == 1)
      cv_.notify_one();
    else
      cv_.notify_all();  // the first runner may be the only one allowed the task
  }
  void enqueue_locked(Task task, bool front) {
    if (task.queued == Clock::time_point{}) task.queued = Clock::now();
    depth_.fetch_add(1, std::memory_order_relaxed);
    auto [it, inserted] = fifos_.try_emplace(task.session);
    if (inserted) rr_.push_back(task.session);
    if (front)
      it->second.push_front(std::move(task));
    else
      it->second.push_back(std::move(task));
    update_flag_locked();
  }
  void start_locked(SessionId s) {
    ++busy_;
    ++running_[s];
    update_flag_locked();
  }
  void finish(SessionId s) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      --busy_;
      if (--running_[s] == 0) running_.erase(s);
      update_flag_locked();
    }
    notify();  // a runner may wait for this session, or (stopping) for every task to end
  }
  bool running_locked(SessionId s) const { return running_.count(s) > 0; }
  // Whether a session no runner is running has queued work while every runner is busy (read
  // without the lock by checkpoints, so that most of them cost one atomic load).
  void update_flag_locked() {
    size_t others = 0;
    for (const auto& [s, q] : fifos_) others += running_locked(s) ? 0 : 1;
    others_waiting_.store(others > 0 && busy_ >= runners_,
                          std::memory_order_relaxed);
  }
  // Takes the next task of a session no runner is running: the first in round-robin order
  // whose front task is eligible (and, inline, not known to run long); else, when `blocking`
  // (the first runner), the oldest front task, if its session is free. False when none.
  bool pick_locked(bool inline_only, bool blocking, Task* out) {
    auto take = [&](std::deque<SessionId>::iterator rit) {
      const SessionId s = *rit;
      auto fit = fifos_.find(s);
      *out = std::move(fit->second.front());
      fit->second.pop_front();
      depth_.fetch_sub(1, std::memory_order_relaxed);
      if (!out->long_running) {  // a preempted task's wait was counted when it first started
        started_.fetch_add(1, std::memory_order_relaxed);
        wait_us_.fetch_add(std::chrono::duration_cast<std::chrono::microseconds>(
                               Clock::now() - out->queued).count(),
                           std::memory_order_relaxed);
      }
      rr_.erase(rit);
      if (fit->second.empty())
        fifos_.erase(fit);
      else
        rr_.push_back(s);  // it had its turn
      return true;
    };
    for (auto rit = rr_.begin(); rit != rr_.end(); ++rit) {
      if (running_locked(*rit)) continue;
      const Task& t = fifos_.at(*rit).front();
      if (inline_only && t.long_running && !t.tokens.cancelled()) continue;
      if (t.eligible()) return take(rit);
    }
    if (inline_only || !blocking || rr_.empty()) return false;
    auto oldest = rr_.begin();
    for (auto rit = rr_.begin(); rit != rr_.end(); ++rit)
      if (fifos_.at(*rit).front().seq < fifos_.at(*oldest).front().seq) oldest = rit;
    if (running_locked(*oldest)) return false;  // its runner never blocks: it ends soon
    return take(oldest);
  }

  void loop(int index) {
    const bool first = index == 0;
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        bool got = false;
        cv_.wait(lock, [&] {
          if (stop_ && fifos_.empty() && (first ? busy_ == 0 : true)) return true;
          // At most one top-level task per runner at once, callers running one here
          // (run_here_if_idle: a broker's handler thread) included: more would share the
          // cores more thinly than the runners were sized for.
          if (busy_ >= runners_) return false;
          got = pick_locked(false, first, &task);
          return got;
        });
        if (!got) return;  // stop_ and drained
        start_locked(task.session);
      }
      run_top(task);
      finish(task.session);
    }
  }

  void run_top(Task& task) {
    const auto t0 = Clock::now();
    Frame f;
    f.queue = this;
    f.task = &task;
    f.slice_start = t0;
    {
      cpu::RunnerScope runner;
      ScopedRunContext scope(&f);
      task.fn(f);  // top-level runs are never preempted
    }
    const int64_t busy = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
    stats_->busy_us += busy;
    busy_us_.fetch_add(busy, std::memory_order_relaxed);
    // Counted last: a reader who sees the task counted also sees its busy time.
    if (task.tokens.cancelled()) stats_->cancelled++;
  }

  // Runs other sessions' eligible tasks inline, round-robin, for about one slice (each task
  // started gets a full slice; one past it is preempted and redone later in its own turn).
  void run_others() {
    const auto burst_end = Clock::now() + slice_;
    while (Clock::now() < burst_end) {
      Task task;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!pick_locked(/*inline_only=*/true, false, &task)) return;
        ++running_[task.session];
        update_flag_locked();
      }
      Frame f;
      f.queue = this;
      f.task = &task;
      f.nested = true;
      f.slice_start = Clock::now();
      bool done;
      {
        ScopedRunContext scope(&f);
        done = task.fn(f);
      }
      stats_->nested++;
      std::lock_guard<std::mutex> lock(mu_);
      if (--running_[task.session] == 0) running_.erase(task.session);
      if (done) {
        if (task.tokens.cancelled()) stats_->cancelled++;
        update_flag_locked();
        continue;
      }
      stats_->preempted++;
      task.long_running = true;
      enqueue_locked(std::move(task), /*front=*/true);  // keeps its place in its session
    }
  }

  const std::chrono::microseconds slice_;
  QueueStats* stats_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<SessionId, std::deque<Task>> fifos_;  // non-empty ones only
  std::deque<SessionId> rr_;                                // the sessions of fifos_, in turn
  std::unordered_map<SessionId, int> running_;  // sessions with a task running, and how many
  uint64_t next_seq_ = 0;
  bool stop_ = false;
  int busy_ = 0;  // runners (or run_here_if_idle's callers) running a top-level task
  // The runner threads' count, fixed before they start (threads_ is still being filled while
  // the first ones run).
  const int runners_;
  std::atomic<bool> others_waiting_{false};
  std::atomic<int64_t> depth_{0}, started_{0}, wait_us_{0}, busy_us_{0};
  std::vector<std::thread> threads_;
};

}  // namespace tensord::engine_queue
