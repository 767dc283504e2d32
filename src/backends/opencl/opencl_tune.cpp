// `tensord tune` on an OpenCL device (opencl_backend.h: tune()).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <random>
#include <unordered_map>

#ifdef TENSORD_HAVE_CLBLAST
#include <clblast.h>
#endif

#include "backends/codegen/templates.h"
#include "backends/opencl/opencl_device.h"
#include "core/errors.h"

namespace tensord::opencl {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// n x n x n SGEMM buffers filled with values in [-1, 1] (and their host copies, to check).
struct GemmBench {
  OpenClDevice* d = nullptr;
  size_t n = 0;
  std::vector<float> ha, hb;
  cl_mem a = nullptr, b = nullptr, c = nullptr;
  ~GemmBench() {
    for (cl_mem m : {a, b, c})
      if (m) clReleaseMemObject(m);
  }
  Status init(OpenClDevice* dev, size_t size) {
    d = dev, n = size;
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    ha.resize(n * n), hb.resize(n * n);
    for (auto& v : ha) v = u(rng);
    for (auto& v : hb) v = u(rng);
    cl_int e = CL_SUCCESS;
    const size_t bytes = n * n * sizeof(float);
    a = clCreateBuffer(d->context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, ha.data(), &e);
    if (e == CL_SUCCESS) b = clCreateBuffer(d->context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, hb.data(), &e);
    if (e == CL_SUCCESS) c = clCreateBuffer(d->context(), CL_MEM_READ_WRITE, bytes, nullptr, &e);
    return e == CL_SUCCESS ? OkStatus() : cl_status(e, d->info().name, "allocating SGEMM buffers");
  }
  Status run() {
    GemmCall g;
    g.m = g.n = g.k = g.lda = g.ldb = g.ldc = n;
    g.a = a, g.b = b, g.c = c;
    g.a_off = g.b_off = g.c_off = {0};
    TD_RETURN_IF_ERROR(run_gemm(*d, g));
    const cl_int e = clFinish(d->queue());
    return e == CL_SUCCESS ? OkStatus() : cl_status(e, d->info().name, "running SGEMM");
  }
  // GFLOP/s: the best of `repeats` timed runs after one untimed (compiling) run.
  Result<double> gflops(int repeats) {
    TD_RETURN_IF_ERROR(run());
    double best = 1e30;
    for (int r = 0; r < std::max(repeats, 1); ++r) {
      const auto t = std::chrono::steady_clock::now();
      TD_RETURN_IF_ERROR(run());
      best = std::min(best, seconds_since(t));
    }
    return 2.0 * static_cast<double>(n) * n * n / best / 1e9;
  }
  // 64 entries of C against double-precision dot products on the host.
  Status check() {
    std::vector<float> hc(n * n);
    cl_int e = clEnqueueReadBuffer(d->queue(), c, CL_TRUE, 0, hc.size() * sizeof(float), hc.data(), 0, nullptr, nullptr);
    if (e != CL_SUCCESS) return cl_status(e, d->info().name, "reading SGEMM's result");
    std::mt19937 rng(7);
    for (int s = 0; s < 64; ++s) {
      const size_t i = rng() % n, j = rng() % n;
      double ref = 0, mag = 0;
      for (size_t k = 0; k < n; ++k) {
        ref += static_cast<double>(ha[i * n + k]) * hb[k * n + j];
        mag += std::abs(static_cast<double>(ha[i * n + k]) * hb[k * n + j]);
      }
      if (!(std::abs(hc[i * n + j] - ref) <= 1e-4 * mag + 1e-5))
        return errors::Internal("C[{}][{}] = {} where the host computes {}", i, j, hc[i * n + j], ref);
    }
    return OkStatus();
  }
};

}  // namespace

std::string tune_file(const std::string& platform, const std::string& model, const std::string& driver) {
  return tune_path(platform + "|" + model + "|" + driver).string();
}

Status tune(const TuneOptions& o, std::ostream& out) {
  const auto start = std::chrono::steady_clock::now();
  auto backend = create_opencl_backend();
  auto devices = backend->enumerate();
  OpenClDevice* d = nullptr;
  std::vector<std::string> names;
  for (auto& dev : devices) {
    names.push_back(dev->info().name);
    if (dev->info().name == o.device) d = dynamic_cast<OpenClDevice*>(dev.get());
  }
  if (!d)
    return errors::NotFound("tune: no device '{}' (OpenCL devices here: {})", o.device,
                            names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", ")));
  const auto file = tune_path(d->device_key());
  out << fmt::format("Tuning {} ({}, driver {}); budget {:.0f} s\n", d->info().name, d->info().model,
                     d->info().driver_version, o.budget_seconds);
  std::vector<std::string> lines = {"device " + d->device_key()};
  auto over = [&] { return seconds_since(start) > o.budget_seconds; };

#ifdef TENSORD_HAVE_CLBLAST
  if (!d->blas()) return errors::FailedPrecondition("tune: TENSORD_OPENCL_BLAS=0 turns CLBlast off");
  if (o.sizes.empty()) return errors::InvalidArgument("tune: no SGEMM sizes");
  using Params = std::unordered_map<std::string, size_t>;
  Params defaults;
  // The database's choice (not an earlier tuning: it is the baseline).
  clblast::ClearCache();
  if (clblast::RetrieveParameters(d->id(), "Xgemm", clblast::Precision::kSingle, defaults) !=
      clblast::StatusCode::kSuccess)
    return errors::Internal("tune: CLBlast has no Xgemm parameters for {}", d->info().name);
  std::map<int64_t, double> before, after;
  for (int64_t n : o.sizes) {
    GemmBench b;
    TD_RETURN_IF_ERROR(b.init(d, static_cast<size_t>(n)));
    TD_ASSIGN_OR_RETURN(before[n], b.gflops(o.repeats));
    out << fmt::format("  SGEMM {}: {:.1f} GFLOP/s with CLBlast's database parameters\n", n, before[n]);
  }
  // Candidates: tile sizes (MWG x NWG per work group, KWG deep), work-group shape (MDIMC x
  // NDIMC), vector widths, local memory (SA/SB) — constraints as CLBlast's tuner states them.
  const std::vector<Params> candidates = {
      {{"MWG", 64}, {"NWG", 64}, {"KWG", 32}, {"MDIMC", 8}, {"NDIMC", 8}, {"MDIMA", 8}, {"NDIMB", 8}, {"KWI", 2}, {"VWM", 4}, {"VWN", 4}, {"SA", 0}, {"SB", 0}},
      {{"MWG", 64}, {"NWG", 64}, {"KWG", 32}, {"MDIMC", 8}, {"NDIMC", 8}, {"MDIMA", 8}, {"NDIMB", 8}, {"KWI", 2}, {"VWM", 8}, {"VWN", 8}, {"SA", 0}, {"SB", 0}},
      {{"MWG", 128}, {"NWG", 128}, {"KWG", 32}, {"MDIMC", 16}, {"NDIMC", 16}, {"MDIMA", 16}, {"NDIMB", 16}, {"KWI", 2}, {"VWM", 8}, {"VWN", 8}, {"SA", 0}, {"SB", 0}},
      {{"MWG", 32}, {"NWG", 32}, {"KWG", 32}, {"MDIMC", 8}, {"NDIMC", 8}, {"MDIMA", 8}, {"NDIMB", 8}, {"KWI", 2}, {"VWM", 4}, {"VWN", 4}, {"SA", 0}, {"SB", 0}},
      {{"MWG", 64}, {"NWG", 64}, {"KWG", 16}, {"MDIMC", 16}, {"NDIMC", 16}, {"MDIMA", 16}, {"NDIMB", 16}, {"KWI", 2}, {"VWM", 4}, {"VWN", 4}, {"SA", 1}, {"SB", 1}},
      {{"MWG", 32}, {"NWG", 64}, {"KWG", 32}, {"MDIMC", 4}, {"NDIMC", 8}, {"MDIMA", 4}, {"NDIMB", 8}, {"KWI", 1}, {"VWM", 8}, {"VWN", 8}, {"SA", 0}, {"SB", 0}},
      {{"MWG", 16}, {"NWG", 64}, {"KWG", 64}, {"MDIMC", 2}, {"NDIMC", 8}, {"MDIMA", 2}, {"NDIMB", 8}, {"KWI", 1}, {"VWM", 8}, {"VWN", 8}, {"SA", 0}, {"SB", 0}},
  };
  const int64_t n0 = o.sizes.front();
  GemmBench bench;
  TD_RETURN_IF_ERROR(bench.init(d, static_cast<size_t>(n0)));
  Params best = defaults;
  double best_gflops = before[n0];
  int tried = 0;
  for (const Params& change : candidates) {
    if (tried > 0 && over()) {
      out << "  (budget spent: the remaining candidates were not tried)\n";
      break;
    }
    Params p = defaults;
    for (const auto& [k, v] : change) p[k] = v;
    if (p.count("GEMMK")) p["GEMMK"] = 0;
    if (p.count("KREG")) p["KREG"] = 1;
    if (p.count("STRM")) p["STRM"] = 0;
    if (p.count("STRN")) p["STRN"] = 0;
    std::string desc;
    for (const char* k : {"MWG", "NWG", "KWG", "MDIMC", "NDIMC", "VWM", "VWN", "SA", "SB"})
      desc += fmt::format("{}={} ", k, p[k]);
    ++tried;
    if (clblast::OverrideParameters(d->id(), "Xgemm", clblast::Precision::kSingle, p) !=
        clblast::StatusCode::kSuccess) {
      out << "  candidate " << desc << ": not accepted by CLBlast\n";
      continue;
    }
    auto g = bench.gflops(1);
    Status ok = g.ok() ? bench.check() : g.status();
    if (!ok.ok()) {
      out << "  candidate " << desc << ": rejected (" << ok.message() << ")\n";
      continue;
    }
    out << fmt::format("  candidate {}: {:.1f} GFLOP/s\n", desc, *g);
    if (*g > best_gflops) best_gflops = *g, best = p;
  }
  clblast::OverrideParameters(d->id(), "Xgemm", clblast::Precision::kSingle, best);
  const bool changed = best != defaults;
  if (changed) {
    std::string kv;
    std::vector<std::string> keys;
    for (const auto& [k, v] : best) keys.push_back(k);
    std::sort(keys.begin(), keys.end());
    for (const auto& k : keys) kv += fmt::format(" {}={}", k, best[k]);
    lines.push_back("clblast Xgemm" + kv);
  }
  for (int64_t n : o.sizes) {
    GemmBench b;
    TD_RETURN_IF_ERROR(b.init(d, static_cast<size_t>(n)));
    TD_ASSIGN_OR_RETURN(after[n], b.gflops(o.repeats));
    TD_RETURN_IF_ERROR(b.check());
  }
  out << fmt::format("  Xgemm: {} of {} candidates tried; {}\n", tried, candidates.size(),
                     changed ? "a candidate beats CLBlast's database" : "CLBlast's database stays");
  for (int64_t n : o.sizes)
    out << fmt::format("  SGEMM {}: {:.1f} -> {:.1f} GFLOP/s\n", n, before[n], after[n]);
#endif

  // The convolutions' GEMM: the generated kernel with 4, 8 or 12 output channels per work
  // item, or CLBlast's SGEMM, timed on the GEMMs of a 3x3 (64 -> 64 channels) and a 1x1
  // (64 -> 256) convolution over 56 x 56 (ResNet-50's first stage).
  {
    std::vector<codegen::ConvGeometry> convs(2);
    for (auto& g : convs) g.N = 1, g.C = 64, g.H = g.W = g.OH = g.OW = 56, g.bias = false;
    convs[0].M = 64, convs[0].KH = convs[0].KW = 3;  // its columns: K = 576
    convs[1].M = 256, convs[1].KH = convs[1].KW = 1;
    std::vector<cl_mem> mems;
    auto buffer = [&](size_t floats) -> Result<cl_mem> {
      cl_int e = CL_SUCCESS;
      cl_mem m = clCreateBuffer(d->context(), CL_MEM_READ_WRITE, floats * 4, nullptr, &e);
      if (e != CL_SUCCESS) return cl_status(e, d->info().name, "allocating tuning buffers");
      const float zero = 0.5f;
      clEnqueueFillBuffer(d->queue(), m, &zero, sizeof(zero), 0, floats * 4, 0, nullptr, nullptr);
      mems.push_back(m);
      return m;
    };
    auto time_tile = [&](int64_t tile) -> Result<double> {
      double total = 0;
      for (const auto& g : convs) {
        const size_t K = static_cast<size_t>(g.C * g.KH * g.KW), N = static_cast<size_t>(g.OH * g.OW);
        TD_ASSIGN_OR_RETURN(cl_mem cols, buffer(K * N));
        TD_ASSIGN_OR_RETURN(cl_mem w, buffer(static_cast<size_t>(g.M) * K));
        TD_ASSIGN_OR_RETURN(cl_mem outm, buffer(static_cast<size_t>(g.M) * N));
        std::function<Status()> once;
        std::shared_ptr<codegen::GpuProgram> prog;
        codegen::TemplateKernel k;
        if (tile > 0) {
          // The fused convolutions' vectorised GEMM (what models run; ConvRegion).
          k = codegen::conv_gemm_vec_kernel(g, tile, 8, codegen::ConvEpilogue{}, d->is_cpu());
          TD_ASSIGN_OR_RETURN(prog, d->template_program(k));
          once = [&] {
            return d->launch(*prog, {codegen::allocation_arg(cols), codegen::allocation_arg(w),
                                     codegen::allocation_arg(outm)}, k.n);
          };
        } else {
          once = [&] {
            GemmCall c;
            c.m = static_cast<size_t>(g.M), c.n = N, c.k = K, c.lda = K, c.ldb = c.ldc = N;
            c.a = w, c.b = cols, c.c = outm, c.a_off = c.b_off = c.c_off = {0};
            return run_gemm(*d, c);
          };
        }
        TD_RETURN_IF_ERROR(once());  // compiles
        if (clFinish(d->queue()) != CL_SUCCESS) return errors::Internal("clFinish failed");
        double best = 1e30;
        for (int r = 0; r < std::max(o.repeats, 1); ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          TD_RETURN_IF_ERROR(once());
          if (clFinish(d->queue()) != CL_SUCCESS) return errors::Internal("clFinish failed");
          best = std::min(best, seconds_since(t0));
        }
        total += best;
      }
      return total;
    };
    std::vector<int64_t> tiles = {8, 4, 12};
    if (d->blas()) tiles.push_back(0);
    int64_t best_tile = -1;
    double best_t = 1e30;
    std::string report;
    for (int64_t tile : tiles) {
      if (best_tile >= 0 && over()) break;
      auto t = time_tile(tile);
      for (cl_mem m : mems) clReleaseMemObject(m);
      mems.clear();
      if (!t.ok()) {
        report += fmt::format(" {}: failed ({})", tile ? std::to_string(tile) : "CLBlast", t.status().message());
        continue;
      }
      report += fmt::format(" {}: {:.2f} ms", tile ? fmt::format("tiles of {}", tile) : "CLBlast", *t * 1e3);
      if (*t < best_t) best_t = *t, best_tile = tile;
    }
    out << "  convolution GEMMs (3x3 64->64 and 1x1 64->256 over 56x56):" << report << "\n";
    if (best_tile >= 0) {
      lines.push_back(fmt::format("conv_gemm {}", best_tile));
      out << "  convolutions: " << (best_tile ? fmt::format("generated GEMM, tiles of {}", best_tile) : "CLBlast")
          << "\n";
    }
  }

  // The generated kernels' work-group size: im2col of a 3x3 convolution over 64 x 56 x 56 and
  // the bias fill of its output, each timed over 5 launches per candidate size.
  {
    codegen::ConvGeometry geo;
    geo.N = 1, geo.C = 64, geo.H = geo.W = 56, geo.M = 64, geo.KH = geo.KW = 3, geo.PT = geo.PL = 1;
    geo.OH = geo.OW = 56;
    const auto k1 = codegen::im2col_kernel(geo);
    const auto k2 = codegen::channel_fill_kernel(64 * 56 * 56, 56 * 56, 64);
    TD_ASSIGN_OR_RETURN(auto p1, d->template_program(k1));
    TD_ASSIGN_OR_RETURN(auto p2, d->template_program(k2));
    const size_t col_bytes = static_cast<size_t>(geo.N * geo.C * geo.KH * geo.KW * geo.OH * geo.OW) * 4,
                 x_bytes = 64 * 56 * 56 * 4;
    cl_int e = CL_SUCCESS;
    cl_mem x = clCreateBuffer(d->context(), CL_MEM_READ_WRITE, x_bytes, nullptr, &e);
    cl_mem col = e == CL_SUCCESS ? clCreateBuffer(d->context(), CL_MEM_READ_WRITE, col_bytes, nullptr, &e) : nullptr;
    if (e != CL_SUCCESS) {
      if (x) clReleaseMemObject(x);
      return cl_status(e, d->info().name, "allocating tuning buffers");
    }
    const float zero = 0.0f;
    clEnqueueFillBuffer(d->queue(), x, &zero, sizeof(zero), 0, x_bytes, 0, nullptr, nullptr);
    const size_t max_wg = static_cast<size_t>(device_value<size_t>(d->id(), CL_DEVICE_MAX_WORK_GROUP_SIZE, 1));
    size_t best_local = 0;
    double best_time = 1e30;
    std::string report;
    Status failed;
    for (size_t local : {8, 16, 32, 64, 128, 256, 512}) {
      if (local > max_wg || (best_local && over())) break;
      static_cast<Program&>(*p1).local_size = static_cast<Program&>(*p2).local_size = local;
      double t = 1e30;
      for (int r = 0; r < 3 && failed.ok(); ++r) {  // best of 3 rounds of 5 launches each
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 5 && failed.ok(); ++i) {
          failed = d->launch(*p1, {codegen::allocation_arg(x), codegen::allocation_arg(col)}, k1.n);
          if (failed.ok()) failed = d->launch(*p2, {codegen::allocation_arg(x), codegen::allocation_arg(col)}, k2.n);
        }
        if (failed.ok() && clFinish(d->queue()) != CL_SUCCESS) failed = errors::Internal("clFinish failed");
        t = std::min(t, seconds_since(t0));
      }
      if (!failed.ok()) break;
      report += fmt::format(" {}: {:.2f} ms", local, t * 1e3 / 5);
      if (t < best_time * 0.97) best_time = t, best_local = local;  // ties go to the smaller
    }
    clReleaseMemObject(x);
    clReleaseMemObject(col);
    TD_RETURN_IF_ERROR(failed);
    out << "  generated kernels, work-group size:" << report << "\n";
    if (best_local) {
      lines.push_back(fmt::format("local_size {}", best_local));
      out << fmt::format("  generated kernels: work groups of {}\n", best_local);
    }
  }

  if (file.empty()) {
    out << "  TENSORD_TUNE_CACHE=off: nothing stored\n";
    return OkStatus();
  }
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  const auto tmp = std::filesystem::path(file.string() + ".tmp" + std::to_string(::getpid()));
  {
    std::ofstream f(tmp, std::ios::trunc);
    for (const auto& l : lines) f << l << "\n";
    if (!f) return errors::Internal("tune: cannot write {}", tmp.string());
  }
  std::filesystem::rename(tmp, file, ec);
  if (ec) return errors::Internal("tune: cannot write {}: {}", file.string(), ec.message());
  out << fmt::format("Stored in {} ({:.0f} s); later runs on {} read it\n", file.string(), seconds_since(start),
                     d->info().name);
  return OkStatus();
}

Status set_conv_gemm(Device& device, int64_t tile) {
  auto* d = dynamic_cast<OpenClDevice*>(&device);
  if (!d) return errors::InvalidArgument("set_conv_gemm: {} is not an OpenCL device", device.info().name);
  if (tile < 0 || tile > 16 || (tile == 0 && !d->blas()))
    return errors::InvalidArgument("set_conv_gemm: {} is not 0 (CLBlast{}) or 1..16", tile,
                                   d->blas() ? "" : ", not built or turned off");
  d->set_conv_tile(tile);
  return OkStatus();
}

}  // namespace tensord::opencl
