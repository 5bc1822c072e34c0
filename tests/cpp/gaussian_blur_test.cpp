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
