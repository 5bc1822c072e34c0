// The main process's hold on one slot of the worker ring (docs/engine.md): the slot word is
// LEASED while the hold lives, and is freed — a compare-and-set from the lease's own word to FREE
// in the generation current at that moment — exactly once, when the hold is called or destroyed,
// whichever comes first. Destruction frees too, so a batch dropped on any path (an exception, a
// cancelled epoch, a traceback let go) gives its slot back without anyone remembering to.
// The CUDA copy path hands it to Engine::stage_packed, which calls it once the copy has read the
// slot; the CPU lease puts it in the deleter of the storage handed out as the batch.
#pragma once
#include <torch/extension.h>

#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "slot_words.h"

namespace prefetch {

class SlotRelease {
 public:
  // `words` is the shared slot table; `word` and `generation` point into it (checked by the
  // caller), and the table is kept alive as long as the hold.
  SlotRelease(at::Tensor words, int64_t* word, const int64_t* generation, int64_t leased_word)
      : words_(std::move(words)), word_(word), generation_(generation), leased_(leased_word),
        owner_(getpid()) {}
  ~SlotRelease() { release(); }
  SlotRelease(const SlotRelease&) = delete;
  SlotRelease& operator=(const SlotRelease&) = delete;

  void release() {
    if (done_.exchange(true)) return;
    if (getpid() != owner_) return;  // a forked child inherits the batch, not the lease
    const int64_t now = slot_words::load(generation_);
    slot_words::compare_and_set(word_, leased_, slot_words::encode(now, 0, slot_words::kFree));
  }
  bool released() const { return done_.load(); }

 private:
  at::Tensor words_;
  int64_t* word_;
  const int64_t* generation_;
  int64_t leased_;
  pid_t owner_;
  std::atomic<bool> done_{false};
};

}  // namespace prefetch
