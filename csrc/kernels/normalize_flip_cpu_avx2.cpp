// The CPU kernels built for AVX2 + FMA + F16C (x86-64 only; normalize_flip_cpu.cpp calls them
// when the CPU has those instructions). fp16 rounding uses vcvtps2ph, 8 values at a time.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "geometry.h"
#include "normalize_flip.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "normalize_flip_cpu_impl.h"

namespace {

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

namespace prefetch {
namespace kernels {
void normalize_flip_cpu_avx2(const NormalizeFlipArgs& args, int64_t row_begin, int64_t row_end) {
  normalize_flip_impl<StoreFloat16F16C>(args, row_begin, row_end);
}
}  // namespace kernels
}  // namespace prefetch

#pragma GCC pop_options
#endif
