#include "rpc/remote_client.h"

#include <fcntl.h>
#include <poll.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/rpc_method.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <utility>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "core/errors.h"
#include "rpc/region_channel.h"
#include "rpc/wire.h"
#include "tensord.grpc.pb.h"
#include "tensord/version.h"

namespace tensord::rpc {

namespace {
using std::chrono::milliseconds;
constexpr milliseconds kNoDeadline{0};
constexpr milliseconds kCloseTimeout{2000};
// Values answered inline and kept for the read() that usually follows (per client).
constexpr int64_t kInlineCacheBytes = 64 << 20;
// Shared-memory regions kept for reuse (their pages stay mapped: no fault on the next use).
constexpr size_t kIdleRegions = 4;
constexpr int64_t kMinRegionBytes = 16 << 20;
// Uploads at least this large lend their region to the broker (it computes on the bytes where
// they are) instead of having them copied; at most this many regions are lent at once.
constexpr int64_t kLendMinBytes = 4 << 20;
constexpr size_t kMaxLentRegions = 64;
// read() of a value at least this large returns a tensor over the region the broker wrote it
// into (one copy, as an upload); smaller ones are copied out (a region per small tensor the
// caller keeps would cost more than the copy).
constexpr int64_t kAdoptMinBytes = 8 << 20;

// Counts the slices gRPC holds over a caller's memory (zero-copy sends): the caller's bytes
// must stay valid until the last one is released, which can be after the call's status came
// back (a chunk still queued for the socket when the broker answered an error).
class SliceTracker {
 public:
  grpc::Slice wrap(const void* data, size_t n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++live_;
    }
    return grpc::Slice(const_cast<void*>(data), n, &SliceTracker::unref, this);
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return live_ == 0; });
  }

 private:
  static void unref(void* p) {
    auto* t = static_cast<SliceTracker*>(p);
    std::lock_guard<std::mutex> lock(t->mu_);
    if (--t->live_ == 0) t->cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t live_ = 0;
};

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// A unix socket, or a loopback address: the broker can only be on this host.
bool local_address(const std::string& a) {
  if (a.rfind("unix:", 0) == 0) return true;
  std::string host = a.substr(0, a.rfind(':'));
  if (host.rfind("ipv4:", 0) == 0) host = host.substr(5);
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "[::1]" || host == "::1";
}

// A token as configured, trimmed of surrounding whitespace (a token file read into the
// variable keeps its newline); anything but printable ASCII inside is refused here: gRPC
// would abort the process on such a header value.
Result<std::string> clean_token(const std::string& raw, const char* from) {
  size_t b = 0, e = raw.size();
  while (b < e && std::isspace(static_cast<unsigned char>(raw[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(raw[e - 1]))) --e;
  for (size_t i = b; i < e; ++i) {
    const auto c = static_cast<unsigned char>(raw[i]);
    if (c < 0x21 || c > 0x7e)
      return errors::InvalidArgument(
          "{}: the token has {} at position {}; tokens are printable ASCII without spaces",
          from, c == ' ' ? std::string("a space") : fmt::format("byte 0x{:02x}", c), i - b);
  }
  return raw.substr(b, e - b);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The channel's credentials: TLS when a CA, client certificate or TENSORD_TLS asks for it
// (RemoteClientOptions first, then TENSORD_TLS_CA, TENSORD_TLS_CERT, TENSORD_TLS_KEY), else
// plain HTTP/2.
Result<std::shared_ptr<grpc::ChannelCredentials>> channel_credentials(
    const RemoteClientOptions& o) {
  const auto pick = [](const std::string& v, const char* env) {
    if (!v.empty()) return v;
    const char* e = std::getenv(env);
    return std::string(e ? e : "");
  };
  const std::string ca = pick(o.tls_ca_file, "TENSORD_TLS_CA");
  const std::string cert = pick(o.tls_cert_file, "TENSORD_TLS_CERT");
  const std::string key = pick(o.tls_key_file, "TENSORD_TLS_KEY");
  const std::string flag = pick("", "TENSORD_TLS");
  const bool tls = o.tls || !ca.empty() || !cert.empty() || (!flag.empty() && flag != "0");
  if (!tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  for (auto [name, path, dst] :
       {std::tuple<const char*, const std::string*, std::string*>{"TLS CA (TENSORD_TLS_CA)", &ca,
                                                                  &ssl.pem_root_certs},
        {"TLS client certificate (TENSORD_TLS_CERT)", &cert, &ssl.pem_cert_chain},
        {"TLS client key (TENSORD_TLS_KEY)", &key, &ssl.pem_private_key}}) {
    if (path->empty()) continue;
    *dst = read_file(*path);
    if (dst->find("-----BEGIN ") == std::string::npos)
      return errors::InvalidArgument("{}: cannot read a PEM file at '{}'", name, *path);
  }
  if (ssl.pem_cert_chain.empty() != ssl.pem_private_key.empty())
    return errors::InvalidArgument(
        "a TLS client certificate needs its key and the other way round (TENSORD_TLS_CERT, "
        "TENSORD_TLS_KEY)");
  return grpc::SslCredentials(ssl);
}

bool creds_are_tls(const RemoteClientOptions& o) {
  const auto set = [](const char* env) {
    const char* e = std::getenv(env);
    return e && *e;
  };
  const char* flag = std::getenv("TENSORD_TLS");
  return o.tls || !o.tls_ca_file.empty() || !o.tls_cert_file.empty() || set("TENSORD_TLS_CA") ||
         set("TENSORD_TLS_CERT") || (flag && *flag && std::string(flag) != "0");
}

// One memfd region of this process, mapped here and registered with the broker.
struct ShmRegion {
  int fd = -1;
  unsigned char* base = nullptr;
  int64_t size = 0;
  uint64_t id = 0;  // the broker's region id
  ~ShmRegion() {
    if (base) munmap(base, static_cast<size_t>(size));
    if (fd >= 0) close(fd);
  }
};

// Regions whose memory a read() handed to a HostTensor come back here when the tensor goes
// (from any thread, possibly after the client is gone: then they are simply unmapped).
struct ShmReturns {
  std::mutex mu;
  std::vector<std::unique_ptr<ShmRegion>> regions;
  // Regions a tensor holds now (read() results, allocate_host()): base -> {id, size}, so that
  // read_into() that memory has the broker write straight into it.
  std::map<const unsigned char*, std::pair<uint64_t, int64_t>> held;
};

struct Cached {
  Status status;
  HostTensor value;
  std::string device;
};

// Keeps the session attached to a call the broker watches: when this process dies or the
// connection drops, the call ends and the broker frees the session.
class AttachCall final : public grpc::ClientReadReactor<v1::AttachEvent> {
 public:
  void OnReadDone(bool ok) override {
    if (ok) StartRead(&event_);
  }
  void OnDone(const grpc::Status&) override {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }
  void start(v1::Tensord::Stub* stub) {
    stub->async()->Attach(&ctx, &req_, this);
    StartRead(&event_);
    StartCall();
  }
  // Cancels the call; true once gRPC is done with this object.
  bool cancel_and_wait(milliseconds timeout) {
    ctx.TryCancel();
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return done_; });
  }
  grpc::ClientContext ctx;

 private:
  v1::AttachRequest req_;
  v1::AttachEvent event_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};
}  // namespace

// Deferred releases are sent on their own once this many wait.
constexpr size_t kMaxPendingReleases = 64;

// Uploads this large go over RemoteClientOptions::upload_streams concurrent streams.
constexpr int64_t kParallelUploadMinBytes = 64 << 20;

struct RemoteClient::Impl {
  std::string address;
  RemoteClientOptions options;
  int64_t chunk_bytes = kDefaultChunkBytes;
  int64_t max_message = kMaxMessageBytes;  // the broker's (HandshakeResponse.max_message_bytes)
  bool onnx_models = false;     // the broker imports ONNX files (HandshakeResponse.onnx_models)
  int64_t max_model_bytes = 0;  // its --max-model-bytes; 0 = not told
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Tensord::Stub> stub;
  // Upload as raw messages (serialized here, the data never copied; see upload()).
  std::unique_ptr<grpc::internal::RpcMethod> raw_upload;
  // Read as raw messages (parsed here, the data copied once, into the caller's memory).
  std::unique_ptr<grpc::internal::RpcMethod> raw_read;
  // The size of the last value read through shared memory: the region asked for first.
  std::atomic<int64_t> last_read_bytes{0};

  Result<HostTensor> hand_out(std::unique_ptr<ShmRegion> region, DType dtype, Shape shape);
  Result<TensorType> shm_read_direct(TensorHandle h, void* dst, int64_t room, bool* unusable);
  Result<TensorType> stream_read(TensorHandle h, int64_t room,
                                 const std::function<void*(const TensorType&, int64_t)>& place);
  Status read_part(TensorHandle h, const TensorType& type, int64_t total, int64_t offset,
                   int64_t length, unsigned char* base, grpc::ClientContext& ctx);
  Status shm_read_parts(TensorHandle h, ShmRegion& region, unsigned char* dst, int64_t from,
                        int64_t total);
  Result<TensorType> shm_read(TensorHandle h, int64_t room,
                              const std::function<void*(const TensorType&, int64_t)>& place,
                              bool* unusable);
  Result<TensorType> read_value(TensorHandle h, int64_t room,
                                const std::function<void*(const TensorType&, int64_t)>& place);
  Result<HostTensor> shm_read_adopt(TensorHandle h, bool* unusable);

  std::string session;  // OpenSessionResponse.session_id: the "tensord-session" metadata
  int64_t memory_limit = 0;
  milliseconds lease{30000};
  std::string server_version;
  std::string default_device;
  std::vector<DeviceInfo> devices_at_connect;
  std::string broker_host_id;  // HandshakeResponse.host_id (its boot id)
  bool cuda_ipc = false;       // HandshakeResponse.cuda_ipc: it has a cuda device

  // CUDA IPC needs a broker on this host with a cuda device: FAILED_PRECONDITION saying which
  // it is not.
  Status cuda_ipc_usable() const {
    if (broker_host_id.empty() || broker_host_id != host_boot_id())
      return errors::FailedPrecondition(
          "CUDA IPC: the broker '{}' runs on another host (its boot id differs from this machine's); "
          "GPU buffers go by IPC handle only to a broker on this host: use upload()/read_into()",
          address);
    if (!cuda_ipc)
      return errors::FailedPrecondition(
          "CUDA IPC: the broker '{}' has no cuda device (or is older than CUDA IPC); see `tensord devices` "
          "on its host",
          address);
    return OkStatus();
  }

  // ---- pipelined runs (RemoteClientOptions::pipeline_runs)
  // One run() whose answer has not been taken yet: the call's state, and what it answered.
  struct PendingRun {
    grpc::ClientContext ctx;
    v1::RunModelRequest req;
    v1::RunModelResponse resp;
    std::chrono::steady_clock::time_point t0, t1;
    bool timed = false;
    bool channel = false;  // sent on the run channel: its answer is read from there
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status status;
    std::vector<TensorHandle> outputs;  // the broker's handles
  };
  // Handles that stand for a pending run's outputs have this bit (the broker's count up from
  // 1 and never reach it).
  static constexpr TensorHandle kProvisional = TensorHandle{1} << 62;
  std::atomic<bool> pipeline{false};  // options.pipeline_runs, or set_pipeline_runs()
  std::mutex runs_mu;
  std::condition_variable runs_cv;
  int64_t runs_in_flight = 0;
  uint64_t next_provisional = 0;
  std::unordered_map<TensorHandle, std::pair<std::shared_ptr<PendingRun>, size_t>> provisional;
  std::unordered_map<ModelHandle, size_t> model_outputs;  // models loaded here: their outputs

  // `h`, or the broker's handle a provisional one stands for once its run has answered (its
  // error if the run failed).
  Result<TensorHandle> resolve(TensorHandle h) {
    if ((h & kProvisional) == 0) return h;
    std::shared_ptr<PendingRun> p;
    size_t index = 0;
    {
      std::lock_guard<std::mutex> lock(runs_mu);
      auto it = provisional.find(h);
      if (it == provisional.end())
        return errors::NotFound("tensor handle {} does not exist in this session (released?)", h);
      p = it->second.first;
      index = it->second.second;
    }
    if (p->channel) drain_channel(p.get());
    std::unique_lock<std::mutex> lock(p->mu);
    p->cv.wait(lock, [&] { return p->done; });
    if (!p->status.ok()) return p->status;
    if (index >= p->outputs.size())
      return errors::Internal("run answered {} outputs, output {} was asked for",
                              p->outputs.size(), index);
    return p->outputs[index];
  }
  Result<std::vector<TensorHandle>> resolve_all(const std::vector<TensorHandle>& hs) {
    std::vector<TensorHandle> out;
    out.reserve(hs.size());
    for (TensorHandle h : hs) {
      TD_ASSIGN_OR_RETURN(TensorHandle r, resolve(h));
      out.push_back(r);
    }
    return out;
  }
  void loaded(ModelHandle model, size_t outputs) {
    std::lock_guard<std::mutex> lock(runs_mu);
    model_outputs[model] = outputs;
  }
  // Until every pending run has answered (the session closes after them).
  void wait_runs() {
    if (channel_offered) drain_channel(nullptr);
    std::unique_lock<std::mutex> lock(runs_mu);
    runs_cv.wait(lock, [&] { return runs_in_flight == 0; });
  }

  // Request breakdown (set_breakdown): the timings kept, at most kMaxTimings.
  static constexpr size_t kMaxTimings = 1 << 20;
  std::atomic<bool> breakdown{false};
  std::mutex timings_mu;
  std::vector<RequestTiming> timings;
  using Steady = std::chrono::steady_clock;
  static double us(Steady::time_point a, Steady::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  }
  // The run channel (OpenRunChannel, same host): RunModel and Execute on a socket of this
  // session's own, without gRPC's thread hops. Opened on the first call that may use it; a
  // call another thread holds it for, or too large for a channel message, goes through gRPC.
  // The broker answers the channel's calls in order: pipelined runs are sent at once and their
  // answers read, oldest first, by whoever next needs one (no reader thread).
  bool channel_offered = false;  // same host, the broker offers it, transport not "grpc"
  std::mutex channel_mu;
  int channel_fd = -1;
  bool channel_tried = false;
  int64_t channel_max = 0;  // the largest message either end takes
  std::string channel_out, channel_in;
  std::deque<std::shared_ptr<PendingRun>> channel_pending;  // sent, answer not yet read
  ~Impl() {
    if (channel_fd >= 0) close(channel_fd);
  }
  void close_channel_locked() {
    if (channel_fd >= 0) close(channel_fd);
    channel_fd = -1;
  }
  // Opens the channel on first use (once: a broker that refuses it is not asked again).
  bool channel_open_locked() {
    if (channel_fd >= 0) return true;
    if (channel_tried) return false;
    channel_tried = true;
    grpc::ClientContext ctx;
    // Not counted in rpc_count(): a client's one-time setup, not a call of its own.
    prepare(ctx, options.connect_timeout, /*count=*/false);
    v1::RunChannelRequest req;
    v1::RunChannelResponse resp;
    if (!finish(ctx, stub->OpenRunChannel(&ctx, req, &resp), "opening a run channel").ok())
      return false;
    auto fd = receive_region_fd(region_socket, resp.ticket(),
                                std::min<milliseconds>(options.connect_timeout,
                                                       milliseconds(10000)));
    if (!fd.ok()) return false;
    channel_fd = *fd;
    channel_max = std::min(resp.max_message_bytes(), seqpacket_send_limit(channel_fd,
                                                                          kChannelMaxMessage));
    channel_in.resize(static_cast<size_t>(kChannelMaxMessage));
    return true;
  }
  // Sends `req` (its timeout set from the client's); false when it is too large for a channel
  // message or the channel broke (then nothing was sent).
  bool channel_send_locked(v1::ChannelRequest& req) {
    const milliseconds timeout = options.call_timeout;
    if (timeout.count() > 0) req.set_timeout_ms(timeout.count());
    channel_out.clear();
    if (!req.SerializeToString(&channel_out) ||
        static_cast<int64_t>(channel_out.size()) > channel_max)
      return false;
    if (send(channel_fd, channel_out.data(), channel_out.size(), MSG_NOSIGNAL) < 0) {
      close_channel_locked();
      return false;
    }
    rpcs++;
    return true;
  }
  // The next answer on the channel. nullopt: the broker ended the channel before reading the
  // call (its session ended, or it is stopping); otherwise the call's status (the broker's,
  // or UNAVAILABLE when no answer came in time).
  std::optional<Status> channel_receive_locked(v1::ChannelAnswer* answer, const char* what,
                                               Steady::time_point* received) {
    const milliseconds timeout = options.call_timeout;
    const auto deadline = Steady::now() + timeout;
    for (;;) {
      int wait_ms = -1;
      if (timeout.count() > 0) {
        const auto left = std::chrono::duration_cast<milliseconds>(deadline - Steady::now());
        wait_ms = static_cast<int>(std::max<int64_t>(0, left.count() + 1));
      }
      pollfd p{channel_fd, POLLIN, 0};
      const int ready = ::poll(&p, 1, wait_ms);
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        close_channel_locked();  // its answer would come after the next call's
        return errors::Unavailable("broker '{}' is unavailable ({} failed: no answer in {} ms)",
                                   address, what, timeout.count());
      }
      break;
    }
    const ssize_t n = recv(channel_fd, channel_in.data(), channel_in.size(), MSG_TRUNC);
    *received = Steady::now();
    if (n <= 0) {
      close_channel_locked();
      return std::nullopt;
    }
    if (static_cast<size_t>(n) > channel_in.size() ||
        !answer->ParseFromArray(channel_in.data(), static_cast<int>(n))) {
      close_channel_locked();
      return errors::Internal("{}: the broker's answer on the run channel ({} bytes) is not a "
                              "tensord.v1.ChannelAnswer",
                              what, n);
    }
    if (answer->code() != 0)
      return Status(static_cast<StatusCode>(answer->code()), answer->message());
    return OkStatus();
  }
  // `p` has its answer (a pipelined run's, through gRPC or the channel).
  void finish_pending(const std::shared_ptr<PendingRun>& p, Status s,
                      std::vector<TensorHandle> out) {
    {
      std::lock_guard<std::mutex> lock(p->mu);
      p->status = std::move(s);
      p->outputs = std::move(out);
      p->done = true;
    }
    p->cv.notify_all();
    // Notified under the lock: the destructor, woken, frees this only after it is released.
    std::lock_guard<std::mutex> lock(runs_mu);
    --runs_in_flight;
    runs_cv.notify_all();
  }
  // Reads pipelined runs' answers, oldest first, until `until`'s (every one when null).
  void drain_channel_locked(const PendingRun* until) {
    while (!channel_pending.empty()) {
      std::shared_ptr<PendingRun> p = std::move(channel_pending.front());
      channel_pending.pop_front();
      v1::ChannelAnswer answer;
      Steady::time_point t2;
      std::optional<Status> got =
          channel_fd >= 0 ? channel_receive_locked(&answer, "run", &t2) : std::nullopt;
      if (!got)
        got = errors::Unavailable(
            "broker '{}': the run channel ended before the broker read this run (its session "
            "ended, or the broker is stopping)",
            address);
      std::vector<TensorHandle> out;
      if (got->ok()) {
        remember(answer.run().outputs(), answer.run().values());
        out.assign(answer.run().outputs().begin(), answer.run().outputs().end());
        if (p->timed) keep_timing(answer.breakdown(), p->t0, p->t1, t2, Steady::now());
      }
      const bool last = p.get() == until;
      finish_pending(p, std::move(*got), std::move(out));
      if (last) return;
    }
  }
  void drain_channel(const PendingRun* until) {
    std::lock_guard<std::mutex> lock(channel_mu);
    drain_channel_locked(until);
  }
  // A run or execute on the channel, as run() and execute() take its answer (`t0`: when the
  // call began, for the breakdown). nullopt when the channel did not take it: gRPC does.
  std::optional<Result<std::vector<TensorHandle>>> call_on_channel(v1::ChannelRequest& call,
                                                                   Steady::time_point t0) {
    v1::ChannelAnswer answer;
    call.set_breakdown(breakdown.load(std::memory_order_relaxed));
    Steady::time_point t1, t2;
    const bool run = call.has_run();
    std::optional<Status> done = channel_call(call, &answer, run ? "run" : "execute", &t1, &t2);
    if (!done) return std::nullopt;
    if (!done->ok()) return Result<std::vector<TensorHandle>>(std::move(*done));
    const auto& outputs = run ? answer.run().outputs() : answer.execute().outputs();
    remember(outputs, run ? answer.run().values() : answer.execute().values());
    if (call.breakdown()) keep_timing(answer.breakdown(), t0, t1, t2, Steady::now());
    return std::vector<TensorHandle>(outputs.begin(), outputs.end());
  }
  // `req` on the channel, its answer in `answer`. nullopt when the channel did not take the
  // call (none, busy, too large, or it ended before the broker read it): the caller makes it
  // through gRPC. Otherwise the call's status.
  std::optional<Status> channel_call(v1::ChannelRequest& req, v1::ChannelAnswer* answer,
                                     const char* what, Steady::time_point* sent,
                                     Steady::time_point* received) {
    if (!channel_offered) return std::nullopt;
    std::unique_lock<std::mutex> lock(channel_mu, std::try_to_lock);
    if (!lock.owns_lock() || !channel_open_locked()) return std::nullopt;
    drain_channel_locked(nullptr);  // answers come in order: the pipelined runs' first
    if (channel_fd < 0) return std::nullopt;
    *sent = Steady::now();
    if (!channel_send_locked(req)) return std::nullopt;
    return channel_receive_locked(answer, what, received);
  }
  // Asks for the broker's phases on `ctx` when the breakdown is on.
  bool ask_breakdown(grpc::ClientContext& ctx) {
    if (!breakdown.load(std::memory_order_relaxed)) return false;
    ctx.AddMetadata(kBreakdownKey, "1");
    return true;
  }
  void keep_timing(const grpc::ClientContext& ctx, Steady::time_point t0, Steady::time_point t1,
                   Steady::time_point t2, Steady::time_point t3) {
    const auto& trailers = ctx.GetServerTrailingMetadata();
    auto it = trailers.find(kBreakdownKey);
    keep_timing(it == trailers.end() ? std::string()
                                     : std::string(it->second.data(), it->second.size()),
                t0, t1, t2, t3);
  }
  // `phases`: the broker's breakdown text (RequestBreakdown::text).
  void keep_timing(const std::string& phases, Steady::time_point t0, Steady::time_point t1,
                   Steady::time_point t2, Steady::time_point t3) {
    RequestTiming t;
    t.encode = us(t0, t1);
    t.call = us(t1, t2);
    t.decode = us(t2, t3);
    int64_t entry_ns = 0, exit_ns = 0;
    if (!phases.empty()) {
      std::istringstream in(phases);
      std::string item;
      while (in >> item) {
        const size_t eq = item.find('=');
        if (eq == std::string::npos) continue;
        const std::string key = item.substr(0, eq);
        const double v = std::strtod(item.c_str() + eq + 1, nullptr);
        if (key == "entry_ns") entry_ns = std::strtoll(item.c_str() + eq + 1, nullptr, 10);
        if (key == "exit_ns") exit_ns = std::strtoll(item.c_str() + eq + 1, nullptr, 10);
        for (auto [name, field] :
             {std::pair{"session", &t.session}, std::pair{"parse", &t.parse},
              std::pair{"prepare", &t.prepare}, std::pair{"handoff", &t.handoff},
              std::pair{"run", &t.run}, std::pair{"outputs", &t.outputs},
              std::pair{"handler", &t.handler}})
          if (key == name) *field = v;
      }
    }
    // The same host: the handler ran inside this side's call on the shared clock.
    auto ns = [](Steady::time_point p) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(p.time_since_epoch()).count();
    };
    if (entry_ns >= ns(t1) && exit_ns >= entry_ns && exit_ns <= ns(t2)) {
      t.there = static_cast<double>(entry_ns - ns(t1)) / 1e3;
      t.back = static_cast<double>(ns(t2) - exit_ns) / 1e3;
    }
    std::lock_guard<std::mutex> lock(timings_mu);
    if (timings.size() < kMaxTimings) timings.push_back(t);
  }
  std::atomic<int64_t> rpcs{0}, executes{0}, uploads{0}, downloads{0}, copies{0}, runs{0},
      arena_reads{0};
  std::string token;
  AttachCall* attach = nullptr;

  // Shared memory: mode "auto"/"grpc"/"shm"; state 1 = in use, 0 = not tried yet (auto),
  // -1 = off (grpc, another host, or the broker could not map a region).
  std::string mode = "auto";
  std::atomic<int> shm_state{-1};
  std::mutex shm_mu;
  std::vector<std::unique_ptr<ShmRegion>> shm_idle;
  std::vector<std::unique_ptr<ShmRegion>> shm_lent;  // not to be written: tensors use them
  std::shared_ptr<ShmReturns> shm_returns = std::make_shared<ShmReturns>();
  std::atomic<int64_t> shm_serial{0};
  std::string region_socket;  // where the memfds go (HandshakeResponse.region_socket)

  std::mutex release_mu;
  std::vector<TensorHandle> pending_releases;  // sent with the next Execute/RunModel

  // The session's arena (OpenArena), mapped read-only: a value the broker placed there is
  // read straight out of this mapping, one copy. Asked for once, when shared memory is first
  // used; unmapped with the client (after the session is closed).
  struct ArenaMap {
    const unsigned char* base = nullptr;
    int64_t bytes = 0;
    ~ArenaMap() {
      if (base) munmap(const_cast<unsigned char*>(base), static_cast<size_t>(bytes));
    }
  };
  std::mutex arena_mu;
  std::atomic<int> arena_state{0};  // 0 = not asked yet, 1 = mapped, -1 = none
  ArenaMap arena;
  bool arena_mapped() {
    if (arena_state.load() == 0) open_arena();
    return arena_state.load() > 0;
  }
  void open_arena() {
    std::lock_guard<std::mutex> lock(arena_mu);
    if (arena_state.load() != 0) return;
    arena_state = -1;
    grpc::ClientContext ctx;
    prepare(ctx, options.call_timeout);
    v1::OpenArenaRequest req;
    v1::OpenArenaResponse resp;
    if (!finish(ctx, stub->OpenArena(&ctx, req, &resp), "opening the arena").ok()) return;
    if (resp.bytes() <= 0) return;
    auto fd = receive_region_fd(region_socket, resp.ticket(),
                                std::min<milliseconds>(options.call_timeout, milliseconds(10000)));
    if (!fd.ok()) return;
    struct stat st {};
    void* base = MAP_FAILED;
    if (fstat(*fd, &st) == 0 && st.st_size >= resp.bytes())
      base = mmap(nullptr, static_cast<size_t>(resp.bytes()), PROT_READ, MAP_SHARED, *fd, 0);
    close(*fd);
    if (base == MAP_FAILED) return;
    arena.base = static_cast<const unsigned char*>(base);
    arena.bytes = resp.bytes();
    arena_state = 1;
  }

  // Values uploaded by lending a region: their bytes stay where this process wrote them (the
  // broker only reads a lent region, and a value never changes), so reading one is a single
  // copy out of this process's own mapping, as on the embedded engine. Forgotten on release().
  struct LentValue {
    const unsigned char* base = nullptr;
    TensorType type;
    int64_t bytes = 0;
  };
  std::mutex lent_mu;
  std::unordered_map<TensorHandle, LentValue> lent_values;
  std::optional<LentValue> lent_value(TensorHandle h) {
    std::lock_guard<std::mutex> lock(lent_mu);
    auto it = lent_values.find(h);
    if (it == lent_values.end()) return std::nullopt;
    return it->second;
  }

  std::mutex cache_mu;
  std::unordered_map<TensorHandle, Cached> cache;
  std::deque<TensorHandle> cache_order;
  int64_t cache_bytes = 0;

  std::mutex hb_mu;
  std::condition_variable hb_cv;
  bool hb_stop = false;
  std::thread heartbeat;

  // Every call: no waiting for a connection (a dead broker fails at once with UNAVAILABLE),
  // the session, and a deadline unless the call waits on device work.
  void prepare(grpc::ClientContext& ctx, milliseconds timeout, bool count = true) {
    ctx.set_wait_for_ready(false);
    if (timeout.count() > 0) ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    if (!session.empty()) ctx.AddMetadata(kSessionKey, session);
    if (!token.empty()) ctx.AddMetadata(kAuthKey, "Bearer " + token);
    if (count) rpcs++;
  }

  // ---- values answered inline

  void remember(const google::protobuf::RepeatedField<uint64_t>& outputs,
                const google::protobuf::RepeatedPtrField<v1::InlineValue>& values) {
    for (const auto& v : values) {
      if (v.index() < 0 || v.index() >= outputs.size()) continue;
      Cached c;
      c.device = v.device();
      if (v.code() != 0) {
        c.status = Status(static_cast<StatusCode>(v.code()), v.message());
      } else {
        auto t = from_proto(v.value());
        if (!t.ok()) continue;  // a malformed value is simply read again
        c.value = std::move(t).value();
      }
      const TensorHandle h = outputs[v.index()];
      std::lock_guard<std::mutex> lock(cache_mu);
      cache_bytes += static_cast<int64_t>(c.value.nbytes());
      cache[h] = std::move(c);
      cache_order.push_back(h);
      while (cache_bytes > kInlineCacheBytes && !cache_order.empty()) {
        auto it = cache.find(cache_order.front());
        cache_order.pop_front();
        if (it == cache.end()) continue;
        cache_bytes -= static_cast<int64_t>(it->second.value.nbytes());
        cache.erase(it);
      }
    }
  }
  std::optional<Cached> cached(TensorHandle h) {
    std::lock_guard<std::mutex> lock(cache_mu);
    auto it = cache.find(h);
    if (it == cache.end()) return std::nullopt;
    return it->second;
  }
  // Drops h from the cache; true when it was there (the broker answered it inline, so it is a
  // live handle of this session).
  bool forget(TensorHandle h) {
    std::lock_guard<std::mutex> lock(cache_mu);
    auto it = cache.find(h);
    if (it == cache.end()) return false;
    cache_bytes -= static_cast<int64_t>(it->second.value.nbytes());
    cache.erase(it);  // its entry in cache_order is skipped when it comes up
    return true;
  }

  // One LoadModel stream: the header (the payload's size and format), then the payload in
  // chunks. A broker that refuses on the header ends the call at once; the writes stop then.
  Status load_stream(std::string_view bytes, v1::ModelFormat format, const std::string& device,
                     v1::LoadModelResponse* resp) {
    grpc::ClientContext ctx;
    prepare(ctx, kNoDeadline);
    auto writer = stub->LoadModel(&ctx, resp);
    v1::LoadModelChunk msg;
    msg.mutable_header()->set_device(device);
    msg.mutable_header()->set_graph_bytes(static_cast<int64_t>(bytes.size()));
    msg.mutable_header()->set_format(format);
    const int64_t total = static_cast<int64_t>(bytes.size());
    int64_t off = 0;
    do {
      const int64_t n = std::min(chunk_bytes, total - off);
      msg.set_data(bytes.data() + off, static_cast<size_t>(n));
      off += n;
      if (!writer->Write(msg)) break;
      msg.clear_header();
    } while (off < total);
    writer->WritesDone();
    return finish(ctx, writer->Finish(), "loading a model");
  }

  // One Upload stream: `prefix` (the header, or a part's upload id and offset) then the bytes,
  // in chunks sent straight from the caller's memory (gRPC is done with them on return).
  Status stream_upload(const std::string& prefix, const char* bytes, int64_t total,
                       v1::UploadResponse* resp) {
    grpc::ClientContext ctx;
    prepare(ctx, kNoDeadline);
    grpc::ByteBuffer answer;
    SliceTracker tracker;
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel.get(), *raw_upload,
                                                                      &ctx, &answer));
    int64_t off = 0;
    do {
      const int64_t n = std::min(chunk_bytes, total - off);
      std::string framing = off == 0 ? prefix : std::string();
      framing.push_back(0x12);  // field 2 (data), length-delimited
      put_varint(framing, static_cast<uint64_t>(n));
      grpc::Slice slices[2] = {grpc::Slice(framing),
                               tracker.wrap(bytes + off, static_cast<size_t>(n))};
      grpc::ByteBuffer chunk(slices, 2);
      off += n;
      if (!writer->Write(chunk)) break;  // the broker ended the call: Finish says why
    } while (off < total);
    writer->WritesDone();
    const grpc::Status status = writer->Finish();
    writer.reset();
    tracker.wait();  // gRPC is done with the caller's bytes
    TD_RETURN_IF_ERROR(finish(ctx, status, "upload"));
    if (!grpc::SerializationTraits<v1::UploadResponse>::Deserialize(&answer, resp).ok())
      return errors::Internal("upload: the broker's answer is not an UploadResponse");
    return OkStatus();
  }

  // ---- deferred releases: handles known to be live are released with the next
  // Execute/RunModel; any other call sends them first (so what it observes is current).
  std::vector<TensorHandle> take_releases() {
    std::lock_guard<std::mutex> lock(release_mu);
    return std::exchange(pending_releases, {});
  }
  void flush_releases() {
    for (TensorHandle h : take_releases()) {
      grpc::ClientContext ctx;
      prepare(ctx, options.call_timeout);
      v1::HandleRequest req;
      req.set_handle(h);
      v1::ReleaseResponse resp;
      (void)stub->Release(&ctx, req, &resp);  // it was live; a failure here changes nothing
    }
  }

  // ---- shared memory

  bool use_shm(int64_t bytes) const {
    return shm_state.load() >= 0 && bytes >= options.shm_min_bytes;
  }

  // A registered region of at least `bytes` (and at most `max_bytes`): an idle one, else
  // a new memfd.
  std::unique_ptr<ShmRegion> take_idle(int64_t bytes, int64_t max_bytes = INT64_MAX) {
    std::vector<std::unique_ptr<ShmRegion>> back;
    {
      std::lock_guard<std::mutex> lock(shm_returns->mu);
      back.swap(shm_returns->regions);
    }
    std::lock_guard<std::mutex> lock(shm_mu);
    for (auto& r : back) shm_idle.push_back(std::move(r));
    auto best = shm_idle.end();
    for (auto it = shm_idle.begin(); it != shm_idle.end(); ++it)
      if ((*it)->size >= bytes && (*it)->size <= max_bytes &&
          (best == shm_idle.end() || (*it)->size < (*best)->size))
        best = it;
    if (best == shm_idle.end()) return nullptr;
    auto r = std::move(*best);
    shm_idle.erase(best);
    return r;
  }

  // Asks the broker which lent regions are free again and makes them idle.
  void reclaim() {
    v1::ReclaimRegionsRequest req;
    {
      std::lock_guard<std::mutex> lock(shm_mu);
      if (shm_lent.empty()) return;
      for (const auto& r : shm_lent) req.add_regions(r->id);
    }
    grpc::ClientContext ctx;
    prepare(ctx, options.call_timeout, /*count=*/false);
    v1::ReclaimRegionsResponse resp;
    if (!stub->ReclaimRegions(&ctx, req, &resp).ok()) return;
    std::vector<std::unique_ptr<ShmRegion>> extra;
    {
      std::lock_guard<std::mutex> lock(shm_mu);
      for (uint64_t id : resp.free()) {
        for (auto it = shm_lent.begin(); it != shm_lent.end(); ++it) {
          if ((*it)->id != id) continue;
          shm_idle.push_back(std::move(*it));
          shm_lent.erase(it);
          break;
        }
      }
      // Keep the largest idle ones.
      std::sort(shm_idle.begin(), shm_idle.end(),
                [](const auto& a, const auto& b) { return a->size > b->size; });
      while (shm_idle.size() > kIdleRegions) {
        extra.push_back(std::move(shm_idle.back()));
        shm_idle.pop_back();
      }
    }
    for (auto& r : extra) unregister(std::move(r));
  }

  // `lend`: the region goes with a tensor (lent to the broker, or handed to a read()'s
  // result): an idle one no more than a quarter larger, else a new one sized to the tensor.
  Result<std::unique_ptr<ShmRegion>> shm_acquire(int64_t bytes, bool lend = false) {
    const int64_t most = lend ? bytes + bytes / 4 + (1 << 20) : INT64_MAX;
    if (auto r = take_idle(bytes, most)) return r;
    reclaim();
    if (auto r = take_idle(bytes, most)) return r;
    // A lent region is sized to its tensor: it stays with the tensor.
    const int64_t size = std::max(lend ? int64_t{1} << 20 : kMinRegionBytes,
                                  (bytes + (1 << 20) - 1) & ~int64_t{(1 << 20) - 1});
    auto r = std::make_unique<ShmRegion>();
    const std::string name =
        "tensord-" + std::to_string(getpid()) + "-" + std::to_string(shm_serial++);
    r->fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (r->fd < 0)
      return errors::Unavailable("shared memory: memfd_create failed: {}", std::strerror(errno));
    if (ftruncate(r->fd, size) != 0)
      return errors::ResourceExhausted("shared memory: cannot size a region to {} bytes: {}", size,
                                       std::strerror(errno));
    // Sealed against shrinking (the broker refuses it otherwise): it can never fault on a
    // page we took away. Against growing too: its size is all the broker maps.
    if (fcntl(r->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
      return errors::Unavailable("shared memory: cannot seal the region: {}", std::strerror(errno));
    void* base =
        mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
    if (base == MAP_FAILED)
      return errors::ResourceExhausted("shared memory: cannot map {} bytes: {}", size,
                                       std::strerror(errno));
    r->base = static_cast<unsigned char*>(base);
    r->size = size;
    // Registered by descriptor: a ticket of this session, the memfd sent with it on the
    // region socket (SCM_RIGHTS), then RegisterRegion naming the ticket.
    v1::RegionTicketResponse ticket;
    {
      grpc::ClientContext ctx;
      prepare(ctx, options.call_timeout);
      v1::RegionTicketRequest req;
      TD_RETURN_IF_ERROR(
          finish(ctx, stub->RegionTicket(&ctx, req, &ticket), "asking for a region ticket"));
    }
    TD_RETURN_IF_ERROR(
        send_region_fd(region_socket, ticket.ticket(), r->fd,
                       std::min<milliseconds>(options.call_timeout, milliseconds(10000))));
    grpc::ClientContext ctx;
    prepare(ctx, options.call_timeout);
    v1::RegisterRegionRequest req;
    req.set_ticket(ticket.ticket());
    req.set_bytes(size);
    v1::RegisterRegionResponse resp;
    TD_RETURN_IF_ERROR(finish(ctx, stub->RegisterRegion(&ctx, req, &resp), "registering a region"));
    r->id = resp.region();
    return r;
  }

  // A region lent to the broker: not written again until reclaim() finds it free.
  void shm_lend(std::unique_ptr<ShmRegion> r) {
    std::lock_guard<std::mutex> lock(shm_mu);
    shm_lent.push_back(std::move(r));
  }
  bool may_lend() {
    std::lock_guard<std::mutex> lock(shm_mu);
    return shm_lent.size() < kMaxLentRegions;
  }

  void shm_release(std::unique_ptr<ShmRegion> r) {
    {
      std::lock_guard<std::mutex> lock(shm_mu);
      if (shm_idle.size() < kIdleRegions) {
        shm_idle.push_back(std::move(r));
        return;
      }
    }
    unregister(std::move(r));
  }

  void unregister(std::unique_ptr<ShmRegion> dead) {
    grpc::ClientContext ctx;
    prepare(ctx, options.call_timeout, /*count=*/false);
    v1::RegionRequest req;
    req.set_region(dead->id);
    v1::UnregisterRegionResponse resp;
    (void)stub->UnregisterRegion(&ctx, req, &resp);
  }

  // The first region decides, in "auto", whether shared memory works with this broker.
  Result<std::unique_ptr<ShmRegion>> shm_get(int64_t bytes, bool lend = false) {
    auto r = shm_acquire(bytes, lend);
    if (r.ok()) {
      shm_state = 1;
      // From the first region on, the session's values live where this process can read them
      // (values computed before the arena exists stay in the broker's pool).
      if (arena_state.load() == 0) open_arena();
    } else if (mode == "auto" && shm_state.load() == 0) {
      shm_state = -1;  // e.g. the broker runs as another user: streams from now on
    }
    return r;
  }

  // Errors the broker raised come back unchanged; transport failures say which broker and
  // call, and a broker that does not answer in time counts as unavailable.
  Status finish(grpc::ClientContext& ctx, const grpc::Status& s, const char* what) const {
    if (s.ok()) return OkStatus();
    const auto& trailers = ctx.GetServerTrailingMetadata();
    if (trailers.find(kErrorKey) != trailers.end()) return from_grpc(s);
    Status st = from_grpc(s);
    if (st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded)
      return errors::Unavailable("broker '{}' is unavailable ({} failed: {})", address, what,
                                 s.error_message());
    if (st.code() == StatusCode::kInternal && s.error_message().empty())
      return Status(st.code(),
                    fmt::format("broker '{}': {} failed: the broker could not decode the request "
                                "(malformed, or nested deeper than protobuf's limit of 100)",
                                address, what));
    return Status(st.code(),
                  fmt::format("broker '{}': {} failed: {}", address, what, s.error_message()));
  }

  // UNIMPLEMENTED for a named-models call: the broker is older than the call.
  Status older_broker(const Status& s, const char* what) const {
    if (s.code() != StatusCode::kUnimplemented) return s;
    return errors::Unimplemented("{}: the broker at '{}' (tensord {}) has no named models; "
                                 "upgrade it",
                                 what, address, server_version);
  }

  void heartbeat_loop() {
    const milliseconds period = std::max(lease / 3, milliseconds(10));
    std::unique_lock<std::mutex> lock(hb_mu);
    while (!hb_cv.wait_for(lock, period, [&] { return hb_stop; })) {
      lock.unlock();
      grpc::ClientContext ctx;
      prepare(ctx, std::min(period, options.call_timeout), /*count=*/false);
      v1::HeartbeatRequest req;
      v1::HeartbeatResponse resp;
      (void)stub->Heartbeat(&ctx, req, &resp);  // a missed beat is retried next period
      lock.lock();
    }
  }
};

RemoteClient::RemoteClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RemoteClient::~RemoteClient() {
  impl_->wait_runs();  // their callbacks use impl_
  if (impl_->heartbeat.joinable()) {
    {
      std::lock_guard<std::mutex> lock(impl_->hb_mu);
      impl_->hb_stop = true;
    }
    impl_->hb_cv.notify_all();
    impl_->heartbeat.join();
  }
  if (!impl_->session.empty()) {
    grpc::ClientContext ctx;
    impl_->prepare(ctx, kCloseTimeout, /*count=*/false);
    v1::CloseSessionRequest req;
    v1::CloseSessionResponse resp;
    (void)impl_->stub->CloseSession(&ctx, req, &resp);  // the lease frees it otherwise
  }
  if (impl_->attach) {
    // gRPC still holds the reactor until OnDone; should it not come, leaking it is the safe
    // choice.
    if (impl_->attach->cancel_and_wait(kCloseTimeout)) delete impl_->attach;
  }
}

Result<std::unique_ptr<RemoteClient>> RemoteClient::connect(const std::string& address,
                                                            const RemoteClientOptions& options) {
  if (address.empty()) return errors::InvalidArgument("connect: empty broker address");
  keep_grpc_initialized();
  auto impl = std::make_unique<Impl>();
  impl->address = address;
  impl->options = options;
  impl->pipeline.store(options.pipeline_runs);
  {
    const char* from = "RemoteClientOptions.token";
    std::string token = options.token;
    if (token.empty())
      if (const char* t = std::getenv("TENSORD_TOKEN")) {
        token = t;
        from = "TENSORD_TOKEN";
      }
    TD_ASSIGN_OR_RETURN(impl->token, clean_token(token, from));
  }
  impl->mode = options.transport;
  if (impl->mode.empty())
    if (const char* t = std::getenv("TENSORD_TRANSPORT")) impl->mode = t;
  if (const char* n = std::getenv("TENSORD_UPLOAD_STREAMS")) {
    const int v = std::atoi(n);
    if (v >= 1 && v <= 16) impl->options.upload_streams = v;
  }
  if (impl->options.upload_streams <= 0)
    impl->options.upload_streams =
        std::clamp<int64_t>(static_cast<int64_t>(std::thread::hardware_concurrency()) / 2, 1, 4);
  if (impl->mode.empty()) impl->mode = "auto";
  if (impl->mode != "auto" && impl->mode != "grpc" && impl->mode != "shm")
    return errors::InvalidArgument("transport '{}' (TENSORD_TRANSPORT) is not auto, grpc or shm",
                                   impl->mode);
  if (options.chunk_bytes > 0)
    impl->chunk_bytes = std::clamp<int64_t>(options.chunk_bytes, 4 << 10, 64 << 20);

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Brokers are dialled directly: an http_proxy in the environment must not capture them.
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  // Find a silent broker during long read()/wait() calls (a killed one closes the socket and
  // is noticed at once).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // A restarted broker is found again quickly.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // Bulk reads: a large initial stream window (see the server).
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 20);
  args.SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, 4 << 20);
  args.SetInt(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, 8 << 20);
  TD_ASSIGN_OR_RETURN(auto creds, channel_credentials(options));
  const bool tls_on = creds_are_tls(options);
  impl->channel = grpc::CreateCustomChannel(address, creds, args);
  impl->stub = v1::Tensord::NewStub(impl->channel);
  impl->raw_upload = std::make_unique<grpc::internal::RpcMethod>(
      "/tensord.v1.Tensord/Upload", grpc::internal::RpcMethod::CLIENT_STREAMING, impl->channel);
  impl->raw_read = std::make_unique<grpc::internal::RpcMethod>(
      "/tensord.v1.Tensord/Read", grpc::internal::RpcMethod::SERVER_STREAMING, impl->channel);

  {
    grpc::ClientContext ctx;
    impl->prepare(ctx, options.connect_timeout);
    v1::HandshakeRequest req;
    req.set_protocol_version(kProtocolVersion);
    req.set_client_version(kVersion);
    v1::HandshakeResponse resp;
    if (Status hs = impl->finish(ctx, impl->stub->Handshake(&ctx, req, &resp), "handshake");
        !hs.ok()) {
      // A TLS mismatch looks like any unreachable broker: say what to check.
      const std::string& m = hs.message();
      if (hs.code() == StatusCode::kUnavailable && m.find("Ssl handshake") != std::string::npos)
        return Status(hs.code(), m + "; TLS: the CA (TENSORD_TLS_CA) must have signed the broker's "
                                     "certificate, which must name the host dialled, and a broker "
                                     "with --tls-ca needs TENSORD_TLS_CERT/TENSORD_TLS_KEY");
      if (hs.code() == StatusCode::kUnavailable && !tls_on &&
          m.find("Socket closed") != std::string::npos)
        return Status(hs.code(), m + "; if the broker serves TLS (--tls-cert), set TENSORD_TLS_CA");
      return hs;
    }
    if (resp.protocol_version() != kProtocolVersion)
      return errors::FailedPrecondition(
          "broker '{}' speaks protocol version {} (tensord {}), this client speaks {} (tensord "
          "{})",
          address, resp.protocol_version(), resp.server_version(), kProtocolVersion, kVersion);
    impl->server_version = resp.server_version();
    if (resp.max_message_bytes() > 0) {
      // Inline uploads and stream chunks stay well inside the broker's message limit.
      impl->max_message = resp.max_message_bytes();
      impl->chunk_bytes = std::max<int64_t>(
          4 << 10, std::min(impl->chunk_bytes, impl->max_message / 2));
    }
    impl->onnx_models = resp.onnx_models();
    impl->max_model_bytes = resp.max_model_bytes();
    impl->default_device = resp.default_device();
    impl->broker_host_id = resp.host_id();
    impl->cuda_ipc = resp.cuda_ipc();
    const bool same_host = resp.shared_memory() && !resp.region_socket().empty() &&
                           !resp.host_id().empty() && resp.host_id() == host_boot_id() &&
                           local_address(address);
    impl->region_socket = resp.region_socket();
    if (impl->mode == "shm" && !same_host)
      return errors::FailedPrecondition(
          "transport 'shm' (TENSORD_TRANSPORT): the broker '{}' is not on this host (or offers "
          "no shared memory); use 'auto' or 'grpc'",
          address);
    if (impl->mode != "grpc" && same_host) impl->shm_state = 0;
    impl->channel_offered = impl->mode != "grpc" && same_host && resp.run_channel();
    for (const auto& d : resp.devices()) impl->devices_at_connect.push_back(from_proto(d));
  }
  {
    grpc::ClientContext ctx;
    impl->prepare(ctx, options.connect_timeout);
    v1::OpenSessionRequest req;
    req.set_memory_limit(options.memory_limit);
    v1::OpenSessionResponse resp;
    TD_RETURN_IF_ERROR(
        impl->finish(ctx, impl->stub->OpenSession(&ctx, req, &resp), "opening a session"));
    if (resp.session_id().empty())
      return errors::FailedPrecondition(
          "broker '{}' answered OpenSession without a session_id (an older tensord?)", address);
    impl->session = resp.session_id();
    impl->memory_limit = resp.memory_limit();
    if (resp.lease_ms() > 0) impl->lease = milliseconds(resp.lease_ms());
  }
  if (impl->mode == "shm") {  // forced: fail now, not on the first transfer
    auto r = impl->shm_get(0);
    if (!r.ok()) return r.status().with_context("transport 'shm'");
    impl->shm_release(std::move(r).value());
  }
  Impl* raw = impl.get();
  raw->attach = new AttachCall();
  raw->prepare(raw->attach->ctx, kNoDeadline, /*count=*/false);
  raw->attach->start(raw->stub.get());
  raw->heartbeat = std::thread([raw] { raw->heartbeat_loop(); });
  return std::unique_ptr<RemoteClient>(new RemoteClient(std::move(impl)));
}

Result<std::vector<DeviceInfo>> RemoteClient::devices() {
  impl_->flush_releases();
  grpc::ClientContext ctx;
  impl_->prepare(ctx, impl_->options.call_timeout);
  v1::ListDevicesRequest req;
  v1::ListDevicesResponse resp;
  TD_RETURN_IF_ERROR(
      impl_->finish(ctx, impl_->stub->ListDevices(&ctx, req, &resp), "listing devices"));
  std::vector<DeviceInfo> out;
  for (const auto& d : resp.devices()) out.push_back(from_proto(d));
  return out;
}

std::string RemoteClient::default_device() { return impl_->default_device; }

Result<TensorHandle> RemoteClient::upload(const TensorView& src, const std::string& device) {
  impl_->flush_releases();
  impl_->uploads++;
  v1::UploadChunk msg;
  auto* header = msg.mutable_header();
  header->set_dtype(static_cast<int32_t>(src.dtype));
  header->mutable_shape()->Assign(src.shape.begin(), src.shape.end());
  header->set_device(device);
  auto size = checked_byte_size(src.dtype, src.shape);
  if (size.ok() && *size > 0 && !src.data)
    return errors::InvalidArgument("upload: no data for {} bytes", *size);
  header->set_total_bytes(size.ok() ? *size : 0);

  // Sizes the broker refuses before reading a byte (bad dtype or shape, more than the device
  // or the session can hold) go as a header alone: the broker's answer names the reason, and
  // the caller's buffer is never read past what it can hold.
  bool header_only = !size.ok();
  if (size.ok() && *size > impl_->chunk_bytes) {
    const std::string& dev = device.empty() ? impl_->default_device : device;
    for (const auto& d : impl_->devices_at_connect)
      if (d.name == dev && *size > d.memory_bytes) header_only = true;
    if (impl_->memory_limit > 0 && *size > impl_->memory_limit) header_only = true;
  }

  v1::UploadResponse resp;
  if (!header_only && impl_->use_shm(*size)) {
    // Large floating-point tensors lend their region: the broker computes on it in place.
    const bool lend = *size >= kLendMinBytes && dtype_is_float(src.dtype) && impl_->may_lend();
    auto region = impl_->shm_get(*size, lend);
    if (region.ok()) {
      if (*size) std::memcpy((*region)->base, src.data, static_cast<size_t>(*size));
      v1::UploadRegionRequest req;
      *req.mutable_header() = *header;
      req.set_region((*region)->id);
      req.set_offset(0);
      req.set_lend(lend);
      grpc::ClientContext ctx;
      impl_->prepare(ctx, impl_->options.call_timeout);
      Status st = impl_->finish(ctx, impl_->stub->UploadRegion(&ctx, req, &resp), "upload");
      if (lend) {
        if (st.ok()) {
          std::lock_guard<std::mutex> lock(impl_->lent_mu);
          impl_->lent_values[resp.handle()] = {(*region)->base, {src.dtype, src.shape}, *size};
        }
        impl_->shm_lend(std::move(region).value());  // the broker says when it is free again
      } else {
        impl_->shm_release(std::move(region).value());
      }
      TD_RETURN_IF_ERROR(st);
      return resp.handle();
    }
    if (impl_->mode == "shm") return region.status();
  }
  if (header_only || *size <= impl_->chunk_bytes) {
    if (!header_only && *size > 0) msg.set_data(src.data, static_cast<size_t>(*size));
    grpc::ClientContext ctx;
    impl_->prepare(ctx, impl_->options.call_timeout);
    TD_RETURN_IF_ERROR(impl_->finish(ctx, impl_->stub->UploadInline(&ctx, msg, &resp), "upload"));
    return resp.handle();
  }

  // Streamed: no deadline (the time grows with the size); keepalive finds a dead broker.
  // Each UploadChunk is serialized here as two slices: its few bytes of framing (and the
  // header, first), then the caller's bytes themselves, which gRPC writes to the socket
  // without a copy.
  const auto* bytes = static_cast<const char*>(src.data);
  const int64_t total = *size;
  if (total >= kParallelUploadMinBytes && impl_->options.upload_streams > 1) {
    // Parts over concurrent streams, one core each (one HTTP/2 stream is one thread's work).
    grpc::ClientContext bctx;
    impl_->prepare(bctx, impl_->options.call_timeout);
    v1::BeginUploadResponse begun;
    Status st = impl_->finish(bctx, impl_->stub->BeginUpload(&bctx, *header, &begun), "upload");
    if (st.ok()) {
      const int64_t k = impl_->options.upload_streams;
      const int64_t part = (total / k + 63) / 64 * 64;
      std::vector<Status> results(static_cast<size_t>(k));
      std::vector<std::thread> threads;
      for (int64_t i = 0; i < k; ++i) {
        const int64_t off = std::min(total, i * part);
        const int64_t len = std::min(part, total - off);
        threads.emplace_back([&, i, off, len] {
          std::string prefix;
          prefix.push_back(0x18);  // field 3 (part_of), varint
          put_varint(prefix, begun.upload());
          prefix.push_back(0x20);  // field 4 (offset), varint
          put_varint(prefix, static_cast<uint64_t>(off));
          v1::UploadResponse ignored;
          results[static_cast<size_t>(i)] = impl_->stream_upload(prefix, bytes + off, len, &ignored);
        });
      }
      for (auto& t : threads) t.join();
      grpc::ClientContext fctx;
      impl_->prepare(fctx, impl_->options.call_timeout);
      v1::FinishUploadRequest freq;
      freq.set_upload(begun.upload());
      Status fin = impl_->finish(fctx, impl_->stub->FinishUpload(&fctx, freq, &resp), "upload");
      for (const Status& r : results) TD_RETURN_IF_ERROR(r);  // a part's own error first
      TD_RETURN_IF_ERROR(fin);
      return resp.handle();
    }
    if (st.code() != StatusCode::kUnimplemented) return st;  // an older broker: one stream
  }
  std::string prefix;
  const std::string header_bytes = header->SerializeAsString();
  prefix.push_back(0x0A);  // field 1 (header), length-delimited
  put_varint(prefix, header_bytes.size());
  prefix += header_bytes;
  TD_RETURN_IF_ERROR(impl_->stream_upload(prefix, bytes, total, &resp));
  return resp.handle();
}

// Where a read's bytes go once its type is known: a destination for `bytes` bytes, or null
// when the caller has no room for them (then none are written).
using ReadPlace = std::function<void*(const TensorType& type, int64_t bytes)>;

namespace {

// One raw ReadChunk message: its header (first message only) and data, the data copied from
// gRPC's receive buffers straight to `*dst + *received` (no protobuf string in between).
// `on_header` is called with the header and returns the destination (null: no room).
Status take_read_chunk(grpc::ByteBuffer& message, bool first, int64_t* total, int64_t* received,
                       int64_t* end, unsigned char** dst,
                       const std::function<Status(const v1::ReadHeader&)>& on_header) {
  using WFL = google::protobuf::internal::WireFormatLite;
  grpc::ProtoBufferReader reader(&message);
  google::protobuf::io::CodedInputStream in(&reader);
  const Status malformed = errors::Internal("read: the broker's message is not a ReadChunk");
  bool header_here = false;
  for (uint32_t tag = in.ReadTag(); tag != 0; tag = in.ReadTag()) {
    const int field = WFL::GetTagFieldNumber(tag);
    if ((field == 1 || field == 2) && WFL::GetTagWireType(tag) != WFL::WIRETYPE_LENGTH_DELIMITED)
      return malformed;
    uint32_t len = 0;
    if ((field == 1 || field == 2) && !in.ReadVarint32(&len)) return malformed;
    if (field == 1) {
      if (!first || header_here) return errors::Internal("read: the broker repeated the header");
      std::string bytes;
      v1::ReadHeader hd;
      if (!in.ReadString(&bytes, static_cast<int>(len)) || !hd.ParseFromString(bytes))
        return malformed;
      header_here = true;
      TD_RETURN_IF_ERROR(on_header(hd));
    } else if (field == 2) {
      if (first && !header_here)
        return errors::Internal("read: the broker's first message has no header");
      if (len == 0) continue;
      if (static_cast<int64_t>(len) > *end - *received)
        return errors::Internal("read: the broker sent more than the {} bytes it declared", *total);
      if (!*dst) {  // no room: the caller wants the type only (the call is cancelled next)
        if (!in.Skip(static_cast<int>(len))) return malformed;
        continue;
      }
      if (!in.ReadRaw(*dst + *received, static_cast<int>(len))) return malformed;
      *received += len;
    } else if (!WFL::SkipField(&in, tag)) {
      return malformed;
    }
  }
  if (!in.ConsumedEntireMessage()) return malformed;
  if (first && !header_here)
    return errors::Internal("read: the broker's first message has no header");
  return OkStatus();
}

}  // namespace

namespace {
grpc::ByteBuffer encode_read_request(const v1::ReadRequest& req) {
  grpc::ByteBuffer request;
  bool own = false;
  (void)grpc::SerializationTraits<v1::ReadRequest>::Serialize(req, &request, &own);
  return request;
}
}  // namespace

// A read over gRPC streams: the value's header, then its bytes, parsed from the raw messages
// straight into the place the caller gives. A large value the broker lends in place comes in
// parts over several concurrent streams (RemoteClientOptions::upload_streams, as uploads): one
// HTTP/2 stream is one thread's work on each side. The first stream says how the value is
// split; the others are asked for by offset once its header is here.
Result<TensorType> RemoteClient::Impl::stream_read(TensorHandle h, int64_t room,
                                                   const ReadPlace& place) {
  grpc::ClientContext ctx;
  prepare(ctx, kNoDeadline);  // waits for the value to be computed
  v1::ReadRequest req;
  req.set_handle(h);
  req.set_chunk_bytes(chunk_bytes);
  if (room >= 0) req.set_max_bytes(std::max<int64_t>(room, 1));
  if (options.upload_streams > 1) req.set_streams(static_cast<int32_t>(options.upload_streams));
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          channel.get(), *raw_read, &ctx, encode_read_request(req)));
  TensorType type;
  int64_t total = -1, received = 0, end = 0, part = 0;
  unsigned char* dst = nullptr;
  Status bad;
  bool fits = false;
  auto on_header = [&](const v1::ReadHeader& hd) -> Status {
    auto size = checked_wire_size(hd.dtype(), hd.shape(), "read");
    if (!size.ok()) return size.status();
    if (*size != hd.total_bytes())
      return errors::Internal("read: the broker declares {} bytes for a tensor of {} bytes",
                              hd.total_bytes(), *size);
    total = *size;
    end = total;
    part = hd.part_bytes();
    if (part != 0) {  // split: this stream carries [0, part)
      if (part < 0 || part >= total || (total + part - 1) / part > 16)
        return errors::Internal("read: the broker splits {} bytes into parts of {}", total, part);
      end = part;
    }
    type = {static_cast<DType>(hd.dtype()), Shape(hd.shape().begin(), hd.shape().end())};
    dst = static_cast<unsigned char*>(place(type, total));
    fits = dst != nullptr || total == 0;
    return OkStatus();
  };
  // The other parts, each over a stream of its own, started once the first header is here.
  std::vector<std::unique_ptr<grpc::ClientContext>> part_ctx;
  std::vector<Status> part_status;
  std::vector<std::thread> part_threads;
  auto start_parts = [&] {
    const size_t n = static_cast<size_t>((total + part - 1) / part) - 1;
    part_status.resize(n);
    for (size_t i = 0; i < n; ++i) {
      part_ctx.push_back(std::make_unique<grpc::ClientContext>());
      prepare(*part_ctx.back(), kNoDeadline);
    }
    for (size_t i = 0; i < n; ++i) {
      const int64_t off = part * static_cast<int64_t>(i + 1);
      const int64_t len = std::min(part, total - off);
      part_threads.emplace_back([&, i, off, len] {
        part_status[i] = read_part(h, type, total, off, len, dst, *part_ctx[i]);
      });
    }
  };
  grpc::ByteBuffer message;
  bool first = true;
  while (bad.ok() && reader->Read(&message)) {
    bad = take_read_chunk(message, first, &total, &received, &end, &dst, on_header);
    message.Clear();
    if (first && bad.ok() && !fits) break;  // no room: the type is all the caller gets
    if (first && bad.ok() && part > 0) start_parts();
    first = false;
  }
  if (!bad.ok() || (total >= 0 && !fits)) ctx.TryCancel();
  grpc::Status s = reader->Finish();
  if (!bad.ok() || !s.ok())
    for (auto& c : part_ctx) c->TryCancel();  // the value is not coming whole: stop the parts
  for (auto& t : part_threads) t.join();
  if (!bad.ok()) return bad;
  if (!fits && total >= 0) return type;
  TD_RETURN_IF_ERROR(finish(ctx, s, "read"));
  if (total < 0) return errors::Internal("read: the broker sent no tensor");
  if (received != end)
    return errors::DataLoss("read: the broker sent {} of {} bytes", received, end);
  for (const Status& p : part_status) TD_RETURN_IF_ERROR(p);
  return type;
}

// One part of a split read: bytes [offset, offset + length) of a value whose type the first
// stream gave, into base + offset. The broker's header must name the same value.
Status RemoteClient::Impl::read_part(TensorHandle h, const TensorType& type, int64_t total,
                                     int64_t offset, int64_t length, unsigned char* base,
                                     grpc::ClientContext& ctx) {
  v1::ReadRequest req;
  req.set_handle(h);
  req.set_chunk_bytes(chunk_bytes);
  req.set_offset(offset);
  req.set_length(length);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          channel.get(), *raw_read, &ctx, encode_read_request(req)));
  int64_t declared = total, received = offset, end = offset + length;
  unsigned char* dst = base;
  auto same_value = [&](const v1::ReadHeader& hd) -> Status {
    if (hd.total_bytes() != total || hd.dtype() != static_cast<int32_t>(type.dtype) ||
        !std::equal(hd.shape().begin(), hd.shape().end(), type.shape.begin(), type.shape.end()))
      return errors::Internal("read: handle {} answered another type for part {}", h, offset);
    return OkStatus();
  };
  Status bad;
  grpc::ByteBuffer message;
  bool first = true;
  while (bad.ok() && reader->Read(&message)) {
    bad = take_read_chunk(message, first, &declared, &received, &end, &dst, same_value);
    message.Clear();
    first = false;
  }
  if (!bad.ok()) ctx.TryCancel();
  grpc::Status s = reader->Finish();
  TD_RETURN_IF_ERROR(bad);
  TD_RETURN_IF_ERROR(finish(ctx, s, "read"));
  if (received != end)
    return errors::DataLoss("read: the broker sent {} of the {} bytes at offset {}",
                            received - offset, length, offset);
  return OkStatus();
}

namespace {
// Shared-memory reads this large go in parts, pipelined: the broker writes part i+1 into the
// region while this side copies part i out, so the two copies overlap instead of following
// each other (an upload needs one copy; a read into the caller's memory needs two, the
// broker's into the region and this side's out of it). They overlap only where a core and
// memory bandwidth are free for each: on a 2-vCPU VM two concurrent memcpys take as long as
// two in a row, and the read stays at about half the upload's speed.
constexpr int64_t kPipelinedReadMinBytes = 8 << 20;
constexpr int kPipelineDepth = 2;  // parts asked for ahead of the one being copied out
// Eighths of the value, 4 to 32 MiB each: few calls, and the first copy-out starts early.
int64_t read_part_bytes(int64_t total) {
  const int64_t mib = 1 << 20;
  return std::clamp<int64_t>((total / 8 + mib - 1) / mib * mib, 4 * mib, 32 * mib);
}
}  // namespace

// A tensor over `region`'s memory: the region comes back to the pool when the last copy of
// the tensor goes (from any thread; unmapped if the client is gone by then), and until then
// read_into() its memory is written by the broker straight into it.
Result<HostTensor> RemoteClient::Impl::hand_out(std::unique_ptr<ShmRegion> region, DType dtype,
                                                Shape shape) {
  ShmRegion* r = region.get();
  {
    std::lock_guard<std::mutex> lock(shm_returns->mu);
    shm_returns->held[r->base] = {r->id, r->size};
  }
  auto owner = std::shared_ptr<ShmRegion>(
      region.release(), [back = std::weak_ptr<ShmReturns>(shm_returns)](ShmRegion* dead) {
        std::unique_ptr<ShmRegion> own(dead);
        if (auto pool = back.lock()) {
          std::lock_guard<std::mutex> lock(pool->mu);
          pool->held.erase(own->base);
          pool->regions.push_back(std::move(own));
        }
      });
  return HostTensor::adopt(dtype, std::move(shape), r->base, std::move(owner));
}

// read_into() memory inside a region a tensor of this client holds: the broker writes the
// value there itself, one copy. `unusable`: dst is not such memory (or shared memory is not
// in use), and the caller reads the ordinary way.
Result<TensorType> RemoteClient::Impl::shm_read_direct(TensorHandle h, void* dst, int64_t room,
                                                       bool* unusable) {
  *unusable = true;
  if (!dst || room <= 0 || !use_shm(options.shm_min_bytes) || cached(h))
    return errors::Unavailable("read: not into a region");
  const auto* p = static_cast<const unsigned char*>(dst);
  uint64_t id = 0;
  int64_t offset = 0;
  {
    std::lock_guard<std::mutex> lock(shm_returns->mu);
    auto it = shm_returns->held.upper_bound(p);
    if (it == shm_returns->held.begin()) return errors::Unavailable("read: not into a region");
    --it;
    const int64_t at = p - it->first;
    if (at < 0 || at >= it->second.second) return errors::Unavailable("read: not into a region");
    id = it->second.first;
    offset = at;
    room = std::min(room, it->second.second - at);  // never past the region's end
  }
  downloads++;
  flush_releases();
  grpc::ClientContext ctx;
  prepare(ctx, kNoDeadline);
  v1::ReadRegionRequest req;
  req.set_handle(h);
  req.set_region(id);
  req.set_offset(offset);
  req.set_max_bytes(room);
  v1::ReadRegionResponse resp;
  grpc::Status gs = stub->ReadRegion(&ctx, req, &resp);
  *unusable = false;
  TD_RETURN_IF_ERROR(finish(ctx, gs, "read"));
  const auto& hd = resp.header();
  auto size = checked_wire_size(hd.dtype(), hd.shape(), "read");
  if (!size.ok() || *size != hd.total_bytes())
    return errors::Internal("read: the broker's answer declares {} bytes for {}",
                            hd.total_bytes(), size.ok() ? "another size" : "a bad type");
  TensorType type{static_cast<DType>(hd.dtype()), Shape(hd.shape().begin(), hd.shape().end())};
  if (*size > room || *size == 0) return type;  // no room: nothing written, as read_into says
  if (!resp.written() || (resp.part_bytes() != 0 && resp.part_bytes() != *size))
    return errors::Internal("read: the broker did not write the {} bytes of handle {}", *size, h);
  return type;
}

// A large value's parts [from, total) through `region` (at their own offsets: the region holds
// the whole value) into dst, kPipelineDepth parts in flight. Counted as one call.
Status RemoteClient::Impl::shm_read_parts(TensorHandle h, ShmRegion& region, unsigned char* dst,
                                          int64_t from, int64_t total) {
  struct Part {
    grpc::ClientContext ctx;
    v1::ReadRegionRequest req;
    v1::ReadRegionResponse resp;
    grpc::Status status;
    bool done = false;
    int64_t off = 0, len = 0;
  };
  const int64_t piece = read_part_bytes(total);
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<Part>> inflight;
  int64_t next = from;
  auto issue = [&] {
    auto p = std::make_unique<Part>();
    p->off = next;
    p->len = std::min(piece, total - next);
    next += p->len;
    prepare(p->ctx, kNoDeadline, /*count=*/false);
    p->req.set_handle(h);
    p->req.set_region(region.id);
    p->req.set_offset(p->off);
    p->req.set_value_offset(p->off);
    p->req.set_value_length(p->len);
    Part* raw = p.get();
    stub->async()->ReadRegion(&raw->ctx, &raw->req, &raw->resp, [&mu, &cv, raw](grpc::Status st) {
      std::lock_guard<std::mutex> lock(mu);
      raw->status = std::move(st);
      raw->done = true;
      cv.notify_all();
    });
    inflight.push_back(std::move(p));
  };
  while (static_cast<int>(inflight.size()) < kPipelineDepth && next < total) issue();
  Status bad;
  while (!inflight.empty()) {
    Part& p = *inflight.front();
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return p.done; });
    }
    if (bad.ok()) {
      bad = finish(p.ctx, p.status, "read");
      if (bad.ok() && (!p.resp.written() || p.resp.part_bytes() != p.len ||
                       p.resp.header().total_bytes() != total))
        bad = errors::Internal(
            "read: the broker answered bytes [{}, {}) of handle {} with {} bytes of {}", p.off,
            p.off + p.len, h, p.resp.part_bytes(), p.resp.header().total_bytes());
      if (!bad.ok())
        for (auto& q : inflight) q->ctx.TryCancel();
    }
    if (bad.ok() && next < total) issue();  // the broker writes it while this one is copied
    if (bad.ok()) std::memcpy(dst + p.off, region.base + p.off, static_cast<size_t>(p.len));
    inflight.pop_front();
  }
  return bad;
}

// A read through the shared-memory region: the broker writes the value into it, this side
// copies it out to the place the caller gives; large values in parts, pipelined. `unusable`
// is set when no region could be had (then streams are used).
Result<TensorType> RemoteClient::Impl::shm_read(TensorHandle h, int64_t room,
                                                const ReadPlace& place, bool* unusable) {
  const int64_t hint = std::max<int64_t>(last_read_bytes.load(), 0);
  auto region = shm_get(std::min<int64_t>(hint, room >= 0 ? room : INT64_MAX));
  if (!region.ok()) {
    *unusable = true;
    return region.status();
  }
  auto done = [&](Result<TensorType> r) {
    if (region.ok()) shm_release(std::move(region).value());
    return r;
  };
  // A value as large as the last one read: the first part only, the rest pipelined.
  bool ask_part = hint >= kPipelinedReadMinBytes && (room < 0 || room >= hint);
  const bool in_arena = arena_mapped();
  for (int attempt = 0; attempt < 3; ++attempt) {
    grpc::ClientContext ctx;
    prepare(ctx, kNoDeadline);
    v1::ReadRegionRequest req;
    req.set_handle(h);
    req.set_region((*region)->id);
    req.set_arena(in_arena);
    const bool part = ask_part;
    if (part) {
      req.set_value_length(std::min(read_part_bytes(hint), (*region)->size));
      if (room >= 0) req.set_max_bytes(std::max<int64_t>(room, 1));
    } else {
      req.set_max_bytes(room >= 0 ? std::max<int64_t>(1, std::min(room, (*region)->size))
                                  : (*region)->size);
    }
    v1::ReadRegionResponse resp;
    if (Status st = finish(ctx, stub->ReadRegion(&ctx, req, &resp), "read"); !st.ok())
      return done(st);
    const auto& hd = resp.header();
    auto size = checked_wire_size(hd.dtype(), hd.shape(), "read");
    if (!size.ok() || *size != hd.total_bytes())
      return done(errors::Internal("read: the broker's answer declares {} bytes for {}",
                                   hd.total_bytes(), size.ok() ? "another size" : "a bad type"));
    const int64_t total = *size;
    TensorType type{static_cast<DType>(hd.dtype()), Shape(hd.shape().begin(), hd.shape().end())};
    if (room >= 0 && total > room) {  // no room: the type is all the caller gets
      (void)place(type, total);
      return done(type);
    }
    if (resp.in_arena()) {  // computed into the arena: one copy out of this process's mapping
      if (!in_arena || resp.arena_offset() < 0 || resp.arena_offset() > arena.bytes ||
          total > arena.bytes - resp.arena_offset())
        return done(errors::Internal(
            "read: the broker placed handle {} ({} bytes) at offset {} of a {}-byte arena", h,
            total, resp.arena_offset(), in_arena ? arena.bytes : 0));
      last_read_bytes = total;
      auto* dst = static_cast<unsigned char*>(place(type, total));
      if (dst && total)
        std::memcpy(dst, arena.base + resp.arena_offset(), static_cast<size_t>(total));
      arena_reads++;
      return done(type);
    }
    // Written whole (a part of the whole value, or a broker that knows no parts).
    const int64_t first = resp.part_bytes();
    if (resp.written() && (first == total || first == 0)) {
      last_read_bytes = total;
      auto* dst = static_cast<unsigned char*>(place(type, total));
      if (dst && total) std::memcpy(dst, (*region)->base, static_cast<size_t>(total));
      return done(type);
    }
    if (!part && !resp.written() && total >= kPipelinedReadMinBytes) {
      // Larger than the region, going by its type: its first part next, which waits for the
      // value (so the size is the computed one, or the computation's error comes back) before
      // any room is made for it.
      ask_part = true;
      continue;
    }
    const bool have_first = part && resp.written() && first > 0;
    if (have_first) {
      last_read_bytes = total;
      auto* dst = static_cast<unsigned char*>(place(type, total));
      if (!dst) return done(type);  // nowhere to write (read_into with no memory)
      std::memcpy(dst, (*region)->base, static_cast<size_t>(first));
      if ((*region)->size < total) {
        shm_release(std::move(region).value());
        region = shm_get(total);
        if (!region.ok()) return region.status();
      }
      Status st = shm_read_parts(h, **region, dst, first, total);
      if (!st.ok()) return done(st);
      return done(type);
    }
    // Too large for this region (a broker that knows no parts): one with room enough, then
    // the whole value again.
    ask_part = false;
    shm_release(std::move(region).value());
    region = shm_get(total);
    if (!region.ok()) return region.status();
  }
  return done(errors::Internal("read: the broker's value of handle {} did not fit twice", h));
}

// read() and read_into(): `room` < 0 = any size (read() allocates what the header says).
Result<TensorType> RemoteClient::Impl::read_value(TensorHandle h, int64_t room,
                                                  const ReadPlace& place) {
  downloads++;
  if (auto c = cached(h)) {
    if (!c->status.ok()) return c->status;
    const int64_t n = static_cast<int64_t>(c->value.nbytes());
    void* dst = place(c->value.type(), n);
    if (dst && n) std::memcpy(dst, c->value.data(), static_cast<size_t>(n));
    return c->value.type();
  }
  flush_releases();
  if (use_shm(options.shm_min_bytes)) {
    bool unusable = false;
    auto r = shm_read(h, room, place, &unusable);
    if (!unusable || mode == "shm") return r;
  }
  return stream_read(h, room, place);
}

// read() through shared memory, for large values: the broker writes the value into a region
// of this client's, and the tensor returned IS that region's memory — one copy, as an upload
// (read_into() needs two: the caller's memory is not shared). The region comes back to the
// pool when the last copy of the tensor goes. `unusable`: no region could be had, or the value
// is small or of unknown size; the caller then reads the ordinary way.
Result<HostTensor> RemoteClient::Impl::shm_read_adopt(TensorHandle h, bool* unusable) {
  *unusable = true;
  const int64_t hint = last_read_bytes.load();
  if (!use_shm(options.shm_min_bytes) || hint < kAdoptMinBytes || cached(h))
    return errors::Unavailable("read: not through a region");
  downloads++;
  flush_releases();
  int64_t want = hint;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto region = shm_get(want, /*lend=*/true);
    if (!region.ok()) return region.status();
    grpc::ClientContext ctx;
    prepare(ctx, kNoDeadline);
    v1::ReadRegionRequest req;
    req.set_handle(h);
    req.set_region((*region)->id);
    req.set_max_bytes((*region)->size);
    v1::ReadRegionResponse resp;
    grpc::Status gs = stub->ReadRegion(&ctx, req, &resp);
    *unusable = false;
    if (Status st = finish(ctx, gs, "read"); !st.ok()) {
      shm_release(std::move(region).value());
      return st;
    }
    const auto& hd = resp.header();
    auto size = checked_wire_size(hd.dtype(), hd.shape(), "read");
    if (!size.ok() || *size != hd.total_bytes()) {
      shm_release(std::move(region).value());
      return errors::Internal("read: the broker's answer declares {} bytes for {}",
                              hd.total_bytes(), size.ok() ? "another size" : "a bad type");
    }
    const int64_t total = *size;
    if (resp.written() && (resp.part_bytes() == total || resp.part_bytes() == 0)) {
      last_read_bytes = total;
      return hand_out(std::move(region).value(), static_cast<DType>(hd.dtype()),
                      Shape(hd.shape().begin(), hd.shape().end()));
    }
    shm_release(std::move(region).value());
    if (total < kAdoptMinBytes) break;  // small after all: copied out the ordinary way
    want = total;  // larger than the region: one sized to it
  }
  *unusable = true;
  return errors::Unavailable("read: not through a region");
}

Result<HostTensor> RemoteClient::read(TensorHandle handle) {
  TD_ASSIGN_OR_RETURN(const TensorHandle h, impl_->resolve(handle));
  {
    bool unusable = false;
    auto adopted = impl_->shm_read_adopt(h, &unusable);
    if (!unusable) return adopted;
  }
  HostTensor out;
  int64_t unallocated = -1;
  TD_ASSIGN_OR_RETURN(TensorType type,
                      impl_->read_value(h, -1, [&](const TensorType& t, int64_t n) -> void* {
                        auto fresh = HostTensor::uninitialized(t.dtype, t.shape);
                        if (!fresh.ok()) {
                          unallocated = n;  // nothing is written then
                          return nullptr;
                        }
                        out = std::move(fresh).value();
                        return out.mutable_data();
                      }));
  if (unallocated >= 0)
    return errors::ResourceExhausted("read: cannot allocate {} bytes in this process for {}",
                                     unallocated, type.to_string());
  if (out.empty()) out = HostTensor(type.dtype, type.shape);
  return out;
}

Result<HostTensor> RemoteClient::allocate_host(DType dtype, Shape shape) {
  TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(dtype, shape));
  // Small buffers are not worth a region (and the broker's copy of small values goes through
  // the ordinary path anyway).
  if (bytes >= kPipelinedReadMinBytes / 8 && impl_->use_shm(impl_->options.shm_min_bytes)) {
    auto region = impl_->shm_get(bytes, /*lend=*/true);
    if (region.ok()) return impl_->hand_out(std::move(region).value(), dtype, std::move(shape));
  }
  return HostTensor::uninitialized(dtype, std::move(shape));
}

Result<TensorHandle> RemoteClient::upload_cuda(const TensorView& src, const std::string& device) {
  impl_->flush_releases();
  TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(src.dtype, src.shape));
  if (bytes == 0) return upload(TensorView{src.dtype, src.shape, nullptr}, device);  // no bytes to hand over
  TD_RETURN_IF_ERROR(impl_->cuda_ipc_usable());
  TD_ASSIGN_OR_RETURN(ForeignMemory m, export_device_memory(src.data, static_cast<size_t>(bytes), true));
  v1::UploadCudaIpcRequest req;
  auto* header = req.mutable_header();
  header->set_dtype(static_cast<int32_t>(src.dtype));
  header->mutable_shape()->Assign(src.shape.begin(), src.shape.end());
  header->set_device(device);
  header->set_total_bytes(bytes);
  to_proto(m, host_boot_id(), req.mutable_memory());
  grpc::ClientContext ctx;
  impl_->prepare(ctx, impl_->options.call_timeout);
  v1::UploadResponse resp;
  TD_RETURN_IF_ERROR(impl_->finish(ctx, impl_->stub->UploadCudaIpc(&ctx, req, &resp), "upload (CUDA IPC)"));
  impl_->uploads++;
  return resp.handle();
}

Result<TensorType> RemoteClient::read_into_cuda(TensorHandle handle, void* dst, size_t room) {
  TD_ASSIGN_OR_RETURN(const TensorHandle h, impl_->resolve(handle));
  impl_->flush_releases();
  if (!dst || room == 0) {  // the type alone
    TD_RETURN_IF_ERROR(wait(h));
    TD_ASSIGN_OR_RETURN(TensorInfo done, info(h));
    return done.type;
  }
  TD_RETURN_IF_ERROR(impl_->cuda_ipc_usable());
  TD_ASSIGN_OR_RETURN(ForeignMemory m, export_device_memory(dst, room, true));
  m.size = std::min<uint64_t>(m.size, room);
  v1::ReadCudaIpcRequest req;
  req.set_handle(h);
  to_proto(m, host_boot_id(), req.mutable_memory());
  grpc::ClientContext ctx;
  impl_->prepare(ctx, kNoDeadline);  // waits on device work, as read()
  v1::ReadCudaIpcResponse resp;
  TD_RETURN_IF_ERROR(impl_->finish(ctx, impl_->stub->ReadCudaIpc(&ctx, req, &resp), "read (CUDA IPC)"));
  impl_->downloads++;
  TensorType t;
  t.dtype = static_cast<DType>(resp.header().dtype());
  t.shape.assign(resp.header().shape().begin(), resp.header().shape().end());
  return t;
}

Result<TensorType> RemoteClient::read_into(TensorHandle handle, void* dst, size_t room) {
  TD_ASSIGN_OR_RETURN(const TensorHandle h, impl_->resolve(handle));
  const int64_t r = static_cast<int64_t>(std::min<size_t>(room, INT64_MAX));
  if (auto lent = impl_->lent_value(h); lent && dst) {
    // The broker still holds the value (or says why not): then one copy from the region,
    // under the lock release() takes first, so a release racing this read cannot let the
    // region be reclaimed (and unmapped) during the copy.
    TD_RETURN_IF_ERROR(wait(h));
    std::lock_guard<std::mutex> lock(impl_->lent_mu);
    if (impl_->lent_values.count(h) == 0)
      return errors::NotFound("read: handle {} was released during the read", h);
    impl_->downloads++;
    if (lent->bytes <= r) std::memcpy(dst, lent->base, static_cast<size_t>(lent->bytes));
    return lent->type;
  }
  {
    bool unusable = false;
    auto direct = impl_->shm_read_direct(h, dst, r, &unusable);
    if (!unusable) return direct;
  }
  bool no_dst = false;
  auto t = impl_->read_value(h, r, [&](const TensorType&, int64_t bytes) -> void* {
    if (bytes == 0 || bytes > r) return nullptr;
    if (!dst) no_dst = true;
    return dst;
  });
  if (!t.ok()) return t;
  if (no_dst) {
    auto n = checked_byte_size(t->dtype, t->shape);
    return errors::InvalidArgument("read_into: no destination for {} bytes", n.ok() ? *n : 0);
  }
  return t;
}

Status RemoteClient::wait(TensorHandle handle) {
  TD_ASSIGN_OR_RETURN(const TensorHandle h, impl_->resolve(handle));
  if (auto c = impl_->cached(h)) return c->status;
  impl_->flush_releases();
  grpc::ClientContext ctx;
  impl_->prepare(ctx, kNoDeadline);
  v1::HandleRequest req;
  req.set_handle(h);
  v1::WaitResponse resp;
  return impl_->finish(ctx, impl_->stub->Wait(&ctx, req, &resp), "wait");
}

Result<TensorInfo> RemoteClient::info(TensorHandle handle) {
  TD_ASSIGN_OR_RETURN(const TensorHandle h, impl_->resolve(handle));
  if (auto c = impl_->cached(h); c && c->status.ok()) return TensorInfo{c->value.type(), c->device};
  impl_->flush_releases();
  grpc::ClientContext ctx;
  impl_->prepare(ctx, impl_->options.call_timeout);
  v1::HandleRequest req;
  req.set_handle(h);
  v1::InfoResponse resp;
  TD_RETURN_IF_ERROR(impl_->finish(ctx, impl_->stub->Info(&ctx, req, &resp), "info"));
  auto type = from_proto(resp.type());
  if (!type.ok()) return type.status().with_context("info: the broker's answer");
  return TensorInfo{std::move(type).value(), resp.device()};
}

Result<std::vector<TensorHandle>> RemoteClient::execute(const Graph& graph,
                                                        const std::vector<TensorHandle>& in,
                                                        const std::string& device) {
  TD_ASSIGN_OR_RETURN(const std::vector<TensorHandle> inputs, impl_->resolve_all(in));
  impl_->executes++;
  const auto t0 = Impl::Steady::now();
  TD_RETURN_IF_ERROR(check_graph_limits(graph));
  v1::ChannelRequest call;
  v1::ExecuteRequest& req = *call.mutable_execute();
  to_proto(graph, req.mutable_graph());
  req.mutable_inputs()->Assign(inputs.begin(), inputs.end());
  req.set_device(device);
  req.set_inline_max_bytes(impl_->options.inline_max_bytes);
  const auto released = impl_->take_releases();
  req.mutable_release()->Assign(released.begin(), released.end());
  if (auto out = impl_->call_on_channel(call, t0)) return std::move(*out);
  grpc::ClientContext ctx;
  impl_->prepare(ctx, impl_->options.call_timeout);
  v1::ExecuteResponse resp;
  if (const size_t n = req.ByteSizeLong(); static_cast<int64_t>(n) > impl_->max_message)
    return errors::ResourceExhausted(
        "execute: the request takes {} bytes (the graph's initializers travel in it), over the "
        "broker's message limit of {} (tensord serve --max-message-bytes); load() a graph with "
        "large initializers once (streamed) and run() it",
        n, impl_->max_message);
  const bool timed = impl_->ask_breakdown(ctx);
  const auto t1 = Impl::Steady::now();
  const grpc::Status called = impl_->stub->Execute(&ctx, req, &resp);
  const auto t2 = Impl::Steady::now();
  TD_RETURN_IF_ERROR(impl_->finish(ctx, called, "execute"));
  impl_->remember(resp.outputs(), resp.values());
  std::vector<TensorHandle> out(resp.outputs().begin(), resp.outputs().end());
  if (timed) impl_->keep_timing(ctx, t0, t1, t2, Impl::Steady::now());
  return out;
}

Result<TensorHandle> RemoteClient::copy(TensorHandle handle, const std::string& device) {
  TD_ASSIGN_OR_RETURN(const TensorHandle h, impl_->resolve(handle));
  impl_->flush_releases();
  impl_->copies++;
  grpc::ClientContext ctx;
  impl_->prepare(ctx, impl_->options.call_timeout);
  v1::CopyRequest req;
  req.set_handle(h);
  req.set_device(device);
  v1::CopyResponse resp;
  TD_RETURN_IF_ERROR(impl_->finish(ctx, impl_->stub->Copy(&ctx, req, &resp), "copy"));
  return resp.handle();
}

Status RemoteClient::release(TensorHandle handle) {
  TensorHandle h = handle;
  if (handle & Impl::kProvisional) {
    // A pending run's output: its answer first (a failed run's outputs hold nothing).
    {
      std::lock_guard<std::mutex> lock(impl_->runs_mu);
      if (impl_->provisional.count(handle) == 0)
        return errors::NotFound("tensor handle {} does not exist in this session (released?)",
                                handle);
    }
    auto r = impl_->resolve(handle);
    {
      std::lock_guard<std::mutex> lock(impl_->runs_mu);
      impl_->provisional.erase(handle);
    }
    if (!r.ok()) return OkStatus();
    h = *r;
  }
  {
    std::lock_guard<std::mutex> lock(impl_->lent_mu);
    impl_->lent_values.erase(h);
  }
  if (impl_->forget(h)) {  // a live handle answered inline: released with the next run
    bool flush = false;
    {
      std::lock_guard<std::mutex> lock(impl_->release_mu);
      impl_->pending_releases.push_back(h);
      flush = impl_->pending_releases.size() >= kMaxPendingReleases;
    }
    if (flush) impl_->flush_releases();
    return OkStatus();
  }
  impl_->flush_releases();
  grpc::ClientContext ctx;
  impl_->prepare(ctx, impl_->options.call_timeout);
  v1::HandleRequest req;
  req.set_handle(h);
  v1::ReleaseResponse resp;
  return impl_->finish(ctx, impl_->stub->Release(&ctx, req, &resp), "release");
}

Result<ModelHandle> RemoteClient::load(const Graph& graph, const std::string& device) {
  TD_RETURN_IF_ERROR(check_graph_limits(graph));
  impl_->flush_releases();
  v1::LoadModelRequest req;
  to_proto(graph, req.mutable_graph());
  req.set_device(device);
  v1::LoadModelResponse resp;
  const size_t graph_bytes = req.graph().ByteSizeLong();
  if (static_cast<int64_t>(graph_bytes) <= impl_->chunk_bytes) {
    grpc::ClientContext ctx;
    impl_->prepare(ctx, impl_->options.call_timeout);
    TD_RETURN_IF_ERROR(
        impl_->finish(ctx, impl_->stub->LoadModelInline(&ctx, req, &resp), "loading a model"));
    impl_->loaded(resp.model(), graph.outputs.size());
    return resp.model();
  }
  // Large (a model's weights): the serialized graph in stream chunks.
  if (graph_bytes > static_cast<size_t>(INT32_MAX))
    return errors::InvalidArgument("load: the graph takes {} bytes, over protobuf's 2 GiB limit",
                                   graph_bytes);
  std::string bytes;
  if (!req.graph().SerializeToString(&bytes))
    return errors::Internal("load: cannot serialize the graph");
  req.Clear();
  TD_RETURN_IF_ERROR(impl_->load_stream(bytes, v1::MODEL_FORMAT_GRAPH, device, &resp));
  impl_->loaded(resp.model(), graph.outputs.size());
  return resp.model();
}

Result<LoadedModel> RemoteClient::load_onnx(std::string_view onnx_bytes,
                                            const std::string& device) {
  if (!impl_->onnx_models)
    return errors::FailedPrecondition(
        "load_onnx: the broker at '{}' (tensord {}) does not import ONNX files; upgrade it, or "
        "import the model here (onnx::import_bytes) and load() the graph",
        impl_->address, impl_->server_version);
  if (onnx_bytes.empty())
    return errors::InvalidArgument("load_onnx: no bytes (an empty file is not an ONNX model)");
  const int64_t total = static_cast<int64_t>(onnx_bytes.size());
  // Refused here, before a byte goes out, when the broker said what it takes (it refuses on
  // the header too).
  if (impl_->max_model_bytes > 0 && total > impl_->max_model_bytes)
    return errors::ResourceExhausted(
        "load_onnx: the ONNX file takes {} bytes, over the broker's limit of {} (tensord serve "
        "--max-model-bytes)",
        total, impl_->max_model_bytes);
  impl_->flush_releases();
  v1::LoadModelResponse resp;
  TD_RETURN_IF_ERROR(impl_->load_stream(onnx_bytes, v1::MODEL_FORMAT_ONNX, device, &resp));
  LoadedModel m;
  m.handle = resp.model();
  m.name = resp.name();
  for (const auto* list : {&resp.inputs(), &resp.outputs()}) {
    auto& dst = list == &resp.inputs() ? m.inputs : m.outputs;
    for (const auto& v : *list) {
      ValueInfo vi;
      vi.name = v.name();
      auto type = from_proto(v.type());
      if (type.ok()) vi.type = *type;
      dst.push_back(std::move(vi));
    }
  }
  m.opset = resp.opset();
  m.ir_version = resp.ir_version();
  m.producer = resp.producer();
  return m;
}

Result<std::vector<TensorHandle>> RemoteClient::run(ModelHandle model,
                                                    const std::vector<TensorHandle>& in) {
  TD_ASSIGN_OR_RETURN(std::vector<TensorHandle> inputs, impl_->resolve_all(in));
  if (impl_->pipeline.load(std::memory_order_relaxed)) {
    size_t outputs = 0;
    {
      std::lock_guard<std::mutex> lock(impl_->runs_mu);
      auto it = impl_->model_outputs.find(model);
      outputs = it == impl_->model_outputs.end() ? 0 : it->second;
    }
    if (outputs > 0) return run_pipelined(model, inputs, outputs);
  }
  impl_->runs++;
  const auto t0 = Impl::Steady::now();
  v1::ChannelRequest call;
  v1::RunModelRequest& req = *call.mutable_run();
  req.set_model(model);
  req.mutable_inputs()->Assign(inputs.begin(), inputs.end());
  req.set_inline_max_bytes(impl_->options.inline_max_bytes);
  const auto released = impl_->take_releases();
  req.mutable_release()->Assign(released.begin(), released.end());
  if (auto out = impl_->call_on_channel(call, t0)) return std::move(*out);
  grpc::ClientContext ctx;
  impl_->prepare(ctx, impl_->options.call_timeout);
  const bool timed = impl_->ask_breakdown(ctx);
  v1::RunModelResponse resp;
  const auto t1 = Impl::Steady::now();
  const grpc::Status called = impl_->stub->RunModel(&ctx, req, &resp);
  const auto t2 = Impl::Steady::now();
  TD_RETURN_IF_ERROR(impl_->finish(ctx, called, "run"));
  impl_->remember(resp.outputs(), resp.values());
  std::vector<TensorHandle> out(resp.outputs().begin(), resp.outputs().end());
  if (timed) impl_->keep_timing(ctx, t0, t1, t2, Impl::Steady::now());
  return out;
}

// run() with pipeline_runs: the request goes out on gRPC's callback API and this returns
// handles standing for the outputs; the answer, when it comes, is taken as run() takes it.
Result<std::vector<TensorHandle>> RemoteClient::run_pipelined(
    ModelHandle model, const std::vector<TensorHandle>& inputs, size_t outputs) {
  impl_->runs++;
  auto p = std::make_shared<Impl::PendingRun>();
  p->t0 = Impl::Steady::now();
  p->req.set_model(model);
  p->req.mutable_inputs()->Assign(inputs.begin(), inputs.end());
  p->req.set_inline_max_bytes(impl_->options.inline_max_bytes);
  const auto released = impl_->take_releases();
  p->req.mutable_release()->Assign(released.begin(), released.end());
  impl_->prepare(p->ctx, impl_->options.call_timeout, /*count=*/false);  // counted when sent
  p->timed = impl_->ask_breakdown(p->ctx);
  std::vector<TensorHandle> handles;
  {
    std::lock_guard<std::mutex> lock(impl_->runs_mu);
    for (size_t i = 0; i < outputs; ++i) {
      const TensorHandle h = Impl::kProvisional | ++impl_->next_provisional;
      impl_->provisional.emplace(h, std::make_pair(p, i));
      handles.push_back(h);
    }
    ++impl_->runs_in_flight;
  }
  Impl* impl = impl_.get();
  p->t1 = Impl::Steady::now();
  if (impl_->channel_offered) {  // sent now, its answer read by whoever needs it first
    std::lock_guard<std::mutex> lock(impl_->channel_mu);
    if (impl_->channel_open_locked()) {
      v1::ChannelRequest call;
      *call.mutable_run() = p->req;
      call.set_breakdown(p->timed);
      if (impl_->channel_send_locked(call)) {
        p->channel = true;
        impl_->channel_pending.push_back(p);
        return handles;
      }
    }
  }
  impl_->rpcs++;
  impl_->stub->async()->RunModel(&p->ctx, &p->req, &p->resp, [impl, p](grpc::Status called) {
    const auto t2 = Impl::Steady::now();
    Status s = impl->finish(p->ctx, called, "run");
    std::vector<TensorHandle> out;
    if (s.ok()) {
      impl->remember(p->resp.outputs(), p->resp.values());
      out.assign(p->resp.outputs().begin(), p->resp.outputs().end());
      if (p->timed) impl->keep_timing(p->ctx, p->t0, p->t1, t2, Impl::Steady::now());
    }
    impl->finish_pending(p, std::move(s), std::move(out));
  });
  return handles;
}

// As run(), with the device set and nothing inlined: the broker answers at once (parts of a
// data-parallel run are all in flight before the first is read).
Result<std::vector<TensorHandle>> RemoteClient::run_on(ModelHandle model,
                                                       const std::vector<TensorHandle>& in,
                                                       const std::string& device) {
  TD_ASSIGN_OR_RETURN(const std::vector<TensorHandle> inputs, impl_->resolve_all(in));
  if (device.empty())
    return Status(StatusCode::kInvalidArgument,
                  "run_on: no device given (run() runs on the model's own)");
  impl_->runs++;
  v1::RunModelRequest req;
  req.set_model(model);
  req.mutable_inputs()->Assign(inputs.begin(), inputs.end());
  req.set_device(device);
  req.set_inline_max_bytes(0);
  const auto released = impl_->take_releases();
  req.mutable_release()->Assign(released.begin(), released.end());
  grpc::ClientContext ctx;
  impl_->prepare(ctx, impl_->options.call_timeout);
  v1::RunModelResponse resp;
  TD_RETURN_IF_ERROR(impl_->finish(ctx, impl_->stub->RunModel(&ctx, req, &resp), "run_on"));
  impl_->remember(resp.outputs(), resp.values());
  return std::vector<TensorHandle>(resp.outputs().begin(), resp.outputs().end());
}

Status RemoteClient::unload(ModelHandle model) {
  impl_->wait_runs();  // runs already made run, as the embedded engine's do
  {
    std::lock_guard<std::mutex> lock(impl_->runs_mu);
    impl_->model_outputs.erase(model);
  }
  impl_->flush_releases();
  grpc::ClientContext ctx;
  impl_->prepare(ctx, impl_->options.call_timeout);
  v1::ModelRequest req;
  req.set_model(model);
  v1::UnloadModelResponse resp;
  return impl_->finish(ctx, impl_->stub->UnloadModel(&ctx, req, &resp), "unload");
}

Result<ModelHandle> RemoteClient::open_model(const std::string& name, ModelInfo* info) {
  impl_->flush_releases();
  grpc::ClientContext ctx;
  impl_->prepare(ctx, impl_->options.call_timeout);
  v1::OpenModelRequest req;
  req.set_name(name);
  v1::OpenModelResponse resp;
  Status s = impl_->finish(ctx, impl_->stub->OpenModel(&ctx, req, &resp), "open_model");
  if (!s.ok()) return impl_->older_broker(s, "open_model");
  if (info) *info = from_proto(resp.info());
  return resp.model();
}

Result<std::vector<ModelInfo>> RemoteClient::list_models() {
  grpc::ClientContext ctx;
  impl_->prepare(ctx, impl_->options.call_timeout);
  v1::ListModelsRequest req;
  v1::ListModelsResponse resp;
  Status s = impl_->finish(ctx, impl_->stub->ListModels(&ctx, req, &resp), "list_models");
  if (!s.ok()) return impl_->older_broker(s, "list_models");
  std::vector<ModelInfo> out;
  for (const auto& m : resp.models()) out.push_back(from_proto(m));
  return out;
}

ClientStats RemoteClient::stats() {
  ClientStats s{impl_->executes.load(), impl_->uploads.load(), impl_->downloads.load(),
                impl_->copies.load()};
  s.runs = impl_->runs.load();
  s.arena_reads = impl_->arena_reads.load();
  return s;
}

std::string RemoteClient::transport() const {
  return impl_->shm_state.load() >= 0 ? "shm" : "grpc";
}

const std::string& RemoteClient::address() const { return impl_->address; }
const std::string& RemoteClient::session() const { return impl_->session; }
std::string RemoteClient::server_version() const { return impl_->server_version; }
int64_t RemoteClient::rpc_count() const { return impl_->rpcs.load(); }

bool RemoteClient::uses_run_channel() const {
  std::lock_guard<std::mutex> lock(impl_->channel_mu);
  return impl_->channel_fd >= 0;
}

void RemoteClient::set_breakdown(bool on) { impl_->breakdown.store(on); }

void RemoteClient::set_pipeline_runs(bool on) { impl_->pipeline.store(on); }

std::vector<RequestTiming> RemoteClient::take_breakdown() {
  std::lock_guard<std::mutex> lock(impl_->timings_mu);
  return std::exchange(impl_->timings, {});
}

Status RemoteClient::echo(int64_t payload_bytes) {
  if (payload_bytes < 0 || payload_bytes > kMaxMessageBytes / 2)
    return errors::InvalidArgument("echo: payload of {} bytes", payload_bytes);
  v1::EchoMessage req;
  req.mutable_payload()->resize(static_cast<size_t>(payload_bytes));
  v1::EchoMessage resp;
  grpc::ClientContext ctx;
  impl_->prepare(ctx, impl_->options.call_timeout);
  return impl_->finish(ctx, impl_->stub->Echo(&ctx, req, &resp), "echo");
}

// The medians of the timed requests' phases (RequestTiming), in a request's order.
std::vector<std::pair<std::string, double>> median_phases(
    const std::vector<RequestTiming>& timings) {
  using T = RequestTiming;
  auto median = [&](auto of) {
    std::vector<double> v;
    v.reserve(timings.size());
    for (const T& t : timings) v.push_back(of(t));
    if (v.empty()) return 0.0;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  auto field = [&](double T::*f) { return median([f](const T& t) { return t.*f; }); };
  // The tail: a request's mean and 99th percentile (what a per-example average pays).
  std::vector<double> calls;
  for (const T& t : timings) calls.push_back(t.call);
  std::sort(calls.begin(), calls.end());
  double mean_call = 0;
  for (double c : calls) mean_call += c / static_cast<double>(calls.size());
  const double p99_call = calls.empty() ? 0.0 : calls[calls.size() * 99 / 100];
  return {{"client_encode", field(&T::encode)},
          {"transport", median([](const T& t) { return t.transport(); })},
          {"request_to_handler", field(&T::there)},
          {"handler_to_answer", field(&T::back)},
          {"session_auth", field(&T::session)},
          {"graph_decode", field(&T::parse)},
          {"inputs_and_cache_lookup", field(&T::prepare)},
          {"queue_handoff", field(&T::handoff)},
          {"execution", field(&T::run)},
          {"outputs_into_answer", field(&T::outputs)},
          {"client_decode", field(&T::decode)},
          {"broker_handler", field(&T::handler)},
          {"round_trip", field(&T::call)},
          {"round_trip_mean", mean_call},
          {"round_trip_p99", p99_call}};
}

namespace {

// A stub for one call that needs no session (BrokerStatus, model control), and the context
// carrying the token (options, else TENSORD_TOKEN) and a deadline of the connect timeout.
struct OneCall {
  std::unique_ptr<v1::Tensord::Stub> stub;
  grpc::ClientContext ctx;
};

Status one_call(const std::string& address, const RemoteClientOptions& options, const char* what,
                OneCall& call) {
  if (address.empty()) return errors::InvalidArgument("{}: empty broker address", what);
  keep_grpc_initialized();
  std::string token = options.token;
  const char* from = "RemoteClientOptions.token";
  if (token.empty())
    if (const char* t = std::getenv("TENSORD_TOKEN")) {
      token = t;
      from = "TENSORD_TOKEN";
    }
  TD_ASSIGN_OR_RETURN(token, clean_token(token, from));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  TD_ASSIGN_OR_RETURN(auto creds, channel_credentials(options));
  call.stub = v1::Tensord::NewStub(grpc::CreateCustomChannel(address, creds, args));
  call.ctx.set_wait_for_ready(false);
  call.ctx.set_deadline(std::chrono::system_clock::now() + options.connect_timeout);
  if (!token.empty()) call.ctx.AddMetadata(kAuthKey, "Bearer " + token);
  return OkStatus();
}

Status one_call_status(const std::string& address, const grpc::Status& s, const char* too_old) {
  if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED)
    return errors::FailedPrecondition("broker '{}' is too old {}", address, too_old);
  Status st = from_grpc(s);
  if (st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded)
    return errors::Unavailable("broker '{}' is unavailable ({})", address, s.error_message());
  return st;
}

}  // namespace

Result<std::string> broker_status(const std::string& address, const RemoteClientOptions& options,
                                  int history_seconds) {
  OneCall call;
  TD_RETURN_IF_ERROR(one_call(address, options, "status", call));
  v1::BrokerStatusRequest req;
  req.set_history_seconds(history_seconds);
  v1::BrokerStatusResponse resp;
  const grpc::Status s = call.stub->BrokerStatus(&call.ctx, req, &resp);
  if (s.ok()) return resp.json();
  return one_call_status(address, s, "to report its status");
}

Result<std::vector<ModelInfo>> control_model(const std::string& address, ModelControl op,
                                             const std::string& name,
                                             const RemoteClientOptions& options) {
  OneCall call;
  TD_RETURN_IF_ERROR(one_call(address, options, "models", call));
  std::vector<ModelInfo> out;
  grpc::Status s;
  if (op == ModelControl::kList) {
    v1::ListModelsResponse resp;
    s = call.stub->ListModels(&call.ctx, v1::ListModelsRequest(), &resp);
    for (const auto& m : resp.models()) out.push_back(from_proto(m));
  } else {
    v1::NamedModelRequest req;
    req.set_name(name);
    v1::NamedModelResponse resp;
    s = op == ModelControl::kLoad ? call.stub->LoadNamedModel(&call.ctx, req, &resp)
                                  : call.stub->UnloadNamedModel(&call.ctx, req, &resp);
    for (const auto& m : resp.models()) out.push_back(from_proto(m));
  }
  if (s.ok()) return out;
  return one_call_status(address, s, "for model control");
}

}  // namespace tensord::rpc
