// The CUDA registration of normalize_flip (compiled only against a CUDA build of torch): its inputs'
// devices checked before the guard (which would refuse a CPU input obscurely), then its plan
// launched by cuda_registration.h's one template.
#include <torch/library.h>

#include "ops/cuda_registration.h"
#include "ops/normalize_flip/normalize_flip_plan.h"

namespace prefetch {
namespace {

at::Tensor normalize_flip_cuda(const at::Tensor& images, at::ArrayRef<double> mean,
                               at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                               const std::optional<at::Tensor>& vflip, at::OptionalIntArrayRef crop,
                               const std::optional<at::Tensor>& offsets, int64_t fill,
                               at::ScalarType dtype, c10::string_view layout, bool channels_last,
                               const std::optional<at::Tensor>& indices) {
  check_devices("normalize_flip", images, "images", hflip, vflip, offsets, indices);
  return run_cuda(images.device(), [&] {
    return plan_normalize_flip(images, mean, std, hflip, vflip, crop, offsets, fill, dtype,
                               std::string(layout), channels_last, indices);
  }, &kernels::normalize_flip_cuda);
}

}  // namespace

TORCH_LIBRARY_IMPL(prefetch, CUDA, m) { m.impl("normalize_flip", &normalize_flip_cuda); }

}  // namespace prefetch
