// flip_crop's plan: its arguments checked and turned into the kernel's (kernels'
// flip_crop/flip_crop.h), the output allocated. Both registrations run it.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include <optional>

#include "flip_crop/flip_crop.h"
#include "ops/geometry_inputs.h"
#include "ops/plan_common.h"

namespace prefetch {

struct FlipCropPlan {
  static constexpr const char* kName = "flip_crop";  // in errors
  GeometryInputs geometry;
  at::Tensor out;
  kernels::FlipCropArgs args;
};

FlipCropPlan plan_flip_crop(const at::Tensor& masks, const std::optional<at::Tensor>& hflip,
                            const std::optional<at::Tensor>& vflip, at::OptionalIntArrayRef crop,
                            const std::optional<at::Tensor>& offsets, int64_t fill,
                            const std::optional<at::Tensor>& indices,
                            const OutputAllocator& allocate = default_output);

// What is wrong with plan.args for a kernel on the CPU or (cuda) a CUDA device; empty: complete
// (ops/kernel_args.h, whose complete_args runs it before every launch).
std::vector<std::string> arg_problems(const FlipCropPlan& plan, bool cuda);

}  // namespace prefetch
