// CPU twin of normalize_flip.cu: the same geometry (common/geometry.h). The body is
// normalize_flip_cpu_impl.h; this file builds it for the baseline ISA and dispatches to the
// AVX2 + FMA + F16C build (normalize_flip_cpu_avx2.cpp) when use_avx2_build() says so.
#include "common/cpu_dispatch.h"
#include "normalize_flip/normalize_flip.h"
#include "normalize_flip/normalize_flip_cpu_impl.h"

namespace prefetch {
namespace kernels {

// The other builds (normalize_flip_cpu_avx2.cpp), compiled where PREFETCH_AVX2_BUILD is 1.
void normalize_flip_cpu_avx2(const NormalizeFlipArgs& args, int64_t row_begin, int64_t row_end);

namespace {

void normalize_flip_cpu_baseline(const NormalizeFlipArgs& args, int64_t row_begin, int64_t row_end) {
  normalize_flip_impl<StoreFloat16Software>(args, row_begin, row_end);
}

}  // namespace

void normalize_flip_cpu(const NormalizeFlipArgs& args, int64_t row_begin, int64_t row_end) {
  run_cpu_build(args, row_begin, row_end, &normalize_flip_cpu_baseline, PREFETCH_ISA_BUILD(normalize_flip_cpu_avx2));
}

}  // namespace kernels
}  // namespace prefetch
