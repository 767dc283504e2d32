#include "tensord/graph.h"

#include "core/text.h"

namespace tensord {

const char* Attribute::kind_name(Kind k) {
  switch (k) {
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kInts: return "ints";
    case Kind::kFloats: return "floats";
    case Kind::kStrings: return "strings";
    case Kind::kTensor: return "tensor";
    case Kind::kGraph: return "graph";
  }
  return "unknown";
}

std::string Node::label() const {
  if (name.empty()) return "unnamed node (" + clip_text(op, 64) + ")";
  return "node '" + clip_text(name) + "' (" + clip_text(op, 64) + ")";
}

}  // namespace tensord
