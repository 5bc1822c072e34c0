// The CUDA registration of histograms (compiled only against a CUDA build of torch): its inputs'
// devices checked before the guard (which would refuse a CPU input obscurely), then its plan
// launched by cuda_registration.h's one template.
#include <torch/library.h>

#include "ops/cuda_registration.h"
#include "ops/histogram/histogram_plan.h"

namespace prefetch {
namespace {

at::Tensor histograms_cuda(const at::Tensor& images) {
  // The plan zeroes its counts on the current stream, under the guard.
  return run_cuda(images.device(), [&] { return plan_histogram(images); }, &kernels::histogram_cuda);
}

}  // namespace

TORCH_LIBRARY_IMPL(prefetch, CUDA, m) { m.impl("histograms", &histograms_cuda); }

}  // namespace prefetch
