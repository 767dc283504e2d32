// Loss and normalisation ops against hand-computed values.
#include <cmath>
#include <limits>

#include "kernels/op_test_util.h"

namespace tensord::testing {
namespace {

std::vector<HostTensor> run(const std::string& op, const std::vector<HostTensor>& in,
                            AttributeMap attrs = {}, int num_outputs = 1) {
  auto r = run_op(op, in, std::move(attrs), num_outputs);
  if (!r.ok()) {
    ADD_FAILURE() << op << " failed: " << r.status().to_string();
    return std::vector<HostTensor>(static_cast<size_t>(num_outputs));
  }
  return *r;
}

const char kNll[] = "NegativeLogLikelihoodLoss";
const char kSce[] = "SoftmaxCrossEntropyLoss";
const char kMvn[] = "MeanVarianceNormalization";

// Log-probabilities [N=2, C=3]; target [2, 0] picks -3 and -0.5.
HostTensor nll_input() { return F32({-1, -2, -3, -0.5f, -1.5f, -2.5f}, {2, 3}); }
HostTensor nll_weight() { return F32({0.2f, 0.3f, 0.5f}, {3}); }

// ---- NegativeLogLikelihoodLoss ----

TEST(LossNll, NoneReduction) {
  auto y = run1(kNll, {nll_input(), I64({2, 0}, {2})}, {{"reduction", "none"}});
  EXPECT_TRUE(tensors_near(y, F32({3, 0.5f}, {2})));
}

TEST(LossNll, DefaultIsMean) {
  auto y = run1(kNll, {nll_input(), I64({2, 0}, {2})});
  EXPECT_TRUE(tensors_near(y, F32({1.75f}, {})));
}

TEST(LossNll, Sum) {
  auto y = run1(kNll, {nll_input(), I64({2, 0}, {2})}, {{"reduction", "sum"}});
  EXPECT_TRUE(tensors_near(y, F32({3.5f}, {})));
}

TEST(LossNll, WeightNone) {
  auto y = run1(kNll, {nll_input(), I64({2, 0}, {2}), nll_weight()}, {{"reduction", "none"}});
  EXPECT_TRUE(tensors_near(y, F32({1.5f, 0.1f}, {2})));
}

TEST(LossNll, WeightSum) {
  auto y = run1(kNll, {nll_input(), I64({2, 0}, {2}), nll_weight()}, {{"reduction", "sum"}});
  EXPECT_TRUE(tensors_near(y, F32({1.6f}, {})));
}

TEST(LossNll, WeightMeanDividesBySumOfWeights) {
  // (0.5 * 3 + 0.2 * 0.5) / (0.5 + 0.2) = 1.6 / 0.7.
  auto y = run1(kNll, {nll_input(), I64({2, 0}, {2}), nll_weight()});
  EXPECT_TRUE(tensors_near(y, F32({2.2857143f}, {})));
}

TEST(LossNll, IgnoreIndexNone) {
  auto y = run1(kNll, {nll_input(), I64({2, 1}, {2})},
                {{"reduction", "none"}, {"ignore_index", int64_t{1}}});
  EXPECT_TRUE(tensors_near(y, F32({3, 0}, {2})));
}

TEST(LossNll, IgnoreIndexMeanCountsOnlyKeptTargets) {
  auto y = run1(kNll, {nll_input(), I64({2, 1}, {2})}, {{"ignore_index", int64_t{1}}});
  EXPECT_TRUE(tensors_near(y, F32({3}, {})));
}

TEST(LossNll, IgnoreIndexWeightMean) {
  // Only the first target counts: 0.5 * 3 / 0.5.
  auto y =
      run1(kNll, {nll_input(), I64({2, 1}, {2}), nll_weight()}, {{"ignore_index", int64_t{1}}});
  EXPECT_TRUE(tensors_near(y, F32({3}, {})));
  auto s = run1(kNll, {nll_input(), I64({2, 1}, {2}), nll_weight()},
                {{"ignore_index", int64_t{1}}, {"reduction", "sum"}});
  EXPECT_TRUE(tensors_near(s, F32({1.5f}, {})));
}

TEST(LossNll, NegativeIgnoreIndexOutsideClassRange) {
  auto y = run1(kNll, {nll_input(), I64({-1, 1}, {2}), nll_weight()},
                {{"ignore_index", int64_t{-1}}, {"reduction", "none"}});
  EXPECT_TRUE(tensors_near(y, F32({0, 0.45f}, {2})));
  auto m =
      run1(kNll, {nll_input(), I64({-1, 1}, {2}), nll_weight()}, {{"ignore_index", int64_t{-1}}});
  EXPECT_TRUE(tensors_near(m, F32({1.5f}, {})));
}

TEST(LossNll, AllIgnoredMeanIsNaN) {
  auto y = run1(kNll, {nll_input(), I64({1, 1}, {2})}, {{"ignore_index", int64_t{1}}});
  ASSERT_EQ(y.numel(), 1);
  EXPECT_TRUE(std::isnan(y.data<float>()[0]));
}

TEST(LossNll, SpatialDims) {
  // input [N=1, C=2, d1=2]: class 0 is [-0.1, -0.3], class 1 is [-0.2, -0.4].
  auto x = F32({-0.1f, -0.3f, -0.2f, -0.4f}, {1, 2, 2});
  auto y = run1(kNll, {x, I64({1, 0}, {1, 2})}, {{"reduction", "none"}});
  EXPECT_TRUE(tensors_near(y, F32({0.2f, 0.3f}, {1, 2})));
  auto m = run1(kNll, {x, I64({1, 0}, {1, 2})});
  EXPECT_TRUE(tensors_near(m, F32({0.25f}, {})));
}

TEST(LossNll, TwoSpatialDims) {
  // input [N=1, C=2, 2, 1]; target [1, 2, 1] = [[1], [0]].
  auto x = F32({-1, -2, -3, -4}, {1, 2, 2, 1});
  auto y = run1(kNll, {x, I64({1, 0}, {1, 2, 1})}, {{"reduction", "none"}});
  EXPECT_TRUE(tensors_near(y, F32({3, 2}, {1, 2, 1})));
}

TEST(LossNll, Int32Target) {
  auto y = run1(kNll, {nll_input(), I32({2, 0}, {2})}, {{"reduction", "sum"}});
  EXPECT_TRUE(tensors_near(y, F32({3.5f}, {})));
}

TEST(LossNll, Float64) {
  auto y = run1(
      kNll, {F64({-1, -2, -3, -0.5, -1.5, -2.5}, {2, 3}), I64({1, 2}, {2}), F64({1, 2, 4}, {3})});
  // (2 * 2 + 4 * 2.5) / 6.
  EXPECT_TRUE(tensors_near(y, F64({14.0 / 6.0}, {}), 1e-12, 1e-12));
}

TEST(LossNll, Float16) {
  auto y = run1(kNll, {F16({-1, -2, -3, -0.5f, -1.5f, -2.5f}, {2, 3}), I64({2, 0}, {2})},
                {{"reduction", "none"}});
  EXPECT_TRUE(tensors_near(y, F16({3, 0.5f}, {2}), 1e-3, 1e-3));
}

TEST(LossNll, TargetOutOfRangeFails) {
  auto r = run_op(kNll, {nll_input(), I64({3, 0}, {2})});
  EXPECT_TRUE(fails(r, {"NegativeLogLikelihoodLoss", "target value 3", "[0, 3)"}));
  auto neg = run_op(kNll, {nll_input(), I64({0, -1}, {2})}, {{"ignore_index", int64_t{5}}});
  EXPECT_TRUE(fails(neg, {"target value -1", "flat index 1", "ignore_index 5"}));
}

TEST(LossNll, BadShapesFail) {
  EXPECT_TRUE(fails(run_op(kNll, {nll_input(), I64({2, 0, 1}, {3})}),
                    {"NegativeLogLikelihoodLoss", "target shape [3]", "[2, 3]"}));
  EXPECT_TRUE(fails(run_op(kNll, {nll_input(), I64({2, 0}, {2, 1})}), {"target shape [2, 1]"}));
  EXPECT_TRUE(fails(run_op(kNll, {F32({1, 2}, {2}), I64({0}, {1})}), {"rank >= 2", "[2]"}));
  EXPECT_TRUE(fails(run_op(kNll, {nll_input(), I64({2, 0}, {2}), F32({1, 2}, {2})}),
                    {"weight", "[3]", "[2]"}));
}

TEST(LossNll, BadTypesFail) {
  EXPECT_TRUE(fails(run_op(kNll, {I64({1, 2, 3, 4, 5, 6}, {2, 3}), I64({2, 0}, {2})}),
                    {"NegativeLogLikelihoodLoss", "int64"}));
  EXPECT_TRUE(fails(run_op(kNll, {nll_input(), F32({2, 0}, {2})}),
                    {"target must be int32 or int64", "float32"}));
  EXPECT_TRUE(fails(run_op(kNll, {nll_input(), I64({2, 0}, {2}), F64({1, 1, 1}, {3})}),
                    {"weight", "float64"}));
}

TEST(LossNll, BadReductionFails) {
  EXPECT_TRUE(fails(run_op(kNll, {nll_input(), I64({2, 0}, {2})}, {{"reduction", "avg"}}),
                    {"NegativeLogLikelihoodLoss", "'avg'"}));
  EXPECT_TRUE(fails(run_op(kNll, {nll_input(), I64({2, 0}, {2})}, {{"axis", int64_t{1}}}),
                    {"unknown attribute 'axis'"}));
}

// ---- SoftmaxCrossEntropyLoss ----
// scores [[1, 2, 3], [0, 0, 0]]: log_softmax rows are
// [-2.40760596, -1.40760596, -0.40760596] and [-1.09861229] * 3.

HostTensor sce_scores() { return F32({1, 2, 3, 0, 0, 0}, {2, 3}); }

TEST(LossSce, NoneReduction) {
  auto y = run1(kSce, {sce_scores(), I64({0, 2}, {2})}, {{"reduction", "none"}});
  EXPECT_TRUE(tensors_near(y, F32({2.40760596f, 1.09861229f}, {2})));
}

TEST(LossSce, DefaultMeanAndSum) {
  auto m = run1(kSce, {sce_scores(), I64({0, 2}, {2})});
  EXPECT_TRUE(tensors_near(m, F32({1.75310913f}, {})));
  auto s = run1(kSce, {sce_scores(), I64({0, 2}, {2})}, {{"reduction", "sum"}});
  EXPECT_TRUE(tensors_near(s, F32({3.50621825f}, {})));
}

TEST(LossSce, LogProbOutput) {
  auto outs = run(kSce, {sce_scores(), I64({0, 2}, {2})}, {}, 2);
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_TRUE(tensors_near(outs[0], F32({1.75310913f}, {})));
  EXPECT_TRUE(tensors_near(outs[1], F32({-2.40760596f, -1.40760596f, -0.40760596f, -1.09861229f,
                                         -1.09861229f, -1.09861229f},
                                        {2, 3})));
}

TEST(LossSce, WeightMean) {
  // (1 * 2.40760596 + 3 * 1.09861229) / (1 + 3).
  auto y = run1(kSce, {sce_scores(), I64({0, 2}, {2}), F32({1, 2, 3}, {3})});
  EXPECT_TRUE(tensors_near(y, F32({1.42586071f}, {})));
  auto n =
      run1(kSce, {sce_scores(), I64({0, 2}, {2}), F32({1, 2, 3}, {3})}, {{"reduction", "none"}});
  EXPECT_TRUE(tensors_near(n, F32({2.40760596f, 3.29583687f}, {2})));
}

TEST(LossSce, IgnoreIndex) {
  auto m = run1(kSce, {sce_scores(), I64({0, 2}, {2})}, {{"ignore_index", int64_t{2}}});
  EXPECT_TRUE(tensors_near(m, F32({2.40760596f}, {})));
  auto w = run1(kSce, {sce_scores(), I64({0, 2}, {2}), F32({1, 2, 3}, {3})},
                {{"ignore_index", int64_t{2}}});
  EXPECT_TRUE(tensors_near(w, F32({2.40760596f}, {})));
  auto n = run1(kSce, {sce_scores(), I64({0, -5}, {2})},
                {{"ignore_index", int64_t{-5}}, {"reduction", "none"}});
  EXPECT_TRUE(tensors_near(n, F32({2.40760596f, 0}, {2})));
}

TEST(LossSce, SpatialWithLogProb) {
  // scores [N=1, C=2, d1=2]: position 0 has logits [0, 0], position 1 has [1, 0].
  auto outs =
      run(kSce, {F32({0, 1, 0, 0}, {1, 2, 2}), I64({0, 1}, {1, 2})}, {{"reduction", "none"}}, 2);
  EXPECT_TRUE(tensors_near(outs[0], F32({0.69314718f, 1.31326169f}, {1, 2})));
  EXPECT_TRUE(tensors_near(
      outs[1], F32({-0.69314718f, -0.31326169f, -0.69314718f, -1.31326169f}, {1, 2, 2})));
}

TEST(LossSce, LargeScoresAreStable) {
  auto y = run1(kSce, {F32({1000, 1000}, {1, 2}), I64({1}, {1})});
  EXPECT_TRUE(tensors_near(y, F32({0.69314718f}, {})));
}

TEST(LossSce, Int32TargetFloat64) {
  auto y = run1(kSce, {F64({1, 2, 3, 0, 0, 0}, {2, 3}), I32({0, 2}, {2})}, {{"reduction", "sum"}});
  EXPECT_TRUE(tensors_near(y, F64({3.5062182531124906}, {}), 1e-12, 1e-12));
}

TEST(LossSce, Float16) {
  auto outs = run(kSce, {F16({1, 2, 3, 0, 0, 0}, {2, 3}), I64({0, 2}, {2})}, {}, 2);
  EXPECT_TRUE(tensors_near(outs[0], F16({1.75310913f}, {}), 1e-3, 1e-3));
  EXPECT_EQ(outs[1].dtype(), DType::kFloat16);
}

TEST(LossSce, Errors) {
  EXPECT_TRUE(fails(run_op(kSce, {sce_scores(), I64({0, 3}, {2})}),
                    {"SoftmaxCrossEntropyLoss", "target value 3", "[0, 3)"}));
  EXPECT_TRUE(fails(run_op(kSce, {sce_scores(), I64({0}, {1})}),
                    {"SoftmaxCrossEntropyLoss", "target shape [1]", "scores shape [2, 3]"}));
  EXPECT_TRUE(
      fails(run_op(kSce, {sce_scores(), I64({0, 2}, {2})}, {{"reduction", "max"}}), {"'max'"}));
  EXPECT_TRUE(fails(run_op(kSce, {I32({1, 2, 3, 0, 0, 0}, {2, 3}), I64({0, 2}, {2})}),
                    {"scores must be", "int32"}));
}

// ---- MeanVarianceNormalization ----

TEST(LossMvn, DefaultAxesPerChannel) {
  // [1, 2, 1, 2]: channel 0 is [1, 3] (mean 2, std 1), channel 1 is [10, 20] (mean 15, std 5).
  auto y = run1(kMvn, {F32({1, 3, 10, 20}, {1, 2, 1, 2})});
  EXPECT_TRUE(tensors_near(y, F32({-1, 1, -1, 1}, {1, 2, 1, 2})));
}

TEST(LossMvn, DefaultAxesReduceBatchToo) {
  // [2, 1, 1, 2]: one channel holding [0, 2, 4, 6] (mean 3, std sqrt(5)).
  auto y = run1(kMvn, {F32({0, 2, 4, 6}, {2, 1, 1, 2})});
  EXPECT_TRUE(
      tensors_near(y, F32({-1.34164079f, -0.44721360f, 0.44721360f, 1.34164079f}, {2, 1, 1, 2})));
}

TEST(LossMvn, ExplicitAxes) {
  // Rows [1, 3] -> [-1, 1]; [2, 2] has zero variance -> 0.
  auto y = run1(kMvn, {F32({1, 3, 2, 2}, {2, 2})}, {{"axes", std::vector<int64_t>{1}}});
  EXPECT_TRUE(tensors_near(y, F32({-1, 1, 0, 0}, {2, 2})));
}

TEST(LossMvn, NegativeAxes) {
  auto y = run1(kMvn, {F32({1, 3, 2, 2}, {2, 2})}, {{"axes", std::vector<int64_t>{-1}}});
  EXPECT_TRUE(tensors_near(y, F32({-1, 1, 0, 0}, {2, 2})));
  // Columns [1, 2] and [3, 2].
  auto c = run1(kMvn, {F32({1, 3, 2, 2}, {2, 2})}, {{"axes", std::vector<int64_t>{-2}}});
  EXPECT_TRUE(tensors_near(c, F32({-1, 1, 1, -1}, {2, 2})));
}

TEST(LossMvn, AllAxes) {
  auto y = run1(kMvn, {F32({1, 2, 3, 4}, {2, 2})}, {{"axes", std::vector<int64_t>{0, 1}}});
  EXPECT_TRUE(tensors_near(y, F32({-1.34164079f, -0.44721360f, 0.44721360f, 1.34164079f}, {2, 2})));
}

TEST(LossMvn, Float64AndFloat16) {
  auto d = run1(kMvn, {F64({1, 3, 10, 20}, {1, 2, 1, 2})});
  EXPECT_TRUE(tensors_near(d, F64({-1, 1, -1, 1}, {1, 2, 1, 2}), 1e-8, 1e-8));
  auto h = run1(kMvn, {F16({1, 3, 10, 20}, {1, 2, 1, 2})});
  EXPECT_TRUE(tensors_near(h, F16({-1, 1, -1, 1}, {1, 2, 1, 2}), 1e-3, 1e-3));
}

TEST(LossMvn, Errors) {
  EXPECT_TRUE(fails(run_op(kMvn, {F32({1, 2, 3, 4}, {2, 2})}),
                    {"MeanVarianceNormalization", "axis 2", "[2, 2]"}));
  EXPECT_TRUE(
      fails(run_op(kMvn, {F32({1, 2, 3, 4}, {2, 2})}, {{"axes", std::vector<int64_t>{1, -1}}}),
            {"axis -1 is repeated", "[1, -1]"}));
  EXPECT_TRUE(fails(run_op(kMvn, {I64({1, 2, 3, 4}, {1, 1, 2, 2})}), {"X must be", "int64"}));
}

}  // namespace
}  // namespace tensord::testing
