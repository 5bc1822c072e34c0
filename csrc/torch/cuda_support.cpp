// Built only against a CUDA build of torch (setup.py adds it when CUDA is resolved).
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

at::Tensor cuda_view_of_pinned(const at::Tensor& host, int device) {
  TORCH_CHECK(host.device().is_cpu() && host.is_pinned(),
              "cuda_view_of_pinned needs a pinned CPU tensor (tensor.pin_memory()); got a tensor on ",
              host.device(), host.device().is_cpu() ? " that is not pinned" : "");
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  // Pinned memory is mapped into the device's address space (unified addressing); ask for the
  // address the device sees rather than assume it equals the host's.
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, host.data_ptr());
  TORCH_CHECK(status == cudaSuccess && attributes.devicePointer != nullptr,
              "cuda_view_of_pinned: this pinned memory is not mapped for the device (",
              cudaGetErrorString(status), ")");
  at::Tensor keep = host;
  return at::from_blob(
      attributes.devicePointer, host.sizes(), host.strides(), [keep](void*) mutable { keep.reset(); },
      host.options().device(at::kCUDA, static_cast<c10::DeviceIndex>(device)).pinned_memory(false));
}

}  // namespace prefetch
