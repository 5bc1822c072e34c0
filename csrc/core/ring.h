// The ring of slots a batch is collated into. Each slot owns a host buffer (pinned on CUDA) that
// is allocated once, grown when a batch does not fit and never shrunk, and the event of the last
// copy that read it: the buffer is rewritten only after that copy has completed.
//
// A buffer outgrown is not freed at once: freeing pinned memory (cudaFreeHost) waits for the whole
// device to go idle, training step included, and growth happens mid-epoch (a batch larger than any
// before). Outgrown buffers are retired and freed by release_retired(), which the engine calls at
// the start of the next epoch's first batch, or at once when they would hold more than the ring's
// live buffers (so the ring never holds more than twice its capacity).
#pragma once
#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "backend.h"

namespace prefetch {

struct Slot {
  std::unique_ptr<HostMemory> host;
  std::shared_ptr<Event> copied;      // the last copy out of `host`
  std::shared_ptr<void> destination;  // kept alive until `copied` completes
  size_t grow_count = 0;
};

class Ring {
 public:
  Ring(Backend& backend, int depth);
  // Waits for the last copy that read `slot` and makes its buffer hold at least `bytes`.
  Slot& acquire(size_t index, size_t bytes);
  // Waits for every copy still reading a slot (used before the buffers are freed).
  void drain();
  // Frees the buffers slots have outgrown (no copy reads them: acquire waited for it).
  void release_retired();
  size_t retired_buffers() const { return retired_.size(); }
  int depth() const { return static_cast<int>(slots_.size()); }
  // Safe to call from any thread while the producer uses the ring.
  size_t capacity(size_t index) const;
  size_t total_growths() const;

 private:
  Backend& backend_;
  std::vector<Slot> slots_;
  std::vector<std::unique_ptr<HostMemory>> retired_;
  size_t retired_bytes_ = 0;
  std::unique_ptr<std::atomic<size_t>[]> capacities_;  // mirrors slots_[i].host->size()
};

// Growth policy: some headroom so that varying batch sizes do not reallocate every time.
size_t grown_capacity(size_t needed);

}  // namespace prefetch
