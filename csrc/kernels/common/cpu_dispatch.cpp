#include "common/cpu_dispatch.h"

#include <atomic>

namespace prefetch {
namespace kernels {

namespace {
std::atomic<bool> avx2_allowed{true};
}  // namespace

bool use_avx2_build() {
#if PREFETCH_AVX2_BUILD
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return has && avx2_allowed.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

bool set_cpu_avx2_allowed(bool allowed) { return avx2_allowed.exchange(allowed); }

}  // namespace kernels
}  // namespace prefetch
