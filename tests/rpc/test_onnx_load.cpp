// LoadModel with ONNX bytes (MODEL_FORMAT_ONNX): a client sends the .onnx file, the broker
// imports it with the C++ importer. Against real `tensord serve` processes, with real ONNX
// files written by tests/rpc/make_onnx_models.py (/usr/bin/python3 + python3-onnx; the tests
// skip, saying so, where those are missing).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "broker_process.h"
#include "core/errors.h"
#include "onnx/onnx_import.h"
#include "rpc/remote_client.h"
#include "rpc/wire.h"
#include "script_models.h"
#include "tensord.grpc.pb.h"
#include "tensord/client.h"
#include "tensord/tensor.h"

namespace tensord {
namespace {

using std::chrono::milliseconds;
using testing::BrokerOptions;
using testing::BrokerProcess;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The models of make_onnx_models.py, by name.
struct OnnxModels {
  const testing::ScriptModels& files;
  std::string mlp() const { return files.path("mlp/model.onnx"); }
  std::string external() const { return files.path("external/model.onnx"); }
  std::string unsupported() const { return files.path("unsupported/model.onnx"); }
  std::string data(const std::string& model, const char* name) const {
    return files.path(model + "/test_data_set_0/" + name);
  }
};

#define REQUIRE_MODELS()                               \
  REQUIRE_SCRIPT_MODELS(files, "make_onnx_models.py"); \
  const OnnxModels models{files}

Result<std::unique_ptr<BrokerProcess>> start(std::vector<std::string> args = {}) {
  BrokerOptions o;
  o.args = std::move(args);
  o.tcp = true;  // 127.0.0.1 (the raw stub below dials it without credentials)
  o.cpu_devices = 1;
  return BrokerProcess::start(o);
}

// Small chunks, so that a 77 KB model takes ~19 LoadModel messages.
Result<std::unique_ptr<rpc::RemoteClient>> connect(const std::string& address) {
  rpc::RemoteClientOptions o;
  o.chunk_bytes = 4 << 10;
  return rpc::RemoteClient::connect(address, o);
}

// Uploads the test input, runs the model, reads its one output.
Result<HostTensor> run_once(Client& c, ModelHandle model, const HostTensor& x) {
  TD_ASSIGN_OR_RETURN(TensorHandle in, c.upload(x.view(), ""));
  TD_ASSIGN_OR_RETURN(auto out, c.run(model, {in}));
  if (out.size() != 1) return errors::Internal("expected one output, got {}", out.size());
  TD_ASSIGN_OR_RETURN(HostTensor y, c.read(out[0]));
  (void)c.release(in);
  (void)c.release(out[0]);
  return y;
}

// The broker's ONNX import gives what the same importer gives in this process, bit for bit,
// and what NumPy computed.
TEST(OnnxLoad, RemoteBytesGiveTheLocalImportsOutputs) {
  REQUIRE_MODELS();
  auto b = start();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto remote = connect((*b)->address());
  ASSERT_TRUE(remote.ok()) << remote.status().to_string();
  const std::string bytes = read_bytes(models.mlp());
  ASSERT_GT(bytes.size(), 64u << 10);
  auto x = onnx::read_tensor_file(models.data("mlp", "input_0.pb"));
  auto expected = onnx::read_tensor_file(models.data("mlp", "output_0.pb"));
  ASSERT_TRUE(x.ok() && expected.ok());

  auto loaded = (*remote)->load_onnx(bytes, "");
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_NE(loaded->handle, 0u);
  EXPECT_EQ(loaded->name, "mlp");
  EXPECT_EQ(loaded->opset, 11);
  EXPECT_EQ(loaded->ir_version, 6);
  EXPECT_EQ(loaded->producer, "make_onnx_models.py 1");
  ASSERT_EQ(loaded->inputs.size(), 1u);  // initializers are not runtime inputs
  EXPECT_EQ(loaded->inputs[0].name, "X");
  EXPECT_EQ(loaded->inputs[0].type.dtype, DType::kFloat32);
  EXPECT_EQ(loaded->inputs[0].type.shape, (Shape{-1, 64}));
  ASSERT_EQ(loaded->outputs.size(), 1u);
  EXPECT_EQ(loaded->outputs[0].name, "Y");
  auto y_remote = run_once(**remote, loaded->handle, *x);
  ASSERT_TRUE(y_remote.ok()) << y_remote.status().to_string();

  auto local = make_local_client({.devices = "cpu:0", .default_device = "cpu:0"});
  ASSERT_TRUE(local.ok()) << local.status().to_string();
  auto imported = onnx::import_bytes(bytes, "mlp");
  ASSERT_TRUE(imported.ok()) << imported.status().to_string();
  auto model = (*local)->load(imported->graph, "");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto y_local = run_once(**local, *model, *x);
  ASSERT_TRUE(y_local.ok()) << y_local.status().to_string();

  ASSERT_EQ(y_remote->dtype(), DType::kFloat32);
  ASSERT_EQ(y_remote->shape(), (Shape{3, 10}));
  ASSERT_EQ(y_local->shape(), y_remote->shape());
  EXPECT_EQ(std::memcmp(y_remote->data(), y_local->data(), y_remote->nbytes()), 0)
      << "the broker's import computes other values than the local one";
  const auto got = y_remote->to_double_vector(), want = expected->to_double_vector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "element " << i;
  EXPECT_TRUE((*remote)->unload(loaded->handle).ok());
}

// Bad files are refused with the importer's message; the broker goes on serving.
TEST(OnnxLoad, CorruptTruncatedAndExternalDataFilesAreClearErrors) {
  REQUIRE_MODELS();
  auto b = start();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto c = connect((*b)->address());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const std::string good = read_bytes(models.mlp());
  const auto expect_error = [&](const std::string& bytes, StatusCode code, const char* what,
                                std::vector<std::string> words) {
    auto m = (*c)->load_onnx(bytes, "");
    ASSERT_FALSE(m.ok()) << what << " was loaded";
    EXPECT_EQ(m.status().code(), code) << what << ": " << m.status().to_string();
    for (const auto& w : words)
      EXPECT_NE(m.status().message().find(w), std::string::npos)
          << what << ": '" << w << "' not in: " << m.status().message();
  };
  expect_error("this is not an onnx file, just words", StatusCode::kInvalidArgument, "text",
               {"load model: the ONNX file sent", "not a valid ONNX model"});
  expect_error(good.substr(0, good.size() / 2), StatusCode::kInvalidArgument, "half a file",
               {"not a valid ONNX model", "truncated"});
  std::string flipped = good;  // the graph's field tag turned into garbage
  for (size_t i = 0; i < 64 && i < flipped.size(); ++i) flipped[i] = static_cast<char>(0xff);
  expect_error(flipped, StatusCode::kInvalidArgument, "a damaged header", {"ONNX"});
  expect_error("", StatusCode::kInvalidArgument, "no bytes", {"empty"});
  // External data: only the .onnx file's bytes reach the broker, which reads no files.
  expect_error(read_bytes(models.external()), StatusCode::kInvalidArgument, "external data",
               {"external data", "weights.bin", "self-contained"});
  // A well-formed file with an op nobody implements: the importer's UNIMPLEMENTED, naming it.
  expect_error(read_bytes(models.unsupported()), StatusCode::kUnimplemented, "an unknown op",
               {"unsupported ops", "FrobnicateV2"});
  // The broker still serves this session: the good file loads and runs.
  auto m = (*c)->load_onnx(good, "");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto x = onnx::read_tensor_file(models.data("mlp", "input_0.pb"));
  ASSERT_TRUE(x.ok());
  auto y = run_once(**c, m->handle, *x);
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  EXPECT_EQ(y->shape(), (Shape{3, 10}));
}

// Over --max-model-bytes: the client refuses before sending (it knows the limit from the
// handshake), and the broker refuses on the header alone (a client that sends anyway).
TEST(OnnxLoad, OverTheModelLimitIsRefusedBeforeTheBytes) {
  REQUIRE_MODELS();
  const int64_t limit = 32 << 10;  // the model is ~77 KB
  auto b = start({"--max-model-bytes", std::to_string(limit)});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto c = connect((*b)->address());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const std::string bytes = read_bytes(models.mlp());
  const int64_t calls = (*c)->rpc_count();
  auto m = (*c)->load_onnx(bytes, "");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted) << m.status().to_string();
  EXPECT_NE(m.status().message().find(std::to_string(limit)), std::string::npos)
      << m.status().message();
  EXPECT_EQ((*c)->rpc_count(), calls) << "the client sent the file although it knew the limit";

  // A raw client that declares 1 GiB and sends nothing but the header: refused on it (not "the
  // stream carried 0 bytes").
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  auto stub = v1::Tensord::NewStub(
      grpc::CreateCustomChannel((*b)->address(), grpc::InsecureChannelCredentials(), args));
  std::string session;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(20000));
    v1::OpenSessionRequest req;
    v1::OpenSessionResponse resp;
    ASSERT_TRUE(stub->OpenSession(&ctx, req, &resp).ok());
    session = resp.session_id();
  }
  const auto raw_load = [&](int64_t declared, v1::ModelFormat format, const std::string& data,
                            int64_t* written) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(20000));
    ctx.AddMetadata(rpc::kSessionKey, session);
    v1::LoadModelResponse resp;
    auto w = stub->LoadModel(&ctx, &resp);
    v1::LoadModelChunk chunk;
    chunk.mutable_header()->set_graph_bytes(declared);
    chunk.mutable_header()->set_format(format);
    *written = 0;
    bool ok = w->Write(chunk);
    chunk.clear_header();
    for (size_t off = 0; ok && off < data.size(); off += 1024) {
      chunk.set_data(data.substr(off, 1024));
      ok = w->Write(chunk);
      if (ok) *written += static_cast<int64_t>(chunk.data().size());
    }
    w->WritesDone();
    return w->Finish();
  };
  int64_t written = 0;
  grpc::Status s = raw_load(int64_t{1} << 30, v1::MODEL_FORMAT_ONNX, "", &written);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("the ONNX file takes 1073741824 bytes"), std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("--max-model-bytes " + std::to_string(limit)), std::string::npos)
      << s.error_message();
  // An unknown format is named.
  s = raw_load(16, static_cast<v1::ModelFormat>(7), std::string(16, 'x'), &written);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("unknown model format 7"), std::string::npos)
      << s.error_message();

  // The broker still serves: a model under the limit (the same graph, weights shrunk to fit).
  auto imported = onnx::import_bytes(bytes, "mlp");
  ASSERT_TRUE(imported.ok());
  auto small = (*c)->load(imported->graph, "");  // the Graph form: 77 KB > 32 KiB, refused too
  EXPECT_EQ(small.status().code(), StatusCode::kResourceExhausted) << small.status().to_string();
  Graph tiny;
  tiny.name = "tiny";
  tiny.inputs = {{"a", {DType::kFloat32, {2}}}};
  tiny.outputs = {{"b", {DType::kFloat32, {2}}}};
  tiny.nodes.push_back(Node{});
  tiny.nodes.back().op = "Relu";
  tiny.nodes.back().inputs = {"a"};
  tiny.nodes.back().outputs = {"b"};
  auto t = (*c)->load(tiny, "");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto x = HostTensor::from_vector<float>({-1.f, 2.f}, {2});
  auto y = run_once(**c, *t, x);
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  EXPECT_EQ(y->to_double_vector(), (std::vector<double>{0.0, 2.0}));
}

// A model over the chunk size of a broker with a small message limit: every message stays
// under --max-message-bytes, and the model arrives whole.
TEST(OnnxLoad, ChunksStayUnderTheBrokersMessageLimit) {
  REQUIRE_MODELS();
  auto b = start({"--max-message-bytes", std::to_string(16 << 10)});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  rpc::RemoteClientOptions o;
  o.chunk_bytes = 1 << 20;  // the client lowers it to half the broker's message limit
  auto c = rpc::RemoteClient::connect((*b)->address(), o);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto m = (*c)->load_onnx(read_bytes(models.mlp()), "");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto x = onnx::read_tensor_file(models.data("mlp", "input_0.pb"));
  auto expected = onnx::read_tensor_file(models.data("mlp", "output_0.pb"));
  ASSERT_TRUE(x.ok() && expected.ok());
  auto y = run_once(**c, m->handle, *x);
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  const auto got = y->to_double_vector(), want = expected->to_double_vector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "element " << i;
}

}  // namespace
}  // namespace tensord
