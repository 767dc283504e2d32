// `tensord serve`'s log options and its config file (--config FILE, TOML).
//
// Every `serve` flag is a key of the file, named as the flag without its dashes
// (`listen = "0.0.0.0:7070"`, `lease-seconds = 30`, `insecure = true`; `_` may stand for `-`).
// Precedence, highest first: the command line, the config file, the environment
// (TENSORD_LOG_LEVEL), the defaults. An unknown key, a value of the wrong type and an
// unreadable file are errors naming the key or the OS's reason.
#pragma once

namespace CLI {
class App;
}

namespace tensord::cli {

struct ServeOptions;

// Adds --log-level, --log-format, --slow-request-ms, --config and --dump-config to `serve`.
void add_serve_config_options(CLI::App& serve, ServeOptions& options);

// After the command line is parsed: reads the config file, applies TENSORD_LOG_LEVEL, checks
// the log options and sets the process's log from them, and prints the effective config when
// --dump-config was given. Returns an exit status to stop with (an error was printed, or the
// config was dumped), or -1 to go on serving.
int finish_serve_options(CLI::App& serve, ServeOptions& options);

}  // namespace tensord::cli
