#pragma once

namespace tensord {
inline constexpr const char* kVersion = "0.1.0";
// Bumped when the wire protocol changes incompatibly.
inline constexpr int kProtocolVersion = 2;  // 2: 128-bit session ids, regions by descriptor
}  // namespace tensord
