#include "rpc/kserve.h"

#include <algorithm>
#include <set>

#include "core/errors.h"

namespace tensord::rpc::kserve {

namespace {

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypes[] = {
    {DType::kBool, "BOOL"},     {DType::kUInt8, "UINT8"},   {DType::kUInt16, "UINT16"},
    {DType::kUInt32, "UINT32"}, {DType::kUInt64, "UINT64"}, {DType::kInt8, "INT8"},
    {DType::kInt16, "INT16"},   {DType::kInt32, "INT32"},   {DType::kInt64, "INT64"},
    {DType::kFloat16, "FP16"},  {DType::kFloat32, "FP32"},  {DType::kFloat64, "FP64"},
    {DType::kBFloat16, "BF16"},
};

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string names_of(const std::vector<ValueInfo>& values) {
  std::string out;
  for (const auto& v : values) out += (out.empty() ? "'" : ", '") + v.name + "'";
  return out.empty() ? "none" : out;
}

}  // namespace

const char* datatype_name(DType t) {
  for (const auto& d : kDTypes)
    if (d.dtype == t) return d.name;
  return "UNDEFINED";
}

std::optional<DType> datatype_from_name(std::string_view name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return d.dtype;
  return std::nullopt;
}

const char* datatype_names() {
  return "BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BF16";
}

NamedModelRunner::NamedModelRunner(std::shared_ptr<Engine> engine, Options options)
    : engine_(std::move(engine)), options_(std::move(options)) {}

NamedModelRunner::~NamedModelRunner() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [tenant, id] : sessions_) (void)engine_->close_session(id);
  sessions_.clear();
}

bool NamedModelRunner::server_ready(std::string* why) const {
  return options_.ready ? options_.ready(why) : true;
}

Result<ModelInfo> NamedModelRunner::find(const std::string& model,
                                         const std::string& version) const {
  const std::vector<ModelInfo> models = engine_->named_models();
  for (const ModelInfo& m : models) {
    if (m.name != model) continue;
    if (!version.empty() && version != "1")
      return errors::NotFound(
          "model '{}' has no version '{}' (tensord's named models have one version, \"1\")", model,
          version);
    return m;
  }
  std::string names;
  for (const ModelInfo& m : models) names += (names.empty() ? "'" : ", '") + m.name + "'";
  return errors::NotFound("no model named '{}' on this broker (its models: {})", model,
                          names.empty() ? "none: serve a folder with --models DIR" : names);
}

Result<SessionId> NamedModelRunner::session_for(const std::string& tenant) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(tenant);
  if (it != sessions_.end()) return it->second;
  SessionOptions so;
  so.memory_limit = options_.session_memory_limit;
  so.tenant = tenant;
  so.tenant_memory_limit = options_.tenant_memory_limit;
  const SessionId id = engine_->open_session(so);
  sessions_.emplace(tenant, id);
  return id;
}

Result<RunResult> NamedModelRunner::run(RunRequest req) {
  TD_ASSIGN_OR_RETURN(ModelInfo info, find(req.model, req.version));
  if (!info.ready)
    return errors::FailedPrecondition("model '{}' is not ready: it failed to load: {}", info.name,
                                      info.reason);
  // The inputs, in the model's order, checked against what it declares.
  std::vector<const Tensor*> bound(info.inputs.size(), nullptr);
  for (const Tensor& t : req.inputs) {
    size_t k = 0;
    while (k < info.inputs.size() && info.inputs[k].name != t.name) ++k;
    if (k == info.inputs.size())
      return errors::InvalidArgument("model '{}' has no input '{}' (its inputs: {})", info.name,
                                     t.name, names_of(info.inputs));
    if (bound[k])
      return errors::InvalidArgument("input '{}' of model '{}' is given twice", t.name, info.name);
    const TensorType& want = info.inputs[k].type;
    if (want.dtype != DType::kUndefined && t.dtype != want.dtype)
      return errors::InvalidArgument("input '{}' of model '{}' is {}, but {} was given", t.name,
                                     info.name, datatype_name(want.dtype), datatype_name(t.dtype));
    bool shape_ok = want.shape.size() == t.shape.size();
    for (size_t d = 0; shape_ok && d < want.shape.size(); ++d)
      shape_ok = want.shape[d] < 0 || want.shape[d] == t.shape[d];
    for (int64_t d : t.shape)
      if (d < 0)
        return errors::InvalidArgument("input '{}': shape {} has a negative dimension", t.name,
                                       shape_text(t.shape));
    if (!shape_ok)
      return errors::InvalidArgument(
          "input '{}' of model '{}' has shape {}, but the model takes {} (-1: any size)", t.name,
          info.name, shape_text(t.shape), shape_text(want.shape));
    auto bytes = checked_byte_size(t.dtype, t.shape);
    if (!bytes.ok()) return bytes.status().with_context("input '" + t.name + "'");
    if (static_cast<int64_t>(t.data.size()) != *bytes)
      return errors::InvalidArgument(
          "input '{}': {} of shape {} takes {} bytes, but {} bytes were given", t.name,
          datatype_name(t.dtype), shape_text(t.shape), *bytes, t.data.size());
    bound[k] = &t;
  }
  for (size_t k = 0; k < bound.size(); ++k)
    if (!bound[k])
      return errors::InvalidArgument(
          "model '{}' needs input '{}' ({} {}), which is missing", info.name, info.inputs[k].name,
          datatype_name(info.inputs[k].type.dtype), shape_text(info.inputs[k].type.shape));
  // The outputs asked for (all by default), as indices into the model's.
  std::vector<size_t> wanted;
  if (req.outputs.empty()) {
    for (size_t k = 0; k < info.outputs.size(); ++k) wanted.push_back(k);
  } else {
    for (const std::string& name : req.outputs) {
      size_t k = 0;
      while (k < info.outputs.size() && info.outputs[k].name != name) ++k;
      if (k == info.outputs.size())
        return errors::NotFound("model '{}' has no output '{}' (its outputs: {})", info.name, name,
                                names_of(info.outputs));
      wanted.push_back(k);
    }
  }

  TD_ASSIGN_OR_RETURN(SessionId session, session_for(req.tenant));
  TD_ASSIGN_OR_RETURN(ModelHandle model, engine_->open_named_model(session, info.name));
  std::vector<TensorHandle> handles;
  struct Cleanup {
    Engine& engine;
    SessionId session;
    ModelHandle model;
    std::vector<TensorHandle>& handles;
    ~Cleanup() {
      for (TensorHandle h : handles) (void)engine.release(session, h);
      (void)engine.unload(session, model);
    }
  } cleanup{*engine_, session, model, handles};
  std::vector<TensorHandle> inputs;
  for (const Tensor* t : bound) {
    TensorView view{t->dtype, t->shape, t->data.data()};
    TD_ASSIGN_OR_RETURN(TensorHandle h, engine_->upload(session, view, info.device));
    handles.push_back(h);
    inputs.push_back(h);
  }
  if (req.call) req.call->arm();
  auto outs = options_.model_runner
                  ? options_.model_runner->run(session, req.tenant, model, inputs, req.call)
                  : engine_->run(session, model, inputs, /*run_here_if_idle=*/false, req.call);
  if (!outs.ok()) return outs.status().with_context("model '" + info.name + "'");
  handles.insert(handles.end(), outs->begin(), outs->end());
  RunResult result;
  result.model = info.name;
  result.version = "1";
  for (size_t k : wanted) {
    if (k >= outs->size())
      return errors::Internal("model '{}' returned {} outputs, {} declared", info.name,
                              outs->size(), info.outputs.size());
    auto host = engine_->read(session, (*outs)[k], req.call.get());
    if (!host.ok()) return host.status().with_context("model '" + info.name + "'");
    Tensor out;
    out.name = info.outputs[k].name;
    out.dtype = host->dtype();
    out.shape = host->shape();
    out.data.assign(static_cast<const char*>(host->data()), host->nbytes());
    result.outputs.push_back(std::move(out));
  }
  return result;
}

}  // namespace tensord::rpc::kserve
