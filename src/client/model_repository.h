// Named models from a folder (`tensord serve --models DIR`, TENSORD_MODELS for the embedded
// engine), in the layout of Triton's model repository, reduced to what tensord needs:
//
//   DIR/NAME/model.onnx     the model, an ONNX file (external data beside it is read too)
//   DIR/NAME/config.json    optional: {"device": "cpu:1"}; without it, the default device
//
// Each model is imported and loaded once into the engine (Engine::add_named_model), shared by
// every session. Folders whose names start with '.' are skipped. A model that fails (no
// model.onnx, a corrupt file, an unsupported op, a bad config, an unknown device) does not
// stop the others: like Triton, it is listed as unavailable with the reason
// (Engine::add_unavailable_model), and opening it says why.
#pragma once

#include <string>
#include <vector>

#include "engine/engine.h"
#include "tensord/client.h"

namespace tensord {

// Loads DIR's models into `engine`; returns each model's outcome (ready or not, with the
// reason), sorted by name. Errors only for the folder itself (missing, not a folder,
// unreadable): NOT_FOUND / INVALID_ARGUMENT, naming it.
Result<std::vector<ModelInfo>> load_model_repository(Engine& engine, const std::string& dir);

}  // namespace tensord
