// The gRPC method handlers that are not transfers, regions or sessions: handshake, devices,
// execute, loaded models, waits, copies.
#include "rpc/server_internal.h"

#include <algorithm>

#include "core/log.h"
#include "onnx/onnx_import.h"
#include "tensord/version.h"

namespace tensord::rpc::server_impl {

namespace {

constexpr int64_t kMaxGraphBytes = (int64_t{2} << 30) - 1;  // protobuf's message limit

// An ONNX file's bytes sent by a client -> the graph, with the C++ importer. Only the bytes
// count: external data files are refused (the importer looks nothing up without a folder, and
// a client must not make the broker read its files). The graph gets the same bounds as one
// sent as a Graph.
Result<onnx::Model> import_onnx(const std::string& bytes) {
  onnx::ImportOptions options;
  const GraphLimits limits;
  options.max_subgraph_depth = limits.max_depth;
  options.max_nodes = limits.max_nodes;
  auto model = onnx::import_bytes(bytes, "load model: the ONNX file sent", /*base_dir=*/"", options);
  if (!model.ok()) {
    Status s = model.status();
    if (s.code() == StatusCode::kInvalidArgument &&
        s.message().find("external data") != std::string::npos)
      return Status(s.code(),
                    s.message() +
                        " (a broker takes self-contained ONNX files only: save the model with "
                        "its weights inside the file, e.g. onnx.save_model(model, path, "
                        "save_as_external_data=False), or run it with a local client)");
    return s;
  }
  if (Status s = check_graph_limits(model->graph); !s.ok())
    return s.with_context("load model: the ONNX file sent");
  return model;
}

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

RequestBreakdown::RequestBreakdown(grpc::ServerContextBase* ctx) {
  const auto& md = ctx->client_metadata();
  if (md.find(kBreakdownKey) == md.end()) return;
  ctx_ = ctx;
  asked_ = true;
  trace_ = std::make_shared<CallTrace>();
  start_ = steady_ns();
}

RequestBreakdown::RequestBreakdown(bool asked) : asked_(asked) {
  if (!asked) return;
  trace_ = std::make_shared<CallTrace>();
  start_ = steady_ns();
}

void RequestBreakdown::stamp(int64_t* at) {
  if (asked_) *at = steady_ns();
}

// Phases in microseconds; a phase the call did not reach is 0. With the work run on the
// handler's thread there is no hand-off; with it queued, "outputs" includes the wake-up of
// the handler's thread after the run.
std::string RequestBreakdown::text() const {
  if (!asked_) return "";
  const int64_t end = steady_ns();
  const int64_t started = trace_->started_ns.load(std::memory_order_relaxed);
  const int64_t finished = trace_->finished_ns.load(std::memory_order_relaxed);
  const bool here = trace_->on_caller.load(std::memory_order_relaxed);
  auto span = [](int64_t from, int64_t to) {
    return from > 0 && to > from ? static_cast<double>(to - from) / 1e3 : 0.0;
  };
  const int64_t ready = parsed_ > 0 ? parsed_ : session_;
  const int64_t answered = answered_ > 0 ? answered_ : end;
  const double prepare = span(ready, here && started > 0 ? started : submitted_);
  const double handoff = here ? 0.0 : span(submitted_, started);
  return fmt::format(
      "session={:.1f} parse={:.1f} prepare={:.1f} handoff={:.1f} run={:.1f} "
      "outputs={:.1f} handler={:.1f} entry_ns={} exit_ns={}",
      span(start_, session_), span(session_, parsed_), prepare, handoff, span(started, finished),
      span(finished, answered), span(start_, end), start_, end);
}

RequestBreakdown::~RequestBreakdown() {
  if (ctx_) ctx_->AddTrailingMetadata(kBreakdownKey, text());
}

grpc::Status Service::Handshake(grpc::ServerContext* ctx, const v1::HandshakeRequest* req,
                                v1::HandshakeResponse* resp) {
  if (Status a = check_token(ctx); !a.ok()) return fail(ctx, a);
  resp->set_server_version(kVersion);
  resp->set_protocol_version(kProtocolVersion);
  for (const auto& d : visible_devices()) to_proto(d, resp->add_devices());
  auto dd = engine_->default_device();
  if (dd.ok()) resp->set_default_device(*dd);
  resp->set_host_id(host_id_);
  resp->set_shared_memory(region_channel_ != nullptr);
  if (region_channel_) resp->set_region_socket(region_channel_->name());
  resp->set_run_channel(region_channel_ != nullptr && channels_stop_fd_ >= 0);
  resp->set_max_message_bytes(options_.max_message_bytes > 0 ? options_.max_message_bytes
                                                             : kMaxMessageBytes);
  resp->set_onnx_models(true);
  for (const auto& d : engine_->devices())
    if (d.kind == "cuda") resp->set_cuda_ipc(true);
  resp->set_max_model_bytes(options_.max_model_bytes > 0 ? options_.max_model_bytes
                                                         : kMaxGraphBytes);
  return grpc::Status::OK;
}

// The devices as a client may see them: with tenants (a token file), how much of a device
// is in use — and its high-water mark — is other tenants' business, so both read 0.
std::vector<DeviceInfo> Service::visible_devices() const {
  std::vector<DeviceInfo> devices = engine_->devices();
  if (tenants_->required())
    for (auto& d : devices) d.memory_in_use = d.memory_peak = 0;
  return devices;
}

grpc::Status Service::ListDevices(grpc::ServerContext* ctx, const v1::ListDevicesRequest* req,
                                  v1::ListDevicesResponse* resp) {
  if (Status a = check_token(ctx); !a.ok()) return fail(ctx, a);
  for (const auto& d : visible_devices()) to_proto(d, resp->add_devices());
  auto dd = engine_->default_device();
  if (dd.ok()) resp->set_default_device(*dd);
  return grpc::Status::OK;
}

grpc::Status Service::Echo(grpc::ServerContext* ctx, const v1::EchoMessage* req,
                           v1::EchoMessage* resp) {
  if (Status a = check_token(ctx); !a.ok()) return fail(ctx, a);
  *resp = *req;
  return grpc::Status::OK;
}

grpc::Status Service::Wait(grpc::ServerContext* ctx, const v1::HandleRequest* req,
                           v1::WaitResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  auto call = call_token(ctx);
  return fail(ctx, engine_->wait(g.engine_session(), req->handle(), call.get()));
}

grpc::Status Service::Info(grpc::ServerContext* ctx, const v1::HandleRequest* req,
                           v1::InfoResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  auto call = call_token(ctx);
  auto info = engine_->info(g.engine_session(), req->handle(), call.get());
  if (!info.ok()) return fail(ctx, info.status());
  to_proto(info->type, resp->mutable_type());
  resp->set_device(info->device);
  return grpc::Status::OK;
}

grpc::Status Service::Execute(grpc::ServerContext* ctx, const v1::ExecuteRequest* req,
                              v1::ExecuteResponse* resp) {
  RequestBreakdown breakdown(ctx);
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  breakdown.session_found();
  return fail(ctx, execute(g, *req, call_token(ctx), breakdown, resp));
}

// Execute's work, whichever way the call came (gRPC or the run channel).
Status Service::execute(const Guard& g, const v1::ExecuteRequest& req,
                        const std::shared_ptr<CancelToken>& call, RequestBreakdown& breakdown,
                        v1::ExecuteResponse* resp) {
  auto graph = from_proto(req.graph());
  if (!graph.ok()) return graph.status().with_context("execute");
  breakdown.parsed();
  for (uint64_t h : req.release())  // released by the client since its last call
    (void)engine_->release(g.engine_session(), h);
  std::vector<TensorHandle> inputs(req.inputs().begin(), req.inputs().end());
  // Deadline semantics: the work outlives the call (the client consumes its outputs in
  // later calls), so once the call has answered, its deadline no longer bounds the work
  // (only closing the session does). Until it answers — waiting for inline values, or
  // running the graph on this thread — the work stops at the call's deadline or when the
  // client goes away: the client never learns the output handles then, so nobody can want
  // the results; they are released (call_token, finish_submit).
  breakdown.attach(*call);
  call->arm();  // until the answer: the work stops at the deadline too
  Disarm disarm{call.get()};
  // Small results are waited for below: run here when the device is idle (no hand-off).
  auto out = engine_->execute(g.engine_session(), *graph, inputs, req.device(), {},
                              req.inline_max_bytes() > 0, call);
  breakdown.submitted();
  if (!out.ok()) return out.status();
  Status answer = finish_submit(g, *call, *out, req.inline_max_bytes(), resp->mutable_outputs(),
                                resp->mutable_values());
  breakdown.answered();
  return answer;
}

grpc::Status Service::LoadModel(grpc::ServerContext* ctx,
                                grpc::ServerReader<v1::LoadModelChunk>* reader,
                                v1::LoadModelResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  v1::LoadModelChunk chunk;
  if (!reader->Read(&chunk) || !chunk.has_header())
    return fail(ctx, errors::InvalidArgument(
                         "load model: the first message must carry the header (device, "
                         "graph_bytes)"));
  const v1::LoadModelHeader header = chunk.header();
  const bool onnx = header.format() == v1::MODEL_FORMAT_ONNX;
  if (!onnx && header.format() != v1::MODEL_FORMAT_GRAPH)
    return fail(ctx, errors::InvalidArgument(
                         "load model: unknown model format {} in the header (0 = a tensord "
                         "Graph, 1 = an ONNX file)",
                         static_cast<int>(header.format())));
  const char* what = onnx ? "the ONNX file" : "the graph";
  const int64_t total = header.graph_bytes();
  if (total < 0 || total > kMaxGraphBytes)
    return fail(ctx, errors::InvalidArgument(
                         "load model: graph_bytes {} is outside [0, {}] (protobuf's limit)",
                         total, kMaxGraphBytes));
  // Refused on the header, before a byte is staged: the broker's model size limit, and the
  // session's memory (the staging buffer counts against it while the graph arrives).
  if (options_.max_model_bytes > 0 && total > options_.max_model_bytes)
    return fail(ctx, errors::ResourceExhausted(
                         "load model: {} takes {} bytes, over the broker's limit "
                         "(tensord serve --max-model-bytes {})",
                         what, total, options_.max_model_bytes));
  if (Status c = g.charge(total, "load model"); !c.ok()) return fail(ctx, c);
  struct Uncharge {
    const Guard& g;
    int64_t n;
    ~Uncharge() { g.uncharge(n); }
  } uncharge{g, total};
  std::string bytes;
  try {
    bytes.reserve(static_cast<size_t>(total));
  } catch (const std::bad_alloc&) {
    return fail(ctx, errors::ResourceExhausted(
                         "load model: cannot stage {} bytes in the broker's host memory", total));
  }
  int64_t messages = 0;
  do {
    ++messages;
    if (messages > 1 && chunk.has_header())
      return fail(ctx,
                  errors::InvalidArgument("load model: message {} repeats the header", messages));
    if (static_cast<int64_t>(chunk.data().size()) > total - static_cast<int64_t>(bytes.size()))
      return fail(ctx, errors::InvalidArgument(
                           "load model: the header declares {} bytes, but the stream carries "
                           "more (after message {})",
                           total, messages));
    bytes += chunk.data();
  } while (reader->Read(&chunk));
  if (ctx->IsCancelled())
    return fail(ctx, Status(StatusCode::kCancelled, "load model: the client cancelled"));
  if (static_cast<int64_t>(bytes.size()) != total)
    return fail(ctx, errors::InvalidArgument(
                         "load model: the header declares {} bytes, but the stream carried {}",
                         total, bytes.size()));
  if (onnx) {
    auto model = import_onnx(bytes);
    if (!model.ok()) return fail(ctx, model.status());
    bytes.clear();
    bytes.shrink_to_fit();
    resp->set_opset(model->opset);
    resp->set_ir_version(model->ir_version);
    resp->set_producer(model->producer);
    return finish_load(ctx, g, model->graph, header.device(), resp);
  }
  v1::Graph proto;
  if (!proto.ParseFromString(bytes))
    return fail(
        ctx, errors::InvalidArgument(
                 "load model: the {} bytes sent are not a serialized tensord.v1.Graph", total));
  bytes.clear();
  bytes.shrink_to_fit();
  auto graph = from_proto(proto);
  if (!graph.ok()) return fail(ctx, graph.status().with_context("load model"));
  proto.Clear();
  return finish_load(ctx, g, *graph, header.device(), resp);
}

grpc::Status Service::LoadModelInline(grpc::ServerContext* ctx, const v1::LoadModelRequest* req,
                                      v1::LoadModelResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  auto graph = from_proto(req->graph());
  if (!graph.ok()) return fail(ctx, graph.status().with_context("load model"));
  return finish_load(ctx, g, *graph, req->device(), resp);
}

grpc::Status Service::RunModel(grpc::ServerContext* ctx, const v1::RunModelRequest* req,
                               v1::RunModelResponse* resp) {
  RequestBreakdown breakdown(ctx);
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  breakdown.session_found();
  return fail(ctx, run_model(g, *req, call_token(ctx), breakdown, resp));
}

// RunModel's work, whichever way the call came (gRPC or the run channel).
Status Service::run_model(const Guard& g, const v1::RunModelRequest& req,
                          const std::shared_ptr<CancelToken>& call, RequestBreakdown& breakdown,
                          v1::RunModelResponse* resp) {
  for (uint64_t h : req.release())  // released by the client since its last call
    (void)engine_->release(g.engine_session(), h);
  std::vector<TensorHandle> inputs(req.inputs().begin(), req.inputs().end());
  // When the answer waits for the outputs (inline values) and the device is idle, the model
  // runs on this thread, as Execute's graphs do: no hand-off to the device's runner and back
  // (two thread wake-ups per request). The cpu pool makes any thread a region's thread 0, so
  // this starts no thread team of its own. Otherwise it is queued on the device's runners.
  breakdown.attach(*call);
  call->arm();
  Disarm disarm{call.get()};
  // Named models go through the runner (per-model counters; dynamic batching where their
  // config.json asks for it); run_on (a device named) and a session's own models as before.
  Result<std::vector<TensorHandle>> out = errors::Unavailable("not run");
  if (req.device().empty() && !engine_->named_model_of(g.engine_session(), req.model()).empty()) {
    out = runner_->run(g.engine_session(), g.tenant(), req.model(), inputs, call);
  } else {
    out = engine_->run(g.engine_session(), req.model(), inputs,
                       req.inline_max_bytes() > 0 && req.device().empty(), call, req.device());
  }
  breakdown.submitted();
  if (!out.ok()) return out.status();
  Status answer = finish_submit(g, *call, *out, req.inline_max_bytes(), resp->mutable_outputs(),
                                resp->mutable_values());
  breakdown.answered();
  return answer;
}

grpc::Status Service::UnloadModel(grpc::ServerContext* ctx, const v1::ModelRequest* req,
                                  v1::UnloadModelResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  return fail(ctx, engine_->unload(g.engine_session(), req->model()));
}

grpc::Status Service::ListModels(grpc::ServerContext* ctx, const v1::ListModelsRequest* req,
                                 v1::ListModelsResponse* resp) {
  if (Status a = check_token(ctx); !a.ok()) return fail(ctx, a);
  for (const ModelInfo& m : engine_->named_models()) to_proto(m, resp->add_models());
  return grpc::Status::OK;
}

// A named model's handle in the session: nothing is loaded or charged (the broker holds the
// model once, for every session).
grpc::Status Service::OpenModel(grpc::ServerContext* ctx, const v1::OpenModelRequest* req,
                                v1::OpenModelResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  ModelInfo info;
  auto model = engine_->open_named_model(g.engine_session(), req->name(), &info);
  if (!model.ok()) return fail(ctx, model.status());
  resp->set_model(*model);
  to_proto(info, resp->mutable_info());
  return grpc::Status::OK;
}

// Model control: operators only, on a broker started with --model-control.
Status Service::check_model_control(grpc::ServerContextBase* ctx, const char* what) const {
  bool is_operator = false;
  auto tenant = tenants_->authenticate(ctx->client_metadata(), &is_operator);
  if (!tenant.ok()) return tenant.status();
  if (!options_.model_control || options_.models_dir.empty())
    return errors::FailedPrecondition(
        "{}: model control is off on this broker (start it with `tensord serve --models DIR "
        "--model-control`)",
        what);
  if (!is_operator)
    return errors::PermissionDenied(
        "{}: tenant '{}' may not load or unload models (an operator's token may: \"operator "
        "NAME:TOKEN\" in the broker's --token-file)",
        what, *tenant);
  return OkStatus();
}

grpc::Status Service::LoadNamedModel(grpc::ServerContext* ctx, const v1::NamedModelRequest* req,
                                     v1::NamedModelResponse* resp) {
  if (Status a = check_model_control(ctx, "LoadNamedModel"); !a.ok()) return fail(ctx, a);
  std::lock_guard<std::mutex> lock(model_control_mu_);
  std::map<std::string, ModelConfig> configs;
  auto loaded = load_named_model(*engine_, options_.models_dir, req->name(), &configs);
  // What loaded serves, its batchers afresh. A failed reload loaded nothing (`configs` is
  // empty): the model it leaves serving keeps its batchers and configuration.
  if (loaded.ok() || !configs.empty()) runner_->replace_models(req->name(), configs);
  if (loaded.ok()) runner_->start(req->name());
  if (!loaded.ok())
    return fail(ctx, loaded.status().with_context("loading model '" + req->name() + "'"));
  log::info("model control: loaded '" + req->name() + "' (" + std::to_string(loaded->size()) +
            " entries)");
  for (const ModelInfo& m : *loaded) to_proto(m, resp->add_models());
  return grpc::Status::OK;
}

grpc::Status Service::UnloadNamedModel(grpc::ServerContext* ctx, const v1::NamedModelRequest* req,
                                       v1::NamedModelResponse* resp) {
  (void)resp;
  if (Status a = check_model_control(ctx, "UnloadNamedModel"); !a.ok()) return fail(ctx, a);
  std::lock_guard<std::mutex> lock(model_control_mu_);
  const std::vector<std::string> removed = engine_->remove_named_models(req->name());
  if (removed.empty()) {
    std::string names;
    for (const ModelInfo& m : engine_->named_models())
      names += (names.empty() ? "'" : ", '") + m.name + "'";
    return fail(ctx, errors::NotFound("UnloadNamedModel: no model named '{}' is loaded{}",
                                      req->name(),
                                      names.empty() ? "" : " (the models are " + names + ")"));
  }
  runner_->replace_models(req->name(), {});
  log::info("model control: unloaded '" + req->name() + "'");
  return grpc::Status::OK;
}

grpc::Status Service::Copy(grpc::ServerContext* ctx, const v1::CopyRequest* req,
                           v1::CopyResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  auto h = engine_->copy(g.engine_session(), req->handle(), req->device());
  if (!h.ok()) return fail(ctx, h.status());
  resp->set_handle(*h);
  return grpc::Status::OK;
}

grpc::Status Service::Release(grpc::ServerContext* ctx, const v1::HandleRequest* req,
                              v1::ReleaseResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  return fail(ctx, engine_->release(g.engine_session(), req->handle()));
}

// Errors the broker raises are marked, so a client can tell them from transport failures.
grpc::Status Service::fail(grpc::ServerContextBase* ctx, const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  ctx->AddTrailingMetadata(kErrorKey, "1");
  return to_grpc(s);
}

// A call's token (Engine waits give up when it fires; work submitted with it stops): the
// client's gRPC deadline, if any, and a poll of "the client cancelled or went away".
std::shared_ptr<CancelToken> Service::call_token(grpc::ServerContextBase* ctx) {
  auto token = std::make_shared<CancelToken>();
  const auto deadline = ctx->deadline();
  const auto now = std::chrono::system_clock::now();
  if (deadline < now + std::chrono::hours(24 * 365))
    token->set_deadline(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::max(deadline - now, decltype(deadline - now){0})));
  // Only waits made in this call poll it (on this thread), never the work.
  token->poll = [ctx] {
    return ctx->IsCancelled() ? Status(StatusCode::kCancelled,
                                       "cancelled: the client cancelled the call or went away")
                              : OkStatus();
  };
  return token;
}

// The answer of Execute / RunModel: the output handles and the small values inline. When
// the call gave up while waiting for them (its token fired: deadline, client gone), its work
// is cancelled and the outputs released, since the client will never see their handles.
Status Service::finish_submit(const Guard& g, CancelToken& call,
                              const std::vector<TensorHandle>& out, int64_t inline_max_bytes,
                              google::protobuf::RepeatedField<uint64_t>* outputs,
                              google::protobuf::RepeatedPtrField<v1::InlineValue>* values) {
  outputs->Assign(out.begin(), out.end());
  add_inline_values(g, out, inline_max_bytes, values, &call);
  if (Status s = call.cancelled_status(); !s.ok()) {
    for (TensorHandle h : out) (void)engine_->release(g.engine_session(), h);
    return s;
  }
  return OkStatus();
}

void Service::add_inline_values(const Guard& g, const std::vector<TensorHandle>& outputs,
                                int64_t max_bytes,
                                google::protobuf::RepeatedPtrField<v1::InlineValue>* dst,
                                CancelToken* call) {
  if (max_bytes <= 0) return;
  int64_t budget = std::min<int64_t>(max_bytes, kMaxInlineBytes);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (call && call->cancelled()) return;  // the call gave up: see finish_submit
    auto info = engine_->info(g.engine_session(), outputs[i], call);
    v1::InlineValue v;
    v.set_index(static_cast<int32_t>(i));
    if (!info.ok()) {
      v.set_code(static_cast<int32_t>(info.status().code()));
      v.set_message(info.status().message());
      *dst->Add() = std::move(v);
      continue;
    }
    auto size = checked_byte_size(info->type.dtype, info->type.shape);
    if (!size.ok() || *size > budget) continue;  // data-dependent or too large: by handle
    // Read straight into the answer's bytes (no HostTensor in between).
    std::string* data = v.mutable_value()->mutable_data();
    data->resize(static_cast<size_t>(*size));
    auto t = engine_->read_into(g.engine_session(), outputs[i], data->data(), data->size(),
                                call);
    v.set_device(info->device);
    if (!t.ok()) {
      v.clear_value();
      v.set_code(static_cast<int32_t>(t.status().code()));
      v.set_message(t.status().message());
    } else if (auto n = checked_byte_size(t->dtype, t->shape); !n.ok() || *n != *size) {
      continue;  // not the size inferred before it ran: read by handle
    } else {
      budget -= *size;
      v.mutable_value()->set_dtype(static_cast<int32_t>(t->dtype));
      v.mutable_value()->mutable_shape()->Assign(t->shape.begin(), t->shape.end());
    }
    *dst->Add() = std::move(v);
  }
}

grpc::Status Service::finish_load(grpc::ServerContext* ctx, const Guard& g, const Graph& graph,
                                  const std::string& device, v1::LoadModelResponse* resp) {
  auto model = engine_->load(g.engine_session(), graph, device);
  if (!model.ok()) return fail(ctx, model.status());
  if (log::enabled(log::Level::kInfo)) {
    int64_t weights = 0;
    for (const auto& [name, t] : graph.initializers) weights += static_cast<int64_t>(t.nbytes());
    std::string on = device;
    if (on.empty())
      if (auto d = engine_->default_device(); d.ok()) on = *d;
    const auto& md = ctx->client_metadata();
    auto sid = md.find(kSessionKey);
    log::info("model loaded",
              {{"name", graph.name},
               {"nodes", static_cast<int64_t>(graph.nodes.size())},
               {"weights_bytes", weights},
               {"device", on},
               {"session", sid == md.end() ? std::string()
                                           : std::string(sid->second.data(),
                                                         std::min<size_t>(8, sid->second.size()))},
               {"peer", ctx->peer()}});
  }
  resp->set_model(*model);
  resp->set_name(graph.name);
  for (const auto& v : graph.inputs) {
    auto* dst = resp->add_inputs();
    dst->set_name(v.name);
    to_proto(v.type, dst->mutable_type());
  }
  for (const auto& v : graph.outputs) {
    auto* dst = resp->add_outputs();
    dst->set_name(v.name);
    to_proto(v.type, dst->mutable_type());
  }
  return grpc::Status::OK;
}

}  // namespace tensord::rpc::server_impl
