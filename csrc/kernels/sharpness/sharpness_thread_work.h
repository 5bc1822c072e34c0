// One output value of sharpness: a CUDA thread's work, and the CPU kernel's per-value work.
// __host__ __device__, so the CPU tests run this exact code over every thread of every launch and
// compare it with the CPU kernel (tests/cpp/sharpness_test.cpp); sharpness.cu only maps threads
// onto it.
#pragma once
#include <cstdint>

#include "common/host_device.h"
#include "common/pillow_blend.h"
#include "common/round_each.h"
#include "sharpness/sharpness.h"

namespace prefetch {
namespace kernels {

// The smoothing of a 3x3 neighbourhood whose values sum to s (the centre counted 5 times), rounded
// to the nearest whole value: s / 13 is never within 1/26 of a half (its fraction is k / 13), so
// torchvision's float32 convolution and round give (s + 6) / 13 exactly.
PF_HD int32_t sharpness_smooth(int32_t s) { return (s + 6) / 13; }

// v + (smooth - v) * rest in one rounding to float32, as torchvision's fused multiply-add: the
// product of a whole number below 2^9 and a float32 and the sum with v are exact in double, so
// rounding the double once is the FMA's result on either backend. Clamped to [0, 255] and
// truncated, as torchvision's clamp_ and .to(uint8).
PF_HD uint8_t sharpness_blend(int32_t v, int32_t smooth, float rest) {
  const float f = static_cast<float>(static_cast<double>(smooth - v) * static_cast<double>(rest) +
                                     static_cast<double>(v));
  const float low = f >= 0.0f ? f : 0.0f;
  return static_cast<uint8_t>(low > 255.0f ? 255.0f : low);
}

// The float32 factor torchvision multiplies by: 1 - factor in double (a Python float), then
// float32 (the tensor's dtype).
PF_HD float sharpness_rest(double factor) { return static_cast<float>(1.0 - factor); }

// Pillow's arithmetic (args.pillow): ImageEnhance.Sharpness, what timm's RandAugment calls. Its
// smoothing, ImageFilter.SMOOTH in float32 (Filter.c: 0.5 plus the 3x3 products with 1/13 and
// 5/13 as float32 quotients, then clip8), is sharpness_smooth's rounded s / 13 for every input:
// its float32 error (values below 256, a dozen roundings: under 10^-3) never reaches the 1/26
// between 0.5 plus a thirteenth and a whole number (tests/cpp/sharpness_test.cpp computes Pillow's
// float32 sums against it). Its blend differs from torchvision's: two roundings, not one.

// pil_clip8 and pil_blend (Blend.c's clip and two roundings): common/pillow_blend.h.

// A border value in Pillow's arithmetic: Blend.c blends every value, and the smoothing keeps the
// border's, so v + alpha * 0: v for every finite alpha; 0 for an infinite one (NaN: what Pillow's
// undefined conversion gives on x86-64 too), as an interior value equal to its smoothing.
PF_HD uint8_t pil_border(int32_t v, float alpha) { return pil_blend(v, v, alpha); }

// Output row (n, c, y): its pointers, whether it is a border row and the image's factor found
// once; then value x.
struct SharpnessRow {
  const uint8_t* src;  // the row's first value
  uint8_t* dst;
  int64_t sH, sW, last;  // last: the row's last x
  bool border;           // the first or last row: copied (torchvision's) or blended with itself (Pillow's)
  bool pillow;
  float rest;   // torchvision's 1 - factor
  float alpha;  // Pillow's factor (read in either arithmetic: factors[n] exists for every row)
  PF_HD void operator()(int64_t x) const {
    const uint8_t* p = src + x * sW;
    const int32_t v = *p;
    if (border || x == 0 || x == last) {  // the border (all of a 2-pixel side)
      dst[x] = pillow ? pil_border(v, alpha) : static_cast<uint8_t>(v);
      return;
    }
    const int32_t s = p[-sH - sW] + p[-sH] + p[-sH + sW] + p[-sW] + 5 * v + p[sW] + p[sH - sW] + p[sH] + p[sH + sW];
    dst[x] = pillow ? pil_blend(sharpness_smooth(s), v, alpha) : sharpness_blend(v, sharpness_smooth(s), rest);
  }
};

PF_HD SharpnessRow sharpness_row(const SharpnessArgs& a, int64_t n, int64_t c, int64_t y) {
  const bool border = y == 0 || y == a.H - 1;
  return SharpnessRow{a.images + n * a.sN + c * a.sC + y * a.sH,
                      a.out + ((n * a.C + c) * a.H + y) * a.W,
                      a.sH,
                      a.sW,
                      a.W - 1,
                      border,
                      a.pillow,
                      border ? 0.0f : sharpness_rest(a.factors[n]),
                      static_cast<float>(a.factors[n])};
}

// CUDA threads: the values (n, c, y, x) of the launches common/plane_rows.h numbers, by rows.
struct SharpnessThread {
  SharpnessArgs a;
  PF_HD SharpnessRow row(int64_t n, int64_t c, int64_t y) const { return sharpness_row(a, n, c, y); }
};

}  // namespace kernels
}  // namespace prefetch
