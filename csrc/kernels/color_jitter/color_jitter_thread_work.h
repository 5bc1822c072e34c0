// One pixel of color_jitter: a CUDA thread's work, and the CPU kernel's per-pixel work.
// __host__ __device__, so the CPU tests run this exact code over every thread of every launch and
// compare it with the CPU kernel (tests/cpp/color_jitter_test.cpp); color_jitter.cu only maps
// threads onto it.
//
// Every value is torchvision v2's float32 arithmetic on uint8 tensors, operation for operation:
// - brightness: v * f, clamped to [0, 255], truncated;
// - saturation and contrast: torchvision's _blend, v * f + other * (1 - f), where torch's add_
//   with alpha is a fused multiply-add (one rounding); `other` is the pixel's grey
//   (0.2989 R + 0.587 G + 0.114 B, the same multiply-adds, floored) for saturation, the image's
//   mean grey (its float32 sum over its pixel count) for contrast;
// - hue: to float32 (v * (1/255)), torchvision's RGB -> HSV, h + f wrapped to [0, 1), HSV -> RGB,
//   times 255.999 and truncated.
// The multiply-adds are fused (fma_rn: one rounding, as torch's); every other operation rounds
// alone on both backends (mul_rn and the like: nvcc would otherwise fuse a * b + c).
// pillow_color is Pillow's arithmetic instead (ImageEnhance.Color): the grey Convert.c's integer
// L24, the blend Blend.c's two float32 roundings (common/pillow_blend.h).
#pragma once
#include <cstdint>

#include "color_jitter/color_jitter.h"
#include "common/host_device.h"
#include "common/pillow_blend.h"
#include "common/round_each.h"

namespace prefetch {
namespace kernels {

// v * f + other * alpha in one rounding (torch's add_(other, alpha=alpha) after mul(f)), clamped
// to [0, 255] and truncated.
PF_HD int32_t cj_blend(int32_t v, float f, float other, float alpha) {
  const float mixed = fma_rn(other, alpha, mul_rn(static_cast<float>(v), f));
  const float low = mixed >= 0.0f ? mixed : 0.0f;
  return static_cast<int32_t>(low > 255.0f ? 255.0f : low);
}

// v * f (f >= 0), clamped to 255 and truncated: torchvision's adjust_brightness.
PF_HD int32_t cj_brightness(int32_t v, float f) {
  const float m = mul_rn(static_cast<float>(v), f);
  return static_cast<int32_t>(m > 255.0f ? 255.0f : m);
}

// The grey of an RGB pixel, whole-valued: torchvision's r * 0.2989 + g * 0.587 + b * 0.114 (a
// product, then two multiply-adds), floored.
PF_HD int32_t cj_grey(int32_t r, int32_t g, int32_t b) {
  const float rr = mul_rn(static_cast<float>(r), 0.2989f);
  const float rgb = fma_rn(static_cast<float>(b), 0.114f, fma_rn(static_cast<float>(g), 0.587f, rr));
  return static_cast<int32_t>(rgb);  // >= 0: truncation is the floor
}

PF_HD float cj_min(float a, float b) { return b < a ? b : a; }
PF_HD float cj_max(float a, float b) { return b > a ? b : a; }
PF_HD float cj_pick(bool c, float a, float b) { return c ? a : b; }
PF_HD float cj_unit(float v) { return cj_min(cj_max(v, 0.0f), 1.0f); }  // clamp_(0, 1)

// torchvision's _hsv_to_rgb picks each output channel from (v, p, q, t) by the sector i in 0 .. 5:
// red {v, q, p, p, t, v}, green {t, v, v, q, p, p}, blue {p, p, t, v, v, q}. Here each channel's six
// picks are 2-bit codes (v 0, p 1, q 2, t 3) packed into one integer, and a pixel's pick is a shift
// by its sector and three two-way selects: GCC if-converts two-way selects only, and chains of
// selects on a comparison with each sector cost the AVX2 build's hue loop ~45 blends a vector of
// pixels, a third of its time (`python benchmarks/policy_op_costs.py`, Hue).
constexpr int32_t cj_sector_codes(int32_t s0, int32_t s1, int32_t s2, int32_t s3, int32_t s4, int32_t s5) {
  return s0 | s1 << 2 | s2 << 4 | s3 << 6 | s4 << 8 | s5 << 10;
}
constexpr int32_t kHueRed = cj_sector_codes(0, 2, 1, 1, 3, 0);
constexpr int32_t kHueGreen = cj_sector_codes(3, 0, 0, 2, 1, 1);
constexpr int32_t kHueBlue = cj_sector_codes(1, 1, 3, 0, 0, 2);

PF_HD float cj_select(int32_t codes, int32_t sector, float v, float p, float q, float t) {
  const int32_t code = (codes >> (2 * sector)) & 3;
  const bool odd = (code & 1) != 0;
  return cj_pick((code & 2) != 0, cj_pick(odd, t, q), cj_pick(odd, p, v));
}

// torchvision's adjust_hue on one RGB pixel (uint8 values in v[0..2], replaced).
PF_HD void cj_hue(int32_t* v, float hue) {
  const float scale = static_cast<float>(1.0 / 255.0);
  const float r = mul_rn(static_cast<float>(v[0]), scale), g = mul_rn(static_cast<float>(v[1]), scale),
              b = mul_rn(static_cast<float>(v[2]), scale);
  // _rgb_to_hsv
  const float maxc = cj_max(cj_max(r, g), b), minc = cj_min(cj_min(r, g), b);
  const bool eqc = maxc == minc;
  const float span = sub_rn(maxc, minc);
  const float s = div_rn(span, eqc ? 1.0f : maxc);
  const float divisor = eqc ? 1.0f : span;
  const float rc = div_rn(sub_rn(maxc, r), divisor), gc = div_rn(sub_rn(maxc, g), divisor),
              bc = div_rn(sub_rn(maxc, b), divisor);
  const bool not_r = maxc != r, is_g = maxc == g;
  const float hg = mul_rn(sub_rn(add_rn(rc, 2.0f), bc), (is_g & not_r) ? 1.0f : 0.0f);
  const float hr = mul_rn(sub_rn(bc, gc), not_r ? 0.0f : 1.0f);
  const float hb = mul_rn(sub_rn(add_rn(gc, 4.0f), rc), (not_r & !is_g) ? 1.0f : 0.0f);
  float h = add_rn(mul_rn(add_rn(add_rn(hr, hg), hb), static_cast<float>(1.0 / 6.0)), 1.0f);
  h = h - static_cast<float>(static_cast<int32_t>(h));  // fmod(h, 1) of h in [0, 2]: exact
  // h + hue, torch's remainder by 1 (fmod, plus 1 when negative)
  h = add_rn(h, hue);
  const float whole = static_cast<float>(static_cast<int32_t>(h));  // truncation: fmod's quotient
  h = h - whole;  // exact
  h = h < 0.0f ? add_rn(h, 1.0f) : h;
  // _hsv_to_rgb
  const float h6 = mul_rn(h, 6.0f);
  const float i_float = static_cast<float>(static_cast<int32_t>(h6));  // h6 >= 0: floor
  const float f = sub_rn(h6, i_float);
  const int32_t whole6 = static_cast<int32_t>(i_float);
  const int32_t i = whole6 == 6 ? 0 : whole6;  // % 6 of 0 .. 6
  const float sxf = mul_rn(s, f);
  const float one_minus_s = sub_rn(1.0f, s);
  const float q = cj_unit(mul_rn(sub_rn(1.0f, sxf), maxc));
  const float t = cj_unit(mul_rn(add_rn(sxf, one_minus_s), maxc));
  const float p = cj_unit(mul_rn(one_minus_s, maxc));
  // torchvision's selection of (v, p, q, t) by i (cj_select)
  const float red = cj_select(kHueRed, i, maxc, p, q, t);
  const float green = cj_select(kHueGreen, i, maxc, p, q, t);
  const float blue = cj_select(kHueBlue, i, maxc, p, q, t);
  const float top = static_cast<float>(255.0 + 1.0 - 1e-3);
  v[0] = static_cast<int32_t>(mul_rn(red, top));
  v[1] = static_cast<int32_t>(mul_rn(green, top));
  v[2] = static_cast<int32_t>(mul_rn(blue, top));
}

// Image n's mean grey as its j-th Contrast step sees it: torch's float32 sum (exact: whole values
// below 2^24) over its pixel count.
PF_HD float cj_mean(const ColorJitterArgs& a, int64_t n, int64_t j) {
  return div_rn(static_cast<float>(a.grey_sums[n * a.K + j]), static_cast<float>(a.H * a.W));
}

// Pixel (n, y, x) (its C = 1 or 3 values in v) through the first `upto` steps of image n's chain;
// the Contrast steps among them read their means from a.grey_sums.
PF_HD void cj_chain(const ColorJitterArgs& a, int64_t n, int64_t y, int64_t x, int64_t upto, int32_t* v) {
  const uint8_t* p = a.images + n * a.sN + y * a.sH + x * a.sW;
  const int64_t C = a.C;
  for (int64_t c = 0; c < C; ++c) v[c] = p[c * a.sC];
  int64_t contrasts = 0;
  for (int64_t k = 0; k < upto; ++k) {
    const int64_t step = a.steps[n * a.K + k];
    const double factor = a.factors[n * a.K + k];
    const float f = static_cast<float>(factor);
    const float alpha = static_cast<float>(1.0 - factor);  // a Python float, then float32
    if (step == kColorBrightness) {
      for (int64_t c = 0; c < C; ++c) v[c] = cj_brightness(v[c], f);
    } else if (step == kColorContrast) {
      const float mean = cj_mean(a, n, contrasts++);
      for (int64_t c = 0; c < C; ++c) v[c] = cj_blend(v[c], f, mean, alpha);
    } else if (step == kColorSaturation && C == 3) {  // a grey image has no saturation
      const float grey = static_cast<float>(cj_grey(v[0], v[1], v[2]));
      for (int64_t c = 0; c < 3; ++c) v[c] = cj_blend(v[c], f, grey, alpha);
    } else if (step == kColorHue && C == 3) {  // nor a hue
      cj_hue(v, f);
    } else if (step == kColorPillowColor) {
      const int32_t grey = C == 3 ? pil_grey(v[0], v[1], v[2]) : v[0];
      for (int64_t c = 0; c < C; ++c) v[c] = pil_blend(grey, v[c], f);
    }
  }
}

// The grey (whole-valued) of pixel (n, y, x) as it enters the j-th Contrast step of its image's
// chain; 0 when the chain has no j-th Contrast. Its sum over the image is grey_sums[n, j].
PF_HD int32_t cj_grey_entering(const ColorJitterArgs& a, int64_t n, int64_t j, int64_t y, int64_t x) {
  int64_t seen = 0, k = 0;
  for (; k < a.K; ++k) {
    if (a.steps[n * a.K + k] == kColorContrast && seen++ == j) break;
  }
  if (k == a.K) return 0;
  int32_t v[3];
  cj_chain(a, n, y, x, k, v);
  return a.C == 3 ? cj_grey(v[0], v[1], v[2]) : v[0];
}

// Output pixel (n, y, x), every channel.
PF_HD void cj_pixel(const ColorJitterArgs& a, int64_t n, int64_t y, int64_t x) {
  int32_t v[3];
  cj_chain(a, n, y, x, a.K, v);
  uint8_t* dst = a.out + (n * a.C * a.H + y) * a.W + x;
  for (int64_t c = 0; c < a.C; ++c) dst[c * a.H * a.W] = static_cast<uint8_t>(v[c]);
}

// CUDA threads over the pixels, numbered by common/plane_rows.h with C = 1 (one row per (n, y)).
struct ColorJitterThread {
  ColorJitterArgs a;
  PF_HD void operator()(int64_t n, int64_t /*c*/, int64_t y, int64_t x) const { cj_pixel(a, n, y, x); }
};

}  // namespace kernels
}  // namespace prefetch
