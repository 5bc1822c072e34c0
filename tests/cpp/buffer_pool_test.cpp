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
}

}  // namespace
}  // namespace prefetch
