// The op flip_crop, its own file: its schema (a fragment of the prefetch library), its plan (the
// arguments checked and turned into its kernel's, kernels' flip_crop/flip_crop.h, the output allocated),
// the completeness check of its kernel's arguments, its CPU registration, and its kernel-argument
// test hook. Its CUDA registration is flip_crop_cuda.cpp.
#include "ops/flip_crop/flip_crop_plan.h"

#include <torch/library.h>

#include "ops/cpu_registration.h"
#include "ops/kernel_args.h"
#include "ops/kernel_args_hook.h"
#include "flip_crop/flip_crop_thread_work.h"  // the CUDA launch split arg_problems checks

#include <limits>

namespace py = pybind11;

namespace prefetch {

namespace {

// The fill of a mask of dtype t must be a value of t (300 would wrap to 44 in uint8).
void check_mask_fill(at::ScalarType t, int64_t fill) {
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  const char *article = "an", *name = "int64";
  if (t == at::kByte) {
    lo = 0, hi = 255, article = "a", name = "uint8";
  } else if (t == at::kShort) {
    lo = std::numeric_limits<int16_t>::min(), hi = std::numeric_limits<int16_t>::max(), name = "int16";
  } else if (t == at::kInt) {
    lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max(), name = "int32";
  }
  TORCH_CHECK(fill >= lo && fill <= hi, "fill must be ", article, " ", name, " value in [", lo, ", ",
              hi, "] for ", name, " masks, got ", fill);
}

}  // namespace

FlipCropPlan plan_flip_crop(const at::Tensor& masks, const std::optional<at::Tensor>& hflip,
                            const std::optional<at::Tensor>& vflip, at::OptionalIntArrayRef crop,
                            const std::optional<at::Tensor>& offsets, int64_t fill,
                            const std::optional<at::Tensor>& indices,
                            const OutputAllocator& allocate) {
  check_devices("flip_crop", masks, "masks", hflip, vflip, offsets, indices);
  const auto t = masks.scalar_type();
  TORCH_CHECK(t == at::kByte || t == at::kShort || t == at::kInt || t == at::kLong,
              "masks must be uint8, int16, int32 or int64, got ", t);
  check_mask_fill(t, fill);
  TORCH_CHECK(masks.dim() == 3, "masks must be 3-D [N, H, W], got shape ", shape_of(masks));
  FlipCropPlan plan;
  plan.geometry = geometry_inputs(masks.size(0), masks.size(1), masks.size(2), hflip, vflip, crop,
                                  offsets, indices);
  kernels::Geometry& g = plan.geometry.g;
  g.C = 1;
  g.sN = masks.stride(0);
  g.sH = masks.stride(1);
  g.sW = masks.stride(2);
  checked_output_bytes("flip_crop", {g.N, g.h, g.w}, t);
  plan.out = allocate({g.N, g.h, g.w}, masks.options(), at::MemoryFormat::Contiguous);
  kernels::FlipCropArgs& a = plan.args;
  a.masks = masks.const_data_ptr();
  a.itemsize = static_cast<int>(masks.element_size());
  a.g = g;
  a.offsets = plan.geometry.offsets_ptr();
  a.hflip = plan.geometry.hflip_ptr();
  a.vflip = plan.geometry.vflip_ptr();
  a.fill = fill;
  a.out = plan.out.data_ptr();
  return plan;
}

std::vector<std::string> arg_problems(const FlipCropPlan& plan, bool cuda) {
  Problems p;
  const kernels::FlipCropArgs& a = plan.args;
  const kernels::Geometry& g = a.g;
  const at::Tensor& out = plan.out;
  if (!out.defined() || out.dim() != 3) {
    p.require(false, "out: the plan has no [N, h, w] output tensor");
    return p.lines;
  }
  p.same("N", g.N, out.size(0));
  p.same("h", g.h, out.size(1));
  p.same("w", g.w, out.size(2));
  p.require(out.is_contiguous(), "out: not contiguous (the kernels write [N, h, w] rows)");
  p.same("itemsize", static_cast<int64_t>(a.itemsize), static_cast<int64_t>(out.element_size()));
  p.require(out.numel() == 0 || a.out == out.data_ptr(), "out: not the output tensor's data");
  const bool reads = out.numel() > 0 && g.H > 0 && g.W > 0 && g.sources > 0;
  p.require(!reads || a.masks != nullptr, "masks: unset");
  p.require(points_at(a.offsets, plan.geometry.offsets), "offsets: not the plan's offsets");
  p.require(points_at(a.hflip, plan.geometry.hflip), "hflip: not the plan's hflip");
  p.require(points_at(a.vflip, plan.geometry.vflip), "vflip: not the plan's vflip");
  p.require(points_at(g.rows, plan.geometry.rows), "g.rows: not the plan's gather indices");
  if (cuda && p.lines.empty()) {
    std::vector<kernels::FlipCropLaunch> launches;
    const std::string why = launch_problem("flip_crop", kernels::plan_flip_crop_launches(a, &launches), 1, g.h, g.w);
    p.require(why.empty(), why);
    p.require(kernels::with_mask_element(a.itemsize, [](auto) {}),
              "itemsize: no kernel for " + std::to_string(a.itemsize) + "-byte mask elements");
  }
  return p.lines;
}

namespace {

at::Tensor flip_crop_cpu(const at::Tensor& masks, const std::optional<at::Tensor>& hflip,
                         const std::optional<at::Tensor>& vflip, at::OptionalIntArrayRef crop,
                         const std::optional<at::Tensor>& offsets, int64_t fill,
                         const std::optional<at::Tensor>& indices) {
  return run_cpu(plan_flip_crop(masks, hflip, vflip, crop, offsets, fill, indices, pooled_empty),
                 &kernels::flip_crop_cpu, [](const kernels::FlipCropArgs& a) {
                   return CpuSplit{a.g.N * a.g.h, grain_for(65536, a.g.w)};
                 });
}

py::dict flip_crop_args(const std::string& target, const at::Tensor& masks, std::optional<at::Tensor> hflip,
                        std::optional<at::Tensor> vflip, std::optional<std::vector<int64_t>> crop,
                        std::optional<at::Tensor> offsets, int64_t fill, std::optional<at::Tensor> indices,
                        const std::string& drop) {
  at::OptionalIntArrayRef crop_ref = crop.has_value() ? at::OptionalIntArrayRef(*crop) : std::nullopt;
  return describe_kernel_args(
      target, drop, [&] { return plan_flip_crop(masks, hflip, vflip, crop_ref, offsets, fill, indices); },
      [](kernels::FlipCropArgs* a, const std::string& field) {
        if (field == "masks") a->masks = nullptr;
        if (field == "out") a->out = nullptr;
        if (field == "offsets") a->offsets = nullptr;
        if (field == "hflip") a->hflip = nullptr;
        if (field == "itemsize") a->itemsize = 3;
      },
      [&](const FlipCropPlan& plan) {
        const kernels::FlipCropArgs& a = plan.args;
        py::dict d;
        d["masks"] = a.masks == masks.const_data_ptr();
        describe_geometry(&d, a);
        d["itemsize"] = a.itemsize;
        d["sizes"] = std::vector<int64_t>{a.g.N, a.g.h, a.g.w};
        return d;
      });
}

void bind_hook(py::module_& m) {
  using namespace pybind11::literals;
  m.def("_flip_crop_kernel_args", &flip_crop_args, "target"_a, "masks"_a, "hflip"_a = py::none(),
        "vflip"_a = py::none(), "crop"_a = py::none(), "offsets"_a = py::none(), "fill"_a = 0,
        "indices"_a = py::none(), "drop"_a = "",
        "Test hook: flip_crop's kernel arguments for target 'cpu' or 'cuda', described.");
}

const KernelArgsHook hook(&bind_hook);

}  // namespace

TORCH_LIBRARY_FRAGMENT(prefetch, m) {
  m.def(
      "flip_crop(Tensor masks, Tensor? hflip=None, Tensor? vflip=None, int[]? crop=None, "
      "Tensor? offsets=None, int fill=0, Tensor? indices=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(prefetch, CPU, m) { m.impl("flip_crop", &flip_crop_cpu); }

}  // namespace prefetch
