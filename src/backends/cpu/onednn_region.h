// The cpu backend's graph compiler for convolutional networks: oneDNN regions.
//
// A region is a connected part of a graph made of ops oneDNN runs well on 4-D float32
// tensors (Conv, pooling, element-wise activations, binary element-wise, Concat, and
// BatchNormalization after a Conv), containing at least one Conv. It is compiled once into
// a sequence of oneDNN primitives:
//   - BatchNormalization after a Conv is folded into the Conv's weights and bias;
//   - activations (Relu, Clip/Relu6, LeakyRelu, Sigmoid, Tanh, Elu, HardSwish, HardSigmoid,
//     Softplus ...) and a residual Add after a Conv become its post-ops (the residual is
//     accumulated in place when it is not needed afterwards);
//   - layouts are chosen by oneDNN ("any": blocked formats such as nChw16c) and kept between
//     primitives; reorders happen only at the region's edges (its inputs and outputs stay in
//     the executor's plain row-major layout) or where two primitives disagree;
//   - weights are reordered once, at compile time, into the layout their primitive wants;
//   - intermediate tensors live in one arena with a static memory plan (offsets reused by
//     lifetime), allocated through the engine's allocator for each run.
// To the executor a region is one step with plain inputs and outputs, so everything else
// (poisoning, accounting, the reference kernels) is unchanged.
#pragma once

#include <string>
#include <vector>

#include "backends/cpu/fusion.h"

namespace tensord::cpu {

// Finds the regions of `g` and compiles each. A region oneDNN cannot compile is dropped (its
// nodes keep their per-node kernels); the reason goes to `notes` when given.
// The element-wise and broadcast ops a region takes as oneDNN eltwise and binary primitives
// or post-ops (each also so by its schema's OpKind, which the region checks first).
std::vector<std::string> onednn_elementwise_ops();

std::vector<FusedGroup> build_onednn_regions(const FusionGraph& g,
                                             std::vector<std::string>* notes = nullptr);

// Linear layers outside those regions, each one step: a MatMul of a float32 activation of any
// rank >= 2 (static shape) by constant [K, N] weights, as one oneDNN matmul over [M, K] (the
// leading axes folded) with the weights reordered once into its layout, and as its post-ops
// what only its result feeds: an Add of N constant values (the bias), Add/Sub/Mul/Div by N
// constant values or one, the element-wise activations above, PyTorch's erf GELU
// pattern (x * 0.5 * (1 + Erf(x / sqrt 2))), and Adds of a same-shaped value (a residual).
// A MatMul of two activations of the same rank >= 3 and batch axes (attention's Q K^T, P V)
// is one too, with the same post-ops; a Transpose swapping B's last two axes that only it
// reads is absorbed (B read through strides). Nodes with `taken[i]` (in another region) or not
// placed here are left alone.
std::vector<FusedGroup> build_linear_layers(const FusionGraph& g, const std::vector<bool>& taken,
                                            std::vector<std::string>* notes = nullptr);

}  // namespace tensord::cpu
