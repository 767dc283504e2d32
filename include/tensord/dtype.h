// Element types. The numbering is ONNX's TensorProto.DataType, so the importer and the wire
// protocol need no translation table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tensord {

enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kBFloat16 = 16,
};

// Bytes per element; 0 for kUndefined or an unknown value.
size_t dtype_size(DType t);
// "float32", "float16", "bfloat16", "float64", "int8", ..., "bool"; "undefined" otherwise.
const char* dtype_name(DType t);
// Accepts our names and NumPy's aliases ("float", "double", "half", "f4", "i8" ...).
std::optional<DType> dtype_from_name(std::string_view name);
// True for the numbers of the enum above (values read from files go through this).
bool dtype_is_valid(int32_t value);

bool dtype_is_float(DType t);    // float16, bfloat16, float32, float64
bool dtype_is_integer(DType t);  // signed and unsigned integers (not bool)
bool dtype_is_signed(DType t);   // floats and signed integers
bool dtype_is_numeric(DType t);  // floats and integers (not bool)

// Maps a C++ element type to its DType.
template <typename T>
struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::kFloat32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::kFloat64; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::kInt8; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::kUInt8; };
template <> struct dtype_of<int16_t> { static constexpr DType value = DType::kInt16; };
template <> struct dtype_of<uint16_t> { static constexpr DType value = DType::kUInt16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct dtype_of<uint32_t> { static constexpr DType value = DType::kUInt32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct dtype_of<uint64_t> { static constexpr DType value = DType::kUInt64; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::kBool; };
template <typename T>
inline constexpr DType dtype_v = dtype_of<T>::value;

// IEEE half and bfloat16 <-> float (round to nearest even).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_bfloat16(float f);

}  // namespace tensord
