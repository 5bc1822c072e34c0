// The CPU build's stand-in for cuda_support.cpp: every entry point says how to get CUDA.
#include <stdexcept>

#include "device_support.h"

namespace prefetch {

namespace {
[[noreturn]] void no_cuda() {
  throw std::runtime_error(
      "prefetch was built without CUDA support (CPU build of torch, or PREFETCH_FORCE_CPU=1). "
      "Reinstall it with a CUDA build of torch and nvcc on PATH: "
      "pip install --no-build-isolation -e .");
}
}  // namespace

bool cuda_support_built() { return false; }
void* cuda_copy_stream(int) { no_cuda(); }
DestinationAllocator cuda_destination_allocator(int, void*) { no_cuda(); }
void* cuda_current_stream(int) { no_cuda(); }
void cuda_protect_for_stream(const at::Tensor&, int, void*) { no_cuda(); }

}  // namespace prefetch
