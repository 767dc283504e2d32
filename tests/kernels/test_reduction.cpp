// Reductions against hand-computed values.
#include <limits>

#include "kernels/op_test_util.h"

namespace tensord::testing {
namespace {

template <typename T>
HostTensor make(std::vector<T> v, Shape s) {
  return HostTensor::from_vector<T>(v, std::move(s));
}
HostTensor none() { return HostTensor(); }

// Exact comparison that also accepts matching infinities and NaNs.
::testing::AssertionResult exactly(const HostTensor& a, const HostTensor& e) {
  if (a.type() != e.type())
    return ::testing::AssertionFailure() << a.type().to_string() << " != " << e.type().to_string();
  auto av = a.to_double_vector(), ev = e.to_double_vector();
  for (size_t i = 0; i < av.size(); ++i) {
    const bool ok = std::isnan(ev[i]) ? std::isnan(av[i]) : av[i] == ev[i];
    if (!ok)
      return ::testing::AssertionFailure() << "element " << i << ": " << av[i] << " != " << ev[i];
  }
  return ::testing::AssertionSuccess();
}

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// ONNX's example data, shape [3, 2, 2].
const HostTensor kA = F32({5, 1, 20, 2, 30, 1, 40, 2, 55, 1, 60, 2}, {3, 2, 2});
// 1..12, shape [3, 2, 2].
const HostTensor kB = F32({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 2, 2});

AttributeMap axes(std::vector<int64_t> a, int64_t keepdims = 1) {
  return {{"axes", std::move(a)}, {"keepdims", keepdims}};
}

// ---------------- ReduceSum (axes input) ----------------

TEST(ReduceSum, AxesInputAndKeepdims) {
  EXPECT_TRUE(
      tensors_near(run1("ReduceSum", {kA, I64({1}, {1})}), F32({25, 3, 70, 3, 115, 3}, {3, 1, 2})));
  EXPECT_TRUE(tensors_near(run1("ReduceSum", {kA, I64({-2}, {1})}, {{"keepdims", 0}}),
                           F32({25, 3, 70, 3, 115, 3}, {3, 2})));
  EXPECT_TRUE(tensors_near(run1("ReduceSum", {kA, I64({0, 2}, {2})}), F32({93, 126}, {1, 2, 1})));
}

TEST(ReduceSum, DefaultAxesReduceEverything) {
  EXPECT_TRUE(tensors_near(run1("ReduceSum", {kA}), F32({219}, {1, 1, 1})));
  EXPECT_TRUE(tensors_near(run1("ReduceSum", {kA}, {{"keepdims", 0}}), F32({219}, {})));
  EXPECT_TRUE(
      tensors_near(run1("ReduceSum", {kA, I64({}, {0})}, {{"keepdims", 0}}), F32({219}, {})));
  EXPECT_TRUE(tensors_near(run1("ReduceSum", {kA, none()}), F32({219}, {1, 1, 1})));
}

TEST(ReduceSum, NoopWithEmptyAxes) {
  EXPECT_TRUE(tensors_near(run1("ReduceSum", {kA}, {{"noop_with_empty_axes", 1}}), kA));
  EXPECT_TRUE(tensors_near(
      run1("ReduceSum", {kA, I64({}, {0})}, {{"noop_with_empty_axes", 1}, {"keepdims", 0}}), kA));
  EXPECT_TRUE(tensors_near(
      run1("ReduceSum", {kA, I64({2}, {1})}, {{"noop_with_empty_axes", 1}, {"keepdims", 0}}),
      F32({6, 22, 31, 42, 56, 62}, {3, 2})));
}

TEST(ReduceSum, IntegersFloat16Double) {
  EXPECT_TRUE(
      tensors_near(run1("ReduceSum", {I32({1, 2, 3, 4}, {2, 2}), I64({1}, {1})}, {{"keepdims", 0}}),
                   I32({3, 7}, {2})));
  EXPECT_TRUE(
      tensors_near(run1("ReduceSum", {I64({-5, 3}, {2})}, {{"keepdims", 0}}), I64({-2}, {})));
  EXPECT_TRUE(tensors_near(run1("ReduceSum", {F16({0.5f, 0.25f, 1.f}, {3})}, {{"keepdims", 0}}),
                           F16({1.75f}, {})));
  EXPECT_TRUE(tensors_near(run1("ReduceSum", {make<double>({0.1, 0.2}, {2})}),
                           make<double>({0.3}, {1}), 1e-15, 1e-15));
}

TEST(ReduceSum, BadInputs) {
  EXPECT_TRUE(fails(run_op("ReduceSum", {kA, I32({1}, {1})}), {"ReduceSum", "int64", "int32"}));
  EXPECT_TRUE(
      fails(run_op("ReduceSum", {kA}, axes({1})), {"ReduceSum", "unknown attribute 'axes'"}));
  EXPECT_TRUE(fails(run_op("ReduceSum", {kA, I64({3}, {1})}), {"ReduceSum", "axis 3", "rank 3"}));
  EXPECT_TRUE(fails(run_op("ReduceSum", {kA, I64({1, -2}, {2})}), {"ReduceSum", "repeated"}));
  // keepdims 0 over the only axis: the output [] is known before the axes value, so the
  // kernel itself must reject the bad axis.
  EXPECT_TRUE(fails(run_op("ReduceSum", {F32({1, 2}, {2}), I64({1}, {1})}, {{"keepdims", 0}}),
                    {"ReduceSum", "axis 1", "rank 1"}));
  HostTensor b(DType::kBool, {2});
  EXPECT_TRUE(fails(run_op("ReduceSum", {b}), {"ReduceSum", "numeric", "bool"}));
}

// ---------------- attribute-form reductions ----------------

TEST(ReduceMean, Values) {
  EXPECT_TRUE(tensors_near(run1("ReduceMean", {kA}, axes({1})),
                           F32({12.5f, 1.5f, 35, 1.5f, 57.5f, 1.5f}, {3, 1, 2})));
  EXPECT_TRUE(tensors_near(run1("ReduceMean", {kA}), F32({18.25f}, {1, 1, 1})));
  // Integer means truncate toward zero.
  EXPECT_TRUE(tensors_near(run1("ReduceMean", {I64({1, 2, 3, 6, -1, -2}, {3, 2})}, axes({1}, 0)),
                           I64({1, 4, -1}, {3})));
  EXPECT_TRUE(tensors_near(run1("ReduceMean", {make<double>({1, 2}, {2})}, axes({0}, 0)),
                           make<double>({1.5}, {})));
}

TEST(ReduceMax, ValuesAndNaN) {
  EXPECT_TRUE(
      tensors_near(run1("ReduceMax", {kA}, axes({1}, 0)), F32({20, 2, 40, 2, 60, 2}, {3, 2})));
  EXPECT_TRUE(tensors_near(run1("ReduceMax", {kA}, {{"keepdims", 0}}), F32({60}, {})));
  EXPECT_TRUE(
      tensors_near(run1("ReduceMax", {make<int8_t>({-5, -3, -9}, {3})}), make<int8_t>({-3}, {1})));
  EXPECT_TRUE(exactly(run1("ReduceMax", {F32({1, kNaN, 3}, {3})}), F32({kNaN}, {1})));
  EXPECT_TRUE(
      tensors_near(run1("ReduceMax", {F16({-1.5f, -0.5f}, {2})}, axes({-1})), F16({-0.5f}, {1})));
}

TEST(ReduceMin, ValuesAndNaN) {
  EXPECT_TRUE(
      tensors_near(run1("ReduceMin", {kA}, axes({1}, 0)), F32({5, 1, 30, 1, 55, 1}, {3, 2})));
  EXPECT_TRUE(tensors_near(run1("ReduceMin", {kA}), F32({1}, {1, 1, 1})));
  EXPECT_TRUE(tensors_near(run1("ReduceMin", {make<uint8_t>({200, 7, 255}, {3})}, axes({0}, 0)),
                           make<uint8_t>({7}, {})));
  EXPECT_TRUE(exactly(run1("ReduceMin", {F32({1, 3, kNaN}, {3})}), F32({kNaN}, {1})));
}

TEST(ReduceProd, Values) {
  EXPECT_TRUE(
      tensors_near(run1("ReduceProd", {kB}, axes({1})), F32({3, 8, 35, 48, 99, 120}, {3, 1, 2})));
  EXPECT_TRUE(tensors_near(run1("ReduceProd", {kB}, {{"keepdims", 0}}), F32({479001600}, {})));
  EXPECT_TRUE(tensors_near(run1("ReduceProd", {I32({2, -3, 4}, {3})}), I32({-24}, {1})));
}

TEST(ReduceL1L2, Values) {
  EXPECT_TRUE(
      tensors_near(run1("ReduceL1", {kB}, axes({2})), F32({3, 7, 11, 15, 19, 23}, {3, 2, 1})));
  EXPECT_TRUE(tensors_near(run1("ReduceL1", {I32({-2, 3}, {2})}), I32({5}, {1})));
  EXPECT_TRUE(tensors_near(
      run1("ReduceL2", {kB}, axes({-1})),
      F32({2.23606798f, 5.f, 7.81024968f, 10.63014581f, 13.45362405f, 16.2788206f}, {3, 2, 1})));
  EXPECT_TRUE(tensors_near(run1("ReduceL2", {I32({3, -4}, {2})}, axes({0}, 0)), I32({5}, {})));
}

TEST(ReduceLogSum, Values) {
  HostTensor x = F32({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(
      tensors_near(run1("ReduceLogSum", {x}, axes({1}, 0)), F32({1.09861229f, 1.94591015f}, {2})));
  EXPECT_TRUE(tensors_near(run1("ReduceLogSum", {x}), F32({2.30258509f}, {1, 1})));
}

TEST(ReduceLogSumExp, ValuesAndStability) {
  EXPECT_TRUE(tensors_near(run1("ReduceLogSumExp", {F32({1, 2}, {1, 2})}, axes({1}, 0)),
                           F32({2.31326169f}, {1})));
  // exp(1000) overflows float and double: the max must be subtracted first.
  EXPECT_TRUE(tensors_near(run1("ReduceLogSumExp", {F32({1000, 1000}, {2})}, axes({0}, 0)),
                           F32({1000.69314718f}, {})));
  EXPECT_TRUE(
      exactly(run1("ReduceLogSumExp", {F32({-kInf, -kInf}, {2})}, axes({0}, 0)), F32({-kInf}, {})));
}

TEST(ReduceSumSquare, Values) {
  EXPECT_TRUE(tensors_near(run1("ReduceSumSquare", {F32({1, 2, 3, 4}, {2, 2})}, axes({0}, 0)),
                           F32({10, 20}, {2})));
  EXPECT_TRUE(tensors_near(run1("ReduceSumSquare", {I64({-3, 4}, {2})}), I64({25}, {1})));
}

TEST(ReduceEmptySet, GivesTheIdentity) {
  HostTensor e(DType::kFloat32, {2, 0});
  EXPECT_TRUE(exactly(run1("ReduceSum", {e, I64({1}, {1})}, {{"keepdims", 0}}), F32({0, 0}, {2})));
  EXPECT_TRUE(exactly(run1("ReduceMax", {e}, axes({1}, 0)), F32({-kInf, -kInf}, {2})));
  EXPECT_TRUE(exactly(run1("ReduceMin", {e}, axes({1}, 0)), F32({kInf, kInf}, {2})));
  EXPECT_TRUE(exactly(run1("ReduceProd", {e}, axes({1}, 0)), F32({1, 1}, {2})));
  EXPECT_TRUE(exactly(run1("ReduceMean", {e}, axes({1}, 0)), F32({kNaN, kNaN}, {2})));
  EXPECT_TRUE(exactly(run1("ReduceLogSumExp", {e}, axes({1}, 0)), F32({-kInf, -kInf}, {2})));
  EXPECT_TRUE(exactly(run1("ReduceLogSum", {e}, axes({1}, 0)), F32({-kInf, -kInf}, {2})));
  EXPECT_TRUE(exactly(run1("ReduceL2", {e}, axes({1}, 0)), F32({0, 0}, {2})));
  EXPECT_TRUE(exactly(run1("ReduceSumSquare", {e}, axes({1}, 0)), F32({0, 0}, {2})));
  EXPECT_TRUE(exactly(run1("ReduceMax", {HostTensor(DType::kInt32, {0})}, axes({0}, 0)),
                      I32({std::numeric_limits<int32_t>::lowest()}, {})));
  // Reducing the other axis gives an empty result.
  EXPECT_TRUE(exactly(run1("ReduceMax", {e}, axes({0}, 0)), F32({}, {0})));
}

TEST(ReduceAttributeForm, BadInputs) {
  EXPECT_TRUE(fails(run_op("ReduceMean", {F32({1, 2}, {1, 2})}, axes({3})),
                    {"ReduceMean", "axis 3", "rank 2", "[3]"}));
  EXPECT_TRUE(fails(run_op("ReduceMax", {F32({1, 2}, {1, 2})}, axes({0, -2})),
                    {"ReduceMax", "axis -2 is repeated", "[0, -2]"}));
  // Opset 18: axes may be input 1 instead, never both.
  EXPECT_TRUE(fails(run_op("ReduceMin", {F32({1, 2}, {1, 2}), I64({0}, {1})}, axes({1})),
                    {"ReduceMin", "both as an attribute and as input 1"}));
  EXPECT_TRUE(fails(run_op("ReduceMin", {F32({1, 2}, {1, 2}), I64({2}, {1})}),
                    {"ReduceMin", "axis 2", "rank 2"}));
  EXPECT_TRUE(fails(run_op("ReduceProd", {F32({1}, {1}), I32({0}, {1})}),
                    {"ReduceProd", "axes must be int64"}));
  EXPECT_TRUE(fails(run_op("ReduceL2", {F32({1}, {1})}, {{"axes", 1.5f}}),
                    {"ReduceL2", "'axes' must be ints"}));
}

// ---------------- ArgMax, ArgMin ----------------

TEST(ReduceArgMax, AxesKeepdims) {
  HostTensor x = F32({2, 1, 3, 10}, {2, 2});
  EXPECT_TRUE(tensors_near(run1("ArgMax", {x}), I64({1, 1}, {1, 2})));
  EXPECT_TRUE(tensors_near(run1("ArgMax", {x}, {{"axis", 1}, {"keepdims", 0}}), I64({0, 1}, {2})));
  EXPECT_TRUE(tensors_near(run1("ArgMax", {x}, {{"axis", -1}}), I64({0, 1}, {2, 1})));
}

TEST(ReduceArgMax, SelectLastIndex) {
  HostTensor x = F32({2, 2, 3, 10}, {2, 2});
  EXPECT_TRUE(tensors_near(run1("ArgMax", {x}, {{"axis", 1}, {"keepdims", 0}}), I64({0, 1}, {2})));
  EXPECT_TRUE(
      tensors_near(run1("ArgMax", {x}, {{"axis", 1}, {"keepdims", 0}, {"select_last_index", 1}}),
                   I64({1, 1}, {2})));
  HostTensor y = I32({-1, -5, 7, 7}, {4});
  EXPECT_TRUE(tensors_near(run1("ArgMax", {y}, {{"keepdims", 0}}), I64({2}, {})));
  EXPECT_TRUE(
      tensors_near(run1("ArgMax", {y}, {{"keepdims", 0}, {"select_last_index", 1}}), I64({3}, {})));
}

TEST(ReduceArgMax, NaNAndFloat16) {
  EXPECT_TRUE(tensors_near(run1("ArgMax", {F32({1, kNaN, 3}, {3})}), I64({1}, {1})));
  EXPECT_TRUE(tensors_near(run1("ArgMax", {F16({0.5f, 2.f, 1.f}, {3})}), I64({1}, {1})));
}

TEST(ReduceArgMin, Values) {
  EXPECT_TRUE(tensors_near(run1("ArgMin", {F32({2, 1, 3, 10}, {2, 2})}, {{"axis", 1}}),
                           I64({1, 0}, {2, 1})));
  HostTensor t = F32({2, 1, 1}, {3});
  EXPECT_TRUE(tensors_near(run1("ArgMin", {t}, {{"keepdims", 0}}), I64({1}, {})));
  EXPECT_TRUE(
      tensors_near(run1("ArgMin", {t}, {{"keepdims", 0}, {"select_last_index", 1}}), I64({2}, {})));
  EXPECT_TRUE(tensors_near(run1("ArgMin", {make<uint64_t>({9, 3, 5}, {1, 3})}, {{"axis", -1}}),
                           I64({1}, {1, 1})));
}

TEST(ReduceArg, BadInputs) {
  EXPECT_TRUE(fails(run_op("ArgMax", {HostTensor(DType::kFloat32, {2, 0})}, {{"axis", 1}}),
                    {"ArgMax", "empty axis 1", "[2, 0]"}));
  EXPECT_TRUE(fails(run_op("ArgMin", {F32({1, 2}, {1, 2})}, {{"axis", 2}}),
                    {"ArgMin", "axis 2", "rank 2"}));
  EXPECT_TRUE(fails(run_op("ArgMax", {F32({1}, {})}), {"ArgMax", "scalar"}));
  EXPECT_TRUE(fails(run_op("ArgMax", {HostTensor(DType::kBool, {2})}), {"ArgMax", "bool"}));
}

}  // namespace
}  // namespace tensord::testing
