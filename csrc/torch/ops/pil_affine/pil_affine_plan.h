// pil_affine's plan: its arguments checked and turned into the kernel's (kernels'
// pil_affine/pil_affine.h), the output allocated. Both registrations run it.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "ops/plan_common.h"
#include "pil_affine/pil_affine.h"

namespace prefetch {

struct PilAffinePlan {
  static constexpr const char* kName = "pil_affine";  // in errors
  at::Tensor matrices;  // float64 [N, 6] contiguous, what args.matrices points into
  at::Tensor out;
  kernels::PilAffineArgs args;
};

PilAffinePlan plan_pil_affine(const at::Tensor& images, const at::Tensor& matrices, bool bicubic,
                              at::IntArrayRef fill, const OutputAllocator& allocate = default_output);

// What is wrong with plan.args for a kernel on the CPU or (cuda) a CUDA device; empty: complete
// (ops/kernel_args.h, whose complete_args runs it before every launch).
std::vector<std::string> arg_problems(const PilAffinePlan& plan, bool cuda);

}  // namespace prefetch
