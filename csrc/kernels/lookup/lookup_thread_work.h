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

// Output value (n, c, y, x).
PF_HD void lookup_value(const LookupArgs& a, int64_t n, int64_t c, int64_t y, int64_t x) {
  const uint8_t v = a.images[n * a.sN + c * a.sC + y * a.sH + x * a.sW];
  a.out[((n * a.C + c) * a.H + y) * a.W + x] = lookup_table(a, n, c)[v];
}

// A CUDA thread: value (n, c, y, x) of the launches common/plane_rows.h numbers.
struct LookupThread {
  LookupArgs a;
  PF_HD void operator()(int64_t n, int64_t c, int64_t y, int64_t x) const { lookup_value(a, n, c, y, x); }
};

}  // namespace kernels
}  // namespace prefetch
