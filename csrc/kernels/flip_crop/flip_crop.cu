// The CUDA flip_crop kernel. Torch-free: raw pointers, sizes and a cudaStream_t, so CMake compiles
// and links it with nvcc on machines without a GPU or a CUDA torch. The index math is
// common/geometry.h's, shared with the CPU twin in flip_crop_cpu.cpp; a thread's whole work is
// flip_crop_thread (flip_crop_thread_work.h), which the CPU tests also run, so this file only maps
// threads and launches onto it.
#include <cuda_runtime.h>

#include <vector>

#include "common/launch_grid.h"
#include "flip_crop/flip_crop.h"
#include "flip_crop/flip_crop_thread_work.h"

namespace prefetch {
namespace kernels {
namespace {

template <typename T>
__global__ void flip_crop_kernel(FlipCropArgs a, FlipCropLaunch l) {
  for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < l.work; t += gridDim.x * blockDim.x) {
    flip_crop_thread<T>(a, l, t);
  }
}

}  // namespace

int flip_crop_cuda(const FlipCropArgs& args, void* stream) {
  std::vector<FlipCropLaunch> launches;
  if (!plan_flip_crop_launches(args, &launches)) return cudaErrorInvalidValue;
  auto s = static_cast<cudaStream_t>(stream);
  for (const FlipCropLaunch& l : launches) {
    const bool launched = with_mask_element(args.itemsize, [&](auto element) {
      flip_crop_kernel<decltype(element)><<<blocks_for(l.work), kThreads, 0, s>>>(args, l);
    });
    if (!launched) return cudaErrorInvalidValue;
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace kernels
}  // namespace prefetch
