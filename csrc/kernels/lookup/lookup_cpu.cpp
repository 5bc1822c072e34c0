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

// The other builds (lookup_cpu_avx2.cpp, lookup_cpu_avx512.cpp), compiled where PREFETCH_AVX2_BUILD is 1.
void lookup_cpu_avx2(const LookupArgs& args, int64_t row_begin, int64_t row_end);
void lookup_cpu_avx512(const LookupArgs& args, int64_t row_begin, int64_t row_end);

namespace {

void lookup_cpu_baseline(const LookupArgs& args, int64_t row_begin, int64_t row_end) {
  const LookupArgs& a = args;
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

}  // namespace

void lookup_cpu(const LookupArgs& args, int64_t row_begin, int64_t row_end) {
  run_cpu_build(args, row_begin, row_end, &lookup_cpu_baseline, PREFETCH_ISA_BUILD(lookup_cpu_avx2), PREFETCH_ISA_BUILD(lookup_cpu_avx512));
}

}  // namespace kernels
}  // namespace prefetch
