// The kernel-argument test hooks' one template: prefetch._C._<op>_kernel_args, the kernel arguments
// complete_args assembles for an op's call, for the CPU or for a CUDA kernel, described as a dict,
// so that the CPU tests check the CUDA assembly on a machine without a GPU
// (tests/ops/test_kernel_args.py). The CUDA target's upload is replaced by a copy into CPU memory
// (the one line of the real upload that is CUDA's own); everything else is the code a CUDA call
// runs. Test hooks, private: prefetch's API never calls them.
//
// An op's <op>.cpp defines its hook with describe_kernel_args (its plan, the fields a test may
// null, the fields it describes) and registers it with a static KernelArgsHook;
// kernel_args_binding.cpp adds every registered hook to the module.
#pragma once
#include <torch/extension.h>

#include <string>
#include <vector>

#include "common/affine_table.h"
#include "ops/kernel_args.h"

namespace prefetch {

// Registers `bind` (which m.def's one hook) for bind_kernel_args; a static object of an op's file.
struct KernelArgsHook {
  explicit KernelArgsHook(void (*bind)(pybind11::module_& m));
};

// "cpu", or "cuda" with an upload into CPU memory that sets *uploaded.
KernelTarget hook_target(const std::string& name, bool* uploaded);

// A table of C (scale, bias) pairs, or None for a null table.
pybind11::object table_of(const kernels::Affine* table, int64_t C);

// Nulls the named field of an image op's float arguments, as a registration that forgot it would
// leave it.
template <typename Args>
void drop_common(Args* a, const std::string& field) {
  if (field == "affine") a->affine = nullptr;
  if (field == "affine_device") a->affine_device = nullptr;
  if (field == "out") a->out = nullptr;
  if (field == "hflip") a->hflip = nullptr;
  if (field == "vflip") a->vflip = nullptr;
  if (field == "oN") a->oN += 1;
}

// The hook's body for every op: the plan `make_plan()` returns, completed for `target_name`, the
// field `drop` nulled by `drop_field(&plan.args, drop)`, described as a dict: "problems" (what
// arg_problems finds after the drop), "uploaded", "out", for a plan with per-channel constants
// "affine", "affine_device" and "inline", and what `describe(plan)` adds.
template <typename MakePlan, typename Drop, typename Describe>
pybind11::dict describe_kernel_args(const std::string& target_name, const std::string& drop, MakePlan make_plan,
                                    Drop drop_field, Describe describe) {
  bool uploaded = false;
  const KernelTarget target = hook_target(target_name, &uploaded);
  auto plan = make_plan();
  const at::Tensor keep = complete_args(&plan, target);
  drop_field(&plan.args, drop);
  pybind11::dict d = describe(plan);
  if constexpr (HasConstants<decltype(plan)>::value) {
    const int64_t C = static_cast<int64_t>(plan.affine.size());
    d["affine"] = table_of(plan.args.affine, C);
    d["affine_device"] = table_of(plan.args.affine_device, C);
    d["inline"] = C <= kernels::kInlineChannels;
  }
  d["problems"] = arg_problems(plan, target.cuda);
  d["uploaded"] = uploaded;
  d["out"] = plan.out;
  return d;
}

}  // namespace prefetch
