// The forms and ops of opsets 18 to 21 against values worked out from the ONNX operator
// specification (the upstream node tests run in tests/onnx/test_opset18.py): Reduce* with axes
// as input 1 and noop_with_empty_axes, ReduceMax/ReduceMin on bool, Split num_outputs, Pad wrap,
// ScatterND/ScatterElements max/min, Gelu, GroupNormalization, Col2Im, CenterCropPad,
// AffineGrid and DeformConv; and the refusals of bad input.
#include <cmath>

#include "kernels/op_test_util.h"

namespace tensord::testing {
namespace {

// 1..12, shape [3, 2, 2].
const HostTensor kB = F32({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 2, 2});

TEST(Opset18Reduce, AxesInputOnEveryReduction) {
  EXPECT_TRUE(tensors_near(run1("ReduceMean", {kB, I64({1}, {1})}),
                           F32({2, 3, 6, 7, 10, 11}, {3, 1, 2})));
  EXPECT_TRUE(tensors_near(run1("ReduceMax", {kB, I64({0, -1}, {2})}, {{"keepdims", int64_t{0}}}),
                           F32({10, 12}, {2})));
  EXPECT_TRUE(tensors_near(run1("ReduceL1", {kB, I64({}, {0})}, {{"keepdims", int64_t{0}}}),
                           F32({78}, {})));
  // Empty axes with noop_with_empty_axes: the input unchanged.
  EXPECT_TRUE(tensors_near(run1("ReduceProd", {kB, I64({}, {0})}, {{"noop_with_empty_axes", int64_t{1}}}),
                           kB));
  EXPECT_TRUE(tensors_near(run1("ReduceMin", {kB}, {{"noop_with_empty_axes", int64_t{1}}}), kB));
}

TEST(Opset18Reduce, BoolMaxMinAreAnyAll) {
  const HostTensor b = Bool({true, false, false, true, true, true}, {2, 3});
  EXPECT_TRUE(tensors_near(run1("ReduceMax", {b}, {{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}}),
                           Bool({true, true}, {2})));
  EXPECT_TRUE(tensors_near(run1("ReduceMin", {b}, {{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}}),
                           Bool({false, true}, {2})));
  EXPECT_TRUE(fails(run_op("ReduceMean", {b}), {"ReduceMean", "must be numeric, got bool"}));
}

TEST(Opset18Split, NumOutputsLastChunkSmaller) {
  auto r = run_op("Split", {F32({1, 2, 3, 4, 5, 6, 7}, {7})}, {{"num_outputs", int64_t{3}}}, 3);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], F32({1, 2, 3}, {3})));
  EXPECT_TRUE(tensors_near((*r)[1], F32({4, 5, 6}, {3})));
  EXPECT_TRUE(tensors_near((*r)[2], F32({7}, {1})));
}

TEST(Opset18Pad, WrapAndAxes) {
  const HostTensor x = F32({1, 2, 3, 4, 5, 6}, {2, 3});
  // numpy.pad(x, ((0, 0), (2, 1)), 'wrap')
  EXPECT_TRUE(tensors_near(run1("Pad", {x, I64({2, 1}, {2}), HostTensor(), I64({1}, {1})},
                                {{"mode", std::string("wrap")}}),
                           F32({2, 3, 1, 2, 3, 1, 5, 6, 4, 5, 6, 4}, {2, 6})));
  EXPECT_TRUE(fails(run_op("Pad", {x, I64({1, 1}, {2}), HostTensor(), I64({2}, {1})}),
                    {"Pad", "out of range"}));
}

TEST(Opset18Scatter, MaxMin) {
  const HostTensor d = F32({1, 5, 3}, {3});
  EXPECT_TRUE(tensors_near(run1("ScatterElements", {d, I64({0, 1, 0}, {3}), F32({4, 2, 0}, {3})},
                                {{"reduction", std::string("max")}}),
                           F32({4, 5, 3}, {3})));
  EXPECT_TRUE(tensors_near(run1("ScatterND", {d, I64({2, 0, 2}, {3, 1}), F32({7, 0, -1}, {3})},
                                {{"reduction", std::string("min")}}),
                           F32({0, 5, -1}, {3})));
  EXPECT_TRUE(fails(run_op("ScatterND", {d, I64({3}, {1, 1}), F32({7}, {1})},
                           {{"reduction", std::string("max")}}),
                    {"ScatterND", "index 3", "size 3"}));
}

TEST(Opset18Gelu, ExactAndTanh) {
  const HostTensor x = F32({-1, 0, 1, 2}, {4});
  std::vector<float> exact, tanh_form;
  for (float v : {-1.f, 0.f, 1.f, 2.f}) {
    exact.push_back(static_cast<float>(0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))));
    tanh_form.push_back(static_cast<float>(
        0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))));
  }
  EXPECT_TRUE(tensors_near(run1("Gelu", {x}), F32(exact, {4})));
  EXPECT_TRUE(tensors_near(run1("Gelu", {x}, {{"approximate", std::string("tanh")}}), F32(tanh_form, {4})));
  EXPECT_TRUE(fails(run_op("Gelu", {I64({1}, {1})}), {"Gelu", "expected a float type"}));
}

TEST(Opset18GroupNorm, PerChannelAndPerGroup) {
  // Two groups of two channels, one value each: each group normalises to [-1, 1].
  const HostTensor x = F32({1, 3, 10, 30}, {1, 4, 1});
  const float k = 1.0f / std::sqrt(1.0f + 1e-5f), k2 = 1.0f / std::sqrt(100.0f + 1e-5f);
  EXPECT_TRUE(tensors_near(
      run1("GroupNormalization", {x, F32({1, 2, 3, 4}, {4}), F32({0, 0, 0, 1}, {4})},
           {{"num_groups", int64_t{2}}}),
      F32({-k, 2 * k, -30 * k2, 40 * k2 + 1}, {1, 4, 1})));
  EXPECT_TRUE(tensors_near(
      run1("GroupNormalization", {x, F32({2, 3}, {2}), F32({0, 1}, {2})},
           {{"num_groups", int64_t{2}}, {"per_group_affine", int64_t{1}}}),
      F32({-2 * k, 2 * k, -30 * k2 + 1, 30 * k2 + 1}, {1, 4, 1})));
  EXPECT_TRUE(fails(run_op("GroupNormalization", {x, F32({1, 2, 3}, {3}), F32({0, 0, 0}, {3})},
                           {{"num_groups", int64_t{3}}}),
                    {"GroupNormalization", "num_groups 3 does not divide the 4 channels"}));
}

TEST(Opset18Col2Im, SumsOverlaps) {
  // One channel, 1-D image of 3 with blocks of 2: columns [a0 a1] at 0 and [b0 b1] at 1.
  const HostTensor cols = F32({1, 2, 10, 20}, {1, 2, 2});  // rows: tap 0 (1, 2), tap 1 (10, 20)
  EXPECT_TRUE(tensors_near(run1("Col2Im", {cols, I64({3}, {1}), I64({2}, {1})}),
                           F32({1, 12, 20}, {1, 1, 3})));
  EXPECT_TRUE(fails(run_op("Col2Im", {cols, I64({5}, {1}), I64({2}, {1})}),
                    {"Col2Im", "2 blocks", "give 4"}));
  EXPECT_TRUE(fails(run_op("Col2Im", {cols, I64({3}, {1}), I64({0}, {1})}),
                    {"Col2Im", "block_shape [0] must be >= 1"}));
}

TEST(Opset18CenterCropPad, CropAndPad) {
  const HostTensor x = F32({1, 2, 3, 4, 5}, {5});
  EXPECT_TRUE(tensors_near(run1("CenterCropPad", {x, I64({2}, {1})}), F32({2, 3}, {2})));
  EXPECT_TRUE(tensors_near(run1("CenterCropPad", {x, I64({8}, {1})}),
                           F32({0, 1, 2, 3, 4, 5, 0, 0}, {8})));
}

TEST(Opset18AffineGrid, IdentityTheta) {
  const HostTensor theta = F32({1, 0, 0, 0, 1, 0}, {1, 2, 3});
  // align_corners=0, H=1, W=2: x in {-0.5, 0.5}, y = 0.
  EXPECT_TRUE(tensors_near(run1("AffineGrid", {theta, I64({1, 1, 1, 2}, {4})}),
                           F32({-0.5f, 0, 0.5f, 0}, {1, 1, 2, 2})));
  EXPECT_TRUE(tensors_near(run1("AffineGrid", {theta, I64({1, 1, 1, 2}, {4})},
                                {{"align_corners", int64_t{1}}}),
                           F32({-1, -1, 1, -1}, {1, 1, 2, 2})));
}

TEST(Opset18DeformConv, ZeroOffsetIsConv) {
  // With zero offsets DeformConv is a plain convolution.
  const HostTensor x = F32({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  const HostTensor w = F32({1, 0, 0, 1}, {1, 1, 2, 2});
  const HostTensor off = F32(std::vector<float>(8 * 4, 0.f), {1, 8, 2, 2});
  EXPECT_TRUE(tensors_near(run1("DeformConv", {x, w, off}, {{"kernel_shape", std::vector<int64_t>{2, 2}}}),
                           F32({6, 8, 12, 14}, {1, 1, 2, 2})));
  // An offset of +1 row on every tap reads the next row (zeros past the edge).
  std::vector<float> down(8 * 4, 0.f);
  for (int tap = 0; tap < 4; ++tap)
    for (int p = 0; p < 4; ++p) down[static_cast<size_t>(2 * tap * 4 + p)] = 1.f;
  EXPECT_TRUE(tensors_near(run1("DeformConv", {x, w, F32(down, {1, 8, 2, 2})}),
                           F32({12, 14, 7, 8}, {1, 1, 2, 2})));
}

}  // namespace
}  // namespace tensord::testing
