#include "engine.h"

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
}  // namespace

Engine::Engine(std::unique_ptr<Backend> backend, EngineOptions options)
    : options_(validated(options)),
      backend_(std::move(backend)),
      ring_(*backend_, options_.depth),
      pool_(options_.num_threads) {}

Engine::~Engine() {
  cancel();
  // Wait for a producer still inside submit() to leave, then for every copy that reads a slot.
  std::lock_guard<std::mutex> producer(producer_mutex_);
  ring_.drain();
  try {
    backend_->record()->wait();
  } catch (const std::exception&) {
  }
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

StagedBatch Engine::stage(uint64_t token, const std::vector<LeafPlan>& leaves,
                          const DestinationAllocator& allocate) {
  std::lock_guard<std::mutex> producer(producer_mutex_);
  {
    auto t0 = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] {
      return token != generation_ || submitted_ - delivered_ < static_cast<uint64_t>(options_.depth);
    });
    if (token != generation_) throw Cancelled();
    stats_.producer_blocked_ns += since_ns(t0);
  }

  size_t total = 0;
  std::vector<LeafLayout> layout = pack_layout(leaves, &total);
  if (options_.max_batch_bytes != 0 && total > options_.max_batch_bytes) {
    throw CollateError("the batch needs " + std::to_string(total) +
                       " bytes, more than max_batch_bytes=" +
                       std::to_string(options_.max_batch_bytes));
  }

  StagedBatch staged;
  staged.token = token;
  size_t growths_before = ring_.total_growths();
  uint64_t collate_ns = 0;
  if (options_.collate_into_destination) {
    Destination dest = allocate(total == 0 ? 1 : total);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<CopyTask> tasks = plan_copies(leaves, layout, dest.data, options_.chunk_bytes);
    pool_.run(tasks.size(), [&](size_t i) { run_copy(tasks[i]); });
    collate_ns = since_ns(t0);
    staged.copied = backend_->record();
    staged.batch.destination = std::move(dest);
  } else {
    auto t0 = std::chrono::steady_clock::now();
    Slot& slot = collate_into_ring(leaves, layout, total);
    collate_ns = since_ns(t0);
    Destination dest = allocate(total == 0 ? 1 : total);
    if (total != 0) backend_->copy_async(dest.data, slot.host->data(), total);
    slot.copied = backend_->record();
    slot.destination = dest.owner;
    staged.copied = slot.copied;
    staged.batch.destination = std::move(dest);
  }
  staged.batch.leaves.reserve(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) {
    staged.batch.leaves.push_back(
        {layout[i].offset, layout[i].nbytes, leaves[i].dtype_code, leaves[i].shape});
  }

  std::lock_guard<std::mutex> lock(mutex_);
  if (token != generation_) throw Cancelled();
  // The sequence number (and the backpressure count) is taken now, so a staged batch counts
  // against `depth` until the consumer takes it.
  staged.batch.seq = submitted_++;
  ++stats_.submitted;
  stats_.bytes_collated += total;
  stats_.collate_ns += collate_ns;
  stats_.ring_growths += ring_.total_growths() - growths_before;
  return staged;
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

Slot& Engine::collate_into_ring(const std::vector<LeafPlan>& leaves,
                                const std::vector<LeafLayout>& layout, size_t total) {
  size_t index = cursor_++ % static_cast<size_t>(options_.depth);
  Slot& slot = ring_.acquire(index, total);
  std::vector<CopyTask> tasks = plan_copies(leaves, layout, slot.host->data(), options_.chunk_bytes);
  pool_.run(tasks.size(), [&](size_t i) { run_copy(tasks[i]); });
  return slot;
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
  return failed_ ? NextStatus::kFailed : NextStatus::kEnd;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace prefetch
