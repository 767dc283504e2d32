// Element-wise programs: a connected group of float32 element-wise nodes over one shape
// (Add, Mul, Relu, Sigmoid, Clip ... with same-shape or one-element operands) is compiled
// into one pass over memory: the data is read once, every op runs on a block of a few
// hundred values held in cache, and only the values needed outside the group are written.
// Large tensors are split across the compute threads. Comparisons (Greater, Less, ...,
// Equal) of float32 operands and Where join too: a bool lives in a register as 1.0f / 0.0f,
// is stored as one byte when read outside, and a bool input of the output's size is read as
// Where's condition (ReLU's gradient, Where(Greater(x, 0), dy, 0), is one pass).
#pragma once

#include <string>
#include <vector>

#include "backends/cpu/fusion.h"

namespace tensord::cpu {

// The ops a program computes (each also element-wise or broadcast by its schema's OpKind,
// which grouping checks first).
std::vector<std::string> elementwise_program_ops();

// Groups and compiles the element-wise nodes of `g` not already `taken` (by oneDNN regions).
std::vector<FusedGroup> build_elementwise_programs(const FusionGraph& g,
                                                   const std::vector<bool>& taken);

}  // namespace tensord::cpu
