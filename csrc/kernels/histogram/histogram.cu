// The CUDA histograms kernel. Torch-free: raw pointers, sizes and a cudaStream_t, so CMake compiles
// and links it with nvcc on machines without a GPU or a CUDA torch. A thread's work is
// histogram_bin (histogram_thread_work.h), which the CPU tests run too. Blocks own planes: each
// counts its rows of one plane (rows blockIdx.x, + gridDim.x, ...; x threadIdx.x, + blockDim.x)
// into a 256-bin table in shared memory, then adds its non-zero bins to the plane's counts — a
// few thousand global atomic adds a plane instead of one a value (a flat image would put every
// one of them on one address). Integer counts: the order of the adds does not matter.
#include <cuda_runtime.h>

#include <algorithm>

#include "common/launch_grid.h"
#include "histogram/histogram.h"
#include "histogram/histogram_thread_work.h"

namespace prefetch {
namespace kernels {

namespace {

// Blocks per plane: enough rows each to pay for the table's zeroing and flush.
constexpr int64_t kRowsPerBlock = 16;

__global__ void histogram_kernel(HistogramArgs a) {
  __shared__ int32_t bins[kHistogramBins];
  const int64_t planes = a.N * a.C;
  for (int64_t plane = blockIdx.y; plane < planes; plane += gridDim.y) {  // uniform over the block
    const int64_t n = plane / a.C, c = plane % a.C;
    for (int64_t b = threadIdx.x; b < kHistogramBins; b += blockDim.x) bins[b] = 0;
    __syncthreads();
    for (int64_t y = blockIdx.x; y < a.H; y += gridDim.x) {
      for (int64_t x = threadIdx.x; x < a.W; x += blockDim.x) atomicAdd(&bins[histogram_bin(a, n, c, y, x)], 1);
    }
    __syncthreads();
    int32_t* counts = histogram_counts(a, n, c);
    for (int64_t b = threadIdx.x; b < kHistogramBins; b += blockDim.x) {
      if (bins[b] != 0) atomicAdd(&counts[b], bins[b]);
    }
    __syncthreads();  // before the next plane zeroes the table
  }
}

}  // namespace

int histogram_cuda(const HistogramArgs& args, void* stream) {
  const int64_t planes = args.N * args.C;
  if (planes == 0 || args.H == 0 || args.W == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((args.H + kRowsPerBlock - 1) / kRowsPerBlock, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(planes, 65535)));
  histogram_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(args);
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace prefetch
