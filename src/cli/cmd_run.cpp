// `tensord run MODEL.onnx [--input name=FILE]... [FILE...] [--output DIR] [--device D]`
//
// The same path every client takes: import the model, upload the inputs, execute the graph,
// read the outputs. Inputs that do not fit the model's declared inputs are refused before
// anything runs (exit 2), naming the input and the file.
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <onnx/onnx_pb.h>

#include <fstream>
#include <random>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "core/npy.h"
#include "engine/executor.h"
#include "onnx/onnx_import.h"

namespace tensord::cli {
namespace {

constexpr int64_t kSummaryValues = 8;

// Error lines for input problems: "input 'x' (x.npy): ...".
std::string input_label(const std::string& name, const std::string& file) {
  return "input '" + name + "' (" + file + ")";
}

// Checks a value against the model's declared type: dtype when declared, and rank and every
// known dim when a shape is declared. (The IR cannot tell "rank unknown" from "scalar": both
// are an empty shape, so an empty declared shape accepts any value.)
Status check_input(const ValueInfo& declared, const std::string& file, const HostTensor& value) {
  const TensorType& want = declared.type;
  if (want.dtype != DType::kUndefined && want.dtype != value.dtype()) {
    return Status(StatusCode::kInvalidArgument,
                  input_label(declared.name, file) + " is " + dtype_name(value.dtype()) +
                      " but the model declares " + dtype_name(want.dtype) + " " +
                      shape_to_string(want.shape));
  }
  if (want.shape.empty()) return OkStatus();
  bool fits = want.shape.size() == value.shape().size();
  for (size_t i = 0; fits && i < want.shape.size(); ++i)
    if (want.shape[i] >= 0 && want.shape[i] != value.shape()[i]) fits = false;
  if (!fits) {
    return Status(StatusCode::kInvalidArgument,
                  input_label(declared.name, file) + " has shape " +
                      shape_to_string(value.shape()) + " but the model declares " +
                      shape_to_string(want.shape) + " (? = any size)");
  }
  return OkStatus();
}

// The names of the free dimensions of each graph input ("batch" of float32[batch, 16]), from
// the ONNX file itself (the graph IR keeps only -1). "" where a dim has no name.
std::map<std::string, std::vector<std::string>> dim_names(const std::string& path) {
  std::map<std::string, std::vector<std::string>> out;
  std::ifstream f(path, std::ios::binary);
  ::onnx::ModelProto proto;
  if (!f || !proto.ParseFromIstream(&f)) return out;
  for (const auto& in : proto.graph().input()) {
    auto& names = out[in.name()];
    if (!in.type().has_tensor_type() || !in.type().tensor_type().has_shape()) continue;
    for (const auto& d : in.type().tensor_type().shape().dim())
      names.push_back(d.has_dim_param() ? d.dim_param() : "");
  }
  return out;
}

// --random-inputs: values for `in`, its free dims from --dim NAME=N or 1. Floats from a
// normal distribution, integers 0..9, bools 0/1 (a fixed seed per input: runs repeat).
Result<HostTensor> random_input(const ValueInfo& in, const std::vector<std::string>& names,
                                const std::map<std::string, int64_t>& sizes,
                                std::set<std::string>& used, uint32_t seed) {
  if (in.type.dtype == DType::kUndefined)
    return Status(StatusCode::kInvalidArgument,
                  "input '" + in.name + "' declares no type: --random-inputs cannot make it up; "
                  "give it as --input " + in.name + "=FILE");
  Shape shape = in.type.shape;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] >= 0) continue;
    shape[i] = 1;
    const std::string name = i < names.size() ? names[i] : "";
    if (auto it = sizes.find(name); !name.empty() && it != sizes.end()) {
      shape[i] = it->second;
      used.insert(name);
    }
  }
  TD_RETURN_IF_ERROR(checked_byte_size(in.type.dtype, shape).status());
  const int64_t n = shape_numel(shape);
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> small(0, in.type.dtype == DType::kBool ? 1 : 9);
  HostTensor t(in.type.dtype, shape);
  void* p = t.mutable_data();
  for (int64_t i = 0; i < n; ++i) {
    switch (in.type.dtype) {
      case DType::kFloat32: static_cast<float*>(p)[i] = static_cast<float>(normal(rng)); break;
      case DType::kFloat64: static_cast<double*>(p)[i] = normal(rng); break;
      case DType::kFloat16:
        static_cast<uint16_t*>(p)[i] = float_to_half(static_cast<float>(normal(rng)));
        break;
      case DType::kBFloat16:
        static_cast<uint16_t*>(p)[i] = float_to_bfloat16(static_cast<float>(normal(rng)));
        break;
      case DType::kInt8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(small(rng)); break;
      case DType::kUInt8:
      case DType::kBool: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(small(rng)); break;
      case DType::kInt16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(small(rng)); break;
      case DType::kUInt16: static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(small(rng)); break;
      case DType::kInt32: static_cast<int32_t*>(p)[i] = small(rng); break;
      case DType::kUInt32: static_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(small(rng)); break;
      case DType::kInt64: static_cast<int64_t*>(p)[i] = small(rng); break;
      case DType::kUInt64: static_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(small(rng)); break;
      default:
        return Status(StatusCode::kInvalidArgument,
                      "input '" + in.name + "' is " + dtype_name(in.type.dtype) +
                          ": --random-inputs cannot make it up; give it as --input " + in.name +
                          "=FILE");
    }
  }
  return t;
}

struct BoundInput {
  std::string file;
  HostTensor value;
};

// Binds --input name=FILE and positional files to the graph inputs, reads and checks them.
// Every error here is bad input (exit 2).
Result<std::vector<BoundInput>> bind_inputs(const Graph& graph, const RunOptions& options) {
  if (!options.dims.empty() && !options.random_inputs)
    return Status(StatusCode::kInvalidArgument,
                  "--dim sizes the inputs --random-inputs makes up; give --random-inputs too");
  std::string declared_names;
  for (const auto& in : graph.inputs)
    declared_names += (declared_names.empty() ? "'" : ", '") + in.name + "'";
  if (declared_names.empty()) declared_names = "none";

  std::map<std::string, std::string> file_of;  // input name -> file
  for (const auto& spec : options.named_inputs) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      return Status(StatusCode::kInvalidArgument,
                    "--input '" + spec + "' is not of the form name=FILE");
    const std::string name = spec.substr(0, eq);
    bool known = false;
    for (const auto& in : graph.inputs) known |= in.name == name;
    if (!known)
      return Status(StatusCode::kInvalidArgument, "--input '" + spec +
                                                      "': the model has no input '" + name +
                                                      "' (its inputs: " + declared_names + ")");
    if (file_of.count(name))
      return Status(StatusCode::kInvalidArgument, "input '" + name + "' is given twice (" +
                                                      file_of[name] + " and " +
                                                      spec.substr(eq + 1) + ")");
    file_of[name] = spec.substr(eq + 1);
  }
  // Positional files fill the inputs not named, in graph-input order.
  size_t next_file = 0;
  for (const auto& in : graph.inputs) {
    if (file_of.count(in.name)) continue;
    if (next_file < options.files.size()) file_of[in.name] = options.files[next_file++];
  }
  if (next_file < options.files.size()) {
    std::string extra;
    for (size_t i = next_file; i < options.files.size(); ++i)
      extra += (extra.empty() ? "" : ", ") + options.files[i];
    return Status(StatusCode::kInvalidArgument,
                  "too many input files: the model has " + std::to_string(graph.inputs.size()) +
                      " input(s) (" + declared_names + "); left over: " + extra);
  }
  std::string missing;
  for (const auto& in : graph.inputs)
    if (!file_of.count(in.name))
      missing += (missing.empty() ? "'" : ", '") + in.name + "' " + in.type.to_string();
  if (!missing.empty() && !options.random_inputs)
    return Status(StatusCode::kInvalidArgument,
                  "missing input(s) " + missing +
                      "; give them as --input name=FILE or in order, or make them up with "
                      "--random-inputs");

  // --dim NAME=N: the sizes of free dimensions, for --random-inputs.
  std::map<std::string, int64_t> sizes;
  for (const auto& spec : options.dims) {
    const auto eq = spec.find('=');
    int64_t n = -1;
    if (eq != std::string::npos && eq > 0) {
      try {
        size_t used = 0;
        n = std::stoll(spec.substr(eq + 1), &used);
        if (used != spec.size() - eq - 1) n = -1;
      } catch (const std::exception&) {
        n = -1;
      }
    }
    if (n < 1)
      return Status(StatusCode::kInvalidArgument,
                    "--dim '" + spec + "' is not of the form NAME=N with N >= 1");
    sizes[spec.substr(0, eq)] = n;
  }
  std::map<std::string, std::vector<std::string>> names;
  if (options.random_inputs) names = dim_names(options.model);
  std::set<std::string> used_dims;

  std::vector<BoundInput> out;
  uint32_t seed = 1;
  for (const auto& in : graph.inputs) {
    BoundInput b;
    if (!file_of.count(in.name)) {
      auto value = random_input(in, names[in.name], sizes, used_dims, seed++);
      if (!value.ok()) return value.status();
      b.file = "random";
      b.value = std::move(*value);
      std::cerr << "tensord: random input '" << in.name << "' " << b.value.type().to_string()
                << "\n";
      out.push_back(std::move(b));
      continue;
    }
    b.file = file_of[in.name];
    auto value = read_tensor_any(b.file);
    if (!value.ok())
      return Status(StatusCode::kInvalidArgument,
                    "input '" + in.name + "': " + value.status().message());
    TD_RETURN_IF_ERROR(check_input(in, b.file, *value));
    b.value = std::move(*value);
    out.push_back(std::move(b));
  }
  for (const auto& [name, n] : sizes)
    if (!used_dims.count(name)) {
      std::set<std::string> free;
      for (const auto& [input, dims] : names)
        for (const auto& d : dims)
          if (!d.empty()) free.insert(d);
      std::string list;
      for (const auto& d : free) list += (list.empty() ? "'" : ", '") + d + "'";
      return Status(StatusCode::kInvalidArgument,
                    "--dim " + name + "=" + std::to_string(n) +
                        ": no input made up by --random-inputs has a free dimension '" + name +
                        "' (free dimensions: " + (list.empty() ? "none" : list) + ")");
    }
  return out;
}

void print_summary(const std::string& name, const HostTensor& t) {
  std::cout << name << ": " << t.type().to_string();
  const int64_t n = t.numel();
  if (n == 0) {
    std::cout << "  (empty)\n";
    return;
  }
  const std::vector<double> v = t.to_double_vector();
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0;
  int64_t nans = 0, counted = 0;
  for (double x : v) {
    if (std::isnan(x)) {
      ++nans;
      continue;
    }
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    sum += x;
    ++counted;
  }
  std::ostringstream stats;
  stats.precision(6);
  if (counted > 0)
    stats << "  min " << lo << "  max " << hi << "  mean " << sum / static_cast<double>(counted);
  if (nans > 0) stats << "  nan " << nans;
  std::cout << stats.str() << "\n  ";
  const int64_t shown = std::min(n, kSummaryValues);
  std::cout << (shown < n ? "first " + std::to_string(shown) + " of " + std::to_string(n) + ": "
                          : "values: ");
  for (int64_t i = 0; i < shown; ++i) std::cout << (i ? " " : "") << format_element(t, i);
  std::cout << "\n";
}

int run(const RunOptions& options) {
  // 1. The model: any load error is bad input.
  auto model = onnx::import_file(options.model);
  if (!model.ok()) {
    const std::string& msg = model.status().message();
    print_error(msg.find(options.model) != std::string::npos
                    ? msg
                    : "cannot load model '" + options.model + "': " + msg);
    return kExitUsage;
  }
  model->graph.name = model_name_for(options.model);  // the broker's log and status name
  const Graph& graph = model->graph;

  // 2. The inputs, checked against the declared types before anything runs.
  auto inputs = bind_inputs(graph, options);
  if (!inputs.ok()) {
    print_error(inputs.status().message());
    return kExitUsage;
  }

  // 3. The output folder, before the (possibly long) run.
  if (!options.output_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.output_dir, ec);
    if (ec || !std::filesystem::is_directory(options.output_dir)) {
      print_error("cannot create output folder '" + options.output_dir + "'" +
                  (ec ? ": " + ec.message() : ""));
      return kExitUsage;
    }
  }

  // 4. Upload, execute, read: the path every client takes.
  auto cd = open_client(options.device);
  if (!cd.ok()) {
    print_error(cd.status().message());
    return cd.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
  }
  Client& client = *cd->client;
  std::vector<TensorHandle> handles;
  for (size_t i = 0; i < inputs->size(); ++i) {
    auto h = client.upload((*inputs)[i].value.view(), cd->device);
    if (!h.ok()) {
      print_error("cannot upload input '" + graph.inputs[i].name + "' to " + cd->device + ": " +
                  h.status().message());
      return kExitFailure;
    }
    handles.push_back(*h);
  }
  auto outputs = client.execute(graph, handles, cd->device);
  if (!outputs.ok()) {
    print_error("cannot run '" + options.model + "' on " + cd->device + ": " +
                outputs.status().message());
    return kExitFailure;
  }

  int status = kExitOk;
  std::set<std::string> used_files;
  for (size_t i = 0; i < outputs->size(); ++i) {
    const std::string& name = graph.outputs[i].name;
    auto value = client.read((*outputs)[i]);
    if (!value.ok()) {
      print_error("output '" + name + "': " + value.status().message());
      status = kExitFailure;
      continue;
    }
    if (options.output_dir.empty()) {
      print_summary(name, *value);
      continue;
    }
    std::string base = file_name_for(name);
    for (int k = 1; used_files.count(base); ++k)
      base = file_name_for(name) + "_" + std::to_string(k);
    used_files.insert(base);
    const std::string path = (std::filesystem::path(options.output_dir) / (base + ".npy")).string();
    if (Status s = write_npy(path, *value); !s.ok()) {
      print_error("output '" + name + "': cannot write '" + path + "': " + s.message());
      status = kExitFailure;
      continue;
    }
    std::cout << name << ": " << value->type().to_string() << " -> " << path << "\n";
  }
  return status;
}

}  // namespace

int cmd_run(const RunOptions& options) {
  if (options.profile) set_profiling(true);  // the executable prints its table when it goes
  return run(options);
}

}  // namespace tensord::cli
