// PF_HD marks the functions the CPU and CUDA kernels share: __host__ __device__ (and inlined)
// under nvcc, plain inline for the host compiler. One definition serves both builds, so the CPU
// tests run exactly the code the GPU runs.
#pragma once

#if defined(__CUDACC__)
#define PF_HD __host__ __device__ __forceinline__
#else
#define PF_HD inline
#endif
