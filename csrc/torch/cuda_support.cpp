// Built only against a CUDA build of torch (setup.py adds it when CUDA is resolved).
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "device_support.h"

namespace prefetch {

namespace {
c10::cuda::CUDAStream external(void* stream, int device) {
  return c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream),
                                          static_cast<c10::DeviceIndex>(device));
}
}  // namespace

bool cuda_support_built() { return true; }

void* cuda_copy_stream(int device) {
  return c10::cuda::getStreamFromPool(/*isHighPriority=*/false, static_cast<c10::DeviceIndex>(device)).stream();
}

DestinationAllocator cuda_destination_allocator(int device, void* copy_stream) {
  return [device, copy_stream](size_t bytes) {
    c10::cuda::CUDAGuard device_guard(static_cast<c10::DeviceIndex>(device));
    c10::cuda::CUDAStreamGuard stream_guard(external(copy_stream, device));
    auto packed = std::make_shared<at::Tensor>(at::empty(
        {static_cast<int64_t>(bytes)},
        at::TensorOptions().dtype(at::kByte).device(at::kCUDA, static_cast<c10::DeviceIndex>(device))));
    return Destination{static_cast<std::byte*>(packed->data_ptr()), packed};
  };
}

void* cuda_current_stream(int device) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
}

void cuda_protect_for_stream(const at::Tensor& packed, int device, void* stream) {
  packed.record_stream(external(stream, device));
}

}  // namespace prefetch
