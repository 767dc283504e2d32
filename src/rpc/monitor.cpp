#include "rpc/monitor.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include <google/protobuf/descriptor.h>

#include "tensord.pb.h"
#include "tensord/version.h"

namespace tensord::rpc {

namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr const char* kCodeNames[RpcMetrics::kCodes] = {
    "OK",        "CANCELLED",         "UNKNOWN",          "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",   "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
    "UNIMPLEMENTED", "INTERNAL",      "UNAVAILABLE",      "DATA_LOSS",
    "UNAUTHENTICATED"};

// Attach lives as long as its session: its "latency" is a session's lifetime, kept out of
// the latency figures that mix methods.
bool long_lived(const std::string& method) { return method == "Attach"; }
// Whether a call that ended with `code` failed: not OK, and not the normal end of a
// long-lived call (a client closing its Attach, i.e. its session, ends it CANCELLED).
bool is_error(const std::string& method, int code) {
  return code != 0 && !(code == 1 && long_lived(method));
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The q-quantile (0..1) of a histogram given per bucket (not cumulative; the last is +Inf),
// interpolated linearly inside its bucket; seconds. -1 when there are no calls.
template <class Buckets>
double quantile(const Buckets& b, double q) {
  int64_t n = 0;
  for (auto v : b) n += v;
  if (n <= 0) return -1;
  const double rank = q * static_cast<double>(n);
  int64_t seen = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const int64_t c = b[i];
    if (c > 0 && static_cast<double>(seen + c) >= rank) {
      if (i == RpcMetrics::kBuckets.size()) return RpcMetrics::kBuckets.back();  // +Inf bucket
      const double lo = i == 0 ? 0.0 : RpcMetrics::kBuckets[i - 1];
      const double hi = RpcMetrics::kBuckets[i];
      return lo + (hi - lo) * std::clamp((rank - static_cast<double>(seen)) / c, 0.0, 1.0);
    }
    seen += c;
  }
  return RpcMetrics::kBuckets.back();
}

// Prometheus label values: backslash, double quote and newline escaped (the text format's
// escapes), and at most kMaxLabel bytes of the value ("..." marks a cut).
constexpr size_t kMaxLabel = 128;
std::string label(const std::string& value) {
  const std::string_view v = value.size() > kMaxLabel
                                 ? std::string_view(value).substr(0, kMaxLabel)
                                 : std::string_view(value);
  std::string out;
  out.reserve(v.size() + 3);
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  if (value.size() > kMaxLabel) out += "...";
  return out;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

// Builds the exposition text: one HELP and TYPE per family, then its samples.
class Exposition {
 public:
  void family(const std::string& name, const char* type, const char* help) {
    out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const std::string& name, const std::string& labels, double v) {
    out_ += name;
    if (!labels.empty()) out_ += "{" + labels + "}";
    out_ += " " + number(v) + "\n";
  }
  void sample(const std::string& name, const std::string& labels, int64_t v) {
    out_ += name;
    if (!labels.empty()) out_ += "{" + labels + "}";
    out_ += " " + std::to_string(v) + "\n";
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string device_labels(const std::string& name, const std::string& kind) {
  return "device=\"" + label(name) + "\",kind=\"" + label(kind) + "\"";
}

// ---------------------------------------------------------------- the interceptor

class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  enum Kind { kOther, kUploadRegion, kReadRegion };
  MetricsInterceptor(std::shared_ptr<RpcMetrics> metrics, RpcMetrics::Method* method,
                     grpc::ServerContextBase* ctx)
      : metrics_(std::move(metrics)), method_(method), ctx_(ctx) {
    kind_ = method_->name == "UploadRegion" ? kUploadRegion
            : method_->name == "ReadRegion" ? kReadRegion
                                            : kOther;
    method_->in_flight.fetch_add(1, std::memory_order_relaxed);
  }
  ~MetricsInterceptor() override {
    // A call that ended without a status passing here (cancelled, the broker stopping).
    if (!done_) {
      ctx_ = nullptr;  // (the call may be gone: counted without a tenant)
      finish(grpc::StatusCode::CANCELLED, "the call ended without an answer");
    }
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using H = grpc::experimental::InterceptionHookPoints;
    if (kind_ == kUploadRegion && methods->QueryInterceptionHookPoint(H::POST_RECV_MESSAGE)) {
      if (const auto* req = static_cast<const v1::UploadRegionRequest*>(methods->GetRecvMessage()))
        upload_bytes_ = std::max<int64_t>(0, req->header().total_bytes());
    }
    if (kind_ == kReadRegion && methods->QueryInterceptionHookPoint(H::PRE_SEND_MESSAGE)) {
      if (const auto* resp = static_cast<const v1::ReadRegionResponse*>(methods->GetSendMessage()))
        if (resp->written() || resp->in_arena())  // (an arena's: the client copies it out)
          metrics_->shm_out_bytes.fetch_add(
              resp->part_bytes() > 0 ? resp->part_bytes() : resp->header().total_bytes(),
              std::memory_order_relaxed);
    }
    if (methods->QueryInterceptionHookPoint(H::PRE_SEND_STATUS)) {
      const grpc::Status s = methods->GetSendStatus();
      if (kind_ == kUploadRegion && s.ok())
        metrics_->shm_in_bytes.fetch_add(upload_bytes_, std::memory_order_relaxed);
      finish(s.error_code(), s.error_message());
    }
    methods->Proceed();
  }

 private:
  void finish(grpc::StatusCode code, const std::string& message) {
    if (done_) return;
    done_ = true;
    method_->in_flight.fetch_sub(1, std::memory_order_relaxed);
    std::string tenant;
    if (ctx_ && metrics_->tenant_of) tenant = metrics_->tenant_of(ctx_);
    metrics_->record(method_, static_cast<int>(code), SteadyClock::now() - start_, message,
                     tenant);
  }

  std::shared_ptr<RpcMetrics> metrics_;
  RpcMetrics::Method* method_;
  grpc::ServerContextBase* ctx_;
  Kind kind_ = kOther;
  const SteadyClock::time_point start_ = SteadyClock::now();
  int64_t upload_bytes_ = 0;
  bool done_ = false;
};

class MetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(std::shared_ptr<RpcMetrics> metrics)
      : metrics_(std::move(metrics)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const char* path = info->method();
    return new MetricsInterceptor(metrics_, metrics_->method(path ? path : ""),
                                  info->server_context());
  }

 private:
  std::shared_ptr<RpcMetrics> metrics_;
};

}  // namespace

// ---------------------------------------------------------------- RpcMetrics

RpcMetrics::RpcMetrics() {
  // tensord's own service, and the KServe v2 one served beside it (src/rpc/kserve_grpc.cpp):
  // their methods' full paths, sorted ("/tensord.v1.Tensord/Execute", ...).
  for (const char* name : {"tensord.v1.Tensord", "inference.GRPCInferenceService"}) {
    const auto* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(name);
    if (service)
      for (int i = 0; i < service->method_count(); ++i)
        known_.push_back("/" + std::string(name) + "/" + service->method(i)->name());
  }
  std::sort(known_.begin(), known_.end());
}

RpcMetrics::Method* RpcMetrics::method(const char* path) {
  // Only "/SERVICE/NAME" with a NAME of one of the services: any other path (a caller may
  // send any) is "unknown". tensord's methods are named as they are; KServe's with the
  // prefix "kserve." ("kserve.ModelInfer").
  std::string_view p(path);
  std::string name = "unknown";
  if (std::binary_search(known_.begin(), known_.end(), p)) {
    const size_t slash = p.rfind('/');
    name = std::string(p.substr(slash + 1));
    if (p.rfind("/inference.", 0) == 0) name = "kserve." + name;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = methods_.find(name);
  if (it != methods_.end()) return it->second.get();
  auto m = std::make_unique<Method>();
  m->name = std::string(name);
  Method* raw = m.get();
  methods_.emplace(m->name, std::move(m));
  return raw;
}

void RpcMetrics::record(Method* m, int code, std::chrono::nanoseconds took,
                        const std::string& message, const std::string& tenant) {
  if (code < 0 || code >= kCodes) code = static_cast<int>(grpc::StatusCode::UNKNOWN);
  m->codes[code].fetch_add(1, std::memory_order_relaxed);
  const double s = std::chrono::duration<double>(took).count();
  const size_t b = static_cast<size_t>(
      std::lower_bound(kBuckets.begin(), kBuckets.end(), s) - kBuckets.begin());
  m->buckets[b].fetch_add(1, std::memory_order_relaxed);
  m->sum_ns.fetch_add(took.count(), std::memory_order_relaxed);
  if (tenant_of) {  // tokens: each tenant's own figures too
    std::lock_guard<std::mutex> lock(mu_);
    TenantMethod& t = by_tenant_[tenant][m->name];
    ++t.codes[code];
    ++t.buckets[b];
    t.sum_ns += took.count();
  }
  // A client ending its own Attach (closing its session) is not an error worth listing.
  if (!is_error(m->name, code)) return;
  Error e;
  e.unix_ms = unix_ms_now();
  e.tenant = tenant;
  e.method = m->name;
  e.code = code;
  e.message = message.size() > 300 ? message.substr(0, 300) + "..." : message;
  std::lock_guard<std::mutex> lock(mu_);
  errors_.push_back(std::move(e));
  while (errors_.size() > kRecentErrors) errors_.pop_front();
}

std::vector<const RpcMetrics::Method*> RpcMetrics::methods() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const Method*> out;
  for (const auto& [name, m] : methods_) out.push_back(m.get());
  return out;
}

std::vector<RpcMetrics::Error> RpcMetrics::recent_errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {errors_.begin(), errors_.end()};
}

std::map<std::string, RpcMetrics::TenantMethod> RpcMetrics::tenant_methods(
    const std::string& tenant) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_tenant_.find(tenant);
  return it == by_tenant_.end() ? std::map<std::string, TenantMethod>{} : it->second;
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> make_metrics_interceptor(
    std::shared_ptr<RpcMetrics> metrics) {
  return std::make_unique<MetricsInterceptorFactory>(std::move(metrics));
}

// ---------------------------------------------------------------- Monitor

// Cumulative counters at one instant (rates are differences of two).
struct Monitor::Snapshot {
  SteadyClock::time_point at;
  int64_t rpcs = 0, errors = 0;
  std::array<int64_t, RpcMetrics::kBuckets.size() + 1> latency{};  // all methods but Attach
  int64_t latency_ns = 0, latency_count = 0;
  int64_t graphs = 0, ops = 0;
  int64_t bytes_in = 0, bytes_out = 0, bytes_between = 0;  // host->device, device->host, peer+staged
  std::vector<int64_t> busy_us;
};

// One point of the charts: rates over the interval before it, and levels at its end.
struct Monitor::Sample {
  int64_t unix_ms = 0;
  double rpc_per_s = 0, errors_per_s = 0, graphs_per_s = 0, ops_per_s = 0;
  double bytes_in_per_s = 0, bytes_out_per_s = 0, bytes_between_per_s = 0;
  double latency_mean_ms = -1, latency_p50_ms = -1, latency_p99_ms = -1;  // -1: no calls
  int64_t sessions = 0;
  std::vector<int64_t> memory_used, queue_depth;
  std::vector<double> busy;  // fraction of the interval each device's queue was running work
};

Monitor::Monitor(MonitorSources sources, std::chrono::milliseconds interval, size_t capacity)
    : src_(std::move(sources)),
      interval_(std::max(interval, std::chrono::milliseconds(10))),
      capacity_(std::max<size_t>(capacity, 2)) {
  sample();  // the baseline the first rates are measured from
  thread_ = std::thread([this] { loop(); });
}

Monitor::~Monitor() { stop(); }

void Monitor::stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Monitor::set_http_address(std::string address) {
  std::lock_guard<std::mutex> lock(mu_);
  http_address_ = std::move(address);
}

void Monitor::loop() {
  auto next = SteadyClock::now() + interval_;
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (!stop_cv_.wait_until(lock, next, [this] { return stopping_; })) {
    lock.unlock();
    sample();
    lock.lock();
    next += interval_;
    const auto now = SteadyClock::now();
    if (next < now) next = now + interval_;  // fell behind (a stopped process): no burst
  }
}

void Monitor::sample() {
  auto snap = std::make_shared<Snapshot>();
  snap->at = SteadyClock::now();
  for (const auto* m : src_.rpc->methods()) {
    for (int c = 0; c < RpcMetrics::kCodes; ++c) {
      const int64_t n = m->codes[c].load(std::memory_order_relaxed);
      snap->rpcs += n;
      if (is_error(m->name, c)) snap->errors += n;
    }
    if (long_lived(m->name)) continue;
    for (size_t b = 0; b < snap->latency.size(); ++b) {
      const int64_t n = m->buckets[b].load(std::memory_order_relaxed);
      snap->latency[b] += n;
      snap->latency_count += n;
    }
    snap->latency_ns += m->sum_ns.load(std::memory_order_relaxed);
  }
  const EngineMetrics em = src_.engine->metrics();
  for (const auto& d : em.devices) {
    snap->graphs += d.graphs;
    snap->ops += d.ops;
    snap->busy_us.push_back(d.busy_us);
  }
  snap->bytes_in = em.bytes_host_to_device + src_.rpc->shm_in_bytes.load();
  snap->bytes_out = em.bytes_device_to_host + src_.rpc->shm_out_bytes.load();
  snap->bytes_between = em.bytes_peer + em.bytes_staged;
  const std::vector<DeviceInfo> devices = src_.engine->devices();
  const int64_t sessions = em.sessions_open;  // one engine session per broker session

  std::shared_ptr<const Snapshot> prev;
  {
    std::lock_guard<std::mutex> lock(mu_);
    prev = last_;
    last_ = snap;
  }
  if (!prev) return;
  const double dt = std::chrono::duration<double>(snap->at - prev->at).count();
  if (dt <= 0) return;
  auto s = std::make_shared<Sample>();
  s->unix_ms = unix_ms_now();
  s->rpc_per_s = (snap->rpcs - prev->rpcs) / dt;
  s->errors_per_s = (snap->errors - prev->errors) / dt;
  s->graphs_per_s = (snap->graphs - prev->graphs) / dt;
  s->ops_per_s = (snap->ops - prev->ops) / dt;
  s->bytes_in_per_s = (snap->bytes_in - prev->bytes_in) / dt;
  s->bytes_out_per_s = (snap->bytes_out - prev->bytes_out) / dt;
  s->bytes_between_per_s = (snap->bytes_between - prev->bytes_between) / dt;
  std::array<int64_t, RpcMetrics::kBuckets.size() + 1> delta{};
  for (size_t b = 0; b < delta.size(); ++b) delta[b] = snap->latency[b] - prev->latency[b];
  const int64_t calls = snap->latency_count - prev->latency_count;
  if (calls > 0) {
    s->latency_mean_ms = (snap->latency_ns - prev->latency_ns) / 1e6 / calls;
    s->latency_p50_ms = quantile(delta, 0.5) * 1e3;
    s->latency_p99_ms = quantile(delta, 0.99) * 1e3;
  }
  s->sessions = sessions;
  for (size_t i = 0; i < devices.size(); ++i) {
    s->memory_used.push_back(devices[i].memory_in_use);
    s->queue_depth.push_back(i < em.devices.size() ? em.devices[i].queue_depth : 0);
    const int64_t busy = i < snap->busy_us.size() && i < prev->busy_us.size()
                             ? snap->busy_us[i] - prev->busy_us[i]
                             : 0;
    s->busy.push_back(std::clamp(busy / 1e6 / dt, 0.0, 1.0));
  }
  std::lock_guard<std::mutex> lock(mu_);
  samples_.push_back(std::move(s));
  while (samples_.size() > capacity_) samples_.pop_front();
}

bool Monitor::ready(std::string* why) const {
  if (src_.accepting && !src_.accepting()) {
    if (why) *why = "the gRPC server is not accepting calls (starting or stopping)";
    return false;
  }
  if (src_.engine->devices().empty()) {
    if (why) *why = "the engine has no devices (TENSORD_DEVICES filters out every device?)";
    return false;
  }
  if (why) *why = "ready";
  return true;
}

// A tenant's /metrics: the devices' capacity, its own sessions and bytes, its own calls.
std::string Monitor::tenant_prometheus(const std::string& tenant) const {
  Exposition x;
  x.family("tensord_device_memory_total_bytes", "gauge",
           "Memory the engine may allocate on the device.");
  for (const auto& d : src_.engine->devices())
    x.sample("tensord_device_memory_total_bytes", device_labels(d.name, d.kind), d.memory_bytes);
  int64_t open = 0, bytes = 0, regions = 0, region_bytes = 0;
  if (src_.sessions)
    for (const auto& s : src_.sessions())
      if (s.tenant == tenant) {
        ++open;
        bytes += s.bytes;
        regions += s.regions;
        region_bytes += s.region_bytes;
      }
  x.family("tensord_tenant_sessions_open", "gauge", "Sessions open by this token's tenant.");
  x.sample("tensord_tenant_sessions_open", "", open);
  x.family("tensord_tenant_bytes", "gauge",
           "Bytes held by this token's tenant's sessions (tensors, uploads, staged models).");
  x.sample("tensord_tenant_bytes", "", bytes);
  x.family("tensord_tenant_regions_mapped", "gauge",
           "Shared-memory regions mapped for this token's tenant's sessions.");
  x.sample("tensord_tenant_regions_mapped", "", regions);
  x.family("tensord_tenant_region_bytes", "gauge",
           "Bytes of those regions (they count against the memory limits).");
  x.sample("tensord_tenant_region_bytes", "", region_bytes);
  const auto methods = src_.rpc->tenant_methods(tenant);
  x.family("tensord_rpc_requests_total", "counter",
           "gRPC calls finished, by method and status code (this tenant's).");
  std::array<int64_t, RpcMetrics::kCodes> by_code{};
  for (const auto& [name, m] : methods)
    for (int c = 0; c < RpcMetrics::kCodes; ++c) {
      if (m.codes[c] == 0) continue;
      if (is_error(name, c)) by_code[c] += m.codes[c];
      x.sample("tensord_rpc_requests_total",
               "method=\"" + label(name) + "\",code=\"" + kCodeNames[c] + "\"", m.codes[c]);
    }
  x.family("tensord_rpc_errors_total", "counter",
           "gRPC calls that ended with an error, by code (this tenant's).");
  for (int c = 1; c < RpcMetrics::kCodes; ++c)
    if (by_code[c])
      x.sample("tensord_rpc_errors_total", std::string("code=\"") + kCodeNames[c] + "\"",
               by_code[c]);
  x.family("tensord_rpc_duration_seconds", "histogram",
           "gRPC call latency, by method (this tenant's; Attach: a session's lifetime).");
  for (const auto& [name, m] : methods) {
    const std::string ml = "method=\"" + label(name) + "\"";
    int64_t cum = 0;
    for (size_t b = 0; b < m.buckets.size(); ++b) {
      cum += m.buckets[b];
      const std::string le =
          b < RpcMetrics::kBuckets.size() ? number(RpcMetrics::kBuckets[b]) : "+Inf";
      x.sample("tensord_rpc_duration_seconds_bucket", ml + ",le=\"" + le + "\"", cum);
    }
    x.sample("tensord_rpc_duration_seconds_sum", ml, static_cast<double>(m.sum_ns) / 1e9);
    x.sample("tensord_rpc_duration_seconds_count", ml, cum);
  }
  return x.take();
}

std::string Monitor::prometheus(const StatusView& view) const {
  Exposition x;
  x.family("tensord_build_info", "gauge", "The broker's version (always 1).");
  x.sample("tensord_build_info", "version=\"" + label(kVersion) + "\"", int64_t{1});
  x.family("tensord_start_time_seconds", "gauge", "When the broker started, in Unix seconds.");
  x.sample("tensord_start_time_seconds", "",
           std::chrono::duration<double>(started_.time_since_epoch()).count());
  x.family("tensord_ready", "gauge", "1 when the broker is ready (see /readyz), else 0.");
  x.sample("tensord_ready", "", int64_t{ready() ? 1 : 0});
  if (!view.all) {
    return x.take() + tenant_prometheus(view.tenant);
  }
  const EngineMetrics em = src_.engine->metrics();
  const std::vector<DeviceInfo> devices = src_.engine->devices();
  const auto methods = src_.rpc->methods();

  // ---- devices
  struct DeviceGauge {
    const char* name;
    const char* help;
    int64_t DeviceInfo::*field;
  };
  for (const DeviceGauge& g :
       {DeviceGauge{"tensord_device_memory_total_bytes", "Memory the engine may allocate on the device.",
                    &DeviceInfo::memory_bytes},
        DeviceGauge{"tensord_device_memory_used_bytes", "Bytes held by tensors on the device.",
                    &DeviceInfo::memory_in_use},
        DeviceGauge{"tensord_device_memory_reserved_bytes",
                    "Bytes the caching allocator holds from the device (used + cached).",
                    &DeviceInfo::memory_reserved},
        DeviceGauge{"tensord_device_memory_cached_bytes",
                    "Bytes held by the constants of cached compiled graphs (not in used; in "
                    "reserved).",
                    &DeviceInfo::memory_cached},
        DeviceGauge{"tensord_device_memory_peak_bytes",
                    "The most bytes held on the device at once since the broker started.",
                    &DeviceInfo::memory_peak}}) {
    x.family(g.name, "gauge", g.help);
    for (const auto& d : devices) x.sample(g.name, device_labels(d.name, d.kind), d.*(g.field));
  }
  struct DeviceCounter {
    const char* name;
    const char* type;
    const char* help;
    int64_t EngineMetrics::Device::*field;
    double scale;
  };
  for (const DeviceCounter& c :
       {DeviceCounter{"tensord_device_tensors", "gauge", "Tensors of open sessions living on the device.",
                      &EngineMetrics::Device::tensors, 1},
        DeviceCounter{"tensord_device_graphs_executed_total", "counter",
                      "Graphs submitted to the device (execute and run calls; one op is a graph of one node).",
                      &EngineMetrics::Device::graphs, 1},
        DeviceCounter{"tensord_device_ops_executed_total", "counter",
                      "Nodes of the graphs submitted to the device.", &EngineMetrics::Device::ops, 1},
        DeviceCounter{"tensord_device_queue_depth", "gauge",
                      "Tasks waiting in the device's queue (uploads, reads, copies, graphs).",
                      &EngineMetrics::Device::queue_depth, 1},
        DeviceCounter{"tensord_device_queue_tasks_total", "counter",
                      "Tasks the device's queue started.", &EngineMetrics::Device::tasks, 1},
        DeviceCounter{"tensord_device_queue_wait_seconds_total", "counter",
                      "Time tasks waited in the device's queue before they started, in all.",
                      &EngineMetrics::Device::queue_wait_us, 1e-6},
        DeviceCounter{"tensord_device_busy_seconds_total", "counter",
                      "Time the device's queue spent running work.",
                      &EngineMetrics::Device::busy_us, 1e-6}}) {
    x.family(c.name, c.type, c.help);
    for (const auto& d : em.devices) {
      const int64_t v = d.*(c.field);
      if (c.scale == 1)
        x.sample(c.name, device_labels(d.name, d.kind), v);
      else
        x.sample(c.name, device_labels(d.name, d.kind), static_cast<double>(v) * c.scale);
    }
  }
  x.family("tensord_cpu_fallback_nodes_total", "counter",
           "Nodes placed on cpu:0 because the requested device does not support their op "
           "(counted when a graph is compiled).");
  for (const auto& [key, n] : em.fallbacks) {
    const size_t sp = key.find(' ');
    const std::string dev = key.substr(0, sp);
    const std::string op = sp == std::string::npos ? "" : key.substr(sp + 1);
    std::string kind;
    for (const auto& d : devices)
      if (d.name == dev) kind = d.kind;
    x.sample("tensord_cpu_fallback_nodes_total",
             device_labels(dev, kind) + ",op=\"" + label(op) + "\"", n);
  }

  // ---- engine
  x.family("tensord_sessions_open", "gauge", "Sessions open on the broker.");
  x.sample("tensord_sessions_open", "", em.sessions_open);
  if (src_.sessions) {
    int64_t regions = 0, region_bytes = 0;
    for (const auto& s : src_.sessions()) {
      regions += s.regions;
      region_bytes += s.region_bytes;
    }
    x.family("tensord_regions_mapped", "gauge",
             "Clients' shared-memory regions mapped by the broker, all sessions.");
    x.sample("tensord_regions_mapped", "", regions);
    x.family("tensord_region_bytes", "gauge",
             "Bytes of those regions (each counts against its session's and tenant's memory "
             "limits).");
    x.sample("tensord_region_bytes", "", region_bytes);
  }
  if (src_.tenants && src_.sessions) {  // the operator's view: each tenant's (from the token file)
    struct TenantSums {
      int64_t first = 0, second = 0, region_bytes = 0;  // sessions, bytes, region bytes
    };
    std::map<std::string, TenantSums> by_tenant;
    for (const auto& s : src_.sessions()) {
      auto& t = by_tenant[s.tenant];
      ++t.first;
      t.second += s.bytes;
      t.region_bytes += s.region_bytes;
    }
    x.family("tensord_tenant_sessions_open", "gauge", "Sessions open, by tenant.");
    for (const auto& [name, t] : by_tenant)
      x.sample("tensord_tenant_sessions_open", "tenant=\"" + label(name) + "\"", t.first);
    x.family("tensord_tenant_bytes", "gauge",
             "Bytes held by each tenant's sessions (tensors, uploads, staged models).");
    for (const auto& [name, t] : by_tenant)
      x.sample("tensord_tenant_bytes", "tenant=\"" + label(name) + "\"", t.second);
    x.family("tensord_tenant_region_bytes", "gauge",
             "Bytes of shared-memory regions mapped for each tenant's sessions.");
    for (const auto& [name, t] : by_tenant)
      x.sample("tensord_tenant_region_bytes", "tenant=\"" + label(name) + "\"", t.region_bytes);
  }
  x.family("tensord_models_loaded", "gauge", "Models loaded by the open sessions.");
  x.sample("tensord_models_loaded", "", em.models_loaded);
  x.family("tensord_executables_cached", "gauge", "Compiled graphs in the executable cache.");
  x.sample("tensord_executables_cached", "", em.executables_cached);
  x.family("tensord_executable_cache_bytes", "gauge",
           "Estimated bytes of the compiled graphs in the cache.");
  x.sample("tensord_executable_cache_bytes", "", em.executable_cache_bytes);
  x.family("tensord_executable_cache_hits_total", "counter",
           "Graphs whose compiled form was found in the cache.");
  x.sample("tensord_executable_cache_hits_total", "", em.cache_hits);
  x.family("tensord_executable_compiles_total", "counter",
           "Graphs compiled (cache misses and models' new input types).");
  x.sample("tensord_executable_compiles_total", "", em.compiles);
  x.family("tensord_executable_compiles_waited_total", "counter",
           "Compiles that waited for a place: their tenant had --max-compiles-per-tenant "
           "running.");
  x.sample("tensord_executable_compiles_waited_total", "", em.compiles_waited);
  x.family("tensord_uploads_total", "counter", "Tensors uploaded from host memory.");
  x.sample("tensord_uploads_total", "", em.uploads);
  x.family("tensord_reads_total", "counter", "Tensors read back to host memory.");
  x.sample("tensord_reads_total", "", em.reads);
  x.family("tensord_copies_total", "counter", "Tensors copied between devices, by path.");
  x.sample("tensord_copies_total", "path=\"same_device\"", em.copies_same_device);
  x.sample("tensord_copies_total", "path=\"peer\"", em.copies_peer);
  x.sample("tensord_copies_total", "path=\"staged\"", em.copies_staged);
  x.sample("tensord_copies_total", "path=\"mapped\"", em.copies_mapped);
  x.family("tensord_bytes_moved_total", "counter",
           "Bytes moved, by path: host_to_device, device_to_host, peer (device to device), "
           "staged (through a host buffer), shared_memory_in / shared_memory_out (clients' "
           "shared-memory regions).");
  x.sample("tensord_bytes_moved_total", "path=\"host_to_device\"", em.bytes_host_to_device);
  x.sample("tensord_bytes_moved_total", "path=\"device_to_host\"", em.bytes_device_to_host);
  x.sample("tensord_bytes_moved_total", "path=\"peer\"", em.bytes_peer);
  x.sample("tensord_bytes_moved_total", "path=\"staged\"", em.bytes_staged);
  x.sample("tensord_bytes_moved_total", "path=\"shared_memory_in\"",
           src_.rpc->shm_in_bytes.load());
  x.sample("tensord_bytes_moved_total", "path=\"shared_memory_out\"",
           src_.rpc->shm_out_bytes.load());
  x.family("tensord_implicit_moves_total", "counter",
           "Inputs moved to the executing device by an execute call.");
  x.sample("tensord_implicit_moves_total", "", em.implicit_moves);
  x.family("tensord_node_errors_total", "counter", "Graph outputs that ended in an error.");
  x.sample("tensord_node_errors_total", "", em.node_errors);
  x.family("tensord_tasks_cancelled_total", "counter",
           "Work dropped or stopped (session closed, call gave up).");
  x.sample("tensord_tasks_cancelled_total", "", em.tasks_cancelled);
  x.family("tensord_tasks_preempted_total", "counter",
           "Work run inside another session's time slice that ran past it and was redone.");
  x.sample("tensord_tasks_preempted_total", "", em.tasks_preempted);

  // ---- gRPC calls
  x.family("tensord_rpc_requests_total", "counter", "gRPC calls finished, by method and status code.");
  std::array<int64_t, RpcMetrics::kCodes> by_code{};
  for (const auto* m : methods)
    for (int c = 0; c < RpcMetrics::kCodes; ++c) {
      const int64_t n = m->codes[c].load(std::memory_order_relaxed);
      if (n == 0) continue;
      if (is_error(m->name, c)) by_code[c] += n;
      x.sample("tensord_rpc_requests_total",
               "method=\"" + label(m->name) + "\",code=\"" + kCodeNames[c] + "\"", n);
    }
  x.family("tensord_rpc_errors_total", "counter", "gRPC calls that ended with an error, by code.");
  for (int c = 1; c < RpcMetrics::kCodes; ++c)
    if (by_code[c]) x.sample("tensord_rpc_errors_total", std::string("code=\"") + kCodeNames[c] + "\"", by_code[c]);
  x.family("tensord_rpc_in_flight", "gauge", "gRPC calls in progress, by method.");
  for (const auto* m : methods)
    x.sample("tensord_rpc_in_flight", "method=\"" + label(m->name) + "\"",
             m->in_flight.load(std::memory_order_relaxed));
  x.family("tensord_rpc_duration_seconds", "histogram",
           "gRPC call latency, from the call's start to its status, by method (Attach: a "
           "session's lifetime).");
  for (const auto* m : methods) {
    const std::string ml = "method=\"" + label(m->name) + "\"";
    int64_t cum = 0;
    for (size_t b = 0; b < m->buckets.size(); ++b) {
      cum += m->buckets[b].load(std::memory_order_relaxed);
      const std::string le =
          b < RpcMetrics::kBuckets.size() ? number(RpcMetrics::kBuckets[b]) : "+Inf";
      x.sample("tensord_rpc_duration_seconds_bucket", ml + ",le=\"" + le + "\"", cum);
    }
    x.sample("tensord_rpc_duration_seconds_sum", ml,
             static_cast<double>(m->sum_ns.load(std::memory_order_relaxed)) / 1e9);
    x.sample("tensord_rpc_duration_seconds_count", ml, cum);
  }
  // Named models (operators only: a model's traffic is every tenant's).
  return x.take() + (src_.model_metrics ? src_.model_metrics() : std::string());
}

nlohmann::json Monitor::status(int history_seconds, const StatusView& view) const {
  using nlohmann::json;
  const bool all = view.all;
  const EngineMetrics em = src_.engine->metrics();
  const std::vector<DeviceInfo> devices = src_.engine->devices();
  const auto methods = src_.rpc->methods();
  json out;
  out["version"] = kVersion;
  out["address"] = src_.grpc_address;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out["http_address"] = http_address_;
  }
  const auto now = std::chrono::system_clock::now();
  out["now_unix_ms"] = unix_ms_now();
  out["started_unix_ms"] =
      std::chrono::duration_cast<std::chrono::milliseconds>(started_.time_since_epoch()).count();
  out["uptime_s"] = std::chrono::duration<double>(now - started_).count();
  std::string why;
  out["ready"] = ready(&why);
  out["ready_reason"] = why;
  out["interval_s"] = std::chrono::duration<double>(interval_).count();
  out["view"] = {{"operator", all}, {"tenant", all ? json(nullptr) : json(view.tenant)}};

  std::map<std::string, int64_t> fallbacks_by_device;
  for (const auto& [key, n] : em.fallbacks) fallbacks_by_device[key.substr(0, key.find(' '))] += n;
  json devs = json::array();
  for (size_t i = 0; i < devices.size(); ++i) {
    const auto& d = devices[i];
    json j = {{"name", d.name},
              {"kind", d.kind},
              {"index", d.index},
              {"vendor", d.vendor},
              {"model", d.model},
              {"backend", d.backend},
              {"threads", d.threads},
              {"memory_total_bytes", d.memory_bytes},
              {"memory_used_bytes", d.memory_in_use},
              {"memory_reserved_bytes", d.memory_reserved},
              {"memory_cached_bytes", d.memory_cached},
              {"memory_peak_bytes", d.memory_peak},
              {"cpu_fallback_nodes", fallbacks_by_device[d.name]}};
    if (!all) {  // a tenant: the capacity only (the rest is every tenant's activity)
      for (const char* k : {"memory_used_bytes", "memory_reserved_bytes", "memory_cached_bytes",
                            "memory_peak_bytes", "cpu_fallback_nodes", "tensors", "graphs", "ops",
                            "queue_depth", "queue_tasks", "queue_wait_s", "busy_s"})
        j[k] = 0;
      devs.push_back(std::move(j));
      continue;
    }
    for (const auto& e : em.devices) {
      if (e.name != d.name) continue;
      j["tensors"] = e.tensors;
      j["graphs"] = e.graphs;
      j["ops"] = e.ops;
      j["queue_depth"] = e.queue_depth;
      j["queue_tasks"] = e.tasks;
      j["queue_wait_s"] = e.queue_wait_us / 1e6;
      j["busy_s"] = e.busy_us / 1e6;
    }
    devs.push_back(std::move(j));
  }
  out["devices"] = std::move(devs);

  std::vector<SessionSummary> sessions;
  if (src_.sessions) sessions = src_.sessions();
  if (!all)
    std::erase_if(sessions, [&](const SessionSummary& s) { return s.tenant != view.tenant; });
  int64_t session_bytes = 0, region_bytes = 0, regions = 0;
  for (const auto& s : sessions) {
    session_bytes += s.bytes;
    region_bytes += s.region_bytes;
    regions += s.regions;
  }
  json sess = {{"open", sessions.size()},
               {"regions", regions},
               {"region_bytes", region_bytes},
               {"list", json::array()}};
  std::sort(sessions.begin(), sessions.end(),
            [](const SessionSummary& a, const SessionSummary& b) { return a.bytes > b.bytes; });
  for (size_t i = 0; i < sessions.size() && i < 100; ++i) {
    const auto& s = sessions[i];
    sess["list"].push_back({{"tenant", s.tenant},
                            {"bytes", s.bytes},
                            {"in_flight", s.in_flight},
                            {"regions", s.regions},
                            {"region_bytes", s.region_bytes},
                            {"age_s", s.age_s},
                            {"idle_s", s.idle_s}});
  }
  out["sessions"] = std::move(sess);
  if (!all)
    out["tenant"] = {{"name", view.tenant},
                     {"sessions", sessions.size()},
                     {"bytes", session_bytes},
                     {"region_bytes", region_bytes}};

  json totals = {{"graphs", 0},
                 {"ops", 0},
                 {"compiles", em.compiles},
                 {"cache_hits", em.cache_hits},
                 {"executables_cached", em.executables_cached},
                 {"models_loaded", em.models_loaded},
                 {"uploads", em.uploads},
                 {"reads", em.reads},
                 {"node_errors", em.node_errors},
                 {"bytes_moved",
                  {{"host_to_device", em.bytes_host_to_device},
                   {"device_to_host", em.bytes_device_to_host},
                   {"peer", em.bytes_peer},
                   {"staged", em.bytes_staged},
                   {"shared_memory_in", src_.rpc->shm_in_bytes.load()},
                   {"shared_memory_out", src_.rpc->shm_out_bytes.load()}}}};
  int64_t graphs = 0, ops = 0;
  for (const auto& d : em.devices) {
    graphs += d.graphs;
    ops += d.ops;
  }
  totals["graphs"] = graphs;
  totals["ops"] = ops;
  if (!all) {  // every tenant's work: none of it shown to one
    for (auto it = totals.begin(); it != totals.end(); ++it)
      if (it->is_number()) *it = 0;
    for (auto it = totals["bytes_moved"].begin(); it != totals["bytes_moved"].end(); ++it) *it = 0;
  }

  json ms = json::array();
  json by_code = json::object();
  int64_t rpcs = 0, errors = 0;
  // A tenant's: its own calls, by method.
  struct Row {
    std::string name;
    std::array<int64_t, RpcMetrics::kCodes> codes{};
    std::array<int64_t, RpcMetrics::kBuckets.size() + 1> buckets{};
    int64_t sum_ns = 0, in_flight = 0;
  };
  std::vector<Row> rows;
  if (all) {
    for (const auto* m : methods) {
      Row r;
      r.name = m->name;
      for (int c = 0; c < RpcMetrics::kCodes; ++c)
        r.codes[c] = m->codes[c].load(std::memory_order_relaxed);
      for (size_t i = 0; i < r.buckets.size(); ++i)
        r.buckets[i] = m->buckets[i].load(std::memory_order_relaxed);
      r.sum_ns = m->sum_ns.load(std::memory_order_relaxed);
      r.in_flight = m->in_flight.load(std::memory_order_relaxed);
      rows.push_back(std::move(r));
    }
  } else {
    for (const auto& [name, t] : src_.rpc->tenant_methods(view.tenant)) {
      Row r;
      r.name = name;
      r.codes = t.codes;
      r.buckets = t.buckets;
      r.sum_ns = t.sum_ns;
      rows.push_back(std::move(r));
    }
  }
  for (const Row& m : rows) {
    int64_t count = 0, errs = 0;
    for (int c = 0; c < RpcMetrics::kCodes; ++c) {
      const int64_t n = m.codes[c];
      count += n;
      if (n && is_error(m.name, c)) {
        errs += n;
        by_code[kCodeNames[c]] = by_code.value(kCodeNames[c], int64_t{0}) + n;
      }
    }
    rpcs += count;
    errors += errs;
    const auto& b = m.buckets;
    const double sum_ms = m.sum_ns / 1e6;
    ms.push_back({{"name", m.name},
                  {"count", count},
                  {"errors", errs},
                  {"in_flight", m.in_flight},
                  {"mean_ms", count ? sum_ms / count : 0.0},
                  {"p50_ms", quantile(b, 0.5) * 1e3},
                  {"p99_ms", quantile(b, 0.99) * 1e3}});
  }
  totals["rpcs"] = rpcs;
  totals["rpc_errors"] = errors;
  out["totals"] = std::move(totals);
  out["methods"] = std::move(ms);
  out["errors_by_code"] = std::move(by_code);

  std::vector<std::shared_ptr<const Sample>> samples;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t cutoff = unix_ms_now() - int64_t{history_seconds} * 1000;
    for (const auto& s : samples_)
      if (all && history_seconds > 0 && s->unix_ms >= cutoff) samples.push_back(s);
  }
  json cols = {{"t", json::array()},
               {"rpc_per_s", json::array()},
               {"errors_per_s", json::array()},
               {"graphs_per_s", json::array()},
               {"ops_per_s", json::array()},
               {"bytes_in_per_s", json::array()},
               {"bytes_out_per_s", json::array()},
               {"bytes_between_per_s", json::array()},
               {"latency_mean_ms", json::array()},
               {"latency_p50_ms", json::array()},
               {"latency_p99_ms", json::array()},
               {"sessions", json::array()},
               {"memory_used_bytes", json::array()},
               {"queue_depth", json::array()},
               {"busy", json::array()}};
  auto ms_or_null = [](double v) { return v < 0 ? json(nullptr) : json(v); };
  for (const auto& s : samples) {
    cols["t"].push_back(s->unix_ms);
    cols["rpc_per_s"].push_back(s->rpc_per_s);
    cols["errors_per_s"].push_back(s->errors_per_s);
    cols["graphs_per_s"].push_back(s->graphs_per_s);
    cols["ops_per_s"].push_back(s->ops_per_s);
    cols["bytes_in_per_s"].push_back(s->bytes_in_per_s);
    cols["bytes_out_per_s"].push_back(s->bytes_out_per_s);
    cols["bytes_between_per_s"].push_back(s->bytes_between_per_s);
    cols["latency_mean_ms"].push_back(ms_or_null(s->latency_mean_ms));
    cols["latency_p50_ms"].push_back(ms_or_null(s->latency_p50_ms));
    cols["latency_p99_ms"].push_back(ms_or_null(s->latency_p99_ms));
    cols["sessions"].push_back(s->sessions);
    cols["memory_used_bytes"].push_back(s->memory_used);  // per device, devices' order
    cols["queue_depth"].push_back(s->queue_depth);
    cols["busy"].push_back(s->busy);
  }
  out["samples"] = std::move(cols);

  json errs = json::array();
  for (const auto& e : src_.rpc->recent_errors()) {
    if (!all && e.tenant != view.tenant) continue;
    json j = {{"unix_ms", e.unix_ms},
              {"method", e.method},
              {"code", kCodeNames[e.code]},
              {"message", e.message}};
    if (all && src_.tenants) j["tenant"] = e.tenant;
    errs.push_back(std::move(j));
  }
  out["recent_errors"] = std::move(errs);

  // Named models (`tensord serve --models DIR`), shared by every tenant: their state (ready,
  // or unavailable with the reason), device, inputs and outputs.
  json models = json::array();
  for (const ModelInfo& m : src_.engine->named_models()) {
    auto values = [](const std::vector<ValueInfo>& vs) {
      json a = json::array();
      for (const auto& v : vs)
        a.push_back(
            {{"name", v.name}, {"dtype", dtype_name(v.type.dtype)}, {"shape", v.type.shape}});
      return a;
    };
    json j = {{"name", m.name},
              {"state", m.ready ? "ready" : "unavailable"},
              {"ready", m.ready},
              {"device", m.device},
              {"inputs", values(m.inputs)},
              {"outputs", values(m.outputs)},
              {"weight_bytes", m.weight_bytes}};
    if (!m.ready) j["reason"] = m.reason;
    models.push_back(std::move(j));
  }
  out["models"] = std::move(models);
  return out;
}

}  // namespace tensord::rpc
