#include "tensord/dtype.h"

#include <cstring>
#include <string>

namespace tensord {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: case DType::kInt32: case DType::kUInt32: return 4;
    case DType::kFloat64: case DType::kInt64: case DType::kUInt64: return 8;
    case DType::kFloat16: case DType::kBFloat16: case DType::kInt16: case DType::kUInt16: return 2;
    case DType::kInt8: case DType::kUInt8: case DType::kBool: return 1;
    case DType::kUndefined: return 0;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kUInt8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kUInt16: return "uint16";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kBool: return "bool";
    case DType::kFloat16: return "float16";
    case DType::kFloat64: return "float64";
    case DType::kUInt32: return "uint32";
    case DType::kUInt64: return "uint64";
    case DType::kBFloat16: return "bfloat16";
    case DType::kUndefined: return "undefined";
  }
  return "undefined";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  static const struct { const char* name; DType t; } kNames[] = {
      {"float32", DType::kFloat32}, {"float", DType::kFloat32}, {"f4", DType::kFloat32},
      {"float64", DType::kFloat64}, {"double", DType::kFloat64}, {"f8", DType::kFloat64},
      {"float16", DType::kFloat16}, {"half", DType::kFloat16}, {"f2", DType::kFloat16},
      {"bfloat16", DType::kBFloat16},
      {"int8", DType::kInt8}, {"i1", DType::kInt8}, {"uint8", DType::kUInt8}, {"u1", DType::kUInt8},
      {"int16", DType::kInt16}, {"i2", DType::kInt16}, {"uint16", DType::kUInt16}, {"u2", DType::kUInt16},
      {"int32", DType::kInt32}, {"i4", DType::kInt32}, {"uint32", DType::kUInt32}, {"u4", DType::kUInt32},
      {"int64", DType::kInt64}, {"i8", DType::kInt64}, {"uint64", DType::kUInt64}, {"u8", DType::kUInt64},
      {"bool", DType::kBool}, {"b1", DType::kBool},
  };
  for (const auto& n : kNames)
    if (name == n.name) return n.t;
  return std::nullopt;
}

bool dtype_is_valid(int32_t v) {
  return (v >= 1 && v <= 7) || (v >= 9 && v <= 13) || v == 16;
}

bool dtype_is_float(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 ||
         t == DType::kBFloat16;
}

bool dtype_is_integer(DType t) {
  switch (t) {
    case DType::kInt8: case DType::kUInt8: case DType::kInt16: case DType::kUInt16:
    case DType::kInt32: case DType::kUInt32: case DType::kInt64: case DType::kUInt64:
      return true;
    default:
      return false;
  }
}

bool dtype_is_numeric(DType t) { return dtype_is_float(t) || dtype_is_integer(t); }

bool dtype_is_signed(DType t) {
  return dtype_is_float(t) || t == DType::kInt8 || t == DType::kInt16 || t == DType::kInt32 ||
         t == DType::kInt64;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0);
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: overflow to inf
  if (abs < 0x38800000u) {                         // below the smallest normal half: subnormal
    if (abs < 0x33000000u) return sign;            // rounds to zero
    // value = m * 2^(e-150); in units of the smallest subnormal (2^-24): m >> (126 - e)
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;
    uint32_t result = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (result & 1))) ++result;
    return sign | static_cast<uint16_t>(result);
  }
  // normal: rebias exponent, round mantissa to nearest even
  uint32_t v = abs - ((127 - 15) << 23);
  const uint32_t rem = v & 0x1fffu;
  v >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (v & 1))) ++v;
  return sign | static_cast<uint16_t>(v);
}

float bfloat16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // nan
  const uint32_t lsb = (x >> 16) & 1;
  x += 0x7fffu + lsb;
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace tensord
