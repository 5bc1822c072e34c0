// Batches for the engine tests: every byte derives from a tag (epoch and sequence number), so a
// delivered batch is checked against values computed independently of the collation code. Also
// EngineHarness, which keeps a broken engine from hanging a test. Not a test file itself.
#pragma once
#include <gtest/gtest.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine.h"
#include "errors.h"
#include "test_util.h"

namespace prefetch {
namespace test {

using namespace std::chrono_literals;
using prefetch_test::pattern_byte;

constexpr auto kLongWait = std::chrono::seconds(10);  // "forever", but a hang fails the test

inline size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// ---------------------------------------------------------------------------------------------
// Batches: three leaves whose bytes all derive from a tag (epoch and sequence number).
//   leaf 0: n0 contiguous bytes;
//   leaf 1: the (C, R) transpose of a row-major (R, C) array of 2-byte elements;
//   leaf 2: `pieces` samples, each a stride-2 view of m 4-byte elements.
// The expected packed bytes are computed from the tag alone, independently of the collation.

struct Spec {
  size_t n0 = 0;
  int64_t R = 0, C = 0;
  int pieces = 0;
  int64_t m = 0;
};

inline Spec random_spec(uint64_t tag, bool allow_large) {
  std::mt19937_64 rng(tag * 0x2545F4914F6CDD1Dull + 17);
  Spec s;
  s.n0 = rng() % 5 == 0 ? 0 : rng() % 40000;
  s.R = static_cast<int64_t>(rng() % 41);
  s.C = 1 + static_cast<int64_t>(rng() % 50);
  s.pieces = static_cast<int>(rng() % 5);
  s.m = static_cast<int64_t>(rng() % 500);
  if (allow_large && tag % 37 == 5) s.n0 = (size_t{11} << 17) + rng() % (size_t{3} << 20);  // 1.4..4.4 MiB
  return s;
}

inline size_t leaf_bytes(const Spec& s, int leaf) {
  switch (leaf) {
    case 0: return s.n0;
    case 1: return static_cast<size_t>(s.R * s.C) * 2;
    default: return static_cast<size_t>(s.pieces) * static_cast<size_t>(s.m) * 4;
  }
}

inline size_t expected_total(const Spec& s) {
  size_t off = 0;
  for (int l = 0; l < 3; ++l) off = round_up(off, kLeafAlignment) + leaf_bytes(s, l);
  return off;
}

struct SourceBatch {
  std::vector<std::vector<uint8_t>> storage;
  std::vector<LeafPlan> leaves;
};

inline std::unique_ptr<SourceBatch> build_batch(uint64_t tag, const Spec& s) {
  auto b = std::make_unique<SourceBatch>();
  const uint64_t k0 = tag * 4, k1 = tag * 4 + 1, k2 = tag * 4 + 2;
  b->storage.emplace_back(s.n0);
  for (size_t i = 0; i < s.n0; ++i) b->storage.back()[i] = pattern_byte(k0, i);
  b->storage.emplace_back(static_cast<size_t>(s.R * s.C) * 2);
  for (size_t i = 0; i < b->storage.back().size(); ++i) b->storage.back()[i] = pattern_byte(k1, i);
  for (int p = 0; p < s.pieces; ++p) {
    b->storage.emplace_back(static_cast<size_t>(s.m) * 8);  // 2m elements of 4 bytes
    for (size_t i = 0; i < b->storage.back().size(); ++i) {
      b->storage.back()[i] = pattern_byte(k2, static_cast<size_t>(p) * 8 * s.m + i);
    }
  }
  auto ptr = [&](size_t k) { return reinterpret_cast<const std::byte*>(b->storage[k].data()); };

  LeafPlan l0;
  l0.pieces.push_back(HostTensor{ptr(0), 1, {static_cast<int64_t>(s.n0)}, {1}});
  l0.dtype_code = 1;
  l0.shape = {static_cast<int64_t>(s.n0)};
  LeafPlan l1;
  l1.pieces.push_back(HostTensor{ptr(1), 2, {s.C, s.R}, {1, s.C}});
  l1.dtype_code = 2;
  l1.shape = {s.C, s.R};
  LeafPlan l2;
  for (int p = 0; p < s.pieces; ++p) l2.pieces.push_back(HostTensor{ptr(2 + p), 4, {s.m}, {2}});
  l2.dtype_code = static_cast<int64_t>(tag % 1000);  // carried through untouched
  l2.shape = {s.pieces, s.m};
  b->leaves = {l0, l1, l2};
  return b;
}

inline uint8_t expected_byte(uint64_t tag, const Spec& s, int leaf, size_t i) {
  switch (leaf) {
    case 0: return pattern_byte(tag * 4, i);
    case 1: {
      // Output element e = c * R + r holds source element r * C + c.
      size_t e = i / 2, byte = i % 2;
      size_t c = e / s.R, r = e % s.R;
      return pattern_byte(tag * 4 + 1, (r * s.C + c) * 2 + byte);
    }
    default: {
      size_t per_piece = static_cast<size_t>(s.m) * 4;
      size_t p = i / per_piece, j = (i % per_piece) / 4, byte = i % 4;
      return pattern_byte(tag * 4 + 2, p * 8 * s.m + 8 * j + byte);
    }
  }
}

// Checks a delivered batch (whose ready event has been waited on); "" when it is right.
inline std::string verify(const ReadyBatch& b, uint64_t tag, const Spec& s) {
  std::ostringstream err;
  if (b.leaves.size() != 3) {
    err << "tag " << tag << ": " << b.leaves.size() << " leaves";
    return err.str();
  }
  if (b.destination.data == nullptr || !b.destination.owner) return "no destination";
  size_t off = 0;
  for (int l = 0; l < 3; ++l) {
    off = round_up(off, kLeafAlignment);
    const LeafOut& out = b.leaves[l];
    if (out.offset != off || out.nbytes != leaf_bytes(s, l)) {
      err << "tag " << tag << " leaf " << l << ": offset " << out.offset << " nbytes " << out.nbytes
          << ", expected " << off << " " << leaf_bytes(s, l);
      return err.str();
    }
    const int64_t dtype = l == 0 ? 1 : l == 1 ? 2 : static_cast<int64_t>(tag % 1000);
    if (out.dtype_code != dtype) {
      err << "tag " << tag << " leaf " << l << ": dtype_code " << out.dtype_code;
      return err.str();
    }
    const uint8_t* data = reinterpret_cast<const uint8_t*>(b.destination.data) + off;
    for (size_t i = 0; i < out.nbytes; ++i) {
      if (data[i] != expected_byte(tag, s, l, i)) {
        err << "tag " << tag << " leaf " << l << ": byte " << i << " of " << out.nbytes << " is "
            << int(data[i]) << ", expected " << int(expected_byte(tag, s, l, i));
        return err.str();
      }
    }
    off += out.nbytes;
  }
  if (b.leaves[1].shape != std::vector<int64_t>{s.C, s.R}) return "leaf 1 shape not carried";
  return "";
}

// Destinations the test owns: a fresh std::vector per batch, kept alive through `owner`.
struct Allocator {
  std::atomic<int> calls{0};
  std::atomic<size_t> last_bytes{0};
  DestinationAllocator fn() {
    return [this](size_t bytes) {
      calls.fetch_add(1);
      last_bytes.store(bytes);
      auto v = std::make_shared<std::vector<uint8_t>>(bytes, 0xEE);
      return Destination{reinterpret_cast<std::byte*>(v->data()), v};
    };
  }
};

inline EngineOptions options(int depth, int threads = 2, size_t chunk = 4096) {
  EngineOptions o;
  o.depth = depth;
  o.num_threads = threads;
  o.chunk_bytes = chunk;
  return o;
}

// Submits batch `tag` with the spec for that tag; returns the sequence number.
inline uint64_t submit_tag(Engine& e, uint64_t token, uint64_t tag, const Spec& s, Allocator& alloc,
                    const StreamWork& after = {}) {
  auto batch = build_batch(tag, s);
  return e.submit(token, batch->leaves, alloc.fn(), after);
}

// Takes the next batch, waits for it the way a consumer does, and verifies it.
inline void expect_batch(Engine& e, uint64_t token, uint64_t seq, uint64_t tag, const Spec& s,
                  ReadyBatch* keep = nullptr) {
  ReadyBatch b;
  ASSERT_EQ(e.next(token, &b, kLongWait), NextStatus::kBatch) << "waiting for seq " << seq;
  EXPECT_EQ(b.seq, seq);
  ASSERT_NE(b.ready, nullptr);
  e.backend().wait_on(*b.ready, nullptr);
  EXPECT_TRUE(b.ready->complete());
  EXPECT_EQ(verify(b, tag, s), "");
  if (keep) *keep = std::move(b);
}


// The kernel's id of the calling thread.
inline pid_t current_tid() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

// The scheduler state of thread `tid` of this process (/proc/self/task/<tid>/stat): 'S' while it
// is asleep in the kernel, waiting on a futex (a condition variable, a mutex) as a thread blocked
// inside the engine does; 'R' while it runs or is ready but not yet scheduled. 0 if unreadable
// (no /proc, or the thread has exited).
inline char thread_state(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // "tid (comm) S ...": the name may hold spaces and parentheses, the state follows the last ')'.
  const size_t close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() ? text[close + 2] : 0;
}

inline bool asleep(pid_t tid) { return thread_state(tid) == 'S'; }

// How many times thread `tid` of this process has gone to sleep of its own accord
// (voluntary_ctxt_switches in /proc/self/task/<tid>/status): it grows each time a waiting thread
// is woken and waits again. -1 if it cannot be read.
inline long voluntary_switches(pid_t tid) {
  std::ifstream status("/proc/self/task/" + std::to_string(tid) + "/status");
  const std::string key = "voluntary_ctxt_switches:";
  for (std::string line; std::getline(status, line);) {
    if (line.compare(0, key.size(), key) == 0) return std::stol(line.substr(key.size()));
  }
  return -1;
}

// Owns an engine and the threads a test runs against it. At the end of the test it cancels the
// epoch (which unblocks a producer or consumer left waiting by a failed test) and joins the
// threads; a thread still blocked after that (a broken wake-up) is detached and the engine leaked,
// so that the test fails instead of hanging. Declare it after anything its threads use.
class EngineHarness {
 public:
  explicit EngineHarness(EngineOptions o) : engine_(new Engine(make_host_backend(), o)) {}
  EngineHarness(const EngineHarness&) = delete;
  EngineHarness& operator=(const EngineHarness&) = delete;

  Engine& operator*() { return *engine_; }
  Engine* operator->() { return engine_.get(); }

  // Runs f() on a new thread; the future gives its result (or exception).
  template <class F>
  auto spawn(F f) -> std::shared_future<decltype(f())> {
    using R = decltype(f());
    std::packaged_task<R()> task(std::move(f));
    std::shared_future<R> result = task.get_future().share();
    threads_.push_back(Thread{std::thread(std::move(task)), [result](std::chrono::nanoseconds d) {
                                return result.wait_for(d) == std::future_status::ready;
                              }});
    return result;
  }

  // spawn() for a call the test expects to block: returns once the new thread is inside f() and
  // asleep in the kernel, or f() has returned (at most 10 s). A "still blocked" check after it is
  // then deterministic: the thread has had every chance to get through a wait that does not hold
  // it, however slow the machine, instead of perhaps not having started yet after a sleep. (A
  // thread of a correct engine that the test has not unblocked sleeps there until it does.)
  // `tid_out`, if given, receives the thread's kernel id.
  template <class F>
  auto spawn_blocked(F f, pid_t* tid_out = nullptr) -> std::shared_future<decltype(f())> {
    auto tid = std::make_shared<std::atomic<pid_t>>(0);
    auto result = spawn([tid, f = std::move(f)]() mutable {
      tid->store(current_tid());
      return f();
    });
    if (thread_state(current_tid()) == 0) {
      // No /proc to read a state from: fall back to the old way, a sleep long enough on a
      // machine that is not overloaded.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (tid_out) *tid_out = tid->load();
      return result;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (result.wait_for(std::chrono::seconds(0)) != std::future_status::ready &&
           !(tid->load() != 0 && asleep(tid->load()))) {
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "the spawned call neither returned nor went to sleep within 10 s";
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (tid_out) *tid_out = tid->load();
    return result;
  }

  // After the test woke a thread that spawn_blocked() left waiting (with a notify that should not
  // let it through): returns once it has run and is waiting again (its voluntary switches grew
  // past `switches_before` and it is asleep), or has returned. Gives up quietly after 10 s, so
  // the check that follows is at worst a plain "not yet" check, never a false failure.
  template <class T>
  static void wait_until_waiting_again(pid_t tid, long switches_before, const std::shared_future<T>& result) {
    if (switches_before < 0) {  // no /proc: the old way, a short sleep
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (result.wait_for(std::chrono::seconds(0)) != std::future_status::ready &&
           !(voluntary_switches(tid) > switches_before && asleep(tid)) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  // Runs f() on a harness thread and returns its result (or rethrows its exception). A call that
  // is still blocked after 10 s (a bug in the engine's wake-ups or depth accounting) fails the
  // test by throwing Blocked instead of hanging it.
  struct Blocked {};  // not a std::exception, so EXPECT_THROW(..., SomeError) never swallows it
  template <class F>
  auto call(F f) -> decltype(f()) {
    auto result = spawn(std::move(f));
    if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      ADD_FAILURE() << "an engine call blocked for 10 s";
      throw Blocked{};
    }
    return result.get();
  }

  ~EngineHarness() {
    engine_->cancel();
    bool stuck = false;
    for (auto& t : threads_) {
      if (t.done_within(std::chrono::seconds(10))) {
        t.thread.join();
      } else {
        t.thread.detach();
        stuck = true;
      }
    }
    if (stuck) {
      ADD_FAILURE() << "a thread stayed blocked in the engine after cancel(); engine leaked";
      (void)engine_.release();
    }
  }

 private:
  struct Thread {
    std::thread thread;
    std::function<bool(std::chrono::nanoseconds)> done_within;
  };
  std::unique_ptr<Engine> engine_;
  std::vector<Thread> threads_;
};

// submit_tag on a harness thread: blocks at most 10 s (see EngineHarness::call).
inline uint64_t submit_tag(EngineHarness& h, uint64_t token, uint64_t tag, const Spec& s, Allocator& alloc,
                           const StreamWork& after = {}) {
  return h.call([&] { return submit_tag(*h, token, tag, s, alloc, after); });
}

template <class T>
bool ready_within(const std::shared_future<T>& f, std::chrono::nanoseconds d) {
  return f.wait_for(d) == std::future_status::ready;
}

}  // namespace test
}  // namespace prefetch
