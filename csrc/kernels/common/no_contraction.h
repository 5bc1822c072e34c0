// Included first by a CPU kernel file whose arithmetic must round each multiply and add alone
// (color_jitter's hue, as torchvision rounds it; Pillow's blend, common/pillow_blend.h) while it
// may fuse others on purpose (fma_rn, common/round_each.h), when it is built with an FMA
// instruction (the AVX2 and AVX-512 files; the baseline files too, for an ISA whose baseline has
// one): GCC contracts a * b + c into an FMA by default wherever the target has one; this pragma
// stops that for the rest of the including file — its functions and the inline functions of the
// headers it includes after this one — and for no other file.
// Explicit std::fma still compiles to the instruction. (GCC's pragma; clang contracts only within
// one expression by default, and its build is only the fuzzing one.)
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
