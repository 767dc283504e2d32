// The OpenCL backend: every device of every platform the ICD loader finds, as opencl:0..N-1
// (one context per platform, so devices of one platform copy directly; one in-order queue per
// device). Memory is plain cl_mem allocations that the engine's caching allocator
// (src/engine/memory_pool.h) pools and sub-allocates: a kernel receives (cl_mem, byte offset)
// pairs, so a small tensor costs no driver call and needs no sub-buffer (whose origin would
// have to be CL_DEVICE_MEM_BASE_ADDR_ALIGN-aligned). Kernels are generated
// (src/backends/codegen: element-wise ops with broadcasting, fused chains), compiled once per
// device and kept in memory by source; everything else falls back to cpu:0 through the engine.
// The generated kernels, the kernel list and the region compiler are the GPU layer shared with
// the CUDA backend (codegen/gpu_kernels.h); this backend implements its runtime
// (codegen/gpu_runtime.h) and adds CLBlast, recurrent and fused convolution kernels.
//
// Compiled programs are also kept on disk (TENSORD_KERNEL_CACHE, codegen/gpu_runtime.h),
// keyed by device, driver version and source; a bad entry is rebuilt, never trusted.
//
// A Conv with constant weights is fused at compile time with what follows it (an inference
// BatchNormalization folded into its weights and bias, a residual Add, an activation) into one
// generated kernel: a vectorised GEMM straight on NCHW for 1x1 windows, im2col + that GEMM
// otherwise, a vectorised depthwise kernel for depthwise ones.
//
// RNN, GRU and LSTM run as a static loop on the device's queue (codegen/recurrent.h): one
// CLBlast GEMM for the input projection of all steps, then per step a GEMM H R^T and a
// generated gate kernel (at batch 1-2 on a CPU device the products move into the step kernels).
//
// Environment: TENSORD_OPENCL=0 hides every OpenCL device. TENSORD_OPENCL_RNN_GEMM=clblast or
// =generated forces the recurrent ops' per-step products onto CLBlast or into the kernels. TENSORD_OPENCL_NO_CONV_FUSION=1
// leaves convolutions to the per-node kernels; TENSORD_OPENCL_CONV_VEC (4, 8, 16: outputs per
// vector of the fused GEMM, default 8), TENSORD_OPENCL_CONV_ROWS (1: consecutive work items
// take consecutive output-channel tiles, the default on a CPU device; 0: consecutive
// positions) and TENSORD_OPENCL_LOCAL (the generated kernels' work-group size) are for
// experiments. Without an OpenCL platform there
// are no opencl devices; when the user asked for them (TENSORD_DEVICES / TENSORD_DEVICE name
// opencl) one line on stderr says why.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/tune.h"

namespace tensord::opencl {

std::unique_ptr<Backend> create_opencl_backend();

// Test hooks: how many programs the devices compiled, and kernel launches, since start.
int64_t programs_built();
int64_t kernels_launched();
// Programs loaded from the disk cache (TENSORD_KERNEL_CACHE) instead of compiled.
int64_t disk_cache_hits();
// SGEMM calls made through CLBlast (MatMul, Gemm, Conv), since start.
int64_t blas_calls();
// Convolutions fused with what follows them (BatchNorm folded, residual Add, activation) into
// one generated kernel at compile time, since start.
int64_t conv_regions_built();
// cl_mem allocations (clCreateBuffer) made by the devices, since start: a run from the
// engine's pool makes none once the pool holds its sizes.
int64_t buffers_created();
// clFinish calls of the devices' queues (run ends, copies between devices, TENSORD_OPENCL_SYNC).
int64_t queue_finishes();

// `tensord tune`: measures candidate parameters on one device and stores the best in the
// device's tuning file, which every later start of the backend reads (a device nobody tuned
// for runs the defaults: CLBlast's database, work groups from the device's limits):
//  - CLBlast's Xgemm kernel (clblast::OverrideParameters): CLBlast's database choice and a
//    small set of candidates (tile sizes, vector widths, local memory), each checked against a
//    host GEMM before it may win, timed on the SGEMM sizes;
//  - the convolutions' GEMM: the generated register-tiled kernel (4, 8 or 12 output channels
//    per work item) or CLBlast's SGEMM, timed on two ResNet-50 convolutions;
//  - the work-group size of the generated kernels (im2col, bias fill, a depthwise convolution
//    and an element-wise kernel of the sizes of a ResNet/MobileNet layer).
// The file: TENSORD_TUNE_CACHE (a folder; "off": no file), else $XDG_CACHE_HOME/tensord/tune
// or ~/.cache/tensord/tune, one file per device name and driver version.
// (TuneOptions: src/backend/tune.h; the CLI reaches this through tune_device().)
using tensord::TuneOptions;
Status tune(const TuneOptions& options, std::ostream& out);
// The tuning file a device of this platform, name and driver reads ("" when disabled).
std::string tune_file(const std::string& platform, const std::string& model, const std::string& driver);

// Which GEMM a device's convolutions use from now on: 0 = CLBlast's SGEMM, 1..16 = the
// generated kernel with that many output channels per work item (what the tuning file's
// "conv_gemm" line sets). INVALID_ARGUMENT for another device or value.
Status set_conv_gemm(Device& device, int64_t tile);

// The OpenCL C source a device would compile for the last generated kernel (tests).
std::string last_source();

}  // namespace tensord::opencl
