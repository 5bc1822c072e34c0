// CUDA kernels for the fused augment ops. Torch-free: raw pointers, sizes and a cudaStream_t, so
// CMake compiles and links them with nvcc on machines without a GPU or a CUDA torch. The index
// math is geometry.h's, shared with the CPU twin in normalize_flip_cpu.cpp.
//
// One pass: each output element is written once, by one thread, with one vector store of 4
// elements where the row allows it; each input byte is read from DRAM once (neighbouring threads
// read neighbouring bytes of the same lines, served by L1/L2).
#include <cuda_runtime.h>

#include <cstdio>

#include "normalize_flip.h"

namespace prefetch {
namespace kernels {
namespace {

constexpr int kVec = 4;  // output elements per thread
constexpr int kThreads = 256;

// The gathered sample, checked: the op cannot check a device index tensor without a host
// synchronisation, and a bad index must stop the kernel, never read another allocation (the
// same contract as torch's own index kernels' device-side assertions).
__device__ __forceinline__ int64_t checked_source(const Geometry& g, int64_t n) {
  const int64_t s = source_sample(g, n);
  if (g.rows != nullptr && (s < 0 || s >= g.sources)) {
    printf("prefetch: indices[%lld] = %lld is out of range for %lld samples\n",
           static_cast<long long>(n), static_cast<long long>(s), static_cast<long long>(g.sources));
    __trap();
  }
  return s;
}

struct ToFloat32 {
  using type = float;
  __device__ float operator()(float v) const { return v; }
};
struct ToFloat16 {
  using type = uint16_t;
  __device__ uint16_t operator()(float v) const { return float_to_half_bits(v); }
};
struct ToBFloat16 {
  using type = uint16_t;
  __device__ uint16_t operator()(float v) const { return float_to_bfloat16_bits(v); }
};

// Stores 4 elements at once when `dst` is aligned for it.
__device__ __forceinline__ void store4(float* dst, const float (&v)[kVec]) {
  if ((reinterpret_cast<uintptr_t>(dst) & 15u) == 0) {
    *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    for (int k = 0; k < kVec; ++k) dst[k] = v[k];
  }
}
__device__ __forceinline__ void store4(uint16_t* dst, const uint16_t (&v)[kVec]) {
  if ((reinterpret_cast<uintptr_t>(dst) & 7u) == 0) {
    uint2 packed;
    packed.x = static_cast<uint32_t>(v[0]) | (static_cast<uint32_t>(v[1]) << 16);
    packed.y = static_cast<uint32_t>(v[2]) | (static_cast<uint32_t>(v[3]) << 16);
    *reinterpret_cast<uint2*>(dst) = packed;
  } else {
    for (int k = 0; k < kVec; ++k) dst[k] = v[k];
  }
}

// Output rows are contiguous in memory: (n, c, y) rows of w elements for NCHW, or (n, y) rows of
// w * C elements (x major, c minor) for channels_last.
template <typename Conv>
__global__ void normalize_flip_kernel(NormalizeFlipArgs a, int64_t rows, int64_t row_len,
                                      int64_t vecs_per_row, bool channels_last) {
  using T = typename Conv::type;
  const Conv conv;
  const Geometry g = a.g;
  T* out = static_cast<T*>(a.out);
  const int64_t total = rows * vecs_per_row;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = t / vecs_per_row;
    const int64_t first = (t % vecs_per_row) * kVec;
    int64_t n, y, c_row = 0;
    if (channels_last) {
      n = row / g.h;
      y = row % g.h;
    } else {
      n = row / (g.C * g.h);
      c_row = (row / g.h) % g.C;
      y = row % g.h;
    }
    const Window win = sample_window(g, a.offsets, a.hflip, a.vflip, n);
    const int64_t sy = source_row(g, win, y);
    const bool row_inside = sy >= 0 && sy < g.H;
    const uint8_t* src = a.images + checked_source(g, n) * g.sN + (row_inside ? sy * g.sH : 0);
    T values[kVec];
    int count = 0;
    for (int k = 0; k < kVec && first + k < row_len; ++k, ++count) {
      const int64_t e = first + k;
      const int64_t c = channels_last ? e % g.C : c_row;
      const int64_t x = channels_last ? e / g.C : e;
      const int64_t sx = source_col(g, win, x);
      const uint8_t px =
          (row_inside && sx >= 0 && sx < g.W) ? __ldg(src + sx * g.sW + c * g.sC) : a.fill;
      values[k] = conv(normalize(px, a.affine[c]));
    }
    T* dst = out + n * a.oN + y * a.oY + (channels_last ? 0 : c_row * a.oC) + first;
    if (count == kVec) {
      store4(dst, values);
    } else {
      for (int k = 0; k < count; ++k) dst[k] = values[k];
    }
  }
}

template <typename T>
__global__ void flip_crop_kernel(FlipCropArgs a, int64_t total) {
  const Geometry g = a.g;
  const T* masks = static_cast<const T*>(a.masks);
  T* out = static_cast<T*>(a.out);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t x = i % g.w;
    const int64_t y = (i / g.w) % g.h;
    const int64_t n = i / (g.w * g.h);
    const Window win = sample_window(g, a.offsets, a.hflip, a.vflip, n);
    const int64_t sy = source_row(g, win, y);
    const int64_t sx = source_col(g, win, x);
    const bool inside = sy >= 0 && sy < g.H && sx >= 0 && sx < g.W;
    out[i] = inside ? masks[checked_source(g, n) * g.sN + sy * g.sH + sx * g.sW] : static_cast<T>(a.fill);
  }
}

int blocks_for(int64_t work) {
  int64_t blocks = (work + kThreads - 1) / kThreads;
  // Enough blocks to fill any current GPU; the grid-stride loop covers the rest.
  return static_cast<int>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace

int normalize_flip_cuda(const NormalizeFlipArgs& args, void* stream) {
  const Geometry& g = args.g;
  if (g.N == 0 || g.h == 0 || g.w == 0 || g.C == 0) return cudaSuccess;
  // Outputs are allocated by the op: contiguous NCHW (oX == 1) or channels_last (oC == 1).
  const bool channels_last = args.oC == 1 && g.C > 1;
  const int64_t rows = channels_last ? g.N * g.h : g.N * g.C * g.h;
  const int64_t row_len = channels_last ? g.w * g.C : g.w;
  const int64_t vecs = (row_len + kVec - 1) / kVec;
  auto s = static_cast<cudaStream_t>(stream);
  const int blocks = blocks_for(rows * vecs);
  switch (args.dtype) {
    case OutDType::kFloat32:
      normalize_flip_kernel<ToFloat32><<<blocks, kThreads, 0, s>>>(args, rows, row_len, vecs, channels_last);
      break;
    case OutDType::kFloat16:
      normalize_flip_kernel<ToFloat16><<<blocks, kThreads, 0, s>>>(args, rows, row_len, vecs, channels_last);
      break;
    case OutDType::kBFloat16:
      normalize_flip_kernel<ToBFloat16><<<blocks, kThreads, 0, s>>>(args, rows, row_len, vecs, channels_last);
      break;
  }
  return cudaGetLastError();
}

int flip_crop_cuda(const FlipCropArgs& args, void* stream) {
  const int64_t total = args.g.N * args.g.h * args.g.w;
  if (total == 0) return cudaSuccess;
  auto s = static_cast<cudaStream_t>(stream);
  const int blocks = blocks_for(total);
  switch (args.itemsize) {
    case 1:
      flip_crop_kernel<uint8_t><<<blocks, kThreads, 0, s>>>(args, total);
      break;
    case 2:
      flip_crop_kernel<int16_t><<<blocks, kThreads, 0, s>>>(args, total);
      break;
    case 4:
      flip_crop_kernel<int32_t><<<blocks, kThreads, 0, s>>>(args, total);
      break;
    case 8:
      flip_crop_kernel<int64_t><<<blocks, kThreads, 0, s>>>(args, total);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace prefetch
