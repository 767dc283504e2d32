// Issue 15, attacks 1 and 4, against a real `tensord serve` process (raw gRPC, as a hostile
// but authenticated client would call it):
//   1. SIGBUS: a region whose file its owner truncates while the broker copies. Regions must
//      now be memfds sealed against shrinking; truncation fails, copies cannot fault.
//   4. Another session's shared memory: regions named by a path ("/proc/<broker pid>/fd/N",
//      "/proc/<pid>/fd/<n>" of another client). Regions now come only as the client's own
//      descriptor with a one-time ticket of its session; paths are refused unopened.
// After each attack: a clear status, the broker alive (a later call works), no foreign byte.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "broker_process.h"
#include "rpc/remote_client.h"
#include "rpc/wire.h"
#include "sched_graphs.h"
#include "shm_util.h"
#include "tensord.grpc.pb.h"

namespace tensord {
namespace {

using std::chrono::milliseconds;
using testing::BrokerProcess;
using testing::proc_status_bytes;
using testing::TestMemfd;

class SecurityShm : public testing::OwnBrokerSuite {
 protected:
  void SetUp() override {
    ASSERT_NE(broker_, nullptr);
    stub_ = testing::raw_stub(broker_->address());
    socket_ = testing::region_socket(*stub_);
    ASSERT_EQ(socket_.rfind("@tensord-fd-", 0), 0u) << socket_;
  }

  std::string open_session() { return testing::open_raw_session(*stub_); }

  grpc::Status upload_region(const std::string& s, uint64_t region, int64_t offset, int64_t floats,
                             uint64_t* handle = nullptr, bool lend = false) {
    grpc::ClientContext ctx;
    testing::prepare_call(ctx, s);
    v1::UploadRegionRequest req;
    req.mutable_header()->set_dtype(1);  // float32
    req.mutable_header()->add_shape(floats);
    req.mutable_header()->set_total_bytes(floats * 4);
    req.set_region(region);
    req.set_offset(offset);
    req.set_lend(lend);
    v1::UploadResponse resp;
    grpc::Status st = stub_->UploadRegion(&ctx, req, &resp);
    if (handle) *handle = resp.handle();
    return st;
  }

  grpc::Status read_region(const std::string& s, uint64_t handle, uint64_t region, int64_t offset,
                           v1::ReadRegionResponse* resp) {
    grpc::ClientContext ctx;
    testing::prepare_call(ctx, s);
    v1::ReadRegionRequest req;
    req.set_handle(handle);
    req.set_region(region);
    req.set_offset(offset);
    return stub_->ReadRegion(&ctx, req, resp);
  }

  // The broker process lives and serves: a normal client (shared memory, automatically, as
  // it is on this host) uploads and reads back.
  void expect_alive() {
    ASSERT_EQ(kill(broker_->pid(), 0), 0) << "the broker process is gone";
    auto c = rpc::RemoteClient::connect(broker_->address());
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    std::vector<float> v(1 << 16);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
    HostTensor t = HostTensor::from_vector(v, {static_cast<int64_t>(v.size())});
    auto h = (*c)->upload(t.view(), "");
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    auto back = (*c)->read(*h);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(std::memcmp(back->data(), t.data(), t.nbytes()), 0);
    EXPECT_EQ((*c)->transport(), "shm");
  }

  std::unique_ptr<v1::Tensord::Stub> stub_;
  std::string socket_;
};


// Sends `payload` on the region socket with `fds` attached (any number, none included) and
// returns the broker's answer ("" when it closed without one).
std::string send_raw(const std::string& socket, const std::string& payload,
                     const std::vector<int>& fds) {
  const int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  EXPECT_GE(s, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, socket.data() + 1, socket.size() - 1);
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket.size());
  EXPECT_EQ(connect(s, reinterpret_cast<sockaddr*>(&addr), len), 0) << std::strerror(errno);
  iovec iov{const_cast<char*>(payload.data()), payload.size()};
  std::vector<char> cbuf(CMSG_SPACE(sizeof(int) * std::max<size_t>(fds.size(), 1)));
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (!fds.empty()) {
    m.msg_control = cbuf.data();
    m.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  EXPECT_GE(sendmsg(s, &m, MSG_NOSIGNAL), 0) << std::strerror(errno);
  timeval tv{5, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[512];
  const ssize_t n = recv(s, buf, sizeof buf, 0);
  close(s);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// ------------------------------------------------------------------------------ attack 1

TEST_F(SecurityShm, UnsealedOrForeignDescriptorsAreRefusedAtRegistration) {
  const std::string s = open_session();
  // An unsealed memfd (the shape of the old attack: truncate it later), and one sealed only
  // against growing.
  for (int seals : {0, F_SEAL_GROW}) {
    TestMemfd m(1 << 20, seals);
    grpc::Status st = testing::register_fd(*stub_, s, socket_, m.fd, 1 << 20);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
    EXPECT_NE(st.error_message().find("seal it with F_SEAL_SHRINK"), std::string::npos)
        << st.error_message();
  }
  // A POSIX shared-memory object (shm_open): no seals possible, refused the same way.
  {
    const std::string name = "/tensord-sec-" + std::to_string(getpid());
    const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    shm_unlink(name.c_str());
    ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
    grpc::Status st = testing::register_fd(*stub_, s, socket_, fd, 1 << 20);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
    EXPECT_NE(st.error_message().find("F_SEAL_SHRINK"), std::string::npos) << st.error_message();
    close(fd);
  }
  // Not shared memory at all: a file on disk, a pipe.
  {
    char path[] = "/tmp/tensord-sec-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    unlink(path);
    ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
    grpc::Status st = testing::register_fd(*stub_, s, socket_, fd, 1 << 20);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
    // "not a memfd", or where /tmp is tmpfs, a file that cannot carry seals.
    EXPECT_NE(st.error_message().find("memfd"), std::string::npos) << st.error_message();
    close(fd);
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    st = testing::register_fd(*stub_, s, socket_, p[0], 4096);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
    EXPECT_NE(st.error_message().find("not a memfd"), std::string::npos) << st.error_message();
    close(p[0]);
    close(p[1]);
  }
  // A message without a descriptor, or with two, and a ticket the broker never issued.
  {
    std::string ticket;
    ASSERT_TRUE(testing::region_ticket(*stub_, s, &ticket).ok());
    EXPECT_NE(send_raw(socket_, ticket, {}).find("expected one descriptor"), std::string::npos);
    TestMemfd a(4096, F_SEAL_SHRINK), b(4096, F_SEAL_SHRINK);
    EXPECT_NE(send_raw(socket_, ticket, {a.fd, b.fd}).find("got 2"), std::string::npos);
    EXPECT_NE(send_raw(socket_, std::string(32, 'f'), {a.fd}).find("unknown or expired"),
              std::string::npos);
    // The ticket is still good for one descriptor, then spent.
    EXPECT_EQ(send_raw(socket_, ticket, {a.fd}), "ok");
    EXPECT_NE(send_raw(socket_, ticket, {b.fd}).find("already carries"), std::string::npos);
    uint64_t region = 0;
    EXPECT_TRUE(testing::register_ticket(*stub_, s, ticket, 4096, &region).ok());
    grpc::Status again = testing::register_ticket(*stub_, s, ticket, 4096);
    EXPECT_EQ(again.error_code(), grpc::StatusCode::NOT_FOUND) << again.error_message();
  }
  expect_alive();
}

TEST_F(SecurityShm, TruncatingASealedRegionFailsAndNeverKillsTheBroker) {
  const std::string s = open_session();
  constexpr int64_t kBytes = 2 << 20;
  TestMemfd m(kBytes, F_SEAL_SHRINK);
  uint64_t region = 0;
  grpc::Status reg = testing::register_fd(*stub_, s, socket_, m.fd, kBytes, &region);
  ASSERT_TRUE(reg.ok()) << reg.error_message();
  float* mem = reinterpret_cast<float*>(m.map());
  ASSERT_NE(mem, nullptr);
  constexpr int64_t kFloats = kBytes / 8;  // upload from the first half, read into the second
  for (int64_t i = 0; i < kFloats; ++i) mem[i] = static_cast<float>(i);

  // The owner cannot shrink it, nor lift the seal.
  EXPECT_EQ(ftruncate(m.fd, 0), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(ftruncate(m.fd, 4096), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(fcntl(m.fd, F_GET_SEALS) & F_SEAL_SHRINK, F_SEAL_SHRINK);

  // The attack: truncations (and hole punching, which tmpfs answers with zero pages, not a
  // fault) while uploads and reads copy through the region.
  std::atomic<bool> stop{false};
  std::atomic<int64_t> tries{0}, refused{0};
  std::thread attacker([&] {
    while (!stop.load()) {
      for (off_t len : {off_t{0}, off_t{4096}, off_t{kBytes / 2}}) {
        tries++;
        if (ftruncate(m.fd, len) != 0 && errno == EPERM) refused++;
      }
      (void)fallocate(m.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, kBytes / 2, kBytes / 2);
    }
  });
  int failures = 0;
  for (int i = 0; i < 100; ++i) {
    uint64_t h = 0;
    grpc::Status up = upload_region(s, region, 0, kFloats, &h, /*lend=*/i % 2 == 1);
    if (!up.ok()) {
      ++failures;
      ADD_FAILURE() << "upload " << i << ": " << up.error_message();
      continue;
    }
    v1::ReadRegionResponse resp;
    grpc::Status rd = read_region(s, h, region, kBytes / 2, &resp);
    if (!rd.ok() || !resp.written()) {
      ++failures;
      ADD_FAILURE() << "read " << i << ": " << rd.error_message();
    }
    grpc::ClientContext ctx;
    testing::prepare_call(ctx, s);
    v1::HandleRequest rel;
    rel.set_handle(h);
    v1::ReleaseResponse rresp;
    (void)stub_->Release(&ctx, rel, &rresp);
  }
  stop = true;
  attacker.join();
  EXPECT_EQ(failures, 0);
  EXPECT_GT(tries.load(), 0);
  EXPECT_EQ(refused.load(), tries.load());  // every truncation failed with EPERM
  struct stat st {};
  ASSERT_EQ(fstat(m.fd, &st), 0);
  EXPECT_EQ(st.st_size, kBytes);
  // The broker is alive, and the data it reads is the client's own (the first half, which
  // nobody wrote to).
  uint64_t h = 0;
  ASSERT_TRUE(upload_region(s, region, 0, kFloats, &h).ok());
  v1::ReadRegionResponse resp;
  ASSERT_TRUE(read_region(s, h, region, kBytes / 2, &resp).ok());
  EXPECT_TRUE(resp.written());
  EXPECT_EQ(std::memcmp(mem, mem + kFloats, kBytes / 2), 0);
  expect_alive();
}

// Parts of a value into a region (ReadRegionRequest.value_offset/value_length, what the client
// pipelines large reads with): the exact bytes at the offset asked, and every bound checked —
// a part past the value or past the region is refused with nothing written, a negative field
// is INVALID_ARGUMENT, and a client with too little room gets the header only.
TEST_F(SecurityShm, ValuePartsAreWrittenExactlyAndTheirBoundsChecked) {
  const std::string s = open_session();
  constexpr int64_t kBytes = 2 << 20;
  TestMemfd m(kBytes, F_SEAL_SHRINK);
  uint64_t region = 0;
  grpc::Status reg = testing::register_fd(*stub_, s, socket_, m.fd, kBytes, &region);
  ASSERT_TRUE(reg.ok()) << reg.error_message();
  auto* mem = reinterpret_cast<float*>(m.map());
  ASSERT_NE(mem, nullptr);
  constexpr int64_t kFloats = 1000;  // 4000 bytes, uploaded from the region's start
  for (int64_t i = 0; i < kFloats; ++i) mem[i] = static_cast<float>(i) + 0.5f;
  uint64_t h = 0;
  ASSERT_TRUE(upload_region(s, region, 0, kFloats, &h).ok());
  auto part = [&](int64_t offset, int64_t voff, int64_t vlen, int64_t max_bytes,
                  v1::ReadRegionResponse* resp) {
    grpc::ClientContext ctx;
    testing::prepare_call(ctx, s);
    v1::ReadRegionRequest req;
    req.set_handle(h);
    req.set_region(region);
    req.set_offset(offset);
    req.set_value_offset(voff);
    req.set_value_length(vlen);
    req.set_max_bytes(max_bytes);
    return stub_->ReadRegion(&ctx, req, resp);
  };
  auto* bytes = reinterpret_cast<unsigned char*>(mem);
  const int64_t at = kBytes / 2;
  std::memset(bytes + at, 0xEE, 8192);
  v1::ReadRegionResponse resp;
  // Bytes [1000, 1400) of the value at `at`; nothing around them is touched.
  grpc::Status st = part(at, 1000, 400, 0, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(resp.written());
  EXPECT_EQ(resp.part_bytes(), 400);
  EXPECT_EQ(resp.header().total_bytes(), kFloats * 4);
  EXPECT_EQ(std::memcmp(bytes + at, bytes + 1000, 400), 0);
  EXPECT_EQ(bytes[at + 400], 0xEE);
  EXPECT_EQ(bytes[at - 1], 0);  // the half between is untouched (zero since created)
  // Length 0 = to the end; a length past the end is cut at the end.
  resp.Clear();
  ASSERT_TRUE(part(at, 3900, 0, 0, &resp).ok());
  EXPECT_EQ(resp.part_bytes(), 100);
  resp.Clear();
  ASSERT_TRUE(part(at, 3000, 1 << 20, 0, &resp).ok());
  EXPECT_EQ(resp.part_bytes(), 1000);
  EXPECT_EQ(std::memcmp(bytes + at, bytes + 3000, 1000), 0);
  // Past the value, past the region, negative: refused, nothing written.
  std::memset(bytes + at, 0xEE, 8192);
  resp.Clear();
  st = part(at, 4001, 1, 0, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::OUT_OF_RANGE) << st.error_message();
  st = part(kBytes - 100, 0, 4000, 0, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::OUT_OF_RANGE) << st.error_message();
  for (auto [voff, vlen] : {std::pair<int64_t, int64_t>{-1, 10}, {0, -10}}) {
    st = part(at, voff, vlen, 0, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  }
  st = part(at, 10, 10, -1, &resp);  // a negative room, as for whole values
  EXPECT_EQ(st.error_code(), grpc::StatusCode::OUT_OF_RANGE) << st.error_message();
  EXPECT_EQ(bytes[at], 0xEE);
  EXPECT_EQ(bytes[kBytes - 100], 0);
  // Too little room for the whole value: the header, not written.
  resp.Clear();
  ASSERT_TRUE(part(at, 0, 400, 3999, &resp).ok());
  EXPECT_FALSE(resp.written());
  EXPECT_EQ(resp.header().total_bytes(), 4000);
  EXPECT_EQ(bytes[at], 0xEE);
  // Another session's handle in this region: NOT_FOUND.
  const std::string other = open_session();
  grpc::ClientContext ctx;
  testing::prepare_call(ctx, other);
  v1::ReadRegionRequest req;
  req.set_handle(h);
  req.set_region(region);
  req.set_value_length(10);
  st = stub_->ReadRegion(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();
  expect_alive();
}

// ------------------------------------------------------------------------------ attack 4

// What a refusal must not say: anything a descriptor's link could point to.
void expect_no_link_target(const std::string& message) {
  for (const char* leak : {"memfd:", "socket:", "pipe:", "anon_inode", "/dev/", "deleted",
                           "tensord-", "/tmp", "/proc"})
    EXPECT_EQ(message.find(leak), std::string::npos) << "'" << leak << "' in: " << message;
}

TEST_F(SecurityShm, PathsIntoProcAreRefusedUnopenedAndRevealNothing) {
  // Session A (this process) has a registered region; session B attacks.
  const std::string a = open_session(), b = open_session();
  TestMemfd mine(1 << 16, F_SEAL_SHRINK, "tensord-victim");
  uint64_t region_a = 0;
  ASSERT_TRUE(testing::register_fd(*stub_, a, socket_, mine.fd, 1 << 16, &region_a).ok());

  std::vector<std::string> paths;
  for (int n = 0; n <= 64; ++n)
    paths.push_back("/proc/" + std::to_string(broker_->pid()) + "/fd/" + std::to_string(n));
  paths.push_back("/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(mine.fd));
  paths.push_back("/proc/self/fd/3");
  paths.push_back("/tensord-victim");
  std::string first;
  for (const auto& p : paths) {
    uint64_t region = 0;
    grpc::Status st = testing::register_ticket(*stub_, b, "", 1 << 16, &region, p);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << p << ": " << st.error_message();
    EXPECT_EQ(region, 0u);
    expect_no_link_target(st.error_message());
    // One answer for every path: whether it exists, and what it is, stays unknown.
    if (first.empty()) first = st.error_message();
    EXPECT_EQ(st.error_message(), first) << p;
  }
  // A ticket alongside a path is refused just the same.
  std::string ticket_b;
  ASSERT_TRUE(testing::region_ticket(*stub_, b, &ticket_b).ok());
  grpc::Status both = testing::register_ticket(*stub_, b, ticket_b, 1 << 16, nullptr, paths[0]);
  EXPECT_EQ(both.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  expect_alive();
}

TEST_F(SecurityShm, AnotherSessionCannotRedeemATicketOrNameARegion) {
  const std::string a = open_session(), b = open_session();
  TestMemfd mine(1 << 20, F_SEAL_SHRINK, "tensord-victim");
  float* mem = reinterpret_cast<float*>(mine.map());
  ASSERT_NE(mem, nullptr);
  constexpr float kSecret = 1234.5f;
  for (int i = 0; i < (1 << 18); ++i) mem[i] = kSecret;

  // A's ticket, its memfd delivered: B cannot redeem it (the same answer as for a ticket that
  // does not exist), and B's attempt does not spend it.
  std::string ticket_a;
  ASSERT_TRUE(testing::region_ticket(*stub_, a, &ticket_a).ok());
  ASSERT_TRUE(rpc::send_region_fd(socket_, ticket_a, mine.fd, milliseconds(5000)).ok());
  uint64_t stolen = 0;
  grpc::Status st = testing::register_ticket(*stub_, b, ticket_a, 1 << 20, &stolen);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();
  EXPECT_EQ(stolen, 0u);
  const std::string fake(ticket_a.size(), '0');
  grpc::Status unknown = testing::register_ticket(*stub_, b, fake, 1 << 20);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  std::string m1 = st.error_message(), m2 = unknown.error_message();
  m1.replace(m1.find(ticket_a), ticket_a.size(), fake);
  EXPECT_EQ(m1, m2);  // indistinguishable from a ticket that does not exist
  uint64_t region_a = 0;
  grpc::Status mine_ok = testing::register_ticket(*stub_, a, ticket_a, 1 << 20, &region_a);
  ASSERT_TRUE(mine_ok.ok()) << mine_ok.error_message();

  // A's data in A's session.
  uint64_t handle_a = 0;
  ASSERT_TRUE(upload_region(a, region_a, 0, 1 << 18, &handle_a).ok());

  // B names A's region id (and every id near it): NOT_FOUND for uploads, reads and unregister.
  TestMemfd theirs(1 << 20, F_SEAL_SHRINK);
  uint64_t region_b = 0;
  ASSERT_TRUE(testing::register_fd(*stub_, b, socket_, theirs.fd, 1 << 20, &region_b).ok());
  uint64_t handle_b = 0;
  ASSERT_TRUE(upload_region(b, region_b, 0, 4, &handle_b).ok());
  for (uint64_t id = 1; id <= 32; ++id) {
    if (id == region_b) continue;
    uint64_t h = 0;
    grpc::Status up = upload_region(b, id, 0, 1 << 18, &h);
    EXPECT_EQ(up.error_code(), grpc::StatusCode::NOT_FOUND) << id << ": " << up.error_message();
    EXPECT_EQ(h, 0u);
    v1::ReadRegionResponse resp;
    grpc::Status rd = read_region(b, handle_b, id, 0, &resp);
    EXPECT_EQ(rd.error_code(), grpc::StatusCode::NOT_FOUND) << id << ": " << rd.error_message();
    grpc::ClientContext ctx;
    testing::prepare_call(ctx, b);
    v1::RegionRequest req;
    req.set_region(id);
    v1::UnregisterRegionResponse uresp;
    EXPECT_EQ(stub_->UnregisterRegion(&ctx, req, &uresp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  // B reads A's handle into its own region: refused, and nothing of A's arrives there.
  {
    v1::ReadRegionResponse resp;
    grpc::Status rd = read_region(b, handle_a, region_b, 0, &resp);
    EXPECT_FALSE(rd.ok());
    EXPECT_FALSE(resp.written());
    const float* tb = reinterpret_cast<const float*>(theirs.map());
    for (int i = 0; i < (1 << 18); ++i)
      if (tb[i] == kSecret) {
        ADD_FAILURE() << "A's bytes arrived in B's region at float " << i;
        break;
      }
  }
  // A's region is intact and still A's: B's read attempts wrote nothing into it.
  for (int i = 0; i < (1 << 18); ++i)
    if (mem[i] != kSecret) {
      ADD_FAILURE() << "A's region changed at float " << i;
      break;
    }
  v1::ReadRegionResponse resp;
  ASSERT_TRUE(read_region(a, handle_a, region_a, 0, &resp).ok());
  EXPECT_TRUE(resp.written());
  expect_alive();
}

TEST_F(SecurityShm, TicketsAreBoundedPerSession) {
  const std::string s = open_session();
  std::vector<std::string> tickets;
  grpc::Status st;
  for (int i = 0; i < 64; ++i) {
    std::string t;
    st = testing::region_ticket(*stub_, s, &t);
    if (!st.ok()) break;
    tickets.push_back(t);
  }
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("at most 8"), std::string::npos) << st.error_message();
  EXPECT_EQ(tickets.size(), 8u);
  // Tickets are unguessable text of 128 bits, all different.
  for (size_t i = 0; i < tickets.size(); ++i) {
    EXPECT_EQ(tickets[i].size(), 32u);
    for (size_t j = 0; j < i; ++j) EXPECT_NE(tickets[i], tickets[j]);
  }
  // Another session is not affected.
  std::string other;
  EXPECT_TRUE(testing::region_ticket(*stub_, open_session(), &other).ok());
  expect_alive();
}

// Anyone on the host can connect to the abstract socket (no token needed for that): idle
// connections held open do not keep a real client from registering.
TEST_F(SecurityShm, IdleConnectionsOnTheRegionSocketDoNotBlockRegistration) {
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) {
    const int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    ASSERT_GE(s, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + 1, socket_.data() + 1, socket_.size() - 1);
    const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_.size());
    if (connect(s, reinterpret_cast<sockaddr*>(&addr), len) != 0) {  // backlog full: fine
      close(s);
      continue;
    }
    idle.push_back(s);
  }
  EXPECT_GT(idle.size(), 64u);
  const std::string s = open_session();
  TestMemfd m(1 << 16, F_SEAL_SHRINK);
  uint64_t region = 0;
  const auto t0 = std::chrono::steady_clock::now();
  grpc::Status st = testing::register_fd(*stub_, s, socket_, m.fd, 1 << 16, &region);
  EXPECT_TRUE(st.ok()) << st.error_message();
  // Not after the idle ones time out (2 s): at once.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(1000));
  expect_alive();
  for (int fd : idle) close(fd);
}

// ------------------------------------------------------------------------------ arenas

// A session's arena (OpenArena) for raw calls: its descriptor off the region socket.
int open_arena(v1::Tensord::Stub& stub, const std::string& socket, const std::string& s,
               int64_t* bytes) {
  grpc::ClientContext ctx;
  testing::prepare_call(ctx, s);
  v1::OpenArenaRequest req;
  v1::OpenArenaResponse resp;
  grpc::Status st = stub.OpenArena(&ctx, req, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  *bytes = resp.bytes();
  auto fd = rpc::receive_region_fd(socket, resp.ticket(), std::chrono::seconds(5));
  EXPECT_TRUE(fd.ok()) << fd.status().to_string();
  // A ticket hands its descriptor out once.
  EXPECT_NE(send_raw(socket, resp.ticket(), {}), "ok");
  return fd.ok() ? *fd : -1;
}

// The arena a shared-memory client maps holds values the broker computes on: nobody but the
// broker may write it, resize it or punch holes in it — through the descriptor it was given,
// or one re-opened read-write through /proc — and it holds this session's values only.
TEST_F(SecurityShm, TheArenaIsReadOnlyForItsClientAndHoldsOnlyItsSessionsValues) {
  const std::string a = open_session();
  const std::string b = open_session();
  int64_t bytes = 0, bytes_b = 0;
  const int fd = open_arena(*stub_, socket_, a, &bytes);
  const int fd_b = open_arena(*stub_, socket_, b, &bytes_b);
  ASSERT_GE(fd, 0);
  ASSERT_GE(fd_b, 0);
  ASSERT_GT(bytes, 0);
  EXPECT_EQ(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), MAP_FAILED);
  const char junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_LT(pwrite(fd, junk, sizeof junk, 0), 0);
  EXPECT_NE(ftruncate(fd, 0), 0);
  // Re-opened read-write: the seals refuse what the access mode no longer does.
  const int rw = open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDWR | O_CLOEXEC);
  if (rw >= 0) {
    EXPECT_LT(pwrite(rw, junk, sizeof junk, 0), 0);
    EXPECT_EQ(errno, EPERM);
    EXPECT_NE(ftruncate(rw, 0), 0);
    EXPECT_NE(ftruncate(rw, bytes * 2), 0);
    EXPECT_NE(fallocate(rw, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 1 << 20), 0);
    EXPECT_EQ(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0), MAP_FAILED);
    EXPECT_NE(fcntl(rw, F_ADD_SEALS, F_SEAL_WRITE), 0);
    close(rw);
  }
  void* m = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(m, MAP_FAILED) << std::strerror(errno);
  EXPECT_NE(mprotect(m, 4096, PROT_READ | PROT_WRITE), 0);
  const auto* arena = static_cast<const unsigned char*>(m);

  // One 4 MiB value per session, uploaded (copied) from a region: both land in their arenas.
  constexpr int64_t kFloats = 1 << 20;
  auto upload = [&](const std::string& s, float fill, uint64_t* h) {
    TestMemfd r(kFloats * 4, F_SEAL_SHRINK);
    uint64_t region = 0;
    ASSERT_TRUE(testing::register_fd(*stub_, s, socket_, r.fd, kFloats * 4, &region).ok());
    auto* f = reinterpret_cast<float*>(r.map());
    for (int64_t i = 0; i < kFloats; ++i) f[i] = fill;
    ASSERT_TRUE(upload_region(s, region, 0, kFloats, h).ok());
  };
  uint64_t ha = 0, hb = 0;
  upload(a, 1234.5f, &ha);
  upload(b, -777.25f, &hb);
  auto locate = [&](const std::string& s, uint64_t h, v1::ReadRegionResponse* resp) {
    grpc::ClientContext ctx;
    testing::prepare_call(ctx, s);
    v1::ReadRegionRequest req;
    req.set_handle(h);
    req.set_arena(true);
    return stub_->ReadRegion(&ctx, req, resp);
  };
  v1::ReadRegionResponse where;
  grpc::Status st = locate(a, ha, &where);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_TRUE(where.in_arena());
  EXPECT_FALSE(where.written());
  EXPECT_EQ(where.header().total_bytes(), kFloats * 4);
  ASSERT_GE(where.arena_offset(), 0);
  ASSERT_LE(where.arena_offset() + kFloats * 4, bytes);
  std::vector<float> got(kFloats);
  std::memcpy(got.data(), arena + where.arena_offset(), kFloats * 4);
  EXPECT_EQ(got.front(), 1234.5f);
  EXPECT_EQ(got.back(), 1234.5f);
  // B's value is in B's arena, and nowhere in A's.
  v1::ReadRegionResponse where_b;
  ASSERT_TRUE(locate(b, hb, &where_b).ok());
  EXPECT_TRUE(where_b.in_arena());
  const float bad = -777.25f;
  // (every page of A's first 16 MiB, where its blocks are: page-aligned, best fit from 0)
  for (int64_t off = 0; off + 4 <= std::min<int64_t>(bytes, 16 << 20); off += 4096)
    ASSERT_NE(std::memcmp(arena + off, &bad, 4), 0) << "session B's value in A's arena at " << off;
  // Another session's handle is not found through A's arena, and a session without an arena
  // asking for one reads as before.
  v1::ReadRegionResponse none;
  EXPECT_EQ(locate(a, hb, &none).error_code(), grpc::StatusCode::NOT_FOUND);
  munmap(m, static_cast<size_t>(bytes));
  close(fd);
  close(fd_b);
  expect_alive();
}

// ------------------------------------------------------------------------------ issue 27


// A broker with two tenants (a token file of mode 600 in a fresh folder) and `args`.
class TwoTenants {
 public:
  static constexpr const char* kAlice = "alice-token-0123";
  static constexpr const char* kBob = "bob-token-4567";
  explicit TwoTenants(std::vector<std::string> args) {
    std::string t = (std::filesystem::temp_directory_path() / "tensord-shm.XXXXXX").string();
    dir_ = mkdtemp(t.data()) ? t : "";
    const std::string tokens = dir_ + "/tokens";
    std::ofstream(tokens, std::ios::binary) << "alice:" << kAlice << "\n"
                                            << "bob:" << kBob << "\n";
    chmod(tokens.c_str(), 0600);
    testing::BrokerOptions o;
    o.args = {"--token-file", tokens};
    o.args.insert(o.args.end(), args.begin(), args.end());
    o.cpu_devices = 1;
    auto b = BrokerProcess::start(o);
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    if (!b.ok()) return;
    broker_ = std::move(b).value();
    grpc::ChannelArguments ca;
    ca.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
    stub_ = v1::Tensord::NewStub(
        grpc::CreateCustomChannel(broker_->address(), grpc::InsecureChannelCredentials(), ca));
    grpc::ClientContext ctx;
    prepare(ctx, kAlice);
    v1::HandshakeRequest req;
    v1::HandshakeResponse resp;
    grpc::Status st = stub_->Handshake(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    socket_ = resp.region_socket();
  }
  ~TwoTenants() {
    broker_.reset();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  bool ok() const { return broker_ != nullptr && !socket_.empty(); }
  BrokerProcess& broker() { return *broker_; }
  v1::Tensord::Stub& stub() { return *stub_; }

  static void prepare(grpc::ClientContext& ctx, const std::string& token,
                      const std::string& session = "") {
    testing::prepare_call(ctx, session);
    ctx.AddMetadata(rpc::kAuthKey, std::string("Bearer ") + token);
  }
  std::string open(const std::string& token) {
    grpc::ClientContext ctx;
    prepare(ctx, token);
    v1::OpenSessionRequest req;
    v1::OpenSessionResponse resp;
    grpc::Status st = stub_->OpenSession(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.session_id();
  }
  void close_session(const std::string& token, const std::string& session) {
    grpc::ClientContext ctx;
    prepare(ctx, token, session);
    v1::CloseSessionRequest req;
    v1::CloseSessionResponse resp;
    grpc::Status st = stub_->CloseSession(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
  }
  grpc::Status ticket(const std::string& token, const std::string& session, std::string* t) {
    grpc::ClientContext ctx;
    prepare(ctx, token, session);
    v1::RegionTicketRequest req;
    v1::RegionTicketResponse resp;
    grpc::Status st = stub_->RegionTicket(&ctx, req, &resp);
    *t = resp.ticket();
    return st;
  }
  // The whole registration of `fd` as a region of `bytes` in `session`.
  grpc::Status register_fd(const std::string& token, const std::string& session, int fd,
                           int64_t bytes, uint64_t* region = nullptr) {
    std::string t;
    grpc::Status st = ticket(token, session, &t);
    if (!st.ok()) return st;
    Status sent = rpc::send_region_fd(socket_, t, fd, std::chrono::seconds(5));
    if (!sent.ok()) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, sent.message());
    grpc::ClientContext ctx;
    prepare(ctx, token, session);
    v1::RegisterRegionRequest req;
    req.set_ticket(t);
    req.set_bytes(bytes);
    v1::RegisterRegionResponse resp;
    st = stub_->RegisterRegion(&ctx, req, &resp);
    if (region) *region = resp.region();
    return st;
  }
  grpc::Status unregister(const std::string& token, const std::string& session, uint64_t region) {
    grpc::ClientContext ctx;
    prepare(ctx, token, session);
    v1::RegionRequest req;
    req.set_region(region);
    v1::UnregisterRegionResponse resp;
    return stub_->UnregisterRegion(&ctx, req, &resp);
  }

 private:
  std::string dir_;
  std::unique_ptr<BrokerProcess> broker_;
  std::unique_ptr<v1::Tensord::Stub> stub_;
  std::string socket_;
};

// Bob, a normal client (shared memory, as on this host): uploads 64 MiB and checks a few of
// its values, then a small op answers within a second.
void expect_bob_served(const std::string& address) {
  rpc::RemoteClientOptions o;
  o.token = TwoTenants::kBob;
  auto c = rpc::RemoteClient::connect(address, o);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  std::vector<float> big(16 << 20);  // 64 MiB
  for (size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<float>(i);
  HostTensor t = HostTensor::from_vector(big, {static_cast<int64_t>(big.size())});
  auto h = (*c)->upload(t.view(), "");
  ASSERT_TRUE(h.ok()) << "bob's 64 MiB upload: " << h.status().to_string();
  EXPECT_EQ((*c)->transport(), "shm");  // his regions are still mapped
  auto info = (*c)->info(*h);
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  const auto t0 = std::chrono::steady_clock::now();
  HostTensor a = HostTensor::from_vector<float>({1, 2, 3, 4}, {4});
  HostTensor b = HostTensor::from_vector<float>({10, 20, 30, 40}, {4});
  auto ha = (*c)->upload(a.view(), "");
  auto hb = (*c)->upload(b.view(), "");
  ASSERT_TRUE(ha.ok() && hb.ok());
  auto out = (*c)->execute(testing::small_add_graph(), {*ha, *hb}, "");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  auto sum = (*c)->read(out->at(0));
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(sum.ok()) << sum.status().to_string();
  ASSERT_EQ(static_cast<int64_t>(sum->nbytes()), 16);
  EXPECT_EQ(std::vector<float>(sum->data<float>(), sum->data<float>() + 4),
            (std::vector<float>{11, 22, 33, 44}));
  EXPECT_LT(ms, 1000.0) << "bob's small op took " << ms << " ms";
  auto back = (*c)->read(*h);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(std::memcmp(back->data(), t.data(), t.nbytes()), 0);
}

// Finding 1: sealed memfds of a TiB each cost their owner nothing, but each took a TiB of the
// broker's address space: ~126 left it unable to map anything (another tenant's upload
// failed, then the broker died). Mapped regions are now bounded broker-wide (and one tenant
// takes at most half); refused with RESOURCE_EXHAUSTED naming the limit and the values.
TEST(SecurityShmAddressSpace, HugeSealedRegionsAreBoundedAndAnotherTenantIsServed) {
  constexpr int64_t kCap = int64_t{64} << 30;  // --max-region-bytes: alice may map 32 GiB
  TwoTenants b({"--max-region-bytes", std::to_string(kCap)});
  ASSERT_TRUE(b.ok());
  const pid_t pid = b.broker().pid();
  const int64_t vm0 = proc_status_bytes(pid, "VmSize"), rss0 = proc_status_bytes(pid, "VmRSS");
  ASSERT_GT(vm0, 0);
  const std::string s = b.open(TwoTenants::kAlice);

  // One TiB at once: more than the broker maps in all.
  {
    TestMemfd tib(int64_t{1} << 40, F_SEAL_SHRINK | F_SEAL_GROW, "tib");
    grpc::Status st = b.register_fd(TwoTenants::kAlice, s, tib.fd, int64_t{1} << 40);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
    EXPECT_NE(st.error_message().find("the broker maps at most 68719476736 bytes"),
              std::string::npos)
        << st.error_message();
    EXPECT_NE(st.error_message().find("--max-region-bytes"), std::string::npos)
        << st.error_message();
    EXPECT_NE(st.error_message().find("1099511627776 more bytes do not fit"), std::string::npos)
        << st.error_message();
  }
  // 4 GiB at a time, until refused: 8 fit in her share.
  constexpr int64_t kPiece = int64_t{4} << 30;
  std::vector<std::unique_ptr<TestMemfd>> fds;
  std::vector<uint64_t> regions;
  grpc::Status refused;
  for (int i = 0; i < 300; ++i) {
    fds.push_back(std::make_unique<TestMemfd>(kPiece, F_SEAL_SHRINK | F_SEAL_GROW, "huge"));
    uint64_t r = 0;
    refused = b.register_fd(TwoTenants::kAlice, s, fds.back()->fd, kPiece, &r);
    if (!refused.ok()) break;
    regions.push_back(r);
  }
  EXPECT_EQ(regions.size(), 8u);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("a tenant may map at most 34359738368 bytes"),
            std::string::npos)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("--max-region-bytes 68719476736"), std::string::npos)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("this tenant has 34359738368 bytes in 8 regions mapped"),
            std::string::npos)
      << refused.error_message();
  // Another session of hers does not get more.
  {
    const std::string s2 = b.open(TwoTenants::kAlice);
    TestMemfd m(kPiece, F_SEAL_SHRINK, "huge");
    grpc::Status st = b.register_fd(TwoTenants::kAlice, s2, m.fd, kPiece);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  }
  const int64_t vm_attack = proc_status_bytes(pid, "VmSize");
  // Bounded: her 32 GiB and the broker's own growth (threads), nowhere near the address space.
  EXPECT_LT(vm_attack, vm0 + kCap / 2 + (int64_t{4} << 30))
      << "VmSize " << vm0 << " -> " << vm_attack;
  std::printf("broker VmSize: %.1f GiB at start, %.1f GiB with alice's regions mapped\n",
              vm0 / 1073741824.0, vm_attack / 1073741824.0);

  // Bob is served: his own regions (shared memory), a 64 MiB upload, a small op in a second.
  expect_bob_served(b.broker().address());
  ASSERT_EQ(kill(pid, 0), 0) << "the broker died";

  // Unregistered, the mappings go; the rest go with the session.
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(b.unregister(TwoTenants::kAlice, s, regions[i]).ok());
  {
    TestMemfd m(kPiece, F_SEAL_SHRINK, "again");
    EXPECT_TRUE(b.register_fd(TwoTenants::kAlice, s, m.fd, kPiece).ok());
  }
  b.close_session(TwoTenants::kAlice, s);
  const int64_t vm_after = proc_status_bytes(pid, "VmSize");
  const int64_t rss_after = proc_status_bytes(pid, "VmRSS");
  std::printf("broker VmSize %.1f GiB after the session closed; VmRSS %.0f -> %.0f MiB\n",
              vm_after / 1073741824.0, rss0 / 1048576.0, rss_after / 1048576.0);
  EXPECT_LT(vm_after, vm_attack - kCap / 2 + (int64_t{4} << 30));
  EXPECT_LT(vm_after, vm0 + (int64_t{4} << 30));
  // The regions were never touched by the broker; bob's 64 MiB may stay pooled for a while.
  if (!testing::kSanitizedBuild) {
    EXPECT_LT(rss_after, rss0 + rss0 / 10 + (int64_t{160} << 20));
  }
  // Alice can map again, the full share.
  const std::string s3 = b.open(TwoTenants::kAlice);
  TestMemfd m(kCap / 2, F_SEAL_SHRINK, "whole-share");
  grpc::Status st = b.register_fd(TwoTenants::kAlice, s3, m.fd, kCap / 2);
  EXPECT_TRUE(st.ok()) << st.error_message();
}

// The default budget (the machine's physical memory): regions of a TiB are refused long before
// the address space runs out, naming the flag.
TEST_F(SecurityShm, TebibyteRegionsAreRefusedUnderTheDefaultBudget) {
  const std::string s = open_session();
  const int64_t vm0 = proc_status_bytes(broker_->pid(), "VmSize");
  const int64_t ram =
      static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  std::vector<std::unique_ptr<TestMemfd>> fds;
  std::vector<uint64_t> regions;
  grpc::Status refused;
  for (int i = 0; i < 130; ++i) {
    fds.push_back(std::make_unique<TestMemfd>(int64_t{1} << 40, F_SEAL_SHRINK, "tib"));
    uint64_t r = 0;
    refused = testing::register_fd(*stub_, s, socket_, fds.back()->fd, int64_t{1} << 40, &r);
    if (!refused.ok()) break;
    regions.push_back(r);
  }
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("--max-region-bytes"), std::string::npos)
      << refused.error_message();
  EXPECT_LE(static_cast<int64_t>(regions.size()), ram / (int64_t{1} << 40));
  const int64_t vm = proc_status_bytes(broker_->pid(), "VmSize");
  std::printf("broker VmSize %.2f GiB before, %.2f GiB after %zu TiB regions were accepted\n",
              vm0 / 1073741824.0, vm / 1073741824.0, regions.size());
  EXPECT_LT(vm, vm0 + ram + (int64_t{4} << 30));
  for (uint64_t r : regions) {
    grpc::ClientContext ctx;
    testing::prepare_call(ctx, s);
    v1::RegionRequest req;
    req.set_region(r);
    v1::UnregisterRegionResponse resp;
    EXPECT_TRUE(stub_->UnregisterRegion(&ctx, req, &resp).ok());
  }
  expect_alive();
}

// Regions count by their mapped size against the session's and the tenant's memory limits,
// and stop counting once unregistered or their session closed.
TEST(SecurityShmAddressSpace, RegionsAreChargedToTheSessionAndTenantLimits) {
  constexpr int64_t kMiB = 1 << 20;
  TwoTenants b({"--session-memory-limit", std::to_string(192 * kMiB), "--tenant-memory-limit",
                std::to_string(256 * kMiB)});
  ASSERT_TRUE(b.ok());
  const std::string s1 = b.open(TwoTenants::kAlice);
  const std::string s2 = b.open(TwoTenants::kAlice);
  TestMemfd m128(128 * kMiB, F_SEAL_SHRINK, "r128"), m64(64 * kMiB, F_SEAL_SHRINK, "r64"),
      m4k(4096, F_SEAL_SHRINK, "r4k");
  uint64_t r1 = 0;
  ASSERT_TRUE(b.register_fd(TwoTenants::kAlice, s1, m128.fd, 128 * kMiB, &r1).ok());
  // The session: 128 + 128 MiB > 192 MiB.
  grpc::Status st = b.register_fd(TwoTenants::kAlice, s1, m128.fd, 128 * kMiB);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("session memory limit exceeded: registering a shared-memory "
                                    "region of 134217728 bytes would bring the session to "
                                    "268435456 bytes"),
            std::string::npos)
      << st.error_message();
  EXPECT_NE(st.error_message().find("134217728 in shared-memory regions (limit 201326592)"),
            std::string::npos)
      << st.error_message();
  // The tenant: 128 MiB in s1 and 128 MiB in s2 fill its 256 MiB exactly; a page more does not fit.
  uint64_t r2 = 0;
  ASSERT_TRUE(b.register_fd(TwoTenants::kAlice, s2, m128.fd, 128 * kMiB, &r2).ok());
  st = b.register_fd(TwoTenants::kAlice, s2, m4k.fd, 4096);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("tenant memory limit exceeded"), std::string::npos)
      << st.error_message();
  EXPECT_NE(st.error_message().find("268435456 in shared-memory regions (tensord serve "
                                    "--tenant-memory-limit 268435456)"),
            std::string::npos)
      << st.error_message();
  // A streamed upload is refused for the same reason.
  {
    grpc::ClientContext ctx;
    TwoTenants::prepare(ctx, TwoTenants::kAlice, s2);
    v1::UploadHeader h;
    h.set_dtype(1);
    h.add_shape(1024);
    h.set_total_bytes(4096);
    v1::BeginUploadResponse resp;
    grpc::Status up = b.stub().BeginUpload(&ctx, h, &resp);
    EXPECT_EQ(up.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << up.error_message();
  }
  // Bob has his own quota.
  const std::string bob = b.open(TwoTenants::kBob);
  EXPECT_TRUE(b.register_fd(TwoTenants::kBob, bob, m128.fd, 128 * kMiB).ok());
  // Unregistered: the charge goes.
  ASSERT_TRUE(b.unregister(TwoTenants::kAlice, s1, r1).ok());
  EXPECT_TRUE(b.register_fd(TwoTenants::kAlice, s2, m64.fd, 64 * kMiB).ok());
  // A closed session: its regions' charges go with it.
  b.close_session(TwoTenants::kAlice, s2);
  const std::string s3 = b.open(TwoTenants::kAlice);
  EXPECT_TRUE(b.register_fd(TwoTenants::kAlice, s3, m128.fd, 128 * kMiB).ok());
  EXPECT_TRUE(b.register_fd(TwoTenants::kAlice, s1, m64.fd, 64 * kMiB).ok());
  b.close_session(TwoTenants::kBob, bob);
  expect_bob_served(b.broker().address());
}

// A tensor lent a region's bytes (computed on in place) is charged once: by the engine, as the
// tensor; the region counts only what is not lent.
TEST(SecurityShmAddressSpace, LentBytesAreChargedOnce) {
  constexpr int64_t kMiB = 1 << 20;
  TwoTenants b({"--session-memory-limit", std::to_string(192 * kMiB)});
  ASSERT_TRUE(b.ok());
  const std::string s = b.open(TwoTenants::kAlice);
  TestMemfd m128(128 * kMiB, F_SEAL_SHRINK, "lent"), m32(32 * kMiB, F_SEAL_SHRINK, "more");
  uint64_t region = 0;
  ASSERT_TRUE(b.register_fd(TwoTenants::kAlice, s, m128.fd, 128 * kMiB, &region).ok());
  auto upload = [&](bool lend, uint64_t* handle) {
    grpc::ClientContext ctx;
    TwoTenants::prepare(ctx, TwoTenants::kAlice, s);
    v1::UploadRegionRequest req;
    req.mutable_header()->set_dtype(1);  // float32
    req.mutable_header()->add_shape(32 * kMiB);
    req.mutable_header()->set_total_bytes(128 * kMiB);
    req.set_region(region);
    req.set_lend(lend);
    v1::UploadResponse resp;
    grpc::Status st = b.stub().UploadRegion(&ctx, req, &resp);
    *handle = resp.handle();
    return st;
  };
  uint64_t h = 0;
  grpc::Status st = upload(/*lend=*/true, &h);
  ASSERT_TRUE(st.ok()) << st.error_message();
  // 128 MiB lent (the tensor) + 32 MiB more of region fit in 192 MiB.
  uint64_t more = 0;
  st = b.register_fd(TwoTenants::kAlice, s, m32.fd, 32 * kMiB, &more);
  EXPECT_TRUE(st.ok()) << st.error_message();
  // Released, the tensor's bytes count as the region's again: 128 + 32 + 64 > 192.
  {
    grpc::ClientContext ctx;
    TwoTenants::prepare(ctx, TwoTenants::kAlice, s);
    v1::HandleRequest req;
    req.set_handle(h);
    v1::ReleaseResponse resp;
    ASSERT_TRUE(b.stub().Release(&ctx, req, &resp).ok());
  }
  TestMemfd m64(64 * kMiB, F_SEAL_SHRINK, "over");
  // (refused while the tensor lives too, with 32 MiB of region charged; the engine lets it go
  // asynchronously, after which the region's 128 MiB count again)
  const std::string again = "167772160 in shared-memory regions";
  for (int i = 0; i < 100; ++i) {
    st = b.register_fd(TwoTenants::kAlice, s, m64.fd, 64 * kMiB);
    ASSERT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
    if (st.error_message().find(again) != std::string::npos) break;
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_NE(st.error_message().find(again), std::string::npos) << st.error_message();
}

// The engine's own allocation checks see the session's regions too (Engine::external_bytes):
// before, a session that registered regions first and then computed held regions + tensors,
// about twice its limit (only the broker's checks of uploads and registrations counted the
// regions). Now a computation whose output would pass the limit with the region's bytes is
// refused RESOURCE_EXHAUSTED naming the limit, and runs once the region is unregistered.
TEST(SecurityShmAddressSpace, RegionsCountInTheEnginesLimitChecks) {
  constexpr int64_t kMiB = 1 << 20;
  constexpr int64_t kLimit = 64 * kMiB;
  TwoTenants b({"--session-memory-limit", std::to_string(kLimit)});
  ASSERT_TRUE(b.ok());
  const std::string s = b.open(TwoTenants::kAlice);
  TestMemfd m48(48 * kMiB, F_SEAL_SHRINK, "three-quarters");  // 0.75 of the limit
  uint64_t region = 0;
  ASSERT_TRUE(b.register_fd(TwoTenants::kAlice, s, m48.fd, 48 * kMiB, &region).ok());
  // The region's bytes are shown: to its tenant (BrokerStatus, /api/status's document) in its
  // session's row and its own total, and to nobody else.
  auto status_of = [&](const char* token) {
    grpc::ClientContext ctx;
    TwoTenants::prepare(ctx, token);
    v1::BrokerStatusRequest req;
    v1::BrokerStatusResponse resp;
    grpc::Status st = b.stub().BrokerStatus(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return nlohmann::json::parse(resp.json(), nullptr, /*allow_exceptions=*/false);
  };
  {
    const auto mine = status_of(TwoTenants::kAlice);
    ASSERT_TRUE(mine.is_object()) << mine.dump();
    EXPECT_EQ(mine["tenant"]["region_bytes"].get<int64_t>(), 48 * kMiB) << mine["tenant"].dump();
    EXPECT_EQ(mine["sessions"]["region_bytes"].get<int64_t>(), 48 * kMiB);
    ASSERT_EQ(mine["sessions"]["list"].size(), 1u);
    EXPECT_EQ(mine["sessions"]["list"][0]["region_bytes"].get<int64_t>(), 48 * kMiB);
    EXPECT_EQ(mine["sessions"]["list"][0]["regions"].get<int64_t>(), 1);
    const auto theirs = status_of(TwoTenants::kBob);
    ASSERT_TRUE(theirs.is_object());
    EXPECT_EQ(theirs["tenant"]["region_bytes"].get<int64_t>(), 0) << theirs["tenant"].dump();
  }

  // shape: int64[1] = {8 Mi}, uploaded (a runtime input: nothing is folded at compile time).
  uint64_t shape = 0;
  {
    grpc::ClientContext ctx;
    TwoTenants::prepare(ctx, TwoTenants::kAlice, s);
    v1::UploadChunk req;
    req.mutable_header()->set_dtype(static_cast<int32_t>(DType::kInt64));
    req.mutable_header()->add_shape(1);
    req.mutable_header()->set_total_bytes(8);
    const int64_t n = 8 * kMiB;  // float32: 32 MiB, half the limit
    req.set_data(std::string(reinterpret_cast<const char*>(&n), 8));
    v1::UploadResponse resp;
    grpc::Status st = b.stub().UploadInline(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    shape = resp.handle();
  }
  Graph g;
  g.name = "fill";
  g.inputs = {{"shape", {DType::kInt64, {1}}}};
  g.nodes.push_back(testing::sched_node(
      "fill", "ConstantOfShape", {"shape"}, {"y"},
      {{"value", Attribute(HostTensor::from_vector<float>({1.0f}, {1}))}}));
  g.outputs = {{"y", {}}};
  // Executes the graph and waits for its output: the status of the computation.
  auto run = [&](uint64_t* out) {
    v1::ExecuteRequest req;
    rpc::to_proto(g, req.mutable_graph());
    req.add_inputs(shape);
    v1::ExecuteResponse resp;
    {
      grpc::ClientContext ctx;
      TwoTenants::prepare(ctx, TwoTenants::kAlice, s);
      grpc::Status st = b.stub().Execute(&ctx, req, &resp);
      if (!st.ok()) return st;
    }
    if (resp.outputs_size() != 1)
      return grpc::Status(grpc::StatusCode::INTERNAL, "expected one output");
    *out = resp.outputs(0);
    grpc::ClientContext ctx;
    TwoTenants::prepare(ctx, TwoTenants::kAlice, s);
    v1::HandleRequest w;
    w.set_handle(*out);
    v1::WaitResponse wr;
    return b.stub().Wait(&ctx, w, &wr);
  };
  uint64_t y = 0;
  grpc::Status st = run(&y);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("session memory limit exceeded"), std::string::npos)
      << st.error_message();
  EXPECT_NE(st.error_message().find("of its 64.0 MiB limit"), std::string::npos)
      << st.error_message();
  EXPECT_NE(st.error_message().find("48.0 MiB of them in shared-memory regions"),
            std::string::npos)
      << st.error_message();

  // Unregistered: the same computation fits.
  ASSERT_TRUE(b.unregister(TwoTenants::kAlice, s, region).ok());
  st = run(&y);
  EXPECT_TRUE(st.ok()) << st.error_message();
  {
    grpc::ClientContext ctx;
    TwoTenants::prepare(ctx, TwoTenants::kAlice, s);
    v1::HandleRequest req;
    req.set_handle(y);
    v1::InfoResponse resp;
    ASSERT_TRUE(b.stub().Info(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.type().shape_size(), 1);
    EXPECT_EQ(resp.type().shape(0), 8 * kMiB);
  }
  // Registered again next to the 32 MiB tensor: 32 + 48 > 64 is refused by the broker as before.
  st = b.register_fd(TwoTenants::kAlice, s, m48.fd, 48 * kMiB);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  b.close_session(TwoTenants::kAlice, s);
}

// Pending region tickets may hold descriptors: one tenant holds at most 64 of the broker's 256.
TEST(SecurityShmAddressSpace, RegionTicketsAreBoundedPerTenant) {
  TwoTenants b({});
  ASSERT_TRUE(b.ok());
  int got = 0;
  grpc::Status st;
  for (int i = 0; i < 10 && st.ok(); ++i) {
    const std::string s = b.open(TwoTenants::kAlice);
    for (int k = 0; k < 8; ++k) {
      std::string t;
      st = b.ticket(TwoTenants::kAlice, s, &t);
      if (!st.ok()) break;
      ++got;
    }
  }
  EXPECT_EQ(got, 64);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("this tenant's sessions have 64 region tickets pending"),
            std::string::npos)
      << st.error_message();
  std::string t;
  EXPECT_TRUE(b.ticket(TwoTenants::kBob, b.open(TwoTenants::kBob), &t).ok());
}

// 1,012 idle sockets used to exhaust the default 1,024 descriptors: `tensord serve` raises
// its soft limit to the hard one at start.
TEST(SecurityShmAddressSpace, TheBrokerRaisesItsDescriptorLimitToTheHardLimit) {
  rlimit mine{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &mine), 0);
  if (mine.rlim_max != RLIM_INFINITY && mine.rlim_max <= 1024)
    GTEST_SKIP() << "the hard limit is " << mine.rlim_max << ": nothing to raise";
  rlimit low = mine;
  low.rlim_cur = 1024;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);  // inherited by the broker
  auto b = BrokerProcess::start({});
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &mine), 0);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  std::ifstream in("/proc/" + std::to_string((*b)->pid()) + "/limits");
  std::string line;
  long long soft = -1, hard = -1;
  while (std::getline(in, line))
    if (line.rfind("Max open files", 0) == 0)
      std::sscanf(line.c_str() + 14, "%lld %lld", &soft, &hard);
  EXPECT_GT(soft, 1024) << line;
  if (mine.rlim_max != RLIM_INFINITY) EXPECT_EQ(soft, hard) << line;
}

// Smaller finding: an offset near 2^63 made the message print a wrapped end
// (-9223372036854775745); it names the offset and the length now.
TEST_F(SecurityShm, AnOffsetNear2To63IsRefusedWithItsOwnValue) {
  const std::string s = open_session();
  TestMemfd m(1 << 20, F_SEAL_SHRINK, "small");
  uint64_t region = 0;
  ASSERT_TRUE(testing::register_fd(*stub_, s, socket_, m.fd, 1 << 20, &region).ok());
  for (int64_t offset : {INT64_MAX, INT64_MAX - 63, int64_t{1} << 62, int64_t{1} << 20}) {
    grpc::Status st = upload_region(s, region, offset, 16);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::OUT_OF_RANGE) << st.error_message();
    EXPECT_NE(st.error_message().find("64 bytes at offset " + std::to_string(offset) +
                                      " are outside shared-memory region 'small' of 1048576 bytes"),
              std::string::npos)
        << st.error_message();
    EXPECT_EQ(st.error_message().find("-9"), std::string::npos) << st.error_message();
  }
  // A read into the region: the same words.
  uint64_t h = 0;
  ASSERT_TRUE(upload_region(s, region, 0, 16, &h).ok());
  v1::ReadRegionResponse resp;
  grpc::Status st = read_region(s, h, region, (1 << 20) - 8, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();  // answered with the size: no room
  EXPECT_FALSE(resp.written());
  expect_alive();
}

}  // namespace
}  // namespace tensord
