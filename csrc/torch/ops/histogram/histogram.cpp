// The op histograms, its own file: its schema (a fragment of the prefetch library), its plan (the
// arguments checked and turned into its kernel's, kernels' histogram/histogram.h, the output allocated),
// the completeness check of its kernel's arguments, its CPU registration, and its kernel-argument
// test hook. Its CUDA registration is histogram_cuda.cpp.
#include "ops/histogram/histogram_plan.h"

#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "ops/cpu_registration.h"
#include "ops/kernel_args.h"
#include "ops/kernel_args_hook.h"

namespace py = pybind11;

namespace prefetch {

HistogramPlan plan_histogram(const at::Tensor& images) {
  TORCH_CHECK(images.scalar_type() == at::kByte && images.dim() == 4,
              "histograms: images must be uint8 [N, C, H, W], got ", images.scalar_type(), " of shape ",
              shape_of(images));
  const int64_t N = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  // The counts are int32, and a CUDA grid numbers a plane's rows in 32 bits.
  TORCH_CHECK(H * W < INT32_MAX, "histograms: an image's H * W must be below 2^31 (int32 counts), got H = ", H,
              ", W = ", W);
  HistogramPlan plan;
  plan.out = at::zeros({N, C, kernels::kHistogramBins}, images.options().dtype(at::kInt));
  kernels::HistogramArgs& a = plan.args;
  set_uint8_inputs(&a, images);
  a.out = plan.out.data_ptr<int32_t>();
  return plan;
}

std::vector<std::string> arg_problems(const HistogramPlan& plan, bool /*cuda*/) {
  Problems p;
  const kernels::HistogramArgs& a = plan.args;
  const at::Tensor& out = plan.out;
  if (!out.defined() || out.dim() != 3) {
    p.require(false, "out: the plan has no [N, C, 256] counts tensor");
    return p.lines;
  }
  p.same("N", a.N, out.size(0));
  p.same("C", a.C, out.size(1));
  p.same("bins", kernels::kHistogramBins, out.size(2));
  p.require(out.is_contiguous() && out.scalar_type() == at::kInt, "out: not contiguous int32 counts");
  p.require(out.numel() == 0 || a.out == out.data_ptr(), "out: not the counts tensor's data");
  p.require(out.numel() == 0 || a.H * a.W == 0 || a.images != nullptr, "images: unset");
  return p.lines;
}

namespace {

at::Tensor histograms_cpu(const at::Tensor& images) {
  return run_cpu(plan_histogram(images), &kernels::histogram_cpu, [](const kernels::HistogramArgs& a) {
    // By planes: each counts into its own tables; tens of thousands of values make one worth a thread.
    return CpuSplit{a.N * a.C, grain_for(32768, a.H * a.W)};
  });
}

py::dict histogram_args(const std::string& target, const at::Tensor& images,
                  const std::string& drop) {
  return describe_uint8_kernel_args(
      target, drop, images, [&] { return plan_histogram(images); },
      [](kernels::HistogramArgs* a, const std::string& field) {
        if (field == "C") a->C += 1;
      },
      [](py::dict*, const kernels::HistogramArgs&) {});
}

void bind_hook(py::module_& m) {
  using namespace pybind11::literals;
  m.def("_histogram_kernel_args", &histogram_args, "target"_a, "images"_a, "drop"_a = "",
        "Test hook: histograms' kernel arguments for target 'cpu' or 'cuda', described.");
}

const KernelArgsHook hook(&bind_hook);

}  // namespace

TORCH_LIBRARY_FRAGMENT(prefetch, m) {
  m.def(
      "histograms(Tensor images) -> Tensor");
}

TORCH_LIBRARY_IMPL(prefetch, CPU, m) { m.impl("histograms", &histograms_cpu); }

}  // namespace prefetch
