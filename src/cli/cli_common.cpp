#include "cli/cli_common.h"

#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/suggest.h"
#include "core/npy.h"
#include "onnx/onnx_import.h"

namespace tensord::cli {
namespace {

// Shortest text that reads back as the same value ("0.1", not "0.100000001").
template <typename T>
std::string shortest(T v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace

void print_error(const std::string& message) { std::cerr << "tensord: " << message << "\n"; }

Result<ClientAndDevice> open_client(const std::string& device) {
  auto client = connect();
  if (!client.ok()) return client.status();
  ClientAndDevice out;
  out.client = std::move(*client);
  auto devices = out.client->devices();
  if (!devices.ok()) return devices.status();
  // The device asked for: --device, else TENSORD_DEVICE (named as such in the error), else the
  // client's default.
  std::string wanted = device, source = "--device";
  if (wanted.empty())
    if (const char* env = std::getenv("TENSORD_DEVICE"); env && *env) {
      wanted = env;
      source = "TENSORD_DEVICE";
    }
  std::string names;
  std::vector<std::string> all;
  bool found = false;
  for (const auto& d : *devices) {
    names += (names.empty() ? "" : ", ") + d.name;
    all.push_back(d.name);
    if (d.name == wanted) found = true;
  }
  if (devices->empty())
    return Status(StatusCode::kFailedPrecondition, "no devices available (check TENSORD_DEVICES)");
  if (wanted.empty()) {
    out.device = out.client->default_device();
    if (out.device.empty())
      return Status(StatusCode::kInvalidArgument,
                    "no default device (available: " + names + "; choose one with --device)");
  } else if (!found) {
    return Status(StatusCode::kInvalidArgument,
                  "unknown device '" + wanted + "'" + did_you_mean(wanted, all) + " (" + source +
                      "; available: " + names + ")");
  } else {
    out.device = wanted;
  }
  return out;
}

Result<HostTensor> read_tensor_any(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status(StatusCode::kNotFound, "cannot open '" + path + "': " + std::strerror(errno));
  char magic[6] = {};
  f.read(magic, sizeof magic);
  const bool is_npy = f.gcount() == 6 && std::string(magic, 6) == "\x93NUMPY";
  f.close();
  if (is_npy) {
    auto t = read_npy(path);
    // npy errors may not name the file; make sure the message does.
    if (!t.ok() && t.status().message().find(path) == std::string::npos)
      return t.status().with_context(path);
    return t;
  }
  return onnx::read_tensor_file(path);
}

std::string format_element(const HostTensor& t, int64_t i) {
  const void* p = t.data();
  switch (t.dtype()) {
    case DType::kFloat32:
      return shortest(static_cast<const float*>(p)[i]);
    case DType::kFloat64:
      return shortest(static_cast<const double*>(p)[i]);
    case DType::kFloat16:
      return shortest(half_to_float(static_cast<const uint16_t*>(p)[i]));
    case DType::kBFloat16:
      return shortest(bfloat16_to_float(static_cast<const uint16_t*>(p)[i]));
    case DType::kInt8:
      return std::to_string(static_cast<const int8_t*>(p)[i]);
    case DType::kUInt8:
      return std::to_string(static_cast<const uint8_t*>(p)[i]);
    case DType::kInt16:
      return std::to_string(static_cast<const int16_t*>(p)[i]);
    case DType::kUInt16:
      return std::to_string(static_cast<const uint16_t*>(p)[i]);
    case DType::kInt32:
      return std::to_string(static_cast<const int32_t*>(p)[i]);
    case DType::kUInt32:
      return std::to_string(static_cast<const uint32_t*>(p)[i]);
    case DType::kInt64:
      return std::to_string(static_cast<const int64_t*>(p)[i]);
    case DType::kUInt64:
      return std::to_string(static_cast<const uint64_t*>(p)[i]);
    case DType::kBool:
      return static_cast<const uint8_t*>(p)[i] ? "true" : "false";
    default:
      return "?";
  }
}

std::string model_name_for(const std::string& path) {
  const std::filesystem::path p = std::filesystem::absolute(path).lexically_normal();
  std::string stem = p.stem().string();
  if (stem == "model" && p.has_parent_path() && !p.parent_path().filename().empty())
    return p.parent_path().filename().string();
  return stem.empty() ? path : stem;
}

std::string file_name_for(const std::string& value_name) {
  std::string out = value_name;
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  if (out.empty() || out == "." || out == "..") out = "output" + out;
  return out;
}

}  // namespace tensord::cli
