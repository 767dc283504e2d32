// What the broker tells its operators: counters of its gRPC calls (kept by a server
// interceptor, so the method handlers carry no bookkeeping), the engine's counters per device,
// a ring buffer of samples (one a second, the last 10 minutes), and two renderings of it all —
// the Prometheus text exposition format (GET /metrics) and one JSON document (GET /api/status,
// the status page, `tensord status` through the BrokerStatus call).
//
// Metric names follow Prometheus' conventions: prefix tensord_, base units (_bytes,
// _seconds), counters end in _total. Per-device series carry device="cpu:0" and kind="cpu"
// labels taken from the engine's device list, so devices of other kinds (opencl, cuda) appear
// without any change here.
//
// Threading: every method is thread-safe. Private to src/rpc.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"

namespace tensord::rpc {

// Who is looking at the status: an operator (or anyone, when no token is required) sees every
// tenant's sessions, errors and figures; a tenant sees its own and the broker's capacity only.
struct StatusView {
  bool all = true;
  std::string tenant;  // when !all: whose figures are shown
};

// Counters of the broker's gRPC calls. Method names come from the wire: a name that is not
// one of the service's methods is counted as "unknown", so a caller cannot grow the series.
class RpcMetrics {
 public:
  static constexpr int kCodes = 17;  // grpc::StatusCode OK .. UNAUTHENTICATED
  // Upper bounds (seconds) of the latency histogram's buckets; +Inf is implied.
  static constexpr std::array<double, 17> kBuckets = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
      0.1,    0.25,    0.5,    1,     2.5,    5,     10,   60};
  struct Method {
    std::string name;  // "Execute" (the short name)
    std::atomic<int64_t> in_flight{0};
    std::array<std::atomic<int64_t>, kCodes> codes{};
    // Calls per bucket, not cumulative; the last one is past the largest bound (+Inf).
    std::array<std::atomic<int64_t>, kBuckets.size() + 1> buckets{};
    std::atomic<int64_t> sum_ns{0};
  };
  struct Error {
    int64_t unix_ms = 0;
    std::string tenant;  // whose call it was ("" without tokens, or unauthenticated)
    std::string method;
    int code = 0;
    std::string message;
  };
  static constexpr size_t kRecentErrors = 50;
  // One tenant's calls of one method (a tenant's view of the method table).
  struct TenantMethod {
    std::array<int64_t, kCodes> codes{};
    std::array<int64_t, kBuckets.size() + 1> buckets{};
    int64_t sum_ns = 0;
  };

  RpcMetrics();
  // The counters of the method at gRPC path `path` ("/tensord.v1.Tensord/Execute"); a path
  // that is not one of tensord.v1.Tensord's methods gets the "unknown" counters. The pointer
  // stays valid as long as this object.
  Method* method(const char* path);
  void record(Method* m, int code, std::chrono::nanoseconds took, const std::string& message,
              const std::string& tenant = "");
  // Every method seen so far, by name.
  std::vector<const Method*> methods() const;
  // The latest errors (at most kRecentErrors), oldest first.
  std::vector<Error> recent_errors() const;
  // `tenant`'s calls by method name.
  std::map<std::string, TenantMethod> tenant_methods(const std::string& tenant) const;

  // The tenant of a call (from its token); null: every call is tenant "". Set before the
  // server starts.
  std::function<std::string(grpc::ServerContextBase*)> tenant_of;

  // Bytes clients moved through shared-memory regions (UploadRegion, ReadRegion).
  std::atomic<int64_t> shm_in_bytes{0}, shm_out_bytes{0};

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Method>, std::less<>> methods_;
  std::vector<std::string> known_;  // the services' methods' full paths, sorted
  std::deque<Error> errors_;
  // Tenants come from the token file and methods from known_ (+ "unknown"): both bounded.
  std::map<std::string, std::map<std::string, TenantMethod>> by_tenant_;
};

// A server interceptor factory that counts every call in `metrics` (method, status code,
// latency; shared-memory bytes from UploadRegion and ReadRegion). Self-contained: other
// interceptors may be registered beside it.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> make_metrics_interceptor(
    std::shared_ptr<RpcMetrics> metrics);

// One open session as the status page shows it (no id: an id is a capability).
struct SessionSummary {
  std::string tenant;
  int64_t bytes = 0;
  int in_flight = 0;
  int regions = 0;          // shared-memory regions mapped for it
  int64_t region_bytes = 0;  // their mapped bytes (also counted in `bytes`' limits)
  double age_s = 0, idle_s = 0;
};

struct MonitorSources {
  std::shared_ptr<Engine> engine;
  std::shared_ptr<RpcMetrics> rpc;
  std::function<std::vector<SessionSummary>()> sessions;  // null: none
  std::function<bool()> accepting;                        // the gRPC server takes calls
  std::string grpc_address;
  bool tenants = false;  // tokens are required (sessions then show their tenant's name)
  // Named models' counters as Prometheus text (tensord_model_*; rpc/batcher.h). Null: none.
  std::function<std::string()> model_metrics;
};

class Monitor {
 public:
  // Takes a sample now and then one every `interval`, keeping the latest `capacity`.
  explicit Monitor(MonitorSources sources,
                   std::chrono::milliseconds interval = std::chrono::milliseconds(1000),
                   size_t capacity = 600);
  ~Monitor();
  // Stops sampling (idempotent). The renderings still work.
  void stop();

  // GET /metrics: the Prometheus text format, version 0.0.4. A tenant's view: the devices'
  // capacity, its own sessions, bytes and calls.
  std::string prometheus(const StatusView& view = {}) const;
  // GET /api/status and BrokerStatus: devices, sessions, totals, per-method figures, the
  // samples of the last `history_seconds` and the recent errors. A tenant's view keeps the
  // document's shape: devices with their capacity (activity figures 0), its own sessions,
  // calls and errors, no samples (the charts are broker-wide).
  nlohmann::json status(int history_seconds = 600, const StatusView& view = {}) const;
  // GET /readyz: the engine has devices and the gRPC server accepts calls.
  bool ready(std::string* why = nullptr) const;

  void set_http_address(std::string address);

 private:
  void loop();
  void sample();
  std::string tenant_prometheus(const std::string& tenant) const;

  MonitorSources src_;
  const std::chrono::milliseconds interval_;
  const size_t capacity_;
  const std::chrono::system_clock::time_point started_ = std::chrono::system_clock::now();

  struct Sample;
  struct Snapshot;
  mutable std::mutex mu_;
  std::deque<std::shared_ptr<const Sample>> samples_;
  std::shared_ptr<const Snapshot> last_;
  std::string http_address_;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tensord::rpc
