// The CUDA normalize_flip kernel. Torch-free: raw pointers, sizes and a cudaStream_t, so CMake
// compiles and links it with nvcc on machines without a GPU or a CUDA torch. The index math is
// common/geometry.h's, shared with the CPU twin in normalize_flip_cpu.cpp; a thread's whole work is
// normalize_flip_thread (normalize_flip_thread_work.h), which the CPU tests also run, so this file
// only maps threads and launches onto it.
//
// One pass: each output element is written once, by one thread, with 16-byte stores where the
// row allows it; each input byte is read from DRAM once (neighbouring threads read neighbouring
// bytes of the same lines, served by L1/L2).
#include <cuda_runtime.h>

#include <vector>

#include "common/affine_table.h"
#include "common/launch_each.cuh"
#include "common/launch_grid.h"
#include "normalize_flip/normalize_flip.h"
#include "normalize_flip/normalize_flip_thread_work.h"

namespace prefetch {
namespace kernels {
namespace {

// The per-channel constants arrive by value (`table`, C <= kInlineChannels) or from device
// memory (`a.affine_device`); either way each block reads them into shared memory once, where
// the threads of a warp read different channels without serialising as constant-bank reads would.
template <typename Conv, bool kChannelsLast>
__global__ void normalize_flip_kernel(NormalizeFlipArgs a, NormalizeFlipLaunch l, AffineTable table) {
  __shared__ Affine inline_affine[kInlineChannels];
  const Affine* affine = a.affine_device;
  if (a.g.C <= kInlineChannels) {
    for (int c = threadIdx.x; c < a.g.C; c += blockDim.x) inline_affine[c] = table.c[c];
    __syncthreads();
    affine = inline_affine;
  }
  for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < l.work; t += gridDim.x * blockDim.x) {
    normalize_flip_thread<Conv, kChannelsLast>(a, l, affine, t);
  }
}

template <typename Conv>
void launch_normalize_flip(const NormalizeFlipArgs& a, const NormalizeFlipLaunch& l,
                           const AffineTable& table, cudaStream_t s) {
  if (l.channels_last) {
    normalize_flip_kernel<Conv, true><<<blocks_for(l.work), kThreads, 0, s>>>(a, l, table);
  } else {
    normalize_flip_kernel<Conv, false><<<blocks_for(l.work), kThreads, 0, s>>>(a, l, table);
  }
}

}  // namespace

int normalize_flip_cuda(const NormalizeFlipArgs& args, void* stream) {
  std::vector<NormalizeFlipLaunch> launches;
  if (!plan_normalize_flip_launches(args, &launches)) return cudaErrorInvalidValue;
  if (launches.empty()) return cudaSuccess;
  AffineTable table;
  if (!launch_affine_table(args.affine, args.affine_device, args.g.C, &table)) return cudaErrorInvalidValue;
  auto s = static_cast<cudaStream_t>(stream);
  return launch_each(args.dtype, launches, [&](auto conv, const NormalizeFlipLaunch& l) {
    launch_normalize_flip<decltype(conv)>(args, l, table, s);
  });
}

}  // namespace kernels
}  // namespace prefetch
