// CPU twin of resized_crop.cu: the same taps (resized_crop_taps.h). The body is
// resized_crop_cpu_impl.h; this file builds it for the baseline ISA and dispatches to the
// AVX2 + FMA + F16C build (resized_crop_cpu_avx2.cpp) when the CPU supports it.
#include <atomic>

#include "resized_crop.h"
#include "resized_crop_cpu_impl.h"

namespace {

struct OutFloat16Software {
  using type = uint16_t;
  static constexpr bool kNeedsScratch = false;
  static void store(uint16_t* dst, int64_t stride, const float* v, uint16_t*, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i * stride] = prefetch::kernels::float_to_half_bits(v[i]);
  }
};

std::atomic<bool> avx2_allowed{true};

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
bool has_avx2_f16c() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return yes;
}
#endif

}  // namespace

namespace prefetch {
namespace kernels {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
void resized_crop_cpu_avx2(const ResizedCropArgs& args, int64_t row_begin, int64_t row_end);
#endif

void resized_crop_cpu(const ResizedCropArgs& args, int64_t row_begin, int64_t row_end) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (avx2_allowed.load(std::memory_order_relaxed) && has_avx2_f16c()) {
    return resized_crop_cpu_avx2(args, row_begin, row_end);
  }
#endif
  resized_crop_impl<OutFloat16Software>(args, row_begin, row_end);
}

bool set_resized_crop_avx2_allowed(bool allowed) { return avx2_allowed.exchange(allowed); }

}  // namespace kernels
}  // namespace prefetch
