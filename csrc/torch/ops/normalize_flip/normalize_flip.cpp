// The op normalize_flip, its own file: its schema (a fragment of the prefetch library), its plan (the
// arguments checked and turned into its kernel's, kernels' normalize_flip/normalize_flip.h, the output allocated),
// the completeness check of its kernel's arguments, its CPU registration, and its kernel-argument
// test hook. Its CUDA registration is normalize_flip_cuda.cpp.
#include "ops/normalize_flip/normalize_flip_plan.h"

#include <torch/library.h>

#include "ops/cpu_registration.h"
#include "ops/kernel_args.h"
#include "ops/kernel_args_hook.h"
#include "normalize_flip/normalize_flip_thread_work.h"  // the CUDA launch split arg_problems checks

namespace py = pybind11;

namespace prefetch {

NormalizeFlipPlan plan_normalize_flip(const at::Tensor& images, at::ArrayRef<double> mean,
                                      at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                                      const std::optional<at::Tensor>& vflip,
                                      at::OptionalIntArrayRef crop,
                                      const std::optional<at::Tensor>& offsets, int64_t fill,
                                      at::ScalarType dtype, const std::string& layout,
                                      bool channels_last, const std::optional<at::Tensor>& indices,
                                      const OutputAllocator& allocate) {
  check_devices("normalize_flip", images, "images", hflip, vflip, offsets, indices);
  TORCH_CHECK(layout == "NHWC" || layout == "NCHW", "layout must be 'NHWC' or 'NCHW', got '",
              layout, "'");
  TORCH_CHECK(images.scalar_type() == at::kByte, "images must be uint8, got ", images.scalar_type());
  TORCH_CHECK(images.dim() == 4, "images must be 4-D ", layout == "NHWC" ? "[N, H, W, C]" : "[N, C, H, W]",
              " for layout='", layout, "', got shape ", shape_of(images));
  check_out_dtype("normalize_flip", dtype);
  TORCH_CHECK(fill >= 0 && fill <= 255, "fill must be a uint8 value in [0, 255], got ", fill);
  const bool nhwc = layout == "NHWC";
  const int64_t C = nhwc ? images.size(3) : images.size(1);
  const int64_t H = nhwc ? images.size(1) : images.size(2);
  const int64_t W = nhwc ? images.size(2) : images.size(3);
  TORCH_CHECK(C >= 1, "images must have at least one channel, got shape ", shape_of(images));
  TORCH_CHECK(static_cast<int64_t>(mean.size()) == C, "mean has ", mean.size(),
              " values but the images have C = ", C, " channels");
  TORCH_CHECK(static_cast<int64_t>(std.size()) == C, "std has ", std.size(),
              " values but the images have C = ", C, " channels");

  check_mean_std(mean, std);

  NormalizeFlipPlan plan;
  plan.affine = affine_of(mean, std);
  plan.geometry = geometry_inputs(images.size(0), H, W, hflip, vflip, crop, offsets, indices);
  kernels::Geometry& g = plan.geometry.g;
  const int64_t N = g.N;
  g.C = C;
  g.sN = images.stride(0);
  g.sC = nhwc ? images.stride(3) : images.stride(1);
  g.sH = nhwc ? images.stride(1) : images.stride(2);
  g.sW = nhwc ? images.stride(2) : images.stride(3);

  checked_output_bytes("normalize_flip", {N, C, g.h, g.w}, dtype);
  plan.out = allocate({N, C, g.h, g.w}, images.options().dtype(dtype),
                      channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
  kernels::NormalizeFlipArgs& a = plan.args;
  a.images = images.const_data_ptr<uint8_t>();
  a.g = g;
  a.offsets = plan.geometry.offsets_ptr();
  a.hflip = plan.geometry.hflip_ptr();
  a.vflip = plan.geometry.vflip_ptr();
  a.fill = static_cast<uint8_t>(fill);
  set_output(&a, plan.out, dtype);
  return plan;
}

std::vector<std::string> arg_problems(const NormalizeFlipPlan& plan, bool cuda) {
  Problems p;
  const kernels::NormalizeFlipArgs& a = plan.args;
  const kernels::Geometry& g = a.g;
  check_image_output(&p, a, plan.out, g.N, g.C, g.h, g.w, plan.affine.size(), cuda);
  const bool reads = plan.out.defined() && plan.out.numel() > 0 && g.H > 0 && g.W > 0 && g.sources > 0;
  p.require(!reads || a.images != nullptr, "images: unset");
  p.require(points_at(a.offsets, plan.geometry.offsets), "offsets: not the plan's offsets");
  p.require(points_at(a.hflip, plan.geometry.hflip), "hflip: not the plan's hflip");
  p.require(points_at(a.vflip, plan.geometry.vflip), "vflip: not the plan's vflip");
  p.require(points_at(g.rows, plan.geometry.rows), "g.rows: not the plan's gather indices");
  p.require(!plan.geometry.rows.defined() || plan.geometry.rows.numel() == g.N,
            "g.rows: not one index per output sample");
  if (cuda && p.lines.empty()) {
    std::vector<kernels::NormalizeFlipLaunch> launches;
    const std::string why = launch_problem("normalize_flip", kernels::plan_normalize_flip_launches(a, &launches),
                                           g.C, g.h, g.w);
    p.require(why.empty(), why);
  }
  return p.lines;
}

namespace {

at::Tensor normalize_flip_cpu(const at::Tensor& images, at::ArrayRef<double> mean,
                              at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                              const std::optional<at::Tensor>& vflip, at::OptionalIntArrayRef crop,
                              const std::optional<at::Tensor>& offsets, int64_t fill,
                              at::ScalarType dtype, c10::string_view layout, bool channels_last,
                              const std::optional<at::Tensor>& indices) {
  return run_cpu(plan_normalize_flip(images, mean, std, hflip, vflip, crop, offsets, fill, dtype,
                                     std::string(layout), channels_last, indices, pooled_empty),
                 &kernels::normalize_flip_cpu, [](const kernels::NormalizeFlipArgs& a) {
                   return CpuSplit{a.g.N * a.g.h, grain_for(32768, a.g.w * a.g.C)};
                 });
}

py::dict normalize_flip_args(const std::string& target, const at::Tensor& images, std::vector<double> mean,
                             std::vector<double> std, std::optional<at::Tensor> hflip,
                             std::optional<at::Tensor> vflip, std::optional<std::vector<int64_t>> crop,
                             std::optional<at::Tensor> offsets, int64_t fill, at::ScalarType dtype,
                             const std::string& layout, bool channels_last, std::optional<at::Tensor> indices,
                             const std::string& drop) {
  at::OptionalIntArrayRef crop_ref = crop.has_value() ? at::OptionalIntArrayRef(*crop) : std::nullopt;
  return describe_kernel_args(
      target, drop,
      [&] {
        return plan_normalize_flip(images, mean, std, hflip, vflip, crop_ref, offsets, fill, dtype, layout,
                                   channels_last, indices);
      },
      [](kernels::NormalizeFlipArgs* a, const std::string& field) {
        drop_common(a, field);
        if (field == "images") a->images = nullptr;
        if (field == "offsets") a->offsets = nullptr;
        if (field == "g.rows") a->g.rows = nullptr;
      },
      [&](const NormalizeFlipPlan& plan) {
        const kernels::NormalizeFlipArgs& a = plan.args;
        py::dict d;
        d["images"] = a.images == images.const_data_ptr();
        describe_geometry(&d, a);
        d["sizes"] = std::vector<int64_t>{a.g.N, a.g.C, a.g.h, a.g.w};
        d["strides"] = std::vector<int64_t>{a.oN, a.oC, a.oY, a.oX};
        return d;
      });
}

void bind_hook(py::module_& m) {
  using namespace pybind11::literals;
  m.def("_normalize_flip_kernel_args", &normalize_flip_args, "target"_a, "images"_a, "mean"_a, "std"_a,
        "hflip"_a = py::none(), "vflip"_a = py::none(), "crop"_a = py::none(), "offsets"_a = py::none(),
        "fill"_a = 0, "dtype"_a = at::kFloat, "layout"_a = "NHWC", "channels_last"_a = false,
        "indices"_a = py::none(), "drop"_a = "",
        "Test hook: normalize_flip's kernel arguments for target 'cpu' or 'cuda', described.");
}

const KernelArgsHook hook(&bind_hook);

}  // namespace

TORCH_LIBRARY_FRAGMENT(prefetch, m) {
  m.def(
      "normalize_flip(Tensor images, float[] mean, float[] std, Tensor? hflip=None, "
      "Tensor? vflip=None, int[]? crop=None, Tensor? offsets=None, int fill=0, "
      "ScalarType dtype=float, str layout=\"NHWC\", bool channels_last=False, "
      "Tensor? indices=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(prefetch, CPU, m) { m.impl("normalize_flip", &normalize_flip_cpu); }

}  // namespace prefetch
