// `tensord onnx-test DIR... [--device D] [--filter GLOB] [--json] [--verbose]`
//
// Runs ONNX backend tests (the layout of onnx/backend/test/data/node: model.onnx and
// test_data_set_N/{input,output}_K.pb) through a Client, exactly as a user's program would:
// import, upload, execute, read. One engine serves the whole run. Every error path is a
// Status that becomes a FAIL line; a test that crashes the process is named on stderr by a
// signal handler, so the culprit is known even then.
#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "core/errors.h"
#include "onnx/onnx_import.h"

namespace fs = std::filesystem;

namespace tensord::cli {
namespace {

struct TestCase {
  std::string name;  // the folder's name, e.g. "test_conv_with_strides_padding"
  fs::path dir;
};

enum class Verdict { kPassed, kFailed, kSkipped };

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kPassed:
      return "passed";
    case Verdict::kFailed:
      return "failed";
    case Verdict::kSkipped:
      return "skipped";
  }
  return "?";
}

struct Outcome {
  Verdict verdict = Verdict::kPassed;
  std::string reason;      // why it failed or was skipped ("" when it passed)
  std::string skip_group;  // skips are counted by this (the reason without file names)
};

// Reasons are printed one per line: a multi-line Status message becomes one line.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

Outcome failed(std::string reason) { return {Verdict::kFailed, one_line(std::move(reason)), ""}; }
Outcome skipped(std::string reason, std::string group) {
  return {Verdict::kSkipped, one_line(std::move(reason)), one_line(std::move(group))};
}

// --- crash reporting -------------------------------------------------------------------------

char g_current_test[512] = "";  // written between tests only; read by the signal handler

void on_fatal_signal(int sig) {
  // Only async-signal-safe calls here.
  const char prefix[] = "\ntensord onnx-test: crashed (signal ";
  char num[8];
  int n = 0;
  for (int s = sig; s > 0 && n < 7; s /= 10) num[n++] = static_cast<char>('0' + s % 10);
  ssize_t ignored = write(STDERR_FILENO, prefix, sizeof prefix - 1);
  while (n > 0) ignored = write(STDERR_FILENO, &num[--n], 1);
  const char mid[] = ") while running ";
  ignored = write(STDERR_FILENO, mid, sizeof mid - 1);
  ignored = write(STDERR_FILENO, g_current_test, strnlen(g_current_test, sizeof g_current_test));
  ignored = write(STDERR_FILENO, "\n", 1);
  (void)ignored;
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void install_crash_reporter() {
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, on_fatal_signal);
}

void set_current_test(const std::string& name) {
  const size_t n = std::min(name.size(), sizeof g_current_test - 1);
  std::memcpy(g_current_test, name.data(), n);
  g_current_test[n] = '\0';
}

// --- finding tests ---------------------------------------------------------------------------

bool is_test_dir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "model.onnx", ec);
}

// "test_data_set_12" -> 12, "input_3.pb" -> 3 (with the given prefix/suffix); -1 otherwise.
int64_t numbered(const std::string& name, const std::string& prefix, const std::string& suffix) {
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 9 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

Result<std::vector<TestCase>> collect_tests(const std::vector<std::string>& dirs,
                                            const std::string& filter) {
  std::vector<TestCase> tests;
  for (const auto& d : dirs) {
    std::error_code ec;
    const fs::path dir(d);
    if (!fs::is_directory(dir, ec))
      return Status(StatusCode::kInvalidArgument, "'" + d + "' is not a folder");
    std::vector<TestCase> found;
    if (is_test_dir(dir)) {
      found.push_back({fs::absolute(dir, ec).lexically_normal().filename().string(), dir});
      if (found.back().name.empty()) found.back().name = d;
    } else {
      for (const auto& entry : fs::directory_iterator(dir, ec))
        if (entry.is_directory(ec) && is_test_dir(entry.path()))
          found.push_back({entry.path().filename().string(), entry.path()});
      if (ec)
        return Status(StatusCode::kInvalidArgument, "cannot list '" + d + "': " + ec.message());
      std::sort(found.begin(), found.end(),
                [](const TestCase& a, const TestCase& b) { return a.name < b.name; });
    }
    if (found.empty())
      return Status(StatusCode::kInvalidArgument,
                    "'" + d + "' holds no ONNX tests (no model.onnx in it or in its subfolders)");
    for (auto& t : found)
      if (filter.empty() || fnmatch(filter.c_str(), t.name.c_str(), 0) == 0)
        tests.push_back(std::move(t));
  }
  return tests;
}

// Files named prefix<K>.pb in `dir`, K = 0, 1, ... (must be contiguous).
Result<std::vector<fs::path>> numbered_files(const fs::path& dir, const std::string& prefix) {
  std::map<int64_t, fs::path> by_index;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const int64_t k = numbered(entry.path().filename().string(), prefix, ".pb");
    if (k >= 0) by_index[k] = entry.path();
  }
  if (ec)
    return Status(StatusCode::kNotFound, "cannot list '" + dir.string() + "': " + ec.message());
  std::vector<fs::path> out;
  for (const auto& [k, p] : by_index) {
    if (k != static_cast<int64_t>(out.size()))
      return Status(StatusCode::kInvalidArgument, dir.filename().string() + " has " + prefix +
                                                      std::to_string(k) + ".pb but no " + prefix +
                                                      std::to_string(out.size()) + ".pb");
    out.push_back(p);
  }
  return out;
}

// --- comparing -------------------------------------------------------------------------------

// "" when `actual` matches `expected`, else why not ("element 7: 3.2 != expected 3.25 ...").
// With `values` false only dtype and shape are compared.
std::string compare(const HostTensor& actual, const HostTensor& expected, bool values, double rtol,
                    double atol) {
  if (actual.dtype() != expected.dtype())
    return std::string("dtype ") + dtype_name(actual.dtype()) + " != expected " +
           dtype_name(expected.dtype());
  if (actual.shape() != expected.shape())
    return "shape " + shape_to_string(actual.shape()) + " != expected " +
           shape_to_string(expected.shape());
  if (!values) return "";
  const int64_t n = expected.numel();
  int64_t first_bad = -1, bad = 0;
  double max_diff = 0;
  if (dtype_is_float(expected.dtype())) {
    const std::vector<double> a = actual.to_double_vector();
    const std::vector<double> e = expected.to_double_vector();
    for (int64_t i = 0; i < n; ++i) {
      bool ok;
      if (std::isnan(e[i]) || std::isnan(a[i])) {
        ok = std::isnan(e[i]) && std::isnan(a[i]);
      } else if (std::isinf(e[i]) || std::isinf(a[i])) {
        ok = a[i] == e[i];
      } else {
        const double diff = std::fabs(a[i] - e[i]);
        ok = diff <= atol + rtol * std::fabs(e[i]);
        if (!ok) max_diff = std::max(max_diff, diff);
      }
      if (!ok && bad++ == 0) first_bad = i;
    }
  } else {
    // Integers and bool: exactly (bool by truth value, whatever byte encodes true).
    const size_t es = dtype_size(expected.dtype());
    const auto* a = static_cast<const unsigned char*>(actual.data());
    const auto* e = static_cast<const unsigned char*>(expected.data());
    for (int64_t i = 0; i < n; ++i) {
      const bool ok = expected.dtype() == DType::kBool
                          ? (a[i] != 0) == (e[i] != 0)
                          : std::memcmp(a + i * es, e + i * es, es) == 0;
      if (!ok && bad++ == 0) first_bad = i;
    }
  }
  if (bad == 0) return "";
  std::string msg = "element " + std::to_string(first_bad) + ": " +
                    format_element(actual, first_bad) + " != expected " +
                    format_element(expected, first_bad) + " (" + std::to_string(bad) + " of " +
                    std::to_string(n) + " elements differ";
  if (max_diff > 0) {
    std::ostringstream s;
    s.precision(3);
    s << ", max abs diff " << max_diff;
    msg += s.str();
  }
  return msg + ")";
}

// --- running one test ------------------------------------------------------------------------

// Reads a data file. A file that is not a tensor tensord can read (a SequenceProto or
// OptionalProto, a string tensor) makes the test a skip, any other error a failure.
struct DataFile {
  HostTensor value;
  std::optional<Outcome> problem;
};

DataFile read_data_file(const fs::path& path, const std::string& role) {
  DataFile out;
  auto t = onnx::read_tensor_file(path.string());
  if (t.ok()) {
    out.value = std::move(*t);
    return out;
  }
  const Status& s = t.status();
  const std::string file = path.parent_path().filename().string() + "/" + path.filename().string();
  if (s.code() == StatusCode::kUnimplemented ||
      s.message().find("not a valid onnx.TensorProto") != std::string::npos ||
      s.message().find("unsupported data type 0") != std::string::npos) {
    out.problem = skipped(file + " is not a tensor tensord reads: " + s.message(),
                          role + " .pb file is not a TensorProto tensord reads");
  } else {
    out.problem = failed("cannot read " + file + ": " + s.message());
  }
  return out;
}

// ONNX 1.12's test generator writes bfloat16 tensors as uint16 (NumPy has no bfloat16, and
// numpy_helper.from_array keeps the uint16 bit patterns), so test_cast_*BFLOAT16* data files say
// uint16 where the model says bfloat16. Where the model declares bfloat16 and the file holds
// uint16 of any shape, the bits are the bfloat16 values: adopt them as such.
void adopt_bfloat16_bits(HostTensor& t, DType declared) {
  if (declared != DType::kBFloat16 || t.dtype() != DType::kUInt16) return;
  auto as_bf16 = HostTensor::from_bytes(DType::kBFloat16, t.shape(), t.data(), t.nbytes());
  if (as_bf16.ok()) t = std::move(*as_bf16);
}

// Ops whose values are random by specification ("may not produce the same values in different
// implementations, even if a seed is specified"): their tests can only check dtype and shape,
// as onnxscript's and other backends' runners do.
std::string nondeterministic_op(const Graph& graph) {
  static const char* const kRandomOps[] = {"Bernoulli",     "Multinomial",
                                           "RandomNormal",  "RandomNormalLike",
                                           "RandomUniform", "RandomUniformLike"};
  for (const Node& n : graph.nodes)
    for (const char* op : kRandomOps)
      if (n.op == op && n.domain.empty()) return op;
  return "";
}

class Runner {
 public:
  Runner(Client& client, std::string device, double rtol, double atol)
      : client_(client), device_(std::move(device)), rtol_(rtol), atol_(atol) {}

  Outcome run(const TestCase& test) {
    const fs::path model_path = test.dir / "model.onnx";
    std::string bytes;
    {
      std::ifstream f(model_path, std::ios::binary);
      if (!f) return failed("cannot open " + model_path.string());
      std::ostringstream ss;
      ss << f.rdbuf();
      bytes = ss.str();
    }
    if (std::string why = onnx::out_of_scope_reason(bytes); !why.empty()) return skipped(why, why);

    auto model = onnx::import_bytes(bytes, "model.onnx", test.dir.string());
    if (!model.ok()) return failed(model.status().message());

    std::vector<std::pair<int64_t, fs::path>> sets;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(test.dir, ec)) {
      const int64_t k = numbered(entry.path().filename().string(), "test_data_set_", "");
      if (k >= 0 && entry.is_directory(ec)) sets.emplace_back(k, entry.path());
    }
    if (sets.empty()) return failed("no test_data_set_N folder in " + test.dir.string());
    std::sort(sets.begin(), sets.end());
    const std::string random_op = nondeterministic_op(model->graph);
    for (const auto& [k, set_dir] : sets) {
      Outcome o = run_data_set(model->graph, set_dir, random_op.empty());
      if (o.verdict != Verdict::kPassed) {
        if (sets.size() > 1) o.reason = "data set " + std::to_string(k) + ": " + o.reason;
        return o;
      }
    }
    Outcome ok;
    if (!random_op.empty())
      ok.reason = random_op + " is non-deterministic: dtype and shape compared, not values";
    return ok;
  }

 private:
  Outcome run_data_set(const Graph& graph, const fs::path& set_dir, bool compare_values) {
    auto input_files = numbered_files(set_dir, "input_");
    if (!input_files.ok()) return failed(input_files.status().message());
    auto output_files = numbered_files(set_dir, "output_");
    if (!output_files.ok()) return failed(output_files.status().message());
    if (input_files->size() != graph.inputs.size())
      return failed(std::to_string(input_files->size()) + " input files but the model has " +
                    std::to_string(graph.inputs.size()) + " runtime inputs");
    if (output_files->size() != graph.outputs.size())
      return failed(std::to_string(output_files->size()) + " output files but the model has " +
                    std::to_string(graph.outputs.size()) + " outputs");

    std::vector<HostTensor> inputs, expected;
    for (size_t i = 0; i < input_files->size(); ++i) {
      DataFile d = read_data_file((*input_files)[i], "input");
      if (d.problem) return *d.problem;
      adopt_bfloat16_bits(d.value, graph.inputs[i].type.dtype);
      inputs.push_back(std::move(d.value));
    }
    for (size_t i = 0; i < output_files->size(); ++i) {
      DataFile d = read_data_file((*output_files)[i], "output");
      if (d.problem) return *d.problem;
      adopt_bfloat16_bits(d.value, graph.outputs[i].type.dtype);
      expected.push_back(std::move(d.value));
    }

    Handles handles(client_);
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto h = client_.upload(inputs[i].view(), device_);
      if (!h.ok())
        return failed("upload of input " + std::to_string(i) + " ('" + graph.inputs[i].name +
                      "'): " + h.status().message());
      handles.held.push_back(*h);
    }
    std::vector<TensorHandle> input_handles = handles.held;
    auto outs = client_.execute(graph, input_handles, device_);
    if (!outs.ok()) return failed(outs.status().message());
    handles.held.insert(handles.held.end(), outs->begin(), outs->end());
    if (outs->size() != expected.size())
      return failed("execute returned " + std::to_string(outs->size()) + " outputs, expected " +
                    std::to_string(expected.size()));
    for (size_t i = 0; i < outs->size(); ++i) {
      const std::string which =
          "output " + std::to_string(i) + " ('" + graph.outputs[i].name + "')";
      auto actual = client_.read((*outs)[i]);
      if (!actual.ok()) return failed(which + ": " + actual.status().message());
      if (std::string why = compare(*actual, expected[i], compare_values, rtol_, atol_);
          !why.empty())
        return failed(which + " " + why);
    }
    return {};
  }

  // Releases every handle of a data set when it goes out of scope, whatever the path.
  struct Handles {
    explicit Handles(Client& c) : client(c) {}
    ~Handles() {
      for (TensorHandle h : held) (void)client.release(h);
    }
    Client& client;
    std::vector<TensorHandle> held;
  };

  Client& client_;
  std::string device_;
  double rtol_, atol_;
};

}  // namespace

int cmd_onnx_test(const OnnxTestOptions& options) {
  if (!(options.rtol >= 0) || !(options.atol >= 0)) {
    print_error(fmt::format("--rtol and --atol must be >= 0, got --rtol {} --atol {}", options.rtol,
                            options.atol));
    return kExitUsage;
  }
  auto tests = collect_tests(options.dirs, options.filter);
  if (!tests.ok()) {
    print_error(tests.status().message());
    return kExitUsage;
  }
  auto cd = open_client(options.device);
  if (!cd.ok()) {
    print_error(cd.status().message());
    return cd.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
  }
  if (tests->empty()) print_error("no test matches --filter '" + options.filter + "'");
  install_crash_reporter();

  Runner runner(*cd->client, cd->device, options.rtol, options.atol);
  int passed = 0, failed_count = 0, skipped_count = 0;
  std::map<std::string, int> skip_groups;
  nlohmann::json json_tests = nlohmann::json::array();
  const auto start = std::chrono::steady_clock::now();
  for (const auto& test : *tests) {
    set_current_test(test.dir.string());
    const Outcome o = runner.run(test);
    switch (o.verdict) {
      case Verdict::kPassed:
        ++passed;
        if (options.verbose && !options.json)
          std::cout << "PASS " << test.name << (o.reason.empty() ? "" : " (" + o.reason + ")")
                    << "\n";
        break;
      case Verdict::kFailed:
        ++failed_count;
        if (!options.json) std::cout << "FAIL " << test.name << ": " << o.reason << "\n";
        break;
      case Verdict::kSkipped:
        ++skipped_count;
        ++skip_groups[o.skip_group];
        if (options.verbose && !options.json)
          std::cout << "SKIP " << test.name << ": " << o.reason << "\n";
        break;
    }
    if (options.json)
      json_tests.push_back({{"name", test.name},
                            {"dir", test.dir.string()},
                            {"status", verdict_name(o.verdict)},
                            {"reason", o.reason}});
    std::cout.flush();
  }
  set_current_test("(after the last test)");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::ostringstream summary;
  summary << passed << " passed, " << failed_count << " failed, " << skipped_count << " skipped";
  if (options.json) {
    nlohmann::json out = {{"device", cd->device},   {"passed", passed},
                          {"failed", failed_count}, {"skipped", skipped_count},
                          {"seconds", seconds},     {"skip_reasons", skip_groups},
                          {"tests", json_tests}};
    // Reasons may quote bytes from a model (node names): never let bad UTF-8 throw.
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    std::cerr << summary.str() << "\n";  // stdout stays one JSON document
  } else {
    if (!skip_groups.empty()) {
      std::vector<std::pair<int, std::string>> groups;
      for (const auto& [reason, count] : skip_groups) groups.emplace_back(count, reason);
      std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
      });
      std::cout << "skipped, by reason:\n";
      for (const auto& [count, reason] : groups)
        std::cout << "  " << count << "  " << reason << "\n";
    }
    std::ostringstream timing;
    timing.setf(std::ios::fixed);
    timing.precision(2);
    timing << "(" << tests->size() << " tests on " << cd->device << " in " << seconds << " s)";
    std::cout << timing.str() << "\n" << summary.str() << "\n";
  }
  return failed_count > 0 ? kExitFailure : kExitOk;
}

}  // namespace tensord::cli
