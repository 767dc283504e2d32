// Typed access to a node's attributes, and error messages that name the node. Base of the
// inference and kernel contexts.
#pragma once

#include <string>
#include <vector>

#include "core/errors.h"
#include "tensord/graph.h"

namespace tensord {

class NodeAttrs {
 public:
  explicit NodeAttrs(const Node& node) : node_(node) {}

  const Node& node() const { return node_; }

  // Attributes, with defaults. A present attribute of the wrong kind is an error naming it.
  bool has_attr(const std::string& name) const { return node_.attrs.count(name) > 0; }
  Result<int64_t> attr_int(const std::string& name, int64_t default_value) const;
  Result<float> attr_float(const std::string& name, float default_value) const;
  Result<std::string> attr_string(const std::string& name, const std::string& default_value) const;
  Result<std::vector<int64_t>> attr_ints(const std::string& name,
                                         std::vector<int64_t> default_value = {}) const;
  Result<std::vector<float>> attr_floats(const std::string& name,
                                         std::vector<float> default_value = {}) const;
  // The attribute when present (any kind), else nullptr.
  const Attribute* attr(const std::string& name) const;

  // INVALID_ARGUMENT "<Op>: <message> (node '<name>')".
  template <typename... Args>
  Status error(fmt::format_string<Args...> f, Args&&... args) const {
    return make_error(StatusCode::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...));
  }
  // Same, UNIMPLEMENTED (a valid request this build cannot do, e.g. an unsupported dtype).
  template <typename... Args>
  Status unimplemented(fmt::format_string<Args...> f, Args&&... args) const {
    return make_error(StatusCode::kUnimplemented, fmt::format(f, std::forward<Args>(args)...));
  }
  Status make_error(StatusCode code, const std::string& message) const;
  // Prefixes an existing error (e.g. from broadcast_shapes) with the op and node.
  Status wrap(const Status& s) const;

 protected:
  const Node& node_;
};

}  // namespace tensord
