// Pillow's blend (Blend.c), what every ImageEnhance class's enhance(factor) computes and what
// timm's RandAugment and AugMix call through them: shared by sharpness (its pillow mode) and
// color_jitter (its pillow_color step). __host__ __device__: the CPU kernels and the CUDA threads
// run this same code.
#pragma once
#include <cstdint>

#include "common/host_device.h"
#include "common/round_each.h"

namespace prefetch {
namespace kernels {

// Blend.c's clip8: 0 at or below 0, 255 at or above 255, else truncated. NaN (a factor beyond
// float32's range times a difference of 0), where Pillow's C is undefined, is 0, as its conversion
// gives on x86-64.
PF_HD uint8_t pil_clip8(float v) {
  const float low = v > 0.0f ? v : 0.0f;
  return static_cast<uint8_t>(low >= 255.0f ? 255.0f : low);
}

// Blend.c's (float)(degenerate + alpha * (v - degenerate)): the product and the sum each rounded
// to float32 (two roundings, never a fused multiply-add: files that inline this into an FMA
// target include common/no_contraction.h), clipped. alpha: the factor as a C float, as
// ImagingBlend takes it.
PF_HD uint8_t pil_blend(int32_t degenerate, int32_t v, float alpha) {
  return pil_clip8(add_rn(static_cast<float>(degenerate), mul_rn(alpha, static_cast<float>(v - degenerate))));
}

// Pillow's convert("L") of an RGB pixel (Convert.c's L24: ITU-R 601-2 luma in 16-bit fixed
// point), ImageEnhance.Color's degenerate grey.
PF_HD int32_t pil_grey(int32_t r, int32_t g, int32_t b) {
  return (r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16;
}

}  // namespace kernels
}  // namespace prefetch
