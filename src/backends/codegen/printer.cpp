#include "backends/codegen/printer.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/errors.h"

namespace tensord::codegen {
namespace {

std::string v(int k) { return "v" + std::to_string(k); }

// True when `strides` address the index space row-major with no broadcasting.
bool contiguous(const std::vector<int64_t>& strides, const std::vector<int64_t>& dims) {
  int64_t s = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    if (strides[d] != s) return false;
    s *= dims[d];
  }
  return true;
}

bool all_zero(const std::vector<int64_t>& strides) {
  for (int64_t s : strides)
    if (s != 0) return false;
  return true;
}

}  // namespace

std::string Printer::float_to_int(Scalar to, const std::string& x) const {
  (void)to;
  return x;
}

Result<std::string> Printer::half_helpers() const {
  return errors::Unimplemented("the {} printer has no float16/bfloat16 storage", dialect());
}

Result<std::string> Printer::start(bool halves) const {
  std::string s = preamble();
  if (halves) {
    TD_ASSIGN_OR_RETURN(std::string h, half_helpers());
    s += h;
  }
  return s;
}

namespace {

const char* to_f32(Storage s) { return s == Storage::kF16 ? "td_f16_to_f32" : "td_bf16_to_f32"; }
const char* from_f32(Storage s) { return s == Storage::kF16 ? "td_f32_to_f16" : "td_f32_to_bf16"; }
// A loaded element (`e`) as the value it is computed as, and a value as the element stored.
std::string load_as(Storage s, const std::string& e) {
  return s == Storage::kPlain ? e : std::string(to_f32(s)) + "(" + e + ")";
}
std::string store_as(Storage s, const std::string& x) {
  return s == Storage::kPlain ? x : std::string(from_f32(s)) + "(" + x + ")";
}

}  // namespace

std::string Printer::literal(Scalar type, double value) const {
  switch (type) {
    case Scalar::kF32: {
      const float f = static_cast<float>(value);
      if (std::isnan(f)) return float_nan();
      if (std::isinf(f)) return f > 0 ? float_infinity() : "(-" + float_infinity() + ")";
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%af", static_cast<double>(f));  // exact
      return std::string("(") + buf + ")";
    }
    case Scalar::kI32:
      return "(" + type_name(type) + ")(" + std::to_string(static_cast<int64_t>(value)) + ")";
    case Scalar::kI64:
      return "(" + int64_name() + ")(" + std::to_string(static_cast<int64_t>(value)) + "LL)";
    case Scalar::kBool:
      return value != 0 ? "(" + type_name(type) + ")1" : "(" + type_name(type) + ")0";
  }
  return "0";
}

Result<std::string> Printer::unary(const Instr& in, Scalar t, const std::string& x) const {
  const std::string& op = in.op;
  const bool f = t == Scalar::kF32;
  const std::string zero = literal(t, 0), one = literal(t, 1);
  auto lit = [&](double d) { return literal(Scalar::kF32, d); };
  if (op == "neg") return "(-" + x + ")";
  if (op == "abs") return f ? math("fabs", x) : "(" + x + " < " + zero + " ? -" + x + " : " + x + ")";
  if (op == "sign")
    return "(" + x + " > " + zero + " ? " + one + " : (" + x + " < " + zero + " ? -" + one +
           " : (" + x + " == " + zero + " ? " + zero + " : " + x + ")))";
  if (op == "relu") return "(" + x + " < " + zero + " ? " + zero + " : " + x + ")";
  if (op == "not") return "(" + type_name(Scalar::kBool) + ")(!" + x + ")";
  if (f && (op == "round_f16" || op == "round_bf16")) {
    const Storage st = op == "round_f16" ? Storage::kF16 : Storage::kBF16;
    return load_as(st, store_as(st, x));
  }
  if (!f) return errors::Unimplemented("generated kernels: {} on {}", op, scalar_name(t));
  static const char* kPlain[] = {"sqrt", "exp", "log", "tanh", "floor", "ceil", "sin", "cos",
                                 "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
                                 "atanh", "erf"};
  for (const char* fn : kPlain)
    if (op == fn) return math(fn, x);
  if (op == "round") return math("rint", x);  // half to even in the default rounding mode
  if (op == "reciprocal") return "(" + lit(1) + " / " + x + ")";
  if (op == "sigmoid")
    return "(" + x + " >= " + lit(0) + " ? " + lit(1) + " / (" + lit(1) + " + " + math("exp", "-" + x) +
           ") : " + math("exp", x) + " / (" + lit(1) + " + " + math("exp", x) + "))";
  if (op == "leaky_relu") return "(" + x + " < " + lit(0) + " ? " + lit(in.alpha) + " * " + x + " : " + x + ")";
  if (op == "elu")
    return "(" + x + " < " + lit(0) + " ? " + lit(in.alpha) + " * " + math("expm1", x) + " : " + x + ")";
  if (op == "selu")  // alpha, gamma
    return "(" + x + " > " + lit(0) + " ? " + lit(in.beta) + " * " + x + " : " + lit(in.beta) + " * (" +
           lit(in.alpha) + " * " + math("expm1", x) + "))";
  if (op == "celu") {
    const std::string t2 = lit(in.alpha) + " * " + math("expm1", x + " / " + lit(in.alpha));
    return "((" + lit(0) + " < " + x + " ? " + x + " : " + lit(0) + ") + (" + t2 + " < " + lit(0) +
           " ? " + t2 + " : " + lit(0) + "))";
  }
  auto clamp01 = [&](const std::string& y) {  // std::max(0, std::min(1, y)) with its NaN rules
    const std::string m = "(" + y + " < " + lit(1) + " ? " + y + " : " + lit(1) + ")";
    return "(" + lit(0) + " < " + m + " ? " + m + " : " + lit(0) + ")";
  };
  if (op == "hard_sigmoid") return clamp01("(" + lit(in.alpha) + " * " + x + " + " + lit(in.beta) + ")");
  if (op == "hard_swish") return "(" + x + " * " + clamp01("(" + x + " / " + lit(6) + " + " + lit(0.5) + ")") + ")";
  if (op == "softplus")
    return "(" + x + " > " + lit(0) + " ? " + x + " + " + math("log1p", math("exp", "-" + x)) +
           " : " + math("log1p", math("exp", x)) + ")";
  if (op == "gelu") {  // ONNX Gelu; alpha 1: approximate = "tanh", else the exact erf form
    const std::string inner =
        in.alpha != 0 ? math("tanh", lit(0.7978845608028654) + " * (" + x + " + " + lit(0.044715) + " * " + x +
                                         " * " + x + " * " + x + ")")
                      : math("erf", x + " * " + lit(0.7071067811865476));
    return "(" + lit(0.5) + " * " + x + " * (" + lit(1) + " + " + inner + "))";
  }
  if (op == "softsign") return "(" + x + " / (" + lit(1) + " + " + math("fabs", x) + "))";
  if (op == "thresholded_relu") return "(" + x + " > " + lit(in.alpha) + " ? " + x + " : " + lit(0) + ")";
  const std::string b = type_name(Scalar::kBool);
  if (op == "isnan") return "(" + b + ")(" + x + " != " + x + ")";
  if (op == "isinf") {  // alpha: detect_positive, beta: detect_negative
    std::string e = "0";
    if (in.alpha != 0) e += " || " + x + " == " + float_infinity();
    if (in.beta != 0) e += " || " + x + " == -" + float_infinity();
    return "(" + b + ")(" + e + ")";
  }
  return errors::Unimplemented("generated kernels: no unary op '{}'", op);
}

Result<std::string> Printer::binary(const Instr& in, Scalar t, const std::string& a,
                                    const std::string& b) const {
  const std::string& op = in.op;
  const bool f = t == Scalar::kF32;
  const std::string bt = type_name(Scalar::kBool);
  if (op == "add") return "(" + a + " + " + b + ")";
  if (op == "sub") return "(" + a + " - " + b + ")";
  if (op == "mul") return "(" + a + " * " + b + ")";
  if (op == "div" && f) return "(" + a + " / " + b + ")";
  if (op == "pow" && f) return math2("pow", a, b);
  if (op == "fmod" && f) return math2("fmod", a, b);
  if (op == "max" || op == "min") {
    const std::string pick = "(" + b + (op == "max" ? " > " : " < ") + a + " ? " + b + " : " + a + ")";
    if (!f) return pick;
    return "((" + a + " != " + a + " || " + b + " != " + b + ") ? " + float_nan() + " : " + pick + ")";
  }
  if (op == "prelu") return "(" + a + " < " + literal(t, 0) + " ? " + a + " * " + b + " : " + a + ")";
  static const std::pair<const char*, const char*> kCompare[] = {
      {"eq", "=="}, {"lt", "<"}, {"gt", ">"}, {"le", "<="}, {"ge", ">="}};
  for (const auto& [name, sym] : kCompare)
    if (op == name) return "(" + bt + ")(" + a + " " + sym + " " + b + ")";
  if (t == Scalar::kBool) {
    if (op == "and") return "(" + bt + ")(" + a + " && " + b + ")";
    if (op == "or") return "(" + bt + ")(" + a + " || " + b + ")";
    if (op == "xor") return "(" + bt + ")((" + a + " != 0) != (" + b + " != 0))";
  }
  return errors::Unimplemented("generated kernels: no binary op '{}' on {}", op, scalar_name(t));
}

Result<std::string> Printer::print(const ElementwiseKernel& k) const {
  const size_t rank = k.dims.size();
  bool halves = false;
  for (const auto& p : k.inputs) halves |= p.storage != Storage::kPlain;
  for (const auto& o : k.outputs) halves |= o.storage != Storage::kPlain;
  for (const auto& in : k.body) halves |= in.op == "round_f16" || in.op == "round_bf16";
  TD_ASSIGN_OR_RETURN(std::string s, start(halves));
  const std::string i64 = int64_name();
  s += kernel_prefix() + " " + k.name + "(";
  std::string params;
  auto add_param = [&](const std::string& p) { params += (params.empty() ? "" : ", ") + p; };
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    add_param(global_ptr("unsigned char", true) + " in" + std::to_string(i) + "_base");
    add_param(uint64_name() + " in" + std::to_string(i) + "_off");
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    add_param(global_ptr("unsigned char", false) + " out" + std::to_string(i) + "_base");
    add_param(uint64_name() + " out" + std::to_string(i) + "_off");
  }
  s += params + ") {\n";
  s += "  const " + i64 + " i = " + global_index() + ";\n";
  s += "  if (i >= " + std::to_string(k.numel()) + "LL) return;\n";
  auto stored = [&](Scalar t, Storage st) { return st == Storage::kPlain ? type_name(t) : "td_half_word"; };
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    const std::string n = std::to_string(i);
    const std::string ptr = global_ptr(stored(k.inputs[i].type, k.inputs[i].storage), true);
    s += "  " + ptr + " in" + n + " = (" + ptr + ")(in" + n + "_base + in" + n + "_off);\n";
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    const std::string n = std::to_string(i);
    const std::string ptr = global_ptr(stored(k.outputs[i].type, k.outputs[i].storage), false);
    s += "  " + ptr + " out" + n + " = (" + ptr + ")(out" + n + "_base + out" + n + "_off);\n";
  }
  // Coordinates, only when an input is broadcast along some dims but not all.
  bool need_coords = false;
  for (const auto& p : k.inputs)
    need_coords |= !contiguous(p.strides, k.dims) && !all_zero(p.strides);
  if (need_coords) {
    s += "  " + i64 + " r = i;\n";
    for (size_t d = rank; d-- > 0;) {
      const std::string dim = std::to_string(k.dims[d]) + "LL";
      if (d > 0) {
        s += "  const " + i64 + " c" + std::to_string(d) + " = r % " + dim + "; r /= " + dim + ";\n";
      } else {
        s += "  const " + i64 + " c0 = r;\n";
      }
    }
  }
  for (size_t k_ = 0; k_ < k.body.size(); ++k_) {
    const Instr& in = k.body[k_];
    std::string e;
    switch (in.kind) {
      case Instr::kLoad: {
        if (in.param < 0 || static_cast<size_t>(in.param) >= k.inputs.size())
          return errors::Internal("generated kernel: load of parameter {}", in.param);
        const Param& p = k.inputs[static_cast<size_t>(in.param)];
        std::string off;
        if (contiguous(p.strides, k.dims)) {
          off = "i";
        } else if (all_zero(p.strides)) {
          off = "0";
        } else {
          for (size_t d = 0; d < rank; ++d) {
            if (p.strides[d] == 0) continue;
            off += (off.empty() ? "" : " + ") + std::string("c") + std::to_string(d) +
                   (p.strides[d] == 1 ? "" : " * " + std::to_string(p.strides[d]) + "LL");
          }
        }
        if (p.offset != 0) off = std::to_string(p.offset) + "LL + " + off;
        e = load_as(p.storage, "in" + std::to_string(in.param) + "[" + off + "]");
        break;
      }
      case Instr::kConst:
        e = literal(in.type, in.value);
        break;
      case Instr::kUnary: {
        TD_ASSIGN_OR_RETURN(e, unary(in, k.body[static_cast<size_t>(in.a)].type, v(in.a)));
        break;
      }
      case Instr::kBinary: {
        TD_ASSIGN_OR_RETURN(e, binary(in, k.body[static_cast<size_t>(in.a)].type, v(in.a), v(in.b)));
        break;
      }
      case Instr::kSelect:
        e = "(" + v(in.c) + " ? " + v(in.a) + " : " + v(in.b) + ")";
        break;
      case Instr::kCast: {
        const Scalar from = k.body[static_cast<size_t>(in.a)].type;
        if (in.type == Scalar::kBool)
          e = "(" + type_name(Scalar::kBool) + ")(" + v(in.a) + " != " + literal(from, 0) + ")";
        else if (from == Scalar::kF32 && in.type != Scalar::kF32)
          e = float_to_int(in.type, v(in.a));
        else
          e = "(" + type_name(in.type) + ")(" + v(in.a) + ")";
        break;
      }
    }
    s += "  const " + type_name(in.type) + " " + v(static_cast<int>(k_)) + " = " + e + ";\n";
  }
  for (size_t o = 0; o < k.outputs.size(); ++o)
    s += "  out" + std::to_string(o) + "[i] = " + store_as(k.outputs[o].storage, v(k.outputs[o].value)) + ";\n";
  s += "}\n";
  return s;
}

Result<std::string> Printer::print(const ReduceKernel& k) const {
  const std::string& op = k.op;
  static const char* kOps[] = {"sum", "mean", "max", "min", "prod", "sum_square", "l1", "l2", "log_sum", "log_sum_exp"};
  bool known = false;
  for (const char* o : kOps) known |= op == o;
  if (!known) return errors::Unimplemented("generated kernels: no reduction '{}'", op);
  if (k.reduced.size() != k.in_shape.size() || k.reduced_numel() == 0)
    return errors::InvalidArgument("generated reduction: bad shape");
  const std::string i64 = int64_name();
  const size_t rank = k.in_shape.size();
  std::vector<int64_t> strides(rank, 1);
  for (size_t d = rank; d-- > 1;) strides[d - 1] = strides[d] * k.in_shape[d];
  auto lit = [&](double v) { return literal(Scalar::kF32, v); };
  TD_ASSIGN_OR_RETURN(std::string s, start(k.storage != Storage::kPlain));
  const std::string word = k.storage == Storage::kPlain ? "float" : "td_half_word";
  s += kernel_prefix() + " " + k.name + "(" + global_ptr("unsigned char", true) + " in0_base, " +
       uint64_name() + " in0_off, " + global_ptr("unsigned char", false) + " out0_base, " +
       uint64_name() + " out0_off) {\n";
  s += "  const " + i64 + " i = " + global_index() + ";\n";
  s += "  if (i >= " + std::to_string(k.out_numel()) + "LL) return;\n";
  s += "  " + global_ptr(word, true) + " in0 = (" + global_ptr(word, true) + ")(in0_base + in0_off);\n";
  s += "  " + global_ptr(word, false) + " out0 = (" + global_ptr(word, false) + ")(out0_base + out0_off);\n";
  s += "  " + i64 + " r = i, base = 0;\n";
  for (size_t d = rank; d-- > 0;) {
    if (k.reduced[d] || k.in_shape[d] == 1) continue;
    const std::string dim = std::to_string(k.in_shape[d]) + "LL";
    s += "  base += (r % " + dim + ") * " + std::to_string(strides[d]) + "LL; r /= " + dim + ";\n";
  }
  const bool sum_like = op == "sum" || op == "mean" || op == "sum_square" || op == "l1" ||
                        op == "l2" || op == "log_sum" || op == "log_sum_exp";
  std::string init = lit(0);
  if (op == "max") init = "-" + float_infinity();
  if (op == "min") init = float_infinity();
  if (op == "prod") init = lit(1);
  s += "  float acc = " + init + ", comp = " + lit(0) + ";\n";
  auto offset_code = [&]() {
    std::string o = "    " + i64 + " q = j, off = base;\n";
    for (size_t d = rank; d-- > 0;) {
      if (!k.reduced[d] || k.in_shape[d] == 1) continue;
      const std::string dim = std::to_string(k.in_shape[d]) + "LL";
      o += "    off += (q % " + dim + ") * " + std::to_string(strides[d]) + "LL; q /= " + dim + ";\n";
    }
    return o;
  };
  if (op == "log_sum_exp") {  // the max first: exp() of values shifted by it cannot overflow
    s += "  float mx = -" + float_infinity() + ";\n";
    s += "  for (" + i64 + " j = 0; j < " + std::to_string(k.reduced_numel()) + "LL; ++j) {\n";
    s += offset_code();
    s += "    const float x = " + load_as(k.storage, "in0[off]") + ";\n";
    s += "    if (x > mx) mx = x;\n  }\n";
    s += "  if (mx == " + float_infinity() + " || mx == -" + float_infinity() + ") mx = " + lit(0) + ";\n";
  }
  s += "  for (" + i64 + " j = 0; j < " + std::to_string(k.reduced_numel()) + "LL; ++j) {\n";
  s += "    " + i64 + " q = j, off = base;\n";
  for (size_t d = rank; d-- > 0;) {
    if (!k.reduced[d] || k.in_shape[d] == 1) continue;
    const std::string dim = std::to_string(k.in_shape[d]) + "LL";
    s += "    off += (q % " + dim + ") * " + std::to_string(strides[d]) + "LL; q /= " + dim + ";\n";
  }
  s += "    const float x = " + load_as(k.storage, "in0[off]") + ";\n";
  if (sum_like) {
    std::string term = "x";
    if (op == "sum_square" || op == "l2") term = "x * x";
    if (op == "l1") term = math("fabs", "x");
    if (op == "log_sum_exp") term = math("exp", "x - mx");
    // Kahan summation: float32 accumulation close to the reference's double.
    s += "    const float y = " + term + " - comp;\n";
    s += "    const float t = acc + y;\n";
    s += "    comp = (t - acc) - y;\n";
    s += "    acc = t;\n";
  } else if (op == "max" || op == "min") {
    s += "    if (x != x) { acc = x; break; }\n";
    s += std::string("    if (x ") + (op == "max" ? ">" : "<") + " acc) acc = x;\n";
  } else {
    s += "    acc = acc * x;\n";
  }
  s += "  }\n";
  if (op == "mean") s += "  acc = acc / " + lit(static_cast<double>(k.reduced_numel())) + ";\n";
  if (op == "l2") s += "  acc = " + math("sqrt", "acc") + ";\n";
  if (op == "log_sum") s += "  acc = " + math("log", "acc") + ";\n";
  if (op == "log_sum_exp") s += "  acc = " + math("log", "acc") + " + mx;\n";
  s += "  out0[i] = " + store_as(k.storage, "acc") + ";\n}\n";
  return s;
}

// ---- OpenCL C ----

std::string OpenClPrinter::preamble() const { return "// tensord generated (OpenCL C)\n"; }

std::string OpenClPrinter::global_ptr(const std::string& type, bool is_const) const {
  return std::string("__global ") + (is_const ? "const " : "") + type + "*";
}

std::string OpenClPrinter::type_name(Scalar s) const {
  switch (s) {
    case Scalar::kF32: return "float";
    case Scalar::kI32: return "int";
    case Scalar::kI64: return "long";
    case Scalar::kBool: return "uchar";
  }
  return "void";
}

std::string OpenClPrinter::math(const std::string& fn, const std::string& x) const {
  return fn + "(" + x + ")";
}
std::string OpenClPrinter::math2(const std::string& fn, const std::string& x,
                                 const std::string& y) const {
  return fn + "(" + x + ", " + y + ")";
}

// NaN -> 0, truncation toward zero, saturation at int64's range, then wrapping to 32 bits.
std::string OpenClPrinter::float_to_int(Scalar to, const std::string& x) const {
  return to == Scalar::kI32 ? "(int)convert_long_sat(" + x + ")" : "convert_long_sat(" + x + ")";
}

// ---- CUDA C ----

std::string CudaPrinter::preamble() const { return "// tensord generated (CUDA C)\n"; }

std::string CudaPrinter::global_ptr(const std::string& type, bool is_const) const {
  return (is_const ? "const " : "") + type + "*";
}

std::string CudaPrinter::type_name(Scalar s) const {
  switch (s) {
    case Scalar::kF32: return "float";
    case Scalar::kI32: return "int";
    case Scalar::kI64: return "long long";
    case Scalar::kBool: return "unsigned char";
  }
  return "void";
}

std::string CudaPrinter::math(const std::string& fn, const std::string& x) const {
  return fn + "f(" + x + ")";
}
std::string CudaPrinter::math2(const std::string& fn, const std::string& x,
                               const std::string& y) const {
  return fn + "f(" + x + ", " + y + ")";
}

Result<std::string> CudaPrinter::half_helpers() const {
  return std::string(R"(typedef unsigned short td_half_word;
__device__ __forceinline__ float td_f16_to_f32(td_half_word h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ td_half_word td_f32_to_f16(float f) {
  td_half_word h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
__device__ __forceinline__ float td_bf16_to_f32(td_half_word b) { return __uint_as_float((unsigned int)b << 16); }
__device__ __forceinline__ td_half_word td_f32_to_bf16(float f) {
#if __CUDA_ARCH__ >= 800
  td_half_word b; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f)); return b;
#else
  const unsigned int x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (td_half_word)((x >> 16) | 0x40u);
  return (td_half_word)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
#endif
}
)");
}

std::string CudaPrinter::float_to_int(Scalar to, const std::string& x) const {
  const std::string ll = "(" + x + " != " + x + " ? 0LL : __float2ll_rz(" + x + "))";
  return to == Scalar::kI32 ? "(int)" + ll : ll;
}

}  // namespace tensord::codegen
