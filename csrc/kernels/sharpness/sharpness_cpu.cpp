// CPU twin of sharpness.cu. The body is sharpness_cpu_impl.h; this file builds it for the baseline
// ISA and dispatches to the AVX2 build (sharpness_cpu_avx2.cpp) when use_avx2_build() says so.
// Before the kernel's own headers: Pillow's blend rounds its product and its sum each, where a
// baseline with an FMA instruction (not x86-64's) would contract them; its clips (selects)
// vectorise.
#include "common/no_contraction.h"
#include "common/vectorise_selects.h"

#include "common/cpu_dispatch.h"
#include "sharpness/sharpness.h"
#include "sharpness/sharpness_cpu_impl.h"

namespace prefetch {
namespace kernels {

// The other builds (sharpness_cpu_avx2.cpp), compiled where PREFETCH_AVX2_BUILD is 1.
void sharpness_cpu_avx2(const SharpnessArgs& args, int64_t row_begin, int64_t row_end);

namespace {

void sharpness_cpu_baseline(const SharpnessArgs& args, int64_t row_begin, int64_t row_end) {
  sharpness_rows<struct BaselineIsa>(args, row_begin, row_end,
                                     [](const uint8_t*, const uint8_t*, const uint8_t*, uint8_t*, int64_t, float) {
                                       return int64_t{1};
                                     });
}

}  // namespace

void sharpness_cpu(const SharpnessArgs& args, int64_t row_begin, int64_t row_end) {
  run_cpu_build(args, row_begin, row_end, &sharpness_cpu_baseline, PREFETCH_ISA_BUILD(sharpness_cpu_avx2));
}

}  // namespace kernels
}  // namespace prefetch
