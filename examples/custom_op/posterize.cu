// CUDA twin, torch-free: raw pointers, a size and a cudaStream_t. Built only with a CUDA torch.
#include <cuda_runtime.h>

#include "posterize.h"

__global__ void posterize_kernel(const uint8_t* in, float* out, int64_t n, int bits) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = posterize_value(in[i], bits);
  }
}

int posterize_cuda(const uint8_t* in, float* out, int64_t n, int bits, cudaStream_t stream) {
  if (n == 0) return 0;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  posterize_kernel<<<static_cast<int>(blocks < 65536 ? blocks : 65536), threads, 0, stream>>>(in, out, n, bits);
  return static_cast<int>(cudaGetLastError());
}
