#include "backends/codegen/gpu_runtime.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "core/errors.h"

namespace tensord::codegen {

uint64_t fnv1a(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::filesystem::path cache_folder(const char* env, const char* sub) {
  const char* v = std::getenv(env);
  if (v && std::string(v) == "off") return {};
  if (v && *v) return v;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::filesystem::path(x) / "tensord" / sub;
  if (const char* h = std::getenv("HOME"); h && *h)
    return std::filesystem::path(h) / ".cache" / "tensord" / sub;
  return {};
}

ProgramDiskCache::ProgramDiskCache(std::string magic, const std::string& device_key,
                                   const std::string& source, const std::string& ext)
    : magic_(std::move(magic)), source_hash_(fnv1a(source.data(), source.size())) {
  if (const auto dir = cache_folder("TENSORD_KERNEL_CACHE", "kernels"); !dir.empty())
    file_ = dir / fmt::format("{:016x}-{:016x}.{}", fnv1a(device_key.data(), device_key.size()),
                              source_hash_, ext);
}

std::string ProgramDiskCache::load() const {
  if (file_.empty()) return {};
  std::ifstream f(file_, std::ios::binary);
  if (!f) return {};
  std::string magic(magic_.size(), '\0');
  uint64_t hdr[3] = {0, 0, 0};  // source hash, binary size, binary hash
  if (!f.read(magic.data(), static_cast<std::streamsize>(magic.size())) || magic != magic_ ||
      !f.read(reinterpret_cast<char*>(hdr), sizeof(hdr)) || hdr[0] != source_hash_ || hdr[1] == 0 ||
      hdr[1] > (uint64_t{1} << 30))
    return {};
  std::string bin(hdr[1], '\0');
  if (!f.read(bin.data(), static_cast<std::streamsize>(bin.size())) ||
      fnv1a(bin.data(), bin.size()) != hdr[2])
    return {};
  return bin;
}

void ProgramDiskCache::store(const std::string& bin) const {
  if (file_.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(file_.parent_path(), ec);
  if (ec) return;
  const std::filesystem::path tmp = file_.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return;
    const uint64_t hdr[3] = {source_hash_, bin.size(), fnv1a(bin.data(), bin.size())};
    f.write(magic_.data(), static_cast<std::streamsize>(magic_.size()));
    f.write(reinterpret_cast<const char*>(hdr), sizeof(hdr));
    f.write(bin.data(), static_cast<std::streamsize>(bin.size()));
    if (!f) {
      f.close();
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, file_, ec);  // atomic: readers see the old entry or the new one
  if (ec) std::filesystem::remove(tmp, ec);
}

void SourceLog::set(const std::string& source) {
  std::lock_guard<std::mutex> lock(mu_);
  last_ = source;
}

std::string SourceLog::last() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_;
}

HeldBuffers::~HeldBuffers() {
  for (auto& [mem, bytes] : held_) device_->free(mem, bytes);
}

Result<GpuArg> HeldBuffers::upload(const void* data, size_t bytes) {
  TD_ASSIGN_OR_RETURN(void* mem, device_->allocate(bytes));
  held_.emplace_back(mem, bytes);
  Buffer b{device_, mem, bytes, 0};
  TD_RETURN_IF_ERROR(device_->write(b, 0, data, bytes));
  bytes_ += static_cast<int64_t>(bytes);
  return allocation_arg(mem);
}

Result<std::shared_ptr<GpuProgram>> GpuDevice::program(const std::string& source,
                                                       const std::string& kernel_name) {
  {
    std::lock_guard<std::mutex> lock(programs_mu_);
    if (auto it = programs_.find(source); it != programs_.end()) return it->second;
  }
  if (log_) log_->set(source);
  TD_ASSIGN_OR_RETURN(std::shared_ptr<GpuProgram> p, build(source, kernel_name));
  std::lock_guard<std::mutex> lock(programs_mu_);
  return programs_.emplace(source, std::move(p)).first->second;  // another thread's, if it won
}

Result<std::shared_ptr<GpuProgram>> GpuDevice::template_program(const TemplateKernel& k) {
  return program(print_template(k, dialect()), k.name);
}

Result<GpuArg> GpuDevice::arg(const Buffer& b) const {
  if (b.device != this)
    return errors::Internal("{}: a kernel got a buffer of {}", info().name,
                            b.device ? b.device->info().name : std::string("no device"));
  return allocation_arg(b.ptr, b.offset);
}

void GpuDevice::release_programs() {
  std::lock_guard<std::mutex> lock(programs_mu_);
  programs_.clear();
}

}  // namespace tensord::codegen
