// The fused augment ops, torch-free: arguments as raw pointers and sizes, a CPU implementation
// over a range of output rows (the torch layer parallelises it), and CUDA launchers on a stream.
#pragma once
#include <cstdint>

#include "geometry.h"

namespace prefetch {
namespace kernels {

// Channel counts up to this travel by value in the CUDA kernel's arguments (no upload per call,
// and safe to capture in a CUDA graph); more channels are read from NormalizeFlipArgs::affine_device.
constexpr int kInlineChannels = 64;

enum class OutDType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

struct NormalizeFlipArgs {
  const uint8_t* images = nullptr;
  Geometry g;
  const int64_t* offsets = nullptr;  // [N, 2] (top, left) or null: centred
  const uint8_t* hflip = nullptr;    // [N] or null
  const uint8_t* vflip = nullptr;    // [N] or null
  const Affine* affine = nullptr;    // [C], host memory: the CPU kernel reads it, and the CUDA
                                     // launcher passes up to kInlineChannels of it by value
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

// Output rows are (n, y) pairs, numbered n * h + y.
void normalize_flip_cpu(const NormalizeFlipArgs& args, int64_t row_begin, int64_t row_end);
void flip_crop_cpu(const FlipCropArgs& args, int64_t row_begin, int64_t row_end);

// Launch on `stream` (a cudaStream_t); defined in normalize_flip.cu. Return a cudaError_t.
int normalize_flip_cuda(const NormalizeFlipArgs& args, void* stream);
int flip_crop_cuda(const FlipCropArgs& args, void* stream);

}  // namespace kernels
}  // namespace prefetch
