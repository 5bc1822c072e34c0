// CPU twin of pil_affine.cu: every output pixel is pil_affine_pixel, the code each CUDA thread
// runs (Pillow's own generic transform is per pixel too). Built for the baseline ISA, whose
// compilers have no fused multiply-add to contract the float64 products and sums that must round
// one at a time; dispatches to the AVX2 build (pil_affine_cpu_avx2.cpp: bicubic four pixels at a
// time, the same operations) when use_avx2_build() says so.
#include <cstdint>

#include "common/cpu_dispatch.h"
#include "pil_affine/pil_affine.h"
#include "pil_affine/pil_affine_thread_work.h"

namespace prefetch {
namespace kernels {

// The other build (pil_affine_cpu_avx2.cpp), compiled where PREFETCH_AVX2_BUILD is 1.
void pil_affine_cpu_avx2(const PilAffineArgs& args, int64_t row_begin, int64_t row_end);

namespace {

template <int kChannels>
void pixel_rows(const PilAffineArgs& a, int64_t row_begin, int64_t row_end) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t n = row / a.H, y = row % a.H;
    for (int64_t x = 0; x < a.W; ++x) pil_affine_pixel<kChannels>(a, n, y, x);
  }
}

void pil_affine_cpu_baseline(const PilAffineArgs& a, int64_t row_begin, int64_t row_end) {
  if (a.C == 3) return pixel_rows<3>(a, row_begin, row_end);
  if (a.C == 1) return pixel_rows<1>(a, row_begin, row_end);
  pixel_rows<0>(a, row_begin, row_end);
}

}  // namespace

void pil_affine_cpu(const PilAffineArgs& a, int64_t row_begin, int64_t row_end) {
  // Bilinear has no other build (a third of bicubic's cost, and not timm's recipes' choice); the
  // AVX2 build keeps each channel's rows for up to kPilAffineMaxChannels (the op's own bound).
  if (!a.bicubic || a.C > kPilAffineMaxChannels) return pil_affine_cpu_baseline(a, row_begin, row_end);
  run_cpu_build(a, row_begin, row_end, &pil_affine_cpu_baseline, PREFETCH_ISA_BUILD(pil_affine_cpu_avx2));
}

}  // namespace kernels
}  // namespace prefetch
