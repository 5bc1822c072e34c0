// The CPU resized_crop built for AVX2 + FMA + F16C (x86-64 only; resized_crop_cpu.cpp calls it
// when the CPU has those instructions): 8-wide vertical blends, fp16 rounding with vcvtps2ph.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "geometry.h"
#include "resized_crop.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "resized_crop_cpu_impl.h"

namespace {

struct OutFloat16F16C {
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
void resized_crop_cpu_avx2(const ResizedCropArgs& args, int64_t row_begin, int64_t row_end) {
  resized_crop_impl<OutFloat16F16C>(args, row_begin, row_end);
}
}  // namespace kernels
}  // namespace prefetch

#pragma GCC pop_options
#endif
