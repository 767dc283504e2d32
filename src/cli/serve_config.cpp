#include "cli/serve_config.h"

#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

// toml++ as a header-only library in this one file: the `tensord` command gains no shared
// library for it.
#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 1
#include <toml++/toml.h>

#include "cli/cli_common.h"
#include "cli/cmd_serve.h"
#include "cli/suggest.h"
#include "core/log.h"

namespace tensord::cli {
namespace {

int usage_error(const std::string& message) {
  std::cerr << "tensord: " << message << "\n";
  return kExitUsage;
}

// The whole file, or the OS's reason it cannot be read.
Result<std::string> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status(StatusCode::kInvalidArgument, std::strerror(errno));
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return Status(StatusCode::kInvalidArgument, std::strerror(e));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > (16 << 20)) {
      ::close(fd);
      return Status(StatusCode::kInvalidArgument, "larger than 16 MiB: not a config file");
    }
  }
  ::close(fd);
  return text;
}

bool is_flag(const CLI::Option* opt) { return opt->get_expected_min() == 0; }

// The key of an option in the file: its long name without the dashes.
std::string key_of(const CLI::Option* opt) { return opt->get_single_name(); }

// The options a file may set (not --help, --config, --dump-config).
std::vector<CLI::Option*> configurable(CLI::App& serve) {
  std::vector<CLI::Option*> out;
  for (CLI::Option* opt : serve.get_options())
    if (opt->get_configurable() && !opt->get_lnames().empty()) out.push_back(opt);
  return out;
}

// A TOML scalar as the text CLI11 converts; false when the node is not a scalar.
bool scalar_text(const toml::node& node, std::string& out) {
  if (auto s = node.value<std::string>(); node.is_string() && s) {
    out = *s;
  } else if (node.is_integer()) {
    out = std::to_string(*node.value<int64_t>());
  } else if (node.is_floating_point()) {
    out = fmt::format("{}", *node.value<double>());
  } else if (node.is_boolean()) {
    out = *node.value<bool>() ? "true" : "false";
  } else {
    return false;
  }
  return true;
}

const char* toml_type(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a number";
    case toml::node_type::boolean: return "a boolean";
    default: return "a date or time";
  }
}

// Sets the options the command line did not give from the file's keys.
int apply_config_file(CLI::App& serve, const std::string& path) {
  auto text = read_file(path);
  if (!text.ok())
    return usage_error("--config: cannot read '" + path + "': " + text.status().message());
  toml::table table;
  try {
    table = toml::parse(*text, path);
  } catch (const toml::parse_error& e) {
    return usage_error(fmt::format("--config: '{}' line {}, column {}: {}", path,
                                   e.source().begin.line, e.source().begin.column,
                                   e.description()));
  }
  for (auto&& [k, node] : table) {
    const std::string key(k.str());
    const auto where = fmt::format("--config: '{}' line {}: ", path, k.source().begin.line);
    std::string name = key;
    for (char& c : name)
      if (c == '_') c = '-';
    CLI::Option* opt = serve.get_option_no_throw("--" + name);
    if (opt == nullptr || !opt->get_configurable()) {
      std::vector<std::string> keys;
      for (CLI::Option* o : configurable(serve)) keys.push_back(key_of(o));
      const std::string near = nearest(name, keys);
      std::string hint = node.is_table()
                             ? " (there are no sections: every key is at the top level)"
                             : " (keys are `tensord serve`'s flags without the dashes; "
                               "`tensord serve --dump-config` prints them all)";
      if (!near.empty() && !node.is_table()) hint = " (did you mean '" + near + "'?)";
      return usage_error(where + "unknown key '" + key + "'" + hint);
    }
    std::vector<std::string> values;
    if (const toml::array* arr = node.as_array()) {
      for (const toml::node& item : *arr) {
        std::string v;
        if (!scalar_text(item, v))
          return usage_error(where + "'" + key + "' holds " + toml_type(item) +
                             " inside its array; give plain values");
        values.push_back(std::move(v));
      }
      if (opt->get_expected_max() <= 1 && values.size() != 1)
        return usage_error(where + "'" + key + "' takes one value, not an array");
    } else {
      std::string v;
      if (!scalar_text(node, v))
        return usage_error(where + "'" + key + "' is " + toml_type(node) + "; expected a value");
      values.push_back(std::move(v));
    }
    if (is_flag(opt) && !node.is_boolean())
      return usage_error(where + "'" + key + "' takes true or false, not " + toml_type(node));
    if (!is_flag(opt) && node.is_boolean())
      return usage_error(where + "'" + key + "' takes a value (" + opt->get_type_name() +
                         "), not true or false");
    if (opt->count() > 0) continue;  // given on the command line: the flag wins
    try {
      opt->add_result(values);
      opt->run_callback();
    } catch (const CLI::Error& e) {
      return usage_error(where + "'" + key + "': " + e.what());
    }
  }
  return -1;
}

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f)
          out += fmt::format("\\u{:04x}", c);
        else
          out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

bool is_number_type(const CLI::Option* opt) {
  const std::string t = opt->get_type_name();
  return t == "INT" || t == "UINT" || t == "FLOAT" || t == "NUMBER" || t == "SIZE";
}

// The effective options as a config file: each key with its description as a comment; keys
// with no value (and no default) commented out.
std::string dump_config(CLI::App& serve) {
  std::string out =
      "# tensord serve: the effective configuration (tensord serve --config FILE).\n"
      "# Every key is a flag of `tensord serve` without its dashes; flags given on the command\n"
      "# line win over this file, and this file over the environment (TENSORD_LOG_LEVEL).\n";
  for (CLI::Option* opt : configurable(serve)) {
    out += "\n# " + opt->get_description() + "\n";
    const std::string key = key_of(opt);
    if (is_flag(opt)) {
      bool on = false;
      if (opt->count() > 0) {
        try {
          on = opt->as<bool>();
        } catch (const CLI::Error&) {
          on = true;
        }
      }
      out += key + " = " + (on ? "true" : "false") + "\n";
      continue;
    }
    std::vector<std::string> values = opt->results();
    if (values.empty()) {
      opt->capture_default_str();
      if (!opt->get_default_str().empty()) values.push_back(opt->get_default_str());
    }
    const bool number = is_number_type(opt);
    std::vector<std::string> shown;
    for (const auto& v : values) shown.push_back(number ? v : toml_string(v));
    if (shown.empty() || (!number && values.size() == 1 && values[0].empty())) {
      out += "# " + key + " = " + (number ? "0" : "\"\"") + "\n";
    } else if (opt->get_expected_max() > 1) {
      out += key + " = [" + fmt::format("{}", fmt::join(shown, ", ")) + "]\n";
    } else {
      out += key + " = " + shown.back() + "\n";
    }
  }
  return out;
}

}  // namespace

void add_serve_config_options(CLI::App& serve, ServeOptions& options) {
  serve.add_option("--log-level", options.log_level,
                   "Log lines at this level and above: trace, debug, info, warn, error or off "
                   "(default: TENSORD_LOG_LEVEL, else info)");
  serve.add_option("--log-format", options.log_format,
                   "Log lines as text, or as json (one object a line: time, level, msg and "
                   "fields)");
  serve.add_option("--slow-request-ms", options.slow_request_ms,
                   "Log a call that takes longer than this many milliseconds (0: never; "
                   "default 1000)");
  serve.add_option("--config", options.config,
                   "Read options from this TOML file: each flag without its dashes is a key "
                   "(listen = \"127.0.0.1:7070\"); flags given here win over the file")
      ->configurable(false);
  serve.add_flag("--dump-config", options.dump_config,
                 "Print the effective options as a config file (TOML) and exit")
      ->configurable(false);
}

int finish_serve_options(CLI::App& serve, ServeOptions& options) {
  if (!options.config.empty())
    if (int rc = apply_config_file(serve, options.config); rc >= 0) return rc;

  // The environment comes after the command line and the file.
  CLI::Option* level_opt = serve.get_option("--log-level");
  std::string level_source = level_opt->count() > 0 ? "--log-level" : "";
  if (level_opt->count() == 0)
    if (const char* env = std::getenv("TENSORD_LOG_LEVEL"); env && *env) {
      level_opt->add_result(std::string(env));
      level_opt->run_callback();
      level_source = "TENSORD_LOG_LEVEL";
    }
  if (level_source.empty()) level_source = "--log-level";
  if (!options.config.empty() && level_source == "--log-level")
    level_source = "--log-level (or log-level in '" + options.config + "')";
  auto level = log::parse_level(options.log_level, level_source);
  if (!level.ok()) return usage_error(level.status().message());
  auto format = log::parse_format(options.log_format, "--log-format");
  if (!format.ok()) return usage_error(format.status().message());
  if (options.slow_request_ms < 0)
    return usage_error("--slow-request-ms must be >= 0 (0: never), got " +
                       std::to_string(options.slow_request_ms));

  if (options.dump_config) {
    std::cout << dump_config(serve) << std::flush;
    return kExitOk;
  }
  if (options.listen.empty())
    return usage_error("--listen is required (HOST:PORT or unix:PATH; or listen = \"...\" in "
                       "the --config file)");
  log::set_level(*level);
  log::set_format(*format);
  return -1;
}

}  // namespace tensord::cli
