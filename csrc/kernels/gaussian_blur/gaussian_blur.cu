// The CUDA gaussian_blur kernels. Torch-free: raw pointers, sizes and a cudaStream_t, so CMake
// compiles and links them with nvcc on machines without a GPU or a CUDA torch. A thread's whole
// work is gaussian_blur_thread_work.h's, which the CPU tests run too; both passes are
// common/launch_plane_rows.cuh's launches (x along a row, blocks down the rows), the column pass
// after the row pass on the same stream.
#include <cuda_runtime.h>

#include "common/launch_plane_rows.cuh"
#include "gaussian_blur/gaussian_blur.h"
#include "gaussian_blur/gaussian_blur_thread_work.h"

namespace prefetch {
namespace kernels {

int gaussian_blur_cuda(const GaussianBlurArgs& args, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int rows = launch_plane_rows(GaussianBlurRowsThread{args}, args.N, args.C, args.H, args.W, s);
  if (rows != cudaSuccess) return rows;
  return launch_plane_rows(GaussianBlurColumnsThread{args}, args.N, args.C, args.H, args.W, s);
}

}  // namespace kernels
}  // namespace prefetch
