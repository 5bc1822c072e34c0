// gaussian_blur, torch-free: each uint8 image of a batch convolved with its own separable kernel
// (a 1-D kernel along x and one along y, torchvision's gaussian_blur's weights, which the torch
// layer computes), torch's reflect padding at the borders (padding kx / 2 and ky / 2, below W
// and H: the plan checks), rounded half to even and cast to uint8, as torchvision's round_() and
// .to(uint8). Two passes: the rows (along x) into float32, then the columns (along y) into the
// output; each value's sum is taken in double in the order of the taps, where every product is
// exact (a float32 weight times a byte or a float32), so the CPU builds and the CUDA kernel write
// the same bytes whether or not a compiler fuses the multiply-adds. Arguments as raw pointers and
// sizes, a CPU implementation over a range of output rows (the torch layer parallelises it), and
// a CUDA launcher on a stream.
#pragma once
#include <cstdint>

namespace prefetch {
namespace kernels {

struct GaussianBlurArgs {
  const uint8_t* images = nullptr;  // [N, C, H, W], any strides (in elements)
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t sN = 0, sC = 0, sH = 0, sW = 0;
  const float* kernel_x = nullptr;  // [N, kx] contiguous, on the kernel's device: image n's row taps
  int64_t kx = 0;                   // odd, kx / 2 < W
  const float* kernel_y = nullptr;  // [N, ky] contiguous: image n's column taps
  int64_t ky = 0;                   // odd, ky / 2 < H
  float* rows = nullptr;            // CUDA only: [N, C, H, W] float32, the row pass (the CPU keeps bands of its own)
  uint8_t* out = nullptr;           // [N, C, H, W] contiguous
};

// Output rows are (n, c, y) triples, numbered (n * C + c) * H + y.
void gaussian_blur_cpu(const GaussianBlurArgs& args, int64_t row_begin, int64_t row_end);

// Launch on `stream` (a cudaStream_t): the row pass into args.rows, then the column pass; defined
// in gaussian_blur.cu. Returns a cudaError_t.
int gaussian_blur_cuda(const GaussianBlurArgs& args, void* stream);

}  // namespace kernels
}  // namespace prefetch
