// The CPU normalize_flip built for AVX2 + FMA + F16C (x86-64 only; normalize_flip_cpu.cpp calls it
// when the CPU has those instructions). fp16 rounding uses vcvtps2ph, 8 values at a time. No
// multiply-add is contracted (common/no_contraction.h): each rounds as the baseline build and the
// CUDA thread work (built with --fmad=false) round it, so all three write the same bits (the FMA
// moved the last bit of about half the values: the second H200 run).
#include "common/no_contraction.h"  // first: for every function of this file
#include "common/cpu_dispatch.h"
#if PREFETCH_AVX2_BUILD
#include <cstring>
#include <vector>

#include "common/float_outputs.h"
#include "common/geometry.h"
#include "normalize_flip/normalize_flip.h"

// The impl (its templates must be defined inside the target pragma to be built for AVX2) gets
// its standard headers here, outside it: a standard header first seen inside the pragma declares
// its always_inline members AVX2-only, and GCC 13 then refuses to inline them into baseline code
// ("inlining failed ... target specific option mismatch" in std::allocator).
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "common/float16_store_f16c.h"
#include "normalize_flip/normalize_flip_cpu_impl.h"

namespace prefetch {
namespace kernels {
void normalize_flip_cpu_avx2(const NormalizeFlipArgs& args, int64_t row_begin, int64_t row_end) {
  normalize_flip_impl<StoreFloat16F16C>(args, row_begin, row_end);
}
}  // namespace kernels
}  // namespace prefetch

#pragma GCC pop_options
#endif
