// sharpness's plan: its arguments checked and turned into the kernel's (kernels'
// sharpness/sharpness.h), the output allocated. Both registrations run it.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "ops/plan_common.h"
#include "sharpness/sharpness.h"

namespace prefetch {

// values: the factors, float64 [N] contiguous, what args.factors points into.
struct SharpnessPlan : Uint8ValuesPlan<kernels::SharpnessArgs> {
  static constexpr const char* kName = "sharpness";  // in errors
};

// pillow: Pillow's arithmetic (kernels' sharpness/sharpness.h), not torchvision's.
SharpnessPlan plan_sharpness(const at::Tensor& images, const at::Tensor& factors, bool pillow,
                             const OutputAllocator& allocate = default_output);

// What is wrong with plan.args for a kernel on the CPU or (cuda) a CUDA device; empty: complete
// (ops/kernel_args.h, whose complete_args runs it before every launch).
std::vector<std::string> arg_problems(const SharpnessPlan& plan, bool cuda);

}  // namespace prefetch
