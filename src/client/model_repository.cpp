#include "client/model_repository.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/suggest.h"
#include "core/errors.h"
#include "core/graph_utils.h"
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

// One model file, imported and checked (not yet in the engine).
struct Prepared {
  Graph graph;
  std::string device;
  ModelInfo info;
  ModelConfig config;
};

Result<Prepared> prepare_one(const Engine& engine, const fs::path& file, const std::string& name,
                             const ModelConfig& config) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    return errors::NotFound("no model.onnx in '{}' (a named model is DIR/NAME/model.onnx)",
                            file.parent_path().string());
  TD_ASSIGN_OR_RETURN(onnx::Model model, onnx::import_file(file.string()));
  Prepared p;
  p.info.name = name;
  p.info.opset = model.opset;
  p.info.ir_version = model.ir_version;
  p.info.producer = model.producer;
  TD_RETURN_IF_ERROR(check_shapes(model.graph.inputs, config.inputs, "input"));
  TD_RETURN_IF_ERROR(check_shapes(model.graph.outputs, config.outputs, "output"));
  TD_RETURN_IF_ERROR(topological_order(model.graph).status());
  p.device = config.devices.empty() ? std::string() : config.devices[0];
  for (const std::string& d : config.devices) {
    bool found = false;
    for (const DeviceInfo& have : engine.devices()) found = found || have.name == d;
    if (!found)
      return errors::NotFound("device '{}' of config.json is not one of this broker's", d);
  }
  p.graph = std::move(model.graph);
  p.config = config;
  return p;
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

namespace {

// Paths relative to DIR: clients see the reason too, and the broker's folders are not their
// business.
std::string without_dir(std::string reason, const std::string& dir) {
  for (std::string prefix : {(fs::path(dir) / "").string(), fs::path(dir).string()})
    for (size_t at; !prefix.empty() && (at = reason.find(prefix)) != std::string::npos;)
      reason.erase(at, prefix.size());
  return reason;
}

// DIR/NAME into the engine: "NAME", or "NAME:V" for each version folder and "NAME" for the
// newest that loaded. Every file is imported and checked before the engine is touched. A first
// load lists what failed as unavailable (the others still load). A reload (`reload`: NAME may
// be loaded already) is all or nothing while NAME is loaded and ready: any failure leaves the
// loaded model as it is and is returned; otherwise the new versions replace the old at once
// and versions no longer in the folder are removed. `names` receives the engine names put in.
Status load_folder(Engine& engine, const std::string& dir, const std::string& name, bool reload,
                   std::vector<std::string>& names, std::map<std::string, ModelConfig>* configs) {
  const fs::path folder = fs::path(dir) / name;
  std::error_code ec;
  bool was_ready = false;
  if (reload)
    for (const ModelInfo& m : engine.named_models()) was_ready = was_ready || (m.name == name && m.ready);
  ModelInfo info;
  info.name = name;
  Status failed;  // the first failure
  std::vector<Prepared> ready;
  std::vector<std::pair<ModelInfo, Status>> unavailable;
  ModelConfig config;
  if (!fs::is_directory(folder, ec))
    return errors::NotFound("no folder '{}' in the models folder (a named model is "
                            "DIR/NAME/model.onnx)", name);
  if (fs::exists(folder / "config.json", ec)) {
    auto c = read_text(folder / "config.json");
    Result<ModelConfig> parsed = c.ok() ? parse_model_config(*c, (folder / "config.json").string())
                                        : Result<ModelConfig>(c.status());
    if (parsed.ok())
      config = std::move(*parsed);
    else
      failed = parsed.status();
  }
  config.model = name;
  std::string newest;
  if (failed.ok()) {
    // Version folders: NAME/1/model.onnx, NAME/2/model.onnx ...
    std::vector<int64_t> versions;
    for (fs::directory_iterator v(folder, ec), vend; !ec && v != vend; v.increment(ec)) {
      const std::string n = v->path().filename().string();
      std::error_code e2;
      if (all_digits(n) && v->is_directory(e2)) versions.push_back(std::stoll(n));
    }
    std::sort(versions.begin(), versions.end());
    if (versions.empty()) {
      auto p = prepare_one(engine, folder / "model.onnx", name, config);
      if (p.ok()) {
        ready.push_back(std::move(*p));
      } else {
        failed = p.status();
      }
    }
    for (int64_t v : versions) {
      const std::string vname = name + ":" + std::to_string(v);
      ModelConfig vconfig = config;
      vconfig.version = v;
      auto p = prepare_one(engine, folder / std::to_string(v) / "model.onnx", vname, vconfig);
      if (p.ok()) {
        newest = vname;
        ready.push_back(std::move(*p));
        continue;
      }
      ModelInfo vinfo;
      vinfo.name = vname;
      unavailable.emplace_back(vinfo, p.status());
      if (failed.ok()) failed = p.status().with_context("version " + std::to_string(v));
    }
  }
  if (!failed.ok()) failed = Status(failed.code(), without_dir(failed.message(), dir));
  if (was_ready && !failed.ok())
    return failed.with_context("reloading '" + name + "' (the loaded model stays)");
  // Commit.
  if (reload) {
    std::vector<std::string> keep;
    for (const Prepared& p : ready) keep.push_back(p.info.name);
    for (const auto& [u, s] : unavailable) keep.push_back(u.name);
    if (!newest.empty() || !failed.ok()) keep.push_back(name);
    for (const ModelInfo& m : engine.named_models())
      if (m.name.rfind(name + ":", 0) == 0 &&
          std::find(keep.begin(), keep.end(), m.name) == keep.end())
        engine.remove_named_models(m.name);
  }
  auto mark_unavailable = [&](ModelInfo i, const Status& s) {
    i.reason = without_dir(s.message(), dir);
    engine.add_unavailable_model(i, reload);
    names.push_back(i.name);
  };
  for (Prepared& p : ready) {
    const std::string n = p.info.name;
    Status s = engine.add_named_model(p.graph, p.device, p.info, {}, reload);
    if (!s.ok() && !p.device.empty()) s = s.with_context("device '" + p.device + "' of config.json");
    if (!s.ok()) {
      mark_unavailable(p.info, s);
      if (failed.ok()) failed = s;
      continue;
    }
    names.push_back(n);
    if (configs) (*configs)[n] = std::move(p.config);
  }
  for (auto& [u, s] : unavailable) mark_unavailable(u, s);
  if (!newest.empty()) {
    names.push_back(name);
    if (Status s = engine.add_named_alias(name, newest, reload); !s.ok()) {
      mark_unavailable(info, s);
      if (failed.ok()) failed = s;
    }
  } else if (ready.empty()) {
    mark_unavailable(info, failed);
  }
  return failed;
}

}  // namespace

Result<std::vector<ModelInfo>> load_named_model(Engine& engine, const std::string& dir,
                                                const std::string& name,
                                                std::map<std::string, ModelConfig>* configs) {
  if (name.empty() || name[0] == '.' || name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos || name.find(':') != std::string::npos ||
      name.size() > 255)
    return errors::InvalidArgument(
        "'{}' is not a model's name (a folder of the models folder: no '/', ':' or leading '.')",
        name);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return errors::NotFound("models folder '{}' does not exist", dir);
  std::vector<std::string> names;
  Status s = load_folder(engine, dir, name, /*reload=*/true, names, configs);
  if (!s.ok()) return s;  // what did not load is listed unavailable, with the reason
  std::vector<ModelInfo> out;
  for (auto& m : engine.named_models())
    if (m.name == name || m.name.rfind(name + ":", 0) == 0) out.push_back(std::move(m));
  return out;
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
  std::vector<std::string> names;  // what this folder put into the engine
  for (const fs::path& folder : folders) {
    Status s = load_folder(engine, dir, folder.filename().string(), /*reload=*/false, names,
                           configs);
    (void)s;  // the outcome is the engine's list (a model that failed is listed unavailable)
  }
  // The outcome of this folder's models (the engine may hold others too).
  std::vector<ModelInfo> out;
  for (auto& m : engine.named_models())
    if (std::find(names.begin(), names.end(), m.name) != names.end()) out.push_back(std::move(m));
  return out;
}

}  // namespace tensord
