// What every op's plan shares (a plan: an op's arguments checked and turned into its kernel's
// arguments, in code the CPU and CUDA registrations both run): the device check, the output's
// size, its allocation, and the checks and descriptions every image op repeats. Every error
// prints the values it got.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/float_outputs.h"

namespace prefetch {

// The largest crop (h, w) and resized output side the ops accept.
constexpr int64_t kMaxCrop = 65535;

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

// Allocates an op's output: torch's allocator by default, a buffer pool on the CPU.
using OutputAllocator =
    std::function<at::Tensor(at::IntArrayRef, const at::TensorOptions&, at::MemoryFormat)>;
at::Tensor default_output(at::IntArrayRef sizes, const at::TensorOptions& options,
                          at::MemoryFormat format);

// "[2, 3]": a tensor's shape, for error messages.
std::string shape_of(const at::Tensor& t);

// A flip argument: a bool tensor [N] = [n] or none; a RuntimeError naming it otherwise.
void check_flip(const std::optional<at::Tensor>& flip, const char* name, int64_t n);

// mean and std, one value per channel (the caller has checked that they have as many): every std
// > 0 and finite, every mean finite; a RuntimeError naming the first channel that is not. Both
// image ops check them the same way.
void check_mean_std(at::ArrayRef<double> mean, at::ArrayRef<double> std);

// The kernels' per-channel affine map of checked mean and std: x -> x * scale + bias equals
// (x / 255 - mean) / std.
std::vector<kernels::Affine> affine_of(at::ArrayRef<double> mean, at::ArrayRef<double> std);

// The kernels' name of an output dtype (float32, float16, bfloat16 or uint8: the plans check it
// with check_out_dtype).
kernels::OutDType out_dtype(at::ScalarType dtype);
void check_out_dtype(const char* op, at::ScalarType dtype);

// An image op's [N, C, h, w] float output, as the kernels' arguments describe it.
template <typename Args>
void set_output(Args* a, const at::Tensor& out, at::ScalarType dtype) {
  a->out = out.data_ptr();
  a->dtype = out_dtype(dtype);
  a->oN = out.stride(0);
  a->oC = out.stride(1);
  a->oY = out.stride(2);
  a->oX = out.stride(3);
}

// The ops over uint8 [N, C, H, W] images (affine_warp, sharpness, lookup): their per-image tensor
// `other` (named `name`) on the images' device and the images uint8 and 4-D, or a RuntimeError
// naming `op` and what it got. The CUDA registrations call it before their device guard too.
void check_uint8_images(const char* op, const at::Tensor& images, const at::Tensor& other, const char* name);

// An op's kernel arguments for its uint8 images [N, C, H, W] (any strides).
template <typename Args>
void set_uint8_inputs(Args* a, const at::Tensor& images) {
  a->images = images.const_data_ptr<uint8_t>();
  a->N = images.size(0), a->C = images.size(1), a->H = images.size(2), a->W = images.size(3);
  a->sN = images.stride(0), a->sC = images.stride(1), a->sH = images.stride(2), a->sW = images.stride(3);
}

// Those ops' kernel arguments for the images (any strides) and the contiguous uint8 output.
template <typename Args>
void set_uint8_images(Args* a, const at::Tensor& images, const at::Tensor& out) {
  set_uint8_inputs(a, images);
  a->out = out.data_ptr<uint8_t>();
}

// An op from uint8 images [N, C, H, W] to new ones of their shape: plan->out allocated contiguous by
// `allocate` (a RuntimeError naming `op` when its byte count overflows int64) and plan->args set for
// the images and the output (set_uint8_images).
template <typename Plan>
void plan_uint8_output(Plan* plan, const char* op, const at::Tensor& images, const OutputAllocator& allocate) {
  const int64_t N = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  checked_output_bytes(op, {N, C, H, W}, at::kByte);
  plan->out = allocate({N, C, H, W}, images.options(), at::MemoryFormat::Contiguous);
  set_uint8_images(&plan->args, images, plan->out);
}

// The plan of such an op whose kernel reads one more tensor of per-image values (a derived struct
// names the op, `kName`, and says what `values` holds): `values` made contiguous (what the
// kernel's argument points into), the output and the kernel's arguments.
template <typename Args>
struct Uint8ValuesPlan {
  at::Tensor values;
  at::Tensor out;
  Args args;
};

}  // namespace prefetch
