// The broker's fast data paths: the engine's zero-copy upload (upload_external), read_into,
// the quota on loaded models' initializers, and regions lent to the broker (shared memory the
// broker computes on in place) — values stay right, memory is accounted and comes back.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "broker_process.h"
#include "core/errors.h"
#include "engine/engine.h"
#include "rpc/remote_client.h"

namespace tensord {
namespace {

using std::chrono::milliseconds;

std::unique_ptr<Engine> cpu_engine() {
  EngineOptions o;
  o.device_filter = "cpu:0";
  auto e = Engine::create(o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

// y = x + w, with w an initializer of `n` floats (all 1).
Graph add_initializer_graph(int64_t n) {
  Graph g;
  g.name = "add_w";
  g.inputs = {{"x", {DType::kFloat32, {n}}}};
  g.initializers.emplace("w", HostTensor::from_vector(std::vector<float>(n, 1.0f), {n}));
  Node add;
  add.name = "add";
  add.op = "Add";
  add.inputs = {"x", "w"};
  add.outputs = {"y"};
  g.nodes = {add};
  g.outputs = {{"y", {}}};
  return g;
}

// Aligned host memory whose release is observable (the keepalive given to the engine).
struct External {
  explicit External(size_t floats) {
    data = static_cast<float*>(std::aligned_alloc(64, floats * 4));
    for (size_t i = 0; i < floats; ++i) data[i] = static_cast<float>(i);
  }
  ~External() { std::free(data); }
  std::shared_ptr<void> keepalive() {
    held.store(true);
    return std::shared_ptr<void>(nullptr, [this](void*) { held.store(false); });
  }
  float* data = nullptr;
  std::atomic<bool> held{false};
};

TEST(EngineTransfer, UploadExternalComputesOnTheCallersBytesAndLetsThemGoLast) {
  auto engine = cpu_engine();
  ASSERT_NE(engine, nullptr);
  const SessionId s = engine->open_session();
  External ext(1024);
  auto h = engine->upload_external(s, {DType::kFloat32, {1024}, ext.data}, "", ext.keepalive());
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_TRUE(ext.held.load());
  EXPECT_EQ(engine->session_bytes(s), 4096);  // counted like an allocation
  EXPECT_EQ(engine->devices()[0].memory_in_use, 4096);

  // No copy was made: the tensor reads what the memory holds.
  auto back = engine->read(s, *h);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->data<float>()[1000], 1000.0f);

  // A same-device copy shares the bytes: releasing the first handle keeps them.
  auto c = engine->copy(s, *h, "cpu:0");
  ASSERT_TRUE(c.ok());
  auto y = engine->execute(s, add_initializer_graph(1024), {*c}, "");
  ASSERT_TRUE(y.ok());
  ASSERT_TRUE(engine->release(s, *h).ok());
  EXPECT_TRUE(ext.held.load());
  float out[1024];
  auto t = engine->read_into(s, (*y)[0], out, sizeof out);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->shape, (Shape{1024}));
  EXPECT_EQ(out[7], 8.0f);
  ASSERT_TRUE(engine->release(s, *c).ok());
  EXPECT_FALSE(ext.held.load());  // the last user went: the owner may reuse the memory
  ASSERT_TRUE(engine->close_session(s).ok());
  // The queue thread lets go of a task's promises just after publishing their values.
  for (int i = 0; i < 400 && engine->devices()[0].memory_in_use != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(engine->devices()[0].memory_in_use, 0);
}

TEST(EngineTransfer, UploadExternalCopiesWhatItCannotAdoptAndRefusesPastTheQuota) {
  auto engine = cpu_engine();
  ASSERT_NE(engine, nullptr);
  const SessionId s = engine->open_session(/*memory_limit=*/4096);
  External ext(2048);
  // Not 64-byte aligned: copied, the caller's memory is free at once.
  auto h = engine->upload_external(s, {DType::kFloat32, {4}, ext.data + 1}, "", ext.keepalive());
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_FALSE(ext.held.load());
  ext.data[1] = -5;
  auto back = engine->read(s, *h);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->data<float>()[0], 1.0f);
  // More than the session may hold: RESOURCE_EXHAUSTED, nothing kept.
  auto big = engine->upload_external(s, {DType::kFloat32, {2048}, ext.data}, "", ext.keepalive());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted) << big.status().to_string();
  EXPECT_NE(big.status().message().find("limit"), std::string::npos);
  EXPECT_FALSE(ext.held.load());
  EXPECT_EQ(engine->session_bytes(s), 16);
}

TEST(EngineTransfer, ReadIntoWritesOnlyWhenTheValueFits) {
  auto engine = cpu_engine();
  ASSERT_NE(engine, nullptr);
  const SessionId s = engine->open_session();
  const std::vector<float> v = {1, 2, 3, 4};
  auto h = engine->upload(s, {DType::kFloat32, {4}, v.data()}, "");
  ASSERT_TRUE(h.ok());
  float small[2] = {-1, -1};
  auto t = engine->read_into(s, *h, small, sizeof small);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->shape, (Shape{4}));  // the caller learns the size it needs
  EXPECT_EQ(small[0], -1.0f);       // and nothing was written
  float room[4] = {};
  ASSERT_TRUE(engine->read_into(s, *h, room, sizeof room).ok());
  EXPECT_EQ(room[3], 4.0f);
  EXPECT_EQ(engine->read_into(s, 424242, room, sizeof room).status().code(),
            StatusCode::kNotFound);
}

TEST(EngineTransfer, LoadedModelInitializersCountAgainstTheSessionQuota) {
  auto engine = cpu_engine();
  ASSERT_NE(engine, nullptr);
  const SessionId s = engine->open_session(/*memory_limit=*/1 << 20);
  // 2 MiB of initializers do not fit in a 1 MiB session.
  auto refused = engine->load(s, add_initializer_graph(512 << 10), "");
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted)
      << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("add_w"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(engine->session_bytes(s), 0);
  // 512 KiB do, and are held while the model is loaded.
  auto m = engine->load(s, add_initializer_graph(128 << 10), "");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(engine->session_bytes(s), 512 << 10);
  // The model's weights and a tensor share the quota.
  std::vector<float> x(160 << 10, 1.0f);
  auto over = engine->upload(s, {DType::kFloat32, {160 << 10}, x.data()}, "");
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(engine->unload(s, *m).ok());
  EXPECT_EQ(engine->session_bytes(s), 0);
  // Closing the session lets a loaded model's bytes go too.
  auto m2 = engine->load(s, add_initializer_graph(1024), "");
  ASSERT_TRUE(m2.ok());
  EXPECT_EQ(engine->session_bytes(s), 4096);
  ASSERT_TRUE(engine->close_session(s).ok());
}

// ---------------------------------------------------------------- against a real broker

int64_t cpu0_in_use(rpc::RemoteClient& c) {
  auto d = c.devices();
  if (!d.ok()) return -1;
  for (const auto& x : *d)
    if (x.name == "cpu:0") return x.memory_in_use;
  return -1;
}

HostTensor ramp(int64_t n, float offset) {
  HostTensor t(DType::kFloat32, {n});
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = offset + static_cast<float>(i % 1000);
  return t;
}

// y = -x over n floats.
Graph neg_graph(int64_t n) {
  Graph g;
  g.name = "neg";
  g.inputs = {{"x", {DType::kFloat32, {n}}}};
  Node neg;
  neg.name = "neg";
  neg.op = "Neg";
  neg.inputs = {"x"};
  neg.outputs = {"y"};
  g.nodes = {neg};
  g.outputs = {{"y", {}}};
  return g;
}

// A client of the shared broker that must use shared memory.
Result<std::unique_ptr<rpc::RemoteClient>> shm_client() {
  auto* broker = testing::shared_broker();
  if (!broker) return errors::Unavailable("the shared broker did not start");
  rpc::RemoteClientOptions o;
  o.transport = "shm";
  return rpc::RemoteClient::connect(broker->address(), o);
}

TEST(LentRegions, ValuesStayRightWhileTheirRegionsAreLentAndReused) {
  auto c = shm_client();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const int64_t base = cpu0_in_use(**c);
  const int64_t n = 2 << 20;  // 8 MiB of float32: lent, not copied
  std::vector<TensorHandle> live;
  for (int i = 0; i < 3; ++i) {
    HostTensor t = ramp(n, static_cast<float>(i * 10000));
    auto h = (*c)->upload(t.view(), "");
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    live.push_back(*h);
  }
  EXPECT_EQ(cpu0_in_use(**c) - base, 3 * n * 4);
  // Every tensor kept its own bytes: a lent region is not written while a tensor uses it.
  for (int i = 0; i < 3; ++i) {
    auto back = (*c)->read(live[i]);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->data<float>()[n - 1], static_cast<float>(i * 10000 + (n - 1) % 1000)) << i;
  }
  // Computing on a lent region works like on any tensor.
  Graph g;
  g.name = "double";
  g.inputs = {{"x", {DType::kFloat32, {n}}}};
  Node add;
  add.name = "add";
  add.op = "Add";
  add.inputs = {"x", "x"};
  add.outputs = {"y"};
  g.nodes = {add};
  g.outputs = {{"y", {}}};
  auto y = (*c)->execute(g, {live[1]}, "");
  ASSERT_TRUE(y.ok());
  auto yv = (*c)->read((*y)[0]);
  ASSERT_TRUE(yv.ok());
  EXPECT_EQ(yv->data<float>()[5], 2 * (10000.0f + 5));
  ASSERT_TRUE((*c)->release((*y)[0]).ok());
  // Released regions come back and are written again; the tensors still alive are untouched.
  ASSERT_TRUE((*c)->release(live[0]).ok());
  ASSERT_TRUE((*c)->release(live[2]).ok());
  for (int i = 0; i < 4; ++i) {
    HostTensor t = ramp(n, 50000.0f + i);
    auto h = (*c)->upload(t.view(), "");
    ASSERT_TRUE(h.ok());
    auto back = (*c)->read(*h);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->data<float>()[3], 50003.0f + i);
    ASSERT_TRUE((*c)->release(*h).ok());
  }
  auto still = (*c)->read(live[1]);
  ASSERT_TRUE(still.ok());
  EXPECT_EQ(still->data<float>()[999], 10999.0f);
  ASSERT_TRUE((*c)->release(live[1]).ok());
  int64_t now = cpu0_in_use(**c);
  for (int i = 0; i < 300 && now != base; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
    now = cpu0_in_use(**c);
  }
  EXPECT_EQ(now, base);
}

TEST(LentRegions, StreamedUploadsLandInTheTensorAndAreFreedWithIt) {
  auto* broker = testing::shared_broker();
  ASSERT_NE(broker, nullptr);
  rpc::RemoteClientOptions o;
  o.transport = "grpc";
  o.chunk_bytes = 64 << 10;  // many chunks, each framed and parsed by hand on both sides
  auto c = rpc::RemoteClient::connect(broker->address(), o);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const int64_t base = cpu0_in_use(**c);
  for (int64_t n : {int64_t{(64 << 10) / 4 + 3}, int64_t{3 << 20}}) {
    HostTensor t = ramp(n, 7.0f);
    auto h = (*c)->upload(t.view(), "");
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    auto back = (*c)->read(*h);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    ASSERT_EQ(back->nbytes(), t.nbytes());
    EXPECT_EQ(std::memcmp(back->data(), t.data(), t.nbytes()), 0) << n;
    ASSERT_TRUE((*c)->release(*h).ok());
  }
  EXPECT_EQ(cpu0_in_use(**c), base);
}


// A large read() over shared memory returns a tensor over the region the broker wrote into
// (one copy). Each such tensor keeps its own bytes while later reads land elsewhere; a region
// comes back for reuse once its tensor goes, and a tensor outlives the client that read it.
TEST(LentRegions, LargeReadsReturnTheRegionTheyLandedInAndEachKeepsItsBytes) {
  auto c = shm_client();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const int64_t n = 3 << 20;  // 12 MiB of float32
  std::vector<TensorHandle> hs;
  for (int i = 0; i < 3; ++i) {
    auto h = (*c)->upload(ramp(n, 1000.0f * i).view(), "");
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    hs.push_back(*h);
  }
  // The first read teaches the client the size; the later ones land in regions of their own.
  std::vector<HostTensor> kept;
  for (int round = 0; round < 2; ++round)
    for (int i = 0; i < 3; ++i) {
      auto t = (*c)->read(hs[i]);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      ASSERT_EQ(t->nbytes(), static_cast<size_t>(n * 4));
      kept.push_back(*t);
    }
  for (size_t k = 0; k < kept.size(); ++k) {
    const HostTensor want = ramp(n, 1000.0f * static_cast<float>(k % 3));
    EXPECT_EQ(std::memcmp(kept[k].data(), want.data(), want.nbytes()), 0) << k;
  }
  // Writing into one returned tensor changes no other, and no value on the broker.
  std::memset(kept[4].mutable_data(), 0, kept[4].nbytes());
  auto again = (*c)->read(hs[1]);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data<float>()[7], 1007.0f);
  EXPECT_EQ(kept[1].data<float>()[7], 1007.0f);
  // Dropped tensors give their regions back: many more reads need no more regions than live.
  kept.clear();
  const int64_t calls = (*c)->rpc_count();
  for (int i = 0; i < 20; ++i) {
    auto t = (*c)->read(hs[i % 3]);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->data<float>()[n - 1], 1000.0f * (i % 3) + static_cast<float>((n - 1) % 1000));
  }
  EXPECT_LE((*c)->rpc_count() - calls, 20) << "a read registered a new region";
  // A tensor outlives its client (the region stays mapped on this side).
  auto last = (*c)->read(hs[2]);
  ASSERT_TRUE(last.ok());
  for (TensorHandle h : hs) ASSERT_TRUE((*c)->release(h).ok());
  c->reset();
  EXPECT_EQ(last->data<float>()[n - 1], 2000.0f + static_cast<float>((n - 1) % 1000));
}


// Memory from allocate_host() on shared memory is a region of the client's: read_into() it is
// written by the broker itself (one copy, one call), at any offset inside it, never past it.
TEST(LentRegions, ReadIntoAllocatedHostMemoryIsWrittenByTheBrokerInOneCall) {
  auto c = shm_client();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const int64_t n = 3 << 20;  // 12 MiB of float32
  auto h = (*c)->upload(ramp(n, 5.0f).view(), "");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  ASSERT_TRUE((*c)->wait(*h).ok());
  auto buf = (*c)->allocate_host(DType::kFloat32, {n + 1024});
  ASSERT_TRUE(buf.ok()) << buf.status().to_string();
  ASSERT_EQ(buf->nbytes(), static_cast<size_t>((n + 1024) * 4));
  std::memset(buf->mutable_data(), 0xff, buf->nbytes());
  const HostTensor want = ramp(n, 5.0f);
  for (int round = 0; round < 3; ++round) {
    const int64_t calls = (*c)->rpc_count();
    auto t = (*c)->read_into(*h, buf->mutable_data(), buf->nbytes());
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->shape, Shape{n});
    EXPECT_EQ((*c)->rpc_count() - calls, 1) << "not written straight into the region";
    EXPECT_EQ(std::memcmp(buf->data(), want.data(), want.nbytes()), 0);
  }
  // At an offset inside it: the bytes before it stay as they were.
  float* base = buf->mutable_data<float>();
  std::memset(base, 0, buf->nbytes());
  auto at = (*c)->read_into(*h, base + 1024, static_cast<size_t>(n) * 4);
  ASSERT_TRUE(at.ok()) << at.status().to_string();
  EXPECT_EQ(base[1023], 0.0f);
  EXPECT_EQ(std::memcmp(base + 1024, want.data(), want.nbytes()), 0);
  // Too little room: the type, nothing written.
  auto small = (*c)->read_into(*h, base, 16);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->shape, Shape{n});
  EXPECT_EQ(base[0], 0.0f);
  // The memory outlives its client.
  ASSERT_TRUE((*c)->read_into(*h, base, buf->nbytes()).ok());
  ASSERT_TRUE((*c)->release(*h).ok());
  c->reset();
  EXPECT_EQ(std::memcmp(buf->data(), want.data(), want.nbytes()), 0);
}

// A value uploaded by lending its region is read back out of that region by the client
// itself (one copy, as on the embedded engine); the broker still answers for the handle, so a
// released one is an error, never the stale bytes of a region written again since.
TEST(LentRegions, ReadIntoAnUploadedValueCopiesItOutOfTheLentRegion) {
  auto c = shm_client();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const int64_t n = 2 << 20;  // 8 MiB of float32: lent
  const HostTensor want = ramp(n, 7.0f);
  auto h = (*c)->upload(want.view(), "");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  std::vector<float> out(static_cast<size_t>(n) + 16, -1.0f);
  for (int round = 0; round < 2; ++round) {
    const int64_t calls = (*c)->rpc_count();
    auto t = (*c)->read_into(*h, out.data(), static_cast<size_t>(n) * 4);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->dtype, DType::kFloat32);
    EXPECT_EQ(t->shape, Shape{n});
    EXPECT_EQ((*c)->rpc_count() - calls, 1);  // the broker is asked whether it holds the value
    EXPECT_EQ(std::memcmp(out.data(), want.data(), want.nbytes()), 0);
    EXPECT_EQ(out[static_cast<size_t>(n)], -1.0f) << "written past the value";
  }
  // Too little room: the type only.
  std::fill(out.begin(), out.end(), -1.0f);
  auto small = (*c)->read_into(*h, out.data(), 64);
  ASSERT_TRUE(small.ok()) << small.status().to_string();
  EXPECT_EQ(small->shape, Shape{n});
  EXPECT_EQ(out[0], -1.0f);
  // Computed on by the broker, the uploaded value stays as it was.
  const Graph g = neg_graph(n);
  auto y = (*c)->execute(g, {*h}, "");
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  ASSERT_TRUE((*c)->read_into((*y)[0], out.data(), static_cast<size_t>(n) * 4).ok());
  EXPECT_EQ(out[12], -19.0f);
  ASSERT_TRUE((*c)->read_into(*h, out.data(), static_cast<size_t>(n) * 4).ok());
  EXPECT_EQ(std::memcmp(out.data(), want.data(), want.nbytes()), 0);
  // Released: the region goes back to the pool and is lent again; the old handle is an error.
  ASSERT_TRUE((*c)->release((*y)[0]).ok());
  ASSERT_TRUE((*c)->release(*h).ok());
  for (int i = 0; i < 3; ++i) {
    auto other = (*c)->upload(ramp(n, 100.0f + i).view(), "");
    ASSERT_TRUE(other.ok()) << other.status().to_string();
    ASSERT_TRUE((*c)->wait(*other).ok());
  }
  auto gone = (*c)->read_into(*h, out.data(), static_cast<size_t>(n) * 4);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound) << gone.status().to_string();
}

// A value the broker computed for a shared-memory client lives in the session's arena, which
// the client maps read-only: read_into() the caller's own memory is one call and one copy out
// of that mapping. A block reused for the next value reads as that value; small values and
// values that do not fit the room read as before.
TEST(LentRegions, ComputedValuesAreReadOutOfTheSessionsArena) {
  auto c = shm_client();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const int64_t n = 2 << 20;  // 8 MiB of float32
  auto h = (*c)->upload(ramp(n, 7.0f).view(), "");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  const Graph g = neg_graph(n);
  std::vector<float> out(static_cast<size_t>(n) + 16);
  for (int round = 0; round < 3; ++round) {
    auto y = (*c)->execute(g, {*h}, "");
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    std::fill(out.begin(), out.end(), -1.0f);
    const int64_t arena_reads = (*c)->stats().arena_reads;
    const int64_t calls = (*c)->rpc_count();
    auto t = (*c)->read_into((*y)[0], out.data(), static_cast<size_t>(n) * 4);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->shape, Shape{n});
    EXPECT_EQ((*c)->stats().arena_reads - arena_reads, 1) << "not read out of the arena";
    if (round > 0) EXPECT_EQ((*c)->rpc_count() - calls, 1);  // (the first opens the arena)
    for (int64_t i = 0; i < n; i += 4099)
      ASSERT_EQ(out[static_cast<size_t>(i)], -(7.0f + static_cast<float>(i % 1000))) << i;
    EXPECT_EQ(out[static_cast<size_t>(n)], -1.0f) << "written past the value";
    // Too little room: the type only, nothing written.
    std::fill(out.begin(), out.end(), -1.0f);
    auto small = (*c)->read_into((*y)[0], out.data(), 64);
    ASSERT_TRUE(small.ok()) << small.status().to_string();
    EXPECT_EQ(small->shape, Shape{n});
    EXPECT_EQ(out[0], -1.0f);
    ASSERT_TRUE((*c)->release((*y)[0]).ok());  // its block holds the next round's value
  }
  // A small value (below the arena's minimum) reads through a region as before.
  const HostTensor tiny = ramp(256, 3.0f);
  auto th = (*c)->upload(tiny.view(), "");
  ASSERT_TRUE(th.ok());
  std::vector<float> back(256);
  const int64_t arena_reads = (*c)->stats().arena_reads;
  ASSERT_TRUE((*c)->read_into(*th, back.data(), back.size() * 4).ok());
  EXPECT_EQ(std::memcmp(back.data(), tiny.data(), tiny.nbytes()), 0);
  EXPECT_EQ((*c)->stats().arena_reads, arena_reads);
}

// Without shared memory (gRPC streams, the embedded engine) allocate_host() is ordinary
// memory that read_into() fills the same way.
TEST(LentRegions, AllocateHostElsewhereIsOrdinaryMemory) {
  auto* broker = testing::shared_broker();
  ASSERT_NE(broker, nullptr);
  rpc::RemoteClientOptions o;
  o.transport = "grpc";
  auto c = rpc::RemoteClient::connect(broker->address(), o);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const int64_t n = 1 << 20;
  auto h = (*c)->upload(ramp(n, 2.0f).view(), "");
  ASSERT_TRUE(h.ok());
  auto buf = (*c)->allocate_host(DType::kFloat32, {n});
  ASSERT_TRUE(buf.ok());
  ASSERT_TRUE((*c)->read_into(*h, buf->mutable_data(), buf->nbytes()).ok());
  EXPECT_EQ(std::memcmp(buf->data(), ramp(n, 2.0f).data(), buf->nbytes()), 0);
  EXPECT_FALSE((*c)->allocate_host(DType::kFloat32, {-1}).ok());
  ASSERT_TRUE((*c)->release(*h).ok());
}

// tensord bench --breakdown: a run() and an execute() asked for their phases get the broker's
// back (session lookup, the run, the outputs), each phase inside the round trip, and the two
// halves of the transport measured on the shared clock; the answers stay right.
TEST(RequestBreakdown, RunsAndExecutesReportTheirPhasesInsideTheRoundTrip) {
  auto* broker = testing::shared_broker();
  ASSERT_NE(broker, nullptr);
  auto c = rpc::RemoteClient::connect(broker->address());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const int64_t n = 4096;
  auto model = (*c)->load(neg_graph(n), "cpu:0");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto x = (*c)->upload(ramp(n, 1.0f).view(), "cpu:0");
  ASSERT_TRUE(x.ok()) << x.status().to_string();
  // Not asked: nothing kept.
  auto first = (*c)->run(*model, {*x});
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_TRUE((*c)->take_breakdown().empty());
  (*c)->set_breakdown(true);
  for (int i = 0; i < 5; ++i) {
    auto out = (*c)->run(*model, {*x});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    auto y = (*c)->read((*out)[0]);
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    EXPECT_EQ(y->data<float>()[n - 1], -(1.0f + static_cast<float>((n - 1) % 1000)));
    ASSERT_TRUE((*c)->release((*out)[0]).ok());
  }
  auto ex = (*c)->execute(add_initializer_graph(n), {*x}, "cpu:0");
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  (*c)->set_breakdown(false);
  const auto timings = (*c)->take_breakdown();
  ASSERT_EQ(timings.size(), 6u);
  for (size_t i = 0; i < timings.size(); ++i) {
    const rpc::RequestTiming& t = timings[i];
    SCOPED_TRACE(i);
    EXPECT_GT(t.call, 0);
    EXPECT_GT(t.handler, 0) << "the broker sent no breakdown";
    EXPECT_GT(t.run, 0) << "the engine did not stamp the run";
    EXPECT_LE(t.handler, t.call);
    EXPECT_LE(t.session + t.parse + t.prepare + t.handoff + t.run + t.outputs,
              t.handler + 1.0);  // (each rounded to 0.1 us)
    // The same host: the handler ran inside the call on the shared clock.
    EXPECT_GE(t.there, 0);
    EXPECT_GE(t.back, 0);
    EXPECT_LE(t.there + t.back, t.transport() + 1.0);
  }
  EXPECT_GT(timings[5].parse, 0) << "execute() decodes its graph";
  EXPECT_EQ(timings[0].parse, 0) << "run() has no graph to decode";
  for (TensorHandle h : *ex) ASSERT_TRUE((*c)->release(h).ok());
  for (TensorHandle h : *first) ASSERT_TRUE((*c)->release(h).ok());
  ASSERT_TRUE((*c)->release(*x).ok());
  ASSERT_TRUE((*c)->unload(*model).ok());
}

// RemoteClientOptions::pipeline_runs: run() returns before the broker answers, with handles
// standing for the outputs. Chained runs (each one's output the next one's input) give the
// right value; a failed run's error comes from wait()/read() of its outputs; a pending output
// released at once is gone; a client destroyed with runs in flight waits for them.
TEST(PipelinedRuns, ChainedRunsAreRightAndErrorsComeFromTheirOutputs) {
  auto* broker = testing::shared_broker();
  ASSERT_NE(broker, nullptr);
  rpc::RemoteClientOptions o;
  o.pipeline_runs = true;
  auto c = rpc::RemoteClient::connect(broker->address(), o);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const int64_t n = 1000;
  auto model = (*c)->load(neg_graph(n), "cpu:0");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto x = (*c)->upload(ramp(n, 3.0f).view(), "cpu:0");
  ASSERT_TRUE(x.ok()) << x.status().to_string();
  const int64_t calls = (*c)->rpc_count();
  std::vector<TensorHandle> chain{*x};
  for (int i = 0; i < 5; ++i) {
    auto out = (*c)->run(*model, {chain.back()});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    ASSERT_EQ(out->size(), 1u);
    chain.push_back((*out)[0]);
  }
  EXPECT_EQ((*c)->rpc_count() - calls, 5) << "one call per run, nothing else";
  auto y = (*c)->read(chain.back());
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  for (int64_t i : {int64_t{0}, n - 1})
    EXPECT_EQ(y->data<float>()[i], -(3.0f + static_cast<float>(i % 1000))) << i;
  auto info = (*c)->info(chain[2]);
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->type.shape, Shape{n});
  for (size_t i = 1; i < chain.size(); ++i) ASSERT_TRUE((*c)->release(chain[i]).ok()) << i;
  auto gone = (*c)->read(chain[3]);
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound) << gone.status().to_string();
  // A wrong input: run() answers, its output carries the broker's error.
  auto bad_in = (*c)->upload(HostTensor::from_vector<int32_t>({1, 2, 3}, {3}).view(), "cpu:0");
  ASSERT_TRUE(bad_in.ok());
  auto bad = (*c)->run(*model, {*bad_in});
  ASSERT_TRUE(bad.ok()) << "a pipelined run answers before the broker checks it";
  Status waited = (*c)->wait((*bad)[0]);
  EXPECT_FALSE(waited.ok());
  EXPECT_EQ(waited.code(), StatusCode::kInvalidArgument) << waited.to_string();
  EXPECT_FALSE((*c)->read((*bad)[0]).ok());
  EXPECT_TRUE((*c)->release((*bad)[0]).ok());
  // Released while pending: the answer is taken, the output freed on the broker.
  auto quick = (*c)->run(*model, {*x});
  ASSERT_TRUE(quick.ok());
  EXPECT_TRUE((*c)->release((*quick)[0]).ok());
  EXPECT_EQ((*c)->release((*quick)[0]).code(), StatusCode::kNotFound);
  // Runs in flight when the client goes: it waits for their answers, then closes.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*c)->run(*model, {*x}).ok());
  c->reset();
  // The broker still serves (the session closed cleanly).
  auto again = rpc::RemoteClient::connect(broker->address());
  ASSERT_TRUE(again.ok()) << again.status().to_string();
}

}  // namespace
}  // namespace tensord
