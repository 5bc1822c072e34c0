// One CUDA thread's share of flip_crop: kVec consecutive mask elements of one output row.
// __host__ __device__, so the CPU tests run this exact code over every thread index and compare it
// with the CPU kernel (tests/cpp/cuda_thread_work_test.cpp); flip_crop.cu only maps threads onto
// it. The launch numbering and its 32-bit split are every op's (common/launch_split.h).
#pragma once
#include <cstdint>
#include <vector>

#include "common/geometry.h"
#include "common/launch_split.h"
#include "common/thread_memory.h"  // kVec
#include "flip_crop/flip_crop.h"

namespace prefetch {
namespace kernels {

// Rows are (n, y), of w mask elements: normalize_flip's numbering with C = 1.
struct FlipCropLaunch : SampleLaunch {};

inline bool plan_flip_crop_launches(const FlipCropArgs& a, std::vector<FlipCropLaunch>* launches,
                                    int64_t max_work = INT32_MAX) {
  return split_by_samples(a.g.N, a.g.h, a.g.h, a.g.w, max_work, FlipCropLaunch{}, launches);
}

// Thread item t of a flip_crop launch; T is the mask element type (itemsize bytes).
template <typename T>
PF_HD void flip_crop_thread(const FlipCropArgs& a, const FlipCropLaunch& l, uint32_t t) {
  const Geometry& g = a.g;
  uint32_t row, vec, n_local, y;
  l.vecs_per_row.divmod(t, &row, &vec);
  l.h.divmod(row, &n_local, &y);
  const int64_t n = l.n0 + n_local;
  const Window win = sample_window(g, a.offsets, a.hflip, a.vflip, n);
  const int64_t sy = source_row(g, win, y);
  const bool row_inside = sy >= 0 && sy < g.H;
  const T* src = static_cast<const T*>(a.masks) + checked_source(g, n) * g.sN + (row_inside ? sy * g.sH : 0);
  const int32_t first = static_cast<int32_t>(vec) * kVec;
  const int count = l.row_len - first < kVec ? l.row_len - first : kVec;
  int64_t sx = source_col(g, win, first);
  const int64_t step = win.hflip ? -1 : 1;
  T* dst = static_cast<T*>(a.out) + (n * g.h + y) * g.w + first;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int k = 0; k < kVec; ++k) {
    if (k < count) dst[k] = (row_inside && sx >= 0 && sx < g.W) ? src[sx * g.sW] : static_cast<T>(a.fill);
    sx += step;
  }
}

}  // namespace kernels
}  // namespace prefetch
