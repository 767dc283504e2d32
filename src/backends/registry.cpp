// The one file where the core meets the backends: every backend compiled into this build.
#include "backends/cpu/cpu_backend.h"
#include "backend/backend.h"
#include "backend/tune.h"
#ifdef TENSORD_HAVE_OPENCL
#include "backends/opencl/opencl_backend.h"
#endif
#ifdef TENSORD_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

#include <mutex>

namespace tensord {
namespace {
std::mutex& factories_mu() {
  static std::mutex mu;
  return mu;
}
std::vector<std::function<std::unique_ptr<Backend>()>>& factories() {
  static std::vector<std::function<std::unique_ptr<Backend>()>> f;
  return f;
}
std::string& node_prefix() {
  static std::string prefix;
  return prefix;
}
}  // namespace

void add_backend_factory(std::function<std::unique_ptr<Backend>()> factory) {
  std::lock_guard<std::mutex> lock(factories_mu());
  factories().push_back(std::move(factory));
}
void set_local_node_prefix(const std::string& prefix) { node_prefix() = prefix; }
const std::string& local_node_prefix() { return node_prefix(); }

Status tune_device(const TuneOptions& options, std::ostream& out) {
#ifdef TENSORD_HAVE_OPENCL
  return opencl::tune(options, out);
#else
  (void)options, (void)out;
  return Status(StatusCode::kUnimplemented, "tune: this build of tensord has no OpenCL backend");
#endif
}

std::vector<std::unique_ptr<Backend>> create_backends() {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(cpu::create_cpu_backend());
#ifdef TENSORD_HAVE_OPENCL
  backends.push_back(opencl::create_opencl_backend());
#endif
#ifdef TENSORD_HAVE_CUDA
  backends.push_back(cuda::create_cuda_backend());
#endif
  // Backends added at run time (the cluster's proxy devices of other ranks), last.
  std::lock_guard<std::mutex> lock(factories_mu());
  for (const auto& f : factories())
    if (auto b = f()) backends.push_back(std::move(b));
  return backends;
}

Result<ForeignMemory> export_device_memory(const void* ptr, size_t bytes, bool ipc) {
#ifdef TENSORD_HAVE_CUDA
  return cuda::export_device_memory(ptr, bytes, ipc);
#else
  (void)ptr, (void)bytes, (void)ipc;
  return Status(StatusCode::kFailedPrecondition,
                "CUDA memory: this build of tensord has no CUDA backend (built with -DTENSORD_CUDA=OFF "
                "or without the CUDA toolkit)");
#endif
}

}  // namespace tensord
