// core/log.h: level names, the filter, and the text and JSON lines (escaping, field types).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/log.h"

namespace tensord {
namespace {

class LogTest : public ::testing::Test {
 protected:
  void TearDown() override {
    log::set_level(log::Level::kInfo);
    log::set_format(log::Format::kText);
    log::set_timestamps(false);
  }
  static std::string capture(log::Level level, std::string_view msg,
                             std::initializer_list<log::Field> fields) {
    testing::internal::CaptureStderr();
    log::write(level, msg, fields);
    return testing::internal::GetCapturedStderr();
  }
};

TEST_F(LogTest, LevelNames) {
  for (const char* name : {"trace", "debug", "info", "warn", "error", "off"}) {
    auto l = log::parse_level(name);
    ASSERT_TRUE(l.ok()) << name;
    EXPECT_STREQ(log::level_name(*l), name);
  }
  EXPECT_EQ(*log::parse_level("warning"), log::Level::kWarn);
  auto bad = log::parse_level("loud", "TENSORD_LOG_LEVEL");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("TENSORD_LOG_LEVEL: 'loud' is not a log level"),
            std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(log::parse_format("xml").ok());
}

TEST_F(LogTest, FiltersByLevel) {
  log::set_level(log::Level::kWarn);
  EXPECT_EQ(capture(log::Level::kInfo, "quiet", {}), "");
  EXPECT_FALSE(log::enabled(log::Level::kInfo));
  EXPECT_EQ(capture(log::Level::kWarn, "loud", {}), "tensord: warning: loud\n");
  log::set_level(log::Level::kOff);
  EXPECT_EQ(capture(log::Level::kError, "nothing", {}), "");
}

TEST_F(LogTest, TextLine) {
  EXPECT_EQ(capture(log::Level::kInfo, "session opened",
                    {{"session", "ab12cd34"}, {"why", "closed by the client"}, {"n", 3},
                     {"empty", ""}, {"ok", true}}),
            "tensord: session opened session=ab12cd34 why=\"closed by the client\" n=3 ok=true\n");
  EXPECT_EQ(capture(log::Level::kError, "boom", {}), "tensord: error: boom\n");
  log::set_timestamps(true);
  const std::string line = capture(log::Level::kInfo, "t", {});
  // 2026-12-01T21:59:30.546Z tensord: t
  ASSERT_EQ(line.size(), 24 + 12) << line;
  EXPECT_EQ(line[10], 'T');
  EXPECT_EQ(line.substr(23), "Z tensord: t\n");
}

TEST_F(LogTest, JsonLine) {
  log::set_format(log::Format::kJson);
  const std::string line =
      capture(log::Level::kWarn, "a \"quoted\"\nmsg\x01",
              {{"n", int64_t{-7}}, {"x", 1.5}, {"b", false}, {"s", "back\\slash"}, {"empty", ""},
               {"nan", std::nan("")}});
  EXPECT_EQ(line.rfind("{\"time\":\"", 0), 0u) << line;
  EXPECT_NE(line.find("Z\",\"level\":\"warn\",\"msg\":\"a \\\"quoted\\\"\\nmsg\\u0001\",\"n\":-7,"
                      "\"x\":1.500000,\"b\":false,\"s\":\"back\\\\slash\",\"nan\":\"nan\"}\n"),
            std::string::npos)
      << line;
}

}  // namespace
}  // namespace tensord
