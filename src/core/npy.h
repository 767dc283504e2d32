// NumPy .npy files (format versions 1.0–3.0, little-endian, C order) <-> HostTensor.
#pragma once

#include <string>

#include "tensord/tensor.h"

namespace tensord {

Result<HostTensor> read_npy(const std::string& path);
Result<HostTensor> parse_npy(const std::string& bytes, const std::string& what = "npy data");
Status write_npy(const std::string& path, const HostTensor& tensor);
std::string serialize_npy(const HostTensor& tensor);

}  // namespace tensord
