// One CUDA thread's share of each fused op (normalize_flip, flip_crop): kVec consecutive output
// elements of one output row. __host__ __device__, so the CPU tests run this exact code over
// every thread index and compare it with the CPU kernels; normalize_flip.cu only maps threads
// onto it.
//
// The work of a launch is numbered t = row * vecs_per_row + vec, in 32 bits, with every division
// by a launch-wide constant done by FastDivmod. A batch whose numbering would not fit in 32 bits
// is split by samples into several launches (plan_*_launches).
#pragma once
#include <cstdint>
#include <cstdio>
#include <vector>

#include "fast_divmod.h"
#include "geometry.h"
#include "normalize_flip.h"

namespace prefetch {
namespace kernels {

constexpr int kVec = 8;  // output elements per thread: one 16-byte store for 16-bit outputs

// The first kInlineChannels channels' constants, a kernel argument.
struct AffineTable {
  Affine c[kInlineChannels];
};

// A launch's by-value table for C channels: the host table's values for C <= kInlineChannels (the
// kernel reads no other), nothing for more (the kernel reads `device`). False when the table the
// kernel would read is unset: the launchers then refuse rather than read a null pointer.
inline bool launch_affine_table(const Affine* host, const Affine* device, int64_t C, AffineTable* table) {
  *table = AffineTable{};
  if (C > kInlineChannels) return device != nullptr;
  if (host == nullptr) return false;
  for (int64_t c = 0; c < C; ++c) table->c[c] = host[c];
  return true;
}

// One launch: samples [n0, n0 + samples) of the batch. What every op's launch holds.
struct SampleLaunch {
  int64_t n0 = 0, samples = 0;
  uint32_t work = 0;           // rows * vecs_per_row, the thread items of this launch
  FastDivmod vecs_per_row;     // t -> (row, vec)
  FastDivmod h;                // row -> (rest, y)
  int32_t row_len = 0;         // output elements per row
};

struct NormalizeFlipLaunch : SampleLaunch {
  FastDivmod C;                // NCHW: rest -> (n, c); channels_last: element -> (x, c)
  bool channels_last = false;  // rows of w * C elements instead of w
};

// Fills `launches` with copies of `prototype` covering N samples of `rows_per_sample` rows of
// `row_len` elements (h rows per image), each launch numbering at most `max_work` thread items
// (the tests pass a small bound to exercise the split). False when a single sample's items, or
// a row, do not fit in that numbering (outside anything the ops accept).
template <typename Launch>
inline bool split_by_samples(int64_t N, int64_t h, int64_t rows_per_sample, int64_t row_len,
                             int64_t max_work, Launch prototype, std::vector<Launch>* launches) {
  launches->clear();
  if (N == 0 || rows_per_sample == 0 || row_len == 0) return true;
  const int64_t vecs = (row_len + kVec - 1) / kVec;
  const int64_t work_per_sample = rows_per_sample * vecs;
  if (work_per_sample > max_work || row_len > INT32_MAX - kVec) return false;
  const int64_t per_launch = max_work / work_per_sample;
  prototype.vecs_per_row = FastDivmod(static_cast<uint32_t>(vecs));
  prototype.h = FastDivmod(static_cast<uint32_t>(h));
  prototype.row_len = static_cast<int32_t>(row_len);
  for (int64_t n0 = 0; n0 < N; n0 += per_launch) {
    Launch l = prototype;
    l.n0 = n0;
    l.samples = N - n0 < per_launch ? N - n0 : per_launch;
    l.work = static_cast<uint32_t>(l.samples * work_per_sample);
    launches->push_back(l);
  }
  return true;
}

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

// The message of the device-side assertion a bad gather index raises (tests match it).
#define PF_GATHER_INDEX_ASSERTION "prefetch: a gather index is out of range (indices must lie in [0, samples))"

// The gathered sample, checked on the device: the op cannot check a device index tensor without
// a host synchronisation, and a bad index must stop the kernel, never read another allocation
// (the contract of torch's own index kernels' device-side assertions). The CPU op checks indices
// before it runs. The values are printed, then a device-side assertion fails, as torch's
// CUDA_KERNEL_ASSERT does (whatever NDEBUG says): the runtime flushes the kernel's printf buffer
// and the host's next call raises cudaErrorAssert ("device-side assert triggered"). __trap(),
// used before, ended the kernel with the buffer unflushed: the message was usually lost.
PF_HD int64_t checked_source(const Geometry& g, int64_t n) {
  const int64_t s = source_sample(g, n);
#if defined(__CUDA_ARCH__)
  if (g.rows != nullptr && (s < 0 || s >= g.sources)) {
    printf("prefetch: indices[%lld] = %lld is out of range for %lld samples\n",
           static_cast<long long>(n), static_cast<long long>(s), static_cast<long long>(g.sources));
    __assert_fail(PF_GATHER_INDEX_ASSERTION, __FILE__, __LINE__, __func__);
  }
#endif
  return s;
}

PF_HD uint8_t load_byte(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}

struct ToFloat32 {
  using type = float;
  PF_HD float operator()(float v) const { return v; }
};
struct ToFloat16 {
  using type = uint16_t;
  PF_HD uint16_t operator()(float v) const { return float_to_half_bits(v); }
};
struct ToBFloat16 {
  using type = uint16_t;
  PF_HD uint16_t operator()(float v) const { return float_to_bfloat16_bits(v); }
};

// Stores `count` values; all kVec of them with 16-byte stores where `dst` is aligned for it.
PF_HD void store_values(float* dst, const float (&v)[kVec], int count) {
#if defined(__CUDA_ARCH__)
  if (count == kVec && (reinterpret_cast<uintptr_t>(dst) & 15u) == 0) {
    reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
    return;
  }
#endif
  for (int k = 0; k < kVec; ++k)
    if (k < count) dst[k] = v[k];
}
PF_HD void store_values(uint16_t* dst, const uint16_t (&v)[kVec], int count) {
#if defined(__CUDA_ARCH__)
  if (count == kVec && (reinterpret_cast<uintptr_t>(dst) & 15u) == 0) {
    uint4 packed;
    packed.x = static_cast<uint32_t>(v[0]) | (static_cast<uint32_t>(v[1]) << 16);
    packed.y = static_cast<uint32_t>(v[2]) | (static_cast<uint32_t>(v[3]) << 16);
    packed.z = static_cast<uint32_t>(v[4]) | (static_cast<uint32_t>(v[5]) << 16);
    packed.w = static_cast<uint32_t>(v[6]) | (static_cast<uint32_t>(v[7]) << 16);
    *reinterpret_cast<uint4*>(dst) = packed;
    return;
  }
#endif
  for (int k = 0; k < kVec; ++k)
    if (k < count) dst[k] = v[k];
}

// Where thread item t of a launch with an output-channel split (NormalizeFlipLaunch, or any
// launch with `C`) writes: its sample, output row and first vector, and for NCHW its channel.
struct ThreadPlace {
  int64_t n;
  uint32_t y, vec, c_row;
};

template <bool kChannelsLast, typename Launch>
PF_HD ThreadPlace place_thread(const Launch& l, uint32_t t) {
  uint32_t row, vec, rest, y, n_local, c_row = 0;
  l.vecs_per_row.divmod(t, &row, &vec);
  l.h.divmod(row, &rest, &y);
  if (kChannelsLast) {
    n_local = rest;
  } else {
    l.C.divmod(rest, &n_local, &c_row);
  }
  return {l.n0 + n_local, y, vec, c_row};
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


// flip_crop: rows are (n, y), of w mask elements; the same numbering with C = 1.
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
