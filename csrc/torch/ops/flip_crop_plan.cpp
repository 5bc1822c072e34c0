// plan_flip_crop (flip_crop_plan.h).
#include "ops/flip_crop_plan.h"

#include <limits>

namespace prefetch {

namespace {

// The fill of a mask of dtype t must be a value of t (300 would wrap to 44 in uint8).
void check_mask_fill(at::ScalarType t, int64_t fill) {
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  const char *article = "an", *name = "int64";
  if (t == at::kByte) {
    lo = 0, hi = 255, article = "a", name = "uint8";
  } else if (t == at::kShort) {
    lo = std::numeric_limits<int16_t>::min(), hi = std::numeric_limits<int16_t>::max(), name = "int16";
  } else if (t == at::kInt) {
    lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max(), name = "int32";
  }
  TORCH_CHECK(fill >= lo && fill <= hi, "fill must be ", article, " ", name, " value in [", lo, ", ",
              hi, "] for ", name, " masks, got ", fill);
}

}  // namespace

FlipCropPlan plan_flip_crop(const at::Tensor& masks, const std::optional<at::Tensor>& hflip,
                            const std::optional<at::Tensor>& vflip, at::OptionalIntArrayRef crop,
                            const std::optional<at::Tensor>& offsets, int64_t fill,
                            const std::optional<at::Tensor>& indices,
                            const OutputAllocator& allocate) {
  check_devices("flip_crop", masks, "masks", hflip, vflip, offsets, indices);
  const auto t = masks.scalar_type();
  TORCH_CHECK(t == at::kByte || t == at::kShort || t == at::kInt || t == at::kLong,
              "masks must be uint8, int16, int32 or int64, got ", t);
  check_mask_fill(t, fill);
  TORCH_CHECK(masks.dim() == 3, "masks must be 3-D [N, H, W], got shape ", shape_of(masks));
  FlipCropPlan plan;
  plan.geometry = geometry_inputs(masks.size(0), masks.size(1), masks.size(2), hflip, vflip, crop,
                                  offsets, indices);
  kernels::Geometry& g = plan.geometry.g;
  g.C = 1;
  g.sN = masks.stride(0);
  g.sH = masks.stride(1);
  g.sW = masks.stride(2);
  checked_output_bytes("flip_crop", {g.N, g.h, g.w}, t);
  plan.out = allocate({g.N, g.h, g.w}, masks.options(), at::MemoryFormat::Contiguous);
  kernels::FlipCropArgs& a = plan.args;
  a.masks = masks.const_data_ptr();
  a.itemsize = static_cast<int>(masks.element_size());
  a.g = g;
  a.offsets = plan.geometry.offsets_ptr();
  a.hflip = plan.geometry.hflip_ptr();
  a.vflip = plan.geometry.vflip_ptr();
  a.fill = fill;
  a.out = plan.out.data_ptr();
  return plan;
}

}  // namespace prefetch
