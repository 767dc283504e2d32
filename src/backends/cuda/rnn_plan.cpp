// ONNX RNN/LSTM/GRU -> cuDNN's RNN (cudnnRNNForward, v8+ API): which nodes cuDNN computes as
// ONNX defines them, and ONNX's weights in cuDNN's layout. Host code only (no GPU, no cuDNN).
#include <algorithm>
#include <cstring>

#include "backends/cuda/cuda_backend.h"
#include "core/errors.h"
#include "core/node_attrs.h"

namespace tensord::cuda {

Result<RnnPlan> plan_cudnn_rnn(const Node& node, const std::vector<TensorType>& inputs) {
  NodeAttrs at(node);
  auto no = [&](const std::string& why) {
    return errors::Unimplemented("{}: cuDNN's RNN does not compute {} ({})", node.op, why, node.label());
  };
  RnnPlan p;
  std::vector<std::string> default_acts;
  if (node.op == "LSTM") {
    p.cell = RnnPlan::kLstm;
    p.gates = 4;
    p.onnx_gate = {0, 2, 3, 1};  // cuDNN i, f, g, o <- ONNX i, o, f, c
    default_acts = {"Sigmoid", "Tanh", "Tanh"};
  } else if (node.op == "GRU") {
    p.cell = RnnPlan::kGru;
    p.gates = 3;
    p.onnx_gate = {1, 0, 2};  // cuDNN r, z, h <- ONNX z, r, h
    default_acts = {"Sigmoid", "Tanh"};
  } else if (node.op == "RNN") {
    p.cell = RnnPlan::kRnnTanh;
    p.gates = 1;
    p.onnx_gate = {0};
  } else {
    return errors::InvalidArgument("{} is not a recurrent op ({})", node.op, node.label());
  }
  if (inputs.size() < 3 || !inputs[0].defined() || !inputs[1].defined() || !inputs[2].defined())
    return errors::InvalidArgument("{}: X, W and R are required ({})", node.op, node.label());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || i == 4) continue;  // sequence_lens (4) is int32
    if (inputs[i].dtype != DType::kFloat32) return no(std::string("input ") + std::to_string(i) + " of " + dtype_name(inputs[i].dtype));
    if (!shape_is_static(inputs[i].shape)) return no("dynamic shapes");
  }
  TD_ASSIGN_OR_RETURN(int64_t layout, at.attr_int("layout", 0));
  if (layout != 0) return no("layout=1 (batch first)");
  TD_ASSIGN_OR_RETURN(std::string direction, at.attr_string("direction", "forward"));
  if (direction == "bidirectional") p.dirs = 2;
  else if (direction != "forward") return no("direction '" + direction + "' alone");
  if (at.has_attr("clip")) return no("clip");
  if (at.has_attr("activation_alpha") || at.has_attr("activation_beta")) return no("activation_alpha/beta");
  TD_ASSIGN_OR_RETURN(int64_t input_forget, at.attr_int("input_forget", 0));
  if (input_forget != 0) return no("input_forget=1");
  if (p.cell == RnnPlan::kGru) {
    TD_ASSIGN_OR_RETURN(int64_t lbr, at.attr_int("linear_before_reset", 0));
    if (lbr == 0) return no("GRU with linear_before_reset=0 (it applies the reset gate after R)");
  }
  if (const Attribute* a = at.attr("activations")) {
    const auto* acts = a->get_if<std::vector<std::string>>();
    if (!acts) return errors::InvalidArgument("{}: activations is not a list of strings ({})", node.op, node.label());
    std::vector<std::string> want;
    if (node.op == "RNN") {
      if (acts->empty()) return no("no activation");
      for (int d = 0; d < p.dirs; ++d) want.push_back((*acts)[0]);
      if ((*acts)[0] == "Relu") p.cell = RnnPlan::kRnnRelu;
      else if ((*acts)[0] != "Tanh") return no("activation " + (*acts)[0]);
    } else {
      for (int d = 0; d < p.dirs; ++d) want.insert(want.end(), default_acts.begin(), default_acts.end());
    }
    if (*acts != want) return no("these activations");
  }
  if (inputs.size() > 7 && inputs[7].defined()) return no("peepholes (P)");
  const Shape& x = inputs[0].shape;
  const Shape& w = inputs[1].shape;
  const Shape& r = inputs[2].shape;
  if (x.size() != 3 || w.size() != 3 || r.size() != 3)
    return errors::InvalidArgument("{}: X, W and R must be 3-D ({})", node.op, node.label());
  p.seq = x[0], p.batch = x[1], p.input = x[2];
  TD_ASSIGN_OR_RETURN(int64_t hidden, at.attr_int("hidden_size", r[2]));
  p.hidden = hidden;
  const int64_t gh = p.gates * p.hidden;
  if (w[0] != p.dirs || w[1] != gh || w[2] != p.input)
    return errors::InvalidArgument("{}: W is {}, expected [{}, {}, {}] ({})", node.op, shape_to_string(w), p.dirs, gh,
                                   p.input, node.label());
  if (r[0] != p.dirs || r[1] != gh || r[2] != p.hidden)
    return errors::InvalidArgument("{}: R is {}, expected [{}, {}, {}] ({})", node.op, shape_to_string(r), p.dirs, gh,
                                   p.hidden, node.label());
  auto given = [&](size_t i) { return inputs.size() > i && inputs[i].defined(); };
  p.has_bias = given(3);
  if (p.has_bias && inputs[3].shape != Shape{p.dirs, 2 * gh})
    return errors::InvalidArgument("{}: B is {}, expected [{}, {}] ({})", node.op, shape_to_string(inputs[3].shape),
                                   p.dirs, 2 * gh, node.label());
  p.has_seq_lens = given(4);
  p.has_initial_h = given(5);
  p.has_initial_c = given(6) && p.cell == RnnPlan::kLstm;
  for (size_t i : {size_t{5}, size_t{6}})
    if (given(i) && (i == 5 || p.cell == RnnPlan::kLstm) && inputs[i].shape != Shape{p.dirs, p.batch, p.hidden})
      return errors::InvalidArgument("{}: input {} is {}, expected [{}, {}, {}] ({})", node.op, i,
                                     shape_to_string(inputs[i].shape), p.dirs, p.batch, p.hidden, node.label());
  if (p.seq == 0 || p.batch == 0) return no("empty sequences");
  return p;
}

Result<std::vector<RnnCopy>> rnn_weight_copies(const RnnPlan& plan, int dir,
                                               const std::function<std::pair<int64_t, int64_t>(int)>& offsets,
                                               size_t space_elems) {
  const int g = plan.gates;
  const int64_t H = plan.hidden, gh = g * H;
  if (dir < 0 || dir >= plan.dirs || static_cast<int>(plan.onnx_gate.size()) != g)
    return errors::Internal("cuDNN RNN weights: direction {} of {}", dir, plan.dirs);
  std::vector<RnnCopy> copies;
  for (int l = 0; l < 2 * g; ++l) {
    const bool input = l < g;
    const int64_t cols = input ? plan.input : H;
    const int64_t gate = plan.onnx_gate[static_cast<size_t>(l % g)];
    const auto [mo, bo] = offsets(l);
    if (mo < 0 || bo < 0 || static_cast<size_t>(mo + H * cols) > space_elems || static_cast<size_t>(bo + H) > space_elems)
      return errors::OutOfRange("cuDNN RNN weights: linear layer {} at ({}, {}) overruns the {} floats of the space", l,
                                mo, bo, space_elems);
    copies.push_back(RnnCopy{input ? 1 : 2, (dir * gh + gate * H) * cols, mo, H * cols});
    if (plan.has_bias) copies.push_back(RnnCopy{3, dir * 2 * gh + (input ? 0 : gh) + gate * H, bo, H});
  }
  return copies;
}

}  // namespace tensord::cuda
