// color_jitter's CPU body over a range of images, compiled twice: for the baseline ISA
// (color_jitter_cpu.cpp, SSE2: 4 floats a vector, the multiply-adds through libm's exact fmaf) and
// for AVX2 with FMA (color_jitter_cpu_avx2.cpp: 8 floats, the multiply-adds one instruction). Per
// image, the grey sums its Contrast steps need, then its pixels — the same per-value functions as a
// CUDA thread (color_jitter_thread_work.h) in the same order for each value, regrouped by step over
// chunks of a row so that the compiler vectorises every step's loop.
// Neither build may contract a * b + c on its own: torchvision rounds the hue's products and sums
// one at a time, and Pillow its blend's (pillow_color). Both files compile with contraction off
// (common/no_contraction.h: x86-64's baseline has no FMA instruction, another ISA's may), so only
// fma_rn fuses.
// Both files include common/vectorise_selects.h first (the hue's selects vectorise only without
// trapping math) and this file's headers before any target pragma (they stay baseline functions,
// inlined into either build).
#pragma once
#include <algorithm>
#include <cstdint>

#include "color_jitter/color_jitter.h"
#include "color_jitter/color_jitter_thread_work.h"

namespace prefetch {
namespace kernels {

constexpr int64_t kColorJitterChunk = 64;

// The first `upto` steps of image n's chain on the pixels x0 .. x0 + len of row y, their values
// (C planes of kColorJitterChunk) in v: cj_chain's work, a step at a time over the chunk.
template <typename Isa>
void color_jitter_chain_chunk(const ColorJitterArgs& a, int64_t n, int64_t y, int64_t x0, int64_t len,
                              int64_t upto, int32_t (*v)[kColorJitterChunk]) {
  const int64_t C = a.C;
  const uint8_t* p = a.images + n * a.sN + y * a.sH + x0 * a.sW;
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t x = 0; x < len; ++x) v[c][x] = p[c * a.sC + x * a.sW];
  }
  int64_t contrasts = 0;
  for (int64_t k = 0; k < upto; ++k) {
    const int64_t step = a.steps[n * a.K + k];
    const double factor = a.factors[n * a.K + k];
    const float f = static_cast<float>(factor);
    const float alpha = static_cast<float>(1.0 - factor);
    if (step == kColorBrightness) {
      for (int64_t c = 0; c < C; ++c) {
        for (int64_t x = 0; x < len; ++x) v[c][x] = cj_brightness(v[c][x], f);
      }
    } else if (step == kColorContrast) {
      const float mean = cj_mean(a, n, contrasts++);
      for (int64_t c = 0; c < C; ++c) {
        for (int64_t x = 0; x < len; ++x) v[c][x] = cj_blend(v[c][x], f, mean, alpha);
      }
    } else if (step == kColorSaturation && C == 3) {
      for (int64_t x = 0; x < len; ++x) {
        const float grey = static_cast<float>(cj_grey(v[0][x], v[1][x], v[2][x]));
        v[0][x] = cj_blend(v[0][x], f, grey, alpha);
        v[1][x] = cj_blend(v[1][x], f, grey, alpha);
        v[2][x] = cj_blend(v[2][x], f, grey, alpha);
      }
    } else if (step == kColorHue && C == 3) {
      for (int64_t x = 0; x < len; ++x) {
        int32_t rgb[3] = {v[0][x], v[1][x], v[2][x]};
        cj_hue(rgb, f);
        v[0][x] = rgb[0], v[1][x] = rgb[1], v[2][x] = rgb[2];
      }
    } else if (step == kColorPillowColor && C == 3) {
      for (int64_t x = 0; x < len; ++x) {
        const int32_t grey = pil_grey(v[0][x], v[1][x], v[2][x]);
        v[0][x] = pil_blend(grey, v[0][x], f);
        v[1][x] = pil_blend(grey, v[1][x], f);
        v[2][x] = pil_blend(grey, v[2][x], f);
      }
    } else if (step == kColorPillowColor) {
      for (int64_t x = 0; x < len; ++x) v[0][x] = pil_blend(v[0][x], v[0][x], f);
    }
  }
}

// Isa: a tag of the build that instantiates it (sharpness_cpu_impl.h says why).
template <typename Isa>
void color_jitter_images(const ColorJitterArgs& a, int64_t image_begin, int64_t image_end) {
  int32_t v[3][kColorJitterChunk];
  for (int64_t n = image_begin; n < image_end; ++n) {
    // The j-th Contrast's grey sum (cj_grey_entering summed), in order: it reads the sums before it.
    for (int64_t k = 0, j = 0; k < a.K; ++k) {
      if (a.steps[n * a.K + k] != kColorContrast) continue;
      int64_t sum = 0;
      for (int64_t y = 0; y < a.H; ++y) {
        for (int64_t x0 = 0; x0 < a.W; x0 += kColorJitterChunk) {
          const int64_t len = std::min(kColorJitterChunk, a.W - x0);
          color_jitter_chain_chunk<Isa>(a, n, y, x0, len, k, v);
          if (a.C == 3) {
            for (int64_t x = 0; x < len; ++x) sum += cj_grey(v[0][x], v[1][x], v[2][x]);
          } else {
            for (int64_t x = 0; x < len; ++x) sum += v[0][x];
          }
        }
      }
      a.grey_sums[n * a.K + j++] = sum;
    }
    // The plane size in a local, and each plane's store through a restrict pointer: a uint8_t
    // store may alias anything, so the compiler would otherwise re-read a.H for every byte and
    // leave the loop scalar.
    const int64_t plane = a.H * a.W;
    for (int64_t y = 0; y < a.H; ++y) {
      for (int64_t x0 = 0; x0 < a.W; x0 += kColorJitterChunk) {
        const int64_t len = std::min(kColorJitterChunk, a.W - x0);
        color_jitter_chain_chunk<Isa>(a, n, y, x0, len, a.K, v);
        uint8_t* dst = a.out + (n * a.C * a.H + y) * a.W + x0;
        for (int64_t c = 0; c < a.C; ++c) {
          uint8_t* __restrict d = dst + c * plane;
          const int32_t* __restrict s = v[c];
          for (int64_t x = 0; x < len; ++x) d[x] = static_cast<uint8_t>(s[x]);
        }
      }
    }
  }
}

}  // namespace kernels
}  // namespace prefetch
