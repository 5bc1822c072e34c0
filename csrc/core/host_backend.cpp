// The host backend: the "copy stream" is one thread running work in order, an event is a flag
// set when the thread reaches it. Random delays can be injected before every piece of work so
// that a missing wait shows up as a corrupted batch in tests and under ThreadSanitizer.
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include "aligned_buffer.h"
#include "backend.h"
#include "errors.h"

namespace prefetch {
namespace {

class HostEvent : public Event {
 public:
  bool complete() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }
  void wait() override {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }
  void set(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
      error_ = error;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class HostMemoryBuffer : public HostMemory {
 public:
  explicit HostMemoryBuffer(size_t bytes) : buffer_(bytes) {}
  std::byte* data() override { return buffer_.data(); }
  size_t size() const override { return buffer_.size(); }

 private:
  AlignedBuffer buffer_;
};

class HostBackend : public Backend {
 public:
  HostBackend() : thread_([this] { loop(); }) {}

  ~HostBackend() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  std::string name() const override { return "host"; }

  std::unique_ptr<HostMemory> alloc_host(size_t bytes) override {
    return std::make_unique<HostMemoryBuffer>(bytes);
  }

  void copy_async(void* dst, const void* src, size_t bytes) override {
    push([dst, src, bytes](void*) { std::memcpy(dst, src, bytes); });
  }

  void enqueue(std::function<void(void*)> work) override { push(std::move(work)); }

  std::shared_ptr<Event> record() override {
    auto event = std::make_shared<HostEvent>();
    Task task;
    task.event = event;
    push(std::move(task));
    return event;
  }

  void wait_on(Event& event, void*) override { event.wait(); }
  void* stream_handle() override { return nullptr; }

  void set_debug_delay(int64_t max_us, uint64_t seed) override {
    std::lock_guard<std::mutex> lock(mutex_);
    max_delay_us_ = max_us;
    rng_.seed(seed);
  }

 private:
  struct Task {
    std::function<void(void*)> work;
    std::shared_ptr<HostEvent> event;  // set instead of running work
  };

  void push(std::function<void(void*)> work) {
    Task task;
    task.work = std::move(work);
    push(std::move(task));
  }

  void push(Task task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_all();
  }

  void loop() {
    // The first failure since the last event is reported by that event, like an asynchronous
    // CUDA error surfacing at the next synchronisation.
    std::exception_ptr pending_error;
    while (true) {
      Task task;
      int64_t delay_us = 0;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stop_ and nothing left: all work runs before exit
        task = std::move(tasks_.front());
        tasks_.pop_front();
        if (max_delay_us_ > 0) {
          delay_us = std::uniform_int_distribution<int64_t>(0, max_delay_us_)(rng_);
        }
      }
      if (delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      if (task.event) {
        task.event->set(pending_error);
        pending_error = nullptr;
        continue;
      }
      try {
        task.work(nullptr);
      } catch (...) {
        if (!pending_error) pending_error = std::current_exception();
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> tasks_;
  bool stop_ = false;
  int64_t max_delay_us_ = 0;
  std::mt19937_64 rng_{0};
  std::thread thread_;  // last: started after every other member exists
};

}  // namespace

std::unique_ptr<Backend> make_host_backend() {
  try {
    return std::make_unique<HostBackend>();
  } catch (const std::system_error& e) {  // std::thread could not start (pid or memory limits)
    throw std::runtime_error(std::string("prefetch: could not start the host copy thread (") +
                             e.what() + "); raise the limit on threads or address space");
  }
}

}  // namespace prefetch
