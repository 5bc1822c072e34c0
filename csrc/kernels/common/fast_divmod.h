// Division of 32-bit unsigned indices by a divisor fixed for a whole launch, as a multiply-high,
// an add and a shift (Granlund and Montgomery's method): the GPU has no integer divider, and a
// `/` or `%` by a run-time value costs it some twenty instructions, more than the rest of an
// output element's work. The host computes the magic numbers once per launch.
#pragma once
#include <cstdint>

#include "common/host_device.h"

namespace prefetch {
namespace kernels {

struct FastDivmod {
  uint32_t divisor = 1;
  uint32_t multiplier = 0;  // 2^32 * (2^shift - divisor) / divisor + 1, rounded down before the + 1
  uint32_t shift = 0;       // ceil(log2(divisor))

  FastDivmod() = default;
  // divisor in [1, 2^31]; the quotient is exact for every 32-bit numerator.
  explicit FastDivmod(uint32_t d) : divisor(d) {
    while ((uint64_t{1} << shift) < d) ++shift;
    multiplier = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }

  PF_HD uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t high = __umulhi(n, multiplier);
#else
    const uint32_t high = static_cast<uint32_t>((static_cast<uint64_t>(n) * multiplier) >> 32);
#endif
    // In 64 bits: high + n can pass 2^32 for numerators of 2^31 and above.
    return static_cast<uint32_t>((static_cast<uint64_t>(high) + n) >> shift);
  }

  PF_HD void divmod(uint32_t n, uint32_t* quotient, uint32_t* remainder) const {
    *quotient = div(n);
    *remainder = n - *quotient * divisor;
  }
};

}  // namespace kernels
}  // namespace prefetch
