// CPU twin of lookup.cu: the same table choice (lookup_thread_work.h), over rows; a contiguous
// row is one loop of table reads (the table stays in L1), or, where the CPU has AVX2, 32 values a
// time by shuffles (lookup_cpu_avx2.cpp), or with AVX-512 VBMI, 64 a time by two-register
// permutes (lookup_cpu_avx512.cpp).
#include <cstdint>

#include "common/cpu_dispatch.h"
#include "lookup/lookup.h"
#include "lookup/lookup_thread_work.h"

namespace prefetch {
namespace kernels {

#if PREFETCH_AVX2_BUILD
void lookup_cpu_avx2(const LookupArgs& args, int64_t row_begin, int64_t row_end);
void lookup_cpu_avx512(const LookupArgs& args, int64_t row_begin, int64_t row_end);
#endif

void lookup_cpu(const LookupArgs& a, int64_t row_begin, int64_t row_end) {
#if PREFETCH_AVX2_BUILD
  if (use_avx512_build()) return lookup_cpu_avx512(a, row_begin, row_end);
  if (use_avx2_build()) return lookup_cpu_avx2(a, row_begin, row_end);
#endif
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
