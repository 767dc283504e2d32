// LocalClient: the Client interface over an Engine in this process.
#pragma once

#include <memory>
#include <string>

#include "engine/engine.h"
#include "tensord/client.h"

namespace tensord {

class LocalClient final : public Client {
 public:
  // Opens a session on `engine` (closed when the client is destroyed).
  // `compile`: how execute() and load() compile (fuse = false: reference kernels only).
  // `models_dir`: named models (open_model), loaded into the engine on first use; empty =
  // TENSORD_MODELS.
  explicit LocalClient(std::shared_ptr<Engine> engine, int64_t memory_limit = 0,
                       CompileOptions compile = {}, std::string models_dir = "");
  ~LocalClient() override;

  Result<std::vector<DeviceInfo>> devices() override;
  std::string default_device() override;
  Result<TensorHandle> upload(const TensorView& src, const std::string& device) override;
  Result<HostTensor> read(TensorHandle h) override;
  Result<TensorType> read_into(TensorHandle h, void* dst, size_t room) override;
  Status wait(TensorHandle h) override;
  Result<TensorInfo> info(TensorHandle h) override;
  Result<std::vector<TensorHandle>> execute(const Graph& graph,
                                            const std::vector<TensorHandle>& inputs,
                                            const std::string& device) override;
  Result<TensorHandle> copy(TensorHandle h, const std::string& device) override;
  Status release(TensorHandle h) override;
  Result<ModelHandle> load(const Graph& graph, const std::string& device) override;
  Result<std::vector<TensorHandle>> run(ModelHandle model,
                                        const std::vector<TensorHandle>& inputs) override;
  Status unload(ModelHandle model) override;
  Result<std::vector<TensorHandle>> run_on(ModelHandle model,
                                           const std::vector<TensorHandle>& inputs,
                                           const std::string& device) override;
  Result<ModelHandle> open_model(const std::string& name, ModelInfo* info = nullptr) override;
  Result<std::vector<ModelInfo>> list_models() override;
  ClientStats stats() override;
  Result<TensorHandle> upload_external(const TensorView& src, const std::string& device,
                                       std::shared_ptr<void> keepalive) override;
  Result<HostMapping> map_host(TensorHandle h) override;
  Result<CudaMapping> map_cuda(TensorHandle h) override { return engine_->map_cuda(session_, h); }
  Result<TensorHandle> upload_cuda(const TensorView& src, const std::string& device) override;
  Result<TensorType> read_into_cuda(TensorHandle h, void* dst, size_t room) override;

  Engine& engine() { return *engine_; }
  SessionId session() const { return session_; }

 private:
  std::shared_ptr<Engine> engine_;
  SessionId session_;
  CompileOptions compile_;
  std::string models_dir_;
  Status load_models();  // the models folder into the engine, once per engine
  std::atomic<int64_t> executes_{0}, uploads_{0}, downloads_{0}, copies_{0}, runs_{0};
};

}  // namespace tensord
