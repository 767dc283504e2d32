// `tensord tune [--device opencl:N]`: measures kernel parameters on an OpenCL device and stores
// the best in the device's tuning file, which the backend reads at every later start (through
// tune_device() of src/backend/tune.h; the OpenCL backend's tune()).
#include <iostream>

#include <CLI/CLI.hpp>

#include "backend/tune.h"
#include "cli/cli_common.h"
#include "cli/commands.h"

namespace tensord::cli {

TuneCommand add_tune_command(CLI::App& app) {
  auto options = std::make_shared<TuneOptions>();
  auto* cmd = app.add_subcommand(
      "tune", "Tune an OpenCL device's kernels (CLBlast's SGEMM parameters, the generated kernels' "
              "work-group size) and store them for later runs");
  cmd->add_option("--device,-d", options->device, "The OpenCL device")->capture_default_str();
  cmd->add_option("--budget", options->budget_seconds,
                  "Seconds after which no new candidate is tried")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--sizes", options->sizes,
                  "SGEMM sizes (n = m = k) measured before and after; the first one is tuned")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{16}, int64_t{8192}));
  cmd->add_option("--repeats", options->repeats, "Timed runs per measurement (the best counts)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  TuneCommand c;
  c.parsed = [cmd] { return cmd->parsed(); };
  c.run = [options] {
    Status s = tune_device(*options, std::cout);
    if (!s.ok()) {
      std::cerr << "tensord: " << s.message() << "\n";
      return s.code() == StatusCode::kNotFound || s.code() == StatusCode::kInvalidArgument ? kExitUsage
                                                                                           : kExitFailure;
    }
    return kExitOk;
  };
  return c;
}

}  // namespace tensord::cli
