// The logger behind core/log.h: spdlog (header-only build, so the library gains no link
// dependency beyond fmt) writing to stderr. spdlog supplies the sink's locking and the time
// stamp; this file builds the rest of each line (level word, message, fields) itself, so that
// text and JSON lines carry the same fields.
#include "core/log.h"

#include "core/text.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace tensord::log {
namespace {

constexpr const char* kNames[] = {"trace", "debug", "info", "warn", "error", "off"};

struct State {
  std::atomic<int> level{static_cast<int>(Level::kInfo)};
  std::atomic<int> format{static_cast<int>(Format::kText)};
  std::atomic<bool> timestamps{false};
  std::shared_ptr<spdlog::logger> logger;

  State() {
    logger = std::make_shared<spdlog::logger>("tensord",
                                              std::make_shared<spdlog::sinks::stderr_sink_mt>());
    logger->set_level(spdlog::level::trace);  // filtered here, by `level`
    logger->flush_on(spdlog::level::trace);
    apply_pattern();
  }

  void apply_pattern() {
    const char* pattern = "%v";
    if (format.load() == static_cast<int>(Format::kJson))
      pattern = "{\"time\":\"%Y-%m-%dT%H:%M:%S.%eZ\",%v";
    else if (timestamps.load())
      pattern = "%Y-%m-%dT%H:%M:%S.%eZ %v";
    logger->set_pattern(pattern, spdlog::pattern_time_type::utc);
  }
};

State& state() {
  // Never destroyed: threads may log while the process exits.
  static State* s = [] {
    auto* st = new State();
    if (const char* env = std::getenv("TENSORD_LOG_LEVEL"); env && *env) {
      auto l = parse_level(env, "TENSORD_LOG_LEVEL");
      if (l.ok())
        st->level = static_cast<int>(*l);
      else
        std::fprintf(stderr, "tensord: warning: %s (using info)\n", l.status().message().c_str());
    }
    return st;
  }();
  return *s;
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

// logfmt-style: bare when the value has no space, quote, '=' or control character.
void append_text_value(std::string& out, std::string_view v) {
  bool bare = !v.empty();
  for (unsigned char c : v)
    if (c <= 0x20 || c == '"' || c == '=' || c == '\\') bare = false;
  if (bare) {
    out += v;
    return;
  }
  append_json_string(out, v);
}

}  // namespace

Result<Level> parse_level(std::string_view name, std::string_view what) {
  for (int i = 0; i <= static_cast<int>(Level::kOff); ++i)
    if (name == kNames[i]) return static_cast<Level>(i);
  if (name == "warning") return Level::kWarn;
  return Status(StatusCode::kInvalidArgument,
                std::string(what) + ": '" + std::string(name) +
                    "' is not a log level (trace, debug, info, warn, error or off)");
}

const char* level_name(Level level) {
  const int i = static_cast<int>(level);
  return i >= 0 && i <= static_cast<int>(Level::kOff) ? kNames[i] : "?";
}

Result<Format> parse_format(std::string_view name, std::string_view what) {
  if (name == "text") return Format::kText;
  if (name == "json") return Format::kJson;
  return Status(StatusCode::kInvalidArgument,
                std::string(what) + ": '" + std::string(name) + "' is not a log format (text or json)");
}

void set_level(Level level) { state().level = static_cast<int>(level); }
Level level() { return static_cast<Level>(state().level.load()); }

void set_format(Format format) {
  State& s = state();
  s.format = static_cast<int>(format);
  s.apply_pattern();
}

void set_timestamps(bool on) {
  State& s = state();
  s.timestamps = on;
  s.apply_pattern();
}

bool enabled(Level level) {
  return level != Level::kOff && static_cast<int>(level) >= state().level.load();
}

// Client-supplied names and messages reach the log: each line stays bounded (a 60 MiB model
// name took 26 s to write whole).
constexpr size_t kMaxMessage = 4096;
constexpr size_t kMaxField = 512;

void write(Level level, std::string_view msg, std::initializer_list<Field> fields) {
  if (!enabled(level)) return;
  try {
    State& s = state();
    std::string line;
    line.reserve(64 + msg.size() + fields.size() * 24);
    if (s.format.load() == static_cast<int>(Format::kJson)) {
      line += "\"level\":\"";
      line += level_name(level);
      line += "\",\"msg\":";
      append_json_string(line, clip_text(msg, kMaxMessage));
      for (const Field& f : fields) {
        if (f.value.empty()) continue;
        line += ',';
        append_json_string(line, f.key);
        line += ':';
        // JSON has no NaN or infinity: those stay strings.
        if (f.kind == Field::Kind::kString || f.value.find_first_of("ni") != std::string::npos)
          append_json_string(line, clip_text(f.value, kMaxField));
        else
          line += f.value;
      }
      line += '}';
    } else {
      line += "tensord: ";
      if (level != Level::kInfo) {
        line += level == Level::kWarn ? "warning" : level_name(level);
        line += ": ";
      }
      line += clip_text(msg, kMaxMessage);
      for (const Field& f : fields) {
        if (f.value.empty()) continue;
        line += ' ';
        line += f.key;
        line += '=';
        append_text_value(line, clip_text(f.value, kMaxField));
      }
    }
    static constexpr spdlog::level::level_enum kSpd[] = {
        spdlog::level::trace, spdlog::level::debug, spdlog::level::info,
        spdlog::level::warn,  spdlog::level::err,   spdlog::level::off};
    s.logger->log(kSpd[static_cast<int>(level)], "{}", line);
  } catch (...) {
    // A log line is never worth an exception in the caller.
  }
}

}  // namespace tensord::log
