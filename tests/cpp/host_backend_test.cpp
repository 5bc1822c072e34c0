#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "aligned_buffer.h"
#include "backend.h"
#include "test_util.h"

namespace prefetch {
namespace {

using namespace std::chrono_literals;

// A gate a stream task can block on until the test opens it.
class Gate {
 public:
  void open() { open_.store(true); }
  void wait() {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!open_.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(100us);
  }

 private:
  std::atomic<bool> open_{false};
};

TEST(HostBackend, Basics) {
  auto backend = make_host_backend();
  EXPECT_EQ(backend->name(), "host");
  EXPECT_EQ(backend->stream_handle(), nullptr);
  for (size_t bytes : {size_t{1}, size_t{4096}, size_t{100000}}) {
    auto mem = backend->alloc_host(bytes);
    ASSERT_NE(mem, nullptr);
    EXPECT_GE(mem->size(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(mem->data()) % kPageSize, 0u);
    std::memset(mem->data(), 0x11, bytes);
  }
  // An event with nothing before it completes.
  auto e = backend->record();
  e->wait();
  EXPECT_TRUE(e->complete());
}

TEST(HostBackend, WorkRunsInEnqueueOrder) {
  auto backend = make_host_backend();
  std::vector<int> order;  // touched only by the stream thread until the event is waited on
  const int n = 500;
  std::vector<uint8_t> src(n), dst(n, 0);
  for (int i = 0; i < n; ++i) {
    backend->enqueue([&order, i](void* stream) {
      EXPECT_EQ(stream, nullptr);
      order.push_back(i);
    });
    src[i] = static_cast<uint8_t>(i * 7);
    // Copies are in the same stream: each sees the byte written just before it.
    backend->copy_async(&dst[i], &src[i], 1);
    backend->enqueue([&order, &dst, i](void*) { order.push_back(dst[i] == static_cast<uint8_t>(i * 7) ? -1 : -2); });
  }
  backend->record()->wait();
  ASSERT_EQ(order.size(), static_cast<size_t>(2 * n));
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(order[2 * i], i);
    ASSERT_EQ(order[2 * i + 1], -1) << "the copy of " << i << " had not run before later work";
  }
  EXPECT_EQ(dst, src);
}

TEST(HostBackend, EventsCompleteOnlyAfterPrecedingWork) {
  auto backend = make_host_backend();
  Gate gate;
  std::atomic<bool> entered{false}, slow_done{false};
  auto before = backend->record();
  backend->enqueue([&](void*) {
    entered.store(true);
    gate.wait();
    std::this_thread::sleep_for(2ms);
    slow_done.store(true);
  });
  auto after = backend->record();
  auto later = backend->record();

  // The event before the slow task completes without it.
  before->wait();
  EXPECT_TRUE(before->complete());
  // Not a sleep: the stream is provably held at the gate, with `after` and `later` queued behind
  // it, so the checks below hold by construction and fail only if an event ignores the work
  // before it.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!entered.load()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the stream never ran the gated task";
    std::this_thread::sleep_for(50us);
  }
  EXPECT_FALSE(after->complete());
  EXPECT_FALSE(later->complete());
  EXPECT_FALSE(slow_done.load());

  gate.open();
  // Poll complete(): the moment it says true, the slow task must have finished.
  deadline = std::chrono::steady_clock::now() + 10s;
  while (!after->complete()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "event never completed";
    std::this_thread::sleep_for(50us);
  }
  EXPECT_TRUE(slow_done.load());
  later->wait();
  EXPECT_TRUE(later->complete());
}

TEST(HostBackend, WaitBlocksUntilSlowWorkIsDone) {
  auto backend = make_host_backend();
  for (int round = 0; round < 5; ++round) {
    int value = 0;  // plain: the event's wait must publish the stream thread's write
    backend->enqueue([&](void*) {
      std::this_thread::sleep_for(5ms);
      value = round + 1;
    });
    auto e = backend->record();
    if (round % 2) {
      backend->wait_on(*e, nullptr);
    } else {
      e->wait();
    }
    EXPECT_TRUE(e->complete());
    EXPECT_EQ(value, round + 1);
  }
}

TEST(HostBackend, ExceptionIsReportedByTheNextEventOnly) {
  auto backend = make_host_backend();
  std::atomic<int> ran{0};
  auto clean_before = backend->record();
  backend->enqueue([&](void*) { ran.fetch_add(1); });
  backend->enqueue([](void*) { throw std::runtime_error("stream work failed"); });
  backend->enqueue([&](void*) { ran.fetch_add(10); });  // still runs after the failure
  backend->enqueue([](void*) { throw std::logic_error("second failure"); });
  auto failed = backend->record();
  auto clean_after = backend->record();
  backend->enqueue([&](void*) { ran.fetch_add(100); });
  auto clean_later = backend->record();

  EXPECT_NO_THROW(clean_before->wait());
  try {
    failed->wait();
    FAIL() << "the event after the failing work did not rethrow";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "stream work failed") << "the first failure is the one reported";
  }
  EXPECT_TRUE(failed->complete());
  EXPECT_NO_THROW(clean_after->wait());
  EXPECT_NO_THROW(backend->wait_on(*clean_later, nullptr));
  EXPECT_EQ(ran.load(), 111);

  // The backend goes on working normally.
  backend->enqueue([](void*) { throw std::runtime_error("again"); });
  EXPECT_THROW(backend->record()->wait(), std::runtime_error);
  EXPECT_NO_THROW(backend->record()->wait());
}

TEST(HostBackend, DebugDelayPreservesOrderAndSlowsTheStream) {
  auto backend = make_host_backend();
  backend->set_debug_delay(200, 42);
  const int n = prefetch_test::scaled(300, 100);
  std::vector<int> order;
  std::vector<std::shared_ptr<Event>> events;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    backend->enqueue([&order, i](void*) { order.push_back(i); });
    events.push_back(backend->record());
  }
  // Events complete in order: when event i is complete, so are all before it.
  for (int i = n; i-- > 0;) {
    events[i]->wait();
    for (int j = 0; j <= i; ++j) ASSERT_TRUE(events[j]->complete()) << j << " before " << i;
    if (i == n - 1) {
      ASSERT_EQ(order.size(), static_cast<size_t>(n));
    }
  }
  auto elapsed = std::chrono::steady_clock::now() - t0;
  for (int i = 0; i < n; ++i) ASSERT_EQ(order[i], i);
  // 2n pieces of work, each delayed by 0..200 us (mean 100): well above 5 ms in total.
  EXPECT_GE(elapsed, 5ms) << "set_debug_delay had no effect";

  // Delay off again: order still holds.
  backend->set_debug_delay(0, 0);
  for (int i = 0; i < n; ++i) backend->enqueue([&order, i, n](void*) { order.push_back(n + i); });
  backend->record()->wait();
  for (int i = 0; i < 2 * n; ++i) ASSERT_EQ(order[i], i);
}

TEST(HostBackend, ProducersOnSeveralThreadsKeepTheirOwnOrder) {
  auto backend = make_host_backend();
  backend->set_debug_delay(20, 7);
  const int per_thread = prefetch_test::scaled(300, 50);
  std::vector<std::vector<int>> seen(3);  // written by the stream thread only
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) backend->enqueue([&seen, t, i](void*) { seen[t].push_back(i); });
    });
  }
  // The delay may be changed while the stream is busy.
  threads.emplace_back([&] {
    for (int i = 0; i < 20; ++i) {
      backend->set_debug_delay(i % 2 ? 0 : 30, static_cast<uint64_t>(i));
      std::this_thread::sleep_for(200us);
    }
  });
  for (auto& th : threads) th.join();
  backend->record()->wait();
  for (int t = 0; t < 3; ++t) {
    ASSERT_EQ(seen[t].size(), static_cast<size_t>(per_thread));
    for (int i = 0; i < per_thread; ++i) ASSERT_EQ(seen[t][i], i);
  }
}

TEST(HostBackend, DestructionRunsQueuedWork) {
  std::atomic<int> ran{0};
  std::shared_ptr<Event> last;
  {
    auto backend = make_host_backend();
    backend->set_debug_delay(50, 1);
    for (int i = 0; i < 50; ++i) backend->enqueue([&](void*) { ran.fetch_add(1); });
    last = backend->record();
  }
  EXPECT_EQ(ran.load(), 50);
  ASSERT_TRUE(last->complete());  // an event outlives its backend
  last->wait();
}

}  // namespace
}  // namespace prefetch
