// Tier 2: Array API behaviour that needs the Engine object (flush counts with no round trips
// to count, executable-cache hits). Results, errors and devices through the Array API are in
// the Client suite (tests/rpc/test_client_suite.cpp: ArraySuite, local and remote).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "engine/engine.h"
#include "client/local_client.h"
#include "tensord/array.h"

namespace tensord {
namespace {

class ArrayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("TENSORD_CPU_DEVICES", "2", 1);
    auto e = Engine::create(EngineOptions{});
    unsetenv("TENSORD_CPU_DEVICES");
    ASSERT_TRUE(e.ok());
    engine_ = std::shared_ptr<Engine>(std::move(e).value());
    auto client = std::make_shared<LocalClient>(engine_);
    client_ = client.get();
    ctx_ = std::make_shared<Context>(client);
  }
  Array vec(std::vector<float> v, Shape s, const std::string& device = "") {
    return Array::from_vector(v, std::move(s), device, ctx_);
  }
  std::vector<float> values(const Array& a) {
    auto v = a.to_vector<float>();
    EXPECT_TRUE(v.ok()) << v.status().to_string();
    return v.ok() ? *v : std::vector<float>{};
  }

  std::shared_ptr<Engine> engine_;
  LocalClient* client_ = nullptr;
  std::shared_ptr<Context> ctx_;
};

TEST_F(ArrayTest, AChainOfAHundredOpsIsOneFlush) {
  Array x = vec(std::vector<float>(100, 1.0f), {10, 10});
  Array y = x;
  for (int i = 0; i < 100; ++i) y = (i % 2) ? y * 1.5 : y + 1.0;
  EXPECT_EQ(client_->stats().executes, 0);  // nothing ran yet
  auto v = values(y);
  EXPECT_EQ(client_->stats().executes, 1);
  EXPECT_EQ(ctx_->flushes(), 1);
  double expect = 1.0;
  for (int i = 0; i < 100; ++i) expect = (i % 2) ? expect * 1.5 : expect + 1.0;
  ASSERT_EQ(v.size(), 100u);
  EXPECT_NEAR(v[0], expect, std::abs(expect) * 1e-5);
  // Evaluating again costs nothing more.
  values(y);
  EXPECT_EQ(client_->stats().executes, 1);
}

TEST_F(ArrayTest, IntermediatesStillHeldAreComputedInTheSameFlush) {
  Array x = vec({1, 2}, {2});
  Array mid = x * 3.0;
  Array out = mid + 1.0;
  EXPECT_EQ(values(out), (std::vector<float>{4, 7}));
  EXPECT_EQ(values(mid), (std::vector<float>{3, 6}));
  EXPECT_EQ(client_->stats().executes, 1);
  // The same chain on new data hits the executable cache (user data is a graph input).
  Array out1 = (vec({1, 2}, {2}) * 3.0) + 1.0;
  EXPECT_EQ(values(out1), (std::vector<float>{4, 7}));
  const int64_t compiles = engine_->metrics().compiles;
  Array out2 = (vec({5, 6}, {2}) * 3.0) + 1.0;
  EXPECT_EQ(values(out2), (std::vector<float>{16, 19}));
  EXPECT_EQ(engine_->metrics().compiles, compiles);
  EXPECT_GE(engine_->metrics().cache_hits, 1);
}

}  // namespace
}  // namespace tensord
