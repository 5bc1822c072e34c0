// Argument checking and kernel-argument preparation shared by the CPU and CUDA registrations of
// the fused ops. Every error prints the values it got.
#pragma once
#include <ATen/ATen.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "flip_crop/flip_crop.h"
#include "normalize_flip/normalize_flip.h"
#include "resized_crop/resized_crop.h"

namespace prefetch {

constexpr int64_t kMaxCrop = 65535;
// The bound (exclusive) on an input's height and width: with offsets clamped to the window's reach (geometry.h),
// every index sum of the kernels then stays below 2^63.
constexpr int64_t kMaxInputSide = int64_t{1} << 62;

// "<op>: <arg> is on <device> but the <input_name> are on <device>" unless every tensor argument
// is on the input's device (meta included, as torch's TensorIterator ops require). Called first by
// both registrations: the CUDA one before its device guard, which a CPU input would fail obscurely.
void check_devices(const char* op, const at::Tensor& input, const char* input_name,
                   const std::optional<at::Tensor>& hflip, const std::optional<at::Tensor>& vflip,
                   const std::optional<at::Tensor>& offsets,
                   const std::optional<at::Tensor>& indices);

// The byte size of an output of `sizes` and `dtype`; a RuntimeError naming them when the element
// count or the byte count overflows int64 (as a stride-0 expanded input can ask for).
int64_t checked_output_bytes(const char* op, at::IntArrayRef sizes, at::ScalarType dtype);

// Flip and offset tensors in the form the kernels read: uint8 [N] and int64 [N, 2], contiguous,
// on the images' device. Kept alive for as long as the kernel may read them.
struct GeometryInputs {
  kernels::Geometry g;
  at::Tensor hflip, vflip, offsets, rows;  // rows: int64 [N] gather indices, or undefined
  const uint8_t* hflip_ptr() const { return hflip.defined() ? hflip.const_data_ptr<uint8_t>() : nullptr; }
  const uint8_t* vflip_ptr() const { return vflip.defined() ? vflip.const_data_ptr<uint8_t>() : nullptr; }
  const int64_t* offsets_ptr() const {
    return offsets.defined() ? offsets.const_data_ptr<int64_t>() : nullptr;
  }
};

struct NormalizeFlipPlan {
  GeometryInputs geometry;
  std::vector<kernels::Affine> affine;  // host copy; the CUDA path uploads it
  at::Tensor out;
  kernels::NormalizeFlipArgs args;  // pointers filled except `affine`
};

// Allocates an op's output: torch's allocator by default, a buffer pool on the CPU.
using OutputAllocator =
    std::function<at::Tensor(at::IntArrayRef, const at::TensorOptions&, at::MemoryFormat)>;
at::Tensor default_output(at::IntArrayRef sizes, const at::TensorOptions& options,
                          at::MemoryFormat format);

NormalizeFlipPlan plan_normalize_flip(const at::Tensor& images, at::ArrayRef<double> mean,
                                      at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                                      const std::optional<at::Tensor>& vflip,
                                      at::OptionalIntArrayRef crop,
                                      const std::optional<at::Tensor>& offsets, int64_t fill,
                                      at::ScalarType dtype, const std::string& layout,
                                      bool channels_last,
                                      const std::optional<at::Tensor>& indices,
                                      const OutputAllocator& allocate = default_output);

struct FlipCropPlan {
  GeometryInputs geometry;
  at::Tensor out;
  kernels::FlipCropArgs args;
};

FlipCropPlan plan_flip_crop(const at::Tensor& masks, const std::optional<at::Tensor>& hflip,
                            const std::optional<at::Tensor>& vflip, at::OptionalIntArrayRef crop,
                            const std::optional<at::Tensor>& offsets, int64_t fill,
                            const std::optional<at::Tensor>& indices,
                            const OutputAllocator& allocate = default_output);

// resized_crop: a ragged batch of HWC uint8 samples (values, offsets, sizes: a prefetch.Ragged)
// with one box per sample, checked on the host (every box inside its image, every sample inside
// `values`) and packed into the kernel's per-sample table.
struct ResizedCropPlan {
  at::Tensor samples;           // int64 [N, kSampleFields] on the values' device: what the kernel reads
  at::Tensor hflip, vflip;      // uint8 [N] on the values' device, or undefined
  std::vector<kernels::Affine> affine;  // host copy; the CUDA path uploads it past kInlineChannels
  at::Tensor out;
  kernels::ResizedCropArgs args;  // pointers filled except `affine`
};

// "resized_crop: <arg> is on <device> but the values are on <device>" unless each table argument
// is on the CPU or on the values' device. Called first by both registrations, as check_devices.
void check_resized_crop_devices(const at::Tensor& values, const at::Tensor& offsets,
                                const at::Tensor& sizes, const at::Tensor& boxes,
                                const std::optional<at::Tensor>& hflip,
                                const std::optional<at::Tensor>& vflip);

// resized_crop's output half: checks the size, dtype, mean/std and flips of N samples and fills
// a plan's affine table, flips, output (on options' device) and every argument but the input's
// (values, samples). The decoding ops use it for images they decode themselves.
ResizedCropPlan plan_resized_crop_output(int64_t N, at::IntArrayRef size, at::ArrayRef<double> mean,
                                         at::ArrayRef<double> std, const std::optional<at::Tensor>& hflip,
                                         const std::optional<at::Tensor>& vflip, at::ScalarType dtype,
                                         bool channels_last, bool antialias,
                                         const at::TensorOptions& options,
                                         const OutputAllocator& allocate = default_output);

// An op's CPU output: from the process's pool of pre-faulted buffers when large (ops.cpp).
at::Tensor pooled_empty(at::IntArrayRef sizes, const at::TensorOptions& options, at::MemoryFormat format);

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
                                  const OutputAllocator& allocate = default_output);

}  // namespace prefetch
