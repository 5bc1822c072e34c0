// The CPU ops' output pool. Large CPU outputs come from a process-wide pool of pre-faulted
// buffers that a tensor returns when it dies; the reasons, the bounds and the Python controls are
// in output_pool.cpp and docs/custom_ops.md ("Where prefetch's CPU outputs come from").
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace prefetch {

// An op's CPU output (an OutputAllocator, plan_common.h): from the pool when large, else torch's.
at::Tensor pooled_empty(at::IntArrayRef sizes, const at::TensorOptions& options, at::MemoryFormat format);

// The pool's Python face, registered as private ops (schemas.cpp) that
// prefetch/ops/output_pool.py wraps. The stats come in a fixed order that that module names.
std::vector<int64_t> output_pool_stats();
int64_t release_output_pool();
int64_t set_output_pool_limit(int64_t max_idle_bytes);

}  // namespace prefetch
