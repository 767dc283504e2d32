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
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "broker_process.h"
#include "rpc/remote_client.h"
#include "rpc/wire.h"
#include "shm_util.h"
#include "tensord.grpc.pb.h"

namespace tensord {
namespace {

using std::chrono::milliseconds;
using testing::BrokerProcess;
using testing::TestMemfd;

class SecurityShm : public ::testing::Test {
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
  void SetUp() override {
    ASSERT_NE(broker_, nullptr);
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
    stub_ = v1::Tensord::NewStub(
        grpc::CreateCustomChannel(broker_->address(), grpc::InsecureChannelCredentials(), args));
    socket_ = testing::region_socket(*stub_);
    ASSERT_EQ(socket_.rfind("@tensord-fd-", 0), 0u) << socket_;
  }

  std::string open_session() {
    grpc::ClientContext ctx;
    testing::prepare_call(ctx, "");
    v1::OpenSessionRequest req;
    v1::OpenSessionResponse resp;
    grpc::Status st = stub_->OpenSession(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.session_id();
  }

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

  static BrokerProcess* broker_;
  std::unique_ptr<v1::Tensord::Stub> stub_;
  std::string socket_;
};

BrokerProcess* SecurityShm::broker_ = nullptr;

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

}  // namespace
}  // namespace tensord
