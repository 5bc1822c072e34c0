// plan_lookup (lookup_plan.h).
#include "ops/lookup_plan.h"

namespace prefetch {

LookupPlan plan_lookup(const at::Tensor& images, const at::Tensor& tables, const OutputAllocator& allocate) {
  check_uint8_images("lookup", images, tables, "tables");
  const int64_t N = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  TORCH_CHECK(tables.scalar_type() == at::kByte && tables.dim() == 3 && tables.size(0) == N &&
                  (tables.size(1) == 1 || tables.size(1) == C) && tables.size(2) == kernels::kLookupEntries,
              "lookup: tables must be uint8 [N, 1 or C, 256] = [", N, ", 1 or ", C,
              ", 256] (one table per image, or per image and channel), got ", tables.scalar_type(), " of shape ",
              shape_of(tables));
  // A CUDA launch numbers one image's rows (C * H) in 32 bits.
  TORCH_CHECK(C * H < INT32_MAX, "lookup: an image's C * H must be below 2^31, got C = ", C, ", H = ", H);
  checked_output_bytes("lookup", {N, C, H, W}, at::kByte);
  LookupPlan plan;
  plan.tables = tables.contiguous();
  plan.out = allocate({N, C, H, W}, images.options(), at::MemoryFormat::Contiguous);
  kernels::LookupArgs& a = plan.args;
  set_uint8_images(&a, images, plan.out);
  a.tables = plan.tables.const_data_ptr<uint8_t>();
  a.T = tables.size(1);
  return plan;
}

}  // namespace prefetch
