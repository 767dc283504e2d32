#include "client/model_repository.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/errors.h"
#include "onnx/onnx_import.h"

namespace tensord {
namespace {

namespace fs = std::filesystem;

// DIR/NAME/config.json -> the device named there ("" = the default device).
Result<std::string> read_config(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return errors::InvalidArgument("cannot read '{}'", file.string());
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return errors::InvalidArgument("'{}' is not a JSON object (expected {{\"device\": \"cpu:0\"}})",
                                   file.string());
  std::string device;
  for (const auto& [key, value] : j.items()) {
    if (key != "device")
      return errors::InvalidArgument("'{}': unknown key '{}' (the only key is \"device\")",
                                     file.string(), key);
    if (!value.is_string())
      return errors::InvalidArgument("'{}': \"device\" must be a string such as \"cpu:0\"",
                                     file.string());
    device = value.get<std::string>();
  }
  return device;
}

// One model folder -> the model loaded into the engine, or why not.
Status load_one(Engine& engine, const fs::path& folder, ModelInfo& info) {
  const fs::path file = folder / "model.onnx";
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    return errors::NotFound("no model.onnx in '{}' (a named model is DIR/NAME/model.onnx)",
                            folder.string());
  std::string device;
  if (fs::exists(folder / "config.json", ec)) {
    TD_ASSIGN_OR_RETURN(device, read_config(folder / "config.json"));
  }
  TD_ASSIGN_OR_RETURN(onnx::Model model, onnx::import_file(file.string()));
  info.opset = model.opset;
  info.ir_version = model.ir_version;
  info.producer = model.producer;
  Status s = engine.add_named_model(model.graph, device, info);
  if (!s.ok() && !device.empty()) return s.with_context("device '" + device + "' of config.json");
  return s;
}

}  // namespace

Result<std::vector<ModelInfo>> load_model_repository(Engine& engine, const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec))
    return errors::NotFound("models folder '{}' does not exist", dir);
  if (!fs::is_directory(dir, ec))
    return errors::InvalidArgument("models folder '{}' is not a folder (expected DIR/NAME/model.onnx)",
                                   dir);
  std::vector<fs::path> folders;
  fs::directory_iterator it(dir, ec), end;
  if (ec) return errors::InvalidArgument("cannot read models folder '{}': {}", dir, ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) return errors::InvalidArgument("cannot read models folder '{}': {}", dir, ec.message());
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    std::error_code e2;
    if (!it->is_directory(e2)) continue;  // stray files (a README) are not models
    folders.push_back(it->path());
  }
  std::sort(folders.begin(), folders.end());
  for (const fs::path& folder : folders) {
    ModelInfo info;
    info.name = folder.filename().string();
    Status s = load_one(engine, folder, info);
    if (!s.ok()) {
      info.ready = false;
      // Paths relative to DIR: clients see the reason too, and the broker's folders are not
      // their business.
      info.reason = s.message();
      for (std::string prefix : {(fs::path(dir) / "").string(), fs::path(dir).string()}) {
        for (size_t at; !prefix.empty() && (at = info.reason.find(prefix)) != std::string::npos;)
          info.reason.erase(at, prefix.size());
      }
      engine.add_unavailable_model(info);
    }
  }
  // The outcome of this folder's models (the engine may hold others too).
  std::vector<ModelInfo> out;
  for (auto& m : engine.named_models())
    if (std::find_if(folders.begin(), folders.end(), [&](const fs::path& f) {
          return f.filename().string() == m.name;
        }) != folders.end())
      out.push_back(std::move(m));
  return out;
}

}  // namespace tensord
