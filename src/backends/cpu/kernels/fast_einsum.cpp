// Fast float32 Einsum of one or two operands as batched matrix products, as ONNX Runtime and
// PyTorch lower it: every label of a two-operand equation is a batch label (both inputs and
// the output), a row label (the first input and the output), a column label (the second and
// the output) or a contracted one (both inputs, not the output). Each operand is permuted to
// [batch, rows, contracted] / [batch, contracted, columns] (no copy when it already is),
// multiplied with dnnl_sgemm per batch, and the [batch, rows, columns] product permuted to the
// output's order. One operand: a permutation with the summed labels added up last.
//
// Left to the reference kernel: repeated labels within an operand (diagonals), size-1 axes
// broadcast against a larger one, a label summed in only one of two operands, more than two
// operands, and other dtypes.
#include <dnnl.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <vector>

#include "backends/cpu/kernel.h"
#include "backends/cpu/thread_pool.h"
#include "core/node_attrs.h"
#include "core/ops/op_helpers.h"

namespace tensord::cpu {
namespace {

Status refuse(const std::string& why) { return Status(StatusCode::kUnimplemented, why); }

struct Plan {
  // Labels of each class, in the order they appear in the output (contracted: in the first
  // operand's order).
  std::vector<int> batch, rows, cols, contracted;
  std::vector<int64_t> sizes;
};

// Checks the equation is a plain product of two operands (or one permuted / summed operand).
Status plan_of(const std::string& equation, const std::vector<Shape>& shapes, Plan* plan,
               std::vector<std::vector<int>>* in_labels, std::vector<int>* out_labels) {
  TD_RETURN_IF_ERROR(math::parse_einsum(equation, shapes, in_labels, out_labels, &plan->sizes));
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto& l = (*in_labels)[i];
    std::vector<int> sorted = l;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      return refuse("Einsum: a label repeated within an operand (a diagonal)");
    for (size_t d = 0; d < l.size(); ++d)
      if (shapes[i][d] != plan->sizes[static_cast<size_t>(l[d])])
        return refuse("Einsum: a size-1 axis broadcast");
  }
  if (shapes.size() != 2) return OkStatus();
  auto has = [](const std::vector<int>& v, int l) {
    return std::find(v.begin(), v.end(), l) != v.end();
  };
  const auto &a = (*in_labels)[0], &b = (*in_labels)[1];
  for (int l : *out_labels) {
    if (has(a, l) && has(b, l)) plan->batch.push_back(l);
    else if (has(a, l)) plan->rows.push_back(l);
    else plan->cols.push_back(l);
  }
  for (int l : a)
    if (!has(*out_labels, l)) {
      if (!has(b, l)) return refuse("Einsum: a label summed in the first operand alone");
      plan->contracted.push_back(l);
    }
  for (int l : b)
    if (!has(*out_labels, l) && !has(a, l))
      return refuse("Einsum: a label summed in the second operand alone");
  return OkStatus();
}

Status einsum_accepts(const Node& node, const std::vector<TensorType>& in) {
  if (in.empty() || in.size() > 2) return refuse("Einsum: the fast kernel takes 1 or 2 operands");
  std::vector<Shape> shapes;
  for (const auto& t : in) {
    if (t.dtype != DType::kFloat32 || !shape_is_static(t.shape))
      return refuse("Einsum: the fast kernel is float32 with static shapes");
    shapes.push_back(t.shape);
  }
  NodeAttrs attrs(node);
  TD_ASSIGN_OR_RETURN(std::string equation, attrs.attr_string("equation", ""));
  Plan plan;
  std::vector<std::vector<int>> in_labels;
  std::vector<int> out_labels;
  return plan_of(equation, shapes, &plan, &in_labels, &out_labels);
}

// dst = src (labels `from`, sizes by label) with its axes in the order `to`; `to` may hold
// fewer labels (the rest are summed, innermost). Returns src itself when nothing moves.
const float* permute(const float* src, const std::vector<int>& from, const std::vector<int>& to,
                     const std::vector<int64_t>& sizes, std::vector<float>* scratch,
                     float* into = nullptr) {
  if (from == to && !into) return src;
  std::vector<int64_t> stride_of(sizes.size(), 0);
  int64_t s = 1;
  for (size_t d = from.size(); d-- > 0;) {
    stride_of[static_cast<size_t>(from[d])] = s;
    s *= sizes[static_cast<size_t>(from[d])];
  }
  // Loop over `to`, then the summed labels.
  std::vector<int> loop = to;
  for (int l : from)
    if (std::find(to.begin(), to.end(), l) == to.end()) loop.push_back(l);
  std::vector<int64_t> dims, strides;
  for (int l : loop) {
    dims.push_back(sizes[static_cast<size_t>(l)]);
    strides.push_back(stride_of[static_cast<size_t>(l)]);
  }
  int64_t n_out = 1;
  for (size_t i = 0; i < to.size(); ++i) n_out *= dims[i];
  int64_t n_sum = 1;
  for (size_t i = to.size(); i < dims.size(); ++i) n_sum *= dims[i];
  float* dst = into;
  if (!dst) {
    scratch->assign(static_cast<size_t>(n_out), 0.0f);
    dst = scratch->data();
  } else if (n_sum > 1) {
    std::fill(dst, dst + n_out, 0.0f);
  }
  const size_t r = dims.size();
  if (r == 0) {
    dst[0] = src[0];
    return dst;
  }
  // Rows of the innermost loop label; outer coordinates walked by an odometer, per thread
  // range of output rows when there is no summation.
  const int64_t inner = dims[r - 1], inner_stride = strides[r - 1];
  const int64_t outer = n_out * n_sum / inner;
  auto run = [&](int64_t lo, int64_t hi) {
    std::vector<int64_t> idx(r - 1, 0);
    int64_t rem = lo, off = 0;
    for (size_t d = r - 1; d-- > 0;) {
      idx[d] = rem % dims[d];
      rem /= dims[d];
      off += idx[d] * strides[d];
    }
    for (int64_t o = lo; o < hi; ++o) {
      const float* p = src + off;
      if (n_sum == 1) {
        float* q = dst + o * inner;
        if (inner_stride == 1) std::copy(p, p + inner, q);
        else for (int64_t i = 0; i < inner; ++i) q[i] = p[i * inner_stride];
      } else {  // summed labels innermost: accumulate into the output element
        const int64_t out_index = (o * inner) / n_sum;
        float acc = 0;
        for (int64_t i = 0; i < inner; ++i) acc += p[i * inner_stride];
        dst[out_index] += acc;
      }
      for (size_t d = r - 1; d-- > 0;) {
        off += strides[d];
        if (++idx[d] < dims[d]) break;
        off -= dims[d] * strides[d];
        idx[d] = 0;
      }
    }
  };
  if (n_sum == 1 && outer > 1 && n_out >= (1 << 15) && threads_available() > 1)
    ThreadPool::get().parallel_for(outer, 1, run);
  else
    run(0, outer);
  return dst;
}

Status einsum_run(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(std::string equation, ctx.attr_string("equation", ""));
  std::vector<Shape> shapes;
  for (int i = 0; i < ctx.num_inputs(); ++i) shapes.push_back(ctx.input(i).shape);
  Plan plan;
  std::vector<std::vector<int>> in_labels;
  std::vector<int> out_labels;
  TD_RETURN_IF_ERROR(plan_of(equation, shapes, &plan, &in_labels, &out_labels));
  TD_ASSIGN_OR_RETURN(MutableTensorView y, ctx.output(0));
  float* out = y.as<float>();
  if (shapes.size() == 1) {
    std::vector<float> scratch;
    (void)permute(ctx.input(0).as<float>(), in_labels[0], out_labels, plan.sizes, &scratch, out);
    return OkStatus();
  }
  auto numel = [&](const std::vector<int>& labels) {
    int64_t n = 1;
    for (int l : labels) n *= plan.sizes[static_cast<size_t>(l)];
    return n;
  };
  const int64_t nb = numel(plan.batch), m = numel(plan.rows), n = numel(plan.cols),
                k = numel(plan.contracted);
  auto cat = [](std::vector<int> a, const std::vector<int>& b, const std::vector<int>& c) {
    a.insert(a.end(), b.begin(), b.end());
    a.insert(a.end(), c.begin(), c.end());
    return a;
  };
  std::vector<float> sa, sb, sc;
  const float* a = permute(ctx.input(0).as<float>(), in_labels[0],
                           cat(plan.batch, plan.rows, plan.contracted), plan.sizes, &sa);
  const float* b = permute(ctx.input(1).as<float>(), in_labels[1],
                           cat(plan.batch, plan.contracted, plan.cols), plan.sizes, &sb);
  const std::vector<int> product_labels = cat(plan.batch, plan.rows, plan.cols);
  const bool direct = product_labels == out_labels;
  if (!direct) sc.resize(static_cast<size_t>(nb * m * n));
  float* c = direct ? out : sc.data();
  if (k == 0) {
    std::fill(c, c + nb * m * n, 0.0f);
  } else if (nb > 0 && m > 0 && n > 0) {
    // Many small products (attention heads): one per thread; else each product on the team.
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    std::atomic<bool> failed{false};  // set from any thread of the pool
    auto one = [&](int64_t i) {
      if (dnnl_sgemm('N', 'N', m, n, k, 1.0f, a + i * m * k, k, b + i * k * n, n, 0.0f,
                     c + i * m * n, n) != dnnl_success)
        failed = true;
    };
    if (nb > 1 && flops < (1 << 22) && threads_available() > 1) {
      ThreadPool::get().parallel_for(nb, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) one(i);
      });
    } else {
      for (int64_t i = 0; i < nb; ++i) one(i);
    }
    if (failed) return ctx.error("dnnl_sgemm failed");
  }
  if (!direct) (void)permute(sc.data(), product_labels, out_labels, plan.sizes, &sa, out);
  return OkStatus();
}

}  // namespace

void register_fast_einsum_kernels(KernelRegistry& r) {
  r.add(KernelDef{"Einsum", "fast", einsum_accepts, einsum_run});
}

}  // namespace tensord::cpu
