// sharpness, torch-free: each uint8 image of a batch blended with its 3x3 smoothing by its own
// factor, as torchvision's adjust_sharpness (the policies' Sharpness op): the smoothing (1s around
// a 5, over 13) rounded to whole values, v + (smooth - v) * (1 - factor) with one rounding to
// float32 (torchvision's add_ with alpha, a fused multiply-add), clamped and truncated to uint8;
// the one-pixel border kept, images of 2 pixels or fewer a side unchanged. With `pillow`, Pillow's
// ImageEnhance.Sharpness instead (timm's RandAugment op on PIL images): ImageFilter.SMOOTH's
// float32 filter (which gives the same rounded smoothing: sharpness_thread_work.h), then Blend.c's
// smooth + factor * (v - smooth) in float32 with two roundings, clipped and truncated, over every
// value (the border's smoothing is itself: the border kept for any finite factor). Arguments as
// raw pointers and sizes, a CPU implementation over a range of output rows (the torch layer
// parallelises it), and a CUDA launcher on a stream.
#pragma once
#include <cstdint>

namespace prefetch {
namespace kernels {

struct SharpnessArgs {
  const uint8_t* images = nullptr;  // [N, C, H, W], any strides (in elements)
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t sN = 0, sC = 0, sH = 0, sW = 0;
  const double* factors = nullptr;  // [N], on the kernel's device
  uint8_t* out = nullptr;           // [N, C, H, W] contiguous
  bool pillow = false;              // Pillow's arithmetic, not torchvision's
};

// Output rows are (n, c, y) triples, numbered (n * C + c) * H + y.
void sharpness_cpu(const SharpnessArgs& args, int64_t row_begin, int64_t row_end);

// Launch on `stream` (a cudaStream_t); defined in sharpness.cu. Returns a cudaError_t.
int sharpness_cuda(const SharpnessArgs& args, void* stream);

}  // namespace kernels
}  // namespace prefetch
