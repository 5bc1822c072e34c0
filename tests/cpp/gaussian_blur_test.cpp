// gaussian_blur's thread work (gaussian_blur_thread_work.h), run on the CPU over every thread of
// both passes' launches in a shuffled order, must write exactly what the CPU kernel writes (its
// blocks of 16 values take loops of their own, and intrinsics in the AVX2 build, in bands) in every
// build and over any split of its rows, and nothing outside the output; the reflect index and the
// rounding are torch's. The values against a float64 reference and torchvision are
// tests/ops/test_gaussian_blur.py's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "cpu_builds.h"
#include "gaussian_blur/gaussian_blur.h"
#include "gaussian_blur/gaussian_blur_thread_work.h"
#include "plane_rows_threads.h"

using namespace prefetch::kernels;

using plane_rows_test::expect_guards_intact;
using plane_rows_test::kGuard;

namespace {

// N kernels of k positive taps that sum to about 1 (float32), each image its own.
std::vector<float> random_taps(int64_t N, int64_t k, std::mt19937* rng) {
  std::uniform_real_distribution<float> u(0.01f, 1.0f);
  std::vector<float> taps(static_cast<size_t>(N * k));
  for (int64_t n = 0; n < N; ++n) {
    float total = 0.0f;
    for (int64_t j = 0; j < k; ++j) total += taps[static_cast<size_t>(n * k + j)] = u(*rng);
    for (int64_t j = 0; j < k; ++j) taps[static_cast<size_t>(n * k + j)] /= total;
  }
  return taps;
}

struct Shape {
  int64_t N, C, H, W, kx, ky;
};

}  // namespace

TEST(GaussianBlurThreadWork, EveryThreadOfBothPassesInAnyOrderWritesTheCpuKernelsBytes) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  // 1 x 1 with 1 tap; the widest kernels reflect padding allows (k / 2 = side - 1); rows narrower
  // than a block of 16; the self-supervised recipes' 23 taps on a plane of one band and on rows so
  // wide that a band is kBlurMinBand rows (3 bands a plane, each reading its halo); 4 channels.
  const std::vector<Shape> shapes{{2, 3, 1, 1, 1, 1},  {3, 3, 11, 13, 7, 5},   {2, 1, 3, 40, 23, 5},
                                  {2, 3, 9, 4, 7, 17}, {3, 3, 70, 67, 23, 23}, {2, 4, 5, 6, 11, 9},
                                  {1, 1, 2, 2, 3, 3},  {2, 1, 40, 4100, 23, 23}};
  for (const auto build : cpu_builds_test::cpu_builds()) {
    cpu_builds_test::ScopedCpuBuild scoped(build);
    for (const Shape& s : shapes) {
      for (bool channels_last : {false, true}) {
        const int64_t N = s.N, C = s.C, H = s.H, W = s.W;
        std::vector<uint8_t> images(static_cast<size_t>(N * C * H * W));
        for (auto& v : images) v = static_cast<uint8_t>(byte(rng));
        if (N > 1) {  // one flat image: its blur is itself wherever the taps sum to 1 within rounding
          for (int64_t i = 0; i < C * H * W; ++i) images[static_cast<size_t>(C * H * W + i)] = 200;
        }
        const std::vector<float> wx = random_taps(N, s.kx, &rng), wy = random_taps(N, s.ky, &rng);
        GaussianBlurArgs a;
        a.images = images.data();
        a.N = N, a.C = C, a.H = H, a.W = W;
        if (channels_last) a.sN = H * W * C, a.sC = 1, a.sH = W * C, a.sW = C;
        else a.sN = C * H * W, a.sC = H * W, a.sH = W, a.sW = 1;
        a.kernel_x = wx.data(), a.kx = s.kx;
        a.kernel_y = wy.data(), a.ky = s.ky;
        std::vector<uint8_t> cpu = plane_rows_test::guarded_output(N * C * H * W), threads = cpu;
        a.out = cpu.data() + kGuard;
        const int64_t rows = N * C * H;
        plane_rows_test::run_cpu_in_random_chunks(&gaussian_blur_cpu, a, rows, 90, &rng);
        // The CUDA kernel's two passes, the row pass's buffer with guards of NaN around it.
        std::vector<float> row_pass(static_cast<size_t>(N * C * H * W + 2 * kGuard), std::nanf(""));
        GaussianBlurArgs b = a;
        b.rows = row_pass.data() + kGuard;
        b.out = threads.data() + kGuard;
        plane_rows_test::run_every_thread(GaussianBlurRowsThread{b}, N, C, H, W, 2, &rng);  // two images a launch
        plane_rows_test::run_every_thread(GaussianBlurColumnsThread{b}, N, C, H, W, 2, &rng);
        for (int i = 0; i < kGuard; ++i) {
          ASSERT_TRUE(std::isnan(row_pass[static_cast<size_t>(i)]) && std::isnan(row_pass[row_pass.size() - 1 - i]));
        }
        expect_guards_intact(cpu);
        expect_guards_intact(threads);
        ASSERT_EQ(cpu, threads) << cpu_builds_test::build_name(build) << " N C H W " << N << " " << C << " " << H
                                << " " << W << " k " << s.kx << " " << s.ky << " channels_last " << channels_last;
        if (N > 1) {  // the flat image stays flat
          for (int64_t i = 0; i < C * H * W; ++i) ASSERT_EQ(cpu[static_cast<size_t>(kGuard + C * H * W + i)], 200);
        }
      }
    }
  }
}

namespace {

// Every CPU build and the thread work of both passes on one contiguous [1, 1, H, W] image with the
// same taps along x and y; returns the CPU kernel's bytes after checking that all agree.
std::vector<uint8_t> blur_everywhere(const std::vector<uint8_t>& image, int64_t H, int64_t W,
                                     const std::vector<float>& taps, std::mt19937* rng) {
  GaussianBlurArgs a;
  a.images = image.data();
  a.N = 1, a.C = 1, a.H = H, a.W = W, a.sN = H * W, a.sC = H * W, a.sH = W, a.sW = 1;
  a.kernel_x = taps.data(), a.kx = static_cast<int64_t>(taps.size());
  a.kernel_y = taps.data(), a.ky = static_cast<int64_t>(taps.size());
  std::vector<uint8_t> first;
  for (const auto build : cpu_builds_test::cpu_builds()) {
    cpu_builds_test::ScopedCpuBuild scoped(build);
    std::vector<uint8_t> out(static_cast<size_t>(H * W), 0xAB);
    a.out = out.data();
    gaussian_blur_cpu(a, 0, H);
    if (first.empty()) first = out;
    EXPECT_EQ(out, first) << cpu_builds_test::build_name(build);
  }
  std::vector<float> row_pass(static_cast<size_t>(H * W));
  std::vector<uint8_t> threads(static_cast<size_t>(H * W), 0xAB);
  GaussianBlurArgs b = a;
  b.rows = row_pass.data();
  b.out = threads.data();
  plane_rows_test::run_every_thread(GaussianBlurRowsThread{b}, 1, 1, H, W, 1, rng);
  plane_rows_test::run_every_thread(GaussianBlurColumnsThread{b}, 1, 1, H, W, 1, rng);
  EXPECT_EQ(threads, first);
  return first;
}

}  // namespace

TEST(GaussianBlurThreadWork, ExactTiesRoundHalfToEvenInEveryBuildAndThread) {
  // Taps 1/4, 1/2, 1/4 make every sum a multiple of 1/16: the row pass's quarters are exact in
  // float32, and a column sum ends in .5 wherever its sixteenths do. A row of 40 values takes
  // the blocks of 16 and a scalar tail. Rows alternate 0 and 1 in columns of 2: at (y, x) the
  // sum is then the reference below, with many exact halves (0.5 -> 0, 1.5 -> 2).
  std::mt19937 rng(7);
  const int64_t H = 6, W = 40;
  std::vector<uint8_t> image(static_cast<size_t>(H * W));
  for (int64_t y = 0; y < H; ++y) {
    for (int64_t x = 0; x < W; ++x) image[static_cast<size_t>(y * W + x)] = static_cast<uint8_t>(((x / 2) + y) % 2 + 2 * (y % 3 == 0));
  }
  const std::vector<float> taps{0.25f, 0.5f, 0.25f};
  const std::vector<uint8_t> got = blur_everywhere(image, H, W, taps, &rng);
  int halves = 0;
  for (int64_t y = 0; y < H; ++y) {
    for (int64_t x = 0; x < W; ++x) {
      double sum = 0.0;  // the exact value (sixteenths), from reflect-padded neighbours
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 3; ++j) {
          const int64_t yy = reflect_index(y - 1 + i, H), xx = reflect_index(x - 1 + j, W);
          sum += taps[i] * taps[j] * image[static_cast<size_t>(yy * W + xx)];
        }
      }
      const double floor_sum = std::floor(sum), frac = sum - floor_sum;
      const double want = frac > 0.5 ? floor_sum + 1 : (frac < 0.5 ? floor_sum : (std::fmod(floor_sum, 2.0) == 0.0 ? floor_sum : floor_sum + 1));
      halves += frac == 0.5;
      ASSERT_EQ(got[static_cast<size_t>(y * W + x)], static_cast<uint8_t>(want)) << y << " " << x << " " << sum;
    }
  }
  ASSERT_GT(halves, 20);  // ties are exercised
}

TEST(GaussianBlurThreadWork, NonFiniteTapsWriteZeroInEveryBuildAndThread) {
  // The op does not check its taps' values: NaN and infinite ones must still give one answer.
  std::mt19937 rng(8);
  const int64_t H = 5, W = 37;
  std::vector<uint8_t> image(static_cast<size_t>(H * W));
  for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<uint8_t>(i * 7);
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto& taps : std::vector<std::vector<float>>{{0.25f, std::nanf(""), 0.25f}, {inf, 0.5f, -inf}}) {
    const std::vector<uint8_t> got = blur_everywhere(image, H, W, taps, &rng);
    for (uint8_t v : got) ASSERT_EQ(v, 0);
  }
}

TEST(GaussianBlurThreadWork, RowsOfNoValuesWriteNothingInEveryBuild) {
  // The plan allows any kernel along an empty side; the CPU kernel is still given the rows.
  const std::vector<uint8_t> images(1, 7);
  const std::vector<float> taps{0.25f, 0.5f, 0.25f};
  for (const auto build : cpu_builds_test::cpu_builds()) {
    cpu_builds_test::ScopedCpuBuild scoped(build);
    std::vector<uint8_t> out = plane_rows_test::guarded_output(0);
    GaussianBlurArgs a;
    a.images = images.data();
    a.N = 1, a.C = 1, a.H = 4, a.W = 0, a.sN = 0, a.sC = 0, a.sH = 0, a.sW = 1;
    a.kernel_x = taps.data(), a.kx = 3, a.kernel_y = taps.data(), a.ky = 3;
    a.out = out.data() + kGuard;
    gaussian_blur_cpu(a, 0, 4);
    expect_guards_intact(out);
  }
}

TEST(GaussianBlurThreadWork, ReflectIndexIsTorchsReflectPadding) {
  // torch.nn.functional.pad(mode="reflect") of [0, 1, ..., n - 1] by p < n on both sides reads
  // p, p - 1, ..., 1, then 0 .. n - 1, then n - 2, ..., n - 1 - p.
  for (int64_t n = 1; n <= 9; ++n) {
    for (int64_t p = 0; p < n; ++p) {
      for (int64_t i = -p; i < n + p; ++i) {
        const int64_t want = i < 0 ? -i : (i >= n ? 2 * n - 2 - i : i);
        ASSERT_EQ(reflect_index(i, n), want) << n << " " << i;
        ASSERT_TRUE(reflect_index(i, n) >= 0 && reflect_index(i, n) < n);
      }
    }
  }
}

TEST(GaussianBlurThreadWork, RoundingIsHalfToEvenAsTorchsRound) {
  const double values[] = {0.0, 0.49999999, 0.5, 1.5, 2.5, 3.5000001, 127.5, 128.5, 254.5, 254.50000001, 255.0, 255.4};
  const int want[] = {0, 0, 0, 2, 2, 4, 128, 128, 254, 255, 255, 255};
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); ++i) ASSERT_EQ(blur_round(values[i]), want[i]) << values[i];
}
