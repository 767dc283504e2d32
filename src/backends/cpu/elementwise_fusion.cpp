#include "backends/cpu/elementwise_fusion.h"


#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_map>

#include "backends/cpu/onednn_common.h"
#include "backends/cpu/vec_math.h"
#include "core/errors.h"
#include "core/node_attrs.h"
#include "core/op_registry.h"
#include "backends/cpu/thread_pool.h"

namespace tensord::cpu {
namespace {

constexpr int64_t kBlock = 512;      // values per block: every register stays in L1
constexpr int kMaxRegisters = 24;
constexpr int64_t kParallelMin = 1 << 15;  // below this, threads cost more than they save

enum class Op : uint8_t {
  kAdd, kSub, kMul, kDiv, kMax, kMin,                              // binary
  kGreater, kLess, kGreaterOrEqual, kLessOrEqual, kEqual,          // binary, bool results
  kRelu, kNeg, kAbs, kSqrt, kExp, kLog, kTanh, kSigmoid, kReciprocal, kFloor, kCeil, kRound,
  kLeakyRelu, kElu, kHardSigmoid, kHardSwish, kSoftplus, kClip, kErf, kGelu,  // unary
  kWhere                                                           // ternary
};

const std::map<std::string, Op>& op_table() {
  static const std::map<std::string, Op> t = {
      {"Add", Op::kAdd},         {"Sub", Op::kSub},           {"Mul", Op::kMul},
      {"Div", Op::kDiv},         {"Max", Op::kMax},           {"Min", Op::kMin},
      {"Relu", Op::kRelu},       {"Neg", Op::kNeg},           {"Abs", Op::kAbs},
      {"Sqrt", Op::kSqrt},       {"Exp", Op::kExp},           {"Log", Op::kLog},
      {"Tanh", Op::kTanh},       {"Sigmoid", Op::kSigmoid},   {"Reciprocal", Op::kReciprocal},
      {"Floor", Op::kFloor},     {"Ceil", Op::kCeil},         {"Round", Op::kRound},
      {"LeakyRelu", Op::kLeakyRelu}, {"Elu", Op::kElu},       {"HardSigmoid", Op::kHardSigmoid},
      {"HardSwish", Op::kHardSwish}, {"Softplus", Op::kSoftplus}, {"Clip", Op::kClip},
      {"Erf", Op::kErf},         {"Greater", Op::kGreater},   {"Less", Op::kLess},
      {"GreaterOrEqual", Op::kGreaterOrEqual}, {"LessOrEqual", Op::kLessOrEqual},
      {"Equal", Op::kEqual},     {"Where", Op::kWhere},       {"Gelu", Op::kGelu}};
  return t;
}

}  // namespace

std::vector<std::string> elementwise_program_ops() {
  std::vector<std::string> names;
  for (const auto& [name, op] : op_table()) names.push_back(name);
  return names;
}

namespace {

bool is_binary(Op op) { return op <= Op::kEqual; }
// A comparison's result is bool: 1.0f / 0.0f in a register, one byte when stored.
bool is_comparison(Op op) { return op >= Op::kGreater && op <= Op::kEqual; }

// An operand: a register, a group input (full or one value), a constant scalar, or a value
// broadcast along the leading axes (a bias: an input or a constant whose shape, leading 1s
// dropped, is the output's trailing dims; it repeats with period `period`).
// Any other NumPy broadcast (an attention mask [B,1,1,T] onto [B,h,T,T]): kInputBcast /
// kConstBcast, read through `bcast` (the output's dims, the operand's element strides with 0
// along a broadcast axis).
constexpr size_t kMaxBroadcastRank = 16;
struct Broadcast {
  std::vector<int64_t> dims, strides;
};
struct Operand {
  enum Kind : uint8_t {
    kReg, kInput, kInputScalar, kScalar, kInputRow, kConstRow, kInputBcast, kConstBcast,
    kInputBool  // a bool input of the output's size (Where's condition), read as 1.0f / 0.0f
  } kind = kScalar;
  int index = 0;
  float value = 0;
  int64_t period = 0;
  int bcast = -1;  // kInputBcast / kConstBcast: the program's broadcasts[bcast]
};

// dst[0:n] = the broadcast operand's values at output elements [start, start + n).
void fill_broadcast(float* dst, const float* base, const Broadcast& b, int64_t start, int64_t n) {
  const size_t r = b.dims.size();
  int64_t idx[kMaxBroadcastRank];
  int64_t rem = start, off = 0;
  for (size_t d = r; d-- > 0;) {
    idx[d] = rem % b.dims[d];
    rem /= b.dims[d];
    off += idx[d] * b.strides[d];
  }
  const int64_t inner = b.dims[r - 1], s = b.strides[r - 1];
  for (int64_t i = 0; i < n;) {
    const int64_t len = std::min(n - i, inner - idx[r - 1]);
    if (s == 0) {
      std::fill(dst + i, dst + i + len, base[off]);
    } else {
      const float* p = base + off;
      for (int64_t k = 0; k < len; ++k) dst[i + k] = p[k * s];
    }
    i += len;
    idx[r - 1] += len;
    off += len * s;
    if (idx[r - 1] < inner) continue;
    off -= inner * s;  // the innermost axis wrapped: carry into the outer ones
    idx[r - 1] = 0;
    for (size_t d = r - 1; d-- > 0;) {
      off += b.strides[d];
      if (++idx[d] < b.dims[d]) break;
      off -= b.dims[d] * b.strides[d];
      idx[d] = 0;
    }
  }
}

// Whether `t` broadcasts onto `out` by NumPy's rules (rank at most out's and
// kMaxBroadcastRank; each of its dims, aligned right, 1 or out's).
bool is_numpy_broadcast(const Shape& t, const Shape& out) {
  if (t.size() > out.size() || out.size() > kMaxBroadcastRank || out.empty()) return false;
  for (size_t i = 0; i < t.size(); ++i) {
    const int64_t td = t[t.size() - 1 - i], od = out[out.size() - 1 - i];
    if (td != 1 && td != od) return false;
  }
  return true;
}

Broadcast broadcast_of(const Shape& t, const Shape& out) {
  Broadcast b;
  b.dims.assign(out.begin(), out.end());
  b.strides.assign(out.size(), 0);
  int64_t stride = 1;
  for (size_t i = 0; i < t.size(); ++i) {
    const size_t td = t.size() - 1 - i, od = out.size() - 1 - i;
    if (t[td] != 1) b.strides[od] = stride;
    stride *= t[td];
  }
  return b;
}

// dst[0:n] = base[(start + i) % period] for i in [0, n).
void fill_periodic(float* dst, const float* base, int64_t period, int64_t start, int64_t n) {
  int64_t off = start % period;
  for (int64_t i = 0; i < n;) {
    const int64_t len = std::min(n - i, period - off);
    std::copy(base + off, base + off + len, dst + i);
    i += len;
    off = 0;
  }
}

// Whether `t` broadcasts onto `out` along leading axes only: t's shape, leading 1s dropped,
// equals out's trailing dims.
bool is_row_broadcast(const Shape& t, const Shape& out) {
  size_t first = 0;
  while (first < t.size() && t[first] == 1) ++first;
  const size_t k = t.size() - first;
  if (k > out.size() || t.size() > out.size()) return false;
  for (size_t i = 0; i < k; ++i)
    if (t[first + i] != out[out.size() - k + i]) return false;
  return true;
}

struct Instr {
  Op op;
  int dst = 0;
  Operand a, b, c;  // c: Where's third
  float alpha = 0, beta = 0;
};

// One instruction over a block. Compiled for AVX-512, AVX2 and baseline x86-64 (the loader
// picks one); exp and sigmoid use the vectorisable vec_math.h forms.
__attribute__((target_clones("avx512f", "avx2", "default"))) void execute(
    const Instr& ins, float* d, const float* a, const float* b, int64_t n, const float* bscalar,
    const float* c) {
  // d may be a or b (registers are reused in place): same-index loops only, no __restrict.
  // bscalar: b is one value (a constant or a one-element input), not an array.
  const float al = ins.alpha, be = ins.beta;
  if (bscalar) {
    const float s = *bscalar;
    switch (ins.op) {
      case Op::kAdd: for (int64_t i = 0; i < n; ++i) d[i] = a[i] + s; return;
      case Op::kSub: for (int64_t i = 0; i < n; ++i) d[i] = a[i] - s; return;
      case Op::kMul: for (int64_t i = 0; i < n; ++i) d[i] = a[i] * s; return;
      case Op::kDiv: for (int64_t i = 0; i < n; ++i) d[i] = a[i] / s; return;
      default: break;  // Max/Min: the general loops below, on a filled b
    }
  }
  switch (ins.op) {
    case Op::kAdd: for (int64_t i = 0; i < n; ++i) d[i] = a[i] + b[i]; break;
    case Op::kSub: for (int64_t i = 0; i < n; ++i) d[i] = a[i] - b[i]; break;
    case Op::kMul: for (int64_t i = 0; i < n; ++i) d[i] = a[i] * b[i]; break;
    case Op::kDiv: for (int64_t i = 0; i < n; ++i) d[i] = a[i] / b[i]; break;
    case Op::kMax:
      for (int64_t i = 0; i < n; ++i)
        d[i] = (a[i] != a[i] || b[i] != b[i]) ? std::numeric_limits<float>::quiet_NaN()
                                              : (b[i] > a[i] ? b[i] : a[i]);
      break;
    case Op::kMin:
      for (int64_t i = 0; i < n; ++i)
        d[i] = (a[i] != a[i] || b[i] != b[i]) ? std::numeric_limits<float>::quiet_NaN()
                                              : (b[i] < a[i] ? b[i] : a[i]);
      break;
    // Comparisons: false with a NaN operand (IEEE), as the reference kernels.
    case Op::kGreater: for (int64_t i = 0; i < n; ++i) d[i] = a[i] > b[i] ? 1.0f : 0.0f; break;
    case Op::kLess: for (int64_t i = 0; i < n; ++i) d[i] = a[i] < b[i] ? 1.0f : 0.0f; break;
    case Op::kGreaterOrEqual:
      for (int64_t i = 0; i < n; ++i) d[i] = a[i] >= b[i] ? 1.0f : 0.0f;
      break;
    case Op::kLessOrEqual: for (int64_t i = 0; i < n; ++i) d[i] = a[i] <= b[i] ? 1.0f : 0.0f; break;
    case Op::kEqual: for (int64_t i = 0; i < n; ++i) d[i] = a[i] == b[i] ? 1.0f : 0.0f; break;
    case Op::kWhere: for (int64_t i = 0; i < n; ++i) d[i] = a[i] != 0.0f ? b[i] : c[i]; break;
    case Op::kRelu: for (int64_t i = 0; i < n; ++i) d[i] = a[i] < 0.0f ? 0.0f : a[i]; break;
    case Op::kNeg: for (int64_t i = 0; i < n; ++i) d[i] = -a[i]; break;
    case Op::kAbs: for (int64_t i = 0; i < n; ++i) d[i] = std::fabs(a[i]); break;
    case Op::kSqrt: for (int64_t i = 0; i < n; ++i) d[i] = std::sqrt(a[i]); break;
    case Op::kExp: for (int64_t i = 0; i < n; ++i) d[i] = vec::exp(a[i]); break;
    case Op::kLog: for (int64_t i = 0; i < n; ++i) d[i] = std::log(a[i]); break;
    case Op::kTanh: for (int64_t i = 0; i < n; ++i) d[i] = std::tanh(a[i]); break;
    case Op::kSigmoid: for (int64_t i = 0; i < n; ++i) d[i] = vec::sigmoid(a[i]); break;
    case Op::kReciprocal: for (int64_t i = 0; i < n; ++i) d[i] = 1.0f / a[i]; break;
    case Op::kFloor: for (int64_t i = 0; i < n; ++i) d[i] = std::floor(a[i]); break;
    case Op::kCeil: for (int64_t i = 0; i < n; ++i) d[i] = std::ceil(a[i]); break;
    // Half to even (ONNX Round): nearbyint in the default rounding mode.
    case Op::kRound: for (int64_t i = 0; i < n; ++i) d[i] = std::nearbyint(a[i]); break;
    case Op::kLeakyRelu: for (int64_t i = 0; i < n; ++i) d[i] = a[i] < 0 ? al * a[i] : a[i]; break;
    case Op::kElu:
      for (int64_t i = 0; i < n; ++i) d[i] = a[i] < 0 ? al * (std::exp(a[i]) - 1.0f) : a[i];
      break;
    case Op::kHardSigmoid:
      for (int64_t i = 0; i < n; ++i) d[i] = std::max(0.0f, std::min(1.0f, al * a[i] + be));
      break;
    case Op::kHardSwish:
      for (int64_t i = 0; i < n; ++i)
        d[i] = a[i] * std::max(0.0f, std::min(1.0f, a[i] / 6.0f + 0.5f));
      break;
    case Op::kSoftplus:
      for (int64_t i = 0; i < n; ++i)
        d[i] = a[i] > 0 ? a[i] + std::log1p(std::exp(-a[i])) : std::log1p(std::exp(a[i]));
      break;
    case Op::kClip:
      for (int64_t i = 0; i < n; ++i) {
        const float y = a[i] < al ? al : a[i];
        d[i] = y > be ? be : y;
      }
      break;
    case Op::kErf: for (int64_t i = 0; i < n; ++i) d[i] = vec::erf(a[i]); break;
    case Op::kGelu:  // alpha 1: approximate "tanh"
      if (al != 0.0f) {
        for (int64_t i = 0; i < n; ++i)
          d[i] = 0.5f * a[i] * (1.0f + vec::tanh(0.7978845608f * (a[i] + 0.044715f * a[i] * a[i] * a[i])));
      } else {
        for (int64_t i = 0; i < n; ++i) d[i] = 0.5f * a[i] * (1.0f + vec::erf(a[i] * 0.70710678f));
      }
      break;
  }
}

class ElementwiseProgram final : public FusedKernel {
 public:
  std::vector<Instr> code;
  std::vector<std::pair<int, int>> stores;  // (register, output index)
  std::vector<bool> bool_output;             // per output: bool (a comparison's), one byte each
  std::vector<std::vector<float>> constants;  // kConstRow operands' values
  std::vector<Broadcast> broadcasts;         // kInputBcast / kConstBcast operands' maps
  int registers = 0;
  int64_t numel = 0;
  std::string summary;

  Status run_host(const std::vector<TensorView>& inputs, const std::vector<MutableTensorView>& outputs,
             Allocator&) override {
    std::vector<const float*> in(inputs.size());
    // (a bool input or output is bytes behind the same pointer: see kInputBool, bool_output)
    for (size_t i = 0; i < inputs.size(); ++i) in[i] = static_cast<const float*>(inputs[i].data);
    std::vector<float*> out(outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) out[i] = static_cast<float*>(outputs[i].data);
    const int64_t blocks = (numel + kBlock - 1) / kBlock;
    if (numel >= kParallelMin && threads_available() > 1) {
      ThreadPool::get().parallel_for(blocks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) run_block(b, in, out);
      });
    } else {
      for (int64_t b = 0; b < blocks; ++b) run_block(b, in, out);
    }
    return OkStatus();
  }

  int64_t arena_bytes() const override { return 0; }
  int64_t weight_bytes() const override { return 0; }
  std::string describe() const override { return summary; }

 private:
  void run_block(int64_t block, const std::vector<const float*>& in,
                 const std::vector<float*>& out) const {
    alignas(64) float regs[kMaxRegisters][kBlock];
    const int64_t start = block * kBlock;
    const int64_t n = std::min(kBlock, numel - start);
    alignas(64) float sa[kBlock], sb[kBlock], sc[kBlock];
    auto src = [&](const Operand& o, float* scratch) -> const float* {
      switch (o.kind) {
        case Operand::kReg: return regs[o.index];
        case Operand::kInput: return in[static_cast<size_t>(o.index)] + start;
        case Operand::kInputScalar: std::fill(scratch, scratch + n, in[static_cast<size_t>(o.index)][0]); return scratch;
        case Operand::kScalar: std::fill(scratch, scratch + n, o.value); return scratch;
        case Operand::kInputRow:
          fill_periodic(scratch, in[static_cast<size_t>(o.index)], o.period, start, n);
          return scratch;
        case Operand::kConstRow:
          fill_periodic(scratch, constants[static_cast<size_t>(o.index)].data(), o.period, start, n);
          return scratch;
        case Operand::kInputBcast:
          fill_broadcast(scratch, in[static_cast<size_t>(o.index)],
                         broadcasts[static_cast<size_t>(o.bcast)], start, n);
          return scratch;
        case Operand::kConstBcast:
          fill_broadcast(scratch, constants[static_cast<size_t>(o.index)].data(),
                         broadcasts[static_cast<size_t>(o.bcast)], start, n);
          return scratch;
        case Operand::kInputBool: {
          const auto* p = reinterpret_cast<const uint8_t*>(in[static_cast<size_t>(o.index)]) + start;
          for (int64_t i = 0; i < n; ++i) scratch[i] = p[i] ? 1.0f : 0.0f;
          return scratch;
        }
      }
      return scratch;
    };
    for (const Instr& ins : code) {
      const float* bs = nullptr;
      const float* b = nullptr;
      if (is_binary(ins.op) || ins.op == Op::kWhere) {
        if (ins.b.kind == Operand::kScalar && ins.op <= Op::kDiv) {
          bs = &ins.b.value;
        } else if (ins.b.kind == Operand::kInputScalar && ins.op <= Op::kDiv) {
          bs = in[static_cast<size_t>(ins.b.index)];
        } else {
          b = src(ins.b, sb);
        }
      }
      const float* c = ins.op == Op::kWhere ? src(ins.c, sc) : nullptr;
      execute(ins, regs[ins.dst], src(ins.a, sa), b, n, bs, c);
    }
    for (const auto& [reg, o] : stores) {
      if (bool_output[static_cast<size_t>(o)]) {
        auto* p = reinterpret_cast<uint8_t*>(out[static_cast<size_t>(o)]) + start;
        for (int64_t i = 0; i < n; ++i) p[i] = regs[reg][i] != 0.0f;
      } else {
        std::copy(regs[reg], regs[reg] + n, out[static_cast<size_t>(o)] + start);
      }
    }
  }
};

bool is_scalar_type(const TensorType* t) { return t && shape_is_static(t->shape) && shape_numel(t->shape) == 1; }

// The shape key of an eligible node ("" = not eligible).
std::string node_key(const FusionGraph& g, const Node& node) {
  if (!node.domain.empty() && node.domain != "ai.onnx") return "";
  auto it = op_table().find(node.op);
  if (it == op_table().end() || !is_elementwise_kind(op_kind(node.op)) || node.outputs.size() != 1 ||
      node.outputs[0].empty())
    return "";
  const TensorType* out = g.type_of(node.outputs[0]);
  const DType out_dtype = is_comparison(it->second) ? DType::kBool : DType::kFloat32;
  if (!out || out->dtype != out_dtype || !shape_is_static(out->shape) ||
      shape_numel(out->shape) == 0)
    return "";
  // A float32 operand of the output's shape, one value, or a NumPy broadcast onto it.
  auto float_operand = [&](const std::string& v) {
    const TensorType* t = v.empty() ? nullptr : g.type_of(v);
    return t && t->dtype == DType::kFloat32 &&
           (t->shape == out->shape || is_scalar_type(t) ||
            (shape_is_static(t->shape) && is_numpy_broadcast(t->shape, out->shape)));
  };
  if (it->second == Op::kWhere) {
    // The condition: a bool of the output's size (leading 1s aside), or a constant.
    if (node.inputs.size() != 3 || node.inputs[0].empty()) return "";
    const TensorType* c = g.type_of(node.inputs[0]);
    const HostTensor* k = g.constant(node.inputs[0]);
    if (!c || c->dtype != DType::kBool || !shape_is_static(c->shape)) return "";
    if (!(k && k->numel() == 1) && (shape_numel(c->shape) != shape_numel(out->shape) ||
                                    !is_numpy_broadcast(c->shape, out->shape)))
      return "";
    if (!float_operand(node.inputs[1]) || !float_operand(node.inputs[2])) return "";
    return "ew:" + shape_to_string(out->shape);
  }
  const size_t arity = is_binary(it->second) ? 2 : 1;
  if (it->second == Op::kClip) {
    if (node.inputs.empty() || node.inputs.size() > 3) return "";
    for (size_t i = 1; i < node.inputs.size(); ++i) {
      if (node.inputs[i].empty()) continue;
      const HostTensor* c = g.constant(node.inputs[i]);
      if (!c || c->dtype() != DType::kFloat32 || c->numel() != 1) return "";  // runtime bounds
    }
  } else if (node.inputs.size() != arity) {
    return "";
  }
  for (size_t i = 0; i < std::min(node.inputs.size(), arity); ++i)
    if (!float_operand(node.inputs[i])) return "";
  return "ew:" + shape_to_string(out->shape);
}

Result<std::unique_ptr<FusedKernel>> compile_program(const FusionGraph& g, const FusedGroup& grp) {
  auto prog = std::make_unique<ElementwiseProgram>();
  const TensorType* out_type = g.type_of(g.nodes[grp.members.back()]->outputs[0]);
  prog->numel = shape_numel(out_type->shape);
  for (const auto& o : grp.outputs) {
    const TensorType* t = g.type_of(o);
    prog->bool_output.push_back(t && t->dtype == DType::kBool);
  }
  std::unordered_map<std::string, int> input_index;
  for (size_t i = 0; i < grp.inputs.size(); ++i) input_index[grp.inputs[i]] = static_cast<int>(i);
  // Last use of each value inside the group, to reuse registers.
  std::unordered_map<std::string, size_t> last_use;
  for (size_t m = 0; m < grp.members.size(); ++m)
    for (const auto& v : g.nodes[grp.members[m]]->inputs) last_use[v] = m;
  std::unordered_map<std::string, int> outputs;
  for (size_t i = 0; i < grp.outputs.size(); ++i) outputs[grp.outputs[i]] = static_cast<int>(i);
  std::unordered_map<std::string, int> reg_of;
  std::vector<int> free_regs;
  int next_reg = 0;
  std::map<std::string, int> op_counts;
  auto operand = [&](const std::string& v) -> Result<Operand> {
    Operand o;
    if (auto r = reg_of.find(v); r != reg_of.end()) {
      o.kind = Operand::kReg;
      o.index = r->second;
      return o;
    }
    if (const HostTensor* c = g.constant(v)) {
      if (c->numel() == 1 && (c->dtype() == DType::kFloat32 || c->dtype() == DType::kBool)) {
        o.kind = Operand::kScalar;
        o.value = c->dtype() == DType::kBool ? (*static_cast<const uint8_t*>(c->data()) ? 1.0f : 0.0f)
                                             : c->data<float>()[0];
        return o;
      }
      if (c->dtype() != DType::kFloat32 || !is_numpy_broadcast(c->shape(), out_type->shape))
        return errors::Unimplemented("constant '{}' does not broadcast onto the output", v);
      o.index = static_cast<int>(prog->constants.size());
      prog->constants.emplace_back(c->data<float>(), c->data<float>() + c->numel());
      if (is_row_broadcast(c->shape(), out_type->shape)) {
        o.kind = Operand::kConstRow;
        o.period = c->numel();
      } else {
        o.kind = Operand::kConstBcast;
        o.bcast = static_cast<int>(prog->broadcasts.size());
        prog->broadcasts.push_back(broadcast_of(c->shape(), out_type->shape));
      }
      return o;
    }
    auto in = input_index.find(v);
    if (in == input_index.end()) return errors::Internal("'{}' is not an input of the program", v);
    const TensorType* t = g.type_of(v);
    o.index = in->second;
    if (t && t->dtype == DType::kBool) {  // Where's condition: node_key admits the output's size
      if (shape_numel(t->shape) != prog->numel)
        return errors::Internal("bool '{}' is not of the output's size", v);
      o.kind = Operand::kInputBool;
      return o;
    }
    if (is_scalar_type(t) && prog->numel != 1) {
      o.kind = Operand::kInputScalar;
    } else if (t && t->shape != out_type->shape && shape_numel(t->shape) != prog->numel) {
      // node_key admitted it: a NumPy broadcast
      if (is_row_broadcast(t->shape, out_type->shape)) {
        o.kind = Operand::kInputRow;
        o.period = shape_numel(t->shape);
      } else {
        o.kind = Operand::kInputBcast;
        o.bcast = static_cast<int>(prog->broadcasts.size());
        prog->broadcasts.push_back(broadcast_of(t->shape, out_type->shape));
      }
    } else {
      o.kind = Operand::kInput;
    }
    return o;
  };
  for (size_t m = 0; m < grp.members.size(); ++m) {
    const Node& node = *g.nodes[grp.members[m]];
    NodeAttrs attrs(node);
    Instr ins;
    ins.op = op_table().at(node.op);
    op_counts[node.op]++;
    TD_ASSIGN_OR_RETURN(ins.a, operand(node.inputs[0]));
    if (is_binary(ins.op) || ins.op == Op::kWhere) {
      TD_ASSIGN_OR_RETURN(ins.b, operand(node.inputs[1]));
    }
    if (ins.op == Op::kWhere) {
      TD_ASSIGN_OR_RETURN(ins.c, operand(node.inputs[2]));
    }
    switch (ins.op) {
      case Op::kLeakyRelu: {
        TD_ASSIGN_OR_RETURN(ins.alpha, attrs.attr_float("alpha", 0.01f));
        break;
      }
      case Op::kElu: {
        TD_ASSIGN_OR_RETURN(ins.alpha, attrs.attr_float("alpha", 1.0f));
        break;
      }
      case Op::kHardSigmoid: {
        TD_ASSIGN_OR_RETURN(ins.alpha, attrs.attr_float("alpha", 0.2f));
        TD_ASSIGN_OR_RETURN(ins.beta, attrs.attr_float("beta", 0.5f));
        break;
      }
      case Op::kGelu: {
        const Result<std::string> approximate = attrs.attr_string("approximate", "none");
        if (!approximate.ok()) return approximate.status();
        if (*approximate != "none" && *approximate != "tanh")
          return errors::InvalidArgument("Gelu: approximate '{}' is neither 'none' nor 'tanh'", *approximate);
        ins.alpha = *approximate == "tanh" ? 1.0f : 0.0f;
        break;
      }
      case Op::kClip: {
        ins.alpha = -std::numeric_limits<float>::infinity();
        ins.beta = std::numeric_limits<float>::infinity();
        if (node.inputs.size() > 1 && !node.inputs[1].empty())
          ins.alpha = g.constant(node.inputs[1])->data<float>()[0];
        if (node.inputs.size() > 2 && !node.inputs[2].empty())
          ins.beta = g.constant(node.inputs[2])->data<float>()[0];
        break;
      }
      default:
        break;
    }
    // Registers whose value is dead after this node are free for its result.
    for (const auto& v : node.inputs) {
      auto r = reg_of.find(v);
      if (r != reg_of.end() && last_use[v] == m && !outputs.count(v)) {
        free_regs.push_back(r->second);
        reg_of.erase(r);
      }
    }
    if (!free_regs.empty()) {
      ins.dst = free_regs.back();
      free_regs.pop_back();
    } else {
      ins.dst = next_reg++;
    }
    if (next_reg > kMaxRegisters) return errors::Unimplemented("element-wise program too wide");
    reg_of[node.outputs[0]] = ins.dst;
    prog->code.push_back(ins);
    if (auto o = outputs.find(node.outputs[0]); o != outputs.end()) {
      prog->stores.emplace_back(ins.dst, o->second);
      // A stored register must survive until the block ends: never freed (see above).
    }
  }
  prog->registers = next_reg;
  std::string ops;
  for (const auto& [op, n] : op_counts) ops += fmt::format("{}{} {}", ops.empty() ? "" : ", ", n, op);
  prog->summary = fmt::format("ElementwiseProgram: {} ops ({}) over {} values, {} outputs",
                              prog->code.size(), ops, prog->numel, prog->stores.size());
  return std::unique_ptr<FusedKernel>(std::move(prog));
}

}  // namespace

std::vector<FusedGroup> build_elementwise_programs(const FusionGraph& g,
                                                   const std::vector<bool>& taken) {
  std::vector<FusedGroup> groups = partition_graph(g, [&](size_t i, const std::vector<int>&) {
    return taken[i] ? std::string() : node_key(g, *g.nodes[i]);
  });
  std::vector<FusedGroup> compiled;
  for (auto& grp : groups) {
    if (grp.outputs.empty()) continue;
    auto k = compile_program(g, grp);
    if (!k.ok()) continue;  // the nodes keep their own kernels
    grp.kernel = std::move(*k);
    compiled.push_back(std::move(grp));
  }
  return compiled;
}

}  // namespace tensord::cpu
