#include "buffer_pool.h"

#include <algorithm>

namespace prefetch {

std::shared_ptr<BufferPool> BufferPool::create(size_t max_free, size_t max_idle_bytes) {
  return std::shared_ptr<BufferPool>(new BufferPool(max_free, max_idle_bytes));
}

std::shared_ptr<AlignedBuffer> BufferPool::acquire(size_t bytes) {
  std::unique_ptr<AlignedBuffer> found;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // The smallest idle buffer that fits, so a large buffer is not spent on a small batch.
    auto best = idle_.end();
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if ((*it)->size() >= bytes && (best == idle_.end() || (*it)->size() < (*best)->size())) {
        best = it;
      }
    }
    if (best != idle_.end()) {
      found = std::move(*best);
      idle_.erase(best);
      idle_bytes_ -= found->size();
      ++reuses_;
    } else {
      ++allocations_;
    }
  }
  // Allocated (and faulted in) outside the lock: other threads keep reusing meanwhile.
  if (!found) found = std::make_unique<AlignedBuffer>(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++in_use_;
    in_use_bytes_ += found->size();
  }
  // The deleter holds the pool weakly: a buffer outliving the pool is simply freed.
  std::weak_ptr<BufferPool> weak = weak_from_this();
  AlignedBuffer* raw = found.release();
  return std::shared_ptr<AlignedBuffer>(raw, [weak](AlignedBuffer* b) {
    std::unique_ptr<AlignedBuffer> owned(b);
    if (auto pool = weak.lock()) pool->give_back(std::move(owned));
  });
}

void BufferPool::evict_locked(std::vector<std::unique_ptr<AlignedBuffer>>& out) {
  while (!idle_.empty() && (idle_.size() > max_free_ || idle_bytes_ > max_idle_bytes_)) {
    auto smallest = std::min_element(idle_.begin(), idle_.end(), [](auto& a, auto& b) {
      return a->size() < b->size();
    });
    idle_bytes_ -= (*smallest)->size();
    out.push_back(std::move(*smallest));
    idle_.erase(smallest);
  }
}

void BufferPool::give_back(std::unique_ptr<AlignedBuffer> buffer) {
  std::vector<std::unique_ptr<AlignedBuffer>> evicted;  // declared first: freed after unlocking
  std::lock_guard<std::mutex> lock(mutex_);
  --in_use_;
  in_use_bytes_ -= buffer->size();
  // A buffer larger than the whole byte bound would only push the others out before going.
  if (buffer->size() > max_idle_bytes_ || max_free_ == 0) {
    evicted.push_back(std::move(buffer));
    return;
  }
  idle_bytes_ += buffer->size();
  idle_.push_back(std::move(buffer));
  evict_locked(evicted);
}

BufferPool::Stats BufferPool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats s;
  s.idle_buffers = idle_.size();
  s.idle_bytes = idle_bytes_;
  s.max_idle_buffers = max_free_;
  s.max_idle_bytes = max_idle_bytes_;
  s.in_use_buffers = in_use_;
  s.in_use_bytes = in_use_bytes_;
  s.allocations = allocations_;
  s.reuses = reuses_;
  return s;
}

size_t BufferPool::idle_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return idle_.size();
}

size_t BufferPool::allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocations_;
}

size_t BufferPool::release_idle() {
  std::vector<std::unique_ptr<AlignedBuffer>> freed;  // declared first: freed after unlocking
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t bytes = idle_bytes_;
  freed = std::move(idle_);
  idle_.clear();
  idle_bytes_ = 0;
  return bytes;
}

void BufferPool::set_max_idle_bytes(size_t max_idle_bytes) {
  std::vector<std::unique_ptr<AlignedBuffer>> evicted;  // declared first: freed after unlocking
  std::lock_guard<std::mutex> lock(mutex_);
  max_idle_bytes_ = max_idle_bytes;
  evict_locked(evicted);
}

}  // namespace prefetch
