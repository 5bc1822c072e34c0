// The one place where an op's plan (ops/<op>/<op>_plan.h) becomes its kernel's complete arguments,
// for every backend: complete_args, one template for every op. A registration adds only what is its
// own: the CPU one (cpu_registration.h) its thread split; the CUDA one (cuda_registration.h) its
// device guard, its stream, and, as a KernelTarget's `upload`, the copy to the device of the
// per-channel constants that do not fit in the kernel's arguments.
//
// Why it exists: a CUDA registration that carried its own copy of this assembly could leave one
// pointer unset, a certain crash at the first batch that no machine without a GPU could see. The
// assembly runs in code the CPU build compiles, the completeness check runs before every launch on
// both backends (a forgotten field is an error naming it, never a crash), and the CPU tests
// assemble the CUDA arguments with a stand-in upload (tests/ops/test_kernel_args.py).
//
// What an op's plan gives the template: `static constexpr const char* kName` (the op's name in
// errors), `args` (its kernel's arguments), `out`, optionally `affine` (per-channel constants:
// bound for the target here), and an overload of
//   std::vector<std::string> arg_problems(const <Op>Plan& plan, bool cuda);
// in namespace prefetch: what is wrong with the arguments for a kernel on that target (empty:
// complete; every pointer the kernel reads is set, every size and stride agrees with the output,
// and the launch can be numbered, as the CUDA kernels number their threads in 32 bits).
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/affine_table.h"
#include "ops/plan_common.h"  // out_dtype

namespace prefetch {

struct KernelTarget {
  bool cuda = false;
  // For a CUDA target: the constants copied to the kernel's device, in a tensor that holds them
  // until the kernel has read them. Called only for more than kernels::kInlineChannels channels
  // (fewer travel by value in the launch).
  std::function<at::Tensor(const std::vector<kernels::Affine>&)> upload;
};

inline KernelTarget cpu_target() { return KernelTarget{}; }

// Collects problems as readable lines: "<field>: <what is wrong>".
class Problems {
 public:
  void require(bool ok, const std::string& what) {
    if (!ok) lines.push_back(what);
  }
  template <class T>
  void same(const char* field, T got, T expected) {
    if (got != expected) lines.push_back(std::string(field) + " is " + std::to_string(got) +
                                         ", the output says " + std::to_string(expected));
  }
  std::vector<std::string> lines;
};

// The per-channel constants, as every backend reads them: the host table (the CPU kernels read it;
// a CUDA launcher passes up to kInlineChannels of it by value) and, for a CUDA kernel with more
// channels, the device table the target's upload returns (returned, to be kept until the launch).
at::Tensor bind_constants(const std::vector<kernels::Affine>& affine, const KernelTarget& target,
                          const kernels::Affine** host, const kernels::Affine** device);

// A table argument as the plan holds it: null when the plan has none, the tensor's data when it
// has elements (an empty tensor's pointer may be null: no thread reads it).
bool points_at(const void* ptr, const at::Tensor& t);

// Throws a RuntimeError naming `op`, the target and every problem; nothing when there is none.
void throw_problems(const char* op, const std::vector<std::string>& problems, bool cuda);

// Empty when `planned`; else why the CUDA launch of one sample's C x h x w output cannot be
// numbered in 32 bits (common/launch_split.h).
std::string launch_problem(const char* op, bool planned, int64_t C, int64_t h, int64_t w);

// The checks every image op's float output shares.
template <typename Args>
void check_image_output(Problems* p, const Args& a, const at::Tensor& out, int64_t N, int64_t C,
                        int64_t h, int64_t w, size_t affine_count, bool cuda) {
  if (!out.defined() || out.dim() != 4) {
    p->require(false, "out: the plan has no [N, C, h, w] output tensor");
    return;
  }
  p->same("N", N, out.size(0));
  p->same("C", C, out.size(1));
  p->same("h", h, out.size(2));
  p->same("w", w, out.size(3));
  p->same("oN", a.oN, out.stride(0));
  p->same("oC", a.oC, out.stride(1));
  p->same("oY", a.oY, out.stride(2));
  p->same("oX", a.oX, out.stride(3));
  p->require(out.numel() == 0 || a.out == out.data_ptr(), "out: not the output tensor's data");
  p->require(a.dtype == out_dtype(out.scalar_type()), "dtype: not the output tensor's dtype");
  p->require(static_cast<int64_t>(affine_count) == C, "affine: the plan's table has " +
                                                          std::to_string(affine_count) + " channels, C = " +
                                                          std::to_string(C));
  const bool writes = out.numel() > 0;
  p->require(!writes || a.affine != nullptr, "affine: unset (every backend reads the host table)");
  p->require(!writes || !cuda || C <= kernels::kInlineChannels || a.affine_device != nullptr,
             "affine_device: unset for " + std::to_string(C) + " channels (a CUDA kernel reads more than " +
                 std::to_string(kernels::kInlineChannels) + " from the device)");
}

// What the ops over uint8 [N, C, H, W] images share (set_uint8_images in plan_common.h):
// their output, the images, and the per-image tensor the plan holds (`held`, read through `arg`;
// `field` null: not checked here). CUDA launches are split by images (common/plane_rows.h): no
// launch limit to check. False when there is no output to check against (the rest is then moot).
template <typename Args>
bool uint8_image_problems(Problems* p, const Args& a, const at::Tensor& out, const void* arg,
                          const at::Tensor& held, const char* field) {
  if (!out.defined() || out.dim() != 4) {
    p->require(false, "out: the plan has no [N, C, H, W] output tensor");
    return false;
  }
  p->same("N", a.N, out.size(0));
  p->same("C", a.C, out.size(1));
  p->same("H", a.H, out.size(2));
  p->same("W", a.W, out.size(3));
  p->require(out.is_contiguous(), "out: not contiguous (the kernels write [N, C, H, W] rows)");
  p->require(out.numel() == 0 || a.out == out.data_ptr(), "out: not the output tensor's data");
  const bool writes = out.numel() > 0;
  p->require(!writes || a.images != nullptr, "images: unset");
  if (field != nullptr) {  // (null: the caller checks its tensor itself)
    p->require(!writes || (arg != nullptr && arg == held.const_data_ptr()),
               std::string(field) + ": not the plan's " + field);
  }
  return true;
}

// Whether a plan carries per-channel constants (a member `affine`) to bind for the target.
template <typename Plan, typename = void>
struct HasConstants : std::false_type {};
template <typename Plan>
struct HasConstants<Plan, std::void_t<decltype(std::declval<Plan&>().affine)>> : std::true_type {};

// Completes plan->args for `target` and checks them (arg_problems: a RuntimeError naming every
// problem); returns what the kernel reads that the plan does not hold (the uploaded constants, or
// an undefined tensor), to be kept until the launch has been enqueued.
template <typename Plan>
at::Tensor complete_args(Plan* plan, const KernelTarget& target) {
  at::Tensor keep;
  if constexpr (HasConstants<Plan>::value) {
    keep = bind_constants(plan->affine, target, &plan->args.affine, &plan->args.affine_device);
  }
  throw_problems(Plan::kName, arg_problems(*plan, target.cuda), target.cuda);
  return keep;
}

}  // namespace prefetch
