// How one CUDA thread of an op reads its input bytes and writes its kVec output values: the
// loads, the conversions to the output dtype (round to nearest even, as the CPU kernels round) and
// the stores, 16 bytes at a time where the row allows it. __host__ __device__, so the CPU tests
// run the same stores.
#pragma once
#include <cstdint>

#include "common/float_outputs.h"
#include "common/host_device.h"

namespace prefetch {
namespace kernels {

constexpr int kVec = 8;  // output elements per thread: one 16-byte store for 16-bit outputs

PF_HD uint8_t load_byte(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}

struct ToFloat32 {
  using type = float;
  PF_HD float operator()(float v) const { return v; }
};
struct ToFloat16 {
  using type = uint16_t;
  PF_HD uint16_t operator()(float v) const { return float_to_half_bits(v); }
};
struct ToBFloat16 {
  using type = uint16_t;
  PF_HD uint16_t operator()(float v) const { return float_to_bfloat16_bits(v); }
};
struct ToUInt8 {
  using type = uint8_t;
  PF_HD uint8_t operator()(float v) const { return float_to_uint8(v); }
};

// Calls f with the converter of `dtype`: the one switch over the output dtypes that the CUDA
// launchers and the CPU tests that run their thread bodies share.
template <typename F>
void with_converter(OutDType dtype, F&& f) {
  switch (dtype) {
    case OutDType::kFloat32:
      return f(ToFloat32{});
    case OutDType::kFloat16:
      return f(ToFloat16{});
    case OutDType::kBFloat16:
      return f(ToBFloat16{});
    case OutDType::kUInt8:
      return f(ToUInt8{});
  }
}

// Stores `count` values; all kVec of them with 16-byte stores where `dst` is aligned for it.
PF_HD void store_values(float* dst, const float (&v)[kVec], int count) {
#if defined(__CUDA_ARCH__)
  if (count == kVec && (reinterpret_cast<uintptr_t>(dst) & 15u) == 0) {
    reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
    return;
  }
#endif
  for (int k = 0; k < kVec; ++k)
    if (k < count) dst[k] = v[k];
}
PF_HD void store_values(uint16_t* dst, const uint16_t (&v)[kVec], int count) {
#if defined(__CUDA_ARCH__)
  if (count == kVec && (reinterpret_cast<uintptr_t>(dst) & 15u) == 0) {
    uint4 packed;
    packed.x = static_cast<uint32_t>(v[0]) | (static_cast<uint32_t>(v[1]) << 16);
    packed.y = static_cast<uint32_t>(v[2]) | (static_cast<uint32_t>(v[3]) << 16);
    packed.z = static_cast<uint32_t>(v[4]) | (static_cast<uint32_t>(v[5]) << 16);
    packed.w = static_cast<uint32_t>(v[6]) | (static_cast<uint32_t>(v[7]) << 16);
    *reinterpret_cast<uint4*>(dst) = packed;
    return;
  }
#endif
  for (int k = 0; k < kVec; ++k)
    if (k < count) dst[k] = v[k];
}

PF_HD void store_values(uint8_t* dst, const uint8_t (&v)[kVec], int count) {
#if defined(__CUDA_ARCH__)
  if (count == kVec && (reinterpret_cast<uintptr_t>(dst) & 7u) == 0) {
    uint2 packed;
    packed.x = static_cast<uint32_t>(v[0]) | (static_cast<uint32_t>(v[1]) << 8) |
               (static_cast<uint32_t>(v[2]) << 16) | (static_cast<uint32_t>(v[3]) << 24);
    packed.y = static_cast<uint32_t>(v[4]) | (static_cast<uint32_t>(v[5]) << 8) |
               (static_cast<uint32_t>(v[6]) << 16) | (static_cast<uint32_t>(v[7]) << 24);
    *reinterpret_cast<uint2*>(dst) = packed;
    return;
  }
#endif
  for (int k = 0; k < kVec; ++k)
    if (k < count) dst[k] = v[k];
}

}  // namespace kernels
}  // namespace prefetch
