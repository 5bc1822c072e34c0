// CPU twin of sharpness.cu. The body is sharpness_cpu_impl.h; this file builds it for the baseline
// ISA and dispatches to the AVX2 build (sharpness_cpu_avx2.cpp) when use_avx2_build() says so.
#include "common/cpu_dispatch.h"
#include "sharpness/sharpness.h"
#include "sharpness/sharpness_cpu_impl.h"

namespace prefetch {
namespace kernels {

#if PREFETCH_AVX2_BUILD
void sharpness_cpu_avx2(const SharpnessArgs& args, int64_t row_begin, int64_t row_end);
#endif

void sharpness_cpu(const SharpnessArgs& args, int64_t row_begin, int64_t row_end) {
#if PREFETCH_AVX2_BUILD
  if (use_avx2_build()) return sharpness_cpu_avx2(args, row_begin, row_end);
#endif
  sharpness_rows<struct BaselineIsa>(args, row_begin, row_end,
                                     [](const uint8_t*, const uint8_t*, const uint8_t*, uint8_t*, int64_t, float) {
                                       return int64_t{1};
                                     });
}

}  // namespace kernels
}  // namespace prefetch
