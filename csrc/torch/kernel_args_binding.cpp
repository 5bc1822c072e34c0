// prefetch._C._kernel_args: the kernel arguments complete_args assembles for an op's call, for the
// CPU or for a CUDA kernel, described as a dict, so that the CPU tests check the CUDA assembly on a
// machine without a GPU (tests/ops/test_kernel_args.py). The CUDA target's upload is replaced by a
// copy into CPU memory (the one line of the real upload that is CUDA's own); everything else is
// the code a CUDA call runs. A test hook, private: prefetch's API never calls it.
#include <torch/extension.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/affine_table.h"
#include "ops/kernel_args.h"

namespace py = pybind11;

namespace prefetch {
namespace {

KernelTarget target_named(const std::string& name, bool* uploaded) {
  TORCH_CHECK(name == "cpu" || name == "cuda", "target must be 'cpu' or 'cuda', got '", name, "'");
  KernelTarget target;
  if (name == "cpu") return target;
  target.cuda = true;
  target.upload = [uploaded](const std::vector<kernels::Affine>& table) {
    *uploaded = true;
    at::Tensor copy = at::empty({static_cast<int64_t>(table.size() * 2)}, at::kFloat);
    std::memcpy(copy.data_ptr<float>(), table.data(), table.size() * sizeof(kernels::Affine));
    return copy;
  };
  return target;
}

py::object table_of(const kernels::Affine* table, int64_t C) {
  if (table == nullptr) return py::none();
  py::list out;
  for (int64_t c = 0; c < C; ++c) out.append(py::make_tuple(table[c].scale, table[c].bias));
  return out;
}

// Nulls the named field, as a registration that forgot it would leave it.
template <typename Args>
void drop_common(Args* a, const std::string& field) {
  if (field == "affine") a->affine = nullptr;
  if (field == "affine_device") a->affine_device = nullptr;
  if (field == "out") a->out = nullptr;
  if (field == "hflip") a->hflip = nullptr;
  if (field == "vflip") a->vflip = nullptr;
  if (field == "oN") a->oN += 1;
}

py::dict describe(const kernels::Affine* affine, const kernels::Affine* device, int64_t C, bool uploaded,
                  const std::vector<std::string>& problems) {
  py::dict d;
  d["affine"] = table_of(affine, C);
  d["affine_device"] = table_of(device, C);
  d["uploaded"] = uploaded;
  d["inline"] = C <= kernels::kInlineChannels;
  d["problems"] = problems;
  return d;
}

py::dict normalize_flip_args(const std::string& target_name, const at::Tensor& images, std::vector<double> mean,
                             std::vector<double> std, std::optional<at::Tensor> hflip,
                             std::optional<at::Tensor> vflip, std::optional<std::vector<int64_t>> crop,
                             std::optional<at::Tensor> offsets, int64_t fill, at::ScalarType dtype,
                             const std::string& layout, bool channels_last, std::optional<at::Tensor> indices,
                             const std::string& drop) {
  bool uploaded = false;
  const KernelTarget target = target_named(target_name, &uploaded);
  at::OptionalIntArrayRef crop_ref = crop.has_value() ? at::OptionalIntArrayRef(*crop) : std::nullopt;
  NormalizeFlipPlan plan = plan_normalize_flip(images, mean, std, hflip, vflip, crop_ref, offsets, fill, dtype,
                                               layout, channels_last, indices);
  const at::Tensor keep = complete_args(&plan, target);
  kernels::NormalizeFlipArgs& a = plan.args;
  drop_common(&a, drop);
  if (drop == "images") a.images = nullptr;
  if (drop == "offsets") a.offsets = nullptr;
  if (drop == "g.rows") a.g.rows = nullptr;
  py::dict d = describe(a.affine, a.affine_device, a.g.C, uploaded, normalize_flip_arg_problems(plan, target.cuda));
  d["images"] = a.images == images.const_data_ptr();
  d["offsets"] = a.offsets != nullptr;
  d["hflip"] = a.hflip != nullptr;
  d["vflip"] = a.vflip != nullptr;
  d["rows"] = a.g.rows != nullptr;
  d["out"] = plan.out;
  d["sizes"] = std::vector<int64_t>{a.g.N, a.g.C, a.g.h, a.g.w};
  d["strides"] = std::vector<int64_t>{a.oN, a.oC, a.oY, a.oX};
  return d;
}

py::dict resized_crop_args(const std::string& target_name, const at::Tensor& values, const at::Tensor& offsets,
                           const at::Tensor& sizes, const at::Tensor& boxes, std::vector<int64_t> size,
                           std::vector<double> mean, std::vector<double> std, std::optional<at::Tensor> hflip,
                           std::optional<at::Tensor> vflip, at::ScalarType dtype, bool channels_last,
                           bool antialias, const std::string& drop) {
  bool uploaded = false;
  const KernelTarget target = target_named(target_name, &uploaded);
  ResizedCropPlan plan = plan_resized_crop(values, offsets, sizes, boxes, size, mean, std, hflip, vflip, dtype,
                                           channels_last, antialias);
  const at::Tensor keep = complete_args(&plan, target);
  kernels::ResizedCropArgs& a = plan.args;
  drop_common(&a, drop);
  if (drop == "values") a.values = nullptr;
  if (drop == "samples") a.samples = nullptr;
  py::dict d = describe(a.affine, a.affine_device, a.C, uploaded, resized_crop_arg_problems(plan, target.cuda));
  d["values"] = a.values == values.const_data_ptr();
  d["samples"] = plan.samples.defined() ? py::cast(plan.samples) : py::none();
  d["hflip"] = a.hflip != nullptr;
  d["vflip"] = a.vflip != nullptr;
  d["out"] = plan.out;
  d["sizes"] = std::vector<int64_t>{a.N, a.C, a.h, a.w};
  d["strides"] = std::vector<int64_t>{a.oN, a.oC, a.oY, a.oX};
  return d;
}

py::dict flip_crop_args(const std::string& target_name, const at::Tensor& masks, std::optional<at::Tensor> hflip,
                        std::optional<at::Tensor> vflip, std::optional<std::vector<int64_t>> crop,
                        std::optional<at::Tensor> offsets, int64_t fill, std::optional<at::Tensor> indices,
                        const std::string& drop) {
  bool uploaded = false;
  const KernelTarget target = target_named(target_name, &uploaded);
  at::OptionalIntArrayRef crop_ref = crop.has_value() ? at::OptionalIntArrayRef(*crop) : std::nullopt;
  FlipCropPlan plan = plan_flip_crop(masks, hflip, vflip, crop_ref, offsets, fill, indices);
  complete_args(&plan, target);
  kernels::FlipCropArgs& a = plan.args;
  if (drop == "masks") a.masks = nullptr;
  if (drop == "out") a.out = nullptr;
  if (drop == "offsets") a.offsets = nullptr;
  if (drop == "hflip") a.hflip = nullptr;
  if (drop == "itemsize") a.itemsize = 3;
  py::dict d;
  d["problems"] = flip_crop_arg_problems(plan, target.cuda);
  d["uploaded"] = uploaded;
  d["masks"] = a.masks == masks.const_data_ptr();
  d["offsets"] = a.offsets != nullptr;
  d["hflip"] = a.hflip != nullptr;
  d["vflip"] = a.vflip != nullptr;
  d["rows"] = a.g.rows != nullptr;
  d["out"] = plan.out;
  d["itemsize"] = a.itemsize;
  d["sizes"] = std::vector<int64_t>{a.g.N, a.g.h, a.g.w};
  return d;
}

py::dict affine_warp_args(const std::string& target_name, const at::Tensor& images, const at::Tensor& matrices,
                          bool bilinear, std::optional<std::vector<double>> fill, const std::string& drop) {
  bool uploaded = false;
  const KernelTarget target = target_named(target_name, &uploaded);
  std::optional<at::ArrayRef<double>> fill_ref;
  if (fill.has_value()) fill_ref = at::ArrayRef<double>(*fill);
  AffineWarpPlan plan = plan_affine_warp(images, matrices, bilinear, fill_ref);
  complete_args(&plan, target);
  kernels::AffineWarpArgs& a = plan.args;
  if (drop == "images") a.images = nullptr;
  if (drop == "matrices") a.matrices = nullptr;
  if (drop == "out") a.out = nullptr;
  py::dict d;
  d["problems"] = affine_warp_arg_problems(plan, target.cuda);
  d["uploaded"] = uploaded;
  d["images"] = a.images == images.const_data_ptr<uint8_t>();
  d["out"] = plan.out;
  d["fill"] = a.has_fill ? py::cast(std::vector<float>(a.fill, a.fill + a.C)) : py::none();
  d["sizes"] = std::vector<int64_t>{a.N, a.C, a.H, a.W};
  d["strides"] = std::vector<int64_t>{a.sN, a.sC, a.sH, a.sW};
  return d;
}

py::dict sharpness_args(const std::string& target_name, const at::Tensor& images, const at::Tensor& factors,
                        const std::string& drop) {
  bool uploaded = false;
  const KernelTarget target = target_named(target_name, &uploaded);
  SharpnessPlan plan = plan_sharpness(images, factors);
  complete_args(&plan, target);
  kernels::SharpnessArgs& a = plan.args;
  if (drop == "images") a.images = nullptr;
  if (drop == "factors") a.factors = nullptr;
  if (drop == "out") a.out = nullptr;
  py::dict d;
  d["problems"] = sharpness_arg_problems(plan, target.cuda);
  d["uploaded"] = uploaded;
  d["images"] = a.images == images.const_data_ptr<uint8_t>();
  d["out"] = plan.out;
  d["sizes"] = std::vector<int64_t>{a.N, a.C, a.H, a.W};
  d["strides"] = std::vector<int64_t>{a.sN, a.sC, a.sH, a.sW};
  return d;
}

py::dict lookup_args(const std::string& target_name, const at::Tensor& images, const at::Tensor& tables,
                     const std::string& drop) {
  bool uploaded = false;
  const KernelTarget target = target_named(target_name, &uploaded);
  LookupPlan plan = plan_lookup(images, tables);
  complete_args(&plan, target);
  kernels::LookupArgs& a = plan.args;
  if (drop == "images") a.images = nullptr;
  if (drop == "tables") a.tables = nullptr;
  if (drop == "out") a.out = nullptr;
  if (drop == "T") a.T = a.C + 1;
  py::dict d;
  d["problems"] = lookup_arg_problems(plan, target.cuda);
  d["uploaded"] = uploaded;
  d["images"] = a.images == images.const_data_ptr<uint8_t>();
  d["out"] = plan.out;
  d["T"] = a.T;
  d["sizes"] = std::vector<int64_t>{a.N, a.C, a.H, a.W};
  d["strides"] = std::vector<int64_t>{a.sN, a.sC, a.sH, a.sW};
  return d;
}

py::dict color_jitter_args(const std::string& target_name, const at::Tensor& images, const at::Tensor& steps,
                           const at::Tensor& factors, const std::string& drop) {
  bool uploaded = false;
  const KernelTarget target = target_named(target_name, &uploaded);
  ColorJitterPlan plan = plan_color_jitter(images, steps, factors);
  complete_args(&plan, target);
  kernels::ColorJitterArgs& a = plan.args;
  if (drop == "images") a.images = nullptr;
  if (drop == "steps") a.steps = nullptr;
  if (drop == "factors") a.factors = nullptr;
  if (drop == "grey_sums") a.grey_sums = nullptr;
  if (drop == "out") a.out = nullptr;
  if (drop == "K") a.K += 1;
  py::dict d;
  d["problems"] = color_jitter_arg_problems(plan, target.cuda);
  d["uploaded"] = uploaded;
  d["images"] = a.images == images.const_data_ptr<uint8_t>();
  d["out"] = plan.out;
  d["K"] = a.K;
  d["sizes"] = std::vector<int64_t>{a.N, a.C, a.H, a.W};
  d["strides"] = std::vector<int64_t>{a.sN, a.sC, a.sH, a.sW};
  return d;
}

py::dict histogram_args(const std::string& target_name, const at::Tensor& images, const std::string& drop) {
  bool uploaded = false;
  const KernelTarget target = target_named(target_name, &uploaded);
  HistogramPlan plan = plan_histogram(images);
  complete_args(&plan, target);
  kernels::HistogramArgs& a = plan.args;
  if (drop == "images") a.images = nullptr;
  if (drop == "out") a.out = nullptr;
  if (drop == "C") a.C += 1;
  py::dict d;
  d["problems"] = histogram_arg_problems(plan, target.cuda);
  d["uploaded"] = uploaded;
  d["images"] = a.images == images.const_data_ptr<uint8_t>();
  d["out"] = plan.out;
  d["sizes"] = std::vector<int64_t>{a.N, a.C, a.H, a.W};
  d["strides"] = std::vector<int64_t>{a.sN, a.sC, a.sH, a.sW};
  return d;
}

}  // namespace
}  // namespace prefetch

void bind_kernel_args(py::module_& m) {
  using namespace pybind11::literals;
  m.def("_normalize_flip_kernel_args", &prefetch::normalize_flip_args, "target"_a, "images"_a, "mean"_a, "std"_a,
        "hflip"_a = py::none(), "vflip"_a = py::none(), "crop"_a = py::none(), "offsets"_a = py::none(),
        "fill"_a = 0, "dtype"_a = at::kFloat, "layout"_a = "NHWC", "channels_last"_a = false,
        "indices"_a = py::none(), "drop"_a = "",
        "Test hook: normalize_flip's kernel arguments for target 'cpu' or 'cuda', described.");
  m.def("_resized_crop_kernel_args", &prefetch::resized_crop_args, "target"_a, "values"_a, "offsets"_a, "sizes"_a,
        "boxes"_a, "size"_a, "mean"_a, "std"_a, "hflip"_a = py::none(), "vflip"_a = py::none(),
        "dtype"_a = at::kFloat, "channels_last"_a = false, "antialias"_a = false, "drop"_a = "",
        "Test hook: resized_crop's kernel arguments for target 'cpu' or 'cuda', described.");
  m.def("_flip_crop_kernel_args", &prefetch::flip_crop_args, "target"_a, "masks"_a, "hflip"_a = py::none(),
        "vflip"_a = py::none(), "crop"_a = py::none(), "offsets"_a = py::none(), "fill"_a = 0,
        "indices"_a = py::none(), "drop"_a = "",
        "Test hook: flip_crop's kernel arguments for target 'cpu' or 'cuda', described.");
  m.def("_affine_warp_kernel_args", &prefetch::affine_warp_args, "target"_a, "images"_a, "matrices"_a,
        "bilinear"_a = false, "fill"_a = py::none(), "drop"_a = "",
        "Test hook: affine_warp's kernel arguments for target 'cpu' or 'cuda', described.");
  m.def("_sharpness_kernel_args", &prefetch::sharpness_args, "target"_a, "images"_a, "factors"_a, "drop"_a = "",
        "Test hook: sharpness's kernel arguments for target 'cpu' or 'cuda', described.");
  m.def("_lookup_kernel_args", &prefetch::lookup_args, "target"_a, "images"_a, "tables"_a, "drop"_a = "",
        "Test hook: lookup's kernel arguments for target 'cpu' or 'cuda', described.");
  m.def("_color_jitter_kernel_args", &prefetch::color_jitter_args, "target"_a, "images"_a, "steps"_a, "factors"_a,
        "drop"_a = "", "Test hook: color_jitter's kernel arguments for target 'cpu' or 'cuda', described.");
  m.def("_histogram_kernel_args", &prefetch::histogram_args, "target"_a, "images"_a, "drop"_a = "",
        "Test hook: histograms' kernel arguments for target 'cpu' or 'cuda', described.");
}
