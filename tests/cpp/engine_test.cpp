// The engine on the host backend: order, exact content, backpressure, epochs and cancellation,
// errors, ring growth, stage/publish. Batches are checked byte by byte against values computed
// from their tag alone (engine_batches.h). The randomised stress test is engine_stress_test.cpp.
#include "engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine_batches.h"
#include "errors.h"

namespace prefetch {
namespace test {
namespace {

TEST(Engine, RejectsBadOptions) {
  EXPECT_THROW(Engine(make_host_backend(), options(0)), std::invalid_argument);
  EXPECT_THROW(Engine(make_host_backend(), options(-1)), std::invalid_argument);
  EXPECT_THROW(Engine(make_host_backend(), options(2, 0)), std::invalid_argument);
  Engine e(make_host_backend(), options(3, 4));
  EXPECT_EQ(e.depth(), 3);
  EXPECT_EQ(e.num_threads(), 4);
  EXPECT_EQ(e.backend().name(), "host");
  EXPECT_EQ(e.slot_capacity(0), 0u);  // nothing allocated before the first batch
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The setup most tests share: an engine on the host backend (in an EngineHarness, so a broken
// wake-up fails the test instead of hanging it), its first epoch started, and an Allocator for the
// destinations. A test calls start() with the options it needs; the harness is built there, not
// in the constructor, because the options differ from test to test.
class EngineTest : public ::testing::Test {
 protected:
  // Builds the engine with `o` and starts its first epoch, whose token is `token`. A nonzero
  // `stream_delay_us` makes the host stream sleep a random 0..stream_delay_us (drawn from `seed`)
  // before every piece of stream work, so that copies are still queued while the test goes on.
  Engine& start(EngineOptions o, int64_t stream_delay_us = 0, uint64_t seed = 0) {
    harness_.emplace(o);
    if (stream_delay_us != 0) (*harness_)->backend().set_debug_delay(stream_delay_us, seed);
    token = (*harness_)->start_epoch();
    return **harness_;
  }
  EngineHarness& h() { return *harness_; }

  // Submits batch `tag` (spec `s`) into epoch `t` from a harness thread: a submit that blocks
  // for 10 s fails the test (EngineHarness::call).
  uint64_t submit(uint64_t t, uint64_t tag, const Spec& s) { return submit_tag(h(), t, tag, s, alloc); }

  Allocator alloc;
  uint64_t token = 0;

 private:
  // Last, so it is destroyed first: its threads are cancelled and joined while `alloc` and the
  // rest of the fixture they may use are still alive.
  std::optional<EngineHarness> harness_;
};

class EngineDepth : public EngineTest, public ::testing::WithParamInterface<int> {};

// Batches arrive in order with exact content, epoch after epoch, from a producer thread.
TEST_P(EngineDepth, InOrderExactContentSeveralEpochs) {
  Engine& e = start(options(GetParam()));
  const int per_epoch = 25;
  uint64_t total = 0;
  for (uint64_t epoch = 1; epoch <= 4; ++epoch) {
    const uint64_t t = epoch == 1 ? token : e.start_epoch();
    auto producer = h().spawn([this, &e, t, epoch, per_epoch] {
      for (int i = 0; i < per_epoch; ++i) {
        uint64_t tag = epoch * 100000 + i;
        uint64_t seq = submit_tag(e, t, tag, random_spec(tag, false), alloc);
        if (seq != static_cast<uint64_t>(i)) throw std::runtime_error("seq " + std::to_string(seq));
      }
      e.finish(t, false);
    });
    for (int i = 0; i < per_epoch; ++i) {
      uint64_t tag = epoch * 100000 + i;
      expect_batch(e, t, i, tag, random_spec(tag, false));
      if (HasFatalFailure()) return;
    }
    ReadyBatch b;
    EXPECT_EQ(e.next(t, &b, kLongWait), NextStatus::kEnd);
    EXPECT_EQ(e.next(t, &b, kLongWait), NextStatus::kEnd) << "the end is sticky";
    ASSERT_TRUE(ready_within(producer, 10s));
    EXPECT_NO_THROW(producer.get());
    total += per_epoch;
    EngineStats st = e.stats();
    EXPECT_EQ(st.submitted, total);
    EXPECT_EQ(st.delivered, total);
  }
  EXPECT_EQ(alloc.calls.load(), static_cast<int>(total));
}

// Two epochs of `n` batches from a producer thread while the consumer holds on to every batch of
// the epoch; then each held batch is checked against its tag: none was overwritten by a later one.
void expect_held_batches_intact(EngineHarness& h, Allocator& alloc, int n, bool large) {
  Engine& e = *h;
  for (uint64_t epoch = 1; epoch <= 2; ++epoch) {
    const uint64_t t = e.start_epoch();
    h.spawn([&e, &alloc, t, epoch, n, large] {
      for (int i = 0; i < n; ++i) {
        uint64_t tag = epoch * 1000 + i;
        submit_tag(e, t, tag, random_spec(tag, large), alloc);
      }
      e.finish(t, false);
    });
    std::vector<ReadyBatch> held;
    ReadyBatch b;
    NextStatus st;
    while ((st = e.next(t, &b, kLongWait)) == NextStatus::kBatch) held.push_back(std::move(b));
    EXPECT_EQ(st, NextStatus::kEnd);
    ASSERT_EQ(held.size(), static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      e.backend().wait_on(*held[i].ready, nullptr);
      EXPECT_EQ(held[i].seq, static_cast<uint64_t>(i));
      uint64_t tag = epoch * 1000 + i;
      EXPECT_EQ(verify(held[i], tag, random_spec(tag, large)), "");
    }
  }
}

TEST_P(EngineDepth, HeldBatchesAreNeverOverwritten) {
  start(options(GetParam(), 1), 50, 3);
  expect_held_batches_intact(h(), alloc, 30, /*large=*/false);
}

// The CPU device's mode: collation straight into the destination, no ring and no copy. Order,
// exact content and held batches as through the ring, with random stream delays.
TEST_P(EngineDepth, CollateIntoDestinationKeepsOrderContentAndHeldBatches) {
  EngineOptions o = options(GetParam(), 3);
  o.collate_into_destination = true;
  Engine& e = start(o, 50, 11);
  expect_held_batches_intact(h(), alloc, 20, /*large=*/true);
  EXPECT_EQ(e.slot_capacity(0), 0u) << "the ring is not used in this mode";
}

// With depth d, d batches can wait for the consumer; the next submit blocks until one is taken.
TEST_P(EngineDepth, BackpressureBlocksTheProducer) {
  const int d = GetParam();
  Engine& e = start(options(d));
  const Spec s{100, 3, 4, 2, 5};
  for (int i = 0; i < d; ++i) EXPECT_EQ(submit(token, i, s), static_cast<uint64_t>(i));

  const uint64_t wait_before = e.stats().producer_blocked_ns;
  auto started_ns = std::make_shared<std::atomic<int64_t>>(0);  // shared: the thread may outlive a failed test
  auto extra = h().spawn_blocked([this, &e, s, started_ns, d] {
    auto batch = build_batch(d, s);
    started_ns->store(now_ns());  // just before the call: the wait is most of what follows
    return e.submit(token, batch->leaves, alloc.fn());
  });
  EXPECT_FALSE(ready_within(extra, 0s)) << "submit did not block with " << d << " batches waiting";
  EXPECT_EQ(alloc.calls.load(), d);

  const int64_t taken_ns = now_ns();
  expect_batch(e, token, 0, 0, s);
  ASSERT_TRUE(ready_within(extra, 10s)) << "taking a batch did not unblock submit";
  EXPECT_EQ(extra.get(), static_cast<uint64_t>(d));
  for (int i = 1; i <= d; ++i) expect_batch(e, token, i, i, s);
  // The blocked submit is accounted as producer_blocked_ns (it waited from about `started` to `taken`).
  const int64_t blocked_ns = taken_ns - started_ns->load();
  EXPECT_GE(static_cast<int64_t>(e.stats().producer_blocked_ns - wait_before), blocked_ns / 2);
}

// A slow consumer: at no point is the producer more than d batches ahead of the consumer.
TEST_P(EngineDepth, BackpressureWithSlowConsumer) {
  const int d = GetParam();
  const int n = 40;
  std::atomic<int> next_calls{0};  // next() calls begun: never fewer than batches delivered
  std::atomic<int> max_ahead{0};
  std::atomic<int> allocations{0};
  DestinationAllocator alloc = [&](size_t bytes) {
    // Batch k is being allocated, so the engine let it through: at least k + 1 - d batches have
    // been delivered, and at least that many next() calls begun.
    int k = allocations.fetch_add(1);
    int ahead = k + 1 - next_calls.load();
    int prev = max_ahead.load();
    while (ahead > prev && !max_ahead.compare_exchange_weak(prev, ahead)) {
    }
    auto v = std::make_shared<std::vector<uint8_t>>(bytes);
    return Destination{reinterpret_cast<std::byte*>(v->data()), v};
  };
  // Its own harness (not the fixture's), declared after the counters its producer thread uses:
  // the fixture's would outlive them if the test failed with the thread still running.
  EngineHarness h(options(d));
  Engine& e = *h;
  const uint64_t t = e.start_epoch();
  h.spawn([&e, &alloc, t, n] {
    for (int i = 0; i < n; ++i) {
      auto b = build_batch(i, random_spec(i, false));
      e.submit(t, b->leaves, alloc);
    }
    e.finish(t, false);
  });
  for (int i = 0; i < n; ++i) {
    std::this_thread::sleep_for(2ms);
    ReadyBatch b;
    next_calls.fetch_add(1);
    ASSERT_EQ(e.next(t, &b, kLongWait), NextStatus::kBatch);
    e.backend().wait_on(*b.ready, nullptr);
    EXPECT_EQ(verify(b, i, random_spec(i, false)), "");
  }
  ReadyBatch b;
  EXPECT_EQ(e.next(t, &b, kLongWait), NextStatus::kEnd);
  EXPECT_LE(max_ahead.load(), d);
  EXPECT_GE(max_ahead.load(), 1);
}

INSTANTIATE_TEST_SUITE_P(Depths, EngineDepth, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "depth" + std::to_string(info.param);
                         });

// ---------------------------------------------------------------------------------------------
// Cancellation and epochs

// Runs submit and reports how it ended.
std::string submit_outcome(Engine& e, uint64_t token, uint64_t tag, const Spec& s, Allocator& alloc) {
  try {
    submit_tag(e, token, tag, s, alloc);
    return "returned normally";
  } catch (const Cancelled&) {
    return "cancelled";
  } catch (const std::exception& ex) {
    return std::string("threw ") + ex.what();
  }
}

TEST_F(EngineTest, CancelWakesBlockedProducer) {
  const Spec s{10, 1, 1, 1, 1};
  Engine& e = start(options(1));
  submit(token, 0, s);
  auto blocked = h().spawn_blocked([this, &e, s] { return submit_outcome(e, token, 1, s, alloc); });
  ASSERT_FALSE(ready_within(blocked, 0s)) << "submit did not block";
  e.cancel();
  ASSERT_TRUE(ready_within(blocked, 10s)) << "cancel() did not wake the producer";
  EXPECT_EQ(blocked.get(), "cancelled");
  EXPECT_EQ(alloc.calls.load(), 1);

  // The cancelled epoch is over for both sides.
  ReadyBatch b;
  EXPECT_EQ(e.next(token, &b, 0ns), NextStatus::kCancelled);
  EXPECT_THROW(submit(token, 2, s), Cancelled);
  e.finish(token, false);  // ignored

  // A new epoch works from sequence 0.
  const uint64_t t2 = e.start_epoch();
  EXPECT_NE(t2, token);
  EXPECT_EQ(submit(t2, 7, s), 0u);
  expect_batch(e, t2, 0, 7, s);
}

TEST_F(EngineTest, CancelWakesBlockedConsumer) {
  Engine& e = start(options(2));
  auto consumer = h().spawn_blocked([&e, t = token] {
    ReadyBatch b;
    return e.next(t, &b, std::chrono::nanoseconds(-1));  // waits forever
  });
  ASSERT_FALSE(ready_within(consumer, 0s)) << "next() did not block";
  e.cancel();
  ASSERT_TRUE(ready_within(consumer, 10s)) << "cancel() did not wake the consumer";
  EXPECT_EQ(consumer.get(), NextStatus::kCancelled);
}

TEST_F(EngineTest, NewEpochWakesBlockedConsumerOfTheOldOne) {
  Engine& e = start(options(2));
  auto consumer = h().spawn_blocked([&e, t = token] {
    ReadyBatch b;
    return e.next(t, &b, std::chrono::nanoseconds(-1));
  });
  ASSERT_FALSE(ready_within(consumer, 0s)) << "next() did not block";
  e.start_epoch();
  ASSERT_TRUE(ready_within(consumer, 10s)) << "start_epoch() did not wake the old consumer";
  EXPECT_EQ(consumer.get(), NextStatus::kCancelled);
}

// cancel(token) ends the epoch only while `token` is current.
TEST_F(EngineTest, CancelWithTokenIgnoresStaleTokens) {
  const Spec s{64, 2, 2, 1, 2};
  Engine& e = start(options(1));
  const uint64_t t1 = token;
  const uint64_t t2 = e.start_epoch();
  e.cancel(t1);  // a stale iterator's cleanup: no effect on t2
  EXPECT_EQ(submit(t2, 1, s), 0u);
  expect_batch(e, t2, 0, 1, s);

  // The current token: wakes a producer blocked on the full ring and a waiting consumer.
  EXPECT_EQ(submit(t2, 2, s), 1u);
  auto producer = h().spawn_blocked([this, &e, s, t2] { return submit_outcome(e, t2, 3, s, alloc); });
  ASSERT_FALSE(ready_within(producer, 0s)) << "submit did not block";
  e.cancel(t2);
  ASSERT_TRUE(ready_within(producer, 10s)) << "cancel(token) did not wake the producer";
  EXPECT_EQ(producer.get(), "cancelled");
  ReadyBatch b;
  EXPECT_EQ(e.next(t2, &b, 0ns), NextStatus::kCancelled);

  const uint64_t t3 = e.start_epoch();
  auto consumer = h().spawn_blocked([&e, t3] {
    ReadyBatch got;
    return e.next(t3, &got, std::chrono::nanoseconds(-1));
  });
  ASSERT_FALSE(ready_within(consumer, 0s)) << "next() did not block";
  e.cancel(t2);  // stale again: the consumer of t3 keeps waiting
  // Asked at once, not after a sleep: t3 is still current (a next() that does not wait says
  // timeout, not cancelled), so the waiting consumer has nothing to wake for.
  EXPECT_EQ(e.next(t3, &b, 0ns), NextStatus::kTimeout) << "a stale cancel(token) ended the current epoch";
  EXPECT_FALSE(ready_within(consumer, 0s)) << "a stale cancel(token) woke the current epoch's consumer";
  e.cancel(t3);
  ASSERT_TRUE(ready_within(consumer, 10s));
  EXPECT_EQ(consumer.get(), NextStatus::kCancelled);
}

TEST_F(EngineTest, CancelDropsUndeliveredBatches) {
  const Spec s{1000, 5, 7, 2, 30};
  Engine& e = start(options(3));
  for (int i = 0; i < 3; ++i) submit(token, i, s);
  e.cancel();
  const uint64_t t2 = e.start_epoch();
  ReadyBatch b;
  EXPECT_EQ(e.next(t2, &b, 30ms), NextStatus::kTimeout) << "a batch of the cancelled epoch was delivered";
  // All three slots are usable at once: no batch of the old epoch counts against depth.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(submit(t2, 10 + i, s), static_cast<uint64_t>(i));
  for (int i = 0; i < 3; ++i) expect_batch(e, t2, i, 10 + i, s);
}

// Batches dropped by cancel() while their copy is still queued on a slow stream: the engine keeps
// each destination alive until the copy into it has landed (checked by the owner's deleter).
TEST(Engine, DroppedBatchDestinationsLiveUntilTheirCopyLands) {
  std::atomic<int> freed{0}, freed_early{0};
  const Spec s{30000, 4, 4, 0, 0};
  {
    EngineHarness h(options(3));
    Engine& e = *h;
    e.backend().set_debug_delay(3000, 11);  // up to 3 ms before every piece of stream work
    for (int round = 0; round < 3; ++round) {
      const uint64_t token = e.start_epoch();
      for (int i = 0; i < 3; ++i) {
        const uint64_t tag = static_cast<uint64_t>(round * 10 + i);
        auto batch = build_batch(tag, s);
        DestinationAllocator alloc = [&, tag](size_t bytes) {
          auto* v = new std::vector<uint8_t>(bytes, 0xEE);
          std::shared_ptr<std::vector<uint8_t>> owner(v, [&, tag](std::vector<uint8_t>* p) {
            // Leaf 0 sits at offset 0: all of it must be there before the memory goes.
            for (size_t k = 0; k < s.n0; ++k) {
              if ((*p)[k] != pattern_byte(tag * 4, k)) {
                freed_early.fetch_add(1);
                break;
              }
            }
            freed.fetch_add(1);
            delete p;
          });
          return Destination{reinterpret_cast<std::byte*>(v->data()), owner};
        };
        h.call([&] { return e.submit(token, batch->leaves, alloc); });
      }
      e.cancel();  // drops all three batches, most with their copy still queued
    }
  }
  EXPECT_EQ(freed.load(), 9);
  EXPECT_EQ(freed_early.load(), 0) << "a destination was released before the copy into it";
}

// A stale token can neither submit, finish nor take batches from a new epoch.
TEST_F(EngineTest, StaleTokenCannotDeliverIntoNewEpoch) {
  const Spec s{300, 4, 4, 1, 10};
  Engine& e = start(options(2));
  const uint64_t t1 = token;
  submit(t1, 1, s);
  const uint64_t t2 = e.start_epoch();
  EXPECT_THROW(submit(t1, 2, s), Cancelled);
  e.finish(t1, true);  // must not end (or fail) the new epoch
  ReadyBatch b;
  EXPECT_EQ(e.next(t1, &b, 0ns), NextStatus::kCancelled);
  EXPECT_EQ(e.next(t2, &b, 30ms), NextStatus::kTimeout);
  EXPECT_EQ(submit(t2, 3, s), 0u);
  e.finish(t2, false);
  expect_batch(e, t2, 0, 3, s);
  EXPECT_EQ(e.next(t2, &b, 1s), NextStatus::kEnd);
}

// The epoch changes while a submit is past its wait (here: inside the allocator): the batch of
// the old epoch is dropped, not delivered into the new one.
TEST_F(EngineTest, EpochChangeDuringSubmitDropsTheBatch) {
  const Spec s{5000, 8, 9, 3, 40};
  uint64_t t2 = 0;
  int calls = 0;
  Engine& e = start(options(2));
  const uint64_t t1 = token;
  DestinationAllocator racing = [&](size_t bytes) {
    ++calls;
    t2 = e.start_epoch();
    auto v = std::make_shared<std::vector<uint8_t>>(bytes);
    return Destination{reinterpret_cast<std::byte*>(v->data()), v};
  };
  auto b1 = build_batch(1, s);
  EXPECT_THROW(h().call([&] { return e.submit(t1, b1->leaves, racing); }), Cancelled);
  EXPECT_EQ(calls, 1);
  ASSERT_NE(t2, 0u);
  ReadyBatch b;
  EXPECT_EQ(e.next(t2, &b, 30ms), NextStatus::kTimeout);
  EXPECT_EQ(submit(t2, 2, s), 0u);
  expect_batch(e, t2, 0, 2, s);
}

// A producer of the old epoch blocked on a full ring is woken by the new epoch and delivers
// nothing into it, while the new epoch's producer goes through.
TEST_F(EngineTest, StaleBlockedProducerIsCancelledByNewEpoch) {
  const Spec s{2000, 3, 3, 1, 3};
  Engine& e = start(options(1));
  const uint64_t t1 = token;
  submit(t1, 100, s);
  auto stale = h().spawn_blocked([this, &e, s, t1] { return submit_outcome(e, t1, 101, s, alloc); });
  ASSERT_FALSE(ready_within(stale, 0s)) << "submit did not block";
  const uint64_t t2 = e.start_epoch();
  ASSERT_TRUE(ready_within(stale, 10s)) << "the new epoch did not wake the stale producer";
  EXPECT_EQ(stale.get(), "cancelled");
  EXPECT_EQ(submit(t2, 200, s), 0u);
  e.finish(t2, false);
  expect_batch(e, t2, 0, 200, s);
  ReadyBatch b;
  EXPECT_EQ(e.next(t2, &b, 1s), NextStatus::kEnd);
}

TEST_F(EngineTest, FinishFailedAfterRemainingBatches) {
  const Spec s{777, 2, 5, 2, 9};
  Engine& e = start(options(4));
  for (int i = 0; i < 3; ++i) submit(token, i, s);
  e.finish(token, true);
  for (int i = 0; i < 3; ++i) expect_batch(e, token, i, i, s);
  ReadyBatch b;
  EXPECT_EQ(e.next(token, &b, 1s), NextStatus::kFailed);
  EXPECT_EQ(e.next(token, &b, 1s), NextStatus::kFailed);

  // A clean finish of the next epoch is kEnd: the failure does not leak into it.
  const uint64_t t2 = e.start_epoch();
  submit(t2, 9, s);
  e.finish(t2, false);
  expect_batch(e, t2, 0, 9, s);
  EXPECT_EQ(e.next(t2, &b, 1s), NextStatus::kEnd);

  // An empty epoch finished as failed.
  const uint64_t t3 = e.start_epoch();
  e.finish(t3, true);
  EXPECT_EQ(e.next(t3, &b, 1s), NextStatus::kFailed);

  // An epoch left unfinished by the previous one starts clean.
  const uint64_t t4 = e.start_epoch();
  EXPECT_EQ(e.next(t4, &b, 10ms), NextStatus::kTimeout);
}

TEST_F(EngineTest, NextTimesOut) {
  const Spec s{50, 1, 2, 0, 0};
  Engine& e = start(options(2));
  ReadyBatch b;
  EXPECT_EQ(e.next(token, &b, 0ns), NextStatus::kTimeout);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(e.next(token, &b, 40ms), NextStatus::kTimeout);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 35ms);

  // A batch submitted while next() waits with a timeout is returned.
  auto consumer = h().spawn_blocked([&e, t = token] {
    ReadyBatch got;
    NextStatus st = e.next(t, &got, 10s);
    if (st == NextStatus::kBatch) got.ready->wait();
    return std::make_pair(st, got.seq);
  });
  ASSERT_FALSE(ready_within(consumer, 0s)) << "next() did not wait";
  submit(token, 5, s);
  ASSERT_TRUE(ready_within(consumer, 10s));
  auto [st, seq] = consumer.get();
  EXPECT_EQ(st, NextStatus::kBatch);
  EXPECT_EQ(seq, 0u);
  EXPECT_EQ(e.next(token, &b, 10ms), NextStatus::kTimeout);
}

// ---------------------------------------------------------------------------------------------
// Sizes and errors

TEST_F(EngineTest, MaxBatchBytesThrowsCollateError) {
  EngineOptions o = options(8);  // deep enough that a batch wrongly accepted never blocks
  o.max_batch_bytes = 4096;
  Engine& e = start(o);
  const Spec big{5000, 0, 1, 0, 0};
  ASSERT_GT(expected_total(big), 4096u);
  EXPECT_THROW(submit(token, 1, big), CollateError);
  EXPECT_EQ(alloc.calls.load(), 0) << "nothing is allocated for a rejected batch";
  // The cap is on the packed size: leaves that fit only without alignment padding are refused.
  const Spec padded{4000, 1, 40, 0, 0};  // 4000 + 80 bytes, packed to 4096 + 80
  ASSERT_GT(expected_total(padded), 4096u);
  EXPECT_THROW(submit(token, 2, padded), CollateError);

  // The engine goes on working, and a batch of exactly the cap is accepted.
  const Spec exact{4096, 0, 1, 0, 0};
  ASSERT_EQ(expected_total(exact), 4096u);
  EXPECT_EQ(submit(token, 3, exact), 0u);
  const Spec small{100, 2, 3, 1, 4};
  EXPECT_EQ(submit(token, 4, small), 1u);
  expect_batch(e, token, 0, 3, exact);
  expect_batch(e, token, 1, 4, small);
  EXPECT_THROW(submit(token, 5, big), CollateError);
  e.finish(token, false);
  ReadyBatch b;
  EXPECT_EQ(e.next(token, &b, 1s), NextStatus::kEnd);
  EXPECT_EQ(e.stats().submitted, 2u);
}

TEST_F(EngineTest, RingGrowsForLargeBatches) {
  const Spec small{1000, 4, 4, 1, 10};
  const Spec large{3u << 20, 100, 50, 4, 3000};         // ~3 MiB: more than a first 1 MiB slot
  const Spec larger{(5u << 20) + 12345, 10, 10, 1, 1};  // ~5 MiB
  Engine& e = start(options(2, 3, 64 * 1024));
  EXPECT_EQ(e.slot_capacity(0), 0u);

  EXPECT_EQ(submit(token, 0, small), 0u);  // slot 0
  EXPECT_GE(e.slot_capacity(0), expected_total(small));
  const size_t first_capacity = e.slot_capacity(0);
  EXPECT_EQ(submit(token, 1, large), 1u);  // slot 1
  EXPECT_GE(e.slot_capacity(1), expected_total(large));
  expect_batch(e, token, 0, 0, small);
  EXPECT_EQ(submit(token, 2, larger), 2u);  // slot 0 again: grows
  EXPECT_GE(e.slot_capacity(0), expected_total(larger));
  EXPECT_GT(e.slot_capacity(0), first_capacity);
  const size_t grown = e.slot_capacity(0);
  expect_batch(e, token, 1, 1, large);
  expect_batch(e, token, 2, 2, larger);
  EXPECT_EQ(alloc.last_bytes.load(), expected_total(larger));

  // Smaller batches afterwards reuse the grown slots, with the right content.
  EXPECT_EQ(submit(token, 3, small), 3u);  // slot 1
  EXPECT_EQ(submit(token, 4, small), 4u);  // slot 0
  EXPECT_EQ(e.slot_capacity(0), grown);
  expect_batch(e, token, 3, 3, small);
  expect_batch(e, token, 4, 4, small);
  // Growths: slot 0 twice (first use, 5 MiB), slot 1 once.
  EXPECT_EQ(e.stats().ring_growths, 3u);
  EXPECT_EQ(e.stats().bytes_collated,
            3 * expected_total(small) + expected_total(large) + expected_total(larger));
}

TEST(Engine, ZeroByteBatches) {
  std::atomic<int> calls{0};
  std::atomic<int> zero_byte_requests{0};
  DestinationAllocator alloc = [&](size_t bytes) {
    calls.fetch_add(1);
    if (bytes == 0) zero_byte_requests.fetch_add(1);
    auto v = std::make_shared<std::vector<uint8_t>>(bytes == 0 ? 1 : bytes);
    return Destination{reinterpret_cast<std::byte*>(v->data()), v};
  };
  Allocator normal;
  const Spec empty{0, 0, 1, 0, 0};
  const Spec some{321, 3, 3, 2, 7};
  // Its own harness, declared after the allocators its producer thread uses.
  EngineHarness h(options(2));
  Engine& e = *h;
  const uint64_t token = e.start_epoch();
  h.spawn([&e, &alloc, &normal, &empty, &some, token] {
    for (int i = 0; i < 12; ++i) {
      if (i % 3 == 2) {
        submit_tag(e, token, i, some, normal);
      } else if (i % 3 == 0) {
        std::vector<LeafPlan> none;
        e.submit(token, none, alloc);  // no leaves at all
      } else {
        auto b = build_batch(i, empty);  // three empty leaves
        e.submit(token, b->leaves, alloc);
      }
    }
    e.finish(token, false);
  });
  for (int i = 0; i < 12; ++i) {
    ReadyBatch b;
    ASSERT_EQ(e.next(token, &b, kLongWait), NextStatus::kBatch);
    EXPECT_EQ(b.seq, static_cast<uint64_t>(i));
    e.backend().wait_on(*b.ready, nullptr);
    if (i % 3 == 2) {
      EXPECT_EQ(verify(b, i, some), "");
    } else if (i % 3 == 0) {
      EXPECT_TRUE(b.leaves.empty());
    } else {
      EXPECT_EQ(verify(b, i, empty), "");
      for (const auto& l : b.leaves) EXPECT_EQ(l.nbytes, 0u);
    }
  }
  ReadyBatch b;
  EXPECT_EQ(e.next(token, &b, kLongWait), NextStatus::kEnd);
  EXPECT_EQ(calls.load(), 8);
  EXPECT_EQ(zero_byte_requests.load(), 0) << "the allocator is never asked for 0 bytes";
}

TEST_F(EngineTest, AllocatorExceptionPropagatesAndEngineRecovers) {
  const Spec s{3000, 6, 7, 2, 20};
  int calls = 0;
  DestinationAllocator flaky = [&](size_t bytes) {
    if (++calls % 3 == 2) throw std::runtime_error("device out of memory");
    auto v = std::make_shared<std::vector<uint8_t>>(bytes);
    return Destination{reinterpret_cast<std::byte*>(v->data()), v};
  };
  Engine& e = start(options(2));
  std::vector<uint64_t> accepted;
  int failures = 0;
  for (uint64_t tag = 0; tag < 9; ++tag) {
    auto b = build_batch(tag, s);
    try {
      uint64_t seq = h().call([&] { return e.submit(token, b->leaves, flaky); });
      EXPECT_EQ(seq, accepted.size()) << "a failed submit must not take a sequence number";
      accepted.push_back(tag);
      expect_batch(e, token, seq, tag, s);  // taken at once, so depth never blocks
    } catch (const std::runtime_error& ex) {
      ++failures;
      EXPECT_STREQ(ex.what(), "device out of memory");
    }
  }
  EXPECT_EQ(failures, 3);
  EXPECT_EQ(accepted.size(), 6u);
  EXPECT_EQ(e.stats().submitted, 6u);
  e.finish(token, false);
  ReadyBatch b;
  EXPECT_EQ(e.next(token, &b, 1s), NextStatus::kEnd);
}

// An allocator failure must not leave the failed batch counted against depth: with depth 1,
// the epoch goes on after several failures in a row.
TEST_F(EngineTest, AllocatorFailuresDoNotUseUpDepth) {
  const Spec s{100, 2, 2, 1, 3};
  // Shared with the allocator by value: a thread left blocked by a failed test may outlive them.
  auto fail = std::make_shared<std::atomic<bool>>(true);
  DestinationAllocator alloc = [fail](size_t bytes) {
    if (fail->load()) throw std::bad_alloc();
    auto v = std::make_shared<std::vector<uint8_t>>(bytes);
    return Destination{reinterpret_cast<std::byte*>(v->data()), v};
  };
  Engine& e = start(options(1));
  std::shared_ptr<SourceBatch> b = build_batch(1, s);
  for (int i = 0; i < 3; ++i) EXPECT_THROW(h().call([&] { return e.submit(token, b->leaves, alloc); }), std::bad_alloc);
  fail->store(false);
  auto ok = h().spawn([&e, b, alloc, t = token] { return e.submit(t, b->leaves, alloc); });
  ASSERT_TRUE(ready_within(ok, 10s)) << "failed submits were counted against depth";
  EXPECT_EQ(ok.get(), 0u);
  expect_batch(e, token, 0, 1, s);
}

// Stream work given to submit runs after the copy and before the batch's ready event.
TEST_F(EngineTest, AfterCopyWorkRunsBetweenCopyAndReady) {
  const Spec s{20000, 10, 10, 2, 100};
  Engine& e = start(options(2), 300, 9);
  for (int i = 0; i < 5; ++i) {
    auto batch = build_batch(i, s);
    std::atomic<int> ran{0};
    std::shared_ptr<std::vector<uint8_t>> dest;
    DestinationAllocator alloc = [&](size_t bytes) {
      dest = std::make_shared<std::vector<uint8_t>>(bytes, 0);
      return Destination{reinterpret_cast<std::byte*>(dest->data()), dest};
    };
    std::string seen_by_after;
    StreamWork after = [&, i](void* stream) {
      EXPECT_EQ(stream, nullptr);
      // Leaf 0 is at offset 0: it must already be in the destination.
      const uint8_t* d = dest->data();
      for (size_t k = 0; k < s.n0; ++k) {
        if (d[k] != pattern_byte(static_cast<uint64_t>(i) * 4, k)) {
          seen_by_after = "copy not finished before after_copy";
          break;
        }
      }
      std::this_thread::sleep_for(2ms);
      ran.store(1);
    };
    h().call([&] { return e.submit(token, batch->leaves, alloc, after); });
    ReadyBatch b;
    ASSERT_EQ(e.next(token, &b, kLongWait), NextStatus::kBatch);
    e.backend().wait_on(*b.ready, nullptr);
    EXPECT_EQ(ran.load(), 1) << "ready completed before the after_copy work";
    EXPECT_EQ(seen_by_after, "");
    EXPECT_EQ(verify(b, i, s), "");
  }
}

// A batch the user holds stays valid after the engine is gone.
TEST(Engine, BatchesOutliveTheEngine) {
  std::vector<ReadyBatch> held;
  const Spec s{50000, 20, 30, 3, 200};
  {
    Allocator alloc;
    EngineHarness h(options(3));
    Engine& e = *h;
    e.backend().set_debug_delay(500, 5);
    const uint64_t token = e.start_epoch();
    for (int i = 0; i < 3; ++i) submit_tag(h, token, i, s, alloc);
    for (int i = 0; i < 2; ++i) {
      ReadyBatch b;
      ASSERT_EQ(e.next(token, &b, kLongWait), NextStatus::kBatch);
      held.push_back(std::move(b));  // not waited on yet
    }
  }  // destroyed with one batch undelivered and copies possibly in flight
  for (size_t i = 0; i < held.size(); ++i) {
    held[i].ready->wait();
    EXPECT_EQ(verify(held[i], i, s), "");
  }
}

// ---------------------------------------------------------------------------------------------
// stage() / publish()

// Work enqueued between stage and publish (a transform) runs after the copy and before ready;
// the batch is invisible to the consumer until published.
TEST_F(EngineTest, StageThenPublishWithWorkInBetween) {
  const Spec s{10000, 6, 8, 2, 50};
  Engine& e = start(options(2), 200, 21);
  for (uint64_t i = 0; i < 6; ++i) {
    auto batch = build_batch(i, s);
    StagedBatch staged = h().call([&] { return e.stage(token, batch->leaves, alloc.fn()); });
    EXPECT_EQ(staged.token, token);
    EXPECT_EQ(staged.batch.seq, i);
    ASSERT_NE(staged.copied, nullptr);
    EXPECT_EQ(staged.batch.ready, nullptr) << "ready is recorded by publish()";
    ReadyBatch none;
    EXPECT_EQ(e.next(token, &none, 0ns), NextStatus::kTimeout) << "a staged batch was visible";

    // The "transform": inverts leaf 0 in place, on the stream, after the copy.
    uint8_t* d = reinterpret_cast<uint8_t*>(staged.batch.destination.data);
    const size_t n0 = s.n0;
    bool odd = i % 2;
    if (odd) {
      e.backend().enqueue([d, n0](void*) {
        for (size_t k = 0; k < n0; ++k) d[k] = static_cast<uint8_t>(~d[k]);
      });
    }
    std::atomic<int> after{0};
    EXPECT_EQ(e.publish(std::move(staged), [&after](void*) { after.store(1); }), i);

    ReadyBatch b;
    ASSERT_EQ(e.next(token, &b, kLongWait), NextStatus::kBatch);
    EXPECT_EQ(b.seq, i);
    e.backend().wait_on(*b.ready, nullptr);
    EXPECT_EQ(after.load(), 1);
    if (odd) {  // undo the transform, then the batch must be exact
      uint8_t* out = reinterpret_cast<uint8_t*>(b.destination.data);
      for (size_t k = 0; k < n0; ++k) {
        ASSERT_EQ(out[k], static_cast<uint8_t>(~pattern_byte(i * 4, k))) << "transform did not run on the copied bytes";
        out[k] = static_cast<uint8_t>(~out[k]);
      }
    }
    EXPECT_EQ(verify(b, i, s), "");
  }
}

// The copied event of a staged batch covers the copy: once it completes, the bytes are there.
TEST_F(EngineTest, StagedCopiedEventCoversTheCopy) {
  const Spec s{200000, 30, 30, 3, 1000};
  Engine& e = start(options(2), 2000, 4);
  auto batch = build_batch(3, s);
  StagedBatch staged = h().call([&] { return e.stage(token, batch->leaves, alloc.fn()); });
  staged.copied->wait();
  ReadyBatch view;
  view.destination = staged.batch.destination;
  view.leaves = staged.batch.leaves;
  EXPECT_EQ(verify(view, 3, s), "");
  e.publish(std::move(staged));
  expect_batch(e, token, 0, 3, s);
}

// A staged batch counts against depth until the consumer takes it.
TEST_F(EngineTest, StagedBatchCountsAgainstDepth) {
  const Spec s{500, 2, 2, 1, 5};
  Engine& e = start(options(1));
  auto b0 = build_batch(0, s);
  StagedBatch staged = h().call([&] { return e.stage(token, b0->leaves, alloc.fn()); });
  pid_t second_tid = 0;
  auto second = h().spawn_blocked(
      [this, &e, s] {
        auto b1 = build_batch(1, s);
        StagedBatch st = e.stage(token, b1->leaves, alloc.fn());
        return e.publish(std::move(st));
      },
      &second_tid);
  EXPECT_FALSE(ready_within(second, 0s)) << "stage() did not count the unpublished batch";
  const long switches = voluntary_switches(second_tid);
  EXPECT_EQ(e.publish(std::move(staged)), 0u);
  // publish() wakes the waiting stage(); once that has looked at the count and gone back to
  // waiting, it is still blocked by decision, not for want of time.
  EngineHarness::wait_until_waiting_again(second_tid, switches, second);
  EXPECT_FALSE(ready_within(second, 0s)) << "publishing is not delivering: depth is still used";
  expect_batch(e, token, 0, 0, s);
  ASSERT_TRUE(ready_within(second, 10s));
  EXPECT_EQ(second.get(), 1u);
  expect_batch(e, token, 1, 1, s);
}

// A batch staged in an epoch that has since ended is not published into the next one.
TEST_F(EngineTest, PublishAfterEpochChangeThrowsCancelled) {
  const Spec s{700, 3, 3, 1, 5};
  Engine& e = start(options(2));
  const uint64_t t1 = token;
  auto b = build_batch(1, s);
  StagedBatch staged = h().call([&] { return e.stage(t1, b->leaves, alloc.fn()); });
  const uint64_t t2 = e.start_epoch();
  ASSERT_THROW(e.publish(std::move(staged)), Cancelled);
  ReadyBatch out;
  EXPECT_EQ(e.next(t2, &out, 30ms), NextStatus::kTimeout);

  StagedBatch again = h().call([&] { return e.stage(t2, b->leaves, alloc.fn()); });
  e.cancel();
  ASSERT_THROW(e.publish(std::move(again)), Cancelled);
  EXPECT_EQ(e.next(t2, &out, 0ns), NextStatus::kCancelled);

  const uint64_t t3 = e.start_epoch();
  EXPECT_EQ(submit(t3, 1, s), 0u);
  expect_batch(e, t3, 0, 1, s);
}

// ---------------------------------------------------------------------------------------------
// Ring slot reuse and ring capacity

// The consumer takes every batch as soon as it is queued, before its copy has run (the stream
// sleeps up to 1 ms before each piece of work), so the producer's next-but-one submit collates
// into a ring slot whose copy is still queued: it must wait for that copy, or the held batch
// would hold the later batch's bytes. Then a batch larger than every slot grows the ring.
TEST_F(EngineTest, RingSlotIsRewrittenOnlyAfterItsCopyHasReadIt) {
  Engine& e = start(options(2), 1000, 8);
  std::vector<ReadyBatch> held;
  for (uint64_t i = 0; i < 8; ++i) {
    const Spec s = random_spec(i, false);
    EXPECT_EQ(submit(token, i, s), i);  // ring slot i % 2
    ReadyBatch b;
    ASSERT_EQ(e.next(token, &b, kLongWait), NextStatus::kBatch);
    EXPECT_EQ(b.seq, i);
    held.push_back(std::move(b));
  }
  const Spec big{1 << 20, 10, 10, 1, 10};
  const size_t capacity_before = std::max(e.slot_capacity(0), e.slot_capacity(1));
  EXPECT_EQ(submit(token, 8, big), 8u);
  ReadyBatch last;
  ASSERT_EQ(e.next(token, &last, kLongWait), NextStatus::kBatch);
  held.push_back(std::move(last));
  EXPECT_GT(e.slot_capacity(0), capacity_before) << "slot 8 % 2 grew for the larger batch";
  for (uint64_t i = 0; i < held.size(); ++i) {
    held[i].ready->wait();
    EXPECT_EQ(verify(held[i], i, i == 8 ? big : random_spec(i, false)), "") << "batch " << i;
  }
}

// slot_capacity may be read from any thread while the producer grows the ring.
TEST_F(EngineTest, SlotCapacityReadableWhileProducing) {
  // Shared with the monitor by value: a failed test may leave before it stops the monitor.
  auto stop = std::make_shared<std::atomic<bool>>(false);
  auto decreases = std::make_shared<std::atomic<int>>(0);
  Engine& e = start(options(2));
  auto monitor = h().spawn([&e, stop, decreases] {
    size_t last[2] = {0, 0};
    while (!stop->load()) {
      for (size_t i = 0; i < 2; ++i) {
        size_t c = e.slot_capacity(i);
        if (c < last[i]) decreases->fetch_add(1);  // slots never shrink
        last[i] = c;
      }
      std::this_thread::yield();
    }
  });
  for (uint64_t i = 0; i < 8; ++i) {
    const Spec s{(i + 1) * 400000, 3, 3, 1, 3};  // growing past several MiB
    submit(token, i, s);
    expect_batch(e, token, i, i, s);
  }
  stop->store(true);
  ASSERT_TRUE(ready_within(monitor, 10s));
  EXPECT_EQ(decreases->load(), 0);
  EXPECT_GE(e.slot_capacity(0), 7 * 400000u);
  EXPECT_GE(e.slot_capacity(1), 8 * 400000u);
}

}  // namespace
}  // namespace test
}  // namespace prefetch
