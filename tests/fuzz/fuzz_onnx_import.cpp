// libFuzzer target: arbitrary bytes as an ONNX model. Import must return a Status, never
// crash; when it succeeds, shape inference over the graph must not crash either.
//
// Build (clang): cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DTENSORD_FUZZ=ON
// Run:  build-fuzz/tests/fuzz_onnx_import tests/fuzz/corpus -max_total_time=600
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/graph_utils.h"
#include "core/op_registry.h"
#include "onnx/onnx_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto model = tensord::onnx::import_bytes(bytes, "fuzz.onnx");
  if (!model.ok()) return 0;
  std::vector<tensord::TensorType> types;
  for (const auto& in : model->graph.inputs) {
    tensord::TensorType t = in.type;
    if (!t.defined()) t.dtype = tensord::DType::kFloat32;
    for (auto& d : t.shape) d = d < 0 ? 1 : std::min<int64_t>(d, 64);
    types.push_back(t);
  }
  (void)tensord::infer_graph(tensord::OpRegistry::global(), model->graph, types);
  (void)tensord::onnx::out_of_scope_reason(bytes);
  return 0;
}
