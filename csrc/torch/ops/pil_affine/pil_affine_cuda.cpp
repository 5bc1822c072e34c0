// The CUDA registration of pil_affine (compiled only against a CUDA build of torch): its inputs'
// devices checked before the guard (which would refuse a CPU input obscurely), then its plan
// launched by cuda_registration.h's one template.
#include <torch/library.h>

#include "ops/cuda_registration.h"
#include "ops/pil_affine/pil_affine_plan.h"

namespace prefetch {
namespace {

at::Tensor pil_affine_cuda(const at::Tensor& images, const at::Tensor& matrices, bool bicubic,
                           at::IntArrayRef fill) {
  check_uint8_images("pil_affine", images, matrices, "matrices");
  return run_cuda(images.device(), [&] { return plan_pil_affine(images, matrices, bicubic, fill); },
                  &kernels::pil_affine_cuda);
}

}  // namespace

TORCH_LIBRARY_IMPL(prefetch, CUDA, m) { m.impl("pil_affine", &pil_affine_cuda); }

}  // namespace prefetch
