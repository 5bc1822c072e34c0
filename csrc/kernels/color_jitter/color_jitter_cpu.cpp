// CPU twin of color_jitter.cu. The body is color_jitter_cpu_impl.h; this file builds it for the
// baseline ISA and dispatches to the AVX2 build (color_jitter_cpu_avx2.cpp) when use_avx2_build()
// says so.
// Before the kernel's own headers, so their inline functions vectorise their selects too.
#include "common/vectorise_selects.h"

#include "color_jitter/color_jitter.h"
#include "color_jitter/color_jitter_cpu_impl.h"
#include "common/cpu_dispatch.h"

namespace prefetch {
namespace kernels {

#if PREFETCH_AVX2_BUILD
void color_jitter_cpu_avx2(const ColorJitterArgs& args, int64_t image_begin, int64_t image_end);
void color_jitter_cpu_avx512(const ColorJitterArgs& args, int64_t image_begin, int64_t image_end);
#endif

void color_jitter_cpu(const ColorJitterArgs& args, int64_t image_begin, int64_t image_end) {
#if PREFETCH_AVX2_BUILD
  if (use_avx512_build()) return color_jitter_cpu_avx512(args, image_begin, image_end);
  if (use_avx2_build()) return color_jitter_cpu_avx2(args, image_begin, image_end);
#endif
  color_jitter_images<struct BaselineIsa>(args, image_begin, image_end);
}

}  // namespace kernels
}  // namespace prefetch
