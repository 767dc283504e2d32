// `tensord bench NETWORK|--model FILE.onnx [options]`: plaidbench's method.
//
//   compile   = load the graph + upload the batch + the first batch (compile happens there)
//   warmup    = ceil(warmup / batch) untimed batches
//   execution = examples / batch timed batches, up to kInFlight in flight (the last one waited)
//   per example = execution / examples
// The outputs of the last timed batch are compared (bench_report.h: an element's error
// relative to its output's scale) with an oracle: the --data expected outputs; else, for a
// device other than a cpu, cpu:0's fast path (float32); for a cpu device the cpu reference
// kernels (no fusion, no oneDNN); or what --oracle asks: `reference`, or `float64` (the graph
// widened to float64 on the reference kernels, float32 only at nodes with no float64 kernel).
// The slow oracles (reference, float64) run on at most the batch's first kSlowCheckExamples
// examples when the graph takes a smaller batch. --no-check: none. Peers (--vs) run the same
// ONNX model on the same batch as subprocesses.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "cli/bench_peers.h"
#include "cli/bench_report.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/suggest.h"
#include "core/errors.h"
#include "core/graph_float64.h"
#include "core/npy.h"
#include "engine/executor.h"
#include "models/zoo.h"
#include "onnx/onnx_export.h"
#include "onnx/onnx_import.h"
#include "rpc/remote_client.h"

namespace tensord::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int64_t kDefaultExamples = 1024;
constexpr int64_t kAllExamples = 64;  // --all: 4 networks x 2 batch sizes
constexpr size_t kInFlight = 2;       // batches queued ahead of the one being waited for
const int64_t kAllBatches[] = {1, 8};
// Examples of a batch that the reference kernels (and the float64 oracle) check.
constexpr int64_t kSlowCheckExamples = 1;

// An error with the exit status it deserves (kExitUsage: bad usage or input).
struct Failure {
  int exit = kExitFailure;
  std::string message;
};
Failure usage_failure(std::string m) { return {kExitUsage, std::move(m)}; }
Failure failure_from(const Status& s, const std::string& context = "") {
  const bool bad_input = s.code() == StatusCode::kInvalidArgument ||
                         s.code() == StatusCode::kNotFound ||
                         s.code() == StatusCode::kUnimplemented;
  return {bad_input ? kExitUsage : kExitFailure,
          context.empty() ? s.message() : context + ": " + s.message()};
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- the workload: graph, one batch of inputs, expected outputs ----

struct Workload {
  std::string name;        // zoo network, or the model file's stem
  std::string model_path;  // --model file ("" for a zoo network)
  bool zoo = false;
  int64_t batch = 1;
  Graph graph;
  std::vector<HostTensor> inputs;    // one batch, bound to graph.inputs in order
  std::vector<HostTensor> expected;  // --data outputs (tiled to the batch); empty: reference
};

struct DataSet {
  std::string dir;
  std::vector<HostTensor> inputs, outputs;
};

// An ONNX test_data_set_N folder (input_K.pb, output_K.pb), or a folder holding
// test_data_set_0.
std::optional<Failure> read_data_set(const std::string& dir_arg, DataSet* out) {
  std::error_code ec;
  fs::path dir(dir_arg);
  if (!fs::is_directory(dir, ec)) return usage_failure("--data '" + dir_arg + "' is not a folder");
  if (!fs::exists(dir / "input_0.pb", ec) && fs::is_directory(dir / "test_data_set_0", ec))
    dir /= "test_data_set_0";
  out->dir = dir.string();
  for (const char* kind : {"input", "output"}) {
    for (int k = 0;; ++k) {
      const fs::path f = dir / fmt::format("{}_{}.pb", kind, k);
      if (!fs::exists(f, ec)) break;
      auto t = onnx::read_tensor_file(f.string());
      if (!t.ok()) return usage_failure("--data: " + t.status().message());
      (std::string(kind) == "input" ? out->inputs : out->outputs).push_back(std::move(*t));
    }
  }
  if (out->inputs.empty())
    return usage_failure("--data '" + dir_arg +
                         "' has no input_0.pb (expected an ONNX test_data_set_N folder)");
  return std::nullopt;
}

// Repeats `t` `times` times along axis 0.
HostTensor tile_batch(const HostTensor& t, int64_t times) {
  if (times == 1) return t;
  Shape shape = t.shape();
  shape[0] *= times;
  HostTensor out(t.dtype(), shape);
  auto* dst = static_cast<unsigned char*>(out.mutable_data());
  for (int64_t i = 0; i < times; ++i)
    std::memcpy(dst + static_cast<size_t>(i) * t.nbytes(), t.data(), t.nbytes());
  return out;
}

// A deterministic input for a declared graph input: N(0, 1) floats, integers in [0, 10) (safe
// as indices), random booleans.
Result<HostTensor> synthetic_input(const ValueInfo& in, int64_t batch, uint32_t seed) {
  Shape shape = in.type.shape;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] >= 0) continue;
    if (i == 0) {
      shape[i] = batch;
    } else {
      return errors::InvalidArgument(
          "input '{}' {} has an unknown dimension {} besides the batch; give the inputs with "
          "--data",
          in.name, in.type.to_string(), i);
    }
  }
  if (in.type.dtype == DType::kUndefined)
    return errors::InvalidArgument("input '{}' declares no type; give the inputs with --data",
                                   in.name);
  TD_RETURN_IF_ERROR(checked_byte_size(in.type.dtype, shape).status());
  const int64_t n = shape_numel(shape);
  std::mt19937 rng(seed);
  std::vector<double> values(static_cast<size_t>(n));
  const bool is_float = in.type.dtype == DType::kFloat32 || in.type.dtype == DType::kFloat64 ||
                        in.type.dtype == DType::kFloat16 || in.type.dtype == DType::kBFloat16;
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> small(0, in.type.dtype == DType::kBool ? 1 : 9);
  for (auto& v : values) v = is_float ? normal(rng) : small(rng);
  HostTensor t(in.type.dtype, shape);
  void* p = t.mutable_data();
  for (int64_t i = 0; i < n; ++i) {
    const double v = values[static_cast<size_t>(i)];
    switch (in.type.dtype) {
      case DType::kFloat32:
        static_cast<float*>(p)[i] = static_cast<float>(v);
        break;
      case DType::kFloat64:
        static_cast<double*>(p)[i] = v;
        break;
      case DType::kFloat16:
        static_cast<uint16_t*>(p)[i] = float_to_half(static_cast<float>(v));
        break;
      case DType::kBFloat16:
        static_cast<uint16_t*>(p)[i] = float_to_bfloat16(static_cast<float>(v));
        break;
      case DType::kInt8:
        static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
        break;
      case DType::kUInt8:
      case DType::kBool:
        static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
        break;
      case DType::kInt16:
        static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v);
        break;
      case DType::kUInt16:
        static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(v);
        break;
      case DType::kInt32:
        static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
        break;
      case DType::kUInt32:
        static_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(v);
        break;
      case DType::kInt64:
        static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
        break;
      case DType::kUInt64:
        static_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(v);
        break;
      default:
        return errors::InvalidArgument(
            "input '{}' is {}: no synthetic values for it; give the "
            "inputs with --data",
            in.name, dtype_name(in.type.dtype));
    }
  }
  return t;
}

// The batch a model file fixes, from its first input's leading dim (-1: any).
int64_t declared_batch(const Graph& g) {
  for (const auto& in : g.inputs)
    if (!in.type.shape.empty()) return in.type.shape[0];
  return -1;
}

std::optional<Failure> check_declared(const Graph& g, const std::vector<HostTensor>& inputs,
                                      const std::string& source) {
  if (inputs.size() != g.inputs.size())
    return usage_failure(fmt::format("{} has {} inputs but the model takes {}", source,
                                     inputs.size(), g.inputs.size()));
  for (size_t k = 0; k < inputs.size(); ++k) {
    const TensorType& want = g.inputs[k].type;
    const HostTensor& v = inputs[k];
    bool fits = want.dtype == DType::kUndefined || want.dtype == v.dtype();
    if (fits && !want.shape.empty()) {
      fits = want.shape.size() == v.shape().size();
      for (size_t i = 0; fits && i < want.shape.size(); ++i)
        fits = want.shape[i] < 0 || want.shape[i] == v.shape()[i];
    }
    if (!fits)
      return usage_failure(fmt::format("{}: input {} is {} but the model declares '{}' as {}",
                                       source, k, v.type().to_string(), g.inputs[k].name,
                                       want.to_string()));
  }
  return std::nullopt;
}

// Builds the graph and one batch. `batch` -1: 1, or what the data set / model fixes.
std::optional<Failure> make_workload(const BenchOptions& o, int64_t batch, Workload* w) {
  DataSet data;
  if (!o.data.empty())
    if (auto f = read_data_set(o.data, &data)) return f;
  const int64_t data_batch =
      data.inputs.empty() || data.inputs[0].shape().empty() ? -1 : data.inputs[0].shape()[0];

  if (!o.model.empty()) {
    auto model = onnx::import_file(o.model);
    if (!model.ok()) {
      const std::string& msg = model.status().message();
      return usage_failure(msg.find(o.model) != std::string::npos
                               ? msg
                               : "cannot load model '" + o.model + "': " + msg);
    }
    w->graph = std::move(model->graph);
    w->model_path = o.model;
    w->name = model_name_for(o.model);
    w->graph.name = w->name;  // the broker's log and status name it so (not "torch_jit")
    const int64_t fixed = declared_batch(w->graph);
    if (batch < 0) batch = data_batch > 0 ? data_batch : (fixed > 0 ? fixed : 1);
    if (fixed > 0 && fixed != batch)
      return usage_failure(fmt::format(
          "the model '{}' has a fixed batch of {} (input '{}' {}); --batch-size {} does not fit",
          o.model, fixed, w->graph.inputs[0].name, w->graph.inputs[0].type.to_string(), batch));
  } else {
    if (batch < 0) batch = data_batch > 0 ? data_batch : 1;
    auto g = models::build_model(o.network, batch);
    if (!g.ok()) return failure_from(g.status());
    w->graph = std::move(*g);
    w->name = o.network;
    w->zoo = true;
  }
  w->batch = batch;

  if (!data.inputs.empty()) {
    // The data set's batch is tiled up to --batch-size when it divides it.
    int64_t times = 1;
    if (data_batch > 0 && data_batch != batch) {
      if (batch % data_batch != 0)
        return usage_failure(
            fmt::format("--batch-size {} is not a multiple of the data set's batch {} ({})", batch,
                        data_batch, data.dir));
      times = batch / data_batch;
    }
    for (auto* list : {&data.inputs, &data.outputs})
      for (auto& t : *list) {
        if (times == 1) continue;
        if (t.shape().empty() || t.shape()[0] != data_batch)
          return usage_failure(fmt::format(
              "cannot tile {} to batch {}: a tensor of shape {} has no leading batch {}", data.dir,
              batch, shape_to_string(t.shape()), data_batch));
        t = tile_batch(t, times);
      }
    if (auto f = check_declared(w->graph, data.inputs, "--data " + data.dir)) return f;
    if (!data.outputs.empty() && data.outputs.size() != w->graph.outputs.size())
      return usage_failure(fmt::format("--data {} has {} expected outputs but the model has {}",
                                       data.dir, data.outputs.size(), w->graph.outputs.size()));
    w->inputs = std::move(data.inputs);
    w->expected = std::move(data.outputs);
  } else if (w->zoo) {
    auto x = models::sample_input(o.network, batch);
    if (!x.ok()) return failure_from(x.status());
    w->inputs.push_back(std::move(*x));
  } else {
    for (size_t k = 0; k < w->graph.inputs.size(); ++k) {
      auto x = synthetic_input(w->graph.inputs[k], batch, static_cast<uint32_t>(k + 1));
      if (!x.ok()) return usage_failure("model '" + o.model + "': " + x.status().message());
      w->inputs.push_back(std::move(*x));
    }
  }
  return std::nullopt;
}

// ---- the client and the device ----

struct Target {
  std::unique_ptr<Client> client;
  std::string address;  // "" = embedded engine
  std::string device;
  DeviceInfo info;
};

int device_rank(const std::string& kind) {
  if (kind == "cuda") return 3;
  if (kind == "gpu") return 2;
  // An OpenCL device may be the CPU itself (PoCL), slower than cpu:0 and missing kernels:
  // chosen by name (--device / TENSORD_DEVICE) only.
  if (kind == "cpu" || kind == "opencl") return 0;
  return 1;
}

std::optional<Failure> open_target(const BenchOptions& o, Target* t) {
  t->address = o.address;
  if (t->address.empty())
    if (const char* env = std::getenv("TENSORD_ADDRESS")) t->address = env;
  auto client = connect(t->address);
  const std::string where =
      t->address.empty() ? "the embedded engine" : "the broker at " + t->address;
  if (!client.ok()) return failure_from(client.status(), "cannot reach " + where);
  t->client = std::move(*client);
  auto devices = t->client->devices();
  if (!devices.ok()) {
    Failure f = failure_from(devices.status(), "cannot reach " + where);
    f.exit = kExitFailure;
    return f;
  }
  if (devices->empty())
    return Failure{kExitFailure, where + " has no devices" +
                                     (t->address.empty() ? " (check TENSORD_DEVICES)" : "")};
  std::string names;
  std::vector<std::string> all;
  for (const auto& d : *devices) {
    names += (names.empty() ? "" : ", ") + d.name;
    all.push_back(d.name);
  }
  std::string wanted = o.device, source = "--device";
  if (wanted.empty())
    if (const char* env = std::getenv("TENSORD_DEVICE"); env && *env) {
      wanted = env;
      source = "TENSORD_DEVICE";
    }
  const DeviceInfo* chosen = nullptr;
  if (!wanted.empty()) {
    for (const auto& d : *devices)
      if (d.name == wanted) chosen = &d;
    if (!chosen)
      return usage_failure(fmt::format("unknown device '{}'{} ({}; available on {}: {})", wanted,
                                       did_you_mean(wanted, all), source, where, names));
  } else {
    for (const auto& d : *devices)
      if (!chosen || device_rank(d.kind) > device_rank(chosen->kind)) chosen = &d;
  }
  t->device = chosen->name;
  t->info = *chosen;
  return std::nullopt;
}

// ---- one benchmark ----

struct PeerOutcome {
  PeerResult run;
  bool compared = false;
  Correctness correctness;
  std::string note;  // why outputs were not compared
};

struct BenchResult {
  std::string network, model_path, device, device_model, address;
  int threads = 0;
  int64_t batch = 0, examples = 0, warmup = 0;
  double compile_s = 0, execution_s = 0, per_example_s = 0;
  double timed_start_unix = 0, timed_end_unix = 0;  // when the timed run began and ended
  int64_t peak_device_bytes = 0;
  std::string reference;         // "data", "cpu-fast", "cpu-reference", "float64" or "none"
  std::string reference_note;    // "" or e.g. "float32 at 2 nodes with no float64 kernel: a, b"
  double check_s = 0;            // the oracle's run and the comparison
  int64_t checked_examples = 0;  // examples of the batch compared (0: --no-check)
  Correctness correctness;
  // --oracle with --data: the oracle's own outputs against the --data ones.
  std::optional<Correctness> oracle_correctness;
  std::vector<HostTensor> outputs;  // the last timed batch
  std::vector<std::string> output_names;
  std::vector<PeerOutcome> peers;
  // --profile (the embedded engine): the timed runs' steps, reference-kernel shares.
  std::optional<ProfileTotals> profile;
  std::string profile_note;  // why there is none (a broker's steps are not seen here)
  // --breakdown through a broker: the median of each request phase over the timed runs, in
  // microseconds, in the order of a request's life; the requests timed.
  std::vector<std::pair<std::string, double>> breakdown;
  int in_flight = 0;  // batches queued ahead of the one waited for (0: --wait-each)
  int64_t breakdown_requests = 0;
  std::string breakdown_note;  // why there is none
  // Through a broker: how the runs went ("run channel" on the broker's host, else "gRPC").
  std::string transport;
};

// Waits for every handle of a batch (first error returned) and releases them unless kept.
Status retire(Client& c, const std::vector<TensorHandle>& outs, bool keep) {
  Status first = OkStatus();
  for (TensorHandle h : outs) {
    Status s = c.wait(h);
    if (!s.ok() && first.ok()) first = s;
    if (!keep) (void)c.release(h);
  }
  return first;
}

// Runs `count` batches with up to kInFlight queued; the last batch's handles are kept in
// *last (when given).
Status run_batches(Client& c, ModelHandle model, const std::vector<TensorHandle>& inputs,
                   int64_t count, int64_t batch, ProgressBar* bar,
                   std::vector<TensorHandle>* last, size_t in_flight = kInFlight) {
  std::deque<std::vector<TensorHandle>> pending;
  int64_t done = 0;
  Status status = OkStatus();
  for (int64_t i = 0; i < count && status.ok(); ++i) {
    auto outs = c.run(model, inputs);
    if (!outs.ok()) {
      status = outs.status();
      break;
    }
    pending.push_back(std::move(*outs));
    while (pending.size() > in_flight && status.ok()) {
      status = retire(c, pending.front(), false);
      pending.pop_front();
      ++done;
      if (bar) bar->update(done * batch);
    }
  }
  while (!pending.empty()) {
    const bool keep = status.ok() && last && pending.size() == 1;
    Status s = retire(c, pending.front(), keep);
    if (status.ok()) status = s;
    if (keep) *last = pending.front();
    pending.pop_front();
    if (bar) bar->update(++done * batch);
  }
  return status;
}

std::optional<Failure> time_workload(Target& t, const Workload& w, int64_t examples, int64_t warmup,
                                     BenchResult* r, double start_at = 0,
                                     bool breakdown = false, bool wait_each = false) {
  Client& c = *t.client;
  // Through a broker, runs are pipelined as the embedded engine's are (the next is queued
  // while the last computes), unless each is waited for.
  const size_t in_flight = wait_each ? 0 : kInFlight;
  if (auto* remote = dynamic_cast<rpc::RemoteClient*>(&c)) remote->set_pipeline_runs(!wait_each);
  r->in_flight = static_cast<int>(in_flight);
  const std::string on = fmt::format("{} on {}", w.name, t.device);
  const auto t0 = Clock::now();
  std::optional<PhaseTicker> compiling(std::in_place, "compile " + on);
  auto model = c.load(w.graph, t.device);
  if (!model.ok()) return failure_from(model.status(), "cannot load " + on);
  std::vector<TensorHandle> inputs;
  auto cleanup = [&] {
    for (TensorHandle h : inputs) (void)c.release(h);
    (void)c.unload(*model);
  };
  for (size_t k = 0; k < w.inputs.size(); ++k) {
    auto h = c.upload(w.inputs[k].view(), t.device);
    if (!h.ok()) {
      cleanup();
      return Failure{kExitFailure,
                     fmt::format("cannot upload input '{}' to {}: {}", w.graph.inputs[k].name,
                                 t.device, h.status().message())};
    }
    inputs.push_back(*h);
  }
  Status s = run_batches(c, *model, inputs, 1, w.batch, nullptr, nullptr);
  r->compile_s = seconds_since(t0);
  compiling.reset();
  if (s.ok() && warmup > 0) {
    ProgressBar bar("warmup " + w.name, ((warmup + w.batch - 1) / w.batch) * w.batch);
    s = run_batches(c, *model, inputs, (warmup + w.batch - 1) / w.batch, w.batch, &bar, nullptr,
                    in_flight);
  }
  std::vector<TensorHandle> last;
  if (s.ok()) {
    // --start-at: processes started together run their timed parts at the same time.
    using Wall = std::chrono::system_clock;
    auto unix_now = [] {
      return std::chrono::duration<double>(Wall::now().time_since_epoch()).count();
    };
    if (start_at > 0 && unix_now() < start_at)
      std::this_thread::sleep_for(std::chrono::duration<double>(start_at - unix_now()));
    ProgressBar bar(fmt::format("{} batch {}", w.name, w.batch), examples);
    if (profiling()) reset_profile_totals();
    auto* remote = breakdown ? dynamic_cast<rpc::RemoteClient*>(&c) : nullptr;
    if (remote) {
      remote->set_breakdown(true);
      (void)remote->take_breakdown();
    } else if (breakdown) {
      r->breakdown_note = "--breakdown times requests through a broker (--address); "
                          "the embedded engine answers without one";
    }
    r->timed_start_unix = unix_now();
    const auto t1 = Clock::now();
    s = run_batches(c, *model, inputs, examples / w.batch, w.batch, &bar, &last, in_flight);
    r->execution_s = seconds_since(t1);
    r->timed_end_unix = unix_now();
    if (const auto* through = dynamic_cast<const rpc::RemoteClient*>(&c))
      r->transport = through->uses_run_channel() ? "run channel" : "gRPC";
    if (remote) {
      remote->set_breakdown(false);
      const auto timings = remote->take_breakdown();
      r->breakdown = rpc::median_phases(timings);
      r->breakdown_requests = static_cast<int64_t>(timings.size());
    }
    if (profiling()) {
      if (t.address.empty())
        r->profile = profile_totals();
      else
        r->profile_note = "--profile sees the embedded engine's steps only, not a broker's";
    }
  }
  if (!s.ok()) {
    cleanup();
    return Failure{kExitFailure, "running " + on + " failed: " + s.message()};
  }
  r->per_example_s = r->execution_s / static_cast<double>(examples);
  for (size_t k = 0; k < last.size(); ++k) {
    auto v = c.read(last[k]);
    (void)c.release(last[k]);
    if (!v.ok()) {
      cleanup();
      return Failure{kExitFailure, fmt::format("reading output '{}' failed: {}",
                                               w.graph.outputs[k].name, v.status().message())};
    }
    r->outputs.push_back(std::move(*v));
  }
  cleanup();
  if (auto devices = c.devices(); devices.ok())
    for (const auto& d : *devices)
      if (d.name == t.device) r->peak_device_bytes = d.memory_peak;
  return std::nullopt;
}

// ---- the oracle ----

struct Oracle {
  std::string kind;  // "data", "cpu-fast", "cpu-reference", "float64", "none"
  std::vector<HostTensor> outputs;
  int64_t rows = -1;  // the outputs are the first `rows` examples of the batch (-1: all)
  std::string note;
};

// "against the cpu reference kernels" ...
std::string oracle_phrase(const std::string& kind) {
  if (kind == "data") return "the --data outputs";
  if (kind == "cpu-fast") return "cpu:0's fast path (float32)";
  if (kind == "float64") return "the graph in float64 on the cpu reference kernels";
  return "the cpu reference kernels";
}

// Runs `graph` on `inputs` in a private engine on cpu:0: the reference kernels, or the fast
// path (fusion, oneDNN). Errors keep the engine's message (it names the failing node).
Result<std::vector<HostTensor>> run_on_cpu(const Graph& graph,
                                           const std::vector<HostTensor>& inputs, bool reference) {
  LocalClientOptions oracle;
  oracle.devices = "cpu:0";
  oracle.reference_kernels = reference;
  TD_ASSIGN_OR_RETURN(auto client, make_local_client(oracle));
  std::vector<TensorHandle> handles;
  for (const auto& t : inputs) {
    TD_ASSIGN_OR_RETURN(auto h, client->upload(t.view(), "cpu:0"));
    handles.push_back(h);
  }
  TD_ASSIGN_OR_RETURN(auto outs, client->execute(graph, handles, "cpu:0"));
  std::vector<HostTensor> result;
  for (size_t k = 0; k < outs.size(); ++k) {
    auto v = client->read(outs[k]);
    if (!v.ok()) return v.status().with_context("output '" + graph.outputs[k].name + "'");
    result.push_back(std::move(*v));
  }
  return result;  // the client's session (and every handle in it) closes with the client
}

// The graph widened to float64 on the reference kernels, outputs rounded once to float32.
// A node the float64 run fails at (no float64 kernel, or a schema that wants float32) is kept
// in float32 and the run retried; `*kept` lists those nodes.
Result<std::vector<HostTensor>> run_float64(const Graph& graph,
                                            const std::vector<HostTensor>& inputs,
                                            std::vector<std::string>* kept) {
  std::vector<TensorType> types;
  std::vector<HostTensor> wide;
  for (const auto& t : inputs) {
    types.push_back(t.type());
    wide.push_back(widen_tensor(t));
  }
  std::set<std::string> keep;
  for (size_t attempt = 0; attempt <= graph.nodes.size(); ++attempt) {
    TD_ASSIGN_OR_RETURN(Graph g, widen_to_float64(graph, types, keep));
    auto outs = run_on_cpu(g, wide, true);
    if (outs.ok()) {
      for (auto& t : *outs) t = narrow_tensor(t);
      kept->assign(keep.begin(), keep.end());
      return outs;
    }
    const std::string node = node_named_in(outs.status().message());
    if (node.empty() || keep.count(node)) return outs.status();
    bool known = false;
    for (const auto& n : g.nodes) known |= n.name == node;
    if (!known) return outs.status();
    keep.insert(node);
  }
  return errors::Internal("the float64 run kept failing");
}

// The oracle `o.oracle` names (or the automatic one) for `w` on device `t`.
std::string oracle_kind(const BenchOptions& o, const Workload& w, const Target& t) {
  if (o.no_check) return "none";
  if (o.oracle == "fast") return "cpu-fast";
  if (o.oracle == "reference") return "cpu-reference";
  if (o.oracle == "float64") return "float64";
  if (!w.expected.empty()) return "data";
  return t.info.kind == "cpu" ? "cpu-reference" : "cpu-fast";
}

// Whether every output has the batch as its leading dimension, so that the first rows of the
// batch's outputs are the outputs of the batch's first rows.
bool outputs_batched(const std::vector<HostTensor>& outs, int64_t batch) {
  for (const auto& t : outs)
    if (t.shape().empty() || t.shape()[0] != batch) return false;
  return !outs.empty();
}

Oracle run_oracle(const std::string& kind, const Workload& w,
                  const std::vector<HostTensor>& device_outputs) {
  Oracle r;
  r.kind = kind;
  if (kind == "none") return r;
  if (kind == "data") {
    r.outputs = w.expected;
    return r;
  }
  const bool slow = kind != "cpu-fast";
  // The slow oracles on the first examples only: a zoo network is rebuilt at that batch; a
  // model file whose batch is not fixed takes the smaller inputs as they are.
  int64_t rows = -1;
  Graph small;
  if (slow && w.batch > kSlowCheckExamples && outputs_batched(device_outputs, w.batch)) {
    if (w.zoo) {
      auto g = models::build_model(w.name, kSlowCheckExamples);
      if (g.ok()) {
        small = std::move(*g);
        rows = kSlowCheckExamples;
      }
    } else if (declared_batch(w.graph) < 0) {
      small = w.graph;
      rows = kSlowCheckExamples;
    }
  }
  auto run = [&](const Graph& g, const std::vector<HostTensor>& in,
                 std::vector<std::string>* kept) -> Result<std::vector<HostTensor>> {
    if (kind == "float64") return run_float64(g, in, kept);
    return run_on_cpu(g, in, kind == "cpu-reference");
  };
  std::vector<std::string> kept;
  Result<std::vector<HostTensor>> outs = errors::Internal("not run");
  if (rows > 0) {
    std::vector<HostTensor> in;
    for (const auto& t : w.inputs) in.push_back(first_rows(t, rows));
    outs = run(small, in, &kept);
    if (!outs.ok() || !outputs_batched(*outs, rows)) rows = -1;  // the whole batch, then
  }
  if (rows < 0) {
    kept.clear();
    outs = run(w.graph, w.inputs, &kept);
  }
  if (!outs.ok() && kind == "float64") {
    // No float64 run at all: the float32 reference kernels, said in the verdict.
    r.note =
        "float64 run failed (" + outs.status().message() + "), float32 reference kernels instead";
    r.kind = "cpu-reference";
    rows = -1;
    outs = run_on_cpu(w.graph, w.inputs, true);
  }
  if (!outs.ok()) {
    r.note =
        (r.note.empty() ? "" : r.note + "; ") + "the oracle failed: " + outs.status().message();
    return r;
  }
  if (!kept.empty())
    r.note = fmt::format("float32 at {} node{} with no float64 kernel: {}", kept.size(),
                         kept.size() == 1 ? "" : "s", fmt::join(kept, ", "));
  r.outputs = std::move(*outs);
  r.rows = rows;
  return r;
}

// The outputs (the first `rows` examples of each when rows > 0) against the oracle's.
Correctness check_against(const Oracle& oracle, const std::vector<HostTensor>& outputs) {
  if (oracle.rows <= 0) return compare_outputs(oracle.outputs, outputs);
  std::vector<HostTensor> first;
  for (const auto& t : outputs) first.push_back(first_rows(t, oracle.rows));
  return compare_outputs(oracle.outputs, first);
}

// Temporary folder, removed when this goes out of scope.
struct TempDir {
  std::string path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/tensord-bench-XXXXXX";
    if (mkdtemp(tmpl.data())) path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

void run_peers(const BenchOptions& o, const Workload& w, const Oracle* reference, int64_t examples,
               int threads, BenchResult* r) {
  TempDir tmp;
  auto not_run = [&](const std::string& why) {
    for (const auto& p : o.vs) {
      PeerOutcome po;
      po.run.peer = p;
      po.run.failed = true;
      po.run.reason = why;
      r->peers.push_back(po);
    }
  };
  if (tmp.path.empty()) return not_run("cannot create a temporary folder");
  PeerRequest req;
  req.network = w.zoo ? w.name : "";
  req.examples = examples;
  req.batch_size = w.batch;
  req.warmup = o.warmup;
  req.threads = threads;
  req.model = w.model_path;
  if (req.model.empty()) {  // a zoo network: the peers get it as ONNX
    req.model = tmp.path + "/" + w.name + ".onnx";
    if (Status s = onnx::export_file(w.graph, req.model); !s.ok())
      return not_run("cannot export the network as ONNX: " + s.message());
  }
  for (size_t k = 0; k < w.inputs.size(); ++k) {
    const std::string f = fmt::format("{}/input_{}.npy", tmp.path, k);
    if (Status s = write_npy(f, w.inputs[k]); !s.ok())
      return not_run("cannot write the input batch: " + s.message());
    req.inputs.emplace_back(w.graph.inputs[k].name, f);
  }
  for (const auto& peer : o.vs) {
    req.outputs_dir = tmp.path + "/" + peer;
    std::error_code ec;
    fs::create_directories(req.outputs_dir, ec);
    PeerOutcome po;
    {
      PhaseTicker running(fmt::format("peer {}: {}, {} examples, batch {}", peer, w.name,
                                      examples, w.batch));
      po.run = run_peer(peer, req);
    }
    if (po.run.available) {
      std::vector<HostTensor> outs;
      for (const auto& out : w.graph.outputs) {
        auto it = po.run.outputs.find(out.name);
        if (it == po.run.outputs.end()) {
          po.note = "no output '" + out.name + "' from the peer";
          break;
        }
        auto v = read_npy(it->second);
        if (!v.ok()) {
          po.note = "unreadable output '" + out.name + "': " + v.status().message();
          break;
        }
        outs.push_back(std::move(*v));
      }
      if (po.note.empty() && !reference) po.note = "no reference";
      if (po.note.empty()) {
        po.compared = true;
        po.correctness = check_against(*reference, outs);
      }
    }
    r->peers.push_back(std::move(po));
  }
}

// `announce`: where the "Running ..." line goes (nullptr: nowhere).
std::optional<Failure> bench_one(const BenchOptions& o, Target& t, int64_t batch, int64_t examples,
                                 std::ostream* announce, BenchResult* r) {
  Workload w;
  if (auto f = make_workload(o, batch, &w)) return f;
  if (examples % w.batch != 0)
    return usage_failure(
        fmt::format("--examples {} is not divisible by the batch size {} "
                    "(whole batches only)",
                    examples, w.batch));
  r->network = w.name;
  for (const auto& out : w.graph.outputs) r->output_names.push_back(out.name);
  r->model_path = w.model_path;
  r->device = t.device;
  r->device_model = t.info.model;
  r->threads = t.info.threads;
  r->address = t.address;
  r->batch = w.batch;
  r->examples = examples;
  r->warmup = o.warmup;
  if (announce)
    *announce << fmt::format("Running {} examples with {}, batch size {}, on {}{} ({}{})", examples,
                             w.name, w.batch, t.device, t.address.empty() ? "" : " at " + t.address,
                             t.info.model,
                             t.info.threads ? fmt::format(", {} threads", t.info.threads) : "")
              << std::endl;
  if (auto f = time_workload(t, w, examples, o.warmup, r, o.start_at, o.breakdown, o.wait_each))
    return f;

  const std::string kind = oracle_kind(o, w, t);
  std::optional<PhaseTicker> checking;
  if (kind != "none" && kind != "data")
    checking.emplace(fmt::format("reference check: {} batch {} on {}", w.name, w.batch,
                                 kind == "cpu-fast" ? "cpu:0's fast path"
                                 : kind == "float64" ? "the cpu reference kernels in float64"
                                                     : "the cpu reference kernels"));
  const auto t0 = Clock::now();
  Oracle oracle = run_oracle(kind, w, r->outputs);
  r->reference = oracle.kind;
  r->reference_note = oracle.note;
  if (kind != "none") {
    if (oracle.outputs.empty() && !w.graph.outputs.empty()) {
      r->correctness.pass = false;
      r->correctness.fail_ratio = 1;
      r->correctness.problem = oracle.note;
    } else {
      r->correctness = check_against(oracle, r->outputs);
    }
    r->checked_examples = oracle.rows > 0 ? oracle.rows : w.batch;
    if (oracle.kind != "data" && !w.expected.empty() && !oracle.outputs.empty()) {
      std::vector<HostTensor> expected;
      for (const auto& e : w.expected)
        expected.push_back(oracle.rows > 0 ? first_rows(e, oracle.rows) : e);
      r->oracle_correctness = compare_outputs(expected, oracle.outputs);
    }
  }
  r->check_s = seconds_since(t0);
  checking.reset();
  if (!o.vs.empty())
    run_peers(o, w, kind != "none" && !oracle.outputs.empty() ? &oracle : nullptr, examples,
              t.info.kind == "cpu" ? t.info.threads : 0, r);
  return std::nullopt;
}

// ---- output ----

nlohmann::json correctness_json(const Correctness& c) {
  nlohmann::json j = {{"pass", c.pass},
                      {"max_error", c.max_error},
                      {"max_abs_error", c.max_abs_error},
                      {"max_error_of_scale", c.max_error_of_scale},
                      {"fail_ratio", c.fail_ratio},
                      {"elements", c.elements},
                      {"failed", c.failed},
                      {"nonfinite", c.nonfinite}};
  if (!c.problem.empty()) j["problem"] = c.problem;
  return j;
}

// --profile's figures: shares of step time on reference kernels and in regions with oneDNN
// reference primitives, the steps (largest first), the ref primitives by region.
nlohmann::json profile_json(const ProfileTotals& p) {
  auto share = [&](double s) { return p.total_s > 0 ? s / p.total_s : 0.0; };
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& row : p.rows)
    steps.push_back({{"step", row.step}, {"kind", row.kind}, {"seconds", row.seconds},
                     {"calls", row.calls}, {"share", share(row.seconds)}});
  return {{"total_s", p.total_s},
          {"reference_share", share(p.reference_s)},
          {"onednn_ref_share", share(p.onednn_ref_s)},
          {"onednn_ref_primitives", p.onednn_ref_primitives},
          {"steps", steps}};
}

// The human form of --profile: the shares, the ten largest steps, the ref primitives.
std::string profile_text(const ProfileTotals& p) {
  auto pct = [&](double s) { return p.total_s > 0 ? 100 * s / p.total_s : 0.0; };
  std::string out = fmt::format(
      "profile: {:.3f} ms in steps; reference kernels {:.1f}%, regions with oneDNN ref "
      "primitives {:.1f}%\n",
      p.total_s * 1e3, pct(p.reference_s), pct(p.onednn_ref_s));
  for (size_t i = 0; i < p.rows.size() && i < 10; ++i) {
    // A kernel step's name says "[reference]" already; a region's kind ("onednn-ref") is added.
    const std::string& kind = p.rows[i].kind;
    const bool named = p.rows[i].step.find("[" + kind + "]") != std::string::npos;
    out += fmt::format("  {:>10.3f} ms {:>5.1f}% {:>8} calls  {}{}\n", p.rows[i].seconds * 1e3,
                       pct(p.rows[i].seconds), p.rows[i].calls, p.rows[i].step,
                       kind.empty() || named ? "" : " [" + kind + "]");
  }
  for (const auto& r : p.onednn_ref_primitives) out += "  oneDNN ref primitive: " + r + "\n";
  return out;
}

nlohmann::json result_json(const BenchResult& r) {
  nlohmann::json j = {
      {"network", r.network},
      {"model", r.model_path.empty() ? nlohmann::json() : nlohmann::json(r.model_path)},
      {"device", r.device},
      {"device_model", r.device_model},
      {"threads", r.threads},
      {"address", r.address.empty() ? nlohmann::json() : nlohmann::json(r.address)},
      {"transport", r.transport.empty() ? nlohmann::json() : nlohmann::json(r.transport)},
      {"batch", r.batch},
      {"examples", r.examples},
      {"warmup", r.warmup},
      {"compile_s", r.compile_s},
      {"execution_s", r.execution_s},
      {"per_example_s", r.per_example_s},
      {"queued_ahead", r.in_flight},
      {"timed_start_unix", r.timed_start_unix},
      {"timed_end_unix", r.timed_end_unix},
      {"peak_device_bytes", r.peak_device_bytes},
      {"reference", r.reference},
      {"check_s", r.check_s},
      {"checked_examples", r.checked_examples},
      {"correctness", r.reference == "none" ? nlohmann::json() : correctness_json(r.correctness)}};
  if (!r.reference_note.empty()) j["reference_note"] = r.reference_note;
  if (r.oracle_correctness) j["oracle_correctness"] = correctness_json(*r.oracle_correctness);
  if (r.profile) j["profile"] = profile_json(*r.profile);
  if (!r.profile_note.empty()) j["profile_note"] = r.profile_note;
  if (!r.breakdown.empty()) {
    nlohmann::json b = nlohmann::json::object();
    for (const auto& [phase, us] : r.breakdown) b[phase + "_us"] = us;
    b["requests"] = r.breakdown_requests;
    j["breakdown"] = b;
  }
  if (!r.breakdown_note.empty()) j["breakdown_note"] = r.breakdown_note;
  nlohmann::json peers = nlohmann::json::object();
  for (const auto& p : r.peers) {
    nlohmann::json pj = {{"available", p.run.available}};
    if (!p.run.available) {
      pj["reason"] = p.run.reason;
      pj["failed"] = p.run.failed;
    } else {
      pj["version"] = p.run.version;
      pj["threads"] = p.run.threads;
      pj["compile_s"] = p.run.compile_s;
      pj["execution_s"] = p.run.execution_s;
      pj["per_example_s"] = p.run.per_example_s;
      pj["ratio"] = p.run.per_example_s > 0 ? r.per_example_s / p.run.per_example_s : 0.0;
      pj["correctness"] = p.compared ? correctness_json(p.correctness) : nlohmann::json();
      if (!p.note.empty()) pj["note"] = p.note;
    }
    peers[p.run.peer] = pj;
  }
  j["peers"] = peers;
  return j;
}

std::string peer_summary(const BenchResult& r, const PeerOutcome& p) {
  if (!p.run.available)
    return fmt::format("vs {}: {}: {}", p.run.peer, p.run.failed ? "failed" : "not available",
                       p.run.reason);
  std::string s = fmt::format("vs {} {}: {:.2f} ms ({:.2f}x)", p.run.peer, p.run.version,
                              p.run.per_example_s * 1e3,
                              p.run.per_example_s > 0 ? r.per_example_s / p.run.per_example_s : 0);
  if (p.compared)
    s += ", outputs " + correctness_line(p.correctness);
  else
    s += ", outputs not compared: " + p.note;
  return s;
}

void print_human(const BenchResult& r) {
  std::cout << fmt::format("compile {:.2f} s, execution {:.2f} s, {:.2f} ms per example\n",
                           r.compile_s, r.execution_s, r.per_example_s * 1e3);
  std::cout << "peak device memory " << tensord::format_bytes(r.peak_device_bytes) << "\n";
  if (!r.transport.empty())
    std::cout << "through the broker by " << r.transport
              << (r.transport == "gRPC" ? "" : " (same host: RunModel without gRPC)") << "\n";
  if (r.reference == "none") {
    std::cout << "Correctness: not checked (--no-check)\n";
  } else {
    std::cout << "Correctness: " << correctness_line(r.correctness) << " (against "
              << oracle_phrase(r.reference);
    if (r.checked_examples < r.batch)
      std::cout << fmt::format(", the first {} of {} examples", r.checked_examples, r.batch);
    if (!r.reference_note.empty()) std::cout << "; " << r.reference_note;
    std::cout << fmt::format("; check {:.2f} s)\n", r.check_s);
    if (r.oracle_correctness)
      std::cout << "The oracle against the --data outputs: "
                << correctness_line(*r.oracle_correctness) << "\n";
  }
  for (const auto& p : r.peers) std::cout << peer_summary(r, p) << "\n";
  if (r.profile) std::cout << profile_text(*r.profile);
  if (!r.profile_note.empty()) std::cout << "profile: " << r.profile_note << "\n";
  if (!r.breakdown.empty()) {
    std::cout << fmt::format("request breakdown (median of {} requests, microseconds):\n",
                             r.breakdown_requests);
    for (const auto& [phase, us] : r.breakdown) {
      // The transport's two halves (same host only: -1 when the broker's clock is not ours).
      const bool half = phase == "request_to_handler" || phase == "handler_to_answer";
      if (half && us < 0) continue;
      std::cout << fmt::format("  {}{:<28} {:>9.1f}\n", half ? "  " : "", phase, us);
    }
  }
  if (!r.breakdown_note.empty()) std::cout << "breakdown: " << r.breakdown_note << "\n";
}

void print_table(const std::vector<BenchResult>& results, const std::vector<std::string>& peers) {
  std::string head = fmt::format("{:<14} {:>5} {:>10} {:>12} {:>11}  {:<11} {:>9} {:>8} {:>7}",
                                 "network", "batch", "compile s", "execution s", "ms/example",
                                 "correctness", "max_error", "of scale", "check s");
  for (const auto& p : peers) head += fmt::format("  {:>20}", "vs " + p);
  std::cout << head << "\n";
  for (const auto& r : results) {
    std::string line =
        fmt::format("{:<14} {:>5} {:>10.2f} {:>12.2f} {:>11.2f}  {:<11} {:>9.1e} {:>8.1e} {:>7.2f}",
                    r.network, r.batch, r.compile_s, r.execution_s, r.per_example_s * 1e3,
                    r.reference == "none" ? "-" : (r.correctness.pass ? "PASS" : "FAIL"),
                    r.correctness.max_error, r.correctness.max_error_of_scale, r.check_s);
    for (const auto& p : r.peers) {
      std::string cell = "n/a";
      if (p.run.available && p.run.per_example_s > 0)
        cell = fmt::format("{:.2f} ms ({:.2f}x)", p.run.per_example_s * 1e3,
                           r.per_example_s / p.run.per_example_s);
      line += fmt::format("  {:>20}", cell);
    }
    std::cout << line << "\n";
  }
}

Status write_events(const std::string& dir, const std::vector<BenchResult>& results,
                    std::string* path) {
  TD_ASSIGN_OR_RETURN(EventWriter w, EventWriter::open(dir));
  *path = w.path();
  for (const auto& r : results) {
    const std::string p = r.network + "/";
    const int64_t step = r.batch;
    TD_RETURN_IF_ERROR(w.add_scalar(p + "compile_s", r.compile_s, step));
    TD_RETURN_IF_ERROR(w.add_scalar(p + "execution_s", r.execution_s, step));
    TD_RETURN_IF_ERROR(w.add_scalar(p + "per_example_ms", r.per_example_s * 1e3, step));
    TD_RETURN_IF_ERROR(
        w.add_scalar(p + "peak_device_bytes", static_cast<double>(r.peak_device_bytes), step));
    TD_RETURN_IF_ERROR(w.add_scalar(p + "max_error", r.correctness.max_error, step));
    TD_RETURN_IF_ERROR(w.add_scalar(p + "max_abs_error", r.correctness.max_abs_error, step));
    TD_RETURN_IF_ERROR(w.add_scalar(p + "fail_ratio", r.correctness.fail_ratio, step));
    TD_RETURN_IF_ERROR(
        w.add_scalar(p + "max_error_of_scale", r.correctness.max_error_of_scale, step));
    for (const auto& peer : r.peers) {
      if (!peer.run.available || peer.run.per_example_s <= 0) continue;
      TD_RETURN_IF_ERROR(
          w.add_scalar(p + peer.run.peer + "/per_example_ms", peer.run.per_example_s * 1e3, step));
      TD_RETURN_IF_ERROR(w.add_scalar(p + peer.run.peer + "/ratio",
                                      r.per_example_s / peer.run.per_example_s, step));
    }
  }
  return OkStatus();
}

Status write_outputs(const std::string& dir, const std::vector<std::string>& names,
                     const std::vector<HostTensor>& outs) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    return errors::InvalidArgument("cannot create the output folder '{}'", dir);
  for (size_t k = 0; k < outs.size() && k < names.size(); ++k)
    TD_RETURN_IF_ERROR(
        write_npy((fs::path(dir) / (file_name_for(names[k]) + ".npy")).string(), outs[k]));
  return OkStatus();
}

std::optional<Failure> check_options(const BenchOptions& o) {
  const int sources = !o.network.empty() + !o.model.empty() + o.all;
  if (sources == 0)
    return usage_failure("bench: name a network (" +
                         fmt::format("{}", fmt::join(models::model_names(), ", ")) +
                         "), --model FILE.onnx or --all");
  if (sources > 1) return usage_failure("bench: give only one of NETWORK, --model and --all");
  if (!o.network.empty()) {
    const auto names = models::model_names();
    if (std::find(names.begin(), names.end(), o.network) == names.end())
      return usage_failure(fmt::format("unknown network '{}'{} (known: {}; or --model FILE.onnx)",
                                       o.network, did_you_mean(o.network, names),
                                       fmt::join(names, ", ")));
  }
  if (o.all &&
      (!o.data.empty() || o.batch_size != -1 || !o.export_path.empty() || !o.outputs.empty()))
    return usage_failure(
        "--all runs every zoo network at batch 1 and 8: it takes no --data, "
        "--batch-size, --export or --outputs");
  if (o.examples != -1 && o.examples < 1)
    return usage_failure(fmt::format("--examples must be >= 1, got {}", o.examples));
  if (o.batch_size != -1 && o.batch_size < 1)
    return usage_failure(fmt::format("--batch-size must be >= 1, got {}", o.batch_size));
  if (o.warmup < 0) return usage_failure(fmt::format("--warmup must be >= 0, got {}", o.warmup));
  const int64_t examples = o.examples > 0 ? o.examples : (o.all ? kAllExamples : kDefaultExamples);
  if (o.batch_size > 0 && examples % o.batch_size != 0)
    return usage_failure(
        fmt::format("--examples {} is not divisible by --batch-size {} (whole batches only)",
                    examples, o.batch_size));
  if (o.all)
    for (int64_t b : kAllBatches)
      if (examples % b != 0)
        return usage_failure(fmt::format(
            "--examples {} is not divisible by batch size {} (--all runs batch 1 and 8)", examples,
            b));
  if (!o.oracle.empty() && o.oracle != "fast" && o.oracle != "reference" && o.oracle != "float64")
    return usage_failure(
        fmt::format("--oracle: unknown oracle '{}' (known: fast, reference, float64)", o.oracle));
  if (o.no_check && !o.oracle.empty())
    return usage_failure("give only one of --oracle and --no-check");
  for (const auto& p : o.vs) {
    const auto& known = known_peers();
    if (std::find(known.begin(), known.end(), p) == known.end())
      return usage_failure(
          fmt::format("--vs: unknown peer '{}' (known: {})", p, fmt::join(known, ", ")));
  }
  return std::nullopt;
}

int fail(const Failure& f) {
  print_error(f.message);
  return f.exit;
}

// ---- --devices: data parallel (Client::run_data_parallel) next to the first device alone ----

int bench_devices(const BenchOptions& options) {
  BenchOptions o = options;
  const std::vector<std::string>& devices = o.devices;
  const int64_t k = static_cast<int64_t>(devices.size());
  if (o.all || !o.vs.empty() || !o.export_path.empty() || !o.outputs.empty() || !o.logdir.empty())
    return fail(usage_failure(
        "--devices runs one network data parallel: it takes no --all, --vs, --export, "
        "--outputs or --logdir"));
  const int64_t batch = o.batch_size > 0 ? o.batch_size : k;
  if (batch < k)
    return fail(usage_failure(fmt::format(
        "--batch-size {} is smaller than the {} devices of --devices (one example a device at "
        "least)",
        batch, k)));
  const int64_t batches = o.examples > 0 ? std::max<int64_t>(1, o.examples / batch) : 4;
  o.batch_size = batch;
  o.examples = batches * batch;
  if (auto f = check_options(o)) return fail(*f);
  Workload w;
  if (auto f = make_workload(o, batch, &w)) return fail(*f);
  std::string address = o.address;
  if (address.empty())
    if (const char* env = std::getenv("TENSORD_ADDRESS")) address = env;
  auto client = connect(address);
  if (!client.ok()) return fail(failure_from(client.status(), "cannot connect"));
  Client& c = **client;
  const std::string& first = devices[0];
  auto model = c.load(w.graph, first);
  if (!model.ok()) return fail(failure_from(model.status(), "cannot load " + w.name + " on " + first));
  std::vector<TensorHandle> inputs;
  for (const auto& x : w.inputs) {
    auto h = c.upload(x.view(), first);
    if (!h.ok()) return fail(failure_from(h.status(), "cannot upload to " + first));
    inputs.push_back(*h);
  }
  // One timed mode: a warm-up batch (compiles), then `batches` batches one after the other.
  struct Timed {
    double compile_s = 0, s = 0;
    std::vector<HostTensor> outputs;
  };
  auto time = [&](bool parallel, Timed* t) -> Status {
    for (int64_t i = 0; i <= batches; ++i) {
      const auto t0 = Clock::now();
      auto outs = parallel ? c.run_data_parallel(*model, inputs, devices) : c.run(*model, inputs);
      if (!outs.ok()) return outs.status();
      Status s = OkStatus();
      for (TensorHandle h : *outs)
        if (Status w8 = c.wait(h); s.ok()) s = w8;
      const double dt = seconds_since(t0);
      if (s.ok() && i == batches)
        for (TensorHandle h : *outs) {
          auto v = c.read(h);
          if (!v.ok()) { s = v.status(); break; }
          t->outputs.push_back(std::move(*v));
        }
      for (TensorHandle h : *outs) (void)c.release(h);
      if (!s.ok()) return s;
      if (i == 0) t->compile_s = dt; else t->s += dt;
    }
    return OkStatus();
  };
  Timed one, many;
  if (Status s = time(false, &one); !s.ok())
    return fail(failure_from(s, fmt::format("running {} on {}", w.name, first)));
  if (Status s = time(true, &many); !s.ok())
    return fail(failure_from(s, fmt::format("running {} data parallel", w.name)));
  double max_diff = 0;
  for (size_t i = 0; i < one.outputs.size() && i < many.outputs.size(); ++i) {
    const auto a = one.outputs[i].to_double_vector(), b = many.outputs[i].to_double_vector();
    if (a.size() != b.size() || one.outputs[i].shape() != many.outputs[i].shape()) {
      max_diff = INFINITY;
      break;
    }
    for (size_t j = 0; j < a.size(); ++j) max_diff = std::max(max_diff, std::fabs(a[j] - b[j]));
  }
  const double examples = static_cast<double>(batches * batch);
  const double one_ms = one.s / examples * 1e3, many_ms = many.s / examples * 1e3;
  const std::string list = fmt::format("{}", fmt::join(devices, ","));
  if (o.json) {
    nlohmann::json j = {{"network", w.name},
                        {"batch", batch},
                        {"batches", batches},
                        {"one_device", first},
                        {"one_ms_per_example", one_ms},
                        {"devices", devices},
                        {"parallel_ms_per_example", many_ms},
                        {"speedup", one_ms / many_ms},
                        {"max_abs_diff", max_diff}};
    std::cout << j.dump() << std::endl;
  } else {
    std::cout << fmt::format("{} batch {}, {} timed batches{}\n", w.name, batch, batches,
                             address.empty() ? "" : " at " + address);
    std::cout << fmt::format("  {:<40} {:9.3f} ms/example  (first batch {:.2f} s)\n", first,
                             one_ms, one.compile_s);
    std::cout << fmt::format("  {:<40} {:9.3f} ms/example  (first batch {:.2f} s)  x{:.2f}\n",
                             list, many_ms, many.compile_s, one_ms / many_ms);
    std::cout << fmt::format("  outputs: max |data parallel - one device| = {:.3g}\n", max_diff);
  }
  for (TensorHandle h : inputs) (void)c.release(h);
  (void)c.unload(*model);
  return max_diff <= 1e-3 ? kExitOk : kExitFailure;
}

}  // namespace

void add_bench_options(CLI::App& bench, BenchOptions& o) {
  bench.add_option("network", o.network,
                   "A zoo network: " + fmt::format("{}", fmt::join(models::model_names(), ", ")));
  bench.add_option("--model,-m", o.model, "Benchmark an ONNX model file instead");
  bench.add_option("--data", o.data,
                   "Inputs and expected outputs from an ONNX test_data_set_N folder "
                   "(input_K.pb, output_K.pb); without it the outputs are checked against "
                   "--oracle's");
  bench.add_option("--oracle", o.oracle,
                   "What the outputs are checked against: fast (cpu:0's fast path, float32; the "
                   "default for a device other than a cpu), reference (the cpu reference "
                   "kernels; the default on a cpu), float64 (the graph in float64 on the "
                   "reference kernels). Default: --data's outputs when given; --oracle with "
                   "--data checks the outputs against the oracle and the oracle against --data");
  bench.add_flag("--no-check", o.no_check, "Skip the correctness check (and say so)");
  bench.add_flag("--wait-each", o.wait_each,
                 "Wait for each batch's outputs before the next run (default: up to 2 queued "
                 "ahead, embedded and through a broker alike)");
  bench.add_flag("--breakdown", o.breakdown,
                 "Through a broker (--address): each timed request's phases, here and on the "
                 "broker (encode, transport, session, input and cache lookup, queue hand-off, "
                 "execution, outputs, decode), as medians");
  bench.add_flag("--profile", o.profile,
                 "Time every step of the timed runs (embedded engine): the share of time on "
                 "reference kernels and in regions with oneDNN reference (ref:*) primitives, "
                 "the largest steps");
  bench.add_option("--examples,-n", o.examples,
                   fmt::format("Timed examples (default {}, {} with --all); a multiple of the "
                               "batch size",
                               kDefaultExamples, kAllExamples));
  bench.add_option("--batch-size,-b", o.batch_size,
                   "Examples per batch (default 1, or the --data set's batch)");
  bench.add_option("--start-at", o.start_at,
                   "Start the timed run (after compile and warmup) at this Unix time, in "
                   "seconds: processes started together time the same interval (bench share)");
  bench.add_option("--warmup", o.warmup, "Untimed examples before the timed run")
      ->capture_default_str();
  bench.add_option("--device,-d", o.device,
                   "Device (default: TENSORD_DEVICE, else the best device present)");
  bench.add_option("--address", o.address,
                   "Run through the broker at HOST:PORT or unix:PATH (default: TENSORD_ADDRESS)");
  bench.add_option("--vs", o.vs, "Also run peers on the same model and input: onnxruntime,torch")
      ->delimiter(',');
  bench.add_flag("--json", o.json, "Print one JSON object instead of text");
  bench.add_flag("--progress", o.progress,
                 "Show progress (each phase, rate, ETA) on stderr even when it is not a terminal "
                 "(default: only on a terminal; TENSORD_PROGRESS=1/0)");
  bench.add_option("--logdir", o.logdir, "Write the figures as a TensorBoard event file in DIR");
  bench.add_flag("--all", o.all,
                 fmt::format("Every zoo network at batch 1 and 8, one table ({} examples each "
                             "unless --examples)",
                             kAllExamples));
  bench.add_option("--export", o.export_path,
                   "Write the network (at the batch size) as an ONNX file and stop");
  bench.add_option("--outputs,-o", o.outputs, "Write the last batch's outputs as DIR/<name>.npy");
  bench.add_option("--devices", o.devices,
                   "Data parallel: split each batch over these devices (a,b,c; on a cluster "
                   "n0/cpu:0,n1/cpu:0,...) and print ms per example next to the first device "
                   "alone")
      ->delimiter(',');
}

int cmd_bench(const BenchOptions& options) {
  BenchOptions o = options;
  if (o.profile) set_profiling(true);  // before anything compiles
  // --vs a,b and --vs a --vs b both work.
  std::vector<std::string> peers;
  for (const auto& v : o.vs) {
    size_t start = 0;
    while (start <= v.size()) {
      const size_t comma = v.find(',', start);
      const std::string p =
          v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (!p.empty() && std::find(peers.begin(), peers.end(), p) == peers.end()) peers.push_back(p);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  o.vs = peers;
  if (o.progress) set_progress(true);
  if (!o.devices.empty()) return bench_devices(o);
  if (auto f = check_options(o)) return fail(*f);
  const int64_t examples = o.examples > 0 ? o.examples : (o.all ? kAllExamples : kDefaultExamples);

  if (!o.export_path.empty()) {  // no device needed
    Workload w;
    if (auto f = make_workload(o, o.batch_size, &w)) return fail(*f);
    if (Status s = onnx::export_file(w.graph, o.export_path); !s.ok())
      return fail(failure_from(s, "cannot export " + w.name));
    std::cout << fmt::format("wrote {} (batch {}) to {}\n", w.name, w.batch, o.export_path);
    return kExitOk;
  }

  Target target;
  if (auto f = open_target(o, &target)) return fail(*f);

  std::vector<BenchResult> results;
  bool all_pass = true;
  if (o.all) {
    for (const auto& name : models::model_names()) {
      for (int64_t batch : kAllBatches) {
        BenchOptions one = o;
        one.all = false;
        one.network = name;
        BenchResult r;  // progress on stderr, the table on stdout
        if (auto f = bench_one(one, target, batch, examples, o.json ? nullptr : &std::cerr, &r))
          return fail(*f);
        all_pass &= r.correctness.pass;
        results.push_back(std::move(r));
      }
    }
  } else {
    BenchResult r;
    if (auto f = bench_one(o, target, o.batch_size, examples, o.json ? nullptr : &std::cout, &r))
      return fail(*f);
    all_pass = r.correctness.pass;
    if (!o.outputs.empty())
      if (Status s = write_outputs(o.outputs, r.output_names, r.outputs); !s.ok())
        return fail(failure_from(s, "--outputs"));
    results.push_back(std::move(r));
  }

  std::string events_path;
  Status logged = OkStatus();
  if (!o.logdir.empty()) logged = write_events(o.logdir, results, &events_path);

  if (o.json) {
    nlohmann::json j;
    if (o.all) {
      j = {{"device", target.device}, {"examples", examples}, {"runs", nlohmann::json::array()}};
      for (const auto& r : results) j["runs"].push_back(result_json(r));
    } else {
      j = result_json(results[0]);
    }
    if (!events_path.empty() && logged.ok()) j["event_file"] = events_path;
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  } else if (o.all) {
    std::cout << fmt::format(
        "{} examples per run on {}{} ({}{})\n", examples, target.device,
        target.address.empty() ? "" : " at " + target.address, target.info.model,
        target.info.threads ? fmt::format(", {} threads", target.info.threads) : "");
    print_table(results, o.vs);
  } else {
    print_human(results[0]);
  }
  if (!logged.ok()) return fail(failure_from(logged, "--logdir"));
  if (!events_path.empty() && !o.json) std::cout << "TensorBoard events: " << events_path << "\n";
  return all_pass ? kExitOk : kExitFailure;
}

}  // namespace tensord::cli
