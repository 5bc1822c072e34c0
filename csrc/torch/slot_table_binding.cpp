// _C.SlotTable: the worker ring's slot table (csrc/core/slot_table.h) over the shared control
// tensor, for prefetch/sources/worker_ring.py. Each process makes one; a DataLoader worker and
// the main process each cross into C++ once per transition of a slot: a worker's place() lays
// its batch out, claims a slot, writes every leaf into it and commits it in one call.
#include <torch/csrc/utils/pybind.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/from_blob.h>
#include <torch/csrc/autograd/python_variable.h>

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "checked_math.h"
#include "errors.h"
#include "packed_layout.h"
#include "readable.h"
#include "slot_table.h"
#include "streaming_copy.h"

namespace py = pybind11;

namespace prefetch {
namespace {

// What place() returns instead of a placed batch.
enum Unplaced : int {
  kPaused = 0,    // no Prefetcher epoch reads the ring (not counted)
  kFellBack = 1,  // the batch goes the usual way (counted)
  kStarved = 2,   // the same, because every slot stayed taken for the whole patience
};

// Each leaf starts on its own cache line.
constexpr size_t kLeafAlignment = 64;

// One leaf of a batch as a worker writes it into its slot: a tensor copied as it is, the rows of a
// Samples (one shape and dtype: stacked), or a Ragged's values (one dtype: their elements one
// after another).
struct LeafWrite {
  std::vector<at::Tensor> parts;
  LeafOut out;
};

// The worker's batch laid out in a slot, every sample checked here once (readable(): what the
// engine would read, and the same shape and dtype as sample 0 where they are stacked); nullopt
// for anything else, which the main process then collates itself and names the problem of.
std::optional<std::vector<LeafWrite>> lay_out(const py::list& values, size_t* total) {
  std::vector<LeafWrite> leaves;
  leaves.reserve(values.size());
  size_t offset = 0;
  auto tensor = [](py::handle item) -> std::optional<at::Tensor> {
    if (!THPVariable_Check(item.ptr())) return std::nullopt;
    try {
      return readable(THPVariable_Unpack(item.ptr()), std::string());
    } catch (const CollateError&) {
      return std::nullopt;
    }
  };
  for (const py::handle value : values) {
    LeafWrite leaf;
    const bool stacked = PyList_Check(value.ptr());
    if (stacked || PyTuple_Check(value.ptr())) {
      const auto samples = py::reinterpret_borrow<py::sequence>(value);
      if (samples.size() == 0) return std::nullopt;
      int64_t elements = 0;
      for (const py::handle item : samples) {
        std::optional<at::Tensor> t = tensor(item);
        if (!t) return std::nullopt;
        if (!leaf.parts.empty() && (t->scalar_type() != leaf.parts[0].scalar_type() ||
                                    (stacked && t->sizes() != leaf.parts[0].sizes()))) {
          return std::nullopt;
        }
        elements = checked_add(elements, t->numel(), "a Ragged's element count");
        leaf.parts.push_back(std::move(*t));
      }
      const at::Tensor& first = leaf.parts[0];
      if (stacked) {
        leaf.out.shape.push_back(static_cast<int64_t>(leaf.parts.size()));
        leaf.out.shape.insert(leaf.out.shape.end(), first.sizes().begin(), first.sizes().end());
      } else {
        leaf.out.shape.assign(1, elements);
      }
      leaf.out.nbytes = checked_mul(static_cast<size_t>(elements), static_cast<size_t>(first.element_size()),
                                    "a leaf's bytes");
    } else {
      std::optional<at::Tensor> t = tensor(value);
      if (!t) return std::nullopt;
      leaf.out.shape.assign(t->sizes().begin(), t->sizes().end());
      leaf.out.nbytes = t->nbytes();
      leaf.parts.push_back(std::move(*t));
    }
    leaf.out.dtype_code = static_cast<int64_t>(leaf.parts[0].scalar_type());
    leaf.out.offset = offset;
    offset = checked_round_up(checked_add(offset, leaf.out.nbytes, "a batch's bytes"), kLeafAlignment,
                              "a batch's bytes");
    leaves.push_back(std::move(leaf));
  }
  *total = offset;
  return leaves;
}

void write_part(std::byte* dst, const at::Tensor& t) {
  if (t.numel() == 0) return;
  if (t.is_contiguous()) {
    // Non-temporal stores for large samples: the slot is read next by another process, never by
    // this core. (torch.stack into the slot ran at about half the speed: `python -m prefetch.bench
    // --sections workers`.)
    copy_bytes(dst, t.const_data_ptr(), t.nbytes());
  } else {  // a strided view (a flip): torch's own strided copy
    at::from_blob(dst, t.sizes(), at::TensorOptions().dtype(t.scalar_type())).copy_(t);
  }
}

void write_leaves(std::byte* slot, const std::vector<LeafWrite>& leaves) {
  at::NoGradGuard no_grad;
  for (const LeafWrite& leaf : leaves) {
    std::byte* at = slot + leaf.out.offset;
    for (const at::Tensor& part : leaf.parts) {
      write_part(at, part);
      at += part.nbytes();
    }
  }
}

py::object place(SlotTable& table, int64_t serial, int64_t version, py::handle block_obj,
                 const py::list& values, double patience_s, int64_t parent_pid) {
  size_t total = 0;
  std::optional<std::vector<LeafWrite>> leaves = lay_out(values, &total);
  if (!leaves) {
    table.fall_back(0);
    return py::int_(static_cast<int>(kFellBack));
  }
  const std::optional<SlotTable::Announcement> announced = table.announcement(serial);
  if (!announced) return py::int_(static_cast<int>(kPaused));
  const auto needed = static_cast<int64_t>(total);
  if (block_obj.is_none() || announced->version != version || !THPVariable_Check(block_obj.ptr())) {
    table.fall_back(needed);  // its block has not reached this worker yet
    return py::int_(static_cast<int>(kFellBack));
  }
  const at::Tensor& block = THPVariable_Unpack(block_obj.ptr());
  TORCH_CHECK(block.device().is_cpu() && block.scalar_type() == at::kByte && block.is_contiguous() &&
                  block.dim() == 1,
              "prefetch: a worker ring block must be a contiguous 1-D uint8 CPU tensor, got ",
              block.scalar_type(), " ", block.sizes());
  const size_t slot_bytes = table.slot_bytes(static_cast<size_t>(block.numel()));
  if (total == 0 || total > slot_bytes) {
    table.fall_back(needed);
    return py::int_(static_cast<int>(kFellBack));
  }
  const auto patience = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(patience_s > 0 ? patience_s : 0.0));
  const int64_t pid = getpid();
  SlotTable::Claim claim;
  bool committed = false;
  {
    py::gil_scoped_release nogil;
    claim = table.claim(*announced, serial, pid, patience, parent_pid);
    if (claim.slot >= 0) {
      const auto start = std::chrono::steady_clock::now();
      try {
        write_leaves(static_cast<std::byte*>(block.data_ptr()) + static_cast<size_t>(claim.slot) * slot_bytes,
                     *leaves);
        committed = table.commit(claim.slot, announced->generation, pid,
                                 std::chrono::steady_clock::now() - start);
      } catch (const std::exception&) {
        // The batch goes the usual way, where whatever failed here is raised with its name.
        table.abandon(claim.slot, announced->generation, pid);
      }
    }
  }
  if (claim.slot < 0) {
    table.fall_back(0);
    return py::int_(static_cast<int>(claim.starved ? kStarved : kFellBack));
  }
  if (!committed) return py::int_(static_cast<int>(kFellBack));
  std::vector<LeafOut> layout;
  layout.reserve(leaves->size());
  for (LeafWrite& leaf : *leaves) layout.push_back(std::move(leaf.out));
  return py::make_tuple(announced->generation, claim.slot, layout_to_python(layout));
}

std::shared_ptr<SlotTable> make_table(const at::Tensor& words, int64_t slots) {
  TORCH_CHECK(words.device().is_cpu() && words.scalar_type() == at::kLong && words.is_contiguous() &&
                  words.dim() == 1,
              "prefetch: a slot table's words must be a contiguous 1-D int64 CPU tensor, got ",
              words.scalar_type(), " ", words.sizes(), " on ", words.device());
  TORCH_CHECK(slots > 0, "prefetch: a slot table needs at least one slot, got ", slots);
  return std::make_shared<SlotTable>(words.data_ptr<int64_t>(), static_cast<size_t>(words.numel()),
                                     static_cast<size_t>(slots), std::make_shared<at::Tensor>(words));
}

}  // namespace

void bind_slot_table(py::module_& m) {
  py::class_<SlotTable, std::shared_ptr<SlotTable>>(
      m, "SlotTable",
      "The worker ring's slot table (csrc/core/slot_table.h) over a shared int64 tensor of "
      "words_for(slots) words; one per process.")
      .def(py::init(&make_table), py::arg("words"), py::arg("slots"))
      .def_static("words_for", [](int64_t slots) { return SlotTable::words_for(static_cast<size_t>(slots)); })
      .def_property_readonly("slots", &SlotTable::slots)
      // --- a worker
      .def(
          "accepting",
          [](const SlotTable& t, int64_t serial) -> std::optional<int64_t> {
            auto announced = t.announcement(serial);
            if (!announced) return std::nullopt;
            return announced->version;
          },
          py::arg("serial"),
          "The announced block version while an epoch of DataLoader iterator `serial` reads the "
          "ring, else None.")
      .def("place", &place, py::arg("serial"), py::arg("version"), py::arg("block"),
           py::arg("values"), py::arg("patience_s"), py::arg("parent_pid"),
           "A worker's batch (the values of flatten's leaves) written into a claimed slot of "
           "`block` and committed: (generation, slot, layout); else 0 (paused), 1 (fell back) or "
           "2 (fell back: every slot stayed taken for `patience_s`).")
      .def("fall_back", &SlotTable::fall_back, py::arg("needed_bytes") = 0)
      // --- the main process
      .def("pause", &SlotTable::pause)
      .def(
          "open_epoch",
          [](SlotTable& t, int64_t serial) { t.open_epoch(serial, getpid(), process_alive); },
          py::arg("serial"))
      .def(
          "announce_block",
          [](SlotTable& t, int64_t version, int64_t slot_bytes) {
            t.announce_block(version, slot_bytes, getpid(), process_alive);
          },
          py::arg("version"), py::arg("slot_bytes"))
      .def("needs_growth", &SlotTable::needs_growth)
      .def_property_readonly("needed_bytes", &SlotTable::needed_bytes)
      .def(
          "stats",
          [](const SlotTable& t) {
            const SlotTableCounters c = t.counters();
            py::dict d;
            d["worker_ring_batches"] = c.ring_batches;
            d["worker_ring_fallbacks"] = c.fallbacks;
            d["worker_write_s"] = static_cast<double>(c.write_ns) * 1e-9;
            d["worker_slot_wait_s"] = static_cast<double>(c.wait_ns) * 1e-9;
            d["slot_bytes"] = c.slot_bytes;
            return d;
          },
          "The workers' counters, summed, under the Prefetcher's stats() names.");
}

// Inspection and a bare lease, for tests only (_C._testing).
void bind_slot_table_testing(py::module_& testing) {
  testing.attr("FREE") = static_cast<int>(SlotState::kFree);
  testing.attr("WRITING") = static_cast<int>(SlotState::kWriting);
  testing.attr("SENT") = static_cast<int>(SlotState::kSent);
  testing.attr("LEASED") = static_cast<int>(SlotState::kLeased);
  testing.def(
      "slot_words",
      [](const SlotTable& t) {
        std::vector<std::tuple<int64_t, int64_t, int>> out;
        for (size_t i = 0; i < t.slots(); ++i) {
          const SlotWord w = t.word(i);
          out.emplace_back(w.generation, w.pid, static_cast<int>(w.state));
        }
        return out;
      },
      "(generation, pid, state) of every slot word");
  testing.def("slot_generation", &SlotTable::generation);
  py::class_<SlotLease, std::shared_ptr<SlotLease>>(testing, "SlotLease")
      .def("__call__", &SlotLease::release)
      .def_property_readonly("released", &SlotLease::released);
  testing.def(
      "lease",
      [](SlotTable& t, int64_t slot, int64_t generation) {
        TORCH_CHECK(slot >= 0 && static_cast<size_t>(slot) < t.slots(), "prefetch: slot ", slot,
                    " of a table of ", t.slots(), " slots");
        return t.lease(static_cast<size_t>(slot), generation);
      },
      py::arg("table"), py::arg("slot"), py::arg("generation"),
      "SENT -> LEASED: the hold the engine gets, or None when the word is not SENT(generation)");
}

}  // namespace prefetch
