// The kernel generator's device-neutral IR: an element-wise kernel is a 1-D launch over the
// row-major index space of its output shape; each work item loads its inputs (with broadcast
// strides, specialised as constants), evaluates a straight-line body of SSA instructions and
// stores its outputs. Backends print it in their dialect (printer.h: OpenCL C, CUDA C) and
// compile it; nothing here knows a device API.
//
// Buffers are passed as (base pointer, byte offset) pairs so that kernels read the engine's
// caching allocator's sub-allocations (a Buffer is an allocation plus an offset) without a
// driver call per tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensord/dtype.h"
#include "tensord/status.h"

namespace tensord::codegen {

// Scalar types a generated kernel computes in. kBool is stored as one byte (0/1).
enum class Scalar : uint8_t { kF32, kI32, kI64, kBool };

// The Scalar of a tensor dtype (UNIMPLEMENTED for the others).
Result<Scalar> scalar_of(DType dtype);

// How a value is kept in memory when that differs from the Scalar it is computed in:
// float16 and bfloat16 tensors are 16-bit words, loaded into float32 (kF32, exact), computed
// in float32 and rounded to nearest even when stored (or when a node's result is of that
// dtype, so a fused chain rounds where the graph does).
enum class Storage : uint8_t { kPlain, kF16, kBF16 };
// kF16 / kBF16 for float16 / bfloat16, else kPlain.
Storage storage_of(DType dtype);
// The Scalar a tensor of `dtype` is computed in: scalar_of, and kF32 for float16/bfloat16
// when `halves` (a printer that has their conversions), else UNIMPLEMENTED for them.
Result<Scalar> compute_scalar_of(DType dtype, bool halves);
DType dtype_of(Scalar s);
const char* scalar_name(Scalar s);

// One instruction; instruction k defines value k.
struct Instr {
  enum Kind : uint8_t { kLoad, kConst, kUnary, kBinary, kSelect, kCast };
  Kind kind = kConst;
  Scalar type = Scalar::kF32;  // the result's type
  // kUnary: "neg" "abs" "sqrt" "exp" "log" "tanh" "sigmoid" "relu" "leaky_relu" "elu" ...
  //         "round_f16" "round_bf16" (a kF32 rounded to float16/bfloat16 and back)
  // kBinary: "add" "sub" "mul" "div" "pow" "max" "min" "fmod" "prelu"
  //          "eq" "lt" "gt" "le" "ge" (result kBool) "and" "or" "xor" (on kBool)
  std::string op;
  int a = -1, b = -1, c = -1;  // operands (values); kSelect: c ? a : b
  int param = -1;              // kLoad: the input parameter
  double value = 0;            // kConst
  double alpha = 0, beta = 0;  // op parameters (LeakyRelu's alpha, HardSigmoid's alpha/beta)
};

// An input buffer: its element type and its stride (in elements) along each dim of the index
// space; 0 where it is broadcast.
struct Param {
  Scalar type = Scalar::kF32;
  std::vector<int64_t> strides;
  int64_t offset = 0;  // elements before the first one read (Slice)
  Storage storage = Storage::kPlain;  // kF16/kBF16: 16-bit words loaded as kF32
};

// An output: contiguous over the index space.
struct Output {
  int value = -1;
  Scalar type = Scalar::kF32;
  Storage storage = Storage::kPlain;  // kF16/kBF16: a kF32 value stored rounded
};

struct ElementwiseKernel {
  std::string name = "tensord_ew";
  std::vector<int64_t> dims;  // the index space, row-major
  std::vector<Param> inputs;
  std::vector<Instr> body;
  std::vector<Output> outputs;
  int64_t numel() const;
};

// A reduction over some axes of a float32 input (or a float16/bfloat16 one, `storage`, loaded
// as float32 and stored rounded): one work item per output element, looping over the reduced
// elements (Kahan-compensated sums in float32). op: "sum" "mean" "max" "min" "prod"
// "sum_square" "l1" "l2" "log_sum" "log_sum_exp".
struct ReduceKernel {
  std::string name = "tensord_reduce";
  std::string op;
  std::vector<int64_t> in_shape;
  std::vector<bool> reduced;  // per input dim
  Storage storage = Storage::kPlain;  // of the input and the output
  int64_t out_numel() const;
  int64_t reduced_numel() const;
};

// Merges adjacent dims along which every input is either contiguous-compatible or broadcast
// the same way, and drops dims of size 1: fewer divisions per work item. Same semantics.
void simplify(ElementwiseKernel& k);

// Strides (in elements) of an input of shape `in` broadcast to `out` (ONNX multidirectional
// broadcasting: `in` aligned to the right; dims of 1 broadcast). Fails when they do not fit.
Result<std::vector<int64_t>> broadcast_strides(const std::vector<int64_t>& in,
                                               const std::vector<int64_t>& out);

// Appends instructions; returns the defined value.
class Builder {
 public:
  explicit Builder(ElementwiseKernel& k) : k_(k) {}
  int load(int param);
  int constant(Scalar type, double value);
  int unary(const std::string& op, int a, double alpha = 0, double beta = 0);
  int binary(const std::string& op, int a, int b);
  int select(int cond, int a, int b);
  int cast(Scalar to, int a);
  Scalar type(int v) const { return k_.body[static_cast<size_t>(v)].type; }

 private:
  int push(Instr i);
  ElementwiseKernel& k_;
};

// Whether op (a kBinary op name) yields kBool.
bool is_comparison(const std::string& op);

}  // namespace tensord::codegen
