// Included first by a CPU kernel file whose loops select between float results: the compiler
// vectorises a select over float comparisons only if it may assume they raise no floating-point
// trap (their results are IEEE's either way; no rounding changes). The pragma holds for the rest
// of the including file — its own functions and the inline functions of the headers it includes
// after this one — and for no other file. (GCC's pragma; clang has none, and its build is only
// the fuzzing one.)
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
