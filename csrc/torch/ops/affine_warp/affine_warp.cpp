// The op affine_warp, its own file: its schema (a fragment of the prefetch library), its plan (the
// arguments checked and turned into its kernel's, kernels' affine_warp/affine_warp.h, the output allocated),
// the completeness check of its kernel's arguments, its CPU registration, and its kernel-argument
// test hook. Its CUDA registration is affine_warp_cuda.cpp.
#include "ops/affine_warp/affine_warp_plan.h"

#include <torch/library.h>

#include "ops/cpu_registration.h"
#include "ops/kernel_args.h"
#include "ops/kernel_args_hook.h"

#include <cmath>

namespace py = pybind11;

namespace prefetch {

AffineWarpPlan plan_affine_warp(const at::Tensor& images, const at::Tensor& matrices, bool bilinear,
                                const std::optional<at::ArrayRef<double>>& fill, const OutputAllocator& allocate) {
  check_uint8_images("affine_warp", images, matrices, "matrices");
  const int64_t N = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  TORCH_CHECK(C >= 1 && C <= kernels::kWarpMaxChannels, "affine_warp: images must have 1 to ",
              kernels::kWarpMaxChannels, " channels, got C = ", C);
  TORCH_CHECK(H <= kernels::kWarpMaxSide && W <= kernels::kWarpMaxSide, "affine_warp: images must be at most ",
              kernels::kWarpMaxSide, " pixels a side, got H = ", H, ", W = ", W);
  TORCH_CHECK(matrices.scalar_type() == at::kFloat && matrices.dim() == 2 && matrices.size(0) == N &&
                  matrices.size(1) == kernels::kWarpMatrixFields,
              "affine_warp: matrices must be float32 [N, 6] = [", N, ", 6] (one map per image), got ",
              matrices.scalar_type(), " of shape ", shape_of(matrices));
  AffineWarpPlan plan;
  kernels::AffineWarpArgs& a = plan.args;
  if (fill.has_value()) {
    const auto values = *fill;
    TORCH_CHECK(values.size() == 1 || static_cast<int64_t>(values.size()) == C,
                "affine_warp: fill must have 1 value or one per channel (", C, "), got ", values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      TORCH_CHECK(std::isfinite(values[i]) && values[i] >= 0.0 && values[i] <= 255.0,
                  "affine_warp: fill[", i, "] must lie in [0, 255] for uint8 images, got ", values[i]);
    }
    a.has_fill = true;
    for (int64_t c = 0; c < C; ++c) a.fill[c] = static_cast<float>(values.size() == 1 ? values[0] : values[c]);
  }
  plan_uint8_output(&plan, "affine_warp", images, allocate);
  plan.matrices = matrices.contiguous();
  a.matrices = plan.matrices.const_data_ptr<float>();
  a.bilinear = bilinear;
  return plan;
}

std::vector<std::string> arg_problems(const AffineWarpPlan& plan, bool /*cuda*/) {
  Problems p;
  const kernels::AffineWarpArgs& a = plan.args;
  if (uint8_image_problems(&p, a, plan.out, a.matrices, plan.matrices, "matrices")) {
    p.require(a.C <= kernels::kWarpMaxChannels, "C: more channels than the fill holds");
  }
  return p.lines;
}

namespace {

at::Tensor affine_warp_cpu(const at::Tensor& images, const at::Tensor& matrices, bool bilinear,
                           const std::optional<at::ArrayRef<double>>& fill) {
  return run_cpu(plan_affine_warp(images, matrices, bilinear, fill, pooled_empty), &kernels::affine_warp_cpu,
                 [](const kernels::AffineWarpArgs& a) {
                   // A pixel costs a few dozen operations per channel: a few thousand pixels make a chunk.
                   return CpuSplit{a.N * a.H, grain_for(4096, a.W)};
                 });
}

py::dict affine_warp_args(const std::string& target, const at::Tensor& images, const at::Tensor& matrices, bool bilinear,
                  std::optional<std::vector<double>> fill,
                  const std::string& drop) {
  std::optional<at::ArrayRef<double>> fill_ref;
  if (fill.has_value()) fill_ref = at::ArrayRef<double>(*fill);
  return describe_uint8_kernel_args(
      target, drop, images, [&] { return plan_affine_warp(images, matrices, bilinear, fill_ref); },
      [](kernels::AffineWarpArgs* a, const std::string& field) {
        if (field == "matrices") a->matrices = nullptr;
      },
      [](py::dict* d, const kernels::AffineWarpArgs& a) {
        (*d)["fill"] = a.has_fill ? py::cast(std::vector<float>(a.fill, a.fill + a.C)) : py::none();
      });
}

void bind_hook(py::module_& m) {
  using namespace pybind11::literals;
  m.def("_affine_warp_kernel_args", &affine_warp_args, "target"_a, "images"_a, "matrices"_a,
        "bilinear"_a = false, "fill"_a = py::none(), "drop"_a = "",
        "Test hook: affine_warp's kernel arguments for target 'cpu' or 'cuda', described.");
}

const KernelArgsHook hook(&bind_hook);

}  // namespace

TORCH_LIBRARY_FRAGMENT(prefetch, m) {
  m.def(
      "affine_warp(Tensor images, Tensor matrices, bool bilinear=False, float[]? fill=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(prefetch, CPU, m) { m.impl("affine_warp", &affine_warp_cpu); }

}  // namespace prefetch
