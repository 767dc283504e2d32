#include "onnx/onnx_import.h"

#include <google/protobuf/io/coded_stream.h>
#include <onnx/onnx_pb.h>

#include <climits>
#include <cerrno>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/errors.h"
#include "core/graph_utils.h"
#include "core/node_attrs.h"
#include "core/op_registry.h"
#include "onnx/onnx_sequences.h"

namespace tensord::onnx {
namespace {

namespace pb = ::onnx;

// ": <the OS's reason>" after a failed open (errno), or "" when it gave none.
std::string open_error() {
  const int e = errno;
  return e ? std::string(": ") + std::strerror(e) : std::string();
}

// Opsets 18 to 21 are read too: their new inputs and attributes are in the schemas (Reduce*
// `axes` input, Split `num_outputs`, Pad `axes` and `wrap`, Resize `antialias`/
// `keep_aspect_ratio_policy`/`axes`, ScatterND/ScatterElements `max`/`min`, the new ops), and
// the few whose meaning changed are normalised below (GroupNormalization-18's per-group scale,
// DFT-20's `axis` input). Types the engine has no kernels for (float8, int4) are refused by name.
// Older opsets are accepted too: ops whose form changed are normalised below (the legacy
// broadcasting of opsets < 7, with `axis`, and PRelu's per-channel slope become NumPy
// broadcasting through an Unsqueeze once the input ranks are known), and legacy attributes
// nobody normalises are reported as unknown.
constexpr int64_t kMinOpset = 1;
constexpr int64_t kMaxOpset = 21;

Result<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return errors::NotFound("cannot open '{}'{}", path, open_error());
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return errors::DataLoss("error reading '{}'", path);
  return ss.str();
}

// An ONNX element type the engine has no kernels for, named for the error message.
std::string unsupported_type_name(int32_t t) {
  switch (t) {
    case 14: return "complex64 (14)";
    case 15: return "complex128 (15)";
    case 17: return "float8e4m3fn (17, opset 19)";
    case 18: return "float8e4m3fnuz (18, opset 19)";
    case 19: return "float8e5m2 (19, opset 19)";
    case 20: return "float8e5m2fnuz (20, opset 19)";
    case 21: return "uint4 (21, opset 21)";
    case 22: return "int4 (22, opset 21)";
    case 23: return "float4e2m1 (23, opset 23)";
    default: return std::to_string(t);
  }
}

template <typename Msg>
bool parse_proto(Msg& msg, const std::string& bytes) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(std::min<size_t>(bytes.size(), INT_MAX)));
  in.SetTotalBytesLimit(INT_MAX);
  return msg.ParseFromCodedStream(&in) && in.ConsumedEntireMessage();
}


// The nesting of subgraphs and the number of nodes of a serialized ModelProto, read off the
// wire format without building any message: ModelProto.graph (7) -> GraphProto.node (1) ->
// NodeProto.attribute (5) -> AttributeProto.g (6) / .graphs (11) -> GraphProto ... One pass,
// no allocation, so a hostile file is refused before protobuf builds its messages and the
// importer converts them (a tree of 2^17 If bodies took 7.4 s and 500 MiB before the nesting
// error). Malformed bytes end the scan quietly: the parse reports them.
class WireScan {
 public:
  int max_depth = 0;   // deepest subgraph (0 = the main graph only)
  int64_t nodes = 0;
  bool stopped = false;  // a bound was passed: no need to read further

  WireScan(int depth_limit, int64_t node_limit) : depth_limit_(depth_limit), node_limit_(node_limit) {}

  void model(const uint8_t* p, const uint8_t* end) {
    each_field(p, end, [&](uint32_t field, const uint8_t* b, const uint8_t* e) {
      if (field == 7) graph(b, e, 0);
    });
  }

 private:
  int depth_limit_;
  int64_t node_limit_;

  static bool varint(const uint8_t*& p, const uint8_t* end, uint64_t* v) {
    uint64_t r = 0;
    for (int shift = 0; shift < 64 && p < end; shift += 7) {
      const uint8_t b = *p++;
      r |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) {
        *v = r;
        return true;
      }
    }
    return false;
  }

  // Calls f(field, begin, end) for every length-delimited field; skips the others.
  template <typename F>
  void each_field(const uint8_t* p, const uint8_t* end, F&& f) {
    while (p < end && !stopped) {
      uint64_t tag = 0, v = 0;
      if (!varint(p, end, &tag)) return;
      switch (tag & 7) {
        case 0:
          if (!varint(p, end, &v)) return;
          break;
        case 1:
          if (end - p < 8) return;
          p += 8;
          break;
        case 5:
          if (end - p < 4) return;
          p += 4;
          break;
        case 2:
          if (!varint(p, end, &v) || v > static_cast<uint64_t>(end - p)) return;
          f(static_cast<uint32_t>(tag >> 3), p, p + v);
          p += v;
          break;
        default:
          return;  // groups (3, 4) are not in ONNX's schema
      }
    }
  }

  void graph(const uint8_t* p, const uint8_t* end, int depth) {
    max_depth = std::max(max_depth, depth);
    // Past the bound (or past 64 with none: the scan's own stack) nothing deeper is read.
    if ((depth_limit_ > 0 && depth > depth_limit_) || depth > 64) {
      stopped = true;
      return;
    }
    each_field(p, end, [&](uint32_t field, const uint8_t* b, const uint8_t* e) {
      if (field != 1) return;
      if (node_limit_ > 0 && ++nodes > node_limit_) {
        stopped = true;
        return;
      }
      each_field(b, e, [&](uint32_t nf, const uint8_t* ab, const uint8_t* ae) {
        if (nf != 5) return;
        each_field(ab, ae, [&](uint32_t af, const uint8_t* gb, const uint8_t* ge) {
          if (af == 6 || af == 11) graph(gb, ge, depth + 1);
        });
      });
    });
  }
};

// Context for one import: the file name for messages and where external data lives.
struct Importer {
  std::string what;
  std::string base_dir;
  int64_t opset = 0;
  int node_counter = 0;

  Status err(const std::string& msg) const {
    return Status(StatusCode::kInvalidArgument, what + ": " + msg);
  }

  Result<Shape> dims_of(const pb::TensorProto& t) const {
    Shape s;
    for (int64_t d : t.dims()) {
      if (d < 0) return err(fmt::format("tensor '{}' has a negative dimension {}", t.name(), d));
      s.push_back(d);
    }
    return s;
  }

  Result<std::string> external_bytes(const pb::TensorProto& t, int64_t expected) const {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto& kv : t.external_data()) {
      try {
        if (kv.key() == "location") location = kv.value();
        else if (kv.key() == "offset") offset = std::stoll(kv.value());
        else if (kv.key() == "length") length = std::stoll(kv.value());
      } catch (...) {
        return err(fmt::format("tensor '{}': bad external_data value '{}' for '{}'", t.name(),
                               kv.value(), kv.key()));
      }
    }
    if (location.empty())
      return err(fmt::format("tensor '{}' has external data without a location", t.name()));
    if (base_dir.empty())
      return err(fmt::format("tensor '{}' uses external data '{}', which needs the model's folder",
                             t.name(), location));
    // Like ONNX Runtime: the data file must be inside the model's folder.
    std::filesystem::path rel(location);
    if (rel.is_absolute() || location.find("..") != std::string::npos)
      return err(fmt::format("tensor '{}': external data path '{}' must be relative to the model "
                             "folder, without '..'", t.name(), location));
    const std::string path = (std::filesystem::path(base_dir) / rel).string();
    // The file's real path must be inside the folder's real path too: a symlink in the folder
    // must not lead the importer (or a broker importing for a client) to files elsewhere.
    std::error_code ec_dir, ec_file;
    const auto real_dir = std::filesystem::canonical(base_dir, ec_dir);
    const auto real_file = std::filesystem::canonical(path, ec_file);
    if (ec_dir || ec_file)
      return err(fmt::format("tensor '{}': cannot open external data file '{}'", t.name(), path));
    const auto [dir_end, file_it] =
        std::mismatch(real_dir.begin(), real_dir.end(), real_file.begin(), real_file.end());
    if (dir_end != real_dir.end() || file_it == real_file.end())
      return err(fmt::format("tensor '{}': external data file '{}' resolves to a path outside the "
                             "model folder (through a symbolic link); refused",
                             t.name(), location));
    if (!std::filesystem::is_regular_file(real_file))
      return err(fmt::format("tensor '{}': external data '{}' is not a regular file", t.name(),
                             location));
    std::ifstream f(real_file, std::ios::binary);
    if (!f) return err(fmt::format("tensor '{}': cannot open external data file '{}'", t.name(), path));
    if (offset < 0) return err(fmt::format("tensor '{}': negative external data offset", t.name()));
    if (length < 0) length = expected;
    if (length != expected)
      return err(fmt::format("tensor '{}': external data length {} disagrees with its shape ({} bytes)",
                             t.name(), length, expected));
    f.seekg(0, std::ios::end);
    const int64_t file_size = static_cast<int64_t>(f.tellg());
    if (offset > file_size || length > file_size - offset)
      return err(fmt::format("tensor '{}': external data [{}, {}) is past the end of '{}' ({} bytes)",
                             t.name(), offset, offset + length, path, file_size));
    std::string data(static_cast<size_t>(length), '\0');
    f.seekg(offset);
    f.read(data.data(), length);
    if (!f) return err(fmt::format("tensor '{}': short read from '{}'", t.name(), path));
    return data;
  }

  Result<HostTensor> tensor(const pb::TensorProto& t) const {
    if (t.data_type() == pb::TensorProto::STRING)
      return Status(StatusCode::kUnimplemented,
                    what + ": tensor '" + t.name() + "' is a string tensor (out of scope)");
    if (!dtype_is_valid(t.data_type()))
      return Status(t.data_type() >= 14 && t.data_type() <= 23 ? StatusCode::kUnimplemented
                                                                 : StatusCode::kInvalidArgument,
                    fmt::format("{}: tensor '{}' has data type {}, which tensord does not support",
                                what, t.name(), unsupported_type_name(t.data_type())));
    const DType dtype = static_cast<DType>(t.data_type());
    TD_ASSIGN_OR_RETURN(Shape shape, dims_of(t));
    auto size = checked_byte_size(dtype, shape);
    if (!size.ok()) return err(fmt::format("tensor '{}': {}", t.name(), size.status().message()));
    if (*size > (int64_t{1} << 40))
      return err(fmt::format("tensor '{}' of shape {} is absurdly large ({} bytes)", t.name(),
                             shape_to_string(shape), *size));
    const int64_t n = shape_numel(shape);
    const size_t esize = dtype_size(dtype);
    if (t.data_location() == pb::TensorProto::EXTERNAL) {
      TD_ASSIGN_OR_RETURN(std::string bytes, external_bytes(t, *size));
      return HostTensor::from_bytes(dtype, shape, bytes.data(), bytes.size());
    }
    if (t.has_raw_data()) {
      if (static_cast<int64_t>(t.raw_data().size()) != *size)
        return err(fmt::format("tensor '{}': raw_data has {} bytes, shape {} of {} needs {}",
                               t.name(), t.raw_data().size(), shape_to_string(shape),
                               dtype_name(dtype), *size));
      return HostTensor::from_bytes(dtype, shape, t.raw_data().data(), t.raw_data().size());
    }
    // Check the element count before allocating: the dims of a hostile file can be huge.
    int64_t have = 0;
    switch (dtype) {
      case DType::kFloat32: have = t.float_data_size(); break;
      case DType::kFloat64: have = t.double_data_size(); break;
      case DType::kInt64: have = t.int64_data_size(); break;
      case DType::kUInt32: case DType::kUInt64: have = t.uint64_data_size(); break;
      default: have = t.int32_data_size(); break;
    }
    if (have != n)
      return err(fmt::format("tensor '{}' has {} values, shape {} needs {}", t.name(), have,
                             shape_to_string(shape), n));
    HostTensor out(dtype, shape);
    auto count_error = [&](int64_t got) {
      return err(fmt::format("tensor '{}' has {} values, shape {} needs {}", t.name(), got,
                             shape_to_string(shape), n));
    };
    unsigned char* dst = static_cast<unsigned char*>(out.mutable_data());
    switch (dtype) {
      case DType::kFloat32:
        if (t.float_data_size() != n) return count_error(t.float_data_size());
        if (n) std::memcpy(dst, t.float_data().data(), static_cast<size_t>(n) * 4);
        break;
      case DType::kFloat64:
        if (t.double_data_size() != n) return count_error(t.double_data_size());
        if (n) std::memcpy(dst, t.double_data().data(), static_cast<size_t>(n) * 8);
        break;
      case DType::kInt64:
        if (t.int64_data_size() != n) return count_error(t.int64_data_size());
        if (n) std::memcpy(dst, t.int64_data().data(), static_cast<size_t>(n) * 8);
        break;
      case DType::kUInt32:
      case DType::kUInt64:
        if (t.uint64_data_size() != n) return count_error(t.uint64_data_size());
        for (int64_t i = 0; i < n; ++i) {
          const uint64_t v = t.uint64_data(static_cast<int>(i));
          if (dtype == DType::kUInt32) reinterpret_cast<uint32_t*>(dst)[i] = static_cast<uint32_t>(v);
          else reinterpret_cast<uint64_t*>(dst)[i] = v;
        }
        break;
      default:  // int32, int16, int8, uint16, uint8, bool, float16, bfloat16: in int32_data
        if (t.int32_data_size() != n) return count_error(t.int32_data_size());
        for (int64_t i = 0; i < n; ++i) {
          const int32_t v = t.int32_data(static_cast<int>(i));
          switch (esize) {
            case 1: dst[i] = static_cast<unsigned char>(v); break;
            case 2: reinterpret_cast<uint16_t*>(dst)[i] = static_cast<uint16_t>(v); break;
            case 4: reinterpret_cast<int32_t*>(dst)[i] = v; break;
          }
        }
        if (dtype == DType::kBool)
          for (int64_t i = 0; i < n; ++i) dst[i] = dst[i] != 0;
        break;
    }
    return out;
  }

  Result<TensorType> value_type(const pb::ValueInfoProto& v) const {
    if (!v.has_type()) return TensorType{};
    const auto& type = v.type();
    if (type.value_case() != pb::TypeProto::kTensorType)
      return Status(StatusCode::kUnimplemented,
                    what + ": value '" + v.name() + "' is not a tensor (sequence/map/optional "
                    "types are out of scope)");
    const auto& tt = type.tensor_type();
    TensorType out;
    if (tt.elem_type() == pb::TensorProto::STRING)
      return Status(StatusCode::kUnimplemented,
                    what + ": value '" + v.name() + "' is a string tensor (out of scope)");
    if (tt.elem_type() != 0) {
      if (!dtype_is_valid(tt.elem_type()))
        return Status(tt.elem_type() >= 14 && tt.elem_type() <= 23 ? StatusCode::kUnimplemented
                                                                   : StatusCode::kInvalidArgument,
                      fmt::format("{}: value '{}' has element type {}, which tensord does not "
                                  "support", what, v.name(), unsupported_type_name(tt.elem_type())));
      out.dtype = static_cast<DType>(tt.elem_type());
    }
    if (tt.has_shape()) {
      for (const auto& d : tt.shape().dim()) {
        if (d.has_dim_value()) {
          if (d.dim_value() < 0)
            return err(fmt::format("value '{}' has a negative dimension {}", v.name(), d.dim_value()));
          out.shape.push_back(d.dim_value());
        } else {
          out.shape.push_back(-1);
        }
      }
    }
    return out;
  }

  Result<Attribute> attribute(const pb::AttributeProto& a, const std::string& node_label) {
    using A = pb::AttributeProto;
    switch (a.type()) {
      case A::FLOAT: return Attribute(a.f());
      case A::INT: return Attribute(static_cast<int64_t>(a.i()));
      case A::STRING: return Attribute(a.s());
      case A::FLOATS: return Attribute(std::vector<float>(a.floats().begin(), a.floats().end()));
      case A::INTS: return Attribute(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
      case A::STRINGS: return Attribute(std::vector<std::string>(a.strings().begin(), a.strings().end()));
      case A::TENSOR: {
        TD_ASSIGN_OR_RETURN(HostTensor t, tensor(a.t()));
        return Attribute(std::move(t));
      }
      case A::GRAPH: {
        TD_ASSIGN_OR_RETURN(Graph g, graph(a.g(), /*subgraph=*/true));
        return Attribute(std::make_shared<const Graph>(std::move(g)));
      }
      default:
        return Status(StatusCode::kUnimplemented,
                      fmt::format("{}: {} attribute '{}' has unsupported type {}", what,
                                  node_label, a.name(), static_cast<int>(a.type())));
    }
  }

  // Legacy (opset < 7) forms whose rewrite needs the ranks of the node's inputs; resolved
  // after the whole graph is read, by resolve_legacy.
  enum class Legacy { kAxisBroadcast, kPreluChannel };
  struct PendingLegacy {
    Legacy kind;
    size_t node;       // the node's index in its graph
    int64_t axis;      // kAxisBroadcast: the `axis` attribute
  };
  std::vector<PendingLegacy> pending;

  static bool is_legacy_broadcast_op(const std::string& op) {
    return op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" ||
           op == "And" || op == "Or" || op == "Xor" || op == "Equal" || op == "Greater" ||
           op == "Less";
  }

  std::string fresh_name(const std::string& base) { return base + "__td" + std::to_string(node_counter++); }

  // Adds an int64 initializer and returns its name.
  std::string add_ints(Graph& g, const std::string& base, const std::vector<int64_t>& v) {
    std::string name = fresh_name(base);
    g.initializers.emplace(name, HostTensor::from_vector(v, {static_cast<int64_t>(v.size())}));
    return name;
  }
  std::string add_scalar(Graph& g, const std::string& base, float v) {
    std::string name = fresh_name(base);
    g.initializers.emplace(name, HostTensor::scalar<float>(v));
    return name;
  }

  // Moves attribute `attr` (ints) to input position `pos` as an int64 initializer.
  void attr_to_input(Graph& g, Node& n, const std::string& attr, size_t pos) {
    auto it = n.attrs.find(attr);
    std::string name;
    if (it != n.attrs.end()) {
      std::vector<int64_t> v;
      if (const auto* ints = it->second.get_if<std::vector<int64_t>>()) v = *ints;
      else if (const auto* i = it->second.get_if<int64_t>()) v = {*i};
      name = add_ints(g, n.name + "_" + attr, v);
      n.attrs.erase(it);
    }
    if (n.inputs.size() <= pos) n.inputs.resize(pos + 1);
    n.inputs[pos] = name;
    while (!n.inputs.empty() && n.inputs.back().empty()) n.inputs.pop_back();
  }

  // The value of `name` when the file gives it as a constant: an initializer, or the `value` of
  // a Constant node read before; nullptr otherwise.
  static const HostTensor* known_value(const Graph& g, const std::string& name) {
    if (name.empty()) return nullptr;
    auto it = g.initializers.find(name);
    if (it != g.initializers.end()) return &it->second;
    for (auto n = g.nodes.rbegin(); n != g.nodes.rend(); ++n) {
      if (n->op != "Constant" || !n->domain.empty() || n->outputs.size() != 1 ||
          n->outputs[0] != name)
        continue;
      auto a = n->attrs.find("value");
      return a == n->attrs.end() ? nullptr : a->second.get_if<HostTensor>();
    }
    return nullptr;
  }

  static bool is_attr_axes_reduce(const std::string& op) {
    return op == "ReduceMean" || op == "ReduceMax" || op == "ReduceMin" || op == "ReduceProd" ||
           op == "ReduceL1" || op == "ReduceL2" || op == "ReduceLogSum" ||
           op == "ReduceLogSumExp" || op == "ReduceSumSquare";
  }

  // Opset 18-21 forms: a constant axes input of a Reduce* becomes the attribute the compiler's
  // passes read; a changed meaning becomes the engine's form.
  Status normalize_new(Graph& g, Node& n) {
    const std::string& op = n.op;
    const NodeAttrs attrs(n);
    if (is_attr_axes_reduce(op) && opset >= 18) {
      if (n.attrs.count("axes"))
        return err(fmt::format("{}: opset-{} {} takes axes as input 1, not as an attribute",
                               n.label(), opset, op));
      // A constant (or absent) axes input becomes the attribute; empty axes mean every axis,
      // or with noop_with_empty_axes none, which is an Identity (so no pass that reads the
      // attribute form mistakes it for a full reduction).
      const bool absent = n.inputs.size() < 2 || n.inputs[1].empty();
      const HostTensor* v = absent ? nullptr : known_value(g, n.inputs[1]);
      if (absent || (v && v->dtype() == DType::kInt64 && v->shape().size() == 1)) {
        TD_ASSIGN_OR_RETURN(const int64_t noop, attrs.attr_int("noop_with_empty_axes", 0));
        n.inputs.resize(1);
        n.attrs.erase("noop_with_empty_axes");
        if (v && v->numel() > 0) {
          const auto* p = static_cast<const int64_t*>(v->data());
          n.attrs["axes"] = std::vector<int64_t>(p, p + v->numel());
        } else if (noop != 0) {
          if (n.inputs.empty() || n.inputs[0].empty())
            return err(fmt::format("{} needs an input", n.label()));
          n.op = "Identity";
          n.attrs.clear();
        }
      }
    } else if (op == "GroupNormalization" && opset < 21) {
      // GroupNormalization-18: scale and bias have one value per group, not per channel.
      n.attrs["per_group_affine"] = int64_t{1};
    } else if (op == "DFT" && opset >= 20) {
      // DFT-20: `axis` is input 2 (default -2), no longer an attribute.
      if (n.attrs.count("axis"))
        return err(fmt::format("{}: opset-{} DFT takes axis as input 2, not as an attribute",
                               n.label(), opset));
      // A constant axis becomes the attribute; one computed at run time stays input 2.
      int64_t axis = -2;
      const bool given = n.inputs.size() > 2 && !n.inputs[2].empty();
      const HostTensor* v = given ? known_value(g, n.inputs[2]) : nullptr;
      if (!given || (v && v->numel() == 1 &&
                     (v->dtype() == DType::kInt64 || v->dtype() == DType::kInt32))) {
        if (v)
          axis = v->dtype() == DType::kInt64 ? *static_cast<const int64_t*>(v->data())
                                             : *static_cast<const int32_t*>(v->data());
        n.inputs.resize(std::min<size_t>(n.inputs.size(), 2));
        while (!n.inputs.empty() && n.inputs.back().empty()) n.inputs.pop_back();
        n.attrs["axis"] = axis;
      }
    }
    // `saturate` (Cast, CastLike, QuantizeLinear; opset 19) only affects float8 targets, which
    // the engine refuses by name: with any other target it changes nothing.
    if ((op == "Cast" || op == "CastLike" || op == "QuantizeLinear") && opset >= 19) {
      TD_ASSIGN_OR_RETURN(const int64_t sat, attrs.attr_int("saturate", 1));
      if (sat != 0 && sat != 1)
        return err(fmt::format("{}: saturate must be 0 or 1, got {}", n.label(), sat));
      n.attrs.erase("saturate");
    }
    // Opset 21's blocked quantization and output_dtype: the defaults (none) are the old op.
    if ((op == "QuantizeLinear" || op == "DequantizeLinear") && opset >= 21) {
      TD_ASSIGN_OR_RETURN(const int64_t block, attrs.attr_int("block_size", 0));
      if (block == 0) n.attrs.erase("block_size");
      if (op == "QuantizeLinear") {
        TD_ASSIGN_OR_RETURN(const int64_t odt, attrs.attr_int("output_dtype", 0));
        if (odt == 0) n.attrs.erase("output_dtype");
      }
    }
    return OkStatus();
  }

  // Rewrites `n` (declared under `opset`) into its opset-17 form; may append helper nodes.
  // `n` is about to become g.nodes[g.nodes.size()].
  Status normalize(Graph& g, Node& n, std::vector<Node>& extra) {
    const std::string op = n.op;
    const Node original = n;  // attribute reads see the node as written in the file
    const NodeAttrs attrs(original);
    // Rewrites below read input 0 / output 0: a malformed node is reported, not indexed.
    const bool rewrites_io = op == "Upsample" || (op == "Resize" && opset < 11) ||
                             ((op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") && opset < 13);
    if (rewrites_io && (n.inputs.empty() || n.inputs[0].empty() || n.outputs.empty() ||
                        n.outputs[0].empty()))
      return err(fmt::format("{} needs an input and an output", n.label()));
    // Opset < 6: a memory-reuse hint with no effect on results.
    if (opset < 6) n.attrs.erase("consumed_inputs");
    if (opset < 7 && n.attrs.count("broadcast") && is_legacy_broadcast_op(op)) {
      // Legacy broadcasting (opset < 7): B broadcasts to A. Without `axis` it is NumPy's
      // trailing alignment; with `axis`, B's dims line up with A's from `axis` on, which
      // needs B's shape padded with trailing 1s once the ranks are known (resolve_legacy).
      TD_ASSIGN_OR_RETURN(const int64_t broadcast, attrs.attr_int("broadcast", 0));
      n.attrs.erase("broadcast");
      if (n.attrs.count("axis")) {
        TD_ASSIGN_OR_RETURN(const int64_t axis, attrs.attr_int("axis", 0));
        n.attrs.erase("axis");
        if (broadcast != 0) {
          if (n.inputs.size() != 2 || n.inputs[0].empty() || n.inputs[1].empty())
            return err(fmt::format("{} needs two inputs", n.label()));
          pending.push_back({Legacy::kAxisBroadcast, g.nodes.size(), axis});
        }
      }
    } else if (op == "PRelu" && opset < 7) {
      // PRelu-1/6: a slope of shape [C] is per channel (X's dim 1), not NumPy-aligned.
      if (n.inputs.size() != 2 || n.inputs[0].empty() || n.inputs[1].empty())
        return err(fmt::format("{} needs two inputs", n.label()));
      pending.push_back({Legacy::kPreluChannel, g.nodes.size(), 1});
    }
    if (op == "Clip" && opset < 11) {
      TD_ASSIGN_OR_RETURN(const float lo, attrs.attr_float("min", -3.4028235e38f));
      TD_ASSIGN_OR_RETURN(const float hi, attrs.attr_float("max", 3.4028235e38f));
      n.attrs.erase("min");
      n.attrs.erase("max");
      n.inputs.resize(1);
      n.inputs.push_back(add_scalar(g, n.name + "_min", lo));
      n.inputs.push_back(add_scalar(g, n.name + "_max", hi));
    } else if (op == "Slice" && opset < 10) {
      attr_to_input(g, n, "starts", 1);
      attr_to_input(g, n, "ends", 2);
      if (n.attrs.count("axes")) attr_to_input(g, n, "axes", 3);
    } else if (op == "Reshape" && opset < 5) {
      attr_to_input(g, n, "shape", 1);
    } else if ((op == "ReduceSum" && opset < 13) || ((op == "Squeeze" || op == "Unsqueeze") && opset < 13)) {
      if (n.attrs.count("axes")) attr_to_input(g, n, "axes", 1);
    } else if (op == "Split" && opset < 13) {
      if (n.attrs.count("split")) attr_to_input(g, n, "split", 1);
    } else if (op == "TopK" && opset < 10) {
      attr_to_input(g, n, "k", 1);
    } else if (op == "Pad" && opset < 11) {
      attr_to_input(g, n, "pads", 1);
      float value = 0;
      if (n.attrs.count("value")) {
        TD_ASSIGN_OR_RETURN(value, attrs.attr_float("value", 0.0f));
        n.attrs.erase("value");
      }
      n.inputs.push_back(add_scalar(g, n.name + "_value", value));
    } else if (op == "Dropout" && opset < 12) {
      if (n.attrs.count("ratio")) {
        TD_ASSIGN_OR_RETURN(const float r, attrs.attr_float("ratio", 0.5f));
        n.attrs.erase("ratio");
        n.inputs.resize(1);
        n.inputs.push_back(add_scalar(g, n.name + "_ratio", r));
      }
      n.attrs.erase("is_test");
    } else if (op == "BatchNormalization" && opset < 9) {
      n.attrs.erase("spatial");
      n.attrs.erase("is_test");
    } else if (op == "Gemm" && opset < 7) {
      n.attrs.erase("broadcast");
    } else if (op == "Scatter") {
      n.op = "ScatterElements";  // deprecated alias (opset 9-10)
    } else if (op == "Upsample") {
      // Upsample (opset 7-9) is Resize with scales.
      std::string mode = "nearest";
      TD_ASSIGN_OR_RETURN(mode, attrs.attr_string("mode", "nearest"));
      std::vector<float> scales;
      TD_ASSIGN_OR_RETURN(scales, attrs.attr_floats("scales"));
      n.op = "Resize";
      n.attrs.clear();
      n.attrs["mode"] = mode == "bilinear" ? std::string("linear") : mode;
      if (mode == "nearest") {
        n.attrs["nearest_mode"] = std::string("floor");
        n.attrs["coordinate_transformation_mode"] = std::string("asymmetric");
      } else {
        n.attrs["coordinate_transformation_mode"] = std::string("asymmetric");
      }
      std::string scales_name;
      if (!scales.empty()) {
        scales_name = fresh_name(n.name + "_scales");
        g.initializers.emplace(scales_name, HostTensor::from_vector(scales, {static_cast<int64_t>(scales.size())}));
      } else if (n.inputs.size() > 1) {
        scales_name = n.inputs[1];
      }
      n.inputs = {n.inputs[0], "", scales_name};
    } else if (op == "Resize" && opset < 11) {
      // opset 10: (X, scales) -> opset 11+: (X, roi, scales)
      if (n.inputs.size() >= 2) n.inputs = {n.inputs[0], "", n.inputs[1]};
      TD_ASSIGN_OR_RETURN(const std::string mode, attrs.attr_string("mode", "nearest"));
      n.attrs["coordinate_transformation_mode"] = std::string("asymmetric");
      if (mode == "nearest") n.attrs["nearest_mode"] = std::string("floor");
    } else if ((op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") && opset < 13) {
      // Before 13: coerce to 2-D at `axis` (default 1), normalise rows, restore the shape.
      int64_t axis = 1;
      TD_ASSIGN_OR_RETURN(axis, attrs.attr_int("axis", 1));
      const std::string x = n.inputs.at(0), y = n.outputs.at(0);
      const std::string flat = fresh_name(y + "_flat"), soft = fresh_name(y + "_2d"),
                        shape = fresh_name(y + "_shape");
      Node flatten;
      flatten.name = fresh_name(n.name + "_flatten");
      flatten.op = "Flatten";
      flatten.inputs = {x};
      flatten.outputs = {flat};
      flatten.attrs["axis"] = axis;
      Node shape_node;
      shape_node.name = fresh_name(n.name + "_shape");
      shape_node.op = "Shape";
      shape_node.inputs = {x};
      shape_node.outputs = {shape};
      Node reshape;
      reshape.name = fresh_name(n.name + "_reshape");
      reshape.op = "Reshape";
      reshape.inputs = {soft, shape};
      reshape.outputs = {y};
      n.inputs = {flat};
      n.outputs = {soft};
      n.attrs["axis"] = int64_t{1};
      extra.push_back(std::move(flatten));
      extra.push_back(std::move(shape_node));
      extra.push_back(std::move(reshape));
    }
    return OkStatus();
  }

  // Appends Unsqueeze(value, axes) and returns the new value's name.
  std::string unsqueeze(Graph& g, const std::string& node_name, const std::string& value,
                        const std::vector<int64_t>& axes) {
    Node u;
    u.name = fresh_name(node_name + "_legacy_align");
    u.op = "Unsqueeze";
    u.inputs = {value, add_ints(g, node_name + "_legacy_axes", axes)};
    u.outputs = {fresh_name(value + "_aligned")};
    std::string out = u.outputs[0];
    g.nodes.push_back(std::move(u));
    return out;
  }

  // Rewrites one legacy node now that the shapes (ranks; dims may be -1) of its inputs are
  // known. An impossible form is INVALID_ARGUMENT naming the node, the axis and the shapes.
  Status rewrite_legacy(Graph& g, const PendingLegacy& p, const Shape& a, const Shape& b) {
    const std::string label = g.nodes[p.node].label();
    const std::string node_name = g.nodes[p.node].name;
    const std::string b_name = g.nodes[p.node].inputs[1];
    const auto ra = static_cast<int64_t>(a.size()), rb = static_cast<int64_t>(b.size());
    if (p.kind == Legacy::kPreluChannel) {
      // Per-channel slope [C] against X [N, C, ...]: slope becomes [C, 1, ...].
      if (rb != 1 || b[0] == 1 || ra < 2) return OkStatus();  // NumPy alignment is the meaning
      if (b[0] >= 0 && a[1] >= 0 && b[0] != a[1])
        return err(fmt::format("{}: opset-{} PRelu applies a slope of shape {} per channel, but "
                               "X of shape {} has {} channels (dim 1)",
                               label, opset, shape_to_string(b), shape_to_string(a), a[1]));
      std::vector<int64_t> axes;
      for (int64_t d = 1; d < ra - 1; ++d) axes.push_back(d);
      if (!axes.empty()) g.nodes[p.node].inputs[1] = unsqueeze(g, node_name, b_name, axes);
      return OkStatus();
    }
    // Opset < 7 broadcast=1 with axis: B's dims line up with A's dims axis .. axis+rank(B)-1.
    if (rb == 0) return OkStatus();  // a scalar broadcasts anywhere
    bool one_element = rb <= ra;
    for (int64_t d : b) one_element = one_element && d == 1;
    if (one_element) return OkStatus();
    const int64_t axis = p.axis < 0 ? p.axis + ra : p.axis;
    auto impossible = [&](const std::string& why) {
      return err(fmt::format("{}: opset-{} broadcasting with axis={} cannot align B of shape {} "
                             "with A of shape {}: {}",
                             label, opset, p.axis, shape_to_string(b), shape_to_string(a), why));
    };
    if (axis < 0 || axis + rb > ra)
      return impossible(fmt::format("B's {} dims do not fit in A's {} from axis {}", rb, ra, p.axis));
    for (int64_t i = 0; i < rb; ++i) {
      const int64_t bd = b[static_cast<size_t>(i)], ad = a[static_cast<size_t>(axis + i)];
      if (bd >= 0 && ad >= 0 && bd != ad && bd != 1)
        return impossible(fmt::format("B's dim {} ({}) differs from A's dim {} ({})", i, bd,
                                      axis + i, ad));
    }
    std::vector<int64_t> axes;
    for (int64_t d = rb; d < ra - axis; ++d) axes.push_back(d);
    if (!axes.empty()) g.nodes[p.node].inputs[1] = unsqueeze(g, node_name, b_name, axes);
    return OkStatus();
  }

  // Rewrites the pending legacy nodes of `g` once the ranks of their inputs are known: from
  // declared shapes (graph inputs, value_info, initializers), else from shape inference over
  // the graph (repeated while rewriting a node lets inference see further). A node whose
  // input ranks stay unknown is refused, naming the form.
  Status resolve_legacy(Graph& g, std::map<std::string, Shape> shapes, bool subgraph,
                        const std::set<std::string>& ranked_inputs) {
    bool can_infer = !subgraph;
    for (const auto& in : g.inputs)
      if (!in.type.defined() || !ranked_inputs.count(in.name)) can_infer = false;
    while (!pending.empty()) {
      std::vector<PendingLegacy> left;
      for (const auto& p : pending) {
        const Node& n = g.nodes[p.node];
        auto a = shapes.find(n.inputs[0]), b = shapes.find(n.inputs[1]);
        if (b != shapes.end() && a == shapes.end()) {
          // Some forms mean the same under NumPy broadcasting whatever A's rank is.
          const Shape& bs = b->second;
          if (p.kind == Legacy::kPreluChannel ? bs.size() != 1 || bs[0] == 1 : bs.empty())
            continue;
        }
        if (a == shapes.end() || b == shapes.end()) {
          left.push_back(p);
          continue;
        }
        TD_RETURN_IF_ERROR(rewrite_legacy(g, p, a->second, b->second));
      }
      pending = std::move(left);
      if (pending.empty() || !can_infer) break;
      std::vector<TensorType> input_types;
      for (const auto& in : g.inputs) input_types.push_back(in.type);
      auto types = infer_graph(OpRegistry::global(), g, input_types);
      if (!types.ok()) break;
      size_t learned = 0;
      for (const auto& [name, t] : types->values)
        if (t.ok() && t->defined() && shapes.emplace(name, t->shape).second) ++learned;
      if (learned == 0) break;
    }
    if (pending.empty()) return OkStatus();
    const PendingLegacy& p = pending.front();
    const Node& n = g.nodes[p.node];
    pending.clear();
    const std::string form =
        p.kind == Legacy::kPreluChannel
            ? fmt::format("opset-{} PRelu (a slope of shape [C] is per channel of X)", opset)
            : fmt::format("opset-{} broadcasting with axis={}", opset, p.axis);
    return Status(StatusCode::kUnimplemented,
                  fmt::format("{}: {} uses {}; rewriting it needs the ranks of its inputs '{}' and "
                              "'{}', which are not known at import time (declare the shapes of "
                              "the graph's inputs)",
                              what, n.label(), form, n.inputs[0], n.inputs[1]));
  }

  Result<Graph> graph(const pb::GraphProto& gp, bool subgraph) {
    Graph g;
    g.name = gp.name();
    std::vector<PendingLegacy> outer_pending;  // a subgraph's legacy nodes are its own
    outer_pending.swap(pending);
    std::set<std::string> initializer_names;
    for (const auto& t : gp.initializer()) {
      if (t.name().empty()) return err("an initializer has no name");
      TD_ASSIGN_OR_RETURN(HostTensor value, tensor(t));
      if (!g.initializers.emplace(t.name(), std::move(value)).second)
        return err(fmt::format("initializer '{}' is defined twice", t.name()));
      initializer_names.insert(t.name());
    }
    if (gp.sparse_initializer_size() > 0)
      return Status(StatusCode::kUnimplemented, what + ": sparse initializers are not supported");
    for (const auto& in : gp.input()) {
      if (initializer_names.count(in.name())) continue;  // IR < 4: initializers listed as inputs
      TD_ASSIGN_OR_RETURN(TensorType t, value_type(in));
      g.inputs.push_back({in.name(), t});
    }
    for (const auto& out : gp.output()) {
      TD_ASSIGN_OR_RETURN(TensorType t, value_type(out));
      g.outputs.push_back({out.name(), t});
    }
    for (const auto& np : gp.node()) {
      Node n;
      n.name = np.name().empty() ? fmt::format("{}_{}", np.op_type(), node_counter++) : np.name();
      n.op = np.op_type();
      n.domain = np.domain() == "ai.onnx" ? "" : np.domain();
      n.inputs.assign(np.input().begin(), np.input().end());
      n.outputs.assign(np.output().begin(), np.output().end());
      for (const auto& a : np.attribute()) {
        if (!a.ref_attr_name().empty())
          return Status(StatusCode::kUnimplemented,
                        fmt::format("{}: {} uses a function attribute reference", what, n.label()));
        TD_ASSIGN_OR_RETURN(Attribute attr, attribute(a, n.label()));
        n.attrs[a.name()] = std::move(attr);
      }
      std::vector<Node> extra;
      TD_RETURN_IF_ERROR(normalize(g, n, extra));
      TD_RETURN_IF_ERROR(normalize_new(g, n));
      g.nodes.push_back(std::move(n));
      for (auto& e : extra) g.nodes.push_back(std::move(e));
    }
    if (!subgraph) {
      auto order = topological_order(g);
      if (!order.ok()) return err(order.status().message());
    }
    if (!pending.empty()) {
      // Shapes declared in the file: ranks for the legacy rewrites (-1 for unknown dims).
      std::map<std::string, Shape> shapes;
      std::set<std::string> ranked_inputs;
      auto declare = [&](const pb::ValueInfoProto& v, bool input) {
        if (!v.has_type() || v.type().value_case() != pb::TypeProto::kTensorType ||
            !v.type().tensor_type().has_shape())
          return;
        Shape s;
        for (const auto& d : v.type().tensor_type().shape().dim())
          s.push_back(d.has_dim_value() && d.dim_value() >= 0 ? d.dim_value() : -1);
        shapes.emplace(v.name(), std::move(s));
        if (input) ranked_inputs.insert(v.name());
      };
      for (const auto& [name, t] : g.initializers) shapes.emplace(name, t.shape());
      for (const auto& v : gp.input()) declare(v, true);
      for (const auto& v : gp.value_info()) declare(v, false);
      for (const auto& v : gp.output()) declare(v, false);
      TD_RETURN_IF_ERROR(resolve_legacy(g, std::move(shapes), subgraph, ranked_inputs));
    }
    pending.swap(outer_pending);
    return g;
  }
};

Status check_ops(const Graph& g, const std::string& what) {
  std::map<std::string, int> unknown;
  std::function<void(const Graph&)> walk = [&](const Graph& graph) {
    for (const Node& n : graph.nodes) {
      std::string key = n.domain.empty() ? n.op : n.domain + "." + n.op;
      // ONNX ops by name, tensord's own ("tensord.Cholesky", ...) and the training domain's
      // ("ai.onnx.preview.training.Adam") by domain and name.
      if (n.domain == "tensord" || n.domain == "ai.onnx.preview.training"
              ? !OpRegistry::global().find(key)
                                : !n.domain.empty() || !OpRegistry::global().find(n.op))
        unknown[key]++;
      for (const auto& [name, a] : n.attrs)
        if (const auto* sub = a.get_if<std::shared_ptr<const Graph>>())
          if (*sub) walk(**sub);
    }
  };
  walk(g);
  if (unknown.empty()) return OkStatus();
  std::string list;
  for (const auto& [op, count] : unknown)
    list += fmt::format("{}{} ({} node{})", list.empty() ? "" : ", ", op, count, count > 1 ? "s" : "");
  return Status(StatusCode::kUnimplemented, fmt::format("{}: unsupported ops: {}", what, list));
}

}  // namespace

Result<Model> import_bytes(const std::string& bytes, const std::string& what,
                           const std::string& base_dir, const ImportOptions& options) {
  pb::ModelProto mp;
  if (bytes.empty()) return errors::InvalidArgument("{}: empty file, not an ONNX model", what);
  if (options.max_subgraph_depth > 0 || options.max_nodes > 0) {
    WireScan scan(options.max_subgraph_depth, options.max_nodes);
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
    scan.model(p, p + bytes.size());
    if (options.max_subgraph_depth > 0 && scan.max_depth > options.max_subgraph_depth)
      return errors::InvalidArgument(
          "{}: subgraphs (If/Loop/Scan bodies) are nested more than {} deep (the broker's limit)",
          what, options.max_subgraph_depth);
    if (options.max_nodes > 0 && scan.nodes > options.max_nodes)
      return errors::InvalidArgument(
          "{}: more than {} nodes in all, subgraphs included (the broker's limit)", what,
          options.max_nodes);
  }
  if (!parse_proto(mp, bytes))
    return errors::InvalidArgument("{}: not a valid ONNX model (protobuf parse failed: corrupt or "
                                   "truncated file)", what);
  if (!mp.has_graph())
    return errors::InvalidArgument("{}: not an ONNX model (no graph)", what);
  Importer imp;
  imp.what = what;
  imp.base_dir = base_dir;
  for (const auto& o : mp.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") imp.opset = o.version();
  }
  if (imp.opset == 0 && mp.opset_import_size() == 0) imp.opset = 1;
  // A model of training-domain ops only (ONNX's optimiser node tests) has no ai.onnx op to
  // rewrite: read it as the newest opset.
  if (imp.opset == 0)
    for (const auto& o : mp.opset_import())
      if (o.domain() == "ai.onnx.preview.training") imp.opset = kMaxOpset;
  if (imp.opset == 0)
    return errors::InvalidArgument("{}: the model imports no ai.onnx opset", what);
  if (imp.opset < kMinOpset || imp.opset > kMaxOpset)
    return errors::Unimplemented("{}: opset {} is not supported (supported: {} to {})", what,
                                 imp.opset, kMinOpset, kMaxOpset);
  // Lists built in loops and read at constant positions become the tensors they hold.
  resolve_static_sequences(mp.mutable_graph(), options.max_nodes);
  Model model;
  model.opset = imp.opset;
  model.ir_version = mp.ir_version();
  model.producer = mp.producer_name() + (mp.producer_version().empty() ? "" : " " + mp.producer_version());
  TD_ASSIGN_OR_RETURN(model.graph, imp.graph(mp.graph(), /*subgraph=*/false));
  if (options.check_ops) TD_RETURN_IF_ERROR(check_ops(model.graph, what));
  return model;
}

Result<Model> import_file(const std::string& path, const ImportOptions& options) {
  TD_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  const std::string dir = std::filesystem::path(path).parent_path().string();
  TD_ASSIGN_OR_RETURN(Model m, import_bytes(bytes, path, dir.empty() ? "." : dir, options));
  m.path = path;
  return m;
}

Result<HostTensor> parse_tensor(const std::string& bytes, const std::string& what) {
  pb::TensorProto t;
  if (!parse_proto(t, bytes))
    return errors::InvalidArgument("{}: not a valid onnx.TensorProto", what);
  Importer imp;
  imp.what = what;
  return imp.tensor(t);
}

Result<HostTensor> read_tensor_file(const std::string& path) {
  TD_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  return parse_tensor(bytes, path);
}

std::string serialize_tensor(const HostTensor& tensor, const std::string& name) {
  pb::TensorProto t;
  t.set_name(name);
  t.set_data_type(static_cast<int32_t>(tensor.dtype()));
  for (int64_t d : tensor.shape()) t.add_dims(d);
  t.set_raw_data(tensor.data(), tensor.nbytes());
  return t.SerializeAsString();
}

std::string out_of_scope_reason(const std::string& model_bytes) {
  pb::ModelProto mp;
  if (!parse_proto(mp, model_bytes)) return "";
  if (mp.has_graph()) resolve_static_sequences(mp.mutable_graph(), 0);  // as import_bytes does
  auto type_reason = [](const pb::TypeProto& t) -> std::string {
    switch (t.value_case()) {
      case pb::TypeProto::kSequenceType: return "sequence types are out of scope";
      case pb::TypeProto::kMapType: return "map types are out of scope";
      case pb::TypeProto::kOptionalType: return "optional types are out of scope";
      case pb::TypeProto::kSparseTensorType: return "sparse tensors are out of scope";
      case pb::TypeProto::kTensorType:
        if (t.tensor_type().elem_type() == pb::TensorProto::STRING) return "string tensors are out of scope";
        if (t.tensor_type().elem_type() == pb::TensorProto::COMPLEX64 ||
            t.tensor_type().elem_type() == pb::TensorProto::COMPLEX128)
          return "complex tensors are out of scope";
        return "";
      default: return "";
    }
  };
  std::function<std::string(const pb::GraphProto&)> walk = [&](const pb::GraphProto& g) -> std::string {
    for (const auto& v : g.input()) if (auto r = type_reason(v.type()); !r.empty()) return r;
    for (const auto& v : g.output()) if (auto r = type_reason(v.type()); !r.empty()) return r;
    for (const auto& v : g.value_info()) if (auto r = type_reason(v.type()); !r.empty()) return r;
    static const std::set<std::string> kOutOfScope = {
        "StringNormalizer", "RegexFullMatch", "StringConcat", "StringSplit", "TfIdfVectorizer",
        "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert",
        "SequenceLength", "SequenceMap", "SplitToSequence", "ConcatFromSequence", "Optional",
        "OptionalGetElement", "OptionalHasElement", "Gradient"};
    for (const auto& n : g.node()) {
      // The training domain's optimisers (Adagrad, Adam, Momentum) are graph ops; its Gradient
      // (a graph attribute naming values to differentiate) is not: see tensord/autodiff.h.
      if (kOutOfScope.count(n.op_type())) return n.op_type() + " is out of scope (strings, sequences, optional and the Gradient op)";
      for (const auto& a : n.attribute()) {
        if (a.type() == pb::AttributeProto::GRAPH) {
          if (auto r = walk(a.g()); !r.empty()) return r;
        }
        if (a.type() == pb::AttributeProto::TENSOR && a.t().data_type() == pb::TensorProto::STRING)
          return "string tensors are out of scope";
      }
    }
    return "";
  };
  return walk(mp.graph());
}

}  // namespace tensord::onnx
