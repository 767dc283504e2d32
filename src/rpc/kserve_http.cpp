// KServe v2 over HTTP/JSON, on the broker's --http server (rpc/http_server.h routes /v2 here):
//
//   GET  /v2                                     server metadata
//   GET  /v2/health/live, /v2/health/ready       200 or 400 (open: no token needed)
//   GET  /v2/models/NAME[/versions/V]            model metadata (inputs, outputs: dtypes, shapes)
//   GET  /v2/models/NAME[/versions/V]/ready      200 when ready, else 400
//   POST /v2/models/NAME[/versions/V]/infer      inference (JSON; binary tensor data extension)
//
// Errors are the protocol's JSON error object, {"error": "<message>"}, with 400 (a request
// that does not fit the model, malformed JSON), 404 (no such model or path), 401 (no token),
// 503 (the model failed to load) or 500.
//
// The binary tensor data extension (as Triton defines it): the body is a JSON header of
// Inference-Header-Content-Length bytes followed by the inputs' raw bytes, in the order of the
// inputs carrying "parameters": {"binary_data_size": N}. Outputs come back binary when asked
// (an output's "parameters": {"binary_data": true}, or the request's
// "parameters": {"binary_data_output": true}): the answer is then the JSON header followed by
// those outputs' bytes, its length in Inference-Header-Content-Length.
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "rpc/kserve.h"
#include "tensord/version.h"

namespace tensord::rpc::kserve {

namespace {

using json = nlohmann::json;

HttpResponse json_response(int status, const json& j) {
  HttpResponse r;
  r.status = status;
  r.body = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

HttpResponse error_response(const Status& s) {
  int status = 500;
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kAlreadyExists:
      status = 400;
      break;
    case StatusCode::kNotFound:
      status = 404;
      break;
    case StatusCode::kUnauthenticated:
      status = 401;
      break;
    case StatusCode::kPermissionDenied:
      status = 403;
      break;
    case StatusCode::kFailedPrecondition:
    case StatusCode::kUnavailable:
    case StatusCode::kResourceExhausted:
      status = 503;
      break;
    case StatusCode::kDeadlineExceeded:
      status = 504;
      break;
    default:
      break;
  }
  return json_response(status, {{"error", s.message()}});
}

json tensor_metadata(const ValueInfo& v) {
  json shape = json::array();
  for (int64_t d : v.type.shape) shape.push_back(d);
  return {{"name", v.name}, {"datatype", datatype_name(v.type.dtype)}, {"shape", shape}};
}

// A JSON array (nested, row-major) flattened into `out`, checked against `dtype`.
template <typename T>
Status flatten(const json& data, const std::string& name, std::vector<T>* out) {
  if (data.is_array()) {
    for (const json& e : data) TD_RETURN_IF_ERROR(flatten(e, name, out));
    return OkStatus();
  }
  if constexpr (std::is_same_v<T, bool>) {
    if (!data.is_boolean())
      return errors::InvalidArgument("input '{}': BOOL data must be true/false, got {}", name,
                                     data.dump());
    out->push_back(data.get<bool>());
  } else {
    if (!data.is_number())
      return errors::InvalidArgument("input '{}': its data must be numbers, got {}", name,
                                     data.dump().substr(0, 100));
    if constexpr (std::is_integral_v<T>) {
      if (!data.is_number_integer())
        return errors::InvalidArgument("input '{}': integer data expected, got {}", name,
                                       data.dump());
      if (data.is_number_unsigned()) {
        const uint64_t v = data.get<uint64_t>();
        if (v > static_cast<uint64_t>(std::numeric_limits<T>::max()))
          return errors::InvalidArgument("input '{}': {} does not fit its datatype", name, v);
        out->push_back(static_cast<T>(v));
      } else {
        const int64_t v = data.get<int64_t>();
        if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
            (v > 0 &&
             static_cast<uint64_t>(v) > static_cast<uint64_t>(std::numeric_limits<T>::max())))
          return errors::InvalidArgument("input '{}': {} does not fit its datatype", name, v);
        out->push_back(static_cast<T>(v));
      }
    } else {
      out->push_back(data.get<T>());
    }
  }
  return OkStatus();
}

template <typename T>
Status json_to_bytes(const json& data, const std::string& name, int64_t numel, std::string* out) {
  std::vector<T> values;
  TD_RETURN_IF_ERROR(flatten(data, name, &values));
  if (static_cast<int64_t>(values.size()) != numel)
    return errors::InvalidArgument(
        "input '{}': its data holds {} values, but its shape has {} "
        "elements",
        name, values.size(), numel);
  out->resize(values.size() * sizeof(T));
  if constexpr (std::is_same_v<T, bool>) {
    for (size_t i = 0; i < values.size(); ++i) (*out)[i] = values[i] ? 1 : 0;
  } else {
    std::memcpy(out->data(), values.data(), out->size());
  }
  return OkStatus();
}

Status data_to_bytes(const json& data, DType dtype, const std::string& name, int64_t numel,
                     std::string* out) {
  switch (dtype) {
    case DType::kBool:
      return json_to_bytes<bool>(data, name, numel, out);
    case DType::kUInt8:
      return json_to_bytes<uint8_t>(data, name, numel, out);
    case DType::kUInt16:
      return json_to_bytes<uint16_t>(data, name, numel, out);
    case DType::kUInt32:
      return json_to_bytes<uint32_t>(data, name, numel, out);
    case DType::kUInt64:
      return json_to_bytes<uint64_t>(data, name, numel, out);
    case DType::kInt8:
      return json_to_bytes<int8_t>(data, name, numel, out);
    case DType::kInt16:
      return json_to_bytes<int16_t>(data, name, numel, out);
    case DType::kInt32:
      return json_to_bytes<int32_t>(data, name, numel, out);
    case DType::kInt64:
      return json_to_bytes<int64_t>(data, name, numel, out);
    case DType::kFloat32:
      return json_to_bytes<float>(data, name, numel, out);
    case DType::kFloat64:
      return json_to_bytes<double>(data, name, numel, out);
    default:
      return errors::InvalidArgument(
          "input '{}': {} data cannot be given in JSON: send it as binary data (\"parameters\": "
          "{{\"binary_data_size\": N}} and the Inference-Header-Content-Length header)",
          name, datatype_name(dtype));
  }
}

template <typename T>
json bytes_to_json(const std::string& bytes) {
  json out = json::array();
  const size_t n = bytes.size() / sizeof(T);
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    if constexpr (std::is_same_v<T, uint8_t>)
      out.push_back(static_cast<unsigned>(v));
    else if constexpr (std::is_same_v<T, int8_t>)
      out.push_back(static_cast<int>(v));
    else
      out.push_back(v);
  }
  return out;
}

Result<json> output_data(const Tensor& t) {
  switch (t.dtype) {
    case DType::kBool: {
      json out = json::array();
      for (char c : t.data) out.push_back(c != 0);
      return out;
    }
    case DType::kUInt8:
      return bytes_to_json<uint8_t>(t.data);
    case DType::kUInt16:
      return bytes_to_json<uint16_t>(t.data);
    case DType::kUInt32:
      return bytes_to_json<uint32_t>(t.data);
    case DType::kUInt64:
      return bytes_to_json<uint64_t>(t.data);
    case DType::kInt8:
      return bytes_to_json<int8_t>(t.data);
    case DType::kInt16:
      return bytes_to_json<int16_t>(t.data);
    case DType::kInt32:
      return bytes_to_json<int32_t>(t.data);
    case DType::kInt64:
      return bytes_to_json<int64_t>(t.data);
    case DType::kFloat32:
      return bytes_to_json<float>(t.data);
    case DType::kFloat64:
      return bytes_to_json<double>(t.data);
    default:
      return errors::InvalidArgument(
          "output '{}' is {}, which JSON cannot carry: ask for it as binary data (\"parameters\": "
          "{{\"binary_data\": true}})",
          t.name, datatype_name(t.dtype));
  }
}

bool param_bool(const json& obj, const char* key) {
  if (!obj.is_object()) return false;
  auto p = obj.find("parameters");
  if (p == obj.end() || !p->is_object()) return false;
  auto v = p->find(key);
  return v != p->end() && v->is_boolean() && v->get<bool>();
}

HttpResponse infer(NamedModelRunner& runner, const HttpRequest& req, const std::string& tenant,
                   const std::string& model, const std::string& version) {
  // The JSON header, and the binary data after it (binary tensor data extension).
  size_t header_len = req.body.size();
  if (req.inference_header_length >= 0) {
    if (static_cast<uint64_t>(req.inference_header_length) > req.body.size())
      return error_response(errors::InvalidArgument(
          "Inference-Header-Content-Length is {}, but the body has only {} bytes",
          req.inference_header_length, req.body.size()));
    header_len = static_cast<size_t>(req.inference_header_length);
  }
  json j = json::parse(req.body.begin(), req.body.begin() + static_cast<ptrdiff_t>(header_len),
                       nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return error_response(errors::InvalidArgument(
        "the request is not valid JSON{} ({} bytes): expected an inference request object "
        "{{\"inputs\": [{{\"name\", \"shape\", \"datatype\", \"data\"}}, ...]}}",
        req.inference_header_length >= 0 ? " (its first Inference-Header-Content-Length bytes)"
                                         : "",
        header_len));
  if (!j.is_object() || !j.contains("inputs") || !j["inputs"].is_array())
    return error_response(errors::InvalidArgument(
        "the inference request must be a JSON object with an \"inputs\" array"));
  RunRequest run;
  run.tenant = tenant;
  run.model = model;
  run.version = version;
  size_t binary_at = header_len;
  for (const json& in : j["inputs"]) {
    if (!in.is_object() || !in.contains("name") || !in["name"].is_string() ||
        !in.contains("shape") || !in["shape"].is_array() || !in.contains("datatype") ||
        !in["datatype"].is_string())
      return error_response(errors::InvalidArgument(
          "each input needs \"name\" (a string), \"shape\" (an array of integers) and "
          "\"datatype\" (a string); got {}",
          in.dump().substr(0, 200)));
    Tensor t;
    t.name = in["name"].get<std::string>();
    const std::string dt = in["datatype"].get<std::string>();
    auto dtype = datatype_from_name(dt);
    if (!dtype)
      return error_response(errors::InvalidArgument(
          "input '{}': unknown or unsupported datatype '{}' (tensord takes {})", t.name, dt,
          datatype_names()));
    t.dtype = *dtype;
    for (const json& d : in["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        return error_response(
            errors::InvalidArgument("input '{}': its shape must be non-negative integers, got {}",
                                    t.name, in["shape"].dump().substr(0, 100)));
      t.shape.push_back(d.get<int64_t>());
    }
    auto bytes = checked_byte_size(t.dtype, t.shape);
    if (!bytes.ok()) return error_response(bytes.status().with_context("input '" + t.name + "'"));
    const json* params = in.contains("parameters") ? &in["parameters"] : nullptr;
    if (params && params->is_object() && params->contains("binary_data_size")) {
      const json& n = (*params)["binary_data_size"];
      if (!n.is_number_integer() || n.get<int64_t>() < 0)
        return error_response(errors::InvalidArgument(
            "input '{}': binary_data_size must be a non-negative integer", t.name));
      const uint64_t size = n.get<uint64_t>();
      if (size > req.body.size() - binary_at)
        return error_response(errors::InvalidArgument(
            "input '{}': binary_data_size {} runs past the body's end ({} bytes of binary data "
            "left after the JSON header and the inputs before it)",
            t.name, size, req.body.size() - binary_at));
      t.data = req.body.substr(binary_at, size);
      binary_at += size;
    } else {
      if (!in.contains("data"))
        return error_response(errors::InvalidArgument(
            "input '{}' has no \"data\" (nor \"parameters\": {{\"binary_data_size\": N}})",
            t.name));
      if (Status s = data_to_bytes(in["data"], t.dtype, t.name, shape_numel(t.shape), &t.data);
          !s.ok())
        return error_response(s);
    }
    run.inputs.push_back(std::move(t));
  }
  if (binary_at != req.body.size())
    return error_response(errors::InvalidArgument(
        "the body has {} bytes of binary data that no input's binary_data_size accounts for",
        req.body.size() - binary_at));
  const bool all_binary = param_bool(j, "binary_data_output");
  std::vector<bool> binary_out;
  if (j.contains("outputs")) {
    if (!j["outputs"].is_array())
      return error_response(errors::InvalidArgument("\"outputs\" must be an array"));
    for (const json& o : j["outputs"]) {
      if (!o.is_object() || !o.contains("name") || !o["name"].is_string())
        return error_response(
            errors::InvalidArgument("each requested output needs a \"name\" (a string)"));
      run.outputs.push_back(o["name"].get<std::string>());
      binary_out.push_back(all_binary || param_bool(o, "binary_data"));
    }
  }
  auto result = runner.run(std::move(run));
  if (!result.ok()) return error_response(result.status());
  json outputs = json::array();
  std::string binary;
  for (size_t k = 0; k < result->outputs.size(); ++k) {
    const Tensor& t = result->outputs[k];
    json shape = json::array();
    for (int64_t d : t.shape) shape.push_back(d);
    json o = {{"name", t.name}, {"datatype", datatype_name(t.dtype)}, {"shape", shape}};
    const bool as_binary = k < binary_out.size() ? binary_out[k] : all_binary;
    if (as_binary) {
      o["parameters"] = {{"binary_data_size", t.data.size()}};
      binary += t.data;
    } else {
      auto data = output_data(t);
      if (!data.ok()) return error_response(data.status());
      o["data"] = std::move(*data);
    }
    outputs.push_back(std::move(o));
  }
  json answer = {{"model_name", result->model},
                 {"model_version", result->version},
                 {"outputs", std::move(outputs)}};
  if (j.contains("id") && j["id"].is_string()) answer["id"] = j["id"];
  HttpResponse r = json_response(200, answer);
  if (!binary.empty() || all_binary ||
      std::find(binary_out.begin(), binary_out.end(), true) != binary_out.end()) {
    r.headers.push_back({"Inference-Header-Content-Length", std::to_string(r.body.size())});
    r.content_type = "application/octet-stream";
    r.body += binary;
  }
  return r;
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t at = 1;
  while (at <= path.size()) {
    size_t end = path.find('/', at);
    if (end == std::string::npos) end = path.size();
    if (end > at) parts.push_back(path.substr(at, end - at));
    at = end + 1;
  }
  return parts;
}

HttpResponse not_found(const HttpRequest& req) {
  return error_response(
      errors::NotFound("no KServe v2 endpoint {} {} (GET /v2, /v2/health/live, /v2/health/ready, "
                       "/v2/models/NAME, /v2/models/NAME/ready; POST /v2/models/NAME/infer)",
                       req.method, req.path.substr(0, 200)));
}

}  // namespace

HttpResponse handle_http(NamedModelRunner& runner, const HttpRequest& req,
                         const std::optional<std::string>& tenant) {
  const std::vector<std::string> p = split_path(req.path);  // p[0] == "v2"
  const bool get = req.method == "GET" || req.method == "HEAD";
  if (p.size() == 3 && p[1] == "health" && get) {
    if (p[2] == "live") return json_response(200, {{"live", true}});
    if (p[2] == "ready") {
      std::string why;
      const bool ready = runner.server_ready(&why);
      json j = {{"ready", ready}};
      if (!ready) j["error"] = why;
      return json_response(ready ? 200 : 400, j);
    }
  }
  if (!tenant)
    return error_response(Status(StatusCode::kUnauthenticated,
                                 "this broker requires a token: send 'Authorization: Bearer "
                                 "TOKEN' (or HTTP Basic auth with the token as the password)"));
  if (p.size() == 1 && get)
    return json_response(200, {{"name", "tensord"},
                               {"version", kVersion},
                               {"extensions", json::array({"binary_tensor_data"})}});
  if (p.size() >= 3 && p[1] == "models") {
    const std::string& model = p[2];
    std::string version;
    size_t at = 3;
    if (p.size() >= 5 && p[3] == "versions") {
      version = p[4];
      at = 5;
    }
    const std::string action = p.size() > at ? p[at] : "";
    if (p.size() > at + 1) return not_found(req);
    if (action.empty() && get) {
      auto m = runner.find(model, version);
      if (!m.ok()) return error_response(m.status());
      if (!m->ready)
        return error_response(errors::FailedPrecondition(
            "model '{}' is not ready: it failed to load: {}", m->name, m->reason));
      json inputs = json::array(), outputs = json::array();
      for (const auto& v : m->inputs) inputs.push_back(tensor_metadata(v));
      for (const auto& v : m->outputs) outputs.push_back(tensor_metadata(v));
      return json_response(200, {{"name", m->name},
                                 {"versions", json::array({"1"})},
                                 {"platform", "onnx"},
                                 {"inputs", inputs},
                                 {"outputs", outputs}});
    }
    if (action == "ready" && get) {
      auto m = runner.find(model, version);
      if (!m.ok()) return error_response(m.status());
      json j = {{"name", m->name}, {"ready", m->ready}};
      if (!m->ready) j["error"] = "model '" + m->name + "' failed to load: " + m->reason;
      return json_response(m->ready ? 200 : 400, j);
    }
    if (action == "infer") {
      if (req.method != "POST")
        return json_response(405, {{"error", "infer takes POST, not " + req.method}});
      return infer(runner, req, *tenant, model, version);
    }
  }
  return not_found(req);
}

}  // namespace tensord::rpc::kserve
