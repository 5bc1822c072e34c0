// One output value of lookup: a CUDA thread's work, and the CPU kernel's per-value work.
// __host__ __device__, so the CPU tests run this exact code over every thread of every launch and
// compare it with the CPU kernel (tests/cpp/lookup_test.cpp); lookup.cu only maps threads onto it.
#pragma once
#include <cstdint>

#include "common/host_device.h"
#include "lookup/lookup.h"

namespace prefetch {
namespace kernels {

// The table of image n's channel c.
PF_HD const uint8_t* lookup_table(const LookupArgs& a, int64_t n, int64_t c) {
  return a.tables + (n * a.T + (a.T == 1 ? 0 : c)) * kLookupEntries;
}

// Output row (n, c, y): its source, table and destination found once; value x is then a load,
// a table read and a store.
struct LookupRow {
  const uint8_t* src;
  int64_t sW;
  const uint8_t* table;
  uint8_t* dst;
  PF_HD void operator()(int64_t x) const { dst[x] = table[src[x * sW]]; }
};

PF_HD LookupRow lookup_row(const LookupArgs& a, int64_t n, int64_t c, int64_t y) {
  return LookupRow{a.images + n * a.sN + c * a.sC + y * a.sH, a.sW, lookup_table(a, n, c),
                   a.out + ((n * a.C + c) * a.H + y) * a.W};
}

// CUDA threads: the values (n, c, y, x) of the launches common/plane_rows.h numbers, by rows.
struct LookupThread {
  LookupArgs a;
  PF_HD LookupRow row(int64_t n, int64_t c, int64_t y) const { return lookup_row(a, n, c, y); }
};

}  // namespace kernels
}  // namespace prefetch
