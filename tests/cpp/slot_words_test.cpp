// The worker ring's slot table: claims are exclusive under contention, generations fence off
// stale words, and the control-word helpers are atomic (run under TSan by scripts/sanitize.sh).
#include "slot_words.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace sw = prefetch::slot_words;

TEST(SlotWords, EncodeRoundTrips) {
  const int64_t w = sw::encode(sw::kMaxGeneration, sw::kMaxPid, sw::kSent);
  EXPECT_EQ(sw::generation_of(w), sw::kMaxGeneration);
  EXPECT_EQ(sw::pid_of(w), sw::kMaxPid);
  EXPECT_EQ(sw::state_of(w), sw::kSent);
  EXPECT_EQ(sw::state_of(sw::encode(7, 12345, sw::kWriting)), sw::kWriting);
  EXPECT_EQ(sw::pid_of(sw::encode(7, 12345, sw::kWriting)), 12345);
  EXPECT_THROW(sw::encode(-1, 1, sw::kFree), std::invalid_argument);
  EXPECT_THROW(sw::encode(sw::kMaxGeneration + 1, 1, sw::kFree), std::invalid_argument);
  EXPECT_THROW(sw::encode(1, sw::kMaxPid + 1, sw::kFree), std::invalid_argument);
}

TEST(SlotWords, ClaimTakesOnlyFreeWordsOfTheGeneration) {
  std::vector<int64_t> words = {sw::encode(3, 0, sw::kFree), sw::encode(4, 0, sw::kFree),
                                sw::encode(4, 99, sw::kWriting), sw::encode(4, 0, sw::kFree)};
  EXPECT_EQ(sw::claim(words.data(), words.size(), 4, 11), 1);  // not the stale generation 3
  EXPECT_EQ(words[1], sw::encode(4, 11, sw::kWriting));
  EXPECT_EQ(sw::claim(words.data(), words.size(), 4, 12), 3);
  EXPECT_EQ(sw::claim(words.data(), words.size(), 4, 13), -1);
  EXPECT_EQ(words[0], sw::encode(3, 0, sw::kFree));  // untouched
  sw::store(&words[1], sw::encode(4, 0, sw::kFree));
  EXPECT_EQ(sw::claim(words.data(), words.size(), 4, 14), 1);
}

// Many claimers, one releaser: no slot is ever held by two claimers at once, and every release
// is claimed again exactly once.
TEST(SlotWords, ContendedClaimsAreExclusive) {
  constexpr int kSlots = 5, kThreads = 4, kClaimsEach = 2000;
  std::vector<int64_t> words(kSlots, sw::encode(1, 0, sw::kFree));
  std::vector<std::atomic<int>> holders(kSlots);
  std::atomic<int> violations{0}, total{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int done = 0; done < kClaimsEach;) {
        const int64_t i = sw::claim(words.data(), words.size(), 1, 100 + t);
        if (i < 0) {
          std::this_thread::yield();
          continue;
        }
        if (holders[i].fetch_add(1) != 0) violations.fetch_add(1);
        EXPECT_EQ(sw::pid_of(sw::load(&words[i])), 100 + t);
        holders[i].fetch_sub(1);
        sw::store(&words[i], sw::encode(1, 0, sw::kFree));
        ++done;
        total.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(total.load(), kThreads * kClaimsEach);
}

TEST(SlotWords, CompareAndSetChangesOnlyTheExpectedWord) {
  int64_t word = sw::encode(2, 0, sw::kLeased);
  EXPECT_FALSE(sw::compare_and_set(&word, sw::encode(1, 0, sw::kLeased), sw::encode(2, 0, sw::kFree)));
  EXPECT_EQ(sw::state_of(word), sw::kLeased);
  EXPECT_TRUE(sw::compare_and_set(&word, sw::encode(2, 0, sw::kLeased), sw::encode(3, 0, sw::kFree)));
  EXPECT_EQ(word, sw::encode(3, 0, sw::kFree));
}

TEST(SlotWords, AddAndRaiseToAreAtomic) {
  int64_t counter = 0, high = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) {
        sw::add(&counter, 1);
        sw::raise_to(&high, t * 10000 + i);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(sw::load(&counter), 40000);
  EXPECT_EQ(sw::load(&high), 39999);
  EXPECT_EQ(sw::raise_to(&high, 5), 39999);  // never lowers
}
