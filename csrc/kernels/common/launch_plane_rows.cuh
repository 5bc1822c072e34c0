// The CUDA side of plane_rows.h: one kernel template that maps threads onto an op's thread work,
// x along a row and blocks down the rows of each launch, and the host loop over the launches.
// `Thread` is a small functor holding the op's arguments by value, with
//   __device__ void operator()(int64_t n, int64_t c, int64_t y, int64_t x) const;
// Included by the ops' .cu files only.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "common/launch_grid.h"
#include "common/plane_rows.h"

namespace prefetch {
namespace kernels {

template <typename Thread>
__global__ void plane_rows_kernel(Thread thread, PlaneRowsLaunch l, int64_t W) {
  for (uint32_t row = blockIdx.y; row < l.rows; row += gridDim.y) {
    int64_t n, c, y;
    plane_row(l, row, &n, &c, &y);
    for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < W;
         x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      thread(n, c, y, x);
    }
  }
}

// Launches `thread` over every value (n, c, y, x) of an [N, C, H, W] output on `stream`; returns a
// cudaError_t.
template <typename Thread>
int launch_plane_rows(const Thread& thread, int64_t N, int64_t C, int64_t H, int64_t W, cudaStream_t stream) {
  std::vector<PlaneRowsLaunch> launches;
  plan_plane_rows(N, C, H, W, &launches);
  for (const PlaneRowsLaunch& l : launches) {
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>((W + kThreads - 1) / kThreads, 65535)),
                    static_cast<unsigned>(std::min<uint32_t>(l.rows, 65535)));
    plane_rows_kernel<<<grid, kThreads, 0, stream>>>(thread, l, W);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace kernels
}  // namespace prefetch
