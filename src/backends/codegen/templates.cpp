#include "backends/codegen/templates.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "backends/codegen/kernel_ir.h"
#include "backends/codegen/template_util.h"
#include "core/errors.h"
#include "core/node_attrs.h"
#include "core/op_registry.h"
#include "core/ops/op_helpers.h"

namespace tensord::codegen {

namespace tmpl {

std::string C(int64_t v) { return "((i64)" + std::to_string(v) + ")"; }

std::string flit(double value) {
  const float f = static_cast<float>(value);
  if (std::isnan(f)) return "NAN";
  if (std::isinf(f)) return f > 0 ? "INFINITY" : "(-INFINITY)";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "(%af)", static_cast<double>(f));
  return buf;
}

int64_t prod(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t k = from; k < to && k < s.size(); ++k) p *= s[k];
  return p;
}
int64_t prod(const Shape& s) { return prod(s, 0, s.size()); }


// Kernel shape, strides, dilations and pads of a Conv or pool over `in` (spatial dims) with
// output `out` (spatial dims): pads from auto_pad or the pads attribute.
Result<Window> window(const Node& node, const Shape& in, const Shape& out,
                      std::vector<int64_t> kernel) {
  NodeAttrs a(node);
  Window w;
  w.rank = in.size();
  if (kernel.empty()) {
    TD_ASSIGN_OR_RETURN(kernel, a.attr_ints("kernel_shape", {}));
  }
  if (kernel.size() != w.rank || out.size() != w.rank)
    return errors::InvalidArgument("{}: kernel of rank {} over {} spatial dims", node.label(),
                                   kernel.size(), w.rank);
  w.kernel = kernel;
  TD_ASSIGN_OR_RETURN(w.strides, a.attr_ints("strides", std::vector<int64_t>(w.rank, 1)));
  TD_ASSIGN_OR_RETURN(w.dilations, a.attr_ints("dilations", std::vector<int64_t>(w.rank, 1)));
  TD_ASSIGN_OR_RETURN(std::vector<int64_t> pads,
                      a.attr_ints("pads", std::vector<int64_t>(2 * w.rank, 0)));
  TD_ASSIGN_OR_RETURN(std::string auto_pad, a.attr_string("auto_pad", "NOTSET"));
  if (w.strides.size() != w.rank || w.dilations.size() != w.rank || pads.size() != 2 * w.rank)
    return errors::InvalidArgument("{}: strides/dilations/pads do not match {} spatial dims",
                                   node.label(), w.rank);
  for (size_t d = 0; d < w.rank; ++d) {
    if (w.strides[d] <= 0 || w.dilations[d] <= 0 || w.kernel[d] <= 0)
      return errors::InvalidArgument("{}: non-positive kernel, stride or dilation", node.label());
    const int64_t keff = (w.kernel[d] - 1) * w.dilations[d] + 1;
    int64_t b = pads[d], e = pads[d + w.rank];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t total = std::max<int64_t>(0, (out[d] - 1) * w.strides[d] + keff - in[d]);
      b = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      e = total - b;
    } else if (auto_pad == "VALID") {
      b = e = 0;
    }
    w.pad_begin.push_back(b);
    w.pad_end.push_back(e);
  }
  return w;
}

Shape spatial(const Shape& s) { return Shape(s.begin() + std::min<size_t>(2, s.size()), s.end()); }

}  // namespace tmpl

using namespace tmpl;

namespace {

// ---- source helpers ----




// Row-major strides of a shape, in elements.
std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

// Declares p0..p{rank-1}: the coordinates of row-major index `idx` over `dims`.
std::string decompose(const std::string& idx, const Shape& dims, const std::string& p) {
  std::string s = "i64 " + p + "_r = " + idx + ";\n";
  for (size_t d = dims.size(); d-- > 0;) {
    if (d == 0) {
      s += fmt::format("i64 {}{} = {}_r;\n", p, d, p);
    } else {
      s += fmt::format("i64 {}{} = {}_r % {}; {}_r /= {};\n", p, d, p, C(dims[d]), p, C(dims[d]));
    }
  }
  return s;
}

// The storage type of a tensor element: arithmetic types for the dtypes computed in, bit
// patterns for data movement.
Result<std::string> bits_type(DType t) {
  switch (dtype_size(t)) {
    case 1: return std::string("uchar");
    case 2: return std::string("ushort");
    case 4: return std::string("uint");
    case 8: return std::string("u64");
    default: return errors::Unimplemented("generated kernels: elements of {} bytes", dtype_size(t));
  }
}
Result<std::string> arith_type(DType t) {
  switch (t) {
    case DType::kFloat32: return std::string("float");
    case DType::kInt32: return std::string("int");
    case DType::kInt64: return std::string("i64");
    case DType::kFloat64: return std::string("double");
    default: return errors::Unimplemented("generated kernels: arithmetic on {}", dtype_name(t));
  }
}

std::vector<int64_t> ints_of(const HostTensor& t) {
  std::vector<int64_t> v;
  for (double d : t.to_double_vector()) v.push_back(static_cast<int64_t>(d));
  return v;
}

const std::set<std::string>& template_ops() {
  static const std::set<std::string> s = {
      "MatMul", "Gemm", "Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool",
      "GlobalMaxPool", "Softmax", "LogSoftmax", "Hardmax", "LayerNormalization",
      "BatchNormalization", "InstanceNormalization", "Concat", "Split", "Gather", "GatherElements",
      "Pad", "Tile", "ArgMax", "ArgMin", "CumSum", "NegativeLogLikelihoodLoss",
      "SoftmaxCrossEntropyLoss", "Trilu", "Dropout", "Resize", "EyeLike", "OneHot", "GatherND",
      "ScatterElements", "Scatter", "ScatterND", "Range", "DepthToSpace", "SpaceToDepth", "LRN",
      "ReverseSequence", "GridSample", "HannWindow", "HammingWindow", "BlackmanWindow", "ConstantOfShape",
      "DequantizeLinear", "TopK"};
  return s;
}

int64_t int_attr(const Node& node, const std::string& name) {
  auto r = NodeAttrs(node).attr_int(name, 0);
  return r.ok() ? *r : 0;
}

Result<std::string> c_type(DType t);
bool is_half_dtype(DType t);
std::string load_expr(DType t, const std::string& e);
std::string store_expr(DType t, const std::string& e);

bool is_f32(const TensorType& t) { return t.defined() && t.dtype == DType::kFloat32; }

// ---- window geometry (Conv, pools; Window and window() in template_util.h) ----

// Nested loops over the window of output position o0..o{R-1}: `lo`/`hi` bound the input
// coordinate i_d (skipped outside); `inner` runs with i0.. and k0.. declared.
std::string window_loops(const Window& w, const Shape& in, bool padded_bounds,
                         const std::string& inner) {
  std::string s;
  for (size_t d = 0; d < w.rank; ++d) {
    const int64_t lo = padded_bounds ? -w.pad_begin[d] : 0;
    const int64_t hi = padded_bounds ? in[d] + w.pad_end[d] : in[d];
    s += fmt::format(
        "for (i64 k{0} = 0; k{0} < {1}; ++k{0}) {{\n i64 i{0} = o{0} * {2} - {3} + k{0} * {4};\n"
        " if (i{0} < {5} || i{0} >= {6}) continue;\n",
        d, C(w.kernel[d]), C(w.strides[d]), C(w.pad_begin[d]), C(w.dilations[d]), C(lo), C(hi));
  }
  s += inner;
  for (size_t d = 0; d < w.rank; ++d) s += "}\n";
  return s;
}

// Flat offset expressions over spatial coordinates.
std::string flat(const std::string& p, const Shape& dims) {
  const auto st = strides_of(dims);
  std::string s = "0";
  for (size_t d = 0; d < dims.size(); ++d) s += fmt::format(" + {}{} * {}", p, d, C(st[d]));
  return "(" + s + ")";
}

std::string all_inside(const std::string& p, const Shape& dims) {
  std::string s = "1";
  for (size_t d = 0; d < dims.size(); ++d)
    s += fmt::format(" && {0}{1} >= 0 && {0}{1} < {2}", p, d, C(dims[d]));
  return "(" + s + ")";
}


// ---- plans ----

Result<OpPlan> plan_matmul(const OpCall& c) {
  Shape a = c.inputs[0].shape, b = c.inputs[1].shape;
  const Shape& o = c.outputs[0].shape;
  if (a.empty() || b.empty()) return errors::InvalidArgument("{}: MatMul of a scalar", c.node->label());
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  const int64_t M = a[a.size() - 2], K = a.back(), N = b.back();
  if (b[b.size() - 2] != K)
    return errors::InvalidArgument("{}: MatMul inner dims differ ({} and {})", c.node->label(), K,
                                   b[b.size() - 2]);
  const Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  const size_t rank = std::max(ab.size(), bb.size());
  Shape batch(rank, 1);
  for (size_t k = 0; k < rank; ++k) {
    const int64_t x = k + ab.size() >= rank ? ab[k + ab.size() - rank] : 1;
    const int64_t y = k + bb.size() >= rank ? bb[k + bb.size() - rank] : 1;
    if (x != y && x != 1 && y != 1)
      return errors::InvalidArgument("{}: batch dims do not broadcast", c.node->label());
    batch[k] = std::max(x, y);
  }
  if (prod(batch) * M * N != prod(o))
    return errors::Internal("{}: MatMul output {} does not fit", c.node->label(), shape_to_string(o));
  TD_ASSIGN_OR_RETURN(auto sa, broadcast_strides(ab, batch));
  TD_ASSIGN_OR_RETURN(auto sb, broadcast_strides(bb, batch));
  OpPlan p;
  p.inputs = {0, 1};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_matmul";
  k.in_types = {"float", "float"};
  k.out_types = {"float"};
  k.n = prod(o);
  std::string s = fmt::format("i64 n_ = gid % {0}; i64 t_ = gid / {0}; i64 m_ = t_ % {1}; i64 bt = t_ / {1};\n",
                              C(N), C(M));
  s += decompose("bt", batch, "b");
  std::string ao = "0", bo = "0";
  for (size_t d = 0; d < rank; ++d) {
    ao += fmt::format(" + b{} * {}", d, C(sa[d] * M * K));
    bo += fmt::format(" + b{} * {}", d, C(sb[d] * K * N));
  }
  s += fmt::format(
      "GLOBAL const float* ap = in0 + ({}) + m_ * {};\nGLOBAL const float* bp = in1 + ({}) + n_;\n"
      "float acc = 0.0f;\nfor (i64 k = 0; k < {}; ++k) acc += ap[k] * bp[k * {}];\nout0[gid] = acc;\n",
      ao, C(K), bo, C(K), C(N));
  k.body = s;
  return p;
}

Result<OpPlan> plan_gemm(const OpCall& c) {
  NodeAttrs at(*c.node);
  TD_ASSIGN_OR_RETURN(int64_t ta, at.attr_int("transA", 0));
  TD_ASSIGN_OR_RETURN(int64_t tb, at.attr_int("transB", 0));
  TD_ASSIGN_OR_RETURN(float alpha, at.attr_float("alpha", 1.0f));
  TD_ASSIGN_OR_RETURN(float beta, at.attr_float("beta", 1.0f));
  const Shape& a = c.inputs[0].shape;
  const Shape& b = c.inputs[1].shape;
  if (a.size() != 2 || b.size() != 2) return errors::InvalidArgument("{}: Gemm of rank != 2", c.node->label());
  const int64_t M = ta ? a[1] : a[0], K = ta ? a[0] : a[1];
  const int64_t N = tb ? b[0] : b[1], K2 = tb ? b[1] : b[0];
  if (K != K2 || prod(c.outputs[0].shape) != M * N)
    return errors::InvalidArgument("{}: Gemm shapes do not fit", c.node->label());
  OpPlan p;
  p.inputs = {0, 1};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_gemm";
  k.in_types = {"float", "float"};
  k.out_types = {"float"};
  k.n = M * N;
  std::string s = fmt::format("i64 n_ = gid % {0}; i64 m_ = gid / {0};\nfloat acc = 0.0f;\n", C(N));
  const std::string ai = ta ? fmt::format("k * {} + m_", C(M)) : fmt::format("m_ * {} + k", C(K));
  const std::string bi = tb ? fmt::format("n_ * {} + k", C(K)) : fmt::format("k * {} + n_", C(N));
  s += fmt::format("for (i64 k = 0; k < {}; ++k) acc += in0[{}] * in1[{}];\n", C(K), ai, bi);
  s += fmt::format("float y = {} * acc;\n", flit(alpha));
  if (c.inputs.size() > 2 && c.inputs[2].defined() && beta != 0.0f) {
    TD_ASSIGN_OR_RETURN(auto cs, broadcast_strides(c.inputs[2].shape, {M, N}));
    p.inputs.push_back(2);
    k.in_types.push_back("float");
    s += fmt::format("y += {} * in2[m_ * {} + n_ * {}];\n", flit(beta), C(cs[0]), C(cs[1]));
  }
  s += "out0[gid] = y;\n";
  k.body = s;
  return p;
}

Result<OpPlan> plan_conv(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  const Shape& wt = c.inputs[1].shape;
  const Shape& o = c.outputs[0].shape;
  if (x.size() < 3 || wt.size() != x.size() || o.size() != x.size())
    return errors::InvalidArgument("{}: Conv ranks differ", c.node->label());
  TD_ASSIGN_OR_RETURN(int64_t G, at.attr_int("group", 1));
  const int64_t Cin = x[1], M = wt[0], CG = wt[1];
  if (G <= 0 || CG * G != Cin || M % G != 0 || o[1] != M)
    return errors::InvalidArgument("{}: Conv channels and groups do not fit", c.node->label());
  const Shape ks = spatial(wt);
  TD_ASSIGN_OR_RETURN(Window w, window(*c.node, spatial(x), spatial(o), ks));
  const Shape in = spatial(x);
  OpPlan p;
  p.inputs = {0, 1};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_conv";
  k.in_types = {"float", "float"};
  k.out_types = {"float"};
  k.n = prod(o);
  const bool bias = c.inputs.size() > 2 && c.inputs[2].defined();
  if (bias) {
    if (prod(c.inputs[2].shape) != M) return errors::InvalidArgument("{}: bias size", c.node->label());
    p.inputs.push_back(2);
    k.in_types.push_back("float");
  }
  std::string s = decompose("gid", o, "q");
  for (size_t d = 0; d < w.rank; ++d) s += fmt::format("i64 o{} = q{};\n", d, d + 2);
  s += fmt::format("i64 g_ = q1 / {};\nfloat acc = {};\n", C(M / G), bias ? "in2[q1]" : "0.0f");
  s += fmt::format(
      "for (i64 ci = 0; ci < {0}; ++ci) {{\nGLOBAL const float* xp = in0 + (q0 * {1} + g_ * {0} + ci) * {2};\n"
      "GLOBAL const float* wp = in1 + (q1 * {0} + ci) * {3};\n",
      C(CG), C(Cin), C(prod(in)), C(prod(ks)));
  s += window_loops(w, in, false, "acc += xp[" + flat("i", in) + "] * wp[" + flat("k", ks) + "];\n");
  s += "}\nout0[gid] = acc;\n";
  k.body = s;
  return p;
}

Result<OpPlan> plan_conv_transpose(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  const Shape& wt = c.inputs[1].shape;
  const Shape& o = c.outputs[0].shape;
  if (x.size() < 3 || wt.size() != x.size() || o.size() != x.size())
    return errors::InvalidArgument("{}: ConvTranspose ranks differ", c.node->label());
  TD_ASSIGN_OR_RETURN(int64_t G, at.attr_int("group", 1));
  const int64_t Cin = x[1], MG = wt[1], M = MG * G;
  if (G <= 0 || wt[0] != Cin || Cin % G != 0 || o[1] != M)
    return errors::InvalidArgument("{}: ConvTranspose channels and groups do not fit", c.node->label());
  const size_t R = x.size() - 2;
  const Shape in = spatial(x), out = spatial(o), ks = spatial(wt);
  std::vector<int64_t> strides, dil, pads;
  Shape geo_out;
  TD_RETURN_IF_ERROR(nn::conv_transpose_geometry(at, in, ks, &strides, &dil, &pads, &geo_out));
  if (geo_out != out || strides.size() != R || dil.size() != R || pads.size() != 2 * R)
    return errors::InvalidArgument("{}: ConvTranspose output {} differs from its geometry", c.node->label(),
                                   shape_to_string(o));
  const std::vector<int64_t> pb(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(R));
  OpPlan p;
  p.inputs = {0, 1};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_conv_transpose";
  k.in_types = {"float", "float"};
  k.out_types = {"float"};
  k.n = prod(o);
  const bool bias = c.inputs.size() > 2 && c.inputs[2].defined();
  if (bias) {
    if (prod(c.inputs[2].shape) != M) return errors::InvalidArgument("{}: bias size", c.node->label());
    p.inputs.push_back(2);
    k.in_types.push_back("float");
  }
  std::string s = decompose("gid", o, "q");
  s += fmt::format("i64 g_ = q1 / {0}; i64 mg = q1 % {0};\nfloat acc = {1};\n", C(MG), bias ? "in2[q1]" : "0.0f");
  s += fmt::format(
      "for (i64 ci = 0; ci < {0}; ++ci) {{\ni64 cc = g_ * {0} + ci;\nGLOBAL const float* xp = in0 + (q0 * {1} + cc) * {2};\n"
      "GLOBAL const float* wp = in1 + (cc * {3} + mg) * {4};\n",
      C(Cin / G), C(Cin), C(prod(in)), C(MG), C(prod(ks)));
  for (size_t d = 0; d < R; ++d)
    s += fmt::format(
        "for (i64 k{0} = 0; k{0} < {1}; ++k{0}) {{\n i64 t{0} = q{2} + {3} - k{0} * {4};\n"
        " if (t{0} < 0 || t{0} % {5} != 0) continue;\n i64 i{0} = t{0} / {5};\n if (i{0} >= {6}) continue;\n",
        d, C(ks[d]), d + 2, C(pb[d]), C(dil[d]), C(strides[d]), C(in[d]));
  s += "acc += xp[" + flat("i", in) + "] * wp[" + flat("k", ks) + "];\n";
  for (size_t d = 0; d < R; ++d) s += "}\n";
  s += "}\nout0[gid] = acc;\n";
  k.body = s;
  return p;
}

Result<OpPlan> plan_pool(const OpCall& c) {
  const std::string& op = c.node->op;
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  const Shape& o = c.outputs[0].shape;
  if (x.size() < 3 || o.size() != x.size() || o[0] != x[0] || o[1] != x[1])
    return errors::InvalidArgument("{}: pool shapes do not fit", c.node->label());
  const Shape in = spatial(x);
  OpPlan p;
  p.inputs = {0};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_pool";
  k.in_types = {"float"};
  k.out_types = {"float"};
  if (op == "MaxPool") {
    if (is_half_dtype(c.inputs[0].dtype) || c.inputs[0].dtype == DType::kBool)
      return errors::Unimplemented("{}: MaxPool over {}", c.node->label(), dtype_name(c.inputs[0].dtype));
    TD_ASSIGN_OR_RETURN(std::string T0, c_type(c.inputs[0].dtype));
    k.in_types = {T0};
    k.out_types = {T0};
  }
  k.n = prod(o);
  std::string s = decompose("gid", o, "q");
  s += fmt::format("GLOBAL const {}* xp = in0 + (q0 * {} + q1) * {};\n", op == "MaxPool" ? k.in_types[0] : "float",
                   C(x[1]), C(prod(in)));
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
    const bool mx = op == "GlobalMaxPool";
    s += fmt::format("float acc = {};\nfor (i64 j = 0; j < {}; ++j) {{ float v = xp[j]; {} }}\n",
                     mx ? "-INFINITY" : "0.0f", C(prod(in)),
                     mx ? "if (v > acc || v != v) acc = v;" : "acc += v;");
    s += mx ? "out0[gid] = acc;\n" : fmt::format("out0[gid] = acc / {};\n", flit(static_cast<double>(prod(in))));
    k.body = s;
    return p;
  }
  TD_ASSIGN_OR_RETURN(Window w, window(*c.node, in, spatial(o), {}));
  for (size_t d = 0; d < w.rank; ++d) s += fmt::format("i64 o{} = q{};\n", d, d + 2);
  if (op == "MaxPool") {
    TD_ASSIGN_OR_RETURN(std::string T, c_type(c.inputs[0].dtype));
    if (is_half_dtype(c.inputs[0].dtype) || c.inputs[0].dtype == DType::kBool)
      return errors::Unimplemented("{}: MaxPool over {}", c.node->label(), dtype_name(c.inputs[0].dtype));
    k.in_types = {T};
    k.out_types = {T};
    TD_ASSIGN_OR_RETURN(int64_t order, at.attr_int("storage_order", 0));
    const bool indices = c.outputs.size() > 1 && c.outputs[1].defined();
    if (order != 0 && indices)
      return errors::Unimplemented("{}: MaxPool storage_order=1 indices", c.node->label());
    s += T + " acc = 0; i64 arg = -1;\n";
    s += window_loops(w, in, false,
                      "i64 xi = " + flat("i", in) + "; " + T + " v = xp[xi];\nif (arg < 0 || v > acc) { acc = v; arg = xi; }\n");
    s += "out0[gid] = acc;\n";
    if (indices) {
      p.outputs.push_back(1);
      k.out_types.push_back("i64");
      s += fmt::format("out1[gid] = (q0 * {} + q1) * {} + (arg < 0 ? 0 : arg);\n", C(x[1]), C(prod(in)));
    }
  } else {  // AveragePool
    TD_ASSIGN_OR_RETURN(int64_t include_pad, at.attr_int("count_include_pad", 0));
    s += "float acc = 0.0f; i64 cnt = 0;\n";
    s += window_loops(w, in, include_pad != 0,
                      "cnt++;\nif " + all_inside("i", in) + " acc += xp[" + flat("i", in) + "];\n");
    s += "out0[gid] = cnt > 0 ? acc / (float)cnt : 0.0f;\n";
  }
  k.body = s;
  return p;
}

Result<OpPlan> plan_softmax(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  TD_ASSIGN_OR_RETURN(int64_t axis_attr, at.attr_int("axis", -1));
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(axis_attr, static_cast<int64_t>(x.size())));
  const int64_t outer = prod(x, 0, static_cast<size_t>(axis)), n = x[static_cast<size_t>(axis)];
  const int64_t inner = prod(x, static_cast<size_t>(axis) + 1, x.size());
  // float32, or float16/bfloat16 words computed in float (L: load, S: store).
  const DType dt = c.inputs[0].dtype;
  TD_ASSIGN_OR_RETURN(const std::string T, c_type(dt));
  auto L = [&](const std::string& e) { return load_expr(dt, e); };
  auto S = [&](const std::string& e) { return store_expr(dt, e); };
  const std::string xj = L(fmt::format("xp[j * {}]", C(inner)));
  OpPlan p;
  p.inputs = {0};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_softmax";
  k.in_types = {T};
  k.out_types = {T};
  k.n = n > 0 ? outer * inner : 0;
  std::string s = fmt::format(
      "i64 base = (gid / {0}) * {1} + gid % {0};\nGLOBAL const {3}* xp = in0 + base; GLOBAL {3}* yp = out0 + base;\n"
      "float mx = {4}; i64 arg = 0;\nfor (i64 j = 1; j < {2}; ++j) {{ float v = {5}; if (v > mx) {{ mx = v; arg = j; }} }}\n",
      C(inner), C(n * inner), C(n), T, L("xp[0]"), xj);
  if (c.node->op == "Hardmax") {
    s += fmt::format("for (i64 j = 0; j < {}; ++j) yp[j * {}] = {};\n", C(n), C(inner), S("j == arg ? 1.0f : 0.0f"));
  } else {
    s += fmt::format("float sum = 0.0f;\nfor (i64 j = 0; j < {}; ++j) sum += exp({} - mx);\n", C(n), xj);
    if (c.node->op == "Softmax")
      s += fmt::format("for (i64 j = 0; j < {}; ++j) yp[j * {}] = {};\n", C(n), C(inner), S("exp(" + xj + " - mx) / sum"));
    else
      s += fmt::format("float ls = log(sum);\nfor (i64 j = 0; j < {}; ++j) yp[j * {}] = {};\n", C(n), C(inner),
                       S(xj + " - mx - ls"));
  }
  k.body = s;
  return p;
}

// An index expression for a parameter of shape `ps` broadcast over `norm` (the normalised
// dims) at row position j.
Result<std::string> broadcast_index(const Shape& ps, const Shape& norm, const std::string& j,
                                    std::string* decl, const std::string& name) {
  if (prod(ps) == prod(norm)) return j;
  if (prod(ps) == 1) return std::string("0");
  TD_ASSIGN_OR_RETURN(auto st, broadcast_strides(ps, norm));
  *decl += decompose(j, norm, name);
  std::string e = "0";
  for (size_t d = 0; d < norm.size(); ++d) e += fmt::format(" + {}{} * {}", name, d, C(st[d]));
  return "(" + e + ")";
}

Result<OpPlan> plan_layer_norm(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  TD_ASSIGN_OR_RETURN(int64_t axis_attr, at.attr_int("axis", -1));
  TD_ASSIGN_OR_RETURN(float eps, at.attr_float("epsilon", 1e-5f));
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(axis_attr, static_cast<int64_t>(x.size())));
  const int64_t outer = prod(x, 0, static_cast<size_t>(axis));
  const Shape norm(x.begin() + axis, x.end());
  const int64_t row = prod(norm);
  // X, Scale and B of one dtype: float32, or float16/bfloat16 computed in float.
  const DType dt = c.inputs[0].dtype;
  TD_ASSIGN_OR_RETURN(const std::string T, c_type(dt));
  auto L = [&](const std::string& e) { return load_expr(dt, e); };
  OpPlan p;
  p.inputs = {0, 1};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_layer_norm";
  k.in_types = {T, T};
  k.out_types = {T};
  k.n = row > 0 ? outer : 0;
  std::string decl;
  TD_ASSIGN_OR_RETURN(std::string si, broadcast_index(c.inputs[1].shape, norm, "j", &decl, "s"));
  std::string bias = "";
  if (c.inputs.size() > 2 && c.inputs[2].defined()) {
    TD_ASSIGN_OR_RETURN(std::string bi, broadcast_index(c.inputs[2].shape, norm, "j", &decl, "b"));
    p.inputs.push_back(2);
    k.in_types.push_back(T);
    bias = " + " + L("in2[" + bi + "]");
  }
  std::string s = fmt::format(
      "GLOBAL const {3}* xp = in0 + gid * {0}; GLOBAL {3}* yp = out0 + gid * {0};\n"
      "float mean = 0.0f;\nfor (i64 j = 0; j < {0}; ++j) mean += {4};\nmean /= {1};\n"
      "float var = 0.0f;\nfor (i64 j = 0; j < {0}; ++j) {{ float d = {4} - mean; var += d * d; }}\n"
      "var /= {1};\nfloat inv = 1.0f / sqrt(var + {2});\n",
      C(row), flit(static_cast<double>(row)), flit(eps), T, L("xp[j]"));
  s += fmt::format("for (i64 j = 0; j < {}; ++j) {{\n{}yp[j] = {};\n}}\n", C(row), decl,
                   store_expr(dt, "(" + L("xp[j]") + " - mean) * inv * " + L("in1[" + si + "]") + bias));
  int next = 1;
  for (int out = 1; out <= 2; ++out) {
    if (static_cast<size_t>(out) < c.outputs.size() && c.outputs[static_cast<size_t>(out)].defined()) {
      if (c.outputs[static_cast<size_t>(out)].dtype != DType::kFloat32)
        return errors::Unimplemented("{}: stash type other than float32", c.node->label());
      p.outputs.push_back(out);
      k.out_types.push_back("float");
      s += fmt::format("out{}[gid] = {};\n", next++, out == 1 ? "mean" : "inv");
    }
  }
  k.body = s;
  return p;
}

Result<OpPlan> plan_batch_norm(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  TD_ASSIGN_OR_RETURN(float eps, at.attr_float("epsilon", 1e-5f));
  if (x.size() < 2) return errors::InvalidArgument("{}: rank < 2", c.node->label());
  const int64_t C_ = x[1], inner = prod(x, 2, x.size());
  for (int i = 1; i <= 4; ++i)
    if (prod(c.inputs[static_cast<size_t>(i)].shape) != C_)
      return errors::InvalidArgument("{}: parameter {} is not of size {}", c.node->label(), i, C_);
  OpPlan p;
  p.inputs = {0, 1, 2, 3, 4};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_batch_norm";
  k.in_types.assign(5, "float");
  k.out_types = {"float"};
  k.n = prod(x);
  k.body = fmt::format("i64 ch = (gid / {}) % {};\nout0[gid] = (in0[gid] - in3[ch]) / sqrt(in4[ch] + {}) * in1[ch] + in2[ch];\n",
                       C(inner), C(C_), flit(eps));
  return p;
}

Result<OpPlan> plan_instance_norm(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  TD_ASSIGN_OR_RETURN(float eps, at.attr_float("epsilon", 1e-5f));
  if (x.size() < 2) return errors::InvalidArgument("{}: rank < 2", c.node->label());
  const int64_t C_ = x[1], row = prod(x, 2, x.size());
  if (prod(c.inputs[1].shape) != C_ || prod(c.inputs[2].shape) != C_)
    return errors::InvalidArgument("{}: scale and bias are not of size {}", c.node->label(), C_);
  OpPlan p;
  p.inputs = {0, 1, 2};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_instance_norm";
  k.in_types.assign(3, "float");
  k.out_types = {"float"};
  k.n = row > 0 ? x[0] * C_ : 0;
  k.body = fmt::format(
      "i64 ch = gid % {3};\nGLOBAL const float* xp = in0 + gid * {0}; GLOBAL float* yp = out0 + gid * {0};\n"
      "float mean = 0.0f;\nfor (i64 j = 0; j < {0}; ++j) mean += xp[j];\nmean /= {1};\n"
      "float var = 0.0f;\nfor (i64 j = 0; j < {0}; ++j) {{ float d = xp[j] - mean; var += d * d; }}\n"
      "var /= {1};\nfloat inv = 1.0f / sqrt(var + {2});\n"
      "for (i64 j = 0; j < {0}; ++j) yp[j] = (xp[j] - mean) * inv * in1[ch] + in2[ch];\n",
      C(row), flit(static_cast<double>(row)), flit(eps), C(C_));
  return p;
}

Result<OpPlan> plan_concat(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& o = c.outputs[0].shape;
  TD_ASSIGN_OR_RETURN(int64_t axis_attr, at.attr_int("axis", 0));
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(axis_attr, static_cast<int64_t>(o.size())));
  const size_t ax = static_cast<size_t>(axis);
  const int64_t inner = prod(o, ax + 1, o.size()), A = o[ax];
  TD_ASSIGN_OR_RETURN(std::string T, bits_type(c.outputs[0].dtype));
  OpPlan p;
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_concat";
  k.out_types = {T};
  k.n = prod(o);
  std::string s = fmt::format("i64 i_ = gid % {0}; i64 a_ = (gid / {0}) % {1}; i64 o_ = gid / ({0} * {1});\n",
                              C(inner), C(A));
  int64_t start = 0;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Shape& in = c.inputs[i].shape;
    if (in.size() != o.size()) return errors::InvalidArgument("{}: Concat ranks differ", c.node->label());
    const int64_t ai = in[ax];
    if (prod(in) == 0) continue;
    const int kin = static_cast<int>(p.inputs.size());
    p.inputs.push_back(static_cast<int>(i));
    k.in_types.push_back(T);
    s += fmt::format("{}if (a_ < {}) out0[gid] = in{}[(o_ * {} + a_ - {}) * {} + i_];\n",
                     kin ? "else " : "", C(start + ai), kin, C(ai), C(start), C(inner));
    start += ai;
  }
  if (start != A) return errors::InvalidArgument("{}: Concat sizes do not add up", c.node->label());
  k.body = s;
  return p;
}

Result<OpPlan> plan_split(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  TD_ASSIGN_OR_RETURN(int64_t axis_attr, at.attr_int("axis", 0));
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(axis_attr, static_cast<int64_t>(x.size())));
  const size_t ax = static_cast<size_t>(axis);
  const int64_t inner = prod(x, ax + 1, x.size()), A = x[ax];
  TD_ASSIGN_OR_RETURN(std::string T, bits_type(c.inputs[0].dtype));
  OpPlan p;
  p.inputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_split";
  k.in_types = {T};
  k.n = prod(x);
  std::string s = fmt::format("i64 i_ = gid % {0}; i64 a_ = (gid / {0}) % {1}; i64 o_ = gid / ({0} * {1});\n",
                              C(inner), C(A));
  int64_t start = 0;
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    if (!c.outputs[i].defined()) continue;
    const Shape& os = c.outputs[i].shape;
    if (os.size() != x.size() || !shape_is_static(os))
      return errors::InvalidArgument("{}: Split output shapes unknown", c.node->label());
    const int64_t ai = os[ax];
    if (prod(os) == 0) continue;
    const int kout = static_cast<int>(p.outputs.size());
    p.outputs.push_back(static_cast<int>(i));
    k.out_types.push_back(T);
    s += fmt::format("{}if (a_ >= {} && a_ < {}) out{}[(o_ * {} + a_ - {}) * {} + i_] = in0[gid];\n",
                     kout ? "else " : "", C(start), C(start + ai), kout, C(ai), C(start), C(inner));
    start += ai;
  }
  if (start > A) return errors::InvalidArgument("{}: Split sizes exceed the axis", c.node->label());
  k.body = s;
  return p;
}

Status check_indices(const OpCall& c, size_t input, int64_t dim) {
  const HostTensor* h = input < c.host.size() ? c.host[input] : nullptr;
  if (!h) return errors::Internal("{}: no host copy of the indices", c.node->label());
  TD_ASSIGN_OR_RETURN(auto v, h->to_int64_vector());
  for (int64_t i : v)
    if (i < -dim || i >= dim)
      return errors::InvalidArgument("{}: index {} is out of range [-{}, {}) for an axis of size {}", c.node->label(),
                                     i, dim, dim, dim);
  return OkStatus();
}

Result<OpPlan> plan_gather(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  const Shape& ind = c.inputs[1].shape;
  const bool elements = c.node->op == "GatherElements";
  TD_ASSIGN_OR_RETURN(int64_t axis_attr, at.attr_int("axis", 0));
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(axis_attr, static_cast<int64_t>(x.size())));
  const size_t ax = static_cast<size_t>(axis);
  const int64_t A = x[ax];
  TD_RETURN_IF_ERROR(check_indices(c, 1, A));
  TD_ASSIGN_OR_RETURN(std::string T, bits_type(c.inputs[0].dtype));
  const std::string IT = c.inputs[1].dtype == DType::kInt32 ? "int" : "i64";
  OpPlan p;
  p.inputs = {0, 1};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = elements ? "tensord_gather_elements" : "tensord_gather";
  k.in_types = {T, IT};
  k.out_types = {T};
  k.n = prod(c.outputs[0].shape);
  const std::string fix = fmt::format(
      "i64 idx = (i64)in1[{{}}]; if (idx < 0) idx += {0}; if (idx < 0) idx = 0; if (idx >= {0}) idx = {0} - 1;\n", C(A));
  std::string s;
  if (!elements) {
    const int64_t inner = prod(x, ax + 1, x.size()), NI = prod(ind);
    if (k.n != prod(x, 0, ax) * NI * inner)
      return errors::InvalidArgument("{}: Gather output does not fit", c.node->label());
    s = fmt::format("i64 i_ = gid % {0}; i64 j_ = (gid / {0}) % {1}; i64 o_ = gid / ({0} * {1});\n", C(inner), C(NI));
    s += fmt::format(fmt::runtime(fix), "j_");
    s += fmt::format("out0[gid] = in0[(o_ * {} + idx) * {} + i_];\n", C(A), C(inner));
  } else {
    if (ind.size() != x.size()) return errors::InvalidArgument("{}: ranks differ", c.node->label());
    for (size_t d = 0; d < x.size(); ++d)
      if (d != ax && ind[d] > x[d]) return errors::InvalidArgument("{}: indices larger than data", c.node->label());
    s = decompose("gid", ind, "q");
    s += fmt::format(fmt::runtime(fix), "gid");
    const auto st = strides_of(x);
    std::string e = "0";
    for (size_t d = 0; d < x.size(); ++d) e += fmt::format(" + {} * {}", d == ax ? "idx" : "q" + std::to_string(d), C(st[d]));
    s += "out0[gid] = in0[" + e + "];\n";
  }
  k.body = s;
  return p;
}

Result<OpPlan> plan_pad(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  const Shape& o = c.outputs[0].shape;
  const size_t R = x.size();
  TD_ASSIGN_OR_RETURN(std::string mode, at.attr_string("mode", "constant"));
  std::vector<int64_t> pads;
  double value = 0;
  if (at.has_attr("pads")) {
    TD_ASSIGN_OR_RETURN(pads, at.attr_ints("pads", {}));
    TD_ASSIGN_OR_RETURN(float v, at.attr_float("value", 0.0f));
    value = v;
  } else {
    if (c.host.size() < 2 || !c.host[1]) return errors::Internal("{}: no host copy of pads", c.node->label());
    pads = ints_of(*c.host[1]);
    if (c.host.size() > 2 && c.host[2] && c.host[2]->numel() > 0) value = c.host[2]->to_double_vector()[0];
    if (c.host.size() > 3 && c.host[3]) {
      const auto axes = ints_of(*c.host[3]);
      if (pads.size() != 2 * axes.size()) return errors::InvalidArgument("{}: pads and axes differ", c.node->label());
      std::vector<int64_t> full(2 * R, 0);
      for (size_t i = 0; i < axes.size(); ++i) {
        TD_ASSIGN_OR_RETURN(int64_t a, normalize_axis(axes[i], static_cast<int64_t>(R)));
        full[static_cast<size_t>(a)] = pads[i];
        full[static_cast<size_t>(a) + R] = pads[i + axes.size()];
      }
      pads = full;
    }
  }
  if (pads.size() != 2 * R || o.size() != R) return errors::InvalidArgument("{}: pads do not fit the rank", c.node->label());
  for (size_t d = 0; d < R; ++d)
    if (x[d] + pads[d] + pads[d + R] != o[d]) return errors::InvalidArgument("{}: padded shape differs", c.node->label());
  const DType dt = c.inputs[0].dtype;
  std::string T, lit;
  if (dt == DType::kFloat32) {
    T = "float";
    lit = flit(value);
  } else {
    TD_ASSIGN_OR_RETURN(T, bits_type(dt));
    if (dt != DType::kInt32 && dt != DType::kInt64 && dt != DType::kInt8 && dt != DType::kUInt8 && dt != DType::kBool &&
        value != 0)
      return errors::Unimplemented("{}: pad value for {}", c.node->label(), dtype_name(dt));
    lit = "(" + T + ")(" + std::to_string(static_cast<int64_t>(value)) + ")";
  }
  OpPlan p;
  p.inputs = {0};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_pad";
  k.in_types = {T};
  k.out_types = {T};
  k.n = prod(o);
  std::string s = decompose("gid", o, "q");
  s += "int inside = 1;\n";
  for (size_t d = 0; d < R; ++d) {
    const std::string I = C(x[d]);
    s += fmt::format("i64 i{0} = q{0} - {1};\n", d, C(pads[d]));
    if (mode == "constant") {
      s += fmt::format("if (i{0} < 0 || i{0} >= {1}) inside = 0;\n", d, I);
    } else if (mode == "edge") {
      s += fmt::format("if (i{0} < 0) i{0} = 0; if (i{0} >= {1}) i{0} = {1} - 1;\n", d, I);
    } else if (mode == "wrap") {
      s += fmt::format("i{0} = ((i{0} % {1}) + {1}) % {1};\n", d, I);
    } else if (mode == "reflect") {
      s += x[d] == 1 ? fmt::format("i{} = 0;\n", d)
                     : fmt::format("{{ i64 per = 2 * ({1} - 1); i{0} = ((i{0} % per) + per) % per; if (i{0} >= {1}) i{0} = per - i{0}; }}\n",
                                   d, I);
    } else {
      return errors::Unimplemented("{}: Pad mode '{}'", c.node->label(), mode);
    }
  }
  if (prod(x) == 0 && mode != "constant") return errors::InvalidArgument("{}: pad of an empty tensor", c.node->label());
  s += "out0[gid] = inside ? in0[" + flat("i", x) + "] : " + lit + ";\n";
  k.body = s;
  return p;
}

Result<OpPlan> plan_tile(const OpCall& c) {
  const Shape& x = c.inputs[0].shape;
  const Shape& o = c.outputs[0].shape;
  if (o.size() != x.size()) return errors::InvalidArgument("{}: Tile ranks differ", c.node->label());
  for (size_t d = 0; d < x.size(); ++d)
    if (x[d] == 0 ? o[d] != 0 : o[d] % x[d] != 0) return errors::InvalidArgument("{}: Tile shapes", c.node->label());
  TD_ASSIGN_OR_RETURN(std::string T, bits_type(c.inputs[0].dtype));
  OpPlan p;
  p.inputs = {0};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_tile";
  k.in_types = {T};
  k.out_types = {T};
  k.n = prod(o);
  std::string s = decompose("gid", o, "q");
  for (size_t d = 0; d < x.size(); ++d) s += fmt::format("i64 i{0} = q{0} % {1};\n", d, C(x[d]));
  s += "out0[gid] = in0[" + flat("i", x) + "];\n";
  k.body = s;
  return p;
}

Result<OpPlan> plan_arg(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  TD_ASSIGN_OR_RETURN(int64_t axis_attr, at.attr_int("axis", 0));
  TD_ASSIGN_OR_RETURN(int64_t last, at.attr_int("select_last_index", 0));
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(axis_attr, static_cast<int64_t>(x.size())));
  const size_t ax = static_cast<size_t>(axis);
  const int64_t A = x[ax], inner = prod(x, ax + 1, x.size());
  if (A == 0) return errors::InvalidArgument("{}: ArgMax/ArgMin over an empty axis", c.node->label());
  TD_ASSIGN_OR_RETURN(std::string T, arith_type(c.inputs[0].dtype));
  const bool mx = c.node->op == "ArgMax";
  OpPlan p;
  p.inputs = {0};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_arg";
  k.in_types = {T};
  k.out_types = {"i64"};
  k.n = prod(x, 0, ax) * inner;
  if (k.n != prod(c.outputs[0].shape)) return errors::InvalidArgument("{}: output does not fit", c.node->label());
  k.body = fmt::format(
      "GLOBAL const {0}* xp = in0 + (gid / {1}) * {2} + gid % {1};\n{0} best = xp[0]; i64 arg = 0;\n"
      "for (i64 j = 1; j < {3}; ++j) {{ {0} v = xp[j * {1}]; if (v {4} best{5}{6}) {{ best = v; arg = j; }} }}\nout0[gid] = arg;\n",
      T, C(inner), C(A * inner), C(A), mx ? ">" : "<", last ? fmt::format(" || v == best") : "",
      (T == "float" || T == "double") ? " || (v != v && best == best)" : "");
  return p;
}

Result<OpPlan> plan_cumsum(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  if (c.host.size() < 2 || !c.host[1] || c.host[1]->numel() != 1)
    return errors::InvalidArgument("{}: CumSum's axis must be one value", c.node->label());
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ints_of(*c.host[1])[0], static_cast<int64_t>(x.size())));
  TD_ASSIGN_OR_RETURN(int64_t exclusive, at.attr_int("exclusive", 0));
  TD_ASSIGN_OR_RETURN(int64_t reverse, at.attr_int("reverse", 0));
  const size_t ax = static_cast<size_t>(axis);
  const int64_t A = x[ax], inner = prod(x, ax + 1, x.size());
  TD_ASSIGN_OR_RETURN(std::string T, arith_type(c.inputs[0].dtype));
  OpPlan p;
  p.inputs = {0};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_cumsum";
  k.in_types = {T};
  k.out_types = {T};
  k.n = A > 0 ? prod(x, 0, ax) * inner : 0;
  k.body = fmt::format(
      "i64 base = (gid / {1}) * {2} + gid % {1};\n{0} acc = 0;\n"
      "for (i64 t = 0; t < {3}; ++t) {{ i64 j = {4}; {0} v = in0[base + j * {1}]; {5} }}\n",
      T, C(inner), C(A * inner), C(A), reverse ? fmt::format("{} - 1 - t", C(A)) : "t",
      exclusive ? "out0[base + j * " + C(inner) + "] = acc; acc += v;" : "acc += v; out0[base + j * " + C(inner) + "] = acc;");
  return p;
}

// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss over [N, C, D...]: one work item per
// (n, d) position with reduction "none"; with "sum"/"mean" one work item sums them in order
// (as the reference does; losses are small).
Result<OpPlan> plan_loss(const OpCall& c) {
  NodeAttrs at(*c.node);
  const bool sce = c.node->op == "SoftmaxCrossEntropyLoss";
  const Shape& x = c.inputs[0].shape;
  if (x.size() < 2) return errors::InvalidArgument("{}: input of rank < 2", c.node->label());
  const int64_t N = x[0], Cn = x[1], D = prod(x, 2, x.size());
  if (prod(c.inputs[1].shape) != N * D) return errors::InvalidArgument("{}: target size", c.node->label());
  TD_ASSIGN_OR_RETURN(std::string reduction, at.attr_string("reduction", "mean"));
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    return errors::InvalidArgument("{}: reduction '{}'", c.node->label(), reduction);
  const bool has_ignore = at.has_attr("ignore_index");
  TD_ASSIGN_OR_RETURN(int64_t ignore, at.attr_int("ignore_index", 0));
  {  // targets in range (or ignored)
    if (c.host.size() < 2 || !c.host[1]) return errors::Internal("{}: no host copy of the target", c.node->label());
    TD_ASSIGN_OR_RETURN(auto tv, c.host[1]->to_int64_vector());
    for (size_t i = 0; i < tv.size(); ++i)
      if (!(has_ignore && tv[i] == ignore) && (tv[i] < 0 || tv[i] >= Cn))
        return errors::InvalidArgument("{}: target value {} at flat index {} is out of range [0, {}){}", c.node->label(),
                                       tv[i], i, Cn, has_ignore ? fmt::format(" and is not ignore_index {}", ignore) : "");
  }
  TD_ASSIGN_OR_RETURN(std::string T, arith_type(c.inputs[0].dtype));
  if (T != "float" && T != "double") return errors::Unimplemented("{}: float inputs only", c.node->label());
  OpPlan p;
  p.inputs = {0, 1};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = sce ? "tensord_sce_loss" : "tensord_nll_loss";
  k.in_types = {T, c.inputs[1].dtype == DType::kInt32 ? "int" : "i64"};
  k.out_types = {T};
  const bool weight = c.inputs.size() > 2 && c.inputs[2].defined();
  if (weight) {
    if (prod(c.inputs[2].shape) != Cn) return errors::InvalidArgument("{}: weight size", c.node->label());
    p.inputs.push_back(2);
    k.in_types.push_back(T);
  }
  const bool logp = sce && c.outputs.size() > 1 && c.outputs[1].defined();
  if (logp) {
    p.outputs.push_back(1);
    k.out_types.push_back(T);
  }
  const bool none = reduction == "none";
  k.n = none ? N * D : 1;
  std::string row = fmt::format("i64 n_ = r / {0}; i64 d_ = r % {0}; i64 base = n_ * {1} + d_;\n", C(D), C(Cn * D));
  row += fmt::format("i64 t = (i64)in1[r];\n{}", T == "double" ? "double lsum = 0.0;\n" : "float lsum = 0.0f;\n");
  if (sce) {
    row += fmt::format("{0} mx = in0[base];\nfor (i64 j = 1; j < {1}; ++j) {{ {0} v = in0[base + j * {2}]; if (v > mx) mx = v; }}\n"
                       "{0} se = 0;\nfor (i64 j = 0; j < {1}; ++j) se += exp(in0[base + j * {2}] - mx);\nlsum = log(se);\n",
                       T, C(Cn), C(D));
    if (logp) row += fmt::format("for (i64 j = 0; j < {}; ++j) out1[base + j * {}] = in0[base + j * {}] - mx - lsum;\n", C(Cn), C(D), C(D));
    // the loss below subtracts mx and log(se) one after the other (large scores keep their digits)

  }
  row += fmt::format("{} loss = 0; {} w = 0;\n", T, T);
  row += fmt::format("if ({}t >= 0 && t < {}) {{ w = {}; loss = -w * (in0[base + t * {}]{}); }}\n",
                     has_ignore ? fmt::format("t != {} && ", C(ignore)) : "", C(Cn), weight ? "in2[t]" : "1",
                     C(D), sce ? " - mx - lsum" : "");
  std::string s;
  if (none) {
    s = "i64 r = gid;\n" + row + "out0[r] = loss;\n";
  } else {
    s = fmt::format("{0} total = 0; {0} wsum = 0;\nfor (i64 r = 0; r < {1}; ++r) {{\n{2}total += loss; wsum += w;\n}}\n",
                    T, C(N * D), row);
    s += reduction == "sum" ? "out0[0] = total;\n" : "out0[0] = total / wsum;\n";
  }
  k.body = s;
  return p;
}

Result<OpPlan> plan_trilu(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  if (x.size() < 2) return errors::InvalidArgument("{}: rank < 2", c.node->label());
  TD_ASSIGN_OR_RETURN(int64_t upper, at.attr_int("upper", 1));
  int64_t kk = 0;
  if (c.inputs.size() > 1 && c.inputs[1].defined()) {
    if (c.host.size() < 2 || !c.host[1] || c.host[1]->numel() != 1)
      return errors::InvalidArgument("{}: k must be one value", c.node->label());
    kk = ints_of(*c.host[1])[0];
  }
  TD_ASSIGN_OR_RETURN(std::string T, bits_type(c.inputs[0].dtype));
  const int64_t R = x[x.size() - 2], Cc = x.back();
  OpPlan p;
  p.inputs = {0};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_trilu";
  k.in_types = {T};
  k.out_types = {T};
  k.n = prod(x);
  k.body = fmt::format("i64 j_ = gid % {0}; i64 i_ = (gid / {0}) % {1};\nout0[gid] = (j_ - i_ {2} {3}) ? in0[gid] : ({4})0;\n",
                       C(Cc), C(R), upper ? ">=" : "<=", C(kk), T);
  return p;
}

// Dropout at inference (or with ratio 0): the input, and a mask of ones.
Result<OpPlan> plan_dropout(const OpCall& c) {
  bool training = false;
  double ratio = 0.5;
  if (c.host.size() > 1 && c.host[1] && c.host[1]->numel() > 0) ratio = c.host[1]->to_double_vector()[0];
  if (c.host.size() > 2 && c.host[2] && c.host[2]->numel() > 0) training = c.host[2]->to_double_vector()[0] != 0;
  if (training && ratio != 0)
    return errors::Unimplemented("{}: Dropout in training mode is not generated", c.node->label());
  TD_ASSIGN_OR_RETURN(std::string T, bits_type(c.inputs[0].dtype));
  OpPlan p;
  p.inputs = {0};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_dropout";
  k.in_types = {T};
  k.out_types = {T};
  k.n = prod(c.inputs[0].shape);
  k.body = "out0[gid] = in0[gid];\n";
  if (c.outputs.size() > 1 && c.outputs[1].defined()) {
    p.outputs.push_back(1);
    k.out_types.push_back("uchar");
    k.body += "out1[gid] = 1;\n";
  }
  return p;
}

// Resize (opset 11+): nearest, linear and cubic, separable per dim: each output coordinate
// maps back to the input through the coordinate transformation mode, and each dim contributes
// 1, 2 or 4 taps (indices clamped into the input, as the reference's edge padding does).
Result<OpPlan> plan_resize(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  const Shape& o = c.outputs[0].shape;
  const size_t R = x.size();
  if (o.size() != R) return errors::InvalidArgument("{}: Resize ranks differ", c.node->label());
  TD_ASSIGN_OR_RETURN(std::string mode, at.attr_string("mode", "nearest"));
  TD_ASSIGN_OR_RETURN(std::string ctm, at.attr_string("coordinate_transformation_mode", "half_pixel"));
  TD_ASSIGN_OR_RETURN(std::string nearest, at.attr_string("nearest_mode", "round_prefer_floor"));
  TD_ASSIGN_OR_RETURN(float cubic_a, at.attr_float("cubic_coeff_a", -0.75f));
  TD_ASSIGN_OR_RETURN(int64_t exclude, at.attr_int("exclude_outside", 0));
  TD_ASSIGN_OR_RETURN(float extrapolation, at.attr_float("extrapolation_value", 0.0f));
  TD_ASSIGN_OR_RETURN(std::string policy, at.attr_string("keep_aspect_ratio_policy", "stretch"));
  TD_ASSIGN_OR_RETURN(std::vector<int64_t> axes_attr, at.attr_ints("axes", {}));
  std::vector<size_t> axes;
  for (int64_t a : axes_attr) {
    TD_ASSIGN_OR_RETURN(int64_t n, normalize_axis(a, static_cast<int64_t>(R)));
    axes.push_back(static_cast<size_t>(n));
  }
  if (axes.empty())
    for (size_t d = 0; d < R; ++d) axes.push_back(d);
  auto host = [&](size_t i) -> const HostTensor* {
    return i < c.host.size() && c.host[i] && c.host[i]->numel() > 0 ? c.host[i] : nullptr;
  };
  std::vector<double> scale(R, 1.0), roi_start(R, 0.0), roi_end(R, 1.0);
  if (const HostTensor* sc = host(2)) {
    const auto v = sc->to_double_vector();
    if (v.size() != axes.size()) return errors::InvalidArgument("{}: scales do not fit", c.node->label());
    for (size_t i = 0; i < axes.size(); ++i) scale[axes[i]] = v[i];
  } else if (const HostTensor* sz = host(3)) {
    const auto v = sz->to_double_vector();
    if (v.size() != axes.size()) return errors::InvalidArgument("{}: sizes do not fit", c.node->label());
    double common = policy == "not_smaller" ? 0.0 : 1e300;
    for (size_t i = 0; i < axes.size(); ++i) {
      const double r = v[i] / static_cast<double>(x[axes[i]]);
      scale[axes[i]] = r;
      common = policy == "not_smaller" ? std::max(common, r) : std::min(common, r);
    }
    if (policy != "stretch")
      for (size_t a : axes) scale[a] = common;
  } else {
    return errors::InvalidArgument("{}: Resize needs scales or sizes", c.node->label());
  }
  if (const HostTensor* roi = host(1); roi && ctm == "tf_crop_and_resize") {
    const auto v = roi->to_double_vector();
    if (v.size() != 2 * axes.size()) return errors::InvalidArgument("{}: roi does not fit", c.node->label());
    for (size_t i = 0; i < axes.size(); ++i) {
      roi_start[axes[i]] = v[i];
      roi_end[axes[i]] = v[i + axes.size()];
    }
  }
  for (size_t d = 0; d < R; ++d)
    if (scale[d] <= 0 || x[d] <= 0) return errors::InvalidArgument("{}: non-positive scale or empty input", c.node->label());
  OpPlan p;
  p.inputs = {0};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_resize";
  k.in_types = {"float"};
  k.out_types = {"float"};
  k.n = prod(o);
  std::string s = decompose("gid", o, "q");
  s += "int outside = 0;\n";
  std::vector<int> taps(R);
  for (size_t d = 0; d < R; ++d) {
    const int64_t in = x[d], out = o[d];
    const bool identity = in == out && scale[d] == 1.0 && ctm != "tf_crop_and_resize";
    const std::string sc = flit(scale[d]);
    if (identity) {
      taps[d] = 1;
      s += fmt::format("i64 j{0}[1]; float w{0}[1]; j{0}[0] = q{0}; w{0}[0] = 1.0f;\n", d);
      continue;
    }
    std::string xo;
    const std::string qf = fmt::format("(float)q{}", d);
    if (ctm == "half_pixel") xo = fmt::format("({} + 0.5f) / {} - 0.5f", qf, sc);
    else if (ctm == "pytorch_half_pixel") xo = out > 1 ? fmt::format("({} + 0.5f) / {} - 0.5f", qf, sc) : "0.0f";
    else if (ctm == "tf_half_pixel_for_nn") xo = fmt::format("({} + 0.5f) / {}", qf, sc);
    else if (ctm == "asymmetric") xo = fmt::format("{} / {}", qf, sc);
    else if (ctm == "align_corners") {  // over the resized length scale * in, as the reference
      const double lr = scale[d] * static_cast<double>(in);
      xo = lr <= 1.0 ? "0.0f" : fmt::format("{} * {}", qf, flit(static_cast<double>(in - 1) / (lr - 1.0)));
    }
    else if (ctm == "half_pixel_symmetric") {
      const double adj = static_cast<double>(out) / (scale[d] * static_cast<double>(in));
      const double offset = static_cast<double>(in) / 2.0 * (1.0 - adj);
      xo = fmt::format("{} + ({} + 0.5f) / {} - 0.5f", flit(offset), qf, sc);
    } else if (ctm == "tf_crop_and_resize") {
      const double a = roi_start[d], b = roi_end[d];
      xo = out > 1 ? fmt::format("{} + {} * {}", flit(a * static_cast<double>(in - 1)), qf,
                                 flit((b - a) * static_cast<double>(in - 1) / static_cast<double>(out - 1)))
                   : flit(0.5 * (a + b) * static_cast<double>(in - 1));
    } else {
      return errors::Unimplemented("{}: coordinate_transformation_mode '{}'", c.node->label(), ctm);
    }
    s += fmt::format("float x{} = {};\n", d, xo);
    if (ctm == "tf_crop_and_resize")
      s += fmt::format("if (x{0} < 0.0f || x{0} > {1}) outside = 1;\n", d, flit(static_cast<double>(in - 1)));
    const std::string last = C(in - 1);
    if (mode == "nearest") {
      taps[d] = 1;
      std::string r;
      if (nearest == "round_prefer_floor") r = fmt::format("(x{0} - floor(x{0}) == 0.5f ? floor(x{0}) : round(x{0}))", d);
      else if (nearest == "round_prefer_ceil") r = fmt::format("(x{0} - floor(x{0}) == 0.5f ? ceil(x{0}) : round(x{0}))", d);
      else if (nearest == "floor") r = fmt::format("floor(x{})", d);
      else if (nearest == "ceil") r = fmt::format("ceil(x{})", d);
      else return errors::Unimplemented("{}: nearest_mode '{}'", c.node->label(), nearest);
      s += fmt::format("i64 j{0}[1]; float w{0}[1]; j{0}[0] = (i64){1}; w{0}[0] = 1.0f;\n"
                       "if (j{0}[0] < 0) j{0}[0] = 0; if (j{0}[0] > {2}) j{0}[0] = {2};\n", d, r, last);
    } else if (mode == "linear" || mode == "cubic") {
      const int T = mode == "linear" ? 2 : 4;
      taps[d] = T;
      s += fmt::format("i64 j{0}[{1}]; float w{0}[{1}];\n{{ float fl = floor(x{0}); float r = x{0} - fl; i64 b = (i64)fl;\n", d, T);
      if (T == 2) {
        s += fmt::format("w{0}[0] = 1.0f - r; w{0}[1] = r; j{0}[0] = b; j{0}[1] = b + 1;\n", d);
      } else {
        const std::string A = flit(cubic_a);
        s += fmt::format(
            "float A = {1};\n"
            "w{0}[0] = ((A * (r + 1.0f) - 5.0f * A) * (r + 1.0f) + 8.0f * A) * (r + 1.0f) - 4.0f * A;\n"
            "w{0}[1] = ((A + 2.0f) * r - (A + 3.0f)) * r * r + 1.0f;\n"
            "w{0}[2] = ((A + 2.0f) * (1.0f - r) - (A + 3.0f)) * (1.0f - r) * (1.0f - r) + 1.0f;\n"
            "w{0}[3] = ((A * (2.0f - r) - 5.0f * A) * (2.0f - r) + 8.0f * A) * (2.0f - r) - 4.0f * A;\n"
            "for (int t = 0; t < 4; ++t) j{0}[t] = b - 1 + t;\n",
            d, A);
      }
      if (exclude) {
        s += fmt::format("float ws = 0.0f;\nfor (int t = 0; t < {1}; ++t) {{ if (j{0}[t] < 0 || j{0}[t] > {2}) w{0}[t] = 0.0f; ws += w{0}[t]; }}\n"
                         "if (ws != 0.0f) for (int t = 0; t < {1}; ++t) w{0}[t] /= ws;\n", d, T, last);
      }
      s += fmt::format("for (int t = 0; t < {1}; ++t) {{ if (j{0}[t] < 0) j{0}[t] = 0; if (j{0}[t] > {2}) j{0}[t] = {2}; }}\n}}\n",
                       d, T, last);
    } else {
      return errors::Unimplemented("{}: Resize mode '{}'", c.node->label(), mode);
    }
  }
  const auto st = strides_of(x);
  s += "float acc = 0.0f;\n";
  std::string idx = "0", w = "1.0f";
  for (size_t d = 0; d < R; ++d) {
    s += fmt::format("for (int t{0} = 0; t{0} < {1}; ++t{0}) {{\n", d, taps[d]);
    idx += fmt::format(" + j{0}[t{0}] * {1}", d, C(st[d]));
    w += fmt::format(" * w{0}[t{0}]", d);
  }
  s += "acc += " + w + " * in0[" + idx + "];\n";
  for (size_t d = 0; d < R; ++d) s += "}\n";
  s += fmt::format("out0[gid] = outside ? {} : acc;\n", flit(extrapolation));
  k.body = s;
  return p;
}

// The C type of any numeric dtype (element-wise ops over the dtypes the IR does not cover).
Result<std::string> c_type(DType t) {
  switch (t) {
    case DType::kFloat32: return std::string("float");
    case DType::kFloat64: return std::string("double");
    case DType::kInt8: return std::string("i8");
    case DType::kInt16: return std::string("short");
    case DType::kInt32: return std::string("int");
    case DType::kInt64: return std::string("i64");
    case DType::kUInt8: return std::string("uchar");
    case DType::kUInt16: return std::string("ushort");
    case DType::kUInt32: return std::string("uint");
    case DType::kUInt64: return std::string("u64");
    case DType::kBool: return std::string("uchar");
    case DType::kFloat16: return std::string("ushort");  // stored bits, computed in float
    case DType::kBFloat16: return std::string("ushort");
    default: return errors::Unimplemented("generated kernels: no C type for {}", dtype_name(t));
  }
}

bool is_half_dtype(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }
bool is_float_dtype(DType t) { return t == DType::kFloat32 || t == DType::kFloat64 || is_half_dtype(t); }
// The type a value of dtype t is computed in, and how it is loaded and stored.
Result<std::string> compute_type(DType t) {
  if (is_half_dtype(t)) return std::string("float");
  return c_type(t);
}
std::string load_expr(DType t, const std::string& e) {
  if (t == DType::kFloat16) return "td_h2f(" + e + ")";
  if (t == DType::kBFloat16) return "td_bf2f(" + e + ")";
  return e;
}
std::string store_expr(DType t, const std::string& e) {
  if (t == DType::kFloat16) return "td_f2h((float)(" + e + "))";
  if (t == DType::kBFloat16) return "td_f2bf((float)(" + e + "))";
  return e;
}
bool is_unsigned_dtype(DType t) {
  return t == DType::kUInt8 || t == DType::kUInt16 || t == DType::kUInt32 || t == DType::kUInt64 || t == DType::kBool;
}

// Max/Min/Mod/Pow/Cast/CastLike/Clip over dtypes the element-wise IR lacks: one work item
// per output element, inputs loaded through broadcast strides.
Result<OpPlan> plan_ew(const OpCall& c) {
  const std::string& op = c.node->op;
  NodeAttrs at(*c.node);
  const Shape& o = c.outputs[0].shape;
  const DType odt = c.outputs[0].dtype;
  TD_ASSIGN_OR_RETURN(std::string OST, c_type(odt));
  TD_ASSIGN_OR_RETURN(std::string OT, compute_type(odt));
  OpPlan p;
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_ew_" + op;
  k.out_types = {OST};
  k.n = prod(o);
  std::string s = decompose("gid", o, "q");
  std::vector<std::string> vals;
  std::vector<DType> types;
  const size_t nin = (op == "CastLike") ? 1 : c.inputs.size();
  for (size_t i = 0; i < nin; ++i) {
    if (!c.inputs[i].defined()) {
      vals.push_back("");
      types.push_back(DType::kUndefined);
      continue;
    }
    const DType idt = c.inputs[i].dtype;
    TD_ASSIGN_OR_RETURN(std::string ST, c_type(idt));
    TD_ASSIGN_OR_RETURN(std::string T, compute_type(idt));
    TD_ASSIGN_OR_RETURN(auto st, broadcast_strides(c.inputs[i].shape, o));
    const int kin = static_cast<int>(p.inputs.size());
    p.inputs.push_back(static_cast<int>(i));
    k.in_types.push_back(ST);
    std::string e = "0";
    for (size_t d = 0; d < o.size(); ++d)
      if (st[d]) e += fmt::format(" + q{} * {}", d, C(st[d]));
    s += fmt::format("{} a{} = {};\n", T, i, load_expr(idt, fmt::format("in{}[{}]", kin, e)));
    vals.push_back("a" + std::to_string(i));
    types.push_back(c.inputs[i].dtype);
  }
  const DType t0 = types[0];
  const bool fl = is_float_dtype(t0);
  std::string y;
  if (op == "Max" || op == "Min") {
    y = vals[0];
    s += fmt::format("{} y = a0;\n", OT);
    for (size_t i = 1; i < vals.size(); ++i) {
      const std::string cmp = op == "Max" ? ">" : "<";
      s += fl ? fmt::format("if (y == y && ({0} != {0} || {0} {1} y)) y = {0};\n", vals[i], cmp)
              : fmt::format("if ({} {} y) y = {};\n", vals[i], cmp, vals[i]);
    }
    y = "y";
  } else if (op == "Mod") {
    TD_ASSIGN_OR_RETURN(int64_t fmod_attr, at.attr_int("fmod", 0));
    if (fl) {
      s += fmt::format("{0} y = fmod(a0, a1);\n", OT);
      if (!fmod_attr) s += "if (y != 0 && ((y < 0) != (a1 < 0))) y += a1;\n";
    } else {  // a zero divisor is an error, found on the host (the kernel still guards it)
      if (c.host.size() < 2 || !c.host[1]) return errors::Internal("{}: no host copy of the divisor", c.node->label());
      TD_ASSIGN_OR_RETURN(auto dv, c.host[1]->to_int64_vector());
      for (size_t i = 0; i < dv.size(); ++i)
        if (dv[i] == 0)
          return errors::InvalidArgument("{}: integer division by zero (element {} of divisor of shape {} is 0)",
                                         c.node->label(), i, shape_to_string(c.inputs[1].shape));
      // x % -1 is 0 (INT_MIN % -1 overflows in C).
      s += fmt::format("{0} y = a1 == 0 ? ({0})0 : ({0})({1}a0 % a1);\n", OT,
                       is_unsigned_dtype(t0) ? "" : "a1 == -1 ? 0 : ");
      if (!fmod_attr && !is_unsigned_dtype(t0)) s += "if (y != 0 && ((y < 0) != (a1 < 0))) y += a1;\n";
    }
    y = "y";
  } else if (op == "Pow") {
    y = fmt::format("({})pow((double)a0, (double)a1)", OT);
  } else if (op == "Cast" || op == "CastLike") {
    if (odt == DType::kBool) y = "(uchar)(a0 != 0)";
    else y = fmt::format("({})a0", OT);
  } else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    const char* sym = op == "Add" ? "+" : op == "Sub" ? "-" : op == "Mul" ? "*" : "/";
    y = fmt::format("({})(a0 {} a1)", OT, sym);
  } else if (op == "BitShift") {
    TD_ASSIGN_OR_RETURN(std::string dir, at.attr_string("direction", ""));
    if (dir != "LEFT" && dir != "RIGHT") return errors::InvalidArgument("{}: direction '{}'", c.node->label(), dir);
    const int64_t bits = static_cast<int64_t>(dtype_size(t0)) * 8;  // shifts past the width give 0
    y = fmt::format("(a1 >= {0} ? ({1})0 : ({1})(a0 {2} a1))", bits, OT, dir == "LEFT" ? "<<" : ">>");
  } else if (op == "Shrink") {
    TD_ASSIGN_OR_RETURN(float lambd, at.attr_float("lambd", 0.5f));
    TD_ASSIGN_OR_RETURN(float bias, at.attr_float("bias", 0.0f));
    y = fmt::format("({0})(a0 < -{1} ? a0 + {2} : (a0 > {1} ? a0 - {2} : 0))", OT, flit(lambd), flit(bias));
  } else if (op == "Clip") {
    s += fmt::format("{} y = a0;\n", OT);
    if (vals.size() > 1 && !vals[1].empty()) s += "if (y < a1) y = a1;\n";
    if (vals.size() > 2 && !vals[2].empty()) s += "if (y > a2) y = a2;\n";
    y = "y";
  } else {
    return errors::Unimplemented("{}: no generated element-wise template", c.node->label());
  }
  s += "out0[gid] = " + store_expr(odt, y) + ";\n";
  k.body = s;
  return p;
}


// Range: its length comes from the values (start, limit, delta on the host).
Result<OpPlan> plan_range(const OpCall& c) {
  for (size_t i = 0; i < 3; ++i)
    if (c.host.size() <= i || !c.host[i] || c.host[i]->numel() != 1)
      return errors::InvalidArgument("{}: start, limit and delta must be scalars", c.node->label());
  const double start = c.host[0]->to_double_vector()[0], limit = c.host[1]->to_double_vector()[0],
               delta = c.host[2]->to_double_vector()[0];
  if (delta == 0) return errors::InvalidArgument("{}: delta is 0", c.node->label());
  const double count = std::ceil((limit - start) / delta);
  if (!(count < 1e12)) return errors::InvalidArgument("{}: {} elements", c.node->label(), count);
  const int64_t n = std::max<int64_t>(0, static_cast<int64_t>(count));
  TD_ASSIGN_OR_RETURN(std::string T, arith_type(c.inputs[0].dtype));
  OpPlan p;
  p.inputs = {0, 2};
  p.outputs = {0};
  p.output_shapes = {Shape{n}};
  auto& k = p.kernel;
  k.name = "tensord_range";
  k.in_types = {T, T};
  k.out_types = {T};
  k.n = n;
  k.body = fmt::format("out0[gid] = in0[0] + ({})gid * in1[0];\n", T);
  return p;
}

// DepthToSpace (DCR, CRD) and SpaceToDepth: a gather per output element.
Result<OpPlan> plan_depth_space(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  const Shape& o = c.outputs[0].shape;
  if (x.size() != 4 || o.size() != 4) return errors::InvalidArgument("{}: rank != 4", c.node->label());
  TD_ASSIGN_OR_RETURN(int64_t b, at.attr_int("blocksize", 0));
  TD_ASSIGN_OR_RETURN(std::string mode, at.attr_string("mode", "DCR"));
  if (b <= 0) return errors::InvalidArgument("{}: blocksize", c.node->label());
  TD_ASSIGN_OR_RETURN(std::string T, bits_type(c.inputs[0].dtype));
  OpPlan p;
  p.inputs = {0};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_depth_space";
  k.in_types = {T};
  k.out_types = {T};
  k.n = prod(o);
  std::string s = decompose("gid", o, "q");
  std::string ci, hi, wi;
  if (c.node->op == "DepthToSpace") {
    // out[n, c, h, w] = in[n, channel, h / b, w / b]
    if (o[1] * b * b != x[1] || o[0] != x[0] || o[2] != x[2] * b || o[3] != x[3] * b)
      return errors::InvalidArgument("{}: shapes do not fit the blocksize", c.node->label());
    s += fmt::format("i64 bh = q2 % {0}, bw = q3 % {0};\n", C(b));
    ci = mode == "CRD" ? fmt::format("(q1 * {0} + bh * {1} + bw)", C(b * b), C(b))
                       : fmt::format("((bh * {} + bw) * {} + q1)", C(b), C(o[1]));
    hi = fmt::format("(q2 / {})", C(b));
    wi = fmt::format("(q3 / {})", C(b));
  } else {
    // out[n, (bh * b + bw) * C + c, h, w] = in[n, c, h * b + bh, w * b + bw]
    if (x[1] * b * b != o[1] || o[0] != x[0] || o[2] * b != x[2] || o[3] * b != x[3])
      return errors::InvalidArgument("{}: shapes do not fit the blocksize", c.node->label());
    s += fmt::format("i64 cc = q1 % {0}; i64 blk = q1 / {0}; i64 bh = blk / {1}, bw = blk % {1};\n", C(x[1]), C(b));
    ci = "cc";
    hi = fmt::format("(q2 * {} + bh)", C(b));
    wi = fmt::format("(q3 * {} + bw)", C(b));
  }
  s += fmt::format("out0[gid] = in0[((q0 * {} + {}) * {} + {}) * {} + {}];\n", C(x[1]), ci, C(x[2]), hi, C(x[3]), wi);
  k.body = s;
  return p;
}

// LRN across channels: y = x / (bias + alpha / size * sum of squares in the window) ^ beta.
Result<OpPlan> plan_lrn(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  if (x.size() < 2) return errors::InvalidArgument("{}: rank < 2", c.node->label());
  TD_ASSIGN_OR_RETURN(int64_t size, at.attr_int("size", 0));
  TD_ASSIGN_OR_RETURN(float alpha, at.attr_float("alpha", 1e-4f));
  TD_ASSIGN_OR_RETURN(float beta, at.attr_float("beta", 0.75f));
  TD_ASSIGN_OR_RETURN(float bias, at.attr_float("bias", 1.0f));
  if (size <= 0) return errors::InvalidArgument("{}: size must be positive", c.node->label());
  const int64_t Cc = x[1], inner = prod(x, 2, x.size());
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  OpPlan p;
  p.inputs = {0};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_lrn";
  k.in_types = {"float"};
  k.out_types = {"float"};
  k.n = prod(x);
  k.body = fmt::format(
      "i64 i_ = gid % {0}; i64 ch = (gid / {0}) % {1}; i64 base = gid - ch * {0};\n"
      "float sq = 0.0f;\nfor (i64 j = ch - {2}; j <= ch + {3}; ++j) {{ if (j < 0 || j >= {1}) continue; float v = in0[base + j * {0}]; sq += v * v; }}\n"
      "out0[gid] = in0[gid] / pow({4} + {5} * sq, {6});\n",
      C(inner), C(Cc), C(before), C(after), flit(bias), flit(alpha / static_cast<float>(size)), flit(beta));
  return p;
}

// ReverseSequence: the first seq_lens[b] steps of each batch entry reversed.
Result<OpPlan> plan_reverse_sequence(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  TD_ASSIGN_OR_RETURN(int64_t batch_axis, at.attr_int("batch_axis", 1));
  TD_ASSIGN_OR_RETURN(int64_t time_axis, at.attr_int("time_axis", 0));
  if (x.size() < 2 || (batch_axis != 0 && batch_axis != 1) || time_axis != 1 - batch_axis)
    return errors::InvalidArgument("{}: batch_axis and time_axis must be 0 and 1", c.node->label());
  const int64_t Bn = x[static_cast<size_t>(batch_axis)], Tn = x[static_cast<size_t>(time_axis)];
  if (c.host.size() < 2 || !c.host[1] || c.host[1]->numel() != Bn)
    return errors::InvalidArgument("{}: sequence_lens must have {} values", c.node->label(), Bn);
  const auto lens = ints_of(*c.host[1]);
  for (size_t i = 0; i < lens.size(); ++i)
    if (lens[i] < 0 || lens[i] > Tn)
      return errors::InvalidArgument("{}: sequence_lens[{}] is {}, not in [0, {}]", c.node->label(), i, lens[i], Tn);
  TD_ASSIGN_OR_RETURN(std::string T, bits_type(c.inputs[0].dtype));
  const std::string LT = c.inputs[1].dtype == DType::kInt32 ? "int" : "i64";
  const auto st = strides_of(x);
  OpPlan p;
  p.inputs = {0, 1};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_reverse_sequence";
  k.in_types = {T, LT};
  k.out_types = {T};
  k.n = prod(x);
  const size_t ba = static_cast<size_t>(batch_axis), ta = static_cast<size_t>(time_axis);
  std::string s = decompose("gid", x, "q");
  s += fmt::format("i64 len = (i64)in1[q{}]; if (len > {}) len = {};\ni64 t = q{};\ni64 src = gid;\n", ba, C(Tn), C(Tn), ta);
  s += fmt::format("if (t < len) src = gid + (len - 1 - 2 * t) * {};\nout0[gid] = in0[src];\n", C(st[ta]));
  k.body = s;
  return p;
}

// GridSample (N-D, as op_grid_sample.py and the cpu kernel): per output element, per spatial
// axis the grid coordinate, unnormalised, padded (border / reflection) and split into 1, 2 or
// 4 taps; a tap in the zero padding reads nothing.
Result<OpPlan> plan_grid_sample(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  const Shape& g = c.inputs[1].shape;
  const Shape& o = c.outputs[0].shape;
  if (x.size() < 3 || g.size() != x.size() || g.back() != static_cast<int64_t>(x.size() - 2) || g[0] != x[0] ||
      o.size() != x.size())
    return errors::InvalidArgument("{}: GridSample shapes do not fit", c.node->label());
  TD_ASSIGN_OR_RETURN(int64_t align, at.attr_int("align_corners", 0));
  TD_ASSIGN_OR_RETURN(std::string mode, at.attr_string("mode", "bilinear"));
  TD_ASSIGN_OR_RETURN(std::string pad, at.attr_string("padding_mode", "zeros"));
  const size_t ns = x.size() - 2;
  const Shape dims(x.begin() + 2, x.end());
  const int64_t in_sp = prod(dims), out_sp = prod(g, 1, g.size() - 1);
  if (o[0] != x[0] || o[1] != x[1] || prod(o) != x[0] * x[1] * out_sp)
    return errors::InvalidArgument("{}: GridSample output does not fit", c.node->label());
  const int taps = mode == "nearest" ? 1 : (mode == "bicubic" || mode == "cubic") ? 4 : 2;
  if (in_sp == 0) {  // nothing to sample: zeros
    OpPlan z;
    z.outputs = {0};
    z.kernel.name = "tensord_grid_sample_zeros";
    z.kernel.out_types = {"float"};
    z.kernel.n = prod(o);
    z.kernel.body = "out0[gid] = 0.0f;\n";
    return z;
  }
  OpPlan p;
  p.inputs = {0, 1};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_grid_sample";
  k.in_types = {"float", "float"};
  k.out_types = {"float"};
  k.n = prod(o);
  std::string s = fmt::format("i64 p_ = gid % {0}; i64 nc_ = gid / {0}; i64 n_ = nc_ / {1};\n"
                              "GLOBAL const float* gp = in1 + (n_ * {0} + p_) * {2};\nGLOBAL const float* plane = in0 + nc_ * {3};\n",
                              C(out_sp), C(x[1]), C(static_cast<int64_t>(ns)), C(in_sp));
  for (size_t i = 0; i < ns; ++i) {
    const double len = static_cast<double>(dims[i]);
    const double lo = align ? 0.0 : -0.5, hi = align ? len - 1 : len - 0.5;
    const std::string L = C(dims[i]);
    s += fmt::format("i64 j{0}[4]; float w{0}[4];\n{{\nfloat c = gp[{1}];\n", i, ns - 1 - i);
    s += align ? fmt::format("c = (c + 1.0f) / 2.0f * {};\n", flit(len - 1)) : fmt::format("c = ((c + 1.0f) * {} - 1.0f) / 2.0f;\n", flit(len));
    s += fmt::format("if (c != c || c - c != 0.0f) {{ for (int t = 0; t < 4; ++t) {{ j{0}[t] = -1; w{0}[t] = 0.0f; }} }} else {{\n", i);
    if (pad == "zeros") s += fmt::format("if (c < -8.0f) c = -8.0f; if (c > {}) c = {};\n", flit(len + 8), flit(len + 8));
    if (taps == 1) s += ns == 3 ? "c = round(c);\n" : "c = rint(c);\n";
    if (pad == "border") s += fmt::format("if (c < {0} || c > {1}) {{ if (c < 0.0f) c = 0.0f; if (c > {2}) c = {2}; }}\n", flit(lo), flit(hi), flit(len - 1));
    if (pad == "reflection") s += fmt::format("if (c < {0} || c > {1}) c = td_reflect(c, {0}, {1});\n", flit(lo), flit(hi));
    std::string place;  // of integer kk into j{i}[t]
    if (pad == "zeros") place = fmt::format("(kk >= 0 && kk < {0} ? kk : -1)", L);
    else if (pad == "border") place = fmt::format("(kk < 0 ? 0 : (kk >= {0} ? {0} - 1 : kk))", L);
    else place = fmt::format("(kk >= 0 && kk < {0} ? kk : (i64)td_reflect((float)kk, {1}, {2}))", L, flit(lo), flit(hi));
    if (taps == 1) {
      s += fmt::format("{{ i64 kk = (i64)c; j{0}[0] = {1}; w{0}[0] = 1.0f; }}\n", i, place);
    } else {
      s += "float fl = floor(c); i64 k0 = (i64)fl; float t = c - fl;\n";
      if (taps == 2) {
        s += fmt::format("w{0}[0] = 1.0f - t; w{0}[1] = t;\n", i);
      } else {
        s += fmt::format(
            "float A = -0.75f;\nw{0}[0] = ((A * (t + 1.0f) - 5.0f * A) * (t + 1.0f) + 8.0f * A) * (t + 1.0f) - 4.0f * A;\n"
            "w{0}[1] = ((A + 2.0f) * t - (A + 3.0f)) * t * t + 1.0f;\n"
            "w{0}[2] = ((A + 2.0f) * (1.0f - t) - (A + 3.0f)) * (1.0f - t) * (1.0f - t) + 1.0f;\n"
            "w{0}[3] = ((A * (2.0f - t) - 5.0f * A) * (2.0f - t) + 8.0f * A) * (2.0f - t) - 4.0f * A;\n", i);
      }
      s += fmt::format("for (int q = 0; q < {}; ++q) {{ i64 kk = k0 {} + q; j{}[q] = {}; }}\n", taps, taps == 4 ? "- 1" : "", i, place);
    }
    s += "}\n}\n";
  }
  const auto st = strides_of(dims);
  s += "float acc = 0.0f;\n";
  std::string ok = "1", idx = "0", w = "1.0f";
  for (size_t i = 0; i < ns; ++i) {
    s += fmt::format("for (int t{0} = 0; t{0} < {1}; ++t{0}) {{\n", i, taps);
    ok += fmt::format(" && j{0}[t{0}] >= 0 && j{0}[t{0}] < {1}", i, C(dims[i]));
    idx += fmt::format(" + j{0}[t{0}] * {1}", i, C(st[i]));
    w += fmt::format(" * w{0}[t{0}]", i);
  }
  s += "if (" + ok + ") acc += " + w + " * plane[" + idx + "];\n";
  for (size_t i = 0; i < ns; ++i) s += "}\n";
  s += "out0[gid] = acc;\n";
  k.body = s;
  return p;
}

// HannWindow, HammingWindow, BlackmanWindow: the length is the value of input 0.
Result<OpPlan> plan_window_fn(const OpCall& c) {
  NodeAttrs at(*c.node);
  if (c.host.empty() || !c.host[0] || c.host[0]->numel() != 1)
    return errors::InvalidArgument("{}: size must be one value", c.node->label());
  const int64_t n = ints_of(*c.host[0])[0];
  if (n < 0 || n > (int64_t{1} << 32)) return errors::InvalidArgument("{}: size {}", c.node->label(), n);
  TD_ASSIGN_OR_RETURN(int64_t periodic, at.attr_int("periodic", 1));
  const DType odt = c.outputs[0].dtype;
  TD_ASSIGN_OR_RETURN(std::string OST, c_type(odt));
  const double N = static_cast<double>(periodic ? n : n - 1);
  const std::string ph = fmt::format("(2.0 * 3.14159265358979323846 * (double)gid / {})", N == 0 ? 1.0 : N);
  std::string e;
  if (N == 0) e = "1.0";
  else if (c.node->op == "HannWindow") e = "0.5 - 0.5 * cos(" + ph + ")";
  else if (c.node->op == "HammingWindow") e = "(25.0 / 46.0) - (21.0 / 46.0) * cos(" + ph + ")";
  else e = "0.42 - 0.5 * cos(" + ph + ") + 0.08 * cos(2.0 * " + ph + ")";
  OpPlan p;
  p.outputs = {0};
  p.output_shapes = {Shape{n}};
  auto& k = p.kernel;
  k.name = "tensord_window";
  k.out_types = {OST};
  k.n = n;
  k.body = "out0[gid] = " + store_expr(odt, fmt::format("({})({})", is_half_dtype(odt) ? "float" : OST, e)) + ";\n";
  return p;
}

// ConstantOfShape: the shape is the value of input 0; the value attribute (one element).
Result<OpPlan> plan_constant_of_shape(const OpCall& c) {
  if (c.host.empty() || !c.host[0]) return errors::Internal("{}: no host copy of the shape", c.node->label());
  TD_ASSIGN_OR_RETURN(auto dims, c.host[0]->to_int64_vector());
  for (int64_t d : dims)
    if (d < 0) return errors::InvalidArgument("{}: a negative dim {}", c.node->label(), d);
  const Shape shape(dims.begin(), dims.end());
  const DType odt = c.outputs[0].dtype;
  TD_ASSIGN_OR_RETURN(std::string T, bits_type(odt));
  uint64_t bits = 0;
  if (auto it = c.node->attrs.find("value"); it != c.node->attrs.end()) {
    const HostTensor* v = it->second.get_if<HostTensor>();
    if (!v || v->numel() != 1 || v->dtype() != odt)
      return errors::InvalidArgument("{}: value must be one element of the output dtype", c.node->label());
    std::memcpy(&bits, v->data(), dtype_size(odt));
  }
  OpPlan p;
  p.outputs = {0};
  p.output_shapes = {shape};
  auto& k = p.kernel;
  k.name = "tensord_constant_of_shape";
  k.out_types = {T};
  k.n = prod(shape);
  k.body = fmt::format("out0[gid] = ({})({}ULL);\n", T, bits);
  return p;
}

// Reductions in float64 (the float32 ones are codegen::ReduceKernel): one work item per output
// element; axes are resolved by the caller into `reduced` flags passed as the plan's kernel name
// suffix... resolved here from the attribute or input 1.
Result<OpPlan> plan_reduce64(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  const int64_t rank = static_cast<int64_t>(x.size());
  std::vector<int64_t> axes;
  if (at.has_attr("axes")) {
    TD_ASSIGN_OR_RETURN(axes, at.attr_ints("axes", {}));
  } else if (c.host.size() > 1 && c.host[1]) {
    axes = ints_of(*c.host[1]);
  }
  TD_ASSIGN_OR_RETURN(int64_t noop, at.attr_int("noop_with_empty_axes", 0));
  if (axes.empty() && noop) return errors::Unimplemented("{}: noop_with_empty_axes", c.node->label());
  std::vector<bool> red(x.size(), axes.empty());
  for (int64_t a : axes) {
    TD_ASSIGN_OR_RETURN(int64_t n, normalize_axis(a, rank));
    red[static_cast<size_t>(n)] = true;
  }
  Shape kept, rdims;
  for (size_t d = 0; d < x.size(); ++d) (red[d] ? rdims : kept).push_back(x[d]);
  const auto st = strides_of(x);
  const std::string& op = c.node->op;
  OpPlan p;
  p.inputs = {0};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_reduce64";
  k.in_types = {"double"};
  k.out_types = {"double"};
  k.n = prod(kept);
  if (k.n != prod(c.outputs[0].shape) || prod(rdims) == 0)
    return errors::InvalidArgument("{}: reduction shapes", c.node->label());
  std::string s = decompose("gid", kept, "q");
  std::string base = "0";
  {
    size_t kq = 0;
    for (size_t d = 0; d < x.size(); ++d)
      if (!red[d]) base += fmt::format(" + q{} * {}", kq++, C(st[d]));
  }
  std::string roff = "0";
  {
    size_t kr = 0;
    for (size_t d = 0; d < x.size(); ++d)
      if (red[d]) roff += fmt::format(" + r{} * {}", kr++, C(st[d]));
  }
  const std::string loop_head = fmt::format("for (i64 j = 0; j < {}; ++j) {{\n", C(prod(rdims))) +
                                decompose("j", rdims, "r") + "double v = in0[base + " + roff + "];\n";
  s += "i64 base = " + base + ";\n";
  std::string init = "0.0", step = "acc += v;", fin = "acc";
  if (op == "ReduceMax") { init = "-INFINITY"; step = "if (v > acc || v != v) acc = v;"; }
  if (op == "ReduceMin") { init = "INFINITY"; step = "if (v < acc || v != v) acc = v;"; }
  if (op == "ReduceProd") { init = "1.0"; step = "acc *= v;"; }
  if (op == "ReduceMean") fin = fmt::format("acc / {}", static_cast<double>(prod(rdims)));
  if (op == "ReduceSumSquare") step = "acc += v * v;";
  if (op == "ReduceL1") step = "acc += fabs(v);";
  if (op == "ReduceL2") { step = "acc += v * v;"; fin = "sqrt(acc)"; }
  if (op == "ReduceLogSum") fin = "log(acc)";
  if (op == "ReduceLogSumExp") {
    s += "double mx = -INFINITY;\n" + loop_head + "if (v > mx) mx = v;\n}\nif (mx - mx != 0.0) mx = 0.0;\n";
    step = "acc += exp(v - mx);";
    fin = "log(acc) + mx";
  }
  s += "double acc = " + init + ";\n" + loop_head + step + "\n}\nout0[gid] = " + fin + ";\n";
  k.body = s;
  return p;
}

// DequantizeLinear: y = (x - zero_point) * scale, per tensor or per axis (no blocks).
Result<OpPlan> plan_dequantize(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  TD_ASSIGN_OR_RETURN(int64_t axis_attr, at.attr_int("axis", 1));
  TD_ASSIGN_OR_RETURN(int64_t block, at.attr_int("block_size", 0));
  if (block != 0) return errors::Unimplemented("{}: blocked quantisation", c.node->label());
  const int64_t sn = prod(c.inputs[1].shape);
  int64_t inner = 1, D = 1;
  if (sn != 1) {
    TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(axis_attr, static_cast<int64_t>(x.size())));
    D = x[static_cast<size_t>(axis)];
    inner = prod(x, static_cast<size_t>(axis) + 1, x.size());
    if (sn != D) return errors::InvalidArgument("{}: {} scales for an axis of {}", c.node->label(), sn, D);
  }
  const bool zp = c.inputs.size() > 2 && c.inputs[2].defined();
  if (zp && prod(c.inputs[2].shape) != sn) return errors::InvalidArgument("{}: zero points", c.node->label());
  TD_ASSIGN_OR_RETURN(std::string XT, c_type(c.inputs[0].dtype));
  const DType sdt = c.inputs[1].dtype;
  TD_ASSIGN_OR_RETURN(std::string ST, c_type(sdt));
  OpPlan p;
  p.inputs = {0, 1};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_dequantize";
  k.in_types = {XT, ST};
  k.out_types = {ST};
  if (zp) {
    p.inputs.push_back(2);
    k.in_types.push_back(XT);
  }
  k.n = prod(x);
  std::string s = sn == 1 ? "i64 ch = 0;\n" : fmt::format("i64 ch = (gid / {}) % {};\n", C(inner), C(D));
  s += fmt::format("float v = ((float)in0[gid] - {}) * {};\n", zp ? "(float)in2[ch]" : "0.0f", load_expr(sdt, "in1[ch]"));
  s += "out0[gid] = " + store_expr(sdt, "v") + ";\n";
  k.body = s;
  return p;
}

// TopK: one work item per row picks the k best by repeated selection (ties: the lower index).
Result<OpPlan> plan_topk(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  TD_ASSIGN_OR_RETURN(int64_t axis_attr, at.attr_int("axis", -1));
  TD_ASSIGN_OR_RETURN(int64_t largest, at.attr_int("largest", 1));
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(axis_attr, static_cast<int64_t>(x.size())));
  if (c.host.size() < 2 || !c.host[1] || c.host[1]->numel() != 1)
    return errors::InvalidArgument("{}: K must be one value", c.node->label());
  const int64_t K = ints_of(*c.host[1])[0];
  const size_t ax = static_cast<size_t>(axis);
  const int64_t A = x[ax], inner = prod(x, ax + 1, x.size()), outer = prod(x, 0, ax);
  if (K < 0 || K > A) return errors::InvalidArgument("{}: K {} exceeds the axis ({})", c.node->label(), K, A);
  if (c.outputs.size() < 2 || prod(c.outputs[0].shape) != outer * K * inner)
    return errors::InvalidArgument("{}: outputs do not fit", c.node->label());
  TD_ASSIGN_OR_RETURN(std::string T, arith_type(c.inputs[0].dtype));
  OpPlan p;
  p.inputs = {0};
  p.outputs = {0, 1};
  auto& k = p.kernel;
  k.name = "tensord_topk";
  k.in_types = {T};
  k.out_types = {T, "i64"};
  k.n = K > 0 ? outer * inner : 0;
  const std::string better = largest ? ">" : "<";
  k.body = fmt::format(
      "i64 o_ = gid / {1}; i64 i_ = gid % {1};\nGLOBAL const {0}* xp = in0 + o_ * {2} + i_;\n"
      "i64 ob = o_ * {3} + i_;\n{0} lastv = 0; i64 lasti = -1;\n"
      "for (i64 r = 0; r < {4}; ++r) {{\n"
      "  i64 bi = -1; {0} bv = 0;\n"
      "  for (i64 j = 0; j < {5}; ++j) {{\n"
      "    {0} v = xp[j * {1}];\n"
      "    if (lasti >= 0 && !(v {6} lastv ? 0 : (v == lastv ? j > lasti : 1))) continue;\n"
      "    if (bi < 0 || v {6} bv) {{ bi = j; bv = v; }}\n"
      "  }}\n"
      "  out0[ob + r * {1}] = bv; out1[ob + r * {1}] = bi; lastv = bv; lasti = bi;\n"
      "}}\n",
      T, C(inner), C(A * inner), C(K * inner), C(K), C(A), better);

  return p;
}

Result<OpPlan> plan_eyelike(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& o = c.outputs[0].shape;
  if (o.size() != 2) return errors::InvalidArgument("{}: EyeLike of rank != 2", c.node->label());
  TD_ASSIGN_OR_RETURN(int64_t kk, at.attr_int("k", 0));
  TD_ASSIGN_OR_RETURN(std::string T, c_type(c.outputs[0].dtype));
  if (is_half_dtype(c.outputs[0].dtype)) return errors::Unimplemented("{}: half outputs", c.node->label());
  OpPlan p;
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_eyelike";
  k.out_types = {T};
  k.n = prod(o);
  k.body = fmt::format("i64 j_ = gid % {0}; i64 i_ = gid / {0};\nout0[gid] = ({1})(j_ - i_ == {2} ? 1 : 0);\n", C(o[1]), T, C(kk));
  return p;
}

Result<OpPlan> plan_onehot(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& ind = c.inputs[0].shape;
  const Shape& o = c.outputs[0].shape;
  TD_ASSIGN_OR_RETURN(int64_t axis_attr, at.attr_int("axis", -1));
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(axis_attr, static_cast<int64_t>(o.size())));
  const size_t ax = static_cast<size_t>(axis);
  if (o.size() != ind.size() + 1 || prod(c.inputs[2].shape) != 2 || prod(ind) * o[static_cast<size_t>(axis)] != prod(o))
    return errors::InvalidArgument("{}: OneHot shapes do not fit", c.node->label());
  const int64_t depth = o[ax], inner = prod(o, ax + 1, o.size());
  TD_ASSIGN_OR_RETURN(std::string IT, c_type(c.inputs[0].dtype));
  TD_ASSIGN_OR_RETURN(std::string VT, c_type(c.inputs[2].dtype));
  if (is_half_dtype(c.inputs[0].dtype)) return errors::Unimplemented("{}: half indices", c.node->label());
  OpPlan p;
  p.inputs = {0, 2};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_onehot";
  k.in_types = {IT, VT};
  k.out_types = {VT};
  k.n = prod(o);
  k.body = fmt::format(
      "i64 i_ = gid % {0}; i64 d_ = (gid / {0}) % {1}; i64 o_ = gid / ({0} * {1});\n"
      "i64 idx = (i64)in0[o_ * {0} + i_]; if (idx < 0) idx += {1};\nout0[gid] = idx == d_ ? in1[1] : in1[0];\n",
      C(inner), C(depth));
  return p;
}

Result<OpPlan> plan_gathernd(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  const Shape& ind = c.inputs[1].shape;
  TD_ASSIGN_OR_RETURN(int64_t B, at.attr_int("batch_dims", 0));
  if (ind.empty() || B < 0 || static_cast<size_t>(B) >= ind.size()) return errors::InvalidArgument("{}: batch_dims", c.node->label());
  const int64_t m = ind.back();
  const size_t b = static_cast<size_t>(B);
  if (m < 1 || b + static_cast<size_t>(m) > x.size()) return errors::InvalidArgument("{}: index tuples too long", c.node->label());
  const int64_t tuples = prod(ind, 0, ind.size() - 1), per_batch = prod(ind, b, ind.size() - 1);
  const int64_t inner = prod(x, b + static_cast<size_t>(m), x.size());
  if (tuples * inner != prod(c.outputs[0].shape)) return errors::InvalidArgument("{}: output does not fit", c.node->label());
  {  // every index within its dim
    if (c.host.size() < 2 || !c.host[1]) return errors::Internal("{}: no host copy of the indices", c.node->label());
    TD_ASSIGN_OR_RETURN(auto v, c.host[1]->to_int64_vector());
    for (size_t i = 0; i < v.size(); ++i) {
      const size_t axis = b + i % static_cast<size_t>(m);
      const int64_t dim = x[axis];
      if (v[i] < -dim || v[i] >= dim)
        return errors::InvalidArgument("{}: index {} is out of range for axis {} of size {}",
                                       c.node->label(), v[i], axis, dim);
    }
  }
  TD_ASSIGN_OR_RETURN(std::string T, bits_type(c.inputs[0].dtype));
  const std::string IT = c.inputs[1].dtype == DType::kInt32 ? "int" : "i64";
  const auto st = strides_of(x);
  OpPlan p;
  p.inputs = {0, 1};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_gathernd";
  k.in_types = {T, IT};
  k.out_types = {T};
  k.n = tuples * inner;
  std::string s = fmt::format("i64 i_ = gid % {0}; i64 t_ = gid / {0};\ni64 off = (t_ / {1}) * {2} + i_;\n", C(inner),
                              C(per_batch), C(prod(x, b, x.size())));
  for (int64_t j = 0; j < m; ++j) {
    const size_t d = b + static_cast<size_t>(j);
    s += fmt::format("{{ i64 v = (i64)in1[t_ * {0} + {1}]; if (v < 0) v += {2}; if (v < 0) v = 0; if (v >= {2}) v = {2} - 1; off += v * {3}; }}\n",
                     C(m), C(j), C(x[d]), C(st[d]));
  }
  s += "out0[gid] = in0[off];\n";
  k.body = s;
  return p;
}

std::string combine(const std::string& reduction, const std::string& acc, const std::string& u) {
  if (reduction == "add") return acc + " = " + acc + " + " + u + ";";
  if (reduction == "mul") return acc + " = " + acc + " * " + u + ";";
  if (reduction == "max") return "if (" + u + " > " + acc + ") " + acc + " = " + u + ";";
  if (reduction == "min") return "if (" + u + " < " + acc + ") " + acc + " = " + u + ";";
  return acc + " = " + u + ";";
}

// ScatterElements (and Scatter): each output element scans the updates that could land on it
// (along the axis), in order, so duplicates apply as the reference applies them.
Result<OpPlan> plan_scatter_elements(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  const Shape& ind = c.inputs[1].shape;
  TD_ASSIGN_OR_RETURN(int64_t axis_attr, at.attr_int("axis", 0));
  TD_ASSIGN_OR_RETURN(std::string reduction, at.attr_string("reduction", "none"));
  TD_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(axis_attr, static_cast<int64_t>(x.size())));
  const size_t ax = static_cast<size_t>(axis);
  if (ind.size() != x.size() || c.inputs[2].shape != ind) return errors::InvalidArgument("{}: shapes do not fit", c.node->label());
  for (size_t d = 0; d < x.size(); ++d)
    if (d != ax && ind[d] > x[d]) return errors::InvalidArgument("{}: indices larger than data", c.node->label());
  TD_RETURN_IF_ERROR(check_indices(c, 1, x[ax]));
  TD_ASSIGN_OR_RETURN(std::string T, reduction == "none" ? bits_type(c.inputs[0].dtype) : arith_type(c.inputs[0].dtype));
  const std::string IT = c.inputs[1].dtype == DType::kInt32 ? "int" : "i64";
  OpPlan p;
  p.inputs = {0, 1, 2};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_scatter_elements";
  k.in_types = {T, IT, T};
  k.out_types = {T};
  k.n = prod(x);
  std::string s = decompose("gid", x, "q");
  s += fmt::format("{} acc = in0[gid];\n", T);
  std::string inside = "1";
  for (size_t d = 0; d < x.size(); ++d)
    if (d != ax) inside += fmt::format(" && q{} < {}", d, C(ind[d]));
  const auto ist = strides_of(ind);
  std::string base = "0";
  for (size_t d = 0; d < x.size(); ++d)
    if (d != ax) base += fmt::format(" + q{} * {}", d, C(ist[d]));
  s += fmt::format("if ({}) {{\n i64 ib = {};\n for (i64 j = 0; j < {}; ++j) {{\n  i64 v = (i64)in1[ib + j * {}]; if (v < 0) v += {};\n"
                   "  if (v == q{}) {{ {} }}\n }}\n}}\nout0[gid] = acc;\n",
                   inside, base, C(ind[ax]), C(ist[ax]), C(x[ax]), ax, combine(reduction, "acc", fmt::format("in2[ib + j * {}]", C(ist[ax]))));
  k.body = s;
  return p;
}

// ScatterND: each output element scans the index tuples in order.
Result<OpPlan> plan_scatternd(const OpCall& c) {
  NodeAttrs at(*c.node);
  const Shape& x = c.inputs[0].shape;
  const Shape& ind = c.inputs[1].shape;
  TD_ASSIGN_OR_RETURN(std::string reduction, at.attr_string("reduction", "none"));
  if (ind.empty()) return errors::InvalidArgument("{}: indices of rank 0", c.node->label());
  const int64_t m = ind.back();
  if (m < 1 || static_cast<size_t>(m) > x.size()) return errors::InvalidArgument("{}: index tuples", c.node->label());
  const int64_t tuples = prod(ind, 0, ind.size() - 1), inner = prod(x, static_cast<size_t>(m), x.size());
  if (prod(c.inputs[2].shape) != tuples * inner) return errors::InvalidArgument("{}: updates do not fit", c.node->label());
  {
    if (c.host.size() < 2 || !c.host[1]) return errors::Internal("{}: no host copy of the indices", c.node->label());
    TD_ASSIGN_OR_RETURN(auto v, c.host[1]->to_int64_vector());
    for (size_t i = 0; i < v.size(); ++i) {
      const size_t axis = i % static_cast<size_t>(m);
      const int64_t dim = x[axis];
      if (v[i] < -dim || v[i] >= dim)
        return errors::InvalidArgument("{}: index {} is out of range for axis {} of size {}",
                                       c.node->label(), v[i], axis, dim);
    }
  }
  TD_ASSIGN_OR_RETURN(std::string T, reduction == "none" ? bits_type(c.inputs[0].dtype) : arith_type(c.inputs[0].dtype));
  const std::string IT = c.inputs[1].dtype == DType::kInt32 ? "int" : "i64";
  const auto st = strides_of(x);
  OpPlan p;
  p.inputs = {0, 1, 2};
  p.outputs = {0};
  auto& k = p.kernel;
  k.name = "tensord_scatternd";
  k.in_types = {T, IT, T};
  k.out_types = {T};
  k.n = prod(x);
  std::string s = fmt::format("{} acc = in0[gid];\ni64 i_ = gid % {};\ni64 head = gid - i_;\n", T, C(inner));
  s += fmt::format("for (i64 t = 0; t < {}; ++t) {{\n i64 off = 0;\n", C(tuples));
  for (int64_t j = 0; j < m; ++j)
    s += fmt::format(" {{ i64 v = (i64)in1[t * {} + {}]; if (v < 0) v += {}; off += v * {}; }}\n", C(m), C(j),
                     C(x[static_cast<size_t>(j)]), C(st[static_cast<size_t>(j)]));
  s += fmt::format(" if (off == head) {{ {} }}\n}}\nout0[gid] = acc;\n", combine(reduction, "acc", fmt::format("in2[t * {} + i_]", C(inner))));
  k.body = s;
  return p;
}

}  // namespace

// float16 / bfloat16 <-> float32 in integer code (round to nearest even), in both dialects.
const char* const kHalfHelpers = R"(
DEVFN float td_h2f(ushort h) {
  uint s = ((uint)h & 0x8000u) << 16; uint e = ((uint)h >> 10) & 0x1fu; uint m = (uint)h & 0x3ffu;
  if (e == 0u) { float f = (float)m * 5.9604644775390625e-8f; return s ? -f : f; }
  if (e == 31u) return U2F(s | 0x7f800000u | (m << 13));
  return U2F(s | ((e + 112u) << 23) | (m << 13));
}
DEVFN ushort td_f2h(float f) {
  uint x = F2U(f); uint s = (x >> 16) & 0x8000u; uint ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (ushort)(s | 0x7e00u);
  if (ax >= 0x477ff000u) return (ushort)(s | 0x7c00u);
  if (ax < 0x38800000u) { float r = U2F(ax) * 16777216.0f; return (ushort)(s | (uint)rint(r)); }
  uint mant = ax & 0x7fffffu; uint h = (((ax >> 23) - 112u) << 10) | (mant >> 13); uint rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h += 1u;
  return (ushort)(s | h);
}
DEVFN float td_reflect(float x, float lo, float hi) {
  float range = hi - lo;
  if (range <= 0.0f) return lo;
  if (x >= lo && x <= hi) return x;
  float dx = x < lo ? lo - x : x - hi;
  int even = fmod(floor(dx / range), 2.0f) == 0.0f;
  float r = fmod(dx, range);
  if (x < lo) return even ? lo + r : hi - r;
  return even ? hi - r : lo + r;
}
DEVFN float td_bf2f(ushort b) { return U2F((uint)b << 16); }
DEVFN ushort td_f2bf(float f) {
  uint x = F2U(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (ushort)((x >> 16) | 0x40u);
  return (ushort)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
)";

std::string print_template(const TemplateKernel& k, Dialect dialect) {
  std::string s;
  if (dialect == Dialect::kOpenCL) {
    s = "// tensord generated (OpenCL C)\n#ifdef cl_khr_fp64\n#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n#endif\n"
        "typedef long i64;\ntypedef ulong u64;\n"
        "typedef char i8;\n#define KERNEL __kernel void\n#define GLOBAL __global\n#define GID ((i64)get_global_id(0))\n"
        "#define DEVFN inline\n#define F2U(x) as_uint(x)\n#define U2F(x) as_float(x)\n";
  } else {
    s = "// tensord generated (CUDA C)\ntypedef long long i64;\ntypedef unsigned long long u64;\n"
        "typedef unsigned char uchar;\ntypedef unsigned short ushort;\ntypedef unsigned int uint;\n"
        "typedef signed char i8;\n"
        "#define KERNEL extern \"C\" __global__ void\n#define GLOBAL\n"
        "#define GID ((i64)blockIdx.x * blockDim.x + threadIdx.x)\n"
        "#ifndef INFINITY\n#define INFINITY __int_as_float(0x7f800000)\n#endif\n"
        "#ifndef NAN\n#define NAN __int_as_float(0x7fc00000)\n#endif\n"
        "#define DEVFN __device__ inline\n#define F2U(x) __float_as_uint(x)\n#define U2F(x) __uint_as_float(x)\n";
  }
  if (k.body.find("td_") != std::string::npos) s += kHalfHelpers;
  s += "KERNEL " + k.name + "(";
  std::string casts;
  bool first = true;
  for (size_t i = 0; i < k.in_types.size(); ++i) {
    s += fmt::format("{}GLOBAL const uchar* p{}, i64 p{}_off", first ? "" : ", ", i, i);
    casts += fmt::format("GLOBAL const {0}* in{1} = (GLOBAL const {0}*)(p{1} + p{1}_off);\n", k.in_types[i], i);
    first = false;
  }
  for (size_t i = 0; i < k.out_types.size(); ++i) {
    s += fmt::format("{}GLOBAL uchar* r{}, i64 r{}_off", first ? "" : ", ", i, i);
    casts += fmt::format("GLOBAL {0}* out{1} = (GLOBAL {0}*)(r{1} + r{1}_off);\n", k.out_types[i], i);
    first = false;
  }
  s += ") {\nconst i64 gid = GID;\nif (gid >= " + C(k.n) + ") return;\n" + casts + k.body + "}\n";
  return s;
}

bool is_template_op(const std::string& op) { return template_ops().count(op) > 0; }

bool is_template_elementwise(const std::string& op) {
  return op == "Max" || op == "Min" || op == "Mod" || op == "Pow" || op == "Cast" || op == "CastLike" ||
         op == "Clip" || op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "BitShift" ||
         op == "Shrink";
}

Status template_elementwise_supported(const Node& node, const std::vector<TensorType>& in) {
  auto no = [&](const std::string& why) {
    return errors::Unimplemented("{}: generated kernels: {} ({})", node.op, why, node.label());
  };
  if (!is_template_elementwise(node.op) || node.outputs.size() != 1) return no("no template");
  if (in.empty() || !in[0].defined()) return no("no input");
  for (const auto& t : in) {
    if (!t.defined()) continue;
    if (!shape_is_static(t.shape)) return no("dynamic shapes");
    if (!c_type(t.dtype).ok()) return no(std::string("no code for ") + dtype_name(t.dtype));
  }
  if (node.op == "Cast") {
    auto to = NodeAttrs(node).attr_int("to", 0);
    if (!to.ok() || !c_type(static_cast<DType>(*to)).ok()) return no("cast target");
  }
  if (node.op == "Clip" && node.attrs.count("min") + node.attrs.count("max") > 0) return no("Clip's attribute form");
  if (node.op != "Cast" && node.op != "CastLike" && in[0].dtype == DType::kBool) return no("numeric inputs only");
  const bool int_in = !is_float_dtype(in[0].dtype);
  if (node.op == "Div" && int_in) return no("integer division (a zero divisor is an error a kernel cannot raise)");
  if (node.op == "BitShift" && !is_unsigned_dtype(in[0].dtype)) return no("unsigned inputs only");
  if (node.op == "Shrink" && in[0].dtype == DType::kBool) return no("numeric inputs only");
  if ((node.op == "Max" || node.op == "Min" || node.op == "Mod" || node.op == "Clip" || node.op == "Add" ||
       node.op == "Sub" || node.op == "Mul" || node.op == "Div" || node.op == "BitShift"))
    for (const auto& t : in)
      if (t.defined() && t.dtype != in[0].dtype) return no("inputs of one dtype");
  if (node.op == "Clip")
    for (size_t i = 1; i < in.size(); ++i)
      if (in[i].defined() && shape_numel(in[i].shape) != 1) return no("one-element bounds");
  return OkStatus();
}

std::vector<int> template_host_inputs(const Node& node) {
  const std::string& op = node.op;
  if (op == "Gather" || op == "GatherElements" || op == "CumSum" || op == "Trilu" || op == "GatherND" ||
      op == "ScatterElements" || op == "Scatter" || op == "ScatterND" ||
      op == "NegativeLogLikelihoodLoss" || op == "SoftmaxCrossEntropyLoss")
    return {1};
  if (op == "Resize") {
    std::vector<int> h;
    for (size_t i = 1; i < node.inputs.size() && i <= 3; ++i)
      if (!node.inputs[i].empty()) h.push_back(static_cast<int>(i));
    return h;
  }
  if (op == "Range") return {0, 1, 2};
  if (op == "ReverseSequence" || op == "TopK" || op == "Mod") return {1};
  if (op == "HannWindow" || op == "HammingWindow" || op == "BlackmanWindow" || op == "ConstantOfShape") return {0};
  if (op.rfind("Reduce", 0) == 0 && node.inputs.size() > 1 && !node.inputs[1].empty()) return {1};
  if (op == "Dropout") {
    std::vector<int> h;
    for (size_t i = 1; i < node.inputs.size() && i <= 2; ++i)
      if (!node.inputs[i].empty()) h.push_back(static_cast<int>(i));
    return h;
  }
  if (op == "Pad") {
    std::vector<int> h;
    for (size_t i = 1; i < node.inputs.size() && i <= 3; ++i)
      if (!node.inputs[i].empty()) h.push_back(static_cast<int>(i));
    return h;
  }
  return {};
}

Status template_supported(const Node& node, const std::vector<TensorType>& in) {
  const std::string& op = node.op;
  auto no = [&](const std::string& why) {
    return errors::Unimplemented("{}: generated kernels: {} ({})", op, why, node.label());
  };
  if (!is_template_op(op)) return no("no template");
  if (in.empty() || !in[0].defined()) return no("no input");
  for (const auto& t : in)
    if (t.defined() && !shape_is_static(t.shape)) return no("dynamic shapes");
  auto all_f32 = [&](size_t n) {
    for (size_t i = 0; i < in.size() && i < n; ++i)
      if (in[i].defined() && in[i].dtype != DType::kFloat32) return false;
    return true;
  };
  if (op == "MatMul" || op == "Gemm" || op == "Conv" || op == "ConvTranspose") {
    if (in.size() < 2 || !all_f32(3)) return no("float32 only");
    return OkStatus();
  }
  if (op == "MaxPool" && in[0].dtype != DType::kFloat32) {
    if (!c_type(in[0].dtype).ok() || is_half_dtype(in[0].dtype) || in[0].dtype == DType::kBool)
      return no("MaxPool over this dtype");
    if (node.outputs.size() > 1 && int_attr(node, "storage_order") != 0) return no("storage_order=1");
    return OkStatus();
  }
  // Softmax and LayerNormalization over float16/bfloat16 too (computed in float).
  const bool halves_ok = op == "Softmax" || op == "LogSoftmax" || op == "Hardmax" || op == "LayerNormalization";
  if (op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool" || op == "GlobalMaxPool" ||
      op == "Softmax" || op == "LogSoftmax" || op == "Hardmax" || op == "LayerNormalization" ||
      op == "InstanceNormalization") {
    bool one_half_dtype = halves_ok && is_half_dtype(in[0].dtype);
    for (size_t i = 1; i < in.size() && i < 3; ++i)
      one_half_dtype &= !in[i].defined() || in[i].dtype == in[0].dtype;
    if (!all_f32(3) && !one_half_dtype) return no(halves_ok ? "float32, float16 or bfloat16 only" : "float32 only");
    if (op == "LayerNormalization" && (in.size() < 2 || !in[1].defined())) return no("no scale");
    if (op == "LayerNormalization" && node.attrs.count("stash_type") && int_attr(node, "stash_type") != 1)
      return no("stash_type other than float32");
    if (op == "InstanceNormalization" && in.size() < 3) return no("scale and bias");
    if (op == "MaxPool" && node.outputs.size() > 1 && int_attr(node, "storage_order") != 0)
      return no("storage_order=1");
    return OkStatus();
  }
  if (op == "BatchNormalization") {
    if (in.size() < 5 || !all_f32(5)) return no("float32 only");
    if (node.outputs.size() > 1 || int_attr(node, "training_mode") != 0)
      return no("training mode");
    return OkStatus();
  }
  if (op == "NegativeLogLikelihoodLoss" || op == "SoftmaxCrossEntropyLoss") {
    if (in.size() < 2 || (in[0].dtype != DType::kFloat32 && in[0].dtype != DType::kFloat64) ||
        (in[1].dtype != DType::kInt32 && in[1].dtype != DType::kInt64) ||
        (in.size() > 2 && in[2].defined() && in[2].dtype != in[0].dtype))
      return no("float inputs and int32/int64 targets only");
    return OkStatus();
  }
  if (op == "ArgMax" || op == "ArgMin" || op == "CumSum") {
    if (!arith_type(in[0].dtype).ok()) return no("float32, int32 and int64 only");
    return OkStatus();
  }
  if (op == "Resize") {
    if (in[0].dtype != DType::kFloat32) return no("float32 only");
    if (node.inputs.size() < 3) return no("opset 10's form (scales as input 1)");
    if (int_attr(node, "antialias") != 0) return no("antialias");
    return OkStatus();
  }
  if (op == "Range") return arith_type(in[0].dtype).ok() ? OkStatus() : no("float32/64, int32, int64 only");
  if (op == "LRN") return in[0].dtype == DType::kFloat32 ? OkStatus() : no("float32 only");
  if (op == "DequantizeLinear") {
    if (in.size() < 2 || !c_type(in[0].dtype).ok() || is_half_dtype(in[0].dtype) || !is_float_dtype(in[1].dtype) ||
        in[1].dtype == DType::kFloat64 || int_attr(node, "block_size") != 0)
      return no("integer inputs and float32/16 scales, unblocked");
    return OkStatus();
  }
  if (op == "TopK") return arith_type(in[0].dtype).ok() && node.outputs.size() == 2 ? OkStatus() : no("float32/64, int32, int64");
  if (op == "HannWindow" || op == "HammingWindow" || op == "BlackmanWindow" || op == "ConstantOfShape")
    return arith_type(in[0].dtype).ok() ? OkStatus() : no("an integer size");
  if (op == "GridSample")
    return in.size() > 1 && in[0].dtype == DType::kFloat32 && in[1].dtype == DType::kFloat32 ? OkStatus()
                                                                                               : no("float32 only");
  if (op == "ReverseSequence" && (in.size() < 2 || (in[1].dtype != DType::kInt32 && in[1].dtype != DType::kInt64)))
    return no("int32/int64 sequence lengths");
  if (op == "EyeLike" && node.attrs.count("dtype")) {
    const int64_t dt = int_attr(node, "dtype");
    if (dt == static_cast<int64_t>(DType::kFloat16) || dt == static_cast<int64_t>(DType::kBFloat16) ||
        !c_type(static_cast<DType>(dt)).ok())
      return no("EyeLike to this dtype");
  }
  if (op == "EyeLike" && node.attrs.count("dtype") == 0 && is_half_dtype(in[0].dtype)) return no("half outputs");
  if (op == "Pad" && in[0].dtype != DType::kFloat32 && in[0].dtype != DType::kInt32 && in[0].dtype != DType::kInt64 &&
      in[0].dtype != DType::kInt8 && in[0].dtype != DType::kUInt8 && in[0].dtype != DType::kBool)
    return no("Pad over this dtype");
  if (op == "EyeLike" || op == "OneHot") {
    if (op == "OneHot" && (in.size() < 3 || !c_type(in[2].dtype).ok() || is_half_dtype(in[2].dtype) ||
                           !arith_type(in[0].dtype).ok()))
      return no("OneHot over these dtypes");
    return OkStatus();
  }
  if (op == "ScatterElements" || op == "Scatter" || op == "ScatterND") {
    if (in.size() < 3 || (in[1].dtype != DType::kInt32 && in[1].dtype != DType::kInt64) || in[2].dtype != in[0].dtype)
      return no("int32/int64 indices and updates of the data's dtype");
    const auto red = NodeAttrs(node).attr_string("reduction", "none");
    if (!red.ok() || (*red != "none" && !arith_type(in[0].dtype).ok())) return no("reductions over float32/int32/int64");
    if (*red != "none" && *red != "add" && *red != "mul" && *red != "max" && *red != "min") return no("reduction");
    return bits_type(in[0].dtype).ok() ? OkStatus() : no("element size");
  }
  if (op == "Dropout" && node.inputs.size() > 2 && !node.inputs[2].empty())
    return no("training_mode as an input (random masks are not generated)");
  // data movement
  if (!bits_type(in[0].dtype).ok()) return no("elements of 1, 2, 4 or 8 bytes only");
  if (op == "Concat")
    for (const auto& t : in)
      if (!t.defined() || t.dtype != in[0].dtype) return no("mixed inputs");
  if ((op == "Gather" || op == "GatherElements" || op == "GatherND") &&
      (in.size() < 2 || (in[1].dtype != DType::kInt32 && in[1].dtype != DType::kInt64)))
    return no("int32/int64 indices only");
  return OkStatus();
}

Result<OpPlan> plan_template(const OpCall& c) {
  if (c.node && is_template_elementwise(c.node->op)) return plan_ew(c);
  if (!c.node || c.inputs.empty() || c.outputs.empty() || !c.outputs[0].defined())
    return errors::Internal("generated kernels: an empty call");
  if (c.node->op != "Range" && c.node->op != "ConstantOfShape" && c.node->op.find("Window") == std::string::npos)
    for (const auto& t : c.outputs)
      if (t.defined() && !shape_is_static(t.shape))
        return errors::Internal("{}: output shape not known", c.node->label());
  const std::string& op = c.node->op;
  if (op == "MatMul") return plan_matmul(c);
  if (op == "Gemm") return plan_gemm(c);
  if (op == "Conv") return plan_conv(c);
  if (op == "ConvTranspose") return plan_conv_transpose(c);
  if (op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool" || op == "GlobalMaxPool")
    return plan_pool(c);
  if (op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") return plan_softmax(c);
  if (op == "LayerNormalization") return plan_layer_norm(c);
  if (op == "BatchNormalization") return plan_batch_norm(c);
  if (op == "InstanceNormalization") return plan_instance_norm(c);
  if (op == "Concat") return plan_concat(c);
  if (op == "Split") return plan_split(c);
  if (op == "Gather" || op == "GatherElements") return plan_gather(c);
  if (op == "Pad") return plan_pad(c);
  if (op == "Tile") return plan_tile(c);
  if (op == "ArgMax" || op == "ArgMin") return plan_arg(c);
  if (op == "CumSum") return plan_cumsum(c);
  if (op == "NegativeLogLikelihoodLoss" || op == "SoftmaxCrossEntropyLoss") return plan_loss(c);
  if (op == "Trilu") return plan_trilu(c);
  if (op == "Dropout") return plan_dropout(c);
  if (op == "Resize") return plan_resize(c);
  if (op == "EyeLike") return plan_eyelike(c);
  if (op == "OneHot") return plan_onehot(c);
  if (op == "GatherND") return plan_gathernd(c);
  if (op == "ScatterElements" || op == "Scatter") return plan_scatter_elements(c);
  if (op == "ScatterND") return plan_scatternd(c);
  if (op == "Range") return plan_range(c);
  if (op == "LRN") return plan_lrn(c);
  if (op == "DequantizeLinear") return plan_dequantize(c);
  if (op == "TopK") return plan_topk(c);
  if (op == "HannWindow" || op == "HammingWindow" || op == "BlackmanWindow") return plan_window_fn(c);
  if (op == "ConstantOfShape") return plan_constant_of_shape(c);
  if (op.rfind("Reduce", 0) == 0) return plan_reduce64(c);
  if (op == "GridSample") return plan_grid_sample(c);
  if (op == "ReverseSequence") return plan_reverse_sequence(c);
  if (op == "DepthToSpace" || op == "SpaceToDepth") return plan_depth_space(c);
  return errors::Unimplemented("{}: no generated kernel", c.node->label());
}

}  // namespace tensord::codegen
