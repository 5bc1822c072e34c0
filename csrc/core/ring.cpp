#include "ring.h"

#include <limits>
#include <new>

namespace prefetch {

namespace {

// Waits for the last copy that read `slot`, then lets go of its event and of the destination
// that copy wrote into: after this, nothing reads the slot's buffer.
void release_after_copy(Slot& slot) {
  if (slot.copied) {
    // The event's failure belongs to the batch that recorded it and was reported with it.
    try {
      slot.copied->wait();
    } catch (const std::exception&) {
    }
    slot.copied.reset();
  }
  slot.destination.reset();
}

}  // namespace

size_t grown_capacity(size_t needed) {
  constexpr size_t kGranule = size_t{1} << 20;
  size_t with_headroom = 0;
  // Past SIZE_MAX no buffer can be allocated: say so rather than wrap to a small capacity.
  if (__builtin_add_overflow(needed, needed / 8, &with_headroom) ||
      with_headroom > std::numeric_limits<size_t>::max() - kGranule) {
    throw std::bad_alloc();
  }
  return (with_headroom + kGranule - 1) / kGranule * kGranule;
}

Ring::Ring(Backend& backend, int depth)
    : backend_(backend),
      slots_(static_cast<size_t>(depth)),
      capacities_(std::make_unique<std::atomic<size_t>[]>(static_cast<size_t>(depth))) {}

Slot& Ring::acquire(size_t index, size_t bytes) {
  Slot& slot = slots_[index];
  release_after_copy(slot);
  if (!slot.host || slot.host->size() < bytes) {
    if (slot.host) {
      retired_bytes_ += slot.host->size();
      retired_.push_back(std::move(slot.host));
    }
    slot.host = backend_.alloc_host(grown_capacity(bytes));
    ++slot.grow_count;
    capacities_[index].store(slot.host->size(), std::memory_order_relaxed);
    size_t live = 0;
    for (const auto& s : slots_) live += s.host ? s.host->size() : 0;
    if (retired_bytes_ > live) release_retired();
  }
  return slot;
}

void Ring::release_retired() {
  retired_.clear();
  retired_bytes_ = 0;
}

void Ring::drain() {
  for (auto& slot : slots_) release_after_copy(slot);
}

size_t Ring::capacity(size_t index) const {
  return capacities_[index].load(std::memory_order_relaxed);
}

size_t Ring::total_growths() const {
  size_t n = 0;
  for (const auto& s : slots_) n += s.grow_count;
  return n;
}

}  // namespace prefetch
