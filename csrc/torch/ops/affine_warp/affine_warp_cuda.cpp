// The CUDA registration of affine_warp (compiled only against a CUDA build of torch): its inputs'
// devices checked before the guard (which would refuse a CPU input obscurely), then its plan
// launched by cuda_registration.h's one template.
#include <torch/library.h>

#include "ops/cuda_registration.h"
#include "ops/affine_warp/affine_warp_plan.h"

namespace prefetch {
namespace {

at::Tensor affine_warp_cuda(const at::Tensor& images, const at::Tensor& matrices, bool bilinear,
                            const std::optional<at::ArrayRef<double>>& fill) {
  check_uint8_images("affine_warp", images, matrices, "matrices");
  return run_cuda(images.device(), [&] { return plan_affine_warp(images, matrices, bilinear, fill); },
                  &kernels::affine_warp_cuda);
}

}  // namespace

TORCH_LIBRARY_IMPL(prefetch, CUDA, m) { m.impl("affine_warp", &affine_warp_cuda); }

}  // namespace prefetch
