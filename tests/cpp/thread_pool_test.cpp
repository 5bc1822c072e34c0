#include "thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "test_util.h"

namespace prefetch {
namespace {

class ThreadPoolSizes : public ::testing::TestWithParam<int> {};

// Every index in [0, n) runs exactly once, for n = 0, 1, fewer than the threads, and many.
TEST_P(ThreadPoolSizes, EveryIndexRunsExactlyOnce) {
  ThreadPool pool(GetParam());
  EXPECT_EQ(pool.num_threads(), GetParam());
  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{100}, size_t{5000}}) {
    std::vector<std::atomic<int>> counts(n);
    for (auto& c : counts) c.store(0);
    std::atomic<size_t> calls{0};
    pool.run(n, [&](size_t i) {
      ASSERT_LT(i, n);
      counts[i].fetch_add(1);
      calls.fetch_add(1);
    });
    EXPECT_EQ(calls.load(), n) << "n=" << n;
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(counts[i].load(), 1) << "index " << i << " of n=" << n;
  }
}

// run() returns only once every task has finished, even slow ones on other threads.
TEST_P(ThreadPoolSizes, RunWaitsForAllTasks) {
  ThreadPool pool(GetParam());
  for (int round = 0; round < 5; ++round) {
    const size_t n = 16;
    std::vector<int> done(n, 0);  // plain ints: run() must publish them to the caller
    pool.run(n, [&](size_t i) {
      std::this_thread::sleep_for(std::chrono::microseconds(200 * (i % 3)));
      done[i] = round + 1;
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(done[i], round + 1);
  }
}

// The first exception is rethrown by run(), the other tasks still run, and the pool works after.
TEST_P(ThreadPoolSizes, ExceptionIsRethrownAndPoolStillWorks) {
  ThreadPool pool(GetParam());
  for (int round = 0; round < 3; ++round) {
    const size_t n = 64;
    std::vector<std::atomic<int>> counts(n);
    for (auto& c : counts) c.store(0);
    try {
      pool.run(n, [&](size_t i) {
        counts[i].fetch_add(1);
        if (i == 13) throw std::runtime_error("task 13 failed");
      });
      FAIL() << "run() did not rethrow the task's exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "task 13 failed");
    }
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(counts[i].load(), 1) << "index " << i;

    // Every task throwing: exactly one of them is rethrown.
    EXPECT_THROW(pool.run(8, [](size_t i) { throw std::out_of_range(std::to_string(i)); }),
                 std::out_of_range);

    // And a clean job afterwards neither throws nor skips anything.
    std::atomic<size_t> sum{0};
    EXPECT_NO_THROW(pool.run(1000, [&](size_t i) { sum.fetch_add(i); }));
    EXPECT_EQ(sum.load(), size_t{1000} * 999 / 2);
  }
}

// With more than one thread, tasks really run on several threads (the caller takes part).
TEST_P(ThreadPoolSizes, UsesWorkerThreads) {
  const int threads = GetParam();
  ThreadPool pool(threads);
  std::mutex m;
  std::set<std::thread::id> ids;
  // Each task blocks until `threads` distinct threads have shown up (or a deadline passes), so
  // a pool that only runs tasks on the caller is detected.
  std::atomic<int> arrived{0};
  pool.run(static_cast<size_t>(threads), [&](size_t) {
    {
      std::lock_guard<std::mutex> lock(m);
      ids.insert(std::this_thread::get_id());
    }
    arrived.fetch_add(1);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (arrived.load() < threads && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
  });
  EXPECT_EQ(static_cast<int>(ids.size()), threads);
  EXPECT_EQ(ids.count(std::this_thread::get_id()), 1u) << "the caller takes part in the job";
}

// Two threads calling run() at once: each job sees exactly its own indices, once each.
TEST_P(ThreadPoolSizes, ConcurrentRunCallsAreSerialised) {
  ThreadPool pool(GetParam());
  const int rounds = prefetch_test::scaled(200, 20);
  const size_t n = 37;
  std::atomic<int> errors{0};

  auto caller = [&](int tag) {
    for (int r = 0; r < rounds; ++r) {
      std::vector<std::atomic<int>> counts(n);
      for (auto& c : counts) c.store(0);
      pool.run(n, [&](size_t i) {
        counts[i].fetch_add(tag);
        if (i % 5 == 0) std::this_thread::yield();
      });
      // run() returned, so all of this job's tasks are done, and no other job's task touched it.
      for (size_t i = 0; i < n; ++i) {
        if (counts[i].load() != tag) errors.fetch_add(1);
      }
    }
  };
  std::thread a(caller, 1);
  std::thread b(caller, 1000);
  a.join();
  b.join();
  EXPECT_EQ(errors.load(), 0);
}

// A stricter check of serialisation: no task of one run() overlaps a task of another run().
TEST_P(ThreadPoolSizes, TasksOfConcurrentJobsNeverInterleave) {
  ThreadPool pool(GetParam());
  const int rounds = prefetch_test::scaled(150, 20);
  std::mutex m;
  int active_job = -1;   // guarded by m
  int active_tasks = 0;  // guarded by m
  int violations = 0;    // guarded by m
  size_t total = 0;      // guarded by m

  auto caller = [&](int id) {
    for (int r = 0; r < rounds; ++r) {
      pool.run(9, [&](size_t) {
        {
          std::lock_guard<std::mutex> lock(m);
          if (active_tasks == 0) {
            active_job = id;
          } else if (active_job != id) {
            ++violations;
          }
          ++active_tasks;
        }
        std::this_thread::yield();
        std::lock_guard<std::mutex> lock(m);
        if (active_job != id) ++violations;
        --active_tasks;
        ++total;
      });
    }
  };
  std::thread a(caller, 1);
  std::thread b(caller, 2);
  a.join();
  b.join();
  std::lock_guard<std::mutex> lock(m);
  EXPECT_EQ(violations, 0);
  EXPECT_EQ(active_tasks, 0);
  EXPECT_EQ(total, static_cast<size_t>(rounds) * 9 * 2);
}

INSTANTIATE_TEST_SUITE_P(Threads, ThreadPoolSizes, ::testing::Values(1, 2, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param);
                         });

TEST(ThreadPool, ZeroOrNegativeThreadsMeansCallerOnly) {
  for (int t : {0, -3}) {
    ThreadPool pool(t);
    EXPECT_EQ(pool.num_threads(), 1);
    std::vector<int> seen(10, 0);
    pool.run(seen.size(), [&](size_t i) { seen[i]++; });
    for (int s : seen) EXPECT_EQ(s, 1);
  }
}

TEST(ThreadPool, DestroyedRightAfterConstruction) {
  // Workers that never received a job must still exit promptly.
  for (int i = 0; i < 20; ++i) {
    ThreadPool pool(4);
  }
  SUCCEED();
}

// A starter that fails at thread `fail_at`, as std::thread does when the OS refuses (EAGAIN).
struct FailingStarter {
  int fail_at;
  std::atomic<int>* started;
  std::atomic<int>* finished;
  std::thread operator()(int index, std::function<void()> body) const {
    if (index == fail_at) {
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                              "thread creation refused");
    }
    started->fetch_add(1);
    auto* done = finished;
    return std::thread([body = std::move(body), done] {
      body();
      done->fetch_add(1);
    });
  }
};

TEST(ThreadPoolStart, AFailedThreadStartThrowsAndJoinsTheStartedThreads) {
  for (int fail_at : {0, 1, 5}) {
    std::atomic<int> started{0}, finished{0};
    try {
      ThreadPool pool(8, FailingStarter{fail_at, &started, &finished});
      FAIL() << "no exception for fail_at=" << fail_at;
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("could not start collation thread " + std::to_string(fail_at + 2) + " of 8"),
                std::string::npos) << what;
      EXPECT_NE(what.find("thread creation refused"), std::string::npos) << what;
    }
    EXPECT_EQ(started.load(), fail_at);
    // Every started thread has returned from its loop: joined before the exception left.
    EXPECT_EQ(finished.load(), fail_at);
  }
  // A pool that starts works as before.
  std::atomic<int> started{0}, finished{0};
  {
    ThreadPool pool(4, FailingStarter{100, &started, &finished});
    std::atomic<int> ran{0};
    pool.run(50, [&](size_t) { ran.fetch_add(1); });
    EXPECT_EQ(ran.load(), 50);
  }
  EXPECT_EQ(started.load(), 3);
  EXPECT_EQ(finished.load(), 3);
}

}  // namespace
}  // namespace prefetch
