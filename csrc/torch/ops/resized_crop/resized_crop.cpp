// The op resized_crop, its own file: its schema (a fragment of the prefetch library), its plan (the
// arguments checked and turned into its kernel's, kernels' resized_crop/resized_crop.h, the output allocated),
// the completeness check of its kernel's arguments, its CPU registration, and its kernel-argument
// test hook. Its CUDA registration is resized_crop_cuda.cpp.
#include "ops/resized_crop/resized_crop_plan.h"

#include <ATen/ops/cat.h>
#include <torch/library.h>

#include "ops/cpu_registration.h"
#include "ops/kernel_args.h"
#include "ops/kernel_args_hook.h"
#include "resized_crop/resized_crop_thread_work.h"  // the CUDA launch split arg_problems checks

#include <c10/util/safe_numerics.h>

namespace py = pybind11;

namespace prefetch {

namespace {

// A table argument of resized_crop lives on the CPU or on the values' device.
void check_table_device(const at::Tensor& values, const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device() == values.device() || t.is_cpu(), "resized_crop: ", name, " is on ",
              t.device(), " but the values are on ", values.device(),
              "; each table argument must be on the values' device or on the CPU");
}

// A flip (or bicubic) table as the kernels read it: bool is one byte per element, read as uint8 [N] on
// `device`. A host table for a CUDA kernel travels from a fresh pageable copy: the upload is
// staged before it returns (no synchronisation), and a later change to the caller's tensor,
// pinned or not, cannot reach the kernel.
at::Tensor flip_bytes(const at::Tensor& flip, at::Device device) {
  if (flip.device() == device) return flip.contiguous().view(at::kByte);
  return flip.to(at::kByte).contiguous().to(device, /*non_blocking=*/true);
}

// Row n of the packed table (offset, H, W, C, top, left, height, width), checked: C channels, the
// sample's bytes inside `values` (numel elements), the box inside the image.
void check_sample(int64_t n, const int64_t* row, int64_t C, int64_t numel) {
  using namespace kernels;
  const int64_t off = row[kOffset], H = row[kHeight], W = row[kWidth], Cn = row[kChannels];
  TORCH_CHECK(H >= 0 && W >= 0 && Cn >= 0, "resized_crop: sizes[", n, "] = (", H, ", ", W, ", ", Cn,
              ") has a negative size");
  TORCH_CHECK(Cn == C, "resized_crop: sample ", n, " has C = ", Cn, " channels (sizes[", n, "] = (",
              H, ", ", W, ", ", Cn, ")) but mean and std have ", C, " values, one per channel");
  uint64_t elements = 0;
  const bool overflow = c10::mul_overflows(static_cast<uint64_t>(H), static_cast<uint64_t>(W), &elements) ||
                        c10::mul_overflows(elements, static_cast<uint64_t>(C), &elements);
  TORCH_CHECK(!overflow && off >= 0 && off <= numel && elements <= static_cast<uint64_t>(numel - off),
              "resized_crop: sample ", n, " (offsets[", n, "] = ", off, ", sizes[", n, "] = (", H, ", ",
              W, ", ", C, ")) does not lie inside the ", numel, " values");
  const int64_t top = row[kTop], left = row[kLeft], height = row[kBoxHeight], width = row[kBoxWidth];
  TORCH_CHECK(height >= 1 && width >= 1 && top >= 0 && left >= 0 && top <= H - height && left <= W - width,
              "resized_crop: boxes[", n, "] = (top=", top, ", left=", left, ", height=", height,
              ", width=", width, ") is not inside sample ", n, "'s image of H x W = ", H, " x ", W,
              "; a box needs height, width >= 1, 0 <= top <= H - height and 0 <= left <= W - width");
}

}  // namespace

void check_resized_crop_devices(const at::Tensor& values, const at::Tensor& offsets,
                                const at::Tensor& sizes, const at::Tensor& boxes,
                                const std::optional<at::Tensor>& hflip,
                                const std::optional<at::Tensor>& vflip,
                                const std::optional<at::Tensor>& bicubic) {
  check_table_device(values, offsets, "offsets");
  check_table_device(values, sizes, "sizes");
  check_table_device(values, boxes, "boxes");
  if (hflip.has_value()) check_table_device(values, *hflip, "hflip");
  if (vflip.has_value()) check_table_device(values, *vflip, "vflip");
  if (bicubic.has_value()) check_table_device(values, *bicubic, "bicubic");
}

namespace {

// The arguments that shape resized_crop's output, checked; returns C.
int64_t check_resized_crop_output(int64_t N, at::IntArrayRef size, at::ArrayRef<double> mean,
                                  at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                                  const std::optional<at::Tensor>& vflip,
                                  const std::optional<at::Tensor>& bicubic, at::ScalarType dtype) {
  TORCH_CHECK(size.size() == 2, "resized_crop: size must be (h, w), got ", size.size(), " values: ", size);
  TORCH_CHECK(size[0] >= 1 && size[1] >= 1 && size[0] <= kMaxCrop && size[1] <= kMaxCrop,
              "resized_crop: size must be (h, w) with 1 <= h, w <= ", kMaxCrop, ", got ", size);
  check_out_dtype("resized_crop", dtype);
  TORCH_CHECK(mean.size() == std.size(), "resized_crop: mean has ", mean.size(), " values but std has ",
              std.size());
  TORCH_CHECK(!mean.empty(), "resized_crop: mean and std need one value per channel, got none");
  const int64_t C = static_cast<int64_t>(mean.size());
  check_flip(hflip, "hflip", N);
  check_flip(vflip, "vflip", N);
  check_flip(bicubic, "bicubic", N);
  check_mean_std(mean, std);
  return C;
}

}  // namespace

ResizedCropPlan plan_resized_crop_output(int64_t N, at::IntArrayRef size, at::ArrayRef<double> mean,
                                         at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                                         const std::optional<at::Tensor>& vflip, at::ScalarType dtype,
                                         bool channels_last, bool antialias,
                                         const std::optional<at::Tensor>& bicubic,
                                         const at::TensorOptions& options,
                                         const OutputAllocator& allocate) {
  const int64_t C = check_resized_crop_output(N, size, mean, std, hflip, vflip, bicubic, dtype);
  ResizedCropPlan plan;
  plan.affine = affine_of(mean, std);
  const at::Device device = options.device();
  if (hflip.has_value()) plan.hflip = flip_bytes(*hflip, device);
  if (vflip.has_value()) plan.vflip = flip_bytes(*vflip, device);
  if (bicubic.has_value()) plan.bicubic = flip_bytes(*bicubic, device);
  const int64_t h = size[0], w = size[1];
  checked_output_bytes("resized_crop", {N, C, h, w}, dtype);
  plan.out = allocate({N, C, h, w}, options.dtype(dtype),
                      channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
  kernels::ResizedCropArgs& a = plan.args;
  a.hflip = plan.hflip.defined() ? plan.hflip.const_data_ptr<uint8_t>() : nullptr;
  a.vflip = plan.vflip.defined() ? plan.vflip.const_data_ptr<uint8_t>() : nullptr;
  a.bicubic = plan.bicubic.defined() ? plan.bicubic.const_data_ptr<uint8_t>() : nullptr;
  a.N = N;
  a.C = C;
  a.h = h;
  a.w = w;
  a.antialias = antialias;
  set_output(&a, plan.out, dtype);
  return plan;
}

ResizedCropPlan plan_resized_crop(const at::Tensor& values, const at::Tensor& offsets,
                                  const at::Tensor& sizes, const at::Tensor& boxes,
                                  at::IntArrayRef size, at::ArrayRef<double> mean,
                                  at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                                  const std::optional<at::Tensor>& vflip, at::ScalarType dtype,
                                  bool channels_last, bool antialias,
                                  const std::optional<at::Tensor>& bicubic,
                                  const OutputAllocator& allocate) {
  check_resized_crop_devices(values, offsets, sizes, boxes, hflip, vflip, bicubic);
  TORCH_CHECK(values.scalar_type() == at::kByte, "resized_crop: values must be uint8, got ",
              values.scalar_type());
  TORCH_CHECK(values.dim() == 1, "resized_crop: values must be 1-D (a Ragged's packed samples), got shape ",
              shape_of(values));
  TORCH_CHECK(values.numel() <= 1 || values.stride(0) == 1,
              "resized_crop: values must be contiguous (stride 1), got stride ", values.stride(0));
  TORCH_CHECK(offsets.scalar_type() == at::kLong && offsets.dim() == 1,
              "resized_crop: offsets must be a 1-D int64 tensor [N], got dtype ", offsets.scalar_type(),
              " and shape ", shape_of(offsets));
  TORCH_CHECK(sizes.scalar_type() == at::kLong && sizes.dim() == 2 && sizes.size(1) == 3,
              "resized_crop: sizes must be an int64 tensor [N, 3] of (H, W, C) per HWC sample, got dtype ",
              sizes.scalar_type(), " and shape ", shape_of(sizes));
  const int64_t N = sizes.size(0);
  TORCH_CHECK(offsets.size(0) == N, "resized_crop: offsets has ", offsets.size(0),
              " samples but sizes has ", N);
  TORCH_CHECK(at::isIntegralType(boxes.scalar_type(), /*includeBool=*/false) && boxes.scalar_type() != at::kUInt64,
              "resized_crop: boxes must be an integer tensor [N, 4] of (top, left, height, width) (not "
              "uint64, whose values from 2^63 would wrap), got dtype ", boxes.scalar_type());
  TORCH_CHECK(boxes.dim() == 2 && boxes.size(0) == N && boxes.size(1) == 4,
              "resized_crop: boxes must have shape [N, 4] = [", N, ", 4], got ", shape_of(boxes));
  // The output's arguments are checked before the tables are read (a bad size or dtype is
  // reported without a device read); the output is allocated once the boxes are known good.
  const int64_t C = check_resized_crop_output(N, size, mean, std, hflip, vflip, bicubic, dtype);

  // The kernel's table: offsets | sizes | boxes, one row per sample (kernels::SampleField).
  const at::Device device = values.device();
  const at::Tensor boxes64 = boxes.to(at::kLong);
  auto pack = [&](at::Device d) {
    return at::cat({offsets.to(d).reshape({N, 1}), sizes.to(d), boxes64.to(d)}, 1).contiguous();
  };
  at::Tensor host, samples;
  if (offsets.is_cpu() && sizes.is_cpu() && boxes.is_cpu()) {
    host = pack(at::kCPU);
    // From pageable memory a non-blocking copy returns once the driver has staged the bytes.
    samples = device.is_cpu() ? host : host.to(device, /*non_blocking=*/true);
  } else {
    samples = pack(device);
    host = samples.cpu();  // the one host synchronisation: the boxes are checked first
  }
  const int64_t* rows = host.const_data_ptr<int64_t>();
  for (int64_t n = 0; n < N; ++n) check_sample(n, rows + kernels::kSampleFields * n, C, values.numel());

  ResizedCropPlan plan = plan_resized_crop_output(N, size, mean, std, hflip, vflip, dtype, channels_last,
                                                  antialias, bicubic, values.options(), allocate);
  plan.samples = samples;
  plan.args.values = values.const_data_ptr<uint8_t>();
  plan.args.samples = plan.samples.const_data_ptr<int64_t>();
  return plan;
}

std::vector<std::string> arg_problems(const ResizedCropPlan& plan, bool cuda) {
  Problems p;
  const kernels::ResizedCropArgs& a = plan.args;
  check_image_output(&p, a, plan.out, a.N, a.C, a.h, a.w, plan.affine.size(), cuda);
  p.require(points_at(a.hflip, plan.hflip), "hflip: not the plan's hflip");
  p.require(points_at(a.vflip, plan.vflip), "vflip: not the plan's vflip");
  p.require(points_at(a.bicubic, plan.bicubic), "bicubic: not the plan's bicubic");
  // The input half: set by plan_resized_crop; the decoding ops fill it per sample themselves.
  if (plan.samples.defined()) {
    p.require(points_at(a.samples, plan.samples), "samples: not the plan's table");
    p.require(plan.samples.dim() == 2 && plan.samples.size(0) == a.N &&
                  plan.samples.size(1) == kernels::kSampleFields,
              "samples: not an [N, " + std::to_string(kernels::kSampleFields) + "] table");
    p.require(a.N == 0 || a.values != nullptr || plan.out.numel() == 0, "values: unset");
  }
  if (cuda && p.lines.empty()) {
    std::vector<kernels::ResizedCropLaunch> launches;
    const std::string why =
        launch_problem("resized_crop", kernels::plan_resized_crop_launches(a, &launches), a.C, a.h, a.w);
    p.require(why.empty(), why);
  }
  return p.lines;
}

namespace {

at::Tensor resized_crop_cpu(const at::Tensor& values, const at::Tensor& offsets, const at::Tensor& sizes,
                            const at::Tensor& boxes, at::IntArrayRef size, at::ArrayRef<double> mean,
                            at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                            const std::optional<at::Tensor>& vflip, at::ScalarType dtype,
                            bool channels_last, bool antialias, const std::optional<at::Tensor>& bicubic) {
  return run_cpu(plan_resized_crop(values, offsets, sizes, boxes, size, mean, std, hflip, vflip, dtype,
                                   channels_last, antialias, bicubic, pooled_empty),
                 &kernels::resized_crop_cpu, [](const kernels::ResizedCropArgs& a) {
                   // A row blends a few input rows (2 to 4, more for an antialiased downscale) of
                   // the crop's width and then w * C output values: a few hundred rows make a
                   // chunk worth a thread.
                   return CpuSplit{a.N * a.h, grain_for(16384, a.w * a.C)};
                 });
}

py::dict resized_crop_args(const std::string& target, const at::Tensor& values, const at::Tensor& offsets,
                           const at::Tensor& sizes, const at::Tensor& boxes, std::vector<int64_t> size,
                           std::vector<double> mean, std::vector<double> std, std::optional<at::Tensor> hflip,
                           std::optional<at::Tensor> vflip, at::ScalarType dtype, bool channels_last,
                           bool antialias, std::optional<at::Tensor> bicubic, const std::string& drop) {
  return describe_kernel_args(
      target, drop,
      [&] {
        return plan_resized_crop(values, offsets, sizes, boxes, size, mean, std, hflip, vflip, dtype,
                                 channels_last, antialias, bicubic);
      },
      [](kernels::ResizedCropArgs* a, const std::string& field) {
        drop_common(a, field);
        if (field == "values") a->values = nullptr;
        if (field == "samples") a->samples = nullptr;
        if (field == "bicubic") a->bicubic = nullptr;
      },
      [&](const ResizedCropPlan& plan) {
        const kernels::ResizedCropArgs& a = plan.args;
        py::dict d;
        d["values"] = a.values == values.const_data_ptr();
        d["samples"] = plan.samples.defined() ? py::cast(plan.samples) : py::none();
        d["hflip"] = a.hflip != nullptr;
        d["vflip"] = a.vflip != nullptr;
        d["bicubic"] = a.bicubic != nullptr;
        d["sizes"] = std::vector<int64_t>{a.N, a.C, a.h, a.w};
        d["strides"] = std::vector<int64_t>{a.oN, a.oC, a.oY, a.oX};
        return d;
      });
}

void bind_hook(py::module_& m) {
  using namespace pybind11::literals;
  m.def("_resized_crop_kernel_args", &resized_crop_args, "target"_a, "values"_a, "offsets"_a, "sizes"_a,
        "boxes"_a, "size"_a, "mean"_a, "std"_a, "hflip"_a = py::none(), "vflip"_a = py::none(),
        "dtype"_a = at::kFloat, "channels_last"_a = false, "antialias"_a = false, "bicubic"_a = py::none(), "drop"_a = "",
        "Test hook: resized_crop's kernel arguments for target 'cpu' or 'cuda', described.");
}

const KernelArgsHook hook(&bind_hook);

}  // namespace

TORCH_LIBRARY_FRAGMENT(prefetch, m) {
  m.def(
      "resized_crop(Tensor values, Tensor offsets, Tensor sizes, Tensor boxes, int[] size, "
      "float[] mean, float[] std, Tensor? hflip=None, Tensor? vflip=None, ScalarType dtype=float, "
      "bool channels_last=False, bool antialias=True, Tensor? bicubic=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(prefetch, CPU, m) { m.impl("resized_crop", &resized_crop_cpu); }

}  // namespace prefetch
