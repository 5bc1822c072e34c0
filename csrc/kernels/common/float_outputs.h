// What every op with a float output shares, on the CPU and the GPU alike: the output dtypes, the
// per-channel normalization folded into one multiply-add (Affine), and the conversions of a float
// to float16 and bfloat16 bits, rounded to nearest even as CUDA rounds, and to a saturated uint8.
// Torch-free; every function is __host__ __device__ under nvcc.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include "common/host_device.h"

namespace prefetch {
namespace kernels {

// kUInt8: the normalized value rounded half to even and saturated to [0, 255], as torch's
// round().clamp(0, 255) then to(uint8) would: with mean 0 and std 1/255, the resampled pixels.
enum class OutDType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2, kUInt8 = 3 };

PF_HD int64_t out_dtype_bytes(OutDType d) {
  return d == OutDType::kFloat32 ? 4 : d == OutDType::kUInt8 ? 1 : 2;
}

// (x / 255 - mean) / std, folded into one multiply-add per element: scale = 1 / (255 std),
// bias = -mean / std, both computed in double and rounded once.
struct Affine {
  float scale, bias;
};

// A multiply, then an add, on every build: nvcc compiles with --fmad=false and the AVX2 builds that
// use it include common/no_contraction.h, so the CPU and the GPU round alike (once one contracted
// and the other did not: the last bit of half the values differed, docs/custom_ops.md, "CPU and
// GPU results"). Within 1e-6 of (v / 255 - mean) / std for |result| <= 1.
PF_HD float normalize(uint8_t v, Affine a) { return static_cast<float>(v) * a.scale + a.bias; }

// The bits of a float (C++20's std::bit_cast; memcpy is the defined way to read them in C++17).
PF_HD uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// Round-to-nearest-even float -> bfloat16 / float16 bits, identical to CUDA's __float2bfloat16_rn
// and __float2half_rn (which device code uses directly).
PF_HD uint16_t float_to_bfloat16_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
#else
  const uint32_t u = float_bits(f);
  // Branch-free (so loops over it vectorise): NaN keeps a quiet-NaN pattern, everything else
  // rounds the 16 dropped bits to nearest even.
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
#endif
}

PF_HD uint16_t float_to_half_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));
#else
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // subnormal or zero in half precision
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    // value = mant * 2^(exp - 150); in units of the smallest subnormal (2^-24): mant >> (126 - exp)
    const uint32_t shift = 126u - exp;
    uint32_t result = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (result & 1u))) ++result;
    return static_cast<uint16_t>(sign | result);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even.
  uint32_t v = abs - 0x38000000u;
  v += 0xfffu + ((v >> 13) & 1u);
  return static_cast<uint16_t>(sign | (v >> 13));
#endif
}

// Saturated to [0, 255] first (NaN to 0: the comparisons are false for it), then rounded half to
// even: on the CPU by adding and subtracting 1.5 * 2^23, exact for the clamped range, in the
// default rounding mode and without fast-math (the build has none), which vectorises; on the GPU
// by the conversion instruction that rounds the same way.
PF_HD uint8_t float_to_uint8(float v) {
  const float low = v > 0.0f ? v : 0.0f;
  const float c = low < 255.0f ? low : 255.0f;
#if defined(__CUDA_ARCH__)
  return static_cast<uint8_t>(__float2uint_rn(c));
#else
  const float magic = 12582912.0f;
  return static_cast<uint8_t>(static_cast<int32_t>((c + magic) - magic));
#endif
}

}  // namespace kernels
}  // namespace prefetch
