// The graph IR. Its ops are ONNX's (name, attributes, inputs, outputs, broadcasting and type
// rules), always in the form of the newest supported opset (17): the ONNX importer rewrites
// older forms (attribute → input changes in Clip, Slice, Reshape, Squeeze, ReduceSum ...) so
// that schemas and kernels have one form to handle.
//
// Values are named by strings, as in ONNX; an empty input name is an omitted optional input.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "tensord/tensor.h"

namespace tensord {

struct Graph;

class Attribute {
 public:
  enum class Kind { kInt, kFloat, kString, kInts, kFloats, kStrings, kTensor, kGraph };
  using Value = std::variant<int64_t, float, std::string, std::vector<int64_t>,
                             std::vector<float>, std::vector<std::string>, HostTensor,
                             std::shared_ptr<const Graph>>;

  Attribute() : value_(int64_t{0}) {}
  Attribute(int64_t v) : value_(v) {}                         // NOLINT
  Attribute(int v) : value_(int64_t{v}) {}                    // NOLINT
  Attribute(float v) : value_(v) {}                           // NOLINT
  Attribute(double v) : value_(static_cast<float>(v)) {}      // NOLINT
  Attribute(std::string v) : value_(std::move(v)) {}          // NOLINT
  Attribute(const char* v) : value_(std::string(v)) {}        // NOLINT
  Attribute(std::vector<int64_t> v) : value_(std::move(v)) {} // NOLINT
  Attribute(std::vector<float> v) : value_(std::move(v)) {}   // NOLINT
  Attribute(std::vector<std::string> v) : value_(std::move(v)) {}  // NOLINT
  Attribute(HostTensor v) : value_(std::move(v)) {}           // NOLINT
  Attribute(std::shared_ptr<const Graph> v) : value_(std::move(v)) {}  // NOLINT

  Kind kind() const { return static_cast<Kind>(value_.index()); }
  const Value& value() const { return value_; }
  template <typename T>
  const T* get_if() const { return std::get_if<T>(&value_); }
  static const char* kind_name(Kind k);  // "int", "float", "string", "ints", ...

 private:
  Value value_;
};

using AttributeMap = std::map<std::string, Attribute>;

struct Node {
  std::string name;  // unique within the graph when set; errors name it
  std::string op;    // ONNX op type, e.g. "Conv"
  std::string domain;  // "" = ai.onnx
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  AttributeMap attrs;

  // "node 'conv1' (Conv)" or "node #3 (Conv)" when unnamed; used in every error message.
  std::string label() const;
};

struct ValueInfo {
  std::string name;
  TensorType type;  // dims may be -1 (symbolic)
};

struct Graph {
  std::string name;
  std::vector<ValueInfo> inputs;   // runtime inputs, in order
  std::vector<ValueInfo> outputs;  // results, in order
  std::vector<Node> nodes;         // any order; compile sorts topologically
  std::map<std::string, HostTensor> initializers;  // constant values by name
};

}  // namespace tensord
