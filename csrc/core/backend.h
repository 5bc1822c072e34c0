// The copy stream abstraction the engine runs on: CUDA (cudaStream_t + cudaEvent_t + pinned
// memory) or the host backend (a thread + completion flags + page-aligned memory). Both give
// the same ordering guarantees, so the ring's logic is tested without a GPU.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace prefetch {

// A point in the copy stream's work queue.
class Event {
 public:
  virtual ~Event() = default;
  // True once every piece of work enqueued before the event has finished.
  virtual bool complete() = 0;
  // Blocks the calling host thread until complete(); rethrows a failure of that work.
  virtual void wait() = 0;
};

// Host memory the backend can copy from asynchronously (pinned on CUDA).
class HostMemory {
 public:
  virtual ~HostMemory() = default;
  virtual std::byte* data() = 0;
  virtual size_t size() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::unique_ptr<HostMemory> alloc_host(size_t bytes) = 0;
  // Makes host memory the backend did not allocate (the worker ring's shared block) a source
  // copy_async reads at full speed, until the returned handle is destroyed: CUDA page-locks it
  // (cudaHostRegister); the host backend has nothing to do. Throws BackendError when the memory
  // cannot be locked (`ulimit -l`, an old driver): copies from it still work, staged by the
  // driver, and are only slower.
  virtual std::shared_ptr<void> register_host(void* data, size_t bytes) {
    (void)data;
    (void)bytes;
    return std::make_shared<int>(0);
  }
  // Enqueues a copy of `bytes` from host memory to the destination on the copy stream.
  virtual void copy_async(void* dst, const void* src, size_t bytes) = 0;
  // Enqueues work on the copy stream. The host backend runs `work` on its stream thread; the
  // CUDA backend calls it now with the cudaStream_t, so the kernels it launches are ordered.
  virtual void enqueue(std::function<void(void* stream)> work) = 0;
  // Marks the current end of the copy stream.
  virtual std::shared_ptr<Event> record() = 0;
  // Makes a consumer wait for `event`: CUDA makes `consumer_stream` wait without blocking the
  // host; the host backend blocks the caller (its consumer stream is the calling thread).
  virtual void wait_on(Event& event, void* consumer_stream) = 0;
  // The raw stream handle (cudaStream_t), or nullptr on the host backend.
  virtual void* stream_handle() = 0;
  // Test hook: sleep a random 0..max_us before every piece of stream work (host backend only).
  virtual void set_debug_delay(int64_t max_us, uint64_t seed) { (void)max_us; (void)seed; }

  // Timing. record_timed() is record() for an event whose completion time can be read: CUDA
  // makes it with timing (the engine's other events go without, which is cheaper); every host
  // event is timed. elapsed_s(from, to) waits for both (made by record_timed() on this backend)
  // and returns the seconds from `from`'s completion to `to`'s, on the copy stream's clock (CUDA:
  // cudaEventElapsedTime, ~0.5 us resolution; host: the stream thread's steady_clock).
  virtual std::shared_ptr<Event> record_timed() = 0;
  virtual double elapsed_s(Event& from, Event& to) = 0;

  // Test hook, the host backend's model of a GPU's copy engine (a DMA engine moves one copy at a
  // time, at the bus's speed, beside the CPU): each copy_async takes bytes / bytes_per_s seconds
  // on the stream thread — the memcpy, then a sleep for the rest of that time — so the ring's
  // overlap of collation and copies is measured on a machine without a GPU. 0: as fast as memcpy.
  // Throws std::invalid_argument for a negative or NaN rate, std::logic_error on a backend that
  // has a real copy engine (CUDA).
  virtual void set_copy_bandwidth(double bytes_per_s) {
    (void)bytes_per_s;
    throw std::logic_error("prefetch: the " + name() + " backend has a real copy engine; only the "
                           "host backend models one (set_copy_bandwidth)");
  }
};

class CudaCalls;  // cuda_calls.h

std::unique_ptr<Backend> make_host_backend();
// The CUDA backend on `device`: its copy stream is `stream` (a cudaStream_t the caller keeps
// valid for the backend's life and never destroys: the binding passes one of torch's pool
// streams), or, when null, a non-blocking stream of its own that it destroys. Throws
// BackendError in a build without CUDA (PREFETCH_WITH_CUDA).
std::unique_ptr<Backend> make_cuda_backend(int device, void* stream = nullptr);
// The same backend over other CUDA calls than the runtime's (the C++ tests' recording fake).
std::unique_ptr<Backend> make_cuda_backend_with(std::shared_ptr<CudaCalls> calls, int device,
                                                void* stream = nullptr);
bool built_with_cuda();

}  // namespace prefetch
