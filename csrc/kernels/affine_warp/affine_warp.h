// affine_warp, torch-free: each uint8 image of a batch resampled through its own affine map, as
// the augmentation policies' geometric ops (Rotate, ShearX/Y, TranslateX/Y) do: nearest or
// bilinear, a fill where the map leaves the image, rounded back to uint8. Arguments as raw
// pointers and sizes, a CPU implementation over a range of output rows (the torch layer
// parallelises it), and a CUDA launcher on a stream.
//
// The map takes an output pixel (x, y), pixel centres at whole numbers, to the source point
//   sx = m[0] x + m[1] y + m[2],   sy = m[3] x + m[4] y + m[5]
// (prefetch/transforms/policy_ops.py turns torchvision's inverse matrix into this form). The
// sampling is grid_sample's (align_corners=False, zeros outside, nearest ties to even) and the
// fill torchvision's: nearest takes the fill where the source pixel is outside; bilinear blends
// it in by the weight of the outside taps. The arithmetic is float32, every product and sum
// rounded on its own (no fused multiply-add on either backend), so the CPU and CUDA kernels write
// the same bytes.
#pragma once
#include <cstdint>

namespace prefetch {
namespace kernels {

// Channels whose fill travels by value in the arguments (policy images have 1 or 3).
constexpr int kWarpMaxChannels = 16;
constexpr int kWarpMatrixFields = 6;
// The largest height and width: the kernels' float32 rounding is exact below 2^22.
constexpr int64_t kWarpMaxSide = int64_t{1} << 21;

struct AffineWarpArgs {
  const uint8_t* images = nullptr;  // [N, C, H, W], any strides (in elements)
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t sN = 0, sC = 0, sH = 0, sW = 0;
  const float* matrices = nullptr;  // [N, 6] contiguous, on the kernel's device
  bool bilinear = false;
  bool has_fill = false;            // without a fill, outside is 0 (grid_sample's zeros)
  float fill[kWarpMaxChannels] = {};
  uint8_t* out = nullptr;           // [N, C, H, W] contiguous
};

// Output rows are (n, y) pairs, numbered n * H + y.
void affine_warp_cpu(const AffineWarpArgs& args, int64_t row_begin, int64_t row_end);

// Launch on `stream` (a cudaStream_t); defined in affine_warp.cu. Returns a cudaError_t.
int affine_warp_cuda(const AffineWarpArgs& args, void* stream);

}  // namespace kernels
}  // namespace prefetch
