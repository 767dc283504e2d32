// What the generated-kernel templates share (templates.cpp, the op plans; conv_templates.cpp,
// the convolution region's kernels): C source literals, shape products and a Conv's or pool's
// window geometry.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensord/graph.h"
#include "tensord/status.h"
#include "tensord/tensor.h"

namespace tensord::codegen::tmpl {

// An i64 literal.
std::string C(int64_t v);
// A float literal, exact (hexadecimal), NAN and INFINITY spelled out.
std::string flit(double value);
// The product of s[from, to); of all of s.
int64_t prod(const Shape& s, size_t from, size_t to);
int64_t prod(const Shape& s);

struct Window {
  size_t rank = 0;  // spatial dims
  std::vector<int64_t> kernel, strides, dilations, pad_begin, pad_end;
};
// Kernel shape, strides, dilations and pads of a Conv or pool over `in` (spatial dims) with
// output `out` (spatial dims): pads from auto_pad or the pads attribute.
Result<Window> window(const Node& node, const Shape& in, const Shape& out,
                      std::vector<int64_t> kernel);
// The spatial dims of an [N, C, ...] shape.
Shape spatial(const Shape& s);

}  // namespace tensord::codegen::tmpl
