// Helpers shared by the core tests (not a test file itself: the CMake glob takes *_test.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace prefetch_test {

constexpr bool kUnderTsan =
#if defined(__SANITIZE_THREAD__)
    true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
    true;
#else
    false;
#endif
#else
    false;
#endif

// Multiplier for iteration counts of the stress tests: PREFETCH_TEST_SCALE if set (e.g. 0.2 or
// 5), otherwise 1, or 0.4 under ThreadSanitizer, whose instrumentation makes everything slower.
inline double stress_scale() {
  if (const char* env = std::getenv("PREFETCH_TEST_SCALE")) {
    double s = std::atof(env);
    if (s > 0) return s;
  }
  return kUnderTsan ? 0.4 : 1.0;
}

inline int scaled(int n, int minimum = 1) {
  int v = static_cast<int>(n * stress_scale());
  return v < minimum ? minimum : v;
}

// The byte at position `i` of the pattern that identifies sequence number `seq`. Depends on both
// so that a batch overwritten by another, or shifted, shows up.
inline uint8_t pattern_byte(uint64_t seq, size_t i) {
  uint64_t x = (seq + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(i) * 0xBF58476D1CE4E5B9ull);
  x ^= x >> 31;
  return static_cast<uint8_t>(x ^ (x >> 17));
}

}  // namespace prefetch_test
