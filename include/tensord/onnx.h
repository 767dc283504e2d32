// Loading ONNX models (.onnx files or serialized ModelProto bytes) as graphs, to run with
// Client::load()/run() or Client::execute().
//
// Every node is rewritten into its opset-17 form; initializers (including external data next
// to the file) become graph initializers. Errors name the file and the node: corrupt files,
// unsupported opsets, and every unsupported op at once.
#pragma once

#include <string>

#include "tensord/graph.h"
#include "tensord/status.h"

namespace tensord {

// Reads a .onnx file; external data files are resolved relative to its folder. The graph is
// named by the file ("resnet18.onnx", or "resnet18/model.onnx": "resnet18"), which a broker's
// log and status show, not by the name inside the file.
Result<Graph> load_onnx_file(const std::string& path);
// Serialized ModelProto bytes; `what` names the source in errors. External data is refused.
Result<Graph> load_onnx_bytes(const void* data, size_t size, const std::string& what = "<bytes>");
inline Result<Graph> load_onnx_bytes(const std::string& bytes,
                                     const std::string& what = "<bytes>") {
  return load_onnx_bytes(bytes.data(), bytes.size(), what);
}

}  // namespace tensord
