// The `tensord` subcommands that go beyond listing devices. Each returns the process exit
// status (see cli_common.h) and prints its own errors; none throws.
#pragma once

#include <string>
#include <vector>

namespace tensord::cli {

struct RunOptions {
  std::string model;                      // path of the .onnx file
  std::vector<std::string> named_inputs;  // "name=FILE", from --input
  std::vector<std::string> files;         // positional inputs, for the inputs not named
  std::string output_dir;                 // "" = print a summary per output
  std::string device;                     // "" = the default device
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
};

// `tensord onnx-test`: runs ONNX backend node tests (model.onnx + test_data_set_N/*.pb) and
// compares with the expected outputs. Ends with "N passed, N failed, N skipped".
int cmd_onnx_test(const OnnxTestOptions& options);

}  // namespace tensord::cli
