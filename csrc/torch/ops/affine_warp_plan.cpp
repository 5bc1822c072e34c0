// plan_affine_warp (affine_warp_plan.h).
#include "ops/affine_warp_plan.h"

#include <cmath>

namespace prefetch {

AffineWarpPlan plan_affine_warp(const at::Tensor& images, const at::Tensor& matrices, bool bilinear,
                                const std::optional<at::ArrayRef<double>>& fill, const OutputAllocator& allocate) {
  check_uint8_images("affine_warp", images, matrices, "matrices");
  const int64_t N = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  TORCH_CHECK(C >= 1 && C <= kernels::kWarpMaxChannels, "affine_warp: images must have 1 to ",
              kernels::kWarpMaxChannels, " channels, got C = ", C);
  TORCH_CHECK(H <= kernels::kWarpMaxSide && W <= kernels::kWarpMaxSide, "affine_warp: images must be at most ",
              kernels::kWarpMaxSide, " pixels a side, got H = ", H, ", W = ", W);
  TORCH_CHECK(matrices.scalar_type() == at::kFloat && matrices.dim() == 2 && matrices.size(0) == N &&
                  matrices.size(1) == kernels::kWarpMatrixFields,
              "affine_warp: matrices must be float32 [N, 6] = [", N, ", 6] (one map per image), got ",
              matrices.scalar_type(), " of shape ", shape_of(matrices));
  AffineWarpPlan plan;
  kernels::AffineWarpArgs& a = plan.args;
  if (fill.has_value()) {
    const auto values = *fill;
    TORCH_CHECK(values.size() == 1 || static_cast<int64_t>(values.size()) == C,
                "affine_warp: fill must have 1 value or one per channel (", C, "), got ", values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      TORCH_CHECK(std::isfinite(values[i]) && values[i] >= 0.0 && values[i] <= 255.0,
                  "affine_warp: fill[", i, "] must lie in [0, 255] for uint8 images, got ", values[i]);
    }
    a.has_fill = true;
    for (int64_t c = 0; c < C; ++c) a.fill[c] = static_cast<float>(values.size() == 1 ? values[0] : values[c]);
  }
  checked_output_bytes("affine_warp", {N, C, H, W}, at::kByte);
  plan.matrices = matrices.contiguous();
  plan.out = allocate({N, C, H, W}, images.options(), at::MemoryFormat::Contiguous);
  set_uint8_images(&a, images, plan.out);
  a.matrices = plan.matrices.const_data_ptr<float>();
  a.bilinear = bilinear;
  return plan;
}

}  // namespace prefetch
