// Tier 2: the backend interface as a new backend author sees it. A toy device written here —
// memory the host cannot see (reached only through read/write), a kernel table with two ops
// (Add on float32; Reshape, whose shape input it asks for in host memory) — gets a graph
// compiled by the engine's compiler: the ops it lacks fall back to a cpu device with copies at
// the cuts, constants are uploaded to it, and the outputs match the cpu reference kernels.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>

#include "core/errors.h"
#include "engine/executor.h"

namespace tensord {
namespace {

class ToyDevice;

class ToyAdd final : public Kernel {
 public:
  explicit ToyAdd(ToyDevice* d) : device_(d) {}
  std::string name() const override { return "toy-add"; }
  Status run(KernelCall& call) override;

 private:
  ToyDevice* device_;
};

class ToyReshape final : public Kernel {
 public:
  explicit ToyReshape(ToyDevice* d) : device_(d) {}
  std::string name() const override { return "toy-reshape"; }
  std::vector<int> host_inputs() const override { return {1}; }
  Status run(KernelCall& call) override;
  static int calls_with_host_shape;

 private:
  ToyDevice* device_;
};
int ToyReshape::calls_with_host_shape = 0;

class ToyKernels final : public KernelTable {
 public:
  explicit ToyKernels(ToyDevice* d) : device_(d) {}
  Status supports(const Node& node, const std::vector<TensorType>& inputs,
                  const CompileOptions&) const override {
    if (node.op == "Add" && inputs.size() == 2 && inputs[0].dtype == DType::kFloat32 &&
        inputs[0] == inputs[1])
      return OkStatus();
    if (node.op == "Reshape") return OkStatus();
    return errors::Unimplemented("{}: the toy device has no kernel for it", node.op);
  }
  Result<std::unique_ptr<Kernel>> create(const Node& node, const std::vector<TensorType>&,
                                         const std::vector<TensorType>&,
                                         const CompileOptions&) const override {
    if (node.op == "Add") return std::unique_ptr<Kernel>(new ToyAdd(device_));
    return std::unique_ptr<Kernel>(new ToyReshape(device_));
  }

 private:
  ToyDevice* device_;
};

// "Device memory": heap blocks the engine never gets a host pointer to.
class ToyDevice final : public Device {
 public:
  ToyDevice() : kernels_(this) {
    info_.name = "toy:0";
    info_.kind = "toy";
    info_.memory_bytes = int64_t{1} << 30;
  }
  const DeviceInfo& info() const override { return info_; }
  Result<void*> allocate(size_t bytes) override {
    void* p = std::malloc(std::max<size_t>(bytes, 1));
    if (!p) return errors::ResourceExhausted("toy: out of memory");
    allocations++;
    return p;
  }
  void free(void* ptr, size_t) override { std::free(ptr); }
  Status write(const Buffer& dst, size_t offset, const void* src, size_t bytes) override {
    if (offset + bytes > dst.size) return errors::OutOfRange("toy: write past the end");
    std::memcpy(static_cast<char*>(dst.ptr) + dst.offset + offset, src, bytes);
    writes++;
    return OkStatus();
  }
  Status read(const Buffer& src, size_t offset, void* dst, size_t bytes) override {
    if (offset + bytes > src.size) return errors::OutOfRange("toy: read past the end");
    std::memcpy(dst, static_cast<const char*>(src.ptr) + src.offset + offset, bytes);
    reads++;
    return OkStatus();
  }
  const KernelTable& kernels() const override { return kernels_; }
  // The kernels' own view of their memory (a backend knows its buffers).
  static float* data(const Buffer& b) {
    return reinterpret_cast<float*>(static_cast<char*>(b.ptr) + b.offset);
  }
  int allocations = 0, writes = 0, reads = 0;

 private:
  DeviceInfo info_;
  ToyKernels kernels_;
};

Status ToyAdd::run(KernelCall& call) {
  const DeviceTensor& a = call.inputs[0];
  const DeviceTensor& b = call.inputs[1];
  if (a.buffer->device != device_ || b.buffer->device != device_)
    return errors::Internal("toy-add got an input that is not on the toy device");
  const int64_t n = shape_numel(a.shape);
  TD_ASSIGN_OR_RETURN(auto out, call.allocator->allocate(static_cast<size_t>(n) * 4));
  for (int64_t i = 0; i < n; ++i)
    ToyDevice::data(*out)[i] = ToyDevice::data(*a.buffer)[i] + ToyDevice::data(*b.buffer)[i];
  call.outputs[0] = DeviceTensor{a.dtype, a.shape, out};
  return OkStatus();
}

Status ToyReshape::run(KernelCall& call) {
  // The shape input came to the host because host_inputs() asked for it.
  if (call.host_values.size() < 2 || call.host_values[1].empty())
    return errors::Internal("toy-reshape: no host copy of the shape");
  calls_with_host_shape++;
  const DeviceTensor& x = call.inputs[0];
  const Shape& shape = call.output_types[0].shape;  // inferred at run time from the values
  TD_ASSIGN_OR_RETURN(auto out, call.allocator->allocate(x.buffer->size));
  std::memcpy(ToyDevice::data(*out), ToyDevice::data(*x.buffer), x.buffer->size);
  call.outputs[0] = DeviceTensor{x.dtype, shape, out};
  return OkStatus();
}

// What the engine gives a run, written for the test: heap allocators per device, copies
// through host memory.
class TestServices final : public RunServices {
 public:
  struct Heap final : Allocator {
    Device* d;
    explicit Heap(Device* dev) : d(dev) {}
    Result<std::shared_ptr<Buffer>> allocate(size_t bytes) override {
      TD_ASSIGN_OR_RETURN(void* p, d->allocate(bytes));
      Device* dev = d;
      return std::shared_ptr<Buffer>(new Buffer{dev, p, bytes, 0}, [dev](Buffer* b) {
        dev->free(b->ptr, b->size);
        delete b;
      });
    }
  };
  Allocator& allocator(Device& device) override {
    auto& a = heaps_[&device];
    if (!a) a = std::make_unique<Heap>(&device);
    return *a;
  }
  Result<DeviceTensor> transfer(const DeviceTensor& v, Device& dst) override {
    transfers++;
    if (v.buffer->device == &dst) return v;
    TD_ASSIGN_OR_RETURN(auto buf, allocator(dst).allocate(v.buffer->size));
    std::vector<char> host(v.buffer->size);
    TD_RETURN_IF_ERROR(v.buffer->device->read(*v.buffer, 0, host.data(), host.size()));
    TD_RETURN_IF_ERROR(dst.write(*buf, 0, host.data(), host.size()));
    return DeviceTensor{v.dtype, v.shape, buf};
  }
  int transfers = 0;

 private:
  std::map<Device*, std::unique_ptr<Heap>> heaps_;
};

Node node(std::string name, std::string op, std::vector<std::string> in,
          std::vector<std::string> out) {
  Node n;
  n.name = std::move(name);
  n.op = std::move(op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

TEST(BackendInterface, AToyDeviceRunsWhatItSupportsAndTheRestFallsBack) {
  std::unique_ptr<Device> cpu;
  for (auto& b : create_backends())
    for (auto& d : b->enumerate())
      if (!cpu) cpu = std::move(d);
  ASSERT_TRUE(cpu);
  ToyDevice toy;
  // y = relu(reshape(x + c, shape)) + x2, shape a graph input (its value known at run time).
  Graph g;
  g.name = "toy";
  g.inputs = {{"x", {DType::kFloat32, {2, 3}}}, {"shape", {DType::kInt64, {2}}}};
  g.initializers["c"] = HostTensor::from_vector(std::vector<float>{1, -2, 3, -4, 5, -6}, {2, 3});
  g.nodes = {node("add", "Add", {"x", "c"}, {"s"}), node("rs", "Reshape", {"s", "shape"}, {"r"}),
             node("relu", "Relu", {"r"}, {"a"}), node("add2", "Add", {"a", "a"}, {"y"})};
  g.outputs = {{"y", {}}};
  CompileTarget t;
  t.device = &toy;
  t.fallback = cpu.get();
  t.host = cpu.get();
  auto exe = Executable::compile(g, {g.inputs[0].type, g.inputs[1].type}, t, {});
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  ASSERT_EQ((*exe)->fallbacks().size(), 1u);
  EXPECT_EQ((*exe)->fallbacks()[0].op, "Relu");
  EXPECT_NE((*exe)->describe().find("Add 'add' [toy:0 toy-add]"), std::string::npos)
      << (*exe)->describe();

  TestServices services;
  // Inputs on the toy device, written through its interface.
  auto put = [&](const HostTensor& h) {
    auto buf = services.allocator(toy).allocate(h.nbytes());
    EXPECT_TRUE(buf.ok());
    EXPECT_TRUE(toy.write(**buf, 0, h.data(), h.nbytes()).ok());
    return Result<DeviceTensor>(DeviceTensor{h.dtype(), h.shape(), *buf});
  };
  const HostTensor x = HostTensor::from_vector(std::vector<float>{0.5f, 0.5f, -5, 1, 1, 1}, {2, 3});
  const HostTensor shape = HostTensor::from_vector(std::vector<int64_t>{3, 2}, {2});
  auto outs = (*exe)->run({put(x), put(shape)}, services);
  ASSERT_EQ(outs.size(), 1u);
  ASSERT_TRUE(outs[0].ok()) << outs[0].status().to_string();
  const DeviceTensor& y = *outs[0];
  EXPECT_EQ(y.buffer->device, &toy);  // outputs come back to the requested device
  EXPECT_EQ(y.shape, (Shape{3, 2}));
  std::vector<float> got(6);
  ASSERT_TRUE(toy.read(*y.buffer, 0, got.data(), 24).ok());
  // Reference: relu(x + c) * 2 = relu([1.5,-1.5,-2,-3,6,-5]) * 2.
  EXPECT_EQ(got, (std::vector<float>{3, 0, 0, 0, 12, 0}));
  EXPECT_EQ(ToyReshape::calls_with_host_shape, 1);
  EXPECT_EQ(services.transfers, 2);  // to cpu for the Relu, back for the last Add
  EXPECT_GE(toy.writes, 3);          // the constant c (uploaded at compile time) and the inputs
  EXPECT_GE(toy.reads, 2);           // the shape for the host, the Relu's input
}

TEST(BackendInterface, AnOpNobodySupportsIsANamedErrorOnItsOutputs) {
  ToyDevice toy;
  Graph g;
  g.name = "toy";
  g.inputs = {{"x", {DType::kFloat32, {2}}}};
  g.nodes = {node("r", "Relu", {"x"}, {"y"}), node("a", "Add", {"x", "x"}, {"z"})};
  g.outputs = {{"y", {}}, {"z", {}}};
  CompileTarget t;
  t.device = &toy;  // no fallback device
  auto exe = Executable::compile(g, {g.inputs[0].type}, t, {});
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  TestServices services;
  auto buf = services.allocator(toy).allocate(8);
  ASSERT_TRUE(buf.ok());
  const float v[2] = {1, 2};
  ASSERT_TRUE(toy.write(**buf, 0, v, 8).ok());
  auto outs = (*exe)->run({DeviceTensor{DType::kFloat32, {2}, *buf}}, services);
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0].status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(outs[0].status().message().find("the toy device has no kernel"), std::string::npos);
  ASSERT_TRUE(outs[1].ok());  // the other output is unaffected
}

}  // namespace
}  // namespace tensord
