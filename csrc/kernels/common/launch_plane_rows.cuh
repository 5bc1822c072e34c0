// The CUDA side of plane_rows.h: one kernel template that maps threads onto an op's thread work,
// a warp along a row (each lane every 32nd value, so that each load of the warp is 32 neighbouring
// values) and kRowsPerBlock rows a block, and the host loop over the launches. A lane does all of
// its row's values (7 for a 224-wide row): a row's set-up (HasRow) is then paid once per 7 values,
// where one value a thread paid it for each byte (lookup ran instruction-bound on the first GPU
// run: 235 us for 38.5 MB, 0.06 of a device copy).
// `Thread` is a small functor holding the op's arguments by value, with either
//   row(int64_t n, int64_t c, int64_t y) const, returning a functor of x (HasRow, plane_rows.h), or
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

constexpr int kRowLanes = 32;     // a warp a row
constexpr int kRowsPerBlock = 8;  // 256 threads a block

template <typename Thread>
__global__ void plane_rows_kernel(Thread thread, PlaneRowsLaunch l, int64_t W) {
  // rows < 2^31 and the step < 2^19: the sum never wraps 32 bits.
  for (uint32_t row = blockIdx.y * blockDim.y + threadIdx.y; row < l.rows; row += gridDim.y * blockDim.y) {
    int64_t n, c, y;
    plane_row(l, row, &n, &c, &y);
    const int64_t x0 = threadIdx.x;
    const int64_t step = blockDim.x;
    if constexpr (HasRow<Thread>::value) {
      const auto values = thread.row(n, c, y);
      for (int64_t x = x0; x < W; x += step) values(x);
    } else {
      for (int64_t x = x0; x < W; x += step) thread(n, c, y, x);
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
    const dim3 block(kRowLanes, kRowsPerBlock);
    const dim3 grid(1, static_cast<unsigned>(std::min<uint32_t>((l.rows + kRowsPerBlock - 1) / kRowsPerBlock, 65535)));
    plane_rows_kernel<<<grid, block, 0, stream>>>(thread, l, W);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace kernels
}  // namespace prefetch
