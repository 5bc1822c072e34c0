// CUDA registration of the fused ops: checks and plans as on the CPU (ops.cpp), then the
// torch-free kernels of csrc/kernels/normalize_flip.cu and resized_crop.cu on torch's current
// stream. No host synchronisation (except resized_crop's one read of its tables when they are on
// the device), and for up to 64 channels nothing but the launch itself.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/library.h>

#include <cstring>

#include "ops_common.h"

namespace prefetch {
namespace {

void check_launch(int status, const char* op) {
  TORCH_CHECK(status == 0, op, " CUDA kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(status)));
}

at::Tensor normalize_flip_cuda(const at::Tensor& images, at::ArrayRef<double> mean,
                               at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                               const std::optional<at::Tensor>& vflip, at::OptionalIntArrayRef crop,
                               const std::optional<at::Tensor>& offsets, int64_t fill,
                               at::ScalarType dtype, c10::string_view layout, bool channels_last,
                               const std::optional<at::Tensor>& indices) {
  // Before the guard, which would refuse a CPU input obscurely.
  check_devices("normalize_flip", images, "images", hflip, vflip, offsets, indices);
  c10::cuda::CUDAGuard guard(images.device());
  NormalizeFlipPlan plan = plan_normalize_flip(images, mean, std, hflip, vflip, crop, offsets, fill,
                                               dtype, std::string(layout), channels_last, indices);
  // Up to kInlineChannels channels' constants travel in the kernel's arguments (plan.args.affine
  // is the host copy): nothing to upload, and a CUDA graph captures them by value. More channels
  // go through pinned memory; the caching host allocator keeps that block until the copy has run.
  at::Tensor affine;
  const int64_t C = static_cast<int64_t>(plan.affine.size());
  if (C > kernels::kInlineChannels) {
    at::Tensor host = at::empty({2 * C}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
    std::memcpy(host.data_ptr<float>(), plan.affine.data(), plan.affine.size() * sizeof(kernels::Affine));
    affine = host.to(images.device(), /*non_blocking=*/true);
    plan.args.affine_device = reinterpret_cast<const kernels::Affine*>(affine.const_data_ptr<float>());
  }
  check_launch(kernels::normalize_flip_cuda(plan.args, c10::cuda::getCurrentCUDAStream().stream()),
               "normalize_flip");
  return plan.out;
}

at::Tensor flip_crop_cuda(const at::Tensor& masks, const std::optional<at::Tensor>& hflip,
                          const std::optional<at::Tensor>& vflip, at::OptionalIntArrayRef crop,
                          const std::optional<at::Tensor>& offsets, int64_t fill,
                          const std::optional<at::Tensor>& indices) {
  // Before the guard, which would refuse a CPU input obscurely.
  check_devices("flip_crop", masks, "masks", hflip, vflip, offsets, indices);
  c10::cuda::CUDAGuard guard(masks.device());
  FlipCropPlan plan = plan_flip_crop(masks, hflip, vflip, crop, offsets, fill, indices);
  check_launch(kernels::flip_crop_cuda(plan.args, c10::cuda::getCurrentCUDAStream().stream()),
               "flip_crop");
  return plan.out;
}

at::Tensor resized_crop_cuda(const at::Tensor& values, const at::Tensor& offsets, const at::Tensor& sizes,
                             const at::Tensor& boxes, at::IntArrayRef size, at::ArrayRef<double> mean,
                             at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                             const std::optional<at::Tensor>& vflip, at::ScalarType dtype,
                             bool channels_last, bool antialias) {
  // Before the guard, which would refuse CPU values (next to CUDA tables) obscurely.
  check_resized_crop_devices(values, offsets, sizes, boxes, hflip, vflip);
  c10::cuda::CUDAGuard guard(values.device());
  // Reads offsets, sizes and boxes on the host once when they are on the device (one copy of the
  // packed table, a host synchronisation), to check every box before the kernel reads pixels.
  ResizedCropPlan plan = plan_resized_crop(values, offsets, sizes, boxes, size, mean, std, hflip, vflip,
                                           dtype, channels_last, antialias);
  // The per-channel constants as normalize_flip's: by value up to kInlineChannels, else uploaded.
  at::Tensor affine;
  const int64_t C = static_cast<int64_t>(plan.affine.size());
  if (C > kernels::kInlineChannels) {
    at::Tensor host = at::empty({2 * C}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
    std::memcpy(host.data_ptr<float>(), plan.affine.data(), plan.affine.size() * sizeof(kernels::Affine));
    affine = host.to(values.device(), /*non_blocking=*/true);
    plan.args.affine_device = reinterpret_cast<const kernels::Affine*>(affine.const_data_ptr<float>());
  }
  plan.args.affine = plan.affine.data();
  check_launch(kernels::resized_crop_cuda(plan.args, c10::cuda::getCurrentCUDAStream().stream()),
               "resized_crop");
  return plan.out;
}

}  // namespace

TORCH_LIBRARY_IMPL(prefetch, CUDA, m) {
  m.impl("normalize_flip", &normalize_flip_cuda);
  m.impl("flip_crop", &flip_crop_cuda);
  m.impl("resized_crop", &resized_crop_cuda);
}

}  // namespace prefetch
