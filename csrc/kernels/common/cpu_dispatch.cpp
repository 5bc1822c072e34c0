#include "common/cpu_dispatch.h"

#include <atomic>
#include <cstring>

namespace prefetch {
namespace kernels {

namespace {
std::atomic<bool> avx2_allowed{true};
std::atomic<bool> avx512_allowed{true};
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

bool cpu_has_avx512() {
#if PREFETCH_AVX2_BUILD
  // (libgcc's and compiler-rt's cpu model report AVX-512 only where XCR0 says the OS saves the
  // opmask and zmm registers)
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vbmi");
  return has;
#else
  return false;
#endif
}

bool use_avx512_build() {
  return cpu_has_avx512() && avx512_allowed.load(std::memory_order_relaxed) && use_avx2_build();
}

bool set_cpu_avx512_allowed(bool allowed) { return avx512_allowed.exchange(allowed); }

const char* cpu_kernel_build() {
  return use_avx512_build() ? "avx512" : use_avx2_build() ? "avx2" : "baseline";
}

bool limit_cpu_kernel_build(const char* highest) {
  const bool avx512 = std::strcmp(highest, "avx512") == 0, avx2 = std::strcmp(highest, "avx2") == 0;
  if (!avx512 && !avx2 && std::strcmp(highest, "baseline") != 0) return false;
  set_cpu_avx2_allowed(avx512 || avx2);
  set_cpu_avx512_allowed(avx512);
  return true;
}

}  // namespace kernels
}  // namespace prefetch
