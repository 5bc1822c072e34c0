// The op sharpness, its own file: its schema (a fragment of the prefetch library), its plan (the
// arguments checked and turned into its kernel's, kernels' sharpness/sharpness.h, the output allocated),
// the completeness check of its kernel's arguments, its CPU registration, and its kernel-argument
// test hook. Its CUDA registration is sharpness_cuda.cpp.
#include "ops/sharpness/sharpness_plan.h"

#include <torch/library.h>

#include "ops/cpu_registration.h"
#include "ops/kernel_args.h"
#include "ops/kernel_args_hook.h"

namespace py = pybind11;

namespace prefetch {

SharpnessPlan plan_sharpness(const at::Tensor& images, const at::Tensor& factors, bool pillow,
                             const OutputAllocator& allocate) {
  check_uint8_images("sharpness", images, factors, "factors");
  const int64_t N = images.size(0), C = images.size(1), H = images.size(2);
  TORCH_CHECK(factors.scalar_type() == at::kDouble && factors.dim() == 1 && factors.size(0) == N,
              "sharpness: factors must be float64 [N] = [", N, "] (one per image), got ", factors.scalar_type(),
              " of shape ", shape_of(factors));
  // A CUDA launch numbers one image's rows (C * H) in 32 bits.
  TORCH_CHECK(C * H < INT32_MAX, "sharpness: an image's C * H must be below 2^31, got C = ", C, ", H = ", H);
  SharpnessPlan plan;
  plan_uint8_output(&plan, "sharpness", images, allocate);
  plan.values = factors.contiguous();
  plan.args.factors = plan.values.const_data_ptr<double>();
  plan.args.pillow = pillow;
  return plan;
}

std::vector<std::string> arg_problems(const SharpnessPlan& plan, bool /*cuda*/) {
  Problems p;
  uint8_image_problems(&p, plan.args, plan.out, plan.args.factors, plan.values, "factors");
  return p.lines;
}

namespace {

at::Tensor sharpness_cpu(const at::Tensor& images, const at::Tensor& factors, bool pillow) {
  return run_cpu(plan_sharpness(images, factors, pillow, pooled_empty), &kernels::sharpness_cpu,
                 [](const kernels::SharpnessArgs& a) {
                   // A row is W values of a 3x3 sum and a blend: a few thousand values make a chunk.
                   return CpuSplit{a.N * a.C * a.H, grain_for(8192, a.W)};
                 });
}

py::dict sharpness_args(const std::string& target, const at::Tensor& images, const at::Tensor& factors,
                  const std::string& drop) {
  return describe_uint8_kernel_args(
      target, drop, images, [&] { return plan_sharpness(images, factors, false); },
      [](kernels::SharpnessArgs* a, const std::string& field) {
        if (field == "factors") a->factors = nullptr;
      },
      [](py::dict*, const kernels::SharpnessArgs&) {});
}

void bind_hook(py::module_& m) {
  using namespace pybind11::literals;
  m.def("_sharpness_kernel_args", &sharpness_args, "target"_a, "images"_a, "factors"_a, "drop"_a = "",
        "Test hook: sharpness's kernel arguments for target 'cpu' or 'cuda', described.");
}

const KernelArgsHook hook(&bind_hook);

}  // namespace

TORCH_LIBRARY_FRAGMENT(prefetch, m) {
  m.def(
      "sharpness(Tensor images, Tensor factors, bool pillow=False) -> Tensor");
}

TORCH_LIBRARY_IMPL(prefetch, CPU, m) { m.impl("sharpness", &sharpness_cpu); }

}  // namespace prefetch
