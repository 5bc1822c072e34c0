// The CUDA registration of flip_crop (compiled only against a CUDA build of torch): its inputs'
// devices checked before the guard (which would refuse a CPU input obscurely), then its plan
// launched by cuda_registration.h's one template.
#include <torch/library.h>

#include "ops/cuda_registration.h"
#include "ops/flip_crop/flip_crop_plan.h"

namespace prefetch {
namespace {

at::Tensor flip_crop_cuda(const at::Tensor& masks, const std::optional<at::Tensor>& hflip,
                          const std::optional<at::Tensor>& vflip, at::OptionalIntArrayRef crop,
                          const std::optional<at::Tensor>& offsets, int64_t fill,
                          const std::optional<at::Tensor>& indices) {
  check_devices("flip_crop", masks, "masks", hflip, vflip, offsets, indices);
  return run_cuda(masks.device(), [&] { return plan_flip_crop(masks, hflip, vflip, crop, offsets, fill, indices); },
                  &kernels::flip_crop_cuda);
}

}  // namespace

TORCH_LIBRARY_IMPL(prefetch, CUDA, m) { m.impl("flip_crop", &flip_crop_cuda); }

}  // namespace prefetch
