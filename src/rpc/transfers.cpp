// Streamed uploads and downloads: Upload (raw messages straight into pooled blocks), parallel
// uploads (BeginUpload .. FinishUpload), UploadInline, Read, and their host blocks.
#include "rpc/server_internal.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "core/host_blocks.h"

namespace tensord::rpc::server_impl {

std::shared_ptr<unsigned char> host_block(size_t bytes) {
  try {
    std::shared_ptr<void> block = allocate_host_bytes(std::max<size_t>(bytes, 1));
    auto* p = static_cast<unsigned char*>(block.get());
    return std::shared_ptr<unsigned char>(std::move(block), p);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

class Service::UploadReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  UploadReactor(Service* service, grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response)
      : service_(service), ctx_(ctx), response_(response), guard_(service, ctx) {
    if (!guard_.ok()) {
      end(guard_.status());
      return;
    }
    StartRead(&message_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {  // the client finished sending (or went away)
      end(complete());
      return;
    }
    Status s = take(message_);
    message_.Clear();
    if (!s.ok()) {
      end(s);
      return;
    }
    StartRead(&message_);
  }
  void OnDone() override { delete this; }
  ~UploadReactor() override { guard_.uncharge(std::exchange(charged_, 0)); }

 private:
  using WFL = google::protobuf::internal::WireFormatLite;

  // One UploadChunk: its header (first message only) and data, in whatever field order.
  Status take(grpc::ByteBuffer& message) {
    ++messages_;
    grpc::ProtoBufferReader reader(&message);
    google::protobuf::io::CodedInputStream in(&reader);
    std::string early;  // data that came before the header in the first message
    bool header_here = false;
    for (uint32_t tag = in.ReadTag(); tag != 0; tag = in.ReadTag()) {
      const int field = WFL::GetTagFieldNumber(tag);
      const bool delimited = WFL::GetTagWireType(tag) == WFL::WIRETYPE_LENGTH_DELIMITED;
      uint32_t len = 0;
      if ((field == 1 || field == 2) && (!delimited || !in.ReadVarint32(&len)))
        return malformed();
      if (field == 3 || field == 4) {  // part_of, offset: first message, before any data
        uint64_t v = 0;
        if (WFL::GetTagWireType(tag) != WFL::WIRETYPE_VARINT || !in.ReadVarint64(&v) ||
            messages_ > 1 || block_ || header_here)
          return malformed();
        (field == 3 ? part_of_ : part_offset_) = v;
        continue;
      }
      if (field == 1) {
        if (part_of_ != 0) return malformed();
        if (messages_ > 1)
          return errors::InvalidArgument("upload: message {} repeats the header", messages_);
        std::string bytes;
        if (!in.ReadString(&bytes, static_cast<int>(len)) || !header_.ParseFromString(bytes))
          return malformed();
        header_here = true;
        TD_RETURN_IF_ERROR(start());
        if (!early.empty()) TD_RETURN_IF_ERROR(append(early.data(), early.size()));
      } else if (field == 2) {
        if (!block_ && part_of_ != 0) TD_RETURN_IF_ERROR(attach_part());
        if (!block_) {  // the header has not come yet
          if (messages_ > 1 || !early.empty()) return malformed();
          if (!in.ReadString(&early, static_cast<int>(len))) return malformed();
          continue;
        }
        TD_RETURN_IF_ERROR(check_room(len));
        if (!in.ReadRaw(block_.get() + received_, static_cast<int>(len))) return malformed();
        received_ += len;
      } else if (!WFL::SkipField(&in, tag)) {
        return malformed();
      }
    }
    if (!in.ConsumedEntireMessage()) return malformed();
    if (messages_ == 1 && !header_here && part_of_ != 0 && !block_) {
      // part_of came after the data (protobuf writes fields in number order).
      TD_RETURN_IF_ERROR(attach_part());
      if (!early.empty()) TD_RETURN_IF_ERROR(append(early.data(), early.size()));
    }
    if (messages_ == 1 && !header_here && part_of_ == 0)
      return errors::InvalidArgument(
          "upload: the first message must carry the header (dtype, shape, device, "
          "total_bytes)");
    return OkStatus();
  }
  Status malformed() const {
    return errors::InvalidArgument("upload: message {} is not a tensord.v1.UploadChunk",
                                   messages_);
  }
  Status check_room(uint64_t n) const {
    if (static_cast<int64_t>(n) > size_ - received_)
      return errors::InvalidArgument(
          "upload: the header declares {} bytes, but the stream carries more ({} after "
          "message {})",
          size_, received_ + static_cast<int64_t>(n), messages_);
    return OkStatus();
  }
  Status append(const void* data, size_t n) {
    TD_RETURN_IF_ERROR(check_room(n));
    std::memcpy(block_.get() + received_, data, n);
    received_ += static_cast<int64_t>(n);
    return OkStatus();
  }
  Status start() {
    TD_ASSIGN_OR_RETURN(size_, service_->check_header(guard_, header_));
    // Charged to the session while it arrives (the engine counts it once it is a tensor).
    TD_RETURN_IF_ERROR(guard_.charge(size_, "upload"));
    charged_ = size_;
    block_ = host_block(static_cast<size_t>(size_));
    if (!block_)
      return errors::ResourceExhausted(
          "upload: cannot hold {} bytes in the broker's host memory", size_);
    return OkStatus();
  }
  // The first message of a part: the pending upload's bytes, from its offset.
  Status attach_part() {
    std::lock_guard<std::mutex> lock(service_->mu_);
    SessionState* s = guard_.state_locked();
    auto it = s ? s->uploads.find(part_of_) : decltype(s->uploads)::iterator{};
    if (!s || it == s->uploads.end())
      return errors::NotFound("upload {} does not exist in this session", part_of_);
    pending_ = it->second;
    if (part_offset_ > static_cast<uint64_t>(pending_->size))
      return errors::InvalidArgument("upload {}: offset {} is past its {} bytes", part_of_,
                                     part_offset_, pending_->size);
    block_ = pending_->block;
    size_ = pending_->size;
    received_ = static_cast<int64_t>(part_offset_);
    return OkStatus();
  }
  Status complete() {
    if (ctx_->IsCancelled())
      return Status(StatusCode::kCancelled, "upload: the client cancelled the stream");
    if (messages_ == 0)
      return errors::InvalidArgument("upload: the stream ended before its header");
    if (pending_) {  // a part: recorded; FinishUpload checks the whole
      {
        std::lock_guard<std::mutex> lock(pending_->mu);
        pending_->parts.emplace_back(static_cast<int64_t>(part_offset_), received_);
      }
      v1::UploadResponse resp;
      std::string bytes = resp.SerializeAsString();
      grpc::Slice slice(bytes);
      *response_ = grpc::ByteBuffer(&slice, 1);
      return OkStatus();
    }
    if (received_ != size_)
      return errors::InvalidArgument(
          "upload: the header declares {} bytes, but the stream carried {}", size_, received_);
    TensorView view{static_cast<DType>(header_.dtype()),
                    Shape(header_.shape().begin(), header_.shape().end()), block_.get()};
    TD_ASSIGN_OR_RETURN(TensorHandle h, service_->engine_->upload_external(
                                            guard_.engine_session(), view, header_.device(),
                                            std::shared_ptr<void>(block_)));
    v1::UploadResponse resp;
    resp.set_handle(h);
    std::string bytes = resp.SerializeAsString();
    grpc::Slice slice(bytes);
    *response_ = grpc::ByteBuffer(&slice, 1);
    return OkStatus();
  }
  void end(const Status& s) {
    block_.reset();  // an error frees the block now, not when gRPC is done with the call
    guard_.uncharge(std::exchange(charged_, 0));
    Finish(fail(ctx_, s));
  }

  Service* service_;
  grpc::CallbackServerContext* ctx_;
  grpc::ByteBuffer* response_;
  Guard guard_;
  grpc::ByteBuffer message_;
  v1::UploadHeader header_;
  std::shared_ptr<unsigned char> block_;
  int64_t size_ = 0, received_ = 0, messages_ = 0;
  int64_t charged_ = 0;  // bytes charged to the session's pending uploads
  uint64_t part_of_ = 0, part_offset_ = 0;       // a part of a parallel upload
  std::shared_ptr<PendingUpload> pending_;
};

// Upload: raw bytes in, straight into a pooled block that becomes the tensor (UploadReactor).
grpc::ServerReadReactor<grpc::ByteBuffer>* Service::Upload(grpc::CallbackServerContext* ctx,
                                                            grpc::ByteBuffer* response) {
  return new UploadReactor(this, ctx, response);
}

grpc::Status Service::BeginUpload(grpc::ServerContext* ctx, const v1::UploadHeader* req,
                                  v1::BeginUploadResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  auto size = check_header(g, *req);
  if (!size.ok()) return fail(ctx, size.status().with_context("upload"));
  {
    std::lock_guard<std::mutex> lock(mu_);
    SessionState* s = g.state_locked();
    if (!s) return fail(ctx, errors::NotFound("the session ended during BeginUpload"));
    if (s->uploads.size() >= kMaxPendingUploads)
      return fail(ctx, errors::ResourceExhausted(
                           "upload: a session may have at most {} parallel uploads in progress",
                           kMaxPendingUploads));
  }
  // Charged to the session until FinishUpload (or the session's end) settles it.
  if (Status c = g.charge(*size, "upload"); !c.ok()) return fail(ctx, c);
  auto pending = std::make_shared<PendingUpload>();
  pending->header = *req;
  pending->size = *size;
  pending->block = host_block(static_cast<size_t>(*size));
  if (!pending->block) {
    g.uncharge(*size);
    return fail(ctx, errors::ResourceExhausted(
                         "upload: cannot hold {} bytes in the broker's host memory", *size));
  }
  std::lock_guard<std::mutex> lock(mu_);
  SessionState* s = g.state_locked();
  if (!s) return fail(ctx, errors::NotFound("the session ended during BeginUpload"));
  if (s->uploads.size() >= kMaxPendingUploads) {
    s->pending_bytes -= *size;
    return fail(ctx, errors::ResourceExhausted(
                         "upload: a session may have at most {} parallel uploads in progress",
                         kMaxPendingUploads));
  }
  const uint64_t id = s->next_upload++;
  s->uploads.emplace(id, std::move(pending));
  resp->set_upload(id);
  return grpc::Status::OK;
}

grpc::Status Service::FinishUpload(grpc::ServerContext* ctx, const v1::FinishUploadRequest* req,
                                   v1::UploadResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  std::shared_ptr<PendingUpload> p;
  {
    std::lock_guard<std::mutex> lock(mu_);
    SessionState* s = g.state_locked();
    auto it = s ? s->uploads.find(req->upload()) : decltype(s->uploads)::iterator{};
    if (!s || it == s->uploads.end())
      return fail(ctx, errors::NotFound("upload {} does not exist in this session",
                                        req->upload()));
    p = std::move(it->second);
    s->uploads.erase(it);  // finished or failed: either way it is over
  }
  // Its bytes stop counting as pending when this call ends (they are the tensor's then).
  struct Uncharge {
    const Guard& g;
    int64_t n;
    ~Uncharge() { g.uncharge(n); }
  } uncharge{g, p->size};
  std::lock_guard<std::mutex> lock(p->mu);
  std::sort(p->parts.begin(), p->parts.end());
  int64_t covered = 0;
  for (const auto& [b, e] : p->parts) {
    if (b != covered)
      return fail(ctx, errors::InvalidArgument(
                           "upload {}: bytes [{}, {}) {}", req->upload(), std::min(b, covered),
                           std::max(b, covered), b > covered ? "never arrived" : "arrived twice"));
    covered = e;
  }
  if (covered != p->size)
    return fail(ctx, errors::InvalidArgument("upload {}: bytes [{}, {}) never arrived",
                                             req->upload(), covered, p->size));
  TensorView view{static_cast<DType>(p->header.dtype()),
                  Shape(p->header.shape().begin(), p->header.shape().end()), p->block.get()};
  auto h = engine_->upload_external(g.engine_session(), view, p->header.device(),
                                    std::shared_ptr<void>(p->block));
  if (!h.ok()) return fail(ctx, h.status());
  resp->set_handle(*h);
  return grpc::Status::OK;
}

grpc::Status Service::UploadInline(grpc::ServerContext* ctx, const v1::UploadChunk* req,
                                   v1::UploadResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  if (!req->has_header())
    return fail(ctx, errors::InvalidArgument("upload: the message carries no header"));
  auto size = check_header(g, req->header());
  if (!size.ok()) return fail(ctx, size.status());
  if (static_cast<int64_t>(req->data().size()) != *size)
    return fail(ctx, errors::InvalidArgument(
                         "upload: the header declares {} bytes, but the message carries {}",
                         *size, req->data().size()));
  return finish_upload(ctx, g, req->header(), req->data().data(), resp);
}

// Read: the value's bytes go out from where they are. A device computing on host memory (cpu)
// lends them in place (Engine::map_host); other devices copy them once into a pooled block
// (warm pages: no fresh, page-faulting allocation per read, which costs more than the copy).
// The messages are tensord.v1.ReadChunk written here by hand: a small framing slice, then a
// slice OF the value's memory (kept alive until gRPC has sent it), so this side copies
// nothing; the kernel's socket copy is the only one. The value is waited for on a thread of
// the call's own (the callback API must not block), at most kMaxReadThreads at once; past
// that, on gRPC's callback thread.
class Service::ReadReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  static constexpr int kMaxReadThreads = 64;
  // A value this large, lent in place, may be read over several streams (ReadRequest.streams).
  static constexpr int64_t kSplitReadMinBytes = 64 << 20;
  static constexpr int64_t kMaxReadStreams = 16;

  ReadReactor(Service* service, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request)
      : service_(service), ctx_(ctx), guard_(service, ctx) {
    if (!guard_.ok()) {
      Finish(fail(ctx_, guard_.status()));
      return;
    }
    grpc::ByteBuffer copy(*request);
    if (!grpc::SerializationTraits<v1::ReadRequest>::Deserialize(&copy, &req_).ok()) {
      Finish(fail(ctx_, errors::InvalidArgument("read: the request is not a ReadRequest")));
      return;
    }
    std::shared_ptr<std::atomic<int>> running = service_->read_threads_;
    if (running->fetch_add(1) < kMaxReadThreads) {
      std::thread([this, running] {
        prepare_and_start();  // the reactor (and the service) may be gone once this returns
        running->fetch_sub(1);
      }).detach();
    } else {
      running->fetch_sub(1);
      prepare_and_start();
    }
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(fail(ctx_, Status(StatusCode::kCancelled, "read: the client went away")));
      return;
    }
    if (++next_ < messages_.size()) {
      StartWrite(&messages_[next_]);
      return;
    }
    Finish(grpc::Status::OK);
  }
  void OnDone() override { delete this; }

 private:
  // Waits for the value, lays out the messages and starts writing (or finishes with the
  // error). The last thing it does is StartWrite/Finish: after that the reactor belongs to
  // gRPC's callbacks.
  void prepare_and_start() {
    Status s = prepare();
    if (!s.ok()) {
      Finish(fail(ctx_, s));
      return;
    }
    StartWrite(&messages_[0]);
  }

  Status prepare() {
    const v1::ReadRequest& req = req_;
    if (req.offset() < 0 || req.length() < 0 || req.max_bytes() < 0)
      return errors::InvalidArgument(
          "read: offset {}, length {} and max_bytes {} must not be negative", req.offset(),
          req.length(), req.max_bytes());
    Engine& engine = *service_->engine_;
    const SessionId session = guard_.engine_session();
    auto call = call_token(ctx_);
    TensorType type;
    const unsigned char* bytes = nullptr;
    int64_t total = 0;
    auto mapped = engine.map_host(session, req.handle(), call.get());
    const bool lent = mapped.ok();  // sent from the value's own memory
    if (mapped.ok()) {
      type = {mapped->view.dtype, mapped->view.shape};
      bytes = static_cast<const unsigned char*>(mapped->view.data);
      keep_ = std::move(mapped->keepalive);
      TD_ASSIGN_OR_RETURN(total, checked_byte_size(type.dtype, type.shape));
    } else if (mapped.status().code() == StatusCode::kFailedPrecondition) {
      // Not in host memory (or a computation that failed with that code: read_into says so).
      TD_ASSIGN_OR_RETURN(TensorInfo info, engine.info(session, req.handle(), call.get()));
      auto n = checked_byte_size(info.type.dtype, info.type.shape);
      std::shared_ptr<unsigned char> block;
      if (n.ok() && *n > 0 && (req.max_bytes() == 0 || *n <= req.max_bytes())) {
        block = host_block(static_cast<size_t>(*n));
        if (!block)
          return errors::ResourceExhausted(
              "read: cannot hold {} bytes in the broker's host memory", *n);
      }
      TD_ASSIGN_OR_RETURN(type, engine.read_into(session, req.handle(), block.get(),
                                                 block ? static_cast<size_t>(*n) : 0,
                                                 call.get()));
      TD_ASSIGN_OR_RETURN(total, checked_byte_size(type.dtype, type.shape));
      if (total > 0 && (!block || !n.ok() || total > *n))
        return errors::Internal("read: the value of handle {} changed size while read",
                                req.handle());
      bytes = block.get();
      keep_ = std::move(block);
    } else {
      return mapped.status();
    }
    if (req.offset() > total)
      return errors::OutOfRange("read: offset {} is past the {} bytes of handle {}",
                                req.offset(), total, req.handle());
    v1::ReadHeader header;
    header.set_dtype(static_cast<int32_t>(type.dtype));
    header.mutable_shape()->Assign(type.shape.begin(), type.shape.end());
    header.set_total_bytes(total);
    std::string framing;
    put_field(framing, 1, header.ByteSizeLong());  // field 1 (header), length-delimited
    framing += header.SerializeAsString();
    if (req.max_bytes() > 0 && total > req.max_bytes()) {  // no room: the header tells
      grpc::Slice slice(framing);
      messages_.emplace_back(&slice, 1);
      return OkStatus();
    }
    int64_t end = req.length() > 0 ? std::min(total, req.offset() + req.length()) : total;
    if (lent && req.streams() > 1 && req.offset() == 0 && req.length() == 0 &&
        total >= kSplitReadMinBytes) {
      // Parts over the client's concurrent streams (one core each on both sides), as a large
      // upload: each part's stream sends from the same memory, nothing is copied per part.
      const int64_t k = std::min<int64_t>(req.streams(), kMaxReadStreams);
      const int64_t part = ((total + k - 1) / k + 63) / 64 * 64;  // k parts at most
      header.set_part_bytes(part);
      framing.clear();
      put_field(framing, 1, header.ByteSizeLong());
      framing += header.SerializeAsString();
      end = part;
    }
    int64_t chunk = req.chunk_bytes() > 0 ? req.chunk_bytes() : service_->options_.chunk_bytes;
    chunk = std::clamp<int64_t>(chunk, 64 << 10, 64 << 20);
    int64_t off = req.offset();
    do {
      const int64_t n = std::min(chunk, end - off);
      put_field(framing, 2, static_cast<uint64_t>(n));  // field 2 (data), length-delimited
      grpc::Slice head(framing);
      framing.clear();
      if (n > 0) {
        // The value's memory itself; each slice holds the value until gRPC is done with it.
        auto* hold = new std::shared_ptr<const void>(keep_);
        grpc::Slice data(const_cast<unsigned char*>(bytes + off), static_cast<size_t>(n),
                         [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); },
                         hold);
        grpc::Slice parts[2] = {head, data};
        messages_.emplace_back(parts, 2);
      } else {
        messages_.emplace_back(&head, 1);
      }
      off += n;
    } while (off < end);
    return OkStatus();
  }

  static void put_field(std::string& out, int field, uint64_t len) {
    out.push_back(static_cast<char>((field << 3) | 2));
    while (len >= 0x80) {
      out.push_back(static_cast<char>(len | 0x80));
      len >>= 7;
    }
    out.push_back(static_cast<char>(len));
  }

  Service* service_;
  grpc::CallbackServerContext* ctx_;
  Guard guard_;
  v1::ReadRequest req_;
  std::shared_ptr<const void> keep_;  // the value's bytes, while the messages are written
  std::vector<grpc::ByteBuffer> messages_;
  size_t next_ = 0;
};

grpc::ServerWriteReactor<grpc::ByteBuffer>* Service::Read(grpc::CallbackServerContext* ctx,
                                                           const grpc::ByteBuffer* request) {
  return new ReadReactor(this, ctx, request);
}

// Validates an upload header: dtype, shape, declared size, and whether the bytes can fit
// (device memory, session limit) before any are received. Returns the byte size.
Result<int64_t> Service::check_header(const Guard& g, const v1::UploadHeader& h) {
  TD_ASSIGN_OR_RETURN(int64_t size, checked_wire_size(h.dtype(), h.shape(), "upload"));
  if (h.total_bytes() != size)
    return errors::InvalidArgument(
        "upload: the header declares {} bytes, but {}{} takes {} bytes", h.total_bytes(),
        dtype_name(static_cast<DType>(h.dtype())),
        shape_to_string(Shape(h.shape().begin(), h.shape().end())), size);
  if (g.memory_limit() > 0) {
    const int64_t held = engine_->session_bytes(g.engine_session()) + g.pending_bytes();
    if (size > g.memory_limit() - held)
      return errors::ResourceExhausted(
          "session memory limit exceeded: uploading {} bytes would bring the session to {} "
          "bytes (limit {})",
          size, held + size, g.memory_limit());
  }
  std::string device = h.device();
  if (device.empty()) {
    auto dd = engine_->default_device();
    if (dd.ok()) device = *dd;
  }
  for (const auto& d : engine_->devices()) {
    if (d.name != device) continue;
    if (size > d.memory_bytes - d.memory_in_use)
      return errors::ResourceExhausted(
          "upload: {} bytes do not fit on {} now (capacity {} bytes)", size, d.name,
          d.memory_bytes);
  }
  return size;  // an unknown device is the engine's to report
}

grpc::Status Service::finish_upload(grpc::ServerContext* ctx, const Guard& g,
                                    const v1::UploadHeader& h, const void* data,
                                    v1::UploadResponse* resp) {
  TensorView view{static_cast<DType>(h.dtype()), Shape(h.shape().begin(), h.shape().end()), data};
  auto handle = engine_->upload(g.engine_session(), view, h.device());
  if (!handle.ok()) return fail(ctx, handle.status());
  resp->set_handle(*handle);
  return grpc::Status::OK;
}

}  // namespace tensord::rpc::server_impl
