// The CUDA backend: a non-blocking copy stream (torch's, borrowed, or one of its own), events
// without timing (but those of record_timed), and pinned host memory. Written against CudaCalls (cuda_calls.h) and compiled
// in every build: the real runtime drives it in a CUDA build, a recording fake in the C++ tests.
// Every call is made with the engine's device current (DeviceScope), whichever thread makes it:
// the producer, the consumer, or a thread that drops the last reference to an event or buffer.
#include <unistd.h>

#include <stdexcept>
#include <string>

#include "backend.h"
#include "cuda_calls.h"
#include "errors.h"

namespace prefetch {
namespace {

class CudaEvent : public Event {
 public:
  CudaEvent(std::shared_ptr<CudaCalls> calls, int device, void* stream, bool timing = false)
      : calls_(std::move(calls)), device_(device), timing_(timing) {
    DeviceScope scope(*calls_, device_);
    check_cuda(*calls_, timing ? calls_->event_create_timing(&event_) : calls_->event_create(&event_),
               "cudaEventCreateWithFlags");
    const int status = calls_->event_record(event_, stream);
    if (status != 0) {
      calls_->event_destroy(event_);
      check_cuda(*calls_, status, "cudaEventRecord");
    }
  }
  ~CudaEvent() override {
    DeviceScope scope(*calls_, device_, DeviceScope::NoThrow{});
    calls_->event_destroy(event_);
  }
  bool complete() override {
    DeviceScope scope(*calls_, device_);
    const int status = calls_->event_query(event_);
    if (status == calls_->not_ready()) return false;
    check_cuda(*calls_, status, "cudaEventQuery");
    return true;
  }
  void wait() override {
    DeviceScope scope(*calls_, device_);
    check_cuda(*calls_, calls_->event_synchronize(event_), "cudaEventSynchronize");
  }
  void* get() const { return event_; }
  bool timing() const { return timing_; }

 private:
  std::shared_ptr<CudaCalls> calls_;
  int device_;
  bool timing_;
  void* event_ = nullptr;
};

class PinnedMemory : public HostMemory {
 public:
  PinnedMemory(std::shared_ptr<CudaCalls> calls, int device, size_t bytes)
      : calls_(std::move(calls)), device_(device), size_(bytes) {
    DeviceScope scope(*calls_, device_);
    check_cuda(*calls_, calls_->host_alloc(&data_, bytes == 0 ? 1 : bytes), "cudaHostAlloc");
  }
  ~PinnedMemory() override {
    DeviceScope scope(*calls_, device_, DeviceScope::NoThrow{});
    calls_->free_host(data_);
  }
  std::byte* data() override { return static_cast<std::byte*>(data_); }
  size_t size() const override { return size_; }

 private:
  std::shared_ptr<CudaCalls> calls_;
  int device_;
  void* data_ = nullptr;
  size_t size_;
};

class CudaBackend : public Backend {
 public:
  CudaBackend(std::shared_ptr<CudaCalls> calls, int device, void* borrowed_stream)
      : calls_(std::move(calls)), device_(device), stream_(borrowed_stream), owns_stream_(borrowed_stream == nullptr) {
    if (owns_stream_) {
      DeviceScope scope(*calls_, device_);
      check_cuda(*calls_, calls_->stream_create_non_blocking(&stream_), "cudaStreamCreateWithFlags");
    }
  }
  ~CudaBackend() override {
    DeviceScope scope(*calls_, device_, DeviceScope::NoThrow{});
    calls_->stream_synchronize(stream_);
    // A borrowed stream (torch's pool) outlives the engine: torch's caching allocator keeps
    // blocks tied to it, and an empty_cache() later synchronises it (docs/engine.md, Backends).
    if (owns_stream_) calls_->stream_destroy(stream_);
  }
  std::string name() const override { return "cuda:" + std::to_string(device_); }

  std::unique_ptr<HostMemory> alloc_host(size_t bytes) override {
    return std::make_unique<PinnedMemory>(calls_, device_, bytes);
  }
  std::shared_ptr<void> register_host(void* data, size_t bytes) override {
    DeviceScope scope(*calls_, device_);
    // Portable: pinned for every context, as the ring's slots are.
    check_cuda(*calls_, calls_->host_register(data, bytes), "cudaHostRegister");
    // A forked child inherits the handle, not the registration (and cannot use CUDA).
    const pid_t owner = getpid();
    std::shared_ptr<CudaCalls> calls = calls_;
    const int device = device_;
    return std::shared_ptr<void>(data, [owner, calls, device](void* p) {
      if (getpid() != owner) return;
      DeviceScope scope(*calls, device, DeviceScope::NoThrow{});
      calls->host_unregister(p);
    });
  }
  void copy_async(void* dst, const void* src, size_t bytes) override {
    DeviceScope scope(*calls_, device_);
    check_cuda(*calls_, calls_->memcpy_host_to_device_async(dst, src, bytes, stream_), "cudaMemcpyAsync");
  }
  void enqueue(std::function<void(void*)> work) override {
    DeviceScope scope(*calls_, device_);
    work(stream_);
  }
  std::shared_ptr<Event> record() override { return std::make_shared<CudaEvent>(calls_, device_, stream_); }
  void wait_on(Event& event, void* consumer_stream) override {
    DeviceScope scope(*calls_, device_);
    auto& cuda_event = dynamic_cast<CudaEvent&>(event);
    check_cuda(*calls_, calls_->stream_wait_event(consumer_stream, cuda_event.get()), "cudaStreamWaitEvent");
  }
  void* stream_handle() override { return stream_; }

  std::shared_ptr<Event> record_timed() override {
    return std::make_shared<CudaEvent>(calls_, device_, stream_, /*timing=*/true);
  }
  double elapsed_s(Event& from, Event& to) override {
    auto& a = dynamic_cast<CudaEvent&>(from);
    auto& b = dynamic_cast<CudaEvent&>(to);
    if (!a.timing() || !b.timing()) {
      throw std::invalid_argument("prefetch: elapsed_s needs two events made by record_timed()");
    }
    a.wait();
    b.wait();
    DeviceScope scope(*calls_, device_);
    float ms = 0;
    check_cuda(*calls_, calls_->event_elapsed_ms(&ms, a.get(), b.get()), "cudaEventElapsedTime");
    return static_cast<double>(ms) * 1e-3;
  }

 private:
  std::shared_ptr<CudaCalls> calls_;
  int device_;
  void* stream_ = nullptr;
  bool owns_stream_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, void* stream) {
  if (!built_with_cuda()) {
    throw BackendError("prefetch was built without CUDA; cannot use cuda:" + std::to_string(device) +
                       ". Rebuild with a CUDA build of torch and nvcc on PATH (or FORCE_CUDA=1).");
  }
  return make_cuda_backend_with(runtime_cuda_calls(), device, stream);
}

std::unique_ptr<Backend> make_cuda_backend_with(std::shared_ptr<CudaCalls> calls, int device, void* stream) {
  return std::make_unique<CudaBackend>(std::move(calls), device, stream);
}

bool built_with_cuda() {
#ifdef PREFETCH_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace prefetch
