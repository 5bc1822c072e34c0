// sharpness's per-value thread work (sharpness_thread_work.h), run on the CPU over every thread of
// every launch in a shuffled order, must write exactly what the CPU kernel writes (its contiguous
// rows take a vectorised loop of their own) over any split of its rows, and nothing outside the
// output, in torchvision's arithmetic and in Pillow's; the smoothing's rounding is exact. The
// values against a float64 reference (torchvision's) and a float32 one (Pillow's) are
// tests/ops/test_sharpness.py's, against Pillow itself tests/transforms/test_timm_pil_ops.py's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/cpu_dispatch.h"
#include "plane_rows_threads.h"
#include "sharpness/sharpness.h"
#include "sharpness/sharpness_thread_work.h"

using namespace prefetch::kernels;

using plane_rows_test::expect_guards_intact;
using plane_rows_test::kGuard;

// A factor (a float32 value) at which Pillow's blend, smooth + float32(alpha * (v - smooth)), and
// the one rounding of a fused multiply-add truncate differently for 191 (smooth, v) pairs
// (PillowsBlendRoundsTwiceNotOnce checks that); 1 of 4,000 random factors in timm's range is so.
constexpr double kContractionWitness = 1.030302882194519;

TEST(SharpnessThreadWork, EveryThreadInAnyOrderWritesTheCpuKernelsBytes) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> byte(0, 255);
  // torchvision's arithmetic and Pillow's, each through the AVX2 build (where the CPU has it) and
  // the baseline
  for (int mode = 0; mode < 4; ++mode) {
    const bool pillow = mode >= 2, avx2 = mode % 2 == 0;
    const bool previous = set_cpu_avx2_allowed(avx2);
    // {10, 3, 9, 70}: the AVX2 build's 16-value steps, the last moved back, over every kind of
    // factor below; {2, 1, 4, 18}: the narrowest rows it takes (one step); and wide rows
    for (const auto& shape : std::vector<std::vector<int64_t>>{{3, 3, 11, 13}, {2, 1, 7, 5}, {3, 4, 2, 9}, {2, 3, 40, 37}, {10, 3, 9, 70}, {2, 1, 4, 18}, {2, 3, 4, 258}, {1, 1, 3, 259}, {2, 3, 5, 600}}) {
      const int64_t N = shape[0], C = shape[1], H = shape[2], W = shape[3];
      for (bool channels_last : {false, true}) {
        std::vector<uint8_t> images(static_cast<size_t>(N * C * H * W));
        for (auto& v : images) v = static_cast<uint8_t>(byte(rng));
        // The largest sums: the second image nearly white (its divisions by 13 up to 3321).
        if (N > 1) {
          for (int64_t i = C * H * W; i < 2 * C * H * W; ++i) images[static_cast<size_t>(i)] = static_cast<uint8_t>(250 + byte(rng) % 6);
        }
        // Factors whose rest (1 - factor) is positive, negative, 0, below 2^-20 (the AVX2 build's
        // FMA would not be the thread work's double there: it leaves them to the double loop), large,
        // beyond float32's range (Pillow's factor then infinite: NaN where a value equals its
        // smoothing), and one whose float32 product with a difference often rounds across a whole
        // number (191 of the 65,536 (smooth, value) pairs: Pillow's blend then differs from one
        // FMA, which a build that contracted would compute).
        const double kinds[10] = {0.1, 2.6, 1.0, 1.0 + 1e-9, 0.0, 2.0, 1000.0, 0.5, 1e39, kContractionWitness};
        std::vector<double> factors;
        for (int64_t n = 0; n < N; ++n) factors.push_back(N <= 3 ? kContractionWitness - 0.9 * n : kinds[n % 10]);
        SharpnessArgs a;
        a.images = images.data();
        a.N = N, a.C = C, a.H = H, a.W = W;
        if (channels_last) a.sN = H * W * C, a.sC = 1, a.sH = W * C, a.sW = C;
        else a.sN = C * H * W, a.sC = H * W, a.sH = W, a.sW = 1;
        a.factors = factors.data();
        a.pillow = pillow;
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
        ASSERT_EQ(cpu, threads) << "channels_last " << channels_last << " avx2 " << avx2 << " pillow " << pillow;
      }
    }
    set_cpu_avx2_allowed(previous);
  }
}

namespace {

// ImageFilter.SMOOTH at one neighbourhood as Pillow's Filter.c computes it (ImagingFilter3x3): the
// weights 1/13 and 5/13 as float32 quotients, per row (l w + c w_c) + r w, the rows added onto 0.5
// from the bottom one, clip8. (Compiled for baseline x86-64: no FMA to contract into.)
uint8_t pillow_smooth(const int32_t v[9]) {
  const float side = 1.0f / 13.0f, centre = 5.0f / 13.0f;
  auto row = [&](const int32_t* r, float w) {
    return (static_cast<float>(r[0]) * side + static_cast<float>(r[1]) * w) + static_cast<float>(r[2]) * side;
  };
  float ss = 0.5f;
  ss += row(v + 6, side);  // the row below
  ss += row(v + 3, centre);
  ss += row(v, side);  // the row above
  return ss <= 0.0f ? 0 : ss >= 255.0f ? 255 : static_cast<uint8_t>(ss);
}

int32_t neighbourhood_sum(const int32_t v[9]) {
  return v[0] + v[1] + v[2] + v[3] + 5 * v[4] + v[5] + v[6] + v[7] + v[8];
}

}  // namespace

TEST(SharpnessThreadWork, PillowsFloat32SmoothingIsTheRoundedThirteenthOfTheSum) {
  // What lets the kernel compute Pillow's filter as sharpness_smooth: equal on every flat
  // neighbourhood, every one of 0s and 255s, and two million random ones.
  int32_t v[9];
  for (int32_t value = 0; value < 256; ++value) {
    std::fill(v, v + 9, value);
    ASSERT_EQ(pillow_smooth(v), sharpness_smooth(neighbourhood_sum(v))) << value;
  }
  for (int bits = 0; bits < 512; ++bits) {
    for (int i = 0; i < 9; ++i) v[i] = (bits >> i) & 1 ? 255 : 0;
    ASSERT_EQ(pillow_smooth(v), sharpness_smooth(neighbourhood_sum(v))) << bits;
  }
  std::mt19937 rng(17);
  std::uniform_int_distribution<int32_t> byte(0, 255), near(0, 2);
  for (int k = 0; k < 2000000; ++k) {
    const int32_t base = byte(rng);
    for (int i = 0; i < 9; ++i) v[i] = k % 2 ? byte(rng) : std::min(255, base + near(rng));  // smooth regions too
    ASSERT_EQ(pillow_smooth(v), sharpness_smooth(neighbourhood_sum(v))) << k;
  }
}

TEST(SharpnessThreadWork, PillowsBlendRoundsTwiceNotOnce) {
  const float alpha = static_cast<float>(kContractionWitness);
  ASSERT_EQ(static_cast<double>(alpha), kContractionWitness);
  int differ = 0;
  for (int32_t smooth = 0; smooth < 256; ++smooth) {
    for (int32_t v = 0; v < 256; ++v) {
      const float fused = std::fma(alpha, static_cast<float>(v - smooth), static_cast<float>(smooth));
      differ += pil_blend(smooth, v, alpha) != pil_clip8(fused);
    }
  }
  EXPECT_EQ(differ, 191);
}

TEST(SharpnessThreadWork, PillowsClipTruncatesAndItsBlendRoundsTwice) {
  // clip8: 0 at or below 0 (and for NaN), 255 at or above 255, truncation between.
  EXPECT_EQ(pil_clip8(-3.5f), 0);
  EXPECT_EQ(pil_clip8(0.0f), 0);
  EXPECT_EQ(pil_clip8(0.999f), 0);
  EXPECT_EQ(pil_clip8(1.0f), 1);
  EXPECT_EQ(pil_clip8(254.99f), 254);
  EXPECT_EQ(pil_clip8(255.0f), 255);
  EXPECT_EQ(pil_clip8(1e30f), 255);
  EXPECT_EQ(pil_clip8(std::numeric_limits<float>::quiet_NaN()), 0);
  // Blend.c: smooth + alpha (v - smooth), product and sum rounded each.
  EXPECT_EQ(pil_blend(10, 20, 0.5f), 15);
  EXPECT_EQ(pil_blend(10, 20, 0.0f), 10);
  EXPECT_EQ(pil_blend(10, 20, 1.0f), 20);
  EXPECT_EQ(pil_blend(10, 20, 1.9f), 29);  // 1.9f * 10 rounds to 19 in float32
  EXPECT_EQ(pil_blend(0, 10, 0.29f), 2);   // 2.9000001, truncated
  EXPECT_EQ(pil_blend(200, 250, 2.7f), 255);
  EXPECT_EQ(pil_blend(100, 0, 1.5f), 0);
}

TEST(SharpnessThreadWork, TheSmoothingRoundsAsTheFloat64QuotientDoes) {
  // Every sum a 3x3 neighbourhood of bytes can have (centre counted 5 times): 0 .. 13 * 255.
  for (int32_t s = 0; s <= 13 * 255; ++s) {
    const double q = s / 13.0;
    const double nearest = q - static_cast<int32_t>(q) < 0.5 ? static_cast<int32_t>(q) : static_cast<int32_t>(q) + 1;
    ASSERT_EQ(sharpness_smooth(s), static_cast<int32_t>(nearest)) << s;
  }
}
