// histograms, torch-free: the 256-bin histogram of each channel of each uint8 image of a batch —
// what Equalize builds its table from (prefetch/transforms/policy_ops.py), and in torch an
// int64 copy of every value and a scatter_add_ (~400 us an image of 3x176x176 on one core).
// Arguments as raw pointers and sizes, a CPU implementation over a range of planes (the torch
// layer parallelises it), and a CUDA launcher on a stream.
#pragma once
#include <cstdint>

namespace prefetch {
namespace kernels {

constexpr int64_t kHistogramBins = 256;

struct HistogramArgs {
  const uint8_t* images = nullptr;  // [N, C, H, W], any strides (in elements)
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t sN = 0, sC = 0, sH = 0, sW = 0;
  int32_t* out = nullptr;           // [N, C, 256] contiguous, zeroed: counts (H * W below 2^31)
};

// Planes (n, c), numbered n * C + c: each plane's counts.
void histogram_cpu(const HistogramArgs& args, int64_t plane_begin, int64_t plane_end);

// Launch on `stream` (a cudaStream_t); defined in histogram.cu. Returns a cudaError_t.
int histogram_cuda(const HistogramArgs& args, void* stream);

}  // namespace kernels
}  // namespace prefetch
