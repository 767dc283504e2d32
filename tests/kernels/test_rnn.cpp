// Reference kernels and schemas of the recurrent ops (RNN, GRU, LSTM), against hand-computed
// values. Most cases use hidden_size 1 and piecewise-linear activations (Relu, HardSigmoid,
// Affine) so that every expected number can be checked with pencil and paper; the default
// activations are covered with tanh/sigmoid values written out to 16 digits.
#include <initializer_list>
#include <string>

#include "core/op_registry.h"
#include "kernels/op_test_util.h"

namespace tensord::testing {
namespace {

std::vector<HostTensor> run_ok(const std::string& op, const std::vector<HostTensor>& inputs,
                               AttributeMap attrs, int num_outputs) {
  auto r = run_op(op, inputs, std::move(attrs), num_outputs);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return std::vector<HostTensor>(static_cast<size_t>(num_outputs));
  return *r;
}

const HostTensor kNone;  // an omitted optional input

// ---- RNN ----
// hidden 1, input 1: W = 2, R = 0.5, Wb = 1, Rb = 0, Relu; X = 1, 2, 3.
//   forward: h1 = 2+0+1 = 3, h2 = 4+1.5+1 = 6.5, h3 = 6+3.25+1 = 10.25
//   reverse: h(t2) = 6+1 = 7, h(t1) = 4+3.5+1 = 8.5, h(t0) = 2+4.25+1 = 7.25

TEST(RnnRnn, ForwardRelu) {
  auto out = run_ok(
      "RNN",
      {F32({1, 2, 3}, {3, 1, 1}), F32({2}, {1, 1, 1}), F32({0.5f}, {1, 1, 1}), F32({1, 0}, {1, 2})},
      {{"hidden_size", 1}, {"activations", std::vector<std::string>{"Relu"}}}, 2);
  EXPECT_TRUE(tensors_near(out[0], F32({3, 6.5f, 10.25f}, {3, 1, 1, 1})));
  EXPECT_TRUE(tensors_near(out[1], F32({10.25f}, {1, 1, 1})));
}

TEST(RnnRnn, DefaultTanhAndNoBias) {
  // h = tanh(0.5 * 1 + 0 * h0).
  auto out = run_ok("RNN", {F32({0.5f}, {1, 1, 1}), F32({1}, {1, 1, 1}), F32({0}, {1, 1, 1})},
                    {{"hidden_size", 1}}, 2);
  EXPECT_TRUE(tensors_near(out[0], F32({0.46211715726000974f}, {1, 1, 1, 1})));
  EXPECT_TRUE(tensors_near(out[1], F32({0.46211715726000974f}, {1, 1, 1})));
}

TEST(RnnRnn, ReverseAndBidirectional) {
  auto out = run_ok(
      "RNN",
      {F32({1, 2, 3}, {3, 1, 1}), F32({2}, {1, 1, 1}), F32({0.5f}, {1, 1, 1}), F32({1, 0}, {1, 2})},
      {{"hidden_size", 1},
       {"direction", "reverse"},
       {"activations", std::vector<std::string>{"Relu"}}},
      2);
  EXPECT_TRUE(tensors_near(out[0], F32({7.25f, 8.5f, 7}, {3, 1, 1, 1})));
  EXPECT_TRUE(tensors_near(out[1], F32({7.25f}, {1, 1, 1})));

  // Both directions; the reverse one has W = 2, R = 0.5 too but Wb = 0, Rb = 1 (same sum).
  out = run_ok("RNN",
               {F32({1, 2, 3}, {3, 1, 1}), F32({2, 2}, {2, 1, 1}), F32({0.5f, 0.5f}, {2, 1, 1}),
                F32({1, 0, 0, 1}, {2, 2})},
               {{"hidden_size", 1},
                {"direction", "bidirectional"},
                {"activations", std::vector<std::string>{"Relu", "Relu"}}},
               2);
  EXPECT_TRUE(tensors_near(out[0], F32({3, 7.25f, 6.5f, 8.5f, 10.25f, 7}, {3, 2, 1, 1})));
  EXPECT_TRUE(tensors_near(out[1], F32({10.25f, 7.25f}, {2, 1, 1})));
}

TEST(RnnRnn, SequenceLensAndInitialH) {
  // Batch of 2: entry 0 is 1, 2, 3; entry 1 is 1, 2 (its third value 9 is padding).
  const HostTensor x = F32({1, 1, 2, 2, 3, 9}, {3, 2, 1});
  const HostTensor w = F32({2}, {1, 1, 1}), r = F32({0.5f}, {1, 1, 1}), b = F32({1, 0}, {1, 2});
  AttributeMap attrs{{"hidden_size", 1}, {"activations", std::vector<std::string>{"Relu"}}};
  auto out = run_ok("RNN", {x, w, r, b, I32({3, 2}, {2})}, attrs, 2);
  EXPECT_TRUE(tensors_near(out[0], F32({3, 3, 6.5f, 6.5f, 10.25f, 0}, {3, 1, 2, 1})));
  EXPECT_TRUE(tensors_near(out[1], F32({10.25f, 6.5f}, {1, 2, 1})));

  // Reverse runs over each entry's own length: entry 1 is t1 = 4+1 = 5, t0 = 2+2.5+1 = 5.5.
  attrs["direction"] = "reverse";
  out = run_ok("RNN", {x, w, r, b, I32({3, 2}, {2})}, attrs, 2);
  EXPECT_TRUE(tensors_near(out[0], F32({7.25f, 5.5f, 8.5f, 5, 7, 0}, {3, 1, 2, 1})));
  EXPECT_TRUE(tensors_near(out[1], F32({7.25f, 5.5f}, {1, 2, 1})));

  // initial_h = 2 and 4; entry 1 has length 0: Y is all 0 there and so is Y_h (onnxruntime).
  attrs.erase("direction");
  out = run_ok("RNN", {x, w, r, b, I32({1, 0}, {2}), F32({2, 4}, {1, 2, 1})}, attrs, 2);
  EXPECT_TRUE(tensors_near(out[0], F32({4, 0, 0, 0, 0, 0}, {3, 1, 2, 1})));
  EXPECT_TRUE(tensors_near(out[1], F32({4, 0}, {1, 2, 1})));
}

TEST(RnnRnn, Layout1) {
  // Same data as SequenceLensAndInitialH, batch-major: X [batch, seq, input].
  auto out = run_ok(
      "RNN",
      {F32({1, 2, 3, 1, 2, 9}, {2, 3, 1}), F32({2}, {1, 1, 1}), F32({0.5f}, {1, 1, 1}),
       F32({1, 0}, {1, 2}), I32({3, 2}, {2}), F32({0, 0}, {2, 1, 1})},
      {{"hidden_size", 1}, {"layout", 1}, {"activations", std::vector<std::string>{"Relu"}}}, 2);
  EXPECT_TRUE(tensors_near(out[0], F32({3, 6.5f, 10.25f, 3, 6.5f, 0}, {2, 3, 1, 1})));
  EXPECT_TRUE(tensors_near(out[1], F32({10.25f, 6.5f}, {2, 1, 1})));
}

TEST(RnnRnn, ClipAndActivationParameters) {
  const HostTensor w = F32({2}, {1, 1, 1}), r = F32({0.5f}, {1, 1, 1}), b = F32({1, 0}, {1, 2});
  // clip 2.5 bounds every pre-activation (3, 2+1.25+1, 6+1.25+1) before Relu.
  auto out = run_ok(
      "RNN", {F32({1, 2, 3}, {3, 1, 1}), w, r, b},
      {{"hidden_size", 1}, {"clip", 2.5f}, {"activations", std::vector<std::string>{"Relu"}}}, 2);
  EXPECT_TRUE(tensors_near(out[0], F32({2.5f, 2.5f, 2.5f}, {3, 1, 1, 1})));
  // LeakyRelu(alpha 0.1): pre = 2*(-1) + 1 = -1 -> -0.1.
  out = run_ok("RNN", {F32({-1}, {1, 1, 1}), w, r, b},
               {{"hidden_size", 1},
                {"activations", std::vector<std::string>{"LeakyRelu"}},
                {"activation_alpha", std::vector<float>{0.1f}}},
               2);
  EXPECT_TRUE(tensors_near(out[1], F32({-0.1f}, {1, 1, 1})));
  // LeakyRelu without alpha takes the ONNX default 0.01; names are case-insensitive.
  out = run_ok("RNN", {F32({-1}, {1, 1, 1}), w, r, b},
               {{"hidden_size", 1}, {"activations", std::vector<std::string>{"leakyrelu"}}}, 2);
  EXPECT_TRUE(tensors_near(out[1], F32({-0.01f}, {1, 1, 1})));
  // Affine(alpha 3, beta -1): pre = 2*2 + 1 = 5 -> 14.
  out = run_ok("RNN", {F32({2}, {1, 1, 1}), w, r, b},
               {{"hidden_size", 1},
                {"activations", std::vector<std::string>{"Affine"}},
                {"activation_alpha", std::vector<float>{3}},
                {"activation_beta", std::vector<float>{-1}}},
               2);
  EXPECT_TRUE(tensors_near(out[1], F32({14}, {1, 1, 1})));
  // ThresholdedRelu(alpha 4): pre 5 passes, Softsign(5) = 5/6, Softplus(0) = ln 2,
  // ScaledTanh(alpha 2, beta 0): 0, Elu(alpha 2) of pre -1: 2*(e^-1 - 1).
  auto one = [&](float xv, const char* act, std::vector<float> alpha, std::vector<float> beta) {
    AttributeMap a{{"hidden_size", 1}, {"activations", std::vector<std::string>{act}}};
    if (!alpha.empty()) a["activation_alpha"] = alpha;
    if (!beta.empty()) a["activation_beta"] = beta;
    return run_ok("RNN", {F32({xv}, {1, 1, 1}), w, r, b}, a, 2)[1];
  };
  EXPECT_TRUE(tensors_near(one(2, "ThresholdedRelu", {4}, {}), F32({5}, {1, 1, 1})));
  EXPECT_TRUE(tensors_near(one(1, "ThresholdedRelu", {4}, {}), F32({0}, {1, 1, 1})));
  EXPECT_TRUE(tensors_near(one(2, "Softsign", {}, {}), F32({5.f / 6.f}, {1, 1, 1})));
  EXPECT_TRUE(tensors_near(one(-0.5f, "Softplus", {}, {}), F32({0.6931471805599453f}, {1, 1, 1})));
  EXPECT_TRUE(tensors_near(one(2, "ScaledTanh", {2}, {0}), F32({0}, {1, 1, 1})));
  EXPECT_TRUE(tensors_near(one(-1, "Elu", {2}, {}), F32({-1.2642411176571153f}, {1, 1, 1})));
  // HardSigmoid defaults (0.2, 0.5): pre 1 -> 0.7.
  EXPECT_TRUE(tensors_near(one(0, "HardSigmoid", {}, {}), F32({0.7f}, {1, 1, 1})));
}

TEST(RnnRnn, Float64AndFloat16) {
  auto out = run_ok(
      "RNN",
      {F64({1, 2, 3}, {3, 1, 1}), F64({2}, {1, 1, 1}), F64({0.5}, {1, 1, 1}), F64({1, 0}, {1, 2})},
      {{"activations", std::vector<std::string>{"Relu"}}}, 2);
  EXPECT_TRUE(tensors_near(out[0], F64({3, 6.5, 10.25}, {3, 1, 1, 1})));
  out = run_ok(
      "RNN",
      {F16({1, 2, 3}, {3, 1, 1}), F16({2}, {1, 1, 1}), F16({0.5f}, {1, 1, 1}), F16({1, 0}, {1, 2})},
      {{"activations", std::vector<std::string>{"Relu"}}}, 2);
  EXPECT_TRUE(tensors_near(out[1], F16({10.25f}, {1, 1, 1})));
}

TEST(RnnRnn, OmittedOutputs) {
  // Only Y_h asked for (Y is an empty name).
  Graph g;
  Node n;
  n.name = "rnn";
  n.op = "RNN";
  n.inputs = {"x", "w", "r"};
  n.outputs = {"", "yh"};
  n.attrs = {{"hidden_size", 1}, {"activations", std::vector<std::string>{"Relu"}}};
  g.nodes.push_back(n);
  g.inputs = {{"x", {DType::kFloat32, {2, 1, 1}}},
              {"w", {DType::kFloat32, {1, 1, 1}}},
              {"r", {DType::kFloat32, {1, 1, 1}}}};
  g.outputs = {{"yh", {}}};
  auto outs = run_graph(g, {F32({1, 2}, {2, 1, 1}), F32({1}, {1, 1, 1}), F32({1}, {1, 1, 1})});
  ASSERT_TRUE(outs.ok()) << outs.status().to_string();
  ASSERT_TRUE((*outs)[0].ok()) << (*outs)[0].status().to_string();
  EXPECT_TRUE(tensors_near(*(*outs)[0], F32({3}, {1, 1, 1})));  // h1 = 1, h2 = 2 + 1
}

TEST(RnnRnn, InferenceWithUnknownDims) {
  Node n;
  n.name = "r";
  n.op = "RNN";
  n.inputs = {"x", "w", "r"};
  n.outputs = {"y", "yh"};
  n.attrs = {{"hidden_size", 4}, {"direction", "bidirectional"}};
  InferenceContext ctx(
      n,
      {{DType::kFloat32, {-1, -1, 3}}, {DType::kFloat32, {2, 4, 3}}, {DType::kFloat32, {2, 4, 4}}},
      {});
  ASSERT_TRUE(infer_node(OpRegistry::global(), ctx).ok());
  EXPECT_EQ(ctx.output_types()[0], (TensorType{DType::kFloat32, {-1, 2, -1, 4}}));
  EXPECT_EQ(ctx.output_types()[1], (TensorType{DType::kFloat32, {2, -1, 4}}));
  // hidden_size inferred from R when the attribute is absent.
  n.attrs = {};
  InferenceContext ctx2(
      n, {{DType::kFloat32, {5, 2, 3}}, {DType::kFloat32, {1, 6, 3}}, {DType::kFloat32, {1, 6, 6}}},
      {});
  ASSERT_TRUE(infer_node(OpRegistry::global(), ctx2).ok());
  EXPECT_EQ(ctx2.output_types()[0], (TensorType{DType::kFloat32, {5, 1, 2, 6}}));
}

TEST(RnnRnn, BadInputs) {
  const HostTensor x = F32({1, 2, 3}, {3, 1, 1});
  const HostTensor w = F32({2}, {1, 1, 1}), r = F32({0.5f}, {1, 1, 1});
  EXPECT_TRUE(fails_with(run_op("RNN", {x, F32({1, 2}, {1, 2, 1}), r}, {{"hidden_size", 1}}, 2),
                         StatusCode::kInvalidArgument, {"RNN:", "W", "[1, 1, 1]", "[1, 2, 1]"}));
  EXPECT_TRUE(fails_with(run_op("RNN", {F32({1, 2, 3}, {3, 1}), w, r}, {}, 2),
                         StatusCode::kInvalidArgument, {"RNN:", "rank 3", "[3, 1]"}));
  EXPECT_TRUE(fails_with(run_op("RNN", {x, w, r}, {{"direction", "sideways"}}, 2),
                         StatusCode::kInvalidArgument, {"RNN:", "'sideways'"}));
  EXPECT_TRUE(
      fails_with(run_op("RNN", {x, w, r}, {{"activations", std::vector<std::string>{"Swish"}}}, 2),
                 StatusCode::kInvalidArgument, {"RNN:", "unknown activation 'Swish'"}));
  EXPECT_TRUE(fails_with(
      run_op("RNN", {x, w, r}, {{"activations", std::vector<std::string>{"Relu", "Tanh"}}}, 2),
      StatusCode::kInvalidArgument, {"RNN:", "'activations' has 2 values", "expected 1"}));
  EXPECT_TRUE(fails_with(run_op("RNN", {x, w, r}, {{"clip", -1.f}}, 2),
                         StatusCode::kInvalidArgument, {"RNN:", "clip must be > 0, got -1"}));
  EXPECT_TRUE(fails_with(run_op("RNN", {x, w, r}, {{"layout", 2}}, 2), StatusCode::kInvalidArgument,
                         {"RNN:", "layout", "got 2"}));
  EXPECT_TRUE(fails_with(run_op("RNN", {x, w, r}, {{"hidden_size", 3}}, 2),
                         StatusCode::kInvalidArgument, {"RNN:", "W", "[1, 3, 1]"}));
  EXPECT_TRUE(fails_with(run_op("RNN", {x, w, r, F32({1, 0, 0}, {1, 3})}, {}, 2),
                         StatusCode::kInvalidArgument, {"RNN:", "B", "[1, 2]", "[1, 3]"}));
  EXPECT_TRUE(fails_with(run_op("RNN", {x, w, r, kNone, I32({4}, {1})}, {}, 2),
                         StatusCode::kInvalidArgument, {"RNN:", "sequence_lens", "4"}));
  EXPECT_TRUE(fails_with(run_op("RNN", {x, w, r, kNone, kNone, F32({0, 0}, {1, 2, 1})}, {}, 2),
                         StatusCode::kInvalidArgument, {"RNN:", "initial_h", "[1, 2, 1]"}));
  EXPECT_TRUE(fails_with(run_op("RNN", {x, F64({2}, {1, 1, 1}), r}, {}, 2),
                         StatusCode::kInvalidArgument, {"RNN:", "float64", "float32"}));
  EXPECT_TRUE(fails_with(run_op("RNN", {I32({1, 2, 3}, {3, 1, 1}), w, r}, {}, 2),
                         StatusCode::kInvalidArgument, {"RNN:", "int32"}));
  EXPECT_TRUE(fails_with(run_op("RNN", {x, w, r}, {{"input_forget", 1}}, 2),
                         StatusCode::kInvalidArgument, {"RNN:", "input_forget"}));
}

// ---- GRU ----
// hidden 1, input 1, f = HardSigmoid(0.25, 0.5), g = Relu. W = [z 0.5, r 1, h 2],
// R = [z 0, r -1, h 1], Rbh = 1, X = 2 then 1, initial_h = 1.
//   step 1: z = hs(1) = 0.75, r = hs(2 - 1) = 0.75,
//     linear_before_reset 0: h~ = relu(4 + (0.75*1)*1 + 1) = 5.75, H = 0.25*5.75 + 0.75 = 2.1875
//     linear_before_reset 1: h~ = relu(4 + 0.75*(1*1 + 1)) = 5.5,  H = 0.25*5.5 + 0.75 = 2.125
//   step 2 (lbr 0, H = 2.1875): z = hs(0.5) = 0.625, r = hs(1 - 2.1875) = 0.203125,
//     h~ = relu(2 + 0.203125*2.1875 + 1) = 3.4443359375, H = 0.375*h~ + 0.625*2.1875
//        = 2.6588134765625

AttributeMap gru_attrs() {
  return {{"hidden_size", 1},
          {"activations", std::vector<std::string>{"HardSigmoid", "Relu"}},
          {"activation_alpha", std::vector<float>{0.25f}},
          {"activation_beta", std::vector<float>{0.5f}}};
}

TEST(RnnGru, LinearBeforeReset) {
  const HostTensor w = F32({0.5f, 1, 2}, {1, 3, 1}), r = F32({0, -1, 1}, {1, 3, 1});
  const HostTensor b = F32({0, 0, 0, 0, 0, 1}, {1, 6});
  const HostTensor h0 = F32({1}, {1, 1, 1});
  auto out = run_ok("GRU", {F32({2, 1}, {2, 1, 1}), w, r, b, kNone, h0}, gru_attrs(), 2);
  EXPECT_TRUE(tensors_near(out[0], F32({2.1875f, 2.6588134765625f}, {2, 1, 1, 1})));
  EXPECT_TRUE(tensors_near(out[1], F32({2.6588134765625f}, {1, 1, 1})));
  AttributeMap a = gru_attrs();
  a["linear_before_reset"] = 1;
  out = run_ok("GRU", {F32({2}, {1, 1, 1}), w, r, b, kNone, h0}, a, 2);
  EXPECT_TRUE(tensors_near(out[1], F32({2.125f}, {1, 1, 1})));
}

TEST(RnnGru, DefaultActivations) {
  // W = R = 0, Wbh = 1: z = sigmoid(0) = 0.5, h~ = tanh(1), H = 0.5 * tanh(1).
  auto out = run_ok("GRU",
                    {F32({7}, {1, 1, 1}), F32({0, 0, 0}, {1, 3, 1}), F32({0, 0, 0}, {1, 3, 1}),
                     F32({0, 0, 1, 0, 0, 0}, {1, 6})},
                    {{"hidden_size", 1}}, 2);
  EXPECT_TRUE(tensors_near(out[1], F32({0.3807970779778824f}, {1, 1, 1})));
}

TEST(RnnGru, BidirectionalSharesOneActivationList) {
  // One direction's activations serve both; the reverse step over one time step equals the
  // forward one.
  const HostTensor w = F32({0.5f, 1, 2, 0.5f, 1, 2}, {2, 3, 1});
  const HostTensor r = F32({0, -1, 1, 0, -1, 1}, {2, 3, 1});
  const HostTensor b = F32({0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1}, {2, 6});
  AttributeMap a = gru_attrs();
  a["direction"] = "bidirectional";
  a["activation_alpha"] = std::vector<float>{0.25f, 0.25f};
  a["activation_beta"] = std::vector<float>{0.5f, 0.5f};
  auto out = run_ok("GRU", {F32({2}, {1, 1, 1}), w, r, b, kNone, F32({1, 1}, {2, 1, 1})}, a, 2);
  EXPECT_TRUE(tensors_near(out[0], F32({2.1875f, 2.1875f}, {1, 2, 1, 1})));
  EXPECT_TRUE(tensors_near(out[1], F32({2.1875f, 2.1875f}, {2, 1, 1})));
}

TEST(RnnGru, BadInputs) {
  const HostTensor x = F32({2}, {1, 1, 1});
  EXPECT_TRUE(
      fails_with(run_op("GRU", {x, F32({1, 1, 1, 1}, {1, 4, 1}), F32({1, 1, 1, 1}, {1, 4, 1})},
                        {{"hidden_size", 1}}, 2),
                 StatusCode::kInvalidArgument, {"GRU:", "W", "[1, 3, 1]", "[1, 4, 1]"}));
  EXPECT_TRUE(fails_with(run_op("GRU", {x, F32({1, 1, 1}, {1, 3, 1}), F32({1, 1, 1}, {1, 3, 1})},
                                {{"linear_before_reset", 2}}, 2),
                         StatusCode::kInvalidArgument,
                         {"GRU:", "linear_before_reset must be 0 or 1, got 2"}));
  EXPECT_TRUE(fails_with(run_op("GRU", {x, F32({1, 1, 1}, {1, 3, 1}), F32({1, 1, 1}, {1, 3, 1})},
                                {{"activations", std::vector<std::string>{"Tanh"}}}, 2),
                         StatusCode::kInvalidArgument,
                         {"GRU:", "'activations' has 1 values [Tanh], expected 2"}));
}

// ---- LSTM ----
// hidden 1, input 1, f = HardSigmoid(0.25, 0.5), g = h = Relu. W = [i 0.5, o -0.5, f -1, c 2],
// R = [0, 0, 0, 1], P = [i 0.5, o 0.25, f 0.25], X = 2, initial_h = 0.5, initial_c = 1:
//   i = hs(1 + 0.5*1) = 0.875, f = hs(-2 + 0.25*1) = 0.0625, c~ = relu(4 + 0.5) = 4.5,
//   C = 0.0625*1 + 0.875*4.5 = 4, o = hs(-1 + 0.25*C) = 0.5, H = 0.5 * relu(4) = 2.
//   input_forget: f = 1 - i = 0.125, C = 4.0625, o = hs(0.015625) = 0.50390625,
//     H = 2.047119140625.
//   clip 3: c~ = relu(3) = 3, C = 2.6875, o = hs(-0.328125) = 0.41796875,
//     H = o * relu(clip(C)) = 1.123291015625.

std::vector<HostTensor> lstm_inputs() {
  return {F32({2}, {1, 1, 1}),
          F32({0.5f, -0.5f, -1, 2}, {1, 4, 1}),
          F32({0, 0, 0, 1}, {1, 4, 1}),
          kNone,
          kNone,
          F32({0.5f}, {1, 1, 1}),
          F32({1}, {1, 1, 1}),
          F32({0.5f, 0.25f, 0.25f}, {1, 3})};
}

AttributeMap lstm_attrs() {
  return {{"hidden_size", 1},
          {"activations", std::vector<std::string>{"HardSigmoid", "Relu", "Relu"}},
          {"activation_alpha", std::vector<float>{0.25f}},
          {"activation_beta", std::vector<float>{0.5f}}};
}

TEST(RnnLstm, PeepholesAndInitialState) {
  auto out = run_ok("LSTM", lstm_inputs(), lstm_attrs(), 3);
  EXPECT_TRUE(tensors_near(out[0], F32({2}, {1, 1, 1, 1})));
  EXPECT_TRUE(tensors_near(out[1], F32({2}, {1, 1, 1})));
  EXPECT_TRUE(tensors_near(out[2], F32({4}, {1, 1, 1})));
}

TEST(RnnLstm, InputForgetAndClip) {
  AttributeMap a = lstm_attrs();
  a["input_forget"] = 1;
  auto out = run_ok("LSTM", lstm_inputs(), a, 3);
  EXPECT_TRUE(tensors_near(out[1], F32({2.047119140625f}, {1, 1, 1})));
  EXPECT_TRUE(tensors_near(out[2], F32({4.0625f}, {1, 1, 1})));
  a = lstm_attrs();
  a["clip"] = 3.f;
  out = run_ok("LSTM", lstm_inputs(), a, 3);
  EXPECT_TRUE(tensors_near(out[1], F32({1.123291015625f}, {1, 1, 1})));
  EXPECT_TRUE(tensors_near(out[2], F32({2.6875f}, {1, 1, 1})));
}

// The node torch.onnx.export emits for nn.LSTM: inputs X, W, R, B, '' (no sequence_lens),
// initial_h, initial_c; three outputs; only hidden_size set; default activations.
// W = R = 0, Wbc = 1: i = f = o = 0.5, c~ = tanh(1) = 0.7615941559557649, so
// C_t = 0.5 C_{t-1} + 0.3807970779778824 and H_t = 0.5 tanh(C_t). Batch 2 with c0 = 0 and 1:
//   C1 = 0.3807970779778824, 0.8807970779778824; C2 = 0.5711956169668236, 0.8211956169668236
//   H1 = 0.18169974219452625, 0.3534092045709028; H2 = 0.258118401869521, 0.33786005045587647
TEST(RnnLstm, PyTorchExportForm) {
  std::vector<HostTensor> in = {F32({1, 2, 3, 4}, {2, 2, 1}),
                                F32({0, 0, 0, 0}, {1, 4, 1}),
                                F32({0, 0, 0, 0}, {1, 4, 1}),
                                F32({0, 0, 0, 1, 0, 0, 0, 0}, {1, 8}),
                                kNone,
                                F32({0, 0}, {1, 2, 1}),
                                F32({0, 1}, {1, 2, 1})};
  auto out = run_ok("LSTM", in, {{"hidden_size", 1}}, 3);
  EXPECT_TRUE(tensors_near(out[0], F32({0.18169974219452625f, 0.3534092045709028f,
                                        0.258118401869521f, 0.33786005045587647f},
                                       {2, 1, 2, 1})));
  EXPECT_TRUE(tensors_near(out[1], F32({0.258118401869521f, 0.33786005045587647f}, {1, 2, 1})));
  EXPECT_TRUE(tensors_near(out[2], F32({0.5711956169668236f, 0.8211956169668236f}, {1, 2, 1})));

  // With sequence_lens (packed sequences): entry 1 stops after one step.
  in[4] = I32({2, 1}, {2});
  out = run_ok("LSTM", in, {{"hidden_size", 1}}, 3);
  EXPECT_TRUE(tensors_near(
      out[0],
      F32({0.18169974219452625f, 0.3534092045709028f, 0.258118401869521f, 0}, {2, 1, 2, 1})));
  EXPECT_TRUE(tensors_near(out[1], F32({0.258118401869521f, 0.3534092045709028f}, {1, 2, 1})));
  EXPECT_TRUE(tensors_near(out[2], F32({0.5711956169668236f, 0.8807970779778824f}, {1, 2, 1})));

  // The same in float64, and batch-major (layout 1) with the states transposed accordingly.
  auto out64 = run_ok("LSTM",
                      {F64({1, 2, 3, 4}, {2, 2, 1}), F64({0, 0, 0, 0}, {1, 4, 1}),
                       F64({0, 0, 0, 0}, {1, 4, 1}), F64({0, 0, 0, 1, 0, 0, 0, 0}, {1, 8}), kNone,
                       F64({0, 0}, {2, 1, 1}), F64({0, 1}, {2, 1, 1})},
                      {{"hidden_size", 1}, {"layout", 1}}, 3);
  EXPECT_TRUE(tensors_near(
      out64[0],
      F64({0.18169974219452625, 0.258118401869521, 0.3534092045709028, 0.33786005045587647},
          {2, 2, 1, 1}),
      1e-12, 1e-14));
  EXPECT_TRUE(
      tensors_near(out64[2], F64({0.5711956169668236, 0.8211956169668236}, {2, 1, 1}), 1e-12));
}

TEST(RnnLstm, BidirectionalFloat16) {
  // Both directions identical; with one time step they agree.
  std::vector<HostTensor> in = {F16({2}, {1, 1, 1}),
                                F16({0.5f, -0.5f, -1, 2, 0.5f, -0.5f, -1, 2}, {2, 4, 1}),
                                F16({0, 0, 0, 1, 0, 0, 0, 1}, {2, 4, 1}),
                                kNone,
                                kNone,
                                F16({0.5f, 0.5f}, {2, 1, 1}),
                                F16({1, 1}, {2, 1, 1}),
                                F16({0.5f, 0.25f, 0.25f, 0.5f, 0.25f, 0.25f}, {2, 3})};
  AttributeMap a = lstm_attrs();
  a["direction"] = "bidirectional";
  a["activation_alpha"] = std::vector<float>{0.25f, 0.25f};
  a["activation_beta"] = std::vector<float>{0.5f, 0.5f};
  auto out = run_ok("LSTM", in, a, 3);
  EXPECT_TRUE(tensors_near(out[0], F16({2, 2}, {1, 2, 1, 1})));
  EXPECT_TRUE(tensors_near(out[2], F16({4, 4}, {2, 1, 1})));
}

TEST(RnnLstm, BadInputs) {
  std::vector<HostTensor> in = lstm_inputs();
  in[7] = F32({0.5f, 0.25f}, {1, 2});
  EXPECT_TRUE(fails_with(run_op("LSTM", in, lstm_attrs(), 3), StatusCode::kInvalidArgument,
                         {"LSTM:", "P", "[1, 3]", "[1, 2]"}));
  in = lstm_inputs();
  in[6] = F32({1, 1}, {2, 1, 1});
  EXPECT_TRUE(fails_with(run_op("LSTM", in, lstm_attrs(), 3), StatusCode::kInvalidArgument,
                         {"LSTM:", "initial_c", "[1, 1, 1]", "[2, 1, 1]"}));
  in = lstm_inputs();
  in[4] = F32({1}, {1});
  EXPECT_TRUE(fails_with(run_op("LSTM", in, lstm_attrs(), 3), StatusCode::kInvalidArgument,
                         {"LSTM:", "sequence_lens", "float32"}));
  in = lstm_inputs();
  in[4] = I32({-1}, {1});
  EXPECT_TRUE(fails_with(run_op("LSTM", in, lstm_attrs(), 3), StatusCode::kInvalidArgument,
                         {"LSTM:", "sequence_lens", "-1"}));
  EXPECT_TRUE(fails_with(run_op("LSTM", lstm_inputs(), lstm_attrs(), 4),
                         StatusCode::kInvalidArgument, {"LSTM", "outputs, got 4"}));
  AttributeMap a = lstm_attrs();
  a["linear_before_reset"] = 1;
  EXPECT_TRUE(fails_with(run_op("LSTM", lstm_inputs(), a, 3), StatusCode::kInvalidArgument,
                         {"LSTM", "unknown attribute 'linear_before_reset'"}));
  a = lstm_attrs();
  a["activations"] = std::vector<std::string>{"HardSigmoid", "Relu"};
  EXPECT_TRUE(fails_with(run_op("LSTM", lstm_inputs(), a, 3), StatusCode::kInvalidArgument,
                         {"LSTM:", "'activations' has 2 values", "expected 3"}));
}

}  // namespace
}  // namespace tensord::testing
