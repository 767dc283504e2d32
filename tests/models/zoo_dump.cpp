// zoo_dump: writes a zoo model's weights, sample input and reference output as .npy files, for
// comparison with the framework the model reproduces (tests/models/test_zoo_vs_torch.py).
//
// usage: zoo_dump MODEL OUTDIR [--batch N] [--no-run] [--stats]
//   OUTDIR/weights.txt     one initializer name per line: the parameters and the
//                          BatchNormalization running statistics (a torch state_dict's entries)
//   OUTDIR/<name>.npy      each of those
//   OUTDIR/input.npy       sample_input(MODEL, N)
//   OUTDIR/output.npy      the graph's output on the cpu reference kernels (unless --no-run)
//   --stats                prints RMS and max |x| of every node's output (weight-scale tuning)
// Prints one summary line: model, batch, parameter count, nodes, run time.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "engine/executor.h"
#include "core/npy.h"
#include "models/zoo.h"

namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "zoo_dump: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tensord;
  if (argc < 3) return fail("usage: zoo_dump MODEL OUTDIR [--batch N] [--no-run] [--stats]");
  const std::string model = argv[1];
  const std::filesystem::path out_dir = argv[2];
  int64_t batch = 1;
  bool run = true;
  bool stats = false;
  for (int i = 3; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--batch" && i + 1 < argc) {
      batch = std::strtoll(argv[++i], nullptr, 10);
    } else if (arg == "--no-run") {
      run = false;
    } else if (arg == "--stats") {
      stats = true;
    } else {
      return fail("unknown argument '" + arg + "'");
    }
  }
  Result<Graph> graph = models::build_model(model, batch);
  if (!graph.ok()) return fail(graph.status().to_string());
  Result<HostTensor> input = models::sample_input(model, batch);
  if (!input.ok()) return fail(input.status().to_string());

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return fail("cannot create '" + out_dir.string() + "': " + ec.message());

  // The state a framework would hold: parameters plus BatchNormalization running statistics.
  std::set<std::string> weights;
  for (const Node& node : graph->nodes) {
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const std::string& v = node.inputs[i];
      if (!graph->initializers.count(v)) continue;
      const bool data_input = (node.op != "Gather" && i == 0) || (node.op == "Gather" && i == 1);
      const bool constant = node.op == "Clip" || node.op == "Squeeze";
      if (!data_input && !constant) weights.insert(v);
    }
  }
  std::ofstream list(out_dir / "weights.txt");
  for (const std::string& name : weights) {
    list << name << "\n";
    Status s = write_npy((out_dir / (name + ".npy")).string(), graph->initializers.at(name));
    if (!s.ok()) return fail(s.to_string());
  }
  Status s = write_npy((out_dir / "input.npy").string(), *input);
  if (!s.ok()) return fail(s.to_string());

  double run_ms = 0.0;
  if (run) {
    Graph g = *graph;
    if (stats) {
      for (const Node& node : g.nodes)
        if (node.outputs[0] != "output" && !node.outputs.empty() && !node.outputs[0].empty())
          g.outputs.push_back({node.outputs[0], {}});
    }
    const auto start = std::chrono::steady_clock::now();
    auto outputs = run_graph_on_host(g, {*input});
    run_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!outputs.ok()) return fail(outputs.status().to_string());
    for (size_t i = 0; i < outputs->size(); ++i) {
      const auto& out = (*outputs)[i];
      if (!out.ok()) return fail(g.outputs[i].name + ": " + out.status().to_string());
      if (stats) {
        double sum2 = 0.0, max_abs = 0.0;
        const std::vector<double> v = out->to_double_vector();
        for (double x : v) {
          sum2 += x * x;
          max_abs = std::max(max_abs, std::fabs(x));
        }
        std::printf("%-36s %-20s rms %10.4g  max %10.4g\n", g.outputs[i].name.c_str(),
                    shape_to_string(out->shape()).c_str(),
                    v.empty() ? 0.0 : std::sqrt(sum2 / static_cast<double>(v.size())), max_abs);
      }
    }
    s = write_npy((out_dir / "output.npy").string(), *(*outputs)[0]);
    if (!s.ok()) return fail(s.to_string());
  }
  std::printf(
      "{\"model\": \"%s\", \"batch\": %lld, \"parameters\": %lld, \"nodes\": %zu, "
      "\"run_ms\": %.1f}\n",
      model.c_str(), static_cast<long long>(batch),
      static_cast<long long>(models::parameter_count(*graph)), graph->nodes.size(), run_ms);
  return 0;
}
