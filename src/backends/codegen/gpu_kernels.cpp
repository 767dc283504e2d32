#include "backends/codegen/gpu_kernels.h"

#include <cstdlib>
#include <map>

#include "backends/codegen/node_kernels.h"
#include "backends/codegen/printer.h"
#include "core/errors.h"
#include "core/node_attrs.h"

namespace tensord::codegen {
namespace {

const Printer& printer_for(Dialect dialect) {
  static const OpenClPrinter opencl;
  static const CudaPrinter cuda;
  if (dialect == Dialect::kCuda) return cuda;
  return opencl;
}

}  // namespace

Result<std::string> print_for(const GpuDevice& device, const ElementwiseKernel& k) {
  return printer_for(device.dialect()).print(k);
}

Result<CompiledGroup> compile_group(
    GpuDevice& device, const std::vector<const Node*>& nodes,
    const std::vector<std::string>& outputs, const Shape& shape,
    const std::function<const TensorType*(const std::string&)>& type_of,
    const std::function<const HostTensor*(const std::string&)>& constant) {
  CompiledGroup c;
  TD_ASSIGN_OR_RETURN(c.lowered,
                      lower_elementwise(nodes, outputs, shape, type_of, constant, device.halves()));
  TD_ASSIGN_OR_RETURN(std::string source, print_for(device, c.lowered.kernel));
  TD_ASSIGN_OR_RETURN(c.program, device.program(source, c.lowered.kernel.name));
  return c;
}

namespace {

// A single node as a generated kernel, specialised to the shapes of each call (the last
// shapes' kernel is kept; the device keeps every program it built).
class GeneratedKernel final : public Kernel {
 public:
  GeneratedKernel(GpuDevice* d, const Node& node) : device_(d), node_(node) {}
  std::string name() const override { return "generated"; }
  Status run(KernelCall& call) override {
    std::vector<TensorType> types;
    std::string key;
    for (const auto& in : call.inputs) {
      types.push_back(in.defined() ? in.type() : TensorType{});
      key += shape_to_string(in.shape) + dtype_name(in.dtype) + ";";
    }
    if (call.output_types.empty()) return errors::Internal("{}: no output type", node_.label());
    TensorType out = call.output_types[0];
    if (!shape_is_static(out.shape))
      return errors::Internal("{}: the output shape is not known at run time", node_.label());
    if (!compiled_ || key != key_) {
      std::map<std::string, TensorType> t;
      for (size_t i = 0; i < node_.inputs.size() && i < types.size(); ++i)
        if (!node_.inputs[i].empty()) t[node_.inputs[i]] = types[i];
      t[node_.outputs[0]] = out;
      auto type_of = [&t](const std::string& n) -> const TensorType* {
        auto it = t.find(n);
        return it != t.end() ? &it->second : nullptr;
      };
      TD_ASSIGN_OR_RETURN(CompiledGroup c, compile_group(*device_, {&node_}, {node_.outputs[0]},
                                                         out.shape, type_of, nullptr));
      compiled_ = std::make_unique<CompiledGroup>(std::move(c));
      key_ = key;
    }
    TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(out.dtype, out.shape));
    TD_ASSIGN_OR_RETURN(auto buffer, call.allocator->allocate(static_cast<size_t>(bytes)));
    std::vector<GpuArg> args;
    for (const auto& name : compiled_->lowered.params) {
      size_t i = 0;
      while (i < node_.inputs.size() && node_.inputs[i] != name) ++i;
      if (i >= call.inputs.size() || !call.inputs[i].defined())
        return errors::Internal("{}: no input '{}'", node_.label(), name);
      TD_ASSIGN_OR_RETURN(GpuArg a, device_->arg(*call.inputs[i].buffer));
      args.push_back(a);
    }
    TD_ASSIGN_OR_RETURN(GpuArg o, device_->arg(*buffer));
    args.push_back(o);
    TD_RETURN_IF_ERROR(device_->launch(*compiled_->program, args, shape_numel(out.shape)));
    call.outputs.assign(1, DeviceTensor{out.dtype, out.shape, buffer});
    return OkStatus();
  }

 private:
  GpuDevice* device_;
  Node node_;
  std::string key_;
  std::unique_ptr<CompiledGroup> compiled_;
};

// One input to one output by a kernel built for the call's key (the last key's program is
// kept): data movement and reductions.
Status run_unary(GpuDevice& device, GpuProgram& program, const DeviceTensor& x,
                 const TensorType& out, int64_t n, KernelCall& call) {
  TD_ASSIGN_OR_RETURN(int64_t bytes, checked_byte_size(out.dtype, out.shape));
  TD_ASSIGN_OR_RETURN(auto buffer, call.allocator->allocate(static_cast<size_t>(bytes)));
  TD_ASSIGN_OR_RETURN(GpuArg a, device.arg(*x.buffer));
  TD_ASSIGN_OR_RETURN(GpuArg o, device.arg(*buffer));
  TD_RETURN_IF_ERROR(device.launch(program, {a, o}, n));
  call.outputs.assign(1, DeviceTensor{out.dtype, out.shape, buffer});
  return OkStatus();
}

// Transpose, Expand and Slice: a strided load per element, generated (lower_transpose /
// lower_expand / lower_slice) per shape.
class MoveKernel final : public Kernel {
 public:
  MoveKernel(GpuDevice* d, const Node& node) : device_(d), node_(node) {}
  std::string name() const override { return "generated"; }
  std::vector<int> host_inputs() const override {
    if (node_.op == "Expand") return {1};
    if (node_.op == "Slice") {
      std::vector<int> h;
      for (size_t i = 1; i < node_.inputs.size() && i <= 4; ++i)
        if (!node_.inputs[i].empty()) h.push_back(static_cast<int>(i));
      return h;
    }
    return {};
  }
  Status run(KernelCall& call) override {
    TD_RETURN_IF_ERROR(check_unary_call(node_, call));
    const DeviceTensor& x = call.inputs[0];
    const TensorType& out = call.output_types[0];
    if (!shape_is_static(out.shape))
      return errors::Internal("{}: the output shape is not known at run time", node_.label());
    std::string key = shape_to_string(x.shape) + dtype_name(x.dtype) + shape_to_string(out.shape);
    std::vector<int64_t> starts(x.shape.size(), 0), steps(x.shape.size(), 1);
    if (node_.op == "Slice") {
      TD_RETURN_IF_ERROR(slice_params(node_, call, x.shape, &starts, &steps));
      key += fmt::format("{}/{}", fmt::join(starts, ","), fmt::join(steps, ","));
    }
    if (!program_ || key != key_) {
      ElementwiseKernel k;
      if (node_.op == "Slice") {
        TD_ASSIGN_OR_RETURN(k, lower_slice(x.shape, out.shape, starts, steps, x.dtype));
      } else if (node_.op == "Transpose") {
        std::vector<int64_t> perm;
        if (auto it = node_.attrs.find("perm"); it != node_.attrs.end()) {
          NodeAttrs attrs(node_);
          TD_ASSIGN_OR_RETURN(perm, attrs.attr_ints("perm", {}));
        } else {
          for (size_t d = x.shape.size(); d-- > 0;) perm.push_back(static_cast<int64_t>(d));
        }
        TD_ASSIGN_OR_RETURN(k, lower_transpose(x.shape, perm, x.dtype));
      } else {
        TD_ASSIGN_OR_RETURN(k, lower_expand(x.shape, out.shape, x.dtype));
      }
      TD_ASSIGN_OR_RETURN(std::string source, print_for(*device_, k));
      TD_ASSIGN_OR_RETURN(program_, device_->program(source, k.name));
      key_ = key;
    }
    return run_unary(*device_, *program_, x, out, shape_numel(out.shape), call);
  }

 private:
  GpuDevice* device_;
  Node node_;
  std::string key_;
  std::shared_ptr<GpuProgram> program_;
};

// Matmul, convolution, pooling, Softmax, normalisations, Concat/Split/Gather/Pad/Tile,
// ArgMax/ArgMin, CumSum, Resize...: a kernel generated per call's shapes from the
// device-neutral templates (templates.h); the device keeps every program it built, keyed by
// source.
class TemplateOpKernel final : public Kernel {
 public:
  TemplateOpKernel(GpuDevice* d, const Node& node) : device_(d), node_(node) {}
  std::string name() const override { return "generated"; }
  std::vector<int> host_inputs() const override { return template_host_inputs(node_); }
  Status run(KernelCall& call) override {
    TD_ASSIGN_OR_RETURN(OpPlan plan, plan_template(template_call(node_, call)));
    const std::string source = print_template(plan.kernel, device_->dialect());
    std::shared_ptr<GpuProgram> program;
    if (program_ && source == source_) {
      program = program_;
    } else {
      TD_ASSIGN_OR_RETURN(program, device_->program(source, plan.kernel.name));
      program_ = program;
      source_ = source;
    }
    std::vector<GpuArg> args;
    for (int i : plan.inputs) {
      const auto& t = call.inputs.at(static_cast<size_t>(i));
      if (!t.defined() || !t.buffer)
        return errors::Internal("{}: input {} missing", node_.label(), i);
      TD_ASSIGN_OR_RETURN(GpuArg a, device_->arg(*t.buffer));
      args.push_back(a);
    }
    TD_RETURN_IF_ERROR(allocate_template_outputs(plan, call));
    for (int o : plan.outputs) {
      const auto& t = call.outputs.at(static_cast<size_t>(o));
      if (!t.buffer) return errors::Internal("{}: output {} not allocated", node_.label(), o);
      TD_ASSIGN_OR_RETURN(GpuArg a, device_->arg(*t.buffer));
      args.push_back(a);
    }
    return device_->launch(*program, args, plan.kernel.n);
  }

 private:
  GpuDevice* device_;
  Node node_;
  std::string source_;
  std::shared_ptr<GpuProgram> program_;
};

// ReduceSum, ReduceMean, ... over float32 (and float16/bfloat16 where the device has halves):
// a generated kernel per input shape, axes and dtype.
class ReduceOp final : public Kernel {
 public:
  ReduceOp(GpuDevice* d, const Node& node) : device_(d), node_(node) {}
  std::string name() const override { return "generated"; }
  std::vector<int> host_inputs() const override {
    return node_.inputs.size() > 1 && !node_.inputs[1].empty() ? std::vector<int>{1}
                                                               : std::vector<int>{};
  }
  Status run(KernelCall& call) override {
    TD_RETURN_IF_ERROR(check_unary_call(node_, call));
    const DeviceTensor& x = call.inputs[0];
    const TensorType& out = call.output_types[0];
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    std::vector<bool> mask;
    bool noop = false;
    TD_RETURN_IF_ERROR(reduce_axes(node_, call, rank, &mask, &noop));
    if (noop) {  // the input as is
      call.outputs.assign(1, DeviceTensor{x.dtype, out.shape, x.buffer});
      return OkStatus();
    }
    ReduceKernel k;
    k.op = reduce_ops().at(node_.op);
    k.in_shape.assign(x.shape.begin(), x.shape.end());
    k.reduced = mask;
    k.storage = storage_of(x.dtype);
    if (k.reduced_numel() == 0 || !shape_is_static(out.shape) ||
        shape_numel(out.shape) != k.out_numel())
      return errors::Internal("{}: cannot reduce {} to {}", node_.label(), shape_to_string(x.shape),
                              shape_to_string(out.shape));
    std::string key = shape_to_string(x.shape);
    for (bool b : mask) key += b ? "1" : "0";
    key += dtype_name(x.dtype);
    if (!program_ || key != key_) {
      TD_ASSIGN_OR_RETURN(std::string source, printer_for(device_->dialect()).print(k));
      TD_ASSIGN_OR_RETURN(program_, device_->program(source, k.name));
      key_ = key;
    }
    return run_unary(*device_, *program_, x, out, k.out_numel(), call);
  }

 private:
  GpuDevice* device_;
  Node node_;
  std::string key_;
  std::shared_ptr<GpuProgram> program_;
};

// A fused chain: one generated kernel. Constants that are not scalars were uploaded at
// compile time and are held here.
class ElementwiseRegion final : public RegionKernel {
 public:
  ElementwiseRegion(GpuDevice* d, CompiledGroup c, std::vector<std::string> inputs, Shape shape)
      : device_(d),
        c_(std::move(c)),
        inputs_(std::move(inputs)),
        shape_(std::move(shape)),
        uploads_(d) {}
  Status upload(size_t param, const HostTensor& value) {
    TD_ASSIGN_OR_RETURN(held_[param],
                        uploads_.upload(value.data(), static_cast<size_t>(value.nbytes())));
    return OkStatus();
  }
  Status run(const std::vector<DeviceTensor>& inputs, const std::vector<DeviceTensor>& outputs,
             Allocator& allocator) override {
    (void)allocator;
    std::vector<GpuArg> args;
    const auto& params = c_.lowered.params;
    for (size_t p = 0; p < params.size(); ++p) {
      if (auto h = held_.find(p); h != held_.end()) {
        args.push_back(h->second);
        continue;
      }
      size_t i = 0;
      while (i < inputs_.size() && inputs_[i] != params[p]) ++i;
      if (i >= inputs.size() || !inputs[i].buffer)
        return errors::Internal("{}: fused kernel input '{}' missing", device_->name(), params[p]);
      TD_ASSIGN_OR_RETURN(GpuArg a, device_->arg(*inputs[i].buffer));
      args.push_back(a);
    }
    for (const auto& o : outputs) {
      if (!o.buffer)
        return errors::Internal("{}: fused kernel output not allocated", device_->name());
      TD_ASSIGN_OR_RETURN(GpuArg a, device_->arg(*o.buffer));
      args.push_back(a);
    }
    return device_->launch(*c_.program, args, shape_numel(shape_));
  }
  int64_t arena_bytes() const override { return 0; }
  int64_t weight_bytes() const override { return uploads_.bytes(); }
  std::string describe() const override {
    return fmt::format("{}Elementwise: {} over {} in 1 generated kernel, {} outputs",
                       device_->describe_prefix(), c_.lowered.summary, shape_to_string(shape_),
                       c_.lowered.kernel.outputs.size());
  }

 private:
  GpuDevice* device_;
  CompiledGroup c_;
  std::vector<std::string> inputs_;
  Shape shape_;
  std::map<size_t, GpuArg> held_;
  HeldBuffers uploads_;
};

bool domain_ok(const Node& node) { return node.domain.empty() || node.domain == "ai.onnx"; }

// A node of one output whose first input is given: views, reductions, data movement.
bool unary_form(const Node& node, const std::vector<TensorType>& inputs) {
  return domain_ok(node) && node.outputs.size() == 1 && !inputs.empty() && inputs[0].defined();
}

bool any_float64(const std::vector<TensorType>& inputs) {
  for (const auto& t : inputs)
    if (t.defined() && t.dtype == DType::kFloat64) return true;
  return false;
}

template <typename K>
std::function<std::unique_ptr<Kernel>(const Node&, const std::vector<TensorType>&)> make(
    GpuDevice* d) {
  return [d](const Node& node, const std::vector<TensorType>&) -> std::unique_ptr<Kernel> {
    return std::make_unique<K>(d, node);
  };
}

}  // namespace

std::unique_ptr<Kernel> make_template_kernel(GpuDevice* device, const Node& node) {
  return std::make_unique<TemplateOpKernel>(device, node);
}

std::vector<GpuKernelEntry> shared_gpu_kernels(GpuDevice* d) {
  using Claim = std::optional<Status>;
  std::vector<GpuKernelEntry> list;
  list.push_back({"template",
                  [d](const Node& node, const std::vector<TensorType>& inputs) -> Claim {
                    if (!domain_ok(node) || !is_template_op(node.op)) return std::nullopt;
                    if (!d->no_fp64().empty() && any_float64(inputs))
                      return errors::Unimplemented("{}: {} {} ({})", node.op, d->name(),
                                                   d->no_fp64(), node.label());
                    return template_supported(node, inputs);
                  },
                  make<TemplateOpKernel>(d)});
  list.push_back(
      {"view",
       [](const Node& node, const std::vector<TensorType>& inputs) -> Claim {
         if (!unary_form(node, inputs) || !is_view_op(node.op)) return std::nullopt;
         return OkStatus();
       },
       [](const Node& node, const std::vector<TensorType>&) { return make_view_kernel(node); }});
  // Reductions over float64: a template (plan_template).
  list.push_back({"reduce float64",
                  [d](const Node& node, const std::vector<TensorType>& inputs) -> Claim {
                    if (!unary_form(node, inputs) || !reduce_ops().count(node.op))
                      return std::nullopt;
                    if (inputs[0].dtype == DType::kFloat64 && d->no_fp64().empty() &&
                        shape_is_static(inputs[0].shape) && shape_numel(inputs[0].shape) > 0)
                      return OkStatus();
                    return std::nullopt;
                  },
                  make<TemplateOpKernel>(d)});
  list.push_back({"reduce",
                  [d](const Node& node, const std::vector<TensorType>& inputs) -> Claim {
                    if (!unary_form(node, inputs) || !reduce_ops().count(node.op))
                      return std::nullopt;
                    // A static shape and no empty reduction (those fall back: the reference's
                    // identities for empty inputs are not generated yet).
                    const DType dt = inputs[0].dtype;
                    const bool half = dt == DType::kFloat16 || dt == DType::kBFloat16;
                    if ((dt != DType::kFloat32 && !(half && d->halves())) ||
                        !shape_is_static(inputs[0].shape) || shape_numel(inputs[0].shape) == 0)
                      return errors::Unimplemented(
                          "{}: {} reduces static {} tensors only ({})", node.op, d->name(),
                          d->halves() ? "float32, float16 and bfloat16" : "float32", node.label());
                    return OkStatus();
                  },
                  make<ReduceOp>(d)});
  list.push_back(
      {"move",
       [d](const Node& node, const std::vector<TensorType>& inputs) -> Claim {
         if (!unary_form(node, inputs) || !(node.op == "Transpose" || node.op == "Expand" ||
                                            (node.op == "Slice" && node.inputs.size() >= 3)))
           return std::nullopt;
         const size_t size = dtype_size(inputs[0].dtype);
         if (size == 1 || size == 4 || size == 8) return OkStatus();
         return errors::Unimplemented("{}: {} moves 1-, 4- and 8-byte elements only ({})", node.op,
                                      d->name(), node.label());
       },
       make<MoveKernel>(d)});
  // Everything else: element-wise through the kernel IR (lower.h), or an element-wise
  // template for the dtypes the IR lacks (int8/16, unsigned, float64).
  list.push_back(
      {"elementwise",
       [d](const Node& node, const std::vector<TensorType>& inputs) -> Claim {
         if (Status ir = elementwise_supported(node, inputs, nullptr, d->halves()); !ir.ok()) {
           if (!is_template_elementwise(node.op)) return ir;
           if (!d->no_fp64().empty() && any_float64(inputs)) return ir;
           if (!template_elementwise_supported(node, inputs).ok()) return ir;
           return OkStatus();
         }
         bool all_static = true;
         for (const auto& t : inputs) all_static &= !t.defined() || shape_is_static(t.shape);
         if (all_static && node.op != "Clip" && node.op != "CastLike") {
           Shape s;
           if (!broadcast_shape(inputs, &s))
             return errors::Unimplemented("{}: {} inputs do not broadcast ({})", node.op, d->name(),
                                          node.label());
         }
         return OkStatus();
       },
       [d](const Node& node, const std::vector<TensorType>& inputs) -> std::unique_ptr<Kernel> {
         if (!elementwise_supported(node, inputs, nullptr, d->halves()).ok())
           return std::make_unique<TemplateOpKernel>(d, node);
         return std::make_unique<GeneratedKernel>(d, node);
       }});
  return list;
}

GpuKernelTable::GpuKernelTable(GpuDevice* device, std::vector<GpuKernelEntry> backend)
    : device_(device), entries_(std::move(backend)) {
  for (auto& e : shared_gpu_kernels(device)) entries_.push_back(std::move(e));
}

const GpuKernelEntry* GpuKernelTable::find(const Node& node, const std::vector<TensorType>& inputs,
                                           Status* status) const {
  for (const auto& e : entries_) {
    if (std::optional<Status> s = e.claims(node, inputs)) {
      *status = std::move(*s);
      return &e;
    }
  }
  *status = errors::Unimplemented("{}: {} has no kernel for it ({})", node.op, device_->name(),
                                  node.label());
  return nullptr;
}

Status GpuKernelTable::supports(const Node& node, const std::vector<TensorType>& inputs,
                                const CompileOptions& options) const {
  (void)options;
  Status s;
  find(node, inputs, &s);
  return s;
}

Result<std::unique_ptr<Kernel>> GpuKernelTable::create(const Node& node,
                                                       const std::vector<TensorType>& inputs,
                                                       const std::vector<TensorType>& outputs,
                                                       const CompileOptions& options) const {
  (void)outputs;
  (void)options;
  Status s;
  const GpuKernelEntry* e = find(node, inputs, &s);
  if (!s.ok()) return s;
  return e->create(node, inputs);
}

std::vector<Region> GpuRegionCompiler::compile(const FusionGraph& g,
                                               std::vector<std::string>* notes) {
  std::vector<bool> taken(g.nodes.size(), false);
  std::vector<Region> regions;
  if (first_) regions = first_(g, &taken, notes);
  if (std::getenv("TENSORD_NO_ELEMENTWISE_FUSION")) return regions;
  const bool halves = device_->halves();
  auto key = [&](size_t i, const std::vector<int>&) -> std::string {
    if (!g.placed_here.empty() && !g.placed_here[i]) return "";
    if (taken[i]) return "";
    const Node& node = *g.nodes[i];
    if (node.outputs.size() != 1 || node.outputs[0].empty()) return "";
    const TensorType* out = g.type_of(node.outputs[0]);
    if (!out || !shape_is_static(out->shape) || shape_numel(out->shape) == 0) return "";
    std::vector<TensorType> in;
    for (const auto& name : node.inputs) {
      const TensorType* t = name.empty() ? nullptr : g.type_of(name);
      if (!name.empty() && (!t || !shape_is_static(t->shape))) return "";
      in.push_back(t ? *t : TensorType{});
    }
    if (!elementwise_supported(node, in, g.constant, halves).ok()) return "";
    return "ew:" + shape_to_string(out->shape);
  };
  for (auto& r : partition_graph(g, key)) {
    if (r.members.size() < 2 || r.outputs.empty()) continue;  // single nodes: their own kernels
    std::vector<const Node*> nodes;
    for (size_t m : r.members) nodes.push_back(g.nodes[m]);
    const Shape shape = g.type_of(nodes.back()->outputs[0])->shape;
    auto c = compile_group(*device_, nodes, r.outputs, shape, g.type_of, g.constant);
    if (!c.ok()) {
      if (notes)
        notes->push_back(fmt::format("{}: {} element-wise nodes left unfused: {}", device_->name(),
                                     nodes.size(), c.status().message()));
      continue;
    }
    // Constants that are not literals: uploaded once, held by the kernel.
    const std::vector<const HostTensor*> constants = c->lowered.constants;
    auto kernel = std::make_unique<ElementwiseRegion>(device_, std::move(*c), r.inputs, shape);
    Status up;
    for (size_t p = 0; p < constants.size() && up.ok(); ++p)
      if (constants[p]) up = kernel->upload(p, *constants[p]);
    if (!up.ok()) {
      if (notes)
        notes->push_back(
            fmt::format("{}: a fused kernel's constants: {}", device_->name(), up.message()));
      continue;
    }
    r.kernel = std::move(kernel);
    regions.push_back(std::move(r));
  }
  return regions;
}

}  // namespace tensord::codegen
