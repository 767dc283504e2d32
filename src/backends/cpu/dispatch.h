// Dtype dispatch for kernels: runs a generic lambda with the C++ element type of a DType.
//
//   return dispatch_numeric(t.dtype, [&](auto tag) -> Status {
//     using T = typename decltype(tag)::type;
//     ...
//   });
//
// Returns UNIMPLEMENTED for dtypes outside the set (float16/bfloat16 are normally widened to
// float32 before a kernel runs; see KernelDef::native_low_precision).
#pragma once

#include <cstdint>

#include "core/errors.h"
#include "tensord/dtype.h"

namespace tensord::cpu {

template <typename T>
struct TypeTag {
  using type = T;
};

#define TD_DISPATCH_CASE_(DT, T) \
  case DType::DT:                \
    return fn(TypeTag<T>{});

// float32, float64, all integers.
template <typename Fn>
Status dispatch_numeric(DType t, Fn&& fn) {
  switch (t) {
    TD_DISPATCH_CASE_(kFloat32, float)
    TD_DISPATCH_CASE_(kFloat64, double)
    TD_DISPATCH_CASE_(kInt8, int8_t)
    TD_DISPATCH_CASE_(kUInt8, uint8_t)
    TD_DISPATCH_CASE_(kInt16, int16_t)
    TD_DISPATCH_CASE_(kUInt16, uint16_t)
    TD_DISPATCH_CASE_(kInt32, int32_t)
    TD_DISPATCH_CASE_(kUInt32, uint32_t)
    TD_DISPATCH_CASE_(kInt64, int64_t)
    TD_DISPATCH_CASE_(kUInt64, uint64_t)
    default:
      return errors::Unimplemented("dtype {} is not supported here", dtype_name(t));
  }
}

// numeric + bool.
template <typename Fn>
Status dispatch_all(DType t, Fn&& fn) {
  if (t == DType::kBool) return fn(TypeTag<bool>{});
  return dispatch_numeric(t, std::forward<Fn>(fn));
}

// float32, float64.
template <typename Fn>
Status dispatch_float(DType t, Fn&& fn) {
  switch (t) {
    TD_DISPATCH_CASE_(kFloat32, float)
    TD_DISPATCH_CASE_(kFloat64, double)
    default:
      return errors::Unimplemented("dtype {} is not supported here (float32/float64 only)",
                                   dtype_name(t));
  }
}

// Any dtype by element size only (for data movement: Transpose, Concat, Gather ...).
template <typename Fn>
Status dispatch_by_size(DType t, Fn&& fn) {
  switch (dtype_size(t)) {
    case 1: return fn(TypeTag<uint8_t>{});
    case 2: return fn(TypeTag<uint16_t>{});
    case 4: return fn(TypeTag<uint32_t>{});
    case 8: return fn(TypeTag<uint64_t>{});
    default:
      return errors::Unimplemented("dtype {} is not supported here", dtype_name(t));
  }
}

#undef TD_DISPATCH_CASE_

}  // namespace tensord::cpu
