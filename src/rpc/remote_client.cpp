#include "rpc/remote_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/errors.h"
#include "rpc/wire.h"
#include "tensord.grpc.pb.h"
#include "tensord/version.h"

namespace tensord::rpc {

namespace {
using std::chrono::milliseconds;
constexpr milliseconds kNoDeadline{0};
constexpr milliseconds kCloseTimeout{2000};
}  // namespace

struct RemoteClient::Impl {
  std::string address;
  RemoteClientOptions options;
  int64_t chunk_bytes = kDefaultChunkBytes;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Tensord::Stub> stub;

  uint64_t session = 0;
  std::string session_text;
  int64_t memory_limit = 0;
  milliseconds lease{30000};
  std::string server_version;
  std::string default_device;
  std::vector<DeviceInfo> devices_at_connect;

  std::atomic<int64_t> rpcs{0}, executes{0}, uploads{0}, downloads{0}, copies{0};

  std::mutex hb_mu;
  std::condition_variable hb_cv;
  bool hb_stop = false;
  std::thread heartbeat;

  // Every call: no waiting for a connection (a dead broker fails at once with UNAVAILABLE),
  // the session, and a deadline unless the call waits on device work.
  void prepare(grpc::ClientContext& ctx, milliseconds timeout, bool count = true) {
    ctx.set_wait_for_ready(false);
    if (timeout.count() > 0) ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    if (session) ctx.AddMetadata(kSessionKey, session_text);
    if (count) rpcs++;
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
    return Status(st.code(),
                  fmt::format("broker '{}': {} failed: {}", address, what, s.error_message()));
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
  if (impl_->heartbeat.joinable()) {
    {
      std::lock_guard<std::mutex> lock(impl_->hb_mu);
      impl_->hb_stop = true;
    }
    impl_->hb_cv.notify_all();
    impl_->heartbeat.join();
  }
  if (impl_->session) {
    grpc::ClientContext ctx;
    impl_->prepare(ctx, kCloseTimeout, /*count=*/false);
    v1::CloseSessionRequest req;
    v1::CloseSessionResponse resp;
    (void)impl_->stub->CloseSession(&ctx, req, &resp);  // the lease frees it otherwise
  }
}

Result<std::unique_ptr<RemoteClient>> RemoteClient::connect(const std::string& address,
                                                            const RemoteClientOptions& options) {
  if (address.empty()) return errors::InvalidArgument("connect: empty broker address");
  keep_grpc_initialized();
  auto impl = std::make_unique<Impl>();
  impl->address = address;
  impl->options = options;
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
  impl->channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  impl->stub = v1::Tensord::NewStub(impl->channel);

  {
    grpc::ClientContext ctx;
    impl->prepare(ctx, options.connect_timeout);
    v1::HandshakeRequest req;
    req.set_protocol_version(kProtocolVersion);
    req.set_client_version(kVersion);
    v1::HandshakeResponse resp;
    TD_RETURN_IF_ERROR(impl->finish(ctx, impl->stub->Handshake(&ctx, req, &resp), "handshake"));
    if (resp.protocol_version() != kProtocolVersion)
      return errors::FailedPrecondition(
          "broker '{}' speaks protocol version {} (tensord {}), this client speaks {} (tensord "
          "{})",
          address, resp.protocol_version(), resp.server_version(), kProtocolVersion, kVersion);
    impl->server_version = resp.server_version();
    impl->default_device = resp.default_device();
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
    impl->session = resp.session();
    impl->session_text = std::to_string(resp.session());
    impl->memory_limit = resp.memory_limit();
    if (resp.lease_ms() > 0) impl->lease = milliseconds(resp.lease_ms());
  }
  Impl* raw = impl.get();
  raw->heartbeat = std::thread([raw] { raw->heartbeat_loop(); });
  return std::unique_ptr<RemoteClient>(new RemoteClient(std::move(impl)));
}

Result<std::vector<DeviceInfo>> RemoteClient::devices() {
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
  if (header_only || *size <= impl_->chunk_bytes) {
    if (!header_only && *size > 0) msg.set_data(src.data, static_cast<size_t>(*size));
    grpc::ClientContext ctx;
    impl_->prepare(ctx, impl_->options.call_timeout);
    TD_RETURN_IF_ERROR(impl_->finish(ctx, impl_->stub->UploadInline(&ctx, msg, &resp), "upload"));
    return resp.handle();
  }

  // Streamed: no deadline (the time grows with the size); keepalive finds a dead broker.
  grpc::ClientContext ctx;
  impl_->prepare(ctx, kNoDeadline);
  auto writer = impl_->stub->Upload(&ctx, &resp);
  const auto* bytes = static_cast<const char*>(src.data);
  const int64_t total = *size;
  for (int64_t off = 0; off < total;) {
    const int64_t n = std::min(impl_->chunk_bytes, total - off);
    msg.set_data(bytes + off, static_cast<size_t>(n));
    off += n;
    if (!writer->Write(msg)) break;  // the broker ended the call: Finish says why
    msg.clear_header();
  }
  writer->WritesDone();
  TD_RETURN_IF_ERROR(impl_->finish(ctx, writer->Finish(), "upload"));
  return resp.handle();
}

Result<HostTensor> RemoteClient::read(TensorHandle h) {
  impl_->downloads++;
  grpc::ClientContext ctx;
  impl_->prepare(ctx, kNoDeadline);  // waits for the value to be computed
  v1::ReadRequest req;
  req.set_handle(h);
  req.set_chunk_bytes(impl_->chunk_bytes);
  auto reader = impl_->stub->Read(&ctx, req);
  v1::ReadChunk msg;
  HostTensor out;
  int64_t total = -1, received = 0;
  Status bad;
  while (bad.ok() && reader->Read(&msg)) {
    if (total < 0) {
      if (!msg.has_header()) {
        bad = errors::Internal("read: the broker's first message has no header");
        break;
      }
      const auto& hd = msg.header();
      auto size = checked_wire_size(hd.dtype(), hd.shape(), "read");
      if (!size.ok()) {
        bad = size.status();
        break;
      }
      if (*size != hd.total_bytes()) {
        bad = errors::Internal("read: the broker declares {} bytes for a tensor of {} bytes",
                               hd.total_bytes(), *size);
        break;
      }
      total = *size;
      out = HostTensor(static_cast<DType>(hd.dtype()), Shape(hd.shape().begin(), hd.shape().end()));
    } else if (msg.has_header()) {
      bad = errors::Internal("read: the broker repeated the header");
      break;
    }
    const std::string& data = msg.data();
    if (static_cast<int64_t>(data.size()) > total - received) {
      bad = errors::Internal("read: the broker sent more than the {} bytes it declared", total);
      break;
    }
    if (!data.empty())
      std::memcpy(static_cast<char*>(out.mutable_data()) + received, data.data(), data.size());
    received += static_cast<int64_t>(data.size());
  }
  if (!bad.ok()) ctx.TryCancel();
  grpc::Status s = reader->Finish();
  if (!bad.ok()) return bad;
  TD_RETURN_IF_ERROR(impl_->finish(ctx, s, "read"));
  if (total < 0) return errors::Internal("read: the broker sent no tensor");
  if (received != total)
    return errors::DataLoss("read: the broker sent {} of {} bytes", received, total);
  return out;
}

Status RemoteClient::wait(TensorHandle h) {
  grpc::ClientContext ctx;
  impl_->prepare(ctx, kNoDeadline);
  v1::HandleRequest req;
  req.set_handle(h);
  v1::WaitResponse resp;
  return impl_->finish(ctx, impl_->stub->Wait(&ctx, req, &resp), "wait");
}

Result<TensorInfo> RemoteClient::info(TensorHandle h) {
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
                                                        const std::vector<TensorHandle>& inputs,
                                                        const std::string& device) {
  impl_->executes++;
  v1::ExecuteRequest req;
  to_proto(graph, req.mutable_graph());
  req.mutable_inputs()->Assign(inputs.begin(), inputs.end());
  req.set_device(device);
  grpc::ClientContext ctx;
  impl_->prepare(ctx, impl_->options.call_timeout);
  v1::ExecuteResponse resp;
  TD_RETURN_IF_ERROR(impl_->finish(ctx, impl_->stub->Execute(&ctx, req, &resp), "execute"));
  return std::vector<TensorHandle>(resp.outputs().begin(), resp.outputs().end());
}

Result<TensorHandle> RemoteClient::copy(TensorHandle h, const std::string& device) {
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

Status RemoteClient::release(TensorHandle h) {
  grpc::ClientContext ctx;
  impl_->prepare(ctx, impl_->options.call_timeout);
  v1::HandleRequest req;
  req.set_handle(h);
  v1::ReleaseResponse resp;
  return impl_->finish(ctx, impl_->stub->Release(&ctx, req, &resp), "release");
}

ClientStats RemoteClient::stats() {
  return ClientStats{impl_->executes.load(), impl_->uploads.load(), impl_->downloads.load(),
                     impl_->copies.load()};
}

const std::string& RemoteClient::address() const { return impl_->address; }
uint64_t RemoteClient::session() const { return impl_->session; }
std::string RemoteClient::server_version() const { return impl_->server_version; }
int64_t RemoteClient::rpc_count() const { return impl_->rpcs.load(); }

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

Result<ModelHandle> RemoteClient::load(const Graph&, const std::string&) {
  return errors::Unimplemented("load: not yet supported through a broker");
}
Result<std::vector<TensorHandle>> RemoteClient::run(ModelHandle, const std::vector<TensorHandle>&) {
  return errors::Unimplemented("run: not yet supported through a broker");
}
Status RemoteClient::unload(ModelHandle) {
  return errors::Unimplemented("unload: not yet supported through a broker");
}

}  // namespace tensord::rpc
