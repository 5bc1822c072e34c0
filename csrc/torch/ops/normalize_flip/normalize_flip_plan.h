// normalize_flip's plan: its arguments checked and turned into the kernel's (kernels'
// normalize_flip/normalize_flip.h), the output allocated. Both registrations run it.
#pragma once
#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

#include "normalize_flip/normalize_flip.h"
#include "ops/geometry_inputs.h"
#include "ops/plan_common.h"

namespace prefetch {

struct NormalizeFlipPlan {
  static constexpr const char* kName = "normalize_flip";  // in errors
  GeometryInputs geometry;
  std::vector<kernels::Affine> affine;  // host copy; the CUDA path uploads it
  at::Tensor out;
  kernels::NormalizeFlipArgs args;  // pointers filled except `affine`
};

NormalizeFlipPlan plan_normalize_flip(const at::Tensor& images, at::ArrayRef<double> mean,
                                      at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                                      const std::optional<at::Tensor>& vflip,
                                      at::OptionalIntArrayRef crop,
                                      const std::optional<at::Tensor>& offsets, int64_t fill,
                                      at::ScalarType dtype, const std::string& layout,
                                      bool channels_last,
                                      const std::optional<at::Tensor>& indices,
                                      const OutputAllocator& allocate = default_output);

// What is wrong with plan.args for a kernel on the CPU or (cuda) a CUDA device; empty: complete
// (ops/kernel_args.h, whose complete_args runs it before every launch).
std::vector<std::string> arg_problems(const NormalizeFlipPlan& plan, bool cuda);

}  // namespace prefetch
