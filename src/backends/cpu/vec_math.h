// Branch-free float32 exp, sigmoid and tanh that compilers vectorise (libm's are scalar
// calls). exp: Cody-Waite range reduction and a degree-6 polynomial, within 2 ulp over
// [-87.3, 88.3]; below that it is 0 (the true value is 0 below -103.9 and a subnormal under
// 1.2e-38 between), above +inf, as libm's. NaN in, NaN out. Used by the fast kernels; the
// reference kernels keep libm in double.
#pragma once

#include <cstdint>
#include <cstring>

namespace tensord::cpu::vec {

inline float exp(float x) {
  const float hi = 88.3762626647949f, lo = -87.3365447504f;
  const bool nan = x != x;
  const bool over = x > hi, under = x < lo;
  x = over ? hi : x;
  x = under ? lo : x;
  // x = n ln2 + r, |r| <= ln2 / 2
  // Round to nearest by adding and removing 1.5 * 2^23 (no libm call, so it vectorises).
  const float shifter = 12582912.0f;
  const float n = (x * 1.44269504088896341f + shifter) - shifter;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
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

}  // namespace tensord::cpu::vec
