// One output pixel of pil_affine (every channel): the whole of a CUDA thread's work and of the CPU
// baseline's (pil_affine_cpu.cpp runs it pixel by pixel; its AVX2 build, the same operations in
// four lanes, falls back to it at the image's edges). __host__ __device__, so the CPU tests run
// this exact code over every thread of every launch (tests/cpp/pil_affine_test.cpp). The
// arithmetic is Pillow's (src/libImaging/Geometry.c), operation for operation in float64, each
// product and sum rounded on its own: the bytes Pillow writes.
#pragma once
#include <cmath>
#include <cstdint>

#include "common/host_device.h"
#include "pil_affine/pil_affine.h"

namespace prefetch {
namespace kernels {

// float64 products and sums rounded one at a time: nvcc would otherwise fuse them (the host
// compilers build this for the baseline ISA, which has no fused multiply-add).
PF_HD double pil_mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
PF_HD double pil_add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

// Pillow's FLOOR macro, for the source points it reaches (inside the image, less 0.5).
PF_HD int64_t pil_floor(double v) { return v < 0.0 ? static_cast<int64_t>(floor(v)) : static_cast<int64_t>(v); }

PF_HD int64_t pil_clip(int64_t v, int64_t size) { return v < 0 ? 0 : (v < size ? v : size - 1); }

// Pillow's BILINEAR(v, a, b, d): a + (b - a) d, the difference of two uint8 values exact.
PF_HD double pil_lerp(double a, double b, double d) { return pil_add(a, pil_mul(pil_add(b, -a), d)); }

// Pillow's BICUBIC(v, v1, v2, v3, v4, d): the cubic convolution with a = -1 in Horner form. The
// terms are summed in Pillow's order (exact for uint8 taps; rounded as Pillow rounds for the
// column pass's float64 rows).
PF_HD double pil_cubic(double v1, double v2, double v3, double v4, double d) {
  const double p1 = v2;
  const double p2 = pil_add(-v1, v3);
  const double p3 = pil_add(pil_add(pil_mul(2.0, pil_add(v1, -v2)), v3), -v4);
  const double p4 = pil_add(pil_add(pil_add(-v1, v2), -v3), v4);
  return pil_add(p1, pil_mul(d, pil_add(p2, pil_mul(d, pil_add(p3, pil_mul(d, p4))))));
}

// Output pixel (n, y, x), every channel. kChannels: the channel count when known at compile time
// (1 or 3), 0 for any (a.C).
template <int kChannels = 0>
PF_HD void pil_affine_pixel(const PilAffineArgs& a, int64_t n, int64_t y, int64_t x) {
  const int64_t C = kChannels > 0 ? kChannels : a.C, H = a.H, W = a.W, sC = a.sC, sH = a.sH, sW = a.sW;
  const double* m = a.matrices + n * kPilAffineMatrixFields;
  uint8_t* dst = a.out + ((n * C) * H + y) * W + x;
  const int64_t plane = H * W;
  // Pillow's affine_transform: the output pixel's centre through the map.
  const double cx = pil_add(static_cast<double>(x), 0.5), cy = pil_add(static_cast<double>(y), 0.5);
  double xin = pil_add(pil_add(pil_mul(m[0], cx), pil_mul(m[1], cy)), m[2]);
  double yin = pil_add(pil_add(pil_mul(m[3], cx), pil_mul(m[4], cy)), m[5]);
  // The filters' head: outside (or not a number) keeps the fill.
  const bool inside = xin >= 0.0 && xin < static_cast<double>(W) && yin >= 0.0 && yin < static_cast<double>(H);
  if (!inside) {
    for (int64_t c = 0; c < C; ++c) dst[c * plane] = a.fill[c];
    return;
  }
  xin = pil_add(xin, -0.5);
  yin = pil_add(yin, -0.5);
  int64_t x0 = pil_floor(xin), y0 = pil_floor(yin);
  const double dx = pil_add(xin, -static_cast<double>(x0)), dy = pil_add(yin, -static_cast<double>(y0));
  const uint8_t* src = a.images + n * a.sN;
  if (!a.bicubic) {
    const int64_t c0 = pil_clip(x0, W) * sW, c1 = pil_clip(x0 + 1, W) * sW;
    const int64_t r0 = pil_clip(y0, H) * sH;
    const bool row1 = y0 + 1 >= 0 && y0 + 1 < H;
    const int64_t r1 = row1 ? (y0 + 1) * sH : r0;
    for (int64_t c = 0; c < C; ++c) {
      const uint8_t* p = src + c * sC;
      const double v1 = pil_lerp(p[r0 + c0], p[r0 + c1], dx);
      const double v2 = row1 ? pil_lerp(p[r1 + c0], p[r1 + c1], dx) : v1;
      dst[c * plane] = static_cast<uint8_t>(pil_lerp(v1, v2, dy));  // in [0, 255]: truncated
    }
    return;
  }
  x0 -= 1;
  y0 -= 1;
  int64_t cols[4];
  for (int k = 0; k < 4; ++k) cols[k] = pil_clip(x0 + k, W) * sW;
  // Pillow reads the first row clamped; a later row outside the image repeats the row before it.
  int64_t rows[4];
  rows[0] = pil_clip(y0, H) * sH;
  for (int k = 1; k < 4; ++k) rows[k] = (y0 + k >= 0 && y0 + k < H) ? (y0 + k) * sH : rows[k - 1];
  for (int64_t c = 0; c < C; ++c) {
    const uint8_t* p = src + c * sC;
    double v[4];
    for (int k = 0; k < 4; ++k) {
      const uint8_t* r = p + rows[k];
      v[k] = pil_cubic(r[cols[0]], r[cols[1]], r[cols[2]], r[cols[3]], dx);
    }
    const double s = pil_cubic(v[0], v[1], v[2], v[3], dy);
    dst[c * plane] = s <= 0.0 ? uint8_t{0} : (s >= 255.0 ? uint8_t{255} : static_cast<uint8_t>(s));
  }
}

// A CUDA thread: pixel (n, y, x) of the launches common/plane_rows.h numbers with C = 1 (a row is
// every channel of one (n, y): the pixel's taps are computed once for all of them).
template <int kChannels>
struct PilAffineThread {
  PilAffineArgs a;
  PF_HD void operator()(int64_t n, int64_t /*c*/, int64_t y, int64_t x) const {
    pil_affine_pixel<kChannels>(a, n, y, x);
  }
};

}  // namespace kernels
}  // namespace prefetch
