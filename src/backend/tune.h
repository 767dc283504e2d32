// `tensord tune`, reached without naming a backend: the CLI includes this header, and
// src/backends/registry.cpp (the one file where the core meets the backends) hands the request
// to the backend of this build that tunes devices (today the OpenCL backend: opencl::tune()).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "tensord/status.h"

namespace tensord {

// What to measure on one device.
struct TuneOptions {
  std::string device = "opencl:0";
  double budget_seconds = 600;  // past this no new candidate starts (but the first of each kind)
  std::vector<int64_t> sizes = {1024, 2048};  // SGEMM n = m = k timed (the first one tunes)
  int repeats = 3;                            // timed runs per measurement (the best counts)
};

// Measures kernel parameters on `options.device` and stores the best where its backend reads
// them at every later start; the report goes to `out`. UNIMPLEMENTED in a build with no backend
// that tunes.
Status tune_device(const TuneOptions& options, std::ostream& out);

}  // namespace tensord
