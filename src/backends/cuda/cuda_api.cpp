#include "backends/cuda/cuda_api.h"

#include <dlfcn.h>
#include <glob.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <set>

namespace tensord::cuda {
namespace {

#ifndef TENSORD_CUDA_TOOLKIT_LIB_DIR
#define TENSORD_CUDA_TOOLKIT_LIB_DIR ""
#endif

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

void add_glob(const std::string& pattern, std::vector<std::string>* out) {
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out->push_back(g.gl_pathv[i]);
  ::globfree(&g);
}

// dlopen of each candidate; the handle of the first that loads (RTLD_LOCAL: the symbols stay
// out of the global namespace), or nullptr with what each attempt said.
void* open_first(const std::string& lib, bool soname_only, std::string* tried) {
  std::vector<std::string> candidates;
  const std::vector<std::string> names = library_names(lib);
  const std::vector<std::string> dirs = library_dirs();
  const char* env = std::getenv("TENSORD_CUDA_LIB_DIR");
  const size_t env_dirs = env ? split(env, ':').size() : 0;
  if (!soname_only)
    for (size_t d = 0; d < env_dirs && d < dirs.size(); ++d)
      for (const auto& n : names) candidates.push_back(dirs[d] + "/" + n);
  for (const auto& n : names) candidates.push_back(n);
  if (!soname_only)
    for (size_t d = env_dirs; d < dirs.size(); ++d)
      for (const auto& n : names) candidates.push_back(dirs[d] + "/" + n);
  std::string errors;
  for (const auto& c : candidates) {
    if (c.find('/') != std::string::npos && !std::filesystem::exists(c)) continue;
    if (void* h = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      *tried = c;
      return h;
    }
    const char* e = ::dlerror();
    if (errors.empty() && e) errors = e;  // the first failure is the telling one
  }
  *tried = "lib" + lib + " not found (tried " + names.front() + " by soname" +
           (soname_only ? std::string("") : ", TENSORD_CUDA_LIB_DIR, PyTorch's nvidia wheels, /usr/local/cuda") +
           (errors.empty() ? std::string(")") : "; " + errors + ")");
  return nullptr;
}

template <typename T, typename Fill>
const T* load_once(const std::string& lib, bool soname_only, Fill fill, std::string* why) {
  static std::once_flag once;
  static T* table = nullptr;
  static std::string reason;
  std::call_once(once, [&] {
    std::string tried;
    void* handle = open_first(lib, soname_only, &tried);
    if (!handle) {
      reason = tried;
      return;
    }
    auto* t = new T;
    t->path = tried;
    std::string missing;
    if (!fill(handle, t, &missing)) {
      reason = tried + ": " + missing + " (a CUDA library older than the headers tensord was built with?)";
      delete t;
      ::dlclose(handle);
      return;
    }
    table = t;  // kept for the process's lifetime, as is the library
  });
  if (!table && why) *why = reason;
  return table;
}

// Looks up symbols of one library into a table's slots; the first missing one is named.
struct Binder {
  void* handle;
  std::string* missing;
  bool ok = true;
  void operator()(const char* name, void** slot) {
    if (!ok) return;
    if (void* f = ::dlsym(handle, name)) *slot = f;
    else {
      ok = false;
      *missing = std::string("symbol ") + name + " missing";
    }
  }
};

}  // namespace

std::vector<std::string> library_names(const std::string& lib) {
  if (lib == "cuda") return {"libcuda.so.1", "libcuda.so"};
  if (lib == "cudnn") return {"libcudnn.so.9", "libcudnn.so"};
  std::vector<std::string> names;
  for (const char* major : {"13", "12"}) names.push_back("lib" + lib + ".so." + major);
  names.push_back("lib" + lib + ".so");
  return names;
}

std::vector<std::string> library_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("TENSORD_CUDA_LIB_DIR"))
    for (auto& d : split(env, ':')) dirs.push_back(d);
  // PyTorch's wheels: nvidia-cuda-nvrtc-cu12, nvidia-cublas-cu12 ... (nvidia/<name>/lib), and
  // CUDA 13's nvidia/cu13/lib.
  std::vector<std::string> prefixes = {"/usr/local/lib/python3*/dist-packages",
                                       "/usr/lib/python3/dist-packages",
                                       "/usr/local/lib/python3*/site-packages",
                                       "/opt/conda/lib/python3*/site-packages"};
  if (const char* h = std::getenv("HOME"); h && *h)
    prefixes.push_back(std::string(h) + "/.local/lib/python3*/site-packages");
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const char* v = std::getenv(var); v && *v)
      prefixes.push_back(std::string(v) + "/lib/python3*/site-packages");
  for (const auto& p : prefixes) {
    add_glob(p + "/nvidia/*/lib", &dirs);
  }
  dirs.push_back("/usr/local/cuda/lib64");
  if (std::string(TENSORD_CUDA_TOOLKIT_LIB_DIR).size()) dirs.push_back(TENSORD_CUDA_TOOLKIT_LIB_DIR);
  std::vector<std::string> unique;
  std::set<std::string> seen;
  for (auto& d : dirs)
    if (seen.insert(d).second) unique.push_back(d);
  return unique;
}

const DriverApi* driver_api(std::string* why) {
  return load_once<DriverApi>(
      "cuda", /*soname_only=*/false,
      [](void* handle, DriverApi* t, std::string* missing) {
        Binder bindf{handle, missing};
#define TENSORD_CUDA_BINDF(name) bindf(TENSORD_CUDA_STR(name), reinterpret_cast<void**>(&t->name));
        TENSORD_CUDA_DRIVER_FUNCTIONS(TENSORD_CUDA_BINDF)
        return bindf.ok;
      },
      why);
}

const NvrtcApi* nvrtc_api(std::string* why) {
  return load_once<NvrtcApi>(
      "nvrtc", false,
      [](void* handle, NvrtcApi* t, std::string* missing) {
        Binder bindf{handle, missing};
        TENSORD_CUDA_NVRTC_FUNCTIONS(TENSORD_CUDA_BINDF)
        return bindf.ok;
      },
      why);
}

const CublasApi* cublas_api(std::string* why) {
  return load_once<CublasApi>(
      "cublas", false,
      [](void* handle, CublasApi* t, std::string* missing) {
        Binder bindf{handle, missing};
        TENSORD_CUDA_CUBLAS_FUNCTIONS(TENSORD_CUDA_BINDF)
        bindf("cublasGemmEx", reinterpret_cast<void**>(&t->cublasGemmEx));
        bindf("cublasGemmStridedBatchedEx", reinterpret_cast<void**>(&t->cublasGemmStridedBatchedEx));
        return bindf.ok;
      },
      why);
}

const CublasLtApi* cublaslt_api(std::string* why) {
  return load_once<CublasLtApi>(
      "cublasLt", false,
      [](void* handle, CublasLtApi* t, std::string* missing) {
        Binder bindf{handle, missing};
        TENSORD_CUDA_CUBLASLT_FUNCTIONS(TENSORD_CUDA_BINDF)
        return bindf.ok;
      },
      why);
}

#if TENSORD_HAVE_CUDNN_H
const CudnnApi* cudnn_api(std::string* why) {
  return load_once<CudnnApi>(
      "cudnn", false,
      [](void* handle, CudnnApi* t, std::string* missing) {
        Binder bindf{handle, missing};
        TENSORD_CUDA_CUDNN_FUNCTIONS(TENSORD_CUDA_BINDF)
        return bindf.ok;
      },
      why);
}
#endif

}  // namespace tensord::cuda
