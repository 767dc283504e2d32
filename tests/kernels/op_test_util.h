// Runs single ops on the cpu reference kernels for per-op tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/executor.h"
#include "tensord/graph.h"

namespace tensord::testing {

// Builds a one-node graph (inputs "x0".."xN", outputs "y0".."yM"; an empty HostTensor in
// `inputs` is an omitted optional input) and runs it with reference kernels only.
// Returns the first error of any output, else all outputs.
inline Result<std::vector<HostTensor>> run_op(const std::string& op,
                                              const std::vector<HostTensor>& inputs,
                                              AttributeMap attrs = {}, int num_outputs = 1) {
  Graph g;
  Node n;
  n.name = "test_" + op;
  n.op = op;
  n.attrs = std::move(attrs);
  std::vector<HostTensor> bound;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) {
      n.inputs.push_back("");
      continue;
    }
    std::string name = "x" + std::to_string(i);
    n.inputs.push_back(name);
    g.inputs.push_back({name, inputs[i].type()});
    bound.push_back(inputs[i]);
  }
  for (int i = 0; i < num_outputs; ++i) {
    std::string name = "y" + std::to_string(i);
    n.outputs.push_back(name);
    g.outputs.push_back({name, {}});
  }
  g.nodes.push_back(n);
  CompileOptions opts;
  opts.fuse = false;
  TD_ASSIGN_OR_RETURN(auto outs, run_graph_on_host(g, bound, opts));
  std::vector<HostTensor> result;
  for (auto& o : outs) {
    if (!o.ok()) return o.status();
    result.push_back(std::move(o).value());
  }
  return result;
}

using Outputs = Result<std::vector<HostTensor>>;

// Runs `op` and returns output `i`; a failed run is a test failure (and an empty tensor).
inline HostTensor run1(const std::string& op, const std::vector<HostTensor>& inputs,
                       AttributeMap attrs = {}, int num_outputs = 1, int i = 0) {
  auto r = run_op(op, inputs, std::move(attrs), num_outputs);
  if (!r.ok()) {
    ADD_FAILURE() << op << " failed: " << r.status().to_string();
    return HostTensor();
  }
  return (*r)[static_cast<size_t>(i)];
}

// The run failed with `code` and a message containing every one of `parts`.
inline ::testing::AssertionResult fails_with(const Outputs& r, StatusCode code,
                                             const std::vector<std::string>& parts) {
  if (r.ok()) return ::testing::AssertionFailure() << "expected an error, got success";
  if (r.status().code() != code)
    return ::testing::AssertionFailure()
           << "code " << status_code_name(r.status().code()) << " != " << status_code_name(code)
           << ": " << r.status().message();
  for (const auto& p : parts)
    if (r.status().message().find(p) == std::string::npos)
      return ::testing::AssertionFailure()
             << "message '" << r.status().message() << "' lacks '" << p << "'";
  return ::testing::AssertionSuccess();
}
inline ::testing::AssertionResult fails(const Outputs& r, const std::vector<std::string>& parts,
                                        StatusCode code = StatusCode::kInvalidArgument) {
  return fails_with(r, code, parts);
}

// Convenience constructors (shared by every kernel test file).
inline HostTensor F32(std::vector<float> v, Shape s) { return HostTensor::from_vector(v, std::move(s)); }
inline HostTensor F64(std::vector<double> v, Shape s) { return HostTensor::from_vector(v, std::move(s)); }
inline HostTensor I64(std::vector<int64_t> v, Shape s) { return HostTensor::from_vector(v, std::move(s)); }
inline HostTensor I32(std::vector<int32_t> v, Shape s) { return HostTensor::from_vector(v, std::move(s)); }
inline HostTensor I8(std::vector<int8_t> v, Shape s) { return HostTensor::from_vector(v, std::move(s)); }
inline HostTensor U8(std::vector<uint8_t> v, Shape s) { return HostTensor::from_vector(v, std::move(s)); }
inline HostTensor Bool(std::vector<bool> v, Shape s) {
  HostTensor t(DType::kBool, std::move(s));
  for (size_t i = 0; i < v.size() && i < static_cast<size_t>(t.numel()); ++i) t.mutable_data<bool>()[i] = v[i];
  return t;
}
// float16 tensor from float values (rounded to nearest even).
inline HostTensor F16(const std::vector<float>& v, Shape s) {
  HostTensor t(DType::kFloat16, std::move(s));
  for (size_t i = 0; i < v.size() && i < static_cast<size_t>(t.numel()); ++i)
    t.mutable_data<uint16_t>()[i] = float_to_half(v[i]);
  return t;
}

// Element-wise comparison with tolerance atol + rtol*|expected| (floats) or exact (others);
// checks dtype and shape too.
inline ::testing::AssertionResult tensors_near(const HostTensor& actual, const HostTensor& expected,
                                               double rtol = 1e-5, double atol = 1e-6) {
  if (actual.dtype() != expected.dtype())
    return ::testing::AssertionFailure() << "dtype " << dtype_name(actual.dtype()) << " != expected "
                                         << dtype_name(expected.dtype());
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "shape " << shape_to_string(actual.shape())
                                         << " != expected " << shape_to_string(expected.shape());
  auto a = actual.to_double_vector();
  auto e = expected.to_double_vector();
  const bool is_float = dtype_is_float(actual.dtype());
  for (size_t i = 0; i < a.size(); ++i) {
    const bool ok = is_float ? (std::isnan(e[i]) ? std::isnan(a[i])
                                                 : std::abs(a[i] - e[i]) <= atol + rtol * std::abs(e[i]))
                             : a[i] == e[i];
    if (!ok)
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " != expected " << e[i];
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tensord::testing
