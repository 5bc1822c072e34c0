// The CPU pil_affine built for AVX2 (x86-64 only; pil_affine_cpu.cpp calls it when the CPU has
// it for bicubic): four output pixels at a time in float64 lanes. Where the four are interior (each
// pixel's 4 x 4 taps inside the image, none clamped, planar rows), their source points and taps
// are computed in the lanes too (interior4); elsewhere pixel by pixel (taps_of, the thread work's
// head), and the groups that touch the image's outside, and the row's last W % 4 pixels, are
// pil_affine_pixel's. 2.8 -> 0.93 ms a 224 x 224 x 3 image on one core of the 2-core VM.
//
// Why: the baseline's bicubic is fifteen scalar cubics a pixel (four rows and the column, per
// channel, each fourteen float64 operations) and forty-eight byte-to-double conversions; here each
// pixel's four rows are one four-lane cubic (its 4 x 4 taps transposed so that a lane is a row),
// and the four pixels' columns one more (their row sums transposed so that a lane is a pixel).
//
// The arithmetic is pil_cubic's, operation for operation, each product and sum rounded alone: the
// target has no FMA (only "avx2"), so nothing can be contracted. A lane computes exactly what the
// thread work computes for its pixel; the C++ tests compare every byte with it
// (tests/cpp/pil_affine_test.cpp) and the Python tests with Pillow (tests/ops/test_pil_affine.py).
#include "common/cpu_dispatch.h"
#if PREFETCH_AVX2_BUILD
#include <cstdint>
#include <cstring>

#include "pil_affine/pil_affine.h"
#include "pil_affine/pil_affine_thread_work.h"

#pragma GCC push_options
#pragma GCC target("avx2")
#include <immintrin.h>

namespace prefetch {
namespace kernels {

namespace {

constexpr int kLanes = 4;

// One pixel's source point and taps, as pil_affine_pixel computes them (bicubic branch).
struct Taps {
  double dx = 0.0;
  int64_t rows[4] = {};  // offsets of the four source rows (sH units applied)
  int64_t cols[4] = {};  // offsets of the four source columns (sW units applied)
  bool contiguous = false;  // the four columns are adjacent bytes (sW == 1, none clamped)
};

// pil_affine_pixel's head for pixel (y, x) of map m: false where the point is outside (the fill).
bool taps_of(const PilAffineArgs& a, const double* m, double cy, int64_t x, Taps* t, double* dy) {
  const double cx = pil_add(static_cast<double>(x), 0.5);
  double xin = pil_add(pil_add(pil_mul(m[0], cx), pil_mul(m[1], cy)), m[2]);
  double yin = pil_add(pil_add(pil_mul(m[3], cx), pil_mul(m[4], cy)), m[5]);
  if (!(xin >= 0.0 && xin < static_cast<double>(a.W) && yin >= 0.0 && yin < static_cast<double>(a.H))) return false;
  xin = pil_add(xin, -0.5);
  yin = pil_add(yin, -0.5);
  const int64_t x0 = pil_floor(xin), y0 = pil_floor(yin);
  t->dx = pil_add(xin, -static_cast<double>(x0));
  *dy = pil_add(yin, -static_cast<double>(y0));
  const int64_t left = x0 - 1, top = y0 - 1;
  for (int k = 0; k < 4; ++k) t->cols[k] = pil_clip(left + k, a.W) * a.sW;
  t->contiguous = a.sW == 1 && left >= 0 && left + 3 < a.W;
  t->rows[0] = pil_clip(top, a.H) * a.sH;
  for (int k = 1; k < 4; ++k) t->rows[k] = (top + k >= 0 && top + k < a.H) ? (top + k) * a.sH : t->rows[k - 1];
  return true;
}

// pil_cubic over four lanes. Its sums of a negated term are written as differences, the same
// operation (IEEE 754 defines x - y as x + (-y), and x + y = y + x exactly): -v1 + v3 is v3 - v1,
// (2 (v1 + -v2) + v3) + -v4 is (2 (v1 - v2) + v3) - v4, ((-v1 + v2) + -v3) + v4 is
// ((v2 - v1) - v3) + v4.
__m256d cubic4(__m256d v1, __m256d v2, __m256d v3, __m256d v4, __m256d d) {
  const __m256d p1 = v2;
  const __m256d p2 = _mm256_sub_pd(v3, v1);
  const __m256d p3 = _mm256_sub_pd(_mm256_add_pd(_mm256_mul_pd(_mm256_set1_pd(2.0), _mm256_sub_pd(v1, v2)), v3), v4);
  const __m256d p4 = _mm256_add_pd(_mm256_sub_pd(_mm256_sub_pd(v2, v1), v3), v4);
  return _mm256_add_pd(
      p1, _mm256_mul_pd(d, _mm256_add_pd(p2, _mm256_mul_pd(d, _mm256_add_pd(p3, _mm256_mul_pd(d, p4))))));
}

// Rows r0..r3 of a 4 x 4 matrix to its columns.
void transpose4(__m256d r[4]) {
  const __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]), t1 = _mm256_unpackhi_pd(r[0], r[1]);
  const __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]), t3 = _mm256_unpackhi_pd(r[2], r[3]);
  r[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
  r[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
  r[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
  r[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
}

// Four adjacent bytes as four float64 lanes.
__m256d four_taps(const uint8_t* p) {
  int32_t bytes;
  std::memcpy(&bytes, p, sizeof bytes);
  return _mm256_cvtepi32_pd(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(bytes)));
}

// One source row's four taps as four float64 lanes.
__m256d row_taps(const uint8_t* row, const Taps& t) {
  if (t.contiguous) return four_taps(row + t.cols[0]);
  return _mm256_setr_pd(row[t.cols[0]], row[t.cols[1]], row[t.cols[2]], row[t.cols[3]]);
}

// Pixels x .. x + 3 of an output row, every one inside the image, channel by channel:
// row_taps(c, i, k) gives pixel i's taps in its source row k of channel c, dx[i] its fraction.
template <typename RowTaps>
void bicubic4(const PilAffineArgs& a, const double dx[kLanes], __m256d dy, uint8_t* dst, int64_t plane,
              RowTaps row_taps) {
  // Every channel's row cubics first, then every channel's column cubic: the column's Horner chain
  // is one dependent operation after another, and the channels' chains, written one after the
  // other, overlap (a chain a channel, computed with its store before the next, left the
  // arithmetic waiting on latency).
  __m256d rows[kPilAffineMaxChannels][kLanes];
  for (int64_t c = 0; c < a.C; ++c) {
    for (int i = 0; i < kLanes; ++i) {
      __m256d m[4];
      for (int k = 0; k < 4; ++k) m[k] = row_taps(c, i, k);
      transpose4(m);  // m[j]: tap j of the four rows
      rows[c][i] = cubic4(m[0], m[1], m[2], m[3], _mm256_set1_pd(dx[i]));
    }
    transpose4(rows[c]);  // [k]: row k's cubic of the four pixels
  }
  const __m256d zero = _mm256_setzero_pd(), top = _mm256_set1_pd(255.0);
  for (int64_t c = 0; c < a.C; ++c) {
    const __m256d s = cubic4(rows[c][0], rows[c][1], rows[c][2], rows[c][3], dy);
    // s <= 0 -> 0, s >= 255 -> 255, else truncated: s is finite (finite taps, d in [0, 1)).
    const __m128i v = _mm256_cvttpd_epi32(_mm256_min_pd(_mm256_max_pd(s, zero), top));
    const __m128i bytes = _mm_packus_epi16(_mm_packus_epi32(v, v), _mm_setzero_si128());
    const int32_t four = _mm_cvtsi128_si32(bytes);
    std::memcpy(dst + c * plane, &four, sizeof four);
  }
}

// taps_of for pixels x .. x + 3 at once, where each is interior: inside the image, its four
// columns adjacent bytes (sW == 1) and none clamped, its four rows inside the image (no row
// repeated). Then pixel i's taps are rows top_i .. top_i + 3 (`corner[i]`, its first tap's offset,
// then + sH a row) and its fractions dx[i], dy. False where any pixel is not (taps_of then).
// The same operations as taps_of, lane by lane: m1cy and m4cy are its pil_mul(m[1], cy) and
// pil_mul(m[4], cy); the floor of a point inside is its FLOOR; x - floor(x) is its x + -floor(x).
bool interior4(const PilAffineArgs& a, const double* m, double m1cy, double m4cy, int64_t x,
               double dx[kLanes], __m256d* dy, int64_t corner[kLanes]) {
  const __m256d cx = _mm256_add_pd(_mm256_add_pd(_mm256_set1_pd(static_cast<double>(x)), _mm256_setr_pd(0, 1, 2, 3)),
                                   _mm256_set1_pd(0.5));
  const __m256d xin = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(_mm256_set1_pd(m[0]), cx), _mm256_set1_pd(m1cy)),
                                    _mm256_set1_pd(m[2]));
  const __m256d yin = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(_mm256_set1_pd(m[3]), cx), _mm256_set1_pd(m4cy)),
                                    _mm256_set1_pd(m[5]));
  const __m256d zero = _mm256_setzero_pd();
  const __m256d W = _mm256_set1_pd(static_cast<double>(a.W)), H = _mm256_set1_pd(static_cast<double>(a.H));
  __m256d ok = _mm256_and_pd(_mm256_and_pd(_mm256_cmp_pd(xin, zero, _CMP_GE_OQ), _mm256_cmp_pd(xin, W, _CMP_LT_OQ)),
                             _mm256_and_pd(_mm256_cmp_pd(yin, zero, _CMP_GE_OQ), _mm256_cmp_pd(yin, H, _CMP_LT_OQ)));
  if (_mm256_movemask_pd(ok) != 0xF) return false;
  const __m256d half = _mm256_set1_pd(-0.5), one = _mm256_set1_pd(1.0), four = _mm256_set1_pd(4.0);
  const __m256d xs = _mm256_add_pd(xin, half), ys = _mm256_add_pd(yin, half);
  const __m256d fx = _mm256_floor_pd(xs), fy = _mm256_floor_pd(ys);
  const __m256d left = _mm256_sub_pd(fx, one), top = _mm256_sub_pd(fy, one);
  ok = _mm256_and_pd(_mm256_and_pd(_mm256_cmp_pd(left, zero, _CMP_GE_OQ),
                                   _mm256_cmp_pd(left, _mm256_sub_pd(W, four), _CMP_LE_OQ)),
                     _mm256_and_pd(_mm256_cmp_pd(top, zero, _CMP_GE_OQ),
                                   _mm256_cmp_pd(top, _mm256_sub_pd(H, four), _CMP_LE_OQ)));
  if (_mm256_movemask_pd(ok) != 0xF) return false;
  _mm256_storeu_pd(dx, _mm256_sub_pd(xs, fx));
  *dy = _mm256_sub_pd(ys, fy);
  alignas(16) int32_t lefts[kLanes], tops[kLanes];
  _mm_store_si128(reinterpret_cast<__m128i*>(lefts), _mm256_cvttpd_epi32(left));
  _mm_store_si128(reinterpret_cast<__m128i*>(tops), _mm256_cvttpd_epi32(top));
  for (int i = 0; i < kLanes; ++i) corner[i] = tops[i] * a.sH + lefts[i];
  return true;
}

}  // namespace

void pil_affine_cpu_avx2(const PilAffineArgs& a, int64_t row_begin, int64_t row_end) {
  const int64_t plane = a.H * a.W;
  // interior4's int32 lanes hold the corners' rows and columns (Pillow's coordinates are C ints).
  const bool planar_rows = a.sW == 1 && a.H < (int64_t{1} << 31) && a.W < (int64_t{1} << 31);
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t n = row / a.H, y = row % a.H;
    const double* m = a.matrices + n * kPilAffineMatrixFields;
    const double cy = pil_add(static_cast<double>(y), 0.5);
    const double m1cy = pil_mul(m[1], cy), m4cy = pil_mul(m[4], cy);
    const uint8_t* src = a.images + n * a.sN;
    uint8_t* dst = a.out + (n * a.C * a.H + y) * a.W;
    int64_t x = 0;
    for (; x + kLanes <= a.W; x += kLanes) {
      double dx[kLanes];
      __m256d dy;
      int64_t corner[kLanes];
      if (a.bicubic && planar_rows && interior4(a, m, m1cy, m4cy, x, dx, &dy, corner)) {
        bicubic4(a, dx, dy, dst + x, plane, [&](int64_t c, int i, int k) {
          return four_taps(src + c * a.sC + corner[i] + k * a.sH);
        });
        continue;
      }
      Taps taps[kLanes];
      double dys[kLanes];
      bool inside = a.bicubic;
      for (int i = 0; i < kLanes && inside; ++i) inside = taps_of(a, m, cy, x + i, &taps[i], &dys[i]);
      if (inside) {
        for (int i = 0; i < kLanes; ++i) dx[i] = taps[i].dx;
        bicubic4(a, dx, _mm256_loadu_pd(dys), dst + x, plane, [&](int64_t c, int i, int k) {
          return row_taps(src + c * a.sC + taps[i].rows[k], taps[i]);
        });
      } else {
        for (int i = 0; i < kLanes; ++i) pil_affine_pixel<0>(a, n, y, x + i);
      }
    }
    for (; x < a.W; ++x) pil_affine_pixel<0>(a, n, y, x);
  }
}

}  // namespace kernels
}  // namespace prefetch

#pragma GCC pop_options
#endif  // PREFETCH_AVX2_BUILD
