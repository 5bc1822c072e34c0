// The CPU gaussian_blur built for AVX2 + FMA (x86-64 only; gaussian_blur_cpu.cpp calls it when the
// CPU has them): the impl with blocks of 16 values in intrinsics, 4 doubles a vector, the sums in
// 4 registers over all the taps (GCC left the baseline's block sums in memory: 1.06 ms an image of
// 3 x 176 x 176 with 23 x 23 taps on one core). Every product the sums add is exact
// (gaussian_blur.h), so an FMA rounds as the baseline's separate add; the conversions to float32
// and the rounding to whole values use the default rounding mode (to nearest, ties to even), as
// static_cast<float> and nearbyint do.
#include "common/cpu_dispatch.h"
#if PREFETCH_AVX2_BUILD
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gaussian_blur/gaussian_blur.h"
#include "gaussian_blur/gaussian_blur_thread_work.h"

// The impl's standard headers and per-value functions are included above, outside the pragma: a
// standard header first seen inside it declares its always_inline members AVX2-only, which GCC 13
// then refuses to inline into baseline code (normalize_flip_cpu_avx2.cpp says more).
#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include <immintrin.h>

#include "gaussian_blur/gaussian_blur_cpu_impl.h"

namespace prefetch {
namespace kernels {

namespace {

static_assert(kBlurBlock == 16, "the blocks below sum 16 values in 4 vectors");

struct Avx2BlurBlocks {
  static void row(const double* p, const float* w, int64_t k, float* dst) {
    __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t j = 0; j < k; ++j) {
      const __m256d wj = _mm256_set1_pd(static_cast<double>(w[j]));
      const double* q = p + j;
      s0 = _mm256_fmadd_pd(wj, _mm256_loadu_pd(q), s0);
      s1 = _mm256_fmadd_pd(wj, _mm256_loadu_pd(q + 4), s1);
      s2 = _mm256_fmadd_pd(wj, _mm256_loadu_pd(q + 8), s2);
      s3 = _mm256_fmadd_pd(wj, _mm256_loadu_pd(q + 12), s3);
    }
    _mm_storeu_ps(dst, _mm256_cvtpd_ps(s0));
    _mm_storeu_ps(dst + 4, _mm256_cvtpd_ps(s1));
    _mm_storeu_ps(dst + 8, _mm256_cvtpd_ps(s2));
    _mm_storeu_ps(dst + 12, _mm256_cvtpd_ps(s3));
  }

  // blur_round of 4 sums: to nearest (ties to even), clamped to [0, 255], as int32.
  static __m128i rounded(__m256d s) {
    const __m256d r = _mm256_round_pd(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm256_cvtpd_epi32(_mm256_min_pd(_mm256_max_pd(r, _mm256_setzero_pd()), _mm256_set1_pd(255.0)));
  }

  static void column(const float* const* rows, int64_t x, const float* w, int64_t k, uint8_t* dst) {
    __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t i = 0; i < k; ++i) {
      const __m256d wi = _mm256_set1_pd(static_cast<double>(w[i]));
      const float* row = rows[i] + x;
      const __m256 a = _mm256_loadu_ps(row), b = _mm256_loadu_ps(row + 8);
      s0 = _mm256_fmadd_pd(wi, _mm256_cvtps_pd(_mm256_castps256_ps128(a)), s0);
      s1 = _mm256_fmadd_pd(wi, _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)), s1);
      s2 = _mm256_fmadd_pd(wi, _mm256_cvtps_pd(_mm256_castps256_ps128(b)), s2);
      s3 = _mm256_fmadd_pd(wi, _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1)), s3);
    }
    const __m128i lo = _mm_packs_epi32(rounded(s0), rounded(s1)), hi = _mm_packs_epi32(rounded(s2), rounded(s3));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_packus_epi16(lo, hi));
  }
};

}  // namespace

void gaussian_blur_cpu_avx2(const GaussianBlurArgs& args, int64_t row_begin, int64_t row_end) {
  gaussian_blur_rows<Avx2BlurBlocks>(args, row_begin, row_end);
}

}  // namespace kernels
}  // namespace prefetch

#pragma GCC pop_options
#endif  // PREFETCH_AVX2_BUILD
