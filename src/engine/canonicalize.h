// Canonical forms of export variants: device-independent graph rewrites run before placement,
// so that a backend sees one form of a pattern however the model was exported (ONNX Runtime's
// "basic" graph transformers do the same). Each pass is exact in real arithmetic and matches
// only what it can prove from the graph (attributes, constant values, readers of each value).
//
//   hardswish:  Mul(x, HardSigmoid(x; alpha 1/6, beta 0.5)) -> HardSwish(x)
//               (HardSwish before opset 14, as every PyTorch export of MobileNetV3 writes it)
//   silu:       Mul(Sigmoid(x), x) -> Mul(x, Sigmoid(x)), the Sigmoid placed right before the
//               Mul and read by it alone (a second reader gets its own Sigmoid), the form the
//               cpu backend fuses into one swish
//   layernorm:  u = ReduceMean(x, axes [-1]); d = Sub(x, u); Pow(d, 2) | Mul(d, d);
//               v = ReduceMean(., axes [-1]); Div(d, Sqrt(Add(v, eps))) [Mul gamma] [Add beta]
//               -> LayerNormalization(x, gamma, beta; axis -1, epsilon eps)
//               (LayerNorm before opset 17: BERT-style code and every older export)
//   padconv:    Conv(Pad(x; constant 0, spatial axes only)) -> Conv(x) with the pads added
//               (F.pad before a convolution: causal Conv1d stacks, TF-style "same" padding);
//               also into an AveragePool that counts its padding (count_include_pad 1 or no
//               pads of its own; not ceil_mode): avg_pool2d(padding, count_include_pad=True)
//   identity:   Identity(initializer) read as the initializer itself (PyTorch's export of
//               weights equal to earlier ones: cloned layers, tied weights, fresh LayerNorms),
//               so patterns that want a constant see one (runs first)
//   cse:        nodes with the same op, inputs and attributes computed once (not random ops,
//               subgraphs or tensors of more than 64 values); a duplicate asking for an
//               optional output the first left out (MaxPool's Indices: the forward pool and
//               its gradient) gives it to the first (runs before the other passes)
//   gelu:       Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5) -> Gelu(x) (approximate "none"):
//               the erf GELU as PyTorch exports nn.GELU before opset 20; Mul by 1/sqrt 2 for
//               the Div, either operand order, the 0.5 on x or on the product; every
//               intermediate read only by the next
//   bnfold:     Conv | ConvTranspose (W, [B]) or Gemm (A, B, [C]) read only by an inference
//               BatchNormalization (scale, bias, mean, var; epsilon) -> the contraction with
//               W * s and B * s + t per output channel, s = scale / sqrt(var + epsilon),
//               t = bias - mean * s, computed in double and rounded once
//   affine:     the same for a Mul, Add or Sub (x - c) by a constant of one value or one per
//               output channel (a layer scale, a bias kept apart, TensorFlow's unfused BN);
//               a chain (Conv, BN, Mul, Add) folds step by step into one set of weights.
//               Both run in fold_affine, on the compiler's typed graph after constant
//               folding (weights made at compile time count); every backend sees the result
//   qdq:        DequantizeLinear(QuantizeLinear(x, s, z), s, z), per tensor, q read by the
//               pair alone -> Mul(Clip(Round(Div(x, s)), qmin - z, qmax - z), s): the value
//               rounded to the quantized grid, in float (QDQ models; runs first)
//   taps:       a Conv's kernel taps that read only padding at every output position dropped
//               (trim_conv_taps, also on the typed graph): a dilated convolution wider than
//               its input (DeepLabV3's ASPP) keeps the taps that can see the image
//
// Switches: CanonicalizeOptions (all on by default; the compiler runs the passes on the fast
// path only, never for the reference kernels) and TENSORD_CANONICAL=-hardswish,-silu,
// -layernorm,-padconv,-cse,-gelu,-bnfold,-affine,-identity,-if,-taps,-f16,-qdq
// (a pass named with '-' is off; "0" or "none": all off).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/graph_utils.h"
#include "tensord/graph.h"

namespace tensord {

struct CanonicalizeOptions {
  bool hardswish = true;
  bool silu = true;
  bool layernorm = true;
  bool pad_conv = true;
  bool cse = true;
  bool bnfold = true;
  bool gelu = true;
  bool affine = true;
  bool identity = true;
  bool if_const = true;  // "if": an If whose condition is known becomes its taken branch
  bool taps = true;      // a Conv's kernel taps that read only padding dropped
  bool f16 = true;       // widen_float16 (the compiler, for a cpu target)
  bool qdq = true;       // a QuantizeLinear -> DequantizeLinear pair as Div, Round, Clip, Mul
  // All on, then TENSORD_CANONICAL applied.
  static CanonicalizeOptions from_env();
  // All off.
  static CanonicalizeOptions none();
};

// What the passes did: how many patterns each rewrote.
struct CanonicalizeStats {
  int hardswish = 0;
  int silu = 0;
  int layernorm = 0;
  int pad_conv = 0;
  int cse = 0;
  int gelu = 0;
  int identity = 0;
  int if_const = 0;
  int qdq = 0;
};

// Rewrites `graph` in place (top level only; subgraph bodies are compiled on their own).
// `known`: values the caller folded (small shape computations: the pads F.pad exports as a
// ConstantOfShape/Concat/Slice/Transpose chain), beside initializers and Constant nodes.
CanonicalizeStats canonicalize(Graph& graph, const CanonicalizeOptions& options = {},
                               const std::map<std::string, HostTensor>* known = nullptr);
// Whether a pass could use folded values (a Pad before a Conv whose pads are computed).
bool canonicalize_wants_constants(const Graph& graph, const CanonicalizeOptions& options);

// float16 computed in float32, for a backend without float16 kernels (the cpu's: its
// reference kernels only; ONNX Runtime's CPU provider inserts the same casts): float16 graph
// inputs are Cast to float where they enter, float16 initializers and Constant /
// ConstantOfShape values widened, random and EyeLike dtypes made float, a Cast or CastLike to
// float16 kept as that rounding followed by a Cast back to float, and float16 graph outputs
// Cast from the float values that make them. Each value is then at least as accurate as the
// float16 graph's (no intermediate is rounded to float16 unless the graph says so). Returns
// the number of values changed; 0 (and the graph as it was) when there is no float16 value,
// or for graphs with subgraph bodies or sequences. The compiler runs it for a cpu target on
// the fast path (TENSORD_CANONICAL=-f16 turns it off).
int widen_float16(Graph& graph, const std::vector<TensorType>& input_types);

// The `bnfold` and `affine` passes over a graph whose values are typed and whose constants
// are known (`types`, after infer_graph). Each fold makes a new weight and bias, constants
// added to `types` once `charge` (name, bytes) accepted them; it returns false to refuse one
// (a quota): that node stays. A later fold into the same contraction rewrites them in place. A folded node's
// output becomes the contraction's; the node is marked in `dropped` (sized to graph.nodes)
// and must not run. Returns how many nodes were folded.
int fold_affine(Graph& graph, GraphTypes& types, std::vector<bool>* dropped,
                const CanonicalizeOptions& options,
                const std::function<bool(const std::string&, int64_t)>& charge);

// The `taps` pass over a typed graph (as fold_affine): a Conv (static spatial input shape,
// constant W) whose kernel has taps that read only padding for every output position loses
// them: W cut to the live taps, the pads reduced by what they covered (the output unchanged),
// an axis left with one tap undilated. Exact: a dropped tap only ever multiplied zeros.
// DeepLabV3's ASPP at dilation 24 and 36 on a 14x14 map becomes a 1x1 convolution. Each new W
// is charged (`charge` may refuse: the Conv stays). Returns how many Convs it cut.
int trim_conv_taps(Graph& graph, GraphTypes& types, const CanonicalizeOptions& options,
                   const std::function<bool(const std::string&, int64_t)>& charge);

}  // namespace tensord
