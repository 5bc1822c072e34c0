// What the C++ tests of the one-value-per-thread ops (affine_warp, sharpness, lookup) share: an
// output buffer with guard bytes on both sides, and a run of an op's thread work over every value
// as the CUDA launches of common/plane_rows.h number them, in a shuffled order.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "common/plane_rows.h"

namespace plane_rows_test {

constexpr int kGuard = 64;

// A buffer of `values` output bytes with kGuard guard bytes (0xAB) before and after; the output
// starts at data() + kGuard.
inline std::vector<uint8_t> guarded_output(int64_t values) {
  return std::vector<uint8_t>(static_cast<size_t>(values + 2 * kGuard), 0xAB);
}

inline void expect_guards_intact(const std::vector<uint8_t>& out) {
  for (int i = 0; i < kGuard; ++i) {
    ASSERT_EQ(out[i], 0xAB) << "written before the output";
    ASSERT_EQ(out[out.size() - 1 - i], 0xAB) << "written after the output";
  }
}

// thread.row(n, c, y)(x) (or thread(n, c, y, x)) for every value of an [N, C, H, W] output, as launches of at most
// `images_a_launch` images number them (a small split, as a batch of over 2^31 rows is), in a
// shuffled order.
template <typename Thread>
void run_every_thread(const Thread& thread, int64_t N, int64_t C, int64_t H, int64_t W, int64_t images_a_launch,
                      std::mt19937* rng) {
  using namespace prefetch::kernels;
  std::vector<PlaneRowsLaunch> launches;
  plan_plane_rows(N, C, H, W, &launches, images_a_launch * C * H);
  ASSERT_EQ(launches.size(), static_cast<size_t>((N + images_a_launch - 1) / images_a_launch));
  std::vector<std::pair<size_t, int64_t>> order;  // (launch, row * W + x)
  for (size_t l = 0; l < launches.size(); ++l) {
    for (int64_t t = 0; t < launches[l].rows * W; ++t) order.emplace_back(l, t);
  }
  ASSERT_EQ(order.size(), static_cast<size_t>(N * C * H * W));
  std::shuffle(order.begin(), order.end(), *rng);
  for (const auto& [l, t] : order) {
    int64_t n, c, y;
    plane_row(launches[l], static_cast<uint32_t>(t / W), &n, &c, &y);
    if constexpr (HasRow<Thread>::value) {  // as the kernel calls it (launch_plane_rows.cuh)
      thread.row(n, c, y)(t % W);
    } else {
      thread(n, c, y, t % W);
    }
  }
}

// The CPU kernel `cpu(args, begin, end)` over `rows` rows in chunks of 1 to `max_chunk` rows at
// random, as at::parallel_for may cut them.
template <typename Args, typename Kernel>
void run_cpu_in_random_chunks(Kernel cpu, const Args& args, int64_t rows, int64_t max_chunk, std::mt19937* rng) {
  for (int64_t begin = 0; begin < rows;) {
    const int64_t end = std::min<int64_t>(rows, begin + 1 + static_cast<int64_t>((*rng)() % max_chunk));
    cpu(args, begin, end);
    begin = end;
  }
}

}  // namespace plane_rows_test
