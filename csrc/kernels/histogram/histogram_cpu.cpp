// CPU twin of histogram.cu: each plane's values counted (histogram_thread_work.h's bins). A
// contiguous row counts into four tables in turn, summed at the end: one table would make each
// count wait for the previous one whenever neighbouring values share a bin (flat regions).
#include <cstdint>
#include <cstring>

#include "histogram/histogram.h"
#include "histogram/histogram_thread_work.h"

namespace prefetch {
namespace kernels {

void histogram_cpu(const HistogramArgs& a, int64_t plane_begin, int64_t plane_end) {
  const int64_t C = a.C, H = a.H, W = a.W, sW = a.sW;
  for (int64_t plane = plane_begin; plane < plane_end; ++plane) {
    const int64_t n = plane / C, c = plane % C;
    int32_t counts[4][kHistogramBins];
    std::memset(counts, 0, sizeof(counts));
    for (int64_t y = 0; y < H; ++y) {
      if (sW == 1) {
        const uint8_t* p = a.images + n * a.sN + c * a.sC + y * a.sH;
        int64_t x = 0;
        for (; x + 4 <= W; x += 4) {
          ++counts[0][p[x]];
          ++counts[1][p[x + 1]];
          ++counts[2][p[x + 2]];
          ++counts[3][p[x + 3]];
        }
        for (; x < W; ++x) ++counts[0][p[x]];
      } else {
        for (int64_t x = 0; x < W; ++x) ++counts[0][histogram_bin(a, n, c, y, x)];
      }
    }
    int32_t* out = histogram_counts(a, n, c);
    for (int64_t b = 0; b < kHistogramBins; ++b) out[b] = counts[0][b] + counts[1][b] + counts[2][b] + counts[3][b];
  }
}

}  // namespace kernels
}  // namespace prefetch
