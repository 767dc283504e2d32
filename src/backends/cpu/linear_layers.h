// The cpu backend's second graph compiler: Linear layers (src/backends/cpu/linear_layers.cpp).
#pragma once

#include <string>
#include <vector>

#include "backends/cpu/fusion.h"

namespace tensord::cpu {

// Linear layers outside those regions, each one step: a MatMul of a float32 activation of any
// rank >= 2 (static shape) by constant [K, N] weights, as one oneDNN matmul over [M, K] (the
// leading axes folded) with the weights reordered once into its layout, and as its post-ops
// what only its result feeds: an Add of N constant values (the bias), Add/Sub/Mul/Div by N
// constant values or one, the element-wise activations oneDNN has (Gelu among them: the
// engine's `gelu` pass makes PyTorch's erf pattern one node), and Adds of a same-shaped value
// (a residual). What follows the product is read from the epilogue the engine tagged
// (FusionGraph::epilogue_of).
// A MatMul of two activations of the same rank >= 3 and batch axes (attention's Q K^T, P V)
// is one too, with the same post-ops; a Transpose swapping B's last two axes that only it
// reads is absorbed (B read through strides). Nodes with `taken[i]` (in another region) or not
// placed here are left alone.
std::vector<FusedGroup> build_linear_layers(const FusionGraph& g, const std::vector<bool>& taken,
                                            std::vector<std::string>* notes = nullptr);

}  // namespace tensord::cpu
