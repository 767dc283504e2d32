// Reference kernels of If, Loop and Scan: bodies run through the executor's subgraph runner,
// which supplies the values they read from enclosing scopes.
#include <cstring>

#include "backends/cpu/dispatch.h"
#include "backends/cpu/kernel.h"
#include "backend/backend.h"

namespace tensord::cpu {
namespace {

Status emit(KernelContext& ctx, int i, const HostTensor& t) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.allocate_output(i, t.dtype(), t.shape()));
  if (t.nbytes()) std::memcpy(out.data, t.data(), t.nbytes());
  return OkStatus();
}

const Graph* graph_attr(const KernelContext& ctx, const std::string& name) {
  const Attribute* a = ctx.attr(name);
  const auto* g = a ? a->get_if<std::shared_ptr<const Graph>>() : nullptr;
  return g ? g->get() : nullptr;
}

HostTensor scalar_bool(bool v) { return HostTensor::scalar<bool>(v); }

// Stacks equally shaped slices along a new `axis` (reversed order when `reverse`).
Result<HostTensor> stack(const KernelContext& ctx, const std::vector<HostTensor>& slices,
                         int64_t axis, bool reverse, DType empty_dtype) {
  if (slices.empty()) return HostTensor(empty_dtype, {0});
  const Shape& s = slices[0].shape();
  for (const auto& t : slices)
    if (t.shape() != s || t.dtype() != slices[0].dtype())
      return ctx.error("scan output slices differ: {} vs {}", t.type().to_string(),
                       slices[0].type().to_string());
  const int64_t rank = static_cast<int64_t>(s.size()) + 1;
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return ctx.error("scan output axis out of range for rank {}", rank);
  Shape out_shape = s;
  out_shape.insert(out_shape.begin() + axis, static_cast<int64_t>(slices.size()));
  HostTensor out(slices[0].dtype(), out_shape);
  const size_t esize = dtype_size(out.dtype());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= s[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis); d < s.size(); ++d) inner *= s[d];
  const size_t chunk = static_cast<size_t>(inner) * esize;
  const int64_t t_count = static_cast<int64_t>(slices.size());
  auto* dst = static_cast<unsigned char*>(out.mutable_data());
  for (int64_t t = 0; t < t_count; ++t) {
    const auto* src = static_cast<const unsigned char*>(slices[static_cast<size_t>(reverse ? t_count - 1 - t : t)].data());
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + (o * t_count + t) * chunk, src + o * chunk, chunk);
  }
  return out;
}

// Slice `t` of `in` along `axis` (that axis removed).
HostTensor take(const TensorView& in, int64_t axis, int64_t t) {
  Shape s = in.shape;
  const int64_t n = s[static_cast<size_t>(axis)];
  s.erase(s.begin() + axis);
  HostTensor out(in.dtype, s);
  const size_t esize = dtype_size(in.dtype);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= in.shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < in.shape.size(); ++d) inner *= in.shape[d];
  const size_t chunk = static_cast<size_t>(inner) * esize;
  const auto* src = static_cast<const unsigned char*>(in.data);
  auto* dst = static_cast<unsigned char*>(out.mutable_data());
  for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * chunk, src + (o * n + t) * chunk, chunk);
  return out;
}

Status if_kernel(KernelContext& ctx) {
  const bool cond = *static_cast<const bool*>(ctx.input(0).data);
  const Graph* branch = graph_attr(ctx, cond ? "then_branch" : "else_branch");
  if (!branch) return ctx.error("missing branch");
  TD_ASSIGN_OR_RETURN(auto outs, ctx.run_subgraph(*branch, {}));
  if (static_cast<int>(outs.size()) != ctx.num_outputs())
    return ctx.error("branch gave {} outputs, node has {}", outs.size(), ctx.num_outputs());
  for (int i = 0; i < ctx.num_outputs(); ++i) TD_RETURN_IF_ERROR(emit(ctx, i, outs[static_cast<size_t>(i)]));
  return OkStatus();
}

Status loop_kernel(KernelContext& ctx) {
  const Graph* body = graph_attr(ctx, "body");
  if (!body) return ctx.error("missing body");
  const int64_t max_trips = ctx.has_input(0) ? *static_cast<const int64_t*>(ctx.input(0).data)
                                             : INT64_MAX;
  bool cond = ctx.has_input(1) ? *static_cast<const bool*>(ctx.input(1).data) : true;
  const int n_carried = ctx.num_inputs() - 2;
  std::vector<HostTensor> carried;
  for (int i = 0; i < n_carried; ++i) {
    const TensorView& v = ctx.input(2 + i);
    TD_ASSIGN_OR_RETURN(HostTensor h, HostTensor::from_bytes(v.dtype, v.shape, v.data,
                                                             static_cast<size_t>(v.nbytes())));
    carried.push_back(std::move(h));
  }
  const int n_scan = static_cast<int>(body->outputs.size()) - 1 - n_carried;
  std::vector<std::vector<HostTensor>> scans(static_cast<size_t>(std::max(n_scan, 0)));
  constexpr int64_t kMaxIterationsWithoutM = int64_t{1} << 31;  // a runaway guard
  for (int64_t i = 0; i < max_trips && cond; ++i) {
    TD_RETURN_IF_ERROR(run_checkpoint());  // a body of no steps still stops when cancelled
    if (!ctx.has_input(0) && i >= kMaxIterationsWithoutM)
      return ctx.error("loop without a trip count ran {} iterations; giving up", i);
    HostTensor iter = HostTensor::scalar<int64_t>(i);
    HostTensor c = scalar_bool(cond);
    std::vector<TensorView> in{iter.view(), c.view()};
    for (const auto& t : carried) in.push_back(t.view());
    TD_ASSIGN_OR_RETURN(auto outs, ctx.run_subgraph(*body, in));
    if (outs.size() != body->outputs.size())
      return ctx.error("body gave {} outputs, expected {}", outs.size(), body->outputs.size());
    if (outs[0].dtype() != DType::kBool || outs[0].numel() != 1)
      return ctx.error("body's cond output must be a bool scalar, got {}", outs[0].type().to_string());
    cond = *outs[0].data<bool>();
    for (int k = 0; k < n_carried; ++k) carried[static_cast<size_t>(k)] = outs[static_cast<size_t>(1 + k)];
    for (int k = 0; k < n_scan; ++k)
      scans[static_cast<size_t>(k)].push_back(outs[static_cast<size_t>(1 + n_carried + k)]);
  }
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    if (i < n_carried) {
      TD_RETURN_IF_ERROR(emit(ctx, i, carried[static_cast<size_t>(i)]));
    } else {
      TD_ASSIGN_OR_RETURN(HostTensor s, stack(ctx, scans[static_cast<size_t>(i - n_carried)], 0,
                                              false, ctx.output_type(i).dtype));
      TD_RETURN_IF_ERROR(emit(ctx, i, s));
    }
  }
  return OkStatus();
}

Status scan_kernel(KernelContext& ctx) {
  const Graph* body = graph_attr(ctx, "body");
  if (!body) return ctx.error("missing body");
  TD_ASSIGN_OR_RETURN(int64_t m, ctx.attr_int("num_scan_inputs", 1));
  const int n_state = ctx.num_inputs() - static_cast<int>(m);
  TD_ASSIGN_OR_RETURN(auto in_axes, ctx.attr_ints("scan_input_axes", std::vector<int64_t>(m, 0)));
  TD_ASSIGN_OR_RETURN(auto in_dirs, ctx.attr_ints("scan_input_directions", std::vector<int64_t>(m, 0)));
  const int k_out = static_cast<int>(body->outputs.size()) - n_state;
  TD_ASSIGN_OR_RETURN(auto out_axes, ctx.attr_ints("scan_output_axes", std::vector<int64_t>(k_out, 0)));
  TD_ASSIGN_OR_RETURN(auto out_dirs, ctx.attr_ints("scan_output_directions", std::vector<int64_t>(k_out, 0)));
  if (static_cast<int64_t>(in_axes.size()) != m || static_cast<int64_t>(in_dirs.size()) != m ||
      static_cast<int>(out_axes.size()) != k_out || static_cast<int>(out_dirs.size()) != k_out)
    return ctx.error("scan axes/directions attributes have the wrong length");
  int64_t steps = -1;
  for (int64_t j = 0; j < m; ++j) {
    const TensorView& v = ctx.input(n_state + static_cast<int>(j));
    const int64_t rank = static_cast<int64_t>(v.shape.size());
    int64_t& ax = in_axes[static_cast<size_t>(j)];
    if (ax < 0) ax += rank;
    if (ax < 0 || ax >= rank) return ctx.error("scan_input_axes[{}] out of range for rank {}", j, rank);
    const int64_t len = v.shape[static_cast<size_t>(ax)];
    if (steps >= 0 && len != steps)
      return ctx.error("scan inputs have different lengths: {} and {}", steps, len);
    steps = len;
  }
  std::vector<HostTensor> state;
  for (int i = 0; i < n_state; ++i) {
    const TensorView& v = ctx.input(i);
    TD_ASSIGN_OR_RETURN(HostTensor h, HostTensor::from_bytes(v.dtype, v.shape, v.data,
                                                             static_cast<size_t>(v.nbytes())));
    state.push_back(std::move(h));
  }
  std::vector<std::vector<HostTensor>> scans(static_cast<size_t>(k_out));
  for (int64_t t = 0; t < steps; ++t) {
    TD_RETURN_IF_ERROR(run_checkpoint());
    std::vector<HostTensor> slices;
    for (int64_t j = 0; j < m; ++j) {
      const int64_t idx = in_dirs[static_cast<size_t>(j)] ? steps - 1 - t : t;
      slices.push_back(take(ctx.input(n_state + static_cast<int>(j)), in_axes[static_cast<size_t>(j)], idx));
    }
    std::vector<TensorView> in;
    for (const auto& s : state) in.push_back(s.view());
    for (const auto& s : slices) in.push_back(s.view());
    TD_ASSIGN_OR_RETURN(auto outs, ctx.run_subgraph(*body, in));
    if (outs.size() != body->outputs.size())
      return ctx.error("body gave {} outputs, expected {}", outs.size(), body->outputs.size());
    for (int i = 0; i < n_state; ++i) state[static_cast<size_t>(i)] = outs[static_cast<size_t>(i)];
    for (int k = 0; k < k_out; ++k) scans[static_cast<size_t>(k)].push_back(outs[static_cast<size_t>(n_state + k)]);
  }
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    if (i < n_state) {
      TD_RETURN_IF_ERROR(emit(ctx, i, state[static_cast<size_t>(i)]));
    } else {
      const size_t k = static_cast<size_t>(i - n_state);
      TD_ASSIGN_OR_RETURN(HostTensor s, stack(ctx, scans[k], out_axes[k], out_dirs[k] != 0,
                                              ctx.output_type(i).dtype));
      TD_RETURN_IF_ERROR(emit(ctx, i, s));
    }
  }
  return OkStatus();
}

}  // namespace

void register_reference_control_kernels(KernelRegistry& r) {
  r.add(KernelDef{"If", "reference", nullptr, if_kernel, /*native_low_precision=*/true});
  r.add(KernelDef{"Loop", "reference", nullptr, loop_kernel, /*native_low_precision=*/true});
  r.add(KernelDef{"Scan", "reference", nullptr, scan_kernel, /*native_low_precision=*/true});
}

}  // namespace tensord::cpu
