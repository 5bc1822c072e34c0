// The CPU lookup built for AVX2 (x86-64 only; lookup_cpu.cpp calls it when the CPU has it): a
// contiguous row's table reads 32 values at a time with vpshufb. A vpshufb reads a 16-entry table
// by each byte's low 4 bits (a zero where the index byte's top bit is set), so the 256 entries are
// 16 slices of 16: each half of the table (entries 0-127, 128-255) is read as 8 shuffles of slices
// XORed with the slice before them, each by the index less 16 per slice. For an index i inside the
// half, the shuffles of slices 0 .. i/16 see indices 0-127 (the rest see their top bit set and add
// nothing) and their XORs cancel down to slice i/16's entry; an index outside the half leaves that
// half's result meaningless, and the index's own top bit picks the other half. Measured against
// the baseline build's one load per value by `python benchmarks/policy_op_costs.py`.
#include "common/cpu_dispatch.h"
#if PREFETCH_AVX2_BUILD
#include <cstdint>

#include "lookup/lookup.h"
#include "lookup/lookup_thread_work.h"

#pragma GCC push_options
#pragma GCC target("avx2")
#include <immintrin.h>

namespace prefetch {
namespace kernels {

namespace {

// A table as the shuffles read it: per half, slice k XOR slice k - 1 (slice -1 zero), each 16-entry
// slice in both 128-bit lanes (vpshufb shuffles within a lane).
struct ShuffleTable {
  __m256i half[2][8];
};

void make_shuffle_table(const uint8_t* table, ShuffleTable* s) {
  for (int h = 0; h < 2; ++h) {
    __m256i previous = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k) {
      const __m128i slice = _mm_loadu_si128(reinterpret_cast<const __m128i*>(table + 128 * h + 16 * k));
      const __m256i both = _mm256_broadcastsi128_si256(slice);
      s->half[h][k] = _mm256_xor_si256(both, previous);
      previous = both;
    }
  }
}

inline __m256i read_half(const __m256i* slices, __m256i index) {
  const __m256i sixteen = _mm256_set1_epi8(16);
  __m256i r = _mm256_shuffle_epi8(slices[0], index);
  for (int k = 1; k < 8; ++k) {
    index = _mm256_sub_epi8(index, sixteen);
    r = _mm256_xor_si256(r, _mm256_shuffle_epi8(slices[k], index));
  }
  return r;
}

inline __m256i read_32(const ShuffleTable& s, __m256i values) {
  const __m256i low = read_half(s.half[0], values);
  const __m256i high = read_half(s.half[1], _mm256_xor_si256(values, _mm256_set1_epi8(static_cast<char>(0x80))));
  return _mm256_blendv_epi8(low, high, values);  // by each value's top bit
}

}  // namespace

void lookup_cpu_avx2(const LookupArgs& a, int64_t row_begin, int64_t row_end) {
  const int64_t C = a.C, H = a.H, W = a.W, sW = a.sW;
  ShuffleTable shuffles{};  // (made before its first use; zeroed for the compiler's sake)
  const uint8_t* made_for = nullptr;  // consecutive rows share their table: made once for them
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t y = row % H, plane = row / H, n = plane / C, c = plane % C;
    const uint8_t* p = a.images + n * a.sN + c * a.sC + y * a.sH;
    const uint8_t* table = lookup_table(a, n, c);
    uint8_t* dst = a.out + row * W;
    int64_t x = 0;
    if (sW == 1 && W >= 32) {
      if (table != made_for) make_shuffle_table(table, &shuffles), made_for = table;
      for (; x + 32 <= W; x += 32) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + x));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + x), read_32(shuffles, v));
      }
    }
    for (; x < W; ++x) dst[x] = table[p[x * sW]];
  }
}

}  // namespace kernels
}  // namespace prefetch

#pragma GCC pop_options
#endif  // PREFETCH_AVX2_BUILD
