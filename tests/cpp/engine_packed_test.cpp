// Engine::stage_packed: batches that arrive packed (a worker ring slot) are copied once, and their
// source is released only after that copy has read it — on the host backend with random stream
// delays, so a release that came too early shows up as a wrong byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine.h"
#include "engine_batches.h"
#include "errors.h"

namespace prefetch {
namespace test {
namespace {

uint8_t byte_of(uint64_t tag, size_t i) { return static_cast<uint8_t>((tag * 131 + i * 7) % 251); }

// What every release saw, shared by the sources of one test.
struct Ledger {
  std::atomic<int> released{0};
  std::atomic<int> early{0};     // released before the copy had delivered the source's bytes
  std::atomic<int> held{0};      // staged and not yet released
  std::atomic<int> max_held{0};
};

// A source buffer of `bytes` holding tag's pattern, two leaves in it, and a release that checks
// the destination holds every byte and then scribbles over the source, as a worker that reuses
// the slot would.
struct PackedFixture {
  std::shared_ptr<std::vector<uint8_t>> source;
  std::shared_ptr<std::shared_ptr<std::vector<uint8_t>>> destination =
      std::make_shared<std::shared_ptr<std::vector<uint8_t>>>();
  PackedSource packed;
  DestinationAllocator allocate;

  PackedFixture(uint64_t tag, size_t bytes, Ledger* ledger) {
    source = std::make_shared<std::vector<uint8_t>>(bytes);
    for (size_t i = 0; i < bytes; ++i) (*source)[i] = byte_of(tag, i);
    packed.data = reinterpret_cast<const std::byte*>(source->data());
    packed.bytes = bytes;
    const size_t first = bytes / 3 / 64 * 64;
    packed.leaves = {{0, first, 0, {static_cast<int64_t>(first)}},
                     {first, bytes - first, 0, {static_cast<int64_t>(bytes - first)}}};
    packed.owner = source;
    auto src = source;
    auto dst = destination;
    packed.release = [src, dst, tag, ledger] {
      const bool copied = *dst && (*dst)->size() >= src->size() &&
                          std::equal(src->begin(), src->end(), (*dst)->begin());
      if (!copied) ledger->early.fetch_add(1);
      std::fill(src->begin(), src->end(), uint8_t{0xAB});
      ledger->held.fetch_sub(1);
      ledger->released.fetch_add(1);
      (void)tag;
    };
    allocate = [dst](size_t n) {
      *dst = std::make_shared<std::vector<uint8_t>>(n, 0xEE);
      return Destination{reinterpret_cast<std::byte*>((*dst)->data()), *dst};
    };
    const int now = ledger->held.fetch_add(1) + 1;
    int seen = ledger->max_held.load();
    while (now > seen && !ledger->max_held.compare_exchange_weak(seen, now)) {
    }
  }
};

std::string verify_packed(const ReadyBatch& b, uint64_t tag, size_t bytes) {
  const auto* data = reinterpret_cast<const uint8_t*>(b.destination.data);
  for (size_t i = 0; i < bytes; ++i) {
    if (data[i] != byte_of(tag, i)) return "byte " + std::to_string(i) + " of batch " + std::to_string(tag);
  }
  if (b.leaves.size() != 2 || b.leaves[1].offset + b.leaves[1].nbytes != bytes) return "leaves not carried";
  return "";
}

class EnginePacked : public ::testing::TestWithParam<int> {};

// Batches staged, published and taken in order on a slow random stream: every byte arrives,
// no source is released before its copy, and at most depth + 1 sources are held at once.
TEST_P(EnginePacked, CopiesOnceAndReleasesEachSourceAfterItsCopy) {
  const int depth = GetParam();
  Ledger ledger;
  {
    EngineHarness h(options(depth));
    Engine& e = *h;
    e.backend().set_debug_delay(800, 7 + depth);
    for (int round = 0; round < 2; ++round) {
      const uint64_t token = e.start_epoch();
      const int n = 24;
      auto producer = h.spawn([&] {
        for (int i = 0; i < n; ++i) {
          const uint64_t tag = static_cast<uint64_t>(round * 100 + i);
          PackedFixture f(tag, 4096 + static_cast<size_t>(i) * 64, &ledger);
          e.publish(e.stage_packed(token, std::move(f.packed), f.allocate));
          EXPECT_LE(e.packed_in_flight(), static_cast<size_t>(depth) + 1);
        }
        e.finish(token, false);
        return 0;
      });
      // Round 1 takes batches without waiting for their copies (a CUDA consumer's host does
      // not wait either): the producer then runs ahead of the copies, and only the engine's
      // bound on held sources keeps it from releasing one still being read.
      std::vector<ReadyBatch> taken(n);
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(e.next(token, &taken[i], kLongWait), NextStatus::kBatch);
        if (round == 0) e.backend().wait_on(*taken[i].ready, nullptr);
      }
      for (int i = 0; i < n; ++i) {
        e.backend().wait_on(*taken[i].ready, nullptr);
        EXPECT_EQ(verify_packed(taken[i], static_cast<uint64_t>(round * 100 + i),
                                4096 + static_cast<size_t>(i) * 64), "");
      }
      producer.get();
      ReadyBatch end;
      EXPECT_EQ(e.next(token, &end, kLongWait), NextStatus::kEnd);
      // Every copy has completed (the consumer waited for each): the end gives every source back.
      EXPECT_EQ(e.packed_in_flight(), 0u);
    }
    EXPECT_EQ(e.stats().packed_bytes, uint64_t{2} * (24 * 4096 + 64 * (23 * 24 / 2)));
    EXPECT_EQ(e.stats().bytes_collated, 0u);
  }  // the engine's destructor releases what it still held
  EXPECT_EQ(ledger.released.load(), 48);
  EXPECT_EQ(ledger.early.load(), 0) << "a source was released before its copy had read it";
  EXPECT_LE(ledger.max_held.load(), GetParam() + 2);  // + 1: the one being made
  EXPECT_EQ(ledger.held.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Depths, EnginePacked, ::testing::Values(1, 2, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "depth" + std::to_string(info.param);
                         });

// Every way out of stage_packed that never starts the copy releases the source at once: a batch
// over max_batch_bytes, a cancelled epoch, leaves outside the bytes.
TEST(EnginePackedRelease, RefusedAndCancelledBatchesReleaseTheirSource) {
  Ledger ledger;
  EngineOptions o = options(2);
  o.max_batch_bytes = 4096;
  EngineHarness h(o);
  Engine& e = *h;
  uint64_t token = e.start_epoch();
  {
    PackedFixture f(1, 8192, &ledger);
    EXPECT_THROW(h.call([&] { return e.stage_packed(token, std::move(f.packed), f.allocate); }),
                 CollateError);
  }
  EXPECT_EQ(ledger.released.load(), 1);
  {
    PackedFixture f(2, 1024, &ledger);
    f.packed.leaves[1].nbytes += 1;  // one byte past the end
    EXPECT_THROW(h.call([&] { return e.stage_packed(token, std::move(f.packed), f.allocate); }),
                 std::invalid_argument);
  }
  EXPECT_EQ(ledger.released.load(), 2);
  {
    PackedFixture f(3, 1024, &ledger);
    const uint64_t stale = token;
    token = e.start_epoch();
    EXPECT_THROW(h.call([&] { return e.stage_packed(stale, std::move(f.packed), f.allocate); }),
                 Cancelled);
  }
  EXPECT_EQ(ledger.released.load(), 3);
  EXPECT_EQ(ledger.early.load(), 3);  // none of them was copied: released without it
  EXPECT_EQ(e.packed_in_flight(), 0u);
}

// A batch dropped by cancel() while its copy is queued: the source (and the destination) stay
// held until that copy has run, and the engine's destructor waits for it.
TEST(EnginePackedRelease, CancelledBatchesKeepTheirSourceUntilTheCopyRan) {
  Ledger ledger;
  {
    EngineHarness h(options(3));
    Engine& e = *h;
    e.backend().set_debug_delay(3000, 5);
    const uint64_t token = e.start_epoch();
    for (int i = 0; i < 3; ++i) {
      PackedFixture f(static_cast<uint64_t>(i), 1 << 16, &ledger);
      h.call([&] { return e.publish(e.stage_packed(token, std::move(f.packed), f.allocate)); });
    }
    e.cancel();
  }
  EXPECT_EQ(ledger.released.load(), 3);
  EXPECT_EQ(ledger.early.load(), 0);
}

}  // namespace
}  // namespace test
}  // namespace prefetch
