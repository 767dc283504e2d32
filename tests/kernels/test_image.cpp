// Reference kernels and schemas of the image ops (Resize, GridSample, RoiAlign, MaxRoiPool,
// MaxUnpool, NonMaxSuppression), against hand-computed values. Comments give the source
// coordinates and weights each expected number comes from.
#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>

#include "core/op_registry.h"
#include "kernels/op_test_util.h"

namespace tensord::testing {
namespace {

const HostTensor kNone;  // an omitted optional input

// Resize with scales (input 2).
HostTensor resize_scales(const HostTensor& x, std::vector<float> scales, AttributeMap attrs) {
  const int64_t n = static_cast<int64_t>(scales.size());
  return run1("Resize", {x, kNone, F32(scales, {n})}, std::move(attrs));
}
// Resize with sizes (input 3).
HostTensor resize_sizes(const HostTensor& x, std::vector<int64_t> sizes, AttributeMap attrs) {
  const int64_t n = static_cast<int64_t>(sizes.size());
  return run1("Resize", {x, kNone, kNone, I64(sizes, {n})}, std::move(attrs));
}

// ---- Resize: nearest ----

TEST(ImageResize, NearestHalfPixelDefaults) {
  // half_pixel, round_prefer_floor, scale 2: x_ori = (x + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75,
  // 1.25 -> 0, 0, 1, 1 (-0.25 rounds up to 0; 0.75 up to 1).
  auto y = resize_scales(F32({1, 2, 3, 4}, {1, 1, 2, 2}), {1, 1, 2, 2}, {});
  EXPECT_TRUE(tensors_near(y, F32({1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}, {1, 1, 4, 4})));
}

TEST(ImageResize, NearestModes) {
  const HostTensor x = F32({1, 2, 3}, {3});
  // asymmetric, scale 2: x_ori = 0, 0.5, 1, 1.5, 2, 2.5.
  AttributeMap a{{"coordinate_transformation_mode", "asymmetric"},
                 {"nearest_mode", "round_prefer_floor"}};
  EXPECT_TRUE(tensors_near(resize_scales(x, {2}, a), F32({1, 1, 2, 2, 3, 3}, {6})));
  a["nearest_mode"] = "round_prefer_ceil";  // 2.5 -> 3, clamped to the edge (2)
  EXPECT_TRUE(tensors_near(resize_scales(x, {2}, a), F32({1, 2, 2, 3, 3, 3}, {6})));
  a["nearest_mode"] = "floor";
  EXPECT_TRUE(tensors_near(resize_scales(x, {2}, a), F32({1, 1, 2, 2, 3, 3}, {6})));
  a["nearest_mode"] = "ceil";
  EXPECT_TRUE(tensors_near(resize_scales(x, {2}, a), F32({1, 2, 2, 3, 3, 3}, {6})));
  // floor with scale 3 (Upsample's nearest): x / 3 = 0, .33, .67, 1, 1.33, 1.67.
  a["nearest_mode"] = "floor";
  EXPECT_TRUE(tensors_near(resize_scales(F32({1, 2}, {2}), {3}, a), F32({1, 1, 1, 2, 2, 2}, {6})));
  // align_corners to 3 values from 2: x_ori = 0, 0.5, 1 -> round_prefer_floor 0, 0, 1.
  EXPECT_TRUE(tensors_near(
      resize_sizes(F32({1, 2}, {2}), {3}, {{"coordinate_transformation_mode", "align_corners"}}),
      F32({1, 1, 2}, {3})));
}

TEST(ImageResize, NearestAnyDtype) {
  AttributeMap a{{"coordinate_transformation_mode", "asymmetric"}, {"nearest_mode", "floor"}};
  EXPECT_TRUE(tensors_near(resize_scales(Bool({true, false}, {2}), {2}, a),
                           Bool({true, true, false, false}, {4})));
  EXPECT_TRUE(
      tensors_near(resize_scales(U8({7, 250}, {1, 2}), {1, 2}, a), U8({7, 7, 250, 250}, {1, 4})));
  // int64 values beyond 2^53 survive exactly.
  EXPECT_TRUE(tensors_near(resize_sizes(I64({(int64_t{1} << 60) + 1}, {1}), {2}, a),
                           I64({(int64_t{1} << 60) + 1, (int64_t{1} << 60) + 1}, {2})));
}

// ---- Resize: linear ----

TEST(ImageResize, LinearCoordinateModes) {
  const HostTensor x = F32({1, 2, 3, 4}, {4});
  AttributeMap lin{{"mode", "linear"}};
  // half_pixel to 2: x_ori = (x + 0.5) * 2 - 0.5 = 0.5, 2.5.
  EXPECT_TRUE(tensors_near(resize_sizes(x, {2}, lin), F32({1.5f, 3.5f}, {2})));
  // To 1: half_pixel samples 1.5 (value 2.5); pytorch_half_pixel uses -0.5 (edge value 1).
  EXPECT_TRUE(tensors_near(resize_sizes(x, {1}, lin), F32({2.5f}, {1})));
  AttributeMap pt = lin;
  pt["coordinate_transformation_mode"] = "pytorch_half_pixel";
  EXPECT_TRUE(tensors_near(resize_sizes(x, {1}, pt), F32({1}, {1})));
  // align_corners from 2 to 3: 0, 0.5, 1.
  AttributeMap ac = lin;
  ac["coordinate_transformation_mode"] = "align_corners";
  EXPECT_TRUE(tensors_near(resize_sizes(F32({1, 2}, {2}), {3}, ac), F32({1, 1.5f, 2}, {3})));
  // align_corners with scales uses scale * in (not the floored size): 4 * 0.6 = 2.4 wide,
  // x_ori = x * 3 / 1.4 -> 0, 2.142857 -> 1, 3.142857.
  EXPECT_TRUE(tensors_near(resize_scales(x, {0.6f}, ac), F32({1, 3.142857142857143f}, {2})));
  // tf_half_pixel_for_nn (opset 11): x_ori = (x + 0.5) / 2 = 0.25, 0.75 on [1, 2] -> 1.25, 1.75.
  AttributeMap tf = lin;
  tf["coordinate_transformation_mode"] = "tf_half_pixel_for_nn";
  EXPECT_TRUE(
      tensors_near(resize_scales(F32({1, 2}, {2}), {2}, tf), F32({1.25f, 1.75f, 2, 2}, {4})));
}

TEST(ImageResize, LinearTwoAxesAsymmetric) {
  // x_ori = x / 2 on both axes: 0, 0.5, 1, 1.5 (1.5 mixes pixel 1 with itself at the edge).
  auto y = resize_scales(F32({1, 2, 3, 4}, {2, 2}), {2, 2},
                         {{"mode", "linear"}, {"coordinate_transformation_mode", "asymmetric"}});
  EXPECT_TRUE(
      tensors_near(y, F32({1, 1.5f, 2, 2, 2, 2.5f, 3, 3, 3, 3.5f, 4, 4, 3, 3.5f, 4, 4}, {4, 4})));
}

TEST(ImageResize, LinearIntegerAndFloat16AndDouble) {
  // int32 rounds to nearest: 0, 10/3, 20/3, 10 -> 0, 3, 7, 10.
  AttributeMap ac{{"mode", "linear"}, {"coordinate_transformation_mode", "align_corners"}};
  EXPECT_TRUE(tensors_near(resize_sizes(I32({0, 10}, {2}), {4}, ac), I32({0, 3, 7, 10}, {4})));
  EXPECT_TRUE(tensors_near(resize_sizes(F16({1, 2}, {2}), {3}, ac), F16({1, 1.5f, 2}, {3})));
  EXPECT_TRUE(tensors_near(resize_sizes(F64({1, 2}, {2}), {3}, ac), F64({1, 1.5, 2}, {3})));
}

TEST(ImageResize, Opset11EmptyScalesWithSizes) {
  // Exporters for opset 11 pass an empty roi and scales next to sizes.
  auto y = run1("Resize", {F32({1, 2, 3, 4}, {4}), F32({}, {0}), F32({}, {0}), I64({2}, {1})},
                {{"mode", "linear"}});
  EXPECT_TRUE(tensors_near(y, F32({1.5f, 3.5f}, {2})));
}

// ---- Resize: cubic ----
// asymmetric, scale 2 on [1, 2, 3, 4]: x_ori = 0, .5, 1, ..., 3.5. At ratio 0.5 with
// A = -0.75 the weights are -0.09375, 0.59375, 0.59375, -0.09375 on pixels left-1 .. left+2
// (edge-padded); at integer positions the weights are 0, 0, 1, 0.
//   0.5: taps 1,1,2,3 -> 1.40625   1.5: 1,2,3,4 -> 2.5   2.5: 2,3,4,4 -> 3.59375
//   3.5: 3,4,4,4 -> 4.09375

TEST(ImageResize, Cubic) {
  const HostTensor x = F32({1, 2, 3, 4}, {4});
  AttributeMap a{{"mode", "cubic"}, {"coordinate_transformation_mode", "asymmetric"}};
  EXPECT_TRUE(tensors_near(resize_scales(x, {2}, a),
                           F32({1, 1.40625f, 2, 2.5f, 3, 3.59375f, 4, 4.09375f}, {8})));
  // exclude_outside renormalises the weights of pixels inside: 0.5 -> 1.5/1.09375,
  // 2.5 -> 3.96875/1.09375, 3.5 -> (-0.28125 + 2.375)/0.5.
  a["exclude_outside"] = 1;
  EXPECT_TRUE(tensors_near(
      resize_scales(x, {2}, a),
      F32({1, 1.3714285714285714f, 2, 2.5f, 3, 3.6285714285714286f, 4, 4.1875f}, {8})));
  // cubic_coeff_a -0.5: weights -0.0625, 0.5625, 0.5625, -0.0625.
  a["exclude_outside"] = 0;
  a["cubic_coeff_a"] = -0.5f;
  auto y = resize_scales(x, {2}, a);
  EXPECT_TRUE(tensors_near(y, F32({1, 1.4375f, 2, 2.5f, 3, 3.5625f, 4, 4.0625f}, {8})));
}

// ---- Resize: tf_crop_and_resize ----

TEST(ImageResize, TfCropAndResize) {
  AttributeMap a{{"mode", "linear"},
                 {"coordinate_transformation_mode", "tf_crop_and_resize"},
                 {"extrapolation_value", 10.f}};
  const HostTensor x = F32({1, 2, 3, 4, 5}, {5});
  // roi [0.25, 0.75] to 3: x_ori = x * 0.5 * 4 / 2 + 1 = 1, 2, 3.
  EXPECT_TRUE(tensors_near(run1("Resize", {x, F32({0.25f, 0.75f}, {2}), kNone, I64({3}, {1})}, a),
                           F32({2, 3, 4}, {3})));
  // roi [0.5, 1.5]: x_ori = 2, 4, 6; 6 is outside -> extrapolation_value.
  EXPECT_TRUE(tensors_near(run1("Resize", {x, F32({0.5f, 1.5f}, {2}), kNone, I64({3}, {1})}, a),
                           F32({3, 5, 10}, {3})));
  // 2-D: axis 1 samples 0 and 2 of a 2-wide input; 2 is outside, whatever axis 0 does.
  auto y = run1("Resize",
                {F32({1, 2, 3, 4}, {2, 2}), F32({0, 0, 1, 2}, {4}), kNone, I64({2, 2}, {2})}, a);
  EXPECT_TRUE(tensors_near(y, F32({1, 10, 3, 10}, {2, 2})));
  // Nearest mode extrapolates too.
  a["mode"] = "nearest";
  EXPECT_TRUE(tensors_near(run1("Resize", {x, F32({0.5f, 1.5f}, {2}), kNone, I64({3}, {1})}, a),
                           F32({3, 5, 10}, {3})));
}

TEST(ImageResize, InferenceShapes) {
  Node n;
  n.name = "r";
  n.op = "Resize";
  n.inputs = {"x", "", "scales"};
  n.outputs = {"y"};
  const HostTensor scales = F32({1, 1, 1.5f, 0.6f}, {4});
  const TensorView sv = scales.view();
  InferenceContext ctx(n, {{DType::kFloat32, {1, 3, 5, 5}}, {}, {DType::kFloat32, {4}}},
                       {nullptr, nullptr, &sv});
  ASSERT_TRUE(infer_node(OpRegistry::global(), ctx).ok());
  EXPECT_EQ(ctx.output_types()[0], (TensorType{DType::kFloat32, {1, 3, 7, 3}}));
  // Unknown scales: every dim unknown, rank kept.
  InferenceContext ctx2(n, {{DType::kFloat32, {1, 3, 5, 5}}, {}, {DType::kFloat32, {4}}}, {});
  ASSERT_TRUE(infer_node(OpRegistry::global(), ctx2).ok());
  EXPECT_EQ(ctx2.output_types()[0], (TensorType{DType::kFloat32, {-1, -1, -1, -1}}));
}

TEST(ImageResize, BadInputs) {
  const HostTensor x = F32({1, 2, 3, 4}, {4});
  EXPECT_TRUE(fails_with(run_op("Resize", {x, kNone, F32({2}, {1}), I64({2}, {1})}),
                         StatusCode::kInvalidArgument, {"Resize:", "only one of scales"}));
  EXPECT_TRUE(fails_with(run_op("Resize", {x}), StatusCode::kInvalidArgument,
                         {"Resize:", "one of scales (input 2) and sizes (input 3) must be given"}));
  EXPECT_TRUE(fails_with(run_op("Resize", {x, kNone, F32({2, 2}, {2})}),
                         StatusCode::kInvalidArgument, {"Resize:", "scales", "[2]", "rank 1"}));
  EXPECT_TRUE(fails_with(run_op("Resize", {x, kNone, F32({-2}, {1})}), StatusCode::kInvalidArgument,
                         {"Resize:", "scales must be > 0", "-2"}));
  EXPECT_TRUE(fails_with(run_op("Resize", {x, kNone, kNone, I32({2}, {1})}),
                         StatusCode::kInvalidArgument, {"Resize:", "sizes", "int32"}));
  EXPECT_TRUE(fails_with(run_op("Resize", {x, kNone, F32({2}, {1})}, {{"mode", "area"}}),
                         StatusCode::kInvalidArgument, {"Resize:", "mode", "'area'"}));
  EXPECT_TRUE(fails_with(run_op("Resize", {x, kNone, F32({2}, {1})},
                                {{"coordinate_transformation_mode", "tf_crop_and_resize"}}),
                         StatusCode::kInvalidArgument, {"Resize:", "needs the roi input"}));
  EXPECT_TRUE(fails_with(run_op("Resize", {x, F32({0, 1, 2}, {3}), F32({2}, {1})},
                                {{"coordinate_transformation_mode", "tf_crop_and_resize"}}),
                         StatusCode::kInvalidArgument, {"Resize:", "roi", "2 values", "[3]"}));
  EXPECT_TRUE(
      fails_with(run_op("Resize", {Bool({true}, {1}), kNone, F32({2}, {1})}, {{"mode", "linear"}}),
                 StatusCode::kInvalidArgument, {"Resize:", "'linear'", "bool"}));
  EXPECT_TRUE(fails_with(run_op("Resize", {F32({}, {0}), kNone, kNone, I64({2}, {1})}),
                         StatusCode::kInvalidArgument, {"Resize:", "axis 0 of size 0"}));
  EXPECT_TRUE(fails_with(run_op("Resize", {x, kNone, F32({2}, {1})}, {{"exclude_outside", 2}}),
                         StatusCode::kInvalidArgument, {"Resize:", "exclude_outside", "2"}));
}

// ---- GridSample ----
// X = [[1, 2], [3, 4]]. Without align_corners a normalized n maps to ((n + 1) * 2 - 1) / 2 =
// n + 0.5; with align_corners to (n + 1) / 2.

const HostTensor kGridX = F32({1, 2, 3, 4}, {1, 1, 2, 2});

HostTensor grid_sample(const std::vector<float>& xy, AttributeMap attrs) {
  const int64_t points = static_cast<int64_t>(xy.size() / 2);
  return run1("GridSample", {kGridX, F32(xy, {1, 1, points, 2})}, std::move(attrs));
}

TEST(ImageGridSample, Bilinear) {
  // (0, 0) -> (0.5, 0.5): the mean 2.5. (-1, -1) -> (-0.5, -0.5): zeros padding keeps a
  // quarter of pixel (0, 0); border clamps to (0, 0); reflection mirrors -1 onto 0.
  // (0.5, -1) -> x = 1, y = -0.5: zeros 0.5 * 2.
  EXPECT_TRUE(
      tensors_near(grid_sample({0, 0, -1, -1, 0.5f, -1}, {}), F32({2.5f, 0.25f, 1}, {1, 1, 1, 3})));
  EXPECT_TRUE(tensors_near(grid_sample({0, 0, -1, -1, 0.5f, -1}, {{"padding_mode", "border"}}),
                           F32({2.5f, 1, 2}, {1, 1, 1, 3})));
  EXPECT_TRUE(tensors_near(grid_sample({0, 0, -1, -1, 0.5f, -1}, {{"padding_mode", "reflection"}}),
                           F32({2.5f, 1, 2}, {1, 1, 1, 3})));
  // Far outside: x = -3 + 0.5 = -2.5 reflects about -0.5 and 1.5 to 1.5 (y = 0.5 -> mean of
  // rows): pixel column 1 weight .5 and the mirrored 2 -> 1 weight .5: (2 + 4) / 2 = 3.
  EXPECT_TRUE(
      tensors_near(grid_sample({-3, 0}, {{"padding_mode", "reflection"}}), F32({3}, {1, 1, 1, 1})));
}

TEST(ImageGridSample, AlignCorners) {
  // (-1, -1) -> (0, 0); (1, 1) -> (1, 1); (1, -1) -> x 1, y 0; (0, 0) -> centre.
  EXPECT_TRUE(tensors_near(grid_sample({-1, -1, 1, 1, 1, -1, 0, 0}, {{"align_corners", 1}}),
                           F32({1, 4, 2, 2.5f}, {1, 1, 1, 4})));
}

TEST(ImageGridSample, Nearest) {
  // (0, 0) -> (0.5, 0.5) rounds half to even: (0, 0) -> 1. (0.5, 0) -> x 1, y 0.5 -> 0: 2.
  // (-0.2, 0.1) -> x 0.3 -> 0, y 0.6 -> 1: 3. (-1.5, 0) -> x -1 -> zero padding.
  EXPECT_TRUE(
      tensors_near(grid_sample({0, 0, 0.5f, 0, -0.2f, 0.1f, -1.5f, 0}, {{"mode", "nearest"}}),
                   F32({1, 2, 3, 0}, {1, 1, 1, 4})));
  EXPECT_TRUE(
      tensors_near(grid_sample({-1.5f, 0}, {{"mode", "nearest"}, {"padding_mode", "border"}}),
                   F32({1}, {1, 1, 1, 1})));
}

TEST(ImageGridSample, Bicubic) {
  // (0, 0) -> (0.5, 0.5): weights -0.09375, 0.59375, 0.59375, -0.09375 per axis on pixels
  // -1..2. Zeros padding keeps the inner 2x2: 0.59375^2 * (1+2+3+4) = 3.525390625; border
  // padding folds the outer weights onto the edge pixels: 0.5 each -> 2.5.
  EXPECT_TRUE(
      tensors_near(grid_sample({0, 0}, {{"mode", "bicubic"}}), F32({3.525390625f}, {1, 1, 1, 1})));
  EXPECT_TRUE(tensors_near(grid_sample({0, 0}, {{"mode", "bicubic"}, {"padding_mode", "border"}}),
                           F32({2.5f}, {1, 1, 1, 1})));
  // The opset-20 name "cubic" is accepted too.
  EXPECT_TRUE(tensors_near(grid_sample({0, 0}, {{"mode", "cubic"}, {"padding_mode", "border"}}),
                           F32({2.5f}, {1, 1, 1, 1})));
}

TEST(ImageGridSample, BatchesChannelsAndShape) {
  // N = 2, C = 2 (channel 1 = 10 x channel 0; batch 1 = batch 0 + 100), output 1 x 2.
  const HostTensor x =
      F32({1, 2, 3, 4, 10, 20, 30, 40, 101, 102, 103, 104, 110, 120, 130, 140}, {2, 2, 2, 2});
  const HostTensor grid = F32({-1, -1, 1, 1, 0, 0, 1, -1}, {2, 1, 2, 2});
  auto y = run1("GridSample", {x, grid}, {{"align_corners", 1}});
  EXPECT_TRUE(tensors_near(y, F32({1, 4, 10, 40, 102.5f, 102, 125, 120}, {2, 2, 1, 2})));
}

TEST(ImageGridSample, NonFiniteAndFarGridValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // NaN samples nothing; 1e30 is far in the zero padding; border clamps it to column 1
  // (y = 0 -> row mean 3); reflection lands somewhere inside (finite, no crash).
  EXPECT_TRUE(tensors_near(grid_sample({nan, 0, 1e30f, 0}, {}), F32({0, 0}, {1, 1, 1, 2})));
  EXPECT_TRUE(
      tensors_near(grid_sample({1e30f, 0}, {{"padding_mode", "border"}}), F32({3}, {1, 1, 1, 1})));
  for (const char* mode : {"bilinear", "nearest", "bicubic"}) {
    auto y = grid_sample({-1e30f, 1e30f}, {{"padding_mode", "reflection"}, {"mode", mode}});
    ASSERT_EQ(y.numel(), 1);
    EXPECT_TRUE(std::isfinite(y.data<float>()[0])) << mode;
  }
  // An empty spatial map samples nothing.
  auto y = run1("GridSample", {F32({}, {1, 1, 0, 2}), F32({0, 0}, {1, 1, 1, 2})},
                {{"padding_mode", "reflection"}});
  EXPECT_TRUE(tensors_near(y, F32({0}, {1, 1, 1, 1})));
}

TEST(ImageGridSample, Float64AndBadInputs) {
  auto y = run1("GridSample", {F64({1, 2, 3, 4}, {1, 1, 2, 2}), F64({0, 0}, {1, 1, 1, 2})});
  EXPECT_TRUE(tensors_near(y, F64({2.5}, {1, 1, 1, 1})));
  EXPECT_TRUE(fails_with(run_op("GridSample", {kGridX, F32({0, 0, 0}, {1, 1, 1, 3})}),
                         StatusCode::kInvalidArgument, {"GridSample:", "grid", "[1, 1, 1, 3]"}));
  EXPECT_TRUE(fails_with(run_op("GridSample", {kGridX, F32({0, 0, 0, 0}, {2, 1, 1, 2})}),
                         StatusCode::kInvalidArgument, {"GridSample:", "grid", "N = 1"}));
  EXPECT_TRUE(fails_with(
      run_op("GridSample", {kGridX, F32({0, 0}, {1, 1, 1, 2})}, {{"padding_mode", "wrap"}}),
      StatusCode::kInvalidArgument, {"GridSample:", "padding_mode", "'wrap'"}));
  EXPECT_TRUE(fails_with(run_op("GridSample", {kGridX, I64({0, 0}, {1, 1, 1, 2})}),
                         StatusCode::kInvalidArgument, {"GridSample:", "grid", "int64"}));
}

// ---- RoiAlign ----
// X[h][w] = 4h + w on a 4x4 map: bilinear sampling is exact, so a bin's average is the value
// at its mean sample position.

HostTensor ramp4x4(int batches = 1) {
  std::vector<float> v;
  for (int b = 0; b < batches; ++b)
    for (int i = 0; i < 16; ++i) v.push_back(static_cast<float>(i + 100 * b));
  return F32(v, {batches, 1, 4, 4});
}

TEST(ImageRoiAlign, AverageModes) {
  // output_half_pixel (legacy): roi [0, 0, 3, 3], one bin, 2x2 samples at 0.75 and 2.25:
  // mean position (1.5, 1.5) -> 4 * 1.5 + 1.5 = 7.5.
  auto y = run1("RoiAlign", {ramp4x4(), F32({0, 0, 3, 3}, {1, 4}), I64({0}, {1})},
                {{"coordinate_transformation_mode", "output_half_pixel"}, {"sampling_ratio", 2}});
  EXPECT_TRUE(tensors_near(y, F32({7.5f}, {1, 1, 1, 1})));
  // half_pixel shifts by 0.5: roi [0.5, 0.5, 3.5, 3.5] is the same region.
  y = run1("RoiAlign", {ramp4x4(), F32({0.5f, 0.5f, 3.5f, 3.5f}, {1, 4}), I64({0}, {1})},
           {{"sampling_ratio", 2}});
  EXPECT_TRUE(tensors_near(y, F32({7.5f}, {1, 1, 1, 1})));
  // 2x2 bins of 1.5, one sample each at 0.75 / 2.25: 4y + x.
  y = run1("RoiAlign", {ramp4x4(), F32({0.5f, 0.5f, 3.5f, 3.5f}, {1, 4}), I64({0}, {1})},
           {{"sampling_ratio", 1}, {"output_height", 2}, {"output_width", 2}});
  EXPECT_TRUE(tensors_near(y, F32({3.75f, 5.25f, 9.75f, 11.25f}, {1, 1, 2, 2})));
  // Adaptive sampling (ratio 0): ceil(3 / 1) = 3 samples per axis at 0.5, 1.5, 2.5;
  // spatial_scale 0.5 halves the roi [1, 1, 7, 7] to [0.5, 0.5, 3.5, 3.5].
  y = run1("RoiAlign", {ramp4x4(), F32({1, 1, 7, 7}, {1, 4}), I64({0}, {1})},
           {{"spatial_scale", 0.5f}});
  EXPECT_TRUE(tensors_near(y, F32({7.5f}, {1, 1, 1, 1})));
}

TEST(ImageRoiAlign, MaxModeBatchIndicesAndOutside) {
  // Max mode (onnxruntime's definition): the largest weighted corner of each sample. One sample
  // at (1.5, 1.5): corners 5, 6, 9, 10 with weight 0.25 each -> 2.5.
  auto y = run1("RoiAlign", {ramp4x4(), F32({0, 0, 3, 3}, {1, 4}), I64({0}, {1})},
                {{"coordinate_transformation_mode", "output_half_pixel"},
                 {"sampling_ratio", 1},
                 {"mode", "max"}});
  EXPECT_TRUE(tensors_near(y, F32({2.5f}, {1, 1, 1, 1})));
  // Second roi reads batch 1 (values + 100); a roi beyond the map samples nothing: 0.
  y = run1("RoiAlign",
           {ramp4x4(2), F32({0.5f, 0.5f, 3.5f, 3.5f, 20, 20, 22, 22}, {2, 4}), I64({1, 0}, {2})},
           {{"sampling_ratio", 2}});
  EXPECT_TRUE(tensors_near(y, F32({107.5f, 0}, {2, 1, 1, 1})));
}

TEST(ImageRoiAlign, BadInputs) {
  EXPECT_TRUE(
      fails_with(run_op("RoiAlign", {ramp4x4(), F32({0, 0, INFINITY, 3}, {1, 4}), I64({0}, {1})}),
                 StatusCode::kInvalidArgument, {"RoiAlign:", "rois[0]", "non-finite"}));
  EXPECT_TRUE(
      fails_with(run_op("RoiAlign", {ramp4x4(), F32({0, 0, 1e9f, 1e9f}, {1, 4}), I64({0}, {1})}),
                 StatusCode::kInvalidArgument, {"RoiAlign:", "samples per output bin"}));
  EXPECT_TRUE(fails_with(run_op("RoiAlign", {ramp4x4(), F32({0, 0, 3, 3}, {1, 4}), I64({1}, {1})}),
                         StatusCode::kInvalidArgument,
                         {"RoiAlign:", "batch_indices", "1", "[0, 1)"}));
  EXPECT_TRUE(fails_with(run_op("RoiAlign", {ramp4x4(), F32({0, 0, 3}, {1, 3}), I64({0}, {1})}),
                         StatusCode::kInvalidArgument, {"RoiAlign:", "rois", "[1, 3]"}));
  EXPECT_TRUE(
      fails_with(run_op("RoiAlign", {ramp4x4(), F32({0, 0, 3, 3}, {1, 4}), I64({0, 0}, {2})}),
                 StatusCode::kInvalidArgument, {"RoiAlign:", "batch_indices", "[2]"}));
  EXPECT_TRUE(fails_with(
      run_op("RoiAlign", {ramp4x4(), F32({0, 0, 3, 3}, {1, 4}), I64({0}, {1})}, {{"mode", "min"}}),
      StatusCode::kInvalidArgument, {"RoiAlign:", "mode", "'min'"}));
  EXPECT_TRUE(fails_with(run_op("RoiAlign", {ramp4x4(), F32({0, 0, 3, 3}, {1, 4}), I64({0}, {1})},
                                {{"output_height", 0}}),
                         StatusCode::kInvalidArgument, {"RoiAlign:", "output_height", "0"}));
}

// ---- MaxRoiPool ----

TEST(ImageMaxRoiPool, Bins) {
  // roi (batch 0) [0, 0, 3, 3] covers 4x4; 2x2 bins of 2: block maxima 5, 7, 13, 15.
  auto y = run1("MaxRoiPool", {ramp4x4(), F32({0, 0, 0, 3, 3}, {1, 5})},
                {{"pooled_shape", std::vector<int64_t>{2, 2}}});
  EXPECT_TRUE(tensors_near(y, F32({5, 7, 13, 15}, {1, 1, 2, 2})));
  // 3x3 bins of 4/3 overlap: rows [0, 2), [1, 3), [2, 4) -> max row 1, 2, 3 (same for cols).
  y = run1("MaxRoiPool", {ramp4x4(), F32({0, 0, 0, 3, 3}, {1, 5})},
           {{"pooled_shape", std::vector<int64_t>{3, 3}}});
  EXPECT_TRUE(tensors_near(y, F32({5, 6, 7, 9, 10, 11, 13, 14, 15}, {1, 1, 3, 3})));
  // spatial_scale 0.5: [2, 2, 4, 4] -> [1, 1, 2, 2]; batch 1 adds 100.
  y = run1("MaxRoiPool", {ramp4x4(2), F32({1, 2, 2, 4, 4}, {1, 5})},
           {{"pooled_shape", std::vector<int64_t>{1, 1}}, {"spatial_scale", 0.5f}});
  EXPECT_TRUE(tensors_near(y, F32({110}, {1, 1, 1, 1})));
}

TEST(ImageMaxRoiPool, BadInputs) {
  EXPECT_TRUE(fails_with(run_op("MaxRoiPool", {ramp4x4(), F32({0, 0, 0, NAN, 3}, {1, 5})},
                                {{"pooled_shape", std::vector<int64_t>{1, 1}}}),
                         StatusCode::kInvalidArgument, {"MaxRoiPool:", "rois[0]", "non-finite"}));
  EXPECT_TRUE(fails_with(run_op("MaxRoiPool", {ramp4x4(), F32({0, 0, 0, 3, 3}, {1, 5})}),
                         StatusCode::kInvalidArgument, {"MaxRoiPool:", "'pooled_shape'"}));
  EXPECT_TRUE(fails_with(run_op("MaxRoiPool", {ramp4x4(), F32({3, 0, 0, 3, 3}, {1, 5})},
                                {{"pooled_shape", std::vector<int64_t>{1, 1}}}),
                         StatusCode::kInvalidArgument, {"MaxRoiPool:", "batch index 3"}));
  EXPECT_TRUE(fails_with(run_op("MaxRoiPool", {ramp4x4(), F32({0, 0, 0, 3}, {1, 4})},
                                {{"pooled_shape", std::vector<int64_t>{1, 1}}}),
                         StatusCode::kInvalidArgument, {"MaxRoiPool:", "rois", "[1, 4]"}));
}

// ---- MaxUnpool ----

TEST(ImageMaxUnpool, ScatterAndOutputShape) {
  const HostTensor x = F32({5, 6, 7, 8}, {1, 1, 2, 2});
  const HostTensor ind = I64({5, 7, 13, 15}, {1, 1, 2, 2});
  AttributeMap a{{"kernel_shape", std::vector<int64_t>{2, 2}},
                 {"strides", std::vector<int64_t>{2, 2}}};
  auto y = run1("MaxUnpool", {x, ind}, a);
  EXPECT_TRUE(tensors_near(y, F32({0, 0, 0, 0, 0, 5, 0, 6, 0, 0, 0, 0, 0, 7, 0, 8}, {1, 1, 4, 4})));
  // output_shape 5x5: the 4x4 result is its top-left corner (ONNX's reference).
  y = run1("MaxUnpool", {x, ind, I64({1, 1, 5, 5}, {4})}, a);
  EXPECT_TRUE(tensors_near(
      y, F32({0, 0, 0, 0, 0, 0, 5, 0, 6, 0, 0, 0, 0, 0, 0, 0, 7, 0, 8, 0, 0, 0, 0, 0, 0},
             {1, 1, 5, 5})));
  // 1-D with pads: (2 - 1) * 2 + 2 - 1 = 3 wide.
  y = run1("MaxUnpool", {F64({1.5, 2.5}, {1, 1, 2}), I64({0, 2}, {1, 1, 2})},
           {{"kernel_shape", std::vector<int64_t>{2}},
            {"strides", std::vector<int64_t>{2}},
            {"pads", std::vector<int64_t>{0, 1}}});
  EXPECT_TRUE(tensors_near(y, F64({1.5, 0, 2.5}, {1, 1, 3})));
}

TEST(ImageMaxUnpool, BadInputs) {
  const HostTensor x = F32({5, 6, 7, 8}, {1, 1, 2, 2});
  AttributeMap a{{"kernel_shape", std::vector<int64_t>{2, 2}},
                 {"strides", std::vector<int64_t>{2, 2}}};
  EXPECT_TRUE(fails_with(run_op("MaxUnpool", {x, I64({5, 7, 13, 16}, {1, 1, 2, 2})}, a),
                         StatusCode::kInvalidArgument, {"MaxUnpool:", "I[3] = 16", "16 elements"}));
  EXPECT_TRUE(fails_with(run_op("MaxUnpool", {x, I64({0, 1}, {1, 1, 1, 2})}, a),
                         StatusCode::kInvalidArgument, {"MaxUnpool:", "I", "[1, 1, 1, 2]"}));
  EXPECT_TRUE(fails_with(run_op("MaxUnpool", {x, I64({5, 7, 13, 15}, {1, 1, 2, 2})}),
                         StatusCode::kInvalidArgument, {"MaxUnpool:", "'kernel_shape'"}));
  EXPECT_TRUE(fails_with(
      run_op("MaxUnpool", {x, I64({5, 7, 13, 15}, {1, 1, 2, 2}), I64({1, 1, 3, 3}, {4})}, a),
      StatusCode::kInvalidArgument, {"MaxUnpool:", "output_shape", "smaller", "[1, 1, 4, 4]"}));
}

// ---- NonMaxSuppression ----
// Three boxes [y1, x1, y2, x2]: A = unit square (score .9), B = A shifted 0.5 in x (.7; IOU
// with A = 0.5 / 1.5 = 1/3), C = A again (.8; IOU with A = 1).

const HostTensor kBoxes = F32({0, 0, 1, 1, 0, 0.5f, 1, 1.5f, 0, 0, 1, 1}, {1, 3, 4});
const HostTensor kScores = F32({0.9f, 0.7f, 0.8f}, {1, 1, 3});

HostTensor nms(const HostTensor& boxes, const HostTensor& scores, int64_t max_out, float iou,
               float score = -1, AttributeMap attrs = {}) {
  std::vector<HostTensor> in = {boxes, scores, I64({max_out}, {1}), F32({iou}, {1})};
  if (score >= 0) in.push_back(F32({score}, {1}));
  return run1("NonMaxSuppression", in, std::move(attrs));
}

TEST(ImageNms, Suppression) {
  // Order A, C, B: C is suppressed by A (IOU 1 > 0.5), B kept (1/3 <= 0.5).
  EXPECT_TRUE(tensors_near(nms(kBoxes, kScores, 3, 0.5f), I64({0, 0, 0, 0, 0, 1}, {2, 3})));
  // iou_threshold 0.3 suppresses B too; max_output 1 stops after A.
  EXPECT_TRUE(tensors_near(nms(kBoxes, kScores, 3, 0.3f), I64({0, 0, 0}, {1, 3})));
  EXPECT_TRUE(tensors_near(nms(kBoxes, kScores, 1, 0.5f), I64({0, 0, 0}, {1, 3})));
  // score_threshold 0.75 drops B (0.7) before selection.
  EXPECT_TRUE(tensors_near(nms(kBoxes, kScores, 3, 0.5f, 0.75f), I64({0, 0, 0}, {1, 3})));
  // max_output 0, or omitted: nothing selected.
  EXPECT_TRUE(tensors_near(nms(kBoxes, kScores, 0, 0.5f), I64({}, {0, 3})));
  EXPECT_TRUE(tensors_near(run1("NonMaxSuppression", {kBoxes, kScores}), I64({}, {0, 3})));
}

TEST(ImageNms, ClassesBatchesFlippedAndCenterFormat) {
  // Class 1 scores .1, .95, .2: B first, then C (IOU with B 1/3, kept), A suppressed by C.
  const HostTensor scores2 = F32({0.9f, 0.7f, 0.8f, 0.1f, 0.95f, 0.2f}, {1, 2, 3});
  EXPECT_TRUE(tensors_near(nms(kBoxes, scores2, 3, 0.5f),
                           I64({0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 1, 2}, {4, 3})));
  // Corners given in either order.
  const HostTensor flipped = F32({1, 1, 0, 0, 1, 1.5f, 0, 0.5f, 1, 1, 0, 0}, {1, 3, 4});
  EXPECT_TRUE(tensors_near(nms(flipped, kScores, 3, 0.5f), I64({0, 0, 0, 0, 0, 1}, {2, 3})));
  // Center format [xc, yc, w, h] for the same boxes.
  const HostTensor centers = F32({0.5f, 0.5f, 1, 1, 1, 0.5f, 1, 1, 0.5f, 0.5f, 1, 1}, {1, 3, 4});
  EXPECT_TRUE(tensors_near(nms(centers, kScores, 3, 0.5f, -1, {{"center_point_box", 1}}),
                           I64({0, 0, 0, 0, 0, 1}, {2, 3})));
  // Two batches; equal scores keep the lower index first.
  const HostTensor boxes2 = F32(
      {0, 0, 1, 1, 0, 0.5f, 1, 1.5f, 0, 0, 1, 1, 0, 0, 1, 1, 5, 5, 6, 6, 0, 0, 1, 1}, {2, 3, 4});
  const HostTensor s2 = F32({0.9f, 0.7f, 0.8f, 0.5f, 0.5f, 0.5f}, {2, 1, 3});
  EXPECT_TRUE(
      tensors_near(nms(boxes2, s2, 3, 0.5f), I64({0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1}, {4, 3})));
}

TEST(ImageNms, NanScoresAreNeverSelected) {
  const HostTensor scores = F32({NAN, 0.7f, 0.8f}, {1, 1, 3});
  EXPECT_TRUE(tensors_near(nms(kBoxes, scores, 3, 0.5f), I64({0, 0, 2, 0, 0, 1}, {2, 3})));
}

TEST(ImageNms, BadInputs) {
  EXPECT_TRUE(
      fails_with(run_op("NonMaxSuppression", {kBoxes, kScores, I64({3}, {1}), F32({1.5f}, {1})}),
                 StatusCode::kInvalidArgument, {"NonMaxSuppression:", "iou_threshold", "1.5"}));
  EXPECT_TRUE(fails_with(run_op("NonMaxSuppression", {F32({0, 0, 1}, {1, 1, 3}), kScores}),
                         StatusCode::kInvalidArgument,
                         {"NonMaxSuppression:", "boxes", "[1, 1, 3]"}));
  EXPECT_TRUE(fails_with(run_op("NonMaxSuppression", {kBoxes, F32({0.9f, 0.7f}, {1, 1, 2})}),
                         StatusCode::kInvalidArgument,
                         {"NonMaxSuppression:", "scores", "[1, 1, 2]"}));
  EXPECT_TRUE(fails_with(run_op("NonMaxSuppression", {kBoxes, kScores, I64({3, 4}, {2})}),
                         StatusCode::kInvalidArgument,
                         {"NonMaxSuppression:", "max_output_boxes_per_class", "[2]"}));
  EXPECT_TRUE(fails_with(run_op("NonMaxSuppression", {kBoxes, kScores}, {{"center_point_box", 2}}),
                         StatusCode::kInvalidArgument, {"NonMaxSuppression:", "center_point_box"}));
}

}  // namespace
}  // namespace tensord::testing
