// The CPU kernels' builds, for tests that run a kernel in each: the baseline ISA, AVX2 and
// AVX-512 (common/cpu_dispatch.h), each selected in turn for a scope. A build the CPU lacks is
// not in cpu_builds(), and the test says so on its output instead of passing as if it had run.
#pragma once
#include <cstdio>
#include <vector>

#include "common/cpu_dispatch.h"

namespace cpu_builds_test {

enum class IsaBuild { kBaseline, kAvx2, kAvx512 };

inline const char* build_name(IsaBuild b) {
  return b == IsaBuild::kBaseline ? "baseline" : b == IsaBuild::kAvx2 ? "AVX2" : "AVX-512";
}

// Those this CPU runs (the AVX2 build needs AVX2, FMA and F16C: where they are missing, its
// dispatch falls back to the baseline, which then runs twice).
inline std::vector<IsaBuild> cpu_builds() {
  std::vector<IsaBuild> builds{IsaBuild::kBaseline, IsaBuild::kAvx2};
  if (prefetch::kernels::cpu_has_avx512()) {
    builds.push_back(IsaBuild::kAvx512);
  } else {
    std::printf("[ NOTE     ] this CPU has no AVX-512 VBMI: the kernels' AVX-512 builds are not run\n");
  }
  return builds;
}

// Selects one build until the end of the scope (the previous settings restored then).
class ScopedCpuBuild {
 public:
  explicit ScopedCpuBuild(IsaBuild b)
      : avx2_(prefetch::kernels::set_cpu_avx2_allowed(b != IsaBuild::kBaseline)),
        avx512_(prefetch::kernels::set_cpu_avx512_allowed(b == IsaBuild::kAvx512)) {}
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
