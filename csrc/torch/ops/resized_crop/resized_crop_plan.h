// resized_crop's plan: a ragged batch and its boxes checked and packed into the kernel's arguments
// (kernels' resized_crop/resized_crop.h), the output allocated. Both registrations run it, and the
// decoding ops (decode_ops.cpp) its output half.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include <optional>
#include <vector>

#include "ops/plan_common.h"
#include "resized_crop/resized_crop.h"

namespace prefetch {

// resized_crop: a ragged batch of HWC uint8 samples (values, offsets, sizes: a prefetch.Ragged)
// with one box per sample, checked on the host (every box inside its image, every sample inside
// `values`) and packed into the kernel's per-sample table.
struct ResizedCropPlan {
  static constexpr const char* kName = "resized_crop";  // in errors
  at::Tensor samples;           // int64 [N, kSampleFields] on the values' device: what the kernel reads
  at::Tensor hflip, vflip;      // uint8 [N] on the values' device, or undefined
  at::Tensor bicubic;           // uint8 [N] on the values' device, or undefined (all bilinear)
  std::vector<kernels::Affine> affine;  // host copy; the CUDA path uploads it past kInlineChannels
  at::Tensor out;
  kernels::ResizedCropArgs args;  // pointers filled except `affine`
};

// "resized_crop: <arg> is on <device> but the values are on <device>" unless each table argument
// is on the CPU or on the values' device. Called first by both registrations, as check_devices.
void check_resized_crop_devices(const at::Tensor& values, const at::Tensor& offsets,
                                const at::Tensor& sizes, const at::Tensor& boxes,
                                const std::optional<at::Tensor>& hflip,
                                const std::optional<at::Tensor>& vflip,
                                const std::optional<at::Tensor>& bicubic);

// resized_crop's output half: checks the size, dtype, mean/std, flips and bicubic table of N samples and fills
// a plan's affine table, flips, output (on options' device) and every argument but the input's
// (values, samples). The decoding ops use it for images they decode themselves.
ResizedCropPlan plan_resized_crop_output(int64_t N, at::IntArrayRef size, at::ArrayRef<double> mean,
                                         at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                                         const std::optional<at::Tensor>& vflip, at::ScalarType dtype,
                                         bool channels_last, bool antialias,
                                         const std::optional<at::Tensor>& bicubic,
                                         const at::TensorOptions& options,
                                         const OutputAllocator& allocate = default_output);

// The tables (offsets, sizes, boxes, flips) may be on the CPU or on the values' device. When
// offsets, sizes or boxes are on a CUDA device they are read on the host once, in one copy of the
// packed [N, 8] table (a host synchronisation): the boxes must be checked before the kernel reads
// the pixels they point to.
ResizedCropPlan plan_resized_crop(const at::Tensor& values, const at::Tensor& offsets,
                                  const at::Tensor& sizes, const at::Tensor& boxes,
                                  at::IntArrayRef size, at::ArrayRef<double> mean,
                                  at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                                  const std::optional<at::Tensor>& vflip, at::ScalarType dtype,
                                  bool channels_last, bool antialias,
                                  const std::optional<at::Tensor>& bicubic,
                                  const OutputAllocator& allocate = default_output);

// What is wrong with plan.args for a kernel on the CPU or (cuda) a CUDA device; empty: complete
// (ops/kernel_args.h, whose complete_args runs it before every launch).
std::vector<std::string> arg_problems(const ResizedCropPlan& plan, bool cuda);

}  // namespace prefetch
