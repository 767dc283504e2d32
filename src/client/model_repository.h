// Named models from a folder (`tensord serve --models DIR`, TENSORD_MODELS for the embedded
// engine), in the layout of Triton's model repository, reduced to what tensord needs:
//
//   DIR/NAME/model.onnx     the model, an ONNX file (external data beside it is read too)
//   DIR/NAME/config.json    optional: device, max_batch_size, dynamic_batching, instances,
//                           inputs/outputs (see ModelConfig and docs/models.md)
//   DIR/NAME/V/model.onnx   version folders (V = 1, 2, ...): each is loaded as "NAME:V", and
//                           "NAME" names the newest; config.json stays in DIR/NAME
//
// Each model is imported and loaded once into the engine (Engine::add_named_model), shared by
// every session. Folders whose names start with '.' are skipped. A model that fails (no
// model.onnx, a corrupt file, an unsupported op, a bad config, an unknown device) does not
// stop the others: like Triton, it is listed as unavailable with the reason
// (Engine::add_unavailable_model), and opening it says why.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tensord/client.h"

namespace tensord {

// DIR/NAME/config.json. Unknown keys are refused, naming the nearest known one.
struct ModelConfig {
  std::vector<std::string> devices;  // "device": "cpu:0" or ["cpu:0", "cpu:1"]; empty = default
  int64_t max_batch_size = 0;        // rows one run may take (0: no batching)
  bool dynamic_batching = false;     // "dynamic_batching": {...} present
  std::vector<int64_t> preferred_batch_sizes;  // run at once when this many rows wait
  int64_t max_queue_delay_us = 0;    // how long the oldest request waits for others
  int instances = 0;                 // batches run at once, per device (0: the broker picks:
                                     // a cpu device's runners, else 1)
  // Shapes checked against the model's declared ones at load (dims -1: any).
  struct Tensor {
    std::string name;
    std::string dtype;  // "" = not checked
    std::vector<int64_t> dims;
  };
  std::vector<Tensor> inputs, outputs;
  int64_t version = 0;  // the version folder's number; 0 for a plain DIR/NAME/model.onnx
  std::string model;    // the model's name without the version ("NAME")
};

// Parses config.json's text; `file` names it in errors.
Result<ModelConfig> parse_model_config(const std::string& text, const std::string& file);

// Loads DIR's models into `engine`; returns each model's outcome (ready or not, with the
// reason), sorted by name. Errors only for the folder itself (missing, not a folder,
// unreadable): NOT_FOUND / INVALID_ARGUMENT, naming it. `configs` (optional) receives each
// loaded model's configuration by its engine name ("NAME" or "NAME:V"; aliases not repeated).
Result<std::vector<ModelInfo>> load_model_repository(
    Engine& engine, const std::string& dir, std::map<std::string, ModelConfig>* configs = nullptr);

// Model control (`tensord models load NAME`): loads DIR/NAME, or reloads it while it serves.
// Every file is imported and checked first; while NAME is loaded and ready, a reload is all or
// nothing (any failure returns it and leaves the loaded model serving), else the new versions
// replace the old at once and versions gone from the folder are removed. Sessions that opened
// the old model keep running it (Engine::add_named_model). Returns NAME's entries (NAME and
// NAME:V). INVALID_ARGUMENT for a name that is not a plain folder name, NOT_FOUND for no such
// folder. `configs` receives the loaded entries' configurations.
Result<std::vector<ModelInfo>> load_named_model(Engine& engine, const std::string& dir,
                                                const std::string& name,
                                                std::map<std::string, ModelConfig>* configs);

}  // namespace tensord
