// The launch numbering of the ops whose threads each write one output value (or one pixel) of an
// [N, C, H, W] output: x along a row, blocks down the rows ((n, c), y). Rows are numbered in 32
// bits so that a thread finds its (n, c, y) with multiplies (fast_divmod.h: a GPU has no integer
// divider); a batch with more rows is split by images into several launches. Shared by
// affine_warp (C = 1: one row of pixels per (n, y)), sharpness and lookup; their CPU tests run
// these plans and each op's thread work over every (launch, row, x).
#pragma once
#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/fast_divmod.h"
#include "common/host_device.h"

namespace prefetch {
namespace kernels {

struct PlaneRowsLaunch {
  int64_t n0 = 0;     // the launch's first image
  uint32_t rows = 0;  // its rows: images * C * H
  FastDivmod h, c;
};

// The launches of an [N, C, H, W] output, each of at most max_rows rows (whole images; an image's
// C * H rows must number below 2^31, which the ops' plans check). None for an empty output.
inline void plan_plane_rows(int64_t N, int64_t C, int64_t H, int64_t W, std::vector<PlaneRowsLaunch>* launches,
                            int64_t max_rows = INT32_MAX) {
  launches->clear();
  if (N == 0 || C == 0 || H == 0 || W == 0) return;
  const int64_t per_image = C * H;
  const int64_t images = std::max<int64_t>(1, max_rows / per_image);
  for (int64_t n0 = 0; n0 < N; n0 += images) {
    PlaneRowsLaunch l;
    l.n0 = n0;
    l.rows = static_cast<uint32_t>(std::min(images, N - n0) * per_image);
    l.h = FastDivmod(static_cast<uint32_t>(H));
    l.c = FastDivmod(static_cast<uint32_t>(C));
    launches->push_back(l);
  }
}

// Whether `Thread` has row(n, c, y): an object whose operator()(x) writes value x of that row,
// the row's set-up (pointers, per-image parameters) done once for all its values. The first GPU
// run found lookup instruction-bound (SM 67% busy, memory 9%) on recomputing a whole 64-bit
// index per byte. Threads without one are called per value: thread(n, c, y, x).
template <typename Thread, typename = void>
struct HasRow : std::false_type {};
template <typename Thread>
struct HasRow<Thread, std::void_t<decltype(std::declval<const Thread&>().row(int64_t{}, int64_t{}, int64_t{}))>>
    : std::true_type {};

// Row `row` of launch l as (n, c, y).
PF_HD void plane_row(const PlaneRowsLaunch& l, uint32_t row, int64_t* n, int64_t* c, int64_t* y) {
  uint32_t plane, yy, nn, cc;
  l.h.divmod(row, &plane, &yy);
  l.c.divmod(plane, &nn, &cc);
  *n = l.n0 + nn, *c = cc, *y = yy;
}

}  // namespace kernels
}  // namespace prefetch
