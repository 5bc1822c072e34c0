#include "slot_words.h"

#include <stdexcept>
#include <string>

// GCC/Clang __atomic builtins rather than std::atomic: the words live in memory mapped by
// several processes (a torch shared-memory tensor), not in C++ objects; 64-bit atomics are
// lock-free and address-free on every platform prefetch builds for, which is what makes them
// valid across processes.
static_assert(__atomic_always_lock_free(sizeof(int64_t), 0), "64-bit atomics must be lock-free");

namespace prefetch::slot_words {

int64_t encode(int64_t generation, int64_t pid, State state) {
  if (generation < 0 || generation > kMaxGeneration) {
    throw std::invalid_argument("prefetch: slot generation " + std::to_string(generation) +
                                " outside [0, 2^31)");
  }
  if (pid < 0 || pid > kMaxPid) {
    throw std::invalid_argument("prefetch: pid " + std::to_string(pid) + " outside [0, 2^30)");
  }
  return generation << 32 | pid << 2 | static_cast<int64_t>(state);
}

int64_t generation_of(int64_t word) { return word >> 32; }
int64_t pid_of(int64_t word) { return (word >> 2) & kMaxPid; }
State state_of(int64_t word) { return static_cast<State>(word & 3); }

int64_t claim(int64_t* words, size_t n, int64_t generation, int64_t pid) {
  const int64_t free_word = encode(generation, 0, kFree);
  const int64_t mine = encode(generation, pid, kWriting);
  for (size_t i = 0; i < n; ++i) {
    int64_t expected = free_word;
    // Acquire on success: the claimer's writes into the slot come after the main process's
    // release of it (its copy out of the slot has finished reading).
    if (__atomic_compare_exchange_n(&words[i], &expected, mine, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED)) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

int64_t load(const int64_t* word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }
void store(int64_t* word, int64_t value) { __atomic_store_n(word, value, __ATOMIC_RELEASE); }
bool compare_and_set(int64_t* word, int64_t expected, int64_t desired) {
  return __atomic_compare_exchange_n(word, &expected, desired, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE);
}

int64_t add(int64_t* word, int64_t delta) {
  return __atomic_add_fetch(word, delta, __ATOMIC_ACQ_REL);
}

int64_t raise_to(int64_t* word, int64_t value) {
  int64_t current = __atomic_load_n(word, __ATOMIC_ACQUIRE);
  while (current < value &&
         !__atomic_compare_exchange_n(word, &current, value, false, __ATOMIC_ACQ_REL,
                                      __ATOMIC_ACQUIRE)) {
  }
  return current < value ? value : current;
}

}  // namespace prefetch::slot_words
