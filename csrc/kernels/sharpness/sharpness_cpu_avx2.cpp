// The CPU sharpness built for AVX2 (x86-64 only; sharpness_cpu.cpp calls it when the CPU has it).
// A contiguous row's interior 16 values a step in 16-bit lanes: the 3x3 sums (at most 13 * 255),
// the division by 13 as a multiply-high, and the blend as a float32 FMA, 8 to a vector. The FMA is
// the thread work's double blend exactly where the double sum is exact (sharpness_thread_work.h),
// which holds for every factor whose rest (1 - factor) is 0 or at least 2^-20 in magnitude: the
// product's lowest bit is then at least 2^-43 and the sum's highest at most 2^9 (or, for a large
// rest, 33 bits above its lowest). Rows with other rests, or narrower than 18 values, take the
// loop of sharpness_cpu_impl.h (its doubles 4 to a vector). Pillow's arithmetic (args.pillow) takes
// that loop too, whose float32 blend must round its product and its sum each: no contraction into
// FMAs in this file (common/no_contraction.h; the intrinsic FMA above stays one), and its clips'
// selects vectorised (common/vectorise_selects.h), both before the kernel's headers.
#include "common/cpu_dispatch.h"
#if PREFETCH_AVX2_BUILD
#include "common/no_contraction.h"
#include "common/vectorise_selects.h"

#include <algorithm>
#include <cstdint>

#include "sharpness/sharpness.h"
#include "sharpness/sharpness_thread_work.h"

// The impl's standard headers and per-value functions are included above, outside the pragma: a
// standard header first seen inside it declares its always_inline members AVX2-only, which GCC 13
// then refuses to inline into baseline code (normalize_flip_cpu_avx2.cpp says more), and the
// per-value functions, shared with the baseline build, must stay baseline code.
#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include <immintrin.h>

#include "sharpness/sharpness_cpu_impl.h"

namespace prefetch {
namespace kernels {

namespace {

constexpr int kStep = 16;
// (t * kThirteenth) >> 16 is t / 13 for every t the smoothing divides (sums + 6, at most 3321):
// the multiplier exceeds 2^16 / 13 by 0.77, adding at most 3321 * 0.77 / 2^16 < 0.04 to a quotient
// whose fraction is at most 12 / 13.
constexpr uint16_t kThirteenth = 5042;
constexpr bool thirteenths_exact() {
  for (uint32_t t = 0; t <= 13 * 255 + 6; ++t) {
    if (((t * kThirteenth) >> 16) != t / 13) return false;
  }
  return true;
}
static_assert(thirteenths_exact(), "the multiply-high must divide every smoothing sum by 13 exactly");

__m256i widen(const uint8_t* p) {
  return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Eight blends (sharpness_blend) of int16 lanes d = smooth - v and v, stored as bytes.
void blend8(uint8_t* dst, __m128i d, __m128i v, __m256 rest) {
  const __m256 f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(d)), rest,
                                   _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(v)));
  // max(f, 0) is +0 where the select keeps -0: both truncate to 0.
  const __m256 clamped = _mm256_min_ps(_mm256_max_ps(f, _mm256_setzero_ps()), _mm256_set1_ps(255.0f));
  const __m256i whole = _mm256_cvttps_epi32(clamped);
  const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(whole), _mm256_extracti128_si256(whole, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packus_epi16(words, words));
}

int64_t interior16(const uint8_t* up, const uint8_t* p, const uint8_t* down, uint8_t* dst, int64_t W, float rest) {
  // The rests where the FMA is the double blend (above); those over 2^100, whose products clamp to
  // 0 or 255 either way, and any not finite are left to the double loop too.
  const float magnitude = rest < 0.0f ? -rest : rest;
  if (!(rest == 0.0f || (magnitude >= 0x1p-20f && magnitude <= 0x1p100f))) return 1;
  if (W - 1 < 1 + kStep) return 1;
  const __m256 vrest = _mm256_set1_ps(rest);
  const __m256i six = _mm256_set1_epi16(6), thirteenth = _mm256_set1_epi16(static_cast<int16_t>(kThirteenth));
  // Steps of 16 from x = 1, the last one moved back to end at W - 2 (it writes some values again,
  // the same bytes: the output is not the input); each reads x - 1 .. x + 16, all below W.
  for (int64_t x = 1; x < W - 1; x += kStep) {
    x = std::min(x, W - 1 - kStep);
    const __m256i v = widen(p + x);
    __m256i s = _mm256_add_epi16(_mm256_add_epi16(widen(up + x - 1), widen(up + x)), widen(up + x + 1));
    s = _mm256_add_epi16(s, _mm256_add_epi16(widen(p + x - 1), widen(p + x + 1)));
    s = _mm256_add_epi16(s, _mm256_add_epi16(_mm256_slli_epi16(v, 2), v));
    s = _mm256_add_epi16(s, _mm256_add_epi16(_mm256_add_epi16(widen(down + x - 1), widen(down + x)), widen(down + x + 1)));
    const __m256i smooth = _mm256_mulhi_epu16(_mm256_add_epi16(s, six), thirteenth);
    const __m256i d = _mm256_sub_epi16(smooth, v);
    blend8(dst + x, _mm256_castsi256_si128(d), _mm256_castsi256_si128(v), vrest);
    blend8(dst + x + 8, _mm256_extracti128_si256(d, 1), _mm256_extracti128_si256(v, 1), vrest);
  }
  return W - 1;
}

}  // namespace

void sharpness_cpu_avx2(const SharpnessArgs& args, int64_t row_begin, int64_t row_end) {
  sharpness_rows<struct Avx2Isa>(args, row_begin, row_end, interior16);
}
}  // namespace kernels
}  // namespace prefetch

#pragma GCC pop_options
#endif  // PREFETCH_AVX2_BUILD
