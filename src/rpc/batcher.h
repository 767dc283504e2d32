// Named models served to many sessions (`tensord serve --models DIR`): every run of a named
// model goes through ModelRunner::run, which counts it per model and version, and, for a model
// whose config.json has "dynamic_batching", queues it with the runs of every session and
// tenant for the same model and version, concatenates the inputs along axis 0 up to
// max_batch_size rows (or what has come once the oldest waited max_queue_delay_microseconds),
// runs the batch once and splits the outputs back into each request's own session.
//
// - A request is batched only with requests whose inputs have the same dtypes and the same
//   dims after the first; one that differs, has more rows than max_batch_size, or inputs of
//   different first dims runs alone (in its own session, as without batching).
// - A batch that fails is run again one request at a time, so a bad request fails alone.
// - A request whose call is cancelled or passes its deadline leaves the queue at once (the
//   others wait on); one that leaves while its batch runs gets no outputs (the batch goes on).
// - Fairness: batches are filled round-robin over the tenants with requests waiting, starting
//   after the tenant served first last time, so one tenant's flood cannot crowd another out.
// - The batch runs in the runner's own engine session (charged to nobody, as named models'
//   weights are); its inputs are read to host memory, concatenated and uploaded, its outputs
//   read back and uploaded to each request's session (host copies: cheap beside a model run on
//   cpu; a cost on a GPU).
// - `instances` batches run at once per device of the config (one worker thread each).
// - Each batch size is a compiled form: when max_batch_size x devices passes the forms a
//   tenant may keep (TENSORD_NAMED_MODEL_FORMS, 16), batches are padded with zero rows up to a
//   power of two (or max_batch_size), so they do not recompile without end.
// - Model control (`tensord models load|unload`): replace_models retires a model's batchers;
//   requests already queued run on the version they were queued for, later ones on the new.
//   A session's handle opened before a reload runs the model it opened, alone. The counters
//   of a name carry over a reload and go with an unload.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/model_repository.h"
#include "engine/engine.h"

namespace tensord::rpc {

// What the runner counted for one model and version (the Prometheus families tensord_model_*).
struct ModelCounters {
  std::string model, version;  // version "" for a plain DIR/NAME/model.onnx
  int64_t requests = 0, failures = 0;
  int64_t queue_us = 0;    // time requests waited before their run started, in all
  int64_t compute_us = 0;  // time their runs took (a batch's counted once per batch)
  int64_t batches = 0;     // runs (a batch, or a request run alone)
  int64_t batch_rows = 0;  // rows of those runs, in all
  std::vector<int64_t> batch_size_counts;  // runs by rows, in kBatchBuckets (non-cumulative)
};
extern const std::vector<int64_t> kBatchBuckets;  // 1, 2, 4, ... 256; past the last: +Inf

class ModelRunner {
 public:
  // `configs`: the named models' configurations by engine name (load_model_repository).
  ModelRunner(std::shared_ptr<Engine> engine, std::map<std::string, ModelConfig> configs);
  ~ModelRunner();  // stops the workers; requests still queued fail UNAVAILABLE

  // THE entry point for running a named model: `model` is the session's handle of it
  // (Engine::open_named_model), `inputs` the session's tensors. Returns the session's new
  // output handles once they are computed (or the error of this request). `tenant` picks the
  // fairness queue ("" for none). `call`: the request's cancellation and deadline (may be
  // null). A handle that is not a named model's runs as Engine::run would, uncounted.
  Result<std::vector<TensorHandle>> run(SessionId session, const std::string& tenant,
                                        ModelHandle model, const std::vector<TensorHandle>& inputs,
                                        std::shared_ptr<CancelToken> call);

  // Model control: `model`'s entries ("model" and "model:V") take these configurations (none:
  // unloaded); their batchers are retired (they finish what is queued, then stop).
  void replace_models(const std::string& model, const std::map<std::string, ModelConfig>& configs);
  // Starts the batchers of `model`'s entries (every model's when empty) with dynamic batching
  // now rather than at their first request, and returns once their forms are compiled
  // (warm_forms): at the broker's start (before it serves) and after a load (before it
  // answers), as Triton warms a model before calling it ready.
  void start(const std::string& model = "");

  std::vector<ModelCounters> counters() const;
  // The counters in the Prometheus text format (families tensord_model_*; empty: no models).
  std::string prometheus() const;

  struct Request;
  struct Model;
  struct Stats;

 private:
  // The runner's model for the engine name and the load (`serial`) a session's handle runs;
  // `current` false: the handle is an older load's (it runs alone).
  std::shared_ptr<Model> model_for(const std::string& engine_name, uint64_t serial, bool* current);
  void retire_locked(const std::string& engine_name);  // under mu_
  void reap_locked();  // under mu_: frees retired models no worker or caller holds any more
  Result<std::vector<TensorHandle>> run_alone(Model& m, SessionId session, ModelHandle model,
                                              const std::vector<TensorHandle>& inputs,
                                              const std::string& device,
                                              std::shared_ptr<CancelToken> call, int64_t rows);
  // Where a worker runs its batches: instance k of every device runs in the runner's session
  // k, with that session's handle of the model. A session's work on one device runs one task
  // at a time, so instances on one device need sessions of their own to run side by side.
  struct Instance {
    SessionId session = 0;
    ModelHandle handle = 0;
  };
  void worker(Model* m, std::string device, Instance at);
  // Runs the model once at every batch size it may take on `device` (compiles each form
  // before the first request needs it).
  void warm_forms(Model& m, const std::string& device, Instance at);
  void run_batch(Model& m, const std::string& device, std::vector<std::shared_ptr<Request>> batch,
                 Instance at);
  void unload_instances(Model& m);  // every session's handle of the model
  int default_instances(const std::vector<std::string>& devices) const;

  std::shared_ptr<Engine> engine_;
  // The batches' own sessions, one per instance index (under mu_; opened when first needed).
  std::vector<SessionId> sessions_;
  mutable std::mutex mu_;
  // By engine name; created on first run. A caller inside run() holds its model too.
  std::map<std::string, std::shared_ptr<Model>> models_;
  std::vector<std::shared_ptr<Model>> retired_;  // replaced (their workers finish, then stop)
  std::map<std::string, std::shared_ptr<Stats>> stats_;  // by engine name, across reloads
  std::map<std::string, ModelConfig> configs_;
  std::atomic<bool> stop_{false};
};

}  // namespace tensord::rpc
