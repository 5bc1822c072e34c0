// The CPU sharpness built for AVX2 (x86-64 only; sharpness_cpu.cpp calls it when the CPU has it):
// the blend's doubles 4 to a vector.
#include "common/cpu_dispatch.h"
#if PREFETCH_AVX2_BUILD
#include <cstdint>

#include "sharpness/sharpness.h"
#include "sharpness/sharpness_thread_work.h"

// The impl's standard headers and per-value functions are included above, outside the pragma: a
// standard header first seen inside it declares its always_inline members AVX2-only, which GCC 13
// then refuses to inline into baseline code (normalize_flip_cpu_avx2.cpp says more), and the
// per-value functions, shared with the baseline build, must stay baseline code.
#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "sharpness/sharpness_cpu_impl.h"

namespace prefetch {
namespace kernels {
void sharpness_cpu_avx2(const SharpnessArgs& args, int64_t row_begin, int64_t row_end) {
  sharpness_rows<struct Avx2Isa>(args, row_begin, row_end);
}
}  // namespace kernels
}  // namespace prefetch

#pragma GCC pop_options
#endif  // PREFETCH_AVX2_BUILD
