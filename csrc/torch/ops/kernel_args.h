// The one place where an op's plan (<op>_plan.h) becomes its kernel's complete arguments, for
// every backend. A registration adds only what is its own: the CPU one (ops_cpu.cpp) its thread
// split; the CUDA one (ops_cuda.cpp) its device guard, its stream, and, as a KernelTarget's
// `upload`, the copy to the device of the per-channel constants that do not fit in the kernel's
// arguments.
//
// Why it exists: the CUDA registration once carried its own copy of this assembly and left one
// pointer unset, a certain crash at the first batch that no machine without a GPU could see. Now
// the assembly runs in code the CPU build compiles, the completeness check below runs before every
// launch on both backends (a forgotten field is an error naming it, never a crash), and the CPU
// tests assemble the CUDA arguments with a stand-in upload (tests/ops/test_kernel_args.py).
#pragma once
#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

#include "ops/affine_warp_plan.h"
#include "ops/color_jitter_plan.h"
#include "ops/flip_crop_plan.h"
#include "ops/histogram_plan.h"
#include "ops/lookup_plan.h"
#include "ops/normalize_flip_plan.h"
#include "ops/resized_crop_plan.h"
#include "ops/sharpness_plan.h"

namespace prefetch {

struct KernelTarget {
  bool cuda = false;
  // For a CUDA target: the constants copied to the kernel's device, in a tensor that holds them
  // until the kernel has read them. Called only for more than kernels::kInlineChannels channels
  // (fewer travel by value in the launch).
  std::function<at::Tensor(const std::vector<kernels::Affine>&)> upload;
};

inline KernelTarget cpu_target() { return KernelTarget{}; }

// Completes plan->args for `target` and checks them (check_*_args); returns what the kernel reads
// that the plan does not hold (the uploaded constants, or an undefined tensor), to be kept until
// the launch has been enqueued.
at::Tensor complete_args(NormalizeFlipPlan* plan, const KernelTarget& target);
at::Tensor complete_args(ResizedCropPlan* plan, const KernelTarget& target);
void complete_args(FlipCropPlan* plan, const KernelTarget& target);
void complete_args(AffineWarpPlan* plan, const KernelTarget& target);
void complete_args(SharpnessPlan* plan, const KernelTarget& target);
void complete_args(LookupPlan* plan, const KernelTarget& target);
void complete_args(ColorJitterPlan* plan, const KernelTarget& target);
void complete_args(HistogramPlan* plan, const KernelTarget& target);

// What is wrong with an op's arguments for a kernel on `target` (empty: complete): every pointer
// the kernel reads is set, every size and stride agrees with the output tensor, and the launch
// can be numbered (the CUDA kernels number their threads in 32 bits). The check_* functions throw
// a RuntimeError naming the op and every problem; complete_args calls them.
std::vector<std::string> normalize_flip_arg_problems(const NormalizeFlipPlan& plan, bool cuda);
std::vector<std::string> resized_crop_arg_problems(const ResizedCropPlan& plan, bool cuda);
std::vector<std::string> flip_crop_arg_problems(const FlipCropPlan& plan, bool cuda);
std::vector<std::string> affine_warp_arg_problems(const AffineWarpPlan& plan, bool cuda);
std::vector<std::string> sharpness_arg_problems(const SharpnessPlan& plan, bool cuda);
std::vector<std::string> lookup_arg_problems(const LookupPlan& plan, bool cuda);
std::vector<std::string> color_jitter_arg_problems(const ColorJitterPlan& plan, bool cuda);
std::vector<std::string> histogram_arg_problems(const HistogramPlan& plan, bool cuda);
void check_normalize_flip_args(const NormalizeFlipPlan& plan, bool cuda);
void check_resized_crop_args(const ResizedCropPlan& plan, bool cuda);
void check_flip_crop_args(const FlipCropPlan& plan, bool cuda);
void check_affine_warp_args(const AffineWarpPlan& plan, bool cuda);
void check_sharpness_args(const SharpnessPlan& plan, bool cuda);
void check_lookup_args(const LookupPlan& plan, bool cuda);
void check_color_jitter_args(const ColorJitterPlan& plan, bool cuda);
void check_histogram_args(const HistogramPlan& plan, bool cuda);

}  // namespace prefetch
