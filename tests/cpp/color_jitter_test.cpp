// color_jitter's thread work (color_jitter_thread_work.h), run on the CPU over every thread of
// every launch in a shuffled order — the grey-sum launches (cj_grey_entering summed per image, as
// the CUDA warps' atomic adds sum it) and the pixel launch (cj_pixel) — must write exactly what the
// CPU kernel writes over any split of its images, and nothing outside the output; chains of every
// step, repeated Contrasts, 1 and 3 channels, any input strides. (Against torchvision's formulas:
// tests/ops/test_color_jitter.py.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "color_jitter/color_jitter.h"
#include "color_jitter/color_jitter_thread_work.h"
#include "common/cpu_dispatch.h"
#include "cpu_builds.h"
#include "plane_rows_threads.h"

using namespace prefetch::kernels;
using namespace cpu_builds_test;

namespace {

struct GreySumThread {
  ColorJitterArgs a;
  int64_t j;
  std::vector<int64_t>* sums;
  void operator()(int64_t n, int64_t /*c*/, int64_t y, int64_t x) const {
    (*sums)[static_cast<size_t>(n * a.K + j)] += cj_grey_entering(a, n, j, y, x);
  }
};

}  // namespace

TEST(ColorJitterThreadWork, EveryThreadInAnyOrderWritesWhatTheCpuKernelWrites) {
  using plane_rows_test::kGuard;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> byte(0, 255), step(0, kColorSteps - 1);
  std::uniform_real_distribution<double> factor(0.0, 2.0), hue(-0.5, 0.5);
  for (IsaBuild build : cpu_builds()) {
    const ScopedCpuBuild selected(build);
    for (const auto& shape : std::vector<std::vector<int64_t>>{{5, 3, 9, 13}, {3, 1, 7, 5}, {4, 3, 2, 70}}) {
      const int64_t N = shape[0], C = shape[1], H = shape[2], W = shape[3];
      for (int64_t K : {int64_t{1}, int64_t{4}, int64_t{7}}) {
        for (bool channels_last : {false, true}) {
          std::vector<uint8_t> images(static_cast<size_t>(N * C * H * W));
          for (auto& v : images) v = static_cast<uint8_t>(byte(rng));
          std::fill(images.begin(), images.begin() + C * H * W, uint8_t{77});  // a flat image
          std::vector<int64_t> steps(static_cast<size_t>(N * K));
          std::vector<double> factors(steps.size());
          for (size_t i = 0; i < steps.size(); ++i) {
            steps[i] = step(rng);
            factors[i] = steps[i] == kColorHue ? hue(rng) : factor(rng);
            // Pillow's Color: any factor; every other one the factor where a contracted
            // multiply-add would write other bytes (tests/ops/test_sharpness.py's witness)
            if (steps[i] == kColorPillowColor) {
              factors[i] = i % 2 ? 1.030302882194519 : 4.0 * factor(rng) - 3.0;
            }
          }
          steps[0] = kColorContrast;  // a chain with Contrast first, and (K > 1) another after
          if (K > 1) steps[static_cast<size_t>(K - 1)] = kColorContrast;
          ColorJitterArgs a;
          a.images = images.data();
          a.N = N, a.C = C, a.H = H, a.W = W;
          if (channels_last) a.sN = H * W * C, a.sC = 1, a.sH = W * C, a.sW = C;
          else a.sN = C * H * W, a.sC = H * W, a.sH = W, a.sW = 1;
          a.steps = steps.data();
          a.factors = factors.data();
          a.K = K;
          std::vector<int64_t> cpu_sums(static_cast<size_t>(N * K), 0), thread_sums = cpu_sums;
          std::vector<uint8_t> cpu = plane_rows_test::guarded_output(N * C * H * W), threads = cpu;
          a.grey_sums = cpu_sums.data();
          a.out = cpu.data() + kGuard;
          for (int64_t begin = 0; begin < N;) {
            const int64_t end = std::min<int64_t>(N, begin + 1 + static_cast<int64_t>(rng() % 3));
            color_jitter_cpu(a, begin, end);
            begin = end;
          }
          ColorJitterArgs b = a;
          b.grey_sums = thread_sums.data();
          b.out = threads.data() + kGuard;
          for (int64_t j = 0; j < K; ++j) {  // one sum launch per possible Contrast, in order
            plane_rows_test::run_every_thread(GreySumThread{b, j, &thread_sums}, N, 1, H, W, 2, &rng);
          }
          ASSERT_EQ(cpu_sums, thread_sums) << build_name(build);
          plane_rows_test::run_every_thread(ColorJitterThread{b}, N, 1, H, W, 2, &rng);
          plane_rows_test::expect_guards_intact(cpu);
          plane_rows_test::expect_guards_intact(threads);
          ASSERT_EQ(cpu, threads) << build_name(build);
          // The flat first image: Contrast first blends 77 with a mean of 77 (C = 3: grey 76).
          const int32_t flat_grey = C == 3 ? cj_grey(77, 77, 77) : 77;
          EXPECT_EQ(cpu_sums[0], flat_grey * H * W);
        }
      }
    }
  }
}

TEST(ColorJitterCpu, HueOfEveryRedGreenPairMatchesTheThreadWorkInEveryBuild) {
  // The CPU kernel's hue runs vectorised (4, 8 or 16 pixels a vector, its selects as blends or
  // masked moves): on images holding every (r, g) pair with blues that vary, grey pixels and every
  // hue sextant, each build must write the thread work's bytes, for hues across [-0.5, 0.5].
  const int64_t H = 256, W = 256, N = 3;
  std::vector<uint8_t> images(static_cast<size_t>(N * 3 * H * W));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t r = 0; r < H; ++r) {
      for (int64_t g = 0; g < W; ++g) {
        const int64_t b = n == 2 && g % 4 == 0 ? r : (r + 3 * g + 85 * n) & 255;
        uint8_t* px = images.data() + n * 3 * H * W + r * W + g;
        px[0] = static_cast<uint8_t>(r);
        px[H * W] = static_cast<uint8_t>(n == 2 && g % 4 == 0 ? r : g);  // some greys
        px[2 * H * W] = static_cast<uint8_t>(b);
      }
    }
  }
  for (double hue : {-0.5, -0.31, -1e-3, 0.0, 1e-3, 0.1, 0.2499, 0.5}) {
    const std::vector<int64_t> steps(N, kColorHue);
    const std::vector<double> factors(N, hue);
    std::vector<int64_t> sums(N, 0);
    ColorJitterArgs a;
    a.images = images.data();
    a.N = N, a.C = 3, a.H = H, a.W = W;
    a.sN = 3 * H * W, a.sC = H * W, a.sH = W, a.sW = 1;
    a.steps = steps.data(), a.factors = factors.data(), a.K = 1, a.grey_sums = sums.data();
    std::vector<uint8_t> expected(images.size());
    a.out = expected.data();
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t y = 0; y < H; ++y) {
        for (int64_t x = 0; x < W; ++x) cj_pixel(a, n, y, x);
      }
    }
    for (IsaBuild build : cpu_builds()) {
      const ScopedCpuBuild selected(build);
      std::vector<uint8_t> cpu(images.size());
      a.out = cpu.data();
      color_jitter_cpu(a, 0, N);
      ASSERT_EQ(cpu, expected) << "hue " << hue << " " << build_name(build);
    }
  }
}

TEST(ColorJitterThreadWork, TheGreyIsTorchvisionsFloat32Luma) {
  // 0.2989 * 255 + 0.587 * 255 + 0.114 * 255 = 254.9745 in float32 -> 254; pure channels.
  EXPECT_EQ(cj_grey(255, 255, 255), 254);
  EXPECT_EQ(cj_grey(255, 0, 0), 76);   // 76.2195
  EXPECT_EQ(cj_grey(0, 255, 0), 149);  // 149.685
  EXPECT_EQ(cj_grey(0, 0, 255), 29);   // 29.07
  EXPECT_EQ(cj_grey(0, 0, 0), 0);
}
