#include "slot_table.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <string>
#include <thread>

// GCC/Clang __atomic builtins rather than std::atomic: the words live in memory mapped by
// several processes (a torch shared-memory tensor), not in C++ objects; 64-bit atomics are
// lock-free and address-free on every platform prefetch builds for, which is what makes them
// valid across processes.
static_assert(__atomic_always_lock_free(sizeof(int64_t), 0), "64-bit atomics must be lock-free");

namespace prefetch {
namespace {

// Sequentially consistent, every one: the refill stores the generation and then reads each word,
// while a release (or an abandon, a reclaim) changes a word and then reads the generation. With
// acquire/release alone both could read the old value (a store followed by a load of another
// word may be reordered), and a slot would be freed into a generation that is already over
// (free_into_current). Seq-cst also orders a claimer's writes into the slot after the main
// process's release of it (the copy out of it has finished reading), and a worker's writes before
// its SENT word, as acquire/release did.
int64_t load(const int64_t* word) { return __atomic_load_n(word, __ATOMIC_SEQ_CST); }
void store(int64_t* word, int64_t value) { __atomic_store_n(word, value, __ATOMIC_SEQ_CST); }
bool compare_and_set(int64_t* word, int64_t expected, int64_t desired) {
  return __atomic_compare_exchange_n(word, &expected, desired, false, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST);
}
void add(int64_t* word, int64_t delta) { __atomic_add_fetch(word, delta, __ATOMIC_SEQ_CST); }
void raise_to(int64_t* word, int64_t value) {
  int64_t current = load(word);
  while (current < value &&
         !__atomic_compare_exchange_n(word, &current, value, false, __ATOMIC_SEQ_CST,
                                      __ATOMIC_SEQ_CST)) {
  }
}

int64_t free_word(int64_t generation) { return SlotWord{generation, 0, SlotState::kFree}.encode(); }

int64_t elapsed_ns(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - since)
      .count();
}

}  // namespace

int64_t SlotWord::encode() const {
  if (generation < 0 || generation > kMaxGeneration) {
    throw std::invalid_argument("prefetch: slot generation " + std::to_string(generation) +
                                " outside [0, 2^31)");
  }
  if (pid < 0 || pid > kMaxPid) {
    throw std::invalid_argument("prefetch: pid " + std::to_string(pid) + " outside [0, 2^30)");
  }
  return generation << 32 | pid << 2 | static_cast<int64_t>(state);
}

SlotWord SlotWord::decode(int64_t word) {
  return {word >> 32, (word >> 2) & kMaxPid, static_cast<SlotState>(word & 3)};
}

bool process_alive(int64_t pid) {
  if (pid <= 0) return false;
  return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

SlotTable::SlotTable(int64_t* words, size_t n_words, size_t slots,
                     std::shared_ptr<const void> keep_alive)
    : words_(words), slots_(slots), keep_alive_(std::move(keep_alive)) {
  if (words == nullptr || slots == 0 || n_words < words_for(slots)) {
    throw std::invalid_argument("prefetch: a slot table of " + std::to_string(slots) +
                                " slots needs " + std::to_string(words_for(slots)) +
                                " words, got " + std::to_string(n_words) +
                                (words == nullptr ? " at a null address" : ""));
  }
}

int64_t* SlotTable::slot_word(size_t slot) const {
  if (slot >= slots_) {
    throw std::out_of_range("prefetch: slot " + std::to_string(slot) + " of a table of " +
                            std::to_string(slots_) + " slots");
  }
  return words_ + kControlWords + slot;
}

// --- a worker -------------------------------------------------------------------------------

std::optional<SlotTable::Announcement> SlotTable::announcement(int64_t serial) const {
  // The generation before everything else, and again after: the main process stores the serial
  // before a new epoch's generation and the accepting flag after it (open_epoch), so a read
  // that sees one generation at both ends, the flag set and `serial` saw one epoch's
  // announcement, never an ended epoch's iterator with the next epoch's generation (its claim
  // would take a slot whose batch nobody receives) or the reverse. Retried while a refill moves
  // the generation under it (a new block mid-epoch), so a worker does not fall back for that.
  while (true) {
    Announcement a;
    a.generation = load(control(kGeneration));  // before the version: see the top of slot_table.h
    a.version = load(control(kVersion));
    step(Step::kAnnouncing);
    if (load(control(kSerial)) != serial || load(control(kAccepting)) == 0) return std::nullopt;
    if (load(control(kGeneration)) == a.generation) return a;
  }
}

SlotTable::Claim SlotTable::claim(const Announcement& announced, int64_t serial, int64_t pid,
                                  std::chrono::nanoseconds patience, int64_t parent_pid) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t free = free_word(announced.generation);
  const int64_t mine = SlotWord{announced.generation, pid, SlotState::kWriting}.encode();
  auto pause = std::chrono::microseconds(50);
  Claim out;
  while (true) {
    for (size_t i = 0; i < slots_; ++i) {
      if (compare_and_set(slot_word(i), free, mine)) {
        out.slot = static_cast<int64_t>(i);
        break;
      }
    }
    if (out.slot >= 0) break;
    const bool moved_on = load(control(kAccepting)) == 0 ||
                          load(control(kGeneration)) != announced.generation ||
                          load(control(kSerial)) != serial ||
                          (parent_pid != 0 && static_cast<int64_t>(getppid()) != parent_pid);
    if (moved_on) break;
    if (std::chrono::steady_clock::now() - start >= patience) {
      out.starved = true;  // the consumer holds the slots
      break;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(2 * pause, std::chrono::microseconds(2000));
  }
  add(control(kWaitNs), elapsed_ns(start));
  return out;
}

bool SlotTable::commit(int64_t slot, int64_t generation, int64_t pid,
                       std::chrono::nanoseconds write_time) {
  int64_t* word = slot_word(static_cast<size_t>(slot));
  const bool done = compare_and_set(word, SlotWord{generation, pid, SlotState::kWriting}.encode(),
                                    SlotWord{generation, pid, SlotState::kSent}.encode());
  add(control(kWriteNs), write_time.count());
  add(control(done ? kRingBatches : kFallbacks), 1);
  return done;
}

void SlotTable::abandon(int64_t slot, int64_t generation, int64_t pid) {
  // Into the current generation: a refill may have kept this claim (a live writer) and moved on.
  free_into_current(slot_word(static_cast<size_t>(slot)),
                    SlotWord{generation, pid, SlotState::kWriting}.encode());
  add(control(kFallbacks), 1);
}

void SlotTable::fall_back(int64_t needed_bytes) {
  if (needed_bytes > 0) raise_to(control(kNeedBytes), needed_bytes);
  add(control(kFallbacks), 1);
}

// --- the main process -----------------------------------------------------------------------

void SlotTable::pause() { store(control(kAccepting), 0); }

void SlotTable::open_epoch(int64_t serial, int64_t self_pid,
                           const std::function<bool(int64_t)>& alive) {
  store(control(kSerial), serial);
  refill(self_pid, alive);
  store(control(kAccepting), 1);
}

void SlotTable::announce_block(int64_t version, int64_t slot_bytes, int64_t self_pid,
                               const std::function<bool(int64_t)>& alive) {
  // Size and version before the generation (refill stores it, then scans): see slot_table.h.
  store(control(kSlotBytes), slot_bytes);
  store(control(kVersion), version);
  refill(self_pid, alive);
}

int64_t SlotTable::refill(int64_t self_pid, const std::function<bool(int64_t)>& alive) {
  const int64_t generation = load(control(kGeneration)) + 1;
  const int64_t free = free_word(generation);
  // The generation first, then the words: a word freed meanwhile into the old generation is
  // either seen here (still to be scanned) or its freer sees the new generation and moves it on
  // (free_into_current). No claim can take a word before the scan makes it FREE(generation).
  store(control(kGeneration), generation);
  for (size_t i = 0; i < slots_; ++i) {
    int64_t* word = slot_word(i);
    // A compare-and-set, not a store: a claim that lands between the load and the change is
    // then seen (a live writer, kept) instead of overwritten under its writer.
    for (int64_t current = load(word);; current = load(word)) {
      const SlotWord w = SlotWord::decode(current);
      if (w.state == SlotState::kLeased) break;  // its lease frees it, into a later generation
      if (w.state == SlotState::kWriting && w.generation > 0 && w.pid != self_pid &&
          alive(w.pid)) {
        break;  // quarantined: a live worker may still be writing it
      }
      if (compare_and_set(word, current, free)) break;
    }
  }
  return generation;
}

size_t SlotTable::reclaim_stale() {
  const int64_t generation = load(control(kGeneration));
  size_t reclaimed = 0;
  for (size_t i = 0; i < slots_; ++i) {
    int64_t* word = slot_word(i);
    const int64_t current = load(word);
    const SlotWord w = SlotWord::decode(current);
    if (w.state == SlotState::kSent && w.generation != generation &&
        free_into_current(word, current)) {
      ++reclaimed;
    }
  }
  return reclaimed;
}

bool SlotTable::free_into_current(int64_t* word, int64_t expected) const {
  bool freed = false;
  while (true) {
    const int64_t generation = load(control(kGeneration));
    step(Step::kFreeing);
    if (!compare_and_set(word, expected, free_word(generation))) {
      // First pass: no longer the word the caller owned. Later passes: a refill's scan moved
      // it on already, or a worker still in the old generation claimed it (its batch is then
      // SENT in an older generation: leased or reclaimed as any other).
      return freed;
    }
    freed = true;
    // A refill that stored a newer generation before this change scans the word after it (and
    // moves it on itself), or this load sees that generation (both sequentially consistent):
    // either way the word does not stay FREE in a generation no claim can take any more.
    if (load(control(kGeneration)) == generation) return true;
    expected = free_word(generation);
  }
}

bool SlotTable::needs_growth() const {
  return load(control(kNeedBytes)) > load(control(kSlotBytes));
}

int64_t SlotTable::needed_bytes() const { return load(control(kNeedBytes)); }

std::shared_ptr<SlotLease> SlotTable::lease(size_t slot, int64_t generation) {
  int64_t* word = slot_word(slot);
  if (leases_.fetch_add(1) % 8 == 7) reclaim_stale();
  const int64_t leased = SlotWord{generation, 0, SlotState::kLeased}.encode();
  for (int64_t current = load(word);; current = load(word)) {
    const SlotWord w = SlotWord::decode(current);
    if (w.state != SlotState::kSent || w.generation != generation) return nullptr;
    if (compare_and_set(word, current, leased)) break;
  }
  return std::make_shared<SlotLease>(SlotLease::Key{}, shared_from_this(), slot, leased);
}

void SlotTable::release_lease(size_t slot, int64_t leased_word) const {
  free_into_current(slot_word(slot), leased_word);
}

SlotTableCounters SlotTable::counters() const {
  SlotTableCounters c;
  c.ring_batches = load(control(kRingBatches));
  c.fallbacks = load(control(kFallbacks));
  c.write_ns = load(control(kWriteNs));
  c.wait_ns = load(control(kWaitNs));
  c.slot_bytes = load(control(kSlotBytes));
  return c;
}

int64_t SlotTable::generation() const { return load(control(kGeneration)); }
bool SlotTable::accepting() const { return load(control(kAccepting)) != 0; }
SlotWord SlotTable::word(size_t slot) const { return SlotWord::decode(load(slot_word(slot))); }

// --- the lease ------------------------------------------------------------------------------

SlotLease::SlotLease(Key, std::shared_ptr<const SlotTable> table, size_t slot, int64_t leased_word)
    : table_(std::move(table)), slot_(slot), leased_(leased_word), owner_(getpid()) {}

void SlotLease::release() {
  if (done_.exchange(true)) return;
  if (static_cast<int64_t>(getpid()) != owner_) return;  // a forked child inherits no lease
  table_->release_lease(slot_, leased_);
}

}  // namespace prefetch
