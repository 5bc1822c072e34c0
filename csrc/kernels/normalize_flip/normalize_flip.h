// normalize_flip, torch-free: each uint8 image of a batch (NHWC, NCHW or any strided view) is
// cropped to its window, flipped, optionally gathered from a larger input, normalized and cast to
// float32, float16 or bfloat16 in one pass. Arguments as raw pointers and sizes, a CPU
// implementation over a range of output rows (the torch layer parallelises it), and a CUDA
// launcher on a stream. flip_crop (../flip_crop/) applies the same windows, flips and gather to
// the batch's masks.
#pragma once
#include <cstdint>

#include "common/float_outputs.h"
#include "common/geometry.h"

namespace prefetch {
namespace kernels {

struct NormalizeFlipArgs {
  const uint8_t* images = nullptr;
  Geometry g;
  const int64_t* offsets = nullptr;  // [N, 2] (top, left) or null: centred
  const uint8_t* hflip = nullptr;    // [N] or null
  const uint8_t* vflip = nullptr;    // [N] or null
  const Affine* affine = nullptr;    // [C], host memory: the CPU kernel reads it, and the CUDA
                                     // launcher passes up to kInlineChannels of it by value
                                     // (common/affine_table.h)
  const Affine* affine_device = nullptr;  // [C] on the device; CUDA reads it only for C > kInlineChannels
  uint8_t fill = 0;
  void* out = nullptr;
  OutDType dtype = OutDType::kFloat32;
  int64_t oN = 0, oC = 0, oY = 0, oX = 0;  // output strides, elements
};

// Output rows are (n, y) pairs, numbered n * h + y.
void normalize_flip_cpu(const NormalizeFlipArgs& args, int64_t row_begin, int64_t row_end);

// Launch on `stream` (a cudaStream_t); defined in normalize_flip.cu. Returns a cudaError_t.
int normalize_flip_cuda(const NormalizeFlipArgs& args, void* stream);

}  // namespace kernels
}  // namespace prefetch
