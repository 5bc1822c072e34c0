// The output pool of output_pool.h.
#include "ops/output_pool.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/strides.h>

#include <iterator>
#include <memory>

#include "buffer_pool.h"
#include "ops/plan_common.h"

namespace prefetch {

namespace {

// Large CPU outputs come from a pool of pre-faulted buffers that a tensor returns when it dies:
// torch's CPU allocator hands out blocks this large straight from mmap, and faulting a fresh
// 154 MiB output in costs more than the kernel itself (`python benchmarks/pool_vs_allocator.py`).
// Small outputs, and outputs the pool could not keep, use torch's allocator. The pool is one
// per process, bounded (kOutputPoolMaxIdle*), and visible to Python as
// prefetch.ops.output_pool_stats() / release_output_pool() / set_output_pool_limit()
// (docs/custom_ops.md).
constexpr size_t kPooledOutputMinBytes = size_t{1} << 20;
constexpr size_t kOutputPoolMaxIdleBuffers = 2;  // one output with the user, one being written
constexpr size_t kOutputPoolMaxIdleBytes = size_t{512} << 20;

BufferPool& output_pool() {
  // Destroyed at exit; an output that outlives it frees its buffer itself (the lease holds the
  // pool weakly).
  static const std::shared_ptr<BufferPool> pool =
      BufferPool::create(kOutputPoolMaxIdleBuffers, kOutputPoolMaxIdleBytes);
  return *pool;
}

}  // namespace

std::vector<int64_t> output_pool_stats() {
  const BufferPool::Stats s = output_pool().stats();
  const size_t values[] = {s.idle_buffers,   s.idle_bytes,   s.max_idle_buffers, s.max_idle_bytes,
                           s.in_use_buffers, s.in_use_bytes, s.allocations,      s.reuses};
  return std::vector<int64_t>(std::begin(values), std::end(values));
}

int64_t release_output_pool() { return static_cast<int64_t>(output_pool().release_idle()); }

int64_t set_output_pool_limit(int64_t max_idle_bytes) {
  TORCH_CHECK(max_idle_bytes >= 0, "max_idle_bytes must be >= 0, got ", max_idle_bytes);
  BufferPool& pool = output_pool();
  const int64_t previous = static_cast<int64_t>(pool.stats().max_idle_bytes);
  pool.set_max_idle_bytes(static_cast<size_t>(max_idle_bytes));
  return previous;
}

at::Tensor pooled_empty(at::IntArrayRef sizes, const at::TensorOptions& options,
                        at::MemoryFormat format) {
  const size_t bytes = static_cast<size_t>(
      checked_output_bytes("prefetch op", sizes, options.dtype().toScalarType()));
  BufferPool& pool = output_pool();
  // An output the pool would free on return gains nothing from it (it would be faulted in
  // twice: once by the pool's memset, once more by nobody), so torch allocates it.
  if (bytes < kPooledOutputMinBytes || bytes > pool.stats().max_idle_bytes) {
    return at::empty(sizes, options.memory_format(format));
  }
  std::shared_ptr<AlignedBuffer> lease = pool.acquire(bytes);
  std::vector<int64_t> strides;
  if (format == at::MemoryFormat::ChannelsLast) {
    auto cl = c10::get_channels_last_strides_2d(sizes);
    strides.assign(cl.begin(), cl.end());
  } else {
    auto contiguous = c10::contiguous_strides(sizes);
    strides.assign(contiguous.begin(), contiguous.end());
  }
  return at::from_blob(
      lease->data(), sizes, strides, [lease](void*) mutable { lease.reset(); }, options);
}

}  // namespace prefetch
