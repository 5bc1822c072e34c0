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
// (ToFloat32, ToFloat16 or ToBFloat16; its type is the kernel's template argument).
template <typename Launch, typename LaunchOne>
cudaError_t launch_each(OutDType dtype, const std::vector<Launch>& launches, LaunchOne&& launch_one) {
  for (const Launch& l : launches) {
    switch (dtype) {
      case OutDType::kFloat32:
        launch_one(ToFloat32{}, l);
        break;
      case OutDType::kFloat16:
        launch_one(ToFloat16{}, l);
        break;
      case OutDType::kBFloat16:
        launch_one(ToBFloat16{}, l);
        break;
    }
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace kernels
}  // namespace prefetch
