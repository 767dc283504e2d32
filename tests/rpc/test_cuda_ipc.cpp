// CUDA IPC against a real `tensord serve` (issue 12): the wire form of a GPU buffer's IPC
// handle, and every refusal a client meets where the GPU path cannot be taken — a broker with
// no cuda device, a client on another host, a malformed handle — each a clear status naming
// why, the broker alive after. (The copies themselves need a GPU: tests/cuda/test_cuda.cpp,
// CudaIpc.*, run by scripts/gpu-check.sh.)
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <string>

#include "broker_process.h"
#include "rpc/remote_client.h"
#include "rpc/wire.h"
#include "shm_util.h"
#include "tensord.grpc.pb.h"

namespace tensord {
namespace {

TEST(CudaIpcWire, AHandleRoundTripsAndMalformedOnesAreRefused) {
  ForeignMemory m;
  m.kind = "cuda";
  m.ipc_handle.assign(64, '\0');
  for (int i = 0; i < 64; ++i) m.ipc_handle[i] = static_cast<char>(i * 7);
  m.offset = 4096;
  m.size = 1 << 20;
  m.device_uuid = "GPU-01234567-89ab-cdef-0123-456789abcdef";
  v1::CudaIpcMemory p;
  rpc::to_proto(m, "boot-id-1", &p);
  EXPECT_EQ(p.host_id(), "boot-id-1");
  // Through the bytes, as the broker receives it.
  v1::CudaIpcMemory q;
  ASSERT_TRUE(q.ParseFromString(p.SerializeAsString()));
  auto back = rpc::from_proto(q);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->kind, "cuda");
  EXPECT_EQ(back->ipc_handle, m.ipc_handle);
  EXPECT_EQ(back->offset, m.offset);
  EXPECT_EQ(back->size, m.size);
  EXPECT_EQ(back->device_uuid, m.device_uuid);
  EXPECT_EQ(back->pointer, 0u) << "a pointer never crosses the wire";

  v1::CudaIpcMemory bad = p;
  bad.set_handle(std::string(63, 'x'));
  auto r = rpc::from_proto(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("63 bytes, not 64"), std::string::npos) << r.status().message();
  bad = p;
  bad.set_offset(-1);
  r = rpc::from_proto(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  bad = p;
  bad.set_size(-5);
  EXPECT_FALSE(rpc::from_proto(bad).ok());
}

class CudaIpcRpc : public testing::OwnBrokerSuite {
 protected:
  void SetUp() override {
    ASSERT_NE(broker_, nullptr);
    stub_ = testing::raw_stub(broker_->address());
    grpc::ClientContext ctx;
    testing::prepare_call(ctx, "");
    v1::HandshakeRequest req;
    ASSERT_TRUE(stub_->Handshake(&ctx, req, &hello_).ok());
    grpc::ClientContext ctx2;
    testing::prepare_call(ctx2, "");
    v1::OpenSessionRequest oreq;
    v1::OpenSessionResponse oresp;
    ASSERT_TRUE(stub_->OpenSession(&ctx2, oreq, &oresp).ok());
    session_ = oresp.session_id();
  }

  // A well-formed handle (of no allocation) from this host.
  v1::CudaIpcMemory memory(int64_t size = 1024) const {
    v1::CudaIpcMemory m;
    m.set_handle(std::string(64, '\x5a'));
    m.set_size(size);
    m.set_device_uuid("GPU-00000000-0000-0000-0000-000000000000");
    m.set_host_id(hello_.host_id());
    return m;
  }
  grpc::Status upload(const v1::CudaIpcMemory& m, uint64_t* handle = nullptr) {
    grpc::ClientContext ctx;
    testing::prepare_call(ctx, session_);
    v1::UploadCudaIpcRequest req;
    req.mutable_header()->set_dtype(1);  // float32
    req.mutable_header()->add_shape(16);
    req.mutable_header()->set_total_bytes(64);
    *req.mutable_memory() = m;
    v1::UploadResponse resp;
    grpc::Status st = stub_->UploadCudaIpc(&ctx, req, &resp);
    if (handle) *handle = resp.handle();
    return st;
  }
  grpc::Status read(uint64_t handle, const v1::CudaIpcMemory& m, v1::ReadCudaIpcResponse* resp) {
    grpc::ClientContext ctx;
    testing::prepare_call(ctx, session_);
    v1::ReadCudaIpcRequest req;
    req.set_handle(handle);
    *req.mutable_memory() = m;
    return stub_->ReadCudaIpc(&ctx, req, resp);
  }
  void expect_alive() {
    ASSERT_EQ(kill(broker_->pid(), 0), 0) << "the broker process is gone";
    grpc::ClientContext ctx;
    testing::prepare_call(ctx, session_);
    v1::HeartbeatRequest req;
    v1::HeartbeatResponse resp;
    EXPECT_TRUE(stub_->Heartbeat(&ctx, req, &resp).ok());
  }

  std::unique_ptr<v1::Tensord::Stub> stub_;
  v1::HandshakeResponse hello_;
  std::string session_;
};


TEST_F(CudaIpcRpc, ABrokerWithoutACudaDeviceRefusesAHandleSayingSo) {
  if (hello_.cuda_ipc()) GTEST_SKIP() << "the broker has a cuda device here";
  uint64_t h = 0;
  grpc::Status st = upload(memory(), &h);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_NE(st.error_message().find("no cuda device"), std::string::npos) << st.error_message();
  EXPECT_EQ(h, 0u);
  expect_alive();
}

TEST_F(CudaIpcRpc, AReadIntoAGpuBufferWithoutACudaDeviceIsRefusedAndTheValueStays) {
  if (hello_.cuda_ipc()) GTEST_SKIP() << "the broker has a cuda device here";
  // A value uploaded the ordinary way, in the raw session.
  grpc::ClientContext ctx;
  testing::prepare_call(ctx, session_);
  v1::UploadChunk chunk;
  chunk.mutable_header()->set_dtype(1);
  chunk.mutable_header()->add_shape(4);
  chunk.mutable_header()->set_total_bytes(16);
  chunk.set_data(std::string(16, '\0'));
  v1::UploadResponse up;
  ASSERT_TRUE(stub_->UploadInline(&ctx, chunk, &up).ok());
  v1::ReadCudaIpcResponse resp;
  grpc::Status st = read(up.handle(), memory(), &resp);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_NE(st.error_message().find("no cuda device"), std::string::npos) << st.error_message();
  EXPECT_FALSE(resp.written());
  // Too small for the value: answered with its type, nothing written, no device needed.
  st = read(up.handle(), memory(8), &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_FALSE(resp.written());
  EXPECT_EQ(resp.header().total_bytes(), 16);
  grpc::ClientContext ctx2;
  testing::prepare_call(ctx2, session_);
  v1::HandleRequest info;
  info.set_handle(up.handle());
  v1::InfoResponse ir;
  EXPECT_TRUE(stub_->Info(&ctx2, info, &ir).ok()) << "the value is still there";
  expect_alive();
}

TEST_F(CudaIpcRpc, AHandleFromAnotherHostIsRefusedBeforeAnyDriverCall) {
  v1::CudaIpcMemory m = memory();
  m.set_host_id("another-machine");
  grpc::Status st = upload(m);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_NE(st.error_message().find("another host"), std::string::npos) << st.error_message();
  m.clear_host_id();
  st = upload(m);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  v1::ReadCudaIpcResponse resp;
  m.set_host_id("another-machine");
  st = read(1, m, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  expect_alive();
}

TEST_F(CudaIpcRpc, MalformedHandlesAndHeadersAreInvalidArguments) {
  v1::CudaIpcMemory m = memory();
  m.set_handle("short");
  grpc::Status st = upload(m);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  m = memory();
  m.set_offset(-64);
  st = upload(m);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  // A header whose byte count disagrees with its type.
  grpc::ClientContext ctx;
  testing::prepare_call(ctx, session_);
  v1::UploadCudaIpcRequest req;
  req.mutable_header()->set_dtype(1);
  req.mutable_header()->add_shape(16);
  req.mutable_header()->set_total_bytes(60);
  *req.mutable_memory() = memory();
  v1::UploadResponse resp;
  st = stub_->UploadCudaIpc(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  // No session: refused as every session call is.
  grpc::ClientContext ctx2;
  testing::prepare_call(ctx2, "");
  st = stub_->UploadCudaIpc(&ctx2, req, &resp);
  EXPECT_FALSE(st.ok());
  expect_alive();
}

// The client API: RemoteClient::upload_cuda / read_into_cuda say why before sending anything
// where the broker has no cuda device (or, on a machine without CUDA, where the pointer cannot
// be exported).
TEST_F(CudaIpcRpc, TheClientSaysWhyWhereTheGpuPathCannotBeTaken) {
  if (hello_.cuda_ipc()) GTEST_SKIP() << "the broker has a cuda device here";
  auto c = rpc::RemoteClient::connect(broker_->address());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  float fake[16] = {};
  TensorView v{DType::kFloat32, {16}, fake};
  const int64_t calls = (*c)->rpc_count();
  auto h = (*c)->upload_cuda(v, "");
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kFailedPrecondition) << h.status().to_string();
  EXPECT_NE(h.status().message().find("no cuda device"), std::string::npos) << h.status().message();
  EXPECT_EQ((*c)->rpc_count(), calls) << "refused without a call to the broker";
  HostTensor t = HostTensor::from_vector(std::vector<float>(16, 1.0f), {16});
  auto up = (*c)->upload(t.view(), "");
  ASSERT_TRUE(up.ok());
  auto r = (*c)->read_into_cuda(*up, fake, sizeof(fake));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().to_string();
  // The type alone (no room) needs no GPU.
  auto type = (*c)->read_into_cuda(*up, nullptr, 0);
  ASSERT_TRUE(type.ok()) << type.status().to_string();
  EXPECT_EQ(type->shape, (Shape{16}));
}

}  // namespace
}  // namespace tensord
