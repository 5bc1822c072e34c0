// gaussian_blur's CPU body over a range of output rows, compiled twice: for the baseline ISA
// (gaussian_blur_cpu.cpp) and for AVX2 + FMA (gaussian_blur_cpu_avx2.cpp, 4 doubles a vector).
// A run of output rows of one plane is done in bands: the row pass over the source rows the band
// reads (its rows and k / 2 on either side, reflected) into a float32 buffer, then the column
// pass from it. The interior of a contiguous row and every column sum are loops over x inside a
// loop over the taps, which the compiler vectorises; each value's sum still adds the taps in the
// order of the thread work (gaussian_blur_thread_work.h), and with exact products a fused
// multiply-add rounds as the separate add does, so both builds write its bytes. The per-value
// functions are included, by the AVX2 file too, before its target pragma: they stay baseline
// functions in both builds.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "gaussian_blur/gaussian_blur.h"
#include "gaussian_blur/gaussian_blur_thread_work.h"

namespace prefetch {
namespace kernels {

// Output rows a band: its buffer holds up to kBlurBand + ky - 1 rows, 72 KiB for 224-wide
// images and the 23-tap kernels of the self-supervised recipes (L2-resident while it is read).
constexpr int64_t kBlurBand = 64;

// The row pass of source row `src` (contiguous or not) into dst[0, W), sums in `sum` (W doubles).
template <typename Isa>
void blur_row_pass(const uint8_t* src, int64_t sW, int64_t W, const float* w, int64_t k, float* dst, double* sum) {
  const int64_t r = k / 2;
  if (sW != 1 || W < 2 * r + 1) {
    for (int64_t x = 0; x < W; ++x) dst[x] = blur_row_value(src, sW, W, w, k, x);
    return;
  }
  for (int64_t x = 0; x < r; ++x) dst[x] = blur_row_value(src, 1, W, w, k, x);
  for (int64_t x = W - r; x < W; ++x) dst[x] = blur_row_value(src, 1, W, w, k, x);
  // The interior, x in [r, W - r): no reflection; tap j reads src[x - r + j].
  const int64_t n = W - 2 * r;
  for (int64_t x = 0; x < n; ++x) sum[x] = 0.0;
  for (int64_t j = 0; j < k; ++j) {
    const double wj = static_cast<double>(w[j]);
    const uint8_t* s = src + j;
    for (int64_t x = 0; x < n; ++x) sum[x] += wj * static_cast<double>(s[x]);
  }
  for (int64_t x = 0; x < n; ++x) dst[r + x] = static_cast<float>(sum[x]);
}

// The column pass of output row y from a band of row-pass rows (rows first.., W apart).
template <typename Isa>
void blur_column_pass(const float* band, int64_t first, int64_t H, int64_t W, const float* w, int64_t k, int64_t y,
                      uint8_t* dst, double* sum) {
  const int64_t r = k / 2;
  for (int64_t x = 0; x < W; ++x) sum[x] = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    const double wi = static_cast<double>(w[i]);
    const float* row = band + (reflect_index(y - r + i, H) - first) * W;
    for (int64_t x = 0; x < W; ++x) sum[x] += wi * static_cast<double>(row[x]);
  }
  for (int64_t x = 0; x < W; ++x) dst[x] = blur_round(sum[x]);
}

// Isa: a tag of the build that instantiates it, so that the two builds are two functions (one name
// compiled for two targets would be one symbol, and the linker would keep either).
template <typename Isa>
void gaussian_blur_rows(const GaussianBlurArgs& a, int64_t row_begin, int64_t row_end) {
  const int64_t C = a.C, H = a.H, W = a.W, ry = a.ky / 2;
  std::vector<float> band;
  std::vector<double> sum(static_cast<size_t>(W));
  for (int64_t row = row_begin; row < row_end;) {
    const int64_t plane = row / H, y0 = row % H, y1 = std::min(H, y0 + (row_end - row));
    const int64_t n = plane / C, c = plane % C;
    const uint8_t* src = a.images + n * a.sN + c * a.sC;
    const float* wx = a.kernel_x + n * a.kx;
    const float* wy = a.kernel_y + n * a.ky;
    uint8_t* out = a.out + plane * H * W;
    for (int64_t b0 = y0; b0 < y1; b0 += kBlurBand) {
      const int64_t b1 = std::min(y1, b0 + kBlurBand);
      // The source rows the band's sums read: [b0 - ry, b1 + ry) reflected lies in [lo, hi).
      const int64_t lo = std::max<int64_t>(0, b0 - ry), hi = std::min(H, b1 + ry);
      band.resize(static_cast<size_t>((hi - lo) * W));
      for (int64_t yy = lo; yy < hi; ++yy) {
        blur_row_pass<Isa>(src + yy * a.sH, a.sW, W, wx, a.kx, band.data() + (yy - lo) * W, sum.data());
      }
      for (int64_t y = b0; y < b1; ++y) {
        blur_column_pass<Isa>(band.data(), lo, H, W, wy, a.ky, y, out + y * W, sum.data());
      }
    }
    row += y1 - y0;
  }
}

}  // namespace kernels
}  // namespace prefetch
