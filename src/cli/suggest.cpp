#include "cli/suggest.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdint>

namespace tensord::cli {

size_t edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  if (word.empty()) return "";
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // "--dev" for "--device": a prefix of exactly one candidate.
  std::vector<std::string> prefixed;
  for (const auto& c : candidates)
    if (c.size() > word.size() && c.compare(0, word.size(), word) == 0) prefixed.push_back(c);
  const size_t core = word.size() - std::min<size_t>(word.find_first_not_of('-'), word.size());
  const size_t allowed = std::max<size_t>(1, core / 3);
  if (best_d <= allowed && best_d > 0) return best;
  if (prefixed.size() == 1 && core >= 2) return prefixed.front();
  return "";
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string near = nearest(word, candidates);
  return near.empty() ? "" : " (did you mean '" + near + "'?)";
}

namespace {

// The subcommand that was being parsed when the parse failed: the deepest parsed one.
const CLI::App* deepest_parsed(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App* s) { return s->parsed(); }))
    return deepest_parsed(*sub);
  return &app;
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  return names;
}

std::vector<std::string> flag_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& l : o->get_lnames()) names.push_back("--" + l);
    for (const auto& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

std::string command_path(const CLI::App* app) {
  std::string path;
  for (const CLI::App* a = app; a; a = a->get_parent())
    path = a->get_parent() ? " " + a->get_name() + path : "tensord" + path;
  return path;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

std::string parse_failure_message(const CLI::App& app, const CLI::ParseError& error, int argc,
                                  const char* const* argv) {
  const CLI::App* at = deepest_parsed(app);
  // An unknown command: the first word is neither a subcommand nor a flag.
  if (at == &app && argc > 1 && argv[1][0] != '-') {
    const std::string word = argv[1];
    const auto names = subcommand_names(app);
    if (std::find(names.begin(), names.end(), word) == names.end()) {
      const std::string near = nearest(word, names);
      return "tensord: unknown command '" + word + "'" +
             (near.empty() ? "" : " (did you mean '" + near + "'?)") + "; commands: " +
             join(names) + "\nRun with --help for more information.";
    }
  }
  // Unknown flags: every argument CLI11 could not place that looks like a flag.
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    std::vector<std::string> lines;
    const auto flags = flag_names(*at);
    const auto subs = subcommand_names(*at);
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg.size() < 2 || arg[0] != '-' || arg == "--" || std::isdigit(static_cast<unsigned char>(arg[1])) || arg[1] == '.')
        continue;  // not a flag (a negative number)
      const std::string name = arg.substr(0, arg.find('='));
      bool known = false;
      for (const CLI::App* a = at; a && !known; a = a->get_parent()) {
        const auto mine = flag_names(*a);
        known = std::find(mine.begin(), mine.end(), name) != mine.end();
      }
      if (known) continue;
      const std::string near = nearest(name, flags);
      lines.push_back(command_path(at) + ": unknown option '" + name + "'" +
                      (near.empty() ? "" : " (did you mean '" + near + "'?)"));
    }
    // A stray word where a subcommand could go ("tensord bench lod").
    if (lines.empty() && !subs.empty())
      for (int i = 1; i < argc; ++i) {
        const std::string near = nearest(argv[i], subs);
        if (!near.empty() && near != argv[i]) {
          lines.push_back(command_path(at) + ": unexpected '" + std::string(argv[i]) +
                          "' (did you mean '" + near + "'?)");
          break;
        }
      }
    if (!lines.empty()) {
      std::string out;
      for (const auto& l : lines) out += l + "\n";
      return out + "Run with --help for more information.";
    }
  }
  return std::string(error.what()) + "\nRun with --help for more information.";
}

}  // namespace tensord::cli
