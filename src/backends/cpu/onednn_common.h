// Shared oneDNN plumbing of the cpu backend: one engine, one stream per calling thread, and
// the thread count (TENSORD_NUM_THREADS, default: the machine's cores).
#pragma once

#include <string>

#include <dnnl.hpp>

namespace tensord::cpu {

dnnl::engine& cpu_engine();
// One stream per thread (a oneDNN stream is not meant for concurrent callers). The first call
// on a thread also sets that thread's compute thread count (OpenMP is per calling thread).
dnnl::stream& cpu_stream();
// TENSORD_NUM_THREADS when set to 1..1024, else the number of cores.
int compute_threads();
// Work (multiply-adds of a convolution or product, else elements read and written) below which
// a primitive runs on the calling thread alone: TENSORD_SERIAL_WORK_K thousands, default 100k.
double serial_work_limit();
// "oneDNN 2.6.3" (the library linked at run time).
std::string onednn_version();

}  // namespace tensord::cpu
