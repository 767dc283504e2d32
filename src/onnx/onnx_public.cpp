// include/tensord/onnx.h over the importer (src/onnx/onnx_import.h).
#include "tensord/onnx.h"

#include <filesystem>

#include "onnx/onnx_import.h"

namespace tensord {

Result<Graph> load_onnx_file(const std::string& path) {
  TD_ASSIGN_OR_RETURN(onnx::Model model, onnx::import_file(path));
  // Named by the file, as the user knows it, not the exporter's graph name ("torch_jit"): the
  // stem, or the folder of a model.onnx (".../resnet18/model.onnx" -> "resnet18").
  const std::filesystem::path p = std::filesystem::absolute(path).lexically_normal();
  std::string name = p.stem().string();
  if (name == "model" && !p.parent_path().filename().empty())
    name = p.parent_path().filename().string();
  if (!name.empty()) model.graph.name = name;
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
