// Per-op tests through the Client, on every device the engine enumerates.
//
// run_op / run1 / run_graph run the graph on every device present (a private engine over all
// of them, or TENSORD_DEVICES when set; the ctest sets TENSORD_CPU_DEVICES=2, so cpu:0 and
// cpu:1) and on the oracle: a reference-kernels client on cpu:0 (no fusion, no oneDNN). They
// return the oracle's result, and:
//   - every device must agree with the oracle (same success or error code; same dtypes and
//     shapes; values within rounding, exact for non-floats; random ops: dtype and shape only);
//     a disagreement is a test failure naming the device;
//   - tensors_near / fails / fails_with, given a result that run_op returned, check the same
//     expectation on every device's result too, and name the device that misses it.
// A new backend's devices join the suite by being enumerated; nothing lists them.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "tensord/client.h"
#include "tensord/graph.h"

namespace tensord::testing {

// One graph's results: one Result per graph output (an error lands on the outputs it reaches).
using GraphOutputs = Result<std::vector<Result<HostTensor>>>;

#ifdef TENSORD_TEST_CACHE_DIR
// Kernel caches of devices that compile kernels (OpenCL: PoCL's and tensord's) in the build
// tree, shared by the test processes, never in ~/.cache. Before any device starts.
inline const bool kTestCachesSet = [] {
  setenv("POCL_CACHE_DIR", TENSORD_TEST_CACHE_DIR "/pocl", 0);
  setenv("TENSORD_KERNEL_CACHE", TENSORD_TEST_CACHE_DIR "/kernels", 0);
  return true;
}();
#endif

// The clients every test runs through, made once per process.
struct Clients {
  std::unique_ptr<Client> devices;  // every device present
  std::vector<std::string> names;   // their names, in the engine's order
  std::unique_ptr<Client> oracle;   // cpu:0, reference kernels
};

inline Clients& clients() {
  static Clients* c = [] {
    auto* c = new Clients;
    LocalClientOptions all;
    const char* filter = std::getenv("TENSORD_DEVICES");
    all.devices = filter && *filter ? filter : "*";  // "*": every kind
    auto d = make_local_client(all);
    if (!d.ok()) {
      ADD_FAILURE() << "cannot open a client on the devices: " << d.status().to_string();
      return c;
    }
    c->devices = std::move(*d);
    if (auto infos = c->devices->devices(); infos.ok())
      for (const auto& info : *infos) c->names.push_back(info.name);
    LocalClientOptions ref;
    ref.devices = "cpu:0";
    ref.reference_kernels = true;
    auto o = make_local_client(ref);
    if (!o.ok()) {
      ADD_FAILURE() << "cannot open the reference-kernels client on cpu:0: "
                    << o.status().to_string();
      return c;
    }
    c->oracle = std::move(*o);
    return c;
  }();  // never freed: tests may run until exit, and the engines' threads with them
  return *c;
}

// Runs `g` on `device` through `client`: uploads, execute, reads; every handle released.
inline GraphOutputs run_on(Client& client, const Graph& g, const std::vector<HostTensor>& inputs,
                           const std::string& device) {
  std::vector<TensorHandle> held;
  struct Release {
    Client& c;
    std::vector<TensorHandle>& h;
    ~Release() {
      for (TensorHandle x : h) (void)c.release(x);
    }
  } release{client, held};
  std::vector<TensorHandle> in;
  for (const auto& t : inputs) {
    TD_ASSIGN_OR_RETURN(TensorHandle h, client.upload(t.view(), device));
    held.push_back(h);
    in.push_back(h);
  }
  TD_ASSIGN_OR_RETURN(auto outs, client.execute(g, in, device));
  held.insert(held.end(), outs.begin(), outs.end());
  std::vector<Result<HostTensor>> result;
  for (TensorHandle h : outs) result.push_back(client.read(h));
  return result;
}

// One run: the oracle's results and every device's, kept for the checks of the expectations.
struct RunRecord {
  std::string what;  // "op Add", "graph"
  GraphOutputs oracle = std::vector<Result<HostTensor>>{};
  std::vector<std::pair<std::string, GraphOutputs>> devices;
};

// The latest runs (the expectations' checks look their result up here).
inline std::deque<RunRecord>& recent_runs() {
  static std::deque<RunRecord> runs;
  return runs;
}

inline bool is_random_op(const std::string& op) {
  // Random by specification: implementations may differ, even with a seed.
  return op == "RandomNormal" || op == "RandomNormalLike" || op == "RandomUniform" ||
         op == "RandomUniformLike" || op == "Bernoulli" || op == "Multinomial" || op == "Dropout";
}

// A device's output against the oracle's: dtype, shape, values within rounding.
inline std::string disagreement(const HostTensor& got, const HostTensor& want, bool values) {
  if (got.dtype() != want.dtype())
    return std::string("dtype ") + dtype_name(got.dtype()) + ", the reference kernels give " +
           dtype_name(want.dtype());
  if (got.shape() != want.shape())
    return "shape " + shape_to_string(got.shape()) + ", the reference kernels give " +
           shape_to_string(want.shape());
  if (!values) return "";
  const auto a = got.to_double_vector();
  const auto e = want.to_double_vector();
  const bool is_float = dtype_is_float(got.dtype());
  double rtol = 1e-4;  // another device may round differently; the test's own tolerance still holds
  if (got.dtype() == DType::kFloat16) rtol = 1e-3;
  if (got.dtype() == DType::kBFloat16) rtol = 1e-2;
  for (size_t i = 0; i < a.size() && i < e.size(); ++i) {
    bool ok = a[i] == e[i];
    if (!ok && is_float)
      ok = std::isnan(e[i]) ? std::isnan(a[i])
                            : std::abs(a[i] - e[i]) <= 1e-5 + rtol * std::abs(e[i]);
    if (!ok)
      return "element " + std::to_string(i) + " is " + std::to_string(a[i]) +
             ", the reference kernels give " + std::to_string(e[i]);
  }
  return "";
}

// Adds a failure for every way `got` (on `device`) differs from the oracle's `want`.
inline void check_agrees(const std::string& what, const std::string& device,
                         const GraphOutputs& got, const GraphOutputs& want, bool values) {
  const std::string where = what + " on " + device + ": ";
  if (!want.ok() || !got.ok()) {
    if (want.ok())
      ADD_FAILURE() << where << "failed: " << got.status().to_string()
                    << " (the reference kernels ran it)";
    else if (got.ok())
      ADD_FAILURE() << where
                    << "ran, but the reference kernels refuse it: " << want.status().to_string();
    else if (got.status().code() != want.status().code())
      ADD_FAILURE() << where << got.status().to_string() << ", the reference kernels give "
                    << want.status().to_string();
    return;
  }
  if (got->size() != want->size()) {
    ADD_FAILURE() << where << got->size() << " outputs, the reference kernels give "
                  << want->size();
    return;
  }
  for (size_t k = 0; k < got->size(); ++k) {
    const auto& g = (*got)[k];
    const auto& w = (*want)[k];
    if (!g.ok() || !w.ok()) {
      if (g.ok() != w.ok() || g.status().code() != w.status().code())
        ADD_FAILURE() << where << "output " << k << ": "
                      << (g.ok() ? std::string("a value") : g.status().to_string())
                      << ", the reference kernels give "
                      << (w.ok() ? std::string("a value") : w.status().to_string());
      continue;
    }
    if (std::string d = disagreement(*g, *w, values); !d.empty())
      ADD_FAILURE() << where << "output " << k << ": " << d;
  }
}

// Runs `g` on the oracle and on every device, checks that they agree, records the run.
inline GraphOutputs run_everywhere(const std::string& what, const Graph& g,
                                   const std::vector<HostTensor>& inputs) {
  Clients& c = clients();
  if (!c.oracle || !c.devices) return errors::Internal("no clients (see the first failure)");
  bool values = true;
  for (const Node& n : g.nodes)
    if (is_random_op(n.op)) values = false;
  RunRecord rec;
  rec.what = what;
  rec.oracle = run_on(*c.oracle, g, inputs, "cpu:0");
  for (const auto& device : c.names) {
    GraphOutputs got = run_on(*c.devices, g, inputs, device);
    check_agrees(what, device, got, rec.oracle, values);
    rec.devices.emplace_back(device, std::move(got));
  }
  auto& runs = recent_runs();
  runs.push_front(rec);
  if (runs.size() > 16) runs.pop_back();
  return rec.oracle;
}

// The first error of any output, else all outputs.
inline Result<std::vector<HostTensor>> flatten(const GraphOutputs& outs) {
  if (!outs.ok()) return outs.status();
  std::vector<HostTensor> result;
  for (const auto& o : *outs) {
    if (!o.ok()) return o.status();
    result.push_back(*o);
  }
  return result;
}

// Runs a whole graph (inputs bound to g.inputs in order) on every device and the oracle, as
// run_op does; returns the oracle's result per output.
inline GraphOutputs run_graph(const Graph& g, const std::vector<HostTensor>& inputs) {
  return run_everywhere("graph", g, inputs);
}

// Builds a one-node graph (inputs "x0".."xN", outputs "y0".."yM"; an empty HostTensor in
// `inputs` is an omitted optional input) and runs it on every device and the oracle.
// Returns the oracle's first error of any output, else all its outputs.
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
  return flatten(run_everywhere("op " + op, g, bound));
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
inline ::testing::AssertionResult fails_here(const Outputs& r, StatusCode code,
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

// As fails_here, and when `r` is a run_op result, on every device too.
inline ::testing::AssertionResult fails_with(const Outputs& r, StatusCode code,
                                             const std::vector<std::string>& parts) {
  const RunRecord* rec = nullptr;
  if (!r.ok())
    for (const RunRecord& x : recent_runs()) {
      const auto oracle = flatten(x.oracle);
      if (!oracle.ok() && oracle.status().code() == r.status().code() &&
          oracle.status().message() == r.status().message()) {
        rec = &x;
        break;
      }
    }
  auto here = fails_here(r, code, parts);
  if (!rec) return here;
  if (!here)
    return ::testing::AssertionFailure()
           << rec->what << " on cpu:0 (reference kernels): " << here.message();
  for (const auto& [device, outs] : rec->devices)
    if (auto d = fails_here(flatten(outs), code, parts); !d)
      return ::testing::AssertionFailure() << rec->what << " on " << device << ": " << d.message();
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
inline ::testing::AssertionResult tensors_near_here(const HostTensor& actual,
                                                    const HostTensor& expected, double rtol = 1e-5,
                                                    double atol = 1e-6) {
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

// As tensors_near_here, and when `actual` is an output of a run_op / run1 / run_graph, the same
// output of every device against `expected` too (the failure names the device).
inline ::testing::AssertionResult tensors_near(const HostTensor& actual, const HostTensor& expected,
                                               double rtol = 1e-5, double atol = 1e-6) {
  const RunRecord* rec = nullptr;
  size_t k = 0;
  if (actual.data() != nullptr)
    for (const RunRecord& r : recent_runs()) {
      if (!r.oracle.ok()) continue;
      for (size_t i = 0; i < r.oracle->size() && !rec; ++i)
        if ((*r.oracle)[i].ok() && (*r.oracle)[i]->data() == actual.data()) {
          rec = &r;
          k = i;
        }
      if (rec) break;
    }
  auto here = tensors_near_here(actual, expected, rtol, atol);
  if (!rec) return here;
  if (!here)
    return ::testing::AssertionFailure()
           << rec->what << " on cpu:0 (reference kernels): " << here.message();
  for (const auto& [device, outs] : rec->devices) {
    if (!outs.ok() || k >= outs->size() || !(*outs)[k].ok()) continue;  // reported by run_op
    if (auto d = tensors_near_here(*(*outs)[k], expected, rtol, atol); !d)
      return ::testing::AssertionFailure() << rec->what << " on " << device << ": " << d.message();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tensord::testing
