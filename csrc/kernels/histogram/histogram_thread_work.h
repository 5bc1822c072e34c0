// One value of histograms: the bin a CUDA thread adds 1 to, and the CPU kernel's per-value work.
// __host__ __device__, so the CPU tests count every thread's bin (tests/cpp/histogram_test.cpp) and
// compare the counts with the CPU kernel's; histogram.cu only maps threads onto it and adds.
#pragma once
#include <cstdint>

#include "common/host_device.h"
#include "histogram/histogram.h"

namespace prefetch {
namespace kernels {

// Value (n, c, y, x)'s bin within its plane's 256.
PF_HD int64_t histogram_bin(const HistogramArgs& a, int64_t n, int64_t c, int64_t y, int64_t x) {
  return a.images[n * a.sN + c * a.sC + y * a.sH + x * a.sW];
}

// Plane (n, c)'s counts in the output.
PF_HD int32_t* histogram_counts(const HistogramArgs& a, int64_t n, int64_t c) {
  return a.out + (n * a.C + c) * kHistogramBins;
}

}  // namespace kernels
}  // namespace prefetch
