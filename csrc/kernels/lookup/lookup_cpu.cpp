// CPU twin of lookup.cu: the same table choice (lookup_thread_work.h), over rows; a contiguous
// row is one loop of table reads (the table stays in L1). Built once, for the baseline ISA: table
// reads gain nothing from AVX2.
#include <cstdint>

#include "lookup/lookup.h"
#include "lookup/lookup_thread_work.h"

namespace prefetch {
namespace kernels {

void lookup_cpu(const LookupArgs& a, int64_t row_begin, int64_t row_end) {
  const int64_t C = a.C, H = a.H, W = a.W, sW = a.sW;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t y = row % H, plane = row / H, n = plane / C, c = plane % C;
    const uint8_t* p = a.images + n * a.sN + c * a.sC + y * a.sH;
    const uint8_t* table = lookup_table(a, n, c);
    uint8_t* dst = a.out + row * W;
    if (sW == 1) {
      for (int64_t x = 0; x < W; ++x) dst[x] = table[p[x]];
    } else {
      for (int64_t x = 0; x < W; ++x) dst[x] = table[p[x * sW]];
    }
  }
}

}  // namespace kernels
}  // namespace prefetch
