// ONNX model import: ModelProto (a .onnx file) -> graph IR.
//
// The importer rewrites every node into its opset-17 form (attribute -> input changes in
// Clip, Slice, Reshape, Squeeze/Unsqueeze, ReduceSum, Split, Pad, TopK, Dropout, Resize ...;
// the pre-13 2-D semantics of Softmax/LogSoftmax/Hardmax; opset < 7 broadcasting with
// broadcast=1 and axis, and PRelu's per-channel slope, rewritten to NumPy broadcasting with an
// Unsqueeze of the second input once the input ranks are known from declared shapes or shape
// inference — an impossible alignment is INVALID_ARGUMENT, unknown ranks UNIMPLEMENTED), so
// schemas and kernels have one form to handle. Initializers (including external data files next to the model) become
// graph initializers; graph inputs that have an initializer are not runtime inputs.
//
// Errors name the file and the node: truncated or corrupt files, wrong magic, cycles,
// dangling value names, initializers whose bytes disagree with their shape, absurd dims,
// unsupported opsets (newer than 17). Every unsupported op is reported at once, by name, at load time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensord/graph.h"

namespace tensord::onnx {

struct Model {
  Graph graph;
  int64_t opset = 0;          // ai.onnx opset the file declared
  int64_t ir_version = 0;
  std::string producer;       // "pytorch 1.13.1"
  std::string path;           // where it was read from ("" for bytes)
};

struct ImportOptions {
  // Fail when an op is not in the op registry (all unknown ops are listed in one error).
  bool check_ops = true;
  // Bounds checked on the serialized bytes before anything is parsed or converted (0 = no
  // bound): If/Loop/Scan bodies nested inside bodies, and nodes in all, subgraphs included. A
  // broker sets them so that a hostile file costs one linear scan, not a full import.
  int max_subgraph_depth = 0;
  int64_t max_nodes = 0;
};

// Reads and imports a .onnx file. External data is resolved relative to its folder.
Result<Model> import_file(const std::string& path, const ImportOptions& options = {});
// Imports serialized ModelProto bytes; `what` names the source in errors, `base_dir` is
// where external data files are looked up ("" = external data is refused).
Result<Model> import_bytes(const std::string& bytes, const std::string& what,
                           const std::string& base_dir = "", const ImportOptions& options = {});

// A serialized onnx.TensorProto (.pb file, as in the ONNX backend tests) -> HostTensor.
Result<HostTensor> read_tensor_file(const std::string& path);
Result<HostTensor> parse_tensor(const std::string& bytes, const std::string& what);
// HostTensor -> serialized onnx.TensorProto (raw_data).
std::string serialize_tensor(const HostTensor& tensor, const std::string& name = "");

// Why a model is out of tensord's scope (string/sequence/optional/map types, training ops),
// or "" when it is in scope. Used by onnx-test to report skips with a reason.
std::string out_of_scope_reason(const std::string& model_bytes);

}  // namespace tensord::onnx
