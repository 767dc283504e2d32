// Client's calls across devices (client.h): run_data_parallel and the collectives, written
// once on the virtual calls (execute, copy, run_on, info), so that the embedded engine, a
// broker and a cluster's front (where n<r>/<device> copies are MPI transfers) all have them.
#include <string>
#include <vector>

#include "core/errors.h"
#include "tensord/client.h"

namespace tensord {
namespace {

// Handles made along the way, released when the call ends (the engine keeps the bytes of
// those still used by queued work).
struct Scratch {
  Client& c;
  std::vector<TensorHandle> handles;
  ~Scratch() {
    for (TensorHandle h : handles) (void)c.release(h);
  }
  TensorHandle keep(TensorHandle h) {
    handles.push_back(h);
    return h;
  }
};

HostTensor int64s(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return HostTensor::from_vector<int64_t>(v, {n});
}

// y = x[begin:end] along axis 0.
Graph slice_graph(int64_t begin, int64_t end) {
  Graph g;
  g.name = "data_parallel_split";
  g.inputs.push_back({"x", {}});
  g.outputs.push_back({"y", {}});
  g.initializers.emplace("starts", int64s({begin}));
  g.initializers.emplace("ends", int64s({end}));
  g.initializers.emplace("axes", int64s({0}));
  Node n;
  n.name = "split";
  n.op = "Slice";
  n.inputs = {"x", "starts", "ends", "axes"};
  n.outputs = {"y"};
  g.nodes.push_back(std::move(n));
  return g;
}

// y = op(x0, ..., x{k-1}): Concat along axis 0, or a variadic elementwise op.
Graph combine_graph(const std::string& name, const std::string& op, size_t k) {
  Graph g;
  g.name = name;
  Node n;
  n.name = name;
  n.op = op;
  for (size_t i = 0; i < k; ++i) {
    g.inputs.push_back({"x" + std::to_string(i), {}});
    n.inputs.push_back("x" + std::to_string(i));
  }
  n.outputs = {"y"};
  if (op == "Concat") n.attrs.emplace("axis", int64_t{0});
  g.outputs.push_back({"y", {}});
  g.nodes.push_back(std::move(n));
  return g;
}

// The tensor's type and device, its shape known (waits for a value whose dims are computed).
Result<TensorInfo> known_info(Client& c, TensorHandle h) {
  TD_ASSIGN_OR_RETURN(TensorInfo i, c.info(h));
  for (int64_t d : i.type.shape) {
    if (d >= 0) continue;
    TD_RETURN_IF_ERROR(c.wait(h));
    return c.info(h);
  }
  return i;
}

// One value per device: `value` (on devices[0]) copied to each of the others. The handle for
// devices[0] is `value` itself.
Result<std::vector<TensorHandle>> spread(Client& c, TensorHandle value,
                                         const std::vector<std::string>& devices) {
  std::vector<TensorHandle> out{value};
  for (size_t i = 1; i < devices.size(); ++i) {
    auto h = c.copy(value, devices[i]);
    if (!h.ok()) {
      for (TensorHandle o : out) (void)c.release(o);
      return h.status().with_context("copy to " + devices[i]);
    }
    out.push_back(*h);
  }
  return out;
}

// The devices of `tensors`, checking that they agree on dtype and shape (all dims, or all
// but axis 0 when `any_batch`).
Result<std::vector<std::string>> check_collective(Client& c, const char* what,
                                                  const std::vector<TensorHandle>& tensors,
                                                  bool any_batch) {
  if (tensors.empty()) return errors::InvalidArgument("{}: no tensors given", what);
  std::vector<std::string> devices;
  TensorType first;
  for (size_t i = 0; i < tensors.size(); ++i) {
    TD_ASSIGN_OR_RETURN(TensorInfo info, known_info(c, tensors[i]));
    devices.push_back(info.device);
    if (i == 0) {
      first = info.type;
      if (any_batch && first.shape.empty())
        return errors::InvalidArgument("{}: tensor 0 is a scalar: nothing to gather along axis 0",
                                       what);
      continue;
    }
    TensorType a = first, b = info.type;
    if (any_batch && !a.shape.empty() && !b.shape.empty()) a.shape[0] = b.shape[0];
    if (a.dtype != b.dtype || a.shape != b.shape)
      return errors::InvalidArgument(
          "{}: tensor {} ({}, on {}) does not match tensor 0 ({}, on {}){}", what, i,
          info.type.to_string(), info.device, first.to_string(), devices[0],
          any_batch ? ": they must agree on dtype and on every dim but axis 0" : "");
  }
  return devices;
}

}  // namespace

Result<std::vector<TensorHandle>> Client::run_data_parallel(
    ModelHandle model, const std::vector<TensorHandle>& inputs,
    const std::vector<std::string>& devices) {
  if (devices.empty())
    return errors::InvalidArgument("run_data_parallel: no devices given");
  if (inputs.empty())
    return errors::InvalidArgument(
        "run_data_parallel: no inputs (the batch to split along axis 0 comes from them)");
  const int64_t k = static_cast<int64_t>(devices.size());
  int64_t batch = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TD_ASSIGN_OR_RETURN(TensorInfo info, known_info(*this, inputs[i]));
    if (info.type.shape.empty())
      return errors::InvalidArgument(
          "run_data_parallel: input {} is a scalar: nothing to split along axis 0", i);
    const int64_t b = info.type.shape[0];
    if (batch < 0) {
      batch = b;
    } else if (b != batch) {
      return errors::InvalidArgument(
          "run_data_parallel: the inputs disagree on the batch (axis 0): input 0 has {}, "
          "input {} has {} ({})",
          batch, i, b, info.type.to_string());
    }
  }
  if (batch < k)
    return errors::InvalidArgument(
        "run_data_parallel: a batch of {} cannot be split over {} devices (fewer examples "
        "than devices)",
        batch, k);
  Scratch scratch{*this, {}};
  // All the parts are cut first (where the inputs are: a cut queued behind a part's run on the
  // same device would hold back the parts after it), then all run, each on its device (the
  // run moves the part there), every part in flight before the first is gathered.
  std::vector<std::vector<TensorHandle>> parts(static_cast<size_t>(k));
  std::vector<int64_t> bounds{0};
  for (int64_t p = 0; p < k; ++p) {
    const int64_t begin = bounds.back(), end = begin + batch / k + (p < batch % k ? 1 : 0);
    bounds.push_back(end);
    if (k == 1) {
      parts[0] = inputs;
      break;
    }
    const Graph g = slice_graph(begin, end);
    for (TensorHandle x : inputs) {
      auto y = execute(g, {x}, "");
      if (!y.ok()) return y.status().with_context("run_data_parallel: splitting the batch");
      parts[static_cast<size_t>(p)].push_back(scratch.keep((*y)[0]));
    }
  }
  std::vector<std::vector<TensorHandle>> outs;
  for (int64_t p = 0; p < k; ++p) {
    const std::string& device = devices[static_cast<size_t>(p)];
    auto out = run_on(model, parts[static_cast<size_t>(p)], device);
    if (!out.ok())
      return out.status().with_context(fmt::format("run_data_parallel: examples [{}, {}) on {}",
                                                   bounds[static_cast<size_t>(p)],
                                                   bounds[static_cast<size_t>(p) + 1], device));
    for (TensorHandle h : *out) scratch.keep(h);
    outs.push_back(std::move(*out));
  }
  std::vector<TensorHandle> result;
  const Graph concat = combine_graph("data_parallel_gather", "Concat", static_cast<size_t>(k));
  for (size_t o = 0; o < outs[0].size(); ++o) {
    std::vector<TensorHandle> pieces;
    for (const auto& out : outs) pieces.push_back(out[o]);
    Status s;
    if (k == 1) {
      auto y = copy(pieces[0], devices[0]);
      if (y.ok()) result.push_back(*y);
      s = y.status();
    } else {
      auto y = execute(concat, pieces, devices[0]);
      if (y.ok()) result.push_back((*y)[0]);
      s = y.status();
    }
    if (!s.ok()) {
      for (TensorHandle h : result) (void)release(h);
      return s.with_context(
          fmt::format("run_data_parallel: gathering output {} on {}", o, devices[0]));
    }
  }
  return result;
}

Result<std::vector<TensorHandle>> Client::allreduce(const std::vector<TensorHandle>& tensors,
                                                    ReduceOp op) {
  TD_ASSIGN_OR_RETURN(auto devices, check_collective(*this, "allreduce", tensors, false));
  const char* name = op == ReduceOp::kSum    ? "Sum"
                     : op == ReduceOp::kMean ? "Mean"
                     : op == ReduceOp::kMax  ? "Max"
                                             : "Min";
  auto r = execute(combine_graph("allreduce", name, tensors.size()), tensors, devices[0]);
  if (!r.ok()) return r.status().with_context(fmt::format("allreduce ({}) on {}", name, devices[0]));
  return spread(*this, (*r)[0], devices);
}

Result<std::vector<TensorHandle>> Client::allgather(const std::vector<TensorHandle>& tensors) {
  TD_ASSIGN_OR_RETURN(auto devices, check_collective(*this, "allgather", tensors, true));
  auto r = execute(combine_graph("allgather", "Concat", tensors.size()), tensors, devices[0]);
  if (!r.ok()) return r.status().with_context("allgather on " + devices[0]);
  return spread(*this, (*r)[0], devices);
}

Result<std::vector<TensorHandle>> Client::broadcast(TensorHandle tensor,
                                                    const std::vector<std::string>& devices) {
  if (devices.empty()) return errors::InvalidArgument("broadcast: no devices given");
  std::vector<TensorHandle> out;
  for (const std::string& d : devices) {
    auto h = copy(tensor, d);
    if (!h.ok()) {
      for (TensorHandle o : out) (void)release(o);
      return h.status().with_context("broadcast to " + d);
    }
    out.push_back(*h);
  }
  return out;
}

}  // namespace tensord
