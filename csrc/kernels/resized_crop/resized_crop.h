// resized_crop, torch-free: each sample of a ragged batch of HWC uint8 images is cropped to its
// box, resized bilinearly or bicubically to one output size (torch's F.interpolate,
// align_corners=False, with or without antialias), flipped, normalized and cast in one pass. A CPU implementation over a range
// of output rows (the torch layer parallelises it) and a CUDA launcher on a stream.
#pragma once
#include <cstdint>

#include "common/float_outputs.h"

namespace prefetch {
namespace kernels {

// The columns of ResizedCropArgs::samples, one row per sample: where its H x W x C bytes start
// in `values`, its size, and its box.
enum SampleField : int {
  kOffset = 0, kHeight, kWidth, kChannels, kTop, kLeft, kBoxHeight, kBoxWidth, kSampleFields
};

struct ResizedCropArgs {
  // The ragged input: sample n's H x W x C bytes start at values + samples[n][kOffset]. Every
  // table is in the memory the kernel runs on (host for the CPU kernel, device for the CUDA one).
  const uint8_t* values = nullptr;
  const int64_t* samples = nullptr;  // [N, kSampleFields], boxes inside their images: the torch
                                     // layer checks, the kernels do not
  const uint8_t* hflip = nullptr;    // [N] or null: mirror the output's columns
  const uint8_t* vflip = nullptr;    // [N] or null: mirror the output's rows
  const uint8_t* bicubic = nullptr;  // [N] or null: resize the sample bicubically, not bilinearly
  int64_t N = 0, C = 1;              // samples; channels of every sample
  int64_t h = 0, w = 0;              // output size
  bool antialias = false;
  const Affine* affine = nullptr;         // [C], host memory, as NormalizeFlipArgs::affine
  const Affine* affine_device = nullptr;  // [C] on the device, read for C > kInlineChannels
  void* out = nullptr;
  OutDType dtype = OutDType::kFloat32;
  int64_t oN = 0, oC = 0, oY = 0, oX = 0;  // output strides, elements
};

// Where sample n's crop lies: its pixel (0, 0) and the input's row stride, in elements.
struct SampleCrop {
  const uint8_t* origin = nullptr;
  int64_t row_stride = 0;
  int64_t height = 0, width = 0;
  bool hflip = false, vflip = false;
  bool bicubic = false;
};

PF_HD SampleCrop sample_crop(const ResizedCropArgs& a, int64_t n) {
  SampleCrop s;
  const int64_t* row = a.samples + kSampleFields * n;
  s.row_stride = row[kWidth] * a.C;
  s.origin = a.values + row[kOffset] + row[kTop] * s.row_stride + row[kLeft] * a.C;
  s.height = row[kBoxHeight];
  s.width = row[kBoxWidth];
  s.hflip = a.hflip != nullptr && a.hflip[n] != 0;
  s.vflip = a.vflip != nullptr && a.vflip[n] != 0;
  s.bicubic = a.bicubic != nullptr && a.bicubic[n] != 0;
  return s;
}

// Output rows are (n, y) pairs, numbered n * h + y.
void resized_crop_cpu(const ResizedCropArgs& args, int64_t row_begin, int64_t row_end);

// Launch on `stream` (a cudaStream_t); defined in resized_crop.cu. Returns a cudaError_t.
int resized_crop_cuda(const ResizedCropArgs& args, void* stream);

}  // namespace kernels
}  // namespace prefetch
