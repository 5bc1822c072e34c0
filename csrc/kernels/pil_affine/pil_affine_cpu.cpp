// CPU twin of pil_affine.cu: every output pixel is pil_affine_pixel, the code each CUDA thread
// runs (Pillow's own generic transform is per pixel too). Built for the baseline ISA, whose
// compilers have no fused multiply-add to contract the float64 products and sums that must round
// one at a time.
#include <cstdint>

#include "pil_affine/pil_affine.h"
#include "pil_affine/pil_affine_thread_work.h"

namespace prefetch {
namespace kernels {

namespace {

template <int kChannels>
void pixel_rows(const PilAffineArgs& a, int64_t row_begin, int64_t row_end) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t n = row / a.H, y = row % a.H;
    for (int64_t x = 0; x < a.W; ++x) pil_affine_pixel<kChannels>(a, n, y, x);
  }
}

}  // namespace

void pil_affine_cpu(const PilAffineArgs& a, int64_t row_begin, int64_t row_end) {
  if (a.C == 3) return pixel_rows<3>(a, row_begin, row_end);
  if (a.C == 1) return pixel_rows<1>(a, row_begin, row_end);
  pixel_rows<0>(a, row_begin, row_end);
}

}  // namespace kernels
}  // namespace prefetch
