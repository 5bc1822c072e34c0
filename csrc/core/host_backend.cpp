// The host backend: the "copy stream" is one thread running work in order, an event is a flag
// set when the thread reaches it. Random delays can be injected before every piece of work so
// that a missing wait shows up as a corrupted batch in tests and under ThreadSanitizer; a copy
// bandwidth makes the thread a model of a GPU's copy engine (backend.h, set_copy_bandwidth).
//
// Times (elapsed_s) are the stream's as a device would keep them, not the moments the thread got
// a core: a piece of work starts when it was enqueued or when the one before it ended, whichever
// is later; an event completes then; a modelled copy ends bytes / bandwidth after its start (or
// when its memcpy ends, if later), a piece of other work when it returns. On a busy machine the
// thread may wait for a core for milliseconds (seen on the 2-core VM: the producer woken by a
// copy's event took the core until its collation ended): a device's copy engine does not, and
// with these times neither does the model's, as long as the wait is shorter than the copies
// queued behind it. Waiters still wake only once the thread has done the work.
#include <algorithm>
#include <chrono>
#include <cmath>
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
  // `at`: when the stream reached the event (its time, see the top of the file).
  void set(std::exception_ptr error, std::chrono::steady_clock::time_point at) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
      error_ = error;
      at_ = at;
    }
    cv_.notify_all();
  }
  // When the stream reached the event; waits for it (an error of the work is not thrown: a
  // timing read belongs to no batch).
  std::chrono::steady_clock::time_point completed_at() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return done_; });
    return at_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point at_;
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
    double bytes_per_s;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      bytes_per_s = bytes_per_s_;  // the rate when the copy was enqueued, as a test set it
    }
    if (bytes_per_s <= 0) {
      push([dst, src, bytes](void*) { std::memcpy(dst, src, bytes); });
      return;
    }
    Task task;
    task.work = [dst, src, bytes](void*) { std::memcpy(dst, src, bytes); };
    task.modelled = true;
    task.duration = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(static_cast<double>(bytes) / bytes_per_s));
    push(std::move(task));
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

  std::shared_ptr<Event> record_timed() override { return record(); }
  double elapsed_s(Event& from, Event& to) override {
    const auto a = dynamic_cast<HostEvent&>(from).completed_at();
    const auto b = dynamic_cast<HostEvent&>(to).completed_at();
    return std::chrono::duration<double>(b - a).count();
  }

  void set_copy_bandwidth(double bytes_per_s) override {
    if (!(bytes_per_s >= 0) || std::isinf(bytes_per_s)) {
      throw std::invalid_argument("prefetch: the copy bandwidth must be a finite number of bytes "
                                  "per second >= 0 (0: as fast as memcpy), got " +
                                  std::to_string(bytes_per_s));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    bytes_per_s_ = bytes_per_s;
  }

  void set_debug_delay(int64_t max_us, uint64_t seed) override {
    std::lock_guard<std::mutex> lock(mutex_);
    max_delay_us_ = max_us;
    rng_.seed(seed);
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Task {
    std::function<void(void*)> work;
    std::shared_ptr<HostEvent> event;  // set instead of running work
    Clock::time_point enqueued;
    bool modelled = false;             // a copy of the copy engine model, taking `duration`
    Clock::duration duration{};
  };

  void push(std::function<void(void*)> work) {
    Task task;
    task.work = std::move(work);
    push(std::move(task));
  }

  void push(Task task) {
    task.enqueued = Clock::now();
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
    Clock::time_point stream_free{};  // when the last piece of work ended, on the stream's time
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
      const Clock::time_point start = std::max(task.enqueued, stream_free);
      if (task.event) {
        task.event->set(pending_error, start);
        pending_error = nullptr;
        stream_free = start;
        continue;
      }
      try {
        task.work(nullptr);
      } catch (...) {
        if (!pending_error) pending_error = std::current_exception();
      }
      const Clock::time_point returned = Clock::now();
      if (task.modelled) {
        // The copy engine is busy until `end`: nothing after it completes sooner.
        const Clock::time_point end = std::max(start + task.duration, returned);
        std::this_thread::sleep_until(end);
        stream_free = end;
      } else {
        stream_free = returned;
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> tasks_;
  bool stop_ = false;
  int64_t max_delay_us_ = 0;
  double bytes_per_s_ = 0;  // the copy engine model's rate (0: memcpy's own)
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
