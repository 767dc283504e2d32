#include "core/npy.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/errors.h"

namespace tensord {
namespace {

// ": <the OS's reason>" after a failed open (errno), or "" when it gave none.
std::string open_error() {
  const int e = errno;
  return e ? std::string(": ") + std::strerror(e) : std::string();
}

const char* npy_descr(DType t) {
  switch (t) {
    case DType::kFloat32: return "<f4";
    case DType::kFloat64: return "<f8";
    case DType::kFloat16: return "<f2";
    case DType::kInt8: return "|i1";
    case DType::kUInt8: return "|u1";
    case DType::kInt16: return "<i2";
    case DType::kUInt16: return "<u2";
    case DType::kInt32: return "<i4";
    case DType::kUInt32: return "<u4";
    case DType::kInt64: return "<i8";
    case DType::kUInt64: return "<u8";
    case DType::kBool: return "|b1";
    default: return nullptr;
  }
}

std::optional<DType> dtype_from_descr(const std::string& d) {
  if (d.size() < 3) return std::nullopt;
  if (d[0] == '>' && d.substr(1) != "i1" && d.substr(1) != "u1" && d.substr(1) != "b1")
    return std::nullopt;  // big-endian
  const std::string k = d.substr(1);
  if (k == "f4") return DType::kFloat32;
  if (k == "f8") return DType::kFloat64;
  if (k == "f2") return DType::kFloat16;
  if (k == "i1") return DType::kInt8;
  if (k == "u1") return DType::kUInt8;
  if (k == "i2") return DType::kInt16;
  if (k == "u2") return DType::kUInt16;
  if (k == "i4") return DType::kInt32;
  if (k == "u4") return DType::kUInt32;
  if (k == "i8") return DType::kInt64;
  if (k == "u8") return DType::kUInt64;
  if (k == "b1") return DType::kBool;
  return std::nullopt;
}

}  // namespace

std::string serialize_npy(const HostTensor& t) {
  std::string header = "{'descr': '";
  header += npy_descr(t.dtype()) ? npy_descr(t.dtype()) : "<f4";
  header += "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < t.shape().size(); ++i) {
    header += std::to_string(t.shape()[i]);
    if (t.shape().size() == 1 || i + 1 < t.shape().size()) header += ",";
    if (i + 1 < t.shape().size()) header += " ";
  }
  header += "), }";
  // magic(6) + version(2) + len(2) + header + '\n' padded to a multiple of 64
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.push_back(static_cast<char>(len & 0xff));
  out.push_back(static_cast<char>(len >> 8));
  out += header;
  out.append(static_cast<const char*>(t.data()), t.nbytes());
  return out;
}

Status write_npy(const std::string& path, const HostTensor& t) {
  if (!npy_descr(t.dtype()))
    return errors::Unimplemented("cannot write {} to .npy", dtype_name(t.dtype()));
  std::ofstream f(path, std::ios::binary);
  if (!f) return errors::NotFound("cannot open '{}' for writing{}", path, open_error());
  const std::string bytes = serialize_npy(t);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) return errors::DataLoss("failed writing '{}'", path);
  return OkStatus();
}

Result<HostTensor> parse_npy(const std::string& b, const std::string& what) {
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0)
    return errors::InvalidArgument("{}: not a .npy file (bad magic)", what);
  const int major = static_cast<unsigned char>(b[6]);
  size_t header_len, offset;
  if (major == 1) {
    header_len = static_cast<unsigned char>(b[8]) | (static_cast<unsigned char>(b[9]) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) return errors::InvalidArgument("{}: truncated .npy header", what);
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(b[8 + i])) << (8 * i);
    offset = 12;
  } else {
    return errors::InvalidArgument("{}: unsupported .npy version {}", what, major);
  }
  if (b.size() < offset + header_len) return errors::InvalidArgument("{}: truncated .npy header", what);
  const std::string header = b.substr(offset, header_len);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr':\\s*'([^']*)'")))
    return errors::InvalidArgument("{}: .npy header has no descr", what);
  auto dtype = dtype_from_descr(m[1]);
  if (!dtype) return errors::Unimplemented("{}: unsupported .npy dtype '{}'", what, std::string(m[1]));
  if (std::regex_search(header, m, std::regex("'fortran_order':\\s*True")))
    return errors::Unimplemented("{}: Fortran-order .npy files are not supported", what);
  if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)")))
    return errors::InvalidArgument("{}: .npy header has no shape", what);
  Shape shape;
  std::stringstream ss(m[1].str());
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.find_first_not_of(" ") == std::string::npos) continue;
    try {
      shape.push_back(std::stoll(item));
    } catch (...) {
      return errors::InvalidArgument("{}: bad .npy shape '{}'", what, m[1].str());
    }
  }
  TD_ASSIGN_OR_RETURN(int64_t nbytes, checked_byte_size(*dtype, shape));
  const size_t data_off = offset + header_len;
  if (b.size() - data_off != static_cast<size_t>(nbytes))
    return errors::InvalidArgument("{}: .npy data has {} bytes, shape {} of {} needs {}", what,
                                   b.size() - data_off, shape_to_string(shape), dtype_name(*dtype),
                                   nbytes);
  return HostTensor::from_bytes(*dtype, shape, b.data() + data_off, static_cast<size_t>(nbytes));
}

Result<HostTensor> read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return errors::NotFound("cannot open '{}'{}", path, open_error());
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_npy(ss.str(), path);
}

}  // namespace tensord
