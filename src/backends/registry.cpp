// The one file where the core meets the backends: every backend compiled into this build.
#include "backends/cpu/cpu_backend.h"
#include "backend/backend.h"
#ifdef TENSORD_HAVE_OPENCL
#include "backends/opencl/opencl_backend.h"
#endif
#ifdef TENSORD_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace tensord {

std::vector<std::unique_ptr<Backend>> create_backends() {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(cpu::create_cpu_backend());
#ifdef TENSORD_HAVE_OPENCL
  backends.push_back(opencl::create_opencl_backend());
#endif
#ifdef TENSORD_HAVE_CUDA
  backends.push_back(cuda::create_cuda_backend());
#endif
  return backends;
}

}  // namespace tensord
