// The KServe v2 inference protocol ("Open Inference Protocol", the one Triton, KServe and
// others speak) beside tensord's own, for the broker's named models (`tensord serve --models
// DIR`): over gRPC (inference.GRPCInferenceService from proto/grpc_predict_v2.proto, the
// protocol's published definition: kserve_grpc.cpp) and over HTTP/JSON on the --http server
// (/v2/..., with the binary tensor data extension: kserve_http.cpp).
//
// Both fronts reach the models through one object, NamedModelRunner, and run them through
// one function, NamedModelRunner::run: the place where requests from every front meet (and
// where dynamic batching slots in). It validates the request against the model's declared
// inputs (names, dtypes, ranks, fixed dimensions), uploads the inputs, runs the model and
// reads the outputs back, in an engine session of the caller's tenant that the runner keeps
// (so the tenant's compiled forms of the model survive between requests; see
// Engine::open_named_model).
//
// Tenancy: as for tensord's own calls. With tokens (a token file), every KServe call needs one
// (gRPC: the 'authorization' metadata; HTTP: the Authorization header, Bearer or Basic), and a
// tenant's requests run in that tenant's session, charged to its memory limits. Only the HTTP
// health endpoints (/v2/health/live, /v2/health/ready) stay open, as /healthz and /readyz do.
//
// Private to src/rpc.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "rpc/batcher.h"
#include "tensord/client.h"

namespace tensord::rpc::kserve {

// The protocol's tensor data types ("FP32", "INT64", "BOOL", ...), and tensord's for them.
// tensord has no BYTES (strings): nullopt for it and for anything else unknown.
const char* datatype_name(DType t);
std::optional<DType> datatype_from_name(std::string_view name);
// The names accepted, for messages: "BOOL, UINT8, ..., BF16".
const char* datatype_names();

// A tensor of a request or an answer: row-major bytes.
struct Tensor {
  std::string name;
  DType dtype = DType::kUndefined;
  Shape shape;
  std::string data;
};

struct RunRequest {
  std::string tenant;  // "" without tokens
  std::string model;
  std::string version;  // "" = the model's own (tensord's named models have one version)
  std::vector<Tensor> inputs;
  std::vector<std::string> outputs;   // requested by name; empty = all, in the model's order
  std::shared_ptr<CancelToken> call;  // the caller's deadline / cancellation (may be null)
};

struct RunResult {
  std::string model, version;
  std::vector<Tensor> outputs;
};

class NamedModelRunner {
 public:
  struct Options {
    int64_t session_memory_limit = 0;  // the broker's limits (RpcServerOptions)
    int64_t tenant_memory_limit = 0;
    std::function<bool(std::string* why)> ready;  // the server is ready (Monitor::ready)
    // The broker's named-model runner (batcher.h): KServe runs go through it as tensord's own
    // Run calls do, so they are counted per model and batched with every other session's runs
    // where the model's config.json enables dynamic batching. Null: Engine::run directly.
    std::shared_ptr<ModelRunner> model_runner;
  };
  NamedModelRunner(std::shared_ptr<Engine> engine, Options options);
  ~NamedModelRunner();  // closes the sessions

  bool server_ready(std::string* why = nullptr) const;
  // The model as ModelMetadata shows it: NOT_FOUND naming the model and listing those there
  // are; a version other than "" or "1" is NOT_FOUND too. An unavailable model is returned
  // (ready false, its reason).
  Result<ModelInfo> find(const std::string& model, const std::string& version) const;
  // Runs a named model: THE run path of both KServe fronts. Errors: NOT_FOUND (model,
  // version, or a requested output), FAILED_PRECONDITION (the model failed to load, with why),
  // INVALID_ARGUMENT (an input missing, unknown, repeated, or of the wrong dtype, rank, shape
  // or byte size: named with the expected and given values), and whatever the run returns.
  Result<RunResult> run(RunRequest request);

 private:
  Result<SessionId> session_for(const std::string& tenant);
  std::shared_ptr<Engine> engine_;
  Options options_;
  std::mutex mu_;
  std::map<std::string, SessionId> sessions_;  // tenant -> its session for KServe requests
};

}  // namespace tensord::rpc::kserve

// ---------------------------------------------------------------- the fronts
namespace grpc {
class Service;
class ServerContextBase;
}  // namespace grpc

namespace tensord::rpc::kserve {

// inference.GRPCInferenceService (kserve_grpc.cpp), registered beside tensord's service.
// `tenant_of`: the call's tenant from its token ("" without tokens), or UNAUTHENTICATED.
std::unique_ptr<grpc::Service> make_grpc_service(
    std::shared_ptr<NamedModelRunner> runner,
    std::function<Result<std::string>(grpc::ServerContextBase*)> tenant_of);

// The /v2 endpoints over HTTP (kserve_http.cpp). `tenant`: the caller's, checked by the HTTP
// server (nullopt: no valid token; only the health endpoints answer then).
struct HttpRequest {
  std::string method, path, content_type, body;
  int64_t inference_header_length = -1;  // Inference-Header-Content-Length, -1 when absent
};
struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};
HttpResponse handle_http(NamedModelRunner& runner, const HttpRequest& request,
                         const std::optional<std::string>& tenant);

}  // namespace tensord::rpc::kserve
