// lookup's per-value thread work (lookup_thread_work.h), run on the CPU over every thread of every
// launch in a shuffled order, must write exactly what the CPU kernel writes over any split of its
// rows, and nothing outside the output; and both must be the tables' entries (an independent
// reference: plain indexing), for one table per image and one per channel, any input strides,
// rows narrower and wider than the AVX2 build's 32 values and the AVX-512 build's 64 (and their
// remainders), in every build: baseline, AVX2, AVX-512 VBMI (where the CPU has them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "common/cpu_dispatch.h"
#include "cpu_builds.h"
#include "lookup/lookup.h"
#include "lookup/lookup_thread_work.h"
#include "plane_rows_threads.h"

using namespace prefetch::kernels;
using namespace cpu_builds_test;

TEST(LookupThreadWork, EveryThreadInAnyOrderWritesTheTablesEntriesAsTheCpuKernelDoes) {
  using plane_rows_test::kGuard;
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> byte(0, 255);
  for (IsaBuild build : cpu_builds()) {
    const ScopedCpuBuild selected(build);
    ASSERT_EQ(use_avx512_build(), build == IsaBuild::kAvx512);
    for (const auto& shape : std::vector<std::vector<int64_t>>{{3, 3, 11, 13}, {2, 1, 7, 5}, {5, 4, 2, 9}, {2, 3, 5, 32}, {3, 3, 4, 77}, {2, 1, 3, 160}, {2, 3, 3, 64}, {2, 1, 2, 63}, {2, 1, 2, 65}, {2, 3, 2, 200}}) {
      const int64_t N = shape[0], C = shape[1], H = shape[2], W = shape[3];
      for (int64_t T : {int64_t{1}, C}) {
        for (bool channels_last : {false, true}) {
          std::vector<uint8_t> images(static_cast<size_t>(N * C * H * W)), tables(static_cast<size_t>(N * T * 256));
          for (auto& v : images) v = static_cast<uint8_t>(byte(rng));
          for (auto& v : tables) v = static_cast<uint8_t>(byte(rng));
          LookupArgs a;
          a.images = images.data();
          a.N = N, a.C = C, a.H = H, a.W = W;
          if (channels_last) a.sN = H * W * C, a.sC = 1, a.sH = W * C, a.sW = C;
          else a.sN = C * H * W, a.sC = H * W, a.sH = W, a.sW = 1;
          a.tables = tables.data();
          a.T = T;
          std::vector<uint8_t> cpu = plane_rows_test::guarded_output(N * C * H * W), threads = cpu;
          a.out = cpu.data() + kGuard;
          for (int64_t begin = 0, rows = N * C * H; begin < rows;) {
            const int64_t end = std::min<int64_t>(rows, begin + 1 + static_cast<int64_t>(rng() % 5));
            lookup_cpu(a, begin, end);
            begin = end;
          }
          LookupArgs b = a;
          b.out = threads.data() + kGuard;
          plane_rows_test::run_every_thread(LookupThread{b}, N, C, H, W, 2, &rng);
          plane_rows_test::expect_guards_intact(cpu);
          plane_rows_test::expect_guards_intact(threads);
          ASSERT_EQ(cpu, threads) << build_name(build);
          for (int64_t n = 0; n < N; ++n) {
            for (int64_t c = 0; c < C; ++c) {
              for (int64_t y = 0; y < H; ++y) {
                for (int64_t x = 0; x < W; ++x) {
                  const uint8_t v = images[n * a.sN + c * a.sC + y * a.sH + x * a.sW];
                  ASSERT_EQ(a.out[((n * C + c) * H + y) * W + x], tables[(n * T + (T == 1 ? 0 : c)) * 256 + v]);
                }
              }
            }
          }
        }
      }
    }
  }
}
