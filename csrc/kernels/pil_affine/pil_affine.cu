// The CUDA pil_affine kernel. Torch-free: raw pointers, sizes and a cudaStream_t, so CMake
// compiles and links it with nvcc on machines without a GPU or a CUDA torch. A thread's whole work
// is pil_affine_pixel (pil_affine_thread_work.h), which the CPU tests run too; the launches are
// common/launch_plane_rows.cuh's (x along a row, blocks down the rows), with the channel count a
// template argument for 1 and 3.
#include <cuda_runtime.h>

#include "common/launch_plane_rows.cuh"
#include "pil_affine/pil_affine.h"
#include "pil_affine/pil_affine_thread_work.h"

namespace prefetch {
namespace kernels {

int pil_affine_cuda(const PilAffineArgs& args, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (args.C == 3) return launch_plane_rows(PilAffineThread<3>{args}, args.N, 1, args.H, args.W, s);
  if (args.C == 1) return launch_plane_rows(PilAffineThread<1>{args}, args.N, 1, args.H, args.W, s);
  return launch_plane_rows(PilAffineThread<0>{args}, args.N, 1, args.H, args.W, s);
}

}  // namespace kernels
}  // namespace prefetch
