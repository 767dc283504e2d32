// Shape and data-movement ops against hand-computed values.
#include <cstring>
#include <limits>

#include "core/op_registry.h"
#include "kernels/op_test_util.h"

namespace tensord::testing {
namespace {

template <typename T>
HostTensor make(std::vector<T> v, Shape s) {
  return HostTensor::from_vector<T>(v, std::move(s));
}
// An input left out (optional).
HostTensor none() { return HostTensor(); }

// Float16 tensors compared bit for bit (data movement must not change them).
::testing::AssertionResult same_bits(const HostTensor& a, const HostTensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    return ::testing::AssertionFailure() << a.type().to_string() << " vs " << b.type().to_string();
  if (a.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) != 0)
    return ::testing::AssertionFailure() << "bytes differ";
  return ::testing::AssertionSuccess();
}

std::vector<float> iota_f(int n, float start = 0) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + static_cast<float>(i);
  return v;
}

// ---------------- Constant, Identity ----------------

TEST(ShapeConstant, ValueTensor) {
  HostTensor v = F32({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(tensors_near(run1("Constant", {}, {{"value", v}}), F32({1, 2, 3, 4}, {2, 2})));
}

TEST(ShapeConstant, ScalarAndListAttributes) {
  EXPECT_TRUE(tensors_near(run1("Constant", {}, {{"value_float", 1.5f}}), F32({1.5f}, {})));
  EXPECT_TRUE(tensors_near(run1("Constant", {}, {{"value_floats", std::vector<float>{1, -2}}}),
                           F32({1, -2}, {2})));
  EXPECT_TRUE(tensors_near(run1("Constant", {}, {{"value_int", int64_t{7}}}), I64({7}, {})));
  EXPECT_TRUE(tensors_near(run1("Constant", {}, {{"value_ints", std::vector<int64_t>{3, -1, 5}}}),
                           I64({3, -1, 5}, {3})));
}

TEST(ShapeConstant, Float16AndBoolKeepTheirBytes) {
  HostTensor h = F16({0.1f, -2.5f, 65504.f}, {3});
  EXPECT_TRUE(same_bits(run1("Constant", {}, {{"value", h}}), h));
  HostTensor b = Bool({true, false, true}, {3});
  EXPECT_TRUE(same_bits(run1("Constant", {}, {{"value", b}}), b));
}

TEST(ShapeConstant, BadAttributes) {
  EXPECT_TRUE(fails(run_op("Constant", {}, {}), {"Constant", "exactly one", "got 0"}));
  EXPECT_TRUE(fails(run_op("Constant", {}, {{"value_int", int64_t{1}}, {"value_float", 1.f}}),
                    {"Constant", "got 2", "value_float", "value_int"}));
  EXPECT_TRUE(fails(run_op("Constant", {}, {{"value_string", "abc"}}), {"Constant", "value_string"},
                    StatusCode::kUnimplemented));
  EXPECT_TRUE(fails(run_op("Constant", {}, {{"value", int64_t{3}}}),
                    {"Constant", "'value' must be a tensor", "int"}));
}

TEST(ShapeIdentity, CopiesEveryDtype) {
  EXPECT_TRUE(tensors_near(run1("Identity", {I32({1, -2, 3}, {3})}), I32({1, -2, 3}, {3})));
  HostTensor b = Bool({true, false}, {2, 1});
  EXPECT_TRUE(same_bits(run1("Identity", {b}), b));
  HostTensor h = F16({1.f / 3, 7.f}, {2});
  EXPECT_TRUE(same_bits(run1("Identity", {h}), h));
}

// ---------------- Reshape, Flatten, Squeeze, Unsqueeze ----------------

TEST(ShapeReshape, InfersMinusOne) {
  auto out = run1("Reshape", {F32(iota_f(24), {2, 3, 4}), I64({4, -1}, {2})});
  EXPECT_TRUE(tensors_near(out, F32(iota_f(24), {4, 6})));
}

TEST(ShapeReshape, ZeroCopiesTheInputDim) {
  EXPECT_TRUE(tensors_near(run1("Reshape", {F32(iota_f(24), {2, 3, 4}), I64({0, 12}, {2})}),
                           F32(iota_f(24), {2, 12})));
  EXPECT_TRUE(tensors_near(run1("Reshape", {F32(iota_f(24), {2, 3, 4}), I64({0, -1, 2}, {3})}),
                           F32(iota_f(24), {2, 6, 2})));
  EXPECT_TRUE(tensors_near(
      run1("Reshape", {F32(iota_f(24), {2, 3, 4}), I64({4, 0, 2}, {3})}),  // 0 copies dim 1 (3)
      F32(iota_f(24), {4, 3, 2})));
}

TEST(ShapeReshape, AllowZeroKeepsZeroDims) {
  HostTensor empty(DType::kFloat32, {0, 3});
  EXPECT_TRUE(tensors_near(run1("Reshape", {empty, I64({3, 0}, {2})}, {{"allowzero", 1}}),
                           HostTensor(DType::kFloat32, {3, 0})));
  // Without allowzero the 0 copies dim 1 of the input: [3, 3] does not hold 0 elements.
  EXPECT_TRUE(fails(run_op("Reshape", {empty, I64({3, 0}, {2})}), {"Reshape", "[0, 3]", "[3, 3]"}));
}

TEST(ShapeReshape, Float16MovedUnchanged) {
  HostTensor h = F16({0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}, {2, 3});
  HostTensor expect = F16({0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}, {3, 2});
  EXPECT_TRUE(same_bits(run1("Reshape", {h, I64({3, 2}, {2})}), expect));
}

TEST(ShapeReshape, BadShapes) {
  HostTensor x = F32(iota_f(24), {2, 3, 4});
  EXPECT_TRUE(fails(run_op("Reshape", {x, I64({5, 5}, {2})}), {"Reshape", "[2, 3, 4]", "[5, 5]"}));
  EXPECT_TRUE(fails(run_op("Reshape", {x, I64({-1, -1}, {2})}), {"Reshape", "more than one -1"}));
  EXPECT_TRUE(fails(run_op("Reshape", {x, I64({5, -1}, {2})}), {"Reshape", "[5, -1]", "24"}));
  EXPECT_TRUE(fails(run_op("Reshape", {x, I64({-2, 12}, {2})}), {"Reshape", "-2"}));
  EXPECT_TRUE(fails(run_op("Reshape", {x, I64({0, -1}, {2})}, {{"allowzero", 1}}),
                    {"Reshape", "allowzero"}));
  EXPECT_TRUE(fails(run_op("Reshape", {x, F32({4, 6}, {2})}), {"Reshape", "int64", "float32"}));
}

// Shape values past int64 (found by tests/fuzz/fuzz_wire.cpp under UBSan: signed overflow) are a
// clear error, not undefined behaviour.
TEST(ShapeReshape, ElementCountsPastInt64AreAnError) {
  HostTensor x = F32(iota_f(24), {2, 3, 4});
  const int64_t big = int64_t{1} << 62;
  EXPECT_TRUE(fails(run_op("Reshape", {x, I64({big, 3}, {2})}), {"Reshape", "2^63"}));
  EXPECT_TRUE(fails(run_op("Reshape", {x, I64({big, 3, -1}, {3})}), {"Reshape", "2^63"}));
  EXPECT_TRUE(fails(run_op("Tile", {x, I64({big, 1, 1}, {3})}), {"Tile", "overflow"}));
}

TEST(ShapeReshape, ConstantShapeInferredAtCompileTime) {
  // The shape is an initializer: the output type is known before running.
  Graph g;
  g.inputs.push_back({"x", {DType::kFloat32, {2, 3}}});
  g.initializers["s"] = I64({3, -1}, {2});
  g.nodes.push_back(Node{"r", "Reshape", "", {"x", "s"}, {"y"}, {}});
  g.outputs.push_back({"y", {}});
  auto outs = run_graph(g, {F32(iota_f(6), {2, 3})});
  ASSERT_TRUE(outs.ok()) << outs.status().to_string();
  ASSERT_TRUE((*outs)[0].ok());
  EXPECT_TRUE(tensors_near(*(*outs)[0], F32(iota_f(6), {3, 2})));
}

TEST(ShapeFlatten, Axes) {
  HostTensor x = F32(iota_f(24), {2, 3, 4});
  EXPECT_TRUE(tensors_near(run1("Flatten", {x}), F32(iota_f(24), {2, 12})));
  EXPECT_TRUE(tensors_near(run1("Flatten", {x}, {{"axis", 0}}), F32(iota_f(24), {1, 24})));
  EXPECT_TRUE(tensors_near(run1("Flatten", {x}, {{"axis", 3}}), F32(iota_f(24), {24, 1})));
  EXPECT_TRUE(tensors_near(run1("Flatten", {x}, {{"axis", -1}}), F32(iota_f(24), {6, 4})));
  EXPECT_TRUE(tensors_near(run1("Flatten", {x}, {{"axis", -3}}), F32(iota_f(24), {1, 24})));
  EXPECT_TRUE(fails(run_op("Flatten", {x}, {{"axis", 4}}), {"Flatten", "axis 4", "rank 3"}));
  EXPECT_TRUE(fails(run_op("Flatten", {x}, {{"axis", -4}}), {"Flatten", "axis -4"}));
}

TEST(ShapeSqueeze, AllOnesOrGivenAxes) {
  HostTensor x = F32(iota_f(6), {1, 3, 1, 2});
  EXPECT_TRUE(tensors_near(run1("Squeeze", {x}), F32(iota_f(6), {3, 2})));
  EXPECT_TRUE(tensors_near(run1("Squeeze", {x, I64({-2}, {1})}), F32(iota_f(6), {1, 3, 2})));
  EXPECT_TRUE(tensors_near(run1("Squeeze", {x, I64({0, 2}, {2})}), F32(iota_f(6), {3, 2})));
  EXPECT_TRUE(tensors_near(run1("Squeeze", {F32({5}, {1, 1})}), F32({5}, {})));
}

TEST(ShapeSqueeze, BadAxes) {
  HostTensor x = F32(iota_f(6), {1, 3, 1, 2});
  EXPECT_TRUE(fails(run_op("Squeeze", {x, I64({1}, {1})}), {"Squeeze", "axis 1", "size 3"}));
  EXPECT_TRUE(fails(run_op("Squeeze", {x, I64({4}, {1})}), {"Squeeze", "axis 4", "rank 4"}));
  EXPECT_TRUE(fails(run_op("Squeeze", {x, I64({0, -4}, {2})}), {"Squeeze", "repeated"}));
}

TEST(ShapeUnsqueeze, InsertsAxes) {
  HostTensor x = F32(iota_f(6), {3, 2});
  EXPECT_TRUE(tensors_near(run1("Unsqueeze", {x, I64({0, 3}, {2})}), F32(iota_f(6), {1, 3, 2, 1})));
  EXPECT_TRUE(tensors_near(run1("Unsqueeze", {x, I64({3, 0}, {2})}), F32(iota_f(6), {1, 3, 2, 1})));
  EXPECT_TRUE(tensors_near(run1("Unsqueeze", {x, I64({-1}, {1})}), F32(iota_f(6), {3, 2, 1})));
  EXPECT_TRUE(
      tensors_near(run1("Unsqueeze", {x, I64({1, 2, 4}, {3})}), F32(iota_f(6), {3, 1, 1, 2, 1})));
  EXPECT_TRUE(tensors_near(run1("Unsqueeze", {F32({4}, {}), I64({0}, {1})}), F32({4}, {1})));
}

TEST(ShapeUnsqueeze, BadAxes) {
  HostTensor x = F32(iota_f(6), {3, 2});
  EXPECT_TRUE(fails(run_op("Unsqueeze", {x, I64({1, 1}, {2})}), {"Unsqueeze", "repeated"}));
  EXPECT_TRUE(fails(run_op("Unsqueeze", {x, I64({3}, {1})}), {"Unsqueeze", "axis 3", "rank 3"}));
  EXPECT_TRUE(fails(run_op("Unsqueeze", {x}), {"Unsqueeze", "expects 2 inputs, got 1"}));
}

// ---------------- Transpose ----------------

TEST(ShapeTranspose, DefaultReverses) {
  EXPECT_TRUE(tensors_near(run1("Transpose", {F32({1, 2, 3, 4, 5, 6}, {2, 3})}),
                           F32({1, 4, 2, 5, 3, 6}, {3, 2})));
}

TEST(ShapeTranspose, Perms) {
  // in[i][j][k] = 4i + 2j + k; out[a][b][c] = in[b][a][c].
  EXPECT_TRUE(tensors_near(
      run1("Transpose", {F32(iota_f(8), {2, 2, 2})}, {{"perm", std::vector<int64_t>{1, 0, 2}}}),
      F32({0, 1, 4, 5, 2, 3, 6, 7}, {2, 2, 2})));
  // in shape [2, 1, 3], in[i][0][k] = 3i + k; perm (2, 0, 1): out[k][i][0] = 3i + k.
  EXPECT_TRUE(tensors_near(run1("Transpose", {I64({0, 1, 2, 3, 4, 5}, {2, 1, 3})},
                                {{"perm", std::vector<int64_t>{2, 0, 1}}}),
                           I64({0, 3, 1, 4, 2, 5}, {3, 2, 1})));
}

TEST(ShapeTranspose, Float16AndBool) {
  EXPECT_TRUE(same_bits(run1("Transpose", {F16({0.1f, 0.2f, 0.3f, 0.4f}, {2, 2})}),
                        F16({0.1f, 0.3f, 0.2f, 0.4f}, {2, 2})));
  EXPECT_TRUE(same_bits(run1("Transpose", {Bool({true, true, false, false}, {2, 2})}),
                        Bool({true, false, true, false}, {2, 2})));
}

TEST(ShapeTranspose, BadPerm) {
  HostTensor x = F32(iota_f(6), {2, 3});
  EXPECT_TRUE(fails(run_op("Transpose", {x}, {{"perm", std::vector<int64_t>{0, 0}}}),
                    {"Transpose", "[0, 0]", "not a permutation"}));
  EXPECT_TRUE(fails(run_op("Transpose", {x}, {{"perm", std::vector<int64_t>{0, 1, 2}}}),
                    {"Transpose", "[0, 1, 2]", "rank 2"}));
}

// ---------------- Concat, Split ----------------

TEST(ShapeConcat, Axes) {
  EXPECT_TRUE(
      tensors_near(run1("Concat", {F32({1, 2, 3, 4}, {2, 2}), F32({5, 6}, {1, 2})}, {{"axis", 0}}),
                   F32({1, 2, 3, 4, 5, 6}, {3, 2})));
  EXPECT_TRUE(
      tensors_near(run1("Concat", {F32({1, 2}, {2, 1}), F32({3, 4, 5, 6}, {2, 2})}, {{"axis", -1}}),
                   F32({1, 3, 4, 2, 5, 6}, {2, 3})));
  EXPECT_TRUE(
      tensors_near(run1("Concat", {I64({1}, {1}), I64({}, {0}), I64({2, 3}, {2})}, {{"axis", 0}}),
                   I64({1, 2, 3}, {3})));
  EXPECT_TRUE(
      same_bits(run1("Concat", {Bool({true}, {1, 1}), Bool({false}, {1, 1})}, {{"axis", 1}}),
                Bool({true, false}, {1, 2})));
}

TEST(ShapeConcat, BadInputs) {
  EXPECT_TRUE(fails(run_op("Concat", {F32({1, 2}, {1, 2}), F32({1, 2, 3}, {1, 3})}, {{"axis", 0}}),
                    {"Concat", "[1, 3]", "[1, 2]", "axis 1"}));
  EXPECT_TRUE(fails(run_op("Concat", {F32({1}, {1}), F32({1}, {1})}), {"Concat", "'axis'"}));
  EXPECT_TRUE(fails(run_op("Concat", {F32({1}, {1}), I64({1}, {1})}, {{"axis", 0}}),
                    {"Concat", "int64", "float32"}));
  EXPECT_TRUE(fails(run_op("Concat", {F32({1}, {1}), F32({1}, {1, 1})}, {{"axis", 0}}),
                    {"Concat", "ranks differ"}));
  EXPECT_TRUE(fails(run_op("Concat", {F32({1}, {1})}, {{"axis", 1}}), {"Concat", "axis 1"}));
}

TEST(ShapeSplit, EqualParts) {
  auto r = run_op("Split", {F32({1, 2, 3, 4, 5, 6}, {6})}, {}, 3);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], F32({1, 2}, {2})));
  EXPECT_TRUE(tensors_near((*r)[1], F32({3, 4}, {2})));
  EXPECT_TRUE(tensors_near((*r)[2], F32({5, 6}, {2})));
  auto r2 = run_op("Split", {F32({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4})}, {{"axis", 1}}, 2);
  ASSERT_TRUE(r2.ok()) << r2.status().to_string();
  EXPECT_TRUE(tensors_near((*r2)[0], F32({1, 2, 5, 6}, {2, 2})));
  EXPECT_TRUE(tensors_near((*r2)[1], F32({3, 4, 7, 8}, {2, 2})));
}

TEST(ShapeSplit, GivenSizesIncludingZero) {
  auto r = run_op("Split", {I32({1, 2, 3, 4, 5, 6}, {6}), I64({2, 4}, {2})}, {}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], I32({1, 2}, {2})));
  EXPECT_TRUE(tensors_near((*r)[1], I32({3, 4, 5, 6}, {4})));
  auto z = run_op("Split", {F32({1, 2, 3}, {3}), I64({0, 3, 0}, {3})}, {{"axis", -1}}, 3);
  ASSERT_TRUE(z.ok()) << z.status().to_string();
  EXPECT_TRUE(tensors_near((*z)[0], F32({}, {0})));
  EXPECT_TRUE(tensors_near((*z)[1], F32({1, 2, 3}, {3})));
  EXPECT_TRUE(tensors_near((*z)[2], F32({}, {0})));
}

TEST(ShapeSplit, BadSplits) {
  EXPECT_TRUE(
      fails(run_op("Split", {F32(iota_f(5), {5})}, {}, 2), {"Split", "size 5", "2 equal parts"}));
  EXPECT_TRUE(fails(run_op("Split", {F32(iota_f(5), {5}), I64({2, 2}, {2})}, {}, 2),
                    {"Split", "[2, 2]", "sums to 4", "size 5"}));
  EXPECT_TRUE(fails(run_op("Split", {F32(iota_f(5), {5}), I64({2, 3}, {2})}, {}, 3),
                    {"Split", "2 entries", "3 outputs"}));
  // num_outputs (opset 18) must match the outputs, and not come with a split input.
  EXPECT_TRUE(fails(run_op("Split", {F32(iota_f(4), {4})}, {{"num_outputs", 3}}, 2),
                    {"Split", "num_outputs is 3", "2 outputs"}));
  EXPECT_TRUE(fails(run_op("Split", {F32(iota_f(4), {4}), I64({2, 2}, {2})}, {{"num_outputs", 2}}, 2),
                    {"Split", "either the split input or num_outputs"}));
  EXPECT_TRUE(fails(run_op("Split", {F32(iota_f(2), {2})}, {{"num_outputs", 4}}, 4),
                    {"Split", "num_outputs is too large"}));
}

// ---------------- Slice ----------------

const HostTensor kSliceIn = F32({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});

TEST(ShapeSlice, StartsEndsAxesSteps) {
  EXPECT_TRUE(tensors_near(run1("Slice", {kSliceIn, I64({1, 0}, {2}), I64({2, 3}, {2}),
                                          I64({0, 1}, {2}), I64({1, 2}, {2})}),
                           F32({5, 7}, {1, 2})));
}

TEST(ShapeSlice, DefaultAxesAndSteps) {
  // ends -1 on axis 0 means 1; 1000 is clamped to 4.
  EXPECT_TRUE(tensors_near(run1("Slice", {kSliceIn, I64({0, 1}, {2}), I64({-1, 1000}, {2})}),
                           F32({2, 3, 4}, {1, 3})));
}

TEST(ShapeSlice, NegativeAxesAndInt32) {
  EXPECT_TRUE(tensors_near(run1("Slice", {kSliceIn, I32({1}, {1}), I32({3}, {1}), I32({-1}, {1})}),
                           F32({2, 3, 6, 7}, {2, 2})));
}

TEST(ShapeSlice, NegativeSteps) {
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  EXPECT_TRUE(tensors_near(run1("Slice", {F32({1, 2, 3, 4}, {4}), I64({-1}, {1}), I64({kMin}, {1}),
                                          none(), I64({-1}, {1})}),
                           F32({4, 3, 2, 1}, {4})));
  // starts 20 -> 1 and 10 -> 3 (clamped to dim - 1); ends 0 exclusive.
  EXPECT_TRUE(tensors_near(run1("Slice", {kSliceIn, I64({20, 10}, {2}), I64({0, 0}, {2}),
                                          I64({0, 1}, {2}), I64({-1, -3}, {2})}),
                           F32({8}, {1, 1})));
  EXPECT_TRUE(tensors_near(run1("Slice", {F32({1, 2, 3, 4, 5}, {5}), I64({4}, {1}), I64({0}, {1}),
                                          none(), I64({-2}, {1})}),
                           F32({5, 3}, {2})));
}

TEST(ShapeSlice, OutOfBoundsGivesEmpty) {
  EXPECT_TRUE(
      tensors_near(run1("Slice", {kSliceIn, I64({1000}, {1}), I64({1001}, {1}), I64({1}, {1})}),
                   F32({}, {2, 0})));
  EXPECT_TRUE(tensors_near(run1("Slice", {kSliceIn, I64({3}, {1}), I64({1}, {1}), I64({1}, {1})}),
                           F32({}, {2, 0})));
}

TEST(ShapeSlice, Float16AndBool) {
  EXPECT_TRUE(same_bits(run1("Slice", {F16({0.1f, 0.2f, 0.3f}, {3}), I64({1}, {1}), I64({3}, {1})}),
                        F16({0.2f, 0.3f}, {2})));
  EXPECT_TRUE(same_bits(run1("Slice", {Bool({true, false, true}, {3}), I64({2}, {1}),
                                       I64({-4}, {1}), none(), I64({-2}, {1})}),
                        Bool({true, true}, {2})));
}

TEST(ShapeSlice, BadInputs) {
  EXPECT_TRUE(
      fails(run_op("Slice", {kSliceIn, I64({0}, {1}), I64({1}, {1}), I64({0}, {1}), I64({0}, {1})}),
            {"Slice", "steps", "0"}));
  EXPECT_TRUE(
      fails(run_op("Slice", {kSliceIn, I64({0, 0}, {2}), I64({1, 1}, {2}), I64({1, -1}, {2})}),
            {"Slice", "repeated"}));
  EXPECT_TRUE(fails(run_op("Slice", {kSliceIn, I64({0, 0}, {2}), I64({1}, {1})}),
                    {"Slice", "same length"}));
  EXPECT_TRUE(fails(run_op("Slice", {kSliceIn, I64({0}, {1}), I64({1}, {1}), I64({2}, {1})}),
                    {"Slice", "axis 2", "rank 2"}));
}

// ---------------- Gather, GatherElements, GatherND ----------------

TEST(ShapeGather, Axis0MatrixIndices) {
  EXPECT_TRUE(
      tensors_near(run1("Gather", {F32({1, 2, 3, 4, 5, 6}, {3, 2}), I64({0, 1, 1, 2}, {2, 2})}),
                   F32({1, 2, 3, 4, 3, 4, 5, 6}, {2, 2, 2})));
}

TEST(ShapeGather, Axis1NegativeInt32Indices) {
  EXPECT_TRUE(tensors_near(
      run1("Gather", {F32({1, 2, 3, 4, 5, 6}, {3, 2}), I32({1, -2}, {2})}, {{"axis", 1}}),
      F32({2, 1, 4, 3, 6, 5}, {3, 2})));
}

TEST(ShapeGather, ScalarIndexDropsTheAxis) {
  EXPECT_TRUE(tensors_near(run1("Gather", {I64({1, 2, 3, 4, 5, 6}, {3, 2}), I64({2}, {})}),
                           I64({5, 6}, {2})));
  EXPECT_TRUE(same_bits(run1("Gather", {F16({1, 2, 3}, {3}), I64({-1}, {})}), F16({3}, {})));
}

TEST(ShapeGather, BadIndices) {
  EXPECT_TRUE(fails(run_op("Gather", {F32(iota_f(6), {3, 2}), I64({3}, {1})}),
                    {"Gather", "index 3", "size 3"}));
  EXPECT_TRUE(
      fails(run_op("Gather", {F32(iota_f(6), {3, 2}), I64({-4}, {1})}), {"Gather", "index -4"}));
  EXPECT_TRUE(fails(run_op("Gather", {F32(iota_f(6), {3, 2}), F32({0}, {1})}),
                    {"Gather", "int32 or int64", "float32"}));
  EXPECT_TRUE(fails(run_op("Gather", {F32(iota_f(6), {3, 2}), I64({0}, {1})}, {{"axis", 2}}),
                    {"Gather", "axis 2", "rank 2"}));
}

TEST(ShapeGatherElements, Axes) {
  EXPECT_TRUE(tensors_near(
      run1("GatherElements", {F32({1, 2, 3, 4}, {2, 2}), I64({0, 0, 1, 0}, {2, 2})}, {{"axis", 1}}),
      F32({1, 1, 4, 3}, {2, 2})));
  HostTensor d = F32({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  EXPECT_TRUE(tensors_near(run1("GatherElements", {d, I64({1, 2, 0, 2, 0, 0}, {2, 3})}),
                           F32({4, 8, 3, 7, 2, 3}, {2, 3})));
  EXPECT_TRUE(tensors_near(run1("GatherElements", {d, I32({-1, -2, 0, -2, 0, 0}, {2, 3})}),
                           F32({7, 5, 3, 4, 2, 3}, {2, 3})));
  EXPECT_TRUE(fails(run_op("GatherElements", {d, I64({3, 0, 0}, {1, 3})}),
                    {"GatherElements", "index 3", "size 3"}));
  EXPECT_TRUE(
      fails(run_op("GatherElements", {d, I64({0, 0, 0}, {3})}), {"GatherElements", "same rank"}));
}

TEST(ShapeGatherND, Examples) {
  HostTensor d2 = I32({0, 1, 2, 3}, {2, 2});
  EXPECT_TRUE(tensors_near(run1("GatherND", {d2, I64({0, 0, 1, 1}, {2, 2})}), I32({0, 3}, {2})));
  EXPECT_TRUE(tensors_near(run1("GatherND", {d2, I64({1, 0}, {2, 1})}), I32({2, 3, 0, 1}, {2, 2})));
  HostTensor d3 = F32(iota_f(8), {2, 2, 2});
  EXPECT_TRUE(
      tensors_near(run1("GatherND", {d3, I64({0, 1, 1, 0}, {2, 2})}), F32({2, 3, 4, 5}, {2, 2})));
  EXPECT_TRUE(tensors_near(run1("GatherND", {d3, I64({0, 0, 1, 1, 0, 1}, {2, 1, 3})}),
                           F32({1, 5}, {2, 1})));
  // batch_dims 1: batch 0 takes row 1 of d3[0], batch 1 takes row 0 of d3[1].
  EXPECT_TRUE(tensors_near(run1("GatherND", {d3, I64({1, 0}, {2, 1})}, {{"batch_dims", 1}}),
                           F32({2, 3, 4, 5}, {2, 2})));
  EXPECT_TRUE(tensors_near(run1("GatherND", {d2, I64({-1, -2}, {1, 2})}), I32({2}, {1})));
}

TEST(ShapeGatherND, BadInputs) {
  HostTensor d = F32(iota_f(8), {2, 2, 2});
  EXPECT_TRUE(
      fails(run_op("GatherND", {d, I64({0, 0, 0, 0}, {1, 4})}), {"GatherND", "is 4", "[1, 3]"}));
  EXPECT_TRUE(fails(run_op("GatherND", {d, I64({0}, {1, 1})}, {{"batch_dims", 2}}),
                    {"GatherND", "batch_dims 2"}));
  EXPECT_TRUE(fails(run_op("GatherND", {d, I64({2}, {1, 1})}), {"GatherND", "index 2"}));
}

// ---------------- ScatterElements, ScatterND ----------------

TEST(ShapeScatterElements, Axis0) {
  auto out = run1("ScatterElements",
                  {F32(std::vector<float>(9, 0.f), {3, 3}), I64({1, 0, 2, 0, 2, 1}, {2, 3}),
                   F32({1.0f, 1.1f, 1.2f, 2.0f, 2.1f, 2.2f}, {2, 3})});
  EXPECT_TRUE(tensors_near(out, F32({2.0f, 1.1f, 0, 1.0f, 0, 2.2f, 0, 2.1f, 1.2f}, {3, 3})));
}

TEST(ShapeScatterElements, Axis1NegativeIndicesAndReductions) {
  HostTensor d = F32({1, 2, 3, 4, 5}, {1, 5});
  HostTensor u = F32({1.1f, 2.1f}, {1, 2});
  EXPECT_TRUE(tensors_near(run1("ScatterElements", {d, I64({1, 3}, {1, 2}), u}, {{"axis", 1}}),
                           F32({1, 1.1f, 3, 2.1f, 5}, {1, 5})));
  EXPECT_TRUE(tensors_near(run1("ScatterElements", {d, I64({1, -3}, {1, 2}), u}, {{"axis", -1}}),
                           F32({1, 1.1f, 2.1f, 4, 5}, {1, 5})));
  EXPECT_TRUE(tensors_near(
      run1("ScatterElements", {d, I64({1, 1}, {1, 2}), u}, {{"axis", 1}, {"reduction", "add"}}),
      F32({1, 5.2f, 3, 4, 5}, {1, 5})));
  EXPECT_TRUE(tensors_near(
      run1("ScatterElements", {d, I64({1, 1}, {1, 2}), u}, {{"axis", 1}, {"reduction", "mul"}}),
      F32({1, 4.62f, 3, 4, 5}, {1, 5})));
  EXPECT_TRUE(tensors_near(
      run1("ScatterElements", {I32({1, 2, 3}, {3}), I32({0, 0}, {2}), I32({5, 6}, {2})},
           {{"reduction", "add"}}),
      I32({12, 2, 3}, {3})));
}

// Indices as wide as the data beyond the axis (the fast kernel's form): an add with repeated
// rows, as message passing's scatter of edge messages onto nodes.
TEST(ShapeScatterElements, AddWithRepeatedRows) {
  EXPECT_TRUE(tensors_near(
      run1("ScatterElements",
           {F32(std::vector<float>(8, 0.f), {4, 2}), I64({1, 1, 3, 3, 1, 1}, {3, 2}),
            F32({1, 2, 3, 4, 5, 6}, {3, 2})},
           {{"reduction", "add"}}),
      F32({0, 0, 6, 8, 0, 0, 3, 4}, {4, 2})));
  EXPECT_TRUE(tensors_near(
      run1("ScatterElements",
           {F32({1, 2, 3, 4, 5, 6}, {2, 3}), I32({2, 0, 1, 2}, {2, 2}), F32({7, 8, 9, 10}, {2, 2})},
           {{"axis", 1}, {"reduction", "add"}}),
      F32({9, 2, 10, 4, 14, 16}, {2, 3})));
}

TEST(ShapeScatterElements, BadInputs) {
  HostTensor d = F32({1, 2, 3}, {3});
  EXPECT_TRUE(
      fails(run_op("ScatterElements", {d, I64({0}, {1}), F32({1}, {1})}, {{"reduction", "maximum"}}),
            {"ScatterElements", "'maximum'"}));
  EXPECT_TRUE(fails(run_op("ScatterElements", {d, I64({3}, {1}), F32({1}, {1})}),
                    {"ScatterElements", "index 3", "size 3"}));
  EXPECT_TRUE(fails(run_op("ScatterElements", {d, I64({0, 1}, {2}), F32({1}, {1})}),
                    {"ScatterElements", "[2]", "[1]"}));
}

TEST(ShapeScatterND, Examples) {
  EXPECT_TRUE(
      tensors_near(run1("ScatterND", {F32({1, 2, 3, 4, 5, 6, 7, 8}, {8}), I64({4, 3, 1, 7}, {4, 1}),
                                      F32({9, 10, 11, 12}, {4})}),
                   F32({1, 11, 3, 10, 9, 6, 7, 12}, {8})));
  HostTensor d = F32({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(tensors_near(run1("ScatterND", {d, I64({-1}, {1, 1}), F32({9, 9}, {1, 2})}),
                           F32({1, 2, 9, 9}, {2, 2})));
  EXPECT_TRUE(tensors_near(run1("ScatterND", {d, I64({0, 0}, {2, 1}), F32({1, 1, 2, 2}, {2, 2})},
                                {{"reduction", "add"}}),
                           F32({4, 5, 3, 4}, {2, 2})));
  EXPECT_TRUE(tensors_near(
      run1("ScatterND", {d, I64({0, 1, 1, 0}, {2, 2}), F32({5, 6}, {2})}, {{"reduction", "mul"}}),
      F32({1, 10, 18, 4}, {2, 2})));
}

TEST(ShapeScatterND, BadInputs) {
  HostTensor d = F32({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(fails(run_op("ScatterND", {d, I64({0}, {1, 1}), F32({9, 9, 9}, {1, 3})}),
                    {"ScatterND", "[1, 3]", "[1, 2]"}));
  EXPECT_TRUE(fails(run_op("ScatterND", {d, I64({2}, {1, 1}), F32({9, 9}, {1, 2})}),
                    {"ScatterND", "index 2"}));
  EXPECT_TRUE(fails(run_op("ScatterND", {d, I64({0, 0, 0}, {1, 3}), F32({9}, {1})}),
                    {"ScatterND", "is 3", "rank 2"}));
}

// ---------------- Shape, Size ----------------

TEST(ShapeShape, StartEnd) {
  HostTensor x(DType::kFloat16, {2, 3, 4});
  EXPECT_TRUE(tensors_near(run1("Shape", {x}), I64({2, 3, 4}, {3})));
  EXPECT_TRUE(tensors_near(run1("Shape", {x}, {{"start", 1}}), I64({3, 4}, {2})));
  EXPECT_TRUE(tensors_near(run1("Shape", {x}, {{"end", -1}}), I64({2, 3}, {2})));
  EXPECT_TRUE(tensors_near(run1("Shape", {x}, {{"start", -1}}), I64({4}, {1})));
  EXPECT_TRUE(tensors_near(run1("Shape", {x}, {{"start", 1}, {"end", 2}}), I64({3}, {1})));
  EXPECT_TRUE(tensors_near(run1("Shape", {x}, {{"start", -10}}), I64({2, 3, 4}, {3})));
  EXPECT_TRUE(tensors_near(run1("Shape", {x}, {{"end", 10}}), I64({2, 3, 4}, {3})));
  EXPECT_TRUE(tensors_near(run1("Shape", {x}, {{"start", 2}, {"end", 1}}), I64({}, {0})));
  EXPECT_TRUE(tensors_near(run1("Shape", {F32({1}, {})}), I64({}, {0})));
}

TEST(ShapeSize, CountsElements) {
  EXPECT_TRUE(tensors_near(run1("Size", {Bool({true, false, true, true, false, true}, {2, 3})}),
                           I64({6}, {})));
  EXPECT_TRUE(tensors_near(run1("Size", {F32({}, {3, 0})}), I64({0}, {})));
  EXPECT_TRUE(tensors_near(run1("Size", {F32({1}, {})}), I64({1}, {})));
}

// ---------------- Expand, Tile ----------------

TEST(ShapeExpand, Broadcasts) {
  HostTensor x = F32({1, 2, 3}, {3, 1});
  EXPECT_TRUE(tensors_near(run1("Expand", {x, I64({3, 4}, {2})}),
                           F32({1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}, {3, 4})));
  EXPECT_TRUE(tensors_near(run1("Expand", {x, I64({2, 1, 2}, {3})}),
                           F32({1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}, {2, 3, 2})));
  EXPECT_TRUE(tensors_near(run1("Expand", {x, I64({1}, {1})}), F32({1, 2, 3}, {3, 1})));
  EXPECT_TRUE(same_bits(run1("Expand", {F16({0.1f}, {}), I64({2}, {1})}), F16({0.1f, 0.1f}, {2})));
  EXPECT_TRUE(fails(run_op("Expand", {x, I64({2, 4}, {2})}), {"Expand", "[3, 1]", "[2, 4]"}));
  EXPECT_TRUE(fails(run_op("Expand", {x, I64({-1, 4}, {2})}), {"Expand", "negative"}));
}

TEST(ShapeTile, Repeats) {
  HostTensor x = I32({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(
      tensors_near(run1("Tile", {x, I64({2, 1}, {2})}), I32({1, 2, 3, 4, 1, 2, 3, 4}, {4, 2})));
  EXPECT_TRUE(
      tensors_near(run1("Tile", {x, I64({1, 2}, {2})}), I32({1, 2, 1, 2, 3, 4, 3, 4}, {2, 4})));
  EXPECT_TRUE(tensors_near(run1("Tile", {x, I64({0, 1}, {2})}), I32({}, {0, 2})));
  EXPECT_TRUE(fails(run_op("Tile", {x, I64({2}, {1})}), {"Tile", "1 entries", "rank 2"}));
  EXPECT_TRUE(fails(run_op("Tile", {x, I64({2, -1}, {2})}), {"Tile", "[2, -1]", "negative"}));
}

// ---------------- Pad ----------------

TEST(ShapePad, Constant) {
  HostTensor x = F32({1, 2, 3, 4}, {2, 2});
  // pads = [x0_begin, x1_begin, x0_end, x1_end]
  EXPECT_TRUE(tensors_near(run1("Pad", {x, I64({1, 0, 0, 1}, {4})}),
                           F32({0, 0, 0, 1, 2, 0, 3, 4, 0}, {3, 3})));
  EXPECT_TRUE(tensors_near(run1("Pad", {x, I64({0, 1, 0, 0}, {4}), F32({9}, {})}),
                           F32({9, 1, 2, 9, 3, 4}, {2, 3})));
  EXPECT_TRUE(tensors_near(run1("Pad", {I32({1, 2, 3}, {3}), I64({1, 1}, {2}), I32({-7}, {})}),
                           I32({-7, 1, 2, 3, -7}, {5})));
  EXPECT_TRUE(same_bits(run1("Pad", {F16({0.1f}, {1}), I64({1, 0}, {2}), F16({0.3f}, {})}),
                        F16({0.3f, 0.1f}, {2})));
}

TEST(ShapePad, ReflectAndEdge) {
  HostTensor x = F32({1.0f, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f}, {3, 2});
  EXPECT_TRUE(tensors_near(
      run1("Pad", {x, I64({0, 2, 0, 0}, {4})}, {{"mode", "reflect"}}),
      F32({1.0f, 1.2f, 1.0f, 1.2f, 2.3f, 3.4f, 2.3f, 3.4f, 4.5f, 5.7f, 4.5f, 5.7f}, {3, 4})));
  EXPECT_TRUE(tensors_near(
      run1("Pad", {x, I64({0, 2, 0, 0}, {4})}, {{"mode", "edge"}}),
      F32({1.0f, 1.0f, 1.0f, 1.2f, 2.3f, 2.3f, 2.3f, 3.4f, 4.5f, 4.5f, 4.5f, 5.7f}, {3, 4})));
  HostTensor v = F32({1, 2, 3}, {3});
  EXPECT_TRUE(tensors_near(run1("Pad", {v, I64({2, 2}, {2})}, {{"mode", "reflect"}}),
                           F32({3, 2, 1, 2, 3, 2, 1}, {7})));
  EXPECT_TRUE(tensors_near(run1("Pad", {v, I64({2, 1}, {2})}, {{"mode", "edge"}}),
                           F32({1, 1, 1, 2, 3, 3}, {6})));
  // Wider than the axis: reflection repeats (numpy's behaviour).
  EXPECT_TRUE(tensors_near(run1("Pad", {F32({1, 2}, {2}), I64({3, 0}, {2})}, {{"mode", "reflect"}}),
                           F32({2, 1, 2, 1, 2}, {5})));
}

TEST(ShapePad, NegativePadsCropAndAxesInput) {
  EXPECT_TRUE(tensors_near(run1("Pad", {F32({1, 2, 3, 4}, {4}), I64({-1, 1}, {2})}),
                           F32({2, 3, 4, 0}, {4})));
  EXPECT_TRUE(tensors_near(
      run1("Pad", {F32({1, 2, 3, 4}, {2, 2}), I64({1, 1}, {2}), none(), I64({-1}, {1})}),
      F32({0, 1, 2, 0, 0, 3, 4, 0}, {2, 4})));
}

TEST(ShapePad, BadInputs) {
  HostTensor x = F32({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(fails(run_op("Pad", {x, I64({1, 1}, {2})}), {"Pad", "2 entries", "expected 4"}));
  EXPECT_TRUE(
      fails(run_op("Pad", {x, I64({0, 0, 0, 0}, {4})}, {{"mode", "circular"}}), {"Pad", "'circular'"}));
  EXPECT_TRUE(fails(run_op("Pad", {x, I64({0, -2, 0, 1}, {4})}, {{"mode", "wrap"}}),
                    {"Pad", "'wrap'", "no elements"}));
  EXPECT_TRUE(fails(run_op("Pad", {x, I64({-3, 0, 0, 0}, {4})}), {"Pad", "negative"}));
  EXPECT_TRUE(fails(run_op("Pad", {F32({}, {0}), I64({1, 1}, {2})}, {{"mode", "edge"}}),
                    {"Pad", "'edge'", "no elements"}));
  EXPECT_TRUE(fails(run_op("Pad", {x, I64({0, 0, 0, 0}, {4}), I64({1}, {})}),
                    {"Pad", "constant_value is int64", "float32"}));
}

// ---------------- ConstantOfShape, Range ----------------

TEST(ShapeConstantOfShape, Values) {
  EXPECT_TRUE(tensors_near(run1("ConstantOfShape", {I64({2, 3}, {2})}),
                           F32(std::vector<float>(6, 0.f), {2, 3})));
  EXPECT_TRUE(tensors_near(run1("ConstantOfShape", {I64({3}, {1})}, {{"value", I32({5}, {1})}}),
                           I32({5, 5, 5}, {3})));
  EXPECT_TRUE(tensors_near(run1("ConstantOfShape", {I64({0}, {1})}, {{"value", I32({5}, {1})}}),
                           I32({}, {0})));
  EXPECT_TRUE(tensors_near(run1("ConstantOfShape", {I64({}, {0})}, {{"value", F32({2}, {1})}}),
                           F32({2}, {})));
  EXPECT_TRUE(same_bits(run1("ConstantOfShape", {I64({2}, {1})}, {{"value", F16({0.1f}, {1})}}),
                        F16({0.1f, 0.1f}, {2})));
  EXPECT_TRUE(fails(run_op("ConstantOfShape", {I64({2, -3}, {2})}),
                    {"ConstantOfShape", "[2, -3]", "negative"}));
  EXPECT_TRUE(fails(run_op("ConstantOfShape", {I64({2}, {1})}, {{"value", F32({1, 2}, {2})}}),
                    {"ConstantOfShape", "exactly one element", "[2]"}));
}

TEST(ShapeRange, Values) {
  EXPECT_TRUE(
      tensors_near(run1("Range", {F32({1}, {}), F32({5}, {}), F32({2}, {})}), F32({1, 3}, {2})));
  EXPECT_TRUE(
      tensors_near(run1("Range", {I32({10}, {}), I32({4}, {}), I32({-3}, {})}), I32({10, 7}, {2})));
  EXPECT_TRUE(tensors_near(run1("Range", {I64({0}, {}), I64({10}, {}), I64({3}, {})}),
                           I64({0, 3, 6, 9}, {4})));
  EXPECT_TRUE(
      tensors_near(run1("Range", {I64({5}, {}), I64({1}, {}), I64({1}, {})}), I64({}, {0})));
  EXPECT_TRUE(tensors_near(
      run1("Range", {make<double>({0.5}, {}), make<double>({2}, {}), make<double>({0.5}, {})}),
      make<double>({0.5, 1.0, 1.5}, {3})));
  EXPECT_TRUE(fails(run_op("Range", {I64({0}, {}), I64({3}, {}), I64({0}, {})}),
                    {"Range", "delta must not be 0"}));
  EXPECT_TRUE(fails(run_op("Range", {I64({0}, {}), I32({3}, {}), I64({1}, {})}),
                    {"Range", "limit is int32", "int64"}));
  EXPECT_TRUE(fails(run_op("Range", {I64({0, 1}, {2}), I64({3}, {}), I64({1}, {})}),
                    {"Range", "start must be a scalar", "[2]"}));
}

// ---------------- OneHot, NonZero ----------------

TEST(ShapeOneHot, Axes) {
  HostTensor values = F32({0, 1}, {2});
  EXPECT_TRUE(tensors_near(run1("OneHot", {I64({0, 2, -1, 5}, {4}), I64({3}, {}), values}),
                           F32({1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0}, {4, 3})));
  EXPECT_TRUE(tensors_near(run1("OneHot", {I64({1, 0}, {2}), I64({3}, {1}), values}, {{"axis", 0}}),
                           F32({0, 1, 1, 0, 0, 0}, {3, 2})));
  EXPECT_TRUE(tensors_near(
      run1("OneHot", {F32({1, 2}, {2}), F32({3}, {}), I32({2, 5}, {2})}, {{"axis", -2}}),
      I32({2, 2, 5, 2, 2, 5}, {3, 2})));
  EXPECT_TRUE(fails(run_op("OneHot", {I64({0}, {1}), I64({3}, {}), F32({0, 1, 2}, {3})}),
                    {"OneHot", "values", "[3]"}));
  EXPECT_TRUE(fails(run_op("OneHot", {I64({0}, {1}), I64({0}, {}), values}),
                    {"OneHot", "depth must be >= 1"}));
  EXPECT_TRUE(fails(run_op("OneHot", {I64({0}, {1}), I64({2}, {}), values}, {{"axis", 2}}),
                    {"OneHot", "axis 2", "rank 2"}));
}

TEST(ShapeNonZero, Indices) {
  EXPECT_TRUE(
      tensors_near(run1("NonZero", {F32({1, 0, 1, 1}, {2, 2})}), I64({0, 1, 1, 0, 0, 1}, {2, 3})));
  EXPECT_TRUE(tensors_near(run1("NonZero", {Bool({false, true, false}, {3})}), I64({1}, {1, 1})));
  EXPECT_TRUE(tensors_near(run1("NonZero", {I32({0, 0, 0, 0}, {2, 2})}), I64({}, {2, 0})));
  EXPECT_TRUE(tensors_near(run1("NonZero", {F16({0, -2.f}, {2})}), I64({1}, {1, 1})));
  EXPECT_TRUE(tensors_near(run1("NonZero", {I32({0, 7, 0, 0, 0, 9}, {1, 2, 3})}),
                           I64({0, 0, 0, 1, 1, 2}, {3, 2})));
}

// ---------------- Trilu, CumSum, TopK ----------------

const HostTensor kMat3 = F32({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});

TEST(ShapeTrilu, UpperLowerAndK) {
  EXPECT_TRUE(tensors_near(run1("Trilu", {kMat3}), F32({1, 2, 3, 0, 5, 6, 0, 0, 9}, {3, 3})));
  EXPECT_TRUE(tensors_near(run1("Trilu", {kMat3}, {{"upper", 0}}),
                           F32({1, 0, 0, 4, 5, 0, 7, 8, 9}, {3, 3})));
  EXPECT_TRUE(
      tensors_near(run1("Trilu", {kMat3, I64({1}, {})}), F32({0, 2, 3, 0, 0, 6, 0, 0, 0}, {3, 3})));
  EXPECT_TRUE(tensors_near(run1("Trilu", {kMat3, I64({-1}, {})}, {{"upper", 0}}),
                           F32({0, 0, 0, 4, 0, 0, 7, 8, 0}, {3, 3})));
  EXPECT_TRUE(tensors_near(run1("Trilu", {kMat3, I64({-7}, {})}), kMat3));
  EXPECT_TRUE(tensors_near(run1("Trilu", {F32(iota_f(6, 1), {2, 3}), I64({5}, {})}, {{"upper", 0}}),
                           F32(iota_f(6, 1), {2, 3})));
  // Batched, bool.
  EXPECT_TRUE(
      same_bits(run1("Trilu", {Bool({true, true, true, true, true, true, true, true}, {2, 2, 2})}),
                Bool({true, true, false, true, true, true, false, true}, {2, 2, 2})));
  EXPECT_TRUE(fails(run_op("Trilu", {F32({1, 2}, {2})}), {"Trilu", "rank >= 2", "[2]"}));
}

TEST(ShapeCumSum, Modes) {
  HostTensor x = F32({1, 2, 3, 4, 5}, {5});
  HostTensor axis = I32({0}, {});
  EXPECT_TRUE(tensors_near(run1("CumSum", {x, axis}), F32({1, 3, 6, 10, 15}, {5})));
  EXPECT_TRUE(
      tensors_near(run1("CumSum", {x, axis}, {{"exclusive", 1}}), F32({0, 1, 3, 6, 10}, {5})));
  EXPECT_TRUE(
      tensors_near(run1("CumSum", {x, axis}, {{"reverse", 1}}), F32({15, 14, 12, 9, 5}, {5})));
  EXPECT_TRUE(tensors_near(run1("CumSum", {x, axis}, {{"reverse", 1}, {"exclusive", 1}}),
                           F32({14, 12, 9, 5, 0}, {5})));
}

TEST(ShapeCumSum, AxesAndInts) {
  HostTensor m = F32({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(tensors_near(run1("CumSum", {m, I64({1}, {})}), F32({1, 3, 6, 4, 9, 15}, {2, 3})));
  EXPECT_TRUE(tensors_near(run1("CumSum", {m, I64({-2}, {})}), F32({1, 2, 3, 5, 7, 9}, {2, 3})));
  EXPECT_TRUE(
      tensors_near(run1("CumSum", {I32({-1, 5, -7}, {3}), I64({0}, {})}), I32({-1, 4, -3}, {3})));
  EXPECT_TRUE(fails(run_op("CumSum", {m, I64({2}, {})}), {"CumSum", "axis 2", "rank 2"}));
  EXPECT_TRUE(fails(run_op("CumSum", {m, F32({0}, {})}), {"CumSum", "int32 or int64"}));
}

TEST(ShapeTopK, LargestSmallestAxis) {
  HostTensor x = F32(iota_f(12), {3, 4});
  auto r = run_op("TopK", {x, I64({3}, {1})}, {}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], F32({3, 2, 1, 7, 6, 5, 11, 10, 9}, {3, 3})));
  EXPECT_TRUE(tensors_near((*r)[1], I64({3, 2, 1, 3, 2, 1, 3, 2, 1}, {3, 3})));
  auto s = run_op("TopK", {x, I64({2}, {1})}, {{"largest", 0}}, 2);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_TRUE(tensors_near((*s)[0], F32({0, 1, 4, 5, 8, 9}, {3, 2})));
  EXPECT_TRUE(tensors_near((*s)[1], I64({0, 1, 0, 1, 0, 1}, {3, 2})));
  auto a = run_op("TopK", {x, I64({2}, {1})}, {{"axis", -2}}, 2);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_TRUE(tensors_near((*a)[0], F32({8, 9, 10, 11, 4, 5, 6, 7}, {2, 4})));
  EXPECT_TRUE(tensors_near((*a)[1], I64({2, 2, 2, 2, 1, 1, 1, 1}, {2, 4})));
}

TEST(ShapeTopK, TiesTakeTheLowerIndexFirst) {
  auto r = run_op("TopK", {I32({3, 1, 3, 2}, {4}), I64({2}, {1})}, {}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], I32({3, 3}, {2})));
  EXPECT_TRUE(tensors_near((*r)[1], I64({0, 2}, {2})));
  auto s = run_op("TopK", {F32({2, 1, 2, 1}, {4}), I64({3}, {1})}, {{"largest", 0}}, 2);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_TRUE(tensors_near((*s)[0], F32({1, 1, 2}, {3})));
  EXPECT_TRUE(tensors_near((*s)[1], I64({1, 3, 0}, {3})));
}

TEST(ShapeTopK, BadK) {
  EXPECT_TRUE(
      fails(run_op("TopK", {F32({1, 2}, {2}), I64({3}, {1})}, {}, 2), {"TopK", "K 3", "size 2"}));
  EXPECT_TRUE(fails(run_op("TopK", {F32({1, 2}, {2}), I64({-1}, {1})}, {}, 2), {"TopK", "K -1"}));
  EXPECT_TRUE(fails(run_op("TopK", {F32({1, 2}, {2}), I32({1}, {1})}, {}, 2),
                    {"TopK", "K must be int64", "int32"}));
}

// ---------------- DepthToSpace, SpaceToDepth, EyeLike ----------------

// x = 0..47 in [1, 8, 2, 3], blocksize 2 (ONNX's examples).
const std::vector<float> kD2sDcr = {0,  12, 1,  13, 2,  14, 24, 36, 25, 37, 26, 38, 3,  15, 4,  16,
                                    5,  17, 27, 39, 28, 40, 29, 41, 6,  18, 7,  19, 8,  20, 30, 42,
                                    31, 43, 32, 44, 9,  21, 10, 22, 11, 23, 33, 45, 34, 46, 35, 47};
const std::vector<float> kD2sCrd = {0,  6,  1,  7,  2,  8,  12, 18, 13, 19, 14, 20, 3,  9,  4,  10,
                                    5,  11, 15, 21, 16, 22, 17, 23, 24, 30, 25, 31, 26, 32, 36, 42,
                                    37, 43, 38, 44, 27, 33, 28, 34, 29, 35, 39, 45, 40, 46, 41, 47};

TEST(ShapeDepthToSpace, DcrAndCrd) {
  HostTensor x = F32(iota_f(48), {1, 8, 2, 3});
  EXPECT_TRUE(
      tensors_near(run1("DepthToSpace", {x}, {{"blocksize", 2}}), F32(kD2sDcr, {1, 2, 4, 6})));
  EXPECT_TRUE(tensors_near(run1("DepthToSpace", {x}, {{"blocksize", 2}, {"mode", "CRD"}}),
                           F32(kD2sCrd, {1, 2, 4, 6})));
  EXPECT_TRUE(fails(run_op("DepthToSpace", {F32(iota_f(6), {1, 6, 1, 1})}, {{"blocksize", 2}}),
                    {"DepthToSpace", "channels 6", "4"}));
  EXPECT_TRUE(fails(run_op("DepthToSpace", {x}, {{"blocksize", 2}, {"mode", "XYZ"}}),
                    {"DepthToSpace", "'XYZ'"}));
  EXPECT_TRUE(fails(run_op("DepthToSpace", {x}), {"DepthToSpace", "'blocksize' is required"}));
}

TEST(ShapeSpaceToDepth, InvertsDcr) {
  EXPECT_TRUE(tensors_near(run1("SpaceToDepth", {F32(kD2sDcr, {1, 2, 4, 6})}, {{"blocksize", 2}}),
                           F32(iota_f(48), {1, 8, 2, 3})));
  // [1, 1, 2, 2] -> [1, 4, 1, 1]: channel (bh * 2 + bw).
  EXPECT_TRUE(same_bits(run1("SpaceToDepth", {F16({1, 2, 3, 4}, {1, 1, 2, 2})}, {{"blocksize", 2}}),
                        F16({1, 2, 3, 4}, {1, 4, 1, 1})));
  EXPECT_TRUE(fails(run_op("SpaceToDepth", {F32(iota_f(6), {1, 1, 3, 2})}, {{"blocksize", 2}}),
                    {"SpaceToDepth", "height 3", "blocksize 2"}));
}

TEST(ShapeEyeLike, DiagonalsAndDtype) {
  HostTensor x(DType::kFloat32, {3, 4});
  EXPECT_TRUE(
      tensors_near(run1("EyeLike", {x}), F32({1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}, {3, 4})));
  EXPECT_TRUE(tensors_near(run1("EyeLike", {x}, {{"k", 1}}),
                           F32({0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, {3, 4})));
  EXPECT_TRUE(tensors_near(run1("EyeLike", {x}, {{"k", -1}, {"dtype", 6}}),
                           I32({0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0}, {3, 4})));
  EXPECT_TRUE(
      tensors_near(run1("EyeLike", {I64({0, 0, 0, 0}, {2, 2})}), I64({1, 0, 0, 1}, {2, 2})));
  EXPECT_TRUE(
      tensors_near(run1("EyeLike", {x}, {{"k", 9}}), F32(std::vector<float>(12, 0), {3, 4})));
  EXPECT_TRUE(tensors_near(run1("EyeLike", {x}, {{"dtype", 10}}),
                           F16({1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}, {3, 4})));
  EXPECT_TRUE(fails(run_op("EyeLike", {F32({1}, {1})}), {"EyeLike", "rank 2", "[1]"}));
  EXPECT_TRUE(fails(run_op("EyeLike", {x}, {{"dtype", 8}}), {"EyeLike", "dtype 8"}));
}

// ---------------- inference with unknown values ----------------

Status infer(const Node& n, std::vector<TensorType> types, std::vector<const TensorView*> values,
             std::vector<TensorType>* out) {
  InferenceContext ctx(n, std::move(types), std::move(values));
  TD_RETURN_IF_ERROR(infer_node(OpRegistry::global(), ctx));
  *out = ctx.output_types();
  return OkStatus();
}

TEST(ShapeInference, UnknownValuesLeaveDimsUnknown) {
  std::vector<TensorType> out;
  Node reshape{"r", "Reshape", "", {"x", "s"}, {"y"}, {}};
  ASSERT_TRUE(infer(reshape, {{DType::kFloat32, {2, 3}}, {DType::kInt64, {3}}}, {}, &out).ok());
  EXPECT_EQ(out[0].shape, (Shape{-1, -1, -1}));
  Node slice{"s", "Slice", "", {"x", "a", "b"}, {"y"}, {}};
  ASSERT_TRUE(infer(slice, {{DType::kFloat32, {4, 5}}, {DType::kInt64, {1}}, {DType::kInt64, {1}}},
                    {}, &out)
                  .ok());
  EXPECT_EQ(out[0].shape, (Shape{-1, 5}));
  Node concat{"c", "Concat", "", {"a", "b"}, {"y"}, {{"axis", 1}}};
  ASSERT_TRUE(
      infer(concat, {{DType::kFloat32, {-1, 2}}, {DType::kFloat32, {4, -1}}}, {}, &out).ok());
  EXPECT_EQ(out[0].shape, (Shape{4, -1}));
  Node gather{"g", "Gather", "", {"a", "i"}, {"y"}, {{"axis", 1}}};
  ASSERT_TRUE(
      infer(gather, {{DType::kFloat16, {-1, 7, 3}}, {DType::kInt64, {2, 2}}}, {}, &out).ok());
  EXPECT_EQ(out[0], (TensorType{DType::kFloat16, {-1, 2, 2, 3}}));
}

TEST(ShapeInference, KnownValuesGiveShapes) {
  std::vector<TensorType> out;
  HostTensor axes = I64({0, -1}, {2});
  TensorView av = axes.view();
  Node unsq{"u", "Unsqueeze", "", {"x", "a"}, {"y"}, {}};
  ASSERT_TRUE(infer(unsq, {{DType::kBool, {-1, 3}}, axes.type()}, {nullptr, &av}, &out).ok());
  EXPECT_EQ(out[0], (TensorType{DType::kBool, {1, -1, 3, 1}}));
  HostTensor shape = I64({0, -1}, {2});
  TensorView sv = shape.view();
  ASSERT_TRUE(infer(Node{"r", "Reshape", "", {"x", "s"}, {"y"}, {}},
                    {{DType::kFloat32, {-1, 3, 4}}, shape.type()}, {nullptr, &sv}, &out)
                  .ok());
  EXPECT_EQ(out[0].shape, (Shape{-1, -1}));
}

}  // namespace
}  // namespace tensord::testing
