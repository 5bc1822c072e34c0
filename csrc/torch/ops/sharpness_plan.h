// sharpness's plan: its arguments checked and turned into the kernel's (kernels'
// sharpness/sharpness.h), the output allocated. Both registrations run it.
#pragma once
#include <ATen/ATen.h>

#include "ops/plan_common.h"
#include "sharpness/sharpness.h"

namespace prefetch {

struct SharpnessPlan {
  at::Tensor factors;  // float64 [N] contiguous, what args.factors points into
  at::Tensor out;
  kernels::SharpnessArgs args;
};

SharpnessPlan plan_sharpness(const at::Tensor& images, const at::Tensor& factors,
                             const OutputAllocator& allocate = default_output);

}  // namespace prefetch
