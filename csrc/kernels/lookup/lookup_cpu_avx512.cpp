// The CPU lookup built for AVX-512 with VBMI (x86-64 only; lookup_cpu.cpp calls it when the CPU
// has it, before the AVX2 build): vpermi2b reads a 128-entry table held in two registers by each
// byte's low 7 bits, so a whole 256-entry table is two of them, one per half, and the value's top
// bit picks between their results (a mask blend): 4 instructions for 64 values, where the AVX2
// build's shuffles take ~50 for 32. A row's last values (or a row narrower than 64) are one masked
// load and store: masked-off bytes are neither read nor written. Measured by
// `python benchmarks/policy_op_costs.py` (the table ops), each CPU build in turn.
#include "common/cpu_dispatch.h"
#if PREFETCH_AVX2_BUILD
#include <cstdint>

#include "lookup/lookup.h"
#include "lookup/lookup_thread_work.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vbmi")
#include <immintrin.h>

namespace prefetch {
namespace kernels {

namespace {

struct VbmiTable {
  __m512i q[4];  // entries 0-63, 64-127, 128-191, 192-255
};

inline VbmiTable load_table(const uint8_t* table) {
  VbmiTable t;
  for (int k = 0; k < 4; ++k) t.q[k] = _mm512_loadu_si512(table + 64 * k);
  return t;
}

inline __m512i read_64(const VbmiTable& t, __m512i values) {
  const __m512i low = _mm512_permutex2var_epi8(t.q[0], values, t.q[1]);   // by bits 0-6
  const __m512i high = _mm512_permutex2var_epi8(t.q[2], values, t.q[3]);
  return _mm512_mask_blend_epi8(_mm512_movepi8_mask(values), low, high);  // by bit 7
}

}  // namespace

void lookup_cpu_avx512(const LookupArgs& a, int64_t row_begin, int64_t row_end) {
  const int64_t C = a.C, H = a.H, W = a.W, sW = a.sW;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t y = row % H, plane = row / H, n = plane / C, c = plane % C;
    const uint8_t* p = a.images + n * a.sN + c * a.sC + y * a.sH;
    const uint8_t* table = lookup_table(a, n, c);
    uint8_t* dst = a.out + row * W;
    if (sW != 1) {
      for (int64_t x = 0; x < W; ++x) dst[x] = table[p[x * sW]];
      continue;
    }
    const VbmiTable t = load_table(table);
    int64_t x = 0;
    for (; x + 64 <= W; x += 64) {
      _mm512_storeu_si512(dst + x, read_64(t, _mm512_loadu_si512(p + x)));
    }
    if (x < W) {
      const __mmask64 rest = (uint64_t{1} << (W - x)) - 1;  // (W - x in 1 .. 63)
      _mm512_mask_storeu_epi8(dst + x, rest, read_64(t, _mm512_maskz_loadu_epi8(rest, p + x)));
    }
  }
}

}  // namespace kernels
}  // namespace prefetch

#pragma GCC pop_options
#endif  // PREFETCH_AVX2_BUILD
