// The CUDA color_jitter kernels. Torch-free: raw pointers, sizes and a cudaStream_t, so CMake
// compiles and links them with nvcc on machines without a GPU or a CUDA torch. A thread's whole
// work is color_jitter_thread_work.h's, which the CPU tests run too: one launch per possible
// Contrast step j (K of them: the steps stay on the device, unread) sums each image's grey as it
// enters its j-th Contrast (cj_grey_entering; a warp's sum, then one atomic add per warp: integer
// sums, so the order does not matter), then one launch writes every pixel (cj_pixel). Pixels are
// numbered as common/plane_rows.h numbers rows of one channel (x along a row, blocks down them).
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "color_jitter/color_jitter.h"
#include "color_jitter/color_jitter_thread_work.h"
#include "common/launch_grid.h"
#include "common/launch_plane_rows.cuh"

namespace prefetch {
namespace kernels {

namespace {

__global__ void grey_sums_kernel(ColorJitterArgs a, PlaneRowsLaunch l, int64_t j) {
  for (uint32_t row = blockIdx.y; row < l.rows; row += gridDim.y) {  // uniform over the block
    int64_t n, c, y;
    plane_row(l, row, &n, &c, &y);
    unsigned long long sum = 0;
    for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < a.W;
         x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      sum += static_cast<unsigned long long>(cj_grey_entering(a, n, j, y, x));
    }
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if ((threadIdx.x & 31) == 0 && sum != 0) {
      atomicAdd(reinterpret_cast<unsigned long long*>(a.grey_sums + n * a.K + j), sum);
    }
  }
}

}  // namespace

int color_jitter_cuda(const ColorJitterArgs& args, void* stream_ptr) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  std::vector<PlaneRowsLaunch> launches;
  plan_plane_rows(args.N, 1, args.H, args.W, &launches);
  for (int64_t j = 0; j < args.K; ++j) {
    for (const PlaneRowsLaunch& l : launches) {
      const dim3 grid(static_cast<unsigned>(std::min<int64_t>((args.W + kThreads - 1) / kThreads, 65535)),
                      static_cast<unsigned>(std::min<uint32_t>(l.rows, 65535)));
      grey_sums_kernel<<<grid, kThreads, 0, stream>>>(args, l, j);
      const cudaError_t status = cudaGetLastError();
      if (status != cudaSuccess) return status;
    }
  }
  return launch_plane_rows(ColorJitterThread{args}, args.N, 1, args.H, args.W, stream);
}

}  // namespace kernels
}  // namespace prefetch
