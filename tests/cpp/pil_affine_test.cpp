// pil_affine's per-pixel thread work (pil_affine_thread_work.h), run on the CPU over every thread
// index in a shuffled order, must write exactly what the CPU kernel writes over any split of its
// rows, and nothing outside the output. Against independent references: a map that keeps the
// image is an exact copy (both filters weigh the centre tap alone there), a map that leaves it is
// the fill, and a half-pixel shift is the mean of two neighbours truncated (bilinear) or Pillow's
// cubic with a = -1 at d = 1/2 (-v1 + 5 v2 + 5 v3 - v4) / 8 clipped and truncated (bicubic).
// The values against Pillow itself are tests/ops/test_pil_affine.py's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/cpu_dispatch.h"
#include "pil_affine/pil_affine.h"
#include "pil_affine/pil_affine_thread_work.h"
#include "plane_rows_threads.h"

using namespace prefetch::kernels;

namespace {

using plane_rows_test::expect_guards_intact;
using plane_rows_test::kGuard;

struct Case {
  int64_t N, C, H, W;
  std::vector<uint8_t> images;  // [N, H, W, C]: channels last, any strides
  std::vector<double> maps;
  PilAffineArgs args(std::vector<uint8_t>* out, bool bicubic) const {
    PilAffineArgs a;
    a.images = images.data();
    a.N = N, a.C = C, a.H = H, a.W = W;
    a.sN = H * W * C, a.sC = 1, a.sH = W * C, a.sW = C;
    a.matrices = maps.data();
    a.bicubic = bicubic;
    for (int64_t c = 0; c < C; ++c) a.fill[c] = static_cast<uint8_t>(10 + c);
    a.out = out->data() + kGuard;
    return a;
  }
};

Case random_case(int64_t N, int64_t C, int64_t H, int64_t W, std::mt19937* rng) {
  Case k{N, C, H, W, std::vector<uint8_t>(N * H * W * C), {}};
  for (auto& v : k.images) v = static_cast<uint8_t>((*rng)() & 0xFF);
  std::uniform_real_distribution<double> angle(-0.6, 0.6), shift(-3.0, 3.0);
  for (int64_t n = 0; n < N; ++n) {
    const double a = angle(*rng);
    k.maps.insert(k.maps.end(), {std::cos(a), std::sin(a), shift(*rng), -std::sin(a), std::cos(a), shift(*rng)});
  }
  return k;
}

TEST(PilAffine, ThreadWorkEqualsTheCpuKernelOverAnySplit) {
  std::mt19937 rng(7);
  for (bool bicubic : {false, true}) {
    for (int64_t C : {1, 3, 5}) {
      const Case k = random_case(5, C, 13, 17, &rng);
      const int64_t values = k.N * k.C * k.H * k.W;
      auto by_threads = plane_rows_test::guarded_output(values);
      auto by_cpu = plane_rows_test::guarded_output(values);
      const PilAffineArgs a = k.args(&by_threads, bicubic);
      if (C == 3) {
        plane_rows_test::run_every_thread(PilAffineThread<3>{a}, k.N, 1, k.H, k.W, 2, &rng);
      } else if (C == 1) {
        plane_rows_test::run_every_thread(PilAffineThread<1>{a}, k.N, 1, k.H, k.W, 2, &rng);
      } else {
        plane_rows_test::run_every_thread(PilAffineThread<0>{a}, k.N, 1, k.H, k.W, 2, &rng);
      }
      plane_rows_test::run_cpu_in_random_chunks(&pil_affine_cpu, k.args(&by_cpu, bicubic), k.N * k.H, 7, &rng);
      expect_guards_intact(by_threads);
      expect_guards_intact(by_cpu);
      EXPECT_EQ(by_threads, by_cpu) << "bicubic " << bicubic << ", C " << C;
    }
  }
}

// The CPU kernel's AVX2 build (bicubic, four pixels a step; where the CPU has AVX2) and its
// baseline both write the thread work's bytes: planar and channels-last sources, 1, 3 and 5
// channels, maps that keep most groups inside (the four-pixel path, its adjacent-tap loads and its
// clamped edges) and ones that leave many (the per-pixel groups), widths with a remainder.
TEST(PilAffine, EveryCpuBuildWritesTheThreadWorksBytes) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> angle(-0.5, 0.5), scale(0.6, 1.6), shift(-6.0, 6.0);
  for (int variant = 0; variant < 4; ++variant) {
    const bool planar = variant & 1, avx2 = variant & 2;
    for (int64_t C : {1, 3, 5}) {
      Case k = random_case(6, C, 19, 37, &rng);
      k.maps.clear();
      for (int64_t n = 0; n < k.N; ++n) {
        const double t = angle(rng), s = n == 0 ? 1.0 : scale(rng);
        k.maps.insert(k.maps.end(), {s * std::cos(t), s * std::sin(t), shift(rng), -s * std::sin(t), s * std::cos(t),
                                     shift(rng)});
      }
      auto by_threads = plane_rows_test::guarded_output(k.N * C * k.H * k.W);
      auto by_cpu = plane_rows_test::guarded_output(k.N * C * k.H * k.W);
      std::vector<uint8_t> planes(k.images.size());
      if (planar) {  // the same values, [N, C, H, W]
        for (int64_t n = 0; n < k.N; ++n)
          for (int64_t c = 0; c < C; ++c)
            for (int64_t i = 0; i < k.H * k.W; ++i) planes[(n * C + c) * k.H * k.W + i] = k.images[(n * k.H * k.W + i) * C + c];
      }
      const auto args = [&](std::vector<uint8_t>* out) {
        PilAffineArgs b = k.args(out, true);
        if (planar) b.images = planes.data(), b.sC = k.H * k.W, b.sH = k.W, b.sW = 1;
        return b;
      };
      plane_rows_test::run_every_thread(PilAffineThread<0>{args(&by_threads)}, k.N, 1, k.H, k.W, 2, &rng);
      const bool previous = set_cpu_avx2_allowed(avx2);
      plane_rows_test::run_cpu_in_random_chunks(&pil_affine_cpu, args(&by_cpu), k.N * k.H, 5, &rng);
      set_cpu_avx2_allowed(previous);
      expect_guards_intact(by_cpu);
      ASSERT_EQ(by_threads, by_cpu) << "planar " << planar << " avx2 " << avx2 << " C " << C;
    }
  }
}

// The value at output (n, c, y, x) of a planar [N, C, H, W] output.
uint8_t at(const std::vector<uint8_t>& out, const Case& k, int64_t n, int64_t c, int64_t y, int64_t x) {
  return out[kGuard + ((n * k.C + c) * k.H + y) * k.W + x];
}
uint8_t pixel(const Case& k, int64_t n, int64_t c, int64_t y, int64_t x) {
  return k.images[((n * k.H + y) * k.W + x) * k.C + c];
}

TEST(PilAffine, IdentityCopiesOutsideFillsHalfPixelsInterpolate) {
  std::mt19937 rng(3);
  Case k = random_case(3, 3, 6, 9, &rng);
  // identity; wholly outside (shifted by more than the width); half a pixel right
  k.maps = {1, 0, 0, 0, 1, 0, 1, 0, 9.5, 0, 1, 0, 1, 0, 0.5, 0, 1, 0};
  for (bool bicubic : {false, true}) {
    auto out = plane_rows_test::guarded_output(k.N * k.C * k.H * k.W);
    pil_affine_cpu(k.args(&out, bicubic), 0, k.N * k.H);
    for (int64_t c = 0; c < k.C; ++c) {
      for (int64_t y = 0; y < k.H; ++y) {
        for (int64_t x = 0; x < k.W; ++x) {
          EXPECT_EQ(at(out, k, 0, c, y, x), pixel(k, 0, c, y, x));
          EXPECT_EQ(at(out, k, 1, c, y, x), 10 + c);
          // source x + 1 (inside up to the last column), taps x..x+1 (bicubic x-1..x+2, clamped)
          if (x + 1 >= k.W) {
            EXPECT_EQ(at(out, k, 2, c, y, x), 10 + c);
            continue;
          }
          const int v1 = pixel(k, 2, c, y, std::max<int64_t>(x - 1, 0)), v2 = pixel(k, 2, c, y, x);
          const int v3 = pixel(k, 2, c, y, x + 1), v4 = pixel(k, 2, c, y, std::min<int64_t>(x + 2, k.W - 1));
          const double expected = bicubic ? (-v1 + 5.0 * v2 + 5.0 * v3 - v4) / 8.0 : (v2 + v3) / 2.0;
          const int clipped = expected <= 0 ? 0 : (expected >= 255 ? 255 : static_cast<int>(expected));
          EXPECT_EQ(at(out, k, 2, c, y, x), clipped) << "bicubic " << bicubic << " at " << y << ", " << x;
        }
      }
    }
  }
}

}  // namespace
