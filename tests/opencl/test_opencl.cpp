// The OpenCL backend on whatever OpenCL platform is installed (PoCL's CPU device in CI: two
// devices of one platform through POCL_DEVICES="pthread pthread", so copies between devices of
// one context are exercised). Without a platform every test skips saying so — except under
// CI=true, where CI installs PoCL and a missing platform is a failure.
//
// PoCL's kernel cache goes into a fresh temporary folder (POCL_CACHE_DIR), set before the ICD
// loader starts, as is POCL_DEVICES.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>

#include "backends/codegen/lower.h"
#include "backends/codegen/printer.h"
#include "backends/codegen/recurrent.h"
#include "backends/codegen/templates.h"
#include "backends/opencl/opencl_backend.h"
#include "core/errors.h"
#include "core/op_registry.h"
#include "engine/executor.h"
#include "kernels/op_test_util.h"
#include "tensord/client.h"

namespace tensord {
namespace {

// Before any OpenCL call in this process.
const bool kEnvironment = [] {
  setenv("POCL_DEVICES", "pthread pthread", 0);
  if (!std::getenv("POCL_CACHE_DIR")) {
    static char dir[] = "/tmp/tensord-pocl-cache-XXXXXX";
    if (mkdtemp(dir)) setenv("POCL_CACHE_DIR", dir, 1);
  }
  static char kernels[] = "/tmp/tensord-kernel-cache-XXXXXX";
  if (mkdtemp(kernels)) setenv("TENSORD_KERNEL_CACHE", kernels, 1);
  return true;
}();

struct Devices {
  std::vector<std::unique_ptr<Device>> cpu, opencl;
};

Devices& devices() {
  static Devices* d = [] {
    (void)kEnvironment;
    auto* d = new Devices;
    for (auto& b : create_backends())
      for (auto& dev : b->enumerate())
        (dev->info().kind == "opencl" ? d->opencl : d->cpu).push_back(std::move(dev));
    return d;
  }();
  return *d;
}

bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

#define REQUIRE_OPENCL()                                                                  \
  do {                                                                                    \
    if (devices().opencl.empty()) {                                                       \
      if (in_ci()) FAIL() << "no OpenCL device under CI=true (CI installs pocl-opencl-icd)"; \
      GTEST_SKIP() << "no OpenCL platform on this machine (apt-get install pocl-opencl-icd)"; \
    }                                                                                     \
  } while (0)

Device& cl0() { return *devices().opencl[0]; }
Device& cpu0() { return *devices().cpu[0]; }

// What the engine gives a run, written for the test: heap allocators per device (plain device
// allocations), copies through host memory.
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
    if (v.buffer->device == &dst) return v;
    transfers++;
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

DeviceTensor put(TestServices& s, Device& d, const HostTensor& h) {
  auto buf = s.allocator(d).allocate(static_cast<size_t>(h.nbytes()));
  EXPECT_TRUE(buf.ok());
  EXPECT_TRUE(d.write(**buf, 0, h.data(), static_cast<size_t>(h.nbytes())).ok());
  return DeviceTensor{h.dtype(), h.shape(), *buf};
}

HostTensor get(const DeviceTensor& t) {
  HostTensor h(t.dtype, t.shape);
  EXPECT_TRUE(t.buffer->device->read(*t.buffer, 0, h.mutable_data(), static_cast<size_t>(h.nbytes())).ok());
  return h;
}

HostTensor random_floats(const Shape& shape, uint32_t seed, float lo = -3, float hi = 3) {
  HostTensor t(DType::kFloat32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

// The reference kernels' outputs for a graph (cpu:0, no fusion).
std::vector<HostTensor> reference(const Graph& g, const std::vector<HostTensor>& inputs) {
  LocalClientOptions o;
  o.devices = "cpu:0";
  o.reference_kernels = true;
  auto client = make_local_client(o);
  EXPECT_TRUE(client.ok());
  auto outs = testing::run_on(**client, g, inputs, "cpu:0");
  EXPECT_TRUE(outs.ok()) << outs.status().to_string();
  std::vector<HostTensor> r;
  if (outs.ok())
    for (auto& o : *outs) {
      EXPECT_TRUE(o.ok()) << o.status().to_string();
      r.push_back(o.ok() ? *o : HostTensor{});
    }
  return r;
}

void expect_near(const HostTensor& got, const HostTensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_EQ(testing::disagreement(got, want, true), "") << what;
}

Node node(std::string name, std::string op, std::vector<std::string> in, std::vector<std::string> out,
          AttributeMap attrs = {}) {
  Node n;
  n.name = std::move(name);
  n.op = std::move(op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

CompileTarget target_cl0() {
  CompileTarget t;
  t.device = &cl0();
  t.fallback = &cpu0();
  t.host = &cpu0();
  return t;
}

TEST(OpenClDevices, AreListedWithTheirProperties) {
  REQUIRE_OPENCL();
  for (size_t i = 0; i < devices().opencl.size(); ++i) {
    const DeviceInfo& info = devices().opencl[i]->info();
    EXPECT_EQ(info.name, "opencl:" + std::to_string(i));
    EXPECT_EQ(info.kind, "opencl");
    EXPECT_FALSE(info.vendor.empty());
    EXPECT_FALSE(info.model.empty());
    EXPECT_FALSE(info.driver_version.empty());
    EXPECT_GT(info.memory_bytes, 0);
    EXPECT_GT(info.compute_units, 0);
    EXPECT_NE(info.backend_version.find("generated kernels"), std::string::npos);
  }
}

TEST(OpenClDevices, TheEngineSelectsThemByFilterAndDefault) {
  REQUIRE_OPENCL();
  LocalClientOptions o;
  o.devices = "opencl:*";
  o.default_device = "opencl:0";
  auto client = make_local_client(o);
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  auto infos = (*client)->devices();
  ASSERT_TRUE(infos.ok());
  ASSERT_FALSE(infos->empty());
  for (const auto& d : *infos) EXPECT_EQ(d.kind, "opencl");
  EXPECT_EQ((*client)->default_device(), "opencl:0");
}

TEST(OpenClMemory, WritesAndReadsAreByteExactAtOffsets) {
  REQUIRE_OPENCL();
  Device& d = cl0();
  auto mem = d.allocate(4096);
  ASSERT_TRUE(mem.ok()) << mem.status().to_string();
  // A sub-allocation as the engine's pool makes them: (allocation, offset).
  Buffer b{&d, *mem, 1000, 192};
  std::vector<unsigned char> pattern(700);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<unsigned char>(i * 37 + 11);
  ASSERT_TRUE(d.write(b, 0, std::vector<unsigned char>(1000, 0xAB).data(), 1000).ok());
  ASSERT_TRUE(d.write(b, 123, pattern.data(), pattern.size()).ok());
  std::vector<unsigned char> back(1000);
  ASSERT_TRUE(d.read(b, 0, back.data(), back.size()).ok());
  for (size_t i = 0; i < 1000; ++i) {
    const unsigned char want = i >= 123 && i < 823 ? pattern[i - 123] : 0xAB;
    ASSERT_EQ(back[i], want) << "byte " << i;
  }
  std::vector<unsigned char> part(50);
  ASSERT_TRUE(d.read(b, 200, part.data(), part.size()).ok());
  EXPECT_EQ(0, std::memcmp(part.data(), pattern.data() + 77, 50));
  // Past the end: a named error, nothing written.
  Status s = d.write(b, 990, pattern.data(), 20);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("opencl:0"), std::string::npos);
  EXPECT_EQ(d.read(b, 1001, part.data(), 0).code(), StatusCode::kOutOfRange);
  d.free(*mem, 4096);
}

TEST(OpenClMemory, CopiesCpuToOpenClToCpuAreByteExact) {
  REQUIRE_OPENCL();
  LocalClientOptions o;
  o.devices = "cpu:0,opencl:*";
  auto client = make_local_client(o);
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  Client& c = **client;
  HostTensor h(DType::kFloat32, {3, 1001});  // odd sizes; NaN payloads and -0 must survive
  uint32_t* bits = reinterpret_cast<uint32_t*>(h.mutable_data());
  std::mt19937 rng(7);
  for (int64_t i = 0; i < h.numel(); ++i) bits[i] = rng();
  bits[0] = 0x7fc00123u;
  bits[1] = 0x80000000u;
  auto a = c.upload(h.view(), "cpu:0");
  ASSERT_TRUE(a.ok());
  auto on_cl = c.copy(*a, "opencl:0");
  ASSERT_TRUE(on_cl.ok()) << on_cl.status().to_string();
  auto info = c.info(*on_cl);
  ASSERT_TRUE(info.ok());
  auto back = c.copy(*on_cl, "cpu:0");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  auto r = c.read(*back);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(0, std::memcmp(r->data(), h.data(), static_cast<size_t>(h.nbytes())));
  auto direct = c.read(*on_cl);  // read straight from the device too
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(0, std::memcmp(direct->data(), h.data(), static_cast<size_t>(h.nbytes())));
  // Small tensors (sub-allocated in the pool's slabs) at nonzero offsets.
  for (int n : {1, 3, 17, 100}) {
    HostTensor s = random_floats({n}, static_cast<uint32_t>(n));
    auto u = c.upload(s.view(), "opencl:0");
    ASSERT_TRUE(u.ok());
    auto rr = c.read(*u);
    ASSERT_TRUE(rr.ok());
    EXPECT_EQ(0, std::memcmp(rr->data(), s.data(), static_cast<size_t>(s.nbytes()))) << n;
  }
}

TEST(OpenClMemory, CopiesBetweenTwoDevicesOfOneContextAreDirectAndByteExact) {
  REQUIRE_OPENCL();
  if (devices().opencl.size() < 2)
    GTEST_SKIP() << "one OpenCL device only (PoCL exposes two with POCL_DEVICES='pthread pthread')";
  Device& d0 = *devices().opencl[0];
  Device& d1 = *devices().opencl[1];
  auto m0 = d0.allocate(8192);
  auto m1 = d1.allocate(8192);
  ASSERT_TRUE(m0.ok() && m1.ok());
  Buffer src{&d0, *m0, 5000, 64};
  Buffer dst{&d1, *m1, 5000, 2048};
  std::vector<unsigned char> bytes(5000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i ^ (i >> 8));
  ASSERT_TRUE(d0.write(src, 0, bytes.data(), bytes.size()).ok());
  ASSERT_TRUE(d1.copy_from(dst, src));  // clEnqueueCopyBuffer: one context
  std::vector<unsigned char> back(5000);
  ASSERT_TRUE(d1.read(dst, 0, back.data(), back.size()).ok());
  EXPECT_EQ(back, bytes);
  // A cpu buffer is not the OpenCL device's to copy: the engine stages it.
  EXPECT_FALSE(d1.copy_from(dst, Buffer{&cpu0(), bytes.data(), bytes.size(), 0}));
  d0.free(*m0, 8192);
  d1.free(*m1, 8192);

  // Through the engine: opencl:0 -> opencl:1 -> host.
  LocalClientOptions o;
  o.devices = "cpu:0,opencl:*";
  auto client = make_local_client(o);
  ASSERT_TRUE(client.ok());
  HostTensor h = random_floats({257, 3}, 99);
  auto a = (*client)->upload(h.view(), "opencl:0");
  ASSERT_TRUE(a.ok());
  auto b = (*client)->copy(*a, "opencl:1");
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto r = (*client)->read(*b);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(0, std::memcmp(r->data(), h.data(), static_cast<size_t>(h.nbytes())));
}

// ---- generated element-wise kernels, one op at a time, against the reference kernels ----

struct OpCase {
  std::string op;
  std::vector<Shape> shapes;
  AttributeMap attrs = {};
  DType dtype = DType::kFloat32;
  float lo = -3, hi = 3;
};

HostTensor random_of(DType dtype, const Shape& shape, uint32_t seed, float lo, float hi) {
  HostTensor f = random_floats(shape, seed, lo, hi);
  if (dtype == DType::kFloat32) return f;
  HostTensor t(dtype, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = f.data<float>()[i];
    if (dtype == DType::kInt32) t.mutable_data<int32_t>()[i] = static_cast<int32_t>(std::lround(v * 10));
    if (dtype == DType::kInt64) t.mutable_data<int64_t>()[i] = static_cast<int64_t>(std::lround(v * 10));
    if (dtype == DType::kBool) t.mutable_data<bool>()[i] = v > 0;
  }
  return t;
}

// Runs one node on opencl:0 through the executor (fusion off: the per-node kernel) and checks
// it ran as a generated kernel and agrees with the reference kernels.
void check_op(const OpCase& c) {
  Graph g;
  g.name = c.op;
  std::vector<std::string> names;
  std::vector<HostTensor> inputs;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    names.push_back("x" + std::to_string(i));
    DType dt = c.dtype;
    if (c.op == "Where" && i == 0) dt = DType::kBool;
    inputs.push_back(random_of(dt, c.shapes[i], static_cast<uint32_t>(i * 31 + 5), c.lo, c.hi));
    g.inputs.push_back({names.back(), inputs.back().type()});
  }
  g.nodes = {node("n", c.op, names, {"y"}, c.attrs)};
  g.outputs = {{"y", {}}};
  std::vector<TensorType> types;
  for (const auto& in : g.inputs) types.push_back(in.type);
  CompileOptions opts;
  opts.strict_device = true;  // a node opencl:0 does not take is an error, not a fallback
  auto exe = Executable::compile(g, types, target_cl0(), opts);
  ASSERT_TRUE(exe.ok()) << c.op << ": " << exe.status().to_string();
  EXPECT_TRUE((*exe)->fallbacks().empty()) << c.op;
  TestServices s;
  std::vector<Result<DeviceTensor>> in;
  for (const auto& h : inputs) in.push_back(put(s, cl0(), h));
  const int64_t launched = opencl::kernels_launched();
  auto outs = (*exe)->run(in, s);
  ASSERT_EQ(outs.size(), 1u);
  ASSERT_TRUE(outs[0].ok()) << c.op << ": " << outs[0].status().to_string();
  EXPECT_EQ(opencl::kernels_launched() - launched, 1) << c.op;
  EXPECT_EQ(s.transfers, 0) << c.op;
  auto want = reference(g, inputs);
  ASSERT_EQ(want.size(), 1u);
  expect_near(get(*outs[0]), want[0], c.op + " " + opencl::last_source());
}

// Many ops over the same inputs in one graph: with fusion they form one region, so one
// generated kernel (one compile: PoCL takes ~0.5 s per program) checks them all; every output
// is compared with the reference kernels.
struct FusedOp {
  std::string op;
  int inputs = 1;
  AttributeMap attrs = {};
};

void check_fused(const std::vector<FusedOp>& ops, const std::vector<Shape>& shapes,
                 DType dtype = DType::kFloat32, float lo = -3, float hi = 3) {
  Graph g;
  g.name = "ops";
  std::vector<HostTensor> inputs;
  std::vector<TensorType> types;
  for (size_t i = 0; i < shapes.size(); ++i) {
    inputs.push_back(random_of(dtype, shapes[i], static_cast<uint32_t>(i * 17 + 3), lo, hi));
    g.inputs.push_back({"x" + std::to_string(i), inputs.back().type()});
    types.push_back(inputs.back().type());
  }
  std::string names;
  for (size_t k = 0; k < ops.size(); ++k) {
    std::vector<std::string> in;
    for (int i = 0; i < ops[k].inputs; ++i) in.push_back("x" + std::to_string(i));
    const std::string y = "y" + std::to_string(k);
    g.nodes.push_back(node(ops[k].op + std::to_string(k), ops[k].op, in, {y}, ops[k].attrs));
    g.outputs.push_back({y, {}});
    names += ops[k].op + " ";
  }
  CompileOptions opts;
  opts.strict_device = true;
  auto exe = Executable::compile(g, types, target_cl0(), opts);
  ASSERT_TRUE(exe.ok()) << names << exe.status().to_string();
  if (ops.size() > 1) {
    EXPECT_NE((*exe)->describe().find("OpenClElementwise: " + std::to_string(ops.size()) + " ops"),
              std::string::npos) << (*exe)->describe();
  }
  TestServices s;
  std::vector<Result<DeviceTensor>> in;
  for (const auto& h : inputs) in.push_back(put(s, cl0(), h));
  const int64_t launched = opencl::kernels_launched();
  auto outs = (*exe)->run(in, s);
  EXPECT_EQ(opencl::kernels_launched() - launched, 1) << names;
  auto want = reference(g, inputs);
  ASSERT_EQ(outs.size(), ops.size());
  ASSERT_EQ(want.size(), ops.size());
  for (size_t k = 0; k < ops.size(); ++k) {
    ASSERT_TRUE(outs[k].ok()) << ops[k].op << ": " << outs[k].status().to_string();
    expect_near(get(*outs[k]), want[k],
                ops[k].op + " over " + shape_to_string(shapes[0]) + "\n" + opencl::last_source());
  }
}

TEST(OpenClKernels, UnaryFloatOpsAgreeWithTheReference) {
  REQUIRE_OPENCL();
  const Shape s = {4, 5, 6};
  std::vector<FusedOp> ops;
  for (const char* op : {"Abs", "Neg", "Relu", "Sign", "Exp", "Tanh", "Sigmoid", "Floor", "Ceil",
                         "Round", "Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Asinh", "Erf",
                         "Softplus", "Softsign", "HardSwish", "Reciprocal", "IsNaN", "IsInf"})
    ops.push_back({op});
  ops.push_back({"LeakyRelu", 1, {{"alpha", Attribute(0.3f)}}});
  ops.push_back({"Elu", 1, {{"alpha", Attribute(0.7f)}}});
  ops.push_back({"Selu"});
  ops.push_back({"Celu", 1, {{"alpha", Attribute(1.5f)}}});
  ops.push_back({"HardSigmoid", 1, {{"alpha", Attribute(0.25f)}, {"beta", Attribute(0.4f)}}});
  ops.push_back({"ThresholdedRelu", 1, {{"alpha", Attribute(0.5f)}}});
  ops.push_back({"IsInf", 1, {{"detect_negative", Attribute(int64_t{0})}}});
  check_fused(ops, {s});
  check_fused({{"Sqrt"}, {"Log"}}, {s}, DType::kFloat32, 0.01f, 5);
  check_fused({{"Acosh"}}, {s}, DType::kFloat32, 1.01f, 5);
  check_fused({{"Asin"}, {"Acos"}, {"Atanh"}}, {s}, DType::kFloat32, -0.99f, 0.99f);
  // Gelu (opset 20): the exact (erf) form and the tanh approximation, fused and alone.
  check_fused({{"Gelu"}, {"Gelu", 1, {{"approximate", Attribute(std::string("tanh"))}}}}, {s});
  check_op({"Gelu", {s}, {{"approximate", Attribute(std::string("tanh"))}}});
  // One op as its own (unfused) kernel: the kernel table's path.
  check_op({"Tanh", {s}});
  check_op({"LeakyRelu", {s}, {{"alpha", Attribute(0.3f)}}});
}

TEST(OpenClKernels, BinaryOpsBroadcastMultidirectionally) {
  REQUIRE_OPENCL();
  const std::vector<std::vector<Shape>> shapes = {
      {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}}, {{2, 1, 4}, {3, 1}}, {{1}, {5, 2}}, {{}, {3, 7}},
      {{6, 1, 5, 1}, {1, 4, 1, 3}}};
  std::vector<FusedOp> ops;
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean", "Equal", "Less",
                         "Greater", "LessOrEqual", "GreaterOrEqual"})
    ops.push_back({op, 2});
  for (const auto& sh : shapes) check_fused(ops, sh);
  check_fused({{"Pow", 2}, {"Mod", 2, {{"fmod", Attribute(int64_t{1})}}}}, {{3, 4}, {4}},
              DType::kFloat32, 0.1f, 3);
  check_fused({{"Sum", 3}, {"Mean", 3}, {"Max", 3}, {"Min", 3}}, {{3, 4}, {4}, {3, 1}});
  check_op({"PRelu", {{2, 3, 4}, {3, 1}}});
  check_op({"Add", {{2, 1, 4}, {3, 1}}});  // the kernel table's path, broadcasting
  check_op({"Where", {{3, 1}, {3, 4}, {4}}});
}

TEST(OpenClKernels, IntegerAndBoolOpsAreExact) {
  REQUIRE_OPENCL();
  for (DType dt : {DType::kInt32, DType::kInt64}) {
    std::vector<FusedOp> ops;
    for (const char* op : {"Add", "Sub", "Mul", "Max", "Min", "Equal", "Less", "Greater"})
      ops.push_back({op, 2});
    for (const char* op : {"Abs", "Neg", "Relu", "Sign"}) ops.push_back({op, 1});
    check_fused(ops, {{2, 3, 4}, {3, 1}}, dt);
    check_op({"Where", {{3, 1}, {3, 4}, {4}}, {}, dt});
  }
  check_fused({{"And", 2}, {"Or", 2}, {"Xor", 2}, {"Equal", 2}, {"Not", 1}}, {{2, 3, 4}, {4}},
              DType::kBool);
  for (DType from : {DType::kFloat32, DType::kInt32, DType::kInt64, DType::kBool}) {
    std::vector<FusedOp> casts;
    for (DType to : {DType::kFloat32, DType::kInt32, DType::kInt64, DType::kBool})
      if (to != from) casts.push_back({"Cast", 1, {{"to", Attribute(static_cast<int64_t>(to))}}});
    check_fused(casts, {{4, 9}}, from, -300, 300);
  }
}

TEST(OpenClKernels, ClipWithScalarBoundsAsInputs) {
  REQUIRE_OPENCL();
  check_op({"Clip", {{4, 5}, {}, {}}});  // random bounds: min may exceed max (all become max)
  check_op({"Clip", {{4, 5}, {1}}});
  check_op({"Clip", {{4, 5}, {}, {}}, {}, DType::kInt32});
}

TEST(OpenClKernels, UnsupportedOpsAndDtypesAreRefusedByName) {
  REQUIRE_OPENCL();
  const KernelTable& k = cl0().kernels();
  Node es = node("es", "Einsum", {"a", "b"}, {"y"});
  Status s = k.supports(es, {{DType::kFloat32, {2, 2}}, {DType::kFloat32, {2, 2}}}, {});
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("Einsum"), std::string::npos) << s.message();
  Node sm = node("sm", "Softmax", {"a"}, {"y"});
  s = k.supports(sm, {{DType::kInt32, {2, 2}}}, {});
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("float32"), std::string::npos) << s.message();
  Node add = node("a", "Add", {"a", "b"}, {"y"});
  EXPECT_EQ(k.supports(add, {{DType::kBool, {2}}, {DType::kBool, {2}}}, {}).code(),
            StatusCode::kUnimplemented);
  EXPECT_EQ(k.supports(add, {{DType::kFloat32, {2, 3}}, {DType::kFloat32, {4}}}, {}).code(),
            StatusCode::kUnimplemented);  // does not broadcast: the cpu reports the error
  Node div = node("d", "Div", {"a", "b"}, {"y"});  // integer division can fail: not here
  EXPECT_FALSE(k.supports(div, {{DType::kInt32, {2}}, {DType::kInt32, {2}}}, {}).ok());
  EXPECT_TRUE(k.supports(add, {{DType::kFloat32, {2, 3}}, {DType::kFloat32, {3}}}, {}).ok());
}

TEST(OpenClKernels, DataMovementRunsOnTheDevice) {
  REQUIRE_OPENCL();
  // Transpose (generated), Reshape / Flatten / Squeeze / Unsqueeze / Identity (views of the
  // input's buffer), Expand (generated broadcast), then element-wise again.
  for (DType dt : {DType::kFloat32, DType::kInt64, DType::kBool}) {
    Graph g;
    g.name = "move";
    g.inputs = {{"x", {dt, {2, 3, 4}}}};
    g.initializers["shape"] = HostTensor::from_vector(std::vector<int64_t>{4, 1, 6}, {3});
    g.initializers["axes"] = HostTensor::from_vector(std::vector<int64_t>{1}, {1});
    g.initializers["big"] = HostTensor::from_vector(std::vector<int64_t>{5, 4, 1, 6}, {4});
    g.nodes = {node("t", "Transpose", {"x"}, {"xt"}, {{"perm", Attribute(std::vector<int64_t>{2, 0, 1})}}),
               node("r", "Reshape", {"xt", "shape"}, {"xr"}),
               node("s", "Squeeze", {"xr", "axes"}, {"xs"}),
               node("u", "Unsqueeze", {"xs", "axes"}, {"xu"}),
               node("e", "Expand", {"xu", "big"}, {"xe"}),
               node("f", "Flatten", {"xe"}, {"xf"}, {{"axis", Attribute(int64_t{2})}}),
               node("i", "Identity", {"xf"}, {"y"}),
               node("t2", "Transpose", {"xe"}, {"y2"}),
               node("sl", "Slice", {"xe", "starts", "ends", "sax", "steps"}, {"y3"})};
    g.initializers["starts"] = HostTensor::from_vector(std::vector<int64_t>{-1, 1, 100}, {3});
    g.initializers["ends"] = HostTensor::from_vector(std::vector<int64_t>{-100, 4, -100}, {3});
    g.initializers["sax"] = HostTensor::from_vector(std::vector<int64_t>{3, 1, 0}, {3});
    g.initializers["steps"] = HostTensor::from_vector(std::vector<int64_t>{-2, 2, -2}, {3});
    g.outputs = {{"y", {}}, {"y2", {}}, {"y3", {}}};
    CompileOptions strict;
    strict.strict_device = true;
    auto exe = Executable::compile(g, {g.inputs[0].type}, target_cl0(), strict);
    ASSERT_TRUE(exe.ok()) << exe.status().to_string();
    TestServices s;
    HostTensor x = random_of(dt, {2, 3, 4}, 5, -3, 3);
    auto outs = (*exe)->run({put(s, cl0(), x)}, s);
    ASSERT_EQ(outs.size(), 3u);
    auto want = reference(g, {x});
    ASSERT_EQ(want.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      ASSERT_TRUE(outs[k].ok()) << outs[k].status().to_string();
      expect_near(get(*outs[k]), want[k], std::string("move ") + dtype_name(dt));
    }
    EXPECT_EQ(s.transfers, 0);
  }
}

TEST(OpenClKernels, ReductionsAgreeWithTheReference) {
  REQUIRE_OPENCL();
  Graph g;
  g.name = "reduce";
  g.inputs = {{"x", {DType::kFloat32, {3, 50, 4}}}};
  g.initializers["axes"] = HostTensor::from_vector(std::vector<int64_t>{0, -1}, {2});
  std::vector<std::string> ops = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                                  "ReduceSumSquare", "ReduceL1", "ReduceL2"};
  for (size_t k = 0; k < ops.size(); ++k) {
    const std::string y = "y" + std::to_string(k);
    // Axes as an input (ReduceSum, opset 13), else as the attribute (the others before 18).
    if (k == 0)
      g.nodes.push_back(node(y, ops[k], {"x", "axes"}, {y}, {{"keepdims", Attribute(int64_t{0})}}));
    else
      g.nodes.push_back(node(y, ops[k], {"x"}, {y},
                             {{"axes", Attribute(k % 2 ? std::vector<int64_t>{1} : std::vector<int64_t>{0, -1})}}));
    g.outputs.push_back({y, {}});
  }
  g.nodes.push_back(node("all", "ReduceMax", {"x"}, {"yall"}));  // every axis
  g.outputs.push_back({"yall", {}});
  g.nodes.push_back(node("prod", "ReduceProd", {"x"}, {"yprod"}, {{"axes", Attribute(std::vector<int64_t>{2})}}));
  g.outputs.push_back({"yprod", {}});
  CompileOptions strict;
  strict.strict_device = true;
  auto exe = Executable::compile(g, {g.inputs[0].type}, target_cl0(), strict);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  TestServices s;
  HostTensor x = random_floats({3, 50, 4}, 8, -2, 2);
  x.mutable_data<float>()[7] = std::nanf("");  // NaN propagates through max/min/sums
  auto outs = (*exe)->run({put(s, cl0(), x)}, s);
  auto want = reference(g, {x});
  ASSERT_EQ(outs.size(), want.size());
  for (size_t k = 0; k < outs.size(); ++k) {
    ASSERT_TRUE(outs[k].ok()) << outs[k].status().to_string();
    expect_near(get(*outs[k]), want[k], g.outputs[k].name + "\n" + opencl::last_source());
  }
  EXPECT_EQ(s.transfers, 0);
}

// ---- fusion and placement ----

// y = relu(x * w + b) * 0.5 + sigmoid(x), with w a [C,1] constant (uploaded) and b a scalar.
Graph chain_graph() {
  Graph g;
  g.name = "chain";
  g.inputs = {{"x", {DType::kFloat32, {4, 3, 5}}}};
  g.initializers["w"] = HostTensor::from_vector(std::vector<float>{0.5f, -1.5f, 2.0f}, {3, 1});
  g.initializers["b"] = HostTensor::from_vector(std::vector<float>{0.25f}, {});
  g.initializers["h"] = HostTensor::from_vector(std::vector<float>{0.5f}, {1});
  g.nodes = {node("mul", "Mul", {"x", "w"}, {"xw"}), node("add", "Add", {"xw", "b"}, {"xb"}),
             node("relu", "Relu", {"xb"}, {"r"}), node("half", "Mul", {"r", "h"}, {"rh"}),
             node("sig", "Sigmoid", {"x"}, {"s"}), node("sum", "Add", {"rh", "s"}, {"y"})};
  g.outputs = {{"y", {}}, {"r", {}}};
  return g;
}

TEST(OpenClFusion, AnElementwiseChainIsOneGeneratedKernel) {
  REQUIRE_OPENCL();
  Graph g = chain_graph();
  auto exe = Executable::compile(g, {g.inputs[0].type}, target_cl0(), {});
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  const std::string d = (*exe)->describe();
  EXPECT_NE(d.find("OpenClElementwise: 6 ops"), std::string::npos) << d;
  EXPECT_EQ(d.find("Op 'relu'"), std::string::npos) << d;  // no node left on its own
  EXPECT_TRUE((*exe)->fallbacks().empty());
  TestServices s;
  HostTensor x = random_floats({4, 3, 5}, 3);
  const int64_t launched = opencl::kernels_launched();
  auto outs = (*exe)->run({put(s, cl0(), x)}, s);
  ASSERT_EQ(outs.size(), 2u);
  ASSERT_TRUE(outs[0].ok()) << outs[0].status().to_string();
  ASSERT_TRUE(outs[1].ok()) << outs[1].status().to_string();
  EXPECT_EQ(opencl::kernels_launched() - launched, 1);  // both outputs from one kernel
  EXPECT_EQ(s.transfers, 0);
  auto want = reference(g, {x});
  ASSERT_EQ(want.size(), 2u);
  expect_near(get(*outs[0]), want[0], "y");
  expect_near(get(*outs[1]), want[1], "r");
}

TEST(OpenClFusion, AGraphSpanningCpuAndOpenClGivesTheReferenceOutputs) {
  REQUIRE_OPENCL();
  // Einsum has no OpenCL kernel yet: it falls back to cpu:0 (counted), the rest runs fused on
  // opencl:0, with copies at the cuts.
  Graph g;
  g.name = "span";
  g.inputs = {{"a", {DType::kFloat32, {8, 16}}}, {"b", {DType::kFloat32, {16, 4}}}};
  g.initializers["bias"] = HostTensor::from_vector(std::vector<float>{1, -1, 0.5f, 2}, {4});
  g.nodes = {node("pre", "Tanh", {"a"}, {"t"}), node("mm", "Einsum", {"t", "b"}, {"m"}, {{"equation", Attribute("ij,jk->ik")}}),
             node("add", "Add", {"m", "bias"}, {"z"}), node("relu", "Relu", {"z"}, {"y"})};
  g.outputs = {{"y", {}}};
  auto exe = Executable::compile(g, {g.inputs[0].type, g.inputs[1].type}, target_cl0(), {});
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  ASSERT_EQ((*exe)->fallbacks().size(), 1u) << (*exe)->describe();
  EXPECT_EQ((*exe)->fallbacks()[0].op, "Einsum");
  EXPECT_NE((*exe)->describe().find("OpenClElementwise: 2 ops"), std::string::npos) << (*exe)->describe();
  TestServices s;
  HostTensor a = random_floats({8, 16}, 11), b = random_floats({16, 4}, 12);
  auto outs = (*exe)->run({put(s, cl0(), a), put(s, cl0(), b)}, s);
  ASSERT_EQ(outs.size(), 1u);
  ASSERT_TRUE(outs[0].ok()) << outs[0].status().to_string();
  EXPECT_EQ(outs[0]->buffer->device, &cl0());
  EXPECT_GE(s.transfers, 3);  // t and b to cpu:0, m back
  expect_near(get(*outs[0]), reference(g, {a, b})[0], "y");

  // Strict: the Einsum is an error naming it instead of a fallback.
  CompileOptions strict;
  strict.strict_device = true;
  auto refused = Executable::compile(g, {g.inputs[0].type, g.inputs[1].type}, target_cl0(), strict);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("Einsum"), std::string::npos)
      << refused.status().to_string();
}

TEST(OpenClFusion, TheEngineRunsGraphsOnOpenClThroughTheClient) {
  REQUIRE_OPENCL();
  LocalClientOptions o;
  o.devices = "cpu:0,opencl:0";
  auto client = make_local_client(o);
  ASSERT_TRUE(client.ok());
  Graph g = chain_graph();
  HostTensor x = random_floats({4, 3, 5}, 21);
  auto got = testing::run_on(**client, g, {x}, "opencl:0");
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  auto want = reference(g, {x});
  ASSERT_EQ(got->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE((*got)[i].ok()) << (*got)[i].status().to_string();
    expect_near(*(*got)[i], want[i], "output " + std::to_string(i));
  }
}

TEST(OpenClCache, ProgramsComeBackFromDiskAndABadEntryIsRebuilt) {
  REQUIRE_OPENCL();
  const std::filesystem::path dir = std::getenv("TENSORD_KERNEL_CACHE");
  // A graph no other test compiles: x * 3.25 + 1.5, fused.
  Graph g;
  g.name = "cache";
  g.inputs = {{"x", {DType::kFloat32, {7, 11}}}};
  g.initializers["a"] = HostTensor::from_vector(std::vector<float>{3.25f}, {});
  g.initializers["b"] = HostTensor::from_vector(std::vector<float>{1.5f}, {});
  g.nodes = {node("m", "Mul", {"x", "a"}, {"xa"}), node("p", "Add", {"xa", "b"}, {"y"})};
  g.outputs = {{"y", {}}};
  HostTensor x = random_floats({7, 11}, 77);
  const HostTensor want = reference(g, {x})[0];
  // Each round on a fresh device (its own in-memory program cache), as a new process would be.
  auto round = [&]() {
    std::unique_ptr<Device> dev;
    for (auto& b : create_backends())
      for (auto& d : b->enumerate())
        if (!dev && d->info().kind == "opencl") dev = std::move(d);
    ASSERT_TRUE(dev);
    CompileTarget t;
    t.device = dev.get();
    t.fallback = &cpu0();
    t.host = &cpu0();
    auto exe = Executable::compile(g, {g.inputs[0].type}, t, {});
    ASSERT_TRUE(exe.ok()) << exe.status().to_string();
    TestServices s;
    auto outs = (*exe)->run({put(s, *dev, x)}, s);
    ASSERT_TRUE(outs[0].ok()) << outs[0].status().to_string();
    expect_near(get(*outs[0]), want, "cache round");
  };
  int64_t built = opencl::programs_built(), hits = opencl::disk_cache_hits();
  round();
  EXPECT_EQ(opencl::programs_built() - built, 1);
  EXPECT_EQ(opencl::disk_cache_hits() - hits, 0);
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_FALSE(files.empty()) << "nothing written to " << dir;
  std::filesystem::path newest = files[0];
  for (const auto& f : files)
    if (std::filesystem::last_write_time(f) > std::filesystem::last_write_time(newest)) newest = f;
  built = opencl::programs_built();
  hits = opencl::disk_cache_hits();
  round();  // from disk
  EXPECT_EQ(opencl::programs_built() - built, 0);
  EXPECT_EQ(opencl::disk_cache_hits() - hits, 1);
  // Corrupt the entry (a byte of the binary flipped): rebuilt from source, still right.
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    char c = 0;
    f.seekg(-5, std::ios::end);
    f.get(c);
    f.seekp(-5, std::ios::end);
    f.put(static_cast<char>(c ^ 0x5a));
  }
  built = opencl::programs_built();
  hits = opencl::disk_cache_hits();
  round();
  EXPECT_EQ(opencl::programs_built() - built, 1);
  EXPECT_EQ(opencl::disk_cache_hits() - hits, 0);
  // Truncated: the same.
  std::filesystem::resize_file(newest, 20);
  built = opencl::programs_built();
  round();
  EXPECT_EQ(opencl::programs_built() - built, 1);
}

// ---- the generator itself (no device) ----

// MatMul, Gemm, Conv, pools, Softmax, normalisations, data movement, ArgMax, CumSum, Resize:
// generated per shape (codegen/templates.h), every node on opencl:0 (strict), against the
// reference kernels.
TEST(OpenClKernels, GeneratedOpsAgreeWithTheReference) {
  REQUIRE_OPENCL();
  Graph g;
  g.name = "templates";
  g.inputs = {{"x", {DType::kFloat32, {2, 4, 6, 6}}}, {"a", {DType::kFloat32, {3, 1, 5, 7}}},
              {"b", {DType::kFloat32, {4, 7, 2}}}};
  auto f = [](Shape s, uint32_t seed) { return random_floats(s, seed); };
  g.initializers["w"] = f({6, 2, 3, 3}, 11);   // Conv, group 2
  g.initializers["bias"] = f({6}, 12);
  g.initializers["ga"] = f({5, 3}, 13);        // Gemm A, transA
  g.initializers["gb"] = f({4, 5}, 14);        // Gemm B, transB
  g.initializers["gc"] = f({4}, 15);
  g.initializers["scale"] = f({6}, 16);
  g.initializers["idx"] = HostTensor::from_vector(std::vector<int64_t>{-1, 0, 3, 2}, {2, 2});
  g.initializers["pads"] = HostTensor::from_vector(std::vector<int64_t>{0, 0, 1, 2, 0, 0, 2, 1}, {8});
  g.initializers["sizes"] = HostTensor::from_vector(std::vector<int64_t>{2, 4, 9, 4}, {4});
  g.initializers["cax"] = HostTensor::from_vector(std::vector<int64_t>{2}, {});
  auto ints = [](std::vector<int64_t> v) { return Attribute(std::move(v)); };
  g.nodes = {
      node("mm", "MatMul", {"a", "b"}, {"mm"}),
      node("gemm", "Gemm", {"ga", "gb", "gc"}, {"gemm"},
           {{"transA", Attribute(int64_t{1})}, {"transB", Attribute(int64_t{1})}, {"alpha", Attribute(0.5f)}}),
      node("conv", "Conv", {"x", "w", "bias"}, {"conv"},
           {{"group", Attribute(int64_t{2})}, {"pads", ints({1, 0, 2, 1})}, {"strides", ints({1, 2})},
            {"dilations", ints({2, 1})}}),
      node("mp", "MaxPool", {"conv"}, {"mp"}, {{"kernel_shape", ints({3, 2})}, {"auto_pad", Attribute(std::string("SAME_UPPER"))}}),
      node("ap", "AveragePool", {"x"}, {"ap"},
           {{"kernel_shape", ints({3, 3})}, {"pads", ints({1, 1, 1, 1})}, {"count_include_pad", Attribute(int64_t{1})}}),
      node("sm", "Softmax", {"conv"}, {"sm"}, {{"axis", Attribute(int64_t{1})}}),
      node("ln", "LayerNormalization", {"x", "scale"}, {"ln"}),
      node("cat", "Concat", {"x", "x"}, {"cat"}, {{"axis", Attribute(int64_t{1})}}),
      node("ga", "Gather", {"x", "idx"}, {"gat"}, {{"axis", Attribute(int64_t{3})}}),
      node("pad", "Pad", {"x", "pads"}, {"pad"}, {{"mode", Attribute(std::string("reflect"))}}),
      node("rs", "Resize", {"x", "", "", "sizes"}, {"rs"}, {{"mode", Attribute(std::string("linear"))}}),
      node("am", "ArgMax", {"x"}, {"am"}, {{"axis", Attribute(int64_t{2})}, {"select_last_index", Attribute(int64_t{1})}}),
      node("cs", "CumSum", {"x", "cax"}, {"cs"}, {{"reverse", Attribute(int64_t{1})}, {"exclusive", Attribute(int64_t{1})}})};
  for (const char* o : {"mm", "gemm", "conv", "mp", "ap", "sm", "ln", "cat", "gat", "pad", "rs", "am", "cs"})
    g.outputs.push_back({o, {}});
  CompileOptions strict;
  strict.strict_device = true;
  std::vector<TensorType> types;
  for (const auto& in : g.inputs) types.push_back(in.type);
  auto exe = Executable::compile(g, types, target_cl0(), strict);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  EXPECT_TRUE((*exe)->fallbacks().empty());
  TestServices s;
  std::vector<HostTensor> inputs = {f({2, 4, 6, 6}, 1), f({3, 1, 5, 7}, 2), f({4, 7, 2}, 3)};
  std::vector<Result<DeviceTensor>> in;
  for (const auto& h : inputs) in.push_back(put(s, cl0(), h));
  auto outs = (*exe)->run(in, s);
  auto want = reference(g, inputs);
  ASSERT_EQ(outs.size(), g.outputs.size());
  ASSERT_EQ(want.size(), g.outputs.size());
  for (size_t k = 0; k < outs.size(); ++k) {
    ASSERT_TRUE(outs[k].ok()) << g.outputs[k].name << ": " << outs[k].status().to_string();
    expect_near(get(*outs[k]), want[k], g.outputs[k].name);
  }
}

// Convolutions through im2col (or none for 1x1) and each GEMM: CLBlast's (tile 0) and the
// generated register-tiled kernel (tiles of 3, with a partial last tile, and of 8); grouped,
// strided, padded, with and without bias, batch 2; depthwise stays on the generated direct
// kernel; MatMul with B shared by the batch is one SGEMM. Against the reference kernels.
TEST(OpenClKernels, ConvolutionAndMatMulGemmPathsAgreeWithTheReference) {
  REQUIRE_OPENCL();
  Graph g;
  g.name = "gemms";
  g.inputs = {{"x", {DType::kFloat32, {2, 6, 9, 8}}}, {"a", {DType::kFloat32, {2, 3, 5, 7}}}};
  auto f = [](Shape s, uint32_t seed) { return random_floats(s, seed); };
  g.initializers["w3"] = f({10, 6, 3, 3}, 21);
  g.initializers["b10"] = f({10}, 22);
  g.initializers["w1"] = f({7, 6, 1, 1}, 23);
  g.initializers["wg"] = f({8, 3, 1, 1}, 24);  // group 2, no bias
  g.initializers["wd"] = f({6, 1, 3, 3}, 25);  // depthwise
  g.initializers["b7"] = f({7}, 26);
  g.initializers["mb"] = f({7, 4}, 27);
  auto ints = [](std::vector<int64_t> v) { return Attribute(std::move(v)); };
  g.nodes = {
      node("c3", "Conv", {"x", "w3", "b10"}, {"c3"}, {{"pads", ints({1, 0, 2, 1})}, {"strides", ints({2, 1})}}),
      node("c1", "Conv", {"x", "w1", "b7"}, {"c1"}),
      node("cg", "Conv", {"x", "wg"}, {"cg"}, {{"group", Attribute(int64_t{2})}}),
      node("cd", "Conv", {"x", "wd"}, {"cd"}, {{"group", Attribute(int64_t{6})}, {"pads", ints({1, 1, 1, 1})}}),
      node("mm", "MatMul", {"a", "mb"}, {"mm"})};
  for (const char* o : {"c3", "c1", "cg", "cd", "mm"}) g.outputs.push_back({o, {}});
  std::vector<HostTensor> inputs = {f({2, 6, 9, 8}, 1), f({2, 3, 5, 7}, 2)};
  auto want = reference(g, inputs);
  CompileOptions strict;
  strict.strict_device = true;
  std::vector<TensorType> types;
  for (const auto& in : g.inputs) types.push_back(in.type);
  // The node kernels (convolutions with constant weights are otherwise fused regions, tested
  // in OpenClFusion.ConvolutionChainsAreOneKernelAndAgreeWithTheReference).
  setenv("TENSORD_OPENCL_NO_CONV_FUSION", "1", 1);
  struct Unset {
    ~Unset() { unsetenv("TENSORD_OPENCL_NO_CONV_FUSION"); }
  } unset;
  for (int64_t tile : {0, 3, 8}) {
    if (tile == 0 && !opencl::set_conv_gemm(cl0(), 0).ok()) continue;  // built without CLBlast
    ASSERT_TRUE(opencl::set_conv_gemm(cl0(), tile).ok());
    auto exe = Executable::compile(g, types, target_cl0(), strict);
    ASSERT_TRUE(exe.ok()) << exe.status().to_string();
    EXPECT_TRUE((*exe)->fallbacks().empty());
    TestServices s;
    std::vector<Result<DeviceTensor>> in;
    for (const auto& h : inputs) in.push_back(put(s, cl0(), h));
    const int64_t blas = opencl::blas_calls();
    auto outs = (*exe)->run(in, s);
    ASSERT_EQ(outs.size(), want.size());
    for (size_t k = 0; k < outs.size(); ++k) {
      ASSERT_TRUE(outs[k].ok()) << g.outputs[k].name << ": " << outs[k].status().to_string();
      expect_near(get(*outs[k]), want[k], fmt::format("{} (conv GEMM tile {})", g.outputs[k].name, tile));
    }
    if (tile == 0) {
      EXPECT_GE(opencl::blas_calls() - blas, 4);  // 3 convolutions + MatMul
    }
  }
  EXPECT_FALSE(opencl::set_conv_gemm(cl0(), 17).ok());
  EXPECT_FALSE(opencl::set_conv_gemm(cpu0(), 8).ok());
  ASSERT_TRUE(opencl::set_conv_gemm(cl0(), 8).ok());  // the default again
}

// Conv + BatchNormalization (folded into the weights by the engine: bnfold) + residual Add +
// activation as one generated kernel: the 1x1 GEMM path (no im2col), im2col + GEMM, grouped,
// depthwise at stride 1 and 2 (vector loads inside the rows, per-lane loads at the borders),
// output widths that are not a multiple of the vector width, and a convolution whose output is
// also read elsewhere (nothing fused after it).
TEST(OpenClFusion, ConvolutionChainsAreOneKernelAndAgreeWithTheReference) {
  REQUIRE_OPENCL();
  Graph g;
  g.name = "conv_chains";
  g.inputs = {{"x", {DType::kFloat32, {2, 8, 11, 13}}}, {"z", {DType::kFloat32, {1, 4, 5, 40}}}};
  auto f = [](Shape s, uint32_t seed, float lo = -1, float hi = 1) { return random_floats(s, seed, lo, hi); };
  auto bn = [&](const std::string& p, int64_t c, uint32_t seed) {
    g.initializers[p + "_s"] = f({c}, seed, 0.5f, 1.5f);
    g.initializers[p + "_b"] = f({c}, seed + 1);
    g.initializers[p + "_m"] = f({c}, seed + 2);
    g.initializers[p + "_v"] = f({c}, seed + 3, 0.2f, 2.0f);
    return std::vector<std::string>{p + "_s", p + "_b", p + "_m", p + "_v"};
  };
  auto bn_node = [&](const std::string& name, const std::string& in, const std::string& out, int64_t c,
                     uint32_t seed) {
    auto p = bn(name, c, seed);
    return node(name, "BatchNormalization", {in, p[0], p[1], p[2], p[3]}, {out},
                {{"epsilon", Attribute(1e-3f)}});
  };
  auto ints = [](std::vector<int64_t> v) { return Attribute(std::move(v)); };
  g.initializers["w3"] = f({12, 8, 3, 3}, 1);
  g.initializers["b3"] = f({12}, 2);
  g.initializers["w1"] = f({8, 8, 1, 1}, 3);
  g.initializers["wd"] = f({8, 1, 3, 3}, 4);
  g.initializers["wd2"] = f({8, 1, 3, 3}, 5);
  g.initializers["wg"] = f({6, 4, 1, 1}, 6);
  g.initializers["wz"] = f({4, 1, 3, 3}, 7);
  g.initializers["wz2"] = f({4, 1, 3, 3}, 8);
  g.initializers["w6"] = f({5, 8, 1, 1}, 9);
  g.initializers["lo"] = HostTensor::from_vector(std::vector<float>{0.0f}, {});
  g.initializers["hi"] = HostTensor::from_vector(std::vector<float>{0.5f}, {});
  g.nodes = {
      // im2col + GEMM: Conv(bias) + BN + Relu
      node("c1", "Conv", {"x", "w3", "b3"}, {"c1"}, {{"pads", ints({1, 1, 1, 1})}, {"strides", ints({2, 2})}}),
      bn_node("bn1", "c1", "n1", 12, 10), node("r1", "Relu", {"n1"}, {"y1"}),
      // 1x1: Conv + BN + Add(x) + Clip(0, 0.5)
      node("c2", "Conv", {"x", "w1"}, {"c2"}), bn_node("bn2", "c2", "n2", 8, 20),
      node("a2", "Add", {"x", "n2"}, {"s2"}), node("k2", "Clip", {"s2", "lo", "hi"}, {"y2"}),
      // depthwise, stride 1: Conv + BN + HardSwish
      node("c3", "Conv", {"x", "wd"}, {"c3"}, {{"group", Attribute(int64_t{8})}, {"pads", ints({1, 1, 1, 1})}}),
      bn_node("bn3", "c3", "n3", 8, 30), node("h3", "HardSwish", {"n3"}, {"y3"}),
      // depthwise, stride 2, no BN: Conv + LeakyRelu
      node("c4", "Conv", {"x", "wd2"}, {"c4"},
           {{"group", Attribute(int64_t{8})}, {"pads", ints({1, 1, 1, 1})}, {"strides", ints({2, 2})}}),
      node("l4", "LeakyRelu", {"c4"}, {"y4"}, {{"alpha", Attribute(0.1f)}}),
      // grouped 1x1 + Sigmoid
      node("c5", "Conv", {"x", "wg"}, {"c5"}, {{"group", Attribute(int64_t{2})}}),
      node("s5", "Sigmoid", {"c5"}, {"y5"}),
      // wide rows: the depthwise kernel's vector loads, stride 1 and 2
      node("cz", "Conv", {"z", "wz"}, {"cz"}, {{"group", Attribute(int64_t{4})}, {"pads", ints({1, 1, 1, 1})}}),
      bn_node("bnz", "cz", "nz", 4, 40), node("rz", "Relu", {"nz"}, {"yz"}),
      node("cz2", "Conv", {"z", "wz2"}, {"yz2"},
           {{"group", Attribute(int64_t{4})}, {"pads", ints({0, 1, 2, 1})}, {"strides", ints({1, 2})}}),
      // the conv output is a graph output and read by the Relu: nothing fused after it
      node("c6", "Conv", {"x", "w6"}, {"c6"}), node("r6", "Relu", {"c6"}, {"y6"})};
  for (const char* o : {"y1", "y2", "y3", "y4", "y5", "yz", "yz2", "c6", "y6"}) g.outputs.push_back({o, {}});
  std::vector<HostTensor> inputs = {f({2, 8, 11, 13}, 100, -2, 2), f({1, 4, 5, 40}, 101, -2, 2)};
  auto want = reference(g, inputs);
  CompileOptions strict;
  strict.strict_device = true;
  std::vector<TensorType> types;
  for (const auto& in : g.inputs) types.push_back(in.type);
  for (int64_t tile : {3, 8}) {
    ASSERT_TRUE(opencl::set_conv_gemm(cl0(), tile).ok());
    const int64_t regions = opencl::conv_regions_built();
    auto exe = Executable::compile(g, types, target_cl0(), strict);
    ASSERT_TRUE(exe.ok()) << exe.status().to_string();
    EXPECT_TRUE((*exe)->fallbacks().empty());
    EXPECT_EQ(opencl::conv_regions_built() - regions, 8);
    const std::string d = (*exe)->describe();
    for (const char* chain : {"Conv+Relu as 1 im2col + GEMM kernels",
                              "Conv+Add+Clip as 1 1x1 GEMM kernel",
                              "Conv+HardSwish as 1 depthwise kernel",
                              "Conv+LeakyRelu as 1 depthwise kernel", "Conv+Sigmoid as 1 1x1 GEMM kernel",
                              "Conv+Relu as 1 depthwise kernel over [1, 4, 5, 40]"})
      EXPECT_NE(d.find(chain), std::string::npos) << chain << "\n" << d;
    EXPECT_EQ(d.find("Op 'bn1'"), std::string::npos) << d;  // folded, not run
    TestServices s;
    std::vector<Result<DeviceTensor>> in;
    for (const auto& h : inputs) in.push_back(put(s, cl0(), h));
    const int64_t launched = opencl::kernels_launched();
    auto outs = (*exe)->run(in, s);
    // One kernel per chain, im2col for the 3x3 GEMM, the Relu after c6 on its own.
    EXPECT_EQ(opencl::kernels_launched() - launched, 10);
    ASSERT_EQ(outs.size(), want.size());
    for (size_t k = 0; k < outs.size(); ++k) {
      ASSERT_TRUE(outs[k].ok()) << g.outputs[k].name << ": " << outs[k].status().to_string();
      expect_near(get(*outs[k]), want[k], fmt::format("{} (tile {})", g.outputs[k].name, tile));
    }
  }
  ASSERT_TRUE(opencl::set_conv_gemm(cl0(), 8).ok());

  // Through the engine, run after run: no clCreateBuffer (the pool holds every size, im2col's
  // columns included), the same launches, one clFinish (at the end of the run).
  LocalClientOptions o;
  o.devices = "cpu:0,opencl:0";
  auto client = make_local_client(o);
  ASSERT_TRUE(client.ok());
  for (int run = 0; run < 3; ++run) {
    const int64_t buffers = opencl::buffers_created(), launched = opencl::kernels_launched(),
                  finishes = opencl::queue_finishes();
    auto got = testing::run_on(**client, g, inputs, "opencl:0");
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_EQ(got->size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      ASSERT_TRUE((*got)[k].ok()) << (*got)[k].status().to_string();
      expect_near(*(*got)[k], want[k], fmt::format("{} (engine run {})", g.outputs[k].name, run));
    }
    if (run == 2) {
      EXPECT_EQ(opencl::buffers_created() - buffers, 0) << "buffers created by a run";
      EXPECT_EQ(opencl::kernels_launched() - launched, 10);
      EXPECT_EQ(opencl::queue_finishes() - finishes, 1);
    }
  }
}

// A Conv's output read by a Relu and, inside a Loop's body, by an Add (a read of the outer
// scope, not among the Loop's inputs): the Conv's output must stay a value of its own, so no
// Conv+Relu chain may be fused. (Readers counted from node inputs alone saw the Relu as the
// only one, fused, and the Loop found no value to read.)
Graph conv_read_inside_a_loop() {
  Graph g;
  g.name = "conv_read_in_loop";
  g.inputs = {{"x", {DType::kFloat32, {1, 8, 6, 6}}}, {"acc", {DType::kFloat32, {1, 8, 6, 6}}}};
  g.initializers["w"] = random_floats({8, 8, 1, 1}, 11, -1, 1);
  g.initializers["M"] = HostTensor::scalar<int64_t>(2);
  g.initializers["go"] = HostTensor::scalar<bool>(true);
  auto body = std::make_shared<Graph>();
  body->name = "body";
  body->inputs = {{"i", {DType::kInt64, {}}}, {"c_in", {DType::kBool, {}}},
                  {"a", {DType::kFloat32, {1, 8, 6, 6}}}};
  body->nodes = {node("keep", "Identity", {"c_in"}, {"c_out"}),
                 node("add", "Add", {"a", "conv"}, {"a_out"})};
  body->outputs = {{"c_out", {}}, {"a_out", {}}};
  g.nodes = {node("conv", "Conv", {"x", "w"}, {"conv"}), node("relu", "Relu", {"conv"}, {"y"}),
             node("loop", "Loop", {"M", "go", "acc"}, {"z"},
                  {{"body", Attribute(std::shared_ptr<const Graph>(body))}})};
  g.outputs = {{"y", {}}, {"z", {}}};
  return g;
}

TEST(OpenClFusion, NothingIsFusedAcrossAValueReadInsideALoopBody) {
  REQUIRE_OPENCL();
  const Graph g = conv_read_inside_a_loop();
  const std::vector<HostTensor> inputs = {random_floats({1, 8, 6, 6}, 12),
                                          random_floats({1, 8, 6, 6}, 13)};
  auto want = reference(g, inputs);
  LocalClientOptions o;
  o.devices = "cpu:0,opencl:0";
  auto client = make_local_client(o);
  ASSERT_TRUE(client.ok());
  for (const char* device : {"opencl:0", "cpu:0"}) {
    auto got = testing::run_on(**client, g, inputs, device);
    ASSERT_TRUE(got.ok()) << device << ": " << got.status().to_string();
    ASSERT_EQ(got->size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      ASSERT_TRUE((*got)[k].ok()) << device << " " << g.outputs[k].name << ": "
                                  << (*got)[k].status().to_string();
      expect_near(*(*got)[k], want[k], fmt::format("{} on {}", g.outputs[k].name, device));
    }
  }
}

// A fused Relu or Clip keeps a NaN as ONNX (and the reference kernels) do, on the vector
// path and the tail of a row (143 positions: 17 full vectors of 8 and 7 lanes), for the 1x1
// GEMM, im2col + GEMM and depthwise kernels; other outputs are unchanged.
TEST(OpenClFusion, FusedReluAndClipKeepNaN) {
  REQUIRE_OPENCL();
  Graph g;
  g.name = "conv_nan";
  g.inputs = {{"x", {DType::kFloat32, {1, 4, 11, 13}}}};
  auto ints = [](std::vector<int64_t> v) { return Attribute(std::move(v)); };
  g.initializers["w1"] = random_floats({6, 4, 1, 1}, 1, -1, 1);
  g.initializers["w2"] = random_floats({6, 4, 1, 1}, 4, -1, 1);  // (one w1 Conv twice: cse)
  g.initializers["w3"] = random_floats({5, 4, 3, 3}, 2, -1, 1);
  g.initializers["wd"] = random_floats({4, 1, 3, 3}, 3, -1, 1);
  g.initializers["lo"] = HostTensor::from_vector(std::vector<float>{-0.25f}, {});
  g.initializers["hi"] = HostTensor::from_vector(std::vector<float>{0.5f}, {});
  g.nodes = {node("c1", "Conv", {"x", "w1"}, {"c1"}), node("r1", "Relu", {"c1"}, {"y1"}),
             node("c2", "Conv", {"x", "w2"}, {"c2"}), node("k2", "Clip", {"c2", "lo", "hi"}, {"y2"}),
             node("c3", "Conv", {"x", "w3"}, {"c3"}, {{"pads", ints({1, 1, 1, 1})}}),
             node("r3", "Relu", {"c3"}, {"y3"}),
             node("c4", "Conv", {"x", "wd"}, {"c4"}, {{"group", Attribute(int64_t{4})}, {"pads", ints({1, 1, 1, 1})}}),
             node("k4", "Clip", {"c4", "lo", "hi"}, {"y4"})};
  for (const char* o : {"y1", "y2", "y3", "y4"}) g.outputs.push_back({o, {}});
  HostTensor x = random_floats({1, 4, 11, 13}, 7, -2, 2);
  // NaN in a full vector, in the tail of the last row, and at a border of channel 2.
  for (int64_t i : {int64_t{9}, int64_t{140}, int64_t{2 * 143 + 13}})
    x.mutable_data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
  auto want = reference(g, {x});
  int64_t nans = 0;
  for (const auto& w : want)
    for (int64_t i = 0; i < w.numel(); ++i) nans += std::isnan(w.data<float>()[i]) ? 1 : 0;
  ASSERT_GT(nans, 0) << "the reference keeps no NaN: the test checks nothing";
  CompileOptions strict;
  strict.strict_device = true;
  const int64_t regions = opencl::conv_regions_built();
  auto exe = Executable::compile(g, {x.type()}, target_cl0(), strict);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  EXPECT_EQ(opencl::conv_regions_built() - regions, 4) << (*exe)->describe();
  TestServices s;
  std::vector<Result<DeviceTensor>> in = {put(s, cl0(), x)};
  auto outs = (*exe)->run(in, s);
  ASSERT_EQ(outs.size(), want.size());
  for (size_t k = 0; k < outs.size(); ++k) {
    ASSERT_TRUE(outs[k].ok()) << g.outputs[k].name << ": " << outs[k].status().to_string();
    expect_near(get(*outs[k]), want[k], g.outputs[k].name);
  }
}

// tensord tune writes the device's tuning file (Xgemm checked against the host, the
// convolutions' GEMM, the work-group size) and a backend started afterwards reads it.
TEST(OpenClTune, StoresChoicesThatTheNextStartReads) {
  REQUIRE_OPENCL();
  const auto dir = std::filesystem::temp_directory_path() / ("tensord-tune-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ::setenv("TENSORD_TUNE_CACHE", dir.c_str(), 1);
  opencl::TuneOptions o;
  o.device = cl0().info().name;
  o.sizes = {128};
  o.repeats = 1;
  o.budget_seconds = 1;  // the first candidate of each kind still runs
  std::ostringstream report;
  Status st = opencl::tune(o, report);
  ASSERT_TRUE(st.ok()) << st.to_string() << "\n" << report.str();
  EXPECT_NE(report.str().find("Stored in"), std::string::npos) << report.str();
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  std::ifstream in(files[0]);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str().rfind("device ", 0), 0u) << text.str();
  EXPECT_NE(text.str().find("\nconv_gemm "), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("\nlocal_size "), std::string::npos) << text.str();
  auto backend = opencl::create_opencl_backend();
  auto fresh = backend->enumerate();
  ASSERT_FALSE(fresh.empty());
  EXPECT_NE(fresh[0]->info().backend_version.find("tuned: "), std::string::npos) << fresh[0]->info().backend_version;
  // Another device's (or driver's) file is not applied.
  std::ofstream(files[0], std::ios::trunc) << "device some other|device|1.0\nlocal_size 1\n";
  auto other = backend->enumerate();
  EXPECT_EQ(other[0]->info().backend_version.find("tuned: "), std::string::npos) << other[0]->info().backend_version;
  ::unsetenv("TENSORD_TUNE_CACHE");
  std::filesystem::remove_all(dir);
}

TEST(OpenClKernels, AnOutOfRangeIndexIsAnErrorNamingIt) {
  REQUIRE_OPENCL();
  Graph g;
  g.name = "gather";
  g.inputs = {{"x", {DType::kFloat32, {3, 4}}}, {"i", {DType::kInt64, {2}}}};
  g.nodes = {node("ga", "Gather", {"x", "i"}, {"y"})};
  g.outputs = {{"y", {}}};
  CompileOptions strict;
  strict.strict_device = true;
  auto exe = Executable::compile(g, {g.inputs[0].type, g.inputs[1].type}, target_cl0(), strict);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  TestServices s;
  auto outs = (*exe)->run({put(s, cl0(), random_floats({3, 4}, 1)),
                           put(s, cl0(), HostTensor::from_vector(std::vector<int64_t>{1, 7}, {2}))}, s);
  ASSERT_EQ(outs.size(), 1u);
  ASSERT_FALSE(outs[0].ok());
  EXPECT_NE(outs[0].status().message().find("index 7"), std::string::npos) << outs[0].status().to_string();
}

// RNN, GRU and LSTM on opencl:0 (strict: no fallback) as a static loop of CLBlast GEMMs and
// generated step kernels, against the reference kernels on random inputs: every direction,
// both layouts, GRU with linear_before_reset 0 and 1, with and without B, initial_h /
// initial_c, LSTM peepholes and input_forget, sequence_lens with different lengths (one 0).
TEST(OpenClRecurrent, RnnGruLstmRunOnTheDeviceAndAgreeWithTheReference) {
  REQUIRE_OPENCL();
  const int64_t S = 5, B = 3, I = 4, H = 6;
  Graph g;
  g.name = "recurrent";
  g.inputs = {{"x", {DType::kFloat32, {S, B, I}}}, {"xb", {DType::kFloat32, {B, S, I}}}};
  auto f = [](Shape s, uint32_t seed) { return random_floats(s, seed, -1, 1); };
  auto str = [](const char* v) { return Attribute(std::string(v)); };
  auto i64 = [](int64_t v) { return Attribute(v); };
  const Attribute hs = i64(H);
  // LSTM, bidirectional, everything given, lengths 5, 2, 0.
  g.initializers["lw"] = f({2, 4 * H, I}, 1);
  g.initializers["lr"] = f({2, 4 * H, H}, 2);
  g.initializers["lb"] = f({2, 8 * H}, 3);
  g.initializers["lens"] = HostTensor::from_vector(std::vector<int32_t>{5, 2, 0}, {B});
  g.initializers["lh0"] = f({2, B, H}, 4);
  g.initializers["lc0"] = f({2, B, H}, 5);
  g.initializers["lp"] = f({2, 3 * H}, 6);
  // GRU, bidirectional, linear_before_reset 0, B and initial_h.
  g.initializers["gw"] = f({2, 3 * H, I}, 7);
  g.initializers["gr"] = f({2, 3 * H, H}, 8);
  g.initializers["gb"] = f({2, 6 * H}, 9);
  g.initializers["gh0"] = f({2, B, H}, 10);
  // GRU, reverse, linear_before_reset 1, layout 1, no B.
  g.initializers["g1w"] = f({1, 3 * H, I}, 11);
  g.initializers["g1r"] = f({1, 3 * H, H}, 12);
  // RNN forward with B; LSTM reverse, layout 1, input_forget, no B.
  g.initializers["rw"] = f({1, H, I}, 13);
  g.initializers["rr"] = f({1, H, H}, 14);
  g.initializers["rb"] = f({1, 2 * H}, 15);
  g.initializers["l1w"] = f({1, 4 * H, I}, 16);
  g.initializers["l1r"] = f({1, 4 * H, H}, 17);
  g.nodes = {
      node("lstm", "LSTM", {"x", "lw", "lr", "lb", "lens", "lh0", "lc0", "lp"}, {"ly", "lyh", "lyc"},
           {{"hidden_size", hs}, {"direction", str("bidirectional")}}),
      node("gru", "GRU", {"x", "gw", "gr", "gb", "", "gh0"}, {"gy", "gyh"},
           {{"hidden_size", hs}, {"direction", str("bidirectional")}}),
      node("gru1", "GRU", {"xb", "g1w", "g1r"}, {"g1y", "g1yh"},
           {{"hidden_size", hs}, {"direction", str("reverse")}, {"linear_before_reset", i64(1)},
            {"layout", i64(1)}}),
      node("rnn", "RNN", {"x", "rw", "rr", "rb"}, {"ry", "ryh"}, {{"hidden_size", hs}}),
      node("lstm1", "LSTM", {"xb", "l1w", "l1r"}, {"", "l1yh", "l1yc"},
           {{"hidden_size", hs}, {"direction", str("reverse")}, {"layout", i64(1)}, {"input_forget", i64(1)}})};
  for (const char* o : {"ly", "lyh", "lyc", "gy", "gyh", "g1y", "g1yh", "ry", "ryh", "l1yh", "l1yc"})
    g.outputs.push_back({o, {}});
  CompileOptions strict;
  strict.strict_device = true;
  auto exe = Executable::compile(g, {g.inputs[0].type, g.inputs[1].type}, target_cl0(), strict);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  EXPECT_TRUE((*exe)->fallbacks().empty()) << (*exe)->describe();
  EXPECT_NE((*exe)->describe().find("clblast+generated loop"), std::string::npos) << (*exe)->describe();
  TestServices s;
  const std::vector<HostTensor> inputs = {f({S, B, I}, 20), f({B, S, I}, 21)};
  std::vector<Result<DeviceTensor>> in;
  for (const auto& h : inputs) in.push_back(put(s, cl0(), h));
  const int64_t blas = opencl::blas_calls();
  auto outs = (*exe)->run(in, s);
  // Per node: one input-projection GEMM, then one GEMM per step (two for GRU with
  // linear_before_reset 0): 5 nodes x (1 + 5) + 5 more for the first GRU.
  EXPECT_EQ(opencl::blas_calls() - blas, 5 * (1 + S) + S);
  EXPECT_EQ(s.transfers, 0);
  auto want = reference(g, inputs);
  ASSERT_EQ(outs.size(), g.outputs.size());
  ASSERT_EQ(want.size(), g.outputs.size());
  for (size_t k = 0; k < outs.size(); ++k) {
    ASSERT_TRUE(outs[k].ok()) << g.outputs[k].name << ": " << outs[k].status().to_string();
    expect_near(get(*outs[k]), want[k], g.outputs[k].name);
  }
  // The step's products inside the step kernels with ping-pong states (what a CPU device uses
  // at batch 1-2): only the input projections are GEMMs.
  setenv("TENSORD_OPENCL_RNN_GEMM", "generated", 1);
  const int64_t blas2 = opencl::blas_calls();
  auto outs2 = (*exe)->run(in, s);
  unsetenv("TENSORD_OPENCL_RNN_GEMM");
  EXPECT_EQ(opencl::blas_calls() - blas2, 5);
  ASSERT_EQ(outs2.size(), g.outputs.size());
  for (size_t k = 0; k < outs2.size(); ++k) {
    ASSERT_TRUE(outs2[k].ok()) << g.outputs[k].name << ": " << outs2[k].status().to_string();
    expect_near(get(*outs2[k]), want[k], g.outputs[k].name + " (generated products)");
  }
}

// What the generated loop does not cover is refused by name (and falls back to cpu:0 when not
// strict); a sequence length out of range is an error naming it.
TEST(OpenClRecurrent, UncoveredAttributesAreRefusedByNameAndBadLengthsAreErrors) {
  REQUIRE_OPENCL();
  const int64_t S = 3, B = 2, I = 2, H = 3;
  Graph g;
  g.name = "clipped";
  g.inputs = {{"x", {DType::kFloat32, {S, B, I}}}};
  g.initializers["w"] = random_floats({1, 4 * H, I}, 1, -1, 1);
  g.initializers["r"] = random_floats({1, 4 * H, H}, 2, -1, 1);
  g.nodes = {node("clipped_lstm", "LSTM", {"x", "w", "r"}, {"y"},
                  {{"hidden_size", Attribute(H)}, {"clip", Attribute(0.5f)}})};
  g.outputs = {{"y", {}}};
  CompileOptions strict;
  strict.strict_device = true;
  auto refused = Executable::compile(g, {g.inputs[0].type}, target_cl0(), strict);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("clip"), std::string::npos) << refused.status().to_string();
  auto fallback = Executable::compile(g, {g.inputs[0].type}, target_cl0(), CompileOptions{});
  ASSERT_TRUE(fallback.ok()) << fallback.status().to_string();
  ASSERT_EQ((*fallback)->fallbacks().size(), 1u);
  EXPECT_EQ((*fallback)->fallbacks()[0].op, "LSTM");
  Node relu = node("relu_rnn", "RNN", {"x", "w", "r"}, {"y"},
                   {{"hidden_size", Attribute(H)}, {"activations", Attribute(std::vector<std::string>{"Relu"})}});
  auto plan = codegen::plan_recurrent(relu, {{DType::kFloat32, {S, B, I}}, {DType::kFloat32, {1, H, I}},
                                             {DType::kFloat32, {1, H, H}}});
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("relu"), std::string::npos) << plan.status().to_string();
  // sequence_lens[1] = 4 > seq_length 3.
  Graph bad;
  bad.name = "bad_lens";
  bad.inputs = {{"x", {DType::kFloat32, {S, B, I}}}, {"lens", {DType::kInt32, {B}}}};
  bad.initializers["w"] = random_floats({1, H, I}, 3, -1, 1);
  bad.initializers["r"] = random_floats({1, H, H}, 4, -1, 1);
  bad.nodes = {node("rnn_lens", "RNN", {"x", "w", "r", "", "lens"}, {"y"}, {{"hidden_size", Attribute(H)}})};
  bad.outputs = {{"y", {}}};
  auto exe = Executable::compile(bad, {bad.inputs[0].type, bad.inputs[1].type}, target_cl0(), strict);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  TestServices s;
  auto outs = (*exe)->run({put(s, cl0(), random_floats({S, B, I}, 5)),
                           put(s, cl0(), HostTensor::from_vector(std::vector<int32_t>{3, 4}, {B}))}, s);
  ASSERT_EQ(outs.size(), 1u);
  ASSERT_FALSE(outs[0].ok());
  EXPECT_NE(outs[0].status().message().find("sequence_lens[1] = 4"), std::string::npos)
      << outs[0].status().to_string();
}

TEST(KernelGenerator, TemplatesPrintInBothDialects) {
  Node mm = node("mm", "MatMul", {"a", "b"}, {"y"});
  codegen::OpCall c;
  c.node = &mm;
  c.inputs = {{DType::kFloat32, {2, 3, 4}}, {DType::kFloat32, {4, 5}}};
  c.host = {nullptr, nullptr};
  c.outputs = {{DType::kFloat32, {2, 3, 5}}};
  ASSERT_TRUE(codegen::template_supported(mm, c.inputs).ok());
  auto plan = codegen::plan_template(c);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->kernel.n, 30);
  const std::string cl = codegen::print_template(plan->kernel, codegen::Dialect::kOpenCL);
  const std::string cu = codegen::print_template(plan->kernel, codegen::Dialect::kCuda);
  EXPECT_NE(cl.find("__kernel void"), std::string::npos) << cl;
  EXPECT_NE(cl.find("if (gid >= ((i64)30)) return;"), std::string::npos) << cl;
  EXPECT_NE(cu.find("extern \"C\" __global__ void"), std::string::npos) << cu;
  EXPECT_NE(cu.find("blockIdx.x"), std::string::npos) << cu;
  // A shape that does not fit is an error naming the node, not a kernel.
  c.inputs[1] = {DType::kFloat32, {3, 5}};
  auto bad = codegen::plan_template(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("mm"), std::string::npos) << bad.status().to_string();
}

TEST(KernelGenerator, BroadcastDimsCollapseAndBothDialectsPrint) {
  std::map<std::string, TensorType> t = {{"a", {DType::kFloat32, {2, 3, 4, 5}}},
                                         {"b", {DType::kFloat32, {4, 5}}},
                                         {"y", {DType::kFloat32, {2, 3, 4, 5}}}};
  auto type_of = [&](const std::string& n) -> const TensorType* {
    auto it = t.find(n);
    return it != t.end() ? &it->second : nullptr;
  };
  Node n = node("add", "Add", {"a", "b"}, {"y"});
  auto lowered = codegen::lower_elementwise({&n}, {"y"}, {2, 3, 4, 5}, type_of, nullptr);
  ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
  // [2,3,4,5] + [4,5] is [6,20] + [1,20]: two dims, b broadcast along the first.
  EXPECT_EQ(lowered->kernel.dims, (std::vector<int64_t>{6, 20}));
  EXPECT_EQ(lowered->kernel.inputs[1].strides, (std::vector<int64_t>{0, 1}));
  auto cl = codegen::OpenClPrinter().print(lowered->kernel);
  ASSERT_TRUE(cl.ok());
  EXPECT_NE(cl->find("__kernel void tensord_ew("), std::string::npos) << *cl;
  EXPECT_NE(cl->find("get_global_id(0)"), std::string::npos);
  auto cu = codegen::CudaPrinter().print(lowered->kernel);
  ASSERT_TRUE(cu.ok());
  EXPECT_NE(cu->find("extern \"C\" __global__ void tensord_ew("), std::string::npos) << *cu;
  EXPECT_NE(cu->find("blockIdx.x"), std::string::npos);
  EXPECT_EQ(cu->find("__global const"), std::string::npos);
  Node e = node("exp", "Exp", {"a"}, {"y"});
  auto le = codegen::lower_elementwise({&e}, {"y"}, {2, 3, 4, 5}, type_of, nullptr);
  ASSERT_TRUE(le.ok());
  EXPECT_EQ(le->kernel.dims, (std::vector<int64_t>{120}));
  EXPECT_NE(codegen::CudaPrinter().print(le->kernel)->find("expf("), std::string::npos);
  EXPECT_NE(codegen::OpenClPrinter().print(le->kernel)->find("exp(v0)"), std::string::npos);
}

// The generator's element-wise ops are element-wise or broadcast by their schemas' OpKind.
TEST(OpenClFusion, GeneratedElementwiseOpsAreElementwiseByTheirSchemas) {
  const std::vector<std::string> ops = codegen::elementwise_ops();
  EXPECT_GT(ops.size(), 50u);
  for (const auto& op : ops) {
    EXPECT_NE(OpRegistry::global().find(op), nullptr) << op;
    EXPECT_TRUE(is_elementwise_kind(op_kind(op))) << op << " is " << op_kind_name(op_kind(op));
  }
}

}  // namespace
}  // namespace tensord
