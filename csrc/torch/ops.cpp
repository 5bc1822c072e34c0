// The fused augment ops as PyTorch ops: schemas, argument checks, and the CPU registration.
// The CUDA registration is csrc/torch/cuda/ops_cuda.cpp (built only against a CUDA torch).
#include <ATen/Parallel.h>
#include <c10/util/safe_numerics.h>
#include <torch/library.h>

#include <cmath>
#include <iterator>
#include <limits>
#include <memory>
#include <sstream>
#include <vector>

#include "buffer_pool.h"
#include "kernel_args.h"
#include "ops_common.h"

namespace prefetch {

namespace {

std::string shape_of(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

// An image op's [N, C, h, w] float output, as the kernels' arguments describe it.
template <typename Args>
void set_output(Args* a, const at::Tensor& out, at::ScalarType dtype) {
  a->out = out.data_ptr();
  a->dtype = dtype == at::kFloat ? kernels::OutDType::kFloat32
             : dtype == at::kHalf ? kernels::OutDType::kFloat16
                                  : kernels::OutDType::kBFloat16;
  a->oN = out.stride(0);
  a->oC = out.stride(1);
  a->oY = out.stride(2);
  a->oX = out.stride(3);
}

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

void check_flip(const std::optional<at::Tensor>& flip, const char* name, int64_t n) {
  if (!flip.has_value()) return;
  const at::Tensor& f = *flip;
  TORCH_CHECK(f.scalar_type() == at::kBool, name, " must be a bool tensor of shape [N] = [", n,
              "], got dtype ", f.scalar_type());
  TORCH_CHECK(f.dim() == 1 && f.size(0) == n, name, " must have shape [N] = [", n, "], got ",
              shape_of(f));
}

// Gather indices: 1-D integers on the input's device. On the CPU every index is checked here;
// on CUDA the kernel checks (a check here would synchronise the host with the device).
at::Tensor gather_rows(const std::optional<at::Tensor>& indices, int64_t sources) {
  const at::Tensor& i = *indices;
  TORCH_CHECK(at::isIntegralType(i.scalar_type(), /*includeBool=*/false) && i.scalar_type() != at::kUInt64,
              "indices must be an integer tensor of shape [n] (not uint64, whose values from 2^63 "
              "would wrap), got dtype ", i.scalar_type());
  TORCH_CHECK(i.dim() == 1, "indices must be 1-D [n], got shape ", shape_of(i));
  at::Tensor rows = i.to(at::kLong).contiguous();
  if (rows.is_cpu() && rows.numel() > 0) {
    const int64_t* p = rows.const_data_ptr<int64_t>();
    for (int64_t k = 0; k < rows.numel(); ++k) {
      TORCH_CHECK_INDEX(p[k] >= 0 && p[k] < sources, "indices[", k, "] = ", p[k],
                        " is out of range for an input of ", sources, " samples");
    }
  }
  return rows;
}

GeometryInputs geometry_inputs(int64_t sources, int64_t H, int64_t W,
                               const std::optional<at::Tensor>& hflip,
                               const std::optional<at::Tensor>& vflip, at::OptionalIntArrayRef crop,
                               const std::optional<at::Tensor>& offsets,
                               const std::optional<at::Tensor>& indices) {
  // Bounds the kernels' index sums (offsets are clamped into [-h, H] x [-w, W], geometry.h):
  // no such input fits in memory unless it is a stride-0 expansion.
  TORCH_CHECK(H < kMaxInputSide && W < kMaxInputSide,
              "the input's height and width must be below 2^62, got H = ", H, ", W = ", W);
  GeometryInputs in;
  int64_t N = sources;
  if (indices.has_value()) {
    in.rows = gather_rows(indices, sources);
    N = in.rows.numel();
    in.g.rows = in.rows.const_data_ptr<int64_t>();
  }
  in.g.sources = sources;
  in.g.N = N;
  in.g.H = H;
  in.g.W = W;
  in.g.h = H;
  in.g.w = W;
  if (crop.has_value()) {
    auto c = *crop;
    TORCH_CHECK(c.size() == 2, "crop must be (h, w), got ", c.size(), " values: ", c);
    TORCH_CHECK(c[0] >= 1 && c[1] >= 1 && c[0] <= kMaxCrop && c[1] <= kMaxCrop,
                "crop must be (h, w) with 1 <= h, w <= ", kMaxCrop, ", got ", c);
    in.g.h = c[0];
    in.g.w = c[1];
  }
  check_flip(hflip, "hflip", N);
  check_flip(vflip, "vflip", N);
  // bool is stored as one byte per element: the kernels read it as uint8.
  if (hflip.has_value()) in.hflip = hflip->contiguous().view(at::kByte);
  if (vflip.has_value()) in.vflip = vflip->contiguous().view(at::kByte);
  if (offsets.has_value()) {
    const at::Tensor& o = *offsets;
    TORCH_CHECK(at::isIntegralType(o.scalar_type(), /*includeBool=*/false) && o.scalar_type() != at::kUInt64,
                "offsets must be an integer tensor of shape [N, 2] = [", N, ", 2] (not uint64, "
                "whose values from 2^63 would wrap), got dtype ", o.scalar_type());
    TORCH_CHECK(o.dim() == 2 && o.size(0) == N && o.size(1) == 2,
                "offsets must have shape [N, 2] = [", N, ", 2], got ", shape_of(o));
    in.offsets = o.to(at::kLong).contiguous();
  }
  return in;
}

}  // namespace

void check_devices(const char* op, const at::Tensor& input, const char* input_name,
                   const std::optional<at::Tensor>& hflip, const std::optional<at::Tensor>& vflip,
                   const std::optional<at::Tensor>& offsets,
                   const std::optional<at::Tensor>& indices) {
  const std::pair<const char*, const std::optional<at::Tensor>*> args[] = {
      {"hflip", &hflip}, {"vflip", &vflip}, {"offsets", &offsets}, {"indices", &indices}};
  for (const auto& [name, arg] : args) {
    if (!arg->has_value()) continue;
    const at::Device d = (*arg)->device();
    TORCH_CHECK(d == input.device(), op, ": ", name, " is on ", d, " but the ", input_name,
                " are on ", input.device(), "; every tensor argument must be on the ", input_name,
                "' device");
  }
}

int64_t checked_output_bytes(const char* op, at::IntArrayRef sizes, at::ScalarType dtype) {
  uint64_t numel = 1;
  bool overflow = false;
  for (int64_t s : sizes) overflow |= c10::mul_overflows(numel, static_cast<uint64_t>(s), &numel);
  uint64_t bytes = 0;
  overflow |= c10::mul_overflows(numel, static_cast<uint64_t>(c10::elementSize(dtype)), &bytes);
  overflow |= bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  TORCH_CHECK(!overflow, op, ": the output ", sizes, " of ", dtype,
              " has a size in bytes that overflows int64; reduce the batch (N = ", sizes[0],
              "), the crop or the channels");
  return static_cast<int64_t>(bytes);
}

at::Tensor default_output(at::IntArrayRef sizes, const at::TensorOptions& options,
                          at::MemoryFormat format) {
  return at::empty(sizes, options.memory_format(format));
}

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
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16,
              "dtype must be torch.float32, torch.float16 or torch.bfloat16, got ", dtype);
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

  NormalizeFlipPlan plan;
  plan.affine.resize(C);
  for (int64_t c = 0; c < C; ++c) {
    TORCH_CHECK(std[c] > 0, "std[", c, "] must be > 0, got ", std[c]);
    // NaN gave an all-NaN batch, an infinite std an all-zero one.
    TORCH_CHECK(std::isfinite(std[c]), "std[", c, "] must be finite, got ", std[c]);
    TORCH_CHECK(std::isfinite(mean[c]), "mean[", c, "] must be finite, got ", mean[c]);
    plan.affine[c].scale = static_cast<float>(1.0 / (255.0 * std[c]));
    plan.affine[c].bias = static_cast<float>(-mean[c] / std[c]);
  }
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

namespace {

// A table argument of resized_crop lives on the CPU or on the values' device.
void check_table_device(const at::Tensor& values, const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device() == values.device() || t.is_cpu(), "resized_crop: ", name, " is on ",
              t.device(), " but the values are on ", values.device(),
              "; each table argument must be on the values' device or on the CPU");
}

// A flip table as the kernels read it: bool is one byte per element, read as uint8 [N] on
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
                                const std::optional<at::Tensor>& vflip) {
  check_table_device(values, offsets, "offsets");
  check_table_device(values, sizes, "sizes");
  check_table_device(values, boxes, "boxes");
  if (hflip.has_value()) check_table_device(values, *hflip, "hflip");
  if (vflip.has_value()) check_table_device(values, *vflip, "vflip");
}

namespace {

// The arguments that shape resized_crop's output, checked; returns C.
int64_t check_resized_crop_output(int64_t N, at::IntArrayRef size, at::ArrayRef<double> mean,
                                  at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                                  const std::optional<at::Tensor>& vflip, at::ScalarType dtype) {
  TORCH_CHECK(size.size() == 2, "resized_crop: size must be (h, w), got ", size.size(), " values: ", size);
  TORCH_CHECK(size[0] >= 1 && size[1] >= 1 && size[0] <= kMaxCrop && size[1] <= kMaxCrop,
              "resized_crop: size must be (h, w) with 1 <= h, w <= ", kMaxCrop, ", got ", size);
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16,
              "resized_crop: dtype must be torch.float32, torch.float16 or torch.bfloat16, got ", dtype);
  TORCH_CHECK(mean.size() == std.size(), "resized_crop: mean has ", mean.size(), " values but std has ",
              std.size());
  TORCH_CHECK(!mean.empty(), "resized_crop: mean and std need one value per channel, got none");
  const int64_t C = static_cast<int64_t>(mean.size());
  check_flip(hflip, "hflip", N);
  check_flip(vflip, "vflip", N);
  for (int64_t c = 0; c < C; ++c) {
    TORCH_CHECK(std[c] > 0, "std[", c, "] must be > 0, got ", std[c]);
    TORCH_CHECK(std::isfinite(std[c]), "std[", c, "] must be finite, got ", std[c]);
    TORCH_CHECK(std::isfinite(mean[c]), "mean[", c, "] must be finite, got ", mean[c]);
  }
  return C;
}

}  // namespace

ResizedCropPlan plan_resized_crop_output(int64_t N, at::IntArrayRef size, at::ArrayRef<double> mean,
                                         at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                                         const std::optional<at::Tensor>& vflip, at::ScalarType dtype,
                                         bool channels_last, bool antialias,
                                         const at::TensorOptions& options,
                                         const OutputAllocator& allocate) {
  const int64_t C = check_resized_crop_output(N, size, mean, std, hflip, vflip, dtype);
  ResizedCropPlan plan;
  plan.affine.resize(C);
  for (int64_t c = 0; c < C; ++c) {
    plan.affine[c].scale = static_cast<float>(1.0 / (255.0 * std[c]));
    plan.affine[c].bias = static_cast<float>(-mean[c] / std[c]);
  }
  const at::Device device = options.device();
  if (hflip.has_value()) plan.hflip = flip_bytes(*hflip, device);
  if (vflip.has_value()) plan.vflip = flip_bytes(*vflip, device);
  const int64_t h = size[0], w = size[1];
  checked_output_bytes("resized_crop", {N, C, h, w}, dtype);
  plan.out = allocate({N, C, h, w}, options.dtype(dtype),
                      channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
  kernels::ResizedCropArgs& a = plan.args;
  a.hflip = plan.hflip.defined() ? plan.hflip.const_data_ptr<uint8_t>() : nullptr;
  a.vflip = plan.vflip.defined() ? plan.vflip.const_data_ptr<uint8_t>() : nullptr;
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
                                  const OutputAllocator& allocate) {
  check_resized_crop_devices(values, offsets, sizes, boxes, hflip, vflip);
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
  const int64_t C = check_resized_crop_output(N, size, mean, std, hflip, vflip, dtype);

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
                                                  antialias, values.options(), allocate);
  plan.samples = samples;
  plan.args.values = values.const_data_ptr<uint8_t>();
  plan.args.samples = plan.samples.const_data_ptr<int64_t>();
  return plan;
}

namespace {

// Large CPU outputs come from a pool of pre-faulted buffers that a tensor returns when it dies:
// torch's CPU allocator hands out blocks this large straight from mmap, and faulting a fresh
// 154 MiB output in costs more than the kernel itself (benchmarks/NOTES.md, issue 14 item 6).
// Small outputs, and outputs the pool could not keep, use torch's allocator. The pool is one
// per process, bounded (kOutputPoolMaxIdle*), and visible to Python as
// prefetch.ops.output_pool_stats() / release_output_pool() / set_output_pool_limit()
// (docs/custom_ops.md).
constexpr size_t kPooledOutputMinBytes = size_t{1} << 20;
constexpr size_t kOutputPoolMaxIdleBuffers = 2;  // one output with the user, one being written
constexpr size_t kOutputPoolMaxIdleBytes = size_t{512} << 20;

BufferPool& output_pool() {
  // Destroyed at exit; an output that outlives it frees its buffer itself (the lease holds the
  // pool weakly).
  static const std::shared_ptr<BufferPool> pool =
      BufferPool::create(kOutputPoolMaxIdleBuffers, kOutputPoolMaxIdleBytes);
  return *pool;
}


// The pool's Python face (schemas below): stats in a fixed order that prefetch/ops.py names.
std::vector<int64_t> output_pool_stats() {
  const BufferPool::Stats s = output_pool().stats();
  const size_t values[] = {s.idle_buffers,   s.idle_bytes,   s.max_idle_buffers, s.max_idle_bytes,
                           s.in_use_buffers, s.in_use_bytes, s.allocations,      s.reuses};
  return std::vector<int64_t>(std::begin(values), std::end(values));
}

int64_t release_output_pool() { return static_cast<int64_t>(output_pool().release_idle()); }

int64_t set_output_pool_limit(int64_t max_idle_bytes) {
  TORCH_CHECK(max_idle_bytes >= 0, "max_idle_bytes must be >= 0, got ", max_idle_bytes);
  BufferPool& pool = output_pool();
  const int64_t previous = static_cast<int64_t>(pool.stats().max_idle_bytes);
  pool.set_max_idle_bytes(static_cast<size_t>(max_idle_bytes));
  return previous;
}

at::Tensor normalize_flip_cpu(const at::Tensor& images, at::ArrayRef<double> mean,
                              at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                              const std::optional<at::Tensor>& vflip, at::OptionalIntArrayRef crop,
                              const std::optional<at::Tensor>& offsets, int64_t fill,
                              at::ScalarType dtype, c10::string_view layout, bool channels_last,
                              const std::optional<at::Tensor>& indices) {
  NormalizeFlipPlan plan = plan_normalize_flip(images, mean, std, hflip, vflip, crop, offsets, fill,
                                               dtype, std::string(layout), channels_last, indices,
                                               pooled_empty);
  complete_args(&plan, cpu_target());
  const kernels::Geometry& g = plan.args.g;
  const int64_t rows = g.N * g.h;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, g.w * g.C));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    kernels::normalize_flip_cpu(plan.args, begin, end);
  });
  return plan.out;
}

at::Tensor flip_crop_cpu(const at::Tensor& masks, const std::optional<at::Tensor>& hflip,
                         const std::optional<at::Tensor>& vflip, at::OptionalIntArrayRef crop,
                         const std::optional<at::Tensor>& offsets, int64_t fill,
                         const std::optional<at::Tensor>& indices) {
  FlipCropPlan plan = plan_flip_crop(masks, hflip, vflip, crop, offsets, fill, indices, pooled_empty);
  complete_args(&plan, cpu_target());
  const int64_t rows = plan.args.g.N * plan.args.g.h;
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, plan.args.g.w));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    kernels::flip_crop_cpu(plan.args, begin, end);
  });
  return plan.out;
}

at::Tensor resized_crop_cpu(const at::Tensor& values, const at::Tensor& offsets, const at::Tensor& sizes,
                            const at::Tensor& boxes, at::IntArrayRef size, at::ArrayRef<double> mean,
                            at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                            const std::optional<at::Tensor>& vflip, at::ScalarType dtype,
                            bool channels_last, bool antialias) {
  ResizedCropPlan plan = plan_resized_crop(values, offsets, sizes, boxes, size, mean, std, hflip, vflip,
                                           dtype, channels_last, antialias, pooled_empty);
  complete_args(&plan, cpu_target());
  const kernels::ResizedCropArgs& a = plan.args;
  // A row blends a few input rows of the crop's width and then w * C output values: a few
  // hundred rows make a chunk worth a thread.
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, a.w * a.C));
  at::parallel_for(0, a.N * a.h, grain, [&](int64_t begin, int64_t end) {
    kernels::resized_crop_cpu(a, begin, end);
  });
  return plan.out;
}

}  // namespace

at::Tensor pooled_empty(at::IntArrayRef sizes, const at::TensorOptions& options,
                        at::MemoryFormat format) {
  const size_t bytes = static_cast<size_t>(
      checked_output_bytes("prefetch op", sizes, options.dtype().toScalarType()));
  BufferPool& pool = output_pool();
  // An output the pool would free on return gains nothing from it (it would be faulted in
  // twice: once by the pool's memset, once more by nobody), so torch allocates it.
  if (bytes < kPooledOutputMinBytes || bytes > pool.stats().max_idle_bytes) {
    return at::empty(sizes, options.memory_format(format));
  }
  std::shared_ptr<AlignedBuffer> lease = pool.acquire(bytes);
  std::vector<int64_t> strides;
  if (format == at::MemoryFormat::ChannelsLast) {
    auto cl = c10::get_channels_last_strides_2d(sizes);
    strides.assign(cl.begin(), cl.end());
  } else {
    auto contiguous = c10::contiguous_strides(sizes);
    strides.assign(contiguous.begin(), contiguous.end());
  }
  return at::from_blob(
      lease->data(), sizes, strides, [lease](void*) mutable { lease.reset(); }, options);
}

TORCH_LIBRARY(prefetch, m) {
  m.def(
      "normalize_flip(Tensor images, float[] mean, float[] std, Tensor? hflip=None, "
      "Tensor? vflip=None, int[]? crop=None, Tensor? offsets=None, int fill=0, "
      "ScalarType dtype=float, str layout=\"NHWC\", bool channels_last=False, "
      "Tensor? indices=None) -> Tensor");
  m.def(
      "flip_crop(Tensor masks, Tensor? hflip=None, Tensor? vflip=None, int[]? crop=None, "
      "Tensor? offsets=None, int fill=0, Tensor? indices=None) -> Tensor");
  m.def(
      "resized_crop(Tensor values, Tensor offsets, Tensor sizes, Tensor boxes, int[] size, "
      "float[] mean, float[] std, Tensor? hflip=None, Tensor? vflip=None, ScalarType dtype=float, "
      "bool channels_last=False, bool antialias=False) -> Tensor");
  // The CPU output pool's controls (no tensors: one kernel for every backend). Private names;
  // prefetch/ops.py wraps them.
  m.def("_output_pool_stats() -> int[]", &output_pool_stats);
  m.def("_release_output_pool() -> int", &release_output_pool);
  m.def("_set_output_pool_limit(int max_idle_bytes) -> int", &set_output_pool_limit);
}

TORCH_LIBRARY_IMPL(prefetch, CPU, m) {
  m.impl("normalize_flip", &normalize_flip_cpu);
  m.impl("flip_crop", &flip_crop_cpu);
  m.impl("resized_crop", &resized_crop_cpu);
}

}  // namespace prefetch
