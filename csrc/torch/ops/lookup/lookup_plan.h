// lookup's plan: its arguments checked and turned into the kernel's (kernels' lookup/lookup.h),
// the output allocated. Both registrations run it.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "lookup/lookup.h"
#include "ops/plan_common.h"

namespace prefetch {

// values: the tables, uint8 [N, T, 256] contiguous, what args.tables points into.
struct LookupPlan : Uint8ValuesPlan<kernels::LookupArgs> {
  static constexpr const char* kName = "lookup";  // in errors
};

LookupPlan plan_lookup(const at::Tensor& images, const at::Tensor& tables,
                       const OutputAllocator& allocate = default_output);

// What is wrong with plan.args for a kernel on the CPU or (cuda) a CUDA device; empty: complete
// (ops/kernel_args.h, whose complete_args runs it before every launch).
std::vector<std::string> arg_problems(const LookupPlan& plan, bool cuda);

}  // namespace prefetch
