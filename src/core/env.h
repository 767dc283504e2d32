// Reading settings from environment variables: a value that is set must be valid, and an
// invalid one is an error naming the variable and the value, never silently ignored.
#pragma once

#include <cerrno>
#include <cstdlib>
#include <string>

#include "core/errors.h"

namespace tensord {

// The whole number in `name` (unset or empty: 0, "not set"); an error when it is anything but
// a whole number from `lo` to `hi` (spaces around it are allowed).
inline Result<int> parse_count_env(const char* name, int lo, int hi) {
  const char* env = std::getenv(name);
  if (!env || !*env) return 0;
  const std::string text = env;
  const size_t b = text.find_first_not_of(" \t");
  const size_t e = text.find_last_not_of(" \t");
  const std::string digits = b == std::string::npos ? "" : text.substr(b, e - b + 1);
  bool ok = !digits.empty() && digits.size() <= 9;
  for (char c : digits) ok = ok && c >= '0' && c <= '9';
  const long v = ok ? std::strtol(digits.c_str(), nullptr, 10) : 0;
  if (!ok || v < lo || v > hi)
    return errors::InvalidArgument("{}='{}' is not valid: it takes a whole number from {} to {}",
                                   name, text, lo, hi);
  return static_cast<int>(v);
}

}  // namespace tensord
