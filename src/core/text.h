// Text helpers for messages and log lines that quote what a client sent.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace tensord {

// A client-supplied name or value as it may appear in a message or a log line: whole when at
// most `max` bytes, else its first `max` bytes (cut at a UTF-8 character boundary) and
// "... (N bytes)". A 60 MiB model name must not make a 60 MiB log line or status.
inline std::string clip_text(std::string_view s, size_t max = 256) {
  if (s.size() <= max) return std::string(s);
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return fmt::format("{}... ({} bytes)", s.substr(0, cut), s.size());
}

}  // namespace tensord
