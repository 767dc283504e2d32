#include "rpc/wire.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <grpc/grpc.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <mutex>
#include <utility>

#include "core/errors.h"
#include "core/text.h"

namespace tensord::rpc {

namespace {

// gRPC receives streamed bytes into buffers it mallocs per message and frees once they are
// copied out. glibc hands the free space at the top of a thread's arena back to the kernel
// (madvise) as soon as it exceeds trim_threshold (128 KiB by default), and maps buffers above
// mmap_threshold on their own, so every streamed MiB was page-faulted and zeroed afresh: on a
// 64 MiB gRPC read, faults, zeroing and TLB flushes were ~20% of the client's CPU time and the
// read ran at a fraction of the upload's speed. Fixed thresholds keep those buffers warm: up to
// glibc's largest mmap threshold (32 MiB) from the arenas, whose top is trimmed only past
// 128 MiB (more than gRPC's 64 MiB receive window holds). Process-wide, once, for a process
// using the client or the broker; TENSORD_MALLOC_TUNE=0 leaves malloc alone, and so does a
// GLIBC_TUNABLES that sets malloc's own settings.
void tune_malloc_for_streams() {
#ifdef __GLIBC__
  if (const char* off = std::getenv("TENSORD_MALLOC_TUNE"); off && std::strcmp(off, "0") == 0)
    return;
  if (const char* t = std::getenv("GLIBC_TUNABLES"); t && std::strstr(t, "glibc.malloc."))
    return;
  (void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
  (void)mallopt(M_TRIM_THRESHOLD, 128 << 20);
#endif
}

}  // namespace

void keep_grpc_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    tune_malloc_for_streams();
    grpc_init();
  });
}

grpc::Status to_grpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  // Messages quote what a client sent (names, values): bounded, so a huge name cannot make a
  // huge answer (node labels are clipped where they are made; this is the last guard).
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), clip_text(s.message(), 4096));
}

Status from_grpc(const grpc::Status& s) {
  if (s.ok()) return OkStatus();
  const int code = static_cast<int>(s.error_code());
  // Codes outside gRPC's range cannot come from a conforming peer; keep the number visible.
  if (code < 0 || code > static_cast<int>(StatusCode::kUnauthenticated))
    return Status(StatusCode::kUnknown,
                  "status code " + std::to_string(code) + ": " + s.error_message());
  return Status(static_cast<StatusCode>(code), s.error_message());
}

void to_proto(const DeviceInfo& src, v1::Device* dst) {
  dst->set_name(src.name);
  dst->set_kind(src.kind);
  dst->set_index(src.index);
  dst->set_vendor(src.vendor);
  dst->set_model(src.model);
  dst->set_memory_bytes(src.memory_bytes);
  dst->set_memory_in_use(src.memory_in_use);
  dst->set_backend(src.backend);
  dst->set_backend_version(src.backend_version);
  dst->set_threads(src.threads);
  dst->set_memory_peak(src.memory_peak);
  dst->set_driver_version(src.driver_version);
  dst->set_compute_units(src.compute_units);
  dst->set_fp16(src.fp16);
}

DeviceInfo from_proto(const v1::Device& src) {
  DeviceInfo d;
  d.name = src.name();
  d.kind = src.kind();
  d.index = src.index();
  d.vendor = src.vendor();
  d.model = src.model();
  d.memory_bytes = src.memory_bytes();
  d.memory_in_use = src.memory_in_use();
  d.backend = src.backend();
  d.backend_version = src.backend_version();
  d.threads = src.threads();
  d.memory_peak = src.memory_peak();
  d.driver_version = src.driver_version();
  d.compute_units = src.compute_units();
  d.fp16 = src.fp16();
  return d;
}

void to_proto(const TensorType& src, v1::TensorType* dst) {
  dst->set_dtype(static_cast<int32_t>(src.dtype));
  dst->mutable_shape()->Assign(src.shape.begin(), src.shape.end());
}

void to_proto(const ModelInfo& src, v1::ModelInfo* dst) {
  dst->set_name(src.name);
  dst->set_ready(src.ready);
  dst->set_reason(src.reason);
  dst->set_device(src.device);
  for (const auto* list : {&src.inputs, &src.outputs})
    for (const ValueInfo& v : *list) {
      v1::ValueInfo* d = list == &src.inputs ? dst->add_inputs() : dst->add_outputs();
      d->set_name(v.name);
      to_proto(v.type, d->mutable_type());
    }
  dst->set_weight_bytes(src.weight_bytes);
  dst->set_opset(src.opset);
  dst->set_ir_version(src.ir_version);
  dst->set_producer(src.producer);
}

ModelInfo from_proto(const v1::ModelInfo& src) {
  ModelInfo m;
  m.name = src.name();
  m.ready = src.ready();
  m.reason = src.reason();
  m.device = src.device();
  for (const auto* list : {&src.inputs(), &src.outputs()})
    for (const auto& v : *list) {
      ValueInfo vi;
      vi.name = v.name();
      auto type = from_proto(v.type());
      if (type.ok()) vi.type = *type;
      (list == &src.inputs() ? m.inputs : m.outputs).push_back(std::move(vi));
    }
  m.weight_bytes = src.weight_bytes();
  m.opset = src.opset();
  m.ir_version = src.ir_version();
  m.producer = src.producer();
  return m;
}

Result<TensorType> from_proto(const v1::TensorType& src) {
  TensorType t;
  if (src.dtype() != 0 && !dtype_is_valid(src.dtype()))
    return errors::InvalidArgument("invalid dtype {}", src.dtype());
  t.dtype = static_cast<DType>(src.dtype());
  for (int64_t d : src.shape()) {
    if (d < -1) return errors::InvalidArgument("invalid dimension {} in a tensor type", d);
    t.shape.push_back(d);
  }
  return t;
}

Result<int64_t> checked_wire_size(int32_t dtype,
                                  const google::protobuf::RepeatedField<int64_t>& shape,
                                  const char* what) {
  if (!dtype_is_valid(dtype)) return errors::InvalidArgument("{}: invalid dtype {}", what, dtype);
  Shape s(shape.begin(), shape.end());
  auto size = checked_byte_size(static_cast<DType>(dtype), s);
  if (!size.ok()) return size.status().with_context(what);
  return size;
}

void to_proto(const HostTensor& src, v1::Tensor* dst) {
  dst->set_dtype(static_cast<int32_t>(src.dtype()));
  dst->mutable_shape()->Assign(src.shape().begin(), src.shape().end());
  if (src.nbytes()) dst->set_data(src.data(), src.nbytes());
}

Result<HostTensor> from_proto(const v1::Tensor& src) {
  if (src.dtype() == 0 && src.shape().empty() && src.data().empty()) return HostTensor();
  TD_ASSIGN_OR_RETURN(int64_t size, checked_wire_size(src.dtype(), src.shape(), "tensor"));
  if (static_cast<size_t>(size) != src.data().size())
    return errors::InvalidArgument("tensor {}{} needs {} bytes, the message carries {}",
                                   dtype_name(static_cast<DType>(src.dtype())),
                                   shape_to_string(Shape(src.shape().begin(), src.shape().end())),
                                   size, src.data().size());
  return HostTensor::from_bytes(static_cast<DType>(src.dtype()),
                                Shape(src.shape().begin(), src.shape().end()), src.data().data(),
                                src.data().size());
}

namespace {

void attr_to_proto(const Attribute& src, v1::Attribute* dst) {
  const auto& v = src.value();
  switch (src.kind()) {
    case Attribute::Kind::kInt:
      dst->set_i(std::get<int64_t>(v));
      break;
    case Attribute::Kind::kFloat:
      dst->set_f(std::get<float>(v));
      break;
    case Attribute::Kind::kString:
      dst->set_s(std::get<std::string>(v));
      break;
    case Attribute::Kind::kInts: {
      const auto& xs = std::get<std::vector<int64_t>>(v);
      dst->mutable_ints()->mutable_values()->Assign(xs.begin(), xs.end());
      break;
    }
    case Attribute::Kind::kFloats: {
      const auto& xs = std::get<std::vector<float>>(v);
      dst->mutable_floats()->mutable_values()->Assign(xs.begin(), xs.end());
      break;
    }
    case Attribute::Kind::kStrings:
      for (const auto& s : std::get<std::vector<std::string>>(v))
        dst->mutable_strings()->add_values(s);
      break;
    case Attribute::Kind::kTensor:
      to_proto(std::get<HostTensor>(v), dst->mutable_tensor());
      break;
    case Attribute::Kind::kGraph: {
      const auto& g = std::get<std::shared_ptr<const Graph>>(v);
      if (g) {
        to_proto(*g, dst->mutable_graph());
      } else {
        dst->mutable_graph();  // a null subgraph travels as an empty one
      }
      break;
    }
  }
}

// What a graph from the wire may hold in all, counted over its subgraphs as it is read.
struct GraphBudget {
  GraphLimits limits;
  int64_t nodes = 0;
};

Result<Graph> graph_from_proto(const v1::Graph& src, GraphBudget& budget, int depth);

Result<Attribute> attr_from_proto(const v1::Attribute& src, const std::string& where,
                                  GraphBudget& budget, int depth) {
  switch (src.value_case()) {
    case v1::Attribute::kI:
      return Attribute(src.i());
    case v1::Attribute::kF:
      return Attribute(src.f());
    case v1::Attribute::kS:
      return Attribute(src.s());
    case v1::Attribute::kInts:
      return Attribute(
          std::vector<int64_t>(src.ints().values().begin(), src.ints().values().end()));
    case v1::Attribute::kFloats:
      return Attribute(
          std::vector<float>(src.floats().values().begin(), src.floats().values().end()));
    case v1::Attribute::kStrings:
      return Attribute(
          std::vector<std::string>(src.strings().values().begin(), src.strings().values().end()));
    case v1::Attribute::kTensor: {
      auto t = from_proto(src.tensor());
      if (!t.ok()) return t.status().with_context(where);
      return Attribute(std::move(t).value());
    }
    case v1::Attribute::kGraph: {
      auto g = graph_from_proto(src.graph(), budget, depth + 1);
      if (!g.ok()) return g.status().with_context(where);
      return Attribute(std::shared_ptr<const Graph>(std::make_shared<Graph>(std::move(g).value())));
    }
    case v1::Attribute::VALUE_NOT_SET:
      break;
  }
  return errors::InvalidArgument("{}: the attribute has no value", where);
}

Result<ValueInfo> value_info_from_proto(const v1::ValueInfo& src, const char* what) {
  auto t = from_proto(src.type());
  if (!t.ok()) return t.status().with_context(fmt::format("graph {} '{}'", what, src.name()));
  return ValueInfo{src.name(), std::move(t).value()};
}

}  // namespace

void to_proto(const Graph& src, v1::Graph* dst) {
  dst->set_name(src.name);
  for (const auto& v : src.inputs) {
    auto* p = dst->add_inputs();
    p->set_name(v.name);
    to_proto(v.type, p->mutable_type());
  }
  for (const auto& v : src.outputs) {
    auto* p = dst->add_outputs();
    p->set_name(v.name);
    to_proto(v.type, p->mutable_type());
  }
  for (const auto& n : src.nodes) {
    auto* p = dst->add_nodes();
    p->set_name(n.name);
    p->set_op(n.op);
    p->set_domain(n.domain);
    for (const auto& i : n.inputs) p->add_inputs(i);
    for (const auto& o : n.outputs) p->add_outputs(o);
    auto* attrs = p->mutable_attrs();
    for (const auto& [name, a] : n.attrs) attr_to_proto(a, &(*attrs)[name]);
  }
  auto* inits = dst->mutable_initializers();
  for (const auto& [name, t] : src.initializers) to_proto(t, &(*inits)[name]);
}

Result<Graph> from_proto(const v1::Graph& src, const GraphLimits& limits) {
  GraphBudget budget{limits};
  return graph_from_proto(src, budget, 0);
}

namespace {

Result<Graph> graph_from_proto(const v1::Graph& src, GraphBudget& budget, int depth) {
  if (depth > budget.limits.max_depth)
    return errors::InvalidArgument(
        "graph: subgraphs (If/Loop/Scan bodies) are nested more than {} deep (the broker's limit)",
        budget.limits.max_depth);
  budget.nodes += src.nodes_size();
  if (budget.nodes > budget.limits.max_nodes)
    return errors::InvalidArgument(
        "graph: more than {} nodes in all, subgraphs included (the broker's limit)",
        budget.limits.max_nodes);
  Graph g;
  g.name = src.name();
  for (const auto& v : src.inputs()) {
    TD_ASSIGN_OR_RETURN(auto vi, value_info_from_proto(v, "input"));
    g.inputs.push_back(std::move(vi));
  }
  for (const auto& v : src.outputs()) {
    TD_ASSIGN_OR_RETURN(auto vi, value_info_from_proto(v, "output"));
    g.outputs.push_back(std::move(vi));
  }
  g.nodes.reserve(static_cast<size_t>(src.nodes_size()));
  for (const auto& p : src.nodes()) {
    Node n;
    n.name = p.name();
    n.op = p.op();
    n.domain = p.domain();
    n.inputs.assign(p.inputs().begin(), p.inputs().end());
    n.outputs.assign(p.outputs().begin(), p.outputs().end());
    const std::string label = n.label();
    for (const auto& [name, a] : p.attrs()) {
      TD_ASSIGN_OR_RETURN(auto attr,
                          attr_from_proto(a, fmt::format("{}: attribute '{}'", label, name),
                                          budget, depth));
      n.attrs.emplace(name, std::move(attr));
    }
    g.nodes.push_back(std::move(n));
  }
  for (const auto& [name, t] : src.initializers()) {
    auto v = from_proto(t);
    if (!v.ok()) return v.status().with_context(fmt::format("initializer '{}'", name));
    g.initializers.emplace(name, std::move(v).value());
  }
  return g;
}

}  // namespace

namespace {
Status check_graph_limits(const Graph& g, const GraphLimits& limits, int depth, int64_t& nodes) {
  if (depth > limits.max_depth)
    return errors::InvalidArgument(
        "graph: subgraphs (If/Loop/Scan bodies) are nested more than {} deep (the broker's limit)",
        limits.max_depth);
  nodes += static_cast<int64_t>(g.nodes.size());
  if (nodes > limits.max_nodes)
    return errors::InvalidArgument(
        "graph: more than {} nodes in all, subgraphs included (the broker's limit)",
        limits.max_nodes);
  for (const Node& n : g.nodes)
    for (const auto& [k, a] : n.attrs)
      if (const auto* sub = std::get_if<std::shared_ptr<const Graph>>(&a.value()); sub && *sub)
        TD_RETURN_IF_ERROR(check_graph_limits(**sub, limits, depth + 1, nodes));
  return OkStatus();
}
}  // namespace

Status check_graph_limits(const Graph& graph, const GraphLimits& limits) {
  int64_t nodes = 0;
  return check_graph_limits(graph, limits, 0, nodes);
}

void to_proto(const ForeignMemory& src, const std::string& host_id, v1::CudaIpcMemory* dst) {
  dst->set_handle(src.ipc_handle);
  dst->set_offset(static_cast<int64_t>(src.offset));
  dst->set_size(static_cast<int64_t>(src.size));
  dst->set_device_uuid(src.device_uuid);
  dst->set_host_id(host_id);
}

Result<ForeignMemory> from_proto(const v1::CudaIpcMemory& src) {
  constexpr size_t kHandleBytes = 64;  // CU_IPC_HANDLE_SIZE
  if (src.handle().size() != kHandleBytes)
    return errors::InvalidArgument("CUDA IPC: a memory handle has {} bytes, not {}", src.handle().size(),
                                   kHandleBytes);
  if (src.offset() < 0 || src.size() < 0)
    return errors::InvalidArgument("CUDA IPC: offset {} and size {} must not be negative", src.offset(),
                                   src.size());
  if (src.device_uuid().size() > 64)
    return errors::InvalidArgument("CUDA IPC: a device UUID of {} characters", src.device_uuid().size());
  ForeignMemory m;
  m.kind = "cuda";
  m.ipc_handle = src.handle();
  m.offset = static_cast<uint64_t>(src.offset());
  m.size = static_cast<uint64_t>(src.size());
  m.device_uuid = src.device_uuid();
  return m;
}

std::string host_boot_id() {
  std::string id;
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof buf, f)) id = buf;
    std::fclose(f);
  }
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

}  // namespace tensord::rpc
