// sharpness's CPU body over a range of output rows, compiled twice: for the baseline ISA
// (sharpness_cpu.cpp) and for AVX2 (sharpness_cpu_avx2.cpp, where 4 doubles a vector halve the
// blend's cost). The same per-value functions as a CUDA thread (sharpness_thread_work.h); the
// interior of a contiguous row in one loop the compiler vectorises, the two border values copied
// (torchvision's arithmetic) or blended with themselves (Pillow's). Contraction is harmless for
// torchvision's blend (its product is exact in double, so a fused multiply-add rounds as the
// separate add does) and would change Pillow's (two float32 roundings): both files include
// common/no_contraction.h first. The per-value functions are included, by the AVX2 file too,
// before its target pragma: they stay baseline functions in both builds.
#pragma once
#include <cstdint>

#include "sharpness/sharpness.h"
#include "sharpness/sharpness_thread_work.h"

namespace prefetch {
namespace kernels {

// Isa: a tag of the build that instantiates it, so that the two builds are two functions (one name
// compiled for two targets would be one symbol, and the linker would keep either).
// interior(up, p, down, dst, W, rest): a build's own loop over a contiguous row's first interior
// values, returning the first x it left to the loop below (1 where it did none).
template <typename Isa, typename Interior>
void sharpness_rows(const SharpnessArgs& a, int64_t row_begin, int64_t row_end, Interior interior) {
  const int64_t C = a.C, H = a.H, W = a.W, sH = a.sH, sW = a.sW;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t y = row % H, plane = row / H, n = plane / C, c = plane % C;
    const uint8_t* p = a.images + n * a.sN + c * a.sC + y * sH;
    uint8_t* dst = a.out + row * W;
    if (a.pillow) {  // Pillow's blend, each operation rounded (the AVX2 file contracts none)
      const float alpha = static_cast<float>(a.factors[n]);
      if (y == 0 || y == H - 1 || W <= 2) {
        for (int64_t x = 0; x < W; ++x) dst[x] = pil_border(p[x * sW], alpha);
        continue;
      }
      dst[0] = pil_border(p[0], alpha);
      dst[W - 1] = pil_border(p[(W - 1) * sW], alpha);
      const uint8_t *up = p - sH, *down = p + sH;
      if (sW == 1) {  // contiguous rows: the loop vectorises
        for (int64_t x = 1; x < W - 1; ++x) {
          const int32_t v = p[x];
          const int32_t s = up[x - 1] + up[x] + up[x + 1] + p[x - 1] + 5 * v + p[x + 1] + down[x - 1] + down[x] +
                            down[x + 1];
          dst[x] = pil_blend(sharpness_smooth(s), v, alpha);
        }
      } else {
        const SharpnessRow values = sharpness_row(a, n, c, y);
        for (int64_t x = 1; x < W - 1; ++x) values(x);
      }
      continue;
    }
    if (y == 0 || y == H - 1 || W <= 2) {
      for (int64_t x = 0; x < W; ++x) dst[x] = p[x * sW];
      continue;
    }
    dst[0] = p[0];
    dst[W - 1] = p[(W - 1) * sW];
    const float rest = sharpness_rest(a.factors[n]);
    const uint8_t *up = p - sH, *down = p + sH;
    if (sW == 1) {  // contiguous rows: the loop vectorises
      for (int64_t x = interior(up, p, down, dst, W, rest); x < W - 1; ++x) {
        const int32_t v = p[x];
        const int32_t s = up[x - 1] + up[x] + up[x + 1] + p[x - 1] + 5 * v + p[x + 1] + down[x - 1] + down[x] +
                          down[x + 1];
        dst[x] = sharpness_blend(v, sharpness_smooth(s), rest);
      }
    } else {
      const SharpnessRow values = sharpness_row(a, n, c, y);
      for (int64_t x = 1; x < W - 1; ++x) values(x);
    }
  }
}

}  // namespace kernels
}  // namespace prefetch
