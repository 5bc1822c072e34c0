// The torch side of the crop window (kernels' common/geometry.h) that normalize_flip and flip_crop
// share: an input's flips, offsets and gather indices checked and turned into the tensors and
// Geometry the kernels read.
#pragma once
#include <ATen/core/Tensor.h>

#include <optional>

#include "common/geometry.h"

namespace prefetch {

// The bound (exclusive) on an input's height and width: with offsets clamped to the window's reach
// (geometry.h), every index sum of the kernels then stays below 2^63.
constexpr int64_t kMaxInputSide = int64_t{1} << 62;

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

// Checks the flips, crop, offsets and gather indices of an input of `sources` samples of H x W
// and returns them with the Geometry they describe; the caller fills in C and the strides.
GeometryInputs geometry_inputs(int64_t sources, int64_t H, int64_t W,
                               const std::optional<at::Tensor>& hflip,
                               const std::optional<at::Tensor>& vflip, at::OptionalIntArrayRef crop,
                               const std::optional<at::Tensor>& offsets,
                               const std::optional<at::Tensor>& indices);

}  // namespace prefetch
