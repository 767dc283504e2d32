// Reference kernels and schemas of the miscellaneous math ops, against hand-computed values.
#include <initializer_list>
#include <limits>
#include <string>

#include "core/op_registry.h"
#include "kernels/op_test_util.h"

namespace tensord::testing {
namespace {

AttributeMap eq(const char* e) { return {{"equation", e}}; }

// ---------------- Einsum ----------------

TEST(MathEinsum, MatMulExplicitAndImplicit) {
  const HostTensor a = F32({1, 2, 3, 4}, {2, 2}), b = F32({5, 6, 7, 8}, {2, 2});
  EXPECT_TRUE(tensors_near(run1("Einsum", {a, b}, eq("ij,jk->ik")), F32({19, 22, 43, 50}, {2, 2})));
  EXPECT_TRUE(tensors_near(run1("Einsum", {a, b}, eq("ij, jk")), F32({19, 22, 43, 50}, {2, 2})));
  // Implicit output sorts the labels: "ik,ij" gives "jk" = a^T b.
  EXPECT_TRUE(tensors_near(run1("Einsum", {a, b}, eq("ij,ik")), F32({26, 30, 38, 44}, {2, 2})));
}

TEST(MathEinsum, TransposeSumAndOuter) {
  const HostTensor x = F32({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(tensors_near(run1("Einsum", {x}, eq("ij->ji")), F32({1, 4, 2, 5, 3, 6}, {3, 2})));
  EXPECT_TRUE(tensors_near(run1("Einsum", {x}, eq("ba")), F32({1, 4, 2, 5, 3, 6}, {3, 2})));
  EXPECT_TRUE(tensors_near(run1("Einsum", {x}, eq("ij->i")), F32({6, 15}, {2})));
  EXPECT_TRUE(tensors_near(run1("Einsum", {x}, eq("ij->")), F32({21}, {})));
  EXPECT_TRUE(tensors_near(run1("Einsum", {F32({1, 2}, {2}), F32({3, 4, 5}, {3})}, eq("i,j->ij")),
                           F32({3, 4, 5, 6, 8, 10}, {2, 3})));
}

TEST(MathEinsum, TraceAndDiagonal) {
  const HostTensor x = F32({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(tensors_near(run1("Einsum", {x}, eq("ii")), F32({5}, {})));
  EXPECT_TRUE(tensors_near(run1("Einsum", {x}, eq("ii->i")), F32({1, 4}, {2})));
  EXPECT_TRUE(
      tensors_near(run1("Einsum", {F32({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2})}, eq("...ii ->...i")),
                   F32({1, 4, 5, 8}, {2, 2})));
}

TEST(MathEinsum, EllipsisBroadcasting) {
  EXPECT_TRUE(tensors_near(
      run1("Einsum", {F32({1, 2, 3, 4, 5, 6}, {2, 3}), F32({1, 0, -1}, {3})}, eq("...j,j->...")),
      F32({-2, -2}, {2})));
  // Ellipses of different ranks align to the right and broadcast.
  EXPECT_TRUE(tensors_near(
      run1("Einsum", {F32({1, 2, 3, 4}, {2, 2}), F32({10, 100}, {2})}, eq("...,...->...")),
      F32({10, 200, 30, 400}, {2, 2})));
  // Batch matmul with a broadcast batch dim, implicit output ("...ik").
  EXPECT_TRUE(tensors_near(
      run1("Einsum", {F32({1, 2, 3, 4}, {2, 1, 2}), F32({1, 1}, {1, 2, 1})}, eq("...ij,...jk")),
      F32({3, 7}, {2, 1, 1})));
}

TEST(MathEinsum, UppercaseLabelsAndIntegers) {
  EXPECT_TRUE(tensors_near(run1("Einsum", {I64({1, 2, 3}, {3}), I64({4, 5, 6}, {3})}, eq("i,i")),
                           I64({32}, {})));
  EXPECT_TRUE(tensors_near(
      run1("Einsum", {I32({1, 2, 3, 4}, {2, 2}), I32({1, 0, 0, 1}, {2, 2})}, eq("Ab,bC->CA")),
      I32({1, 3, 2, 4}, {2, 2})));
  // 'A' < 'a' in the implicit order, as in numpy.
  EXPECT_TRUE(tensors_near(run1("Einsum", {F32({1, 2, 3, 4, 5, 6}, {2, 3})}, eq("aA")),
                           F32({1, 4, 2, 5, 3, 6}, {3, 2})));
}

TEST(MathEinsum, Float64ThreeOperands) {
  // sum_ij a_i b_ij c_j with a = [1, 2], b = [[1, 2], [3, 4]], c = [1, -1].
  auto y = run1("Einsum", {F64({1, 2}, {2}), F64({1, 2, 3, 4}, {2, 2}), F64({1, -1}, {2})},
                eq("i,ij,j->"));
  EXPECT_TRUE(tensors_near(y, F64({-3}, {})));
}

TEST(MathEinsum, BadEquations) {
  const HostTensor x = F32({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(fails(run_op("Einsum", {x}, eq("ij,jk->ik")),
                    {"Einsum", "'ij,jk->ik'", "2 input terms but there are 1 inputs"}));
  EXPECT_TRUE(
      fails(run_op("Einsum", {x}, eq("ijk->i")), {"Einsum", "term 'ijk' has 3 labels", "rank 2"}));
  EXPECT_TRUE(fails(run_op("Einsum", {x, F32({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2})}, eq("ij,jk")),
                    {"Einsum", "label 'j' has size 4", "[4, 2]", "but 3"}));
  EXPECT_TRUE(fails(run_op("Einsum", {x}, eq("ij->k")),
                    {"Einsum", "output label 'k' is not in any input"}));
  EXPECT_TRUE(fails(run_op("Einsum", {x}, eq("ij->ii")), {"Einsum", "'i' appears twice"}));
  EXPECT_TRUE(fails(run_op("Einsum", {x}, eq("i$")), {"Einsum", "invalid character '$'"}));
  EXPECT_TRUE(fails(run_op("Einsum", {x}, eq("i..")), {"Einsum", "'...'"}));
  EXPECT_TRUE(fails(run_op("Einsum", {x}), {"Einsum", "'equation' is required"}));
  EXPECT_TRUE(fails(run_op("Einsum", {x, I64({1, 2, 3}, {3})}, eq("ij,j")),
                    {"Einsum", "input 1 has dtype int64", "float32"}));
}

// ---------------- Det ----------------

TEST(MathDet, TwoByTwoBatchAndPivoting) {
  EXPECT_TRUE(tensors_near(run1("Det", {F32({1, 2, 3, 4}, {2, 2})}), F32({-2}, {})));
  EXPECT_TRUE(tensors_near(run1("Det", {F32({1, 2, 3, 4, 2, 0, 0, 3, 0, 1, 1, 0}, {3, 2, 2})}),
                           F32({-2, 6, -1}, {3})));
}

TEST(MathDet, ThreeByThreeFloat64AndFloat16) {
  EXPECT_TRUE(tensors_near(run1("Det", {F64({6, 1, 1, 4, -2, 5, 2, 8, 7}, {3, 3})}),
                           F64({-306}, {}), 1e-12, 1e-9));
  EXPECT_TRUE(tensors_near(run1("Det", {F16({2, 0, 0, 0.5f}, {1, 2, 2})}), F16({1}, {1})));
  // Singular.
  EXPECT_TRUE(tensors_near(run1("Det", {F32({1, 2, 2, 4}, {2, 2})}), F32({0}, {})));
}

TEST(MathDet, BadInputs) {
  EXPECT_TRUE(fails(run_op("Det", {F32({1, 2, 3, 4, 5, 6}, {2, 3})}), {"Det", "square", "[2, 3]"}));
  EXPECT_TRUE(fails(run_op("Det", {F32({1, 2}, {2})}), {"Det", "rank >= 2", "[2]"}));
  EXPECT_TRUE(fails(run_op("Det", {I64({1, 2, 3, 4}, {2, 2})}), {"Det", "int64"}));
}

// ---------------- Compress ----------------

TEST(MathCompress, AlongAxes) {
  const HostTensor x = F32({1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_TRUE(tensors_near(run1("Compress", {x, Bool({false, true, true}, {3})}, {{"axis", 0}}),
                           F32({3, 4, 5, 6}, {2, 2})));
  EXPECT_TRUE(tensors_near(run1("Compress", {x, Bool({false, true}, {2})}, {{"axis", 1}}),
                           F32({2, 4, 6}, {3, 1})));
  EXPECT_TRUE(tensors_near(run1("Compress", {x, Bool({false, true}, {2})}, {{"axis", -1}}),
                           F32({2, 4, 6}, {3, 1})));
}

TEST(MathCompress, FlattenedShortConditionAndNoneSelected) {
  const HostTensor x = I64({1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_TRUE(tensors_near(run1("Compress", {x, Bool({false, true, false, false, true}, {5})}),
                           I64({2, 5}, {2})));
  EXPECT_TRUE(tensors_near(run1("Compress", {x, Bool({false, false}, {2})}, {{"axis", 1}}),
                           I64({}, {3, 0})));
}

TEST(MathCompress, BadInputs) {
  const HostTensor x = F32({1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_TRUE(fails(run_op("Compress", {x, Bool({true, true, true}, {3})}, {{"axis", 1}}),
                    {"Compress", "condition has 3 values but the axis has 2"}));
  EXPECT_TRUE(fails(run_op("Compress", {x, I64({1}, {1})}), {"Compress", "int64", "bool"}));
  EXPECT_TRUE(fails(run_op("Compress", {x, Bool({true}, {1})}, {{"axis", 2}}),
                    {"Compress", "axis 2", "[3, 2]"}));
}

// ---------------- Unique ----------------

TEST(MathUnique, SortedWithoutAxis) {
  auto r = run_op("Unique", {F32({2, 1, 1, 3, 4, 3}, {6})}, {}, 4);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], F32({1, 2, 3, 4}, {4})));
  EXPECT_TRUE(tensors_near((*r)[1], I64({1, 0, 3, 4}, {4})));
  EXPECT_TRUE(tensors_near((*r)[2], I64({1, 0, 0, 2, 3, 2}, {6})));
  EXPECT_TRUE(tensors_near((*r)[3], I64({2, 1, 2, 1}, {4})));
}

TEST(MathUnique, UnsortedKeepsFirstOccurrenceOrder) {
  auto r = run_op("Unique", {F32({2, 1, 1, 3, 4, 3}, {6})}, {{"sorted", 0}}, 4);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], F32({2, 1, 3, 4}, {4})));
  EXPECT_TRUE(tensors_near((*r)[1], I64({0, 1, 3, 4}, {4})));
  EXPECT_TRUE(tensors_near((*r)[2], I64({0, 1, 1, 2, 3, 2}, {6})));
  EXPECT_TRUE(tensors_near((*r)[3], I64({1, 2, 2, 1}, {4})));
}

TEST(MathUnique, RowsAlongAxis0) {
  auto r = run_op("Unique", {F32({1, 0, 0, 1, 0, 0, 2, 3, 4}, {3, 3})}, {{"axis", 0}}, 4);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], F32({1, 0, 0, 2, 3, 4}, {2, 3})));
  EXPECT_TRUE(tensors_near((*r)[1], I64({0, 2}, {2})));
  EXPECT_TRUE(tensors_near((*r)[2], I64({0, 0, 1}, {3})));
  EXPECT_TRUE(tensors_near((*r)[3], I64({2, 1}, {2})));
}

TEST(MathUnique, ColumnsAlongNegativeAxis) {
  // Columns [1, 1, 2], [0, 0, 3], [0, 0, 3]: sorted, [0, 0, 3] comes first.
  auto r = run_op("Unique", {F32({1, 0, 0, 1, 0, 0, 2, 3, 3}, {3, 3})}, {{"axis", -1}}, 4);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], F32({0, 1, 0, 1, 3, 2}, {3, 2})));
  EXPECT_TRUE(tensors_near((*r)[1], I64({1, 0}, {2})));
  EXPECT_TRUE(tensors_near((*r)[2], I64({1, 0, 0}, {3})));
  EXPECT_TRUE(tensors_near((*r)[3], I64({2, 1}, {2})));
}

TEST(MathUnique, OneOutputIntegersAndNaN) {
  EXPECT_TRUE(tensors_near(run1("Unique", {I32({5, -1, 5, 7}, {2, 2})}), I32({-1, 5, 7}, {3})));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto r = run_op("Unique", {F32({nan, 1, nan}, {3})}, {}, 4);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_near((*r)[0], F32({1, nan}, {2})));
  EXPECT_TRUE(tensors_near((*r)[3], I64({1, 2}, {2})));
}

TEST(MathUnique, BadInputs) {
  EXPECT_TRUE(
      fails(run_op("Unique", {F32({1, 2}, {2})}, {{"axis", 1}}), {"Unique", "axis 1", "[2]"}));
  EXPECT_TRUE(fails(run_op("Unique", {F32({1, 2}, {2})}, {{"sorted", 2}}),
                    {"Unique", "sorted must be 0 or 1, got 2"}));
}

// ---------------- ReverseSequence ----------------

TEST(MathReverseSequence, BatchAxis0) {
  auto y = run1(
      "ReverseSequence",
      {F32({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {4, 4}), I64({1, 2, 3, 4}, {4})},
      {{"batch_axis", 0}, {"time_axis", 1}});
  EXPECT_TRUE(tensors_near(y, F32({0, 1, 2, 3, 5, 4, 6, 7, 10, 9, 8, 11, 15, 14, 13, 12}, {4, 4})));
}

TEST(MathReverseSequence, DefaultTimeMajorWithInnerDims) {
  // x [time 3, batch 2, 2]; batch 0 reverses 3 steps, batch 1 reverses 0.
  auto y = run1("ReverseSequence",
                {I64({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 2, 2}), I64({3, 0}, {2})});
  EXPECT_TRUE(tensors_near(y, I64({9, 10, 3, 4, 5, 6, 7, 8, 1, 2, 11, 12}, {3, 2, 2})));
}

TEST(MathReverseSequence, BadInputs) {
  const HostTensor x = F32({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(fails(run_op("ReverseSequence", {x, I64({1, 5}, {2})}),
                    {"ReverseSequence", "sequence_lens[1] is 5", "[0, 2]"}));
  EXPECT_TRUE(
      fails(run_op("ReverseSequence", {x, I64({1, 1}, {2})}, {{"batch_axis", 0}, {"time_axis", 0}}),
            {"ReverseSequence", "got 0 and 0"}));
  EXPECT_TRUE(fails(run_op("ReverseSequence", {x, I64({1, 1, 1}, {3})}),
                    {"ReverseSequence", "sequence_lens has shape [3], expected [2]"}));
  EXPECT_TRUE(fails(run_op("ReverseSequence", {x, I32({1, 1}, {2})}),
                    {"ReverseSequence", "int32", "int64"}));
}

// ---------------- Shrink, Mish ----------------

TEST(MathShrink, HardSoftAndInt8) {
  const HostTensor x = F32({-2, -1, 0, 1, 2}, {5});
  EXPECT_TRUE(tensors_near(run1("Shrink", {x}, {{"lambd", 1.5f}}), F32({-2, 0, 0, 0, 2}, {5})));
  EXPECT_TRUE(tensors_near(run1("Shrink", {x}, {{"lambd", 1.5f}, {"bias", 1.5f}}),
                           F32({-0.5f, 0, 0, 0, 0.5f}, {5})));
  // Defaults: lambd 0.5, bias 0.
  EXPECT_TRUE(tensors_near(run1("Shrink", {F32({-0.5f, 0.6f}, {2})}), F32({0, 0.6f}, {2})));
  EXPECT_TRUE(
      tensors_near(run1("Shrink", {I8({-3, -1, 0, 2, 5}, {5})}, {{"lambd", 1.5f}, {"bias", 1.0f}}),
                   I8({-2, 0, 0, 1, 4}, {5})));
  EXPECT_TRUE(fails(run_op("Shrink", {Bool({true}, {1})}), {"Shrink", "bool"}));
}

TEST(MathMish, Values) {
  // mish(1) = tanh(ln(1 + e)) = 0.86509839; mish(-1) = -tanh(ln(1 + 1/e)) = -0.30340147.
  EXPECT_TRUE(
      tensors_near(run1("Mish", {F32({0, 1, -1}, {3})}), F32({0, 0.86509839f, -0.30340147f}, {3})));
  EXPECT_TRUE(tensors_near(run1("Mish", {F64({100, -100}, {2})}), F64({100, 0}, {2}), 1e-9, 1e-12));
  EXPECT_TRUE(fails(run_op("Mish", {I32({1}, {1})}), {"Mish", "int32"}));
}

// ---------------- window functions ----------------

TEST(MathWindow, HannPeriodicAndSymmetric) {
  EXPECT_TRUE(tensors_near(run1("HannWindow", {I64({4}, {})}), F32({0, 0.5f, 1, 0.5f}, {4})));
  EXPECT_TRUE(tensors_near(run1("HannWindow", {I32({5}, {})}, {{"periodic", 0}}),
                           F32({0, 0.5f, 1, 0.5f, 0}, {5})));
}

TEST(MathWindow, HammingAndBlackman) {
  // Hamming: 25/46 - 21/46 cos(2 pi n / N).
  EXPECT_TRUE(tensors_near(run1("HammingWindow", {I64({4}, {})}),
                           F32({0.08695652f, 0.54347826f, 1, 0.54347826f}, {4})));
  EXPECT_TRUE(tensors_near(run1("BlackmanWindow", {I64({4}, {})}), F32({0, 0.34f, 1, 0.34f}, {4}),
                           1e-5, 1e-6));
  EXPECT_TRUE(tensors_near(run1("BlackmanWindow", {I64({3}, {})}, {{"periodic", 0}}),
                           F32({0, 1, 0}, {3}), 1e-5, 1e-6));
}

TEST(MathWindow, OutputDatatypesAndEdgeSizes) {
  EXPECT_TRUE(tensors_near(run1("HannWindow", {I64({2}, {})}, {{"output_datatype", 11}}),
                           F64({0, 1}, {2})));
  EXPECT_TRUE(tensors_near(run1("HannWindow", {I64({2}, {})}, {{"output_datatype", 10}}),
                           F16({0, 1}, {2})));
  EXPECT_TRUE(tensors_near(run1("HannWindow", {I64({0}, {})}), F32({}, {0})));
  EXPECT_TRUE(
      tensors_near(run1("HammingWindow", {I64({1}, {})}, {{"periodic", 0}}), F32({1}, {1})));
}

TEST(MathWindow, BadInputs) {
  EXPECT_TRUE(
      fails(run_op("HannWindow", {I64({-1}, {})}), {"HannWindow", "size must be >= 0, got -1"}));
  EXPECT_TRUE(
      fails(run_op("HannWindow", {F32({4}, {})}), {"HannWindow", "float32", "int32 or int64"}));
  EXPECT_TRUE(fails(run_op("HannWindow", {I64({4}, {})}, {{"output_datatype", 9}}),
                    {"HannWindow", "'output_datatype' is 9"}));
  EXPECT_TRUE(fails(run_op("HannWindow", {I64({4}, {})}, {{"periodic", 3}}),
                    {"HannWindow", "periodic must be 0 or 1, got 3"}));
}

// ---------------- DFT ----------------

TEST(MathDFT, RealInputFullAndOnesided) {
  // DFT of [1, 2, 3, 4]: [10, -2+2i, -2, -2-2i].
  const HostTensor x = F32({1, 2, 3, 4}, {1, 4, 1});
  EXPECT_TRUE(
      tensors_near(run1("DFT", {x}), F32({10, 0, -2, 2, -2, 0, -2, -2}, {1, 4, 2}), 1e-5, 1e-5));
  EXPECT_TRUE(tensors_near(run1("DFT", {x}, {{"onesided", 1}}),
                           F32({10, 0, -2, 2, -2, 0}, {1, 3, 2}), 1e-5, 1e-5));
  EXPECT_TRUE(tensors_near(run1("DFT", {x}, {{"axis", -2}}),
                           F32({10, 0, -2, 2, -2, 0, -2, -2}, {1, 4, 2}), 1e-5, 1e-5));
}

TEST(MathDFT, InverseOfComplexInput) {
  auto y = run1("DFT", {F64({10, 0, -2, 2, -2, 0, -2, -2}, {1, 4, 2})}, {{"inverse", 1}});
  EXPECT_TRUE(tensors_near(y, F64({1, 0, 2, 0, 3, 0, 4, 0}, {1, 4, 2}), 1e-9, 1e-9));
}

TEST(MathDFT, DftLengthPadsOrTruncates) {
  // [1, 1] padded to 4: [2, 1-i, 0, 1+i]; [1, 2, 3, 4] truncated to 2: [3, -1].
  EXPECT_TRUE(tensors_near(run1("DFT", {F32({1, 1}, {1, 2, 1}), I64({4}, {})}),
                           F32({2, 0, 1, -1, 0, 0, 1, 1}, {1, 4, 2}), 1e-5, 1e-5));
  EXPECT_TRUE(tensors_near(run1("DFT", {F32({1, 2, 3, 4}, {1, 4, 1}), I32({2}, {})}),
                           F32({3, 0, -1, 0}, {1, 2, 2}), 1e-5, 1e-5));
}

TEST(MathDFT, OtherAxis) {
  // Along axis 2 of [[1, 2], [3, 4]]: rows [3, -1] and [7, -1].
  EXPECT_TRUE(tensors_near(run1("DFT", {F32({1, 2, 3, 4}, {1, 2, 2, 1})}, {{"axis", 2}}),
                           F32({3, 0, -1, 0, 7, 0, -1, 0}, {1, 2, 2, 2}), 1e-5, 1e-5));
}

TEST(MathDFT, BadInputs) {
  const HostTensor x = F32({1, 2, 3, 4}, {1, 4, 1});
  EXPECT_TRUE(fails(run_op("DFT", {x}, {{"axis", -1}}), {"DFT", "axis -1 is out of range"}));
  EXPECT_TRUE(fails(run_op("DFT", {x}, {{"axis", 2}}), {"DFT", "axis 2 is out of range"}));
  EXPECT_TRUE(fails(run_op("DFT", {F32({1, 2, 3}, {1, 3})}), {"DFT", "last dim", "[1, 3]"}));
  EXPECT_TRUE(fails(run_op("DFT", {x, I64({0}, {})}), {"DFT", "dft_length must be >= 1, got 0"}));
  EXPECT_TRUE(fails(run_op("DFT", {I32({1}, {1, 1})}), {"DFT", "int32"}));
}

// ---------------- STFT ----------------

TEST(MathSTFT, FrameLengthWithoutWindow) {
  // Frames [1, 2] and [3, 4]; onesided (default) keeps 2 of 2 bins.
  auto y = run1("STFT", {F32({1, 2, 3, 4}, {1, 4, 1}), I64({2}, {}), HostTensor(), I64({2}, {})});
  EXPECT_TRUE(tensors_near(y, F32({3, 0, -1, 0, 7, 0, -1, 0}, {1, 2, 2, 2}), 1e-5, 1e-5));
}

TEST(MathSTFT, WindowTwoSidedStepOne) {
  // Frames [1, 2] * [1, 0.5] = [1, 1] and [2, 3] * [1, 0.5] = [2, 1.5].
  auto y = run1("STFT", {F32({1, 2, 3}, {1, 3, 1}), I64({1}, {}), F32({1, 0.5f}, {2})},
                {{"onesided", 0}});
  EXPECT_TRUE(tensors_near(y, F32({2, 0, 0, 0, 3.5f, 0, 0.5f, 0}, {1, 2, 2, 2}), 1e-5, 1e-5));
}

TEST(MathSTFT, OnesidedBinsOfLongerFrame) {
  // One frame [1, 0, -1, 0]: DFT [0, 2, 0, 2]; onesided keeps 3 bins.
  auto y = run1("STFT", {F32({1, 0, -1, 0}, {1, 4, 1}), I64({4}, {}), HostTensor(), I64({4}, {})});
  EXPECT_TRUE(tensors_near(y, F32({0, 0, 2, 0, 0, 0}, {1, 1, 3, 2}), 1e-5, 1e-5));
}

TEST(MathSTFT, BadInputs) {
  const HostTensor x = F32({1, 2, 3, 4}, {1, 4, 1});
  EXPECT_TRUE(fails(run_op("STFT", {x, I64({1}, {}), HostTensor(), I64({5}, {})}),
                    {"STFT", "frame length 5 is longer than the signal (4 samples)"}));
  EXPECT_TRUE(fails(run_op("STFT", {x, I64({1}, {}), F32({1, 1}, {2}), I64({3}, {})}),
                    {"STFT", "frame_length is 3 but the window has 2 values"}));
  EXPECT_TRUE(fails(run_op("STFT", {x, I64({1}, {})}), {"STFT", "window or a frame_length"}));
  EXPECT_TRUE(fails(run_op("STFT", {x, I64({0}, {}), HostTensor(), I64({2}, {})}),
                    {"STFT", "frame_step must be >= 1, got 0"}));
  EXPECT_TRUE(fails(run_op("STFT", {F32({1, 2}, {2, 1}), I64({1}, {})}),
                    {"STFT", "[batch, length, 1 or 2]", "[2, 1]"}));
}

// ---------------- MelWeightMatrix ----------------

TEST(MathMelWeightMatrix, EightBinsOf16PointDft) {
  // Edges (mel-spaced, in DFT bins) are [0, 0, 0, 1, 1, 2, 3, 4, 5, 6]: degenerate triangles
  // put a 1 at their center.
  std::vector<float> want(9 * 8, 0.0f);
  const int ones[][2] = {{0, 0}, {0, 1}, {1, 2}, {1, 3}, {2, 4}, {3, 5}, {4, 6}, {5, 7}};
  for (const auto& rc : ones) want[static_cast<size_t>(rc[0] * 8 + rc[1])] = 1;
  auto y = run1("MelWeightMatrix",
                {I32({8}, {}), I32({16}, {}), I32({8192}, {}), F32({0}, {}), F32({4096}, {})});
  EXPECT_TRUE(tensors_near(y, F32(want, {9, 8})));
  y = run1("MelWeightMatrix",
           {I64({8}, {}), I64({16}, {}), I64({8192}, {}), F32({0}, {}), F32({4096}, {})},
           {{"output_datatype", 11}});
  EXPECT_EQ(y.dtype(), DType::kFloat64);
}

TEST(MathMelWeightMatrix, RisingAndFallingSlopes) {
  // One mel bin over [0, 4000] Hz of a 64-point DFT at 8000 Hz. The mel scale puts its edges
  // at 0, 620.7 and 1791.7 Hz (0, 1/3 and 2/3 of 2146.1 mel), i.e. DFT bins floor(65 f / 8000)
  // = 0, 5 and 14: the triangle rises over bins 0..5 and falls over 5..14.
  auto y = run1("MelWeightMatrix",
                {I64({1}, {}), I64({64}, {}), I64({8000}, {}), F32({0}, {}), F32({4000}, {})});
  ASSERT_EQ(y.shape(), (Shape{33, 1}));
  const float* v = y.data<float>();
  EXPECT_FLOAT_EQ(v[0], 0.0f);
  EXPECT_FLOAT_EQ(v[1], 0.2f);
  EXPECT_FLOAT_EQ(v[5], 1.0f);
  EXPECT_FLOAT_EQ(v[6], 8.0f / 9);
  EXPECT_FLOAT_EQ(v[13], 1.0f / 9);
  EXPECT_FLOAT_EQ(v[14], 0.0f);
  EXPECT_FLOAT_EQ(v[32], 0.0f);
}

TEST(MathMelWeightMatrix, BadInputs) {
  EXPECT_TRUE(fails(run_op("MelWeightMatrix", {I64({0}, {}), I64({16}, {}), I64({8192}, {}),
                                               F32({0}, {}), F32({4096}, {})}),
                    {"MelWeightMatrix", "num_mel_bins must be >= 1, got 0"}));
  EXPECT_TRUE(fails(run_op("MelWeightMatrix", {I64({8}, {}), I64({16}, {}), I64({8192}, {}),
                                               F32({100}, {}), F32({50}, {})}),
                    {"MelWeightMatrix", "lower_edge_hertz <= upper_edge_hertz", "100", "50"}));
  EXPECT_TRUE(fails(run_op("MelWeightMatrix", {I64({8}, {}), I64({16}, {}), I64({100}, {}),
                                               F32({0}, {}), F32({4096}, {})}),
                    {"MelWeightMatrix", "upper_edge_hertz 4096", "beyond the 9 bins"}));
  EXPECT_TRUE(fails(run_op("MelWeightMatrix", {F32({8}, {}), I64({16}, {}), I64({8192}, {}),
                                               F32({0}, {}), F32({4096}, {})}),
                    {"MelWeightMatrix", "num_mel_bins", "float32"}));
}

// ---------------- random generators ----------------

TEST(MathRandom, SeededUniformMatchesNumpyRandomState) {
  // numpy.random.RandomState(0).rand(3).
  auto y = run1("RandomUniform", {},
                {{"seed", 0.0f}, {"dtype", 11}, {"shape", std::vector<int64_t>{3}}});
  EXPECT_TRUE(tensors_near(
      y, F64({0.5488135039273248, 0.7151893663724195, 0.6027633760716439}, {3}), 0, 0));
  y = run1("RandomUniform", {},
           {{"seed", 0.0f}, {"low", 2.0f}, {"high", 4.0f}, {"shape", std::vector<int64_t>{1, 2}}});
  EXPECT_TRUE(tensors_near(y, F32({3.0976270f, 3.4303787f}, {1, 2})));
}

TEST(MathRandom, SeededNormalMatchesNumpyRandomState) {
  // numpy.random.RandomState(0).randn(3).
  auto y =
      run1("RandomNormal", {}, {{"seed", 0.0f}, {"dtype", 11}, {"shape", std::vector<int64_t>{3}}});
  EXPECT_TRUE(tensors_near(y, F64({1.764052345967664, 0.4001572083672233, 0.9787379841057392}, {3}),
                           1e-15, 0));
  y = run1("RandomNormalLike", {I32({0, 0}, {2})},
           {{"seed", 0.0f}, {"mean", 1.0f}, {"scale", 2.0f}, {"dtype", 1}});
  EXPECT_TRUE(tensors_near(y, F32({4.5281047f, 1.8003144f}, {2})));
}

TEST(MathRandom, UnseededShapesTypesAndRange) {
  auto y = run1("RandomUniformLike", {F16({0, 0, 0, 0, 0, 0}, {2, 3})},
                {{"low", -1.0f}, {"high", 1.0f}});
  EXPECT_EQ(y.type(), (TensorType{DType::kFloat16, {2, 3}}));
  for (double v : y.to_double_vector()) {
    EXPECT_GE(v, -1.0);
    EXPECT_LE(v, 1.0);
  }
  auto n = run1("RandomNormal", {}, {{"shape", std::vector<int64_t>{4000}}});
  double mean = 0, sq = 0;
  for (double v : n.to_double_vector()) {
    mean += v / 4000;
    sq += v * v / 4000;
  }
  EXPECT_NEAR(mean, 0.0, 0.1);
  EXPECT_NEAR(sq, 1.0, 0.1);
}

TEST(MathRandom, BadInputs) {
  EXPECT_TRUE(
      fails(run_op("RandomUniform", {}, {{"dtype", 1}}), {"RandomUniform", "'shape' is required"}));
  EXPECT_TRUE(fails(run_op("RandomUniform", {}, {{"shape", std::vector<int64_t>{2}}, {"dtype", 6}}),
                    {"RandomUniform", "'dtype' is 6"}));
  EXPECT_TRUE(fails(run_op("RandomUniform", {},
                           {{"shape", std::vector<int64_t>{2}}, {"low", 2.0f}, {"high", 1.0f}}),
                    {"RandomUniform", "low (2) must not exceed high (1)"}));
  EXPECT_TRUE(fails(run_op("RandomNormalLike", {I32({0}, {1})}),
                    {"RandomNormalLike", "input has dtype int32"}));
  EXPECT_TRUE(fails(run_op("RandomNormal", {}, {{"shape", std::vector<int64_t>{-2}}}),
                    {"RandomNormal", "negative dim"}));
}

TEST(MathBernoulli, SeededMatchesNumpyBinomial) {
  // RandomState(0) draws 0.5488, 0.7152, 0.6028, 0.5449, 0.4237: with p = 0.5 each draw above
  // 0.5 gives 1. p = 0 takes no draw, p = 1 always gives 1.
  auto y = run1("Bernoulli", {F64({0.5, 0.5, 0.5, 0.5, 0.5}, {5})}, {{"seed", 0.0f}});
  EXPECT_TRUE(tensors_near(y, F64({1, 1, 1, 1, 0}, {5})));
  y = run1("Bernoulli", {F32({0, 1, 0.5f}, {3})}, {{"seed", 0.0f}, {"dtype", 9}});
  EXPECT_EQ(y.dtype(), DType::kBool);
  EXPECT_EQ(y.to_double_vector(), (std::vector<double>{0, 1, 1}));
}

TEST(MathBernoulli, UnseededFrequencyAndDtypes) {
  auto y = run1("Bernoulli", {F32(std::vector<float>(4000, 0.3f), {4000})}, {{"dtype", 7}});
  EXPECT_EQ(y.dtype(), DType::kInt64);
  double mean = 0;
  for (double v : y.to_double_vector()) mean += v / 4000;
  EXPECT_NEAR(mean, 0.3, 0.05);
  EXPECT_TRUE(
      fails(run_op("Bernoulli", {F32({0.5f, 1.5f}, {2})}), {"Bernoulli", "[0, 1], got 1.5 at 1"}));
  EXPECT_TRUE(fails(run_op("Bernoulli", {I32({1}, {1})}), {"Bernoulli", "int32"}));
}

// ---------------- inference ----------------

Status infer(const Node& n, std::vector<TensorType> types, std::vector<const TensorView*> values,
             std::vector<TensorType>* out) {
  InferenceContext ctx(n, std::move(types), std::move(values));
  TD_RETURN_IF_ERROR(infer_node(OpRegistry::global(), ctx));
  *out = ctx.output_types();
  return OkStatus();
}

TEST(MathInference, DataDependentShapes) {
  std::vector<TensorType> out;
  Node compress{"c", "Compress", "", {"x", "c"}, {"y"}, {{"axis", 1}}};
  ASSERT_TRUE(infer(compress, {{DType::kFloat32, {2, 3}}, {DType::kBool, {3}}}, {}, &out).ok());
  EXPECT_EQ(out[0].shape, (Shape{2, -1}));
  const HostTensor cond = Bool({true, false, true}, {3});
  const TensorView cv = cond.view();
  ASSERT_TRUE(
      infer(compress, {{DType::kFloat32, {2, 3}}, {DType::kBool, {3}}}, {nullptr, &cv}, &out).ok());
  EXPECT_EQ(out[0].shape, (Shape{2, 2}));

  Node unique{"u", "Unique", "", {"x"}, {"y", "i", "inv", "n"}, {{"axis", 0}}};
  ASSERT_TRUE(infer(unique, {{DType::kInt32, {4, 2}}}, {}, &out).ok());
  EXPECT_EQ(out[0], (TensorType{DType::kInt32, {-1, 2}}));
  EXPECT_EQ(out[2], (TensorType{DType::kInt64, {4}}));

  Node window{"w", "HannWindow", "", {"n"}, {"y"}, {}};
  ASSERT_TRUE(infer(window, {{DType::kInt64, {}}}, {}, &out).ok());
  EXPECT_EQ(out[0].shape, (Shape{-1}));

  Node einsum{"e", "Einsum", "", {"a", "b"}, {"y"}, {{"equation", "bij,bjk->bik"}}};
  ASSERT_TRUE(
      infer(einsum, {{DType::kFloat32, {-1, 2, 3}}, {DType::kFloat32, {5, 3, -1}}}, {}, &out).ok());
  EXPECT_EQ(out[0].shape, (Shape{5, 2, -1}));

  Node dft{"d", "DFT", "", {"x", "n"}, {"y"}, {{"onesided", 1}}};
  ASSERT_TRUE(infer(dft, {{DType::kFloat32, {2, 8, 1}}, {DType::kInt64, {}}}, {}, &out).ok());
  EXPECT_EQ(out[0].shape, (Shape{2, -1, 2}));
}

}  // namespace
}  // namespace tensord::testing
