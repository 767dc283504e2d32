// The executor and the graph compiler's device-independent passes: a Graph compiled for a
// device (and its fallback) into steps — constant folding through the host's reference
// kernels, placement by the devices' supports() with fallback to cpu:0 and copies at the
// cuts, the devices' region compilers, last-use freeing — and run with values on devices,
// poison propagation, run-time shape inference, subgraphs (If/Loop/Scan bodies) and
// profiling (TENSORD_PROFILE=1).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace tensord {

// The bytes one compile creates and its executable then holds: constants folded at compile
// time, weights prepared by region compilers, device copies of constants. Shared by an
// executable and the executables of its subgraphs (compiled when they first run), so one
// budget covers the whole tree; given back when the last of them goes.
//
// Each piece is charged as it is created (`charge`, e.g. against the tenant's and session's
// quotas: an error refuses the compile at that point, before the bytes exist), and the total
// is settled to what the executable really keeps once it is built (folded values that only
// fed other folded nodes are dropped). Folding also stops at `max_folded_bytes` per
// executable: past it a node is left to run time, where its outputs are the run's values,
// counted against the session and freed after their last use — as ONNX Runtime leaves a
// constant-only subgraph unfolded rather than fail a model (a legitimate model may exceed
// any cap; only the memory held between runs is bounded).
class CompileBudget {
 public:
  using ChargeFn = std::function<Status(int64_t bytes, const std::string& what)>;
  using UnchargeFn = std::function<void(int64_t bytes)>;
  // max_folded_bytes <= 0: no cap. charge/uncharge may be null (nothing is charged).
  CompileBudget(int64_t max_folded_bytes, ChargeFn charge, UnchargeFn uncharge)
      : max_folded_(max_folded_bytes), charge_(std::move(charge)), uncharge_(std::move(uncharge)) {}
  ~CompileBudget() {
    if (uncharge_ && held_ > 0) uncharge_(held_);
  }
  CompileBudget(const CompileBudget&) = delete;
  CompileBudget& operator=(const CompileBudget&) = delete;

  // Whether `bytes` more folded bytes stay under the cap (reserved when true).
  bool reserve_folded(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (max_folded_ > 0 && folded_ + bytes > max_folded_) {
      capped_ = true;
      return false;
    }
    folded_ += bytes;
    return true;
  }
  void release_folded(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    folded_ -= bytes;
  }
  // Charges `bytes` (may be negative: gives back). Error: nothing charged.
  Status charge(int64_t bytes, const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes > 0 && charge_) {
      Status s = charge_(bytes, what);
      if (!s.ok()) return s;
    } else if (bytes < 0 && uncharge_) {
      uncharge_(-bytes);
    }
    held_ += bytes;
    peak_ = std::max(peak_, held_);
    return Status();
  }
  int64_t held() const {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }
  // The most it held at once (what a failed compile had created before it failed).
  int64_t peak() const {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }
  int64_t folded() const {
    std::lock_guard<std::mutex> lock(mu_);
    return folded_;
  }
  int64_t max_folded() const { return max_folded_; }
  // Whether some node was left to run time because of the cap.
  bool capped() const {
    std::lock_guard<std::mutex> lock(mu_);
    return capped_;
  }

 private:
  const int64_t max_folded_;
  ChargeFn charge_;
  UnchargeFn uncharge_;
  mutable std::mutex mu_;
  int64_t held_ = 0;
  int64_t peak_ = 0;
  int64_t folded_ = 0;
  bool capped_ = false;
};

// Where a graph is compiled for.
struct CompileTarget {
  Device* device = nullptr;    // the requested device
  Device* fallback = nullptr;  // where nodes `device` does not support run (cpu:0); null: none
  Device* host = nullptr;      // evaluates constants at compile time (a cpu device)
  // Memory for constants on devices that cannot adopt host memory (accounted by the engine).
  // Null: the device's raw allocations.
  std::function<Result<std::shared_ptr<Buffer>>(Device&, size_t)> allocate_constant;
  // What the compile's bytes are charged to, and the cap on folding (see CompileBudget).
  // Null: nothing charged, no cap.
  std::shared_ptr<CompileBudget> budget;
};

// What a run needs from whoever runs it (the engine, or run_graph_on_host).
class RunServices {
 public:
  virtual ~RunServices() = default;
  // Memory on `device` for the run's session.
  virtual Allocator& allocator(Device& device) = 0;
  // `value` moved to `dst` by the cheapest path the two devices offer (same device: as is).
  virtual Result<DeviceTensor> transfer(const DeviceTensor& value, Device& dst) = 0;
};

// A node placed on the fallback device because the requested one does not support it.
struct Fallback {
  std::string op;
  std::string node;
  std::string why;  // the requested device's supports() status
};

class Executable {
 public:
  static Result<std::unique_ptr<Executable>> compile(const Graph& graph,
                                                     const std::vector<TensorType>& input_types,
                                                     const CompileTarget& target,
                                                     const CompileOptions& options);
  ~Executable();

  // Output types as inferred at compile time (dims may be -1 for data-dependent shapes), or
  // the error of the node that cannot produce that output.
  const std::vector<Result<TensorType>>& output_types() const;
  // Runs on the calling thread. `inputs` are bound to graph.inputs in order; an input may be
  // an error (its producer failed), which propagates like a failed node. One result per graph
  // output, on the target device: a failed node's (or input's) error lands on exactly the
  // outputs that depend on it (naming the node and op); the others are values.
  std::vector<Result<DeviceTensor>> run(const std::vector<Result<DeviceTensor>>& inputs,
                                        RunServices& services);
  // One line per step: "Op 'name' [device kernel]", fused regions, copies at cuts, fallbacks,
  // and notes from the region compilers.
  std::string describe() const;
  const std::vector<Fallback>& fallbacks() const;
  const std::string& fallback_device() const;
  // Bytes this executable holds beyond its graph (folded constants kept, weights prepared by
  // region compilers, device copies of constants), as charged to its budget.
  int64_t held_bytes() const;
  // Bytes of constants folded at compile time that it keeps.
  int64_t folded_bytes() const;

  struct Impl;

 private:
  explicit Executable(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---- profiling ----
// Executables compiled while profiling() is on (TENSORD_PROFILE set, or set_profiling(true)
// as `tensord bench --profile` and `tensord run --profile` do) time every step and add it
// here, process-wide: what share ran on reference kernels (cpu kernels named "reference")
// and in regions holding a library primitive in its reference implementation (oneDNN's
// `ref:*`, RegionKernel::reference_impls; the whole region's time counts, an upper bound).
struct ProfileRow {
  std::string step;  // "Conv [reference]", a region's name, a copy
  std::string kind;  // "reference", "onednn-ref" or ""
  double seconds = 0;
  int64_t calls = 0;
};
struct ProfileTotals {
  double total_s = 0, reference_s = 0, onednn_ref_s = 0;
  std::vector<ProfileRow> rows;                   // by seconds, largest first
  std::vector<std::string> onednn_ref_primitives;  // "region 'r3': eltwise (ref:any)"
};
void set_profiling(bool on);
bool profiling();
ProfileTotals profile_totals();
// Forgets the times (not the ref primitives found, which are found once per executable).
void reset_profile_totals();
void add_profile_time(const std::string& step, const std::string& kind, double seconds);
void add_profile_reference_impl(const std::string& what);

// Outside any engine (tests, tools): compiles and runs `graph` on a private cpu device.
// Each output is a value or the error of the node it depends on.
Result<std::vector<Result<HostTensor>>> run_graph_on_host(const Graph& graph,
                                                          const std::vector<HostTensor>& inputs,
                                                          const CompileOptions& options = {});
// What the compiler makes of `graph` for a private cpu device (Executable::describe).
Result<std::string> describe_compiled(const Graph& graph, const std::vector<TensorType>& types,
                                      const CompileOptions& options = {});

}  // namespace tensord
