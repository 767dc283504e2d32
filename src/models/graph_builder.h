// A small builder for the graph IR, used by the built-in model zoo (zoo.h).
//
// It adds graph inputs, initializers (seeded random weights), nodes and outputs, and runs each
// node's schema inference as the node is added, so every value has a known type (the helpers
// read input channels from it) and a malformed model fails where it is built, naming the node.
// Errors are sticky, as in XLA's XlaBuilder: the first failing call records its Status, later
// calls do nothing useful, and finish() returns that first error. Model code therefore reads as
// a straight list of layers without a TD_ASSIGN_OR_RETURN on every line.
//
// Naming: parameters are named by the caller ("layer1.0.conv1.weight", torchvision's
// state_dict keys), so a model's initializers can be matched one to one with the framework it
// reproduces. Node names are the caller's hint made unique ("layer1.0.relu", "layer1.0.relu_1");
// a node's output values are named after the node ("layer1.0.relu", or "lstm:1" for a second
// output).
//
// Random values come from std::mt19937 (whose output sequence the C++ standard fixes) through
// our own uniform/normal transforms rather than std::normal_distribution (whose algorithm is
// left to the library), so a model's weights are the same bytes with libstdc++ and libc++.
//
// Not thread-safe; one builder builds one graph.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tensord/graph.h"

namespace tensord::models {

// Seeded random numbers, identical across standard libraries (see above).
class Rng {
 public:
  explicit Rng(uint32_t seed) : engine_(seed) {}
  double uniform();                             // [0, 1)
  double uniform(double lo, double hi);         // [lo, hi)
  double normal();                              // N(0, 1), Box-Muller
  int64_t uniform_int(int64_t lo, int64_t hi);  // [lo, hi]

 private:
  std::mt19937 engine_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

enum class Activation { kNone, kRelu, kRelu6 };

// A 2-D convolution as the helpers build it (NCHW, weight [out, in / group, k, k]).
struct ConvSpec {
  int64_t out_channels = 0;
  int64_t kernel = 1;
  int64_t stride = 1;
  // ONNX pads [top, left, bottom, right]; empty: symmetric kernel / 2 ("same" for odd kernels
  // at stride 1, PyTorch's usual padding=k//2).
  std::vector<int64_t> pads = {};
  int64_t group = 1;  // group == in_channels == out_channels: depthwise
  bool bias = false;
  // He-normal weight scale: std = sqrt(gain / fan_in), fan_in = in / group * k * k. 2 suits a
  // ReLU after the layer, 1 a linear one.
  double gain = 2.0;
};

class GraphBuilder {
 public:
  GraphBuilder(std::string graph_name, uint32_t seed);

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  Rng& rng() { return rng_; }

  // ---- values ----

  // Declares a runtime input (in order of calls) and returns its name.
  std::string input(const std::string& name, DType dtype, Shape shape);
  // Adds an initializer under exactly `name` (an error if the name is taken).
  std::string initializer(const std::string& name, HostTensor value);
  // float32 initializers: N(0, std^2); U[lo, hi); constant.
  std::string normal(const std::string& name, Shape shape, double std, double mean = 0.0);
  std::string uniform(const std::string& name, Shape shape, double lo, double hi);
  std::string fill(const std::string& name, Shape shape, float value);
  // A float32 scalar constant shared by every caller asking for the same value (Clip bounds).
  std::string scalar_constant(float value);

  // The type of a value (input, initializer or node output); an undefined type when unknown.
  TensorType type_of(const std::string& value) const;
  Shape shape_of(const std::string& value) const { return type_of(value).shape; }

  // ---- nodes ----

  // Adds a node named after `name_hint` (made unique) and returns its output names
  // (`num_outputs` of them; an empty string in `skip_outputs` positions leaves that optional
  // output off). Runs the op's schema inference; on failure records the error.
  std::vector<std::string> node(const std::string& op, const std::string& name_hint,
                                std::vector<std::string> inputs, AttributeMap attrs = {},
                                int num_outputs = 1, const std::vector<bool>& skip_outputs = {});
  // Same, for single-output nodes.
  std::string op(const std::string& op, const std::string& name_hint,
                 std::vector<std::string> inputs, AttributeMap attrs = {});

  // ---- blocks (parameters named "<name>.weight" / "<name>.bias", as PyTorch does) ----

  // Conv (no bias unless spec.bias); He-normal weight.
  std::string conv(const std::string& x, const std::string& name, const ConvSpec& spec);
  // BatchNormalization in inference form with seeded, non-trivial parameters and running
  // statistics ("<name>.weight", ".bias", ".running_mean", ".running_var"): scale around
  // `gamma` (a smaller value tames a residual branch), small shift, running mean ~ N(0, 0.1^2),
  // running var in [0.5, 1.5), so that folding BN into the Conv changes the weights.
  std::string batch_norm(const std::string& x, const std::string& name, float epsilon,
                         double gamma = 1.0);
  std::string relu(const std::string& x, const std::string& name);
  // Clip(x, 0, 6) with min/max inputs (opset 11+ form).
  std::string relu6(const std::string& x, const std::string& name);
  std::string activation(const std::string& x, const std::string& name, Activation act);
  // Conv -> BatchNormalization -> activation, the common CNN block.
  std::string conv_bn_act(const std::string& x, const std::string& conv_name,
                          const std::string& bn_name, const std::string& act_name,
                          const ConvSpec& spec, float bn_epsilon, Activation act,
                          double bn_gamma = 1.0);
  // Fully connected layer on [N, in]: Gemm(x, W, b, transB=1) with W [out, in] (PyTorch's
  // Linear layout), He-normal with `gain`, bias ~ N(0, 0.01^2).
  std::string linear(const std::string& x, const std::string& name, int64_t out_features,
                     double gain = 1.0);

  // ---- finishing ----

  // Renames `value` to `name` and declares it a graph output (with its inferred type).
  void output(const std::string& value, const std::string& name);
  // The graph, or the first error any call recorded. The builder is left empty.
  Result<Graph> finish();

 private:
  void fail(Status status);
  bool name_taken(const std::string& name) const;
  std::string unique_name(const std::string& hint);
  std::string add_initializer(const std::string& name, HostTensor value);

  Graph graph_;
  Rng rng_;
  Status status_;
  std::map<std::string, TensorType> types_;  // every value's type
  std::set<std::string> node_names_;
};

}  // namespace tensord::models
