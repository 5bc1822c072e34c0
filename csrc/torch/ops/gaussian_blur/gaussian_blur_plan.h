// gaussian_blur's plan: its arguments checked and turned into the kernel's (kernels'
// gaussian_blur/gaussian_blur.h), the output allocated, and for a CUDA kernel the row pass's
// float32 buffer. Both registrations run it.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "gaussian_blur/gaussian_blur.h"
#include "ops/plan_common.h"

namespace prefetch {

struct GaussianBlurPlan {
  static constexpr const char* kName = "gaussian_blur";  // in errors
  at::Tensor kernel_x, kernel_y;  // float32 [N, kx] and [N, ky] contiguous: what args.kernel_x/y point into
  at::Tensor rows;                // the CUDA row pass's float32 [N, C, H, W]; undefined for the CPU
  at::Tensor out;
  kernels::GaussianBlurArgs args;
};

// `row_buffer`: allocate args.rows on the images' device (a CUDA kernel's plan; the CPU kernel
// keeps its own bands).
GaussianBlurPlan plan_gaussian_blur(const at::Tensor& images, const at::Tensor& kernel_x, const at::Tensor& kernel_y,
                                    bool row_buffer, const OutputAllocator& allocate = default_output);

// What is wrong with plan.args for a kernel on the CPU or (cuda) a CUDA device; empty: complete
// (ops/kernel_args.h, whose complete_args runs it before every launch).
std::vector<std::string> arg_problems(const GaussianBlurPlan& plan, bool cuda);

}  // namespace prefetch
