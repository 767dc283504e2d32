// Tier 2: one engine, many devices — placement with fallback to cpu:0, strict_device, copies
// between devices by the cheapest path (and staged through host memory when neither device is
// host-visible), and the engine's caching allocator. Two or three host devices stand in for
// other kinds: the test-only options TENSORD_TEST_CPU_UNSUPPORTED_OPS (ops removed from the
// kernel table of cpu:1 and up) and TENSORD_TEST_CPU_NO_HOST_ACCESS (cpu:1 and up without host
// mapping, peer copies or host adoption) make them look like a GPU that lacks some kernels.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <set>

#include "client/local_client.h"
#include "engine/engine.h"
#include "engine/executor.h"
#include "engine/memory_pool.h"

namespace tensord {
namespace {

struct EnvScope {
  std::vector<std::string> names;
  EnvScope(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [k, v] : vars) {
      setenv(k, v, 1);
      names.push_back(k);
    }
  }
  ~EnvScope() {
    for (const auto& n : names) unsetenv(n.c_str());
  }
};

// An engine whose devices are created under `vars` (the backend reads them at enumeration).
std::shared_ptr<Engine> make_engine(std::initializer_list<std::pair<const char*, const char*>> vars,
                                    bool strict = false) {
  EnvScope env(vars);
  EngineOptions o;
  o.strict_device = strict;
  auto e = Engine::create(o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return std::shared_ptr<Engine>(std::move(e).value());
}

HostTensor random_f32(Shape shape, uint32_t seed) {
  HostTensor t(DType::kFloat32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = d(rng);
  return t;
}

Node node(std::string name, std::string op, std::vector<std::string> in,
          std::vector<std::string> out, AttributeMap attrs = {}) {
  Node n;
  n.name = std::move(name);
  n.op = std::move(op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

// A small convolutional network: Conv -> Relu -> Conv -> Add(residual) -> Sigmoid ->
// GlobalAveragePool -> Flatten -> Gemm, with weights as initializers (constants), and a
// data-dependent tail (Shape -> Reshape) so run-time shape inference runs too.
Graph conv_net() {
  Graph g;
  g.name = "placement_net";
  g.inputs = {{"x", {DType::kFloat32, {1, 3, 8, 8}}}};
  g.initializers["w1"] = random_f32({4, 3, 3, 3}, 1);
  g.initializers["b1"] = random_f32({4}, 2);
  g.initializers["w2"] = random_f32({4, 4, 3, 3}, 3);
  g.initializers["wg"] = random_f32({5, 4}, 4);
  g.initializers["bg"] = random_f32({5}, 5);
  AttributeMap conv = {{"kernel_shape", std::vector<int64_t>{3, 3}},
                       {"pads", std::vector<int64_t>{1, 1, 1, 1}}};
  g.nodes = {
      node("c1", "Conv", {"x", "w1", "b1"}, {"h1"}, conv),
      node("r1", "Relu", {"h1"}, {"a1"}),
      node("c2", "Conv", {"a1", "w2"}, {"h2"}, conv),
      node("add", "Add", {"h2", "a1"}, {"s"}),
      node("sig", "Sigmoid", {"s"}, {"t"}),
      node("gap", "GlobalAveragePool", {"t"}, {"p"}),
      node("flat", "Flatten", {"p"}, {"f"}),
      node("fc", "Gemm", {"f", "wg", "bg"}, {"y"}, {{"transB", int64_t{1}}}),
      node("shape", "Shape", {"y"}, {"ys"}),
      node("back", "Reshape", {"t", "ys2"}, {"z"}),
  };
  // ys2 = [1, -1] + 0 * (max(x) > 100): its value is only known at run time.
  g.initializers["one"] = HostTensor::from_vector(std::vector<int64_t>{1, -1}, {2});
  g.initializers["zeros"] = HostTensor::from_vector(std::vector<int64_t>{0, 0}, {2});
  g.initializers["big"] = HostTensor::from_vector(std::vector<float>{100}, {});
  const std::vector<Node> tail = {
      node("mx", "ReduceMax", {"x"}, {"m"}, {{"keepdims", int64_t{0}}}),
      node("gt", "Greater", {"m", "big"}, {"g"}),
      node("gi", "Cast", {"g"}, {"gl"}, {{"to", int64_t{7}}}),
      node("mz", "Mul", {"gl", "zeros"}, {"z0"}),
      node("sh", "Add", {"z0", "one"}, {"ys2"}),
  };
  g.nodes.insert(g.nodes.end() - 1, tail.begin(), tail.end());
  g.outputs = {{"y", {}}, {"z", {}}, {"ys", {}}};
  return g;
}

std::vector<HostTensor> reference(const Graph& g, const std::vector<HostTensor>& inputs) {
  CompileOptions ref;
  ref.fuse = false;
  auto outs = run_graph_on_host(g, inputs, ref);
  EXPECT_TRUE(outs.ok()) << outs.status().to_string();
  std::vector<HostTensor> r;
  for (auto& o : *outs) {
    EXPECT_TRUE(o.ok()) << o.status().to_string();
    r.push_back(o.ok() ? *o : HostTensor());
  }
  return r;
}

void expect_near(const HostTensor& got, const HostTensor& want, const std::string& what) {
  ASSERT_EQ(got.type(), want.type()) << what;
  const auto a = got.to_double_vector(), b = want.to_double_vector();
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], 1e-5 + 1e-4 * std::abs(b[i])) << what << " element " << i;
}

std::vector<HostTensor> run_on(Engine& e, const Graph& g, const HostTensor& x,
                               const std::string& device, Status* error = nullptr) {
  LocalClient c(std::shared_ptr<Engine>(&e, [](Engine*) {}));
  auto h = c.upload(x.view(), device);
  EXPECT_TRUE(h.ok()) << h.status().to_string();
  auto outs = c.execute(g, {*h}, device);
  if (error) {
    *error = outs.status();
    if (!outs.ok()) return {};
  }
  EXPECT_TRUE(outs.ok()) << outs.status().to_string();
  std::vector<HostTensor> r;
  for (auto o : *outs) {
    EXPECT_EQ(c.info(o)->device, device);
    auto v = c.read(o);
    EXPECT_TRUE(v.ok()) << v.status().to_string();
    r.push_back(v.ok() ? *v : HostTensor());
  }
  return r;
}

TEST(Placement, UnsupportedOpsFallBackToCpu0WithReferenceOutputs) {
  auto e = make_engine({{"TENSORD_CPU_DEVICES", "2"},
                        {"TENSORD_TEST_CPU_UNSUPPORTED_OPS", "Relu,Sigmoid,Reshape"}});
  const Graph g = conv_net();
  const HostTensor x = random_f32({1, 3, 8, 8}, 9);
  const auto want = reference(g, {x});
  const auto got = run_on(*e, g, x, "cpu:1");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) expect_near(got[i], want[i], "output " + std::to_string(i));
  const auto m = e->metrics();
  EXPECT_EQ(m.fallback_nodes, 3);
  EXPECT_EQ(m.fallbacks.at("cpu:1 Relu"), 1);
  EXPECT_EQ(m.fallbacks.at("cpu:1 Sigmoid"), 1);
  EXPECT_EQ(m.fallbacks.at("cpu:1 Reshape"), 1);
  // Values crossed between the devices: copies at the cuts moved bytes.
  EXPECT_GT(m.copies_peer + m.copies_mapped + m.copies_staged, 0);
  // The same graph on cpu:0 (everything supported) has no fallback.
  const auto on0 = run_on(*e, g, x, "cpu:0");
  for (size_t i = 0; i < on0.size(); ++i) expect_near(on0[i], want[i], "cpu:0 output " + std::to_string(i));
  EXPECT_EQ(e->metrics().fallback_nodes, 3);
}

TEST(Placement, DescribeShowsThePlacementAndTheCopies) {
  EnvScope env({{"TENSORD_CPU_DEVICES", "2"}, {"TENSORD_TEST_CPU_UNSUPPORTED_OPS", "Relu"}});
  std::vector<std::unique_ptr<Device>> devices;
  for (auto& b : create_backends())
    for (auto& d : b->enumerate()) devices.push_back(std::move(d));
  ASSERT_GE(devices.size(), 2u);
  CompileTarget t;
  t.device = devices[1].get();
  t.fallback = devices[0].get();
  t.host = devices[0].get();
  const Graph g = conv_net();
  auto exe = Executable::compile(g, {{DType::kFloat32, {1, 3, 8, 8}}}, t, {});
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  const std::string d = (*exe)->describe();
  // The Relu left on cpu:0 between two regions of cpu:1.
  EXPECT_NE(d.find("[cpu:0] fused"), std::string::npos) << d;
  EXPECT_NE(d.find("(1 Relu)"), std::string::npos) << d;
  EXPECT_NE(d.find("[cpu:1] fused"), std::string::npos) << d;
  EXPECT_NE(d.find("copy 'h1' cpu:1 -> cpu:0"), std::string::npos) << d;
  EXPECT_NE(d.find("copy 'a1' cpu:0 -> cpu:1"), std::string::npos) << d;
  EXPECT_NE(d.find("fallback: Relu 'r1' on cpu:0: Relu: cpu:1 has no kernel"), std::string::npos) << d;
  ASSERT_EQ((*exe)->fallbacks().size(), 1u);
  EXPECT_EQ((*exe)->fallbacks()[0].op, "Relu");
  EXPECT_EQ((*exe)->fallback_device(), "cpu:0");
}

TEST(Placement, StrictDeviceRefusesNamingTheOps) {
  auto e = make_engine({{"TENSORD_CPU_DEVICES", "2"},
                        {"TENSORD_TEST_CPU_UNSUPPORTED_OPS", "Relu,Sigmoid"}},
                       /*strict=*/true);
  Status error;
  run_on(*e, conv_net(), random_f32({1, 3, 8, 8}, 9), "cpu:1", &error);
  EXPECT_EQ(error.code(), StatusCode::kUnimplemented) << error.to_string();
  EXPECT_NE(error.message().find("strict device: cpu:1 does not support 2 node(s)"), std::string::npos)
      << error.message();
  EXPECT_NE(error.message().find("Relu ('r1')"), std::string::npos) << error.message();
  EXPECT_NE(error.message().find("Sigmoid ('sig')"), std::string::npos) << error.message();
  EXPECT_EQ(e->metrics().fallback_nodes, 0);
  // Supported everywhere: strict changes nothing.
  Status ok;
  run_on(*e, conv_net(), random_f32({1, 3, 8, 8}, 9), "cpu:0", &ok);
  EXPECT_TRUE(ok.ok()) << ok.to_string();
}

// cpu:1 and cpu:2 without host access: cpu:1 <-> cpu:2 must be staged through a host buffer,
// cpu:0 <-> cpu:N one read or one write; every path byte-exact.
TEST(Placement, StagedCopiesWithoutHostMappingAreByteExact) {
  auto e = make_engine({{"TENSORD_CPU_DEVICES", "3"}, {"TENSORD_TEST_CPU_NO_HOST_ACCESS", "1"}});
  LocalClient c(e);
  HostTensor bytes(DType::kUInt8, {1 << 20});
  std::mt19937 rng(42);
  for (int64_t i = 0; i < bytes.numel(); ++i) bytes.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  HostTensor small = HostTensor::from_vector(std::vector<int64_t>{INT64_MIN, -1, 0, 7, INT64_MAX}, {5});
  for (const HostTensor* t : {&bytes, &small}) {
    auto h0 = c.upload(t->view(), "cpu:0");
    ASSERT_TRUE(h0.ok());
    auto h1 = c.copy(*h0, "cpu:1");   // host-visible -> not: one write
    auto h2 = c.copy(*h1, "cpu:2");   // neither: staged
    auto back = c.copy(*h2, "cpu:0");  // not -> host-visible: one read
    ASSERT_TRUE(h1.ok() && h2.ok() && back.ok());
    for (TensorHandle h : {*h1, *h2, *back}) {
      auto v = c.read(h);
      ASSERT_TRUE(v.ok()) << v.status().to_string();
      ASSERT_EQ(v->nbytes(), t->nbytes());
      EXPECT_EQ(std::memcmp(v->data(), t->data(), t->nbytes()), 0) << c.info(h)->device;
    }
  }
  const auto m = e->metrics();
  EXPECT_EQ(m.copies_staged, 2);
  EXPECT_EQ(m.bytes_staged, (1 << 20) + 40);
  EXPECT_EQ(m.copies_mapped, 4);
  EXPECT_EQ(m.copies_peer, 0);
}

// A graph on a device without host access: constants are uploaded to it (no adoption), the
// data-dependent Reshape reads its small shape input to the host, fallbacks copy both ways.
TEST(Placement, DeviceWithoutHostAccessRunsWithFallbackAndConstants) {
  auto e = make_engine({{"TENSORD_CPU_DEVICES", "2"},
                        {"TENSORD_TEST_CPU_NO_HOST_ACCESS", "1"},
                        {"TENSORD_TEST_CPU_UNSUPPORTED_OPS", "Sigmoid"}});
  const Graph g = conv_net();
  const HostTensor x = random_f32({1, 3, 8, 8}, 11);
  const auto want = reference(g, {x});
  const auto got = run_on(*e, g, x, "cpu:1");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) expect_near(got[i], want[i], "output " + std::to_string(i));
  const auto m = e->metrics();
  EXPECT_EQ(m.fallbacks.at("cpu:1 Sigmoid"), 1);
  EXPECT_GT(m.copies_mapped, 0);
  // The constants on cpu:1 are the executable's, held on the device while it is cached:
  // reported as cached (part of reserved), not as in use by tensors.
  EXPECT_GT(e->devices()[1].memory_cached, 0);
  EXPECT_GE(e->devices()[1].memory_reserved, e->devices()[1].memory_cached);
}

// The first device of this build (cpu:0), for a pool of its own.
std::unique_ptr<Device> first_device() {
  for (auto& b : create_backends())
    for (auto& d : b->enumerate()) return std::move(d);
  return nullptr;
}

TEST(MemoryPool, SmallBlocksShareSlabsAndLargeOnesAreReused) {
  EnvScope env({{"TENSORD_CPU_DEVICES", "1"}});
  std::unique_ptr<Device> dev = first_device();
  ASSERT_TRUE(dev);
  DevicePool pool(dev.get(), size_t{64} << 20);
  std::vector<DevicePool::Block> small;
  for (int i = 0; i < 100; ++i) {
    auto b = pool.allocate(1000);  // class 1024
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b->size, 1024u);
    EXPECT_EQ(b->offset % 64, 0u);
    small.push_back(*b);
  }
  // One slab holds them all: same allocation, distinct offsets.
  for (const auto& b : small) EXPECT_EQ(b.base, small[0].base);
  std::set<size_t> offsets;
  for (const auto& b : small) offsets.insert(b.offset);
  EXPECT_EQ(offsets.size(), small.size());
  EXPECT_EQ(pool.reserved(), static_cast<int64_t>(DevicePool::kSlabBytes));
  EXPECT_EQ(pool.in_use(), 100 * 1024);
  for (const auto& b : small) pool.free(b);
  EXPECT_EQ(pool.in_use(), 0);
  // Large: freed blocks come back for the same rounded size.
  auto big = pool.allocate(5 << 20);
  ASSERT_TRUE(big.ok());
  void* base = big->base;
  pool.free(*big);
  auto again = pool.allocate((5 << 20) - 100);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->base, base);
  pool.free(*again);
  EXPECT_GT(pool.reserved(), static_cast<int64_t>(5 << 20));
  pool.trim();
  EXPECT_EQ(pool.reserved(), 0);
}

// Large blocks are pieces of segments: a freed block serves smaller requests by splitting, the
// pieces merge again when freed, and blocks of many sizes in turn do not each keep a segment.
TEST(MemoryPool, LargeBlocksSplitAndMergeWithinSegments) {
  EnvScope env({{"TENSORD_CPU_DEVICES", "1"}});
  std::unique_ptr<Device> dev = first_device();
  ASSERT_TRUE(dev);
  constexpr size_t MiB = size_t{1} << 20;
  DevicePool pool(dev.get(), size_t{256} << 20);
  auto big = pool.allocate(8 * MiB);
  ASSERT_TRUE(big.ok());
  pool.free(*big);
  EXPECT_EQ(pool.reserved(), static_cast<int64_t>(8 * MiB));
  // Two smaller blocks out of the freed one: same segment, one after the other.
  auto a = pool.allocate(3 * MiB);
  auto b = pool.allocate(4 * MiB + 100);  // rounded up to 4 KiB
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->base, big->base);
  EXPECT_EQ(a->offset, 0u);
  EXPECT_EQ(b->base, big->base);
  EXPECT_EQ(b->offset, 3 * MiB);
  EXPECT_EQ(b->size, 4 * MiB + 4096);
  EXPECT_EQ(pool.in_use(), static_cast<int64_t>(7 * MiB + 4096));
  EXPECT_EQ(pool.reserved(), static_cast<int64_t>(8 * MiB));
  // Writing both ends of each piece stays inside the segment (ASan would see an overrun).
  for (const auto* blk : {&*a, &*b}) {
    char* p = static_cast<char*>(blk->base) + blk->offset;
    p[0] = 1;
    p[blk->size - 1] = 2;
  }
  // Freed in either order they merge back: the whole 8 MiB is one piece again.
  pool.free(*a);
  pool.free(*b);
  EXPECT_EQ(pool.in_use(), 0);
  auto whole = pool.allocate(8 * MiB);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->base, big->base);
  EXPECT_EQ(whole->offset, 0u);
  pool.free(*whole);
  // A request no piece holds: the idle segment goes back first when keeping it would hold
  // more than a quarter above the most ever in use (8 MiB so far, 16 MiB with this one)...
  auto larger = pool.allocate(16 * MiB);
  ASSERT_TRUE(larger.ok());
  EXPECT_EQ(pool.reserved(), static_cast<int64_t>(16 * MiB));
  pool.free(*larger);
  // ...and blocks of growing sizes, one at a time, never hold more than that bound.
  for (size_t mib = 1; mib <= 12; ++mib) {
    auto blk = pool.allocate(mib * MiB + 12345);
    ASSERT_TRUE(blk.ok());
    pool.free(*blk);
    EXPECT_LE(pool.reserved(), static_cast<int64_t>(20 * MiB)) << mib;
  }
  pool.trim();
  EXPECT_EQ(pool.reserved(), 0);
}

TEST(MemoryPool, EngineReportsReservedBytesAndSubAllocatesTensors) {
  auto e = make_engine({{"TENSORD_CPU_DEVICES", "1"}});
  LocalClient c(e);
  HostTensor t = HostTensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  auto a = c.upload(t.view(), "cpu:0");
  auto b = c.upload(t.view(), "cpu:0");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(c.read(*b)->to_double_vector(), (std::vector<double>{1, 2, 3}));
  const auto d = e->devices()[0];
  EXPECT_EQ(d.memory_in_use, 24);
  EXPECT_GE(d.memory_reserved, static_cast<int64_t>(DevicePool::kSlabBytes));
}

}  // namespace
}  // namespace tensord
