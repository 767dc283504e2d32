// The GPU layer shared by the OpenCL and CUDA backends (src/backends/codegen/gpu_runtime.h,
// gpu_kernels.h): its disk cache keeps the entries the backends wrote before it, and one
// kernel list answers both `supports` and `create`.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backends/codegen/gpu_runtime.h"
#include "backends/opencl/opencl_backend.h"

namespace tensord {
namespace {

namespace fs = std::filesystem;

// TENSORD_KERNEL_CACHE set for one scope (the cache reads it when an entry is made).
class ScopedCacheDir {
 public:
  explicit ScopedCacheDir(const std::string& dir) {
    const char* old = std::getenv("TENSORD_KERNEL_CACHE");
    had_ = old != nullptr;
    if (old) old_ = old;
    setenv("TENSORD_KERNEL_CACHE", dir.c_str(), 1);
  }
  ~ScopedCacheDir() {
    if (had_)
      setenv("TENSORD_KERNEL_CACHE", old_.c_str(), 1);
    else
      unsetenv("TENSORD_KERNEL_CACHE");
  }

 private:
  bool had_ = false;
  std::string old_;
};

TEST(GpuLayer, TheDiskCacheKeepsItsFileNamesAndRefusesBadEntries) {
  char dir[] = "/tmp/tensord-gpu-layer-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  ScopedCacheDir scoped(dir);
  const std::string key = "PoCL|cpu-x86|6.0", source = "__kernel void k() {}";
  const codegen::ProgramDiskCache cache("tensord-opencl-program-v1\n", key, source, "clbin");
  // The name the OpenCL backend gave this entry before the shared layer (FNV-1a of the device
  // key, then of the source): entries on disk stay valid.
  EXPECT_EQ(cache.file(), fs::path(dir) / "0b1a078ec83bedc8-f4af4814694ec6dc.clbin");
  EXPECT_EQ(cache.load(), "");
  const std::string binary(
      "\x7f"
      "ELF\0binary",
      11);
  cache.store(binary);
  EXPECT_EQ(cache.load(), binary);
  // The same file read as another backend's format: not an entry.
  EXPECT_EQ(codegen::ProgramDiskCache("tensord-cuda-code-v1\n", key, source, "clbin").load(), "");
  // Another source under the same key: another file.
  EXPECT_NE(
      codegen::ProgramDiskCache("tensord-opencl-program-v1\n", key, source + " ", "clbin").file(),
      cache.file());
  {  // One flipped byte of the binary: refused (rebuilt from source, never trusted).
    std::fstream f(cache.file(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('x');
  }
  EXPECT_EQ(cache.load(), "");
  ScopedCacheDir off("off");
  EXPECT_TRUE(codegen::ProgramDiskCache("tensord-opencl-program-v1\n", key, source, "clbin")
                  .file()
                  .empty());
  fs::remove_all(dir);
}

Node node(const std::string& op, size_t inputs, const std::string& domain = "") {
  Node n;
  n.op = op;
  n.domain = domain;
  n.name = "n_" + op;
  for (size_t i = 0; i < inputs; ++i) n.inputs.push_back("x" + std::to_string(i));
  n.outputs = {"y"};
  return n;
}

TEST(GpuLayer, SupportsAndCreateAnswerFromOneKernelList) {
  setenv("POCL_DEVICES", "pthread pthread", 0);
  auto backend = opencl::create_opencl_backend();
  auto devices = backend->enumerate();
  if (devices.empty()) GTEST_SKIP() << "no OpenCL device";
  const KernelTable& table = devices[0]->kernels();
  const TensorType f32{DType::kFloat32, {2, 3}}, i32{DType::kInt32, {2, 3}},
      i16{DType::kInt16, {2, 3}};
  const TensorType shape{DType::kInt64, {2}};
  struct Case {
    Node node;
    std::vector<TensorType> inputs;
    std::vector<std::string> kernels;  // the kernel's name (any of these), or
    std::string refused;               // what the refusal says
  };
  const std::vector<Case> cases = {
      {node("Add", 2), {f32, f32}, {"generated"}, ""},   // element-wise
      {node("Reshape", 2), {f32, shape}, {"view"}, ""},  // a view
      {node("ReduceSum", 1), {f32}, {"generated"}, ""},  // a reduction
      {node("Transpose", 1), {f32}, {"generated"}, ""},  // data movement
      {node("Softmax", 1), {f32}, {"generated"}, ""},    // a template
      {node("MatMul", 2),
       {f32, TensorType{DType::kFloat32, {3, 4}}},  // the device's own entry
       {"clblast", "generated"},
       ""},
      {node("ReduceSum", 1), {i32}, {}, "reduces static float32 tensors only"},
      {node("Transpose", 1), {i16}, {}, "moves 1-, 4- and 8-byte elements only"},
      {node("Relu", 1, "com.example"), {f32}, {}, "ai.onnx only"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.node.op + " " + c.inputs[0].to_string());
    const Status s = table.supports(c.node, c.inputs, CompileOptions{});
    auto k = table.create(c.node, c.inputs, {}, CompileOptions{});
    if (c.refused.empty()) {
      ASSERT_TRUE(s.ok()) << s.message();
      ASSERT_TRUE(k.ok()) << k.status().message();
      EXPECT_NE(std::find(c.kernels.begin(), c.kernels.end(), (*k)->name()), c.kernels.end())
          << (*k)->name();
    } else {
      EXPECT_FALSE(s.ok());
      EXPECT_NE(s.message().find(c.refused), std::string::npos) << s.message();
      ASSERT_FALSE(k.ok());
      EXPECT_EQ(k.status().message(), s.message());  // create refuses with the same words
    }
  }
}

}  // namespace
}  // namespace tensord
