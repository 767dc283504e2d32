#include "client/local_client.h"

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "client/model_repository.h"
#include "core/errors.h"

namespace tensord {

LocalClient::LocalClient(std::shared_ptr<Engine> engine, int64_t memory_limit,
                         CompileOptions compile, std::string models_dir)
    : engine_(std::move(engine)),
      session_(engine_->open_session(memory_limit)),
      compile_(compile),
      models_dir_(std::move(models_dir)) {
  if (models_dir_.empty()) {
    const char* env = std::getenv("TENSORD_MODELS");
    if (env) models_dir_ = env;
  }
}

LocalClient::~LocalClient() { (void)engine_->close_session(session_); }

Result<std::vector<DeviceInfo>> LocalClient::devices() { return engine_->devices(); }

std::string LocalClient::default_device() {
  auto d = engine_->default_device();
  return d.ok() ? *d : std::string();
}

Result<TensorHandle> LocalClient::upload(const TensorView& src, const std::string& device) {
  uploads_++;
  return engine_->upload(session_, src, device);
}

Result<HostTensor> LocalClient::read(TensorHandle h) {
  downloads_++;
  return engine_->read(session_, h);
}

Result<TensorType> LocalClient::read_into(TensorHandle h, void* dst, size_t room) {
  downloads_++;
  return engine_->read_into(session_, h, dst, room);
}

Status LocalClient::wait(TensorHandle h) { return engine_->wait(session_, h); }

Result<TensorInfo> LocalClient::info(TensorHandle h) { return engine_->info(session_, h); }

Result<std::vector<TensorHandle>> LocalClient::execute(const Graph& graph,
                                                       const std::vector<TensorHandle>& inputs,
                                                       const std::string& device) {
  executes_++;
  return engine_->execute(session_, graph, inputs, device, compile_);
}

Result<TensorHandle> LocalClient::copy(TensorHandle h, const std::string& device) {
  copies_++;
  return engine_->copy(session_, h, device);
}

Status LocalClient::release(TensorHandle h) { return engine_->release(session_, h); }

Result<ModelHandle> LocalClient::load(const Graph& graph, const std::string& device) {
  return engine_->load(session_, graph, device, compile_);
}

Result<std::vector<TensorHandle>> LocalClient::run(ModelHandle model,
                                                   const std::vector<TensorHandle>& inputs) {
  runs_++;
  return engine_->run(session_, model, inputs);
}

Result<std::vector<TensorHandle>> LocalClient::run_on(ModelHandle model,
                                                      const std::vector<TensorHandle>& inputs,
                                                      const std::string& device) {
  if (device.empty())
    return errors::InvalidArgument("run_on: no device given (run() runs on the model's own)");
  runs_++;
  return engine_->run(session_, model, inputs, false, nullptr, device);
}

Status LocalClient::unload(ModelHandle model) { return engine_->unload(session_, model); }

// The models folder is loaded into the engine by the first client that needs it (the
// process-wide engine is shared by every embedded client: once per engine and folder). The
// lock makes a second client wait for the load in progress instead of finding no models.
Status LocalClient::load_models() {
  if (models_dir_.empty()) return OkStatus();
  static std::mutex load_mu;
  std::lock_guard<std::mutex> lock(load_mu);
  std::error_code ec;
  std::string key = std::filesystem::weakly_canonical(models_dir_, ec).string();
  if (ec || key.empty()) key = models_dir_;
  if (!std::filesystem::is_directory(key, ec))
    return errors::FailedPrecondition(
        "named models: '{}' (LocalClientOptions::models_dir or TENSORD_MODELS) is not a folder "
        "of NAME/model.onnx",
        models_dir_);
  if (!engine_->claim_models_source(key)) return OkStatus();
  auto loaded = load_model_repository(*engine_, key);
  return loaded.ok() ? OkStatus() : loaded.status();
}

Result<ModelHandle> LocalClient::open_model(const std::string& name, ModelInfo* info) {
  TD_RETURN_IF_ERROR(load_models());
  return engine_->open_named_model(session_, name, info);
}

Result<std::vector<ModelInfo>> LocalClient::list_models() {
  TD_RETURN_IF_ERROR(load_models());
  return engine_->named_models();
}

Result<TensorHandle> LocalClient::upload_external(const TensorView& src,
                                                  const std::string& device,
                                                  std::shared_ptr<void> keepalive) {
  uploads_++;
  return engine_->upload_external(session_, src, device, std::move(keepalive));
}

// CUDA memory of this process: described by pointer (no IPC handle), copied device to device by
// the cuda device holding it (Engine::upload_foreign / read_into_foreign).
Result<TensorHandle> LocalClient::upload_cuda(const TensorView& src, const std::string& device) {
  TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(src.dtype, src.shape));
  if (bytes == 0) return upload(TensorView{src.dtype, src.shape, nullptr}, device);
  TD_ASSIGN_OR_RETURN(ForeignMemory m, export_device_memory(src.data, static_cast<size_t>(bytes), false));
  uploads_++;
  return engine_->upload_foreign(session_, src.dtype, src.shape, m, device);
}

Result<TensorType> LocalClient::read_into_cuda(TensorHandle h, void* dst, size_t room) {
  if (!dst || room == 0) return engine_->read_into(session_, h, nullptr, 0);  // the type alone
  TD_ASSIGN_OR_RETURN(ForeignMemory m, export_device_memory(dst, room, false));
  downloads_++;
  return engine_->read_into_foreign(session_, h, m);
}

Result<HostMapping> LocalClient::map_host(TensorHandle h) {
  // Not a transfer: the bytes are shared, so not counted as a download.
  return engine_->map_host(session_, h);
}

ClientStats LocalClient::stats() {
  return ClientStats{executes_.load(), uploads_.load(), downloads_.load(), copies_.load(),
                     runs_.load()};
}

Result<std::unique_ptr<Client>> make_local_client(const LocalClientOptions& options) {
  std::shared_ptr<Engine> engine;
  if (options.devices.empty() && options.default_device.empty() && !options.reference_kernels) {
    TD_ASSIGN_OR_RETURN(engine, Engine::shared());
  } else {
    EngineOptions eo = EngineOptions::from_env();
    if (!options.devices.empty()) eo.device_filter = options.devices;
    if (!options.default_device.empty()) eo.default_device = options.default_device;
    TD_ASSIGN_OR_RETURN(auto e, Engine::create(eo));
    engine = std::move(e);
  }
  CompileOptions compile;
  compile.fuse = !options.reference_kernels;
  return std::unique_ptr<Client>(
      new LocalClient(std::move(engine), 0, compile, options.models_dir));
}

}  // namespace tensord
