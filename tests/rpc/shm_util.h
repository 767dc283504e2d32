// Shared-memory regions for raw-gRPC tests: memfds, and registration by descriptor (a ticket
// of the session, the memfd sent on the broker's region socket, RegisterRegion naming the
// ticket), with every step's answer visible to the test.
#pragma once

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>

#include "broker_process.h"
#include "rpc/region_channel.h"
#include "rpc/wire.h"
#include "tensord.grpc.pb.h"

namespace tensord::testing {

// A memfd of `bytes`, sealed with `seals` (0 = unsealed), closed when the object goes.
struct TestMemfd {
  TestMemfd(int64_t bytes, int seals, const char* name = "tensord-test") {
    fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(ftruncate(fd, bytes), 0) << std::strerror(errno);
    if (seals) {
      EXPECT_EQ(fcntl(fd, F_ADD_SEALS, seals), 0) << std::strerror(errno);
    }
    size = bytes;
  }
  ~TestMemfd() {
    if (mem) munmap(mem, static_cast<size_t>(size));
    if (fd >= 0) close(fd);
  }
  unsigned char* map() {
    if (!mem) {
      void* p = mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      EXPECT_NE(p, MAP_FAILED) << std::strerror(errno);
      mem = p == MAP_FAILED ? nullptr : static_cast<unsigned char*>(p);
    }
    return mem;
  }
  int fd = -1;
  int64_t size = 0;
  unsigned char* mem = nullptr;
};

inline void prepare_call(grpc::ClientContext& ctx, const std::string& session) {
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!session.empty()) ctx.AddMetadata(rpc::kSessionKey, session);
}

// A suite with a broker process of its own (`tensord serve` with no flags), started before the
// suite's first test and stopped after its last; `broker_` is null when it could not start.
class OwnBrokerSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto b = BrokerProcess::start({});
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    broker_ = std::move(b).value().release();
  }
  static void TearDownTestSuite() {
    delete broker_;
    broker_ = nullptr;
  }
  inline static BrokerProcess* broker_ = nullptr;
};

// A stub on `address` with no client library in between, as a hostile but authenticated
// client would call the broker.
inline std::unique_ptr<v1::Tensord::Stub> raw_stub(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  return v1::Tensord::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

// A session opened on a raw stub: its id ("" when refused, failing the test).
inline std::string open_raw_session(v1::Tensord::Stub& stub) {
  grpc::ClientContext ctx;
  prepare_call(ctx, "");
  v1::OpenSessionRequest req;
  v1::OpenSessionResponse resp;
  grpc::Status st = stub.OpenSession(&ctx, req, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return resp.session_id();
}

// The broker's region socket, from its Handshake ("" if it offers none).
inline std::string region_socket(v1::Tensord::Stub& stub) {
  grpc::ClientContext ctx;
  prepare_call(ctx, "");
  v1::HandshakeRequest req;
  v1::HandshakeResponse resp;
  grpc::Status st = stub.Handshake(&ctx, req, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return resp.region_socket();
}

inline grpc::Status region_ticket(v1::Tensord::Stub& stub, const std::string& session, std::string* ticket) {
  grpc::ClientContext ctx;
  prepare_call(ctx, session);
  v1::RegionTicketRequest req;
  v1::RegionTicketResponse resp;
  grpc::Status st = stub.RegionTicket(&ctx, req, &resp);
  *ticket = resp.ticket();
  return st;
}

inline grpc::Status register_ticket(v1::Tensord::Stub& stub, const std::string& session,
                                    const std::string& ticket, int64_t bytes,
                                    uint64_t* region = nullptr, const std::string& path = "") {
  grpc::ClientContext ctx;
  prepare_call(ctx, session);
  v1::RegisterRegionRequest req;
  req.set_ticket(ticket);
  req.set_path(path);
  req.set_bytes(bytes);
  v1::RegisterRegionResponse resp;
  grpc::Status st = stub.RegisterRegion(&ctx, req, &resp);
  if (region) *region = resp.region();
  return st;
}

// The whole registration of `fd`; a refusal on the region socket comes back as
// FAILED_PRECONDITION with the broker's words.
inline grpc::Status register_fd(v1::Tensord::Stub& stub, const std::string& session,
                                const std::string& socket, int fd, int64_t bytes,
                                uint64_t* region = nullptr) {
  std::string ticket;
  grpc::Status st = region_ticket(stub, session, &ticket);
  if (!st.ok()) return st;
  Status sent = rpc::send_region_fd(socket, ticket, fd, std::chrono::seconds(5));
  if (!sent.ok()) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, sent.message());
  return register_ticket(stub, session, ticket, bytes, region);
}

}  // namespace tensord::testing
