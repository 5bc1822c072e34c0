// The CUDA resized_crop kernel. Torch-free: raw pointers, sizes and a cudaStream_t, so CMake
// compiles and links it with nvcc on machines without a GPU or a CUDA torch. A thread's whole work
// is resized_crop_thread (resized_crop_thread_work.h), which the CPU tests run over every thread
// index; this file only maps threads and launches onto it.
//
// One pass: each output element is written once, by one thread, with 16-byte stores where the
// row allows it. The per-sample tables (offsets, sizes, boxes, flips) are read from device memory
// by every thread of the sample (L1/L2 hits); the taps are recomputed per element, cheap next to
// the loads they steer.
#include <cuda_runtime.h>

#include <vector>

#include "common/affine_table.h"
#include "common/launch_each.cuh"
#include "common/launch_grid.h"
#include "resized_crop/resized_crop.h"
#include "resized_crop/resized_crop_thread_work.h"

namespace prefetch {
namespace kernels {
namespace {

// The per-channel constants as in normalize_flip.cu (common/affine_table.h): by value up to
// kInlineChannels, else from device memory; read into shared memory once per block.
template <typename Conv, bool kChannelsLast>
__global__ void resized_crop_kernel(ResizedCropArgs a, ResizedCropLaunch l, AffineTable table) {
  __shared__ Affine inline_affine[kInlineChannels];
  const Affine* affine = a.affine_device;
  if (a.C <= kInlineChannels) {
    for (int c = threadIdx.x; c < a.C; c += blockDim.x) inline_affine[c] = table.c[c];
    __syncthreads();
    affine = inline_affine;
  }
  for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < l.work; t += gridDim.x * blockDim.x) {
    resized_crop_thread<Conv, kChannelsLast>(a, l, affine, t);
  }
}

template <typename Conv>
void launch(const ResizedCropArgs& a, const ResizedCropLaunch& l, const AffineTable& table,
            cudaStream_t s) {
  if (l.channels_last) {
    resized_crop_kernel<Conv, true><<<blocks_for(l.work), kThreads, 0, s>>>(a, l, table);
  } else {
    resized_crop_kernel<Conv, false><<<blocks_for(l.work), kThreads, 0, s>>>(a, l, table);
  }
}

}  // namespace

int resized_crop_cuda(const ResizedCropArgs& args, void* stream) {
  std::vector<ResizedCropLaunch> launches;
  if (!plan_resized_crop_launches(args, &launches)) return cudaErrorInvalidValue;
  if (launches.empty()) return cudaSuccess;
  AffineTable table;
  if (!launch_affine_table(args.affine, args.affine_device, args.C, &table)) return cudaErrorInvalidValue;
  auto s = static_cast<cudaStream_t>(stream);
  return launch_each(args.dtype, launches, [&](auto conv, const ResizedCropLaunch& l) {
    launch<decltype(conv)>(args, l, table, s);
  });
}

}  // namespace kernels
}  // namespace prefetch
