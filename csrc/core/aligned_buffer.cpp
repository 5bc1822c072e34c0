#include "aligned_buffer.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

namespace prefetch {

void AlignedBuffer::Free::operator()(std::byte* p) const { std::free(p); }

AlignedBuffer::AlignedBuffer(size_t bytes) : size_(bytes) {
  // A size within a page of SIZE_MAX would round up to 0 (a one-page buffer claiming `bytes`).
  if (bytes > std::numeric_limits<size_t>::max() - kPageSize) throw std::bad_alloc();
  size_t rounded = (bytes + kPageSize - 1) / kPageSize * kPageSize;
  if (rounded == 0) rounded = kPageSize;
  void* p = std::aligned_alloc(kPageSize, rounded);
  if (p == nullptr) throw std::bad_alloc();
  // Fault every page in now, once, instead of on the hot path.
  std::memset(p, 0, rounded);
  data_.reset(static_cast<std::byte*>(p));
}

}  // namespace prefetch
