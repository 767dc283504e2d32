// The broker's own tests: the wire conversions, and faults against real `tensord serve`
// processes — bad handles and sessions, uploads whose declared size disagrees with the bytes
// sent, clients that vanish mid-upload, leases that lapse, brokers that die or are stopped.
// After each fault the broker keeps serving and its memory returns to the baseline.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>
#include <tuple>

#include "broker_process.h"
#include "rpc/remote_client.h"
#include "rpc/wire.h"
#include "shm_util.h"
#include "tensord.grpc.pb.h"
#include "tensord/version.h"

extern char** environ;

namespace tensord {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
using testing::BrokerOptions;
using testing::BrokerProcess;

HostTensor f32(std::vector<float> v, Shape s) { return HostTensor::from_vector(v, std::move(s)); }

Node node(std::string name, std::string op, std::vector<std::string> in,
          std::vector<std::string> out, AttributeMap attrs = {}) {
  Node n;
  n.name = std::move(name);
  n.op = std::move(op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

double seconds_since(steady_clock::time_point t0) {
  return std::chrono::duration<double>(steady_clock::now() - t0).count();
}

// ---------------------------------------------------------------- wire conversions

bool same_tensor(const HostTensor& a, const HostTensor& b) {
  return a.type() == b.type() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.data(), b.data(), a.nbytes()) == 0);
}

void expect_same_graph(const Graph& a, const Graph& b) {
  EXPECT_EQ(a.name, b.name);
  ASSERT_EQ(a.inputs.size(), b.inputs.size());
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    EXPECT_EQ(a.inputs[i].name, b.inputs[i].name);
    EXPECT_EQ(a.inputs[i].type, b.inputs[i].type);
  }
  ASSERT_EQ(a.outputs.size(), b.outputs.size());
  ASSERT_EQ(a.nodes.size(), b.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const Node &x = a.nodes[i], &y = b.nodes[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.op, y.op);
    EXPECT_EQ(x.domain, y.domain);
    EXPECT_EQ(x.inputs, y.inputs);
    EXPECT_EQ(x.outputs, y.outputs);
    ASSERT_EQ(x.attrs.size(), y.attrs.size());
    for (const auto& [name, attr] : x.attrs) {
      auto it = y.attrs.find(name);
      ASSERT_NE(it, y.attrs.end()) << name;
      ASSERT_EQ(attr.kind(), it->second.kind()) << name;
      if (attr.kind() == Attribute::Kind::kTensor) {
        EXPECT_TRUE(same_tensor(*attr.get_if<HostTensor>(), *it->second.get_if<HostTensor>()));
      } else if (attr.kind() == Attribute::Kind::kGraph) {
        expect_same_graph(**attr.get_if<std::shared_ptr<const Graph>>(),
                          **it->second.get_if<std::shared_ptr<const Graph>>());
      } else if (attr.kind() == Attribute::Kind::kInt) {
        EXPECT_EQ(*attr.get_if<int64_t>(), *it->second.get_if<int64_t>());
      } else if (attr.kind() == Attribute::Kind::kFloat) {
        EXPECT_EQ(*attr.get_if<float>(), *it->second.get_if<float>());
      } else if (attr.kind() == Attribute::Kind::kString) {
        EXPECT_EQ(*attr.get_if<std::string>(), *it->second.get_if<std::string>());
      } else if (attr.kind() == Attribute::Kind::kInts) {
        EXPECT_EQ(*attr.get_if<std::vector<int64_t>>(), *it->second.get_if<std::vector<int64_t>>());
      } else if (attr.kind() == Attribute::Kind::kFloats) {
        EXPECT_EQ(*attr.get_if<std::vector<float>>(), *it->second.get_if<std::vector<float>>());
      } else {
        EXPECT_EQ(*attr.get_if<std::vector<std::string>>(),
                  *it->second.get_if<std::vector<std::string>>());
      }
    }
  }
  ASSERT_EQ(a.initializers.size(), b.initializers.size());
  for (const auto& [name, t] : a.initializers) {
    ASSERT_TRUE(b.initializers.count(name)) << name;
    EXPECT_TRUE(same_tensor(t, b.initializers.at(name))) << name;
  }
}

TEST(Wire, GraphRoundTripKeepsEveryAttributeKind) {
  auto body = std::make_shared<Graph>();
  body->name = "body";
  body->nodes = {node("inner", "Identity", {"x"}, {"y"})};
  body->outputs = {{"y", {DType::kFloat16, {-1, 2}}}};
  Graph g;
  g.name = "all";
  g.inputs = {{"x", {DType::kInt64, {2, -1}}}, {"u", {}}};
  g.outputs = {{"y", {}}};
  std::string raw("\xff\x00\x01", 3);  // ONNX strings are bytes, not UTF-8
  g.nodes = {node("n", "Custom", {"x", ""}, {"y"},
                  {{"i", int64_t{-7}},
                   {"f", 2.5f},
                   {"s", raw},
                   {"ints", std::vector<int64_t>{1, -2, 3}},
                   {"floats", std::vector<float>{0.5f, -1}},
                   {"strings", std::vector<std::string>{"a", raw, ""}},
                   {"t", HostTensor::from_vector<int32_t>({1, 2, 3}, {3})},
                   {"empty_t", HostTensor()},
                   {"g", std::shared_ptr<const Graph>(body)}})};
  g.nodes[0].domain = "com.example";
  g.initializers["w"] = HostTensor::from_vector<double>({1, 2}, {2, 1});
  g.initializers["z"] = HostTensor(DType::kBFloat16, {0});
  v1::Graph p;
  rpc::to_proto(g, &p);
  std::string bytes;
  ASSERT_TRUE(p.SerializeToString(&bytes));
  v1::Graph q;
  ASSERT_TRUE(q.ParseFromString(bytes));
  auto back = rpc::from_proto(q);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same_graph(g, *back);
}

TEST(Wire, MalformedGraphsAreInvalidArgumentNamingTheValue) {
  v1::Graph p;
  auto* n = p.add_nodes();
  n->set_name("conv1");
  n->set_op("Conv");
  (*n->mutable_attrs())["strides"];  // no value
  auto r = rpc::from_proto(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("strides"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("conv1"), std::string::npos) << r.status().message();

  v1::Graph q;
  auto& t = (*q.mutable_initializers())["w"];
  t.set_dtype(1);
  t.add_shape(4);
  t.set_data(std::string(12, '\0'));  // float32[4] is 16 bytes
  r = rpc::from_proto(q);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'w'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("16"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("12"), std::string::npos) << r.status().message();

  t.set_dtype(99);
  EXPECT_NE(rpc::from_proto(q).status().message().find("99"), std::string::npos);
  t.set_dtype(1);
  t.set_shape(0, -4);
  EXPECT_EQ(rpc::from_proto(q).status().code(), StatusCode::kInvalidArgument);

  v1::Graph v;
  v.add_inputs()->mutable_type()->set_dtype(8);  // 8 is ONNX's string: not a tensord dtype
  EXPECT_EQ(rpc::from_proto(v).status().code(), StatusCode::kInvalidArgument);
}

TEST(Wire, StatusCodesMapOneToOne) {
  for (int c = 0; c <= 16; ++c) {
    Status s(static_cast<StatusCode>(c), c ? "message " + std::to_string(c) : "");
    grpc::Status g = rpc::to_grpc(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), c);
    EXPECT_EQ(rpc::from_grpc(g), s);
  }
}

// ---------------------------------------------------------------- raw protocol faults

// A raw stub on the broker, for what RemoteClient never sends.
class RawBroker {
 public:
  explicit RawBroker(const std::string& address) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
    stub_ = v1::Tensord::NewStub(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  }
  std::string open_session() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(5000));
    v1::OpenSessionRequest req;
    v1::OpenSessionResponse resp;
    grpc::Status s = stub_->OpenSession(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.session_id();
  }
  void prepare(grpc::ClientContext& ctx, const std::string& session) {
    ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(10000));
    if (!session.empty()) ctx.AddMetadata(rpc::kSessionKey, session);
  }
  int64_t in_use(const std::string& device) {
    grpc::ClientContext ctx;
    prepare(ctx, "");
    v1::ListDevicesRequest req;
    v1::ListDevicesResponse resp;
    EXPECT_TRUE(stub_->ListDevices(&ctx, req, &resp).ok());
    for (const auto& d : resp.devices())
      if (d.name() == device) return d.memory_in_use();
    return -1;
  }
  int64_t in_use_settled(const std::string& device, int64_t expect) {
    int64_t v = in_use(device);
    for (int i = 0; i < 300 && v != expect; ++i) {
      std::this_thread::sleep_for(milliseconds(10));
      v = in_use(device);
    }
    return v;
  }
  // Streams `chunks` after a header declaring `declared` bytes of float32[shape].
  grpc::Status upload(const std::string& session, Shape shape, int64_t declared,
                      const std::vector<std::string>& chunks, bool header_first = true,
                      uint64_t* handle = nullptr) {
    grpc::ClientContext ctx;
    prepare(ctx, session);
    v1::UploadResponse resp;
    auto w = stub_->Upload(&ctx, &resp);
    v1::UploadChunk header;
    header.mutable_header()->set_dtype(1);
    header.mutable_header()->mutable_shape()->Assign(shape.begin(), shape.end());
    header.mutable_header()->set_total_bytes(declared);
    if (header_first) w->Write(header);
    for (const auto& c : chunks) {
      v1::UploadChunk m;
      m.set_data(c);
      if (!w->Write(m)) break;
    }
    w->WritesDone();
    grpc::Status s = w->Finish();
    if (handle) *handle = resp.handle();
    return s;
  }
  v1::Tensord::Stub& stub() { return *stub_; }

 private:
  std::unique_ptr<v1::Tensord::Stub> stub_;
};

class BrokerFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    broker_ = testing::shared_broker();
    ASSERT_NE(broker_, nullptr);
    raw_ = std::make_unique<RawBroker>(broker_->address());
    base_ = raw_->in_use("cpu:0");
  }
  // The broker still serves: a normal client uploads and reads back.
  void expect_still_serving() {
    auto c = rpc::RemoteClient::connect(broker_->address());
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    HostTensor t = f32({1, 2, 3}, {3});
    auto h = (*c)->upload(t.view(), "");
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    auto back = (*c)->read(*h);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->to_double_vector(), (std::vector<double>{1, 2, 3}));
  }

  BrokerProcess* broker_ = nullptr;
  std::unique_ptr<RawBroker> raw_;
  int64_t base_ = 0;
};

// Parallel uploads (BeginUpload, parts on concurrent streams, FinishUpload): parts land at
// their offsets in any order; a missing, repeated or foreign part is a clear error at the
// finish; the reserved bytes go away with the upload either way.
TEST_F(BrokerFaults, ParallelUploadPartsAreCheckedAtTheFinish) {
  const std::string session = raw_->open_session();
  auto begin = [&](int64_t n) {
    grpc::ClientContext ctx;
    raw_->prepare(ctx, session);
    v1::UploadHeader h;
    h.set_dtype(1);
    h.add_shape(n);
    h.set_total_bytes(n * 4);
    v1::BeginUploadResponse resp;
    grpc::Status st = raw_->stub().BeginUpload(&ctx, h, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.upload();
  };
  auto part = [&](const std::string& s, uint64_t upload, int64_t offset, const std::vector<float>& v) {
    grpc::ClientContext ctx;
    raw_->prepare(ctx, s);
    v1::UploadResponse resp;
    auto w = raw_->stub().Upload(&ctx, &resp);
    v1::UploadChunk m;
    m.set_part_of(upload);
    m.set_offset(offset);
    m.set_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
    w->Write(m);
    w->WritesDone();
    return w->Finish();
  };
  auto finish = [&](uint64_t upload, uint64_t* handle) {
    grpc::ClientContext ctx;
    raw_->prepare(ctx, session);
    v1::FinishUploadRequest req;
    req.set_upload(upload);
    v1::UploadResponse resp;
    grpc::Status st = raw_->stub().FinishUpload(&ctx, req, &resp);
    if (handle) *handle = resp.handle();
    return st;
  };
  // Two parts, the second first: the tensor reads back whole.
  uint64_t up = begin(4);
  ASSERT_TRUE(part(session, up, 8, {3, 4}).ok());
  ASSERT_TRUE(part(session, up, 0, {1, 2}).ok());
  uint64_t handle = 0;
  grpc::Status st = finish(up, &handle);
  ASSERT_TRUE(st.ok()) << st.error_message();
  {
    grpc::ClientContext ctx;
    raw_->prepare(ctx, session);
    v1::ReadRequest req;
    req.set_handle(handle);
    auto r = raw_->stub().Read(&ctx, req);
    v1::ReadChunk chunk;
    std::string bytes;
    while (r->Read(&chunk)) bytes += chunk.data();
    ASSERT_TRUE(r->Finish().ok());
    ASSERT_EQ(bytes.size(), 16u);
    std::vector<float> back(4);
    std::memcpy(back.data(), bytes.data(), 16);
    EXPECT_EQ(back, (std::vector<float>{1, 2, 3, 4}));
  }
  // A missing part, a part sent twice, an offset past the end, another session's upload, an
  // unknown upload: each named in the error.
  up = begin(4);
  ASSERT_TRUE(part(session, up, 0, {1, 2}).ok());
  st = finish(up, nullptr);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("never arrived"), std::string::npos) << st.error_message();
  up = begin(2);
  ASSERT_TRUE(part(session, up, 0, {1, 2}).ok());
  ASSERT_TRUE(part(session, up, 0, {1, 2}).ok());
  st = finish(up, nullptr);
  EXPECT_NE(st.error_message().find("arrived twice"), std::string::npos) << st.error_message();
  up = begin(2);
  st = part(session, up, 4, {1, 2});  // bytes 4..12 of an 8-byte tensor
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  st = part(session, up, 64, {1});
  EXPECT_NE(st.error_message().find("past"), std::string::npos) << st.error_message();
  const std::string other = raw_->open_session();
  st = part(other, up, 0, {1, 2});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();
  EXPECT_EQ(finish(up + 1000, nullptr).error_code(), grpc::StatusCode::NOT_FOUND);
  // Finished or failed, nothing of them stays but the one good tensor.
  EXPECT_TRUE(finish(up, nullptr).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  {
    grpc::ClientContext ctx;
    raw_->prepare(ctx, session);
    v1::HandleRequest req;
    req.set_handle(handle);
    v1::ReleaseResponse resp;
    EXPECT_TRUE(raw_->stub().Release(&ctx, req, &resp).ok());
  }
  EXPECT_EQ(raw_->in_use_settled("cpu:0", base_), base_);
  expect_still_serving();
}

// Through RemoteClient: a 72 MiB upload goes over three streams and reads back intact over
// three, into a fresh tensor and into the caller's memory; a buffer one byte short gets the
// type alone.
TEST_F(BrokerFaults, LargeGrpcTransfersOverThreeStreamsAreIntact) {
  rpc::RemoteClientOptions o;
  o.transport = "grpc";
  o.upload_streams = 3;
  auto c = rpc::RemoteClient::connect(broker_->address(), o);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const int64_t n = (72 << 20) / 4 + 5;  // not a multiple of the part size
  HostTensor t(DType::kFloat32, {n});
  for (int64_t i = 0; i < n; ++i) t.mutable_data<float>()[i] = static_cast<float>(i % 1000003);
  auto h = (*c)->upload(t.view(), "");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  auto back = (*c)->read(*h);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->numel(), n);
  EXPECT_EQ(std::memcmp(back->data(), t.data(), static_cast<size_t>(n) * 4), 0);
  std::vector<float> into(static_cast<size_t>(n), -1.0f);
  auto type = (*c)->read_into(*h, into.data(), into.size() * 4);
  ASSERT_TRUE(type.ok()) << type.status().to_string();
  EXPECT_EQ(type->shape, Shape({n}));
  EXPECT_EQ(std::memcmp(into.data(), t.data(), static_cast<size_t>(n) * 4), 0);
  std::vector<float> short_of(static_cast<size_t>(n), -1.0f);
  auto only = (*c)->read_into(*h, short_of.data(), short_of.size() * 4 - 1);
  ASSERT_TRUE(only.ok()) << only.status().to_string();
  EXPECT_EQ(only->shape, Shape({n}));
  EXPECT_EQ(short_of[0], -1.0f);  // nothing written
  EXPECT_TRUE((*c)->release(*h).ok());
  c->reset();
  EXPECT_EQ(raw_->in_use_settled("cpu:0", base_), base_);
}

// A split read on the wire (ReadRequest.streams): a value of 64 MiB or more comes as its first
// part, the header saying how long the parts are (at most `streams` of them, 16 at most); the
// rest is asked for by offset and length. Smaller values come whole whatever `streams` says.
TEST_F(BrokerFaults, SplitReadOnTheWire) {
  const std::string session = raw_->open_session();
  const int64_t n = (65 << 20) / 4 + 3;  // 65 MiB and 12 bytes
  std::string data(static_cast<size_t>(n * 4), '\0');
  for (int64_t i = 0; i < n; ++i) {
    const float f = static_cast<float>(i % 999983);
    std::memcpy(&data[static_cast<size_t>(i * 4)], &f, 4);
  }
  std::vector<std::string> chunks;
  for (size_t at = 0; at < data.size(); at += 2 << 20) chunks.push_back(data.substr(at, 2 << 20));
  uint64_t h = 0, small_h = 0;
  ASSERT_TRUE(raw_->upload(session, {n}, n * 4, chunks, true, &h).ok());
  ASSERT_TRUE(raw_->upload(session, {4}, 16, {data.substr(0, 16)}, true, &small_h).ok());
  auto read = [&](uint64_t handle, int32_t streams, int64_t offset, int64_t length,
                  int64_t* part_bytes) {
    grpc::ClientContext ctx;
    raw_->prepare(ctx, session);
    v1::ReadRequest req;
    req.set_handle(handle);
    req.set_streams(streams);
    req.set_offset(offset);
    req.set_length(length);
    auto r = raw_->stub().Read(&ctx, req);
    v1::ReadChunk chunk;
    std::string bytes;
    bool first = true;
    while (r->Read(&chunk)) {
      if (first) {
        EXPECT_TRUE(chunk.has_header());
        EXPECT_EQ(chunk.header().total_bytes(), handle == h ? n * 4 : 16);
        *part_bytes = chunk.header().part_bytes();
      }
      first = false;
      bytes += chunk.data();
    }
    EXPECT_TRUE(r->Finish().ok());
    return bytes;
  };
  for (int32_t streams : {3, 40}) {
    int64_t part = -1, ignored = 0;
    std::string got = read(h, streams, 0, 0, &part);
    ASSERT_GT(part, 0) << streams;
    EXPECT_EQ(part % 64, 0);
    const int64_t parts = (n * 4 + part - 1) / part;
    EXPECT_LE(parts, std::min(streams, 16));
    EXPECT_GE(parts, 2);
    ASSERT_EQ(static_cast<int64_t>(got.size()), part);  // the first part only
    for (int64_t off = part; off < n * 4; off += part)
      got += read(h, 0, off, std::min(part, n * 4 - off), &ignored);
    EXPECT_TRUE(got == data) << streams;
  }
  int64_t part = -1;
  EXPECT_EQ(read(small_h, 3, 0, 0, &part), data.substr(0, 16));
  EXPECT_EQ(part, 0);
  // One stream asked for, or a part asked for: never split.
  EXPECT_EQ(static_cast<int64_t>(read(h, 1, 0, 0, &part).size()), n * 4);
  EXPECT_EQ(part, 0);
  EXPECT_EQ(static_cast<int64_t>(read(h, 4, 64, 1000, &part).size()), 1000);
  EXPECT_EQ(part, 0);
  expect_still_serving();
}

// Read's room and parts (ReadRequest.max_bytes, offset, length): a value larger than the room
// comes as its header alone; a part comes with the whole value's header and only its bytes, in
// chunks; a part past the end is OUT_OF_RANGE and negative fields INVALID_ARGUMENT.
TEST_F(BrokerFaults, ReadRoomAndPartsOnTheWire) {
  const std::string session = raw_->open_session();
  const int64_t n = 300000;  // 1.2 MB: several 64 KiB chunks
  std::string data(static_cast<size_t>(n * 4), '\0');
  for (int64_t i = 0; i < n; ++i) {
    const float f = static_cast<float>(i);
    std::memcpy(&data[static_cast<size_t>(i * 4)], &f, 4);
  }
  uint64_t h = 0;
  ASSERT_TRUE(raw_->upload(session, {n}, n * 4, {data}, true, &h).ok());
  struct Got {
    grpc::Status status;
    int messages = 0;
    int64_t total = -1;
    std::string bytes;
  };
  auto read = [&](int64_t max_bytes, int64_t offset, int64_t length) {
    grpc::ClientContext ctx;
    raw_->prepare(ctx, session);
    v1::ReadRequest req;
    req.set_handle(h);
    req.set_chunk_bytes(64 << 10);
    req.set_max_bytes(max_bytes);
    req.set_offset(offset);
    req.set_length(length);
    auto r = raw_->stub().Read(&ctx, req);
    v1::ReadChunk chunk;
    Got g;
    while (r->Read(&chunk)) {
      if (g.messages++ == 0) {
        EXPECT_TRUE(chunk.has_header());
        g.total = chunk.header().total_bytes();
      } else {
        EXPECT_FALSE(chunk.has_header());
      }
      g.bytes += chunk.data();
    }
    g.status = r->Finish();
    return g;
  };
  Got all = read(0, 0, 0);
  ASSERT_TRUE(all.status.ok()) << all.status.error_message();
  EXPECT_EQ(all.bytes, data);
  EXPECT_GT(all.messages, 10);
  Got room = read(n * 4, 0, 0);  // exactly the room needed
  EXPECT_EQ(room.bytes, data);
  Got small = read(n * 4 - 1, 0, 0);  // one byte short: the header only
  ASSERT_TRUE(small.status.ok()) << small.status.error_message();
  EXPECT_EQ(small.messages, 1);
  EXPECT_EQ(small.total, n * 4);
  EXPECT_TRUE(small.bytes.empty());
  Got mid = read(0, 100001, 200000);
  ASSERT_TRUE(mid.status.ok()) << mid.status.error_message();
  EXPECT_EQ(mid.total, n * 4);
  EXPECT_EQ(mid.bytes, data.substr(100001, 200000));
  Got tail = read(0, n * 4 - 5, 0);  // length 0: to the end
  EXPECT_EQ(tail.bytes, data.substr(static_cast<size_t>(n * 4 - 5)));
  Got cut = read(0, n * 4 - 5, 1000);  // a length past the end is cut there
  EXPECT_EQ(cut.bytes, data.substr(static_cast<size_t>(n * 4 - 5)));
  EXPECT_EQ(read(0, n * 4 + 1, 0).status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  for (auto [m, o, l] : {std::tuple<int64_t, int64_t, int64_t>{-1, 0, 0}, {0, -1, 0}, {0, 0, -1}})
    EXPECT_EQ(read(m, o, l).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  expect_still_serving();
}

TEST_F(BrokerFaults, HandshakeReportsVersionsAndDevices) {
  grpc::ClientContext ctx;
  raw_->prepare(ctx, "");
  v1::HandshakeRequest req;
  req.set_protocol_version(kProtocolVersion);
  v1::HandshakeResponse resp;
  ASSERT_TRUE(raw_->stub().Handshake(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.protocol_version(), kProtocolVersion);
  EXPECT_EQ(resp.server_version(), kVersion);
  ASSERT_EQ(resp.devices_size(), 2);
  EXPECT_EQ(resp.default_device(), "cpu:0");
}

TEST_F(BrokerFaults, CallsWithoutAValidSessionAreRefused) {
  {
    grpc::ClientContext ctx;
    raw_->prepare(ctx, "");
    v1::HandleRequest req;
    req.set_handle(1);
    v1::InfoResponse resp;
    grpc::Status s = raw_->stub().Info(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find(rpc::kSessionKey), std::string::npos) << s.error_message();
  }
  for (const char* bad : {"abc", "0", "12x", "18446744073709551616",
                          "0123456789ABCDEF0123456789abcdef", "0123456789abcdef0123456789abcde"}) {
    grpc::ClientContext ctx;
    ctx.AddMetadata(rpc::kSessionKey, bad);
    v1::HeartbeatRequest req;
    v1::HeartbeatResponse resp;
    grpc::Status s = raw_->stub().Heartbeat(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
  }
  grpc::ClientContext ctx;
  raw_->prepare(ctx, "0123456789abcdef0123456789abcdef");  // well formed, never issued
  v1::HeartbeatRequest req;
  v1::HeartbeatResponse resp;
  grpc::Status s = raw_->stub().Heartbeat(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("does not exist"), std::string::npos) << s.error_message();
}

TEST_F(BrokerFaults, UnknownAndForeignHandlesAreNotFound) {
  auto a = rpc::RemoteClient::connect(broker_->address());
  auto b = rpc::RemoteClient::connect(broker_->address());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->session(), (*b)->session());
  HostTensor t = f32({1, 2}, {2});
  auto h = (*a)->upload(t.view(), "");
  ASSERT_TRUE(h.ok());
  for (TensorHandle bad : {TensorHandle{0}, TensorHandle{987654321}, *h}) {
    auto r = (*b)->read(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << bad;
    EXPECT_NE(r.status().message().find(std::to_string(bad)), std::string::npos)
        << r.status().message();
    EXPECT_EQ((*b)->wait(bad).code(), StatusCode::kNotFound);
  }
  EXPECT_TRUE((*a)->read(*h).ok());
  (*a).reset();
  EXPECT_EQ(raw_->in_use_settled("cpu:0", base_), base_);
}

TEST_F(BrokerFaults, DeclaredUploadSizeMustMatchTheBytesSent) {
  const std::string s = raw_->open_session();
  // float32[4] is 16 bytes.
  struct Case {
    const char* what;
    int64_t declared;
    std::vector<std::string> chunks;
    bool header_first;
    const char* expect;  // in the message
  } cases[] = {
      {"fewer bytes than declared", 16, {std::string(8, 'a')}, true, "carried 8"},
      {"more bytes than declared", 16, {std::string(10, 'a'), std::string(10, 'b')}, true, "16"},
      {"declared size disagrees with the shape", 12, {std::string(12, 'a')}, true, "12"},
      {"data before the header", 16, {std::string(16, 'a')}, false, "header"},
      {"no bytes at all", 16, {}, true, "carried 0"},
  };
  for (const auto& c : cases) {
    grpc::Status st = raw_->upload(s, {4}, c.declared, c.chunks, c.header_first);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.what;
    EXPECT_NE(st.error_message().find(c.expect), std::string::npos)
        << c.what << ": " << st.error_message();
  }
  // A repeated header.
  {
    grpc::ClientContext ctx;
    raw_->prepare(ctx, s);
    v1::UploadResponse resp;
    auto w = raw_->stub().Upload(&ctx, &resp);
    v1::UploadChunk m;
    m.mutable_header()->set_dtype(1);
    m.mutable_header()->add_shape(4);
    m.mutable_header()->set_total_bytes(16);
    m.set_data(std::string(8, 'x'));
    w->Write(m);
    w->Write(m);
    w->WritesDone();
    grpc::Status st = w->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("repeats the header"), std::string::npos)
        << st.error_message();
  }
  // The inline form checks the same.
  {
    grpc::ClientContext ctx;
    raw_->prepare(ctx, s);
    v1::UploadChunk m;
    m.mutable_header()->set_dtype(1);
    m.mutable_header()->add_shape(4);
    m.mutable_header()->set_total_bytes(16);
    m.set_data(std::string(20, 'x'));
    v1::UploadResponse resp;
    grpc::Status st = raw_->stub().UploadInline(&ctx, m, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("20"), std::string::npos) << st.error_message();
  }
  // A correct one in the same session works; the failures left nothing behind.
  uint64_t h = 0;
  ASSERT_TRUE(raw_->upload(s, {4}, 16, {std::string(6, 'a'), std::string(10, 'b')}, true, &h).ok());
  EXPECT_NE(h, 0u);
  EXPECT_EQ(raw_->in_use("cpu:0") - base_, 16);
  grpc::ClientContext ctx;
  raw_->prepare(ctx, s);
  v1::CloseSessionRequest creq;
  v1::CloseSessionResponse cresp;
  EXPECT_TRUE(raw_->stub().CloseSession(&ctx, creq, &cresp).ok());
  EXPECT_EQ(raw_->in_use_settled("cpu:0", base_), base_);
  expect_still_serving();
}

TEST_F(BrokerFaults, ClientVanishingMidUploadLeavesNothingBehind) {
  const std::string s = raw_->open_session();
  {
    grpc::ClientContext ctx;
    raw_->prepare(ctx, s);
    v1::UploadResponse resp;
    auto w = raw_->stub().Upload(&ctx, &resp);
    v1::UploadChunk m;
    m.mutable_header()->set_dtype(1);
    m.mutable_header()->add_shape(16 << 20);  // 64 MiB declared
    m.mutable_header()->set_total_bytes(64 << 20);
    m.set_data(std::string(1 << 20, 'a'));
    ASSERT_TRUE(w->Write(m));
    m.clear_header();
    ASSERT_TRUE(w->Write(m));
    ctx.TryCancel();
    grpc::Status st = w->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED);
  }
  EXPECT_EQ(raw_->in_use_settled("cpu:0", base_), base_);
  expect_still_serving();
}

TEST_F(BrokerFaults, OversizedUploadIsRefusedBeforeItsBytesTravel) {
  const std::string s = raw_->open_session();
  grpc::ClientContext ctx;
  raw_->prepare(ctx, s);
  v1::UploadChunk m;
  m.mutable_header()->set_dtype(1);
  m.mutable_header()->add_shape(1LL << 50);
  m.mutable_header()->set_total_bytes(4LL << 50);
  v1::UploadResponse resp;
  auto w = raw_->stub().Upload(&ctx, &resp);
  w->Write(m);
  w->WritesDone();
  grpc::Status st = w->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("cpu:0"), std::string::npos) << st.error_message();
  EXPECT_EQ(raw_->in_use("cpu:0"), base_);
}

TEST_F(BrokerFaults, MalformedGraphIsInvalidArgument) {
  auto c = rpc::RemoteClient::connect(broker_->address());
  ASSERT_TRUE(c.ok());
  grpc::ClientContext ctx;
  raw_->prepare(ctx, (*c)->session());
  v1::ExecuteRequest req;
  auto* n = req.mutable_graph()->add_nodes();
  n->set_name("bad");
  n->set_op("Relu");
  (*n->mutable_attrs())["x"];
  v1::ExecuteResponse resp;
  grpc::Status st = raw_->stub().Execute(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("'bad'"), std::string::npos) << st.error_message();
  expect_still_serving();
}

grpc::Status upload_region(RawBroker& raw, const std::string& s, uint64_t region, int64_t offset,
                           int64_t floats, uint64_t* handle = nullptr) {
  grpc::ClientContext ctx;
  raw.prepare(ctx, s);
  v1::UploadRegionRequest req;
  req.mutable_header()->set_dtype(1);
  req.mutable_header()->add_shape(floats);
  req.mutable_header()->set_total_bytes(floats * 4);
  req.set_region(region);
  req.set_offset(offset);
  v1::UploadResponse resp;
  grpc::Status st = raw.stub().UploadRegion(&ctx, req, &resp);
  if (handle) *handle = resp.handle();
  return st;
}

TEST_F(BrokerFaults, SharedMemoryRegionFaultsAreClearErrors) {
  using testing::TestMemfd;
  const std::string s = raw_->open_session();
  const std::string socket = testing::region_socket(raw_->stub());
  ASSERT_EQ(socket.rfind("@tensord-fd-", 0), 0u) << socket;
  // Paths are refused, whatever they name; a size out of range; a ticket never issued.
  struct Case {
    std::string path, ticket;
    int64_t bytes;
    grpc::StatusCode code;
    const char* expect;
  } cases[] = {
      {"/etc/passwd", "", 4096, grpc::StatusCode::INVALID_ARGUMENT, "not registered by path"},
      {"/tensord-x", "", 4096, grpc::StatusCode::INVALID_ARGUMENT, "not registered by path"},
      {"/proc/" + std::to_string(getpid()) + "/fd/0", "", 4096, grpc::StatusCode::INVALID_ARGUMENT,
       "not registered by path"},
      {"", "", 0, grpc::StatusCode::INVALID_ARGUMENT, "size 0"},
      {"", "0123", 4096, grpc::StatusCode::NOT_FOUND, "no pending region ticket '0123'"},
  };
  for (const auto& c : cases) {
    grpc::Status st = testing::register_ticket(raw_->stub(), s, c.ticket, c.bytes, nullptr, c.path);
    EXPECT_EQ(st.error_code(), c.code) << c.path << ": " << st.error_message();
    EXPECT_NE(st.error_message().find(c.expect), std::string::npos)
        << c.path << ": " << st.error_message();
  }
  // A ticket whose descriptor never came.
  std::string ticket;
  ASSERT_TRUE(testing::region_ticket(raw_->stub(), s, &ticket).ok());
  grpc::Status early = testing::register_ticket(raw_->stub(), s, ticket, 4096);
  EXPECT_EQ(early.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << early.error_message();
  EXPECT_NE(early.error_message().find("no descriptor arrived"), std::string::npos)
      << early.error_message();

  TestMemfd shm(1 << 16, F_SEAL_SHRINK, "tensord-faults");
  // Declared larger than it is.
  grpc::Status big = testing::register_fd(raw_->stub(), s, socket, shm.fd, 1 << 20);
  EXPECT_EQ(big.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(big.error_message().find("smaller"), std::string::npos) << big.error_message();

  uint64_t region = 0;
  grpc::Status ok = testing::register_fd(raw_->stub(), s, socket, shm.fd, 1 << 16, &region);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  // Out of range (named by the memfd's name), and a region that is not registered.
  grpc::Status oor = upload_region(*raw_, s, region, (1 << 16) - 8, 4);
  EXPECT_EQ(oor.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_NE(oor.error_message().find("tensord-faults"), std::string::npos) << oor.error_message();
  EXPECT_EQ(upload_region(*raw_, s, region, -4, 1).error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_EQ(upload_region(*raw_, s, region + 99, 0, 4).error_code(), grpc::StatusCode::NOT_FOUND);
  // A region of another session.
  const std::string s2 = raw_->open_session();
  EXPECT_EQ(upload_region(*raw_, s2, region, 0, 4).error_code(), grpc::StatusCode::NOT_FOUND);

  // A good upload and a read back through the region; a read with too little room says so.
  float* mem = reinterpret_cast<float*>(shm.map());
  ASSERT_NE(mem, nullptr);
  for (int i = 0; i < 4; ++i) mem[i] = static_cast<float>(i + 1);
  uint64_t h = 0;
  ASSERT_TRUE(upload_region(*raw_, s, region, 0, 4, &h).ok());
  EXPECT_EQ(raw_->in_use("cpu:0") - base_, 16);
  {
    grpc::ClientContext ctx;
    raw_->prepare(ctx, s);
    v1::ReadRegionRequest req;
    req.set_handle(h);
    req.set_region(region);
    req.set_offset(64);
    v1::ReadRegionResponse resp;
    ASSERT_TRUE(raw_->stub().ReadRegion(&ctx, req, &resp).ok());
    EXPECT_TRUE(resp.written());
    EXPECT_EQ(mem[16 + 3], 4.0f);
  }
  {
    grpc::ClientContext ctx;
    raw_->prepare(ctx, s);
    v1::ReadRegionRequest req;
    req.set_handle(h);
    req.set_region(region);
    req.set_max_bytes(8);
    v1::ReadRegionResponse resp;
    ASSERT_TRUE(raw_->stub().ReadRegion(&ctx, req, &resp).ok());
    EXPECT_FALSE(resp.written());
    EXPECT_EQ(resp.header().total_bytes(), 16);
  }
  // The owner cannot shrink the (sealed) region under the broker; uploads go on working.
  EXPECT_EQ(ftruncate(shm.fd, 0), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_TRUE(upload_region(*raw_, s, region, 0, 4).ok());
  {
    grpc::ClientContext ctx;
    raw_->prepare(ctx, s);
    v1::RegionRequest req;
    req.set_region(region);
    v1::UnregisterRegionResponse resp;
    EXPECT_TRUE(raw_->stub().UnregisterRegion(&ctx, req, &resp).ok());
  }
  EXPECT_EQ(upload_region(*raw_, s, region, 0, 4).error_code(), grpc::StatusCode::NOT_FOUND);
  for (const std::string& sess : {s, s2}) {
    grpc::ClientContext ctx;
    raw_->prepare(ctx, sess);
    v1::CloseSessionRequest creq;
    v1::CloseSessionResponse cresp;
    EXPECT_TRUE(raw_->stub().CloseSession(&ctx, creq, &cresp).ok());
  }
  EXPECT_EQ(raw_->in_use_settled("cpu:0", base_), base_);
  expect_still_serving();
}

TEST_F(BrokerFaults, TransportChoiceAndOverride) {
  rpc::RemoteClientOptions o;
  o.transport = "shm";
  auto shm = rpc::RemoteClient::connect(broker_->address(), o);
  ASSERT_TRUE(shm.ok()) << shm.status().to_string();
  EXPECT_EQ((*shm)->transport(), "shm");
  std::vector<float> v(300000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  HostTensor t = f32(v, {300000});
  auto h = (*shm)->upload(t.view(), "");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  auto back = (*shm)->read(*h);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(std::memcmp(back->data(), t.data(), t.nbytes()), 0);
  o.transport = "grpc";
  auto g = rpc::RemoteClient::connect(broker_->address(), o);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ((*g)->transport(), "grpc");
  o.transport = "carrier-pigeon";
  auto bad = rpc::RemoteClient::connect(broker_->address(), o);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("carrier-pigeon"), std::string::npos);
  shm->reset();
  EXPECT_EQ(raw_->in_use_settled("cpu:0", base_), base_);
}

TEST_F(BrokerFaults, KilledClientProcessIsFreedAtOnceNotAtLeaseEnd) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  std::string path = TENSORD_TEST_CLIENT_PATH, addr = broker_->address();
  char* argv[] = {path.data(), addr.data(), nullptr};
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, path.c_str(), &fa, nullptr, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  std::string line;
  char ch;
  while (read(out[0], &ch, 1) == 1 && ch != '\n') line += ch;
  close(out[0]);
  ASSERT_EQ(line.rfind("ready ", 0), 0u) << "client process said '" << line << "'";
  EXPECT_EQ(raw_->in_use("cpu:0") - base_, 4000);  // its live tensor (the upload is staged)
  kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  // The shared broker's lease is 30 s: only the dropped connection frees the session this soon.
  EXPECT_EQ(raw_->in_use_settled("cpu:0", base_), base_);
  grpc::ClientContext ctx;
  raw_->prepare(ctx, line.substr(6));
  v1::HeartbeatRequest req;
  v1::HeartbeatResponse resp;
  EXPECT_EQ(raw_->stub().Heartbeat(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  expect_still_serving();
}

// ---------------------------------------------------------------- brokers of their own

Result<std::unique_ptr<BrokerProcess>> start_broker(std::vector<std::string> args,
                                                    bool tcp = false) {
  BrokerOptions o;
  o.args = std::move(args);
  o.tcp = tcp;
  return BrokerProcess::start(o);
}

// A graph that keeps a device busy for a while on the reference kernels: `k` chained
// 384x384 matrix products.
Graph slow_graph(int k) {
  Graph g;
  g.inputs = {{"x0", {DType::kFloat32, {384, 384}}}};
  for (int i = 0; i < k; ++i)
    g.nodes.push_back(node("mm" + std::to_string(i), "MatMul",
                           {"x" + std::to_string(i), "x" + std::to_string(i)},
                           {"x" + std::to_string(i + 1)}));
  g.nodes.push_back(node("scale", "Mul", {"x" + std::to_string(k), "tiny"}, {"y"}));
  g.initializers["tiny"] = HostTensor::scalar<float>(0.0f);
  g.outputs = {{"y", {}}};
  return g;
}

TEST(BrokerProcesses, TcpOnAFreePortAndTheEnvironmentAddress) {
  auto b = start_broker({}, /*tcp=*/true);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ((*b)->address().rfind("127.0.0.1:", 0), 0u) << (*b)->address();
  EXPECT_NE((*b)->address(), "127.0.0.1:0");
  setenv("TENSORD_ADDRESS", (*b)->address().c_str(), 1);
  auto c = connect();
  unsetenv("TENSORD_ADDRESS");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_NE(dynamic_cast<rpc::RemoteClient*>(c->get()), nullptr);
  HostTensor t = f32({4, 5}, {2});
  auto h = (*c)->upload(t.view(), "cpu:1");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ((*c)->read(*h)->to_double_vector(), (std::vector<double>{4, 5}));
  EXPECT_TRUE(static_cast<rpc::RemoteClient*>(c->get())->echo(1000).ok());
}

TEST(BrokerProcesses, DeadAddressesAreUnavailableQuickly) {
  // A unix socket that nobody serves, and a TCP port that was just free.
  int port = 0;
  {
    auto b = start_broker({}, /*tcp=*/true);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    port = std::stoi((*b)->address().substr((*b)->address().rfind(':') + 1));
  }
  for (const std::string& addr :
       {std::string("unix:/nonexistent/tensord.sock"), "127.0.0.1:" + std::to_string(port)}) {
    const auto t0 = steady_clock::now();
    auto c = rpc::RemoteClient::connect(addr);
    ASSERT_FALSE(c.ok()) << addr;
    EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status().to_string();
    EXPECT_NE(c.status().message().find(addr), std::string::npos) << c.status().message();
    EXPECT_LT(seconds_since(t0), 3.0) << addr;
  }
}

TEST(BrokerProcesses, KilledBrokerIsUnavailableQuicklyNotAHang) {
  auto b = start_broker({});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto c = rpc::RemoteClient::connect((*b)->address());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  HostTensor x(DType::kFloat32, {384, 384});
  auto hx = (*c)->upload(x.view(), "");
  ASSERT_TRUE(hx.ok());
  auto out = (*c)->execute(slow_graph(3000), {*hx}, "");  // seconds of work: still running at the kill
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  // A read blocked on the computation when the broker dies.
  auto pending = std::async(std::launch::async, [&] { return (*c)->read((*out)[0]); });
  std::this_thread::sleep_for(milliseconds(200));
  (*b)->signal(SIGKILL);
  const auto t0 = steady_clock::now();
  ASSERT_EQ(pending.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "read() still blocked 10 s after the broker died";
  auto r = pending.get();
  EXPECT_LT(seconds_since(t0), 5.0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().to_string();
  // Every later call fails at once.
  const auto t1 = steady_clock::now();
  EXPECT_EQ((*c)->info(*hx).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ((*c)->upload(x.view(), "").status().code(), StatusCode::kUnavailable);
  EXPECT_EQ((*c)->devices().status().code(), StatusCode::kUnavailable);
  EXPECT_LT(seconds_since(t1), 3.0);
  const auto t2 = steady_clock::now();
  c->reset();  // closing the session must not hang either
  EXPECT_LT(seconds_since(t2), 3.0);
}

TEST(BrokerProcesses, SigtermLetsInFlightCallsFinishThenExitsZero) {
  auto b = start_broker({});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto c = rpc::RemoteClient::connect((*b)->address());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  HostTensor x(DType::kFloat32, {384, 384});
  auto hx = (*c)->upload(x.view(), "");
  ASSERT_TRUE(hx.ok());
  auto out = (*c)->execute(slow_graph(6), {*hx}, "");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  auto pending = std::async(std::launch::async, [&] { return (*c)->read((*out)[0]); });
  std::this_thread::sleep_for(milliseconds(100));
  (*b)->signal(SIGTERM);
  ASSERT_EQ(pending.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  auto r = pending.get();
  ASSERT_TRUE(r.ok()) << "the in-flight read did not finish: " << r.status().to_string();
  EXPECT_EQ(r->shape(), (Shape{384, 384}));
  EXPECT_EQ((*b)->wait_exit(milliseconds(15000)), 0);
  EXPECT_EQ((*c)->info(*hx).status().code(), StatusCode::kUnavailable);  // refused now
}

TEST(BrokerProcesses, LapsedLeaseFreesTheSessionButHeartbeatsKeepItAlive) {
  auto b = start_broker({"--lease-seconds", "0.3"});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  RawBroker raw((*b)->address());
  const int64_t base = raw.in_use("cpu:0");
  // A session nobody renews.
  const std::string s = raw.open_session();
  uint64_t h = 0;
  ASSERT_TRUE(raw.upload(s, {1000}, 4000, {std::string(4000, 'a')}, true, &h).ok());
  EXPECT_EQ(raw.in_use("cpu:0") - base, 4000);
  // A client whose heartbeat thread renews its lease.
  auto c = rpc::RemoteClient::connect((*b)->address());
  ASSERT_TRUE(c.ok());
  HostTensor t = f32({7}, {1});
  auto kept = (*c)->upload(t.view(), "cpu:1");
  ASSERT_TRUE(kept.ok());

  std::this_thread::sleep_for(milliseconds(1200));
  EXPECT_EQ(raw.in_use("cpu:0"), base);
  grpc::ClientContext ctx;
  raw.prepare(ctx, s);
  v1::HandleRequest req;
  req.set_handle(h);
  v1::InfoResponse resp;
  grpc::Status st = raw.stub().Info(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(st.error_message().find("lease"), std::string::npos) << st.error_message();
  auto v = (*c)->read(*kept);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->to_double_vector(), (std::vector<double>{7}));
}

TEST(BrokerProcesses, SessionMemoryLimitFlag) {
  auto b = start_broker({"--session-memory-limit", "64"});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto c = rpc::RemoteClient::connect((*b)->address());
  ASSERT_TRUE(c.ok());
  HostTensor small = f32(std::vector<float>(8, 1.0f), {8});  // 32 bytes
  ASSERT_TRUE((*c)->upload(small.view(), "").ok());
  ASSERT_TRUE((*c)->upload(small.view(), "").ok());
  auto third = (*c)->upload(small.view(), "");
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("session memory limit"), std::string::npos)
      << third.status().message();
  // A client asking for more than the broker allows still gets the broker's limit.
  rpc::RemoteClientOptions o;
  o.memory_limit = 1 << 20;
  auto d = rpc::RemoteClient::connect((*b)->address(), o);
  ASSERT_TRUE(d.ok());
  HostTensor big = f32(std::vector<float>(100, 1.0f), {100});
  EXPECT_EQ((*d)->upload(big.view(), "").status().code(), StatusCode::kResourceExhausted);
}

TEST(BrokerProcesses, TokenIsRequiredWhenConfigured) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("tensord-token-" + std::to_string(getpid())))
          .string();
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/token";
  std::ofstream(file) << "s3cret-token\n";
  std::filesystem::permissions(file, std::filesystem::perms::owner_read |
                                         std::filesystem::perms::owner_write);
  auto b = start_broker({"--token-file", file});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  unsetenv("TENSORD_TOKEN");
  auto none = rpc::RemoteClient::connect((*b)->address());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kUnauthenticated) << none.status().to_string();
  EXPECT_NE(none.status().message().find("TENSORD_TOKEN"), std::string::npos);
  rpc::RemoteClientOptions o;
  o.token = "guess";
  auto wrong = rpc::RemoteClient::connect((*b)->address(), o);
  EXPECT_EQ(wrong.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(wrong.status().message().find("wrong token"), std::string::npos);
  setenv("TENSORD_TOKEN", "s3cret-token", 1);
  auto good = rpc::RemoteClient::connect((*b)->address());
  unsetenv("TENSORD_TOKEN");
  ASSERT_TRUE(good.ok()) << good.status().to_string();
  HostTensor t = f32({1, 2}, {2});
  auto h = (*good)->upload(t.view(), "");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ((*good)->read(*h)->to_double_vector(), (std::vector<double>{1, 2}));
  // A raw call with a session but no token.
  RawBroker raw((*b)->address());
  grpc::ClientContext ctx;
  raw.prepare(ctx, (*good)->session());
  v1::HeartbeatRequest req;
  v1::HeartbeatResponse resp;
  EXPECT_EQ(raw.stub().Heartbeat(&ctx, req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  auto missing = start_broker({"--token-file", dir + "/nope"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("status 2"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(BrokerProcesses, BadServeFlagsAreUsageErrors) {
  for (std::vector<std::string> args : {std::vector<std::string>{"--lease-seconds", "0"},
                                        std::vector<std::string>{"--session-memory-limit", "-5"}}) {
    auto b = start_broker(args);
    ASSERT_FALSE(b.ok());
    EXPECT_NE(b.status().message().find("status 2"), std::string::npos) << b.status().message();
  }
}

}  // namespace
}  // namespace tensord
