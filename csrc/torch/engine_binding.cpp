// prefetch._C: the engine as a Python object. Turns tensors into the core's raw host views (with
// the GIL held), runs every blocking call with the GIL released, and turns delivered batches back
// into tensors that share one packed storage. bind_engine adds the class (and its NextStatus and
// test-only entry points) to the module that module.cpp defines. One job, the engine's Python
// face, past ~500 lines: its leaf planning and delivery are the methods' own helpers.
#include <torch/csrc/utils/pybind.h>
#include <ATen/ops/from_blob.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "buffer_pool.h"
#include "checked_math.h"
#include "device_support.h"
#include "engine.h"
#include "errors.h"
#include "readable.h"
#include "packed_layout.h"

namespace py = pybind11;

namespace prefetch {
namespace {

// How often a blocked next() wakes to let Python deliver signals (Ctrl-C) to the main thread.
constexpr auto kSignalPollInterval = std::chrono::milliseconds(50);

// A core message without its "prefetch: ", to be wrapped in one that names the leaf.
std::string without_prefix(std::string why) {
  const std::string prefix = "prefetch: ";
  if (why.compare(0, prefix.size(), prefix) == 0) why.erase(0, prefix.size());
  return why;
}

// A plan's sizes, checked before any memory is reserved for it: no byte size or element count
// wraps (see checked_math.h), and the error names the leaf.
void check_plan_sizes(const LeafPlan& plan, const std::string& name) {
  try {
    checked_numel(plan.shape, "the element count");
    plan.nbytes();
  } catch (const CollateError& e) {
    throw CollateError("prefetch: cannot collate " + name + " of shape " + shape_str(plan.shape) +
                       ": " + without_prefix(e.what()));
  }
}

HostTensor host_view(const at::Tensor& t) {
  HostTensor view;
  view.data = static_cast<const std::byte*>(t.const_data_ptr());
  view.itemsize = t.element_size();
  view.sizes.assign(t.sizes().begin(), t.sizes().end());
  view.strides.assign(t.strides().begin(), t.strides().end());
  return view;
}

// A reference to the engine that is dropped with the GIL released: when close() ran meanwhile,
// this may be the last reference, and the engine's destructor joins its threads.
class EngineRef {
 public:
  explicit EngineRef(std::shared_ptr<Engine> engine) : engine_(std::move(engine)) {}
  EngineRef(EngineRef&&) = default;
  ~EngineRef() {
    if (engine_ && PyGILState_Check()) {
      py::gil_scoped_release nogil;
      engine_.reset();
    }
  }
  Engine* operator->() const { return engine_.get(); }
  Engine& operator*() const { return *engine_; }
  explicit operator bool() const { return engine_ != nullptr; }

 private:
  std::shared_ptr<Engine> engine_;
};

// A block of host memory registered with the copy stream's backend (Backend::register_host) for
// as long as this object lives; it holds the block, so the memory cannot go while registered.
class HostPin {
 public:
  HostPin(at::Tensor block, std::shared_ptr<void> registration)
      : block_(std::move(block)), registration_(std::move(registration)) {}
  ~HostPin() { registration_.reset(); }  // unregistered first, then the block may go
  HostPin(const HostPin&) = delete;
  HostPin& operator=(const HostPin&) = delete;
  const at::Tensor& block() const { return block_; }

 private:
  at::Tensor block_;
  std::shared_ptr<void> registration_;
};

class PyEngine {
 public:
  PyEngine(const std::string& device_type, int device_index, int depth, int num_threads,
           int64_t max_batch_bytes)
      : is_cuda_(device_type == "cuda"), device_index_(device_index) {
    if (!is_cuda_ && device_type != "cpu") {
      throw std::invalid_argument("prefetch: unsupported device type '" + device_type +
                                  "'; expected 'cpu' or 'cuda'");
    }
    if (max_batch_bytes < 0) {
      throw std::invalid_argument("max_batch_bytes must be >= 0, got " +
                                  std::to_string(max_batch_bytes));
    }
    EngineOptions options;
    options.depth = depth;
    options.num_threads = num_threads;
    options.max_batch_bytes = static_cast<size_t>(max_batch_bytes);
    // A CPU destination is plain host memory: collate into it, not through the ring.
    options.collate_into_destination = !is_cuda_;
    // (A build without CUDA refuses in make_cuda_backend, naming the device, before torch is
    // asked for a stream.)
    auto backend = !is_cuda_              ? make_host_backend()
                   : !cuda_support_built() ? make_cuda_backend(device_index)
                                           : make_cuda_backend(device_index, cuda_copy_stream(device_index));
    void* copy_stream = backend->stream_handle();
    engine_ = std::make_shared<Engine>(std::move(backend), options);
    if (is_cuda_) {
      allocate_ = cuda_destination_allocator(device_index, copy_stream);
    } else {
      // depth batches queued, one with the consumer, one being copied into.
      auto pool = BufferPool::create(static_cast<size_t>(depth) + 2);
      pool_ = pool;
      allocate_ = [pool](size_t bytes) {
        std::shared_ptr<AlignedBuffer> lease = pool->acquire(bytes);
        return Destination{lease->data(), lease};
      };
    }
  }

  uint64_t start_epoch() { return get()->start_epoch(); }

  // leaves: a list of prefetch._engine.tree.Leaf(name, value, rows), one output tensor each (see
  // make_plans).
  uint64_t submit(uint64_t token, const py::list& leaves) {
    EngineRef engine = get();
    std::vector<at::Tensor> keep;  // the sources stay alive until collation has finished
    std::vector<std::string> names;
    std::vector<LeafPlan> plans = make_plans(leaves, &keep, &names);
    try {
      py::gil_scoped_release nogil;
      return engine->submit(token, plans, allocate_);
    } catch (const std::bad_alloc&) {
      throw_out_of_memory(plans, names);
    }
  }

  // A batch whose buffer could not be allocated (its true size fits 64 bits, not the memory):
  // a MemoryError that names the batch's size and its largest leaf.
  [[noreturn]] static void throw_out_of_memory(const std::vector<LeafPlan>& plans,
                                               const std::vector<std::string>& names) {
    size_t total = 0;
    pack_layout(plans, &total);  // checked already, when the engine failed after it
    size_t largest = 0;
    for (size_t i = 1; i < plans.size(); ++i) {
      if (plans[i].nbytes() > plans[largest].nbytes()) largest = i;
    }
    std::string message = "prefetch: could not allocate the batch's " + std::to_string(total) + " bytes";
    if (!plans.empty() && largest < names.size()) {
      message += " (the largest leaf, " + names[largest] + " of shape " +
                 shape_str(plans[largest].shape) + ", needs " +
                 std::to_string(plans[largest].nbytes()) + ")";
    }
    message += "; max_batch_bytes refuses such batches up front with a CollateError";
    PyErr_SetString(PyExc_MemoryError, message.c_str());
    throw py::error_already_set();
  }

  // One field of a Leaf, read by name (any object with the three attributes will do), or a
  // TypeError that says what was passed instead.
  // `interned` is the field's name as an interned str, made once: read per leaf per batch.
  static py::object leaf_field(py::handle item, PyObject* interned, const char* field,
                               size_t position) {
    PyObject* value = PyObject_GetAttr(item.ptr(), interned);
    if (value == nullptr) {
      if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw py::error_already_set();
      PyErr_Clear();
      throw py::type_error("prefetch: leaf " + std::to_string(position) + " (a " +
                           class_name(item) + ") has no attribute '" + field +
                           "'; the engine takes prefetch._engine.tree.Leaf(name, value, "
                           "rows=None)");
    }
    return py::reinterpret_steal<py::object>(value);
  }

  // A Leaf's optional `mapped`: None, or (fd, size, path) of the file its value maps (a store's
  // values.bin), which the engine checks before reading (check_mapped). An object without the
  // attribute maps nothing.
  static void add_mapped(py::handle item, const std::string& name, LeafPlan* plan) {
    static PyObject* const kMapped = PyUnicode_InternFromString("mapped");
    if (kMapped == nullptr) throw py::error_already_set();
    PyObject* raw = PyObject_GetAttr(item.ptr(), kMapped);
    if (raw == nullptr) {
      if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw py::error_already_set();
      PyErr_Clear();
      return;
    }
    const py::object mapped = py::reinterpret_steal<py::object>(raw);
    if (mapped.is_none()) return;
    try {
      auto fields = mapped.cast<std::tuple<int, int64_t, std::string>>();
      plan->mapped_fd = std::get<0>(fields);
      plan->mapped_size = std::get<1>(fields);
      plan->mapped_path = std::get<2>(fields);
    } catch (const py::cast_error&) {
      throw py::type_error("prefetch: " + name + ": a Leaf's mapped must be None or (fd, size, "
                           "path), got a " + class_name(mapped));
    }
    if (plan->mapped_fd < 0 || plan->mapped_size < 0) {
      throw py::value_error("prefetch: " + name + ": a Leaf's mapped needs an fd >= 0 and a size "
                            ">= 0, got " + std::to_string(plan->mapped_fd) + " and " +
                            std::to_string(plan->mapped_size));
    }
  }

  // The core's plans for a list of Leaf (prefetch/_engine/tree.py, where the contract is
  // documented): `value` a CPU tensor (copied as is) or a list of CPU tensors (stacked); with
  // `rows` (a 1-D int64 CPU tensor) the rows `rows` of the tensor `value`, gathered (the
  // ArrayLoader's path);
  // with `rows` an int64 [n, 2] CPU tensor of (start, count) the element ranges of the 1-D
  // tensor `value`, one after another (a ragged field's samples: the ArrayLoader's path too).
  // `names` receives each leaf's name, for a MemoryError that names the largest leaf.
  std::vector<LeafPlan> make_plans(const py::list& leaves, std::vector<at::Tensor>* keep,
                                   std::vector<std::string>* names) {
    std::vector<LeafPlan> plans;
    plans.reserve(leaves.size());
    for (size_t position = 0; position < leaves.size(); ++position) {
      const py::handle item = PyList_GET_ITEM(leaves.ptr(), static_cast<Py_ssize_t>(position));
      // Made on the first call, with the GIL held, and kept for the process's life (a leak on
      // purpose: destroying Python objects at C++ exit would run after the interpreter ended).
      static PyObject* const kName = PyUnicode_InternFromString("name");
      static PyObject* const kValue = PyUnicode_InternFromString("value");
      static PyObject* const kRows = PyUnicode_InternFromString("rows");
      if (kName == nullptr || kValue == nullptr || kRows == nullptr) throw py::error_already_set();
      std::string name = leaf_field(item, kName, "name", position).cast<std::string>();
      const py::object value = leaf_field(item, kValue, "value", position);
      const py::object rows = leaf_field(item, kRows, "rows", position);
      LeafPlan plan;
      if (!rows.is_none() && THPVariable_Check(rows.ptr()) &&
          THPVariable_Unpack(rows.ptr()).dim() == 2) {
        add_spans(value, rows, name, &plan, keep);
      } else if (!rows.is_none()) {
        add_gathered(value, rows, name, &plan, keep);
      } else if (THPVariable_Check(value.ptr())) {
        at::Tensor t = readable(THPVariable_Unpack(value.ptr()), name, value);
        plan.pieces.push_back(host_view(t));
        plan.dtype_code = static_cast<int64_t>(t.scalar_type());
        plan.shape.assign(t.sizes().begin(), t.sizes().end());
        keep->push_back(std::move(t));
      } else if (PyTuple_Check(value.ptr())) {
        add_concatenated(py::reinterpret_borrow<py::tuple>(value), name, &plan, keep);
      } else {
        add_samples(py::reinterpret_borrow<py::list>(value), name, &plan, keep);
      }
      add_mapped(item, name, &plan);
      check_plan_sizes(plan, name);
      plans.push_back(std::move(plan));
      names->push_back(std::move(name));
    }
    return plans;
  }

  // submit() up to the copy: returns (seq, tensors) readable on the copy stream (CUDA: stream
  // order; host: once the copy has completed, which `wait_for_copy` waits for — a batch that no
  // host code reads before publish() need not: the consumer's next() waits for "ready").
  // publish() then makes the batch visible, after whatever the caller enqueued on the copy
  // stream meanwhile.
  py::tuple stage(uint64_t token, const py::list& leaves, bool wait_for_copy) {
    EngineRef engine = get();
    std::vector<at::Tensor> keep;
    std::vector<std::string> names;
    std::vector<LeafPlan> plans = make_plans(leaves, &keep, &names);
    StagedBatch staged;
    try {
      py::gil_scoped_release nogil;
      staged = engine->stage(token, plans, allocate_);
      if (!is_cuda_ && wait_for_copy) staged.copied->wait();
    } catch (const std::bad_alloc&) {
      throw_out_of_memory(plans, names);
    }
    py::list views = leaf_views(packed_tensor(staged.batch.destination), staged.batch.leaves);
    const uint64_t seq = staged.batch.seq;
    staged_ = std::move(staged);
    return py::make_tuple(seq, views);
  }

  // Registers `block` (a contiguous 1-D uint8 CPU tensor) with the copy stream's backend: CUDA
  // page-locks it, so copies from it run at full speed and asynchronously. BackendError when it
  // cannot be locked.
  std::shared_ptr<HostPin> register_host(const at::Tensor& block) {
    check_host_bytes(block, "a block to register");
    EngineRef engine = get();
    std::shared_ptr<void> registration;
    {
      py::gil_scoped_release nogil;  // page-locking gigabytes takes a while
      registration = engine->backend().register_host(block.data_ptr(), static_cast<size_t>(block.numel()));
    }
    return std::make_shared<HostPin>(block, std::move(registration));
  }

  // stage() for a batch packed already (prefetch._engine.tree.Packed: a worker ring slot): one
  // copy, no collation. `layout` is the batch's [(offset, dtype, shape)] as the worker sent it,
  // checked here against the bytes it may reach; `slot` (None or (SlotTable, index,
  // generation)) is leased here (SENT -> LEASED) and freed once the copy has read it — or at once
  // if the batch is refused. `pin` (a HostPin or None) is held with it.
  py::tuple stage_packed(uint64_t token, const at::Tensor& data, py::handle layout,
                         std::shared_ptr<HostPin> pin, py::handle slot, bool wait_for_copy) {
    EngineRef engine = get();
    PackedBytes packed = take_packed(data, layout, slot);
    PackedSource source;
    if (packed.lease) source.release = [lease = packed.lease] { lease->release(); };
    source.data = static_cast<const std::byte*>(packed.data.const_data_ptr()) + packed.offset;
    for (const LeafOut& leaf : packed.leaves) source.bytes = std::max(source.bytes, leaf.offset + leaf.nbytes);
    source.leaves = std::move(packed.leaves);
    source.owner = std::make_shared<std::pair<at::Tensor, std::shared_ptr<HostPin>>>(
        std::move(packed.data), std::move(pin));
    packed.lease.reset();  // held by `source.release` alone: the engine decides when it runs
    StagedBatch staged;
    {
      py::gil_scoped_release nogil;
      staged = engine->stage_packed(token, std::move(source), allocate_);
      if (!is_cuda_ && wait_for_copy) staged.copied->wait();
    }
    py::list out = leaf_views(packed_tensor(staged.batch.destination), staged.batch.leaves);
    const uint64_t seq = staged.batch.seq;
    staged_ = std::move(staged);
    return py::make_tuple(seq, out);
  }

  uint64_t publish(uint64_t token) {
    EngineRef engine = get();
    if (!staged_ || staged_->token != token) {
      throw std::logic_error("prefetch: publish() without a staged batch of this epoch");
    }
    StagedBatch staged = std::move(*staged_);
    staged_.reset();
    py::gil_scoped_release nogil;
    return engine->publish(std::move(staged));
  }

  // The copy stream (a cudaStream_t as an integer), for running transforms on it; 0 on the host.
  uintptr_t stream_handle() { return reinterpret_cast<uintptr_t>(get()->backend().stream_handle()); }

  void finish(uint64_t token, bool failed) { get()->finish(token, failed); }

  // Returns (status, seq, tensors): status a NextStatus (exported as _C.NextStatus); seq and
  // tensors are the batch's for BATCH, 0 and [] otherwise.
  // `with_tensors` false: the caller has the batch already (the Python producer built it from
  // stage()'s views); next() still makes the consumer's stream wait and protects the block.
  py::tuple next(uint64_t token, double timeout_s, bool with_tensors) {
    EngineRef engine = get();
    // Negative: wait forever. So do NaN and timeouts past what the clock can hold (inf, 1e300:
    // now + timeout would overflow into a deadline in the past); 1e9 s is over 31 years.
    constexpr double kLongestTimeoutS = 1e9;
    const bool forever = !(timeout_s >= 0.0 && timeout_s <= kLongestTimeoutS);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(forever ? 0.0 : timeout_s));
    ReadyBatch batch;
    NextStatus status;
    while (true) {
      auto slice = std::chrono::nanoseconds(kSignalPollInterval);
      if (!forever) {
        slice = std::min(slice, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    deadline - std::chrono::steady_clock::now()));
        if (slice.count() < 0) slice = std::chrono::nanoseconds(0);
      }
      {
        py::gil_scoped_release nogil;
        status = engine->next(token, &batch, slice);
      }
      if (status != NextStatus::kTimeout) break;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (!forever && std::chrono::steady_clock::now() >= deadline) break;
    }
    if (status == NextStatus::kBatch) {
      py::list tensors = deliver(*engine, batch, with_tensors);
      return py::make_tuple(static_cast<int>(status), batch.seq, tensors);
    }
    return py::make_tuple(static_cast<int>(status), 0, py::list());
  }

  void cancel(uint64_t token) {
    EngineRef engine = get_or_null();
    if (engine) engine->cancel(token);
  }

  // Cancels the epoch and drops this object's hold on the engine; the last user (a producer
  // still inside submit()) destroys it, which joins the pool and the host stream thread.
  void close() {
    std::shared_ptr<Engine> engine;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      engine.swap(engine_);
    }
    if (!engine) return;
    engine->cancel();
    py::gil_scoped_release nogil;
    engine.reset();
  }

  bool closed() {
    std::lock_guard<std::mutex> lock(mutex_);
    return engine_ == nullptr;
  }

  // The engine's counters under their own names, times converted from ns to s (EngineStats).
  py::dict stats() {
    EngineStats s = get()->stats();
    py::dict d;
    d["submitted"] = s.submitted;
    d["delivered"] = s.delivered;
    d["bytes_collated"] = s.bytes_collated;
    d["collate_s"] = s.collate_ns * 1e-9;
    d["slot_wait_s"] = s.slot_wait_ns * 1e-9;
    d["allocate_s"] = s.allocate_ns * 1e-9;
    d["producer_blocked_s"] = s.producer_blocked_ns * 1e-9;
    d["ring_growths"] = s.ring_growths;
    d["packed_bytes"] = s.packed_bytes;
    return d;
  }

  size_t packed_in_flight() { return get()->packed_in_flight(); }

  void record_copies(int64_t capacity) {
    if (capacity < 0) {
      throw std::invalid_argument("prefetch: record_copies capacity must be >= 0 (0: stop), got " +
                                  std::to_string(capacity));
    }
    EngineRef engine = get();
    py::gil_scoped_release nogil;  // waits for the origin event (the copies queued before it)
    engine->record_copies(static_cast<size_t>(capacity));
  }

  // The copy timeline as a list of dicts (CopyRecord's fields, times in seconds).
  py::list copy_timeline() {
    EngineRef engine = get();
    std::vector<CopyRecord> records;
    {
      py::gil_scoped_release nogil;  // waits for the recorded copies
      records = engine->copy_timeline();
    }
    py::list out;
    for (const CopyRecord& r : records) {
      py::dict d;
      d["batch"] = r.batch;
      d["slot"] = r.slot;
      d["bytes"] = r.bytes;
      d["wait_start_s"] = r.wait_start_s;
      d["collate_start_s"] = r.collate_start_s;
      d["collate_end_s"] = r.collate_end_s;
      d["enqueued_s"] = r.enqueued_s;
      d["copy_start_s"] = r.copy_start_s;
      d["copy_end_s"] = r.copy_end_s;
      out.append(d);
    }
    return out;
  }

  // The host backend's copy engine model (Backend::set_copy_bandwidth), with the batches routed
  // through the ring as on CUDA (Engine::set_copy_path). CPU engines only.
  void model_copy_engine(double bytes_per_s) {
    if (is_cuda_) {
      throw std::invalid_argument("prefetch: model_copy_engine needs a CPU engine (the host "
                                  "backend); this one is on cuda:" + std::to_string(device_index_));
    }
    EngineRef engine = get();
    py::gil_scoped_release nogil;  // waits for a producer inside stage()
    engine->backend().set_copy_bandwidth(bytes_per_s);
    engine->set_through_ring(true);
  }

  std::vector<size_t> slot_capacities() {
    auto engine = get();
    std::vector<size_t> out;
    for (int i = 0; i < engine->depth(); ++i) out.push_back(engine->slot_capacity(i));
    return out;
  }

  int num_threads() { return get()->num_threads(); }
  std::string backend_name() { return get()->backend().name(); }
  void set_debug_delay(int64_t max_us, uint64_t seed) { get()->backend().set_debug_delay(max_us, seed); }

 private:
  EngineRef get_or_null() {
    std::lock_guard<std::mutex> lock(mutex_);
    return EngineRef(engine_);
  }
  EngineRef get() {
    EngineRef engine = get_or_null();
    if (!engine) throw std::runtime_error("prefetch: this Prefetcher is closed");
    return engine;
  }



  void add_samples(const py::list& samples, const std::string& name, LeafPlan* plan,
                   std::vector<at::Tensor>* keep) {
    const size_t n = samples.size();
    if (n == 0) throw CollateError("prefetch: " + name + " is an empty Samples; nothing to collate");
    at::Tensor first;
    for (size_t i = 0; i < n; ++i) {
      py::handle item = samples[i];
      if (!THPVariable_Check(item.ptr())) {
        throw CollateError("prefetch: " + name + ": sample " + std::to_string(i) + " is a " +
                           std::string(py::str(py::type::handle_of(item).attr("__name__"))) +
                           ", expected a tensor");
      }
      at::Tensor t = readable(THPVariable_Unpack(item.ptr()), name, item, static_cast<int64_t>(i));
      if (i == 0) {
        first = t;
      } else if (t.sizes() != first.sizes()) {
        throw CollateError("prefetch: cannot collate " + name + ": sample " + std::to_string(i) +
                           " has shape " + shape_str(t.sizes()) + ", expected " +
                           shape_str(first.sizes()) +
                           " (the shape of sample 0; samples of different sizes collate into a "
                           "prefetch.Ragged when they have the same rank)");
      } else if (t.scalar_type() != first.scalar_type()) {
        throw CollateError("prefetch: cannot collate " + name + ": sample " + std::to_string(i) +
                           " has dtype " + dtype_str(t.scalar_type()) + ", expected " +
                           dtype_str(first.scalar_type()) + " (the dtype of sample 0)");
      }
      plan->pieces.push_back(host_view(t));
      keep->push_back(std::move(t));
    }
    plan->dtype_code = static_cast<int64_t>(first.scalar_type());
    plan->shape.push_back(static_cast<int64_t>(n));
    plan->shape.insert(plan->shape.end(), first.sizes().begin(), first.sizes().end());
  }

  // A Ragged's values: samples of one dtype and any shapes, their elements one after another
  // (prefetch/_engine/tree.py has checked the shapes; the dtype is checked here, as for any leaf).
  void add_concatenated(const py::tuple& samples, const std::string& name, LeafPlan* plan,
                        std::vector<at::Tensor>* keep) {
    const size_t n = samples.size();
    if (n == 0) throw CollateError("prefetch: " + name + " is an empty Ragged; nothing to collate");
    at::Tensor first;
    int64_t elements = 0;
    for (size_t i = 0; i < n; ++i) {
      py::handle item = samples[i];
      if (!THPVariable_Check(item.ptr())) {
        throw CollateError("prefetch: " + name + ": sample " + std::to_string(i) + " is a " +
                           class_name(item) + ", expected a tensor");
      }
      at::Tensor t = readable(THPVariable_Unpack(item.ptr()), name, item, static_cast<int64_t>(i));
      if (i == 0) {
        first = t;
      } else if (t.scalar_type() != first.scalar_type()) {
        throw CollateError("prefetch: cannot collate " + name + ": sample " + std::to_string(i) +
                           " has dtype " + dtype_str(t.scalar_type()) + ", expected " +
                           dtype_str(first.scalar_type()) + " (the dtype of sample 0)");
      }
      elements = checked_add(elements, t.numel(), "the Ragged's element count");
      plan->pieces.push_back(host_view(t));
      keep->push_back(std::move(t));
    }
    plan->dtype_code = static_cast<int64_t>(first.scalar_type());
    plan->shape.assign(1, elements);
  }

  // Rows `indices` of `array` stacked: a gather leaf over the array itself, so the pool's
  // threads copy the rows straight from the dataset (a memmap's pages fault in there, with
  // the GIL released) and no Python runs per sample.
  void add_gathered(py::handle value, py::handle index_obj, const std::string& name,
                    LeafPlan* plan, std::vector<at::Tensor>* keep) {
    if (!THPVariable_Check(value.ptr()) || !THPVariable_Check(index_obj.ptr())) {
      throw CollateError("prefetch: " + name + ": a gathered leaf needs a tensor and an index tensor");
    }
    at::Tensor array = readable(THPVariable_Unpack(value.ptr()), name, value);
    at::Tensor indices = THPVariable_Unpack(index_obj.ptr());
    if (array.dim() < 1) throw CollateError("prefetch: " + name + " is 0-D; rows cannot be gathered");
    if (indices.dim() != 1 || indices.scalar_type() != at::kLong || !indices.device().is_cpu()) {
      throw CollateError("prefetch: " + name + ": indices must be a 1-D int64 CPU tensor");
    }
    indices = indices.contiguous();
    const int64_t n = indices.numel();
    const int64_t* idx = indices.const_data_ptr<int64_t>();
    plan->gather = true;
    plan->pieces.push_back(host_view(array));
    plan->rows.assign(idx, idx + n);
    plan->dtype_code = static_cast<int64_t>(array.scalar_type());
    plan->shape.push_back(n);
    plan->shape.insert(plan->shape.end(), array.sizes().begin() + 1, array.sizes().end());
    keep->push_back(std::move(array));
    // The core checks the rows again when it lays the batch out; here the error gets the name.
    try {
      check_rows(*plan);
    } catch (const CollateError& e) {
      throw CollateError("prefetch: " + name + ": " + without_prefix(e.what()));
    }
  }

  // Element ranges of a 1-D `array`, one after another: a ragged field gathered straight from
  // the dataset (a memmap's pages fault in on the pool's threads, with the GIL released), so no
  // Python runs per sample and the array is never read whole.
  void add_spans(py::handle value, py::handle spans_obj, const std::string& name, LeafPlan* plan,
                 std::vector<at::Tensor>* keep) {
    if (!THPVariable_Check(value.ptr())) {
      throw CollateError("prefetch: " + name + ": a ranges leaf needs a tensor and a span tensor");
    }
    at::Tensor array = readable(THPVariable_Unpack(value.ptr()), name, value);
    at::Tensor spans = THPVariable_Unpack(spans_obj.ptr());
    if (array.dim() != 1 || (array.numel() > 1 && array.stride(0) != 1)) {
      throw CollateError("prefetch: " + name + ": a ranged field's values must be a 1-D dense "
                         "tensor, got shape " + shape_str(array.sizes()));
    }
    if (spans.size(1) != 2 || spans.scalar_type() != at::kLong || !spans.device().is_cpu()) {
      throw CollateError("prefetch: " + name + ": spans must be an int64 [n, 2] CPU tensor of "
                         "(start, count)");
    }
    spans = spans.contiguous();
    const int64_t* pairs = spans.const_data_ptr<int64_t>();
    plan->ranges = true;
    plan->pieces.push_back(host_view(array));
    plan->spans.assign(pairs, pairs + spans.numel());
    plan->dtype_code = static_cast<int64_t>(array.scalar_type());
    keep->push_back(std::move(array));
    try {
      check_rows(*plan);
    } catch (const CollateError& e) {
      throw CollateError("prefetch: " + name + ": " + without_prefix(e.what()));
    }
    plan->shape.assign(1, static_cast<int64_t>(plan->nbytes() / plan->pieces[0].itemsize));
  }

  // The packed destination as a uint8 tensor. On the CPU its storage holds the pool lease: the
  // buffer returns to the pool when the last tensor viewing it is dropped.
  at::Tensor packed_tensor(const Destination& destination) {
    if (is_cuda_) return *std::static_pointer_cast<at::Tensor>(destination.owner);
    std::shared_ptr<void> lease = destination.owner;
    const auto bytes = static_cast<AlignedBuffer*>(lease.get())->size();
    return at::from_blob(
        destination.data, {static_cast<int64_t>(bytes)}, [lease](void*) mutable { lease.reset(); },
        at::TensorOptions().dtype(at::kByte));
  }

  py::list deliver(Engine& engine, const ReadyBatch& batch, bool with_tensors) {
    at::Tensor packed;
    {
      py::gil_scoped_release nogil;
      if (is_cuda_) {
        void* consumer_stream = cuda_current_stream(device_index_);
        engine.backend().wait_on(*batch.ready, consumer_stream);
        packed = packed_tensor(batch.destination);
        cuda_protect_for_stream(packed, device_index_, consumer_stream);
      } else {
        engine.backend().wait_on(*batch.ready, nullptr);
        packed = packed_tensor(batch.destination);
      }
    }
    return with_tensors ? leaf_views(packed, batch.leaves) : py::list();
  }

  const bool is_cuda_;
  const int device_index_;
  std::mutex mutex_;
  std::shared_ptr<Engine> engine_;
  std::shared_ptr<BufferPool> pool_;
  DestinationAllocator allocate_;
  std::optional<StagedBatch> staged_;  // used by the producer thread only
};

}  // namespace

void bind_engine(py::module_& m, py::module_& testing) {
  // The names of what Engine.next returns first: the core's NextStatus, returned as an int and
  // named by a Python IntEnum (an IntEnum member equals its int, and comparing one is no call
  // into C++: the producer compares a status once a batch; a pybind11 enum's == would cross, and
  // under pybind11 3 it no longer equals the int). Built here from the C++ values, one list.
  {

    const std::pair<const char*, NextStatus> members[] = {
        {"BATCH", NextStatus::kBatch},         // the next batch of the epoch, in order
        {"END", NextStatus::kEnd},             // the producer finished the epoch; nothing is left
        {"FAILED", NextStatus::kFailed},       // ... with an error; nothing is left
        {"TIMEOUT", NextStatus::kTimeout},     // nothing arrived within timeout_s
        {"CANCELLED", NextStatus::kCancelled}, // close(), cancel(token), or a newer epoch
    };
    py::list items;
    for (const auto& [name, value] : members) items.append(py::make_tuple(name, static_cast<int>(value)));
    py::object status = py::module_::import("enum").attr("IntEnum")("NextStatus", items);
    status.attr("__module__") = m.attr("__name__");
    status.attr("__doc__") =
        "The outcome of Engine.next(token, timeout_s): the first item of the (status, seq, "
        "tensors) it returns, an int equal to one of these. BATCH: the next batch of the epoch, "
        "in order; END: the producer finished the epoch, nothing is left; FAILED: the producer "
        "finished it with an error, nothing is left; TIMEOUT: nothing arrived within timeout_s; "
        "CANCELLED: the epoch was cancelled (close(), cancel(token), or a newer epoch).";
    m.attr("NextStatus") = status;
  }
  py::class_<HostPin, std::shared_ptr<HostPin>>(
      m, "HostPin", "A host block registered with an engine's copy stream while this object lives")
      .def_property_readonly("block", &HostPin::block);
  py::class_<PyEngine>(m, "Engine")
      .def(py::init<const std::string&, int, int, int, int64_t>(), py::arg("device_type"),
           py::arg("device_index"), py::arg("depth"), py::arg("num_threads"),
           py::arg("max_batch_bytes") = 0)
      .def("start_epoch", &PyEngine::start_epoch)
      .def("stage", &PyEngine::stage, py::arg("token"), py::arg("leaves"),
           py::arg("wait_for_copy") = true,
           "submit() up to the copy, for a list of prefetch._engine.tree.Leaf; returns (seq, "
           "tensors).")
      .def("stage_packed", &PyEngine::stage_packed, py::arg("token"), py::arg("data"),
           py::arg("layout"), py::arg("pin"), py::arg("slot"), py::arg("wait_for_copy") = true,
           "stage() for a batch packed in one host buffer already (prefetch._engine.tree.Packed's "
           "fields): one copy; a worker ring `slot` is leased and freed once the copy has read "
           "it. Returns (seq, tensors).")
      .def("register_host", &PyEngine::register_host, py::arg("block"),
           "Registers a uint8 host block for fast asynchronous copies (CUDA: cudaHostRegister) "
           "while the returned HostPin lives.")
      .def("publish", &PyEngine::publish, py::arg("token"))
      .def_property_readonly("stream_handle", &PyEngine::stream_handle)
      .def("finish", &PyEngine::finish, py::arg("token"), py::arg("failed"))
      .def("next", &PyEngine::next, py::arg("token"), py::arg("timeout_s"),
           py::arg("with_tensors") = true,
           "Waits for the next batch: (NextStatus, seq, tensors); a negative timeout_s waits "
           "forever.")
      .def("cancel", &PyEngine::cancel, py::arg("token"))
      .def("close", &PyEngine::close)
      .def_property_readonly("closed", &PyEngine::closed)
      .def("stats", &PyEngine::stats,
           "The engine's counters (EngineStats) under their own names, times in seconds.")
      .def("record_copies", &PyEngine::record_copies, py::arg("capacity"),
           "Starts a new copy timeline keeping the last `capacity` batches' copies (0: stop): "
           "each costs two timed events on the copy stream.")
      .def("copy_timeline", &PyEngine::copy_timeline,
           "The copy timeline, oldest first: a dict per batch (CopyRecord in csrc/core/engine.h): "
           "batch, slot (-1: a packed source), bytes, and in seconds since the timeline "
           "started the producer's wait_start_s, collate_start_s, collate_end_s, enqueued_s (host "
           "clock) and the copy's copy_start_s, copy_end_s (copy stream: CUDA timing events). "
           "Waits for the recorded copies.")
      .def_property_readonly("num_threads", &PyEngine::num_threads)
      .def_property_readonly("backend", &PyEngine::backend_name);


  testing.def("submit", &PyEngine::submit, py::arg("engine"), py::arg("token"), py::arg("leaves"),
              "Collates and copies a batch, a list of prefetch._engine.tree.Leaf; returns its "
              "sequence number (the core's one-call path, which the product runs as stage + "
              "publish).");
  testing.def("set_debug_delay", &PyEngine::set_debug_delay, py::arg("engine"), py::arg("max_us"),
              py::arg("seed") = 0,
              "Delays every piece of the host copy stream's work by up to max_us (random, seeded), "
              "so that a missing wait shows as a wrong batch.");
  testing.def("packed_in_flight", &PyEngine::packed_in_flight, py::arg("engine"),
              "Packed sources (worker ring slots) the engine holds until their copy has run.");
  testing.def("slot_capacities", &PyEngine::slot_capacities, py::arg("engine"),
              "The bytes of each slot of the engine's pinned ring.");
  testing.def("model_copy_engine", &PyEngine::model_copy_engine, py::arg("engine"),
              py::arg("bytes_per_s"),
              "Makes a CPU engine a model of the CUDA path: its batches go through the ring and a "
              "copy on the host copy stream, which moves bytes_per_s (0: memcpy's speed), one copy "
              "at a time, as a GPU's copy engine does. Between epochs.");
}

}  // namespace prefetch
