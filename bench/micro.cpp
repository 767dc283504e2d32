// bench_micro: tensord's kernels next to the same work done directly, in the same process.
//
//   sgemm/{tensord,onednn}/{256,1024,2048}   C = A B, float32, square. tensord: a MatMul graph
//                                            loaded once (Client::load) and run on uploaded A, B;
//                                            oneDNN: dnnl_sgemm.
//   conv3x3/{tensord,onednn}                 1x64x56x56 -> 64, 3x3, pad 1. oneDNN: a convolution
//                                            primitive with 'any' (blocked) formats, input and
//                                            weights reordered once outside the timing (its best
//                                            case).
//   dwconv3x3/{tensord,onednn}               1x144x56x56, group 144 (depthwise), 3x3, pad 1.
//   eltwise10/{tensord,loop}                 10 element-wise ops on 1M floats; the loop is one
//                                            hand-written pass (AVX-512/AVX2 clones).
//   peak/fma                                 one core's FMA throughput (AVX-512, else AVX2).
//
// Counters: FLOPS (the work's FLOP per second) and of_peak (FLOPS / the machine's peak, the
// single-core FMA peak times the cores, printed in the context). After the table, tensord's
// time is printed as a ratio of the direct one for each pair. A benchmark program, not a test;
// the default run takes well under 2 minutes (Google Benchmark flags work as usual, e.g.
// --benchmark_filter=sgemm).
#include <benchmark/benchmark.h>
#include <dnnl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <dnnl.hpp>

#include "tensord/client.h"
#include "tensord/graph.h"
#include "tensord/tensor.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

using tensord::Client;
using tensord::DType;
using tensord::Graph;
using tensord::HostTensor;
using tensord::ModelHandle;
using tensord::TensorHandle;

double g_peak_flops = 0;  // the machine's peak, FLOP/s (all cores)

// ---- helpers ----

Client* client() {
  static std::unique_ptr<Client> c = [] {
    auto r = tensord::make_local_client();
    if (!r.ok()) {
      std::fprintf(stderr, "bench_micro: no tensord engine: %s\n",
                   r.status().to_string().c_str());
      std::exit(1);
    }
    return std::move(r).value();
  }();
  return c.get();
}

HostTensor random_tensor(tensord::Shape shape, uint32_t seed, float scale = 1.0f) {
  HostTensor t(DType::kFloat32, std::move(shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

void set_counters(benchmark::State& state, double flops_per_iteration) {
  state.counters["FLOPS"] =
      benchmark::Counter(flops_per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

// A model loaded into the engine with its uploaded inputs; run() returns when the output is
// ready. Falls back to execute() if the client cannot load models.
class TensordRunner {
 public:
  tensord::Status init(const Graph& graph, const std::vector<HostTensor>& inputs) {
    graph_ = graph;
    for (const HostTensor& t : inputs) {
      auto h = client()->upload(t.view(), "");
      if (!h.ok()) return h.status();
      inputs_.push_back(*h);
    }
    auto m = client()->load(graph_, "");
    if (m.ok()) model_ = *m;
    return tensord::OkStatus();
  }
  ~TensordRunner() {
    for (TensorHandle h : inputs_) (void)client()->release(h);
    if (model_ != 0) (void)client()->unload(model_);
  }
  // Runs once; keeps the output when `keep` is set (for a check), else releases it.
  tensord::Result<TensorHandle> run(bool keep = false) {
    auto outs = model_ != 0 ? client()->run(model_, inputs_)
                            : client()->execute(graph_, inputs_, "");
    if (!outs.ok()) return outs.status();
    tensord::Status st = client()->wait((*outs)[0]);
    if (!st.ok() || !keep) {
      for (TensorHandle h : *outs) (void)client()->release(h);
      if (!st.ok()) return st;
      return TensorHandle{0};
    }
    return (*outs)[0];
  }
  const char* mode() const { return model_ != 0 ? "load/run" : "execute"; }

 private:
  Graph graph_;
  std::vector<TensorHandle> inputs_;
  ModelHandle model_ = 0;
};

// Runs the timed loop of a tensord benchmark; stops the benchmark on an engine error.
void run_tensord_loop(benchmark::State& state, TensordRunner& runner) {
  for (auto _ : state) {
    auto r = runner.run();
    if (!r.ok()) {
      state.SkipWithError(r.status().to_string().c_str());
      return;
    }
  }
  state.SetLabel(runner.mode());
}

// Reads a tensord output and compares it with `expected` (relative to its largest value).
bool close_to(TensorHandle h, const float* expected, int64_t n, std::string* why) {
  auto t = client()->read(h);
  (void)client()->release(h);
  if (!t.ok()) {
    *why = t.status().to_string();
    return false;
  }
  if (t->numel() != n) {
    *why = "output has " + std::to_string(t->numel()) + " elements, expected " + std::to_string(n);
    return false;
  }
  const float* y = t->data<float>();
  double scale = 1e-6, err = 0;
  for (int64_t i = 0; i < n; ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(expected[i])));
    err = std::max(err, static_cast<double>(std::fabs(expected[i] - y[i])));
  }
  if (err > 1e-3 * scale) {
    *why = "tensord's output differs from the direct computation: max abs error " +
           std::to_string(err) + " at scale " + std::to_string(scale);
    return false;
  }
  return true;
}

// ---- SGEMM ----

Graph matmul_graph(int64_t n) {
  Graph g;
  g.name = "sgemm";
  g.inputs = {{"a", {DType::kFloat32, {n, n}}}, {"b", {DType::kFloat32, {n, n}}}};
  g.outputs = {{"c", {DType::kFloat32, {n, n}}}};
  g.nodes.push_back({"matmul", "MatMul", "", {"a", "b"}, {"c"}, {}});
  return g;
}

void sgemm_reference(int64_t n, const float* a, const float* b, float* c) {
  dnnl_sgemm('N', 'N', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
}

void BM_sgemm_tensord(benchmark::State& state) {
  const int64_t n = state.range(0);
  const HostTensor a = random_tensor({n, n}, 1), b = random_tensor({n, n}, 2);
  TensordRunner runner;
  if (auto st = runner.init(matmul_graph(n), {a, b}); !st.ok()) {
    state.SkipWithError(st.to_string().c_str());
    return;
  }
  auto first = runner.run(/*keep=*/true);
  std::string why;
  std::vector<float> c(n * n);
  sgemm_reference(n, a.data<float>(), b.data<float>(), c.data());
  if (!first.ok() || !close_to(*first, c.data(), n * n, &why)) {
    state.SkipWithError(first.ok() ? why.c_str() : first.status().to_string().c_str());
    return;
  }
  run_tensord_loop(state, runner);
  set_counters(state, 2.0 * n * n * n);
}

void BM_sgemm_onednn(benchmark::State& state) {
  const int64_t n = state.range(0);
  const HostTensor a = random_tensor({n, n}, 1), b = random_tensor({n, n}, 2);
  std::vector<float> c(n * n);
  for (auto _ : state) {
    sgemm_reference(n, a.data<float>(), b.data<float>(), c.data());
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, 2.0 * n * n * n);
}

// ---- convolutions ----

struct ConvShape {
  int64_t n, c, h, w, k, group;  // NCHW input, k output channels, 3x3, stride 1, pad 1
  double flops() const { return 2.0 * n * k * h * w * (c / group) * 9; }
};
constexpr ConvShape kConv3x3{1, 64, 56, 56, 64, 1};
constexpr ConvShape kDepthwise{1, 144, 56, 56, 144, 144};

Graph conv_graph(const ConvShape& s, const HostTensor& weights) {
  Graph g;
  g.name = "conv";
  g.inputs = {{"x", {DType::kFloat32, {s.n, s.c, s.h, s.w}}}};
  g.outputs = {{"y", {DType::kFloat32, {s.n, s.k, s.h, s.w}}}};
  tensord::AttributeMap attrs = {{"kernel_shape", std::vector<int64_t>{3, 3}},
                                 {"pads", std::vector<int64_t>{1, 1, 1, 1}},
                                 {"group", s.group}};
  g.nodes.push_back({"conv", "Conv", "", {"x", "w"}, {"y"}, attrs});
  g.initializers["w"] = weights;
  return g;
}

// A oneDNN forward-inference convolution in its preferred ('any') formats; src and weights are
// reordered into them once.
class OnednnConv {
 public:
  OnednnConv(const ConvShape& s, const HostTensor& x, const HostTensor& w)
      : eng_(dnnl::engine::kind::cpu, 0), stream_(eng_) {
    using dnnl::memory;
    using Tag = memory::format_tag;
    const memory::dims src_dims = {s.n, s.c, s.h, s.w}, dst_dims = {s.n, s.k, s.h, s.w};
    const memory::dims w_dims = s.group == 1
                                    ? memory::dims{s.k, s.c, 3, 3}
                                    : memory::dims{s.group, s.k / s.group, s.c / s.group, 3, 3};
    const auto f32 = memory::data_type::f32;
    memory::desc src_any(src_dims, f32, Tag::any), w_any(w_dims, f32, Tag::any),
        dst_any(dst_dims, f32, Tag::any);
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference,
                                      dnnl::algorithm::convolution_direct, src_any, w_any,
                                      dst_any, {1, 1}, {1, 1}, {1, 1});
    dnnl::convolution_forward::primitive_desc pd(d, eng_);
    conv_ = dnnl::convolution_forward(pd);
    memory user_src({src_dims, f32, Tag::nchw}, eng_, const_cast<void*>(x.data()));
    memory user_w({w_dims, f32, s.group == 1 ? Tag::oihw : Tag::goihw}, eng_,
                  const_cast<void*>(w.data()));
    src_ = memory(pd.src_desc(), eng_);
    w_ = memory(pd.weights_desc(), eng_);
    dst_ = memory(pd.dst_desc(), eng_);
    dnnl::reorder(user_src, src_).execute(stream_, user_src, src_);
    dnnl::reorder(user_w, w_).execute(stream_, user_w, w_);
    stream_.wait();
    // The plain (nchw) output, for the check against tensord.
    plain_dst_ = memory({dst_dims, f32, Tag::nchw}, eng_);
  }
  void run() {
    conv_.execute(stream_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, w_}, {DNNL_ARG_DST, dst_}});
    stream_.wait();
  }
  const float* plain_output() {
    dnnl::reorder(dst_, plain_dst_).execute(stream_, dst_, plain_dst_);
    stream_.wait();
    return static_cast<const float*>(plain_dst_.get_data_handle());
  }

 private:
  dnnl::engine eng_;
  dnnl::stream stream_;
  dnnl::convolution_forward conv_;
  dnnl::memory src_, w_, dst_, plain_dst_;
};

HostTensor conv_weights(const ConvShape& s) {
  return random_tensor({s.k, s.c / s.group, 3, 3}, 4,
                       std::sqrt(2.0f / static_cast<float>(9 * s.c / s.group)));
}

void conv_tensord(benchmark::State& state, const ConvShape& s) {
  const HostTensor x = random_tensor({s.n, s.c, s.h, s.w}, 3), w = conv_weights(s);
  TensordRunner runner;
  if (auto st = runner.init(conv_graph(s, w), {x}); !st.ok()) {
    state.SkipWithError(st.to_string().c_str());
    return;
  }
  OnednnConv direct(s, x, w);
  direct.run();
  auto first = runner.run(/*keep=*/true);
  std::string why;
  if (!first.ok() || !close_to(*first, direct.plain_output(), s.n * s.k * s.h * s.w, &why)) {
    state.SkipWithError(first.ok() ? why.c_str() : first.status().to_string().c_str());
    return;
  }
  run_tensord_loop(state, runner);
  set_counters(state, s.flops());
}

void conv_onednn(benchmark::State& state, const ConvShape& s) {
  const HostTensor x = random_tensor({s.n, s.c, s.h, s.w}, 3), w = conv_weights(s);
  OnednnConv direct(s, x, w);
  for (auto _ : state) direct.run();
  set_counters(state, s.flops());
}

void BM_conv3x3_tensord(benchmark::State& state) { conv_tensord(state, kConv3x3); }
void BM_conv3x3_onednn(benchmark::State& state) { conv_onednn(state, kConv3x3); }
void BM_dwconv3x3_tensord(benchmark::State& state) { conv_tensord(state, kDepthwise); }
void BM_dwconv3x3_onednn(benchmark::State& state) { conv_onednn(state, kDepthwise); }

// ---- a 10-op element-wise chain ----
//   y = sqrt(|((x * 1.5 + 0.25) max 0) * 0.5 - 0.125| + 0.01) * 2 + 1
// Mul, Add, Relu, Mul, Sub, Abs, Add, Sqrt, Mul, Add: 10 FLOP per element (sqrt counted as 1).

constexpr int64_t kEltwiseN = 1 << 20;

Graph eltwise_graph() {
  Graph g;
  g.name = "eltwise10";
  g.inputs = {{"x", {DType::kFloat32, {kEltwiseN}}}};
  g.outputs = {{"y", {DType::kFloat32, {kEltwiseN}}}};
  struct Step {
    const char* op;
    float constant;  // NaN: unary
  };
  const float kUnary = std::nanf("");
  const Step steps[] = {{"Mul", 1.5f},  {"Add", 0.25f},   {"Relu", kUnary}, {"Mul", 0.5f},
                        {"Sub", 0.125f}, {"Abs", kUnary}, {"Add", 0.01f},   {"Sqrt", kUnary},
                        {"Mul", 2.0f},  {"Add", 1.0f}};
  std::string cur = "x";
  int i = 0;
  for (const Step& s : steps) {
    const std::string out = i == 9 ? "y" : "t" + std::to_string(i);
    std::vector<std::string> ins = {cur};
    if (!std::isnan(s.constant)) {
      const std::string c = "c" + std::to_string(i);
      g.initializers[c] = HostTensor::scalar<float>(s.constant);
      ins.push_back(c);
    }
    g.nodes.push_back({"op" + std::to_string(i), s.op, "", ins, {out}, {}});
    cur = out;
    ++i;
  }
  return g;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void eltwise_loop(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] * 1.5f + 0.25f;
    v = v > 0.0f ? v : 0.0f;
    v = std::fabs(v * 0.5f - 0.125f) + 0.01f;
    y[i] = std::sqrt(v) * 2.0f + 1.0f;
  }
}

void BM_eltwise10_tensord(benchmark::State& state) {
  const HostTensor x = random_tensor({kEltwiseN}, 5);
  TensordRunner runner;
  if (auto st = runner.init(eltwise_graph(), {x}); !st.ok()) {
    state.SkipWithError(st.to_string().c_str());
    return;
  }
  std::vector<float> expected(kEltwiseN);
  eltwise_loop(x.data<float>(), expected.data(), kEltwiseN);
  auto first = runner.run(/*keep=*/true);
  std::string why;
  if (!first.ok() || !close_to(*first, expected.data(), kEltwiseN, &why)) {
    state.SkipWithError(first.ok() ? why.c_str() : first.status().to_string().c_str());
    return;
  }
  run_tensord_loop(state, runner);
  set_counters(state, 10.0 * kEltwiseN);
  state.SetBytesProcessed(state.iterations() * 8 * kEltwiseN);
}

void BM_eltwise10_loop(benchmark::State& state) {
  const HostTensor x = random_tensor({kEltwiseN}, 5);
  std::vector<float> y(kEltwiseN);
  const float* px = x.data<float>();
  float* py = y.data();
  int threads = 1;
  for (auto _ : state) {
    // One chunk per OpenMP thread (one per core), each a vectorised pass.
#pragma omp parallel
    {
#ifdef _OPENMP
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
#else
      const int t = 0, nt = 1;
#endif
      const int64_t chunk = (kEltwiseN + nt - 1) / nt;
      const int64_t begin = std::min<int64_t>(kEltwiseN, t * chunk);
      const int64_t end = std::min<int64_t>(kEltwiseN, begin + chunk);
      eltwise_loop(px + begin, py + begin, end - begin);
      if (t == 0) threads = nt;
    }
    benchmark::DoNotOptimize(py);
    benchmark::ClobberMemory();
  }
  set_counters(state, 10.0 * kEltwiseN);
  state.SetBytesProcessed(state.iterations() * 8 * kEltwiseN);
  state.SetLabel(std::to_string(threads) + " OpenMP threads");
}

// ---- the machine's peak: one core's FMA throughput ----

constexpr int64_t kFmaIterations = 1 << 22;

#if defined(__x86_64__) && defined(__GNUC__)
// 12 independent accumulators cover the FMA latency (4 cycles) on two ports.
__attribute__((target("avx512f"))) float fma_avx512(int64_t iters, double* flops) {
  __m512 acc[12];
  for (int k = 0; k < 12; ++k) acc[k] = _mm512_set1_ps(0.1f * static_cast<float>(k));
  const __m512 m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < 12; ++k) acc[k] = _mm512_fmadd_ps(acc[k], m, c);
  __m512 s = acc[0];
  for (int k = 1; k < 12; ++k) s = _mm512_add_ps(s, acc[k]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  float r = 0;
  for (float v : lanes) r += v;
  *flops = 12.0 * 16 * 2 * static_cast<double>(iters);
  return r;
}

__attribute__((target("avx2,fma"))) float fma_avx2(int64_t iters, double* flops) {
  __m256 acc[12];
  for (int k = 0; k < 12; ++k) acc[k] = _mm256_set1_ps(0.1f * static_cast<float>(k));
  const __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < 12; ++k) acc[k] = _mm256_fmadd_ps(acc[k], m, c);
  __m256 s = acc[0];
  for (int k = 1; k < 12; ++k) s = _mm256_add_ps(s, acc[k]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float r = 0;
  for (float v : lanes) r += v;
  *flops = 12.0 * 8 * 2 * static_cast<double>(iters);
  return r;
}
#endif

float fma_scalar(int64_t iters, double* flops) {
  float acc[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int64_t i = 0; i < iters; ++i)
    for (float& a : acc) a = a * 0.9999999f + 1e-7f;
  *flops = 8.0 * 2 * static_cast<double>(iters);
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

const char* fma_isa() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f")) return "AVX-512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "AVX2";
#endif
  return "scalar";
}

float fma_kernel(int64_t iters, double* flops) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f")) return fma_avx512(iters, flops);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return fma_avx2(iters, flops);
#endif
  return fma_scalar(iters, flops);
}

void BM_peak_fma(benchmark::State& state) {
  double flops = 0;
  for (auto _ : state) benchmark::DoNotOptimize(fma_kernel(kFmaIterations, &flops));
  state.counters["FLOPS"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(fma_isa()) + ", one core");
}

// One core's FMA peak (best of 10 short runs, so a busy moment on a shared machine does not
// lower it) times the cores: the machine's peak, as the issue defines it.
double measure_peak_flops(double* one_core) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  double best = 0;
  for (int rep = 0; rep < 10; ++rep) {
    double flops = 0;
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(fma_kernel(kFmaIterations / 4, &flops));
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    best = std::max(best, flops / dt.count());
  }
  *one_core = best;
  return best * cores;
}

// Prints the console table, then a summary: each benchmark's GFLOP/s and share of the machine's
// peak, and tensord's time over the direct one for each pair.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred) continue;
      std::string name = r.run_name.function_name;
      if (!r.run_name.args.empty()) name += "/" + r.run_name.args;
      Result& res = results_[name];
      res.seconds = r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit);
      auto it = r.counters.find("FLOPS");
      res.flops = it != r.counters.end() ? static_cast<double>(it->second.value) : 0;
      if (std::find(order_.begin(), order_.end(), name) == order_.end()) order_.push_back(name);
    }
    ConsoleReporter::ReportRuns(runs);
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\nSummary (peak %.1f GFLOP/s):\n", g_peak_flops / 1e9);
    std::printf("  %-22s %12s %10s %9s  %s\n", "benchmark", "time", "GFLOP/s", "of peak",
                "tensord / direct");
    for (const std::string& name : order_) {
      const Result& r = results_[name];
      std::string ratio;
      const size_t at = name.find("/tensord");
      if (at != std::string::npos) {
        for (const char* direct : {"/onednn", "/loop"}) {
          std::string other = name;
          other.replace(at, 8, direct);
          auto it = results_.find(other);
          if (it == results_.end() || it->second.seconds <= 0) continue;
          char buf[96];
          std::snprintf(buf, sizeof buf, "%.2fx the time of %s (%.0f%% of its speed)",
                        r.seconds / it->second.seconds, direct + 1,
                        100.0 * it->second.seconds / r.seconds);
          ratio = buf;
        }
      }
      std::printf("  %-22s %10.3f ms %10.2f %8.1f%%  %s\n", name.c_str(), r.seconds * 1e3,
                  r.flops / 1e9, g_peak_flops > 0 ? 100.0 * r.flops / g_peak_flops : 0.0,
                  ratio.c_str());
    }
    std::fflush(stdout);
  }

 private:
  struct Result {
    double seconds = 0;  // per iteration, real time
    double flops = 0;    // FLOP/s
  };
  std::map<std::string, Result> results_;
  std::vector<std::string> order_;
};

}  // namespace

BENCHMARK(BM_peak_fma)->Name("peak/fma")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_sgemm_tensord)
    ->Name("sgemm/tensord")
    ->Arg(256)->Arg(1024)->Arg(2048)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_sgemm_onednn)
    ->Name("sgemm/onednn")
    ->Arg(256)->Arg(1024)->Arg(2048)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_conv3x3_tensord)->Name("conv3x3/tensord")->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_conv3x3_onednn)->Name("conv3x3/onednn")->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_dwconv3x3_tensord)->Name("dwconv3x3/tensord")->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_dwconv3x3_onednn)->Name("dwconv3x3/onednn")->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_eltwise10_tensord)->Name("eltwise10/tensord")->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_eltwise10_loop)->Name("eltwise10/loop")->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

int main(int argc, char** argv) {
  bool console = true;  // the ratio table only goes with the console format
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--benchmark_format=", 0) == 0 && arg != "--benchmark_format=console")
      console = false;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  double one_core = 0;
  g_peak_flops = measure_peak_flops(&one_core);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.1f GFLOP/s (%s FMA: %.1f per core x %u cores)",
                g_peak_flops / 1e9, fma_isa(), one_core / 1e9, cores);
  benchmark::AddCustomContext("peak_fp32", buf);
  benchmark::AddCustomContext("dnnl_version", std::to_string(dnnl_version()->major) + "." +
                                                  std::to_string(dnnl_version()->minor) + "." +
                                                  std::to_string(dnnl_version()->patch));
  RatioReporter reporter;
  if (console)
    benchmark::RunSpecifiedBenchmarks(&reporter);
  else
    benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
