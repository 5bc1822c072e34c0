// What every CPU kernel's dispatch shares: whether its AVX2 + FMA + F16C build may run (the CPU
// has those instructions and tests have not turned the build off). Each op's *_cpu.cpp builds
// its body for the baseline ISA and calls its *_cpu_avx2.cpp build when use_avx2_build() says so.
#pragma once

// Whether this compiler and target build the AVX2 + FMA + F16C bodies (GCC or Clang on x86-64,
// where `#pragma GCC target` compiles a function for them): the one condition every
// *_cpu_avx2.cpp and its dispatch test.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PREFETCH_AVX2_BUILD 1
#else
#define PREFETCH_AVX2_BUILD 0
#endif

namespace prefetch {
namespace kernels {

// True when the CPU has AVX2, FMA and F16C and set_cpu_avx2_allowed has not turned them off.
bool use_avx2_build();

// Whether the CPU kernels may use their AVX2 + FMA + F16C builds (when the CPU has them);
// returns the previous setting. Tests turn it off to exercise the baseline builds too.
bool set_cpu_avx2_allowed(bool allowed);

}  // namespace kernels
}  // namespace prefetch
