// What every CPU kernel's dispatch shares: whether its AVX2 + FMA + F16C build may run (the CPU
// has those instructions and tests have not turned the build off). Each op's *_cpu.cpp builds
// its body for the baseline ISA and calls its *_cpu_avx2.cpp build when use_avx2_build() says so.
// A kernel that gains from AVX-512 (a whole 256-entry table read by two instructions with VBMI)
// also has a *_cpu_avx512.cpp build, a tier above AVX2: it runs when use_avx512_build() says so.
#pragma once
#include <cstdint>

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

// Whether the CPU has AVX-512 F, BW, VL, DQ and VBMI with the OS saving their registers (Intel from
// Ice Lake, AMD from Zen 4): what the *_cpu_avx512.cpp builds need. Tests say by it whether that build ran.
bool cpu_has_avx512();

// True when cpu_has_avx512() and neither set_cpu_avx512_allowed nor set_cpu_avx2_allowed turned
// the builds off (turning AVX2 off turns AVX-512 off too: the tests' "baseline" stays baseline).
bool use_avx512_build();

// Whether the CPU kernels may use their AVX-512 builds; returns the previous setting. Tests turn
// it off to run the AVX2 builds on a CPU that has AVX-512.
bool set_cpu_avx512_allowed(bool allowed);

// The highest build the CPU kernels use now: "avx512", "avx2" or "baseline".
const char* cpu_kernel_build();

// Allows the builds up to `highest` ("avx512", "avx2" or "baseline"; a build the CPU lacks falls
// back to the best it has, as torch's ATEN_CPU_CAPABILITY does). False, changing nothing, for any
// other name.
bool limit_cpu_kernel_build(const char* highest);

// Every *_cpu.cpp's dispatch, the one template: the op's AVX-512 build when it has one and
// use_avx512_build() says so, else its AVX2 build when use_avx2_build() says so, else its baseline
// body, each over the same range of the kernel's items. A null build is one the op lacks; an op's
// file names its builds with PREFETCH_ISA_BUILD, null where PREFETCH_AVX2_BUILD is 0 (the builds
// are then not compiled).
template <typename Args>
struct CpuBuild {
  using Body = void (*)(const Args& args, int64_t begin, int64_t end);
};

template <typename Args>
inline void run_cpu_build(const Args& args, int64_t begin, int64_t end, typename CpuBuild<Args>::Body baseline,
                          typename CpuBuild<Args>::Body avx2, typename CpuBuild<Args>::Body avx512 = nullptr) {
  if (avx512 != nullptr && use_avx512_build()) return avx512(args, begin, end);
  if (avx2 != nullptr && use_avx2_build()) return avx2(args, begin, end);
  baseline(args, begin, end);
}

}  // namespace kernels
}  // namespace prefetch

#if PREFETCH_AVX2_BUILD
#define PREFETCH_ISA_BUILD(body) (&body)
#else
#define PREFETCH_ISA_BUILD(body) nullptr
#endif
