// The CPU affine_warp built for AVX2 (x86-64 only; affine_warp_cpu.cpp calls it when the CPU has
// it): eight output pixels at a time, their taps read with vpgatherdd instead of scalar byte loads
// (perf put the baseline's gathers and the bookkeeping around them at two thirds of a Rotate).
// The arithmetic is affine_warp_thread_work.h's, operation by operation, each rounded alone: the
// target has no FMA, so nothing can be contracted, and the selects mirror the thread work's. The
// C++ tests compare every byte with the per-pixel thread work (tests/cpp/affine_warp_test.cpp).
//
// A gather reads 4 bytes at each lane's offset, where the thread work reads 1 (nearest) or 2
// (bilinear: a row's two taps, adjacent in planar rows). The extra bytes are never used, but they
// must be readable: a group whose reads could leave the tensor's extent (the first and last bytes
// of its storage, which every byte between them belongs to) is done by the thread work, pixel by
// pixel, instead.
#include "common/cpu_dispatch.h"
#if PREFETCH_AVX2_BUILD
#include <algorithm>
#include <cstdint>
#include <limits>

#include "affine_warp/affine_warp.h"
#include "affine_warp/affine_warp_thread_work.h"

#pragma GCC push_options
#pragma GCC target("avx2")
#include <immintrin.h>

namespace prefetch {
namespace kernels {

namespace {

constexpr int kLanes = 8;

// The offsets, from a channel plane's first byte, at which a 4-byte read stays inside the tensor
// for every channel of image n: [lo, hi], clamped to int32.
struct ReadRange {
  __m256i lo, hi;
};

ReadRange read_range(const AffineWarpArgs& a, int64_t n) {
  const int64_t last = (a.N - 1) * a.sN + (a.C - 1) * a.sC + (a.H - 1) * a.sH + (a.W - 1) * a.sW;
  const int64_t first_plane = n * a.sN, last_plane = n * a.sN + (a.C - 1) * a.sC;
  const int64_t lo = std::max<int64_t>(-first_plane, std::numeric_limits<int32_t>::min());
  const int64_t hi = std::min<int64_t>(last - 3 - last_plane, std::numeric_limits<int32_t>::max());
  return {_mm256_set1_epi32(static_cast<int32_t>(lo)), _mm256_set1_epi32(static_cast<int32_t>(hi))};
}

// Whether every lane's 4-byte read at `offsets` stays inside the tensor.
bool readable(const ReadRange& r, __m256i offsets) {
  const __m256i outside = _mm256_or_si256(_mm256_cmpgt_epi32(r.lo, offsets), _mm256_cmpgt_epi32(offsets, r.hi));
  return _mm256_testz_si256(outside, outside);
}

__m256 select(__m256 mask, __m256 a, __m256 b) { return _mm256_blendv_ps(b, a, mask); }

// warp_round, warp_floor and warp_to_uint8 (as int32) over eight lanes.
__m256 round8(__m256 v) {
  const __m256 magic = _mm256_set1_ps(kWarpRoundMagic);
  return _mm256_sub_ps(_mm256_add_ps(v, magic), magic);
}
__m256 floor8(__m256 v) {
  const __m256 r = round8(v);
  return select(_mm256_cmp_ps(r, v, _CMP_GT_OQ), _mm256_add_ps(r, _mm256_set1_ps(-1.0f)), r);
}
__m256i to_uint8_lanes(__m256 v) {
  // max(v, 0) is 0 for NaN as `v >= 0 ? v : 0` is; for -0 it is +0 where the select keeps -0,
  // which rounds to the same 0.
  const __m256 low = _mm256_max_ps(v, _mm256_setzero_ps());
  return _mm256_cvttps_epi32(round8(_mm256_min_ps(low, _mm256_set1_ps(255.0f))));
}

// Eight int32 lanes in [0, 255] stored as eight bytes.
void store8(uint8_t* dst, __m256i v) {
  const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packus_epi16(words, words));
}

__m256i gather4(const uint8_t* base, __m256i offsets) {
  return _mm256_i32gather_epi32(reinterpret_cast<const int*>(base), offsets, 1);
}

// The source points of pixels x .. x + 7 of a row: warp_source.
struct Points {
  __m256 sx, sy, near;
};

Points points(const float* m, float m1y, float m4y, int64_t x, float fW, float fH) {
  const __m256 fx = _mm256_cvtepi32_ps(
      _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(x)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
  Points p;
  p.sx = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(m[0]), fx), _mm256_set1_ps(m1y)),
                       _mm256_set1_ps(m[2]));
  p.sy = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(m[3]), fx), _mm256_set1_ps(m4y)),
                       _mm256_set1_ps(m[5]));
  const __m256 minus_two = _mm256_set1_ps(-2.0f);
  const __m256 near_x = _mm256_and_ps(_mm256_cmp_ps(p.sx, minus_two, _CMP_GE_OQ),
                                      _mm256_cmp_ps(p.sx, _mm256_set1_ps(add_rn(fW, 2.0f)), _CMP_LT_OQ));
  const __m256 near_y = _mm256_and_ps(_mm256_cmp_ps(p.sy, minus_two, _CMP_GE_OQ),
                                      _mm256_cmp_ps(p.sy, _mm256_set1_ps(add_rn(fH, 2.0f)), _CMP_LT_OQ));
  p.near = _mm256_and_ps(near_x, near_y);
  return p;
}

// Lanes whose whole coordinate lies in [0, side): all ones, else zero.
__m256 inside_mask(__m256 v, float side) {
  return _mm256_and_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GE_OQ),
                       _mm256_cmp_ps(v, _mm256_set1_ps(side), _CMP_LT_OQ));
}

// affine_warp_pixel's nearest branch over eight pixels, any strides.
bool nearest8(const AffineWarpArgs& a, const ReadRange& range, const Points& p, const uint8_t* src, uint8_t* dst,
              int64_t plane, float fW, float fH) {
  const __m256 minus_one = _mm256_set1_ps(-1.0f);
  const __m256 rx = select(p.near, round8(p.sx), minus_one), ry = select(p.near, round8(p.sy), minus_one);
  const __m256 inside = _mm256_and_ps(inside_mask(rx, fW), inside_mask(ry, fH));
  const __m256i in = _mm256_castps_si256(inside);
  // Outside lanes read offset 0, as the thread work's pointer does.
  const __m256i ix = _mm256_and_si256(_mm256_cvttps_epi32(rx), in), iy = _mm256_and_si256(_mm256_cvttps_epi32(ry), in);
  const __m256i offsets = _mm256_add_epi32(_mm256_mullo_epi32(iy, _mm256_set1_epi32(static_cast<int32_t>(a.sH))),
                                           _mm256_mullo_epi32(ix, _mm256_set1_epi32(static_cast<int32_t>(a.sW))));
  if (!readable(range, offsets)) return false;
  const __m256i low_byte = _mm256_set1_epi32(0xff);
  for (int64_t c = 0; c < a.C; ++c) {
    const __m256i value = _mm256_and_si256(gather4(src + c * a.sC, offsets), low_byte);
    const __m256i fill = _mm256_set1_epi32(a.has_fill ? warp_to_uint8(a.fill[c]) : 0);
    store8(dst + c * plane, _mm256_blendv_epi8(fill, value, in));
  }
  return true;
}

// affine_warp_pixel's bilinear branch (warp_bilinear_taps, warp_sum, warp_filled) over eight
// pixels of planar rows (sW == 1): a row's two taps are the first two bytes of one 4-byte read
// at the left tap's column, which is clamped to [-1, W - 1] — where a tap is outside, its weight is
// 0 and its value is not used (the thread work reads offset 0 there, adding the same 0).
bool bilinear8(const AffineWarpArgs& a, const ReadRange& range, const Points& p, const uint8_t* src, uint8_t* dst,
               int64_t plane, float fW, float fH) {
  const __m256 one = _mm256_set1_ps(1.0f), far = _mm256_set1_ps(-2.5f);
  const __m256 px = select(p.near, p.sx, far), py = select(p.near, p.sy, far);
  const __m256 x0 = floor8(px), y0 = floor8(py);
  const __m256 x1 = _mm256_add_ps(x0, one), y1 = _mm256_add_ps(y0, one);
  const __m256 wx1 = _mm256_sub_ps(px, x0), wx0 = _mm256_sub_ps(x1, px);
  const __m256 wy1 = _mm256_sub_ps(py, y0), wy0 = _mm256_sub_ps(y1, py);
  const __m256 in_x0 = _mm256_and_ps(inside_mask(x0, fW), one), in_x1 = _mm256_and_ps(inside_mask(x1, fW), one);
  const __m256 in_y0 = _mm256_and_ps(inside_mask(y0, fH), one), in_y1 = _mm256_and_ps(inside_mask(y1, fH), one);
  const __m256 w_nw = _mm256_mul_ps(_mm256_mul_ps(wx0, wy0), _mm256_mul_ps(in_x0, in_y0));
  const __m256 w_ne = _mm256_mul_ps(_mm256_mul_ps(wx1, wy0), _mm256_mul_ps(in_x1, in_y0));
  const __m256 w_sw = _mm256_mul_ps(_mm256_mul_ps(wx0, wy1), _mm256_mul_ps(in_x0, in_y1));
  const __m256 w_se = _mm256_mul_ps(_mm256_mul_ps(wx1, wy1), _mm256_mul_ps(in_x1, in_y1));
  const __m256 inside = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(w_nw, w_ne), w_sw), w_se);
  const __m256i sH = _mm256_set1_epi32(static_cast<int32_t>(a.sH));
  const __m256i r0 = _mm256_mullo_epi32(_mm256_cvttps_epi32(_mm256_mul_ps(y0, in_y0)), sH);
  const __m256i r1 = _mm256_mullo_epi32(_mm256_cvttps_epi32(_mm256_mul_ps(y1, in_y1)), sH);
  const __m256i left = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvttps_epi32(x0), _mm256_set1_epi32(-1)),
                                        _mm256_set1_epi32(static_cast<int32_t>(a.W - 1)));
  const __m256i top_offsets = _mm256_add_epi32(r0, left), bottom_offsets = _mm256_add_epi32(r1, left);
  if (!readable(range, top_offsets) || !readable(range, bottom_offsets)) return false;
  const __m256i low_byte = _mm256_set1_epi32(0xff);
  for (int64_t c = 0; c < a.C; ++c) {
    const uint8_t* base = src + c * a.sC;
    const __m256i top = gather4(base, top_offsets), bottom = gather4(base, bottom_offsets);
    const __m256 nw = _mm256_cvtepi32_ps(_mm256_and_si256(top, low_byte));
    const __m256 ne = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(top, 8), low_byte));
    const __m256 sw = _mm256_cvtepi32_ps(_mm256_and_si256(bottom, low_byte));
    const __m256 se = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(bottom, 8), low_byte));
    __m256 v = _mm256_mul_ps(nw, w_nw);
    v = _mm256_add_ps(v, _mm256_mul_ps(ne, w_ne));
    v = _mm256_add_ps(v, _mm256_mul_ps(sw, w_sw));
    v = _mm256_add_ps(v, _mm256_mul_ps(se, w_se));
    if (a.has_fill) {
      const __m256 fill = _mm256_set1_ps(a.fill[c]);
      v = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(v, fill), inside), fill);
    }
    store8(dst + c * plane, to_uint8_lanes(v));
  }
  return true;
}

}  // namespace

bool affine_warp_rows_avx2(const AffineWarpArgs& a, int64_t row_begin, int64_t row_end) {
  // Offsets in int32 lanes: every lane's offset, outside points' included, below 2^31.
  const int64_t reach = (a.H + 2) * a.sH + (a.W + 2) * a.sW + 4;
  if (reach >= (int64_t{1} << 31) || (a.bilinear && a.sW != 1)) return false;
  const float fW = static_cast<float>(a.W), fH = static_cast<float>(a.H);
  const int64_t plane = a.H * a.W;
  for (int64_t row = row_begin; row < row_end;) {
    const int64_t n = row / a.H, end = std::min(row_end, (n + 1) * a.H);
    const ReadRange range = read_range(a, n);
    const float* m = a.matrices + n * kWarpMatrixFields;
    const uint8_t* src = a.images + n * a.sN;
    for (; row < end; ++row) {
      const int64_t y = row - n * a.H;
      const float fy = static_cast<float>(y);
      const float m1y = mul_rn(m[1], fy), m4y = mul_rn(m[4], fy);
      uint8_t* dst = a.out + (n * a.C * a.H + y) * a.W;
      int64_t x = 0;
      for (; x + kLanes <= a.W; x += kLanes) {
        const Points p = points(m, m1y, m4y, x, fW, fH);
        const bool done = a.bilinear ? bilinear8(a, range, p, src, dst + x, plane, fW, fH)
                                     : nearest8(a, range, p, src, dst + x, plane, fW, fH);
        if (!done) {
          for (int i = 0; i < kLanes; ++i) affine_warp_pixel<0>(a, n, y, x + i);
        }
      }
      for (; x < a.W; ++x) affine_warp_pixel<0>(a, n, y, x);
    }
  }
  return true;
}

}  // namespace kernels
}  // namespace prefetch

#pragma GCC pop_options
#endif  // PREFETCH_AVX2_BUILD
