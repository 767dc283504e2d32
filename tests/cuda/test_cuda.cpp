// The CUDA backend. Three tiers:
//  - here, always: the library search, the planning logic (MatMul on cuBLAS, staged copies,
//    architecture choice);
//  - here, with NVRTC (the CUDA toolkit, no GPU): the generated CUDA C compiles, and every kernel
//    the generator emits for the ONNX node tests compiles (TENSORD_CUDA_COMPILE_ONLY runs the
//    suite on a pretend cuda:0 that compiles each kernel and runs none). Skips without NVRTC,
//    fails then under CI=true (CI builds this test only when it found the toolkit);
//  - on a GPU: devices, memory, copies, kernels and cuBLAS against the cpu reference. They skip
//    with "no CUDA device" elsewhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>

#include "backends/codegen/lower.h"
#include "backends/codegen/printer.h"
#include "backends/codegen/recurrent.h"
#include "backends/cuda/cuda_api.h"
#include "backends/cuda/cuda_backend.h"
#include "client/local_client.h"
#include "rpc/broker_process.h"
#include "rpc/remote_client.h"
#include "engine/memory_pool.h"
#include "kernels/op_test_util.h"
#include "onnx/onnx_import.h"
#include "tensord/client.h"
#include "tensord/onnx.h"

namespace tensord {
namespace {

namespace fs = std::filesystem;

bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

// A fresh disk cache for this process's kernels (so compiles are compiles).
const bool kEnvironment = [] {
  static char kernels[] = "/tmp/tensord-cuda-kernel-cache-XXXXXX";
  if (mkdtemp(kernels)) setenv("TENSORD_KERNEL_CACHE", kernels, 1);
  return true;
}();

#define REQUIRE_NVRTC()                                                                        \
  do {                                                                                         \
    (void)kEnvironment;                                                                        \
    std::string why_;                                                                          \
    if (!cuda::nvrtc_available(&why_)) {                                                       \
      if (in_ci()) FAIL() << "NVRTC not loadable under CI=true (the toolkit was found at configure): " << why_; \
      GTEST_SKIP() << "NVRTC is not loadable here: " << why_;                                  \
    }                                                                                          \
  } while (0)

// The compile-only devices ("cuda:0" whose kernels NVRTC compiles for `arch` but nothing
// runs): TENSORD_CUDA_COMPILE_ONLY is set only while they are enumerated.
std::vector<std::unique_ptr<Device>> compile_only_devices(Backend& backend, const std::string& arch = "compute_90") {
  setenv("TENSORD_CUDA_COMPILE_ONLY", arch.c_str(), 1);
  auto devices = backend.enumerate();
  unsetenv("TENSORD_CUDA_COMPILE_ONLY");
  return devices;
}
// An engine over cpu:0 and the compile-only cuda:0.
Result<std::unique_ptr<Client>> compile_only_client(const std::string& arch = "compute_90",
                                                    bool reference_kernels = true) {
  setenv("TENSORD_CUDA_COMPILE_ONLY", arch.c_str(), 1);
  LocalClientOptions o;
  o.devices = "cpu:0,cuda:0";
  o.reference_kernels = reference_kernels;
  auto client = make_local_client(o);
  unsetenv("TENSORD_CUDA_COMPILE_ONLY");
  return client;
}

// ---- library search ----

TEST(CudaLibraries, TheEnvironmentFolderComesFirstAndNamesTryNewestMajorFirst) {
  setenv("TENSORD_CUDA_LIB_DIR", "/opt/a:/opt/b", 1);
  auto dirs = cuda::library_dirs();
  unsetenv("TENSORD_CUDA_LIB_DIR");
  ASSERT_GE(dirs.size(), 3u);
  EXPECT_EQ(dirs[0], "/opt/a");
  EXPECT_EQ(dirs[1], "/opt/b");
  EXPECT_NE(std::find(dirs.begin(), dirs.end(), "/usr/local/cuda/lib64"), dirs.end());
  std::set<std::string> unique(dirs.begin(), dirs.end());
  EXPECT_EQ(unique.size(), dirs.size()) << "no folder twice";
  auto names = cuda::library_names("nvrtc");
  ASSERT_EQ(names.size(), 3u);
  EXPECT_EQ(names[0], "libnvrtc.so.13");
  EXPECT_EQ(names[1], "libnvrtc.so.12");
  EXPECT_EQ(cuda::library_names("cuda")[0], "libcuda.so.1");
}

TEST(CudaLibraries, WithoutADriverTheBackendListsNoDevicesAndSaysWhy) {
  auto backend = cuda::create_cuda_backend();
  EXPECT_EQ(backend->name(), "cuda");
  auto devices = backend->enumerate();
  std::string why;
  if (cuda::driver_api(&why) && !devices.empty()) GTEST_SKIP() << "this machine has a CUDA device";
  EXPECT_TRUE(devices.empty());
  EXPECT_FALSE(backend->unavailable_reason().empty());
  EXPECT_EQ(backend->unavailable_reason().find('\n'), std::string::npos) << "one line";
  setenv("TENSORD_CUDA", "0", 1);
  EXPECT_TRUE(backend->enumerate().empty());
  EXPECT_EQ(backend->unavailable_reason(), "TENSORD_CUDA=0");
  unsetenv("TENSORD_CUDA");
}

TEST(CudaLibraries, ABadCompileOnlyArchitectureIsRefusedByName) {
  setenv("TENSORD_CUDA_COMPILE_ONLY", "volta", 1);
  Status s = cuda::create_cuda_backend()->check_settings();
  unsetenv("TENSORD_CUDA_COMPILE_ONLY");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("TENSORD_CUDA_COMPILE_ONLY='volta'"), std::string::npos) << s.message();
}

// ---- planning (no GPU) ----

TEST(CudaPlanning, MatMulShapesMapToOneCublasCall) {
  auto p = cuda::plan_matmul({3, 4}, {4, 5});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->m, 3);
  EXPECT_EQ(p->n, 5);
  EXPECT_EQ(p->k, 4);
  EXPECT_EQ(p->batch, 1);
  EXPECT_EQ(p->out_shape, (std::vector<int64_t>{3, 5}));

  // Batched A times one B: folded into one tall GEMM.
  p = cuda::plan_matmul({2, 6, 3, 4}, {4, 5});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->m, 36);
  EXPECT_EQ(p->batch, 1);
  EXPECT_EQ(p->out_shape, (std::vector<int64_t>{2, 6, 3, 5}));

  // Both batched: strided.
  p = cuda::plan_matmul({7, 3, 4}, {7, 4, 5});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->batch, 7);
  EXPECT_EQ(p->stride_a, 12);
  EXPECT_EQ(p->stride_b, 20);
  EXPECT_EQ(p->stride_c, 15);

  // One A, batched B: stride 0 on A.
  p = cuda::plan_matmul({3, 4}, {2, 7, 4, 5});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->batch, 14);
  EXPECT_EQ(p->stride_a, 0);
  EXPECT_EQ(p->out_shape, (std::vector<int64_t>{2, 7, 3, 5}));

  // Vectors: [K]x[K,N] -> [N]; [M,K]x[K] -> [M]; [K]x[K] -> [].
  p = cuda::plan_matmul({4}, {4, 5});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->m, 1);
  EXPECT_EQ(p->out_shape, (std::vector<int64_t>{5}));
  p = cuda::plan_matmul({3, 4}, {4});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->n, 1);
  EXPECT_EQ(p->out_shape, (std::vector<int64_t>{3}));
  p = cuda::plan_matmul({4}, {4});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->out_shape.empty());

  // Errors: inner dims; partial broadcasts (2x1 against 1x3) go back to the cpu.
  EXPECT_EQ(cuda::plan_matmul({3, 4}, {5, 6}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::plan_matmul({2, 1, 3, 4}, {1, 3, 4, 5}).status().code(), StatusCode::kUnimplemented);
}

Node conv_node(AttributeMap attrs, const char* op = "Conv") {
  Node n;
  n.name = "c";
  n.op = op;
  n.inputs = {"x", "w"};
  n.outputs = {"y"};
  n.attrs = std::move(attrs);
  return n;
}

TEST(CudaPlanning, ConvolutionsMapToCudnnDescriptorsOrSayWhyNot) {
  // 3x3, pad 1, stride 2: symmetric, output floor((56 + 2 - 3) / 2) + 1 = 28.
  auto p = cuda::plan_cudnn_conv(
      conv_node({{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"strides", std::vector<int64_t>{2, 2}}}),
      {8, 16, 56, 56}, {32, 16, 3, 3}, true);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->y, (std::vector<int64_t>{8, 32, 28, 28}));
  EXPECT_EQ(p->pads, (std::vector<int>{1, 1}));
  EXPECT_EQ(p->strides, (std::vector<int>{2, 2}));
  EXPECT_EQ(p->dilations, (std::vector<int>{1, 1}));
  EXPECT_TRUE(p->bias);
  // Depthwise (group = channels), dilation 2, SAME_UPPER with an even total pad.
  p = cuda::plan_cudnn_conv(conv_node({{"group", int64_t{16}},
                                       {"dilations", std::vector<int64_t>{2, 2}},
                                       {"auto_pad", std::string("SAME_UPPER")}}),
                            {1, 16, 10, 10}, {16, 1, 3, 3}, false);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->group, 16);
  EXPECT_EQ(p->pads, (std::vector<int>{2, 2}));
  EXPECT_EQ(p->y, (std::vector<int64_t>{1, 16, 10, 10}));
  // 1-D runs as 2-D with height 1.
  p = cuda::plan_cudnn_conv(conv_node({}), {2, 3, 7}, {4, 3, 3}, false);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->x, (std::vector<int64_t>{2, 3, 1, 7}));
  EXPECT_EQ(p->y, (std::vector<int64_t>{2, 4, 1, 5}));
  EXPECT_EQ(p->pads.size(), 2u);
  // Asymmetric pads (explicit or from SAME with an odd total): not cuDNN's, the template's.
  p = cuda::plan_cudnn_conv(conv_node({{"pads", std::vector<int64_t>{0, 0, 1, 1}}}), {1, 1, 5, 5}, {1, 1, 2, 2}, false);
  EXPECT_EQ(p.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(p.status().message().find("asymmetric"), std::string::npos) << p.status().message();
  p = cuda::plan_cudnn_conv(conv_node({{"auto_pad", std::string("SAME_LOWER")}}), {1, 1, 4, 4}, {1, 1, 2, 2}, false);
  EXPECT_EQ(p.status().code(), StatusCode::kUnimplemented);
  // Channels and groups that disagree: a bad model, said so.
  p = cuda::plan_cudnn_conv(conv_node({{"group", int64_t{3}}}), {1, 4, 5, 5}, {6, 2, 3, 3}, false);
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  p = cuda::plan_cudnn_conv(conv_node({}), {1, 1, 2, 2, 2, 2}, {1, 1, 1, 1, 1, 1}, false);
  EXPECT_EQ(p.status().code(), StatusCode::kUnimplemented);
}

TEST(CudaPlanning, PoolingsMapToCudnnDescriptorsOrSayWhyNot) {
  auto p = cuda::plan_cudnn_pool(
      conv_node({{"kernel_shape", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{2, 2}},
                 {"pads", std::vector<int64_t>{1, 1, 1, 1}}},
                "MaxPool"),
      {1, 64, 112, 112});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->mode, cuda::PoolPlan::kMax);
  EXPECT_EQ(p->y, (std::vector<int64_t>{1, 64, 56, 56}));
  EXPECT_EQ(p->window, (std::vector<int>{3, 3}));
  p = cuda::plan_cudnn_pool(conv_node({{"kernel_shape", std::vector<int64_t>{2, 2}},
                                       {"pads", std::vector<int64_t>{1, 1, 1, 1}},
                                       {"count_include_pad", int64_t{1}}},
                                      "AveragePool"),
                            {1, 1, 4, 4});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->mode, cuda::PoolPlan::kAverageIncludePad);
  EXPECT_EQ(p->y, (std::vector<int64_t>{1, 1, 5, 5}));
  p = cuda::plan_cudnn_pool(conv_node({{"kernel_shape", std::vector<int64_t>{2, 2}}}, "AveragePool"), {1, 1, 4, 4});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->mode, cuda::PoolPlan::kAverageExcludePad);
  p = cuda::plan_cudnn_pool(conv_node({}, "GlobalAveragePool"), {2, 8, 7, 7});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->window, (std::vector<int>{7, 7}));
  EXPECT_EQ(p->y, (std::vector<int64_t>{2, 8, 1, 1}));
  // What cuDNN cannot do goes to the templates: ceil_mode with a partial window, dilations,
  // the Indices output.
  p = cuda::plan_cudnn_pool(conv_node({{"kernel_shape", std::vector<int64_t>{2, 2}}, {"ceil_mode", int64_t{1}},
                                       {"strides", std::vector<int64_t>{2, 2}}},
                                      "MaxPool"),
                            {1, 1, 5, 5});
  EXPECT_EQ(p.status().code(), StatusCode::kUnimplemented);
  p = cuda::plan_cudnn_pool(conv_node({{"kernel_shape", std::vector<int64_t>{2, 2}}, {"ceil_mode", int64_t{1}},
                                       {"strides", std::vector<int64_t>{2, 2}}},
                                      "MaxPool"),
                            {1, 1, 4, 4});
  EXPECT_TRUE(p.ok()) << "ceil_mode without a partial window is the same size";
  p = cuda::plan_cudnn_pool(conv_node({{"kernel_shape", std::vector<int64_t>{2, 2}},
                                       {"dilations", std::vector<int64_t>{2, 2}}},
                                      "MaxPool"),
                            {1, 1, 5, 5});
  EXPECT_EQ(p.status().code(), StatusCode::kUnimplemented);
  Node two = conv_node({{"kernel_shape", std::vector<int64_t>{2, 2}}}, "MaxPool");
  two.outputs = {"y", "indices"};
  EXPECT_EQ(cuda::plan_cudnn_pool(two, {1, 1, 4, 4}).status().code(), StatusCode::kUnimplemented);
}

TEST(CudaLibraries, CudnnLoadsWithoutAGpuAndIsVersion9) {
  std::string why;
  const int64_t v = cuda::cudnn_version(&why);
  if (v == 0) {
    if (in_ci() && std::filesystem::exists("/usr/local/cuda/include/cudnn.h"))
      FAIL() << "cuDNN's header is installed but libcudnn does not load: " << why;
    GTEST_SKIP() << "cuDNN is not loadable here: " << why;
  }
  std::cout << "[ cuda ] cuDNN " << v / 10000 << "." << (v % 10000) / 100 << "." << v % 100 << "\n";
  EXPECT_GE(v, 90000);
  EXPECT_LT(v, 100000);
  EXPECT_EQ(cuda::library_names("cudnn").front(), "libcudnn.so.9");
}

// float16 in a fused chain (no NVRTC needed): float32 arithmetic, each float16 result rounded
// where the graph has one (so a Cast to float16 and back inside a chain is not an identity),
// float32 in and out stored plainly; a float16 input is loaded as float. Without `halves`
// (the OpenCL backend) the chain is refused, and the OpenCL C printer says it has no half
// storage.
TEST(CudaPlanning, HalfChainsComputeInFloatAndRoundWhereTheGraphDoes) {
  auto node = [](const char* op, std::vector<std::string> in, std::string out, int64_t to) {
    Node n;
    n.op = op;
    n.inputs = std::move(in);
    n.outputs = {std::move(out)};
    if (to >= 0) n.attrs["to"] = to;
    return n;
  };
  const Node c1 = node("Cast", {"x"}, "h", static_cast<int64_t>(DType::kFloat16));
  const Node add = node("Add", {"h", "b"}, "s", -1);
  const Node c2 = node("Cast", {"s"}, "y", static_cast<int64_t>(DType::kFloat32));
  std::map<std::string, TensorType> types = {{"x", {DType::kFloat32, {2, 3}}}, {"h", {DType::kFloat16, {2, 3}}},
                                             {"b", {DType::kFloat16, {2, 3}}}, {"s", {DType::kFloat16, {2, 3}}},
                                             {"y", {DType::kFloat32, {2, 3}}}};
  auto type_of = [&](const std::string& n) -> const TensorType* {
    auto it = types.find(n);
    return it == types.end() ? nullptr : &it->second;
  };
  EXPECT_FALSE(codegen::lower_elementwise({&c1, &add, &c2}, {"y"}, {2, 3}, type_of, nullptr).ok());
  auto g = codegen::lower_elementwise({&c1, &add, &c2}, {"y"}, {2, 3}, type_of, nullptr, true);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  int rounds = 0;
  for (const auto& in : g->kernel.body) {
    rounds += in.op == "round_f16";
    EXPECT_NE(in.op, "round_bf16");
  }
  EXPECT_EQ(rounds, 2) << "after the Cast to float16 and after the float16 Add";
  ASSERT_EQ(g->kernel.inputs.size(), 2u);
  EXPECT_EQ(g->kernel.inputs[0].storage, codegen::Storage::kPlain);  // x: float32
  EXPECT_EQ(g->kernel.inputs[1].storage, codegen::Storage::kF16);    // b: float16 words
  ASSERT_EQ(g->kernel.outputs.size(), 1u);
  EXPECT_EQ(g->kernel.outputs[0].storage, codegen::Storage::kPlain);  // y: float32
  auto src = codegen::CudaPrinter().print(g->kernel);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_NE(src->find("td_f16_to_f32(td_f32_to_f16("), std::string::npos) << *src;
  EXPECT_NE(src->find("td_f16_to_f32(in1[i])"), std::string::npos) << *src;
  auto ocl = codegen::OpenClPrinter().print(g->kernel);
  ASSERT_FALSE(ocl.ok());
  EXPECT_NE(ocl.status().message().find("float16"), std::string::npos) << ocl.status().message();
}

fs::path node_tests_dir();  // below

// A bidirectional `op` (RNN, LSTM, GRU with linear_before_reset=1: what cuDNN computes) of
// seq 4, batch 2, input 3, hidden 5 with biases and initial state, and random inputs.
std::pair<Graph, std::vector<HostTensor>> recurrent_case(const std::string& op, int gates) {
  const int64_t S = 4, B = 2, I = 3, H = 5;
  Graph g;
  g.inputs = {{"X", {DType::kFloat32, {S, B, I}}}, {"W", {DType::kFloat32, {2, gates * H, I}}},
              {"R", {DType::kFloat32, {2, gates * H, H}}}, {"B", {DType::kFloat32, {2, 2 * gates * H}}},
              {"h0", {DType::kFloat32, {2, B, H}}}};
  Node n;
  n.op = op;
  n.inputs = {"X", "W", "R", "B", "", "h0"};
  n.outputs = {"Y", "Y_h"};
  g.outputs = {{"Y", {DType::kFloat32, {S, 2, B, H}}}, {"Y_h", {DType::kFloat32, {2, B, H}}}};
  if (op == "LSTM") {
    g.inputs.push_back({"c0", {DType::kFloat32, {2, B, H}}});
    n.inputs.push_back("c0");
    n.outputs.push_back("Y_c");
    g.outputs.push_back({"Y_c", {DType::kFloat32, {2, B, H}}});
  }
  n.attrs["hidden_size"] = H;
  n.attrs["direction"] = std::string("bidirectional");
  if (op == "GRU") n.attrs["linear_before_reset"] = int64_t{1};
  g.nodes = {n};
  std::vector<HostTensor> in;
  uint32_t seed = 11;
  for (const auto& v : g.inputs) {
    std::mt19937 rng(seed++);
    std::uniform_real_distribution<float> u(-0.8f, 0.8f);
    HostTensor t(DType::kFloat32, v.type.shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = u(rng);
    in.push_back(std::move(t));
  }
  return {g, in};
}

// cuDNN's RNN equations (cudnnRNNMode_t's documentation), computed on the host from a weight
// space filled by cuda::rnn_weight_copies: linear layer l of each direction is a [hidden][cols]
// matrix plus a bias, in cuDNN's gate order (LSTM: i f g o, then the recurrent ones; GRU: r z h,
// the reset gate applied to R's product; RNN: W then R). Returns Y [seq][dirs][batch][hidden],
// then Y_h and (LSTM) Y_c [dirs][batch][hidden].
std::vector<std::vector<float>> cudnn_rnn_equations(const cuda::RnnPlan& p, const std::vector<const float*>& in) {
  const int64_t S = p.seq, B = p.batch, I = p.input, H = p.hidden;
  const int g = p.gates;
  std::vector<float> y(static_cast<size_t>(S * p.dirs * B * H)), yh(static_cast<size_t>(p.dirs * B * H)), yc(yh.size());
  for (int d = 0; d < p.dirs; ++d) {
    // This direction's space: the matrices one after another, then the biases.
    std::vector<std::pair<int64_t, int64_t>> off;
    int64_t at = 0;
    for (int l = 0; l < 2 * g; ++l) off.push_back({at, 0}), at += H * (l < g ? I : H);
    for (int l = 0; l < 2 * g; ++l) off[static_cast<size_t>(l)].second = at, at += H;
    std::vector<float> space(static_cast<size_t>(at), 0.0f);  // zeroed, as the kernel zeroes it
    auto copies = cuda::rnn_weight_copies(p, d, [&](int l) { return off[static_cast<size_t>(l)]; }, space.size());
    EXPECT_TRUE(copies.ok()) << copies.status().to_string();
    for (const auto& c : copies.ok() ? *copies : std::vector<cuda::RnnCopy>{})
      std::copy(in[static_cast<size_t>(c.src)] + c.src_offset, in[static_cast<size_t>(c.src)] + c.src_offset + c.count,
                space.begin() + c.dst_offset);
    auto lin = [&](int l, const float* v) {
      const int64_t cols = l < g ? I : H;
      std::vector<float> out(static_cast<size_t>(H));
      for (int64_t j = 0; j < H; ++j) {
        double acc = space[static_cast<size_t>(off[static_cast<size_t>(l)].second + j)];
        for (int64_t k = 0; k < cols; ++k) acc += double(space[static_cast<size_t>(off[static_cast<size_t>(l)].first + j * cols + k)]) * v[k];
        out[static_cast<size_t>(j)] = static_cast<float>(acc);
      }
      return out;
    };
    auto sig = [](float v) { return 1.0f / (1.0f + std::exp(-v)); };
    for (int64_t b = 0; b < B; ++b) {
      std::vector<float> h(static_cast<size_t>(H), 0.0f), c(h);
      for (int64_t j = 0; j < H; ++j) {
        if (in[5]) h[static_cast<size_t>(j)] = in[5][(d * B + b) * H + j];
        if (in[6]) c[static_cast<size_t>(j)] = in[6][(d * B + b) * H + j];
      }
      for (int64_t s = 0; s < S; ++s) {
        const int64_t t = d == 0 ? s : S - 1 - s;
        const float* x = in[0] + (t * B + b) * I;
        std::vector<float> nh(h);
        if (p.cell == cuda::RnnPlan::kLstm) {
          auto i = lin(0, x), f = lin(1, x), gg = lin(2, x), o = lin(3, x);
          auto ri = lin(4, h.data()), rf = lin(5, h.data()), rg = lin(6, h.data()), ro = lin(7, h.data());
          for (size_t j = 0; j < h.size(); ++j) {
            c[j] = sig(f[j] + rf[j]) * c[j] + sig(i[j] + ri[j]) * std::tanh(gg[j] + rg[j]);
            nh[j] = sig(o[j] + ro[j]) * std::tanh(c[j]);
          }
        } else if (p.cell == cuda::RnnPlan::kGru) {
          auto r = lin(0, x), z = lin(1, x), n = lin(2, x), rr = lin(3, h.data()), rz = lin(4, h.data()), rn = lin(5, h.data());
          for (size_t j = 0; j < h.size(); ++j) {
            const float zz = sig(z[j] + rz[j]);
            nh[j] = (1.0f - zz) * std::tanh(n[j] + sig(r[j] + rr[j]) * rn[j]) + zz * h[j];
          }
        } else {
          auto a = lin(0, x), ra = lin(1, h.data());
          for (size_t j = 0; j < h.size(); ++j)
            nh[j] = p.cell == cuda::RnnPlan::kRnnRelu ? std::max(0.0f, a[j] + ra[j]) : std::tanh(a[j] + ra[j]);
        }
        h = nh;
        for (int64_t j = 0; j < H; ++j) y[static_cast<size_t>(((t * p.dirs + d) * B + b) * H + j)] = h[static_cast<size_t>(j)];
      }
      for (int64_t j = 0; j < H; ++j) {
        yh[static_cast<size_t>((d * B + b) * H + j)] = h[static_cast<size_t>(j)];
        yc[static_cast<size_t>((d * B + b) * H + j)] = c[static_cast<size_t>(j)];
      }
    }
  }
  return {y, yh, yc};
}

// ONNX's RNN/LSTM/GRU in cuDNN's weight layout, checked against the ONNX project's own outputs:
// the node tests' LSTM and simple RNN cases, laid out by rnn_weight_copies and computed with
// cuDNN's equations, give the tests' expected outputs; a bidirectional GRU with
// linear_before_reset=1 (cuDNN's GRU) gives what the cpu reference kernel gives. What cuDNN
// computes differently is refused by name (ONNX's default GRU, peepholes, reverse).
TEST(CudaPlanning, OnnxRecurrentWeightsMapToCudnnsLayoutAndEquations) {
  const fs::path dir = node_tests_dir();
  if (dir.empty()) {
    if (in_ci()) FAIL() << "no ONNX node tests under CI=true";
    GTEST_SKIP() << "no ONNX node tests here";
  }
  auto check = [&](const Graph& graph, const std::vector<HostTensor>& values, const std::vector<HostTensor>& want,
                   const std::string& what) {
    ASSERT_EQ(graph.nodes.size(), 1u) << what;
    const Node& node = graph.nodes[0];
    std::vector<TensorType> types(8);
    std::vector<const float*> ptrs(8, nullptr);
    for (size_t i = 0; i < node.inputs.size() && i < 8; ++i) {
      for (size_t j = 0; j < graph.inputs.size(); ++j)
        if (!node.inputs[i].empty() && graph.inputs[j].name == node.inputs[i]) {
          types[i] = values[j].type();
          if (values[j].dtype() == DType::kFloat32) ptrs[i] = values[j].data<float>();
        }
    }
    auto plan = cuda::plan_cudnn_rnn(node, types);
    ASSERT_TRUE(plan.ok()) << what << ": " << plan.status().to_string();
    const auto got = cudnn_rnn_equations(*plan, ptrs);
    for (size_t o = 0; o < graph.outputs.size(); ++o) {
      size_t k = 0;
      while (k < node.outputs.size() && node.outputs[k] != graph.outputs[o].name) ++k;
      ASSERT_LT(k, 3u) << what;
      ASSERT_EQ(static_cast<size_t>(want[o].numel()), got[k].size()) << what << " output " << k;
      for (size_t i = 0; i < got[k].size(); ++i)
        EXPECT_NEAR(got[k][i], want[o].data<float>()[i], 1e-5) << what << " output " << k << " [" << i << "]";
    }
  };
  auto load = [&](const std::string& name, Graph* g, std::vector<HostTensor>* in, std::vector<HostTensor>* out) {
    auto graph = load_onnx_file((dir / name / "model.onnx").string());
    if (!graph.ok()) return false;
    *g = *graph;
    for (size_t i = 0; i < g->inputs.size(); ++i)
      in->push_back(*onnx::read_tensor_file((dir / name / "test_data_set_0" / ("input_" + std::to_string(i) + ".pb")).string()));
    for (size_t i = 0; i < g->outputs.size(); ++i)
      out->push_back(*onnx::read_tensor_file((dir / name / "test_data_set_0" / ("output_" + std::to_string(i) + ".pb")).string()));
    return true;
  };
  int checked = 0;
  for (const char* name : {"test_lstm_defaults", "test_lstm_with_initial_bias", "test_simple_rnn_defaults",
                           "test_simple_rnn_with_initial_bias"}) {
    Graph g;
    std::vector<HostTensor> in, want;
    if (!load(name, &g, &in, &want)) continue;
    check(g, in, want, name);
    ++checked;
  }
  EXPECT_EQ(checked, 4) << "the LSTM and RNN node tests are in " << dir;
  for (const auto& [name, why] : std::vector<std::pair<const char*, const char*>>{
           {"test_gru_defaults", "linear_before_reset=0"}, {"test_lstm_with_peepholes", "peepholes"}}) {
    Graph g;
    std::vector<HostTensor> in, want;
    if (!load(name, &g, &in, &want)) continue;
    std::vector<TensorType> types;
    for (const auto& n : g.nodes[0].inputs) {
      TensorType t;
      for (size_t j = 0; j < g.inputs.size(); ++j)
        if (!n.empty() && g.inputs[j].name == n) t = in[j].type();
      types.push_back(t);
    }
    auto plan = cuda::plan_cudnn_rnn(g.nodes[0], types);
    ASSERT_FALSE(plan.ok()) << name;
    EXPECT_EQ(plan.status().code(), StatusCode::kUnimplemented) << name;
    EXPECT_NE(plan.status().message().find(why), std::string::npos) << plan.status().message();
  }
  // The node tests' weights are the same in every gate (so they cannot tell a gate order from
  // another): random bidirectional cells with initial state, against the cpu reference kernel.
  LocalClientOptions o;
  o.devices = "cpu:0";
  auto client = make_local_client(o);
  ASSERT_TRUE(client.ok());
  auto against_cpu = [&](const std::string& op, int gates, const std::string& what) {
    auto [g, in] = recurrent_case(op, gates);
    auto ref = testing::run_on(**client, g, in, "cpu:0");
    ASSERT_TRUE(ref.ok()) << what << ": " << ref.status().to_string();
    std::vector<HostTensor> want;
    for (auto& r : *ref) {
      ASSERT_TRUE(r.ok()) << what << ": " << r.status().to_string();
      want.push_back(*r);
    }
    check(g, in, want, what);
  };
  against_cpu("LSTM", 4, "LSTM, bidirectional");
  against_cpu("GRU", 3, "GRU linear_before_reset=1, bidirectional");
  against_cpu("RNN", 1, "RNN, bidirectional");
  // A weight space that cuDNN reports too small for a block: refused, not overrun.
  auto [g, in] = recurrent_case("LSTM", 4);
  std::vector<TensorType> types;
  for (const auto& n : g.nodes[0].inputs) {
    TensorType t;
    for (size_t j = 0; j < g.inputs.size(); ++j)
      if (!n.empty() && g.inputs[j].name == n) t = in[j].type();
    types.push_back(t);
  }
  auto plan = cuda::plan_cudnn_rnn(g.nodes[0], types);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->dirs, 2);
  auto small = cuda::rnn_weight_copies(*plan, 1, [](int l) { return std::pair<int64_t, int64_t>{l * 15, 200}; }, 200);
  EXPECT_EQ(small.status().code(), StatusCode::kOutOfRange) << small.status().to_string();
}

TEST(CudaPlanning, CopiesAreChunkedToTheStagingBuffers) {
  auto c = cuda::plan_chunks(20, 8);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0], (std::pair<size_t, size_t>{0, 8}));
  EXPECT_EQ(c[2], (std::pair<size_t, size_t>{16, 4}));
  EXPECT_TRUE(cuda::plan_chunks(0, 8).empty());
  EXPECT_EQ(cuda::plan_chunks(8, 8).size(), 1u);
}

TEST(CudaPlanning, ArchitectureIsACubinWhenKnownElsePtxOfTheNearestBelow) {
  const std::vector<int> known = {75, 80, 86, 89, 90, 100, 120};
  EXPECT_EQ(cuda::choose_arch(90, known), "sm_90");
  EXPECT_EQ(cuda::choose_arch(87, known), "compute_86");
  EXPECT_EQ(cuda::choose_arch(130, known), "compute_120");
  EXPECT_EQ(cuda::choose_arch(70, known), "");
}

// The engine's caching allocator over a cuda device (the compile-only one: host memory behind
// the same Device interface): small tensors are (slab, offset) pairs, writes and reads land at
// the buffer's offset, and bytes in use / reserved add up.
TEST(CudaPlanning, TheEnginesPoolSubAllocatesCudaAllocations) {
  REQUIRE_NVRTC();
  auto backend = cuda::create_cuda_backend();
  auto devices = compile_only_devices(*backend, "sm_90");
  ASSERT_EQ(devices.size(), 1u) << backend->unavailable_reason();
  Device& d = *devices[0];
  {
    DevicePool pool(&d);
    auto a = pool.allocate(1000), b = pool.allocate(1000), big = pool.allocate(3 << 20);
    ASSERT_TRUE(a.ok() && b.ok() && big.ok());
    EXPECT_EQ(a->base, b->base) << "two small blocks share one slab";
    EXPECT_NE(a->offset, b->offset);
    EXPECT_EQ(big->slab, -1) << "a large block is a whole allocation";
    EXPECT_GE(pool.reserved(), static_cast<int64_t>(DevicePool::kSlabBytes + (3 << 20)));
    EXPECT_GE(pool.in_use(), 2000 + (3 << 20));
    Buffer ba{&d, a->base, 1000, a->offset}, bb{&d, b->base, 1000, b->offset};
    std::vector<unsigned char> x(1000, 0xab), y(1000, 0xcd), back(1000);
    ASSERT_TRUE(d.write(ba, 0, x.data(), 1000).ok());
    ASSERT_TRUE(d.write(bb, 0, y.data(), 1000).ok());
    ASSERT_TRUE(d.read(ba, 0, back.data(), 1000).ok());
    EXPECT_EQ(back, x) << "the neighbour's write did not land on this block";
    pool.free(*a);
    pool.free(*b);
    pool.free(*big);
    EXPECT_EQ(pool.in_use(), 0);
    auto again = pool.allocate(3 << 20);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->base, big->base) << "the freed large block is reused";
    pool.free(*again);
  }
}

// ---- NVRTC (no GPU) ----

TEST(CudaNvrtc, APrintedKernelCompilesToPtxAndCubin) {
  REQUIRE_NVRTC();
  auto k = codegen::lower_transpose({2, 3, 4}, {2, 0, 1}, DType::kFloat32);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  codegen::CudaPrinter printer;
  auto src = printer.print(*k);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  auto ptx = cuda::nvrtc_compile(*src, "compute_90");
  ASSERT_TRUE(ptx.ok()) << ptx.status().to_string();
  EXPECT_FALSE(ptx->cubin);
  EXPECT_NE(ptx->image.find(".entry " + k->name), std::string::npos) << "PTX names the kernel";
  auto cubin = cuda::nvrtc_compile(*src, "sm_90");
  ASSERT_TRUE(cubin.ok()) << cubin.status().to_string();
  EXPECT_TRUE(cubin->cubin);
  ASSERT_GE(cubin->image.size(), 4u);
  EXPECT_EQ(cubin->image.substr(1, 3), "ELF");
  EXPECT_FALSE(cuda::nvrtc_architectures().empty());
}

// Gelu (both forms) through the generator's lowering, and the recurrent loop's generated
// kernels (codegen/recurrent.h, run by the OpenCL backend), print as CUDA C that NVRTC
// compiles: the second dialect is a printer, not a rewrite.
TEST(CudaNvrtc, GeluAndRecurrentKernelsPrintAndCompile) {
  REQUIRE_NVRTC();
  std::map<std::string, TensorType> t = {{"x", {DType::kFloat32, {4, 8}}}, {"y", {DType::kFloat32, {4, 8}}},
                                         {"z", {DType::kFloat32, {4, 8}}}};
  auto type_of = [&](const std::string& n) -> const TensorType* {
    auto it = t.find(n);
    return it != t.end() ? &it->second : nullptr;
  };
  Node exact;
  exact.name = "gelu";
  exact.op = "Gelu";
  exact.inputs = {"x"};
  exact.outputs = {"y"};
  Node approx = exact;
  approx.name = "gelu_tanh";
  approx.inputs = {"y"};
  approx.outputs = {"z"};
  approx.attrs["approximate"] = Attribute(std::string("tanh"));
  auto lowered = codegen::lower_elementwise({&exact, &approx}, {"z"}, {4, 8}, type_of, nullptr);
  ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
  auto src = codegen::CudaPrinter().print(lowered->kernel);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_NE(src->find("erff("), std::string::npos) << *src;
  EXPECT_NE(src->find("tanhf("), std::string::npos) << *src;
  auto c = cuda::nvrtc_compile(*src, "compute_90");
  EXPECT_TRUE(c.ok()) << c.status().message().substr(0, 1500);
  codegen::RecurrentPlan p;
  p.kind = codegen::RecurrentPlan::kLstm, p.gates = 4, p.seq = 3, p.batch = 2, p.input = 4, p.hidden = 5;
  p.dirs = 2, p.bias = p.peepholes = p.lens = p.initial_h = p.initial_c = p.y = p.y_h = p.y_c = true;
  codegen::RecurrentPlan gru = p;
  gru.kind = codegen::RecurrentPlan::kGru, gru.gates = 3, gru.layout = 1;
  codegen::RecurrentPlan fused = p, fused_gru = gru;
  fused.fused = fused_gru.fused = true;
  for (const auto& k : {codegen::recurrent_init_kernel(p), codegen::recurrent_gate_kernel(p),
                        codegen::recurrent_gate_kernel(gru), codegen::recurrent_reset_kernel(gru),
                        codegen::recurrent_gate_kernel(fused), codegen::recurrent_gate_kernel(fused_gru),
                        codegen::recurrent_reset_kernel(fused_gru), codegen::zero_kernel(7),
                        codegen::iota_kernel(7)}) {
    const std::string cu = codegen::print_template(k, codegen::Dialect::kCuda);
    auto r = cuda::nvrtc_compile(cu, "compute_90");
    EXPECT_TRUE(r.ok()) << k.name << ": " << r.status().message().substr(0, 1500);
  }
}

TEST(CudaNvrtc, ABadKernelFailsWithNvrtcsLogAndTheSource) {
  REQUIRE_NVRTC();
  auto r = cuda::nvrtc_compile("extern \"C\" __global__ void k() { undefined_thing(); }", "compute_90");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("undefined_thing"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("--- source ---"), std::string::npos);
}

// The ONNX node tests: TENSORD_ONNX_TESTS_DIR (../shared/onnx-node-tests), else the suite the
// onnx_conformance ctest generates into the build tree.
fs::path node_tests_dir() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("TENSORD_ONNX_TESTS"); env && *env) dirs.push_back(env);
  dirs.push_back(TENSORD_TEST_ONNX_TESTS_DIR);
  dirs.push_back(TENSORD_TEST_GENERATED_ONNX_TESTS_DIR);
  for (const auto& d : dirs)
    if (fs::is_directory(fs::path(d) / "node")) return fs::path(d) / "node";
  return {};
}

// A float32 tensor as float16/bfloat16 (`to`), values rounded.
HostTensor retyped(const HostTensor& t, DType to) {
  HostTensor out(to, t.shape());
  const float* src = t.data<float>();
  uint16_t* dst = out.mutable_data<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i)
    dst[i] = to == DType::kFloat16 ? float_to_half(src[i]) : float_to_bfloat16(src[i]);
  return out;
}

// A node test's graph and inputs with every float32 value that enters it (inputs,
// initializers, Constant values) and every float32 result as `to`: the suite's float32 cases
// as float16/bfloat16 cases. False when nothing enters as float32. (Graphs that then do not
// type-check, e.g. a Cast to float32 feeding a float32-only input, fail at compile time and
// generate nothing.)
bool retype_float32(Graph& g, std::vector<HostTensor>& inputs, DType to) {
  bool any = false;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    if (g.inputs[i].type.dtype != DType::kFloat32) continue;
    g.inputs[i].type.dtype = to;
    if (i < inputs.size() && inputs[i].dtype() == DType::kFloat32) inputs[i] = retyped(inputs[i], to);
    any = true;
  }
  for (auto& [name, t] : g.initializers)
    if (t.dtype() == DType::kFloat32) t = retyped(t, to), any = true;
  for (Node& n : g.nodes)
    if (auto it = n.attrs.find("value"); n.op == "Constant" && it != n.attrs.end())
      if (const HostTensor* t = it->second.get_if<HostTensor>(); t && t->dtype() == DType::kFloat32)
        it->second = Attribute(retyped(*t, to)), any = true;
  for (auto& o : g.outputs)
    if (o.type.dtype == DType::kFloat32) o.type.dtype = to;
  return any;
}

// Every node test on the pretend device, as it is and with its float32 values as float16 and
// as bfloat16: each kernel the generator emits for it (element-wise chains, reductions, data
// movement, Softmax/normalisation templates, Gemm's bias broadcast) is printed as CUDA C and
// compiled; the count of each is printed.
TEST(CudaNvrtc, EveryKernelGeneratedForTheOnnxNodeTestsCompiles) {
  REQUIRE_NVRTC();
  const fs::path dir = node_tests_dir();
  if (dir.empty()) {
    if (in_ci()) FAIL() << "no ONNX node tests (TENSORD_ONNX_TESTS_DIR / generated suite) under CI=true";
    GTEST_SKIP() << "no ONNX node tests here (" << TENSORD_TEST_ONNX_TESTS_DIR
                 << "; or run tests/onnx/generate_node_tests.py " << TENSORD_TEST_GENERATED_ONNX_TESTS_DIR << ")";
  }
  const char* arch = std::getenv("TENSORD_TEST_CUDA_ARCH");
  auto client = compile_only_client(arch && *arch ? arch : "compute_90");
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  // Every kernel source the run generates, once, with its test: compiled below, many per NVRTC
  // call (NVRTC's start-up dominates one small kernel's compile).
  std::map<std::string, std::pair<std::string, std::string>> sources;  // source -> (kernel, test)
  std::string current;
  cuda::set_compile_only_collector([&](const std::string& src, const std::string& kernel) {
    sources.emplace(src, std::make_pair(kernel, current));
  });
  const int64_t launched0 = cuda::kernels_launched();
  std::vector<fs::path> tests;
  for (const auto& e : fs::directory_iterator(dir))
    if (fs::exists(e.path() / "model.onnx") && fs::is_directory(e.path() / "test_data_set_0"))
      tests.push_back(e.path());
  std::sort(tests.begin(), tests.end());
  ASSERT_GT(tests.size(), 100u);
  int ran = 0, skipped_loops = 0;
  std::map<DType, int> ran_as;
  std::map<DType, size_t> kernels_as;  // distinct kernels first generated by each variant
  for (DType variant : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    const size_t before = sources.size();
    for (const auto& t : tests) {
      auto graph = load_onnx_file((t / "model.onnx").string());
      if (!graph.ok()) continue;  // out of scope for tensord: the conformance suite says why
      // Loop and Scan iterate on values, which a compile-only device does not compute (a loop
      // condition made on it could run forever): left to the GPU run.
      bool iterates = false;
      for (const Node& n : graph->nodes) iterates |= n.op == "Loop" || n.op == "Scan";
      if (iterates) {
        skipped_loops += variant == DType::kFloat32;
        continue;
      }
      std::vector<HostTensor> inputs;
      bool ok = true;
      for (size_t i = 0; i < graph->inputs.size() && ok; ++i) {
        auto x = onnx::read_tensor_file((t / "test_data_set_0" / ("input_" + std::to_string(i) + ".pb")).string());
        ok = x.ok();
        if (ok) inputs.push_back(std::move(*x));
      }
      if (!ok) continue;
      if (variant != DType::kFloat32 && !retype_float32(*graph, inputs, variant)) continue;
      current = t.filename().string() + (variant == DType::kFloat32 ? "" : std::string(" as ") + dtype_name(variant));
      (void)testing::run_on(**client, *graph, inputs, "cuda:0");  // values: none (compile only)
      ++ran_as[variant];
      ran += variant == DType::kFloat32;
    }
    kernels_as[variant] = sources.size() - before;
  }
  cuda::set_compile_only_collector(nullptr);
  // Kernels that load or store float16/bfloat16 words (the printer's and the templates' helpers).
  size_t half_kernels = 0;
  for (const auto& [src, kt] : sources)
    half_kernels += src.find("td_half_word") != std::string::npos || src.find("td_h2f") != std::string::npos ||
                    src.find("td_bf2f") != std::string::npos || src.find("td_f2h") != std::string::npos ||
                    src.find("td_f2bf") != std::string::npos;
  const int64_t calls = cuda::kernels_launched() - launched0;
  // Batches of kernels in one translation unit, each renamed apart; a batch that fails is
  // compiled kernel by kernel to name the culprits.
  const std::string compile_arch = arch && *arch ? arch : "compute_90";
  std::vector<std::string> compile_errors;
  std::vector<std::pair<std::string, std::pair<std::string, std::string>>> all(sources.begin(), sources.end());
  auto renamed = [](const std::string& src, const std::string& kernel, size_t i) {
    std::string out = src;
    const std::string from = " " + kernel + "(", to = " " + kernel + "_" + std::to_string(i) + "(";
    if (size_t at = out.find(from); at != std::string::npos) out.replace(at, from.size(), to);
    return out;
  };
  int64_t compiled = 0;
  const size_t kBatch = 64;
  for (size_t b = 0; b < all.size(); b += kBatch) {
    std::string unit;
    const size_t end = std::min(all.size(), b + kBatch);
    // Each in its own namespace: the template kernels' helper functions (half conversions)
    // would otherwise be defined twice in one unit.
    for (size_t i = b; i < end; ++i)
      unit += "namespace tk" + std::to_string(i) + " {\n" + renamed(all[i].first, all[i].second.first, i) + "}\n";
    if (cuda::nvrtc_compile(unit, compile_arch).ok()) {
      compiled += static_cast<int64_t>(end - b);
      continue;
    }
    for (size_t i = b; i < end; ++i) {
      auto r = cuda::nvrtc_compile(all[i].first, compile_arch);
      if (r.ok()) ++compiled;
      else compile_errors.push_back(all[i].second.second + ": " + r.status().message().substr(0, 1500));
    }
  }
  std::cout << "[ cuda ] " << ran << " node tests on the compile-only cuda:0 (and "
            << ran_as[DType::kFloat16] << " as float16, " << ran_as[DType::kBFloat16] << " as bfloat16): "
            << all.size() << " distinct CUDA C kernels generated (" << kernels_as[DType::kFloat32]
            << " by the tests as they are, " << kernels_as[DType::kFloat16] << " more as float16, "
            << kernels_as[DType::kBFloat16] << " more as bfloat16; " << half_kernels
            << " load or store 16-bit floats), " << compiled << " compiled with NVRTC for " << compile_arch
            << "; " << calls << " kernel and cuBLAS calls (" << skipped_loops << " tests with Loop/Scan left out)\n";
  EXPECT_GT(ran, 100);
  EXPECT_GT(all.size(), 100u) << "the generator emitted kernels for the suite";
  EXPECT_GT(kernels_as[DType::kFloat16], 100u) << "float16 chains, reductions, Softmax... are generated";
  EXPECT_GT(kernels_as[DType::kBFloat16], 100u) << "bfloat16 chains, reductions, Softmax... are generated";
  // The shared templates (codegen/templates.h) run on cuda:0 too: convolution, pooling,
  // Softmax, normalisation and data-movement tests each produced a kernel.
  for (const char* prefix : {"test_conv_", "test_maxpool_", "test_averagepool_", "test_softmax_",
                             "test_layer_normalization_", "test_concat_", "test_gather_", "test_resize_"}) {
    bool seen = false;
    for (const auto& [src, kt] : sources) seen |= kt.second.rfind(prefix, 0) == 0;
    EXPECT_TRUE(seen) << "no CUDA kernel was generated for the " << prefix << "* tests";
  }
  EXPECT_EQ(compiled, static_cast<int64_t>(all.size()));
  for (const auto& e : compile_errors) ADD_FAILURE() << e;
}

// x, w [4, 8] and scale [8] of dtype `dt` (float16/bfloat16): c = Sigmoid(x * w) + x (a
// chain), then ReduceMean of c over axis 1 (r), Softmax (s), LayerNormalization (ln) and a
// Cast to float32 (cf).
Graph half_graph(DType dt) {
  auto node = [](const char* op, std::vector<std::string> in, std::string out) {
    Node n;
    n.op = op;
    n.inputs = std::move(in);
    n.outputs = {std::move(out)};
    return n;
  };
  Graph g;
  g.inputs = {{"x", {dt, {4, 8}}}, {"w", {dt, {4, 8}}}, {"scale", {dt, {8}}}};
  g.outputs = {{"r", {dt, {4, 1}}}, {"s", {dt, {4, 8}}}, {"ln", {dt, {4, 8}}}, {"cf", {DType::kFloat32, {4, 8}}}};
  Node cast = node("Cast", {"c"}, "cf");
  cast.attrs["to"] = static_cast<int64_t>(DType::kFloat32);
  Node reduce = node("ReduceMean", {"c"}, "r");
  reduce.attrs["axes"] = std::vector<int64_t>{1};
  Node softmax = node("Softmax", {"c"}, "s");
  softmax.attrs["axis"] = int64_t{1};
  g.nodes = {node("Mul", {"x", "w"}, "a"), node("Sigmoid", {"a"}, "b"), node("Add", {"b", "x"}, "c"), cast,
             reduce, softmax, node("LayerNormalization", {"c", "scale"}, "ln")};
  return g;
}

// float16 and bfloat16 in generated kernels: 16-bit words loaded into float, computed in
// float, rounded to nearest even where a node's result is of that dtype and when stored. On the
// compile-only cuda:0, a graph of an element-wise chain (with a Cast to float32 out of it), a
// reduction, Softmax and LayerNormalization over each dtype is generated entirely as CUDA
// kernels (nothing left to cpu:0), and every kernel compiles with NVRTC for sm_90 (bfloat16
// rounding by the cvt instruction) and for sm_75 (in integer code).
TEST(CudaNvrtc, Float16AndBfloat16KernelsAreGeneratedAndCompile) {
  REQUIRE_NVRTC();
  auto client = compile_only_client();
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
    const std::string what = dtype_name(dt);
    const Graph g = half_graph(dt);
    std::vector<std::pair<std::string, std::string>> sources;
    cuda::set_compile_only_collector([&](const std::string& src, const std::string& kernel) {
      sources.emplace_back(src, kernel);
    });
    std::vector<HostTensor> inputs = {HostTensor(dt, {4, 8}), HostTensor(dt, {4, 8}), HostTensor(dt, {8})};
    const int64_t failures = cuda::compile_failures();
    auto r = testing::run_on(**client, g, inputs, "cuda:0");
    cuda::set_compile_only_collector(nullptr);
    ASSERT_TRUE(r.ok()) << what << ": " << r.status().to_string();
    EXPECT_EQ(cuda::compile_failures(), failures);
    std::set<std::string> kernels;
    for (const auto& [src, kernel] : sources) {
      kernels.insert(kernel);
      const bool halves = src.find("td_half_word") != std::string::npos || src.find("td_h2f") != std::string::npos ||
                          src.find("td_bf2f") != std::string::npos;
      EXPECT_TRUE(halves) << what << ": " << kernel << " neither loads nor stores 16-bit floats:\n" << src;
      for (const char* arch : {"sm_90", "sm_75"}) {
        auto c = cuda::nvrtc_compile(src, arch);
        EXPECT_TRUE(c.ok()) << what << " for " << arch << ": " << c.status().message().substr(0, 1500);
      }
    }
    // One fused chain (Mul, Sigmoid, Add and the Cast: two outputs), the reduction, Softmax and
    // LayerNormalization: each a CUDA kernel, none left to cpu:0.
    for (const char* k : {"tensord_ew", "tensord_reduce", "tensord_softmax", "tensord_layer_norm"})
      EXPECT_EQ(kernels.count(k), 1u) << what << ": no " << k << " kernel (the op ran elsewhere)";
    for (const auto& [src, kernel] : sources) {
      if (kernel != "tensord_ew") continue;
      const bool f16 = dt == DType::kFloat16;
      EXPECT_NE(src.find(f16 ? "td_f32_to_f16(" : "td_f32_to_bf16("), std::string::npos)
          << what << ": the chain rounds and stores its " << what << " output:\n" << src;
      EXPECT_NE(src.find(f16 ? "td_f16_to_f32(" : "td_bf16_to_f32("), std::string::npos)
          << what << ": the chain loads its inputs as float:\n" << src;
    }
  }
}

TEST(CudaNvrtc, CompiledKernelsComeBackFromTheDiskCache) {
  REQUIRE_NVRTC();
  Graph g;
  g.inputs = {{"x", {DType::kFloat32, {3, 5}}}};
  g.outputs = {{"y", {DType::kFloat32, {3, 5}}}};
  Node a;
  a.op = "Sigmoid";
  a.inputs = {"x"};
  a.outputs = {"t"};
  Node b;
  b.op = "Mul";
  b.inputs = {"t", "x"};
  b.outputs = {"y"};
  g.nodes = {a, b};
  HostTensor x = HostTensor(DType::kFloat32, {3, 5});
  auto first = compile_only_client("sm_90", false);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto r1 = testing::run_on(**first, g, {x}, "cuda:0");
  ASSERT_TRUE(r1.ok()) << r1.status().to_string();
  const int64_t built = cuda::programs_built(), hits = cuda::disk_cache_hits();
  auto second = compile_only_client("sm_90", false);  // a new engine: new devices, empty memory caches
  ASSERT_TRUE(second.ok());
  auto r2 = testing::run_on(**second, g, {x}, "cuda:0");
  ASSERT_TRUE(r2.ok()) << r2.status().to_string();
  EXPECT_EQ(cuda::programs_built(), built) << "nothing compiled again";
  EXPECT_GT(cuda::disk_cache_hits(), hits);
}

// CUDA graphs through the executor, on the compile-only cuda:0 (nothing runs; the counters
// move): a loaded model's first run is plain, its second is recorded and replayed, later runs
// replay only (no kernel launched step by step); TENSORD_CUDA_GRAPHS=0 records nothing.
TEST(CudaGraphs, AStaticModelIsRecordedOnItsSecondRunAndReplayedAfter) {
  REQUIRE_NVRTC();
  Graph g;
  g.inputs = {{"x", {DType::kFloat32, {2, 8}}}};
  g.outputs = {{"y", {DType::kFloat32, {2, 8}}}};
  Node a;
  a.op = "Relu";
  a.inputs = {"x"};
  a.outputs = {"t"};
  Node b;
  b.op = "Softmax";  // a template kernel
  b.inputs = {"t"};
  b.outputs = {"y"};
  b.attrs["axis"] = int64_t{1};
  g.nodes = {a, b};
  HostTensor x = HostTensor(DType::kFloat32, {2, 8});
  auto run_n = [&](int n, int64_t* captures, int64_t* replays, std::vector<int64_t>* launched) {
    auto client = compile_only_client("compute_90", false);
    ASSERT_TRUE(client.ok()) << client.status().to_string();
    auto model = (*client)->load(g, "cuda:0");
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    auto in = (*client)->upload(x.view(), "cuda:0");
    ASSERT_TRUE(in.ok()) << in.status().to_string();
    const int64_t c0 = cuda::graph_captures(), r0 = cuda::graph_replays();
    for (int i = 0; i < n; ++i) {
      const int64_t l0 = cuda::kernels_launched();
      auto outs = (*client)->run(*model, {*in});
      ASSERT_TRUE(outs.ok()) << outs.status().to_string();
      ASSERT_EQ(outs->size(), 1u);
      auto y = (*client)->read((*outs)[0]);
      ASSERT_TRUE(y.ok()) << y.status().to_string();
      EXPECT_EQ(y->shape(), g.outputs[0].type.shape);
      launched->push_back(cuda::kernels_launched() - l0);
      (void)(*client)->release((*outs)[0]);
    }
    *captures = cuda::graph_captures() - c0;
    *replays = cuda::graph_replays() - r0;
  };
  int64_t captures = 0, replays = 0;
  std::vector<int64_t> launched;
  run_n(4, &captures, &replays, &launched);
  EXPECT_EQ(captures, 1);
  EXPECT_EQ(replays, 3) << "run 2 replays what it recorded, runs 3 and 4 replay";
  ASSERT_EQ(launched.size(), 4u);
  EXPECT_GT(launched[0], 0) << "the first run launches step by step";
  EXPECT_EQ(launched[1], launched[0]) << "the recorded run goes through every step once";
  EXPECT_EQ(launched[2], 0) << "a replay launches no step";
  EXPECT_EQ(launched[3], 0);
  setenv("TENSORD_CUDA_GRAPHS", "0", 1);
  launched.clear();
  run_n(3, &captures, &replays, &launched);
  unsetenv("TENSORD_CUDA_GRAPHS");
  EXPECT_EQ(captures, 0);
  EXPECT_EQ(replays, 0);
  ASSERT_EQ(launched.size(), 3u);
  EXPECT_GT(launched[2], 0) << "TENSORD_CUDA_GRAPHS=0: every run launches its steps";
  // A node placed on cpu:0 (Det has no CUDA kernel): the run crosses devices, nothing is recorded.
  Node det;
  det.op = "Det";
  det.inputs = {"y"};
  det.outputs = {"d"};
  g.nodes.push_back(det);
  g.inputs = {{"x", {DType::kFloat32, {2, 8, 8}}}};
  g.outputs = {{"d", {DType::kFloat32, {2}}}};
  g.nodes[1].attrs["axis"] = int64_t{2};
  x = HostTensor(DType::kFloat32, {2, 8, 8});
  launched.clear();
  run_n(3, &captures, &replays, &launched);
  EXPECT_EQ(captures, 0) << "a run with a fallback step is not recorded";
  EXPECT_EQ(replays, 0);
}

// ---- on a GPU ----

struct Gpu {
  std::vector<std::unique_ptr<Device>> cpu, cuda;
};
Gpu& gpu() {
  static Gpu* g = [] {
    auto* g = new Gpu;
    for (auto& b : create_backends())
      for (auto& d : b->enumerate()) (d->info().kind == "cuda" ? g->cuda : g->cpu).push_back(std::move(d));
    return g;
  }();
  return *g;
}

// An engine over cpu:0 and the GPU's cuda:0.
Result<std::unique_ptr<Client>> gpu_client() {
  LocalClientOptions o;
  o.devices = "cpu:0,cuda:0";
  return make_local_client(o);
}

#define REQUIRE_GPU() \
  do {                \
    if (gpu().cuda.empty()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

TEST(CudaDevices, AreListedWithTheirProperties) {
  REQUIRE_GPU();
  const DeviceInfo& i = gpu().cuda[0]->info();
  EXPECT_EQ(i.name, "cuda:0");
  EXPECT_EQ(i.kind, "cuda");
  EXPECT_GT(i.memory_bytes, 0);
  EXPECT_NE(i.model.find("(sm_"), std::string::npos);
}

TEST(CudaMemory, WritesAndReadsAreByteExactAtOffsetsAcrossStagingChunks) {
  REQUIRE_GPU();
  Device& d = *gpu().cuda[0];
  const size_t n = (size_t{8} << 20) * 2 + 12345;  // three staging chunks
  auto p = d.allocate(n + 64);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  Buffer b{&d, *p, n, 64};
  std::vector<unsigned char> src(n), back(n);
  std::mt19937 rng(1);
  for (auto& c : src) c = static_cast<unsigned char>(rng());
  ASSERT_TRUE(d.write(b, 0, src.data(), n).ok());
  ASSERT_TRUE(d.read(b, 0, back.data(), n).ok());
  EXPECT_EQ(src, back);
  EXPECT_FALSE(d.write(b, n - 1, src.data(), 2).ok()) << "past the end";
  d.free(*p, n + 64);
}

TEST(CudaMemory, DeviceToDeviceCopiesAreByteExact) {
  REQUIRE_GPU();
  Device& a = *gpu().cuda[0];
  Device& b = gpu().cuda.size() > 1 ? *gpu().cuda[1] : a;
  const size_t n = 1 << 20;
  auto pa = a.allocate(n), pb = b.allocate(n);
  ASSERT_TRUE(pa.ok() && pb.ok());
  Buffer ba{&a, *pa, n, 0}, bb{&b, *pb, n, 0};
  std::vector<unsigned char> src(n, 7), back(n, 0);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 31);
  ASSERT_TRUE(a.write(ba, 0, src.data(), n).ok());
  if (b.copy_from(bb, ba)) {
    ASSERT_TRUE(b.read(bb, 0, back.data(), n).ok());
    EXPECT_EQ(src, back);
  } else {
    EXPECT_NE(&a, &b) << "a copy within one device is always direct";
  }
  a.free(*pa, n);
  b.free(*pb, n);
}

// The figures scripts/gpu-check.sh reports: GB/s of 256 MiB host->device (through the pinned
// staging buffers), device->host, and device->device (same device; peer where there are two).
TEST(CudaCopies, BandwidthOfHostDeviceAndDeviceDeviceCopies) {
  REQUIRE_GPU();
  Device& d = *gpu().cuda[0];
  const size_t n = size_t{256} << 20;
  auto pa = d.allocate(n), pb = d.allocate(n);
  ASSERT_TRUE(pa.ok() && pb.ok());
  Buffer a{&d, *pa, n, 0}, b{&d, *pb, n, 0};
  std::vector<unsigned char> host(n, 1);
  auto gbs = [&](const std::function<bool()>& f) {
    EXPECT_TRUE(f());
    const int reps = 5;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) EXPECT_TRUE(f());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return static_cast<double>(n) * reps / s / 1e9;
  };
  const double h2d = gbs([&] { return d.write(a, 0, host.data(), n).ok(); });
  const double d2h = gbs([&] { return d.read(a, 0, host.data(), n).ok(); });
  const double d2d = gbs([&] { return d.copy_from(b, a); });
  std::cout << "[ cuda ] copies of 256 MiB: host->device " << h2d << " GB/s, device->host " << d2h
            << " GB/s, device->device " << d2d << " GB/s\n";
  if (gpu().cuda.size() > 1) {
    Device& e = *gpu().cuda[1];
    auto pc = e.allocate(n);
    ASSERT_TRUE(pc.ok());
    Buffer c{&e, *pc, n, 0};
    if (e.copy_from(c, a)) {
      const double peer = gbs([&] { return e.copy_from(c, a); });
      std::cout << "[ cuda ] peer copy cuda:0 -> cuda:1: " << peer << " GB/s\n";
    } else {
      std::cout << "[ cuda ] cuda:0 and cuda:1 are not peers: the engine stages their copies\n";
    }
    e.free(*pc, n);
  }
  EXPECT_GT(h2d, 0.5);
  EXPECT_GT(d2d, 1.0);
  d.free(*pa, n);
  d.free(*pb, n);
}

HostTensor random_floats(const Shape& s, uint32_t seed) {
  HostTensor t(DType::kFloat32, s);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto* p = static_cast<float*>(t.mutable_data());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  return t;
}

TEST(CudaKernels, MatMulGemmAndAFusedChainAgreeWithTheCpu) {
  REQUIRE_GPU();
  auto client = gpu_client();
  ASSERT_TRUE(client.ok());
  Graph g;
  g.inputs = {{"a", {DType::kFloat32, {2, 8, 16}}}, {"b", {DType::kFloat32, {16, 4}}}};
  g.outputs = {{"y", {DType::kFloat32, {2, 8, 4}}}};
  Node mm;
  mm.op = "MatMul";
  mm.inputs = {"a", "b"};
  mm.outputs = {"m"};
  Node s;
  s.op = "Sigmoid";
  s.inputs = {"m"};
  s.outputs = {"t"};
  Node mul;
  mul.op = "Mul";
  mul.inputs = {"t", "m"};
  mul.outputs = {"y"};
  g.nodes = {mm, s, mul};
  std::vector<HostTensor> in = {random_floats({2, 8, 16}, 1), random_floats({16, 4}, 2)};
  auto got = testing::run_on(**client, g, in, "cuda:0");
  auto want = testing::run_on(**client, g, in, "cpu:0");
  ASSERT_TRUE(got.ok() && want.ok());
  ASSERT_TRUE((*got)[0].ok()) << (*got)[0].status().to_string();
  const float* x = static_cast<const float*>((*got)[0]->data());
  const float* y = static_cast<const float*>((*want)[0]->data());
  for (int64_t i = 0; i < (*want)[0]->numel(); ++i) EXPECT_NEAR(x[i], y[i], 1e-4) << i;
}

// The float16/bfloat16 graph of the NVRTC test (a fused chain, a reduction, Softmax,
// LayerNormalization, a Cast out) run on cuda:0 agrees with cpu:0 to within the dtype's
// rounding (one unit in the last place of a result, as both round each node's result).
TEST(CudaKernels, HalfAndBfloat16ChainsReductionsAndNormsAgreeWithTheCpu) {
  REQUIRE_GPU();
  auto client = gpu_client();
  ASSERT_TRUE(client.ok());
  auto floats = [](const HostTensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) {
      if (t.dtype() == DType::kFloat32) v[i] = t.data<float>()[i];
      else if (t.dtype() == DType::kFloat16) v[i] = half_to_float(t.data<uint16_t>()[i]);
      else v[i] = bfloat16_to_float(t.data<uint16_t>()[i]);
    }
    return v;
  };
  for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
    const Graph g = half_graph(dt);
    std::vector<HostTensor> in = {retyped(random_floats({4, 8}, 3), dt), retyped(random_floats({4, 8}, 4), dt),
                                  retyped(random_floats({8}, 5), dt)};
    auto got = testing::run_on(**client, g, in, "cuda:0");
    auto want = testing::run_on(**client, g, in, "cpu:0");
    ASSERT_TRUE(got.ok() && want.ok());
    const float tol = dt == DType::kFloat16 ? 2e-3f : 1.6e-2f;  // about 2 ulp
    for (size_t o = 0; o < g.outputs.size(); ++o) {
      ASSERT_TRUE((*got)[o].ok()) << dtype_name(dt) << " " << g.outputs[o].name << ": " << (*got)[o].status().to_string();
      ASSERT_TRUE((*want)[o].ok());
      const std::vector<float> a = floats(*(*got)[o]), b = floats(*(*want)[o]);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_NEAR(a[i], b[i], tol * (1.0f + std::fabs(b[i]))) << dtype_name(dt) << " " << g.outputs[o].name << "[" << i << "]";
    }
  }
}

// Bidirectional RNN, LSTM and GRU (linear_before_reset=1) on cuDNN (cudnnRNNForward: one call
// each, counted) agree with cpu:0.
TEST(CudaKernels, CudnnRecurrentCellsAgreeWithTheCpu) {
  REQUIRE_GPU();
  auto client = gpu_client();
  ASSERT_TRUE(client.ok());
  const int64_t calls0 = cuda::cudnn_rnn_calls();
  for (const auto& [op, gates] : std::vector<std::pair<std::string, int>>{{"RNN", 1}, {"LSTM", 4}, {"GRU", 3}}) {
    auto [g, in] = recurrent_case(op, gates);
    auto got = testing::run_on(**client, g, in, "cuda:0");
    auto want = testing::run_on(**client, g, in, "cpu:0");
    ASSERT_TRUE(got.ok() && want.ok()) << op;
    for (size_t o = 0; o < g.outputs.size(); ++o) {
      ASSERT_TRUE((*got)[o].ok()) << op << " " << g.outputs[o].name << ": " << (*got)[o].status().to_string();
      ASSERT_TRUE((*want)[o].ok());
      const float* a = static_cast<const float*>((*got)[o]->data());
      const float* b = static_cast<const float*>((*want)[o]->data());
      for (int64_t i = 0; i < (*want)[o]->numel(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << op << " " << g.outputs[o].name << "[" << i << "]";
    }
  }
  std::cout << "[ cuda ] cudnnRNNForward calls: " << cuda::cudnn_rnn_calls() - calls0 << "\n";
  EXPECT_EQ(cuda::cudnn_rnn_calls() - calls0, 3) << "each cell ran on cuDNN";
}

// Conv (cuDNN, bias as a constant) -> Relu -> MaxPool (cuDNN) -> AveragePool with ceil_mode
// and a partial window (a template) -> Softmax (a template), loaded on cuda:0 and run five
// times with new inputs: plain, recorded (CUDA graph) and replayed runs all agree with cpu:0.
TEST(CudaKernels, CudnnConvPoolingTemplatesAndGraphReplaysAgreeWithTheCpu) {
  REQUIRE_GPU();
  auto client = gpu_client();
  ASSERT_TRUE(client.ok());
  Graph g;
  g.inputs = {{"x", {DType::kFloat32, {2, 3, 17, 17}}}};
  g.outputs = {{"y", {DType::kFloat32, {2, 8, 4, 4}}}};
  g.initializers["w"] = random_floats({8, 3, 3, 3}, 7);
  g.initializers["b"] = random_floats({8}, 8);
  Node conv;
  conv.op = "Conv";
  conv.inputs = {"x", "w", "b"};
  conv.outputs = {"c"};
  conv.attrs["pads"] = std::vector<int64_t>{1, 1, 1, 1};
  Node relu;
  relu.op = "Relu";
  relu.inputs = {"c"};
  relu.outputs = {"r"};
  Node mp;
  mp.op = "MaxPool";
  mp.inputs = {"r"};
  mp.outputs = {"m"};
  mp.attrs["kernel_shape"] = std::vector<int64_t>{2, 2};
  mp.attrs["strides"] = std::vector<int64_t>{2, 2};
  Node ap;  // 8x8 -> ceil((8 - 3) / 2) + 1 = 4: a partial last window, so not cuDNN's
  ap.op = "AveragePool";
  ap.inputs = {"m"};
  ap.outputs = {"a"};
  ap.attrs["kernel_shape"] = std::vector<int64_t>{3, 3};
  ap.attrs["strides"] = std::vector<int64_t>{2, 2};
  ap.attrs["ceil_mode"] = int64_t{1};
  Node sm;
  sm.op = "Softmax";
  sm.inputs = {"a"};
  sm.outputs = {"y"};
  sm.attrs["axis"] = int64_t{1};
  g.nodes = {conv, relu, mp, ap, sm};
  auto on_gpu = (*client)->load(g, "cuda:0");
  auto on_cpu = (*client)->load(g, "cpu:0");
  ASSERT_TRUE(on_gpu.ok() && on_cpu.ok()) << on_gpu.status().to_string();
  const int64_t captures = cuda::graph_captures(), replays = cuda::graph_replays();
  for (uint32_t run = 0; run < 5; ++run) {
    HostTensor x = random_floats({2, 3, 17, 17}, 100 + run);
    auto xg = (*client)->upload(x.view(), "cuda:0");
    auto xc = (*client)->upload(x.view(), "cpu:0");
    ASSERT_TRUE(xg.ok() && xc.ok());
    auto got = (*client)->run(*on_gpu, {*xg});
    auto want = (*client)->run(*on_cpu, {*xc});
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    auto a = (*client)->read((*got)[0]);
    auto b = (*client)->read((*want)[0]);
    ASSERT_TRUE(a.ok()) << "run " << run << ": " << a.status().to_string();
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    ASSERT_EQ(a->shape(), b->shape());
    const float* p = static_cast<const float*>(a->data());
    const float* q = static_cast<const float*>(b->data());
    for (int64_t i = 0; i < b->numel(); ++i) ASSERT_NEAR(p[i], q[i], 1e-4) << "run " << run << " element " << i;
    for (TensorHandle h : {*xg, *xc, (*got)[0], (*want)[0]}) (void)(*client)->release(h);
  }
  if (!std::getenv("TENSORD_CUDA_GRAPHS")) {
    EXPECT_EQ(cuda::graph_captures() - captures, 1) << "the second run is recorded";
    EXPECT_EQ(cuda::graph_replays() - replays, 4) << "runs 2 to 5 replay";
  }
  std::string why;
  std::cout << "[ cuda ] conv/pool/softmax on cuda:0 agree with cpu:0 over 5 runs (cuDNN "
            << (cuda::cudnn_version(&why) ? "loaded" : "missing: " + why) << "; graph replays "
            << cuda::graph_replays() - replays << ")\n";
}

// float16 and bfloat16 MatMul go to cuBLAS (cublasGemmEx, float32 accumulation) like float32;
// mixed dtypes and half Gemm do not (the templates take them). On the compile-only cuda:0 (the
// kernel choice needs no GPU; a run counts the call).
TEST(CudaPlanning, HalfAndBfloat16MatMulsRunOnCublasGemmEx) {
  REQUIRE_NVRTC();
  auto backend = cuda::create_cuda_backend();
  auto devices = compile_only_devices(*backend);
  ASSERT_EQ(devices.size(), 1u);
  const KernelTable& table = devices[0]->kernels();
  Node mm;
  mm.op = "MatMul";
  mm.inputs = {"a", "b"};
  mm.outputs = {"y"};
  for (DType t : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
    std::vector<TensorType> in = {{t, {2, 4, 8}}, {t, {8, 3}}};
    ASSERT_TRUE(table.supports(mm, in, {}).ok()) << dtype_name(t);
    auto k = table.create(mm, in, {{t, {2, 4, 3}}}, {});
    ASSERT_TRUE(k.ok()) << dtype_name(t) << ": " << k.status().to_string();
    EXPECT_EQ((*k)->name(), "cublas") << dtype_name(t);
  }
  std::vector<TensorType> mixed = {{DType::kFloat16, {4, 8}}, {DType::kFloat32, {8, 3}}};
  auto k = table.create(mm, mixed, {{DType::kFloat32, {4, 3}}}, {});
  EXPECT_TRUE(!k.ok() || (*k)->name() != "cublas") << "mixed dtypes are not one GemmEx call";
  // Through the engine: a float16 MatMul placed on cuda:0 runs there (one launch: cuBLAS).
  auto client = compile_only_client();
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  Graph g;
  g.inputs = {{"a", {DType::kFloat16, {4, 8}}}, {"b", {DType::kFloat16, {8, 3}}}};
  g.outputs = {{"y", {DType::kFloat16, {4, 3}}}};
  g.nodes = {mm};
  HostTensor a(DType::kFloat16, {4, 8}), b(DType::kFloat16, {8, 3});
  auto ha = (*client)->upload(a.view(), "cuda:0");
  auto hb = (*client)->upload(b.view(), "cuda:0");
  ASSERT_TRUE(ha.ok() && hb.ok());
  const int64_t l0 = cuda::kernels_launched();
  auto y = (*client)->execute(g, {*ha, *hb}, "cuda:0");
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  auto info = (*client)->info((*y)[0]);
  ASSERT_TRUE((*client)->wait((*y)[0]).ok());
  EXPECT_EQ(info->device, "cuda:0");
  EXPECT_EQ(cuda::kernels_launched() - l0, 1);
}

// ---- cuBLASLt epilogues: MatMul/Gemm + bias (+ Relu / tanh-Gelu) as one cublasLtMatmul ----

Node lt_node(const std::string& op, std::vector<std::string> in, std::string out,
             std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.op = op;
  n.inputs = std::move(in);
  n.outputs = {std::move(out)};
  for (auto& [k, v] : attrs) n.attrs[k] = v;
  return n;
}

// plan_lt_fusions over `nodes` with `types`; `outputs` are the graph outputs.
std::vector<cuda::LtFusion> lt_plan(const std::vector<Node>& nodes, const std::map<std::string, TensorType>& types,
                                    const std::set<std::string>& outputs, std::vector<std::string>* notes = nullptr) {
  FusionGraph g;
  for (const auto& n : nodes) g.nodes.push_back(&n);
  g.type_of = [&](const std::string& v) -> const TensorType* {
    auto it = types.find(v);
    return it == types.end() ? nullptr : &it->second;
  };
  g.constant = [](const std::string&) -> const HostTensor* { return nullptr; };
  g.is_graph_output = [&](const std::string& v) { return outputs.count(v) > 0; };
  return cuda::plan_lt_fusions(g, notes);
}

TEST(CudaPlanning, MatMulBiasAndActivationFuseIntoCublasLtEpiloguesOnlyWhereExact) {
  const TensorType f32_48{DType::kFloat32, {4, 8}}, f32_83{DType::kFloat32, {8, 3}}, f32_43{DType::kFloat32, {4, 3}};
  std::map<std::string, TensorType> types = {{"a", f32_48},    {"b", f32_83},   {"m", f32_43}, {"s", f32_43},
                                             {"y", f32_43},    {"bias", {DType::kFloat32, {3}}},
                                             {"bt", {DType::kFloat32, {3, 8}}}};
  const Node mm = lt_node("MatMul", {"a", "b"}, "m");
  const Node add = lt_node("Add", {"m", "bias"}, "s");
  // MatMul + Add(bias [N]) + Relu: RELU_BIAS, three nodes.
  auto f = lt_plan({mm, add, lt_node("Relu", {"s"}, "y")}, types, {"y"});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].epilogue, cuda::LtFusion::kReluBias);
  EXPECT_EQ(f[0].members, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(f[0].bias, "bias");
  EXPECT_EQ(f[0].output, "y");
  EXPECT_EQ(std::vector<int64_t>({f[0].m, f[0].n, f[0].k}), std::vector<int64_t>({4, 3, 8}));
  // The bias on the left of the Add; no activation: BIAS, two nodes.
  f = lt_plan({mm, lt_node("Add", {"bias", "m"}, "y")}, types, {"y"});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].epilogue, cuda::LtFusion::kBias);
  EXPECT_EQ(f[0].members.size(), 2u);
  // Gelu: tanh is cuBLASLt's GELU; exact erf stays its own kernel (bias still fused).
  f = lt_plan({mm, add, lt_node("Gelu", {"s"}, "y", {{"approximate", std::string("tanh")}})}, types, {"y"});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].epilogue, cuda::LtFusion::kGeluBias);
  std::vector<std::string> notes;
  f = lt_plan({mm, add, lt_node("Gelu", {"s"}, "y", {{"approximate", std::string("none")}})}, types, {"y"}, &notes);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].epilogue, cuda::LtFusion::kBias);
  EXPECT_EQ(f[0].output, "s") << "the erf Gelu is left out";
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes.back().find("erf"), std::string::npos) << notes.back();
  f = lt_plan({mm, add, lt_node("Gelu", {"s"}, "y")}, types, {"y"});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].epilogue, cuda::LtFusion::kBias) << "approximate defaults to none";
  // Biases of the wrong shape: [1, N], [M, N], [N+1]; a scalar.
  for (Shape bad : {Shape{1, 3}, Shape{4, 3}, Shape{4}, Shape{}}) {
    auto t = types;
    t["bias"] = {DType::kFloat32, bad};
    notes.clear();
    EXPECT_TRUE(lt_plan({mm, add, lt_node("Relu", {"s"}, "y")}, t, {"y"}, &notes).empty()) << shape_to_string(bad);
    EXPECT_FALSE(notes.empty()) << "a refusal says why";
  }
  // A float16 bias, a float16 MatMul: not fused (float32 only).
  {
    auto t = types;
    t["bias"] = {DType::kFloat16, {3}};
    EXPECT_TRUE(lt_plan({mm, add}, t, {"s"}).empty());
  }
  // Batched MatMul: not fused.
  {
    auto t = types;
    t["a"] = {DType::kFloat32, {2, 4, 8}};
    t["m"] = t["s"] = {DType::kFloat32, {2, 4, 3}};
    notes.clear();
    EXPECT_TRUE(lt_plan({mm, add}, t, {"s"}, &notes).empty());
    ASSERT_FALSE(notes.empty());
    EXPECT_NE(notes[0].find("batched"), std::string::npos) << notes[0];
  }
  // The product also a graph output, or read twice: not fused (it must exist on its own).
  EXPECT_TRUE(lt_plan({mm, add}, types, {"s", "m"}).empty());
  EXPECT_TRUE(lt_plan({mm, add, lt_node("Mul", {"m", "s"}, "y")}, types, {"y"}).empty());
  // The product read again only inside a Loop's body (the outer scope): not fused either.
  {
    auto body = std::make_shared<Graph>();
    body->inputs = {{"i", {DType::kInt64, {}}}, {"c", {DType::kBool, {}}}};
    body->nodes = {lt_node("Identity", {"c"}, "c_out"), lt_node("Relu", {"m"}, "r")};
    body->outputs = {{"c_out", {}}, {"r", {}}};
    Node loop = lt_node("Loop", {"trips", ""}, "z");
    loop.attrs["body"] = Attribute(std::shared_ptr<const Graph>(body));
    EXPECT_TRUE(lt_plan({mm, add, loop}, types, {"s", "z"}).empty());
  }
  // The sum read twice: bias fused, the Relu not.
  f = lt_plan({mm, add, lt_node("Relu", {"s"}, "r"), lt_node("Mul", {"r", "s"}, "y")}, types, {"y"});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].epilogue, cuda::LtFusion::kBias);
  // Gemm: transA refused; transB=1 fused (B is [N, K]); alpha != 1 refused.
  notes.clear();
  EXPECT_TRUE(lt_plan({lt_node("Gemm", {"a", "b"}, "m", {{"transA", int64_t{1}}}), add}, types, {"s"}, &notes).empty());
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("transA"), std::string::npos) << notes[0];
  f = lt_plan({lt_node("Gemm", {"a", "bt"}, "m", {{"transB", int64_t{1}}}), add}, types, {"s"});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_TRUE(f[0].trans_b);
  EXPECT_EQ(f[0].n, 3);
  EXPECT_TRUE(lt_plan({lt_node("Gemm", {"a", "b"}, "m", {{"alpha", 2.0f}}), add}, types, {"s"}).empty());
  // Gemm's own C [N] with beta=1 is the bias: Gemm + Relu, two nodes; C [M, N] is not a bias.
  f = lt_plan({lt_node("Gemm", {"a", "bt", "bias"}, "m", {{"transB", int64_t{1}}}), lt_node("Relu", {"m"}, "y")},
              types, {"y"});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].epilogue, cuda::LtFusion::kReluBias);
  EXPECT_EQ(f[0].members, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(f[0].bias, "bias");
  {
    auto t = types;
    t["c"] = f32_43;
    EXPECT_TRUE(lt_plan({lt_node("Gemm", {"a", "b", "c"}, "m"), lt_node("Relu", {"m"}, "y")}, t, {"y"}).empty());
  }
}

// A MatMul + bias + Relu graph and a Gemm(transB) + tanh-Gelu graph on the compile-only cuda:0:
// each group is one cublasLtMatmul (counted, one launch); an erf Gelu after the bias is its
// own kernel (compiled with NVRTC); TENSORD_CUDA_LT=0 runs the unfused kernels.
TEST(CudaNvrtc, BiasEpilogueGroupsAreOneCublasLtCall) {
  REQUIRE_NVRTC();
  std::string why;
  if (!cuda::cublaslt_api(&why)) GTEST_SKIP() << "libcublasLt does not load here: " << why;
  auto run = [](const Graph& g, const std::vector<HostTensor>& in, int64_t* fused, int64_t* launched) {
    auto client = compile_only_client("compute_90", false);
    ASSERT_TRUE(client.ok()) << client.status().to_string();
    const int64_t f0 = cuda::lt_fused_calls(), l0 = cuda::kernels_launched();
    auto got = testing::run_on(**client, g, in, "cuda:0");
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_TRUE((*got)[0].ok()) << (*got)[0].status().to_string();
    EXPECT_EQ((*got)[0]->shape(), g.outputs[0].type.shape);
    *fused = cuda::lt_fused_calls() - f0;
    *launched = cuda::kernels_launched() - l0;
  };
  Graph g;
  g.inputs = {{"a", {DType::kFloat32, {4, 8}}}};
  g.outputs = {{"y", {DType::kFloat32, {4, 3}}}};
  g.initializers["b"] = HostTensor(DType::kFloat32, {8, 3});
  g.initializers["bias"] = HostTensor(DType::kFloat32, {3});
  g.nodes = {lt_node("MatMul", {"a", "b"}, "m"), lt_node("Add", {"m", "bias"}, "s"), lt_node("Relu", {"s"}, "y")};
  const std::vector<HostTensor> in = {HostTensor(DType::kFloat32, {4, 8})};
  int64_t fused = 0, launched = 0;
  run(g, in, &fused, &launched);
  EXPECT_EQ(fused, 1);
  EXPECT_EQ(launched, 1) << "MatMul, Add and Relu in one call";
  setenv("TENSORD_CUDA_LT", "0", 1);
  run(g, in, &fused, &launched);
  unsetenv("TENSORD_CUDA_LT");
  EXPECT_EQ(fused, 0);
  EXPECT_GE(launched, 2) << "unfused: cuBLAS, then the bias and Relu";
  // Gemm(transB) with C as the bias, then a tanh Gelu: one call.
  Graph h = g;
  h.initializers["b"] = HostTensor(DType::kFloat32, {3, 8});
  h.nodes = {lt_node("Gemm", {"a", "b", "bias"}, "m", {{"transB", int64_t{1}}}),
             lt_node("Gelu", {"m"}, "y", {{"approximate", std::string("tanh")}})};
  run(h, in, &fused, &launched);
  EXPECT_EQ(fused, 1);
  EXPECT_EQ(launched, 1);
  // An exact Gelu: the bias fused, the Gelu its own (hand-written, NVRTC-compiled) kernel.
  h.nodes[1] = lt_node("Gelu", {"m"}, "y");
  run(h, in, &fused, &launched);
  EXPECT_EQ(fused, 1);
  EXPECT_EQ(launched, 2);
  EXPECT_NE(cuda::last_source().find("erff("), std::string::npos) << cuda::last_source();
  // cuBLASLt refusing at run time: each group falls back to the unfused kernels (the bias
  // broadcast, cuBLAS with beta=1, the activation: compiled here), counted, and keeps running.
  setenv("TENSORD_CUDA_LT", "refuse", 1);
  for (int tanh_gelu = 0; tanh_gelu < 2; ++tanh_gelu) {
    const Graph& graph = tanh_gelu ? h : g;
    if (tanh_gelu) h.nodes[1] = lt_node("Gelu", {"m"}, "y", {{"approximate", std::string("tanh")}});
    const int64_t b0 = cuda::lt_fallbacks();
    run(graph, in, &fused, &launched);
    EXPECT_EQ(fused, 0);
    EXPECT_EQ(cuda::lt_fallbacks() - b0, 1);
    EXPECT_EQ(launched, 3) << "bias, sgemm, activation";
    if (tanh_gelu) EXPECT_NE(cuda::last_source().find("tanhf("), std::string::npos) << cuda::last_source();
  }
  unsetenv("TENSORD_CUDA_LT");
}

// On a GPU: the fused groups agree with cpu:0 (cuBLASLt fused calls and fallbacks counted).
TEST(CudaKernels, CublasLtBiasEpiloguesAgreeWithTheCpu) {
  REQUIRE_GPU();
  auto client = gpu_client();
  ASSERT_TRUE(client.ok());
  const int64_t f0 = cuda::lt_fused_calls(), b0 = cuda::lt_fallbacks();
  struct Case {
    const char* name;
    std::vector<Node> nodes;
    bool trans_b;
  };
  const std::vector<Case> cases = {
      {"MatMul+Add+Relu", {lt_node("MatMul", {"a", "b"}, "m"), lt_node("Add", {"m", "bias"}, "s"), lt_node("Relu", {"s"}, "y")}, false},
      {"MatMul+Add", {lt_node("MatMul", {"a", "b"}, "m"), lt_node("Add", {"bias", "m"}, "y")}, false},
      {"Gemm(transB, C)+tanh Gelu",
       {lt_node("Gemm", {"a", "b", "bias"}, "m", {{"transB", int64_t{1}}}),
        lt_node("Gelu", {"m"}, "y", {{"approximate", std::string("tanh")}})},
       true},
      {"Gemm+Add+erf Gelu", {lt_node("Gemm", {"a", "b"}, "m"), lt_node("Add", {"m", "bias"}, "s"), lt_node("Gelu", {"s"}, "y")}, false},
  };
  const int64_t M = 33, K = 70, N = 47;
  for (const Case& c : cases) {
    Graph g;
    g.inputs = {{"a", {DType::kFloat32, {M, K}}}};
    g.outputs = {{"y", {DType::kFloat32, {M, N}}}};
    g.initializers["b"] = random_floats(c.trans_b ? Shape{N, K} : Shape{K, N}, 3);
    g.initializers["bias"] = random_floats({N}, 4);
    g.nodes = c.nodes;
    std::vector<HostTensor> in = {random_floats({M, K}, 5)};
    auto got = testing::run_on(**client, g, in, "cuda:0");
    auto want = testing::run_on(**client, g, in, "cpu:0");
    ASSERT_TRUE(got.ok() && want.ok()) << c.name;
    ASSERT_TRUE((*got)[0].ok()) << c.name << ": " << (*got)[0].status().to_string();
    ASSERT_TRUE((*want)[0].ok()) << c.name;
    const float* x = static_cast<const float*>((*got)[0]->data());
    const float* y = static_cast<const float*>((*want)[0]->data());
    for (int64_t i = 0; i < (*want)[0]->numel(); ++i) ASSERT_NEAR(x[i], y[i], 1e-4 * (1 + std::fabs(y[i]))) << c.name << " " << i;
  }
  const int64_t fused = cuda::lt_fused_calls() - f0, fallbacks = cuda::lt_fallbacks() - b0;
  std::cout << "[ cuda ] cuBLASLt bias epilogues: " << fused << " fused calls, " << fallbacks
            << " unfused fallbacks (4 groups)\n";
  EXPECT_EQ(fused + fallbacks, 4) << "every group went to cuBLASLt or was counted as falling back";
}

// ---- cuDNN's fused convolution: Conv [+ bias] [+ residual] + Relu as one call ----

// plan_conv_fusions over `nodes` with `types`, constant weights w [8, 4, 3, 3], a Conv bias cb
// [8] and a per-channel Add bias ab [1, 8, 1, 1]; `outputs` are the graph outputs.
std::vector<cuda::ConvFusion> conv_plan(const std::vector<Node>& nodes, const std::set<std::string>& outputs,
                                        std::vector<std::string>* notes = nullptr,
                                        DType dtype = DType::kFloat32) {
  const Shape ys = {2, 8, 6, 6};
  static const std::map<std::string, HostTensor> constants = {
      {"w", random_floats({8, 4, 3, 3}, 1)}, {"cb", random_floats({8}, 2)}, {"ab", random_floats({1, 8, 1, 1}, 3)}};
  std::map<std::string, TensorType> types = {{"x", {dtype, {2, 4, 6, 6}}}, {"ab", {DType::kFloat32, {1, 8, 1, 1}}}};
  for (const char* v : {"c", "s", "r", "y", "z", "q"}) types[v] = {dtype, ys};
  FusionGraph g;
  for (const auto& n : nodes) g.nodes.push_back(&n);
  g.type_of = [&](const std::string& v) -> const TensorType* {
    auto it = types.find(v);
    return it == types.end() ? nullptr : &it->second;
  };
  g.constant = [&](const std::string& v) -> const HostTensor* {
    auto it = constants.find(v);
    return it == constants.end() ? nullptr : &it->second;
  };
  g.is_graph_output = [&](const std::string& v) { return outputs.count(v) > 0; };
  return cuda::plan_conv_fusions(g, notes);
}

TEST(CudaPlanning, ConvBiasResidualAndReluFuseIntoOneCudnnCall) {
  const std::map<std::string, Attribute> same = {{"pads", Attribute(std::vector<int64_t>{1, 1, 1, 1})}};
  const Node conv = lt_node("Conv", {"x", "w", "cb"}, "c", same);
  const Node conv_nb = lt_node("Conv", {"x", "w"}, "c", same);
  // Conv(B) + Relu.
  auto f = conv_plan({conv, lt_node("Relu", {"c"}, "y")}, {"y"});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].members, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(f[0].bias, "cb");
  EXPECT_EQ(f[0].residual, "");
  EXPECT_EQ(f[0].output, "y");
  EXPECT_EQ(f[0].channels, 8);
  // Conv(B) + residual Add (the residual first) + Relu: ResNet's block end.
  f = conv_plan({conv, lt_node("Add", {"z", "c"}, "s"), lt_node("Relu", {"s"}, "y")}, {"y"});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].members, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(f[0].residual, "z");
  // Conv without B + Add of a per-channel constant + residual + Relu.
  f = conv_plan({conv_nb, lt_node("Add", {"c", "ab"}, "s"), lt_node("Add", {"s", "z"}, "r"), lt_node("Relu", {"r"}, "y")},
                {"y"});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].bias, "ab");
  EXPECT_EQ(f[0].residual, "z");
  EXPECT_EQ(f[0].members.size(), 4u);
  // No bias at all: still one call (the region uploads zeros).
  f = conv_plan({conv_nb, lt_node("Relu", {"c"}, "y")}, {"y"});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].bias, "");
  // Not fused: no Relu (Clip, as MobileNets' ReLU6), a second per-channel bias, the Conv's
  // result read twice or a graph output, float16.
  EXPECT_TRUE(conv_plan({conv, lt_node("Clip", {"c"}, "y")}, {"y"}).empty());
  std::vector<std::string> notes;
  EXPECT_TRUE(conv_plan({conv, lt_node("Add", {"c", "ab"}, "s"), lt_node("Relu", {"s"}, "y")}, {"y"}, &notes).empty());
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes.back().find("one per-channel bias"), std::string::npos) << notes.back();
  EXPECT_TRUE(conv_plan({conv, lt_node("Relu", {"c"}, "y"), lt_node("Neg", {"c"}, "q")}, {"y", "q"}).empty());
  EXPECT_TRUE(conv_plan({conv, lt_node("Relu", {"c"}, "y")}, {"y", "c"}).empty());
  EXPECT_TRUE(conv_plan({conv, lt_node("Relu", {"c"}, "y")}, {"y"}, nullptr, DType::kFloat16).empty());
  // A Relu after an op cuDNN's call cannot add (a Mul): not fused, and says why.
  notes.clear();
  EXPECT_TRUE(conv_plan({conv, lt_node("Mul", {"c", "z"}, "s"), lt_node("Relu", {"s"}, "y")}, {"y"}, &notes).empty());
  EXPECT_FALSE(notes.empty());
}

TEST(CudaKernels, CudnnFusedConvolutionsAgreeWithTheCpu) {
  REQUIRE_GPU();
  auto client = gpu_client();
  ASSERT_TRUE(client.ok());
  const int64_t f0 = cuda::conv_fused_calls();
  const std::map<std::string, Attribute> same = {{"pads", Attribute(std::vector<int64_t>{1, 1, 1, 1})}};
  struct Case {
    const char* name;
    std::vector<Node> nodes;
  };
  const std::vector<Case> cases = {
      {"Conv(B)+Relu", {lt_node("Conv", {"x", "w", "cb"}, "c", same), lt_node("Relu", {"c"}, "y")}},
      {"Conv(B)+residual+Relu",
       {lt_node("Conv", {"x", "w", "cb"}, "c", same), lt_node("Add", {"z", "c"}, "s"), lt_node("Relu", {"s"}, "y")}},
      {"Conv+Relu", {lt_node("Conv", {"x", "w"}, "c", same), lt_node("Relu", {"c"}, "y")}},
  };
  for (const Case& c : cases) {
    Graph g;
    g.inputs = {{"x", {DType::kFloat32, {2, 16, 9, 9}}}, {"z", {DType::kFloat32, {2, 24, 9, 9}}}};
    g.outputs = {{"y", {DType::kFloat32, {2, 24, 9, 9}}}};
    g.initializers["w"] = random_floats({24, 16, 3, 3}, 3);
    g.initializers["cb"] = random_floats({24}, 4);
    g.nodes = c.nodes;
    std::vector<HostTensor> in = {random_floats({2, 16, 9, 9}, 5), random_floats({2, 24, 9, 9}, 6)};
    auto got = testing::run_on(**client, g, in, "cuda:0");
    auto want = testing::run_on(**client, g, in, "cpu:0");
    ASSERT_TRUE(got.ok() && want.ok()) << c.name;
    ASSERT_TRUE((*got)[0].ok()) << c.name << ": " << (*got)[0].status().to_string();
    ASSERT_TRUE((*want)[0].ok()) << c.name;
    const float* x = static_cast<const float*>((*got)[0]->data());
    const float* y = static_cast<const float*>((*want)[0]->data());
    for (int64_t i = 0; i < (*want)[0]->numel(); ++i)
      ASSERT_NEAR(x[i], y[i], 1e-4 * (1 + std::fabs(y[i]))) << c.name << " " << i;
  }
  EXPECT_EQ(cuda::conv_fused_calls() - f0, 3) << "each group ran as one cudnnConvolutionBiasActivationForward";
}

// ---- CUDA IPC and CUDA memory of the caller (Client::upload_cuda / read_into_cuda) ----

TEST(CudaIpc, UuidsAreWrittenAsNvidiaSmiWritesThem) {
  const unsigned char b[16] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
                               0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0xff};
  EXPECT_EQ(cuda::format_uuid(b), "GPU-01234567-89ab-cdef-0011-2233445566ff");
}

TEST(CudaIpc, ExportingMemoryThatIsNotAGpuBufferSaysWhy) {
  std::vector<float> host(16);
  for (bool ipc : {true, false}) {
    auto m = export_device_memory(host.data(), 64, ipc);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition) << m.status().to_string();
    // Without a driver: "no CUDA driver ..."; with one: "not CUDA device memory".
    EXPECT_NE(m.status().message().find(ipc ? "CUDA IPC" : "CUDA memory"), std::string::npos)
        << m.status().message();
  }
}

// The engine's side without a GPU: an engine with no cuda device, and the compile-only cuda:0,
// refuse CUDA memory naming why, for uploads and reads alike.
TEST(CudaIpc, EnginesWithoutAGpuRefuseCudaMemoryNamingWhy) {
  ForeignMemory m;
  m.kind = "cuda";
  m.ipc_handle.assign(64, '\x01');
  m.size = 1 << 20;
  HostTensor x = HostTensor::from_vector(std::vector<float>(16, 2.0f), {16});
  {
    LocalClientOptions o;
    o.devices = "cpu:0";
    auto client = make_local_client(o);
    ASSERT_TRUE(client.ok()) << client.status().to_string();
    auto* local = dynamic_cast<LocalClient*>(client->get());
    ASSERT_NE(local, nullptr);
    auto h = local->engine().upload_foreign(local->session(), DType::kFloat32, {16}, m, "");
    ASSERT_FALSE(h.ok());
    EXPECT_EQ(h.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(h.status().message().find("no cuda device"), std::string::npos) << h.status().message();
    auto up = local->upload(x.view(), "cpu:0");
    ASSERT_TRUE(up.ok());
    auto r = local->engine().read_into_foreign(local->session(), *up, m);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().to_string();
    // Room too small: the type comes back, nothing is copied, no device is needed.
    ForeignMemory small = m;
    small.size = 8;
    auto t = local->engine().read_into_foreign(local->session(), *up, small);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->shape, (Shape{16}));
    // More bytes than the memory given: refused before any device is looked at.
    auto over = local->engine().upload_foreign(local->session(), DType::kFloat32, {1 << 20}, m, "");
    EXPECT_EQ(over.status().code(), StatusCode::kOutOfRange) << over.status().to_string();
  }
  REQUIRE_NVRTC();
  auto client = compile_only_client();
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  auto* local = dynamic_cast<LocalClient*>(client->get());
  ASSERT_NE(local, nullptr);
  auto h = local->engine().upload_foreign(local->session(), DType::kFloat32, {16}, m, "");
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(h.status().message().find("compile-only"), std::string::npos) << h.status().message();
}

TEST(CudaIpc, TheLocalClientMovesCudaMemoryDeviceToDevice) {
  REQUIRE_GPU();
  Device& d = *gpu().cuda[0];
  const size_t n = 1 << 20;  // floats
  auto pa = d.allocate(n * 4), pb = d.allocate(n * 4);
  ASSERT_TRUE(pa.ok() && pb.ok());
  Buffer a{&d, *pa, n * 4, 0}, b{&d, *pb, n * 4, 0};
  HostTensor x = random_floats({static_cast<int64_t>(n)}, 7);
  ASSERT_TRUE(d.write(a, 0, x.data(), n * 4).ok());
  auto client = gpu_client();
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  // At an offset into the allocation, as a PyTorch view would be.
  TensorView v{DType::kFloat32, {static_cast<int64_t>(n - 16)}, static_cast<char*>(*pa) + 64};
  auto h = (*client)->upload_cuda(v, "");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  auto info = (*client)->info(*h);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->device, "cuda:0");
  auto back = (*client)->read(*h);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(std::memcmp(back->data(), static_cast<const char*>(x.data()) + 64, (n - 16) * 4), 0);
  auto t = (*client)->read_into_cuda(*h, *pb, n * 4);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  std::vector<float> out(n);
  ASSERT_TRUE(d.read(b, 0, out.data(), (n - 16) * 4).ok());
  EXPECT_EQ(std::memcmp(out.data(), static_cast<const char*>(x.data()) + 64, (n - 16) * 4), 0);
  // To cpu:0 straight from the GPU buffer (a copy after the device-to-device one).
  auto hc = (*client)->upload_cuda(v, "cpu:0");
  ASSERT_TRUE(hc.ok()) << hc.status().to_string();
  EXPECT_EQ((*client)->info(*hc)->device, "cpu:0");
  d.free(*pa, n * 4);
  d.free(*pb, n * 4);
}

// A broker on this host with a client handing it GPU buffers by CUDA IPC: upload, compute,
// read back into a GPU buffer, and the GB/s of both (scripts/gpu-check.sh runs it against a
// broker it starts: TENSORD_IPC_BROKER=ADDRESS; else one is started here).
TEST(CudaIpc, ABrokerOnThisHostTakesAndReturnsGpuBuffers) {
  REQUIRE_GPU();
  std::unique_ptr<testing::BrokerProcess> own;
  std::string address;
  if (const char* a = std::getenv("TENSORD_IPC_BROKER"); a && *a) {
    address = a;
  } else {
    if (!fs::exists(TENSORD_CLI_PATH)) GTEST_SKIP() << "no tensord binary at " << TENSORD_CLI_PATH;
    testing::BrokerOptions bo;
    bo.cpu_devices = 1;
    auto b = testing::BrokerProcess::start(bo);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    own = std::move(b).value();
    address = own->address();
  }
  auto c = rpc::RemoteClient::connect(address);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  Device& d = *gpu().cuda[0];
  const size_t n = size_t{64} << 20;  // bytes
  auto pa = d.allocate(n), pb = d.allocate(n);
  ASSERT_TRUE(pa.ok() && pb.ok());
  Buffer a{&d, *pa, n, 0}, b{&d, *pb, n, 0};
  HostTensor x = random_floats({static_cast<int64_t>(n / 4)}, 11);
  ASSERT_TRUE(d.write(a, 0, x.data(), n).ok());
  TensorView v{DType::kFloat32, {static_cast<int64_t>(n / 4)}, *pa};
  auto h = (*c)->upload_cuda(v, "");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  auto info = (*c)->info(*h);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->device.rfind("cuda:", 0), 0u) << info->device;
  // Computed on the broker's GPU, read back into this process's GPU buffer.
  Graph g;
  g.inputs = {{"x", {DType::kFloat32, {static_cast<int64_t>(n / 4)}}}};
  g.outputs = {{"y", {DType::kFloat32, {static_cast<int64_t>(n / 4)}}}};
  Node relu;
  relu.op = "Relu";
  relu.inputs = {"x"};
  relu.outputs = {"y"};
  g.nodes = {relu};
  auto y = (*c)->execute(g, {*h}, "");
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  auto t = (*c)->read_into_cuda((*y)[0], *pb, n);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  std::vector<float> out(n / 4);
  ASSERT_TRUE(d.read(b, 0, out.data(), n).ok());
  const auto* xs = static_cast<const float*>(x.data());
  size_t wrong = 0;
  for (size_t i = 0; i < out.size(); ++i) wrong += out[i] != std::max(xs[i], 0.0f);
  EXPECT_EQ(wrong, 0u);
  // Too little room: the type comes back, nothing is written.
  auto small = (*c)->read_into_cuda((*y)[0], *pb, 16);
  ASSERT_TRUE(small.ok()) << small.status().to_string();
  auto gbs = [&](const std::function<bool()>& f) {
    const int reps = 5;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) EXPECT_TRUE(f());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return static_cast<double>(n) * reps / s / 1e9;
  };
  const double up = gbs([&] {
    auto k = (*c)->upload_cuda(v, "");
    return k.ok() && (*c)->release(*k).ok();
  });
  const double down = gbs([&] { return (*c)->read_into_cuda(*h, *pb, n).ok(); });
  std::cout << "[ cuda ] broker on this host over CUDA IPC, 64 MiB: upload " << up << " GB/s, read " << down
            << " GB/s (no host copy)\n";
  d.free(*pa, n);
  d.free(*pb, n);
}

}  // namespace
}  // namespace tensord
