// The engine: a producer submits batches (collated by a thread pool into the ring, copied on the
// copy stream), a consumer takes them in order. Epochs are identified by tokens so that a stale
// producer from a cancelled epoch can never deliver into the next one.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "backend.h"
#include "collate.h"
#include "ring.h"
#include "thread_pool.h"

namespace prefetch {

// Where a batch's packed bytes land on the device. `owner` keeps the memory alive; the engine
// holds it until the copy into it has completed, the consumer for as long as it likes.
struct Destination {
  std::byte* data = nullptr;
  std::shared_ptr<void> owner;
};
using DestinationAllocator = std::function<Destination(size_t bytes)>;
using StreamWork = std::function<void(void* stream)>;

struct LeafOut {
  size_t offset = 0;
  size_t nbytes = 0;
  int64_t dtype_code = 0;
  std::vector<int64_t> shape;
};

struct ReadyBatch {
  uint64_t seq = 0;
  Destination destination;
  std::vector<LeafOut> leaves;
  std::shared_ptr<Event> ready;  // the copy (and any stream work after it) has completed
};

// A batch collated and copied (or being copied) but not yet visible to the consumer: the
// producer may enqueue more work on the copy stream (a transform) before publishing it.
struct StagedBatch {
  uint64_t token = 0;
  ReadyBatch batch;                // `ready` is recorded by publish()
  std::shared_ptr<Event> copied;   // the copy into batch.destination
};

// A batch that arrives already packed in host memory the engine did not collate: a slot of the
// worker ring (docs/engine.md). The engine copies it to the destination in one copy on the copy
// stream and calls `release` once that copy no longer reads `data` — and on every path where it
// never starts (a cancelled epoch, a refused batch).
struct PackedSource {
  const std::byte* data = nullptr;
  size_t bytes = 0;
  std::vector<LeafOut> leaves;     // where each leaf lies within `data`
  std::shared_ptr<void> owner;     // keeps `data` alive until the copy has completed
  std::function<void()> release;   // may be empty
};

struct EngineOptions {
  int depth = 3;
  int num_threads = 1;
  size_t max_batch_bytes = 0;  // 0: no cap
  size_t chunk_bytes = size_t{1} << 20;
  // Collate straight into the destination and skip the ring and the copy. Only for destinations
  // in host memory that the pool may write (the CPU device): there the ring would make every
  // byte move twice. Backpressure (depth) is unchanged; the ring then stays unused.
  bool collate_into_destination = false;
};

// Counters since the engine was made. Each is named as the Prefetcher's stats() key it becomes
// (times in ns here, in seconds there, `_ns` → `_s`), so the binding converts and renames nothing.
struct EngineStats {
  uint64_t submitted = 0;
  uint64_t delivered = 0;
  uint64_t bytes_collated = 0;
  uint64_t collate_ns = 0;           // time the pool spent collating (the copy's enqueue and the
                                     // waits below not included)
  uint64_t slot_wait_ns = 0;         // producer time waiting for a ring slot's last copy (packed
                                     // batches: for the oldest held source's copy), i.e. for the
                                     // copy engine
  uint64_t allocate_ns = 0;          // producer time in the destination allocator
  uint64_t producer_blocked_ns = 0;  // producer time blocked because `depth` batches were waiting
  uint64_t ring_growths = 0;
  uint64_t packed_bytes = 0;         // copied from packed sources (stage_packed), not collated
};

// One batch's copy on the copy timeline (Engine::record_copies). Times are seconds since the
// timeline started: the producer's on the host clock, the copy's on the copy stream's (CUDA timing
// events; the host backend's stream thread). On the host backend both are one clock; on CUDA the
// host origin is taken once the origin event has completed, so the two agree within that wait's
// wake-up (tens of microseconds).
struct CopyRecord {
  uint64_t batch = 0;      // staged batches since the timeline started, from 0
  int slot = -1;           // the ring slot it was collated into; -1: a packed source
  size_t bytes = 0;
  double wait_start_s = 0;     // host: the producer began waiting for the slot
  double collate_start_s = 0;  // host: the slot was free and the collation began
  double collate_end_s = 0;    // host: the collation ended
  double enqueued_s = 0;       // host: the destination was allocated and the copy enqueued
  double copy_start_s = 0;     // stream: the copy began (the stream reached it)
  double copy_end_s = 0;       // stream: the copy ended
};

// What Engine::next found: a batch (in `out`); the epoch's end, after every batch (kFailed: the
// producer called finish(token, true)); nothing within the timeout; or an epoch that is no longer
// current. The binding exports it as _C.NextStatus (BATCH, END, FAILED, TIMEOUT, CANCELLED).
enum class NextStatus { kBatch, kEnd, kFailed, kTimeout, kCancelled };

class Engine {
 public:
  Engine(std::unique_ptr<Backend> backend, EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Starts a new epoch (dropping anything left of the previous one) and returns its token.
  uint64_t start_epoch();

  // Producer side. Blocks while `depth` batches wait for the consumer, collates `leaves` into a
  // ring slot, enqueues the copy into allocate(total) and then `after_copy` on the copy stream.
  // Returns the batch's sequence number within the epoch. Throws Cancelled if the epoch ends.
  uint64_t submit(uint64_t token, const std::vector<LeafPlan>& leaves,
                  const DestinationAllocator& allocate, const StreamWork& after_copy = {});
  // submit() in two steps, so that work can be enqueued on the copy stream (after the copy,
  // before "ready") between them. One staged batch at a time; it counts against `depth`.
  StagedBatch stage(uint64_t token, const std::vector<LeafPlan>& leaves,
                    const DestinationAllocator& allocate);
  uint64_t publish(StagedBatch staged, const StreamWork& after_copy = {});
  // stage() for a packed batch: no collation, one copy from `source.data`. Sources whose copy
  // may still be running are held (and released in order as their copies complete) up to
  // `depth + 1` at a time: the worker ring's slot bound counts on it.
  StagedBatch stage_packed(uint64_t token, PackedSource source, const DestinationAllocator& allocate);

  // No more batches in this epoch; `failed` tells the consumer the producer hit an error.
  void finish(uint64_t token, bool failed);

  // Consumer side: the next batch in submission order. A negative timeout waits forever.
  NextStatus next(uint64_t token, ReadyBatch* out, std::chrono::nanoseconds timeout);

  // Ends the current epoch: wakes the producer (submit throws Cancelled) and the consumer.
  void cancel();
  // The same, but only if `token` is still the current epoch (a stale iterator's cleanup must
  // not end a newer epoch).
  void cancel(uint64_t token);

  Backend& backend() { return *backend_; }
  EngineStats stats() const;

  // Starts a new copy timeline that keeps the last `capacity` copies (0: stop recording); each
  // recorded copy costs two timed events. Any thread.
  void record_copies(size_t capacity);
  // The timeline's records, oldest first; waits for their copies to complete.
  std::vector<CopyRecord> copy_timeline();

  // Test hook (the host backend's copy engine model, _C._testing.model_copy_engine): route the
  // batches through the ring and the copy stream even where the options collate straight into the
  // destination (the CPU device). Waits for a producer inside stage() to leave.
  void set_through_ring(bool through_ring);
  int depth() const { return options_.depth; }
  int num_threads() const { return pool_.num_threads(); }
  size_t slot_capacity(size_t index) const { return ring_.capacity(index); }
  // Buffers the ring has outgrown and not freed yet (see ring.h); producer thread only.
  size_t retired_buffers() const { return ring_.retired_buffers(); }
  // Packed sources whose release has not run yet (their copy may still read them).
  size_t packed_in_flight() const;

 private:
  EngineOptions options_;
  std::unique_ptr<Backend> backend_;
  Ring ring_;
  ThreadPool pool_;

  // What the producer measured of one batch's collation and copy (stats and the timeline).
  struct StageTimes {
    std::chrono::steady_clock::time_point wait_start, collate_start, collate_end, enqueued;
    uint64_t slot_wait_ns = 0, collate_ns = 0, allocate_ns = 0;
    bool timed = false;                            // the timeline records this batch
    std::shared_ptr<Event> copy_start;             // timed, before the copy, then
  };
  // Enqueues the copy, its timed start event first when the timeline records.
  void enqueue_copy(std::byte* dest, const std::byte* src, size_t bytes, StageTimes* times);
  // Adds a copy to the timeline (when it records).
  void note_copy(int slot, size_t bytes, const StageTimes& times);

  // Blocks (GIL-free, producer side) until every packed source, or all but `keep`, is released.
  void release_packed(size_t keep);
  uint64_t wait_for_room(uint64_t token);  // the depth backpressure; returns ns blocked
  void check_batch_bytes(size_t total) const;
  // Numbers a staged batch and counts it, unless its epoch has ended (Cancelled).
  void record_staged(StagedBatch* staged, uint64_t token, size_t total, uint64_t blocked_ns,
                     const StageTimes& times, size_t growths);

  struct PendingRelease {
    std::shared_ptr<Event> copied;
    std::shared_ptr<void> source;       // read by the copy
    std::shared_ptr<void> destination;  // written by the copy, even if the batch is dropped
    std::function<void()> release;
  };

  std::mutex producer_mutex_;  // one submit at a time owns the ring
  size_t cursor_ = 0;          // next ring slot (guarded by producer_mutex_)
  uint64_t last_staged_token_ = 0;  // the epoch of the last stage() (guarded by producer_mutex_)
  bool through_ring_;          // !options_.collate_into_destination, or set_through_ring's (same)

  // The copy timeline (record_copies): its origin and the records, the last `capacity` kept.
  struct PendingCopy {
    CopyRecord record;  // the host times filled in, the stream's when read
    std::shared_ptr<Event> start, end;
  };
  std::mutex timeline_mutex_;
  size_t timeline_capacity_ = 0;  // 0: not recording
  uint64_t timeline_batches_ = 0;
  std::shared_ptr<Event> timeline_origin_;
  std::chrono::steady_clock::time_point timeline_host_origin_;
  std::deque<PendingCopy> timeline_;

  mutable std::mutex pending_mutex_;
  std::deque<PendingRelease> pending_;  // oldest first (copy stream order)

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  std::deque<ReadyBatch> queue_;
  uint64_t submitted_ = 0;  // this epoch
  uint64_t delivered_ = 0;  // this epoch
  bool finished_ = false;
  bool failed_ = false;
  EngineStats stats_;
};

}  // namespace prefetch
