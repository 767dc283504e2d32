#include "cli/bench_report.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/errors.h"

namespace tensord::cli {

Correctness compare_outputs(const std::vector<HostTensor>& reference,
                            const std::vector<HostTensor>& outputs) {
  Correctness c;
  if (reference.size() != outputs.size()) {
    c.pass = false;
    c.problem =
        fmt::format("{} outputs but the reference has {}", outputs.size(), reference.size());
  }
  const size_t n = std::min(reference.size(), outputs.size());
  for (size_t k = 0; k < n; ++k) {
    const HostTensor& r = reference[k];
    const HostTensor& o = outputs[k];
    if (r.shape() != o.shape()) {
      c.pass = false;
      c.elements += std::max(r.numel(), o.numel());
      c.failed += std::max(r.numel(), o.numel());
      if (c.problem.empty())
        c.problem = fmt::format("output {}: shape {} but the reference has {}", k,
                                shape_to_string(o.shape()), shape_to_string(r.shape()));
      continue;
    }
    const std::vector<double> rv = r.to_double_vector();
    const std::vector<double> ov = o.to_double_vector();
    double scale = 0;
    for (double v : rv)
      if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < rv.size() && i < ov.size(); ++i) {
      ++c.elements;
      const double ref = rv[i], out = ov[i];
      if (!std::isfinite(ref) || !std::isfinite(out)) {
        ++c.nonfinite;
        ++c.failed;
        continue;
      }
      const double diff = std::abs(ref - out);
      c.max_abs_error = std::max(c.max_abs_error, diff);
      c.max_error = std::max(c.max_error, diff / (kAtol / kRtol + std::abs(out)));
      if (diff > 0)
        c.max_error_of_scale = std::max(c.max_error_of_scale, scale > 0 ? diff / scale : HUGE_VAL);
      if (!(diff <= kScaleTol * scale + kRtol * std::abs(ref))) ++c.failed;
    }
  }
  if (c.failed > 0) c.pass = false;
  c.fail_ratio = c.elements ? static_cast<double>(c.failed) / static_cast<double>(c.elements)
                            : (c.pass ? 0.0 : 1.0);
  return c;
}

HostTensor first_rows(const HostTensor& t, int64_t rows) {
  if (t.shape().empty() || t.shape()[0] <= rows || rows < 0) return t;
  Shape shape = t.shape();
  const size_t row_bytes = shape[0] > 0 ? t.nbytes() / static_cast<size_t>(shape[0]) : 0;
  shape[0] = rows;
  HostTensor out(t.dtype(), shape);
  std::memcpy(out.mutable_data(), t.data(), row_bytes * static_cast<size_t>(rows));
  return out;
}

std::string correctness_line(const Correctness& c) {
  std::string line = fmt::format(
      "{}, max_error {:.1e}, max_abs_error {:.1e}, max_error_of_scale {:.1e}, "
      "fail_ratio {:.3g}",
      c.pass ? "PASS" : "FAIL", c.max_error, c.max_abs_error, c.max_error_of_scale, c.fail_ratio);
  if (c.nonfinite) line += fmt::format(" ({} NaN/Inf elements)", c.nonfinite);
  if (!c.problem.empty()) line += " (" + c.problem + ")";
  return line;
}

namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

// Protobuf wire format, just what Event / Summary need.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_tag(std::string& out, int field, int wire_type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}
template <typename T>
void put_fixed(std::string& out, T v) {  // little-endian hosts only (x86-64, aarch64)
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// tensorflow.Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
// summary = 5 (Summary). Summary: value = 1 (repeated Value). Value: tag = 1 (string),
// simple_value = 2 (float).
std::string event_proto(int64_t step, const std::string& file_version, const std::string& tag,
                        float value) {
  std::string ev;
  put_tag(ev, 1, 1);
  put_fixed<double>(ev, now_seconds());
  if (step != 0) {
    put_tag(ev, 2, 0);
    put_varint(ev, static_cast<uint64_t>(step));
  }
  if (!file_version.empty()) put_bytes(ev, 3, file_version);
  if (!tag.empty()) {
    std::string v;
    put_bytes(v, 1, tag);
    put_tag(v, 2, 5);
    put_fixed<float>(v, value);
    std::string summary;
    put_bytes(summary, 1, v);
    put_bytes(ev, 5, summary);
  }
  return ev;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

Result<EventWriter> EventWriter::open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    return errors::InvalidArgument("cannot create the log folder '{}'{}", dir,
                                   ec ? ": " + ec.message() : "");
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  // As TensorFlow's writer: <seconds>.<host>.<pid>.<counter>, so that runs in the same second
  // (or writers in one process) never share a file; "x" (O_EXCL) never reuses an existing one
  // (a recycled pid): the counter moves on instead.
  static std::atomic<int64_t> counter{0};
  const int64_t seconds = static_cast<int64_t>(now_seconds());
  std::string path;
  std::FILE* f = nullptr;
  for (int attempt = 0; attempt < 1000 && !f; ++attempt) {
    path = (std::filesystem::path(dir) /
            fmt::format("events.out.tfevents.{}.{}.{}.{}.tensord", seconds, host,
                        static_cast<int64_t>(getpid()), counter.fetch_add(1)))
               .string();
    f = std::fopen(path.c_str(), "wbx");
    if (!f && errno != EEXIST) break;
  }
  if (!f) return errors::InvalidArgument("cannot write '{}': {}", path, std::strerror(errno));
  EventWriter w(f, path);
  TD_RETURN_IF_ERROR(w.write_record(event_proto(0, "brain.Event:2", "", 0)));
  return w;
}

EventWriter::EventWriter(EventWriter&& other) noexcept
    : file_(other.file_), path_(std::move(other.path_)) {
  other.file_ = nullptr;
}

EventWriter::~EventWriter() {
  if (file_) std::fclose(file_);
}

Status EventWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  return write_record(event_proto(step, "", tag, static_cast<float>(value)));
}

Status EventWriter::write_record(const std::string& data) {
  std::string rec;
  const uint64_t len = data.size();
  put_fixed<uint64_t>(rec, len);
  put_fixed<uint32_t>(rec, masked_crc32c(rec.data(), 8));
  rec += data;
  put_fixed<uint32_t>(rec, masked_crc32c(data.data(), data.size()));
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size() || std::fflush(file_) != 0)
    return errors::DataLoss("error writing '{}'", path_);
  return OkStatus();
}

namespace {

// -1: follow TENSORD_PROGRESS / the terminal; 0 off; 1 on (set_progress).
std::atomic<int> g_progress{-1};

bool stderr_is_tty() { return isatty(STDERR_FILENO) == 1; }

}  // namespace

bool progress_enabled() {
  const int forced = g_progress.load();
  if (forced >= 0) return forced == 1;
  if (const char* env = std::getenv("TENSORD_PROGRESS"); env && *env) {
    const std::string v = env;
    if (v == "1" || v == "true" || v == "yes" || v == "always") return true;
    if (v == "0" || v == "false" || v == "no" || v == "never") return false;
  }
  return stderr_is_tty();
}

void set_progress(bool on) { g_progress.store(on ? 1 : 0); }

std::string format_rate(double per_second) {
  if (!(per_second > 0) || !std::isfinite(per_second)) return "";
  if (per_second >= 100) return fmt::format("{:.0f} examples/s", per_second);
  if (per_second >= 1) return fmt::format("{:.1f} examples/s", per_second);
  return fmt::format("{:.1f} s/example", 1.0 / per_second);
}

std::string format_eta(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "";
  if (seconds < 60) return fmt::format("ETA {:.1f} s", seconds);
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s < 3600) return fmt::format("ETA {} min {} s", s / 60, s % 60);
  return fmt::format("ETA {} h {} min", s / 3600, (s % 3600) / 60);
}

ProgressBar::ProgressBar(std::string label, int64_t total)
    : label_(std::move(label)),
      total_(total),
      enabled_(progress_enabled()),
      tty_(stderr_is_tty()),
      start_(std::chrono::steady_clock::now()) {
  if (enabled_) {
    last_ = start_;
    draw(0);
  }
}

ProgressBar::~ProgressBar() {
  if (enabled_ && tty_) std::fprintf(stderr, "\r\033[K");
}

void ProgressBar::update(int64_t done) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const auto every = tty_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(1000);
  if (done < total_ && now - last_ < every) return;
  last_ = now;
  draw(done);
}

void ProgressBar::draw(int64_t done) {
  constexpr int kWidth = 30;
  const int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '.');
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string tail;
  if (done > 0 && elapsed > 0) {
    const double rate = static_cast<double>(done) / elapsed;
    tail = "  " + format_rate(rate);
    tail += done < total_ ? "  " + format_eta(static_cast<double>(total_ - done) / rate)
                          : fmt::format("  {:.1f} s", elapsed);
  }
  std::fprintf(stderr, "%s%s [%s] %lld/%lld examples%s%s", tty_ ? "\r" : "", label_.c_str(),
               bar.c_str(), static_cast<long long>(done), static_cast<long long>(total_),
               tail.c_str(), tty_ ? "\033[K" : "\n");
  std::fflush(stderr);
}

struct PhaseTicker::State {
  std::string label;
  bool tty = false;
  std::chrono::steady_clock::time_point start;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread thread;

  void draw(bool last) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (tty)
      std::fprintf(stderr, "\r%s ... %.1f s\033[K", label.c_str(), elapsed);
    else
      std::fprintf(stderr, "%s ... %.1f s%s\n", label.c_str(), elapsed, last ? ", done" : "");
    std::fflush(stderr);
  }
};

PhaseTicker::PhaseTicker(std::string label) {
  if (!progress_enabled()) return;
  state_ = std::make_unique<State>();
  State* st = state_.get();
  st->label = std::move(label);
  st->tty = stderr_is_tty();
  st->start = std::chrono::steady_clock::now();
  st->draw(false);
  st->thread = std::thread([st] {
    const auto every = st->tty ? std::chrono::milliseconds(100) : std::chrono::milliseconds(1000);
    std::unique_lock<std::mutex> lock(st->mu);
    while (!st->cv.wait_for(lock, every, [st] { return st->stop; })) st->draw(false);
  });
}

PhaseTicker::~PhaseTicker() {
  if (!state_) return;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  state_->thread.join();
  if (state_->tty) {
    std::fprintf(stderr, "\r\033[K");
  } else {
    state_->draw(true);
  }
  std::fflush(stderr);
}

}  // namespace tensord::cli
