// plan_sharpness (sharpness_plan.h).
#include "ops/sharpness_plan.h"

namespace prefetch {

SharpnessPlan plan_sharpness(const at::Tensor& images, const at::Tensor& factors, const OutputAllocator& allocate) {
  check_uint8_images("sharpness", images, factors, "factors");
  const int64_t N = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  TORCH_CHECK(factors.scalar_type() == at::kDouble && factors.dim() == 1 && factors.size(0) == N,
              "sharpness: factors must be float64 [N] = [", N, "] (one per image), got ", factors.scalar_type(),
              " of shape ", shape_of(factors));
  // A CUDA launch numbers one image's rows (C * H) in 32 bits.
  TORCH_CHECK(C * H < INT32_MAX, "sharpness: an image's C * H must be below 2^31, got C = ", C, ", H = ", H);
  checked_output_bytes("sharpness", {N, C, H, W}, at::kByte);
  SharpnessPlan plan;
  plan.factors = factors.contiguous();
  plan.out = allocate({N, C, H, W}, images.options(), at::MemoryFormat::Contiguous);
  kernels::SharpnessArgs& a = plan.args;
  set_uint8_images(&a, images, plan.out);
  a.factors = plan.factors.const_data_ptr<double>();
  return plan;
}

}  // namespace prefetch
