// ONNX model export: graph IR -> ModelProto (a .onnx file), the inverse of onnx_import.h.
//
// The IR is already in opset-17 form, so the model declares ai.onnx opset 17 (and version 1 of
// any other domain a node names). Initializers are written as raw_data; attributes of every
// kind are written, subgraphs (If/Loop/Scan bodies) recursively. Graph inputs and outputs
// carry their dtype and shape; an unknown dim (-1) becomes a named symbolic dim, a top-level
// output with no declared type gets the type schema inference gives it. Used by
// `tensord bench --vs` to hand a zoo network to other runtimes (onnxruntime, PyTorch).
#pragma once

#include <string>

#include "tensord/graph.h"

namespace tensord::onnx {

// Serialized ModelProto (IR version 8, opset 17). Errors: INVALID_ARGUMENT for a graph that
// cannot be written (an initializer without bytes, a model past protobuf's 2 GiB limit).
Result<std::string> export_model(const Graph& graph);
// export_model, written to `path` (errors name the file).
Status export_file(const Graph& graph, const std::string& path);

}  // namespace tensord::onnx
