// Reference kernels and schemas of the neural-network ops, against hand-computed values.
#include <initializer_list>
#include <string>
#include <tuple>

#include "core/op_registry.h"
#include "kernels/op_test_util.h"

namespace tensord::testing {
namespace {

// ---- MatMul ----

TEST(NnMatMul, TwoD) {
  auto y = run1("MatMul", {F32({1, 2, 3, 4, 5, 6}, {2, 3}), F32({7, 8, 9, 10, 11, 12}, {3, 2})});
  EXPECT_TRUE(tensors_near(y, F32({58, 64, 139, 154}, {2, 2})));
}

TEST(NnMatMul, OneDPromotion) {
  const HostTensor b = F32({7, 8, 9, 10, 11, 12}, {3, 2});
  EXPECT_TRUE(tensors_near(run1("MatMul", {F32({1, 2, 3}, {3}), b}), F32({58, 64}, {2})));
  EXPECT_TRUE(tensors_near(run1("MatMul", {F32({1, 2, 3, 4, 5, 6}, {2, 3}), F32({1, 1, 1}, {3})}),
                           F32({6, 15}, {2})));
  EXPECT_TRUE(
      tensors_near(run1("MatMul", {F32({1, 2, 3}, {3}), F32({4, 5, 6}, {3})}), F32({32}, {})));
  // 1-D times a batch of matrices: [3] x [2, 3, 1] -> [2, 1].
  EXPECT_TRUE(
      tensors_near(run1("MatMul", {F32({1, 2, 3}, {3}), F32({1, 0, 0, 0, 0, 1}, {2, 3, 1})}),
                   F32({1, 3}, {2, 1})));
}

TEST(NnMatMul, BatchBroadcast) {
  // [2, 2, 2] x [2, 2]: the second operand is shared by both batches.
  auto y = run1("MatMul", {F32({1, 0, 0, 1, 2, 0, 0, 2}, {2, 2, 2}), F32({1, 2, 3, 4}, {2, 2})});
  EXPECT_TRUE(tensors_near(y, F32({1, 2, 3, 4, 2, 4, 6, 8}, {2, 2, 2})));
  // [2, 1, 1, 2] x [3, 2, 1] -> [2, 3, 1, 1]: out[i][j] = a_i . b_j.
  y = run1("MatMul", {F32({1, 2, 3, 4}, {2, 1, 1, 2}), F32({1, 1, 1, 0, 0, 1}, {3, 2, 1})});
  EXPECT_TRUE(tensors_near(y, F32({3, 1, 2, 7, 3, 4}, {2, 3, 1, 1})));
}

TEST(NnMatMul, Integers) {
  auto y = run1("MatMul", {I32({1, -2, 3, 4}, {2, 2}), I32({5, 6, -7, 8}, {2, 2})});
  EXPECT_TRUE(tensors_near(y, I32({19, -10, -13, 50}, {2, 2})));
  y = run1("MatMul", {I64({1, -2, 3, 4}, {2, 2}), I64({5, 6, -7, 8}, {2, 2})});
  EXPECT_TRUE(tensors_near(y, I64({19, -10, -13, 50}, {2, 2})));
  y = run1("MatMul", {HostTensor::from_vector<uint64_t>({2, 3}, {1, 2}),
                      HostTensor::from_vector<uint64_t>({4, 5}, {2, 1})});
  EXPECT_TRUE(tensors_near(y, HostTensor::from_vector<uint64_t>({23}, {1, 1})));
}

TEST(NnMatMul, Float64AndFloat16) {
  auto y = run1("MatMul", {F64({0.5, 0.25}, {1, 2}), F64({2, 4}, {2, 1})});
  EXPECT_TRUE(tensors_near(y, F64({2}, {1, 1})));
  y = run1("MatMul", {F16({1.5, 2}, {1, 2}), F16({2, 0.25}, {2, 1})});
  EXPECT_TRUE(tensors_near(y, F16({3.5}, {1, 1}), 1e-3));
}

TEST(NnMatMul, Errors) {
  EXPECT_TRUE(fails_with(run_op("MatMul", {F32({}, {2, 3}), F32({}, {4, 5})}),
                         StatusCode::kInvalidArgument,
                         {"MatMul: inner dimensions differ: [2, 3] x [4, 5]", "test_MatMul"}));
  EXPECT_TRUE(fails_with(
      run_op("MatMul", {F32({}, {2, 2, 3}), F32({}, {3, 3, 2})}), StatusCode::kInvalidArgument,
      {"MatMul", "batch dimensions do not broadcast", "[2, 2, 3]", "[3, 3, 2]"}));
  EXPECT_TRUE(fails_with(run_op("MatMul", {F32({1}, {}), F32({1}, {1})}),
                         StatusCode::kInvalidArgument, {"MatMul", "rank >= 1"}));
  EXPECT_TRUE(fails_with(run_op("MatMul", {F32({1, 2}, {1, 2}), I64({1, 2}, {2, 1})}),
                         StatusCode::kInvalidArgument, {"MatMul", "int64", "float32"}));
  EXPECT_TRUE(fails_with(run_op("MatMul", {HostTensor::from_vector<int8_t>({1}, {1, 1}),
                                           HostTensor::from_vector<int8_t>({1}, {1, 1})}),
                         StatusCode::kInvalidArgument, {"MatMul", "int8", "expected one of"}));
}

// ---- Gemm ----

TEST(NnGemm, DefaultNoBias) {
  auto y = run1("Gemm", {F32({1, 2, 3, 4, 5, 6}, {2, 3}), F32({7, 8, 9, 10, 11, 12}, {3, 2})});
  EXPECT_TRUE(tensors_near(y, F32({58, 64, 139, 154}, {2, 2})));
}

TEST(NnGemm, AllAttributes) {
  // A = [[1,2,3],[4,5,6]] stored transposed, B = [[7,8],[9,10],[11,12]] stored transposed.
  // 0.5 * A @ B = [[29, 32], [69.5, 77]]; + 2 * [1, 2] broadcast over rows.
  auto y =
      run1("Gemm",
           {F32({1, 4, 2, 5, 3, 6}, {3, 2}), F32({7, 9, 11, 8, 10, 12}, {2, 3}), F32({1, 2}, {2})},
           {{"transA", 1}, {"transB", 1}, {"alpha", 0.5f}, {"beta", 2.0f}});
  EXPECT_TRUE(tensors_near(y, F32({31, 36, 71.5, 81}, {2, 2})));
}

TEST(NnGemm, BiasBroadcasting) {
  const HostTensor a = F32({1, 0, 0, 1}, {2, 2});
  const HostTensor b = F32({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(tensors_near(run1("Gemm", {a, b, F32({10}, {})}), F32({11, 12, 13, 14}, {2, 2})));
  EXPECT_TRUE(
      tensors_near(run1("Gemm", {a, b, F32({10, 20}, {2, 1})}), F32({11, 12, 23, 24}, {2, 2})));
  EXPECT_TRUE(tensors_near(run1("Gemm", {a, b, F32({1, 1, 1, 1}, {2, 2})}, {{"beta", 0.0f}}),
                           F32({1, 2, 3, 4}, {2, 2})));
  EXPECT_TRUE(tensors_near(run1("Gemm", {a, b, F32({5}, {1})}), F32({6, 7, 8, 9}, {2, 2})));
}

TEST(NnGemm, IntegersAndFloat64) {
  auto y = run1("Gemm", {I32({1, -2, 3, 4}, {2, 2}), I32({5, 6, -7, 8}, {2, 2}), I32({1, 2}, {2})});
  EXPECT_TRUE(tensors_near(y, I32({20, -8, -12, 52}, {2, 2})));
  y = run1("Gemm", {I64({2}, {1, 1}), I64({3}, {1, 1}), I64({1}, {1})},
           {{"alpha", 2.0f}, {"beta", 3.0f}});
  EXPECT_TRUE(tensors_near(y, I64({15}, {1, 1})));
  y = run1("Gemm", {F64({1, 2}, {2, 1}), F64({3, 4}, {1, 2})}, {{"alpha", 0.5f}});
  EXPECT_TRUE(tensors_near(y, F64({1.5, 2, 3, 4}, {2, 2})));
}

TEST(NnGemm, Errors) {
  EXPECT_TRUE(fails_with(run_op("Gemm", {F32({}, {2, 2}), F32({}, {2, 2}), F32({}, {3})}),
                         StatusCode::kInvalidArgument,
                         {"Gemm", "C of shape [3] does not broadcast to (M, N) = [2, 2]"}));
  EXPECT_TRUE(fails_with(run_op("Gemm", {F32({}, {2, 3}), F32({}, {2, 3})}),
                         StatusCode::kInvalidArgument,
                         {"Gemm", "inner dimensions differ", "[2, 3]"}));
  EXPECT_TRUE(fails_with(run_op("Gemm", {F32({}, {1, 2, 3}), F32({}, {3, 2})}),
                         StatusCode::kInvalidArgument, {"Gemm", "must be 2-D", "[1, 2, 3]"}));
  EXPECT_TRUE(fails_with(run_op("Gemm", {F32({}, {2, 2}), F32({}, {2, 2})}, {{"transC", 1}}),
                         StatusCode::kInvalidArgument, {"Gemm", "unknown attribute 'transC'"}));
}

// ---- Conv ----

TEST(NnConv, OneDPadsStridesDilationsBias) {
  const HostTensor x = F32({1, 2, 3, 4, 5}, {1, 1, 5});
  const HostTensor w = F32({1, 0, -1}, {1, 1, 3});
  const HostTensor b = F32({10}, {1});
  // y[i] = x[i] - x[i+2] + 10.
  EXPECT_TRUE(tensors_near(run1("Conv", {x, w, b}), F32({8, 8, 8}, {1, 1, 3})));
  // Zero padding: the last window sees x3 - 0.
  EXPECT_TRUE(tensors_near(run1("Conv", {x, w, b}, {{"pads", std::vector<int64_t>{1, 1}}}),
                           F32({8, 8, 8, 8, 14}, {1, 1, 5})));
  EXPECT_TRUE(tensors_near(
      run1("Conv", {x, w, b},
           {{"pads", std::vector<int64_t>{1, 1}}, {"strides", std::vector<int64_t>{2}}}),
      F32({8, 8, 14}, {1, 1, 3})));
  // Dilation 2: one window x0 - x4.
  EXPECT_TRUE(tensors_near(run1("Conv", {x, w, b}, {{"dilations", std::vector<int64_t>{2}}}),
                           F32({6}, {1, 1, 1})));
  // Asymmetric explicit pads [begin=2, end=0]: windows start at -2, -1, 0, 1, 2.
  EXPECT_TRUE(tensors_near(run1("Conv", {x, w}, {{"pads", std::vector<int64_t>{2, 0}}}),
                           F32({-1, -2, -2, -2, -2}, {1, 1, 5})));
}

TEST(NnConv, AutoPad) {
  const HostTensor x = F32({1, 2, 3, 4}, {1, 1, 4});
  const HostTensor w = F32({1, 0, -1}, {1, 1, 3});
  const std::vector<int64_t> s2 = {2};
  // out = ceil(4 / 2) = 2, total pad 1: SAME_UPPER pads the end, SAME_LOWER the beginning.
  EXPECT_TRUE(tensors_near(run1("Conv", {x, w}, {{"auto_pad", "SAME_UPPER"}, {"strides", s2}}),
                           F32({-2, 3}, {1, 1, 2})));
  EXPECT_TRUE(tensors_near(run1("Conv", {x, w}, {{"auto_pad", "SAME_LOWER"}, {"strides", s2}}),
                           F32({-2, -2}, {1, 1, 2})));
  EXPECT_TRUE(tensors_near(run1("Conv", {x, w}, {{"auto_pad", "VALID"}, {"strides", s2}}),
                           F32({-2}, {1, 1, 1})));
  // Explicit pads are ignored under auto_pad.
  EXPECT_TRUE(tensors_near(
      run1("Conv", {x, w}, {{"auto_pad", "VALID"}, {"pads", std::vector<int64_t>{1, 1}}}),
      F32({-2, -2}, {1, 1, 2})));
}

TEST(NnConv, TwoDChannelsAndBias) {
  // Channels [1,2,3,4] and [5,6,7,8]; out channel 0 sums everything, out channel 1 is
  // x[0,0,0] - x[1,1,1].
  const HostTensor x = F32({1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 2, 2});
  const HostTensor w = F32({1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, -1}, {2, 2, 2, 2});
  EXPECT_TRUE(tensors_near(run1("Conv", {x, w}, {{"kernel_shape", std::vector<int64_t>{2, 2}}}),
                           F32({36, -7}, {1, 2, 1, 1})));
  EXPECT_TRUE(tensors_near(run1("Conv", {x, w, F32({1, 2}, {2})}), F32({37, -5}, {1, 2, 1, 1})));
}

TEST(NnConv, TwoDPaddedStrided) {
  // 3x3 input 1..9, 2x2 ones kernel, pads 1 on every side, stride 2: 2x2 output of window sums.
  const HostTensor x = F32({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  const HostTensor w = F32({1, 1, 1, 1}, {1, 1, 2, 2});
  auto y =
      run1("Conv", {x, w},
           {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"strides", std::vector<int64_t>{2, 2}}});
  // Windows start at (-1,-1), (-1,1), (1,-1), (1,1).
  EXPECT_TRUE(tensors_near(y, F32({1, 5, 11, 28}, {1, 1, 2, 2})));
}

TEST(NnConv, Groups) {
  const HostTensor x = F32({1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 2, 2});
  auto y = run1("Conv", {x, F32({2, 3}, {2, 1, 1, 1})}, {{"group", 2}});
  EXPECT_TRUE(tensors_near(y, F32({2, 4, 6, 8, 15, 18, 21, 24}, {1, 2, 2, 2})));
  // Two output channels per group (4 in all): group 0 sees channel 0 only.
  y = run1("Conv", {x, F32({1, -1, 10, 0}, {4, 1, 1, 1}), F32({0, 0, 0, 1}, {4})}, {{"group", 2}});
  EXPECT_TRUE(
      tensors_near(y, F32({1, 2, 3, 4, -1, -2, -3, -4, 50, 60, 70, 80, 1, 1, 1, 1}, {1, 4, 2, 2})));
}

TEST(NnConv, ThreeDAndBatch) {
  // 2x2x2 input 1..8, 2x2x2 ones kernel, end pads 1: each output sums the in-bounds corner.
  const HostTensor x = F32({1, 2, 3, 4, 5, 6, 7, 8}, {1, 1, 2, 2, 2});
  auto y = run1("Conv", {x, F32({1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 2, 2, 2})},
                {{"pads", std::vector<int64_t>{0, 0, 0, 1, 1, 1}}});
  EXPECT_TRUE(tensors_near(y, F32({36, 20, 22, 12, 26, 14, 15, 8}, {1, 1, 2, 2, 2})));
  // Batch of two 1-D signals.
  y = run1("Conv", {F32({1, 2, 3, 10, 20, 30}, {2, 1, 3}), F32({1, 1}, {1, 1, 2})});
  EXPECT_TRUE(tensors_near(y, F32({3, 5, 30, 50}, {2, 1, 2})));
}

TEST(NnConv, Float64AndFloat16) {
  auto y = run1("Conv", {F64({1, 2, 3}, {1, 1, 3}), F64({0.5, 0.25}, {1, 1, 2})});
  EXPECT_TRUE(tensors_near(y, F64({1, 1.75}, {1, 1, 2})));
  y = run1("Conv", {F16({1, 2, 3}, {1, 1, 3}), F16({0.5, 0.25}, {1, 1, 2}), F16({1}, {1})});
  EXPECT_TRUE(tensors_near(y, F16({2, 2.75}, {1, 1, 2}), 1e-3));
}

TEST(NnConv, Errors) {
  auto r = run_op("Conv", {F32({}, {1, 3, 5, 5}), F32({}, {2, 4, 3, 3})});
  EXPECT_TRUE(fails_with(r, StatusCode::kInvalidArgument,
                         {"Conv: input has 3 channels, weight expects 4 (node 'test_Conv')"}));
  EXPECT_TRUE(fails_with(
      run_op("Conv", {F32({}, {1, 4, 5, 5}), F32({}, {3, 2, 3, 3})}, {{"group", 2}}),
      StatusCode::kInvalidArgument, {"Conv", "3 output channels, not divisible by group 2"}));
  EXPECT_TRUE(fails_with(run_op("Conv", {F32({}, {1, 1, 5, 5}), F32({}, {1, 1, 3, 3})},
                                {{"kernel_shape", std::vector<int64_t>{2, 2}}}),
                         StatusCode::kInvalidArgument, {"Conv", "kernel_shape [2, 2]", "[3, 3]"}));
  EXPECT_TRUE(fails_with(run_op("Conv", {F32({}, {1, 1, 5}), F32({}, {2, 1, 3}), F32({}, {3})}),
                         StatusCode::kInvalidArgument, {"Conv", "bias has shape [3]", "[2]"}));
  EXPECT_TRUE(fails_with(
      run_op("Conv", {F32({}, {1, 1, 5}), F32({}, {1, 1, 3})}, {{"pads", std::vector<int64_t>{1}}}),
      StatusCode::kInvalidArgument, {"Conv", "'pads' has 1 values [1]", "2"}));
  EXPECT_TRUE(
      fails_with(run_op("Conv", {F32({}, {1, 1, 5}), F32({}, {1, 1, 3})}, {{"auto_pad", "SAME"}}),
                 StatusCode::kInvalidArgument, {"Conv", "auto_pad", "'SAME'"}));
  EXPECT_TRUE(fails_with(run_op("Conv", {F32({}, {1, 1, 2}), F32({}, {1, 1, 3})}),
                         StatusCode::kInvalidArgument,
                         {"Conv", "input size 2", "dilated kernel size 3"}));
  EXPECT_TRUE(fails_with(run_op("Conv", {F32({}, {1, 1, 5}), F32({}, {1, 1, 3})},
                                {{"strides", std::vector<int64_t>{0}}}),
                         StatusCode::kInvalidArgument,
                         {"Conv", "'strides' values must be in [1, 2147483647], got [0]"}));
  EXPECT_TRUE(fails_with(run_op("Conv", {F32({}, {1, 1, 5}), F32({}, {1, 1, 3})},
                                {{"dilations", std::vector<int64_t>{int64_t{1} << 40}}}),
                         StatusCode::kInvalidArgument, {"Conv", "'dilations'", "1099511627776"}));
  EXPECT_TRUE(fails_with(run_op("Conv", {F32({}, {1, 1, 5}), F32({}, {1, 1, 1, 3})}),
                         StatusCode::kInvalidArgument, {"Conv", "weight has shape [1, 1, 1, 3]"}));
  EXPECT_TRUE(fails_with(run_op("Conv", {I64({}, {1, 1, 5}), I64({}, {1, 1, 3})}),
                         StatusCode::kInvalidArgument, {"Conv", "int64"}));
}

// ---- ConvTranspose ----

TEST(NnConvTranspose, OneD) {
  const HostTensor x = F32({1, 2, 3}, {1, 1, 3});
  const HostTensor w = F32({1, 1, 1}, {1, 1, 3});
  EXPECT_TRUE(tensors_near(run1("ConvTranspose", {x, w}), F32({1, 3, 6, 5, 3}, {1, 1, 5})));
  const std::vector<int64_t> s2 = {2};
  // Stride 2: x0 covers 0..2, x1 2..4, x2 4..6.
  EXPECT_TRUE(tensors_near(run1("ConvTranspose", {x, w}, {{"strides", s2}}),
                           F32({1, 1, 3, 2, 5, 3, 3}, {1, 1, 7})));
  // Pads crop the full result.
  EXPECT_TRUE(tensors_near(
      run1("ConvTranspose", {x, w}, {{"strides", s2}, {"pads", std::vector<int64_t>{1, 1}}}),
      F32({1, 3, 2, 5, 3}, {1, 1, 5})));
  // output_padding adds one (zero) element at the end.
  EXPECT_TRUE(tensors_near(
      run1("ConvTranspose", {x, w}, {{"strides", s2}, {"output_padding", std::vector<int64_t>{1}}}),
      F32({1, 1, 3, 2, 5, 3, 3, 0}, {1, 1, 8})));
  // Dilation 2 with a 2-tap kernel: x0 at 0 and 2, x1 at 1 and 3, x2 at 2 and 4.
  EXPECT_TRUE(tensors_near(
      run1("ConvTranspose", {x, F32({1, 1}, {1, 1, 2})}, {{"dilations", std::vector<int64_t>{2}}}),
      F32({1, 2, 4, 2, 3}, {1, 1, 5})));
}

TEST(NnConvTranspose, OutputShapeAndAutoPad) {
  const HostTensor x = F32({1, 2, 3}, {1, 1, 3});
  const HostTensor w = F32({1, 1, 1}, {1, 1, 3});
  const std::vector<int64_t> s2 = {2};
  // Full result is [1, 1, 3, 2, 5, 3, 3] (7 long).
  EXPECT_TRUE(tensors_near(
      run1("ConvTranspose", {x, w}, {{"strides", s2}, {"output_shape", std::vector<int64_t>{8}}}),
      F32({1, 1, 3, 2, 5, 3, 3, 0}, {1, 1, 8})));
  // Total padding 1, NOTSET: begin = 1 - 1/2 = 1, end = 0.
  EXPECT_TRUE(tensors_near(
      run1("ConvTranspose", {x, w}, {{"strides", s2}, {"output_shape", std::vector<int64_t>{6}}}),
      F32({1, 3, 2, 5, 3, 3}, {1, 1, 6})));
  // output_shape with batch and channel dims is accepted too.
  EXPECT_TRUE(tensors_near(run1("ConvTranspose", {x, w},
                                {{"strides", s2}, {"output_shape", std::vector<int64_t>{1, 1, 6}}}),
                           F32({1, 3, 2, 5, 3, 3}, {1, 1, 6})));
  // SAME: output = 3 * 2 = 6; SAME_UPPER crops the end, SAME_LOWER the beginning.
  EXPECT_TRUE(
      tensors_near(run1("ConvTranspose", {x, w}, {{"strides", s2}, {"auto_pad", "SAME_UPPER"}}),
                   F32({1, 1, 3, 2, 5, 3}, {1, 1, 6})));
  EXPECT_TRUE(
      tensors_near(run1("ConvTranspose", {x, w}, {{"strides", s2}, {"auto_pad", "SAME_LOWER"}}),
                   F32({1, 3, 2, 5, 3, 3}, {1, 1, 6})));
}

TEST(NnConvTranspose, GroupsBiasAndRanks) {
  // Group 2, one output channel per group: y0 = 1 * w0, y1 = 2 * w1, plus bias [1, -1].
  auto y = run1(
      "ConvTranspose",
      {F32({1, 2}, {1, 2, 1, 1}), F32({1, 2, 3, 4, 5, 6, 7, 8}, {2, 1, 2, 2}), F32({1, -1}, {2})},
      {{"group", 2}});
  EXPECT_TRUE(tensors_near(y, F32({2, 3, 4, 5, 9, 11, 13, 15}, {1, 2, 2, 2})));
  // Two output channels from one input channel.
  y = run1("ConvTranspose", {F32({2}, {1, 1, 1, 1}), F32({3, 4}, {1, 2, 1, 1})});
  EXPECT_TRUE(tensors_near(y, F32({6, 8}, {1, 2, 1, 1})));
  // 3-D.
  y = run1("ConvTranspose", {F32({1, 2}, {1, 1, 1, 1, 2}), F32({1, 1}, {1, 1, 1, 1, 2})});
  EXPECT_TRUE(tensors_near(y, F32({1, 3, 2}, {1, 1, 1, 1, 3})));
  // float64.
  y = run1("ConvTranspose", {F64({1, 2}, {1, 1, 2}), F64({0.5, 1}, {1, 1, 2})});
  EXPECT_TRUE(tensors_near(y, F64({0.5, 2, 2}, {1, 1, 3})));
}

TEST(NnConvTranspose, Errors) {
  EXPECT_TRUE(fails_with(run_op("ConvTranspose", {F32({}, {1, 2, 3}), F32({}, {3, 1, 3})}),
                         StatusCode::kInvalidArgument,
                         {"ConvTranspose: input has 2 channels, weight expects 3"}));
  EXPECT_TRUE(fails_with(run_op("ConvTranspose", {F32({}, {1, 1, 3}), F32({}, {1, 1, 3})},
                                {{"output_padding", std::vector<int64_t>{1, 1}}}),
                         StatusCode::kInvalidArgument, {"ConvTranspose", "'output_padding'"}));
  EXPECT_TRUE(fails_with(run_op("ConvTranspose", {F32({}, {1, 1, 2}), F32({}, {1, 1, 2})},
                                {{"pads", std::vector<int64_t>{2, 2}}}),
                         StatusCode::kInvalidArgument, {"ConvTranspose", "pads 2+2", "3"}));
  EXPECT_TRUE(
      fails_with(run_op("ConvTranspose", {F32({}, {1, 1, 3}), F32({}, {1, 1, 3}), F32({}, {2})}),
                 StatusCode::kInvalidArgument, {"ConvTranspose", "bias has shape [2]"}));
}

TEST(NnConvTranspose, OutputPaddingSmallerThanStrideOrDilation) {
  // output_padding adds the rows a stride (or dilation) can skip; as large as both, it would
  // append rows no input element reaches. Refused as PyTorch refuses it.
  const HostTensor x = F32({1, 2, 3}, {1, 1, 3}), w = F32({1, 1, 1}, {1, 1, 3});
  for (const auto& [strides, dilations, output_padding, axis_text] :
       std::vector<std::tuple<std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>,
                              std::string>>{
           {{1}, {1}, {1}, "axis 0: output_padding 1, stride 1, dilation 1"},
           {{2}, {1}, {2}, "axis 0: output_padding 2, stride 2, dilation 1"},
           {{2}, {3}, {5}, "axis 0: output_padding 5, stride 2, dilation 3"}}) {
    EXPECT_TRUE(fails(run_op("ConvTranspose", {x, w},
                             {{"strides", strides},
                              {"dilations", dilations},
                              {"output_padding", output_padding}}),
                      {"ConvTranspose", "must be smaller than the stride or the dilation",
                       axis_text}));
  }
  const HostTensor x2 = F32(std::vector<float>(9, 1.f), {1, 1, 3, 3});
  const HostTensor w2 = F32(std::vector<float>(9, 1.f), {1, 1, 3, 3});
  EXPECT_TRUE(fails(run_op("ConvTranspose", {x2, w2},
                           {{"strides", std::vector<int64_t>{2, 1}},
                            {"output_padding", std::vector<int64_t>{1, 1}}}),
                    {"axis 1: output_padding 1, stride 1, dilation 1"}));
  // Smaller than the stride: one more zero (+ bias) row at the end.
  EXPECT_TRUE(tensors_near(run1("ConvTranspose", {x, w},
                                {{"strides", std::vector<int64_t>{2}},
                                 {"output_padding", std::vector<int64_t>{1}}}),
                           F32({1, 1, 3, 2, 5, 3, 3, 0}, {1, 1, 8})));
  // Smaller than the dilation (stride 1): allowed too.
  auto r = run_op("ConvTranspose", {x, w},
                  {{"dilations", std::vector<int64_t>{2}},
                   {"output_padding", std::vector<int64_t>{1}}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0].shape(), (Shape{1, 1, 8}));
}

// ---- MaxPool ----

TEST(NnMaxPool, TwoDWithIndices) {
  const HostTensor x = F32({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 1, 4, 4});
  AttributeMap attrs = {{"kernel_shape", std::vector<int64_t>{2, 2}},
                        {"strides", std::vector<int64_t>{2, 2}}};
  auto r = run_op("MaxPool", {x}, attrs, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], F32({6, 8, 14, 16}, {1, 1, 2, 2})));
  EXPECT_TRUE(tensors_near((*r)[1], I64({5, 7, 13, 15}, {1, 1, 2, 2})));
  // Column-major indices: h + w * H.
  attrs["storage_order"] = 1;
  r = run_op("MaxPool", {x}, attrs, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[1], I64({5, 13, 7, 15}, {1, 1, 2, 2})));
}

TEST(NnMaxPool, IndicesCountPlanesAndTies) {
  // Batch 2: the second plane's indices are offset by its 2 elements. Ties keep the first.
  auto r = run_op("MaxPool", {F32({1, 3, 4, 2, 7, 7}, {3, 1, 1, 2})},
                  {{"kernel_shape", std::vector<int64_t>{1, 2}}}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], F32({3, 4, 7}, {3, 1, 1, 1})));
  EXPECT_TRUE(tensors_near((*r)[1], I64({1, 2, 4}, {3, 1, 1, 1})));
}

TEST(NnMaxPool, CeilModeAndPads) {
  const HostTensor x = F32({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 1, 4, 4});
  AttributeMap attrs = {{"kernel_shape", std::vector<int64_t>{3, 3}},
                        {"strides", std::vector<int64_t>{2, 2}}};
  EXPECT_TRUE(tensors_near(run1("MaxPool", {x}, attrs), F32({11}, {1, 1, 1, 1})));
  attrs["ceil_mode"] = 1;
  EXPECT_TRUE(tensors_near(run1("MaxPool", {x}, attrs), F32({11, 12, 15, 16}, {1, 1, 2, 2})));
  // 1-D [1, 5, 2], k 2, s 2, pads 1+1: ceil((3+2-2)/2)+1 = 3 windows, but the third would start
  // in the end padding, so it is dropped: windows [-1, 0] and [1, 2].
  EXPECT_TRUE(tensors_near(run1("MaxPool", {F32({1, 5, 2}, {1, 1, 3})},
                                {{"kernel_shape", std::vector<int64_t>{2}},
                                 {"strides", std::vector<int64_t>{2}},
                                 {"pads", std::vector<int64_t>{1, 1}},
                                 {"ceil_mode", 1}}),
                           F32({1, 5}, {1, 1, 2})));
  // Padding never wins over negative values.
  EXPECT_TRUE(tensors_near(
      run1("MaxPool", {F32({-3, -1}, {1, 1, 2})},
           {{"kernel_shape", std::vector<int64_t>{2}}, {"pads", std::vector<int64_t>{1, 1}}}),
      F32({-3, -1, -1}, {1, 1, 3})));
}

TEST(NnMaxPool, DilationsAndAutoPad) {
  const HostTensor x = F32({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 1, 4, 4});
  EXPECT_TRUE(tensors_near(run1("MaxPool", {x},
                                {{"kernel_shape", std::vector<int64_t>{2, 2}},
                                 {"dilations", std::vector<int64_t>{2, 2}}}),
                           F32({11, 12, 15, 16}, {1, 1, 2, 2})));
  const HostTensor x1 = F32({4, 1, 3, 2}, {1, 1, 4});
  const std::vector<int64_t> k2 = {2};
  EXPECT_TRUE(
      tensors_near(run1("MaxPool", {x1}, {{"kernel_shape", k2}, {"auto_pad", "SAME_UPPER"}}),
                   F32({4, 3, 3, 2}, {1, 1, 4})));
  EXPECT_TRUE(
      tensors_near(run1("MaxPool", {x1}, {{"kernel_shape", k2}, {"auto_pad", "SAME_LOWER"}}),
                   F32({4, 4, 3, 3}, {1, 1, 4})));
  EXPECT_TRUE(tensors_near(
      run1("MaxPool", {x1},
           {{"kernel_shape", k2}, {"auto_pad", "VALID"}, {"strides", std::vector<int64_t>{2}}}),
      F32({4, 3}, {1, 1, 2})));
}

TEST(NnMaxPool, ThreeDIntegersAndFloat16) {
  auto r = run_op("MaxPool", {F32({3, 8, 1, 2, 7, 4, 6, 5}, {1, 1, 2, 2, 2})},
                  {{"kernel_shape", std::vector<int64_t>{2, 2, 2}}, {"storage_order", 1}}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], F32({8}, {1, 1, 1, 1, 1})));
  // Position (0, 0, 1): column-major index 0 + 0 * 2 + 1 * 4.
  EXPECT_TRUE(tensors_near((*r)[1], I64({4}, {1, 1, 1, 1, 1})));
  const std::vector<int64_t> k2 = {2};
  auto y = run1("MaxPool", {HostTensor::from_vector<int8_t>({-5, -3, -7, -1}, {1, 1, 4})},
                {{"kernel_shape", k2}, {"strides", k2}});
  EXPECT_TRUE(tensors_near(y, HostTensor::from_vector<int8_t>({-3, -1}, {1, 1, 2})));
  y = run1("MaxPool", {HostTensor::from_vector<uint8_t>({200, 3, 7, 255}, {1, 1, 4})},
           {{"kernel_shape", k2}, {"strides", k2}});
  EXPECT_TRUE(tensors_near(y, HostTensor::from_vector<uint8_t>({200, 255}, {1, 1, 2})));
  y = run1("MaxPool", {F16({0.5, -2, 1.5, 1}, {1, 1, 4})}, {{"kernel_shape", k2}, {"strides", k2}});
  EXPECT_TRUE(tensors_near(y, F16({0.5, 1.5}, {1, 1, 2})));
}

TEST(NnMaxPool, Errors) {
  const HostTensor x = F32({}, {1, 1, 4, 4});
  EXPECT_TRUE(fails_with(run_op("MaxPool", {x}), StatusCode::kInvalidArgument,
                         {"MaxPool", "'kernel_shape' is required"}));
  EXPECT_TRUE(fails_with(run_op("MaxPool", {x}, {{"kernel_shape", std::vector<int64_t>{2}}}),
                         StatusCode::kInvalidArgument,
                         {"MaxPool", "kernel_shape [2]", "2 spatial"}));
  EXPECT_TRUE(fails_with(
      run_op("MaxPool", {x}, {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"storage_order", 2}}),
      StatusCode::kInvalidArgument, {"MaxPool", "storage_order", "2"}));
  EXPECT_TRUE(fails_with(run_op("MaxPool", {x},
                                {{"kernel_shape", std::vector<int64_t>{2, 2}},
                                 {"pads", std::vector<int64_t>{0, -1, 0, 0}}}),
                         StatusCode::kInvalidArgument, {"MaxPool", "'pads'", "[0, -1, 0, 0]"}));
  EXPECT_TRUE(fails_with(run_op("MaxPool", {x}, {{"kernel_shape", std::vector<int64_t>{5, 5}}}),
                         StatusCode::kInvalidArgument, {"MaxPool", "input size 4", "5"}));
  EXPECT_TRUE(
      fails_with(run_op("MaxPool", {F32({}, {4, 4})}, {{"kernel_shape", std::vector<int64_t>{2}}}),
                 StatusCode::kInvalidArgument, {"MaxPool", "rank >= 3", "[4, 4]"}));
  EXPECT_TRUE(fails_with(
      run_op("MaxPool", {I64({1, 2}, {1, 1, 2})}, {{"kernel_shape", std::vector<int64_t>{2}}}),
      StatusCode::kInvalidArgument, {"MaxPool", "int64"}));
}

TEST(NnMaxPool, HugeWindowOnlyVisitsTheInput) {
  // A 2^31-1 tap window with one less of padding: the first window covers the begin padding
  // and the input's first element, the second starts at the input. Only in-bounds taps are
  // visited.
  const int64_t big = 2147483647;
  AttributeMap attrs = {{"kernel_shape", std::vector<int64_t>{big}},
                        {"strides", std::vector<int64_t>{big}},
                        {"pads", std::vector<int64_t>{big - 1, big - 1}}};
  auto r = run_op("MaxPool", {F32({1, 4, 3, 2}, {1, 1, 4})}, attrs, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], F32({1, 4}, {1, 1, 2})));
  EXPECT_TRUE(tensors_near((*r)[1], I64({0, 1}, {1, 1, 2})));
  // Average including padding divides by every tap in the padded extent.
  attrs["count_include_pad"] = 1;
  EXPECT_TRUE(tensors_near(run1("AveragePool", {F64({1, 4, 3, 2}, {1, 1, 4})}, attrs),
                           F64({1.0 / 2147483647.0, 9.0 / 2147483647.0}, {1, 1, 2}), 1e-9, 0));
}

TEST(NnMaxPool, PadsAsLargeAsTheKernelAreRefused) {
  // A window entirely in the padding has no input element: a max of nothing, an average over
  // zero elements. Refused (as onnxruntime does) for every pool, begin or end pad, 1-D to 3-D.
  const HostTensor x2 = F32(std::vector<float>(16, 1.f), {1, 1, 4, 4});
  for (const char* op : {"MaxPool", "AveragePool", "LpPool"}) {
    for (const auto& pads : std::vector<std::vector<int64_t>>{{2, 0, 0, 0}, {0, 0, 0, 3}}) {
      AttributeMap attrs = {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"pads", pads}};
      EXPECT_TRUE(fails(run_op(op, {x2}, attrs), {op, "pads", "smaller than kernel_shape [2, 2]",
                                                  "entirely in the padding"}))
          << op;
    }
  }
  EXPECT_TRUE(fails(run_op("MaxPool", {F32({1, 2, 3}, {1, 1, 3})},
                           {{"kernel_shape", std::vector<int64_t>{1}},
                            {"pads", std::vector<int64_t>{1, 0}}},
                           2),
                    {"spatial axis 0: pads 1+0, kernel 1"}));
  // One less is fine: every window keeps at least one input element.
  EXPECT_TRUE(tensors_near(run1("MaxPool", {F32({1, 2, 3}, {1, 1, 3})},
                                {{"kernel_shape", std::vector<int64_t>{2}},
                                 {"pads", std::vector<int64_t>{1, 1}}}),
                           F32({1, 2, 3, 3}, {1, 1, 4})));
  // auto_pad computes its own pads; explicit pads are checked only without it.
  EXPECT_TRUE(run_op("AveragePool", {x2},
                     {{"kernel_shape", std::vector<int64_t>{2, 2}},
                      {"dilations", std::vector<int64_t>{3, 3}},
                      {"auto_pad", std::string("SAME_UPPER")}})
                  .ok());
}

// ---- AveragePool, LpPool ----

TEST(NnAveragePool, OneDPadsCountIncludePad) {
  const std::vector<int64_t> k2 = {2};
  EXPECT_TRUE(
      tensors_near(run1("AveragePool", {F32({1, 2, 3, 4}, {1, 1, 4})}, {{"kernel_shape", k2}}),
                   F32({1.5, 2.5, 3.5}, {1, 1, 3})));
  const HostTensor x = F32({3, 6, 9}, {1, 1, 3});
  AttributeMap attrs = {{"kernel_shape", k2}, {"pads", std::vector<int64_t>{1, 1}}};
  EXPECT_TRUE(tensors_near(run1("AveragePool", {x}, attrs), F32({3, 4.5, 7.5, 9}, {1, 1, 4})));
  attrs["count_include_pad"] = 1;
  EXPECT_TRUE(tensors_near(run1("AveragePool", {x}, attrs), F32({1.5, 4.5, 7.5, 4.5}, {1, 1, 4})));
}

TEST(NnAveragePool, CeilModeDoesNotCountOverhang) {
  // k 3, s 2, ceil: windows [0..2] and [2..4]; the second overhangs the input by one, which is
  // not padding and is not counted even with count_include_pad.
  AttributeMap attrs = {{"kernel_shape", std::vector<int64_t>{3}},
                        {"strides", std::vector<int64_t>{2}},
                        {"ceil_mode", 1},
                        {"count_include_pad", 1}};
  EXPECT_TRUE(tensors_near(run1("AveragePool", {F32({1, 2, 3, 4}, {1, 1, 4})}, attrs),
                           F32({2, 3.5}, {1, 1, 2})));
}

TEST(NnAveragePool, TwoDSameUpper) {
  const HostTensor x = F32({1, 2, 3, 4}, {1, 1, 2, 2});
  AttributeMap attrs = {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"auto_pad", "SAME_UPPER"}};
  EXPECT_TRUE(tensors_near(run1("AveragePool", {x}, attrs), F32({2.5, 3, 3.5, 4}, {1, 1, 2, 2})));
  attrs["count_include_pad"] = 1;
  EXPECT_TRUE(
      tensors_near(run1("AveragePool", {x}, attrs), F32({2.5, 1.5, 1.75, 1}, {1, 1, 2, 2})));
}

TEST(NnAveragePool, StridesThreeDAndFloat64) {
  const HostTensor x = F32({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 1, 4, 4});
  EXPECT_TRUE(tensors_near(
      run1("AveragePool", {x},
           {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}}),
      F32({3.5, 5.5, 11.5, 13.5}, {1, 1, 2, 2})));
  EXPECT_TRUE(tensors_near(run1("AveragePool", {F64({1, 2, 3, 4, 5, 6, 7, 8}, {1, 1, 2, 2, 2})},
                                {{"kernel_shape", std::vector<int64_t>{2, 2, 2}}}),
                           F64({4.5}, {1, 1, 1, 1, 1})));
  EXPECT_TRUE(
      fails_with(run_op("AveragePool", {x},
                        {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"count_include_pad", 3}}),
                 StatusCode::kInvalidArgument, {"AveragePool", "count_include_pad", "3"}));
}

TEST(NnLpPool, Norms) {
  const HostTensor x = F32({3, 4, -6, 8}, {1, 1, 4});
  const std::vector<int64_t> k2 = {2};
  EXPECT_TRUE(tensors_near(run1("LpPool", {x}, {{"kernel_shape", k2}, {"strides", k2}}),
                           F32({5, 10}, {1, 1, 2})));
  EXPECT_TRUE(tensors_near(run1("LpPool", {x}, {{"kernel_shape", k2}, {"strides", k2}, {"p", 1}}),
                           F32({7, 14}, {1, 1, 2})));
  EXPECT_TRUE(tensors_near(run1("LpPool", {F32({1, 2, 2, 4}, {1, 1, 2, 2})},
                                {{"kernel_shape", std::vector<int64_t>{2, 2}}}),
                           F32({5}, {1, 1, 1, 1})));
  // Padding contributes zeros.
  EXPECT_TRUE(tensors_near(run1("LpPool", {F32({3, 4}, {1, 1, 2})},
                                {{"kernel_shape", k2}, {"pads", std::vector<int64_t>{1, 1}}}),
                           F32({3, 5, 4}, {1, 1, 3})));
  EXPECT_TRUE(fails_with(run_op("LpPool", {x}, {{"kernel_shape", k2}, {"p", 0}}),
                         StatusCode::kInvalidArgument, {"LpPool", "p must be >= 1, got 0"}));
}

// ---- global pools ----

TEST(NnGlobalPool, AverageMaxLp) {
  // Channel 0: [1, 2, 3, 4]; channel 1: [3, 0, 0, 4].
  const HostTensor x = F32({1, 2, 3, 4, 3, 0, 0, 4}, {1, 2, 2, 2});
  EXPECT_TRUE(tensors_near(run1("GlobalAveragePool", {x}), F32({2.5, 1.75}, {1, 2, 1, 1})));
  EXPECT_TRUE(tensors_near(run1("GlobalMaxPool", {x}), F32({4, 4}, {1, 2, 1, 1})));
  EXPECT_TRUE(tensors_near(run1("GlobalLpPool", {x}), F32({5.4772256f, 5}, {1, 2, 1, 1})));
  EXPECT_TRUE(tensors_near(run1("GlobalLpPool", {x}, {{"p", 1}}), F32({10, 7}, {1, 2, 1, 1})));
  EXPECT_TRUE(tensors_near(run1("GlobalAveragePool", {F64({1, 2, 6, -1, -2, -6}, {2, 1, 3})}),
                           F64({3, -3}, {2, 1, 1})));
  EXPECT_TRUE(tensors_near(run1("GlobalMaxPool", {F16({-1, -0.5, -2}, {1, 1, 3})}),
                           F16({-0.5}, {1, 1, 1})));
}

TEST(NnGlobalPool, Errors) {
  EXPECT_TRUE(fails_with(run_op("GlobalAveragePool", {F32({1, 2}, {1, 2})}),
                         StatusCode::kInvalidArgument,
                         {"GlobalAveragePool", "rank >= 3", "[1, 2]"}));
  EXPECT_TRUE(fails_with(run_op("GlobalMaxPool", {I64({1}, {1, 1, 1})}),
                         StatusCode::kInvalidArgument, {"GlobalMaxPool", "int64"}));
}

// ---- BatchNormalization ----

TEST(NnBatchNorm, Inference) {
  // Channel 0: [1, 3], mean 2, var 1, scale 1, bias 0 -> [-1, 1].
  // Channel 1: [2, 4], mean 3, var 4, scale 2, bias 1 -> [0, 2].
  const HostTensor x = F32({1, 3, 2, 4}, {1, 2, 1, 2});
  const HostTensor scale = F32({1, 2}, {2}), bias = F32({0, 1}, {2}), mean = F32({2, 3}, {2});
  EXPECT_TRUE(tensors_near(
      run1("BatchNormalization", {x, scale, bias, mean, F32({1, 4}, {2})}, {{"epsilon", 0.0f}}),
      F32({-1, 1, 0, 2}, {1, 2, 1, 2})));
  // epsilon is added to the variance: 0.75 + 0.25 = 1, 3.75 + 0.25 = 4.
  EXPECT_TRUE(
      tensors_near(run1("BatchNormalization", {x, scale, bias, mean, F32({0.75, 3.75}, {2})},
                        {{"epsilon", 0.25f}, {"momentum", 0.5f}}),
                   F32({-1, 1, 0, 2}, {1, 2, 1, 2})));
  // Default epsilon 1e-5.
  EXPECT_TRUE(tensors_near(run1("BatchNormalization", {x, scale, bias, mean, F32({1, 4}, {2})}),
                           F32({-1, 1, 0, 2}, {1, 2, 1, 2}), 1e-4, 1e-5));
}

TEST(NnBatchNorm, RankTwoMixedTypesFloat16) {
  // (N, C) input; float64 data with float32 parameters (T, T1, T2 may differ).
  auto y = run1("BatchNormalization",
                {F64({1, 2, 3, 4}, {2, 2}), F32({2, 1}, {2}), F32({0, 0}, {2}), F32({1, 1}, {2}),
                 F32({1, 1}, {2})},
                {{"epsilon", 0.0f}});
  EXPECT_TRUE(tensors_near(y, F64({0, 1, 4, 3}, {2, 2})));
  y = run1("BatchNormalization",
           {F16({1, 3}, {1, 1, 2}), F16({1}, {1}), F16({0.5}, {1}), F16({2}, {1}), F16({1}, {1})},
           {{"epsilon", 0.0f}});
  EXPECT_TRUE(tensors_near(y, F16({-0.5, 1.5}, {1, 1, 2}), 1e-3));
}

TEST(NnBatchNorm, TrainingModeUsesBatchStatistics) {
  // Channel 0 holds [1, 3] (mean 2, var 1), channel 1 holds [2, 4] (mean 3, var 1).
  const HostTensor x = F32({1, 3, 2, 4}, {1, 2, 1, 2});
  const HostTensor one = F32({1, 1}, {2}), zero = F32({0, 0}, {2});
  auto r = run_op("BatchNormalization", {x, one, zero, one, one},
                  {{"training_mode", 1}, {"epsilon", 0.0f}, {"momentum", 0.9f}}, 3);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], F32({-1, 1, -1, 1}, {1, 2, 1, 2})));
  EXPECT_TRUE(tensors_near((*r)[1], F32({1.1f, 1.2f}, {2})));  // 1*0.9 + [2, 3]*0.1
  EXPECT_TRUE(tensors_near((*r)[2], F32({1, 1}, {2})));
}

TEST(NnBatchNorm, Errors) {
  const HostTensor x = F32({1, 3, 2, 4}, {1, 2, 1, 2});
  const HostTensor p = F32({1, 1}, {2});
  EXPECT_TRUE(fails_with(run_op("BatchNormalization", {x, p, p, p, p}, {}, 3),
                         StatusCode::kInvalidArgument,
                         {"BatchNormalization", "3 outputs", "training_mode=1"}));
  EXPECT_TRUE(fails_with(run_op("BatchNormalization", {x, F32({1, 1, 1}, {3}), p, p, p}),
                         StatusCode::kInvalidArgument,
                         {"BatchNormalization", "input 1 (scale)", "[2]", "[3]"}));
  EXPECT_TRUE(fails_with(run_op("BatchNormalization", {x, p, p, p}), StatusCode::kInvalidArgument,
                         {"BatchNormalization", "expects 5 inputs, got 4"}));
}

// ---- InstanceNormalization ----

TEST(NnInstanceNorm, PerPlane) {
  // Plane (0, 0): [1, 3] -> mean 2, var 1 -> [-1, 1] * 2. Plane (0, 1): [4, 2] -> [1, -1] + 5.
  // Plane (1, 0): [0, 4] -> mean 2, var 4 -> [-1, 1] * 2. Plane (1, 1): [1, 3] -> [-1, 1] + 5.
  auto y = run1("InstanceNormalization",
                {F32({1, 3, 4, 2, 0, 4, 1, 3}, {2, 2, 2}), F32({2, 1}, {2}), F32({0, 5}, {2})},
                {{"epsilon", 0.0f}});
  EXPECT_TRUE(tensors_near(y, F32({-2, 2, 6, 4, -2, 2, 4, 6}, {2, 2, 2})));
  // A constant plane normalizes to 0 (epsilon keeps it finite), leaving the bias.
  y = run1("InstanceNormalization", {F32({7, 7}, {1, 1, 2}), F32({3}, {1}), F32({-1}, {1})});
  EXPECT_TRUE(tensors_near(y, F32({-1, -1}, {1, 1, 2})));
  // Default epsilon: variance 1 + 1e-5.
  y = run1("InstanceNormalization",
           {F64({1, 3, 1, 3}, {1, 1, 2, 2}), F64({1}, {1}), F64({0}, {1})});
  const double v = 1.0 / std::sqrt(1.0 + 1e-5);
  EXPECT_TRUE(tensors_near(y, F64({-v, v, -v, v}, {1, 1, 2, 2})));
}

TEST(NnInstanceNorm, Errors) {
  EXPECT_TRUE(fails_with(
      run_op("InstanceNormalization", {F32({}, {1, 2, 2}), F32({}, {3}), F32({}, {2})}),
      StatusCode::kInvalidArgument, {"InstanceNormalization", "input 1 (scale)", "[2]", "[3]"}));
  EXPECT_TRUE(
      fails_with(run_op("InstanceNormalization", {F32({}, {1, 2}), F32({}, {2}), F32({}, {2})}),
                 StatusCode::kInvalidArgument, {"InstanceNormalization", "rank >= 3"}));
}

// ---- LRN ----

TEST(NnLrn, Windows) {
  const HostTensor x = F32({1, 2, 3}, {1, 3, 1, 1});
  // size 3: channel windows {0,1}, {0,1,2}, {1,2}; alpha / size = 1, beta 1, bias 1.
  EXPECT_TRUE(
      tensors_near(run1("LRN", {x}, {{"size", 3}, {"alpha", 3.0f}, {"beta", 1.0f}, {"bias", 1.0f}}),
                   F32({1.0f / 6, 2.0f / 15, 3.0f / 14}, {1, 3, 1, 1})));
  // size 2: windows {c, c+1}: {0,1}, {1,2}, {2}; alpha / size = 1, beta 0.5, bias 0.
  EXPECT_TRUE(
      tensors_near(run1("LRN", {x}, {{"size", 2}, {"alpha", 2.0f}, {"beta", 0.5f}, {"bias", 0.0f}}),
                   F32({0.4472136f, 0.5547002f, 1}, {1, 3, 1, 1})));
  // Defaults: alpha 1e-4, beta 0.75, bias 1: 2 / (1 + 1e-4 * 4)^0.75.
  EXPECT_TRUE(tensors_near(run1("LRN", {F32({2}, {1, 1, 1, 1})}, {{"size", 1}}),
                           F32({1.9994002f}, {1, 1, 1, 1})));
}

TEST(NnLrn, Errors) {
  EXPECT_TRUE(fails_with(run_op("LRN", {F32({1}, {1, 1, 1, 1})}), StatusCode::kInvalidArgument,
                         {"LRN", "'size' is required"}));
  EXPECT_TRUE(fails_with(run_op("LRN", {F32({1}, {1, 1, 1, 1})}, {{"size", 0}}),
                         StatusCode::kInvalidArgument, {"LRN", "size must be >= 1, got 0"}));
}

// ---- LayerNormalization ----

TEST(NnLayerNorm, LastAxisWithStats) {
  // Row 0: [1, 3], mean 2, std 1. Row 1: [2, 6], mean 4, std 2. Both normalize to [-1, 1];
  // then * [1, 2] + [0, 1].
  auto r =
      run_op("LayerNormalization", {F32({1, 3, 2, 6}, {2, 2}), F32({1, 2}, {2}), F32({0, 1}, {2})},
             {{"epsilon", 0.0f}}, 3);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], F32({-1, 3, -1, 3}, {2, 2})));
  EXPECT_TRUE(tensors_near((*r)[1], F32({2, 4}, {2, 1})));
  EXPECT_TRUE(tensors_near((*r)[2], F32({1, 0.5}, {2, 1})));
}

TEST(NnLayerNorm, AxisZeroAndNegativeAxes) {
  // All four values: mean 4, var 5.
  auto r = run_op("LayerNormalization", {F32({1, 3, 5, 7}, {2, 2}), F32({1, 1, 1, 1}, {2, 2})},
                  {{"axis", 0}, {"epsilon", 0.0f}}, 3);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(
      tensors_near((*r)[0], F32({-1.3416408f, -0.4472136f, 0.4472136f, 1.3416408f}, {2, 2})));
  EXPECT_TRUE(tensors_near((*r)[1], F32({4}, {1, 1})));
  EXPECT_TRUE(tensors_near((*r)[2], F32({0.4472136f}, {1, 1})));
  // [2, 2, 2] with axis -2 (= 1): each batch of four normalized together; Scale [2] broadcasts
  // over the last axis.
  auto y = run1("LayerNormalization",
                {F32({1, 3, 5, 7, 0, 0, 2, 2}, {2, 2, 2}), F32({1, 2}, {2}), F32({0, 0}, {2})},
                {{"axis", -2}, {"epsilon", 0.0f}});
  EXPECT_TRUE(tensors_near(
      y, F32({-1.3416408f, -0.8944272f, 0.4472136f, 2.6832816f, -1, -2, 1, 2}, {2, 2, 2})));
}

TEST(NnLayerNorm, DtypesAndDefaultEpsilon) {
  // float64 data: Mean and InvStdDev have the stash type (float32 by default).
  auto r = run_op("LayerNormalization", {F64({1, 3}, {1, 2}), F64({1, 1}, {2})}, {}, 3);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const double v = 1.0 / std::sqrt(1.0 + 1e-5);
  EXPECT_TRUE(tensors_near((*r)[0], F64({-v, v}, {1, 2})));
  EXPECT_TRUE(tensors_near((*r)[1], F32({2}, {1, 1})));
  EXPECT_TRUE(tensors_near((*r)[2], F32({static_cast<float>(v)}, {1, 1})));
  r = run_op("LayerNormalization", {F32({1, 3}, {1, 2}), F32({1, 1}, {2})}, {{"stash_type", 11}},
             2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[1].dtype(), DType::kFloat64);
  auto y = run1("LayerNormalization", {F16({1, 3}, {1, 2}), F16({2, 2}, {2})}, {{"epsilon", 0.0f}});
  EXPECT_TRUE(tensors_near(y, F16({-2, 2}, {1, 2}), 1e-3));
}

TEST(NnLayerNorm, Errors) {
  const HostTensor x = F32({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(fails_with(run_op("LayerNormalization", {x, F32({1, 1}, {2})}, {{"axis", 2}}),
                         StatusCode::kInvalidArgument,
                         {"LayerNormalization", "axis 2 is out of range for rank 2"}));
  EXPECT_TRUE(fails_with(run_op("LayerNormalization", {x, F32({1, 1, 1}, {3})}),
                         StatusCode::kInvalidArgument,
                         {"LayerNormalization", "Scale of shape [3]", "[2, 2]"}));
  EXPECT_TRUE(fails_with(run_op("LayerNormalization", {x, F32({1, 1}, {2})}, {{"stash_type", 7}}),
                         StatusCode::kInvalidArgument, {"LayerNormalization", "stash_type", "7"}));
}

// ---- Softmax, LogSoftmax, Hardmax ----

TEST(NnSoftmax, DefaultAxis) {
  EXPECT_TRUE(tensors_near(run1("Softmax", {F32({1, 2, 3}, {1, 3})}),
                           F32({0.0900306f, 0.2447285f, 0.6652410f}, {1, 3})));
  // Large inputs are stable (max subtracted).
  EXPECT_TRUE(
      tensors_near(run1("Softmax", {F32({1000, 1001}, {2})}), F32({0.2689414f, 0.7310586f}, {2})));
}

TEST(NnSoftmax, ExplicitAndNegativeAxes) {
  // Columns [0, ln 3] and [0, 0].
  const HostTensor x = F32({0, 0, 1.0986123f, 0}, {2, 2});
  const HostTensor expected = F32({0.25, 0.5, 0.75, 0.5}, {2, 2});
  EXPECT_TRUE(tensors_near(run1("Softmax", {x}, {{"axis", 0}}), expected));
  EXPECT_TRUE(tensors_near(run1("Softmax", {x}, {{"axis", -2}}), expected));
  // Middle axis of [1, 2, 2]: pairs (x[0,0,j], x[0,1,j]).
  EXPECT_TRUE(tensors_near(run1("Softmax", {F64({0, 5, 1.0986123, 5}, {1, 2, 2})}, {{"axis", 1}}),
                           F64({0.25, 0.5, 0.75, 0.5}, {1, 2, 2}), 1e-6));
  EXPECT_TRUE(tensors_near(run1("Softmax", {F16({0, 0}, {2})}), F16({0.5, 0.5}, {2}), 1e-3));
}

TEST(NnLogSoftmax, Values) {
  EXPECT_TRUE(tensors_near(run1("LogSoftmax", {F32({1, 2, 3}, {1, 3})}),
                           F32({-2.4076059f, -1.4076059f, -0.4076059f}, {1, 3})));
  EXPECT_TRUE(tensors_near(run1("LogSoftmax", {F32({1000, 1000}, {2, 1})}, {{"axis", 0}}),
                           F32({-0.6931472f, -0.6931472f}, {2, 1})));
  // float16: computed in float, stored rounded (generated on GPU devices too).
  EXPECT_TRUE(tensors_near(run1("LogSoftmax", {F16({1, 2, 3}, {1, 3})}),
                           F16({-2.4076059f, -1.4076059f, -0.4076059f}, {1, 3}), 2e-3));
}

TEST(NnHardmax, FirstMaximum) {
  const HostTensor x = F32({1, 3, 3, 5, 2, 0}, {2, 3});
  EXPECT_TRUE(tensors_near(run1("Hardmax", {x}), F32({0, 1, 0, 1, 0, 0}, {2, 3})));
  EXPECT_TRUE(tensors_near(run1("Hardmax", {x}, {{"axis", 0}}), F32({0, 1, 1, 1, 0, 0}, {2, 3})));
  EXPECT_TRUE(tensors_near(run1("Hardmax", {F64({-1, -1}, {2})}), F64({1, 0}, {2})));
  EXPECT_TRUE(tensors_near(run1("Hardmax", {F16({1, 3, 3, 2}, {2, 2})}), F16({0, 1, 1, 0}, {2, 2})));
}

TEST(NnSoftmax, Errors) {
  EXPECT_TRUE(fails_with(run_op("Softmax", {F32({1, 2}, {1, 2})}, {{"axis", 2}}),
                         StatusCode::kInvalidArgument,
                         {"Softmax", "axis 2 is out of range for rank 2", "test_Softmax"}));
  EXPECT_TRUE(fails_with(run_op("Hardmax", {I64({1, 2}, {2})}), StatusCode::kInvalidArgument,
                         {"Hardmax", "int64"}));
  EXPECT_TRUE(fails_with(run_op("LogSoftmax", {F32({1}, {1})}, {{"axes", 0}}),
                         StatusCode::kInvalidArgument, {"LogSoftmax", "unknown attribute 'axes'"}));
}

// ---- Dropout ----

TEST(NnDropout, InferenceIsIdentity) {
  const HostTensor x = F32({1, -2, 3, 4}, {2, 2});
  EXPECT_TRUE(tensors_near(run1("Dropout", {x}), x));
  auto r = run_op("Dropout", {x, F32({0.5}, {}), Bool({false}, {})}, {}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], x));
  EXPECT_TRUE(tensors_near((*r)[1], Bool({true, true, true, true}, {2, 2})));
  // Training with ratio 0 keeps everything.
  r = run_op("Dropout", {x, F32({0}, {}), Bool({true}, {})}, {}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], x));
  EXPECT_TRUE(tensors_near((*r)[1], Bool({true, true, true, true}, {2, 2})));
  EXPECT_TRUE(tensors_near(run1("Dropout", {F16({1.5, -2}, {2})}), F16({1.5, -2}, {2})));
}

TEST(NnDropout, TrainingIsSeededLikeNumPy) {
  // NumPy: RandomState(0).random_sample(4) = [0.5488, 0.7152, 0.6028, 0.5449]; with ratio 0.6
  // elements 1 and 2 are kept and scaled by 1 / 0.4.
  auto r = run_op("Dropout", {F32({1, 2, 3, 4}, {4}), F32({0.6f}, {}), Bool({true}, {})},
                  {{"seed", 0}}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], F32({0, 5, 7.5, 0}, {4})));
  EXPECT_TRUE(tensors_near((*r)[1], Bool({false, true, true, false}, {4})));
  // Default ratio 0.5: all four draws are above it.
  auto y = run1("Dropout", {F64({1, 2, 3, 4}, {4}), HostTensor(), Bool({true}, {})}, {{"seed", 0}});
  EXPECT_TRUE(tensors_near(y, F64({2, 4, 6, 8}, {4})));
}

TEST(NnDropout, Errors) {
  const HostTensor x = F32({1, 2}, {2});
  EXPECT_TRUE(fails_with(run_op("Dropout", {x, F32({1}, {}), Bool({true}, {})}),
                         StatusCode::kInvalidArgument,
                         {"Dropout", "ratio must be in [0, 1)", "1"}));
  EXPECT_TRUE(fails_with(run_op("Dropout", {x, F32({0.1f, 0.2f}, {2})}),
                         StatusCode::kInvalidArgument,
                         {"Dropout", "ratio must be a scalar", "[2]"}));
  EXPECT_TRUE(fails_with(run_op("Dropout", {x, F32({0.1f}, {}), I64({1}, {})}),
                         StatusCode::kInvalidArgument,
                         {"Dropout", "training_mode", "int64", "bool"}));
  EXPECT_TRUE(fails_with(run_op("Dropout", {x}, {{"ratio", 0.5f}}), StatusCode::kInvalidArgument,
                         {"Dropout", "unknown attribute 'ratio'"}));
}

// ---- inference with unknown dims ----

Result<std::vector<TensorType>> infer(const std::string& op, std::vector<TensorType> inputs,
                                      AttributeMap attrs = {}, int num_outputs = 1) {
  Node n;
  n.name = "n";
  n.op = op;
  n.attrs = std::move(attrs);
  for (size_t i = 0; i < inputs.size(); ++i) n.inputs.push_back("x" + std::to_string(i));
  for (int i = 0; i < num_outputs; ++i) n.outputs.push_back("y" + std::to_string(i));
  InferenceContext ctx(n, std::move(inputs), {});
  TD_RETURN_IF_ERROR(infer_node(OpRegistry::global(), ctx));
  return ctx.output_types();
}

TEST(NnInference, UnknownDimsPropagate) {
  auto r =
      infer("Conv", {{DType::kFloat32, {-1, 3, -1, 8}}, {DType::kFloat32, {4, 3, 3, 3}}},
            {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"strides", std::vector<int64_t>{2, 2}}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0], (TensorType{DType::kFloat32, {-1, 4, -1, 4}}));
  r = infer("MatMul", {{DType::kFloat32, {-1, 5, 3}}, {DType::kFloat32, {3, -1}}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0], (TensorType{DType::kFloat32, {-1, 5, -1}}));
  r = infer("MaxPool", {{DType::kFloat16, {2, 3, -1, 9}}},
            {{"kernel_shape", std::vector<int64_t>{3, 3}},
             {"ceil_mode", 1},
             {"strides", std::vector<int64_t>{2, 2}}},
            2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0], (TensorType{DType::kFloat16, {2, 3, -1, 4}}));
  EXPECT_EQ((*r)[1], (TensorType{DType::kInt64, {2, 3, -1, 4}}));
  r = infer("ConvTranspose", {{DType::kFloat32, {1, 2, -1}}, {DType::kFloat32, {2, 3, 3}}},
            {{"group", 2}, {"output_shape", std::vector<int64_t>{10}}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0], (TensorType{DType::kFloat32, {1, 6, 10}}));
  r = infer("Gemm",
            {{DType::kFloat64, {-1, 4}}, {DType::kFloat64, {4, 7}}, {DType::kFloat64, {7}}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0], (TensorType{DType::kFloat64, {-1, 7}}));
  r = infer("LayerNormalization", {{DType::kFloat32, {-1, 6, 8}}, {DType::kFloat32, {8}}},
            {{"axis", -1}}, 3);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[1], (TensorType{DType::kFloat32, {-1, 6, 1}}));
}

}  // namespace
}  // namespace tensord::testing
