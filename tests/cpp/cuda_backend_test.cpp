// The CUDA backend's code, run without a GPU: CudaBackend over a fake CUDA runtime that keeps a
// current device per thread, creates a device's primary context the way the runtime does (at
// cudaSetDevice and at the first other call made while the device is current) and records every
// call with the device current on its thread. What a GPU run would do to devices and contexts is
// checked here: no context on GPU 0 from a thread that never chose it, the engine's device
// current for every call from every thread, the caller's device restored only where that
// creates nothing, a borrowed stream never destroyed, destructors that never throw, and the
// ring's outgrown pinned buffers freed only at an epoch's start.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend.h"
#include "cuda_calls.h"
#include "engine.h"
#include "engine_batches.h"
#include "errors.h"

namespace prefetch {
namespace test {
namespace {

constexpr int kNotReady = 600;  // cudaErrorNotReady's value; any nonzero value would do

class FakeCudaCalls : public CudaCalls {
 public:
  struct Call {
    std::thread::id thread;
    std::string name;
    int device;  // the thread's current device when the call was made
  };

  int get_device(int* device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fail_get_device_) return 1;
    *device = current_locked();
    return 0;
  }
  int set_device(int device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    current_[std::this_thread::get_id()] = device;
    contexts_.insert(device);  // CUDA 12+: cudaSetDevice initialises the device's primary context
    calls_.push_back({std::this_thread::get_id(), "set_device", device});
    return 0;
  }
  bool has_primary_context(int device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return contexts_.count(device) != 0;
  }
  int stream_create_non_blocking(void** stream) override {
    *stream = next_handle("stream_create");
    return 0;
  }
  int stream_destroy(void* stream) override {
    touch("stream_destroy");
    std::lock_guard<std::mutex> lock(mutex_);
    destroyed_streams_.insert(stream);
    return 0;
  }
  int stream_synchronize(void*) override { return touch("stream_synchronize"); }
  int event_create(void** event) override {
    *event = next_handle("event_create");
    std::lock_guard<std::mutex> lock(mutex_);
    ++live_events_;
    return 0;
  }
  int event_create_timing(void** event) override {
    *event = next_handle("event_create_timing");
    std::lock_guard<std::mutex> lock(mutex_);
    ++live_events_;
    timing_.insert(*event);
    return 0;
  }
  // The fake's clock: an event completes at the count of records before it, in milliseconds.
  int event_record(void* event, void*) override {
    touch("event_record");
    std::lock_guard<std::mutex> lock(mutex_);
    recorded_at_[event] = ++records_;
    return 0;
  }
  int event_elapsed_ms(float* ms, void* start, void* end) override {
    touch("event_elapsed_ms");
    std::lock_guard<std::mutex> lock(mutex_);
    // cudaErrorInvalidResourceHandle's value, as the runtime answers for an event without timing.
    if (timing_.count(start) == 0 || timing_.count(end) == 0) return 400;
    *ms = static_cast<float>(recorded_at_[end] - recorded_at_[start]);
    return 0;
  }
  int event_query(void*) override {
    touch("event_query");
    return query_not_ready_ ? kNotReady : 0;
  }
  int event_synchronize(void*) override { return touch("event_synchronize"); }
  int event_destroy(void*) override {
    touch("event_destroy");
    std::lock_guard<std::mutex> lock(mutex_);
    --live_events_;
    return 0;
  }
  int stream_wait_event(void*, void*) override { return touch("stream_wait_event"); }
  int host_alloc(void** data, size_t bytes) override {
    touch("host_alloc");
    *data = std::malloc(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    ++live_host_;
    return 0;
  }
  int free_host(void* data) override {
    touch("free_host");
    std::free(data);
    std::lock_guard<std::mutex> lock(mutex_);
    --live_host_;
    ++host_frees_;
    return 0;
  }
  int host_register(void*, size_t) override { return touch("host_register"); }
  int host_unregister(void*) override { return touch("host_unregister"); }
  int memcpy_host_to_device_async(void* dst, const void* src, size_t bytes, void*) override {
    touch("memcpy");
    std::memcpy(dst, src, bytes);  // the fake's "device" memory is host memory, copied at once
    return 0;
  }
  int not_ready() const override { return kNotReady; }
  std::string describe(int status) override { return "fakeError" + std::to_string(status); }

  // Test controls and observations.
  void set_fail_get_device(bool fail) {
    std::lock_guard<std::mutex> lock(mutex_);
    fail_get_device_ = fail;
  }
  void set_query_not_ready(bool v) { query_not_ready_ = v; }
  std::set<int> contexts() {
    std::lock_guard<std::mutex> lock(mutex_);
    return contexts_;
  }
  int current_device() {
    std::lock_guard<std::mutex> lock(mutex_);
    return current_locked();
  }
  std::vector<Call> calls() {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }
  // Calls other than set_device made while a device other than `device` was current.
  std::vector<std::string> calls_off(int device) {
    std::vector<std::string> out;
    for (const Call& c : calls()) {
      if (c.name != "set_device" && c.device != device) out.push_back(c.name + " on device " + std::to_string(c.device));
    }
    return out;
  }
  bool destroyed(void* stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    return destroyed_streams_.count(stream) != 0;
  }
  int live_events() {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_events_;
  }
  int live_host() {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_host_;
  }
  int host_frees() {
    std::lock_guard<std::mutex> lock(mutex_);
    return host_frees_;
  }

 private:
  int current_locked() {
    auto it = current_.find(std::this_thread::get_id());
    return it == current_.end() ? 0 : it->second;  // a new thread starts on device 0
  }
  // Any other runtime call initialises the current device's primary context.
  int touch(const char* name) {
    std::lock_guard<std::mutex> lock(mutex_);
    const int device = current_locked();
    contexts_.insert(device);
    calls_.push_back({std::this_thread::get_id(), name, device});
    return 0;
  }
  void* next_handle(const char* name) {
    touch(name);
    std::lock_guard<std::mutex> lock(mutex_);
    return reinterpret_cast<void*>(++handles_);
  }

  std::mutex mutex_;
  std::map<std::thread::id, int> current_;
  std::set<int> contexts_;
  std::vector<Call> calls_;
  std::set<void*> destroyed_streams_;
  std::set<void*> timing_;               // events made by event_create_timing
  std::map<void*, int> recorded_at_;     // event -> its record's number
  int records_ = 0;
  uintptr_t handles_ = 0x1000;
  int live_events_ = 0, live_host_ = 0, host_frees_ = 0;
  bool fail_get_device_ = false;
  std::atomic<bool> query_not_ready_{false};
};

// Runs f on a new thread (which starts, as every CUDA thread does, on device 0 without a context).
template <class F>
void on_new_thread(F f) {
  std::thread t(f);
  t.join();
}

TEST(CudaBackendDevice, AFreshThreadGetsNoContextOnDeviceZero) {
  auto fake = std::make_shared<FakeCudaCalls>();
  on_new_thread([&] {
    auto backend = make_cuda_backend_with(fake, 1);
    auto host = backend->alloc_host(64);
    std::vector<uint8_t> device_memory(64);
    backend->copy_async(device_memory.data(), host->data(), 64);
    auto event = backend->record();
    EXPECT_TRUE(event->complete());
    event->wait();
    backend->wait_on(*event, reinterpret_cast<void*>(0x99));
    // Left on the engine's device: restoring device 0 would have created its context.
    EXPECT_EQ(fake->current_device(), 1);
  });
  EXPECT_EQ(fake->contexts(), std::set<int>{1});
  EXPECT_EQ(fake->calls_off(1), std::vector<std::string>{});
}

TEST(CudaBackendDevice, AThreadOnAnotherDeviceWithAContextGetsItBack) {
  auto fake = std::make_shared<FakeCudaCalls>();
  on_new_thread([&] {
    fake->set_device(0);  // the user's thread, working on GPU 0
    auto backend = make_cuda_backend_with(fake, 1);
    EXPECT_EQ(fake->current_device(), 0);
    auto event = backend->record();
    EXPECT_EQ(fake->current_device(), 0);
    event->wait();
    auto host = backend->alloc_host(8);
    host.reset();
    event.reset();
    EXPECT_EQ(fake->current_device(), 0);
  });
  EXPECT_EQ(fake->contexts(), (std::set<int>{0, 1}));
  EXPECT_EQ(fake->calls_off(1), std::vector<std::string>{});
}

TEST(CudaBackendDevice, TheSameDeviceIsNeitherSetNorRestored) {
  auto fake = std::make_shared<FakeCudaCalls>();
  on_new_thread([&] {
    fake->set_device(2);
    const size_t before = fake->calls().size();
    auto backend = make_cuda_backend_with(fake, 2);
    backend->record()->wait();
    for (size_t i = before; i < fake->calls().size(); ++i) EXPECT_NE(fake->calls()[i].name, "set_device");
  });
}

// Objects made on one thread and destroyed on another (the consumer drops the last event of a
// batch; close() runs on the user's thread) still make their calls on the engine's device.
TEST(CudaBackendDevice, DestructionOnAnotherThreadUsesTheEnginesDevice) {
  auto fake = std::make_shared<FakeCudaCalls>();
  std::shared_ptr<Event> event;
  std::unique_ptr<HostMemory> host;
  std::unique_ptr<Backend> backend;
  on_new_thread([&] {
    backend = make_cuda_backend_with(fake, 3);
    event = backend->record();
    host = backend->alloc_host(16);
  });
  on_new_thread([&] {
    event.reset();
    host.reset();
    backend.reset();
  });
  EXPECT_EQ(fake->contexts(), std::set<int>{3});
  EXPECT_EQ(fake->calls_off(3), std::vector<std::string>{});
  EXPECT_EQ(fake->live_events(), 0);
  EXPECT_EQ(fake->live_host(), 0);
}

TEST(CudaBackendStream, ABorrowedStreamIsNeverDestroyedAnOwnedOneIs) {
  auto fake = std::make_shared<FakeCudaCalls>();
  void* borrowed = reinterpret_cast<void*>(0x5000);
  void* owned = nullptr;
  on_new_thread([&] {
    auto lent = make_cuda_backend_with(fake, 0, borrowed);
    EXPECT_EQ(lent->stream_handle(), borrowed);
    auto own = make_cuda_backend_with(fake, 0);
    owned = own->stream_handle();
    EXPECT_NE(owned, nullptr);
  });
  EXPECT_FALSE(fake->destroyed(borrowed));
  EXPECT_TRUE(fake->destroyed(owned));
}

TEST(CudaBackendErrors, FailuresNameTheCallAndDestructorsNeverThrow) {
  auto fake = std::make_shared<FakeCudaCalls>();
  on_new_thread([&] {
    auto backend = make_cuda_backend_with(fake, 1);
    auto event = backend->record();
    fake->set_query_not_ready(true);
    EXPECT_FALSE(event->complete());
    fake->set_query_not_ready(false);
    fake->set_fail_get_device(true);
    try {
      backend->record();
      FAIL() << "expected a BackendError";
    } catch (const BackendError& e) {
      EXPECT_NE(std::string(e.what()).find("cudaGetDevice failed: fakeError1"), std::string::npos) << e.what();
    }
    // Destroyed while the runtime fails: no exception escapes a destructor (that would terminate).
    event.reset();
    backend.reset();
    fake->set_fail_get_device(false);
  });
}

TEST(CudaBackendErrors, ABuildWithoutCudaSaysSoForTheRealRuntime) {
  if (built_with_cuda()) GTEST_SKIP() << "this build has CUDA";
  try {
    make_cuda_backend(4);
    FAIL() << "expected a BackendError";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot use cuda:4"), std::string::npos) << e.what();
  }
}

// The engine end to end on the CUDA backend code: a producer thread and a consumer thread, each
// new (device 0, no context), batches checked byte for byte; every call on the engine's device.
TEST(CudaBackendEngine, ProducerAndConsumerThreadsUseOnlyTheEnginesDevice) {
  auto fake = std::make_shared<FakeCudaCalls>();
  Allocator alloc;
  std::unique_ptr<Engine> engine;
  on_new_thread([&] { engine = std::make_unique<Engine>(make_cuda_backend_with(fake, 1), options(2)); });
  const uint64_t token = engine->start_epoch();
  const int batches = 12;
  std::thread producer([&] {
    for (int i = 0; i < batches; ++i) submit_tag(*engine, token, static_cast<uint64_t>(i), random_spec(i, false), alloc);
    engine->finish(token, false);
  });
  std::thread consumer([&] {
    for (int i = 0; i < batches; ++i) {
      expect_batch(*engine, token, static_cast<uint64_t>(i), static_cast<uint64_t>(i), random_spec(i, false));
    }
  });
  producer.join();
  consumer.join();
  on_new_thread([&] { engine.reset(); });
  EXPECT_EQ(fake->contexts(), std::set<int>{1});
  EXPECT_EQ(fake->calls_off(1), std::vector<std::string>{});
  EXPECT_EQ(fake->live_events(), 0);
  EXPECT_EQ(fake->live_host(), 0);
}

// The copy timeline on the CUDA backend's code: timing events around each copy (the engine's
// other events stay without timing), read with cudaEventElapsedTime on the engine's device, every
// event destroyed; the fake's clock counts records, so the copy's end is after its start.
TEST(CudaBackendEngine, TheCopyTimelineUsesTimingEventsOnTheEnginesDevice) {
  auto fake = std::make_shared<FakeCudaCalls>();
  Allocator alloc;
  std::unique_ptr<Engine> engine;
  std::vector<CopyRecord> timeline;
  on_new_thread([&] {
    engine = std::make_unique<Engine>(make_cuda_backend_with(fake, 2), options(2));
    engine->record_copies(4);
    const uint64_t token = engine->start_epoch();
    for (int i = 0; i < 6; ++i) {
      submit_tag(*engine, token, static_cast<uint64_t>(i), random_spec(i, false), alloc);
      expect_batch(*engine, token, static_cast<uint64_t>(i), static_cast<uint64_t>(i), random_spec(i, false));
    }
    timeline = engine->copy_timeline();
    engine->record_copies(0);
  });
  ASSERT_EQ(timeline.size(), 4u);
  for (size_t i = 0; i < timeline.size(); ++i) {
    EXPECT_EQ(timeline[i].batch, i + 2);
    EXPECT_EQ(timeline[i].slot, static_cast<int>((i + 2) % 2));
    EXPECT_GT(timeline[i].copy_end_s, timeline[i].copy_start_s);
    if (i > 0) {
      EXPECT_GT(timeline[i].copy_start_s, timeline[i - 1].copy_end_s);
    }
  }
  size_t timed = 0, plain = 0;
  for (const auto& c : fake->calls()) {
    timed += c.name == "event_create_timing";
    plain += c.name == "event_create";
  }
  EXPECT_EQ(timed, 1u + 2u * 6u) << "the origin, and a start and an end around each copy";
  EXPECT_GT(plain, 0u);
  on_new_thread([&] { engine.reset(); });
  EXPECT_EQ(fake->calls_off(2), std::vector<std::string>{});
  EXPECT_EQ(fake->live_events(), 0);
}

// Freeing pinned memory synchronises the whole device: a slot outgrown mid-epoch keeps its old
// buffer until the next epoch's first batch (or until the retired buffers would outweigh the
// ring's live ones).
TEST(CudaBackendEngine, OutgrownPinnedBuffersAreFreedAtTheNextEpochsStart) {
  auto fake = std::make_shared<FakeCudaCalls>();
  Allocator alloc;
  Engine engine(make_cuda_backend_with(fake, 0), options(1));
  Spec small = random_spec(0, false);
  Spec large = random_spec(5, true);  // 1.4 to 4.4 MiB (engine_batches.h)
  uint64_t token = engine.start_epoch();
  submit_tag(engine, token, 0, small, alloc);
  expect_batch(engine, token, 0, 0, small);
  ASSERT_GT(expected_total(large), engine.slot_capacity(0)) << "the test needs a batch that grows the slot";
  const int frees_before = fake->host_frees();
  submit_tag(engine, token, 1, large, alloc);  // grows the only slot mid-epoch
  expect_batch(engine, token, 1, 1, large);
  EXPECT_EQ(engine.retired_buffers(), 1u);
  EXPECT_EQ(fake->host_frees(), frees_before) << "cudaFreeHost ran mid-epoch";
  token = engine.start_epoch();
  submit_tag(engine, token, 2, small, alloc);
  expect_batch(engine, token, 0, 2, small);
  EXPECT_EQ(engine.retired_buffers(), 0u);
  EXPECT_EQ(fake->host_frees(), frees_before + 1);
}

}  // namespace
}  // namespace test
}  // namespace prefetch
