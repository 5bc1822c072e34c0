// pil_affine, torch-free: each uint8 image of a batch through its own affine map with Pillow's
// conventions (Image.transform(size, AFFINE, data, resample, fillcolor=...), what timm's
// RandAugment and AutoAugment call for Rotate, ShearX/Y and TranslateX/Y), bilinear or bicubic.
// Arguments as raw pointers and sizes, a CPU implementation over a range of output rows (the torch
// layer parallelises it), and a CUDA launcher on a stream.
//
// Pillow's conventions (src/libImaging/Geometry.c: affine_transform, bilinear_filter*,
// bicubic_filter*, ImagingGenericTransform), which differ from grid_sample's (affine_warp):
// - the map takes the output pixel's centre (x + 0.5, y + 0.5) to the source point
//     xin = m[0] (x + 0.5) + m[1] (y + 0.5) + m[2],   yin = m[3] (x + 0.5) + m[4] (y + 0.5) + m[5]
//   in float64, the coefficients as Image.transform's `data` (float64 here too);
// - a source point outside [0, W) x [0, H) takes the fill whole (nothing is blended in);
// - inside, the taps around (xin - 0.5, yin - 0.5) are clamped to the edge;
// - bilinear is linear in x then y; bicubic is the cubic convolution with a = -1 (Pillow's
//   BICUBIC macro), rows then the column, all in float64;
// - the value is truncated to uint8 (bicubic first clipped to [0, 255]).
// Every product and sum is rounded on its own (no fused multiply-add on either backend), so the
// CPU and CUDA kernels write the bytes Pillow writes.
#pragma once
#include <cstdint>

namespace prefetch {
namespace kernels {

// Channels whose fill travels by value in the arguments (timm's images have 1 or 3).
constexpr int kPilAffineMaxChannels = 16;
constexpr int kPilAffineMatrixFields = 6;
// The largest height and width (Pillow's coordinates are C ints).
constexpr int64_t kPilAffineMaxSide = int64_t{1} << 24;

struct PilAffineArgs {
  const uint8_t* images = nullptr;  // [N, C, H, W], any strides (in elements)
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t sN = 0, sC = 0, sH = 0, sW = 0;
  const double* matrices = nullptr;  // [N, 6] contiguous, Pillow's coefficients, on the kernel's device
  bool bicubic = false;              // else bilinear
  uint8_t fill[kPilAffineMaxChannels] = {};  // Pillow's fillcolor, one per channel
  uint8_t* out = nullptr;            // [N, C, H, W] contiguous
};

// Output rows are (n, y) pairs, numbered n * H + y.
void pil_affine_cpu(const PilAffineArgs& args, int64_t row_begin, int64_t row_end);

// Launch on `stream` (a cudaStream_t); defined in pil_affine.cu. Returns a cudaError_t.
int pil_affine_cuda(const PilAffineArgs& args, void* stream);

}  // namespace kernels
}  // namespace prefetch
