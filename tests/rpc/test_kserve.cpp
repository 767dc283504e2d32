// Issue 29: the KServe v2 inference protocol beside tensord's own, against a real `tensord
// serve --models DIR --http`. The gRPC client is generated from the protocol's published
// definition (proto/grpc_predict_v2.proto, package `inference`), not from tensord's client
// code; the HTTP one is a plain HTTP client (cpp-httplib). Models: make_named_models.py
// (mlp: X float32[N, 1024] -> Y float32[N, 4]; add: X float32[4] -> Y on cpu:1; broken: not
// an ONNX file).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "broker_process.h"
#include "core/npy.h"
#include "grpc_predict_v2.grpc.pb.h"
#include "rpc/remote_client.h"
#include "script_models.h"
#include "tensord/run_async.h"
#include "tensord/tensor.h"

namespace tensord {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;
using testing::BrokerOptions;
using testing::BrokerProcess;

using testing::ScriptModels;

#define REQUIRE_KS_MODELS() REQUIRE_SCRIPT_MODELS(models, "make_named_models.py", "--small")

// A broker on 127.0.0.1 (gRPC) with --http, serving the models.
struct KsBroker {
  std::unique_ptr<BrokerProcess> broker;
  std::string host;
  int http_port = 0;
};

Result<KsBroker> start_broker(const ScriptModels& models, std::vector<std::string> extra = {}) {
  BrokerOptions o;
  o.tcp = true;
  o.cpu_devices = 2;  // add/config.json puts its model on cpu:1
  o.args = {"--models", models.dir, "--http", "0"};
  o.args.insert(o.args.end(), extra.begin(), extra.end());
  auto b = BrokerProcess::start(o);
  if (!b.ok()) return b.status();
  auto http = (*b)->next_http_address(milliseconds(10000));
  if (!http.ok()) return http.status();
  KsBroker k;
  k.host = http->host;
  k.http_port = http->port;
  k.broker = std::move(b).value();
  return k;
}

// A stub on an insecure channel, as a standard KServe client (Triton's, KServe's) makes one.
std::unique_ptr<inference::GRPCInferenceService::Stub> stub(const KsBroker& b) {
  auto channel = grpc::CreateChannel(b.broker->address(), grpc::InsecureChannelCredentials());
  return inference::GRPCInferenceService::NewStub(channel);
}

std::unique_ptr<grpc::ClientContext> context(const std::string& token = "") {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  return ctx;
}

httplib::Client http(const KsBroker& b) {
  httplib::Client c(b.host, b.http_port);
  c.set_connection_timeout(5);
  c.set_read_timeout(60);
  return c;
}

std::vector<float> floats(const HostTensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

TEST(KServe, GrpcFromThePublishedProto) {
  REQUIRE_KS_MODELS();
  auto b = start_broker(models);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto s = stub(*b);

  {
    inference::ServerLiveResponse r;
    auto st = s->ServerLive(context().get(), {}, &r);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_TRUE(r.live());
  }
  {
    inference::ServerReadyResponse r;
    auto st = s->ServerReady(context().get(), {}, &r);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_TRUE(r.ready());
  }
  {
    inference::ServerMetadataResponse r;
    auto st = s->ServerMetadata(context().get(), {}, &r);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(r.name(), "tensord");
    EXPECT_FALSE(r.version().empty());
  }
  {  // metadata: names, dtypes, shapes (-1: the symbolic batch)
    inference::ModelMetadataRequest q;
    q.set_name("mlp");
    inference::ModelMetadataResponse r;
    auto st = s->ModelMetadata(context().get(), q, &r);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(r.name(), "mlp");
    ASSERT_EQ(r.inputs_size(), 1);
    EXPECT_EQ(r.inputs(0).name(), "X");
    EXPECT_EQ(r.inputs(0).datatype(), "FP32");
    EXPECT_EQ(std::vector<int64_t>(r.inputs(0).shape().begin(), r.inputs(0).shape().end()),
              (std::vector<int64_t>{-1, 1024}));
    ASSERT_EQ(r.outputs_size(), 1);
    EXPECT_EQ(r.outputs(0).name(), "Y");
    EXPECT_EQ(r.outputs(0).datatype(), "FP32");
    EXPECT_EQ(std::vector<int64_t>(r.outputs(0).shape().begin(), r.outputs(0).shape().end()),
              (std::vector<int64_t>{-1, 4}));
  }
  {  // model ready: mlp yes; broken (failed to load) no; unknown: NOT_FOUND
    inference::ModelReadyRequest q;
    inference::ModelReadyResponse r;
    q.set_name("mlp");
    ASSERT_TRUE(s->ModelReady(context().get(), q, &r).ok());
    EXPECT_TRUE(r.ready());
    q.set_name("broken");
    ASSERT_TRUE(s->ModelReady(context().get(), q, &r).ok());
    EXPECT_FALSE(r.ready());
    q.set_name("nosuch");
    auto st = s->ModelReady(context().get(), q, &r);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_NE(st.error_message().find("nosuch"), std::string::npos) << st.error_message();
    EXPECT_NE(st.error_message().find("mlp"), std::string::npos) << st.error_message();
  }

  // Infer, raw contents: equal to NumPy's result.
  auto x = read_npy(models.path("mlp/x.npy"));
  auto want = read_npy(models.path("mlp/y.npy"));
  ASSERT_TRUE(x.ok() && want.ok());
  inference::ModelInferRequest q;
  q.set_model_name("mlp");
  q.set_id("req-1");
  auto* in = q.add_inputs();
  in->set_name("X");
  in->set_datatype("FP32");
  in->add_shape(2);
  in->add_shape(1024);
  q.add_raw_input_contents(std::string(static_cast<const char*>(x->data()), x->nbytes()));
  {
    inference::ModelInferResponse r;
    auto st = s->ModelInfer(context().get(), q, &r);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(r.model_name(), "mlp");
    EXPECT_EQ(r.id(), "req-1");
    ASSERT_EQ(r.outputs_size(), 1);
    EXPECT_EQ(r.outputs(0).name(), "Y");
    EXPECT_EQ(r.outputs(0).datatype(), "FP32");
    EXPECT_EQ(std::vector<int64_t>(r.outputs(0).shape().begin(), r.outputs(0).shape().end()),
              (std::vector<int64_t>{2, 4}));
    ASSERT_EQ(r.raw_output_contents_size(), 1);
    ASSERT_EQ(r.raw_output_contents(0).size(), 8 * sizeof(float));
    const auto exp = floats(*want);
    std::vector<float> got(8);
    std::memcpy(got.data(), r.raw_output_contents(0).data(), 8 * sizeof(float));
    for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(got[i], exp[i], 1e-4) << i;
  }
  {  // typed contents (fp32_contents) on the model placed on cpu:1
    inference::ModelInferRequest a;
    a.set_model_name("add");
    auto* ai = a.add_inputs();
    ai->set_name("X");
    ai->set_datatype("FP32");
    ai->add_shape(4);
    for (float v : {10.f, 20.f, 30.f, 40.f}) ai->mutable_contents()->add_fp32_contents(v);
    inference::ModelInferResponse r;
    auto st = s->ModelInfer(context().get(), a, &r);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(r.raw_output_contents_size(), 1);
    std::vector<float> got(4);
    ASSERT_EQ(r.raw_output_contents(0).size(), 16u);
    std::memcpy(got.data(), r.raw_output_contents(0).data(), 16);
    EXPECT_EQ(got, (std::vector<float>{11, 22, 33, 44}));
  }

  // Errors: the protocol's status with a message naming what was wrong.
  auto expect_error = [&](inference::ModelInferRequest req, grpc::StatusCode code,
                          std::vector<std::string> words) {
    inference::ModelInferResponse r;
    auto st = s->ModelInfer(context().get(), req, &r);
    EXPECT_EQ(st.error_code(), code) << st.error_message();
    for (const auto& w : words)
      EXPECT_NE(st.error_message().find(w), std::string::npos)
          << "'" << w << "' not in: " << st.error_message();
  };
  {
    auto bad = q;
    bad.set_model_name("nosuch");
    expect_error(bad, grpc::StatusCode::NOT_FOUND, {"nosuch", "mlp"});
  }
  {
    auto bad = q;
    bad.mutable_inputs(0)->set_datatype("INT32");
    expect_error(bad, grpc::StatusCode::INVALID_ARGUMENT, {"'X'", "FP32", "INT32"});
  }
  {
    auto bad = q;
    bad.mutable_inputs(0)->set_shape(1, 1000);
    bad.set_raw_input_contents(0, std::string(2 * 1000 * 4, '\0'));
    expect_error(bad, grpc::StatusCode::INVALID_ARGUMENT, {"[2, 1000]", "[-1, 1024]"});
  }
  {
    auto bad = q;
    bad.set_raw_input_contents(0, std::string(100, '\0'));
    expect_error(bad, grpc::StatusCode::INVALID_ARGUMENT, {"8192", "100"});
  }
  {
    auto bad = q;
    bad.mutable_inputs(0)->set_name("Z");
    expect_error(bad, grpc::StatusCode::INVALID_ARGUMENT, {"'Z'", "'X'"});
  }
  {
    auto bad = q;
    bad.set_model_name("broken");
    expect_error(bad, grpc::StatusCode::FAILED_PRECONDITION, {"broken", "not ready"});
  }
  {
    auto bad = q;
    bad.mutable_inputs(0)->set_datatype("BYTES");
    expect_error(bad, grpc::StatusCode::INVALID_ARGUMENT, {"BYTES", "FP32"});
  }
}

TEST(KServe, HttpJsonAndBinaryData) {
  REQUIRE_KS_MODELS();
  auto b = start_broker(models);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto c = http(*b);

  for (const char* path : {"/v2/health/live", "/v2/health/ready", "/v2/models/mlp/ready"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r) << path << ": " << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200) << path << ": " << r->body;
  }
  {
    auto r = c.Get("/v2/models/broken/ready");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
  }
  {
    auto r = c.Get("/v2");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    auto j = json::parse(r->body);
    EXPECT_EQ(j["name"], "tensord");
    EXPECT_NE(j["extensions"].dump().find("binary_tensor_data"), std::string::npos);
  }
  {  // metadata with dtypes and shapes
    auto r = c.Get("/v2/models/mlp");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    auto j = json::parse(r->body);
    EXPECT_EQ(j["name"], "mlp");
    EXPECT_EQ(j["inputs"][0]["name"], "X");
    EXPECT_EQ(j["inputs"][0]["datatype"], "FP32");
    EXPECT_EQ(j["inputs"][0]["shape"], json({-1, 1024}));
    EXPECT_EQ(j["outputs"][0]["name"], "Y");
    EXPECT_EQ(j["outputs"][0]["shape"], json({-1, 4}));
  }

  // JSON infer (nested data, row-major) on add.
  {
    json req = {
        {"id", "7"},
        {"inputs",
         {{{"name", "X"}, {"shape", {4}}, {"datatype", "FP32"}, {"data", {1.5, 2.5, 3.5, 4.5}}}}}};
    auto r = c.Post("/v2/models/add/infer", req.dump(), "application/json");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    ASSERT_EQ(r->status, 200) << r->body;
    auto j = json::parse(r->body);
    EXPECT_EQ(j["model_name"], "add");
    EXPECT_EQ(j["id"], "7");
    EXPECT_EQ(j["outputs"][0]["name"], "Y");
    EXPECT_EQ(j["outputs"][0]["datatype"], "FP32");
    EXPECT_EQ(j["outputs"][0]["shape"], json({4}));
    EXPECT_EQ(j["outputs"][0]["data"], json({2.5, 4.5, 6.5, 8.5}));
  }

  // Binary tensor data both ways on mlp: the input's bytes after the JSON header, the output
  // asked for as binary.
  auto x = read_npy(models.path("mlp/x.npy"));
  auto want = read_npy(models.path("mlp/y.npy"));
  ASSERT_TRUE(x.ok() && want.ok());
  {
    json header = {{"inputs",
                    {{{"name", "X"},
                      {"shape", {2, 1024}},
                      {"datatype", "FP32"},
                      {"parameters", {{"binary_data_size", x->nbytes()}}}}}},
                   {"outputs", {{{"name", "Y"}, {"parameters", {{"binary_data", true}}}}}}};
    const std::string h = header.dump();
    std::string body = h + std::string(static_cast<const char*>(x->data()), x->nbytes());
    httplib::Headers hs = {{"Inference-Header-Content-Length", std::to_string(h.size())}};
    auto r = c.Post("/v2/models/mlp/infer", hs, body, "application/octet-stream");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    ASSERT_EQ(r->status, 200) << r->body;
    ASSERT_TRUE(r->has_header("Inference-Header-Content-Length"));
    const size_t n = std::stoul(r->get_header_value("Inference-Header-Content-Length"));
    ASSERT_LE(n, r->body.size());
    auto j = json::parse(r->body.substr(0, n));
    EXPECT_EQ(j["outputs"][0]["shape"], json({2, 4}));
    EXPECT_EQ(j["outputs"][0]["parameters"]["binary_data_size"], 32);
    ASSERT_EQ(r->body.size() - n, 32u);
    std::vector<float> got(8);
    std::memcpy(got.data(), r->body.data() + n, 32);
    const auto exp = floats(*want);
    for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(got[i], exp[i], 1e-4) << i;
  }
  {  // the same input as JSON, the output as JSON: the same values
    json data = json::array();
    const float* px = x->data<float>();
    for (int i = 0; i < 2; ++i) {
      json row = json::array();
      for (int k = 0; k < 1024; ++k) row.push_back(px[i * 1024 + k]);
      data.push_back(row);
    }
    json req = {
        {"inputs", {{{"name", "X"}, {"shape", {2, 1024}}, {"datatype", "FP32"}, {"data", data}}}}};
    auto r = c.Post("/v2/models/mlp/infer", req.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    auto j = json::parse(r->body);
    const auto exp = floats(*want);
    ASSERT_EQ(j["outputs"][0]["data"].size(), 8u);
    for (size_t i = 0; i < 8; ++i)
      EXPECT_NEAR(j["outputs"][0]["data"][i].get<double>(), exp[i], 1e-4) << i;
  }

  // Errors: the protocol's {"error": message}.
  auto expect_error = [&](const std::string& path, const std::string& body, int status,
                          std::vector<std::string> words) {
    auto r = c.Post(path, body, "application/json");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, status) << r->body;
    auto j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
    const std::string msg = j["error"].get<std::string>();
    for (const auto& w : words)
      EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
  };
  const std::string ok4 =
      R"({"inputs":[{"name":"X","shape":[4],"datatype":"FP32","data":[1,2,3,4]}]})";
  expect_error("/v2/models/nosuch/infer", ok4, 404, {"nosuch", "add", "mlp"});
  expect_error("/v2/models/add/infer", "{\"inputs\": [", 400, {"not valid JSON"});
  expect_error("/v2/models/add/infer",
               R"({"inputs":[{"name":"X","shape":[5],"datatype":"FP32","data":[1,2,3,4,5]}]})", 400,
               {"[5]", "[4]"});
  expect_error("/v2/models/add/infer",
               R"({"inputs":[{"name":"X","shape":[4],"datatype":"INT64","data":[1,2,3,4]}]})", 400,
               {"FP32", "INT64"});
  expect_error("/v2/models/add/infer",
               R"({"inputs":[{"name":"X","shape":[4],"datatype":"FP32","data":[1,2,3]}]})", 400,
               {"3 values", "4 elements"});
  expect_error(
      "/v2/models/add/infer",
      R"({"inputs":[{"name":"X","shape":[4],"datatype":"FP32","data":["a","b","c","d"]}]})", 400,
      {"numbers"});
  expect_error("/v2/models/broken/infer", ok4, 503, {"broken", "not ready"});
  {
    auto r = c.Get("/v2/models/nosuch");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404);
    EXPECT_NE(r->body.find("nosuch"), std::string::npos) << r->body;
  }
}

// An infer body is bounded by --max-message-bytes (413 naming the limit, before it is read);
// a large one under it (curl-style "Expect: 100-continue" included) is read whole.
TEST(KServe, HttpBodiesAreBoundedByTheMessageLimit) {
  REQUIRE_KS_MODELS();
  signal(SIGPIPE, SIG_IGN);  // a refused body's connection may be reset under a writer
  auto b = start_broker(models, {"--max-message-bytes", std::to_string(1 << 20)});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto c = http(*b);
  // Refused on the headers: a client that sends "Expect: 100-continue" (curl does for large
  // bodies) gets the 413 without sending the body. (One that sends the body anyway may see
  // the connection reset under it instead: the broker does not read what it refuses.)
  if (access("/usr/bin/curl", X_OK) == 0) {
    const std::string file = models.dir + "/../big.json";
    std::ofstream(file) << std::string(2 << 20, ' ');
    const std::string cmd = "/usr/bin/curl -s -H 'Expect: 100-continue' --data-binary @" + file +
                            " -w '\\n%{http_code}' http://" + b->host + ":" +
                            std::to_string(b->http_port) + "/v2/models/add/infer";
    std::string out;
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char buf[4096];
      for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
      pclose(p);
    }
    std::filesystem::remove(file);
    EXPECT_EQ(out.substr(out.rfind('\n') + 1), "413") << out;
    EXPECT_NE(out.find(std::to_string(1 << 20)), std::string::npos) << out;
  }
  // 200 rows of mlp's input as binary data: 800 KiB, under the limit.
  std::vector<float> x(200 * 1024, 0.5f);
  json header = {{"inputs",
                  {{{"name", "X"},
                    {"shape", {200, 1024}},
                    {"datatype", "FP32"},
                    {"parameters", {{"binary_data_size", x.size() * 4}}}}}}};
  const std::string h = header.dump();
  std::string body = h + std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4);
  httplib::Headers hs = {{"Inference-Header-Content-Length", std::to_string(h.size())},
                         {"Expect", "100-continue"}};
  auto ok = c.Post("/v2/models/mlp/infer", hs, body, "application/octet-stream");
  ASSERT_TRUE(ok) << httplib::to_string(ok.error());
  ASSERT_EQ(ok->status, 200) << ok->body.substr(0, 300);
  auto j = json::parse(ok->body);
  EXPECT_EQ(j["outputs"][0]["shape"], json({200, 4}));
  EXPECT_EQ(j["outputs"][0]["data"].size(), 800u);
}

TEST(KServe, TokensAsTheRestOfTheBroker) {
  REQUIRE_KS_MODELS();
  std::string dir = (std::filesystem::temp_directory_path() / "tensord-kstok.XXXXXX").string();
  ASSERT_TRUE(mkdtemp(dir.data()));
  const std::string tokens = dir + "/tokens";
  {
    std::ofstream f(tokens);
    f << "alice:tok-alice-0123456789abcdef\n";
  }
  chmod(tokens.c_str(), 0600);
  auto b = start_broker(models, {"--token-file", tokens});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto s = stub(*b);
  inference::ModelMetadataRequest q;
  q.set_name("add");
  inference::ModelMetadataResponse r;
  EXPECT_EQ(s->ModelMetadata(context().get(), q, &r).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(s->ModelMetadata(context("wrong").get(), q, &r).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  auto st = s->ModelMetadata(context("tok-alice-0123456789abcdef").get(), q, &r);
  EXPECT_TRUE(st.ok()) << st.error_message();

  auto c = http(*b);
  const std::string body =
      R"({"inputs":[{"name":"X","shape":[4],"datatype":"FP32","data":[1,2,3,4]}]})";
  auto no = c.Post("/v2/models/add/infer", body, "application/json");
  ASSERT_TRUE(no);
  EXPECT_EQ(no->status, 401) << no->body;
  auto live = c.Get("/v2/health/live");  // open, as /healthz
  ASSERT_TRUE(live);
  EXPECT_EQ(live->status, 200);
  auto yes = c.Post("/v2/models/add/infer",
                    httplib::Headers{{"Authorization", "Bearer tok-alice-0123456789abcdef"}}, body,
                    "application/json");
  ASSERT_TRUE(yes);
  EXPECT_EQ(yes->status, 200) << yes->body;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// C++'s run_async (tensord/run_async.h): several runs in flight as std::futures, each equal to
// NumPy's result; an error is the future's value.
TEST(KServe, CppRunAsyncReturnsFutures) {
  REQUIRE_KS_MODELS();
  auto b = start_broker(models);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto c = rpc::RemoteClient::connect(b->broker->address());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto m = (*c)->open_model("mlp");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto x = read_npy(models.path("mlp/x.npy"));
  auto want = read_npy(models.path("mlp/y.npy"));
  ASSERT_TRUE(x.ok() && want.ok());
  auto in = (*c)->upload(x->view(), "");
  ASSERT_TRUE(in.ok());
  std::vector<std::future<Result<std::vector<TensorHandle>>>> futures;
  for (int i = 0; i < 4; ++i) futures.push_back(run_async(**c, *m, {*in}));
  for (auto& f : futures) {
    auto out = f.get();
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    auto y = (*c)->read((*out)[0]);
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    const auto got = floats(*y), exp = floats(*want);
    ASSERT_EQ(got.size(), exp.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], exp[i], 1e-4);
  }
  HostTensor wrong = HostTensor::from_vector<float>(std::vector<float>(14, 1.f), {2, 7});
  auto bad_in = (*c)->upload(wrong.view(), "");
  ASSERT_TRUE(bad_in.ok());
  auto bad = run_async(**c, *m, {*bad_in}).get();
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace tensord
