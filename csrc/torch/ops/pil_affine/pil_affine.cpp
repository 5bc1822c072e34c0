// The op pil_affine, its own file: its schema (a fragment of the prefetch library), its plan (the
// arguments checked and turned into its kernel's, kernels' pil_affine/pil_affine.h, the output
// allocated), the completeness check of its kernel's arguments, its CPU registration, and its
// kernel-argument test hook. Its CUDA registration is pil_affine_cuda.cpp.
#include "ops/pil_affine/pil_affine_plan.h"

#include <torch/library.h>

#include "ops/cpu_registration.h"
#include "ops/kernel_args.h"
#include "ops/kernel_args_hook.h"

namespace py = pybind11;

namespace prefetch {

PilAffinePlan plan_pil_affine(const at::Tensor& images, const at::Tensor& matrices, bool bicubic,
                              at::IntArrayRef fill, const OutputAllocator& allocate) {
  check_uint8_images("pil_affine", images, matrices, "matrices");
  const int64_t N = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  TORCH_CHECK(C >= 1 && C <= kernels::kPilAffineMaxChannels, "pil_affine: images must have 1 to ",
              kernels::kPilAffineMaxChannels, " channels, got C = ", C);
  TORCH_CHECK(H <= kernels::kPilAffineMaxSide && W <= kernels::kPilAffineMaxSide, "pil_affine: images must be at most ",
              kernels::kPilAffineMaxSide, " pixels a side, got H = ", H, ", W = ", W);
  TORCH_CHECK(matrices.scalar_type() == at::kDouble && matrices.dim() == 2 && matrices.size(0) == N &&
                  matrices.size(1) == kernels::kPilAffineMatrixFields,
              "pil_affine: matrices must be float64 [N, 6] = [", N, ", 6] (Pillow's coefficients, one map per ",
              "image), got ", matrices.scalar_type(), " of shape ", shape_of(matrices));
  TORCH_CHECK(fill.size() == 1 || static_cast<int64_t>(fill.size()) == C,
              "pil_affine: fill must have 1 value or one per channel (", C, "), got ", fill.size());
  for (size_t i = 0; i < fill.size(); ++i) {
    TORCH_CHECK(fill[i] >= 0 && fill[i] <= 255, "pil_affine: fill[", i, "] must lie in [0, 255] for uint8 images, got ",
                fill[i]);
  }
  PilAffinePlan plan;
  kernels::PilAffineArgs& a = plan.args;
  for (int64_t c = 0; c < C && c < kernels::kPilAffineMaxChannels; ++c) a.fill[c] = static_cast<uint8_t>(fill.size() == 1 ? fill[0] : fill[c]);
  plan_uint8_output(&plan, "pil_affine", images, allocate);
  plan.matrices = matrices.contiguous();
  a.matrices = plan.matrices.const_data_ptr<double>();
  a.bicubic = bicubic;
  return plan;
}

std::vector<std::string> arg_problems(const PilAffinePlan& plan, bool /*cuda*/) {
  Problems p;
  const kernels::PilAffineArgs& a = plan.args;
  if (uint8_image_problems(&p, a, plan.out, a.matrices, plan.matrices, "matrices")) {
    p.require(a.C <= kernels::kPilAffineMaxChannels, "C: more channels than the fill holds");
  }
  return p.lines;
}

namespace {

at::Tensor pil_affine_cpu(const at::Tensor& images, const at::Tensor& matrices, bool bicubic, at::IntArrayRef fill) {
  return run_cpu(plan_pil_affine(images, matrices, bicubic, fill, pooled_empty), &kernels::pil_affine_cpu,
                 [](const kernels::PilAffineArgs& a) {
                   // A pixel costs a hundred or so float64 operations per channel (bicubic).
                   return CpuSplit{a.N * a.H, grain_for(2048, a.W)};
                 });
}

py::dict pil_affine_args(const std::string& target, const at::Tensor& images, const at::Tensor& matrices, bool bicubic,
                         std::vector<int64_t> fill, const std::string& drop) {
  return describe_uint8_kernel_args(
      target, drop, images, [&] { return plan_pil_affine(images, matrices, bicubic, fill); },
      [](kernels::PilAffineArgs* a, const std::string& field) {
        if (field == "matrices") a->matrices = nullptr;
      },
      [](py::dict* d, const kernels::PilAffineArgs& a) {
        (*d)["fill"] = py::cast(std::vector<int>(a.fill, a.fill + a.C));
        (*d)["bicubic"] = a.bicubic;
      });
}

void bind_hook(py::module_& m) {
  using namespace pybind11::literals;
  m.def("_pil_affine_kernel_args", &pil_affine_args, "target"_a, "images"_a, "matrices"_a, "bicubic"_a = false,
        "fill"_a = std::vector<int64_t>{0}, "drop"_a = "",
        "Test hook: pil_affine's kernel arguments for target 'cpu' or 'cuda', described.");
}

const KernelArgsHook hook(&bind_hook);

}  // namespace

TORCH_LIBRARY_FRAGMENT(prefetch, m) {
  m.def("pil_affine(Tensor images, Tensor matrices, bool bicubic, int[] fill) -> Tensor");
}

TORCH_LIBRARY_IMPL(prefetch, CPU, m) { m.impl("pil_affine", &pil_affine_cpu); }

}  // namespace prefetch
