#include "cli/units.h"

#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace tensord::cli {
namespace {

constexpr const char* kUnits =
    "bytes, or a number with KiB, MiB, GiB or TiB (powers of 1024; also K, M, G, T) or kB, MB, "
    "GB, TB (powers of 1000)";

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

}  // namespace

Result<int64_t> parse_size(const std::string& text, const std::string& what) {
  const std::string t = trim(text);
  auto bad = [&](const std::string& why) {
    return Status(StatusCode::kInvalidArgument,
                  (what.empty() ? "" : what + ": ") + "'" + text + "' is not a size" +
                      (why.empty() ? "" : " (" + why + ")") + "; give " + kUnits + ", e.g. 4GiB");
  };
  size_t end = 0;
  while (end < t.size() && (std::isdigit(static_cast<unsigned char>(t[end])) || t[end] == '.'))
    ++end;
  const std::string number = t.substr(0, end);
  const std::string unit = lower(trim(t.substr(end)));
  if (number.empty() || number == "." || number.find('.') != number.rfind('.')) return bad("");
  double scale = 0;
  if (unit.empty() || unit == "b")
    scale = 1;
  else if (unit == "k" || unit == "kib")
    scale = 1024.0;
  else if (unit == "m" || unit == "mib")
    scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb")
    scale = 1e3;
  else if (unit == "mb")
    scale = 1e6;
  else if (unit == "gb")
    scale = 1e9;
  else if (unit == "tb")
    scale = 1e12;
  else
    return bad("unknown unit '" + trim(t.substr(end)) + "'");
  if (scale == 1 && number.find('.') != std::string::npos)
    return bad("not a whole number of bytes");
  if (scale == 1) {  // exact for every int64
    errno = 0;
    char* stop = nullptr;
    const unsigned long long v = std::strtoull(number.c_str(), &stop, 10);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
      return bad("larger than 2^63 - 1 bytes");
    return static_cast<int64_t>(v);
  }
  const double bytes = std::strtod(number.c_str(), nullptr) * scale;
  if (!std::isfinite(bytes) || bytes >= 9.2e18) return bad("larger than 2^63 - 1 bytes");
  if (bytes != std::floor(bytes)) return bad("not a whole number of bytes");
  return static_cast<int64_t>(bytes);
}

CLI::Option* accept_size(CLI::Option* opt) {
  // CLI11 puts the option's name before the message.
  opt->transform([](std::string value) -> std::string {
    auto bytes = parse_size(value, "");
    if (!bytes.ok()) throw CLI::ValidationError(bytes.status().message());
    return std::to_string(*bytes);
  });
  opt->type_name("SIZE");
  return opt;
}

}  // namespace tensord::cli
