// How the CPU kernels write a row of float results into their output dtype: float32 as is,
// bfloat16 and (without F16C) float16 rounded to nearest even as the CUDA kernels round, uint8
// saturated and rounded half to even (float_outputs.h). float16_store_f16c.h has the F16C store
// of the AVX2 builds.
//
// Internal linkage on purpose: each op's body is compiled twice, for the baseline ISA and for
// AVX2 + FMA + F16C. An inline function with external linkage used by both copies could be
// merged by the linker into the AVX2 one and then run on a CPU without AVX2.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

// 16 values at a time with SSE2 (the compiler kept float_to_uint8's selects as branches, half of
// resized_crop's time): maxps/minps saturate (a NaN becomes 0, as float_to_uint8's comparisons
// make it), cvtps2dq rounds half to even in the default rounding mode, as the 1.5 * 2^23 addition
// does, and the packs narrow. The same bytes as float_to_uint8 (tests/cpp).
struct StoreUInt8 {
  using type = uint8_t;
  static constexpr bool kNeedsScratch = false;
  static void store(uint8_t* dst, int64_t stride, const float* v, uint8_t*, int64_t n) {
    int64_t i = 0;
#if defined(__SSE2__)
    if (stride == 1) {
      const __m128 zero = _mm_setzero_ps(), top = _mm_set1_ps(255.0f);
      for (; i + 16 <= n; i += 16) {
        __m128i q[4];
        for (int k = 0; k < 4; ++k) {
          // max(v, 0): maxps returns its second operand when the first is NaN.
          const __m128 c = _mm_min_ps(_mm_max_ps(_mm_loadu_ps(v + i + 4 * k), zero), top);
          q[k] = _mm_cvtps_epi32(c);
        }
        const __m128i words = _mm_packus_epi16(_mm_packs_epi32(q[0], q[1]), _mm_packs_epi32(q[2], q[3]));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), words);
      }
    }
#endif
    for (; i < n; ++i) dst[i * stride] = prefetch::kernels::float_to_uint8(v[i]);
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
