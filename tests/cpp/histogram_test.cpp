// histograms' thread work (histogram_thread_work.h): every value's bin, counted over every thread in
// a shuffled order as the CUDA kernel's atomic adds count them, must give the CPU kernel's counts
// over any split of its planes; both must be a plain count of the values (an independent
// reference), for 1 to 4 channels, any input strides, rows narrower and wider than the CPU's four
// interleaved tables, a flat plane (every value one bin) and both ends of the range. (histogram.cu
// numbers its threads by plane and row, not as plane_rows.h does: every value once either way.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "histogram/histogram.h"
#include "histogram/histogram_thread_work.h"
#include "plane_rows_threads.h"

using namespace prefetch::kernels;

namespace {

struct CountingThread {
  HistogramArgs a;
  std::vector<int32_t>* counts;
  void operator()(int64_t n, int64_t c, int64_t y, int64_t x) const {
    ++(*counts)[static_cast<size_t>((n * a.C + c) * kHistogramBins + histogram_bin(a, n, c, y, x))];
  }
};

}  // namespace

TEST(HistogramThreadWork, EveryThreadsBinCountedGivesTheCpuKernelsCounts) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> byte(0, 255);
  for (const auto& shape : std::vector<std::vector<int64_t>>{{3, 3, 11, 13}, {2, 1, 7, 3}, {2, 4, 5, 70}, {1, 3, 1, 1}}) {
    const int64_t N = shape[0], C = shape[1], H = shape[2], W = shape[3];
    for (bool channels_last : {false, true}) {
      std::vector<uint8_t> images(static_cast<size_t>(N * C * H * W));
      for (auto& v : images) v = static_cast<uint8_t>(byte(rng));
      HistogramArgs a;
      a.images = images.data();
      a.N = N, a.C = C, a.H = H, a.W = W;
      if (channels_last) a.sN = H * W * C, a.sC = 1, a.sH = W * C, a.sW = C;
      else a.sN = C * H * W, a.sC = H * W, a.sH = W, a.sW = 1;
      // Plane 0 flat at 255, plane 1 (where there is one) holding 0 and 255 only.
      for (int64_t y = 0; y < H; ++y) {
        for (int64_t x = 0; x < W; ++x) {
          images[static_cast<size_t>(y * a.sH + x * a.sW)] = 255;
          if (C > 1) images[static_cast<size_t>(a.sC + y * a.sH + x * a.sW)] = (x + y) % 2 ? 255 : 0;
        }
      }
      std::vector<int32_t> cpu(static_cast<size_t>(N * C * kHistogramBins), -1), threads(cpu.size(), 0),
          reference(cpu.size(), 0);
      a.out = cpu.data();
      for (int64_t begin = 0; begin < N * C;) {
        const int64_t end = std::min<int64_t>(N * C, begin + 1 + static_cast<int64_t>(rng() % 3));
        histogram_cpu(a, begin, end);
        begin = end;
      }
      plane_rows_test::run_every_thread(CountingThread{a, &threads}, N, C, H, W, 2, &rng);
      ASSERT_EQ(cpu, threads) << "channels_last " << channels_last;
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t c = 0; c < C; ++c) {
          for (int64_t y = 0; y < H; ++y) {
            for (int64_t x = 0; x < W; ++x) {
              const uint8_t v = images[static_cast<size_t>(n * a.sN + c * a.sC + y * a.sH + x * a.sW)];
              ++reference[static_cast<size_t>((n * C + c) * kHistogramBins + v)];
            }
          }
        }
      }
      ASSERT_EQ(cpu, reference);
      EXPECT_EQ(cpu[255], H * W);  // the flat plane: one bin
    }
  }
}
