// tensord's log: one process-wide logger (spdlog behind it, in log.cpp only), with levels and
// a text or JSON line format. The engine (fallback warnings), the broker (sessions, models,
// RPC errors, slow calls) and gRPC's own messages (routed by the broker) all write here.
//
//   log::write(log::Level::kInfo, "session opened", {{"session", id}, {"peer", peer}});
//
// Text (default): "tensord: warning: MSG key=value ..." ("tensord: MSG ..." at info), with an
// ISO 8601 UTC time in front when set_timestamps(true) (the broker). JSON: one object a line,
// {"time":"...","level":"warn","msg":"...","key":value,...}. Lines go to stderr.
//
// Thread-safe: every function may be called from any thread at any time; set_* take effect for
// the lines written after them. The level starts from TENSORD_LOG_LEVEL (default info; a
// value that is not a level name is reported once, as a warning, and ignored here — the
// `tensord` command refuses it before this).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>

#include "tensord/status.h"

namespace tensord::log {

enum class Level { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };
enum class Format { kText, kJson };

// "trace" | "debug" | "info" | "warn" (or "warning") | "error" | "off"; anything else is
// INVALID_ARGUMENT naming the value and the choices. `what` names the setting in that message.
Result<Level> parse_level(std::string_view name, std::string_view what = "log level");
const char* level_name(Level level);  // "trace", ..., "off"
// "text" | "json".
Result<Format> parse_format(std::string_view name, std::string_view what = "log format");

void set_level(Level level);
Level level();
void set_format(Format format);
void set_timestamps(bool on);

// Whether a line at `level` would be written (check before building an expensive message).
bool enabled(Level level);

// One key=value pair of a line. Numbers and booleans stay numbers and booleans in JSON; a
// field whose value is an empty string is left out.
struct Field {
  enum class Kind { kString, kNumber, kBool };
  std::string_view key;
  std::string value;
  Kind kind = Kind::kString;

  Field(std::string_view k, std::string v) : key(k), value(std::move(v)) {}
  Field(std::string_view k, std::string_view v) : key(k), value(v) {}
  Field(std::string_view k, const char* v) : key(k), value(v ? v : "") {}
  Field(std::string_view k, bool v) : key(k), value(v ? "true" : "false"), kind(Kind::kBool) {}
  template <typename T, std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, bool>,
                                         int> = 0>
  Field(std::string_view k, T v) : key(k), value(std::to_string(v)), kind(Kind::kNumber) {}
};

// Writes one line when `level` is enabled. Never throws; a failure to write is ignored.
void write(Level level, std::string_view msg, std::initializer_list<Field> fields = {});

inline void trace(std::string_view m, std::initializer_list<Field> f = {}) { write(Level::kTrace, m, f); }
inline void debug(std::string_view m, std::initializer_list<Field> f = {}) { write(Level::kDebug, m, f); }
inline void info(std::string_view m, std::initializer_list<Field> f = {}) { write(Level::kInfo, m, f); }
inline void warn(std::string_view m, std::initializer_list<Field> f = {}) { write(Level::kWarn, m, f); }
inline void error(std::string_view m, std::initializer_list<Field> f = {}) { write(Level::kError, m, f); }

}  // namespace tensord::log
