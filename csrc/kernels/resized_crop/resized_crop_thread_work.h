// One CUDA thread's share of resized_crop: kVec consecutive output elements of one output row.
// __host__ __device__, so the CPU tests run this exact code over every thread index and compare
// it with the CPU kernel (tests/cpp/resized_crop_thread_work_test.cpp); resized_crop.cu only maps
// threads onto it. The launch numbering, its 32-bit split and the stores are every op's
// (common/launch_split.h, common/thread_memory.h).
//
// Rows are (n, c, y) of w elements for NCHW output and (n, y) of w * C elements for channels_last,
// so consecutive threads write consecutive elements of a row. A channels_last thread's elements
// walk the channels of a pixel before the next pixel: it computes that pixel's taps once, and reads
// its channels from neighbouring bytes.
#pragma once
#include <cstdint>
#include <vector>

#include "common/launch_split.h"
#include "common/thread_memory.h"
#include "resized_crop/resized_crop.h"
#include "resized_crop/resized_crop_taps.h"

namespace prefetch {
namespace kernels {

using ResizedCropLaunch = ChannelRowsLaunch;

inline bool resized_crop_channels_last(const ResizedCropArgs& a) { return channel_rows_last(a.oC, a.C); }

inline bool plan_resized_crop_launches(const ResizedCropArgs& a,
                                       std::vector<ResizedCropLaunch>* launches,
                                       int64_t max_work = INT32_MAX) {
  return plan_channel_rows(a.N, a.C, a.h, a.w, resized_crop_channels_last(a), max_work, launches);
}

// Crop pixel taps ty x tx of channel c, blended in the CPU kernel's order: each column's y taps
// first (its vertical pass), then the columns (its horizontal pass).
PF_HD float blend(const SampleCrop& crop, int64_t C, const AxisScale& sy, const AxisTaps& ty,
                  const AxisScale& sx, const AxisTaps& tx, int64_t c) {
  const uint8_t* column = crop.origin + ty.first * crop.row_stride + tx.first * C + c;
  float acc = 0.0f;
  for (int64_t jx = 0; jx < tx.count; ++jx) {
    const uint8_t* p = column + jx * C;
    float s = 0.0f;
    for (int64_t ky = 0; ky < ty.count; ++ky) {
      s += tap_weight(sy, ty, ky) * static_cast<float>(load_byte(p + ky * crop.row_stride));
    }
    acc += tap_weight(sx, tx, jx) * s;
  }
  return acc;
}

// Thread item t of launch l (whose channels_last is kChannelsLast). `affine` holds the C
// channels' constants (shared memory on the GPU).
template <typename Conv, bool kChannelsLast>
PF_HD void resized_crop_thread(const ResizedCropArgs& a, const ResizedCropLaunch& l,
                               const Affine* affine, uint32_t t) {
  using T = typename Conv::type;
  const Conv conv;
  const ThreadPlace place = place_thread<kChannelsLast>(l, t);
  const uint32_t y = place.y;
  const int count = place.count;
  const SampleCrop crop = sample_crop(a, place.n);
  const AxisScale sy = axis_scale(crop.height, a.h, a.antialias, crop.bicubic);
  const AxisScale sx = axis_scale(crop.width, a.w, a.antialias, crop.bicubic);
  const AxisTaps ty = axis_taps(sy, crop.vflip ? a.h - 1 - y : y);
  uint32_t x = place.x, c = place.c;
  AxisTaps tx;
  int64_t tx_column = -1;  // the output column tx belongs to
  T values[kVec] = {};
  for (int k = 0; k < kVec; ++k) {
    if (k < count) {
      if (static_cast<int64_t>(x) != tx_column) {
        tx = axis_taps(sx, crop.hflip ? a.w - 1 - x : x);
        tx_column = x;
      }
      float v = blend(crop, a.C, sy, ty, sx, tx, c);
      if (crop.bicubic) v = clamp_pixel(v);
      values[k] = conv(v * affine[c].scale + affine[c].bias);
    }
    if (kChannelsLast) {
      if (++c == l.C.divisor) {
        c = 0;
        ++x;
      }
    } else {
      ++x;
    }
  }
  store_values(static_cast<T*>(a.out) + output_offset<kChannelsLast>(place, a.oN, a.oY, a.oC), values, count);
}

}  // namespace kernels
}  // namespace prefetch
