// One output pixel of affine_warp (every channel): the whole of a CUDA thread's work, and the
// pieces the CPU kernel is made of (it runs the nearest pixel as it is, and the bilinear one phase
// by phase over chunks of a row, affine_warp_cpu.cpp). __host__ __device__, so the CPU tests run
// this exact code over every thread of every launch and compare it with the CPU kernel
// (tests/cpp/affine_warp_test.cpp); affine_warp.cu only maps threads onto it.
#pragma once
#include <cstdint>

#include "affine_warp/affine_warp.h"
#include "common/host_device.h"
#include "common/round_each.h"

namespace prefetch {
namespace kernels {

// Rounding to whole numbers by adding and subtracting 1.5 * 2^23, exact for |v| < 2^22 (the
// float32 sum keeps no fraction, rounded half to even in the default rounding mode): the baseline
// x86-64 build has no rounding instruction (SSE4.1), and std::floor / std::nearbyint there are
// library calls that cost more than the whole bilinear blend. Callers keep |v| < 2^22: the plan
// limits sides to kWarpMaxSide, coordinates outside [-2, side + 2) are outside before rounding,
// and values are clamped to [0, 255] first.
constexpr float kWarpRoundMagic = 12582912.0f;

PF_HD float warp_round(float v) { return add_rn(add_rn(v, kWarpRoundMagic), -kWarpRoundMagic); }

// Every value computed, then selected: the compiler may then vectorise the CPU loops (it does not
// speculate float operations that a branch guards).
PF_HD float warp_floor(float v) {
  const float r = warp_round(v), below = add_rn(r, -1.0f);
  return r > v ? below : r;
}

// Clamped to [0, 255] (NaN, from a map that is not finite, to 0), then rounded half to even as
// torch.round.
PF_HD uint8_t warp_to_uint8(float v) {
  const float low = v >= 0.0f ? v : 0.0f;
  const float clamped = low > 255.0f ? 255.0f : low;
  return static_cast<uint8_t>(warp_round(clamped));
}

// Whether a source coordinate lies in [-2, side + 2): where rounding and flooring are exact, and
// beyond which every tap is outside anyway. False for NaN.
PF_HD bool warp_near(float v, float side) { return (v >= -2.0f) & (v < add_rn(side, 2.0f)); }

// The source coordinate of an output pixel: (m_x * fx + m_y_fy) + m_c, where m_y_fy is the
// product of the other coefficient with the other pixel coordinate (a row loop computes it once).
PF_HD float warp_source(float m_x, float fx, float m_y_fy, float m_c) {
  return add_rn(add_rn(mul_rn(m_x, fx), m_y_fy), m_c);
}

// A bilinear sample's four taps (grid_sample's nw, ne, sw, se) and weights. A tap outside the
// image has weight 0 and reads offset 0: adding its 0 leaves every sum as skipping it would.
struct WarpTaps {
  float w_nw, w_ne, w_sw, w_se;
  float inside;  // the sum of the inside weights (torchvision's fill mask)
  int32_t x0, x1, y0, y1;
};

// fW, fH: the image's width and height as floats (exact: sides are below 2^21).
PF_HD WarpTaps warp_bilinear_taps(float sx, float sy, float fW, float fH) {
  // A point far outside (or not finite) is moved to (-2.5, -2.5), where all four taps are
  // outside and every weight is finite; a point near the image is kept as it is.
  const bool near_x = warp_near(sx, fW), near_y = warp_near(sy, fH);
  const bool near = near_x & near_y;  // (no short circuit: the CPU loops vectorise)
  const float px = near ? sx : -2.5f, py = near ? sy : -2.5f;
  const float x0 = warp_floor(px), y0 = warp_floor(py);
  const float x1 = add_rn(x0, 1.0f), y1 = add_rn(y0, 1.0f);
  const float wx1 = add_rn(px, -x0), wx0 = add_rn(x1, -px);
  const float wy1 = add_rn(py, -y0), wy0 = add_rn(y1, -py);
  // Inside masks as 1.0 or 0.0: a weight times its tap's masks is the weight or 0 exactly (the
  // weights are finite), and the compiler vectorises products where it does not vectorise
  // selects on boolean masks.
  const float in_x0 = ((x0 >= 0.0f) & (x0 < fW)) ? 1.0f : 0.0f, in_x1 = ((x1 >= 0.0f) & (x1 < fW)) ? 1.0f : 0.0f;
  const float in_y0 = ((y0 >= 0.0f) & (y0 < fH)) ? 1.0f : 0.0f, in_y1 = ((y1 >= 0.0f) & (y1 < fH)) ? 1.0f : 0.0f;
  WarpTaps t;
  t.w_nw = mul_rn(mul_rn(wx0, wy0), mul_rn(in_x0, in_y0));
  t.w_ne = mul_rn(mul_rn(wx1, wy0), mul_rn(in_x1, in_y0));
  t.w_sw = mul_rn(mul_rn(wx0, wy1), mul_rn(in_x0, in_y1));
  t.w_se = mul_rn(mul_rn(wx1, wy1), mul_rn(in_x1, in_y1));
  t.inside = add_rn(add_rn(add_rn(t.w_nw, t.w_ne), t.w_sw), t.w_se);
  // Whole floats below 2^22 convert exactly; an outside tap's index is 0 (never weighed).
  t.x0 = static_cast<int32_t>(mul_rn(x0, in_x0));
  t.x1 = static_cast<int32_t>(mul_rn(x1, in_x1));
  t.y0 = static_cast<int32_t>(mul_rn(y0, in_y0));
  t.y1 = static_cast<int32_t>(mul_rn(y1, in_y1));
  return t;
}

// One channel's weighted sum of its four tap values, in grid_sample's order.
PF_HD float warp_sum(float p_nw, float p_ne, float p_sw, float p_se, float w_nw, float w_ne, float w_sw,
                     float w_se) {
  float v = mul_rn(p_nw, w_nw);
  v = add_rn(v, mul_rn(p_ne, w_ne));
  v = add_rn(v, mul_rn(p_sw, w_sw));
  return add_rn(v, mul_rn(p_se, w_se));
}

// The fill blended in by the inside weight, as torchvision does: (v - fill) * mask + fill.
PF_HD float warp_filled(float v, float inside, float fill) {
  return add_rn(mul_rn(add_rn(v, -fill), inside), fill);
}

// Output pixel (n, y, x), every channel: a CUDA thread's work, and the CPU kernel's for nearest
// (its bilinear loop calls the same pieces phase by phase, affine_warp_cpu.cpp).
// kChannels: the channel count when known at compile time (1 or 3, what policy images have), 0
// for any (a.C).
template <int kChannels = 0>
PF_HD void affine_warp_pixel(const AffineWarpArgs& a, int64_t n, int64_t y, int64_t x) {
  // The fields as locals: every uint8 store may alias the arguments for the compiler, which would
  // otherwise reload them after each one.
  const int64_t C = kChannels > 0 ? kChannels : a.C, H = a.H, W = a.W, sC = a.sC, sH = a.sH, sW = a.sW;
  const bool has_fill = a.has_fill;
  const float* m = a.matrices + n * kWarpMatrixFields;
  const float fx = static_cast<float>(x), fy = static_cast<float>(y);
  const float sx = warp_source(m[0], fx, mul_rn(m[1], fy), m[2]);
  const float sy = warp_source(m[3], fx, mul_rn(m[4], fy), m[5]);
  const uint8_t* src = a.images + n * a.sN;
  uint8_t* dst = a.out + ((n * C) * H + y) * W + x;
  const int64_t plane = H * W;
  const float fW = static_cast<float>(W), fH = static_cast<float>(H);
  if (!a.bilinear) {
    const bool near_x = warp_near(sx, fW), near_y = warp_near(sy, fH);
    const bool near = near_x & near_y;
    const float rx = near ? warp_round(sx) : -1.0f, ry = near ? warp_round(sy) : -1.0f;
    const bool inside = (rx >= 0.0f) & (rx < fW) & (ry >= 0.0f) & (ry < fH);
    const uint8_t* p = inside ? src + static_cast<int64_t>(ry) * sH + static_cast<int64_t>(rx) * sW : src;
    for (int64_t c = 0; c < C; ++c) {
      dst[c * plane] = inside ? p[c * sC] : (has_fill ? warp_to_uint8(a.fill[c]) : uint8_t{0});
    }
    return;
  }
  const WarpTaps t = warp_bilinear_taps(sx, sy, fW, fH);
  const int64_t r0 = t.y0 * sH, r1 = t.y1 * sH, c0 = t.x0 * sW, c1 = t.x1 * sW;
  for (int64_t c = 0; c < C; ++c) {
    const uint8_t* p = src + c * sC;
    const float v = warp_sum(p[r0 + c0], p[r0 + c1], p[r1 + c0], p[r1 + c1], t.w_nw, t.w_ne, t.w_sw, t.w_se);
    dst[c * plane] = warp_to_uint8(has_fill ? warp_filled(v, t.inside, a.fill[c]) : v);
  }
}

// A CUDA thread: pixel (n, y, x) of the launches common/plane_rows.h numbers with C = 1 (a row is
// every channel of one (n, y): the pixel's taps are computed once for all of them).
template <int kChannels>
struct AffineWarpThread {
  AffineWarpArgs a;
  PF_HD void operator()(int64_t n, int64_t /*c*/, int64_t y, int64_t x) const {
    affine_warp_pixel<kChannels>(a, n, y, x);
  }
};

}  // namespace kernels
}  // namespace prefetch
