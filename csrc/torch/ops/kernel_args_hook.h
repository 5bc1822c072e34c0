// The kernel-argument test hooks' one template: prefetch._C._<op>_kernel_args, the kernel arguments
// complete_args assembles for an op's call, for the CPU or for a CUDA kernel, described as a dict,
// so that the CPU tests check the CUDA assembly on a machine without a GPU
// (tests/ops/test_kernel_args.py). The CUDA target's upload is replaced by a copy into CPU memory
// (the one line of the real upload that is CUDA's own); everything else is the code a CUDA call
// runs. Test hooks, private: prefetch's API never calls them.
//
// An op's <op>.cpp defines its hook with describe_kernel_args (its plan, the fields a test may
// null, the fields it describes), or for an op on uint8 [N, C, H, W] images with
// describe_uint8_kernel_args (only the fields besides the images') and registers it with a static KernelArgsHook;
// kernel_args_binding.cpp adds every registered hook to the module.
#pragma once
// ATen and torch's pybind11 casters (at::Tensor, ScalarType, optional), not <torch/extension.h>:
// that one header pulls in the whole C++ frontend (torch/all.h) and doubled each op file's compile
// time (one op's file: 44 s against 24.5 s), eleven files in each of CI's three builds.
#include <torch/csrc/utils/pybind.h>
#include <ATen/core/Tensor.h>

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

// Nulls the input or output pointer of an op on uint8 [N, C, H, W] images (plan_common.h's
// set_uint8_inputs) when `field` names it, as a registration that forgot it would leave it.
template <typename Args>
void drop_uint8_images(Args* a, const std::string& field) {
  if (field == "images") a->images = nullptr;
  if (field == "out") a->out = nullptr;
}

// Describes an op's uint8 [N, C, H, W] input into *d: "images" (whether args.images is `images`'
// data), "sizes" [N, C, H, W] and "strides" [sN, sC, sH, sW] (in elements, as the kernel reads them).
template <typename Args>
void describe_uint8_images(pybind11::dict* d, const Args& a, const at::Tensor& images) {
  (*d)["images"] = a.images == images.const_data_ptr<uint8_t>();
  (*d)["sizes"] = std::vector<int64_t>{a.N, a.C, a.H, a.W};
  (*d)["strides"] = std::vector<int64_t>{a.sN, a.sC, a.sH, a.sW};
}

// describe_kernel_args for an op on uint8 [N, C, H, W] images: the input and output pointers dropped
// and the images described as above, and besides them what the op's own `drop_own(&args, drop)` nulls
// and `describe_own(&d, args)` adds.
template <typename MakePlan, typename DropOwn, typename DescribeOwn>
pybind11::dict describe_uint8_kernel_args(const std::string& target_name, const std::string& drop,
                                          const at::Tensor& images, MakePlan make_plan, DropOwn drop_own,
                                          DescribeOwn describe_own) {
  return describe_kernel_args(
      target_name, drop, make_plan,
      [&](auto* a, const std::string& field) {
        drop_uint8_images(a, field);
        drop_own(a, field);
      },
      [&](const auto& plan) {
        pybind11::dict d;
        describe_uint8_images(&d, plan.args, images);
        describe_own(&d, plan.args);
        return d;
      });
}

// Describes into *d the geometry pointers of an op that gathers, crops and flips samples (ops'
// geometry_inputs.h): whether "offsets", "hflip", "vflip" and "rows" (args.g.rows) are set.
template <typename Args>
void describe_geometry(pybind11::dict* d, const Args& a) {
  (*d)["offsets"] = a.offsets != nullptr;
  (*d)["hflip"] = a.hflip != nullptr;
  (*d)["vflip"] = a.vflip != nullptr;
  (*d)["rows"] = a.g.rows != nullptr;
}

}  // namespace prefetch
