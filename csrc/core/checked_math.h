// Size arithmetic that cannot wrap: every product and sum of element counts and byte sizes in
// collation goes through these, and an overflow is a CollateError instead of a small number
// (a wrapped size would let a huge, expanded tensor be copied into a small buffer).
#pragma once
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>

#include "errors.h"

namespace prefetch {

[[noreturn]] inline void throw_size_overflow(const char* what, const std::string& a, const char* op,
                                             const std::string& b) {
  throw CollateError(std::string("prefetch: ") + what + " overflows: " + a + " " + op + " " + b +
                     " does not fit in 64 bits");
}

// a * b and a + b for size_t (byte sizes) or int64_t (element counts), both operands of one type.
template <typename T>
T checked_mul(T a, T b, const char* what) {
  T r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw_size_overflow(what, std::to_string(a), "*", std::to_string(b));
  return r;
}

template <typename T>
T checked_add(T a, T b, const char* what) {
  T r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw_size_overflow(what, std::to_string(a), "+", std::to_string(b));
  return r;
}

// x rounded up to a multiple of `alignment` (> 0), checked.
inline size_t checked_round_up(size_t x, size_t alignment, const char* what) {
  return checked_add(x, alignment - 1, what) / alignment * alignment;
}

// The product of the sizes in [first, last) as an element count; 0 when any size is 0 (even if
// the others alone would overflow, as torch counts them), an error for a negative size or a
// product past int64.
template <typename It>
int64_t checked_numel(It first, It last, const char* what) {
  for (It s = first; s != last; ++s) {
    if (*s < 0) throw CollateError(std::string("prefetch: ") + what + " has a negative size " + std::to_string(*s));
    if (*s == 0) return 0;
  }
  int64_t n = 1;
  for (It s = first; s != last; ++s) n = checked_mul(n, static_cast<int64_t>(*s), what);
  return n;
}

template <typename Sizes>
int64_t checked_numel(const Sizes& sizes, const char* what) {
  return checked_numel(std::begin(sizes), std::end(sizes), what);
}

}  // namespace prefetch
