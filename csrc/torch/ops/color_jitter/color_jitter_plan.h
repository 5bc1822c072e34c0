// color_jitter's plan: its arguments checked and turned into the kernel's (kernels'
// color_jitter/color_jitter.h), the output and the grey-sum scratch allocated. Both registrations
// run it.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "color_jitter/color_jitter.h"
#include "ops/plan_common.h"

namespace prefetch {

struct ColorJitterPlan {
  static constexpr const char* kName = "color_jitter";  // in errors
  at::Tensor steps, factors;  // int64 and float64 [N, K] contiguous, what the args point into
  at::Tensor grey_sums;       // int64 [N, K], zeroed
  at::Tensor out;
  kernels::ColorJitterArgs args;
};

ColorJitterPlan plan_color_jitter(const at::Tensor& images, const at::Tensor& steps, const at::Tensor& factors,
                                  const OutputAllocator& allocate = default_output);

// What is wrong with plan.args for a kernel on the CPU or (cuda) a CUDA device; empty: complete
// (ops/kernel_args.h, whose complete_args runs it before every launch).
std::vector<std::string> arg_problems(const ColorJitterPlan& plan, bool cuda);

}  // namespace prefetch
