#include "backends/codegen/kernel_ir.h"

#include "core/errors.h"

namespace tensord::codegen {

Result<Scalar> scalar_of(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return Scalar::kF32;
    case DType::kInt32: return Scalar::kI32;
    case DType::kInt64: return Scalar::kI64;
    case DType::kBool: return Scalar::kBool;
    default:
      return errors::Unimplemented("the kernel generator has no {} code", dtype_name(dtype));
  }
}

Storage storage_of(DType dtype) {
  if (dtype == DType::kFloat16) return Storage::kF16;
  if (dtype == DType::kBFloat16) return Storage::kBF16;
  return Storage::kPlain;
}

Result<Scalar> compute_scalar_of(DType dtype, bool halves) {
  if (halves && storage_of(dtype) != Storage::kPlain) return Scalar::kF32;
  return scalar_of(dtype);
}

DType dtype_of(Scalar s) {
  switch (s) {
    case Scalar::kF32: return DType::kFloat32;
    case Scalar::kI32: return DType::kInt32;
    case Scalar::kI64: return DType::kInt64;
    case Scalar::kBool: return DType::kBool;
  }
  return DType::kUndefined;
}

const char* scalar_name(Scalar s) { return dtype_name(dtype_of(s)); }

int64_t ElementwiseKernel::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

int64_t ReduceKernel::out_numel() const {
  int64_t n = 1;
  for (size_t d = 0; d < in_shape.size(); ++d)
    if (!reduced[d]) n *= in_shape[d];
  return n;
}

int64_t ReduceKernel::reduced_numel() const {
  int64_t n = 1;
  for (size_t d = 0; d < in_shape.size(); ++d)
    if (reduced[d]) n *= in_shape[d];
  return n;
}

void simplify(ElementwiseKernel& k) {
  // Drop dims of size 1.
  std::vector<size_t> keep;
  for (size_t d = 0; d < k.dims.size(); ++d)
    if (k.dims[d] != 1) keep.push_back(d);
  auto pick = [&keep](const std::vector<int64_t>& v) {
    std::vector<int64_t> out;
    for (size_t d : keep) out.push_back(v[d]);
    return out;
  };
  k.dims = pick(k.dims);
  for (auto& p : k.inputs) p.strides = pick(p.strides);
  // Merge dim d into d+1 when every input's stride along d is its stride along d+1 times the
  // size of d+1 (then (c_d, c_{d+1}) addresses like one dim of size dims[d]*dims[d+1]).
  for (size_t d = 0; d + 1 < k.dims.size();) {
    bool mergeable = true;
    for (const auto& p : k.inputs)
      mergeable &= p.strides[d] == p.strides[d + 1] * k.dims[d + 1];
    if (!mergeable) {
      ++d;
      continue;
    }
    k.dims[d + 1] *= k.dims[d];
    k.dims.erase(k.dims.begin() + static_cast<std::ptrdiff_t>(d));
    for (auto& p : k.inputs) p.strides.erase(p.strides.begin() + static_cast<std::ptrdiff_t>(d));
    if (d > 0) --d;
  }
}

Result<std::vector<int64_t>> broadcast_strides(const std::vector<int64_t>& in,
                                               const std::vector<int64_t>& out) {
  if (in.size() > out.size())
    return errors::InvalidArgument("an input of rank {} does not broadcast to rank {}", in.size(),
                                   out.size());
  std::vector<int64_t> strides(out.size(), 0);
  int64_t s = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    const size_t din = in.size() - 1 - k;
    const size_t dout = out.size() - 1 - k;
    if (in[din] == out[dout]) {
      strides[dout] = in[din] == 1 ? 0 : s;
    } else if (in[din] == 1) {
      strides[dout] = 0;
    } else {
      return errors::InvalidArgument("dim {} of size {} does not broadcast to {}", din, in[din],
                                     out[dout]);
    }
    s *= in[din];
  }
  return strides;
}

bool is_comparison(const std::string& op) {
  return op == "eq" || op == "lt" || op == "gt" || op == "le" || op == "ge";
}

int Builder::push(Instr i) {
  k_.body.push_back(std::move(i));
  return static_cast<int>(k_.body.size()) - 1;
}

int Builder::load(int param) {
  Instr i;
  i.kind = Instr::kLoad;
  i.type = k_.inputs[static_cast<size_t>(param)].type;
  i.param = param;
  return push(i);
}

int Builder::constant(Scalar type, double value) {
  Instr i;
  i.kind = Instr::kConst;
  i.type = type;
  i.value = value;
  return push(i);
}

int Builder::unary(const std::string& op, int a, double alpha, double beta) {
  Instr i;
  i.kind = Instr::kUnary;
  i.op = op;
  i.a = a;
  i.alpha = alpha;
  i.beta = beta;
  i.type = (op == "isnan" || op == "isinf" || op == "not") ? Scalar::kBool : type(a);
  return push(i);
}

int Builder::binary(const std::string& op, int a, int b) {
  Instr i;
  i.kind = Instr::kBinary;
  i.op = op;
  i.a = a;
  i.b = b;
  i.type = is_comparison(op) ? Scalar::kBool : type(a);
  return push(i);
}

int Builder::select(int cond, int a, int b) {
  Instr i;
  i.kind = Instr::kSelect;
  i.a = a;
  i.b = b;
  i.c = cond;
  i.type = type(a);
  return push(i);
}

int Builder::cast(Scalar to, int a) {
  Instr i;
  i.kind = Instr::kCast;
  i.type = to;
  i.a = a;
  return push(i);
}

}  // namespace tensord::codegen
