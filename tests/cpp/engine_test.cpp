#include "engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "errors.h"
#include "test_util.h"

namespace prefetch {
namespace {

using namespace std::chrono_literals;
using prefetch_test::pattern_byte;

constexpr auto kLongWait = std::chrono::seconds(30);  // "forever", but a hang fails the test

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// ---------------------------------------------------------------------------------------------
// Batches: three leaves whose bytes all derive from a tag (epoch and sequence number).
//   leaf 0: n0 contiguous bytes;
//   leaf 1: the (C, R) transpose of a row-major (R, C) array of 2-byte elements;
//   leaf 2: `pieces` samples, each a stride-2 view of m 4-byte elements.
// The expected packed bytes are computed from the tag alone, independently of the collation.

struct Spec {
  size_t n0 = 0;
  int64_t R = 0, C = 0;
  int pieces = 0;
  int64_t m = 0;
};

Spec random_spec(uint64_t tag, bool allow_large) {
  std::mt19937_64 rng(tag * 0x2545F4914F6CDD1Dull + 17);
  Spec s;
  s.n0 = rng() % 5 == 0 ? 0 : rng() % 40000;
  s.R = static_cast<int64_t>(rng() % 41);
  s.C = 1 + static_cast<int64_t>(rng() % 50);
  s.pieces = static_cast<int>(rng() % 5);
  s.m = static_cast<int64_t>(rng() % 500);
  if (allow_large && tag % 37 == 5) s.n0 = (size_t{11} << 17) + rng() % (size_t{3} << 20);  // 1.4..4.4 MiB
  return s;
}

size_t leaf_bytes(const Spec& s, int leaf) {
  switch (leaf) {
    case 0: return s.n0;
    case 1: return static_cast<size_t>(s.R * s.C) * 2;
    default: return static_cast<size_t>(s.pieces) * static_cast<size_t>(s.m) * 4;
  }
}

size_t expected_total(const Spec& s) {
  size_t off = 0;
  for (int l = 0; l < 3; ++l) off = round_up(off, kLeafAlignment) + leaf_bytes(s, l);
  return off;
}

struct SourceBatch {
  std::vector<std::vector<uint8_t>> storage;
  std::vector<LeafPlan> leaves;
};

std::unique_ptr<SourceBatch> build_batch(uint64_t tag, const Spec& s) {
  auto b = std::make_unique<SourceBatch>();
  const uint64_t k0 = tag * 4, k1 = tag * 4 + 1, k2 = tag * 4 + 2;
  b->storage.emplace_back(s.n0);
  for (size_t i = 0; i < s.n0; ++i) b->storage.back()[i] = pattern_byte(k0, i);
  b->storage.emplace_back(static_cast<size_t>(s.R * s.C) * 2);
  for (size_t i = 0; i < b->storage.back().size(); ++i) b->storage.back()[i] = pattern_byte(k1, i);
  for (int p = 0; p < s.pieces; ++p) {
    b->storage.emplace_back(static_cast<size_t>(s.m) * 8);  // 2m elements of 4 bytes
    for (size_t i = 0; i < b->storage.back().size(); ++i) {
      b->storage.back()[i] = pattern_byte(k2, static_cast<size_t>(p) * 8 * s.m + i);
    }
  }
  auto ptr = [&](size_t k) { return reinterpret_cast<const std::byte*>(b->storage[k].data()); };

  LeafPlan l0;
  l0.pieces.push_back(HostTensor{ptr(0), 1, {static_cast<int64_t>(s.n0)}, {1}});
  l0.dtype_code = 1;
  l0.shape = {static_cast<int64_t>(s.n0)};
  LeafPlan l1;
  l1.pieces.push_back(HostTensor{ptr(1), 2, {s.C, s.R}, {1, s.C}});
  l1.dtype_code = 2;
  l1.shape = {s.C, s.R};
  LeafPlan l2;
  for (int p = 0; p < s.pieces; ++p) l2.pieces.push_back(HostTensor{ptr(2 + p), 4, {s.m}, {2}});
  l2.dtype_code = static_cast<int64_t>(tag % 1000);  // carried through untouched
  l2.shape = {s.pieces, s.m};
  b->leaves = {l0, l1, l2};
  return b;
}

uint8_t expected_byte(uint64_t tag, const Spec& s, int leaf, size_t i) {
  switch (leaf) {
    case 0: return pattern_byte(tag * 4, i);
    case 1: {
      // Output element e = c * R + r holds source element r * C + c.
      size_t e = i / 2, byte = i % 2;
      size_t c = e / s.R, r = e % s.R;
      return pattern_byte(tag * 4 + 1, (r * s.C + c) * 2 + byte);
    }
    default: {
      size_t per_piece = static_cast<size_t>(s.m) * 4;
      size_t p = i / per_piece, j = (i % per_piece) / 4, byte = i % 4;
      return pattern_byte(tag * 4 + 2, p * 8 * s.m + 8 * j + byte);
    }
  }
}

// Checks a delivered batch (whose ready event has been waited on); "" when it is right.
std::string verify(const ReadyBatch& b, uint64_t tag, const Spec& s) {
  std::ostringstream err;
  if (b.leaves.size() != 3) {
    err << "tag " << tag << ": " << b.leaves.size() << " leaves";
    return err.str();
  }
  if (b.destination.data == nullptr || !b.destination.owner) return "no destination";
  size_t off = 0;
  for (int l = 0; l < 3; ++l) {
    off = round_up(off, kLeafAlignment);
    const LeafOut& out = b.leaves[l];
    if (out.offset != off || out.nbytes != leaf_bytes(s, l)) {
      err << "tag " << tag << " leaf " << l << ": offset " << out.offset << " nbytes " << out.nbytes
          << ", expected " << off << " " << leaf_bytes(s, l);
      return err.str();
    }
    const int64_t dtype = l == 0 ? 1 : l == 1 ? 2 : static_cast<int64_t>(tag % 1000);
    if (out.dtype_code != dtype) {
      err << "tag " << tag << " leaf " << l << ": dtype_code " << out.dtype_code;
      return err.str();
    }
    const uint8_t* data = reinterpret_cast<const uint8_t*>(b.destination.data) + off;
    for (size_t i = 0; i < out.nbytes; ++i) {
      if (data[i] != expected_byte(tag, s, l, i)) {
        err << "tag " << tag << " leaf " << l << ": byte " << i << " of " << out.nbytes << " is "
            << int(data[i]) << ", expected " << int(expected_byte(tag, s, l, i));
        return err.str();
      }
    }
    off += out.nbytes;
  }
  if (b.leaves[1].shape != std::vector<int64_t>{s.C, s.R}) return "leaf 1 shape not carried";
  return "";
}

// Destinations the test owns: a fresh std::vector per batch, kept alive through `owner`.
struct Allocator {
  std::atomic<int> calls{0};
  std::atomic<size_t> last_bytes{0};
  DestinationAllocator fn() {
    return [this](size_t bytes) {
      calls.fetch_add(1);
      last_bytes.store(bytes);
      auto v = std::make_shared<std::vector<uint8_t>>(bytes, 0xEE);
      return Destination{reinterpret_cast<std::byte*>(v->data()), v};
    };
  }
};

EngineOptions options(int depth, int threads = 2, size_t chunk = 4096) {
  EngineOptions o;
  o.depth = depth;
  o.num_threads = threads;
  o.chunk_bytes = chunk;
  return o;
}

// Submits batch `tag` with the spec for that tag; returns the sequence number.
uint64_t submit_tag(Engine& e, uint64_t token, uint64_t tag, const Spec& s, Allocator& alloc,
                    const StreamWork& after = {}) {
  auto batch = build_batch(tag, s);
  return e.submit(token, batch->leaves, alloc.fn(), after);
}

// Takes the next batch, waits for it the way a consumer does, and verifies it.
void expect_batch(Engine& e, uint64_t token, uint64_t seq, uint64_t tag, const Spec& s,
                  ReadyBatch* keep = nullptr) {
  ReadyBatch b;
  ASSERT_EQ(e.next(token, &b, kLongWait), NextStatus::kBatch) << "waiting for seq " << seq;
  EXPECT_EQ(b.seq, seq);
  ASSERT_NE(b.ready, nullptr);
  e.backend().wait_on(*b.ready, nullptr);
  EXPECT_TRUE(b.ready->complete());
  EXPECT_EQ(verify(b, tag, s), "");
  if (keep) *keep = std::move(b);
}

// ---------------------------------------------------------------------------------------------

TEST(Engine, RejectsBadOptions) {
  EXPECT_THROW(Engine(make_host_backend(), options(0)), std::invalid_argument);
  EXPECT_THROW(Engine(make_host_backend(), options(2, 0)), std::invalid_argument);
  Engine e(make_host_backend(), options(3, 4));
  EXPECT_EQ(e.depth(), 3);
  EXPECT_EQ(e.num_threads(), 4);
  EXPECT_EQ(e.backend().name(), "host");
}

class EngineDepth : public ::testing::TestWithParam<int> {};

// Batches arrive in order with exact content, epoch after epoch, with a producer thread.
TEST_P(EngineDepth, InOrderExactContentSeveralEpochs) {
  Engine e(make_host_backend(), options(GetParam()));
  Allocator alloc;
  const int per_epoch = 25;
  uint64_t total = 0;
  for (uint64_t epoch = 1; epoch <= 4; ++epoch) {
    uint64_t token = e.start_epoch();
    std::exception_ptr producer_error;
    std::thread producer([&] {
      try {
        for (int i = 0; i < per_epoch; ++i) {
          uint64_t tag = epoch * 100000 + i;
          uint64_t seq = submit_tag(e, token, tag, random_spec(tag, false), alloc);
          if (seq != static_cast<uint64_t>(i)) throw std::runtime_error("seq " + std::to_string(seq));
        }
        e.finish(token, false);
      } catch (...) {
        producer_error = std::current_exception();
        e.finish(token, true);
      }
    });
    for (int i = 0; i < per_epoch; ++i) {
      uint64_t tag = epoch * 100000 + i;
      expect_batch(e, token, i, tag, random_spec(tag, false));
      if (HasFatalFailure()) break;
    }
    ReadyBatch b;
    EXPECT_EQ(e.next(token, &b, kLongWait), NextStatus::kEnd);
    EXPECT_EQ(e.next(token, &b, kLongWait), NextStatus::kEnd) << "the end is sticky";
    producer.join();
    EXPECT_FALSE(producer_error);
    total += per_epoch;
    EngineStats st = e.stats();
    EXPECT_EQ(st.submitted, total);
    EXPECT_EQ(st.delivered, total);
  }
  EXPECT_EQ(alloc.calls.load(), static_cast<int>(total));
}

// The consumer holds on to every batch of the epoch: none is overwritten by a later one.
TEST_P(EngineDepth, HeldBatchesAreNeverOverwritten) {
  Engine e(make_host_backend(), options(GetParam(), 1));
  e.backend().set_debug_delay(50, 3);
  Allocator alloc;
  for (int epoch = 1; epoch <= 2; ++epoch) {
    uint64_t token = e.start_epoch();
    const int n = 30;
    std::thread producer([&] {
      for (int i = 0; i < n; ++i) {
        uint64_t tag = epoch * 1000 + i;
        submit_tag(e, token, tag, random_spec(tag, false), alloc);
      }
      e.finish(token, false);
    });
    std::vector<ReadyBatch> held;
    ReadyBatch b;
    NextStatus st;
    while ((st = e.next(token, &b, kLongWait)) == NextStatus::kBatch) held.push_back(std::move(b));
    producer.join();
    EXPECT_EQ(st, NextStatus::kEnd);
    ASSERT_EQ(held.size(), static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      e.backend().wait_on(*held[i].ready, nullptr);
      EXPECT_EQ(held[i].seq, static_cast<uint64_t>(i));
      uint64_t tag = epoch * 1000 + i;
      EXPECT_EQ(verify(held[i], tag, random_spec(tag, false)), "");
    }
  }
}

// With depth d, d batches can wait for the consumer; the next submit blocks until one is taken.
TEST_P(EngineDepth, BackpressureBlocksTheProducer) {
  const int d = GetParam();
  Engine e(make_host_backend(), options(d));
  Allocator alloc;
  uint64_t token = e.start_epoch();
  Spec s{100, 3, 4, 2, 5};
  for (int i = 0; i < d; ++i) EXPECT_EQ(submit_tag(e, token, i, s, alloc), static_cast<uint64_t>(i));

  std::atomic<bool> returned{false};
  auto extra = std::async(std::launch::async, [&] {
    uint64_t seq = submit_tag(e, token, d, s, alloc);
    returned.store(true);
    return seq;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(returned.load()) << "submit did not block with " << d << " batches waiting";
  EXPECT_EQ(alloc.calls.load(), d);

  expect_batch(e, token, 0, 0, s);
  ASSERT_EQ(extra.wait_for(10s), std::future_status::ready) << "taking a batch did not unblock submit";
  EXPECT_EQ(extra.get(), static_cast<uint64_t>(d));
  for (int i = 1; i <= d; ++i) expect_batch(e, token, i, i, s);
  EXPECT_GT(e.stats().slot_wait_ns, 50'000'000u);
}

// A slow consumer: at no point has the producer more than d batches the consumer did not ask for.
TEST_P(EngineDepth, BackpressureWithSlowConsumer) {
  const int d = GetParam();
  Engine e(make_host_backend(), options(d));
  uint64_t token = e.start_epoch();
  const int n = 40;
  std::atomic<int> next_calls{0};  // next() calls begun: never fewer than batches delivered
  std::atomic<int> max_ahead{0};
  std::atomic<int> allocations{0};
  DestinationAllocator alloc = [&](size_t bytes) {
    // Batch k is being allocated: the engine let it through, so at least k + 1 - d batches have
    // been delivered and at least that many next() calls begun.
    int k = allocations.fetch_add(1);
    int ahead = k + 1 - next_calls.load();
    int prev = max_ahead.load();
    while (ahead > prev && !max_ahead.compare_exchange_weak(prev, ahead)) {
    }
    auto v = std::make_shared<std::vector<uint8_t>>(bytes);
    return Destination{reinterpret_cast<std::byte*>(v->data()), v};
  };
  std::thread producer([&] {
    for (int i = 0; i < n; ++i) {
      auto b = build_batch(i, random_spec(i, false));
      e.submit(token, b->leaves, alloc);
    }
    e.finish(token, false);
  });
  for (int i = 0; i < n; ++i) {
    std::this_thread::sleep_for(2ms);
    ReadyBatch b;
    next_calls.fetch_add(1);
    ASSERT_EQ(e.next(token, &b, kLongWait), NextStatus::kBatch);
    e.backend().wait_on(*b.ready, nullptr);
    EXPECT_EQ(verify(b, i, random_spec(i, false)), "");
  }
  ReadyBatch b;
  EXPECT_EQ(e.next(token, &b, kLongWait), NextStatus::kEnd);
  producer.join();
  EXPECT_LE(max_ahead.load(), d);
  EXPECT_GE(max_ahead.load(), 1);
}

INSTANTIATE_TEST_SUITE_P(Depths, EngineDepth, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "depth" + std::to_string(info.param);
                         });

// ---------------------------------------------------------------------------------------------

TEST(Engine, CancelWakesBlockedProducer) {
  Engine e(make_host_backend(), options(1));
  Allocator alloc;
  uint64_t token = e.start_epoch();
  Spec s{10, 1, 1, 1, 1};
  submit_tag(e, token, 0, s, alloc);
  auto blocked = std::async(std::launch::async, [&] {
    try {
      submit_tag(e, token, 1, s, alloc);
      return std::string("returned normally");
    } catch (const Cancelled&) {
      return std::string("cancelled");
    } catch (const std::exception& ex) {
      return std::string("threw ") + ex.what();
    }
  });
  std::this_thread::sleep_for(50ms);
  ASSERT_EQ(blocked.wait_for(0s), std::future_status::timeout) << "submit did not block";
  e.cancel();
  ASSERT_EQ(blocked.wait_for(10s), std::future_status::ready) << "cancel() did not wake the producer";
  EXPECT_EQ(blocked.get(), "cancelled");
  EXPECT_EQ(alloc.calls.load(), 1);

  // The cancelled epoch is over for both sides.
  ReadyBatch b;
  EXPECT_EQ(e.next(token, &b, 0ns), NextStatus::kCancelled);
  EXPECT_THROW(submit_tag(e, token, 2, s, alloc), Cancelled);
  e.finish(token, false);  // ignored

  // A new epoch works from sequence 0.
  uint64_t t2 = e.start_epoch();
  EXPECT_NE(t2, token);
  EXPECT_EQ(submit_tag(e, t2, 7, s, alloc), 0u);
  expect_batch(e, t2, 0, 7, s);
}

TEST(Engine, CancelWakesBlockedConsumer) {
  Engine e(make_host_backend(), options(2));
  uint64_t token = e.start_epoch();
  auto consumer = std::async(std::launch::async, [&] {
    ReadyBatch b;
    return e.next(token, &b, std::chrono::nanoseconds(-1));  // waits forever
  });
  std::this_thread::sleep_for(50ms);
  ASSERT_EQ(consumer.wait_for(0s), std::future_status::timeout) << "next() did not block";
  e.cancel();
  ASSERT_EQ(consumer.wait_for(10s), std::future_status::ready) << "cancel() did not wake the consumer";
  EXPECT_EQ(consumer.get(), NextStatus::kCancelled);
}

TEST(Engine, NewEpochWakesBlockedConsumerOfTheOldOne) {
  Engine e(make_host_backend(), options(2));
  uint64_t token = e.start_epoch();
  auto consumer = std::async(std::launch::async, [&] {
    ReadyBatch b;
    return e.next(token, &b, kLongWait);
  });
  std::this_thread::sleep_for(30ms);
  e.start_epoch();
  ASSERT_EQ(consumer.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(consumer.get(), NextStatus::kCancelled);
}

TEST(Engine, CancelDropsUndeliveredBatches) {
  Engine e(make_host_backend(), options(3));
  Allocator alloc;
  uint64_t token = e.start_epoch();
  Spec s{1000, 5, 7, 2, 30};
  for (int i = 0; i < 3; ++i) submit_tag(e, token, i, s, alloc);
  e.cancel();
  uint64_t t2 = e.start_epoch();
  ReadyBatch b;
  EXPECT_EQ(e.next(t2, &b, 30ms), NextStatus::kTimeout) << "a batch of the cancelled epoch was delivered";
  // All three slots are usable again at once: no batch of the old epoch counts against depth.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(submit_tag(e, t2, 10 + i, s, alloc), static_cast<uint64_t>(i));
  for (int i = 0; i < 3; ++i) expect_batch(e, t2, i, 10 + i, s);
}

// Batches dropped by cancel() while their copy is still queued on a slow stream: the engine keeps
// each destination alive until the copy into it has landed (checked by the owner's deleter).
TEST(Engine, DroppedBatchDestinationsLiveUntilTheirCopyLands) {
  std::atomic<int> freed{0}, freed_early{0};
  const Spec s{30000, 4, 4, 0, 0};
  {
    Engine e(make_host_backend(), options(3));
    e.backend().set_debug_delay(3000, 11);  // up to 3 ms before every piece of stream work
    for (int round = 0; round < 3; ++round) {
      uint64_t token = e.start_epoch();
      for (int i = 0; i < 3; ++i) {
        const uint64_t tag = static_cast<uint64_t>(round * 10 + i);
        auto batch = build_batch(tag, s);
        DestinationAllocator alloc = [&, tag](size_t bytes) {
          auto* v = new std::vector<uint8_t>(bytes, 0xEE);
          std::shared_ptr<std::vector<uint8_t>> owner(v, [&, tag](std::vector<uint8_t>* p) {
            // Leaf 0 sits at offset 0: every byte of it must be there before the memory goes.
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
        e.submit(token, batch->leaves, alloc);
      }
      e.cancel();  // drops all three batches, most of them with their copy still queued
    }
  }
  EXPECT_EQ(freed.load(), 9);
  EXPECT_EQ(freed_early.load(), 0) << "a destination was released before the copy into it";
}

// A stale token can neither submit, finish nor take batches from a new epoch.
TEST(Engine, StaleTokenCannotDeliverIntoNewEpoch) {
  Engine e(make_host_backend(), options(2));
  Allocator alloc;
  Spec s{300, 4, 4, 1, 10};
  uint64_t t1 = e.start_epoch();
  submit_tag(e, t1, 1, s, alloc);
  uint64_t t2 = e.start_epoch();
  EXPECT_THROW(submit_tag(e, t1, 2, s, alloc), Cancelled);
  e.finish(t1, true);  // must not end (or fail) the new epoch
  ReadyBatch b;
  EXPECT_EQ(e.next(t1, &b, 0ns), NextStatus::kCancelled);
  EXPECT_EQ(e.next(t2, &b, 30ms), NextStatus::kTimeout);
  EXPECT_EQ(submit_tag(e, t2, 3, s, alloc), 0u);
  e.finish(t2, false);
  expect_batch(e, t2, 0, 3, s);
  EXPECT_EQ(e.next(t2, &b, 1s), NextStatus::kEnd);
}

// The epoch changes while a submit is past its wait (here: inside the allocator): the batch of
// the old epoch is dropped, not delivered into the new one.
TEST(Engine, EpochChangeDuringSubmitDropsTheBatch) {
  Engine e(make_host_backend(), options(2));
  Spec s{5000, 8, 9, 3, 40};
  uint64_t t1 = e.start_epoch();
  uint64_t t2 = 0;
  int calls = 0;
  DestinationAllocator racing = [&](size_t bytes) {
    ++calls;
    t2 = e.start_epoch();
    auto v = std::make_shared<std::vector<uint8_t>>(bytes);
    return Destination{reinterpret_cast<std::byte*>(v->data()), v};
  };
  auto b1 = build_batch(1, s);
  EXPECT_THROW(e.submit(t1, b1->leaves, racing), Cancelled);
  EXPECT_EQ(calls, 1);
  ASSERT_NE(t2, 0u);
  ReadyBatch b;
  EXPECT_EQ(e.next(t2, &b, 30ms), NextStatus::kTimeout);
  Allocator alloc;
  EXPECT_EQ(submit_tag(e, t2, 2, s, alloc), 0u);
  expect_batch(e, t2, 0, 2, s);
}

// A producer of the old epoch blocked on a full ring is woken by the new epoch and delivers
// nothing into it, while the new epoch's producer goes through.
TEST(Engine, StaleBlockedProducerIsCancelledByNewEpoch) {
  Engine e(make_host_backend(), options(1));
  Allocator alloc;
  Spec s{2000, 3, 3, 1, 3};
  uint64_t t1 = e.start_epoch();
  submit_tag(e, t1, 100, s, alloc);
  auto stale = std::async(std::launch::async, [&] {
    try {
      submit_tag(e, t1, 101, s, alloc);
      return false;
    } catch (const Cancelled&) {
      return true;
    }
  });
  std::this_thread::sleep_for(30ms);
  uint64_t t2 = e.start_epoch();
  ASSERT_EQ(stale.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(stale.get()) << "the stale producer was not cancelled";
  EXPECT_EQ(submit_tag(e, t2, 200, s, alloc), 0u);
  e.finish(t2, false);
  expect_batch(e, t2, 0, 200, s);
  ReadyBatch b;
  EXPECT_EQ(e.next(t2, &b, 1s), NextStatus::kEnd);
}

TEST(Engine, FinishFailedAfterRemainingBatches) {
  Engine e(make_host_backend(), options(4));
  Allocator alloc;
  uint64_t token = e.start_epoch();
  Spec s{777, 2, 5, 2, 9};
  for (int i = 0; i < 3; ++i) submit_tag(e, token, i, s, alloc);
  e.finish(token, true);
  for (int i = 0; i < 3; ++i) expect_batch(e, token, i, i, s);
  ReadyBatch b;
  EXPECT_EQ(e.next(token, &b, 1s), NextStatus::kFailed);
  EXPECT_EQ(e.next(token, &b, 1s), NextStatus::kFailed);

  // A clean finish of the next epoch is kEnd, and the failure does not leak into it.
  uint64_t t2 = e.start_epoch();
  submit_tag(e, t2, 9, s, alloc);
  e.finish(t2, false);
  expect_batch(e, t2, 0, 9, s);
  EXPECT_EQ(e.next(t2, &b, 1s), NextStatus::kEnd);

  // Finishing an empty epoch as failed.
  uint64_t t3 = e.start_epoch();
  e.finish(t3, true);
  EXPECT_EQ(e.next(t3, &b, 1s), NextStatus::kFailed);
}

TEST(Engine, NextTimesOut) {
  Engine e(make_host_backend(), options(2));
  uint64_t token = e.start_epoch();
  ReadyBatch b;
  EXPECT_EQ(e.next(token, &b, 0ns), NextStatus::kTimeout);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(e.next(token, &b, 40ms), NextStatus::kTimeout);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 35ms);

  // A batch submitted while next() waits with a timeout is returned.
  Allocator alloc;
  Spec s{50, 1, 2, 0, 0};
  auto consumer = std::async(std::launch::async, [&] {
    ReadyBatch got;
    NextStatus st = e.next(token, &got, 10s);
    if (st == NextStatus::kBatch) got.ready->wait();
    return std::make_pair(st, got.seq);
  });
  std::this_thread::sleep_for(20ms);
  submit_tag(e, token, 5, s, alloc);
  auto [st, seq] = consumer.get();
  EXPECT_EQ(st, NextStatus::kBatch);
  EXPECT_EQ(seq, 0u);
  EXPECT_EQ(e.next(token, &b, 10ms), NextStatus::kTimeout);
}

TEST(Engine, MaxBatchBytesThrowsCollateError) {
  EngineOptions o = options(2);
  o.max_batch_bytes = 4096;
  Engine e(make_host_backend(), o);
  Allocator alloc;
  uint64_t token = e.start_epoch();
  Spec big{5000, 0, 1, 0, 0};
  ASSERT_GT(expected_total(big), 4096u);
  EXPECT_THROW(submit_tag(e, token, 1, big, alloc), CollateError);
  EXPECT_EQ(alloc.calls.load(), 0) << "nothing is allocated for a rejected batch";
  // The check is on the packed size: leaves that fit only without alignment padding are refused.
  Spec padded{4000, 1, 40, 0, 0};  // 4000 + 80 = 4080 bytes, packed to 4096 + 80
  ASSERT_GT(expected_total(padded), 4096u);
  EXPECT_THROW(submit_tag(e, token, 2, padded, alloc), CollateError);

  // The engine goes on working, and a batch of exactly the cap is accepted.
  Spec exact{4096, 0, 1, 0, 0};
  ASSERT_EQ(expected_total(exact), 4096u);
  EXPECT_EQ(submit_tag(e, token, 3, exact, alloc), 0u);
  Spec small{100, 2, 3, 1, 4};
  EXPECT_EQ(submit_tag(e, token, 4, small, alloc), 1u);
  expect_batch(e, token, 0, 3, exact);
  expect_batch(e, token, 1, 4, small);
  EXPECT_THROW(submit_tag(e, token, 5, big, alloc), CollateError);
  e.finish(token, false);
  ReadyBatch b;
  EXPECT_EQ(e.next(token, &b, 1s), NextStatus::kEnd);
}

TEST(Engine, RingGrowsForLargeBatches) {
  Engine e(make_host_backend(), options(2, 3, 64 * 1024));
  Allocator alloc;
  uint64_t token = e.start_epoch();
  Spec small{1000, 4, 4, 1, 10};
  Spec large{3u << 20, 100, 50, 4, 3000};           // ~3 MiB: more than the first 1 MiB slot
  Spec larger{(5u << 20) + 12345, 10, 10, 1, 1};    // ~5 MiB
  EXPECT_EQ(e.slot_capacity(0), 0u);

  EXPECT_EQ(submit_tag(e, token, 0, small, alloc), 0u);  // slot 0
  EXPECT_GE(e.slot_capacity(0), expected_total(small));
  const size_t first_capacity = e.slot_capacity(0);
  EXPECT_EQ(submit_tag(e, token, 1, large, alloc), 1u);  // slot 1
  EXPECT_GE(e.slot_capacity(1), expected_total(large));
  expect_batch(e, token, 0, 0, small);
  EXPECT_EQ(submit_tag(e, token, 2, larger, alloc), 2u);  // slot 0 again: grows
  EXPECT_GE(e.slot_capacity(0), expected_total(larger));
  EXPECT_GT(e.slot_capacity(0), first_capacity);
  const size_t grown = e.slot_capacity(0);
  expect_batch(e, token, 1, 1, large);
  expect_batch(e, token, 2, 2, larger);
  EXPECT_EQ(alloc.last_bytes.load(), expected_total(larger));

  // A smaller batch afterwards reuses the grown slot, and its content is right.
  EXPECT_EQ(submit_tag(e, token, 3, small, alloc), 3u);  // slot 1
  EXPECT_EQ(submit_tag(e, token, 4, small, alloc), 4u);  // slot 0
  EXPECT_EQ(e.slot_capacity(0), grown);
  expect_batch(e, token, 3, 3, small);
  expect_batch(e, token, 4, 4, small);
  // Growths: slot 0 twice (first use, 5 MiB), slot 1 once.
  EXPECT_EQ(e.stats().ring_growths, 3u);
  EXPECT_EQ(e.stats().bytes_collated,
            3 * expected_total(small) + expected_total(large) + expected_total(larger));
}

TEST(Engine, ZeroByteBatches) {
  Engine e(make_host_backend(), options(2));
  std::atomic<int> calls{0};
  DestinationAllocator alloc = [&](size_t bytes) {
    calls.fetch_add(1);
    EXPECT_GE(bytes, 1u);  // never a zero-byte allocation
    auto v = std::make_shared<std::vector<uint8_t>>(bytes);
    return Destination{reinterpret_cast<std::byte*>(v->data()), v};
  };
  uint64_t token = e.start_epoch();
  Allocator normal;
  Spec empty{0, 0, 1, 0, 0};
  Spec some{321, 3, 3, 2, 7};
  std::thread producer([&] {
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
  producer.join();
  EXPECT_EQ(calls.load(), 8);
}

TEST(Engine, AllocatorExceptionPropagatesAndEngineRecovers) {
  Engine e(make_host_backend(), options(2));
  uint64_t token = e.start_epoch();
  Spec s{3000, 6, 7, 2, 20};
  int calls = 0;
  DestinationAllocator flaky = [&](size_t bytes) {
    if (++calls % 3 == 2) throw std::runtime_error("device out of memory");
    auto v = std::make_shared<std::vector<uint8_t>>(bytes);
    return Destination{reinterpret_cast<std::byte*>(v->data()), v};
  };
  std::vector<uint64_t> accepted;
  for (uint64_t tag = 0; tag < 9; ++tag) {
    auto b = build_batch(tag, s);
    try {
      uint64_t seq = e.submit(token, b->leaves, flaky);
      EXPECT_EQ(seq, accepted.size()) << "a failed submit must not take a sequence number";
      accepted.push_back(tag);
    } catch (const std::runtime_error& ex) {
      EXPECT_STREQ(ex.what(), "device out of memory");
      EXPECT_EQ(calls % 3, 2);
    }
    // Take the batch right away so depth never blocks.
    if (!accepted.empty() && accepted.size() > e.stats().delivered) {
      expect_batch(e, token, accepted.size() - 1, accepted.back(), s);
    }
  }
  EXPECT_EQ(accepted.size(), 6u);
  EXPECT_EQ(e.stats().submitted, 6u);
  e.finish(token, false);
  ReadyBatch b;
  EXPECT_EQ(e.next(token, &b, 1s), NextStatus::kEnd);
}

// Stream work given to submit runs after the copy and before the batch's ready event.
TEST(Engine, AfterCopyWorkRunsBetweenCopyAndReady) {
  Engine e(make_host_backend(), options(2));
  e.backend().set_debug_delay(300, 9);
  uint64_t token = e.start_epoch();
  Spec s{20000, 10, 10, 2, 100};
  for (int i = 0; i < 5; ++i) {
    auto batch = build_batch(i, s);
    std::atomic<int> ran{0};
    std::shared_ptr<std::vector<uint8_t>> dest;
    DestinationAllocator alloc = [&](size_t bytes) {
      dest = std::make_shared<std::vector<uint8_t>>(bytes, 0);
      return Destination{reinterpret_cast<std::byte*>(dest->data()), dest};
    };
    std::string seen_by_after;
    e.submit(token, batch->leaves, alloc, [&, i](void* stream) {
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
    });
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
  Spec s{50000, 20, 30, 3, 200};
  {
    Engine e(make_host_backend(), options(3));
    e.backend().set_debug_delay(500, 5);
    Allocator alloc;
    uint64_t token = e.start_epoch();
    for (int i = 0; i < 3; ++i) submit_tag(e, token, i, s, alloc);
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
// Stress: random stream delays, random producer and consumer speeds, varying batch sizes.

struct StressCase {
  int depth;
  int producer_sleep_us;  // max random sleep between submits
  int consumer_sleep_us;  // max random sleep between next() calls
  const char* name;
};

class EngineStress : public ::testing::TestWithParam<StressCase> {};

TEST_P(EngineStress, EveryByteOfEveryBatch) {
  const StressCase c = GetParam();
  const int n = prefetch_test::scaled(250, 40);
  Engine e(make_host_backend(), options(c.depth, 1 + c.depth % 3, 4096 * (1 + c.depth)));
  e.backend().set_debug_delay(200, 1000 + c.depth);
  std::atomic<int> after_copy_errors{0};
  uint64_t token = e.start_epoch();

  std::mutex err_mutex;
  std::vector<std::string> producer_errors;
  std::thread producer([&] {
    std::mt19937 rng(c.depth * 7 + c.producer_sleep_us);
    Allocator alloc;
    try {
      for (int i = 0; i < n; ++i) {
        const uint64_t tag = static_cast<uint64_t>(i);
        const Spec s = random_spec(tag, true);
        if (c.producer_sleep_us) std::this_thread::sleep_for(std::chrono::microseconds(rng() % c.producer_sleep_us));
        auto batch = build_batch(tag, s);
        uint64_t seq;
        if (i % 4 == 0 && s.n0 > 0) {
          // Stream work after the copy checks, on the stream, that leaf 0 has fully landed.
          auto dest = std::make_shared<std::shared_ptr<std::vector<uint8_t>>>();
          DestinationAllocator capture = [dest](size_t bytes) {
            *dest = std::make_shared<std::vector<uint8_t>>(bytes, 0xEE);
            return Destination{reinterpret_cast<std::byte*>((*dest)->data()), *dest};
          };
          StreamWork check = [dest, tag, n0 = s.n0, &after_copy_errors](void*) {
            const uint8_t* d = (*dest)->data();
            for (size_t k = 0; k < n0; k += 61) {
              if (d[k] != pattern_byte(tag * 4, k)) {
                after_copy_errors.fetch_add(1);
                return;
              }
            }
            if (d[n0 - 1] != pattern_byte(tag * 4, n0 - 1)) after_copy_errors.fetch_add(1);
          };
          seq = e.submit(token, batch->leaves, capture, check);
        } else {
          seq = e.submit(token, batch->leaves, alloc.fn());
        }
        if (seq != tag) throw std::runtime_error("seq " + std::to_string(seq) + " for batch " + std::to_string(i));
      }
      e.finish(token, false);
    } catch (const std::exception& ex) {
      std::lock_guard<std::mutex> lock(err_mutex);
      producer_errors.push_back(ex.what());
      e.finish(token, true);
    }
  });

  std::mt19937 rng(c.depth * 13 + c.consumer_sleep_us);
  std::vector<std::pair<ReadyBatch, uint64_t>> kept;
  int received = 0;
  std::vector<std::string> errors;
  while (true) {
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
    e.backend().wait_on(*b.ready, nullptr);
    std::string err = verify(b, b.seq, random_spec(b.seq, true));
    if (!err.empty()) errors.push_back(err);
    if (received % 9 == 4) kept.emplace_back(std::move(b), static_cast<uint64_t>(received));
    ++received;
    if (errors.size() > 5) break;
  }
  if (!errors.empty()) e.cancel();
  producer.join();
  EXPECT_TRUE(producer_errors.empty()) << producer_errors.front();
  EXPECT_EQ(received, n);
  for (const auto& err : errors) ADD_FAILURE() << err;
  EXPECT_EQ(after_copy_errors.load(), 0);

  // Batches kept alive all along are still intact after everything that followed.
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

}  // namespace
}  // namespace prefetch
