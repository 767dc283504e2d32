// Trains an MLP or a small CNN on scikit-learn's digits (8x8 images, 1,797 samples; the CSV that
// Debian's python3-sklearn ships) with the C++ Array API: gradients from tensord::grad, updates
// from the ONNX training domain's Adam op (ai.onnx.preview.training.Adam), parameters and
// optimiser state kept on the device between steps, one graph (forward, backward, update) per
// step. Embedded, or through a broker when TENSORD_ADDRESS is set. Checks its own result: exits
// 1 below the accuracy asked for (default 0.97).
//
//   train_digits [--model mlp|cnn] [--device D] [--steps N] [--min-accuracy A] [--data FILE]
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tensord/array.h"

using tensord::Array;
using tensord::DType;
using tensord::HostTensor;
using tensord::Shape;

namespace {

const char* kDigits = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";

// digits.csv.gz: 64 pixel values (0..16) and the label per line.
bool load(const std::string& path, std::vector<float>* x, std::vector<int64_t>* y) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return false;
  char line[1024];
  while (gzgets(f, line, sizeof line)) {
    std::vector<float> v;
    for (char* p = line; *p && *p != '\n';) {
      char* end = nullptr;
      v.push_back(std::strtof(p, &end));
      if (end == p) break;
      p = *end == ',' ? end + 1 : end;
    }
    if (v.size() != 65) continue;
    for (int i = 0; i < 64; ++i) x->push_back(v[static_cast<size_t>(i)] / 16.0f);
    y->push_back(static_cast<int64_t>(v[64]));
  }
  gzclose(f);
  return !y->empty();
}

HostTensor he(std::mt19937& rng, Shape shape, int64_t fan_in) {
  std::normal_distribution<float> dist(0.0f, std::sqrt(2.0f / static_cast<float>(fan_in)));
  HostTensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = dist(rng);
  return t;
}

HostTensor zeros(Shape shape) {
  HostTensor t(DType::kFloat32, std::move(shape));
  std::memset(t.mutable_data(), 0, t.nbytes());
  return t;
}

Array logits(const std::string& model, const std::map<std::string, Array>& p, const Array& x,
             int64_t n) {
  if (model == "mlp") {
    Array h = tensord::gemm(x, p.at("w1"), p.at("b1")).relu();
    return tensord::gemm(h, p.at("w2"), p.at("b2"));
  }
  tensord::ConvOptions pad1;
  pad1.pads = {1, 1, 1, 1};
  tensord::PoolOptions pool;
  pool.kernel_shape = {2, 2};
  pool.strides = {2, 2};
  Array h = x.reshape({n, 1, 8, 8});
  h = tensord::max_pool(tensord::conv(h, p.at("c1"), p.at("cb1"), pad1).relu(), pool);
  h = tensord::max_pool(tensord::conv(h, p.at("c2"), p.at("cb2"), pad1).relu(), pool);
  return tensord::gemm(h.flatten(1), p.at("w"), p.at("b"));
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "mlp", device, data = kDigits;
  int steps = 0;
  double min_accuracy = 0.97;
  for (int i = 1; i < argc; ++i) {
    const bool more = i + 1 < argc;
    if (!std::strcmp(argv[i], "--model") && more) model = argv[++i];
    else if (!std::strcmp(argv[i], "--device") && more) device = argv[++i];
    else if (!std::strcmp(argv[i], "--steps") && more) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--min-accuracy") && more) min_accuracy = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--data") && more) data = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: %s [--model mlp|cnn] [--device D] [--steps N] [--min-accuracy A] "
                   "[--data digits.csv.gz]\n",
                   argv[0]);
      return 2;
    }
  }
  if (model != "mlp" && model != "cnn") {
    std::fprintf(stderr, "train_digits: --model must be mlp or cnn, not '%s'\n", model.c_str());
    return 2;
  }
  if (steps <= 0) steps = model == "mlp" ? 300 : 250;
  std::vector<float> xs;
  std::vector<int64_t> ys;
  if (!load(data, &xs, &ys)) {
    std::fprintf(stderr, "train_digits: cannot read the digits from '%s' (python3-sklearn)\n",
                 data.c_str());
    return 2;
  }
  // A fixed split: 450 test samples, the rest for training.
  const int64_t total = static_cast<int64_t>(ys.size()), test = 450, train = total - test;
  std::vector<int64_t> perm(static_cast<size_t>(total));
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 rng(0);
  std::shuffle(perm.begin(), perm.end(), rng);
  HostTensor xtr(DType::kFloat32, {train, 64}), xte(DType::kFloat32, {test, 64});
  HostTensor ytr(DType::kInt64, {train});
  std::vector<int64_t> yte;
  for (int64_t k = 0; k < total; ++k) {
    const int64_t s = perm[static_cast<size_t>(k)];
    float* dst = k < test ? xte.mutable_data<float>() + k * 64
                          : xtr.mutable_data<float>() + (k - test) * 64;
    std::memcpy(dst, xs.data() + s * 64, 64 * sizeof(float));
    if (k < test)
      yte.push_back(ys[static_cast<size_t>(s)]);
    else
      ytr.mutable_data<int64_t>()[k - test] = ys[static_cast<size_t>(s)];
  }

  std::map<std::string, HostTensor> init;
  if (model == "mlp") {
    init = {{"w1", he(rng, {64, 128}, 64)}, {"b1", zeros({128})},
            {"w2", he(rng, {128, 10}, 128)}, {"b2", zeros({10})}};
  } else {
    init = {{"c1", he(rng, {16, 1, 3, 3}, 9)},   {"cb1", zeros({16})},
            {"c2", he(rng, {32, 16, 3, 3}, 144)}, {"cb2", zeros({32})},
            {"w", he(rng, {128, 10}, 128)},       {"b", zeros({10})}};
  }
  std::map<std::string, Array> params, m1, m2;
  for (const auto& [name, t] : init) {
    params[name] = Array::from_host(t, device);
    m1[name] = Array::from_host(zeros(t.shape()), device);
    m2[name] = Array::from_host(zeros(t.shape()), device);
  }
  const Array x_train = Array::from_host(xtr, device), y_train = Array::from_host(ytr, device);
  const int64_t batch = 256;
  const float lr = 1e-2f;
  std::vector<int64_t> order(static_cast<size_t>(train));
  std::iota(order.begin(), order.end(), 0);
  size_t pos = order.size();
  float loss_value = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < steps; ++step) {
    if (pos + batch > order.size()) {
      std::shuffle(order.begin(), order.end(), rng);
      pos = 0;
    }
    std::vector<int64_t> idx(order.begin() + static_cast<std::ptrdiff_t>(pos),
                             order.begin() + static_cast<std::ptrdiff_t>(pos + batch));
    pos += batch;
    // Uploaded (not constants): the step's graph is the same every step, compiled once.
    const Array ib = Array::from_host(HostTensor::from_vector<int64_t>(idx, {batch}), device);
    const Array xb = x_train.gather(ib), yb = y_train.gather(ib);
    const Array loss = Array::op("SoftmaxCrossEntropyLoss", {logits(model, params, xb, batch), yb})[0];
    std::vector<Array> leaves;
    for (const auto& [name, a] : params) leaves.push_back(a);
    const std::vector<Array> grads = tensord::grad(loss, leaves);
    // Adam (ai.onnx.preview.training): R, T, then X..., G..., V..., H...; outputs X', V', H'.
    std::vector<Array> in = {
        Array::from_host(HostTensor::from_vector<float>({lr}, {}), device),
        Array::from_host(HostTensor::from_vector<int64_t>({step}, {}), device)};
    for (const auto& [name, a] : params) in.push_back(a);
    in.insert(in.end(), grads.begin(), grads.end());
    for (const auto& [name, a] : m1) in.push_back(a);
    for (const auto& [name, a] : m2) in.push_back(a);
    const int n = static_cast<int>(params.size());
    std::vector<Array> out = Array::op("ai.onnx.preview.training.Adam", in,
                                       {{"alpha", 0.9f}, {"beta", 0.999f}, {"epsilon", 1e-8f}},
                                       3 * n);
    int k = 0;
    for (auto& [name, a] : params) a = out[static_cast<size_t>(k++)];
    for (auto& [name, a] : m1) a = out[static_cast<size_t>(k++)];
    for (auto& [name, a] : m2) a = out[static_cast<size_t>(k++)];
    std::vector<Array> all = out;
    all.push_back(loss);
    if (tensord::Status s = tensord::eval(all); !s.ok()) {
      std::fprintf(stderr, "train_digits: step %d: %s\n", step, s.to_string().c_str());
      return 1;
    }
    if (step % 50 == 0 || step == steps - 1) {
      auto l = loss.to_vector<float>();
      if (!l.ok()) {
        std::fprintf(stderr, "train_digits: %s\n", l.status().to_string().c_str());
        return 1;
      }
      loss_value = (*l)[0];
      std::printf("step %d: loss %.4f\n", step, loss_value);
    }
  }
  const Array pred = logits(model, params, Array::from_host(xte, device), test).argmax(1);
  auto p = pred.to_vector<int64_t>();
  if (!p.ok()) {
    std::fprintf(stderr, "train_digits: %s\n", p.status().to_string().c_str());
    return 1;
  }
  int64_t right = 0;
  for (int64_t i = 0; i < test; ++i) right += (*p)[static_cast<size_t>(i)] == yte[static_cast<size_t>(i)];
  const double acc = static_cast<double>(right) / static_cast<double>(test);
  const double sec =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s on %s: test accuracy %.4f, final loss %.4f, %.1f s\n", model.c_str(),
              pred.device().c_str(), acc, loss_value, sec);
  if (acc < min_accuracy) {
    std::printf("FAIL: accuracy %.4f < %.2f\n", acc, min_accuracy);
    return 1;
  }
  return 0;
}
