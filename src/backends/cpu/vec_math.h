// Branch-free float32 exp, sigmoid and tanh that compilers vectorise (libm's are scalar
// calls). exp: Cody-Waite range reduction and a degree-6 polynomial, within 2 ulp over
// [-87.3, 88.3]; below that it is 0 (the true value is 0 below -103.9 and a subnormal under
// 1.2e-38 between), above +inf, as libm's. NaN in, NaN out. Used by the fast kernels; the
// reference kernels keep libm in double.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tensord::cpu::vec {

// exp's constants, shared by its scalar and vector forms.
namespace exp_c {
constexpr float kHi = 88.3762626647949f, kLo = -87.3365447504f;  // clamps (exp overflows / is 0)
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // ln 2 = kLn2Hi + kLn2Lo
constexpr float kP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                         4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
}  // namespace exp_c

inline float exp(float x) {
  using namespace exp_c;
  const bool nan = x != x;
  const bool over = x > kHi, under = x < kLo;
  x = over ? kHi : x;
  x = under ? kLo : x;
  // x = n ln2 + r, |r| <= ln2 / 2
  // Round to nearest by adding and removing 1.5 * 2^23 (no libm call, so it vectorises).
  const float shifter = 12582912.0f;
  const float n = (x * kLog2e + shifter) - shifter;
  float r = x - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = kP[0];
  for (int i = 1; i < 6; ++i) p = p * r + kP[i];
  p = p * r * r + r + 1.0f;
  // Scale by 2^n through the exponent bits.
  // (NaN in: n is NaN, and converting it to an integer is undefined — use 0, x is returned.)
  const int32_t e = (static_cast<int32_t>(nan ? 0.0f : n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, sizeof scale);
  const float y = p * scale;
  // (Clamped inputs gave 3.4e38 and 1.2e-38, FLT_MIN: exp(-175) was 1.2e-38, not 0.)
  return nan ? x : over ? __builtin_inff() : under ? 0.0f : y;
}

inline float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

// 1 - 2 / (exp(2x) + 1): exact limits at +-inf; absolute error ~1e-7 near 0.
inline float tanh(float x) { return 1.0f - 2.0f / (exp(2.0f * x) + 1.0f); }

// erf without branches (both halves computed, one kept): |x| < 0.5 by its Taylor series to
// x^13 (truncation < 1e-9 relative); beyond, Abramowitz & Stegun 7.1.26,
// 1 - (a1 t + ... + a5 t^5) exp(-x^2) with t = 1 / (1 + p|x|), absolute error < 1.5e-7
// (under 3e-7 relative there, since |erf| > 0.52). +-inf give +-1, NaN gives NaN.
inline float erf(float x) {
  const float ax = x < 0 ? -x : x;
  const float x2 = x * x;
  // 2/sqrt(pi) (x - x^3/3 + x^5/10 - x^7/42 + x^9/216 - x^11/1320 + x^13/9360)
  float s = -1.0f / 9360.0f;
  s = s * x2 + 1.0f / 1320.0f;
  s = s * x2 - 1.0f / 216.0f;
  s = s * x2 + 1.0f / 42.0f;
  s = s * x2 - 1.0f / 10.0f;
  s = s * x2 + 1.0f / 3.0f;
  s = s * x2 - 1.0f;
  const float small = -1.1283791670955126f * x * s;
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float big = 1.0f - p * t * exp(-x2);
  const float large = x < 0 ? -big : big;
  return ax < 0.5f ? small : (x != x ? x : large);
}

#if defined(__x86_64__)
// AVX-512 forms of exp, sigmoid and tanh (for kernels written in intrinsics, such as the LSTM
// cell): the same range reduction and polynomial, 2^n applied by scalef, and the divisions as
// a 14-bit reciprocal refined by one Newton step (about 2^-27 relative error before
// rounding). Clamped as exp (NaN kept: max/min return their second operand on NaN).
// (The maskz forms with a full mask: GCC 12 warns that the plain forms' undefined source may
// be used uninitialized.)
constexpr __mmask16 kAll16 = 0xFFFF;

__attribute__((target("avx512f"))) inline __m512 exp_avx512(__m512 x) {
  using namespace exp_c;
  x = _mm512_maskz_min_ps(kAll16, _mm512_set1_ps(kHi),
                          _mm512_maskz_max_ps(kAll16, _mm512_set1_ps(kLo), x));
  const __m512 n =
      _mm512_maskz_roundscale_ps(kAll16, _mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kP[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP[i]));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_scalef_ps(kAll16, p, n);
}

__attribute__((target("avx512f"))) inline __m512 recip_avx512(__m512 d) {
  const __m512 y = _mm512_maskz_rcp14_ps(kAll16, d);
  return _mm512_fmadd_ps(y, _mm512_fnmadd_ps(d, y, _mm512_set1_ps(1.0f)), y);
}

__attribute__((target("avx512f"))) inline __m512 sigmoid_avx512(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return recip_avx512(_mm512_add_ps(one, exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

__attribute__((target("avx512f"))) inline __m512 tanh_avx512(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = exp_avx512(_mm512_add_ps(x, x));
  return _mm512_fnmadd_ps(_mm512_set1_ps(2.0f), recip_avx512(_mm512_add_ps(e, one)), one);
}
// AVX2 + FMA forms of the same, 8 lanes (the AVX2 clones of the loops above stay scalar: GCC
// does not vectorise them without AVX-512's masks). 2^n as two exponent-bit factors 2^(n/2)
// and 2^(n - n/2), since n reaches 128 at the clamp (the AVX-512 form's scalef takes it at
// once). The divisions are divisions, rounded as the scalar form's (a refined 12-bit reciprocal
// missed an ONNX GRU test by its error in tanh near 0, 1 - 2 / (e^2x + 1)).
__attribute__((target("avx2,fma"))) inline __m256 exp_avx2(__m256 x) {
  using namespace exp_c;
  x = _mm256_min_ps(_mm256_set1_ps(kHi), _mm256_max_ps(_mm256_set1_ps(kLo), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kP[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP[i]));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // (NaN in: n converts to INT_MIN, the factors are garbage, p is NaN and so is the product.)
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

__attribute__((target("avx2,fma"))) inline __m256 recip_avx2(__m256 d) {
  return _mm256_div_ps(_mm256_set1_ps(1.0f), d);
}

__attribute__((target("avx2,fma"))) inline __m256 sigmoid_avx2(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return recip_avx2(_mm256_add_ps(one, exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

__attribute__((target("avx2,fma"))) inline __m256 tanh_avx2(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = exp_avx2(_mm256_add_ps(x, x));
  return _mm256_fnmadd_ps(_mm256_set1_ps(2.0f), recip_avx2(_mm256_add_ps(e, one)), one);
}

// The lanes below `left` (at most 8) of a maskload / maskstore.
__attribute__((target("avx2"))) inline __m256i lanes_below_avx2(int64_t left) {
  const int32_t k = static_cast<int32_t>(left < 8 ? left : 8);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif

}  // namespace tensord::cpu::vec
