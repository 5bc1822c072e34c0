// color_jitter, torch-free: the colour adjustments of ColorJitter and of the augmentation policies
// (brightness, contrast, saturation, hue) applied to each uint8 image of a batch as its own chain
// of steps, in its own order, with its own factors — torchvision v2's adjust_* on uint8 tensors,
// each step rounded back to uint8 (truncated) before the next, as torchvision's chain of ops
// rounds — and Pillow's ImageEnhance.Color (pillow_color: timm's RandAugment and AugMix Color).
// One pass over the pixels, plus one per Contrast step before it (a contrast blends with its
// image's mean grey at that point of the chain). Arguments as raw pointers and sizes, a CPU
// implementation over a range of images (the torch layer parallelises it), and a CUDA launcher on
// a stream.
#pragma once
#include <cstdint>

namespace prefetch {
namespace kernels {

// The steps a chain can hold (the codes of `steps`).
enum ColorStep : int64_t {
  kColorIdentity = 0,
  kColorBrightness = 1,
  kColorContrast = 2,
  kColorSaturation = 3,
  kColorHue = 4,
  // Pillow's ImageEnhance.Color(image).enhance(factor): Blend.c's blend of each value with the
  // pixel's convert("L") grey (common/pillow_blend.h); a 1-channel image blends with itself.
  kColorPillowColor = 5,
};
constexpr int64_t kColorSteps = 6;

struct ColorJitterArgs {
  const uint8_t* images = nullptr;  // [N, C, H, W], C 1 or 3, any strides (in elements)
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t sN = 0, sC = 0, sH = 0, sW = 0;
  const int64_t* steps = nullptr;   // [N, K] contiguous: each image's chain, in order (ColorStep)
  const double* factors = nullptr;  // [N, K] contiguous: each step's factor
  int64_t K = 0;
  // [N, K] contiguous, zeroed: entry (n, j) receives the sum of the whole-valued grey of image n
  // as it enters its j-th Contrast step (the kernels fill it before the pixels that need it).
  int64_t* grey_sums = nullptr;
  uint8_t* out = nullptr;           // [N, C, H, W] contiguous
};

// Images [image_begin, image_end): their grey sums, then their pixels.
void color_jitter_cpu(const ColorJitterArgs& args, int64_t image_begin, int64_t image_end);

// Launch on `stream` (a cudaStream_t); defined in color_jitter.cu. Returns a cudaError_t.
int color_jitter_cuda(const ColorJitterArgs& args, void* stream);

}  // namespace kernels
}  // namespace prefetch
