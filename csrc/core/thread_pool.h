// A fixed pool of worker threads that run one parallel job at a time. The calling thread takes
// part in the job, so `num_threads` threads copy in all and a pool of 1 spawns no thread.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace prefetch {

class ThreadPool {
 public:
  // Starts thread `index` running `body`; the default is std::thread's constructor. Tests inject
  // one that fails, as the OS does under pid or address-space limits.
  using ThreadStarter = std::function<std::thread(int index, std::function<void()> body)>;

  // When a thread cannot be started, the threads already started are stopped and joined and a
  // std::runtime_error naming the thread and the OS's reason is thrown (never std::terminate).
  explicit ThreadPool(int num_threads, const ThreadStarter& start_thread = nullptr);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs task(i) for every i in [0, n) across the pool and the caller; returns when all are
  // done. The first exception thrown by any task is rethrown here (the rest still run).
  void run(size_t n, const std::function<void(size_t)>& task);

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

 private:
  struct Job {
    const std::function<void(size_t)>* task = nullptr;
    size_t n = 0;
    size_t next = 0;       // next index to hand out
    size_t finished = 0;   // indices done
    std::exception_ptr error;
  };
  void worker_loop();
  void stop_and_join();
  // Takes and runs indices of the current job until none are left. Needs `lock` held on entry
  // and returns with it held.
  void drain(std::unique_lock<std::mutex>& lock);

  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::mutex run_mutex_;  // one job at a time
  Job job_;
  uint64_t job_id_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace prefetch
