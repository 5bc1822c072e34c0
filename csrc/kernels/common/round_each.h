// Float32 products, sums, differences and quotients rounded one at a time on both backends: nvcc
// would otherwise fuse a * b + c into one FMA (one rounding) where the host compiler of the
// baseline build does not, and a value computed as torchvision computes it (each operation
// rounded) could then differ by an ulp between CPU and GPU. Shared by the ops whose thread work
// must round each operation (affine_warp, color_jitter, sharpness's Pillow arithmetic).
#pragma once

#include <cmath>

#include "common/host_device.h"

namespace prefetch {
namespace kernels {

PF_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
PF_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
PF_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
PF_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// a * b + c rounded once: a fused multiply-add where torchvision's arithmetic has one (torch's
// add_(other, alpha=) on float32). On the host std::fma is exact on every ISA: the FMA
// instruction where the caller's target has it (color_jitter's AVX2 build), else libm's fmaf.
PF_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

}  // namespace kernels
}  // namespace prefetch
