// plan_normalize_flip (normalize_flip_plan.h).
#include "ops/normalize_flip_plan.h"

namespace prefetch {

NormalizeFlipPlan plan_normalize_flip(const at::Tensor& images, at::ArrayRef<double> mean,
                                      at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                                      const std::optional<at::Tensor>& vflip,
                                      at::OptionalIntArrayRef crop,
                                      const std::optional<at::Tensor>& offsets, int64_t fill,
                                      at::ScalarType dtype, const std::string& layout,
                                      bool channels_last, const std::optional<at::Tensor>& indices,
                                      const OutputAllocator& allocate) {
  check_devices("normalize_flip", images, "images", hflip, vflip, offsets, indices);
  TORCH_CHECK(layout == "NHWC" || layout == "NCHW", "layout must be 'NHWC' or 'NCHW', got '",
              layout, "'");
  TORCH_CHECK(images.scalar_type() == at::kByte, "images must be uint8, got ", images.scalar_type());
  TORCH_CHECK(images.dim() == 4, "images must be 4-D ", layout == "NHWC" ? "[N, H, W, C]" : "[N, C, H, W]",
              " for layout='", layout, "', got shape ", shape_of(images));
  check_out_dtype("normalize_flip", dtype);
  TORCH_CHECK(fill >= 0 && fill <= 255, "fill must be a uint8 value in [0, 255], got ", fill);
  const bool nhwc = layout == "NHWC";
  const int64_t C = nhwc ? images.size(3) : images.size(1);
  const int64_t H = nhwc ? images.size(1) : images.size(2);
  const int64_t W = nhwc ? images.size(2) : images.size(3);
  TORCH_CHECK(C >= 1, "images must have at least one channel, got shape ", shape_of(images));
  TORCH_CHECK(static_cast<int64_t>(mean.size()) == C, "mean has ", mean.size(),
              " values but the images have C = ", C, " channels");
  TORCH_CHECK(static_cast<int64_t>(std.size()) == C, "std has ", std.size(),
              " values but the images have C = ", C, " channels");

  check_mean_std(mean, std);

  NormalizeFlipPlan plan;
  plan.affine = affine_of(mean, std);
  plan.geometry = geometry_inputs(images.size(0), H, W, hflip, vflip, crop, offsets, indices);
  kernels::Geometry& g = plan.geometry.g;
  const int64_t N = g.N;
  g.C = C;
  g.sN = images.stride(0);
  g.sC = nhwc ? images.stride(3) : images.stride(1);
  g.sH = nhwc ? images.stride(1) : images.stride(2);
  g.sW = nhwc ? images.stride(2) : images.stride(3);

  checked_output_bytes("normalize_flip", {N, C, g.h, g.w}, dtype);
  plan.out = allocate({N, C, g.h, g.w}, images.options().dtype(dtype),
                      channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
  kernels::NormalizeFlipArgs& a = plan.args;
  a.images = images.const_data_ptr<uint8_t>();
  a.g = g;
  a.offsets = plan.geometry.offsets_ptr();
  a.hflip = plan.geometry.hflip_ptr();
  a.vflip = plan.geometry.vflip_ptr();
  a.fill = static_cast<uint8_t>(fill);
  set_output(&a, plan.out, dtype);
  return plan;
}

}  // namespace prefetch
