// Sizes on the `tensord` command line, in config files and in the environment: plain bytes or
// a number with a unit ("4GiB", "512 MiB", "1.5GB").
#pragma once

#include <cstdint>
#include <string>

#include "tensord/status.h"

namespace CLI {
class Option;
}

namespace tensord::cli {

// Bytes from "4096", "4GiB", "512 MiB", "1.5 GiB", "64k": B; KiB, MiB, GiB, TiB (and K, M, G, T)
// are powers of 1024; kB, MB, GB, TB powers of 1000. Units are case-insensitive. The result
// must be a whole, non-negative number of bytes below 2^63. Errors (INVALID_ARGUMENT) quote
// the text and list the units; `what` ("--session-memory-limit"), when not empty, starts the
// message.
Result<int64_t> parse_size(const std::string& text, const std::string& what);

// Makes `opt` (an int64 option) take sizes: its value is converted by parse_size before
// CLI11 reads it, on the command line and from a --config file alike.
CLI::Option* accept_size(CLI::Option* opt);

}  // namespace tensord::cli
