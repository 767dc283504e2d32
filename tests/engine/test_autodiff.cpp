// tensord::gradients (issue 34): the backward graph against central finite differences in
// float64, through a real embedded client on cpu:0; refusal of an op without a rule; the
// static-shape requirement. (The per-rule checks against PyTorch autograd are in
// tests/python/test_autodiff.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tensord/array.h"
#include "tensord/autodiff.h"
#include "tensord/client.h"

namespace tensord {
namespace {

std::unique_ptr<Client> cpu_client() {
  LocalClientOptions o;
  o.devices = "cpu:0";
  auto c = make_local_client(o);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return std::move(*c);
}

HostTensor random_f64(const Shape& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> d;
  HostTensor t(DType::kFloat64, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<double>()[i] = d(gen);
  return t;
}

double run_loss(Client& c, const Graph& g, const std::vector<HostTensor>& inputs) {
  std::vector<TensorHandle> hs;
  for (const auto& t : inputs) hs.push_back(*c.upload(t.view(), "cpu:0"));
  auto out = c.execute(g, hs, "cpu:0");
  EXPECT_TRUE(out.ok()) << out.status().message();
  auto v = c.read((*out)[0]);
  EXPECT_TRUE(v.ok()) << v.status().message();
  for (auto h : hs) (void)c.release(h);
  for (auto h : *out) (void)c.release(h);
  return v->to_double_vector()[0];
}

// Every gradient of `g`'s first output with respect to every input, against central
// differences; max |analytic - numeric| / max(1, |numeric|).
void check_against_finite_differences(const Graph& g, std::vector<HostTensor> inputs) {
  auto c = cpu_client();
  std::vector<std::string> wrt;
  for (const auto& v : g.inputs) wrt.push_back(v.name);
  auto gg = gradients(g, g.outputs[0].name, wrt);
  ASSERT_TRUE(gg.ok()) << gg.status().message();
  ASSERT_EQ(gg->outputs.size(), inputs.size());
  std::vector<TensorHandle> hs;
  for (const auto& t : inputs) hs.push_back(*c->upload(t.view(), "cpu:0"));
  auto out = c->execute(*gg, hs, "cpu:0");
  ASSERT_TRUE(out.ok()) << out.status().message();
  const double eps = 1e-6;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto grad = c->read((*out)[i]);
    ASSERT_TRUE(grad.ok()) << grad.status().message();
    ASSERT_EQ(grad->shape(), inputs[i].shape());
    double worst = 0;
    for (int64_t k = 0; k < inputs[i].numel(); ++k) {
      std::vector<HostTensor> plus = inputs, minus = inputs;
      plus[i] = random_f64(inputs[i].shape(), 0), minus[i] = random_f64(inputs[i].shape(), 0);
      std::memcpy(plus[i].mutable_data(), inputs[i].data(), inputs[i].nbytes());
      std::memcpy(minus[i].mutable_data(), inputs[i].data(), inputs[i].nbytes());
      plus[i].mutable_data<double>()[k] += eps;
      minus[i].mutable_data<double>()[k] -= eps;
      const double num = (run_loss(*c, g, plus) - run_loss(*c, g, minus)) / (2 * eps);
      const double ana = grad->data<double>()[k];
      worst = std::max(worst, std::abs(ana - num) / std::max(1.0, std::abs(num)));
    }
    EXPECT_LT(worst, 1e-6) << "input " << g.inputs[i].name;
  }
}

Node node(std::string op, std::vector<std::string> in, std::vector<std::string> out,
          AttributeMap attrs = {}) {
  Node n;
  n.op = std::move(op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

TEST(Autodiff, MlpLossMatchesFiniteDifferences) {
  Graph g;
  const TensorType f64x{DType::kFloat64, {4, 3}}, f64w{DType::kFloat64, {3, 5}},
      f64b{DType::kFloat64, {5}};
  g.inputs = {{"x", f64x}, {"w", f64w}, {"b", f64b}};
  g.initializers["labels"] = HostTensor::from_vector<int64_t>({0, 4, 2, 2}, {4});
  g.nodes = {node("Gemm", {"x", "w", "b"}, {"h"}, {{"alpha", 0.7f}}), node("Tanh", {"h"}, {"t"}),
             node("Mul", {"t", "x2"}, {"u"}),
             node("ReduceSum", {"x"}, {"x2"}, {{"keepdims", int64_t{1}}}),
             node("SoftmaxCrossEntropyLoss", {"u", "labels"}, {"loss"})};
  g.outputs = {{"loss", {DType::kFloat64, {}}}};
  check_against_finite_differences(
      g, {random_f64({4, 3}, 1), random_f64({3, 5}, 2), random_f64({5}, 3)});
}

TEST(Autodiff, ConvPoolLossMatchesFiniteDifferences) {
  Graph g;
  g.inputs = {{"x", {DType::kFloat64, {1, 2, 5, 5}}}, {"w", {DType::kFloat64, {3, 2, 3, 3}}}};
  g.nodes = {
      node("Conv", {"x", "w"}, {"c"}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}),
      node("MaxPool", {"c"}, {"p"},
           {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{1, 1}}}),
      node("AveragePool", {"c"}, {"a"},
           {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{2, 2}}}),
      node("Mul", {"p", "p"}, {"pp"}),
      node("ReduceMean", {"pp"}, {"m"}, {{"keepdims", int64_t{0}}}),
      node("ReduceSum", {"a"}, {"s"}, {{"keepdims", int64_t{0}}}),
      node("Add", {"m", "s"}, {"loss"})};
  g.outputs = {{"loss", {DType::kFloat64, {}}}};
  check_against_finite_differences(g, {random_f64({1, 2, 5, 5}, 4), random_f64({3, 2, 3, 3}, 5)});
}

TEST(Autodiff, OpWithoutRuleIsRefusedByName) {
  Graph g;
  g.inputs = {{"x", {DType::kFloat32, {3}}}};
  g.nodes = {node("Cosh", {"x"}, {"e"}), node("ReduceSum", {"e"}, {"loss"})};
  g.outputs = {{"loss", {DType::kFloat32, {}}}};
  auto r = gradients(g, "loss", {"x"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("no gradient rule for op 'Cosh'"), std::string::npos)
      << r.status().message();
  // Off the path from x to the loss, an op without a rule does not matter.
  g.inputs.push_back({"y", {DType::kFloat32, {3}}});
  g.nodes = {node("Cosh", {"y"}, {"e"}), node("Mul", {"x", "e"}, {"m"}),
             node("ReduceSum", {"m"}, {"loss"})};
  EXPECT_TRUE(gradients(g, "loss", {"x"}).ok());
}

TEST(Autodiff, NeedsStaticShapesAndFloatValues) {
  Graph g;
  g.inputs = {{"x", {DType::kFloat32, {-1, 3}}}};
  g.nodes = {node("ReduceSum", {"x"}, {"loss"})};
  g.outputs = {{"loss", {DType::kFloat32, {}}}};
  auto r = gradients(g, "loss", {"x"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("static shapes"), std::string::npos) << r.status().message();
  EXPECT_TRUE(gradients(g, "loss", {"x"}, {{DType::kFloat32, {2, 3}}}).ok());
  auto missing = gradients(g, "loss", {"nope"}, {{DType::kFloat32, {2, 3}}});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'nope'"), std::string::npos);
}

TEST(Autodiff, ArrayGradReusesTheForwardValues) {
  auto ctx = std::make_shared<Context>(std::shared_ptr<Client>(cpu_client()));
  Array x = Array::from_vector<float>({1, 2, 3, 4}, {2, 2}, "cpu:0", ctx);
  Array w = Array::from_vector<float>({0.5f, -1, 2, 0}, {2, 2}, "cpu:0", ctx);
  Array loss = (x.matmul(w).tanh()).sum();
  std::vector<Array> g = grad(loss, {w, x});
  ASSERT_EQ(g.size(), 2u);
  ASSERT_TRUE(eval({loss, g[0], g[1]}).ok());
  EXPECT_EQ(ctx->flushes(), 1);  // loss and both gradients: one graph
  auto gw = g[0].to_vector<float>();
  ASSERT_TRUE(gw.ok());
  // d/dw sum(tanh(x @ w)) = x^T @ (1 - tanh^2(x @ w))
  const float xv[4] = {1, 2, 3, 4}, wv[4] = {0.5f, -1, 2, 0};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      double s = 0;
      for (int k = 0; k < 2; ++k) {
        const double y = std::tanh(xv[k * 2 + 0] * wv[0 * 2 + j] + xv[k * 2 + 1] * wv[1 * 2 + j]);
        s += xv[k * 2 + i] * (1 - y * y);
      }
      EXPECT_NEAR((*gw)[i * 2 + j], s, 1e-5);
    }
}

}  // namespace
}  // namespace tensord
