#pragma once

namespace tensord {
inline constexpr const char* kVersion = "0.1.0";
// Bumped when the wire protocol changes incompatibly.
inline constexpr int kProtocolVersion = 1;
}  // namespace tensord
