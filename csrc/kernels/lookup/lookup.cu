// The CUDA lookup kernel. Torch-free: raw pointers, sizes and a cudaStream_t, so CMake compiles
// and links it with nvcc on machines without a GPU or a CUDA torch. A thread's whole work is
// lookup_row (lookup_thread_work.h), which the CPU tests run too; the launches are
// common/launch_plane_rows.cuh's (x along a row, blocks down the rows).
#include <cuda_runtime.h>

#include "common/launch_plane_rows.cuh"
#include "lookup/lookup.h"
#include "lookup/lookup_thread_work.h"

namespace prefetch {
namespace kernels {

int lookup_cuda(const LookupArgs& args, void* stream) {
  return launch_plane_rows(LookupThread{args}, args.N, args.C, args.H, args.W, static_cast<cudaStream_t>(stream));
}

}  // namespace kernels
}  // namespace prefetch
