// Issue 13 (the fused ops): offsets anywhere in int64 (the op accepts any integer offsets) must
// not overflow the kernels' index sums. sample_window clamps each offset to the window's reach,
// [-h, H] x [-w, W], which changes no output pixel; these tests check that the window lands
// there and that the CPU kernel fills the whole output. The sanitizer build (UBSan) also checks
// that none of source_row, source_col and inside_columns overflows on the way.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "common/geometry.h"
#include "flip_crop/flip_crop.h"

using namespace prefetch::kernels;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
const int64_t kExtremes[] = {kMax, kMin, kMax - 1, kMin + 1, int64_t{1} << 62, -(int64_t{1} << 62)};

}  // namespace

TEST(GeometryExtremes, WindowIsClampedToItsReach) {
  Geometry g;
  g.N = 1, g.H = 4, g.W = 5, g.h = 3, g.w = 3;
  for (int64_t top : kExtremes) {
    for (int64_t left : kExtremes) {
      for (int flips = 0; flips < 4; ++flips) {
        const int64_t offsets[2] = {top, left};
        const uint8_t hflip = flips & 1, vflip = flips >> 1;
        const Window win = sample_window(g, offsets, &hflip, &vflip, 0);
        ASSERT_TRUE(win.top >= -g.h && win.top <= g.H) << top << " -> " << win.top;
        ASSERT_TRUE(win.left >= -g.w && win.left <= g.W) << left << " -> " << win.left;
        int64_t b = 0, e = 0;
        inside_columns(g, win, &b, &e);
        EXPECT_EQ(b, e) << "top=" << top << " left=" << left << ": the window is beside the image";
        for (int64_t y = 0; y < g.h; ++y) {
          const int64_t sy = source_row(g, win, y), sx = source_col(g, win, y);
          EXPECT_TRUE(sy < 0 || sy >= g.H || sx < 0 || sx >= g.W) << top << ", " << left;
        }
      }
    }
  }
}

TEST(GeometryExtremes, ClampingChangesNoPixel) {
  // Offsets within reach are kept as they are (the clamp only moves windows wholly outside).
  Geometry g;
  g.N = 1, g.H = 4, g.W = 5, g.h = 3, g.w = 2;
  for (int64_t top = -g.h; top <= g.H; ++top) {
    for (int64_t left = -g.w; left <= g.W; ++left) {
      const int64_t offsets[2] = {top, left};
      const Window win = sample_window(g, offsets, nullptr, nullptr, 0);
      EXPECT_EQ(win.top, top);
      EXPECT_EQ(win.left, left);
    }
  }
}

TEST(GeometryExtremes, FlipCropCpuFillsEverything) {
  const int64_t N = 2, H = 4, W = 5, h = 3, w = 3;
  std::vector<int32_t> masks(N * H * W, 7);
  for (int64_t top : kExtremes) {
    for (int64_t left : {kMax, kMin, int64_t{0}}) {
      std::vector<int64_t> offsets = {top, left, left, top};
      const uint8_t hflip[2] = {1, 0}, vflip[2] = {0, 1};
      std::vector<int32_t> out(N * h * w, -1);
      FlipCropArgs a;
      a.masks = masks.data();
      a.itemsize = 4;
      a.g = Geometry{N, 1, H, W, H * W, 0, W, 1, h, w};
      a.offsets = offsets.data();
      a.hflip = hflip;
      a.vflip = vflip;
      a.fill = 3;
      a.out = out.data();
      flip_crop_cpu(a, 0, N * h);
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_EQ(out[i], 3) << "top=" << top << " left=" << left << " element " << i;
      }
    }
  }
}
