// Sequences the importer can resolve statically: exporters write a Python list built in a loop
// (torchvision's MViT: `torch.split` into a list, then `q, k, v = ...`) as SequenceEmpty, a
// Loop with a constant trip count whose body SequenceInserts a tensor, and SequenceAt with
// constant positions. The engine's values are tensors only; this rewrite unrolls such Loops and
// replaces every sequence by the tensors it holds, so the graph has no sequence value left.
#pragma once

#include <string>

namespace onnx {
class GraphProto;
}

namespace tensord::onnx {

// Rewrites `g` (a top-level graph) when every sequence value in it is built and read in forms
// whose contents are known at import: SequenceEmpty, SequenceConstruct, SequenceInsert (at the
// end, or at a constant position), SequenceAt and SequenceErase with constant positions,
// SequenceLength, ConcatFromSequence (new_axis 0), and Loops with a constant trip count, a
// condition that stays true and no scan outputs, a sequence among their carried values
// (unrolled, at most `max_nodes` nodes and 16 MiB of copied nodes in all). Returns true when it rewrote `g`; false leaves
// `g` untouched (no sequence, or one it cannot resolve: the importer then says so as before).
bool resolve_static_sequences(::onnx::GraphProto* g, int64_t max_nodes);

}  // namespace tensord::onnx
