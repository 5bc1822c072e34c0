// DeviceScope and check_cuda: the CUDA backend's device rule, written against CudaCalls so that
// the C++ tests check it with a fake runtime.
#include "cuda_calls.h"

#include "errors.h"

namespace prefetch {

void check_cuda(CudaCalls& calls, int status, const char* what) {
  if (status != 0) {
    throw BackendError(std::string("prefetch: ") + what + " failed: " + calls.describe(status));
  }
}

DeviceScope::DeviceScope(CudaCalls& calls, int device) : calls_(calls) {
  check_cuda(calls_, calls_.get_device(&previous_), "cudaGetDevice");
  if (previous_ == device) return;
  // Decided before switching: only a device that already has its context is worth restoring.
  restore_ = calls_.has_primary_context(previous_);
  check_cuda(calls_, calls_.set_device(device), "cudaSetDevice");
}

DeviceScope::DeviceScope(CudaCalls& calls, int device, NoThrow) noexcept : calls_(calls) {
  if (calls_.get_device(&previous_) != 0 || previous_ == device) return;
  restore_ = calls_.has_primary_context(previous_);
  if (calls_.set_device(device) != 0) restore_ = false;
}

DeviceScope::~DeviceScope() {
  // A failure here cannot be reported (a destructor); the thread then keeps the engine's device.
  if (restore_) calls_.set_device(previous_);
}

}  // namespace prefetch
