// The op gaussian_blur, its own file: its schema (a fragment of the prefetch library), its plan
// (the arguments checked and turned into its kernel's, kernels' gaussian_blur/gaussian_blur.h, the
// output allocated), the completeness check of its kernel's arguments, its CPU registration, and
// its kernel-argument test hook. Its CUDA registration is gaussian_blur_cuda.cpp.
#include "ops/gaussian_blur/gaussian_blur_plan.h"

#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "ops/cpu_registration.h"
#include "ops/kernel_args.h"
#include "ops/kernel_args_hook.h"

namespace py = pybind11;

namespace prefetch {

namespace {

// One of the 1-D kernels: float32 [N, k] with k odd and k / 2 below the image's side (torch's
// reflect padding must be smaller than the side it pads; an empty side takes any k).
void check_taps(const at::Tensor& taps, const char* name, int64_t N, int64_t side, const char* side_name) {
  TORCH_CHECK(taps.scalar_type() == at::kFloat && taps.dim() == 2 && taps.size(0) == N,
              "gaussian_blur: ", name, " must be float32 [N, k] with N = ", N, " (one kernel per image), got ",
              taps.scalar_type(), " of shape ", shape_of(taps));
  const int64_t k = taps.size(1);
  TORCH_CHECK(k >= 1 && k % 2 == 1, "gaussian_blur: ", name, "'s kernel size must be odd and positive, got ", k);
  TORCH_CHECK(side == 0 || N == 0 || k / 2 < side, "gaussian_blur: ", name, "'s kernel size ", k,
              " pads each side by ", k / 2, ", which reflect padding allows only below the images' ", side_name,
              " (", side, "): use a kernel size of at most ", 2 * side - 1);
}

}  // namespace

GaussianBlurPlan plan_gaussian_blur(const at::Tensor& images, const at::Tensor& kernel_x, const at::Tensor& kernel_y,
                                    bool row_buffer, const OutputAllocator& allocate) {
  check_uint8_images("gaussian_blur", images, kernel_x, "kernel_x");
  check_uint8_images("gaussian_blur", images, kernel_y, "kernel_y");
  const int64_t N = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  check_taps(kernel_x, "kernel_x", N, W, "width");
  check_taps(kernel_y, "kernel_y", N, H, "height");
  // A CUDA launch numbers one image's rows (C * H) in 32 bits.
  TORCH_CHECK(C * H < INT32_MAX, "gaussian_blur: an image's C * H must be below 2^31, got C = ", C, ", H = ", H);
  GaussianBlurPlan plan;
  plan_uint8_output(&plan, "gaussian_blur", images, allocate);
  plan.kernel_x = kernel_x.contiguous();
  plan.kernel_y = kernel_y.contiguous();
  plan.args.kernel_x = plan.kernel_x.const_data_ptr<float>();
  plan.args.kernel_y = plan.kernel_y.const_data_ptr<float>();
  plan.args.kx = kernel_x.size(1);
  plan.args.ky = kernel_y.size(1);
  if (row_buffer) {
    checked_output_bytes("gaussian_blur", {N, C, H, W}, at::kFloat);
    plan.rows = at::empty({N, C, H, W}, images.options().dtype(at::kFloat));
    plan.args.rows = plan.rows.data_ptr<float>();
  }
  return plan;
}

std::vector<std::string> arg_problems(const GaussianBlurPlan& plan, bool cuda) {
  Problems p;
  const auto& a = plan.args;
  if (!uint8_image_problems(&p, a, plan.out, a.kernel_x, plan.kernel_x, "kernel_x")) return p.lines;
  const bool writes = plan.out.numel() > 0;
  p.require(!writes || (a.kernel_y != nullptr && a.kernel_y == plan.kernel_y.const_data_ptr()),
            "kernel_y: not the plan's kernel_y");
  p.same("kx", a.kx, plan.kernel_x.size(1));
  p.same("ky", a.ky, plan.kernel_y.size(1));
  if (cuda) {  // the row pass's buffer: the output's shape in float32
    p.require(!writes || (plan.rows.defined() && a.rows == plan.rows.data_ptr() &&
                          plan.rows.sizes() == plan.out.sizes() && plan.rows.is_contiguous() &&
                          plan.rows.scalar_type() == at::kFloat),
              "rows: not a contiguous float32 buffer of the output's shape");
  }
  return p.lines;
}

namespace {

at::Tensor gaussian_blur_cpu(const at::Tensor& images, const at::Tensor& kernel_x, const at::Tensor& kernel_y) {
  return run_cpu(plan_gaussian_blur(images, kernel_x, kernel_y, /*row_buffer=*/false, pooled_empty),
                 &kernels::gaussian_blur_cpu, [](const kernels::GaussianBlurArgs& a) {
                   // A row costs W * (kx + ky) multiply-adds: a chunk of a few hundred thousand.
                   return CpuSplit{a.N * a.C * a.H, grain_for(1 << 18, a.W * (a.kx + a.ky))};
                 });
}

py::dict gaussian_blur_args(const std::string& target, const at::Tensor& images, const at::Tensor& kernel_x,
                            const at::Tensor& kernel_y, const std::string& drop) {
  return describe_uint8_kernel_args(
      target, drop, images, [&] { return plan_gaussian_blur(images, kernel_x, kernel_y, target == "cuda"); },
      [](kernels::GaussianBlurArgs* a, const std::string& field) {
        if (field == "kernel_x") a->kernel_x = nullptr;
        if (field == "kernel_y") a->kernel_y = nullptr;
        if (field == "rows") a->rows = nullptr;
        if (field == "kx") a->kx += 2;
      },
      [](py::dict* d, const kernels::GaussianBlurArgs& a) {
        (*d)["kx"] = a.kx;
        (*d)["ky"] = a.ky;
        (*d)["rows"] = a.rows != nullptr;
      });
}

void bind_hook(py::module_& m) {
  using namespace pybind11::literals;
  m.def("_gaussian_blur_kernel_args", &gaussian_blur_args, "target"_a, "images"_a, "kernel_x"_a, "kernel_y"_a,
        "drop"_a = "", "Test hook: gaussian_blur's kernel arguments for target 'cpu' or 'cuda', described.");
}

const KernelArgsHook hook(&bind_hook);

}  // namespace

TORCH_LIBRARY_FRAGMENT(prefetch, m) {
  m.def(
      "gaussian_blur(Tensor images, Tensor kernel_x, Tensor kernel_y) -> Tensor");
}

TORCH_LIBRARY_IMPL(prefetch, CPU, m) { m.impl("gaussian_blur", &gaussian_blur_cpu); }

}  // namespace prefetch
