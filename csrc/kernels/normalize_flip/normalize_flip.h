// The fused augment ops, torch-free: arguments as raw pointers and sizes, a CPU implementation
// over a range of output rows (the torch layer parallelises it), and CUDA launchers on a stream.
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

struct FlipCropArgs {
  const void* masks = nullptr;  // [N, H, W] elements of `itemsize` bytes
  int itemsize = 1;
  Geometry g;                   // C = 1
  const int64_t* offsets = nullptr;
  const uint8_t* hflip = nullptr;
  const uint8_t* vflip = nullptr;
  int64_t fill = 0;
  void* out = nullptr;          // [N, h, w] contiguous
};

// The element type of a mask of `bytes`-byte elements, for the CPU and CUDA flip_crop alike: the
// op only moves elements, never computes on them, so every dtype of a size is one of these. Calls
// f(T{}) with it and returns true; false for a size no kernel is instantiated for. Host code only
// (it picks a template instantiation), hence not PF_HD.
template <typename F>
inline bool with_mask_element(int bytes, F&& f) {
  if (bytes == 1) f(uint8_t{});
  else if (bytes == 2) f(int16_t{});
  else if (bytes == 4) f(int32_t{});
  else if (bytes == 8) f(int64_t{});
  else return false;
  return true;
}

// Output rows are (n, y) pairs, numbered n * h + y.
void normalize_flip_cpu(const NormalizeFlipArgs& args, int64_t row_begin, int64_t row_end);
void flip_crop_cpu(const FlipCropArgs& args, int64_t row_begin, int64_t row_end);

// Launch on `stream` (a cudaStream_t); defined in normalize_flip.cu. Return a cudaError_t.
int normalize_flip_cuda(const NormalizeFlipArgs& args, void* stream);
int flip_crop_cuda(const FlipCropArgs& args, void* stream);

}  // namespace kernels
}  // namespace prefetch
