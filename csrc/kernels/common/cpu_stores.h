// How the CPU kernels write a row of float results into their output dtype: float32 as is,
// bfloat16 and (without F16C) float16 rounded to nearest even as the CUDA kernels round
// (float_outputs.h). float16_store_f16c.h has the F16C store of the AVX2 builds.
//
// Internal linkage on purpose: each op's body is compiled twice, for the baseline ISA and for
// AVX2 + FMA + F16C. An inline function with external linkage used by both copies could be
// merged by the linker into the AVX2 one and then run on a CPU without AVX2.
#pragma once
#include <cstdint>
#include <cstring>

#include "common/float_outputs.h"

namespace {

struct StoreFloat32 {
  using type = float;
  static constexpr bool kNeedsScratch = false;
  static void store(float* dst, int64_t stride, const float* v, float*, int64_t n) {
    if (stride == 1) {
      std::memcpy(dst, v, static_cast<size_t>(n) * sizeof(float));
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i * stride] = v[i];
    }
  }
};

struct StoreBFloat16 {
  using type = uint16_t;
  static constexpr bool kNeedsScratch = false;
  static void store(uint16_t* dst, int64_t stride, const float* v, uint16_t*, int64_t n) {
    if (stride == 1) {
      for (int64_t i = 0; i < n; ++i) dst[i] = prefetch::kernels::float_to_bfloat16_bits(v[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i * stride] = prefetch::kernels::float_to_bfloat16_bits(v[i]);
    }
  }
};

struct StoreUInt8 {
  using type = uint8_t;
  static constexpr bool kNeedsScratch = false;
  static void store(uint8_t* dst, int64_t stride, const float* v, uint8_t*, int64_t n) {
    if (stride == 1) {
      for (int64_t i = 0; i < n; ++i) dst[i] = prefetch::kernels::float_to_uint8(v[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i * stride] = prefetch::kernels::float_to_uint8(v[i]);
    }
  }
};

struct StoreFloat16Software {
  using type = uint16_t;
  static constexpr bool kNeedsScratch = false;
  static void store(uint16_t* dst, int64_t stride, const float* v, uint16_t*, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i * stride] = prefetch::kernels::float_to_half_bits(v[i]);
  }
};

}  // namespace
