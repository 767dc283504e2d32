// Dynamic batching of named models (src/rpc/batcher.h) and their config.json
// (src/client/model_repository.h), against a real `tensord serve --models DIR --http 0` and
// real ONNX files (tests/rpc/make_batch_models.py; /usr/bin/python3 + python3-onnx, the tests
// skip saying so where those are missing). Batches are counted from /metrics
// (tensord_model_*). No timed assertions: delays only make batches likely; what is asserted
// is what must hold however the requests arrive, except that some batch forms when 8 requests
// wait under a 1 s delay.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
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

using std::chrono::milliseconds;
using testing::BrokerOptions;
using testing::BrokerProcess;

using testing::ScriptModels;

#define REQUIRE_MODELS() REQUIRE_SCRIPT_MODELS(models, "make_batch_models.py")

struct Broker {
  std::unique_ptr<BrokerProcess> process;
  std::string host;
  int port = 0;
  std::string address() const { return process->address(); }
  std::string metrics() const {
    httplib::Client c(host, port);
    c.set_connection_timeout(5);
    c.set_read_timeout(10);
    auto r = c.Get("/metrics");
    return r && r->status == 200 ? r->body : std::string();
  }
  // tensord_model_<family>{model="NAME",version="V"} (0 when absent).
  double metric(const std::string& family, const std::string& model,
                const std::string& version = "") const {
    const std::string key =
        "tensord_model_" + family + "{model=\"" + model + "\",version=\"" + version + "\"} ";
    std::istringstream in(metrics());
    for (std::string line; std::getline(in, line);)
      if (line.rfind(key, 0) == 0) return std::atof(line.c_str() + key.size());
    return 0;
  }
};

Result<Broker> start(const ScriptModels& models) {
  BrokerOptions o;
  o.args = {"--models", models.dir, "--http", "0"};
  o.cpu_devices = 2;  // multi_batched runs on cpu:0 and cpu:1
  o.ready_timeout = milliseconds(60000);
  auto b = BrokerProcess::start(o);
  if (!b.ok()) return b.status();
  auto http = (*b)->next_http_address(milliseconds(10000));
  if (!http.ok()) return http.status();
  Broker out;
  out.host = http->host;
  out.port = http->port;
  out.process = std::move(b).value();
  return out;
}

Result<std::unique_ptr<rpc::RemoteClient>> connect(
    const std::string& address, milliseconds call_timeout = milliseconds(60000)) {
  rpc::RemoteClientOptions o;
  o.call_timeout = call_timeout;
  return rpc::RemoteClient::connect(address, o);
}

HostTensor input_for(int who, const Shape& shape) {
  HostTensor t(DType::kFloat32, shape);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = static_cast<float>(((i * 7 + who * 13) % 23) - 11) / 7.0f;
  return t;
}

// Runs `model` once in a session of its own; the first output.
Result<HostTensor> run_once(const std::string& address, const std::string& model,
                            const std::vector<HostTensor>& inputs,
                            milliseconds call_timeout = milliseconds(60000)) {
  TD_ASSIGN_OR_RETURN(auto c, connect(address, call_timeout));
  TD_ASSIGN_OR_RETURN(ModelHandle m, c->open_model(model));
  std::vector<TensorHandle> in;
  for (const HostTensor& t : inputs) {
    TD_ASSIGN_OR_RETURN(TensorHandle h, c->upload(t.view(), ""));
    in.push_back(h);
  }
  TD_ASSIGN_OR_RETURN(auto out, c->run(m, in));
  return c->read(out.at(0));
}

// The correctness criterion of the bench and the ONNX tests: |a - b| <= atol + rtol * |b|.
::testing::AssertionResult close(const HostTensor& a, const HostTensor& b, double rtol = 1e-5,
                                 double atol = 1e-6) {
  if (a.type() != b.type())
    return ::testing::AssertionFailure() << a.type().to_string() << " vs " << b.type().to_string();
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data<float>()[i], y = b.data<float>()[i];
    if (!(std::fabs(x - y) <= atol + rtol * std::fabs(y)))
      return ::testing::AssertionFailure() << "element " << i << ": " << x << " vs " << y;
  }
  return ::testing::AssertionSuccess();
}

// N sessions at once, each its own input: every output equals the unbatched model's output for
// that session's own input (so outputs went to the right session), and fewer runs than
// requests were made (batches formed).
void batches_match(const std::string& batched, const std::string& plain, const Shape& shape,
                   bool one_batch = true) {
  REQUIRE_MODELS();
  auto b = start(models);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  constexpr int kClients = 8;
  std::vector<HostTensor> want(kClients);
  for (int i = 0; i < kClients; ++i) {
    auto y = run_once(b->address(), plain, {input_for(i, shape)});
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    want[i] = std::move(*y);
  }
  // Distinct inputs give distinct outputs, or the routing check below would prove nothing.
  ASSERT_FALSE(close(want[0], want[1]));
  std::vector<Result<HostTensor>> got(kClients, Status(StatusCode::kUnknown, "not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back(
        [&, i] { got[i] = run_once(b->address(), batched, {input_for(i, shape)}); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().to_string();
    EXPECT_TRUE(close(*got[i], want[i])) << "client " << i;
  }
  const double requests = b->metric("requests_total", batched);
  const double runs = b->metric("batch_size_count", batched);
  const double rows = b->metric("batch_size_sum", batched);
  EXPECT_EQ(requests, kClients);
  EXPECT_EQ(rows, kClients);
  if (one_batch) EXPECT_LT(runs, kClients) << "no batch formed:\n" << b->metrics();
  EXPECT_EQ(b->metric("failures_total", batched), 0);
}

// A batched model's forms (one per batch size) are compiled when the broker starts, before it
// serves: the first batch of a size no longer compiles while every request waits (0.3-0.7 s a
// MobileNetV2 form under load, p99 about 1 s in `tensord bench serve`). mlp_batched and
// conv_batched take 8 sizes each: 16 compiles at least before any request.
TEST(Batching, BatchFormsAreCompiledBeforeTheBrokerServes) {
  REQUIRE_MODELS();
  auto b = start(models);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const std::string metrics = b->metrics();
  const std::string key = "tensord_executable_compiles_total ";
  const size_t at = metrics.find("\n" + key);
  ASSERT_NE(at, std::string::npos) << metrics.substr(0, 2000);
  EXPECT_GE(std::atof(metrics.c_str() + at + 1 + key.size()), 16.0);
  EXPECT_EQ(b->metric("requests_total", "mlp_batched"), 0) << "no request has come yet";
}

TEST(Batching, MlpBatchesFormAndEachSessionGetsItsOwnRows) {
  batches_match("mlp_batched", "mlp_plain", {1, 16});
}

TEST(Batching, ConvBatchesEqualUnbatchedRunsWithinTolerance) {
  batches_match("conv_batched", "conv_plain", {1, 3, 8, 8});
}

// Two devices, two instances each, preferred sizes, batches padded with zero rows (12 x 2
// devices is more sizes than the 16 forms a tenant keeps): whatever batches form, every
// session gets its own rows, and the padding is not counted.
// KServe v2 inference (HTTP/JSON) goes through the same runner as tensord's own Run calls: with
// dynamic batching in config.json, concurrent KServe requests form batches (counted), and each
// answer equals the unbatched model's run of its own input.
TEST(Batching, KServeRequestsAreBatchedAndEqualUnbatchedRuns) {
  REQUIRE_MODELS();
  auto b = start(models);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  constexpr int kClients = 8;
  const Shape shape{1, 16};
  std::vector<HostTensor> want(kClients);
  for (int i = 0; i < kClients; ++i) {
    auto y = run_once(b->address(), "mlp_plain", {input_for(i, shape)});
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    want[i] = std::move(*y);
  }
  ASSERT_FALSE(close(want[0], want[1]));
  {
    // One request from this thread first: cpp-httplib's function-local static regexes are
    // built then, before the client threads start (the library is not TSan-instrumented, so
    // their guarded first use from several threads reads as a race).
    httplib::Client warm(b->host, b->port);
    auto r = warm.Get("/v2/health/live");
    ASSERT_TRUE(r) << "GET /v2/health/live failed";
  }
  std::vector<std::string> errors(kClients);
  std::vector<HostTensor> got(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      const HostTensor x = input_for(i, shape);
      nlohmann::json body = {
          {"inputs",
           {{{"name", "X"},
             {"datatype", "FP32"},
             {"shape", {1, 16}},
             {"data", std::vector<float>(x.data<float>(), x.data<float>() + x.numel())}}}}};
      httplib::Client c(b->host, b->port);
      c.set_connection_timeout(5);
      c.set_read_timeout(60);
      auto r = c.Post("/v2/models/mlp_batched/infer", body.dump(), "application/json");
      if (!r || r->status != 200) {
        errors[i] = r ? std::to_string(r->status) + " " + r->body : std::string("no answer");
        return;
      }
      const nlohmann::json j = nlohmann::json::parse(r->body);
      const auto& out = j.at("outputs").at(0);
      Shape s;
      for (const auto& d : out.at("shape")) s.push_back(d.get<int64_t>());
      HostTensor y(DType::kFloat32, s);
      std::vector<float> data = out.at("data").get<std::vector<float>>();
      if (static_cast<int64_t>(data.size()) != y.numel()) {
        errors[i] = "output data has " + std::to_string(data.size()) + " values: " + r->body;
        return;
      }
      std::copy(data.begin(), data.end(), y.mutable_data<float>());
      got[i] = std::move(y);
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(errors[i].empty()) << "client " << i << ": " << errors[i];
    EXPECT_TRUE(close(got[i], want[i])) << "client " << i;
  }
  EXPECT_EQ(b->metric("requests_total", "mlp_batched"), kClients) << b->metrics();
  EXPECT_EQ(b->metric("batch_size_sum", "mlp_batched"), kClients);
  EXPECT_LT(b->metric("batch_size_count", "mlp_batched"), kClients)
      << "no batch formed:\n" << b->metrics();
  EXPECT_EQ(b->metric("failures_total", "mlp_batched"), 0);
}

TEST(Batching, InstancesOnTwoDevicesKeepEachSessionsRows) {
  batches_match("multi_batched", "mlp_plain", {1, 16}, /*one_batch=*/false);
}

// A request whose index is out of range fails at run time: its batch fails, each request is
// run again alone, and only the bad one fails.
TEST(Batching, BadRequestInABatchFailsAlone) {
  REQUIRE_MODELS();
  auto b = start(models);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  constexpr int kClients = 6, kBad = 3;
  std::vector<Result<HostTensor>> got(kClients, Status(StatusCode::kUnknown, "not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      HostTensor x = input_for(i, {1, 4});
      HostTensor idx(DType::kInt64, {1, 1});
      idx.mutable_data<int64_t>()[0] = i == kBad ? 99 : i % 4;
      got[i] = run_once(b->address(), "gather_batched", {x, idx});
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    if (i == kBad) {
      EXPECT_FALSE(got[i].ok()) << "an index of 99 into 4 columns ran";
      continue;
    }
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().to_string();
    EXPECT_EQ(got[i]->data<float>()[0], input_for(i, {1, 4}).data<float>()[i % 4]) << i;
  }
  EXPECT_EQ(b->metric("requests_total", "gather_batched"), kClients);
  EXPECT_EQ(b->metric("failures_total", "gather_batched"), 1);
}

// Non-batch dims that differ from the queue's: the request runs alone (and here fails alone,
// the model takes 16 columns), the others batch as usual.
TEST(Batching, DifferentShapeRunsAlone) {
  REQUIRE_MODELS();
  auto b = start(models);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  std::vector<Result<HostTensor>> got(4, Status(StatusCode::kUnknown, "not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      got[i] = run_once(b->address(), "mlp_batched", {input_for(i, {1, i == 0 ? 15 : 16})});
    });
  for (auto& t : threads) t.join();
  EXPECT_FALSE(got[0].ok());
  for (int i = 1; i < 4; ++i) EXPECT_TRUE(got[i].ok()) << i << ": " << got[i].status().to_string();
}

// A request whose call passes its deadline while queued (3 s delay) leaves the queue: it fails
// DEADLINE_EXCEEDED at once, the other request still gets its own output, and the cancelled
// one's rows are not in the batch.
TEST(Batching, CancelledRequestLeavesTheBatch) {
  REQUIRE_MODELS();
  auto b = start(models);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto want = run_once(b->address(), "mlp_plain", {input_for(1, {1, 16})});
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  Result<HostTensor> kept = Status(StatusCode::kUnknown, "not run");
  std::thread other([&] {
    kept = run_once(b->address(), "slow_batched", {input_for(1, {1, 16})});
  });
  // Connected and uploaded within a generous timeout; the run's deadline is 1 s.
  auto short_client = connect(b->address(), milliseconds(1000));
  ASSERT_TRUE(short_client.ok());
  auto m2 = (*short_client)->open_model("slow_batched");
  ASSERT_TRUE(m2.ok());
  auto in2 = (*short_client)->upload(input_for(0, {1, 16}).view(), "");
  ASSERT_TRUE(in2.ok()) << in2.status().to_string();
  auto out2 = (*short_client)->run(*m2, {*in2});
  if (out2.ok()) {  // RemoteClient may answer with handles and fail the read
    auto y = (*short_client)->read(out2->at(0));
    EXPECT_FALSE(y.ok()) << "the 1 s call waited out a 3 s batching delay";
  }
  other.join();
  ASSERT_TRUE(kept.ok()) << kept.status().to_string();
  EXPECT_TRUE(close(*kept, *want));
  EXPECT_GE(b->metric("failures_total", "slow_batched"), 1);
  // Rows run: only the kept request's (the cancelled one left before its batch formed).
  EXPECT_EQ(b->metric("batch_size_sum", "slow_batched"), 1);
}

TEST(Batching, NewestVersionServedUnlessOneIsNamed) {
  REQUIRE_MODELS();
  auto b = start(models);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const HostTensor x = input_for(0, {1, 4});
  for (auto [name, k] :
       std::vector<std::pair<std::string, float>>{{"vm", 2}, {"vm:2", 2}, {"vm:1", 1}}) {
    auto y = run_once(b->address(), name, {x});
    ASSERT_TRUE(y.ok()) << name << ": " << y.status().to_string();
    EXPECT_EQ(y->data<float>()[0], x.data<float>()[0] + k) << name;
  }
  EXPECT_EQ(b->metric("requests_total", "vm", "2"), 2);
  EXPECT_EQ(b->metric("requests_total", "vm", "1"), 1);
  auto c = connect(b->address());
  ASSERT_TRUE(c.ok());
  auto list = (*c)->list_models();
  ASSERT_TRUE(list.ok());
  std::map<std::string, bool> ready;
  for (const ModelInfo& m : *list) ready[m.name] = m.ready;
  EXPECT_TRUE(ready["vm"] && ready["vm:1"] && ready["vm:2"]);
}

TEST(Batching, ConfigErrorsNameTheKey) {
  REQUIRE_MODELS();
  auto b = start(models);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto c = connect(b->address());
  ASSERT_TRUE(c.ok());
  auto list = (*c)->list_models();
  ASSERT_TRUE(list.ok());
  std::map<std::string, ModelInfo> by;
  for (const ModelInfo& m : *list) by[m.name] = m;
  ASSERT_TRUE(by.count("typo") && by.count("typo_nested") && by.count("badshape"));
  EXPECT_FALSE(by["typo"].ready);
  EXPECT_NE(by["typo"].reason.find("unknown key 'max_batch_sise'"), std::string::npos)
      << by["typo"].reason;
  EXPECT_NE(by["typo"].reason.find("did you mean 'max_batch_size'"), std::string::npos)
      << by["typo"].reason;
  EXPECT_FALSE(by["typo_nested"].ready);
  EXPECT_NE(by["typo_nested"].reason.find("'max_queue_delay_us'"), std::string::npos)
      << by["typo_nested"].reason;
  EXPECT_NE(by["typo_nested"].reason.find("max_queue_delay_microseconds"), std::string::npos)
      << by["typo_nested"].reason;
  EXPECT_FALSE(by["badshape"].ready);
  EXPECT_NE(by["badshape"].reason.find("input 'X': dims [-1, 17]"), std::string::npos)
      << by["badshape"].reason;
  // The others load beside them.
  EXPECT_TRUE(by["mlp_batched"].ready) << by["mlp_batched"].reason;
}

}  // namespace
}  // namespace tensord
