// histograms' plan: its argument checked and turned into the kernel's (kernels'
// histogram/histogram.h), the zeroed counts allocated. Both registrations run it.
#pragma once
#include <ATen/ATen.h>

#include "histogram/histogram.h"
#include "ops/plan_common.h"

namespace prefetch {

struct HistogramPlan {
  at::Tensor out;  // int32 [N, C, 256], zeroed (the CUDA kernel adds to it)
  kernels::HistogramArgs args;
};

HistogramPlan plan_histogram(const at::Tensor& images);

}  // namespace prefetch
