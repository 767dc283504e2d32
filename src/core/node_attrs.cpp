#include "core/node_attrs.h"

namespace tensord {

const Attribute* NodeAttrs::attr(const std::string& name) const {
  auto it = node_.attrs.find(name);
  return it == node_.attrs.end() ? nullptr : &it->second;
}

namespace {
template <typename T>
Result<T> get_attr(const NodeAttrs& n, const std::string& name, T default_value,
                   Attribute::Kind want) {
  const Attribute* a = n.attr(name);
  if (!a) return default_value;
  if (const T* v = a->get_if<T>()) return *v;
  // ints given where floats are expected (and vice versa for single values) are accepted,
  // as onnx's helper does when attributes are written by hand.
  if constexpr (std::is_same_v<T, float>) {
    if (const int64_t* i = a->get_if<int64_t>()) return static_cast<float>(*i);
  }
  if constexpr (std::is_same_v<T, std::vector<float>>) {
    if (const auto* i = a->get_if<std::vector<int64_t>>())
      return std::vector<float>(i->begin(), i->end());
  }
  return n.error("attribute '{}' must be {}, got {}", name, Attribute::kind_name(want),
                 Attribute::kind_name(a->kind()));
}
}  // namespace

Result<int64_t> NodeAttrs::attr_int(const std::string& name, int64_t default_value) const {
  return get_attr<int64_t>(*this, name, default_value, Attribute::Kind::kInt);
}
Result<float> NodeAttrs::attr_float(const std::string& name, float default_value) const {
  return get_attr<float>(*this, name, default_value, Attribute::Kind::kFloat);
}
Result<std::string> NodeAttrs::attr_string(const std::string& name,
                                           const std::string& default_value) const {
  return get_attr<std::string>(*this, name, default_value, Attribute::Kind::kString);
}
Result<std::vector<int64_t>> NodeAttrs::attr_ints(const std::string& name,
                                                  std::vector<int64_t> default_value) const {
  return get_attr<std::vector<int64_t>>(*this, name, std::move(default_value),
                                        Attribute::Kind::kInts);
}
Result<std::vector<float>> NodeAttrs::attr_floats(const std::string& name,
                                                  std::vector<float> default_value) const {
  return get_attr<std::vector<float>>(*this, name, std::move(default_value),
                                      Attribute::Kind::kFloats);
}

Status NodeAttrs::make_error(StatusCode code, const std::string& message) const {
  std::string where = node_.name.empty() ? "" : " (node '" + node_.name + "')";
  return Status(code, node_.op + ": " + message + where);
}

Status NodeAttrs::wrap(const Status& s) const {
  if (s.ok()) return s;
  return make_error(s.code(), s.message());
}

}  // namespace tensord
