#include "engine.h"

#include <limits>
#include <mutex>
#include <string>

#include "errors.h"

namespace prefetch {

namespace {
EngineOptions validated(EngineOptions o) {
  if (o.depth < 1) throw std::invalid_argument("depth must be >= 1, got " + std::to_string(o.depth));
  if (o.num_threads < 1) {
    throw std::invalid_argument("num_threads must be >= 1, got " + std::to_string(o.num_threads));
  }
  return o;
}

uint64_t since_ns(std::chrono::steady_clock::time_point t0) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now() - t0)
                                   .count());
}

uint64_t between_ns(std::chrono::steady_clock::time_point t0, std::chrono::steady_clock::time_point t1) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
}

double seconds_between(std::chrono::steady_clock::time_point t0, std::chrono::steady_clock::time_point t1) {
  return std::chrono::duration<double>(t1 - t0).count();
}

}  // namespace

Engine::Engine(std::unique_ptr<Backend> backend, EngineOptions options)
    : options_(validated(options)),
      backend_(std::move(backend)),
      ring_(*backend_, options_.depth),
      pool_(options_.num_threads),
      through_ring_(!options_.collate_into_destination) {}

Engine::~Engine() {
  cancel();
  // Wait for a producer still inside submit() to leave, then for every copy that reads a slot.
  std::lock_guard<std::mutex> producer(producer_mutex_);
  ring_.drain();
  try {
    backend_->record()->wait();
  } catch (const std::exception&) {
  }
  release_packed(0);
}

uint64_t Engine::start_epoch() {
  std::deque<ReadyBatch> dropped;
  uint64_t token;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    token = ++generation_;
    dropped.swap(queue_);
    submitted_ = delivered_ = 0;
    finished_ = failed_ = false;
  }
  cv_.notify_all();
  return token;
}

void Engine::cancel() {
  std::deque<ReadyBatch> dropped;  // released outside the lock
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++generation_;
    dropped.swap(queue_);
  }
  cv_.notify_all();
}

void Engine::cancel(uint64_t token) {
  std::deque<ReadyBatch> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (token != generation_) return;
    ++generation_;
    dropped.swap(queue_);
  }
  cv_.notify_all();
}

uint64_t Engine::submit(uint64_t token, const std::vector<LeafPlan>& leaves,
                        const DestinationAllocator& allocate, const StreamWork& after_copy) {
  return publish(stage(token, leaves, allocate), after_copy);
}

uint64_t Engine::wait_for_room(uint64_t token) {
  auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] {
    return token != generation_ || submitted_ - delivered_ < static_cast<uint64_t>(options_.depth);
  });
  if (token != generation_) throw Cancelled();
  return since_ns(t0);
}

void Engine::check_batch_bytes(size_t total) const {
  if (options_.max_batch_bytes != 0 && total > options_.max_batch_bytes) {
    throw CollateError("the batch needs " + std::to_string(total) +
                       " bytes, more than max_batch_bytes=" +
                       std::to_string(options_.max_batch_bytes));
  }
}

void Engine::record_staged(StagedBatch* staged, uint64_t token, size_t total, uint64_t blocked_ns,
                           const StageTimes& times, size_t growths) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (token != generation_) throw Cancelled();
  // The sequence number (and the backpressure count) is taken now, so a staged batch counts
  // against `depth` until the consumer takes it.
  staged->batch.seq = submitted_++;
  ++stats_.submitted;
  stats_.bytes_collated += total;
  stats_.collate_ns += times.collate_ns;
  stats_.slot_wait_ns += times.slot_wait_ns;
  stats_.allocate_ns += times.allocate_ns;
  stats_.producer_blocked_ns += blocked_ns;
  stats_.ring_growths += growths;
}

StagedBatch Engine::stage(uint64_t token, const std::vector<LeafPlan>& leaves,
                          const DestinationAllocator& allocate) {
  std::lock_guard<std::mutex> producer(producer_mutex_);
  const uint64_t blocked_ns = wait_for_room(token);
  // Once there is room, and only then: the copies below read the sources at once.
  check_mapped(leaves);
  if (token != last_staged_token_) {
    // An epoch's first batch: where freeing what the ring outgrew last epoch costs the least.
    ring_.release_retired();
    last_staged_token_ = token;
  }

  size_t total = 0;
  std::vector<LeafLayout> layout = pack_layout(leaves, &total);
  check_batch_bytes(total);

  StagedBatch staged;
  staged.token = token;
  size_t growths_before = ring_.total_growths();
  StageTimes times;
  if (!through_ring_) {
    auto t0 = std::chrono::steady_clock::now();
    Destination dest = allocate(total == 0 ? 1 : total);
    times.allocate_ns = since_ns(t0);
    t0 = std::chrono::steady_clock::now();
    std::vector<CopyTask> tasks = plan_copies(leaves, layout, dest.data, options_.chunk_bytes);
    pool_.run(tasks.size(), [&](size_t i) { run_copy(tasks[i]); });
    times.collate_ns = since_ns(t0);
    staged.copied = backend_->record();
    staged.batch.destination = std::move(dest);
  } else {
    {
      std::lock_guard<std::mutex> lock(timeline_mutex_);
      times.timed = timeline_capacity_ != 0;
    }
    const int index = static_cast<int>(cursor_++ % static_cast<size_t>(options_.depth));
    // The slot is free once the last copy that read it has completed: the wait is for the copy
    // engine, timed apart from the collation.
    times.wait_start = std::chrono::steady_clock::now();
    Slot& slot = ring_.acquire(static_cast<size_t>(index), total);
    times.collate_start = std::chrono::steady_clock::now();
    times.slot_wait_ns = between_ns(times.wait_start, times.collate_start);
    std::vector<CopyTask> tasks = plan_copies(leaves, layout, slot.host->data(), options_.chunk_bytes);
    pool_.run(tasks.size(), [&](size_t i) { run_copy(tasks[i]); });
    times.collate_end = std::chrono::steady_clock::now();
    times.collate_ns = between_ns(times.collate_start, times.collate_end);
    Destination dest = allocate(total == 0 ? 1 : total);
    times.allocate_ns = since_ns(times.collate_end);
    if (total != 0) enqueue_copy(dest.data, slot.host->data(), total, &times);
    times.enqueued = std::chrono::steady_clock::now();
    slot.copied = backend_->record();
    slot.destination = dest.owner;
    staged.copied = slot.copied;
    staged.batch.destination = std::move(dest);
    note_copy(index, total, times);
  }
  staged.batch.leaves.reserve(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) {
    staged.batch.leaves.push_back(
        {layout[i].offset, layout[i].nbytes, leaves[i].dtype_code, leaves[i].shape});
  }
  record_staged(&staged, token, total, blocked_ns, times, ring_.total_growths() - growths_before);
  return staged;
}

namespace {
// Runs a PackedSource's release when the engine leaves without having handed it on to a copy.
class ReleaseUnlessTaken {
 public:
  explicit ReleaseUnlessTaken(std::function<void()>* release) : release_(release) {}
  ~ReleaseUnlessTaken() {
    if (!*release_) return;
    try {
      (*release_)();
    } catch (...) {  // a release frees a slot word: it has nothing to throw, and must not here
    }
  }
  ReleaseUnlessTaken(const ReleaseUnlessTaken&) = delete;
  ReleaseUnlessTaken& operator=(const ReleaseUnlessTaken&) = delete;

 private:
  std::function<void()>* release_;
};
}  // namespace

StagedBatch Engine::stage_packed(uint64_t token, PackedSource source,
                                 const DestinationAllocator& allocate) {
  ReleaseUnlessTaken guard(&source.release);
  for (const LeafOut& leaf : source.leaves) {
    if (leaf.offset > source.bytes || leaf.nbytes > source.bytes - leaf.offset) {
      throw std::invalid_argument("prefetch: a packed leaf [" + std::to_string(leaf.offset) + ", +" +
                                  std::to_string(leaf.nbytes) + ") lies outside its " +
                                  std::to_string(source.bytes) + " bytes");
    }
  }
  std::lock_guard<std::mutex> producer(producer_mutex_);
  const uint64_t blocked_ns = wait_for_room(token);
  const size_t total = source.bytes;
  check_batch_bytes(total);
  StageTimes times;
  {
    std::lock_guard<std::mutex> lock(timeline_mutex_);
    times.timed = timeline_capacity_ != 0;
  }
  // With this one, at most depth + 1 sources are held (docs/engine.md counts on it). Waiting for
  // the oldest one's copy is this path's wait for the copy engine.
  times.wait_start = std::chrono::steady_clock::now();
  release_packed(static_cast<size_t>(options_.depth));
  times.collate_start = times.collate_end = std::chrono::steady_clock::now();
  times.slot_wait_ns = between_ns(times.wait_start, times.collate_start);

  StagedBatch staged;
  staged.token = token;
  Destination dest = allocate(total == 0 ? 1 : total);
  times.allocate_ns = since_ns(times.collate_end);
  if (total != 0) enqueue_copy(dest.data, source.data, total, &times);
  times.enqueued = std::chrono::steady_clock::now();
  staged.copied = backend_->record();
  note_copy(-1, total, times);
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    pending_.push_back({staged.copied, std::move(source.owner), dest.owner, std::move(source.release)});
    source.release = nullptr;
  }
  staged.batch.destination = std::move(dest);
  staged.batch.leaves = std::move(source.leaves);
  record_staged(&staged, token, 0, blocked_ns, times, 0);  // nothing collated: the copy only
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.packed_bytes += total;
  }
  return staged;
}

void Engine::release_packed(size_t keep) {
  while (true) {
    PendingRelease oldest;
    {
      std::lock_guard<std::mutex> lock(pending_mutex_);
      if (pending_.empty()) return;
      bool done = true;
      try {
        done = pending_.front().copied->complete();
      } catch (...) {  // a failed copy reads nothing any more; its batch reports the failure
      }
      if (!done && pending_.size() <= keep) return;
      oldest = std::move(pending_.front());
      pending_.pop_front();
    }
    try {
      oldest.copied->wait();
    } catch (...) {  // as above
    }
    try {
      if (oldest.release) oldest.release();
    } catch (...) {
    }
  }
}

size_t Engine::packed_in_flight() const {
  std::lock_guard<std::mutex> lock(pending_mutex_);
  return pending_.size();
}

uint64_t Engine::publish(StagedBatch staged, const StreamWork& after_copy) {
  if (after_copy) backend_->enqueue(after_copy);
  staged.batch.ready = backend_->record();
  const uint64_t seq = staged.batch.seq;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (staged.token != generation_) throw Cancelled();
    queue_.push_back(std::move(staged.batch));
  }
  cv_.notify_all();
  return seq;
}

void Engine::enqueue_copy(std::byte* dest, const std::byte* src, size_t bytes, StageTimes* times) {
  if (times->timed) times->copy_start = backend_->record_timed();
  backend_->copy_async(dest, src, bytes);
}

void Engine::note_copy(int slot, size_t bytes, const StageTimes& times) {
  if (!times.timed || !times.copy_start) return;  // not recording, or nothing was copied
  PendingCopy pending;
  pending.start = times.copy_start;
  pending.end = backend_->record_timed();
  pending.record.slot = slot;
  pending.record.bytes = bytes;
  std::lock_guard<std::mutex> lock(timeline_mutex_);
  if (timeline_capacity_ == 0) return;  // stopped meanwhile
  const auto at = [&](std::chrono::steady_clock::time_point t) {
    return seconds_between(timeline_host_origin_, t);
  };
  pending.record.batch = timeline_batches_++;
  pending.record.wait_start_s = at(times.wait_start);
  pending.record.collate_start_s = at(times.collate_start);
  pending.record.collate_end_s = at(times.collate_end);
  pending.record.enqueued_s = at(times.enqueued);
  timeline_.push_back(std::move(pending));
  while (timeline_.size() > timeline_capacity_) timeline_.pop_front();
}

void Engine::record_copies(size_t capacity) {
  std::shared_ptr<Event> origin;
  std::chrono::steady_clock::time_point host_origin{};
  if (capacity != 0) {
    // The two clocks' common zero: the origin event, then the host's time once it has completed.
    origin = backend_->record_timed();
    origin->wait();
    host_origin = std::chrono::steady_clock::now();
  }
  std::deque<PendingCopy> dropped;  // its events are destroyed outside the lock
  std::lock_guard<std::mutex> lock(timeline_mutex_);
  dropped.swap(timeline_);
  timeline_capacity_ = capacity;
  timeline_batches_ = 0;
  timeline_origin_ = std::move(origin);
  timeline_host_origin_ = host_origin;
}

std::vector<CopyRecord> Engine::copy_timeline() {
  std::deque<PendingCopy> copies;
  std::shared_ptr<Event> origin;
  {
    std::lock_guard<std::mutex> lock(timeline_mutex_);
    copies = timeline_;
    origin = timeline_origin_;
  }
  std::vector<CopyRecord> out;
  out.reserve(copies.size());
  for (PendingCopy& c : copies) {
    c.record.copy_start_s = backend_->elapsed_s(*origin, *c.start);
    c.record.copy_end_s = backend_->elapsed_s(*origin, *c.end);
    out.push_back(c.record);
  }
  return out;
}

void Engine::set_through_ring(bool through_ring) {
  std::lock_guard<std::mutex> producer(producer_mutex_);
  through_ring_ = through_ring;
}

void Engine::finish(uint64_t token, bool failed) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (token != generation_) return;
    finished_ = true;
    failed_ = failed;
  }
  cv_.notify_all();
}

NextStatus Engine::next(uint64_t token, ReadyBatch* out, std::chrono::nanoseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto ready = [&] { return token != generation_ || !queue_.empty() || finished_; };
  if (timeout.count() < 0) {
    cv_.wait(lock, ready);
  } else if (!cv_.wait_for(lock, timeout, ready)) {
    return NextStatus::kTimeout;
  }
  if (token != generation_) return NextStatus::kCancelled;
  if (!queue_.empty()) {
    *out = std::move(queue_.front());
    queue_.pop_front();
    ++delivered_;
    ++stats_.delivered;
    lock.unlock();
    cv_.notify_all();
    return NextStatus::kBatch;
  }
  const NextStatus end = failed_ ? NextStatus::kFailed : NextStatus::kEnd;
  lock.unlock();
  // The epoch is over: give back every packed source whose copy has completed (a consumer that
  // waited for its batches, as the host does, leaves none held) instead of at the next batch.
  release_packed(std::numeric_limits<size_t>::max());
  return end;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace prefetch
