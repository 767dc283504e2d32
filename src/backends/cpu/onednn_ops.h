// What oneDNN runs of an ONNX op, shared by the cpu backend's two graph compilers (the oneDNN
// regions of onednn_region.cpp and the Linear layers of linear_layers.cpp): the element-wise
// ops with a oneDNN eltwise algorithm and the broadcast ops with a binary one (each also so by
// its schema's OpKind), their eltwise steps, and which implementation oneDNN chose.
#pragma once

#include <set>
#include <string>
#include <vector>

#include <dnnl.hpp>

#include "backend/backend.h"
#include "tensord/status.h"

namespace tensord::cpu {

// The names both graph compilers write oneDNN in.
namespace dnnl_names {
using dnnl::memory;
using DT = memory::data_type;
using Tag = memory::format_tag;
using Alg = dnnl::algorithm;
}  // namespace dnnl_names

// "ref" in an implementation name: oneDNN's portable reference code.
bool is_reference(const std::string& impl);
// A pooling implementation on oneDNN's generic loops: "ref", or "simple" (a scalar loop over
// plain layouts, 5-18x its JIT kernels; S3D's 3-D MaxPools, MaxViT's downsampling).
bool is_slow_pooling(const std::string& impl);
// The implementation oneDNN chose for a created primitive ("jit:avx2", "ref:any"), or "".
std::string impl_of(const dnnl::primitive& prim);

// One oneDNN eltwise step (post-op or primitive).
struct Eltwise {
  dnnl::algorithm alg;
  float alpha = 0, beta = 0;
};

// The element-wise ops with a oneDNN eltwise algorithm and the broadcast ops with a oneDNN
// binary one; an op is taken only when its schema's OpKind says so too.
const std::set<std::string>& unary_eltwise_ops();
const std::set<std::string>& binary_ops();
bool is_unary_eltwise(const std::string& op);
bool is_binary(const std::string& op);
bool is_commutative(const std::string& op);
dnnl::algorithm binary_alg(const std::string& op);
// The first value of a float32 tensor.
float scalar_of(const HostTensor& t);
// The oneDNN eltwise steps of a unary op (HardSigmoid needs two), or an error.
Result<std::vector<Eltwise>> eltwise_steps(const Node& node, const FusionGraph& g);

}  // namespace tensord::cpu
