// Issue 15, attacks 3, 5, 6 (broker side), 8 and 9, each against a real `tensord serve`
// process: guessable or foreign session ids, memory taken before authentication, limits with
// holes, public listeners without a token, TLS, and tokens with control characters.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "broker_process.h"
#include "rpc/remote_client.h"
#include "rpc/wire.h"
#include "tensord.grpc.pb.h"
#include "tensord/tensor.h"

namespace tensord {
namespace {

using std::chrono::milliseconds;
using testing::BrokerOptions;
using testing::BrokerProcess;
using testing::proc_status_bytes;

// A fresh folder for the test's files (token files, certificates), removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "tensord-sec.XXXXXX").string();
    path_ = mkdtemp(t.data()) ? t : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  // Writes `text` to NAME with `mode`; returns the path.
  std::string write(const std::string& name, const std::string& text, mode_t mode = 0600) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary) << text;
    chmod(p.c_str(), mode);
    return p;
  }

 private:
  std::string path_;
};

Result<std::unique_ptr<BrokerProcess>> start(std::vector<std::string> args, bool tcp = true,
                                             std::string listen = "") {
  BrokerOptions o;
  o.args = std::move(args);
  o.tcp = tcp;
  o.listen = std::move(listen);
  o.cpu_devices = 1;
  return BrokerProcess::start(o);
}


int thread_count(pid_t pid) {
  int n = 0;
  for (const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    (void)e;
    ++n;
  }
  return n;
}

// A raw stub, for what RemoteClient never sends.
class Raw {
 public:
  explicit Raw(const std::string& address,
               std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials()) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
    args.SetMaxSendMessageSize(1 << 30);
    args.SetMaxReceiveMessageSize(1 << 30);
    stub_ = v1::Tensord::NewStub(grpc::CreateCustomChannel(address, creds, args));
  }
  v1::Tensord::Stub& stub() { return *stub_; }
  static void prepare(grpc::ClientContext& ctx, const std::string& token,
                      const std::string& session = "", milliseconds timeout = milliseconds(20000)) {
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    if (!token.empty()) ctx.AddMetadata(rpc::kAuthKey, "Bearer " + token);
    if (!session.empty()) ctx.AddMetadata(rpc::kSessionKey, session);
  }
  grpc::Status open(const std::string& token, std::string* id) {
    grpc::ClientContext ctx;
    prepare(ctx, token);
    v1::OpenSessionRequest req;
    v1::OpenSessionResponse resp;
    grpc::Status s = stub_->OpenSession(&ctx, req, &resp);
    *id = resp.session_id();
    return s;
  }
  grpc::Status heartbeat(const std::string& token, const std::string& session) {
    grpc::ClientContext ctx;
    prepare(ctx, token, session);
    v1::HeartbeatRequest req;
    v1::HeartbeatResponse resp;
    return stub_->Heartbeat(&ctx, req, &resp);
  }
  grpc::Status close(const std::string& token, const std::string& session) {
    grpc::ClientContext ctx;
    prepare(ctx, token, session);
    v1::CloseSessionRequest req;
    v1::CloseSessionResponse resp;
    return stub_->CloseSession(&ctx, req, &resp);
  }

 private:
  std::unique_ptr<v1::Tensord::Stub> stub_;
};

// The broker still serves: a fresh handshake with `token` succeeds.
void expect_alive(const std::string& address, const std::string& token,
                  std::shared_ptr<grpc::ChannelCredentials> creds =
                      grpc::InsecureChannelCredentials()) {
  Raw raw(address, std::move(creds));
  grpc::ClientContext ctx;
  Raw::prepare(ctx, token);
  v1::HandshakeRequest req;
  v1::HandshakeResponse resp;
  grpc::Status s = raw.stub().Handshake(&ctx, req, &resp);
  EXPECT_TRUE(s.ok()) << "the broker stopped serving: " << s.error_message();
}

// Runs a shell command line; returns its exit status and (merged) output.
std::pair<int, std::string> shell(const std::string& cmd) {
  std::string out;
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return {-1, ""};
  char buf[512];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int st = pclose(f);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

std::string read_pem(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool is_session_id(const std::string& id) {
  if (id.size() != 32) return false;
  for (char c : id)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

const char* kTokens = "# two tenants\nalice:alice-token-0123\n\nbob:bob-token-4567\n";

// ---------------------------------------------------------------- 3: sessions as capabilities

TEST(SecurityAuth, SessionIdsAre128BitRandomAndBoundToTheirTenant) {
  TempDir dir;
  auto b = start({"--token-file", dir.write("tokens", kTokens), "--max-sessions-per-tenant",
                  "2000"});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  Raw raw((*b)->address());
  std::set<std::string> ids;
  std::vector<int> ones(128, 0);  // how often each bit is set: random bits are set half the time
  for (int i = 0; i < 1000; ++i) {
    std::string id;
    ASSERT_TRUE(raw.open("alice-token-0123", &id).ok());
    ASSERT_TRUE(is_session_id(id)) << "'" << id << "' is not 32 lowercase hex characters";
    ids.insert(id);
    for (int k = 0; k < 32; ++k) {
      const int nib = std::stoi(id.substr(static_cast<size_t>(k), 1), nullptr, 16);
      for (int bit = 0; bit < 4; ++bit) ones[static_cast<size_t>(4 * k + bit)] += (nib >> bit) & 1;
    }
  }
  EXPECT_EQ(ids.size(), 1000u);
  for (int k = 0; k < 128; ++k) {  // 1000 fair coins: 500 +- 5 sigma (79)
    EXPECT_GT(ones[static_cast<size_t>(k)], 420) << "bit " << k;
    EXPECT_LT(ones[static_cast<size_t>(k)], 580) << "bit " << k;
  }

  // Alice keeps a tensor in her session.
  rpc::RemoteClientOptions ao;
  ao.token = "alice-token-0123";
  auto alice = rpc::RemoteClient::connect((*b)->address(), ao);
  ASSERT_TRUE(alice.ok()) << alice.status().to_string();
  const std::string secret_session = (*alice)->session();
  HostTensor t = HostTensor::from_vector<float>({3.5f, -1.0f, 42.0f}, {3});
  auto h = (*alice)->upload(t.view(), "");
  ASSERT_TRUE(h.ok());

  // Bob knows her id: every use of it is NOT_FOUND, word for word what a random id gets.
  std::string random_id = "0123456789abcdef0123456789abcdef";
  const grpc::Status foreign = raw.heartbeat("bob-token-4567", secret_session);
  const grpc::Status unknown = raw.heartbeat("bob-token-4567", random_id);
  EXPECT_EQ(foreign.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(foreign.error_message(), unknown.error_message());
  EXPECT_EQ(foreign.error_message().find(secret_session), std::string::npos);
  EXPECT_EQ(foreign.error_message().find("tenant"), std::string::npos) << foreign.error_message();
  {
    grpc::ClientContext ctx;
    Raw::prepare(ctx, "bob-token-4567", secret_session);
    v1::ReadRequest req;
    req.set_handle(*h);
    auto reader = raw.stub().Read(&ctx, req);
    v1::ReadChunk chunk;
    int chunks = 0;
    while (reader->Read(&chunk)) ++chunks;
    const grpc::Status s = reader->Finish();
    EXPECT_EQ(chunks, 0) << "bob read alice's bytes";
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(s.error_message(), unknown.error_message());
  }
  {  // Attach (which would bind her session to bob's call) and CloseSession
    grpc::ClientContext ctx;
    Raw::prepare(ctx, "bob-token-4567", secret_session);
    v1::AttachRequest req;
    auto reader = raw.stub().Attach(&ctx, req);
    v1::AttachEvent ev;
    EXPECT_FALSE(reader->Read(&ev));
    const grpc::Status s = reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(s.error_message(), unknown.error_message());
  }
  const grpc::Status closed = raw.close("bob-token-4567", secret_session);
  EXPECT_EQ(closed.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(closed.error_message(), unknown.error_message());
  // Her session and tensor are untouched.
  auto back = (*alice)->read(*h);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->to_double_vector(), (std::vector<double>{3.5, -1.0, 42.0}));
  EXPECT_TRUE(raw.heartbeat("alice-token-0123", secret_session).ok());
  // The old decimal form is refused as malformed.
  EXPECT_EQ(raw.heartbeat("alice-token-0123", "12345").error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  expect_alive((*b)->address(), "bob-token-4567");
}

// A client's Attach stream may reach the broker after its CloseSession (a short session on a
// loaded machine): it ends CANCELLED, as when the client closes its session, and is not an
// error (the status page counted it as one). Another tenant naming the closed id still gets
// the NOT_FOUND any unknown id gets.
TEST(SecurityAuth, AnAttachAfterItsSessionClosedIsItsNormalEnd) {
  TempDir dir;
  auto b = start({"--token-file", dir.write("tokens", kTokens)});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  Raw raw((*b)->address());
  std::string id;
  ASSERT_TRUE(raw.open("alice-token-0123", &id).ok());
  ASSERT_TRUE(raw.close("alice-token-0123", id).ok());
  auto attach = [&](const char* token) {
    grpc::ClientContext ctx;
    Raw::prepare(ctx, token, id);
    v1::AttachRequest req;
    auto reader = raw.stub().Attach(&ctx, req);
    v1::AttachEvent ev;
    EXPECT_FALSE(reader->Read(&ev));
    return reader->Finish();
  };
  EXPECT_EQ(attach("alice-token-0123").error_code(), grpc::StatusCode::CANCELLED);
  const grpc::Status foreign = attach("bob-token-4567");
  EXPECT_EQ(foreign.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(foreign.error_message(),
            raw.heartbeat("bob-token-4567", "0123456789abcdef0123456789abcdef").error_message());
  expect_alive((*b)->address(), "alice-token-0123");
}

// ---------------------------------------------------------------- 5: memory before auth

// Four concurrent calls of `bytes` each with a wrong token: all UNAUTHENTICATED; returns the
// broker's peak RSS growth.
int64_t wrong_token_flood(const BrokerProcess& b, int64_t bytes, const std::string& token) {
  const int64_t hwm0 = proc_status_bytes(b.pid(), "VmHWM");
  v1::EchoMessage msg;
  msg.set_payload(std::string(static_cast<size_t>(bytes), 'x'));
  std::vector<std::thread> threads;
  std::atomic<int> refused{0};
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      Raw raw(b.address());  // a connection each
      grpc::ClientContext ctx;
      Raw::prepare(ctx, token, "", milliseconds(60000));
      v1::EchoMessage resp;
      grpc::Status s = raw.stub().Echo(&ctx, msg, &resp);
      if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED &&
          s.error_message().find("token") != std::string::npos && resp.payload().empty())
        refused++;
      else
        ADD_FAILURE() << "code " << s.error_code() << ": " << s.error_message();
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(refused.load(), 4);
  return proc_status_bytes(b.pid(), "VmHWM") - hwm0;
}

TEST(SecurityAuth, WrongTokenHugeMessagesAreRefusedBeforeBuffering) {
  TempDir dir;
  const std::string tokens = dir.write("tokens", kTokens);
  for (bool tcp : {true, false}) {
    auto b = start({"--token-file", tokens}, tcp);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    expect_alive((*b)->address(), "alice-token-0123");
    const int64_t grew = wrong_token_flood(**b, int64_t{256} << 20, "wrong-token");
    std::printf("[ figures ] 4 x 256 MiB wrong-token Echo over %s: broker peak RSS grew %.1f MiB\n",
                tcp ? "tcp" : "unix", grew / 1048576.0);
    EXPECT_LT(grew, int64_t{64} << 20);
    const int64_t grew_missing = wrong_token_flood(**b, int64_t{256} << 20, "");
    EXPECT_LT(grew_missing, int64_t{64} << 20);
    expect_alive((*b)->address(), "alice-token-0123");
    // With the right token the message is still over the broker's message limit.
    Raw raw((*b)->address());
    grpc::ClientContext ctx;
    Raw::prepare(ctx, "alice-token-0123");
    v1::EchoMessage msg, resp;
    msg.set_payload(std::string(size_t{80} << 20, 'y'));
    const grpc::Status s = raw.stub().Echo(&ctx, msg, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    expect_alive((*b)->address(), "alice-token-0123");
  }
}

// ---------------------------------------------------------------- 6: limits

TEST(SecurityAuth, SessionsPerTenantAndInTotalAreLimited) {
  TempDir dir;
  auto b = start({"--token-file", dir.write("tokens", kTokens), "--max-sessions-per-tenant", "3",
                  "--max-sessions", "5"});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  Raw raw((*b)->address());
  std::vector<std::string> alice(3);
  for (auto& id : alice) ASSERT_TRUE(raw.open("alice-token-0123", &id).ok());
  std::string extra;
  grpc::Status s = raw.open("alice-token-0123", &extra);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("--max-sessions-per-tenant 3"), std::string::npos)
      << s.error_message();
  std::string b1, b2, b3;
  EXPECT_TRUE(raw.open("bob-token-4567", &b1).ok());  // another tenant is not held back
  EXPECT_TRUE(raw.open("bob-token-4567", &b2).ok());
  s = raw.open("bob-token-4567", &b3);  // 5 sessions in all
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("--max-sessions"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("5"), std::string::npos) << s.error_message();
  ASSERT_TRUE(raw.close("alice-token-0123", alice[0]).ok());
  EXPECT_TRUE(raw.open("alice-token-0123", &extra).ok());
  expect_alive((*b)->address(), "bob-token-4567");
}

// Ten sessions do not hold ten times a tenant's quota; uploads still arriving count too.
TEST(SecurityAuth, TenantMemoryLimitCoversAllItsSessions) {
  TempDir dir;
  auto b = start({"--token-file", dir.write("tokens", kTokens), "--tenant-memory-limit",
                  std::to_string(1 << 20)});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const std::vector<float> v(150 << 10, 1.0f);  // 600 KiB
  HostTensor t = HostTensor::from_vector<float>(v, {static_cast<int64_t>(v.size())});
  rpc::RemoteClientOptions ao;
  ao.token = "alice-token-0123";
  auto a1 = rpc::RemoteClient::connect((*b)->address(), ao);
  auto a2 = rpc::RemoteClient::connect((*b)->address(), ao);
  ASSERT_TRUE(a1.ok() && a2.ok());
  ASSERT_TRUE((*a1)->upload(t.view(), "").ok());
  auto second = (*a2)->upload(t.view(), "");
  EXPECT_EQ(second.status().code(), StatusCode::kResourceExhausted) << second.status().to_string();
  EXPECT_NE(second.status().message().find("tenant memory limit"), std::string::npos)
      << second.status().to_string();
  // A pending parallel upload of alice's is charged to her tenant as well.
  Raw raw((*b)->address());
  {
    grpc::ClientContext ctx;
    Raw::prepare(ctx, "alice-token-0123", (*a2)->session());
    v1::UploadHeader h;
    h.set_dtype(1);
    h.add_shape(150 << 10);
    h.set_total_bytes(600 << 10);
    v1::BeginUploadResponse resp;
    grpc::Status s = raw.stub().BeginUpload(&ctx, h, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    EXPECT_NE(s.error_message().find("--tenant-memory-limit 1048576"), std::string::npos)
        << s.error_message();
  }
  // Bob has his own quota.
  rpc::RemoteClientOptions bo;
  bo.token = "bob-token-4567";
  auto bob = rpc::RemoteClient::connect((*b)->address(), bo);
  ASSERT_TRUE(bob.ok());
  EXPECT_TRUE((*bob)->upload(t.view(), "").ok());
  // Without tokens there are no tenants: the flag is a usage error.
  auto [st, out] = shell(std::string("timeout 20 ") + TENSORD_CLI_PATH +
                         " serve --listen 127.0.0.1:0 --tenant-memory-limit 1000");
  EXPECT_EQ(st, 2) << out;
  EXPECT_NE(out.find("--token-file"), std::string::npos) << out;
}

TEST(SecurityAuth, PendingUploadBytesAreChargedToTheSession) {
  auto b = start({"--session-memory-limit", std::to_string(64 << 20)});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  Raw raw((*b)->address());
  std::string session;
  ASSERT_TRUE(raw.open("", &session).ok());
  v1::UploadHeader h;
  h.set_dtype(1);
  h.add_shape(10 << 20);  // 40 MiB of float32
  h.set_total_bytes(40 << 20);
  const auto begin = [&](uint64_t* id) {
    grpc::ClientContext ctx;
    Raw::prepare(ctx, "", session);
    v1::BeginUploadResponse resp;
    grpc::Status s = raw.stub().BeginUpload(&ctx, h, &resp);
    *id = resp.upload();
    return s;
  };
  uint64_t first = 0, second = 0;
  ASSERT_TRUE(begin(&first).ok());
  // The first 40 MiB are not tensors yet, but they are held: a second 40 MiB is over 64 MiB.
  grpc::Status s = begin(&second);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("limit 67108864"), std::string::npos) << s.error_message();
  {  // so is a streamed upload
    grpc::ClientContext ctx;
    Raw::prepare(ctx, "", session);
    v1::UploadResponse resp;
    auto w = raw.stub().Upload(&ctx, &resp);
    v1::UploadChunk c;
    *c.mutable_header() = h;
    w->Write(c);
    w->WritesDone();
    const grpc::Status us = w->Finish();
    EXPECT_EQ(us.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << us.error_message();
  }
  {  // The pending upload ends (its bytes never came): its charge goes with it.
    grpc::ClientContext ctx;
    Raw::prepare(ctx, "", session);
    v1::FinishUploadRequest req;
    req.set_upload(first);
    v1::UploadResponse resp;
    EXPECT_EQ(raw.stub().FinishUpload(&ctx, req, &resp).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_TRUE(begin(&second).ok());
  expect_alive((*b)->address(), "");
}

TEST(SecurityAuth, OversizedLoadModelIsRefusedOnItsHeader) {
  auto b = start({"--max-model-bytes", std::to_string(64 << 20), "--session-memory-limit",
                  std::to_string(100 << 20)});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  Raw raw((*b)->address());
  std::string session;
  ASSERT_TRUE(raw.open("", &session).ok());
  const int64_t hwm0 = proc_status_bytes((*b)->pid(), "VmHWM");
  const auto load = [&](int64_t declared, int chunks) {
    grpc::ClientContext ctx;
    Raw::prepare(ctx, "", session);
    v1::LoadModelResponse resp;
    auto w = raw.stub().LoadModel(&ctx, &resp);
    v1::LoadModelChunk c;
    c.mutable_header()->set_graph_bytes(declared);
    w->Write(c);
    c.clear_header();
    c.set_data(std::string(size_t{16} << 20, 'g'));
    for (int i = 0; i < chunks && w->Write(c); ++i) {
    }
    w->WritesDone();
    return w->Finish();
  };
  grpc::Status s = load(int64_t{600} << 20, 40);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("--max-model-bytes 67108864"), std::string::npos)
      << s.error_message();
  // Under the model limit but over what the session may hold (the staging counts).
  auto b2 = start({"--session-memory-limit", std::to_string(32 << 20)});
  ASSERT_TRUE(b2.ok());
  Raw raw2((*b2)->address());
  std::string session2;
  ASSERT_TRUE(raw2.open("", &session2).ok());
  {
    grpc::ClientContext ctx;
    Raw::prepare(ctx, "", session2);
    v1::LoadModelResponse resp;
    auto w = raw2.stub().LoadModel(&ctx, &resp);
    v1::LoadModelChunk c;
    c.mutable_header()->set_graph_bytes(int64_t{48} << 20);
    w->Write(c);
    w->WritesDone();
    s = w->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    EXPECT_NE(s.error_message().find("session memory limit"), std::string::npos)
        << s.error_message();
  }
  const int64_t grew = proc_status_bytes((*b)->pid(), "VmHWM") - hwm0;
  std::printf("[ figures ] LoadModel declaring 600 MiB (sent 640 MiB): broker peak RSS grew "
              "%.1f MiB\n",
              grew / 1048576.0);
  EXPECT_LT(grew, int64_t{128} << 20);
  expect_alive((*b)->address(), "");
  expect_alive((*b2)->address(), "");
}

// LoadModel streams that send their header and then hold: each holds a gRPC thread.
TEST(SecurityAuth, HeldStreamsAreBoundedPerSessionAndInThreads) {
  auto b = start({"--max-threads", "48", "--max-calls-per-session", "8"});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const int threads0 = thread_count((*b)->pid());
  Raw raw((*b)->address());
  struct Held {
    grpc::ClientContext ctx;
    v1::LoadModelResponse resp;
    std::unique_ptr<grpc::ClientWriter<v1::LoadModelChunk>> w;
  };
  std::vector<std::string> sessions(40);
  for (auto& s : sessions) ASSERT_TRUE(raw.open("", &s).ok());
  // One session: the 9th concurrent call is refused, naming the limit.
  std::vector<std::unique_ptr<Held>> held;
  const auto hold = [&](const std::string& session) {
    auto h = std::make_unique<Held>();
    Raw::prepare(h->ctx, "", session, milliseconds(60000));
    h->w = raw.stub().LoadModel(&h->ctx, &h->resp);
    v1::LoadModelChunk c;
    c.mutable_header()->set_graph_bytes(1 << 20);
    h->w->Write(c);
    held.push_back(std::move(h));
  };
  for (int i = 0; i < 8; ++i) hold(sessions[0]);
  std::this_thread::sleep_for(milliseconds(500));
  {
    grpc::ClientContext ctx;
    Raw::prepare(ctx, "", sessions[0]);
    v1::HeartbeatRequest req;
    v1::HeartbeatResponse resp;
    grpc::Status s = raw.stub().Heartbeat(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(s.error_message().find("--max-calls-per-session 8"), std::string::npos)
        << s.error_message();
  }
  // 300 held streams over 39 other sessions: the broker's threads stay bounded.
  for (int i = 0; i < 300; ++i) hold(sessions[1 + i % 39]);
  std::this_thread::sleep_for(milliseconds(1500));
  const int threads = thread_count((*b)->pid());
  std::printf("[ figures ] 308 held LoadModel streams: broker threads %d -> %d (--max-threads 48)\n",
              threads0, threads);
  EXPECT_LT(threads, threads0 + 48 + 16);
  int refused = 0, other = 0;
  for (auto& h : held) h->ctx.TryCancel();
  for (auto& h : held) {
    const grpc::Status s = h->w->Finish();
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) ++refused;
    else if (s.error_code() != grpc::StatusCode::CANCELLED) ++other;
  }
  // Past the thread limit calls wait for a thread (they are not refused); none failed otherwise.
  std::printf("[ figures ] of them refused RESOURCE_EXHAUSTED: %d\n", refused);
  EXPECT_EQ(other, 0);
  held.clear();
  std::this_thread::sleep_for(milliseconds(500));
  expect_alive((*b)->address(), "");
}

// A small message limit: clients learn it at the handshake, chunk below it, and say clearly
// when a graph's inline initializers cannot fit.
TEST(SecurityAuth, ClientsKeepInsideTheBrokersMessageLimit) {
  auto b = start({"--max-message-bytes", std::to_string(1 << 20)});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  rpc::RemoteClientOptions o;
  o.transport = "grpc";
  o.chunk_bytes = 8 << 20;  // asks for more than the broker takes
  auto c = rpc::RemoteClient::connect((*b)->address(), o);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  std::vector<float> big(768 << 10);  // 3 MiB
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 1000);
  HostTensor t = HostTensor::from_vector<float>(big, {static_cast<int64_t>(big.size())});
  auto h = (*c)->upload(t.view(), "");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  auto back = (*c)->read(*h);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(std::memcmp(back->data(), t.data(), t.nbytes()), 0);
  Graph g;
  g.inputs = {{"x", {DType::kFloat32, {static_cast<int64_t>(big.size())}}}};
  g.initializers["w"] = t;
  Node n;
  n.op = "Add";
  n.inputs = {"x", "w"};
  n.outputs = {"y"};
  g.nodes = {n};
  g.outputs = {{"y", {}}};
  auto e = (*c)->execute(g, {*h}, "");
  EXPECT_EQ(e.status().code(), StatusCode::kResourceExhausted) << e.status().to_string();
  EXPECT_NE(e.status().message().find("--max-message-bytes"), std::string::npos)
      << e.status().to_string();
  auto m = (*c)->load(g, "");  // streamed in chunks
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto out = (*c)->run(*m, {*h});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  auto y = (*c)->read((*out)[0]);
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  EXPECT_EQ(static_cast<const float*>(y->data())[999], 1998.0f);
  expect_alive((*b)->address(), "");
}

// ---------------------------------------------------------------- 8: listeners and TLS

TEST(SecurityAuth, NonLoopbackListenNeedsATokenOrInsecure) {
  TempDir dir;
  for (const char* listen : {"0.0.0.0:0", "[::]:0"}) {
    auto [st, out] = shell(std::string("timeout 20 ") + TENSORD_CLI_PATH + " serve --listen '" +
                           listen + "'");
    EXPECT_EQ(st, 2) << out;
    EXPECT_NE(out.find("not a loopback address"), std::string::npos) << out;
    EXPECT_NE(out.find("--token-file"), std::string::npos) << out;
    EXPECT_NE(out.find("--insecure"), std::string::npos) << out;
  }
  auto open = start({"--insecure"}, true, "0.0.0.0:0");
  ASSERT_TRUE(open.ok()) << open.status().to_string();
  expect_alive((*open)->address(), "");
  auto tokened = start({"--token-file", dir.write("tokens", kTokens)}, true, "0.0.0.0:0");
  ASSERT_TRUE(tokened.ok()) << tokened.status().to_string();
  expect_alive((*tokened)->address(), "alice-token-0123");
  // A token file others may read is refused, like ssh's keys.
  auto [st, out] = shell(std::string("timeout 20 ") + TENSORD_CLI_PATH +
                         " serve --listen 127.0.0.1:0 --token-file " +
                         dir.write("open-tokens", "t0ken\n", 0644));
  EXPECT_EQ(st, 2) << out;
  EXPECT_NE(out.find("chmod 600"), std::string::npos) << out;
  auto [st2, out2] = shell(std::string("timeout 20 ") + TENSORD_CLI_PATH +
                           " serve --listen 127.0.0.1:0 --token-file " +
                           dir.write("bad-tokens", "a:b\nc:b\n"));
  EXPECT_EQ(st2, 2) << out2;
  EXPECT_NE(out2.find("line 2"), std::string::npos) << out2;
}

// A CA, a broker certificate for 127.0.0.1/localhost and a client certificate, by openssl.
bool make_certs(const std::string& d) {
  const std::string cmd =
      "cd '" + d +
      "' && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 "
      "-subj /CN=tensord-test-ca && "
      "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost "
      "&& printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext && "
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem "
      "-days 2 -extfile san.ext && "
      "openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=client && "
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem "
      "-days 2 && "
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other.pem -days 2 "
      "-subj /CN=other";
  return shell(cmd).first == 0;
}

TEST(SecurityAuth, TlsAndMutualTlsRoundTrip) {
  TempDir dir;
  ASSERT_TRUE(make_certs(dir.path())) << "openssl is needed (scripts/setup.sh installs it)";
  const std::string d = dir.path() + "/";
  const std::string tokens = dir.write("tokens", kTokens);
  HostTensor t = HostTensor::from_vector<float>({1.0f, 2.0f, 3.0f}, {3});
  {
    auto b = start({"--tls-cert", d + "server.pem", "--tls-key", d + "server.key",
                    "--token-file", tokens});
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    rpc::RemoteClientOptions o;
    o.tls_ca_file = d + "ca.pem";
    o.token = "alice-token-0123";
    auto c = rpc::RemoteClient::connect((*b)->address(), o);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    auto h = (*c)->upload(t.view(), "");
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    EXPECT_EQ((*c)->read(*h)->to_double_vector(), (std::vector<double>{1, 2, 3}));
    // Wrong token over TLS: refused before the message.
    o.token = "nope";
    auto wrong = rpc::RemoteClient::connect((*b)->address(), o);
    EXPECT_EQ(wrong.status().code(), StatusCode::kUnauthenticated) << wrong.status().to_string();
    // Plain HTTP/2 to a TLS broker, and TLS with a CA that did not sign it: clear failures.
    rpc::RemoteClientOptions plain;
    plain.token = "alice-token-0123";
    plain.connect_timeout = milliseconds(3000);
    auto p = rpc::RemoteClient::connect((*b)->address(), plain);
    EXPECT_EQ(p.status().code(), StatusCode::kUnavailable) << p.status().to_string();
    EXPECT_NE(p.status().message().find("TENSORD_TLS_CA"), std::string::npos)
        << p.status().to_string();
    rpc::RemoteClientOptions other = plain;
    other.tls_ca_file = d + "other.pem";
    auto x = rpc::RemoteClient::connect((*b)->address(), other);
    EXPECT_EQ(x.status().code(), StatusCode::kUnavailable) << x.status().to_string();
    EXPECT_NE(x.status().message().find((*b)->address()), std::string::npos);
    EXPECT_NE(x.status().message().find("certificate verify failed"), std::string::npos)
        << x.status().to_string();
    expect_alive((*b)->address(), "alice-token-0123",
                 grpc::SslCredentials(grpc::SslCredentialsOptions{read_pem(d + "ca.pem"), "", ""}));
  }
  {  // mutual TLS: a client certificate signed by --tls-ca is required
    auto b = start({"--tls-cert", d + "server.pem", "--tls-key", d + "server.key", "--tls-ca",
                    d + "ca.pem"});
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    rpc::RemoteClientOptions o;
    o.tls_ca_file = d + "ca.pem";
    o.connect_timeout = milliseconds(3000);
    auto none = rpc::RemoteClient::connect((*b)->address(), o);
    EXPECT_EQ(none.status().code(), StatusCode::kUnavailable) << none.status().to_string();
    rpc::RemoteClientOptions bad = o;
    bad.tls_cert_file = d + "other.pem";
    bad.tls_key_file = d + "other.key";
    auto unsigned_cert = rpc::RemoteClient::connect((*b)->address(), bad);
    EXPECT_EQ(unsigned_cert.status().code(), StatusCode::kUnavailable);
    o.tls_cert_file = d + "client.pem";
    o.tls_key_file = d + "client.key";
    auto c = rpc::RemoteClient::connect((*b)->address(), o);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    auto h = (*c)->upload(t.view(), "");
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    EXPECT_EQ((*c)->read(*h)->to_double_vector(), (std::vector<double>{1, 2, 3}));
    // Through the CLI: --tls-ca and the client certificate in the environment.
    auto [st, out] = shell("TENSORD_TLS_CERT=" + d + "client.pem TENSORD_TLS_KEY=" + d +
                           "client.key " + TENSORD_CLI_PATH + " devices --address " +
                           (*b)->address() + " --tls-ca " + d + "ca.pem");
    EXPECT_EQ(st, 0) << out;
    EXPECT_NE(out.find("cpu:0"), std::string::npos) << out;
  }
}

// ---------------------------------------------------------------- 9: tokens with newlines

TEST(SecurityAuth, TokenWithTrailingNewlineWorksControlCharacterIsAClearError) {
  TempDir dir;
  auto b = start({"--token-file", dir.write("tokens", kTokens)});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const std::string cli = std::string(TENSORD_CLI_PATH) + " devices --address " + (*b)->address();
  // The CLI inherits TENSORD_TOKEN from this process.
  const auto devices = [&](const std::string& token) {
    setenv("TENSORD_TOKEN", token.c_str(), 1);
    auto r = shell(cli);
    unsetenv("TENSORD_TOKEN");
    return r;
  };
  auto [st, out] = devices("alice-token-0123\n");
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("cpu:0"), std::string::npos) << out;
  auto [st2, out2] = devices("alice-token\x01-0123");
  EXPECT_EQ(st2, 2) << out2;  // not 134: gRPC aborted on such a header before
  EXPECT_NE(out2.find("INVALID_ARGUMENT"), std::string::npos) << out2;
  EXPECT_NE(out2.find("TENSORD_TOKEN"), std::string::npos) << out2;
  EXPECT_NE(out2.find("0x01"), std::string::npos) << out2;
  auto [st3, out3] = devices("alice token");
  EXPECT_EQ(st3, 2) << out3;
  EXPECT_NE(out3.find("a space"), std::string::npos) << out3;
  rpc::RemoteClientOptions o;
  o.token = "  alice-token-0123\r\n";
  auto c = rpc::RemoteClient::connect((*b)->address(), o);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  o.token = "alice\n-token";
  auto bad = rpc::RemoteClient::connect((*b)->address(), o);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().to_string();
  expect_alive((*b)->address(), "alice-token-0123");
}

}  // namespace
}  // namespace tensord

namespace tensord {
namespace {

// ---------------------------------------------------------------- 11: watching other tenants

// Attack 11c: with tenants, a device's memory in use (and its high-water mark) and the
// "does not fit" messages told a tenant how much the others held. Now both read 0 for
// clients and messages name only the capacity. Compiled graphs and models are charged to the
// tenant and go with its last session, so nothing stays behind on its behalf.
TEST(SecurityAuth, TenantsCannotWatchEachOthersMemory) {
  TempDir dir;
  auto b = start({"--token-file", dir.write("tokens", kTokens)});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  rpc::RemoteClientOptions ao, bo;
  ao.token = "alice-token-0123";
  bo.token = "bob-token-4567";
  auto alice = rpc::RemoteClient::connect((*b)->address(), ao);
  auto bob = rpc::RemoteClient::connect((*b)->address(), bo);
  ASSERT_TRUE(alice.ok() && bob.ok());
  const std::vector<float> v(1 << 20, 2.0f);  // 4 MiB of alice's
  HostTensor t = HostTensor::from_vector<float>(v, {static_cast<int64_t>(v.size())});
  auto h = (*alice)->upload(t.view(), "");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  ASSERT_TRUE((*alice)->wait(*h).ok());
  auto devs = (*bob)->devices();
  ASSERT_TRUE(devs.ok());
  ASSERT_FALSE(devs->empty());
  for (const auto& d : *devs) {
    EXPECT_EQ(d.memory_in_use, 0) << d.name;
    EXPECT_EQ(d.memory_peak, 0) << d.name;
    EXPECT_GT(d.memory_bytes, 0) << d.name;
  }
  // An upload larger than the device: the message names the capacity, not the use.
  Raw raw((*b)->address());
  std::string session;
  ASSERT_TRUE(raw.open("bob-token-4567", &session).ok());
  grpc::ClientContext ctx;
  Raw::prepare(ctx, "bob-token-4567", session);
  v1::UploadHeader hd;
  hd.set_dtype(1);
  const int64_t n = (*devs)[0].memory_bytes / 4 + 1024;
  hd.add_shape(n);
  hd.set_total_bytes(n * 4);
  v1::BeginUploadResponse resp;
  grpc::Status s = raw.stub().BeginUpload(&ctx, hd, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_EQ(s.error_message().find("in use"), std::string::npos) << s.error_message();
  EXPECT_EQ(s.error_message().find(std::to_string(4 << 20)), std::string::npos) << s.error_message();
  // Alice's bytes are still hers and intact.
  auto back = (*alice)->read(*h);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->to_double_vector()[12345], 2.0);
  expect_alive((*b)->address(), "bob-token-4567");
}

}  // namespace
}  // namespace tensord
