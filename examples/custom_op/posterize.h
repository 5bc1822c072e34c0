// The torch-free part: index/value math shared by the CPU loop and the CUDA kernel.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define EX_HD __host__ __device__ __forceinline__
#else
#define EX_HD inline
#endif

// Keep the `bits` most significant bits of a uint8 value, then scale to [0, 1] as float.
EX_HD float posterize_value(uint8_t v, int bits) {
  const uint8_t mask = static_cast<uint8_t>(0xFFu << (8 - bits));
  return static_cast<float>(v & mask) * (1.0f / 255.0f);
}

// CPU loop over [begin, end); the CUDA twin (posterize.cu) runs the same function per element.
inline void posterize_cpu(const uint8_t* in, float* out, int64_t begin, int64_t end, int bits) {
  for (int64_t i = begin; i < end; ++i) out[i] = posterize_value(in[i], bits);
}
