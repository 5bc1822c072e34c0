// The worker ring's slot table: the control words and the state machine of the slots that
// DataLoader workers write batches into (prefetch/sources/worker_ring.py; docs/engine.md,
// "Workers write into a shared ring", says the same in prose and proves the bound).
//
// Memory. The table is a view over int64 words it does not allocate: a shared-memory tensor that
// the main process and every worker map, so a word changed by one process is seen by all. The
// first kControlWords words are control words (Control below), then one word per slot. Every
// change to a word is one atomic operation, so a process killed between two operations leaves a
// word that names it, never a held lock.
//
// A slot word is `generation << 32 | pid << 2 | state` (SlotWord). States and who moves them:
//
//   FREE(g)          nobody owns it. -> WRITING(g, pid): a worker's claim, a compare-and-swap
//                    that succeeds only from FREE(g) where g is the generation the worker read
//                    (announcement()).
//   WRITING(g, pid)  worker `pid` writes its batch into the slot. -> SENT(g, pid): the same worker's
//                    commit(), a compare-and-swap that succeeds only while the word is still its
//                    own; refused (the batch then goes the usual way) when a refill took the
//                    slot back, i.e. the main process judged `pid` dead. -> FREE(current
//                    generation): the same worker's abandon(), when its write failed (it still
//                    owns the word).
//   SENT(g, pid)     the batch is in the DataLoader's queues, then in the main process.
//                    -> LEASED(g): the main process's lease() when the batch arrives (only from
//                    SENT(g): a slot a refill or reclaim took back is not leased, see below).
//   LEASED(g)        the main process reads the slot: the engine's copy (CUDA), or the batch
//                    handed out is the slot itself (the CPU device). -> FREE(current generation):
//                    the SlotLease, exactly once, when it is released or destroyed, only in the
//                    process that leased it (a forked child's inherited copy frees nothing).
//   any              -> FREE(g + 1): refill(), the main process starting a new generation, except
//                    LEASED words and WRITING words of a live process other than itself
//                    (quarantined until a later refill finds their writer gone).
//   SENT(g' != g)    -> FREE(g): reclaim_stale() in the main process (its batch is never read, or
//                    read from an older block that no claim of generation g can reach).
//
// Generations. Only the main process starts one (refill: every epoch, and every new block), and
// a claim is valid only in the generation the worker read, so a slot an interrupted epoch left
// behind (a killed worker, `break`, an exception) can never be handed out twice: it comes back
// FREE in the next generation, and its old owner's commit is refused. A new block is announced
// by storing its slot size and version before the generation (announce_block); a worker reads the
// generation before the version (announcement), so a claim in the new generation always writes
// into the new block, and a claim in the old one into the old block, which the main process
// keeps until no batch can come from it. A worker's announcement is one epoch's: it reads the
// generation, the version, the serial and the accepting flag, then the generation again, and
// the main process stores the serial before an epoch's generation and the flag after it
// (open_epoch), so a worker of an ended iterator never claims in the next epoch's generation (a
// slot whose batch nobody would receive). A word is freed (a lease, an abandoned claim, a
// reclaim) into the generation current when it changes, and a refill stores its generation
// before it scans the words: a slot freed while a refill runs cannot be left FREE in a
// generation that is over, which no claim can take (free_into_current).
//
// The bound: a Prefetcher makes num_workers * prefetch_factor + depth + 2 slots (+ 3 on the CPU
// device), every batch the DataLoader can have dispatched and not yielded plus what the
// Prefetcher and a training loop hold; so a worker waits for a slot only when the consumer keeps
// more batches than that, and then gives up after its patience (claim()).
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

namespace prefetch {

enum class SlotState : int64_t { kFree = 0, kWriting = 1, kSent = 2, kLeased = 3 };

// One slot word, decoded.
struct SlotWord {
  static constexpr int64_t kMaxGeneration = (int64_t{1} << 31) - 1;
  static constexpr int64_t kMaxPid = (int64_t{1} << 30) - 1;

  int64_t generation = 0;
  int64_t pid = 0;
  SlotState state = SlotState::kFree;

  // Throws std::invalid_argument for a generation or pid outside the bits they have.
  int64_t encode() const;
  static SlotWord decode(int64_t word);
  bool operator==(const SlotWord& other) const {
    return generation == other.generation && pid == other.pid && state == other.state;
  }
};

// Totals since the table was made, summed over every worker.
struct SlotTableCounters {
  int64_t ring_batches = 0;  // committed into a slot
  int64_t fallbacks = 0;     // returned the usual way (no block, too large, no slot, refused, ...)
  int64_t write_ns = 0;      // workers writing batches into slots
  int64_t wait_ns = 0;       // workers waiting for a free slot
  int64_t slot_bytes = 0;    // of the announced block
};

// True when process `pid` exists (kill(pid, 0): a process of another user counts as alive).
bool process_alive(int64_t pid);

class SlotLease;

class SlotTable : public std::enable_shared_from_this<SlotTable> {
 public:
  // The control words, in front of the slot words.
  enum Control : size_t {
    kGeneration = 0,  // the generation a claim must match
    kAccepting = 1,   // 1 while a Prefetcher epoch reads the ring; workers fall back otherwise
    kVersion = 2,     // the block workers must write into
    kSlotBytes = 3,   // bytes per slot of that block
    kNeedBytes = 4,   // the largest batch a worker could not place
    kWaitNs = 5,
    kWriteNs = 6,
    kRingBatches = 7,
    kFallbacks = 8,
    kSerial = 9,      // the DataLoader iterator whose workers may claim
    kControlWords = 16,
  };
  static constexpr size_t words_for(size_t slots) { return kControlWords + slots; }

  // Over `words[0, n_words)`, which must hold words_for(slots) words, zeroed or left by an
  // earlier table over the same memory. `keep_alive` (may be null) is held as long as the table
  // and every lease of it: whatever keeps the mapping alive. Tables are made by std::make_shared
  // (a lease holds its table).
  SlotTable(int64_t* words, size_t n_words, size_t slots, std::shared_ptr<const void> keep_alive);
  SlotTable(const SlotTable&) = delete;
  SlotTable& operator=(const SlotTable&) = delete;

  size_t slots() const { return slots_; }
  // The bytes of each slot of a block of `block_bytes`: the one formula the workers and the main
  // process both use.
  size_t slot_bytes(size_t block_bytes) const { return block_bytes / slots_; }

  // --- a worker -----------------------------------------------------------------------------

  struct Announcement {
    int64_t generation = 0;
    int64_t version = 0;
  };
  // What the main process announced, read generation first (see the top of this file); empty
  // while the ring is paused or belongs to another DataLoader iterator than `serial`'s. One
  // epoch's announcement, even when read while the main process changes epochs.
  std::optional<Announcement> announcement(int64_t serial) const;

  struct Claim {
    int64_t slot = -1;     // WRITING(generation, pid) now, or -1
    bool starved = false;  // -1 because `patience` ran out with every slot taken
  };
  // Claims a slot FREE in `announced.generation` for `pid`. While every slot is taken it sleeps
  // (50 us, doubling to 2 ms) and tries again, until `patience` has passed (starved), or at once
  // gives up when the ring pauses, the generation or serial moves on, or getppid() is no longer
  // `parent_pid` (0: not checked): it never waits for an epoch that is over. The time is added to
  // the wait counter.
  Claim claim(const Announcement& announced, int64_t serial, int64_t pid,
              std::chrono::nanoseconds patience, int64_t parent_pid);
  // WRITING(generation, pid) -> SENT(generation, pid); false (counted as a fallback) when the
  // word is no longer that: the slot was taken back and its bytes may be another claim's now.
  bool commit(int64_t slot, int64_t generation, int64_t pid, std::chrono::nanoseconds write_time);
  // WRITING(generation, pid) -> FREE(current generation): the worker's own claim given back, when
  // its write failed (counted as a fallback).
  void abandon(int64_t slot, int64_t generation, int64_t pid);
  // A batch the worker returns the usual way; `needed_bytes` > 0 says how large a slot it needed.
  void fall_back(int64_t needed_bytes);

  // --- the main process ---------------------------------------------------------------------

  void pause();
  // A new epoch of DataLoader iterator `serial`: refill, then accept claims.
  void open_epoch(int64_t serial, int64_t self_pid, const std::function<bool(int64_t)>& alive);
  // A new block of `slot_bytes` per slot, made by the main process and sent to the workers: its
  // size and version, then a refill.
  void announce_block(int64_t version, int64_t slot_bytes, int64_t self_pid,
                      const std::function<bool(int64_t)>& alive);
  // Starts generation g + 1: every slot FREE in it but LEASED ones and WRITING ones of a live
  // process other than `self_pid` (`alive` answers). Returns the new generation.
  int64_t refill(int64_t self_pid, const std::function<bool(int64_t)>& alive);
  // SENT words of another generation than the current: FREE in it. Returns how many.
  size_t reclaim_stale();
  // A worker asked for more bytes than a slot has: a larger block is due.
  bool needs_growth() const;
  int64_t needed_bytes() const;
  // SENT(generation) -> LEASED(generation) for a batch that arrived; null when the word is not
  // SENT(generation) any more (a refill or reclaim took it back; the batch's bytes are still
  // intact: see docs/engine.md). Every 8th lease also reclaims stale words.
  std::shared_ptr<SlotLease> lease(size_t slot, int64_t generation);
  SlotTableCounters counters() const;

  // --- inspection (stats, tests) -------------------------------------------------------------
  int64_t generation() const;
  bool accepting() const;
  SlotWord word(size_t slot) const;

  // --- test hooks ---------------------------------------------------------------------------
  // Where a test runs the other side's next move in the middle of an operation, to force an
  // interleaving that threads reach only by chance (tests/cpp/slot_table_test.cpp). kAnnouncing:
  // announcement(), after it read the generation and the version, before the serial and the
  // accepting flag. kFreeing: a word freed into the current generation (a lease's release,
  // abandon(), reclaim_stale()), after that generation was read, before the word changes. Set it
  // before any other thread uses the table; unset (the default), each step tests an empty
  // std::function.
  enum class Step { kAnnouncing, kFreeing };
  void set_test_hook(std::function<void(Step)> hook) { test_hook_ = std::move(hook); }

 private:
  void step(Step s) const {
    if (test_hook_) test_hook_(s);
  }
  // `expected` (a word the caller owns: LEASED, its own WRITING, a stale SENT) -> FREE in the
  // current generation, followed into a newer one when a refill starts it meanwhile. False when
  // the word was not `expected`.
  bool free_into_current(int64_t* word, int64_t expected) const;
  std::function<void(Step)> test_hook_;
  friend class SlotLease;
  int64_t* control(Control c) const { return words_ + c; }
  int64_t* slot_word(size_t slot) const;
  void release_lease(size_t slot, int64_t leased_word) const;

  int64_t* words_;
  size_t slots_;
  std::shared_ptr<const void> keep_alive_;
  std::atomic<uint64_t> leases_{0};  // the main process's, for the reclaim every 8th lease
};

// The main process's hold on one LEASED slot: frees it (LEASED -> FREE in the generation current
// then) exactly once, when release() is called or the lease is destroyed, whichever comes first,
// and only in the process that leased it. Destruction frees too, so a batch dropped on any path
// (an exception, a cancelled epoch, a refused batch) gives its slot back without anyone
// remembering to. The engine calls release() once its copy has read the slot (CUDA); on the CPU
// device the deleter of the storage handed out as the batch does.
class SlotLease {
  struct Key {};

 public:
  SlotLease(Key, std::shared_ptr<const SlotTable> table, size_t slot, int64_t leased_word);
  ~SlotLease() { release(); }
  SlotLease(const SlotLease&) = delete;
  SlotLease& operator=(const SlotLease&) = delete;

  void release();
  bool released() const { return done_.load(); }
  size_t slot() const { return slot_; }

 private:
  friend class SlotTable;
  std::shared_ptr<const SlotTable> table_;
  size_t slot_;
  int64_t leased_;
  int64_t owner_;
  std::atomic<bool> done_{false};
};

}  // namespace prefetch
