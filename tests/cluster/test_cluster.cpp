// The cluster on MPI (src/cluster): a real `mpirun -np 3 tensord serve --cluster` and the C++
// client against its front (rank 0). Skips when mpirun is absent (fails under CI=true).
// The tests run in file order and share one cluster; the last one kills rank 2.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "models/zoo.h"
#include "tensord/client.h"

namespace tensord {
namespace {

using namespace std::chrono_literals;
constexpr int kTimeoutMs = 5000;  // --cluster-timeout-ms: ctest runs tests in parallel; at a load of 10 on 2 cores a rank compiling MobileNetV2 missed a 2.5 s heartbeat once

std::string find_mpirun() {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    std::string p = dir + "/mpirun";
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return {};
}

bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

// `mpirun ... -np 3 tensord serve --cluster`, in its own process group.
struct Cluster {
  pid_t pid = -1;
  int out = -1;
  std::string address;
  std::string skip;   // why the tests skip
  std::string error;  // why the cluster did not start

  void start() {
    std::string mpirun = find_mpirun();
    if (mpirun.empty()) {
      skip = "mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev)";
      return;
    }
    int fds[2];
    if (pipe(fds) != 0) { error = "pipe failed"; return; }
    pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      dup2(fds[1], 1);
      close(fds[0]);
      close(fds[1]);
      setenv("TENSORD_CPU_DEVICES", "1", 1);
      setenv("TENSORD_OPENCL", "0", 1);
      setenv("OMPI_MCA_btl", "self,vader,tcp", 0);  // no warnings about missing fabrics
      setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);  // containers lack CMA
      std::string timeout = std::to_string(kTimeoutMs);
      const char* argv[] = {mpirun.c_str(), "--allow-run-as-root", "--oversubscribe",
                            "--enable-recovery", "-np", "3", TENSORD_CLI_PATH, "serve",
                            "--cluster", "--listen", "127.0.0.1:0", "--cluster-timeout-ms",
                            timeout.c_str(), nullptr};
      execv(argv[0], const_cast<char**>(argv));
      _exit(127);
    }
    setpgid(pid, pid);
    close(fds[1]);
    out = fds[0];
    // Wait for "tensord serving on ADDR".
    std::string buf;
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    fcntl(out, F_SETFL, O_NONBLOCK);
    while (std::chrono::steady_clock::now() < deadline) {
      char c[4096];
      ssize_t n = read(out, c, sizeof c);
      if (n > 0) {
        buf.append(c, static_cast<size_t>(n));
        auto at = buf.find("tensord serving on ");
        if (at != std::string::npos) {
          auto end = buf.find('\n', at);
          if (end != std::string::npos) {
            address = buf.substr(at + 19, end - at - 19);
            return;
          }
        }
      } else if (n == 0) {
        break;
      } else {
        std::this_thread::sleep_for(20ms);
      }
    }
    error = "the cluster did not print its ready line; output: " + buf;
  }

  // The pid of MPI rank `rank` (a child of mpirun with OMPI_COMM_WORLD_RANK=rank).
  pid_t rank_pid(int rank) const {
    DIR* d = opendir("/proc");
    pid_t found = -1;
    while (dirent* e = readdir(d)) {
      pid_t p = static_cast<pid_t>(std::atoi(e->d_name));
      if (p <= 0) continue;
      std::ifstream stat("/proc/" + std::string(e->d_name) + "/stat");
      std::string line;
      std::getline(stat, line);
      auto rp = line.rfind(')');
      if (rp == std::string::npos) continue;
      std::istringstream rest(line.substr(rp + 2));
      char state;
      pid_t ppid = 0;
      rest >> state >> ppid;
      if (ppid != pid) continue;
      std::ifstream env("/proc/" + std::string(e->d_name) + "/environ", std::ios::binary);
      std::string all((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
      if (all.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos) {
        found = p;
        break;
      }
    }
    closedir(d);
    return found;
  }

  void stop() {
    if (pid <= 0) return;
    kill(-pid, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) { pid = -1; break; }
      std::this_thread::sleep_for(50ms);
    }
    if (pid > 0) {
      kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      pid = -1;
    }
    if (out >= 0) close(out);
  }
};

Cluster* g_cluster = nullptr;

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_cluster = new Cluster();
    g_cluster->start();
  }
  static void TearDownTestSuite() {
    g_cluster->stop();
    delete g_cluster;
    g_cluster = nullptr;
  }
  void SetUp() override {
    if (!g_cluster->skip.empty()) {
      if (in_ci()) FAIL() << "CI=true but " << g_cluster->skip;
      GTEST_SKIP() << g_cluster->skip;
    }
    ASSERT_TRUE(g_cluster->error.empty()) << g_cluster->error;
    auto c = connect(g_cluster->address);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    client = std::move(*c);
  }
  std::unique_ptr<Client> client;
};

HostTensor random_floats(Shape shape, uint32_t seed) {
  HostTensor t(DType::kFloat32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  return t;
}

bool same_bytes(const HostTensor& a, const HostTensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), static_cast<size_t>(a.nbytes())) == 0;
}

// y = Relu(MatMul(x, w) + b) * x2: several ops, one of them a contraction.
Graph small_graph() {
  Graph g;
  g.name = "cluster_test";
  g.inputs = {{"x", {DType::kFloat32, {4, 8}}}, {"w", {DType::kFloat32, {8, 8}}},
              {"b", {DType::kFloat32, {8}}}};
  g.nodes.push_back(Node{"mm", "MatMul", "", {"x", "w"}, {"m"}, {}});
  g.nodes.push_back(Node{"add", "Add", "", {"m", "b"}, {"a"}, {}});
  g.nodes.push_back(Node{"relu", "Relu", "", {"a"}, {"r"}, {}});
  g.nodes.push_back(Node{"sq", "Mul", "", {"r", "r"}, {"y"}, {}});
  g.outputs = {{"y", {}}, {"m", {}}};
  return g;
}

void expect_near(const HostTensor& got, const HostTensor& want, float tol = 1e-4f) {
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  const float* g = got.data<float>();
  const float* w = want.data<float>();
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_NEAR(g[i], w[i], tol * (1 + std::fabs(w[i]))) << "element " << i;
}

TEST_F(ClusterTest, DevicesOfEveryRankAreListed) {
  auto devices = client->devices();
  ASSERT_TRUE(devices.ok()) << devices.status().to_string();
  std::vector<std::string> names;
  for (const auto& d : *devices) names.push_back(d.name);
  for (const char* want : {"cpu:0", "n1/cpu:0", "n2/cpu:0"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  // `tensord devices --address` through the front.
  std::string cmd = std::string(TENSORD_CLI_PATH) + " devices --address " + g_cluster->address;
  FILE* f = popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string text;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, f)) text.append(buf, n);
  EXPECT_EQ(pclose(f), 0) << text;
  EXPECT_NE(text.find("n1/cpu:0"), std::string::npos) << text;
  EXPECT_NE(text.find("n2/cpu:0"), std::string::npos) << text;
}

TEST_F(ClusterTest, TensorRoundTripsThroughEveryRank) {
  // 20 MiB + a few bytes: several MPI chunks, an odd tail.
  HostTensor big(DType::kUInt8, {20 * 1024 * 1024 + 13});
  std::mt19937 rng(7);
  for (int64_t i = 0; i < big.numel(); ++i) big.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  for (const HostTensor& t : {big, random_floats({3, 5, 7}, 1)}) {
    auto h1 = client->upload(t.view(), "n1/cpu:0");
    ASSERT_TRUE(h1.ok()) << h1.status().to_string();
    auto info = client->info(*h1);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->device, "n1/cpu:0");
    auto back = client->read(*h1);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_TRUE(same_bytes(*back, t)) << "n1/cpu:0";
    // n1 -> n2 -> n0 (rank 0's own cpu:0 under its cluster name) -> host.
    auto h2 = client->copy(*h1, "n2/cpu:0");
    ASSERT_TRUE(h2.ok()) << h2.status().to_string();
    back = client->read(*h2);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_TRUE(same_bytes(*back, t)) << "n2/cpu:0";
    auto h0 = client->copy(*h2, "n0/cpu:0");
    ASSERT_TRUE(h0.ok()) << h0.status().to_string();
    back = client->read(*h0);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_TRUE(same_bytes(*back, t)) << "n0/cpu:0";
    for (auto h : {*h0, *h1, *h2}) EXPECT_TRUE(client->release(h).ok());
  }
}

TEST_F(ClusterTest, GraphOnARemoteRankGivesTheReferenceOutputs) {
  HostTensor x = random_floats({4, 8}, 2), w = random_floats({8, 8}, 3), b = random_floats({8}, 4);
  auto run_on = [&](const std::string& device) -> std::vector<HostTensor> {
    std::vector<TensorHandle> in;
    for (const HostTensor* t : {&x, &w, &b}) {
      auto h = client->upload(t->view(), device);
      EXPECT_TRUE(h.ok()) << h.status().to_string();
      in.push_back(*h);
    }
    auto outs = client->execute(small_graph(), in, device);
    EXPECT_TRUE(outs.ok()) << outs.status().to_string();
    std::vector<HostTensor> res;
    for (auto h : *outs) {
      auto info = client->info(h);
      EXPECT_TRUE(info.ok());
      EXPECT_EQ(info->device, device);
      auto r = client->read(h);
      EXPECT_TRUE(r.ok()) << r.status().to_string();
      res.push_back(*r);
    }
    return res;
  };
  auto want = run_on("cpu:0");
  for (const char* device : {"n1/cpu:0", "n2/cpu:0"}) {
    auto got = run_on(device);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) expect_near(got[i], want[i]);
  }
}

TEST_F(ClusterTest, GraphAcrossTwoRanksGivesTheReferenceOutputs) {
  HostTensor x = random_floats({4, 8}, 5), w = random_floats({8, 8}, 6), b = random_floats({8}, 7);
  std::vector<TensorHandle> local;
  for (const HostTensor* t : {&x, &w, &b}) local.push_back(*client->upload(t->view(), "cpu:0"));
  auto want = client->execute(small_graph(), local, "cpu:0");
  ASSERT_TRUE(want.ok());
  auto want_y = client->read((*want)[0]);
  ASSERT_TRUE(want_y.ok());
  // Inputs on n1 and n2; the graph runs on n1, the n2 input is moved there.
  auto hx = client->upload(x.view(), "n1/cpu:0");
  auto hw = client->upload(w.view(), "n2/cpu:0");
  auto hb = client->upload(b.view(), "n2/cpu:0");
  ASSERT_TRUE(hx.ok() && hw.ok() && hb.ok());
  auto outs = client->execute(small_graph(), {*hx, *hw, *hb}, "n1/cpu:0");
  ASSERT_TRUE(outs.ok()) << outs.status().to_string();
  auto y = client->read((*outs)[0]);
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  expect_near(*y, *want_y);
  // A chain across ranks: the first part on n1, its result fed to a graph on n2.
  Graph relu;
  relu.inputs = {{"m", {DType::kFloat32, {4, 8}}}};
  relu.nodes.push_back(Node{"neg", "Neg", "", {"m"}, {"n"}, {}});
  relu.nodes.push_back(Node{"abs", "Abs", "", {"n"}, {"z"}, {}});
  relu.outputs = {{"z", {}}};
  auto z = client->execute(relu, {(*outs)[0]}, "n2/cpu:0");
  ASSERT_TRUE(z.ok()) << z.status().to_string();
  auto zi = client->info((*z)[0]);
  ASSERT_TRUE(zi.ok());
  EXPECT_EQ(zi->device, "n2/cpu:0");
  auto zv = client->read((*z)[0]);
  ASSERT_TRUE(zv.ok()) << zv.status().to_string();
  expect_near(*zv, *want_y);  // y >= 0, so |-y| == y
}

// Data parallel by the client: MobileNetV2, batch 3 split one image a rank, all three parts
// in flight at once, gathered; matches the whole batch on rank 0's cpu:0.
TEST_F(ClusterTest, ModelRunsDataParallelOnThreeRanks) {
  const int64_t batch = 3;
  auto x = models::sample_input("mobilenet_v2", batch);
  auto whole = models::build_model("mobilenet_v2", batch);
  auto part = models::build_model("mobilenet_v2", 1);
  ASSERT_TRUE(x.ok() && whole.ok() && part.ok());
  auto m = client->load(*whole, "cpu:0");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto hx = client->upload(x->view(), "cpu:0");
  ASSERT_TRUE(hx.ok());
  auto ref_out = client->run(*m, {*hx});
  ASSERT_TRUE(ref_out.ok()) << ref_out.status().to_string();
  auto ref = client->read((*ref_out)[0]);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();

  const std::vector<std::string> devices = {"n0/cpu:0", "n1/cpu:0", "n2/cpu:0"};
  std::vector<TensorHandle> outs;
  const size_t in_part = static_cast<size_t>(x->nbytes() / batch);
  for (size_t p = 0; p < devices.size(); ++p) {
    auto mp = client->load(*part, devices[p]);
    ASSERT_TRUE(mp.ok()) << devices[p] << ": " << mp.status().to_string();
    Shape shape = x->shape();
    shape[0] = 1;
    TensorView v{x->dtype(), shape, static_cast<const char*>(x->data()) + p * in_part};
    auto h = client->upload(v, devices[p]);
    ASSERT_TRUE(h.ok()) << devices[p] << ": " << h.status().to_string();
    auto out = client->run(*mp, {*h});
    ASSERT_TRUE(out.ok()) << devices[p] << ": " << out.status().to_string();
    outs.push_back((*out)[0]);
  }
  const int64_t per = ref->numel() / batch;
  for (size_t p = 0; p < outs.size(); ++p) {
    auto got = client->read(outs[p]);
    ASSERT_TRUE(got.ok()) << devices[p] << ": " << got.status().to_string();
    ASSERT_EQ(got->numel(), per);
    for (int64_t i = 0; i < per; ++i)
      ASSERT_NEAR(got->data<float>()[i], ref->data<float>()[static_cast<int64_t>(p) * per + i], 1e-4)
          << devices[p] << " element " << i;
  }
}

// Data parallel through the client API (Client::run_data_parallel): one MobileNetV2 model
// handle, a batch of 4 split 2 + 1 + 1 over rank 0, n1 and n2 and gathered on cpu:0; equals
// the whole batch on cpu:0.
TEST_F(ClusterTest, RunDataParallelOverThreeRanksEqualsOneDevice) {
  const int64_t batch = 4;
  auto x = models::sample_input("mobilenet_v2", batch);
  auto graph = models::build_model("mobilenet_v2", batch);
  ASSERT_TRUE(x.ok() && graph.ok());
  auto m = client->load(*graph, "cpu:0");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto hx = client->upload(x->view(), "cpu:0");
  ASSERT_TRUE(hx.ok()) << hx.status().to_string();
  auto ref_out = client->run(*m, {*hx});
  ASSERT_TRUE(ref_out.ok()) << ref_out.status().to_string();
  auto ref = client->read((*ref_out)[0]);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  auto out = client->run_data_parallel(*m, {*hx}, {"cpu:0", "n1/cpu:0", "n2/cpu:0"});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_EQ(out->size(), 1u);
  auto info = client->info((*out)[0]);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->device, "cpu:0");
  auto got = client->read((*out)[0]);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  expect_near(*got, *ref);
  // More devices than examples: refused, naming both.
  auto one = client->upload(models::sample_input("mobilenet_v2", 2)->view(), "cpu:0");
  ASSERT_TRUE(one.ok());
  auto few = client->run_data_parallel(*m, {*one}, {"cpu:0", "n1/cpu:0", "n2/cpu:0"});
  ASSERT_FALSE(few.ok());
  EXPECT_EQ(few.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(few.status().message().find("batch of 2 cannot be split over 3"), std::string::npos)
      << few.status().to_string();
}

// allreduce / allgather / broadcast across the ranks (the data moves rank to rank over MPI),
// against the same numbers computed here.
TEST_F(ClusterTest, CollectivesAcrossRanksMatchTheHost) {
  const std::vector<std::string> devices = {"cpu:0", "n1/cpu:0", "n2/cpu:0"};
  // 3 x 512 x 1024 floats (6 MiB each): several MPI chunks between ranks.
  const Shape shape{3, 512, 1024};
  std::vector<HostTensor> host;
  std::vector<TensorHandle> on;
  for (size_t i = 0; i < devices.size(); ++i) {
    host.push_back(random_floats(shape, 100 + static_cast<uint32_t>(i)));
    auto h = client->upload(host.back().view(), devices[i]);
    ASSERT_TRUE(h.ok()) << devices[i] << ": " << h.status().to_string();
    on.push_back(*h);
  }
  const int64_t n = host[0].numel();
  HostTensor sum(DType::kFloat32, shape), mx(DType::kFloat32, shape);
  for (int64_t i = 0; i < n; ++i) {
    float s = 0, m = -INFINITY;
    for (const auto& t : host) {
      s += t.data<float>()[i];
      m = std::max(m, t.data<float>()[i]);
    }
    sum.mutable_data<float>()[i] = s;
    mx.mutable_data<float>()[i] = m;
  }
  auto expect_each = [&](const Result<std::vector<TensorHandle>>& r, const HostTensor& want,
                         const std::vector<std::string>& where, bool exact) {
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_EQ(r->size(), where.size());
    for (size_t i = 0; i < where.size(); ++i) {
      auto info = client->info((*r)[i]);
      ASSERT_TRUE(info.ok());
      EXPECT_EQ(info->device, where[i]);
      auto got = client->read((*r)[i]);
      ASSERT_TRUE(got.ok()) << where[i] << ": " << got.status().to_string();
      if (exact) {
        EXPECT_TRUE(same_bytes(*got, want)) << where[i];
      } else {
        expect_near(*got, want, 1e-6f);
      }
      EXPECT_TRUE(client->release((*r)[i]).ok());
    }
  };
  expect_each(client->allreduce(on), sum, devices, false);
  expect_each(client->allreduce(on, ReduceOp::kMax), mx, devices, true);
  // allgather, starting from n2: the result on n2, n1 and rank 0, in that order.
  HostTensor cat(DType::kFloat32, {9, 512, 1024});
  const size_t each = host[0].nbytes();
  for (size_t i = 0; i < 3; ++i)
    std::memcpy(static_cast<char*>(cat.mutable_data()) + i * each, host[2 - i].data(), each);
  expect_each(client->allgather({on[2], on[1], on[0]}), cat, {"n2/cpu:0", "n1/cpu:0", "cpu:0"},
              true);
  // broadcast from n1 to every rank.
  expect_each(client->broadcast(on[1], {"n2/cpu:0", "cpu:0", "n1/cpu:0"}), host[1],
              {"n2/cpu:0", "cpu:0", "n1/cpu:0"}, true);
  for (auto h : on) EXPECT_TRUE(client->release(h).ok());
}

// Last: kills rank 2.
TEST_F(ClusterTest, KilledRankIsUnavailableAndTheOthersKeepServing) {
  pid_t victim = g_cluster->rank_pid(2);
  ASSERT_GT(victim, 0) << "rank 2's process not found";
  HostTensor t = random_floats({64}, 9);
  auto before = client->upload(t.view(), "n2/cpu:0");
  ASSERT_TRUE(before.ok()) << before.status().to_string();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const auto t0 = std::chrono::steady_clock::now();
  Status last;
  for (;;) {
    auto h = client->upload(t.view(), "n2/cpu:0");
    if (!h.ok()) { last = h.status(); break; }
    auto r = client->read(*h);
    if (!r.ok()) { last = r.status(); break; }
    ASSERT_LT(std::chrono::steady_clock::now() - t0, 4 * std::chrono::milliseconds(kTimeoutMs) + 5s)
        << "n2 still answers after it was killed";
    std::this_thread::sleep_for(50ms);
  }
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(last.code(), StatusCode::kUnavailable) << last.to_string();
  EXPECT_NE(last.message().find("n2"), std::string::npos) << last.to_string();
  EXPECT_LT(took, 2 * std::chrono::milliseconds(kTimeoutMs) + 3s);
  std::printf("[ info ] n2 UNAVAILABLE %.2f s after the kill: %s\n",
              std::chrono::duration<double>(took).count(), last.message().c_str());
  // The value that lived there is gone too (read fails, not hangs).
  auto gone = client->read(*before);
  EXPECT_FALSE(gone.ok());
  // n1 and rank 0 keep serving.
  for (const char* device : {"n1/cpu:0", "cpu:0"}) {
    auto h = client->upload(t.view(), device);
    ASSERT_TRUE(h.ok()) << device << ": " << h.status().to_string();
    auto r = client->read(*h);
    ASSERT_TRUE(r.ok()) << device << ": " << r.status().to_string();
    EXPECT_TRUE(same_bytes(*r, t)) << device;
  }
}

}  // namespace
}  // namespace tensord
