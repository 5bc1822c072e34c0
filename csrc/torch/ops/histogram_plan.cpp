// plan_histogram (histogram_plan.h).
#include "ops/histogram_plan.h"

namespace prefetch {

HistogramPlan plan_histogram(const at::Tensor& images) {
  TORCH_CHECK(images.scalar_type() == at::kByte && images.dim() == 4,
              "histograms: images must be uint8 [N, C, H, W], got ", images.scalar_type(), " of shape ",
              shape_of(images));
  const int64_t N = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  // The counts are int32, and a CUDA grid numbers a plane's rows in 32 bits.
  TORCH_CHECK(H * W < INT32_MAX, "histograms: an image's H * W must be below 2^31 (int32 counts), got H = ", H,
              ", W = ", W);
  HistogramPlan plan;
  plan.out = at::zeros({N, C, kernels::kHistogramBins}, images.options().dtype(at::kInt));
  kernels::HistogramArgs& a = plan.args;
  set_uint8_inputs(&a, images);
  a.out = plan.out.data_ptr<int32_t>();
  return plan;
}

}  // namespace prefetch
