// The op color_jitter, its own file: its schema (a fragment of the prefetch library), its plan (the
// arguments checked and turned into its kernel's, kernels' color_jitter/color_jitter.h, the output allocated),
// the completeness check of its kernel's arguments, its CPU registration, and its kernel-argument
// test hook. Its CUDA registration is color_jitter_cuda.cpp.
#include "ops/color_jitter/color_jitter_plan.h"

#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "ops/cpu_registration.h"
#include "ops/kernel_args.h"
#include "ops/kernel_args_hook.h"

#include <cmath>
#include <string>

namespace py = pybind11;

namespace prefetch {

namespace {

// The names of kernels::ColorStep's codes, in order (prefetch.ops.COLOR_STEPS).
const char* const kColorStepNames[kernels::kColorSteps] = {"identity", "brightness", "contrast",
                                                           "saturation", "hue", "pillow_color"};

std::string color_step_names() {
  std::string names;
  for (const char* name : kColorStepNames) names += (names.empty() ? "" : ", ") + std::string(name);
  return names;
}

// Steps and factors in host memory (the CPU op's) are checked here, value by value, at no cost to a
// device: so every caller of the CPU op — the Python wrapper, torch.ops, torch.compile's graphs,
// which must not branch on tensor values in Python — gets the same ValueError. Steps on a device
// are used unread (reading them would synchronise): an unknown code is then a step that does
// nothing, and a factor out of range gives torchvision's arithmetic on it.
void check_host_color_steps(const at::Tensor& steps, const at::Tensor& factors) {
  if (!steps.device().is_cpu() || !factors.device().is_cpu()) return;
  const at::Tensor s = steps.contiguous(), f = factors.contiguous();
  const int64_t* code = s.const_data_ptr<int64_t>();
  const double* factor = f.const_data_ptr<double>();
  const int64_t K = s.size(1);
  for (int64_t i = 0; i < s.numel(); ++i) {
    TORCH_CHECK_VALUE(code[i] >= 0 && code[i] < kernels::kColorSteps, "prefetch: color_jitter's step codes are 0 to ",
                      kernels::kColorSteps - 1, " (", color_step_names(), "); image ", i / K, ", step ", i % K,
                      " is ", code[i]);
  }
  for (int64_t i = 0; i < s.numel(); ++i) {
    // identity: its factor is not read; pillow_color: any factor, as Pillow's enhance takes any
    if (code[i] == kernels::kColorIdentity || code[i] == kernels::kColorPillowColor) continue;
    const double v = factor[i];
    const bool hue = code[i] == kernels::kColorHue;
    TORCH_CHECK_VALUE(std::isfinite(v) && (hue ? (v >= -0.5 && v <= 0.5) : v >= 0), "prefetch: color_jitter's ",
                      kColorStepNames[code[i]], " factor of image ", i / K, " (step ", i % K, ") is ", v,
                      "; brightness, contrast and saturation factors must be finite and at least 0, hue factors "
                      "in [-0.5, 0.5]");
  }
}

}  // namespace

ColorJitterPlan plan_color_jitter(const at::Tensor& images, const at::Tensor& steps, const at::Tensor& factors,
                                  const OutputAllocator& allocate) {
  check_uint8_images("color_jitter", images, steps, "steps");
  check_uint8_images("color_jitter", images, factors, "factors");
  const int64_t N = images.size(0), C = images.size(1), H = images.size(2);
  TORCH_CHECK(C == 1 || C == 3, "color_jitter: images must have 1 or 3 channels, got C = ", C);
  TORCH_CHECK(steps.scalar_type() == at::kLong && steps.dim() == 2 && steps.size(0) == N,
              "color_jitter: steps must be int64 [N, K] = [", N, ", K] (each image's chain), got ",
              steps.scalar_type(), " of shape ", shape_of(steps));
  const int64_t K = steps.size(1);
  TORCH_CHECK(factors.scalar_type() == at::kDouble && factors.dim() == 2 && factors.size(0) == N &&
                  factors.size(1) == K,
              "color_jitter: factors must be float64 [N, K] = [", N, ", ", K, "] (one per step), got ",
              factors.scalar_type(), " of shape ", shape_of(factors));
  check_host_color_steps(steps, factors);
  // A CUDA launch numbers an image's rows (H) in 32 bits.
  TORCH_CHECK(H < INT32_MAX, "color_jitter: images must be below 2^31 rows, got H = ", H);
  ColorJitterPlan plan;
  plan_uint8_output(&plan, "color_jitter", images, allocate);
  plan.steps = steps.contiguous();
  plan.factors = factors.contiguous();
  plan.grey_sums = at::zeros({N, K}, images.options().dtype(at::kLong));
  kernels::ColorJitterArgs& a = plan.args;
  a.steps = plan.steps.const_data_ptr<int64_t>();
  a.factors = plan.factors.const_data_ptr<double>();
  a.K = K;
  a.grey_sums = plan.grey_sums.data_ptr<int64_t>();
  return plan;
}

std::vector<std::string> arg_problems(const ColorJitterPlan& plan, bool /*cuda*/) {
  Problems p;
  const kernels::ColorJitterArgs& a = plan.args;
  // (the steps' pointer is checked below, with the factors')
  if (uint8_image_problems(&p, a, plan.out, nullptr, at::Tensor(), nullptr)) {
    // A chain of no step (K = 0: RandAugment's num_ops=0, a table with no column) copies the image;
    // its empty tables have no data to point at.
    const bool reads = plan.out.numel() > 0 && a.K > 0;
    p.require(!reads || (a.steps != nullptr && a.steps == plan.steps.const_data_ptr()),
              "steps: not the plan's steps");
    p.require(a.C == 1 || a.C == 3, "C: " + std::to_string(a.C) + " channels (the chains take 1 or 3)");
    p.require(!reads || (a.factors != nullptr && a.factors == plan.factors.const_data_ptr()),
              "factors: not the plan's factors");
    p.require(!reads || (a.grey_sums != nullptr && a.grey_sums == plan.grey_sums.const_data_ptr()),
              "grey_sums: not the plan's grey sums");
    p.same("K", a.K, plan.steps.size(1));
    p.same("K", a.K, plan.factors.size(1));
    p.same("grey_sums' K", a.K, plan.grey_sums.size(1));
  }
  return p.lines;
}

namespace {

at::Tensor color_jitter_cpu(const at::Tensor& images, const at::Tensor& steps, const at::Tensor& factors) {
  return run_cpu(plan_color_jitter(images, steps, factors, pooled_empty), &kernels::color_jitter_cpu,
                 [](const kernels::ColorJitterArgs& a) {
                   // By images: an image's Contrast steps need its whole grey sum before its pixels.
                   return CpuSplit{a.N, 1};
                 });
}

py::dict color_jitter_args(const std::string& target, const at::Tensor& images, const at::Tensor& steps, const at::Tensor& factors,
                  const std::string& drop) {
  return describe_uint8_kernel_args(
      target, drop, images, [&] { return plan_color_jitter(images, steps, factors); },
      [](kernels::ColorJitterArgs* a, const std::string& field) {
        if (field == "steps") a->steps = nullptr;
        if (field == "factors") a->factors = nullptr;
        if (field == "grey_sums") a->grey_sums = nullptr;
        if (field == "K") a->K += 1;
      },
      [](py::dict* d, const kernels::ColorJitterArgs& a) { (*d)["K"] = a.K; });
}

void bind_hook(py::module_& m) {
  using namespace pybind11::literals;
  m.def("_color_jitter_kernel_args", &color_jitter_args, "target"_a, "images"_a, "steps"_a, "factors"_a,
        "drop"_a = "", "Test hook: color_jitter's kernel arguments for target 'cpu' or 'cuda', described.");
}

const KernelArgsHook hook(&bind_hook);

}  // namespace

TORCH_LIBRARY_FRAGMENT(prefetch, m) {
  m.def(
      "color_jitter(Tensor images, Tensor steps, Tensor factors) -> Tensor");
}

TORCH_LIBRARY_IMPL(prefetch, CPU, m) { m.impl("color_jitter", &color_jitter_cpu); }

}  // namespace prefetch
