// Where an output pixel of a cropped, flipped and gathered batch reads: the crop window's index
// math, shared by the ops that crop a fixed window (normalize_flip and flip_crop, each its CPU and
// CUDA kernel), so that the CPU tests exercise exactly the geometry the GPU runs. Torch-free; every
// function is __host__ __device__ under nvcc.
#pragma once
#include <cstdint>
#include <cstdio>

#include "common/host_device.h"

namespace prefetch {
namespace kernels {

// Where torchvision's CenterCrop puts a window of `h` in an extent of `H`
// (torchvision/transforms/v2/functional/_geometry.py): inside the image, at
// _center_crop_compute_crop_anchor's int(round((H - h) / 2.0)), Python's round (half to even:
// 11 / 2 -> 6, 13 / 2 -> 6); larger than the image, after _center_crop_compute_padding's
// (h - H) // 2 fill pixels before it (the rest after), i.e. at -((h - H) // 2). Each axis alone.
PF_HD int64_t center_start(int64_t H, int64_t h) {
  if (h > H) return -((h - H) / 2);
  const int64_t d = H - h, q = d / 2;
  return ((d & 1) != 0 && (q & 1) != 0) ? q + 1 : q;  // a tie (d odd) goes to the even of q, q + 1
}

// An input batch of images (or masks with C = 1) described by sizes and element strides, so
// NHWC, NCHW and any non-contiguous view go through the same code.
struct Geometry {
  int64_t N = 0, C = 1, H = 0, W = 0;
  int64_t sN = 0, sC = 0, sH = 0, sW = 0;  // input strides, elements
  int64_t h = 0, w = 0;                    // output window
  // Gather: output sample n reads input sample rows[n] (the input has `sources` samples) instead
  // of sample n, so a batch is picked out of a whole resident dataset in the same pass.
  const int64_t* rows = nullptr;
  int64_t sources = 0;
};

// The input sample that output sample n reads.
PF_HD int64_t source_sample(const Geometry& g, int64_t n) { return g.rows != nullptr ? g.rows[n] : n; }

// Where one sample's window lies and how it is mirrored.
struct Window {
  int64_t top = 0, left = 0;
  bool vflip = false, hflip = false;
};

// offsets: [N, 2] int64 (top, left) or null for the centred window; flips: [N] bytes or null.
PF_HD Window sample_window(const Geometry& g, const int64_t* offsets, const uint8_t* hflip,
                           const uint8_t* vflip, int64_t n) {
  Window win;
  if (offsets != nullptr) {
    // Clamped to the window's reach: a window at top <= -h or top >= H reads no row of the
    // image either way, and with H, W < 2^62 (the op checks) no index sum below can overflow,
    // whatever int64 offset was given (2^63 - 1 + y would).
    const int64_t top = offsets[2 * n], left = offsets[2 * n + 1];
    win.top = top < -g.h ? -g.h : (top > g.H ? g.H : top);
    win.left = left < -g.w ? -g.w : (left > g.W ? g.W : left);
  } else {
    win.top = center_start(g.H, g.h);
    win.left = center_start(g.W, g.w);
  }
  win.hflip = hflip != nullptr && hflip[n] != 0;
  win.vflip = vflip != nullptr && vflip[n] != 0;
  return win;
}

// Input row read by output row y (may be outside [0, H): then the row is `fill`).
PF_HD int64_t source_row(const Geometry& g, const Window& win, int64_t y) {
  return win.top + (win.vflip ? g.h - 1 - y : y);
}

// Input column read by output column x (may be outside [0, W)).
PF_HD int64_t source_col(const Geometry& g, const Window& win, int64_t x) {
  return win.left + (win.hflip ? g.w - 1 - x : x);
}

// The output columns [*begin, *end), 0 <= begin <= end <= w, whose source column lies inside
// the image; the others take `fill`. Lets the CPU loops run their middle part without a bounds
// test per element.
PF_HD void inside_columns(const Geometry& g, const Window& win, int64_t* begin, int64_t* end) {
  int64_t b, e;
  if (!win.hflip) {  // 0 <= left + x < W
    b = -win.left;
    e = g.W - win.left;
  } else {  // 0 <= left + w - 1 - x < W
    b = win.left + g.w - g.W;
    e = win.left + g.w;
  }
  // Both ends within [0, w]: a window wholly beside the image puts b past w (hflip with
  // left > W, or left < -w), and the callers' fill loops run up to b.
  b = b < 0 ? 0 : (b > g.w ? g.w : b);
  e = e > g.w ? g.w : e;
  *begin = b;
  *end = e < b ? b : e;
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

}  // namespace kernels
}  // namespace prefetch
