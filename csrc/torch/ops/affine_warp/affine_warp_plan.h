// affine_warp's plan: its arguments checked and turned into the kernel's (kernels'
// affine_warp/affine_warp.h), the output allocated. Both registrations run it.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include <optional>

#include "affine_warp/affine_warp.h"
#include "ops/plan_common.h"

namespace prefetch {

struct AffineWarpPlan {
  static constexpr const char* kName = "affine_warp";  // in errors
  at::Tensor matrices;  // float32 [N, 6] contiguous, what args.matrices points into
  at::Tensor out;
  kernels::AffineWarpArgs args;
};

AffineWarpPlan plan_affine_warp(const at::Tensor& images, const at::Tensor& matrices, bool bilinear,
                                const std::optional<at::ArrayRef<double>>& fill,
                                const OutputAllocator& allocate = default_output);

// What is wrong with plan.args for a kernel on the CPU or (cuda) a CUDA device; empty: complete
// (ops/kernel_args.h, whose complete_args runs it before every launch).
std::vector<std::string> arg_problems(const AffineWarpPlan& plan, bool cuda);

}  // namespace prefetch
