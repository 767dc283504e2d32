// Named models (`tensord serve --models DIR`): loaded once by a real broker process from a
// folder of real ONNX files (tests/rpc/make_named_models.py, /usr/bin/python3 + python3-onnx;
// the tests skip, saying so, where those are missing), shared by every session, run by name.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "broker_process.h"
#include "core/errors.h"
#include "core/npy.h"
#include "rpc/remote_client.h"
#include "script_models.h"
#include "tensord/client.h"
#include "tensord/tensor.h"

namespace tensord {
namespace {

using testing::BrokerOptions;
using testing::BrokerProcess;

using testing::ScriptModels;

#define REQUIRE_MODELS() REQUIRE_SCRIPT_MODELS(models, "make_named_models.py")

Result<std::unique_ptr<BrokerProcess>> start(const ScriptModels& models,
                                             std::vector<std::string> extra = {}) {
  BrokerOptions o;
  o.args = {"--models", models.dir};
  o.args.insert(o.args.end(), extra.begin(), extra.end());
  o.cpu_devices = 2;  // add/config.json puts its model on cpu:1
  return BrokerProcess::start(o);
}

Result<std::unique_ptr<rpc::RemoteClient>> connect(const std::string& address) {
  rpc::RemoteClientOptions o;
  o.transport = "grpc";  // the memory measured is the broker's own, not a shared region's
  return rpc::RemoteClient::connect(address, o);
}

// Resident memory of a process, in bytes (/proc/PID/status VmRSS).
int64_t rss_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
  return -1;
}

int64_t memory_in_use(Client& c) {
  auto d = c.devices();
  int64_t n = 0;
  if (d.ok())
    for (const auto& x : *d) n += x.memory_in_use;
  return n;
}

// Runs the mlp model on x.npy, compares with y.npy (NumPy's float64 result, rounded).
void expect_mlp_runs(Client& c, ModelHandle m, const ScriptModels& models, const char* who) {
  auto x = read_npy(models.path("mlp/x.npy"));
  auto want = read_npy(models.path("mlp/y.npy"));
  ASSERT_TRUE(x.ok() && want.ok());
  auto in = c.upload(x->view(), "");
  ASSERT_TRUE(in.ok()) << who << ": " << in.status().to_string();
  auto out = c.run(m, {*in});
  ASSERT_TRUE(out.ok()) << who << ": " << out.status().to_string();
  ASSERT_EQ(out->size(), 1u);
  auto y = c.read((*out)[0]);
  ASSERT_TRUE(y.ok()) << who << ": " << y.status().to_string();
  ASSERT_EQ(y->shape(), (Shape{2, 4})) << who;
  const auto got = y->to_double_vector(), exp = want->to_double_vector();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], exp[i], 1e-4) << who << " [" << i << "]";
  (void)c.release(*in);
  (void)c.release((*out)[0]);
}

// Two clients open the same named model and get correct outputs; the second open adds neither
// the weights to the broker's memory (resident memory, device memory in use) nor anything to
// its session's quota: the session limit is below the weights, which a per-session load of
// the same file runs into.
TEST(NamedModels, TwoClientsShareOneCopyOfTheWeights) {
  REQUIRE_MODELS();
  const int64_t session_limit = 8 << 20;  // below the mlp's 16 MiB of weights
  auto b = start(models, {"--session-memory-limit", std::to_string(session_limit)});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto a = connect((*b)->address());
  ASSERT_TRUE(a.ok()) << a.status().to_string();

  ModelInfo info;
  auto ma = (*a)->open_model("mlp", &info);
  ASSERT_TRUE(ma.ok()) << ma.status().to_string();
  EXPECT_EQ(info.name, "mlp");
  EXPECT_TRUE(info.ready);
  EXPECT_EQ(info.device, "cpu:0");
  const int64_t weights = info.weight_bytes;
  EXPECT_EQ(weights, (1024 * 4096 + 4096 * 4) * 4);
  ASSERT_EQ(info.inputs.size(), 1u);
  EXPECT_EQ(info.inputs[0].name, "X");
  EXPECT_EQ(info.inputs[0].type.shape, (Shape{-1, 1024}));
  ASSERT_EQ(info.outputs.size(), 1u);
  EXPECT_EQ(info.outputs[0].name, "Y");
  EXPECT_EQ(info.opset, 17);
  EXPECT_EQ(info.producer, "make_named_models.py 1");
  expect_mlp_runs(**a, *ma, models, "client A");

  // Settled after A's first run (compiled, pools warm): the baseline.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int64_t rss_before = rss_bytes((*b)->pid());
  const int64_t dev_before = memory_in_use(**a);
  ASSERT_GT(rss_before, 0);

  auto c2 = connect((*b)->address());
  ASSERT_TRUE(c2.ok()) << c2.status().to_string();
  auto mb = (*c2)->open_model("mlp");
  ASSERT_TRUE(mb.ok()) << mb.status().to_string();
  expect_mlp_runs(**c2, *mb, models, "client B");
  expect_mlp_runs(**a, *ma, models, "client A again");

  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int64_t rss_after = rss_bytes((*b)->pid());
  const int64_t dev_after = memory_in_use(**c2);
  std::cerr << "[ named ] weights " << weights << " bytes; broker RSS " << rss_before << " -> "
            << rss_after << " (" << (rss_after - rss_before) << "); device memory in use "
            << dev_before << " -> " << dev_after << "\n";
  // Not in a sanitizer build: a second client's connection starts gRPC threads, and under
  // ThreadSanitizer each brings megabytes of shadow and per-thread state (the broker's RSS grew
  // 36 MiB there, against 16 MiB of weights); device memory in use is still checked.
  if (!testing::kSanitizedBuild) {
    EXPECT_LT(rss_after - rss_before, weights / 2)
        << "the broker's memory grew by about the weights when a second session opened the model";
  }
  EXPECT_LT(dev_after - dev_before, weights / 2);

  // The same file loaded per session counts against the session: over its 8 MiB limit.
  std::ifstream in(models.path("mlp/model.onnx"), std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  auto own = (*c2)->load_onnx(bytes.str(), "");
  ASSERT_FALSE(own.ok()) << "a per-session load of 16 MiB of weights fit in an 8 MiB session";
  EXPECT_EQ(own.status().code(), StatusCode::kResourceExhausted) << own.status().to_string();

  // Outputs belong to the session that ran the model: the other session cannot read them.
  auto x = read_npy(models.path("mlp/x.npy"));
  ASSERT_TRUE(x.ok());
  auto xin = (*a)->upload(x->view(), "");
  ASSERT_TRUE(xin.ok());
  auto out = (*a)->run(*ma, {*xin});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_TRUE((*a)->wait((*out)[0]).ok());
  EXPECT_EQ((*c2)->read((*out)[0]).status().code(), StatusCode::kNotFound);

  // Unload closes one session's handle: the other's still runs, and the name opens again.
  ASSERT_TRUE((*a)->unload(*ma).ok());
  EXPECT_EQ((*a)->run(*ma, {*xin}).status().code(), StatusCode::kNotFound);
  expect_mlp_runs(**c2, *mb, models, "client B after A unloaded");
  auto again = (*a)->open_model("mlp");
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  expect_mlp_runs(**a, *again, models, "client A reopened");
}

// The folder's models as the broker lists them: the corrupt one is there, not ready, with the
// reason (paths relative to the folder); the others loaded, each on its configured device.
TEST(NamedModels, ListShowsEveryModelAndWhyOneIsUnavailable) {
  REQUIRE_MODELS();
  auto b = start(models);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto c = connect((*b)->address());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto list = (*c)->list_models();
  ASSERT_TRUE(list.ok()) << list.status().to_string();
  ASSERT_EQ(list->size(), 3u) << "README.txt is not a model";
  const ModelInfo& add = (*list)[0];
  const ModelInfo& broken = (*list)[1];
  const ModelInfo& mlp = (*list)[2];
  EXPECT_EQ(add.name, "add");
  EXPECT_TRUE(add.ready) << add.reason;
  EXPECT_EQ(add.device, "cpu:1") << "add/config.json names cpu:1";
  EXPECT_EQ(add.weight_bytes, 16);
  EXPECT_EQ(broken.name, "broken");
  EXPECT_FALSE(broken.ready);
  EXPECT_NE(broken.reason.find("broken/model.onnx"), std::string::npos) << broken.reason;
  EXPECT_NE(broken.reason.find("not a valid ONNX model"), std::string::npos) << broken.reason;
  EXPECT_EQ(broken.reason.find(models.dir), std::string::npos)
      << "the broker's folder is not the clients' business: " << broken.reason;
  EXPECT_EQ(mlp.name, "mlp");
  EXPECT_TRUE(mlp.ready) << mlp.reason;

  // The small model runs on its device, from a session.
  auto m = (*c)->open_model("add");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const float xs[4] = {10, 20, 30, 40};
  auto x = (*c)->upload(TensorView{DType::kFloat32, {4}, xs}, "");
  ASSERT_TRUE(x.ok());
  auto y = (*c)->run(*m, {*x});
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  auto info = (*c)->info((*y)[0]);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->device, "cpu:1");
  auto v = (*c)->read((*y)[0]);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->to_double_vector(), (std::vector<double>{11, 22, 33, 44}));

  // The measure of TwoClientsShareOneCopyOfTheWeights, against the per-session form: the same
  // file loaded by more sessions is held once more by each (the broker's resident memory
  // grows by about the weights per load; some of it may reuse memory the broker freed
  // before — the file read at start, the first load's staging — hence three loads).
  std::ifstream in(models.path("mlp/model.onnx"), std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  auto l1 = (*c)->load_onnx(bytes.str(), "");
  ASSERT_TRUE(l1.ok()) << l1.status().to_string();
  expect_mlp_runs(**c, l1->handle, models, "per-session load 1");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int64_t rss_before = rss_bytes((*b)->pid());
  std::vector<std::unique_ptr<rpc::RemoteClient>> others;
  for (int i = 0; i < 3; ++i) {
    auto o = connect((*b)->address());
    ASSERT_TRUE(o.ok());
    auto l = (*o)->load_onnx(bytes.str(), "");
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    expect_mlp_runs(**o, l->handle, models, "per-session load");
    others.push_back(std::move(o).value());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int64_t rss_after = rss_bytes((*b)->pid());
  std::cerr << "[ per-session ] weights " << mlp.weight_bytes << " bytes; broker RSS "
            << rss_before << " -> " << rss_after << " (" << (rss_after - rss_before)
            << ") for 3 more sessions loading the file\n";
  EXPECT_GT(rss_after - rss_before, mlp.weight_bytes)
      << "three more per-session loads did not show in the broker's memory: the measure of "
         "the named-model test would not see a copy per session either";
}

// An unknown name is NOT_FOUND naming it and listing the models there are; the unavailable
// one is FAILED_PRECONDITION with its reason.
TEST(NamedModels, UnknownNameIsNotFoundAndBrokenOneSaysWhy) {
  REQUIRE_MODELS();
  auto b = start(models);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto c = connect((*b)->address());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto m = (*c)->open_model("resnet50");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound) << m.status().to_string();
  for (const char* word : {"'resnet50'", "'add'", "'mlp'"})
    EXPECT_NE(m.status().message().find(word), std::string::npos)
        << word << " not in: " << m.status().message();
  auto broken = (*c)->open_model("broken");
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().code(), StatusCode::kFailedPrecondition)
      << broken.status().to_string();
  EXPECT_NE(broken.status().message().find("not a valid ONNX model"), std::string::npos)
      << broken.status().message();
  // A broker without --models: NOT_FOUND saying how to get named models.
  BrokerOptions o;
  auto plain = BrokerProcess::start(o);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  auto c2 = connect((*plain)->address());
  ASSERT_TRUE(c2.ok());
  auto none = (*c2)->open_model("mlp");
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("--models"), std::string::npos)
      << none.status().message();
  auto empty = (*c2)->list_models();
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  EXPECT_TRUE(empty->empty());
}

// `tensord serve` with its output: the startup lines until it serves (or exits), then stopped.
struct ServeRun {
  std::string output;
  int exit_code = -1;  // -1: it was serving (and was stopped)
};
ServeRun run_serve(std::vector<std::string> args) {
  ServeRun r;
  int fds[2];
  if (pipe(fds) != 0) return r;
  const std::string dir = (std::filesystem::temp_directory_path() / "tensord-serve.XXXXXX").string();
  std::string d = dir;
  if (!mkdtemp(d.data())) return r;
  args.insert(args.begin(), {TENSORD_CLI_PATH, "serve", "--listen", "unix:" + d + "/s.sock"});
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    setenv("TENSORD_CPU_DEVICES", "2", 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline &&
         r.output.find("tensord serving on") == std::string::npos) {
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    r.output.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  if (r.output.find("tensord serving on") != std::string::npos) {
    kill(pid, SIGTERM);
    waitpid(pid, &status, 0);
  } else {
    waitpid(pid, &status, 0);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  close(fds[0]);
  std::error_code ec;
  std::filesystem::remove_all(d, ec);
  return r;
}

// The broker reports each model as it starts, the corrupt one with its reason, and serves
// the others; a --models folder that does not exist stops it (exit 2) naming the folder.
TEST(NamedModels, StartupReportsEachModelAndAMissingFolderStopsTheBroker) {
  REQUIRE_MODELS();
  ServeRun ok = run_serve({"--models", models.dir});
  EXPECT_EQ(ok.exit_code, -1) << ok.output;
  for (const char* line : {"model 'mlp' ready on cpu:0", "model 'add' ready on cpu:1",
                           "model 'broken' UNAVAILABLE: broken/model.onnx",
                           "2 ready, 1 unavailable"})
    EXPECT_NE(ok.output.find(line), std::string::npos) << "'" << line << "' not in:\n" << ok.output;
  ServeRun missing = run_serve({"--models", models.dir + "/no-such-folder"});
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("no-such-folder' does not exist"), std::string::npos)
      << missing.output;
}

// The embedded engine: models_dir (or TENSORD_MODELS) loads the folder into the engine once;
// two clients of the process-wide engine share it.
TEST(NamedModels, EmbeddedClientsOpenModelsFromTheFolder) {
  REQUIRE_MODELS();
  LocalClientOptions o;
  o.models_dir = models.dir;
  auto a = make_local_client(o);
  auto b = make_local_client(o);
  ASSERT_TRUE(a.ok() && b.ok());
  auto ma = (*a)->open_model("mlp");
  ASSERT_TRUE(ma.ok()) << ma.status().to_string();
  auto mb = (*b)->open_model("mlp");
  ASSERT_TRUE(mb.ok()) << mb.status().to_string();
  expect_mlp_runs(**a, *ma, models, "embedded A");
  expect_mlp_runs(**b, *mb, models, "embedded B");
  auto list = (*b)->list_models();
  ASSERT_TRUE(list.ok()) << list.status().to_string();
  ASSERT_EQ(list->size(), 3u) << "the folder was loaded once, not per client";
  EXPECT_FALSE((*list)[1].ready);
  auto unknown = (*a)->open_model("nope");
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("'mlp'"), std::string::npos);
  LocalClientOptions bad;
  bad.models_dir = models.dir + "/no-such-folder";
  auto c = make_local_client(bad);
  ASSERT_TRUE(c.ok());
  auto m = (*c)->open_model("mlp");
  EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition) << m.status().to_string();
  EXPECT_NE(m.status().message().find("no-such-folder"), std::string::npos);
}


// Issue 27, finding 6: one tenant compiling a named model for many batch sizes. Before: 63
// forms left every other tenant RESOURCE_EXHAUSTED on a new batch size until restart, and
// 64 forms took the broker's RSS from 161 to 1,203 MiB, charged to nobody. Now each tenant
// keeps at most 16 forms of a model (its least recently used go first), charged to it, and
// they go when its last session closes: the other tenant compiles a new batch size, and the
// broker's memory stays bounded and comes back.
TEST(NamedModels, ManyBatchSizesOfOneTenantNeitherBlockAnotherNorGrowWithoutBound) {
  REQUIRE_MODELS();
  std::string t = (std::filesystem::temp_directory_path() / "tensord-forms.XXXXXX").string();
  ASSERT_NE(mkdtemp(t.data()), nullptr);
  const std::string tokens = t + "/tokens";
  std::ofstream(tokens) << "alice:alice-token-0123\nbob:bob-token-4567\ncarol:carol-token-89\n";
  chmod(tokens.c_str(), 0600);  // tokens are secrets: the broker refuses a file others can read
  auto b = start(models, {"--token-file", tokens, "--tenant-memory-limit",
                          std::to_string(int64_t{1} << 30)});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto as = [&](const char* token) {
    rpc::RemoteClientOptions o;
    o.transport = "grpc";
    o.token = token;
    return rpc::RemoteClient::connect((*b)->address(), o);
  };
  // Runs the mlp with a batch of `n`; the status (and the output's shape checked).
  auto run_batch = [](Client& c, ModelHandle m, int64_t n) -> Status {
    std::vector<float> x(static_cast<size_t>(n * 1024), 0.01f);
    HostTensor xt = HostTensor::from_vector<float>(x, {n, 1024});
    TD_ASSIGN_OR_RETURN(TensorHandle in, c.upload(xt.view(), ""));
    auto out = c.run(m, {in});
    (void)c.release(in);
    if (!out.ok()) return out.status();
    auto y = c.read((*out)[0]);
    (void)c.release((*out)[0]);
    if (!y.ok()) return y.status();
    if (y->shape() != Shape{n, 4}) return errors::Internal("shape {}", shape_to_string(y->shape()));
    return OkStatus();
  };
  auto bob = as("bob-token-4567");
  ASSERT_TRUE(bob.ok()) << bob.status().to_string();
  auto mb = (*bob)->open_model("mlp");
  ASSERT_TRUE(mb.ok()) << mb.status().to_string();
  ASSERT_TRUE(run_batch(**bob, *mb, 2).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int64_t baseline = rss_bytes((*b)->pid());
  int64_t peak = baseline;
  {
    auto alice = as("alice-token-0123");
    ASSERT_TRUE(alice.ok()) << alice.status().to_string();
    auto ma = (*alice)->open_model("mlp");
    ASSERT_TRUE(ma.ok()) << ma.status().to_string();
    for (int64_t n = 1; n <= 64; ++n) {
      Status st = run_batch(**alice, *ma, n);
      ASSERT_TRUE(st.ok()) << "alice, batch " << n << ": " << st.to_string();
      peak = std::max(peak, rss_bytes((*b)->pid()));
    }
    // Another tenant compiles a batch size nobody has used (before: RESOURCE_EXHAUSTED), and
    // bob's old one still runs.
    {
      auto carol = as("carol-token-89");
      ASSERT_TRUE(carol.ok()) << carol.status().to_string();
      auto mc = (*carol)->open_model("mlp");
      ASSERT_TRUE(mc.ok()) << mc.status().to_string();
      Status st = run_batch(**carol, *mc, 65);
      EXPECT_TRUE(st.ok()) << "carol, a new batch size after alice's 64: " << st.to_string();
    }
    EXPECT_TRUE(run_batch(**bob, *mb, 2).ok());
    // Alice's recent forms are still there (and her oldest compile again on demand).
    EXPECT_TRUE(run_batch(**alice, *ma, 64).ok());
    EXPECT_TRUE(run_batch(**alice, *ma, 1).ok());
    peak = std::max(peak, rss_bytes((*b)->pid()));
  }  // alice's last session closes: her forms go
  int64_t after = 0;
  // The close is asynchronous to the client's return; the devices' pools give back what
  // they cache after 10 s without a call.
  for (int i = 0; i < 200; ++i) {
    after = rss_bytes((*b)->pid());
    if (after <= baseline + baseline / 10) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::cerr << "[ figures ] 64 batch sizes of the mlp (16 MiB of weights) by one tenant: broker "
               "RSS "
            << baseline / 1048576 << " MiB -> peak " << peak / 1048576 << " MiB, "
            << after / 1048576 << " MiB after its session closed\n";
  // 16 forms of about 16 MiB of prepared weights each, not 64.
  if (!testing::kSanitizedBuild) {
    EXPECT_LT(peak - baseline, int64_t{480} << 20);
  }
  // Alice's 16 forms (about 16 MiB of prepared weights each) went back, and so did the blocks
  // her runs left in the cpu device's caching allocator (before: 30-40 MiB stayed for good,
  // 83-99 -> 122-124 MiB; now 76-95 MiB from 81-98 once the broker was idle 10 s, and up to
  // 12 MiB over an 83 MiB baseline under ctest -j2: heap fragmentation malloc_trim cannot
  // return). Bound: 10% or 24 MiB, whichever is larger.
  if (!testing::kSanitizedBuild) {
    EXPECT_LE(after, baseline + std::max<int64_t>(baseline / 10, int64_t{24} << 20));
  }
  EXPECT_TRUE(run_batch(**bob, *mb, 66).ok());
  std::error_code ec;
  std::filesystem::remove_all(t, ec);
}

}  // namespace
}  // namespace tensord
