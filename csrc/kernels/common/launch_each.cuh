// The host loop of every op's .cu launcher that writes float outputs: each of the op's launches
// (launch_split.h) with the output dtype's conversion, and the first launch error returned at
// once. Included only by .cu files (it calls the CUDA runtime).
#pragma once
#include <cuda_runtime.h>

#include <vector>

#include "common/float_outputs.h"
#include "common/thread_memory.h"

namespace prefetch {
namespace kernels {

// `launch_one(conv, l)` launches the op's kernel for launch `l` with the conversion `conv`
// (ToFloat32, ToFloat16, ToBFloat16 or ToUInt8; its type is the kernel's template argument).
template <typename Launch, typename LaunchOne>
cudaError_t launch_each(OutDType dtype, const std::vector<Launch>& launches, LaunchOne&& launch_one) {
  for (const Launch& l : launches) {
    with_converter(dtype, [&](auto conv) { launch_one(conv, l); });
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace kernels
}  // namespace prefetch
