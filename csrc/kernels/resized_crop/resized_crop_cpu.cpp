// CPU twin of resized_crop.cu: the same taps (resized_crop_taps.h). The body is
// resized_crop_cpu_impl.h; this file builds it for the baseline ISA and dispatches to the
// AVX2 + FMA + F16C build (resized_crop_cpu_avx2.cpp) when use_avx2_build() says so.
#include "common/cpu_dispatch.h"
#include "resized_crop/resized_crop.h"
#include "resized_crop/resized_crop_cpu_impl.h"

namespace prefetch {
namespace kernels {

// The other builds (resized_crop_cpu_avx2.cpp), compiled where PREFETCH_AVX2_BUILD is 1.
void resized_crop_cpu_avx2(const ResizedCropArgs& args, int64_t row_begin, int64_t row_end);

namespace {

void resized_crop_cpu_baseline(const ResizedCropArgs& args, int64_t row_begin, int64_t row_end) {
  resized_crop_impl<StoreFloat16Software>(args, row_begin, row_end);
}

}  // namespace

void resized_crop_cpu(const ResizedCropArgs& args, int64_t row_begin, int64_t row_end) {
  run_cpu_build(args, row_begin, row_end, &resized_crop_cpu_baseline, PREFETCH_ISA_BUILD(resized_crop_cpu_avx2));
}

}  // namespace kernels
}  // namespace prefetch
