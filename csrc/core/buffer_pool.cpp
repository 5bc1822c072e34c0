#include "buffer_pool.h"

#include <algorithm>

namespace prefetch {

std::shared_ptr<BufferPool> BufferPool::create(size_t max_free) {
  return std::shared_ptr<BufferPool>(new BufferPool(max_free));
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
    } else {
      ++allocations_;
    }
  }
  if (!found) found = std::make_unique<AlignedBuffer>(bytes);
  // The deleter holds the pool weakly: a buffer outliving the pool is simply freed.
  std::weak_ptr<BufferPool> weak = weak_from_this();
  AlignedBuffer* raw = found.release();
  return std::shared_ptr<AlignedBuffer>(raw, [weak](AlignedBuffer* b) {
    std::unique_ptr<AlignedBuffer> owned(b);
    if (auto pool = weak.lock()) pool->give_back(std::move(owned));
  });
}

void BufferPool::give_back(std::unique_ptr<AlignedBuffer> buffer) {
  std::unique_ptr<AlignedBuffer> evicted;  // freed outside the lock
  std::lock_guard<std::mutex> lock(mutex_);
  idle_.push_back(std::move(buffer));
  if (idle_.size() > max_free_) {
    auto smallest = std::min_element(idle_.begin(), idle_.end(), [](auto& a, auto& b) {
      return a->size() < b->size();
    });
    evicted = std::move(*smallest);
    idle_.erase(smallest);
  }
}

size_t BufferPool::idle_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return idle_.size();
}

size_t BufferPool::allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocations_;
}

}  // namespace prefetch
