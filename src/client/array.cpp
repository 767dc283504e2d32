#include "tensord/array.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/errors.h"
#include "core/op_registry.h"
#include "tensord/autodiff.h"

namespace tensord {
namespace detail {

struct PendingNode {
  std::string op;
  std::string domain;  // "" (ONNX) or e.g. "tensord" (op_type "tensord.Cholesky")
  AttributeMap attrs;
  std::vector<std::shared_ptr<ArrayImpl>> inputs;  // null: omitted optional input
  std::vector<std::weak_ptr<ArrayImpl>> outputs;
  std::string device;
};

// One Array value. Exactly one of: an error, a small host constant (embedded into graphs as
// an initializer, never uploaded on its own), a pending node output, or an engine handle.
struct ArrayImpl {
  std::shared_ptr<Context> ctx;
  TensorType type;
  std::string device;
  Status error;
  std::atomic<int> user_refs{0};  // Arrays (not graph nodes) referring to this value
  TensorHandle handle = 0;
  std::shared_ptr<PendingNode> node;
  int output_index = 0;
  std::optional<HostTensor> constant;

  ~ArrayImpl() {
    if (handle && ctx) (void)ctx->client().release(handle);
  }
  bool pending() const { return node != nullptr; }
};

}  // namespace detail

using detail::ArrayImpl;
using detail::PendingNode;

struct Context::State {
  std::mutex mu;
  std::atomic<int64_t> flushes{0};
  // Device names already checked by an embedded constant (so `x * 2` against a broker costs
  // no ListDevices round trip after the first).
  std::mutex devices_mu;
  std::unordered_set<std::string> known_devices;
};

namespace {

// User data up to this many elements is embedded in the graphs that use it instead of being
// uploaded, so scalars cost no round trip. Larger data is uploaded: embedded values are part
// of the executable cache key, so embedding data would recompile for every new input.
// Structural parameters (shapes, axes, the scalars of `x * 2`) are always embedded, so shape
// inference at record time sees their values.
constexpr int64_t kEmbedLimit = 1;

HostTensor filled(DType dtype, const Shape& shape, double value) {
  HostTensor t(dtype, shape);
  const int64_t n = t.numel();
  void* p = t.mutable_data();
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::kFloat32: static_cast<float*>(p)[i] = static_cast<float>(value); break;
      case DType::kFloat64: static_cast<double*>(p)[i] = value; break;
      case DType::kFloat16: static_cast<uint16_t*>(p)[i] = float_to_half(static_cast<float>(value)); break;
      case DType::kBFloat16: static_cast<uint16_t*>(p)[i] = float_to_bfloat16(static_cast<float>(value)); break;
      case DType::kInt8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(value); break;
      case DType::kUInt8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(value); break;
      case DType::kInt16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(value); break;
      case DType::kUInt16: static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(value); break;
      case DType::kInt32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(value); break;
      case DType::kUInt32: static_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(value); break;
      case DType::kInt64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(value); break;
      case DType::kUInt64: static_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(value); break;
      case DType::kBool: static_cast<bool*>(p)[i] = value != 0; break;
      case DType::kUndefined: break;
    }
  }
  return t;
}

std::shared_ptr<ArrayImpl> make_error_impl(std::shared_ptr<Context> ctx, Status s) {
  auto impl = std::make_shared<ArrayImpl>();
  impl->ctx = std::move(ctx);
  impl->error = std::move(s);
  return impl;
}

Result<std::shared_ptr<Context>> resolve_context(std::shared_ptr<Context> ctx) {
  if (ctx) return ctx;
  return Context::default_context();
}

Status flush_locked(const std::shared_ptr<ArrayImpl>& target);
Status flush_many_locked(const std::vector<std::shared_ptr<ArrayImpl>>& targets);

// Materialises `target` (and every pending Array still referenced by the user among its
// ancestors) with one execute per device. Caller holds the context's lock.
Status flush_locked(const std::shared_ptr<ArrayImpl>& target) {
  return flush_many_locked({target});
}

// The same for several targets on one device, in one graph (one execute).
Status flush_many_locked(const std::vector<std::shared_ptr<ArrayImpl>>& targets) {
  std::vector<std::shared_ptr<ArrayImpl>> pend;
  for (const auto& t : targets)
    if (t && t->pending()) pend.push_back(t);
  if (pend.empty()) return OkStatus();
  const std::shared_ptr<ArrayImpl>& target = pend[0];
  const std::string device = target->device;
  std::vector<PendingNode*> order;
  std::unordered_set<PendingNode*> visited;
  Status status;
  std::function<void(const std::shared_ptr<ArrayImpl>&)> visit =
      [&](const std::shared_ptr<ArrayImpl>& a) {
        if (!status.ok() || !a || !a->pending()) return;
        PendingNode* n = a->node.get();
        if (!visited.insert(n).second) return;
        for (const auto& in : n->inputs) {
          if (in && in->pending() && in->device != device) {
            status = flush_locked(in);  // another device's part runs as its own graph first
            if (!status.ok()) return;
          } else {
            visit(in);
          }
        }
        order.push_back(n);
      };
  for (const auto& t : pend) {
    if (t->device == device) {
      visit(t);
    } else if (status.ok()) {
      status = flush_locked(t);
    }
  }
  TD_RETURN_IF_ERROR(status);
  std::unordered_set<const ArrayImpl*> wanted;
  for (const auto& t : pend) wanted.insert(t.get());

  Graph g;
  std::vector<TensorHandle> bound;
  std::unordered_map<const ArrayImpl*, std::string> names;
  int counter = 0;
  auto name_of = [&](const std::shared_ptr<ArrayImpl>& a) -> std::string {
    if (!a) return "";
    auto it = names.find(a.get());
    if (it != names.end()) return it->second;
    std::string name;
    if (a->handle) {
      name = "i" + std::to_string(g.inputs.size());
      g.inputs.push_back({name, a->type});
      bound.push_back(a->handle);
    } else if (a->constant) {
      name = "c" + std::to_string(g.initializers.size());
      g.initializers.emplace(name, *a->constant);
    }
    names.emplace(a.get(), name);
    return name;
  };
  std::vector<std::shared_ptr<ArrayImpl>> out_arrays;
  for (PendingNode* n : order) {
    Node node;
    node.op = n->op;
    node.domain = n->domain;
    node.attrs = n->attrs;
    for (const auto& in : n->inputs) node.inputs.push_back(name_of(in));
    for (size_t k = 0; k < n->outputs.size(); ++k) {
      std::string name = "v" + std::to_string(counter++);
      node.outputs.push_back(name);
      if (auto a = n->outputs[k].lock()) {
        names[a.get()] = name;
        if (wanted.count(a.get()) || a->user_refs.load() > 0) {
          g.outputs.push_back({name, a->type});
          out_arrays.push_back(std::move(a));
        }
      }
    }
    g.nodes.push_back(std::move(node));
  }
  Context& ctx = *target->ctx;
  TD_ASSIGN_OR_RETURN(auto handles, ctx.client().execute(g, bound, device));
  ctx.state().flushes++;
  for (size_t i = 0; i < out_arrays.size() && i < handles.size(); ++i) {
    out_arrays[i]->handle = handles[i];
    out_arrays[i]->node.reset();
  }
  return OkStatus();
}

Status flush(const std::shared_ptr<ArrayImpl>& impl) {
  if (!impl) return errors::InvalidArgument("empty Array");
  if (!impl->error.ok()) return impl->error;
  if (!impl->pending()) return OkStatus();
  std::lock_guard<std::mutex> lock(impl->ctx->state().mu);
  return flush_locked(impl);
}

}  // namespace

// ---------------------------------------------------------------- Context

Context::Context(std::shared_ptr<Client> client)
    : client_(std::move(client)), state_(std::make_unique<State>()) {}
Context::~Context() = default;

int64_t Context::flushes() const { return state_->flushes.load(); }

Result<std::shared_ptr<Context>> Context::default_context() {
  static std::mutex mu;
  static std::shared_ptr<Context> ctx;
  std::lock_guard<std::mutex> lock(mu);
  if (!ctx) {
    TD_ASSIGN_OR_RETURN(auto client, connect());
    ctx = std::make_shared<Context>(std::shared_ptr<Client>(std::move(client)));
  }
  return ctx;
}

// ---------------------------------------------------------------- Array basics

Array::Array() = default;
Array::Array(std::shared_ptr<ArrayImpl> impl) : impl_(std::move(impl)) {
  if (impl_) impl_->user_refs++;
}
Array::Array(const Array& other) : impl_(other.impl_) {
  if (impl_) impl_->user_refs++;
}
Array::Array(Array&& other) noexcept : impl_(std::move(other.impl_)) {}
Array& Array::operator=(const Array& other) {
  if (this != &other) {
    if (impl_) impl_->user_refs--;
    impl_ = other.impl_;
    if (impl_) impl_->user_refs++;
  }
  return *this;
}
Array& Array::operator=(Array&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->user_refs--;
    impl_ = std::move(other.impl_);
  }
  return *this;
}
Array::~Array() {
  if (impl_) impl_->user_refs--;
}

Array Array::error_array(Status status) { return Array(make_error_impl(nullptr, std::move(status))); }

namespace {
// Why a client has no default device: TENSORD_DEVICE names one it does not have, or
// TENSORD_DEVICES left none.
Status no_default_device(Client& client) {
  std::string names;
  if (auto devices = client.devices(); devices.ok())
    for (const auto& d : *devices) names += (names.empty() ? "" : ", ") + d.name;
  if (const char* want = std::getenv("TENSORD_DEVICE"); want && *want && !names.empty())
    return errors::InvalidArgument(
        "no device for a new array: the default device '{}' (TENSORD_DEVICE) is not available "
        "(devices: {})",
        want, names);
  return errors::NotFound("no device available for a new array (check TENSORD_DEVICES{})",
                          names.empty() ? "" : "; devices: " + names);
}

Array make_array(const HostTensor& value, const std::string& device,
                 std::shared_ptr<Context> ctx_in, bool embed);
}  // namespace

Array Array::from_host(const HostTensor& value, const std::string& device,
                       std::shared_ptr<Context> ctx_in) {
  return make_array(value, device, std::move(ctx_in), value.numel() <= kEmbedLimit);
}

namespace {
Array make_array(const HostTensor& value, const std::string& device,
                 std::shared_ptr<Context> ctx_in, bool embed) {
  auto ctx = resolve_context(std::move(ctx_in));
  if (!ctx.ok()) return Array::error_array(ctx.status());
  std::string dev = device.empty() ? (*ctx)->client().default_device() : device;
  if (dev.empty()) return Array(make_error_impl(*ctx, no_default_device((*ctx)->client())));
  auto impl = std::make_shared<ArrayImpl>();
  impl->ctx = *ctx;
  impl->type = value.type();
  impl->device = dev;
  if (embed) {
    // Still validate the device now, so a typo fails at the call that made it.
    Context::State& st = (*ctx)->state();
    bool known;
    {
      std::lock_guard<std::mutex> lock(st.devices_mu);
      known = st.known_devices.count(dev) > 0;
    }
    if (!known) {
      auto devices = (*ctx)->client().devices();
      if (!devices.ok()) return Array(make_error_impl(*ctx, devices.status()));
      bool found = false;
      for (const auto& d : *devices) found |= d.name == dev;
      if (!found)
        return Array(make_error_impl(*ctx, errors::NotFound("device '{}' is not available", dev)));
      std::lock_guard<std::mutex> lock(st.devices_mu);
      st.known_devices.insert(dev);
    }
    impl->constant = value;
  } else {
    auto h = (*ctx)->client().upload(value.view(), dev);
    if (!h.ok()) return Array(make_error_impl(*ctx, h.status()));
    impl->handle = *h;
  }
  return Array(std::move(impl));
}
}  // namespace

Array Array::constant(const HostTensor& value, const std::string& device,
                      std::shared_ptr<Context> ctx) {
  return make_array(value, device, std::move(ctx), /*embed=*/true);
}

Array Array::scalar(double value, DType dtype, const std::string& device,
                    std::shared_ptr<Context> ctx) {
  return from_host(filled(dtype, {}, value), device, std::move(ctx));
}
Array Array::full(const Shape& shape, double value, DType dtype, const std::string& device,
                  std::shared_ptr<Context> ctx) {
  auto size = checked_byte_size(dtype, shape);
  if (!size.ok()) return error_array(size.status());
  return from_host(filled(dtype, shape, value), device, std::move(ctx));
}
Array Array::zeros(const Shape& shape, DType dtype, const std::string& device,
                   std::shared_ptr<Context> ctx) {
  return full(shape, 0.0, dtype, device, std::move(ctx));
}
Array Array::ones(const Shape& shape, DType dtype, const std::string& device,
                  std::shared_ptr<Context> ctx) {
  return full(shape, 1.0, dtype, device, std::move(ctx));
}

Status Array::status() const {
  if (!impl_) return errors::InvalidArgument("empty Array");
  return impl_->error;
}
DType Array::dtype() const { return impl_ ? impl_->type.dtype : DType::kUndefined; }
std::string Array::device() const { return impl_ ? impl_->device : std::string(); }

Result<Shape> Array::shape() const {
  TD_RETURN_IF_ERROR(status());
  if (shape_is_static(impl_->type.shape)) return impl_->type.shape;
  TD_RETURN_IF_ERROR(eval());
  TD_ASSIGN_OR_RETURN(TensorInfo info, impl_->ctx->client().info(impl_->handle));
  return info.type.shape;
}

Status Array::eval() const {
  TD_RETURN_IF_ERROR(flush(impl_));
  if (impl_->constant) return OkStatus();
  return impl_->ctx->client().wait(impl_->handle);
}

Status eval(const std::vector<Array>& arrays) {
  std::vector<std::shared_ptr<ArrayImpl>> impls;
  for (const Array& a : arrays) {
    if (!a.impl()) return errors::InvalidArgument("eval: empty Array");
    if (!a.impl()->error.ok()) return a.impl()->error;
    if (!impls.empty() && a.impl()->ctx != impls[0]->ctx)
      return errors::InvalidArgument("eval: arrays of different contexts");
    impls.push_back(a.impl());
  }
  if (impls.empty()) return OkStatus();
  {
    std::lock_guard<std::mutex> lock(impls[0]->ctx->state().mu);
    TD_RETURN_IF_ERROR(flush_many_locked(impls));
  }
  for (const Array& a : arrays) TD_RETURN_IF_ERROR(a.eval());
  return OkStatus();
}

Result<HostTensor> Array::to_host() const {
  TD_RETURN_IF_ERROR(flush(impl_));
  if (impl_->constant) return *impl_->constant;
  return impl_->ctx->client().read(impl_->handle);
}

Result<TensorType> Array::read_into(void* dst, size_t room) const {
  TD_RETURN_IF_ERROR(flush(impl_));
  if (impl_->constant) {
    const HostTensor& c = *impl_->constant;
    if (c.nbytes() == 0 || c.nbytes() > room) return c.type();
    if (!dst) return errors::InvalidArgument("read_into: no destination for {} bytes", c.nbytes());
    std::memcpy(dst, c.data(), c.nbytes());
    return c.type();
  }
  return impl_->ctx->client().read_into(impl_->handle, dst, room);
}

Array Array::from_handle(std::shared_ptr<Context> ctx, TensorHandle handle,
                         const TensorType& type, const std::string& device) {
  if (!ctx) return error_array(errors::InvalidArgument("from_handle: no context"));
  auto impl = std::make_shared<ArrayImpl>();
  impl->ctx = std::move(ctx);
  impl->type = type;
  impl->device = device;
  impl->handle = handle;
  return Array(std::move(impl));
}

Result<TensorHandle> Array::handle() const {
  TD_RETURN_IF_ERROR(flush(impl_));
  if (impl_->constant) {
    std::lock_guard<std::mutex> lock(impl_->ctx->state().mu);
    if (impl_->constant) {
      TD_ASSIGN_OR_RETURN(TensorHandle h,
                          impl_->ctx->client().upload(impl_->constant->view(), impl_->device));
      impl_->handle = h;
      impl_->constant.reset();
    }
  }
  return impl_->handle;
}

std::shared_ptr<Context> Array::context() const { return impl_ ? impl_->ctx : nullptr; }

Array Array::to(const std::string& device) const {
  Status s = flush(impl_);
  if (!s.ok()) return Array(make_error_impl(impl_ ? impl_->ctx : nullptr, s));
  if (impl_->constant) return from_host(*impl_->constant, device, impl_->ctx);
  auto h = impl_->ctx->client().copy(impl_->handle, device);
  if (!h.ok()) return Array(make_error_impl(impl_->ctx, h.status()));
  auto impl = std::make_shared<ArrayImpl>();
  impl->ctx = impl_->ctx;
  impl->type = impl_->type;
  impl->device = device;
  impl->handle = *h;
  return Array(std::move(impl));
}

// ---------------------------------------------------------------- recording

std::vector<Array> Array::op(const std::string& op_type, const std::vector<Array>& inputs,
                             AttributeMap attrs, int num_outputs) {
  auto fail = [&](std::shared_ptr<Context> ctx, Status s) {
    std::vector<Array> out;
    for (int i = 0; i < std::max(num_outputs, 1); ++i) out.emplace_back(make_error_impl(ctx, s));
    return out;
  };
  std::shared_ptr<Context> ctx;
  std::string device, constant_device;
  for (const Array& a : inputs) {
    if (!a.impl_) continue;
    if (!a.impl_->error.ok()) return fail(a.impl_->ctx, a.impl_->error);
    if (!ctx) ctx = a.impl_->ctx;
    if (a.impl_->ctx != ctx)
      return fail(ctx, errors::InvalidArgument("{}: inputs belong to different contexts", op_type));
    // Runs where its first device-resident input lives; embedded constants follow it.
    if (a.impl_->constant) {
      if (constant_device.empty()) constant_device = a.impl_->device;
    } else if (device.empty()) {
      device = a.impl_->device;
    }
  }
  if (!ctx) {
    auto c = Context::default_context();
    if (!c.ok()) return fail(nullptr, c.status());
    ctx = *c;
  }
  if (device.empty()) device = constant_device;
  if (device.empty()) device = ctx->client().default_device();

  // Inference now, so shapes are known without running and bad calls fail here.
  // "domain.Op" names an op outside ONNX's default domain: "tensord.Cholesky" (the linalg ops of
  // src/core/ops/linalg.cpp).
  Node node;
  const size_t dot = op_type.rfind('.');
  node.op = dot == std::string::npos ? op_type : op_type.substr(dot + 1);
  if (dot != std::string::npos) node.domain = op_type.substr(0, dot);
  node.attrs = std::move(attrs);
  std::vector<TensorType> types;
  std::vector<TensorView> value_storage(inputs.size());
  std::vector<const TensorView*> values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& impl = inputs[i].impl_;
    node.inputs.push_back(impl ? "x" + std::to_string(i) : "");
    types.push_back(impl ? impl->type : TensorType{});
    if (impl && impl->constant) {
      value_storage[i] = impl->constant->view();
      values.push_back(&value_storage[i]);
    } else {
      values.push_back(nullptr);
    }
  }
  for (int k = 0; k < num_outputs; ++k) node.outputs.push_back("y" + std::to_string(k));
  InferenceContext ictx(node, types, values);
  Status s = infer_node(OpRegistry::global(), ictx);
  if (!s.ok()) return fail(ctx, s);

  auto pending = std::make_shared<PendingNode>();
  pending->op = node.op;
  pending->domain = node.domain;
  pending->attrs = std::move(node.attrs);
  pending->device = device;
  for (const Array& a : inputs) pending->inputs.push_back(a.impl_);
  std::vector<Array> out;
  for (int k = 0; k < num_outputs; ++k) {
    auto impl = std::make_shared<ArrayImpl>();
    impl->ctx = ctx;
    impl->type = ictx.output_types()[static_cast<size_t>(k)];
    impl->device = device;
    impl->node = pending;
    impl->output_index = k;
    pending->outputs.push_back(impl);
    out.emplace_back(std::move(impl));
  }
  return out;
}

namespace {
Array op1(const std::string& op, const std::vector<Array>& in, AttributeMap attrs = {}) {
  return Array::op(op, in, std::move(attrs), 1)[0];
}
Array like(const Array& a, double v) {
  return make_array(filled(a.dtype() == DType::kUndefined ? DType::kFloat32 : a.dtype(), {}, v),
                    a.device(), a.impl() ? a.impl()->ctx : nullptr, /*embed=*/true);
}
Array ints_const(const Array& like_ctx, const std::vector<int64_t>& v) {
  return make_array(HostTensor::from_vector(v, {static_cast<int64_t>(v.size())}),
                    like_ctx.device(), like_ctx.impl() ? like_ctx.impl()->ctx : nullptr,
                    /*embed=*/true);
}
}  // namespace

Array Array::operator-() const { return op1("Neg", {*this}); }
Array Array::matmul(const Array& o) const { return op1("MatMul", {*this, o}); }
Array Array::pow(const Array& e) const { return op1("Pow", {*this, e}); }
Array Array::equal(const Array& o) const { return op1("Equal", {*this, o}); }
Array Array::less(const Array& o) const { return op1("Less", {*this, o}); }
Array Array::greater(const Array& o) const { return op1("Greater", {*this, o}); }
Array Array::abs() const { return op1("Abs", {*this}); }
Array Array::exp() const { return op1("Exp", {*this}); }
Array Array::log() const { return op1("Log", {*this}); }
Array Array::sqrt() const { return op1("Sqrt", {*this}); }
Array Array::reciprocal() const { return op1("Reciprocal", {*this}); }
Array Array::floor() const { return op1("Floor", {*this}); }
Array Array::ceil() const { return op1("Ceil", {*this}); }
Array Array::relu() const { return op1("Relu", {*this}); }
Array Array::sigmoid() const { return op1("Sigmoid", {*this}); }
Array Array::tanh() const { return op1("Tanh", {*this}); }
Array Array::clip(double lo, double hi) const {
  return op1("Clip", {*this, like(*this, lo), like(*this, hi)});
}
Array Array::softmax(int64_t axis) const { return op1("Softmax", {*this}, {{"axis", axis}}); }
Array Array::cast(DType dtype) const {
  return op1("Cast", {*this}, {{"to", static_cast<int64_t>(dtype)}});
}
Array Array::reshape(const Shape& shape) const {
  return op1("Reshape", {*this, ints_const(*this, shape)});
}
Array Array::transpose(const std::vector<int64_t>& perm) const {
  AttributeMap a;
  if (!perm.empty()) a["perm"] = perm;
  return op1("Transpose", {*this}, a);
}
Array Array::flatten(int64_t axis) const { return op1("Flatten", {*this}, {{"axis", axis}}); }
Array Array::squeeze(const std::vector<int64_t>& axes) const {
  if (axes.empty()) return op1("Squeeze", {*this});
  return op1("Squeeze", {*this, ints_const(*this, axes)});
}
Array Array::unsqueeze(const std::vector<int64_t>& axes) const {
  return op1("Unsqueeze", {*this, ints_const(*this, axes)});
}
Array Array::slice(const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                   const std::vector<int64_t>& axes, const std::vector<int64_t>& steps) const {
  std::vector<Array> in{*this, ints_const(*this, starts), ints_const(*this, ends)};
  if (!axes.empty() || !steps.empty()) {
    std::vector<int64_t> ax = axes;
    if (ax.empty())
      for (size_t i = 0; i < starts.size(); ++i) ax.push_back(static_cast<int64_t>(i));
    in.push_back(ints_const(*this, ax));
  }
  if (!steps.empty()) in.push_back(ints_const(*this, steps));
  return op1("Slice", in);
}
Array Array::gather(const Array& indices, int64_t axis) const {
  return op1("Gather", {*this, indices}, {{"axis", axis}});
}

Array Array::sum(const std::vector<int64_t>& axes, bool keepdims) const {
  std::vector<Array> in{*this};
  if (!axes.empty()) in.push_back(ints_const(*this, axes));
  return op1("ReduceSum", in, {{"keepdims", int64_t{keepdims}}});
}
namespace {
Array reduce_attr(const std::string& op, const Array& a, const std::vector<int64_t>& axes,
                  bool keepdims) {
  AttributeMap attrs{{"keepdims", int64_t{keepdims}}};
  if (!axes.empty()) attrs["axes"] = axes;
  return op1(op, {a}, attrs);
}
}  // namespace
Array Array::mean(const std::vector<int64_t>& axes, bool keepdims) const {
  return reduce_attr("ReduceMean", *this, axes, keepdims);
}
Array Array::max(const std::vector<int64_t>& axes, bool keepdims) const {
  return reduce_attr("ReduceMax", *this, axes, keepdims);
}
Array Array::min(const std::vector<int64_t>& axes, bool keepdims) const {
  return reduce_attr("ReduceMin", *this, axes, keepdims);
}
Array Array::argmax(int64_t axis, bool keepdims) const {
  return op1("ArgMax", {*this}, {{"axis", axis}, {"keepdims", int64_t{keepdims}}});
}

Array operator+(const Array& a, const Array& b) { return op1("Add", {a, b}); }
Array operator-(const Array& a, const Array& b) { return op1("Sub", {a, b}); }
Array operator*(const Array& a, const Array& b) { return op1("Mul", {a, b}); }
Array operator/(const Array& a, const Array& b) { return op1("Div", {a, b}); }
Array operator+(const Array& a, double b) { return a + like(a, b); }
Array operator-(const Array& a, double b) { return a - like(a, b); }
Array operator*(const Array& a, double b) { return a * like(a, b); }
Array operator/(const Array& a, double b) { return a / like(a, b); }
Array operator+(double a, const Array& b) { return like(b, a) + b; }
Array operator-(double a, const Array& b) { return like(b, a) - b; }
Array operator*(double a, const Array& b) { return like(b, a) * b; }
Array operator/(double a, const Array& b) { return like(b, a) / b; }

Array matmul(const Array& a, const Array& b) { return a.matmul(b); }
Array gemm(const Array& a, const Array& b, const Array& c, float alpha, float beta, bool trans_a,
           bool trans_b) {
  std::vector<Array> in{a, b};
  if (c.valid()) in.push_back(c);
  return op1("Gemm", in,
             {{"alpha", alpha}, {"beta", beta}, {"transA", int64_t{trans_a}},
              {"transB", int64_t{trans_b}}});
}
Array concat(const std::vector<Array>& arrays, int64_t axis) {
  return op1("Concat", arrays, {{"axis", axis}});
}
Array where(const Array& c, const Array& x, const Array& y) { return op1("Where", {c, x, y}); }
Array conv(const Array& x, const Array& w, const Array& bias, const ConvOptions& o) {
  AttributeMap attrs{{"group", o.group}};
  if (!o.strides.empty()) attrs["strides"] = o.strides;
  if (!o.pads.empty()) attrs["pads"] = o.pads;
  if (!o.dilations.empty()) attrs["dilations"] = o.dilations;
  std::vector<Array> in{x, w};
  if (bias.valid()) in.push_back(bias);
  return op1("Conv", in, attrs);
}
namespace {
AttributeMap pool_attrs(const PoolOptions& o) {
  AttributeMap attrs{{"kernel_shape", o.kernel_shape}, {"ceil_mode", int64_t{o.ceil_mode}}};
  if (!o.strides.empty()) attrs["strides"] = o.strides;
  if (!o.pads.empty()) attrs["pads"] = o.pads;
  return attrs;
}
}  // namespace
Array max_pool(const Array& x, const PoolOptions& o) { return op1("MaxPool", {x}, pool_attrs(o)); }
Array avg_pool(const Array& x, const PoolOptions& o) {
  AttributeMap attrs = pool_attrs(o);
  attrs["count_include_pad"] = int64_t{o.count_include_pad};
  return op1("AveragePool", {x}, attrs);
}
Array global_avg_pool(const Array& x) { return op1("GlobalAveragePool", {x}); }
Array batch_norm(const Array& x, const Array& scale, const Array& bias, const Array& mean,
                 const Array& var, float epsilon) {
  return op1("BatchNormalization", {x, scale, bias, mean, var}, {{"epsilon", epsilon}});
}

// ---------------------------------------------------------------- gradients

std::vector<Array> grad(const Array& loss, const std::vector<Array>& wrt) {
  auto fail = [&](std::shared_ptr<Context> ctx, Status s) {
    std::vector<Array> out;
    for (size_t i = 0; i < wrt.size(); ++i) out.emplace_back(make_error_impl(ctx, s));
    return out;
  };
  const auto& limpl = loss.impl();
  if (!limpl) return fail(nullptr, errors::InvalidArgument("grad: empty loss Array"));
  if (!limpl->error.ok()) return fail(limpl->ctx, limpl->error);
  std::shared_ptr<Context> ctx = limpl->ctx;
  for (const Array& w : wrt) {
    if (!w.impl()) return fail(ctx, errors::InvalidArgument("grad: empty Array in wrt"));
    if (!w.impl()->error.ok()) return fail(ctx, w.impl()->error);
    if (w.impl()->ctx != ctx)
      return fail(ctx, errors::InvalidArgument("grad: wrt arrays belong to another context"));
  }
  const std::string device = limpl->device;
  // The pending graph of `loss` on its device, as flush_locked builds it; values from other
  // devices are computed first and enter as inputs.
  Graph g;
  std::unordered_map<const ArrayImpl*, std::string> names;
  std::unordered_map<std::string, std::shared_ptr<ArrayImpl>> by_name;
  {
    std::vector<PendingNode*> order;
    std::unordered_set<PendingNode*> visited;
    std::lock_guard<std::mutex> lock(ctx->state().mu);
    Status status;
    std::function<void(const std::shared_ptr<ArrayImpl>&)> visit =
        [&](const std::shared_ptr<ArrayImpl>& a) {
          if (!status.ok() || !a || !a->pending()) return;
          PendingNode* n = a->node.get();
          if (!visited.insert(n).second) return;
          for (const auto& in : n->inputs) {
            if (in && in->pending() && in->device != device) {
              status = flush_locked(in);
              if (!status.ok()) return;
            } else {
              visit(in);
            }
          }
          order.push_back(n);
        };
    visit(limpl);
    if (!status.ok()) return fail(ctx, status);
    int counter = 0;
    auto name_of = [&](const std::shared_ptr<ArrayImpl>& a) -> std::string {
      if (!a) return "";
      auto it = names.find(a.get());
      if (it != names.end()) return it->second;
      std::string name;
      if (a->handle) {
        name = "i" + std::to_string(g.inputs.size());
        g.inputs.push_back({name, a->type});
      } else if (a->constant) {
        name = "c" + std::to_string(g.initializers.size());
        g.initializers.emplace(name, *a->constant);
      }
      names.emplace(a.get(), name);
      by_name.emplace(name, a);
      return name;
    };
    for (PendingNode* n : order) {
      Node node;
      node.op = n->op;
      node.domain = n->domain;
      node.attrs = n->attrs;
      for (const auto& in : n->inputs) node.inputs.push_back(name_of(in));
      for (size_t k = 0; k < n->outputs.size(); ++k) {
        auto a = n->outputs[k].lock();
        if (!a && k > 0) {  // an optional output nobody holds: omitted
          node.outputs.push_back("");
          continue;
        }
        std::string name = "v" + std::to_string(counter++);
        node.outputs.push_back(name);
        if (a) {
          names[a.get()] = name;
          by_name[name] = a;
        }
      }
      g.nodes.push_back(std::move(node));
    }
    if (!limpl->pending()) name_of(limpl);
  }
  const std::string loss_name = names.at(limpl.get());
  std::vector<std::string> wrt_names;
  std::vector<size_t> wrt_pos;  // index into wrt of each name
  for (size_t i = 0; i < wrt.size(); ++i) {
    auto it = names.find(wrt[i].impl().get());
    if (it == names.end()) continue;  // not on the loss's graph: zeros below
    wrt_names.push_back(it->second);
    wrt_pos.push_back(i);
  }
  std::vector<Array> out(wrt.size());
  if (!wrt_names.empty()) {
    auto gg = gradients(g, loss_name, wrt_names);
    if (!gg.ok()) return fail(ctx, gg.status());
    std::unordered_map<std::string, Array> vals;
    for (auto& [name, impl] : by_name) vals.emplace(name, Array(impl));
    for (const auto& [name, t] : gg->initializers)
      if (!g.initializers.count(name)) vals.emplace(name, Array::constant(t, device, ctx));
    for (size_t i = g.nodes.size(); i < gg->nodes.size(); ++i) {
      const Node& n = gg->nodes[i];
      std::vector<Array> ins;
      for (const std::string& in : n.inputs) {
        if (in.empty()) {
          ins.emplace_back();
          continue;
        }
        auto it = vals.find(in);
        if (it == vals.end())
          return fail(ctx, errors::Internal("grad: backward value '{}' has no Array", in));
        ins.push_back(it->second);
      }
      std::string op = n.domain.empty() ? n.op : n.domain + "." + n.op;
      std::vector<Array> res =
          Array::op(op, ins, n.attrs, static_cast<int>(n.outputs.size()));
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        if (!res[k].status().ok()) return fail(ctx, res[k].status());
        vals[n.outputs[k]] = res[k];
      }
    }
    for (size_t j = 0; j < wrt_names.size(); ++j)
      out[wrt_pos[j]] = vals.at(gradient_name(wrt_names[j]));
  }
  for (size_t i = 0; i < wrt.size(); ++i) {
    if (out[i].valid()) continue;
    const auto& w = wrt[i].impl();
    if (!dtype_is_float(w->type.dtype))
      return fail(ctx, errors::InvalidArgument("grad: a wrt array is {}, not floating point",
                                               dtype_name(w->type.dtype)));
    out[i] = Array::zeros(w->type.shape, w->type.dtype, w->device, ctx);
  }
  return out;
}

}  // namespace tensord
