// CPU twin of affine_warp.cu. Nearest: every output pixel is affine_warp_pixel, the code each
// CUDA thread runs. Bilinear: the same operations in the same order (so the same bytes; the C++
// tests compare the two over every pixel), regrouped by phase over chunks of a row so that the
// compiler vectorises the arithmetic: the source points, taps and weights of kChunk pixels at
// once, then per channel the four taps read (the one scalar phase: gathers at arbitrary points),
// then the blend, fill, rounding and store. The pixel-at-a-time form cost ~21 ns a pixel
// (`python benchmarks/policy_op_costs.py`, Rotate and Shear). Built for the baseline ISA: an FMA build would contract
// the products and sums that must round one at a time. Where the CPU has AVX2, the rows go to
// affine_warp_cpu_avx2.cpp instead (eight pixels a step, the taps read by gathers; no FMA there
// either), but for the whole-pixel shifts, which are copies.
#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

// Before the kernel's own headers, so their inline functions vectorise their selects too.
#include "common/vectorise_selects.h"

#include "affine_warp/affine_warp.h"
#include "affine_warp/affine_warp_thread_work.h"
#include "common/cpu_dispatch.h"

namespace prefetch {
namespace kernels {

#if PREFETCH_AVX2_BUILD
// False where that build does not take these arguments (bilinear with sW != 1, offsets past int32).
bool affine_warp_rows_avx2(const AffineWarpArgs& a, int64_t row_begin, int64_t row_end);
#endif

namespace {

constexpr int kChunk = 64;

template <int kChannels>
void nearest_rows(const AffineWarpArgs& a, int64_t row_begin, int64_t row_end) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t n = row / a.H, y = row % a.H;
    for (int64_t x = 0; x < a.W; ++x) affine_warp_pixel<kChannels>(a, n, y, x);
  }
}

// A chunk's taps and weights, as arrays.
struct ChunkTaps {
  alignas(64) float w_nw[kChunk], w_ne[kChunk], w_sw[kChunk], w_se[kChunk], inside[kChunk];
  alignas(64) int32_t x0[kChunk], x1[kChunk], y0[kChunk], y1[kChunk];
};

// warp_bilinear_taps (affine_warp_thread_work.h) of output pixels [begin, begin + len) of a row,
// whose m_x fx + m_y_fy + m_c are the source points. The scalar form is the reference; the SSE2
// form (the baseline of x86-64, four pixels at a time) performs the same float operations in the
// same order, each rounded on its own, and selects where the scalar form selects: the same bits
// (tests/cpp/affine_warp_test.cpp compares the kernel with the per-pixel thread work). The
// compiler does not vectorise the scalar form (its boolean selects of mixed widths).
void chunk_taps(float m0, float m1y, float m2, float m3, float m4y, float m5, int32_t begin, int len, float fW,
                float fH, ChunkTaps* t) {
  int i = 0;
#if defined(__SSE2__)
  const __m128 zero = _mm_setzero_ps(), one = _mm_set1_ps(1.0f), magic = _mm_set1_ps(kWarpRoundMagic);
  const __m128 minus_two = _mm_set1_ps(-2.0f), far = _mm_set1_ps(-2.5f);
  const __m128 vW = _mm_set1_ps(fW), vH = _mm_set1_ps(fH);
  const __m128 near_W = _mm_add_ps(vW, _mm_set1_ps(2.0f)), near_H = _mm_add_ps(vH, _mm_set1_ps(2.0f));
  const __m128 vm0 = _mm_set1_ps(m0), vm1y = _mm_set1_ps(m1y), vm2 = _mm_set1_ps(m2);
  const __m128 vm3 = _mm_set1_ps(m3), vm4y = _mm_set1_ps(m4y), vm5 = _mm_set1_ps(m5);
  const __m128 sign = _mm_set1_ps(-0.0f);
  auto negate = [&](__m128 v) { return _mm_xor_ps(v, sign); };  // exactly -v, as the scalar form
  auto select = [](__m128 mask, __m128 a, __m128 b) { return _mm_or_ps(_mm_and_ps(mask, a), _mm_andnot_ps(mask, b)); };
  auto floor4 = [&](__m128 v) {  // warp_floor
    const __m128 r = _mm_sub_ps(_mm_add_ps(v, magic), magic);
    return select(_mm_cmpgt_ps(r, v), _mm_add_ps(r, _mm_set1_ps(-1.0f)), r);
  };
  auto inside = [&](__m128 v, __m128 side) {  // 1.0 or 0.0
    return _mm_and_ps(_mm_and_ps(_mm_cmpge_ps(v, zero), _mm_cmplt_ps(v, side)), one);
  };
  for (; i + 4 <= len; i += 4) {
    const __m128 fx = _mm_cvtepi32_ps(_mm_add_epi32(_mm_set1_epi32(begin + i), _mm_setr_epi32(0, 1, 2, 3)));
    const __m128 sx = _mm_add_ps(_mm_add_ps(_mm_mul_ps(vm0, fx), vm1y), vm2);
    const __m128 sy = _mm_add_ps(_mm_add_ps(_mm_mul_ps(vm3, fx), vm4y), vm5);
    const __m128 near = _mm_and_ps(_mm_and_ps(_mm_cmpge_ps(sx, minus_two), _mm_cmplt_ps(sx, near_W)),
                                   _mm_and_ps(_mm_cmpge_ps(sy, minus_two), _mm_cmplt_ps(sy, near_H)));
    const __m128 px = select(near, sx, far), py = select(near, sy, far);
    const __m128 x0 = floor4(px), y0 = floor4(py);
    const __m128 x1 = _mm_add_ps(x0, one), y1 = _mm_add_ps(y0, one);
    const __m128 wx1 = _mm_add_ps(px, negate(x0)), wx0 = _mm_add_ps(x1, negate(px));
    const __m128 wy1 = _mm_add_ps(py, negate(y0)), wy0 = _mm_add_ps(y1, negate(py));
    const __m128 in_x0 = inside(x0, vW), in_x1 = inside(x1, vW), in_y0 = inside(y0, vH), in_y1 = inside(y1, vH);
    const __m128 nw = _mm_mul_ps(_mm_mul_ps(wx0, wy0), _mm_mul_ps(in_x0, in_y0));
    const __m128 ne = _mm_mul_ps(_mm_mul_ps(wx1, wy0), _mm_mul_ps(in_x1, in_y0));
    const __m128 sw = _mm_mul_ps(_mm_mul_ps(wx0, wy1), _mm_mul_ps(in_x0, in_y1));
    const __m128 se = _mm_mul_ps(_mm_mul_ps(wx1, wy1), _mm_mul_ps(in_x1, in_y1));
    _mm_store_ps(t->w_nw + i, nw);
    _mm_store_ps(t->w_ne + i, ne);
    _mm_store_ps(t->w_sw + i, sw);
    _mm_store_ps(t->w_se + i, se);
    _mm_store_ps(t->inside + i, _mm_add_ps(_mm_add_ps(_mm_add_ps(nw, ne), sw), se));
    _mm_store_si128(reinterpret_cast<__m128i*>(t->x0 + i), _mm_cvttps_epi32(_mm_mul_ps(x0, in_x0)));
    _mm_store_si128(reinterpret_cast<__m128i*>(t->x1 + i), _mm_cvttps_epi32(_mm_mul_ps(x1, in_x1)));
    _mm_store_si128(reinterpret_cast<__m128i*>(t->y0 + i), _mm_cvttps_epi32(_mm_mul_ps(y0, in_y0)));
    _mm_store_si128(reinterpret_cast<__m128i*>(t->y1 + i), _mm_cvttps_epi32(_mm_mul_ps(y1, in_y1)));
  }
#endif
  for (; i < len; ++i) {
    const float fx = static_cast<float>(begin + i);
    const WarpTaps one = warp_bilinear_taps(warp_source(m0, fx, m1y, m2), warp_source(m3, fx, m4y, m5), fW, fH);
    t->w_nw[i] = one.w_nw, t->w_ne[i] = one.w_ne, t->w_sw[i] = one.w_sw, t->w_se[i] = one.w_se;
    t->inside[i] = one.inside;
    t->x0[i] = one.x0, t->x1[i] = one.x1, t->y0[i] = one.y0, t->y1[i] = one.y1;
  }
}

template <int kChannels>
void bilinear_rows(const AffineWarpArgs& a, int64_t row_begin, int64_t row_end) {
  const int64_t C = kChannels > 0 ? kChannels : a.C, H = a.H, W = a.W, sC = a.sC, sH = a.sH, sW = a.sW;
  const bool has_fill = a.has_fill;
  const float fW = static_cast<float>(W), fH = static_cast<float>(H);
  ChunkTaps t;
  // The four taps' values of a group of channels (bytes: the blend loop converts them to float,
  // vectorised), and the blended values. The gathers, the one scalar phase, read a pixel's taps
  // of kGroup channels at once: its offsets are computed once for them.
  constexpr int kGroup = kChannels > 0 ? kChannels : 1;
  alignas(64) uint8_t b_nw[kGroup][kChunk], b_ne[kGroup][kChunk], b_sw[kGroup][kChunk], b_se[kGroup][kChunk];
  alignas(64) float v[kChunk];
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t n = row / H, y = row % H;
    const float* m = a.matrices + n * kWarpMatrixFields;
    const float fy = static_cast<float>(y);
    const float m1y = mul_rn(m[1], fy), m4y = mul_rn(m[4], fy);
    const uint8_t* src = a.images + n * a.sN;
    for (int64_t begin = 0; begin < W; begin += kChunk) {
      const int len = static_cast<int>(std::min<int64_t>(kChunk, W - begin));
      chunk_taps(m[0], m1y, m[2], m[3], m4y, m[5], static_cast<int32_t>(begin), len, fW, fH, &t);  // sides < 2^21
      for (int64_t c0 = 0; c0 < C; c0 += kGroup) {
        for (int i = 0; i < len; ++i) {
          const int64_t r0 = t.y0[i] * sH, r1 = t.y1[i] * sH, x0 = t.x0[i] * sW, x1 = t.x1[i] * sW;
          if (sW == 1 && t.x1[i] == t.x0[i] + 1) {
            // Both columns inside (an outside tap's index is 0): each row's two taps are adjacent
            // bytes, read as one 16-bit load (Rotate ~267 -> ~245 us an image: policy_op_costs.py).
            for (int k = 0; k < kGroup; ++k) {
              const uint8_t* p = src + (c0 + k) * sC;
              uint8_t top[2], bottom[2];
              std::memcpy(top, p + r0 + x0, 2);
              std::memcpy(bottom, p + r1 + x0, 2);
              b_nw[k][i] = top[0], b_ne[k][i] = top[1], b_sw[k][i] = bottom[0], b_se[k][i] = bottom[1];
            }
            continue;
          }
          for (int k = 0; k < kGroup; ++k) {
            const uint8_t* p = src + (c0 + k) * sC;
            b_nw[k][i] = p[r0 + x0], b_ne[k][i] = p[r0 + x1], b_sw[k][i] = p[r1 + x0], b_se[k][i] = p[r1 + x1];
          }
        }
        for (int k = 0; k < kGroup; ++k) {
          const int64_t c = c0 + k;
          for (int i = 0; i < len; ++i) {
            v[i] = warp_sum(b_nw[k][i], b_ne[k][i], b_sw[k][i], b_se[k][i], t.w_nw[i], t.w_ne[i], t.w_sw[i], t.w_se[i]);
          }
          if (has_fill) {
            const float fill = a.fill[c];
            for (int i = 0; i < len; ++i) v[i] = warp_filled(v[i], t.inside[i], fill);
          }
          uint8_t* dst = a.out + ((n * C + c) * H + y) * W + begin;
          for (int i = 0; i < len; ++i) dst[i] = warp_to_uint8(v[i]);
        }
      }
    }
  }
}

// Whether image n's map is a shift by whole pixels (the policies' TranslateX/Y, whose
// torchvision magnitudes are whole): then every source point is a pixel centre, exactly, in the
// float32 arithmetic of affine_warp_pixel (x + whole numbers below 2^22), its bilinear weights are
// exactly 1 and 0, its fill blend is exact, and nearest and bilinear both read that pixel or write
// the fill: a copy of the shifted rows writes the same bytes, at a fraction of the cost.
bool whole_shift(const AffineWarpArgs& a, int64_t n, int64_t* dx, int64_t* dy) {
  const float* m = a.matrices + n * kWarpMatrixFields;
  const float limit = static_cast<float>(kWarpMaxSide);
  if (m[0] != 1.0f || m[1] != 0.0f || m[3] != 0.0f || m[4] != 1.0f) return false;
  if (!(m[2] > -limit && m[2] < limit && m[5] > -limit && m[5] < limit)) return false;
  if (warp_round(m[2]) != m[2] || warp_round(m[5]) != m[5]) return false;
  *dx = static_cast<int64_t>(m[2]), *dy = static_cast<int64_t>(m[5]);
  return true;
}

// Row (n, y) of a whole-pixel shift: output pixel x reads source (x + dx, y + dy).
void shifted_row(const AffineWarpArgs& a, int64_t n, int64_t y, int64_t dx, int64_t dy) {
  const int64_t W = a.W, sy = y + dy;
  const int64_t first = std::min(W, std::max<int64_t>(0, -dx)), last = std::max(first, std::min(W, W - dx));
  const bool row_inside = sy >= 0 && sy < a.H;
  for (int64_t c = 0; c < a.C; ++c) {
    uint8_t* dst = a.out + ((n * a.C + c) * a.H + y) * W;
    const uint8_t fill = a.has_fill ? warp_to_uint8(a.fill[c]) : uint8_t{0};
    if (!row_inside) {
      std::fill(dst, dst + W, fill);
      continue;
    }
    const uint8_t* src = a.images + n * a.sN + c * a.sC + sy * a.sH;
    std::fill(dst, dst + first, fill);
    if (a.sW == 1) {
      std::copy(src + first + dx, src + last + dx, dst + first);
    } else {
      for (int64_t x = first; x < last; ++x) dst[x] = src[(x + dx) * a.sW];
    }
    std::fill(dst + last, dst + W, fill);
  }
}

bool avx2_rows(const AffineWarpArgs& a, int64_t row_begin, int64_t row_end) {
#if PREFETCH_AVX2_BUILD
  return use_avx2_build() && affine_warp_rows_avx2(a, row_begin, row_end);
#else
  (void)a, (void)row_begin, (void)row_end;
  return false;
#endif
}

template <int kChannels>
void rows(const AffineWarpArgs& a, int64_t row_begin, int64_t row_end) {
  for (int64_t row = row_begin; row < row_end;) {
    // A run of rows of one image: its whole-pixel shift, or the kernel of its interpolation (the
    // AVX2 build's where it takes them).
    const int64_t n = row / a.H, end = std::min(row_end, (n + 1) * a.H);
    int64_t dx, dy;
    if (whole_shift(a, n, &dx, &dy)) {
      for (int64_t r = row; r < end; ++r) shifted_row(a, n, r - n * a.H, dx, dy);
    } else if (!avx2_rows(a, row, end)) {
      if (a.bilinear) bilinear_rows<kChannels>(a, row, end);
      else nearest_rows<kChannels>(a, row, end);
    }
    row = end;
  }
}

}  // namespace

void affine_warp_cpu(const AffineWarpArgs& args, int64_t row_begin, int64_t row_end) {
  if (args.C == 3) rows<3>(args, row_begin, row_end);
  else if (args.C == 1) rows<1>(args, row_begin, row_end);
  else rows<0>(args, row_begin, row_end);
}

}  // namespace kernels
}  // namespace prefetch
