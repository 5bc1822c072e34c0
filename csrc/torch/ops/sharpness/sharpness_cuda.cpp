// The CUDA registration of sharpness (compiled only against a CUDA build of torch): its inputs'
// devices checked before the guard (which would refuse a CPU input obscurely), then its plan
// launched by cuda_registration.h's one template.
#include <torch/library.h>

#include "ops/cuda_registration.h"
#include "ops/sharpness/sharpness_plan.h"

namespace prefetch {
namespace {

at::Tensor sharpness_cuda(const at::Tensor& images, const at::Tensor& factors, bool pillow) {
  check_uint8_images("sharpness", images, factors, "factors");
  return run_cuda(images.device(), [&] { return plan_sharpness(images, factors, pillow); }, &kernels::sharpness_cuda);
}

}  // namespace

TORCH_LIBRARY_IMPL(prefetch, CUDA, m) { m.impl("sharpness", &sharpness_cuda); }

}  // namespace prefetch
