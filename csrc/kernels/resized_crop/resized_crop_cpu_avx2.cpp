// The CPU resized_crop built for AVX2 + FMA + F16C (x86-64 only; resized_crop_cpu.cpp calls it
// when the CPU has those instructions): 8-wide vertical blends, fp16 rounding with vcvtps2ph. No
// multiply-add contracted (common/no_contraction.h): the same bits as the baseline build and the
// CUDA thread work.
#include "common/no_contraction.h"  // first: for every function of this file
#include "common/cpu_dispatch.h"
#if PREFETCH_AVX2_BUILD
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/float_outputs.h"
#include "resized_crop/resized_crop.h"
#include "resized_crop/resized_crop_taps.h"

// The impl (its templates must be defined inside the target pragma to be built for AVX2) gets
// its standard headers here, outside it: a standard header first seen inside the pragma declares
// its always_inline members AVX2-only, and GCC 13 then refuses to inline them into baseline code
// ("inlining failed ... target specific option mismatch" in std::allocator). So do the shared
// headers whose inline functions have external linkage (the taps): first seen inside the pragma
// they are compiled with AVX2 here and without it in the baseline file, one symbol two bodies,
// and the linker keeps either (tests/test_op_files.py checks every such file).
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "common/float16_store_f16c.h"
#define PREFETCH_RESIZED_CROP_AVX2 1  // (the impl's two-pixel AVX blends)
#include "resized_crop/resized_crop_cpu_impl.h"

namespace prefetch {
namespace kernels {
void resized_crop_cpu_avx2(const ResizedCropArgs& args, int64_t row_begin, int64_t row_end) {
  resized_crop_impl<StoreFloat16F16C>(args, row_begin, row_end);
}
}  // namespace kernels
}  // namespace prefetch

#pragma GCC pop_options
#endif
