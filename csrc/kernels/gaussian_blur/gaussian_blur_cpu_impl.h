// gaussian_blur's CPU body over a range of output rows, compiled twice: for the baseline ISA
// (gaussian_blur_cpu.cpp, ScalarBlurBlocks) and for AVX2 + FMA (gaussian_blur_cpu_avx2.cpp, its
// blocks in intrinsics, 4 doubles a vector).
// A run of output rows of one plane is done in bands: the row pass over the source rows the band
// reads (its rows and k / 2 on either side, reflected) into a float32 buffer, then the column
// pass from it. Both passes sum blocks of kBlurBlock values, a loop over the block inside the loop
// over the taps, which the compiler vectorises with the sums in registers; each value's sum still
// adds the taps in the order of the thread work (gaussian_blur_thread_work.h), and with exact
// products a fused multiply-add rounds as the separate add does, so both builds write its bytes. The per-value
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

// A band's row-pass buffer: at most this many bytes (L2-resident while the column pass reads it),
// and at least kBlurMinBand output rows. A whole 224 x 224 plane fits: its bands then read no
// source row twice (bands of 64 rows recomputed 22 rows of halo each with 23 taps: 0.49 ms an image
// of 3 x 176 x 176 on one core, before).
constexpr int64_t kBlurBandBytes = 256 * 1024;
constexpr int64_t kBlurMinBand = 16;
// Values summed together: their sums stay in registers over all the taps.
constexpr int kBlurBlock = 16;

// The baseline build's blocks of kBlurBlock values (the AVX2 build has its own, in intrinsics:
// GCC kept these sums in memory): tap j of value b reads p[b + j] (row pass) or rows[j][x + b]
// (column pass); each sum adds the taps in order, as the thread work.
struct ScalarBlurBlocks {
  static void row(const double* p, const float* w, int64_t k, float* dst) {
    double sum[kBlurBlock] = {};
    for (int64_t j = 0; j < k; ++j) {
      const double wj = static_cast<double>(w[j]);
      for (int b = 0; b < kBlurBlock; ++b) sum[b] += wj * p[b + j];
    }
    for (int b = 0; b < kBlurBlock; ++b) dst[b] = static_cast<float>(sum[b]);
  }
  static void column(const float* const* rows, int64_t x, const float* w, int64_t k, uint8_t* dst) {
    double sum[kBlurBlock] = {};
    for (int64_t i = 0; i < k; ++i) {
      const double wi = static_cast<double>(w[i]);
      for (int b = 0; b < kBlurBlock; ++b) sum[b] += wi * static_cast<double>(rows[i][x + b]);
    }
    for (int b = 0; b < kBlurBlock; ++b) dst[b] = blur_round(sum[b]);
  }
};

// The row pass of source row `src` (any stride) into dst[0, W). `padded` (W + k - 1 doubles) takes
// the row with torch's reflect padding, so that tap j of value x reads padded[x + j] everywhere.
template <typename Blocks>
void blur_row_pass(const uint8_t* src, int64_t sW, int64_t W, const float* w, int64_t k, float* dst, double* padded) {
  const int64_t r = k / 2;
  for (int64_t i = 0; i < W + 2 * r; ++i) padded[i] = static_cast<double>(src[reflect_index(i - r, W) * sW]);
  int64_t x = 0;
  for (; x + kBlurBlock <= W; x += kBlurBlock) Blocks::row(padded + x, w, k, dst + x);
  for (; x < W; ++x) {
    double sum = 0.0;
    for (int64_t j = 0; j < k; ++j) sum += static_cast<double>(w[j]) * padded[x + j];
    dst[x] = static_cast<float>(sum);
  }
}

// The column pass of output row y from a band of row-pass rows (rows first.., W apart); `rows`
// (k pointers) takes each tap's row.
template <typename Blocks>
void blur_column_pass(const float* band, int64_t first, int64_t H, int64_t W, const float* w, int64_t k, int64_t y,
                      uint8_t* dst, const float** rows) {
  const int64_t r = k / 2;
  for (int64_t i = 0; i < k; ++i) rows[i] = band + (reflect_index(y - r + i, H) - first) * W;
  int64_t x = 0;
  for (; x + kBlurBlock <= W; x += kBlurBlock) Blocks::column(rows, x, w, k, dst + x);
  for (; x < W; ++x) {
    double sum = 0.0;
    for (int64_t i = 0; i < k; ++i) sum += static_cast<double>(w[i]) * static_cast<double>(rows[i][x]);
    dst[x] = blur_round(sum);
  }
}

// Blocks: the build's blocks (ScalarBlurBlocks or the AVX2 file's), a type of each build, so that
// the two builds are two functions (one name compiled for two targets would be one symbol, and the
// linker would keep either).
template <typename Blocks>
void gaussian_blur_rows(const GaussianBlurArgs& a, int64_t row_begin, int64_t row_end) {
  const int64_t C = a.C, H = a.H, W = a.W, ry = a.ky / 2;
  if (W <= 0) return;  // rows of no values (the plan allows any kernel for an empty side)
  const int64_t band_rows =
      std::max<int64_t>(kBlurMinBand, kBlurBandBytes / static_cast<int64_t>(sizeof(float)) / std::max<int64_t>(W, 1) - 2 * ry);
  std::vector<float> band;
  std::vector<double> padded(static_cast<size_t>(W + a.kx - 1));
  std::vector<const float*> tap_rows(static_cast<size_t>(a.ky));
  for (int64_t row = row_begin; row < row_end;) {
    const int64_t plane = row / H, y0 = row % H, y1 = std::min(H, y0 + (row_end - row));
    const int64_t n = plane / C, c = plane % C;
    const uint8_t* src = a.images + n * a.sN + c * a.sC;
    const float* wx = a.kernel_x + n * a.kx;
    const float* wy = a.kernel_y + n * a.ky;
    uint8_t* out = a.out + plane * H * W;
    for (int64_t b0 = y0; b0 < y1; b0 += band_rows) {
      const int64_t b1 = std::min(y1, b0 + band_rows);
      // The source rows the band's sums read: [b0 - ry, b1 + ry) reflected lies in [lo, hi).
      const int64_t lo = std::max<int64_t>(0, b0 - ry), hi = std::min(H, b1 + ry);
      band.resize(static_cast<size_t>((hi - lo) * W));
      for (int64_t yy = lo; yy < hi; ++yy) {
        blur_row_pass<Blocks>(src + yy * a.sH, a.sW, W, wx, a.kx, band.data() + (yy - lo) * W, padded.data());
      }
      for (int64_t y = b0; y < b1; ++y) {
        blur_column_pass<Blocks>(band.data(), lo, H, W, wy, a.ky, y, out + y * W, tap_rows.data());
      }
    }
    row += y1 - y0;
  }
}

}  // namespace kernels
}  // namespace prefetch
