// The same graph computed in float64: the oracle for a bare ONNX file (no source to run in
// float64) is its graph widened, run on the reference kernels, rounded once to float32.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "tensord/graph.h"
#include "tensord/status.h"

namespace tensord {

// A float32 graph rewritten to compute in float64:
//   - every float32 graph input and output is declared float64 (the caller casts the inputs);
//   - every float32 initializer, tensor attribute (Constant 'value', ConstantOfShape 'value')
//     and Constant 'value_float(s)' is widened to float64;
//   - dtype attributes that name FLOAT (Cast 'to'; 'dtype' of RandomNormal/RandomUniform(Like),
//     EyeLike, Multinomial, Bernoulli) name DOUBLE instead;
//   - subgraphs (If/Loop/Scan bodies) likewise.
// Other types (integers, bool, float16) are left alone. An unnamed node is named "n<index>"
// (made unique) so that an error can name it and a caller can put it in `keep_float32`.
//
// The nodes named in `keep_float32` (an op with no float64 kernel) stay float32: their float32
// inputs are cast down from the widened values and their float32 outputs cast back up, with
// their attributes unchanged. Which values are float32 comes from inference over `graph` with
// `input_types` (the float32 run's); an unknown node name is an error naming it.
Result<Graph> widen_to_float64(const Graph& graph, const std::vector<TensorType>& input_types,
                               const std::set<std::string>& keep_float32 = {});

// float32 -> float64 (a copy); other dtypes are returned as they are.
HostTensor widen_tensor(const HostTensor& t);
// float64 -> float32, rounded once; other dtypes are returned as they are.
HostTensor narrow_tensor(const HostTensor& t);

// The node an error message names ("node 'conv1' (Conv): ..." or "... (node 'conv1')"),
// "" when it names none. For retrying with that node kept in float32.
std::string node_named_in(const std::string& message);

}  // namespace tensord
