// The cpu backend's graph compiler for convolutional networks: oneDNN regions.
//
// A region is a connected part of a graph made of ops oneDNN runs well on 4-D float32
// tensors (Conv, pooling, element-wise activations, binary element-wise, Concat, and
// BatchNormalization after a Conv), containing at least one Conv. It is compiled once into
// a sequence of oneDNN primitives:
//   - BatchNormalization after a Conv arrives folded into its weights (the engine's `bnfold`
//     pass); one it could not fold runs as a scale-shift binary primitive;
//   - activations (Relu, Clip/Relu6, LeakyRelu, Sigmoid, Tanh, Elu, HardSwish, HardSigmoid,
//     Softplus, swish ...) and a residual Add after a Conv become its post-ops, read from the
//     epilogue the engine tagged (FusionGraph::epilogue_of; the residual is accumulated in
//     place when it is not needed afterwards);
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

// The activation layout oneDNN's convolutions choose on this CPU, which regions keep from
// end to end: "channels-last" (AVX-512 with brgemm kernels), "nChw8c" (AVX2) or "nChw16c".
std::string conv_native_layout();

std::vector<FusedGroup> build_onednn_regions(const FusionGraph& g,
                                             std::vector<std::string>* notes = nullptr);

}  // namespace tensord::cpu
