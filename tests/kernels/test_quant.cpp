// Reference kernels and schemas of the quantization ops, against hand-computed values.
#include <initializer_list>
#include <string>

#include "core/op_registry.h"
#include "kernels/op_test_util.h"

namespace tensord::testing {
namespace {

// ---------------- QuantizeLinear ----------------

TEST(QuantQuantizeLinear, PerTensorUint8Saturates) {
  // 3 / 2 = 1.5 rounds to 2 (ties to even); 1000 and -1000 saturate.
  auto y =
      run1("QuantizeLinear", {F32({0, 2, 3, 1000, -254, -1000}, {6}), F32({2}, {}), U8({128}, {})});
  EXPECT_TRUE(tensors_near(y, U8({128, 129, 130, 255, 1, 0}, {6})));
}

TEST(QuantQuantizeLinear, RoundsHalfToEven) {
  auto y = run1("QuantizeLinear", {F32({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 2.4f, -2.6f}, {8}),
                                   F32({1}, {}), I8({0}, {})});
  EXPECT_TRUE(tensors_near(y, I8({0, 2, 2, 0, -2, -2, 2, -3}, {8})));
}

TEST(QuantQuantizeLinear, Int8SaturatesBothWays) {
  auto y =
      run1("QuantizeLinear", {F32({-300, 300, 127.4f, -128.6f}, {4}), F32({1}, {}), I8({0}, {})});
  EXPECT_TRUE(tensors_near(y, I8({-128, 127, 127, -128}, {4})));
  // With a zero point the sum saturates, not the quotient.
  y = run1("QuantizeLinear", {F32({100, -100}, {2}), F32({1}, {}), I8({50}, {})});
  EXPECT_TRUE(tensors_near(y, I8({127, -50}, {2})));
}

TEST(QuantQuantizeLinear, DefaultZeroPointIsUint8Zero) {
  auto y = run1("QuantizeLinear", {F32({-1, 1.4f, 300}, {3}), F32({1}, {1})});
  EXPECT_TRUE(tensors_near(y, U8({0, 1, 255}, {3})));
}

TEST(QuantQuantizeLinear, PerAxisDefaultAxisOne) {
  // Columns have scales 1, 2, 4 and zero points 0, 10, 20.
  auto y = run1("QuantizeLinear",
                {F32({4, 4, 4, 8, 8, 8}, {2, 3}), F32({1, 2, 4}, {3}), U8({0, 10, 20}, {3})});
  EXPECT_TRUE(tensors_near(y, U8({4, 12, 21, 8, 14, 22}, {2, 3})));
}

TEST(QuantQuantizeLinear, PerAxisNegativeAxis) {
  auto y = run1("QuantizeLinear",
                {F32({1, 2, 3, 10, 20, 30}, {2, 3}), F32({1, 10}, {2}), U8({0, 0}, {2})},
                {{"axis", -2}});
  EXPECT_TRUE(tensors_near(y, U8({1, 2, 3, 1, 2, 3}, {2, 3})));
}

TEST(QuantQuantizeLinear, PerAxisOnInnerAxisOf3D) {
  // x [1, 2, 2], axis 1: the first row uses scale 1, the second scale 0.5.
  auto y = run1("QuantizeLinear",
                {F32({1, 2, 3, 4}, {1, 2, 2}), F32({1, 0.5f}, {2}), I8({0, -10}, {2})});
  EXPECT_TRUE(tensors_near(y, I8({1, 2, -4, -2}, {1, 2, 2})));
}

TEST(QuantQuantizeLinear, Int32AndFloat16Inputs) {
  // 5 / 2 = 2.5 -> 2 and -2.5 -> -2 (ties to even).
  auto y = run1("QuantizeLinear", {I32({5, -5}, {2}), F32({2}, {}), I8({0}, {})});
  EXPECT_TRUE(tensors_near(y, I8({2, -2}, {2})));
  y = run1("QuantizeLinear", {F16({1, 2.5f, 3.5f}, {3}), F32({1}, {})});
  EXPECT_TRUE(tensors_near(y, U8({1, 2, 4}, {3})));
}

TEST(QuantQuantizeLinear, BadInputs) {
  const HostTensor x = F32({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(fails(run_op("QuantizeLinear", {x, F32({1, 2, 3, 4}, {4}), U8({0, 0, 0, 0}, {4})}),
                    {"QuantizeLinear", "y_scale has 4 values", "size 3"}));
  EXPECT_TRUE(fails(run_op("QuantizeLinear", {x, F32({1}, {}), I32({0}, {})}),
                    {"QuantizeLinear", "y_zero_point", "int32", "int8 or uint8"}));
  EXPECT_TRUE(fails(run_op("QuantizeLinear", {x, F32({1, 1}, {1, 2})}),
                    {"QuantizeLinear", "y_scale must be a scalar or 1-D", "[1, 2]"}));
  EXPECT_TRUE(fails(run_op("QuantizeLinear", {x, F32({1, 2, 3}, {3})}, {{"axis", 5}}),
                    {"QuantizeLinear", "axis 5", "[2, 3]"}));
  EXPECT_TRUE(fails(run_op("QuantizeLinear", {x, F32({1, 2, 3}, {3}), U8({0, 0}, {2})}),
                    {"QuantizeLinear", "[2]", "[3]"}));
  EXPECT_TRUE(fails(run_op("QuantizeLinear", {x, F32({0}, {})}),
                    {"QuantizeLinear", "y_scale must not be zero"}));
  EXPECT_TRUE(fails(run_op("QuantizeLinear", {U8({1}, {1}), F32({1}, {})}),
                    {"QuantizeLinear", "input 0 (x) has dtype uint8"}));
}

// ---------------- DequantizeLinear ----------------

TEST(QuantDequantizeLinear, PerTensorUint8) {
  auto y = run1("DequantizeLinear", {U8({0, 3, 128, 255}, {4}), F32({2}, {}), U8({128}, {})});
  EXPECT_TRUE(tensors_near(y, F32({-256, -250, 0, 254}, {4})));
}

TEST(QuantDequantizeLinear, PerAxisInt8Axis0) {
  auto y = run1("DequantizeLinear",
                {I8({-1, 1, 10, 20}, {2, 2}), F32({0.5f, 2}, {2}), I8({1, 0}, {2})}, {{"axis", 0}});
  EXPECT_TRUE(tensors_near(y, F32({-1, 0, 20, 40}, {2, 2})));
}

TEST(QuantDequantizeLinear, PerAxisDefaultAxisAndNoZeroPoint) {
  auto y = run1("DequantizeLinear", {U8({2, 2, 4, 4}, {2, 2}), F32({1, 0.25f}, {2})});
  EXPECT_TRUE(tensors_near(y, F32({2, 0.5f, 4, 1}, {2, 2})));
}

TEST(QuantDequantizeLinear, Int32WithoutZeroPoint) {
  auto y = run1("DequantizeLinear", {I32({100, -7}, {2}), F32({0.5f}, {1})});
  EXPECT_TRUE(tensors_near(y, F32({50, -3.5f}, {2})));
}

TEST(QuantDequantizeLinear, Float16ScaleGivesFloat16Output) {
  auto y = run1("DequantizeLinear", {I8({-4, 6}, {2}), F16({0.5f}, {}), I8({2}, {})});
  EXPECT_TRUE(tensors_near(y, F16({-3, 2}, {2})));
}

TEST(QuantDequantizeLinear, BadInputs) {
  EXPECT_TRUE(fails(run_op("DequantizeLinear", {U8({1, 2}, {2}), F32({1}, {}), I8({0}, {})}),
                    {"DequantizeLinear", "x_zero_point", "int8", "uint8"}));
  EXPECT_TRUE(fails(run_op("DequantizeLinear", {F32({1}, {1}), F32({1}, {})}),
                    {"DequantizeLinear", "input 0 (x) has dtype float32"}));
  EXPECT_TRUE(fails(run_op("DequantizeLinear", {U8({1, 2}, {2}), I32({1}, {})}),
                    {"DequantizeLinear", "x_scale", "int32"}));
  EXPECT_TRUE(fails(run_op("DequantizeLinear", {U8({1, 2, 3, 4}, {2, 2}), F32({1, 2, 3}, {3})}),
                    {"DequantizeLinear", "x_scale has 3 values", "size 2"}));
}

// ---------------- DynamicQuantizeLinear ----------------

TEST(QuantDynamicQuantizeLinear, MixedSigns) {
  // Range [-3, 2]: scale 5/255, zero point 3 / (5/255) = 153.
  auto r = run_op("DynamicQuantizeLinear", {F32({0, 2, -3, -2.5f, 1.34f, 0.5f}, {6})}, {}, 3);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], U8({153, 255, 0, 26, 221, 179}, {6})));
  EXPECT_TRUE(tensors_near((*r)[1], F32({0.019607844f}, {})));
  EXPECT_TRUE(tensors_near((*r)[2], U8({153}, {})));
}

TEST(QuantDynamicQuantizeLinear, AllPositiveAndAllNegative) {
  // Positive only: the range is [0, 2.55], zero point 0.
  auto r = run_op("DynamicQuantizeLinear", {F32({1, 2.55f}, {2})}, {}, 3);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], U8({100, 255}, {2})));
  EXPECT_TRUE(tensors_near((*r)[1], F32({0.01f}, {})));
  EXPECT_TRUE(tensors_near((*r)[2], U8({0}, {})));
  // Negative only: range [-5.1, 0], scale 0.02, zero point 255.
  r = run_op("DynamicQuantizeLinear", {F32({-5.1f, -1}, {1, 2})}, {}, 3);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], U8({0, 205}, {1, 2})));
  EXPECT_TRUE(tensors_near((*r)[1], F32({0.02f}, {})));
  EXPECT_TRUE(tensors_near((*r)[2], U8({255}, {})));
}

TEST(QuantDynamicQuantizeLinear, AllZerosGivesScaleOne) {
  auto r = run_op("DynamicQuantizeLinear", {F32({0, 0, 0}, {3})}, {}, 3);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], U8({0, 0, 0}, {3})));
  EXPECT_TRUE(tensors_near((*r)[1], F32({1}, {})));
  EXPECT_TRUE(tensors_near((*r)[2], U8({0}, {})));
}

TEST(QuantDynamicQuantizeLinear, BadInputs) {
  EXPECT_TRUE(fails(run_op("DynamicQuantizeLinear", {U8({1}, {1})}, {}, 3),
                    {"DynamicQuantizeLinear", "uint8", "float"}));
  EXPECT_TRUE(fails(run_op("DynamicQuantizeLinear", {F32({1}, {1})}, {}, 1),
                    {"DynamicQuantizeLinear", "3 to 3 outputs, got 1"}));
}

// ---------------- MatMulInteger ----------------

TEST(QuantMatMulInteger, PerTensorZeroPoints) {
  auto y = run1("MatMulInteger", {U8({11, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0}, {4, 3}),
                                  U8({1, 4, 2, 5, 3, 6}, {3, 2}), U8({12}, {1}), U8({0}, {1})});
  EXPECT_TRUE(tensors_near(y, I32({-38, -83, -44, -98, -50, -113, -56, -128}, {4, 2})));
}

TEST(QuantMatMulInteger, PerRowAndPerColumnZeroPoints) {
  // A - [1, 2] per row = [[0, 1], [1, 2]]; B - [0, 1] per column = [[1, -1], [0, 0]].
  auto y = run1("MatMulInteger", {I8({1, 2, 3, 4}, {2, 2}), I8({1, 0, 0, 1}, {2, 2}),
                                  I8({1, 2}, {2}), I8({0, 1}, {2})});
  EXPECT_TRUE(tensors_near(y, I32({0, 0, 1, -1}, {2, 2})));
  // The same as N-D zero points: [2, 1] per row and [1, 2] per column.
  y = run1("MatMulInteger", {I8({1, 2, 3, 4}, {2, 2}), I8({1, 0, 0, 1}, {2, 2}), I8({1, 2}, {2, 1}),
                             I8({0, 1}, {1, 2})});
  EXPECT_TRUE(tensors_near(y, I32({0, 0, 1, -1}, {2, 2})));
}

TEST(QuantMatMulInteger, MixedSignednessAndBatchBroadcast) {
  // int8 A [2, 1, 2] times uint8 B [2, 1], no zero points.
  auto y = run1("MatMulInteger", {I8({1, -2, 3, 4}, {2, 1, 2}), U8({200, 1}, {2, 1})});
  EXPECT_TRUE(tensors_near(y, I32({198, 604}, {2, 1, 1})));
}

TEST(QuantMatMulInteger, VectorOperands) {
  auto y = run1("MatMulInteger", {U8({1, 2, 3}, {3}), U8({4, 5, 6}, {3})});
  EXPECT_TRUE(tensors_near(y, I32({32}, {})));
  y = run1("MatMulInteger", {U8({1, 2}, {2}), U8({1, 2, 3, 4}, {2, 2}), U8({1}, {})});
  EXPECT_TRUE(tensors_near(y, I32({3, 4}, {2})));
}

TEST(QuantMatMulInteger, BadInputs) {
  EXPECT_TRUE(fails(run_op("MatMulInteger",
                           {U8({0, 0, 0, 0, 0, 0}, {2, 3}), U8({0, 0, 0, 0, 0, 0, 0, 0}, {4, 2})}),
                    {"MatMulInteger", "inner dimensions differ: [2, 3] x [4, 2]"}));
  EXPECT_TRUE(fails(run_op("MatMulInteger", {U8({0, 0, 0, 0}, {2, 2}), U8({0, 0, 0, 0}, {2, 2}),
                                             U8({1, 2, 3}, {3})}),
                    {"MatMulInteger", "a_zero_point", "3 values", "expected 1 or 2"}));
  EXPECT_TRUE(fails(
      run_op("MatMulInteger", {U8({0, 0, 0, 0}, {2, 2}), U8({0, 0, 0, 0}, {2, 2}), I8({1}, {})}),
      {"MatMulInteger", "a_zero_point", "int8", "uint8"}));
  EXPECT_TRUE(fails(run_op("MatMulInteger", {F32({0}, {1, 1}), U8({0}, {1, 1})}),
                    {"MatMulInteger", "input 0 (A) has dtype float32"}));
}

// ---------------- QLinearMatMul ----------------

TEST(QuantQLinearMatMul, Uint8PerTensor) {
  // Row 0 . column 0 of the zero-point-shifted operands is 11475; times
  // 0.0066 * 0.00705 / 0.0107 = 0.0043486 gives 49.9, +118 -> 168.
  auto y =
      run1("QLinearMatMul",
           {U8({208, 236, 0, 238, 3, 214, 255, 29}, {2, 4}), F32({0.0066f}, {1}), U8({113}, {1}),
            U8({152, 51, 244, 60, 26, 255, 0, 127, 246, 127, 254, 247}, {4, 3}),
            F32({0.00705f}, {1}), U8({114}, {1}), F32({0.0107f}, {1}), U8({118}, {1})});
  EXPECT_TRUE(tensors_near(y, U8({168, 115, 255, 1, 66, 151}, {2, 3})));
}

TEST(QuantQLinearMatMul, Int8TiesAndSaturation) {
  // [1, 4] . [1, 1] = 5, times 0.5 = 2.5 -> 2 (ties to even); [-100, -100] . [1, 1] * 1 = -200
  // saturates to -128.
  auto y = run1("QLinearMatMul",
                {I8({1, 4, -100, -100}, {2, 2}), F32({0.5f, 1}, {2}), I8({0, 0}, {2}),
                 I8({1, 1}, {2, 1}), F32({1}, {}), I8({0}, {}), F32({1}, {}), I8({0}, {})});
  EXPECT_TRUE(tensors_near(y, I8({2, -128}, {2, 1})));
}

TEST(QuantQLinearMatMul, PerColumnScaleOfB) {
  // a = [2], b = [[3, 5]] with column scales [1, 0.1], y zero point 10.
  auto y =
      run1("QLinearMatMul", {U8({2}, {1, 1}), F32({1}, {}), U8({0}, {}), U8({3, 5}, {1, 2}),
                             F32({1, 0.1f}, {2}), U8({0, 0}, {2}), F32({1}, {}), U8({10}, {})});
  EXPECT_TRUE(tensors_near(y, U8({16, 11}, {1, 2})));
}

TEST(QuantQLinearMatMul, BadInputs) {
  EXPECT_TRUE(fails(
      run_op("QLinearMatMul", {U8({1, 2}, {1, 2}), F32({1}, {}), I8({0}, {}), U8({1, 2}, {2, 1}),
                               F32({1}, {}), U8({0}, {}), F32({1}, {}), U8({0}, {})}),
      {"QLinearMatMul", "a_zero_point", "int8"}));
  EXPECT_TRUE(fails(
      run_op("QLinearMatMul", {U8({1, 2}, {1, 2}), F32({1}, {}), U8({0}, {}), U8({1, 2, 3}, {3, 1}),
                               F32({1}, {}), U8({0}, {}), F32({1}, {}), U8({0}, {})}),
      {"QLinearMatMul", "inner dimensions differ: [1, 2] x [3, 1]"}));
  EXPECT_TRUE(fails(run_op("QLinearMatMul", {U8({1, 2}, {1, 2}), F32({1}, {})}),
                    {"QLinearMatMul", "expects 8 inputs, got 2"}));
}

// ---------------- ConvInteger ----------------

TEST(QuantConvInteger, WithoutAndWithPadding) {
  const HostTensor x = U8({2, 3, 4, 5, 6, 7, 8, 9, 10}, {1, 1, 3, 3});
  const HostTensor w = U8({1, 1, 1, 1}, {1, 1, 2, 2});
  // x - 1 = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]; 2x2 window sums.
  EXPECT_TRUE(
      tensors_near(run1("ConvInteger", {x, w, U8({1}, {})}), I32({12, 16, 24, 28}, {1, 1, 2, 2})));
  EXPECT_TRUE(tensors_near(
      run1("ConvInteger", {x, w, U8({1}, {})}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}),
      I32({1, 3, 5, 3, 5, 12, 16, 9, 11, 24, 28, 15, 7, 15, 17, 9}, {1, 1, 4, 4})));
}

TEST(QuantConvInteger, PerChannelWeightZeroPointAndStrides) {
  // Two 1x1 filters: 3 - 1 = 2 and 5 - 5 = 0; strides 2 pick the corners.
  auto y = run1("ConvInteger",
                {U8({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}), U8({3, 5}, {2, 1, 1, 1}),
                 HostTensor(), U8({1, 5}, {2})},
                {{"strides", std::vector<int64_t>{2, 2}}});
  EXPECT_TRUE(tensors_near(y, I32({2, 6, 14, 18, 0, 0, 0, 0}, {1, 2, 2, 2})));
}

TEST(QuantConvInteger, GroupsAndInt8) {
  auto y =
      run1("ConvInteger", {I8({3, -5}, {1, 2, 1, 1}), I8({2, 3}, {2, 1, 1, 1})}, {{"group", 2}});
  EXPECT_TRUE(tensors_near(y, I32({6, -15}, {1, 2, 1, 1})));
}

TEST(QuantConvInteger, AutoPadSameUpper1D) {
  // x = [1, 2, 3], kernel [1, 1]: SAME_UPPER pads one zero at the end.
  auto y = run1("ConvInteger", {U8({1, 2, 3}, {1, 1, 3}), U8({1, 1}, {1, 1, 2})},
                {{"auto_pad", "SAME_UPPER"}});
  EXPECT_TRUE(tensors_near(y, I32({3, 5, 3}, {1, 1, 3})));
}

TEST(QuantConvInteger, BadInputs) {
  EXPECT_TRUE(fails(run_op("ConvInteger", {U8({0, 0}, {1, 2, 1, 1}), U8({0, 0, 0}, {1, 3, 1, 1})}),
                    {"ConvInteger", "input has 2 channels, weight expects 3"}));
  EXPECT_TRUE(
      fails(run_op("ConvInteger", {U8({0}, {1, 1, 1, 1}), U8({0}, {1, 1, 1, 1}), U8({0, 0}, {2})}),
            {"ConvInteger", "x_zero_point", "scalar", "[2]"}));
  EXPECT_TRUE(fails(run_op("ConvInteger", {U8({0}, {1, 1, 1, 1}), U8({0}, {1, 1, 1, 1}),
                                           HostTensor(), U8({0, 0}, {2})}),
                    {"ConvInteger", "w_zero_point", "[1]", "[2]"}));
  EXPECT_TRUE(fails(run_op("ConvInteger", {U8({0, 0}, {1, 2}), U8({0}, {1, 1})}),
                    {"ConvInteger", "rank >= 3", "[1, 2]"}));
}

// ---------------- QLinearConv ----------------

TEST(QuantQLinearConv, PerTensorWithBias) {
  // (x - 10) * (3 - 1) + 1 = [1, 21, 41, 61]; times 0.5 * 2 / 1, + 5.
  auto y = run1("QLinearConv", {U8({10, 20, 30, 40}, {1, 1, 2, 2}), F32({0.5f}, {}), U8({10}, {}),
                                U8({3}, {1, 1, 1, 1}), F32({2}, {}), U8({1}, {}), F32({1}, {}),
                                U8({5}, {}), I32({1}, {1})});
  EXPECT_TRUE(tensors_near(y, U8({6, 26, 46, 66}, {1, 1, 2, 2})));
}

TEST(QuantQLinearConv, PerChannelScalesRoundingAndSaturation) {
  // Channel 0: [1, 3] * 2 * 0.25 = [0.5, 1.5] -> [0, 2] (ties to even), + 250.
  // Channel 1: [1, 3] * 4 * 1 = [4, 12], + 250 -> [254, 255 (saturated)].
  auto y = run1("QLinearConv",
                {U8({1, 3}, {1, 1, 1, 2}), F32({1}, {}), U8({0}, {}), U8({2, 4}, {2, 1, 1, 1}),
                 F32({0.25f, 1}, {2}), U8({0, 0}, {2}), F32({1}, {}), U8({250}, {})});
  EXPECT_TRUE(tensors_near(y, U8({250, 252, 254, 255}, {1, 2, 1, 2})));
}

TEST(QuantQLinearConv, Int8Output) {
  auto y =
      run1("QLinearConv", {I8({-4, 6}, {1, 1, 2}), F32({1}, {}), I8({0}, {}), I8({1, 1}, {1, 1, 2}),
                           F32({1}, {}), I8({0}, {}), F32({0.5f}, {}), I8({-3}, {})});
  EXPECT_TRUE(tensors_near(y, I8({1}, {1, 1, 1})));
}

TEST(QuantQLinearConv, BadInputs) {
  const HostTensor x = U8({1}, {1, 1, 1, 1});
  EXPECT_TRUE(
      fails(run_op("QLinearConv", {x, F32({1}, {}), U8({0}, {}), U8({1, 1}, {2, 1, 1, 1}),
                                   F32({1, 1, 1}, {3}), U8({0}, {}), F32({1}, {}), U8({0}, {})}),
            {"QLinearConv", "w_scale", "[2]", "[3]"}));
  EXPECT_TRUE(fails(
      run_op("QLinearConv", {x, F32({1}, {}), U8({0}, {}), U8({1}, {1, 1, 1, 1}), F32({1}, {}),
                             U8({0}, {}), F32({1}, {}), U8({0}, {}), F32({1}, {1})}),
      {"QLinearConv", "input 8 (B) has dtype float32, expected int32"}));
  EXPECT_TRUE(fails(run_op("QLinearConv", {x, F32({1, 2}, {2}), U8({0}, {}), U8({1}, {1, 1, 1, 1}),
                                           F32({1}, {}), U8({0}, {}), F32({1}, {}), U8({0}, {})}),
                    {"QLinearConv", "x_scale", "scalar", "[2]"}));
}

// ---------------- inference with unknown dims ----------------

TEST(QuantInference, UnknownDimsPropagate) {
  Node n{"q", "QuantizeLinear", "", {"x", "s", "z"}, {"y"}, {}};
  InferenceContext ctx(
      n, {{DType::kFloat32, {-1, 3}}, {DType::kFloat32, {-1}}, {DType::kInt8, {-1}}}, {});
  ASSERT_TRUE(infer_node(OpRegistry::global(), ctx).ok());
  EXPECT_EQ(ctx.output_types()[0], (TensorType{DType::kInt8, {-1, 3}}));
  Node m{"m", "MatMulInteger", "", {"a", "b"}, {"y"}, {}};
  InferenceContext ctx2(m, {{DType::kUInt8, {-1, 4}}, {DType::kInt8, {4, -1}}}, {});
  ASSERT_TRUE(infer_node(OpRegistry::global(), ctx2).ok());
  EXPECT_EQ(ctx2.output_types()[0], (TensorType{DType::kInt32, {-1, -1}}));
}

}  // namespace
}  // namespace tensord::testing
