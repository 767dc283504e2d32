// Branch-free float32 exp, sigmoid and tanh that compilers vectorise (libm's are scalar
// calls). exp: Cody-Waite range reduction and a degree-6 polynomial, within 2 ulp over
// [-87, 88]; inputs beyond are clamped (exp saturates to 0 / 3.4e38 there anyway). NaN in,
// NaN out. Used by the fast kernels; the reference kernels keep libm in double.
#pragma once

#include <cstdint>
#include <cstring>

namespace tensord::cpu::vec {

inline float exp(float x) {
  const float hi = 88.3762626647949f, lo = -87.3365447504f;
  const bool nan = x != x;
  x = x > hi ? hi : x;
  x = x < lo ? lo : x;
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
  const int32_t e = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, sizeof scale);
  const float y = p * scale;
  return nan ? x : y;
}

inline float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

// 1 - 2 / (exp(2x) + 1): exact limits at +-inf; absolute error ~1e-7 near 0.
inline float tanh(float x) { return 1.0f - 2.0f / (exp(2.0f * x) + 1.0f); }

}  // namespace tensord::cpu::vec
