// KServe v2 over gRPC: inference.GRPCInferenceService (proto/grpc_predict_v2.proto, the
// protocol's published definition), on the broker's gRPC listener beside tensord.v1.Tensord.
// Inputs come as raw_input_contents or typed contents; outputs go back as raw_output_contents
// (as Triton answers). Errors are gRPC statuses with tensord's codes and messages (the
// protocol's google.rpc.Status): NOT_FOUND for an unknown model, INVALID_ARGUMENT for a
// request that does not fit it, FAILED_PRECONDITION for a model that failed to load.
#include <grpcpp/grpcpp.h>

#include "core/errors.h"
#include "grpc_predict_v2.grpc.pb.h"
#include "rpc/kserve.h"
#include "rpc/wire.h"
#include "tensord/version.h"

namespace tensord::rpc::kserve {

namespace {

namespace pb = ::inference;

template <typename Src, typename Dst>
void append_as(const Src& values, std::string* out) {
  const size_t at = out->size();
  out->resize(at + values.size() * sizeof(Dst));
  Dst* dst = reinterpret_cast<Dst*>(out->data() + at);
  for (int i = 0; i < values.size(); ++i) dst[i] = static_cast<Dst>(values[i]);
}

// The typed contents of an input as its row-major bytes.
Status contents_to_bytes(const pb::ModelInferRequest::InferInputTensor& in, DType dtype,
                         int64_t numel, std::string* out) {
  const pb::InferTensorContents& c = in.contents();
  int64_t n = -1;
  switch (dtype) {
    case DType::kBool:
      n = c.bool_contents_size();
      append_as<decltype(c.bool_contents()), uint8_t>(c.bool_contents(), out);
      break;
    case DType::kInt8:
      n = c.int_contents_size();
      append_as<decltype(c.int_contents()), int8_t>(c.int_contents(), out);
      break;
    case DType::kInt16:
      n = c.int_contents_size();
      append_as<decltype(c.int_contents()), int16_t>(c.int_contents(), out);
      break;
    case DType::kInt32:
      n = c.int_contents_size();
      append_as<decltype(c.int_contents()), int32_t>(c.int_contents(), out);
      break;
    case DType::kInt64:
      n = c.int64_contents_size();
      append_as<decltype(c.int64_contents()), int64_t>(c.int64_contents(), out);
      break;
    case DType::kUInt8:
      n = c.uint_contents_size();
      append_as<decltype(c.uint_contents()), uint8_t>(c.uint_contents(), out);
      break;
    case DType::kUInt16:
      n = c.uint_contents_size();
      append_as<decltype(c.uint_contents()), uint16_t>(c.uint_contents(), out);
      break;
    case DType::kUInt32:
      n = c.uint_contents_size();
      append_as<decltype(c.uint_contents()), uint32_t>(c.uint_contents(), out);
      break;
    case DType::kUInt64:
      n = c.uint64_contents_size();
      append_as<decltype(c.uint64_contents()), uint64_t>(c.uint64_contents(), out);
      break;
    case DType::kFloat32:
      n = c.fp32_contents_size();
      append_as<decltype(c.fp32_contents()), float>(c.fp32_contents(), out);
      break;
    case DType::kFloat64:
      n = c.fp64_contents_size();
      append_as<decltype(c.fp64_contents()), double>(c.fp64_contents(), out);
      break;
    default:
      return errors::InvalidArgument(
          "input '{}': {} data must come as raw_input_contents (the protocol has no typed "
          "contents for it)",
          in.name(), datatype_name(dtype));
  }
  if (n != numel)
    return errors::InvalidArgument(
        "input '{}': its contents hold {} values, but its shape has {} elements", in.name(), n,
        numel);
  return OkStatus();
}

Result<RunRequest> from_request(const pb::ModelInferRequest& req) {
  RunRequest run;
  run.model = req.model_name();
  run.version = req.model_version();
  const bool raw = req.raw_input_contents_size() > 0;
  if (raw && req.raw_input_contents_size() != req.inputs_size())
    return errors::InvalidArgument(
        "raw_input_contents has {} entries, but the request has {} inputs (one each, in order)",
        req.raw_input_contents_size(), req.inputs_size());
  for (int i = 0; i < req.inputs_size(); ++i) {
    const auto& in = req.inputs(i);
    Tensor t;
    t.name = in.name();
    auto dtype = datatype_from_name(in.datatype());
    if (!dtype)
      return errors::InvalidArgument(
          "input '{}': unknown or unsupported datatype '{}' (tensord "
          "takes {})",
          in.name(), in.datatype(), datatype_names());
    t.dtype = *dtype;
    t.shape.assign(in.shape().begin(), in.shape().end());
    for (int64_t d : t.shape)
      if (d < 0)
        return errors::InvalidArgument("input '{}': negative dimension {} in its shape", in.name(),
                                       d);
    auto bytes = checked_byte_size(t.dtype, t.shape);
    if (!bytes.ok()) return bytes.status().with_context("input '" + in.name() + "'");
    if (raw) {
      if (in.has_contents())
        return errors::InvalidArgument(
            "input '{}' has contents while the request uses raw_input_contents (one or the "
            "other)",
            in.name());
      t.data = req.raw_input_contents(i);
    } else {
      TD_RETURN_IF_ERROR(contents_to_bytes(in, t.dtype, shape_numel(t.shape), &t.data));
    }
    run.inputs.push_back(std::move(t));
  }
  for (const auto& o : req.outputs()) run.outputs.push_back(o.name());
  return run;
}

void to_metadata(const ValueInfo& v, pb::ModelMetadataResponse::TensorMetadata* m) {
  m->set_name(v.name);
  m->set_datatype(datatype_name(v.type.dtype));
  for (int64_t d : v.type.shape) m->add_shape(d);
}

class GrpcService final : public pb::GRPCInferenceService::Service {
 public:
  GrpcService(std::shared_ptr<NamedModelRunner> runner,
              std::function<Result<std::string>(grpc::ServerContextBase*)> tenant_of)
      : runner_(std::move(runner)), tenant_of_(std::move(tenant_of)) {}

  grpc::Status ServerLive(grpc::ServerContext* ctx, const pb::ServerLiveRequest*,
                          pb::ServerLiveResponse* resp) override {
    auto t = tenant_of_(ctx);
    if (!t.ok()) return to_grpc(t.status());
    resp->set_live(true);
    return grpc::Status::OK;
  }
  grpc::Status ServerReady(grpc::ServerContext* ctx, const pb::ServerReadyRequest*,
                           pb::ServerReadyResponse* resp) override {
    auto t = tenant_of_(ctx);
    if (!t.ok()) return to_grpc(t.status());
    resp->set_ready(runner_->server_ready());
    return grpc::Status::OK;
  }
  grpc::Status ModelReady(grpc::ServerContext* ctx, const pb::ModelReadyRequest* req,
                          pb::ModelReadyResponse* resp) override {
    auto t = tenant_of_(ctx);
    if (!t.ok()) return to_grpc(t.status());
    auto m = runner_->find(req->name(), req->version());
    if (!m.ok()) return to_grpc(m.status());
    resp->set_ready(m->ready);
    return grpc::Status::OK;
  }
  grpc::Status ServerMetadata(grpc::ServerContext* ctx, const pb::ServerMetadataRequest*,
                              pb::ServerMetadataResponse* resp) override {
    auto t = tenant_of_(ctx);
    if (!t.ok()) return to_grpc(t.status());
    resp->set_name("tensord");
    resp->set_version(kVersion);
    resp->add_extensions("binary_tensor_data");  // (over HTTP)
    return grpc::Status::OK;
  }
  grpc::Status ModelMetadata(grpc::ServerContext* ctx, const pb::ModelMetadataRequest* req,
                             pb::ModelMetadataResponse* resp) override {
    auto t = tenant_of_(ctx);
    if (!t.ok()) return to_grpc(t.status());
    auto m = runner_->find(req->name(), req->version());
    if (!m.ok()) return to_grpc(m.status());
    if (!m->ready)
      return to_grpc(errors::FailedPrecondition("model '{}' is not ready: it failed to load: {}",
                                                m->name, m->reason));
    resp->set_name(m->name);
    resp->add_versions("1");
    resp->set_platform("onnx");
    for (const auto& v : m->inputs) to_metadata(v, resp->add_inputs());
    for (const auto& v : m->outputs) to_metadata(v, resp->add_outputs());
    return grpc::Status::OK;
  }
  grpc::Status ModelInfer(grpc::ServerContext* ctx, const pb::ModelInferRequest* req,
                          pb::ModelInferResponse* resp) override {
    auto t = tenant_of_(ctx);
    if (!t.ok()) return to_grpc(t.status());
    auto run = from_request(*req);
    if (!run.ok()) return to_grpc(run.status());
    run->tenant = *t;
    const std::shared_ptr<CancelToken> call = call_token(ctx);
    run->call = call;
    auto result = runner_->run(std::move(*run));
    call->disarm();  // (its poll reads the call's context)
    if (!result.ok()) return to_grpc(result.status());
    resp->set_model_name(result->model);
    resp->set_model_version(result->version);
    resp->set_id(req->id());
    for (Tensor& o : result->outputs) {
      auto* out = resp->add_outputs();
      out->set_name(o.name);
      out->set_datatype(datatype_name(o.dtype));
      for (int64_t d : o.shape) out->add_shape(d);
      resp->add_raw_output_contents(std::move(o.data));
    }
    return grpc::Status::OK;
  }

 private:
  // The call's deadline and cancellation (the client went away), as the broker's own calls.
  static std::shared_ptr<CancelToken> call_token(grpc::ServerContext* ctx) {
    auto token = std::make_shared<CancelToken>();
    const auto deadline = ctx->deadline();
    const auto now = std::chrono::system_clock::now();
    if (deadline < now + std::chrono::hours(24 * 365))
      token->set_deadline(std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::max(deadline - now, decltype(deadline - now){0})));
    token->poll = [ctx] {
      return ctx->IsCancelled() ? Status(StatusCode::kCancelled,
                                         "cancelled: the client cancelled the call or went away")
                                : OkStatus();
    };
    return token;
  }

  std::shared_ptr<NamedModelRunner> runner_;
  std::function<Result<std::string>(grpc::ServerContextBase*)> tenant_of_;
};

}  // namespace

std::unique_ptr<grpc::Service> make_grpc_service(
    std::shared_ptr<NamedModelRunner> runner,
    std::function<Result<std::string>(grpc::ServerContextBase*)> tenant_of) {
  return std::make_unique<GrpcService>(std::move(runner), std::move(tenant_of));
}

}  // namespace tensord::rpc::kserve
