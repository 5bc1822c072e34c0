// Recycles host buffers handed to users as the storage of CPU output tensors. A lease returns
// its buffer to the pool when the last owner drops it, so a batch stays valid for as long as the
// user holds it, and steady-state epochs allocate (and fault) nothing.
#pragma once
#include <cstddef>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "aligned_buffer.h"

namespace prefetch {

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  static constexpr size_t kUnbounded = std::numeric_limits<size_t>::max();

  // Keeps at most `max_free` idle buffers holding at most `max_idle_bytes` between them; a
  // returned buffer that would break either bound is freed (the smallest idle ones go first).
  static std::shared_ptr<BufferPool> create(size_t max_free, size_t max_idle_bytes = kUnbounded);

  // A buffer of at least `bytes`; the pointer stays valid while the shared_ptr lives.
  std::shared_ptr<AlignedBuffer> acquire(size_t bytes);

  // One consistent snapshot: what the pool holds idle, what its leases hold, and how often it
  // had to allocate rather than reuse.
  struct Stats {
    size_t idle_buffers = 0, idle_bytes = 0;
    size_t max_idle_buffers = 0, max_idle_bytes = 0;
    size_t in_use_buffers = 0, in_use_bytes = 0;  // leases not yet returned
    size_t allocations = 0, reuses = 0;           // acquires that allocated / found an idle buffer
  };
  Stats stats() const;

  size_t idle_count() const;
  size_t allocations() const;

  // Frees every idle buffer now (leases are untouched and still come back); returns the bytes
  // freed.
  size_t release_idle();
  // Changes the byte bound, freeing idle buffers (smallest first) until it holds.
  void set_max_idle_bytes(size_t max_idle_bytes);

 private:
  BufferPool(size_t max_free, size_t max_idle_bytes)
      : max_free_(max_free), max_idle_bytes_(max_idle_bytes) {}
  void give_back(std::unique_ptr<AlignedBuffer> buffer);
  // Moves idle buffers out (smallest first) until both bounds hold; the caller frees them
  // after unlocking, so a munmap never runs under the lock.
  void evict_locked(std::vector<std::unique_ptr<AlignedBuffer>>& out);

  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<AlignedBuffer>> idle_;
  size_t idle_bytes_ = 0;
  const size_t max_free_;
  size_t max_idle_bytes_;
  size_t in_use_ = 0, in_use_bytes_ = 0;
  size_t allocations_ = 0, reuses_ = 0;
};

}  // namespace prefetch
