// The CUDA runtime calls the CUDA backend makes, behind an interface, and the rule for which
// device is current while it makes them. The real calls (cuda_calls_runtime.cpp) exist only in a
// build with CUDA; the C++ tests drive the same backend code through a fake that records every
// call and the device current on its thread (tests/cpp/cuda_backend_test.cpp), so what a GPU run
// would do is checked on machines without one.
//
// Why the device matters: CUDA's current device is per host thread, and a thread starts with
// device 0. Almost every runtime call creates the current device's primary context (~0.5 GB of
// device memory) if it has none, so a thread that made one call without first selecting the
// engine's device would give every DDP rank a context on GPU 0. And restoring a thread's previous
// device afterwards must not create that context either: a device whose primary context does
// not exist yet is not restored (cudaSetDevice would create it), as torch's own device guard does.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

namespace prefetch {

// Handles are opaque (cudaStream_t, cudaEvent_t); statuses are cudaError_t values, 0 = success.
class CudaCalls {
 public:
  virtual ~CudaCalls() = default;
  virtual int get_device(int* device) = 0;
  virtual int set_device(int device) = 0;
  // Whether `device`'s primary context is active in this process. Creates nothing.
  virtual bool has_primary_context(int device) = 0;
  virtual int stream_create_non_blocking(void** stream) = 0;
  virtual int stream_destroy(void* stream) = 0;
  virtual int stream_synchronize(void* stream) = 0;
  // Without timing, waited for by blocking the thread (not spinning).
  virtual int event_create(void** event) = 0;
  // With timing (for elapsed_ms), also waited for by blocking the thread.
  virtual int event_create_timing(void** event) = 0;
  virtual int event_record(void* event, void* stream) = 0;
  // Milliseconds between two completed timing events (cudaEventElapsedTime).
  virtual int event_elapsed_ms(float* ms, void* start, void* end) = 0;
  // 0 when complete, not_ready() while work before it is pending, another error otherwise.
  virtual int event_query(void* event) = 0;
  virtual int event_synchronize(void* event) = 0;
  virtual int event_destroy(void* event) = 0;
  virtual int stream_wait_event(void* stream, void* event) = 0;
  // Portable pinned memory: page-locked for every context.
  virtual int host_alloc(void** data, size_t bytes) = 0;
  virtual int free_host(void* data) = 0;
  virtual int host_register(void* data, size_t bytes) = 0;
  virtual int host_unregister(void* data) = 0;
  virtual int memcpy_host_to_device_async(void* dst, const void* src, size_t bytes, void* stream) = 0;
  virtual int not_ready() const = 0;
  // "cudaErrorX: description" for a status.
  virtual std::string describe(int status) = 0;
};

// The process's real CUDA runtime; a BackendError in a build without CUDA.
std::shared_ptr<CudaCalls> runtime_cuda_calls();

// Throws BackendError("prefetch: <what> failed: <describe(status)>") unless status is 0.
void check_cuda(CudaCalls& calls, int status, const char* what);

// Makes `device` current on this thread for the scope. On leaving, the thread's previous device
// is made current again only when it differs and its primary context exists: a fresh thread
// (device 0, no context on it) keeps `device` current rather than gaining a context on GPU 0.
class DeviceScope {
 public:
  // Throws BackendError when the device cannot be read or set.
  DeviceScope(CudaCalls& calls, int device);
  // For destructors, which must not throw: a failure leaves the thread's device as it is.
  struct NoThrow {};
  DeviceScope(CudaCalls& calls, int device, NoThrow) noexcept;
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  CudaCalls& calls_;
  int previous_ = 0;
  bool restore_ = false;
};

}  // namespace prefetch
