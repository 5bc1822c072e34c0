// flip_crop, torch-free: each integer mask of a batch is cropped to its window, flipped and
// optionally gathered, with the window, flips and gather of normalize_flip, so that a segmentation
// mask follows its image pixel for pixel. Elements are moved, never computed on: no
// normalization, no float conversion, hence no AVX2 twin (the baseline build's copy loops are all
// the CPU needs). Arguments as raw pointers and sizes, a CPU implementation over a range of output
// rows (the torch layer parallelises it), and a CUDA launcher on a stream.
//
// Its own folder, although it shares normalize_flip's geometry and launch numbering: those live in
// common/ (geometry.h, launch_split.h) because two ops use them, and what is flip_crop's alone (the
// mask element types, launches of C = 1 rows, a copy without arithmetic) is then found under its
// own name, as every op's is. Inside normalize_flip's files it would be an exception to the rule
// "one folder per op" that every reader, and every new op, would have to learn.
#pragma once
#include <cstdint>

#include "common/geometry.h"

namespace prefetch {
namespace kernels {

struct FlipCropArgs {
  const void* masks = nullptr;  // [N, H, W] elements of `itemsize` bytes
  int itemsize = 1;
  Geometry g;                   // C = 1
  const int64_t* offsets = nullptr;
  const uint8_t* hflip = nullptr;
  const uint8_t* vflip = nullptr;
  int64_t fill = 0;
  void* out = nullptr;          // [N, h, w] contiguous
};

// The element type of a mask of `bytes`-byte elements, for the CPU and CUDA flip_crop alike: the
// op only moves elements, never computes on them, so every dtype of a size is one of these. Calls
// f(T{}) with it and returns true; false for a size no kernel is instantiated for. Host code only
// (it picks a template instantiation), hence not PF_HD.
template <typename F>
inline bool with_mask_element(int bytes, F&& f) {
  if (bytes == 1) f(uint8_t{});
  else if (bytes == 2) f(int16_t{});
  else if (bytes == 4) f(int32_t{});
  else if (bytes == 8) f(int64_t{});
  else return false;
  return true;
}

// Output rows are (n, y) pairs, numbered n * h + y.
void flip_crop_cpu(const FlipCropArgs& args, int64_t row_begin, int64_t row_end);

// Launch on `stream` (a cudaStream_t); defined in flip_crop.cu. Returns a cudaError_t.
int flip_crop_cuda(const FlipCropArgs& args, void* stream);

}  // namespace kernels
}  // namespace prefetch
