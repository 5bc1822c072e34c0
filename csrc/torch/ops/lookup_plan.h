// lookup's plan: its arguments checked and turned into the kernel's (kernels' lookup/lookup.h),
// the output allocated. Both registrations run it.
#pragma once
#include <ATen/ATen.h>

#include "lookup/lookup.h"
#include "ops/plan_common.h"

namespace prefetch {

struct LookupPlan {
  at::Tensor tables;  // uint8 [N, T, 256] contiguous, what args.tables points into
  at::Tensor out;
  kernels::LookupArgs args;
};

LookupPlan plan_lookup(const at::Tensor& images, const at::Tensor& tables,
                       const OutputAllocator& allocate = default_output);

}  // namespace prefetch
