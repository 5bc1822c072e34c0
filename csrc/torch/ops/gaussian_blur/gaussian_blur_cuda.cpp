// The CUDA registration of gaussian_blur (compiled only against a CUDA build of torch): its inputs'
// devices checked before the guard (which would refuse a CPU input obscurely), then its plan, with
// the row pass's buffer, launched by cuda_registration.h's one template. The buffer is allocated
// on the current stream and freed when the plan goes, after both passes are enqueued on that
// stream: the caching allocator reuses it only for work ordered after them.
#include <torch/library.h>

#include "ops/cuda_registration.h"
#include "ops/gaussian_blur/gaussian_blur_plan.h"

namespace prefetch {
namespace {

at::Tensor gaussian_blur_cuda(const at::Tensor& images, const at::Tensor& kernel_x, const at::Tensor& kernel_y) {
  check_uint8_images("gaussian_blur", images, kernel_x, "kernel_x");
  check_uint8_images("gaussian_blur", images, kernel_y, "kernel_y");
  return run_cuda(images.device(), [&] { return plan_gaussian_blur(images, kernel_x, kernel_y, /*row_buffer=*/true); },
                  &kernels::gaussian_blur_cuda);
}

}  // namespace

TORCH_LIBRARY_IMPL(prefetch, CUDA, m) { m.impl("gaussian_blur", &gaussian_blur_cuda); }

}  // namespace prefetch
