// color_jitter's plan: its arguments checked and turned into the kernel's (kernels'
// color_jitter/color_jitter.h), the output and the grey-sum scratch allocated. Both registrations
// run it.
#pragma once
#include <ATen/ATen.h>

#include "color_jitter/color_jitter.h"
#include "ops/plan_common.h"

namespace prefetch {

struct ColorJitterPlan {
  at::Tensor steps, factors;  // int64 and float64 [N, K] contiguous, what the args point into
  at::Tensor grey_sums;       // int64 [N, K], zeroed
  at::Tensor out;
  kernels::ColorJitterArgs args;
};

ColorJitterPlan plan_color_jitter(const at::Tensor& images, const at::Tensor& steps, const at::Tensor& factors,
                                  const OutputAllocator& allocate = default_output);

}  // namespace prefetch
