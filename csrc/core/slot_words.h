// The slot table of the worker ring (docs/engine.md, "Workers write into a shared ring"): one
// 64-bit word per slot, in memory shared by the main process and its DataLoader workers. The
// word says who owns the slot; every change is one atomic operation on it, so a process that
// dies between two operations leaves a word that names it, never a lock held.
//
//   word = generation << 32 | pid << 2 | state
//
// A worker claims a slot by turning FREE(g) into WRITING(g, pid) with a compare-and-swap, where
// g is the generation the main process announced; only the main process turns a slot back into
// FREE, and it starts a new generation (every word FREE(g+1)) when it cannot account for every
// slot. A word of an older generation can therefore never be claimed again by mistake. LEASED:
// the slot's bytes are the output the consumer holds (the CPU device); the last view's deleter
// frees it, with a compare-and-swap from the lease's own word.
#pragma once
#include <cstddef>
#include <cstdint>

namespace prefetch::slot_words {

enum State : int64_t { kFree = 0, kWriting = 1, kSent = 2, kLeased = 3 };

constexpr int64_t kMaxGeneration = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxPid = (int64_t{1} << 30) - 1;

// Throws std::invalid_argument for a generation or pid outside the bits they have.
int64_t encode(int64_t generation, int64_t pid, State state);
int64_t generation_of(int64_t word);
int64_t pid_of(int64_t word);
State state_of(int64_t word);

// Claims the first slot of `words[0, n)` that is FREE in `generation`, for `pid`; returns its
// index, or -1 when none is. Lock-free: safe against other processes claiming at the same time.
int64_t claim(int64_t* words, size_t n, int64_t generation, int64_t pid);

// Atomic loads and stores (acquire/release) on one word of shared memory, for the control words
// next to the slot words too.
int64_t load(const int64_t* word);
void store(int64_t* word, int64_t value);
// Replaces *word by `desired` if it holds `expected`; true if it did.
bool compare_and_set(int64_t* word, int64_t expected, int64_t desired);
// Atomically adds `delta` (counters); returns the new value.
int64_t add(int64_t* word, int64_t delta);
// Atomically raises *word to `value` if it is smaller; returns the value it holds afterwards.
int64_t raise_to(int64_t* word, int64_t value);

}  // namespace prefetch::slot_words
