// CPU twin of normalize_flip.cu: the same geometry (geometry.h). The body is
// normalize_flip_cpu_impl.h; this file builds it for the baseline ISA and dispatches to the
// AVX2 + FMA + F16C build (normalize_flip_cpu_avx2.cpp) when the CPU supports it.
#include <atomic>

#include "normalize_flip.h"
#include "normalize_flip_cpu_impl.h"

namespace {

struct StoreFloat16Software {
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
void normalize_flip_cpu_avx2(const NormalizeFlipArgs& args, int64_t row_begin, int64_t row_end);
#endif

void normalize_flip_cpu(const NormalizeFlipArgs& args, int64_t row_begin, int64_t row_end) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (avx2_allowed.load(std::memory_order_relaxed) && has_avx2_f16c()) {
    return normalize_flip_cpu_avx2(args, row_begin, row_end);
  }
#endif
  normalize_flip_impl<StoreFloat16Software>(args, row_begin, row_end);
}

bool set_cpu_avx2_allowed(bool allowed) { return avx2_allowed.exchange(allowed); }

void flip_crop_cpu(const FlipCropArgs& args, int64_t row_begin, int64_t row_end) {
  flip_crop_impl(args, row_begin, row_end);
}

}  // namespace kernels
}  // namespace prefetch
