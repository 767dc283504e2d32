// The OpenCL backend: every device of every platform the ICD loader finds, as opencl:0..N-1
// (one context per platform, so devices of one platform copy directly; one in-order queue per
// device). Memory is plain cl_mem allocations that the engine's caching allocator
// (src/engine/memory_pool.h) pools and sub-allocates: a kernel receives (cl_mem, byte offset)
// pairs, so a small tensor costs no driver call and needs no sub-buffer (whose origin would
// have to be CL_DEVICE_MEM_BASE_ADDR_ALIGN-aligned). Kernels are generated
// (src/backends/codegen: element-wise ops with broadcasting, fused chains), compiled once per
// device and kept in memory by source; everything else falls back to cpu:0 through the engine.
//
// Compiled programs are also kept on disk (TENSORD_KERNEL_CACHE, see opencl_backend.cpp),
// keyed by device, driver version and source; a bad entry is rebuilt, never trusted.
//
// Environment: TENSORD_OPENCL=0 hides every OpenCL device. Without an OpenCL platform there
// are no opencl devices; when the user asked for them (TENSORD_DEVICES / TENSORD_DEVICE name
// opencl) one line on stderr says why.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace tensord::opencl {

std::unique_ptr<Backend> create_opencl_backend();

// Test hooks: how many programs the devices compiled, and kernel launches, since start.
int64_t programs_built();
int64_t kernels_launched();
// Programs loaded from the disk cache (TENSORD_KERNEL_CACHE) instead of compiled.
int64_t disk_cache_hits();

// The OpenCL C source a device would compile for the last generated kernel (tests).
std::string last_source();

}  // namespace tensord::opencl
