// Shapes and host-side tensor values.
//
// Tensors are row-major and contiguous. A dimension of -1 means "not known yet" (only in
// inferred types before execution, never in a value).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensord/dtype.h"
#include "tensord/status.h"

namespace tensord {

using Shape = std::vector<int64_t>;

// Product of dims (1 for a scalar). Assumes every dim is known and >= 0.
int64_t shape_numel(const Shape& shape);
// "[2, 3, 4]"; unknown dims print as "?".
std::string shape_to_string(const Shape& shape);
bool shape_is_static(const Shape& shape);
// Checks dims are >= 0 and that numel * elem_size fits in int64 (no overflow on absurd
// sizes). Returns the byte size.
Result<int64_t> checked_byte_size(DType dtype, const Shape& shape);

// dtype + shape, as known to inference.
struct TensorType {
  DType dtype = DType::kUndefined;
  Shape shape;
  bool defined() const { return dtype != DType::kUndefined; }
  std::string to_string() const;  // "float32[2, 3]"
  friend bool operator==(const TensorType&, const TensorType&) = default;
};

// A non-owning view of a contiguous tensor in host memory. Valid while its owner is.
struct TensorView {
  DType dtype = DType::kUndefined;
  Shape shape;
  const void* data = nullptr;

  int64_t numel() const { return shape_numel(shape); }
  int64_t nbytes() const { return numel() * static_cast<int64_t>(dtype_size(dtype)); }
  template <typename T>
  const T* as() const { return static_cast<const T*>(data); }
  TensorType type() const { return {dtype, shape}; }
};

// An owning, immutable-by-convention tensor in host memory (initializers, attribute values,
// downloads). Copies share the bytes.
// "6.3 MiB", "512 B": a byte count for people.
std::string format_bytes(int64_t bytes);

class HostTensor {
 public:
  HostTensor() = default;
  // Zero-filled tensor. Asserts the size is sane: callers validate untrusted sizes with
  // checked_byte_size first.
  HostTensor(DType dtype, Shape shape);
  // Copies `nbytes` from `data` (must equal the tensor's byte size).
  static Result<HostTensor> from_bytes(DType dtype, Shape shape, const void* data, size_t nbytes);
  template <typename T>
  static HostTensor from_vector(const std::vector<T>& values, Shape shape) {
    HostTensor t(dtype_v<T>, std::move(shape));
    T* dst = t.mutable_data<T>();
    for (size_t i = 0; i < values.size() && i < static_cast<size_t>(t.numel()); ++i) dst[i] = values[i];
    return t;
  }
  template <typename T>
  static HostTensor scalar(T value) { return from_vector<T>({value}, {}); }
  // Not zero-filled: for a caller about to write every byte (a read's destination). Checks
  // the size: RESOURCE_EXHAUSTED when the memory cannot be had.
  static Result<HostTensor> uninitialized(DType dtype, Shape shape);
  // A tensor over memory that something else owns (a shared-memory region a read landed in):
  // `data` holds the tensor's bytes (exactly its byte size) and stays valid while `owner`
  // lives; copies of the tensor share `owner`, the last one drops it.
  static Result<HostTensor> adopt(DType dtype, Shape shape, void* data,
                                  std::shared_ptr<void> owner);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return nbytes_; }
  bool empty() const { return dtype_ == DType::kUndefined; }

  const void* data() const { return data_; }
  void* mutable_data() { return data_; }
  template <typename T>
  const T* data() const { return static_cast<const T*>(data()); }
  template <typename T>
  T* mutable_data() { return static_cast<T*>(mutable_data()); }

  TensorView view() const { return {dtype_, shape_, data()}; }
  TensorType type() const { return {dtype_, shape_}; }

  // Values of an integer tensor (int8..uint64, bool) as int64.
  Result<std::vector<int64_t>> to_int64_vector() const;
  // Values of any numeric tensor as double.
  std::vector<double> to_double_vector() const;

 private:
  DType dtype_ = DType::kUndefined;
  Shape shape_;
  // The bytes (64-byte aligned when this class allocated them) and what keeps them alive.
  std::shared_ptr<void> owner_;
  unsigned char* data_ = nullptr;
  size_t nbytes_ = 0;
};

}  // namespace tensord
