// Generated kernels that are not element-wise expressions: MatMul/Gemm, convolution, pooling,
// Softmax family, normalisations, Concat/Split/Gather/GatherElements/Pad/Tile, ArgMax/ArgMin,
// CumSum. Each is generated per call from the node's attributes and the inputs' shapes (every
// size is a constant in the source), as a straight loop nest per work item, in a dialect-neutral
// C subset: a prelude per dialect (OpenCL C, CUDA C) defines KERNEL, GLOBAL, GID, i64 and the
// small types, so the same text compiles in both (the OpenCL backend uses it; the CUDA backend
// of issue 12 can use it as is).
//
// Kernel signature, as for element-wise kernels (printer.h): for each input, then each output,
// a byte pointer and a 64-bit byte offset; 1-D over at least `n` work items, the ones past the
// end return. Every index a kernel reads through is bounded by the shapes it was generated for
// (and indices read from tensors are clamped into range after the host checked them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensord/graph.h"
#include "tensord/status.h"
#include "tensord/tensor.h"

namespace tensord::codegen {

enum class Dialect : uint8_t { kOpenCL, kCuda };

struct TemplateKernel {
  std::string name = "tensord_op";
  std::vector<std::string> in_types;   // element type of each input pointer ("float", "i64"...)
  std::vector<std::string> out_types;  // of each output pointer
  std::string body;                    // statements for work item `gid` (in0.., out0..)
  int64_t n = 0;                       // work items
};

std::string print_template(const TemplateKernel& k, Dialect dialect);

// One call of a node: its inputs' types (undefined where omitted), the host copies of the
// inputs template_host_inputs() named (nullptr elsewhere), and the inferred output types.
struct OpCall {
  const Node* node = nullptr;
  std::vector<TensorType> inputs;
  std::vector<const HostTensor*> host;
  std::vector<TensorType> outputs;
};

// The kernel for a call, and how it binds: kernel input k is call input inputs[k]; kernel
// output k is node output outputs[k] (outputs not listed are omitted ones, or empty).
struct OpPlan {
  TemplateKernel kernel;
  std::vector<int> inputs;
  std::vector<int> outputs;
  // Where the values decide an output's shape (Range): the shapes of outputs, by node output.
  std::vector<Shape> output_shapes;
};

// Whether the op has a template at all, and whether this node with these input types is
// supported (UNIMPLEMENTED naming why not).
bool is_template_op(const std::string& op);
Status template_supported(const Node& node, const std::vector<TensorType>& inputs);
// Element-wise ops over the dtypes the IR (kernel_ir.h) lacks (int8/16, unsigned, float64):
// Max, Min, Mod, Pow, Cast, CastLike, Clip; plan_template() plans them too.
bool is_template_elementwise(const std::string& op);
Status template_elementwise_supported(const Node& node, const std::vector<TensorType>& inputs);
// Inputs the plan needs on the host (shape-like inputs; indices it validates).
std::vector<int> template_host_inputs(const Node& node);
Result<OpPlan> plan_template(const OpCall& call);

// Convolution as im2col + GEMM (a backend's BLAS path): the geometry of a 1-D or 2-D float32
// Conv call (a 1-D one as H = 1); UNIMPLEMENTED for other ranks.
struct ConvGeometry {
  int64_t N = 0, C = 0, H = 1, W = 0, M = 0, G = 1, KH = 1, KW = 0;
  int64_t SH = 1, SW = 1, DH = 1, DW = 1, PT = 0, PL = 0, OH = 1, OW = 0;
  bool bias = false;
  // A 1x1 window with stride 1 and no padding: the input is already the GEMM's operand.
  bool pointwise() const {
    return KH == 1 && KW == 1 && SH == 1 && SW == 1 && PT == 0 && PL == 0 && OH == H && OW == W;
  }
};
Result<ConvGeometry> conv_geometry(const OpCall& call);
// in0 = x [N][C][H][W] -> out0 = columns [N][C][KH][KW][OH][OW] (zeros where the window is
// in the padding). `n` work items, one per output row of columns (OW elements).
TemplateKernel im2col_kernel(const ConvGeometry& g);
// The convolution's GEMM as one generated, register-tiled kernel (no BLAS): for each of
// batches = images x groups, out[b] (Mg x N) = W[b % G] (Mg x K) * in[b] (K x N) (+ bias), with
// in = the columns (or the input itself for a 1x1 window), K = C/G x KH x KW, N = OH x OW. Each
// work item computes `tile` consecutive output channels at one output position, so
// consecutive work items read consecutive columns (vector loads on a CPU device, coalesced
// on a GPU). in0 = columns, in1 = weights, in2 = bias (when g.bias).
TemplateKernel conv_gemm_kernel(const ConvGeometry& g, int64_t tile);
// What a fused convolution does after its sum, in this order: + bias[channel] (a BatchNorm
// folded into the weights leaves its shift here), + a residual input of the output's shape,
// then an activation: "" (none), "Relu", "Clip" (alpha = min, beta = max), "LeakyRelu"
// (alpha), "HardSigmoid" (alpha, beta), "HardSwish", "Sigmoid".
struct ConvEpilogue {
  bool bias = false;
  bool residual = false;
  std::string activation;
  float alpha = 0.0f, beta = 0.0f;
};
// The activation applied to `v` (a float or floatN expression), as an expression.
std::string epilogue_activation(const ConvEpilogue& e, const std::string& v);
// OpenCL C only (vector types, vloadN/vstoreN): the convolution's GEMM with each work item
// computing `tm` output channels x `v` consecutive output positions (v = 4, 8 or 16) as
// vectors: per k, one vector load of the columns and `tm` broadcast weights (an outer-product
// micro-kernel, SIMD on a CPU device whatever the work-group vectoriser does). in0 = columns
// (or the input of a 1x1 window), in1 = weights [G][Mg][K], then bias (e.bias), then the
// residual (e.residual); out0 = [N][M][OH*OW] after the epilogue.
// rows_fastest: consecutive work items take consecutive row tiles of one column tile (they
// share the column vector in cache: a CPU device); else consecutive column tiles (coalesced
// loads on a GPU).
TemplateKernel conv_gemm_vec_kernel(const ConvGeometry& g, int64_t tm, int64_t v, const ConvEpilogue& e,
                                    bool rows_fastest = false);
// OpenCL C only: a depthwise convolution (G = C = M) with each work item computing `v`
// consecutive outputs of one row (vector loads where the window row is inside the input and
// the stride is 1 or 2, per-lane loads at the borders). in0 = x, in1 = weights [C][KH][KW],
// then bias / residual as above.
TemplateKernel depthwise_vec_kernel(const ConvGeometry& g, int64_t v, const ConvEpilogue& e);
// out0[i] = in0[(i / inner) % channels] over n elements: a bias broadcast over N, C, spatial.
TemplateKernel channel_fill_kernel(int64_t n, int64_t inner, int64_t channels);

}  // namespace tensord::codegen
