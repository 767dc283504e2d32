// Tier 2: the NumPy-like Array API over LocalClient: laziness, results, errors, devices.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "engine/engine.h"
#include "engine/local_client.h"
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

TEST_F(ArrayTest, ArithmeticWithBroadcastingAndScalars) {
  Array a = vec({1, 2, 3, 4, 5, 6}, {2, 3});
  Array b = vec({10, 20, 30}, {3});
  EXPECT_EQ(values(a + b), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(values(a * 2.0 - 1.0), (std::vector<float>{1, 3, 5, 7, 9, 11}));
  EXPECT_EQ(values(12.0 / a), (std::vector<float>{12, 6, 4, 3, 2.4f, 2}));
  EXPECT_EQ(values(-a), (std::vector<float>{-1, -2, -3, -4, -5, -6}));
  EXPECT_EQ(*(a + b).shape(), (Shape{2, 3}));
}

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

TEST_F(ArrayTest, ShapesAreKnownBeforeRunning) {
  Array a = Array::zeros({4, 6}, DType::kFloat32, "", ctx_);
  Array r = a.reshape({2, 12}).transpose();
  auto s = r.shape();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (Shape{12, 2}));
  EXPECT_EQ(client_->stats().executes, 0);
  EXPECT_EQ(*a.sum({1}).shape(), (Shape{4}));
  EXPECT_EQ(*a.mean({0}, true).shape(), (Shape{1, 6}));
  EXPECT_EQ(r.dtype(), DType::kFloat32);
}

TEST_F(ArrayTest, BadCallsCarryTheErrorToEvaluation) {
  Array a = vec({1, 2, 3}, {3});
  Array b = vec({1, 2}, {2});
  Array bad = (a + b).relu() * 2.0;  // no throw, no crash
  Status s = bad.eval();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Add"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("[3]"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("[2]"), std::string::npos) << s.message();
  EXPECT_EQ(bad.to_host().status(), s);
  // Other arrays are unaffected.
  EXPECT_EQ(values(a + a), (std::vector<float>{2, 4, 6}));

  Array m = vec({1, 2, 3, 4, 5, 6}, {2, 3});
  Status mm = m.matmul(m).eval();
  EXPECT_NE(mm.message().find("MatMul"), std::string::npos) << mm.message();
  Status ax = m.softmax(7).eval();
  EXPECT_NE(ax.message().find("Softmax"), std::string::npos) << ax.message();
  EXPECT_FALSE(Array().eval().ok());
  EXPECT_EQ(Array::from_vector<float>({1, 2, 3}, {2}, "", ctx_).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(vec({1}, {1}, "cuda:9").status().code(), StatusCode::kNotFound);
}

TEST_F(ArrayTest, ToMovesBetweenDevicesAndOpsFollowTheirInputs) {
  std::vector<float> big(1000);
  for (int i = 0; i < 1000; ++i) big[static_cast<size_t>(i)] = static_cast<float>(i);
  Array a = vec(big, {1000}, "cpu:0");
  Array b = (a * 2.0).to("cpu:1");
  EXPECT_EQ(b.device(), "cpu:1");
  Array c = b + 1.0;
  EXPECT_EQ(c.device(), "cpu:1");
  auto v = values(c);
  ASSERT_EQ(v.size(), 1000u);
  EXPECT_EQ(v[999], 1999.0f);
  // Mixed devices: runs on the first input's device; the engine moves the other.
  Array d = a + b;
  EXPECT_EQ(d.device(), "cpu:0");
  EXPECT_EQ(values(d)[10], 30.0f);
  EXPECT_GE(engine_->metrics().implicit_moves, 1);
}

TEST_F(ArrayTest, CoreOpsThroughTheArrayApi) {
  Array x = vec({-1, 0, 2, 3}, {2, 2});
  EXPECT_EQ(values(x.relu()), (std::vector<float>{0, 0, 2, 3}));
  EXPECT_EQ(values(x.clip(-0.5, 2.5)), (std::vector<float>{-0.5f, 0, 2, 2.5f}));
  EXPECT_EQ(values(x.sum()), (std::vector<float>{4}));
  EXPECT_EQ(values(x.sum({0})), (std::vector<float>{1, 3}));
  EXPECT_EQ(values(x.max({1})), (std::vector<float>{0, 3}));
  EXPECT_EQ(*x.argmax(1).to_vector<int64_t>(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(values(x.transpose()), (std::vector<float>{-1, 2, 0, 3}));
  EXPECT_EQ(values(concat({x, x}, 0).slice({1}, {3})), (std::vector<float>{2, 3, -1, 0}));
  EXPECT_EQ(*x.cast(DType::kInt32).to_vector<int32_t>(), (std::vector<int32_t>{-1, 0, 2, 3}));
  auto sm = values(vec({0, 0, 0, 0}, {1, 4}).softmax());
  EXPECT_NEAR(sm[0], 0.25f, 1e-6);
  Array idx = Array::from_vector<int64_t>({1, 0}, {2}, "", ctx_);
  EXPECT_EQ(values(x.gather(idx, 0)), (std::vector<float>{2, 3, -1, 0}));
  // Gemm with bias: [[1,2],[3,4]] @ [[1,0],[0,1]] * 2 + [10, 20]
  Array A = vec({1, 2, 3, 4}, {2, 2});
  Array I = vec({1, 0, 0, 1}, {2, 2});
  EXPECT_EQ(values(gemm(A, I, vec({10, 20}, {2}), 2.0f)), (std::vector<float>{12, 24, 16, 28}));
}

TEST_F(ArrayTest, ConvAndPoolingThroughTheArrayApi) {
  // 1x1x3x3 input, 1x1x2x2 kernel of ones: each output is a 2x2 window sum.
  Array x = vec({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  Array w = vec({1, 1, 1, 1}, {1, 1, 2, 2});
  EXPECT_EQ(values(conv(x, w, Array())), (std::vector<float>{12, 16, 24, 28}));
  PoolOptions p;
  p.kernel_shape = {2, 2};
  EXPECT_EQ(values(max_pool(x, p)), (std::vector<float>{5, 6, 8, 9}));
  EXPECT_EQ(values(avg_pool(x, p)), (std::vector<float>{3, 4, 6, 7}));
  EXPECT_EQ(values(global_avg_pool(x)), (std::vector<float>{5}));
}

}  // namespace
}  // namespace tensord
