// The CUDA sharpness kernel. Torch-free: raw pointers, sizes and a cudaStream_t, so CMake compiles
// and links it with nvcc on machines without a GPU or a CUDA torch. A thread's whole work is
// sharpness_row (sharpness_thread_work.h), which the CPU tests run too; the launches are
// common/launch_plane_rows.cuh's (x along a row, blocks down the rows).
#include <cuda_runtime.h>

#include "common/launch_plane_rows.cuh"
#include "sharpness/sharpness.h"
#include "sharpness/sharpness_thread_work.h"

namespace prefetch {
namespace kernels {

int sharpness_cuda(const SharpnessArgs& args, void* stream) {
  return launch_plane_rows(SharpnessThread{args}, args.N, args.C, args.H, args.W, static_cast<cudaStream_t>(stream));
}

}  // namespace kernels
}  // namespace prefetch
