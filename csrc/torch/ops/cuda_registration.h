// The CUDA registration's one template, included by every op's <op>_cuda.cpp (compiled only
// against a CUDA build of torch). Everything but the device is shared with the CPU registration:
// the checks and plans (<op>_plan.h) and the kernels' complete arguments (kernel_args.h, where the
// CPU tests reach them). What is CUDA's own is here and only here: the device guard, torch's
// current stream, and the upload of per-channel constants beyond kernels::kInlineChannels. No host
// synchronisation (but what a plan says it needs), and for up to 64 channels nothing but the
// launch itself.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "ops/kernel_args.h"

namespace prefetch {

inline void check_launch(int status, const char* op) {
  TORCH_CHECK(status == 0, op, " CUDA kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(status)));
}

// Kernels on `device`: constants past kInlineChannels travel through pinned memory, whose block
// the caching host allocator keeps until the copy (on the current stream) has run.
inline KernelTarget cuda_target(at::Device device) {
  KernelTarget target;
  target.cuda = true;
  target.upload = [device](const std::vector<kernels::Affine>& table) {
    const int64_t floats = static_cast<int64_t>(table.size() * sizeof(kernels::Affine) / sizeof(float));
    at::Tensor host = at::empty({floats}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
    std::memcpy(host.data_ptr<float>(), table.data(), table.size() * sizeof(kernels::Affine));
    return host.to(device, /*non_blocking=*/true);
  };
  return target;
}

// On `device` (the op checked its inputs' devices before: the guard would refuse a CPU input
// obscurely): the plan `make_plan()` returns, completed for a CUDA kernel, launched by `launch` on
// torch's current stream. Returns the plan's output.
template <typename MakePlan, typename Args>
at::Tensor run_cuda(at::Device device, MakePlan make_plan, int (*launch)(const Args&, void*)) {
  c10::cuda::CUDAGuard guard(device);
  auto plan = make_plan();
  // Held until the launch is enqueued (the uploaded constants, or nothing).
  const at::Tensor constants = complete_args(&plan, cuda_target(device));
  check_launch(launch(plan.args, c10::cuda::getCurrentCUDAStream().stream()), decltype(plan)::kName);
  return plan.out;
}

}  // namespace prefetch
