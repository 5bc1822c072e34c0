// histograms' plan: its argument checked and turned into the kernel's (kernels'
// histogram/histogram.h), the zeroed counts allocated. Both registrations run it.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "histogram/histogram.h"
#include "ops/plan_common.h"

namespace prefetch {

struct HistogramPlan {
  static constexpr const char* kName = "histograms";  // in errors
  at::Tensor out;  // int32 [N, C, 256], zeroed (the CUDA kernel adds to it)
  kernels::HistogramArgs args;
};

HistogramPlan plan_histogram(const at::Tensor& images);

// What is wrong with plan.args for a kernel on the CPU or (cuda) a CUDA device; empty: complete
// (ops/kernel_args.h, whose complete_args runs it before every launch).
std::vector<std::string> arg_problems(const HistogramPlan& plan, bool cuda);

}  // namespace prefetch
