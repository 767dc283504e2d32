// Cast and CastLike between float32 and float16 / bfloat16 (and a copy to the same type),
// without the widening the executor does around reference kernels (a float16 input widened
// into a float32 buffer, converted, narrowed back: three passes and two buffers). With F16C
// (every x86 CPU since 2013) eight halves a vector instruction; otherwise the exact scalar
// conversions of core/dtype. float16 models on the cpu (engine/canonicalize.h's
// widen_float16) Cast at every graph input and output: MobileNetV2's 150,528-value input took
// 12% of the model's time on the reference kernel.
#include <cpuid.h>
#include <immintrin.h>

#include <climits>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernel.h"
#include "backends/cpu/thread_pool.h"
#include "core/op_registry.h"

namespace tensord::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 17;  // values below which one thread does it

DType target_dtype(const Node& node, const std::vector<TensorType>& in) {
  if (node.op == "CastLike") return in.size() > 1 ? in[1].dtype : DType::kUndefined;
  auto it = node.attrs.find("to");
  const int64_t* to = it == node.attrs.end() ? nullptr : it->second.get_if<int64_t>();
  if (!to || *to < 0 || *to > INT32_MAX || !dtype_is_valid(static_cast<int32_t>(*to)))
    return DType::kUndefined;
  return static_cast<DType>(*to);  // DType's values are ONNX's
}

bool handled(DType from, DType to) {
  auto low = [](DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; };
  return (from == DType::kFloat32 && low(to)) || (low(from) && to == DType::kFloat32) ||
         (from == to && (from == DType::kFloat32 || low(from)));
}

Status accepts(const Node& node, const std::vector<TensorType>& in) {
  if (in.empty() || !in[0].defined()) return Status(StatusCode::kUnimplemented, "no input type");
  if (!handled(in[0].dtype, target_dtype(node, in)))
    return Status(StatusCode::kUnimplemented,
                  "float32 <-> float16/bfloat16 only (other types: the reference kernel)");
  return OkStatus();
}

__attribute__((target("avx,f16c"))) void half_to_float_f16c(const uint16_t* s, float* d,
                                                             int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = half_to_float(s[i]);
}

__attribute__((target("avx,f16c"))) void float_to_half_f16c(const float* s, uint16_t* d,
                                                             int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) d[i] = float_to_half(s[i]);
}

// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has no "f16c".
bool has_f16c() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
  }();
  return yes;
}

void convert(DType from, DType to, const void* src, void* dst, int64_t n) {
  if (from == to) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(from));
    return;
  }
  const auto* s16 = static_cast<const uint16_t*>(src);
  auto* d16 = static_cast<uint16_t*>(dst);
  const auto* sf = static_cast<const float*>(src);
  auto* df = static_cast<float*>(dst);
  if (from == DType::kFloat16) {
    if (has_f16c()) return half_to_float_f16c(s16, df, n);
    for (int64_t i = 0; i < n; ++i) df[i] = half_to_float(s16[i]);
  } else if (to == DType::kFloat16) {
    if (has_f16c()) return float_to_half_f16c(sf, d16, n);
    for (int64_t i = 0; i < n; ++i) d16[i] = float_to_half(sf[i]);
  } else if (from == DType::kBFloat16) {
    for (int64_t i = 0; i < n; ++i) df[i] = bfloat16_to_float(s16[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) d16[i] = float_to_bfloat16(sf[i]);
  }
}

Status run(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& in = ctx.input(0);
  const DType from = in.dtype, to = out.dtype;
  if (!handled(from, to))
    return Status(StatusCode::kInternal, "fast Cast given an unsupported pair of types");
  const int64_t n = out.numel();
  const size_t si = dtype_size(from), so = dtype_size(to);
  const auto* src = static_cast<const char*>(in.data);
  auto* dst = static_cast<char*>(out.data);
  if (n < kParallelMin) {
    convert(from, to, src, dst, n);
  } else {
    const int64_t chunk = 1 << 14;
    ThreadPool::get().parallel_for((n + chunk - 1) / chunk, 1, [&](int64_t c0, int64_t c1) {
      const int64_t b = c0 * chunk, e = std::min(n, c1 * chunk);
      convert(from, to, src + b * si, dst + b * so, e - b);
    });
  }
  return OkStatus();
}

}  // namespace

void register_fast_cast_kernels(KernelRegistry& r) {
  r.add(KernelDef{"Cast", "fast", accepts, run, /*native_low_precision=*/true});
  r.add(KernelDef{"CastLike", "fast", accepts, run, /*native_low_precision=*/true});
}

}  // namespace tensord::cpu
