// The CPU kernels' builds, for tests that run a kernel in each: the baseline ISA, AVX2 and
// AVX-512 (common/cpu_dispatch.h), each selected in turn for a scope. A build the CPU lacks is
// not in cpu_builds(), and the test says so on its output instead of passing as if it had run.
#pragma once
#include <cstdio>
#include <vector>

#include "common/cpu_dispatch.h"

namespace cpu_builds_test {

enum class CpuBuild { kBaseline, kAvx2, kAvx512 };

inline const char* build_name(CpuBuild b) {
  return b == CpuBuild::kBaseline ? "baseline" : b == CpuBuild::kAvx2 ? "AVX2" : "AVX-512";
}

// Those this CPU runs (the AVX2 build needs AVX2, FMA and F16C: where they are missing, its
// dispatch falls back to the baseline, which then runs twice).
inline std::vector<CpuBuild> cpu_builds() {
  std::vector<CpuBuild> builds{CpuBuild::kBaseline, CpuBuild::kAvx2};
  if (prefetch::kernels::cpu_has_avx512()) {
    builds.push_back(CpuBuild::kAvx512);
  } else {
    std::printf("[ NOTE     ] this CPU has no AVX-512 VBMI: the kernels' AVX-512 builds are not run\n");
  }
  return builds;
}

// Selects one build until the end of the scope (the previous settings restored then).
class ScopedCpuBuild {
 public:
  explicit ScopedCpuBuild(CpuBuild b)
      : avx2_(prefetch::kernels::set_cpu_avx2_allowed(b != CpuBuild::kBaseline)),
        avx512_(prefetch::kernels::set_cpu_avx512_allowed(b == CpuBuild::kAvx512)) {}
  ~ScopedCpuBuild() {
    prefetch::kernels::set_cpu_avx512_allowed(avx512_);
    prefetch::kernels::set_cpu_avx2_allowed(avx2_);
  }
  ScopedCpuBuild(const ScopedCpuBuild&) = delete;
  ScopedCpuBuild& operator=(const ScopedCpuBuild&) = delete;

 private:
  bool avx2_, avx512_;
};

}  // namespace cpu_builds_test
