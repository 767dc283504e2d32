// Model control (`tensord serve --models DIR --model-control`; LoadNamedModel /
// UnloadNamedModel; `tensord models load|unload|list`) against a real broker process and real
// ONNX files (tests/rpc/make_batch_models.py's adders: Y = X + 1 and Y = X + 2). Each test has a
// models folder of its own, which it changes while the broker serves.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "broker_process.h"
#include "core/errors.h"
#include "rpc/remote_client.h"
#include "script_models.h"
#include "tensord/client.h"
#include "tensord/tensor.h"

namespace tensord {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using testing::BrokerOptions;
using testing::BrokerProcess;
using testing::ScriptModels;

// A models folder the test changes: DIR/adder/model.onnx (X + k) with a batching config.
struct LiveFolder {
  std::string source, root, dir;
  explicit LiveFolder(const ScriptModels& src) : source(src.dir) {
    root = (fs::temp_directory_path() / "tensord-live.XXXXXX").string();
    if (!mkdtemp(root.data())) return;
    dir = root + "/models";
    fs::create_directories(dir + "/adder");
    put_adder(1);
    std::ofstream(dir + "/adder/config.json")
        << R"({"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 500000}})";
  }
  ~LiveFolder() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  // DIR/adder/model.onnx := the adder of k (1 or 2).
  void put_adder(int k) const {
    const std::string from = source + "/vm/" + std::to_string(k) + "/model.onnx";
    fs::copy_file(from, dir + "/adder/model.onnx", fs::copy_options::overwrite_existing);
  }
};

#define REQUIRE_MODELS() REQUIRE_SCRIPT_MODELS(source, "make_batch_models.py")

Result<std::unique_ptr<BrokerProcess>> start(const std::string& dir,
                                             std::vector<std::string> extra = {"--model-control"}) {
  BrokerOptions o;
  o.args = {"--models", dir};
  o.args.insert(o.args.end(), extra.begin(), extra.end());
  o.ready_timeout = milliseconds(60000);
  return BrokerProcess::start(o);
}

Result<std::unique_ptr<rpc::RemoteClient>> connect(const std::string& address,
                                                   const std::string& token = "") {
  rpc::RemoteClientOptions o;
  o.call_timeout = milliseconds(60000);
  o.token = token;
  return rpc::RemoteClient::connect(address, o);
}

rpc::RemoteClientOptions with_token(const std::string& token) {
  rpc::RemoteClientOptions o;
  o.token = token;
  return o;
}

const HostTensor& x() {
  static const HostTensor t = HostTensor::from_vector<float>({0.5f, -1.0f, 2.0f, 3.25f}, {1, 4});
  return t;
}

// Runs `model` (a handle of c's) on x(); the first element of the output minus x's: the k
// of the adder that ran (NaN on failure, with the status in `why`).
float added(Client& c, ModelHandle model, Status* why = nullptr) {
  auto in = c.upload(x().view(), "");
  if (!in.ok()) {
    if (why) *why = in.status();
    return NAN;
  }
  auto out = c.run(model, {*in});
  (void)c.release(*in);
  if (!out.ok()) {
    if (why) *why = out.status();
    return NAN;
  }
  auto y = c.read(out->at(0));
  for (TensorHandle h : *out) (void)c.release(h);
  if (!y.ok()) {
    if (why) *why = y.status();
    return NAN;
  }
  return y->data<float>()[0] - x().data<float>()[0];
}

// Opens `name` in a fresh session and runs it once.
float added_fresh(const std::string& address, const std::string& name, Status* why = nullptr) {
  auto c = connect(address);
  if (!c.ok()) {
    if (why) *why = c.status();
    return NAN;
  }
  auto m = (*c)->open_model(name);
  if (!m.ok()) {
    if (why) *why = m.status();
    return NAN;
  }
  return added(**c, *m, why);
}

TEST(ModelControl, LoadReloadAndUnloadWhileServing) {
  REQUIRE_MODELS();
  LiveFolder live(source);
  auto b = start(live.dir);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const std::string addr = (*b)->address();
  auto a = connect(addr);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto old_handle = (*a)->open_model("adder");
  ASSERT_TRUE(old_handle.ok()) << old_handle.status().to_string();
  EXPECT_EQ(added(**a, *old_handle), 1.0f);

  // Reload: the new file serves new opens; the handle opened before runs what it opened.
  live.put_adder(2);
  auto loaded = rpc::control_model(addr, rpc::ModelControl::kLoad, "adder");
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_EQ((*loaded)[0].name, "adder");
  EXPECT_TRUE((*loaded)[0].ready);
  EXPECT_EQ(added_fresh(addr, "adder"), 2.0f);
  EXPECT_EQ(added(**a, *old_handle), 1.0f);

  // A new folder, loaded while serving.
  fs::create_directories(live.dir + "/fresh/1");
  fs::copy_file(source.dir + "/vm/1/model.onnx", live.dir + "/fresh/1/model.onnx");
  auto fresh = rpc::control_model(addr, rpc::ModelControl::kLoad, "fresh");
  ASSERT_TRUE(fresh.ok()) << fresh.status().to_string();
  EXPECT_EQ(fresh->size(), 2u);  // fresh and fresh:1
  EXPECT_EQ(added_fresh(addr, "fresh:1"), 1.0f);
  // A second version: "fresh" follows the newest.
  fs::create_directories(live.dir + "/fresh/2");
  fs::copy_file(source.dir + "/vm/2/model.onnx", live.dir + "/fresh/2/model.onnx");
  ASSERT_TRUE(rpc::control_model(addr, rpc::ModelControl::kLoad, "fresh").ok());
  EXPECT_EQ(added_fresh(addr, "fresh"), 2.0f);
  EXPECT_EQ(added_fresh(addr, "fresh:1"), 1.0f);
  // Version 1 taken out of the folder: a reload removes it.
  fs::remove_all(live.dir + "/fresh/1");
  ASSERT_TRUE(rpc::control_model(addr, rpc::ModelControl::kLoad, "fresh").ok());
  Status why;
  EXPECT_TRUE(std::isnan(added_fresh(addr, "fresh:1", &why)));
  EXPECT_EQ(why.code(), StatusCode::kNotFound) << why.to_string();

  // A reload that fails leaves the loaded model serving, and says why.
  std::ofstream(live.dir + "/adder/model.onnx", std::ios::trunc) << "not an onnx file";
  auto bad = rpc::control_model(addr, rpc::ModelControl::kLoad, "adder");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("the loaded model stays"), std::string::npos)
      << bad.status().to_string();
  EXPECT_EQ(bad.status().message().find(live.dir), std::string::npos)  // no broker paths
      << bad.status().to_string();
  // ... batching as before: a lone request still waits out the queue delay (0.5 s) for others.
  const auto before_run = std::chrono::steady_clock::now();
  EXPECT_EQ(added_fresh(addr, "adder"), 2.0f);
  EXPECT_GE(std::chrono::steady_clock::now() - before_run, milliseconds(400))
      << "the failed reload dropped the model's batching configuration";
  live.put_adder(2);

  // Unload: new opens fail naming the model; handles opened before still run.
  auto b_client = connect(addr);
  ASSERT_TRUE(b_client.ok());
  auto new_handle = (*b_client)->open_model("adder");
  ASSERT_TRUE(new_handle.ok());
  auto gone = rpc::control_model(addr, rpc::ModelControl::kUnload, "adder");
  ASSERT_TRUE(gone.ok()) << gone.status().to_string();
  EXPECT_TRUE(gone->empty());
  EXPECT_TRUE(std::isnan(added_fresh(addr, "adder", &why)));
  EXPECT_EQ(why.code(), StatusCode::kNotFound) << why.to_string();
  EXPECT_EQ(added(**a, *old_handle), 1.0f);
  EXPECT_EQ(added(**b_client, *new_handle), 2.0f);
  auto list = rpc::control_model(addr, rpc::ModelControl::kList);
  ASSERT_TRUE(list.ok());
  for (const ModelInfo& m : *list) EXPECT_NE(m.name, "adder");
  auto again = rpc::control_model(addr, rpc::ModelControl::kUnload, "adder");
  EXPECT_EQ(again.status().code(), StatusCode::kNotFound) << again.status().to_string();
  // And back.
  ASSERT_TRUE(rpc::control_model(addr, rpc::ModelControl::kLoad, "adder").ok());
  EXPECT_EQ(added_fresh(addr, "adder"), 2.0f);

  // Names that are not a folder of DIR.
  for (const char* name : {"../models/adder", "", ".hidden", "a/b", "adder:1"}) {
    auto r = rpc::control_model(addr, rpc::ModelControl::kLoad, name);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << name << ": "
                                                               << r.status().to_string();
  }
  auto none = rpc::control_model(addr, rpc::ModelControl::kLoad, "nosuch");
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound) << none.status().to_string();
  // The broker is still whole.
  EXPECT_EQ(added_fresh(addr, "fresh"), 2.0f);
}

// Reloads leave nothing behind: a retired batcher's worker threads are joined and its model
// freed once its last request has gone (unjoined, each thread kept its stack mapped: 8 MiB of
// address space per reload, and its model's memory).
TEST(ModelControl, ReloadsDoNotAccumulate) {
  REQUIRE_MODELS();
  LiveFolder live(source);
  auto b = start(live.dir);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const std::string addr = (*b)->address();
  auto reload_and_run = [&](int i) {
    live.put_adder(1 + i % 2);
    auto r = rpc::control_model(addr, rpc::ModelControl::kLoad, "adder");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    Status why;
    EXPECT_EQ(added_fresh(addr, "adder", &why), 1.0f + i % 2) << "reload " << i << ": "
                                                              << why.to_string();
  };
  for (int i = 0; i < 3; ++i) reload_and_run(i);
  const int64_t before = testing::proc_status_bytes((*b)->pid(), "VmSize");
  constexpr int kReloads = 12;
  for (int i = 3; i < 3 + kReloads; ++i) reload_and_run(i);
  const int64_t after = testing::proc_status_bytes((*b)->pid(), "VmSize");
  std::cerr << "[ reloads ] broker VmSize " << (before >> 20) << " MiB -> " << (after >> 20)
            << " MiB over " << kReloads << " reloads\n";
  ASSERT_GT(before, 0);
  EXPECT_LT(after - before, int64_t{kReloads} * (8 << 20) / 2)
      << "each reload kept a worker thread's stack";
}

// Requests queued for a batch when their model is reloaded or unloaded finish, on the model
// they were sent to; later opens see the change.
TEST(ModelControl, InFlightRequestsFinishOnTheOldModel) {
  REQUIRE_MODELS();
  LiveFolder live(source);
  auto b = start(live.dir);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const std::string addr = (*b)->address();
  for (rpc::ModelControl op : {rpc::ModelControl::kLoad, rpc::ModelControl::kUnload}) {
    live.put_adder(1);
    ASSERT_TRUE(rpc::control_model(addr, rpc::ModelControl::kLoad, "adder").ok());
    constexpr int kClients = 4;
    std::atomic<int> opened{0};
    std::vector<float> got(kClients, NAN);
    std::vector<Status> why(kClients);
    std::vector<std::thread> threads;
    for (int i = 0; i < kClients; ++i)
      threads.emplace_back([&, i] {
        auto c = connect(addr);
        if (!c.ok()) {
          why[i] = c.status();
          opened++;
          return;
        }
        auto m = (*c)->open_model("adder");
        opened++;
        if (!m.ok()) {
          why[i] = m.status();
          return;
        }
        got[i] = added(**c, *m, &why[i]);  // queued: the batch waits up to 0.5 s for 8 rows
      });
    while (opened < kClients) std::this_thread::sleep_for(milliseconds(5));
    std::this_thread::sleep_for(milliseconds(150));
    live.put_adder(2);
    auto r = rpc::control_model(addr, op, "adder");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    for (auto& t : threads) t.join();
    for (int i = 0; i < kClients; ++i)
      EXPECT_EQ(got[i], 1.0f) << (op == rpc::ModelControl::kLoad ? "reload" : "unload")
                              << ", client " << i << ": " << why[i].to_string();
    Status after;
    const float now = added_fresh(addr, "adder", &after);
    if (op == rpc::ModelControl::kLoad)
      EXPECT_EQ(now, 2.0f) << after.to_string();
    else
      EXPECT_EQ(after.code(), StatusCode::kNotFound) << after.to_string();
  }
}

TEST(ModelControl, RefusedWithoutTheFlagOrAnOperatorsToken) {
  REQUIRE_MODELS();
  LiveFolder live(source);
  {
    auto b = start(live.dir, {});
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    auto r = rpc::control_model((*b)->address(), rpc::ModelControl::kLoad, "adder");
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().to_string();
    EXPECT_NE(r.status().message().find("--model-control"), std::string::npos)
        << r.status().to_string();
    // Listing needs no control.
    auto list = rpc::control_model((*b)->address(), rpc::ModelControl::kList);
    ASSERT_TRUE(list.ok()) << list.status().to_string();
    EXPECT_EQ(list->size(), 1u);
  }
  const std::string tokens = live.root + "/tokens";
  std::ofstream(tokens) << "alice:alice-token-0123\noperator ops:ops-token-456789\n";
  chmod(tokens.c_str(), 0600);
  auto b = start(live.dir, {"--model-control", "--token-file", tokens});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const std::string addr = (*b)->address();
  auto tenant = rpc::control_model(addr, rpc::ModelControl::kUnload, "adder",
                                   with_token("alice-token-0123"));
  EXPECT_EQ(tenant.status().code(), StatusCode::kPermissionDenied) << tenant.status().to_string();
  EXPECT_NE(tenant.status().message().find("alice"), std::string::npos);
  auto nobody = rpc::control_model(addr, rpc::ModelControl::kUnload, "adder",
                                   with_token("wrong-token-000000"));
  EXPECT_EQ(nobody.status().code(), StatusCode::kUnauthenticated) << nobody.status().to_string();
  auto c = connect(addr, "alice-token-0123");
  ASSERT_TRUE(c.ok());
  auto m = (*c)->open_model("adder");
  ASSERT_TRUE(m.ok()) << m.status().to_string();  // refused calls left it loaded
  auto op = rpc::control_model(addr, rpc::ModelControl::kLoad, "adder",
                               with_token("ops-token-456789"));
  ASSERT_TRUE(op.ok()) << op.status().to_string();
  EXPECT_EQ(added(**c, *m), 1.0f);
}

// `tensord models list|load|unload` as an operator types it.
TEST(ModelControl, TheCommandLoadsListsAndUnloads) {
  REQUIRE_MODELS();
  LiveFolder live(source);
  auto b = start(live.dir);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto cli = [&](const std::string& args, int* rc) {
    const std::string cmd = std::string(TENSORD_CLI_PATH) + " models " + args + " --address " +
                            (*b)->address() + " 2>&1";
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    char buf[4096];
    for (size_t n; p && (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    *rc = p ? WEXITSTATUS(pclose(p)) : -1;
    return out;
  };
  int rc = -1;
  std::string out = cli("list", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("adder  ready on cpu:0"), std::string::npos) << out;
  out = cli("unload adder", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("unloaded 'adder'"), std::string::npos) << out;
  out = cli("unload adder", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("no model named 'adder' is loaded"), std::string::npos) << out;
  out = cli("load adder --json", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"ready\": true"), std::string::npos) << out;
  out = cli("load", &rc);
  EXPECT_EQ(rc, 2) << out;
}

}  // namespace
}  // namespace tensord
