// CUDA registration of the fused ops. Everything but the device is shared with the CPU
// registration (ops_cpu.cpp): the checks and plans (<op>_plan.cpp) and the kernels' complete
// arguments (kernel_args.cpp, where the CPU tests reach them). What is CUDA's own is here and
// only here: the device guard, torch's current stream, and the upload of per-channel constants
// beyond kernels::kInlineChannels. No host synchronisation (except resized_crop's one read of its
// tables when they are on the device), and for up to 64 channels nothing but the launch itself.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/library.h>

#include <cstring>

#include "ops/affine_warp_plan.h"
#include "ops/color_jitter_plan.h"
#include "ops/flip_crop_plan.h"
#include "ops/histogram_plan.h"
#include "ops/kernel_args.h"
#include "ops/lookup_plan.h"
#include "ops/normalize_flip_plan.h"
#include "ops/plan_common.h"
#include "ops/resized_crop_plan.h"
#include "ops/sharpness_plan.h"

namespace prefetch {
namespace {

void check_launch(int status, const char* op) {
  TORCH_CHECK(status == 0, op, " CUDA kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(status)));
}

// Kernels on `device`: constants past kInlineChannels travel through pinned memory, whose block
// the caching host allocator keeps until the copy (on the current stream) has run.
KernelTarget cuda_target(at::Device device) {
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

void* current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

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
  const at::Tensor constants = complete_args(&plan, cuda_target(images.device()));
  check_launch(kernels::normalize_flip_cuda(plan.args, current_stream()), "normalize_flip");
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
  complete_args(&plan, cuda_target(masks.device()));
  check_launch(kernels::flip_crop_cuda(plan.args, current_stream()), "flip_crop");
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
  const at::Tensor constants = complete_args(&plan, cuda_target(values.device()));
  check_launch(kernels::resized_crop_cuda(plan.args, current_stream()), "resized_crop");
  return plan.out;
}

at::Tensor affine_warp_cuda(const at::Tensor& images, const at::Tensor& matrices, bool bilinear,
                            const std::optional<at::ArrayRef<double>>& fill) {
  // Before the guard, which would refuse CPU matrices obscurely.
  check_uint8_images("affine_warp", images, matrices, "matrices");
  c10::cuda::CUDAGuard guard(images.device());
  AffineWarpPlan plan = plan_affine_warp(images, matrices, bilinear, fill);
  complete_args(&plan, cuda_target(images.device()));
  check_launch(kernels::affine_warp_cuda(plan.args, current_stream()), "affine_warp");
  return plan.out;
}

at::Tensor sharpness_cuda(const at::Tensor& images, const at::Tensor& factors) {
  // Before the guard, which would refuse CPU factors obscurely.
  check_uint8_images("sharpness", images, factors, "factors");
  c10::cuda::CUDAGuard guard(images.device());
  SharpnessPlan plan = plan_sharpness(images, factors);
  complete_args(&plan, cuda_target(images.device()));
  check_launch(kernels::sharpness_cuda(plan.args, current_stream()), "sharpness");
  return plan.out;
}

at::Tensor lookup_cuda(const at::Tensor& images, const at::Tensor& tables) {
  // Before the guard, which would refuse CPU tables obscurely.
  check_uint8_images("lookup", images, tables, "tables");
  c10::cuda::CUDAGuard guard(images.device());
  LookupPlan plan = plan_lookup(images, tables);
  complete_args(&plan, cuda_target(images.device()));
  check_launch(kernels::lookup_cuda(plan.args, current_stream()), "lookup");
  return plan.out;
}

at::Tensor color_jitter_cuda(const at::Tensor& images, const at::Tensor& steps, const at::Tensor& factors) {
  // Before the guard, which would refuse CPU steps or factors obscurely.
  check_uint8_images("color_jitter", images, steps, "steps");
  check_uint8_images("color_jitter", images, factors, "factors");
  c10::cuda::CUDAGuard guard(images.device());
  ColorJitterPlan plan = plan_color_jitter(images, steps, factors);
  complete_args(&plan, cuda_target(images.device()));
  check_launch(kernels::color_jitter_cuda(plan.args, current_stream()), "color_jitter");
  return plan.out;
}

at::Tensor histograms_cuda(const at::Tensor& images) {
  c10::cuda::CUDAGuard guard(images.device());
  HistogramPlan plan = plan_histogram(images);  // its zeroed counts on the current stream
  complete_args(&plan, cuda_target(images.device()));
  check_launch(kernels::histogram_cuda(plan.args, current_stream()), "histograms");
  return plan.out;
}

}  // namespace

TORCH_LIBRARY_IMPL(prefetch, CUDA, m) {
  m.impl("normalize_flip", &normalize_flip_cuda);
  m.impl("flip_crop", &flip_crop_cuda);
  m.impl("resized_crop", &resized_crop_cuda);
  m.impl("affine_warp", &affine_warp_cuda);
  m.impl("sharpness", &sharpness_cuda);
  m.impl("lookup", &lookup_cuda);
  m.impl("color_jitter", &color_jitter_cuda);
  m.impl("histograms", &histograms_cuda);
}

}  // namespace prefetch
