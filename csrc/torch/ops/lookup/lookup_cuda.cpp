// The CUDA registration of lookup (compiled only against a CUDA build of torch): its inputs'
// devices checked before the guard (which would refuse a CPU input obscurely), then its plan
// launched by cuda_registration.h's one template.
#include <torch/library.h>

#include "ops/cuda_registration.h"
#include "ops/lookup/lookup_plan.h"

namespace prefetch {
namespace {

at::Tensor lookup_cuda(const at::Tensor& images, const at::Tensor& tables) {
  check_uint8_images("lookup", images, tables, "tables");
  return run_cuda(images.device(), [&] { return plan_lookup(images, tables); }, &kernels::lookup_cuda);
}

}  // namespace

TORCH_LIBRARY_IMPL(prefetch, CUDA, m) { m.impl("lookup", &lookup_cuda); }

}  // namespace prefetch
