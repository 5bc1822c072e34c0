// The CPU registration of the augment ops: each op's plan (the checks and the kernel's arguments,
// shared with the CUDA registration, ops_cuda.cpp) completed for the CPU, its torch-free kernel
// run over ranges of output rows with at::parallel_for, and its output from the output pool.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <string>

#include "ops/affine_warp_plan.h"
#include "ops/color_jitter_plan.h"
#include "ops/flip_crop_plan.h"
#include "ops/histogram_plan.h"
#include "ops/kernel_args.h"
#include "ops/lookup_plan.h"
#include "ops/normalize_flip_plan.h"
#include "ops/output_pool.h"
#include "ops/resized_crop_plan.h"
#include "ops/sharpness_plan.h"

namespace prefetch {

namespace {

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

at::Tensor affine_warp_cpu(const at::Tensor& images, const at::Tensor& matrices, bool bilinear,
                           const std::optional<at::ArrayRef<double>>& fill) {
  AffineWarpPlan plan = plan_affine_warp(images, matrices, bilinear, fill, pooled_empty);
  complete_args(&plan, cpu_target());
  const kernels::AffineWarpArgs& a = plan.args;
  // A pixel costs a few dozen operations per channel: a few thousand pixels make a chunk.
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, a.W));
  at::parallel_for(0, a.N * a.H, grain, [&](int64_t begin, int64_t end) {
    kernels::affine_warp_cpu(a, begin, end);
  });
  return plan.out;
}

at::Tensor sharpness_cpu(const at::Tensor& images, const at::Tensor& factors) {
  SharpnessPlan plan = plan_sharpness(images, factors, pooled_empty);
  complete_args(&plan, cpu_target());
  const kernels::SharpnessArgs& a = plan.args;
  // A row is W values of a 3x3 sum and a blend: a few thousand values make a chunk.
  const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, a.W));
  at::parallel_for(0, a.N * a.C * a.H, grain, [&](int64_t begin, int64_t end) {
    kernels::sharpness_cpu(a, begin, end);
  });
  return plan.out;
}

at::Tensor lookup_cpu(const at::Tensor& images, const at::Tensor& tables) {
  LookupPlan plan = plan_lookup(images, tables, pooled_empty);
  complete_args(&plan, cpu_target());
  const kernels::LookupArgs& a = plan.args;
  // A row is W table reads: tens of thousands make a chunk worth a thread.
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, a.W));
  at::parallel_for(0, a.N * a.C * a.H, grain, [&](int64_t begin, int64_t end) {
    kernels::lookup_cpu(a, begin, end);
  });
  return plan.out;
}

at::Tensor color_jitter_cpu(const at::Tensor& images, const at::Tensor& steps, const at::Tensor& factors) {
  ColorJitterPlan plan = plan_color_jitter(images, steps, factors, pooled_empty);
  complete_args(&plan, cpu_target());
  const kernels::ColorJitterArgs& a = plan.args;
  // By images: an image's Contrast steps need its whole grey sum before its pixels.
  at::parallel_for(0, a.N, 1, [&](int64_t begin, int64_t end) { kernels::color_jitter_cpu(a, begin, end); });
  return plan.out;
}

at::Tensor histograms_cpu(const at::Tensor& images) {
  HistogramPlan plan = plan_histogram(images);
  complete_args(&plan, cpu_target());
  const kernels::HistogramArgs& a = plan.args;
  // By planes: each counts into its own tables; tens of thousands of values make one worth a thread.
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, a.H * a.W));
  at::parallel_for(0, a.N * a.C, grain, [&](int64_t begin, int64_t end) { kernels::histogram_cpu(a, begin, end); });
  return plan.out;
}

}  // namespace

TORCH_LIBRARY_IMPL(prefetch, CPU, m) {
  m.impl("normalize_flip", &normalize_flip_cpu);
  m.impl("flip_crop", &flip_crop_cpu);
  m.impl("resized_crop", &resized_crop_cpu);
  m.impl("affine_warp", &affine_warp_cpu);
  m.impl("sharpness", &sharpness_cpu);
  m.impl("lookup", &lookup_cpu);
  m.impl("color_jitter", &color_jitter_cpu);
  m.impl("histograms", &histograms_cpu);
}

}  // namespace prefetch
