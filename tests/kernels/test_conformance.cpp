// The harness of the per-op tests (op_test_util.h): every device present runs every op, each is
// compared with the reference-kernels oracle and checked against the test's expectations, and
// a failure names the device.
#include <gtest/gtest-spi.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/executor.h"  // only to tell the cpu's two compile modes apart
#include "kernels/op_test_util.h"

namespace tensord::testing {
namespace {

GraphOutputs values(std::vector<HostTensor> ts) {
  std::vector<Result<HostTensor>> out;
  for (auto& t : ts) out.emplace_back(std::move(t));
  return out;
}

TEST(Conformance, EveryEnumeratedDeviceRunsEveryOp) {
  const auto& names = clients().names;
  ASSERT_FALSE(names.empty());
  const char* n = std::getenv("TENSORD_CPU_DEVICES");
  const char* filter = std::getenv("TENSORD_DEVICES");
  if (!(filter && *filter)) EXPECT_EQ(names.front(), "cpu:0");
  if (n && std::string(n) == "2" && !(filter && *filter)) {
    // The ctest's setting: a second device is always under test (other kinds follow them).
    std::vector<std::string> cpus;
    for (const auto& name : names)
      if (name.rfind("cpu:", 0) == 0) cpus.push_back(name);
    EXPECT_EQ(cpus, (std::vector<std::string>{"cpu:0", "cpu:1"}));
  }
  EXPECT_TRUE(tensors_near(run1("Add", {F32({1, 2}, {2}), F32({3, 4}, {2})}), F32({4, 6}, {2})));
  const RunRecord& rec = recent_runs().front();
  EXPECT_EQ(rec.what, "op Add");
  ASSERT_EQ(rec.devices.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(rec.devices[i].first, names[i]);
    ASSERT_TRUE(rec.devices[i].second.ok()) << names[i];
    ASSERT_TRUE((*rec.devices[i].second)[0].ok()) << names[i];
    EXPECT_TRUE(tensors_near_here(*(*rec.devices[i].second)[0], F32({4, 6}, {2}))) << names[i];
  }
}

TEST(Conformance, DisagreementWithTheOracleNamesTheDevice) {
  const auto want = values({F32({1, 2}, {2})});
  EXPECT_NONFATAL_FAILURE(
      check_agrees("op Foo", "gpu:3", values({F32({1, 2.5f}, {2})}), want, true),
      "op Foo on gpu:3: output 0: element 1 is 2.5");
  EXPECT_NONFATAL_FAILURE(check_agrees("op Foo", "gpu:3", values({F64({1, 2}, {2})}), want, true),
                          "op Foo on gpu:3: output 0: dtype float64");
  EXPECT_NONFATAL_FAILURE(
      check_agrees("op Foo", "gpu:3", values({F32({1, 2}, {1, 2})}), want, true),
      "op Foo on gpu:3: output 0: shape [1, 2]");
  EXPECT_NONFATAL_FAILURE(
      check_agrees("op Foo", "gpu:3", GraphOutputs(errors::Unimplemented("no kernel")), want, true),
      "op Foo on gpu:3: failed: UNIMPLEMENTED");
  EXPECT_NONFATAL_FAILURE(
      check_agrees("op Foo", "gpu:3", want, GraphOutputs(errors::InvalidArgument("bad")), true),
      "op Foo on gpu:3: ran, but the reference kernels refuse it");
  EXPECT_NONFATAL_FAILURE(check_agrees("op Foo", "gpu:3", GraphOutputs(errors::Internal("x")),
                                       GraphOutputs(errors::InvalidArgument("bad")), true),
                          "op Foo on gpu:3: INTERNAL");
  // Rounding is not a disagreement; random ops are compared by dtype and shape only.
  check_agrees("op Foo", "gpu:3", values({F32({1, 2.0000001f}, {2})}), want, true);
  check_agrees("op Foo", "gpu:3", values({F32({7, 8}, {2})}), want, false);
  EXPECT_NONFATAL_FAILURE(check_agrees("op Foo", "gpu:3", values({F32({7}, {1})}), want, false),
                          "shape [1]");
}

TEST(Conformance, ExpectationsAreCheckedOnEveryDevice) {
  // A device whose output meets the oracle's rounding but not the test's tolerance.
  HostTensor y = run1("Add", {F32({1, 2}, {2}), F32({3, 4}, {2})});
  ASSERT_FALSE(recent_runs().front().devices.empty());
  recent_runs().front().devices.back().second = values({F32({4, 6.0001f}, {2})});
  const std::string device = recent_runs().front().devices.back().first;
  auto r = tensors_near(y, F32({4, 6}, {2}));
  EXPECT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("op Add on " + device + ": element 1"), std::string::npos)
      << r.message();
  EXPECT_TRUE(tensors_near(y, F32({4, 6}, {2}), 1e-3));

  // An error whose message lacks what the test asks for, on one device.
  auto bad = run_op("Flatten", {F32({1, 2}, {2})}, {{"axis", 4}});
  EXPECT_TRUE(fails(bad, {"Flatten", "axis 4"}));
  recent_runs().front().devices.back().second = GraphOutputs(errors::InvalidArgument("no"));
  auto f = fails(bad, {"Flatten", "axis 4"});
  EXPECT_FALSE(f);
  EXPECT_NE(std::string(f.message()).find("op Flatten on " + device + ": message 'no'"),
            std::string::npos)
      << f.message();
}

// The oracle is the cpu reference kernels (LocalClientOptions::reference_kernels), and the
// devices run what users get (fast kernels: oneDNN for a Conv on the cpu): bit for bit the
// cpu backend's two compile modes.
TEST(Conformance, OracleIsTheReferenceKernelsAndDevicesRunTheFastOnes) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  auto random = [&](Shape s) {
    HostTensor t(DType::kFloat32, std::move(s));
    for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = dist(rng);
    return t;
  };
  const std::vector<HostTensor> in = {random({1, 8, 16, 16}), random({16, 8, 3, 3})};
  Graph g;
  g.inputs = {{"x", in[0].type()}, {"w", in[1].type()}};
  g.nodes.push_back(
      Node{"c", "Conv", "", {"x", "w"}, {"y"}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}});
  g.outputs = {{"y", {}}};
  auto same_bits = [](const Result<HostTensor>& a, const Result<HostTensor>& b) {
    return a.ok() && b.ok() && a->nbytes() == b->nbytes() &&
           std::memcmp(a->data(), b->data(), a->nbytes()) == 0;
  };
  auto ref = run_graph_on_host(g, in, CompileOptions{/*fuse=*/false});
  auto fast = run_graph_on_host(g, in, CompileOptions{/*fuse=*/true});
  ASSERT_TRUE(ref.ok() && fast.ok());
  auto outs = run_graph(g, in);
  ASSERT_TRUE(outs.ok()) << outs.status().to_string();
  EXPECT_TRUE(same_bits((*outs)[0], (*ref)[0])) << "the oracle is not the reference kernels";
  const RunRecord& rec = recent_runs().front();
  ASSERT_FALSE(rec.devices.empty());
  ASSERT_EQ(rec.devices[0].first, clients().names[0]);
  if (rec.devices[0].first == "cpu:0") {
    ASSERT_TRUE(rec.devices[0].second.ok());
    EXPECT_TRUE(same_bits((*rec.devices[0].second)[0], (*fast)[0]))
        << "cpu:0 under test does not run the fast kernels";
  }
  if (same_bits((*fast)[0], (*ref)[0]))
    GTEST_SKIP() << "oneDNN and the reference Conv agree bit for bit here: the modes look alike";
}

}  // namespace
}  // namespace tensord::testing
