// The CPU color_jitter built for AVX2 (x86-64 only; color_jitter_cpu.cpp calls it when the CPU has
// it): 8 floats or 4 doubles a vector. Its target is "avx2" alone, not "fma": the hue rounds its
// products and sums one at a time, as torchvision does (color_jitter_cpu_impl.h).
#include "common/cpu_dispatch.h"
#if PREFETCH_AVX2_BUILD
#include "common/vectorise_selects.h"

#include <algorithm>
#include <cstdint>

#include "color_jitter/color_jitter.h"
#include "color_jitter/color_jitter_thread_work.h"

#pragma GCC push_options
#pragma GCC target("avx2")

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
