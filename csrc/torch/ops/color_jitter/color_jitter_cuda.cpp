// The CUDA registration of color_jitter (compiled only against a CUDA build of torch): its inputs'
// devices checked before the guard (which would refuse a CPU input obscurely), then its plan
// launched by cuda_registration.h's one template.
#include <torch/library.h>

#include "ops/cuda_registration.h"
#include "ops/color_jitter/color_jitter_plan.h"

namespace prefetch {
namespace {

at::Tensor color_jitter_cuda(const at::Tensor& images, const at::Tensor& steps, const at::Tensor& factors) {
  check_uint8_images("color_jitter", images, steps, "steps");
  check_uint8_images("color_jitter", images, factors, "factors");
  return run_cuda(images.device(), [&] { return plan_color_jitter(images, steps, factors); },
                  &kernels::color_jitter_cuda);
}

}  // namespace

TORCH_LIBRARY_IMPL(prefetch, CUDA, m) { m.impl("color_jitter", &color_jitter_cuda); }

}  // namespace prefetch
