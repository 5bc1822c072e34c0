#include "buffer_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "aligned_buffer.h"
#include "test_util.h"

namespace prefetch {
namespace {

bool page_aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kPageSize == 0; }

TEST(AlignedBuffer, PageAlignedZeroedAndWritable) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{4097}, size_t{1} << 20}) {
    AlignedBuffer b(bytes);
    EXPECT_EQ(b.size(), bytes);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_TRUE(page_aligned(b.data())) << bytes;
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(b.data()[i], std::byte{0}) << "byte " << i;
    if (bytes) std::memset(b.data(), 0xAB, bytes);  // ASan checks the whole range is ours
  }
}

TEST(BufferPool, AcquireIsLargeEnoughAndPageAligned) {
  auto pool = BufferPool::create(4);
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{100}, size_t{4096}, size_t{5000}, size_t{3} << 20}) {
    auto b = pool->acquire(bytes);
    ASSERT_NE(b, nullptr);
    EXPECT_GE(b->size(), bytes);
    EXPECT_TRUE(page_aligned(b->data())) << bytes;
    if (bytes) {
      std::memset(b->data(), 0x5A, bytes);
      EXPECT_EQ(b->data()[bytes - 1], std::byte{0x5A});
    }
  }
}

TEST(BufferPool, ReusesReleasedBuffers) {
  auto pool = BufferPool::create(2);
  const std::byte* first;
  {
    auto b = pool->acquire(10000);
    first = b->data();
    EXPECT_EQ(pool->allocations(), 1u);
    EXPECT_EQ(pool->idle_count(), 0u);
  }
  EXPECT_EQ(pool->idle_count(), 1u);
  {
    // Smaller than the idle buffer: it is reused.
    auto b = pool->acquire(8000);
    EXPECT_EQ(b->data(), first);
    EXPECT_GE(b->size(), 8000u);
    EXPECT_EQ(pool->allocations(), 1u);
    EXPECT_EQ(pool->idle_count(), 0u);
  }
  {
    // Larger than anything idle: a new allocation.
    auto b = pool->acquire(20000);
    EXPECT_GE(b->size(), 20000u);
    EXPECT_EQ(pool->allocations(), 2u);
  }
  EXPECT_EQ(pool->idle_count(), 2u);
}

TEST(BufferPool, SmallestFittingBufferIsChosen) {
  auto pool = BufferPool::create(4);
  const std::byte *small, *large;
  {
    auto a = pool->acquire(1 << 20);
    auto b = pool->acquire(8192);
    large = a->data();
    small = b->data();
  }
  ASSERT_EQ(pool->idle_count(), 2u);
  auto c = pool->acquire(4000);
  EXPECT_EQ(c->data(), small);
  auto d = pool->acquire(4000);
  EXPECT_EQ(d->data(), large);
  EXPECT_EQ(pool->allocations(), 2u);
}

// A steady loop (acquire a batch's buffers, hold a few batches, release) allocates only while
// warming up.
TEST(BufferPool, SteadyStateDoesNotAllocate) {
  auto pool = BufferPool::create(8);
  std::vector<std::vector<std::shared_ptr<AlignedBuffer>>> held;
  const size_t sizes[] = {4096 * 3, 1000, 70000};
  size_t after_warmup = 0;
  for (int iter = 0; iter < 200; ++iter) {
    std::vector<std::shared_ptr<AlignedBuffer>> batch;
    for (size_t s : sizes) {
      batch.push_back(pool->acquire(s));
      std::memset(batch.back()->data(), iter & 0xFF, s);
    }
    held.push_back(std::move(batch));
    if (held.size() > 2) held.erase(held.begin());  // the user keeps the last two batches
    if (iter == 10) after_warmup = pool->allocations();
    ASSERT_LE(pool->idle_count(), 8u);
  }
  EXPECT_LE(after_warmup, 9u);  // three batches of three buffers at most
  EXPECT_EQ(pool->allocations(), after_warmup) << "buffers were not reused in the steady state";
}

TEST(BufferPool, IdleCountNeverExceedsMaxFree) {
  for (size_t max_free : {size_t{0}, size_t{1}, size_t{3}}) {
    auto pool = BufferPool::create(max_free);
    std::vector<std::shared_ptr<AlignedBuffer>> live;
    for (int i = 0; i < 10; ++i) live.push_back(pool->acquire(4096 * (1 + i % 4)));
    EXPECT_EQ(pool->idle_count(), 0u);
    while (!live.empty()) {
      live.pop_back();
      EXPECT_LE(pool->idle_count(), max_free);
    }
    EXPECT_EQ(pool->idle_count(), max_free);
    // The largest are kept: a request as big as the largest buffer is served from the pool.
    if (max_free > 0) {
      size_t before = pool->allocations();
      auto b = pool->acquire(4096 * 4);
      EXPECT_EQ(pool->allocations(), before);
    }
  }
}

TEST(BufferPool, IdleBytesNeverExceedMaxIdleBytes) {
  // Six pages of idle bytes at most, and up to 8 buffers by count.
  auto pool = BufferPool::create(8, 3 * 8192);
  std::vector<std::shared_ptr<AlignedBuffer>> live;
  for (size_t pages : {1, 2, 3, 1, 2}) live.push_back(pool->acquire(4096 * pages));
  while (!live.empty()) {
    live.pop_back();
    const BufferPool::Stats s = pool->stats();
    EXPECT_LE(s.idle_bytes, 3u * 8192);
    EXPECT_LE(s.idle_buffers, 8u);
  }
  // The largest kept first: 3 pages + 2 pages + 1 page = 6 pages fits exactly.
  const BufferPool::Stats s = pool->stats();
  EXPECT_EQ(s.idle_bytes, 6u * 4096);
  EXPECT_EQ(s.idle_buffers, 3u);
  EXPECT_EQ(s.max_idle_bytes, 3u * 8192);
  EXPECT_EQ(s.max_idle_buffers, 8u);
}

TEST(BufferPool, ABufferLargerThanTheByteBoundIsFreedWithoutEvictingOthers) {
  auto pool = BufferPool::create(4, 8192);
  { auto small = pool->acquire(4096); }
  ASSERT_EQ(pool->stats().idle_bytes, 4096u);
  { auto big = pool->acquire(3 * 4096); }
  const BufferPool::Stats s = pool->stats();
  EXPECT_EQ(s.idle_buffers, 1u);
  EXPECT_EQ(s.idle_bytes, 4096u);  // the small one stayed
  EXPECT_EQ(s.allocations, 2u);
}

TEST(BufferPool, StatsCountLeasesAllocationsAndReuses) {
  auto pool = BufferPool::create(2);
  auto a = pool->acquire(5000);
  auto b = pool->acquire(100);
  BufferPool::Stats s = pool->stats();
  EXPECT_EQ(s.in_use_buffers, 2u);
  EXPECT_EQ(s.in_use_bytes, 5100u);
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_EQ(s.reuses, 0u);
  a.reset();
  s = pool->stats();
  EXPECT_EQ(s.in_use_buffers, 1u);
  EXPECT_EQ(s.in_use_bytes, 100u);
  EXPECT_EQ(s.idle_buffers, 1u);
  EXPECT_EQ(s.idle_bytes, 5000u);
  auto c = pool->acquire(4000);  // served by a's buffer
  s = pool->stats();
  EXPECT_EQ(s.reuses, 1u);
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_EQ(s.in_use_bytes, 5100u);
  EXPECT_EQ(s.idle_bytes, 0u);
}

TEST(BufferPool, ReleaseIdleFreesIdleBuffersOnlyAndLeasesStillComeBack) {
  auto pool = BufferPool::create(4);
  auto live = pool->acquire(3000);
  { auto a = pool->acquire(7000), b = pool->acquire(9000); }
  ASSERT_EQ(pool->stats().idle_bytes, 16000u);
  EXPECT_EQ(pool->release_idle(), 16000u);
  BufferPool::Stats s = pool->stats();
  EXPECT_EQ(s.idle_buffers, 0u);
  EXPECT_EQ(s.idle_bytes, 0u);
  EXPECT_EQ(s.in_use_buffers, 1u);
  std::memset(live->data(), 7, 3000);  // the lease is untouched
  live.reset();
  s = pool->stats();
  EXPECT_EQ(s.idle_buffers, 1u);
  EXPECT_EQ(s.idle_bytes, 3000u);
  EXPECT_EQ(s.in_use_buffers, 0u);
  EXPECT_EQ(pool->release_idle(), 3000u);
  EXPECT_EQ(pool->release_idle(), 0u);
}

TEST(BufferPool, LoweringTheByteBoundEvictsAtOnceAndZeroKeepsNothing) {
  auto pool = BufferPool::create(4);
  { auto a = pool->acquire(4096), b = pool->acquire(2 * 4096), c = pool->acquire(3 * 4096); }
  ASSERT_EQ(pool->stats().idle_bytes, 6u * 4096);
  pool->set_max_idle_bytes(4 * 4096);
  BufferPool::Stats s = pool->stats();
  EXPECT_EQ(s.idle_bytes, 3u * 4096);  // the smallest went first, then the 2-page one
  EXPECT_EQ(s.idle_buffers, 1u);
  pool->set_max_idle_bytes(0);
  EXPECT_EQ(pool->stats().idle_buffers, 0u);
  { auto d = pool->acquire(4096); }
  EXPECT_EQ(pool->stats().idle_buffers, 0u);
  EXPECT_EQ(pool->stats().idle_bytes, 0u);
}

// A lease outliving its pool is freed on its own (ASan reports a leak or use-after-free if not).
TEST(BufferPool, LeaseOutlivesPool) {
  std::shared_ptr<AlignedBuffer> lease;
  std::shared_ptr<AlignedBuffer> second;
  {
    auto pool = BufferPool::create(2);
    lease = pool->acquire(12345);
    second = pool->acquire(100);
    auto idle = pool->acquire(200);  // returned to the pool before it dies
    idle.reset();
    EXPECT_EQ(pool->idle_count(), 1u);
  }
  std::memset(lease->data(), 1, 12345);  // still valid memory
  EXPECT_EQ(lease->data()[12344], std::byte{1});
  lease.reset();
  second.reset();
  SUCCEED();
}

TEST(BufferPool, ConcurrentAcquireRelease) {
  auto pool = BufferPool::create(4);
  const int iters = prefetch_test::scaled(2000, 200);
  std::atomic<int> errors{0};
  auto worker = [&](int id) {
    std::mt19937 rng(id);
    std::vector<std::pair<std::shared_ptr<AlignedBuffer>, size_t>> held;
    for (int i = 0; i < iters; ++i) {
      size_t bytes = 1 + rng() % 20000;
      auto b = pool->acquire(bytes);
      if (b->size() < bytes) errors.fetch_add(1);
      const uint8_t tag = static_cast<uint8_t>(id * 31 + i);
      std::memset(b->data(), tag, bytes);
      held.emplace_back(std::move(b), bytes);
      if (held.size() > 3) {
        // Nobody else wrote into a buffer we hold.
        auto& [old, n] = held.front();
        const uint8_t expect = static_cast<uint8_t>(old->data()[0]);
        for (size_t k = 0; k < n; k += 97) {
          if (static_cast<uint8_t>(old->data()[k]) != expect) errors.fetch_add(1);
        }
        if (static_cast<uint8_t>(old->data()[n - 1]) != expect) errors.fetch_add(1);
        held.erase(held.begin());
      }
      if (pool->idle_count() > 4) errors.fetch_add(1);
    }
  };
  std::thread a(worker, 1), b(worker, 2), c(worker, 3);
  a.join();
  b.join();
  c.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_LE(pool->idle_count(), 4u);
  const BufferPool::Stats s = pool->stats();
  EXPECT_EQ(s.in_use_buffers, 0u);
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.allocations + s.reuses, 3u * static_cast<size_t>(iters));
}

// Stats, release_idle and set_max_idle_bytes race with acquire/return on other threads: the
// counters stay consistent and the byte bound holds (TSan checks the locking).
TEST(BufferPool, ControlsAreThreadSafe) {
  auto pool = BufferPool::create(4, 64 * 1024);
  const int iters = prefetch_test::scaled(2000, 200);
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  auto user = [&](int id) {
    std::mt19937 rng(id);
    for (int i = 0; i < iters; ++i) {
      auto b = pool->acquire(1 + rng() % 30000);
      std::memset(b->data(), id, b->size());
    }
  };
  std::thread controller([&] {
    size_t k = 0;
    while (!stop.load()) {
      const BufferPool::Stats s = pool->stats();
      if (s.idle_bytes > s.max_idle_bytes || s.idle_buffers > s.max_idle_buffers) errors.fetch_add(1);
      if (++k % 3 == 0) pool->release_idle();
      pool->set_max_idle_bytes(k % 2 ? 32 * 1024 : 64 * 1024);
    }
  });
  std::thread a(user, 1), b(user, 2);
  a.join();
  b.join();
  stop.store(true);
  controller.join();
  EXPECT_EQ(errors.load(), 0);
  const BufferPool::Stats s = pool->stats();
  EXPECT_EQ(s.in_use_buffers, 0u);
  EXPECT_EQ(s.allocations + s.reuses, 2u * static_cast<size_t>(iters));
}

}  // namespace
}  // namespace prefetch
