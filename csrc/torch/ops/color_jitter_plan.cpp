// plan_color_jitter (color_jitter_plan.h).
#include "ops/color_jitter_plan.h"

#include <cmath>

namespace prefetch {

namespace {

constexpr int64_t kColorSteps = 5;  // kernels::ColorStep's codes 0 .. 4
const char* const kColorStepNames[kColorSteps] = {"identity", "brightness", "contrast", "saturation", "hue"};

// Steps and factors in host memory (the CPU op's) are checked here, value by value, at no cost to a
// device: so every caller of the CPU op — the Python wrapper, torch.ops, torch.compile's graphs,
// which must not branch on tensor values in Python — gets the same ValueError. Steps on a device
// are used unread (reading them would synchronise): an unknown code is then a step that does
// nothing, and a factor out of range gives torchvision's arithmetic on it.
void check_host_color_steps(const at::Tensor& steps, const at::Tensor& factors) {
  if (!steps.device().is_cpu() || !factors.device().is_cpu()) return;
  const at::Tensor s = steps.contiguous(), f = factors.contiguous();
  const int64_t* code = s.const_data_ptr<int64_t>();
  const double* factor = f.const_data_ptr<double>();
  const int64_t K = s.size(1);
  for (int64_t i = 0; i < s.numel(); ++i) {
    TORCH_CHECK_VALUE(code[i] >= 0 && code[i] < kColorSteps, "prefetch: color_jitter's step codes are 0 to ",
                      kColorSteps - 1, " (identity, brightness, contrast, saturation, hue); image ", i / K,
                      ", step ", i % K, " is ", code[i]);
  }
  for (int64_t i = 0; i < s.numel(); ++i) {
    if (code[i] == 0) continue;  // identity: its factor is not read
    const double v = factor[i];
    const bool hue = code[i] == kColorSteps - 1;
    TORCH_CHECK_VALUE(std::isfinite(v) && (hue ? (v >= -0.5 && v <= 0.5) : v >= 0), "prefetch: color_jitter's ",
                      kColorStepNames[code[i]], " factor of image ", i / K, " (step ", i % K, ") is ", v,
                      "; brightness, contrast and saturation factors must be finite and at least 0, hue factors "
                      "in [-0.5, 0.5]");
  }
}

}  // namespace

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
  check_host_color_steps(steps, factors);
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
