#include "thread_pool.h"

#include <stdexcept>
#include <string>

namespace prefetch {

ThreadPool::ThreadPool(int num_threads, const ThreadStarter& start_thread) {
  int spawn = num_threads > 1 ? num_threads - 1 : 0;
  workers_.reserve(spawn);
  for (int i = 0; i < spawn; ++i) {
    try {
      std::function<void()> body = [this] { worker_loop(); };
      workers_.push_back(start_thread ? start_thread(i, std::move(body)) : std::thread(std::move(body)));
    } catch (const std::exception& e) {
      // The destructor does not run for a constructor that throws: stop and join here, or the
      // joinable threads' destructors would call std::terminate.
      stop_and_join();
      throw std::runtime_error("prefetch: could not start collation thread " + std::to_string(i + 2) +
                               " of " + std::to_string(num_threads) + " (" + e.what() +
                               "); lower num_threads, or raise the limit on threads or address "
                               "space (ulimit -u / -v, the container's pids limit)");
    } catch (...) {
      stop_and_join();
      throw;
    }
  }
}

ThreadPool::~ThreadPool() { stop_and_join(); }

void ThreadPool::stop_and_join() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
}

void ThreadPool::drain(std::unique_lock<std::mutex>& lock) {
  while (job_.next < job_.n) {
    size_t i = job_.next++;
    const auto* task = job_.task;
    lock.unlock();
    std::exception_ptr error;
    try {
      (*task)(i);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !job_.error) job_.error = error;
    if (++job_.finished == job_.n) done_cv_.notify_all();
  }
}

void ThreadPool::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  uint64_t seen = 0;
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || (job_id_ != seen && job_.next < job_.n); });
    if (stop_) return;
    seen = job_id_;
    drain(lock);
  }
}

void ThreadPool::run(size_t n, const std::function<void(size_t)>& task) {
  if (n == 0) return;
  std::lock_guard<std::mutex> one_job(run_mutex_);
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = Job{};
  job_.task = &task;
  job_.n = n;
  ++job_id_;
  if (!workers_.empty() && n > 1) work_cv_.notify_all();
  drain(lock);
  done_cv_.wait(lock, [&] { return job_.finished == job_.n; });
  std::exception_ptr error = job_.error;
  job_ = Job{};
  lock.unlock();
  if (error) std::rethrow_exception(error);
}

}  // namespace prefetch
