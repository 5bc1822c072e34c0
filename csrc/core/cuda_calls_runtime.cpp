// The real CudaCalls: the CUDA runtime, plus the driver's cuDevicePrimaryCtxGetState reached
// through the runtime's entry-point query (no link to libcuda, no driver header needed).
// Compiled to a stub that throws in a build without CUDA.
#include "cuda_calls.h"

#include "errors.h"

#ifdef PREFETCH_WITH_CUDA
#include <cuda_runtime_api.h>

#include <mutex>

namespace prefetch {
namespace {

// The driver functions used, by their documented C signatures (CUresult and CUdevice are ints).
using DeviceGetFn = int (*)(int* device, int ordinal);
using PrimaryCtxGetStateFn = int (*)(int device, unsigned int* flags, int* active);

void* driver_entry_point(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
  const cudaError_t status = cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &found);
#else
  const cudaError_t status = cudaGetDriverEntryPoint(symbol, &fn, cudaEnableDefault, &found);
#endif
  return status == cudaSuccess && found == cudaDriverEntryPointSuccess ? fn : nullptr;
}

class RuntimeCudaCalls : public CudaCalls {
 public:
  int get_device(int* device) override { return cudaGetDevice(device); }
  int set_device(int device) override { return cudaSetDevice(device); }
  bool has_primary_context(int device) override {
    std::call_once(resolved_, [this] {
      device_get_ = reinterpret_cast<DeviceGetFn>(driver_entry_point("cuDeviceGet"));
      primary_state_ = reinterpret_cast<PrimaryCtxGetStateFn>(driver_entry_point("cuDevicePrimaryCtxGetState"));
    });
    // Without the driver's answer, restoring is the safer mistake (the old behaviour).
    if (device_get_ == nullptr || primary_state_ == nullptr) return true;
    int handle = 0;
    unsigned int flags = 0;
    int active = 0;
    if (device_get_(&handle, device) != 0 || primary_state_(handle, &flags, &active) != 0) return true;
    return active != 0;
  }
  int stream_create_non_blocking(void** stream) override {
    return cudaStreamCreateWithFlags(reinterpret_cast<cudaStream_t*>(stream), cudaStreamNonBlocking);
  }
  int stream_destroy(void* stream) override { return cudaStreamDestroy(static_cast<cudaStream_t>(stream)); }
  int stream_synchronize(void* stream) override {
    return cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  }
  int event_create(void** event) override {
    return cudaEventCreateWithFlags(reinterpret_cast<cudaEvent_t*>(event),
                                    cudaEventDisableTiming | cudaEventBlockingSync);
  }
  int event_create_timing(void** event) override {
    return cudaEventCreateWithFlags(reinterpret_cast<cudaEvent_t*>(event), cudaEventBlockingSync);
  }
  int event_elapsed_ms(float* ms, void* start, void* end) override {
    return cudaEventElapsedTime(ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end));
  }
  int event_record(void* event, void* stream) override {
    return cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream));
  }
  int event_query(void* event) override { return cudaEventQuery(static_cast<cudaEvent_t>(event)); }
  int event_synchronize(void* event) override { return cudaEventSynchronize(static_cast<cudaEvent_t>(event)); }
  int event_destroy(void* event) override { return cudaEventDestroy(static_cast<cudaEvent_t>(event)); }
  int stream_wait_event(void* stream, void* event) override {
    return cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0);
  }
  int host_alloc(void** data, size_t bytes) override { return cudaHostAlloc(data, bytes, cudaHostAllocPortable); }
  int free_host(void* data) override { return cudaFreeHost(data); }
  int host_register(void* data, size_t bytes) override {
    return cudaHostRegister(data, bytes, cudaHostRegisterPortable);
  }
  int host_unregister(void* data) override { return cudaHostUnregister(data); }
  int memcpy_host_to_device_async(void* dst, const void* src, size_t bytes, void* stream) override {
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream));
  }
  int not_ready() const override { return cudaErrorNotReady; }
  std::string describe(int status) override {
    const auto error = static_cast<cudaError_t>(status);
    return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
  }

 private:
  std::once_flag resolved_;
  DeviceGetFn device_get_ = nullptr;
  PrimaryCtxGetStateFn primary_state_ = nullptr;
};

}  // namespace

std::shared_ptr<CudaCalls> runtime_cuda_calls() {
  static const std::shared_ptr<CudaCalls> calls = std::make_shared<RuntimeCudaCalls>();
  return calls;
}

}  // namespace prefetch

#else  // !PREFETCH_WITH_CUDA

namespace prefetch {
std::shared_ptr<CudaCalls> runtime_cuda_calls() {
  throw BackendError("prefetch was built without CUDA. Rebuild with a CUDA build of torch and nvcc "
                     "on PATH (or FORCE_CUDA=1).");
}
}  // namespace prefetch

#endif
