// The `tensord` command's pure pieces (src/cli): "did you mean" suggestions, the progress bar's
// rate and ETA, unique TensorBoard event file names, and settings read from the environment.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <set>

#include "cli/bench_report.h"
#include "cli/suggest.h"
#include "cli/units.h"
#include "core/env.h"

namespace tensord::cli {
namespace {

TEST(Suggest, EditDistanceCountsATranspositionAsOneEdit) {
  EXPECT_EQ(edit_distance("bench", "bench"), 0u);
  EXPECT_EQ(edit_distance("bnech", "bench"), 1u);
  EXPECT_EQ(edit_distance("--modle", "--model"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

TEST(Suggest, NearestOnlyWhenCloseEnough) {
  const std::vector<std::string> cmds = {"devices", "serve", "run", "onnx-test", "bench"};
  EXPECT_EQ(nearest("bnech", cmds), "bench");
  EXPECT_EQ(nearest("devcies", cmds), "devices");
  EXPECT_EQ(nearest("rnu", cmds), "run");
  EXPECT_EQ(nearest("xyzzy", cmds), "");
  EXPECT_EQ(nearest("bench", cmds), "");  // an exact match is no typo
  const std::vector<std::string> flags = {"--model", "--device", "--examples", "--data", "-d"};
  EXPECT_EQ(nearest("--exmaples", flags), "--examples");
  EXPECT_EQ(nearest("--dev", flags), "--device");  // the prefix of one flag
  EXPECT_EQ(nearest("--no-such-flag", flags), "");
}

TEST(Suggest, ParseFailureNamesTheNearestCommandAndFlag) {
  CLI::App app{"t"};
  app.require_subcommand(1);
  auto* bench = app.add_subcommand("bench", "b");
  std::string model;
  bench->add_option("--model", model, "m");
  app.add_subcommand("devices", "d");
  auto message = [&](std::vector<const char*> argv) {
    argv.insert(argv.begin(), "tensord");
    try {
      app.parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
    } catch (const CLI::ParseError& e) {
      return parse_failure_message(app, e, static_cast<int>(argv.size()), argv.data());
    }
    return std::string("parsed");
  };
  EXPECT_NE(message({"bnech"}).find("unknown command 'bnech' (did you mean 'bench'?)"),
            std::string::npos);
  app.clear();
  EXPECT_NE(message({"bench", "--modle", "x"}).find(
                "tensord bench: unknown option '--modle' (did you mean '--model'?)"),
            std::string::npos);
}

TEST(Sizes, BytesAndUnits) {
  EXPECT_EQ(*parse_size("4096", "x"), 4096);
  EXPECT_EQ(*parse_size("4GiB", "x"), int64_t{4} << 30);
  EXPECT_EQ(*parse_size("512 MiB", "x"), int64_t{512} << 20);
  EXPECT_EQ(*parse_size("1.5gib", "x"), int64_t{3} << 29);
  EXPECT_EQ(*parse_size("64K", "x"), 65536);
  EXPECT_EQ(*parse_size("2GB", "x"), 2000000000);
  EXPECT_EQ(*parse_size("1kB", "x"), 1000);
  EXPECT_EQ(*parse_size("0", "x"), 0);
  EXPECT_EQ(*parse_size("9223372036854775807", "x"), INT64_MAX);
  for (const char* bad : {"", "GiB", "-1", "4 GiX", "1.5", "0.3B", "1.2.3M", "9223372036854775808",
                          "99999999TiB"}) {
    auto r = parse_size(bad, "--limit");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("--limit: '") + bad + "'"), std::string::npos)
        << r.status().message();
  }
}

TEST(Sizes, OptionTakesUnitsAndNamesTheFlag) {
  CLI::App app;
  int64_t limit = 0;
  accept_size(app.add_option("--limit", limit));
  const char* ok[] = {"t", "--limit", "3MiB"};
  app.parse(3, ok);
  EXPECT_EQ(limit, 3 << 20);
  CLI::App app2;
  accept_size(app2.add_option("--limit", limit));
  const char* bad[] = {"t", "--limit", "3 parsecs"};
  try {
    app2.parse(3, bad);
    FAIL() << "accepted 3 parsecs";
  } catch (const CLI::ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("--limit"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unknown unit 'parsecs'"), std::string::npos) << e.what();
  }
}

TEST(Progress, RateAndEta) {
  EXPECT_EQ(format_rate(830.4), "830 examples/s");
  EXPECT_EQ(format_rate(8.72), "8.7 examples/s");
  EXPECT_EQ(format_rate(0.25), "4.0 s/example");
  EXPECT_EQ(format_rate(0), "");
  EXPECT_EQ(format_eta(0.64), "ETA 0.6 s");
  EXPECT_EQ(format_eta(125), "ETA 2 min 5 s");
  EXPECT_EQ(format_eta(7300), "ETA 2 h 1 min");
  EXPECT_EQ(format_eta(-1), "");
}

TEST(EventWriter, EveryWriterGetsItsOwnFile) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tensord-events-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::set<std::string> paths;
  {
    std::vector<EventWriter> writers;
    for (int i = 0; i < 4; ++i) {  // within the same second
      auto w = EventWriter::open(dir.string());
      ASSERT_TRUE(w.ok()) << w.status().to_string();
      ASSERT_TRUE(w->add_scalar("x", i, 1).ok());
      paths.insert(w->path());
      writers.push_back(std::move(*w));
    }
  }
  EXPECT_EQ(paths.size(), 4u);
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    EXPECT_NE(e.path().filename().string().find("events.out.tfevents."), std::string::npos);
    EXPECT_GT(std::filesystem::file_size(e.path()), 0u);
    ++files;
  }
  EXPECT_EQ(files, 4u);
  std::filesystem::remove_all(dir);
}

TEST(Env, CountSettingsAreCheckedNotIgnored) {
  const char* var = "TENSORD_TEST_COUNT_SETTING";
  unsetenv(var);
  EXPECT_EQ(parse_count_env(var, 1, 64).value(), 0);  // not set
  setenv(var, "3", 1);
  EXPECT_EQ(parse_count_env(var, 1, 64).value(), 3);
  setenv(var, " 7 ", 1);
  EXPECT_EQ(parse_count_env(var, 1, 64).value(), 7);
  for (const char* bad : {"abc", "0", "65", "-1", "2x", "1.5", "99999999999"}) {
    setenv(var, bad, 1);
    auto r = parse_count_env(var, 1, 64);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string(var) + "='" + bad + "'"), std::string::npos)
        << r.status().message();
  }
  unsetenv(var);
}

}  // namespace
}  // namespace tensord::cli
