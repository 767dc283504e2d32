#include "backends/cpu/onednn_region.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>


#include "backends/cpu/blocked_pool.h"
#include "backends/cpu/direct_conv8.h"
#include "backends/cpu/grouped_conv.h"
#include "backends/cpu/onednn_common.h"
#include "backends/cpu/onednn_ops.h"
#include "backends/cpu/thread_pool.h"
#include "core/env.h"
#include "core/errors.h"
#include "core/graph_utils.h"
#include "core/node_attrs.h"
#include "core/op_registry.h"
#include "core/ops/op_helpers.h"

namespace tensord::cpu {
namespace {

using namespace dnnl_names;

constexpr size_t kAlign = 64;
// Dot products at least this long are summed in chunks of kDotChunk (compile_dense_split).
constexpr int64_t kSplitDotMin = 1024;
constexpr int64_t kDotChunk = 128;
// ... when the product has at least this many rows. With fewer it is a matrix-vector product
// bound by reading the weights, and oneDNN's batched matmul over the chunks streams them at a
// third of the bandwidth its inner product reaches (AlexNet's classifier at batch 1: 9 ms a
// run instead of 3.4), while a row or two of logits sums few enough terms near zero for the
// single chain to stay within plaidbench's tolerance.
constexpr int64_t kSplitDotMinRows = 4;

// y = clip(round_half_even(x / s), lo, hi) * s over n floats: a quantize-dequantize pair
// (engine/canonicalize.h's qdq) in one pass; NaN stays NaN, zero padding stays zero.
void fake_quant_scalar(const float* x, float* y, int64_t n, float s, float lo, float hi) {
  for (int64_t i = 0; i < n; ++i) {
    float r = std::nearbyint(x[i] / s);
    r = r < lo ? lo : r;
    r = r > hi ? hi : r;
    y[i] = r * s;
  }
}

__attribute__((target("avx2"))) void fake_quant_avx2(const float* x, float* y, int64_t n,
                                                     float s, float lo, float hi) {
  const __m256 vs = _mm256_set1_ps(s), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 r = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), vs),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_min_ps(vhi, _mm256_max_ps(vlo, r));  // the second operand when NaN
    _mm256_storeu_ps(y + i, _mm256_mul_ps(r, vs));
  }
  fake_quant_scalar(x + i, y + i, n - i, s, lo, hi);
}

void fake_quant(const float* x, float* y, int64_t n, float s, float lo, float hi) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return fake_quant_avx2(x, y, n, s, lo, hi);
  fake_quant_scalar(x, y, n, s, lo, hi);
}

bool is_f32_4d_static(const TensorType* t) {
  return t && t->dtype == DType::kFloat32 && t->shape.size() == 4 && shape_is_static(t->shape);
}

// Activations a region holds: 4-D [N, C, H, W], or 3-D [N, C, L] (1-D convolution and
// pooling), held as the 4-D [N, C, 1, L] so oneDNN's 2-D kernels and layouts run them, or 5-D
// [N, C, D, H, W] (3-D convolution and pooling: video networks), held as they are in the 4-D
// layouts' 5-D forms (nCdhw8c beside nChw8c; tag_nd). Only the ops eligible() lets in at rank
// 5 see them (convolution, pooling, element-wise, same-shape binary, channel concat).
bool is_f32_act_static(const TensorType* t) {
  return t && t->dtype == DType::kFloat32 &&
         (t->shape.size() == 4 || t->shape.size() == 3 || t->shape.size() == 5) &&
         shape_is_static(t->shape);
}

// The form of activation layout `t` (a 4-D tag) for a value of `nd` dimensions: the same
// tag below 5, its 5-D form (a depth axis before H) at 5.
dnnl::memory::format_tag tag_nd(dnnl::memory::format_tag t, size_t nd) {
  using T = dnnl::memory::format_tag;
  if (nd != 5) return t;
  switch (t) {
    case T::abcd: return T::abcde;
    case T::acdb: return T::acdeb;
    case T::aBcd4b: return T::aBcde4b;
    case T::aBcd8b: return T::aBcde8b;
    case T::aBcd16b: return T::aBcde16b;
    default: return t;
  }
}

Shape act4(const Shape& s) {
  if (s.size() == 3) return {s[0], s[1], 1, s[2]};
  return s;
}


Shape padded4(const Shape& s) {
  Shape out(4 - std::min<size_t>(4, s.size()), 1);
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

// An operand of shape `s` broadcast against a result of rank `out_rank` (3 or 4), as 4-D:
// numpy's alignment to the result's rank, then the result's 4-D view (act4).
Shape view4(const Shape& s, size_t out_rank) {
  if (out_rank != 3 || s.size() > 3) return padded4(s);
  Shape p(3 - s.size(), 1);
  p.insert(p.end(), s.begin(), s.end());
  return act4(p);
}

// Whether `b` broadcasts to the 4-D `a` (numpy rules, b's rank <= 4).
bool broadcasts_to(const Shape& b, const Shape& a) {
  if (b.size() > 4) return false;
  const Shape p = padded4(b);
  for (size_t i = 0; i < 4; ++i)
    if (p[i] != a[i] && p[i] != 1) return false;
  return true;
}

// A Gemm or MatMul that is an inner product: A [M, K] (float32, static), constant weights,
// alpha = beta = 1, no transA, an optional constant bias of N values.
struct DenseParams {
  std::vector<float> weights;  // [N, K], row-major (oneDNN's inner-product "oi")
  std::vector<float> bias;     // [N] or empty
  int64_t n = 0, k = 0;
};

Result<DenseParams> dense_params(const Node& node, const FusionGraph& g) {
  if (node.inputs.size() < 2) return errors::Unimplemented("needs two inputs");
  const TensorType* a = g.type_of(node.inputs[0]);
  const TensorType* out = node.outputs.empty() ? nullptr : g.type_of(node.outputs[0]);
  const HostTensor* b = g.constant(node.inputs[1]);
  if (!a || a->dtype != DType::kFloat32 || a->shape.size() != 2 || !shape_is_static(a->shape) ||
      !out || out->shape.size() != 2)
    return errors::Unimplemented("A must be a static 2-D float32 tensor");
  if (!b || b->dtype() != DType::kFloat32 || b->shape().size() != 2)
    return errors::Unimplemented("B must be a constant 2-D float32 tensor");
  NodeAttrs at(node);
  bool trans_b = false;
  if (node.op == "Gemm") {
    TD_ASSIGN_OR_RETURN(float alpha, at.attr_float("alpha", 1.0f));
    TD_ASSIGN_OR_RETURN(float beta, at.attr_float("beta", 1.0f));
    TD_ASSIGN_OR_RETURN(int64_t ta, at.attr_int("transA", 0));
    TD_ASSIGN_OR_RETURN(int64_t tb, at.attr_int("transB", 0));
    if (alpha != 1.0f || ta) return errors::Unimplemented("alpha != 1 or transA");
    if (node.inputs.size() > 2 && !node.inputs[2].empty() && beta != 1.0f)
      return errors::Unimplemented("beta != 1");
    trans_b = tb != 0;
  } else if (node.inputs.size() != 2) {
    return errors::Unimplemented("MatMul takes two inputs");
  }
  DenseParams p;
  const Shape& bs = b->shape();
  p.k = trans_b ? bs[1] : bs[0];
  p.n = trans_b ? bs[0] : bs[1];
  if (p.k != a->shape[1]) return errors::Unimplemented("K mismatch");
  p.weights.resize(static_cast<size_t>(p.n * p.k));
  const float* w = b->data<float>();
  for (int64_t i = 0; i < p.n; ++i)
    for (int64_t j = 0; j < p.k; ++j)
      p.weights[static_cast<size_t>(i * p.k + j)] = trans_b ? w[i * p.k + j] : w[j * p.n + i];
  if (node.op == "Gemm" && node.inputs.size() > 2 && !node.inputs[2].empty()) {
    const HostTensor* c = g.constant(node.inputs[2]);
    if (!c || c->dtype() != DType::kFloat32 || c->numel() != p.n ||
        (c->shape().size() == 2 && c->shape()[0] != 1) || c->shape().size() > 2)
      return errors::Unimplemented("C must be a constant [N] or [1, N]");
    p.bias.assign(c->data<float>(), c->data<float>() + p.n);
  }
  return p;
}

// A Pad that pads nothing (PyTorch exports AvgPool2d as Pad with zero pads + AveragePool).
bool is_identity_pad(const Node& node, const FusionGraph& g) {
  NodeAttrs a(node);
  auto mode = a.attr_string("mode", "constant");
  if (!mode.ok() || *mode != "constant") return false;
  std::vector<int64_t> pads;
  if (node.inputs.size() > 1 && !node.inputs[1].empty()) {
    const HostTensor* p = g.constant(node.inputs[1]);
    if (!p || p->dtype() != DType::kInt64) return false;
    pads.assign(p->data<int64_t>(), p->data<int64_t>() + p->numel());
  } else {
    auto attr = a.attr_ints("pads");
    if (!attr.ok()) return false;
    pads = *attr;
  }
  return std::all_of(pads.begin(), pads.end(), [](int64_t v) { return v == 0; });
}

// ---- channel shuffle and channel slices (ShuffleNet) ----

const Node* producer_of(const FusionGraph& g, const std::string& v) {
  const int64_t p = g.producer_of(v);
  return p >= 0 ? g.nodes[static_cast<size_t>(p)] : nullptr;
}

// The only node reading `v` (nullptr when none, several, or `v` is a graph output).
const Node* sole_reader(const FusionGraph& g, const std::string& v) {
  const std::optional<size_t> j = g.sole_reader(v);
  return j ? g.nodes[*j] : nullptr;
}

// Reshape [N, C, H, W] -> [N, G, C/G, H, W], Transpose perm (0, 2, 1, 3, 4), Reshape back to
// [N, C, H, W]: a permutation of the channels (each value read only by the next). `head` is
// the first Reshape; returns G, or 0 when the three are not that.
int64_t channel_shuffle_groups(const Node& head, const FusionGraph& g) {
  if (head.op != "Reshape" || head.inputs.empty() || head.outputs.empty()) return 0;
  const TensorType* x = g.type_of(head.inputs[0]);
  const TensorType* v = g.type_of(head.outputs[0]);
  if (!is_f32_4d_static(x) || !v || v->shape.size() != 5 || !shape_is_static(v->shape)) return 0;
  const Shape& xs = x->shape;
  const Shape& vs = v->shape;
  if (vs[0] != xs[0] || vs[1] * vs[2] != xs[1] || vs[3] != xs[2] || vs[4] != xs[3]) return 0;
  const Node* t = sole_reader(g, head.outputs[0]);
  if (!t || t->op != "Transpose" || t->inputs[0] != head.outputs[0]) return 0;
  auto perm = NodeAttrs(*t).attr_ints("perm");
  if (!perm.ok() || *perm != std::vector<int64_t>{0, 2, 1, 3, 4}) return 0;
  const Node* tail = sole_reader(g, t->outputs[0]);
  if (!tail || tail->op != "Reshape" || tail->inputs[0] != t->outputs[0]) return 0;
  const TensorType* y = g.type_of(tail->outputs[0]);
  if (!y || y->shape != xs) return 0;
  return vs[1];
}

// The first Reshape of the channel shuffle `node` (any of its three nodes) belongs to.
const Node* channel_shuffle_head(const Node& node, const FusionGraph& g) {
  const Node* n = &node;
  for (int up = 0; up < 2 && n && n->op != "Reshape"; ++up) n = producer_of(g, n->inputs[0]);
  if (n && n->op == "Reshape" && channel_shuffle_groups(*n, g)) return n;
  if (node.op == "Reshape") {  // the tail: two up
    const Node* t = producer_of(g, node.inputs[0]);
    const Node* h = t && t->op == "Transpose" ? producer_of(g, t->inputs[0]) : nullptr;
    if (h && channel_shuffle_groups(*h, g)) return h;
  }
  return nullptr;
}

std::optional<std::vector<int64_t>> int_constant(const FusionGraph& g, const Node& node, size_t i) {
  if (i >= node.inputs.size() || node.inputs[i].empty()) return std::nullopt;
  const HostTensor* c = g.constant(node.inputs[i]);
  if (!c) return std::nullopt;
  std::vector<int64_t> out;
  if (c->dtype() == DType::kInt64) out.assign(c->data<int64_t>(), c->data<int64_t>() + c->numel());
  else if (c->dtype() == DType::kInt32) out.assign(c->data<int32_t>(), c->data<int32_t>() + c->numel());
  else return std::nullopt;
  return out;
}

// A Slice of a 4-D value along the channels only (constant starts/ends, step 1): the
// channels [begin, end).
std::optional<std::pair<int64_t, int64_t>> channel_slice(const Node& node, const FusionGraph& g) {
  if (node.op != "Slice" || node.inputs.size() < 3) return std::nullopt;
  const TensorType* x = g.type_of(node.inputs[0]);
  const TensorType* y = node.outputs.empty() ? nullptr : g.type_of(node.outputs[0]);
  if (!is_f32_4d_static(x) || !is_f32_4d_static(y)) return std::nullopt;
  auto starts = int_constant(g, node, 1), ends = int_constant(g, node, 2);
  if (!starts || !ends || starts->size() != ends->size()) return std::nullopt;
  std::vector<int64_t> axes(starts->size());
  for (size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<int64_t>(i);
  if (node.inputs.size() > 3 && !node.inputs[3].empty()) {
    auto a = int_constant(g, node, 3);
    if (!a || a->size() != starts->size()) return std::nullopt;
    axes = *a;
  }
  if (node.inputs.size() > 4 && !node.inputs[4].empty()) {
    auto st = int_constant(g, node, 4);
    if (!st) return std::nullopt;
    for (int64_t v : *st)
      if (v != 1) return std::nullopt;
  }
  // Only axis 1 may change; the output's shape says how many channels.
  const Shape& xs = x->shape;
  const Shape& ys = y->shape;
  if (ys[0] != xs[0] || ys[2] != xs[2] || ys[3] != xs[3]) return std::nullopt;
  std::optional<int64_t> begin;
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t ax = axes[i] < 0 ? axes[i] + 4 : axes[i];
    if (ax != 1) {
      if (ys[static_cast<size_t>(ax)] != xs[static_cast<size_t>(ax)]) return std::nullopt;
      continue;
    }
    int64_t b = (*starts)[i];
    if (b < 0) b += xs[1];
    begin = std::clamp<int64_t>(b, 0, xs[1]);
  }
  if (!begin) return std::nullopt;
  if (*begin + ys[1] > xs[1] || ys[1] <= 0) return std::nullopt;
  return std::make_pair(*begin, *begin + ys[1]);
}

// ReduceMean over every spatial axis of a 3-D or 4-D value (PyTorch's x.mean([2, 3])): a global
// average pooling; returns keepdims (0 or 1), or -1 when it is not that.
int spatial_mean(const Node& node, const FusionGraph& g) {
  if (node.op != "ReduceMean" || node.inputs.empty() || node.outputs.empty()) return -1;
  const TensorType* x = g.type_of(node.inputs[0]);
  if (!is_f32_act_static(x) || x->shape.size() == 5) return -1;
  const int64_t rank = static_cast<int64_t>(x->shape.size());
  NodeAttrs a(node);
  std::vector<int64_t> axes;
  if (node.inputs.size() > 1 && !node.inputs[1].empty()) {
    auto c = int_constant(g, node, 1);
    if (!c) return -1;
    axes = *c;
  } else {
    auto attr = a.attr_ints("axes");
    if (!attr.ok()) return -1;
    axes = *attr;
  }
  std::set<int64_t> want, got;
  for (int64_t d = 2; d < rank; ++d) want.insert(d);
  for (int64_t v : axes) got.insert(v < 0 ? v + rank : v);
  if (got != want) return -1;
  auto keep = a.attr_int("keepdims", 1);
  auto noop = a.attr_int("noop_with_empty_axes", 0);
  if (!keep.ok() || !noop.ok() || (*keep != 0 && *keep != 1)) return -1;
  return static_cast<int>(*keep);
}

// Node-level eligibility (the BatchNormalization rule needs the region and is checked there).
bool eligible(const Node& node, const FusionGraph& g) {
  if (!node.domain.empty() && node.domain != "ai.onnx") return false;
  const std::string& op = node.op;
  auto type = [&](size_t i) -> const TensorType* {
    return i < node.inputs.size() && !node.inputs[i].empty() ? g.type_of(node.inputs[i]) : nullptr;
  };
  if (node.outputs.empty() || node.outputs[0].empty()) return false;
  const TensorType* out = g.type_of(node.outputs[0]);
  for (size_t i = 1; i < node.outputs.size(); ++i)
    if (!node.outputs[i].empty()) return false;  // extra outputs (pool Indices, BN training)
  NodeAttrs a(node);
  // The classifier head: Flatten of a 4-D value, then Gemm/MatMul by constant weights.
  if (op == "Flatten") {
    auto axis = a.attr_int("axis", 1);
    return axis.ok() && *axis == 1 && is_f32_4d_static(type(0));
  }
  if (op == "Gemm" || op == "MatMul") return dense_params(node, g).ok();
  if (op == "Reshape" || op == "Transpose") return channel_shuffle_head(node, g) != nullptr;
  if (op == "Slice") return channel_slice(node, g).has_value();
  if (op == "ReduceMean") return spatial_mean(node, g) >= 0;
  // An activation of a contraction's 2-D result (the classifier head's Linear -> HardSwish ->
  // Linear): a post-op of the inner product, or an eltwise on its 2-D result.
  if (is_unary_eltwise(op) && out && out->dtype == DType::kFloat32 && out->shape.size() == 2 &&
      shape_is_static(out->shape)) {
    const Node* p = producer_of(g, node.inputs[0]);
    return p && (p->op == "Gemm" || p->op == "MatMul") && dense_params(*p, g).ok() &&
           eltwise_steps(node, g).ok();
  }
  if (!is_f32_act_static(out)) return false;
  const size_t rank = out->shape.size();
  // 5-D values (video networks): convolutions, window poolings, element-wise ops, binary ops
  // of two same-shaped values (a residual Add) and channel concats; the rest stays outside.
  if (rank == 5) {
    static const bool off = std::getenv("TENSORD_NO_5D_REGIONS") != nullptr;
    if (off) return false;
    if (op != "Conv" && op != "MaxPool" && op != "AveragePool" && op != "Concat" &&
        !is_unary_eltwise(op) && !is_binary(op))
      return false;
    if (is_binary(op))
      return node.inputs.size() == 2 && type(0) && type(1) &&
             type(0)->dtype == DType::kFloat32 && type(1)->dtype == DType::kFloat32 &&
             type(0)->shape == out->shape && type(1)->shape == out->shape;
  }
  if (op == "Conv") {
    if (node.inputs.size() < 2 || !is_f32_act_static(type(0)) || type(0)->shape.size() != rank)
      return false;
    const HostTensor* w = g.constant(node.inputs[1]);
    if (!w || w->dtype() != DType::kFloat32 || w->shape().size() != rank) return false;
    // Grouped convolutions only where each group maps its channels one to one or the input
    // is one group: oneDNN 2.6's blocked depthwise kernels crash (SIGSEGV) on a channel
    // multiplier (group == in channels, out channels = k * group, k > 1; ONNX's
    // test_Conv2d_depthwise_with_multiplier). Those run on the per-node kernels.
    auto group = a.attr_int("group", 1);
    const int64_t ic = type(0)->shape[1], oc = w->shape()[0];
    if (!group.ok() || *group < 1 || oc % *group != 0 || w->shape()[1] * *group != ic)
      return false;
    if (*group > 1 && oc / *group != ic / *group) return false;
    if (node.inputs.size() > 2 && !node.inputs[2].empty()) {
      const HostTensor* b = g.constant(node.inputs[2]);
      if (!b || b->dtype() != DType::kFloat32) return false;
    }
    return true;
  }
  // A 2-D transposed convolution (U-Net decoders) with constant weights, one group: a oneDNN
  // deconvolution in the region's layout, so no reorder to NCHW and back around it.
  if (op == "ConvTranspose") {
    if (rank != 4 || node.inputs.size() < 2 || !is_f32_act_static(type(0)) ||
        type(0)->shape.size() != 4)
      return false;
    const HostTensor* w = g.constant(node.inputs[1]);
    auto group = a.attr_int("group", 1);
    if (!w || w->dtype() != DType::kFloat32 || w->shape().size() != 4 || !group.ok() ||
        *group != 1 || w->shape()[0] != type(0)->shape[1] || w->shape()[1] != out->shape[1])
      return false;
    if (node.inputs.size() > 2 && !node.inputs[2].empty()) {
      const HostTensor* b = g.constant(node.inputs[2]);
      if (!b || b->dtype() != DType::kFloat32 || b->numel() != w->shape()[1]) return false;
    }
    return true;
  }
  if (op == "MaxPool" || op == "AveragePool") {
    if (!is_f32_act_static(type(0)) || type(0)->shape.size() != rank) return false;
    auto k = a.attr_ints("kernel_shape");
    if (!k.ok() || k->size() != rank - 2) return false;
    auto order = a.attr_int("storage_order", 0);
    if (!order.ok() || *order != 0) return false;
    auto ceil = a.attr_int("ceil_mode", 0);
    auto incl = a.attr_int("count_include_pad", 0);
    if (!ceil.ok() || !incl.ok() || (*ceil && *incl)) return false;
    return true;
  }
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool")
    return is_f32_act_static(type(0)) && type(0)->shape.size() == rank;
  if (is_unary_eltwise(op))
    return is_f32_act_static(type(0)) && type(0)->shape.size() == rank && eltwise_steps(node, g).ok();
  if (is_binary(op)) {
    if (node.inputs.size() != 2) return false;
    const TensorType* x = type(0);
    const TensorType* y = type(1);
    if (!x || !y || x->dtype != DType::kFloat32 || y->dtype != DType::kFloat32) return false;
    if (!shape_is_static(x->shape) || !shape_is_static(y->shape)) return false;
    if (rank == 3) {
      // The broadcast operand of a 3-D result: a constant, or a 3-D value (both viewed as 4-D).
      auto ok3 = [&](size_t i, const TensorType* t) {
        return t->shape.size() == 3 || (t->shape.size() < 3 && g.constant(node.inputs[i]));
      };
      if (!ok3(0, x) || !ok3(1, y)) return false;
    }
    const Shape o4 = act4(out->shape);
    if (x->shape == out->shape) return broadcasts_to(view4(y->shape, rank), o4);
    return is_commutative(op) && y->shape == out->shape && broadcasts_to(view4(x->shape, rank), o4);
  }
  if (op == "Concat") {
    auto axis = a.attr_int("axis", 0);
    if (!axis.ok() || (*axis != 1 && *axis != 1 - static_cast<int64_t>(rank))) return false;
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (!is_f32_act_static(type(i)) || type(i)->shape.size() != rank) return false;
    return !node.inputs.empty();
  }
  if (op == "Pad") return is_identity_pad(node, g) && is_f32_act_static(type(0));
  if (op == "BatchNormalization") {
    if (!is_f32_act_static(type(0)) || node.inputs.size() != 5) return false;
    for (size_t i = 1; i < 5; ++i) {
      const HostTensor* c = g.constant(node.inputs[i]);
      if (!c || c->dtype() != DType::kFloat32 || c->shape().size() != 1) return false;
    }
    return true;
  }
  return false;
}

// ---- the compiled region ----

// Every region primitive's attributes start here: the caller passes the scratchpad
// (scratchpad_mode::user; DnnlRegion::RunContext), so one primitive may run on two threads at
// once. oneDNN's own per-primitive scratchpad would be shared by the two runs.
dnnl::primitive_attr region_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// The most sources a custom op reads (a concat's inputs; more go to oneDNN's concat).
constexpr size_t kMaxCustomSources = 64;

// TENSORD_VERBOSE_OPS=1: a region prints each of its custom ops' times (read once).
bool verbose_ops() {
  static const bool on = [] {
    const char* v = std::getenv("TENSORD_VERBOSE_OPS");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}

class DnnlRegion final : public FusedKernel {
 public:
  enum class SlotKind { kInput, kOutput, kArena, kOwned };
  struct Slot {
    memory::desc md;
    SlotKind kind = SlotKind::kArena;
    int index = -1;    // input/output index, or storage id (arena)
    memory mem;        // kOwned: the constant's memory (the other kinds are bound per run,
                       // in a RunContext)
  };
  struct Storage {
    size_t bytes = 0;
    int first = 0, last = 0;  // op indices
    size_t offset = 0;
  };
  struct Op {
    dnnl::primitive prim;
    std::unordered_map<int, int> arg_slots;  // DNNL_ARG_* -> slot
    std::string kind;
    bool serial = false;  // created for, and run on, one thread (too little work to split)
    dnnl::primitive one_thread;  // !serial: its one-thread variant (make_serial_variants), or none
    memory::desc scratch_md, one_thread_scratch_md;  // their scratchpads (size 0: none)
    // A kernel of tensord's own instead of a primitive (SmallGroupConv, a concat of
    // contiguous chunks): called with the addresses of its source slots (in order) and its
    // destination slot, on the engine's pool.
    std::function<void(const void* const*, void*)> custom;
    std::vector<int> custom_srcs;
    int custom_dst = -1;
    // Its problem in oneDNN's verbose form (a convolution's "mb1_ic64oc64_ih14oh14kh3..."),
    // for TENSORD_VERBOSE_OPS.
    std::string custom_desc;
  };
  // What one run binds: a memory object per slot (the region's own for constants, handles set
  // per run for the rest), each op's arguments and scratchpad. Primitives are created with
  // scratchpad_mode::user, so runs of one region on several threads at once (sessions sharing
  // an executable) share only read-only state; each run takes a context of its own.
  struct RunContext {
    std::vector<memory> mems;                           // by slot
    std::vector<std::unordered_map<int, memory>> args;  // by op: the team primitive's
    std::vector<std::unordered_map<int, memory>> args1; // by op: the one-thread variant's (empty:
                                                        // none when the context was made)
    std::unique_ptr<uint8_t[]> scratch_buffer;          // every op's scratchpad (one at a time)
  };

  std::unique_ptr<RunContext> make_context() const {
    auto c = std::make_unique<RunContext>();
    c->mems.reserve(slots_.size());
    for (const Slot& s : slots_)
      c->mems.push_back(s.kind == SlotKind::kOwned ? s.mem
                                                   : memory(s.md, cpu_engine(), DNNL_MEMORY_NONE));
    size_t scratch = 0;
    for (const Op& op : ops_) {
      scratch = std::max(scratch, op.scratch_md.get_size());
      if (op.one_thread) scratch = std::max(scratch, op.one_thread_scratch_md.get_size());
    }
    void* at = nullptr;
    if (scratch > 0) {
      c->scratch_buffer.reset(new uint8_t[scratch + 64]);
      at = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(c->scratch_buffer.get()) + 63) &
                                   ~uintptr_t{63});
    }
    auto bind = [&](const Op& op, const memory::desc& scratch_md) {
      std::unordered_map<int, memory> a;
      for (const auto& [arg, slot] : op.arg_slots) a.emplace(arg, c->mems[static_cast<size_t>(slot)]);
      if (scratch_md.get_size() > 0) a.emplace(DNNL_ARG_SCRATCHPAD, memory(scratch_md, cpu_engine(), at));
      return a;
    };
    c->args.reserve(ops_.size());
    for (const Op& op : ops_) c->args.push_back(bind(op, op.scratch_md));
    c->args1.reserve(ops_.size());
    for (const Op& op : ops_)
      c->args1.push_back(op.one_thread ? bind(op, op.one_thread_scratch_md)
                                       : std::unordered_map<int, memory>{});
    return c;
  }

  // The one-thread variant of each op created for the team, made by the region's first run
  // (run_host) and used at any op that finds other runners busy (threads_available() == 1:
  // other sessions' graphs run on the other cores).
  // The same operation and attributes, created under TeamLimit(1); kept only where oneDNN gives
  // a non-reference implementation with the same memory layouts for every argument (else the
  // team primitive runs, correct, on the threads it was created for).
  void make_serial_variants() {
    TeamLimit one(1);
    for (Op& op : ops_) {
      if (op.serial || op.custom) continue;
      const_dnnl_primitive_desc_t pd = nullptr;
      if (dnnl_primitive_get_primitive_desc(op.prim.get(), &pd) != dnnl_success) continue;
      const_dnnl_op_desc_t od = nullptr;
      if (dnnl_primitive_desc_query(pd, dnnl_query_op_d, 0, &od) != dnnl_success || !od) continue;
      const_dnnl_primitive_attr_t attr = nullptr;
      if (dnnl_primitive_desc_get_attr(pd, &attr) != dnnl_success) continue;
      dnnl_primitive_desc_iterator_t it = nullptr;
      if (dnnl_primitive_desc_iterator_create(&it, od, attr, cpu_engine().get(), nullptr) !=
          dnnl_success)
        continue;
      dnnl_primitive_desc_t pd1 = dnnl_primitive_desc_iterator_fetch(it);
      dnnl_primitive_desc_iterator_destroy(it);
      if (!pd1) continue;
      bool same = true;
      for (const auto& [arg, slot] : op.arg_slots) {
        (void)slot;
        const dnnl_memory_desc_t* a = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
        const dnnl_memory_desc_t* b = dnnl_primitive_desc_query_md(pd1, dnnl_query_exec_arg_md, arg);
        if (!a || !b || dnnl_memory_desc_equal(a, b) == 0) {
          same = false;
          break;
        }
      }
      const char* impl = nullptr;
      dnnl_primitive_desc_query(pd1, dnnl_query_impl_info_str, 0, &impl);
      if (same && impl && !is_reference(impl)) {
        dnnl_primitive_t p = nullptr;
        if (dnnl_primitive_create(&p, pd1) == dnnl_success) {
          op.one_thread = dnnl::primitive(p);
          if (const dnnl_memory_desc_t* md = dnnl_primitive_desc_query_md(pd1, dnnl_query_scratchpad_md, 0))
            op.one_thread_scratch_md = memory::desc(*md);
        }
      }
      dnnl_primitive_desc_destroy(pd1);
    }
  }

  Status run_host(const std::vector<TensorView>& inputs, const std::vector<MutableTensorView>& outputs,
             Allocator& allocator) override {
    std::shared_ptr<Buffer> arena;
    if (arena_bytes_ > 0) {
      TD_ASSIGN_OR_RETURN(arena, allocator.allocate(static_cast<size_t>(arena_bytes_)));
    }
    // Sharing the cores with other runners: ops on this thread alone, decided at each op (a
    // run that started with the cores to itself goes to one thread as soon as another runner
    // starts: its team's second thread would be the third on two cores, and a primitive
    // waiting at a barrier for a descheduled thread ran 4x slower). The one-thread variants
    // are made by the first run wherever runs may share the cores (6 ms for MobileNetV2's 56
    // primitives, 11 ms for ResNet-50's 58), not by the first run that needs them: that one
    // would stall the batch it runs (a served model's warm-up has the cores to itself, so it
    // would not make them).
    const bool shared_cores = ThreadPool::team_size() > 1;
    if (shared_cores) {
      try {
        std::call_once(serial_once_, [this] { make_serial_variants(); });
      } catch (const dnnl::error&) {  // the team primitives run instead
      }
    }
    // Runs of one region may overlap (sessions sharing one executable, on several runners):
    // each takes a context of its own (memory handles, scratchpads); the primitives and the
    // constants are shared and only read.
    std::unique_ptr<RunContext> ctx;
    {
      std::lock_guard<std::mutex> lock(contexts_mu_);
      if (!contexts_.empty()) {
        ctx = std::move(contexts_.back());
        contexts_.pop_back();
      }
    }
    Status result = OkStatus();
    try {
      if (!ctx) ctx = make_context();
      char* base = arena ? static_cast<char*>(host_address(*arena)) : nullptr;
      for (size_t i = 0; i < slots_.size(); ++i) {
        const Slot& s = slots_[i];
        switch (s.kind) {
          case SlotKind::kInput:
            ctx->mems[i].set_data_handle(const_cast<void*>(inputs.at(static_cast<size_t>(s.index)).data));
            break;
          case SlotKind::kOutput:
            ctx->mems[i].set_data_handle(outputs.at(static_cast<size_t>(s.index)).data);
            break;
          case SlotKind::kArena:
            ctx->mems[i].set_data_handle(base + storages_[static_cast<size_t>(s.index)].offset);
            break;
          case SlotKind::kOwned:
            break;
        }
      }
      dnnl::stream& stream = cpu_stream();
      // A serial op runs inline on this thread: no fork and join on the pool, which on 2 busy
      // cores costs more than splitting a small primitive saves.
      for (size_t i = 0; i < ops_.size(); ++i) {
        const Op& op = ops_[i];
        if (op.custom) {
          TeamLimit limit(op.serial || (shared_cores && threads_available() <= 1) ? 1 : 0);
          const void* srcs[kMaxCustomSources];
          for (size_t k = 0; k < op.custom_srcs.size(); ++k)
            srcs[k] = ctx->mems[static_cast<size_t>(op.custom_srcs[k])].get_data_handle();
          void* dst = ctx->mems[static_cast<size_t>(op.custom_dst)].get_data_handle();
          if (!verbose_ops()) {
            op.custom(srcs, dst);
            continue;
          }
          // TENSORD_VERBOSE_OPS=1: each custom op's time, as ONEDNN_VERBOSE prints a
          // primitive's (bench/opclass.py reads both).
          const auto t0 = std::chrono::steady_clock::now();
          op.custom(srcs, dst);
          const double ms =
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count();
          std::printf("tensord_verbose,exec,cpu,%s,%s,%g\n", op.kind.c_str(),
                      op.custom_desc.c_str(), ms);
          continue;
        }
        // (read after call_once; a context made before a variant existed runs the team's)
        const bool variant = shared_cores && !op.serial && op.one_thread &&
                             !ctx->args1[i].empty() && threads_available() <= 1;
        TeamLimit limit(op.serial || variant ? 1 : 0);
        if (variant)
          op.one_thread.execute(stream, ctx->args1[i]);
        else
          op.prim.execute(stream, ctx->args[i]);
      }
      stream.wait();
    } catch (const dnnl::error& e) {
      result = errors::Internal("oneDNN region failed: {}", e.what());
    } catch (const std::bad_alloc&) {
      result = errors::ResourceExhausted("oneDNN region: out of memory for a run's scratchpad");
    }
    if (ctx) {
      std::lock_guard<std::mutex> lock(contexts_mu_);
      contexts_.push_back(std::move(ctx));
    }
    return result;
  }

  int64_t arena_bytes() const override { return arena_bytes_; }
  int64_t weight_bytes() const override { return weight_bytes_; }
  // Primitives on oneDNN's reference loops: "ref" implementations, and pooling's "simple"
  // ones (a generic scalar loop over plain layouts: S3D's 3-D MaxPools ran 18x slower on one
  // than on the JIT kernel). A "simple" reorder or concat is a copy, not counted.
  std::vector<std::string> reference_impls() const override {
    std::vector<std::string> out;
    for (const Op& op : ops_) {
      const std::string impl = op.custom ? "" : impl_of(op.prim);
      if (op.kind == "pool" ? is_slow_pooling(impl) : is_reference(impl))
        out.push_back(op.kind + " (" + impl + ")");
    }
    return out;
  }
  std::string describe() const override {
    std::map<std::string, int> counts;
    for (const Op& op : ops_) counts[op.kind]++;
    std::string s = fmt::format("OneDnnRegion: {} nodes as {} primitives (", nodes_, ops_.size());
    bool first = true;
    for (const auto& [k, n] : counts) {
      s += fmt::format("{}{} {}", first ? "" : ", ", n, k);
      first = false;
    }
    // Convolutions on oneDNN's gemm kernel (im2col: where its direct kernels lack a form, e.g.
    // AVX2's dilations; often half their speed), so a plan shows them.
    // And the concats done as copies of whole runs (compile_concat).
    int gemm = 0, copies = 0, own_pools = 0, own_convs = 0;
    for (const Op& op : ops_) {
      if (!op.custom && op.kind.find("conv") != std::string::npos &&
          impl_of(op.prim).find("gemm") != std::string::npos)
        ++gemm;
      copies += op.custom && op.kind == "concat";
      own_pools += op.custom && op.kind == "pool";
      own_convs += op.custom && op.kind == "conv";
    }
    return s + fmt::format("), {} fused post-ops, {} activations, {} serial, arena {} bytes{}{}{}{}",
                           fused_, blocked16_ ? "nChw16c" : "oneDNN-chosen", serial_ops_,
                           arena_bytes_,
                           gemm ? fmt::format(", {} conv on oneDNN's gemm kernel", gemm) : "",
                           copies ? fmt::format(", {} concat by memcpy", copies) : "",
                           own_pools ? fmt::format(", {} pool on tensord's loop", own_pools) : "",
                           own_convs ? fmt::format(", {} conv on tensord's kernel", own_convs) : "");
  }

  // Built by RegionCompiler.
  std::vector<Slot> slots_;
  std::vector<Storage> storages_;
  std::vector<Op> ops_;
  int64_t arena_bytes_ = 0;
  int64_t weight_bytes_ = 0;
  int nodes_ = 0;
  int fused_ = 0;
  bool blocked16_ = false;
  int serial_ops_ = 0;
  std::once_flag serial_once_;
  std::mutex contexts_mu_;
  std::vector<std::unique_ptr<RunContext>> contexts_;  // free ones (as many as runs overlapped)
};

memory::dims dims_of(const Shape& s) { return memory::dims(s.begin(), s.end()); }

// The 4-D descriptor of `dims` in the same format (tag) as `like`, when `like` has one of the
// activation formats regions use; plain otherwise. A broadcast operand in its full operand's
// format lets oneDNN use its JIT binary kernels (a blocked src0 with a plain src1 falls back to
// the reference kernel, ~100x slower: the squeeze-excitation Mul).
std::optional<memory::desc> same_format(const memory::desc& like, const memory::dims& dims) {
  static const Tag tags[] = {Tag::acdb, Tag::abcd, Tag::aBcd16b, Tag::aBcd8b, Tag::aBcd4b};
  const size_t nd = like.dims().size();
  if ((nd != 4 && nd != 5) || dims.size() != nd) return std::nullopt;
  for (Tag t : tags)
    if (memory::desc(like.dims(), DT::f32, tag_nd(t, nd)) == like)
      return memory::desc(dims, DT::f32, tag_nd(t, nd));
  return std::nullopt;
}

// Row-major float32 of any rank.
memory::desc plain(const Shape& s) {
  memory::dims strides(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) strides[i - 1] = strides[i] * std::max<int64_t>(s[i], 1);
  return memory::desc(dims_of(s), DT::f32, strides);
}

// Convolution weights [O, I/g, k...] in oneDNN's grouped form [g, O/g, I/g, k...] when g > 1.
memory::dims grouped_weight_dims(const Shape& ws, int64_t group) {
  memory::dims d = dims_of(ws);
  if (group > 1) {
    d[0] = ws[0] / group;
    d.insert(d.begin(), group);
  }
  return d;
}

// The strides of `md` as a plain strided layout, when it is one: no blocking, or one block
// that covers its whole dimension (nChw16c with 16 channels is channels-last).
std::optional<memory::dims> plain_strides(const memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked) return std::nullopt;
  const auto& b = d.format_desc.blocking;
  memory::dims st(b.strides, b.strides + d.ndims);
  for (int i = 0; i < d.ndims; ++i)
    if (d.padded_dims[i] != d.dims[i]) return std::nullopt;
  if (b.inner_nblks == 0) return st;
  if (b.inner_nblks != 1 || d.dims[b.inner_idxs[0]] != b.inner_blks[0]) return std::nullopt;
  st[static_cast<size_t>(b.inner_idxs[0])] = 1;
  return st;
}

// Whether `a` and `b` put every element at the same offset: a reorder between them copies
// nothing, so one may view the other's bytes.
bool same_bytes(const memory::desc& a, const memory::desc& b) {
  if (a.data.ndims != b.data.ndims || a.data.data_type != b.data.data_type ||
      a.data.offset0 != b.data.offset0 || a.dims() != b.dims())
    return false;
  const auto sa = plain_strides(a), sb = plain_strides(b);
  if (!sa || !sb) return false;
  for (int i = 0; i < a.data.ndims; ++i)
    if (a.data.dims[i] > 1 && (*sa)[static_cast<size_t>(i)] != (*sb)[static_cast<size_t>(i)])
      return false;
  return true;
}

// The activation layout oneDNN's convolutions take on this CPU when left to choose (a 3x3
// convolution of 64 channels, batch 1): channels-last (acdb) where it has its brgemm kernels
// (AVX-512), nChw8c (aBcd8b) with the AVX2 direct kernels, nChw16c on AVX-512 without brgemm.
// Operators whose own choice differs (grouped convolutions, deconvolutions, a first layer on
// a plain input) are put in this layout, so a region keeps one layout from end to end (on
// AVX2, channels-last grouped convolutions between nChw8c ones cost a reorder in and out of
// each: RegNet, ResNeXt; deconvolutions in channels-last ran at half the speed).
Tag native_conv_tag() {
  static const Tag tag = [] {
    try {
      const memory::desc x({1, 64, 14, 14}, DT::f32, Tag::any);
      const memory::desc w({64, 64, 3, 3}, DT::f32, Tag::any);
      dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference,
                                        Alg::convolution_direct, x, w, x, {1, 1}, {1, 1},
                                        {1, 1});
      dnnl::convolution_forward::primitive_desc pd(d, cpu_engine());
      for (Tag t : {Tag::acdb, Tag::aBcd8b, Tag::aBcd16b})
        if (pd.src_desc() == memory::desc({1, 64, 14, 14}, DT::f32, t)) return t;
    } catch (const dnnl::error&) {
    }
    return Tag::acdb;
  }();
  return tag;
}

}  // namespace

std::string conv_native_layout() {
  const Tag t = native_conv_tag();
  return t == Tag::aBcd8b ? "nChw8c" : t == Tag::aBcd16b ? "nChw16c" : "channels-last";
}

namespace {

// The channel block of a blocked layout tag (1: not blocked).
int64_t channel_block(Tag t) { return t == Tag::aBcd8b ? 8 : t == Tag::aBcd16b ? 16 : 1; }

// The [N, d, C, J] view of a [B, C, 1, W] desc `md` (plain or channel-blocked) that a dilated
// Conv1d's batch-phase form reads or writes: `batched` false: B = N, W = J * d, element
// (n, p, c, j) is w = j * d + p of batch n (the value); true: B = N * d, W = J, element
// (n, p, c, j) is w = j of batch n * d + p (the convolution's operand). A reorder between the
// two moves a value between them.
memory::desc phase_split_view(const memory::desc& md, int64_t n, int64_t d, bool batched) {
  dnnl_memory_desc_t v = md.data;
  const auto& b = md.data.format_desc.blocking;
  const int64_t c = md.data.dims[1], pc = md.data.padded_dims[1];
  const int64_t j = batched ? md.data.dims[3] : md.data.dims[3] / d;
  const dnnl_dim_t dims[4] = {n, d, c, j}, padded[4] = {n, d, pc, j};
  const dnnl_dim_t st[4] = {batched ? b.strides[0] * d : b.strides[0],
                            batched ? b.strides[0] : b.strides[3], b.strides[1],
                            batched ? b.strides[3] : b.strides[3] * d};
  for (int i = 0; i < 4; ++i) {
    v.dims[i] = dims[i];
    v.padded_dims[i] = padded[i];
    v.padded_offsets[i] = 0;
    v.format_desc.blocking.strides[i] = st[i];
  }
  for (int i = 0; i < v.format_desc.blocking.inner_nblks; ++i)
    if (v.format_desc.blocking.inner_idxs[i] == 1) v.format_desc.blocking.inner_idxs[i] = 2;
  return memory::desc(v);
}

class RegionCompiler {
 public:
  RegionCompiler(const FusionGraph& g, const FusedGroup& r) : g_(g), r_(r) {}

  Result<std::unique_ptr<FusedKernel>> compile() {
    out_ = std::make_unique<DnnlRegion>();
    out_->nodes_ = static_cast<int>(r_.members.size());
    // Uses of each value inside the region (member positions), for fusion decisions.
    for (size_t m = 0; m < r_.members.size(); ++m) {
      const Node& n = *g_.nodes[r_.members[m]];
      for (const auto& in : n.inputs)
        if (!in.empty()) uses_[in].push_back(m);
      for (const auto& o : n.outputs)
        if (!o.empty()) producer_[o] = m;
    }
    for (const auto& o : r_.outputs) region_outputs_.insert(o);
    for (size_t i = 0; i < r_.inputs.size(); ++i) {
      const TensorType* t = g_.type_of(r_.inputs[i]);
      if (!t || t->dtype != DType::kFloat32)
        return errors::Unimplemented("region input '{}' is not float32", r_.inputs[i]);
      if (!shape_is_static(t->shape) || t->shape.size() > 5)
        return errors::Unimplemented("region input '{}' has no static rank <= 5 shape", r_.inputs[i]);
      const Shape view = t->shape.size() == 3   ? act4(t->shape)
                         : t->shape.size() == 5 ? t->shape
                                                : padded4(t->shape);
      value_slot_[r_.inputs[i]] = add_slot(plain(view), DnnlRegion::SlotKind::kInput,
                                           static_cast<int>(i));
    }
    blocked16_ = choose_layout();
    out_->blocked16_ = blocked16_;
    const double serial_below = serial_work_limit();
    for (size_t m = 0; m < r_.members.size(); ++m) {
      if (fused_members_.count(m)) continue;
      SerialScope scope(*this, node_work(*g_.nodes[r_.members[m]]) < serial_below);
      TD_RETURN_IF_ERROR(compile_node(m));
    }
    for (size_t i = 0; i < r_.outputs.size(); ++i) {
      const TensorType* t = g_.type_of(r_.outputs[i]);
      auto src = value(r_.outputs[i]);
      if (!src.ok()) return errors::Internal("region output '{}' was not produced", r_.outputs[i]);
      const int dst = add_slot(plain(act4(t->shape)), DnnlRegion::SlotKind::kOutput,
                               static_cast<int>(i));
      SerialScope scope(*this, static_cast<double>(shape_numel(t->shape)) < serial_below);
      add_reorder(*src, dst);
    }
    plan_memory();
    return std::unique_ptr<FusedKernel>(std::move(out_));
  }

 private:
  using SlotKind = DnnlRegion::SlotKind;

  int add_slot(const memory::desc& md, SlotKind kind, int index) {
    DnnlRegion::Slot s;
    s.md = md;
    s.kind = kind;
    s.index = index;
    out_->slots_.push_back(std::move(s));
    return static_cast<int>(out_->slots_.size() - 1);
  }

  // A new intermediate in the arena, first written by the next op.
  int add_arena(const memory::desc& md) {
    DnnlRegion::Storage st;
    st.bytes = (md.get_size() + kAlign - 1) / kAlign * kAlign;
    st.first = st.last = static_cast<int>(out_->ops_.size());
    out_->storages_.push_back(st);
    return add_slot(md, SlotKind::kArena, static_cast<int>(out_->storages_.size() - 1));
  }

  // A slot sharing `storage_of`'s arena bytes (in-place accumulation).
  int alias_arena(int storage_of, const memory::desc& md) {
    return add_slot(md, SlotKind::kArena, out_->slots_[static_cast<size_t>(storage_of)].index);
  }

  int add_owned(const memory::desc& md, const void* data) {
    const int s = add_slot(md, SlotKind::kOwned, -1);
    memory owned(md, cpu_engine());
    std::memcpy(owned.get_data_handle(), data, md.get_size());
    out_->slots_[static_cast<size_t>(s)].mem = owned;
    out_->weight_bytes_ += static_cast<int64_t>(md.get_size());
    return s;
  }

  // Weights reordered once, now, into the layout their primitive wants.
  int add_weights(const memory::desc& plain_md, const void* data, const memory::desc& want) {
    memory src(plain_md, cpu_engine(), const_cast<void*>(data));
    memory dst(want, cpu_engine());
    // On the pool like any run: the compiling thread is thread 0 of the reorder's region.
    dnnl::stream& stream = cpu_stream();
    dnnl::reorder(src, dst).execute(stream, src, dst);
    stream.wait();
    const int s = add_slot(want, SlotKind::kOwned, -1);
    out_->slots_[static_cast<size_t>(s)].mem = dst;
    out_->weight_bytes_ += static_cast<int64_t>(want.get_size());
    return s;
  }

  void touch(int slot) {
    const auto& s = out_->slots_[static_cast<size_t>(slot)];
    if (s.kind != SlotKind::kArena) return;
    auto& st = out_->storages_[static_cast<size_t>(s.index)];
    st.last = std::max(st.last, static_cast<int>(out_->ops_.size()));
    st.first = std::min(st.first, static_cast<int>(out_->ops_.size()));
  }

  void add_op(dnnl::primitive prim, std::unordered_map<int, int> arg_slots, std::string kind) {
    DnnlRegion::Op op;
    op.prim = std::move(prim);
    op.serial = serial_;
    out_->serial_ops_ += serial_ ? 1 : 0;
    for (const auto& [arg, slot] : arg_slots) touch(slot);
    const_dnnl_primitive_desc_t pd = nullptr;
    if (dnnl_primitive_get_primitive_desc(op.prim.get(), &pd) == dnnl_success)
      if (const dnnl_memory_desc_t* md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0))
        op.scratch_md = memory::desc(*md);
    op.arg_slots = std::move(arg_slots);
    op.kind = std::move(kind);
    out_->ops_.push_back(std::move(op));
  }

  void add_custom_op(std::function<void(const void* const*, void*)> fn, std::vector<int> srcs,
                     int dst, std::string kind, std::string desc = "") {
    DnnlRegion::Op op;
    op.serial = serial_;
    out_->serial_ops_ += serial_ ? 1 : 0;
    for (int src : srcs) touch(src);
    touch(dst);
    op.custom = std::move(fn);
    op.custom_srcs = std::move(srcs);
    op.custom_dst = dst;
    op.custom_desc = std::move(desc);
    op.kind = std::move(kind);
    out_->ops_.push_back(std::move(op));
  }

  // (`kind`: how the plan counts it; "phase reorder" for a dilated Conv1d's batch-phase form.)
  void add_reorder(int src, int dst, std::string kind = "reorder") {
    const auto& s = out_->slots_;
    dnnl::reorder::primitive_desc pd(cpu_engine(), s[static_cast<size_t>(src)].md, cpu_engine(),
                                     s[static_cast<size_t>(dst)].md, region_attr());
    add_op(dnnl::reorder(pd), {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}}, std::move(kind));
  }

  // The slot holding value `name` in layout `want` (reordered once and remembered).
  Result<int> value_in(const std::string& name, const memory::desc& want) {
    TD_ASSIGN_OR_RETURN(int slot, value(name));
    if (out_->slots_[static_cast<size_t>(slot)].md == want) return slot;
    for (int s : reordered_[name])
      if (out_->slots_[static_cast<size_t>(s)].md == want) return s;
    if (out_->slots_[static_cast<size_t>(slot)].kind != SlotKind::kOwned &&
        same_bytes(out_->slots_[static_cast<size_t>(slot)].md, want)) {
      TD_ASSIGN_OR_RETURN(int view, view_of(slot, want));
      reordered_[name].push_back(view);
      return view;
    }
    const int dst = add_arena(want);
    add_reorder(slot, dst);
    reordered_[name].push_back(dst);
    return dst;
  }

  // The slot of a value: produced in the region, a region input, or a constant.
  Result<int> value(const std::string& name) {
    auto it = value_slot_.find(name);
    if (it != value_slot_.end()) return it->second;
    if (auto f = flattened_.find(name); f != flattened_.end()) {
      // A Flatten read by something other than an inner product: the 4-D value in plain
      // layout, viewed as 2-D.
      const Shape& xs = type(f->second).shape;
      TD_ASSIGN_OR_RETURN(int plain4, value_in(f->second, plain(xs)));
      if (out_->slots_[static_cast<size_t>(plain4)].kind != SlotKind::kArena) {
        const int copy = add_arena(plain(xs));
        add_reorder(plain4, copy);
        plain4 = copy;
      }
      const int s = alias_arena(plain4, plain(type(name).shape));
      value_slot_[name] = s;
      return s;
    }
    const HostTensor* c = g_.constant(name);
    if (c && c->dtype() == DType::kFloat32 && c->shape().size() <= 4) {
      const int s = add_owned(plain(padded4(c->shape())), c->data());
      value_slot_[name] = s;
      return s;
    }
    return errors::Internal("value '{}' is not available in the region", name);
  }

  const TensorType& type(const std::string& name) {
    if (auto it = internal_types_.find(name); it != internal_types_.end()) return it->second;
    return *g_.type_of(name);
  }

  // Layout of the convolutions' activations. oneDNN's own choice ("any": channels-last with
  // brgemm kernels on AVX-512) is best for small batches and for networks with depthwise or
  // odd channel counts (MobileNetV2: measured 10-15% faster than nChw16c); nChw16c with the
  // direct JIT kernels is faster for batches of 4+ of plain convolutions with channels in
  // multiples of 16 (ResNet-50 batch 8: 15-20% faster, interleaved runs on 2 cores).
  // TENSORD_CONV_LAYOUT=any|blocked16 overrides.
  bool choose_layout() {
    if (const char* e = std::getenv("TENSORD_CONV_LAYOUT")) {
      if (std::string(e) == "any") return false;
      if (std::string(e) == "blocked16") return true;
    }
    // Where oneDNN's own choice is already blocked (AVX2: nChw8c), that is the layout.
    if (native_conv_tag() != Tag::acdb) return false;
    bool any_conv = false;
    for (size_t m : r_.members) {
      const Node& n = *g_.nodes[m];
      if (n.op != "Conv") continue;
      any_conv = true;
      const Shape& xs = type(n.inputs[0]).shape;
      const Shape& ws = g_.constant(n.inputs[1])->shape();
      auto group = NodeAttrs(n).attr_int("group", 1);
      if (!group.ok() || *group != 1 || xs[0] < 4) return false;
      if (ws[0] % 16 != 0 || (xs[1] % 16 != 0 && xs[1] >= 16)) return false;
    }
    return any_conv;
  }

  // Whether `v` is a region input of rank 3 or 4 (held in its plain NCHW layout).
  bool reads_plain_input(const std::string& v) {
    auto it = value_slot_.find(v);
    return it != value_slot_.end() &&
           out_->slots_[static_cast<size_t>(it->second)].kind == SlotKind::kInput &&
           type(v).shape.size() >= 3;
  }

  // The single member consuming `v`, if `v` is used exactly once, inside the region only.
  std::optional<size_t> sole_consumer(const std::string& v) {
    if (region_outputs_.count(v)) return std::nullopt;
    auto it = uses_.find(v);
    if (it == uses_.end() || it->second.size() != 1) return std::nullopt;
    return it->second[0];
  }

  Status compile_node(size_t m) {
    const Node& node = *g_.nodes[r_.members[m]];
    const std::string& op = node.op;
    if (op == "Conv") return compile_conv(m);
    if (op == "ConvTranspose") return compile_conv_transpose(m);
    if (op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool" ||
        op == "GlobalMaxPool")
      return compile_pool(node);
    if (is_unary_eltwise(op)) return compile_eltwise(node);
    if (op == "Div")
      if (auto fq = fake_quant_chain(m)) return compile_fake_quant(m, *fq);
    if (is_binary(op)) return compile_binary(node);
    if (op == "Concat") return compile_concat(node);
    if (op == "Flatten") {
      flattened_[node.outputs[0]] = node.inputs[0];  // a view: materialised only if needed
      return OkStatus();
    }
    if (op == "Gemm" || op == "MatMul") return compile_dense(m);
    if (op == "BatchNormalization") return compile_batchnorm(m);
    if (op == "Reshape" || op == "Transpose") return compile_shuffle_part(node);
    if (op == "Slice") return compile_channel_slice(node);
    if (op == "ReduceMean") {
      // A GlobalAveragePool; without keepdims its [N, C] result is a view of the pooled
      // [N, C, 1, 1] (like Flatten: an inner product after it reads the pooled tensor as is).
      const int keep = spatial_mean(node, g_);
      if (keep < 0) return errors::Internal("'{}' is not a spatial mean", node.name);
      const Shape& xs = type(node.inputs[0]).shape;
      std::string pooled = node.outputs[0];
      if (keep == 0) {
        pooled = node.outputs[0] + "#pooled";
        internal_types_[pooled] = TensorType{DType::kFloat32, Shape{xs[0], xs[1], 1, 1}};
        flattened_[node.outputs[0]] = pooled;
      }
      return compile_global_pool(node.inputs[0], pooled);
    }
    if (op == "Pad") {  // pads nothing (eligible): the same bytes, or a copy if shared
      TD_ASSIGN_OR_RETURN(int src, value(node.inputs[0]));
      if (sole_consumer(node.inputs[0]) &&
          out_->slots_[static_cast<size_t>(src)].kind == SlotKind::kArena) {
        value_slot_[node.outputs[0]] = src;
      } else {
        const int dst = add_arena(out_->slots_[static_cast<size_t>(src)].md);
        add_reorder(src, dst);
        value_slot_[node.outputs[0]] = dst;
      }
      return OkStatus();
    }
    return errors::Unimplemented("{} ('{}') cannot run in a oneDNN region (only after a Conv)", op,
                                 node.name);
  }

  // The slot of `name` in a dense non-blocked layout (channels-last or plain), as is when it is
  // already; in channels-last otherwise.
  Result<int> dense_value(const std::string& name) {
    TD_ASSIGN_OR_RETURN(int s, value(name));
    const memory::desc md = out_->slots_[static_cast<size_t>(s)].md;
    const memory::dims d = md.dims();
    if (d.size() == 4 && (md == memory::desc(d, DT::f32, Tag::acdb) ||
                          md == memory::desc(d, DT::f32, Tag::abcd)))
      return s;
    return value_in(name, memory::desc(dims_of(type(name).shape), DT::f32, Tag::acdb));
  }

  // A slot viewing the bytes of slot `of` through `md` (same input, output or arena storage).
  Result<int> view_of(int of, const memory::desc& md) {
    const auto& s = out_->slots_[static_cast<size_t>(of)];
    if (s.kind == SlotKind::kOwned) return errors::Unimplemented("a view of a constant");
    if (s.kind == SlotKind::kArena) viewed_storages_.insert(s.index);
    return add_slot(md, s.kind, s.index);
  }

  // A slot through which one op reads or writes the bytes of slot `of` (an input, output or
  // arena value) in another shape; unlike view_of, no value is named by it, so the storage
  // stays free for in-place accumulation.
  int op_view(int of, const memory::desc& md) {
    const auto& s = out_->slots_[static_cast<size_t>(of)];
    return add_slot(md, s.kind, s.index);
  }

  // Channel shuffle: the Reshape and Transpose are views (nothing runs); the last Reshape is one
  // reorder that permutes the channels, in the input's layout.
  Status compile_shuffle_part(const Node& node) {
    const Node* head = channel_shuffle_head(node, g_);
    if (!head) return errors::Internal("'{}' is not part of a channel shuffle", node.name);
    if (&node != head && node.op == "Transpose") return OkStatus();
    if (&node == head) {
      shuffle_groups_[node.outputs[0]] = channel_shuffle_groups(*head, g_);
      return OkStatus();
    }
    const int64_t groups = channel_shuffle_groups(*head, g_);
    const std::string& x = head->inputs[0];
    TD_ASSIGN_OR_RETURN(int src, dense_value(x));
    const memory::desc md = out_->slots_[static_cast<size_t>(src)].md;
    const Shape& xs = type(x).shape;
    const int64_t n = xs[0], c = xs[1], h = xs[2], w = xs[3], k = c / groups;
    const memory::dims st4 = md.data.format_desc.blocking.strides[0] ? memory::dims{
        md.data.format_desc.blocking.strides[0], md.data.format_desc.blocking.strides[1],
        md.data.format_desc.blocking.strides[2], md.data.format_desc.blocking.strides[3]}
        : memory::dims{};
    if (st4.empty()) return errors::Internal("channel shuffle: no strides");
    const memory::dims d5 = {n, groups, k, h, w};
    // Source channel g * K + k; destination channel k * G + g.
    const memory::desc src5(d5, DT::f32, memory::dims{st4[0], k * st4[1], st4[1], st4[2], st4[3]});
    const memory::desc dst5(d5, DT::f32,
                            memory::dims{st4[0], st4[1], groups * st4[1], st4[2], st4[3]});
    const int dst = add_arena(md);
    TD_ASSIGN_OR_RETURN(int s5, view_of(src, src5));
    TD_ASSIGN_OR_RETURN(int d5s, view_of(dst, dst5));
    add_reorder(s5, d5s);
    touch(dst);
    value_slot_[node.outputs[0]] = dst;
    return OkStatus();
  }

  // Slice of channels: a view of its input's bytes (channels-last or plain) at an offset.
  Status compile_channel_slice(const Node& node) {
    auto range = channel_slice(node, g_);
    if (!range) return errors::Internal("'{}' is not a channel slice", node.name);
    TD_ASSIGN_OR_RETURN(int src, dense_value(node.inputs[0]));
    const memory::desc md = out_->slots_[static_cast<size_t>(src)].md;
    const Shape& ys = type(node.outputs[0]).shape;
    const memory::desc view =
        md.submemory_desc(dims_of(ys), memory::dims{0, range->first, 0, 0});
    TD_ASSIGN_OR_RETURN(int s, view_of(src, view));
    value_slot_[node.outputs[0]] = s;
    return OkStatus();
  }

  // A BatchNormalization not folded into a Conv: y = x * a + b per channel (a and b from the
  // running statistics in double, rounded once) as one oneDNN binary Mul with the Add and a
  // ReLU that is its only consumer as post-ops, in the input's layout.
  Status compile_batchnorm(size_t m) {
    const Node& node = *g_.nodes[r_.members[m]];
    NodeAttrs at(node);
    TD_ASSIGN_OR_RETURN(float eps, at.attr_float("epsilon", 1e-5f));
    const int64_t c = type(node.inputs[0]).shape[1];
    for (size_t i = 1; i < 5; ++i)
      if (g_.constant(node.inputs[i])->numel() != c)
        return errors::InvalidArgument("BatchNormalization '{}': parameters do not match {} channels",
                                       node.name, c);
    const float* scale = g_.constant(node.inputs[1])->data<float>();
    const float* shift = g_.constant(node.inputs[2])->data<float>();
    const float* mean = g_.constant(node.inputs[3])->data<float>();
    const float* var = g_.constant(node.inputs[4])->data<float>();
    std::vector<float> mul(static_cast<size_t>(c)), add(static_cast<size_t>(c));
    for (int64_t o = 0; o < c; ++o) {
      const double s = double(scale[o]) / std::sqrt(double(var[o]) + double(eps));
      mul[static_cast<size_t>(o)] = static_cast<float>(s);
      add[static_cast<size_t>(o)] = static_cast<float>(double(shift[o]) - double(mean[o]) * s);
    }
    TD_ASSIGN_OR_RETURN(int src, value(node.inputs[0]));
    const memory::desc md0 = out_->slots_[static_cast<size_t>(src)].md;
    const Shape per_c = {1, c, 1, 1};
    const memory::desc md1 = same_format(md0, dims_of(per_c)).value_or(plain(per_c));
    dnnl::post_ops post;
    post.append_binary(Alg::binary_add, md1);
    std::string v = node.outputs[0];
    if (auto cns = sole_consumer(v)) {
      const Node& next = *g_.nodes[r_.members[*cns]];
      if (next.op == "Relu" && next.inputs[0] == v) {
        post.append_eltwise(1.0f, Alg::eltwise_relu, 0, 0);
        fused_members_.insert(*cns);
        out_->fused_++;
        v = next.outputs[0];
      }
    }
    dnnl::primitive_attr attr = region_attr();
    attr.set_post_ops(post);
    dnnl::binary::desc desc(Alg::binary_mul, md0, md1, md0);
    dnnl::binary::primitive_desc pd(desc, attr, cpu_engine());
    const int s_mul = add_weights(plain(per_c), mul.data(), md1);
    const int s_add = add_weights(plain(per_c), add.data(), md1);
    const int dst = add_arena(pd.dst_desc());
    add_op(dnnl::binary(pd),
           {{DNNL_ARG_SRC_0, src}, {DNNL_ARG_SRC_1, s_mul}, {DNNL_ARG_DST, dst},
            {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, s_add}},
           "scale_shift");
    value_slot_[v] = dst;
    return OkStatus();
  }

  // The post-ops of a contraction (member `m`) whose result is `*v`, from the epilogue the
  // engine tagged (FusionGraph::epilogue_of), in graph order: activations (x * Sigmoid(x) as
  // one swish) and, when `residual` is given, one Add of a same-shaped value that exists before
  // the contraction runs (a sum post-op; its name goes to *residual); at most four, every node
  // a member of this region. Absorbed members are marked fused; *v becomes the last absorbed
  // value.
  // `max_steps`: at most this many steps of the chain; `commit` false: a trial (the steps'
  // nodes stay the region's to compile), returning how many steps `post` holds.
  Result<int> absorb_post_ops(size_t m, std::string* v, dnnl::post_ops* post,
                              std::string* residual, int max_steps = 4, bool commit = true) {
    const std::vector<EpilogueStep> chain = g_.epilogue_of(r_.members[m]);
    int absorbed = 0;
    for (const EpilogueStep& s : chain) {
      if (absorbed == max_steps || s.input != *v) break;
      std::vector<size_t> local;  // the step's member positions
      for (size_t n : s.nodes) {
        auto it = std::find(r_.members.begin(), r_.members.end(), n);
        if (it == r_.members.end()) break;
        local.push_back(static_cast<size_t>(it - r_.members.begin()));
      }
      if (local.size() != s.nodes.size()) break;
      const Node& next = *s.node;
      if (s.kind == EpilogueStep::Kind::kSwish) {
        post->append_eltwise(1.0f, Alg::eltwise_swish, 1.0f, 0.0f);
      } else if (s.kind == EpilogueStep::Kind::kActivation && is_unary_eltwise(next.op)) {
        TD_ASSIGN_OR_RETURN(auto steps, eltwise_steps(next, g_));
        for (const auto& e : steps) post->append_eltwise(1.0f, e.alg, e.alpha, e.beta);
      } else if (s.kind == EpilogueStep::Kind::kBinary && residual && residual->empty() &&
                 next.op == "Add" && s.form == EpilogueStep::Operand::kSameShape) {
        // The residual must exist before the contraction runs.
        auto p = producer_.find(s.operand);
        if (p != producer_.end() && p->second > m) break;
        *residual = s.operand;
        post->append_sum(1.0f);
      } else {
        break;
      }
      if (commit) {
        for (size_t l : local) fused_members_.insert(l);
        out_->fused_ += static_cast<int>(local.size());
      }
      *v = s.output;
      ++absorbed;
    }
    return absorbed;
  }

  // ConvTranspose (eligible: 2-D, one group, constant weights and bias) as a oneDNN
  // deconvolution reading and writing the region's layout, activations after it as post-ops.
  Status compile_conv_transpose(size_t m) {
    const Node& node = *g_.nodes[r_.members[m]];
    NodeAttrs a(node);
    const Shape& xs = type(node.inputs[0]).shape;
    const HostTensor& w = *g_.constant(node.inputs[1]);
    const Shape& ws = w.shape();  // [C_in, C_out, kH, kW]
    const int64_t oc = ws[1];
    const Shape in_spatial(xs.begin() + 2, xs.end());
    const Shape kernel(ws.begin() + 2, ws.end());
    std::vector<int64_t> strides, dilations, pads;
    Shape out_spatial;
    TD_RETURN_IF_ERROR(nn::conv_transpose_geometry(a, in_spatial, kernel, &strides, &dilations,
                                                   &pads, &out_spatial));
    const Shape& ys = type(node.outputs[0]).shape;
    if (ys.size() != 4 || ys[1] != oc || ys[2] != out_spatial[0] || ys[3] != out_spatial[1])
      return errors::Unimplemented("ConvTranspose: output {} is not the geometry's",
                                   shape_to_string(ys));
    // oneDNN: dst = (src - 1) * stride + (k - 1) * dilation + 1 - pad_l - pad_r, so pad_r is
    // what gives ONNX's size (output_padding, output_shape); oneDNN refuses a negative one.
    memory::dims st(2), dl(2), pl(2), pr(2);
    for (size_t d = 0; d < 2; ++d) {
      st[d] = strides[d];
      dl[d] = dilations[d] - 1;
      pl[d] = pads[d];
      pr[d] = (in_spatial[d] - 1) * strides[d] + (kernel[d] - 1) * dilations[d] + 1 - pads[d] -
              ys[2 + d];
      if (pr[d] < 0) return errors::Unimplemented("ConvTranspose: negative right padding");
    }
    const bool has_bias = node.inputs.size() > 2 && !node.inputs[2].empty();
    if (auto done = phase_deconv(m, strides, dilations, pads)) return *done;
    std::string v = node.outputs[0];
    // No post-ops: oneDNN's deconvolution is a backward-data convolution whose post-ops run
    // as a reference loop afterwards (an eltwise post-op made the VAE decoder's deconvolutions
    // 4-8x slower, under a "jit" implementation name); an activation after it is its own
    // eltwise primitive, in place.
    dnnl::post_ops post;
    const Shape& vs = type(v).shape;
    // The convolutions' layout: nChw16c in a "blocked16" region, else channels-last (what
    // oneDNN picks for the convolutions around it on AVX-512; its own choice for the
    // deconvolution, nChw16c, cost a reorder in and out of each).
    // On CPUs whose convolutions are blocked (AVX2: nChw8c), that layout (channels-last
    // deconvolutions between nChw8c convolutions ran at half their speed, plus reorders).
    const Tag native = native_conv_tag();
    const Tag src_tag = blocked16_ && xs[1] % 16 == 0 ? Tag::aBcd16b : native;
    const Tag dst_tag = blocked16_ ? Tag::aBcd16b : native;
    const memory::desc src_any(dims_of(xs), DT::f32, src_tag);
    const memory::desc wei_any({oc, xs[1], ws[2], ws[3]}, DT::f32, Tag::any);
    const memory::desc bias_md({oc}, DT::f32, Tag::a);
    const memory::desc dst_any(dims_of(vs), DT::f32, dst_tag);
    dnnl::primitive_attr attr = region_attr();
    attr.set_post_ops(post);
    const auto prop = dnnl::prop_kind::forward_inference;
    const auto alg = Alg::deconvolution_direct;
    auto make_pd = [&](const memory::desc& src_md, const memory::desc& dst_md) {
      auto desc = has_bias ? dnnl::deconvolution_forward::desc(prop, alg, src_md, wei_any,
                                                               bias_md, dst_md, st, dl, pl, pr)
                           : dnnl::deconvolution_forward::desc(prop, alg, src_md, wei_any,
                                                               dst_md, st, dl, pl, pr);
      return dnnl::deconvolution_forward::primitive_desc(desc, attr, cpu_engine());
    };
    dnnl::deconvolution_forward::primitive_desc pd = make_pd(src_any, dst_any);
    // Some geometries have only the reference kernel in the blocked layout (AVX2: 5 output
    // channels with a dilation): channels-last, or oneDNN's own choice, may have a JIT one.
    for (Tag t : {Tag::acdb, Tag::any}) {
      if (!is_reference(pd.impl_info_str())) break;
      try {
        auto alt = make_pd(memory::desc(dims_of(xs), DT::f32, t),
                           memory::desc(dims_of(vs), DT::f32, t));
        if (!is_reference(alt.impl_info_str())) pd = alt;
      } catch (const dnnl::error&) {
      }
    }
    TD_ASSIGN_OR_RETURN(int src, value_in(node.inputs[0], pd.src_desc()));
    // ONNX's [C_in, C_out, kH, kW] is oneDNN's "io" order.
    const memory::desc wplain({oc, xs[1], ws[2], ws[3]}, DT::f32, Tag::iohw);
    const int wei = add_weights(wplain, w.data<float>(), pd.weights_desc());
    const int dst = add_arena(pd.dst_desc());
    std::unordered_map<int, int> args = {
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
    if (has_bias) args[DNNL_ARG_BIAS] = add_owned(bias_md, g_.constant(node.inputs[2])->data<float>());
    add_op(dnnl::deconvolution_forward(pd), std::move(args), "deconv");
    value_slot_[v] = dst;
    return OkStatus();
  }

  // A strided ConvTranspose (VAE decoders' 3x3 stride-2 upsampling with output padding, U-Net's
  // 2x2 stride 2, where each phase is a 1x1 convolution) as one ordinary convolution per output
  // phase and a scatter of the phases' pixels (PhaseScatter).
  // Along an axis of stride s, kernel k and leading pad p, output o = s * i + r (phase r) sums
  // the taps ky = ky0 + s * t, ky0 = (r + p) mod s, reading input i + (r + p - ky0) / s - t: a
  // convolution over the input by the phase's taps, reversed, with its own pads. The phases
  // together do the deconvolution's multiply-adds, none on inserted zeros. oneDNN 2.6 runs the
  // deconvolution as a backward-data convolution (about 24 GFLOP/s on AVX2 for the VAE's 32 ->
  // 16 channels at 32x32); its forward kernels take the phases. Activations after it are the
  // phase convolutions' post-ops. Taken where every phase has a tap and pads >= 0 on both
  // ends; TENSORD_NO_PHASE_DECONV=1 keeps the deconvolution. nullopt: not taken.
  std::optional<Status> phase_deconv(size_t m, const std::vector<int64_t>& strides,
                                     const std::vector<int64_t>& dilations,
                                     const std::vector<int64_t>& pads) {
    static const bool off = std::getenv("TENSORD_NO_PHASE_DECONV") != nullptr;
    const Node& node = *g_.nodes[r_.members[m]];
    const HostTensor& w = *g_.constant(node.inputs[1]);
    const Shape& xs = type(node.inputs[0]).shape;
    const Shape& ys = type(node.outputs[0]).shape;
    const Shape& ws = w.shape();  // [C_in, C_out, kH, kW]
    if (off || w.dtype() != DType::kFloat32 || xs.size() != 4 || ws.size() != 4 ||
        (strides[0] == 1 && strides[1] == 1) || dilations[0] != 1 || dilations[1] != 1)
      return std::nullopt;
    const int64_t ic = xs[1], oc = ws[1];
    // Per axis and phase: first tap, taps, pads of the phase convolution, outputs.
    struct Phase {
      int64_t ky0, taps, pad_b, pad_e, out;
    };
    std::vector<Phase> axes[2];
    for (size_t d = 0; d < 2; ++d) {
      const int64_t s = strides[d], k = ws[2 + d], p = pads[d], in = xs[2 + d], o = ys[2 + d];
      if (s > o) return std::nullopt;
      for (int64_t r = 0; r < s; ++r) {
        Phase ph;
        ph.ky0 = (r + p) % s;
        if (ph.ky0 >= k) return std::nullopt;  // a phase of bias only
        ph.taps = (k - ph.ky0 + s - 1) / s;
        const int64_t c = (r + p - ph.ky0) / s;
        ph.out = (o - r + s - 1) / s;
        ph.pad_b = ph.taps - 1 - c;
        ph.pad_e = ph.out - in - ph.pad_b + ph.taps - 1;
        if (ph.pad_b < 0 || ph.pad_e < 0 || ph.pad_b >= ph.taps + in || ph.pad_e >= ph.taps + in)
          return std::nullopt;
        axes[d].push_back(ph);
      }
    }
    const Tag tag = blocked16_ ? Tag::aBcd16b : native_conv_tag();
    std::string v = node.outputs[0];
    dnnl::post_ops post;
    // Activations only: a residual would have to be read through the scatter.
    TD_RETURN_IF_ERROR(absorb_post_ops(m, &v, &post, nullptr, 4, false).status());
    std::vector<dnnl::convolution_forward::primitive_desc> pds;
    const memory::desc src_md(dims_of(xs), DT::f32, tag);
    const memory::desc bias_md({oc}, DT::f32, Tag::a);
    try {
      dnnl::primitive_attr attr = region_attr();
      attr.set_post_ops(post);
      for (const Phase& py : axes[0])
        for (const Phase& px : axes[1]) {
          const memory::desc wei_any({oc, ic, py.taps, px.taps}, DT::f32, Tag::any);
          const memory::desc dst_md({xs[0], oc, py.out, px.out}, DT::f32, tag);
          dnnl::convolution_forward::desc desc(
              dnnl::prop_kind::forward_inference, Alg::convolution_direct, src_md, wei_any,
              bias_md, dst_md, {1, 1}, {0, 0}, {py.pad_b, px.pad_b}, {py.pad_e, px.pad_e});
          pds.emplace_back(desc, attr, cpu_engine());
          const std::string impl = pds.back().impl_info_str();
          if (is_reference(impl) || impl.find("gemm") != std::string::npos) return std::nullopt;
        }
    } catch (const dnnl::error&) {
      return std::nullopt;
    }
    v = node.outputs[0];
    post = dnnl::post_ops();
    TD_RETURN_IF_ERROR(absorb_post_ops(m, &v, &post, nullptr, 4, true).status());
    std::vector<float> bias(static_cast<size_t>(oc), 0.0f);
    if (node.inputs.size() > 2 && !node.inputs[2].empty()) {
      const float* b = g_.constant(node.inputs[2])->data<float>();
      std::copy(b, b + oc, bias.begin());
    }
    TD_ASSIGN_OR_RETURN(int src, value_in(node.inputs[0], pds[0].src_desc()));
    const int bias_slot = add_owned(bias_md, bias.data());
    const float* wsrc = w.data<float>();
    const int64_t kh = ws[2], kw = ws[3];
    std::vector<int> phases;
    PhaseScatter scatter;
    scatter.n = xs[0];
    scatter.c = oc;
    scatter.sh = strides[0];
    scatter.sw = strides[1];
    scatter.oh = ys[2];
    scatter.ow = ys[3];
    scatter.block = channel_block(tag);
    size_t at = 0;
    for (const Phase& py : axes[0])
      for (const Phase& px : axes[1]) {
        const auto& pd = pds[at++];
        // The phase's taps, reversed: K[o, i, th, tw] = W[i, o, ky0 + s * (T - 1 - th), ...].
        std::vector<float> k(static_cast<size_t>(oc * ic * py.taps * px.taps));
        for (int64_t o = 0; o < oc; ++o)
          for (int64_t i = 0; i < ic; ++i)
            for (int64_t th = 0; th < py.taps; ++th)
              for (int64_t tw = 0; tw < px.taps; ++tw) {
                const int64_t ky = py.ky0 + strides[0] * (py.taps - 1 - th);
                const int64_t kx = px.ky0 + strides[1] * (px.taps - 1 - tw);
                k[static_cast<size_t>(((o * ic + i) * py.taps + th) * px.taps + tw)] =
                    wsrc[((i * oc + o) * kh + ky) * kw + kx];
              }
        const int wei = add_weights(plain({oc, ic, py.taps, px.taps}), k.data(), pd.weights_desc());
        const int dst = add_arena(pd.dst_desc());
        add_op(dnnl::convolution_forward(pd),
               {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst},
                {DNNL_ARG_BIAS, bias_slot}},
               "phase deconv");
        phases.push_back(dst);
      }
    for (const Phase& py : axes[0]) scatter.ph.push_back(py.out);
    for (const Phase& px : axes[1]) scatter.pw.push_back(px.out);
    const int dst = add_arena(memory::desc(dims_of(ys), DT::f32, tag));
    add_custom_op([scatter](const void* const* x, void* y) {
                    scatter.run(reinterpret_cast<const float* const*>(x), static_cast<float*>(y));
                  },
                  phases, dst, "phase scatter");
    value_slot_[v] = dst;
    return OkStatus();
  }

  // The copy of phase_deconv: phase (ry, rx) [N, C, ph[ry], pw[rx]] to the pixels (sh * i + ry,
  // sw * j + rx) of y [N, C, oh, ow], all in one layout: nChw{block}c (whole blocks, padding
  // channels included), or channels-last (block 1).
  struct PhaseScatter {
    int64_t n = 0, c = 0, sh = 1, sw = 1, oh = 0, ow = 0, block = 1;
    std::vector<int64_t> ph, pw;  // each phase row's and column's outputs (ph[ry], pw[rx])
    void run(const float* const* x, float* y) const {
      const int64_t cb = block > 1 ? (c + block - 1) / block : 1;
      const int64_t vec = block > 1 ? block : c;  // floats per pixel and block
      ThreadPool::get().parallel_for(n * cb * oh, 4, [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          const int64_t oy = r % oh, b = (r / oh) % cb, img = r / (oh * cb);
          const int64_t ry = oy % sh, i = oy / sh;
          float* out = y + r * ow * vec;
          for (int64_t ox = 0; ox < ow; ++ox) {
            const int64_t rx = ox % sw, j = ox / sw;
            const int64_t rows = ph[static_cast<size_t>(ry)], cols = pw[static_cast<size_t>(rx)];
            const float* in = x[ry * sw + rx] + (((img * cb + b) * rows + i) * cols + j) * vec;
            std::memcpy(out + ox * vec, in, static_cast<size_t>(vec) * sizeof(float));
          }
        }
      });
    }
  };

  Status compile_conv(size_t m) {
    const Node& node = *g_.nodes[r_.members[m]];
    const HostTensor& w = *g_.constant(node.inputs[1]);
    const int64_t oc = act4(w.shape())[0];
    if (node.inputs.size() > 2 && !node.inputs[2].empty()) {
      const HostTensor* b = g_.constant(node.inputs[2]);
      if (b->numel() != oc) return errors::InvalidArgument("Conv bias has {} values for {} channels", b->numel(), oc);
    }
    std::vector<int64_t> strides, dilations, pads;
    TD_RETURN_IF_ERROR(conv_geometry(node, &strides, &dilations, &pads));
    for (int64_t p : pads)
      if (p < 0) return errors::Unimplemented("Conv with negative pads");

    // Post-ops: activations and one residual Add, in graph order. A chain no fast kernel
    // takes (AVX2's direct kernels lack ReLU + sum + ReLU, a residual block's: a dilated
    // Conv1d stack ran in ref:any at 50 ms a call) is shortened until one does; the steps
    // left out run as primitives of their own.
    if (auto done = small_group_conv(m)) return *done;
    if (auto done = own_direct_conv(m)) return *done;
    std::string v0 = node.outputs[0], residual0;
    dnnl::post_ops post0;
    TD_ASSIGN_OR_RETURN(int steps, absorb_post_ops(m, &v0, &post0, &residual0, 4, false));
    for (;; --steps) {
      std::string v = node.outputs[0], residual;
      dnnl::post_ops post;
      TD_RETURN_IF_ERROR(absorb_post_ops(m, &v, &post, &residual, steps, false).status());
      TD_ASSIGN_OR_RETURN(auto pd, conv_pd(m, v, post));
      if (steps > 0 && is_reference(pd.impl_info_str())) continue;
      v = node.outputs[0];
      residual.clear();
      post = dnnl::post_ops();
      TD_RETURN_IF_ERROR(absorb_post_ops(m, &v, &post, &residual, steps, true).status());
      return add_conv(m, v, residual, pd);
    }
  }

  // Strides, dilations and pads of Conv `node` in 2-D form (a 1-D convolution as H = 1;
  // pads top, left, bottom, right).
  Status conv_geometry(const Node& node, std::vector<int64_t>* strides,
                       std::vector<int64_t>* dilations, std::vector<int64_t>* pads) {
    const Shape& xs_n = type(node.inputs[0]).shape;
    const Shape& ws_n = g_.constant(node.inputs[1])->shape();
    const Shape in_spatial(xs_n.begin() + 2, xs_n.end());
    const Shape kernel(ws_n.begin() + 2, ws_n.end());
    Shape out_spatial;
    TD_RETURN_IF_ERROR(nn::window_geometry(NodeAttrs(node), in_spatial, kernel, false, strides,
                                           dilations, pads, &out_spatial));
    if (in_spatial.size() == 1) {
      *strides = {1, (*strides)[0]};
      *dilations = {1, (*dilations)[0]};
      *pads = {0, (*pads)[0], 0, (*pads)[1]};
    }
    return OkStatus();
  }

  // Convolution `m` as SmallGroupConv (grouped_conv.h), in the region's layout, when its groups have
  // 2 or 4 channels and oneDNN has only its gemm or reference implementation for it (AVX2:
  // its direct kernels need whole blocks of 8 channels per group); a ReLU after it is fused.
  // nullopt: not taken.
  std::optional<Status> small_group_conv(size_t m) {
    const Node& node = *g_.nodes[r_.members[m]];
    NodeAttrs a(node);
    const Shape xs = act4(type(node.inputs[0]).shape);
    const HostTensor& w = *g_.constant(node.inputs[1]);
    const Shape ws = act4(w.shape());
    auto group = a.attr_int("group", 1);
    if (blocked16_ || xs.size() != 4 || !group.ok() ||
        !SmallGroupConv::applies(xs[1], ws[0], *group) || w.dtype() != DType::kFloat32)
      return std::nullopt;
    try {
      auto pd = conv_pd(m, node.outputs[0], dnnl::post_ops());
      if (!pd.ok()) return std::nullopt;
      const std::string impl = pd->impl_info_str();
      if (impl.find("gemm") == std::string::npos && !is_reference(impl)) return std::nullopt;
    } catch (const dnnl::error&) {
    }
    std::vector<int64_t> strides, dilations, pads;
    if (!conv_geometry(node, &strides, &dilations, &pads).ok()) return std::nullopt;
    // A ReLU right after it (a folded BatchNormalization's block) is fused; anything else
    // after it runs as primitives of its own.
    std::string v = node.outputs[0], residual;
    dnnl::post_ops post;
    auto steps = absorb_post_ops(m, &v, &post, &residual, 1, false);
    bool relu = false;
    if (steps.ok() && *steps == 1 && post.len() == 1 &&
        post.kind(0) == dnnl::primitive::kind::eltwise) {
      float scale = 0, alpha = 0, beta = 0;
      Alg alg;
      post.get_params_eltwise(0, scale, alg, alpha, beta);
      relu = alg == Alg::eltwise_relu && alpha == 0.0f && scale == 1.0f;
    }
    v = node.outputs[0];
    residual.clear();
    post = dnnl::post_ops();
    if (relu) {
      auto s = absorb_post_ops(m, &v, &post, &residual, 1, true);
      if (!s.ok()) return s.status();
    }
    const Shape ys = act4(type(v).shape);
    SmallGroupConv::Geometry geo;
    geo.n = xs[0];
    geo.c = xs[1];
    geo.h = xs[2];
    geo.w = xs[3];
    geo.oh = ys[2];
    geo.ow = ys[3];
    geo.kh = ws[2];
    geo.kw = ws[3];
    geo.sh = strides[0];
    geo.sw = strides[1];
    geo.dh = dilations[0];
    geo.dw = dilations[1];
    geo.ph = pads[0];
    geo.pw = pads[1];
    geo.group = *group;
    const bool has_bias = node.inputs.size() > 2 && !node.inputs[2].empty();
    // In the region's layout: nChw8c where that is oneDNN's (AVX2), else channels-last.
    const bool blocked8 = native_conv_tag() == Tag::aBcd8b;
    const Tag tag = blocked8 ? Tag::aBcd8b : Tag::acdb;
    auto kernel_state = std::make_shared<SmallGroupConv>(
        geo, w.data<float>(), has_bias ? g_.constant(node.inputs[2])->data<float>() : nullptr,
        relu, blocked8);
    auto src = value_in(node.inputs[0], memory::desc(dims_of(xs), DT::f32, tag));
    if (!src.ok()) return src.status();
    const int dst = add_arena(memory::desc(dims_of(ys), DT::f32, tag));
    add_custom_op([kernel_state](const void* const* x, void* y) {
                    kernel_state->run(static_cast<const float*>(x[0]), static_cast<float*>(y));
                  },
                  {*src}, dst, "grouped conv");
    value_slot_[v] = dst;
    return OkStatus();
  }

  // Convolution `m` as DirectConv8 (direct_conv8.h: tensord's AVX2 kernel for the deep layers
  // of a CNN) where the region's layout is nChw8c and the kernel applies: 2-D, one group, a
  // window of more than one tap (3x3; Inception's 1x3, 3x1, 1x7, 7x1), no dilation, stride 1
  // or 2 (the forms measured against oneDNN), and a post-op chain of ReLUs and one residual
  // Add. TENSORD_NO_OWN_CONV=1 keeps oneDNN's (to compare).
  // nullopt: not taken.
  std::optional<Status> own_direct_conv(size_t m) {
    static const bool off = std::getenv("TENSORD_NO_OWN_CONV") != nullptr;
    const Node& node = *g_.nodes[r_.members[m]];
    if (off || blocked16_ || native_conv_tag() != Tag::aBcd8b) return std::nullopt;
    const Shape& xs_n = type(node.inputs[0]).shape;
    const HostTensor& w = *g_.constant(node.inputs[1]);
    if (xs_n.size() != 4 || w.dtype() != DType::kFloat32 || w.shape().size() != 4)
      return std::nullopt;
    auto group = NodeAttrs(node).attr_int("group", 1);
    if (!group.ok() || *group != 1) return std::nullopt;
    std::vector<int64_t> strides, dilations, pads;
    if (!conv_geometry(node, &strides, &dilations, &pads).ok()) return std::nullopt;
    const Shape ws = w.shape();
    const Shape ys = type(node.outputs[0]).shape;
    if (ys.size() != 4 || ws[2] * ws[3] < 2 || dilations[0] != 1 || dilations[1] != 1 ||
        strides[0] != strides[1] || strides[0] > 2)
      return std::nullopt;
    DirectConv8::Geometry geo;
    geo.n = xs_n[0];
    geo.ic = xs_n[1];
    geo.h = xs_n[2];
    geo.w = xs_n[3];
    geo.oc = ws[0];
    geo.oh = ys[2];
    geo.ow = ys[3];
    geo.kh = ws[2];
    geo.kw = ws[3];
    geo.sh = strides[0];
    geo.sw = strides[1];
    geo.pt = pads[0];
    geo.pl = pads[1];
    if (ws[1] != geo.ic || !DirectConv8::applies(geo)) return std::nullopt;
    const bool has_bias = node.inputs.size() > 2 && !node.inputs[2].empty();
    if (has_bias && g_.constant(node.inputs[2])->dtype() != DType::kFloat32) return std::nullopt;
    // The kernel's form of a post-op chain: its ReLUs and sum in order, or nullopt.
    auto kernel_steps = [](const dnnl::post_ops& post) {
      std::vector<DirectConv8::Post> out;
      for (int i = 0; i < post.len(); ++i) {
        if (post.kind(i) == dnnl::primitive::kind::sum) {
          out.push_back(DirectConv8::Post::kSum);
          continue;
        }
        if (post.kind(i) != dnnl::primitive::kind::eltwise) return std::optional<decltype(out)>();
        float scale = 0, alpha = 0, beta = 0;
        Alg alg;
        post.get_params_eltwise(i, scale, alg, alpha, beta);
        if (alg != Alg::eltwise_relu || alpha != 0.0f || scale != 1.0f)
          return std::optional<decltype(out)>();
        out.push_back(DirectConv8::Post::kRelu);
      }
      return std::optional<decltype(out)>(out);
    };
    // The whole chain oneDNN would fuse, or not taken (a Swish or clip after it would
    // otherwise run as a pass of its own).
    std::string v = node.outputs[0], residual;
    dnnl::post_ops post;
    auto steps = absorb_post_ops(m, &v, &post, &residual, 4, false);
    if (!steps.ok() || !kernel_steps(post)) return std::nullopt;
    v = node.outputs[0];
    residual.clear();
    post = dnnl::post_ops();
    if (*steps > 0) {
      auto s = absorb_post_ops(m, &v, &post, &residual, *steps, true);
      if (!s.ok()) return s.status();
    }
    auto chain = kernel_steps(post);
    if (!chain) return errors::Internal("Conv post-ops changed between trial and commit");
    auto kernel_state = std::make_shared<DirectConv8>(
        geo, w.data<float>(), has_bias ? g_.constant(node.inputs[2])->data<float>() : nullptr,
        *chain);
    out_->weight_bytes_ += kernel_state->weight_bytes();
    const memory::desc src_md(dims_of(xs_n), DT::f32, Tag::aBcd8b);
    const memory::desc dst_md(dims_of(ys), DT::f32, Tag::aBcd8b);
    auto src = value_in(node.inputs[0], src_md);
    if (!src.ok()) return src.status();
    std::vector<int> srcs = {*src};
    if (!residual.empty()) {
      auto r = value_in(residual, dst_md);
      if (!r.ok()) return r.status();
      srcs.push_back(*r);
    }
    const int dst = add_arena(dst_md);
    const bool with_residual = !residual.empty();
    add_custom_op([kernel_state, with_residual](const void* const* x, void* y) {
                    kernel_state->run(static_cast<const float*>(x[0]),
                                      with_residual ? static_cast<const float*>(x[1]) : nullptr,
                                      static_cast<float*>(y));
                  },
                  std::move(srcs), dst, "conv",
                  fmt::format("mb{}_ic{}oc{}_ih{}oh{}kh{}sh{}dh0ph{}_iw{}ow{}kw{}sw{}dw0pw{}", geo.n,
                              geo.ic, geo.oc, geo.h, geo.oh, geo.kh, geo.sh, geo.pt, geo.w,
                              geo.ow, geo.kw, geo.sw, geo.pl));
    value_slot_[v] = dst;
    return OkStatus();
  }

  // The convolution `m` writing `v` (its output, or its post-ops' last) with `post`.
  Result<dnnl::convolution_forward::primitive_desc> conv_pd(size_t m, const std::string& v,
                                                            const dnnl::post_ops& post) {
    const Node& node = *g_.nodes[r_.members[m]];
    NodeAttrs a(node);
    const Shape& xs_n = type(node.inputs[0]).shape;  // 3-D (1-D conv) or 4-D
    const Shape xs = act4(xs_n);
    const HostTensor& w = *g_.constant(node.inputs[1]);
    const Shape ws_n = w.shape();
    const Shape ws = act4(ws_n);
    const int64_t oc = ws[0];
    TD_ASSIGN_OR_RETURN(int64_t group, a.attr_int("group", 1));
    const bool has_bias = node.inputs.size() > 2 && !node.inputs[2].empty();
    std::vector<int64_t> strides, dilations, pads;
    TD_RETURN_IF_ERROR(conv_geometry(node, &strides, &dilations, &pads));

    const Shape ys = act4(type(v).shape);
    const size_t nd = xs.size();  // 4, or 5 (a 3-D convolution)
    memory::dims wdims = grouped_weight_dims(ws, group);
    // Activations: oneDNN's choice, or nChw16c when the region is "blocked16" (see
    // choose_layout); a first layer with fewer than 16 channels reads its input as is.
    Tag src_tag = blocked16_ && xs[1] % 16 == 0 ? tag_nd(Tag::aBcd16b, nd) : Tag::any;
    Tag dst_tag = blocked16_ ? tag_nd(Tag::aBcd16b, nd) : Tag::any;
    // Grouped (not depthwise) convolutions: channels-last. oneDNN's own choice for them is
    // nChw8c on AVX-512, a layout its binary kernels lack (the squeeze-excitation Mul after
    // them ran on the reference kernel) and the 1x1 convolutions around them do not use (a
    // reorder in and out of each); its JIT kernels run them channels-last at the same speed.
    // Where oneDNN's convolutions are blocked (AVX2: nChw8c), the grouped ones take that
    // layout when each group's channels fill whole blocks (the fallback below catches a
    // reference kernel).
    const bool grouped = group > 1 && !(oc == group && xs[1] == group);
    const Tag native = native_conv_tag();
    const int64_t blk = channel_block(native);
    if (!blocked16_ && grouped)
      src_tag = dst_tag = tag_nd(
          blk > 1 && (xs[1] / group) % blk == 0 && (oc / group) % blk == 0 ? native : Tag::acdb,
          nd);
    const memory::desc src_any(dims_of(xs), DT::f32, src_tag);
    const memory::desc wei_any(wdims, DT::f32, Tag::any);
    const memory::desc bias_md({oc}, DT::f32, Tag::a);
    const memory::desc dst_any(dims_of(ys), DT::f32, dst_tag);
    const size_t nsp = strides.size();  // 2, or 3
    const memory::dims st(strides.begin(), strides.end());
    memory::dims dl, pl, pr;
    for (size_t i = 0; i < nsp; ++i) {
      dl.push_back(dilations[i] - 1);
      pl.push_back(pads[i]);
      pr.push_back(pads[nsp + i]);
    }
    dnnl::primitive_attr attr = region_attr();
    attr.set_post_ops(post);
    auto make_pd = [&](const memory::desc& src_md, const memory::desc& dst_md) {
      auto desc = has_bias ? dnnl::convolution_forward::desc(
                                 dnnl::prop_kind::forward_inference, Alg::convolution_direct,
                                 src_md, wei_any, bias_md, dst_md, st, dl, pl, pr)
                           : dnnl::convolution_forward::desc(
                                 dnnl::prop_kind::forward_inference, Alg::convolution_direct,
                                 src_md, wei_any, dst_md, st, dl, pl, pr);
      return dnnl::convolution_forward::primitive_desc(desc, attr, cpu_engine());
    };
    // A first layer (few input channels) on the region's plain input: oneDNN's direct kernel
    // reads NCHW as is and writes nChw16c, instead of a reorder of the input to channels-last.
    // Taken when that writes fewer bytes than the reorder would copy, or none: with 16 output
    // channels nChw16c is channels-last (same_bytes).
    std::optional<dnnl::convolution_forward::primitive_desc> direct;
    // Where the region's layout is blocked (AVX2: nChw8c), the direct kernel writes it
    // whatever the channels.
    if (reads_plain_input(node.inputs[0]) && !blocked16_ && group == 1 && xs[1] < 16 &&
        (native != Tag::acdb || oc == 16 || oc * shape_numel(ys) / ys[1] < shape_numel(xs))) {
      try {
        direct = make_pd(memory::desc(dims_of(xs), DT::f32, tag_nd(Tag::abcd, nd)),
                         memory::desc(dims_of(ys), DT::f32,
                                      tag_nd(native == Tag::acdb ? Tag::aBcd16b : native, nd)));
        const std::string impl = direct->impl_info_str();
        if (impl.find("ref") != std::string::npos || impl.find("gemm") != std::string::npos)
          direct.reset();
      } catch (const dnnl::error&) {
        direct.reset();
      }
    }
    dnnl::convolution_forward::primitive_desc pd = direct ? *direct : make_pd(src_any, dst_any);
    if (is_reference(pd.impl_info_str())) {
      // oneDNN 2.6's blocked direct kernel lacks some post-op chains (ReLU + sum + ReLU, a
      // residual block's: a dilated Conv1d stack ran in ref:any at 300x); its channels-last
      // kernels (brgconv) take them, and a layout of its own choice may.
      for (Tag t : {tag_nd(Tag::acdb, nd), Tag::any}) {
        try {
          auto alt = make_pd(memory::desc(dims_of(xs), DT::f32, t),
                             memory::desc(dims_of(ys), DT::f32, t));
          if (!is_reference(alt.impl_info_str())) {
            pd = alt;
            break;
          }
        } catch (const dnnl::error&) {
        }
      }
    }
    if (auto phased = phase_conv_pd(node, pd, strides, dilations, pads, group, has_bias, attr))
      pd = *phased;
    return pd;
  }

  // A dilated 1-D convolution as an undilated 2-D one over the input's phases, when oneDNN has
  // only its gemm or reference kernel for the dilated form (AVX2's direct kernels take no
  // dilation: a TCN's dilated Conv1d ran at half the speed of the same convolution undilated).
  // With dilation d, output w = j * d + p reads inputs (j + t) * d + p: viewed as [N, C, W / d,
  // d], the input is an H x W image whose column p is phase p, and the convolution is a k x 1
  // one down the columns, undilated; its output, [N, C', W' / d, d], is the dilated output's
  // bytes. Plain and channel-blocked layouts keep W innermost, so neither view moves a byte
  // (add_conv reads and writes them as views). Needs stride 1 and W and both pads multiples
  // of d. The primitive's descs then have the phase dims (add_conv tells the form by them).
  std::optional<dnnl::convolution_forward::primitive_desc> phase_conv_pd(
      const Node& node, const dnnl::convolution_forward::primitive_desc& pd,
      const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
      const std::vector<int64_t>& pads, int64_t group, bool has_bias,
      const dnnl::primitive_attr& attr) {
    const std::string impl = pd.impl_info_str();
    if (!is_reference(impl) && impl.find("gemm") == std::string::npos) return std::nullopt;
    if (std::getenv("TENSORD_NO_PHASE_CONV")) return std::nullopt;
    const Shape xs = act4(type(node.inputs[0]).shape);
    const Shape ys = act4(type(node.outputs[0]).shape);
    const Shape ws = act4(g_.constant(node.inputs[1])->shape());
    const int64_t d = dilations[1];
    if (type(node.inputs[0]).shape.size() != 3 || xs[2] != 1 || ws[2] != 1 || d < 2 ||
        strides[1] != 1 || xs[3] % d != 0 || pads[1] % d != 0 || pads[3] % d != 0 ||
        ys[3] % d != 0)
      return std::nullopt;
    const int64_t oc = ws[0];
    const memory::dims xv = {xs[0], xs[1], xs[3] / d, d}, yv = {ys[0], ys[1], ys[3] / d, d};
    memory::dims wv = {ws[0], ws[1], ws[3], 1};
    if (group > 1) wv = {group, oc / group, ws[1], ws[3], 1};
    const Tag native = native_conv_tag();
    const Tag tag = blocked16_ ? Tag::aBcd16b : native == Tag::acdb ? Tag::any : native;
    // Below a dilation of 8 the phase image is narrower than the direct kernels' register
    // blocking (d = 2: 1.09 ms a call against 0.38 undilated, TCN on AVX2): the phases go to
    // the batch instead ([N * d, C, 1, W / d], a reorder in and out; add_conv).
    const char* form = std::getenv("TENSORD_PHASE_CONV");
    const bool batched = form ? std::string(form) == "batch" : d < 8;
    try {
      memory::desc src(xv, DT::f32, tag), dst(yv, DT::f32, tag);
      if (batched) {
        src = memory::desc({xs[0] * d, xs[1], 1, xs[3] / d}, DT::f32, tag);
        dst = memory::desc({ys[0] * d, ys[1], 1, ys[3] / d}, DT::f32, tag);
        wv = group > 1 ? memory::dims{group, oc / group, ws[1], 1, ws[3]}
                       : memory::dims{ws[0], ws[1], 1, ws[3]};
      }
      const memory::desc wei(wv, DT::f32, Tag::any), bias({oc}, DT::f32, Tag::a);
      const memory::dims st = {1, 1}, dl = {0, 0};
      const memory::dims pl = batched ? memory::dims{0, pads[1] / d} : memory::dims{pads[1] / d, 0};
      const memory::dims pr = batched ? memory::dims{0, pads[3] / d} : memory::dims{pads[3] / d, 0};
      auto desc = has_bias ? dnnl::convolution_forward::desc(
                                 dnnl::prop_kind::forward_inference, Alg::convolution_direct, src,
                                 wei, bias, dst, st, dl, pl, pr)
                           : dnnl::convolution_forward::desc(
                                 dnnl::prop_kind::forward_inference, Alg::convolution_direct, src,
                                 wei, dst, st, dl, pl, pr);
      dnnl::convolution_forward::primitive_desc alt(desc, attr, cpu_engine());
      const std::string alt_impl = alt.impl_info_str();
      if (is_reference(alt_impl) || alt_impl.find("gemm") != std::string::npos) return std::nullopt;
      // The views must be the natural value's bytes (reshape throws where they are not).
      if (!batched) {
        (void)alt.src_desc().reshape(dims_of(xs));
        (void)alt.dst_desc().reshape(dims_of(ys));
      } else if (alt.src_desc().data.format_kind != dnnl_blocked ||
                 alt.dst_desc().data.format_kind != dnnl_blocked) {
        return std::nullopt;
      }
      return alt;
    } catch (const dnnl::error&) {
      return std::nullopt;
    }
  }

  // Adds convolution `m` as primitive `pd` writing `v`, accumulating into `residual` when
  // its post-ops hold a sum.
  Status add_conv(size_t m, const std::string& v, const std::string& residual,
                  const dnnl::convolution_forward::primitive_desc& pd) {
    const Node& node = *g_.nodes[r_.members[m]];
    const HostTensor& w = *g_.constant(node.inputs[1]);
    const Shape ws = act4(w.shape());
    const int64_t oc = ws[0];
    TD_ASSIGN_OR_RETURN(int64_t group, NodeAttrs(node).attr_int("group", 1));
    memory::dims wdims = grouped_weight_dims(ws, group);
    const memory::desc bias_md({oc}, DT::f32, Tag::a);
    std::vector<float> bias(static_cast<size_t>(oc), 0.0f);
    const bool has_bias = node.inputs.size() > 2 && !node.inputs[2].empty();
    if (has_bias) {
      const HostTensor* b = g_.constant(node.inputs[2]);
      std::copy(b->data<float>(), b->data<float>() + oc, bias.begin());
    }

    // The phase form (phase_conv_pd): its descs view the natural value's bytes.
    // The batch-phase form: the phases of the value are the primitive's batch; its operand and
    // result are arena copies, reordered in and out through phase_split_view.
    const Shape xs = act4(type(node.inputs[0]).shape);
    const Shape ys = act4(type(node.outputs[0]).shape);
    const bool batched = pd.src_desc().dims()[0] != xs[0];
    const bool phased = !batched && pd.src_desc().dims() != dims_of(xs);
    const int64_t d = batched ? pd.src_desc().dims()[0] / xs[0] : 1;
    const Tag natural = blocked16_ ? Tag::aBcd16b : native_conv_tag() == Tag::acdb
                                                        ? Tag::acdb
                                                        : native_conv_tag();
    const memory::desc src_md = phased    ? pd.src_desc().reshape(dims_of(xs))
                                : batched ? memory::desc(dims_of(xs), DT::f32, natural)
                                          : pd.src_desc();
    const memory::desc dst_md = phased    ? pd.dst_desc().reshape(dims_of(ys))
                                : batched ? memory::desc(dims_of(ys), DT::f32, natural)
                                          : pd.dst_desc();
    // [.., k, 1] or [.., 1, k]: the same bytes as the ONNX weights' [.., 1, k]
    if (phased || batched) wdims = pd.weights_desc().dims();
    TD_ASSIGN_OR_RETURN(int src, value_in(node.inputs[0], src_md));
    if (phased) src = op_view(src, pd.src_desc());
    if (batched) {
      const int in = add_arena(pd.src_desc());
      add_reorder(op_view(src, phase_split_view(src_md, xs[0], d, false)),
                  op_view(in, phase_split_view(pd.src_desc(), xs[0], d, true)), "phase reorder");
      src = in;
    }
    const memory::desc wplain = plain(Shape(wdims.begin(), wdims.end()));  // goi.. / oi..
    const int wei = add_weights(wplain, w.data<float>(), pd.weights_desc());
    int dst;
    if (!residual.empty()) {
      // Accumulate into the residual's bytes when nothing reads it afterwards; else a copy.
      TD_ASSIGN_OR_RETURN(int rs, value(residual));
      const auto& rslot = out_->slots_[static_cast<size_t>(rs)];
      const auto& ruses = uses_[residual];
      // Not when the Conv reads the residual itself (y = conv(a) + a): accumulating into a
      // while the Conv still reads it gives wrong sums.
      const bool last_use = !region_outputs_.count(residual) &&
                            std::all_of(ruses.begin(), ruses.end(), [&](size_t u) {
                              return fused_members_.count(u) || u < m;
                            });
      // Not into bytes other values view (a channel Slice of the residual).
      if (rslot.kind == SlotKind::kArena && rslot.md == dst_md && last_use &&
          !viewed_storages_.count(rslot.index)) {
        dst = alias_arena(rs, dst_md);
      } else {
        dst = add_arena(dst_md);
        add_reorder(rs, dst);
      }
    } else {
      dst = add_arena(dst_md);
    }
    int dst_arg = phased ? op_view(dst, pd.dst_desc()) : dst;
    if (batched) {
      dst_arg = add_arena(pd.dst_desc());
      if (!residual.empty())  // the sum post-op adds to what the result's bytes hold
        add_reorder(op_view(dst, phase_split_view(dst_md, ys[0], d, false)),
                    op_view(dst_arg, phase_split_view(pd.dst_desc(), ys[0], d, true)),
                    "phase reorder");
    }
    std::unordered_map<int, int> args = {
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst_arg}};
    if (has_bias) args[DNNL_ARG_BIAS] = add_owned(bias_md, bias.data());
    add_op(dnnl::convolution_forward(pd), std::move(args), phased || batched ? "phase conv" : "conv");
    if (batched)
      add_reorder(op_view(dst_arg, phase_split_view(pd.dst_desc(), ys[0], d, true)),
                  op_view(dst, phase_split_view(dst_md, ys[0], d, false)), "phase reorder");
    value_slot_[v] = dst;
    return OkStatus();
  }

  // Gemm/MatMul by constant weights as a oneDNN inner product; fed by a Flatten of a 4-D value,
  // it reads that value in its own layout (weights viewed as [N, C, H, W]).
  Status compile_dense(size_t m) {
    const Node& node = *g_.nodes[r_.members[m]];
    TD_ASSIGN_OR_RETURN(DenseParams p, dense_params(node, g_));
    const std::string& a = node.inputs[0];
    auto flat = flattened_.find(a);
    memory::dims src_dims, wei_dims;
    std::string src_value = a;
    if (flat != flattened_.end()) {
      const Shape& xs = type(flat->second).shape;
      src_value = flat->second;
      src_dims = dims_of(xs);
      wei_dims = {p.n, xs[1], xs[2], xs[3]};
    } else {
      src_dims = dims_of(type(a).shape);
      wei_dims = {p.n, p.k};
    }
    // Activations read only by this product's result: its post-ops.
    std::string v = node.outputs[0];
    dnnl::post_ops post;
    TD_RETURN_IF_ERROR(absorb_post_ops(m, &v, &post, nullptr).status());
    static const bool no_split = std::getenv("TENSORD_NO_DOT_SPLIT") != nullptr;
    if (!no_split && src_dims[0] >= kSplitDotMinRows && p.k >= kSplitDotMin &&
        p.k % kDotChunk == 0) {
      TD_ASSIGN_OR_RETURN(bool done, compile_dense_split(p, src_value, src_dims, post, v));
      if (done) return OkStatus();
    }
    const memory::desc src_any(src_dims, DT::f32, Tag::any);
    const memory::desc wei_any(wei_dims, DT::f32, Tag::any);
    const memory::desc dst_any(dims_of(type(node.outputs[0]).shape), DT::f32, Tag::any);
    const memory::desc bias_md({p.n}, DT::f32, Tag::a);
    const bool has_bias = !p.bias.empty();
    auto desc = has_bias ? dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_inference,
                                                             src_any, wei_any, bias_md, dst_any)
                         : dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_inference,
                                                             src_any, wei_any, dst_any);
    dnnl::primitive_attr attr = region_attr();
    attr.set_post_ops(post);
    dnnl::inner_product_forward::primitive_desc pd(desc, attr, cpu_engine());
    TD_ASSIGN_OR_RETURN(int src, value_in(src_value, pd.src_desc()));
    const memory::desc wplain(wei_dims, DT::f32, wei_dims.size() == 4 ? Tag::abcd : Tag::ab);
    const int wei = add_weights(wplain, p.weights.data(), pd.weights_desc());
    const int dst = add_arena(pd.dst_desc());
    std::unordered_map<int, int> args = {
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
    if (has_bias) args[DNNL_ARG_BIAS] = add_owned(bias_md, p.bias.data());
    add_op(dnnl::inner_product_forward(pd), std::move(args), "inner_product");
    value_slot_[v] = dst;
    return OkStatus();
  }

  // A long dot product (K >= kSplitDotMin) as K / kDotChunk partial products, one per chunk
  // of kDotChunk, summed after: a batched matmul [S, M, Kc] x [S, Kc, N] -> [S, M, N], then
  // ones[1, S] x that [S, M * N] (a second matmul: the sum, with the bias and post-ops). One
  // fp32 chain of 2,048 terms (ResNet-50's classifier, inputs all >= 0 after ReLU) drifts by
  // ~1e-5 of logits of ~8, beyond plaidbench's atol 1e-6 on logits near zero; chains of 128
  // drift ~5x less (ONNX Runtime's MLAS is as accurate). false: oneDNN has only its
  // reference kernels for these shapes; the one inner product then.
  Result<bool> compile_dense_split(const DenseParams& p, const std::string& src_value,
                                   const memory::dims& src_dims, const dnnl::post_ops& post,
                                   const std::string& v) {
    const int64_t rows = src_dims[0], s = p.k / kDotChunk, n = p.n, kc = kDotChunk;
    const memory::desc chunks_md({s, rows, kc}, DT::f32, Tag::abc);
    const memory::desc part_md({s, rows, n}, DT::f32, Tag::abc);
    const memory::desc ones_md({1, s}, DT::f32, Tag::ab);
    const memory::desc sum_src_md({s, rows * n}, DT::f32, Tag::ab);
    const memory::desc sum_md({1, rows * n}, DT::f32, Tag::ab);
    const bool has_bias = !p.bias.empty();
    std::optional<dnnl::matmul::primitive_desc> mm, sum;
    try {
      mm.emplace(dnnl::matmul::desc(chunks_md, memory::desc({s, kc, n}, DT::f32, Tag::any),
                                    part_md),
                 region_attr(), cpu_engine());
      dnnl::primitive_attr attr = region_attr();
      attr.set_post_ops(post);
      sum.emplace(has_bias ? dnnl::matmul::desc(ones_md, sum_src_md, sum_md, sum_md)
                           : dnnl::matmul::desc(ones_md, sum_src_md, sum_md),
                  attr, cpu_engine());
    } catch (const dnnl::error&) {
      return false;
    }
    if (is_reference(mm->impl_info_str()) || is_reference(sum->impl_info_str())) return false;
    // The input, plain (row-major [M, K]; a flattened N x C x H x W value as NCHW), as
    // [S, M, Kc]: one reorder, none for a single row.
    const memory::desc plain(src_dims, DT::f32, src_dims.size() == 4 ? Tag::abcd : Tag::ab);
    TD_ASSIGN_OR_RETURN(int src, value_in(src_value, plain));
    const memory::desc rows_md({rows, s, kc}, DT::f32, Tag::abc);
    TD_ASSIGN_OR_RETURN(int chunks, view_of(src, rows == 1 ? chunks_md : rows_md));
    if (rows > 1) {
      const int dst = add_arena(memory::desc({rows, s, kc}, DT::f32, Tag::bac));
      add_reorder(chunks, dst);
      TD_ASSIGN_OR_RETURN(chunks, view_of(dst, chunks_md));
    }
    const memory::desc wei_plain({s, kc, n}, DT::f32, memory::dims{kc, 1, p.k});
    const int wei = add_weights(wei_plain, p.weights.data(), mm->weights_desc());
    const int part = add_arena(part_md);
    add_op(dnnl::matmul(*mm), {{DNNL_ARG_SRC, chunks}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, part}},
           "matmul");
    const std::vector<float> ones(static_cast<size_t>(s), 1.f);
    TD_ASSIGN_OR_RETURN(int part_view, view_of(part, sum_src_md));
    const int out = add_arena(sum_md);
    std::unordered_map<int, int> args = {{DNNL_ARG_SRC, add_owned(ones_md, ones.data())},
                                         {DNNL_ARG_WEIGHTS, part_view},
                                         {DNNL_ARG_DST, out}};
    if (has_bias) {  // the bias of each row, added after the sum
      std::vector<float> bias;
      for (int64_t r = 0; r < rows; ++r) bias.insert(bias.end(), p.bias.begin(), p.bias.end());
      args[DNNL_ARG_BIAS] = add_owned(sum_md, bias.data());
    }
    add_op(dnnl::matmul(*sum), std::move(args), "matmul");
    TD_ASSIGN_OR_RETURN(int y, view_of(out, memory::desc({rows, n}, DT::f32, Tag::ab)));
    value_slot_[v] = y;
    return true;
  }

  // A pooling whose input is in a layout oneDNN pools only with its generic loop (a plain NCHW
  // region input: "simple_nchw", 5-10x its JIT kernels; MaxViT's downsampling pools on AVX2)
  // reads a reordered copy in channels-last or the channel-blocked layout instead, the first
  // with a JIT kernel. make_pd(src_md) builds the pooling for an input layout.
  template <typename MakePd>
  dnnl::pooling_v2_forward::primitive_desc pool_with_fast_kernel(
      dnnl::pooling_v2_forward::primitive_desc pd, const Shape& xs, MakePd&& make_pd) {
    if (!is_slow_pooling(pd.impl_info_str()) || (xs.size() != 4 && xs.size() != 5)) return pd;
    for (Tag t : {Tag::acdb, blocked16_ ? Tag::aBcd16b : Tag::aBcd8b}) {
      try {
        auto alt = make_pd(memory::desc(dims_of(xs), DT::f32, tag_nd(t, xs.size())));
        if (!is_slow_pooling(alt.impl_info_str())) return alt;
      } catch (const dnnl::error&) {
      }
    }
    return pd;
  }

  Status compile_global_pool(const std::string& in, const std::string& out) {
    const Shape xs = act4(type(in).shape);
    TD_ASSIGN_OR_RETURN(int src, value(in));
    const memory::desc src_md = out_->slots_[static_cast<size_t>(src)].md;
    const memory::desc dst_any({xs[0], xs[1], 1, 1}, DT::f32, Tag::any);
    auto make_pd = [&](const memory::desc& md) {
      dnnl::pooling_v2_forward::desc desc(dnnl::prop_kind::forward_inference,
                                          Alg::pooling_avg_exclude_padding, md, dst_any, {1, 1},
                                          {xs[2], xs[3]}, {0, 0}, {0, 0}, {0, 0});
      return dnnl::pooling_v2_forward::primitive_desc(desc, region_attr(), cpu_engine());
    };
    dnnl::pooling_v2_forward::primitive_desc pd = make_pd(src_md);
    pd = pool_with_fast_kernel(pd, xs, make_pd);
    TD_ASSIGN_OR_RETURN(src, value_in(in, pd.src_desc()));
    const int dst = add_arena(pd.dst_desc());
    add_op(dnnl::pooling_v2_forward(pd), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}, "pool");
    value_slot_[out] = dst;
    return OkStatus();
  }

  Status compile_pool(const Node& node) {
    NodeAttrs a(node);
    const Shape& xs_n = type(node.inputs[0]).shape;  // 3-D (1-D pooling), 4-D or 5-D
    const Shape xs = act4(xs_n);
    const Shape ys = act4(type(node.outputs[0]).shape);
    const size_t nsp = xs.size() - 2;  // spatial axes: 2, or 3
    const bool global = node.op.rfind("Global", 0) == 0;
    const bool max = node.op.find("Max") != std::string::npos;
    memory::dims kernel(xs.begin() + 2, xs.end()), strides(nsp, 1), dil(nsp, 0), pl(nsp, 0),
        pr(nsp, 0);
    Alg alg = max ? Alg::pooling_max : Alg::pooling_avg_exclude_padding;
    std::vector<int64_t> onnx_pads(2 * nsp, 0);  // before each axis, then after, as given
    if (!global) {
      TD_ASSIGN_OR_RETURN(std::vector<int64_t> k, a.attr_ints("kernel_shape"));
      std::vector<int64_t> st, dl, pads;
      Shape out_spatial;
      TD_RETURN_IF_ERROR(nn::window_geometry(a, Shape(xs_n.begin() + 2, xs_n.end()), k, true,
                                             &st, &dl, &pads, &out_spatial));
      if (k.size() == 1) {  // 1-D: H = 1
        k = {1, k[0]};
        st = {1, st[0]};
        dl = {1, dl[0]};
        pads = {0, pads[0], 0, pads[1]};
      }
      if (k.size() != nsp) return errors::Internal("{}: kernel rank", node.op);
      TD_ASSIGN_OR_RETURN(int64_t incl, a.attr_int("count_include_pad", 0));
      if (!max && incl) alg = Alg::pooling_avg_include_padding;
      kernel.assign(k.begin(), k.end());
      strides.assign(st.begin(), st.end());
      onnx_pads = pads;
      for (size_t d = 0; d < nsp; ++d) {
        dil[d] = dl[d] - 1;
        pl[d] = pads[d];
        // ceil_mode: extend the end padding so oneDNN's floor division gives ONNX's size.
        const int64_t eff = (k[d] - 1) * dl[d] + 1;
        const int64_t need = (ys[2 + d] - 1) * st[d] + eff - xs[2 + d] - pads[d];
        pr[d] = std::max(pads[d + nsp], need);
        if (pads[d] < 0 || pr[d] < 0 || pads[d] >= eff || pr[d] >= eff)
          return errors::Unimplemented("{}: padding not supported by oneDNN", node.op);
      }
    }
    TD_ASSIGN_OR_RETURN(int src, value(node.inputs[0]));
    const memory::desc src_md = out_->slots_[static_cast<size_t>(src)].md;
    // nChw8c (a convolution's output on AVX2): tensord's loop (blocked_pool.h), a third of
    // oneDNN's AVX2 pooling time. TENSORD_NO_OWN_POOL=1 keeps oneDNN's (to compare).
    static const bool no_own_pool = std::getenv("TENSORD_NO_OWN_POOL") != nullptr;
    const memory::desc blocked8(dims_of(xs), DT::f32, tag_nd(Tag::aBcd8b, xs.size()));
    if (!no_own_pool && !blocked16_ && native_conv_tag() == Tag::aBcd8b && src_md == blocked8 &&
        (node.outputs.size() == 1 || node.outputs[1].empty())) {
      // 2-D as a 3-D pooling of depth 1 (its defaults).
      const size_t z = nsp == 3 ? 1 : 0;  // the first H/W axis
      BlockedPool::Geometry geo;
      geo.n = xs[0];
      geo.c = xs[1];
      if (nsp == 3) {
        geo.d = xs[2];
        geo.od = ys[2];
        geo.kd = kernel[0];
        geo.sd = strides[0];
        geo.dd = dil[0] + 1;
        geo.pf = onnx_pads[0];
        geo.pk = onnx_pads[nsp];
      }
      geo.h = xs[2 + z];
      geo.w = xs[3 + z];
      geo.oh = ys[2 + z];
      geo.ow = ys[3 + z];
      geo.kh = kernel[z];
      geo.kw = kernel[z + 1];
      geo.sh = strides[z];
      geo.sw = strides[z + 1];
      geo.dh = dil[z] + 1;
      geo.dw = dil[z + 1] + 1;
      geo.pt = onnx_pads[z];
      geo.pl = onnx_pads[z + 1];
      geo.pb = onnx_pads[nsp + z];
      geo.pr = onnx_pads[nsp + z + 1];
      const BlockedPool::Kind kind = max ? BlockedPool::Kind::kMax
                                     : alg == Alg::pooling_avg_include_padding
                                         ? BlockedPool::Kind::kAverageIncludePad
                                         : BlockedPool::Kind::kAverageExcludePad;
      auto pool = std::make_shared<BlockedPool>(geo, kind);
      const int dst = add_arena(memory::desc(dims_of(ys), DT::f32, tag_nd(Tag::aBcd8b, ys.size())));
      add_custom_op([pool](const void* const* x, void* y) {
                      pool->run(static_cast<const float*>(x[0]), static_cast<float*>(y));
                    },
                    {src}, dst, "pool");
      value_slot_[node.outputs[0]] = dst;
      return OkStatus();
    }
    const memory::desc dst_any(dims_of(ys), DT::f32, Tag::any);
    auto make_pd = [&](const memory::desc& in) {
      dnnl::pooling_v2_forward::desc desc(dnnl::prop_kind::forward_inference, alg, in, dst_any,
                                          strides, kernel, dil, pl, pr);
      return dnnl::pooling_v2_forward::primitive_desc(desc, region_attr(), cpu_engine());
    };
    dnnl::pooling_v2_forward::primitive_desc pd = make_pd(src_md);
    pd = pool_with_fast_kernel(pd, xs, make_pd);
    TD_ASSIGN_OR_RETURN(src, value_in(node.inputs[0], pd.src_desc()));
    const int dst = add_arena(pd.dst_desc());
    add_op(dnnl::pooling_v2_forward(pd), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}, "pool");
    value_slot_[node.outputs[0]] = dst;
    return OkStatus();
  }

  // x * Sigmoid(x) (SiLU): when `x` is read only by a Sigmoid and by a Mul of x and that
  // Sigmoid's output (its only reader), the members of the Sigmoid and of the Mul.
  std::optional<std::pair<size_t, size_t>> swish_of(const std::string& x) {
    if (region_outputs_.count(x)) return std::nullopt;
    auto it = uses_.find(x);
    if (it == uses_.end() || it->second.size() != 2) return std::nullopt;
    for (int k = 0; k < 2; ++k) {
      const size_t sm = it->second[static_cast<size_t>(k)];
      const size_t mm = it->second[static_cast<size_t>(1 - k)];
      const Node& sig = *g_.nodes[r_.members[sm]];
      const Node& mul = *g_.nodes[r_.members[mm]];
      if (sig.op != "Sigmoid" || sig.inputs[0] != x || mul.op != "Mul") continue;
      auto c = sole_consumer(sig.outputs[0]);
      if (!c || *c != mm || mul.inputs.size() != 2) continue;
      const bool pair = (mul.inputs[0] == x && mul.inputs[1] == sig.outputs[0]) ||
                        (mul.inputs[1] == x && mul.inputs[0] == sig.outputs[0]);
      if (pair && sm < mm) return std::make_pair(sm, mm);
    }
    return std::nullopt;
  }

  // Div(x, s) -> Round -> Clip(lo, hi) -> Mul(., s), each result read only by the next, s, lo
  // and hi one-value float constants, every node a member: a quantize-dequantize pair as the
  // qdq canonical form writes it. The members after the Div, and the constants.
  struct FakeQuant {
    std::vector<size_t> members;
    float s, lo, hi;
  };
  std::optional<FakeQuant> fake_quant_chain(size_t m) {
    auto one = [&](const std::string& v) -> std::optional<float> {
      const HostTensor* c = v.empty() ? nullptr : g_.constant(v);
      if (!c || c->dtype() != DType::kFloat32 || c->numel() != 1) return std::nullopt;
      return c->data<float>()[0];
    };
    const Node& div = *g_.nodes[r_.members[m]];
    if (div.inputs.size() != 2 || div.outputs.size() != 1) return std::nullopt;
    const auto s = one(div.inputs[1]);
    if (!s || !(*s > 0) || type(div.inputs[0]).shape != type(div.outputs[0]).shape)
      return std::nullopt;
    FakeQuant fq{{}, *s, -FLT_MAX, FLT_MAX};
    std::string v = div.outputs[0];
    for (const char* op : {"Round", "Clip", "Mul"}) {
      auto next = sole_consumer(v);
      if (!next) return std::nullopt;
      const Node& n = *g_.nodes[r_.members[*next]];
      if (n.op != op || !n.domain.empty() || n.outputs.size() != 1) return std::nullopt;
      if (n.op == std::string("Clip")) {
        if (n.inputs.size() != 3 || n.inputs[0] != v) return std::nullopt;
        const auto lo = one(n.inputs[1]), hi = one(n.inputs[2]);
        if (!lo || !hi) return std::nullopt;
        fq.lo = *lo;
        fq.hi = *hi;
      } else if (n.op == std::string("Mul")) {
        if (n.inputs.size() != 2) return std::nullopt;
        const std::string& other = n.inputs[0] == v ? n.inputs[1] : n.inputs[0];
        const auto s2 = one(other);
        if (!s2 || *s2 != *s) return std::nullopt;
      } else if (n.inputs.size() != 1) {
        return std::nullopt;
      }
      fq.members.push_back(*next);
      v = n.outputs[0];
    }
    return fq;
  }

  Status compile_fake_quant(size_t m, const FakeQuant& fq) {
    const Node& div = *g_.nodes[r_.members[m]];
    TD_ASSIGN_OR_RETURN(int src, value(div.inputs[0]));
    const memory::desc md = out_->slots_[static_cast<size_t>(src)].md;
    const int dst = add_arena(md);
    const int64_t n = static_cast<int64_t>(md.get_size() / sizeof(float));
    const float s = fq.s, lo = fq.lo, hi = fq.hi;
    add_custom_op(
        [n, s, lo, hi](const void* const* x, void* y) {
          const auto* in = static_cast<const float*>(x[0]);
          auto* out = static_cast<float*>(y);
          constexpr int64_t kChunk = 1 << 15;
          if (n < 2 * kChunk) return fake_quant(in, out, n, s, lo, hi);
          ThreadPool::get().parallel_for((n + kChunk - 1) / kChunk, 1, [&](int64_t c0, int64_t c1) {
            const int64_t b = c0 * kChunk, e = std::min(n, c1 * kChunk);
            fake_quant(in + b, out + b, e - b, s, lo, hi);
          });
        },
        {src}, dst, "quantize-dequantize");
    for (size_t f : fq.members) fused_members_.insert(f);
    out_->fused_ += static_cast<int>(fq.members.size());
    value_slot_[g_.nodes[r_.members[fq.members.back()]]->outputs[0]] = dst;
    return OkStatus();
  }

  Status compile_eltwise(const Node& node) {
    TD_ASSIGN_OR_RETURN(auto steps, eltwise_steps(node, g_));
    std::string out_name = node.outputs[0];
    if (node.op == "Sigmoid") {
      if (auto sw = swish_of(node.inputs[0]); sw && &*g_.nodes[r_.members[sw->first]] == &node) {
        steps = {{Alg::eltwise_swish, 1.0f, 0.0f}};
        fused_members_.insert(sw->second);
        out_->fused_++;
        out_name = g_.nodes[r_.members[sw->second]]->outputs[0];
      }
    }
    TD_ASSIGN_OR_RETURN(int src, value(node.inputs[0]));
    const Shape& xs = type(node.inputs[0]).shape;
    if (xs.size() == 2 && out_->slots_[static_cast<size_t>(src)].md.dims().size() != 2) {
      // A 2-D region input is held as [1, 1, M, N] (padded4): the same bytes as [M, N].
      TD_ASSIGN_OR_RETURN(src, view_of(src, plain(xs)));
    }
    const memory::desc md = out_->slots_[static_cast<size_t>(src)].md;
    dnnl::primitive_attr attr = region_attr();
    dnnl::post_ops post;
    for (size_t i = 1; i < steps.size(); ++i)
      post.append_eltwise(1.0f, steps[i].alg, steps[i].alpha, steps[i].beta);
    attr.set_post_ops(post);
    dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference, steps[0].alg, md,
                                     steps[0].alpha, steps[0].beta);
    dnnl::eltwise_forward::primitive_desc pd(desc, attr, cpu_engine());
    if (is_reference(pd.impl_info_str()) && (md.dims().size() == 4 || md.dims().size() == 5)) {
      // A blocked layout with padded channels (nChw8c of 12 channels, AVX2) has only oneDNN's
      // reference eltwise: it runs channels-last (dense) instead, after a reorder.
      const memory::desc dense(md.dims(), DT::f32, tag_nd(Tag::acdb, md.dims().size()));
      dnnl::eltwise_forward::desc d2(dnnl::prop_kind::forward_inference, steps[0].alg, dense,
                                     steps[0].alpha, steps[0].beta);
      dnnl::eltwise_forward::primitive_desc alt(d2, attr, cpu_engine());
      if (!is_reference(alt.impl_info_str())) {
        TD_ASSIGN_OR_RETURN(src, value_in(node.inputs[0], dense));
        pd = alt;
      }
    }
    const int dst = add_arena(pd.dst_desc());
    add_op(dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}, "eltwise");
    value_slot_[out_name] = dst;
    return OkStatus();
  }

  Status compile_binary(const Node& node) {
    const Shape& ys = type(node.outputs[0]).shape;
    std::string full = node.inputs[0], other = node.inputs[1];
    if (type(full).shape != ys) std::swap(full, other);  // commutative (checked by eligible)
    TD_ASSIGN_OR_RETURN(int s0, value(full));
    const memory::desc md0 = out_->slots_[static_cast<size_t>(s0)].md;
    int s1;
    memory::desc md1;
    if (type(other).shape == ys) {
      TD_ASSIGN_OR_RETURN(s1, value_in(other, md0));
      md1 = md0;
    } else {
      const Shape v1 = view4(type(other).shape, ys.size());
      md1 = same_format(md0, dims_of(v1)).value_or(plain(v1));
      const HostTensor* c = g_.constant(other);
      if (c && c->dtype() == DType::kFloat32) {
        s1 = add_weights(plain(v1), c->data(), md1);  // in md0's format once, now
      } else {
        TD_ASSIGN_OR_RETURN(s1, value_in(other, md1));
      }
    }
    dnnl::binary::desc desc(binary_alg(node.op), md0, md1, md0);
    dnnl::binary::primitive_desc pd(desc, region_attr(), cpu_engine());
    const int dst = add_arena(pd.dst_desc());
    add_op(dnnl::binary(pd), {{DNNL_ARG_SRC_0, s0}, {DNNL_ARG_SRC_1, s1}, {DNNL_ARG_DST, dst}},
           "binary");
    value_slot_[node.outputs[0]] = dst;
    return OkStatus();
  }

  Status compile_concat(const Node& node) {
    std::vector<memory::desc> srcs;
    std::vector<int> slots;
    for (const auto& in : node.inputs) {
      TD_ASSIGN_OR_RETURN(int s, value(in));
      slots.push_back(s);
      srcs.push_back(out_->slots_[static_cast<size_t>(s)].md);
    }
    dnnl::concat::primitive_desc pd(1, srcs, cpu_engine(), region_attr());
    if (is_reference(pd.impl_info_str()) && srcs[0].data.ndims >= 3) {
      // Sources in different layouts (an Inception block's branches: convolutions in one,
      // a pool in another) get oneDNN's reference concat, element by element (Inception v3
      // spent most of its region time there). Every source reordered into one layout (the
      // blocked one where all channel counts allow, else channels-last) takes its simple
      // concat: a copy of contiguous blocks.
      const int nd = srcs[0].data.ndims;
      bool by16 = true;
      for (const auto& md : srcs) by16 = by16 && md.data.dims[1] % 16 == 0;
      std::vector<Tag> tags;
      if (by16) tags.push_back(nd == 3 ? Tag::aBc16b : nd == 4 ? Tag::aBcd16b : Tag::aBcde16b);
      tags.push_back(nd == 3 ? Tag::acb : nd == 4 ? Tag::acdb : Tag::acdeb);
      for (Tag t : tags) {
        if (nd > 5) break;
        std::vector<memory::desc> same;
        for (const auto& md : srcs) same.emplace_back(md.dims(), DT::f32, t);
        try {
          dnnl::concat::primitive_desc alt(1, same, cpu_engine(), region_attr());
          if (is_reference(alt.impl_info_str())) continue;
          for (size_t i = 0; i < slots.size(); ++i) {
            TD_ASSIGN_OR_RETURN(int r, value_in(node.inputs[i], same[i]));
            slots[i] = r;
          }
          pd = alt;
          break;
        } catch (const dnnl::error&) {
        }
      }
    }
    const int dst = add_arena(pd.dst_desc());
    static const bool copies = !std::getenv("TENSORD_NO_CONCAT_COPY");
    if (const auto chunks = copies ? contiguous_chunks(srcs_of(slots), pd.dst_desc())
                                   : std::nullopt) {
      // Each source is one run of bytes per batch entry, and so is its place in the result:
      // copies of whole runs (oneDNN 2.6's "simple" concat moved SqueezeNet's 1.5 MB at 1.3
      // GB/s, 30% of its time on Zen 3).
      add_custom_op([c = *chunks](const void* const* x, void* y) { c.run(x, y); }, slots, dst,
                    "concat");
    } else {
      std::unordered_map<int, int> args = {{DNNL_ARG_DST, dst}};
      for (size_t i = 0; i < slots.size(); ++i)
        args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)] = slots[i];
      add_op(dnnl::concat(pd), std::move(args), "concat");
    }
    value_slot_[node.outputs[0]] = dst;
    return OkStatus();
  }

  std::vector<memory::desc> srcs_of(const std::vector<int>& slots) const {
    std::vector<memory::desc> mds;
    for (int s : slots) mds.push_back(out_->slots_[static_cast<size_t>(s)].md);
    return mds;
  }

  // (TENSORD_NO_CONCAT_COPY: never, for comparisons.)
  // A concat along axis 1 whose sources and result are all dense in one layout with the
  // channels outermost after the batch (plain, or channel-blocked with every source's channels
  // a multiple of the block): per batch entry, source i is one run of bytes that lands whole
  // at its channel offset.
  struct ConcatChunks {
    int64_t batch = 0, dst_run = 0;       // floats per batch entry of the result
    std::vector<int64_t> runs, offsets;   // per source: floats per batch entry, offset in dst
    void run(const void* const* x, void* y) const {
      float* out = static_cast<float*>(y);
      for (int64_t n = 0; n < batch; ++n)
        for (size_t i = 0; i < runs.size(); ++i)
          if (runs[i] > 0)  // (an empty source may have no address at all)
            std::memcpy(out + n * dst_run + offsets[i],
                        static_cast<const float*>(x[i]) + n * runs[i],
                        static_cast<size_t>(runs[i]) * sizeof(float));
    }
  };
  static std::optional<ConcatChunks> contiguous_chunks(const std::vector<memory::desc>& srcs,
                                                       const memory::desc& dst) {
    const int nd = dst.data.ndims;
    if (nd < 3 || nd > 5 || srcs.size() > kMaxCustomSources) return std::nullopt;
    const memory::dims dd = dst.dims();
    const Tag plain = nd == 3 ? Tag::abc : nd == 4 ? Tag::abcd : Tag::abcde;
    const Tag b8 = nd == 3 ? Tag::aBc8b : nd == 4 ? Tag::aBcd8b : Tag::aBcde8b;
    const Tag b16 = nd == 3 ? Tag::aBc16b : nd == 4 ? Tag::aBcd16b : Tag::aBcde16b;
    for (const auto& [tag, block] : {std::pair{plain, 1}, std::pair{b8, 8}, std::pair{b16, 16}}) {
      if (dst != memory::desc(dd, DT::f32, tag) || dd[1] % block) continue;
      bool all = true;
      for (const auto& md : srcs)
        all = all && md.dims()[1] % block == 0 && md == memory::desc(md.dims(), DT::f32, tag);
      if (!all) continue;
      int64_t spatial = 1;
      for (int a = 2; a < nd; ++a) spatial *= dd[static_cast<size_t>(a)];
      ConcatChunks c;
      c.batch = dd[0];
      c.dst_run = dd[1] * spatial;
      int64_t at = 0;
      for (const auto& md : srcs) {
        c.runs.push_back(md.dims()[1] * spatial);
        c.offsets.push_back(at);
        at += md.dims()[1] * spatial;
      }
      return c;
    }
    return std::nullopt;
  }

  // Offsets in one arena: largest first, lowest offset not overlapping any placed storage
  // whose lifetime intersects.
  void plan_memory() {
    auto& st = out_->storages_;
    std::vector<size_t> order(st.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return st[a].bytes > st[b].bytes; });
    std::vector<size_t> placed;
    size_t peak = 0;
    for (size_t i : order) {
      std::vector<std::pair<size_t, size_t>> busy;  // [begin, end) of conflicting storages
      for (size_t j : placed)
        if (st[j].first <= st[i].last && st[i].first <= st[j].last)
          busy.emplace_back(st[j].offset, st[j].offset + st[j].bytes);
      std::sort(busy.begin(), busy.end());
      size_t off = 0;
      for (const auto& [b, e] : busy) {
        if (off + st[i].bytes <= b) break;
        off = std::max(off, e);
      }
      st[i].offset = off;
      peak = std::max(peak, off + st[i].bytes);
      placed.push_back(i);
    }
    out_->arena_bytes_ = static_cast<int64_t>(peak);
  }

  // Primitives created while a SerialScope(serial = true) lives get one thread (oneDNN fixes a
  // primitive's thread count when it is created, from omp_get_max_threads(): TeamLimit) and are marked
  // serial, so run_host runs them with one thread too.
  class SerialScope {
   public:
    SerialScope(RegionCompiler& c, bool serial) : c_(c), limit_(serial ? 1 : 0) {
      c_.serial_ = serial;
    }
    ~SerialScope() { c_.serial_ = false; }
    SerialScope(const SerialScope&) = delete;
    SerialScope& operator=(const SerialScope&) = delete;

   private:
    RegionCompiler& c_;
    TeamLimit limit_;
  };

  // A node's work: multiply-adds for a convolution or an inner product, window reads for a
  // pooling, the elements read and written for the ops that touch each once (element-wise,
  // normalisation, concat, copies, global pools); below serial_work_limit() it runs on one
  // thread. An op with no rule here counts as unbounded (the team): the cost of a team on
  // small work is a fork and join, the cost of one thread on large work was a VAE decoder's
  // deconvolutions at half speed (they fell through to "elements moved").
  double node_work(const Node& n) {
    double out = 0, in = 0;
    for (const auto& o : n.outputs)
      if (!o.empty() && g_.type_of(o)) out += static_cast<double>(shape_numel(type(o).shape));
    for (const auto& i : n.inputs)
      if (!i.empty() && g_.type_of(i) && !g_.constant(i))
        in += static_cast<double>(shape_numel(type(i).shape));
    if ((n.op == "Conv" || n.op == "Gemm" || n.op == "MatMul") && n.inputs.size() > 1 &&
        !n.outputs.empty() && g_.type_of(n.outputs[0])) {
      const HostTensor* w = g_.constant(n.inputs[1]);
      const Shape& ys = type(n.outputs[0]).shape;
      // Each output reads C/group x kernel weights (Conv) or K of them (Gemm, MatMul).
      const int64_t per = n.op == "Conv" ? (w && !w->shape().empty() ? w->shape()[0] : 0)
                                         : (ys.empty() ? 0 : ys.back());
      if (w && per > 0) return out * static_cast<double>(shape_numel(w->shape()) / per);
    }
    // ConvTranspose (W [C, M/group, k...]): each input value meets M/group x kernel weights.
    // (Counted as elements moved, a VAE decoder's stride-2 deconvolutions of 38 M
    // multiply-adds each ran on one thread.)
    if (n.op == "ConvTranspose" && n.inputs.size() > 1 && g_.type_of(n.inputs[0])) {
      const HostTensor* w = g_.constant(n.inputs[1]);
      if (w && !w->shape().empty() && w->shape()[0] > 0)
        return static_cast<double>(shape_numel(type(n.inputs[0]).shape)) *
               static_cast<double>(shape_numel(w->shape()) / w->shape()[0]);
    }
    // MaxPool / AveragePool: each output reads its window.
    if (n.op == "MaxPool" || n.op == "AveragePool") {
      auto k = NodeAttrs(n).attr_ints("kernel_shape");
      double window = 1;
      if (k.ok())
        for (int64_t v : *k) window *= static_cast<double>(std::max<int64_t>(v, 1));
      return out * window + in;
    }
    static const std::unordered_set<std::string> kTouchOnce = {
        "Flatten", "Reshape", "Transpose", "Slice", "Concat", "Pad", "ReduceMean",
        "GlobalAveragePool", "GlobalMaxPool", "BatchNormalization"};
    if (kTouchOnce.count(n.op) || is_unary_eltwise(n.op) || is_binary(n.op)) return in + out;
    return std::numeric_limits<double>::infinity();
  }

  const FusionGraph& g_;
  const FusedGroup& r_;
  std::unique_ptr<DnnlRegion> out_;
  bool serial_ = false;  // primitives being created are serial (SerialScope)
  std::unordered_map<std::string, std::vector<size_t>> uses_;
  std::unordered_map<std::string, size_t> producer_;
  std::unordered_set<std::string> region_outputs_;
  std::unordered_map<std::string, int> value_slot_;
  std::unordered_map<std::string, std::vector<int>> reordered_;  // other layouts of a value
  std::set<size_t> fused_members_;
  std::unordered_map<std::string, std::string> flattened_;  // Flatten output -> its 4-D input
  bool blocked16_ = false;  // convolutions keep activations in nChw16c (choose_layout)
  std::unordered_map<std::string, int64_t> shuffle_groups_;  // channel shuffle views
  std::unordered_map<std::string, TensorType> internal_types_;  // values only the region has
  std::set<int> viewed_storages_;  // arena storages other slots view (Slice): never in place
};

// ---- partitioning ----

std::string region_key(const FusionGraph& g, size_t i) {
  const Node& node = *g.nodes[i];
  if (!eligible(node, g)) return "";
  // BatchNormalization (the engine folded those it could into the Conv before them:
  // engine/canonicalize.h's bnfold): a oneDNN scale-shift with the running statistics, and a
  // ReLU after it fused, e.g. DenseNet's BN+ReLU before each Conv.
  return "onednn";
}

}  // namespace


std::vector<FusedGroup> build_onednn_regions(const FusionGraph& g,
                                             std::vector<std::string>* notes) {
  std::vector<FusedGroup> regions = partition_graph(
      g, [&](size_t i, const std::vector<int>&) { return region_key(g, i); });
  std::vector<FusedGroup> compiled;
  for (auto& r : regions) {
    bool has_conv = false;
    for (size_t m : r.members)
      has_conv |= g.nodes[m]->op == "Conv" || g.nodes[m]->op == "ConvTranspose";
    if (!has_conv) continue;  // blocked layouts only pay off around convolutions
    if (r.outputs.empty()) continue;  // nothing leaves it: dead code, let the executor skip it
    Result<std::unique_ptr<FusedKernel>> k = errors::Internal("not compiled");
    try {
      RegionCompiler compiler(g, r);
      k = compiler.compile();
    } catch (const dnnl::error& e) {
      k = errors::Unimplemented("oneDNN refused the region: {}", e.what());
    }
    if (!k.ok()) {
      if (notes) notes->push_back(k.status().message());
      continue;
    }
    r.kernel = std::move(*k);
    compiled.push_back(std::move(r));
  }
  return compiled;
}

}  // namespace tensord::cpu
