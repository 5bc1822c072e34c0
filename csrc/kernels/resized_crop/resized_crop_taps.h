// The resampling math of resized_crop along one axis, shared by the CPU and CUDA kernels (every
// function is __host__ __device__): which input pixels an output pixel reads, and with which
// weights. Torch-free; the formulas are torch's for align_corners=False and a size, not a scale
// factor (aten/src/ATen/native/UpSample.h, cpu/UpSampleKernel.cpp): upsample_bilinear2d and
// upsample_bicubic2d (antialias=False; bicubic is Keys' cubic convolution with a = -0.75), and
// _upsample_bilinear2d_aa and _upsample_bicubic2d_aa (antialias=True: the triangle filter, or the
// cubic with a = -0.5 as PIL's, stretched by the downscale).
//
// Positions are computed in double and weights in float. Torch computes both in the input's
// dtype, so its float32 path places a pixel of a 500-wide crop up to 3e-5 pixels off (an ulp of
// 500 in float); in double the position is exact to 1e-13, and the weights' float rounding is the
// only error left (a few 1e-7 each). The CPU kernel tabulates these values once per sample (x)
// and row (y); the CUDA kernel recomputes them per element with the same function. nvcc builds
// it with --fmad=false (setup.py), so no multiply and add is fused where the CPU rounds twice: the
// same floats on both (tests/cpp run the thread work against the CPU builds; the GPU check's
// sanitize stage compares the devices).
#pragma once
#include <cstdint>

#include "common/host_device.h"

namespace prefetch {
namespace kernels {

// One axis of one sample: `in` input pixels (the box's height or width) resampled to `out`.
struct AxisScale {
  double scale = 1.0;     // in / out: input pixels per output pixel
  double support = 1.0;   // antialias: the filter's half-width in input pixels, (1 or 2) * max(scale, 1)
  float invscale = 1.0f;  // antialias: 1 / max(scale, 1), the filter's stretch
  int64_t in = 1;
  int64_t max_taps = 2;   // an upper bound of AxisTaps::count over the axis
  bool antialias = false;
  bool cubic = false;     // bicubic rather than bilinear
};

PF_HD AxisScale axis_scale(int64_t in, int64_t out, bool antialias, bool cubic = false) {
  AxisScale s;
  s.in = in;
  s.antialias = antialias;
  s.cubic = cubic;
  s.scale = static_cast<double>(in) / static_cast<double>(out);
  s.max_taps = cubic ? 4 : 2;
  if (antialias) {
    // torch's support: interp_size / 2 (1 bilinear, 2 bicubic) input pixels, stretched by a downscale.
    const double stretch = s.scale >= 1.0 ? s.scale : 1.0;
    s.support = (cubic ? 2.0 : 1.0) * stretch;
    s.invscale = s.scale >= 1.0 ? static_cast<float>(1.0 / s.scale) : 1.0f;
    // torch's interp size, 2 * ceil(support) + 1 (ceil without <cmath>, for device code too).
    int64_t ceil_support = static_cast<int64_t>(s.support);
    if (static_cast<double>(ceil_support) < s.support) ++ceil_support;
    s.max_taps = 2 * ceil_support + 1;
  }
  return s;
}

// The taps of one output pixel: input pixels [first, first + count) of the axis, all inside it.
struct AxisTaps {
  int64_t first = 0;
  int64_t count = 0;
  float w[4] = {1.0f, 0.0f, 0.0f, 0.0f};  // antialias=False: the taps' weights
  float d0 = 0.0f;         // antialias: first - center + 0.5, the first tap's filter position
  float inv_total = 0.0f;  // antialias: 1 / the sum of the filter's values over the taps
};

// The triangle filter of bilinear interpolation.
PF_HD float triangle(float x) {
  const float a = x < 0.0f ? -x : x;
  return a < 1.0f ? 1.0f - a : 0.0f;
}

// Keys' cubic convolution kernel for |x| < 1 and 1 <= |x| < 2 (torch's cubic_convolution1 and 2,
// UpSample.h), in T: double for the bicubic weights, float for the antialias filter as torch's.
template <typename T>
PF_HD T cubic_near(T x, T a) { return ((a + T(2)) * x - (a + T(3))) * x * x + T(1); }
template <typename T>
PF_HD T cubic_far(T x, T a) { return ((a * x - T(5) * a) * x + T(8) * a) * x - T(4) * a; }

// The antialias cubic filter: Keys' with a = -0.5 (torch's aa_filter for bicubic, PIL's).
PF_HD float cubic_filter(float x) {
  const float v = x < 0.0f ? -x : x;
  if (v < 1.0f) return cubic_near(v, -0.5f);
  if (v < 2.0f) return cubic_far(v, -0.5f);
  return 0.0f;
}

// Weight of tap j (0 <= j < t.count) of output pixel t.
PF_HD float tap_weight(const AxisScale& s, const AxisTaps& t, int64_t j) {
  if (!s.antialias) return t.w[j];
  const float x = (static_cast<float>(j) + t.d0) * s.invscale;
  return (s.cubic ? cubic_filter(x) : triangle(x)) * t.inv_total;
}

// floor(v) as an integer, without <cmath> (device code too).
PF_HD int64_t floor_to_int(double v) {
  int64_t i = static_cast<int64_t>(v);  // toward zero
  return static_cast<double>(i) > v ? i - 1 : i;
}

// Bicubic without antialias (torch's upsample_bicubic2d): the source position is not clamped at
// 0; i0 = min(floor(src), in - 1), t = src - i0 clamped to [0, 1]; taps i0 - 1 .. i0 + 2, each
// index clamped into the axis, weighted [cc2(t + 1), cc1(t), cc1(1 - t), cc2(2 - t)] with a =
// -0.75. Taps clamped onto the same edge pixel are folded into one (their weights added, in tap
// order), so the taps stay a contiguous run of at most 4 pixels inside the axis.
PF_HD AxisTaps bicubic_taps(const AxisScale& s, int64_t i) {
  AxisTaps t;
  const double src = s.scale * (static_cast<double>(i) + 0.5) - 0.5;
  int64_t i0 = floor_to_int(src);
  if (i0 > s.in - 1) i0 = s.in - 1;
  double x = src - static_cast<double>(i0);
  x = x < 0.0 ? 0.0 : (x > 1.0 ? 1.0 : x);
  const double a = -0.75;
  const double coeffs[4] = {cubic_far(x + 1.0, a), cubic_near(x, a), cubic_near(1.0 - x, a),
                            cubic_far(2.0 - x, a)};
  auto clamp_index = [&](int64_t k) { return k < 0 ? int64_t{0} : (k > s.in - 1 ? s.in - 1 : k); };
  t.first = clamp_index(i0 - 1);
  t.count = clamp_index(i0 + 2) - t.first + 1;
  double w[4] = {0.0, 0.0, 0.0, 0.0};
  for (int k = 0; k < 4; ++k) w[clamp_index(i0 - 1 + k) - t.first] += coeffs[k];
  for (int k = 0; k < 4; ++k) t.w[k] = static_cast<float>(w[k]);
  return t;
}

// The taps of output pixel i (0 <= i < out).
PF_HD AxisTaps axis_taps(const AxisScale& s, int64_t i) {
  AxisTaps t;
  if (!s.antialias && s.cubic) return bicubic_taps(s, i);
  if (!s.antialias) {
    // src = (i + 0.5) * scale - 0.5, clamped at 0; i0 = floor(src), i1 = min(i0 + 1, in - 1).
    double src = s.scale * (static_cast<double>(i) + 0.5) - 0.5;
    if (src < 0.0) src = 0.0;
    int64_t i0 = static_cast<int64_t>(src);  // floor: src >= 0
    if (i0 > s.in - 1) i0 = s.in - 1;
    double lambda = src - static_cast<double>(i0);
    lambda = lambda < 0.0 ? 0.0 : (lambda > 1.0 ? 1.0 : lambda);
    t.first = i0;
    if (i0 < s.in - 1) {
      t.count = 2;
      t.w[0] = static_cast<float>(1.0 - lambda);
      t.w[1] = static_cast<float>(lambda);
    } else {
      // i1 == i0: (1 - lambda) x + lambda x is x itself.
      t.count = 1;
      t.w[0] = 1.0f;
      t.w[1] = 0.0f;
    }
    return t;
  }
  // The filter centred at (i + 0.5) * scale covers [center - support, center + support); torch
  // truncates toward zero (a negative start becomes 0 either way).
  const double center = s.scale * (static_cast<double>(i) + 0.5);
  int64_t xmin = static_cast<int64_t>(center - s.support + 0.5);
  if (xmin < 0) xmin = 0;
  int64_t xmax = static_cast<int64_t>(center + s.support + 0.5);
  if (xmax > s.in) xmax = s.in;
  int64_t count = xmax - xmin;
  // Never more than torch's interp size (it clips a rounding excess the same way).
  count = count < 0 ? 0 : (count > s.max_taps ? s.max_taps : count);
  t.first = xmin;
  t.count = count;
  t.d0 = static_cast<float>(static_cast<double>(xmin) - center + 0.5);
  float total = 0.0f;
  for (int64_t j = 0; j < count; ++j) {
    const float x = (static_cast<float>(j) + t.d0) * s.invscale;
    total += s.cubic ? cubic_filter(x) : triangle(x);
  }
  // torch's test: the cubic's lobes are negative, but a window holding its centre sums above 0.
  t.inv_total = total != 0.0f ? 1.0f / total : 0.0f;
  return t;
}

// A bicubic blend overshoots where the image has an edge: torchvision's uint8 result is clamped
// to [0, 255] (its float path clamps before rounding back to uint8), and so is ours, before the
// normalization. Bilinear needs none (its weights are positive and sum to 1).
PF_HD float clamp_pixel(float v) { return v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v); }

}  // namespace kernels
}  // namespace prefetch
