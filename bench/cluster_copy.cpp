// 64 MiB between two ranks: through tensord (a client copying n1/cpu:0 -> n2/cpu:0 on a
// cluster's front) against a bare MPI_Send/MPI_Recv of the same size between the same ranks.
//
//   mpirun --allow-run-as-root --oversubscribe -np 3 build/bench/cluster_copy --bare
//   mpirun ... -np 3 build/tensord serve --cluster --listen 127.0.0.1:7000 &
//   build/bench/cluster_copy --address 127.0.0.1:7000
//
// Each prints the median of --iterations copies in GB/s (one JSON line).
#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

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
    if (rank == 0) std::fprintf(stderr, "cluster_copy --bare: run with mpirun -np 3\n");
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
    std::fprintf(stderr, "cluster_copy: %s\n", client.status().to_string().c_str());
    return 1;
  }
  tensord::HostTensor t(tensord::DType::kUInt8, {static_cast<int64_t>(bytes)});
  std::memset(t.mutable_data(), 7, bytes);
  auto src = (*client)->upload(t.view(), "n1/cpu:0");
  if (!src.ok()) {
    std::fprintf(stderr, "cluster_copy: upload to n1/cpu:0: %s\n", src.status().to_string().c_str());
    return 1;
  }
  std::vector<double> secs;
  for (int i = 0; i < iterations + 1; ++i) {
    auto t0 = Clock::now();
    auto dst = (*client)->copy(*src, "n2/cpu:0");
    tensord::Status s = dst.ok() ? (*client)->wait(*dst) : dst.status();
    double sec = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!s.ok()) {
      std::fprintf(stderr, "cluster_copy: copy to n2/cpu:0: %s\n", s.to_string().c_str());
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

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = size_t{64} << 20;
  int iterations = 20;
  std::string address;
  bool bare_mode = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--bare") bare_mode = true;
    else if (a == "--address" && i + 1 < argc) address = argv[++i];
    else if (a == "--iterations" && i + 1 < argc) iterations = std::max(1, std::atoi(argv[++i]));
    else if (a == "--bytes" && i + 1 < argc) bytes = std::strtoull(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr, "usage: cluster_copy --bare | --address ADDR [--iterations N] [--bytes B]\n");
      return 2;
    }
  }
  if (bare_mode) return bare(bytes, iterations);
  if (address.empty()) {
    std::fprintf(stderr, "cluster_copy: give --bare (under mpirun) or --address ADDR\n");
    return 2;
  }
  return through_tensord(address, bytes, iterations);
}
