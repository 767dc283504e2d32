// The convolution region's generated kernels (templates.h: conv_geometry, im2col, the tiled
// GEMM with its epilogue, the depthwise kernel, the channel fill), apart from the op plans of
// templates.cpp.
#include <algorithm>
#include <cmath>

#include "backends/codegen/template_util.h"
#include "backends/codegen/templates.h"
#include "core/errors.h"
#include "core/node_attrs.h"

namespace tensord::codegen {

using namespace tmpl;

Result<ConvGeometry> conv_geometry(const OpCall& c) {
  const Shape& x = c.inputs.at(0).shape;
  const Shape& wt = c.inputs.at(1).shape;
  const Shape& o = c.outputs.at(0).shape;
  if ((x.size() != 3 && x.size() != 4) || wt.size() != x.size() || o.size() != x.size())
    return errors::Unimplemented("{}: im2col convolution of 1-D and 2-D inputs only", c.node->label());
  NodeAttrs at(*c.node);
  ConvGeometry g;
  TD_ASSIGN_OR_RETURN(g.G, at.attr_int("group", 1));
  g.N = x[0];
  g.C = x[1];
  g.M = wt[0];
  if (g.G <= 0 || wt[1] * g.G != g.C || g.M % g.G != 0 || o[1] != g.M || o[0] != g.N)
    return errors::InvalidArgument("{}: Conv channels and groups do not fit", c.node->label());
  TD_ASSIGN_OR_RETURN(Window w, window(*c.node, spatial(x), spatial(o), spatial(wt)));
  const bool two = x.size() == 4;
  g.H = two ? x[2] : 1;
  g.W = x.back();
  g.KH = two ? wt[2] : 1;
  g.KW = wt.back();
  g.OH = two ? o[2] : 1;
  g.OW = o.back();
  const size_t last = w.rank - 1;
  g.SW = w.strides[last];
  g.DW = w.dilations[last];
  g.PL = w.pad_begin[last];
  if (two) {
    g.SH = w.strides[0];
    g.DH = w.dilations[0];
    g.PT = w.pad_begin[0];
  }
  g.bias = c.inputs.size() > 2 && c.inputs[2].defined();
  if (g.bias && prod(c.inputs[2].shape) != g.M)
    return errors::InvalidArgument("{}: bias size", c.node->label());
  return g;
}

TemplateKernel im2col_kernel(const ConvGeometry& g) {
  // One work item per output row (c, kh, kw, oh): a contiguous store of OW columns, the
  // window row's loads at a constant stride (a loop the device compiler vectorises; one work
  // item per element left a CPU device scheduling millions of tiny work items).
  TemplateKernel k;
  k.name = "tensord_im2col";
  k.in_types = {"float"};
  k.out_types = {"float"};
  k.n = g.N * g.C * g.KH * g.KW * g.OH;
  k.body = fmt::format(
      "i64 oh = gid % {OH}; i64 t = gid / {OH};\n"
      "i64 kw = t % {KW}; t /= {KW}; i64 kh = t % {KH}; t /= {KH};\n"
      "i64 ih = oh * {SH} - {PT} + kh * {DH};\n"
      "GLOBAL float* op = out0 + gid * {OW};\n"
      "if (ih < 0 || ih >= {H}) {{\nfor (i64 ow = 0; ow < {OW}; ++ow) op[ow] = 0.0f;\n}} else {{\n"
      "GLOBAL const float* ip = in0 + (t * {H} + ih) * {W};\n"
      "for (i64 ow = 0; ow < {OW}; ++ow) {{\ni64 iw = ow * {SW} - {PL} + kw * {DW};\n"
      "op[ow] = (iw >= 0 && iw < {W}) ? ip[iw] : 0.0f;\n}}\n}}\n",
      fmt::arg("OW", C(g.OW)), fmt::arg("OH", C(g.OH)), fmt::arg("KW", C(g.KW)), fmt::arg("KH", C(g.KH)),
      fmt::arg("SH", C(g.SH)), fmt::arg("PT", C(g.PT)), fmt::arg("DH", C(g.DH)), fmt::arg("SW", C(g.SW)),
      fmt::arg("PL", C(g.PL)), fmt::arg("DW", C(g.DW)), fmt::arg("H", C(g.H)), fmt::arg("W", C(g.W)));
  return k;
}

TemplateKernel conv_gemm_kernel(const ConvGeometry& g, int64_t tile) {
  const int64_t Mg = g.M / g.G, K = (g.C / g.G) * g.KH * g.KW, N = g.OH * g.OW;
  tile = std::clamp<int64_t>(tile, 1, 16);
  const int64_t tiles = (Mg + tile - 1) / tile;
  TemplateKernel k;
  k.name = "tensord_conv_gemm";
  k.in_types = {"float", "float"};
  if (g.bias) k.in_types.push_back("float");
  k.out_types = {"float"};
  k.n = g.N * g.G * tiles * N;
  std::string s = fmt::format(
      "i64 n_ = gid % {N}; i64 t_ = gid / {N}; i64 m0 = (t_ % {T}) * {TM}; i64 b_ = t_ / {T};\n"
      "GLOBAL const float* xp = in0 + b_ * {KN} + n_;\n"
      "GLOBAL const float* wp = in1 + (b_ % {G}) * {MK};\n"
      "GLOBAL float* op = out0 + b_ * {MN} + n_;\n",
      fmt::arg("N", C(N)), fmt::arg("T", C(tiles)), fmt::arg("TM", C(tile)), fmt::arg("KN", C(K * N)),
      fmt::arg("G", C(g.G)), fmt::arg("MK", C(Mg * K)), fmt::arg("MN", C(Mg * N)));
  // Rows past Mg (the last tile) read row Mg - 1 and are not stored.
  for (int64_t i = 0; i < tile; ++i) {
    s += fmt::format("i64 row{0} = min(m0 + {0}, {1});\n", i, C(Mg - 1));
    s += g.bias ? fmt::format("float a{0} = in2[(b_ % {1}) * {2}+ row{0}];\n", i, C(g.G), C(Mg))
                : fmt::format("float a{} = 0.0f;\n", i);
  }
  s += fmt::format("for (i64 k = 0; k < {}; ++k) {{\nfloat x = xp[k * {}];\n", C(K), C(N));
  for (int64_t i = 0; i < tile; ++i) s += fmt::format("a{0} += wp[row{0} * {1} + k] * x;\n", i, C(K));
  s += "}\n";
  for (int64_t i = 0; i < tile; ++i)
    s += fmt::format("if (m0 + {0} < {1}) op[(m0 + {0}) * {2}] = a{0};\n", i, C(Mg), C(N));
  k.body = s;
  return k;
}

std::string epilogue_activation(const ConvEpilogue& e, const std::string& v) {
  const std::string a = flit(e.alpha), b = flit(e.beta);
  // Relu and Clip keep a NaN (ONNX, the reference kernels); fmax/fmin alone would drop it.
  // select() on isnan() works for float and floatN alike (a vector's lanes by their MSB).
  if (e.activation == "Relu") return fmt::format("select(fmax({0}, 0.0f), {0}, isnan({0}))", v);
  if (e.activation == "Clip")
    return fmt::format("select(fmin(fmax({0}, {1}), {2}), {0}, isnan({0}))", v, a, b);
  if (e.activation == "LeakyRelu") return fmt::format("({0} >= 0.0f ? {0} : {0} * {1})", v, a);
  if (e.activation == "HardSigmoid") return fmt::format("fmax(fmin({} * {} + {}, 1.0f), 0.0f)", v, a, b);
  if (e.activation == "HardSwish")
    return fmt::format("({0} * fmax(fmin({0} * (1.0f / 6.0f) + 0.5f, 1.0f), 0.0f))", v);
  if (e.activation == "Sigmoid") return fmt::format("(1.0f / (1.0f + exp(-{})))", v);
  return v;
}

namespace {

// The epilogue of a vector `r` of `v` outputs at out0 + o (the first `count` lanes are
// stored: the full vector when `full`), bias `bias_index` (an expression) when e.bias,
// residual input `res` (a kernel input name) when e.residual.
std::string vec_epilogue(const ConvEpilogue& e, int64_t v, const std::string& r, const std::string& o,
                         const std::string& bias_index, const std::string& res, const std::string& count) {
  std::string s = "{\n";
  const std::string vt = fmt::format("float{}", v);
  s += fmt::format("{} y_ = {};\n", vt, r);
  if (e.bias) s += fmt::format("y_ += in2[{}];\n", bias_index);
  s += fmt::format("if ({} >= {}) {{\n", count, v);
  if (e.residual) s += fmt::format("y_ += vload{}(0, {} + {});\n", v, res, o);
  s += fmt::format("vstore{}({}, 0, out0 + {});\n", v, epilogue_activation(e, "y_"), o);
  s += "} else {\nfloat t_[" + std::to_string(v) + "];\n";
  s += fmt::format("vstore{}(y_, 0, t_);\n", v);
  s += fmt::format("for (int l_ = 0; l_ < {}; ++l_) {{\nfloat z_ = t_[l_];\n", count);
  if (e.residual) s += fmt::format("z_ += {}[{} + l_];\n", res, o);
  s += fmt::format("out0[{} + l_] = {};\n}}\n}}\n}}\n", o, epilogue_activation(e, "z_"));
  return s;
}

// A fused convolution's parameters: in0 (the input or its columns), in1 (the weights), the
// bias (in2) when e.bias, the residual after it when e.residual; one output. Returns the
// residual's input name ("" without one).
std::string conv_epilogue_io(const ConvEpilogue& e, TemplateKernel& k) {
  k.in_types = {"float", "float"};
  if (e.bias) k.in_types.push_back("float");
  const std::string res = e.residual ? fmt::format("in{}", k.in_types.size()) : "";
  if (e.residual) k.in_types.push_back("float");
  k.out_types = {"float"};
  return res;
}

}  // namespace

TemplateKernel conv_gemm_vec_kernel(const ConvGeometry& g, int64_t tm, int64_t v, const ConvEpilogue& e,
                                    bool rows_fastest) {
  const int64_t Mg = g.M / g.G, K = (g.C / g.G) * g.KH * g.KW, NS = g.OH * g.OW;
  tm = std::clamp<int64_t>(tm, 1, 16);
  v = v >= 16 ? 16 : v >= 8 ? 8 : 4;
  const int64_t tiles_m = (Mg + tm - 1) / tm, tiles_n = (NS + v - 1) / v;
  TemplateKernel k;
  k.name = "tensord_conv_gemm_vec";
  const std::string res = conv_epilogue_io(e, k);
  k.n = g.N * g.G * tiles_m * tiles_n;
  const std::string vt = fmt::format("float{}", v);
  std::string s = fmt::format(
      fmt::runtime(rows_fastest
          ? "i64 m0 = (gid % {TMS}) * {TM}; i64 t_ = gid / {TMS}; i64 nt_ = t_ % {TN}; i64 b_ = t_ / {TN};\n"
          : "i64 nt_ = gid % {TN}; i64 t_ = gid / {TN}; i64 m0 = (t_ % {TMS}) * {TM}; i64 b_ = t_ / {TMS};\n"),
      fmt::arg("TN", C(tiles_n)), fmt::arg("TMS", C(tiles_m)), fmt::arg("TM", C(tm)));
  s += fmt::format(
      "i64 n0 = nt_ * {V};\n"
      "GLOBAL const float* xp = in0 + b_ * {KN} + n0;\n"
      "GLOBAL const float* wp = in1 + (b_ % {G}) * {MK};\n",
      fmt::arg("V", C(v)), fmt::arg("KN", C(K * NS)), fmt::arg("G", C(g.G)), fmt::arg("MK", C(Mg * K)));
  // Rows past Mg (the last tile) read row Mg - 1 and are not stored.
  for (int64_t i = 0; i < tm; ++i) {
    s += fmt::format("GLOBAL const float* w{0} = wp + min(m0 + {0}, {1}) * {2};\n", i, C(Mg - 1), C(K));
    s += fmt::format("{} a{} = ({})(0.0f);\n", vt, i, vt);
  }
  std::string fma;
  for (int64_t i = 0; i < tm; ++i) fma += fmt::format("a{0} = fma(({1})(w{0}[k]), x, a{0});\n", i, vt);
  s += fmt::format("if (n0 + {} <= {}) {{\n", v, NS);
  s += fmt::format("for (i64 k = 0; k < {}; ++k) {{\n{} x = vload{}(0, xp + k * {});\n", C(K), vt, v, C(NS));
  s += fma + "}\n} else {\n";
  s += fmt::format("for (i64 k = 0; k < {}; ++k) {{\nfloat c_[{}];\n", C(K), v);
  s += fmt::format("for (int l_ = 0; l_ < {}; ++l_) c_[l_] = n0 + l_ < {} ? xp[k * {} + l_] : 0.0f;\n", v, C(NS),
                   C(NS));
  s += fmt::format("{} x = vload{}(0, c_);\n", vt, v);
  s += fma + "}\n}\n";
  s += fmt::format("i64 left_ = {} - n0;\n", C(NS));
  for (int64_t i = 0; i < tm; ++i) {
    s += fmt::format("if (m0 + {} < {}) ", i, C(Mg));
    s += vec_epilogue(e, v, fmt::format("a{}", i),
                      fmt::format("(b_ * {} + (m0 + {}) * {} + n0)", C(Mg * NS), i, C(NS)),
                      fmt::format("(b_ % {}) * {} + m0 + {}", C(g.G), C(Mg), i), res, "left_");
  }
  k.body = s;
  return k;
}

TemplateKernel depthwise_vec_kernel(const ConvGeometry& g, int64_t v, const ConvEpilogue& e) {
  v = v >= 8 ? 8 : 4;
  const int64_t tiles = (g.OW + v - 1) / v;
  TemplateKernel k;
  k.name = "tensord_depthwise_vec";
  const std::string res = conv_epilogue_io(e, k);
  k.n = g.N * g.C * g.OH * tiles;
  const std::string vt = fmt::format("float{}", v);
  std::string s = fmt::format(
      "i64 ot_ = gid % {T}; i64 t_ = gid / {T}; i64 oh = t_ % {OH}; i64 nc = t_ / {OH}; i64 c_ = nc % {C};\n"
      "i64 ow0 = ot_ * {V}; i64 iw0 = ow0 * {SW} - {PL};\n"
      "GLOBAL const float* xp = in0 + nc * {HW};\n"
      "GLOBAL const float* wp = in1 + c_ * {KK};\n"
      "{VT} acc = ({VT})(0.0f);\n",
      fmt::arg("T", C(tiles)), fmt::arg("OH", C(g.OH)), fmt::arg("C", C(g.C)), fmt::arg("V", C(v)),
      fmt::arg("SW", C(g.SW)), fmt::arg("PL", C(g.PL)), fmt::arg("HW", C(g.H * g.W)),
      fmt::arg("KK", C(g.KH * g.KW)), fmt::arg("VT", vt));
  const bool vec_stride = g.SW == 1 || g.SW == 2;
  const std::string row_loop = fmt::format(
      "for (i64 kh = 0; kh < {KH}; ++kh) {{\ni64 ih = oh * {SH} - {PT} + kh * {DH};\n"
      "if (ih < 0 || ih >= {H}) continue;\nGLOBAL const float* rp = xp + ih * {W};\n"
      "for (i64 kw = 0; kw < {KW}; ++kw) {{\nfloat w_ = wp[kh * {KW} + kw];\ni64 iw = iw0 + kw * {DW};\n",
      fmt::arg("KH", C(g.KH)), fmt::arg("SH", C(g.SH)), fmt::arg("PT", C(g.PT)), fmt::arg("DH", C(g.DH)),
      fmt::arg("H", C(g.H)), fmt::arg("W", C(g.W)), fmt::arg("KW", C(g.KW)), fmt::arg("DW", C(g.DW)));
  if (vec_stride) {
    // Every lane's window inside the row: vector loads (a stride of 2 takes the even lanes).
    s += fmt::format("if (ow0 + {V} <= {OW} && iw0 >= 0 && iw0 + {REACH} < {W}) {{\n", fmt::arg("V", C(v)),
                     fmt::arg("OW", C(g.OW)), fmt::arg("REACH", C((g.KW - 1) * g.DW + g.SW * v - 1)),
                     fmt::arg("W", C(g.W)));
    s += row_loop;
    s += g.SW == 1 ? fmt::format("acc = fma(({})(w_), vload{}(0, rp + iw), acc);\n", vt, v)
                   : fmt::format("acc = fma(({})(w_), vload{}(0, rp + iw).even, acc);\n", vt, 2 * v);
    s += "}\n}\n} else {\n";
  } else {
    s += "{\n";
  }
  s += row_loop;
  s += fmt::format("float q_[{}];\n", v);
  s += fmt::format("for (int l_ = 0; l_ < {0}; ++l_) {{ i64 j_ = iw + l_ * {1}; q_[l_] = j_ >= 0 && j_ < {2} ? rp[j_] : 0.0f; }}\n",
                   v, C(g.SW), C(g.W));
  s += fmt::format("acc = fma(({})(w_), vload{}(0, q_), acc);\n", vt, v);
  s += "}\n}\n}\n";
  s += fmt::format("i64 left_ = {} - ow0;\n", C(g.OW));
  s += vec_epilogue(e, v, "acc", fmt::format("((nc * {} + oh) * {} + ow0)", C(g.OH), C(g.OW)), "c_", res, "left_");
  k.body = s;
  return k;
}

TemplateKernel channel_fill_kernel(int64_t n, int64_t inner, int64_t channels) {
  TemplateKernel k;
  k.name = "tensord_channel_fill";
  k.in_types = {"float"};
  k.out_types = {"float"};
  k.n = n;
  k.body = fmt::format("out0[gid] = in0[(gid / {}) % {}];\n", C(inner), C(channels));
  return k;
}

}  // namespace tensord::codegen
