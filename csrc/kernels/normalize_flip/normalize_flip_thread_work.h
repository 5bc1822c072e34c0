// One CUDA thread's share of normalize_flip: kVec consecutive output elements of one output row.
// __host__ __device__, so the CPU tests run this exact code over every thread index and compare it
// with the CPU kernel (tests/cpp/cuda_thread_work_test.cpp); normalize_flip.cu only maps threads
// onto it. The launch numbering and its 32-bit split are every op's (common/launch_split.h).
#pragma once
#include <cstdint>
#include <vector>

#include "common/geometry.h"
#include "common/launch_split.h"
#include "common/thread_memory.h"
#include "normalize_flip/normalize_flip.h"

namespace prefetch {
namespace kernels {

struct NormalizeFlipLaunch : SampleLaunch {
  FastDivmod C;                // NCHW: rest -> (n, c); channels_last: element -> (x, c)
  bool channels_last = false;  // rows of w * C elements instead of w
};

// Output rows are contiguous in memory: (n, c, y) rows of w elements for NCHW, or (n, y) rows of
// w * C elements (x major, c minor) for channels_last; the op allocates outputs so.
inline bool channels_last_rows(const NormalizeFlipArgs& a) { return a.oC == 1 && a.g.C > 1; }

inline bool plan_normalize_flip_launches(const NormalizeFlipArgs& a,
                                         std::vector<NormalizeFlipLaunch>* launches,
                                         int64_t max_work = INT32_MAX) {
  const Geometry& g = a.g;
  NormalizeFlipLaunch prototype;
  prototype.channels_last = channels_last_rows(a);
  prototype.C = FastDivmod(static_cast<uint32_t>(g.C > 0 ? g.C : 1));
  const int64_t row_len = prototype.channels_last ? g.w * g.C : g.w;
  const int64_t rows_per_sample = prototype.channels_last ? g.h : g.C * g.h;
  return split_by_samples(g.N, g.h, rows_per_sample, row_len, max_work, prototype, launches);
}

// Thread item t of launch l (whose channels_last is kChannelsLast). `affine` holds the C
// channels' constants (shared memory on the GPU).
template <typename Conv, bool kChannelsLast>
PF_HD void normalize_flip_thread(const NormalizeFlipArgs& a, const NormalizeFlipLaunch& l,
                                 const Affine* affine, uint32_t t) {
  using T = typename Conv::type;
  const Conv conv;
  const Geometry& g = a.g;
  const ThreadPlace place = place_thread<kChannelsLast>(l, t);
  const int64_t n = place.n;
  const uint32_t y = place.y, vec = place.vec, c_row = place.c_row;
  const Window win = sample_window(g, a.offsets, a.hflip, a.vflip, n);
  const int64_t sy = source_row(g, win, y);
  const bool row_inside = sy >= 0 && sy < g.H;
  const uint8_t* src = a.images + checked_source(g, n) * g.sN + (row_inside ? sy * g.sH : 0);
  const int32_t first = static_cast<int32_t>(vec) * kVec;
  const int count = l.row_len - first < kVec ? l.row_len - first : kVec;
  // The first element's column and channel; the loop steps them without dividing again.
  uint32_t x, c;
  if (kChannelsLast) {
    l.C.divmod(static_cast<uint32_t>(first), &x, &c);
  } else {
    x = static_cast<uint32_t>(first);
    c = c_row;
  }
  int64_t sx = source_col(g, win, x);
  const int64_t step = win.hflip ? -1 : 1;
  T values[kVec] = {};
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int k = 0; k < kVec; ++k) {
    if (k < count) {
      const bool inside = row_inside && sx >= 0 && sx < g.W;
      const uint8_t px = inside ? load_byte(src + sx * g.sW + static_cast<int64_t>(c) * g.sC) : a.fill;
      values[k] = conv(normalize(px, affine[c]));
    }
    if (kChannelsLast) {
      if (++c == l.C.divisor) {
        c = 0;
        sx += step;
      }
    } else {
      sx += step;
    }
  }
  T* dst = static_cast<T*>(a.out) + n * a.oN + static_cast<int64_t>(y) * a.oY +
           (kChannelsLast ? 0 : static_cast<int64_t>(c_row) * a.oC) + first;
  store_values(dst, values, count);
}

}  // namespace kernels
}  // namespace prefetch
