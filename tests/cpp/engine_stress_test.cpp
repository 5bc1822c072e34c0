// Randomised stress of the engine on the host backend: random delays before every piece of
// stream work, random producer and consumer speeds, batch sizes that make the ring grow. Every
// byte of every batch is checked against values derived from its sequence number alone. Counts
// scale with PREFETCH_TEST_SCALE (and shrink under ThreadSanitizer, see test_util.h).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine.h"
#include "engine_batches.h"
#include "errors.h"
#include "test_util.h"

namespace prefetch {
namespace test {
namespace {

struct StressCase {
  int depth;
  int producer_sleep_us;  // max random sleep before each submit
  int consumer_sleep_us;  // max random sleep before each next()
  const char* name;
};

class EngineStress : public ::testing::TestWithParam<StressCase> {};

// Submits batch `tag` in one of three ways: plain submit; submit with after_copy work that checks
// on the stream that leaf 0 has landed; stage + stream work + publish.
uint64_t submit_any_way(Engine& e, uint64_t token, uint64_t tag, const Spec& s, Allocator& alloc,
                        std::atomic<int>* stream_errors) {
  auto batch = build_batch(tag, s);
  if (tag % 3 == 0 || s.n0 == 0) return e.submit(token, batch->leaves, alloc.fn());

  auto dest = std::make_shared<std::shared_ptr<std::vector<uint8_t>>>();
  DestinationAllocator capture = [dest](size_t bytes) {
    *dest = std::make_shared<std::vector<uint8_t>>(bytes, 0xEE);
    return Destination{reinterpret_cast<std::byte*>((*dest)->data()), *dest};
  };
  StreamWork check = [dest, tag, n0 = s.n0, stream_errors](void*) {
    const uint8_t* d = (*dest)->data();
    for (size_t k = 0; k < n0; k += 61) {
      if (d[k] != pattern_byte(tag * 4, k)) {
        stream_errors->fetch_add(1);
        return;
      }
    }
    if (d[n0 - 1] != pattern_byte(tag * 4, n0 - 1)) stream_errors->fetch_add(1);
  };
  if (tag % 3 == 1) return e.submit(token, batch->leaves, capture, check);
  StagedBatch staged = e.stage(token, batch->leaves, capture);
  e.backend().enqueue(check);
  return e.publish(std::move(staged));
}

TEST_P(EngineStress, EveryByteOfEveryBatch) {
  const StressCase c = GetParam();
  const int n = prefetch_test::scaled(250, 40);
  std::atomic<int> stream_errors{0};
  Allocator alloc;
  EngineHarness h(options(c.depth, 1 + c.depth % 3, 4096 * (1 + c.depth)));
  Engine& e = *h;
  e.backend().set_debug_delay(200, 1000 + c.depth);
  const uint64_t token = e.start_epoch();

  auto producer = h.spawn([&e, &alloc, &stream_errors, c, n, token] {
    std::mt19937 rng(c.depth * 7 + c.producer_sleep_us);
    try {
      for (int i = 0; i < n; ++i) {
        const uint64_t tag = static_cast<uint64_t>(i);
        if (c.producer_sleep_us) std::this_thread::sleep_for(std::chrono::microseconds(rng() % c.producer_sleep_us));
        uint64_t seq = submit_any_way(e, token, tag, random_spec(tag, true), alloc, &stream_errors);
        if (seq != tag) throw std::runtime_error("seq " + std::to_string(seq) + " for batch " + std::to_string(i));
      }
      e.finish(token, false);
      return std::string();
    } catch (const std::exception& ex) {
      e.finish(token, true);
      return std::string(ex.what());
    }
  });

  std::mt19937 rng(c.depth * 13 + c.consumer_sleep_us);
  std::vector<std::pair<ReadyBatch, uint64_t>> kept;
  std::vector<std::string> errors;
  int received = 0;
  while (errors.size() < 5) {
    if (c.consumer_sleep_us) std::this_thread::sleep_for(std::chrono::microseconds(rng() % c.consumer_sleep_us));
    ReadyBatch b;
    NextStatus st = e.next(token, &b, kLongWait);
    if (st != NextStatus::kBatch) {
      if (st != NextStatus::kEnd) errors.push_back("status " + std::to_string(static_cast<int>(st)));
      break;
    }
    if (b.seq != static_cast<uint64_t>(received)) {
      errors.push_back("seq " + std::to_string(b.seq) + " at " + std::to_string(received));
    }
    // Stats are read while the producer updates them (the binding reports them any time).
    const EngineStats stats = e.stats();
    if (stats.delivered != static_cast<uint64_t>(received) + 1 || stats.submitted < stats.delivered ||
        stats.submitted > stats.delivered + static_cast<uint64_t>(c.depth)) {
      errors.push_back("stats: submitted " + std::to_string(stats.submitted) + " delivered " +
                       std::to_string(stats.delivered) + " after batch " + std::to_string(received));
    }
    e.backend().wait_on(*b.ready, nullptr);
    std::string err = verify(b, b.seq, random_spec(b.seq, true));
    if (!err.empty()) errors.push_back(err);
    if (received % 9 == 4) kept.emplace_back(std::move(b), static_cast<uint64_t>(received));
    ++received;
  }
  for (const auto& err : errors) ADD_FAILURE() << err;
  if (!errors.empty()) return;  // the harness cancels the producer
  ASSERT_TRUE(ready_within(producer, 10s));
  EXPECT_EQ(producer.get(), "");
  EXPECT_EQ(received, n);
  EXPECT_EQ(stream_errors.load(), 0) << "stream work ran before the copy had landed";

  // Batches kept alive all along are still intact after everything that followed.
  ASSERT_FALSE(kept.empty());
  for (auto& [b, tag] : kept) EXPECT_EQ(verify(b, tag, random_spec(tag, true)), "");
  EngineStats st = e.stats();
  EXPECT_EQ(st.submitted, static_cast<uint64_t>(n));
  EXPECT_EQ(st.delivered, static_cast<uint64_t>(n));
  EXPECT_GT(st.ring_growths, static_cast<uint64_t>(c.depth)) << "no slot grew past its first size";
}

INSTANTIATE_TEST_SUITE_P(
    Speeds, EngineStress,
    ::testing::Values(StressCase{1, 0, 300, "fast_producer"}, StressCase{1, 300, 0, "fast_consumer"},
                      StressCase{1, 150, 150, "random"}, StressCase{2, 0, 300, "fast_producer"},
                      StressCase{2, 300, 0, "fast_consumer"}, StressCase{2, 150, 150, "random"},
                      StressCase{3, 0, 300, "fast_producer"}, StressCase{3, 300, 0, "fast_consumer"},
                      StressCase{3, 150, 150, "random"}, StressCase{4, 0, 300, "fast_producer"},
                      StressCase{4, 300, 0, "fast_consumer"}, StressCase{4, 0, 0, "no_sleep"}),
    [](const ::testing::TestParamInfo<StressCase>& info) {
      return "depth" + std::to_string(info.param.depth) + "_" + info.param.name;
    });

// Epochs cut short at random points: the consumer takes part of an epoch, then starts the next
// one (or cancels first) while the old producer may be anywhere inside submit. A batch of an
// old epoch must never show up in a new one, and every batch delivered must be exact.
TEST(EngineStressEpochs, CutShortEpochsNeverLeakBatches) {
  const int epochs = prefetch_test::scaled(40, 10);
  const int per_epoch = 30;
  std::atomic<int> stream_errors{0};
  std::vector<std::unique_ptr<Allocator>> allocators;
  for (int i = 0; i < epochs; ++i) allocators.push_back(std::make_unique<Allocator>());
  EngineHarness h(options(2, 2));
  Engine& e = *h;
  e.backend().set_debug_delay(100, 77);
  std::mt19937 rng(5);
  std::vector<std::string> errors;
  std::vector<std::shared_future<std::string>> producers;

  uint64_t token = e.start_epoch();
  for (int epoch = 0; epoch < epochs && errors.size() < 5; ++epoch) {
    const uint64_t base = static_cast<uint64_t>(epoch + 1) * 1000000;  // tags of this epoch
    Allocator& alloc = *allocators[epoch];
    producers.push_back(h.spawn([&e, &alloc, &stream_errors, token, base, per_epoch] {
      try {
        for (int i = 0; i < per_epoch; ++i) {
          const uint64_t tag = base + i;
          submit_any_way(e, token, tag, random_spec(tag, false), alloc, &stream_errors);
        }
        e.finish(token, false);
        return std::string("finished");
      } catch (const Cancelled&) {
        return std::string("cancelled");
      } catch (const std::exception& ex) {
        return std::string(ex.what());
      }
    }));
    const int take = static_cast<int>(rng() % (per_epoch + 1));  // per_epoch: the whole epoch
    for (int i = 0; i < take; ++i) {
      if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
      ReadyBatch b;
      NextStatus st = e.next(token, &b, kLongWait);
      if (st != NextStatus::kBatch) {
        errors.push_back("epoch " + std::to_string(epoch) + ": status " + std::to_string(static_cast<int>(st)));
        break;
      }
      if (b.seq != static_cast<uint64_t>(i)) errors.push_back("epoch " + std::to_string(epoch) + ": seq " + std::to_string(b.seq));
      e.backend().wait_on(*b.ready, nullptr);
      std::string err = verify(b, base + b.seq, random_spec(base + b.seq, false));
      if (!err.empty()) errors.push_back("epoch " + std::to_string(epoch) + ": " + err);
    }
    if (take == per_epoch) {
      ReadyBatch b;
      NextStatus st = e.next(token, &b, kLongWait);
      if (st != NextStatus::kEnd) errors.push_back("epoch " + std::to_string(epoch) + ": no end");
    }
    if (rng() % 3 == 0) e.cancel();
    token = e.start_epoch();  // the old producer, if still running, is cancelled
  }
  for (const auto& err : errors) ADD_FAILURE() << err;
  if (!errors.empty()) return;
  for (auto& p : producers) {
    ASSERT_TRUE(ready_within(p, 10s));
    const std::string outcome = p.get();
    EXPECT_TRUE(outcome == "finished" || outcome == "cancelled") << outcome;
  }
  EXPECT_EQ(stream_errors.load(), 0);
}

}  // namespace
}  // namespace test
}  // namespace prefetch
