// The CPU color_jitter built for AVX-512 (x86-64 only; color_jitter_cpu.cpp calls it before the
// AVX2 build when cpu_has_avx512()): the AVX2 build's body
// (color_jitter_cpu_impl.h) with 16 floats a vector and the selects on mask registers, the same
// roundings — the multiply-adds fused only where fma_rn asks, no contraction in this file.
#include "common/cpu_dispatch.h"
#if PREFETCH_AVX2_BUILD
#include "common/no_contraction.h"
#include "common/vectorise_selects.h"

#include <algorithm>
#include <cstdint>

#include "color_jitter/color_jitter.h"
#include "color_jitter/color_jitter_thread_work.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,prefer-vector-width=512")

#include "color_jitter/color_jitter_cpu_impl.h"

namespace prefetch {
namespace kernels {
void color_jitter_cpu_avx512(const ColorJitterArgs& args, int64_t image_begin, int64_t image_end) {
  color_jitter_images<struct Avx512Isa>(args, image_begin, image_end);
}
}  // namespace kernels
}  // namespace prefetch

#pragma GCC pop_options
#endif  // PREFETCH_AVX2_BUILD
