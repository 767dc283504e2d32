// Pieces of `tensord bench` that do not run anything: plaidbench's correctness check, the
// TensorBoard event-file writer and the terminal progress bar.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tensord/tensor.h"

namespace tensord::cli {

// plaidbench's verdict over every element of every output, against a reference:
//   rel = |ref - out| / (1e-6/5e-4 + |out|), max_error = max(rel), max_abs_error = max(|ref -
//   out|), an element fails when not |ref - out| <= 1e-6 + 5e-4 * |ref|.
// A NaN or an infinity in either tensor fails its element (and is left out of the maxima),
// which plaidbench did not do. An output whose shape differs from the reference fails all its
// elements and sets `problem`.
struct Correctness {
  bool pass = true;
  double max_error = 0;
  double max_abs_error = 0;
  double fail_ratio = 0;
  int64_t elements = 0;
  int64_t failed = 0;
  int64_t nonfinite = 0;  // elements with a NaN or an infinity
  std::string problem;    // "" or e.g. "output 0: shape [1, 10] but the reference has [1, 1000]"
};

constexpr double kRtol = 5e-4;
constexpr double kAtol = 1e-6;

Correctness compare_outputs(const std::vector<HostTensor>& reference,
                            const std::vector<HostTensor>& outputs);

// "PASS, max_error 2.1e-06, max_abs_error 4.0e-08, fail_ratio 0"
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
  // Creates DIR (and parents) and DIR/events.out.tfevents.<seconds>.<host>.tensord.
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

// "[#######.......]  512/1024 examples" redrawn in place on stderr, at most ten times a second;
// does nothing when stderr is not a terminal.
class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total);
  ~ProgressBar();  // clears the line
  void update(int64_t done);

 private:
  void draw(int64_t done);
  std::string label_;
  int64_t total_;
  bool enabled_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace tensord::cli
