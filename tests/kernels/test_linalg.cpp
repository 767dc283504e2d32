// The tensord-domain linear-algebra ops (src/core/ops/linalg.cpp, LAPACKE cpu kernels) against
// hand-computed values and identities (Q R = A, U diag(S) Vh = A). Every run goes through every
// device present, so the devices without these kernels (opencl, cuda) are checked to fall back
// to cpu:0 and agree with it.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/op_registry.h"
#include "kernels/op_test_util.h"

namespace tensord::testing {
namespace {

// run_op for a node in the `tensord` domain.
Outputs run_td(const std::string& op, const std::vector<HostTensor>& inputs,
               AttributeMap attrs = {}, int num_outputs = 1,
               const std::string& domain = "tensord") {
  Graph g;
  Node n;
  n.name = "test_" + op;
  n.op = op;
  n.domain = domain;
  n.attrs = std::move(attrs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = "x" + std::to_string(i);
    n.inputs.push_back(name);
    g.inputs.push_back({name, inputs[i].type()});
  }
  for (int i = 0; i < num_outputs; ++i) {
    const std::string name = "y" + std::to_string(i);
    n.outputs.push_back(name);
    g.outputs.push_back({name, {}});
  }
  g.nodes.push_back(n);
  return flatten(run_everywhere("op tensord." + op, g, inputs));
}

std::vector<HostTensor> ok_run(const std::string& op, const std::vector<HostTensor>& inputs,
                               AttributeMap attrs = {}, int num_outputs = 1) {
  auto r = run_td(op, inputs, std::move(attrs), num_outputs);
  if (!r.ok()) {
    ADD_FAILURE() << op << " failed: " << r.status().to_string();
    return std::vector<HostTensor>(static_cast<size_t>(num_outputs));
  }
  return *r;
}

// a [m, k] times b [k, n], row-major doubles.
std::vector<double> matmul(const std::vector<double>& a, const std::vector<double>& b, int64_t m,
                           int64_t k, int64_t n) {
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}

void expect_all_near(const std::vector<double>& got, const std::vector<double>& want, double tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol) << what << " element " << i;
}

// ---------------- Cholesky ----------------

TEST(Linalg, CholeskyLowerUpperAndBatch) {
  const HostTensor a = F64({4, 2, 2, 3, 9, 0, 0, 9}, {2, 2, 2});
  const double r2 = std::sqrt(2.0);
  EXPECT_TRUE(tensors_near(ok_run("Cholesky", {a})[0], F64({2, 0, 1, r2, 3, 0, 0, 3}, {2, 2, 2})));
  EXPECT_TRUE(tensors_near(ok_run("Cholesky", {a}, {{"upper", 1}})[0],
                           F64({2, 1, 0, r2, 3, 0, 0, 3}, {2, 2, 2})));
  EXPECT_TRUE(tensors_near(ok_run("Cholesky", {F32({4, 2, 2, 3}, {2, 2})})[0],
                           F32({2, 0, 1, static_cast<float>(r2)}, {2, 2})));
}

TEST(Linalg, CholeskyNotPositiveDefinite) {
  EXPECT_TRUE(fails(run_td("Cholesky", {F64({4, 0, 0, 4, 1, 2, 2, 1}, {2, 2, 2})}),
                    {"Cholesky", "matrix 1 of the batch is not positive definite", "order 2"}));
}

// ---------------- Eigh ----------------

TEST(Linalg, EighValuesAndVectors) {
  const HostTensor a = F64({2, 1, 1, 2}, {2, 2});
  auto r = ok_run("Eigh", {a}, {}, 2);
  EXPECT_TRUE(tensors_near(r[0], F64({1, 3}, {2})));
  ASSERT_EQ(r[1].shape(), (Shape{2, 2}));
  const double h = 1 / std::sqrt(2.0);
  for (double v : r[1].to_double_vector()) EXPECT_NEAR(std::abs(v), h, 1e-12);
  // A V = V diag(W): the columns are the eigenvectors.
  const auto v = r[1].to_double_vector();
  const auto av = matmul(a.to_double_vector(), v, 2, 2, 2);
  expect_all_near(av, {v[0] * 1, v[1] * 3, v[2] * 1, v[3] * 3}, 1e-12, "A V");
  // Values only; float32; a batch of diagonal matrices sorts ascending.
  EXPECT_TRUE(tensors_near(
      ok_run("Eigh", {F32({5, 0, 0, -1, 2, 0, 0, 2}, {2, 2, 2})}, {{"compute_v", 0}})[0],
      F32({-1, 5, 2, 2}, {2, 2})));
}

// ---------------- QR ----------------

TEST(Linalg, QrReducedKnownValues) {
  auto r = ok_run("QR", {F64({3, 0, 4, 5}, {2, 2})}, {}, 2);
  EXPECT_TRUE(tensors_near(r[0], F64({-0.6, -0.8, -0.8, 0.6}, {2, 2}), 1e-12, 1e-12));
  EXPECT_TRUE(tensors_near(r[1], F64({-5, -4, 0, 3}, {2, 2}), 1e-12, 1e-12));
}

TEST(Linalg, QrCompleteAndWideShapes) {
  const std::vector<double> b = {1, 2, 3, 4, 5, 6};
  auto c = ok_run("QR", {F64(b, {3, 2})}, {{"mode", "complete"}}, 2);
  ASSERT_EQ(c[0].shape(), (Shape{3, 3}));
  ASSERT_EQ(c[1].shape(), (Shape{3, 2}));
  const auto q = c[0].to_double_vector(), rr = c[1].to_double_vector();
  expect_all_near(matmul(q, rr, 3, 3, 2), b, 1e-12, "Q R");
  std::vector<double> qt(9);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) qt[j * 3 + i] = q[i * 3 + j];
  expect_all_near(matmul(qt, q, 3, 3, 3), {1, 0, 0, 0, 1, 0, 0, 0, 1}, 1e-12, "Q^T Q");
  EXPECT_EQ(rr[4], 0.0);  // R is upper triangular
  EXPECT_EQ(rr[5], 0.0);
  EXPECT_EQ(rr[2], 0.0);
  // A wide float32 matrix: Q [2, 2], R [2, 3].
  auto w = ok_run("QR", {F32({1, 2, 3, 4, 5, 6}, {1, 2, 3})}, {}, 2);
  ASSERT_EQ(w[0].shape(), (Shape{1, 2, 2}));
  ASSERT_EQ(w[1].shape(), (Shape{1, 2, 3}));
  expect_all_near(matmul(w[0].to_double_vector(), w[1].to_double_vector(), 2, 2, 3), b, 1e-5,
                  "Q R (float32)");
}

// ---------------- SVD ----------------

TEST(Linalg, SvdValuesAndReconstruction) {
  const std::vector<double> b = {1, 2, 3, 4, 5, 6};
  EXPECT_TRUE(tensors_near(ok_run("SVD", {F64(b, {3, 2})}, {{"compute_uv", 0}})[0],
                           F64({9.525518091565107, 0.5143005806586443}, {2}), 1e-12, 1e-12));
  auto r = ok_run("SVD", {F64(b, {3, 2})}, {}, 3);  // reduced: U [3, 2], S [2], Vh [2, 2]
  ASSERT_EQ(r[0].shape(), (Shape{3, 2}));
  ASSERT_EQ(r[2].shape(), (Shape{2, 2}));
  auto us = r[0].to_double_vector();
  const auto s = r[1].to_double_vector();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) us[i * 2 + j] *= s[static_cast<size_t>(j)];
  expect_all_near(matmul(us, r[2].to_double_vector(), 3, 2, 2), b, 1e-12, "U S Vh");
  auto f = ok_run("SVD", {F32(std::vector<float>(b.begin(), b.end()), {3, 2})},
                  {{"full_matrices", 1}}, 3);
  EXPECT_EQ(f[0].shape(), (Shape{3, 3}));
  EXPECT_EQ(f[1].shape(), (Shape{2}));
  EXPECT_EQ(f[2].shape(), (Shape{2, 2}));
}

// ---------------- Solve, Inv, SLogDet ----------------

TEST(Linalg, SolveBatch) {
  const HostTensor a = F64({3, 1, 1, 2, 2, 0, 0, 4}, {2, 2, 2});
  const HostTensor b = F64({9, 8, 2, 8}, {2, 2, 1});
  EXPECT_TRUE(tensors_near(ok_run("Solve", {a, b})[0], F64({2, 3, 1, 2}, {2, 2, 1})));
  EXPECT_TRUE(fails(run_td("Solve", {F64({1, 2, 2, 4}, {2, 2}), F64({1, 1}, {2, 1})}),
                    {"Solve", "matrix A 0 of the batch is singular"}));
  EXPECT_TRUE(fails(run_td("Solve", {a, F64({1, 2, 3}, {1, 3, 1})}), {"Solve", "same batch"}));
}

TEST(Linalg, InvKnownAndSingular) {
  EXPECT_TRUE(tensors_near(ok_run("Inv", {F64({4, 7, 2, 6}, {2, 2})})[0],
                           F64({0.6, -0.7, -0.2, 0.4}, {2, 2}), 1e-12, 1e-12));
  EXPECT_TRUE(tensors_near(ok_run("Inv", {F32({2, 0, 0, 4}, {1, 2, 2})})[0],
                           F32({0.5, 0, 0, 0.25}, {1, 2, 2})));
  EXPECT_TRUE(fails(run_td("Inv", {F64({1, 0, 0, 1, 1, 2, 2, 4}, {2, 2, 2})}),
                    {"Inv", "matrix 1 of the batch is singular"}));
}

TEST(Linalg, SLogDetSignsAndSingular) {
  auto r = ok_run("SLogDet", {F64({1, 2, 3, 4, 2, 0, 0, 3, 1, 2, 2, 4}, {3, 2, 2})}, {}, 2);
  const auto sign = r[0].to_double_vector(), la = r[1].to_double_vector();
  ASSERT_EQ(sign.size(), 3u);
  EXPECT_EQ(sign[0], -1.0);
  EXPECT_NEAR(la[0], std::log(2.0), 1e-12);
  EXPECT_EQ(sign[1], 1.0);
  EXPECT_NEAR(la[1], std::log(6.0), 1e-12);
  EXPECT_EQ(sign[2], 0.0);  // singular: NumPy's (0, -inf)
  EXPECT_EQ(la[2], -std::numeric_limits<double>::infinity());
}

// ---------------- schema errors ----------------

TEST(Linalg, BadInputsAndDomain) {
  EXPECT_TRUE(fails(run_td("Inv", {I64({1, 0, 0, 1}, {2, 2})}), {"Inv", "int64", "float32"}));
  EXPECT_TRUE(fails(run_td("Cholesky", {F32({1, 2, 3, 4, 5, 6}, {2, 3})}), {"square", "[2, 3]"}));
  EXPECT_TRUE(fails(run_td("QR", {F32({1, 2}, {2})}, {}, 2), {"QR", "rank >= 2"}));
  EXPECT_TRUE(fails(run_td("QR", {F32({1, 2, 3, 4}, {2, 2})}, {{"mode", "r"}}, 2), {"'r'"}));
  EXPECT_TRUE(fails(run_td("SVD", {F32({1, 2, 3, 4}, {2, 2})}, {}, 1), {"compute_uv=1", "3"}));
  // The ops live in the tensord domain only; ONNX's default domain does not have them.
  EXPECT_TRUE(fails(run_td("Inv", {F32({1, 0, 0, 1}, {2, 2})}, {}, 1, ""),
                    {"'Inv' is in domain 'tensord'"}, StatusCode::kUnimplemented));
  EXPECT_TRUE(fails(run_td("Add", {F32({1}, {1}), F32({1}, {1})}, {}, 1, "tensord"),
                    {"'Add' is in domain 'ai.onnx'"}, StatusCode::kUnimplemented));
}

}  // namespace
}  // namespace tensord::testing
