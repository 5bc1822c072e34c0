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

using NormalizeFlipLaunch = ChannelRowsLaunch;

inline bool channels_last_rows(const NormalizeFlipArgs& a) { return channel_rows_last(a.oC, a.g.C); }

inline bool plan_normalize_flip_launches(const NormalizeFlipArgs& a,
                                         std::vector<NormalizeFlipLaunch>* launches,
                                         int64_t max_work = INT32_MAX) {
  const Geometry& g = a.g;
  return plan_channel_rows(g.N, g.C, g.h, g.w, channels_last_rows(a), max_work, launches);
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
  const int count = place.count;
  const Window win = sample_window(g, a.offsets, a.hflip, a.vflip, n);
  const int64_t sy = source_row(g, win, place.y);
  const bool row_inside = sy >= 0 && sy < g.H;
  const uint8_t* src = a.images + checked_source(g, n) * g.sN + (row_inside ? sy * g.sH : 0);
  uint32_t c = place.c;
  int64_t sx = source_col(g, win, place.x);
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
  store_values(static_cast<T*>(a.out) + output_offset<kChannelsLast>(place, a.oN, a.oY, a.oC), values, count);
}

}  // namespace kernels
}  // namespace prefetch
