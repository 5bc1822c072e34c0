// The per-channel constants of a CUDA launch. Channel counts up to kInlineChannels travel by value
// in the kernel's arguments (no upload per call, and safe to capture in a CUDA graph); a launch
// with more reads the op's device table (its args' affine_device). Each kernel copies the table it
// reads into shared memory once per block. Host code (the launchers and their tests).
#pragma once
#include <cstdint>

#include "common/float_outputs.h"

namespace prefetch {
namespace kernels {

constexpr int kInlineChannels = 64;

// The first kInlineChannels channels' constants, a kernel argument.
struct AffineTable {
  Affine c[kInlineChannels];
};

// A launch's by-value table for C channels: the host table's values for C <= kInlineChannels (the
// kernel reads no other), nothing for more (the kernel reads `device`). False when the table the
// kernel would read is unset: the launchers then refuse rather than read a null pointer.
inline bool launch_affine_table(const Affine* host, const Affine* device, int64_t C, AffineTable* table) {
  *table = AffineTable{};
  if (C > kInlineChannels) return device != nullptr;
  if (host == nullptr) return false;
  for (int64_t c = 0; c < C; ++c) table->c[c] = host[c];
  return true;
}

}  // namespace kernels
}  // namespace prefetch
