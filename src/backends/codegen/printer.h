// Printers: the kernel IR (kernel_ir.h) as source text of one dialect. The structure of a
// kernel (parameters, index decomposition, broadcast loads, the body, stores) is printed once,
// here; a dialect supplies only its spellings (qualifiers, types, the work-item index, math
// function names, non-finite constants) — as tinygrad's renderers do. OpenCL C and CUDA C are
// the two dialects; a third is one more subclass.
//
// Kernel signature, in every dialect: for each input, then each output, a byte pointer and a
// byte offset (64-bit): (in0, in0_off, in1, in1_off, ..., out0, out0_off, ...). The launch is
// 1-D over at least numel() work items; the ones past the end return.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backends/codegen/kernel_ir.h"

namespace tensord::codegen {

class Printer {
 public:
  virtual ~Printer() = default;
  virtual std::string dialect() const = 0;
  // The complete source of one kernel named k.name. Fails on an op the IR does not know.
  Result<std::string> print(const ElementwiseKernel& k) const;
  // Parameters: (in0, in0_off, out0, out0_off); 1-D over out_numel() work items.
  Result<std::string> print(const ReduceKernel& k) const;

 protected:
  virtual std::string preamble() const = 0;  // once per source (pragmas, typedefs)
  virtual std::string kernel_prefix() const = 0;  // "__kernel void", "extern \"C\" __global__ void"
  virtual std::string global_ptr(const std::string& type, bool is_const) const = 0;
  virtual std::string type_name(Scalar s) const = 0;  // bool: the one-byte storage type
  virtual std::string int64_name() const = 0;
  virtual std::string uint64_name() const = 0;
  virtual std::string global_index() const = 0;  // the work item's linear index, 64-bit
  // A float32 math function of the dialect: "exp" -> "exp(x)" (OpenCL) / "expf(x)" (CUDA).
  virtual std::string math(const std::string& fn, const std::string& x) const = 0;
  virtual std::string math2(const std::string& fn, const std::string& x,
                            const std::string& y) const = 0;
  virtual std::string float_infinity() const = 0;
  virtual std::string float_nan() const = 0;
  // Float -> integer conversion with the engine's semantics (truncation toward zero).
  virtual std::string float_to_int(Scalar to, const std::string& x) const;
  // float16/bfloat16 storage (kernel_ir.h Storage), printed once per source that uses it: the
  // 16-bit word type `td_half_word` and td_f16_to_f32, td_f32_to_f16, td_bf16_to_f32,
  // td_f32_to_bf16 (round to nearest even, NaN stays NaN). (optional) Default: UNIMPLEMENTED,
  // the dialect has no half storage yet.
  virtual Result<std::string> half_helpers() const;

 private:
  std::string literal(Scalar type, double value) const;
  // The preamble, with the half helpers when `halves`.
  Result<std::string> start(bool halves) const;
  Result<std::string> unary(const Instr& in, Scalar t, const std::string& x) const;
  Result<std::string> binary(const Instr& in, Scalar t, const std::string& a,
                             const std::string& b) const;
};

class OpenClPrinter final : public Printer {
 public:
  std::string dialect() const override { return "OpenCL C"; }

 protected:
  std::string preamble() const override;
  std::string kernel_prefix() const override { return "__kernel void"; }
  std::string global_ptr(const std::string& type, bool is_const) const override;
  std::string type_name(Scalar s) const override;
  std::string int64_name() const override { return "long"; }
  std::string uint64_name() const override { return "ulong"; }
  std::string global_index() const override { return "(long)get_global_id(0)"; }
  std::string math(const std::string& fn, const std::string& x) const override;
  std::string math2(const std::string& fn, const std::string& x,
                    const std::string& y) const override;
  std::string float_infinity() const override { return "INFINITY"; }
  std::string float_nan() const override { return "NAN"; }
  std::string float_to_int(Scalar to, const std::string& x) const override;
};

// CUDA C for NVRTC (issue 12): the same kernels, compiled by the CUDA backend.
class CudaPrinter final : public Printer {
 public:
  std::string dialect() const override { return "CUDA C"; }

 protected:
  std::string preamble() const override;
  std::string kernel_prefix() const override { return "extern \"C\" __global__ void"; }
  std::string global_ptr(const std::string& type, bool is_const) const override;
  std::string type_name(Scalar s) const override;
  std::string int64_name() const override { return "long long"; }
  std::string uint64_name() const override { return "unsigned long long"; }
  std::string global_index() const override {
    return "((long long)blockIdx.x * blockDim.x + threadIdx.x)";
  }
  std::string math(const std::string& fn, const std::string& x) const override;
  std::string math2(const std::string& fn, const std::string& x,
                    const std::string& y) const override;
  std::string float_infinity() const override { return "__int_as_float(0x7f800000)"; }
  std::string float_nan() const override { return "__int_as_float(0x7fc00000)"; }
  std::string float_to_int(Scalar to, const std::string& x) const override;
  // The hardware's conversions (PTX cvt; bf16 rounding in integer code below sm_80). Not
  // cuda_fp16.h's __half/__nv_bfloat16: NVRTC has no built-in copy of those headers, and a GPU
  // machine with only the driver and PyTorch's wheels may have none to include.
  Result<std::string> half_helpers() const override;
};

}  // namespace tensord::codegen
