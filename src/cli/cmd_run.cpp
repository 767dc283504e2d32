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

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "core/npy.h"
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

struct BoundInput {
  std::string file;
  HostTensor value;
};

// Binds --input name=FILE and positional files to the graph inputs, reads and checks them.
// Every error here is bad input (exit 2).
Result<std::vector<BoundInput>> bind_inputs(const Graph& graph, const RunOptions& options) {
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
  if (!missing.empty())
    return Status(StatusCode::kInvalidArgument,
                  "missing input(s) " + missing + "; give them as --input name=FILE or in order");

  std::vector<BoundInput> out;
  for (const auto& in : graph.inputs) {
    BoundInput b;
    b.file = file_of[in.name];
    auto value = read_tensor_any(b.file);
    if (!value.ok())
      return Status(StatusCode::kInvalidArgument,
                    "input '" + in.name + "': " + value.status().message());
    TD_RETURN_IF_ERROR(check_input(in, b.file, *value));
    b.value = std::move(*value);
    out.push_back(std::move(b));
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

int cmd_run(const RunOptions& options) { return run(options); }

}  // namespace tensord::cli
