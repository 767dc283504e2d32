// "Did you mean ...?" for the `tensord` command line: the nearest known word by edit distance.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
class ParseError;
}  // namespace CLI

namespace tensord::cli {

// Levenshtein distance, with a transposition of two neighbours counting as one edit
// ("bnech" -> "bench" is 1).
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate nearest to `word`, or "" when none is close enough to be a likely typo
// (distance at most max(1, |word| / 3), or `word` is a prefix of exactly one candidate).
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

// " (did you mean 'X'?)" with X = nearest(word, candidates), or "" when nothing is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

// The message for a failed parse of `app` over argv: the unknown command or flag with the
// nearest known one ("unknown command 'bnech' (did you mean 'bench'?)"), else CLI11's own
// message. Ends without a newline.
std::string parse_failure_message(const CLI::App& app, const CLI::ParseError& error, int argc,
                                  const char* const* argv);

}  // namespace tensord::cli
