// CPU twin of color_jitter.cu. The body is color_jitter_cpu_impl.h; this file builds it for the
// baseline ISA and dispatches to the AVX2 build (color_jitter_cpu_avx2.cpp) when use_avx2_build()
// says so.
// Before the kernel's own headers, so their inline functions vectorise their selects too, and
// round each product and sum alone (the hue's and Pillow's blend), where a baseline with an FMA
// instruction (not x86-64's) would contract them.
#include "common/no_contraction.h"
#include "common/vectorise_selects.h"

#include "color_jitter/color_jitter.h"
#include "color_jitter/color_jitter_cpu_impl.h"
#include "common/cpu_dispatch.h"

namespace prefetch {
namespace kernels {

// The other builds (color_jitter_cpu_avx2.cpp, color_jitter_cpu_avx512.cpp), compiled where PREFETCH_AVX2_BUILD is 1.
void color_jitter_cpu_avx2(const ColorJitterArgs& args, int64_t image_begin, int64_t image_end);
void color_jitter_cpu_avx512(const ColorJitterArgs& args, int64_t image_begin, int64_t image_end);

namespace {

void color_jitter_cpu_baseline(const ColorJitterArgs& args, int64_t image_begin, int64_t image_end) {
  color_jitter_images<struct BaselineIsa>(args, image_begin, image_end);
}

}  // namespace

void color_jitter_cpu(const ColorJitterArgs& args, int64_t image_begin, int64_t image_end) {
  run_cpu_build(args, image_begin, image_end, &color_jitter_cpu_baseline, PREFETCH_ISA_BUILD(color_jitter_cpu_avx2), PREFETCH_ISA_BUILD(color_jitter_cpu_avx512));
}

}  // namespace kernels
}  // namespace prefetch
