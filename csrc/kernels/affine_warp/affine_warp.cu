// The CUDA affine_warp kernel. Torch-free: raw pointers, sizes and a cudaStream_t, so CMake
// compiles and links it with nvcc on machines without a GPU or a CUDA torch. A thread's whole work
// is affine_warp_thread (affine_warp_thread_work.h), which the CPU tests run too; this file only
// maps threads onto it: x along a row, blocks down the rows of a launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "affine_warp/affine_warp.h"
#include "affine_warp/affine_warp_thread_work.h"
#include "common/launch_grid.h"

namespace prefetch {
namespace kernels {
namespace {

template <int kChannels>
__global__ void affine_warp_kernel(AffineWarpArgs a, AffineWarpLaunch l) {
  for (uint32_t row = blockIdx.y; row < l.rows; row += gridDim.y) {
    for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < a.W;
         x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      affine_warp_thread<kChannels>(a, l, row, x);
    }
  }
}

template <int kChannels>
void launch(const AffineWarpArgs& a, const AffineWarpLaunch& l, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((a.W + kThreads - 1) / kThreads),  // W <= 2^21
                  static_cast<unsigned>(std::min<uint32_t>(l.rows, 65535)));
  affine_warp_kernel<kChannels><<<grid, kThreads, 0, s>>>(a, l);
}

}  // namespace

int affine_warp_cuda(const AffineWarpArgs& args, void* stream) {
  std::vector<AffineWarpLaunch> launches;
  plan_affine_warp_launches(args, &launches);
  auto s = static_cast<cudaStream_t>(stream);
  for (const AffineWarpLaunch& l : launches) {
    if (args.C == 3) launch<3>(args, l, s);
    else if (args.C == 1) launch<1>(args, l, s);
    else launch<0>(args, l, s);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace kernels
}  // namespace prefetch
