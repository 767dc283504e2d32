// Pieces of `tensord bench` that do not run anything: plaidbench's correctness check, the
// TensorBoard event-file writer and the terminal progress bar.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "tensord/tensor.h"

namespace tensord::cli {

// The verdict over every element of every output, against a reference. An element passes
// when |ref - out| <= kScaleTol * s + kRtol * |ref|, with s = max |ref| over that output (its
// scale): float32 cannot resolve values near zero in a deep network's output, so a tolerance
// relative to the element alone fails logits that are right to the output's precision.
// Reported beside it as plaidbench prints them: rel = |ref - out| / (1e-6/5e-4 + |out|),
// max_error = max(rel), max_abs_error = max(|ref - out|), plus max_error_of_scale =
// max(|ref - out| / s); fail_ratio is the share of elements that fail the criterion.
// A NaN or an infinity in either tensor fails its element (and is left out of the maxima),
// which plaidbench did not do. An output whose shape differs from the reference fails all its
// elements and sets `problem`.
struct Correctness {
  bool pass = true;
  double max_error = 0;
  double max_abs_error = 0;
  double max_error_of_scale = 0;
  double fail_ratio = 0;
  int64_t elements = 0;
  int64_t failed = 0;
  int64_t nonfinite = 0;  // elements with a NaN or an infinity
  std::string problem;    // "" or e.g. "output 0: shape [1, 10] but the reference has [1, 1000]"
};

constexpr double kRtol = 5e-4;
constexpr double kAtol = 1e-6;      // plaidbench's, for max_error only
constexpr double kScaleTol = 1e-5;  // of the output's scale

Correctness compare_outputs(const std::vector<HostTensor>& reference,
                            const std::vector<HostTensor>& outputs);

// The first `rows` entries along axis 0 (a batch's first examples); the tensor itself when it
// has no axis 0 or no more rows than that.
HostTensor first_rows(const HostTensor& t, int64_t rows);

// "PASS, max_error 2.1e-06, max_abs_error 4.0e-08, max_error_of_scale 3.1e-07, fail_ratio 0"
std::string correctness_line(const Correctness& c);

// CRC-32C (Castagnoli), and the masked form TFRecord stores.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

// A TensorBoard event file: TFRecord framing (length, masked CRC of the length, data, masked
// CRC of the data) of tensorflow.Event protos, written by hand. The first record carries
// file_version "brain.Event:2"; each scalar is one Event with a Summary holding one
// {tag, simple_value}. No TensorFlow needed to write it; TensorBoard reads it.
class EventWriter {
 public:
  // Creates DIR (and parents) and DIR/events.out.tfevents.<seconds>.<host>.<pid>.<n>.tensord,
  // a new file each time (n counts the writers of this process; an existing name is skipped).
  static Result<EventWriter> open(const std::string& dir);
  EventWriter(EventWriter&& other) noexcept;
  EventWriter& operator=(EventWriter&&) = delete;
  ~EventWriter();

  Status add_scalar(const std::string& tag, double value, int64_t step);
  const std::string& path() const { return path_; }

 private:
  EventWriter(std::FILE* f, std::string path) : file_(f), path_(std::move(path)) {}
  Status write_record(const std::string& data);
  std::FILE* file_ = nullptr;
  std::string path_;
};

// Whether progress is drawn on stderr: on a terminal by default; TENSORD_PROGRESS=1 (or
// `bench --progress`, through set_progress) draws it anywhere, one line per redraw when stderr
// is not a terminal (at most one a second); TENSORD_PROGRESS=0 never.
bool progress_enabled();
void set_progress(bool on);

// "resnet50 batch 8 [#######.......]  512/1024 examples  830 examples/s  ETA 0.6 s" redrawn in
// place on stderr, at most ten times a second; does nothing unless progress_enabled().
class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total);
  ~ProgressBar();  // clears the line
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  void update(int64_t done);

 private:
  void draw(int64_t done);
  std::string label_;
  int64_t total_;
  bool enabled_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_{};
};

// A phase with no count to show (compiling, the reference check, a peer's run): "reference
// check (cpu reference kernels) 3.2 s" on stderr, its elapsed time redrawn by a thread of its
// own (ten times a second on a terminal, once a second elsewhere) until it goes out of scope,
// so that a long phase is never silent. Does nothing unless progress_enabled().
class PhaseTicker {
 public:
  explicit PhaseTicker(std::string label);
  ~PhaseTicker();  // stops the thread and clears the line
  PhaseTicker(const PhaseTicker&) = delete;
  PhaseTicker& operator=(const PhaseTicker&) = delete;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// "830 examples/s" / "ETA 0.6 s" / "ETA 2 min 5 s" pieces of the bar (public for the tests).
std::string format_rate(double per_second);
std::string format_eta(double seconds);

}  // namespace tensord::cli
