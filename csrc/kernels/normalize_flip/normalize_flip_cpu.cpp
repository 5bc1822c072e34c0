// CPU twin of normalize_flip.cu: the same geometry (common/geometry.h). The body is
// normalize_flip_cpu_impl.h; this file builds it for the baseline ISA and dispatches to the
// AVX2 + FMA + F16C build (normalize_flip_cpu_avx2.cpp) when use_avx2_build() says so.
#include "common/cpu_dispatch.h"
#include "normalize_flip/normalize_flip.h"
#include "normalize_flip/normalize_flip_cpu_impl.h"

namespace prefetch {
namespace kernels {

#if PREFETCH_AVX2_BUILD
void normalize_flip_cpu_avx2(const NormalizeFlipArgs& args, int64_t row_begin, int64_t row_end);
#endif

void normalize_flip_cpu(const NormalizeFlipArgs& args, int64_t row_begin, int64_t row_end) {
#if PREFETCH_AVX2_BUILD
  if (use_avx2_build()) return normalize_flip_cpu_avx2(args, row_begin, row_end);
#endif
  normalize_flip_impl<StoreFloat16Software>(args, row_begin, row_end);
}

}  // namespace kernels
}  // namespace prefetch
