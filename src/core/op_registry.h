// Op schemas: for each ONNX op, its arity, its allowed attributes, and a shape/type inference
// function. Shared by every backend, the Array API (inference at record time) and the
// importer. Schemas describe the newest opset form only (see graph.h).
//
// Registration is explicit (no static initialisers, which a static library would drop): each
// op family has a `register_*_ops(OpRegistry&)` function listed in ops/all_ops.cpp.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/errors.h"
#include "core/node_attrs.h"
#include "tensord/graph.h"

namespace tensord {

// What inference knows about one node's inputs, and where it writes the outputs' types.
class InferenceContext : public NodeAttrs {
 public:
  InferenceContext(const Node& node, std::vector<TensorType> input_types,
                   std::vector<const TensorView*> input_values)
      : NodeAttrs(node), input_types_(std::move(input_types)), input_values_(std::move(input_values)) {
    input_values_.resize(input_types_.size(), nullptr);
  }

  int num_inputs() const { return static_cast<int>(input_types_.size()); }
  // False for an omitted optional input (empty name, or beyond the given inputs).
  bool has_input(int i) const { return i < num_inputs() && input_types_[i].defined(); }
  const TensorType& input_type(int i) const { return input_types_.at(i); }
  const Shape& input_shape(int i) const { return input_types_.at(i).shape; }
  DType input_dtype(int i) const { return input_types_.at(i).dtype; }
  int num_outputs() const { return static_cast<int>(node_.outputs.size()); }

  // The input's value when known (a constant, or any input at run time on host devices);
  // nullptr otherwise. Ops whose output shape depends on an input value (Reshape, Slice,
  // Expand ...) read it here and leave dims at -1 when it is not known.
  const TensorView* input_value(int i) const {
    return i < num_inputs() ? input_values_[i] : nullptr;
  }
  // The input's value as int64s (any integer dtype or bool). nullopt when the value is unknown;
  // an error when it is not an integer tensor.
  Result<std::optional<std::vector<int64_t>>> input_ints(int i) const;

  // Output types; inference sets every output it produces.
  void set_output(int i, DType dtype, Shape shape);
  const std::vector<TensorType>& output_types() const { return output_types_; }

 private:
  std::vector<TensorType> input_types_;
  std::vector<const TensorView*> input_values_;
  std::vector<TensorType> output_types_;
};

using InferenceFn = std::function<Status(InferenceContext&)>;

// What an op does to its elements, the property fusion decides by (TVM's OpPatternKind,
// XLA's "element-wise / reduction / contraction" questions), never a model pattern:
//   kElementwise   one output element from the same element of one input (Relu, Exp, Cast)
//   kBroadcast     element-wise over NumPy-broadcast inputs (Add, Mul, Where, Greater)
//   kReduction     combines elements along axes (ReduceSum, ArgMax, Softmax, global pools)
//   kContraction   sums products (MatMul, Gemm, Conv, ConvTranspose, Einsum)
//   kDataMovement  moves or selects elements without arithmetic (Reshape, Transpose, Slice,
//                  Gather, Concat, Pad)
//   kOpaque        anything else (windows, recurrences, normalizations, control flow)
enum class OpKind { kOpaque, kElementwise, kBroadcast, kReduction, kContraction, kDataMovement };
const char* op_kind_name(OpKind kind);
// The kind of a standard-domain op by name (kOpaque for one not listed); the one table
// (src/core/op_registry.cpp) every schema's `kind` comes from.
OpKind op_kind(const std::string& op);
// Element-wise in the fusion sense: kElementwise or kBroadcast.
inline bool is_elementwise_kind(OpKind k) { return k == OpKind::kElementwise || k == OpKind::kBroadcast; }

struct OpSchema {
  std::string name;
  int min_inputs = 0;
  int max_inputs = 0;  // -1: variadic
  int min_outputs = 1;
  int max_outputs = 1;
  std::set<std::string> attributes;  // allowed attribute names
  InferenceFn infer;
  std::string doc;  // one line
  OpKind kind = OpKind::kOpaque;  // set from op_kind(name) when registered
};

class OpRegistry {
 public:
  // The process-wide registry with every op family registered.
  static const OpRegistry& global();

  void add(OpSchema schema);
  const OpSchema* find(const std::string& op) const;
  std::vector<std::string> op_names() const;

 private:
  std::map<std::string, OpSchema> schemas_;
};

// Checks arity and attribute names against the schema, then runs its inference.
// Unknown op: UNIMPLEMENTED naming it. Errors name the node and op.
Status infer_node(const OpRegistry& registry, InferenceContext& ctx);

// ---- helpers shared by op families ----

// NumPy/ONNX multidirectional broadcasting of two shapes; error names both shapes.
Result<Shape> broadcast_shapes(const Shape& a, const Shape& b);
// Normalises an axis in [-rank, rank) into [0, rank); error names the axis and rank.
Result<int64_t> normalize_axis(int64_t axis, int64_t rank);

}  // namespace tensord
