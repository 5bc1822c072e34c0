// The CUDA backend: a non-blocking stream created once per engine, events without timing, and
// pinned host memory. Torch-free (CUDA runtime only), so it compiles on machines whose CUDA
// toolkit has only the runtime and whose torch is a CPU build.
#include "backend.h"
#include "errors.h"

#ifdef PREFETCH_WITH_CUDA
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <string>

namespace prefetch {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw BackendError(std::string("prefetch: ") + what + " failed: " + cudaGetErrorName(status) +
                       ": " + cudaGetErrorString(status));
  }
}

// Makes `device` current for the scope; CUDA's current device is per host thread.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
    changed_ = previous_ != device;
  }
  ~DeviceScope() {
    if (changed_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool changed_ = false;
};

class CudaEvent : public Event {
 public:
  CudaEvent(int device, cudaStream_t stream) : device_(device) {
    DeviceScope scope(device);
    check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming | cudaEventBlockingSync),
          "cudaEventCreateWithFlags");
    check(cudaEventRecord(event_, stream), "cudaEventRecord");
  }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  bool complete() override {
    cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady) return false;
    check(status, "cudaEventQuery");
    return true;
  }
  void wait() override {
    DeviceScope scope(device_);
    check(cudaEventSynchronize(event_), "cudaEventSynchronize");
  }
  cudaEvent_t get() const { return event_; }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

class PinnedMemory : public HostMemory {
 public:
  explicit PinnedMemory(size_t bytes) : size_(bytes) {
    check(cudaHostAlloc(&data_, bytes == 0 ? 1 : bytes, cudaHostAllocPortable), "cudaHostAlloc");
  }
  ~PinnedMemory() override { cudaFreeHost(data_); }
  std::byte* data() override { return static_cast<std::byte*>(data_); }
  size_t size() const override { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_;
};

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    DeviceScope scope(device);
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  ~CudaBackend() override {
    DeviceScope scope(device_);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  std::string name() const override { return "cuda:" + std::to_string(device_); }

  std::unique_ptr<HostMemory> alloc_host(size_t bytes) override {
    DeviceScope scope(device_);
    return std::make_unique<PinnedMemory>(bytes);
  }
  std::shared_ptr<void> register_host(void* data, size_t bytes) override {
    DeviceScope scope(device_);
    // Portable: pinned for every context, as cudaHostAllocPortable is for the ring's slots.
    check(cudaHostRegister(data, bytes, cudaHostRegisterPortable), "cudaHostRegister");
    // A forked child inherits the handle, not the registration (and cannot use CUDA).
    const pid_t owner = getpid();
    return std::shared_ptr<void>(data, [owner](void* p) {
      if (getpid() == owner) cudaHostUnregister(p);
    });
  }
  void copy_async(void* dst, const void* src, size_t bytes) override {
    DeviceScope scope(device_);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
  }
  void enqueue(std::function<void(void*)> work) override {
    DeviceScope scope(device_);
    work(stream_);
  }
  std::shared_ptr<Event> record() override { return std::make_shared<CudaEvent>(device_, stream_); }
  void wait_on(Event& event, void* consumer_stream) override {
    DeviceScope scope(device_);
    auto& cuda_event = dynamic_cast<CudaEvent&>(event);
    check(cudaStreamWaitEvent(static_cast<cudaStream_t>(consumer_stream), cuda_event.get(), 0),
          "cudaStreamWaitEvent");
  }
  void* stream_handle() override { return stream_; }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }
bool built_with_cuda() { return true; }

}  // namespace prefetch

#else  // !PREFETCH_WITH_CUDA

namespace prefetch {
std::unique_ptr<Backend> make_cuda_backend(int device) {
  throw BackendError("prefetch was built without CUDA; cannot use cuda:" + std::to_string(device) +
                     ". Rebuild with a CUDA build of torch and nvcc on PATH (or FORCE_CUDA=1).");
}
bool built_with_cuda() { return false; }
}  // namespace prefetch

#endif
