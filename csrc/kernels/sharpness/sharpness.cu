// The CUDA sharpness kernel. Torch-free: raw pointers, sizes and a cudaStream_t, so CMake
// compiles and links it with nvcc on machines without a GPU or a CUDA torch. A thread's whole work
// is sharpness_thread (sharpness_thread_work.h), which the CPU tests run too; this file only maps
// threads onto it: x along a row, blocks down the rows of a launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "common/launch_grid.h"
#include "sharpness/sharpness.h"
#include "sharpness/sharpness_thread_work.h"

namespace prefetch {
namespace kernels {
namespace {

__global__ void sharpness_kernel(SharpnessArgs a, SharpnessLaunch l) {
  for (uint32_t row = blockIdx.y; row < l.rows; row += gridDim.y) {
    for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < a.W;
         x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      sharpness_thread(a, l, row, x);
    }
  }
}

}  // namespace

int sharpness_cuda(const SharpnessArgs& args, void* stream) {
  std::vector<SharpnessLaunch> launches;
  plan_sharpness_launches(args, &launches);
  auto s = static_cast<cudaStream_t>(stream);
  for (const SharpnessLaunch& l : launches) {
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>((args.W + kThreads - 1) / kThreads, 65535)),
                    static_cast<unsigned>(std::min<uint32_t>(l.rows, 65535)));
    sharpness_kernel<<<grid, kThreads, 0, s>>>(args, l);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace kernels
}  // namespace prefetch
