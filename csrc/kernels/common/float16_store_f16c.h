// The float16 store of the AVX2 + FMA + F16C builds (vcvtps2ph, round to nearest even: the same
// bits as StoreFloat16Software). Include only inside a `#pragma GCC target("avx2,fma,f16c")`
// region, after <immintrin.h>.
#pragma once
#include <cstdint>

namespace {  // internal linkage: see cpu_stores.h

struct StoreFloat16F16C {
  using type = uint16_t;
  static constexpr bool kNeedsScratch = true;
  static void store(uint16_t* dst, int64_t stride, const float* v, uint16_t* scratch, int64_t n) {
    uint16_t* target = stride == 1 ? dst : scratch;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(v + i), _MM_FROUND_TO_NEAREST_INT);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(target + i), h);
    }
    for (; i < n; ++i) target[i] = static_cast<uint16_t>(_cvtss_sh(v[i], _MM_FROUND_TO_NEAREST_INT));
    if (stride != 1) {
      for (int64_t k = 0; k < n; ++k) dst[k * stride] = scratch[k];
    }
  }
};

}  // namespace
