// A small MLP with the Array API: x[8,16] -> Gemm(16->32) -> Relu -> MatMul(32->4) + b ->
// Softmax. Weights are seeded, so the result is reproducible. The whole forward pass is
// recorded lazily and runs as one graph when the result is read.
//
//   mlp [--device D] [--dump DIR]   (DIR receives x, w1, b1, w2, b2 and y as .npy files)
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "tensord/array.h"

using tensord::Array;
using tensord::HostTensor;

static HostTensor random_tensor(std::mt19937& rng, tensord::Shape shape, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  HostTensor t(tensord::DType::kFloat32, std::move(shape));
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

// A float32 tensor as a NumPy .npy file (format 1.0), with the public API only: the example
// builds against an installed tensord as well as in the tree.
static bool save_npy(const std::string& path, const tensord::HostTensor& t) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < t.shape().size(); ++i)
    header += std::to_string(t.shape()[i]) +
              (t.shape().size() == 1 || i + 1 < t.shape().size() ? "," : "");
  header += "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  const uint16_t n = static_cast<uint16_t>(header.size());
  f.write("\x93NUMPY\x01\x00", 8);
  f.put(static_cast<char>(n & 0xff)).put(static_cast<char>(n >> 8));
  f << header;
  f.write(static_cast<const char*>(t.data()), static_cast<std::streamsize>(t.nbytes()));
  return static_cast<bool>(f);
}

int main(int argc, char** argv) {
  std::string device, dump;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (!std::strcmp(argv[i], "--dump") && i + 1 < argc) dump = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--device D] [--dump DIR]\n", argv[0]);
      return 2;
    }
  }
  std::mt19937 rng(42);
  HostTensor x = random_tensor(rng, {8, 16}, 1.0f);
  HostTensor w1 = random_tensor(rng, {16, 32}, 0.25f);
  HostTensor b1 = random_tensor(rng, {32}, 0.1f);
  HostTensor w2 = random_tensor(rng, {32, 4}, 0.25f);
  HostTensor b2 = random_tensor(rng, {4}, 0.1f);

  Array X = Array::from_host(x, device);
  Array W1 = Array::from_host(w1, device);
  Array B1 = Array::from_host(b1, device);
  Array W2 = Array::from_host(w2, device);
  Array B2 = Array::from_host(b2, device);

  Array hidden = tensord::gemm(X, W1, B1).relu();
  Array logits = hidden.matmul(W2) + B2;
  Array probs = logits.softmax(-1);

  auto y = probs.to_host();
  if (!y.ok()) {
    std::fprintf(stderr, "mlp: %s\n", y.status().to_string().c_str());
    return 1;
  }
  std::printf("MLP 16-32-4 on %s, batch 8: class probabilities\n", probs.device().c_str());
  const float* p = y->data<float>();
  for (int r = 0; r < 8; ++r) {
    std::printf("  [%d]", r);
    for (int c = 0; c < 4; ++c) std::printf(" %.6f", p[r * 4 + c]);
    std::printf("\n");
  }
  if (!dump.empty()) {
    const std::pair<const char*, const HostTensor*> files[] = {
        {"x", &x}, {"w1", &w1}, {"b1", &b1}, {"w2", &w2}, {"b2", &b2}, {"y", &*y}};
    for (const auto& [name, t] : files) {
      const std::string path = dump + "/" + name + ".npy";
      if (!save_npy(path, *t)) {
        std::fprintf(stderr, "mlp: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
        return 1;
      }
    }
  }
  return 0;
}
