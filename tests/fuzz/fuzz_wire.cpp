// libFuzzer target over the broker's request decoding and graph validation: what an Execute,
// LoadModelInline or BeginUpload call runs on the broker, minus gRPC. The first byte picks the
// message (0: tensord.v1.ExecuteRequest, 1: LoadModelRequest, 2: UploadHeader; the byte's
// value mod 3), the rest is the serialized message. Then, as src/rpc/server.cpp does:
// from_proto (wire validation) -> Engine::execute / load + run on the cpu device (topological
// order, shape inference, compile, run) in a session with a small memory limit, with inputs
// uploaded to match the graph's declared input types; or checked_wire_size + upload for a
// header. Every step must return a Status: no crash, no leak, no hang.
//
// Bounds (the fuzzer looks for bugs, not for the broker's missing limits, issue 15 item 6):
// inputs declaring more than 1 MiB, or graphs whose inferred values exceed 1 MiB or that hold
// control flow (Loop/Scan: trip counts from the input bytes), are skipped.
//
// Build (clang): cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DTENSORD_FUZZ=ON
// Run:  build-fuzz/tests/fuzz_wire tests/fuzz/corpus_wire -max_total_time=600 -timeout=10
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/stubs/logging.h>

#include "core/graph_utils.h"
#include "core/op_registry.h"
#include "engine/engine.h"
#include "rpc/wire.h"
#include "tensord.pb.h"

namespace {

using namespace tensord;

constexpr int64_t kMaxTensorBytes = 1 << 20;         // skip inputs declaring more
constexpr int64_t kSessionLimit = 8 << 20;           // the session's memory limit
constexpr const char* kDevice = "cpu:0";

Engine& engine() {
  static Engine* e = [] {
    // One device thread's worth of OpenMP is enough, and keeps runs deterministic.
    setenv("OMP_NUM_THREADS", "1", 0);
    EngineOptions o;
    o.device_filter = "cpu";
    o.executable_cache_size = 16;  // small: eviction is exercised, memory stays bounded
    auto r = Engine::create(o);
    if (!r.ok()) std::abort();
    return r->release();  // lives for the process (the fuzzer never returns)
  }();
  return *e;
}

bool has_control_flow(const Graph& g) {
  for (const auto& n : g.nodes) {
    if (n.op == "Loop" || n.op == "Scan") return true;
    for (const auto& [name, a] : n.attrs)
      if (auto sub = a.get_if<std::shared_ptr<const Graph>>(); sub && *sub && has_control_flow(**sub))
        return true;
  }
  return false;
}

// Concrete input types for the graph's declared inputs (-1 dims become 1, an undefined dtype
// float32); false when one is too large or invalid.
bool concrete_inputs(const Graph& g, std::vector<TensorType>* types) {
  for (const auto& in : g.inputs) {
    TensorType t = in.type;
    if (t.dtype == DType::kUndefined) t.dtype = DType::kFloat32;
    for (auto& d : t.shape)
      if (d < 0) d = 1;
    auto bytes = checked_byte_size(t.dtype, t.shape);
    if (!bytes.ok() || *bytes > kMaxTensorBytes) return false;
    types->push_back(std::move(t));
  }
  return true;
}

// Whether shape inference bounds every value of the graph by kMaxTensorBytes (a value whose
// size is unknown until it runs, or which failed inference, is let through: the engine must
// cope with both).
bool small_enough(const Graph& g, const std::vector<TensorType>& types) {
  auto inferred = infer_graph(OpRegistry::global(), g, types);
  if (!inferred.ok()) return true;  // the engine must report the same error cleanly
  for (const auto& [name, t] : inferred->values) {
    if (!t.ok() || !t->defined()) continue;
    bool known = true;
    for (auto d : t->shape) known = known && d >= 0;
    if (!known) continue;
    auto bytes = checked_byte_size(t->dtype, t->shape);
    if (!bytes.ok() || *bytes > kMaxTensorBytes) return false;
  }
  return true;
}

// Uploads one tensor per type, filled from `fill` (repeated), into the session.
bool upload_inputs(Engine& e, SessionId s, const std::vector<TensorType>& types,
                   const std::string& fill, std::vector<TensorHandle>* handles) {
  for (const auto& t : types) {
    const int64_t bytes = *checked_byte_size(t.dtype, t.shape);
    std::vector<unsigned char> data(static_cast<size_t>(bytes));
    for (size_t i = 0; i < data.size() && !fill.empty(); ++i) data[i] = fill[i % fill.size()];
    if (t.dtype == DType::kBool)
      for (auto& b : data) b &= 1;
    auto h = e.upload(s, TensorView{t.dtype, t.shape, data.data()}, kDevice);
    if (!h.ok()) return false;
    handles->push_back(*h);
  }
  return true;
}

// Reads every output back (waits for the work; errors are fine, crashes are not).
void read_all(Engine& e, SessionId s, const std::vector<TensorHandle>& outs) {
  for (auto h : outs) (void)e.read(s, h);
}

void run_graph(const v1::Graph& proto, bool as_model, const std::string& fill) {
  auto graph = rpc::from_proto(proto);
  if (!graph.ok()) return;
  if (has_control_flow(*graph)) return;
  std::vector<TensorType> types;
  if (!concrete_inputs(*graph, &types)) return;
  if (!small_enough(*graph, types)) return;
  Engine& e = engine();
  const SessionId s = e.open_session(kSessionLimit);
  std::vector<TensorHandle> inputs;
  if (upload_inputs(e, s, types, fill, &inputs)) {
    if (as_model) {
      auto model = e.load(s, *graph, kDevice);
      if (model.ok()) {
        for (int i = 0; i < 2; ++i) {  // the second run reuses the compiled model
          auto outs = e.run(s, *model, inputs);
          if (outs.ok()) read_all(e, s, *outs);
        }
        (void)e.unload(s, *model);
      }
    } else {
      // Twice, like a client's run loop: the second call is an executable cache hit.
      for (int i = 0; i < 2; ++i) {
        auto outs = e.execute(s, *graph, inputs, kDevice, {}, /*run_here_if_idle=*/i == 0);
        if (outs.ok()) read_all(e, s, *outs);
      }
    }
  }
  (void)e.close_session(s);
}

void upload(const v1::UploadHeader& h, const std::string& fill) {
  auto size = rpc::checked_wire_size(h.dtype(), h.shape(), "upload");
  if (!size.ok() || *size > kMaxTensorBytes || h.total_bytes() != *size) return;
  Engine& e = engine();
  const SessionId s = e.open_session(kSessionLimit);
  std::vector<unsigned char> data(static_cast<size_t>(*size));
  for (size_t i = 0; i < data.size() && !fill.empty(); ++i) data[i] = fill[i % fill.size()];
  auto handle = e.upload(
      s, TensorView{static_cast<DType>(h.dtype()), Shape(h.shape().begin(), h.shape().end()),
                    data.data()},
      h.device());
  if (handle.ok()) (void)e.read(s, *handle);
  (void)e.close_session(s);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // protobuf logs every invalid UTF-8 string it parses; the fuzzer makes thousands.
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  if (size < 1) return 0;
  const char* bytes = reinterpret_cast<const char*>(data) + 1;
  const int len = static_cast<int>(std::min<size_t>(size - 1, 1 << 24));
  // Input values: the message's own bytes (any pattern will do; NaNs and odd ints included).
  const std::string fill(bytes, static_cast<size_t>(std::min(len, 64)));
  switch (data[0] % 3) {
    case 0: {
      v1::ExecuteRequest req;
      if (req.ParseFromArray(bytes, len)) run_graph(req.graph(), false, fill);
      break;
    }
    case 1: {
      v1::LoadModelRequest req;
      if (req.ParseFromArray(bytes, len)) run_graph(req.graph(), true, fill);
      break;
    }
    default: {
      v1::UploadHeader req;
      if (req.ParseFromArray(bytes, len)) upload(req, fill);
      break;
    }
  }
  return 0;
}
