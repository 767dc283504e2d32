// The `tensord` subcommands that go beyond listing devices. Each returns the process exit
// status (see cli_common.h) and prints its own errors; none throws.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace tensord::cli {

struct RunOptions {
  std::string model;                      // path of the .onnx file
  std::vector<std::string> named_inputs;  // "name=FILE", from --input
  std::vector<std::string> files;         // positional inputs, for the inputs not named
  std::string output_dir;                 // "" = print a summary per output
  std::string device;                     // "" = the default device
  bool random_inputs = false;             // make up the inputs no file gives
  std::vector<std::string> dims;          // "NAME=N", from --dim: a free dimension's size
  bool profile = false;                   // --profile: per-step times on stderr at the end
};

// `tensord run`: imports a model, feeds it tensors from .npy/.pb files, runs it through a
// Client and writes or summarises the outputs.
int cmd_run(const RunOptions& options);

struct OnnxTestOptions {
  std::vector<std::string> dirs;  // test folders, or folders of test folders
  std::string device;             // "" = the default device
  std::string filter;             // glob over test names ("" = all)
  bool json = false;              // one JSON object on stdout instead of lines
  bool verbose = false;           // also print skips and passes
  // |actual - expected| <= atol + rtol * |expected|: ONNX's defaults for the node tests
  // (onnx/backend/test/runner).
  double rtol = 1e-3;
  double atol = 1e-7;
};

// `tensord onnx-test`: runs ONNX backend node tests (model.onnx + test_data_set_N/*.pb) and
// compares with the expected outputs. Ends with "N passed, N failed, N skipped".
int cmd_onnx_test(const OnnxTestOptions& options);

struct BenchOptions {
  std::string network;            // a zoo network ("" with --model or --all)
  std::string model;              // --model FILE.onnx
  std::string data;               // --data DIR: an ONNX test_data_set_N folder
  int64_t examples = -1;          // -1: 1024 (kAllExamples with --all)
  int64_t batch_size = -1;        // -1: 1, or the --data set's batch
  int64_t warmup = 32;            // untimed examples before the timed run
  std::string device;             // "" = TENSORD_DEVICE, else the best device present
  std::string address;            // "" = TENSORD_ADDRESS, else the embedded engine
  std::vector<std::string> vs;    // peers: "onnxruntime", "torch"
  bool json = false;              // one JSON object on stdout
  bool progress = false;          // progress on stderr even when it is not a terminal
  std::string logdir;             // TensorBoard event file folder ("" = none)
  bool all = false;               // every zoo network at batch 1 and 8, one table
  std::string export_path;        // write the network as ONNX to this file and stop
  std::string outputs;            // write the last batch's outputs as DIR/<name>.npy
  std::vector<std::string> devices;  // --devices a,b,c: data parallel next to devices[0] alone
  std::string oracle;                // --oracle fast|reference|float64 ("" = auto)
  bool no_check = false;             // --no-check: no correctness check at all
  double start_at = 0;  // --start-at: the timed run starts at this Unix time (after warmup)
  bool profile = false;              // --profile: time per step, reference-kernel shares
  bool breakdown = false;            // --breakdown: each request's phases (through a broker)
  bool wait_each = false;            // --wait-each: no run queued ahead of the one waited for
};

// `tensord bench`: plaidbench's measurements (compile, execution, per example, correctness
// against --data or the cpu reference kernels), optionally beside peer runtimes.
int cmd_bench(const BenchOptions& options);
// Declares bench's positional and options on `bench`, bound to `options`.
void add_bench_options(CLI::App& bench, BenchOptions& options);

// `tensord bench transfer` (cmd_bench_transfer.cpp): adds the subcommand under `bench` and
// returns what main() calls when it was parsed (the exit status).
std::function<int()> add_bench_transfer_command(CLI::App& bench);
// `tensord bench load` (cmd_bench_load.cpp): concurrent clients against one broker; the same
// shape as add_bench_transfer_command.
// `tensord bench serve` (cmd_bench_serve.cpp): named-model serving with and without dynamic
// batching, beside ONNX Runtime processes.
std::function<int()> add_bench_serve_command(CLI::App& bench);
std::function<int()> add_bench_load_command(CLI::App& bench);
// `tensord bench share` (cmd_bench_share.cpp): a shared machine, against ONNX Runtime.
std::function<int()> add_bench_share_command(CLI::App& bench);

// `tensord status` (cmd_status.cpp): a broker's devices, sessions, throughput and errors, like
// nvidia-smi (--watch: redrawn every second). Adds the subcommand to `app`; main() calls
// run() when parsed() says it was given.
struct StatusCommand {
  std::function<bool()> parsed;
  std::function<int()> run;
};
StatusCommand add_status_command(CLI::App& app);
// `tensord models list|load|unload` (cmd_models.cpp): named models and model control.
StatusCommand add_models_command(CLI::App& app);

// `tensord tune` (built with the OpenCL backend): cmd_tune.cpp.
struct TuneCommand {
  std::function<bool()> parsed;
  std::function<int()> run;
};
TuneCommand add_tune_command(CLI::App& app);

}  // namespace tensord::cli
