// How every op numbers its CUDA threads. The work of a launch is numbered t = row * vecs_per_row +
// vec, in 32 bits, each thread item writing kVec consecutive elements of one output row, with every
// division by a launch-wide constant done by FastDivmod. A batch whose numbering would not fit in
// 32 bits is split by samples into several launches (each op's plan_<op>_launches calls
// split_by_samples). __host__ __device__ where a thread runs it, so the CPU tests number threads as
// the GPU does.
#pragma once
#include <cstdint>
#include <vector>

#include "common/fast_divmod.h"
#include "common/host_device.h"
#include "common/thread_memory.h"  // kVec

namespace prefetch {
namespace kernels {

// One launch: samples [n0, n0 + samples) of the batch. What every op's launch holds.
struct SampleLaunch {
  int64_t n0 = 0, samples = 0;
  uint32_t work = 0;           // rows * vecs_per_row, the thread items of this launch
  FastDivmod vecs_per_row;     // t -> (row, vec)
  FastDivmod h;                // row -> (rest, y)
  int32_t row_len = 0;         // output elements per row
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

// The launch of an op whose output rows are (n, c, y) rows of w elements (NCHW) or (n, y) rows of
// w * C elements, x major and c minor (channels_last): normalize_flip's and resized_crop's.
struct ChannelRowsLaunch : SampleLaunch {
  FastDivmod C;                // NCHW: rest -> (n, c); channels_last: element -> (x, c)
  bool channels_last = false;  // rows of w * C elements instead of w
};

// Such an op allocates its output contiguous (NCHW) or channels_last (`channel_stride` 1); with
// C = 1 both are NCHW rows.
inline bool channel_rows_last(int64_t channel_stride, int64_t C) { return channel_stride == 1 && C > 1; }

// The launches of such an op's N x C x h x w output (split_by_samples' contract).
inline bool plan_channel_rows(int64_t N, int64_t C, int64_t h, int64_t w, bool channels_last, int64_t max_work,
                              std::vector<ChannelRowsLaunch>* launches) {
  ChannelRowsLaunch prototype;
  prototype.channels_last = channels_last;
  prototype.C = FastDivmod(static_cast<uint32_t>(C > 0 ? C : 1));
  const int64_t row_len = channels_last ? w * C : w;
  const int64_t rows_per_sample = channels_last ? h : C * h;
  return split_by_samples(N, h, rows_per_sample, row_len, max_work, prototype, launches);
}

// Where thread item t of a ChannelRowsLaunch writes: its sample, output row and, for NCHW, channel
// row; its first element in that row, how many of its kVec elements the row still has, and that
// first element's column and channel (the thread's loop steps them without dividing again).
struct ThreadPlace {
  int64_t n;
  uint32_t y, c_row;
  int32_t first;
  int count;
  uint32_t x, c;
};

template <bool kChannelsLast>
PF_HD ThreadPlace place_thread(const ChannelRowsLaunch& l, uint32_t t) {
  uint32_t row, vec, rest, y, n_local, c_row = 0;
  l.vecs_per_row.divmod(t, &row, &vec);
  l.h.divmod(row, &rest, &y);
  if (kChannelsLast) {
    n_local = rest;
  } else {
    l.C.divmod(rest, &n_local, &c_row);
  }
  ThreadPlace p;
  p.n = l.n0 + n_local;
  p.y = y;
  p.c_row = c_row;
  p.first = static_cast<int32_t>(vec) * kVec;
  p.count = l.row_len - p.first < kVec ? l.row_len - p.first : kVec;
  if (kChannelsLast) {
    l.C.divmod(static_cast<uint32_t>(p.first), &p.x, &p.c);
  } else {
    p.x = static_cast<uint32_t>(p.first);
    p.c = c_row;
  }
  return p;
}

// The thread item's first output element, in elements from the output's start (strides oN, oY,
// oC; a channels_last row holds every channel).
template <bool kChannelsLast>
PF_HD int64_t output_offset(const ThreadPlace& p, int64_t oN, int64_t oY, int64_t oC) {
  return p.n * oN + static_cast<int64_t>(p.y) * oY + (kChannelsLast ? 0 : static_cast<int64_t>(p.c_row) * oC) +
         p.first;
}

}  // namespace kernels
}  // namespace prefetch
