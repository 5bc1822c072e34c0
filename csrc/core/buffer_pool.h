// Recycles host buffers handed to users as the storage of CPU output tensors. A lease returns
// its buffer to the pool when the last owner drops it, so a batch stays valid for as long as the
// user holds it, and steady-state epochs allocate (and fault) nothing.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "aligned_buffer.h"

namespace prefetch {

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // Keeps at most `max_free` idle buffers; more are freed when returned.
  static std::shared_ptr<BufferPool> create(size_t max_free);

  // A buffer of at least `bytes`; the pointer stays valid while the shared_ptr lives.
  std::shared_ptr<AlignedBuffer> acquire(size_t bytes);

  size_t idle_count() const;
  size_t allocations() const;

 private:
  explicit BufferPool(size_t max_free) : max_free_(max_free) {}
  void give_back(std::unique_ptr<AlignedBuffer> buffer);

  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<AlignedBuffer>> idle_;
  size_t max_free_;
  size_t allocations_ = 0;
};

}  // namespace prefetch
