// The CPU gaussian_blur built for AVX2 + FMA (x86-64 only; gaussian_blur_cpu.cpp calls it when the
// CPU has them): the impl's loops over x, 4 doubles a vector. Every product the sums add is exact
// (gaussian_blur.h), so the FMAs the compiler forms round as the baseline's separate adds.
#include "common/cpu_dispatch.h"
#if PREFETCH_AVX2_BUILD
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gaussian_blur/gaussian_blur.h"
#include "gaussian_blur/gaussian_blur_thread_work.h"

// The impl's standard headers and per-value functions are included above, outside the pragma: a
// standard header first seen inside it declares its always_inline members AVX2-only, which GCC 13
// then refuses to inline into baseline code (normalize_flip_cpu_avx2.cpp says more).
#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "gaussian_blur/gaussian_blur_cpu_impl.h"

namespace prefetch {
namespace kernels {

void gaussian_blur_cpu_avx2(const GaussianBlurArgs& args, int64_t row_begin, int64_t row_end) {
  gaussian_blur_rows<struct Avx2Isa>(args, row_begin, row_end);
}

}  // namespace kernels
}  // namespace prefetch

#pragma GCC pop_options
#endif  // PREFETCH_AVX2_BUILD
