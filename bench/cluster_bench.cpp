// 64 MiB between two ranks: through tensord (a client copying n1/cpu:0 -> n2/cpu:0 on a
// cluster's front) against a bare MPI_Send/MPI_Recv of the same size between the same ranks.
//
//   mpirun --allow-run-as-root --oversubscribe -np 3 build/bench/cluster_bench --bare
//   mpirun ... -np 3 build/tensord serve --cluster --listen 127.0.0.1:7000 &
//   build/bench/cluster_bench --address 127.0.0.1:7000
//
// Each prints the median of --iterations copies in GB/s (one JSON line).
//
//   build/bench/cluster_bench --address ADDR --dp mobilenet_v2 --batch 24
//       --devices cpu:0,n1/cpu:0,n2/cpu:0
// runs the zoo model data-parallel: the batch split in equal parts, one part a device, all
// parts in flight at once, the outputs gathered; next to the whole batch on the first device,
// with the largest difference between the two outputs.
#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "models/zoo.h"
#include "tensord/client.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int bare(size_t bytes, int iterations) {
  MPI_Init(nullptr, nullptr);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 3) {
    if (rank == 0) std::fprintf(stderr, "cluster_bench --bare: run with mpirun -np 3\n");
    MPI_Finalize();
    return 2;
  }
  // Rank 0 only waits (sleeping, not spinning in MPI: it would take a core from the pair, as
  // tensord's front does not); ranks 1 and 2 synchronise among themselves.
  MPI_Comm pair;
  MPI_Comm_split(MPI_COMM_WORLD, rank == 1 || rank == 2 ? 1 : MPI_UNDEFINED, rank, &pair);
  if (rank != 1 && rank != 2) {
    MPI_Request done;
    MPI_Ibarrier(MPI_COMM_WORLD, &done);
    for (int flag = 0; !flag;) {
      MPI_Test(&done, &flag, MPI_STATUS_IGNORE);
      if (!flag) usleep(1000);
    }
    MPI_Finalize();
    return 0;
  }
  std::vector<char> buf(bytes, static_cast<char>(rank));
  std::vector<double> secs;
  for (int i = 0; i < iterations + 1; ++i) {  // the first is a warm-up
    MPI_Barrier(pair);
    auto t0 = Clock::now();
    if (rank == 1) MPI_Send(buf.data(), static_cast<int>(bytes), MPI_BYTE, 2, 0, MPI_COMM_WORLD);
    if (rank == 2) MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (rank == 2) {
      double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (i > 0) secs.push_back(s);
    }
  }
  if (rank == 2) {
    double s = median(secs);
    std::printf("{\"path\": \"bare MPI_Send/MPI_Recv rank 1 -> 2\", \"bytes\": %zu, \"median_s\": %.6f, \"GBps\": %.3f}\n",
                bytes, s, static_cast<double>(bytes) / s / 1e9);
    std::fflush(stdout);
  }
  MPI_Comm_free(&pair);
  MPI_Request done;
  MPI_Ibarrier(MPI_COMM_WORLD, &done);
  MPI_Wait(&done, MPI_STATUS_IGNORE);
  MPI_Finalize();
  return 0;
}

int through_tensord(const std::string& address, size_t bytes, int iterations) {
  auto client = tensord::connect(address);
  if (!client.ok()) {
    std::fprintf(stderr, "cluster_bench: %s\n", client.status().to_string().c_str());
    return 1;
  }
  tensord::HostTensor t(tensord::DType::kUInt8, {static_cast<int64_t>(bytes)});
  std::memset(t.mutable_data(), 7, bytes);
  // Host -> rank 1 (client to the front, then the front to rank 1), to ready.
  for (const char* dev : {"cpu:0", "n1/cpu:0"}) {
  std::vector<double> up;
  for (int i = 0; i < 4; ++i) {
    auto t0 = Clock::now();
    auto h = (*client)->upload(t.view(), dev);
    tensord::Status s = h.ok() ? (*client)->wait(*h) : h.status();
    if (!s.ok()) {
      std::fprintf(stderr, "cluster_bench: upload to %s: %s\n", dev, s.to_string().c_str());
      return 1;
    }
    up.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    (void)(*client)->release(*h);
  }
  std::printf("{\"path\": \"tensord upload host -> %s\", \"bytes\": %zu, \"first_s\": %.4f, \"median_s\": %.4f}\n",
              dev, bytes, up[0], median(std::vector<double>(up.begin() + 1, up.end())));
  }
  auto src = (*client)->upload(t.view(), "n1/cpu:0");
  if (!src.ok()) {
    std::fprintf(stderr, "cluster_bench: upload to n1/cpu:0: %s\n", src.status().to_string().c_str());
    return 1;
  }
  std::vector<double> secs;
  for (int i = 0; i < iterations + 1; ++i) {
    auto t0 = Clock::now();
    auto dst = (*client)->copy(*src, "n2/cpu:0");
    tensord::Status s = dst.ok() ? (*client)->wait(*dst) : dst.status();
    double sec = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!s.ok()) {
      std::fprintf(stderr, "cluster_bench: copy to n2/cpu:0: %s\n", s.to_string().c_str());
      return 1;
    }
    if (i > 0) secs.push_back(sec);
    (void)(*client)->release(*dst);
  }
  double s = median(secs);
  std::printf("{\"path\": \"tensord copy n1/cpu:0 -> n2/cpu:0\", \"bytes\": %zu, \"median_s\": %.6f, \"GBps\": %.3f}\n",
              bytes, s, static_cast<double>(bytes) / s / 1e9);
  return 0;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int data_parallel(const std::string& address, const std::string& model, int64_t batch,
                  const std::vector<std::string>& devices, int iterations) {
  auto fail = [](const std::string& what, const tensord::Status& s) {
    std::fprintf(stderr, "cluster_bench: %s: %s\n", what.c_str(), s.to_string().c_str());
    return 1;
  };
  auto client = tensord::connect(address);
  if (!client.ok()) return fail("connect", client.status());
  auto& c = **client;
  const int64_t k = static_cast<int64_t>(devices.size());
  if (k < 1 || batch % k != 0) {
    std::fprintf(stderr, "cluster_bench: --batch %lld must split evenly over %lld devices\n",
                 static_cast<long long>(batch), static_cast<long long>(k));
    return 2;
  }
  auto x = tensord::models::sample_input(model, batch);
  auto whole = tensord::models::build_model(model, batch);
  auto part = tensord::models::build_model(model, batch / k);
  if (!x.ok() || !whole.ok() || !part.ok()) return fail("model", x.ok() ? whole.status() : x.status());
  // One device, the whole batch.
  auto m1 = c.load(*whole, devices[0]);
  if (!m1.ok()) return fail("load", m1.status());
  std::vector<double> one, many;
  tensord::HostTensor ref, got;
  for (int i = 0; i < iterations + 1; ++i) {
    auto t0 = Clock::now();
    auto h = c.upload(x->view(), devices[0]);
    if (!h.ok()) return fail("upload", h.status());
    auto out = c.run(*m1, {*h});
    if (!out.ok()) return fail("run", out.status());
    auto r = c.read((*out)[0]);
    if (!r.ok()) return fail("read", r.status());
    if (i > 0) one.push_back(seconds_since(t0));
    ref = std::move(*r);
    (void)c.release(*h);
    for (auto o : *out) (void)c.release(o);
  }
  // Data parallel: one part a device, all in flight, gathered in order.
  std::vector<tensord::ModelHandle> models;
  for (const auto& d : devices) {
    auto m = c.load(*part, d);
    if (!m.ok()) return fail("load on " + d, m.status());
    models.push_back(*m);
  }
  const size_t in_part = static_cast<size_t>(x->nbytes() / k);
  for (int i = 0; i < iterations + 1; ++i) {
    auto t0 = Clock::now();
    std::vector<tensord::TensorHandle> outs, ins;
    for (int64_t p = 0; p < k; ++p) {
      tensord::Shape shape = x->shape();
      shape[0] = batch / k;
      tensord::TensorView v{x->dtype(), shape, static_cast<const char*>(x->data()) + p * in_part};
      auto h = c.upload(v, devices[static_cast<size_t>(p)]);
      if (!h.ok()) return fail("upload", h.status());
      ins.push_back(*h);
      auto out = c.run(models[static_cast<size_t>(p)], {*h});
      if (!out.ok()) return fail("run on " + devices[static_cast<size_t>(p)], out.status());
      outs.push_back((*out)[0]);
    }
    got = tensord::HostTensor(ref.dtype(), ref.shape());
    size_t at = 0;
    for (auto o : outs) {
      auto r = c.read(o);
      if (!r.ok()) return fail("read", r.status());
      std::memcpy(static_cast<char*>(got.mutable_data()) + at, r->data(), static_cast<size_t>(r->nbytes()));
      at += static_cast<size_t>(r->nbytes());
    }
    if (i > 0) many.push_back(seconds_since(t0));
    for (auto h : ins) (void)c.release(h);
    for (auto h : outs) (void)c.release(h);
  }
  double max_diff = 0;
  for (int64_t i = 0; i < ref.numel(); ++i)
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(ref.data<float>()[i] - got.data<float>()[i])));
  std::string list;
  for (const auto& d : devices) list += (list.empty() ? "" : ",") + d;
  std::printf("{\"model\": \"%s\", \"batch\": %lld, \"one_device\": \"%s\", \"one_median_s\": %.4f, "
              "\"devices\": \"%s\", \"parallel_median_s\": %.4f, \"max_abs_diff\": %.3g}\n",
              model.c_str(), static_cast<long long>(batch), devices[0].c_str(), median(one),
              list.c_str(), median(many), max_diff);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = size_t{64} << 20;
  int iterations = 20;
  std::string address;
  bool bare_mode = false;
  std::string dp_model, device_list = "cpu:0,n1/cpu:0,n2/cpu:0";
  int64_t batch = 24;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--bare") bare_mode = true;
    else if (a == "--address" && i + 1 < argc) address = argv[++i];
    else if (a == "--iterations" && i + 1 < argc) iterations = std::max(1, std::atoi(argv[++i]));
    else if (a == "--bytes" && i + 1 < argc) bytes = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--dp" && i + 1 < argc) dp_model = argv[++i];
    else if (a == "--batch" && i + 1 < argc) batch = std::atoll(argv[++i]);
    else if (a == "--devices" && i + 1 < argc) device_list = argv[++i];
    else {
      std::fprintf(stderr, "usage: cluster_bench --bare | --address ADDR [--iterations N] "
                           "[--bytes B] [--dp MODEL --batch N --devices A,B,C]\n");
      return 2;
    }
  }
  if (bare_mode) return bare(bytes, iterations);
  if (address.empty()) {
    std::fprintf(stderr, "cluster_bench: give --bare (under mpirun) or --address ADDR\n");
    return 2;
  }
  if (!dp_model.empty()) {
    std::vector<std::string> devices;
    std::string cur;
    for (char ch : device_list + ",") {
      if (ch == ',') { if (!cur.empty()) devices.push_back(cur); cur.clear(); }
      else cur += ch;
    }
    return data_parallel(address, dp_model, batch, devices, iterations);
  }
  return through_tensord(address, bytes, iterations);
}
