// lookup, torch-free: each uint8 value of a batch replaced by its image's (and channel's) table
// entry — every photometric op of the augmentation policies that maps a value alone (Brightness,
// Contrast once its image's mean is known, Posterize, Solarize, AutoContrast once its channel's
// range is known, Equalize once its histogram is) is one 256-entry table per image, which
// prefetch/transforms/policy_ops.py builds with torchvision's arithmetic. Arguments as raw
// pointers and sizes, a CPU implementation over a range of output rows (the torch layer
// parallelises it), and a CUDA launcher on a stream.
#pragma once
#include <cstdint>

namespace prefetch {
namespace kernels {

constexpr int64_t kLookupEntries = 256;

struct LookupArgs {
  const uint8_t* images = nullptr;  // [N, C, H, W], any strides (in elements)
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t sN = 0, sC = 0, sH = 0, sW = 0;
  const uint8_t* tables = nullptr;  // [N, T, 256] contiguous, T = 1 (one per image) or C
  int64_t T = 1;
  uint8_t* out = nullptr;           // [N, C, H, W] contiguous
};

// Output rows are (n, c, y) triples, numbered (n * C + c) * H + y.
void lookup_cpu(const LookupArgs& args, int64_t row_begin, int64_t row_end);

// Launch on `stream` (a cudaStream_t); defined in lookup.cu. Returns a cudaError_t.
int lookup_cuda(const LookupArgs& args, void* stream);

}  // namespace kernels
}  // namespace prefetch
