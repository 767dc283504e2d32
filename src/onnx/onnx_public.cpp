// include/tensord/onnx.h over the importer (src/onnx/onnx_import.h).
#include "tensord/onnx.h"

#include "onnx/onnx_import.h"

namespace tensord {

Result<Graph> load_onnx_file(const std::string& path) {
  TD_ASSIGN_OR_RETURN(onnx::Model model, onnx::import_file(path));
  return std::move(model.graph);
}

Result<Graph> load_onnx_bytes(const void* data, size_t size, const std::string& what) {
  if (size > 0 && !data)
    return Status(StatusCode::kInvalidArgument, "load_onnx_bytes: no data for " +
                                                    std::to_string(size) + " bytes");
  std::string bytes(static_cast<const char*>(data), size);
  TD_ASSIGN_OR_RETURN(onnx::Model model, onnx::import_bytes(bytes, what));
  return std::move(model.graph);
}

}  // namespace tensord
