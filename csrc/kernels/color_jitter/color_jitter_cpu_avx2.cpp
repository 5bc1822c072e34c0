// The CPU color_jitter built for AVX2 and FMA (x86-64 only; color_jitter_cpu.cpp calls it when the
// CPU has them): 8 floats a vector, the blends' and the grey's multiply-adds fused as torch fuses
// them (fma_rn), every other product and sum rounded alone as torchvision rounds them — no
// contraction in this file (common/no_contraction.h; color_jitter_cpu_impl.h).
#include "common/cpu_dispatch.h"
#if PREFETCH_AVX2_BUILD
#include "common/no_contraction.h"
#include "common/vectorise_selects.h"

#include <algorithm>
#include <cstdint>

#include "color_jitter/color_jitter.h"
#include "color_jitter/color_jitter_thread_work.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "color_jitter/color_jitter_cpu_impl.h"

namespace prefetch {
namespace kernels {
void color_jitter_cpu_avx2(const ColorJitterArgs& args, int64_t image_begin, int64_t image_end) {
  color_jitter_images<struct Avx2Isa>(args, image_begin, image_end);
}
}  // namespace kernels
}  // namespace prefetch

#pragma GCC pop_options
#endif  // PREFETCH_AVX2_BUILD
