// plan_sharpness (sharpness_plan.h).
#include "ops/sharpness_plan.h"

namespace prefetch {

SharpnessPlan plan_sharpness(const at::Tensor& images, const at::Tensor& factors, const OutputAllocator& allocate) {
  TORCH_CHECK(factors.device() == images.device(), "sharpness: factors is on ", factors.device(),
              " but the images are on ", images.device(), "; every tensor argument must be on the images' device");
  TORCH_CHECK(images.scalar_type() == at::kByte && images.dim() == 4,
              "sharpness: images must be uint8 [N, C, H, W], got ", images.scalar_type(), " of shape ",
              shape_of(images));
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
  a.images = images.const_data_ptr<uint8_t>();
  a.N = N, a.C = C, a.H = H, a.W = W;
  a.sN = images.stride(0), a.sC = images.stride(1), a.sH = images.stride(2), a.sW = images.stride(3);
  a.factors = plan.factors.const_data_ptr<double>();
  a.out = plan.out.data_ptr<uint8_t>();
  return plan;
}

}  // namespace prefetch
