#include "client/model_repository.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/suggest.h"
#include "core/errors.h"
#include "onnx/onnx_import.h"

namespace tensord {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kTopKeys = {"device",    "max_batch_size", "dynamic_batching",
                                           "instances", "inputs",         "outputs"};
const std::vector<std::string> kBatchingKeys = {"preferred_batch_sizes",
                                                "max_queue_delay_microseconds"};
const std::vector<std::string> kTensorKeys = {"name", "dims", "dtype"};

Status unknown_key(const std::string& file, const std::string& where, const std::string& key,
                   const std::vector<std::string>& known) {
  std::string list;
  for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
  return errors::InvalidArgument("'{}': unknown key '{}'{}{} (the keys are {})", file, key,
                                 where.empty() ? "" : " in " + where, cli::did_you_mean(key, known),
                                 list);
}

Result<int64_t> get_int(const std::string& file, const std::string& key, const nlohmann::json& v,
                        int64_t lo, int64_t hi) {
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    return errors::InvalidArgument("'{}': \"{}\" must be an integer in [{}, {}], got {}", file, key,
                                   lo, hi, v.dump());
  return v.get<int64_t>();
}

Result<std::vector<ModelConfig::Tensor>> get_tensors(const std::string& file,
                                                     const std::string& key,
                                                     const nlohmann::json& v) {
  if (!v.is_array())
    return errors::InvalidArgument(
        "'{}': \"{}\" must be a list such as [{{\"name\": \"X\", \"dims\": [-1, 3]}}]", file, key);
  std::vector<ModelConfig::Tensor> out;
  for (const nlohmann::json& t : v) {
    if (!t.is_object())
      return errors::InvalidArgument("'{}': each of \"{}\" must be an object, got {}", file, key,
                                     t.dump());
    ModelConfig::Tensor x;
    for (const auto& [k, e] : t.items()) {
      if (k == "name" && e.is_string()) {
        x.name = e.get<std::string>();
      } else if (k == "dtype" && e.is_string()) {
        x.dtype = e.get<std::string>();
        if (!dtype_from_name(x.dtype))
          return errors::InvalidArgument("'{}': \"{}\": unknown dtype '{}'", file, key, x.dtype);
      } else if (k == "dims" && e.is_array()) {
        for (const nlohmann::json& d : e) {
          TD_ASSIGN_OR_RETURN(int64_t n, get_int(file, key + ".dims", d, -1, INT64_MAX));
          x.dims.push_back(n);
        }
      } else if (k == "name" || k == "dtype" || k == "dims") {
        return errors::InvalidArgument("'{}': \"{}\" of \"{}\" has the wrong type: {}", file, k,
                                       key, e.dump());
      } else {
        return unknown_key(file, "\"" + key + "\"", k, kTensorKeys);
      }
    }
    if (x.name.empty())
      return errors::InvalidArgument("'{}': an entry of \"{}\" has no \"name\"", file, key);
    out.push_back(std::move(x));
  }
  return out;
}

Result<std::string> read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return errors::InvalidArgument("cannot read '{}'", file.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The model's declared inputs/outputs against the config's: names, ranks, fixed dims, dtypes.
Status check_shapes(const std::vector<ValueInfo>& declared,
                    const std::vector<ModelConfig::Tensor>& wanted, const char* what) {
  for (const ModelConfig::Tensor& w : wanted) {
    auto it = std::find_if(declared.begin(), declared.end(),
                           [&](const ValueInfo& v) { return v.name == w.name; });
    if (it == declared.end()) {
      std::vector<std::string> names;
      for (const ValueInfo& v : declared) names.push_back(v.name);
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "'" : ", '") + n + "'";
      return errors::InvalidArgument("config.json {}: the model has no {} '{}'{} (it has {})", what,
                                     what, w.name, cli::did_you_mean(w.name, names), list);
    }
    const TensorType& t = it->type;
    if (!w.dtype.empty() && t.defined() && *dtype_from_name(w.dtype) != t.dtype)
      return errors::InvalidArgument("config.json {} '{}': dtype {} but the model declares {}",
                                     what, w.name, w.dtype, dtype_name(t.dtype));
    if (w.dims.empty() || !t.defined()) continue;
    bool ok = t.shape.size() == w.dims.size();
    for (size_t i = 0; ok && i < w.dims.size(); ++i)
      ok = w.dims[i] < 0 || t.shape[i] < 0 || w.dims[i] == t.shape[i];
    if (!ok) {
      std::string dims;
      for (int64_t d : w.dims) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
      return errors::InvalidArgument("config.json {} '{}': dims [{}] but the model declares {}",
                                     what, w.name, dims, t.to_string());
    }
  }
  return OkStatus();
}

// One model file -> loaded into the engine as `name`, or why not.
Status load_one(Engine& engine, const fs::path& file, const std::string& name,
                const ModelConfig& config, ModelInfo& info) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    return errors::NotFound("no model.onnx in '{}' (a named model is DIR/NAME/model.onnx)",
                            file.parent_path().string());
  TD_ASSIGN_OR_RETURN(onnx::Model model, onnx::import_file(file.string()));
  info.name = name;
  info.opset = model.opset;
  info.ir_version = model.ir_version;
  info.producer = model.producer;
  TD_RETURN_IF_ERROR(check_shapes(model.graph.inputs, config.inputs, "input"));
  TD_RETURN_IF_ERROR(check_shapes(model.graph.outputs, config.outputs, "output"));
  const std::string device = config.devices.empty() ? std::string() : config.devices[0];
  for (size_t i = 1; i < config.devices.size(); ++i) {
    bool found = false;
    for (const DeviceInfo& d : engine.devices()) found = found || d.name == config.devices[i];
    if (!found)
      return errors::NotFound("device '{}' of config.json is not one of this broker's",
                              config.devices[i]);
  }
  Status s = engine.add_named_model(model.graph, device, info);
  if (!s.ok() && !device.empty()) return s.with_context("device '" + device + "' of config.json");
  return s;
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() < 10 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

Result<ModelConfig> parse_model_config(const std::string& text, const std::string& file) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return errors::InvalidArgument(
        "'{}' is not a JSON object (expected e.g. {{\"device\": \"cpu:0\", \"max_batch_size\": "
        "16}})",
        file);
  ModelConfig c;
  for (const auto& [key, value] : j.items()) {
    if (key == "device") {
      if (value.is_string()) {
        c.devices = {value.get<std::string>()};
      } else if (value.is_array() && !value.empty() &&
                 std::all_of(value.begin(), value.end(),
                             [](const nlohmann::json& d) { return d.is_string(); })) {
        for (const nlohmann::json& d : value) c.devices.push_back(d.get<std::string>());
      } else {
        return errors::InvalidArgument(
            "'{}': \"device\" must be a string such as \"cpu:0\" or a list of them, got {}", file,
            value.dump());
      }
    } else if (key == "max_batch_size") {
      TD_ASSIGN_OR_RETURN(c.max_batch_size, get_int(file, key, value, 0, 1 << 20));
    } else if (key == "instances") {
      TD_ASSIGN_OR_RETURN(int64_t n, get_int(file, key, value, 1, 64));
      c.instances = static_cast<int>(n);
    } else if (key == "dynamic_batching") {
      if (!value.is_object())
        return errors::InvalidArgument(
            "'{}': \"dynamic_batching\" must be an object such as "
            "{{\"max_queue_delay_microseconds\": 1000}}, got {}",
            file, value.dump());
      c.dynamic_batching = true;
      for (const auto& [k, v] : value.items()) {
        if (k == "max_queue_delay_microseconds") {
          TD_ASSIGN_OR_RETURN(c.max_queue_delay_us, get_int(file, k, v, 0, 10'000'000));
        } else if (k == "preferred_batch_sizes") {
          if (!v.is_array())
            return errors::InvalidArgument(
                "'{}': \"preferred_batch_sizes\" must be a list of integers, got {}", file,
                v.dump());
          for (const nlohmann::json& n : v) {
            TD_ASSIGN_OR_RETURN(int64_t b, get_int(file, k, n, 1, 1 << 20));
            c.preferred_batch_sizes.push_back(b);
          }
          std::sort(c.preferred_batch_sizes.begin(), c.preferred_batch_sizes.end());
        } else {
          return unknown_key(file, "\"dynamic_batching\"", k, kBatchingKeys);
        }
      }
    } else if (key == "inputs") {
      TD_ASSIGN_OR_RETURN(c.inputs, get_tensors(file, key, value));
    } else if (key == "outputs") {
      TD_ASSIGN_OR_RETURN(c.outputs, get_tensors(file, key, value));
    } else {
      return unknown_key(file, "", key, kTopKeys);
    }
  }
  if (c.dynamic_batching && c.max_batch_size < 1)
    return errors::InvalidArgument(
        "'{}': \"dynamic_batching\" needs \"max_batch_size\" of at least 1 (got {})", file,
        c.max_batch_size);
  for (int64_t b : c.preferred_batch_sizes)
    if (b > c.max_batch_size)
      return errors::InvalidArgument("'{}': preferred batch size {} is over \"max_batch_size\" {}",
                                     file, b, c.max_batch_size);
  return c;
}

Result<std::vector<ModelInfo>> load_model_repository(Engine& engine, const std::string& dir,
                                                     std::map<std::string, ModelConfig>* configs) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return errors::NotFound("models folder '{}' does not exist", dir);
  if (!fs::is_directory(dir, ec))
    return errors::InvalidArgument(
        "models folder '{}' is not a folder (expected DIR/NAME/model.onnx)", dir);
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
  // Paths relative to DIR: clients see the reason too, and the broker's folders are not
  // their business.
  auto unavailable = [&](ModelInfo info, const Status& s) {
    info.ready = false;
    info.reason = s.message();
    for (std::string prefix : {(fs::path(dir) / "").string(), fs::path(dir).string()}) {
      for (size_t at; !prefix.empty() && (at = info.reason.find(prefix)) != std::string::npos;)
        info.reason.erase(at, prefix.size());
    }
    engine.add_unavailable_model(info);
  };
  std::vector<std::string> names;  // what this folder put into the engine
  for (const fs::path& folder : folders) {
    const std::string name = folder.filename().string();
    names.push_back(name);
    ModelInfo info;
    info.name = name;
    ModelConfig config;
    if (fs::exists(folder / "config.json", ec)) {
      auto c = read_text(folder / "config.json");
      Result<ModelConfig> parsed = c.ok()
                                       ? parse_model_config(*c, (folder / "config.json").string())
                                       : Result<ModelConfig>(c.status());
      if (!parsed.ok()) {
        unavailable(info, parsed.status());
        continue;
      }
      config = std::move(*parsed);
    }
    config.model = name;
    // Version folders: NAME/1/model.onnx, NAME/2/model.onnx ...
    std::vector<int64_t> versions;
    for (fs::directory_iterator v(folder, ec), vend; !ec && v != vend; v.increment(ec)) {
      const std::string n = v->path().filename().string();
      std::error_code e2;
      if (all_digits(n) && v->is_directory(e2)) versions.push_back(std::stoll(n));
    }
    std::sort(versions.begin(), versions.end());
    if (versions.empty()) {
      Status s = load_one(engine, folder / "model.onnx", name, config, info);
      if (!s.ok()) {
        unavailable(info, s);
      } else if (configs) {
        (*configs)[name] = config;
      }
      continue;
    }
    std::string newest;
    Status newest_error;
    for (int64_t v : versions) {
      const std::string vname = name + ":" + std::to_string(v);
      names.push_back(vname);
      ModelInfo vinfo;
      vinfo.name = vname;
      ModelConfig vconfig = config;
      vconfig.version = v;
      Status s = load_one(engine, folder / std::to_string(v) / "model.onnx", vname, vconfig, vinfo);
      if (!s.ok()) {
        unavailable(vinfo, s);
        newest_error = s.with_context("version " + std::to_string(v));
        continue;
      }
      newest = vname;
      if (configs) (*configs)[vname] = vconfig;
    }
    if (newest.empty()) {
      unavailable(info, newest_error);
    } else if (Status s = engine.add_named_alias(name, newest); !s.ok()) {
      unavailable(info, s);
    }
  }
  // The outcome of this folder's models (the engine may hold others too).
  std::vector<ModelInfo> out;
  for (auto& m : engine.named_models())
    if (std::find(names.begin(), names.end(), m.name) != names.end()) out.push_back(std::move(m));
  return out;
}

}  // namespace tensord
