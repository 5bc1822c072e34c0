// CPU twin of gaussian_blur.cu. The body is gaussian_blur_cpu_impl.h; this file builds it for the
// baseline ISA and dispatches to the AVX2 build (gaussian_blur_cpu_avx2.cpp) when
// use_avx2_build() says so.
#include "common/cpu_dispatch.h"
#include "gaussian_blur/gaussian_blur.h"
#include "gaussian_blur/gaussian_blur_cpu_impl.h"

namespace prefetch {
namespace kernels {

// The other build (gaussian_blur_cpu_avx2.cpp), compiled where PREFETCH_AVX2_BUILD is 1.
void gaussian_blur_cpu_avx2(const GaussianBlurArgs& args, int64_t row_begin, int64_t row_end);

namespace {

void gaussian_blur_cpu_baseline(const GaussianBlurArgs& args, int64_t row_begin, int64_t row_end) {
  gaussian_blur_rows<ScalarBlurBlocks>(args, row_begin, row_end);
}

}  // namespace

void gaussian_blur_cpu(const GaussianBlurArgs& args, int64_t row_begin, int64_t row_end) {
  run_cpu_build(args, row_begin, row_end, &gaussian_blur_cpu_baseline, PREFETCH_ISA_BUILD(gaussian_blur_cpu_avx2));
}

}  // namespace kernels
}  // namespace prefetch
