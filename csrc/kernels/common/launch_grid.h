// The grid every op's .cu launcher uses: blocks of kThreads threads, each thread running that op's
// thread work over a grid-stride loop, so a launch of any size needs no more blocks than a GPU can
// keep busy. Host code, compiled by nvcc with the launchers.
#pragma once
#include <cstdint>

namespace prefetch {
namespace kernels {

constexpr int kThreads = 256;

inline int blocks_for(int64_t work) {
  int64_t blocks = (work + kThreads - 1) / kThreads;
  // Enough blocks to fill any current GPU; the grid-stride loop covers the rest.
  return static_cast<int>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace kernels
}  // namespace prefetch
