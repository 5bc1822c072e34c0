// plan_color_jitter (color_jitter_plan.h).
#include "ops/color_jitter_plan.h"

namespace prefetch {

ColorJitterPlan plan_color_jitter(const at::Tensor& images, const at::Tensor& steps, const at::Tensor& factors,
                                  const OutputAllocator& allocate) {
  check_uint8_images("color_jitter", images, steps, "steps");
  check_uint8_images("color_jitter", images, factors, "factors");
  const int64_t N = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  TORCH_CHECK(C == 1 || C == 3, "color_jitter: images must have 1 or 3 channels, got C = ", C);
  TORCH_CHECK(steps.scalar_type() == at::kLong && steps.dim() == 2 && steps.size(0) == N,
              "color_jitter: steps must be int64 [N, K] = [", N, ", K] (each image's chain), got ",
              steps.scalar_type(), " of shape ", shape_of(steps));
  const int64_t K = steps.size(1);
  TORCH_CHECK(factors.scalar_type() == at::kDouble && factors.dim() == 2 && factors.size(0) == N &&
                  factors.size(1) == K,
              "color_jitter: factors must be float64 [N, K] = [", N, ", ", K, "] (one per step), got ",
              factors.scalar_type(), " of shape ", shape_of(factors));
  // A CUDA launch numbers an image's rows (H) in 32 bits.
  TORCH_CHECK(H < INT32_MAX, "color_jitter: images must be below 2^31 rows, got H = ", H);
  checked_output_bytes("color_jitter", {N, C, H, W}, at::kByte);
  ColorJitterPlan plan;
  plan.steps = steps.contiguous();
  plan.factors = factors.contiguous();
  plan.grey_sums = at::zeros({N, K}, images.options().dtype(at::kLong));
  plan.out = allocate({N, C, H, W}, images.options(), at::MemoryFormat::Contiguous);
  kernels::ColorJitterArgs& a = plan.args;
  set_uint8_images(&a, images, plan.out);
  a.steps = plan.steps.const_data_ptr<int64_t>();
  a.factors = plan.factors.const_data_ptr<double>();
  a.K = K;
  a.grey_sums = plan.grey_sums.data_ptr<int64_t>();
  return plan;
}

}  // namespace prefetch
