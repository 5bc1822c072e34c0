// sharpness's per-value thread work (sharpness_thread_work.h), run on the CPU over every thread of
// every launch in a shuffled order, must write exactly what the CPU kernel writes (its contiguous
// rows take a vectorised loop of their own) over any split of its rows, and nothing outside the
// output; the smoothing's rounding is exact. The values against a float64 reference are
// tests/ops/test_sharpness.py's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "common/cpu_dispatch.h"
#include "plane_rows_threads.h"
#include "sharpness/sharpness.h"
#include "sharpness/sharpness_thread_work.h"

using namespace prefetch::kernels;

using plane_rows_test::expect_guards_intact;
using plane_rows_test::kGuard;

TEST(SharpnessThreadWork, EveryThreadInAnyOrderWritesTheCpuKernelsBytes) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> byte(0, 255);
  for (bool avx2 : {true, false}) {  // the AVX2 build (where the CPU has it) and the baseline
    const bool previous = set_cpu_avx2_allowed(avx2);
    // {8, 3, 9, 70}: the AVX2 build's 16-value steps, the last moved back, over every kind of factor
    // below; {2, 1, 4, 18}: the narrowest rows it takes (one step)
    for (const auto& shape : std::vector<std::vector<int64_t>>{{3, 3, 11, 13}, {2, 1, 7, 5}, {3, 4, 2, 9}, {2, 3, 40, 37}, {8, 3, 9, 70}, {2, 1, 4, 18}}) {
      const int64_t N = shape[0], C = shape[1], H = shape[2], W = shape[3];
      for (bool channels_last : {false, true}) {
        std::vector<uint8_t> images(static_cast<size_t>(N * C * H * W));
        for (auto& v : images) v = static_cast<uint8_t>(byte(rng));
        // The largest sums: the second image nearly white (its divisions by 13 up to 3321).
        if (N > 1) {
          for (int64_t i = C * H * W; i < 2 * C * H * W; ++i) images[static_cast<size_t>(i)] = static_cast<uint8_t>(250 + byte(rng) % 6);
        }
        // Factors whose rest (1 - factor) is positive, negative, 0, below 2^-20 (the AVX2 build's
        // FMA would not be the thread work's double there: it leaves them to the double loop) and large.
        const double kinds[8] = {0.1, 2.6, 1.0, 1.0 + 1e-9, 0.0, 2.0, 1000.0, 0.5};
        std::vector<double> factors;
        for (int64_t n = 0; n < N; ++n) factors.push_back(N <= 3 ? 0.1 + 2.5 * n / std::max<int64_t>(1, N - 1) : kinds[n % 8]);
        SharpnessArgs a;
        a.images = images.data();
        a.N = N, a.C = C, a.H = H, a.W = W;
        if (channels_last) a.sN = H * W * C, a.sC = 1, a.sH = W * C, a.sW = C;
        else a.sN = C * H * W, a.sC = H * W, a.sH = W, a.sW = 1;
        a.factors = factors.data();
        std::vector<uint8_t> cpu = plane_rows_test::guarded_output(N * C * H * W), threads = cpu;
        a.out = cpu.data() + kGuard;
        const int64_t rows = N * C * H;
        plane_rows_test::run_cpu_in_random_chunks(&sharpness_cpu, a, rows, 7, &rng);
        SharpnessArgs b = a;
        b.out = threads.data() + kGuard;
        // two images a launch: a split batch
        plane_rows_test::run_every_thread(SharpnessThread{b}, N, C, H, W, 2, &rng);
        expect_guards_intact(cpu);
        expect_guards_intact(threads);
        ASSERT_EQ(cpu, threads) << "channels_last " << channels_last << " avx2 " << avx2;
      }
    }
    set_cpu_avx2_allowed(previous);
  }
}

TEST(SharpnessThreadWork, TheSmoothingRoundsAsTheFloat64QuotientDoes) {
  // Every sum a 3x3 neighbourhood of bytes can have (centre counted 5 times): 0 .. 13 * 255.
  for (int32_t s = 0; s <= 13 * 255; ++s) {
    const double q = s / 13.0;
    const double nearest = q - static_cast<int32_t>(q) < 0.5 ? static_cast<int32_t>(q) : static_cast<int32_t>(q) + 1;
    ASSERT_EQ(sharpness_smooth(s), static_cast<int32_t>(nearest)) << s;
  }
}
