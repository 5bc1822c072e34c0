// The CUDA registration of resized_crop (compiled only against a CUDA build of torch): its inputs'
// devices checked before the guard (which would refuse a CPU input obscurely), then its plan
// launched by cuda_registration.h's one template.
#include <torch/library.h>

#include "ops/cuda_registration.h"
#include "ops/resized_crop/resized_crop_plan.h"

namespace prefetch {
namespace {

at::Tensor resized_crop_cuda(const at::Tensor& values, const at::Tensor& offsets, const at::Tensor& sizes,
                             const at::Tensor& boxes, at::IntArrayRef size, at::ArrayRef<double> mean,
                             at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                             const std::optional<at::Tensor>& vflip, at::ScalarType dtype,
                             bool channels_last, bool antialias, const std::optional<at::Tensor>& bicubic) {
  check_resized_crop_devices(values, offsets, sizes, boxes, hflip, vflip, bicubic);
  // Reads offsets, sizes and boxes on the host once when they are on the device (one copy of the
  // packed table, a host synchronisation), to check every box before the kernel reads pixels.
  return run_cuda(values.device(), [&] {
    return plan_resized_crop(values, offsets, sizes, boxes, size, mean, std, hflip, vflip, dtype,
                             channels_last, antialias, bicubic);
  }, &kernels::resized_crop_cuda);
}

}  // namespace

TORCH_LIBRARY_IMPL(prefetch, CUDA, m) { m.impl("resized_crop", &resized_crop_cuda); }

}  // namespace prefetch
