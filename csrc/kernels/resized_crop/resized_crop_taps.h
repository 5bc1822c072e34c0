// The resampling math of resized_crop along one axis, shared by the CPU and CUDA kernels (every
// function is __host__ __device__): which input pixels an output pixel reads, and with which
// weights. Torch-free; the formulas are torch's upsample_bilinear2d (antialias=False) and
// _upsample_bilinear2d_aa (antialias=True) for align_corners=False and a size, not a scale factor
// (aten/src/ATen/native/UpSample.h, cpu/UpSampleKernel.cpp).
//
// Positions are computed in double and weights in float. Torch computes both in the input's
// dtype, so its float32 path places a pixel of a 500-wide crop up to 3e-5 pixels off (an ulp of
// 500 in float); in double the position is exact to 1e-13, and the weights' float rounding is the
// only error left (a few 1e-7 each). The CPU kernel tabulates these values once per sample (x)
// and row (y); the CUDA kernel recomputes them per element with the same function. The same
// floats on the host; on the GPU ptxas may fuse a multiply and an add (FMA) that the CPU's baseline
// build rounds twice, so GPU outputs agree with the CPU's within the bound docs/custom_ops.md
// states ("CPU and GPU results"), not bit for bit.
#pragma once
#include <cstdint>

#include "common/host_device.h"

namespace prefetch {
namespace kernels {

// One axis of one sample: `in` input pixels (the box's height or width) resampled to `out`.
struct AxisScale {
  double scale = 1.0;     // in / out: input pixels per output pixel
  double support = 1.0;   // antialias: the filter's half-width in input pixels, max(scale, 1)
  float invscale = 1.0f;  // antialias: 1 / max(scale, 1), the filter's stretch
  int64_t in = 1;
  int64_t max_taps = 2;   // an upper bound of AxisTaps::count over the axis
  bool antialias = false;
};

PF_HD AxisScale axis_scale(int64_t in, int64_t out, bool antialias) {
  AxisScale s;
  s.in = in;
  s.antialias = antialias;
  s.scale = static_cast<double>(in) / static_cast<double>(out);
  if (antialias) {
    s.support = s.scale >= 1.0 ? s.scale : 1.0;
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
  float w0 = 1.0f, w1 = 0.0f;  // bilinear: the weights of the two taps
  float d0 = 0.0f;             // antialias: first - center + 0.5, the first tap's filter position
  float inv_total = 0.0f;      // antialias: 1 / the sum of the filter's values over the taps
};

// The triangle filter of bilinear interpolation.
PF_HD float triangle(float x) {
  const float a = x < 0.0f ? -x : x;
  return a < 1.0f ? 1.0f - a : 0.0f;
}

// Weight of tap j (0 <= j < t.count) of output pixel t.
PF_HD float tap_weight(const AxisScale& s, const AxisTaps& t, int64_t j) {
  if (!s.antialias) return j == 0 ? t.w0 : t.w1;
  return triangle((static_cast<float>(j) + t.d0) * s.invscale) * t.inv_total;
}

// The taps of output pixel i (0 <= i < out).
PF_HD AxisTaps axis_taps(const AxisScale& s, int64_t i) {
  AxisTaps t;
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
      t.w0 = static_cast<float>(1.0 - lambda);
      t.w1 = static_cast<float>(lambda);
    } else {
      // i1 == i0: (1 - lambda) x + lambda x is x itself.
      t.count = 1;
      t.w0 = 1.0f;
      t.w1 = 0.0f;
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
  for (int64_t j = 0; j < count; ++j) total += triangle((static_cast<float>(j) + t.d0) * s.invscale);
  t.inv_total = total > 0.0f ? 1.0f / total : 0.0f;
  return t;
}

}  // namespace kernels
}  // namespace prefetch
