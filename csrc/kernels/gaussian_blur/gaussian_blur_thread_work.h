// One value of each of gaussian_blur's two passes: a CUDA thread's work, and the CPU kernel's
// per-value work at the borders and on strided rows. __host__ __device__, so the CPU tests run
// this exact code over every thread of every launch and compare it with the CPU kernel
// (tests/cpp/gaussian_blur_test.cpp); gaussian_blur.cu only maps threads onto it.
#pragma once
#include <cmath>
#include <cstdint>

#include "common/host_device.h"
#include "gaussian_blur/gaussian_blur.h"

namespace prefetch {
namespace kernels {

// The source index torch's reflect padding reads for index i of a padded side of n values
// (-n < i < 2n - 1: the padding is below n): -1 reads 1, n reads n - 2.
PF_HD int64_t reflect_index(int64_t i, int64_t n) {
  if (i < 0) return -i;
  if (i >= n) return 2 * (n - 1) - i;
  return i;
}

// Value x of the row pass: sum over taps j of w[j] * row[reflect(x - k / 2 + j)], in double in
// the order of j (each product of a float32 and a byte is exact), rounded once to float32.
PF_HD float blur_row_value(const uint8_t* row, int64_t sW, int64_t W, const float* w, int64_t k, int64_t x) {
  const int64_t r = k / 2;
  double sum = 0.0;
  for (int64_t j = 0; j < k; ++j) {
    sum += static_cast<double>(w[j]) * static_cast<double>(row[reflect_index(x - r + j, W) * sW]);
  }
  return static_cast<float>(sum);
}

// torchvision's output.round_().to(uint8): half to even (nearbyint and rint in the default
// rounding mode), then the byte. The sum of positive weights that add up to 1 within float32
// rounding stays within [0, 255.5); other taps are clamped to [0, 255], and a NaN sum (NaN or
// infinite taps) is 0, as the AVX2 build's max(r, 0) makes it: every build writes the same byte.
PF_HD uint8_t blur_round(double v) {
#if defined(__CUDA_ARCH__)
  const double r = rint(v);
#else
  const double r = std::nearbyint(v);
#endif
  return static_cast<uint8_t>(r > 0.0 ? (r < 255.0 ? r : 255.0) : 0.0);
}

// Value (y, x) of the column pass over a plane's row-pass values: sum over taps i of
// w[i] * rows(reflect(y - k / 2 + i))[x] in double in the order of i (each product of two float32
// values is exact), rounded. `plane` holds row-pass rows first.. of the plane, `stride` apart.
PF_HD uint8_t blur_column_value(const float* plane, int64_t stride, int64_t first, int64_t H, const float* w,
                                int64_t k, int64_t y, int64_t x) {
  const int64_t r = k / 2;
  double sum = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    sum += static_cast<double>(w[i]) * static_cast<double>(plane[(reflect_index(y - r + i, H) - first) * stride + x]);
  }
  return blur_round(sum);
}

// CUDA threads of the row pass: value (n, c, y, x) of args.rows.
struct BlurRowsRow {
  const uint8_t* src;  // the row's first value
  float* dst;
  int64_t sW, W, k;
  const float* w;  // the image's row taps
  PF_HD void operator()(int64_t x) const { dst[x] = blur_row_value(src, sW, W, w, k, x); }
};

struct GaussianBlurRowsThread {
  GaussianBlurArgs a;
  PF_HD BlurRowsRow row(int64_t n, int64_t c, int64_t y) const {
    return BlurRowsRow{a.images + n * a.sN + c * a.sC + y * a.sH, a.rows + ((n * a.C + c) * a.H + y) * a.W, a.sW,
                       a.W, a.kx, a.kernel_x + n * a.kx};
  }
};

// CUDA threads of the column pass: output value (n, c, y, x), from args.rows.
struct BlurColumnsRow {
  const float* plane;  // the image's channel in args.rows
  uint8_t* dst;
  int64_t W, H, k, y;
  const float* w;  // the image's column taps
  PF_HD void operator()(int64_t x) const { dst[x] = blur_column_value(plane, W, 0, H, w, k, y, x); }
};

struct GaussianBlurColumnsThread {
  GaussianBlurArgs a;
  PF_HD BlurColumnsRow row(int64_t n, int64_t c, int64_t y) const {
    const int64_t plane = (n * a.C + c) * a.H;
    return BlurColumnsRow{a.rows + plane * a.W, a.out + (plane + y) * a.W, a.W, a.H, a.ky, y, a.kernel_y + n * a.ky};
  }
};

}  // namespace kernels
}  // namespace prefetch
