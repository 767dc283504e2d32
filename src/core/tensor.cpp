#include "tensord/tensor.h"

#include <cassert>
#include <cstring>
#include <new>
#include <limits>

#include "core/errors.h"
#include "core/host_blocks.h"

namespace tensord {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_to_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += shape[i] < 0 ? std::string("?") : std::to_string(shape[i]);
  }
  return s + "]";
}

bool shape_is_static(const Shape& shape) {
  for (int64_t d : shape)
    if (d < 0) return false;
  return true;
}

Result<int64_t> checked_byte_size(DType dtype, const Shape& shape) {
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
  if (elem == 0) return errors::InvalidArgument("invalid dtype {}", static_cast<int>(dtype));
  int64_t n = elem;
  for (int64_t d : shape) {
    if (d < 0) return errors::InvalidArgument("negative dimension in shape {}", shape_to_string(shape));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      return errors::InvalidArgument("shape {} of {} is too large (byte size overflows int64)",
                                     shape_to_string(shape), dtype_name(dtype));
    n *= d;
  }
  return n;
}

std::string TensorType::to_string() const {
  return std::string(dtype_name(dtype)) + shape_to_string(shape);
}

HostTensor::HostTensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  auto size = checked_byte_size(dtype_, shape_);
  assert(size.ok());
  nbytes_ = static_cast<size_t>(size.ok() ? *size : 0);
  owner_ = allocate_host_bytes(nbytes_);
  data_ = static_cast<unsigned char*>(owner_.get());
  if (nbytes_) std::memset(data_, 0, nbytes_);
}

Result<HostTensor> HostTensor::uninitialized(DType dtype, Shape shape) {
  TD_ASSIGN_OR_RETURN(int64_t size, checked_byte_size(dtype, shape));
  HostTensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.nbytes_ = static_cast<size_t>(size);
  try {
    t.owner_ = allocate_host_bytes(t.nbytes_);
  } catch (const std::bad_alloc&) {
    return errors::ResourceExhausted("cannot allocate {} bytes of host memory for {}{}", size,
                                     dtype_name(dtype), shape_to_string(t.shape_));
  }
  t.data_ = static_cast<unsigned char*>(t.owner_.get());
  return t;
}

Result<HostTensor> HostTensor::adopt(DType dtype, Shape shape, void* data,
                                     std::shared_ptr<void> owner) {
  TD_ASSIGN_OR_RETURN(int64_t size, checked_byte_size(dtype, shape));
  if (size > 0 && !data)
    return errors::InvalidArgument("adopt: no memory for {}{} ({} bytes)", dtype_name(dtype),
                                   shape_to_string(shape), size);
  HostTensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.nbytes_ = static_cast<size_t>(size);
  t.owner_ = std::move(owner);
  t.data_ = size > 0 ? static_cast<unsigned char*>(data) : nullptr;
  return t;
}

Result<HostTensor> HostTensor::from_bytes(DType dtype, Shape shape, const void* data,
                                          size_t nbytes) {
  TD_ASSIGN_OR_RETURN(int64_t size, checked_byte_size(dtype, shape));
  if (static_cast<size_t>(size) != nbytes)
    return errors::InvalidArgument("{}{} needs {} bytes, got {}", dtype_name(dtype),
                                   shape_to_string(shape), size, nbytes);
  TD_ASSIGN_OR_RETURN(HostTensor t, uninitialized(dtype, std::move(shape)));
  if (nbytes) std::memcpy(t.mutable_data(), data, nbytes);
  return t;
}

namespace {
template <typename T>
void widen(const void* p, int64_t n, std::vector<int64_t>& out) {
  const T* v = static_cast<const T*>(p);
  for (int64_t i = 0; i < n; ++i) out.push_back(static_cast<int64_t>(v[i]));
}
}  // namespace

Result<std::vector<int64_t>> HostTensor::to_int64_vector() const {
  std::vector<int64_t> out;
  const int64_t n = numel();
  out.reserve(static_cast<size_t>(n));
  switch (dtype_) {
    case DType::kInt64: widen<int64_t>(data(), n, out); break;
    case DType::kInt32: widen<int32_t>(data(), n, out); break;
    case DType::kInt16: widen<int16_t>(data(), n, out); break;
    case DType::kInt8: widen<int8_t>(data(), n, out); break;
    case DType::kUInt64: widen<uint64_t>(data(), n, out); break;
    case DType::kUInt32: widen<uint32_t>(data(), n, out); break;
    case DType::kUInt16: widen<uint16_t>(data(), n, out); break;
    case DType::kUInt8: widen<uint8_t>(data(), n, out); break;
    case DType::kBool: widen<bool>(data(), n, out); break;
    default:
      return errors::InvalidArgument("expected an integer tensor, got {}", dtype_name(dtype_));
  }
  return out;
}

std::vector<double> HostTensor::to_double_vector() const {
  std::vector<double> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) {
    double v = 0;
    switch (dtype_) {
      case DType::kFloat32: v = data<float>()[i]; break;
      case DType::kFloat64: v = data<double>()[i]; break;
      case DType::kFloat16: v = half_to_float(data<uint16_t>()[i]); break;
      case DType::kBFloat16: v = bfloat16_to_float(data<uint16_t>()[i]); break;
      case DType::kInt64: v = static_cast<double>(data<int64_t>()[i]); break;
      case DType::kInt32: v = data<int32_t>()[i]; break;
      case DType::kInt16: v = data<int16_t>()[i]; break;
      case DType::kInt8: v = data<int8_t>()[i]; break;
      case DType::kUInt64: v = static_cast<double>(data<uint64_t>()[i]); break;
      case DType::kUInt32: v = data<uint32_t>()[i]; break;
      case DType::kUInt16: v = data<uint16_t>()[i]; break;
      case DType::kUInt8: v = data<uint8_t>()[i]; break;
      case DType::kBool: v = data<bool>()[i] ? 1 : 0; break;
      case DType::kUndefined: break;
    }
    out[static_cast<size_t>(i)] = v;
  }
  return out;
}

std::string format_bytes(int64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.1f} {}", v, units[u]);
}

}  // namespace tensord
